#!/usr/bin/env node
'use strict';
// The WebGPU interop round trip: exportToGPU() of a tensor and its return
// when the GPUBuffer is destroyed, on a real WebGPU (Dawn, the `webgpu`
// dev dependency).
//
//   node bench/interop.js [--runs N] [--sizes 1,16,64] [--context cpu|webgpu]
//
// One round trip, for a float32 tensor of S MB (MB = 2^20 bytes):
//
//   await context.exportToGPU(tensor)   the tensor's bytes read out of the
//                                       backend, a GPUBuffer created and
//                                       filled with queue.writeBuffer
//   buffer.destroy()                    a copy into a MAP_READ staging
//                                       buffer, then the real destroy
//   await context.createTensor(tiny)    a command queued behind the return:
//                                       it completes once the mapped bytes
//                                       are back in the tensor
//
// Reported: the median ms of the timed runs (after 2 warm-up runs) and
// S / median in GB/s (10^9 bytes per second): the tensor's size over the
// time of the whole round trip, each byte having gone to the device and
// back. Beside it, "Dawn alone": the same traffic without WebNN
// (writeBuffer of S bytes into a new buffer, a copy into a MAP_READ
// buffer, mapAsync, getMappedRange), the floor that a copy through host
// memory cannot go below on this WebGPU. `--context cpu` (the default) exports from an ordinary CPU
// context, `--context webgpu` from ml.createContext(gpuDevice), whose
// tensors live in wgpu buffers (one more copy each way, through wgpu's
// staging buffers).

const path = require('path');
const { ml } = require(path.join(__dirname, '..'));

function args() {
  const a = process.argv.slice(2);
  const get = (name, dflt) => {
    const i = a.indexOf(`--${name}`);
    return i >= 0 && i + 1 < a.length ? a[i + 1] : dflt;
  };
  return {
    runs: Number(get('runs', 10)),
    sizes: get('sizes', '1,16,64').split(',').map(Number),
    context: get('context', 'cpu'),
  };
}

function loadDawn() {
  let dir;
  try {
    dir = path.dirname(require.resolve('webgpu/package.json'));
  } catch {
    return null;
  }
  const arch = process.platform === 'darwin' ? 'universal' : process.arch;
  return require(path.join(dir, 'dist', `${process.platform}-${arch}`, 'dawn.node'));
}

/** Dawn's `navigator.gpu`. */
let gpu;

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

/** The host <-> device traffic of one round trip, in Dawn alone. */
async function dawnAlone(device, { GPUBufferUsage, GPUMapMode }, host) {
  const size = host.byteLength;
  const buffer = device.createBuffer({ size, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST });
  device.queue.writeBuffer(buffer, 0, host);
  const staging = device.createBuffer({ size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const encoder = device.createCommandEncoder();
  encoder.copyBufferToBuffer(buffer, 0, staging, 0, size);
  device.queue.submit([encoder.finish()]);
  buffer.destroy();
  await staging.mapAsync(GPUMapMode.READ);
  host.set(new Uint8Array(staging.getMappedRange()));
  staging.unmap();
  staging.destroy();
}

async function main() {
  const opts = args();
  const dawn = loadDawn();
  if (!dawn) {
    console.log('not measured: the `webgpu` package is not installed (npm install --no-save webgpu)');
    return;
  }
  // Kept for the process's life: Dawn's devices need the instance behind it.
  gpu = dawn.create([]);
  const adapter = await gpu.requestAdapter();
  if (!adapter) {
    console.log('not measured: Dawn gives no WebGPU adapter here (see docs/interop.md)');
    return;
  }
  const device = await adapter.requestDevice();
  const ctx = opts.context === 'webgpu' ? await ml.createContext(device) : await ml.createContext();
  const where = opts.context === 'webgpu' ? `createContext(gpuDevice): ${ctx._adapter()}` : 'a CPU context';
  console.log(`WebGPU: ${adapter.info.vendor} ${adapter.info.description || adapter.info.device}; tensors of ${where}`);
  console.log('| size | round trip (median ms) | GB/s | Dawn alone (median ms) |');
  console.log('|---:|---:|---:|---:|');
  for (const mb of opts.sizes) {
    const n = (mb * 1024 * 1024) / 4;
    const t = await ctx.createExportableTensor({ dataType: 'float32', shape: [n], readable: true, writable: true }, device);
    ctx.writeTensor(t, new Float32Array(n).fill(1));
    const times = [];
    const alone = [];
    const host = new Uint8Array(n * 4);
    for (let i = 0; i < opts.runs + 2; i++) {
      let start = process.hrtime.bigint();
      const buffer = await ctx.exportToGPU(t);
      buffer.destroy();
      const tiny = await ctx.createTensor({ dataType: 'float32', shape: [1] });
      const ms = Number(process.hrtime.bigint() - start) / 1e6;
      tiny.destroy();
      start = process.hrtime.bigint();
      await dawnAlone(device, dawn.globals, host);
      const msAlone = Number(process.hrtime.bigint() - start) / 1e6;
      if (i >= 2) {
        times.push(ms);
        alone.push(msAlone);
      }
    }
    // The contents made the trip intact.
    const back = new Float32Array(await ctx.readTensor(t));
    if (back[0] !== 1 || back[n - 1] !== 1) throw new Error('the round trip changed the tensor');
    const m = median(times);
    const gbps = (mb * 1024 * 1024) / (m / 1000) / 1e9;
    console.log(`| ${mb} MB | ${m.toFixed(2)} | ${gbps.toFixed(2)} | ${median(alone).toFixed(2)} |`);
    t.destroy();
  }
  ctx.destroy();
  device.destroy();
  // Dawn may crash a process that exits right after its last callback
  // (docs/interop.md): let the loss settle first.
  await device.lost;
}

main().catch((e) => {
  console.error(e);
  process.exitCode = 1;
});
