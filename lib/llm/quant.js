'use strict';
// GGUF block formats (Q4_1, Q8_0) and float16, in plain JS.
//
// The graphs never expand the weights to float32 here: `repackQ4_1` and
// `repackQ8_0` only move bits around so that the blocks can enter a WebNN
// graph as uint4/int8 constants with a blockwise float16 scale, as they are
// in the file. The decoders (to float) and encoders (from float) exist for
// the references and the tests.

/** Weights per block in both formats. */
const QK = 32;
/** Bytes per block: Q4_1 = f16 d, f16 m, 16 bytes of nibbles. */
const Q4_1_BYTES = 20;
/** Bytes per block: Q8_0 = f16 d, 32 int8. */
const Q8_0_BYTES = 34;

const f32buf = new Float32Array(1);
const u32buf = new Uint32Array(f32buf.buffer);

/**
 * float16 bits -> number (exact: every float16 is a float64).
 * @param {number} h 16-bit pattern
 * @returns {number}
 */
function f16ToF32(h) {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24; // subnormal (or zero)
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

/**
 * number -> float16 bits, rounding to nearest even (through the float32
 * bits, as hardware conversions do; the double rounding through float32
 * cannot change a float16 result for the values the encoders produce).
 * @param {number} x
 * @returns {number} 16-bit pattern
 */
function f32ToF16(x) {
  f32buf[0] = x;
  const b = u32buf[0];
  const sign = (b >>> 16) & 0x8000;
  const exp = (b >>> 23) & 0xff;
  let mant = b & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  let e = exp - 127 + 15;
  if (e >= 31) return sign | 0x7c00; // overflow -> infinity
  if (e <= 0) {
    // Subnormal float16: shift the mantissa with its implicit 1 in.
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    let r = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    const half = 1 << (shift - 1);
    if (rem > half || (rem === half && (r & 1))) r++;
    return sign | r;
  }
  let r = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && (r & 1))) r++; // may carry into the exponent: still right
  return sign | r;
}

/**
 * Throws unless n is a whole number of blocks and `bytes` holds them.
 * @param {{ length: number }} bytes
 * @param {number} n
 * @param {number} blockBytes
 * @param {string} what
 */
function checkBlocks(bytes, n, blockBytes, what) {
  if (n % QK !== 0) throw new RangeError(`${what}: ${n} weights is not a multiple of ${QK}`);
  if (bytes.length < (n / QK) * blockBytes) {
    throw new RangeError(`${what}: ${bytes.length} bytes hold fewer than ${n} weights`);
  }
}

/**
 * Decodes n Q4_1 weights (value = d * q + m) into a float array.
 * @param {Uint8Array} bytes raw blocks
 * @param {number} n number of weights (a multiple of 32)
 * @param {Float64ArrayConstructor|Float32ArrayConstructor} [Type=Float64Array]
 * @returns {Float64Array|Float32Array}
 */
function decodeQ4_1(bytes, n, Type = Float64Array) {
  checkBlocks(bytes, n, Q4_1_BYTES, 'Q4_1');
  const out = new Type(n);
  for (let b = 0; b < n / QK; b++) {
    const o = b * Q4_1_BYTES;
    const d = f16ToF32(bytes[o] | (bytes[o + 1] << 8));
    const m = f16ToF32(bytes[o + 2] | (bytes[o + 3] << 8));
    for (let j = 0; j < 16; j++) {
      const q = bytes[o + 4 + j];
      out[b * QK + j] = d * (q & 15) + m;
      out[b * QK + j + 16] = d * (q >> 4) + m;
    }
  }
  return out;
}

/**
 * Decodes n Q8_0 weights (value = d * q) into a float array.
 * @param {Uint8Array} bytes raw blocks
 * @param {number} n number of weights (a multiple of 32)
 * @param {Float64ArrayConstructor|Float32ArrayConstructor} [Type=Float64Array]
 * @returns {Float64Array|Float32Array}
 */
function decodeQ8_0(bytes, n, Type = Float64Array) {
  checkBlocks(bytes, n, Q8_0_BYTES, 'Q8_0');
  const out = new Type(n);
  for (let b = 0; b < n / QK; b++) {
    const o = b * Q8_0_BYTES;
    const d = f16ToF32(bytes[o] | (bytes[o + 1] << 8));
    for (let j = 0; j < QK; j++) out[b * QK + j] = d * ((bytes[o + 2 + j] << 24) >> 24);
  }
  return out;
}

/**
 * Quantizes floats into Q4_1 blocks the way ggml's reference quantizer
 * does (d = (max - min) / 15, m = min, q = round((x - m) / d) clamped to
 * 0..15). For tests: real weights come quantized in the file.
 * @param {ArrayLike<number>} x length a multiple of 32
 * @returns {Uint8Array}
 */
function encodeQ4_1(x) {
  checkBlocks({ length: Infinity }, x.length, Q4_1_BYTES, 'Q4_1');
  const out = new Uint8Array((x.length / QK) * Q4_1_BYTES);
  for (let b = 0; b < x.length / QK; b++) {
    let lo = Infinity;
    let hi = -Infinity;
    for (let j = 0; j < QK; j++) {
      lo = Math.min(lo, x[b * QK + j]);
      hi = Math.max(hi, x[b * QK + j]);
    }
    const dh = f32ToF16((hi - lo) / 15);
    const mh = f32ToF16(lo);
    // Quantize against the float16 values actually stored, so that the
    // decoded weights are the nearest the block can hold.
    const d = f16ToF32(dh);
    const m = f16ToF32(mh);
    const o = b * Q4_1_BYTES;
    out[o] = dh & 0xff;
    out[o + 1] = dh >> 8;
    out[o + 2] = mh & 0xff;
    out[o + 3] = mh >> 8;
    /** @param {number} v */
    const q = (v) => (d ? Math.min(15, Math.max(0, Math.round((v - m) / d))) : 0);
    for (let j = 0; j < 16; j++) out[o + 4 + j] = q(x[b * QK + j]) | (q(x[b * QK + j + 16]) << 4);
  }
  return out;
}

/**
 * Quantizes floats into Q8_0 blocks (d = amax / 127, q = round(x / d)).
 * @param {ArrayLike<number>} x length a multiple of 32
 * @returns {Uint8Array}
 */
function encodeQ8_0(x) {
  checkBlocks({ length: Infinity }, x.length, Q8_0_BYTES, 'Q8_0');
  const out = new Uint8Array((x.length / QK) * Q8_0_BYTES);
  for (let b = 0; b < x.length / QK; b++) {
    let amax = 0;
    for (let j = 0; j < QK; j++) amax = Math.max(amax, Math.abs(x[b * QK + j]));
    const dh = f32ToF16(amax / 127);
    const d = f16ToF32(dh);
    const o = b * Q8_0_BYTES;
    out[o] = dh & 0xff;
    out[o + 1] = dh >> 8;
    for (let j = 0; j < QK; j++) {
      const q = d ? Math.min(127, Math.max(-128, Math.round(x[b * QK + j] / d))) : 0;
      out[o + 2 + j] = q & 0xff;
    }
  }
  return out;
}

/**
 * Q4_1 blocks -> the operands of WebNN's dequantizeLinear: the 4-bit codes
 * packed two per byte in natural element order (element 2k in the low
 * nibble of byte k, WebNN's uint4 packing) and the float16 bits of each
 * block's d (scale) and m (min). No weight is turned into a float.
 * @param {Uint8Array} bytes raw blocks
 * @param {number} n number of weights (a multiple of 32)
 * @returns {{q: Uint8Array, scale: Uint16Array, min: Uint16Array}}
 */
function repackQ4_1(bytes, n) {
  checkBlocks(bytes, n, Q4_1_BYTES, 'Q4_1');
  const nb = n / QK;
  const q = new Uint8Array(n / 2);
  const scale = new Uint16Array(nb);
  const min = new Uint16Array(nb);
  for (let b = 0; b < nb; b++) {
    const o = b * Q4_1_BYTES;
    scale[b] = bytes[o] | (bytes[o + 1] << 8);
    min[b] = bytes[o + 2] | (bytes[o + 3] << 8);
    // GGUF keeps weight j and j+16 in one byte; WebNN wants 2k and 2k+1.
    const qs = o + 4;
    const dst = b * 16;
    for (let k = 0; k < 8; k++) {
      q[dst + k] = (bytes[qs + 2 * k] & 15) | ((bytes[qs + 2 * k + 1] & 15) << 4);
      q[dst + 8 + k] = (bytes[qs + 2 * k] >> 4) | (bytes[qs + 2 * k + 1] & 0xf0);
    }
  }
  return { q, scale, min };
}

/**
 * Q8_0 blocks -> int8 codes and the float16 bits of each block's scale.
 * @param {Uint8Array} bytes raw blocks
 * @param {number} n number of weights (a multiple of 32)
 * @returns {{q: Int8Array, scale: Uint16Array}}
 */
function repackQ8_0(bytes, n) {
  checkBlocks(bytes, n, Q8_0_BYTES, 'Q8_0');
  const nb = n / QK;
  const q = new Int8Array(n);
  const scale = new Uint16Array(nb);
  for (let b = 0; b < nb; b++) {
    const o = b * Q8_0_BYTES;
    scale[b] = bytes[o] | (bytes[o + 1] << 8);
    q.set(new Int8Array(bytes.buffer, bytes.byteOffset + o + 2, QK), b * QK);
  }
  return { q, scale };
}

/**
 * Decodes a tensor of the model interface ({type, dims, read}) to floats,
 * whatever its type. For references and tests.
 * @param {{type: string, dims: number[], read: () => Uint8Array}} t
 * @param {Float64ArrayConstructor|Float32ArrayConstructor} [Type=Float64Array]
 * @returns {Float64Array|Float32Array}
 */
function decodeTensor(t, Type = Float64Array) {
  const n = t.dims.reduce((a, b) => a * b, 1);
  const bytes = t.read();
  switch (t.type) {
    case 'Q4_1': return decodeQ4_1(bytes, n, Type);
    case 'Q8_0': return decodeQ8_0(bytes, n, Type);
    case 'F32': {
      const src = new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + 4 * n));
      return Type.from(src);
    }
    case 'F16': {
      const out = new Type(n);
      for (let i = 0; i < n; i++) out[i] = f16ToF32(bytes[2 * i] | (bytes[2 * i + 1] << 8));
      return out;
    }
    default: throw new TypeError(`tensor type ${t.type} is not supported`);
  }
}

module.exports = {
  QK,
  Q4_1_BYTES,
  Q8_0_BYTES,
  f16ToF32,
  f32ToF16,
  decodeQ4_1,
  decodeQ8_0,
  encodeQ4_1,
  encodeQ8_0,
  repackQ4_1,
  repackQ8_0,
  decodeTensor,
};
