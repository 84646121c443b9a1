'use strict';
// The text-generation model side (lib/llm): a tiny random Llama-family model,
// quantized into GGUF's Q4_1/Q8_0 blocks by our encoders, run through the
// WebNN step graphs and the MLTensor KV cache, against a float64 reference
// forward pass written here from the model's math.

const { ml } = require('..');
const quant = require('../lib/llm/quant');
const { LlamaRunner } = require('../lib/llm/runner');
const { createSampler, argmax, mulberry32, sampleFrom } = require('../lib/llm/sampling');

const CONFIG = {
  nLayer: 2, nEmbd: 64, nHead: 4, nHeadKv: 2, headDim: 16, nFF: 128,
  rmsEps: 1e-5, ropeBase: 10000, ropeDim: 16, nCtx: 256, nVocab: 300,
};

/** Normal-ish values from a seeded PRNG (sum of uniforms). */
function randn(rand, n, scale, offset = 0) {
  return Float64Array.from({ length: n }, () => offset + scale * (rand() + rand() + rand() - 1.5) * 2);
}

/**
 * A random model in the loader's interface; `tied`: no output.weight;
 * `mixed`: attn_v and ffn_up in Q8_0, the other matrices in Q4_1.
 */
function tinyModel({ seed = 1, tied = true, mixed = false } = {}) {
  const rand = mulberry32(seed);
  const c = CONFIG;
  const tensors = new Map();
  // The loader's tensors read their bytes from the file; these hold them.
  const set = (name, type, dims, bytes) => tensors.set(name, { type, dims, byteLength: bytes.length, read: () => bytes });
  const q41 = (name, K, N) => set(name, 'Q4_1', [K, N], quant.encodeQ4_1(randn(rand, K * N, 1 / Math.sqrt(K))));
  const q80 = (name, K, N) => set(name, 'Q8_0', [K, N], quant.encodeQ8_0(randn(rand, K * N, 1 / Math.sqrt(K))));
  const f32 = (name, n) => {
    const v = Float32Array.from(randn(rand, n, 0.1, 1)); // norm weights around 1
    set(name, 'F32', [n], new Uint8Array(v.buffer));
  };
  set('token_embd.weight', 'Q8_0', [c.nEmbd, c.nVocab], quant.encodeQ8_0(randn(rand, c.nEmbd * c.nVocab, 1)));
  if (!tied) q41('output.weight', c.nEmbd, c.nVocab);
  f32('output_norm.weight', c.nEmbd);
  const qd = c.nHead * c.headDim;
  const kvd = c.nHeadKv * c.headDim;
  for (let l = 0; l < c.nLayer; l++) {
    f32(`blk.${l}.attn_norm.weight`, c.nEmbd);
    f32(`blk.${l}.ffn_norm.weight`, c.nEmbd);
    q41(`blk.${l}.attn_q.weight`, c.nEmbd, qd);
    q41(`blk.${l}.attn_k.weight`, c.nEmbd, kvd);
    (mixed ? q80 : q41)(`blk.${l}.attn_v.weight`, c.nEmbd, kvd);
    q41(`blk.${l}.attn_output.weight`, qd, c.nEmbd);
    q41(`blk.${l}.ffn_gate.weight`, c.nEmbd, c.nFF);
    (mixed ? q80 : q41)(`blk.${l}.ffn_up.weight`, c.nEmbd, c.nFF);
    q41(`blk.${l}.ffn_down.weight`, c.nFF, c.nEmbd);
  }
  return { config: { ...c }, tensors };
}

/** Logits of every position of `tokens`, in float64, straight from the math. */
function referenceLogits(model, tokens) {
  const c = model.config;
  const W = (name) => {
    const t = model.tensors.get(name);
    return { w: quant.decodeTensor(t), K: t.dims[0], N: t.dims[1] || 1 };
  };
  const mv = ({ w, K, N }, x) => {
    const y = new Float64Array(N);
    for (let n = 0; n < N; n++) {
      let s = 0;
      for (let k = 0; k < K; k++) s += w[n * K + k] * x[k];
      y[n] = s;
    }
    return y;
  };
  const norm = (x, name) => {
    const w = W(name).w;
    const ms = x.reduce((a, v) => a + v * v, 0) / x.length;
    return x.map((v, i) => (v / Math.sqrt(ms + c.rmsEps)) * w[i]);
  };
  const rope = (x, nh, p) => {
    const y = Float64Array.from(x);
    for (let h = 0; h < nh; h++) {
      for (let i = 0; i < c.ropeDim / 2; i++) {
        const a = p * c.ropeBase ** (-2 * i / c.ropeDim);
        const o = h * c.headDim + 2 * i;
        y[o] = x[o] * Math.cos(a) - x[o + 1] * Math.sin(a);
        y[o + 1] = x[o] * Math.sin(a) + x[o + 1] * Math.cos(a);
      }
    }
    return y;
  };
  const emb = W('token_embd.weight');
  const head = model.tensors.has('output.weight') ? W('output.weight') : emb;
  const layers = Array.from({ length: c.nLayer }, (_, l) => {
    const get = (s) => W(`blk.${l}.${s}.weight`);
    return { q: get('attn_q'), k: get('attn_k'), v: get('attn_v'), o: get('attn_output'), gate: get('ffn_gate'), up: get('ffn_up'), down: get('ffn_down') };
  });
  const cache = layers.map(() => ({ k: [], v: [] }));
  const out = [];
  const hd = c.headDim;
  const g = c.nHead / c.nHeadKv;
  tokens.forEach((tok, p) => {
    let x = emb.w.slice(tok * c.nEmbd, (tok + 1) * c.nEmbd);
    layers.forEach((L, l) => {
      const h = norm(x, `blk.${l}.attn_norm.weight`);
      const q = rope(mv(L.q, h), c.nHead, p);
      cache[l].k.push(rope(mv(L.k, h), c.nHeadKv, p));
      cache[l].v.push(mv(L.v, h));
      const attn = new Float64Array(c.nHead * hd);
      for (let hh = 0; hh < c.nHead; hh++) {
        const kh = Math.floor(hh / g);
        const s = cache[l].k.map((k) => {
          let d = 0;
          for (let i = 0; i < hd; i++) d += q[hh * hd + i] * k[kh * hd + i];
          return d / Math.sqrt(hd);
        });
        const m = Math.max(...s);
        const e = s.map((v) => Math.exp(v - m));
        const z = e.reduce((a, b) => a + b, 0);
        cache[l].v.forEach((v, j) => {
          for (let i = 0; i < hd; i++) attn[hh * hd + i] += (e[j] / z) * v[kh * hd + i];
        });
      }
      x = x.map((v, i) => v + mv(L.o, attn)[i]);
      const h2 = norm(x, `blk.${l}.ffn_norm.weight`);
      const gt = mv(L.gate, h2);
      const up = mv(L.up, h2);
      const act = gt.map((v, i) => (v / (1 + Math.exp(-v))) * up[i]);
      const d = mv(L.down, act);
      x = x.map((v, i) => v + d[i]);
    });
    out.push(mv(head, norm(x, 'output_norm.weight')));
  });
  return out;
}

function maxAbsDiff(a, b) {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

// float32 compute against float64: the weights are the same values (the
// dequantization d*q+m is exact or one float32 rounding), so the gap is
// float32 rounding accumulated through 2 layers of sums of 64-128 terms,
// softmax and norms: relative ~1e-7 per operation, so ~1e-5 at most on
// logits of magnitude up to ~40 (measured: under 1e-5). 1e-3 absolute
// leaves a wide margin while still catching any real error (a wrong
// position, pair order or mask moves these logits by 1e-2 or more).
const TOL = 1e-3;
// The float64 reference is exact arithmetic, so the graphs compute in
// float32 throughout ('llama.cpp' numerics round activations to int8 on
// purpose: that is checked against llama.cpp itself on the real model).
const OPTS = { maxContext: 64, blockSize: 16, chunk: 8, numerics: 'float32' };

let context;
beforeAll(async () => {
  context = await ml.createContext();
});
afterAll(() => context.destroy());

async function runner(model, opts = OPTS) {
  const r = new LlamaRunner(context, model, { numerics: 'float32', ...opts });
  await r.init();
  return r;
}

describe('quant', () => {
  test('float16 round trip and rounding', () => {
    for (const v of [0, 1, -2, 0.5, 65504, 2 ** -24, -(2 ** -14)]) expect(quant.f16ToF32(quant.f32ToF16(v))).toBe(v);
    expect(quant.f32ToF16(1 + 2 ** -11)).toBe(0x3c00); // tie to even
    expect(quant.f32ToF16(1e6)).toBe(0x7c00);
    // Every float16 round-trips, and the midpoint between two neighbours
    // rounds to the even one (subnormals included).
    const wrong = [];
    for (let h = 0; h < 0x7c00; h++) {
      if (quant.f32ToF16(quant.f16ToF32(h)) !== h) wrong.push(h);
      const mid = (quant.f16ToF32(h) + quant.f16ToF32(h + 1)) / 2;
      if (h + 1 < 0x7c00 && quant.f32ToF16(mid) !== (h & 1 ? h + 1 : h)) wrong.push(mid);
    }
    expect(wrong).toEqual([]);
  });

  test('Q4_1 and Q8_0 encode/decode and the WebNN repack', () => {
    const x = randn(mulberry32(3), 96, 1);
    const b41 = quant.encodeQ4_1(x);
    const d41 = quant.decodeQ4_1(b41, 96);
    // Within half a step (d/2) of the input, plus float16 rounding of m.
    expect(maxAbsDiff(d41, x)).toBeLessThan(0.5 * (6 / 15) + 1e-2);
    const r = quant.repackQ4_1(b41, 96);
    expect(r.q.length).toBe(48);
    for (let i = 0; i < 96; i++) {
      const code = (r.q[i >> 1] >> ((i & 1) * 4)) & 15;
      const blk = i >> 5;
      expect(quant.f16ToF32(r.scale[blk]) * code + quant.f16ToF32(r.min[blk])).toBe(d41[i]);
    }
    const b8 = quant.encodeQ8_0(x);
    const d8 = quant.decodeQ8_0(b8, 96);
    const r8 = quant.repackQ8_0(b8, 96);
    for (let i = 0; i < 96; i++) expect(quant.f16ToF32(r8.scale[i >> 5]) * r8.q[i]).toBe(d8[i]);
  });
});

describe('LlamaRunner', () => {
  const model = tinyModel();
  const prompt = Array.from({ length: 40 }, (_, i) => (i * 37 + 11) % CONFIG.nVocab);
  const reference = referenceLogits(model, [...prompt, 5, 17, 250]);

  test('prefill over several chunks and blocks matches the float64 reference', async () => {
    // 40 tokens, blockSize 16, chunk 8: 5 chunks, 3 blocks (the last partly filled).
    const r = await runner(model);
    const logits = await r.forward(prompt);
    expect(r.position).toBe(40);
    // Blocks 0 and 1 whole, one step each; block 2's 8 rows a chunk.
    expect(Object.keys(r.steps)).toEqual(expect.arrayContaining(['16:1', '16:2', '8:4']));
    expect(logits.length).toBe(CONFIG.nVocab);
    const err = maxAbsDiff(logits, reference[39]);
    console.log(`max |logit - float64 reference| after 40 tokens: ${err.toExponential(2)} (logits span ${Math.min(...logits).toFixed(2)}..${Math.max(...logits).toFixed(2)})`);
    expect(err).toBeLessThan(TOL);
    r.destroy();
  });

  test('intermediate positions match too (prefill in pieces of odd sizes, decode steps)', async () => {
    const r = await runner(model);
    // Pieces that straddle block boundaries (shortened there) and single tokens.
    let p = 0;
    for (const n of [3, 1, 13, 2, 9, 1, 11]) {
      const logits = await r.forward(prompt.slice(p, p + n));
      p += n;
      expect(maxAbsDiff(logits, reference[p - 1])).toBeLessThan(TOL);
    }
    r.destroy();
  });

  test('cached decode equals recomputing the whole sequence', async () => {
    const r = await runner(model);
    await r.forward(prompt);
    let logits;
    for (const t of [5, 17, 250]) logits = await r.forward([t]);
    expect(r.position).toBe(43);
    const fresh = await runner(model);
    const all = await fresh.forward([...prompt, 5, 17, 250]);
    expect(maxAbsDiff(logits, all)).toBeLessThan(1e-4);
    expect(maxAbsDiff(logits, reference[42])).toBeLessThan(TOL);
    r.destroy();
    fresh.destroy();
  });

  test("with llama.cpp's numerics the cache is float16 by default, with the bits of a float32 one", async () => {
    // The keys and values are rounded to float16 before they enter the
    // cache in these numerics, so storing them as float16 loses nothing.
    const opts = { ...OPTS, numerics: 'llama.cpp' };
    // float16 is these numerics' default; float32 numerics keep float32.
    const half = await runner(model, opts);
    const full = await runner(model, { ...opts, cacheType: 'float32' });
    expect(half.cache.blocks[0].map((t) => t.dataType)).toEqual(Array(4).fill('float16'));
    expect(full.cache.blocks[0].map((t) => t.dataType)).toEqual(Array(4).fill('float32'));
    const plain = await runner(model, OPTS);
    expect(plain.cache.blocks[0].map((t) => t.dataType)).toEqual(Array(4).fill('float32'));
    plain.destroy();
    const steps = [prompt, [5], [17], [250]];
    for (const ids of steps) {
      const [a, b] = [await half.forward(ids), await full.forward(ids)];
      expect(Buffer.from(a.buffer).equals(Buffer.from(b.buffer))).toBe(true);
    }
    // Not a vacuous equality: the steps read what earlier ones cached (a
    // cache that lost it would give other logits).
    const fresh = await runner(model, opts);
    const all = await fresh.forward([...prompt, 5, 17, 250, 9]);
    expect(maxAbsDiff(await half.forward([9]), all)).toBeLessThan(1e-3);
    fresh.destroy();
    expect(() => new LlamaRunner(context, model, { ...OPTS, cacheType: 'float16' })).toThrow(/needs numerics 'llama.cpp'/);
    half.destroy();
    full.destroy();
  });

  test('rewind then continuing equals a fresh run', async () => {
    const r = await runner(model);
    await r.forward(prompt);
    await r.forward([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]); // into a 4th block, then dropped
    r.rewind(30);
    expect(r.position).toBe(30);
    const after = await r.forward(prompt.slice(30).concat([5, 17, 250]));
    expect(maxAbsDiff(after, reference[42])).toBeLessThan(TOL);
    r.reset();
    expect(r.position).toBe(0);
    const again = await r.forward(prompt.slice(0, 20));
    expect(maxAbsDiff(again, reference[19])).toBeLessThan(TOL);
    expect(() => r.rewind(21)).toThrow(RangeError);
    r.destroy();
  });

  test('an untied output head', async () => {
    const m = tinyModel({ seed: 2, tied: false });
    const ref = referenceLogits(m, prompt.slice(0, 20));
    const r = await runner(m);
    expect(maxAbsDiff(await r.forward(prompt.slice(0, 20)), ref[19])).toBeLessThan(TOL);
    r.destroy();
  });

  test('Q/K/V and gate/up are stacked into one product each where they share a format, and apart where not', async () => {
    const r = await runner(model);
    const w = /** @type {Map<string, {parts?: number[]}>} */ (r.weights);
    const kvd = CONFIG.nHeadKv * CONFIG.headDim;
    expect(w.get('blk.1.attn_qkv').parts).toEqual([CONFIG.nHead * CONFIG.headDim, kvd, kvd]);
    expect(w.get('blk.1.ffn_gate_up').parts).toEqual([CONFIG.nFF, CONFIG.nFF]);
    expect(w.has('blk.1.attn_q.weight')).toBe(false);
    r.destroy();
    // Mixed formats: each matrix its own product, the same logits.
    const m = tinyModel({ seed: 3, mixed: true });
    const ref = referenceLogits(m, prompt.slice(0, 20));
    const rm = await runner(m);
    const wm = /** @type {Map<string, object>} */ (rm.weights);
    expect(wm.has('blk.0.attn_qkv') || wm.has('blk.0.ffn_gate_up')).toBe(false);
    expect(wm.has('blk.0.attn_v.weight') && wm.has('blk.0.ffn_up.weight')).toBe(true);
    expect(maxAbsDiff(await rm.forward(prompt.slice(0, 20)), ref[19])).toBeLessThan(TOL);
    rm.destroy();
  });

  test('a step binds the blocks its position needs and writes only the current one', async () => {
    const r = await runner(model);
    await r.forward(prompt.slice(0, 20)); // blocks 0 (full) and 1 (4 rows)
    // Two blocks so far: a step in block 1 spans two (1 + 1, a power of two).
    expect(r.cache.blocks.length).toBe(2);
    const blocks = r.cache.blocks.slice();
    const spare = r.cache.spare;
    await r.forward([7]);
    // Only block 1 changed: the spare took its place, the old one is the spare.
    expect(r.cache.blocks[0]).toBe(blocks[0]);
    expect(r.cache.blocks[1]).toBe(spare);
    expect(r.cache.spare).toBe(blocks[1]);
    // A block is one tensor per layer for its keys [nHeadKv, headDim,
    // blockSize] and one for its values [nHeadKv, blockSize, headDim].
    expect(r.cache.shapes).toEqual({ k: [2, 16, 16], v: [2, 16, 16] });
    expect(r.cache.blocks[1].map((t) => t.shape)).toEqual([[2, 16, 16], [2, 16, 16], [2, 16, 16], [2, 16, 16]]);
    let { inputs, next } = r.cache.bindings(1);
    expect(Object.keys(inputs).sort()).toEqual(['k0', 'k1', 'p0k0', 'p0k1', 'p0v0', 'p0v1', 'v0', 'v1']);
    expect(inputs.p0k1).toBe(r.cache.blocks[0][2]);
    expect(inputs.v1).toBe(r.cache.blocks[1][3]);
    expect(next).toEqual({ nk0: r.cache.spare[0], nv0: r.cache.spare[1], nk1: r.cache.spare[2], nv1: r.cache.spare[3] });
    // Into block 2: its step spans four blocks (3 rounded up), which now exist.
    await r.forward(prompt.slice(21, 34));
    expect(r.position).toBe(34);
    expect(r.cache.blocks.length).toBe(4);
    ({ inputs } = r.cache.bindings(2, 4));
    expect(Object.keys(inputs).filter((k) => k.endsWith('k0')).sort()).toEqual(['k0', 'p0k0', 'p1k0', 'p2k0']);
    expect(inputs.p1k0).toBe(r.cache.blocks[1][0]);
    expect(inputs.p2v1).toBe(r.cache.blocks[3][3]);
    expect(() => r.cache.bindings(2, 5)).toThrow(RangeError);
    r.destroy();
  });

  test('exceeding maxContext throws a clear error', async () => {
    const r = await runner(model, { maxContext: 32, blockSize: 16, chunk: 8 });
    await r.forward(prompt.slice(0, 30));
    await expect(r.forward([1, 2, 3])).rejects.toThrow(/context full: 30 positions \+ 3 new tokens exceed maxContext 32/);
    expect(r.position).toBe(30); // nothing was written
    await r.forward([1, 2]);
    await expect(r.forward([1])).rejects.toThrow(/maxContext 32/);
    r.destroy();
    expect(() => new LlamaRunner(context, model, { maxContext: 40, blockSize: 16, chunk: 8 })).toThrow(/multiple of blockSize/);
  });
});

describe('sampling', () => {
  const logits = Float32Array.from([0.1, 2.5, -1, 2.4, 0.3, 1.9, -3, 0]);

  test('greedy is argmax', () => {
    expect(argmax(logits)).toBe(1);
    expect(createSampler().sample(logits)).toBe(1);
    expect(createSampler({ temperature: 0, topK: 3, seed: 9 }).sample(logits)).toBe(1);
  });

  test('seeded sampling is deterministic', () => {
    const draw = (seed) => {
      const s = createSampler({ temperature: 1.5, seed });
      return Array.from({ length: 50 }, () => s.sample(logits));
    };
    expect(draw(42)).toEqual(draw(42));
    expect(draw(42)).not.toEqual(draw(43));
    expect(new Set(draw(42)).size).toBeGreaterThan(3); // it does sample
  });

  test('top-k and top-p pick only allowed tokens', () => {
    const k = createSampler({ temperature: 5, topK: 3, seed: 1 });
    const seenK = new Set(Array.from({ length: 300 }, () => k.sample(logits)));
    expect([...seenK].sort()).toEqual([1, 3, 5]);
    // Probabilities at temperature 1: 2.5 -> 0.361, 2.4 -> 0.326, 1.9 -> 0.198:
    // top-p 0.6 needs the first two, and the draw (at temperature 5, nearly
    // uniform) never leaves them.
    const p = createSampler({ temperature: 5, topP: 0.6, seed: 1 });
    const seenP = new Set(Array.from({ length: 300 }, () => p.sample(logits)));
    expect([...seenP].sort()).toEqual([1, 3]);
    expect(sampleFrom(logits, { temperature: 1, topK: 1, random: () => 0.99 })).toBe(1);
  });
});
