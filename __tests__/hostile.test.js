'use strict';
// Hostile arguments: the caller's code that runs while we read its
// arguments (getters, Proxy traps), buffers that shrink or detach under us,
// arrays far longer than any argument can be. None of it may crash the
// process, stall it, or make a promise-returning method throw.
//
// A crash cannot be caught in-process, so those cases run in a child
// process and the test asserts on its exit.

const path = require('path');
const { spawnSync } = require('child_process');
const { ml, MLGraphBuilder } = require('..');
const { childJson, expectReject, iota } = require('./helpers');

const ROOT = path.resolve(__dirname, '..');

/**
 * Runs `fn` (the source of an async function `(webnn, ctx) => result`) in
 * a child process with a context of `deviceType`; returns its exit status,
 * signal and the JSON it printed.
 */
function inChild(fn, deviceType, timeout = 90000) {
  const code = `
    const webnn = require(${JSON.stringify(ROOT)});
    webnn.ml.createContext({ deviceType: ${JSON.stringify(deviceType)} }).then(async (ctx) => {
      const result = await (${fn})(webnn, ctx);
      console.log(JSON.stringify(result));
      ctx.destroy();
    }, (e) => console.log(JSON.stringify({ noContext: e.name + ': ' + e.message })));`;
  return childJson(process.execPath, ['-e', code], { timeout });
}

// The GPU cases run where a GPU context can be created (a software
// adapter counts), probed in a child process.
const gpuProbe = inChild('async (webnn, ctx) => ({ ok: true })', 'gpu', 60000);
const gpuOk = gpuProbe.status === 0 && gpuProbe.result.ok === true;
if (!gpuOk) {
  console.log(`GPU cases skipped: no GPU context (${JSON.stringify(gpuProbe.result)})`);
}
const devices = gpuOk ? ['cpu', 'gpu'] : ['cpu'];

describe.each(devices)('computeSync on %s: buffers changed by a getter of outputs', (device) => {
  // Each case: an outputs getter that changes a buffer read before it, and
  // what computeSync must do: throw a TypeError, not read or write freed
  // memory.
  const body = `async (webnn, ctx) => {
    const n = 1 << 22;
    const b = new webnn.MLGraphBuilder(ctx);
    const x = b.input('x', { dataType: 'float32', shape: [n] });
    const graph = await b.build({ y: b.relu(x), z: b.neg(x) });
    const detach = (ab) => structuredClone(ab, { transfer: [ab] });
    const cases = {
      'shrinks the input': () => {
        const ab = new ArrayBuffer(4 * n, { maxByteLength: 4 * n });
        return [{ x: new Float32Array(ab) }, () => ab.resize(0), null];
      },
      'detaches the input': () => {
        const ab = new ArrayBuffer(4 * n);
        return [{ x: new Float32Array(ab) }, () => detach(ab), null];
      },
      'detaches the other output': () => {
        const z = new Float32Array(n);
        return [{ x: new Float32Array(n) }, () => detach(z.buffer), z];
      },
      'shrinks the other output': () => {
        const ab = new ArrayBuffer(4 * n, { maxByteLength: 4 * n });
        return [{ x: new Float32Array(n) }, () => ab.resize(4), new Float32Array(ab)];
      },
    };
    const out = {};
    for (const [name, make] of Object.entries(cases)) {
      const [inputs, hostile, z] = make();
      const outputs = {};
      if (z) outputs.z = z;
      Object.defineProperty(outputs, 'y', { enumerable: true,
        get() { hostile(); return new Float32Array(n); } });
      if (!z) outputs.z = new Float32Array(n);
      try {
        ctx.computeSync(graph, inputs, outputs);
        out[name] = 'returned';
      } catch (e) {
        out[name] = e.name;
      }
    }
    return out;
  }`;

  test('each case throws TypeError and the process lives', () => {
    const r = inChild(body, device);
    expect({ status: r.status, signal: r.signal }).toEqual({ status: 0, signal: null });
    expect(r.result).toEqual({
      'shrinks the input': 'TypeError',
      'detaches the input': 'TypeError',
      'detaches the other output': 'TypeError',
      'shrinks the other output': 'TypeError',
    });
  });
});

describe('records are their own enumerable string keys', () => {
  // dispatch() and compute() read a record's keys as Object.keys does,
  // with the Object.keys taken at load: symbols, non-enumerable and
  // inherited keys are not entries, an extra enumerable key is, and a
  // caller's replacement of Object.keys changes nothing.
  test('in dispatch() and compute()', async () => {
    const ctx = await ml.createContext();
    const b = new MLGraphBuilder(ctx);
    const desc = { dataType: 'float32', shape: [2] };
    const graph = await b.build({ y: b.add(b.input('x', desc), b.input('w', desc)) });
    const [x, w, y] = await Promise.all([
      ctx.createTensor({ ...desc, writable: true }),
      ctx.createTensor({ ...desc, writable: true }),
      ctx.createTensor({ ...desc, readable: true }),
    ]);
    ctx.writeTensor(x, new Float32Array([1, 2]));
    ctx.writeTensor(w, new Float32Array([10, 20]));
    const inputs = Object.create({ inherited: x });
    inputs[Symbol('s')] = x;
    Object.defineProperty(inputs, 'hidden', { value: w, enumerable: false });
    inputs.w = w;
    inputs.x = x;
    ctx.dispatch(graph, inputs, { y });
    expect([...new Float32Array(await ctx.readTensor(y))]).toEqual([11, 22]);
    const extra = { x, w, more: y };
    let error;
    try {
      ctx.dispatch(graph, extra, { y });
    } catch (e) {
      error = e;
    }
    expect(error && error.name).toBe('TypeError');
    expect(error.message).toMatch(/3 entries/);
    const views = Object.create({ extra: new Float32Array(2) });
    views.x = new Float32Array([3, 4]);
    views.w = new Float32Array([5, 6]);
    views[Symbol('s')] = new Float32Array(2);
    const r = await ctx.compute(graph, views, { y: new Float32Array(2) });
    expect([...r.outputs.y]).toEqual([8, 10]);
    ctx.destroy();
  });

  // In a child process: jest's globals are not the ones the addon sees.
  test("a caller's Object.keys, set after load, is not used", () => {
    const body = `async (webnn, ctx) => {
      const b = new webnn.MLGraphBuilder(ctx);
      const desc = { dataType: 'float32', shape: [2] };
      const graph = await b.build({ y: b.add(b.input('x', desc), b.input('w', desc)) });
      const x = await ctx.createTensor({ ...desc, writable: true });
      const w = await ctx.createTensor({ ...desc, writable: true });
      const y = await ctx.createTensor({ ...desc, readable: true });
      ctx.writeTensor(x, new Float32Array([1, 2]));
      ctx.writeTensor(w, new Float32Array([10, 20]));
      Object.keys = () => ['x'];
      ctx.dispatch(graph, { x, w }, { y });
      return [...new Float32Array(await ctx.readTensor(y))];
    }`;
    const r = inChild(body, 'cpu');
    expect({ status: r.status, signal: r.signal }).toEqual({ status: 0, signal: null });
    expect(r.result).toEqual([11, 22]);
  });
});

describe('arrays longer than any argument can be', () => {
  // Each call must fail with TypeError at once: no per-element work for a
  // sparse array, no reservation for its length.
  const body = `async (webnn, ctx) => {
    const b = new webnn.MLGraphBuilder(ctx);
    const x = b.input('x', { dataType: 'float32', shape: [2, 3] });
    const huge = () => new Array(2 ** 32 - 1);
    const calls = {
      'reshape newShape 2^32-1': () => b.reshape(x, huge()),
      'reshape newShape 1e8': () => b.reshape(x, new Array(1e8)),
      'reshape newShape dense 2e7': () => b.reshape(x, new Array(2e7).fill(1)),
      'expand newShape': () => b.expand(x, huge()),
      'transpose permutation': () => b.transpose(x, { permutation: huge() }),
      'slice starts': () => b.slice(x, huge(), [1, 1]),
      'split splits': () => b.split(x, huge()),
      'concat inputs': () => b.concat(huge(), 0),
      'concat inputs after one operand': () => { const a = huge(); a[0] = x; return b.concat(a, 0); },
      'input shape': () => b.input('y', { dataType: 'float32', shape: huge() }),
      'constant shape': () => b.constant({ dataType: 'float32', shape: huge() }, new Float32Array(1)),
      'createTensor shape': () => ctx.createTensor({ dataType: 'float32', shape: huge() }),
      'reduceSum axes': () => b.reduceSum(x, { axes: huge() }),
    };
    const out = {};
    let slowest = 0;
    for (const [name, call] of Object.entries(calls)) {
      const t = process.hrtime.bigint();
      try {
        await call();
        out[name] = 'returned';
      } catch (e) {
        out[name] = e.name;
      }
      slowest = Math.max(slowest, Number(process.hrtime.bigint() - t) / 1e6);
    }
    return { out, slowest, rssMB: process.memoryUsage().rss / 2 ** 20 };
  }`;

  test('each fails with TypeError quickly and without a large allocation', () => {
    const r = inChild(body, 'cpu');
    expect({ status: r.status, signal: r.signal }).toEqual({ status: 0, signal: null });
    const { out, slowest, rssMB } = r.result;
    for (const [name, outcome] of Object.entries(out)) {
      expect([name, outcome]).toEqual([name, 'TypeError']);
    }
    expect(Object.keys(out).length).toBe(13);
    // Before: 13 to 28 s for 1e8 holes, an abort for 2^32 - 1. The dense
    // array costs its caller 160 MB before the call.
    expect(slowest).toBeLessThan(1000);
    expect(rssMB).toBeLessThan(1024);
  });

  test('lists as long as a valid argument still work', async () => {
    const ctx = await ml.createContext();
    const b = new MLGraphBuilder(ctx);
    const x = b.input('x', { dataType: 'float32', shape: [20] });
    // 20 pieces of one element: longer than the largest rank.
    const parts = b.split(x, new Array(20).fill(1));
    expect(parts.length).toBe(20);
    const joined = b.concat(parts, 0);
    const many = b.concat(new Array(100).fill(x), 0);
    expect(Array.from(many.shape)).toEqual([2000]);
    const g = await b.build({ y: joined });
    const r = await ctx.compute(g, { x: Float32Array.from(iota(20)) }, { y: new Float32Array(20) });
    expect(Array.from(r.outputs.y)).toEqual(iota(20));
    ctx.destroy();
  });
});

describe.each(devices)('one operand under two output names on %s', (device) => {
  let ctx;
  let graph;
  beforeAll(async () => {
    ctx = await ml.createContext({ deviceType: device });
    const b = new MLGraphBuilder(ctx);
    const x = b.input('x', { dataType: 'float32', shape: [4] });
    const y = b.relu(x);
    graph = await b.build({ a: y, b: y, c: b.neg(y) });
  });
  afterAll(() => ctx.destroy());
  const input = () => new Float32Array([-1, 2, -3, 4]);
  const want = { a: [0, 2, 0, 4], b: [0, 2, 0, 4], c: [-0, -2, -0, -4] };

  test('compute', async () => {
    const r = await ctx.compute(graph, { x: input() }, { a: new Float32Array(4), b: new Float32Array(4), c: new Float32Array(4) });
    expect({ a: Array.from(r.outputs.a), b: Array.from(r.outputs.b), c: Array.from(r.outputs.c) }).toEqual(want);
  });

  test('computeSync', () => {
    const outs = { a: new Float32Array(4), b: new Float32Array(4), c: new Float32Array(4) };
    ctx.computeSync(graph, { x: input() }, outs);
    expect({ a: Array.from(outs.a), b: Array.from(outs.b), c: Array.from(outs.c) }).toEqual(want);
  });

  test('dispatch, twice', async () => {
    const x = await ctx.createTensor({ dataType: 'float32', shape: [4], writable: true });
    const outs = {};
    for (const k of ['a', 'b', 'c']) outs[k] = await ctx.createTensor({ dataType: 'float32', shape: [4], readable: true });
    ctx.writeTensor(x, input());
    for (let i = 0; i < 2; i++) {
      ctx.dispatch(graph, { x }, outs);
      const got = {};
      for (const k of ['a', 'b', 'c']) got[k] = Array.from(new Float32Array(await ctx.readTensor(outs[k])));
      expect(got).toEqual(want);
    }
  });
});

describe('promise-returning methods reject, never throw', () => {
  let ctx;
  let tensor;
  beforeAll(async () => {
    ctx = await ml.createContext();
    tensor = await ctx.createTensor({ dataType: 'float32', shape: [2], readable: true, writable: true });
  });
  afterAll(() => ctx.destroy());

  const mine = new RangeError('thrown by the caller');
  const throwingGetter = (key, extra = {}) => {
    const o = { ...extra };
    Object.defineProperty(o, key, { enumerable: true, get() { throw mine; } });
    return o;
  };
  const throwingProxy = () => new Proxy({}, {
    get() { throw mine; },
    ownKeys() { throw mine; },
    getOwnPropertyDescriptor() { throw mine; },
    has() { throw mine; },
  });

  /** Calls `fn`: it must return a promise that rejects with `expected`. */
  async function rejects(fn, expected) {
    let p;
    try {
      p = fn();
    } catch (e) {
      throw new Error(`threw synchronously: ${e && e.name}: ${e && e.message}`);
    }
    expect(typeof (p && p.then)).toBe('function');
    let error;
    await p.then(() => { throw new Error('resolved'); }, (e) => { error = e; });
    if (typeof expected === 'string') {
      expect(error.name).toBe(expected);
    } else {
      expect(error).toBe(expected);
    }
  }

  test('createContext', async () => {
    await rejects(() => ml.createContext(throwingProxy()), mine);
    await rejects(() => ml.createContext(throwingGetter('deviceType')), mine);
    await rejects(() => ml.createContext({ deviceType: 'tpu' }), 'TypeError');
  });

  test('createTensor', async () => {
    await rejects(() => ctx.createTensor(throwingGetter('shape', { dataType: 'float32' })), mine);
    await rejects(() => ctx.createTensor(throwingProxy()), mine);
    await rejects(() => ctx.createTensor({ dataType: 'float32', shape: [2, -1] }), 'TypeError');
  });

  test('createConstantTensor', async () => {
    await rejects(() => ctx.createConstantTensor(throwingGetter('dataType'), new Float32Array(2)), mine);
    // Not a buffer source: a TypeError, and the object's getters never run.
    const tagged = { get [Symbol.toStringTag]() { throw mine; } };
    await rejects(() => ctx.createConstantTensor({ dataType: 'float32', shape: [2] }, tagged), 'TypeError');
  });

  test('readTensor', async () => {
    const tagged = { get [Symbol.toStringTag]() { throw mine; } };
    await rejects(() => ctx.readTensor(tensor, tagged), 'TypeError');
    await rejects(() => ctx.readTensor(throwingProxy()), 'TypeError');
    await rejects(() => ctx.readTensor(tensor, new Float32Array(3)), 'TypeError');
  });

  test('build', async () => {
    const b = new MLGraphBuilder(ctx);
    const x = b.input('x', { dataType: 'float32', shape: [2] });
    await rejects(() => b.build(throwingProxy()), mine);
    await rejects(() => b.build(throwingGetter('y')), mine);
    await rejects(() => b.build({ y: b.relu(x) }, throwingGetter('label')), mine);
    // The builder is still usable: nothing was built.
    const g = await b.build({ y: b.relu(x) });
    expect(g).toBeTruthy();
    await expectReject(b.build({ y: x }), 'InvalidStateError');
  });

  test('compute: argument errors reject and leave the buffers attached', async () => {
    const b = new MLGraphBuilder(ctx);
    const x = b.input('x', { dataType: 'float32', shape: [2] });
    const graph = await b.build({ y: b.relu(x) });
    const input = new Float32Array([1, -1]);
    const output = new Float32Array(2);
    await rejects(() => ctx.compute({}, { x: input }, { y: output }), 'TypeError');
    await rejects(() => ctx.compute(graph, { x: input }, throwingGetter('y')), mine);
    await rejects(() => ctx.compute(graph, throwingProxy(), { y: output }), mine);
    await rejects(() => ctx.compute(graph, { x: input }, { y: new Float32Array(3) }), 'TypeError');
    expect(input.buffer.byteLength).toBe(8);
    expect(output.buffer.byteLength).toBe(8);
    const r = await ctx.compute(graph, { x: input }, { y: output });
    expect(Array.from(r.outputs.y)).toEqual([1, 0]);
  });

  test('synchronous methods pass the caller\'s exception on unchanged', () => {
    const b = new MLGraphBuilder(ctx);
    let caught;
    try {
      b.input('x', throwingGetter('shape', { dataType: 'float32' }));
    } catch (e) {
      caught = e;
    }
    expect(caught).toBe(mine);
  });
});

describe.each(devices)('built and destroyed graphs on %s', (device) => {
  test('give their memory back', () => {
    // Before, on the GPU: about 11 KiB per graph stayed (the uploads of a
    // graph built without a dispatch after it were never submitted).
    const body = `async (webnn, ctx) => {
      const once = async () => {
        const b = new webnn.MLGraphBuilder(ctx);
        const x = b.input('x', { dataType: 'float32', shape: [2, 3] });
        const c = b.constant({ dataType: 'float32', shape: [2, 3] }, new Float32Array(6).fill(1));
        const g = await b.build({ y: b.relu(b.add(x, c)) });
        g.destroy();
      };
      for (let i = 0; i < 2000; i++) await once();
      global.gc();
      const before = process.memoryUsage().rss;
      const n = 3000;
      for (let i = 0; i < n; i++) await once();
      global.gc();
      return { perGraphKiB: (process.memoryUsage().rss - before) / n / 1024 };
    }`;
    const code = `
      const webnn = require(${JSON.stringify(ROOT)});
      webnn.ml.createContext({ deviceType: ${JSON.stringify(device)} }).then(async (ctx) => {
        console.log(JSON.stringify(await (${body})(webnn, ctx)));
        ctx.destroy();
      });`;
    const r = spawnSync(process.execPath, ['--expose-gc', '-e', code], { encoding: 'utf8', timeout: 120000 });
    expect({ status: r.status, signal: r.signal }).toEqual({ status: 0, signal: null });
    const { perGraphKiB } = JSON.parse(r.stdout.trim().split('\n').pop());
    expect(perGraphKiB).toBeLessThan(2);
  });
});

describe('large tensors on the CPU', () => {
  test('maxTensorByteLength promises no more than the machine holds', async () => {
    const ctx = await ml.createContext();
    const max = ctx.opSupportLimits().maxTensorByteLength;
    expect(max).toBeGreaterThan(0);
    expect(max).toBeLessThanOrEqual(require('os').totalmem());
    ctx.destroy();
  });

  test('a zero-filled tensor is created in constant time, its memory taken when written', () => {
    // 2 GiB: before, creation wrote every byte (seconds and the whole size
    // in resident memory); now the allocator's zeroed pages come lazily.
    const body = `async (webnn, ctx) => {
      const max = ctx.opSupportLimits().maxTensorByteLength;
      const bytes = Math.floor(Math.min(2 ** 31, max / 2) / 4) * 4;
      const rss = () => process.memoryUsage().rss;
      const before = rss();
      const t0 = process.hrtime.bigint();
      const t = await ctx.createTensor({ dataType: 'float32', shape: [bytes / 4], readable: true });
      const ms = Number(process.hrtime.bigint() - t0) / 1e6;
      const grew = rss() - before;
      t.destroy();
      return { ms, grown: grew / bytes };
    }`;
    const r = inChild(body, 'cpu');
    expect({ status: r.status, signal: r.signal }).toEqual({ status: 0, signal: null });
    // A tenth of the tensor at most became resident (none should).
    expect(r.result.grown).toBeLessThan(0.1);
    expect(r.result.ms).toBeLessThan(1000);
  });
});
