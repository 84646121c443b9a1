'use strict';
// The rules of the current WebNN spec (index.bs at c515210) that changed
// since the era of the conformance vectors, one test per rule. Each test
// states the rule, with the pull request of the spec that made it.

const { ml, MLGraphBuilder } = require('..');
const { expectThrow, expectReject, runOneOutput, constF32 } = require('./helpers');

let context;
beforeAll(async () => {
  context = await ml.createContext();
});
afterAll(() => context.destroy());

const input = (dataType, shape, data) => ({ x: { dataType, shape, data } });
const builder = () => new MLGraphBuilder(context);

describe('semantics', () => {
  test('integer div truncates toward zero (#909)', async () => {
    for (const [dataType, T] of [
      ['int32', Int32Array],
      ['int8', Int8Array],
    ]) {
      const r = await runOneOutput(
        context,
        { a: { dataType, shape: [4], data: T.from([-7, 7, -7, 7]) }, b: { dataType, shape: [4], data: T.from([2, -2, -2, 2]) } },
        (b, o) => b.div(o.a, o.b),
      );
      expect(r.data).toEqual([-3, -3, 3, 3]);
    }
    const r64 = await runOneOutput(
      context,
      {
        a: { dataType: 'int64', shape: [2], data: BigInt64Array.from([-7n, -(2n ** 62n) - 1n]) },
        b: { dataType: 'int64', shape: [2], data: BigInt64Array.from([2n, 2n]) },
      },
      (b, o) => b.div(o.a, o.b),
    );
    expect(r64.data).toEqual([-3n, -(2n ** 61n)]);
  });

  test('maxPool2d takes any data type and keeps it (#910 tables)', async () => {
    const data = [1, -5, 3, 2, 9, -1, 4, 0, -2, 7, 5, 6, 3, 8, -4, 1];
    const want = [9, 4, 8, 6];
    for (const [dataType, T] of [
      ['int32', Int32Array],
      ['int8', Int8Array],
    ]) {
      const r = await runOneOutput(context, input(dataType, [1, 1, 4, 4], T.from(data)), (b, o) =>
        b.maxPool2d(o.x, { windowDimensions: [2, 2], strides: [2, 2] }),
      );
      expect(r.dataType).toBe(dataType);
      expect(r.data).toEqual(want);
    }
    const u8 = data.map((v) => v + 5);
    const r = await runOneOutput(context, input('uint8', [1, 1, 4, 4], Uint8Array.from(u8)), (b, o) =>
      b.maxPool2d(o.x, { windowDimensions: [2, 2], strides: [2, 2] }),
    );
    expect(r.data).toEqual(want.map((v) => v + 5));
    // 64-bit values beyond 2^53 compare exactly, in the nhwc layout too.
    const big = 2n ** 60n;
    const r64 = await runOneOutput(
      context,
      input('int64', [1, 2, 2, 1], BigInt64Array.from([big, big + 1n, -big, big - 1n])),
      (b, o) => b.maxPool2d(o.x, { windowDimensions: [2, 2], layout: 'nhwc' }),
    );
    expect(r64.data).toEqual([big + 1n]);
  });

  test('resample2d takes int8 and uint8 (#891)', async () => {
    const near = await runOneOutput(context, input('int8', [1, 1, 1, 2], Int8Array.from([-3, 5])), (b, o) =>
      b.resample2d(o.x, { sizes: [1, 4] }),
    );
    expect(near.dataType).toBe('int8');
    expect(near.data).toEqual([-3, -3, 5, 5]);
    // Linear: interpolated in between, rounded to the nearest integer.
    const lin = await runOneOutput(context, input('uint8', [1, 1, 1, 2], Uint8Array.from([0, 200])), (b, o) =>
      b.resample2d(o.x, { sizes: [1, 4], mode: 'linear' }),
    );
    expect(lin.dataType).toBe('uint8');
    expect(lin.data).toEqual([0, 50, 150, 200]);
    const b = builder();
    expectThrow(() => b.resample2d(b.input('x', { dataType: 'int32', shape: [1, 1, 2, 2] })), 'TypeError');
  });

  test('int64 for abs, neg, sign, relu and prelu (#848)', async () => {
    const big = 2n ** 55n + 1n;
    const data = BigInt64Array.from([-big, 0n, big]);
    const x = input('int64', [3], data);
    expect((await runOneOutput(context, x, (b, o) => b.abs(o.x))).data).toEqual([big, 0n, big]);
    expect((await runOneOutput(context, x, (b, o) => b.neg(o.x))).data).toEqual([big, 0n, -big]);
    expect((await runOneOutput(context, x, (b, o) => b.sign(o.x))).data).toEqual([-1n, 0n, 1n]);
    expect((await runOneOutput(context, x, (b, o) => b.relu(o.x))).data).toEqual([0n, 0n, big]);
    const p = await runOneOutput(context, x, (b, o) =>
      b.prelu(o.x, b.constant({ dataType: 'int64', shape: [1] }, BigInt64Array.from([2n]))),
    );
    expect(p.data).toEqual([-2n * big, 0n, big]);
  });

  test('reduceSum, reduceL1, reduceProduct and reduceSumSquare take 64-bit integers, exactly', async () => {
    const big = 2n ** 60n;
    const x = input('int64', [3], BigInt64Array.from([big, -3n, 5n]));
    expect((await runOneOutput(context, x, (b, o) => b.reduceSum(o.x))).data).toEqual([big + 2n]);
    expect((await runOneOutput(context, x, (b, o) => b.reduceL1(o.x))).data).toEqual([big + 8n]);
    const small = input('int64', [3], BigInt64Array.from([2n ** 20n, -3n, 5n]));
    expect((await runOneOutput(context, small, (b, o) => b.reduceProduct(o.x))).data).toEqual([-15n * 2n ** 20n]);
    expect((await runOneOutput(context, small, (b, o) => b.reduceSumSquare(o.x))).data).toEqual([2n ** 40n + 34n]);
    const u = input('uint64', [2], BigUint64Array.from([2n ** 63n, 1n]));
    expect((await runOneOutput(context, u, (b, o) => b.reduceSum(o.x))).data).toEqual([2n ** 63n + 1n]);
  });

  test('cumulativeSum refuses 8-bit integers (#912) and sums 64-bit ones', async () => {
    const b = builder();
    for (const dataType of ['int8', 'uint8']) {
      expectThrow(() => b.cumulativeSum(b.input(`x${dataType}`, { dataType, shape: [3] }), 0), 'TypeError');
    }
    expect(b.cumulativeSum(b.input('i32', { dataType: 'int32', shape: [3] }), 0).dataType).toBe('int32');
    const r = await runOneOutput(context, input('int64', [3], BigInt64Array.from([2n ** 60n, 1n, 2n])), (b, o) =>
      b.cumulativeSum(o.x, 0),
    );
    expect(r.data).toEqual([2n ** 60n, 2n ** 60n + 1n, 2n ** 60n + 3n]);
  });

  test('comparisons and logical operators output uint8 0 or 1; logical inputs are uint8 (#866)', async () => {
    const r = await runOneOutput(
      context,
      { a: { dataType: 'float32', shape: [3], data: Float32Array.from([1, NaN, 3]) } },
      (b, o) => b.greaterOrEqual(o.a, constF32(b, [3], [1, NaN, 4])),
    );
    expect(r.dataType).toBe('uint8');
    expect(r.data).toEqual([1, 0, 0]);
    const n = await runOneOutput(context, input('uint8', [3], Uint8Array.from([0, 1, 200])), (b, o) => b.logicalNot(o.x));
    expect(n.data).toEqual([1, 0, 0]);
    const b = builder();
    const f = b.input('x', { dataType: 'float32', shape: [2] });
    expectThrow(() => b.logicalAnd(f, f), 'TypeError');
    expectThrow(() => b.logicalNot(f), 'TypeError');
  });

  test('isNaN and isInfinite give uint8; roundEven rounds half to even', async () => {
    const x = input('float32', [5], Float32Array.from([NaN, Infinity, -Infinity, 2.5, -0.5]));
    expect((await runOneOutput(context, x, (b, o) => b.isNaN(o.x))).data).toEqual([1, 0, 0, 0, 0]);
    const inf = await runOneOutput(context, x, (b, o) => b.isInfinite(o.x));
    expect(inf.dataType).toBe('uint8');
    expect(inf.data).toEqual([0, 1, 1, 0, 0]);
    const r = await runOneOutput(context, input('float32', [4], Float32Array.from([0.5, 1.5, 2.5, -2.5])), (b, o) =>
      b.roundEven(o.x),
    );
    expect(r.data.map((v) => v + 0)).toEqual([0, 2, 2, -2]);
    const b = builder();
    expectThrow(() => b.isNaN(b.input('x', { dataType: 'int32', shape: [1] })), 'TypeError');
  });

  test('lstm and gru keep a batch dimension of size 1 (#913)', () => {
    const b = builder();
    const f = (shape) => b.input(`i${shape.join('x')}${Math.random()}`, { dataType: 'float32', shape });
    const [h, c, seq] = b.lstm(f([2, 1, 3]), f([1, 16, 3]), f([1, 16, 4]), 2, 4, { returnSequence: true });
    expect(Array.from(h.shape)).toEqual([1, 1, 4]);
    expect(Array.from(c.shape)).toEqual([1, 1, 4]);
    expect(Array.from(seq.shape)).toEqual([2, 1, 1, 4]);
    const [gh, gseq] = b.gru(f([2, 1, 3]), f([1, 12, 3]), f([1, 12, 4]), 2, 4, { returnSequence: true });
    expect(Array.from(gh.shape)).toEqual([1, 1, 4]);
    expect(Array.from(gseq.shape)).toEqual([2, 1, 1, 4]);
  });
});

describe('validation', () => {
  test('operators that take one axis need rank 1 or more (#882)', () => {
    const b = builder();
    const s = b.input('s', { dataType: 'float32', shape: [] });
    const i = b.constant({ dataType: 'int32', shape: [] }, Int32Array.from([0]));
    expectThrow(() => b.gather(s, i), 'TypeError');
    expectThrow(() => b.batchNormalization(s, constF32(b, [1], [0]), constF32(b, [1], [1]), { axis: 0 }), 'TypeError');
    expectThrow(() => b.softmax(s, 0), 'TypeError');
    expectThrow(() => b.argMax(s, 0), 'TypeError');
    expectThrow(() => b.cumulativeSum(s, 0), 'TypeError');
    expectThrow(() => b.concat([s, s], 0), 'TypeError');
    expectThrow(() => b.split(s, 1), 'TypeError');
    // Operators that take a list of axes still take scalars (an empty list).
    expect(Array.from(b.reduceSum(s, { axes: [] }).shape)).toEqual([]);
  });

  test("conv2d's output channels must be a multiple of groups (#925)", () => {
    const b = builder();
    const x = b.input('x', { dataType: 'float32', shape: [1, 4, 3, 3] });
    // 3 output channels, 2 groups of 2 input channels each.
    const w = b.input('w', { dataType: 'float32', shape: [3, 2, 1, 1] });
    expectThrow(() => b.conv2d(x, w, { groups: 2 }), 'TypeError');
    const ok = b.conv2d(x, b.input('w2', { dataType: 'float32', shape: [4, 2, 1, 1] }), { groups: 2 });
    expect(Array.from(ok.shape)).toEqual([1, 4, 3, 3]);
  });

  test('concat takes at most 8192 inputs and split makes at most 8192 outputs (#933)', () => {
    const b = builder();
    const x = b.input('x', { dataType: 'float32', shape: [1] });
    expectThrow(() => b.concat(new Array(8193).fill(x), 0), 'TypeError');
    expect(Array.from(b.concat(new Array(8192).fill(x), 0).shape)).toEqual([8192]);
    const y = b.input('y', { dataType: 'float32', shape: [8193] });
    expectThrow(() => b.split(y, 8193), 'TypeError');
    expectThrow(() => b.split(y, new Array(8193).fill(1)), 'TypeError');
    const z = b.input('z', { dataType: 'float32', shape: [8192] });
    expect(b.split(z, 8192)).toHaveLength(8192);
  });

  test('quantize/dequantize: a constant scale must be positive, and the types must agree (#906, #922)', () => {
    const b = builder();
    const x = b.input('x', { dataType: 'float32', shape: [2] });
    const q = b.input('q', { dataType: 'uint8', shape: [2] });
    const zp = b.constant({ dataType: 'uint8', shape: [2] }, Uint8Array.from([0, 0]));
    for (const bad of [[1, 0], [1, -2], [NaN, 1]]) {
      const scale = constF32(b, [2], bad);
      expectThrow(() => b.quantizeLinear(x, scale, zp), 'TypeError', 'scale');
      expectThrow(() => b.dequantizeLinear(q, scale, zp), 'TypeError', 'scale');
    }
    const scale = constF32(b, [2], [0.5, 2]);
    expect(b.quantizeLinear(x, scale, zp).dataType).toBe('uint8');
    expect(b.dequantizeLinear(q, scale, zp).dataType).toBe('float32');
    // A scale fed at dispatch cannot be checked at build.
    expect(b.dequantizeLinear(q, b.input('s', { dataType: 'float32', shape: [2] }), zp).dataType).toBe('float32');
    // dequantizeLinear: zeroPoint has the input's type; quantizeLinear:
    // scale has the input's type.
    const zp8 = b.constant({ dataType: 'int8', shape: [2] }, Int8Array.from([0, 0]));
    expectThrow(() => b.dequantizeLinear(q, scale, zp8), 'TypeError');
    const scale16 = b.constant({ dataType: 'float16', shape: [2] }, Uint16Array.from([0x3c00, 0x3c00]));
    expectThrow(() => b.quantizeLinear(x, scale16, zp), 'TypeError');
  });

  test('a tensor holds at most 2^31 - 1 elements (#926)', async () => {
    const b = builder();
    expectThrow(() => b.input('x', { dataType: 'uint8', shape: [65536, 32768] }), 'TypeError');
    expect(Array.from(b.input('y', { dataType: 'uint8', shape: [65535, 32768] }).shape)).toEqual([65535, 32768]);
    await expectReject(context.createTensor({ dataType: 'uint8', shape: [65536, 32768] }), 'TypeError');
  });

  test('pool2d: outputShapeRounding replaces roundingType; both are accepted, the new name wins (#770)', () => {
    const b = builder();
    const x = b.input('x', { dataType: 'float32', shape: [1, 1, 5, 5] });
    const pool = (o) => Array.from(b.averagePool2d(x, { windowDimensions: [2, 2], strides: [2, 2], ...o }).shape);
    expect(pool({})).toEqual([1, 1, 2, 2]);
    expect(pool({ outputShapeRounding: 'ceil' })).toEqual([1, 1, 3, 3]);
    expect(pool({ roundingType: 'ceil' })).toEqual([1, 1, 3, 3]);
    expect(pool({ roundingType: 'ceil', outputShapeRounding: 'floor' })).toEqual([1, 1, 2, 2]);
    expect(pool({ roundingType: 'floor', outputShapeRounding: 'ceil' })).toEqual([1, 1, 3, 3]);
    expectThrow(() => pool({ outputShapeRounding: 'round' }), 'TypeError');
  });

  test('pad: no "symmetric" mode (#843); reflection mirrors at most size - 1 elements', () => {
    const b = builder();
    const x = b.input('x', { dataType: 'float32', shape: [3] });
    expectThrow(() => b.pad(x, [1], [1], { mode: 'symmetric' }), 'TypeError');
    expect(Array.from(b.pad(x, [2], [2], { mode: 'reflection' }).shape)).toEqual([7]);
    expectThrow(() => b.pad(x, [3], [0], { mode: 'reflection' }), 'TypeError');
    expectThrow(() => b.pad(x, [0], [3], { mode: 'reflection' }), 'TypeError');
  });
});

describe('context and constant tensors', () => {
  test('createContext: powerPreference and accelerated are read; deviceType is an extension', async () => {
    // Absent `accelerated` (and `accelerated: false`) give the CPU backend:
    // a server does not take a GPU it was not asked for (docs/spec.md).
    for (const opts of [undefined, {}, { accelerated: false }, { powerPreference: 'low-power' }]) {
      const c = await ml.createContext(opts);
      expect(c.accelerated).toBe(false);
      c.destroy();
    }
    // Members that are present but undefined are absent (onnxruntime-web sends them).
    const c = await ml.createContext({ deviceType: undefined, powerPreference: undefined, accelerated: undefined });
    expect(c.accelerated).toBe(false);
    c.destroy();
    await expectReject(ml.createContext({ powerPreference: 'fast' }), 'TypeError');
    await expectReject(ml.createContext({ deviceType: 'tpu' }), 'TypeError');
  });

  test('createConstantTensor makes a constant tensor, neither readable nor writable', async () => {
    const t = await context.createConstantTensor({ dataType: 'float32', shape: [2] }, Float32Array.from([1, 2]));
    expect(t.constant).toBe(true);
    expect(t.readable).toBe(false);
    expect(t.writable).toBe(false);
    await expectReject(context.readTensor(t), 'TypeError');
    expectThrow(() => context.writeTensor(t, Float32Array.from([3, 4])), 'TypeError');
    const plain = await context.createTensor({ dataType: 'float32', shape: [2], readable: true });
    expect(plain.constant).toBe(false);
    // constant(tensor) takes constant tensors only, of this context, alive.
    const b = builder();
    expectThrow(() => b.constant(plain), 'TypeError');
    const other = await ml.createContext();
    expectThrow(() => new MLGraphBuilder(other).constant(t), 'TypeError');
    other.destroy();
    const k = b.constant(t);
    const graph = await b.build({ y: b.add(k, k) });
    // A constant tensor is never a dispatch input or output.
    expectThrow(() => context.dispatch(graph, {}, { y: t }), 'TypeError');
    context.dispatch(graph, {}, { y: plain });
    expect(Array.from(new Float32Array(await context.readTensor(plain)))).toEqual([2, 4]);
    const t2 = await context.createConstantTensor({ dataType: 'float32', shape: [2] }, Float32Array.from([1, 2]));
    t2.destroy();
    expectThrow(() => builder().constant(t2), 'TypeError');
  });
});
