'use strict';
// The WebNN entry points of webnn-node: contexts, tensors, graphs, dispatch,
// reads and writes, opSupportLimits, the globals, and every operator's
// success path with hand-computed expected values.

const { spawnSync } = require('child_process');
const path = require('path');
const { ml, ML, MLContext, MLGraphBuilder, MLOperand, MLTensor, MLGraph } = require('..');
const {
  tag,
  expectThrow,
  expectReject,
  expectClose,
  buildGraph,
  dispatchGraph,
  run,
  f32,
  constF32,
  cpuContext,
  iota,
  testWithChildNode,
  childJson,
} = require('./helpers');

const ROOT = path.resolve(__dirname, '..');

let context;
beforeAll(async () => {
  context = await cpuContext();
});
afterAll(() => {
  context.destroy();
});

describe('module exports', () => {
  test('exports ml and the ML* classes', () => {
    expect(typeof ml.createContext).toBe('function');
    expect(ml).toBeInstanceOf(ML);
    for (const cls of [MLContext, MLGraphBuilder, MLOperand, MLTensor, MLGraph]) {
      expect(typeof cls).toBe('function');
    }
    expect(Object.prototype.toString.call(ml)).toBe('[object ML]');
  });

  test('MLGraphBuilder has one method per operator', () => {
    const ops = ['add', 'sub', 'mul', 'div', 'max', 'min', 'pow', 'abs', 'neg', 'exp', 'log',
      'sqrt', 'relu', 'sigmoid', 'tanh', 'clamp', 'matmul', 'gemm', 'conv2d', 'averagePool2d',
      'maxPool2d', 'softmax', 'reshape', 'transpose', 'concat', 'slice', 'cast'];
    for (const op of ops) {
      expect(typeof MLGraphBuilder.prototype[op]).toBe('function');
    }
    for (const m of ['input', 'constant', 'build']) {
      expect(typeof MLGraphBuilder.prototype[m]).toBe('function');
    }
  });

  test("require('../global') installs navigator.ml and the ML* globals", () => {
    const api = require('../global');
    expect(api.ml).toBe(ml);
    expect(globalThis.navigator).toBeDefined();
    expect(globalThis.navigator.ml).toBe(ml);
    expect(typeof globalThis.navigator.ml.createContext).toBe('function');
    expect(globalThis.MLGraphBuilder).toBe(MLGraphBuilder);
    expect(globalThis.MLContext).toBe(MLContext);
    expect(globalThis.MLTensor).toBe(MLTensor);
    expect(globalThis.MLOperand).toBe(MLOperand);
    expect(globalThis.MLGraph).toBe(MLGraph);
    expect(globalThis.ML).toBe(ML);
  });

  testWithChildNode("require('../global') works in a fresh process: navigator.ml.createContext()", () => {
    const code = `
      require(${JSON.stringify(path.join(ROOT, 'global.js'))});
      navigator.ml.createContext().then(async (c) => {
        const b = new MLGraphBuilder(c);
        const x = b.input('x', {dataType: 'float32', shape: [2]});
        const g = await b.build({y: b.mul(x, x)});
        const r = c.computeSync(g, {x: new Float32Array([3, 4])}, {y: new Float32Array(2)});
        console.log(JSON.stringify({ ok: c instanceof MLContext, y: Array.from(r.y) }));
      });`;
    const r = spawnSync(process.execPath, ['-e', code], { encoding: 'utf8', timeout: 30000 });
    expect(r.status).toBe(0);
    expect(JSON.parse(r.stdout.trim().split('\n').pop())).toEqual({ ok: true, y: [9, 16] });
  });
});

describe('ml.createContext', () => {
  test('resolves with an MLContext on the CPU by default', async () => {
    const c = await ml.createContext();
    expect(c).toBeInstanceOf(MLContext);
    expect(c.accelerated).toBe(false);
    expect(c.lost).toBeDefined();
    expect(typeof c.lost.then).toBe('function');
    c.destroy();
  });

  test('accepts every documented option', async () => {
    const c = await ml.createContext({
      deviceType: 'cpu',
      powerPreference: 'low-power',
      accelerated: false,
      numThreads: 2,
    });
    expect(c).toBeInstanceOf(MLContext);
    expect(c.accelerated).toBe(false);
    // The context works.
    const { results } = await run(c, { x: f32([3], [1, 2, 3]) }, (b, { x }) => ({ y: b.add(x, x) }));
    expectClose(results.y, [2, 4, 6]);
    c.destroy();
  });

  test('powerPreference high-performance and default are accepted', async () => {
    for (const powerPreference of ['default', 'high-performance']) {
      const c = await ml.createContext({ deviceType: 'cpu', powerPreference });
      expect(c).toBeInstanceOf(MLContext);
      c.destroy();
    }
  });

  test('numThreads: 1 computes the same results', async () => {
    const c = await ml.createContext({ numThreads: 1 });
    const { results } = await run(c, { a: f32([2, 3], iota(6, 1)) }, (b, { a }) => ({
      y: b.matmul(a, constF32(b, [3, 2], [7, 8, 9, 10, 11, 12])),
    }));
    expectClose(results.y, [58, 64, 139, 154]);
    c.destroy();
  });

  // The threads of this process that CPU contexts' pools started, by
  // name (Linux: /proc/self/task/*/comm).
  // The thread counts are taken in a child process of their own: in this
  // one, contexts that other tests left to the garbage collector end their
  // threads at moments no test controls, and a count would race them.
  function childThreads() {
    const code = `
      const fs = require('fs');
      const { ml } = require(${JSON.stringify(ROOT)});
      function poolThreads() {
        let n = 0;
        for (const t of fs.readdirSync('/proc/self/task')) {
          try {
            if (fs.readFileSync('/proc/self/task/' + t + '/comm', 'utf8').startsWith('webnn-cpu-')) n++;
          } catch {
            // The thread ended between the listing and the read.
          }
        }
        return n;
      }
      const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
      // How many threads a context with this numThreads starts, and how
      // many are left once it is destroyed.
      async function threadsFor(numThreads) {
        const c = await ml.createContext({ numThreads });
        const { MLGraphBuilder } = require(${JSON.stringify(ROOT)});
        const b = new MLGraphBuilder(c);
        const x = b.input('x', { dataType: 'float32', shape: [2] });
        const g = await b.build({ y: b.relu(x) });
        const r = await c.compute(g, { x: new Float32Array([1, -2]) }, { y: new Float32Array(2) });
        // A new thread names itself once it runs: count until the number
        // has held for a while.
        let started = poolThreads();
        for (let same = 0; same < 10; ) {
          await sleep(10);
          const now = poolThreads();
          same = now === started ? same + 1 : 0;
          started = now;
        }
        c.destroy();
        for (let i = 0; i < 200 && poolThreads() > 0; i++) await sleep(10);
        return { started, left: poolThreads(), y: Array.from(r.outputs.y) };
      }
      (async () => {
        const out = { before: poolThreads() };
        out.zero = await ml.createContext({ numThreads: 0 }).then(() => 'resolved', (e) => e.name);
        out.afterZero = poolThreads();
        out.tooMany = await ml.createContext({ numThreads: 2 ** 32 }).then(() => 'resolved', (e) => e.name);
        out.one = await threadsFor(1);
        out.max = await threadsFor(2 ** 32 - 1);
        out.bound = await threadsFor(out.max.started);
        out.boundPlusOne = await threadsFor(out.max.started + 1);
        console.log(JSON.stringify(out));
      })().catch((e) => console.log(JSON.stringify({ failed: String(e && e.stack) })));`;
    return childJson(process.execPath, ['-e', code], { timeout: 60000 });
  }

  const linux = process.platform === 'linux';
  (linux ? testWithChildNode : test.skip)('numThreads is clamped to the cores; 0 is a TypeError', () => {
    const { status, stderr, result } = childThreads();
    expect({ status, stderr: status === 0 ? '' : stderr }).toEqual({ status: 0, stderr: '' });
    expect(result.failed).toBeUndefined();
    expect(result.before).toBe(0);
    expect(result.zero).toBe('TypeError');
    expect(result.afterZero).toBe(0);
    expect(result.tooMany).toBe('TypeError');
    for (const k of ['one', 'max', 'bound', 'boundPlusOne']) {
      expect(result[k].y).toEqual([1, 0]);
      expect(result[k].left).toBe(0);
    }
    expect(result.one.started).toBe(1);
    // The bound: what the largest count an option can say gets.
    const bound = result.max.started;
    expect(bound).toBeGreaterThanOrEqual(1);
    expect(bound).toBeLessThanOrEqual(require('os').availableParallelism());
    expect(result.bound.started).toBe(bound);
    expect(result.boundPlusOne.started).toBe(bound);
  });

  test('destroy() resolves lost with a message and is idempotent', async () => {
    const c = await ml.createContext();
    const lost = c.lost;
    expect(c.lost).toBe(lost);
    c.destroy();
    const info = await lost;
    expect(typeof info.message).toBe('string');
    c.destroy();
  });

  test('a destroyed context refuses new work with InvalidStateError', async () => {
    const c = await ml.createContext();
    const t = await c.createTensor({ dataType: 'float32', shape: [1], readable: true, writable: true });
    c.destroy();
    await expectReject(c.createTensor({ dataType: 'float32', shape: [1] }), 'InvalidStateError');
    expectThrow(() => new MLGraphBuilder(c), 'InvalidStateError');
    await expectReject(c.readTensor(t), 'InvalidStateError');
  });
});

describe('MLTensor', () => {
  test('createTensor resolves with an MLTensor carrying its descriptor', async () => {
    const t = await context.createTensor({ dataType: 'float32', shape: [2, 3], readable: true, writable: true });
    expect(t).toBeInstanceOf(MLTensor);
    expect(t.dataType).toBe('float32');
    expect(Array.from(t.shape)).toEqual([2, 3]);
    expect(t.readable).toBe(true);
    expect(t.writable).toBe(true);
    expect(t.constant).toBe(false);
    t.destroy();
  });

  test('readable and writable default to false', async () => {
    const t = await context.createTensor({ dataType: 'int32', shape: [4] });
    expect(t.readable).toBe(false);
    expect(t.writable).toBe(false);
    expect(t.constant).toBe(false);
    t.destroy();
  });

  test('a new tensor reads as zeros', async () => {
    const t = await context.createTensor({ dataType: 'float32', shape: [3], readable: true });
    expect(Array.from(new Float32Array(await context.readTensor(t)))).toEqual([0, 0, 0]);
    t.destroy();
  });

  test('writeTensor then readTensor round-trips, readTensor returns an ArrayBuffer of exactly the byte length', async () => {
    const t = await context.createTensor({ dataType: 'float32', shape: [2, 2], readable: true, writable: true });
    expect(context.writeTensor(t, new Float32Array([1.5, -2, 3, 4]))).toBeUndefined();
    const ab = await context.readTensor(t);
    expect(tag(ab)).toBe('ArrayBuffer');
    expect(ab.byteLength).toBe(16);
    expect(Array.from(new Float32Array(ab))).toEqual([1.5, -2, 3, 4]);
    t.destroy();
  });

  test('readTensor byte lengths for several data types', async () => {
    const cases = [
      ['float32', [3], 12],
      ['float16', [3], 6],
      ['int32', [2, 2], 16],
      ['uint32', [5], 20],
      ['int64', [2], 16],
      ['uint64', [1], 8],
      ['int8', [7], 7],
      ['uint8', [3, 3], 9],
      ['float32', [], 4],
    ];
    for (const [dataType, shape, bytes] of cases) {
      const t = await context.createTensor({ dataType, shape, readable: true });
      const ab = await context.readTensor(t);
      expect(tag(ab)).toBe('ArrayBuffer');
      expect([dataType, ab.byteLength]).toEqual([dataType, bytes]);
      t.destroy();
    }
  });

  test('writeTensor accepts an ArrayBuffer, a DataView, a Uint8Array and a shared view', async () => {
    const t = await context.createTensor({ dataType: 'int32', shape: [2], readable: true, writable: true });
    const src = new Int32Array([7, -9]);
    context.writeTensor(t, src.buffer.slice(0));
    expect(Array.from(new Int32Array(await context.readTensor(t)))).toEqual([7, -9]);
    context.writeTensor(t, new DataView(new Int32Array([1, 2]).buffer));
    expect(Array.from(new Int32Array(await context.readTensor(t)))).toEqual([1, 2]);
    context.writeTensor(t, new Uint8Array(new Int32Array([3, 4]).buffer));
    expect(Array.from(new Int32Array(await context.readTensor(t)))).toEqual([3, 4]);
    // A view over a SharedArrayBuffer.
    const shared = new Int32Array(new SharedArrayBuffer(16), 4, 2);
    shared.set([8, 9]);
    context.writeTensor(t, shared);
    expect(Array.from(new Int32Array(await context.readTensor(t)))).toEqual([8, 9]);
    t.destroy();
  });

  test('writeTensor accepts a SharedArrayBuffer itself', async () => {
    const t = await context.createTensor({ dataType: 'int32', shape: [2], readable: true, writable: true });
    const sab = new SharedArrayBuffer(8);
    new Int32Array(sab).set([5, 6]);
    context.writeTensor(t, sab);
    expect(Array.from(new Int32Array(await context.readTensor(t)))).toEqual([5, 6]);
    t.destroy();
  });

  test('writeTensor copies the data at call time', async () => {
    const t = await context.createTensor({ dataType: 'float32', shape: [2], readable: true, writable: true });
    const data = new Float32Array([1, 2]);
    context.writeTensor(t, data);
    data[0] = 100;
    expect(Array.from(new Float32Array(await context.readTensor(t)))).toEqual([1, 2]);
    t.destroy();
  });

  test('writeTensor to a non-writable tensor throws TypeError', async () => {
    const t = await context.createTensor({ dataType: 'float32', shape: [2], readable: true });
    expectThrow(() => context.writeTensor(t, new Float32Array(2)), 'TypeError');
    t.destroy();
  });

  test('writeTensor with the wrong byte length or view type throws TypeError', async () => {
    const t = await context.createTensor({ dataType: 'float32', shape: [2], writable: true });
    expectThrow(() => context.writeTensor(t, new Float32Array(3)), 'TypeError');
    expectThrow(() => context.writeTensor(t, new Int32Array(2)), 'TypeError');
    expectThrow(() => context.writeTensor(t, [1, 2]), 'TypeError');
    expectThrow(() => context.writeTensor({}, new Float32Array(2)), 'TypeError');
    t.destroy();
  });

  test('readTensor of a non-readable tensor rejects TypeError', async () => {
    const t = await context.createTensor({ dataType: 'float32', shape: [2], writable: true });
    await expectReject(context.readTensor(t), 'TypeError');
    t.destroy();
  });

  test('tensor.destroy() then readTensor rejects TypeError; destroy is idempotent', async () => {
    const t = await context.createTensor({ dataType: 'float32', shape: [2], readable: true });
    t.destroy();
    t.destroy();
    await expectReject(context.readTensor(t), 'TypeError');
    await expectReject(context.readTensor(t, new Float32Array(2)), 'TypeError');
    expectThrow(() => context.writeTensor(t, new Float32Array(2)), 'TypeError');
  });

  test('a tensor of another context is refused with TypeError', async () => {
    const other = await ml.createContext();
    const t = await other.createTensor({ dataType: 'float32', shape: [1], readable: true, writable: true });
    await expectReject(context.readTensor(t), 'TypeError');
    expectThrow(() => context.writeTensor(t, new Float32Array(1)), 'TypeError');
    t.destroy();
    other.destroy();
  });

  test('readTensor(tensor, view) fills the view and resolves undefined', async () => {
    const t = await context.createTensor({ dataType: 'float32', shape: [3], readable: true, writable: true });
    context.writeTensor(t, new Float32Array([1, 2, 3]));
    const view = new Float32Array(3);
    await expect(context.readTensor(t, view)).resolves.toBeUndefined();
    expect(Array.from(view)).toEqual([1, 2, 3]);
    // An ArrayBuffer and a Uint8Array work too.
    const ab = new ArrayBuffer(12);
    await context.readTensor(t, ab);
    expect(Array.from(new Float32Array(ab))).toEqual([1, 2, 3]);
    const bytes = new Uint8Array(12);
    await context.readTensor(t, bytes);
    expect(Array.from(new Float32Array(bytes.buffer))).toEqual([1, 2, 3]);
    t.destroy();
  });

  test('readTensor(tensor, view) fills a view at an offset over a SharedArrayBuffer', async () => {
    const t = await context.createTensor({ dataType: 'int32', shape: [2], readable: true, writable: true });
    context.writeTensor(t, new Int32Array([11, -22]));
    const sab = new SharedArrayBuffer(16);
    const whole = new Int32Array(sab);
    whole.fill(99);
    const view = new Int32Array(sab, 4, 2);
    await context.readTensor(t, view);
    expect(Array.from(whole)).toEqual([99, 11, -22, 99]);
    t.destroy();
  });

  test('readTensor(tensor, sharedArrayBuffer) fills a whole SharedArrayBuffer', async () => {
    const t = await context.createTensor({ dataType: 'int32', shape: [2], readable: true, writable: true });
    context.writeTensor(t, new Int32Array([11, -22]));
    const sab2 = new SharedArrayBuffer(8);
    await context.readTensor(t, sab2);
    expect(Array.from(new Int32Array(sab2))).toEqual([11, -22]);
    t.destroy();
  });

  test('readTensor(tensor, view) with a wrong size or type rejects TypeError and leaves the view alone', async () => {
    const t = await context.createTensor({ dataType: 'float32', shape: [2], readable: true, writable: true });
    context.writeTensor(t, new Float32Array([5, 6]));
    const small = new Float32Array([9]);
    await expectReject(context.readTensor(t, small), 'TypeError');
    expect(Array.from(small)).toEqual([9]);
    const wrongType = new Int32Array([9, 9]);
    await expectReject(context.readTensor(t, wrongType), 'TypeError');
    expect(Array.from(wrongType)).toEqual([9, 9]);
    await expectReject(context.readTensor(t, 'not a buffer'), 'TypeError');
    t.destroy();
  });

  test('createConstantTensor makes a constant tensor usable as constant(tensor)', async () => {
    const ct = await context.createConstantTensor({ dataType: 'float32', shape: [3] }, new Float32Array([10, 20, 30]));
    expect(ct).toBeInstanceOf(MLTensor);
    expect(ct.constant).toBe(true);
    expect(ct.readable).toBe(false);
    expect(ct.writable).toBe(false);
    expect(ct.dataType).toBe('float32');
    expect(Array.from(ct.shape)).toEqual([3]);
    const { results } = await run(context, { x: f32([2, 3], [1, 2, 3, 4, 5, 6]) }, (b, { x }) => ({
      y: b.add(x, b.constant(ct)),
    }));
    expectClose(results.y, [11, 22, 33, 14, 25, 36]);
    ct.destroy();
  });

  test('createConstantTensor with data of the wrong size rejects TypeError', async () => {
    await expectReject(
      context.createConstantTensor({ dataType: 'float32', shape: [3] }, new Float32Array(2)),
      'TypeError',
    );
  });

  test('constant(tensor) of a non-constant tensor throws TypeError', async () => {
    const t = await context.createTensor({ dataType: 'float32', shape: [1], writable: true });
    const b = new MLGraphBuilder(context);
    expectThrow(() => b.constant(t), 'TypeError', 'constant');
    t.destroy();
  });

  test('descriptors with extra members (dimensions, usage: undefined) are accepted', async () => {
    const t = await context.createTensor({
      dataType: 'float32',
      shape: [2],
      dimensions: [7, 7, 7],
      usage: undefined,
      readable: true,
      writable: true,
      somethingElse: 'ignored',
    });
    expect(Array.from(t.shape)).toEqual([2]);
    t.destroy();
    const b = new MLGraphBuilder(context);
    const x = b.input('x', { dataType: 'float32', shape: [2], dimensions: [9], usage: undefined });
    expect(Array.from(x.shape)).toEqual([2]);
    const c = b.constant({ dataType: 'float32', shape: [2], dimensions: [5], extra: 1 }, new Float32Array([1, 2]));
    expect(Array.from(c.shape)).toEqual([2]);
  });
});

describe('MLGraphBuilder basics', () => {
  test('input() returns an MLOperand with its dataType and shape', () => {
    const b = new MLGraphBuilder(context);
    const x = b.input('x', { dataType: 'int8', shape: [1, 2, 3] });
    expect(x).toBeInstanceOf(MLOperand);
    expect(x.dataType).toBe('int8');
    expect(Array.from(x.shape)).toEqual([1, 2, 3]);
    const s = b.input('s', { dataType: 'float32', shape: [] });
    expect(Array.from(s.shape)).toEqual([]);
  });

  test('constant(type, value) makes a scalar', async () => {
    const b = new MLGraphBuilder(context);
    const two = b.constant('float32', 2);
    expect(two.dataType).toBe('float32');
    expect(Array.from(two.shape)).toEqual([]);
    const i = b.constant('int32', 7);
    expect(i.dataType).toBe('int32');
    const x = b.input('x', { dataType: 'float32', shape: [3] });
    const y = b.mul(x, two);
    expect(Array.from(y.shape)).toEqual([3]);
    const graph = await b.build({ y });
    const r = await dispatchGraph(context, graph, { x: f32([3], [1, -2, 3]) }, { y: { dataType: 'float32', shape: [3] } });
    expectClose(r.y, [2, -4, 6]);
  });

  test('constant(type, value) accepts a bigint value (MLNumber) for int64', async () => {
    const b = new MLGraphBuilder(context);
    const big = b.constant('int64', 5n);
    expect(big.dataType).toBe('int64');
    expect(Array.from(big.shape)).toEqual([]);
    const x = b.input('x', { dataType: 'int64', shape: [2] });
    const graph = await b.build({ y: b.add(x, big), z: b.clamp(x, { minValue: 0n, maxValue: 10n }) });
    const r = await dispatchGraph(
      context, graph,
      { x: { dataType: 'int64', shape: [2], data: [-7n, 40n] } },
      { y: { dataType: 'int64', shape: [2] }, z: { dataType: 'int64', shape: [2] } },
    );
    expect(Array.from(r.y)).toEqual([-2n, 45n]);
    expect(Array.from(r.z)).toEqual([0n, 10n]);
  });

  test('constant(descriptor, buffer) copies the buffer at call time', async () => {
    const b = new MLGraphBuilder(context);
    const data = new Float32Array([1, 2]);
    const c = b.constant({ dataType: 'float32', shape: [2] }, data);
    data[0] = 50;
    const x = b.input('x', { dataType: 'float32', shape: [2] });
    const graph = await b.build({ y: b.add(x, c) });
    const r = await dispatchGraph(context, graph, { x: f32([2], [0, 0]) }, { y: { dataType: 'float32', shape: [2] } });
    expectClose(r.y, [1, 2]);
  });

  test('constant(descriptor, buffer) accepts an ArrayBuffer and a Uint8Array', async () => {
    const b = new MLGraphBuilder(context);
    const c1 = b.constant({ dataType: 'int32', shape: [2] }, new Int32Array([1, 2]).buffer);
    const c2 = b.constant({ dataType: 'int32', shape: [2] }, new Uint8Array(new Int32Array([10, 20]).buffer));
    const x = b.input('x', { dataType: 'int32', shape: [2] });
    const graph = await b.build({ y: b.add(b.add(x, c1), c2) });
    const r = await dispatchGraph(
      context, graph,
      { x: { dataType: 'int32', shape: [2], data: [100, 200] } },
      { y: { dataType: 'int32', shape: [2] } },
    );
    expect(Array.from(r.y)).toEqual([111, 222]);
  });

  test('build() resolves with an MLGraph; graph.destroy() is idempotent', async () => {
    const b = new MLGraphBuilder(context);
    const x = b.input('x', { dataType: 'float32', shape: [1] });
    const graph = await b.build({ y: b.relu(x) });
    expect(graph).toBeInstanceOf(MLGraph);
    graph.destroy();
    graph.destroy();
  });

  test('build() with several outputs; unused inputs are not required', async () => {
    const { graph, outputs } = await buildGraph(context, (b) => {
      const x = b.input('x', { dataType: 'float32', shape: [2] });
      b.input('unused', { dataType: 'float32', shape: [5] });
      return { s: b.add(x, x), p: b.mul(x, x) };
    });
    const r = await dispatchGraph(context, graph, { x: f32([2], [3, -4]) }, outputs);
    expectClose(r.s, [6, -8]);
    expectClose(r.p, [9, 16]);
  });
});

describe('dispatch', () => {
  test('dispatch returns undefined and the outputs can be read', async () => {
    const { graph } = await buildGraph(context, (b) => {
      const x = b.input('x', { dataType: 'float32', shape: [2] });
      return { y: b.neg(x) };
    });
    const x = await context.createTensor({ dataType: 'float32', shape: [2], writable: true });
    const y = await context.createTensor({ dataType: 'float32', shape: [2], readable: true });
    context.writeTensor(x, new Float32Array([1, -2]));
    expect(context.dispatch(graph, { x }, { y })).toBeUndefined();
    expect(Array.from(new Float32Array(await context.readTensor(y)))).toEqual([-1, 2]);
    // Re-dispatch with new input data.
    context.writeTensor(x, new Float32Array([5, 6]));
    context.dispatch(graph, { x }, { y });
    expect(Array.from(new Float32Array(await context.readTensor(y)))).toEqual([-5, -6]);
    x.destroy();
    y.destroy();
  });

  test('chained dispatches without await: A writes t1, B reads t1 and writes t2', async () => {
    const { graph: gA } = await buildGraph(context, (b) => {
      const x = b.input('x', { dataType: 'float32', shape: [3] });
      return { y: b.add(x, b.constant('float32', 1)) };
    });
    const { graph: gB } = await buildGraph(context, (b) => {
      const x = b.input('x', { dataType: 'float32', shape: [3] });
      return { y: b.mul(x, b.constant('float32', 10)) };
    });
    const desc = { dataType: 'float32', shape: [3] };
    const [t0, t1, t2] = await Promise.all([
      context.createTensor({ ...desc, writable: true }),
      context.createTensor({ ...desc, readable: true }),
      context.createTensor({ ...desc, readable: true }),
    ]);
    context.writeTensor(t0, new Float32Array([1, 2, 3]));
    context.dispatch(gA, { x: t0 }, { y: t1 });
    context.dispatch(gB, { x: t1 }, { y: t2 });
    context.dispatch(gA, { x: t2 }, { y: t1 });
    const [r1, r2] = await Promise.all([context.readTensor(t1), context.readTensor(t2)]);
    expect(Array.from(new Float32Array(r2))).toEqual([20, 30, 40]);
    expect(Array.from(new Float32Array(r1))).toEqual([21, 31, 41]);
    for (const t of [t0, t1, t2]) t.destroy();
  });

  test('a write queued after a dispatch does not affect that dispatch', async () => {
    const { graph } = await buildGraph(context, (b) => {
      const x = b.input('x', { dataType: 'float32', shape: [1] });
      return { y: b.mul(x, b.constant('float32', 2)) };
    });
    const x = await context.createTensor({ dataType: 'float32', shape: [1], writable: true });
    const y = await context.createTensor({ dataType: 'float32', shape: [1], readable: true });
    context.writeTensor(x, new Float32Array([3]));
    context.dispatch(graph, { x }, { y });
    context.writeTensor(x, new Float32Array([100]));
    const read = context.readTensor(y);
    expect(Array.from(new Float32Array(await read))).toEqual([6]);
    x.destroy();
    y.destroy();
  });

  test('dispatch with a tensor of the wrong shape throws TypeError', async () => {
    const { graph } = await buildGraph(context, (b) => {
      const x = b.input('x', { dataType: 'float32', shape: [2, 2] });
      return { y: b.abs(x) };
    });
    const good = await context.createTensor({ dataType: 'float32', shape: [2, 2], writable: true });
    const wrongShape = await context.createTensor({ dataType: 'float32', shape: [4], writable: true });
    const wrongType = await context.createTensor({ dataType: 'int32', shape: [2, 2], writable: true });
    const y = await context.createTensor({ dataType: 'float32', shape: [2, 2], readable: true });
    const yWrong = await context.createTensor({ dataType: 'float32', shape: [2, 3], readable: true });
    expectThrow(() => context.dispatch(graph, { x: wrongShape }, { y }), 'TypeError');
    expectThrow(() => context.dispatch(graph, { x: wrongType }, { y }), 'TypeError');
    expectThrow(() => context.dispatch(graph, { x: good }, { y: yWrong }), 'TypeError');
    for (const t of [good, wrongShape, wrongType, y, yWrong]) t.destroy();
  });

  test('dispatch with missing, extra or misnamed tensors throws TypeError', async () => {
    const { graph } = await buildGraph(context, (b) => {
      const x = b.input('x', { dataType: 'float32', shape: [1] });
      return { y: b.abs(x) };
    });
    const x = await context.createTensor({ dataType: 'float32', shape: [1], writable: true });
    const y = await context.createTensor({ dataType: 'float32', shape: [1], readable: true });
    const z = await context.createTensor({ dataType: 'float32', shape: [1], readable: true });
    expectThrow(() => context.dispatch(graph, {}, { y }), 'TypeError');
    expectThrow(() => context.dispatch(graph, { x }, {}), 'TypeError');
    expectThrow(() => context.dispatch(graph, { x, extra: z }, { y }), 'TypeError');
    expectThrow(() => context.dispatch(graph, { wrong: x }, { y }), 'TypeError');
    expectThrow(() => context.dispatch(graph, { x: new Float32Array(1) }, { y }), 'TypeError');
    // The same tensor as input and output.
    expectThrow(() => context.dispatch(graph, { x }, { y: x }), 'TypeError');
    expectThrow(() => context.dispatch({}, { x }, { y }), 'TypeError');
    for (const t of [x, y, z]) t.destroy();
  });

  test('dispatch with a destroyed tensor throws TypeError', async () => {
    const { graph } = await buildGraph(context, (b) => {
      const x = b.input('x', { dataType: 'float32', shape: [1] });
      return { y: b.abs(x) };
    });
    const x = await context.createTensor({ dataType: 'float32', shape: [1], writable: true });
    const y = await context.createTensor({ dataType: 'float32', shape: [1], readable: true });
    x.destroy();
    expectThrow(() => context.dispatch(graph, { x }, { y }), 'TypeError');
    y.destroy();
  });

  test('graph.destroy() then dispatch throws InvalidStateError', async () => {
    const { graph } = await buildGraph(context, (b) => {
      const x = b.input('x', { dataType: 'float32', shape: [1] });
      return { y: b.abs(x) };
    });
    const x = await context.createTensor({ dataType: 'float32', shape: [1], writable: true });
    const y = await context.createTensor({ dataType: 'float32', shape: [1], readable: true });
    graph.destroy();
    expectThrow(() => context.dispatch(graph, { x }, { y }), 'InvalidStateError');
    x.destroy();
    y.destroy();
  });

  test('a graph of another context is refused with TypeError', async () => {
    const other = await ml.createContext();
    const { graph } = await buildGraph(other, (b) => {
      const x = b.input('x', { dataType: 'float32', shape: [1] });
      return { y: b.abs(x) };
    });
    const x = await context.createTensor({ dataType: 'float32', shape: [1], writable: true });
    const y = await context.createTensor({ dataType: 'float32', shape: [1], readable: true });
    expectThrow(() => context.dispatch(graph, { x }, { y }), 'TypeError');
    x.destroy();
    y.destroy();
    other.destroy();
  });

  test('tensor.destroy() after dispatch: queued work still completes for other tensors', async () => {
    const { graph } = await buildGraph(context, (b) => {
      const x = b.input('x', { dataType: 'float32', shape: [2] });
      return { y: b.sqrt(x) };
    });
    const x = await context.createTensor({ dataType: 'float32', shape: [2], writable: true });
    const y = await context.createTensor({ dataType: 'float32', shape: [2], readable: true });
    context.writeTensor(x, new Float32Array([4, 9]));
    context.dispatch(graph, { x }, { y });
    x.destroy();
    expect(Array.from(new Float32Array(await context.readTensor(y)))).toEqual([2, 3]);
    y.destroy();
  });
});

describe('opSupportLimits', () => {
  const OPERATORS = {
    add: ['a', 'b', 'output'], sub: ['a', 'b', 'output'], mul: ['a', 'b', 'output'],
    div: ['a', 'b', 'output'], max: ['a', 'b', 'output'], min: ['a', 'b', 'output'],
    pow: ['a', 'b', 'output'], matmul: ['a', 'b', 'output'],
    abs: ['input', 'output'], neg: ['input', 'output'], exp: ['input', 'output'],
    log: ['input', 'output'], sqrt: ['input', 'output'], relu: ['input', 'output'],
    sigmoid: ['input', 'output'], tanh: ['input', 'output'], clamp: ['input', 'output'],
    softmax: ['input', 'output'], reshape: ['input', 'output'], transpose: ['input', 'output'],
    slice: ['input', 'output'], cast: ['input', 'output'],
    averagePool2d: ['input', 'output'], maxPool2d: ['input', 'output'],
    concat: ['inputs', 'output'],
    gemm: ['a', 'b', 'c', 'output'],
    conv2d: ['input', 'filter', 'bias', 'output'],
  };
  const TYPES = ['float32', 'float16', 'int32', 'uint32', 'int64', 'uint64', 'int8', 'uint8', 'int4', 'uint4'];

  function checkLimit(l, where) {
    expect({ where, isObject: typeof l === 'object' && l !== null }).toEqual({ where, isObject: true });
    expect(Array.isArray(l.dataTypes)).toBe(true);
    for (const t of l.dataTypes) expect(TYPES).toContain(t);
    expect(typeof l.rankRange).toBe('object');
    expect(Number.isInteger(l.rankRange.min)).toBe(true);
    expect(Number.isInteger(l.rankRange.max)).toBe(true);
    expect(l.rankRange.min).toBeLessThanOrEqual(l.rankRange.max);
  }

  test('has the global members', () => {
    const limits = context.opSupportLimits();
    expect(['nchw', 'nhwc']).toContain(limits.preferredInputLayout);
    expect(typeof limits.maxTensorByteLength).toBe('number');
    expect(limits.maxTensorByteLength).toBeGreaterThan(0);
    for (const key of ['input', 'constant', 'output']) {
      checkLimit(limits[key], key);
      expect(limits[key].dataTypes).toEqual(expect.arrayContaining(['float32', 'int32']));
    }
  });

  test('has dataTypes and rankRange for every operator and operand', () => {
    const limits = context.opSupportLimits();
    for (const [op, operands] of Object.entries(OPERATORS)) {
      expect({ op, present: typeof limits[op] }).toEqual({ op, present: 'object' });
      for (const name of operands) checkLimit(limits[op][name], `${op}.${name}`);
    }
  });

  test('reports the ranks and types of the spec for a few operators', () => {
    const limits = context.opSupportLimits();
    expect(limits.conv2d.input.rankRange).toEqual({ min: 4, max: 4 });
    expect(limits.conv2d.bias.rankRange).toEqual({ min: 1, max: 1 });
    expect(limits.gemm.a.rankRange).toEqual({ min: 2, max: 2 });
    expect(limits.matmul.a.rankRange.min).toBe(2);
    expect(limits.add.a.dataTypes).toContain('float32');
    expect(limits.add.a.dataTypes).toContain('int32');
    expect(limits.softmax.input.dataTypes).toContain('float32');
    expect(limits.softmax.input.dataTypes).not.toContain('int32');
    expect(limits.cast.input.dataTypes).toEqual(expect.arrayContaining(['float32', 'int32', 'uint8']));
  });

  test('returns a fresh object each call', () => {
    const a = context.opSupportLimits();
    a.add = null;
    expect(context.opSupportLimits().add).not.toBeNull();
  });
});

describe('process lifetime', () => {
  const addon = JSON.stringify(ROOT);

  function runChild(code, timeout = 15000) {
    const started = Date.now();
    const r = spawnSync(process.execPath, ['-e', code], { encoding: 'utf8', timeout });
    return { ...r, elapsed: Date.now() - started };
  }

  testWithChildNode('a script that leaves a context and a tensor alive exits by itself with code 0', () => {
    const r = runChild(`
      const { ml } = require(${addon});
      (async () => {
        const c = await ml.createContext();
        const t = await c.createTensor({ dataType: 'float32', shape: [4], readable: true, writable: true });
        c.writeTensor(t, new Float32Array([1, 2, 3, 4]));
        const ab = await c.readTensor(t);
        console.log('read', new Float32Array(ab).join(','));
      })();`);
    expect(r.error).toBeUndefined();
    expect(r.signal).toBeNull();
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('read 1,2,3,4');
    expect(r.elapsed).toBeLessThan(10000);
  });

  testWithChildNode('a script with a built graph and pending-free context exits by itself', () => {
    const r = runChild(`
      const { ml, MLGraphBuilder } = require(${addon});
      (async () => {
        const c = await ml.createContext();
        const b = new MLGraphBuilder(c);
        const x = b.input('x', { dataType: 'float32', shape: [2] });
        const g = await b.build({ y: b.add(x, x) });
        const r = await c.compute(g, { x: new Float32Array([1, 2]) }, { y: new Float32Array(2) });
        console.log('y', Array.from(r.outputs.y).join(','));
      })();`);
    expect(r.error).toBeUndefined();
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('y 2,4');
    expect(r.elapsed).toBeLessThan(10000);
  });

  testWithChildNode('a pending read keeps the process alive until it settles', () => {
    // Nothing but the read promise is pending: the process must not exit
    // before it settles.
    const r = runChild(`
      const { ml } = require(${addon});
      ml.createContext().then(async (c) => {
        const u = await c.createTensor({ dataType: 'int32', shape: [1], readable: true, writable: true });
        c.writeTensor(u, new Int32Array([42]));
        c.readTensor(u).then((ab) => console.log('value', new Int32Array(ab)[0]));
      });`);
    expect(r.error).toBeUndefined();
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('value 42');
    expect(r.elapsed).toBeLessThan(10000);
  });
});

describe('operators (hand-computed results)', () => {
  describe('element-wise binary', () => {
    test('add with broadcasting [2,3] + [3] and [2,3] + [2,1]', async () => {
      const { results, outputs } = await run(context, { a: f32([2, 3], [1, 2, 3, 4, 5, 6]) }, (b, { a }) => ({
        row: b.add(a, constF32(b, [3], [10, 20, 30])),
        col: b.add(a, constF32(b, [2, 1], [100, 200])),
      }));
      expect(outputs.row).toEqual({ dataType: 'float32', shape: [2, 3] });
      expect(outputs.col).toEqual({ dataType: 'float32', shape: [2, 3] });
      expectClose(results.row, [11, 22, 33, 14, 25, 36]);
      expectClose(results.col, [101, 102, 103, 204, 205, 206]);
    });

    test('mul broadcasts both ways: [2,1] * [1,3] -> [2,3]', async () => {
      const { results, outputs } = await run(context, { a: f32([2, 1], [1, 2]), b: f32([1, 3], [3, 4, 5]) },
        (b, { a, b: c }) => ({ y: b.mul(a, c) }));
      expect(outputs.y.shape).toEqual([2, 3]);
      expectClose(results.y, [3, 4, 5, 6, 8, 10]);
    });

    test('mul by a rank-0 scalar and a scalar result', async () => {
      const { results, outputs } = await run(context, { s: f32([], [3]), v: f32([2, 2], [1, 2, 3, 4]) },
        (b, { s, v }) => ({ y: b.mul(v, s), z: b.add(s, b.constant('float32', 0.5)) }));
      expect(outputs.z.shape).toEqual([]);
      expectClose(results.y, [3, 6, 9, 12]);
      expectClose(results.z, [3.5]);
    });

    test('sub, div, max, min, pow', async () => {
      const { results } = await run(context, { a: f32([4], [1, 4, 9, 16]), b: f32([4], [2, 2, 3, 4]) },
        (bd, { a, b }) => ({
          sub: bd.sub(a, b), div: bd.div(a, b), max: bd.max(a, b), min: bd.min(a, b), pow: bd.pow(a, b),
        }));
      expectClose(results.sub, [-1, 2, 6, 12]);
      expectClose(results.div, [0.5, 2, 3, 4]);
      expectClose(results.max, [2, 4, 9, 16]);
      expectClose(results.min, [1, 2, 3, 4]);
      expectClose(results.pow, [1, 16, 729, 65536]);
    });

    test('pow with a fractional exponent and a broadcast exponent', async () => {
      const { results } = await run(context, { a: f32([3], [4, 9, 16]) },
        (b, { a }) => ({ y: b.pow(a, b.constant('float32', 0.5)) }));
      expectClose(results.y, [2, 3, 4]);
    });

    test('int32 add, sub, mul, div, max, min', async () => {
      const i32 = (shape, data) => ({ dataType: 'int32', shape, data: Int32Array.from(data) });
      const { results, outputs } = await run(context, { a: i32([4], [7, -7, 10, 3]), b: i32([4], [2, 2, -3, 5]) },
        (bd, { a, b }) => ({
          add: bd.add(a, b), sub: bd.sub(a, b), mul: bd.mul(a, b), max: bd.max(a, b), min: bd.min(a, b),
        }));
      expect(outputs.add.dataType).toBe('int32');
      expect(Array.from(results.add)).toEqual([9, -5, 7, 8]);
      expect(Array.from(results.sub)).toEqual([5, -9, 13, -2]);
      expect(Array.from(results.mul)).toEqual([14, -14, -30, 15]);
      expect(Array.from(results.max)).toEqual([7, 2, 10, 5]);
      expect(Array.from(results.min)).toEqual([2, -7, -3, 3]);
    });

    test('broadcast to rank 3: [2,1,2] + [3,1] -> [2,3,2]', async () => {
      const { results, outputs } = await run(context, { a: f32([2, 1, 2], [1, 2, 3, 4]), b: f32([3, 1], [10, 20, 30]) },
        (bd, { a, b }) => ({ y: bd.add(a, b) }));
      expect(outputs.y.shape).toEqual([2, 3, 2]);
      expectClose(results.y, [11, 12, 21, 22, 31, 32, 13, 14, 23, 24, 33, 34]);
    });
  });

  describe('element-wise unary', () => {
    test('abs, neg, relu', async () => {
      const { results } = await run(context, { x: f32([4], [-1.5, 0, 2, -3]) }, (b, { x }) => ({
        abs: b.abs(x), neg: b.neg(x), relu: b.relu(x),
      }));
      expectClose(results.abs, [1.5, 0, 2, 3]);
      expectClose(results.neg, [1.5, 0, -2, 3]);
      expectClose(results.relu, [0, 0, 2, 0]);
    });

    test('exp, log, sqrt', async () => {
      const { results } = await run(context, { x: f32([3], [0, 1, 2]), p: f32([3], [1, Math.E, 4]) },
        (b, { x, p }) => ({ exp: b.exp(x), log: b.log(p), sqrt: b.sqrt(p) }));
      expectClose(results.exp, [1, Math.E, Math.E * Math.E]);
      expectClose(results.log, [0, 1, Math.log(4)]);
      expectClose(results.sqrt, [1, Math.sqrt(Math.E), 2]);
    });

    test('sigmoid and tanh', async () => {
      // sigmoid(ln 3) = 1 / (1 + 1/3) = 0.75; tanh(ln 2) = (2 - 1/2) / (2 + 1/2) = 0.6.
      const { results } = await run(context, { x: f32([3], [0, Math.log(3), -Math.log(3)]), t: f32([3], [0, Math.log(2), -Math.log(2)]) },
        (b, { x, t }) => ({ sigmoid: b.sigmoid(x), tanh: b.tanh(t) }));
      expectClose(results.sigmoid, [0.5, 0.75, 0.25]);
      expectClose(results.tanh, [0, 0.6, -0.6]);
    });

    test('int32 abs, neg and relu', async () => {
      const { results } = await run(context, { x: { dataType: 'int32', shape: [3], data: [-5, 0, 7] } },
        (b, { x }) => ({ abs: b.abs(x), neg: b.neg(x), relu: b.relu(x) }));
      expect(Array.from(results.abs)).toEqual([5, 0, 7]);
      expect(Array.from(results.neg)).toEqual([5, 0, -7]);
      expect(Array.from(results.relu)).toEqual([0, 0, 7]);
    });
  });

  describe('clamp', () => {
    test('with minValue and maxValue, with only one bound, and with none', async () => {
      const { results } = await run(context, { x: f32([5], [-2, -0.5, 0.5, 3, 1]) }, (b, { x }) => ({
        both: b.clamp(x, { minValue: -1, maxValue: 1 }),
        low: b.clamp(x, { minValue: 0 }),
        high: b.clamp(x, { maxValue: 0.5 }),
        none: b.clamp(x),
      }));
      expectClose(results.both, [-1, -0.5, 0.5, 1, 1]);
      expectClose(results.low, [0, 0, 0.5, 3, 1]);
      expectClose(results.high, [-2, -0.5, 0.5, 0.5, 0.5]);
      expectClose(results.none, [-2, -0.5, 0.5, 3, 1]);
    });

    test('int32 clamp and minValue == maxValue', async () => {
      const { results } = await run(context, { x: { dataType: 'int32', shape: [4], data: [-10, 3, 7, 100] } },
        (b, { x }) => ({ y: b.clamp(x, { minValue: 0, maxValue: 10 }), same: b.clamp(x, { minValue: 5, maxValue: 5 }) }));
      expect(Array.from(results.y)).toEqual([0, 3, 7, 10]);
      expect(Array.from(results.same)).toEqual([5, 5, 5, 5]);
    });
  });

  describe('matmul', () => {
    test('2x3 · 3x2', async () => {
      const { results, outputs } = await run(context, { a: f32([2, 3], [1, 2, 3, 4, 5, 6]), b: f32([3, 2], [7, 8, 9, 10, 11, 12]) },
        (bd, { a, b }) => ({ y: bd.matmul(a, b) }));
      expect(outputs.y).toEqual({ dataType: 'float32', shape: [2, 2] });
      expectClose(results.y, [58, 64, 139, 154]);
    });

    test('batched [2,2,2] · [2,2] broadcasts b over the batch', async () => {
      const { results, outputs } = await run(context, {
        a: f32([2, 2, 2], [1, 0, 0, 1, 2, 0, 0, 2]),
        b: f32([2, 2], [1, 2, 3, 4]),
      }, (bd, { a, b }) => ({ y: bd.matmul(a, b) }));
      expect(outputs.y.shape).toEqual([2, 2, 2]);
      expectClose(results.y, [1, 2, 3, 4, 2, 4, 6, 8]);
    });

    test('1x3 · 3x1 and 3x1 · 1x3 (outer product)', async () => {
      const { results } = await run(context, { r: f32([1, 3], [1, 2, 3]), c: f32([3, 1], [4, 5, 6]) },
        (bd, { r, c }) => ({ dot: bd.matmul(r, c), outer: bd.matmul(c, r) }));
      expectClose(results.dot, [32]);
      expectClose(results.outer, [4, 8, 12, 5, 10, 15, 6, 12, 18]);
    });
  });

  describe('gemm', () => {
    const A = [1, 2, 3, 4, 5, 6]; // [2,3]
    const B = [7, 8, 9, 10, 11, 12]; // [3,2]; A·B = [58,64,139,154]

    test('plain a·b', async () => {
      const { results, outputs } = await run(context, { a: f32([2, 3], A), b: f32([3, 2], B) },
        (bd, { a, b }) => ({ y: bd.gemm(a, b) }));
      expect(outputs.y.shape).toEqual([2, 2]);
      expectClose(results.y, [58, 64, 139, 154]);
    });

    test('alpha, beta and a broadcast c', async () => {
      // 2·A·B + 0.5·[2, 4] = [116+1, 128+2, 278+1, 308+2]
      const { results } = await run(context, { a: f32([2, 3], A), b: f32([3, 2], B) }, (bd, { a, b }) => ({
        y: bd.gemm(a, b, { alpha: 2, beta: 0.5, c: constF32(bd, [2], [2, 4]) }),
      }));
      expectClose(results.y, [117, 130, 279, 310]);
    });

    test('full c with the default beta of 1, and a scalar c', async () => {
      const { results } = await run(context, { a: f32([2, 3], A), b: f32([3, 2], B) }, (bd, { a, b }) => ({
        full: bd.gemm(a, b, { c: constF32(bd, [2, 2], [1, 2, 3, 4]) }),
        scalar: bd.gemm(a, b, { c: bd.constant('float32', 10), beta: -1 }),
      }));
      expectClose(results.full, [59, 66, 142, 158]);
      expectClose(results.scalar, [48, 54, 129, 144]);
    });

    test('aTranspose and bTranspose', async () => {
      const At = [1, 4, 2, 5, 3, 6]; // [3,2]
      const Bt = [7, 9, 11, 8, 10, 12]; // [2,3]
      const { results, outputs } = await run(context, { at: f32([3, 2], At), bt: f32([2, 3], Bt), a: f32([2, 3], A), b: f32([3, 2], B) },
        (bd, { at, bt, a, b }) => ({
          both: bd.gemm(at, bt, { aTranspose: true, bTranspose: true }),
          onlyA: bd.gemm(at, b, { aTranspose: true }),
          onlyB: bd.gemm(a, bt, { bTranspose: true, alpha: 0.5 }),
        }));
      expect(outputs.both.shape).toEqual([2, 2]);
      expectClose(results.both, [58, 64, 139, 154]);
      expectClose(results.onlyA, [58, 64, 139, 154]);
      expectClose(results.onlyB, [29, 32, 69.5, 77]);
    });
  });

  describe('conv2d', () => {
    const X9 = iota(9, 1); // 3x3: 1..9

    test('2x2 diagonal filter, no padding (nchw / oihw)', async () => {
      const { results, outputs } = await run(context, { x: f32([1, 1, 3, 3], X9) }, (b, { x }) => ({
        y: b.conv2d(x, constF32(b, [1, 1, 2, 2], [1, 0, 0, 1])),
      }));
      expect(outputs.y.shape).toEqual([1, 1, 2, 2]);
      expectClose(results.y, [6, 8, 12, 14]);
    });

    test('3x3 ones filter with padding 1, strides 2 and a bias', async () => {
      const { results, outputs } = await run(context, { x: f32([1, 1, 3, 3], X9) }, (b, { x }) => ({
        y: b.conv2d(x, constF32(b, [1, 1, 3, 3], Array(9).fill(1)), {
          padding: [1, 1, 1, 1], strides: [2, 2], bias: constF32(b, [1], [1]),
        }),
      }));
      expect(outputs.y.shape).toEqual([1, 1, 2, 2]);
      expectClose(results.y, [13, 17, 25, 29]);
    });

    test('asymmetric padding [0, 1, 1, 0] with a 2x2 ones filter', async () => {
      // Padded input (rows 0..3, cols -1..2): output 3x3.
      // row 0: [1, 1+2+4+5=12, 2+3+5+6=16] -> cols -1..0 gives 1+4=5
      const { results, outputs } = await run(context, { x: f32([1, 1, 3, 3], X9) }, (b, { x }) => ({
        y: b.conv2d(x, constF32(b, [1, 1, 2, 2], [1, 1, 1, 1]), { padding: [0, 1, 1, 0] }),
      }));
      expect(outputs.y.shape).toEqual([1, 1, 3, 3]);
      expectClose(results.y, [5, 12, 16, 11, 24, 28, 7, 15, 17]);
    });

    test('dilations [2, 2]', async () => {
      const { results, outputs } = await run(context, { x: f32([1, 1, 3, 3], X9) }, (b, { x }) => ({
        y: b.conv2d(x, constF32(b, [1, 1, 2, 2], [1, 1, 1, 1]), { dilations: [2, 2] }),
      }));
      expect(outputs.y.shape).toEqual([1, 1, 1, 1]);
      expectClose(results.y, [1 + 3 + 7 + 9]);
    });

    test('two input channels summed (groups 1) and depthwise (groups 2)', async () => {
      const x = f32([1, 2, 2, 2], [1, 2, 3, 4, 5, 6, 7, 8]);
      const { results, outputs } = await run(context, { x }, (b, { x: xo }) => ({
        sum: b.conv2d(xo, constF32(b, [1, 2, 1, 1], [1, 1])),
        depthwise: b.conv2d(xo, constF32(b, [2, 1, 1, 1], [2, 3]), { groups: 2 }),
      }));
      expect(outputs.sum.shape).toEqual([1, 1, 2, 2]);
      expect(outputs.depthwise.shape).toEqual([1, 2, 2, 2]);
      expectClose(results.sum, [6, 8, 10, 12]);
      expectClose(results.depthwise, [2, 4, 6, 8, 15, 18, 21, 24]);
    });

    test('two output channels with a bias', async () => {
      const { results, outputs } = await run(context, { x: f32([1, 1, 2, 2], [1, 2, 3, 4]) }, (b, { x }) => ({
        y: b.conv2d(x, constF32(b, [2, 1, 1, 1], [1, -1]), { bias: constF32(b, [2], [10, 20]) }),
      }));
      expect(outputs.y.shape).toEqual([1, 2, 2, 2]);
      expectClose(results.y, [11, 12, 13, 14, 19, 18, 17, 16]);
    });

    test('nhwc input with ohwi and hwio filters', async () => {
      // The same image as above in NHWC: pixel-major [c0, c1].
      const x = f32([1, 2, 2, 2], [1, 5, 2, 6, 3, 7, 4, 8]);
      const { results, outputs } = await run(context, { x }, (b, { x: xo }) => ({
        depthwise: b.conv2d(xo, constF32(b, [2, 1, 1, 1], [2, 3]), {
          groups: 2, inputLayout: 'nhwc', filterLayout: 'ohwi',
        }),
        sum: b.conv2d(xo, constF32(b, [1, 1, 2, 1], [1, 1]), { inputLayout: 'nhwc', filterLayout: 'hwio' }),
      }));
      expect(outputs.depthwise.shape).toEqual([1, 2, 2, 2]);
      expect(outputs.sum.shape).toEqual([1, 2, 2, 1]);
      expectClose(results.depthwise, [2, 15, 4, 18, 6, 21, 8, 24]);
      expectClose(results.sum, [6, 8, 10, 12]);
    });

    test('nhwc input with a 2x2 ihwo filter and padding', async () => {
      // 1 channel 3x3 input, nhwc [1,3,3,1]; ihwo filter [1,2,2,1] diagonal.
      const { results, outputs } = await run(context, { x: f32([1, 3, 3, 1], X9) }, (b, { x }) => ({
        y: b.conv2d(x, constF32(b, [1, 2, 2, 1], [1, 0, 0, 1]), {
          inputLayout: 'nhwc', filterLayout: 'ihwo', padding: [0, 1, 0, 1],
        }),
      }));
      // out[i][j] = x[i][j] + x[i+1][j+1] (0 past the edge)
      expect(outputs.y.shape).toEqual([1, 3, 3, 1]);
      expectClose(results.y, [6, 8, 3, 12, 14, 6, 7, 8, 9]);
    });

    test('batch of 2', async () => {
      const { results, outputs } = await run(context, { x: f32([2, 1, 2, 2], [1, 2, 3, 4, 10, 20, 30, 40]) }, (b, { x }) => ({
        y: b.conv2d(x, constF32(b, [1, 1, 2, 2], [1, 1, 1, 1])),
      }));
      expect(outputs.y.shape).toEqual([2, 1, 1, 1]);
      expectClose(results.y, [10, 100]);
    });
  });

  describe('pooling', () => {
    const X16 = iota(16, 1);

    test('averagePool2d and maxPool2d 2x2 windows with strides 2', async () => {
      const { results, outputs } = await run(context, { x: f32([1, 1, 4, 4], X16) }, (b, { x }) => ({
        avg: b.averagePool2d(x, { windowDimensions: [2, 2], strides: [2, 2] }),
        max: b.maxPool2d(x, { windowDimensions: [2, 2], strides: [2, 2] }),
      }));
      expect(outputs.avg.shape).toEqual([1, 1, 2, 2]);
      expectClose(results.avg, [3.5, 5.5, 11.5, 13.5]);
      expectClose(results.max, [6, 8, 14, 16]);
    });

    test('the default window is the whole image (global pooling)', async () => {
      const { results, outputs } = await run(context, { x: f32([1, 2, 2, 2], [1, 2, 3, 4, -1, -2, -3, -8]) }, (b, { x }) => ({
        avg: b.averagePool2d(x), max: b.maxPool2d(x),
      }));
      expect(outputs.avg.shape).toEqual([1, 2, 1, 1]);
      expectClose(results.avg, [2.5, -3.5]);
      expectClose(results.max, [4, -1]);
    });

    test('overlapping windows with strides 1', async () => {
      const { results, outputs } = await run(context, { x: f32([1, 1, 3, 3], iota(9, 1)) }, (b, { x }) => ({
        avg: b.averagePool2d(x, { windowDimensions: [2, 2] }),
        max: b.maxPool2d(x, { windowDimensions: [2, 2] }),
      }));
      expect(outputs.max.shape).toEqual([1, 1, 2, 2]);
      expectClose(results.avg, [3, 4, 6, 7]);
      expectClose(results.max, [5, 6, 8, 9]);
    });

    test('maxPool2d with padding ignores the padded cells', async () => {
      const { results, outputs } = await run(context, { x: f32([1, 1, 3, 3], [-1, -2, -3, -4, -5, -6, -7, -8, -9]) }, (b, { x }) => ({
        y: b.maxPool2d(x, { windowDimensions: [2, 2], padding: [1, 0, 1, 0] }),
      }));
      expect(outputs.y.shape).toEqual([1, 1, 3, 3]);
      // Each window's max is its top-left valid cell, never a padded 0.
      expectClose(results.y, [-1, -1, -2, -1, -1, -2, -4, -4, -5]);
    });

    test('maxPool2d roundingType ceil', async () => {
      const { results, outputs } = await run(context, { x: f32([1, 1, 3, 3], iota(9, 1)) }, (b, { x }) => ({
        ceil: b.maxPool2d(x, { windowDimensions: [2, 2], strides: [2, 2], roundingType: 'ceil' }),
        floor: b.maxPool2d(x, { windowDimensions: [2, 2], strides: [2, 2] }),
      }));
      expect(outputs.ceil.shape).toEqual([1, 1, 2, 2]);
      expect(outputs.floor.shape).toEqual([1, 1, 1, 1]);
      expectClose(results.ceil, [5, 6, 8, 9]);
      expectClose(results.floor, [5]);
    });

    test('nhwc layout', async () => {
      // [1,2,2,2] NHWC: channel 0 = [1,2,3,4], channel 1 = [5,6,7,8]
      const { results, outputs } = await run(context, { x: f32([1, 2, 2, 2], [1, 5, 2, 6, 3, 7, 4, 8]) }, (b, { x }) => ({
        max: b.maxPool2d(x, { layout: 'nhwc' }),
        avg: b.averagePool2d(x, { layout: 'nhwc', windowDimensions: [1, 2] }),
      }));
      expect(outputs.max.shape).toEqual([1, 1, 1, 2]);
      expect(outputs.avg.shape).toEqual([1, 2, 1, 2]);
      expectClose(results.max, [4, 8]);
      expectClose(results.avg, [1.5, 5.5, 3.5, 7.5]);
    });
  });

  describe('softmax', () => {
    test('along axis 0 and axis 1 of a 2x2 input', async () => {
      const l3 = Math.log(3);
      const { results } = await run(context, { x: f32([2, 2], [0, 0, l3, 0]) }, (b, { x }) => ({
        a0: b.softmax(x, 0), a1: b.softmax(x, 1),
      }));
      expectClose(results.a0, [0.25, 0.5, 0.75, 0.5]);
      expectClose(results.a1, [0.5, 0.5, 0.75, 0.25]);
    });

    test('a 1-D input sums to 1 and is invariant to a shift', async () => {
      const e = [Math.exp(1), Math.exp(2), Math.exp(3)];
      const s = e[0] + e[1] + e[2];
      const { results } = await run(context, { x: f32([3], [1, 2, 3]), big: f32([3], [1001, 1002, 1003]) },
        (b, { x, big }) => ({ y: b.softmax(x, 0), z: b.softmax(big, 0) }));
      expectClose(results.y, [e[0] / s, e[1] / s, e[2] / s]);
      expectClose(results.z, [e[0] / s, e[1] / s, e[2] / s]);
    });
  });

  describe('shape operators', () => {
    test('reshape keeps the data, including to and from a scalar', async () => {
      const { results, outputs } = await run(context, { x: f32([2, 3], iota(6)), s: f32([1], [5]) }, (b, { x, s }) => ({
        y: b.reshape(x, [3, 2]), flat: b.reshape(x, [6]), scalar: b.reshape(s, []), up: b.reshape(x, [1, 2, 1, 3]),
      }));
      expect(outputs.y.shape).toEqual([3, 2]);
      expect(outputs.scalar.shape).toEqual([]);
      expect(outputs.up.shape).toEqual([1, 2, 1, 3]);
      expectClose(results.y, iota(6));
      expectClose(results.flat, iota(6));
      expectClose(results.scalar, [5]);
    });

    test('transpose: default reversal and an explicit permutation', async () => {
      const { results, outputs } = await run(context, { m: f32([2, 3], [1, 2, 3, 4, 5, 6]), t: f32([2, 2, 2], iota(8)) },
        (b, { m, t }) => ({ mt: b.transpose(m), p: b.transpose(t, { permutation: [2, 0, 1] }) }));
      expect(outputs.mt.shape).toEqual([3, 2]);
      expectClose(results.mt, [1, 4, 2, 5, 3, 6]);
      // out(a,b,c) = in(b,c,a) = 4b + 2c + a
      expectClose(results.p, [0, 2, 4, 6, 1, 3, 5, 7]);
    });

    test('transpose of a non-cubic rank-3 tensor', async () => {
      const { results, outputs } = await run(context, { t: f32([1, 2, 3], iota(6)) },
        (b, { t }) => ({ y: b.transpose(t, { permutation: [2, 1, 0] }) }));
      expect(outputs.y.shape).toEqual([3, 2, 1]);
      expectClose(results.y, [0, 3, 1, 4, 2, 5]);
    });

    test('concat along axis 0 and axis 1', async () => {
      const { results, outputs } = await run(context, {
        a: f32([1, 2], [1, 2]), b: f32([2, 2], [3, 4, 5, 6]), c: f32([2, 1], [1, 2]),
      }, (bd, { a, b, c }) => ({ rows: bd.concat([a, b], 0), cols: bd.concat([c, b], 1), three: bd.concat([b, b, b], 0) }));
      expect(outputs.rows.shape).toEqual([3, 2]);
      expect(outputs.cols.shape).toEqual([2, 3]);
      expect(outputs.three.shape).toEqual([6, 2]);
      expectClose(results.rows, [1, 2, 3, 4, 5, 6]);
      expectClose(results.cols, [1, 3, 4, 2, 5, 6]);
      expectClose(results.three, [3, 4, 5, 6, 3, 4, 5, 6, 3, 4, 5, 6]);
    });

    test('concat of int32 along the last axis of rank 3', async () => {
      const i32 = (shape, data) => ({ dataType: 'int32', shape, data: Int32Array.from(data) });
      const { results, outputs } = await run(context, { a: i32([2, 1, 1], [1, 2]), b: i32([2, 1, 2], [3, 4, 5, 6]) },
        (bd, { a, b }) => ({ y: bd.concat([a, b], 2) }));
      expect(outputs.y).toEqual({ dataType: 'int32', shape: [2, 1, 3] });
      expect(Array.from(results.y)).toEqual([1, 3, 4, 2, 5, 6]);
    });

    test('slice with and without strides', async () => {
      const { results, outputs } = await run(context, { x: f32([3, 4], iota(12)) }, (b, { x }) => ({
        mid: b.slice(x, [1, 1], [2, 2]),
        strided: b.slice(x, [0, 0], [3, 4], { strides: [2, 2] }),
        row: b.slice(x, [2, 0], [1, 4]),
        odd: b.slice(x, [0, 1], [3, 3], { strides: [1, 2] }),
      }));
      expect(outputs.mid.shape).toEqual([2, 2]);
      expect(outputs.strided.shape).toEqual([2, 2]);
      expect(outputs.odd.shape).toEqual([3, 2]);
      expectClose(results.mid, [5, 6, 9, 10]);
      expectClose(results.strided, [0, 2, 8, 10]);
      expectClose(results.row, [8, 9, 10, 11]);
      expectClose(results.odd, [1, 3, 5, 7, 9, 11]);
    });
  });

  describe('cast', () => {
    test('float32 -> int32 truncates toward zero', async () => {
      const { results, outputs } = await run(context, { x: f32([5], [1.7, -1.7, 3, 100, -0.2]) },
        (b, { x }) => ({ y: b.cast(x, 'int32') }));
      expect(outputs.y).toEqual({ dataType: 'int32', shape: [5] });
      expect(Array.from(results.y)).toEqual([1, -1, 3, 100, 0]);
    });

    test('int32 -> float32, int32 -> uint8, uint8 -> float32, float32 -> int64', async () => {
      const { results, outputs } = await run(context, {
        i: { dataType: 'int32', shape: [3], data: [-3, 0, 255] },
        u: { dataType: 'uint8', shape: [2], data: [0, 200] },
        f: f32([2], [2.9, -7]),
      }, (b, { i, u, f }) => ({
        f32: b.cast(i, 'float32'), u8: b.cast(b.clamp(i, { minValue: 0 }), 'uint8'), fu: b.cast(u, 'float32'), i64: b.cast(f, 'int64'),
      }));
      expect(outputs.f32.dataType).toBe('float32');
      expect(outputs.u8.dataType).toBe('uint8');
      expect(outputs.i64.dataType).toBe('int64');
      expectClose(results.f32, [-3, 0, 255]);
      expect(Array.from(results.u8)).toEqual([0, 0, 255]);
      expectClose(results.fu, [0, 200]);
      expect(Array.from(results.i64)).toEqual([2n, -7n]);
    });
  });

  test('a small network: conv2d -> relu -> maxPool2d -> reshape -> gemm -> softmax', async () => {
    // 1x1x4x4 input, a 2x2 ones filter (bias -10), relu, 3x3 -> 1x1 pool, gemm.
    const { results, outputs } = await run(context, { x: f32([1, 1, 4, 4], iota(16, 1)) }, (b, { x }) => {
      const c = b.conv2d(x, constF32(b, [1, 1, 2, 2], [1, 1, 1, 1]), { bias: constF32(b, [1], [-20]) });
      // conv = [14,18,22,30,34,38,46,50,54] - 20 -> relu [0,0,2,10,14,18,26,30,34]
      const r = b.relu(c);
      const p = b.maxPool2d(r, { windowDimensions: [2, 2], strides: [1, 1] }); // [14,18,30,34]
      const flat = b.reshape(p, [1, 4]);
      const logits = b.gemm(flat, constF32(b, [4, 2], [1, 0, 0, 1, 0, 0, 0, 0]), { alpha: 0.25 }); // [3.5, 4.5]
      return { c: r, logits, probs: b.softmax(logits, 1) };
    });
    expect(outputs.probs.shape).toEqual([1, 2]);
    expectClose(results.c, [0, 0, 2, 10, 14, 18, 26, 30, 34]);
    expectClose(results.logits, [3.5, 4.5]);
    const e = 1 / (1 + Math.E);
    expectClose(results.probs, [e, 1 - e]);
  });
});
