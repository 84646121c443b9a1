'use strict';
// reduce family: reduceL2 and reduceProduct (no WPT vector files) with
// values worked out by hand, plus the spec's edge cases for every reduction:
// keepDimensions, an empty axes list (each element reduced on its own),
// rank-0 inputs, integer inputs (wrapping), axis validation, and
// argMin/argMax/cumulativeSum options.

const { ml, MLGraphBuilder } = require('..');
const { expectThrow, expectClose, run, f32, cpuContext } = require('./helpers');

let context;
beforeAll(async () => {
  context = await cpuContext();
});
afterAll(() => {
  context.destroy();
});

/** Runs `op(x, ...rest)` on one input; returns { data, shape, dataType }. */
async function runOp(input, op, ...rest) {
  const { results, outputs } = await run(context, { x: input }, (b, { x }) => ({
    out: b[op](x, ...rest),
  }));
  return {
    data: Array.from(results.out, Number),
    shape: outputs.out.shape,
    dataType: outputs.out.dataType,
  };
}

// x = [[1, -2, 2], [3, 4, -4]] (shape [2, 3]).
const X = [1, -2, 2, 3, 4, -4];

describe('reduceL2', () => {
  test('all axes by default', async () => {
    // 1 + 4 + 4 + 9 + 16 + 16 = 50, sqrt(50) = 7.0710678...
    const r = await runOp(f32([2, 3], X), 'reduceL2');
    expect(r.shape).toEqual([]);
    expectClose(r.data, [Math.sqrt(50)]);
  });

  test('along axis 1, and along axis 0 keeping dimensions', async () => {
    // rows: sqrt(1 + 4 + 4) = 3, sqrt(9 + 16 + 16) = sqrt(41) = 6.4031242...
    let r = await runOp(f32([2, 3], X), 'reduceL2', { axes: [1] });
    expect(r.shape).toEqual([2]);
    expectClose(r.data, [3, Math.sqrt(41)]);
    // columns: sqrt(1 + 9) = sqrt(10), sqrt(4 + 16) = sqrt(20), sqrt(4 + 16)
    r = await runOp(f32([2, 3], X), 'reduceL2', { axes: [0], keepDimensions: true });
    expect(r.shape).toEqual([1, 3]);
    expectClose(r.data, [Math.sqrt(10), Math.sqrt(20), Math.sqrt(20)]);
  });

  test('empty axes: each element on its own, sqrt(x^2) = |x|', async () => {
    const r = await runOp(f32([2, 3], X), 'reduceL2', { axes: [] });
    expect(r.shape).toEqual([2, 3]);
    expectClose(r.data, [1, 2, 2, 3, 4, 4]);
  });

  test('float16: sqrt(3^2 + 4^2) = 5', async () => {
    // 3 = 0x4200, 4 = 0x4400, 5 = 0x4500 in float16.
    const input = { dataType: 'float16', shape: [2], data: Uint16Array.from([0x4200, 0x4400]) };
    const r = await runOp(input, 'reduceL2');
    expect(r.dataType).toBe('float16');
    expect(r.data).toEqual([0x4500]);
  });

  test('integer inputs are refused (float32/float16 only)', () => {
    const b = new MLGraphBuilder(context);
    const x = b.input('x', { dataType: 'int32', shape: [2] });
    expectThrow(() => b.reduceL2(x), 'TypeError', 'reduceL2');
  });
});

describe('reduceProduct', () => {
  test('all axes by default', async () => {
    // 1 * -2 * 2 * 3 * 4 * -4 = 192
    const r = await runOp(f32([2, 3], X), 'reduceProduct');
    expect(r.shape).toEqual([]);
    expectClose(r.data, [192]);
  });

  test('along axis 0, and along axis 1 keeping dimensions', async () => {
    // columns: 1 * 3 = 3, -2 * 4 = -8, 2 * -4 = -8
    let r = await runOp(f32([2, 3], X), 'reduceProduct', { axes: [0] });
    expect(r.shape).toEqual([3]);
    expectClose(r.data, [3, -8, -8]);
    // rows: 1 * -2 * 2 = -4, 3 * 4 * -4 = -48
    r = await runOp(f32([2, 3], X), 'reduceProduct', { axes: [1], keepDimensions: true });
    expect(r.shape).toEqual([2, 1]);
    expectClose(r.data, [-4, -48]);
  });

  test('three dimensions, non-adjacent axes', async () => {
    // x[i][j][k] = i*4 + j*2 + k + 1, shape [2, 2, 2]: 1..8.
    // axes [0, 2] keep j: j=0 -> 1*2*5*6 = 60, j=1 -> 3*4*7*8 = 672
    const r = await runOp(f32([2, 2, 2], [1, 2, 3, 4, 5, 6, 7, 8]), 'reduceProduct', {
      axes: [2, 0],
    });
    expect(r.shape).toEqual([2]);
    expectClose(r.data, [60, 672]);
  });

  test('int32 wraps around; uint32 too', async () => {
    // 65536 * 65536 = 2^32 = 0 (mod 2^32); 65536 * 3 = 196608
    let r = await runOp(
      { dataType: 'int32', shape: [2, 2], data: [65536, 65536, 65536, 3] },
      'reduceProduct',
      { axes: [1] },
    );
    expect(r.data).toEqual([0, 196608]);
    // 2^31 * 3 = 3 * 2^31 = 2^31 (mod 2^32) as uint32 = 2147483648
    r = await runOp({ dataType: 'uint32', shape: [2], data: [2147483648, 3] }, 'reduceProduct');
    expect(r.data).toEqual([2147483648]);
  });

  test('rank-0 input: the product of one value is that value', async () => {
    const r = await runOp(f32([], [-2.5]), 'reduceProduct');
    expect(r.shape).toEqual([]);
    expectClose(r.data, [-2.5]);
  });

  test('int8 inputs are refused (float32, float16, int32, uint32 only)', () => {
    const b = new MLGraphBuilder(context);
    const x = b.input('x', { dataType: 'int8', shape: [2] });
    expectThrow(() => b.reduceProduct(x), 'TypeError', 'reduceProduct');
  });
});

describe('edge cases of every reduction', () => {
  test('empty axes apply the function to each element', async () => {
    // x = [1, 4]: L1 |x|, LogSum log x, LogSumExp log(exp x) = x,
    // Mean x, SumSquare x^2, Max/Min/Sum x.
    const x = f32([2], [1, 4]);
    const want = {
      reduceL1: [1, 4],
      reduceLogSum: [0, Math.log(4)],
      reduceLogSumExp: [1, 4],
      reduceMax: [1, 4],
      reduceMean: [1, 4],
      reduceMin: [1, 4],
      reduceSum: [1, 4],
      reduceSumSquare: [1, 16],
    };
    for (const [op, values] of Object.entries(want)) {
      const r = await runOp(x, op, { axes: [] });
      expect(r.shape).toEqual([2]);
      expectClose(r.data, values);
    }
  });

  test('rank-0 inputs give rank-0 outputs', async () => {
    // x = 3: L1 3, L2 3, LogSum log 3, LogSumExp 3, Mean 3, SumSquare 9.
    const x = f32([], [3]);
    const want = {
      reduceL1: 3,
      reduceL2: 3,
      reduceLogSum: Math.log(3),
      reduceLogSumExp: 3,
      reduceMean: 3,
      reduceSumSquare: 9,
    };
    for (const [op, value] of Object.entries(want)) {
      const r = await runOp(x, op);
      expect(r.shape).toEqual([]);
      expectClose(r.data, [value]);
      const e = await runOp(x, op, { axes: [], keepDimensions: true });
      expect(e.shape).toEqual([]);
      expectClose(e.data, [value]);
    }
  });

  test('keepDimensions with all axes keeps rank with size 1', async () => {
    // mean of X = (1 - 2 + 2 + 3 + 4 - 4) / 6 = 4 / 6
    const r = await runOp(f32([2, 3], X), 'reduceMean', { keepDimensions: true });
    expect(r.shape).toEqual([1, 1]);
    expectClose(r.data, [4 / 6]);
  });

  test('integer sums wrap; L1 of int32 and max/min of uint8', async () => {
    // 2147483647 + 1 = -2147483648 (wraps)
    let r = await runOp({ dataType: 'int32', shape: [2], data: [2147483647, 1] }, 'reduceSum');
    expect(r.data).toEqual([-2147483648]);
    // |-3| + |4| = 7
    r = await runOp({ dataType: 'int32', shape: [2], data: [-3, 4] }, 'reduceL1');
    expect(r.data).toEqual([7]);
    r = await runOp({ dataType: 'uint8', shape: [3], data: [7, 255, 0] }, 'reduceMax');
    expect(r.data).toEqual([255]);
    r = await runOp({ dataType: 'uint8', shape: [3], data: [7, 255, 0] }, 'reduceMin');
    expect(r.data).toEqual([0]);
  });

  test('axes must be in range and distinct', () => {
    const b = new MLGraphBuilder(context);
    const x = b.input('x', { dataType: 'float32', shape: [2, 3] });
    expectThrow(() => b.reduceSum(x, { axes: [2] }), 'TypeError', 'reduceSum');
    expectThrow(() => b.reduceSum(x, { axes: [0, 0] }), 'TypeError', 'reduceSum');
    expectThrow(() => b.reduceMax(x, { axes: [-1] }), 'TypeError', 'reduceMax');
    const s = b.input('s', { dataType: 'float32', shape: [] });
    expectThrow(() => b.reduceMin(s, { axes: [0] }), 'TypeError', 'reduceMin');
  });

  test('float-only reductions refuse integers', () => {
    const b = new MLGraphBuilder(context);
    const x = b.input('x', { dataType: 'uint32', shape: [2] });
    for (const op of ['reduceLogSum', 'reduceLogSumExp', 'reduceMean']) {
      expectThrow(() => b[op](x), 'TypeError', op);
    }
  });
});

describe('argMin / argMax', () => {
  test('ties select the first index; keepDimensions; int64 output', async () => {
    // x = [[5, 1, 5], [0, 9, 9]]; argMax axis 1: row 0 -> 0 (5 at 0 and 2),
    // row 1 -> 1 (9 at 1 and 2). argMin axis 0, columns [5, 0] -> 1,
    // [1, 9] -> 0, [5, 9] -> 0.
    const x = f32([2, 3], [5, 1, 5, 0, 9, 9]);
    let r = await runOp(x, 'argMax', 1);
    expect(r).toEqual({ data: [0, 1], shape: [2], dataType: 'int32' });
    r = await runOp(x, 'argMin', 0, { keepDimensions: true, outputDataType: 'int64' });
    expect(r).toEqual({ data: [1, 0, 0], shape: [1, 3], dataType: 'int64' });
  });

  test('invalid axis or output type', () => {
    const b = new MLGraphBuilder(context);
    const x = b.input('x', { dataType: 'float32', shape: [2, 3] });
    expectThrow(() => b.argMax(x, 2), 'TypeError', 'argMax');
    expectThrow(() => b.argMin(x, 0, { outputDataType: 'float32' }), 'TypeError', 'argMin');
    const s = b.input('s', { dataType: 'float32', shape: [] });
    expectThrow(() => b.argMin(s, 0), 'TypeError', 'argMin');
  });
});

describe('cumulativeSum', () => {
  test('exclusive and reversed', async () => {
    // [1, 2, 3, 4]: inclusive [1, 3, 6, 10], exclusive [0, 1, 3, 6],
    // reversed [10, 9, 7, 4], both [9, 7, 4, 0].
    const x = { dataType: 'int32', shape: [4], data: [1, 2, 3, 4] };
    expect((await runOp(x, 'cumulativeSum', 0)).data).toEqual([1, 3, 6, 10]);
    expect((await runOp(x, 'cumulativeSum', 0, { exclusive: true })).data).toEqual([0, 1, 3, 6]);
    expect((await runOp(x, 'cumulativeSum', 0, { reversed: true })).data).toEqual([10, 9, 7, 4]);
    expect(
      (await runOp(x, 'cumulativeSum', 0, { exclusive: true, reversed: true })).data,
    ).toEqual([9, 7, 4, 0]);
  });

  test('axis out of range', () => {
    const b = new MLGraphBuilder(context);
    const x = b.input('x', { dataType: 'float32', shape: [2, 3] });
    expectThrow(() => b.cumulativeSum(x, 2), 'TypeError', 'cumulativeSum');
  });
});

test('opSupportLimits lists the family with the spec data types', () => {
  const limits = context.opSupportLimits();
  expect(limits.reduceL2.input.dataTypes.sort()).toEqual(['float16', 'float32']);
  // 64-bit integers too, as in the spec's table; cumulativeSum without the
  // 8-bit integers (#912).
  expect(limits.reduceProduct.input.dataTypes.sort()).toEqual(
    ['float16', 'float32', 'int32', 'int64', 'uint32', 'uint64'],
  );
  expect(limits.cumulativeSum.input.dataTypes.sort()).toEqual(
    ['float16', 'float32', 'int32', 'int64', 'uint32', 'uint64'],
  );
  expect(limits.argMax.output.dataTypes.sort()).toEqual(['int32', 'int64']);
  expect(typeof ml.createContext).toBe('function');
});
