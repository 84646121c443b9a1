'use strict';
// ChatSession (lib/llm/session.js) on tiny random models written by
// lib/llm/testing/tiny-gguf.js: what a conversation does with the chat
// template, the tokenizer and the cache, with no real model file.

const fs = require('fs');
const os = require('os');
const path = require('path');
const { ml } = require('..');
const { loadLlama } = require('../lib/llm/gguf');
const { ChatSession } = require('../lib/llm/session');
const { writeGguf, tinyLlama } = require('../lib/llm/testing/tiny-gguf');

// float32 numerics: a session and a new one compute the same products, so
// that their greedy answers can be compared token for token ('llama.cpp'
// numerics are checked against llama.cpp on the real model). A context of
// 128 positions in blocks of 16, prefilled in chunks of 8: a conversation
// crosses blocks, and its steps move to graphs over more of them.
const OPTS = { maxContext: 128, blockSize: 16, chunk: 8, numerics: 'float32' };
// Seed 2's greedy answers mix text that the tokenizer gives back as the
// same tokens with bytes that are not UTF-8 (which come back as U+FFFD,
// other tokens), so a next turn reuses part of an answer, not all of it.
const SEED = 2;

let dir;
let context;
let model;
beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'webnn-llm-session-'));
  model = await loadLlama(writeModel(tinyLlama({ seed: SEED })));
  context = await ml.createContext();
});
afterAll(() => {
  if (context) context.destroy();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

let fileCount = 0;
function writeModel(spec) {
  const file = path.join(dir, `m${fileCount++}.gguf`);
  fs.writeFileSync(file, writeGguf(spec));
  return file;
}

/** A session on `m`, destroyed after `body`. */
async function withSession(m, options, body) {
  const chat = await new ChatSession(context, m, options).init();
  try {
    return await body(chat);
  } finally {
    chat.destroy();
  }
}

/** The text of an iteration of pieces. */
async function collect(pieces) {
  let text = '';
  for await (const piece of pieces) text += piece;
  return text;
}

test('a model file that names no BOS or EOS token chats as the same model with them', async () => {
  const spec = tinyLlama({ seed: SEED });
  delete spec.metadata['tokenizer.ggml.bos_token_id'];
  delete spec.metadata['tokenizer.ggml.eos_token_id'];
  const bare = await loadLlama(writeModel(spec));
  expect(bare.bosId).toBeUndefined();
  expect(bare.eosId).toBeUndefined();
  // The end of a turn is still known by its text.
  expect(bare.eogIds).toEqual(model.eogIds);
  // The ChatML template uses neither token, so the answers are the same.
  const options = { maxTokens: 8 };
  const want = await withSession(model, OPTS, (chat) => collect(chat.ask('hello world', options)));
  const got = await withSession(bare, OPTS, (chat) => collect(chat.ask('hello world', options)));
  expect(want.length).toBeGreaterThan(0);
  expect(got).toBe(want);
});
