//! float16 element-wise loops: each operand widened to f32 a chunk at a
//! time, computed in f32 and rounded once, into the float16 result. The
//! f32 values of a chunk live in two small scratch arrays that stay in
//! the first-level cache, rather than in whole-tensor copies: those were
//! three fresh 4 MB vectors for an add of 1M halves, whose page faults and
//! unmapping made it 6.7 ms against 0.15 for its float32 twin (one
//! thread, AVX-512 Zen 5).

use rayon::prelude::*;

use crate::error::Result;
use crate::tensor::Buf;

use super::{with_simd, PAR_MIN};

/// Elements per chunk: 8 KiB of f32 per operand.
const CHUNK: usize = 2048;

/// Halves as f32 into `out` (as long as `h`), exactly as [`f16_to_f32`]
/// gives each value (F16C where the CPU has it): F16C quiets a
/// signalling NaN, which the software conversion keeps signalling (as a
/// float32 graph holds it), and some functions tell the two apart
/// (`pow(sNaN, 0)` is NaN, `pow(qNaN, 0)` is 1), so those values get
/// their quiet bit cleared again (F16C sets it and keeps the payload; the
/// software conversion shifts the payload as it is). A select per value,
/// on whole vectors.
///
/// [`f16_to_f32`]: crate::f16::f16_to_f32
pub(super) fn widen_exact(h: &[u16], out: &mut [f32]) {
    crate::f16::widen(h, out);
    with_simd(
        #[inline(always)]
        || {
            for (o, &x) in out.iter_mut().zip(h) {
                // Exponent all ones, quiet bit clear, payload not zero.
                let signalling = (x & 0x7e00 == 0x7c00) & (x & 0x01ff != 0);
                *o = f32::from_bits(o.to_bits() & !((signalling as u32) << 22));
            }
        },
    )
}

/// Elements per task: whole chunks, about four tasks a thread, for inputs
/// large enough to split; `n` (one task) otherwise.
fn per_task(n: usize) -> usize {
    let threads = rayon::current_num_threads();
    if n >= PAR_MIN && threads > 1 {
        n.div_ceil(threads * 4).div_ceil(CHUNK).max(1) * CHUNK
    } else {
        n.max(1)
    }
}

/// `f` of each pair of equal-length float16 operands, in f32, rounded
/// once to float16.
pub(in crate::backend::cpu) fn zip_halves<F: Fn(f32, f32) -> f32 + Sync>(
    x: &[u16],
    y: &[u16],
    f: F,
) -> Result<Vec<u16>> {
    let mut out = Buf::try_f16_for_overwrite(x.len())?;
    let run = |((o, x), y): ((&mut [u16], &[u16]), &[u16])| {
        let (mut a, mut b) = ([0.0f32; CHUNK], [0.0f32; CHUNK]);
        for ((o, x), y) in o
            .chunks_mut(CHUNK)
            .zip(x.chunks(CHUNK))
            .zip(y.chunks(CHUNK))
        {
            let (a, b) = (&mut a[..o.len()], &mut b[..o.len()]);
            widen_exact(x, a);
            widen_exact(y, b);
            with_simd(
                #[inline(always)]
                || {
                    for (p, &q) in a.iter_mut().zip(&*b) {
                        *p = f(*p, q);
                    }
                },
            );
            crate::f16::narrow(a, o);
        }
    };
    let per = per_task(x.len());
    if per < x.len() {
        out.par_chunks_mut(per)
            .zip(x.par_chunks(per))
            .zip(y.par_chunks(per))
            .for_each(run);
    } else {
        run(((&mut out, x), y));
    }
    Ok(out)
}

/// `f` of each float16 value, in f32, rounded once to float16.
pub(in crate::backend::cpu) fn map_halves<F: Fn(f32) -> f32 + Sync>(
    x: &[u16],
    f: F,
) -> Result<Vec<u16>> {
    let mut out = Buf::try_f16_for_overwrite(x.len())?;
    let run = |(o, x): (&mut [u16], &[u16])| {
        let mut a = [0.0f32; CHUNK];
        for (o, x) in o.chunks_mut(CHUNK).zip(x.chunks(CHUNK)) {
            let a = &mut a[..o.len()];
            widen_exact(x, a);
            with_simd(
                #[inline(always)]
                || {
                    for p in a.iter_mut() {
                        *p = f(*p);
                    }
                },
            );
            crate::f16::narrow(a, o);
        }
    };
    let per = per_task(x.len());
    if per < x.len() {
        out.par_chunks_mut(per).zip(x.par_chunks(per)).for_each(run);
    } else {
        run((&mut out, x));
    }
    Ok(out)
}
