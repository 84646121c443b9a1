'use strict';
// Argument errors of MLGraphBuilder and ml.createContext: every invalid
// argument is a TypeError naming the operator; builders that already built
// throw InvalidStateError; build failures reject with OperationError; and
// promise-returning methods reject instead of throwing.

const { ml, MLGraphBuilder, MLOperand } = require('..');
const { expectThrow, expectReject, cpuContext, constF32 } = require('./helpers');

let context;
beforeAll(async () => {
  context = await cpuContext();
});
afterAll(() => {
  context.destroy();
});

function builder() {
  return new MLGraphBuilder(context);
}

const F32 = (shape) => ({ dataType: 'float32', shape });

describe('MLGraphBuilder constructor', () => {
  test('requires an MLContext', () => {
    expectThrow(() => new MLGraphBuilder(), 'TypeError');
    expectThrow(() => new MLGraphBuilder({}), 'TypeError');
    expectThrow(() => new MLGraphBuilder('cpu'), 'TypeError');
  });
});

describe('input()', () => {
  test('a string dimension is a TypeError', () => {
    expectThrow(() => builder().input('x', { dataType: 'float32', shape: ['2'] }), 'TypeError', 'input');
  });

  test('negative and fractional dimensions are TypeErrors', () => {
    expectThrow(() => builder().input('x', F32([-1])), 'TypeError', 'input');
    expectThrow(() => builder().input('x', F32([2, 1.5])), 'TypeError', 'input');
    expectThrow(() => builder().input('x', F32([NaN])), 'TypeError', 'input');
    expectThrow(() => builder().input('x', F32([Infinity])), 'TypeError', 'input');
    expectThrow(() => builder().input('x', F32([2 ** 32])), 'TypeError', 'input');
  });

  test('a shape whose byte length overflows is a TypeError', () => {
    expectThrow(() => builder().input('x', F32([2 ** 31, 2 ** 31, 16])), 'TypeError', 'input');
    expectThrow(() => builder().input('x', F32([4294967295, 4294967295, 4294967295])), 'TypeError', 'input');
    expectThrow(() => builder().input('x', { dataType: 'float32', shape: [65536, 65536, 16] }), 'TypeError', 'input');
  });

  test('an unknown data type is a TypeError', () => {
    expectThrow(() => builder().input('x', { dataType: 'float31', shape: [1] }), 'TypeError', 'input');
    expectThrow(() => builder().input('x', { dataType: 'FLOAT32', shape: [1] }), 'TypeError', 'input');
    expectThrow(() => builder().input('x', { dataType: 3, shape: [1] }), 'TypeError', 'input');
  });

  test('missing members and a missing descriptor are TypeErrors', () => {
    expectThrow(() => builder().input('x', { shape: [1] }), 'TypeError', 'input');
    expectThrow(() => builder().input('x', { dataType: 'float32' }), 'TypeError', 'input');
    expectThrow(() => builder().input('x'), 'TypeError', 'input');
    expectThrow(() => builder().input('x', 'float32'), 'TypeError', 'input');
    expectThrow(() => builder().input('x', { dataType: 'float32', shape: 3 }), 'TypeError', 'input');
  });

  test('the name must be a non-empty, unused string', () => {
    const b = builder();
    expectThrow(() => b.input('', F32([1])), 'TypeError', 'input');
    expectThrow(() => b.input(undefined, F32([1])), 'TypeError', 'input');
    b.input('x', F32([1]));
    expectThrow(() => b.input('x', F32([2])), 'TypeError', 'input');
  });
});

describe('constant()', () => {
  test('a buffer of the wrong byte length is a TypeError', () => {
    expectThrow(() => builder().constant(F32([3]), new Float32Array(2)), 'TypeError', 'constant');
    expectThrow(() => builder().constant(F32([3]), new Float32Array(4)), 'TypeError', 'constant');
  });

  test('a view of an incompatible type is a TypeError', () => {
    expectThrow(() => builder().constant(F32([2]), new Int32Array(2)), 'TypeError', 'constant');
    expectThrow(() => builder().constant({ dataType: 'int32', shape: [2] }, new Float32Array(2)), 'TypeError', 'constant');
  });

  test('a non-buffer is a TypeError', () => {
    expectThrow(() => builder().constant(F32([2]), [1, 2]), 'TypeError', 'constant');
    expectThrow(() => builder().constant(F32([2])), 'TypeError', 'constant');
  });

  test('constant(type, value) with an unknown type or a non-number is a TypeError', () => {
    expectThrow(() => builder().constant('float64', 1), 'TypeError', 'constant');
    expectThrow(() => builder().constant('float32', 'one'), 'TypeError', 'constant');
    expectThrow(() => builder().constant('float32'), 'TypeError', 'constant');
  });

  test('a negative dimension is a TypeError', () => {
    expectThrow(() => builder().constant(F32([-2]), new Float32Array(2)), 'TypeError', 'constant');
  });
});

describe('operator argument errors', () => {
  test('an operand of another builder is a TypeError', () => {
    const b1 = builder();
    const b2 = builder();
    const x = b1.input('x', F32([2]));
    const y = b2.input('y', F32([2]));
    expectThrow(() => b1.add(x, y), 'TypeError', 'add');
    expectThrow(() => b2.relu(x), 'TypeError', 'relu');
    expectThrow(() => b2.concat([y, x], 0), 'TypeError', 'concat');
    expectThrow(() => b1.gemm(
      b1.input('a', F32([2, 2])), b1.input('b', F32([2, 2])), { c: b2.input('c', F32([2, 2])) },
    ), 'TypeError', 'gemm');
    expectThrow(() => b1.conv2d(
      b1.input('i', F32([1, 1, 2, 2])), b1.input('f', F32([1, 1, 1, 1])), { bias: b2.input('bias', F32([1])) },
    ), 'TypeError', 'conv2d');
  });

  test('an operand of another builder is refused by build()', async () => {
    const b1 = builder();
    const b2 = builder();
    const x = b2.input('x', F32([2]));
    const y = b2.relu(x);
    b1.input('z', F32([2]));
    await expectReject(b1.build({ y }), 'TypeError');
  });

  test('missing required operands are TypeErrors naming the operator', () => {
    const b = builder();
    const x = b.input('x', F32([2, 2]));
    expectThrow(() => b.add(x), 'TypeError', 'add');
    expectThrow(() => b.add(), 'TypeError', 'add');
    expectThrow(() => b.mul(undefined, x), 'TypeError', 'mul');
    expectThrow(() => b.relu(), 'TypeError', 'relu');
    expectThrow(() => b.matmul(x), 'TypeError', 'matmul');
    expectThrow(() => b.gemm(x), 'TypeError', 'gemm');
    expectThrow(() => b.conv2d(b.input('i', F32([1, 1, 2, 2]))), 'TypeError', 'conv2d');
    expectThrow(() => b.reshape(x), 'TypeError', 'reshape');
    expectThrow(() => b.slice(x, [0, 0]), 'TypeError', 'slice');
    expectThrow(() => b.concat(), 'TypeError', 'concat');
    expectThrow(() => b.concat([x]), 'TypeError', 'concat');
    expectThrow(() => b.cast(x), 'TypeError', 'cast');
  });

  test('non-operands where operands are expected are TypeErrors', () => {
    const b = builder();
    const x = b.input('x', F32([2]));
    expectThrow(() => b.add(x, 1), 'TypeError', 'add');
    expectThrow(() => b.add(x, new Float32Array(2)), 'TypeError', 'add');
    expectThrow(() => b.sub({}, x), 'TypeError', 'sub');
    expectThrow(() => b.abs('x'), 'TypeError', 'abs');
    expectThrow(() => b.concat(x, 0), 'TypeError', 'concat');
    expectThrow(() => b.concat([x, null], 0), 'TypeError', 'concat');
  });

  test('a string where a number is expected is a TypeError', () => {
    const b = builder();
    const x = b.input('x', F32([2, 2]));
    const img = b.input('img', F32([1, 1, 4, 4]));
    const w = constF32(b, [1, 1, 2, 2], [1, 1, 1, 1]);
    expectThrow(() => b.clamp(x, { minValue: 'a' }), 'TypeError', 'clamp');
    expectThrow(() => b.gemm(x, x, { alpha: '2' }), 'TypeError', 'gemm');
    expectThrow(() => b.softmax(x, '1'), 'TypeError', 'softmax');
    expectThrow(() => b.concat([x, x], '0'), 'TypeError', 'concat');
    expectThrow(() => b.reshape(x, ['4']), 'TypeError', 'reshape');
    expectThrow(() => b.slice(x, ['0', 0], [1, 1]), 'TypeError', 'slice');
    expectThrow(() => b.transpose(x, { permutation: ['1', '0'] }), 'TypeError', 'transpose');
    expectThrow(() => b.conv2d(img, w, { strides: ['1', '1'] }), 'TypeError', 'conv2d');
    expectThrow(() => b.conv2d(img, w, { groups: '1' }), 'TypeError', 'conv2d');
    expectThrow(() => b.maxPool2d(img, { windowDimensions: ['2', '2'] }), 'TypeError', 'maxPool2d');
    expectThrow(() => b.averagePool2d(img, { padding: [0, 0, 0, '1'] }), 'TypeError', 'averagePool2d');
  });

  test('negative and fractional integers are TypeErrors', () => {
    const b = builder();
    const x = b.input('x', F32([2, 2]));
    const img = b.input('img', F32([1, 1, 4, 4]));
    const w = constF32(b, [1, 1, 2, 2], [1, 1, 1, 1]);
    expectThrow(() => b.reshape(x, [-4]), 'TypeError', 'reshape');
    expectThrow(() => b.reshape(x, [2, 2.5]), 'TypeError', 'reshape');
    expectThrow(() => b.concat([x, x], -1), 'TypeError', 'concat');
    expectThrow(() => b.concat([x, x], 0.5), 'TypeError', 'concat');
    expectThrow(() => b.softmax(x, -1), 'TypeError', 'softmax');
    expectThrow(() => b.slice(x, [0, -1], [1, 1]), 'TypeError', 'slice');
    expectThrow(() => b.conv2d(img, w, { padding: [0, 0, 0, -1] }), 'TypeError', 'conv2d');
    expectThrow(() => b.conv2d(img, w, { strides: [1.5, 1] }), 'TypeError', 'conv2d');
    expectThrow(() => b.maxPool2d(img, { strides: [0, 1] }), 'TypeError', 'maxPool2d');
  });

  test('unknown enum strings are TypeErrors', () => {
    const b = builder();
    const img = b.input('img', F32([1, 1, 4, 4]));
    const w = constF32(b, [1, 1, 2, 2], [1, 1, 1, 1]);
    const x = b.input('x', F32([2]));
    expectThrow(() => b.conv2d(img, w, { inputLayout: 'nwhc' }), 'TypeError', 'conv2d');
    expectThrow(() => b.conv2d(img, w, { filterLayout: 'iohw' }), 'TypeError', 'conv2d');
    expectThrow(() => b.averagePool2d(img, { layout: 'NCHW' }), 'TypeError', 'averagePool2d');
    expectThrow(() => b.maxPool2d(img, { roundingType: 'round' }), 'TypeError', 'maxPool2d');
    expectThrow(() => b.cast(x, 'double'), 'TypeError', 'cast');
  });

  test('options that are not dictionaries are TypeErrors', () => {
    const b = builder();
    const x = b.input('x', F32([2, 2]));
    expectThrow(() => b.clamp(x, 5), 'TypeError', 'clamp');
    expectThrow(() => b.transpose(x, [1, 0]), 'TypeError', 'transpose');
    expectThrow(() => b.gemm(x, x, 'aTranspose'), 'TypeError', 'gemm');
    expectThrow(() => b.gemm(x, x, { aTranspose: 'yes' }), 'TypeError', 'gemm');
  });

  test('incompatible shapes and types are TypeErrors', () => {
    const b = builder();
    const a23 = b.input('a', F32([2, 3]));
    const a22 = b.input('b', F32([2, 2]));
    const i32 = b.input('i', { dataType: 'int32', shape: [2, 3] });
    const img = b.input('img', F32([1, 2, 4, 4]));
    expectThrow(() => b.add(a23, a22), 'TypeError', 'add');
    expectThrow(() => b.add(a23, i32), 'TypeError', 'add');
    expectThrow(() => b.matmul(a23, a23), 'TypeError', 'matmul');
    expectThrow(() => b.matmul(b.input('v', F32([3])), a23), 'TypeError', 'matmul');
    expectThrow(() => b.matmul(i32, b.input('j', { dataType: 'int32', shape: [3, 2] })), 'TypeError', 'matmul');
    expectThrow(() => b.gemm(a23, a23), 'TypeError', 'gemm');
    expectThrow(() => b.gemm(a23, b.input('c', F32([3, 2])), { c: b.input('cc', F32([3])) }), 'TypeError', 'gemm');
    expectThrow(() => b.gemm(b.input('r3', F32([1, 2, 3])), a23), 'TypeError', 'gemm');
    expectThrow(() => b.reshape(a23, [5]), 'TypeError', 'reshape');
    expectThrow(() => b.transpose(a23, { permutation: [0, 0] }), 'TypeError', 'transpose');
    expectThrow(() => b.transpose(a23, { permutation: [0, 1, 2] }), 'TypeError', 'transpose');
    expectThrow(() => b.concat([a23, a22], 0), 'TypeError', 'concat');
    expectThrow(() => b.concat([a23, i32], 0), 'TypeError', 'concat');
    expectThrow(() => b.concat([a23, a23], 2), 'TypeError', 'concat');
    expectThrow(() => b.slice(a23, [0, 2], [1, 2]), 'TypeError', 'slice');
    expectThrow(() => b.slice(a23, [0, 0], [1, 0]), 'TypeError', 'slice');
    expectThrow(() => b.slice(a23, [0], [1]), 'TypeError', 'slice');
    expectThrow(() => b.slice(a23, [2, 0], [1, 1]), 'TypeError', 'slice');
    expectThrow(() => b.softmax(a23, 2), 'TypeError', 'softmax');
    expectThrow(() => b.softmax(i32, 1), 'TypeError', 'softmax');
    expectThrow(() => b.exp(i32), 'TypeError', 'exp');
    expectThrow(() => b.clamp(a23, { minValue: 2, maxValue: 1 }), 'TypeError', 'clamp');
    // conv2d: rank, channels, groups, bias, a window larger than the input.
    expectThrow(() => b.conv2d(a23, constF32(b, [1, 1, 1, 1], [1])), 'TypeError', 'conv2d');
    expectThrow(() => b.conv2d(img, constF32(b, [1, 3, 1, 1], [1, 1, 1])), 'TypeError', 'conv2d');
    expectThrow(() => b.conv2d(img, constF32(b, [1, 1, 1, 1], [1]), { groups: 3 }), 'TypeError', 'conv2d');
    expectThrow(() => b.conv2d(img, constF32(b, [1, 2, 1, 1], [1, 1]), { bias: constF32(b, [2], [1, 1]) }), 'TypeError', 'conv2d');
    expectThrow(() => b.conv2d(img, constF32(b, [1, 2, 5, 5], Array(50).fill(0))), 'TypeError', 'conv2d');
    expectThrow(() => b.conv2d(img, constF32(b, [1, 2, 1, 1], [1, 1]), { padding: [0, 0] }), 'TypeError', 'conv2d');
    expectThrow(() => b.conv2d(img, constF32(b, [1, 2, 1, 1], [1, 1]), { groups: 0 }), 'TypeError', 'conv2d');
    // pools: rank, window too large, bad outputSizes.
    expectThrow(() => b.averagePool2d(a23), 'TypeError', 'averagePool2d');
    expectThrow(() => b.maxPool2d(img, { windowDimensions: [5, 5] }), 'TypeError', 'maxPool2d');
    expectThrow(() => b.maxPool2d(img, { windowDimensions: [2, 2], outputSizes: [9, 9] }), 'TypeError', 'maxPool2d');
  });

  test('an error message carries the operator label when one is given', () => {
    const b = builder();
    const x = b.input('x', F32([2]));
    expectThrow(() => b.add(x, b.input('y', F32([3])), { label: 'my-add' }), 'TypeError', 'add', 'my-add');
  });
});

describe('builder reuse after build', () => {
  test('every method throws InvalidStateError and build() rejects with it', async () => {
    const b = builder();
    const x = b.input('x', F32([2]));
    const y = b.relu(x);
    await b.build({ y });
    expectThrow(() => b.input('z', F32([2])), 'InvalidStateError');
    expectThrow(() => b.constant(F32([2]), new Float32Array(2)), 'InvalidStateError');
    expectThrow(() => b.constant('float32', 1), 'InvalidStateError');
    expectThrow(() => b.add(x, x), 'InvalidStateError');
    expectThrow(() => b.relu(y), 'InvalidStateError');
    await expectReject(b.build({ y }), 'InvalidStateError');
    await expectReject(b.build({ z: y }), 'InvalidStateError');
  });

  test('a builder is spent even while its build() is still pending', async () => {
    const b = builder();
    const x = b.input('x', F32([2]));
    const y = b.abs(x);
    const p = b.build({ y });
    await expectReject(b.build({ y }), 'InvalidStateError');
    expectThrow(() => b.neg(x), 'InvalidStateError');
    await p;
  });
});

describe('build() errors', () => {
  test('build() rejects (never throws) with TypeError for bad outputs', async () => {
    const b = builder();
    const x = b.input('x', F32([2]));
    const c = constF32(b, [2], [1, 2]);
    const y = b.add(x, c);
    let p;
    expect(() => { p = b.build({}); }).not.toThrow();
    await expectReject(p, 'TypeError');
    await expectReject(b.build({ x }), 'TypeError');
    await expectReject(b.build({ c }), 'TypeError');
    await expectReject(b.build({ '': y }), 'TypeError');
    await expectReject(b.build({ y: 'not an operand' }), 'TypeError');
    await expectReject(b.build(), 'TypeError');
    await expectReject(b.build(y), 'TypeError');
    // The builder was not spent by the failed builds.
    const g = await b.build({ y });
    g.destroy();
  });

  test('a constant(tensor) whose tensor was destroyed before build() rejects TypeError', async () => {
    const ct = await context.createConstantTensor(F32([2]), new Float32Array([1, 2]));
    const b = builder();
    const x = b.input('x', F32([2]));
    const y = b.add(x, b.constant(ct));
    ct.destroy();
    await expectReject(b.build({ y }), 'TypeError');
  });

  test('a constant tensor destroyed after build() leaves the graph valid', async () => {
    const ct = await context.createConstantTensor(F32([2]), new Float32Array([1, 2]));
    const b = builder();
    const x = b.input('x', F32([2]));
    const graph = await b.build({ y: b.add(x, b.constant(ct)) });
    ct.destroy();
    const r = context.computeSync(graph, { x: new Float32Array([10, 20]) }, { y: new Float32Array(2) });
    expect(Array.from(r.y)).toEqual([11, 22]);
  });

  test('a graph the backend cannot compile rejects with OperationError', async () => {
    let gpu;
    try {
      gpu = await ml.createContext({ deviceType: 'gpu' });
    } catch (e) {
      expect(e.name).toBe('NotSupportedError');
      console.log(`no GPU context (${e.message}): the OperationError build case needs one`);
    }
    if (gpu) {
      // The GPU builds every operator and data type the CPU does; what it
      // cannot compile is an intermediate larger than one storage binding
      // (opSupportLimits().maxTensorByteLength), here from small inputs.
      const max = gpu.opSupportLimits().maxTensorByteLength;
      const n = Math.floor(Math.sqrt(max / 8)) + 1;
      const b = new MLGraphBuilder(gpu);
      const a = b.input('a', { dataType: 'uint64', shape: [n, 1] });
      const c = b.input('c', { dataType: 'uint64', shape: [1, n] });
      const y = b.reduceMin(b.sub(a, c));
      const e = await expectReject(b.build({ y }), 'OperationError', `${8 * n * n} bytes`);
      expect(e.message).toMatch(/the GPU's largest (storage binding|buffer)/);
      gpu.destroy();
    }
  });
});

describe('ml.createContext errors (rejections)', () => {
  test('an unknown deviceType rejects TypeError', async () => {
    const p = ml.createContext({ deviceType: 'tpu' });
    expect(typeof p.then).toBe('function');
    await expectReject(p, 'TypeError');
  });

  test('an unknown powerPreference rejects TypeError', async () => {
    await expectReject(ml.createContext({ powerPreference: 'fast' }), 'TypeError');
  });

  test('a bad numThreads or accelerated rejects TypeError', async () => {
    await expectReject(ml.createContext({ numThreads: -1 }), 'TypeError');
    await expectReject(ml.createContext({ numThreads: 1.5 }), 'TypeError');
    await expectReject(ml.createContext({ numThreads: 'four' }), 'TypeError');
    await expectReject(ml.createContext({ accelerated: 'yes' }), 'TypeError');
  });

  test('options that are not a dictionary reject TypeError', async () => {
    await expectReject(ml.createContext('gpu'), 'TypeError');
    await expectReject(ml.createContext(42), 'TypeError');
  });

  test('deviceType npu rejects NotSupportedError', async () => {
    await expectReject(ml.createContext({ deviceType: 'npu' }), 'NotSupportedError');
  });

  test('createContext(undefined) and createContext({}) resolve', async () => {
    const a = await ml.createContext(undefined);
    const b = await ml.createContext({});
    expect(a.accelerated).toBe(false);
    a.destroy();
    b.destroy();
  });
});

describe('createTensor / createConstantTensor errors (rejections)', () => {
  test('bad descriptors reject TypeError instead of throwing', async () => {
    let p;
    expect(() => { p = context.createTensor({ dataType: 'float32', shape: [-1] }); }).not.toThrow();
    await expectReject(p, 'TypeError');
    await expectReject(context.createTensor({ dataType: 'float32', shape: [1.5] }), 'TypeError');
    await expectReject(context.createTensor({ dataType: 'float32', shape: ['2'] }), 'TypeError');
    await expectReject(context.createTensor({ dataType: 'bfloat16', shape: [2] }), 'TypeError');
    await expectReject(context.createTensor({ dataType: 'float32', shape: [2 ** 31, 2 ** 31, 16] }), 'TypeError');
    await expectReject(context.createTensor({ dataType: 'float32', shape: [2], readable: 'yes' }), 'TypeError');
    await expectReject(context.createTensor(), 'TypeError');
    await expectReject(context.createConstantTensor({ dataType: 'float32', shape: [-2] }, new Float32Array(2)), 'TypeError');
    await expectReject(context.createConstantTensor({ dataType: 'float32', shape: [2] }, 'data'), 'TypeError');
  });
});
