'use strict';
// The byte-level BPE tokenizer of a GGUF file ('gpt2' model), giving the
// token ids llama.cpp gives. The BPE merges run in @huggingface/tokenizers,
// fed with a tokenizer.json built from the GGUF vocabulary; the split of
// text into words before BPE follows llama.cpp's regexes for the file's
// `tokenizer.ggml.pre`, and decoding is done here, byte-exact, as
// llama.cpp's token_to_piece does.

const { Tokenizer } = require('@huggingface/tokenizers');

// llama_token_type of tokenizer.ggml.token_type.
const TOKEN_NORMAL = 1;
const TOKEN_UNKNOWN = 2;
const TOKEN_CONTROL = 3;
const TOKEN_USER_DEFINED = 4;
const TOKEN_UNUSED = 5;

/**
 * GPT-2's byte-level alphabet: byte b is written as the character
 * BYTE_TO_CHAR[b] in token texts, so that every byte is a printable
 * character.
 */
const BYTE_TO_CHAR = (() => {
  const table = new Array(256);
  /** @param {number} b */
  const printable = (b) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  let next = 256;
  for (let b = 0; b < 256; b++) table[b] = String.fromCodePoint(printable(b) ? b : next++);
  return table;
})();
const CHAR_TO_BYTE = new Map(BYTE_TO_CHAR.map((c, b) => [c, b]));

/**
 * How llama.cpp splits text into words before BPE, per `tokenizer.ggml.pre`.
 * Each regex list is applied in turn, each splitting the pieces of the
 * previous one; the last one is GPT-2's, which the ByteLevel pre-tokenizer
 * applies by itself. The steps are @huggingface/tokenizers' JSON config.
 */
const DIGITS_THEN_GPT2 = [{ type: 'Split', pattern: { Regex: '\\p{N}' }, behavior: 'Isolated', invert: false }];
/** @type {Record<string, object[]>} */
const PRE_TOKENIZERS = {
  // llama.cpp: "\p{N}" then GPT-2's regex, for these pre types.
  smollm: DIGITS_THEN_GPT2,
  starcoder: DIGITS_THEN_GPT2,
  refact: DIGITS_THEN_GPT2,
  'command-r': DIGITS_THEN_GPT2,
  codeshell: DIGITS_THEN_GPT2,
  exaone: DIGITS_THEN_GPT2,
  minerva: DIGITS_THEN_GPT2,
  // llama.cpp: GPT-2's regex alone.
  gpt2: [],
  mpt: [],
  olmo: [],
  jais: [],
  trillion: [],
};

class LlamaTokenizer {
  /**
   * @param {{ tokens: string[], tokenTypes?: number[], merges: string[], pre?: string,
   *   addBos?: boolean, bosId?: number }} vocab
   *   the GGUF vocabulary (tokenizer.ggml.tokens, token_type, merges, pre,
   *   add_bos_token, bos_token_id)
   */
  constructor({ tokens, tokenTypes, merges, pre = 'gpt2', addBos = false, bosId }) {
    if (!Array.isArray(tokens) || tokens.length === 0) throw new Error('the vocabulary has no tokens');
    if (!Array.isArray(merges)) throw new Error('the vocabulary has no merges (tokenizer.ggml.merges)');
    const preSteps = PRE_TOKENIZERS[pre];
    if (!preSteps) {
      throw new Error(
        `tokenizer.ggml.pre ${JSON.stringify(pre)} is not supported (${Object.keys(PRE_TOKENIZERS).join(', ')})`,
      );
    }
    this.tokens = tokens;
    this.tokenTypes = tokenTypes ?? tokens.map(() => TOKEN_NORMAL);
    if (this.tokenTypes.length !== tokens.length) {
      throw new Error(`token_type has ${this.tokenTypes.length} entries for ${tokens.length} tokens`);
    }
    this.pre = pre;
    this.addBos = addBos;
    this.bosId = bosId;
    this._merges = merges;
    this._preSteps = preSteps;
    /** @type {Map<string, number>} */
    this._ids = new Map();
    // Where a text appears twice, llama.cpp's text-to-id map keeps the last.
    tokens.forEach((t, id) => this._ids.set(t, id));
    // The bytes of each token, made when first asked for.
    /** @type {Array<Uint8Array | undefined>} */
    this._pieces = new Array(tokens.length);
    /** @type {Map<boolean, Tokenizer>} */
    this._hf = new Map();
  }

  /**
   * A tokenizer from the metadata of a GGUF file.
   * @param {Record<string, any>} md
   * @returns {LlamaTokenizer}
   */
  static fromGgufMetadata(md) {
    const model = md['tokenizer.ggml.model'];
    if (model !== 'gpt2') {
      throw new Error(`tokenizer.ggml.model ${JSON.stringify(model)} is not supported (only gpt2, byte-level BPE)`);
    }
    return new LlamaTokenizer({
      tokens: md['tokenizer.ggml.tokens'],
      tokenTypes: md['tokenizer.ggml.token_type'],
      merges: md['tokenizer.ggml.merges'],
      pre: md['tokenizer.ggml.pre'] ?? 'gpt2',
      addBos: md['tokenizer.ggml.add_bos_token'] ?? false,
      bosId: md['tokenizer.ggml.bos_token_id'],
    });
  }

  /** @returns {number} */
  get vocabSize() {
    return this.tokens.length;
  }

  /**
   * Whether `id` is a control token (token_type 3: `<|im_start|>`, ...).
   * @param {number} id
   * @returns {boolean}
   */
  isSpecial(id) {
    return this.tokenTypes[id] === TOKEN_CONTROL;
  }

  /**
   * @param {string} text
   * @returns {number | undefined}
   */
  tokenToId(text) {
    return this._ids.get(text);
  }

  // One @huggingface/tokenizers instance per `special` setting, made when
  // first used: with special tokens off, control tokens are plain text, as
  // with llama.cpp's parse_special = false, but user-defined ones are still
  // matched.
  /**
   * @param {boolean} special
   * @returns {Tokenizer}
   */
  _tokenizer(special) {
    let hf = this._hf.get(special);
    if (hf) return hf;
    /** @type {Record<string, number>} */
    const vocab = Object.create(null);
    this.tokens.forEach((t, id) => {
      vocab[t] = id;
    });
    /** @type {object[]} */
    const added = [];
    this.tokens.forEach((content, id) => {
      const type = this.tokenTypes[id];
      if (type === TOKEN_USER_DEFINED || (special && type === TOKEN_CONTROL)) {
        added.push({ id, content, special: type === TOKEN_CONTROL, normalized: false, lstrip: false, rstrip: false });
      }
    });
    hf = new Tokenizer(
      {
        normalizer: null,
        pre_tokenizer: {
          type: 'Sequence',
          pretokenizers: [...this._preSteps, { type: 'ByteLevel', add_prefix_space: false, use_regex: true }],
        },
        model: { type: 'BPE', vocab, merges: this._merges, ignore_merges: false },
        post_processor: null,
        decoder: null,
        added_tokens: added,
      },
      {},
    );
    this._hf.set(special, hf);
    return hf;
  }

  /**
   * Token ids of `text`, as llama.cpp's tokenize gives them.
   * @param {string} text
   * @param {{ special?: boolean, addBos?: boolean }} [options]
   *   special: match control tokens written in the text (`<|im_start|>`);
   *   addBos: prepend BOS (default: the file's tokenizer.ggml.add_bos_token)
   * @returns {number[]}
   */
  encode(text, { special = true, addBos = this.addBos } = {}) {
    if (typeof text !== 'string') throw new TypeError('text must be a string');
    const ids = [];
    if (addBos && this.bosId !== undefined) ids.push(this.bosId);
    if (text.length === 0) return ids;
    const { ids: found, tokens } = this._tokenizer(special).encode(text, { add_special_tokens: false });
    for (let i = 0; i < found.length; i++) {
      // Every byte has a token in a byte-level vocabulary; a miss means the
      // vocabulary lacks one, and a wrong id would be worse than an error.
      if (!Number.isInteger(found[i])) throw new Error(`no token for ${JSON.stringify(tokens[i])} in the vocabulary`);
      ids.push(found[i]);
    }
    return ids;
  }

  /**
   * The bytes that token `id` stands for. Control tokens stand for their
   * text when `special`, else for nothing, as in llama.cpp.
   * @param {number} id
   * @param {{ special?: boolean }} [options]
   * @returns {Uint8Array}
   */
  tokenBytes(id, { special = true } = {}) {
    if (!Number.isInteger(id) || id < 0 || id >= this.tokens.length) {
      throw new RangeError(`token id ${id} is out of range [0, ${this.tokens.length})`);
    }
    const type = this.tokenTypes[id];
    if (type === TOKEN_CONTROL) return special ? Buffer.from(this.tokens[id], 'utf8') : new Uint8Array(0);
    if (type === TOKEN_USER_DEFINED) return Buffer.from(this.tokens[id], 'utf8');
    if (type === TOKEN_UNKNOWN || type === TOKEN_UNUSED) return new Uint8Array(0);
    let piece = this._pieces[id];
    if (!piece) {
      const text = this.tokens[id];
      const bytes = [];
      for (const ch of text) {
        const b = CHAR_TO_BYTE.get(ch);
        // A character outside the byte alphabet is kept as its UTF-8, as
        // llama.cpp does.
        if (b === undefined) bytes.push(...Buffer.from(ch, 'utf8'));
        else bytes.push(b);
      }
      piece = Uint8Array.from(bytes);
      this._pieces[id] = piece;
    }
    return piece;
  }

  /**
   * The text of one token (U+FFFD where it holds part of a character).
   * @param {number} id
   * @returns {string}
   */
  tokenToPiece(id) {
    return decodeUtf8(this.tokenBytes(id));
  }

  /**
   * The text of `ids`.
   * @param {number[]} ids
   * @param {{ special?: boolean }} [options] special: write control tokens' text
   * @returns {string}
   */
  decode(ids, { special = true } = {}) {
    const parts = [];
    let n = 0;
    for (const id of ids) {
      const b = this.tokenBytes(id, { special });
      parts.push(b);
      n += b.length;
    }
    return decodeUtf8(Buffer.concat(parts, n));
  }

  /**
   * A decoder for tokens arriving one at a time: push(id) returns the text
   * completed by that token ('' while a character is split across tokens),
   * flush() what is left at the end; all pieces together equal decode(ids).
   * @param {{ special?: boolean }} [options]
   * @returns {{ push(id: number): string, flush(): string }}
   */
  decodeStream({ special = true } = {}) {
    const decoder = new TextDecoder('utf-8', { ignoreBOM: true });
    return {
      push: (id) => decoder.decode(this.tokenBytes(id, { special }), { stream: true }),
      flush: () => decoder.decode(),
    };
  }
}

// BOM kept: a token may well begin with U+FEFF, and dropping it would lose
// text.
/**
 * @param {Uint8Array} bytes
 * @returns {string}
 */
function decodeUtf8(bytes) {
  return new TextDecoder('utf-8', { ignoreBOM: true }).decode(bytes);
}

module.exports = {
  LlamaTokenizer,
  BYTE_TO_CHAR,
  TOKEN_NORMAL,
  TOKEN_CONTROL,
  TOKEN_USER_DEFINED,
};
