'use strict';
// movement family: expand, pad, reverse, split, tile, triangular,
// resample2d. All of them have WPT vector files (run by the conformance
// test); these tests add the modes and argument forms the vectors cover
// thinly, with values worked out by hand, and the spec's validation steps.

const { ml, MLGraphBuilder } = require('..');
const { expectThrow, run, f32, cpuContext, iota } = require('./helpers');

let context;
beforeAll(async () => {
  context = await cpuContext();
});
afterAll(() => {
  context.destroy();
});

/** Runs `fn(builder, x)` on one input; returns each output's data and shape. */
async function runOne(input, fn) {
  const { results, outputs } = await run(context, { x: input }, (b, { x }) => fn(b, x));
  const out = {};
  for (const [k, v] of Object.entries(results)) {
    out[k] = { data: Array.from(v), shape: outputs[k].shape };
  }
  return out;
}

/** A builder with one float32 input of `shape`. */
function builderWith(shape, dataType = 'float32') {
  const b = new MLGraphBuilder(context);
  return { b, x: b.input('x', { dataType, shape }) };
}

describe('pad', () => {
  // input [[1, 2, 3],
  //        [4, 5, 6]], padding [1, 2] before and [1, 2] after (the spec's example).
  const x = f32([2, 3], [1, 2, 3, 4, 5, 6]);

  test('edge repeats the border elements', async () => {
    // Row -1 and row 2 repeat rows 0 and 1; columns -2, -1 repeat column 0,
    // columns 3, 4 repeat column 2.
    const { out } = await runOne(x, (b, i) => ({ out: b.pad(i, [1, 2], [1, 2], { mode: 'edge' }) }));
    expect(out.shape).toEqual([4, 7]);
    expect(out.data).toEqual([
      1, 1, 1, 2, 3, 3, 3,
      1, 1, 1, 2, 3, 3, 3,
      4, 4, 4, 5, 6, 6, 6,
      4, 4, 4, 5, 6, 6, 6,
    ]);
  });

  test('reflection mirrors without repeating the border', async () => {
    // Column c < 0 reads -c, column c > 2 reads 4 - c; row -1 reads row 1,
    // row 2 reads row 0.
    const { out } = await runOne(x, (b, i) => ({
      out: b.pad(i, [1, 2], [1, 2], { mode: 'reflection' }),
    }));
    expect(out.shape).toEqual([4, 7]);
    expect(out.data).toEqual([
      6, 5, 4, 5, 6, 5, 4,
      3, 2, 1, 2, 3, 2, 1,
      6, 5, 4, 5, 6, 5, 4,
      3, 2, 1, 2, 3, 2, 1,
    ]);
  });

  test('reflection on one dimension, padding up to the limit; no symmetric mode', async () => {
    // [1, 2, 3, 4] with 2 before, 3 after (3 < size 4):
    //   reflection: -2 -> 2, -1 -> 1, 4 -> 2, 5 -> 1, 6 -> 0
    //   = [3, 2, | 1, 2, 3, 4, | 3, 2, 1]
    const r = await run(context, { a: f32([4], [1, 2, 3, 4]) }, (b, { a }) => ({
      refl: b.pad(a, [2], [3], { mode: 'reflection' }),
    }));
    expect(Array.from(r.results.refl)).toEqual([3, 2, 1, 2, 3, 4, 3, 2, 1]);
    // "symmetric" left the spec (#843).
    const b = new MLGraphBuilder(context);
    const c = b.input('c', { dataType: 'float32', shape: [3] });
    expectThrow(() => b.pad(c, [2], [1], { mode: 'symmetric' }), 'TypeError', 'mode');
  });

  test('constant value is cast to the input data type', async () => {
    // int32: 7.6 rounds to 8 -> [8, | 1, 2, | 8, 8].
    const i = await runOne({ dataType: 'int32', shape: [2], data: [1, 2] }, (b, v) => ({
      out: b.pad(v, [1], [2], { value: 7.6 }),
    }));
    expect(i.out.data).toEqual([8, 1, 2, 8, 8]);
    // uint8: -3 clamps to 0; int64 takes a BigInt value exactly.
    const u = await runOne({ dataType: 'uint8', shape: [1], data: [9] }, (b, v) => ({
      out: b.pad(v, [1], [1], { value: -3 }),
    }));
    expect(u.out.data).toEqual([0, 9, 0]);
    const l = await runOne({ dataType: 'int64', shape: [1], data: [1n] }, (b, v) => ({
      out: b.pad(v, [0], [1], { value: 2n ** 62n }),
    }));
    expect(l.out.data).toEqual([1n, 2n ** 62n]);
  });

  test('validation', () => {
    const { b, x: v } = builderWith([2, 3]);
    // Reflection needs padding < size: 2 on the size-2 dimension is too much.
    expectThrow(() => b.pad(v, [2, 0], [0, 0], { mode: 'reflection' }), 'TypeError', 'pad');
    expectThrow(() => b.pad(v, [0, 0], [0, 3], { mode: 'reflection' }), 'TypeError');
    expectThrow(() => b.pad(v, [1], [1]), 'TypeError', 'pad');
    expectThrow(() => b.pad(v, [0, 0], [0, 0], { mode: 'wrap' }), 'TypeError');
    expectThrow(() => b.pad(b.input('s', { dataType: 'float32', shape: [] }), [], []), 'TypeError');
    // Edge and constant padding may exceed the size.
    expect(b.pad(v, [5, 5], [5, 5], { mode: 'edge' }).shape).toEqual([12, 13]);
  });
});

describe('split', () => {
  // input [[0, 1, 2, 3, 4, 5],
  //        [6, 7, 8, 9, 10, 11]]
  const x = f32([2, 6], iota(12));

  test('a number splits into equal pieces', async () => {
    // 3 pieces of width 6 / 3 = 2 along axis 1.
    const out = await runOne(x, (b, i) => {
      const [p, q, r] = b.split(i, 3, { axis: 1 });
      return { p, q, r };
    });
    expect(out.p).toEqual({ data: [0, 1, 6, 7], shape: [2, 2] });
    expect(out.q).toEqual({ data: [2, 3, 8, 9], shape: [2, 2] });
    expect(out.r).toEqual({ data: [4, 5, 10, 11], shape: [2, 2] });
    // Default axis 0: the two rows.
    const rows = await runOne(x, (b, i) => {
      const [p, q] = b.split(i, 2);
      return { p, q };
    });
    expect(rows.p).toEqual({ data: [0, 1, 2, 3, 4, 5], shape: [1, 6] });
    expect(rows.q).toEqual({ data: [6, 7, 8, 9, 10, 11], shape: [1, 6] });
  });

  test('a list gives the size of each piece', async () => {
    // Widths 1 and 5 along axis 1: column 0, then columns 1..5.
    const out = await runOne(x, (b, i) => {
      const parts = b.split(i, [1, 5], { axis: 1 });
      expect(parts).toHaveLength(2);
      return { p: parts[0], q: parts[1] };
    });
    expect(out.p).toEqual({ data: [0, 6], shape: [2, 1] });
    expect(out.q).toEqual({ data: [1, 2, 3, 4, 5, 7, 8, 9, 10, 11], shape: [2, 5] });
    // A one-element list is a copy.
    const one = await runOne(x, (b, i) => ({ p: b.split(i, [6], { axis: 1 })[0] }));
    expect(one.p).toEqual({ data: iota(12), shape: [2, 6] });
  });

  test('validation', () => {
    const { b, x: v } = builderWith([2, 6]);
    expectThrow(() => b.split(v, 4, { axis: 1 }), 'TypeError', 'split');
    expectThrow(() => b.split(v, 0), 'TypeError');
    expectThrow(() => b.split(v, [2, 2], { axis: 1 }), 'TypeError');
    expectThrow(() => b.split(v, [6, 0], { axis: 1 }), 'TypeError');
    expectThrow(() => b.split(v, 2, { axis: 2 }), 'TypeError');
    expectThrow(() => b.split(v, 'two'), 'TypeError');
  });
});

describe('resample2d', () => {
  test('linear with sizes follows the half-pixel rule', async () => {
    // input [[0, 1],
    //        [2, 3]] -> sizes [3, 3], scale 3/2 on both axes:
    // coordinate(o) = clamp((o + 0.5) / 1.5 - 0.5, 0, 1) = 0, 0.5, 1
    // so rows interpolate between rows 0 and 1 at 0, 0.5, 1 and the same
    // for columns: row 0 = [0, 0.5, 1], row 0.5 = [1, 1.5, 2], row 1 = [2, 2.5, 3].
    const out = await runOne(f32([1, 1, 2, 2], [0, 1, 2, 3]), (b, i) => ({
      out: b.resample2d(i, { mode: 'linear', sizes: [3, 3] }),
    }));
    expect(out.out.shape).toEqual([1, 1, 3, 3]);
    expect(out.out.data).toEqual([0, 0.5, 1, 1, 1.5, 2, 2, 2.5, 3]);
  });

  test('downsampling: linear averages neighbours, nearest rounds halves down', async () => {
    // width 4 -> 2 (scale 0.5): coordinate(o) = (o + 0.5) / 0.5 - 0.5 = 0.5, 2.5.
    // linear: (0 + 10) / 2 = 5, (20 + 30) / 2 = 25.
    // nearest: ceil(0.5 - 0.5) = 0 -> 0, ceil(2.5 - 0.5) = 2 -> 20.
    const out = await runOne(f32([1, 1, 1, 4], [0, 10, 20, 30]), (b, i) => ({
      lin: b.resample2d(i, { mode: 'linear', sizes: [1, 2] }),
      near: b.resample2d(i, { sizes: [1, 2] }),
    }));
    expect(out.lin.data).toEqual([5, 25]);
    expect(out.near.data).toEqual([0, 20]);
  });

  test('axes pick the resampled dimensions (NHWC)', async () => {
    // [1, 2, 1, 2] NHWC with H = 2, C = 2: pixel 0 = (1, 10), pixel 1 = (3, 30).
    // Resample H to 4 with axes [1, 2]: coordinate(o) = (o + 0.5) / 2 - 0.5
    // = -0.25, 0.25, 0.75, 1.25 -> clamped 0, 0.25, 0.75, 1:
    // channel 0: 1, 1.5, 2.5, 3; channel 1: 10, 15, 25, 30.
    const out = await runOne(f32([1, 2, 1, 2], [1, 10, 3, 30]), (b, i) => ({
      out: b.resample2d(i, { mode: 'linear', sizes: [4, 1], axes: [1, 2] }),
    }));
    expect(out.out.shape).toEqual([1, 4, 1, 2]);
    expect(out.out.data).toEqual([1, 10, 1.5, 15, 2.5, 25, 3, 30]);
  });

  test('validation', () => {
    const { b, x: v } = builderWith([1, 1, 2, 4]);
    // Scales give floor(size * scale): 2 * 1.5 = 3, 4 * 0.6 = 2.4 -> 2.
    expect(b.resample2d(v, { scales: [1.5, 0.6] }).shape).toEqual([1, 1, 3, 2]);
    expectThrow(() => b.resample2d(v, { scales: [1, 0] }), 'TypeError', 'resample2d');
    expectThrow(() => b.resample2d(v, { scales: [1] }), 'TypeError');
    expectThrow(() => b.resample2d(v, { scales: [0.1, 1] }), 'TypeError');
    expectThrow(() => b.resample2d(v, { sizes: [0, 1] }), 'TypeError');
    expectThrow(() => b.resample2d(v, { axes: [2, 2] }), 'TypeError');
    expectThrow(() => b.resample2d(v, { axes: [2, 4] }), 'TypeError');
    expectThrow(() => b.resample2d(v, { mode: 'cubic' }), 'TypeError');
    expectThrow(() => b.resample2d(b.input('i', { dataType: 'int32', shape: [1, 1, 2, 2] })), 'TypeError');
    expectThrow(() => b.resample2d(b.input('r', { dataType: 'float32', shape: [2, 2] })), 'TypeError');
  });
});

describe('triangular', () => {
  // The spec's example:
  //   [[7, 1, 2],
  //    [9, 4, 8],
  //    [2, 6, 3]]
  const x = f32([3, 3], [7, 1, 2, 9, 4, 8, 2, 6, 3]);

  test('negative diagonal', async () => {
    // upper, diagonal -1: keep column - row >= -1 (one sub-diagonal more):
    //   row 2 drops column 0 only.
    // lower, diagonal -1: keep column - row <= -1 (strictly below the main
    //   diagonal): row 0 empty, row 1 keeps column 0, row 2 columns 0, 1.
    const out = await runOne(x, (b, i) => ({
      up: b.triangular(i, { diagonal: -1 }),
      low: b.triangular(i, { upper: false, diagonal: -1 }),
      none: b.triangular(i, { upper: false, diagonal: -3 }),
    }));
    expect(out.up.data).toEqual([7, 1, 2, 9, 4, 8, 0, 6, 3]);
    expect(out.low.data).toEqual([0, 0, 0, 9, 0, 0, 2, 6, 0]);
    expect(out.none.data).toEqual([0, 0, 0, 0, 0, 0, 0, 0, 0]);
  });

  test('batches of integer matrices', async () => {
    // Two 2x3 int32 matrices, lower with diagonal -1: only (1, 0) survives.
    const out = await runOne(
      { dataType: 'int32', shape: [2, 2, 3], data: iota(12, 1) },
      (b, i) => ({ out: b.triangular(i, { upper: false, diagonal: -1 }) }),
    );
    expect(out.out.data).toEqual([0, 0, 0, 4, 0, 0, 0, 0, 0, 10, 0, 0]);
  });

  test('validation', () => {
    const { b, x: v } = builderWith([3]);
    expectThrow(() => b.triangular(v), 'TypeError', 'triangular');
    const m = b.input('m', { dataType: 'float32', shape: [2, 2] });
    expectThrow(() => b.triangular(m, { diagonal: 0.5 }), 'TypeError');
    expectThrow(() => b.triangular(m, { upper: 1 }), 'TypeError');
  });
});

describe('expand, reverse, tile', () => {
  test('values and shapes', async () => {
    // expand [2, 1] -> [2, 2, 3]: each row value repeated 3 times, twice.
    // reverse axis 0 of [[1, 2], [3, 4]] = [[3, 4], [1, 2]]; default: all axes.
    // tile [2] x [3] = [1, 2, 1, 2, 1, 2].
    const r = await run(
      context,
      { a: f32([2, 1], [1, 2]), m: f32([2, 2], [1, 2, 3, 4]) },
      (b, { a, m }) => ({
        e: b.expand(a, [2, 2, 3]),
        r0: b.reverse(m, { axes: [0] }),
        rall: b.reverse(m),
        t: b.tile(b.reshape(a, [2]), [3]),
      }),
    );
    expect(Array.from(r.results.e)).toEqual([1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2]);
    expect(r.outputs.e.shape).toEqual([2, 2, 3]);
    expect(Array.from(r.results.r0)).toEqual([3, 4, 1, 2]);
    expect(Array.from(r.results.rall)).toEqual([4, 3, 2, 1]);
    expect(Array.from(r.results.t)).toEqual([1, 2, 1, 2, 1, 2]);
  });

  test('validation', () => {
    const { b, x: v } = builderWith([2, 3]);
    // expand is unidirectional: [2, 3] cannot become [3] or [2, 1].
    expectThrow(() => b.expand(v, [3]), 'TypeError', 'expand');
    expectThrow(() => b.expand(v, [2, 1]), 'TypeError');
    expectThrow(() => b.reverse(v, { axes: [0, 0] }), 'TypeError', 'reverse');
    expectThrow(() => b.reverse(v, { axes: [2] }), 'TypeError');
    expectThrow(() => b.tile(v, [1]), 'TypeError', 'tile');
    expectThrow(() => b.tile(v, [1, 0]), 'TypeError');
  });
});

test('opSupportLimits lists every operator, split under "outputs"', async () => {
  const limits = context.opSupportLimits();
  for (const op of ['expand', 'pad', 'reverse', 'tile', 'triangular', 'resample2d']) {
    expect(limits[op].input.dataTypes.length).toBeGreaterThan(0);
    expect(limits[op].output.dataTypes.length).toBeGreaterThan(0);
  }
  expect(limits.split.input.dataTypes).toContain('int64');
  expect(limits.split.outputs.dataTypes).toContain('uint8');
  expect(limits.split.output).toBeUndefined();
  // int8 and uint8 since #891.
  expect(limits.resample2d.input.dataTypes.sort()).toEqual(['float16', 'float32', 'int8', 'uint8']);
  expect(limits.triangular.input.rankRange.min).toBe(2);
  expect(typeof ml.createContext).toBe('function');
});
