'use strict';
// The ONNX models the onnxruntime-web test runs, each written here with its
// inputs and what its nodes should become under ORT's WebNN execution
// provider. Weights and inputs come from a seeded generator, so every run
// sees the same numbers.

const { OnnxWriter, attr } = require('./onnx-writer.js');

/** A deterministic uniform generator in [lo, hi) (mulberry32). */
function random(seed) {
  let s = seed >>> 0;
  return (lo = -1, hi = 1) => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    const u = ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    return lo + (hi - lo) * u;
  };
}

const count = (shape) => shape.reduce((a, b) => a * b, 1);

function floats(rand, shape, lo = -1, hi = 1) {
  return Float32Array.from({ length: count(shape) }, () => rand(lo, hi));
}

/** float32 -> float16 bits, for values exactly representable in float16. */
function halfBits(v) {
  const f = new Float32Array([v]);
  const u = new Uint32Array(f.buffer)[0];
  const sign = (u >>> 16) & 0x8000;
  const exp = ((u >>> 23) & 0xff) - 127 + 15;
  const mant = u & 0x7fffff;
  if (v === 0) return sign;
  if (exp <= 0 || exp >= 31 || (mant & 0x1fff) !== 0) {
    throw new Error(`${v} is not a normal float16 value`);
  }
  return sign | (exp << 10) | (mant >>> 13);
}

// Each model: { name, bytes, inputs: {name: {type, dims, data}}, expect }.
// `expect` is what the test asserts about ORT's partitioning: how many nodes
// ORT's WebNN execution provider takes and leaves to ORT's CPU provider, in
// how many partitions, and the operator types left to the CPU provider.
// The counts are of the graph as ORT 1.30 has it after its basic
// optimizations, which run before partitioning: they can merge nodes (a
// MatMul and the Add of a bias become one Gemm, with Reshapes around it
// when the input has more than two dimensions).

/**
 * A small image classifier: conv, relu, max pool, conv, conv, average pool,
 * global average pool, flatten, gemm, softmax. The input's name contains a
 * slash, as exported models' names often do; ORT passes it to WebNN as is.
 */
function convChain() {
  const rand = random(1);
  const w = new OnnxWriter('conv-chain');
  const x = w.input('gpu_0/data_0', 'float32', [1, 3, 16, 16]);
  const w1 = w.constant('float32', [8, 3, 3, 3], floats(rand, [8, 3, 3, 3], -0.5, 0.5));
  const b1 = w.constant('float32', [8], floats(rand, [8], -0.1, 0.1));
  const c1 = w.node('Conv', [x, w1, b1], { pads: attr.ints([1, 1, 1, 1]) });
  const r1 = w.node('Relu', [c1]);
  const p1 = w.node('MaxPool', [r1], { kernel_shape: attr.ints([2, 2]), strides: attr.ints([2, 2]) });
  const w2 = w.constant('float32', [16, 8, 3, 3], floats(rand, [16, 8, 3, 3], -0.3, 0.3));
  const b2 = w.constant('float32', [16], floats(rand, [16], -0.1, 0.1));
  const c2 = w.node('Conv', [p1, w2, b2], { pads: attr.ints([1, 1, 1, 1]), strides: attr.ints([1, 1]) });
  const r2 = w.node('Relu', [c2]);
  // 16 channels in: the CPU backend runs this one by Winograd.
  const w3 = w.constant('float32', [16, 16, 3, 3], floats(rand, [16, 16, 3, 3], -0.2, 0.2));
  const b3 = w.constant('float32', [16], floats(rand, [16], -0.1, 0.1));
  const r3 = w.node('Relu', [w.node('Conv', [r2, w3, b3], { pads: attr.ints([1, 1, 1, 1]) })]);
  const p2 = w.node('AveragePool', [r3], { kernel_shape: attr.ints([2, 2]), strides: attr.ints([2, 2]) });
  const g = w.node('GlobalAveragePool', [p2]);
  const f = w.node('Flatten', [g], { axis: attr.int(1) });
  const wf = w.constant('float32', [10, 16], floats(rand, [10, 16]));
  const bf = w.constant('float32', [10], floats(rand, [10], -0.1, 0.1));
  const logits = w.node('Gemm', [f, wf, bf], { transB: attr.int(1) });
  w.node('Softmax', [logits], { axis: attr.int(1) }, ['prob']);
  w.output('prob', 'float32', [1, 10]);
  return {
    name: 'conv-chain',
    bytes: w.encode(),
    inputs: { 'gpu_0/data_0': { type: 'float32', dims: [1, 3, 16, 16], data: floats(rand, [1, 3, 16, 16]) } },
    expect: { webnn: 12, cpu: 0, partitions: 1, cpuOps: {} },
  };
}

/**
 * Two WebNN partitions around a `Sum`, which ORT's WebNN execution provider
 * does not take: the first partition hands two tensors to ORT's CPU
 * provider, the second takes the sum back. The graph output has a numeric
 * name.
 */
function partitioned() {
  const rand = random(2);
  const w = new OnnxWriter('partitioned');
  const x = w.input('x', 'float32', [1, 4, 8, 8]);
  const wa = w.constant('float32', [8, 4, 3, 3], floats(rand, [8, 4, 3, 3], -0.4, 0.4));
  const a = w.node('Relu', [w.node('Conv', [x, wa], { pads: attr.ints([1, 1, 1, 1]) })]);
  const wb = w.constant('float32', [8, 4, 1, 1], floats(rand, [8, 4, 1, 1]));
  const b = w.node('Sigmoid', [w.node('Conv', [x, wb])]);
  const s = w.node('Sum', [a, b, a]);
  const wc = w.constant('float32', [6, 8, 3, 3], floats(rand, [6, 8, 3, 3], -0.3, 0.3));
  const c = w.node('Tanh', [w.node('Conv', [s, wc], { strides: attr.ints([2, 2]) })]);
  w.node('GlobalAveragePool', [c], {}, ['5']);
  w.output('5', 'float32', [1, 6, 1, 1]);
  return {
    name: 'partitioned',
    bytes: w.encode(),
    inputs: { x: { type: 'float32', dims: [1, 4, 8, 8], data: floats(rand, [1, 4, 8, 8]) } },
    expect: { webnn: 7, cpu: 1, partitions: 2, cpuOps: { Sum: 1 } },
  };
}

/** A bidirectional LSTM with biases and initial states, all three outputs. */
function lstm() {
  const rand = random(3);
  const [T, N, I, H, D] = [5, 2, 4, 3, 2];
  const w = new OnnxWriter('lstm');
  const x = w.input('x', 'float32', [T, N, I]);
  const h0 = w.input('h0', 'float32', [D, N, H]);
  const W = w.constant('float32', [D, 4 * H, I], floats(rand, [D, 4 * H, I]));
  const R = w.constant('float32', [D, 4 * H, H], floats(rand, [D, 4 * H, H]));
  const B = w.constant('float32', [D, 8 * H], floats(rand, [D, 8 * H], -0.5, 0.5));
  const c0 = w.constant('float32', [D, N, H], floats(rand, [D, N, H]));
  w.node(
    'LSTM',
    [x, W, R, B, '', h0, c0],
    { hidden_size: attr.int(H), direction: attr.string('bidirectional') },
    ['y', 'y_h', 'y_c'],
  );
  w.output('y', 'float32', [T, D, N, H]);
  w.output('y_h', 'float32', [D, N, H]);
  w.output('y_c', 'float32', [D, N, H]);
  return {
    name: 'lstm',
    bytes: w.encode(),
    inputs: {
      x: { type: 'float32', dims: [T, N, I], data: floats(rand, [T, N, I]) },
      h0: { type: 'float32', dims: [D, N, H], data: floats(rand, [D, N, H]) },
    },
    expect: { webnn: 1, cpu: 0, partitions: 1, cpuOps: {} },
  };
}

/**
 * Two GRUs in a row: a forward one without initial state, then a reverse
 * one with an initial hidden state, fed the first one's sequence output.
 * Both keep ONNX's default `linear_before_reset = 0`: ORT 1.30's WebNN
 * execution provider reads that attribute under a misspelled name and so
 * always asks WebNN for `resetAfter: false` (see docs/ort-web.md).
 */
function gru() {
  const rand = random(4);
  const [T, N, I, H] = [6, 2, 5, 4];
  const w = new OnnxWriter('gru');
  const x = w.input('x', 'float32', [T, N, I]);
  const W1 = w.constant('float32', [1, 3 * H, I], floats(rand, [1, 3 * H, I]));
  const R1 = w.constant('float32', [1, 3 * H, H], floats(rand, [1, 3 * H, H]));
  const B1 = w.constant('float32', [1, 6 * H], floats(rand, [1, 6 * H], -0.5, 0.5));
  const [y1] = w.node('GRU', [x, W1, R1, B1], { hidden_size: attr.int(H) }, 2);
  // [T, 1, N, H] -> [T, N, H]
  const axes = w.constant('int64', [1], BigInt64Array.from([1n]));
  const seq = w.node('Squeeze', [y1, axes]);
  const W2 = w.constant('float32', [1, 3 * H, H], floats(rand, [1, 3 * H, H]));
  const R2 = w.constant('float32', [1, 3 * H, H], floats(rand, [1, 3 * H, H]));
  const B2 = w.constant('float32', [1, 6 * H], floats(rand, [1, 6 * H], -0.5, 0.5));
  const h0 = w.constant('float32', [1, N, H], floats(rand, [1, N, H]));
  w.node(
    'GRU',
    [seq, W2, R2, B2, '', h0],
    { hidden_size: attr.int(H), direction: attr.string('reverse') },
    ['y', 'y_h'],
  );
  w.output('y', 'float32', [T, 1, N, H]);
  w.output('y_h', 'float32', [1, N, H]);
  return {
    name: 'gru',
    bytes: w.encode(),
    inputs: { x: { type: 'float32', dims: [T, N, I], data: floats(rand, [T, N, I]) } },
    expect: { webnn: 3, cpu: 0, partitions: 1, cpuOps: {} },
  };
}

/**
 * float16 activations and weights: matmul, bias, relu and a cast to
 * float32. Every value is a small multiple of 1/16 and every partial sum
 * stays below 2^7, so float16 holds each product and sum exactly: the two
 * providers may round at different points (float32 accumulation then one
 * rounding, or float16 throughout) and still agree bit for bit, which
 * makes the test about carrying float16 data, not about rounding order.
 */
function float16() {
  const rand = random(5);
  const sixteenths = (shape, lo, hi) =>
    Uint16Array.from({ length: count(shape) }, () => halfBits(Math.round(rand(lo, hi)) / 16));
  const w = new OnnxWriter('float16');
  const x = w.input('x', 'float16', [4, 8]);
  const W = w.constant('float16', [8, 6], sixteenths([8, 6], -8, 8));
  const b = w.constant('float16', [6], sixteenths([6], -8, 8));
  const y = w.node('Relu', [w.node('Add', [w.node('MatMul', [x, W]), b])], {}, ['y16']);
  const W2 = w.constant('float16', [6, 3], sixteenths([6, 3], -4, 4));
  const z = w.node('MatMul', [y, W2]);
  w.node('Cast', [z], { to: attr.int(1) }, ['y32']);
  w.output('y16', 'float16', [4, 6]);
  w.output('y32', 'float32', [4, 3]);
  return {
    name: 'float16',
    bytes: w.encode(),
    inputs: { x: { type: 'float16', dims: [4, 8], data: sixteenths([4, 8], -16, 16) } },
    expect: { webnn: 4, cpu: 0, partitions: 1, cpuOps: {} },
  };
}

/**
 * int64 inputs: token ids gather rows of an embedding table, and int64
 * arithmetic on the ids that needs all 64 bits (an offset of 2^40), so
 * narrowing to int32 anywhere would show.
 */
function int64() {
  const rand = random(6);
  const [V, E, N, S] = [16, 6, 2, 5];
  const w = new OnnxWriter('int64');
  const ids = w.input('ids', 'int64', [N, S]);
  const table = w.constant('float32', [V, E], floats(rand, [V, E]));
  const emb = w.node('Gather', [table, ids], { axis: attr.int(0) });
  w.node('ReduceMean', [emb], { axes: attr.ints([1]), keepdims: attr.int(0) }, ['pooled']);
  const big = w.constant('int64', [], BigInt64Array.from([1n << 40n]));
  const three = w.constant('int64', [], BigInt64Array.from([-3n]));
  w.node('Mul', [w.node('Add', [ids, big]), three], {}, ['shifted']);
  const f = w.node('Cast', [ids], { to: attr.int(1) });
  w.node('Mul', [f, w.node('Cast', [w.node('Neg', [ids])], { to: attr.int(1) })], {}, ['squares']);
  w.output('pooled', 'float32', [N, E]);
  w.output('shifted', 'int64', [N, S]);
  w.output('squares', 'float32', [N, S]);
  const data = BigInt64Array.from({ length: N * S }, () => BigInt(Math.floor(rand(0, V))));
  return {
    name: 'int64',
    bytes: w.encode(),
    inputs: { ids: { type: 'int64', dims: [N, S], data } },
    expect: { webnn: 8, cpu: 0, partitions: 1, cpuOps: {} },
  };
}

/**
 * A pre-norm transformer block: layer normalization, two-head causal
 * self-attention (reshape and transpose into heads, scaled scores, an
 * additive mask, softmax), output projection with residual, then a GELU
 * feed-forward (written with Erf, as exporters do) with residual.
 */
function transformer() {
  const rand = random(7);
  const [S, Dm, Hn] = [8, 16, 2];
  const Dh = Dm / Hn;
  const w = new OnnxWriter('transformer');
  const x = w.input('x', 'float32', [1, S, Dm]);
  const shape = (dims) => w.constant('int64', [dims.length], BigInt64Array.from(dims, BigInt));
  const linear = (v, i, o) => {
    const W = w.constant('float32', [i, o], floats(rand, [i, o], -0.4, 0.4));
    const b = w.constant('float32', [o], floats(rand, [o], -0.1, 0.1));
    return w.node('Add', [w.node('MatMul', [v, W]), b]);
  };
  const norm = (v) => {
    const g = w.constant('float32', [Dm], floats(rand, [Dm], 0.5, 1.5));
    const b = w.constant('float32', [Dm], floats(rand, [Dm], -0.1, 0.1));
    return w.node('LayerNormalization', [v, g, b], { axis: attr.int(-1), epsilon: attr.float(1e-5) });
  };
  const heads = (v, perm) =>
    w.node('Transpose', [w.node('Reshape', [v, shape([1, S, Hn, Dh])])], { perm: attr.ints(perm) });

  const h = norm(x);
  const q = heads(linear(h, Dm, Dm), [0, 2, 1, 3]); // [1, Hn, S, Dh]
  const k = heads(linear(h, Dm, Dm), [0, 2, 3, 1]); // [1, Hn, Dh, S]
  const v = heads(linear(h, Dm, Dm), [0, 2, 1, 3]);
  const scale = w.constant('float32', [], Float32Array.from([1 / Math.sqrt(Dh)]));
  const mask = new Float32Array(S * S);
  for (let i = 0; i < S; i++) for (let j = i + 1; j < S; j++) mask[i * S + j] = -1e4;
  const maskC = w.constant('float32', [1, 1, S, S], mask);
  const scores = w.node('Add', [w.node('Mul', [w.node('MatMul', [q, k]), scale]), maskC]);
  const p = w.node('Softmax', [scores], { axis: attr.int(-1) });
  const ctx = w.node('Transpose', [w.node('MatMul', [p, v])], { perm: attr.ints([0, 2, 1, 3]) });
  const merged = w.node('Reshape', [ctx, shape([1, S, Dm])]);
  const x1 = w.node('Add', [x, linear(merged, Dm, Dm)]);

  const f = linear(norm(x1), Dm, 2 * Dm);
  const c = (value) => w.constant('float32', [], Float32Array.from([value]));
  const erf = w.node('Erf', [w.node('Mul', [f, c(Math.SQRT1_2)])]);
  const gelu = w.node('Mul', [w.node('Mul', [f, w.node('Add', [erf, c(1)])]), c(0.5)]);
  w.node('Add', [x1, linear(gelu, 2 * Dm, Dm)], {}, ['y']);
  w.output('y', 'float32', [1, S, Dm]);
  return {
    name: 'transformer',
    bytes: w.encode(),
    inputs: { x: { type: 'float32', dims: [1, S, Dm], data: floats(rand, [1, S, Dm]) } },
    expect: { webnn: 36, cpu: 0, partitions: 1, cpuOps: {} },
  };
}

/**
 * 4-bit weights as onnxruntime's quantizers write them: `MatMulNBits`
 * (com.microsoft, blocks of 32 along K), which ORT's WebNN execution
 * provider lowers to `dequantizeLinear` of a constant uint4 tensor, a
 * reshape and a transpose before a `matmul`, the pattern the CPU backend
 * keeps quantized. One weight matrix with zero points (packed two to a
 * byte) is read by a single-row input (a decoding step's product) and a
 * batched one of ten rows (a prompt's); a second one without zero points
 * (ONNX's default of 8) follows a Relu. `node: true`: the outputs are also
 * compared with onnxruntime-node's.
 */
function matmulNBits() {
  const rand = random(8);
  const codes = (n) => Uint8Array.from({ length: n }, () => Math.floor(rand(0, 16)));
  // N rows of K 4-bit codes, two to a byte, the lower index in the low half.
  const blob = (N, K) => {
    const q = codes(N * K);
    return Uint8Array.from({ length: (N * K) / 2 }, (_, i) => q[2 * i] | (q[2 * i + 1] << 4));
  };
  const w = new OnnxWriter('matmul-nbits');
  const nbits = (x, K, N, zeroPoints) => {
    const blocks = K / 32;
    const B = w.constant('uint8', [N, blocks, 16], blob(N, K));
    const scales = w.constant('float32', [N * blocks], floats(rand, [N * blocks], 0.01, 0.05));
    const inputs = [x, B, scales];
    // One byte per column holds its blocks' zero points (2 blocks here).
    if (zeroPoints) inputs.push(w.constant('uint8', [N], blob(N, 2)));
    const attrs = { K: attr.int(K), N: attr.int(N), bits: attr.int(4), block_size: attr.int(32) };
    return [inputs, attrs];
  };
  const x = w.input('x', 'float32', [1, 64]);
  const xs = w.input('xs', 'float32', [2, 5, 64]);
  const [first, attrs1] = nbits(x, 64, 64, true);
  const h = w.node('MatMulNBits', first, attrs1, 1, 'com.microsoft');
  w.node('MatMulNBits', [xs, ...first.slice(1)], attrs1, ['ys'], 'com.microsoft');
  const [second, attrs2] = nbits(w.node('Relu', [h]), 64, 24, false);
  w.node('MatMulNBits', second, attrs2, ['y'], 'com.microsoft');
  w.output('y', 'float32', [1, 24]);
  w.output('ys', 'float32', [2, 5, 64]);
  return {
    name: 'matmul-nbits',
    bytes: w.encode(),
    inputs: {
      x: { type: 'float32', dims: [1, 64], data: floats(rand, [1, 64]) },
      xs: { type: 'float32', dims: [2, 5, 64], data: floats(rand, [2, 5, 64]) },
    },
    node: true,
    expect: { webnn: 4, cpu: 0, partitions: 1, cpuOps: {} },
  };
}

/** Every model, in the order the test runs them. */
function models() {
  return [convChain(), partitioned(), lstm(), gru(), float16(), int64(), transformer(), matmulNBits()];
}

module.exports = { models };
