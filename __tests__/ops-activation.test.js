'use strict';
// activation family and the element-wise unary additions: the operators
// without a WPT vector file (softsign, sin, roundEven), with values worked
// out by hand, plus spec edge cases of the others (option validation,
// casts of the options, prelu/where broadcasting, integer where/prelu).

const { MLGraphBuilder } = require('..');
const { expectThrow, expectClose, runOneOutput, f32, cpuContext } = require('./helpers');

let context;
beforeAll(async () => {
  context = await cpuContext();
});
afterAll(() => {
  context.destroy();
});

const runOut = (inputs, fn) => runOneOutput(context, inputs, fn);
const f16 = (shape, bits) => ({ dataType: 'float16', shape, data: Uint16Array.from(bits) });

describe('softsign', () => {
  test('x / (1 + |x|)', async () => {
    // -3 / 4 = -0.75, -1 / 2 = -0.5, 0 / 1 = 0, 0.5 / 1.5 = 1/3, 4 / 5 = 0.8,
    // 99 / 100 = 0.99.
    const out = await runOut({ x: f32([2, 3], [-3, -1, 0, 0.5, 4, 99]) }, (b, { x }) => b.softsign(x));
    expect(out.shape).toEqual([2, 3]);
    expectClose(out.data, [-0.75, -0.5, 0, 1 / 3, 0.8, 0.99], 1e-7);
  });

  test('NaN stays NaN; infinities give the limits ±1', async () => {
    // The formula is inf/inf at ±inf; softsign tends to ±1 there.
    const out = await runOut({ x: f32([3], [NaN, Infinity, -Infinity]) }, (b, { x }) => b.softsign(x));
    expect(Number.isNaN(out.data[0])).toBe(true);
    expect(out.data.slice(1)).toEqual([1, -1]);
  });

  test('float16', async () => {
    // 0x3c00 = 1 -> 1/2 = 0x3800; 0xc000 = -2 -> -2/3 = -0.66650390625 = 0xb955
    // (the float16 nearest to -0.6666...: 0x155 = 341, (1024 + 341) / 2048).
    const out = await runOut({ x: f16([2], [0x3c00, 0xc000]) }, (b, { x }) => b.softsign(x));
    expect(out.data).toEqual([0x3800, 0xb955]);
  });

  test('float inputs only', () => {
    const b = new MLGraphBuilder(context);
    const i = b.input('i', { dataType: 'int32', shape: [2] });
    expectThrow(() => b.softsign(i), 'TypeError', 'softsign');
  });
});

describe('sin', () => {
  test('known angles', async () => {
    // sin 0 = 0, sin(pi/6) = 0.5, sin(pi/2) = 1, sin(-pi/2) = -1, sin(1) = 0.8414709848,
    // sin(fround(pi)) = -8.742278e-8 (fround(pi) is 8.74e-8 above pi).
    const x = [0, Math.PI / 6, Math.PI / 2, -Math.PI / 2, 1, Math.PI];
    const out = await runOut({ x: f32([6], x) }, (b, { x: i }) => b.sin(i));
    expectClose(out.data, [0, 0.5, 1, -1, 0.8414709848, -8.742278e-8], 1e-6);
  });

  test('NaN and infinities give NaN', async () => {
    const out = await runOut({ x: f32([3], [NaN, Infinity, -Infinity]) }, (b, { x }) => b.sin(x));
    expect(out.data.every(Number.isNaN)).toBe(true);
  });

  test('float16 and type checks', async () => {
    // 0x3e48 = 1.5703125 (nearest float16 to pi/2): sin = 0.99999970 -> 1.0 = 0x3c00.
    const out = await runOut({ x: f16([1], [0x3e48]) }, (b, { x }) => b.sin(x));
    expect(out.data).toEqual([0x3c00]);
    const b = new MLGraphBuilder(context);
    const i = b.input('i', { dataType: 'int32', shape: [2] });
    expectThrow(() => b.sin(i), 'TypeError', 'sin');
  });
});

describe('roundEven', () => {
  test('halfway cases go to the even integer', async () => {
    // -2.5 -> -2, -1.5 -> -2, -0.5 -> -0, 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, 3.5 -> 4,
    // 2.4 -> 2, -2.6 -> -3, 8388607.5 -> 8388608 (2^23 - 0.5: 8388607 is odd).
    const x = [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 2.4, -2.6, 8388607.5];
    const out = await runOut({ x: f32([10], x) }, (b, { x: i }) => b.roundEven(i));
    expect(out.data).toEqual([-2, -2, -0, 0, 2, 2, 4, 2, -3, 8388608]);
    expect(Object.is(out.data[2], -0)).toBe(true);
  });

  test('non-finite values pass through', async () => {
    const out = await runOut({ x: f32([3], [NaN, Infinity, -Infinity]) }, (b, { x }) => b.roundEven(x));
    expect(Number.isNaN(out.data[0])).toBe(true);
    expect(out.data.slice(1)).toEqual([Infinity, -Infinity]);
  });

  test('float16', async () => {
    // 0x4100 = 2.5 -> 2 = 0x4000; 0x4300 = 3.5 -> 4 = 0x4400; 0xbc00 = -1 -> -1.
    const out = await runOut({ x: f16([3], [0x4100, 0x4300, 0xbc00]) }, (b, { x }) => b.roundEven(x));
    expect(out.data).toEqual([0x4000, 0x4400, 0xbc00]);
  });

  test('float inputs only', () => {
    const b = new MLGraphBuilder(context);
    const i = b.input('i', { dataType: 'int32', shape: [2] });
    expectThrow(() => b.roundEven(i), 'TypeError', 'roundEven');
  });
});

describe('option validation and casts', () => {
  test('options are finite doubles', () => {
    const b = new MLGraphBuilder(context);
    const x = b.input('x', { dataType: 'float32', shape: [2] });
    expectThrow(() => b.elu(x, { alpha: NaN }), 'TypeError', 'alpha');
    expectThrow(() => b.leakyRelu(x, { alpha: Infinity }), 'TypeError', 'alpha');
    expectThrow(() => b.hardSigmoid(x, { beta: 'x' }), 'TypeError', 'beta');
    expectThrow(() => b.linear(x, 3), 'TypeError', 'linear');
  });

  test('alpha is cast to float16 for float16 inputs', async () => {
    // leakyRelu(-1) with alpha 0.1: 0.1 as float16 is 0.0999755859375 (0x2e66);
    // -1 * that = -0.0999755859375 = 0xae66.
    const out = await runOut({ x: f16([1], [0xbc00]) }, (b, { x }) => b.leakyRelu(x, { alpha: 0.1 }));
    expect(out.data).toEqual([0xae66]);
  });

  test('linear and hardSigmoid defaults', async () => {
    // linear: 1 * x + 0. hardSigmoid: max(0, min(1, 0.2x + 0.5)):
    //   x = -3 -> -0.1 -> 0; x = 0 -> 0.5; x = 1 -> 0.7; x = 3 -> 1.1 -> 1.
    const x = f32([4], [-3, 0, 1, 3]);
    expect((await runOut({ x }, (b, { x: i }) => b.linear(i))).data).toEqual([-3, 0, 1, 3]);
    const hs = await runOut({ x }, (b, { x: i }) => b.hardSigmoid(i));
    expectClose(hs.data, [0, 0.5, 0.7, 1], 1e-7);
  });
});

describe('prelu and where broadcasting', () => {
  test('prelu broadcasts a slope larger than the input', async () => {
    // input [3] = [-2, 0, 4], slope [2, 1] = [[0.5], [3]] -> output [2, 3]:
    //   row 0: -2 * 0.5 = -1, 0, 4; row 1: -2 * 3 = -6, 0, 4.
    const out = await runOut({ x: f32([3], [-2, 0, 4]), s: f32([2, 1], [0.5, 3]) }, (b, { x, s }) => b.prelu(x, s));
    expect(out.shape).toEqual([2, 3]);
    expect(out.data).toEqual([-1, 0, 4, -6, 0, 4]);
  });

  test('prelu on int8 wraps', async () => {
    // -3 * 50 = -150, which wraps to 106 in int8 (-150 + 256); 7 stays.
    const out = await runOut(
      { x: { dataType: 'int8', shape: [2], data: Int8Array.from([-3, 7]) },
        s: { dataType: 'int8', shape: [], data: Int8Array.from([50]) } },
      (b, { x, s }) => b.prelu(x, s),
    );
    expect(out.data).toEqual([106, 7]);
  });

  test('prelu type and shape errors', () => {
    const b = new MLGraphBuilder(context);
    const x = b.input('x', { dataType: 'float32', shape: [2, 3] });
    const h = b.input('h', { dataType: 'float16', shape: [3] });
    const s = b.input('s', { dataType: 'float32', shape: [4] });
    const u = b.input('u', { dataType: 'uint8', shape: [3] });
    expectThrow(() => b.prelu(x, h), 'TypeError', 'prelu');
    expectThrow(() => b.prelu(x, s), 'TypeError', 'broadcast');
    expectThrow(() => b.prelu(u, u), 'TypeError', 'prelu');
  });

  test('where broadcasts all three operands', async () => {
    // condition [2, 1] = [[1], [0]], trueValue [3] = [1, 2, 3], falseValue [] = 9n
    // (int64) -> [[1, 2, 3], [9, 9, 9]].
    const out = await runOut(
      { c: { dataType: 'uint8', shape: [2, 1], data: Uint8Array.from([1, 0]) },
        t: { dataType: 'int64', shape: [3], data: BigInt64Array.from([1n, 2n, 3n]) },
        f: { dataType: 'int64', shape: [], data: BigInt64Array.from([9n]) } },
      (b, { c, t, f }) => b.where(c, t, f),
    );
    expect(out.dataType).toBe('int64');
    expect(out.shape).toEqual([2, 3]);
    expect(out.data).toEqual([1n, 2n, 3n, 9n, 9n, 9n]);
  });

  test('where errors', () => {
    const b = new MLGraphBuilder(context);
    const c = b.input('c', { dataType: 'uint8', shape: [4] });
    const x = b.input('x', { dataType: 'float32', shape: [3] });
    const i = b.input('i', { dataType: 'int32', shape: [3] });
    const cf = b.input('cf', { dataType: 'float32', shape: [3] });
    expectThrow(() => b.where(cf, x, x), 'TypeError', 'condition');
    expectThrow(() => b.where(c, x, i), 'TypeError', 'falseValue');
    expectThrow(() => b.where(c, x, x), 'TypeError', 'condition');
  });
});
