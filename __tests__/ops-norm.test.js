'use strict';
// instanceNormalization (no WPT vector file) with hand-worked values, and
// spec edge cases of batchNormalization and layerNormalization.

const { expectThrow, expectClose, run, f32, constF32, cpuContext } = require('./helpers');
const { MLGraphBuilder } = require('..');

let context;
beforeAll(async () => {
  context = await cpuContext();
});
afterAll(() => {
  context.destroy();
});

// 1 / sqrt(1 + 1e-5), the factor of a unit-variance group with the default epsilon.
const K = 1 / Math.sqrt(1 + 1e-5);

describe('instanceNormalization', () => {
  test('nchw: per (batch, channel) statistics over height and width', async () => {
    // Channel 0: [1, 3], mean 2, variance 1 -> [-K, K].
    // Channel 1: [10, 10], mean 10, variance 0 -> 0 / sqrt(eps) = 0.
    // scale [2, 1], bias [0.5, 7] -> [-2K + 0.5, 2K + 0.5, 7, 7].
    const { results, outputs } = await run(context, { x: f32([1, 2, 1, 2], [1, 3, 10, 10]) }, (b, { x }) => ({
      plain: b.instanceNormalization(x),
      affine: b.instanceNormalization(x, { scale: constF32(b, [2], [2, 1]), bias: constF32(b, [2], [0.5, 7]) }),
    }));
    expect(outputs.plain.shape).toEqual([1, 2, 1, 2]);
    expectClose(results.plain, [-K, K, 0, 0]);
    expectClose(results.affine, [-2 * K + 0.5, 2 * K + 0.5, 7, 7]);
  });

  test('nhwc: channels last', async () => {
    // Same data laid out [h=1, w=2, c=2]: pixel 0 = (1, 10), pixel 1 = (3, 10).
    const { results } = await run(context, { x: f32([1, 1, 2, 2], [1, 10, 3, 10]) }, (b, { x }) => ({
      y: b.instanceNormalization(x, {
        layout: 'nhwc', scale: constF32(b, [2], [2, 1]), bias: constF32(b, [2], [0.5, 7]),
      }),
    }));
    expectClose(results.y, [-2 * K + 0.5, 7, 2 * K + 0.5, 7]);
  });

  test('epsilon and several batches', async () => {
    // Batch 0 channel 0: [0, 4], mean 2, variance 4; epsilon 5 -> (x - 2) / 3.
    // Batch 1 channel 0: [-1, -1, ...]: [5, 5] mean 5, variance 0 -> 0.
    const { results } = await run(context, { x: f32([2, 1, 2, 1], [0, 4, 5, 5]) }, (b, { x }) => ({
      y: b.instanceNormalization(x, { epsilon: 5 }),
    }));
    expectClose(results.y, [-2 / 3, 2 / 3, 0, 0]);
  });

  test('float16', async () => {
    // [1, 3] -> [-K, K] in float16: -1 = 0xBC00, 1 = 0x3C00 (K rounds to 1).
    const { results } = await run(context, {
      x: { dataType: 'float16', shape: [1, 1, 1, 2], data: Uint16Array.from([0x3c00, 0x4200]) },
    }, (b, { x }) => ({ y: b.instanceNormalization(x) }));
    expect(Array.from(results.y)).toEqual([0xbc00, 0x3c00]);
  });

  test('validation', () => {
    const b = new MLGraphBuilder(context);
    const x = b.input('x', { dataType: 'float32', shape: [1, 2, 3, 4] });
    expectThrow(() => b.instanceNormalization(x, { scale: constF32(b, [4], [1, 1, 1, 1]) }), 'TypeError', 'scale');
    // In nhwc the channel count is the last dimension, 4.
    b.instanceNormalization(x, { layout: 'nhwc', scale: constF32(b, [4], [1, 1, 1, 1]) });
    expectThrow(() => b.instanceNormalization(x, { bias: constF32(b, [3], [1, 1, 1]) }), 'TypeError', 'bias');
    expectThrow(() => b.instanceNormalization(x, { layout: 'chwn' }), 'TypeError', 'layout');
    const r3 = b.input('r3', { dataType: 'float32', shape: [2, 3, 4] });
    expectThrow(() => b.instanceNormalization(r3), 'TypeError', 'rank');
    const i = b.input('i', { dataType: 'int32', shape: [1, 2, 3, 4] });
    expectThrow(() => b.instanceNormalization(i), 'TypeError', 'instanceNormalization');
    const limits = context.opSupportLimits();
    expect(Object.keys(limits.instanceNormalization).sort()).toEqual(['bias', 'input', 'output', 'scale']);
  });
});

describe('batchNormalization edge cases', () => {
  test('axis 0 and a 1-D input', async () => {
    // x [2, 2], axis 0: row 0 uses mean 1 / var 4, row 1 mean -1 / var 0.25,
    // epsilon 0: row 0 (x - 1) / 2, row 1 (x + 1) / 0.5.
    const { results } = await run(context, { x: f32([2, 2], [3, 5, 0, -2]) }, (b, { x }) => ({
      y: b.batchNormalization(x, constF32(b, [2], [1, -1]), constF32(b, [2], [4, 0.25]), { axis: 0, epsilon: 0 }),
    }));
    expectClose(results.y, [1, 2, 2, -2]);
  });

  test('validation', () => {
    const b = new MLGraphBuilder(context);
    const x = b.input('x', { dataType: 'float32', shape: [2, 3] });
    const m = constF32(b, [3], [0, 0, 0]);
    expectThrow(() => b.batchNormalization(x, m, m, { axis: 2 }), 'TypeError', 'axis');
    expectThrow(() => b.batchNormalization(x, m, m, { axis: 0 }), 'TypeError', 'mean');
    expectThrow(() => b.batchNormalization(x, m, constF32(b, [2], [1, 1])), 'TypeError', 'variance');
    expectThrow(() => b.batchNormalization(x, m, m, { epsilon: NaN }), 'TypeError', 'epsilon');
  });
});

describe('layerNormalization edge cases', () => {
  test('axes in any order index scale and bias in that order', async () => {
    // x [2, 2] = [[1, 3], [5, 7]]; axes [1, 0]: one group of all four values,
    // mean 4, variance 5; scale shape [x.shape[1], x.shape[0]] = [2, 2]
    // indexed [col][row]. With epsilon 0: (x - 4) / sqrt(5).
    const s = Math.sqrt(5);
    const { results } = await run(context, { x: f32([2, 2], [1, 3, 5, 7]) }, (b, { x }) => ({
      y: b.layerNormalization(x, { axes: [1, 0], epsilon: 0, scale: constF32(b, [2, 2], [1, 10, 100, 1000]) }),
    }));
    // element (r, c) uses scale[c][r]: (0,0)->1, (0,1)->100, (1,0)->10, (1,1)->1000.
    expectClose(results.y, [(-3 / s) * 1, (-1 / s) * 100, (1 / s) * 10, (3 / s) * 1000]);
  });

  test('validation', () => {
    const b = new MLGraphBuilder(context);
    const x = b.input('x', { dataType: 'float32', shape: [2, 3] });
    expectThrow(() => b.layerNormalization(x, { axes: [0, 0] }), 'TypeError', 'axes');
    expectThrow(() => b.layerNormalization(x, { axes: [2] }), 'TypeError', 'axes');
    expectThrow(() => b.layerNormalization(x, { scale: constF32(b, [2], [1, 1]) }), 'TypeError', 'scale');
    expectThrow(() => b.layerNormalization(x, { axes: [], bias: constF32(b, [3], [1, 1, 1]) }), 'TypeError', 'bias');
  });
});
