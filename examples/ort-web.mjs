#!/usr/bin/env node
// onnxruntime-web's WebNN execution provider on webnn-node (docs/ort-web.md).
//
//   node examples/ort-web.mjs [model.onnx] [dimension=size ...]
//
// Runs an ONNX model with ORT's WebNN execution provider on webnn-node's CPU
// backend, then with ORT's own wasm provider, on the same random inputs,
// and prints how far apart their outputs are and how long a run takes on
// each. WebNN needs static shapes: give a size to each symbolic dimension
// (`batch_size=1`). Without a model it runs a small classifier written in
// memory (the one the tests use).
//
// When ORT's WebNN provider leaves some of the model's nodes to ORT's CPU
// provider (in wasm), ORT warns on stderr with the count ("number of nodes
// supported by WebNN").

import v8 from 'node:v8';
import fs from 'node:fs';
import { createRequire } from 'node:module';

// Before ORT compiles its wasm (at the first session): keep V8 to its
// baseline compiler. Otherwise V8's optimizing tier-up of that large module
// can block the event loop for minutes on a small machine. The
// `node --liftoff-only` command-line flag does the same, more formally.
v8.setFlagsFromString('--liftoff-only');

// navigator.ml and the ML* interfaces as globals (navigator too, on Node 20).
import 'webnn-node/global';

// The browser build of ORT, which has the WebNN provider: 'onnxruntime-web'
// itself resolves to a Node build without it.
const ort = await import('onnxruntime-web/all');
// One thread: ORT's worker threads would fetch() a file: URL, which
// Node's fetch does not support. WebNN partitions use webnn-node's threads.
ort.env.wasm.numThreads = 1;

const [file, ...dims] = process.argv.slice(2).filter((a) => a !== '--');
const freeDimensionOverrides = Object.fromEntries(dims.map((d) => d.split('=')).map(([k, v]) => [k, Number(v)]));
const model = file ? fs.readFileSync(file) : builtIn();

// Our own context, passed to ORT: ORT then creates none (its own creation
// path tests `instanceof GPUDevice`, which Node does not define).
const context = await navigator.ml.createContext({ deviceType: 'cpu' });
const webnn = await ort.InferenceSession.create(model, {
  executionProviders: [{ name: 'webnn', context, deviceType: 'cpu' }],
  freeDimensionOverrides,
});
const wasm = await ort.InferenceSession.create(model, { executionProviders: ['wasm'], freeDimensionOverrides });

const feeds = Object.fromEntries(webnn.inputMetadata.map((m) => [m.name, randomTensor(m)]));
const [got, webnnMs] = await timed(webnn, feeds);
const [want, wasmMs] = await timed(wasm, feeds);

for (const name of webnn.outputNames) {
  const a = got[name].data;
  const b = want[name].data;
  let worst = 0;
  for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(Number(a[i]) - Number(b[i])));
  console.log(`${name} [${got[name].dims}] ${got[name].type}: largest difference from the wasm EP ${worst}`);
}
console.log(`one run: WebNN EP ${webnnMs.toFixed(2)} ms, wasm EP ${wasmMs.toFixed(2)} ms (median of 5)`);
await webnn.release();
await wasm.release();

/** Runs `session` five times; its outputs and the median time. */
async function timed(session, inputs) {
  const times = [];
  let out;
  for (let i = 0; i < 5; i++) {
    const t = performance.now();
    out = await session.run(inputs);
    times.push(performance.now() - t);
  }
  return [out, times.sort((x, y) => x - y)[2]];
}

/** A tensor of random values for an input's metadata. */
function randomTensor({ name, type, shape }) {
  const dimsOf = shape.map((d) => {
    const n = typeof d === 'number' ? d : freeDimensionOverrides[d];
    if (!(n > 0)) throw new Error(`input ${name}: give dimension ${d} a size (${d}=1)`);
    return n;
  });
  const n = dimsOf.reduce((x, y) => x * y, 1);
  const make = {
    float32: () => Float32Array.from({ length: n }, () => Math.random() * 2 - 1),
    // float16 as bit patterns (Node has no Float16Array before v24): values in [-1, 1).
    float16: () => Uint16Array.from({ length: n }, () => (Math.random() < 0.5 ? 0x8000 : 0) | (0x3800 + ((Math.random() * 0x800) | 0))),
    int64: () => BigInt64Array.from({ length: n }, () => BigInt((Math.random() * 10) | 0)),
    int32: () => Int32Array.from({ length: n }, () => (Math.random() * 10) | 0),
    bool: () => Uint8Array.from({ length: n }, () => (Math.random() < 0.5 ? 1 : 0)),
  }[type];
  if (!make) throw new Error(`input ${name}: no random data for type ${type}`);
  return new ort.Tensor(type, make(), dimsOf);
}

/** The tests' small convolutional classifier, written in memory. */
function builtIn() {
  const require = createRequire(import.meta.url);
  const { models } = require('../__tests__/ort-web/models.js');
  return models().find((m) => m.name === 'conv-chain').bytes;
}
