#!/usr/bin/env node
'use strict';
// Sentence embeddings with all-MiniLM-L6-v2 (or another BERT model in the
// sentence-transformers layout), built with MLGraphBuilder as one WebNN
// graph: token embeddings, 6 encoder layers, mean pooling and L2
// normalisation. Prints the cosine similarity of every pair of sentences.
//
//   node examples/embeddings.js [MODEL_DIR] [--gpu] [--json FILE] [sentences...]
//
// MODEL_DIR is a directory of the model's files (config.json,
// model.safetensors, tokenizer.json, ...), from its hub page or from
// `node scripts/fetch-minilm.js`, which prints the directory it fills.
// Without it, $WEBNN_MINILM_DIR or that script's cache is used.
// --gpu runs on the GPU backend (the CPU is the default); --json FILE
// writes {sentence: embedding} for other programs.

const fs = require('fs');
const lib = require('./lib/sentence-bert');
const { loadModel, isModelDir, embed, cosine, defaultModelDir } = lib;

const DEFAULT_SENTENCES = [
  'A man is playing a guitar.',
  'Someone strums a guitar on a stage.',
  'The weather today is sunny and warm.',
  'It is a bright, hot day outside.',
  'WebNN runs neural networks in Node.js.',
];

function parseArgs(argv) {
  const opts = { dir: null, gpu: false, json: null, sentences: [] };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === '--gpu') opts.gpu = true;
    else if (arg === '--json') {
      if (i + 1 >= argv.length) throw new Error('--json needs a file name');
      opts.json = argv[++i];
    } else if (arg === '--help' || arg === '-h') {
      opts.help = true;
    } else if (opts.dir === null && opts.sentences.length === 0 && fs.existsSync(arg) && fs.statSync(arg).isDirectory()) {
      opts.dir = arg;
    } else {
      opts.sentences.push(arg);
    }
  }
  return opts;
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  if (opts.help) {
    console.log('usage: node examples/embeddings.js [MODEL_DIR] [--gpu] [--json FILE] [sentences...]');
    return;
  }
  const dir = opts.dir || defaultModelDir();
  if (!isModelDir(dir)) {
    console.error(`${dir} does not hold the model's files; get them with: node scripts/fetch-minilm.js`);
    process.exitCode = 1;
    return;
  }
  const sentences = opts.sentences.length ? opts.sentences : DEFAULT_SENTENCES;
  const { ml } = require('..');

  const t0 = performance.now();
  const model = loadModel(dir);
  const t1 = performance.now();
  const context = await ml.createContext({ deviceType: opts.gpu ? 'gpu' : 'cpu' });
  const embeddings = await embed(model, context, sentences);
  const t2 = performance.now();
  context.destroy();

  console.log(`${dir}: ${lib.summary(model)}; up to ${model.maxSeqLength} tokens`);
  console.log(`${opts.gpu ? 'GPU' : 'CPU'} backend: ${sentences.length} sentences, model read in ${(t1 - t0).toFixed(0)} ms, ` +
    `graph built and run in ${(t2 - t1).toFixed(0)} ms`);
  console.log('\ncosine similarity:');
  const label = (s, i) => `[${i}] ${s.length > 60 ? `${s.slice(0, 57)}...` : s}`;
  sentences.forEach((s, i) => console.log(label(s, i)));
  console.log(`\n      ${sentences.map((_, j) => `[${j}]`.padStart(7)).join('')}`);
  sentences.forEach((_, i) => {
    const row = sentences.map((__, j) => cosine(embeddings[i], embeddings[j]).toFixed(3).padStart(7)).join('');
    console.log(`${`[${i}]`.padStart(6)}${row}`);
  });

  if (opts.json) {
    const out = Object.fromEntries(sentences.map((s, i) => [s, Array.from(embeddings[i])]));
    fs.writeFileSync(opts.json, JSON.stringify(out));
    console.log(`\nwrote ${sentences.length} embeddings of ${model.dimension} numbers to ${opts.json}`);
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
