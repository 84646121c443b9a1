'use strict';
// The interop layer against a GPUDevice written in JS: any object that
// implements the GPUDevice members webnn-node uses is accepted, with no
// WebGPU installed. These run on every machine; __tests__/interop.test.js
// runs the same rules on a real WebGPU (Dawn).

const { ml, MLContext } = require('..');
const { expectThrow, expectReject } = require('./helpers');

/**
 * A minimal in-memory GPUDevice: buffers are byte arrays, submitted
 * copies run at once, `destroy()` loses the device. `calls` records what
 * the interop layer asked of it, in order.
 */
function fakeDevice({ failCreateBuffer = false } = {}) {
  const calls = [];
  let loseWith;
  let lost = false;
  const device = {
    calls,
    label: 'fake',
    adapterInfo: { vendor: 'nobody', device: 'nothing' },
    lost: new Promise((resolve) => {
      loseWith = resolve;
    }),
    createBuffer({ size, usage }) {
      calls.push(`createBuffer ${size} ${usage}`);
      if (failCreateBuffer) throw new Error('out of fake memory');
      const bytes = new Uint8Array(size);
      return {
        size,
        usage,
        bytes,
        destroyed: false,
        destroy() {
          calls.push(`destroy ${size}`);
          this.destroyed = true;
        },
        mapAsync() {
          calls.push('mapAsync');
          return lost ? Promise.reject(new DOMException('lost', 'AbortError')) : Promise.resolve();
        },
        getMappedRange() {
          return bytes.slice().buffer;
        },
        unmap() {},
      };
    },
    createCommandEncoder() {
      const ops = [];
      return {
        copyBufferToBuffer(src, srcOffset, dst, dstOffset, size) {
          ops.push(() => dst.bytes.set(src.bytes.subarray(srcOffset, srcOffset + size), dstOffset));
        },
        finish: () => ops,
      };
    },
    queue: {
      writeBuffer(buffer, offset, data, dataOffset = 0, size) {
        calls.push(`writeBuffer ${size}`);
        const src = ArrayBuffer.isView(data) ? new Uint8Array(data.buffer, data.byteOffset, data.byteLength) : new Uint8Array(data);
        buffer.bytes.set(src.subarray(dataOffset, dataOffset + (size ?? src.length - dataOffset)), offset);
      },
      submit(commandBuffers) {
        calls.push('submit');
        for (const ops of commandBuffers) for (const op of ops) op();
      },
    },
    destroy() {
      lost = true;
      loseWith({ reason: 'destroyed', message: 'fake device destroyed' });
    },
  };
  return device;
}

const F32 = (shape, extra = {}) => ({ dataType: 'float32', shape, readable: true, writable: true, ...extra });

test('a JS GPUDevice: export, GPU write, return, in order', async () => {
  const device = fakeDevice();
  const ctx = await ml.createContext();
  const t = await ctx.createExportableTensor(F32([3], { usage: 0x80 | 0x40 }), device);
  ctx.writeTensor(t, new Float32Array([1, 2, 3]));
  const buffer = await ctx.exportToGPU(t);
  // usage: the descriptor's, plus COPY_SRC | COPY_DST.
  expect(buffer.usage).toBe(0x80 | 0x40 | 0x04 | 0x08);
  expect(buffer.size).toBe(12);
  expect(Array.from(new Float32Array(buffer.bytes.buffer))).toEqual([1, 2, 3]);
  new Float32Array(buffer.bytes.buffer)[1] = 20;
  buffer.destroy();
  // The staging copy was submitted before the real destroy.
  expect(device.calls).toEqual(['createBuffer 12 204', 'writeBuffer 12', 'createBuffer 12 9', 'submit', 'destroy 12', 'mapAsync']);
  expect(Array.from(new Float32Array(await ctx.readTensor(t)))).toEqual([1, 20, 3]);
  ctx.destroy();
});

test('a JS GPUDevice: a context of it runs on the default adapter when nothing matches', async () => {
  let ctx;
  try {
    ctx = await ml.createContext(fakeDevice());
  } catch (e) {
    // No GPU backend on this machine: the same NotSupportedError as
    // createContext({deviceType: 'gpu'}).
    expect(e.name).toBe('NotSupportedError');
    return;
  }
  expect(ctx).toBeInstanceOf(MLContext);
  expect(ctx.accelerated).toBe(true);
  expect(ctx._adapter()).toMatch(/^the default adapter .* \(none matched vendor "nobody", device "nothing"\)$/);
  ctx.destroy();
});

test('a device that refuses the buffer: InvalidStateError, and the tensor is not rented', async () => {
  const ctx = await ml.createContext();
  const t = await ctx.createExportableTensor(F32([2]), fakeDevice({ failCreateBuffer: true }));
  await expectReject(ctx.exportToGPU(t), 'InvalidStateError', 'out of fake memory');
  ctx.writeTensor(t, new Float32Array([5, 6]));
  expect(Array.from(new Float32Array(await ctx.readTensor(t)))).toEqual([5, 6]);
  ctx.destroy();
});

test('a device lost after the destroy: the mapping aborts and the tensor is errored', async () => {
  const device = fakeDevice();
  const ctx = await ml.createContext();
  const t = await ctx.createExportableTensor(F32([2], { label: 'probe' }), device);
  const buffer = await ctx.exportToGPU(t);
  device.destroy();
  buffer.destroy();
  await expectReject(ctx.readTensor(t), 'OperationError', "exportToGPU 'probe'", 'lost');
  ctx.destroy();
});

test('a tensor whose byte length is not a multiple of 4 is padded both ways', async () => {
  const device = fakeDevice();
  const ctx = await ml.createContext();
  const t = await ctx.createExportableTensor({ dataType: 'uint8', shape: [5], readable: true, writable: true }, device);
  ctx.writeTensor(t, new Uint8Array([1, 2, 3, 4, 5]));
  const buffer = await ctx.exportToGPU(t);
  expect(buffer.size).toBe(8);
  expect(Array.from(buffer.bytes)).toEqual([1, 2, 3, 4, 5, 0, 0, 0]);
  buffer.bytes.set([9, 8, 7, 6, 5, 4, 3, 2]);
  buffer.destroy();
  expect(Array.from(new Uint8Array(await ctx.readTensor(t)))).toEqual([9, 8, 7, 6, 5]);
  ctx.destroy();
});

test('exporting a tensor rented by its own context from another context leaves the rent alone', async () => {
  const device = fakeDevice();
  const ctx = await ml.createContext();
  const other = await ml.createContext();
  const t = await ctx.createExportableTensor(F32([1]), device);
  const buffer = await ctx.exportToGPU(t);
  await expectReject(other.exportToGPU(t), 'TypeError', 'another MLContext');
  // Still rented: its own context may not write it.
  expectThrow(() => ctx.writeTensor(t, new Float32Array(1)), 'TypeError', 'exported');
  buffer.destroy();
  ctx.writeTensor(t, new Float32Array([2]));
  expect(Array.from(new Float32Array(await ctx.readTensor(t)))).toEqual([2]);
  ctx.destroy();
  other.destroy();
});
