'use strict';
// Runs the model on a context: prefill in chunks, decode one token at a
// time, the KV cache kept in MLTensors (kv-cache.js) across dispatches.
// Only the logits are read back.

const { MASKED, prepareWeights, destroyWeights, buildStepGraph } = require('./graphs');
const { KVCache } = require('./kv-cache');

/** @typedef {import('../..').MLContext} MLContext */
/** @typedef {import('../..').MLTensor} MLTensor */
/** @typedef {import('../..').MLGraph} MLGraph */
/** @typedef {import('../..').MLOperandDataType} MLOperandDataType */
/** @typedef {import('./gguf').LlamaWeights} LlamaWeights */
/** @typedef {import('./graphs').PreparedWeight} PreparedWeight */
/**
 * The small inputs of the step graphs over T tokens (see graphs.js); `last`
 * only where T > 1.
 * @typedef {{ ids: MLTensor, cos: MLTensor, sin: MLTensor, place: MLTensor, last?: MLTensor }} StepInputs
 */
/**
 * A step graph over T tokens and n cache blocks, with its mask tensor.
 * @typedef {{ T: number, n: number, graph: MLGraph, mask: MLTensor }} Step
 */

/**
 * A Llama-family model on a WebNN context.
 *
 * Limits: at most `maxContext` positions (default 2048, a multiple of
 * `blockSize`, default 128); beyond it forward() throws. A step attends
 * over the blocks up to its position, rounded up to a power of two of
 * blocks (unused ones masked), so its cost grows with the position.
 */
class LlamaRunner {
  /**
   * @param {MLContext} context
   * @param {LlamaWeights} model the loader's output (config and tensors are read)
   * @param {{maxContext?: number, blockSize?: number, chunk?: number, numerics?: 'llama.cpp'|'float32', cacheType?: 'float16'|'float32'}} [options]
   *   chunk: tokens per prefill dispatch (default 64, at most blockSize),
   *   except that a prompt's whole blocks run a block per dispatch;
   *   numerics: 'llama.cpp' (the default) rounds as llama.cpp's CPU
   *   backend does (see graphs.js), 'float32' computes every product of
   *   the dequantized weights in float32;
   *   cacheType: how the cache stores keys and values: float16 (the
   *   default with 'llama.cpp' numerics, which round them to float16: the
   *   same values in half the memory) or float32 (the default, and the
   *   only type, with 'float32' numerics)
   */
  constructor(context, model, { maxContext = 2048, blockSize = 128, chunk = 64, numerics = 'llama.cpp', cacheType } = {}) {
    const c = model.config;
    if (c.nHead % c.nHeadKv !== 0) throw new RangeError('nHead must be a multiple of nHeadKv');
    if (c.headDim % 2 !== 0 || c.ropeDim % 2 !== 0 || c.ropeDim > c.headDim) {
      throw new RangeError('headDim and ropeDim must be even, ropeDim <= headDim');
    }
    if (c.nCtx && maxContext > c.nCtx) throw new RangeError(`maxContext ${maxContext} exceeds the model's context of ${c.nCtx}`);
    if (!Number.isInteger(chunk) || chunk < 2 || chunk > blockSize) {
      throw new RangeError(`chunk (${chunk}) must be an integer from 2 to blockSize (${blockSize})`);
    }
    this.context = context;
    this.model = model;
    this.config = c;
    this.chunk = chunk;
    if (numerics !== 'llama.cpp' && numerics !== 'float32') {
      throw new RangeError(`numerics must be 'llama.cpp' or 'float32', not ${numerics}`);
    }
    this.numerics = numerics;
    // llama.cpp's numerics round keys and values to float16 before they
    // enter the cache, so a float16 cache holds the same values in half
    // the memory, and a step reads half the bytes (the CPU backend's
    // products read the float16 blocks as they are: docs/llm.md).
    if (cacheType === undefined) cacheType = numerics === 'llama.cpp' ? 'float16' : 'float32';
    if (cacheType !== 'float16' && cacheType !== 'float32') {
      throw new RangeError(`cacheType must be 'float16' or 'float32', not ${cacheType}`);
    }
    if (cacheType === 'float16' && numerics !== 'llama.cpp') {
      throw new RangeError("a float16 cache needs numerics 'llama.cpp' (float32 numerics keep unrounded keys and values)");
    }
    this.cache = new KVCache(context, c, { maxContext, blockSize, dataType: cacheType });
    this.maxContext = maxContext;
    this.blockSize = blockSize;
    this._position = 0;
    this._busy = false;
    // Made by init(): the weights' constant tensors, the small inputs of the
    // step graphs by T, the step graphs by `${T}:${n}` (null before init()
    // and after destroy()), the logits.
    /** @type {Map<string, PreparedWeight> | null} */
    this.weights = null;
    /** @type {Record<number, StepInputs>} */
    this.io = {};
    /** @type {Record<string, Step> | null} */
    this.steps = null;
    /** @type {MLTensor | null} */
    this.logits = null;
    // The RoPE frequency of each pair: ropeBase^(-2i/ropeDim); pairs past
    // ropeDim are not rotated (cos 1, sin 0).
    this.freq = Float64Array.from({ length: c.headDim / 2 }, (_, i) =>
      (i < c.ropeDim / 2 ? c.ropeBase ** (-2 * i / c.ropeDim) : 0));
  }

  /**
   * Creates the weights, the cache and the first prefill and decode
   * graphs (those over one block); graphs over more blocks are built when
   * the position first needs them (see _step).
   */
  async init() {
    const { context, config } = this;
    this.weights = await prepareWeights(context, this.model);
    this.io = {};
    this.steps = {};
    for (const T of new Set([this.chunk, 1])) await this._inputs(T);
    this.logits = await context.createTensor({ dataType: 'float32', shape: [1, config.nVocab], readable: true });
    await this.cache.init();
    await this._step(this.chunk, 1);
    await this._step(1, 1);
  }

  /**
   * The input tensors of a step over T tokens, made on first use.
   * @param {number} T
   * @returns {Promise<StepInputs>}
   */
  async _inputs(T) {
    const io = /** @type {Record<number, StepInputs>} */ (this.io);
    if (!io[T]) {
      const { context } = this;
      /** @type {(dataType: MLOperandDataType, shape: number[]) => Promise<MLTensor>} */
      const desc = (dataType, shape) => context.createTensor({ dataType, shape, writable: true });
      const half = this.config.headDim / 2;
      /** @type {StepInputs} */
      const made = {
        ids: await desc('int32', [T]),
        cos: await desc('float32', [T, 1, half, 2]),
        sin: await desc('float32', [T, 1, half, 2]),
        place: await desc('float32', [T, this.blockSize]),
      };
      if (T > 1) made.last = await desc('int32', [1]);
      io[T] = made;
    }
    return io[T];
  }

  /**
   * The step graph for T tokens that attends over n blocks, built on first
   * use. A step that writes block c reads blocks 0..c only, so it runs on
   * the graph over the next power of two of c + 1 blocks (at most all of
   * them): attention costs what the position needs, not what maxContext
   * allows, for a handful of graphs per conversation (they share the
   * weights, and a backend may share what it derives from them).
   * @param {number} T
   * @param {number} n
   * @returns {Promise<Step>}
   */
  async _step(T, n) {
    // Steps are asked for by init() and forward(), after init() made the
    // weights and the table and before destroy() dropped them.
    const steps = /** @type {Record<string, Step>} */ (this.steps);
    const weights = /** @type {Map<string, PreparedWeight>} */ (this.weights);
    const key = `${T}:${n}`;
    if (!steps[key]) {
      const opts = { blockSize: this.blockSize, nBlocks: n, numerics: this.numerics, T, cacheType: this.cache.dataType };
      const graph = await buildStepGraph(this.context, this.config, weights, opts);
      const mask = await this.context.createTensor({ dataType: 'float32', shape: [T, n * this.blockSize], writable: true });
      steps[key] = { T, n, graph, mask };
    }
    return steps[key];
  }

  /**
   * The number of blocks the graph for a step that writes block c spans.
   * @param {number} c
   */
  _blocksFor(c) {
    // Powers of two up to 4, then multiples of 4: a step attends over at
    // most 3 masked blocks past the 4th, and a long conversation builds a
    // graph every 4 blocks, not every block.
    let n = 1;
    while (n < Math.min(c + 1, 4)) n *= 2;
    if (c + 1 > 4) n = Math.ceil((c + 1) / 4) * 4;
    return Math.min(n, this.cache.nBlocks);
  }

  /** The number of positions in the cache. */
  get position() {
    return this._position;
  }

  /**
   * Appends tokens to the cache and returns the logits after the last one.
   * @param {number[]|Int32Array} tokenIds at least one
   * @returns {Promise<Float32Array>} nVocab logits
   */
  async forward(tokenIds) {
    if (!this.steps || !this.logits) throw new Error('LlamaRunner: call init() first');
    const ids = Array.from(tokenIds);
    if (ids.length === 0) throw new RangeError('forward() needs at least one token');
    for (const id of ids) {
      if (!Number.isInteger(id) || id < 0 || id >= this.config.nVocab) throw new RangeError(`token id ${id} is not in [0, ${this.config.nVocab})`);
    }
    if (this._position + ids.length > this.maxContext) {
      throw new Error(`context full: ${this._position} positions + ${ids.length} new tokens exceed maxContext ${this.maxContext}`);
    }
    if (this._busy) throw new Error('LlamaRunner: forward() is already running');
    this._busy = true;
    try {
      for (let i = 0; i < ids.length;) {
        const pos = this._position;
        // A chunk never crosses a block boundary: each step writes one block.
        const room = this.blockSize - (pos % this.blockSize);
        // A whole block of a long prompt is one step over the block
        // (its weights' dequantization shared by twice the rows); the
        // rest, and short prompts, run in chunks, which pad less.
        const whole = room === this.blockSize && ids.length - i >= this.blockSize;
        const n = whole ? this.blockSize : Math.min(ids.length - i, room, this.chunk);
        const T = whole ? this.blockSize : n === 1 ? 1 : this.chunk;
        await this._inputs(T);
        const step = await this._step(T, this._blocksFor(Math.floor(pos / this.blockSize)));
        await this.cache.ensure(step.n);
        this._dispatch(step, ids.slice(i, i + n), pos);
        this._position = pos + n;
        i += n;
      }
      return new Float32Array(await this.context.readTensor(this.logits));
    } finally {
      this._busy = false;
    }
  }

  /**
   * Writes the step's small inputs and dispatches it at position pos.
   * @param {Step} step
   * @param {number[]} tokens
   * @param {number} pos
   */
  _dispatch(step, tokens, pos) {
    const { T } = step;
    const io = this.io[T];
    const { context, blockSize: B } = this;
    const W = step.n * B;
    const n = tokens.length;
    const half = this.config.headDim / 2;
    const c = Math.floor(pos / B);
    const off = pos % B;
    const ids = new Int32Array(T);
    ids.set(tokens);
    // Per pair (cos, cos) and (-sin, sin): see the graphs' rope.
    const cos = new Float32Array(T * half * 2).fill(1);
    const sin = new Float32Array(T * half * 2);
    const mask = new Float32Array(T * W);
    const place = new Float32Array(T * B);
    for (let t = 0; t < T; t++) {
      const p = pos + Math.min(t, n - 1); // padding rows repeat the last token's row
      for (let i = 0; i < half; i++) {
        const a = p * this.freq[i];
        const at = (t * half + i) * 2;
        cos[at] = cos[at + 1] = Math.cos(a);
        sin[at] = -Math.sin(a);
        sin[at + 1] = Math.sin(a);
      }
      const row = mask.subarray(t * W, (t + 1) * W);
      // Past slots: the blocks before c are full and visible, the rest are
      // masked. The current block: its positions up to this token's.
      row.fill(MASKED, c * B, W - B);
      row.fill(MASKED, W - B + (p - c * B) + 1, W);
      if (t < n) place[t * B + off + t] = 1;
    }
    context.writeTensor(io.ids, ids);
    context.writeTensor(io.cos, cos);
    context.writeTensor(io.sin, sin);
    context.writeTensor(step.mask, mask);
    context.writeTensor(io.place, place);
    if (io.last) context.writeTensor(io.last, Int32Array.of(n - 1));
    const { inputs, next } = this.cache.bindings(c, step.n);
    // Added to the cache's records, not spread into new ones: a spread of
    // the hundreds of entries a long context binds costs V8 milliseconds.
    Object.assign(inputs, io);
    inputs.mask = step.mask;
    next.logits = /** @type {MLTensor} */ (this.logits); // forward() checked it
    context.dispatch(step.graph, inputs, next);
    this.cache.commit(c);
  }

  /**
   * Drops the positions >= n (after an aborted generation, or to reuse a
   * shared prefix). Only the position moves: the stale rows are masked and
   * overwritten by later steps.
   * @param {number} n
   */
  rewind(n) {
    if (!Number.isInteger(n) || n < 0 || n > this._position) {
      throw new RangeError(`rewind(${n}): must be an integer from 0 to the position ${this._position}`);
    }
    this._position = n;
  }

  /** Empties the cache (position 0). */
  reset() {
    this._position = 0;
  }

  /** Releases the graphs and tensors; the runner cannot be used afterwards. */
  destroy() {
    if (this.steps) {
      for (const s of Object.values(this.steps)) {
        s.graph.destroy();
        s.mask.destroy();
      }
      for (const io of Object.values(this.io)) for (const t of Object.values(io)) t.destroy();
      this.logits?.destroy();
      this.steps = null;
    }
    this.cache.destroy();
    if (this.weights) destroyWeights(this.weights);
    this.weights = null;
  }
}

module.exports = { LlamaRunner };
