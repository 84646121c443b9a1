'use strict';
// MobileNet's blocks through the public API on the CPU backend: a 1x1
// convolution, a depthwise one and a 1x1 one run there as one chain, a band
// of rows at a time (see ARCHITECTURE.md). The results are checked against
// a float64 reference computed here, and against the same graph built with
// WEBNN_CPU_CHAIN=0 (node by node), bit for bit.

const { MLGraphBuilder } = require('..');
const { cpuContext, values } = require('./helpers');

/** NCHW conv2d in float64 with groups, padding [t, b, l, r], square stride, bias and clamp bounds. */
function conv(x, [c, h, w], f, [oc, kh, kw], { groups = 1, pad = [0, 0, 0, 0], stride = 1, bias, lo = -Infinity, hi = Infinity }) {
  const oh = Math.floor((h + pad[0] + pad[1] - kh) / stride) + 1;
  const ow = Math.floor((w + pad[2] + pad[3] - kw) / stride) + 1;
  const cg = c / groups;
  const og = oc / groups;
  const out = new Float64Array(oc * oh * ow);
  for (let o = 0; o < oc; o++) {
    const g = Math.floor(o / og);
    for (let y = 0; y < oh; y++) {
      for (let xx = 0; xx < ow; xx++) {
        let sum = bias[o];
        for (let ci = 0; ci < cg; ci++) {
          for (let ky = 0; ky < kh; ky++) {
            const iy = y * stride - pad[0] + ky;
            if (iy < 0 || iy >= h) continue;
            for (let kx = 0; kx < kw; kx++) {
              const ix = xx * stride - pad[2] + kx;
              if (ix < 0 || ix >= w) continue;
              sum += x[((g * cg + ci) * h + iy) * w + ix] * f[((o * cg + ci) * kh + ky) * kw + kx];
            }
          }
        }
        out[(o * oh + y) * ow + xx] = Math.min(hi, Math.max(lo, sum));
      }
    }
  }
  return { y: out, shape: [oc, oh, ow] };
}

/**
 * A block: x [1, ic, h, w] -> (stem 1x1 ic -> ic, when residual) -> 1x1 ic -> c, clamp
 * [0, 6] (when expand) -> depthwise 3x3 (pad 1, stride), clamp -> 1x1 c -> oc (+ the
 * stem's output when residual). Returns the graph builder function and the reference.
 */
function block({ ic, h, w, expand, c, stride, oc, residual }) {
  let seed = 100;
  const weights = (n) => values(n, ++seed, 0.5);
  const x = values(ic * h * w, 1, 1);
  const layers = [];
  if (residual) layers.push({ kind: 'stem', f: weights(ic * ic), b: weights(ic), oc: ic });
  if (expand) layers.push({ kind: 'expand', f: weights(c * ic), b: weights(c), oc: c });
  layers.push({ kind: 'depthwise', f: weights(c * 9), b: weights(c), oc: c });
  layers.push({ kind: 'project', f: weights(oc * c), b: weights(oc), oc });

  // The reference.
  let cur = { y: Float64Array.from(x), shape: [ic, h, w] };
  let stem = null;
  for (const l of layers) {
    const [ci] = cur.shape;
    const dw = l.kind === 'depthwise';
    const relu6 = l.kind === 'expand' || dw ? { lo: 0, hi: 6 } : {};
    cur = conv(cur.y, cur.shape, l.f, [l.oc, dw ? 3 : 1, dw ? 3 : 1], {
      groups: dw ? ci : 1,
      pad: dw ? [1, 1, 1, 1] : [0, 0, 0, 0],
      stride: dw ? stride : 1,
      bias: l.b,
      ...relu6,
    });
    if (l.kind === 'stem') stem = cur;
  }
  if (residual) cur = { y: cur.y.map((v, i) => v + stem.y[i]), shape: cur.shape };

  const build = (b) => {
    const constant = (shape, data) => b.constant({ dataType: 'float32', shape }, data);
    let y = b.input('x', { dataType: 'float32', shape: [1, ic, h, w] });
    let stemOp = null;
    let channels = ic;
    for (const l of layers) {
      const dw = l.kind === 'depthwise';
      const k = dw ? 3 : 1;
      y = b.conv2d(y, constant([l.oc, dw ? 1 : channels, k, k], l.f), {
        bias: constant([l.oc], l.b),
        groups: dw ? channels : 1,
        padding: dw ? [1, 1, 1, 1] : [0, 0, 0, 0],
        strides: dw ? [stride, stride] : [1, 1],
      });
      if (l.kind === 'expand' || dw) y = b.clamp(y, { minValue: 0, maxValue: 6 });
      if (l.kind === 'stem') stemOp = y;
      channels = l.oc;
    }
    if (residual) y = b.add(y, stemOp);
    return { y };
  };
  return { x, build, want: cur };
}

let context;
beforeAll(async () => {
  context = await cpuContext();
});
afterAll(() => context.destroy());

/** Builds the block with WEBNN_CPU_CHAIN as given and runs it once. */
async function compute(spec, chain) {
  const saved = process.env.WEBNN_CPU_CHAIN;
  process.env.WEBNN_CPU_CHAIN = chain;
  let graph;
  try {
    const b = new MLGraphBuilder(context);
    graph = await b.build(spec.build(b));
  } finally {
    if (saved === undefined) delete process.env.WEBNN_CPU_CHAIN;
    else process.env.WEBNN_CPU_CHAIN = saved;
  }
  const out = new Float32Array(spec.want.y.length);
  context.computeSync(graph, { x: spec.x }, { y: out });
  graph.destroy();
  return out;
}

describe('depthwise chains on the CPU', () => {
  const cases = {
    'a residual block (24 -> 144 -> 24, 56x56)': { ic: 24, h: 56, w: 56, expand: true, c: 144, stride: 1, oc: 24, residual: true },
    'a strided block (16 -> 96 -> 24, 112x112 -> 56x56)': { ic: 16, h: 112, w: 112, expand: true, c: 96, stride: 2, oc: 24, residual: false },
    'a block without expansion (32 -> 16, 60x45)': { ic: 32, h: 60, w: 45, expand: false, c: 32, stride: 1, oc: 16, residual: false },
  };
  for (const [name, shape] of Object.entries(cases)) {
    test(`${name}: near a float64 reference, the bits of node by node`, async () => {
      const spec = block(shape);
      const chained = await compute(spec, '1');
      const apart = await compute(spec, '0');
      expect(chained.length).toBe(spec.want.y.length);
      let worst = 0;
      for (let i = 0; i < chained.length; i++) {
        const want = spec.want.y[i];
        worst = Math.max(worst, Math.abs(chained[i] - want) / (1 + Math.abs(want)));
      }
      // Sums of up to 145 float32 terms per layer, four layers deep.
      expect(worst).toBeLessThan(1e-4);
      expect(Buffer.from(chained.buffer).equals(Buffer.from(apart.buffer))).toBe(true);
    });
  }
});
