'use strict';
// WebGPU interop on a real WebGPU (Dawn, from the `webgpu` dev dependency):
// createContext(gpuDevice), createExportableTensor(), exportToGPU(), and
// the tensor's return when its GPUBuffer is destroyed.
//
// Where Dawn gives no adapter (the package is missing, or the Vulkan driver
// is one Dawn refuses: see docs/interop.md), the tests are skipped and the
// reason is printed.

const path = require('path');
const { spawnSync } = require('child_process');
const { Worker } = require('worker_threads');
const { ml, MLContext, MLGraphBuilder, MLTensor } = require('..');
const { expectThrow, expectReject } = require('./helpers');
const { dawnPath, probeWebGpu, webgpu, newDevice, readBuffer, runShader } = require('./interop-webgpu');

const probe = probeWebGpu();
if (!probe.ok) console.log(`WebGPU interop tests skipped: ${probe.reason}`);
const describeWebGpu = probe.ok ? describe : describe.skip;

const STORAGE = 0x80;
const COPY_SRC = 0x04;
const COPY_DST = 0x08;
const MAP_READ = 0x01;

const F32 = (shape, extra = {}) => ({ dataType: 'float32', shape, readable: true, writable: true, ...extra });

/** A graph `y = x * 2 + 1` on float32 [n]. */
async function doubler(ctx, n) {
  const b = new MLGraphBuilder(ctx);
  const x = b.input('x', { dataType: 'float32', shape: [n] });
  const y = b.add(b.mul(x, b.constant('float32', 2)), b.constant('float32', 1));
  return b.build({ y });
}

const floats = async (ctx, t) => Array.from(new Float32Array(await ctx.readTensor(t)));

describeWebGpu('WebGPU interop', () => {
  let device;
  beforeAll(async () => {
    device = await newDevice();
  });
  afterAll(async () => {
    if (!device) return;
    device.destroy();
    await device.lost;
  });

  describe('createContext(gpuDevice)', () => {
    test('gives an accelerated GPU context on the same adapter', async () => {
      const ctx = await ml.createContext(device);
      expect(ctx).toBeInstanceOf(MLContext);
      expect(ctx.accelerated).toBe(true);
      const adapter = ctx._adapter();
      // On lavapipe Dawn and wgpu see the same Vulkan device.
      if (device.adapterInfo.vendor === 'mesa') expect(adapter).toMatch(/^the matching adapter "llvmpipe/);
      else console.log(`createContext(gpuDevice) runs on ${adapter}`);
      // It runs graphs (on the GPU backend).
      const graph = await doubler(ctx, 4);
      const x = await ctx.createTensor(F32([4]));
      const y = await ctx.createTensor(F32([4]));
      ctx.writeTensor(x, new Float32Array([0, 1, 2, -3]));
      ctx.dispatch(graph, { x }, { y });
      expect(await floats(ctx, y)).toEqual([1, 3, 5, -5]);
      ctx.destroy();
    });

    test('refuses what is not a GPUDevice (TypeError)', async () => {
      const adapter = await webgpu().gpu.requestAdapter();
      await expectReject(ml.createContext(adapter), 'TypeError', 'not a GPUDevice');
      await expectReject(ml.createContext({ queue: {} }), 'TypeError', 'not a GPUDevice');
      await expectReject(ml.createContext({ createBuffer() {} }), 'TypeError', 'not a GPUDevice');
    });

    test('refuses a lost device (InvalidStateError)', async () => {
      const lostDevice = await newDevice();
      lostDevice.destroy();
      await expectReject(ml.createContext(lostDevice), 'InvalidStateError', 'lost');
    });

    test('the context is lost when its device is', async () => {
      const own = await newDevice();
      const ctx = await ml.createContext(own);
      own.destroy();
      const info = await ctx.lost;
      expect(info.message).toContain('GPUDevice');
      await expectReject(ctx.createTensor(F32([1])), 'InvalidStateError');
    });
  });

  describe('createExportableTensor()', () => {
    test('makes tensors with exportableToGPU; createTensor does not', async () => {
      const ctx = await ml.createContext();
      const t = await ctx.createExportableTensor(F32([2, 3]), device);
      expect(t).toBeInstanceOf(MLTensor);
      expect(t.exportableToGPU).toBe(true);
      expect(t.shape).toEqual([2, 3]);
      expect((await ctx.createTensor(F32([1]))).exportableToGPU).toBe(false);
      ctx.destroy();
    });

    test('checks the device and the usage', async () => {
      const ctx = await ml.createContext();
      await expectReject(ctx.createExportableTensor(F32([1])), 'TypeError', 'not a GPUDevice');
      await expectReject(ctx.createExportableTensor(F32([1]), {}), 'TypeError', 'not a GPUDevice');
      await expectReject(ctx.createExportableTensor(F32([1], { usage: -1 }), device), 'TypeError', 'usage');
      await expectReject(ctx.createExportableTensor(F32([1], { usage: 1.5 }), device), 'TypeError', 'usage');
      await expectReject(
        ctx.createExportableTensor(F32([1], { usage: MAP_READ | COPY_DST }), device),
        'TypeError',
        'MAP_READ',
      );
      const lostDevice = await newDevice();
      lostDevice.destroy();
      await expectReject(ctx.createExportableTensor(F32([1]), lostDevice), 'InvalidStateError', 'lost');
      // The descriptor's own checks still apply.
      await expectReject(ctx.createExportableTensor({ dataType: 'float32', shape: [-1] }, device), 'TypeError');
      ctx.destroy();
    });
  });

  describe('exportToGPU()', () => {
    test('gives a STORAGE | COPY_SRC | COPY_DST buffer of the packed bytes, padded to 4', async () => {
      const ctx = await ml.createContext();
      const t = await ctx.createExportableTensor({ dataType: 'int8', shape: [2, 3], writable: true }, device);
      ctx.writeTensor(t, new Int8Array([1, -2, 3, -4, 5, -6]));
      const buffer = await ctx.exportToGPU(t);
      expect(buffer.usage).toBe(STORAGE | COPY_SRC | COPY_DST);
      expect(buffer.size).toBe(8);
      expect(Array.from(new Int8Array(await readBuffer(device, buffer, 6)))).toEqual([1, -2, 3, -4, 5, -6]);
      buffer.destroy();
      ctx.destroy();
    });

    test('waits for the WebNN work outstanding on the tensor', async () => {
      for (const ctx of [await ml.createContext(), await ml.createContext(device)]) {
        const graph = await doubler(ctx, 1024);
        const x = await ctx.createTensor(F32([1024]));
        const y = await ctx.createExportableTensor(F32([1024]), device);
        const data = Float32Array.from({ length: 1024 }, (_, i) => i - 512);
        ctx.writeTensor(x, data);
        ctx.dispatch(graph, { x }, { y });
        const buffer = await ctx.exportToGPU(y);
        const got = new Float32Array(await readBuffer(device, buffer));
        expect(Array.from(got)).toEqual(Array.from(data, (v) => v * 2 + 1));
        buffer.destroy();
        ctx.destroy();
      }
    });

    test('refuses a tensor not exportable, or of another context (TypeError)', async () => {
      const ctx = await ml.createContext();
      const other = await ml.createContext();
      await expectReject(ctx.exportToGPU(await ctx.createTensor(F32([1]))), 'TypeError', 'not exportable');
      await expectReject(ctx.exportToGPU(await other.createExportableTensor(F32([1]), device)), 'TypeError', 'another MLContext');
      await expectReject(ctx.exportToGPU({}), 'TypeError', 'MLTensor');
      await expectReject(ctx.exportToGPU(undefined), 'TypeError', 'MLTensor');
      ctx.destroy();
      other.destroy();
    });

    test('refuses a destroyed tensor, a lost context or a lost device (InvalidStateError)', async () => {
      const ctx = await ml.createContext();
      const t = await ctx.createExportableTensor(F32([1]), device);
      t.destroy();
      await expectReject(ctx.exportToGPU(t), 'InvalidStateError', 'destroyed');

      const own = await newDevice();
      const u = await ctx.createExportableTensor(F32([1]), own);
      own.destroy();
      await expectReject(ctx.exportToGPU(u), 'InvalidStateError', 'lost');
      // It was not rented out.
      ctx.writeTensor(u, new Float32Array([4]));
      expect(await floats(ctx, u)).toEqual([4]);

      const v = await ctx.createExportableTensor(F32([1]), device);
      ctx.destroy();
      await expectReject(ctx.exportToGPU(v), 'InvalidStateError', 'lost');
    });

    test('an errored tensor: the export rejects with its error and rents nothing', async () => {
      const ctx = await ml.createContext({ memoryLimit: 64 });
      const big = await ctx.createExportableTensor(F32([8]), device);
      const graph = await doubler(ctx, 8);
      const x = await ctx.createTensor(F32([8]));
      ctx.dispatch(graph, { x }, { y: big }, { label: 'too big' });
      await expectReject(ctx.exportToGPU(big), 'OperationError', 'too big');
      ctx.writeTensor(big, new Float32Array(8).fill(3));
      expect(await floats(ctx, big)).toEqual(new Array(8).fill(3));
      ctx.destroy();
    });
  });

  describe('while exported', () => {
    test('dispatch, readTensor and writeTensor fail (TypeError)', async () => {
      const ctx = await ml.createContext();
      const graph = await doubler(ctx, 2);
      const t = await ctx.createExportableTensor(F32([2]), device);
      const other = await ctx.createTensor(F32([2]));
      const exported = ctx.exportToGPU(t);
      // Rented from the call on, before the promise settles.
      expectThrow(() => ctx.writeTensor(t, new Float32Array(2)), 'TypeError', 'exported');
      const buffer = await exported;
      expectThrow(() => ctx.dispatch(graph, { x: t }, { y: other }), 'TypeError', 'exported');
      expectThrow(() => ctx.dispatch(graph, { x: other }, { y: t }), 'TypeError', 'exported');
      await expectReject(ctx.readTensor(t), 'TypeError', 'exported');
      await expectReject(ctx.readTensor(t, new Float32Array(2)), 'TypeError', 'exported');
      expectThrow(() => ctx.writeTensor(t, new Float32Array(2)), 'TypeError', 'exported');
      buffer.destroy();
      ctx.writeTensor(t, new Float32Array([1, 2]));
      ctx.dispatch(graph, { x: t }, { y: other });
      expect(await floats(ctx, other)).toEqual([3, 5]);
      ctx.destroy();
    });

    test('exporting again gives the same buffer', async () => {
      const ctx = await ml.createContext();
      const t = await ctx.createExportableTensor(F32([4]), device);
      const [a, b] = await Promise.all([ctx.exportToGPU(t), ctx.exportToGPU(t)]);
      expect(b).toBe(a);
      expect(await ctx.exportToGPU(t)).toBe(a);
      a.destroy();
      const c = await ctx.exportToGPU(t);
      expect(c).not.toBe(a);
      c.destroy();
      ctx.destroy();
    });

    test('computeSync refuses to block while a tensor is on its way back', async () => {
      const ctx = await ml.createContext();
      const graph = await doubler(ctx, 1);
      const t = await ctx.createExportableTensor(F32([1]), device);
      const buffer = await ctx.exportToGPU(t);
      buffer.destroy();
      expectThrow(
        () => ctx.computeSync(graph, { x: new Float32Array(1) }, { y: new Float32Array(1) }),
        'InvalidStateError',
        'compute()',
      );
      await ctx.readTensor(t);
      const out = new Float32Array(1);
      ctx.computeSync(graph, { x: new Float32Array([2]) }, { y: out });
      expect(out[0]).toBe(5);
      ctx.destroy();
    });
  });

  describe('the return', () => {
    test('the tensor holds what the GPU last wrote, ordered before the WebNN work queued after', async () => {
      for (const ctx of [await ml.createContext(), await ml.createContext(device)]) {
        const graph = await doubler(ctx, 256);
        const t = await ctx.createExportableTensor(F32([256]), device);
        const y = await ctx.createTensor(F32([256]));
        ctx.writeTensor(t, new Float32Array(256).fill(1));
        const buffer = await ctx.exportToGPU(t);
        // Two GPU writes, the last one a shader: the tensor gets the second.
        device.queue.writeBuffer(buffer, 0, new Float32Array(256).fill(-1));
        runShader(
          device,
          `@group(0) @binding(0) var<storage, read_write> t: array<f32>;
           @compute @workgroup_size(64) fn main(@builtin(global_invocation_id) id: vec3u) {
             if (id.x < 256u) { t[id.x] = t[id.x] + f32(id.x); }
           }`,
          [buffer],
          256,
        );
        buffer.destroy();
        // Queued at once, before the contents are back: it runs after them.
        ctx.dispatch(graph, { x: t }, { y });
        const expected = Array.from({ length: 256 }, (_, i) => i - 1);
        expect(await floats(ctx, y)).toEqual(expected.map((v) => v * 2 + 1));
        expect(await floats(ctx, t)).toEqual(expected);
        ctx.destroy();
      }
    });

    test('a write queued right after the destroy wins over the returned contents', async () => {
      const ctx = await ml.createContext();
      const t = await ctx.createExportableTensor(F32([2]), device);
      const buffer = await ctx.exportToGPU(t);
      device.queue.writeBuffer(buffer, 0, new Float32Array([7, 8]));
      buffer.destroy();
      ctx.writeTensor(t, new Float32Array([5, 6]));
      expect(await floats(ctx, t)).toEqual([5, 6]);
      ctx.destroy();
    });

    test('a tensor destroyed while exported: nothing comes back, the buffer stays valid', async () => {
      const ctx = await ml.createContext();
      const t = await ctx.createExportableTensor(F32([3]), device);
      ctx.writeTensor(t, new Float32Array([1, 2, 3]));
      const buffer = await ctx.exportToGPU(t);
      t.destroy();
      await expectReject(ctx.exportToGPU(t), 'InvalidStateError', 'destroyed');
      device.queue.writeBuffer(buffer, 0, new Float32Array([9]));
      expect(Array.from(new Float32Array(await readBuffer(device, buffer)))).toEqual([9, 2, 3]);
      buffer.destroy();
      await expectReject(ctx.exportToGPU(t), 'InvalidStateError', 'destroyed');
      ctx.destroy();
    });

    test('a context destroyed while exported: nothing comes back, the buffer stays valid', async () => {
      const ctx = await ml.createContext(device);
      const t = await ctx.createExportableTensor(F32([2]), device);
      ctx.writeTensor(t, new Float32Array([4, 5]));
      const buffer = await ctx.exportToGPU(t);
      ctx.destroy();
      await expectReject(ctx.exportToGPU(t), 'InvalidStateError', 'lost');
      expect(Array.from(new Float32Array(await readBuffer(device, buffer)))).toEqual([4, 5]);
      buffer.destroy();
    });

    test('a device lost while exported: the tensor becomes errored, named in its reads', async () => {
      const own = await newDevice();
      const ctx = await ml.createContext();
      const t = await ctx.createExportableTensor(F32([2], { label: 'frame' }), own);
      const graph = await doubler(ctx, 2);
      const y = await ctx.createTensor(F32([2]));
      const buffer = await ctx.exportToGPU(t);
      own.destroy();
      await own.lost;
      // `device.destroy()` left the buffer alone; destroying it now is harmless.
      buffer.destroy();
      await expectReject(ctx.readTensor(t), 'OperationError', "exportToGPU 'frame'", 'GPUDevice was lost');
      ctx.dispatch(graph, { x: t }, { y }, { label: 'after' });
      await expectReject(ctx.readTensor(y), 'OperationError', "dispatch 'after'", "exportToGPU 'frame'");
      // A write clears the errored state, as it does for any errored tensor.
      ctx.writeTensor(t, new Float32Array([1, 1]));
      expect(await floats(ctx, t)).toEqual([1, 1]);
      ctx.destroy();
    });

    test('a device lost after the destroy, before the copy came back: errored too', async () => {
      const own = await newDevice();
      const ctx = await ml.createContext();
      const t = await ctx.createExportableTensor(F32([2], { label: 'late' }), own);
      const buffer = await ctx.exportToGPU(t);
      buffer.destroy();
      own.destroy();
      const read = ctx.readTensor(t).then(
        (bytes) => ({ bytes: Array.from(new Float32Array(bytes)) }),
        (e) => ({ name: e.name, message: e.message }),
      );
      const r = await read;
      // Either the copy made it out before the loss (the contents, zeros) or
      // the loss aborted its mapping (errored, naming both).
      if (r.bytes) expect(r.bytes).toEqual([0, 0]);
      else {
        expect(r.name).toBe('OperationError');
        expect(r.message).toContain("exportToGPU 'late'");
      }
      ctx.destroy();
    });

    test('a 64 MB tensor goes and comes back', async () => {
      const n = 16 * 1024 * 1024;
      const ctx = await ml.createContext();
      const t = await ctx.createExportableTensor(F32([n]), device);
      const data = new Float32Array(n);
      for (let i = 0; i < n; i++) data[i] = i;
      ctx.writeTensor(t, data);
      const buffer = await ctx.exportToGPU(t);
      expect(buffer.size).toBe(64 * 1024 * 1024);
      device.queue.writeBuffer(buffer, 4 * (n - 2), new Float32Array([-1, -2]));
      buffer.destroy();
      const back = new Float32Array(await ctx.readTensor(t));
      expect(back.length).toBe(n);
      let mismatches = 0;
      for (let i = 0; i < n - 2; i++) if (back[i] !== i) mismatches++;
      expect(mismatches).toBe(0);
      expect([back[n - 2], back[n - 1]]).toEqual([-1, -2]);
      ctx.destroy();
    });
  });

  test('end to end: a shader writes the input, a graph runs, a shader reads the output', async () => {
    const n = 1000;
    const ctx = await ml.createContext(device);
    const b = new MLGraphBuilder(ctx);
    const x = b.input('x', { dataType: 'float32', shape: [n] });
    const graph = await b.build({ y: b.add(b.mul(b.relu(x), b.constant('float32', 2)), b.constant('float32', 1)) });
    const input = await ctx.createExportableTensor(F32([n]), device);
    const output = await ctx.createExportableTensor(F32([n]), device);

    // Pre-process: x[i] = i - 500 (exact in float32).
    const inBuffer = await ctx.exportToGPU(input);
    runShader(
      device,
      `@group(0) @binding(0) var<storage, read_write> x: array<f32>;
       @compute @workgroup_size(64) fn main(@builtin(global_invocation_id) id: vec3u) {
         if (id.x < arrayLength(&x)) { x[id.x] = f32(id.x) - 500.0; }
       }`,
      [inBuffer],
      n,
    );
    inBuffer.destroy();

    ctx.dispatch(graph, { x: input }, { y: output });

    // Post-process: out[i] = u32(y[i]) * 3 into a buffer of WebGPU's own.
    const outBuffer = await ctx.exportToGPU(output);
    const { GPUBufferUsage } = webgpu().globals;
    const result = device.createBuffer({ size: n * 4, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC });
    runShader(
      device,
      `@group(0) @binding(0) var<storage, read> y: array<f32>;
       @group(0) @binding(1) var<storage, read_write> out: array<u32>;
       @compute @workgroup_size(64) fn main(@builtin(global_invocation_id) id: vec3u) {
         if (id.x < arrayLength(&y)) { out[id.x] = u32(y[id.x]) * 3u; }
       }`,
      [outBuffer, result],
      n,
    );
    const got = Array.from(new Uint32Array(await readBuffer(device, result)));
    const expected = Array.from({ length: n }, (_, i) => (Math.max(i - 500, 0) * 2 + 1) * 3);
    expect(got).toEqual(expected);
    outBuffer.destroy();
    result.destroy();
    ctx.destroy();
  });

  test('examples/webgpu-interop.js draws the edges of the square', () => {
    const r = spawnSync(process.execPath, [path.join(__dirname, '..', 'examples', 'webgpu-interop.js')], {
      encoding: 'utf8',
      timeout: 120000,
    });
    expect(r.status).toBe(0);
    const art = r.stdout.split('\n').filter((l) => l.startsWith('  '));
    expect(art.length).toBe(24);
    // The square spans rows and columns 6..17: its outline, hollow inside.
    expect(art[6].slice(2)).toBe('.     #**********#     .');
    expect(art[10].slice(2)).toBe('.     *          *     .');
    expect(art[17].slice(2)).toBe('.     #**********#     .');
  });

  test('worker_threads: the round trip in a worker', async () => {
    const script = `
      const { parentPort, workerData } = require('worker_threads');
      const { ml } = require(workerData.root);
      const { create } = require(workerData.dawn);
      const gpu = create([]);
      (async () => {
        const device = await (await gpu.requestAdapter()).requestDevice();
        const results = [];
        for (const ctx of [await ml.createContext(), await ml.createContext(device)]) {
          const t = await ctx.createExportableTensor({ dataType: 'int32', shape: [3], readable: true, writable: true }, device);
          ctx.writeTensor(t, new Int32Array([1, 2, 3]));
          const buffer = await ctx.exportToGPU(t);
          device.queue.writeBuffer(buffer, 4, new Int32Array([20]));
          buffer.destroy();
          results.push(Array.from(new Int32Array(await ctx.readTensor(t))));
          ctx.destroy();
        }
        device.destroy();
        parentPort.postMessage({ results });
      })().catch((e) => parentPort.postMessage({ error: String(e && e.stack) }));`;
    const worker = new Worker(script, {
      eval: true,
      workerData: { root: path.join(__dirname, '..'), dawn: dawnPath().file },
    });
    const message = await new Promise((resolve, reject) => {
      worker.once('message', resolve);
      worker.once('error', reject);
    });
    await worker.terminate();
    expect(message).toEqual({ results: [[1, 20, 3], [1, 20, 3]] });
  });
});
