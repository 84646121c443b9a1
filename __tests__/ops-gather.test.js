'use strict';
// gather family: gatherND and scatterND (no WPT vector files) with values
// worked out by hand, and out-of-range / negative indices for all five
// operators.
//
// The rule for index values (spec notes on each operator: indices are kept
// in the allowed range [-N, N) of their dimension, negative ones count from
// the end): an index i into a dimension of size N is first clamped to
// [-N, N-1], then i < 0 becomes i + N. So N or more selects the last
// element, below -N the first. Scatter with duplicate indices is
// deterministic here: updates are applied in row-major order and the last
// one wins (the spec leaves this unspecified).

const { ml, MLGraphBuilder } = require('..');
const { expectThrow, run, f32, cpuContext, iota } = require('./helpers');

let context;
beforeAll(async () => {
  context = await cpuContext();
});
afterAll(() => {
  context.destroy();
});

const INT_ARRAY = { int32: Int32Array, uint32: Uint32Array, int64: BigInt64Array };

/** An index constant of `dataType` (int64 values may be numbers or BigInts). */
function indices(b, dataType, shape, values) {
  const A = INT_ARRAY[dataType];
  const data = dataType === 'int64' ? values.map((v) => BigInt(v)) : values;
  return b.constant({ dataType, shape }, A.from(data));
}

/** Runs `op(x, indices[, updates], options)` on a float32 input `x`. */
async function runOp(op, xShape, xData, idx, updates, options) {
  const inputs = { x: f32(xShape, xData) };
  if (updates) inputs.u = f32(updates.shape, updates.data);
  const { results, outputs } = await run(context, inputs, (b, { x, u }) => {
    const i = indices(b, idx.dataType, idx.shape, idx.data);
    const args = u ? [x, i, u] : [x, i];
    if (options) args.push(options);
    return { out: b[op](...args) };
  });
  return { data: Array.from(results.out), shape: outputs.out.shape };
}

describe('gatherND', () => {
  // input [[0, 1], [2, 3]]
  const x22 = [0, 1, 2, 3];
  // input [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
  const x222 = iota(8);

  test('full coordinates pick single elements', async () => {
    // [0,0] -> 0, [1,1] -> 3, [1,0] -> 2; output shape = indices[..-1] = [3].
    const r = await runOp('gatherND', [2, 2], x22, {
      dataType: 'uint32', shape: [3, 2], data: [0, 0, 1, 1, 1, 0],
    });
    expect(r.shape).toEqual([3]);
    expect(r.data).toEqual([0, 3, 2]);
  });

  test('partial coordinates pick rows', async () => {
    // [1] -> row [2, 3], [0] -> row [0, 1]; shape [2] ++ input[1..] = [2, 2].
    const r = await runOp('gatherND', [2, 2], x22, {
      dataType: 'int32', shape: [2, 1], data: [1, 0],
    });
    expect(r.shape).toEqual([2, 2]);
    expect(r.data).toEqual([2, 3, 0, 1]);
  });

  test('2-component coordinates into a 3-D input pick rows', async () => {
    // [0,1,*] -> [2, 3]; [1,0,*] -> [4, 5].
    const r = await runOp('gatherND', [2, 2, 2], x222, {
      dataType: 'int64', shape: [2, 2], data: [0, 1, 1, 0],
    });
    expect(r.shape).toEqual([2, 2]);
    expect(r.data).toEqual([2, 3, 4, 5]);
  });

  test('1-component coordinates pick blocks; 3-component pick elements', async () => {
    // [1] -> [4,5,6,7], [0] -> [0,1,2,3], [1] -> [4,5,6,7]; shape [3,2,2].
    let r = await runOp('gatherND', [2, 2, 2], x222, {
      dataType: 'uint32', shape: [3, 1], data: [1, 0, 1],
    });
    expect(r.shape).toEqual([3, 2, 2]);
    expect(r.data).toEqual([4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7]);
    // Flat offset of [a,b,c] is 4a + 2b + c: [0,0,1]=1 [0,1,0]=2 [1,0,0]=4
    // [1,1,0]=6 [1,1,1]=7.
    r = await runOp('gatherND', [2, 2, 2], x222, {
      dataType: 'uint32', shape: [5, 3], data: [0, 0, 1, 0, 1, 0, 1, 0, 0, 1, 1, 0, 1, 1, 1],
    });
    expect(r.shape).toEqual([5]);
    expect(r.data).toEqual([1, 2, 4, 6, 7]);
  });

  test('a single full coordinate gives a scalar', async () => {
    // indices shape [2]: one coordinate [1, 0] -> 2; output shape [].
    const r = await runOp('gatherND', [2, 2], x22, {
      dataType: 'int32', shape: [2], data: [1, 0],
    });
    expect(r.shape).toEqual([]);
    expect(r.data).toEqual([2]);
  });

  test('negative and out-of-range components are clamped per dimension', async () => {
    // Each dimension has N = 2, allowed [-2, 1]:
    //   [-1, -2] -> [1, 0] -> 2
    //   [ 5, -9] -> [1, -2] -> [1, 0] -> 2
    //   [-3,  1] -> [-2, 1] -> [0, 1] -> 1
    //   [i64 min, i64 max] -> [-2, 1] -> [0, 1] -> 1
    const r = await runOp('gatherND', [2, 2], x22, {
      dataType: 'int64',
      shape: [4, 2],
      data: [-1, -2, 5, -9, -3, 1, -(2n ** 63n), 2n ** 63n - 1n],
    });
    expect(r.data).toEqual([2, 2, 1, 1]);
    // uint32 4294967295 is a large positive index: clamped to 1 -> row [2, 3].
    const r2 = await runOp('gatherND', [2, 2], x22, {
      dataType: 'uint32', shape: [1, 1], data: [4294967295],
    });
    expect(r2.data).toEqual([2, 3]);
  });

  test('int8 and float16 inputs move unchanged', async () => {
    const { results } = await run(
      context,
      {
        a: { dataType: 'int8', shape: [3], data: [-128, 5, 127] },
        h: { dataType: 'float16', shape: [2], data: [0x3c00, 0xfc00] },
      },
      (b, { a, h }) => ({
        // [[2], [-3]] -> [127, -128]
        oa: b.gatherND(a, indices(b, 'int32', [2, 1], [2, -3])),
        // [[1]] -> 0xfc00 (-Infinity bits)
        oh: b.gatherND(h, indices(b, 'int32', [1, 1], [1])),
      }),
    );
    expect(Array.from(results.oa)).toEqual([127, -128]);
    expect(Array.from(results.oh)).toEqual([0xfc00]);
  });
});

describe('scatterND', () => {
  test('single elements of a 1-D input', async () => {
    // [4] <- -1, [3] <- -2, [1] <- -3, [7] <- -4 over [0..7].
    const r = await runOp('scatterND', [8], iota(8), {
      dataType: 'uint32', shape: [4, 1], data: [4, 3, 1, 7],
    }, { shape: [4], data: [-1, -2, -3, -4] });
    expect(r.shape).toEqual([8]);
    expect(r.data).toEqual([0, -3, 2, -2, -1, 5, 6, -4]);
  });

  test('full coordinates into a 2-D input', async () => {
    // [0,0] <- -1, [1,1] <- -2 over [[0,1],[2,3]].
    const r = await runOp('scatterND', [2, 2], [0, 1, 2, 3], {
      dataType: 'int32', shape: [2, 2], data: [0, 0, 1, 1],
    }, { shape: [2], data: [-1, -2] });
    expect(r.data).toEqual([-1, 1, 2, -2]);
  });

  test('rows of a 2-D input and of a 3-D input', async () => {
    // [2,*] <- [-1,-2], [0,*] <- [-3,-4] over [[0,1],[2,3],[4,5]].
    let r = await runOp('scatterND', [3, 2], iota(6), {
      dataType: 'int64', shape: [2, 1], data: [2, 0],
    }, { shape: [2, 2], data: [-1, -2, -3, -4] });
    expect(r.shape).toEqual([3, 2]);
    expect(r.data).toEqual([-3, -4, 2, 3, -1, -2]);
    // [0,1,*] <- [-1,-2] (offsets 2,3), [1,0,*] <- [-3,-4] (offsets 4,5).
    r = await runOp('scatterND', [2, 2, 2], iota(8), {
      dataType: 'int32', shape: [2, 2], data: [0, 1, 1, 0],
    }, { shape: [2, 2], data: [-1, -2, -3, -4] });
    expect(r.data).toEqual([0, 1, -1, -2, -3, -4, 6, 7]);
  });

  test('a single full coordinate takes a scalar update', async () => {
    // indices shape [2] = one coordinate [1, 0]; updates shape [].
    const r = await runOp('scatterND', [2, 2], [0, 1, 2, 3], {
      dataType: 'int32', shape: [2], data: [1, 0],
    }, { shape: [], data: [9] });
    expect(r.data).toEqual([0, 1, 9, 3]);
  });

  test('negative and out-of-range indices are clamped; the last duplicate wins', async () => {
    // N = 8, allowed [-8, 7]:
    //   -1 -> 7 <- 10;  100 -> 7 <- 20 (overwrites 10)
    //   -100 -> -8 -> 0 <- 30;  -8 -> 0 <- 40 (overwrites 30)
    const r = await runOp('scatterND', [8], iota(8), {
      dataType: 'int32', shape: [4, 1], data: [-1, 100, -100, -8],
    }, { shape: [4], data: [10, 20, 30, 40] });
    expect(r.data).toEqual([40, 1, 2, 3, 4, 5, 6, 20]);
    // uint32 4294967295 -> 7; int64 extremes: min -> 0, max -> 7.
    const r2 = await runOp('scatterND', [8], iota(8), {
      dataType: 'uint32', shape: [1, 1], data: [4294967295],
    }, { shape: [1], data: [-5] });
    expect(r2.data).toEqual([0, 1, 2, 3, 4, 5, 6, -5]);
    const r3 = await runOp('scatterND', [8], iota(8), {
      dataType: 'int64', shape: [2, 1], data: [-(2n ** 63n), 2n ** 63n - 1n],
    }, { shape: [2], data: [-1, -2] });
    expect(r3.data).toEqual([-1, 1, 2, 3, 4, 5, 6, -2]);
  });
});

describe('out-of-range and negative indices of gather, gatherElements, scatterElements', () => {
  // input [[0,1,2],[10,11,12],[20,21,22],[30,31,32]]
  const x43 = [0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32];

  test('gather clamps along the axis', async () => {
    // axis 0, N = 4, allowed [-4, 3]: -1 -> 3, 4 -> 3, -5 -> -4 -> 0,
    // i64 min -> 0, i64 max -> 3: rows 3, 3, 0, 0, 3.
    const r = await runOp('gather', [4, 3], x43, {
      dataType: 'int64', shape: [5], data: [-1, 4, -5, -(2n ** 63n), 2n ** 63n - 1n],
    });
    expect(r.shape).toEqual([5, 3]);
    expect(r.data).toEqual([30, 31, 32, 30, 31, 32, 0, 1, 2, 0, 1, 2, 30, 31, 32]);
    // axis 1, N = 3: uint32 4294967295 is positive and large -> 2, so
    // column 2 of each row; output shape [4] ++ [1] = [4, 1].
    const r2 = await runOp('gather', [4, 3], x43, {
      dataType: 'uint32', shape: [1], data: [4294967295],
    }, null, { axis: 1 });
    expect(r2.shape).toEqual([4, 1]);
    expect(r2.data).toEqual([2, 12, 22, 32]);
    // Scalar index -3 -> 0 along axis 1 drops the axis: shape [4], column 0.
    const r3 = await runOp('gather', [4, 3], x43, {
      dataType: 'int32', shape: [], data: [-3],
    }, null, { axis: 1 });
    expect(r3.shape).toEqual([4]);
    expect(r3.data).toEqual([0, 10, 20, 30]);
  });

  test('gatherElements clamps each index in its own column', async () => {
    // axis 0, N = 4; indices [[-1, 7, -9]]:
    //   col 0: -1 -> 3 -> 30; col 1: 7 -> 3 -> 31; col 2: -9 -> -4 -> 0 -> 2.
    const r = await runOp('gatherElements', [4, 3], x43, {
      dataType: 'int32', shape: [1, 3], data: [-1, 7, -9],
    });
    expect(r.shape).toEqual([1, 3]);
    expect(r.data).toEqual([30, 31, 2]);
    // axis 1, N = 3, indices [[i64 max], [i64 min], [-2], [1]]:
    //   row 0 -> col 2 = 2; row 1 -> col 0 = 10; row 2 -> col 1 = 21;
    //   row 3 -> col 1 = 31.
    const r2 = await runOp('gatherElements', [4, 3], x43, {
      dataType: 'int64', shape: [4, 1], data: [2n ** 63n - 1n, -(2n ** 63n), -2, 1],
    }, null, { axis: 1 });
    expect(r2.data).toEqual([2, 10, 21, 31]);
  });

  test('scatterElements clamps, and the last duplicate wins', async () => {
    // axis 0, N = 4, over 0..11 as [4, 3]; indices [[-1, 7, -9]],
    // updates [[-1, -2, -3]]: [3][0] <- -1, [3][1] <- -2, [0][2] <- -3.
    const r = await runOp('scatterElements', [4, 3], iota(12), {
      dataType: 'int32', shape: [1, 3], data: [-1, 7, -9],
    }, { shape: [1, 3], data: [-1, -2, -3] });
    expect(r.shape).toEqual([4, 3]);
    expect(r.data).toEqual([0, 1, -3, 3, 4, 5, 6, 7, 8, -1, -2, 11]);
    // axis 1, N = 4, input [[0, 0, 0, 0]], indices [[0, -4, 9, i64 min]],
    // updates [[5, 6, 7, 8]], applied in order:
    //   0 -> 0 <- 5; -4 -> 0 <- 6 (wins over 5); 9 -> 3 <- 7;
    //   i64 min -> 0 <- 8 (wins over 6).
    const r2 = await runOp('scatterElements', [1, 4], [0, 0, 0, 0], {
      dataType: 'int64', shape: [1, 4], data: [0, -4, 9, -(2n ** 63n)],
    }, { shape: [1, 4], data: [5, 6, 7, 8] }, { axis: 1 });
    expect(r2.data).toEqual([8, 0, 0, 7]);
  });
});

describe('validation', () => {
  function builderWith(fn) {
    const b = new MLGraphBuilder(context);
    return fn(b);
  }

  test('gatherND / scatterND refuse coordinates longer than the input rank', () => {
    builderWith((b) => {
      const x = b.input('x', { dataType: 'float32', shape: [2, 2] });
      const i = b.input('i', { dataType: 'int32', shape: [1, 3] });
      const u = b.input('u', { dataType: 'float32', shape: [1] });
      expectThrow(() => b.gatherND(x, i), 'TypeError', 'gatherND');
      expectThrow(() => b.scatterND(x, i, u), 'TypeError', 'scatterND');
    });
  });

  test('index types, update types and shapes are checked', () => {
    builderWith((b) => {
      const x = b.input('x', { dataType: 'float32', shape: [2, 2] });
      const fi = b.input('fi', { dataType: 'float32', shape: [1, 2] });
      const i8 = b.input('i8', { dataType: 'int8', shape: [1, 2] });
      const i = b.input('i', { dataType: 'int64', shape: [1, 1] });
      const uBad = b.input('ub', { dataType: 'float32', shape: [1, 3] });
      const uType = b.input('ut', { dataType: 'float16', shape: [1, 2] });
      const u = b.input('u', { dataType: 'float32', shape: [1, 2] });
      expectThrow(() => b.gatherND(x, fi), 'TypeError');
      expectThrow(() => b.gatherND(x, i8), 'TypeError');
      expectThrow(() => b.scatterND(x, i, uBad), 'TypeError');
      expectThrow(() => b.scatterND(x, i, uType), 'TypeError');
      expect(b.scatterND(x, i, u).shape).toEqual([2, 2]);
      expect(b.gatherND(x, i).shape).toEqual([1, 2]);
      expectThrow(() => b.gather(x, i, { axis: 2 }), 'TypeError', 'axis');
      expectThrow(() => b.gatherElements(x, i, { axis: 1 }), 'TypeError');
      expectThrow(() => b.scatterElements(x, u, u), 'TypeError');
    });
  });

  test('opSupportLimits names the IDL operands', () => {
    const limits = context.opSupportLimits();
    for (const op of ['gather', 'gatherElements', 'gatherND']) {
      expect(Object.keys(limits[op]).sort()).toEqual(['indices', 'input', 'output']);
      expect([...limits[op].indices.dataTypes].sort()).toEqual(['int32', 'int64', 'uint32']);
    }
    for (const op of ['scatterElements', 'scatterND']) {
      expect(Object.keys(limits[op]).sort()).toEqual(['indices', 'input', 'output', 'updates']);
    }
  });

  test('ml is the module entry point', () => {
    expect(typeof ml.createContext).toBe('function');
  });
});
