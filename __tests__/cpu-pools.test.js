'use strict';
// Pools, a channel concat and a residual ReLU between convolutions through
// the public API on the CPU backend: they run on the convolutions'
// channel-blocked layout (see ARCHITECTURE.md). A SqueezeNet fire module
// and a ResNet-style residual sum, in nchw, nhwc and float16, are checked
// against a float64 reference computed here and against the same graph
// built with WEBNN_CPU_NCHWC=0 (every node in its own layout); the nhwc
// graph gives the bits of the nchw one.

const { MLGraphBuilder } = require('..');
const { cpuContext, values } = require('./helpers');
const { toHalf, fromHalf } = require('../bench/variants');

// --- the float64 reference, NCHW, batch 1: tensors are { v, c, h, w } ---

function conv(x, f, b, oc, k, pad, relu) {
  const oh = x.h + 2 * pad - k + 1;
  const ow = x.w + 2 * pad - k + 1;
  const v = new Float64Array(oc * oh * ow);
  for (let o = 0; o < oc; o++) {
    for (let y = 0; y < oh; y++) {
      for (let xx = 0; xx < ow; xx++) {
        let sum = b[o];
        for (let ci = 0; ci < x.c; ci++) {
          for (let ky = 0; ky < k; ky++) {
            const iy = y - pad + ky;
            if (iy < 0 || iy >= x.h) continue;
            for (let kx = 0; kx < k; kx++) {
              const ix = xx - pad + kx;
              if (ix < 0 || ix >= x.w) continue;
              sum += x.v[(ci * x.h + iy) * x.w + ix] * f[((o * x.c + ci) * k + ky) * k + kx];
            }
          }
        }
        v[(o * oh + y) * ow + xx] = relu ? Math.max(0, sum) : sum;
      }
    }
  }
  return { v, c: oc, h: oh, w: ow };
}

/** Max (3x3, stride 2, ceil rounding, no padding) or average (3x3, stride 1, padding 1, padding not counted). */
function pool(x, kind) {
  const [k, s, pad] = kind === 'max' ? [3, 2, 0] : [3, 1, 1];
  const size = (n) => (kind === 'max' ? Math.ceil((n - k) / s) + 1 : n);
  const [oh, ow] = [size(x.h), size(x.w)];
  const v = new Float64Array(x.c * oh * ow);
  for (let c = 0; c < x.c; c++) {
    for (let y = 0; y < oh; y++) {
      for (let xx = 0; xx < ow; xx++) {
        let acc = kind === 'max' ? -Infinity : 0;
        let count = 0;
        for (let ky = 0; ky < k; ky++) {
          const iy = y * s - pad + ky;
          if (iy < 0 || iy >= x.h) continue;
          for (let kx = 0; kx < k; kx++) {
            const ix = xx * s - pad + kx;
            if (ix < 0 || ix >= x.w) continue;
            const e = x.v[(c * x.h + iy) * x.w + ix];
            acc = kind === 'max' ? Math.max(acc, e) : acc + e;
            count++;
          }
        }
        v[(c * oh + y) * ow + xx] = kind === 'max' ? acc : acc / count;
      }
    }
  }
  return { v, c: x.c, h: oh, w: ow };
}

/**
 * x [1, 8, 15, 15] -> conv 3x3 (8 -> 16) + relu -> max pool (ceil: 7x7) ->
 * fire (squeeze 1x1 to 8 + relu; expands 1x1 and 3x3 to 16 + relu; concat
 * to 32) -> 1x1 conv 32 -> 32, + the concat, relu -> average pool. The
 * weights, and with `half` the input too, as the graph gets them.
 */
function network(half) {
  let seed = 10;
  const round = (a) => (half ? Float32Array.from(a, (e) => fromHalf(toHalf(e))) : a);
  const weights = (n) => round(values(n, ++seed, 0.4));
  const layers = {
    stem: { f: weights(16 * 8 * 9), b: weights(16), ic: 8, oc: 16, k: 3, pad: 1 },
    squeeze: { f: weights(8 * 16), b: weights(8), ic: 16, oc: 8, k: 1, pad: 0 },
    e1: { f: weights(16 * 8), b: weights(16), ic: 8, oc: 16, k: 1, pad: 0 },
    e3: { f: weights(16 * 8 * 9), b: weights(16), ic: 8, oc: 16, k: 3, pad: 1 },
    mix: { f: weights(32 * 32), b: weights(32), ic: 32, oc: 32, k: 1, pad: 0 },
  };
  const x = round(values(8 * 15 * 15, 1, 1));

  const run = (l, t, relu = true) => conv(t, l.f, l.b, l.oc, l.k, l.pad, relu);
  let t = pool(run(layers.stem, { v: Float64Array.from(x), c: 8, h: 15, w: 15 }), 'max');
  const s = run(layers.squeeze, t);
  const [a, b] = [run(layers.e1, s), run(layers.e3, s)];
  const cat = { v: Float64Array.from([...a.v, ...b.v]), c: 32, h: a.h, w: a.w };
  const mixed = run(layers.mix, cat, false);
  t = { ...cat, v: mixed.v.map((e, i) => Math.max(0, e + cat.v[i])) };
  const want = pool(t, 'average');

  const build = (g, { layout, dataType }) => {
    const nhwc = layout === 'nhwc';
    const constant = (shape, data) =>
      g.constant({ dataType, shape }, dataType === 'float16' ? Uint16Array.from(data, toHalf) : data);
    const convOp = (y, l) =>
      g.conv2d(y, constant([l.oc, l.ic, l.k, l.k], l.f), {
        bias: constant([l.oc], l.b),
        padding: [l.pad, l.pad, l.pad, l.pad],
        inputLayout: layout,
      });
    const relu = (y) => g.relu(y);
    let y = g.input('x', { dataType, shape: nhwc ? [1, 15, 15, 8] : [1, 8, 15, 15] });
    y = relu(convOp(y, layers.stem));
    y = g.maxPool2d(y, { windowDimensions: [3, 3], strides: [2, 2], roundingType: 'ceil', layout });
    const sq = relu(convOp(y, layers.squeeze));
    const joined = g.concat([relu(convOp(sq, layers.e1)), relu(convOp(sq, layers.e3))], nhwc ? 3 : 1);
    y = relu(g.add(convOp(joined, layers.mix), joined));
    y = g.averagePool2d(y, { windowDimensions: [3, 3], padding: [1, 1, 1, 1], layout });
    return { y };
  };
  return { x, build, want };
}

/** [c, h, w] data as [h, w, c] (or back). */
function permute(v, [c, h, w], back = false) {
  const out = new v.constructor(v.length);
  for (let ci = 0; ci < c; ci++) {
    for (let q = 0; q < h * w; q++) {
      if (back) out[ci * h * w + q] = v[q * c + ci];
      else out[q * c + ci] = v[ci * h * w + q];
    }
  }
  return out;
}

let context;
beforeAll(async () => {
  context = await cpuContext();
});
afterAll(() => context.destroy());

/** Builds the network in `form` with WEBNN_CPU_NCHWC as given, runs it once; the output as NCHW float32. */
async function compute(net, form, blocked) {
  const saved = process.env.WEBNN_CPU_NCHWC;
  process.env.WEBNN_CPU_NCHWC = blocked;
  let graph;
  try {
    const g = new MLGraphBuilder(context);
    graph = await g.build(net.build(g, form));
  } finally {
    if (saved === undefined) delete process.env.WEBNN_CPU_NCHWC;
    else process.env.WEBNN_CPU_NCHWC = saved;
  }
  const nhwc = form.layout === 'nhwc';
  const half = form.dataType === 'float16';
  let x = nhwc ? permute(net.x, [8, 15, 15]) : net.x;
  if (half) x = Uint16Array.from(x, toHalf);
  const n = net.want.v.length;
  let out = half ? new Uint16Array(n) : new Float32Array(n);
  context.computeSync(graph, { x }, { y: out });
  graph.destroy();
  if (half) out = Float32Array.from(out, fromHalf);
  return nhwc ? permute(out, [net.want.c, net.want.h, net.want.w], true) : out;
}

/** The largest |got - want| / (1 + |want|). */
function worst(got, want) {
  let w = 0;
  for (let i = 0; i < want.length; i++) w = Math.max(w, Math.abs(got[i] - want[i]) / (1 + Math.abs(want[i])));
  return w;
}

describe('pools and concat between blocked convolutions on the CPU', () => {
  test('nchw and nhwc: near a float64 reference and the unblocked graph, nhwc with the bits of nchw', async () => {
    const net = network(false);
    const nchw = await compute(net, { layout: 'nchw', dataType: 'float32' }, '1');
    const nhwc = await compute(net, { layout: 'nhwc', dataType: 'float32' }, '1');
    const apart = await compute(net, { layout: 'nchw', dataType: 'float32' }, '0');
    expect(nchw.length).toBe(32 * 7 * 7);
    // Sums of up to 145 float32 terms per layer, five layers deep.
    expect(worst(nchw, net.want.v)).toBeLessThan(1e-4);
    expect(worst(apart, net.want.v)).toBeLessThan(1e-4);
    expect(Buffer.from(nhwc.buffer).equals(Buffer.from(nchw.buffer))).toBe(true);
  });

  test('float16, both layouts: near a float64 reference of the rounded weights, as near as the unblocked graph', async () => {
    const net = network(true);
    const form = { layout: 'nchw', dataType: 'float16' };
    const blocked = await compute(net, form, '1');
    const apart = await compute(net, form, '0');
    const nhwc = await compute(net, { layout: 'nhwc', dataType: 'float16' }, '1');
    // Each of the six operators rounds its output to float16 (a relative
    // step of 2^-10 at most); eight steps bound their sum with room.
    const bound = 8 * 2 ** -10;
    expect(worst(apart, net.want.v)).toBeLessThan(bound);
    expect(worst(blocked, net.want.v)).toBeLessThan(bound);
    expect(Buffer.from(nhwc.buffer).equals(Buffer.from(blocked.buffer))).toBe(true);
  });
});
