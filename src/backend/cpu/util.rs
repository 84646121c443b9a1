//! Helpers shared by the CPU kernels.

use std::borrow::Cow;

use crate::error::{Error, Result};
use crate::tensor::Buf;
use crate::types::DataType;

/// The elements of a float buffer as f32 (float16 widened; float32
/// borrowed). Errors for integer buffers.
pub fn floats(b: &Buf) -> Result<Cow<'_, [f32]>> {
    match b {
        Buf::F32(v) => Ok(Cow::Borrowed(v)),
        Buf::F16(_) => Ok(Cow::Owned(b.try_to_f32_vec()?)),
        _ => Err(Error::operation("a float kernel got an integer tensor")),
    }
}

/// Stores f32 results as `dt` (float32 as is; float16 rounded once).
pub fn from_floats(dt: DataType, v: Vec<f32>) -> Result<Buf> {
    match dt {
        DataType::Float32 => Ok(Buf::F32(v)),
        DataType::Float16 => Buf::try_f16_from_f32(&v),
        _ => Err(Error::operation(
            "a float kernel produced a non-float output",
        )),
    }
}

/// An empty vector with room for `n` elements, or an OperationError that
/// names the bytes asked for (never an allocation abort). For every
/// allocation whose size follows from a shape, an option or a tensor's
/// contents.
pub fn try_vec<T>(n: usize, what: &str) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| {
        Error::operation(format!(
            "cannot allocate {} bytes for {what}",
            (n as u128) * std::mem::size_of::<T>() as u128
        ))
    })?;
    Ok(v)
}

/// `n` copies of `value`, allocated fallibly ([`try_vec`]).
pub fn try_filled<T: Clone>(n: usize, value: T, what: &str) -> Result<Vec<T>> {
    let mut v = try_vec(n, what)?;
    v.resize(n, value);
    Ok(v)
}

/// A copy of `x`, allocated fallibly ([`try_vec`]).
pub fn try_copy<T: Clone>(x: &[T], what: &str) -> Result<Vec<T>> {
    let mut v = try_vec(x.len(), what)?;
    v.extend_from_slice(x);
    Ok(v)
}

/// A copy of `x` in recycled memory where the pool has some: for kernels
/// that work in place on a borrowed input, at every dispatch. A fresh
/// copy's page faults and unmapping cost more than the copy itself
/// (softmax of 1M values at one thread: 0.73 ms with a fresh copy, 0.61
/// with a recycled one).
pub fn pooled_copy(x: &[f32]) -> Result<Vec<f32>> {
    let mut v = Buf::try_f32_for_overwrite(x.len())?;
    v.copy_from_slice(x);
    Ok(v)
}

/// Row-major strides of a shape.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Strides for reading a tensor of `shape` broadcast to `out` (0 on
/// broadcast dimensions), aligned to the right.
pub fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let s = strides(shape);
    let off = out.len() - shape.len();
    (0..out.len())
        .map(|i| {
            if i < off || shape[i - off] == 1 {
                0
            } else {
                s[i - off]
            }
        })
        .collect()
}

/// `out` and each operand's element strides over it (as
/// [`broadcast_strides`] gives them) with dimensions of one element left
/// out and neighbouring dimensions merged wherever every operand walks
/// them as one (its stride over the outer one is the inner one's times the
/// inner one's size, 0 and 0 included): the same elements in the same
/// order, in as few dimensions as can hold them, so an elementwise loop
/// runs along longer rows. RoPE's `[1, 12, 32, 2]` times `[1, 1, 32, 2]`
/// becomes 12 rows of 64 instead of 384 rows of 2. At least one
/// dimension is kept.
pub fn coalesce<const N: usize>(
    out: &[usize],
    strides: [&[usize]; N],
) -> (Vec<usize>, [Vec<usize>; N]) {
    // A rank's worth of entries each, grown as they are pushed.
    let mut shape: Vec<usize> = Vec::new();
    let mut st: [Vec<usize>; N] = std::array::from_fn(|_| Vec::new());
    // Built innermost first, reversed at the end.
    for d in (0..out.len()).rev() {
        if out[d] == 1 {
            continue;
        }
        let merges = match shape.last() {
            Some(&g) => (0..N).all(|o| strides[o][d] == st[o].last().copied().unwrap_or(0) * g),
            None => false,
        };
        match merges {
            true => {
                if let Some(g) = shape.last_mut() {
                    *g *= out[d];
                }
            }
            false => {
                shape.push(out[d]);
                for o in 0..N {
                    st[o].push(strides[o][d]);
                }
            }
        }
    }
    if shape.is_empty() {
        shape.push(1);
        for s in st.iter_mut() {
            s.push(0);
        }
    }
    shape.reverse();
    for s in st.iter_mut() {
        s.reverse();
    }
    (shape, st)
}

/// The 4 x 4 transpose of four SSE vectors (x86-64's baseline): vector
/// `r` of the result holds lane `r` of each input, in order. Shuffles
/// only, so any 32-bit values move as bits.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(in crate::backend::cpu) fn transpose4x4(
    x: [std::arch::x86_64::__m128; 4],
) -> [std::arch::x86_64::__m128; 4] {
    use std::arch::x86_64::*;
    // SAFETY: the intrinsics need only SSE, part of x86-64's baseline;
    // they move register values and touch no memory.
    unsafe {
        let (t0, t1) = (_mm_unpacklo_ps(x[0], x[1]), _mm_unpacklo_ps(x[2], x[3]));
        let (t2, t3) = (_mm_unpackhi_ps(x[0], x[1]), _mm_unpackhi_ps(x[2], x[3]));
        [
            _mm_movelh_ps(t0, t1),
            _mm_movehl_ps(t1, t0),
            _mm_movelh_ps(t2, t3),
            _mm_movehl_ps(t3, t2),
        ]
    }
}

#[cfg(test)]
mod coalesce_tests {
    use super::{broadcast_strides, coalesce};

    /// Every element's offsets in each operand, in the output's order.
    fn walk(shape: &[usize], st: &[&[usize]]) -> Vec<Vec<usize>> {
        let total: usize = shape.iter().product();
        (0..total)
            .map(|mut r| {
                let mut off = vec![0; st.len()];
                for d in (0..shape.len()).rev() {
                    let i = r % shape[d];
                    r /= shape[d];
                    for (o, s) in st.iter().enumerate() {
                        off[o] += i * s[d];
                    }
                }
                off
            })
            .collect()
    }

    #[test]
    fn coalesced_dimensions_walk_the_same_elements() {
        let cases: &[(&[usize], &[usize], &[usize])] = &[
            (&[1, 12, 32, 2], &[1, 12, 32, 2], &[1, 1, 32, 2]),
            (&[3, 4, 5], &[3, 4, 5], &[5]),
            (&[3, 4, 5], &[3, 1, 5], &[4, 1]),
            (&[2, 3], &[1], &[2, 3]),
            (&[1, 1], &[1, 1], &[1]),
            (&[6, 1, 7], &[6, 1, 1], &[1, 1, 7]),
            (&[2, 2, 2, 2], &[2, 1, 2, 2], &[2, 2, 2, 2]),
        ];
        for &(out, sa, sb) in cases {
            let (ta, tb) = (broadcast_strides(sa, out), broadcast_strides(sb, out));
            let (shape, [ca, cb]) = coalesce(out, [&ta, &tb]);
            assert_eq!(
                shape.iter().product::<usize>(),
                out.iter().product::<usize>()
            );
            assert!(shape.len() <= out.len().max(1));
            assert_eq!(
                walk(&shape, &[&ca, &cb]),
                walk(out, &[&ta, &tb]),
                "{out:?} {sa:?} {sb:?}"
            );
        }
        let (ta, tb) = (
            broadcast_strides(&[1, 12, 32, 2], &[1, 12, 32, 2]),
            broadcast_strides(&[1, 1, 32, 2], &[1, 12, 32, 2]),
        );
        assert_eq!(coalesce(&[1, 12, 32, 2], [&ta, &tb]).0, vec![12, 64]);
    }
}
