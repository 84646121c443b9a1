'use strict';
// GGUF files (the llama.cpp model format): the header is parsed by
// @huggingface/gguf; this module adds the absolute position and size of each
// tensor's data, checks them against the file, and builds a Llama model
// description whose tensors read their bytes from the file when asked
// (once each, when a runner creates its weights): the model holds no copy
// of the weights, so they are in memory once, where the backend keeps them.

const fs = require('fs');
const { gguf, GGMLQuantizationType } = require('@huggingface/gguf');
const { LlamaTokenizer } = require('./tokenizer');

/**
 * A tensor of a model: its type, its GGUF dims (ne0 first), its size, and
 * `read()`, which reads its data as the file holds it (never dequantized)
 * into a new buffer; it throws when the file is gone or has changed size.
 * @typedef {{ type: string, dims: number[], byteLength: number, read: () => Uint8Array }} GgufTensor
 */
/**
 * The hyperparameters of a Llama-family model.
 * @typedef {{ nLayer: number, nEmbd: number, nHead: number, nHeadKv: number, headDim: number, nFF: number,
 *   rmsEps: number, ropeBase: number, ropeDim: number, nCtx: number, nVocab: number }} LlamaConfig
 */
/**
 * What the graphs and the runner read of a model: its config and tensors.
 * @typedef {{ config: LlamaConfig, tensors: Map<string, GgufTensor> }} LlamaWeights
 */
/**
 * A model loaded by loadLlama. `metadata` holds the file's key/value pairs
 * as they are: their types are whatever the file says, hence `any`.
 * @typedef {LlamaWeights & { arch: 'llama', name: string | undefined,
 *   tokenizer: LlamaTokenizer, chatTemplate: string | undefined,
 *   bosId: number | undefined, eosId: number | undefined, eogIds: number[],
 *   metadata: Record<string, any> }} LlamaModel
 */

/**
 * Block layout of the ggml types: [type id, weights per block, bytes per
 * block]. Types not listed here (the IQ family, ...) are named but get no
 * byteLength, and no model built here uses them.
 * @type {Record<string, [id: number, blockSize: number, blockBytes: number]>}
 */
const GGML_TYPES = {
  F32: [0, 1, 4],
  F16: [1, 1, 2],
  Q4_0: [2, 32, 18],
  Q4_1: [3, 32, 20],
  Q5_0: [6, 32, 22],
  Q5_1: [7, 32, 24],
  Q8_0: [8, 32, 34],
  Q8_1: [9, 32, 36],
  Q2_K: [10, 256, 84],
  Q3_K: [11, 256, 110],
  Q4_K: [12, 256, 144],
  Q5_K: [13, 256, 176],
  Q6_K: [14, 256, 210],
  Q8_K: [15, 256, 292],
  I8: [24, 1, 1],
  I16: [25, 1, 2],
  I32: [26, 1, 4],
  I64: [27, 1, 8],
  F64: [28, 1, 8],
  BF16: [30, 1, 2],
};
const TYPE_BY_ID = new Map(Object.entries(GGML_TYPES).map(([name, [id]]) => [id, name]));

/** The types the Llama graphs of lib/llm know how to run. */
const SUPPORTED_TYPES = new Set(['F32', 'F16', 'Q4_1', 'Q8_0']);

const DEFAULT_ALIGNMENT = 32;

/**
 * The ggml type name of a type id ('Q4_1', ...), or `TYPE_<id>` for an id
 * no table knows.
 * @param {number} id
 * @returns {string}
 */
function ggmlTypeName(id) {
  return TYPE_BY_ID.get(id) ?? GGMLQuantizationType[id] ?? `TYPE_${id}`;
}

/**
 * The ggml type id of a type name.
 * @param {string} name
 * @returns {number}
 */
function ggmlTypeId(name) {
  // Own keys only: a name such as "toString" is not a type.
  if (Object.hasOwn(GGML_TYPES, name)) return GGML_TYPES[name][0];
  // The library's enum, looked up by a name that may not be in it.
  const id = /** @type {Record<string, unknown>} */ (GGMLQuantizationType)[name];
  if (typeof id !== 'number') throw new Error(`unknown ggml type ${JSON.stringify(name)}`);
  return id;
}

/**
 * Bytes of a tensor of type `type` and GGUF dims `dims`, or undefined where
 * the type's block layout is not known here. Throws where ne0 is not a
 * whole number of blocks, since ggml lays blocks out along ne0 only.
 * @param {string} type
 * @param {number[]} dims
 * @returns {number | undefined}
 */
function tensorByteLength(type, dims) {
  const layout = GGML_TYPES[type];
  if (!layout) return undefined;
  const [, blockSize, blockBytes] = layout;
  const ne0 = dims.length ? dims[0] : 1;
  if (ne0 % blockSize !== 0) {
    throw new Error(`ne0 ${ne0} is not a multiple of the ${type} block size ${blockSize}`);
  }
  let rows = 1;
  for (let i = 1; i < dims.length; i++) rows *= dims[i];
  return (ne0 / blockSize) * blockBytes * rows;
}

/**
 * u64/i64 values (bigints) as numbers where they are safe integers, in
 * arrays too; other values as they are.
 * @param {unknown} v
 * @returns {unknown}
 */
function toNumber(v) {
  if (typeof v === 'bigint' && v <= BigInt(Number.MAX_SAFE_INTEGER) && v >= -BigInt(Number.MAX_SAFE_INTEGER)) {
    return Number(v);
  }
  if (Array.isArray(v)) return v.map(toNumber);
  return v;
}

/**
 * Counts in the fixed part of the header, read before handing the file to
 * @huggingface/gguf: that library reads past the end of a short file as
 * zeros, so a truncated or absurd header could otherwise make it loop over
 * millions of empty entries before failing.
 * @param {string} path
 * @param {number} fd
 * @param {number} size
 */
function checkCounts(path, fd, size) {
  const head = Buffer.alloc(24);
  const n = fs.readSync(fd, head, 0, 24, 0);
  if (n < 4 || head.toString('latin1', 0, 4) !== 'GGUF') {
    throw new Error(`${path}: not a GGUF file (no GGUF magic at the start)`);
  }
  if (n < 24) throw new Error(`${path}: truncated GGUF file (${size} bytes, shorter than the header)`);
  const version = head.readUInt32LE(4);
  if (version !== 2 && version !== 3) {
    throw new Error(`${path}: unsupported GGUF version ${version} (2 and 3 are read)`);
  }
  const tensorCount = head.readBigUInt64LE(8);
  const kvCount = head.readBigUInt64LE(16);
  // Each kv pair takes at least 13 bytes (key length, type, one byte of
  // value) and each tensor info 24 (name length, n_dims, type, offset).
  const least = 24n + kvCount * 13n + tensorCount * 24n;
  if (least > BigInt(size)) {
    throw new Error(
      `${path}: truncated or corrupt GGUF header: ${kvCount} metadata entries and ${tensorCount} tensors ` +
        `cannot fit in ${size} bytes`,
    );
  }
}

/**
 * Parses the header of the GGUF file at `path`.
 *
 * @param {string} path
 * @returns {Promise<{ version: number, alignment: number, dataOffset: number, fileSize: number,
 *   metadata: Record<string, any>,
 *   tensors: Array<{ name: string, type: string, dims: number[], offset: number, byteLength: number | undefined }> }>}
 *   `metadata` holds the header's key/value pairs (u64 values as numbers
 *   where they are safe integers); `dims` are in GGUF order (ne0 first,
 *   contiguous); `offset` is absolute in the file.
 */
async function readGguf(path) {
  let size;
  let fd;
  try {
    fd = fs.openSync(path, 'r');
    size = fs.fstatSync(fd).size;
    checkCounts(path, fd, size);
  } catch (caught) {
    // fs errors carry a code (ENOENT, ...); the GGUF checks' do not.
    const e = /** @type {NodeJS.ErrnoException} */ (caught);
    if (e && e.code) throw new Error(`${path}: cannot read the GGUF file: ${e.message}`, { cause: e });
    throw e;
  } finally {
    if (fd !== undefined) fs.closeSync(fd);
  }

  let parsed;
  try {
    parsed = await gguf(path, { allowLocalFile: true });
  } catch (caught) {
    const e = /** @type {Error | null | undefined} */ (caught);
    throw new Error(`${path}: corrupt GGUF header: ${e && e.message}`, { cause: e });
  }
  const { tensorInfos, tensorDataOffset, tensorInfoByteRange } = parsed;
  // Read by key: which keys a file holds is the file's business.
  const raw = /** @type {Record<string, unknown>} */ (parsed.metadata);
  // The library pads a short file with zeros instead of failing, so a header
  // that ends past the end of the file was read partly from nothing.
  if (tensorInfoByteRange[1] > size) {
    throw new Error(`${path}: truncated GGUF file: the header ends at byte ${tensorInfoByteRange[1]} of ${size}`);
  }

  /** @type {Record<string, any>} */
  const metadata = {};
  for (const [k, v] of Object.entries(raw)) {
    if (k === 'tensor_count' || k === 'kv_count' || k === 'version') continue;
    metadata[k] = toNumber(v);
  }
  const alignment = Number(raw['general.alignment'] ?? DEFAULT_ALIGNMENT);
  const dataOffset = Number(tensorDataOffset);

  const seen = new Set();
  const tensors = tensorInfos.map((t) => {
    // llama.cpp refuses these too: which of the two would be meant is unknown.
    if (seen.has(t.name)) throw new Error(`${path}: tensor ${t.name} appears twice`);
    seen.add(t.name);
    const dims = t.shape.map(Number);
    const type = ggmlTypeName(t.dtype);
    const relative = Number(t.offset);
    if (relative % alignment !== 0) {
      throw new Error(`${path}: tensor ${t.name}: data offset ${relative} is not aligned to ${alignment}`);
    }
    let byteLength;
    try {
      byteLength = tensorByteLength(type, dims);
    } catch (e) {
      throw new Error(`${path}: tensor ${t.name} (${type} [${dims}]): ${/** @type {Error} */ (e).message}`);
    }
    const offset = dataOffset + relative;
    if (byteLength !== undefined && offset + byteLength > size) {
      throw new Error(
        `${path}: truncated GGUF file: tensor ${t.name} (${type} [${dims}]) needs bytes ` +
          `${offset}..${offset + byteLength} but the file has ${size}`,
      );
    }
    return { name: t.name, type, dims, offset, byteLength };
  });
  return { version: Number(raw.version), alignment, dataOffset, fileSize: size, metadata, tensors };
}

/**
 * The value of `key`, checked to be a positive integer ('count') or a
 * positive finite number ('number').
 * @param {string} path
 * @param {Record<string, any>} metadata
 * @param {string} key
 * @param {'count' | 'number'} kind
 * @returns {number}
 */
function requireKey(path, metadata, key, kind) {
  const v = metadata[key];
  if (v === undefined) throw new Error(`${path}: missing metadata key ${key}`);
  if (kind === 'count' && !(Number.isInteger(v) && v > 0)) {
    throw new Error(`${path}: metadata ${key} must be a positive integer, got ${String(v)}`);
  }
  if (kind === 'number' && !(typeof v === 'number' && Number.isFinite(v) && v > 0)) {
    throw new Error(`${path}: metadata ${key} must be a positive number, got ${String(v)}`);
  }
  return v;
}

// Token texts that end a turn in the chat formats llama.cpp knows.
const EOG_TEXTS = ['<|im_end|>', '<|endoftext|>', '<|eot_id|>', '<|eom_id|>', '<|end|>', '<end_of_turn>', '<EOT>'];

/**
 * A function that reads `length` bytes at `offset` of the file into a new
 * buffer, after checking that the file still has the size it had when it
 * was loaded; errors name the file and the tensor.
 * @param {string} path
 * @param {number} size
 * @returns {(name: string, offset: number, length: number) => Uint8Array}
 */
function tensorReader(path, size) {
  return (name, offset, length) => {
    let fd;
    try {
      fd = fs.openSync(path, 'r');
      const now = fs.fstatSync(fd).size;
      if (now !== size) throw new Error(`the file changed size since it was loaded (${size} then ${now} bytes)`);
      // A buffer of its own (never a slice of a shared pool), so the
      // data starts aligned for any element type.
      const out = Buffer.allocUnsafeSlow(length);
      for (let at = 0; at < length;) {
        const n = fs.readSync(fd, out, at, length - at, offset + at);
        if (n === 0) throw new Error(`the file ended at byte ${offset + at}`);
        at += n;
      }
      return out;
    } catch (e) {
      throw new Error(`${path}: cannot read tensor ${name}: ${/** @type {Error} */ (e).message}`, { cause: e });
    } finally {
      if (fd !== undefined) fs.closeSync(fd);
    }
  };
}

/**
 * Loads a Llama-architecture GGUF file: its config, its tensors (views of
 * the raw data, never dequantized), tokenizer and chat template.
 *
 * @param {string} path
 * @returns {Promise<LlamaModel>}
 */
async function loadLlama(path) {
  const file = await readGguf(path);
  const md = file.metadata;
  const arch = md['general.architecture'];
  if (arch !== 'llama') {
    throw new Error(`${path}: architecture ${JSON.stringify(arch)} is not supported (only llama)`);
  }

  const nEmbd = requireKey(path, md, 'llama.embedding_length', 'count');
  const nHead = requireKey(path, md, 'llama.attention.head_count', 'count');
  const nHeadKv = md['llama.attention.head_count_kv'] ?? nHead;
  if (!(Number.isInteger(nHeadKv) && nHeadKv > 0 && nHead % nHeadKv === 0)) {
    throw new Error(`${path}: llama.attention.head_count_kv ${nHeadKv} does not divide head_count ${nHead}`);
  }
  let headDim = md['llama.attention.key_length'];
  if (headDim === undefined) {
    if (nEmbd % nHead !== 0) {
      throw new Error(`${path}: embedding_length ${nEmbd} is not a multiple of head_count ${nHead}`);
    }
    headDim = nEmbd / nHead;
  }
  const tokens = md['tokenizer.ggml.tokens'];
  if (!Array.isArray(tokens) || tokens.length === 0) {
    throw new Error(`${path}: missing metadata key tokenizer.ggml.tokens (the vocabulary)`);
  }
  /** @type {LlamaConfig} */
  const config = {
    nLayer: requireKey(path, md, 'llama.block_count', 'count'),
    nEmbd,
    nHead,
    nHeadKv,
    headDim,
    nFF: requireKey(path, md, 'llama.feed_forward_length', 'count'),
    rmsEps: requireKey(path, md, 'llama.attention.layer_norm_rms_epsilon', 'number'),
    ropeBase: md['llama.rope.freq_base'] === undefined ? 10000 : requireKey(path, md, 'llama.rope.freq_base', 'number'),
    ropeDim: md['llama.rope.dimension_count'] ?? headDim,
    nCtx: requireKey(path, md, 'llama.context_length', 'count'),
    nVocab: tokens.length,
  };

  for (const t of file.tensors) {
    if (!SUPPORTED_TYPES.has(t.type)) {
      throw new Error(
        `${path}: tensor ${t.name} has type ${t.type}, which is not supported (${[...SUPPORTED_TYPES].join(', ')})`,
      );
    }
  }
  const infos = new Map(file.tensors.map((t) => [t.name, t]));
  const { nLayer, nFF, nVocab } = config;
  const qDim = nHead * headDim;
  const kvDim = nHeadKv * headDim;
  /** @type {Array<[string, number[]]>} */
  const expected = [
    ['token_embd.weight', [nEmbd, nVocab]],
    ['output_norm.weight', [nEmbd]],
  ];
  for (let i = 0; i < nLayer; i++) {
    expected.push(
      [`blk.${i}.attn_norm.weight`, [nEmbd]],
      [`blk.${i}.attn_q.weight`, [nEmbd, qDim]],
      [`blk.${i}.attn_k.weight`, [nEmbd, kvDim]],
      [`blk.${i}.attn_v.weight`, [nEmbd, kvDim]],
      [`blk.${i}.attn_output.weight`, [qDim, nEmbd]],
      [`blk.${i}.ffn_norm.weight`, [nEmbd]],
      [`blk.${i}.ffn_gate.weight`, [nEmbd, nFF]],
      [`blk.${i}.ffn_up.weight`, [nEmbd, nFF]],
      [`blk.${i}.ffn_down.weight`, [nFF, nEmbd]],
    );
  }
  // Tied embeddings: without output.weight the graph reuses token_embd.
  if (infos.has('output.weight')) expected.push(['output.weight', [nEmbd, nVocab]]);
  for (const [name, dims] of expected) {
    const t = infos.get(name);
    if (!t) throw new Error(`${path}: missing tensor ${name}`);
    if (t.dims.length !== dims.length || t.dims.some((d, i) => d !== dims[i])) {
      throw new Error(`${path}: tensor ${name} has dims [${t.dims}], expected [${dims}] from the config`);
    }
  }

  // The tensors are read when a runner creates its weights, not now: a
  // copy of the file held here would double the weights' memory for as
  // long as the model lives (the backend keeps its own, in the same form).
  const read = tensorReader(path, file.fileSize);
  const tensors = new Map();
  for (const t of file.tensors) {
    // Every supported type has a known size (checked above).
    const byteLength = /** @type {number} */ (t.byteLength);
    tensors.set(t.name, {
      type: t.type,
      dims: t.dims,
      byteLength,
      read: () => read(t.name, t.offset, byteLength),
    });
  }

  let tokenizer;
  try {
    tokenizer = LlamaTokenizer.fromGgufMetadata(md);
  } catch (e) {
    throw new Error(`${path}: ${/** @type {Error} */ (e).message}`, { cause: e });
  }
  const bosId = md['tokenizer.ggml.bos_token_id'];
  const eosId = md['tokenizer.ggml.eos_token_id'];
  const eog = new Set();
  for (const key of ['tokenizer.ggml.eos_token_id', 'tokenizer.ggml.eot_token_id', 'tokenizer.ggml.eom_token_id']) {
    if (Number.isInteger(md[key]) && md[key] >= 0 && md[key] < nVocab) eog.add(md[key]);
  }
  for (const text of EOG_TEXTS) {
    const id = tokenizer.tokenToId(text);
    if (id !== undefined) eog.add(id);
  }

  return {
    arch: 'llama',
    name: md['general.name'],
    config,
    tensors,
    tokenizer,
    chatTemplate: md['tokenizer.chat_template'],
    bosId,
    eosId,
    eogIds: [...eog].sort((a, b) => a - b),
    metadata: md,
  };
}

module.exports = {
  readGguf,
  loadLlama,
  tensorByteLength,
  ggmlTypeName,
  ggmlTypeId,
  GGML_TYPES,
  SUPPORTED_TYPES,
};
