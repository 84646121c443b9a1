'use strict';
// The same workload on our side only, in other layouts and float types:
// nchw float32 (the form the comparison with onnxruntime-node times, with
// "same" padding), nhwc float32 with two filter layouts and nchw float16,
// as a client that builds its graph in that form from a converted model
// would run it (the W3C webnn-samples build nhwc and float16 variants of
// their models). Each variant's time is reported as a ratio
// to nchw float32's, measured in the same alternating blocks, so that a
// change in load falls on all of them; and its outputs are checked
// against nchw float32's (float16's to float16's precision).

const { now, median } = require('./report');
const { WebnnEmitter, makeRandom, WEIGHT_SEED, INPUT_SEED } = require('./workloads');
const { maxRelativeError } = require('./check');

const VARIANTS = [
  { name: 'nchw float32', layout: 'nchw', dataType: 'float32' },
  { name: 'nhwc float32 ohwi', layout: 'nhwc', dataType: 'float32', filters: 'ohwi' },
  { name: 'nhwc float32 hwio', layout: 'nhwc', dataType: 'float32', filters: 'hwio' },
  { name: 'nchw float16', layout: 'nchw', dataType: 'float16' },
];

// [n, c, h, w] <-> [n, h, w, c] for a 4-D shape; others unchanged.
const nhwcShape = (s) => (s.length === 4 ? [s[0], s[2], s[3], s[1]] : s);

// x of NCHW shape s as NHWC (or back, with `back`).
function permute(x, s, back = false) {
  if (s.length !== 4) return x;
  const [n, c, h, w] = s;
  const out = new x.constructor(x.length);
  for (let b = 0; b < n; b++) {
    for (let ci = 0; ci < c; ci++) {
      for (let q = 0; q < h * w; q++) {
        const nchw = (b * c + ci) * h * w + q;
        const nhwc = (b * h * w + q) * c + ci;
        if (back) out[nchw] = x[nhwc];
        else out[nhwc] = x[nchw];
      }
    }
  }
  return out;
}

// float32 -> float16 bits, rounded to nearest even (overflow to
// infinity, NaN kept, subnormals included).
const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
function toHalf(v) {
  f32[0] = v;
  const x = u32[0];
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  let e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    let h = mant >>> shift;
    const rest = mant & ((1 << shift) - 1);
    const half = 1 << (shift - 1);
    if (rest > half || (rest === half && h & 1)) h++;
    return sign | h;
  }
  let h = (e << 10) | (mant >>> 13);
  const rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && h & 1)) h++;
  return sign | h;
}

function fromHalf(h) {
  const sign = h & 0x8000 ? -1 : 1;
  const e = (h >>> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return sign * m * 2 ** -24;
  if (e === 0x1f) return m ? NaN : sign * Infinity;
  return sign * (1 + m / 1024) * 2 ** (e - 15);
}

const halves = (x) => Uint16Array.from(x, toHalf);
const floats = (h) => Float32Array.from(h, fromHalf);

// The WebNN emitter in `layout` and `dataType`, writing each graph as a
// model converter writes it. The description's shapes and weights are
// NCHW float32; 4-D activations become nhwc, weights float16. In nhwc the
// filters take the layouts a TensorFlow Lite converter gives them (`ohwi`
// for convolutions, `ihwo` for depthwise ones: the model file's own
// layouts), or TensorFlow's `hwio` where the variant says so; a strided
// convolution's padding is TensorFlow's "same" (same-upper: the odd extra
// row and column at the bottom and right, `[0, 1, 0, 1]` for a 3x3 at
// stride 2) in every variant, so that all of them compute the same
// network.
class VariantEmitter extends WebnnEmitter {
  constructor(builder, { layout, dataType, filters = 'ohwi' }) {
    super(builder);
    this.nhwc = layout === 'nhwc';
    this.dataType = dataType;
    this.filters = filters;
    // MobileNetV2's classifier as TensorFlow Lite's model has it: a 1x1
    // convolution of the pooled pixel (its nchw twins keep the gemm).
    this.convClassifier = this.nhwc;
  }
  shape(s) {
    return this.nhwc ? nhwcShape(s) : s;
  }
  input(name, shape) {
    return this.b.input(name, { dataType: this.dataType, shape: this.shape(shape) });
  }
  // 4-D constants are filters: made when conv2d knows the layout they
  // take (a converter writes them in that layout, not through a
  // transpose in the graph).
  constant(shape, data) {
    if (shape.length === 4) return { filter: true, shape, data };
    return this.make(shape, data);
  }
  make(shape, data) {
    if (this.dataType === 'float32') return super.constant(shape, data);
    return this.b.constant({ dataType: 'float16', shape }, halves(data));
  }
  output(name, value, shape) {
    super.output(name, value, this.shape(shape));
  }
  conv2d(x, w, bias, { strides = [1, 1], pads = [0, 0, 0, 0], groups = 1 }) {
    const [o, i, kh, kw] = w.shape;
    const depthwise = groups > 1 && i === 1 && o === groups;
    let filter;
    let filterLayout = 'oihw';
    if (this.nhwc) {
      filterLayout = depthwise ? 'ihwo' : this.filters;
      const perm = { ohwi: [0, 2, 3, 1], hwio: [2, 3, 1, 0], ihwo: [1, 2, 3, 0] }[filterLayout];
      const shape = perm.map((a) => w.shape[a]);
      filter = this.make(shape, permuteAny(w.data, w.shape, perm));
    } else {
      filter = this.make(w.shape, w.data);
    }
    const [h, wd] = this.nhwc ? x.shape.slice(1, 3) : x.shape.slice(2, 4);
    const padding = strides.some((s) => s > 1) && pads.some((p) => p > 0) ? sameUpper([h, wd], [kh, kw], strides) : pads;
    const inputLayout = this.nhwc ? 'nhwc' : 'nchw';
    return this.b.conv2d(x, filter, { bias, strides, padding, groups, inputLayout, filterLayout });
  }
  globalAveragePool(x) {
    return this.b.averagePool2d(x, { layout: this.nhwc ? 'nhwc' : 'nchw' });
  }
  poolLayout() {
    return { layout: this.nhwc ? 'nhwc' : 'nchw' };
  }
  // The description's axis is NCHW's: channels (1) are the last axis in nhwc.
  concat(values, axis) {
    return this.b.concat(values, this.nhwc && values[0].shape.length === 4 ? [0, 3, 1, 2][axis] : axis);
  }
}

// TensorFlow's "same" padding, [top, bottom, left, right]: the output is
// ceil(size / stride), the padding that takes split with the odd one
// after.
function sameUpper(size, kernel, strides) {
  const pads = [];
  for (let a = 0; a < 2; a++) {
    const out = Math.ceil(size[a] / strides[a]);
    const total = Math.max((out - 1) * strides[a] + kernel[a] - size[a], 0);
    pads.push(Math.floor(total / 2), total - Math.floor(total / 2));
  }
  return [pads[0], pads[1], pads[2], pads[3]];
}

// x of shape s with its axes permuted (out axis j is s's axis perm[j]).
function permuteAny(x, s, perm) {
  const shape = perm.map((a) => s[a]);
  const stride = s.map((_, a) => s.slice(a + 1).reduce((p, v) => p * v, 1));
  const out = new Float32Array(x.length);
  const idx = new Array(shape.length).fill(0);
  for (let k = 0; k < out.length; k++) {
    let src = 0;
    for (let j = 0; j < shape.length; j++) src += idx[j] * stride[perm[j]];
    out[k] = x[src];
    for (let j = shape.length - 1; j >= 0; j--) {
      if (++idx[j] < shape[j]) break;
      idx[j] = 0;
    }
  }
  return out;
}

async function buildVariant(workload, context, variant) {
  const { MLGraphBuilder } = require('..');
  const builder = new MLGraphBuilder(context);
  const emitter = new VariantEmitter(builder, variant);
  workload.build(emitter, makeRandom(WEIGHT_SEED));
  const graph = await builder.build(emitter.outputs);
  const nhwc = variant.layout === 'nhwc';
  const half = variant.dataType === 'float16';
  const tensor = (shape, usage) =>
    context.createTensor({ dataType: variant.dataType, shape: nhwc ? nhwcShape(shape) : shape, ...usage });
  const inputs = {};
  for (const { name, shape } of workload.inputs) inputs[name] = await tensor(shape, { writable: true });
  const outputs = {};
  for (const { name, shape } of workload.outputs) outputs[name] = await tensor(shape, { readable: true });
  // The inputs in this variant's form, made once (as a client would hold
  // them), from the description's NCHW float32 data.
  let fed = null;
  const feed = (data) => {
    if (!fed) {
      fed = {};
      for (const { name, shape } of workload.inputs) {
        const x = nhwc ? permute(data[name], shape) : data[name];
        fed[name] = half ? halves(x) : x;
      }
    }
    return fed;
  };
  return {
    async run(data) {
      const x = feed(data);
      for (const name in inputs) context.writeTensor(inputs[name], x[name]);
      context.dispatch(graph, inputs, outputs);
      const names = Object.keys(outputs);
      const results = await Promise.all(names.map((name) => context.readTensor(outputs[name])));
      return Object.fromEntries(
        names.map((name, i) => {
          const { shape } = workload.outputs.find((o) => o.name === name);
          const y = half ? floats(new Uint16Array(results[i])) : new Float32Array(results[i]);
          return [name, nhwc ? permute(y, shape, true) : y];
        }),
      );
    },
    release() {
      graph.destroy();
      for (const t of [...Object.values(inputs), ...Object.values(outputs)]) t.destroy();
    },
  };
}

/**
 * Times every variant of `workload` on `context` (ours only), in blocks
 * that alternate between them after a pause, as bench/run.js does for the
 * two runtimes. Returns one row per variant, with its median, its ratio
 * to the first (nchw float32) and its largest relative difference from
 * the first's outputs.
 */
async function benchVariants(workload, threads, context, { runs, warmup, settleMs }) {
  const built = [];
  const rows = [];
  try {
    for (const v of VARIANTS) {
      try {
        built.push({ v, impl: await buildVariant(workload, context, v) });
      } catch (e) {
        rows.push({ workload: workload.id, variant: v.name, threads, status: `failed: ${e.message}` });
      }
    }
    const data = workload.inputData(makeRandom(INPUT_SEED));
    const outs = [];
    for (const { impl } of built) outs.push(await impl.run(data));
    for (let i = 0; i < warmup; i++) for (const { impl } of built) await impl.run(data);
    const times = built.map(() => []);
    const block = Math.max(2, Math.ceil(runs / 4));
    for (let done = 0; done < runs; done += block) {
      for (const [k, { impl }] of built.entries()) {
        await new Promise((resolve) => setTimeout(resolve, settleMs));
        await impl.run(data);
        for (let i = 0; i < Math.min(block, runs - done); i++) {
          const t = now();
          await impl.run(data);
          times[k].push(now() - t);
        }
      }
    }
    const base = median(times[0]);
    for (const [k, { v }] of built.entries()) {
      const ms = median(times[k]);
      rows.push({
        workload: workload.id,
        variant: v.name,
        threads,
        runs,
        ms,
        ratio: ms / base,
        max_rel_err: maxRelativeError(outs[k], outs[0]),
        status: 'ok',
      });
    }
  } finally {
    for (const { impl } of built) impl.release();
  }
  return rows;
}

module.exports = { VARIANTS, benchVariants, buildVariant, toHalf, fromHalf };
