'use strict';
// Timeline semantics: destroy(), context loss, non-fatal errored tensors
// with labels, exact exceptions, and native memory under create/drop churn.

const path = require('path');
const { spawnSync } = require('child_process');
const { ml, MLGraphBuilder } = require('..');

const f32 = (shape) => ({ dataType: 'float32', shape });

async function rejection(promise) {
  try {
    await promise;
  } catch (e) {
    return e;
  }
  throw new Error('expected the promise to reject');
}

function thrown(fn) {
  try {
    fn();
  } catch (e) {
    return e;
  }
  throw new Error('expected a throw');
}

describe('tensor.destroy()', () => {
  test('the discussion example: a pending read rejects with InvalidStateError', async () => {
    const context = await ml.createContext();
    const tensor = await context.createTensor({ ...f32([4]), readable: true, writable: true });
    context.writeTensor(tensor, new Float32Array([1, 2, 3, 4]));
    const read = context.readTensor(tensor);
    tensor.destroy();
    const e = await rejection(read);
    expect(e.name).toBe('InvalidStateError');
    // destroy() may be called again, and later uses fail as the spec says.
    tensor.destroy();
    expect(thrown(() => context.writeTensor(tensor, new Float32Array(4))).name).toBe('TypeError');
    expect((await rejection(context.readTensor(tensor))).name).toBe('TypeError');
  });

  test('a dispatch queued before the destroy still completes', async () => {
    const context = await ml.createContext();
    const b = new MLGraphBuilder(context);
    const x = b.input('x', f32([3]));
    const graph = await b.build({ y: b.mul(x, x) });
    const input = await context.createTensor({ ...f32([3]), writable: true });
    const output = await context.createTensor({ ...f32([3]), readable: true });
    context.writeTensor(input, new Float32Array([1, 2, 3]));
    context.dispatch(graph, { x: input }, { y: output });
    input.destroy(); // queued behind the dispatch: the dispatch reads it first
    expect([...new Float32Array(await context.readTensor(output))]).toEqual([1, 4, 9]);
    const e = thrown(() => context.dispatch(graph, { x: input }, { y: output }));
    expect(e.name).toBe('TypeError');
  });
});

describe('readTensor(tensor, view)', () => {
  // The CPU backend lends a read into a view the tensor's own buffer,
  // which the JS thread copies from: the writes and dispatches queued
  // after the read must replace that buffer, never change it.
  const N = 1 << 16; // past the size from which buffers are pooled
  const filled = (seed) => Float32Array.from({ length: N }, (_, i) => ((i * 7 + seed) % 251) - 125);

  test('sees the tensor as the queue left it, though writes follow at once', async () => {
    const context = await ml.createContext();
    const t = await context.createTensor({ ...f32([N]), readable: true, writable: true });
    const views = [0, 1, 2].map(() => new Float32Array(N));
    const reads = [];
    for (let k = 0; k < 3; k++) {
      context.writeTensor(t, filled(k));
      reads.push(context.readTensor(t, views[k]));
    }
    context.writeTensor(t, filled(9));
    expect(await Promise.all(reads)).toEqual([undefined, undefined, undefined]);
    for (let k = 0; k < 3; k++) expect(views[k]).toEqual(filled(k));
    expect(new Float32Array(await context.readTensor(t))).toEqual(filled(9));
  });

  test("sees a dispatch's result, though the next dispatch into the same tensor follows at once", async () => {
    const context = await ml.createContext();
    const b = new MLGraphBuilder(context);
    const x = b.input('x', f32([N]));
    const graph = await b.build({ y: b.add(x, x) });
    const input = await context.createTensor({ ...f32([N]), writable: true });
    const output = await context.createTensor({ ...f32([N]), readable: true });
    const rounds = 8;
    const views = Array.from({ length: rounds }, () => new Float32Array(N));
    const whole = [];
    const reads = [];
    for (let k = 0; k < rounds; k++) {
      context.writeTensor(input, filled(k));
      context.dispatch(graph, { x: input }, { y: output });
      reads.push(context.readTensor(output, views[k]));
      if (k % 2) whole.push(context.readTensor(output));
    }
    await Promise.all(reads);
    const buffers = await Promise.all(whole);
    for (let k = 0; k < rounds; k++) expect(views[k]).toEqual(filled(k).map((v) => 2 * v));
    buffers.forEach((ab, i) => expect(new Float32Array(ab)).toEqual(filled(2 * i + 1).map((v) => 2 * v)));
  });

  test('a view of a shared buffer at an offset gets the bytes, and a destroy after the read rejects it', async () => {
    const context = await ml.createContext();
    const t = await context.createTensor({ ...f32([N]), readable: true, writable: true });
    context.writeTensor(t, filled(3));
    const sab = new SharedArrayBuffer(4 * N + 64);
    const view = new Int8Array(sab, 64, 4 * N);
    await context.readTensor(t, view);
    expect(new Float32Array(sab, 64, N)).toEqual(filled(3));
    const pending = context.readTensor(t, new Float32Array(N));
    t.destroy();
    expect((await rejection(pending)).name).toBe('InvalidStateError');
  });
});

describe('readTensor(tensor) of mid-sized results', () => {
  // The worker copies such a result into memory the JS thread readied
  // when it asked (a pooled buffer it can spare, or fresh memory faulted
  // in while the work runs), where the context's threads leave it a core
  // (one thread here, on a machine of two or more). Every result held at
  // once must be its own memory with its own contents, whatever the type.
  const N = 40000; // 160 KB of float32: above the pool's smallest, below a shared read
  const cases = [
    ['float32', Float32Array, N, (k, i) => (i % 97) * 0.5 - k],
    ['int32', Int32Array, N, (k, i) => i * 3 - k],
    ['float16', Uint16Array, N, (k, i) => (i + k) % 30000],
    ['int64', BigInt64Array, N, (k, i) => BigInt(i) * 1000000007n - BigInt(k)],
    ['int8', Int8Array, 4 * N, (k, i) => ((i * 7 + k) % 256) - 128],
    ['uint8', Uint8Array, 4 * N, (k, i) => (i * 13 + k * 5) % 256],
  ];
  test.each(cases)('%s: each result held apart, after dispatches that reuse the output', async (dataType, Ctor, N, value) => {
    const context = await ml.createContext({ numThreads: 1 });
    const b = new MLGraphBuilder(context);
    const x = b.input('x', { dataType, shape: [N] });
    const graph = await b.build({ y: b.identity(x) });
    const input = await context.createTensor({ dataType, shape: [N], writable: true });
    const output = await context.createTensor({ dataType, shape: [N], readable: true });
    const rounds = 12;
    const results = [];
    for (let k = 0; k < rounds; k++) {
      context.writeTensor(input, Ctor.from({ length: N }, (_, i) => value(k, i)));
      context.dispatch(graph, { x: input }, { y: output });
      // Every other read is awaited at once, the rest all together.
      const read = context.readTensor(output);
      results.push(k % 2 ? read : await read);
    }
    const buffers = await Promise.all(results);
    expect(new Set(buffers).size).toBe(rounds);
    buffers.forEach((ab, k) => {
      expect(ab.byteLength).toBe(N * Ctor.BYTES_PER_ELEMENT);
      const want = Ctor.from({ length: N }, (_, i) => value(k, i));
      expect(Buffer.from(ab).equals(Buffer.from(want.buffer))).toBe(true);
    });
    context.destroy();
  });
});

describe('small reads and writes', () => {
  // A small read copies the tensor's own buffer on the JS thread, and a
  // small write reuses the buffer that an earlier write or dispatch let go
  // of: neither may see a later write or dispatch, nor a source changed
  // after writeTensor() returned. Sizes: below the smallest recycled
  // buffer, two small ones, and one whose read is copied on the worker.
  const cases = [
    ['float32', Float32Array, 200],
    ['float32', Float32Array, 1000],
    ['uint8', Uint8Array, 3001],
    ['float32', Float32Array, 6000],
  ];
  // The first byte that differs, or -1.
  const firstByteDifference = (got, want) => {
    const g = new Uint8Array(got);
    const w = new Uint8Array(want.buffer, want.byteOffset, want.byteLength);
    if (g.length !== w.length) return Math.min(g.length, w.length);
    return g.findIndex((v, i) => v !== w[i]);
  };
  test.each(cases)('%s x %i', async (dataType, Type, n) => {
    const context = await ml.createContext();
    const b = new MLGraphBuilder(context);
    const desc = { dataType, shape: [n] };
    const x = b.input('x', desc);
    const graph = await b.build({ y: b.add(x, x) });
    const input = await context.createTensor({ ...desc, readable: true, writable: true });
    const output = await context.createTensor({ ...desc, readable: true });
    const filled = (k) => Type.from({ length: n }, (_, i) => (i * 7 + k * 13) % 100);
    const rounds = 12;
    const ins = [];
    const outs = [];
    for (let k = 0; k < rounds; k++) {
      const source = filled(k);
      context.writeTensor(input, source);
      source.fill(99); // after the write returned: not seen
      ins.push(context.readTensor(input));
      context.dispatch(graph, { x: input }, { y: output });
      outs.push(context.readTensor(output));
      if (k % 3 === 0) await ins[k];
    }
    const got = await Promise.all([...ins, ...outs]);
    for (let k = 0; k < rounds; k++) {
      const want = filled(k);
      expect(firstByteDifference(got[k], want)).toBe(-1);
      expect(firstByteDifference(got[rounds + k], want.map((v) => 2 * v))).toBe(-1);
    }
  });
});

describe('large copies', () => {
  // From 1 MiB the JS thread shares a write's copy, and a read's into a
  // view, with an idle thread of the context's pool, and the worker
  // copies a read for a new buffer on all of them. The bytes must be
  // whole and must be copied by the time the call returns.
  const N = 3 * (1 << 18) + 5; // 3 MiB and a tail that is not a whole piece
  const filled = (seed) => Float32Array.from({ length: N }, (_, i) => ((i * 13 + seed) % 509) - 254);
  // The first element that differs, or -1 (jest's deep equality takes
  // seconds over arrays this long).
  const firstDifference = (got, want) => {
    const g = new Uint32Array(got.buffer.slice(got.byteOffset, got.byteOffset + got.byteLength));
    const w = new Uint32Array(want.buffer, want.byteOffset, want.length);
    if (g.length !== w.length) return Math.min(g.length, w.length);
    return g.findIndex((v, i) => v !== w[i]);
  };

  test.each([[{}], [{ numThreads: 1 }], [{ numThreads: 2 }]])('with %j, every path gives the bytes', async (options) => {
    const context = await ml.createContext(options);
    const b = new MLGraphBuilder(context);
    const x = b.input('x', f32([N]));
    const graph = await b.build({ y: b.add(x, x) });
    const input = await context.createTensor({ ...f32([N]), readable: true, writable: true });
    const output = await context.createTensor({ ...f32([N]), readable: true });
    for (let k = 0; k < 3; k++) {
      // A source at an odd byte offset, changed as soon as the write returns.
      const bytes = new Uint8Array(4 * N + 3);
      const source = new Uint8Array(bytes.buffer, 1, 4 * N);
      source.set(new Uint8Array(filled(k).buffer));
      context.writeTensor(input, source);
      source.fill(0xff);
      context.dispatch(graph, { x: input }, { y: output });
      const sab = new SharedArrayBuffer(4 * N + 8);
      const into = new Uint8Array(sab, 5, 4 * N);
      await context.readTensor(output, into);
      const doubled = filled(k).map((v) => 2 * v);
      expect(firstDifference(into, doubled)).toBe(-1);
      expect(firstDifference(new Uint8Array(await context.readTensor(output)), doubled)).toBe(-1);
      expect(firstDifference(new Uint8Array(await context.readTensor(input)), filled(k))).toBe(-1);
    }
    const { outputs } = await context.compute(graph, { x: filled(7) }, { y: new Float32Array(N) });
    expect(outputs.y.length).toBe(N);
    expect(firstDifference(outputs.y, filled(7).map((v) => 2 * v))).toBe(-1);
    context.destroy();
  });
});

describe('graph.destroy()', () => {
  test('later dispatch throws and compute rejects with InvalidStateError', async () => {
    const context = await ml.createContext();
    const b = new MLGraphBuilder(context);
    const x = b.input('x', f32([2]));
    const graph = await b.build({ y: b.neg(x) });
    const t = await context.createTensor({ ...f32([2]), writable: true });
    const o = await context.createTensor({ ...f32([2]), readable: true });
    graph.destroy();
    graph.destroy();
    expect(thrown(() => context.dispatch(graph, { x: t }, { y: o })).name).toBe('InvalidStateError');
    const inp = new Float32Array(2);
    const out = new Float32Array(2);
    expect((await context.compute(graph, { x: inp }, { y: out }).catch((e) => e)).name).toBe('InvalidStateError');
    // Nothing was detached by the refused compute.
    expect(inp.byteLength).toBe(8);
  });
});

describe('context.destroy()', () => {
  test('pending reads, builds, tensor creations and computes reject; lost resolves', async () => {
    const context = await ml.createContext({ label: 'doomed' });
    const b = new MLGraphBuilder(context);
    const x = b.input('x', f32([2]));
    const graph = await b.build({ y: b.abs(x) });
    const t = await context.createTensor({ ...f32([2]), readable: true, writable: true });

    const b2 = new MLGraphBuilder(context);
    const x2 = b2.input('x', f32([2]));
    const pending = [
      context.readTensor(t),
      b2.build({ y: b2.relu(x2) }),
      context.createTensor(f32([2])),
      context.compute(graph, { x: new Float32Array(2) }, { y: new Float32Array(2) }),
    ];
    context.destroy();
    const results = await Promise.allSettled(pending);
    for (const r of results) {
      expect(r.status).toBe('rejected');
      expect(r.reason.name).toBe('InvalidStateError');
    }
    const info = await context.lost;
    expect(info.message).toMatch(/destroyed/);
    expect(info.message).toMatch(/doomed/);

    // Builders and methods of a lost context refuse to work.
    expect(thrown(() => new MLGraphBuilder(context)).name).toBe('InvalidStateError');
    expect(thrown(() => b.abs(x)).name).toBe('InvalidStateError');
    expect((await rejection(context.createTensor(f32([1])))).name).toBe('InvalidStateError');
    expect(thrown(() => context.dispatch(graph, { x: t }, { y: t })).name).toBe('InvalidStateError');

    // A new context works.
    const fresh = await ml.createContext();
    const fb = new MLGraphBuilder(fresh);
    const fx = fb.input('x', f32([1]));
    const g = await fb.build({ y: fb.neg(fx) });
    const out = new Float32Array(1);
    fresh.computeSync(g, { x: new Float32Array([2]) }, { y: out });
    expect(out[0]).toBe(-2);
  });

  test('lost obtained before destroy() resolves once, with the same promise', async () => {
    const context = await ml.createContext();
    const lost = context.lost;
    expect(context.lost).toBe(lost);
    context.destroy();
    context.destroy();
    await expect(lost).resolves.toMatchObject({ message: expect.stringMatching(/destroyed/) });
  });
});

describe('non-fatal errors on the timeline', () => {
  const held = [];
  // A real failure: graph 'foo' needs an intermediate of 256 KiB, which
  // fits the context's memoryLimit of 320 KiB on its own (so it builds),
  // but not beside the 128 KiB tensor the context also holds, so dispatch
  // 'foo' fails on the worker.
  async function setup() {
    const context = await ml.createContext({ memoryLimit: 320 * 1024 });
    const wide = 65536;
    const b = new MLGraphBuilder(context);
    const x = b.input('x', f32([1, 4]));
    const w1 = b.constant(f32([4, wide]), new Float32Array(4 * wide).fill(0.5));
    const w2 = b.constant(f32([wide, 4]), new Float32Array(wide * 4).fill(0.25));
    const foo = await b.build({ a: b.matmul(b.matmul(x, w1), w2) });

    const b2 = new MLGraphBuilder(context);
    const a = b2.input('a', f32([1, 4]));
    const bar = await b2.build({ b: b2.relu(a) });

    const rw = { readable: true, writable: true };
    const input = await context.createTensor({ ...f32([1, 4]), ...rw, label: 'input' });
    const tensorA = await context.createTensor({ ...f32([1, 4]), ...rw, label: 'A' });
    const tensorB = await context.createTensor({ ...f32([1, 4]), ...rw, label: 'B' });
    // Held by the returned object's context for the test's length.
    held.push(await context.createTensor({ ...f32([32 * 1024]), label: 'ballast' }));
    return { context, foo, bar, input, tensorA, tensorB };
  }

  test("the discussion example: 'foo' errors A, 'bar' errors B, a write clears A", async () => {
    const { context, foo, bar, input, tensorA, tensorB } = await setup();
    context.writeTensor(input, new Float32Array([1, 2, 3, 4]));
    context.dispatch(foo, { x: input }, { a: tensorA }, { label: 'foo' });
    context.dispatch(bar, { a: tensorA }, { b: tensorB }, { label: 'bar' });

    const ea = await rejection(context.readTensor(tensorA));
    expect(ea.name).toBe('OperationError');
    expect(ea.message).toMatch(/'foo'/);
    expect(ea.message).toMatch(/memoryLimit/);
    expect(ea.message).not.toMatch(/'bar'/);

    const eb = await rejection(context.readTensor(tensorB));
    expect(eb.name).toBe('OperationError');
    expect(eb.message).toMatch(/'bar'/);
    expect(eb.message).toMatch(/'foo'/);

    // The context stays usable, and a write clears the errored state.
    context.writeTensor(tensorA, new Float32Array([-1, 2, -3, 4]));
    expect([...new Float32Array(await context.readTensor(tensorA))]).toEqual([-1, 2, -3, 4]);
    // B is still errored until something writes it successfully...
    expect((await rejection(context.readTensor(tensorB))).name).toBe('OperationError');
    // ...such as a dispatch that now runs.
    context.dispatch(bar, { a: tensorA }, { b: tensorB }, { label: 'bar' });
    expect([...new Float32Array(await context.readTensor(tensorB))]).toEqual([0, 2, 0, 4]);
  });

  test('an unlabelled failing dispatch is reported as such, and other work goes on', async () => {
    const { context, foo, input, tensorA } = await setup();
    context.dispatch(foo, { x: input }, { a: tensorA });
    const e = await rejection(context.readTensor(tensorA));
    expect(e.name).toBe('OperationError');
    expect(e.message).toMatch(/unlabelled dispatch/);
    const ok = await context.readTensor(input);
    expect(ok.byteLength).toBe(16);
  });

  test('createTensor beyond the memoryLimit rejects with UnknownError', async () => {
    const context = await ml.createContext({ memoryLimit: 1024 });
    const e = await rejection(context.createTensor({ ...f32([1024]), label: 'big' }));
    expect(e.name).toBe('UnknownError');
    expect(e.message).toMatch(/'big'/);
    await expect(context.createTensor(f32([16]))).resolves.toBeDefined();
  });

  test('a CPU graph whose intermediates cannot fit the memoryLimit is refused at build', async () => {
    const context = await ml.createContext({ memoryLimit: 64 * 1024 });
    const b = new MLGraphBuilder(context);
    const x = b.input('x', f32([1, 4]));
    const w = b.constant(f32([4, 65536]), new Float32Array(4 * 65536));
    const wide = b.relu(b.matmul(x, w), { label: 'wide' });
    const e = await rejection(b.build({ y: b.reduceSum(wide) }, { label: 'big' }));
    expect(e.name).toBe('OperationError');
    // The operator that does not fit, its label and shape, and the bytes.
    expect(e.message).toMatch(/'big'/);
    expect(e.message).toMatch(/matmul/);
    expect(e.message).toMatch(/\[1, 65536\] \(262144 bytes\)/);
    expect(e.message).toMatch(/memoryLimit of 65536 bytes/);
    // The context is usable afterwards, and a graph that fits builds.
    const b2 = new MLGraphBuilder(context);
    const y = b2.input('y', f32([4]));
    await expect(b2.build({ z: b2.relu(y) })).resolves.toBeDefined();
  });

  test('a failed build names its label and rejects with OperationError', async () => {
    let gpu;
    try {
      gpu = await ml.createContext({ deviceType: 'gpu' });
    } catch (e) {
      expect(e.name).toBe('NotSupportedError');
      return; // no adapter here: createContext's refusal is the checked behaviour
    }
    // A real failure: an intermediate just larger than the largest tensor
    // the GPU holds (one storage binding), built from small inputs.
    const max = gpu.opSupportLimits().maxTensorByteLength;
    const n = Math.ceil(Math.sqrt(max / 4)) + 1;
    const b = new MLGraphBuilder(gpu);
    const col = b.input('col', f32([n, 1]));
    const row = b.input('row', f32([1, n]));
    const e = await rejection(b.build({ y: b.matmul(col, row) }, { label: 'outer' }));
    expect(e.name).toBe('OperationError');
    expect(e.message).toMatch(/'outer'/);
  });
});

describe('exceptions', () => {
  // A few tensors are matched to the graph's names by a scan, many by a
  // table: both give the same errors and the same results.
  test.each([3, 40])('dispatch with %i inputs: names and repeated tensors are checked', async (n) => {
    const context = await ml.createContext();
    const b = new MLGraphBuilder(context);
    const xs = Array.from({ length: n }, (_, i) => b.input(`x${i}`, f32([2])));
    const graph = await b.build({ y: xs.reduce((acc, x) => b.add(acc, x)) });
    const inputs = {};
    for (let i = 0; i < n; i++) {
      inputs[`x${i}`] = await context.createTensor({ ...f32([2]), writable: true });
      context.writeTensor(inputs[`x${i}`], new Float32Array([i, 2 * i]));
    }
    const y = await context.createTensor({ ...f32([2]), readable: true });
    context.dispatch(graph, inputs, { y });
    const sum = (n * (n - 1)) / 2;
    expect(Array.from(new Float32Array(await context.readTensor(y)))).toEqual([sum, 2 * sum]);

    const missing = { ...inputs, z: inputs.x0 };
    delete missing[`x${n - 1}`];
    const e1 = thrown(() => context.dispatch(graph, missing, { y }));
    expect(e1.name).toBe('TypeError');
    expect(e1.message).toBe(`inputs has no entry named "x${n - 1}"`);
    const twice = { ...inputs, [`x${n - 1}`]: inputs.x0 };
    const e2 = thrown(() => context.dispatch(graph, twice, { y }));
    expect(e2.name).toBe('TypeError');
    expect(e2.message).toMatch(/a tensor may appear only once among the inputs and outputs/);
    const e3 = thrown(() => context.dispatch(graph, inputs, { y: inputs.x1 }));
    expect(e3.message).toMatch(/a tensor may appear only once among the inputs and outputs/);
    context.destroy();
  });

  test('argument kinds are TypeErrors, whichever way they are wrong', async () => {
    const context = await ml.createContext();
    const b = new MLGraphBuilder(context);
    const x = b.input('x', f32([2, 3]));
    // BigInt where a Number is required, and a Number where an enum string is.
    expect(thrown(() => b.softmax(x, 1n)).name).toBe('TypeError');
    expect(thrown(() => b.input('y', { dataType: 'float32', shape: [2n] })).name).toBe('TypeError');
    expect(thrown(() => b.cast(x, 3)).name).toBe('TypeError');
    expect(thrown(() => b.input('z', { dataType: 'float64', shape: [1] })).name).toBe('TypeError');
    expect(thrown(() => b.input('w', { shape: [1] })).name).toBe('TypeError');
    expect(thrown(() => b.transpose(x, { permutation: [1.5, 0] })).name).toBe('TypeError');
    await expect(ml.createContext({ deviceType: 'tpu' })).rejects.toMatchObject({ name: 'TypeError' });
    await expect(ml.createContext({ deviceType: 'npu' })).rejects.toMatchObject({
      name: 'NotSupportedError',
    });
  });
});

describe('native memory', () => {
  test('10,000 create/drop cycles of contexts and tensors keep a flat resident size', () => {
    const script = `
      const { ml } = require(${JSON.stringify(path.resolve(__dirname, '..'))});
      async function cycle() {
        const c = await ml.createContext();
        const t = await c.createTensor({ dataType: 'float32', shape: [64, 1024], writable: true });
        c.writeTensor(t, new Float32Array(64 * 1024));
      }
      (async () => {
        for (let i = 0; i < 1000; i++) await cycle();
        global.gc();
        const before = process.memoryUsage().rss;
        for (let i = 0; i < 10000; i++) await cycle();
        global.gc();
        await new Promise((r) => setTimeout(r, 200));
        global.gc();
        const after = process.memoryUsage().rss;
        console.log(JSON.stringify({ before, after }));
      })();
    `;
    const r = spawnSync(process.execPath, ['--expose-gc', '-e', script], {
      encoding: 'utf8',
      timeout: 110000,
    });
    // On failure, say how the child ended (a signal, the timeout) and
    // what it printed last.
    expect({ status: r.status, signal: r.signal, stderr: (r.stderr || '').slice(-2000) }).toMatchObject({
      status: 0,
    });
    const { before, after } = JSON.parse(r.stdout.trim().split('\n').pop());
    // Each cycle allocates 256 KiB of tensor memory, 2.5 GiB over the loop;
    // what stays must be a small fraction of one per cent of that.
    expect(after - before).toBeLessThan(64 * 1024 * 1024);
  }, 120000);
});

describe('reads due soon', () => {
  // A read that this context's recent reads say will finish within a
  // millisecond keeps the event loop turning (setImmediate) until it
  // settles, where the context's threads leave the JS thread a core; the
  // JS thread is never blocked, and nothing stays queued afterwards.
  const os = require('os');
  const cores = typeof os.availableParallelism === 'function' ? os.availableParallelism() : os.cpus().length;
  const immediates = () => process.getActiveResourcesInfo().filter((r) => r === 'Immediate').length;
  const turns = async (n) => {
    for (let i = 0; i < n; i++) await new Promise((r) => setImmediate(r));
  };
  const K = 256;
  const weights = Float32Array.from({ length: K * K }, (_, i) => ((i * 7) % 13) / 16 - 0.375);

  // A matmul of `m` rows by the constant, its input, its output and the
  // first output row computed here (exact: multiples of 1/64 well under
  // 2^18, so float32 sums them exactly in any order).
  async function product(context, m) {
    const b = new MLGraphBuilder(context);
    const x = b.input('x', f32([m, K]));
    const graph = await b.build({ y: b.matmul(x, b.constant(f32([K, K]), weights)) });
    const input = await context.createTensor({ ...f32([m, K]), writable: true });
    const output = await context.createTensor({ ...f32([m, K]), readable: true });
    const data = Float32Array.from({ length: m * K }, (_, i) => ((i * 5) % 11) / 4 - 1.25);
    context.writeTensor(input, data);
    const row0 = Array.from({ length: K }, (_, j) => {
      let s = 0;
      for (let k = 0; k < K; k++) s += data[k] * weights[k * K + j];
      return s;
    });
    return { m, graph, input, output, row0 };
  }

  // The smallest product whose dispatch takes 0.15 ms or more on this
  // machine (20 chained, then one read; the fastest of three such runs),
  // when that is under 0.8 ms: a read after one dispatch is then due
  // within a millisecond, and later than a read waits for inside the
  // call. A busy host can time one size past the range: it is timed again.
  async function dueSoon(context) {
    const timed = async (p) => {
      const view = new Float32Array(p.m * K);
      let best = Infinity;
      for (let round = 0; round < 3; round++) {
        const t = performance.now();
        for (let i = 0; i < 20; i++) context.dispatch(p.graph, { x: p.input }, { y: p.output });
        await context.readTensor(p.output, view);
        best = Math.min(best, (performance.now() - t) / 20);
      }
      return best;
    };
    for (let m = 16; m <= 8192; m *= 2) {
      const p = await product(context, m);
      let best = await timed(p);
      if (best < 0.15) continue;
      for (let again = 0; again < 5 && best > 0.8; again++) best = Math.min(best, await timed(p));
      if (best > 0.8) throw new Error(`no product takes 0.15 to 0.8 ms here (${m} rows: ${best} ms)`);
      return p;
    }
    throw new Error('no product of up to 8192 rows takes 0.15 ms');
  }

  const spare = cores >= 2 ? test : test.skip;
  if (cores < 2) {
    test('polling needs a core beside the context thread; this machine has one', () => {
      expect(cores).toBe(1);
    });
  }

  spare('the loop turns while such a read is pending, and stops once it settles', async () => {
    const context = await ml.createContext({ numThreads: 1 });
    const p = await dueSoon(context);
    // Whether a read polls follows the worker's timing of the read before
    // it (from the call to its completion), which the round trip timed
    // here bounds from above: after a round trip under 0.9 ms, a read
    // either settles inside the call (a microtask settles it) or polls.
    // Reads after slower ones (a busy host) may sleep, rightly, and are not
    // counted; the loop goes on until three reads have been seen polling.
    // Into a view: a new ArrayBuffer for each read would be freed by
    // Node's own immediates in time, which the counts below would see.
    const y = new Float32Array(p.m * K);
    let last = Infinity;
    let polled = 0;
    for (let i = 0; i < 300 && polled < 3; i++) {
      const t = performance.now();
      context.dispatch(p.graph, { x: p.input }, { y: p.output });
      const before = immediates();
      const read = context.readTensor(p.output, y);
      const turning = immediates() - before;
      let early = false;
      const seen = read.then(() => {
        early = true;
      });
      for (let j = 0; j < 8; j++) await null;
      const settledInside = early;
      await read;
      await seen;
      const took = performance.now() - t;
      expect(Array.from(y.subarray(0, K))).toEqual(p.row0.map(Math.fround));
      expect(turning).toBeLessThanOrEqual(1);
      if (last <= 0.9) {
        expect(turning === 1 || settledInside).toBe(true);
        polled += turning;
      }
      last = took;
      // The turn queued last runs, finds nothing pending and queues none.
      await turns(2);
      expect(immediates()).toBeLessThanOrEqual(before);
    }
    expect(polled).toBe(3);
    // Pending when the context goes: the read rejects and polling ends
    // by itself.
    context.dispatch(p.graph, { x: p.input }, { y: p.output });
    const read = context.readTensor(p.output);
    const turning = immediates();
    context.destroy();
    expect((await rejection(read)).name).toBe('InvalidStateError');
    await new Promise((r) => setTimeout(r, 20));
    expect(immediates()).toBe(0);
    expect(turning).toBeLessThanOrEqual(1);
  });

  spare('a context whose threads take every core does not poll', async () => {
    const context = await ml.createContext({ numThreads: cores });
    const p = await dueSoon(context);
    const y = new Float32Array(p.m * K);
    for (let i = 0; i < 3; i++) {
      context.dispatch(p.graph, { x: p.input }, { y: p.output });
      // Node's own immediates (finalizers of earlier tests' buffers) may
      // be queued: only what the call itself adds counts.
      const before = immediates();
      const read = context.readTensor(p.output, y);
      expect(immediates()).toBe(before);
      await read;
      expect(Array.from(y.subarray(0, K))).toEqual(p.row0.map(Math.fround));
    }
    context.destroy();
  });

  spare('WEBNN_CPU_SPIN_MS=0 turns polling off', () => {
    // The same reads in two processes: with the variable, none polls.
    const script = `
      const { ml, MLGraphBuilder } = require(${JSON.stringify(path.join(__dirname, '..'))});
      (async () => {
        const context = await ml.createContext({ numThreads: 1 });
        const b = new MLGraphBuilder(context);
        const d = { dataType: 'float32', shape: [1 << 18] };
        const x = b.input('x', d);
        const graph = await b.build({ y: b.add(x, x) });
        const t = await context.createTensor(d);
        const u = await context.createTensor({ ...d, readable: true });
        const view = new Float32Array(1 << 18);
        let polled = 0;
        for (let i = 0; i < 100; i++) {
          context.dispatch(graph, { x: t }, { y: u });
          const read = context.readTensor(u, view);
          polled += process.getActiveResourcesInfo().filter((r) => r === 'Immediate').length;
          await read;
        }
        console.log(polled);
        context.destroy();
      })();`;
    const run = (env) => {
      const r = spawnSync(process.execPath, ['-e', script], { env: { ...process.env, ...env }, encoding: 'utf8' });
      expect(r.stderr).toBe('');
      expect(r.status).toBe(0);
      return Number(r.stdout.trim().split('\n').pop());
    };
    expect(run({ WEBNN_CPU_SPIN_MS: '0' })).toBe(0);
    expect(run({ WEBNN_CPU_SPIN_MS: '40' })).toBeGreaterThan(0);
  });
});
