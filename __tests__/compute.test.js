'use strict';
// The compute() and computeSync() extensions of MLContext: transfer of the
// caller's buffers, the refused cases (which must detach nothing), running
// off the JS thread, and use from worker threads.

const path = require('path');
const { spawnSync } = require('child_process');
const { Worker } = require('worker_threads');
const { MLGraphBuilder } = require('..');
const {
  tag,
  expectThrow,
  expectReject,
  expectClose,
  buildGraph,
  cpuContext,
  constF32,
  testWithChildNode,
} = require('./helpers');

const ROOT = path.resolve(__dirname, '..');

let context;
let addGraph; // y = a + b, z = a * b on float32 [4]
let scaleGraph; // y = 2 * x on int32 [3]

beforeAll(async () => {
  context = await cpuContext();
  ({ graph: addGraph } = await buildGraph(context, (b) => {
    const a = b.input('a', { dataType: 'float32', shape: [4] });
    const c = b.input('b', { dataType: 'float32', shape: [4] });
    return { y: b.add(a, c), z: b.mul(a, c) };
  }));
  ({ graph: scaleGraph } = await buildGraph(context, (b) => {
    const x = b.input('x', { dataType: 'int32', shape: [3] });
    return { y: b.mul(x, b.constant('int32', 2)) };
  }));
});
afterAll(() => {
  context.destroy();
});

/** Detaches an ArrayBuffer by transferring it away. */
function detach(ab) {
  structuredClone(ab, { transfer: [ab] });
  expect(ab.byteLength).toBe(0);
}

function freshArgs() {
  return {
    inputs: { a: new Float32Array([1, 2, 3, 4]), b: new Float32Array([10, 20, 30, 40]) },
    outputs: { y: new Float32Array(4), z: new Float32Array(4) },
  };
}

function byteLengths(...records) {
  return records.flatMap((r) => Object.entries(r).map(([k, v]) => [k, v.byteLength, v.buffer.byteLength]));
}

describe('compute()', () => {
  test('resolves with new views of the same types and lengths, inputs unchanged, outputs computed', async () => {
    const { inputs, outputs } = freshArgs();
    const p = context.compute(addGraph, inputs, outputs);
    expect(typeof p.then).toBe('function');
    const r = await p;
    expect(Object.keys(r).sort()).toEqual(['inputs', 'outputs']);
    expect(Object.keys(r.inputs).sort()).toEqual(['a', 'b']);
    expect(Object.keys(r.outputs).sort()).toEqual(['y', 'z']);
    for (const v of [...Object.values(r.inputs), ...Object.values(r.outputs)]) {
      expect(tag(v)).toBe('Float32Array');
      expect(v.length).toBe(4);
    }
    expect(Array.from(r.inputs.a)).toEqual([1, 2, 3, 4]);
    expect(Array.from(r.inputs.b)).toEqual([10, 20, 30, 40]);
    expect(Array.from(r.outputs.y)).toEqual([11, 22, 33, 44]);
    expect(Array.from(r.outputs.z)).toEqual([10, 40, 90, 160]);
    // The new views are not the caller's.
    expect(r.inputs.a).not.toBe(inputs.a);
    expect(r.outputs.y).not.toBe(outputs.y);
  });

  test('large and 4-bit buffers come back exactly, and feed the next call', async () => {
    // Over 16 KiB: the returned views are over the very memory the worker
    // read and wrote (handed over, not copied), which these calls check by
    // value, twice round, as a caller looping on compute() does.
    const n = 100000;
    const { graph } = await buildGraph(context, (b) => {
      const a = b.input('a', { dataType: 'float32', shape: [n] });
      const c = b.input('b', { dataType: 'float32', shape: [n] });
      return { y: b.add(a, c) };
    });
    const a = Float32Array.from({ length: n }, (_, i) => i * 0.5);
    const c = Float32Array.from({ length: n }, (_, i) => -i);
    let ins = { a: a.slice(), b: new DataView(c.slice().buffer) };
    let outs = { y: new Float32Array(n) };
    for (let round = 0; round < 2; round++) {
      ({ inputs: ins, outputs: outs } = await context.compute(graph, ins, outs));
      expect(tag(ins.b)).toBe('DataView');
      expect(new Float32Array(ins.a.buffer)).toEqual(a);
      expect(new Float32Array(ins.b.buffer)).toEqual(c);
      expect(outs.y).toEqual(Float32Array.from(a, (x, i) => x + c[i]));
    }
    graph.destroy();

    // uint4: the worker holds one element per byte; the caller's packed
    // bytes come back packed, odd high nibble and all.
    const { graph: g4 } = await buildGraph(context, (b) => {
      const x = b.input('x', { dataType: 'uint4', shape: [5] });
      return { y: b.cast(x, 'int32') };
    });
    const packed = new Uint8Array([0x21, 0x43, 0x05]);
    const r = await context.compute(g4, { x: packed.slice() }, { y: new Int32Array(5) });
    expect(Array.from(r.inputs.x)).toEqual([0x21, 0x43, 0x05]);
    expect(Array.from(r.outputs.y)).toEqual([1, 2, 3, 4, 5]);
    g4.destroy();
  });

  test("detaches the caller's input and output buffers synchronously", async () => {
    const { inputs, outputs } = freshArgs();
    const buffers = [inputs.a.buffer, inputs.b.buffer, outputs.y.buffer, outputs.z.buffer];
    const p = context.compute(addGraph, inputs, outputs);
    // Before awaiting anything.
    for (const ab of buffers) expect(ab.byteLength).toBe(0);
    for (const v of [inputs.a, inputs.b, outputs.y, outputs.z]) {
      expect(v.byteLength).toBe(0);
      expect(v.length).toBe(0);
    }
    await p;
    for (const ab of buffers) expect(ab.byteLength).toBe(0);
  });

  test('keeps the typed array types: Int32Array, Uint8Array and DataView', async () => {
    const r = await context.compute(scaleGraph, { x: new Int32Array([1, -2, 3]) }, { y: new Int32Array(3) });
    expect(tag(r.inputs.x)).toBe('Int32Array');
    expect(tag(r.outputs.y)).toBe('Int32Array');
    expect(Array.from(r.outputs.y)).toEqual([2, -4, 6]);

    const bytesIn = new Uint8Array(new Int32Array([5, 6, 7]).buffer);
    const r2 = await context.compute(scaleGraph, { x: bytesIn }, { y: new DataView(new ArrayBuffer(12)) });
    expect(tag(r2.inputs.x)).toBe('Uint8Array');
    expect(r2.inputs.x.length).toBe(12);
    expect(Array.from(new Int32Array(r2.inputs.x.buffer, r2.inputs.x.byteOffset, 3))).toEqual([5, 6, 7]);
    expect(tag(r2.outputs.y)).toBe('DataView');
    expect(r2.outputs.y.byteLength).toBe(12);
    expect([0, 4, 8].map((o) => r2.outputs.y.getInt32(o, true))).toEqual([10, 12, 14]);
  });

  test('the results can be passed back to compute() again', async () => {
    let r = await context.compute(scaleGraph, { x: new Int32Array([1, 2, 3]) }, { y: new Int32Array(3) });
    for (let i = 0; i < 3; i++) {
      r = await context.compute(scaleGraph, { x: r.outputs.y }, { y: r.inputs.x });
    }
    expect(Array.from(r.outputs.y)).toEqual([16, 32, 48]);
  });

  test('several computes in flight at once all resolve correctly', async () => {
    const ps = [];
    for (let i = 0; i < 8; i++) {
      ps.push(context.compute(scaleGraph, { x: new Int32Array([i, i + 1, -i - 1]) }, { y: new Int32Array(3) }));
    }
    const rs = await Promise.all(ps);
    rs.forEach((r, i) => expect(Array.from(r.outputs.y)).toEqual([2 * i, 2 * i + 2, -2 * i - 2]));
  });

  describe('refused arguments reject with TypeError and detach nothing', () => {
    const bytesOf = (v) => (v.buffer.byteLength === 0 ? [] : Array.from(new Uint8Array(v.buffer, v.byteOffset, v.byteLength)));

    // `mentions`: what the message must name (the transfer checks name
    // compute(); the descriptor checks name the argument).
    async function expectRefused(inputs, outputs, ...mentions) {
      const before = byteLengths(inputs, outputs);
      const contents = Object.values(inputs).map(bytesOf);
      await expectReject(context.compute(addGraph, inputs, outputs), 'TypeError', ...mentions);
      expect(byteLengths(inputs, outputs)).toEqual(before);
      Object.values(inputs).forEach((v, i) => {
        expect(bytesOf(v)).toEqual(contents[i]);
      });
    }

    test('a view over a SharedArrayBuffer (input)', async () => {
      const { inputs, outputs } = freshArgs();
      const shared = new Float32Array(new SharedArrayBuffer(16));
      shared.set([1, 2, 3, 4]);
      await expectRefused({ a: shared, b: inputs.b }, outputs, 'compute');
    });

    test('a view over a SharedArrayBuffer (output)', async () => {
      const { inputs, outputs } = freshArgs();
      await expectRefused(inputs, { y: outputs.y, z: new Float32Array(new SharedArrayBuffer(16)) }, 'compute');
    });

    test('a subarray that does not span its ArrayBuffer', async () => {
      const { inputs, outputs } = freshArgs();
      const big = new Float32Array([1, 2, 3, 4, 5, 6, 7, 8]);
      await expectRefused({ a: big.subarray(0, 4), b: inputs.b }, outputs, 'compute');
      await expectRefused({ a: inputs.a, b: big.subarray(4) }, outputs, 'compute');
      await expectRefused(inputs, { y: new Float32Array(new ArrayBuffer(20), 4, 4), z: outputs.z }, 'compute');
    });

    test('a small pooled Buffer (Buffer.from) as a byte view', async () => {
      const { inputs, outputs } = freshArgs();
      const pooled = Buffer.from(new Uint8Array(new Float32Array([1, 2, 3, 4]).buffer));
      expect(pooled.buffer.byteLength).toBeGreaterThan(pooled.byteLength);
      await expectRefused({ a: pooled, b: inputs.b }, outputs, 'compute');
      // The pool's other bytes are intact.
      expect(pooled.buffer.byteLength).toBeGreaterThan(16);
    });

    test('an already detached buffer', async () => {
      const { inputs, outputs } = freshArgs();
      const gone = new Float32Array(4);
      detach(gone.buffer);
      await expectRefused({ a: gone, b: inputs.b }, outputs);
      const goneOut = new Float32Array(4);
      detach(goneOut.buffer);
      await expectRefused(inputs, { y: goneOut, z: outputs.z });
    });

    test('an ArrayBuffer shared between two arguments', async () => {
      const { inputs, outputs } = freshArgs();
      // The same view twice.
      await expectRefused({ a: inputs.a, b: inputs.a }, outputs, 'compute');
      // Two views over one whole buffer: input and output.
      await expectRefused(inputs, { y: outputs.y, z: new Float32Array(inputs.b.buffer) }, 'compute');
      // Two outputs.
      await expectRefused(inputs, { y: outputs.y, z: new Float32Array(outputs.y.buffer) }, 'compute');
    });

    test('wrong size, wrong type, missing and extra names', async () => {
      const { inputs, outputs } = freshArgs();
      await expectRefused({ a: new Float32Array(3), b: inputs.b }, outputs);
      await expectRefused({ a: new Int32Array(4), b: inputs.b }, outputs);
      await expectRefused({ a: inputs.a }, outputs);
      await expectRefused({ ...inputs, c: new Float32Array(4) }, outputs);
      await expectRefused(inputs, { y: outputs.y });
      await expectRefused(inputs, { y: outputs.y, w: outputs.z });
    });

    test('a non-view argument', async () => {
      const { inputs, outputs } = freshArgs();
      const before = byteLengths(inputs, outputs);
      await expectReject(context.compute(addGraph, { a: [1, 2, 3, 4], b: inputs.b }, outputs), 'TypeError');
      await expectReject(context.compute(addGraph, { a: inputs.a.buffer, b: inputs.b }, outputs), 'TypeError');
      await expectReject(context.compute(addGraph, inputs, null), 'TypeError');
      await expectReject(context.compute({}, inputs, outputs), 'TypeError');
      expect(byteLengths(inputs, outputs)).toEqual(before);
    });

    test('the refused call leaves the arguments usable for a correct call', async () => {
      const { inputs, outputs } = freshArgs();
      await expectReject(context.compute(addGraph, { a: inputs.a, b: inputs.a }, outputs), 'TypeError');
      const r = await context.compute(addGraph, inputs, outputs);
      expect(Array.from(r.outputs.y)).toEqual([11, 22, 33, 44]);
    });
  });

  testWithChildNode('in the main realm, a view over a SharedArrayBuffer is refused with TypeError and nothing is detached', () => {
    // jest runs this file in a separate realm; check the plain-Node path too.
    const code = `
      const { ml, MLGraphBuilder } = require(${JSON.stringify(ROOT)});
      (async () => {
        const c = await ml.createContext();
        const b = new MLGraphBuilder(c);
        const x = b.input('x', { dataType: 'float32', shape: [2] });
        const g = await b.build({ y: b.add(x, x) });
        const x1 = new Float32Array(new SharedArrayBuffer(8));
        const y1 = new Float32Array(2);
        let name = 'none';
        await c.compute(g, { x: x1 }, { y: y1 }).catch((e) => { name = e.name; });
        console.log(JSON.stringify({ name, x: x1.byteLength, y: y1.byteLength }));
      })();`;
    const r = spawnSync(process.execPath, ['-e', code], { encoding: 'utf8', timeout: 30000 });
    expect(r.status).toBe(0);
    expect(JSON.parse(r.stdout.trim())).toEqual({ name: 'TypeError', x: 8, y: 8 });
  });

  test('a destroyed graph rejects with InvalidStateError and detaches nothing', async () => {
    const { graph } = await buildGraph(context, (b) => {
      const x = b.input('x', { dataType: 'float32', shape: [2] });
      return { y: b.relu(x) };
    });
    graph.destroy();
    const x = new Float32Array([1, -1]);
    const y = new Float32Array(2);
    await expectReject(context.compute(graph, { x }, { y }), 'InvalidStateError');
    expect([x.byteLength, y.byteLength]).toEqual([8, 8]);
  });

  test('the JS thread keeps running timers while a long compute runs', async () => {
    // A chain of 1024x1024 matmuls; w = all 1/1024, so ones stay ones.
    const N = 1024;
    const w = new Float32Array(N * N).fill(1 / N);
    const ones = () => new Float32Array(N * N).fill(1);
    async function chain(length) {
      const { graph } = await buildGraph(context, (b) => {
        let y = b.input('x', { dataType: 'float32', shape: [N, N] });
        const wc = constF32(b, [N, N], w);
        for (let i = 0; i < length; i++) y = b.matmul(y, wc);
        return { y };
      });
      return graph;
    }
    // Calibrate: one matmul, timed synchronously.
    const one = await chain(1);
    let t0 = performance.now();
    context.computeSync(one, { x: ones() }, { y: new Float32Array(N * N) });
    const perMatmul = Math.max(performance.now() - t0, 0.5);
    const length = Math.min(200, Math.max(2, Math.ceil(250 / perMatmul)));
    const graph = await chain(length);

    let ticks = 0;
    const timer = setInterval(() => { ticks++; }, 5);
    t0 = performance.now();
    const r = await context.compute(graph, { x: ones() }, { y: new Float32Array(N * N) });
    const elapsed = performance.now() - t0;
    clearInterval(timer);
    expect(elapsed).toBeGreaterThan(50);
    expect(ticks).toBeGreaterThan(0);
    expect(r.outputs.y.length).toBe(N * N);
    expectClose([r.outputs.y[0], r.outputs.y[N * N - 1], r.outputs.y[12345]], [1, 1, 1], 1e-4);
    one.destroy();
    graph.destroy();
  });
});

describe('computeSync()', () => {
  test('writes the results into the output views in place and returns the outputs record', () => {
    const { inputs, outputs } = freshArgs();
    const yBuffer = outputs.y.buffer;
    const r = context.computeSync(addGraph, inputs, outputs);
    expect(r).toBe(outputs);
    expect(outputs.y.buffer).toBe(yBuffer);
    expect(Array.from(outputs.y)).toEqual([11, 22, 33, 44]);
    expect(Array.from(outputs.z)).toEqual([10, 40, 90, 160]);
    // Nothing was detached.
    expect(inputs.a.byteLength).toBe(16);
    expect(Array.from(inputs.a)).toEqual([1, 2, 3, 4]);
  });

  test('accepts views that compute() refuses: subarrays, pooled Buffers, shared memory', () => {
    const big = new Int32Array([0, 1, 2, 3, 0, 0, 0, 0]);
    const out = big.subarray(4, 7);
    context.computeSync(scaleGraph, { x: big.subarray(1, 4) }, { y: out });
    expect(Array.from(big)).toEqual([0, 1, 2, 3, 2, 4, 6, 0]);

    const shared = new Int32Array(new SharedArrayBuffer(12));
    context.computeSync(scaleGraph, { x: new Int32Array([5, 6, 7]) }, { y: shared });
    expect(Array.from(shared)).toEqual([10, 12, 14]);

    const pooled = Buffer.from(new Uint8Array(new Int32Array([-1, -2, -3]).buffer));
    const y = new Int32Array(3);
    context.computeSync(scaleGraph, { x: pooled }, { y });
    expect(Array.from(y)).toEqual([-2, -4, -6]);
  });

  test('refuses wrong arguments with TypeError and a destroyed graph with InvalidStateError', async () => {
    expectThrow(() => context.computeSync(scaleGraph, { x: new Int32Array(2) }, { y: new Int32Array(3) }), 'TypeError');
    expectThrow(() => context.computeSync(scaleGraph, { x: new Float32Array(3) }, { y: new Int32Array(3) }), 'TypeError');
    expectThrow(() => context.computeSync(scaleGraph, {}, { y: new Int32Array(3) }), 'TypeError');
    const { graph } = await buildGraph(context, (b) => ({ y: b.abs(b.input('x', { dataType: 'float32', shape: [1] })) }));
    graph.destroy();
    expectThrow(() => context.computeSync(graph, { x: new Float32Array(1) }, { y: new Float32Array(1) }), 'InvalidStateError');
  });

  test('is ordered after queued dispatches on the same context', async () => {
    const { graph } = await buildGraph(context, (b) => {
      const x = b.input('x', { dataType: 'float32', shape: [2] });
      return { y: b.sqrt(x) };
    });
    const x = await context.createTensor({ dataType: 'float32', shape: [2], writable: true });
    const y = await context.createTensor({ dataType: 'float32', shape: [2], readable: true });
    context.writeTensor(x, new Float32Array([16, 25]));
    context.dispatch(graph, { x }, { y });
    const out = { y: new Float32Array(2) };
    context.computeSync(graph, { x: new Float32Array([4, 9]) }, out);
    expect(Array.from(out.y)).toEqual([2, 3]);
    expect(Array.from(new Float32Array(await context.readTensor(y)))).toEqual([4, 5]);
    x.destroy();
    y.destroy();
  });
});

describe('worker threads', () => {
  function runWorker(code) {
    return new Promise((resolve, reject) => {
      const w = new Worker(code, { eval: true, workerData: { root: ROOT } });
      let message;
      w.on('message', (m) => { message = m; });
      w.on('error', reject);
      w.on('exit', (exitCode) => resolve({ message, exitCode }));
    });
  }

  const WORKER = `
    const { parentPort, workerData, threadId } = require('worker_threads');
    const { ml, MLGraphBuilder } = require(workerData.root);
    (async () => {
      const c = await ml.createContext();
      const b = new MLGraphBuilder(c);
      const a = b.input('a', { dataType: 'float32', shape: [2, 3] });
      const w = b.constant({ dataType: 'float32', shape: [3, 2] }, new Float32Array([7, 8, 9, 10, 11, 12]));
      const g = await b.build({ y: b.add(b.matmul(a, w), b.constant('float32', threadId)) });
      const out = { y: new Float32Array(4) };
      const r = c.computeSync(g, { a: new Float32Array([1, 2, 3, 4, 5, 6]) }, out);
      const viaCompute = await c.compute(g, { a: new Float32Array([1, 2, 3, 4, 5, 6]) }, { y: new Float32Array(4) });
      parentPort.postMessage({ threadId, same: r === out, y: Array.from(out.y), y2: Array.from(viaCompute.outputs.y) });
      c.destroy();
    })().catch((e) => parentPort.postMessage({ error: e.name + ': ' + e.message }));
  `;

  test('computeSync (and compute) in a worker_thread', async () => {
    const { message, exitCode } = await runWorker(WORKER);
    expect(message.error).toBeUndefined();
    const t = message.threadId;
    expect(message.same).toBe(true);
    expect(message.y).toEqual([58 + t, 64 + t, 139 + t, 154 + t]);
    expect(message.y2).toEqual(message.y);
    expect(exitCode).toBe(0);
  });

  test('the addon loads and works in two worker_threads at once', async () => {
    const [a, b] = await Promise.all([runWorker(WORKER), runWorker(WORKER)]);
    for (const { message, exitCode } of [a, b]) {
      expect(message.error).toBeUndefined();
      const t = message.threadId;
      expect(message.y).toEqual([58 + t, 64 + t, 139 + t, 154 + t]);
      expect(exitCode).toBe(0);
    }
    expect(a.message.threadId).not.toBe(b.message.threadId);
    // The main thread's context still works afterwards.
    const out = { y: new Int32Array(3) };
    context.computeSync(scaleGraph, { x: new Int32Array([1, 2, 3]) }, out);
    expect(Array.from(out.y)).toEqual([2, 4, 6]);
  });

  test('a worker that leaves its context alive still exits', async () => {
    const { message, exitCode } = await runWorker(`
      const { parentPort, workerData } = require('worker_threads');
      const { ml } = require(workerData.root);
      ml.createContext().then(async (c) => {
        const t = await c.createTensor({ dataType: 'float32', shape: [1], readable: true, writable: true });
        c.writeTensor(t, new Float32Array([3]));
        parentPort.postMessage(Array.from(new Float32Array(await c.readTensor(t))));
      });
    `);
    expect(message).toEqual([3]);
    expect(exitCode).toBe(0);
  }, 30000);
});
