'use strict';
// onnxruntime-web's WebNN execution provider on webnn-node's CPU backend,
// as a user would run it (see docs/ort-web.md): ONNX models written by
// ort-web/models.js run once on ORT's WebNN provider and once on its own
// wasm provider in the same process, and must agree within atol 1e-4 +
// rtol 1e-3 per element. The test also asserts how ORT partitioned each
// model (from its log), that every WebNN partition was dispatched, and
// that no WebNN call ORT made threw or rejected.
//
// ORT runs in a child process started with --liftoff-only: V8's background
// tier-up of ORT's large wasm module can stall a process's event loop for
// minutes on a small machine (and jest's with it). The child prints one
// JSON report (ort-web/run.mjs).

const { spawn } = require('child_process');
const fs = require('fs');
const path = require('path');

const root = path.resolve(__dirname, '..');
// What 'onnxruntime-web/all' resolves to (the package exports no
// package.json to resolve instead).
const bundle = path.join(root, 'node_modules', 'onnxruntime-web', 'dist', 'ort.all.bundle.min.mjs');
const { models } = require('./ort-web/models.js');

const { ml, MLGraphBuilder } = require('..');
const { expectThrow, expectReject } = require('./helpers');

describe('Int8Array as a byte view in writeTensor and readTensor (compatibility extension)', () => {
  let context;
  beforeAll(async () => {
    context = await ml.createContext({ deviceType: 'cpu' });
  });
  afterAll(() => context.destroy());

  const tensor = (dataType, shape) => context.createTensor({ dataType, shape, readable: true, writable: true });
  // Bytes of `typed` at an odd offset of a SharedArrayBuffer, as an
  // Int8Array, the way onnxruntime-web passes slices of its wasm heap.
  function heapView(typed, offset = 4097) {
    const heap = new SharedArrayBuffer(offset + typed.byteLength + 64);
    const view = new Int8Array(heap, offset, typed.byteLength);
    view.set(new Int8Array(typed.buffer, typed.byteOffset, typed.byteLength));
    return view;
  }

  test('writeTensor takes an Int8Array of exactly the byte length, whatever the data type', async () => {
    const cases = [
      ['float32', new Float32Array([1.5, -2, 3.25, 1e-8, -0, 7])],
      ['float16', new Uint16Array([0x3c00, 0xc000, 0x7bff])],
      ['int64', new BigInt64Array([1n << 40n, -5n])],
      ['uint32', new Uint32Array([0xffffffff, 3])],
      ['int32', new Int32Array([-7, 9, 11])],
    ];
    for (const [dataType, data] of cases) {
      const t = await tensor(dataType, [data.length]);
      expect(context.writeTensor(t, heapView(data))).toBeUndefined();
      const got = new Uint8Array(await context.readTensor(t));
      expect(Array.from(got)).toEqual(Array.from(new Uint8Array(data.buffer)));
      t.destroy();
    }
  });

  test('readTensor(tensor, view) fills an Int8Array over a SharedArrayBuffer at an offset, and nothing around it', async () => {
    const data = new Float32Array([0.5, -1, 2, 3e5]);
    const t = await tensor('float32', [2, 2]);
    context.writeTensor(t, data);
    const heap = new SharedArrayBuffer(8192);
    new Uint8Array(heap).fill(0xab);
    const view = new Int8Array(heap, 5003, 16);
    await expect(context.readTensor(t, view)).resolves.toBeUndefined();
    expect(Array.from(new Uint8Array(heap, 5003, 16))).toEqual(Array.from(new Uint8Array(data.buffer)));
    expect(new Uint8Array(heap, 5002, 1)[0]).toBe(0xab);
    expect(new Uint8Array(heap, 5019, 1)[0]).toBe(0xab);
    t.destroy();
  });

  test('the byte length must still match exactly', async () => {
    const t = await tensor('float32', [3]);
    expectThrow(() => context.writeTensor(t, new Int8Array(11)), 'TypeError', '11 bytes');
    expectThrow(() => context.writeTensor(t, new Int8Array(13)), 'TypeError', '13 bytes');
    await expectReject(context.readTensor(t, new Int8Array(11)), 'TypeError', '11 bytes');
    t.destroy();
  });

  test('other mismatched view types are still refused, and so are Int8Arrays outside tensor reads and writes', async () => {
    const t = await tensor('float32', [4]);
    expectThrow(() => context.writeTensor(t, new Int16Array(8)), 'TypeError', 'float32');
    await expectReject(context.readTensor(t, new Int32Array(4)), 'TypeError', 'float32');
    t.destroy();
    // Operand data keeps the spec's table: Uint8Array or the matching type.
    const b = new MLGraphBuilder(context);
    expectThrow(() => b.constant({ dataType: 'float32', shape: [2] }, new Int8Array(8)), 'TypeError', 'float32');
    await expectReject(
      context.createConstantTensor({ dataType: 'float32', shape: [2] }, new Int8Array(8)),
      'TypeError',
      'float32',
    );
  });
});

let report;
let failure;
// The child's stderr: the CPU backend's build-time lines (WEBNN_CPU_PROFILE).
let stderr = '';

function runChild() {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--liftoff-only', path.join(__dirname, 'ort-web', 'run.mjs')], {
      cwd: root,
      // The backend reports which graphs keep quantized weights quantized.
      env: { ...process.env, WEBNN_CPU_PROFILE: '1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    child.on('close', (code, signal) => resolve({ code, signal, out, err }));
  });
}

function modelReport(name) {
  if (failure) throw new Error(failure);
  const m = report.models.find((x) => x.name === name);
  if (!m) throw new Error(`no report for ${name}`);
  if (m.error) throw new Error(`${name} failed in ORT:\n${m.error}\nORT warnings:\n${report.logTail.join('\n')}`);
  return m;
}

describe('onnxruntime-web WebNN EP on webnn-node', () => {
  beforeAll(async () => {
    if (!fs.existsSync(bundle)) {
      failure =
        'onnxruntime-web is not installed: it is a devDependency of these tests (npm install --ignore-scripts)';
      return;
    }
    const r = await runChild();
    stderr = r.err;
    try {
      report = JSON.parse(r.out.trim().split('\n').pop());
    } catch {
      failure = `the ORT child process exited (code ${r.code}, signal ${r.signal}) without a report:\n${r.err.slice(-4000)}\n${r.out.slice(-2000)}`;
    }
  }, 170000);

  for (const { name, expect: want, node } of models()) {
    test(`${name}: partitioned as expected, dispatched, same results as the wasm EP`, () => {
      const m = modelReport(name);
      const p = m.partitioning;
      expect(p.summary).toBe(true);
      expect({ webnn: p.webnn, cpu: p.cpu, partitions: p.partitions, cpuOps: p.cpuOps }).toEqual(want);
      // One dispatch per WebNN partition: the model really ran on WebNN.
      expect(m.dispatches).toBe(want.partitions);
      const outputs = Object.entries(m.outputs);
      expect(outputs.length).toBeGreaterThan(0);
      // Outputs missing, of another type or shape (mismatches -1), or with
      // elements outside the tolerance; listed with their largest errors.
      const bad = outputs.filter(([, o]) => o.missing || o.mismatches !== 0).map(([output, o]) => ({ output, ...o }));
      expect(bad).toEqual([]);
      if (node) {
        // The same outputs against onnxruntime-node, within the same tolerance.
        const native = Object.entries(m.nodeOutputs || {});
        expect(native.map(([output]) => output).sort()).toEqual(outputs.map(([output]) => output).sort());
        const off = native.filter(([, o]) => o.missing || o.mismatches !== 0).map(([output, o]) => ({ output, ...o }));
        expect(off).toEqual([]);
      }
    });
  }

  test('MatMulNBits runs on the CPU backend\'s quantized products: its three 4-bit weight matrices stay quantized', () => {
    if (failure) throw new Error(failure);
    // With WEBNN_CPU_PROFILE set, the backend says at build which graphs
    // multiply by quantized weights; only the matmul-nbits model has any.
    // (ORT may build its graph more than once; each build says the same.)
    const lines = stderr.split('\n').filter((l) => /quantized weight matrices/.test(l));
    expect(lines.length).toBeGreaterThan(0);
    for (const line of lines) {
      expect(line).toMatch(/multiplies by 3 quantized weight matrices \(\d+ bytes/);
      // Two reads of a 64x64 matrix (packed once) and a 64x24 one: about
      // their quantized size (4 bits, and a float32 scale and offset per
      // 32 weights), far from the 28,672 bytes of the three in float32.
      const bytes = Number(/\((\d+) bytes/.exec(line)[1]);
      expect(bytes).toBeLessThan(((2 * 64 * 64 + 64 * 24) * 4) / 3);
    }
  });

  test('no WebNN call that ORT made threw or rejected, and no rejection went unhandled', () => {
    if (failure) throw new Error(failure);
    expect(report.rejected).toEqual([]);
    expect(report.unhandled).toEqual([]);
    expect(report.models.filter((m) => m.error).map((m) => m.name)).toEqual([]);
  });

  test('partition boundaries cross as Int8Array and Uint8Array views of ORT\'s SharedArrayBuffer heap', () => {
    if (failure) throw new Error(failure);
    const views = report.transfers.filter((t) => t.model === 'partitioned');
    const reads = views.filter((t) => t.call === 'readTensor' && t.view === 'Int8Array over SharedArrayBuffer');
    const writes = views.filter((t) => t.call === 'writeTensor' && /over SharedArrayBuffer$/.test(t.view));
    // The first partition's two outputs go to the Sum on ORT's CPU provider,
    // the Sum's result comes back into the second partition.
    expect(reads.map((t) => t.dataType)).toEqual(['float32', 'float32']);
    expect(writes.map((t) => t.dataType)).toEqual(['float32']);
    for (const t of [...reads, ...writes]) expect(t.byteOffset).toBeGreaterThan(0);
  });
});
