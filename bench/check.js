'use strict';
// The output check of both benchmarks: bench/run.js compares webnn-node
// with onnxruntime-node, bench/gpu.js the GPU backend with the CPU backend.
//
// maxRelativeError(ours, reference) is max |ours - reference| /
// max(|reference|, floor) over every output, with floor =
// max(REL_FLOOR, RMS_FRACTION * rms(reference)) per output; each script
// compares it with its own limit. The floor keeps elements that are
// (nearly) zero from turning rounding noise into huge relative errors: two
// correct float32 dot products of a few hundred terms, summed in different
// orders, differ by ~1e-6 of the output's scale, which near a zero output
// would read as 1e-2 "relative" error. Below the floor the test is an
// absolute one: the limit times a tenth of the output's RMS.

const REL_FLOOR = 1e-3;
const RMS_FRACTION = 0.1;

// `ours` and `reference` map output names to arrays; a missing output or
// one of another length is an infinite error.
function maxRelativeError(ours, reference) {
  let worst = 0;
  for (const name in reference) {
    const a = ours[name];
    const b = reference[name];
    if (!a || a.length !== b.length) return Infinity;
    let sumSquares = 0;
    for (let i = 0; i < b.length; i++) sumSquares += b[i] * b[i];
    const floor = Math.max(REL_FLOOR, RMS_FRACTION * Math.sqrt(sumSquares / b.length));
    for (let i = 0; i < b.length; i++) {
      const err = Math.abs(a[i] - b[i]) / Math.max(Math.abs(b[i]), floor);
      // NaN anywhere (either side) counts as a mismatch: comparisons with
      // NaN are false, so test for it explicitly.
      if (!(err <= worst)) worst = Number.isNaN(err) ? Infinity : err;
    }
  }
  return worst;
}

module.exports = { REL_FLOOR, RMS_FRACTION, maxRelativeError };
