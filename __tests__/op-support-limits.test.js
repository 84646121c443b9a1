'use strict';
// opSupportLimits() tells the truth: every operator the builder exposes is
// listed with dataTypes and rankRange for every operand, and every data type
// advertised for an operator's first operand builds and runs.

const { ml, MLGraphBuilder } = require('..');
const native = require('../webnn-node.node');

function data(dataType, n) {
  switch (dataType) {
    case 'float32':
      return new Float32Array(n).fill(1);
    case 'float16':
      return new Uint16Array(n).fill(0x3c00); // 1.0
    case 'int64':
      return new BigInt64Array(n).fill(1n);
    case 'uint64':
      return new BigUint64Array(n).fill(1n);
    case 'int32':
      return new Int32Array(n).fill(1);
    case 'uint32':
      return new Uint32Array(n).fill(1);
    case 'int8':
      return new Int8Array(n).fill(1);
    case 'uint8':
      return new Uint8Array(n).fill(1);
    case 'int4':
    case 'uint4':
      return new Uint8Array(Math.ceil(n / 2)).fill(0x11);
    default:
      throw new Error(dataType);
  }
}

function konst(b, dataType, shape, fill) {
  const n = shape.reduce((a, d) => a * d, 1);
  const d = data(dataType, n);
  if (fill !== undefined) d.fill(typeof d[0] === 'bigint' ? BigInt(fill) : fill);
  return b.constant({ dataType, shape }, d);
}

// One small invocation per operator, with its first operand of type `t`.
const X = [2, 3];
const unary = (op, opts) => (b, t) => b[op](konst(b, t, X), opts);
const binary = (op) => (b, t) => b[op](konst(b, t, X), konst(b, t, [3]));
const reduce = (op) => (b, t) => b[op](konst(b, t, X), { axes: [1] });
const SAMPLES = {
  ...Object.fromEntries(['add', 'sub', 'mul', 'div', 'max', 'min', 'pow'].map((o) => [o, binary(o)])),
  ...Object.fromEntries(
    ['equal', 'notEqual', 'greater', 'greaterOrEqual', 'lesser', 'lesserOrEqual', 'logicalAnd', 'logicalOr', 'logicalXor'].map(
      (o) => [o, binary(o)],
    ),
  ),
  logicalNot: unary('logicalNot'),
  ...Object.fromEntries(
    [
      'abs', 'ceil', 'cos', 'erf', 'exp', 'floor', 'identity', 'log', 'neg', 'reciprocal', 'roundEven', 'sin', 'sign',
      'sqrt', 'tan', 'isNaN', 'isInfinite', 'relu', 'sigmoid', 'tanh', 'softsign', 'softplus', 'gelu', 'elu',
      'hardSigmoid', 'hardSwish', 'leakyRelu', 'linear',
    ].map((o) => [o, unary(o)]),
  ),
  clamp: unary('clamp', { minValue: 0, maxValue: 6 }),
  cast: (b, t) => b.cast(konst(b, t, X), 'float32'),
  softmax: (b, t) => b.softmax(konst(b, t, X), 1),
  prelu: (b, t) => b.prelu(konst(b, t, X), konst(b, t, [3])),
  where: (b, t) => b.where(konst(b, t, X, 1), konst(b, 'float32', X), konst(b, 'float32', [3])),
  matmul: (b, t) => b.matmul(konst(b, t, [2, 3]), konst(b, t, [3, 4])),
  gemm: (b, t) => b.gemm(konst(b, t, [2, 3]), konst(b, t, [3, 4])),
  conv2d: (b, t) => b.conv2d(konst(b, t, [1, 1, 3, 3]), konst(b, t, [1, 1, 2, 2])),
  convTranspose2d: (b, t) => b.convTranspose2d(konst(b, t, [1, 1, 2, 2]), konst(b, t, [1, 1, 2, 2])),
  averagePool2d: (b, t) => b.averagePool2d(konst(b, t, [1, 1, 4, 4]), { windowDimensions: [2, 2] }),
  maxPool2d: (b, t) => b.maxPool2d(konst(b, t, [1, 1, 4, 4]), { windowDimensions: [2, 2] }),
  l2Pool2d: (b, t) => b.l2Pool2d(konst(b, t, [1, 1, 4, 4]), { windowDimensions: [2, 2] }),
  reshape: (b, t) => b.reshape(konst(b, t, X), [3, 2]),
  transpose: (b, t) => b.transpose(konst(b, t, X)),
  concat: (b, t) => b.concat([konst(b, t, X), konst(b, t, X)], 0),
  slice: (b, t) => b.slice(konst(b, t, X), [0, 1], [2, 2]),
  expand: (b, t) => b.expand(konst(b, t, [1, 3]), [2, 3]),
  pad: (b, t) => b.pad(konst(b, t, X), [1, 0], [0, 1]),
  reverse: (b, t) => b.reverse(konst(b, t, X)),
  split: (b, t) => b.split(konst(b, t, X), 3, { axis: 1 }),
  tile: (b, t) => b.tile(konst(b, t, X), [2, 1]),
  triangular: (b, t) => b.triangular(konst(b, t, X)),
  resample2d: (b, t) => b.resample2d(konst(b, t, [1, 1, 2, 2]), { scales: [2, 2] }),
  gather: (b, t) => b.gather(konst(b, t, X), konst(b, 'int32', [1], 0)),
  gatherElements: (b, t) => b.gatherElements(konst(b, t, X), konst(b, 'int32', [1, 3], 0)),
  gatherND: (b, t) => b.gatherND(konst(b, t, X), konst(b, 'int32', [1, 1], 0)),
  scatterElements: (b, t) =>
    b.scatterElements(konst(b, t, X), konst(b, 'int32', [1, 3], 0), konst(b, t, [1, 3])),
  scatterND: (b, t) => b.scatterND(konst(b, t, X), konst(b, 'int32', [1, 1], 0), konst(b, t, [1, 3])),
  ...Object.fromEntries(
    [
      'reduceL1', 'reduceL2', 'reduceLogSum', 'reduceLogSumExp', 'reduceMax', 'reduceMean', 'reduceMin',
      'reduceProduct', 'reduceSum', 'reduceSumSquare',
    ].map((o) => [o, reduce(o)]),
  ),
  argMin: (b, t) => b.argMin(konst(b, t, X), 1),
  argMax: (b, t) => b.argMax(konst(b, t, X), 1),
  cumulativeSum: (b, t) => b.cumulativeSum(konst(b, t, X), 1),
  batchNormalization: (b, t) =>
    b.batchNormalization(konst(b, t, [1, 2, 2, 2]), konst(b, t, [2]), konst(b, t, [2])),
  instanceNormalization: (b, t) => b.instanceNormalization(konst(b, t, [1, 2, 2, 2])),
  layerNormalization: (b, t) => b.layerNormalization(konst(b, t, X)),
  quantizeLinear: (b, t) => b.quantizeLinear(konst(b, t, X), konst(b, t, X), konst(b, 'uint8', X)),
  dequantizeLinear: (b, t) => b.dequantizeLinear(konst(b, t, X), konst(b, 'float32', X), konst(b, t, X)),
  gru: (b, t) => b.gru(konst(b, t, [1, 1, 2]), konst(b, t, [1, 6, 2]), konst(b, t, [1, 6, 2]), 1, 2),
  gruCell: (b, t) =>
    b.gruCell(konst(b, t, [1, 2]), konst(b, t, [6, 2]), konst(b, t, [6, 2]), konst(b, t, [1, 2]), 2),
  lstm: (b, t) => b.lstm(konst(b, t, [1, 1, 2]), konst(b, t, [1, 8, 2]), konst(b, t, [1, 8, 2]), 1, 2),
  lstmCell: (b, t) =>
    b.lstmCell(
      konst(b, t, [1, 2]),
      konst(b, t, [8, 2]),
      konst(b, t, [8, 2]),
      konst(b, t, [1, 2]),
      konst(b, t, [1, 2]),
      2,
    ),
};

const TOP_LEVEL = new Set(['preferredInputLayout', 'maxTensorByteLength', 'input', 'constant', 'output']);

describe('opSupportLimits() on the CPU', () => {
  let context;
  let limits;
  beforeAll(async () => {
    context = await ml.createContext();
    limits = context.opSupportLimits();
  });

  test('lists every builder operator, each operand with dataTypes and rankRange', () => {
    const names = native.operatorNames();
    expect(names.length).toBeGreaterThan(0);
    for (const name of names) {
      expect(typeof MLGraphBuilder.prototype[name]).toBe('function');
      const entry = limits[name];
      expect(entry).toBeDefined();
      const operands = Object.entries(entry);
      expect(operands.length).toBeGreaterThan(0);
      for (const [, l] of operands) {
        expect(Array.isArray(l.dataTypes)).toBe(true);
        expect(l.dataTypes.length).toBeGreaterThan(0);
        expect(l.rankRange.min).toBeLessThanOrEqual(l.rankRange.max);
      }
    }
    for (const key of Object.keys(limits)) {
      if (!TOP_LEVEL.has(key)) expect(names).toContain(key);
    }
    expect(limits.preferredInputLayout).toBe('nchw');
    for (const k of ['input', 'constant', 'output']) expect(limits[k].dataTypes.length).toBeGreaterThan(0);
  });

  test('every advertised data type of each operator builds and runs', async () => {
    const failures = [];
    let runs = 0;
    for (const name of native.operatorNames()) {
      const sample = SAMPLES[name];
      if (!sample) {
        failures.push(`${name}: no sample invocation in this test`);
        continue;
      }
      const [first] = Object.entries(limits[name]);
      for (const t of first[1].dataTypes) {
        try {
          const b = new MLGraphBuilder(context);
          let out = sample(b, t);
          if (Array.isArray(out)) out = out[0];
          const outLimit = limits[name].output || limits[name].outputs;
          if (outLimit && !outLimit.dataTypes.includes(out.dataType)) {
            failures.push(`${name}(${t}): output ${out.dataType} is not advertised`);
          }
          const graph = await b.build({ out });
          const tensor = await context.createTensor({ dataType: out.dataType, shape: out.shape, readable: true });
          context.dispatch(graph, {}, { out: tensor });
          const bytes = await context.readTensor(tensor);
          expect(bytes.byteLength).toBeGreaterThan(0);
          runs++;
        } catch (e) {
          failures.push(`${name}(${t}): ${e.name}: ${e.message}`);
        }
      }
    }
    expect(failures).toEqual([]);
    expect(runs).toBeGreaterThan(native.operatorNames().length);
  });
});
