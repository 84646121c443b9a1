'use strict';
// The benchmark's workloads, each described ONCE as a function of an
// "emitter" (g) and a seeded random source. The same description is run
// against the WebNN emitter below (MLGraphBuilder) and the ONNX emitter in
// bench/onnx.js; with the same seed both draw identical weights in the same
// order, so the two graphs compute the same function and their outputs can
// be compared before anything is timed.
//
// The emitter interface (values are the emitter's own handles):
//   g.input(name, shape)              g.constant(shape, Float32Array)
//   g.output(name, value, shape)
//   g.add(a, b)  g.mul(a, b)  g.matmul(a, b)  g.gemm(a, b, c)
//   g.conv2d(x, w, bias, {kernel, strides, pads: [t, b, l, r], groups})  (NCHW / OIHW)
//   g.clamp(x, lo, hi)  g.softmax(x, axis)  g.reshape(x, shape)  g.transpose(x, perm)
//   g.globalAveragePool(x)  g.layerNorm(x, scale, bias, epsilon)  (last axis)  g.gelu(x)
//   g.relu(x)  g.maxPool2d(x, {window, strides, pads, ceil})  g.concat(values, axis)  (NCHW)

// --- seeded random numbers ---

// A 32-bit xorshift generator (Marsaglia's 13/17/5 triple): small, fast and
// deterministic across platforms, which is all a benchmark needs.
function makeRandom(seed) {
  let state = seed >>> 0 || 0x9e3779b9;
  const next = () => {
    state ^= state << 13;
    state >>>= 0;
    state ^= state >>> 17;
    state ^= state << 5;
    state >>>= 0;
    return state / 4294967296; // [0, 1)
  };
  /** A Float32Array of `shape`'s size, uniform in [-scale, scale). */
  const uniform = (shape, scale = 1) => {
    const size = shape.reduce((a, b) => a * b, 1);
    const out = new Float32Array(size);
    for (let i = 0; i < size; i++) out[i] = (2 * next() - 1) * scale;
    return out;
  };
  return { next, uniform };
}

// He-style scale for a uniform distribution: variance 2 / fan_in keeps
// activations of order 1 through ReLU-like layers, so the outputs stay in a
// range where a relative-error check means something.
const heScale = (fanIn) => Math.sqrt(6 / fanIn);
// Biases small, so they shift without dominating.
const BIAS_SCALE = 0.1;

const size = (shape) => shape.reduce((a, b) => a * b, 1);

// --- the workloads ---

// C = A B with A m x k and B k x n; B a constant (as a model's weights) or
// a second input.
function matmulWorkload({ id, title, m, k, n, constantB, runs }) {
  return {
    id,
    title,
    inputs: constantB ? [{ name: 'a', shape: [m, k] }] : [{ name: 'a', shape: [m, k] }, { name: 'b', shape: [k, n] }],
    outputs: [{ name: 'c', shape: [m, n] }],
    flops: 2 * m * n * k,
    runs,
    build(g, rand) {
      const a = g.input('a', [m, k]);
      // Scaled by 1/sqrt(K): the products then sum to values of order 1.
      const b = constantB ? g.constant([k, n], rand.uniform([k, n], 1 / Math.sqrt(k))) : g.input('b', [k, n]);
      g.output('c', g.matmul(a, b), [m, n]);
    },
    // The inputs' own scales (B as an input gets the same 1/sqrt(K)).
    inputData(rand) {
      const data = { a: rand.uniform([m, k]) };
      if (!constantB) data.b = rand.uniform([k, n], 1 / Math.sqrt(k));
      return data;
    },
  };
}

// One conv2d with bias, NCHW, stride 1, the output the input's size.
function conv2dWorkload({ id, title, cin, cout, hw, k, runs }) {
  const pad = (k - 1) / 2;
  return {
    id,
    title,
    inputs: [{ name: 'x', shape: [1, cin, hw, hw] }],
    outputs: [{ name: 'y', shape: [1, cout, hw, hw] }],
    flops: 2 * cout * hw * hw * cin * k * k,
    runs,
    build(g, rand) {
      const x = g.input('x', [1, cin, hw, hw]);
      const filter = g.constant([cout, cin, k, k], rand.uniform([cout, cin, k, k], heScale(cin * k * k)));
      const bias = g.constant([cout], rand.uniform([cout], BIAS_SCALE));
      const y = g.conv2d(x, filter, bias, { kernel: [k, k], pads: [pad, pad, pad, pad] });
      g.output('y', y, [1, cout, hw, hw]);
    },
    inputData(rand) {
      return { x: rand.uniform([1, cin, hw, hw]) };
    },
  };
}

// MobileNetV2 (Sandler et al. 2018) at 224x224, batch normalization folded
// into the convolutions' biases. The table is the paper's: expansion t,
// output channels c, repeats n, first stride s.
const MOBILENET_V2_BLOCKS = [
  [1, 16, 1, 1],
  [6, 24, 2, 2],
  [6, 32, 3, 2],
  [6, 64, 4, 2],
  [6, 96, 3, 1],
  [6, 160, 3, 2],
  [6, 320, 1, 1],
];

// Multiply-adds of MobileNetV2 as mobilenetWorkload builds it, times 2.
function mobilenetFlops() {
  let hw = 112; // after the stem
  let flops = 2 * hw * hw * 32 * 3 * 9;
  let channels = 32;
  for (const [t, c, n, s] of MOBILENET_V2_BLOCKS) {
    for (let i = 0; i < n; i++) {
      const hidden = channels * t;
      if (t !== 1) flops += 2 * hw * hw * channels * hidden;
      if (i === 0 && s === 2) hw /= 2;
      flops += 2 * hw * hw * hidden * 9 + 2 * hw * hw * hidden * c;
      channels = c;
    }
  }
  return flops + 2 * hw * hw * channels * 1280 + 2 * 1280 * 1000;
}

function mobilenetWorkload() {
  return {
    id: 'c',
    title: 'MobileNetV2 224x224',
    flops: mobilenetFlops(),
    inputs: [{ name: 'image', shape: [1, 3, 224, 224] }],
    outputs: [{ name: 'probs', shape: [1, 1000] }],
    runs: 20,
    build(g, rand) {
      // conv + folded-BN bias (+ ReLU6); tracks the spatial size itself so
      // the description needs no shape inference from either emitter.
      let hw = 224;
      const conv = (x, cin, cout, k, stride, groups, relu6) => {
        const fanIn = (cin / groups) * k * k;
        const filter = g.constant([cout, cin / groups, k, k], rand.uniform([cout, cin / groups, k, k], heScale(fanIn)));
        const bias = g.constant([cout], rand.uniform([cout], BIAS_SCALE));
        const pad = (k - 1) / 2;
        const y = g.conv2d(x, filter, bias, {
          kernel: [k, k],
          strides: [stride, stride],
          pads: [pad, pad, pad, pad],
          groups,
        });
        if (stride === 2) hw /= 2;
        return relu6 ? g.clamp(y, 0, 6) : y;
      };

      let x = g.input('image', [1, 3, 224, 224]);
      x = conv(x, 3, 32, 3, 2, 1, true);
      let channels = 32;
      for (const [t, c, n, s] of MOBILENET_V2_BLOCKS) {
        for (let i = 0; i < n; i++) {
          const stride = i === 0 ? s : 1;
          const hidden = channels * t;
          let y = x;
          if (t !== 1) y = conv(y, channels, hidden, 1, 1, 1, true); // expansion
          y = conv(y, hidden, hidden, 3, stride, hidden, true); // depthwise
          y = conv(y, hidden, c, 1, 1, 1, false); // linear projection
          x = stride === 1 && channels === c ? g.add(x, y) : y;
          channels = c;
        }
      }
      x = conv(x, channels, 1280, 1, 1, 1, true);
      if (hw !== 7) throw new Error(`MobileNetV2 description: final size ${hw}, expected 7`);
      x = g.globalAveragePool(x);
      const fcData = rand.uniform([1280, 1000], heScale(1280));
      const fcBiasData = rand.uniform([1000], BIAS_SCALE);
      let logits;
      if (g.convClassifier) {
        // The classifier as a converter from TensorFlow Lite writes it: a
        // 1x1 convolution of the pooled pixel, then a reshape.
        const filter = new Float32Array(1000 * 1280);
        for (let i = 0; i < 1280; i++) for (let o = 0; o < 1000; o++) filter[o * 1280 + i] = fcData[i * 1000 + o];
        const y = g.conv2d(x, g.constant([1000, 1280, 1, 1], filter), g.constant([1000], fcBiasData), { kernel: [1, 1] });
        logits = g.reshape(y, [1, 1000]);
      } else {
        logits = g.gemm(g.reshape(x, [1, 1280]), g.constant([1280, 1000], fcData), g.constant([1000], fcBiasData));
      }
      g.output('probs', g.softmax(logits, 1), [1, 1000]);
    },
    inputData(rand) {
      return { image: rand.uniform([1, 3, 224, 224]) };
    },
  };
}

// conv + folded-BN bias, optionally ReLU, for the CNN descriptions below,
// with its multiply-adds counted into `macs` (so the FLOP count is the
// graph's own, not a second description of it).
function convLayer(g, rand, macs) {
  return (x, { cin, cout, k, stride = 1, pad = 0, hw, relu = true, gain = 1 }) => {
    const filter = g.constant([cout, cin, k, k], rand.uniform([cout, cin, k, k], gain * heScale(cin * k * k)));
    const bias = g.constant([cout], rand.uniform([cout], BIAS_SCALE));
    const y = g.conv2d(x, filter, bias, { kernel: [k, k], strides: [stride, stride], pads: [pad, pad, pad, pad] });
    const out = Math.floor((hw + 2 * pad - k) / stride) + 1;
    macs.count += out * out * cout * cin * k * k;
    return { y: relu ? g.relu(y) : y, hw: out };
  };
}

// Runs `build` with a description that only counts: 2 x its convolutions'
// and head's multiply-adds.
function countFlops(build) {
  const macs = { count: 0 };
  build(new NullEmitter(), makeRandom(1), macs);
  return 2 * macs.count;
}

// SqueezeNet 1.1 (Iandola et al. 2016, the 1.1 revision) at 224x224: fire
// modules (1x1 squeeze, then 1x1 and 3x3 expands concatenated on the
// channel axis), max pools with ceil rounding, a 1x1 classifier
// convolution and a global average pool. Many small convolutions, concat
// and pooling: the graph shape the W3C webnn-samples' SqueezeNet has.
function squeezenetBuild(g, rand, macs = { count: 0 }) {
  const conv = convLayer(g, rand, macs);
  const pool = (x, hw) => ({
    y: g.maxPool2d(x, { window: [3, 3], strides: [2, 2], ceil: true }),
    hw: Math.ceil((hw - 3) / 2) + 1,
  });
  const fire = (x, hw, cin, squeeze, expand) => {
    const s = conv(x, { cin, cout: squeeze, k: 1, hw }).y;
    const e1 = conv(s, { cin: squeeze, cout: expand, k: 1, hw }).y;
    const e3 = conv(s, { cin: squeeze, cout: expand, k: 3, pad: 1, hw }).y;
    return g.concat([e1, e3], 1);
  };
  let x = g.input('image', [1, 3, 224, 224]);
  let hw;
  ({ y: x, hw } = conv(x, { cin: 3, cout: 64, k: 3, stride: 2, hw: 224 }));
  ({ y: x, hw } = pool(x, hw));
  x = fire(x, hw, 64, 16, 64);
  x = fire(x, hw, 128, 16, 64);
  ({ y: x, hw } = pool(x, hw));
  x = fire(x, hw, 128, 32, 128);
  x = fire(x, hw, 256, 32, 128);
  ({ y: x, hw } = pool(x, hw));
  x = fire(x, hw, 256, 48, 192);
  x = fire(x, hw, 384, 48, 192);
  x = fire(x, hw, 384, 64, 256);
  x = fire(x, hw, 512, 64, 256);
  if (hw !== 13) throw new Error(`SqueezeNet description: final size ${hw}, expected 13`);
  x = conv(x, { cin: 512, cout: 1000, k: 1, hw }).y;
  g.output('probs', g.softmax(g.reshape(g.globalAveragePool(x), [1, 1000]), 1), [1, 1000]);
}

function squeezenetWorkload() {
  return {
    id: 'j',
    title: 'SqueezeNet 1.1 224x224',
    // A getter: the counting emitter is defined further down.
    get flops() {
      return countFlops(squeezenetBuild);
    },
    inputs: [{ name: 'image', shape: [1, 3, 224, 224] }],
    outputs: [{ name: 'probs', shape: [1, 1000] }],
    runs: 20,
    needs: ['maxPool2d', 'concat', 'relu'],
    build: squeezenetBuild,
    inputData(rand) {
      return { image: rand.uniform([1, 3, 224, 224]) };
    },
  };
}

// ResNet-50 (He et al. 2016; stride on the 3x3 convolution, as the common
// "v1.5" form) at 224x224 with batch normalization folded into the
// convolutions' biases: a 7x7 stride-2 stem, a max pool, 16 bottleneck
// blocks whose residual sum is followed by ReLU, a global average pool and
// a gemm + softmax head.
function resnetBuild(g, rand, macs = { count: 0 }) {
  const conv = convLayer(g, rand, macs);
  let x = g.input('image', [1, 3, 224, 224]);
  let hw;
  ({ y: x, hw } = conv(x, { cin: 3, cout: 64, k: 7, stride: 2, pad: 3, hw: 224 }));
  x = g.maxPool2d(x, { window: [3, 3], strides: [2, 2], pads: [1, 1, 1, 1] });
  hw = Math.floor((hw + 2 - 3) / 2) + 1;
  let channels = 64;
  for (const [width, blocks, firstStride] of [
    [64, 3, 1],
    [128, 4, 2],
    [256, 6, 2],
    [512, 3, 2],
  ]) {
    for (let i = 0; i < blocks; i++) {
      const stride = i === 0 ? firstStride : 1;
      const out = width * 4;
      const a = conv(x, { cin: channels, cout: width, k: 1, hw });
      const b = conv(a.y, { cin: width, cout: width, k: 3, stride, pad: 1, hw });
      // The residual branch's last convolution scaled down (as a
      // trained network's last batch norm of a block is), so that the
      // sums of 16 blocks stay of order 1 and the softmax does not
      // saturate to one class, which any two runtimes would agree on.
      const c = conv(b.y, { cin: width, cout: out, k: 1, hw: b.hw, relu: false, gain: 0.25 });
      const skip = i === 0 ? conv(x, { cin: channels, cout: out, k: 1, stride, hw, relu: false }).y : x;
      x = g.relu(g.add(c.y, skip));
      hw = b.hw;
      channels = out;
    }
  }
  if (hw !== 7) throw new Error(`ResNet-50 description: final size ${hw}, expected 7`);
  x = g.reshape(g.globalAveragePool(x), [1, 2048]);
  const fc = g.constant([2048, 1000], rand.uniform([2048, 1000], heScale(2048)));
  const fcBias = g.constant([1000], rand.uniform([1000], BIAS_SCALE));
  macs.count += 2048 * 1000;
  g.output('probs', g.softmax(g.gemm(x, fc, fcBias), 1), [1, 1000]);
}

function resnetWorkload() {
  return {
    id: 'k',
    title: 'ResNet-50 224x224',
    get flops() {
      return countFlops(resnetBuild);
    },
    inputs: [{ name: 'image', shape: [1, 3, 224, 224] }],
    outputs: [{ name: 'probs', shape: [1, 1000] }],
    runs: 10,
    needs: ['maxPool2d', 'relu'],
    build: resnetBuild,
    inputData(rand) {
      return { image: rand.uniform([1, 3, 224, 224]) };
    },
  };
}

// One post-norm transformer encoder block (BERT-style layout), MiniLM-sized.
function transformerWorkload() {
  const [seq, hidden, heads, headDim, ff] = [128, 384, 6, 64, 1536];
  return {
    id: 'd',
    title: 'transformer encoder block 128x384, 6 heads',
    // Six products by weights (Q, K, V, the output projection, the FFN's
    // two) and the attention's two per head.
    flops: 2 * (4 * seq * hidden * hidden + 2 * seq * hidden * ff + 2 * heads * seq * seq * headDim),
    inputs: [{ name: 'x', shape: [1, seq, hidden] }],
    outputs: [{ name: 'y', shape: [1, seq, hidden] }],
    runs: 30,
    // The WebNN operators this description needs beyond the basic set, so an
    // older build reports "unavailable" instead of failing halfway.
    needs: ['layerNormalization', 'gelu'],
    build(g, rand) {
      // Linear layers use a 1/sqrt(fan_in) uniform scale: no ReLU follows,
      // so the plain Xavier-like variance keeps values of order 1.
      const linear = (x, fanIn, fanOut) => {
        const w = g.constant([fanIn, fanOut], rand.uniform([fanIn, fanOut], 1 / Math.sqrt(fanIn)));
        const b = g.constant([fanOut], rand.uniform([fanOut], BIAS_SCALE));
        return g.add(g.matmul(x, w), b);
      };
      const norm = (x) => {
        // LayerNorm's learned scale near 1 and bias near 0, as after training.
        const scale = rand.uniform([hidden], 0.1).map((v) => 1 + v);
        const bias = rand.uniform([hidden], BIAS_SCALE);
        return g.layerNorm(x, g.constant([hidden], scale), g.constant([hidden], bias), 1e-5);
      };
      // [1, seq, hidden] -> [1, heads, seq, headDim] (or its transpose for K).
      const splitHeads = (x, perm) => g.transpose(g.reshape(x, [1, seq, heads, headDim]), perm);

      const x = g.input('x', [1, seq, hidden]);
      const q = splitHeads(linear(x, hidden, hidden), [0, 2, 1, 3]);
      const kt = splitHeads(linear(x, hidden, hidden), [0, 2, 3, 1]);
      const v = splitHeads(linear(x, hidden, hidden), [0, 2, 1, 3]);
      const scale = g.constant([], new Float32Array([1 / Math.sqrt(headDim)]));
      const probs = g.softmax(g.mul(g.matmul(q, kt), scale), 3);
      const context = g.reshape(g.transpose(g.matmul(probs, v), [0, 2, 1, 3]), [1, seq, hidden]);
      const h1 = norm(g.add(linear(context, hidden, hidden), x));
      const ffOut = linear(g.gelu(linear(h1, hidden, ff)), ff, hidden);
      g.output('y', norm(g.add(ffOut, h1)), [1, seq, hidden]);
    },
    inputData(rand) {
      return { x: rand.uniform([1, seq, hidden]) };
    },
  };
}

function addWorkload(n, id, title, runs, form) {
  return {
    id,
    title,
    form,
    inputs: [{ name: 'a', shape: [n] }, { name: 'b', shape: [n] }],
    outputs: [{ name: 'c', shape: [n] }],
    runs,
    // For the tiny add the per-call cost is the point: report microseconds.
    perCallMicros: n <= 1000,
    build(g) {
      g.output('c', g.add(g.input('a', [n]), g.input('b', [n])), [n]);
    },
    inputData(rand) {
      return { a: rand.uniform([n]), b: rand.uniform([n]) };
    },
  };
}

const WORKLOADS = [
  matmulWorkload({ id: 'a1', title: 'matmul 1024^3, B constant', m: 1024, k: 1024, n: 1024, constantB: true, runs: 20 }),
  matmulWorkload({ id: 'a2', title: 'matmul 1024^3, A and B inputs', m: 1024, k: 1024, n: 1024, constantB: false, runs: 20 }),
  conv2dWorkload({ id: 'b', title: 'conv2d 1x64x56x56, 64 3x3, pad 1', cin: 64, cout: 64, hw: 56, k: 3, runs: 30 }),
  mobilenetWorkload(),
  transformerWorkload(),
  addWorkload(1000, 'e', 'add 1000 elements', 2000),
  addWorkload(1000000, 'f', 'add 1M elements', 200),
  addWorkload(1000000, 'f2', 'add 1M elements, compute()', 200, 'compute'),

  // The products inside the transformer block and MiniLM (sequence 128,
  // hidden 384, FFN 1536; batch 8 stacks 1024 rows), weights constant.
  matmulWorkload({ id: 'h1', title: 'matmul 128x384 by 384x384', m: 128, k: 384, n: 384, constantB: true, runs: 200 }),
  matmulWorkload({ id: 'h2', title: 'matmul 128x384 by 384x1536', m: 128, k: 384, n: 1536, constantB: true, runs: 100 }),
  matmulWorkload({ id: 'h3', title: 'matmul 128x1536 by 1536x384', m: 128, k: 1536, n: 384, constantB: true, runs: 100 }),
  matmulWorkload({ id: 'h4', title: 'matmul 1024x384 by 384x1536', m: 1024, k: 384, n: 1536, constantB: true, runs: 30 }),
  // MobileNetV2's 1x1 convolutions at three of its plane sizes.
  conv2dWorkload({ id: 'i1', title: 'conv2d 1x1 1x32x112x112 to 96', cin: 32, cout: 96, hw: 112, k: 1, runs: 50 }),
  conv2dWorkload({ id: 'i2', title: 'conv2d 1x1 1x96x14x14 to 576', cin: 96, cout: 576, hw: 14, k: 1, runs: 200 }),
  conv2dWorkload({ id: 'i3', title: 'conv2d 1x1 1x320x7x7 to 1280', cin: 320, cout: 1280, hw: 7, k: 1, runs: 200 }),
  // Two more networks of the kinds the W3C webnn-samples run: pooling,
  // concat and residual sums around the convolutions.
  squeezenetWorkload(),
  resnetWorkload(),
];

// Seeds: one for the weights (drawn by build), another for the inputs, so a
// description's weights do not depend on whether its inputs were drawn first.
const WEIGHT_SEED = 0x5eed;
const INPUT_SEED = 0x1a9b7;

// --- the WebNN emitter ---

class WebnnEmitter {
  constructor(builder) {
    this.b = builder;
    this.outputs = {};
  }

  input(name, shape) {
    return this.b.input(name, { dataType: 'float32', shape });
  }

  constant(shape, data) {
    return this.b.constant({ dataType: 'float32', shape }, data);
  }

  output(name, value, shape) {
    // The declared shape is what the ONNX side writes into its value info and
    // what the harness allocates; check the builder agrees.
    if (value.shape.join() !== shape.join()) {
      throw new Error(`output ${name}: WebNN shape [${value.shape}] differs from the description's [${shape}]`);
    }
    this.outputs[name] = value;
  }

  add(a, b) {
    return this.b.add(a, b);
  }

  mul(a, b) {
    return this.b.mul(a, b);
  }

  matmul(a, b) {
    return this.b.matmul(a, b);
  }

  gemm(a, b, c) {
    return this.b.gemm(a, b, c === undefined ? {} : { c });
  }

  conv2d(x, w, bias, { strides = [1, 1], pads = [0, 0, 0, 0], groups = 1 }) {
    return this.b.conv2d(x, w, { bias, strides, padding: pads, groups });
  }

  clamp(x, lo, hi) {
    return this.b.clamp(x, { minValue: lo, maxValue: hi });
  }

  softmax(x, axis) {
    return this.b.softmax(x, axis);
  }

  reshape(x, shape) {
    return this.b.reshape(x, shape);
  }

  transpose(x, perm) {
    return this.b.transpose(x, { permutation: perm });
  }

  // averagePool2d without windowDimensions pools the whole spatial extent.
  globalAveragePool(x) {
    return this.b.averagePool2d(x);
  }

  layerNorm(x, scale, bias, epsilon) {
    return this.b.layerNormalization(x, { scale, bias, axes: [x.shape.length - 1], epsilon });
  }

  gelu(x) {
    return this.b.gelu(x);
  }

  relu(x) {
    return this.b.relu(x);
  }

  // pads: [top, bottom, left, right], as conv2d's.
  maxPool2d(x, { window, strides = [1, 1], pads = [0, 0, 0, 0], ceil = false }) {
    return this.b.maxPool2d(x, {
      windowDimensions: window,
      strides,
      padding: pads,
      roundingType: ceil ? 'ceil' : 'floor',
      ...this.poolLayout(),
    });
  }

  // The layout member of pooling options (a variant in nhwc overrides it).
  poolLayout() {
    return {};
  }

  concat(values, axis) {
    return this.b.concat(values, axis);
  }
}

// Runs a description and discards everything but the random draws: gives
// the memory baseline (Node plus the weight arrays) for the RSS children.
class NullEmitter {
  constructor() {
    this.kept = [];
  }
  constant(shape, data) {
    this.kept.push(data);
    return null;
  }
}
for (const op of ['input', 'output', 'add', 'mul', 'matmul', 'gemm', 'conv2d', 'clamp', 'softmax', 'reshape',
  'transpose', 'globalAveragePool', 'layerNorm', 'gelu', 'relu', 'maxPool2d', 'concat']) {
  NullEmitter.prototype[op] = () => null;
}

module.exports = {
  WORKLOADS,
  size,
  WEIGHT_SEED,
  INPUT_SEED,
  makeRandom,
  size,
  WebnnEmitter,
  NullEmitter,
};
