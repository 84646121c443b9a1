'use strict';
// logical family: the operators without a WPT vector file (lesserOrEqual,
// logicalXor, isNaN, isInfinite), with values worked out by hand, and the
// spec's validation steps ("create an element-wise logical operation").

const { ml, MLGraphBuilder } = require('..');
const { expectThrow, runOneOutput, f32, cpuContext } = require('./helpers');

let context;
beforeAll(async () => {
  context = await cpuContext();
});
afterAll(() => {
  context.destroy();
});

const runOut = (inputs, fn) => runOneOutput(context, inputs, fn);
const u8 = (shape, data) => ({ dataType: 'uint8', shape, data: Uint8Array.from(data) });

describe('lesserOrEqual', () => {
  test('broadcasts and follows IEEE comparisons', async () => {
    // a [2, 3] = [[1, 2, 3], [NaN, -0, 5]], b [3] = [2, 2, 0]:
    //   1 <= 2 -> 1, 2 <= 2 -> 1, 3 <= 0 -> 0,
    //   NaN <= 2 -> 0 (any comparison with NaN is false), -0 <= 2 -> 1, 5 <= 0 -> 0.
    const out = await runOut({ a: f32([2, 3], [1, 2, 3, NaN, -0, 5]), b: f32([3], [2, 2, 0]) }, (b, { a, b: y }) =>
      b.lesserOrEqual(a, y),
    );
    expect(out.dataType).toBe('uint8');
    expect(out.shape).toEqual([2, 3]);
    expect(out.data).toEqual([1, 1, 0, 0, 1, 0]);
  });

  test('-0 <= +0 and NaN <= NaN', async () => {
    // -0 == +0 in IEEE, so -0 <= 0 is true; NaN <= NaN is false.
    const out = await runOut({ a: f32([2], [-0, NaN]), b: f32([2], [0, NaN]) }, (b, { a, b: y }) =>
      b.lesserOrEqual(a, y),
    );
    expect(out.data).toEqual([1, 0]);
  });

  test('integers, with a scalar broadcast to [2, 2]', async () => {
    // a [2, 2] = [-3, 0, 7, 2147483647], b [] = 0: -3 <= 0, 0 <= 0, 7 > 0, max > 0.
    const out = await runOut(
      { a: { dataType: 'int32', shape: [2, 2], data: Int32Array.from([-3, 0, 7, 2147483647]) },
        b: { dataType: 'int32', shape: [], data: Int32Array.from([0]) } },
      (b, { a, b: y }) => b.lesserOrEqual(a, y),
    );
    expect(out.shape).toEqual([2, 2]);
    expect(out.data).toEqual([1, 1, 0, 0]);
  });

  test('int64 compares exactly beyond 2^53', async () => {
    // 2^53 + 1 and 2^53 are equal as doubles but not as int64:
    // 2^53 + 1 <= 2^53 -> 0, 2^53 <= 2^53 + 1 -> 1.
    const big = 2n ** 53n;
    const out = await runOut(
      { a: { dataType: 'int64', shape: [2], data: BigInt64Array.from([big + 1n, big]) },
        b: { dataType: 'int64', shape: [2], data: BigInt64Array.from([big, big + 1n]) } },
      (b, { a, b: y }) => b.lesserOrEqual(a, y),
    );
    expect(out.data).toEqual([0, 1]);
  });

  test('mismatched types or shapes are TypeErrors', () => {
    const b = new MLGraphBuilder(context);
    const x = b.input('x', { dataType: 'float32', shape: [2] });
    const h = b.input('h', { dataType: 'float16', shape: [2] });
    const y = b.input('y', { dataType: 'float32', shape: [3] });
    expectThrow(() => b.lesserOrEqual(x, h), 'TypeError', 'lesserOrEqual');
    expectThrow(() => b.lesserOrEqual(x, y), 'TypeError', 'broadcast');
    expectThrow(() => b.lesserOrEqual(x), 'TypeError', 'b');
  });
});

describe('logicalXor', () => {
  test('treats every non-zero byte as true', async () => {
    // (0,0) -> 0, (0,9) -> 1, (3,0) -> 1, (255,1) -> 0 (both true).
    const out = await runOut({ a: u8([4], [0, 0, 3, 255]), b: u8([4], [0, 9, 0, 1]) }, (b, { a, b: y }) =>
      b.logicalXor(a, y),
    );
    expect(out.data).toEqual([0, 1, 1, 0]);
  });

  test('broadcasts [2, 1] with [3]', async () => {
    // a = [[0], [1]], b = [0, 2, 0]: row 0 is b != 0 -> [0, 1, 0];
    // row 1 is !(b != 0) -> [1, 0, 1].
    const out = await runOut({ a: u8([2, 1], [0, 1]), b: u8([3], [0, 2, 0]) }, (b, { a, b: y }) =>
      b.logicalXor(a, y),
    );
    expect(out.shape).toEqual([2, 3]);
    expect(out.data).toEqual([0, 1, 0, 1, 0, 1]);
  });

  test('needs uint8 operands', () => {
    const b = new MLGraphBuilder(context);
    const x = b.input('x', { dataType: 'float32', shape: [2] });
    const i = b.input('i', { dataType: 'int8', shape: [2] });
    expectThrow(() => b.logicalXor(x, x), 'TypeError', 'logicalXor');
    expectThrow(() => b.logicalXor(i, i), 'TypeError', 'uint8');
    expectThrow(() => b.logicalNot(x), 'TypeError', 'logicalNot');
  });
});

describe('isNaN and isInfinite', () => {
  const values = [1.5, NaN, Infinity, -Infinity, 0, -0, 3.4e38];

  test('float32', async () => {
    const nan = await runOut({ x: f32([7], values) }, (b, { x }) => b.isNaN(x));
    expect(nan.dataType).toBe('uint8');
    expect(nan.shape).toEqual([7]);
    expect(nan.data).toEqual([0, 1, 0, 0, 0, 0, 0]);
    const inf = await runOut({ x: f32([7], values) }, (b, { x }) => b.isInfinite(x));
    // 3.4e38 is finite (below float32's max, 3.4028235e38).
    expect(inf.data).toEqual([0, 0, 1, 1, 0, 0, 0]);
  });

  test('float16 bit patterns', async () => {
    // 0x3c00 = 1, 0x7e00 = NaN, 0x7c00 = +inf, 0xfc00 = -inf, 0x7bff = 65504 (max),
    // 0x7c01 = NaN (any non-zero mantissa with exponent 31).
    const x = { dataType: 'float16', shape: [2, 3], data: Uint16Array.from([0x3c00, 0x7e00, 0x7c00, 0xfc00, 0x7bff, 0x7c01]) };
    const nan = await runOut({ x }, (b, { x: i }) => b.isNaN(i));
    expect(nan.shape).toEqual([2, 3]);
    expect(nan.data).toEqual([0, 1, 0, 0, 0, 1]);
    const inf = await runOut({ x }, (b, { x: i }) => b.isInfinite(i));
    expect(inf.data).toEqual([0, 0, 1, 1, 0, 0]);
  });

  test('a 0-D input gives a 0-D output', async () => {
    const out = await runOut({ x: f32([], [NaN]) }, (b, { x }) => b.isNaN(x));
    expect(out.shape).toEqual([]);
    expect(out.data).toEqual([1]);
  });

  test('only float inputs', () => {
    const b = new MLGraphBuilder(context);
    const i = b.input('i', { dataType: 'int32', shape: [2] });
    const u = b.input('u', { dataType: 'uint8', shape: [2] });
    expectThrow(() => b.isNaN(i), 'TypeError', 'isNaN');
    expectThrow(() => b.isInfinite(u), 'TypeError', 'isInfinite');
    expectThrow(() => b.isNaN(), 'TypeError', 'input');
  });

  test('opSupportLimits() names input and output', () => {
    const limits = context.opSupportLimits();
    for (const op of ['isNaN', 'isInfinite']) {
      expect([...limits[op].input.dataTypes].sort()).toEqual(['float16', 'float32']);
      expect(limits[op].output.dataTypes).toEqual(['uint8']);
    }
    expect(limits.logicalXor.a.dataTypes).toEqual(['uint8']);
    expect(limits.logicalXor.b.dataTypes).toEqual(['uint8']);
    expect(limits.lesserOrEqual.output.dataTypes).toEqual(['uint8']);
    expect(limits.logicalNot.a.dataTypes).toEqual(['uint8']);
  });
});

test('the module exports ml', () => {
  expect(typeof ml.createContext).toBe('function');
});
