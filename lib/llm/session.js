'use strict';
// A conversation with a loaded model: the chat template, the tokens the
// cache holds, and generation as an async iterator of text pieces.
//
// Each turn renders the whole conversation with the model's template,
// tokenizes it, and keeps what the cache already holds: the runner is
// rewound to the longest common prefix of the cached tokens and the new
// ones, and only the rest is computed. A follow-up question then costs its
// own tokens, not the history's, and an aborted or edited turn costs no
// more than what changed.

const { renderChat } = require('./chat-template');
const { LlamaRunner } = require('./runner');
const { createSampler } = require('./sampling');

/**
 * @typedef {{ role: 'system'|'user'|'assistant', content: string }} ChatMessage
 * @typedef {{
 *   maxTokens?: number, temperature?: number, topK?: number, topP?: number,
 *   seed?: number, signal?: AbortSignal, ignoreEos?: boolean
 * }} GenerateOptions
 * @typedef {{
 *   promptTokens: number, promptMs: number, generatedTokens: number,
 *   generateMs: number, cachedTokens: number
 * }} GenerateStats
 */

class ChatSession {
  /**
   * @param {import('../..').MLContext} context
   * @param {import('./gguf').LlamaModel} model loadLlama's output
   * @param {{ maxContext?: number, blockSize?: number, chunk?: number, numerics?: 'llama.cpp' | 'float32',
   *   system?: string }} [options] the runner's options (see LlamaRunner), and a system message
   */
  constructor(context, model, options = {}) {
    this.model = model;
    this.runner = new LlamaRunner(context, model, options);
    /** The system message a conversation starts with (see reset()). */
    this.system = options.system;
    /** @type {ChatMessage[]} */
    this.messages = [];
    this.reset();
    /**
     * The tokens whose keys and values the cache holds, in order.
     * @type {number[]}
     */
    this.cached = [];
    /** @type {GenerateStats | null} */
    this.lastStats = null;
  }

  async init() {
    await this.runner.init();
    return this;
  }

  /** The most tokens a conversation may hold (prompt and answers). */
  get maxContext() {
    return this.runner.maxContext;
  }

  /**
   * Starts a new conversation, from the system message if there is one (a
   * conversation that no longer fits the context goes on this way). The
   * cache stays: the next turn computes only what the new conversation
   * does not share with it.
   */
  reset() {
    this.messages = this.system ? [{ role: 'system', content: this.system }] : [];
  }

  /**
   * Feeds `tokens` after the longest prefix the cache already holds, and
   * returns the logits of the last one.
   * @param {number[]} tokens
   */
  async prefill(tokens) {
    let keep = 0;
    const max = Math.min(this.cached.length, tokens.length - 1);
    while (keep < max && this.cached[keep] === tokens[keep]) keep++;
    if (tokens.length > this.runner.maxContext) {
      throw new RangeError(
        `the prompt is ${tokens.length} tokens, more than the context of ` +
          `${this.runner.maxContext} (start a new session, or shorten the conversation)`,
      );
    }
    this.runner.rewind(keep);
    this.cached.length = keep;
    const logits = await this.runner.forward(tokens.slice(keep));
    this.cached.push(...tokens.slice(keep));
    return { logits, reused: keep };
  }

  /**
   * Adds the user's message and streams the assistant's answer. The answer
   * joins the conversation when the iteration ends (also when it ends
   * early: on `signal`, `maxTokens` or the context's end).
   * @param {string} text
   * @param {GenerateOptions} [options]
   * @returns {AsyncGenerator<string, void, void>}
   */
  async *ask(text, options = {}) {
    this.messages.push({ role: 'user', content: text });
    let answer = '';
    let failed = true;
    try {
      for await (const piece of this.generate(this.messages, options)) {
        answer += piece;
        yield piece;
      }
      failed = false;
    } finally {
      // A turn that failed before its first piece (a prompt over the
      // context, a signal aborted before the start) is undone, so the
      // conversation stays what it was and the next question can be
      // asked; otherwise what was answered joins it.
      if (failed && answer === '') this.messages.pop();
      else this.messages.push({ role: 'assistant', content: answer });
    }
  }

  /**
   * Streams the continuation of `messages` (rendered with the chat
   * template) or of a raw prompt string.
   * @param {ChatMessage[] | string} messages
   * @param {GenerateOptions} [options]
   * @returns {AsyncGenerator<string, void, void>}
   */
  async *generate(messages, options = {}) {
    const {
      maxTokens = 256,
      temperature = 0,
      topK = 40,
      topP = 0.95,
      seed = 0,
      signal,
      ignoreEos = false,
    } = options;
    const m = this.model;
    const prompt =
      typeof messages === 'string'
        ? messages
        : renderChat(m.chatTemplate, messages, {
            addGenerationPrompt: true,
            // A file may name no BOS or EOS token: the template gets '' then.
            bosToken: m.bosId === undefined ? '' : m.tokenizer.tokenToPiece(m.bosId),
            eosToken: m.eosId === undefined ? '' : m.tokenizer.tokenToPiece(m.eosId),
          });
    const tokens = m.tokenizer.encode(prompt, { special: true });
    signal?.throwIfAborted();
    const t0 = performance.now();
    let { logits, reused } = await this.prefill(tokens);
    const t1 = performance.now();
    const stats = {
      promptTokens: tokens.length - reused,
      promptMs: t1 - t0,
      generatedTokens: 0,
      generateMs: 0,
      cachedTokens: reused,
    };
    this.lastStats = stats;
    const sampler = createSampler({ temperature, topK, topP, seed });
    const eog = new Set(m.eogIds);
    const stream = m.tokenizer.decodeStream();
    try {
      while (stats.generatedTokens < maxTokens && !signal?.aborted) {
        const id = sampler.sample(logits);
        if (eog.has(id) && !ignoreEos) break;
        stats.generatedTokens++;
        const piece = stream.push(id);
        if (piece) yield piece;
        // The last token needs no step: nothing reads its logits.
        if (stats.generatedTokens === maxTokens || this.cached.length >= this.runner.maxContext) {
          break;
        }
        logits = await this.runner.forward([id]);
        this.cached.push(id);
      }
      // The bytes of a character that the last tokens left incomplete.
      const rest = stream.flush();
      if (rest) yield rest;
    } finally {
      stats.generateMs = performance.now() - t1;
    }
  }

  destroy() {
    this.runner.destroy();
  }
}

module.exports = { ChatSession };
