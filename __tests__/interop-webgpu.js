'use strict';
// A real WebGPU for the interop tests: Dawn from the `webgpu` package (a
// dev dependency; docs/interop.md says how CI gets a Vulkan it accepts).
//
// The package's entry point is an ES module, which jest's CommonJS runtime
// cannot require on every Node version we test, so its addon is loaded
// directly (the entry point only adds a patch we do not need: unmapping a
// destroyed device's buffers).

const path = require('path');
const { spawnSync } = require('child_process');

/** The path of Dawn's addon, or a reason it is missing. */
function dawnPath() {
  let dir;
  try {
    dir = path.dirname(require.resolve('webgpu/package.json'));
  } catch {
    return { missing: 'the `webgpu` package is not installed (npm install --no-save webgpu)' };
  }
  const arch = process.platform === 'darwin' ? 'universal' : process.arch;
  return { file: path.join(dir, 'dist', `${process.platform}-${arch}`, 'dawn.node') };
}

/**
 * Whether Dawn gives an adapter and a device here, asked in a child
 * process so that the answer is known when the tests are declared (and a
 * driver that crashes takes only the child down).
 */
function probeWebGpu() {
  const where = dawnPath();
  if (where.missing) return { ok: false, reason: where.missing };
  const code = `
    const { create } = require(${JSON.stringify(where.file)});
    const gpu = create([]);
    gpu.requestAdapter().then(async (a) => {
      if (!a) return console.log(JSON.stringify({ ok: false, reason: 'requestAdapter() gave no adapter' }));
      const d = await a.requestDevice();
      console.log(JSON.stringify({ ok: true, vendor: a.info.vendor, device: a.info.device }));
      d.destroy();
    }, (e) => console.log(JSON.stringify({ ok: false, reason: String(e) })));`;
  const r = spawnSync(process.execPath, ['-e', code], { encoding: 'utf8', timeout: 60000 });
  const line = (r.stdout || '').trim().split('\n').pop();
  try {
    return JSON.parse(line);
  } catch {
    return { ok: false, reason: `the probe failed (status ${r.status}): ${(r.stderr || '').slice(-500)}` };
  }
}

let dawn = null;

/**
 * `{ gpu, globals }`: Dawn's `navigator.gpu` and its constants. The `gpu`
 * object is kept here for the process's life: Dawn's devices use the
 * instance behind it, and collecting it while a device lives crashes.
 */
function webgpu() {
  if (!dawn) {
    const { create, globals } = require(dawnPath().file);
    dawn = { gpu: create([]), globals };
  }
  return dawn;
}

/** A new GPUDevice. */
async function newDevice() {
  const adapter = await webgpu().gpu.requestAdapter();
  return adapter.requestDevice();
}

/** The first `byteLength` bytes of a GPUBuffer, through a staging copy. */
async function readBuffer(device, buffer, byteLength = buffer.size) {
  const { GPUBufferUsage, GPUMapMode } = webgpu().globals;
  const size = Math.ceil(byteLength / 4) * 4;
  const staging = device.createBuffer({ size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const encoder = device.createCommandEncoder();
  encoder.copyBufferToBuffer(buffer, 0, staging, 0, size);
  device.queue.submit([encoder.finish()]);
  await staging.mapAsync(GPUMapMode.READ);
  const bytes = staging.getMappedRange().slice(0, byteLength);
  staging.unmap();
  staging.destroy();
  return bytes;
}

/**
 * Runs a WGSL compute shader whose bindings 0.. are the given storage
 * buffers, over `count` invocations (64 per workgroup).
 */
function runShader(device, code, buffers, count) {
  const module = device.createShaderModule({ code });
  const pipeline = device.createComputePipeline({ layout: 'auto', compute: { module, entryPoint: 'main' } });
  const bindGroup = device.createBindGroup({
    layout: pipeline.getBindGroupLayout(0),
    entries: buffers.map((buffer, binding) => ({ binding, resource: { buffer } })),
  });
  const encoder = device.createCommandEncoder();
  const pass = encoder.beginComputePass();
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, bindGroup);
  pass.dispatchWorkgroups(Math.ceil(count / 64));
  pass.end();
  device.queue.submit([encoder.finish()]);
}

module.exports = { dawnPath, probeWebGpu, webgpu, newDevice, readBuffer, runShader };
