'use strict';
// Writing GGUF files, for tests: tiny random Llama models that exercise the
// loader and the graphs without the real model files.

const { ggmlTypeId, tensorByteLength } = require('../gguf');
const { BYTE_TO_CHAR, TOKEN_NORMAL, TOKEN_CONTROL } = require('../tokenizer');
const { f32ToF16, f16ToF32 } = require('../quant');
const { mulberry32 } = require('../sampling');

/**
 * gguf_type
 * @type {Record<string, number>}
 */
const VALUE_TYPES = {
  u8: 0,
  i8: 1,
  u16: 2,
  i16: 3,
  u32: 4,
  i32: 5,
  f32: 6,
  bool: 7,
  string: 8,
  array: 9,
  u64: 10,
  i64: 11,
  f64: 12,
};

/**
 * A metadata value and its GGUF type. The value is whatever JS value the
 * type is written from (number, bigint, string, boolean, array), hence `any`.
 * @typedef {{ type: string, value: any, itemType?: string }} TypedValue
 */

/**
 * A metadata value with an explicit GGUF type, for values whose type
 * cannot be told from the JS value (a float that happens to be integral,
 * a u64, ...). Arrays: `typed('array', values, 'f32')`.
 * @param {string} type
 * @param {any} value
 * @param {string} [itemType]
 * @returns {TypedValue}
 */
function typed(type, value, itemType) {
  if (!(type in VALUE_TYPES)) throw new Error(`unknown GGUF value type ${type}`);
  if (itemType !== undefined && !(itemType in VALUE_TYPES)) throw new Error(`unknown GGUF value type ${itemType}`);
  return { type, value, itemType };
}

/**
 * @param {unknown} v
 * @returns {v is TypedValue}
 */
function isTyped(v) {
  return (
    v !== null && typeof v === 'object' && !Array.isArray(v) && 'type' in v && typeof v.type === 'string' && 'value' in v
  );
}

/**
 * @param {unknown} v
 * @returns {string}
 */
function inferType(v) {
  if (typeof v === 'string') return 'string';
  if (typeof v === 'boolean') return 'bool';
  if (typeof v === 'bigint') return 'u64';
  if (typeof v === 'number') {
    if (Number.isInteger(v)) return v >= 0 && v <= 0xffffffff ? 'u32' : 'i32';
    return 'f32';
  }
  throw new Error(`cannot tell the GGUF type of ${String(v)}: use typed()`);
}

/**
 * @param {unknown[]} arr
 * @returns {string}
 */
function inferItemType(arr) {
  if (arr.length === 0) return 'i32';
  if (arr.every((x) => typeof x === 'string')) return 'string';
  if (arr.every((x) => typeof x === 'boolean')) return 'bool';
  if (arr.every((x) => Number.isInteger(x))) return 'i32';
  if (arr.every((x) => typeof x === 'number')) return 'f32';
  throw new Error('an array of mixed values: use typed()');
}

/** Little-endian writer into a growing list of chunks. */
class Writer {
  constructor() {
    /** @type {Buffer[]} */
    this.chunks = [];
    this.length = 0;
  }

  /** @param {Buffer} buf */
  push(buf) {
    this.chunks.push(buf);
    this.length += buf.length;
  }

  /**
   * @param {string} type
   * @param {any} v a value of the GGUF type `type`: number, bigint, boolean or string
   */
  scalar(type, v) {
    let b;
    switch (type) {
      case 'u8': b = Buffer.alloc(1); b.writeUInt8(v); break;
      case 'i8': b = Buffer.alloc(1); b.writeInt8(v); break;
      case 'u16': b = Buffer.alloc(2); b.writeUInt16LE(v); break;
      case 'i16': b = Buffer.alloc(2); b.writeInt16LE(v); break;
      case 'u32': b = Buffer.alloc(4); b.writeUInt32LE(v); break;
      case 'i32': b = Buffer.alloc(4); b.writeInt32LE(v); break;
      case 'f32': b = Buffer.alloc(4); b.writeFloatLE(v); break;
      case 'bool': b = Buffer.from([v ? 1 : 0]); break;
      case 'u64': b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(v)); break;
      case 'i64': b = Buffer.alloc(8); b.writeBigInt64LE(BigInt(v)); break;
      case 'f64': b = Buffer.alloc(8); b.writeDoubleLE(v); break;
      case 'string': {
        const s = Buffer.from(String(v), 'utf8');
        this.scalar('u64', s.length);
        b = s;
        break;
      }
      default:
        throw new Error(`cannot write a GGUF value of type ${type}`);
    }
    this.push(b);
  }

  /**
   * @param {string} type
   * @param {any} v a value of the GGUF type `type`, or an array of itemType's
   * @param {string} [itemType]
   */
  value(type, v, itemType) {
    if (type !== 'array') {
      this.scalar(type, v);
      return;
    }
    if (!Array.isArray(v)) throw new Error('an array value must be an array');
    const item = itemType ?? inferItemType(v);
    if (item === 'array') throw new Error('nested arrays are not written here');
    this.scalar('u32', VALUE_TYPES[item]);
    this.scalar('u64', v.length);
    for (const x of v) this.scalar(item, x);
  }

  /** @param {number} alignment */
  pad(alignment) {
    const n = (alignment - (this.length % alignment)) % alignment;
    if (n) this.push(Buffer.alloc(n));
  }

  toBuffer() {
    return Buffer.concat(this.chunks, this.length);
  }
}

/**
 * Writes a GGUF v3 file. Metadata values are written with the type told by
 * `typed()`, else by the JS value: string, bool, integer → u32 (i32 when
 * negative), other number → f32, bigint → u64, arrays of strings / integers
 * (i32) / numbers (f32). Tensor data is laid out in order, each aligned to
 * `general.alignment` (32 when absent).
 *
 * @param {{ metadata: Record<string, any>,
 *   tensors: Array<{ name: string, type: string | number, dims: number[], bytes: Uint8Array }> }} spec
 * @returns {Buffer}
 */
function writeGguf({ metadata, tensors }) {
  const alignment = Number(isTyped(metadata['general.alignment'])
    ? metadata['general.alignment'].value
    : metadata['general.alignment'] ?? 32);
  const w = new Writer();
  w.push(Buffer.from('GGUF', 'latin1'));
  w.scalar('u32', 3);
  w.scalar('u64', tensors.length);
  w.scalar('u64', Object.keys(metadata).length);
  for (const [key, raw] of Object.entries(metadata)) {
    const { type, value, itemType } = isTyped(raw)
      ? raw
      : { type: Array.isArray(raw) ? 'array' : inferType(raw), value: raw, itemType: undefined };
    w.scalar('string', key);
    w.scalar('u32', VALUE_TYPES[type]);
    w.value(type, value, itemType);
  }
  let offset = 0;
  const placed = tensors.map((t) => {
    const typeId = typeof t.type === 'number' ? t.type : ggmlTypeId(t.type);
    if (typeof t.type === 'string') {
      const expected = tensorByteLength(t.type, t.dims);
      if (expected !== undefined && expected !== t.bytes.length) {
        throw new Error(`tensor ${t.name}: ${t.bytes.length} bytes, but ${t.type} [${t.dims}] takes ${expected}`);
      }
    }
    const at = offset;
    offset += t.bytes.length;
    offset += (alignment - (offset % alignment)) % alignment;
    return { ...t, typeId, at };
  });
  for (const t of placed) {
    w.scalar('string', t.name);
    w.scalar('u32', t.dims.length);
    for (const d of t.dims) w.scalar('u64', d);
    w.scalar('u32', t.typeId);
    w.scalar('u64', t.at);
  }
  w.pad(alignment);
  for (const t of placed) {
    w.push(Buffer.from(t.bytes.buffer, t.bytes.byteOffset, t.bytes.byteLength));
    w.pad(alignment);
  }
  return w.toBuffer();
}

// float16 bits and the seeded generator are the model code's own.
const rng = mulberry32;

/**
 * Random tensor data of `type` and `dims`: quantized blocks whose f16
 * scales are small finite numbers (0.01 to 0.1; Q4_1 minimums about
 * -8 scales, so that weights centre on 0), F32/F16 values near 1 (what
 * norm weights are).
 * @param {string} type
 * @param {number[]} dims
 * @param {() => number} random
 * @returns {Uint8Array}
 */
function randomTensorBytes(type, dims, random) {
  const n = tensorByteLength(type, dims);
  if (n === undefined) throw new Error(`no random data for type ${type}`);
  const bytes = new Uint8Array(n);
  const view = new DataView(bytes.buffer);
  const scale = () => f32ToF16(0.01 + 0.09 * random());
  if (type === 'Q4_1') {
    for (let o = 0; o < n; o += 20) {
      const d = scale();
      view.setUint16(o, d, true);
      view.setUint16(o + 2, f32ToF16(-f16ToF32(d) * (7.5 + random())), true);
      for (let i = 4; i < 20; i++) bytes[o + i] = Math.floor(random() * 256);
    }
  } else if (type === 'Q8_0') {
    for (let o = 0; o < n; o += 34) {
      view.setUint16(o, scale(), true);
      for (let i = 2; i < 34; i++) bytes[o + i] = Math.floor(random() * 255) - 127 & 0xff;
    }
  } else if (type === 'Q4_0') {
    for (let o = 0; o < n; o += 18) {
      view.setUint16(o, scale(), true);
      for (let i = 2; i < 18; i++) bytes[o + i] = Math.floor(random() * 256);
    }
  } else if (type === 'F32') {
    for (let o = 0; o < n; o += 4) view.setFloat32(o, 0.9 + 0.2 * random(), true);
  } else if (type === 'F16') {
    for (let o = 0; o < n; o += 2) view.setUint16(o, f32ToF16(0.9 + 0.2 * random()), true);
  } else {
    // Other types: raw bytes, which only the loader's checks look at.
    for (let i = 0; i < n; i++) bytes[i] = Math.floor(random() * 256);
  }
  return bytes;
}

const CHATML_TEMPLATE =
  "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}" +
  "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

// Merges of the tiny vocabulary, in GPT-2's byte alphabet (Ġ is a space, Ċ a
// newline); 'Ã ©' joins the two bytes of 'é'.
const TINY_MERGES = [
  'Ġ t', 'h e', 'Ġt he', 'i n', 'e r', 'Ġ a', 'l l', 'Ġ Ġ', 'ĠĠ ĠĠ', 'o r', 'Ġ w', 'Ġw or', 'l d', 'Ġwor ld',
  'h e', 'he ll', 'hell o', 'Ã ©', 'Ċ Ċ', 'Ġ s',
].filter((m, i, all) => all.indexOf(m) === i);

/**
 * The vocabulary of tinyLlama: the control tokens `<|endoftext|>` (0),
 * `<|im_start|>` (1), `<|im_end|>` (2), the 256 byte tokens, and the
 * tokens of a few merges.
 * @returns {{ tokens: string[], tokenTypes: number[], merges: string[] }}
 */
function tinyVocab() {
  const tokens = ['<|endoftext|>', '<|im_start|>', '<|im_end|>'];
  const tokenTypes = [TOKEN_CONTROL, TOKEN_CONTROL, TOKEN_CONTROL];
  for (let b = 0; b < 256; b++) {
    tokens.push(BYTE_TO_CHAR[b]);
    tokenTypes.push(TOKEN_NORMAL);
  }
  for (const m of TINY_MERGES) {
    const t = m.replace(' ', '');
    if (!tokens.includes(t)) {
      tokens.push(t);
      tokenTypes.push(TOKEN_NORMAL);
    }
  }
  return { tokens, tokenTypes, merges: TINY_MERGES };
}

/**
 * The spec (for writeGguf) of a small random Llama model with a ChatML
 * template: Q4_1 matrices, Q8_0 token_embd, F32 norms.
 *
 * @param {{ nLayer?: number, nEmbd?: number, nHead?: number, nHeadKv?: number, nFF?: number, nCtx?: number,
 *   ropeBase?: number, rmsEps?: number, seed?: number, tiedOutput?: boolean, matrixType?: string,
 *   embdType?: string, name?: string, nVocab?: number }} [options]
 *   tiedOutput false adds an output.weight (Q8_0) instead of reusing token_embd;
 *   nVocab pads the vocabulary with tokens of their own (`<|pad_N|>`) to
 *   that size, for a model of a real model's shapes
 * @returns {{ metadata: Record<string, any>,
 *   tensors: Array<{ name: string, type: string, dims: number[], bytes: Uint8Array }> }}
 */
function tinyLlama(options = {}) {
  const {
    nLayer = 2,
    nEmbd = 64,
    nHead = 4,
    nHeadKv = 2,
    nFF = 128,
    nCtx = 256,
    ropeBase = 10000,
    rmsEps = 1e-5,
    seed = 1,
    tiedOutput = true,
    matrixType = 'Q4_1',
    embdType = 'Q8_0',
    name = 'tiny-llama',
    nVocab: vocabSize = 0,
  } = options;
  const headDim = nEmbd / nHead;
  const vocab = tinyVocab();
  for (let i = 0; vocab.tokens.length < vocabSize; i++) {
    vocab.tokens.push(`<|pad_${i}|>`);
    vocab.tokenTypes.push(TOKEN_NORMAL);
  }
  const nVocab = vocab.tokens.length;
  const random = rng(seed);
  /** @type {Array<{ name: string, type: string, dims: number[], bytes: Uint8Array }>} */
  const tensors = [];
  /**
   * @param {string} tname
   * @param {string} type
   * @param {number[]} dims
   */
  const add = (tname, type, dims) => tensors.push({ name: tname, type, dims, bytes: randomTensorBytes(type, dims, random) });
  add('token_embd.weight', embdType, [nEmbd, nVocab]);
  add('output_norm.weight', 'F32', [nEmbd]);
  if (!tiedOutput) add('output.weight', embdType, [nEmbd, nVocab]);
  for (let i = 0; i < nLayer; i++) {
    add(`blk.${i}.attn_norm.weight`, 'F32', [nEmbd]);
    add(`blk.${i}.attn_q.weight`, matrixType, [nEmbd, nHead * headDim]);
    add(`blk.${i}.attn_k.weight`, matrixType, [nEmbd, nHeadKv * headDim]);
    add(`blk.${i}.attn_v.weight`, matrixType, [nEmbd, nHeadKv * headDim]);
    add(`blk.${i}.attn_output.weight`, matrixType, [nHead * headDim, nEmbd]);
    add(`blk.${i}.ffn_norm.weight`, 'F32', [nEmbd]);
    add(`blk.${i}.ffn_gate.weight`, matrixType, [nEmbd, nFF]);
    add(`blk.${i}.ffn_up.weight`, matrixType, [nEmbd, nFF]);
    add(`blk.${i}.ffn_down.weight`, matrixType, [nFF, nEmbd]);
  }
  const metadata = {
    'general.architecture': 'llama',
    'general.name': name,
    'general.alignment': typed('u32', 32),
    'llama.block_count': typed('u32', nLayer),
    'llama.context_length': typed('u32', nCtx),
    'llama.embedding_length': typed('u32', nEmbd),
    'llama.feed_forward_length': typed('u32', nFF),
    'llama.attention.head_count': typed('u32', nHead),
    'llama.attention.head_count_kv': typed('u32', nHeadKv),
    'llama.rope.freq_base': typed('f32', ropeBase),
    'llama.attention.layer_norm_rms_epsilon': typed('f32', rmsEps),
    'llama.rope.dimension_count': typed('u32', headDim),
    'llama.vocab_size': typed('u32', nVocab),
    'tokenizer.ggml.model': 'gpt2',
    'tokenizer.ggml.pre': 'smollm',
    'tokenizer.ggml.tokens': vocab.tokens,
    'tokenizer.ggml.token_type': typed('array', vocab.tokenTypes, 'i32'),
    'tokenizer.ggml.merges': vocab.merges,
    'tokenizer.ggml.bos_token_id': typed('u32', 1),
    'tokenizer.ggml.eos_token_id': typed('u32', 2),
    'tokenizer.ggml.add_bos_token': false,
    'tokenizer.chat_template': CHATML_TEMPLATE,
  };
  return { metadata, tensors };
}

module.exports = { writeGguf, tinyLlama, tinyVocab, typed, f32ToF16, f16ToF32, rng, randomTensorBytes, CHATML_TEMPLATE };
