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

use super::{broadcast_map, units_per_task, with_simd};

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

/// Elements per task: whole chunks split across the pool for inputs
/// large enough (see [`units_per_task`]); at least `n` (one task)
/// otherwise.
fn per_task(n: usize) -> usize {
    units_per_task(n, n.div_ceil(CHUNK)) * CHUNK
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
            let b = &mut b[..o.len()];
            widen_exact(y, b);
            zip_chunk(o, x, b, &mut a, &f);
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

/// One chunk of a binary float16 loop: `x` widened (exactly) into the
/// scratch `a`, `f` of each value and its partner in `b` (already f32),
/// rounded once into `o`. `o`, `x` and `b` are as long, at most `CHUNK`.
#[inline(always)]
fn zip_chunk<F: Fn(f32, f32) -> f32>(
    o: &mut [u16],
    x: &[u16],
    b: &[f32],
    a: &mut [f32; CHUNK],
    f: &F,
) {
    let a = &mut a[..o.len()];
    widen_exact(x, a);
    with_simd(
        #[inline(always)]
        || {
            for (p, &q) in a.iter_mut().zip(b) {
                *p = f(*p, q);
            }
        },
    );
    crate::f16::narrow(a, o);
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

/// The shortest row [`broadcast_halves`] walks a chunk at a time: shorter
/// rows would leave each chunk only a few elements.
const ROW_MIN: usize = 64;

/// Whether an operand of shape `s` meets the output (shape `so`) as one
/// row repeated: its dimensions, leading ones dropped, are `so`'s last.
fn is_row(s: &[usize], so: &[usize]) -> bool {
    let lead = s.iter().take_while(|&&d| d == 1).count();
    so.ends_with(&s[lead..])
}

/// `f` of float16 operands broadcast to `so` (numpy rules), in f32 and
/// rounded once to float16. One operand of the output's shape and the
/// other a row (a bias over the last dimensions) go a chunk at a time
/// (as [`zip_halves`]), the row widened once; other shapes widen each
/// operand whole (exactly, as [`widen_exact`]) for `broadcast_map`'s
/// walk, and give the three f32 vectors back to the pool: taken from it
/// and dropped, they were fresh memory, faulted in and unmapped again,
/// at every dispatch.
pub(in crate::backend::cpu) fn broadcast_halves<F: Fn(f32, f32) -> f32 + Sync>(
    x: &[u16],
    sx: &[usize],
    y: &[u16],
    sy: &[usize],
    so: &[usize],
    f: F,
) -> Result<Vec<u16>> {
    let widen = |h: &[u16]| -> Result<Vec<f32>> {
        let mut v = Buf::try_f32_for_overwrite(h.len())?;
        widen_exact(h, &mut v);
        Ok(v)
    };
    if sx == so && y.len() >= ROW_MIN && is_row(sy, so) {
        return zip_rows(x, widen(y)?, f);
    }
    if sy == so && x.len() >= ROW_MIN && is_row(sx, so) {
        return zip_rows(y, widen(x)?, move |b, a| f(a, b));
    }
    let (a, b) = (widen(x)?, widen(y)?);
    let r = broadcast_map(&a, sx, &b, sy, so, f)?;
    let mut out = Buf::try_f16_for_overwrite(r.len())?;
    crate::f16::narrow(&r, &mut out);
    for v in [a, b, r] {
        Buf::F32(v).recycle();
    }
    Ok(out)
}

/// `f(x[i], row[i % row.len()])` rounded to float16: `x` whole rows of
/// `row`'s length (as f32, exactly widened), a chunk at a time; the row
/// goes back to the pool.
fn zip_rows<F: Fn(f32, f32) -> f32 + Sync>(x: &[u16], row: Vec<f32>, f: F) -> Result<Vec<u16>> {
    let (n, r) = (row.len(), &row[..]);
    let mut out = Buf::try_f16_for_overwrite(x.len())?;
    let run = |(o, x): (&mut [u16], &[u16])| {
        let mut a = [0.0f32; CHUNK];
        for (o, x) in o.chunks_mut(n).zip(x.chunks(n)) {
            for ((o, x), r) in o
                .chunks_mut(CHUNK)
                .zip(x.chunks(CHUNK))
                .zip(r.chunks(CHUNK))
            {
                zip_chunk(o, x, r, &mut a, &f);
            }
        }
    };
    // Whole rows per task.
    let per = units_per_task(x.len(), x.len() / n) * n;
    if per < x.len() {
        out.par_chunks_mut(per).zip(x.par_chunks(per)).for_each(run);
    } else {
        run((&mut out, x));
    }
    Buf::F32(row).recycle();
    Ok(out)
}
