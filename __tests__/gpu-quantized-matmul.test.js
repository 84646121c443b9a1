'use strict';
// Products over quantized constant weights on the GPU backend: the forms
// that lib/llm/graphs.js writes (uint4 codes with a float16 scale per
// block of 32 and Q4_1's minimum added after; int8 codes) give the CPU
// backend's results. The GPU backend runs these as one shader over the
// packed codes (src/backend/gpu/qmatmul.rs; its Rust tests check that the
// fused path is taken); here the public API is checked end to end.

const { ml } = require('..');
const { buildGraph, dispatchGraph, expectClose, values, gpuProbe } = require('./helpers');

const probe = gpuProbe();
const gpuTest = probe.ok ? test : test.skip;
if (!probe.ok) console.log(`GPU tests skipped: ${probe.why}`);

// float16 bits of (1 + f/8) * 2^-6 * sign (f in 0..7), or of 0: exact
// values, so that no float16 rounding is needed here.
function halfScales(n, seed) {
  const v = values(n, seed, 1);
  return Uint16Array.from(v, (x, i) => {
    if (i % 7 === 3) return 0;
    const f = Math.min(7, Math.floor(Math.abs(x) * 8));
    return (x < 0 ? 0x8000 : 0) | (9 << 10) | (f << 7);
  });
}

// `n` codes in 0..15 packed two a byte, the first in the low half.
function uint4Codes(n, seed) {
  const v = values(n, seed, 1);
  const out = new Uint8Array(Math.ceil(n / 2));
  for (let i = 0; i < n; i++) {
    const c = Math.min(15, Math.floor((v[i] + 1) * 8));
    out[i >> 1] |= c << (4 * (i & 1));
  }
  return out;
}

// The graph of one linear layer: x [M, K] times weights [N, K] given as
// `form` ('q4_1': uint4 codes, float16 scales per block of 32, the
// block's minimum added; 'q8_0': int8 codes with an int8 zero point, read
// through a transpose by matmul).
function layer(b, form, M, N, K) {
  const x = b.input('x', { dataType: 'float32', shape: [M, K] });
  const nb = K / 32;
  const scale = b.cast(b.constant({ dataType: 'float16', shape: [N, nb] }, halfScales(N * nb, 2)), 'float32');
  if (form === 'q4_1') {
    const q = b.constant({ dataType: 'uint4', shape: [N, K] }, uint4Codes(N * K, 1));
    const zp = b.constant({ dataType: 'uint4', shape: [N, nb] }, uint4Codes(N * nb, 3));
    const w = b.dequantizeLinear(q, scale, zp);
    const min = b.cast(b.constant({ dataType: 'float16', shape: [N, nb] }, halfScales(N * nb, 4)), 'float32');
    const sum = b.add(b.reshape(w, [N, nb, 32]), b.reshape(min, [N, nb, 1]));
    return { y: b.gemm(x, b.reshape(sum, [N, K]), { bTranspose: true }) };
  }
  const q = b.constant({ dataType: 'int8', shape: [N, K] }, Int8Array.from(values(N * K, 5, 127), Math.round));
  const zp = b.constant({ dataType: 'int8', shape: [N, nb] }, Int8Array.from(values(N * nb, 6, 20), Math.round));
  return { y: b.matmul(x, b.transpose(b.dequantizeLinear(q, scale, zp))) };
}

async function runOn(deviceType, form, M, N, K) {
  const ctx = await ml.createContext({ deviceType });
  try {
    const { graph, outputs } = await buildGraph(ctx, (b) => layer(b, form, M, N, K));
    const x = { dataType: 'float32', shape: [M, K], data: values(M * K, 7, 2) };
    const r = await dispatchGraph(ctx, graph, { x }, outputs);
    graph.destroy();
    return r.y;
  } finally {
    ctx.destroy();
  }
}

describe('quantized weights on the GPU', () => {
  for (const form of ['q4_1', 'q8_0']) {
    for (const M of [1, 5]) {
      gpuTest(`${form}, ${M} row(s): the CPU backend's result`, async () => {
        const [N, K] = [40, 96];
        const want = await runOn('cpu', form, M, N, K);
        const got = await runOn('gpu', form, M, N, K);
        expect(got.length).toBe(M * N);
        expectClose(got, Array.from(want), 1e-4);
      });
    }
  }
});
