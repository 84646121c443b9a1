#!/usr/bin/env node
'use strict';
// The GPU benchmark: webnn-node's wgpu backend on its own, against nothing
// but itself (and the CPU backend, for correctness).
//
//   node bench/gpu.js [--quick] [--runs N] [--chain K] [--only a1,a3,b,c,d] [--max-run-s S]
//
// Workloads (float32, batch 1), built from the same descriptions as the CPU
// benchmark (bench/workloads.js) with the same seeded weights:
//
//   a1  matmul 1024x1024 by 1024x1024, B a constant
//   a3  matmul 4096x4096 by 4096x4096, B a constant   (--only a: both)
//   b   conv2d, input 1x64x56x56, 64 filters 3x3, padding 1, bias
//   c   MobileNetV2 at 224x224
//   d   transformer encoder block, sequence 128, hidden 384, 6 heads
//
// For each, on a context from ml.createContext({deviceType: 'gpu'}):
//
//   build     ms of `await builder.build(outputs)` alone (shader modules,
//             pipelines, constant uploads, intermediate buffers), not the
//             JS calls that describe the graph.
//   first     ms of the first inference (see below) after the build: what a
//             caller waits for once; lazy device work shows up here.
//   latency   one inference as a caller sees it: writeTensor of every input,
//             dispatch, await readTensor of every output; median of the
//             timed runs after warm-up runs. Tensors and graph are made once.
//   chained   writeTensor of the inputs, then K dispatches in a row without
//             any read, then one await readTensor of every output; the time
//             divided by K. Close to `latency` minus the read round trip
//             when nothing stalls the GPU between dispatches; much lower than
//             `latency` means the per-call CPU work and the read, not the
//             kernels, dominate a single inference.
//   GFLOP/s   for a1, a3 and b: 2*M*N*K and 2*N*Cout*Hout*Wout*Cin*kh*kw over
//             the latency median and over the chained per-dispatch time.
//
// Correctness comes first: the same graph (same description, same seed,
// hence the same weights) is built on a CPU context and run on the same
// inputs, and max |gpu - cpu| / max(|cpu|, floor) is printed, with
// floor = max(1e-3, 0.1 * rms(cpu)), the check bench/run.js makes too
// (bench/check.js; below the floor the test is an absolute one, so
// near-zero outputs do not turn rounding noise into large "relative"
// errors). Float32 on the GPU and on the CPU differ
// only by summation order, so anything above 1e-2 is a bug: the workload is
// marked MISMATCH, is not timed, a loud line goes to stderr and the exit
// status is 1.
//
// Run counts: defaults are small (10 timed runs and chains of 20 for the
// small workloads, 5 and 10 for the networks, 3 and 4 for the 4096^3
// matmul), after 2 warm-up runs. Software adapters (Mesa's lavapipe) are
// slow, so the first inference's time sets a budget: each series (timed
// runs, chain) is cut to about BUDGET_MS / first, at least one run and a
// chain of two, and when the first inference took over SLOW_MS there is no
// further warm-up (the first inference already was one). --runs N
// and --chain K override the counts and the budget. --quick: one timed run,
// a chain of 3 (2 for slow workloads) and no warm-up beyond the first run.
// Before a3 (137 GFLOP), one inference is estimated from the matmul rate
// already measured (a1's, or a 512^3 probe's when a1 is not selected); over
// --max-run-s seconds (default 60) a3 is `skipped` rather than run: on a
// software adapter one 4096^3 run takes many minutes.
//
// An operator this build's GPU backend lacks (opSupportLimits() lists no
// float32 for it, or build() rejects with "not supported") makes its
// workload `unavailable: ...`; the rest still runs. Without any GPU adapter
// (createContext rejects with NotSupportedError) the script says so and
// exits 0.
//
// Output: a table, one row per workload, and one JSON line starting with
// {"bench": for scripts. Exit status: 0 when everything ran or was
// unavailable or skipped (however slow); 1 on a mismatch or an error; 2 for bad
// arguments. On a software adapter the figures only prove the path works.

const os = require('os');
const { now, median, loadavg, fmtMs, fmt, fmtErr, round, printTable, parseArgs: parseBenchArgs } = require('./report');
const { WORKLOADS, WEIGHT_SEED, INPUT_SEED, makeRandom, WebnnEmitter } = require('./workloads');
const { REL_FLOOR, RMS_FRACTION, maxRelativeError } = require('./check');

const MAX_REL_ERR = 1e-2;
const WARMUP = 2;
// A series (timed runs or one chain) is cut to about this many ms, judged
// by the first inference's time, unless --runs / --chain are given.
const BUDGET_MS = 10000;
// A first inference slower than this skips the further warm-up runs.
const SLOW_MS = 3000;
// A workload with a FLOP count whose one inference is estimated (from the
// matmul rate measured before it) to take longer than this is skipped,
// unless --max-run-s says otherwise: the 4096^3 matmul on a software
// adapter would take many minutes per run.
const MAX_RUN_S = 60;
// The matmul that measures the rate when a1 is not selected.
const PROBE_N = 512;

const webnn = () => require('..');

// matmul n^3 with B a constant. workloads.js describes only n = 1024 and
// does not export its matmul description; this is the same description
// (same input name, scales and draw order) with n a parameter, so at
// n = 1024 it draws exactly what workloads.js's a1 does.
function matmulConstantB(n, id) {
  return {
    id,
    title: `matmul ${n}^3, B constant`,
    inputs: [{ name: 'a', shape: [n, n] }],
    outputs: [{ name: 'c', shape: [n, n] }],
    flops: 2 * n * n * n,
    build(g, rand) {
      const a = g.input('a', [n, n]);
      // Scaled by 1/sqrt(K): the products then sum to values of order 1.
      const b = g.constant([n, n], rand.uniform([n, n], 1 / Math.sqrt(n)));
      g.output('c', g.matmul(a, b), [n, n]);
    },
    inputData(rand) {
      return { a: rand.uniform([n, n]) };
    },
  };
}

const fromRunJs = (id) => {
  const w = WORKLOADS.find((x) => x.id === id);
  if (!w) throw new Error(`bench/workloads.js has no workload ${id}`);
  return w;
};

// id, description, default timed runs, default chain length.
const GPU_WORKLOADS = [
  { workload: fromRunJs('a1'), runs: 10, chain: 20 },
  { workload: matmulConstantB(4096, 'a3'), runs: 3, chain: 4 },
  { workload: fromRunJs('b'), runs: 10, chain: 20 },
  { workload: fromRunJs('c'), runs: 5, chain: 10 },
  { workload: fromRunJs('d'), runs: 5, chain: 10 },
];

function parseArgs(argv) {
  return parseBenchArgs(
    argv,
    { runs: null, chain: null, only: null, quick: false, maxRunS: MAX_RUN_S },
    {
      '--chain': (value, opts, positiveInt) => {
        opts.chain = positiveInt();
      },
      '--only': (value, opts) => {
        opts.only = value().split(',');
        const known = ['a', ...GPU_WORKLOADS.map((e) => e.workload.id)];
        const unknown = opts.only.filter((id) => !known.includes(id));
        if (unknown.length) throw new Error(`--only: no workload ${unknown.join(', ')} (known: ${known.join(', ')})`);
      },
      '--max-run-s': (value, opts) => {
        opts.maxRunS = Number(value());
        if (!(opts.maxRunS > 0)) throw new Error('--max-run-s: a positive number of seconds');
      },
      // Accepted so that `npm run bench -- --gpu` may pass it through.
      '--gpu': () => {},
    },
  );
}

// The operators a description uses, found by running it against a builder
// whose methods only record their names.
function operatorsOf(workload) {
  const used = new Set();
  const recorder = new Proxy(
    {},
    {
      get(_, name) {
        used.add(name);
        return () => ({ shape: [] });
      },
    },
  );
  const emitter = new WebnnEmitter(recorder);
  emitter.output = () => {}; // skip the shape check: the recorder knows none
  workload.build(emitter, makeRandom(WEIGHT_SEED));
  return [...used].filter((op) => op !== 'input' && op !== 'constant');
}

// Operators for which the context's opSupportLimits() lists no float32 on
// the first operand (absent entries are left to build() to judge).
function unsupportedOps(context, workload) {
  const limits = context.opSupportLimits();
  return operatorsOf(workload).filter((op) => {
    const entry = limits[op];
    if (!entry || typeof entry !== 'object') return false;
    const first = Object.values(entry).find((v) => v && Array.isArray(v.dataTypes));
    return first !== undefined && !first.dataTypes.includes('float32');
  });
}

// Builds the workload on `context` and returns a runner: one inference
// (write inputs, dispatch, read outputs) and a chain (write, K dispatches,
// one read).
async function buildRunner(context, workload) {
  const { MLGraphBuilder } = webnn();
  const builder = new MLGraphBuilder(context);
  const emitter = new WebnnEmitter(builder);
  workload.build(emitter, makeRandom(WEIGHT_SEED));
  const t = now();
  const graph = await builder.build(emitter.outputs);
  const buildMs = now() - t;

  const inputs = {};
  const outputs = {};
  const release = () => {
    graph.destroy();
    for (const x of [...Object.values(inputs), ...Object.values(outputs)]) x.destroy();
  };
  try {
    const tensor = (shape, usage) => context.createTensor({ dataType: 'float32', shape, ...usage });
    for (const { name, shape } of workload.inputs) inputs[name] = await tensor(shape, { writable: true });
    for (const { name, shape } of workload.outputs) outputs[name] = await tensor(shape, { readable: true });
  } catch (e) {
    release();
    throw e;
  }
  const outputNames = Object.keys(outputs);
  const readAll = async () => {
    const results = await Promise.all(outputNames.map((name) => context.readTensor(outputs[name])));
    return Object.fromEntries(outputNames.map((name, i) => [name, new Float32Array(results[i])]));
  };
  const write = (data) => {
    for (const name in inputs) context.writeTensor(inputs[name], data[name]);
  };

  return {
    buildMs,
    async run(data) {
      write(data);
      context.dispatch(graph, inputs, outputs);
      return readAll();
    },
    async chain(data, k) {
      write(data);
      for (let i = 0; i < k; i++) context.dispatch(graph, inputs, outputs);
      return readAll();
    },
    release,
  };
}

// The CPU backend's outputs for the same graph and inputs.
async function cpuReference(cpuContext, workload, data) {
  const cpu = await buildRunner(cpuContext, workload);
  try {
    return await cpu.run(data);
  } finally {
    cpu.release();
  }
}

const isNotSupported = (e) => e && (e.name === 'NotSupportedError' || /not supported/i.test(e.message || ''));

// Counts for one workload: explicit options win; otherwise the defaults,
// cut to the time budget judged by the first inference.
function plan(entry, firstMs, opts) {
  const slow = firstMs > SLOW_MS;
  const fit = Math.floor(BUDGET_MS / Math.max(firstMs, 1e-3));
  let runs = opts.quick ? 1 : Math.max(1, Math.min(entry.runs, fit));
  let chain = opts.quick ? (slow ? 2 : 3) : Math.max(2, Math.min(entry.chain, fit));
  if (opts.runs) runs = opts.runs;
  if (opts.chain) chain = opts.chain;
  const warmup = opts.quick || slow ? 0 : WARMUP;
  return { runs, chain, warmup };
}

// GFLOP/s of a matmul on this context: the best a1 figure if a1 ran,
// otherwise one timed PROBE_N^3 matmul after a warm-up one. Used only to
// estimate whether a workload is too long to run here.
async function matmulRate(gpuContext, rows) {
  const a1 = rows.find((r) => r.workload === 'a1' && r.latency_gflops !== undefined);
  if (a1) return { gflops: Math.max(a1.latency_gflops, a1.chained_gflops), from: 'a1' };
  const probe = matmulConstantB(PROBE_N, 'probe');
  const runner = await buildRunner(gpuContext, probe);
  try {
    const data = probe.inputData(makeRandom(INPUT_SEED));
    await runner.run(data);
    const t = now();
    await runner.run(data);
    return { gflops: probe.flops / (now() - t) / 1e6, from: `a ${PROBE_N}^3 probe` };
  } finally {
    runner.release();
  }
}

async function benchWorkload(entry, gpuContext, cpuContext, opts, rows) {
  const { workload } = entry;
  const row = { workload: workload.id, title: workload.title, status: 'ok' };
  const missing = unsupportedOps(gpuContext, workload);
  if (missing.length) return { ...row, status: `unavailable: ${missing.join(', ')} not supported on this GPU context` };
  if (workload.flops && workload.flops > 1e11) {
    let rate;
    try {
      rate = await matmulRate(gpuContext, rows);
    } catch (e) {
      return { ...row, status: `failed: matmul rate probe: ${e.message}`, failed: true };
    }
    const estimateS = workload.flops / rate.gflops / 1e9;
    row.estimated_run_s = estimateS;
    if (estimateS > opts.maxRunS) {
      return {
        ...row,
        status: `skipped: one run estimated at ${estimateS.toFixed(0)} s (${rate.gflops.toFixed(2)} GFLOP/s ` +
          `from ${rate.from}; over --max-run-s ${opts.maxRunS})`,
      };
    }
  }

  let gpu;
  try {
    gpu = await buildRunner(gpuContext, workload);
  } catch (e) {
    if (isNotSupported(e)) return { ...row, status: `unavailable: ${e.message}` };
    return { ...row, status: `failed: build: ${e.message}`, failed: true };
  }
  try {
    row.build_ms = gpu.buildMs;
    const data = workload.inputData(makeRandom(INPUT_SEED));
    let t = now();
    const got = await gpu.run(data);
    row.first_ms = now() - t;

    row.max_rel_err = maxRelativeError(got, await cpuReference(cpuContext, workload, data));
    if (!(row.max_rel_err < MAX_REL_ERR)) {
      row.status = 'MISMATCH';
      row.mismatch = true;
      console.error(
        `*** ${workload.id} ${workload.title}: GPU and CPU outputs differ, max relative error ` +
          `${row.max_rel_err} >= ${MAX_REL_ERR}; not timed ***`,
      );
      return row;
    }

    const { runs, chain, warmup } = plan(entry, row.first_ms, opts);
    for (let i = 0; i < warmup; i++) await gpu.run(data);
    const times = [];
    for (let i = 0; i < runs; i++) {
      t = now();
      await gpu.run(data);
      times.push(now() - t);
    }
    row.runs = runs;
    row.warmup = warmup;
    row.latency_ms = median(times);

    t = now();
    await gpu.chain(data, chain);
    row.chain = chain;
    row.chained_ms = (now() - t) / chain;

    if (workload.flops) {
      // FLOP per ms / 1e6 = GFLOP/s
      row.latency_gflops = workload.flops / row.latency_ms / 1e6;
      row.chained_gflops = workload.flops / row.chained_ms / 1e6;
    }
  } catch (e) {
    row.status = `failed: ${e.message}`;
    row.failed = true;
  } finally {
    gpu.release();
  }
  return row;
}

// --- report ---


function printResults(rows) {
  const header = ['workload', 'build ms', 'first ms', 'runs', 'latency ms', 'K', 'chained ms', 'GFLOP/s lat', 'GFLOP/s chn', 'max rel err', 'status'];
  const lines = rows.map((r) => [
    `${r.workload} ${r.title}`,
    fmtMs(r.build_ms),
    fmtMs(r.first_ms),
    r.runs === undefined ? '-' : String(r.runs),
    fmtMs(r.latency_ms),
    r.chain === undefined ? '-' : String(r.chain),
    fmtMs(r.chained_ms),
    fmt(r.latency_gflops, 1),
    fmt(r.chained_gflops, 1),
    fmtErr(r.max_rel_err),
    r.status,
  ]);
  printTable(header, lines);
}

async function main(opts) {
  const selected = GPU_WORKLOADS.filter(
    (e) => !opts.only || opts.only.some((id) => e.workload.id === id || (id === 'a' && e.workload.id.startsWith('a'))),
  );

  const { ml } = webnn();
  let gpuContext;
  try {
    gpuContext = await ml.createContext({ deviceType: 'gpu' });
  } catch (e) {
    if (e && e.name === 'NotSupportedError') {
      console.log(`webnn-node GPU benchmark: no GPU context on this machine (${e.message}); nothing to measure.`);
      return 0;
    }
    throw e;
  }
  let lostReason = null;
  if (gpuContext.lost && typeof gpuContext.lost.then === 'function') {
    gpuContext.lost.then((info) => {
      lostReason = (info && info.message) || 'lost';
    });
  }
  const cpuContext = await ml.createContext({ deviceType: 'cpu' });

  const loadStart = loadavg();
  const cpus = os.cpus();
  console.log('webnn-node GPU backend (wgpu), float32, batch 1; outputs checked against the CPU backend');
  console.log(
    `machine: ${cpus.length} x ${cpus[0] ? cpus[0].model : 'unknown CPU'}, node ${process.version}; ` +
      `context.accelerated: ${gpuContext.accelerated}`,
  );
  console.log(`load average at start: ${loadStart}`);
  console.log(
    `timing: latency = write + dispatch + read, median; chained = write + K dispatches + one read, per dispatch` +
      `${opts.quick ? ' (--quick: one run each)' : ''}; ` +
      `check: max |gpu-cpu|/max(|cpu|, ${REL_FLOOR}, ${RMS_FRACTION}*rms(cpu)) < ${MAX_REL_ERR}`,
  );
  console.log('');

  const rows = [];
  for (const entry of selected) {
    if (lostReason) {
      rows.push({ workload: entry.workload.id, title: entry.workload.title, status: `failed: GPU context lost: ${lostReason}`, failed: true });
      continue;
    }
    const row = await benchWorkload(entry, gpuContext, cpuContext, opts, rows);
    rows.push(row);
    process.stderr.write(`  ${entry.workload.id}: ${row.status}\n`);
  }
  const accelerated = gpuContext.accelerated;
  gpuContext.destroy();
  cpuContext.destroy();
  printResults(rows);

  const loadEnd = loadavg();
  console.log(`load average at end: ${loadEnd}`);
  const mismatches = rows.filter((r) => r.mismatch);
  if (mismatches.length) {
    console.error(`GPU OUTPUTS WRONG for ${mismatches.map((r) => r.workload).join(', ')} (max relative error above ${MAX_REL_ERR})`);
  }

  const report = {
    bench: 'webnn-node gpu',
    accelerated,
    cpus: cpus.length,
    quick: opts.quick,
    load_start: loadStart,
    load_end: loadEnd,
    max_rel_err_limit: MAX_REL_ERR,
    results: rows.map((r) => {
      const out = {};
      for (const [k, v] of Object.entries(r)) if (k !== 'failed' && k !== 'mismatch') out[k] = round(v);
      return out;
    }),
  };
  console.log(JSON.stringify(report));
  return rows.some((r) => r.failed || r.mismatch) ? 1 : 0;
}

if (require.main === module) {
  let opts;
  try {
    opts = parseArgs(process.argv.slice(2));
  } catch (e) {
    console.error(e.message);
    process.exit(2);
  }
  main(opts).then(
    (code) => {
      process.exitCode = code;
    },
    (e) => {
      console.error(e && e.stack ? e.stack : e);
      process.exitCode = 1;
    },
  );
}

module.exports = { GPU_WORKLOADS };
