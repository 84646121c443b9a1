// Runs the models of models.js on onnxruntime-web twice in this process: with
// its WebNN execution provider on webnn-node's CPU backend, and with its own
// wasm execution provider as the reference. Prints one JSON report on
// stdout: per model, how ORT partitioned it, how far the two providers'
// outputs are apart, and every WebNN call that threw or rejected.
//
// Run by __tests__/ort-web.test.js as `node --liftoff-only run.mjs`: V8's
// background tier-up of ORT's large wasm module otherwise stalls the event
// loop for minutes on small machines.

import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const require = createRequire(import.meta.url);
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

// ORT's log goes to file descriptor 2 through `require('fs').writeSync`
// (its wasm glue's print functions), its JS part's messages through
// console.*. Both are collected, not printed, so that the report can quote
// them and stdout carries only the report.
const logs = [];
const fs = require('node:fs');
const writeSync = fs.writeSync;
fs.writeSync = function (fd, data, ...rest) {
  if ((fd === 1 || fd === 2) && typeof data === 'string') {
    logs.push(...data.replace(/\n$/, '').split('\n'));
    return Buffer.byteLength(data);
  }
  return writeSync.call(this, fd, data, ...rest);
};
for (const level of ['log', 'info', 'warn', 'error', 'debug']) {
  console[level] = (...args) => logs.push(args.map(String).join(' '));
}

const unhandled = [];
process.on('unhandledRejection', (e) => unhandled.push(String(e && e.stack ? e.stack : e)));

const api = require(path.join(root, 'global.js'));
const { models } = require('./models.js');

// --- tracing every WebNN call ORT makes ---------------------------------

const calls = {}; // "MLGraphBuilder.conv2d" -> count
const rejected = []; // WebNN calls that threw or rejected
const transfers = []; // readTensor / writeTensor views
let currentModel = '';

// A process that ends without its report (ORT waiting forever on a promise
// that a failed WebNN call left pending ends it with code 13, for one)
// says on stderr where it was and what went wrong.
let reported = false;
process.on('exit', (code) => {
  if (reported) return;
  // The log first: the parent shows the end of stderr.
  const state = { log: logs.slice(-10), code, model: currentModel, unhandled, rejected };
  writeSync.call(fs, 2, `no report: ${JSON.stringify(state, null, 1)}\n`);
});

function viewKind(v) {
  if (v === undefined) return 'none';
  const tag = Object.prototype.toString.call(v).slice(8, -1);
  const shared = typeof SharedArrayBuffer !== 'undefined' && v.buffer instanceof SharedArrayBuffer;
  return `${tag}${shared ? ' over SharedArrayBuffer' : ''}`;
}

function trace(cls) {
  const proto = cls.prototype;
  for (const key of Object.getOwnPropertyNames(proto)) {
    const d = Object.getOwnPropertyDescriptor(proto, key);
    if (key === 'constructor' || key.startsWith('_') || typeof d.value !== 'function') continue;
    const original = d.value;
    const name = `${cls.name}.${key}`;
    Object.defineProperty(proto, key, {
      ...d,
      value: function traced(...args) {
        calls[name] = (calls[name] || 0) + 1;
        if (key === 'readTensor' || key === 'writeTensor') {
          transfers.push({
            model: currentModel,
            call: key,
            dataType: args[0] && args[0].dataType,
            view: viewKind(args[1]),
            byteOffset: args[1] ? args[1].byteOffset : undefined,
          });
        }
        const failed = (e) =>
          rejected.push({ model: currentModel, call: name, name: e && e.name, message: e && e.message });
        let r;
        try {
          r = original.apply(this, args);
        } catch (e) {
          failed(e);
          throw e;
        }
        if (r && typeof r.then === 'function') r.then(undefined, failed);
        return r;
      },
    });
  }
}
trace(api.MLContext);
trace(api.MLGraphBuilder);

// --- onnxruntime-web ----------------------------------------------------

// 'onnxruntime-web/all', as docs/ort-web.md says: the package's main entry
// resolves to a Node build without the WebNN backend; this export has no
// Node condition and gives the browser bundle that has it.
const ort = await import('onnxruntime-web/all');
ort.env.wasm.numThreads = 1;

const context = await navigator.ml.createContext({ deviceType: 'cpu' });

function ortInputs(model) {
  const feeds = {};
  for (const [name, { type, dims, data }] of Object.entries(model.inputs)) {
    feeds[name] = new ort.Tensor(type, data, dims);
  }
  return feeds;
}

function halfToFloat(h) {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 31) return mant ? NaN : sign * Infinity;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

function numbers(t) {
  if (t.type === 'float16' && !(typeof Float16Array !== 'undefined' && t.data instanceof Float16Array)) {
    return Array.from(t.data, halfToFloat);
  }
  return Array.from(t.data, Number);
}

const ATOL = 1e-4;
const RTOL = 1e-3;

/** Distance of `got` from `want`, element by element. */
function compare(got, want) {
  const r = { type: got.type, dims: got.dims, maxAbs: 0, maxRel: 0, mismatches: 0 };
  if (got.type !== want.type || got.dims.join() !== want.dims.join()) {
    r.mismatches = -1;
    r.wantType = want.type;
    r.wantDims = want.dims;
    return r;
  }
  if (got.type === 'int64') {
    // Exact: compared as BigInt, not through doubles.
    for (let i = 0; i < got.data.length; i++) {
      if (got.data[i] !== want.data[i]) r.mismatches++;
    }
    r.maxAbs = r.mismatches;
    return r;
  }
  const a = numbers(got);
  const b = numbers(want);
  for (let i = 0; i < a.length; i++) {
    const d = Math.abs(a[i] - b[i]);
    if (!(d <= ATOL + RTOL * Math.abs(b[i]))) r.mismatches++;
    if (!(d <= r.maxAbs)) r.maxAbs = d;
    if (b[i] !== 0 && !(d / Math.abs(b[i]) <= r.maxRel)) r.maxRel = d / Math.abs(b[i]);
  }
  return r;
}

/**
 * What ORT's log says about the WebNN session's partitioning: the summary
 * of the WebNN execution provider's last GetCapability pass, and the
 * operator types of the nodes that pass examined, split by whether it took
 * them.
 */
function partitioning(lines) {
  const summary =
    /GetCapability, number of partitions supported by WebNN: (\d+) number of nodes in the graph: (\d+) number of nodes supported by WebNN: (\d+)/;
  const node = /Operator type: \[([^\]]+)\] index: \[\d+\] name: \[[^\]]*\] supported: \[([01])\]/;
  let last = -1;
  let previous = -1;
  lines.forEach((l, i) => {
    if (summary.test(l)) [previous, last] = [last, i];
  });
  if (last < 0) return { summary: false };
  const m = summary.exec(lines[last]);
  const ops = { webnn: {}, cpu: {} };
  for (const l of lines.slice(previous + 1, last)) {
    const n = node.exec(l);
    if (n) {
      const side = n[2] === '1' ? ops.webnn : ops.cpu;
      side[n[1]] = (side[n[1]] || 0) + 1;
    }
  }
  return {
    summary: true,
    partitions: Number(m[1]),
    graphNodes: Number(m[2]),
    webnn: Number(m[3]),
    cpu: Number(m[2]) - Number(m[3]),
    webnnOps: ops.webnn,
    cpuOps: ops.cpu,
  };
}

async function runModel(model) {
  currentModel = model.name;
  const result = { name: model.name, expect: model.expect };
  const t0 = performance.now();
  const reference = await ort.InferenceSession.create(model.bytes, { executionProviders: ['wasm'] });
  const want = await reference.run(ortInputs(model));
  result.wasmMs = performance.now() - t0;

  const t1 = performance.now();
  const from = logs.length;
  const session = await ort.InferenceSession.create(model.bytes, {
    executionProviders: [{ name: 'webnn', context, deviceType: 'cpu' }],
    // Verbose, for the per-node "supported" lines of GetCapability.
    logSeverityLevel: 0,
  });
  result.partitioning = partitioning(logs.slice(from));
  const before = calls['MLContext.dispatch'] || 0;
  const got = await session.run(ortInputs(model));
  result.dispatches = (calls['MLContext.dispatch'] || 0) - before;
  result.webnnMs = performance.now() - t1;

  result.outputs = {};
  for (const name of Object.keys(want)) {
    result.outputs[name] = got[name] ? compare(got[name], want[name]) : { missing: true };
  }
  // The same model on onnxruntime-node's CPU provider, for the models
  // that ask (its native kernels, not the wasm build's).
  if (model.node) {
    const native = require('onnxruntime-node');
    const feeds = {};
    for (const [name, { type, dims, data }] of Object.entries(model.inputs)) {
      feeds[name] = new native.Tensor(type, data, dims);
    }
    const nativeSession = await native.InferenceSession.create(model.bytes);
    const wantNative = await nativeSession.run(feeds);
    result.nodeOutputs = {};
    for (const name of Object.keys(wantNative)) {
      result.nodeOutputs[name] = got[name] ? compare(got[name], wantNative[name]) : { missing: true };
    }
    await nativeSession.release();
  }
  await session.release();
  await reference.release();
  return result;
}

const report = { atol: ATOL, rtol: RTOL, ort: ort.env.versions, models: [] };
const only = process.argv.slice(2);
for (const model of models()) {
  if (only.length && !only.includes(model.name)) continue;
  try {
    report.models.push(await runModel(model));
  } catch (e) {
    report.models.push({ name: model.name, error: String(e && e.stack ? e.stack : e) });
  }
}
// Let settled-late rejections and destroyed tensors' work reach us.
await new Promise((r) => setTimeout(r, 50));
report.calls = calls;
report.rejected = rejected;
report.unhandled = unhandled;
report.transfers = transfers;
report.logTail = logs.filter((l) => /\[[EW]:onnxruntime/.test(l) && !/GetCapability|not assigned to the preferred/.test(l));
reported = true;
process.stdout.write(`${JSON.stringify(report)}\n`);
