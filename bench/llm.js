#!/usr/bin/env node
'use strict';
// Text generation with SmolLM2-135M-Instruct (the Q4_1 GGUF file of
// scripts/fetch-llm.js) on the CPU: webnn-node (lib/llm, standard WebNN
// graphs) against llama.cpp (node-llama-cpp) on the same file, in tokens
// per second and peak RSS.
//
//   node bench/llm.js [--threads 1,2] [--quick] [--model FILE] [--random] [--gpu]
//
// --random runs a model of SmolLM2-135M's shapes with random weights (the
// same tensor types, 30 layers, a vocabulary of 49,152), written to the
// temporary directory: tokens/s do not depend on the weights' values, so
// it measures a machine that cannot fetch the file. --gpu runs our side
// on the GPU backend (deviceType 'gpu', float32 numerics as the chat
// example's --gpu; the thread count then only labels the row), with the
// llama.cpp side not measured: its CPU figures
// are no comparison for a GPU, and its GPU builds are not installed.
//
// Two scenarios, each at every thread count: a 128-token prompt then 128
// tokens generated greedily, and a 1,500-token prompt (a long
// conversation) then 32 generated. Each side runs in a child process of its
// own, so its peak RSS is its own; each scenario runs twice there, the
// first untimed (our graphs over more cache blocks are built on first use,
// llama.cpp sizes its buffers), then timed. Prompts are the same token ids
// on both sides.
//
// node-llama-cpp is not a dependency of the project (its install brings
// several hundred MB of GPU builds); when it is not installed the llama.cpp
// side is reported as not measured, with the command that installs it. The
// model comes from --model, $WEBNN_LLM_MODEL, or the project's cache;
// without it the benchmark reports itself unavailable.
//
// As a module: `require('./llm').benchLlm(opts)` resolves to the rows (or
// to { unavailable }) and prints nothing; `printRows(rows)` prints them.

const path = require('path');
const { spawnSync } = require('child_process');
const { fmt, printTable, parseArgs: parseBenchArgs, peakRssMb } = require('./report');

const ROOT = path.join(__dirname, '..');
const SCENARIOS = [
  { name: 'chat', prompt: 128, generate: 128 },
  { name: 'long', prompt: 1500, generate: 32 },
];
const CONTEXT = 2048;
const INSTALL = 'NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install --no-save node-llama-cpp@3.21.1';

function parseArgs(argv) {
  return parseBenchArgs(
    argv,
    { threads: [1, 2], runs: null, quick: false, model: null, child: null, random: false, gpu: false },
    {
      '--random': (_value, opts) => {
        opts.random = true;
      },
      '--gpu': (_value, opts) => {
        opts.gpu = true;
      },
      '--model': (value, opts) => {
        opts.model = value();
      },
      '--child': (value, opts) => {
        opts.child = value();
      },
    },
  );
}

/** Token ids of an ordinary range (no special tokens), the same on both sides. */
function promptIds(n) {
  return Array.from({ length: n }, (_, i) => 300 + ((i * 37) % 20000));
}

/** A model of SmolLM2-135M-Instruct's shapes and types with random weights (see --random). */
function randomModel() {
  const fs = require('fs');
  const os = require('os');
  const { writeGguf, tinyLlama } = require(path.join(ROOT, 'lib/llm/testing/tiny-gguf'));
  const file = path.join(os.tmpdir(), `webnn-node-bench-smollm2-shapes-${process.pid}.gguf`);
  const spec = tinyLlama({
    nLayer: 30, nEmbd: 576, nHead: 9, nHeadKv: 3, nFF: 1536, nCtx: 8192, ropeBase: 100000,
    nVocab: 49152, name: 'random weights of SmolLM2-135M shapes',
  });
  fs.writeFileSync(file, writeGguf(spec));
  return { file, temporary: true };
}

function modelFile(given, random) {
  if (random) return randomModel();
  if (given) return { file: given };
  if (process.env.WEBNN_LLM_MODEL) return { file: process.env.WEBNN_LLM_MODEL };
  const r = spawnSync(process.execPath, [path.join(ROOT, 'scripts', 'fetch-llm.js')], { encoding: 'utf8' });
  if (r.status === 0) return { file: r.stdout.trim().split('\n').pop() };
  return { unavailable: (r.stderr || '').trim().split('\n').pop() || `fetch-llm exited ${r.status}` };
}

// One side's runs, in this (child) process: prints one JSON line.
async function child(side, file, threads, quick, gpu) {
  const scenarios = quick ? SCENARIOS.map((s) => ({ ...s, prompt: Math.min(s.prompt, 200), generate: 8 })) : SCENARIOS;
  const out = [];
  if (side === 'ours') {
    const { ml } = require(ROOT);
    const { loadLlama } = require(path.join(ROOT, 'lib/llm/gguf'));
    const { LlamaRunner } = require(path.join(ROOT, 'lib/llm/runner'));
    const { argmax } = require(path.join(ROOT, 'lib/llm/sampling'));
    const model = await loadLlama(file);
    const context = await ml.createContext(gpu ? { deviceType: 'gpu' } : { deviceType: 'cpu', numThreads: threads });
    // On the GPU, float32 numerics, as the chat example uses there.
    const runner = new LlamaRunner(context, model, { maxContext: CONTEXT, numerics: gpu ? 'float32' : 'llama.cpp' });
    await runner.init();
    for (const s of scenarios) {
      let timed;
      for (let pass = 0; pass < 2; pass++) {
        runner.reset();
        const t0 = performance.now();
        let logits = await runner.forward(promptIds(s.prompt));
        const t1 = performance.now();
        for (let i = 1; i < s.generate; i++) logits = await runner.forward([argmax(logits)]);
        const t2 = performance.now();
        timed = { prompt_ms: t1 - t0, generate_ms: t2 - t1 };
      }
      out.push({ scenario: s.name, prompt: s.prompt, generate: s.generate, ...timed });
    }
    runner.destroy();
    context.destroy();
  } else {
    const { getLlama } = await import('node-llama-cpp');
    const llama = await getLlama({ gpu: false, build: 'never' });
    const model = await llama.loadModel({ modelPath: file });
    const context = await model.createContext({ contextSize: CONTEXT, threads, batchSize: 512 });
    const sequence = context.getSequence();
    for (const s of scenarios) {
      let timed;
      for (let pass = 0; pass < 2; pass++) {
        await sequence.clearHistory();
        const t0 = performance.now();
        let t1 = 0;
        let n = 0;
        // The first token out marks the end of the prompt; the others are
        // generated one step each (greedy).
        for await (const token of sequence.evaluate(promptIds(s.prompt), { temperature: 0 })) {
          void token;
          if (n === 0) t1 = performance.now();
          if (++n >= s.generate) break;
        }
        const t2 = performance.now();
        timed = { prompt_ms: t1 - t0, generate_ms: t2 - t1 };
      }
      out.push({ scenario: s.name, prompt: s.prompt, generate: s.generate, ...timed });
    }
    await context.dispose();
    await model.dispose();
  }
  // The child's own peak: `npm run bench` starts it from a process of
  // more than a gigabyte, whose peak getrusage would report.
  console.log(JSON.stringify({ side, threads, rows: out, max_rss_mb: peakRssMb() }));
}

function runChild(side, file, threads, quick, gpu) {
  const args = [__filename, '--child', side, '--model', file, '--threads', String(threads)];
  if (quick) args.push('--quick');
  if (gpu) args.push('--gpu');
  const r = spawnSync(process.execPath, args, { encoding: 'utf8', timeout: 30 * 60 * 1000 });
  const line = (r.stdout || '').trim().split('\n').pop();
  try {
    return JSON.parse(line);
  } catch {
    return { failed: `${side} exited ${r.status}${r.signal ? ` (${r.signal})` : ''}: ${(r.stderr || '').trim().split('\n').slice(-3).join(' / ')}` };
  }
}

/** The rows of every scenario and thread count (see the file comment). */
async function benchLlm({ threads = [1, 2], quick = false, model: given = null, random = false, gpu = false } = {}) {
  const m = modelFile(given, random);
  if (m.unavailable) return { unavailable: m.unavailable };
  try {
    return await benchModel(m.file, threads, quick, gpu);
  } finally {
    if (m.temporary) require('fs').rmSync(m.file, { force: true });
  }
}

/** benchLlm's rows on the GGUF file `file`. */
async function benchModel(file, threads, quick, gpu) {
  let llamaCpp = null;
  try {
    require.resolve('node-llama-cpp', { paths: [ROOT] });
  } catch {
    llamaCpp = `node-llama-cpp is not installed (${INSTALL})`;
  }
  if (gpu) llamaCpp = 'our side ran on the GPU (--gpu)';
  const rows = [];
  for (const t of threads) {
    const ours = runChild('ours', file, t, quick, gpu);
    const ref = llamaCpp ? { failed: llamaCpp } : runChild('llama.cpp', file, t, quick, gpu);
    for (const s of SCENARIOS) {
      const o = ours.rows && ours.rows.find((r) => r.scenario === s.name);
      const l = ref.rows && ref.rows.find((r) => r.scenario === s.name);
      const rate = (r, k, n) => (r ? (r[n] / r[k]) * 1000 : undefined);
      const row = {
        scenario: s.name,
        threads: t,
        prompt: o ? o.prompt : s.prompt,
        generate: o ? o.generate : s.generate,
        ours_prompt_tps: rate(o, 'prompt_ms', 'prompt'),
        ours_gen_tps: o ? ((o.generate - 1) / o.generate_ms) * 1000 : undefined,
        llama_prompt_tps: rate(l, 'prompt_ms', 'prompt'),
        llama_gen_tps: l ? ((l.generate - 1) / l.generate_ms) * 1000 : undefined,
        ours_rss_mb: ours.max_rss_mb,
        llama_rss_mb: ref.max_rss_mb,
        status: ours.failed ? `FAILED: ${ours.failed}` : ref.failed ? `llama.cpp not measured: ${ref.failed}` : 'ok',
      };
      row.prompt_ratio = row.llama_prompt_tps ? row.ours_prompt_tps / row.llama_prompt_tps : undefined;
      row.gen_ratio = row.llama_gen_tps ? row.ours_gen_tps / row.llama_gen_tps : undefined;
      rows.push(row);
    }
  }
  // The read-bandwidth figure is the CPU's: a GPU run has none.
  return { rows, gemv: gpu ? null : measureGemv(file, threads, quick) };
}

/**
 * The one-row quantized product's bytes of weights (codes and scales)
 * read per second, over as many bytes as the model file holds, against a
 * read loop's over the same bytes, in this process: how close decoding
 * is to the memory's limit (a step reads every weight once).
 */
function measureGemv(file, threads, quick) {
  const native = require(path.join(ROOT, 'binding.js')).load();
  if (typeof native.cpuQgemv !== 'function') return null;
  const bytes = require('fs').statSync(file).size;
  return threads.map((t) => native.cpuQgemv(t, quick ? 30 : 200, bytes));
}

function printGemv(gemv) {
  if (!gemv) return;
  console.log(`quantized matrix-vector product (${gemv[0].isa}; 4-bit blocks, one row; ${(gemv[0].bytes / 1e6).toFixed(0)} MB of weights, the file's size, streamed as a step does):`);
  for (const g of gemv) {
    console.log(`  ${g.threads} thr: ${g.weightsGbps.toFixed(1)} GB/s of weights read, ${((100 * g.weightsGbps) / g.readGbps).toFixed(0)}% of a read loop over the same bytes (${g.readGbps.toFixed(1)} GB/s)`);
  }
}

function printRows(rows) {
  printTable(
    ['scenario', 'thr', 'prompt', 'gen', 'ours prompt t/s', 'llama.cpp', 'ratio', 'ours gen t/s', 'llama.cpp', 'ratio', 'RSS MB ours', 'llama.cpp', 'status'],
    rows.map((r) => [
      r.scenario,
      String(r.threads),
      String(r.prompt),
      String(r.generate),
      fmt(r.ours_prompt_tps, 1),
      fmt(r.llama_prompt_tps, 1),
      fmt(r.prompt_ratio, 2),
      fmt(r.ours_gen_tps, 1),
      fmt(r.llama_gen_tps, 1),
      fmt(r.gen_ratio, 2),
      fmt(r.ours_rss_mb, 0),
      fmt(r.llama_rss_mb, 0),
      r.status,
    ]),
  );
}

module.exports = { benchLlm, printRows, printGemv };

if (require.main === module) {
  let opts;
  try {
    opts = parseArgs(process.argv.slice(2));
  } catch (e) {
    console.error(e.message);
    process.exit(2);
  }
  const done = opts.child
    ? child(opts.child, opts.model, opts.threads[0], opts.quick, opts.gpu).then(() => 0)
    : benchLlm(opts).then((r) => {
      if (r.unavailable) {
        console.log(`l SmolLM2 text generation: not measured, ${r.unavailable}`);
        return 0;
      }
      const what = opts.random ? 'random weights of SmolLM2-135M-Instruct\'s shapes (Q4_1)' : 'SmolLM2-135M-Instruct (Q4_1)';
      const where = opts.gpu ? ', ours on the GPU backend (the threads column only labels the run)' : '';
      console.log(`l ${what} text generation${where}, ratio = ours / llama.cpp (higher is better for us):`);
      printRows(r.rows);
      printGemv(r.gemv);
      console.log(JSON.stringify({ bench: 'webnn-node vs llama.cpp (node-llama-cpp)', rows: r.rows, gemv: r.gemv }));
      return r.rows.some((row) => row.status.startsWith('FAILED')) ? 1 : 0;
    });
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
