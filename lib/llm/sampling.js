'use strict';
// Picking the next token from a Float32Array of logits: greedy, or a draw
// from the softmax at a temperature, restricted to the top k and/or the
// smallest set whose probability reaches top p (the order llama.cpp's
// default chain applies: top-k, then top-p, then temperature). Draws come
// from a seeded PRNG so that a seed reproduces a generation.

/**
 * A small seeded PRNG (mulberry32): deterministic for a seed, uniform in
 * [0, 1). Not for cryptography.
 * @param {number} seed 32-bit integer
 * @returns {() => number}
 */
function mulberry32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * The index of the largest logit (the first one on ties).
 * @param {Float32Array|number[]} logits
 * @returns {number}
 */
function argmax(logits) {
  let best = 0;
  for (let i = 1; i < logits.length; i++) if (logits[i] > logits[best]) best = i;
  return best;
}

/**
 * A sampler with its own PRNG state.
 *
 * @param {object} [options]
 * @param {number} [options.temperature=0] 0 (or less) is greedy
 * @param {number} [options.topK=0] keep the k most likely tokens; 0 keeps all
 * @param {number} [options.topP=1] keep the most likely tokens whose
 *   probabilities sum to at least p; 1 keeps all
 * @param {number} [options.seed=0] the PRNG seed
 * @returns {{sample: (logits: Float32Array) => number, random: () => number}}
 */
function createSampler({ temperature = 0, topK = 0, topP = 1, seed = 0 } = {}) {
  if (typeof temperature !== 'number' || Number.isNaN(temperature)) throw new RangeError('temperature must be a number');
  if (!Number.isInteger(topK) || topK < 0) throw new RangeError('topK must be an integer >= 0');
  if (!(topP > 0 && topP <= 1)) throw new RangeError('topP must be in (0, 1]');
  const random = mulberry32(seed);
  return {
    random,
    sample(logits) {
      if (temperature <= 0) return argmax(logits);
      return sampleFrom(logits, { temperature, topK, topP, random });
    },
  };
}

/**
 * One draw from logits at a temperature after the top-k and top-p cuts.
 * @param {Float32Array|number[]} logits
 * @param {{temperature: number, topK?: number, topP?: number, random: () => number}} options
 * @returns {number} the token id
 */
function sampleFrom(logits, { temperature, topK = 0, topP = 1, random }) {
  // Candidates sorted by logit; sorting the index array once is cheap
  // next to a model step (49152 entries).
  let ids = Array.from({ length: logits.length }, (_, i) => i).filter((i) => !Number.isNaN(logits[i]));
  ids.sort((a, b) => logits[b] - logits[a] || a - b);
  if (topK > 0 && topK < ids.length) ids = ids.slice(0, topK);
  // Probabilities at temperature 1 for the top-p cut, as llama.cpp does,
  // then at the requested temperature for the draw.
  /** @param {number} t */
  const softmax = (t) => {
    const max = logits[ids[0]];
    const p = ids.map((i) => Math.exp((logits[i] - max) / t));
    const sum = p.reduce((a, b) => a + b, 0);
    return p.map((v) => v / sum);
  };
  if (topP < 1) {
    const p = softmax(1);
    let acc = 0;
    let keep = 0;
    while (keep < ids.length) {
      acc += p[keep++];
      if (acc >= topP) break;
    }
    ids = ids.slice(0, keep);
  }
  const p = softmax(temperature);
  let r = random();
  for (let k = 0; k < ids.length; k++) {
    r -= p[k];
    if (r < 0) return ids[k];
  }
  return ids[ids.length - 1]; // rounding left a sliver: the last candidate
}

module.exports = { mulberry32, argmax, createSampler, sampleFrom };
