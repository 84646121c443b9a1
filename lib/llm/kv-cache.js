'use strict';
// The KV cache: MLTensors that stay in the context across dispatches and
// are never read back to JavaScript.
//
// The cache is cut into nBlocks = maxContext / B blocks of B positions; a
// block holds every layer's K and V for its positions (one tensor per
// block, [2 * nLayer, nHeadKv, headDim * B], see graphs.js), so a dispatch
// binds at most nBlocks + 1 cache tensors whatever the number of layers. A
// step graph reads the block being filled as `cur` and the others it spans
// as `past*`,
// and writes the updated block as `next` into a spare tensor, which then
// takes the block's place (WebNN writes whole output tensors, and a tensor
// may not be both an input and an output of a dispatch). So a step writes
// one block, never the whole cache. Blocks not yet (or no longer) in use
// are still bound, to keep the graph's inputs fixed, and masked out.

/** @typedef {import('../..').MLContext} MLContext */
/** @typedef {import('../..').MLTensor} MLTensor */

class KVCache {
  /**
   * @param {MLContext} context
   * @param {{nLayer: number, nHeadKv: number, headDim: number}} config
   * @param {{maxContext: number, blockSize: number}} options
   */
  constructor(context, config, { maxContext, blockSize }) {
    if (!Number.isInteger(blockSize) || blockSize < 1) throw new RangeError('blockSize must be a positive integer');
    if (!Number.isInteger(maxContext) || maxContext < 1 || maxContext % blockSize !== 0) {
      throw new RangeError(`maxContext (${maxContext}) must be a positive multiple of blockSize (${blockSize})`);
    }
    this.context = context;
    this.blockSize = blockSize;
    this.maxContext = maxContext;
    this.nBlocks = maxContext / blockSize;
    this.shape = [2 * config.nLayer, config.nHeadKv, config.headDim * blockSize];
    /** @type {MLTensor[]} */
    this.blocks = [];
    /** @type {MLTensor | null} */
    this.spare = null;
  }

  /** Creates the first block and the spare, filled with zeros. */
  async init() {
    this.spare = await this._make();
    await this.ensure(1);
  }

  /**
   * Creates the blocks below n that do not exist yet: a conversation holds
   * the blocks its graphs have spanned so far, not maxContext's worth.
   * @param {number} n
   */
  async ensure(n) {
    if (!(Number.isInteger(n) && n >= 1 && n <= this.nBlocks)) throw new RangeError(`ensure(${n}): need 1 <= n <= ${this.nBlocks}`);
    while (this.blocks.length < n) this.blocks.push(await this._make());
  }

  /** @returns {Promise<MLTensor>} */
  async _make() {
    const size = this.shape.reduce((a, b) => a * b, 1);
    // Zeros, not whatever the allocation held: a masked position still
    // multiplies its (zero) probability by V, and 0 * NaN would be NaN.
    const t = await this.context.createTensor({ dataType: 'float32', shape: this.shape, writable: true });
    this.context.writeTensor(t, new Float32Array(size));
    return t;
  }

  /**
   * The cache bindings of a step that writes into block c with a graph
   * over n blocks (c < n): that block as `cur`, the other blocks below n
   * as `past0`... in order, and the spare as the `next` output.
   * @param {number} c the current block
   * @param {number} [n] the blocks the step's graph spans (every block
   *   created so far by default)
   * @returns {{inputs: Record<string, MLTensor>, next: MLTensor}}
   */
  bindings(c, n = this.blocks.length) {
    if (!(c >= 0 && c < n && n <= this.blocks.length)) {
      throw new RangeError(`bindings(${c}, ${n}): need 0 <= c < n <= ${this.blocks.length} (the blocks created so far)`);
    }
    /** @type {Record<string, MLTensor>} */
    const inputs = { cur: this.blocks[c] };
    let s = 0;
    for (let i = 0; i < n; i++) if (i !== c) inputs[`past${s++}`] = this.blocks[i];
    // Blocks exist only after init(), which made the spare.
    return { inputs, next: /** @type {MLTensor} */ (this.spare) };
  }

  /**
   * After a dispatch: the spare now holds block c; the old block is the new spare.
   * @param {number} c
   */
  commit(c) {
    const old = this.blocks[c];
    this.blocks[c] = /** @type {MLTensor} */ (this.spare); // a dispatch came after init()
    this.spare = old;
  }

  /** Releases the tensors. */
  destroy() {
    for (const t of this.blocks) t.destroy();
    if (this.spare) this.spare.destroy();
    this.blocks = [];
    this.spare = null;
  }
}

module.exports = { KVCache };
