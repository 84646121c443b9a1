'use strict';
// The Llama-family model as WebNN graphs, built from MLGraphBuilder's
// standard operators alone so that the same code runs on any WebNN
// implementation.
//
// Weights enter as they are in the GGUF file: Q4_1/Q8_0 codes as
// uint4/int8 constants with dequantizeLinear's blockwise float16 scale (one
// per 32 weights along K) and a zero point of 0; Q4_1's per-block minimum
// is added after the dequantization ([N, K/32, 32] + [N, K/32, 1]). A
// backend may recognise that pattern and keep the weights quantized; the
// graph itself never holds them as float32. The codes and scales are
// created once as constant MLTensors (createConstantTensor) so that the
// prefill and decode graphs share them.
//
// One step graph serves both prefill (T tokens) and decode (T = 1):
//
//   inputs   ids    int32   [T]          token ids (padding: any id)
//            cos    float32 [T, 1, hd/2, 2] RoPE per position and pair: cos
//                   twice, (cos, cos)
//            sin    float32 [T, 1, hd/2, 2] (-sin, sin)
//            mask   float32 [T, nBlocks*B] additive: 0 where a token may
//                   attend, -1e9 elsewhere; columns [0, (nBlocks-1)*B) are
//                   the past slots, the last B the current block
//            place  float32 [T, B]       one-hot: token t goes to row
//                   place[t] of the current block (all 0 for padding)
//            last   int32   [1]          which token's logits (T > 1 only)
//            k{l}, v{l}                  layer l's keys [Hkv, hd, B] and values
//                   [Hkv, B, hd] in the current cache block
//            p{s}k{l}, p{s}v{l}          the same in the other blocks,
//                   s = 0..nBlocks-2
//   outputs  logits float32 [1, nVocab]
//            nk{l}, nv{l}                layer l's keys and values of the
//                   current block with the new rows placed in them
//
// A cache block holds B positions of every layer, as one tensor per layer
// for the keys (already transposed for q·K) and one for the values, so a
// step reads each as it is, with no slice or copy, and writes the current
// block's tensors as its outputs. Attention runs per block (scores per
// block, concatenated, one softmax, per-block weighted sums of V), so no
// K/V is concatenated or copied; only the current block is rewritten, at
// a cost of one block.

/** @typedef {import('../..').MLContext} MLContext */
/** @typedef {import('../..').MLTensor} MLTensor */
/** @typedef {import('../..').MLGraph} MLGraph */
/** @typedef {import('../..').MLGraphBuilder} MLGraphBuilder */
/** @typedef {import('../..').MLOperand} MLOperand */
/** @typedef {import('../..').MLOperandDescriptor} MLOperandDescriptor */
/** @typedef {import('./gguf').LlamaConfig} LlamaConfig */
/** @typedef {import('./gguf').LlamaWeights} LlamaWeights */

/**
 * A weight as the graphs take it (see prepareWeights): `shape` is [N, K]
 * for a matrix, [K] for a vector; Q4_1 has `q`, `scale`, `min` and `zp`
 * (its zero point, all zeros: made once, not in every graph), Q8_0 `q`,
 * `scale` and `zp`, F32/F16 `data`.
 * `parts`: a stack's (see STACKS) row counts, in order.
 * @typedef {{ type: string, N: number, K: number, shape: number[], parts?: number[],
 *   q?: MLTensor, scale?: MLTensor, min?: MLTensor, zp?: MLTensor, data?: MLTensor }} PreparedWeight
 */

/** Additive mask value: exp(-1e9 - max) is 0 in float32, and no NaN. */
const MASKED = -1e9;

/**
 * The names of the tensors the graphs use: output.weight only when the
 * head is not tied to token_embd.weight.
 * @param {{config: {nLayer: number}, tensors: Map<string, object>}} model
 * @returns {string[]}
 */
function weightNames(model) {
  const names = ['token_embd.weight', 'output_norm.weight'];
  if (model.tensors.has('output.weight')) names.push('output.weight');
  const per = ['attn_norm', 'ffn_norm', 'attn_q', 'attn_k', 'attn_v', 'attn_output', 'ffn_gate', 'ffn_up', 'ffn_down'];
  for (let l = 0; l < model.config.nLayer; l++) for (const p of per) names.push(`blk.${l}.${p}.weight`);
  return names;
}

/**
 * Matrices that read the same activation and are stored in the same
 * format are multiplied as one: their rows stacked into one matrix (a
 * quantized matrix's rows are whole blocks, so the stacked bytes are the
 * parts' bytes one after the other), whose product the graph slices. One
 * product instead of three (Q, K, V) or two (gate, up) reads the same
 * bytes; each output is computed as it was, with fewer nodes around it.
 * @type {Array<[string, string[]]>}
 */
const STACKS = [
  ['attn_qkv', ['attn_q', 'attn_k', 'attn_v']],
  ['ffn_gate_up', ['ffn_gate', 'ffn_up']],
];

/**
 * Creates the weight constants of every tensor the graphs use, once, as
 * constant MLTensors in their quantized form. Layer l's Q, K and V
 * matrices are stacked as `blk.{l}.attn_qkv`, its gate and up ones as
 * `blk.{l}.ffn_gate_up` (see STACKS), where the parts share a format and
 * a K; otherwise they stay apart.
 * @param {MLContext} context
 * @param {LlamaWeights} model
 * @returns {Promise<Map<string, PreparedWeight>>}
 */
async function prepareWeights(context, model) {
  /** @type {Map<string, PreparedWeight>} */
  const out = new Map();
  /** @param {string} name */
  const tensor = (name) => {
    const t = model.tensors.get(name);
    if (!t) throw new Error(`the model has no tensor ${name}`);
    return t;
  };
  const stacked = new Set();
  for (let l = 0; l < model.config.nLayer; l++) {
    for (const [stack, parts] of STACKS) {
      const ts = parts.map((p) => tensor(`blk.${l}.${p}.weight`));
      const K = ts[0].dims[0];
      const fits = ts.every((t) => t.type === ts[0].type && t.dims.length === 2 && t.dims[0] === K);
      if (!fits) continue;
      const N = ts.reduce((a, t) => a + t.dims[1], 0);
      const read = () => {
        const bytes = new Uint8Array(ts.reduce((a, t) => a + t.byteLength, 0));
        let at = 0;
        for (const t of ts) {
          const b = t.read();
          bytes.set(b, at);
          at += b.length;
        }
        return bytes;
      };
      const w = await prepareWeight(context, `blk.${l}.${stack}`, { type: ts[0].type, dims: [K, N], read });
      w.parts = ts.map((t) => t.dims[1]);
      out.set(`blk.${l}.${stack}`, w);
      for (const p of parts) stacked.add(`blk.${l}.${p}.weight`);
    }
  }
  // Only the tensors the graphs read: a file may hold others (of formats
  // the graphs need not support).
  for (const name of weightNames(model)) {
    if (!stacked.has(name)) out.set(name, await prepareWeight(context, name, tensor(name)));
  }
  return out;
}

/**
 * One weight's constants (see PreparedWeight).
 * @param {MLContext} context
 * @param {string} name
 * @param {{ type: string, dims: number[], read: () => Uint8Array }} t
 * @returns {Promise<PreparedWeight>}
 */
async function prepareWeight(context, name, t) {
  const { repackQ4_1, repackQ8_0 } = require('./quant');
  const K = t.dims[0];
  const N = t.dims.length > 1 ? t.dims[1] : 1;
  const shape = t.dims.length > 1 ? [N, K] : [K];
  const blocks = t.dims.length > 1 ? [N, K / 32] : [K / 32];
  /** @type {PreparedWeight} */
  const w = { type: t.type, N, K, shape };
  // Read from the file now, and dropped once the backend has its copy.
  const bytes = t.read();
  const count = blocks.reduce((a, c) => a * c, 1);
  if (t.type === 'Q4_1') {
    const r = repackQ4_1(bytes, N * K);
    w.q = await context.createConstantTensor({ dataType: 'uint4', shape }, r.q);
    w.scale = await context.createConstantTensor({ dataType: 'float16', shape: blocks }, r.scale);
    w.min = await context.createConstantTensor({ dataType: 'float16', shape: blocks }, r.min);
    w.zp = await context.createConstantTensor({ dataType: 'uint4', shape: blocks }, new Uint8Array(Math.ceil(count / 2)));
  } else if (t.type === 'Q8_0') {
    const r = repackQ8_0(bytes, N * K);
    w.q = await context.createConstantTensor({ dataType: 'int8', shape }, r.q);
    w.scale = await context.createConstantTensor({ dataType: 'float16', shape: blocks }, r.scale);
    w.zp = await context.createConstantTensor({ dataType: 'int8', shape: blocks }, new Int8Array(count));
  } else if (t.type === 'F32' || t.type === 'F16') {
    const dataType = t.type === 'F32' ? 'float32' : 'float16';
    w.data = await context.createConstantTensor({ dataType, shape }, bytes);
  } else {
    throw new TypeError(`${name}: tensor type ${t.type} is not supported`);
  }
  return w;
}

/**
 * Destroys the constant tensors of prepareWeights.
 * @param {Map<string, PreparedWeight>} weights
 */
function destroyWeights(weights) {
  const keys = /** @type {const} */ (['q', 'scale', 'min', 'zp', 'data']);
  for (const w of weights.values()) for (const k of keys) w[k]?.destroy();
}

// The tensors of a PreparedWeight that its type has (see PreparedWeight):
// the graphs read them where the type says they are there.
/** @param {MLTensor | undefined} t */
const present = (t) => /** @type {MLTensor} */ (t);

/**
 * A float32 operand of weight w's values, of w.shape (or rows of it).
 * @param {MLGraphBuilder} b
 * @param {PreparedWeight} w
 * @param {MLOperand} [rows]
 * @returns {MLOperand}
 */
function dequantized(b, w, rows) {
  // rows: an int32 operand of row ids to gather first (the embedding), so
  // that only those rows are dequantized.
  let q = b.constant(present(w.q || w.data));
  let nRows = w.N;
  /** @param {MLOperand} x */
  const pick = (x) => (rows ? b.gather(x, rows, { axis: 0 }) : x);
  if (rows) nRows = rows.shape[0];
  if (w.data) {
    const x = pick(q);
    return x.dataType === 'float32' ? x : b.cast(x, 'float32');
  }
  const nb = w.K / 32;
  const bshape = w.shape.length > 1 ? [nRows, nb] : [nb];
  const shape = w.shape.length > 1 ? [nRows, w.K] : [w.K];
  q = pick(q);
  // The float16 scale becomes float32 before the multiplication, so that
  // d * q + m is computed in float32 as ggml does, not rounded to float16.
  const scale = b.cast(pick(b.constant(present(w.scale))), 'float32');
  const count = bshape.reduce((a, c) => a * c, 1);
  // The whole matrix's zero point is a constant tensor of its own; a
  // gathered one (a few rows) is made here.
  if (w.type === 'Q8_0') {
    const zp = rows ? b.constant({ dataType: 'int8', shape: bshape }, new Int8Array(count)) : b.constant(present(w.zp));
    return b.dequantizeLinear(q, scale, zp);
  }
  const zp = rows ? b.constant({ dataType: 'uint4', shape: bshape }, new Uint8Array(Math.ceil(count / 2))) : b.constant(present(w.zp));
  const x = b.dequantizeLinear(q, scale, zp);
  const min = b.cast(pick(b.constant(present(w.min))), 'float32');
  return b.reshape(b.add(b.reshape(x, [...bshape, 32]), b.reshape(min, [...bshape, 1])), shape);
}

/**
 * Builds one step graph (see the file comment).
 * @param {MLContext} context
 * @param {LlamaConfig} config the model's config
 * @param {Map<string, PreparedWeight>} weights from prepareWeights
 * @param {{T: number, blockSize: number, nBlocks: number, numerics?: 'llama.cpp' | 'float32', cacheType?: 'float32' | 'float16'}} options
 *   cacheType: the cache tensors' type; float16 holds values the graph
 *   has rounded to float16 already (llama.cpp's numerics), read as float32
 * @returns {Promise<MLGraph>}
 */
async function buildStepGraph(context, config, weights, { T, blockSize: B, nBlocks, numerics = 'llama.cpp', cacheType = 'float32' }) {
  // The builder is looked up on the global scope first, so that this code
  // runs unchanged on another implementation that installs MLGraphBuilder.
  const scope = /** @type {{ MLGraphBuilder?: typeof import('../..').MLGraphBuilder }} */ (globalThis);
  const Builder = scope.MLGraphBuilder || require('../..').MLGraphBuilder;
  const b = new Builder(context);
  const { nLayer: L, nEmbd: E, nHead: H, nHeadKv: Hkv, headDim: hd, rmsEps } = config;
  const g = H / Hkv;
  const half = hd / 2;
  const S = nBlocks - 1;
  const W = nBlocks * B;
  const kShape = [Hkv, hd, B];
  const vShape = [Hkv, B, hd];
  /**
   * @param {number[]} shape
   * @returns {MLOperandDescriptor}
   */
  const f32 = (shape) => ({ dataType: 'float32', shape });
  /** @param {string} name */
  const get = (name) => {
    const w = weights.get(name);
    if (!w) throw new Error(`the model has no tensor ${name}`);
    return w;
  };
  // llama.cpp's CPU backend does not multiply the weights by float32
  // activations: it quantizes each activation row per block of 32 to int8
  // (scale = max |x| / 127, rounded to nearest, the scale kept in
  // float16) and takes integer dot products with the weights' blocks; its
  // cache holds keys and values in float16, and the attention's products
  // take the queries and the probabilities in float16. 'llama.cpp'
  // numerics make the same roundings here, in standard operators
  // (quantizeLinear / dequantizeLinear, casts), so that greedy decoding
  // picks the tokens llama.cpp picks; 'float32' leaves them out.
  const same = numerics !== 'llama.cpp';
  /** @param {MLOperand} x */
  const half16 = (x) => (same ? x : b.cast(b.cast(x, 'float16'), 'float32'));
  // Q, K and V read one activation, gate and up another: round each once.
  /** @type {Map<MLOperand, MLOperand>} */
  const rounded = new Map();
  /** @param {MLOperand} x */
  const q8 = (x) => {
    if (same) return x;
    const done = rounded.get(x);
    if (done) return done;
    const [rows, K] = x.shape;
    const blocks = b.reshape(x, [rows, K / 32, 32]);
    const amax = b.reduceMax(b.abs(blocks), { axes: [2], keepDimensions: true });
    const d = b.div(amax, b.constant('float32', 127));
    // An all-zero block has scale 0: divide by a tiny number instead (its
    // values quantize to 0 all the same), so no 0/0 reaches quantizeLinear.
    const safe = b.max(d, b.constant('float32', 1e-30));
    const zero = b.constant({ dataType: 'int8', shape: [rows, K / 32, 1] }, new Int8Array(rows * (K / 32)));
    const q = b.quantizeLinear(blocks, safe, zero);
    const xq = b.reshape(b.dequantizeLinear(q, half16(d), zero), [rows, K]);
    rounded.set(x, xq);
    return xq;
  };
  // With llama.cpp's numerics, Q4_1's minimum meets the activations as
  // llama.cpp's dot product has it: sum over blocks of m * s, where s is
  // the block's sum of the rounded activations, kept in float16 (Q8_1's
  // s); the codes times their scales are the other product.
  /**
   * @param {MLOperand} x
   * @param {string} name
   */
  const linear = (x, name) => {
    const w = get(name);
    const xq = q8(x);
    if (same || w.type !== 'Q4_1') return b.gemm(xq, dequantized(b, w), { bTranspose: true });
    const [rows, K] = xq.shape;
    const nb = K / 32;
    const codes = b.dequantizeLinear(b.constant(present(w.q)), b.cast(b.constant(present(w.scale)), 'float32'), b.constant(present(w.zp)));
    const sums = half16(b.reduceSum(b.reshape(xq, [rows, nb, 32]), { axes: [2] }));
    const mins = b.cast(b.constant(present(w.min)), 'float32');
    return b.add(b.gemm(xq, codes, { bTranspose: true }), b.gemm(sums, mins, { bTranspose: true }));
  };
  /**
   * @param {MLOperand} x
   * @param {string} name
   */
  const rmsNorm = (x, name) => {
    const ms = b.reduceMean(b.mul(x, x), { axes: [1], keepDimensions: true });
    const eps = b.constant('float32', rmsEps);
    return b.mul(b.div(x, b.sqrt(b.add(ms, eps))), dequantized(b, get(name)));
  };

  const ids = b.input('ids', { dataType: 'int32', shape: [T] });
  const cos = b.input('cos', f32([T, 1, half, 2]));
  const sin = b.input('sin', f32([T, 1, half, 2]));
  const mask = b.input('mask', f32([T, W]));
  const place = b.input('place', f32([T, B]));
  const last = T > 1 ? b.input('last', { dataType: 'int32', shape: [1] }) : null;
  // A cache tensor as a float32 operand: float16 ones are widened (exact).
  /** @type {(x: MLOperand) => MLOperand} */
  const widened = (x) => (cacheType === 'float32' ? x : b.cast(x, 'float32'));
  /** @type {(x: MLOperand) => MLOperand} */
  const cacheOut = (x) => (cacheType === 'float32' ? x : b.cast(x, cacheType));
  // The current block's tensors as they are stored (see the placement
  // below).
  const curKIn = Array.from({ length: L }, (_, l) => b.input(`k${l}`, { dataType: cacheType, shape: kShape }));
  const curVIn = Array.from({ length: L }, (_, l) => b.input(`v${l}`, { dataType: cacheType, shape: vShape }));
  // The past blocks as stored, and widened where a step reads them one
  // by one.
  const pastKIn = Array.from({ length: S }, (_, s) => Array.from({ length: L }, (_, l) => b.input(`p${s}k${l}`, { dataType: cacheType, shape: kShape })));
  const pastVIn = Array.from({ length: S }, (_, s) => Array.from({ length: L }, (_, l) => b.input(`p${s}v${l}`, { dataType: cacheType, shape: vShape })));

  // RoPE on adjacent pairs (x[2i], x[2i+1]) of each head (ggml's "normal"
  // mode, for which the GGUF converter permuted the Q/K weights).
  /**
   * @param {MLOperand} x
   * @param {number} nh
   */
  const rope = (x, nh) => {
    // (x0, x1) -> (x0 cos - x1 sin, x1 cos + x0 sin): the pair times
    // (cos, cos) plus the pair reversed times (-sin, sin). The same bits
    // as the two products and their difference written out: x1 * -sin is
    // -(x1 sin) exactly, and adding it is subtracting x1 sin.
    const r = b.reshape(x, [T, nh, half, 2]);
    const y = b.add(b.mul(r, cos), b.mul(b.reverse(r, { axes: [3] }), sin));
    return b.reshape(y, [T, nh * hd]);
  };
  // Rows of the current block that this step writes are cleared (keep = 0)
  // and the new rows added through the one-hot placement: a matmul with a
  // T x B matrix, exact since each sum has one non-zero term.
  //
  // A decoding step (T = 1) selects instead: `where` the one-hot row is 1,
  // the new key (value), elsewhere the block as it is stored, so the block
  // is copied in its own type and never widened, blended and narrowed.
  const one = T === 1;
  const keep = one ? null : b.sub(b.constant('float32', 1), b.reduceSum(place, { axes: [0] })); // [B]
  const keepCol = keep && b.reshape(keep, [B, 1]);
  const placeT = one ? null : b.transpose(place); // [B, T]
  const column = one ? b.cast(b.reshape(place, [B]), 'uint8') : null; // [B]: 1 at the token's slot
  const row = column && b.reshape(column, [B, 1]);
  /** The keys and values as the cache holds them. @type {(x: MLOperand) => MLOperand} */
  const stored = (x) => (cacheType === 'float16' ? b.cast(x, 'float16') : half16(x));
  const qScale = b.constant('float32', 1 / Math.sqrt(hd));

  let x = dequantized(b, get('token_embd.weight'), ids); // [T, E], only these rows
  /** @type {Record<string, MLOperand>} */
  const next = {};
  for (let l = 0; l < L; l++) {
    const h = rmsNorm(x, `blk.${l}.attn_norm.weight`);
    let q;
    let k;
    let v;
    const qkv = weights.get(`blk.${l}.attn_qkv`);
    if (qkv?.parts) {
      // One product, then Q and K rotated together (their heads side by
      // side), V as it is.
      const [nq, nk, nv] = qkv.parts;
      const y = linear(h, `blk.${l}.attn_qkv`);
      const qk = rope(b.slice(y, [0, 0], [T, nq + nk]), H + Hkv);
      q = b.slice(qk, [0, 0], [T, nq]);
      k = b.slice(qk, [0, nq], [T, nk]);
      v = b.slice(y, [0, nq + nk], [T, nv]);
    } else {
      q = rope(linear(h, `blk.${l}.attn_q.weight`), H);
      k = rope(linear(h, `blk.${l}.attn_k.weight`), Hkv);
      v = linear(h, `blk.${l}.attn_v.weight`);
    }

    /** @type {MLOperand} */
    let curK; // [Hkv, hd, B], float32
    /** @type {MLOperand} */
    let curV; // [Hkv, B, hd]
    if (column && row) {
      const kT = b.transpose(b.reshape(stored(k), [1, Hkv, hd]), { permutation: [1, 2, 0] }); // [Hkv, hd, 1]
      const vH = b.transpose(b.reshape(stored(v), [1, Hkv, hd]), { permutation: [1, 0, 2] }); // [Hkv, 1, hd]
      const nk = b.where(column, kT, curKIn[l]);
      const nv = b.where(row, vH, curVIn[l]);
      next[`nk${l}`] = nk;
      next[`nv${l}`] = nv;
      curK = widened(nk);
      curV = widened(nv);
    } else {
      const kT = b.transpose(b.reshape(half16(k), [T, Hkv, hd]), { permutation: [1, 2, 0] }); // [Hkv, hd, T]
      const vH = b.transpose(b.reshape(half16(v), [T, Hkv, hd]), { permutation: [1, 0, 2] }); // [Hkv, T, hd]
      const kIn = widened(curKIn[l]);
      const vIn = widened(curVIn[l]);
      curK = b.add(b.mul(kIn, /** @type {MLOperand} */ (keep)), b.matmul(kT, place));
      curV = b.add(b.mul(vIn, /** @type {MLOperand} */ (keepCol)), b.matmul(/** @type {MLOperand} */ (placeT), vH));
      next[`nk${l}`] = cacheOut(curK);
      next[`nv${l}`] = cacheOut(curV);
    }

    // The g query heads that share a K/V head are stacked as g*T rows.
    const qg = b.reshape(
      b.transpose(b.reshape(half16(b.mul(q, qScale)), [T, Hkv, g, hd]), { permutation: [1, 2, 0, 3] }),
      [Hkv, g * T, hd]);
    // A decoding step multiplies block by block: its one row of queries
    // reads each block where it is, and concatenating the blocks would
    // copy the whole cache at every step. A prompt's rows (T of them per
    // query head) make scores and probabilities far larger than the
    // blocks, so it concatenates the blocks as stored (float16: half the
    // bytes) and takes one product each, where the block by block form
    // copied the scores into one tensor and the probabilities out again,
    // and added the blocks' products. (With one block there is nothing to
    // concatenate.)
    /** @type {MLOperand} */
    let scores; // [Hkv, gT, W]
    /** @type {(probs: MLOperand) => MLOperand} */
    let attend; // [Hkv, gT, W] -> [Hkv, gT, hd]
    if (S === 0) {
      scores = b.matmul(qg, curK);
      attend = (probs) => b.matmul(probs, curV);
    } else if (one) {
      const keys = [...pastKIn.map((p) => widened(p[l])), curK];
      const values = [...pastVIn.map((p) => widened(p[l])), curV];
      scores = b.concat(keys.map((kb) => b.matmul(qg, kb)), 2);
      attend = (probs) => {
        /** @type {MLOperand | null} */
        let o = null;
        for (const [s, vb] of values.entries()) {
          const part = b.matmul(b.slice(probs, [0, 0, s * B], [Hkv, g * T, B]), vb); // [Hkv, gT, hd]
          o = o ? b.add(o, part) : part;
        }
        return /** @type {MLOperand} */ (o);
      };
    } else {
      const keys = widened(b.concat([...pastKIn.map((p) => p[l]), next[`nk${l}`]], 2)); // [Hkv, hd, W]
      const values = widened(b.concat([...pastVIn.map((p) => p[l]), next[`nv${l}`]], 1)); // [Hkv, W, hd]
      scores = b.matmul(qg, keys);
      attend = (probs) => b.matmul(probs, values);
    }
    const masked = b.add(b.reshape(scores, [Hkv, g, T, W]), mask);
    const probs = half16(b.reshape(b.softmax(masked, 3), [Hkv, g * T, W]));
    const sum = attend(probs);
    const attn = b.reshape(
      b.transpose(b.reshape(sum, [Hkv, g, T, hd]), { permutation: [2, 0, 1, 3] }),
      [T, H * hd]);
    x = b.add(x, linear(attn, `blk.${l}.attn_output.weight`));

    const h2 = rmsNorm(x, `blk.${l}.ffn_norm.weight`);
    let gate;
    let up;
    const gu = weights.get(`blk.${l}.ffn_gate_up`);
    if (gu?.parts) {
      const [ng, nu] = gu.parts;
      const y = linear(h2, `blk.${l}.ffn_gate_up`);
      gate = b.slice(y, [0, 0], [T, ng]);
      up = b.slice(y, [0, ng], [T, nu]);
    } else {
      gate = linear(h2, `blk.${l}.ffn_gate.weight`);
      up = linear(h2, `blk.${l}.ffn_up.weight`);
    }
    x = b.add(x, linear(b.mul(b.mul(gate, b.sigmoid(gate)), up), `blk.${l}.ffn_down.weight`));
  }
  if (last) x = b.gather(x, last, { axis: 0 }); // [1, E]: the head runs for one token
  const hN = rmsNorm(x, 'output_norm.weight');
  const head = weights.has('output.weight') ? 'output.weight' : 'token_embd.weight';
  const logits = linear(hN, head);
  return b.build({ logits, ...next });
}

module.exports = { MASKED, weightNames, prepareWeights, destroyWeights, buildStepGraph };
