'use strict';
// WebGPU interop: `ml.createContext(gpuDevice)`,
// `context.createExportableTensor(descriptor, gpuDevice)` and
// `context.exportToGPU(tensor)` (docs/interop.md).
//
// The WebGPU is the caller's, reached only through its public JS API: Dawn
// in the `webgpu` package exposes no native handles, so an export copies
// the tensor through host memory into a GPUBuffer of the device, and the
// buffer's destruction copies it back. Any object that implements the
// GPUDevice members used here is accepted; nothing here loads a WebGPU.

// GPUBufferUsage and GPUMapMode bits (WebGPU constants; not read from a
// global, which a WebGPU in Node need not install).
const MAP_READ = 0x0001;
const MAP_WRITE = 0x0002;
const COPY_SRC = 0x0004;
const COPY_DST = 0x0008;
const STORAGE = 0x0080;
const MAP_MODE_READ = 0x0001;
const DEFAULT_USAGE = STORAGE | COPY_SRC | COPY_DST;

function invalidState(message) {
  return new DOMException(message, 'InvalidStateError');
}

/** Whether `v` is meant as a GPUDevice rather than an options dictionary. */
function isDeviceLike(v) {
  if (v === null || typeof v !== 'object') return false;
  if (typeof globalThis.GPUDevice === 'function' && v instanceof globalThis.GPUDevice) return true;
  // A GPUAdapter (a common slip) is refused as not a device, not read as
  // an empty options dictionary.
  return 'queue' in v || typeof v.createBuffer === 'function' || typeof v.requestDevice === 'function';
}

/** TypeError unless `device` has every GPUDevice member used here. */
function checkDevice(device, what) {
  const fn = (o, name) => o !== null && typeof o === 'object' && typeof o[name] === 'function';
  const ok =
    device !== null &&
    typeof device === 'object' &&
    fn(device, 'createBuffer') &&
    fn(device, 'createCommandEncoder') &&
    fn(device.queue, 'writeBuffer') &&
    fn(device.queue, 'submit') &&
    device.lost !== null &&
    typeof device.lost === 'object' &&
    typeof device.lost.then === 'function';
  if (!ok) throw new TypeError(`${what}: the argument is not a GPUDevice`);
}

/**
 * Per device: whether it is lost, the tensors exported to it and not yet
 * returned, and the contexts created from it. Kept weakly, so a device
 * (and its state) is collected when the caller drops it.
 */
const devices = new WeakMap();

function deviceState(device) {
  let s = devices.get(device);
  if (!s) {
    s = { lost: null, exports: new Set(), contexts: new Set() };
    devices.set(device, s);
    Promise.resolve(device.lost).then(
      (info) => onDeviceLost(s, info),
      () => {},
    );
  }
  return s;
}

/**
 * Whether the device is lost. `device.lost` settles asynchronously (a
 * microtask after `destroy()` in Dawn), so a device seen for the first
 * time is given one turn of the event loop to show it.
 */
async function isLost(device) {
  const s = deviceState(device);
  if (s.lost) return true;
  await new Promise((resolve) => setImmediate(resolve));
  return s.lost !== null;
}

function onDeviceLost(s, info) {
  const why = (info && info.message) || (info && info.reason) || 'no reason given';
  s.lost = String(why);
  // The tensors out on the device have no contents to come back: they
  // become errored (reads reject naming exportToGPU and this cause).
  for (const e of [...s.exports]) {
    finishReturn(e, (handle) =>
      handle.fail(`the GPUDevice was lost while the tensor was exported to it (${s.lost})`),
    );
  }
  for (const ref of s.contexts) {
    const ctx = ref.deref();
    if (ctx) ctx._lose(`The GPUDevice of the MLContext was lost: ${s.lost}`);
  }
  s.contexts.clear();
}

/** The device and buffer usage of each exportable tensor. */
const exportable = new WeakMap();

/** The export in progress or in force of each rented tensor. */
const rented = new WeakMap();

/** `ml.createContext(gpuDevice)`. */
async function createWebGpuContext(native, device) {
  checkDevice(device, 'createContext');
  if (await isLost(device)) throw invalidState('createContext: the GPUDevice is lost');
  const info = device.adapterInfo || {};
  const ctx = await native.createWebGpuContext({
    vendor: typeof info.vendor === 'string' ? info.vendor : '',
    device: typeof info.device === 'string' ? info.device : '',
  });
  const s = deviceState(device);
  if (s.lost) {
    ctx._lose(`The GPUDevice of the MLContext was lost: ${s.lost}`);
  } else {
    for (const ref of s.contexts) if (!ref.deref()) s.contexts.delete(ref);
    s.contexts.add(new WeakRef(ctx));
  }
  return ctx;
}

/** `usage` of an exportable tensor's descriptor, as WebIDL's [EnforceRange] unsigned long. */
function usageOf(descriptor) {
  const usage = descriptor !== null && typeof descriptor === 'object' ? descriptor.usage : undefined;
  if (usage === undefined) return DEFAULT_USAGE;
  const n = Number(usage);
  if (!Number.isInteger(n) || n < 0 || n > 0xffffffff) {
    throw new TypeError('createExportableTensor: usage must be GPUBufferUsageFlags (an unsigned long)');
  }
  if (n & (MAP_READ | MAP_WRITE)) {
    throw new TypeError('createExportableTensor: usage may not include MAP_READ or MAP_WRITE');
  }
  return n;
}

/** `context.createExportableTensor(descriptor, gpuDevice)`. */
async function createExportableTensor(context, descriptor, device) {
  checkDevice(device, 'createExportableTensor');
  const usage = usageOf(descriptor);
  if (await isLost(device)) throw invalidState('createExportableTensor: the GPUDevice is lost');
  const tensor = await context._createExportableTensor(descriptor);
  exportable.set(tensor, { device, usage });
  return tensor;
}

/** `context.exportToGPU(tensor)`: the same promise while the tensor is rented. */
function exportToGPU(context, tensor) {
  const current = tensor !== null && typeof tensor === 'object' ? rented.get(tensor) : undefined;
  if (current && current.context === context) {
    // The same buffer while exported, unless the tensor or its context is
    // gone since (the buffer itself stays the caller's).
    const state = tensor._state();
    if (state === 'destroyed') return Promise.reject(invalidState('exportToGPU: the tensor is destroyed'));
    if (state === 'lost') return Promise.reject(invalidState('exportToGPU: the MLContext is lost'));
    return current.promise;
  }
  if (current) {
    // Rented by its own context: refused here without touching the rent.
    return Promise.reject(new TypeError('exportToGPU: the tensor belongs to another MLContext'));
  }
  const target = exportable.get(tensor);
  if (target && deviceState(target.device).lost) {
    // Refused before the tensor is rented out.
    return Promise.reject(invalidState('exportToGPU: the GPUDevice is lost'));
  }
  const e = { context, tensor, device: target && target.device, usage: target && target.usage };
  e.path = pathFor(e);
  e.promise = e.path.exportTensor(e);
  if (target) rented.set(tensor, e);
  return e.promise;
}

/**
 * How a tensor goes to its device and comes back: the seam where a
 * zero-copy path would be chosen (docs/interop.md says what it needs).
 * Today there is one path, a copy through host memory, which works with
 * any WebGPU since it uses only the device's public API.
 */
function pathFor() {
  return copyThroughHost;
}

const copyThroughHost = {
  /** Resolves with the GPUBuffer; the tensor is rented from the call on. */
  exportTensor(e) {
    // Checks the tensor (TypeError / InvalidStateError as a rejection) and
    // rents it out at once: dispatches, reads and writes after this call
    // fail until the buffer is destroyed.
    return completeExport(e, e.context._exportRead(e.tensor));
  },
  /** Called by the buffer's `destroy()`, which `destroyNow` completes. */
  returnTensor(e, destroyNow) {
    returnTensor(e, destroyNow);
  },
};

async function completeExport(e, read) {
  const { context, tensor, device } = e;
  let bytes;
  try {
    bytes = await read;
  } catch (err) {
    forget(e);
    throw err;
  }
  let buffer;
  try {
    if (await isLost(device)) throw invalidState('exportToGPU: the GPUDevice is lost');
    buffer = upload(device, e.usage, bytes);
  } catch (err) {
    forget(e);
    throw err instanceof TypeError || err instanceof DOMException
      ? err
      : invalidState(`exportToGPU: the GPUDevice refused the buffer: ${err && err.message}`);
  }
  e.buffer = buffer;
  e.padded = buffer.size;
  deviceState(device).exports.add(e);
  hookDestroy(e);
  return buffer;
}

/** Ends an export that never reached WebGPU. */
function forget(e) {
  if (rented.get(e.tensor) === e) rented.delete(e.tensor);
  e.context._exportCancel(e.tensor);
}

/** A new GPUBuffer of `device` holding `bytes`, padded to a multiple of 4. */
function upload(device, usage, bytes) {
  const size = Math.max(4, Math.ceil(bytes.byteLength / 4) * 4);
  const buffer = device.createBuffer({ size, usage: (usage | COPY_SRC | COPY_DST) >>> 0 });
  // writeBuffer takes whole 4-byte words: a tensor of another length goes
  // through a padded copy.
  const data = bytes.byteLength === size ? bytes : padded(bytes, size);
  device.queue.writeBuffer(buffer, 0, data, 0, size);
  return buffer;
}

function padded(bytes, size) {
  const out = new Uint8Array(size);
  out.set(new Uint8Array(bytes));
  return out.buffer;
}

/**
 * The tensor comes back when its buffer is destroyed: the caller's own
 * `buffer.destroy()` is wrapped (on the instance only), so no change to
 * the caller's code is needed.
 */
function hookDestroy(e) {
  const { buffer } = e;
  const realDestroy = buffer.destroy;
  Object.defineProperty(buffer, 'destroy', {
    value: function destroy(...args) {
      if (!e.returned) e.path.returnTensor(e, () => realDestroy.apply(this, args));
      else realDestroy.apply(this, args);
    },
    writable: true,
    configurable: true,
  });
}

/**
 * Marks the export returned and, unless the tensor or its context is gone,
 * queues the tensor's return on the context's timeline and hands its
 * handle to `deliver`.
 */
function finishReturn(e, deliver) {
  if (e.returned) return;
  e.returned = true;
  if (rented.get(e.tensor) === e) rented.delete(e.tensor);
  if (e.device) deviceState(e.device).exports.delete(e);
  let handle = null;
  try {
    handle = e.context._exportReturn(e.tensor);
  } catch {
    // The context is lost: nothing to return to.
  }
  if (handle) deliver(handle);
}

/**
 * Returns in flight keep Node running until their bytes land: a process
 * that exits with Dawn's mapping still pending crashes in Dawn's event
 * processing during teardown (seen on Node 22 and 24), and the tensor's
 * return would be lost anyway.
 */
let inFlight = 0;
let holder = null;

function holdProcess() {
  if (inFlight++ === 0) holder = setInterval(() => {}, 1e9);
}

function releaseProcess() {
  if (--inFlight === 0) {
    clearInterval(holder);
    holder = null;
  }
}

/**
 * Copies the buffer into a staging buffer, submitted before the buffer's
 * real destruction (`destroyNow`) so that it sees every GPU write already
 * submitted, and hands the mapped bytes to the timeline, where the
 * tensor's return waits for them.
 */
function returnTensor(e, destroyNow) {
  let destroyed = false;
  finishReturn(e, (handle) => {
    const { device, buffer, padded: size } = e;
    let staging;
    try {
      staging = device.createBuffer({ size, usage: MAP_READ | COPY_DST });
      const encoder = device.createCommandEncoder();
      encoder.copyBufferToBuffer(buffer, 0, staging, 0, size);
      device.queue.submit([encoder.finish()]);
    } catch (err) {
      handle.fail(`copying the tensor back from the GPUDevice failed: ${err && err.message}`);
      return;
    }
    destroyed = true;
    destroyNow();
    holdProcess();
    staging.mapAsync(MAP_MODE_READ).finally(releaseProcess).then(
      () => {
        try {
          handle.fill(staging.getMappedRange());
        } catch (err) {
          handle.fail(`copying the tensor back from the GPUDevice failed: ${err && err.message}`);
        }
        staging.unmap();
        staging.destroy();
      },
      (err) => {
        const lost = deviceState(device).lost;
        handle.fail(
          lost
            ? `the GPUDevice was lost while the tensor was exported to it (${lost})`
            : `copying the tensor back from the GPUDevice failed: ${(err && (err.message || err.name)) || err}`,
        );
        staging.destroy();
      },
    );
  });
  if (!destroyed) destroyNow();
}

/** Adds the interop members to `ML` and `MLContext`. */
function install(native, ML, MLContext) {
  const createContext = ML.prototype.createContext;
  Object.defineProperty(ML.prototype, 'createContext', {
    value: function createContextOrWebGpu(options) {
      let device;
      try {
        // The caller's getters may throw: a rejection, as for any error.
        device = isDeviceLike(options);
      } catch (e) {
        return Promise.reject(e);
      }
      if (device) return createWebGpuContext(native, options);
      return createContext.call(this, options);
    },
    writable: true,
    configurable: true,
  });
  for (const [name, fn] of [
    [
      'createExportableTensor',
      function createExportableTensorMethod(descriptor, device) {
        return createExportableTensor(this, descriptor, device);
      },
    ],
    [
      'exportToGPU',
      function exportToGPUMethod(tensor) {
        try {
          return exportToGPU(this, tensor);
        } catch (e) {
          return Promise.reject(e);
        }
      },
    ],
  ]) {
    Object.defineProperty(MLContext.prototype, name, {
      value: fn,
      writable: true,
      enumerable: true,
      configurable: true,
    });
  }
  for (const name of ['_createExportableTensor', '_exportRead', '_exportCancel', '_exportReturn', '_adapter', '_lose']) {
    Object.defineProperty(MLContext.prototype, name, { enumerable: false });
  }
}

module.exports = { install };
