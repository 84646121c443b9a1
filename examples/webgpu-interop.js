#!/usr/bin/env node
'use strict';
// WebGPU pre-processing -> a WebNN graph -> WebGPU post-processing, the
// shape of the MLTensor explainer's interop example, in Node.
//
//   npm install webgpu      # Dawn; docs/interop.md: which Vulkan it needs
//   node examples/webgpu-interop.js
//
// The model is a toy, written out below, not a trained network: one 3x3
// convolution with a Laplacian filter (an edge detector) and a relu. The
// "image" is a 24x24 RGBA picture of a bright square drawn by a shader.
//
//   1. a WGSL shader draws the picture and converts it to a grayscale
//      float32 tensor [1, 1, 24, 24] (pre-processing), straight into an
//      MLTensor exported to the device;
//   2. destroying that buffer hands the tensor back to WebNN, and the
//      graph runs on it (on the GPU backend of a context made from the
//      same GPUDevice);
//   3. the output tensor is exported and a second shader turns its floats
//      into bytes (post-processing), which are printed as ASCII art.

const { ml, MLGraphBuilder } = require('..');

/** Dawn's `navigator.gpu`, held for the process's life. */
let gpu;

const W = 24;
const H = 24;

async function loadWebGpu() {
  try {
    return await import('webgpu');
  } catch (e) {
    console.log(`This example needs the \`webgpu\` package (npm install webgpu): ${e.message}`);
    return null;
  }
}

/** Runs `code` over `count` invocations with `buffers` at bindings 0... */
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

async function main() {
  const webgpu = await loadWebGpu();
  if (!webgpu) return;
  const { GPUBufferUsage, GPUMapMode } = webgpu.globals;
  // Keep `gpu` referenced while its devices are in use: Dawn crashes when
  // it is collected under a live device (docs/interop.md).
  gpu = webgpu.create([]);
  const adapter = await gpu.requestAdapter();
  if (!adapter) {
    console.log('WebGPU gives no adapter here (see docs/interop.md).');
    return;
  }
  const device = await adapter.requestDevice();

  // A WebNN context of this GPUDevice.
  const context = await ml.createContext(device);

  // The toy model: relu(conv2d(x, laplacian, padding 1)).
  const builder = new MLGraphBuilder(context);
  const x = builder.input('x', { dataType: 'float32', shape: [1, 1, H, W] });
  const laplacian = builder.constant(
    { dataType: 'float32', shape: [1, 1, 3, 3] },
    new Float32Array([0, -1, 0, -1, 4, -1, 0, -1, 0]),
  );
  const edges = builder.relu(builder.conv2d(x, laplacian, { padding: [1, 1, 1, 1] }));
  const graph = await builder.build({ edges });

  const desc = { dataType: 'float32', shape: [1, 1, H, W] };
  const input = await context.createExportableTensor(desc, device);
  const output = await context.createExportableTensor(desc, device);

  // 1. Pre-process on the GPU: draw RGBA pixels, write grayscale floats.
  const inputBuffer = await context.exportToGPU(input);
  runShader(
    device,
    `@group(0) @binding(0) var<storage, read_write> gray: array<f32>;
     fn pixel(x: u32, y: u32) -> vec4f {          // the "camera frame"
       let inside = x >= 6u && x < 18u && y >= 6u && y < 18u;
       return select(vec4f(0.1, 0.1, 0.2, 1.0), vec4f(0.9, 0.8, 0.7, 1.0), inside);
     }
     @compute @workgroup_size(64) fn main(@builtin(global_invocation_id) id: vec3u) {
       if (id.x >= ${W * H}u) { return; }
       let p = pixel(id.x % ${W}u, id.x / ${W}u);
       gray[id.x] = dot(p.rgb, vec3f(0.299, 0.587, 0.114));
     }`,
    [inputBuffer],
    W * H,
  );
  // Destroying the buffer returns the tensor to WebNN with what the shader
  // wrote; the dispatch queued next runs after that.
  inputBuffer.destroy();

  // 2. The graph.
  context.dispatch(graph, { x: input }, { edges: output });

  // 3. Post-process on the GPU: floats to bytes, into a buffer of our own.
  const outputBuffer = await context.exportToGPU(output);
  const bytes = device.createBuffer({ size: W * H * 4, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC });
  runShader(
    device,
    `@group(0) @binding(0) var<storage, read> edges: array<f32>;
     @group(0) @binding(1) var<storage, read_write> level: array<u32>;
     @compute @workgroup_size(64) fn main(@builtin(global_invocation_id) id: vec3u) {
       if (id.x < arrayLength(&edges)) { level[id.x] = u32(clamp(edges[id.x], 0.0, 1.0) * 255.0); }
     }`,
    [outputBuffer, bytes],
    W * H,
  );
  const staging = device.createBuffer({ size: W * H * 4, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const encoder = device.createCommandEncoder();
  encoder.copyBufferToBuffer(bytes, 0, staging, 0, W * H * 4);
  device.queue.submit([encoder.finish()]);
  await staging.mapAsync(GPUMapMode.READ);
  const level = new Uint32Array(staging.getMappedRange().slice(0));
  staging.unmap();

  // The dots along the border: the convolution pads with zeros.
  console.log(`edges of a ${W}x${H} square (toy Laplacian model; ${context._adapter()}):`);
  const ramp = ' .:*#';
  for (let y = 0; y < H; y++) {
    let row = '';
    for (let i = 0; i < W; i++) row += ramp[Math.min(ramp.length - 1, Math.ceil(level[y * W + i] / 64))];
    console.log(`  ${row}`);
  }

  outputBuffer.destroy();
  for (const b of [bytes, staging]) b.destroy();
  // Let Dawn finish before the process ends: on Node 22 and 24, a process
  // that exits just after Dawn's last callback crashes now and then in
  // Dawn's event processing (docs/interop.md).
  await device.queue.onSubmittedWorkDone();
  context.destroy();
  device.destroy();
  await device.lost;
}

main().catch((e) => {
  console.error(e);
  process.exitCode = 1;
});
