#!/usr/bin/env node
'use strict';
// Where one workload's time goes on each side, node by node: our CPU
// backend's per-node profile (WEBNN_CPU_PROFILE) beside onnxruntime-node's
// own (enableProfiling), for the same description, weights and input as
// bench/run.js. See bench/README.md, "Where the time goes".
//
//   node bench/nodes.js <workload id> [--threads N] [--runs N] [--top N]
//
// Our side runs in a child process with WEBNN_CPU_PROFILE=1, whose table
// comes out on its stderr when its context is destroyed; it also times the
// same dispatches back to back (no writes or reads between them), so that
// the sum of the nodes can be set against the whole graph's time.
// onnxruntime's side runs here and writes its trace to a temporary folder.

const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');
const { parseArgs: parseBenchArgs, ortSessionOptions, now, median, fmtMs } = require('./report');
const { WORKLOADS, WEIGHT_SEED, INPUT_SEED, makeRandom, WebnnEmitter } = require('./workloads');

function parseArgs(argv) {
  const opts = parseBenchArgs(
    argv.slice(1),
    { threads: [1], runs: null, top: 20, child: false },
    {
      '--top': (value, o, positiveInt) => {
        o.top = positiveInt();
      },
      '--child': (value, o) => {
        o.child = true;
      },
    },
  );
  const workload = WORKLOADS.find((w) => w.id === argv[0]);
  if (!workload) throw new Error(`usage: node bench/nodes.js <${WORKLOADS.map((w) => w.id).join('|')}> [--threads N] [--runs N] [--top N]`);
  if (workload.form === 'compute' || !workload.build) throw new Error(`${workload.id}: not a graph of nodes to profile`);
  if (opts.threads.length !== 1) throw new Error('--threads: one count');
  return { ...opts, threads: opts.threads[0], runs: opts.runs || Math.max(20, workload.runs || 20), workload };
}

// Our side, in the child: the dispatches profiled one inference at a time
// (as the bench runs them), then the same number back to back.
async function oursChild({ workload, threads, runs }) {
  const { ml, MLGraphBuilder } = require('..');
  const context = await ml.createContext({ numThreads: threads });
  const builder = new MLGraphBuilder(context);
  const emitter = new WebnnEmitter(builder);
  workload.build(emitter, makeRandom(WEIGHT_SEED));
  const graph = await builder.build(emitter.outputs);
  const data = workload.inputData(makeRandom(INPUT_SEED));
  const inputs = {};
  for (const { name, shape } of workload.inputs) {
    inputs[name] = await context.createTensor({ dataType: 'float32', shape, writable: true });
    context.writeTensor(inputs[name], data[name]);
  }
  const outputs = {};
  for (const { name, shape } of workload.outputs) outputs[name] = await context.createTensor({ dataType: 'float32', shape, readable: true });
  const first = Object.values(outputs)[0];
  for (let i = 0; i < runs; i++) {
    context.dispatch(graph, inputs, outputs);
    await context.readTensor(first);
  }
  // Back to back: the graph's own time, without the round trips.
  const times = [];
  for (let i = 0; i < 5; i++) {
    const t0 = now();
    for (let j = 0; j < 10; j++) context.dispatch(graph, inputs, outputs);
    await context.readTensor(first);
    times.push((now() - t0) / 10);
  }
  process.stdout.write(JSON.stringify({ chained: median(times) }) + '\n');
  context.destroy();
}

// Lines of our profile table: "share calls mean us fastest us <node> <description>".
function parseOurs(stderr) {
  const nodes = [];
  for (const line of stderr.split('\n')) {
    const m = /^\s*[\d.]+%\s+(\d+)\s+([\d.]+) us\s+([\d.]+) us\s+(\d+) (\S+)(.*)$/.exec(line);
    if (m) nodes.push({ calls: +m[1], mean: +m[2], best: +m[3], index: +m[4], op: m[5], what: `${m[5]}${m[6]}` });
  }
  return nodes;
}

// onnxruntime's trace: per node, the fastest of its kernel times.
async function ortNodes({ workload, threads, runs }) {
  const ort = require('onnxruntime-node');
  const { onnxModel } = require('./run');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'webnn-bench-'));
  try {
    const session = await ort.InferenceSession.create(onnxModel(workload), {
      ...ortSessionOptions(threads),
      enableProfiling: true,
      profileFilePrefix: path.join(dir, 'ort'),
    });
    const data = workload.inputData(makeRandom(INPUT_SEED));
    const feeds = {};
    for (const { name, shape } of workload.inputs) feeds[name] = new ort.Tensor('float32', data[name], shape);
    for (let i = 0; i < runs; i++) await session.run(feeds);
    if (session.endProfiling) session.endProfiling();
    await session.release();
    const file = fs.readdirSync(dir).find((f) => f.endsWith('.json'));
    if (!file) throw new Error('onnxruntime wrote no profile');
    const byNode = new Map();
    for (const e of JSON.parse(fs.readFileSync(path.join(dir, file), 'utf8'))) {
      if (e.cat !== 'Node' || !e.name.endsWith('_kernel_time')) continue;
      const name = e.name.slice(0, -'_kernel_time'.length);
      const n = byNode.get(name) || { op: e.args.op_name, what: `${e.args.op_name} ${JSON.stringify(e.args.output_type_shape || '')}`, best: Infinity, sum: 0, calls: 0 };
      n.best = Math.min(n.best, e.dur);
      n.sum += e.dur;
      n.calls += 1;
      byNode.set(name, n);
    }
    return [...byNode.values()].map((n) => ({ ...n, mean: n.sum / n.calls }));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

const sum = (nodes, key) => nodes.reduce((s, n) => s + n[key], 0);

function perOp(nodes) {
  const ops = new Map();
  for (const n of nodes) ops.set(n.op, (ops.get(n.op) || 0) + n.best);
  return [...ops.entries()].sort((a, b) => b[1] - a[1]);
}

function printSide(title, nodes, top) {
  console.log(`\n${title}: ${nodes.length} nodes, the ${Math.min(top, nodes.length)} slowest (fastest run, mean run, us)`);
  for (const n of [...nodes].sort((a, b) => b.best - a.best).slice(0, top)) {
    console.log(`  ${n.best.toFixed(1).padStart(8)} ${n.mean.toFixed(1).padStart(8)}  ${n.what.slice(0, 110)}`);
  }
  console.log(`  per operator (fastest runs): ${perOp(nodes).map(([op, us]) => `${op} ${us.toFixed(0)}`).join(', ')}`);
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  if (opts.child) return oursChild(opts);
  const args = [__filename, opts.workload.id, '--threads', String(opts.threads), '--runs', String(opts.runs), '--child'];
  const child = spawnSync(process.execPath, args, {
    env: { ...process.env, WEBNN_CPU_PROFILE: '1' },
    encoding: 'utf8',
    maxBuffer: 64 << 20,
  });
  if (child.status !== 0) throw new Error(`our side failed (exit ${child.status}):\n${child.stderr}`);
  const ours = parseOurs(child.stderr);
  const { chained } = JSON.parse(child.stdout.trim().split('\n').pop());
  const theirs = await ortNodes(opts);
  const { workload, threads, runs } = opts;
  console.log(`${workload.id} ${workload.title}, ${threads} thread(s), ${runs} profiled runs per side`);
  printSide('webnn-node', ours, opts.top);
  printSide('onnxruntime-node', theirs, opts.top);
  console.log('\nsums of the nodes, ms          fastest runs   mean runs');
  console.log(`  webnn-node                   ${fmtMs(sum(ours, 'best') / 1000).padStart(12)} ${fmtMs(sum(ours, 'mean') / 1000).padStart(11)}`);
  console.log(`  onnxruntime-node             ${fmtMs(sum(theirs, 'best') / 1000).padStart(12)} ${fmtMs(sum(theirs, 'mean') / 1000).padStart(11)}`);
  console.log(`webnn-node, the whole graph dispatched back to back: ${fmtMs(chained)} ms per run`);
}

main().catch((e) => {
  console.error(e.message);
  process.exitCode = 1;
});
