'use strict';
// A reader for the safetensors format: an 8-byte little-endian header
// length N, N bytes of JSON that map each tensor's name to its dtype, shape
// and [begin, end) byte range, then the tensors' bytes. Everything is checked
// against the file before it is used, so a truncated or malformed file gives
// an Error naming what is wrong instead of a wrong tensor.

const fs = require('fs');
const os = require('os');

const LITTLE_ENDIAN = os.endianness() === 'LE';

// Bytes per element of the dtypes the format names.
const DTYPE_BYTES = {
  F64: 8, F32: 4, F16: 2, BF16: 2,
  I64: 8, I32: 4, I16: 2, I8: 1,
  U64: 8, U32: 4, U16: 2, U8: 1,
  BOOL: 1,
};

// A header larger than this is not a model header but a corrupt length.
const MAX_HEADER = 100 * 1024 * 1024;

/**
 * Reads a .safetensors file. Returns `{ metadata, tensors }`, where
 * `tensors` maps each name to `{ dtype, shape, bytes }` (`bytes` a Uint8Array
 * view of the file's buffer, not a copy).
 */
function readSafetensors(file) {
  const buf = fs.readFileSync(file);
  if (buf.length < 8) throw new Error(`${file}: too short for a safetensors header`);
  const headerLength = buf.readBigUInt64LE(0);
  if (headerLength > BigInt(Math.min(MAX_HEADER, buf.length - 8))) {
    throw new Error(`${file}: header length ${headerLength} does not fit the file (${buf.length} bytes)`);
  }
  const start = 8 + Number(headerLength);
  let header;
  try {
    header = JSON.parse(buf.toString('utf8', 8, start));
  } catch (e) {
    throw new Error(`${file}: the header is not JSON (${e.message})`);
  }
  if (header === null || typeof header !== 'object' || Array.isArray(header)) {
    throw new Error(`${file}: the header is not a JSON object`);
  }
  const dataLength = buf.length - start;
  const metadata = header.__metadata__ || {};
  const tensors = new Map();
  for (const [name, info] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const where = `${file}: tensor ${name}`;
    const width = DTYPE_BYTES[info && info.dtype];
    if (!width) throw new Error(`${where}: unknown dtype ${info && info.dtype}`);
    const { shape, data_offsets: offsets } = info;
    if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
      throw new Error(`${where}: bad shape ${JSON.stringify(shape)}`);
    }
    if (!Array.isArray(offsets) || offsets.length !== 2 || !offsets.every(Number.isSafeInteger)) {
      throw new Error(`${where}: bad data_offsets ${JSON.stringify(offsets)}`);
    }
    const [begin, end] = offsets;
    const size = shape.reduce((a, b) => a * b, 1);
    if (begin < 0 || end < begin || end > dataLength || end - begin !== size * width) {
      throw new Error(`${where}: bytes [${begin}, ${end}) do not hold ${info.dtype}${JSON.stringify(shape)} in ${dataLength} data bytes`);
    }
    tensors.set(name, { dtype: info.dtype, shape, bytes: buf.subarray(start + begin, start + end) });
  }
  return { metadata, tensors };
}

// float16 bit pattern -> number.
function halfToFloat(h) {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const frac = h & 0x3ff;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 31) return frac ? NaN : sign * Infinity;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}

/**
 * A tensor's values as a fresh, aligned Float32Array, converting F16 and
 * BF16 (checkpoints are also published in those). Other dtypes throw.
 */
function toFloat32(tensor) {
  const { dtype, bytes } = tensor;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (dtype === 'F32') {
    const out = new Float32Array(bytes.byteLength / 4);
    if (LITTLE_ENDIAN) {
      // The file's bytes are the array's bytes: one copy, which also aligns.
      new Uint8Array(out.buffer).set(bytes);
    } else {
      for (let i = 0; i < out.length; i++) out[i] = view.getFloat32(i * 4, true);
    }
    return out;
  }
  if (dtype === 'F16' || dtype === 'BF16') {
    const out = new Float32Array(bytes.byteLength / 2);
    const bits = new Uint32Array(1);
    const asFloat = new Float32Array(bits.buffer);
    for (let i = 0; i < out.length; i++) {
      const h = view.getUint16(i * 2, true);
      if (dtype === 'F16') {
        out[i] = halfToFloat(h);
      } else {
        // bfloat16 is the top half of a float32.
        bits[0] = h << 16;
        out[i] = asFloat[0];
      }
    }
    return out;
  }
  throw new Error(`cannot read a ${dtype} tensor as float32`);
}

module.exports = { readSafetensors, toFloat32 };
