'use strict';
// gruCell and lstmCell (no WPT vector file) with values worked out by hand,
// a bidirectional gru with values and shapes, a bidirectional lstm's shapes,
// validation errors and opSupportLimits keys. gru and lstm themselves are
// covered by the conformance vectors.

const { MLGraphBuilder } = require('..');
const { expectThrow, expectClose, run, f32, constF32, cpuContext } = require('./helpers');

let context;
beforeAll(async () => {
  context = await cpuContext();
});
afterAll(() => {
  context.destroy();
});

const sigmoid = (x) => 1 / (1 + Math.exp(-x));

describe('gruCell', () => {
  // hiddenSize 1, inputSize 1, batch 1; zrn rows: z, r, n.
  // W = [0, 0, 1], R = [0, 0, 0.5], bias = [0, 0, 0.5], recurrentBias =
  // [0, 0, 1], x = 1, h = 2.
  // z = sigmoid(0) = 0.5, r = sigmoid(0) = 0.5.
  function cell(resetAfter, dataType = 'float32') {
    const data = (a) => (dataType === 'float32' ? Float32Array.from(a) : f16(a));
    return run(
      context,
      {
        x: { dataType, shape: [1, 1], data: data([1]) },
        h: { dataType, shape: [1, 1], data: data([2]) },
      },
      (b, { x, h }) => {
        const c = (shape, a) => b.constant({ dataType, shape }, data(a));
        const out = b.gruCell(x, c([3, 1], [0, 0, 1]), c([3, 1], [0, 0, 0.5]), h, 1, {
          bias: c([3], [0, 0, 0.5]),
          recurrentBias: c([3], [0, 0, 1]),
          resetAfter,
        });
        return { out };
      },
    );
  }

  test('resetAfter true (default activations sigmoid, tanh)', async () => {
    // n = tanh(W_n x + b_n + r * (R_n h + rb_n)) = tanh(1 + 0.5 + 0.5 * (0.5 * 2 + 1))
    //   = tanh(2.5)
    // h' = z * h + (1 - z) * n = 0.5 * 2 + 0.5 * tanh(2.5) = 1.4933071490757153
    const { results, outputs } = await cell(true);
    expect(outputs.out).toEqual({ dataType: 'float32', shape: [1, 1] });
    expectClose(results.out, [1 + 0.5 * Math.tanh(2.5)], 1e-6);
    expectClose(results.out, [1.4933071490757153], 1e-6);
  });

  test('resetAfter false', async () => {
    // n = tanh(W_n x + b_n + rb_n + R_n (r * h)) = tanh(1 + 0.5 + 1 + 0.5 * (0.5 * 2))
    //   = tanh(3)
    // h' = 0.5 * 2 + 0.5 * tanh(3) = 1.4975273768433653
    const { results } = await cell(false);
    expectClose(results.out, [1 + 0.5 * Math.tanh(3)], 1e-6);
  });

  test('float16', async () => {
    // As resetAfter true: 1.4933 rounds to the float16 1.4931640625
    // (spacing 2^-10 in [1, 2)).
    const { results, outputs } = await cell(true, 'float16');
    expect(outputs.out.dataType).toBe('float16');
    // 1.4933071 / 2^-10 = 1529.15 -> 1529 * 2^-10 = 1.4931640625 (bits 0x3df9).
    expect(Array.from(results.out)).toEqual([0x3df9]);
    expect(Array.from(f16([1.4931640625]))).toEqual([0x3df9]);
  });

  test('rzn layout with relu activations', async () => {
    // rzn rows: r, z, n. W = [0.5, 0.25, 1], R = [0, 0, 0.5], x = 1, h = 2,
    // resetAfter false, activations relu/relu:
    // r = relu(0.5 * 1) = 0.5, z = relu(0.25 * 1) = 0.25
    // n = relu(1 * 1 + 0.5 * (r * h)) = relu(1 + 0.5) = 1.5
    // h' = 0.25 * 2 + 0.75 * 1.5 = 1.625
    const { results } = await run(
      context,
      { x: f32([1, 1], [1]), h: f32([1, 1], [2]) },
      (b, { x, h }) => ({
        out: b.gruCell(x, constF32(b, [3, 1], [0.5, 0.25, 1]), constF32(b, [3, 1], [0, 0, 0.5]), h, 1, {
          layout: 'rzn',
          resetAfter: false,
          activations: ['relu', 'relu'],
        }),
      }),
    );
    expect(Array.from(results.out)).toEqual([1.625]);
  });

  test('batch 2, hiddenSize 2', async () => {
    // Zero recurrent weights and biases, relu/relu, resetAfter true.
    // W (6 x 1): z rows [0, 0], r rows [1, 1], n rows [1, 2].
    // Row b of x: x_b; z = 0, so h' = n = relu([x_b, 2 x_b]).
    // x = [1, 3] -> h' = [[1, 2], [3, 6]] whatever h is.
    const { results } = await run(
      context,
      { x: f32([2, 1], [1, 3]), h: f32([2, 2], [9, 9, 9, 9]) },
      (b, { x, h }) => ({
        out: b.gruCell(x, constF32(b, [6, 1], [0, 0, 1, 1, 1, 2]), constF32(b, [6, 2], new Array(12).fill(0)), h, 2, {
          activations: ['relu', 'relu'],
        }),
      }),
    );
    expect(Array.from(results.out)).toEqual([1, 2, 3, 6]);
  });

  test('returns one operand', () => {
    const b = new MLGraphBuilder(context);
    const x = b.input('x', { dataType: 'float32', shape: [2, 3] });
    const h = b.input('h', { dataType: 'float32', shape: [2, 4] });
    const w = b.input('w', { dataType: 'float32', shape: [12, 3] });
    const r = b.input('r', { dataType: 'float32', shape: [12, 4] });
    const out = b.gruCell(x, w, r, h, 4);
    expect(Array.isArray(out)).toBe(false);
    expect(Array.from(out.shape)).toEqual([2, 4]);
  });
});

describe('lstmCell', () => {
  // hiddenSize 1, inputSize 1, batch 1, activations relu/relu/relu,
  // x = 1, h = 1, c = 2. Per gate (i, o, f, g):
  //   W = [1, 2, 0.5, 3], R = [0.5, 0, 0, 1], bias = [0, 0, 0.25, 0],
  //   peephole (i, o, f) = [0.5, 0.25, 0] (applied to the incoming c).
  // i = relu(1 + 0.5 * 1 + 0.5 * 2) = 2.5
  // o = relu(2 + 0 + 0.25 * 2) = 2.5
  // f = relu(0.5 + 0.25 + 0 * 2) = 0.75
  // g = relu(3 + 1 * 1) = 4
  // c' = f * c + i * g = 0.75 * 2 + 2.5 * 4 = 11.5
  // h' = o * relu(c') = 2.5 * 11.5 = 28.75
  const gates = { i: [1, 0.5, 0], o: [2, 0, 0], f: [0.5, 0, 0.25], g: [3, 1, 0] };
  async function cell(layout) {
    const order = layout === 'ifgo' ? ['i', 'f', 'g', 'o'] : ['i', 'o', 'f', 'g'];
    const col = (k) => order.map((gate) => gates[gate][k]);
    return run(
      context,
      { x: f32([1, 1], [1]), h: f32([1, 1], [1]), c: f32([1, 1], [2]) },
      (b, { x, h, c }) => {
        const [h1, c1] = b.lstmCell(x, constF32(b, [4, 1], col(0)), constF32(b, [4, 1], col(1)), h, c, 1, {
          bias: constF32(b, [4], col(2)),
          peepholeWeight: constF32(b, [3], [0.5, 0.25, 0]),
          activations: ['relu', 'relu', 'relu'],
          ...(layout ? { layout } : {}),
        });
        return { h1, c1 };
      },
    );
  }

  test('iofg (default layout), relu activations, peepholes', async () => {
    const { results, outputs } = await cell();
    expect(outputs.h1).toEqual({ dataType: 'float32', shape: [1, 1] });
    expect(outputs.c1).toEqual({ dataType: 'float32', shape: [1, 1] });
    expect(Array.from(results.h1)).toEqual([28.75]);
    expect(Array.from(results.c1)).toEqual([11.5]);
  });

  test('ifgo layout gives the same result with reordered rows', async () => {
    const { results } = await cell('ifgo');
    expect(Array.from(results.h1)).toEqual([28.75]);
    expect(Array.from(results.c1)).toEqual([11.5]);
  });

  test('default activations (sigmoid, tanh, tanh)', async () => {
    // All weights zero, c = 2, batch 2 with c = [2, -1]:
    // i = f = o = sigmoid(0) = 0.5, g = tanh(0) = 0
    // c' = 0.5 * c = [1, -0.5]; h' = 0.5 * tanh(c') = [0.5 tanh(1), 0.5 tanh(-0.5)]
    //    = [0.3807970779778823, -0.23105857863000487]
    const { results } = await run(
      context,
      { x: f32([2, 2], [1, 2, 3, 4]), h: f32([2, 1], [5, 6]), c: f32([2, 1], [2, -1]) },
      (b, { x, h, c }) => {
        const [h1, c1] = b.lstmCell(x, constF32(b, [4, 2], new Array(8).fill(0)), constF32(b, [4, 1], [0, 0, 0, 0]), h, c, 1);
        return { h1, c1 };
      },
    );
    expectClose(results.c1, [1, -0.5], 1e-7);
    expectClose(results.h1, [0.5 * Math.tanh(1), 0.5 * Math.tanh(-0.5)], 1e-6);
    expectClose(results.h1, [0.3807970779778823, -0.23105857863000487], 1e-6);
    expect(sigmoid(0)).toBe(0.5);
  });
});

describe('bidirectional networks', () => {
  test('gru direction both: values and shapes', async () => {
    // steps 2, batch 1, input 1, hidden 1, relu/relu, resetAfter false,
    // R = 0. Direction 0: W = [0, 0, 1] (z = 0, n = relu(x)) so h_t = x_t.
    // Direction 1: W = [0, 0, 1], bias = [0.5, 0, 0] so z = 0.5 and
    // h' = 0.5 h + 0.5 x, run from the last step.
    // x = [1, 4]:
    //   forward:  t0: 1, t1: 4 -> last 4
    //   backward: t1: 0.5 * 0 + 0.5 * 4 = 2, t0: 0.5 * 2 + 0.5 * 1 = 1.5 -> last 1.5
    // output0 [2, 1, 1] = [4, 1.5]
    // output1 [2, 2, 1, 1] = [t0 d0, t0 d1, t1 d0, t1 d1] = [1, 1.5, 4, 2]
    const { results, outputs } = await run(context, { x: f32([2, 1, 1], [1, 4]) }, (b, { x }) => {
      const [last, seq] = b.gru(
        x,
        constF32(b, [2, 3, 1], [0, 0, 1, 0, 0, 1]),
        constF32(b, [2, 3, 1], [0, 0, 0, 0, 0, 0]),
        2,
        1,
        {
          bias: constF32(b, [2, 3], [0, 0, 0, 0.5, 0, 0]),
          direction: 'both',
          returnSequence: true,
          resetAfter: false,
          activations: ['relu', 'relu'],
        },
      );
      return { last, seq };
    });
    expect(outputs.last.shape).toEqual([2, 1, 1]);
    expect(outputs.seq.shape).toEqual([2, 2, 1, 1]);
    expect(Array.from(results.last)).toEqual([4, 1.5]);
    expect(Array.from(results.seq)).toEqual([1, 1.5, 4, 2]);
  });

  // Constant weights are prepared once when the graph is built; weights
  // given as inputs are read at each dispatch. Both give the same bits,
  // in both directions, with sums long enough for the vector loops.
  test.each(['gru', 'lstm'])('%s: constant weights and weights as inputs agree bitwise', async (kind) => {
    const [steps, batch, input, hidden, gates] = [6, 2, 37, 45, kind === 'gru' ? 3 : 4];
    const values = (n, seed) => Float32Array.from({ length: n }, (_, i) => Math.sin(i * 0.61 + seed) * 0.3);
    const w = values(2 * gates * hidden * input, 1);
    const r = values(2 * gates * hidden * hidden, 2);
    const bias = values(2 * gates * hidden, 3);
    const x = values(steps * batch * input, 4);
    const wShape = [2, gates * hidden, input];
    const rShape = [2, gates * hidden, hidden];
    const net = (b, xs, ws, rs) => {
      const options = { bias: constF32(b, [2, gates * hidden], bias), direction: 'both', returnSequence: true };
      const outs = b[kind](xs, ws, rs, steps, hidden, options);
      return { last: outs[0], seq: outs[outs.length - 1] };
    };
    const asConstants = await run(context, { x: f32([steps, batch, input], x) }, (b, { x: xs }) =>
      net(b, xs, constF32(b, wShape, w), constF32(b, rShape, r)),
    );
    const asInputs = await run(
      context,
      { x: f32([steps, batch, input], x), w: f32(wShape, w), r: f32(rShape, r) },
      (b, { x: xs, w: ws, r: rs }) => net(b, xs, ws, rs),
    );
    expect(asConstants.results.seq.length).toBe(steps * 2 * batch * hidden);
    expect(Array.from(asConstants.results.seq)).toEqual(Array.from(asInputs.results.seq));
    expect(Array.from(asConstants.results.last)).toEqual(Array.from(asInputs.results.last));
    expect(asConstants.results.seq.some((v) => v !== 0)).toBe(true);
  });

  test('lstm direction both: shapes', () => {
    const b = new MLGraphBuilder(context);
    const x = b.input('x', { dataType: 'float32', shape: [5, 3, 4] });
    const w = b.input('w', { dataType: 'float32', shape: [2, 8, 4] });
    const r = b.input('r', { dataType: 'float32', shape: [2, 8, 2] });
    const outs = b.lstm(x, w, r, 5, 2, { direction: 'both', returnSequence: true });
    expect(outs.map((o) => Array.from(o.shape))).toEqual([
      [2, 3, 2],
      [2, 3, 2],
      [5, 2, 3, 2],
    ]);
    const two = b.lstm(x, w, r, 5, 2, { direction: 'both' });
    expect(two.length).toBe(2);
  });
});

describe('validation', () => {
  let b;
  let f;
  beforeEach(() => {
    b = new MLGraphBuilder(context);
    f = (name, shape, dataType = 'float32') => b.input(name, { dataType, shape });
  });

  test('gruCell: weight shape must be [3 * hiddenSize, inputSize]', () => {
    expectThrow(() => b.gruCell(f('x', [1, 2]), f('w', [6, 2]), f('r', [3, 1]), f('h', [1, 1]), 1), 'TypeError', 'weight');
  });

  test('gruCell: hiddenState shape and type', () => {
    expectThrow(() => b.gruCell(f('x', [1, 2]), f('w', [3, 2]), f('r', [3, 1]), f('h', [2, 1]), 1), 'TypeError', 'hiddenState');
    expectThrow(
      () => b.gruCell(f('x2', [1, 2]), f('w2', [3, 2]), f('r2', [3, 1]), f('h2', [1, 1], 'float16'), 1),
      'TypeError',
      'hiddenState',
    );
  });

  test('gruCell: activations must hold 2 valid functions', () => {
    const args = () => [f(`x${n}`, [1, 2]), f(`w${n}`, [3, 2]), f(`r${n}`, [3, 1]), f(`h${n}`, [1, 1]), 1];
    let n = 0;
    expectThrow(() => b.gruCell(...args(), { activations: ['relu'] }), 'TypeError', 'activations');
    n = 1;
    expectThrow(() => b.gruCell(...args(), { activations: ['relu', 'gelu'] }), 'TypeError', 'activations');
    n = 2;
    expectThrow(() => b.gruCell(...args(), { layout: 'iofg' }), 'TypeError', 'layout');
  });

  test('gruCell: integer input refused', () => {
    expectThrow(() => b.gruCell(f('x', [1, 1], 'int32'), f('w', [3, 1]), f('r', [3, 1]), f('h', [1, 1]), 1), 'TypeError', 'input');
  });

  test('lstmCell: cellState, bias and peepholeWeight shapes', () => {
    const base = (i) => [f(`x${i}`, [1, 2]), f(`w${i}`, [4, 2]), f(`r${i}`, [4, 1]), f(`h${i}`, [1, 1])];
    expectThrow(() => b.lstmCell(...base(0), f('c0', [1, 2]), 1), 'TypeError', 'cellState');
    expectThrow(() => b.lstmCell(...base(1), f('c1', [1, 1]), 1, { bias: f('b1', [3]) }), 'TypeError', 'bias');
    expectThrow(
      () => b.lstmCell(...base(2), f('c2', [1, 1]), 1, { peepholeWeight: f('p2', [4]) }),
      'TypeError',
      'peepholeWeight',
    );
    expectThrow(
      () => b.lstmCell(...base(3), f('c3', [1, 1]), 1, { activations: ['relu', 'relu'] }),
      'TypeError',
      'activations',
    );
  });

  test('gru: steps must match the input and weights must match the direction', () => {
    expectThrow(() => b.gru(f('x', [2, 1, 1]), f('w', [1, 3, 1]), f('r', [1, 3, 1]), 3, 1), 'TypeError', 'steps');
    expectThrow(
      () => b.gru(f('x1', [2, 1, 1]), f('w1', [1, 3, 1]), f('r1', [1, 3, 1]), 2, 1, { direction: 'both' }),
      'TypeError',
      'weight',
    );
  });

  test('lstm: steps 0 and initialCellState shape', () => {
    expectThrow(() => b.lstm(f('x', [1, 1, 1]), f('w', [1, 4, 1]), f('r', [1, 4, 1]), 0, 1), 'TypeError', 'steps');
    expectThrow(
      () => b.lstm(f('x1', [1, 1, 1]), f('w1', [1, 4, 1]), f('r1', [1, 4, 1]), 1, 1, { initialCellState: f('c', [1, 2, 1]) }),
      'TypeError',
      'initialCellState',
    );
  });
});

describe('opSupportLimits', () => {
  test('names the operands and outputs of each operator', () => {
    const l = context.opSupportLimits();
    for (const k of ['input', 'weight', 'recurrentWeight', 'bias', 'recurrentBias', 'initialHiddenState', 'output0', 'output1']) {
      expect(l.gru[k].dataTypes).toEqual(expect.arrayContaining(['float32', 'float16']));
    }
    for (const k of ['input', 'weight', 'recurrentWeight', 'hiddenState', 'bias', 'recurrentBias', 'output']) {
      expect(l.gruCell[k].dataTypes).toEqual(expect.arrayContaining(['float32', 'float16']));
    }
    for (const k of ['peepholeWeight', 'initialHiddenState', 'initialCellState', 'output0', 'output1', 'output2']) {
      expect(l.lstm[k].dataTypes).toEqual(expect.arrayContaining(['float32', 'float16']));
    }
    for (const k of ['hiddenState', 'cellState', 'peepholeWeight', 'output0', 'output1']) {
      expect(l.lstmCell[k].dataTypes).toEqual(expect.arrayContaining(['float32', 'float16']));
    }
    expect(l.gru.input.rankRange).toEqual({ min: 3, max: 3 });
    expect(l.lstmCell.input.rankRange).toEqual({ min: 2, max: 2 });
  });
});

/** float16 bit patterns (Uint16Array) of small exactly representable values. */
function f16(values) {
  const out = new Uint16Array(values.length);
  const f = new Float32Array(1);
  const u = new Uint32Array(f.buffer);
  values.forEach((v, i) => {
    f[0] = v;
    const bits = u[0];
    const sign = (bits >>> 16) & 0x8000;
    const exp = ((bits >>> 23) & 0xff) - 127 + 15;
    const mant = bits & 0x7fffff;
    // Inputs here are normal float16 numbers with at most 10 mantissa bits,
    // or zero.
    out[i] = v === 0 ? sign : sign | (exp << 10) | (mant >>> 13);
  });
  return out;
}
