#!/usr/bin/env node
'use strict';
// Sentence embeddings with all-MiniLM-L6-v2 on the CPU: webnn-node against
// onnxruntime-node on the same weights, in sentences per second at batch 1
// and batch 8, sequence length 128.
//
//   node bench/minilm.js [--threads 1,2] [--runs N] [--quick] [--model DIR]
//
// Both sides come from one description of the model
// (examples/lib/sentence-bert.js): once through MLGraphBuilder, once through
// the benchmark's ONNX writer (bench/onnx.js), which onnxruntime loads from
// memory. Before timing, the two sides' embeddings of the same batch are
// compared (cosine similarity per sentence). Timing alternates the sides in
// blocks, each after a pause and one untimed run, as bench/run.js does and
// for the same reasons (bench/README.md).
//
// The model directory is --model, else $WEBNN_MINILM_DIR, else the cache of
// `node scripts/fetch-minilm.js`. Without the model files the benchmark
// reports itself unavailable and exits 0.
//
// As a module: `require('./minilm').benchMinilm(opts)` resolves to the rows
// (or to { unavailable }) and prints nothing; `printRows(rows)` prints them.

const { now, median, loadavg, fmtMs, printTable, parseArgs: parseBenchArgs, ortSessionOptions } = require('./report');

const SEQ_LENGTH = 128;
const BATCHES = [1, 8];
const WARMUP = 3;
const SETTLE_MS = 100;
// Below this cosine similarity between the two sides, a row is a MISMATCH.
const MIN_COSINE = 0.9999;

// Sentences of ordinary length, padded to SEQ_LENGTH: both runtimes compute
// every position whatever the mask says, so the padding costs both the same.
const SENTENCES = [
  'A man is playing a guitar.',
  'The weather today is sunny and warm.',
  'Neural networks run in the browser and in Node.js through WebNN.',
  'She bought three apples, two pears and a melon at the market on Saturday.',
  'Quantum computers exploit superposition to explore many states at once.',
  'The committee postponed its decision until the next quarterly meeting.',
  'Children were playing football in the park while their parents talked.',
  'How many sentences per second can a small transformer encode on a CPU?',
];

function parseArgs(argv) {
  return parseBenchArgs(
    argv,
    { threads: [1, 2], runs: null, quick: false, model: null },
    {
      '--model': (value, opts) => {
        opts.model = value();
      },
    },
  );
}

async function buildOrt(model, batch, threads) {
  const { InferenceSession, Tensor } = require('onnxruntime-node');
  const { OnnxEmitter } = require('./onnx');
  const { describe } = require('../examples/lib/sentence-bert');
  const emitter = new OnnxEmitter('all-MiniLM-L6-v2');
  describe(emitter, model, { batch, seqLength: SEQ_LENGTH });
  const session = await InferenceSession.create(emitter.encode(), ortSessionOptions(threads));
  let feeds = null;
  return {
    async run(tokens) {
      if (!feeds) {
        feeds = {
          input_ids: new Tensor('int32', tokens.ids, [batch, SEQ_LENGTH]),
          attention_mask: new Tensor('float32', tokens.mask, [batch, SEQ_LENGTH]),
        };
      }
      return (await session.run(feeds)).embeddings.data;
    },
    release: () => session.release(),
  };
}

async function timeAlternating(sides, tokens, warmup, runs) {
  for (let i = 0; i < warmup; i++) for (const impl of Object.values(sides)) await impl.run(tokens);
  const times = Object.fromEntries(Object.keys(sides).map((k) => [k, []]));
  const block = Math.max(2, Math.ceil(runs / 4));
  for (let done = 0; done < runs; done += block) {
    const count = Math.min(block, runs - done);
    for (const [side, impl] of Object.entries(sides)) {
      await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
      await impl.run(tokens); // the block's lead-in, untimed
      for (let i = 0; i < count; i++) {
        const t = now();
        await impl.run(tokens);
        times[side].push(now() - t);
      }
    }
  }
  return Object.fromEntries(Object.entries(times).map(([k, v]) => [k, median(v)]));
}

/** Runs the benchmark; resolves to `{ rows }` or `{ unavailable }`. */
async function benchMinilm(options = {}) {
  const opts = { threads: [1, 2], runs: null, quick: false, model: null, ...options };
  const lib = require('../examples/lib/sentence-bert');
  const dir = opts.model || lib.defaultModelDir();
  if (!lib.isModelDir(dir)) return { unavailable: `no model files in ${dir} (node scripts/fetch-minilm.js fetches them)` };
  const { ml } = require('..');
  const model = lib.loadModel(dir);
  const rows = [];
  for (const batch of BATCHES) {
    const sentences = Array.from({ length: batch }, (_, i) => SENTENCES[i % SENTENCES.length]);
    const tokens = lib.tokenize(model, sentences, SEQ_LENGTH);
    for (const threads of opts.threads) {
      const row = { batch, threads, seq_length: SEQ_LENGTH, status: 'ok' };
      const context = await ml.createContext({ numThreads: threads });
      let ours;
      let ort;
      try {
        ours = await lib.buildEmbedder(model, context, { batch, seqLength: SEQ_LENGTH });
        ort = await buildOrt(model, batch, threads);
        const a = await ours.run(tokens);
        const b = await ort.run(tokens);
        const d = model.dimension;
        row.min_cosine = Math.min(...sentences.map((_, i) => lib.cosine(a.subarray(i * d, (i + 1) * d), b.subarray(i * d, (i + 1) * d))));
        if (!(row.min_cosine >= MIN_COSINE)) row.status = 'MISMATCH';
        const runs = opts.runs || (opts.quick ? 3 : batch === 1 ? 40 : 12);
        const t = await timeAlternating({ ours, ort }, tokens, opts.quick ? 1 : WARMUP, runs);
        Object.assign(row, {
          runs,
          ours_ms: t.ours,
          ort_ms: t.ort,
          ours_per_s: (batch * 1000) / t.ours,
          ort_per_s: (batch * 1000) / t.ort,
          ratio: t.ours / t.ort,
        });
      } catch (e) {
        row.status = `failed: ${e.message}`;
        row.failed = true;
      } finally {
        if (ours) ours.destroy();
        if (ort) await ort.release();
        context.destroy();
      }
      rows.push(row);
    }
  }
  return { rows, loadavg: loadavg() };
}

function printRows(rows) {
  printTable(
    ['batch', 'threads', 'ours ms', 'ORT ms', 'ours sent/s', 'ORT sent/s', 'ours/ORT', 'min cos', 'status'],
    rows.map((r) => [
      String(r.batch),
      String(r.threads),
      fmtMs(r.ours_ms),
      fmtMs(r.ort_ms),
      r.ours_per_s === undefined ? '-' : r.ours_per_s.toFixed(1),
      r.ort_per_s === undefined ? '-' : r.ort_per_s.toFixed(1),
      r.ratio === undefined ? '-' : r.ratio.toFixed(2),
      r.min_cosine === undefined ? '-' : r.min_cosine.toFixed(6),
      r.status,
    ]),
  );
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  console.log(`all-MiniLM-L6-v2 sentence embeddings, CPU, sequence length ${SEQ_LENGTH}: webnn-node vs onnxruntime-node ` +
    `${require('onnxruntime-node/package.json').version}`);
  const result = await benchMinilm(opts);
  if (result.unavailable) {
    console.log(`unavailable: ${result.unavailable}`);
    return;
  }
  printRows(result.rows);
  console.log(`ours/ORT above 1: we are slower; sent/s = batch / median time of one run (tokens in, embeddings out). loadavg: ${result.loadavg}`);
  if (result.rows.some((r) => r.failed)) process.exitCode = 1;
}

if (require.main === module) {
  main().catch((e) => {
    console.error(e);
    process.exit(1);
  });
}

module.exports = { benchMinilm, printRows, SEQ_LENGTH, BATCHES };
