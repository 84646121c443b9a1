'use strict';
// Edge cases of quantizeLinear / dequantizeLinear beyond the WPT vectors:
// ties to even, saturation, blockwise scales and validation.

const { expectThrow, expectClose, run, f32, constF32, cpuContext } = require('./helpers');
const { MLGraphBuilder } = require('..');

let context;
beforeAll(async () => {
  context = await cpuContext();
});
afterAll(() => {
  context.destroy();
});

test('quantizeLinear rounds half to even and saturates', async () => {
  // Scale 1, zero point 0: the ties [0.5, 1.5, 2.5, -0.5] round to the even
  // [0, 2, 2, 0]; 1000 and -1000 saturate to 127 and -128.
  const { results } = await run(context, { x: f32([6], [0.5, 1.5, 2.5, -0.5, 1000, -1000]) }, (b, { x }) => ({
    i8: b.quantizeLinear(x, constF32(b, [1], [1]), b.constant({ dataType: 'int8', shape: [1] }, Int8Array.from([0]))),
    // uint8 with zero point 100: [100, 102, 102, 100, 255, 0].
    u8: b.quantizeLinear(x, constF32(b, [1], [1]), b.constant({ dataType: 'uint8', shape: [1] }, Uint8Array.from([100]))),
  }));
  expect(Array.from(results.i8)).toEqual([0, 2, 2, 0, 127, -128]);
  expect(Array.from(results.u8)).toEqual([100, 102, 102, 100, 255, 0]);
});

test('blockwise scale and zero point', async () => {
  // x [2, 4], scale [1, 2] (blocks of 2 columns): [1, 10], zero point [0, 5] (int32).
  // columns 0-1: x / 1; columns 2-3: x / 10 + 5 -> row 0 [1, 2, 30/10+5=8, 40/10+5=9].
  const { results } = await run(context, { x: f32([2, 4], [1, 2, 30, 40, -1, -2, 25, 35]) }, (b, { x }) => ({
    q: b.quantizeLinear(x, constF32(b, [1, 2], [1, 10]),
      b.constant({ dataType: 'int32', shape: [1, 2] }, Int32Array.from([0, 5]))),
  }));
  // row 1: [-1, -2, 2.5 -> 2 (+5) = 7, 3.5 -> 4 (+5) = 9]
  expect(Array.from(results.q)).toEqual([1, 2, 8, 9, -1, -2, 7, 9]);
});

test('dequantizeLinear of uint32 with a float16 scale', async () => {
  // (x - 3) * 0.5 = [-1.5, 0, 2] -> float16 bits [0xBE00, 0, 0x4000].
  const { results, outputs } = await run(context, {
    x: { dataType: 'uint32', shape: [3], data: Uint32Array.from([0, 3, 7]) },
  }, (b, { x }) => ({
    y: b.dequantizeLinear(x, b.constant({ dataType: 'float16', shape: [1] }, Uint16Array.from([0x3800])),
      b.constant({ dataType: 'uint32', shape: [1] }, Uint32Array.from([3]))),
  }));
  expect(outputs.y.dataType).toBe('float16');
  expect(Array.from(results.y)).toEqual([0xbe00, 0, 0x4000]);
});

test('validation', () => {
  const b = new MLGraphBuilder(context);
  const x = b.input('x', { dataType: 'float32', shape: [6, 4] });
  const s = constF32(b, [2, 2], [1, 1, 1, 1]);
  const z = b.constant({ dataType: 'uint8', shape: [2, 2] }, new Uint8Array(4));
  const q = b.quantizeLinear(x, s, z);
  expect(q.dataType).toBe('uint8');
  expectThrow(() => b.quantizeLinear(x, constF32(b, [4, 2], Array(8).fill(1)),
    b.constant({ dataType: 'uint8', shape: [4, 2] }, new Uint8Array(8))), 'TypeError', 'blockwise');
  expectThrow(() => b.quantizeLinear(x, s, b.constant({ dataType: 'uint8', shape: [2] }, new Uint8Array(2))),
    'TypeError', 'same shape');
  expectThrow(() => b.quantizeLinear(x, s, b.constant({ dataType: 'int64', shape: [2, 2] }, new BigInt64Array(4))),
    'TypeError', 'zeroPoint');
  expectThrow(() => b.dequantizeLinear(x, s, z), 'TypeError', 'input');
  expectThrow(() => b.dequantizeLinear(q, s, b.constant({ dataType: 'int8', shape: [2, 2] }, new Int8Array(4))),
    'TypeError', 'zeroPoint');
  expectThrow(() => b.dequantizeLinear(q, constF32(b, [1, 2, 2], [1, 1, 1, 1]),
    b.constant({ dataType: 'uint8', shape: [1, 2, 2] }, new Uint8Array(4))), 'TypeError', 'rank');
  const limits = context.opSupportLimits();
  expect(Object.keys(limits.quantizeLinear).sort()).toEqual(['input', 'output', 'scale', 'zeroPoint']);
  expect(limits.dequantizeLinear.output.dataTypes.sort()).toEqual(['float16', 'float32']);
});
