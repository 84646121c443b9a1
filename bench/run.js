#!/usr/bin/env node
'use strict';
// webnn-node against onnxruntime-node on the CPU: the same workloads (built
// from one description each, bench/workloads.js), checked for equal outputs,
// then timed in alternating blocks in one process. See bench/README.md.
//
//   node bench/run.js [--threads 1,2] [--runs N] [--only a,b,...] [--quick] [--save-models]
//   node bench/run.js --rss-child mobilenet ours|ort|none [--threads N] [--runs N]
//
// Exit status: 0 when every workload ran (slow, mismatched or unavailable
// ones included: this is a report, not a test); 1 when something errored.

// `--gpu`: the GPU backend's own benchmark (bench/gpu.js) instead.
if (process.argv.includes('--gpu')) {
  require('./gpu.js');
  return;
}

const fs = require('fs');
const os = require('os');
const { now, median, loadavg, fmtMs, fmt, fmtErr, round, printTable, parseArgs: parseBenchArgs, ortSessionOptions, peakRssMb } = require('./report');
const path = require('path');
const { execFileSync } = require('child_process');
const { WORKLOADS, WEIGHT_SEED, INPUT_SEED, makeRandom, WebnnEmitter, NullEmitter, size } = require('./workloads');
const { REL_FLOOR, RMS_FRACTION, maxRelativeError } = require('./check');

// Outputs agree when maxRelativeError (bench/check.js) against onnxruntime
// stays below MAX_REL_ERR.
const MAX_REL_ERR = 1e-3;
const WARMUP = 5;
// Warm-up time per side for the per-call rows (see timeAlternating).
const PER_CALL_WARMUP_MS = 500;

// Loaded lazily: the RSS children must load only the side they measure.
const webnn = () => require('..');
const ort = () => require('onnxruntime-node');

function parseArgs(argv) {
  return parseBenchArgs(
    argv,
    { threads: [1, 2], runs: null, only: null, quick: false, saveModels: false, rssChild: null },
    {
      '--only': (value, opts) => {
        opts.only = value().split(',');
      },
      '--save-models': (value, opts) => {
        opts.saveModels = true;
      },
      '--rss-child': (value, opts) => {
        opts.rssChild = { workload: value(), side: value() };
      },
    },
  );
}

// --- the two sides, each behind the same three calls: build, run, release ---

async function buildOurs(workload, context) {
  const { MLGraphBuilder } = webnn();
  const missing = (workload.needs || []).filter((op) => typeof MLGraphBuilder.prototype[op] !== 'function');
  if (missing.length) return { unavailable: `builder.${missing.join(', builder.')} not implemented` };

  const builder = new MLGraphBuilder(context);
  const emitter = new WebnnEmitter(builder);
  workload.build(emitter, makeRandom(WEIGHT_SEED));
  const graph = await builder.build(emitter.outputs);
  if (workload.form === 'compute') return computeForm(workload, context, graph);
  const tensor = (shape, usage) => context.createTensor({ dataType: 'float32', shape, ...usage });
  const inputs = {};
  for (const { name, shape } of workload.inputs) inputs[name] = await tensor(shape, { writable: true });
  const outputs = {};
  for (const { name, shape } of workload.outputs) outputs[name] = await tensor(shape, { readable: true });
  const outputNames = Object.keys(outputs);

  return {
    // One inference as a caller sees it: inputs in, results back in JS.
    async run(data) {
      for (const name in inputs) context.writeTensor(inputs[name], data[name]);
      context.dispatch(graph, inputs, outputs);
      const results = await Promise.all(outputNames.map((name) => context.readTensor(outputs[name])));
      return Object.fromEntries(outputNames.map((name, i) => [name, new Float32Array(results[i])]));
    },
    release() {
      graph.destroy();
      for (const t of [...Object.values(inputs), ...Object.values(outputs)]) t.destroy();
    },
  };
}

// The same inference through our `compute()` extension: the caller's
// arrays are transferred in, and the arrays it returns (inputs unchanged,
// outputs filled) are what the caller passes to the next call, so no
// tensor is written or read.
function computeForm(workload, context, graph) {
  let ins = null;
  let outs = Object.fromEntries(workload.outputs.map(({ name, shape }) => [name, new Float32Array(size(shape))]));
  return {
    async run(data) {
      // The first call takes copies of the data, as the caller's own arrays
      // are detached by the transfer.
      if (!ins) ins = Object.fromEntries(Object.entries(data).map(([k, v]) => [k, v.slice()]));
      const r = await context.compute(graph, ins, outs);
      ins = r.inputs;
      outs = r.outputs;
      return outs;
    },
    release() {
      graph.destroy();
    },
  };
}

const modelCache = new Map();
function onnxModel(workload) {
  if (!modelCache.has(workload.id)) {
    const { OnnxEmitter } = require('./onnx');
    const emitter = new OnnxEmitter(workload.title);
    workload.build(emitter, makeRandom(WEIGHT_SEED));
    modelCache.set(workload.id, emitter.encode());
  }
  return modelCache.get(workload.id);
}

async function buildOrt(workload, threads) {
  const { InferenceSession, Tensor } = ort();
  const session = await InferenceSession.create(onnxModel(workload), ortSessionOptions(threads));
  let feeds = null;
  return {
    async run(data) {
      // The feeds wrap the caller's arrays; made once, like our tensors.
      if (!feeds) {
        feeds = {};
        for (const { name, shape } of workload.inputs) feeds[name] = new Tensor('float32', data[name], shape);
      }
      const results = await session.run(feeds);
      return Object.fromEntries(workload.outputs.map(({ name }) => [name, results[name].data]));
    },
    release() {
      return session.release();
    },
  };
}

// --- measurement ---

// Alternates the two sides in blocks of runs, so a change in machine load
// during the measurement hits both rather than whichever happened to run
// then. Not run by run: each runtime leaves its thread pool busy for a while
// after a run, and that idle work lands on the other side's runs and takes
// a core from them, which measures the two runtimes' interference rather
// than either one. onnxruntime's intra-op threads spin-wait for about 45 ms
// after each run by default (measured here from the threads' CPU time in
// /proc/self/task/*/schedstat: one thread busy for 40-45 ms, then asleep),
// far longer than one run of most workloads. So each block starts after a
// pause of SETTLE_MS, in which the other side's threads go idle, and with
// one untimed run, which wakes this side's own threads; the timed runs that
// follow are back to back, as an application using one runtime would issue
// them.
const SETTLE_MS = 100;

// The networks also timed in nhwc and float16 (bench/variants.js).
const VARIANT_WORKLOADS = ['c', 'j', 'k'];

async function timeAlternating(ours, theirs, data, warmup, runs, warmupMs = 0) {
  for (let i = 0; i < warmup; i++) {
    await ours.run(data);
    await theirs.run(data);
  }
  // Per-call rows: each side also runs for `warmupMs` on its own, so that
  // both are timed in their steady state (JavaScript compiled by the
  // optimising tier, allocators and thread pools warm) rather than in the
  // first few thousand calls, which a service making such calls leaves
  // behind in its first second.
  for (const impl of [ours, theirs]) {
    for (const t = now(); now() - t < warmupMs; ) await impl.run(data);
  }
  const times = { ours: [], ort: [] };
  const block = blockSize(runs);
  for (let done = 0; done < runs; done += block) {
    const count = Math.min(block, runs - done);
    for (const [side, impl] of [['ours', ours], ['ort', theirs]]) {
      await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
      await impl.run(data); // the block's lead-in, untimed
      for (let i = 0; i < count; i++) {
        const t = now();
        await impl.run(data);
        times[side].push(now() - t);
      }
    }
  }
  // The fastest runs beside the medians: on a shared host (a cloud VM
  // whose cores a neighbour takes for seconds at a time) a median can move
  // by a third between two runs of the bench, both runtimes' alike; such
  // noise can only lengthen a run, so the fastest runs say what the code
  // does on cores of its own. The medians remain the figures of record.
  return {
    ours: median(times.ours),
    ort: median(times.ort),
    oursMin: Math.min(...times.ours),
    ortMin: Math.min(...times.ort),
  };
}

// Timed runs per block: four blocks (or more) per side, so that load
// changes still fall on both, and at least 2 runs per lead-in.
function blockSize(runs) {
  return Math.max(2, Math.ceil(runs / 4));
}

async function benchWorkload(workload, threads, context, opts) {
  const row = { workload: workload.id, title: workload.title, threads, status: 'ok' };
  const ours = await buildOurs(workload, context).catch((e) => ({ error: e }));
  if (ours.unavailable) return { ...row, status: `unavailable: ${ours.unavailable}` };
  if (ours.error) return { ...row, status: `failed: webnn build: ${ours.error.message}`, failed: true };
  let theirs;
  try {
    theirs = await buildOrt(workload, threads);
  } catch (e) {
    ours.release();
    return { ...row, status: `failed: onnxruntime session: ${e.message}`, failed: true };
  }
  try {
    const data = workload.inputData(makeRandom(INPUT_SEED));
    row.max_rel_err = maxRelativeError(await ours.run(data), await theirs.run(data));
    if (!(row.max_rel_err < MAX_REL_ERR)) row.status = 'MISMATCH';

    const runs = opts.runs || (opts.quick ? Math.min(workload.runs, workload.perCallMicros ? 100 : 3) : workload.runs);
    const warmupMs = workload.perCallMicros && !opts.quick ? PER_CALL_WARMUP_MS : 0;
    const t = await timeAlternating(ours, theirs, data, opts.quick ? 1 : WARMUP, runs, warmupMs);
    Object.assign(row, {
      runs,
      ours_ms: t.ours,
      ort_ms: t.ort,
      ratio: t.ours / t.ort,
      ours_min_ms: t.oursMin,
      ort_min_ms: t.ortMin,
      min_ratio: t.oursMin / t.ortMin,
    });
    if (workload.flops) {
      // FLOP per ms / 1e6 = GFLOP/s
      row.ours_gflops = workload.flops / t.ours / 1e6;
      row.ort_gflops = workload.flops / t.ort / 1e6;
      if (opts.peaks && opts.peaks.has(threads)) {
        row.ours_of_peak = row.ours_gflops / opts.peaks.get(threads);
        row.ort_of_peak = row.ort_gflops / opts.peaks.get(threads);
      }
    }
    if (workload.perCallMicros) {
      row.ours_us = t.ours * 1000;
      row.ort_us = t.ort * 1000;
    }
  } catch (e) {
    row.status = `failed: ${e.message}`;
    row.failed = true;
  } finally {
    ours.release();
    await theirs.release();
  }
  return row;
}

// --- peak memory of one side alone, in a child process ---

async function rssChild(opts) {
  const workload = WORKLOADS.find((w) => w.id === 'c');
  if (opts.rssChild.workload !== 'mobilenet') throw new Error('--rss-child: only "mobilenet" is measured');
  const threads = opts.threads[0];
  const runs = opts.runs || 20;
  const { side } = opts.rssChild;
  const data = workload.inputData(makeRandom(INPUT_SEED));
  let model;
  if (side === 'ours') {
    model = await buildOurs(workload, await webnn().ml.createContext({ numThreads: threads }));
  } else if (side === 'ort') {
    model = await buildOrt(workload, threads);
  } else if (side === 'none') {
    // Node, the description's weight arrays and the input: the floor both
    // sides start from.
    const keep = new NullEmitter();
    workload.build(keep, makeRandom(WEIGHT_SEED));
    model = { run: async () => keep, release() {} };
  } else {
    throw new Error(`--rss-child: side must be ours, ort or none, not ${side}`);
  }
  for (let i = 0; i < runs; i++) await model.run(data);
  await model.release();
  console.log(JSON.stringify({ side, threads, runs, max_rss_mb: peakRssMb() }));
}

function measureRss(side, threads, runs) {
  const out = execFileSync(
    process.execPath,
    [__filename, '--rss-child', 'mobilenet', side, '--threads', String(threads), '--runs', String(runs)],
    { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] },
  );
  return JSON.parse(out.trim().split('\n').pop()).max_rss_mb;
}

// --- report ---


function printResults(rows) {
  const header = ['workload', 'thr', 'runs', 'ours ms', 'ORT ms', 'ours/ORT', 'fastest ours/ORT', 'ours GFLOP/s', 'ORT GFLOP/s', 'ours/peak', 'ORT/peak', 'max rel err', 'status'];
  const pct = (x) => (x === undefined ? '-' : `${(100 * x).toFixed(0)}%`);
  const lines = rows.map((r) => [
    `${r.workload} ${r.title}`,
    String(r.threads),
    r.runs === undefined ? '-' : String(r.runs),
    fmtMs(r.ours_ms),
    fmtMs(r.ort_ms),
    fmt(r.ratio, 2),
    fmt(r.min_ratio, 2),
    fmt(r.ours_gflops, 1),
    fmt(r.ort_gflops, 1),
    pct(r.ours_of_peak),
    pct(r.ort_of_peak),
    fmtErr(r.max_rel_err),
    r.status,
  ]);
  printTable(header, lines);
}

// The machine's float32 multiply-add peak, measured in this process just
// before the workloads (the addon's cpuPeak: independent FMA chains on
// every thread, no memory traffic; see src/backend/cpu/sgemm/peak.rs),
// at each thread count, for each instruction set the CPU has. Returns
// the GEMM kernel's figures by thread count (the denominator of every
// "of peak" column) and all of them for the report.
function measurePeaks(opts) {
  const native = require('../binding.js').load();
  if (typeof native.cpuPeak !== 'function') {
    console.log('peak: not measured (this build has no cpuPeak)\n');
    return { gemm: new Map(), all: [] };
  }
  const millis = opts.quick ? 50 : 250;
  const gemmIsa = native.cpuPeak(1, 1).isa;
  const isas = ['avx512f', 'avx2+fma', 'portable'].filter((isa) => {
    try {
      native.cpuPeak(1, 1, isa);
      return true;
    } catch {
      return false;
    }
  });
  const all = [];
  for (const isa of isas) {
    for (const n of opts.threads) all.push(native.cpuPeak(n, millis, isa));
  }
  const gemm = new Map(all.filter((p) => p.isa === gemmIsa).map((p) => [p.threads, p.gflops]));
  console.log(`measured float32 FMA peak (${millis} ms rounds, best of 3, 12 independent chains per thread), GFLOP/s:`);
  for (const isa of isas) {
    const cells = opts.threads.map((n) => `${n} thr ${all.find((p) => p.isa === isa && p.threads === n).gflops.toFixed(1)}`);
    console.log(`  ${isa.padEnd(9)} ${cells.join(', ')}${isa === gemmIsa ? '   <- our GEMM kernel; "of peak" divides by these' : ''}`);
  }
  console.log('');
  return { gemm, all };
}

// The x86 vector extensions the CPU reports (Linux: /proc/cpuinfo's
// flags); null where that file is missing.
function cpuFlags() {
  try {
    const line = fs.readFileSync('/proc/cpuinfo', 'utf8').split('\n').find((l) => /^flags\s*:/.test(l));
    return line ? new Set(line.split(':')[1].trim().split(/\s+/)) : null;
  } catch {
    return null;
  }
}

// The instruction set each side uses. Ours: what our CPU backend chose
// at run time for its matrix products, blocked convolutions and
// element-wise loops, as the addon reports it (cpuIsa, not public API).
// onnxruntime-node does not report MLAS's choice; its line says what the
// CPU offers, which MLAS picks from.
function instructionSets() {
  const native = require('../binding.js').load();
  const ours = typeof native.cpuIsa === 'function' ? native.cpuIsa() : 'not reported by this build';
  const flags = cpuFlags();
  if (process.arch !== 'x64' || !flags) return { ours, ort: 'not reported' };
  const offered = ['avx2', 'fma', 'avx512f', 'avx512bw', 'avx512dq', 'avx512vl', 'avx512_vnni', 'avx512_bf16'].filter((f) =>
    flags.has(f),
  );
  return { ours, ort: `not reported by onnxruntime-node; MLAS picks at run time from what the CPU offers: ${offered.join(' ') || 'none of avx2/avx512'}` };
}

async function main(opts) {
  const loadStart = loadavg();
  const selected = WORKLOADS.filter(
    (w) => !opts.only || opts.only.some((id) => w.id === id || (id.length === 1 && w.id.startsWith(id))),
  );
  // g: all-MiniLM-L6-v2 sentences per second (bench/minilm.js), when its
  // files are in the cache (node scripts/fetch-minilm.js).
  const wantMinilm = !opts.only || opts.only.includes('g');
  const wantLlm = !opts.only || opts.only.includes('l');
  if (!selected.length && !wantMinilm && !wantLlm) {
    throw new Error(`--only ${opts.only}: no such workload (a, a1, a2, b, c, d, e, f, g, h, h1-h4, i, i1-i3, j, k, l)`);
  }
  const ortVersion = require('onnxruntime-node/package.json').version;
  const cpus = os.cpus();
  console.log(`webnn-node vs onnxruntime-node ${ortVersion}, CPU, float32, batch 1`);
  console.log(`machine: ${cpus.length} x ${cpus[0] ? cpus[0].model : 'unknown CPU'}, node ${process.version}`);
  const isa = instructionSets();
  console.log(`instruction set, ours: ${isa.ours}`);
  console.log(`instruction set, ORT:  ${isa.ort}`);
  console.log(`load average at start: ${loadStart}`);
  console.log(
    `timing: median (and fastest) of runs alternating in blocks (each block after a ${SETTLE_MS} ms pause and one untimed run), after ${opts.quick ? 1 : WARMUP} warm-up runs each${opts.quick ? ' (--quick)' : ''}; ` +
      `outputs checked first: max |ours-ort|/max(|ort|, ${REL_FLOOR}, ${RMS_FRACTION}*rms(ort)) < ${MAX_REL_ERR}`,
  );
  console.log('');

  const peaks = measurePeaks(opts);
  opts = { ...opts, peaks: peaks.gemm };

  const { ml } = webnn();
  const contexts = new Map();
  for (const n of opts.threads) contexts.set(n, await ml.createContext({ numThreads: n }));

  const rows = [];
  for (const workload of selected) {
    if (opts.saveModels) {
      const dir = path.join(__dirname, 'models');
      fs.mkdirSync(dir, { recursive: true });
      fs.writeFileSync(path.join(dir, `${workload.id}.onnx`), onnxModel(workload));
    }
    for (const n of opts.threads) {
      const row = await benchWorkload(workload, n, contexts.get(n), opts);
      rows.push(row);
      process.stderr.write(`  ${workload.id} @${n}: ${row.status}\n`);
    }
  }
  // The networks (MobileNetV2, SqueezeNet, ResNet-50) in nhwc and in
  // float16 against their nchw float32 form (ours only: bench/variants.js).
  const variantRows = [];
  const networks = selected.filter((w) => VARIANT_WORKLOADS.includes(w.id));
  if (networks.length) {
    const { benchVariants } = require('./variants');
    for (const network of networks) {
      const runs = opts.runs || (opts.quick ? 3 : network.runs);
      for (const n of opts.threads) {
        const r = await benchVariants(network, n, contexts.get(n), { runs, warmup: opts.quick ? 1 : WARMUP, settleMs: SETTLE_MS });
        variantRows.push(...r);
        process.stderr.write(`  ${network.id} variants @${n}: ${r.map((x) => x.status).join(', ')}\n`);
      }
    }
  }
  for (const context of contexts.values()) context.destroy();
  printResults(rows);
  if (variantRows.length) {
    console.log('');
    console.log('c, j, k: the networks as built in other layouts and float types (ours only; ratio to nchw float32 in the same blocks):');
    printTable(
      ['id', 'variant', 'thr', 'runs', 'ms', 'ratio', 'max rel err vs nchw float32', 'status'],
      variantRows.map((r) => [r.workload, r.variant, String(r.threads), r.runs === undefined ? '-' : String(r.runs), fmtMs(r.ms), fmt(r.ratio, 2), fmtErr(r.max_rel_err), r.status]),
    );
  }

  for (const r of rows.filter((r) => r.ours_us !== undefined)) {
    console.log(`${r.title} @${r.threads} threads: round trip ${r.ours_us.toFixed(1)} us ours, ${r.ort_us.toFixed(1)} us ORT`);
  }

  let minilm;
  let minilmFailed = false;
  if (wantMinilm) {
    const { benchMinilm, printRows } = require('./minilm');
    const r = await benchMinilm({ threads: opts.threads, runs: opts.runs, quick: opts.quick });
    console.log('');
    if (r.unavailable) {
      console.log(`g all-MiniLM-L6-v2: not measured, ${r.unavailable}`);
      minilm = { unavailable: r.unavailable };
    } else {
      console.log('g all-MiniLM-L6-v2 sentence embeddings, sequence length 128:');
      printRows(r.rows);
      minilm = r.rows;
      minilmFailed = r.rows.some((row) => row.status !== 'ok');
    }
  }

  // l: SmolLM2 text generation against llama.cpp (bench/llm.js), when the
  // model can be had; llama.cpp's side when node-llama-cpp is installed.
  let llm;
  let llmFailed = false;
  if (wantLlm) {
    const { benchLlm, printRows, printGemv } = require('./llm');
    const r = await benchLlm({ threads: opts.threads, quick: opts.quick });
    console.log('');
    if (r.unavailable) {
      console.log(`l SmolLM2 text generation: not measured, ${r.unavailable}`);
      llm = { unavailable: r.unavailable };
    } else {
      console.log('l SmolLM2-135M-Instruct (Q4_1) text generation against llama.cpp (ratio = ours / llama.cpp):');
      printRows(r.rows);
      printGemv(r.gemv);
      llm = { rows: r.rows, gemv: r.gemv };
      llmFailed = r.rows.some((row) => row.status.startsWith('FAILED'));
    }
  }

  let mobilenetRss;
  if (selected.some((w) => w.id === 'c')) {
    const threads = Math.max(...opts.threads);
    const runs = opts.quick ? 3 : 20;
    mobilenetRss = { threads, runs };
    for (const side of ['none', 'ours', 'ort']) mobilenetRss[`${side}_mb`] = round(measureRss(side, threads, runs), 4);
    console.log(
      `MobileNetV2 peak RSS, separate processes (${threads} threads, ${runs} runs): ` +
        `ours ${mobilenetRss.ours_mb.toFixed(1)} MB, ORT ${mobilenetRss.ort_mb.toFixed(1)} MB ` +
        `(baseline: node + weights in JS, no runtime: ${mobilenetRss.none_mb.toFixed(1)} MB)`,
    );
  }

  const maxRssMb = process.resourceUsage().maxRSS / 1024;
  const loadEnd = loadavg();
  console.log(`peak RSS of this process (both runtimes, all workloads): ${maxRssMb.toFixed(1)} MB`);
  console.log(`load average at end: ${loadEnd}`);

  const report = {
    bench: 'webnn-node vs onnxruntime-node',
    ort_version: ortVersion,
    cpus: cpus.length,
    isa_ours: isa.ours,
    isa_ort: isa.ort,
    quick: opts.quick,
    load_start: loadStart,
    load_end: loadEnd,
    max_rel_err_limit: MAX_REL_ERR,
    peak_gflops: peaks.all.map((p) => ({ isa: p.isa, threads: p.threads, gflops: round(p.gflops) })),
    results: rows.map((r) => {
      const out = {};
      for (const [k, v] of Object.entries(r)) if (k !== 'failed') out[k] = round(v);
      return out;
    }),
    variants: variantRows.map((r) => {
      const out = {};
      for (const [k, v] of Object.entries(r)) out[k] = round(v);
      return out;
    }),
    max_rss_mb: round(maxRssMb),
    mobilenet_rss_mb: mobilenetRss,
    minilm,
    llm,
  };
  console.log(JSON.stringify(report));
  return rows.some((r) => r.failed) || minilmFailed || llmFailed ? 1 : 0;
}

// The ONNX model of a workload, for bench/nodes.js.
module.exports = { onnxModel };

if (require.main === module) {
  let opts;
  try {
    opts = parseArgs(process.argv.slice(2));
  } catch (e) {
    console.error(e.message);
    process.exit(2);
  }
  const done = opts.rssChild ? rssChild(opts).then(() => 0) : main(opts);
  done.then(
    (code) => {
      process.exitCode = code;
    },
    (e) => {
      console.error(e && e.stack ? e.stack : e);
      process.exitCode = 1;
    },
  );
}
