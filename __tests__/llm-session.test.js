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
const { LlamaRunner } = require('../lib/llm/runner');
const { renderChat } = require('../lib/llm/chat-template');
const { writeGguf, tinyLlama } = require('../lib/llm/testing/tiny-gguf');

// float32 numerics: a session and a new one compute the same products, so
// that their greedy answers can be compared token for token ('llama.cpp'
// numerics are checked against llama.cpp on the real model). The tiny
// model's whole context, 256 positions, in blocks of 16 prefilled in
// chunks of 8: a conversation crosses blocks, and its steps move to the
// graphs over 2, 4, 8 and 16 of them.
const OPTS = { maxContext: 256, blockSize: 16, chunk: 8, numerics: 'float32' };
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

/** The prompt's tokens for `messages`, rendered as generate() renders them. */
function promptTokens(messages) {
  const prompt = renderChat(model.chatTemplate, messages, {
    addGenerationPrompt: true,
    bosToken: model.tokenizer.tokenToPiece(model.bosId),
    eosToken: model.tokenizer.tokenToPiece(model.eosId),
  });
  return model.tokenizer.encode(prompt, { special: true });
}

/**
 * How many of `tokens` a cache holding `cached` keeps: their common prefix,
 * short of the last token (whose logits the turn needs).
 */
function reusable(cached, tokens) {
  let n = 0;
  while (n < Math.min(cached.length, tokens.length - 1) && cached[n] === tokens[n]) n++;
  return n;
}

/**
 * What a new session answers to `messages` with `options`: the reference
 * that a session reusing its cache across turns must reproduce exactly.
 */
function freshAnswer(messages, options) {
  return withSession(model, OPTS, async (chat) => {
    const text = await collect(chat.generate(messages, options));
    expect(chat.lastStats.cachedTokens).toBe(0);
    return { text, generatedTokens: chat.lastStats.generatedTokens };
  });
}

/**
 * The cache itself is exact: the logits of one more token on it equal
 * those of a new runner given the whole sequence at once. Not bit for bit:
 * the two cut the sequence into different steps (prefill chunks, single
 * tokens), whose float32 sums round differently: measured up to 1.4e-4 on
 * logits up to ~150, 1e-6 of the largest. The bound is 1e-5 of it, while
 * a stale cache row left visible moves them by 0.1 or more. The probe is
 * rewound, as a step after an aborted answer is.
 */
async function expectCacheExact(chat) {
  const probe = model.tokenizer.tokenToId('<|im_end|>');
  const position = chat.runner.position;
  const logits = await chat.runner.forward([probe]);
  chat.runner.rewind(position);
  const fresh = new LlamaRunner(context, model, OPTS);
  await fresh.init();
  try {
    const want = await fresh.forward([...chat.cached, probe]);
    let diff = 0;
    let scale = 0;
    for (let i = 0; i < want.length; i++) {
      diff = Math.max(diff, Math.abs(logits[i] - want[i]));
      scale = Math.max(scale, Math.abs(want[i]));
    }
    expect(diff).toBeLessThan(1e-5 * scale);
  } finally {
    fresh.destroy();
  }
}

/**
 * One turn of `chat`: asks `question` and checks what the turn reused of
 * the cache and that it answered as a new session does. Returns the
 * answer and the turn's prompt length.
 */
async function turn(chat, question, options) {
  const conversation = [...chat.messages, { role: 'user', content: question }];
  const tokens = promptTokens(conversation);
  const before = chat.cached.slice();
  const text = await collect(chat.ask(question, options));
  const stats = chat.lastStats;
  // The cache kept the prefix the conversation shares with it, and the
  // turn computed the rest of the prompt.
  expect(stats.cachedTokens).toBe(reusable(before, tokens));
  expect(stats.promptTokens).toBe(tokens.length - stats.cachedTokens);
  // The cache holds the prompt, then the answer's tokens but the last
  // (no step reads its logits).
  expect(chat.cached.slice(0, tokens.length)).toEqual(tokens);
  expect(chat.cached.length).toBe(tokens.length + stats.generatedTokens - 1);
  expect(chat.runner.position).toBe(chat.cached.length);
  expect(chat.messages).toEqual([...conversation, { role: 'assistant', content: text }]);
  const fresh = await freshAnswer(conversation, options);
  expect(text).toBe(fresh.text);
  expect(stats.generatedTokens).toBe(fresh.generatedTokens);
  if (chat.cached.length < OPTS.maxContext) await expectCacheExact(chat);
  return { text, stats, promptLength: tokens.length };
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

describe('a long conversation', () => {
  // Answers of 8 tokens, end of turn or not, so that the conversation
  // grows by the same steps whatever the random model says.
  const SHORT = { maxTokens: 8, ignoreEos: true };
  const QUESTIONS = ['hello world', 'the world', 'hello there', 'what is the world', 'tell me all'];

  test('reuses the cache every turn, answers as a new session would, and ends its last answer at the context', async () => {
    await withSession(model, { ...OPTS, system: 'hello' }, async (chat) => {
      // Short turns until the conversation holds half the context: the
      // next prompt then still fits, since a turn adds its question, some
      // twenty tokens of the template and at most three per answer token
      // (an answer's bytes that are not UTF-8 come back as U+FFFD).
      let turns = 0;
      while (chat.cached.length < OPTS.maxContext / 2) {
        const { stats } = await turn(chat, QUESTIONS[turns % QUESTIONS.length], SHORT);
        expect(stats.generatedTokens).toBe(SHORT.maxTokens);
        // From the second turn on, the history is not computed again.
        if (turns > 0) expect(stats.cachedTokens).toBeGreaterThan(0);
        turns++;
      }
      expect(turns).toBeGreaterThanOrEqual(3);

      // Then an answer longer than the room left: it ends at the context's
      // end, with the last position written and one more token sampled
      // from it, instead of failing.
      const last = await turn(chat, 'hi', { maxTokens: 1000, ignoreEos: true });
      expect(last.promptLength).toBeLessThan(OPTS.maxContext);
      expect(last.stats.cachedTokens).toBeGreaterThan(0);
      expect(last.stats.generatedTokens).toBe(OPTS.maxContext - last.promptLength + 1);
      expect(chat.cached.length).toBe(OPTS.maxContext);

      // A next prompt does not fit: the documented RangeError, with both
      // counts, and the cache as it was.
      const cached = chat.cached.slice();
      const messages = chat.messages.slice();
      const over = promptTokens([...chat.messages, { role: 'user', content: 'hello' }]).length;
      expect(over).toBeGreaterThan(OPTS.maxContext);
      const error = await collect(chat.ask('hello', SHORT)).then(
        () => null,
        (e) => e,
      );
      expect(error).toBeInstanceOf(RangeError);
      expect(error.message).toBe(
        `the prompt is ${over} tokens, more than the context of ${OPTS.maxContext} ` +
          '(start a new session, or shorten the conversation)',
      );
      expect(chat.cached).toEqual(cached);
      expect(chat.runner.position).toBe(OPTS.maxContext);
      // The refused question did not join the conversation: asking it
      // again gives the same error, not one about a longer prompt.
      expect(chat.messages).toEqual(messages);
      const twice = await collect(chat.ask('hello', SHORT)).then(
        () => null,
        (e) => e,
      );
      expect(twice.message).toBe(error.message);

      // The session goes on with a new conversation, from its system
      // message, reusing what that shares with the cache.
      chat.reset();
      expect(chat.messages).toEqual([{ role: 'system', content: 'hello' }]);
      const again = await turn(chat, 'hello world', SHORT);
      expect(again.stats.cachedTokens).toBeGreaterThan(0);
      await turn(chat, 'the world', SHORT);
    });
  });

  test('an aborted answer leaves the session usable, and the next turn answers as a new session would', async () => {
    await withSession(model, OPTS, async (chat) => {
      await turn(chat, 'hello world', SHORT);
      const controller = new AbortController();
      const pieces = [];
      const options = { maxTokens: 20, ignoreEos: true, signal: controller.signal };
      for await (const piece of chat.ask('the world', options)) {
        pieces.push(piece);
        if (pieces.length === 3) controller.abort();
      }
      // It stopped at the abort, and the answer so far joined the conversation.
      expect(pieces.length).toBe(3);
      expect(chat.lastStats.generatedTokens).toBeGreaterThanOrEqual(3);
      expect(chat.lastStats.generatedTokens).toBeLessThan(options.maxTokens);
      expect(chat.messages.at(-1)).toEqual({ role: 'assistant', content: pieces.join('') });
      expect(chat.runner.position).toBe(chat.cached.length);

      const next = await turn(chat, 'hello there', SHORT);
      expect(next.stats.cachedTokens).toBeGreaterThan(0);
      await turn(chat, 'what is the world', SHORT);
    });
  });
});
