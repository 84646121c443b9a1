#!/usr/bin/env node
// The quick-start demo.
//
// With the all-MiniLM-L6-v2 model's files at hand ($WEBNN_MINILM_DIR, or
// the cache `node scripts/fetch-minilm.js` fills), it runs that real,
// pretrained model: sentence embeddings from a 6-layer BERT encoder built
// with MLGraphBuilder (examples/embeddings.js is the full example), and
// prints how similar a few sentences are.
//
// Without them (or with --cnn) it runs a small convolutional classifier for
// 28x28 grey images whose weights are fixed pseudo-random numbers (the same
// on every run): it shows the API and the path a model takes, and its
// "classification" means nothing.
//
//   node examples/demo.js [--gpu] [--cnn]
//
// The CNN:
//   input 1x1x28x28
//   conv2d 8x1x3x3, pad 1, bias, relu      -> 1x8x28x28
//   maxPool2d 2x2 stride 2                 -> 1x8x14x14
//   conv2d 16x8x3x3, pad 1, bias, clamp 0..6 -> 1x16x14x14
//   averagePool2d (global)                 -> 1x16x1x1
//   reshape                                -> 1x16
//   gemm 16 -> 10 (+ bias), softmax        -> 1x10
'use strict';
const { ml, MLGraphBuilder } = require('..');

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

async function cnn(deviceType) {
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
  console.log(`webnn-node demo on the ${deviceType} backend (accelerated: ${context.accelerated})`);
  console.log('ran: a small CNN with RANDOM weights (a fixed seed), not a trained model: the classes mean nothing.');
  console.log('(for a real model: node scripts/fetch-minilm.js, then run this demo again)');
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
  const lib = require('./lib/sentence-bert');
  const sentences = [
    'A man is playing a guitar.',
    'Someone strums a guitar on a stage.',
    'The weather today is sunny and warm.',
    'It is a bright, hot day outside.',
  ];
  const t0 = performance.now();
  const model = lib.loadModel(dir);
  const context = await ml.createContext({ deviceType });
  const tokens = lib.tokenize(model, sentences);
  const embedder = await lib.buildEmbedder(model, context, { batch: sentences.length, seqLength: tokens.seqLength });
  const built = performance.now();
  const first = performance.now();
  const flat = await embedder.run(tokens);
  const firstMs = performance.now() - first;
  const times = [];
  for (let i = 0; i < 10; i++) {
    const s = performance.now();
    await embedder.run(tokens);
    times.push(performance.now() - s);
  }
  times.sort((a, b) => a - b);
  embedder.destroy();
  context.destroy();

  const e = sentences.map((_, i) => flat.subarray(i * model.dimension, (i + 1) * model.dimension));
  console.log(`webnn-node demo on the ${deviceType} backend (accelerated: ${context.accelerated})`);
  console.log(`ran: all-MiniLM-L6-v2, a pretrained sentence-embedding model (${lib.summary(model)}) from ${dir},`);
  console.log(`     as one WebNN graph: ${sentences.length} sentences of up to ${tokens.seqLength} tokens -> ${model.dimension}-number embeddings`);
  console.log('cosine similarity of each pair:');
  sentences.forEach((s, i) => console.log(`  [${i}] ${s}`));
  for (let i = 0; i < sentences.length; i++) {
    for (let j = i + 1; j < sentences.length; j++) console.log(`  [${i}]-[${j}] ${lib.cosine(e[i], e[j]).toFixed(3)}`);
  }
  console.log(`model read + context + build: ${(built - t0).toFixed(0)} ms`);
  console.log(`first inference: ${firstMs.toFixed(1)} ms`);
  console.log(`median of 10 inferences: ${times[5].toFixed(1)} ms (write + dispatch + read, ${sentences.length} sentences)`);
}

async function main() {
  const deviceType = process.argv.includes('--gpu') ? 'gpu' : 'cpu';
  const lib = require('./lib/sentence-bert');
  const dir = lib.defaultModelDir();
  let why = null;
  if (process.argv.includes('--cnn')) why = '--cnn given';
  else if (!lib.isModelDir(dir)) why = `no all-MiniLM-L6-v2 files in ${dir}`;
  else {
    try {
      require.resolve('@huggingface/tokenizers');
    } catch {
      why = 'the tokenizer library @huggingface/tokenizers is not installed (npm install)';
    }
  }
  if (why === null) {
    await minilm(deviceType, dir);
  } else {
    console.log(`(${why})`);
    await cnn(deviceType);
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
