'use strict';
// all-MiniLM-L6-v2 built with MLGraphBuilder (examples/lib/sentence-bert.js)
// against reference embeddings made once by sentence-transformers from the
// same weights (scripts/minilm-reference.py, __tests__/fixtures/).
//
// The model files live outside the repository. They are looked for in
// $WEBNN_MINILM_DIR, else in the cache of scripts/fetch-minilm.js, which is
// run once here if they are absent; where they can be neither found nor
// fetched, the tests are skipped and the reason is printed.

const path = require('path');
const { spawnSync } = require('child_process');
const lib = require('../examples/lib/sentence-bert');
const reference = require('./fixtures/minilm-reference.json');
const { gpuProbe } = require('./helpers');

const ROOT = path.resolve(__dirname, '..');
const CPU_MIN_COSINE = 0.9999;
const GPU_MIN_COSINE = 0.999;

const modelDir = (() => {
  const dir = lib.defaultModelDir();
  if (lib.isModelDir(dir)) return { dir };
  const r = spawnSync(process.execPath, [path.join(ROOT, 'scripts', 'fetch-minilm.js')], {
    encoding: 'utf8',
    timeout: 300000,
  });
  if (r.status === 0 && lib.isModelDir(dir)) return { dir };
  const why = r.error ? r.error.message : (r.stderr || '').trim().split('\n').pop();
  return { missing: `no model files in ${dir}, and scripts/fetch-minilm.js could not fetch them: ${why}` };
})();
if (modelDir.missing) console.log(`all-MiniLM-L6-v2 tests skipped: ${modelDir.missing}`);

const gpu = modelDir.missing ? { ok: false } : gpuProbe();
if (!modelDir.missing && !gpu.ok) {
  console.log(`all-MiniLM-L6-v2 GPU test skipped: createContext({deviceType: 'gpu'}) failed with ${gpu.why}`);
}

const describeModel = modelDir.missing ? describe.skip : describe;
const sentences = reference.sentences.map((s) => s.text);

function report(device, c) {
  const gaps = c.map((x) => (1 - x).toExponential(1)).join(' ');
  console.log(`${device} cosine similarity with the reference: min ${Math.min(...c).toFixed(10)}; 1 - cosine per sentence: ${gaps}`);
}

// Every reference sentence's cosine similarity with our embedding of it.
function cosines(embeddings) {
  return reference.sentences.map((s, i) => lib.cosine(embeddings[i], s.embedding));
}

describeModel('all-MiniLM-L6-v2 sentence embeddings', () => {
  let model;
  let ml;
  beforeAll(() => {
    model = lib.loadModel(modelDir.dir);
    ({ ml } = require('..'));
  });

  test("the model's own files configure the pipeline", () => {
    // sentence_bert_config.json's max_seq_length, not tokenizer.json's 128.
    expect(model.maxSeqLength).toBe(reference.model.max_seq_length);
    expect(model.pooling).toBe('pooling_mode_mean_tokens');
    expect(model.normalize).toBe(true);
    expect(model.dimension).toBe(reference.model.dimension);
  });

  test('token ids equal the reference tokenizer (lower-casing, accents, CJK, truncation)', () => {
    const { ids, lengths, seqLength } = lib.tokenize(model, sentences);
    expect(seqLength).toBe(model.maxSeqLength); // the long sentence is truncated to it
    reference.sentences.forEach((s, i) => {
      expect({ sentence: s.text, ids: Array.from(ids.subarray(i * seqLength, i * seqLength + lengths[i])) }).toEqual({
        sentence: s.text,
        ids: s.ids,
      });
    });
  });

  test(`CPU: cosine similarity with the reference >= ${CPU_MIN_COSINE} for every sentence`, async () => {
    const context = await ml.createContext({ deviceType: 'cpu' });
    try {
      const embeddings = await lib.embed(model, context, sentences);
      const c = cosines(embeddings);
      report('CPU', c);
      c.forEach((x, i) => expect({ sentence: sentences[i], ok: x >= CPU_MIN_COSINE, cosine: x }).toMatchObject({ ok: true }));
      // Normalize is in the pipeline: every embedding has length 1.
      for (const e of embeddings) expect(Math.abs(Math.hypot(...e) - 1)).toBeLessThan(1e-5);
    } finally {
      context.destroy();
    }
  });

  test('padding does not change an embedding: a sentence alone equals it in a padded batch', async () => {
    const context = await ml.createContext({ deviceType: 'cpu' });
    try {
      const [alone] = await lib.embed(model, context, [sentences[0]]);
      const batch = await lib.embed(model, context, [sentences[3], sentences[0]]);
      expect(lib.cosine(alone, batch[1])).toBeGreaterThanOrEqual(0.999999);
    } finally {
      context.destroy();
    }
  });

  (gpu.ok ? test : test.skip)(`GPU: cosine similarity with the reference >= ${GPU_MIN_COSINE} for every sentence`, async () => {
    const context = await ml.createContext({ deviceType: 'gpu' });
    try {
      // The sentence beyond max_seq_length runs alone: padding the other
      // seven to its 256 tokens would cost a software adapter minutes, and
      // padding is shown above not to change an embedding.
      const long = sentences.findIndex((_, i) => reference.sentences[i].ids.length === model.maxSeqLength);
      const short = sentences.filter((_, i) => i !== long);
      const [shortEmbeddings, [longEmbedding]] = [await lib.embed(model, context, short), await lib.embed(model, context, [sentences[long]])];
      shortEmbeddings.splice(long, 0, longEmbedding);
      const c = cosines(shortEmbeddings);
      report('GPU', c);
      c.forEach((x, i) => expect({ sentence: sentences[i], ok: x >= GPU_MIN_COSINE, cosine: x }).toMatchObject({ ok: true }));
    } finally {
      context.destroy();
    }
    // A software adapter (lavapipe) on a small, busy machine: up to a minute.
  }, 600000);
});

// What runs without the model files: the safetensors reader and cosine.
describe('safetensors reader', () => {
  const fs = require('fs');
  const os = require('os');
  const { readSafetensors, toFloat32 } = require('../examples/lib/safetensors');

  // A file of the given header object followed by `data`.
  function write(header, data) {
    const json = Buffer.from(JSON.stringify(header));
    const length = Buffer.alloc(8);
    length.writeBigUInt64LE(BigInt(json.length));
    const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'st-')), 'x.safetensors');
    fs.writeFileSync(file, Buffer.concat([length, json, Buffer.from(data)]));
    return file;
  }
  const f32 = Buffer.from(new Float32Array([1.5, -2]).buffer);
  // 1.0 and -0.5 as float16, 3.0 as bfloat16 (little-endian).
  const f16 = Buffer.from([0x00, 0x3c, 0x00, 0xb8]);
  const bf16 = Buffer.from([0x40, 0x40]);

  test('reads F32, F16 and BF16 tensors with their shapes', () => {
    const file = write(
      {
        __metadata__: { format: 'pt' },
        a: { dtype: 'F32', shape: [1, 2], data_offsets: [0, 8] },
        b: { dtype: 'F16', shape: [2], data_offsets: [8, 12] },
        c: { dtype: 'BF16', shape: [], data_offsets: [12, 14] },
      },
      Buffer.concat([f32, f16, bf16]),
    );
    const { metadata, tensors } = readSafetensors(file);
    expect(metadata).toEqual({ format: 'pt' });
    expect(tensors.get('a').shape).toEqual([1, 2]);
    expect(Array.from(toFloat32(tensors.get('a')))).toEqual([1.5, -2]);
    expect(Array.from(toFloat32(tensors.get('b')))).toEqual([1, -0.5]);
    expect(Array.from(toFloat32(tensors.get('c')))).toEqual([3]);
  });

  test('a byte range that does not match the shape, or leaves the file, is an error', () => {
    const short = write({ a: { dtype: 'F32', shape: [3], data_offsets: [0, 8] } }, f32);
    expect(() => readSafetensors(short)).toThrow(/do not hold F32\[3\]/);
    const outside = write({ a: { dtype: 'F32', shape: [4], data_offsets: [0, 16] } }, f32);
    expect(() => readSafetensors(outside)).toThrow(/do not hold/);
    const dtype = write({ a: { dtype: 'F8', shape: [2], data_offsets: [0, 2] } }, f32);
    expect(() => readSafetensors(dtype)).toThrow(/unknown dtype F8/);
  });

  test('a header length beyond the file is an error, not an allocation', () => {
    const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'st-')), 'x.safetensors');
    const b = Buffer.alloc(16);
    b.writeBigUInt64LE(1n << 60n);
    fs.writeFileSync(file, b);
    expect(() => readSafetensors(file)).toThrow(/does not fit the file/);
  });
});

describe('cosine similarity', () => {
  test('parallel, orthogonal and opposite vectors', () => {
    expect(lib.cosine([1, 2, 3], [2, 4, 6])).toBeCloseTo(1, 12);
    expect(lib.cosine([1, 0], [0, 5])).toBe(0);
    expect(lib.cosine([1, 1], [-2, -2])).toBeCloseTo(-1, 12);
  });
});
