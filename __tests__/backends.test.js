'use strict';
// The same graphs on the 'cpu' and 'gpu' backends give the same results.
//
// The GPU backend runs on any wgpu adapter, including a software one
// (lavapipe: `apt-get install -y mesa-vulkan-drivers libvulkan1`). Where
// createContext({deviceType: 'gpu'}) rejects with NotSupportedError, the GPU
// tests are skipped and the reason is printed.

const path = require('path');
const { spawnSync } = require('child_process');
const { ml, MLContext, MLGraphBuilder } = require('..');
const { expectThrow, expectReject, expectClose, buildGraph, dispatchGraph, run, f32, constF32, iota, gpuProbe } = require('./helpers');

const ROOT = path.resolve(__dirname, '..');

const probe = gpuProbe();
if (!probe.ok) console.log(`GPU tests skipped: createContext({deviceType: 'gpu'}) failed with ${probe.why}`);

describe('GPU availability', () => {
  test("createContext({deviceType: 'gpu'}) resolves, or rejects with NotSupportedError only", async () => {
    let ctx;
    let error;
    try {
      ctx = await ml.createContext({ deviceType: 'gpu' });
    } catch (e) {
      error = e;
    }
    if (probe.ok) {
      expect(error).toBeUndefined();
      expect(ctx).toBeInstanceOf(MLContext);
      expect(typeof ctx.accelerated).toBe('boolean');
      ctx.destroy();
    } else {
      expect(error.name).toBe('NotSupportedError');
    }
  });

  test('accelerated: true without a deviceType gives a working context', async () => {
    const ctx = await ml.createContext({ accelerated: true });
    const { graph } = await buildGraph(ctx, (b) => ({ y: b.add(b.input('x', { dataType: 'float32', shape: [2] }), b.constant('float32', 1)) }));
    const r = await dispatchGraph(ctx, graph, { x: f32([2], [1, 2]) }, { y: { dataType: 'float32', shape: [2] } });
    expectClose(r.y, [2, 3]);
    ctx.destroy();
  });
});

/** Deterministic pseudo-random floats in [-1, 1). */
function noise(n, seed) {
  let s = seed >>> 0 || 1;
  return Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 31 - 1;
  });
}

const describeGpu = probe.ok ? describe : describe.skip;

describeGpu('cpu and gpu give the same results', () => {
  let cpu;
  let gpu;
  beforeAll(async () => {
    cpu = await ml.createContext({ deviceType: 'cpu' });
    gpu = await ml.createContext({ deviceType: 'gpu' });
  });
  afterAll(() => {
    cpu.destroy();
    gpu.destroy();
  });

  /**
   * Builds the same graph on both contexts, runs it through dispatch, and
   * checks that both match `expected` (when given) and each other.
   */
  async function both(inputs, fn, expected = {}, tolerance = 1e-5) {
    const results = [];
    for (const ctx of [cpu, gpu]) {
      const { graph, outputs } = await buildGraph(ctx, (b) => {
        const ops = {};
        for (const [name, d] of Object.entries(inputs)) ops[name] = b.input(name, { dataType: d.dataType, shape: d.shape });
        return fn(b, ops);
      });
      results.push(await dispatchGraph(ctx, graph, inputs, outputs));
      graph.destroy();
    }
    const [onCpu, onGpu] = results;
    for (const name of Object.keys(onCpu)) {
      if (expected[name]) {
        expectClose(onCpu[name], expected[name], tolerance);
        expectClose(onGpu[name], expected[name], tolerance);
      }
      expectClose(onGpu[name], Array.from(onCpu[name]), tolerance);
    }
    return { cpu: onCpu, gpu: onGpu };
  }

  test('binary operators with broadcasting', async () => {
    await both({ a: f32([2, 3], [1, 2, 3, 4, 5, 6]), b: f32([3], [2, 4, 8]) }, (b, { a, b: c }) => ({
      add: b.add(a, c), sub: b.sub(a, c), mul: b.mul(a, c), div: b.div(a, c),
      max: b.max(a, c), min: b.min(a, c), pow: b.pow(a, b.constant('float32', 2)),
    }), {
      add: [3, 6, 11, 6, 9, 14],
      sub: [-1, -2, -5, 2, 1, -2],
      mul: [2, 8, 24, 8, 20, 48],
      div: [0.5, 0.5, 0.375, 2, 1.25, 0.75],
      max: [2, 4, 8, 4, 5, 8],
      min: [1, 2, 3, 2, 4, 6],
      pow: [1, 4, 9, 16, 25, 36],
    });
  });

  test('two-sided broadcasting [4,1,3] with [2,1]', async () => {
    const a = noise(12, 1);
    const c = [10, -10];
    const expected = [];
    for (let i = 0; i < 4; i++) for (let j = 0; j < 2; j++) for (let k = 0; k < 3; k++) expected.push(a[i * 3 + k] + c[j]);
    await both({ a: f32([4, 1, 3], a), c: f32([2, 1], c) }, (b, { a: x, c: y }) => ({ y: b.add(x, y) }), { y: expected });
  });

  test('unary operators', async () => {
    const x = [-2, -0.5, 0, 0.5, 2, 3];
    const p = [0.25, 1, 2, 4, 9, 100];
    await both({ x: f32([6], x), p: f32([2, 3], p) }, (b, { x: xo, p: po }) => ({
      abs: b.abs(xo), neg: b.neg(xo), relu: b.relu(xo), exp: b.exp(xo),
      sigmoid: b.sigmoid(xo), tanh: b.tanh(xo), log: b.log(po), sqrt: b.sqrt(po),
    }), {
      abs: x.map(Math.abs),
      neg: x.map((v) => -v),
      relu: x.map((v) => Math.max(v, 0)),
      exp: x.map(Math.exp),
      sigmoid: x.map((v) => 1 / (1 + Math.exp(-v))),
      tanh: x.map(Math.tanh),
      log: p.map(Math.log),
      sqrt: p.map(Math.sqrt),
    }, 1e-4);
  });

  test('clamp', async () => {
    await both({ x: f32([5], [-3, -1, 0, 1, 3]) }, (b, { x }) => ({
      both: b.clamp(x, { minValue: -2, maxValue: 2 }), low: b.clamp(x, { minValue: 0 }), high: b.clamp(x, { maxValue: -1 }),
    }), {
      both: [-2, -1, 0, 1, 2], low: [0, 0, 0, 1, 3], high: [-3, -1, -1, -1, -1],
    });
  });

  test('reshape', async () => {
    await both({ x: f32([2, 3], iota(6)) }, (b, { x }) => ({
      y: b.add(b.reshape(x, [3, 2]), constF32(b, [2], [100, 200])),
    }), { y: [100, 201, 102, 203, 104, 205] });
  });

  test('matmul 2x3 · 3x2', async () => {
    await both({ a: f32([2, 3], [1, 2, 3, 4, 5, 6]), b: f32([3, 2], [7, 8, 9, 10, 11, 12]) },
      (b, { a, b: c }) => ({ y: b.matmul(a, c) }), { y: [58, 64, 139, 154] });
  });

  test('matmul with sizes that are not tile multiples', async () => {
    const [M, K, N] = [33, 17, 45];
    const a = noise(M * K, 7);
    const c = noise(K * N, 11);
    const expected = [];
    for (let i = 0; i < M; i++) {
      for (let j = 0; j < N; j++) {
        let s = 0;
        for (let k = 0; k < K; k++) s += a[i * K + k] * c[k * N + j];
        expected.push(s);
      }
    }
    await both({ a: f32([M, K], a), c: f32([K, N], c) }, (b, { a: x, c: y }) => ({ y: b.matmul(x, y) }), { y: expected }, 1e-4);
  });

  test('batched matmul with a broadcast batch', async () => {
    const a = noise(2 * 3 * 4 * 5, 3);
    const c = noise(5 * 6, 5);
    const expected = [];
    for (let bt = 0; bt < 6; bt++) {
      for (let i = 0; i < 4; i++) {
        for (let j = 0; j < 6; j++) {
          let s = 0;
          for (let k = 0; k < 5; k++) s += a[bt * 20 + i * 5 + k] * c[k * 6 + j];
          expected.push(s);
        }
      }
    }
    await both({ a: f32([2, 3, 4, 5], a), c: f32([5, 6], c) }, (b, { a: x, c: y }) => ({ y: b.matmul(x, y) }), { y: expected }, 1e-4);
  });

  test('a chain: matmul -> add bias -> relu -> clamp -> reshape -> tanh', async () => {
    const x = noise(4 * 8, 21);
    const w = noise(8 * 3, 22);
    const bias = [0.1, -0.2, 0.3];
    const expected = [];
    for (let i = 0; i < 4; i++) {
      for (let j = 0; j < 3; j++) {
        let s = bias[j];
        for (let k = 0; k < 8; k++) s += x[i * 8 + k] * w[k * 3 + j];
        expected.push(Math.tanh(Math.min(Math.max(s, 0), 0.5)));
      }
    }
    await both({ x: f32([4, 8], x) }, (b, { x: xo }) => {
      const h = b.add(b.matmul(xo, constF32(b, [8, 3], w)), constF32(b, [3], bias));
      return { y: b.tanh(b.reshape(b.clamp(b.relu(h), { maxValue: 0.5 }), [12])) };
    }, { y: expected }, 1e-4);
  });

  test('int64 and uint64 arithmetic, comparisons, where, prelu and reductions match the CPU exactly', async () => {
    // Edges of the type and of its two 32-bit words, every one against every other.
    const edges = [0n, 1n, -1n, 3n, -7n, 63n, 2n ** 32n, 2n ** 32n + 5n, 5n * 2n ** 32n + 5n, -(2n ** 63n), 2n ** 63n - 1n, 0x123456789abcdefn];
    const k = edges.length;
    for (const dataType of ['int64', 'uint64']) {
      const T = dataType === 'int64' ? BigInt64Array : BigUint64Array;
      const inputs = { a: { dataType, shape: [k, 1], data: T.from(edges) }, c: { dataType, shape: [1, k], data: T.from(edges) } };
      const graph = (b, { a, c }) => ({
        add: b.add(a, c), sub: b.sub(a, c), mul: b.mul(a, c), div: b.div(a, c),
        max: b.max(a, c), min: b.min(a, c), pow: b.pow(a, c),
        equal: b.equal(a, c), notEqual: b.notEqual(a, c), greater: b.greater(a, c),
        greaterOrEqual: b.greaterOrEqual(a, c), lesser: b.lesser(a, c), lesserOrEqual: b.lesserOrEqual(a, c),
        where: b.where(b.greater(a, c), c, a),
        reduceMax: b.reduceMax(b.mul(a, c), { axes: [1] }), reduceMin: b.reduceMin(b.sub(a, c), { axes: [0] }),
        ...(dataType === 'int64' ? { prelu: b.prelu(a, c) } : {}),
      });
      const onCpu = (await run(cpu, inputs, graph)).results;
      const onGpu = (await run(gpu, inputs, graph)).results;
      for (const name of Object.keys(onCpu)) {
        expect({ dataType, name, values: Array.from(onGpu[name], String) }).toEqual({ dataType, name, values: Array.from(onCpu[name], String) });
      }
      // INT64_MIN / -1 wraps to INT64_MIN and -1 / INT64_MIN is 0; the same bits as
      // uint64: 2^63 / (2^64 - 1) is 0 and (2^64 - 1) / 2^63 is 1.
      expect(onGpu.div[9 * k + 2]).toBe(dataType === 'int64' ? -(2n ** 63n) : 0n);
      expect(onGpu.div[2 * k + 9]).toBe(dataType === 'int64' ? 0n : 1n);
    }
  });

  test('a large element-wise graph (over a million elements)', async () => {
    const n = 1 << 20;
    const x = Float32Array.from({ length: n }, (_, i) => (i % 1000) / 100);
    const results = [];
    for (const ctx of [cpu, gpu]) {
      const { graph } = await buildGraph(ctx, (b) => {
        const xo = b.input('x', { dataType: 'float32', shape: [1024, 1024] });
        return { y: b.sqrt(b.add(b.mul(xo, xo), b.constant('float32', 1))) };
      });
      const r = await ctx.compute(graph, { x: x.slice() }, { y: new Float32Array(n) });
      results.push(r.outputs.y);
      graph.destroy();
    }
    for (const i of [0, 1, 999, 12345, n - 1]) {
      const v = (i % 1000) / 100;
      expectClose([results[0][i], results[1][i]], [Math.sqrt(v * v + 1), Math.sqrt(v * v + 1)], 1e-5);
    }
    let maxDiff = 0;
    for (let i = 0; i < n; i++) maxDiff = Math.max(maxDiff, Math.abs(results[0][i] - results[1][i]));
    expect(maxDiff).toBeLessThan(1e-4);
  });
});

describeGpu('the GPU context', () => {
  let gpu;
  beforeAll(async () => {
    gpu = await ml.createContext({ deviceType: 'gpu' });
  });
  afterAll(() => {
    gpu.destroy();
  });

  test('tensors: write, read, read into a view', async () => {
    const t = await gpu.createTensor({ dataType: 'float32', shape: [2, 2], readable: true, writable: true });
    expect(Array.from(new Float32Array(await gpu.readTensor(t)))).toEqual([0, 0, 0, 0]);
    gpu.writeTensor(t, new Float32Array([1, 2, 3, 4]));
    const ab = await gpu.readTensor(t);
    expect(ab.byteLength).toBe(16);
    expect(Array.from(new Float32Array(ab))).toEqual([1, 2, 3, 4]);
    const view = new Float32Array(new SharedArrayBuffer(24), 8, 4);
    await gpu.readTensor(t, view);
    expect(Array.from(new Float32Array(view.buffer))).toEqual([0, 0, 1, 2, 3, 4]);
    t.destroy();
    await expectReject(gpu.readTensor(t), 'TypeError');
  });

  test('chained dispatches without await', async () => {
    const { graph: inc } = await buildGraph(gpu, (b) => ({ y: b.add(b.input('x', { dataType: 'float32', shape: [3] }), b.constant('float32', 1)) }));
    const { graph: dbl } = await buildGraph(gpu, (b) => ({ y: b.mul(b.input('x', { dataType: 'float32', shape: [3] }), b.constant('float32', 2)) }));
    const d = { dataType: 'float32', shape: [3] };
    const t0 = await gpu.createTensor({ ...d, writable: true });
    const t1 = await gpu.createTensor({ ...d, readable: true });
    const t2 = await gpu.createTensor({ ...d, readable: true });
    gpu.writeTensor(t0, new Float32Array([1, 2, 3]));
    gpu.dispatch(inc, { x: t0 }, { y: t1 });
    gpu.dispatch(dbl, { x: t1 }, { y: t2 });
    gpu.dispatch(inc, { x: t2 }, { y: t1 });
    expect(Array.from(new Float32Array(await gpu.readTensor(t2)))).toEqual([4, 6, 8]);
    expect(Array.from(new Float32Array(await gpu.readTensor(t1)))).toEqual([5, 7, 9]);
    for (const t of [t0, t1, t2]) t.destroy();
  });

  test('compute() and computeSync()', async () => {
    const { graph } = await buildGraph(gpu, (b) => {
      const a = b.input('a', { dataType: 'float32', shape: [2, 3] });
      return { y: b.matmul(a, constF32(b, [3, 2], [7, 8, 9, 10, 11, 12])) };
    });
    const a = new Float32Array([1, 2, 3, 4, 5, 6]);
    const y = new Float32Array(4);
    const r = await gpu.compute(graph, { a }, { y });
    expect(a.byteLength).toBe(0);
    expect(y.byteLength).toBe(0);
    expect(Array.from(r.inputs.a)).toEqual([1, 2, 3, 4, 5, 6]);
    expectClose(r.outputs.y, [58, 64, 139, 154]);
    const out = { y: new Float32Array(4) };
    expect(gpu.computeSync(graph, { a: new Float32Array([1, 0, 0, 0, 1, 0]) }, out)).toBe(out);
    expectClose(out.y, [7, 8, 9, 10]);
  });

  test('opSupportLimits reports what the GPU builds', () => {
    const limits = gpu.opSupportLimits();
    for (const op of ['add', 'sub', 'mul', 'div', 'max', 'min', 'pow', 'matmul']) {
      expect(limits[op].a.dataTypes).toContain('float32');
    }
    for (const op of ['abs', 'neg', 'exp', 'log', 'sqrt', 'relu', 'sigmoid', 'tanh', 'clamp', 'reshape']) {
      expect(limits[op].input.dataTypes).toContain('float32');
    }
    expect(limits.conv2d.input.rankRange).toEqual({ min: 4, max: 4 });
  });

  test('opSupportLimits lists every data type the CPU does, for every operator and operand', async () => {
    const cpu = await ml.createContext({ deviceType: 'cpu' });
    const want = cpu.opSupportLimits();
    cpu.destroy();
    const got = gpu.opSupportLimits();
    for (const key of ['input', 'constant', 'output']) {
      expect({ key, dataTypes: got[key].dataTypes }).toEqual({ key, dataTypes: want[key].dataTypes });
    }
    // Operators are the members whose values hold one limit per operand.
    const ops = Object.keys(want).filter((k) => typeof want[k] === 'object' && !('dataTypes' in want[k]));
    expect(ops.length).toBeGreaterThanOrEqual(95);
    for (const op of ops) {
      expect(Object.keys(got[op])).toEqual(Object.keys(want[op]));
      for (const [operand, limit] of Object.entries(want[op])) {
        expect({ op, operand, ...got[op][operand] }).toEqual({ op, operand, ...limit });
      }
    }
  });

  test('a tensor larger than maxTensorByteLength is refused: as an input with TypeError, as an intermediate at build() with OperationError', async () => {
    const max = gpu.opSupportLimits().maxTensorByteLength;
    const b = new MLGraphBuilder(gpu);
    // A descriptor needs no data: the input is refused when declared.
    const shape = [Math.floor(max / 8) + 1];
    expectThrow(() => b.input('big', { dataType: 'int64', shape }), 'TypeError', `${shape[0] * 8} bytes exceed this context's maxTensorByteLength (${max})`);
    // Small inputs whose broadcast product is just larger than one binding.
    const n = Math.floor(Math.sqrt(max / 8)) + 1;
    const col = b.input('col', { dataType: 'int64', shape: [n, 1] });
    const row = b.input('row', { dataType: 'int64', shape: [1, n] });
    const y = b.reduceMax(b.mul(col, row, { label: 'outer' }));
    const e = await expectReject(b.build({ y }), 'OperationError', `${8 * n * n} bytes`, '(operator labelled "outer")');
    // maxTensorByteLength is the smaller of the largest binding and buffer.
    expect(e.message).toMatch(/exceeds? the GPU's largest (storage binding|buffer) \(\d+ bytes\)/);
  });

  test('a process with a GPU context left alive exits by itself', () => {
    const code = `
      const { ml } = require(${JSON.stringify(ROOT)});
      ml.createContext({ deviceType: 'gpu' }).then(async (c) => {
        const t = await c.createTensor({ dataType: 'float32', shape: [2], readable: true, writable: true });
        c.writeTensor(t, new Float32Array([6, 7]));
        console.log('read', Array.from(new Float32Array(await c.readTensor(t))).join(','));
      });`;
    const started = Date.now();
    const r = spawnSync(process.execPath, ['-e', code], { encoding: 'utf8', timeout: 30000 });
    expect(r.signal).toBeNull();
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('read 6,7');
    expect(Date.now() - started).toBeLessThan(20000);
  });
});
