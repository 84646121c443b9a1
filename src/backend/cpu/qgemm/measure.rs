//! How close a decoding step's quantized products come to the memory's
//! limit: the bytes of weights (codes and scales) that the one-row
//! product reads per second, against what a plain read loop over the same
//! number of bytes reads per second in the same process, on the same
//! threads, just after. A language model's decoding step reads every
//! weight once per token, so its speed is bounded by the second figure;
//! the benchmark prints both (`bench/llm.js`).
//!
//! The matrices are of a small model's shape (1,536 by 576 weights in
//! 4-bit blocks with float16 scales, as SmolLM2's feed-forward ones), as
//! many as the bytes asked for, multiplied one after another as a step
//! does, so that a total larger than the caches streams from memory as a
//! real step's weights do.

use std::hint::black_box;
use std::time::{Duration, Instant};

use rayon::prelude::*;

use super::{kernels, product, try_alloc, QMatrix, QK};
use crate::error::{Error, Result};

/// Weight rows and the reduction length of each matrix.
const N: usize = 1536;
const K: usize = 576;

/// One measurement (see the module comment), in bytes per second.
#[derive(Clone, Copy, Debug)]
pub struct GemvRate {
    /// The quantized kernels' name ([`kernels::isa_name`]).
    pub isa: &'static str,
    /// Bytes of weights the one-row products read per second.
    pub weights: f64,
    /// Bytes a read loop over as many bytes reads per second.
    pub read: f64,
    /// The bytes of weights in all (whole matrices, at least the bytes
    /// asked for).
    pub bytes: usize,
}

/// Measures on `threads` threads over about `bytes` bytes of weights,
/// each figure the best of three runs of about `run` after a warm-up.
pub fn measure_gemv(threads: usize, bytes: usize, run: Duration) -> Result<GemvRate> {
    let nb = K / QK;
    let per_matrix = N * K / 2 + N * nb * 2;
    let count = bytes.div_ceil(per_matrix).max(1);
    // Codes and scales of no particular pattern (a multiplicative hash);
    // scales that are float16 values, as a GGUF file's.
    let hash = |i: usize, salt: usize| (i ^ salt).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
    let mut matrices = Vec::new();
    matrices
        .try_reserve_exact(count)
        .map_err(|_| Error::operation("measure: cannot allocate the matrices"))?;
    for m in 0..count {
        let d = (0..N * nb)
            .map(|i| (1 + hash(i, m) % 255) as f32 / 4096.0)
            .collect();
        let q = QMatrix::pack(
            N,
            K,
            false,
            |i| (hash(i, m + 7) % 16) as i32,
            d,
            vec![0.0; N * nb],
        )?;
        matrices.push(q);
    }
    // One row of activations that are int8 codes times a power-of-two
    // scale per block (each block's largest 127), as a graph with
    // llama.cpp's numerics gives: the integer kernels take it.
    let a: Vec<f32> = (0..K)
        .map(|i| match i % QK {
            0 => 127.0 / 64.0,
            _ => ((hash(i, 3) % 255) as f32 - 127.0) / 64.0,
        })
        .collect();
    let buffer = try_alloc(count * per_matrix / 8, 1u64, "the read loop's buffer")?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .build()
        .map_err(|e| Error::operation(format!("measure: no thread pool: {e}")))?;
    let total = (count * per_matrix) as f64;
    let best = |f: &mut dyn FnMut() -> Result<()>| -> Result<f64> {
        let mut best = 0f64;
        for round in 0..4 {
            let start = Instant::now();
            let mut passes = 0u32;
            while start.elapsed() < run || passes == 0 {
                f()?;
                passes += 1;
            }
            let secs = start.elapsed().as_secs_f64();
            // Round 0 is the warm-up.
            if round > 0 {
                best = best.max(total * passes as f64 / secs);
            }
        }
        Ok(best)
    };
    let mut c = vec![0f32; N];
    let weights = pool.install(|| {
        best(&mut || {
            for q in &matrices {
                // One product at a time, as a step's graph runs them;
                // each spreads its rows over the pool's threads.
                product(1, &a, q, &mut c)?;
            }
            Ok(())
        })
    })?;
    let read = pool.install(|| {
        best(&mut || {
            // The same bytes in one pass, the threads each a share.
            let chunk = buffer
                .len()
                .div_ceil(rayon::current_num_threads() * 4)
                .max(1);
            let sum: u64 = buffer
                .par_chunks(chunk)
                .map(|c| c.iter().fold(0u64, |s, &x| s.wrapping_add(x)))
                .reduce(|| 0, u64::wrapping_add);
            black_box(sum);
            Ok(())
        })
    })?;
    Ok(GemvRate {
        isa: kernels::isa_name(),
        weights,
        read,
        bytes: count * per_matrix,
    })
}
