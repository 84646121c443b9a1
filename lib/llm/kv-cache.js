'use strict';
// The KV cache: MLTensors that stay in the context across dispatches and
// are never read back to JavaScript.
//
// The cache is cut into nBlocks = maxContext / B blocks of B positions; a
// block holds every layer's K and V for its positions, one tensor each
// (layer l's keys [nHeadKv, headDim, B] at 2l, its values [nHeadKv, B,
// headDim] at 2l + 1, see graphs.js), so a step reads each layer's part
// of a block where it lies. A step graph reads the block being filled as
// `k{l}`/`v{l}` and the others it spans as `p{s}k{l}`/`p{s}v{l}`, and writes
// the updated block as `nk{l}`/`nv{l}` into spare tensors, which then take
// the block's place (WebNN writes whole output tensors, and a tensor may
// not be both an input and an output of a dispatch). So a step writes one
// block, never the whole cache. Blocks not yet (or no longer) in use are
// still bound, to keep the graph's inputs fixed, and masked out.

/** @typedef {import('../..').MLContext} MLContext */
/** @typedef {import('../..').MLTensor} MLTensor */
/** A block: layer l's keys at 2l, its values at 2l + 1. @typedef {MLTensor[]} Block */

class KVCache {
  /**
   * @param {MLContext} context
   * @param {{nLayer: number, nHeadKv: number, headDim: number}} config
   * @param {{maxContext: number, blockSize: number, dataType?: 'float32'|'float16'}} options
   *   dataType: of the keys and values as stored (float16 where the graphs
   *   round them to float16 anyway: half the bytes a step reads)
   */
  constructor(context, config, { maxContext, blockSize, dataType = 'float32' }) {
    if (!Number.isInteger(blockSize) || blockSize < 1) throw new RangeError('blockSize must be a positive integer');
    if (!Number.isInteger(maxContext) || maxContext < 1 || maxContext % blockSize !== 0) {
      throw new RangeError(`maxContext (${maxContext}) must be a positive multiple of blockSize (${blockSize})`);
    }
    this.context = context;
    this.blockSize = blockSize;
    this.maxContext = maxContext;
    this.nBlocks = maxContext / blockSize;
    this.nLayer = config.nLayer;
    this.dataType = dataType;
    /** The shapes of a layer's keys and values in a block. */
    this.shapes = {
      k: [config.nHeadKv, config.headDim, blockSize],
      v: [config.nHeadKv, blockSize, config.headDim],
    };
    /** @type {Block[]} */
    this.blocks = [];
    /** @type {Block | null} */
    this.spare = null;
    /**
     * The binding names, made on first use (`_names`).
     * @type {{cur: string[], next: string[], past: string[][]} | null}
     */
    this.names = null;
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

  /** @returns {Promise<Block>} */
  async _make() {
    /** @type {Block} */
    const block = [];
    for (let i = 0; i < 2 * this.nLayer; i++) {
      const shape = i % 2 === 0 ? this.shapes.k : this.shapes.v;
      // A new tensor holds zeros (createTensor initializes every byte),
      // which a masked position needs: it still multiplies its (zero)
      // probability by V, and 0 * NaN would be NaN. No write of zeros
      // follows, which only held a second copy of the block for a while.
      const t = await this.context.createTensor({ dataType: this.dataType, shape, writable: true });
      block.push(t);
    }
    return block;
  }

  /**
   * The cache bindings of a step that writes into block c with a graph
   * over n blocks (c < n): that block's tensors as `k{l}`/`v{l}`, the other
   * blocks below n as `p0k{l}`/`p0v{l}`... in order, and the spare's as the
   * `nk{l}`/`nv{l}` outputs.
   * @param {number} c the current block
   * @param {number} [n] the blocks the step's graph spans (every block
   *   created so far by default)
   * @returns {{inputs: Record<string, MLTensor>, next: Record<string, MLTensor>}}
   */
  bindings(c, n = this.blocks.length) {
    if (!(c >= 0 && c < n && n <= this.blocks.length)) {
      throw new RangeError(`bindings(${c}, ${n}): need 0 <= c < n <= ${this.blocks.length} (the blocks created so far)`);
    }
    // Blocks exist only after init(), which made the spare.
    const spare = /** @type {Block} */ (this.spare);
    /** @type {Record<string, MLTensor>} */
    const inputs = {};
    /** @type {Record<string, MLTensor>} */
    const next = {};
    const cur = this.blocks[c];
    const names = this._names();
    for (let l = 0; l < this.nLayer; l++) {
      inputs[names.cur[2 * l]] = cur[2 * l];
      inputs[names.cur[2 * l + 1]] = cur[2 * l + 1];
      next[names.next[2 * l]] = spare[2 * l];
      next[names.next[2 * l + 1]] = spare[2 * l + 1];
    }
    let s = 0;
    for (let i = 0; i < n; i++) {
      if (i === c) continue;
      const past = names.past[s];
      for (let l = 0; l < 2 * this.nLayer; l++) inputs[past[l]] = this.blocks[i][l];
      s++;
    }
    return { inputs, next };
  }

  /**
   * The binding names, made once: a step binds hundreds of tensors, and a
   * name built anew each step is looked up in V8's string table each time.
   * @returns {{cur: string[], next: string[], past: string[][]}}
   */
  _names() {
    if (!this.names) {
      const layers = Array.from({ length: this.nLayer }, (_, l) => l);
      this.names = {
        cur: layers.flatMap((l) => [`k${l}`, `v${l}`]),
        next: layers.flatMap((l) => [`nk${l}`, `nv${l}`]),
        past: Array.from({ length: this.nBlocks }, (_, s) => layers.flatMap((l) => [`p${s}k${l}`, `p${s}v${l}`])),
      };
    }
    return this.names;
  }

  /**
   * After a dispatch: the spare now holds block c; the old block is the new spare.
   * @param {number} c
   */
  commit(c) {
    const old = this.blocks[c];
    this.blocks[c] = /** @type {Block} */ (this.spare); // a dispatch came after init()
    this.spare = old;
  }

  /** Releases the tensors. */
  destroy() {
    for (const block of this.blocks) for (const t of block) t.destroy();
    if (this.spare) for (const t of this.spare) t.destroy();
    this.blocks = [];
    this.spare = null;
  }
}

module.exports = { KVCache };
