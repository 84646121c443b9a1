//! CPU kernels: quantizeLinear and dequantizeLinear.
//!
//! quantizeLinear: `saturate(roundEven(x / scale) + zeroPoint)` to the zero
//! point's type; dequantizeLinear: `(x - zeroPoint) * scale`. Scale and zero
//! point are read blockwise: input element at coordinates `c` uses the
//! scale element at `c / block` (scale aligned to the input's trailing
//! dimensions).

use crate::error::{Error, Result};
use crate::graph::ops::quantize::QuantizeOp;
use crate::tensor::Buf;
use crate::types::{DataType, OperandDescriptor};

use super::simd::with_simd;
use super::util::{floats, from_floats};

/// For every input element (row-major), the index of its scale element.
fn scale_indices(shape: &[usize], block: &[usize], scale_len: usize) -> Result<Vec<usize>> {
    let bad = || Error::operation("quantize: the scale does not match the parameters");
    if block.len() != shape.len() || block.contains(&0) {
        return Err(bad());
    }
    // The scale's own shape (input dims / block) and its row-major strides.
    let sshape: Vec<usize> = shape.iter().zip(block).map(|(s, b)| s / b).collect();
    if sshape.iter().product::<usize>() != scale_len {
        return Err(bad());
    }
    let sst = super::util::strides(&sshape);
    let n: usize = shape.iter().product();
    Ok((0..n)
        .map(|i| {
            let (mut rem, mut k) = (i, 0);
            for d in (0..shape.len()).rev() {
                k += (rem % shape[d]) / block[d] * sst[d];
                rem /= shape[d];
            }
            k
        })
        .collect())
}

/// The value range of a quantized type.
fn range(dt: DataType) -> Option<(f64, f64)> {
    Some(match dt {
        DataType::Uint8 => (0.0, 255.0),
        DataType::Int8 => (-128.0, 127.0),
        DataType::Uint4 => (0.0, 15.0),
        DataType::Int4 => (-8.0, 7.0),
        DataType::Uint32 => (0.0, u32::MAX as f64),
        DataType::Int32 => (i32::MIN as f64, i32::MAX as f64),
        _ => return None,
    })
}

/// Stores already rounded and saturated values as `dt`.
fn to_ints(dt: DataType, v: impl Iterator<Item = f64>) -> Result<Buf> {
    Ok(match dt {
        DataType::Uint8 | DataType::Uint4 => Buf::U8(v.map(|x| x as u8).collect()),
        DataType::Int8 | DataType::Int4 => Buf::I8(v.map(|x| x as i8).collect()),
        DataType::Uint32 => Buf::U32(v.map(|x| x as u32).collect()),
        DataType::Int32 => Buf::I32(v.map(|x| x as i32).collect()),
        _ => return Err(Error::operation("quantizeLinear: not a quantized type")),
    })
}

/// Runs one operator of this family; returns one buffer per output.
pub fn run(
    op: &QuantizeOp,
    inputs: &[&Buf],
    in_descs: &[&OperandDescriptor],
    out_descs: &[OperandDescriptor],
) -> Result<Vec<Buf>> {
    let bad = || Error::operation("quantize: the operands do not match the parameters");
    let out = out_descs.first().ok_or_else(bad)?;
    let d = in_descs.first().ok_or_else(bad)?;
    if inputs.len() < 3 {
        return Err(bad());
    }
    let (x, scale, zero) = (inputs[0], inputs[1], inputs[2]);
    if x.len() != d.element_count() || scale.len() != zero.len() {
        return Err(bad());
    }
    let block = match op {
        QuantizeOp::Quantize { block } | QuantizeOp::Dequantize { block } => block,
    };
    let s = floats(scale)?;
    // The per-element table of scale indices, for the general paths.
    let table = || -> Result<(Vec<usize>, Vec<f64>)> {
        let idx = scale_indices(&d.shape, block, scale.len())?;
        Ok((idx, (0..zero.len()).map(|i| zero.get_f64(i)).collect()))
    };
    let buf = match op {
        QuantizeOp::Quantize { .. } if out.data_type.bits() <= 8 => {
            quantize_bytes(&floats(x)?, &d.shape, block, &s, zero, out.data_type)?
        }
        QuantizeOp::Quantize { .. } => {
            let (idx, zp) = table()?;
            let (lo, hi) = range(out.data_type).ok_or_else(bad)?;
            let xv = floats(x)?;
            to_ints(
                out.data_type,
                xv.iter().zip(&idx).map(|(&v, &k)| {
                    // The division is the input type's (f32; float16 is
                    // computed in f32); NaN saturates to 0 in the casts.
                    let q = (v / s[k]) as f64;
                    (q.round_ties_even() + zp[k]).clamp(lo, hi)
                }),
            )?
        }
        QuantizeOp::Dequantize { .. } if matches!(x, Buf::U8(_) | Buf::I8(_)) => from_floats(
            out.data_type,
            dequantize_bytes(x, &d.shape, block, &s, zero)?,
        )?,
        QuantizeOp::Dequantize { .. } => {
            // x - zeroPoint is exact in f64 for every quantized type, so
            // the result is rounded once, to the scale's type.
            let (idx, zp) = table()?;
            let r: Vec<f32> = idx
                .iter()
                .enumerate()
                .map(|(i, &k)| ((x.get_f64(i) - zp[k]) * s[k] as f64) as f32)
                .collect();
            from_floats(out.data_type, r)?
        }
    };
    Ok(vec![buf])
}

/// dequantizeLinear of 8- and 4-bit integers (held as `u8`/`i8`), the
/// weights of quantized models: row by row of the last dimension, the
/// scale's row found once per row and its element once per block, rather
/// than a table of one index per element; in parallel over rows. In f32:
/// `x - zeroPoint` is exact for these types (|x| < 2^9), so the product is
/// the same correctly rounded value as the general path's in f64.
fn dequantize_bytes(
    x: &Buf,
    shape: &[usize],
    block: &[usize],
    scale: &[f32],
    zero: &Buf,
) -> Result<Vec<f32>> {
    use rayon::prelude::*;
    let bad = || Error::operation("dequantizeLinear: the scale does not match the parameters");
    let rank = shape.len();
    if block.len() != rank || block.contains(&0) {
        return Err(bad());
    }
    let sshape: Vec<usize> = shape.iter().zip(block).map(|(s, b)| s / b).collect();
    if sshape.iter().product::<usize>() != scale.len() || zero.len() != scale.len() {
        return Err(bad());
    }
    let zp: Vec<f32> = (0..zero.len()).map(|i| zero.get_f64(i) as f32).collect();
    let rows = Rows::new(shape, block, &sshape, scale, &zp);
    let n: usize = shape.iter().product();
    let mut out = crate::tensor::Buf::try_f32_for_overwrite(n)?;
    // Rows per task: about 64 K elements.
    let per = ((1 << 16) / rows.cols.max(1)).max(1) * rows.cols.max(1);
    let run = |(t, chunk): (usize, &mut [f32])| match x {
        Buf::U8(v) => rows.fill(v, chunk, t * per / rows.cols.max(1)),
        Buf::I8(v) => rows.fill(v, chunk, t * per / rows.cols.max(1)),
        // Refused before the split: nothing to write.
        _ => {}
    };
    match x {
        Buf::U8(_) | Buf::I8(_) => {}
        _ => {
            return Err(Error::operation(
                "dequantizeLinear: not an 8- or 4-bit input",
            ))
        }
    }
    if n >= 1 << 16 {
        out.par_chunks_mut(per).enumerate().for_each(run);
    } else if n > 0 {
        out.chunks_mut(per).enumerate().for_each(run);
    }
    Ok(out)
}

/// `x.round_ties_even()`, without the library call that it compiles to
/// on x86-64's baseline (no SSE4.1 rounding instruction): adding and
/// taking away 2^23 with `x`'s sign leaves `x` rounded to an integer in
/// the default rounding mode (to nearest, ties to even) for |x| < 2^23,
/// where the sum's last bit is worth 1; larger values are integers
/// already, and NaN and the infinities pass through. A zero result is
/// +0, as an integer conversion's is. Plain arithmetic, a compare and a
/// select, so a loop of it runs on vectors.
#[inline(always)]
pub(in crate::backend::cpu) fn round_even_f32(x: f32) -> f32 {
    const TWO23: f32 = 8_388_608.0; // 2^23
    let s = if x < 0.0 { -TWO23 } else { TWO23 };
    if x.abs() < TWO23 {
        (x + s) - s
    } else {
        x
    }
}

/// quantizeLinear to 8- and 4-bit integers (held as `u8`/`i8`), the
/// activations that quantized models round: row by row of the last
/// dimension as [`dequantize_bytes`] reads them, without a table of one
/// index per element; in parallel over rows. The same values as the
/// general path.
fn quantize_bytes(
    x: &[f32],
    shape: &[usize],
    block: &[usize],
    scale: &[f32],
    zero: &Buf,
    dt: DataType,
) -> Result<Buf> {
    use rayon::prelude::*;
    let bad = || Error::operation("quantizeLinear: the scale does not match the parameters");
    let rank = shape.len();
    let n: usize = shape.iter().product();
    if block.len() != rank || block.contains(&0) || x.len() != n {
        return Err(bad());
    }
    let sshape: Vec<usize> = shape.iter().zip(block).map(|(s, b)| s / b).collect();
    if sshape.iter().product::<usize>() != scale.len() || zero.len() != scale.len() {
        return Err(bad());
    }
    let range = range(dt).ok_or_else(bad)?;
    let zp: Vec<f32> = (0..zero.len()).map(|i| zero.get_f64(i) as f32).collect();
    let rows = Rows::new(shape, block, &sshape, scale, &zp);
    // Rows per task: about 64 K elements.
    let cols = rows.cols.max(1);
    let per = ((1 << 16) / cols).max(1) * cols;
    fn split<T: Send>(out: &mut [T], per: usize, n: usize, f: impl Fn(usize, &mut [T]) + Sync) {
        if n >= 1 << 16 {
            out.par_chunks_mut(per)
                .enumerate()
                .for_each(|(t, c)| f(t, c));
        } else if n > 0 {
            out.chunks_mut(per).enumerate().for_each(|(t, c)| f(t, c));
        }
    }
    Ok(match dt {
        DataType::Uint8 | DataType::Uint4 => {
            let mut out = super::util::try_filled(n, 0u8, "quantizeLinear's output")?;
            split(&mut out, per, n, |t, c| {
                rows.quantize(x, c, t * per / cols, range, |b: u32| b as u8)
            });
            Buf::U8(out)
        }
        DataType::Int8 | DataType::Int4 => {
            let mut out = super::util::try_filled(n, 0i8, "quantizeLinear's output")?;
            split(&mut out, per, n, |t, c| {
                rows.quantize(x, c, t * per / cols, range, |b: u32| b as u8 as i8)
            });
            Buf::I8(out)
        }
        _ => return Err(bad()),
    })
}

/// The rows of a blockwise dequantization (see [`dequantize_bytes`]).
struct Rows<'a> {
    shape: &'a [usize],
    block: &'a [usize],
    /// The scale's row-major strides.
    sst: Vec<usize>,
    /// The last dimension and its block.
    cols: usize,
    bl: usize,
    scale: &'a [f32],
    zp: &'a [f32],
}

impl<'a> Rows<'a> {
    fn new(
        shape: &'a [usize],
        block: &'a [usize],
        sshape: &[usize],
        scale: &'a [f32],
        zp: &'a [f32],
    ) -> Self {
        Rows {
            shape,
            block,
            sst: super::util::strides(sshape),
            cols: shape.last().copied().unwrap_or(1),
            bl: block.last().copied().unwrap_or(1),
            scale,
            zp,
        }
    }

    /// Rows `first..` of `x` quantized into `out` (whole rows):
    /// `clamp(roundEven(x / scale) + zeroPoint, lo, hi)`.
    ///
    /// In float32 throughout, which gives the general path's values (its
    /// rounding and sum in float64): `v / sc` is the same float32 either
    /// way; rounded, it is an integer, to which adding a zero point (an
    /// integer of at most 8 bits) is exact below 2^24 in magnitude, and
    /// beyond that both sums clamp to the same bound; NaN stays NaN and
    /// stores as 0 in both. Written so that it runs on vectors at the
    /// machine's width (`with_simd`): 1M values to uint8 in blocks of 32
    /// went from 1.52 to 0.60 ms (one thread, AVX-512 Zen 5) against the
    /// scalar loop that rounded in float64 and cast with saturation.
    fn quantize<T>(
        &self,
        x: &[f32],
        out: &mut [T],
        first: usize,
        (lo, hi): (f64, f64),
        to: impl Fn(u32) -> T + Copy,
    ) {
        let (lo, hi) = (lo as f32, hi as f32);
        with_simd(
            #[inline(always)]
            || {
                for (i, dst) in out.chunks_exact_mut(self.cols).enumerate() {
                    let r = first + i;
                    let k0 = self.scale_row(r);
                    let src = &x[r * self.cols..(r + 1) * self.cols];
                    for (b, (d, s)) in dst.chunks_mut(self.bl).zip(src.chunks(self.bl)).enumerate()
                    {
                        let (sc, z) = (self.scale[k0 + b], self.zp[k0 + b]);
                        for (o, &v) in d.iter_mut().zip(s) {
                            let q = round_even_f32(v / sc) + z;
                            // Compares and selects rather than `clamp`
                            // and a saturating cast, so that the loop
                            // runs on vectors. NaN fails both of the
                            // first tests and stores as 0, as a cast
                            // stores it.
                            let q = if q >= lo {
                                if q <= hi {
                                    q
                                } else {
                                    hi
                                }
                            } else if q < lo {
                                lo
                            } else {
                                0.0
                            };
                            // An integer of at most 2^22 in magnitude,
                            // added to 1.5 * 2^23, lands in the low bits
                            // of the sum's mantissa as two's complement.
                            *o = to((q + 12_582_912.0).to_bits());
                        }
                    }
                }
            },
        )
    }

    /// The scale element of column 0 of row `r`.
    fn scale_row(&self, r: usize) -> usize {
        let (mut rem, mut k) = (r, 0);
        for d in (0..self.shape.len().saturating_sub(1)).rev() {
            k += (rem % self.shape[d]) / self.block[d] * self.sst[d];
            rem /= self.shape[d];
        }
        k
    }

    /// Rows `first..` of `x` into `out` (whole rows).
    fn fill<T: Copy + Into<f32>>(&self, x: &[T], out: &mut [f32], first: usize) {
        for (i, dst) in out.chunks_exact_mut(self.cols).enumerate() {
            let r = first + i;
            let k0 = self.scale_row(r);
            let src = &x[r * self.cols..(r + 1) * self.cols];
            for (b, (d, s)) in dst.chunks_mut(self.bl).zip(src.chunks(self.bl)).enumerate() {
                let (sc, z) = (self.scale[k0 + b], self.zp[k0 + b]);
                for (o, &v) in d.iter_mut().zip(s) {
                    *o = (v.into() - z) * sc;
                }
            }
        }
    }
}

/// A rounding of activations to int8 blocks and back, as a graph that
/// takes llama.cpp's numerics writes it (see `fuse::rounded_blocks`): per
/// block of the last axis, `d = reduceMax(abs(x)) / divisor`, `q =
/// quantizeLinear(x, max(d, floor), 0)` to int8, `y = dequantizeLinear(q,
/// d, 0)`, d rounded to float16 first when `round16`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RoundBlocks {
    pub divisor: f32,
    pub floor: f32,
    pub round16: bool,
}

/// reduceMax of abs over `v` (NaN wins; -inf for none): the largest is
/// the largest in any order, so it is taken in sixteen lanes that the
/// compiler keeps in vector registers, with whether any was NaN beside
/// it, instead of one chain of compares and branches (a block of 32
/// waited on each).
#[inline(always)]
fn abs_max(v: &[f32]) -> f32 {
    const LANES: usize = 16;
    let mut m = [f32::NEG_INFINITY; LANES];
    let mut nan = false;
    let chunks = v.chunks_exact(LANES);
    for &e in chunks.remainder() {
        nan |= e.is_nan();
        m[0] = if e.abs() > m[0] { e.abs() } else { m[0] };
    }
    for c in chunks {
        for (l, &e) in c.iter().enumerate() {
            let a = e.abs();
            nan |= a.is_nan();
            m[l] = if a > m[l] { a } else { m[l] };
        }
    }
    match nan {
        true => f32::NAN,
        false => m
            .iter()
            .fold(f32::NEG_INFINITY, |x, &y| if y > x { y } else { x }),
    }
}

/// [`RoundBlocks`] over `x` in blocks of `block` elements: the values the
/// nodes it stands for compute, bit for bit (NaN as they propagate it),
/// in one pass instead of ten nodes' worth of buffers.
pub fn round_blocks(spec: &RoundBlocks, x: &Buf, block: usize) -> Result<Buf> {
    let bad = || Error::operation("dequantizeLinear: the rounded blocks do not match");
    let Buf::F32(x) = x else {
        return Err(bad());
    };
    if block == 0 || !x.len().is_multiple_of(block) {
        return Err(bad());
    }
    let mut out = Buf::try_f32_for_overwrite(x.len())?;
    // Compiled for the CPU's vectors (the loops below are plain
    // arithmetic, compares and selects; nothing is contracted into a
    // fused multiply-add, so the bits are the baseline build's): built for
    // x86-64's baseline they ran on 4-wide vectors and scalar maxima, 7%
    // of a prompt's time.
    //
    // Blocks are independent: four tasks a thread, of whole blocks, where
    // there are more than 64 K elements (a prompt's activations; one
    // decoding row stays on this thread).
    let tasks = rayon::current_num_threads() * 4;
    let per = x.len().div_ceil(tasks).div_ceil(block).max(1) * block;
    let run = |(o, v): (&mut [f32], &[f32])| {
        crate::backend::cpu::simd::with_simd(
            #[inline(always)]
            || round_blocks_into(spec, v, block, o),
        )
    };
    if x.len() >= 1 << 16 {
        use rayon::prelude::*;
        out.par_chunks_mut(per).zip(x.par_chunks(per)).for_each(run);
    } else {
        run((&mut out[..], &x[..]));
    }
    Ok(Buf::F32(out))
}

/// [`round_blocks`]'s loop, `out` as long as `x`.
#[inline(always)]
fn round_blocks_into(spec: &RoundBlocks, x: &[f32], block: usize, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if block == avx512::BLOCK && avx512::usable() {
        // SAFETY: `usable` saw the features the function enables; it
        // reads and writes whole blocks of the two slices, of one length.
        unsafe { avx512::round_blocks(spec, x, out) };
        return;
    }
    for (o, v) in out.chunks_exact_mut(block).zip(x.chunks_exact(block)) {
        round_block(spec, v, o);
    }
}

/// The scale a block divides by (`max(d, floor)`, NaN winning as the
/// binary max has it) and the one it multiplies by (`d`, rounded to
/// float16 where the graph rounds it), from the block's largest
/// magnitude.
#[inline(always)]
fn block_scales(spec: &RoundBlocks, amax: f32) -> (f32, f32) {
    let d = amax / spec.divisor;
    let safe = match d.is_nan() || spec.floor.is_nan() {
        true => f32::NAN,
        false => d.max(spec.floor),
    };
    let scale = match spec.round16 {
        true => crate::f16::f16_to_f32(crate::f16::f32_to_f16(d)),
        false => d,
    };
    (safe, scale)
}

/// One block of [`round_blocks`].
#[inline(always)]
fn round_block(spec: &RoundBlocks, v: &[f32], o: &mut [f32]) {
    let (safe, scale) = block_scales(spec, abs_max(v));
    // As `Rows::quantize` to int8 with a zero point of 0, then
    // `Rows::fill`, in float32 so that the loop runs on vectors: the
    // quotient is a float32 value, whose nearest integer (ties to
    // even) is the same in either width, and `round_even_f32` finds
    // it (+0 for a zero, as the integer conversion gives); NaN
    // converts to 0.
    for (o, &e) in o.iter_mut().zip(v) {
        let v = e / safe;
        let r = round_even_f32(v);
        let q = if v.is_nan() {
            0.0
        } else {
            r.clamp(-128.0, 127.0)
        };
        *o = q * scale;
    }
}

/// [`round_blocks`] for blocks of 32 on AVX-512: a block is two
/// registers, its largest magnitude one reduction, its values rounded by
/// the vector unit's own round-to-nearest-even. The same bits as
/// [`round_block`], which takes any block holding a NaN. Compiled for
/// the CPU's vectors, the portable loop spent most of a block's time
/// outside the element loop (its maxima and branches): 163 us for a
/// prompt's 128 x 1536 at one thread.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{block_scales, round_block, RoundBlocks};
    use std::arch::x86_64::*;

    /// The block length this form takes.
    pub const BLOCK: usize = 32;

    /// Whether this CPU has the features [`round_blocks`] enables (and
    /// the environment has not asked for AVX2).
    pub fn usable() -> bool {
        crate::backend::cpu::simd::simd_level() == crate::backend::cpu::simd::SimdLevel::Avx512
    }

    /// # Safety
    /// The CPU has AVX-512F and DQ ([`usable`]).
    #[target_feature(enable = "avx512f,avx512dq")]
    pub unsafe fn round_blocks(spec: &RoundBlocks, x: &[f32], out: &mut [f32]) {
        for (o, v) in out.chunks_exact_mut(BLOCK).zip(x.chunks_exact(BLOCK)) {
            // SAFETY: `v` and `o` hold BLOCK (two registers of) floats;
            // the loads and stores are unaligned ones.
            unsafe {
                let (x0, x1) = (
                    _mm512_loadu_ps(v.as_ptr()),
                    _mm512_loadu_ps(v.as_ptr().add(16)),
                );
                let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x0, x0)
                    | _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x1, x1);
                if nan != 0 {
                    round_block(spec, v, o);
                    continue;
                }
                // No NaN: the largest magnitude is the lanes' maximum in
                // any order.
                let amax =
                    _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
                let (safe, scale) = block_scales(spec, amax);
                let (safe, scale) = (_mm512_set1_ps(safe), _mm512_set1_ps(scale));
                let zero = _mm512_setzero_ps();
                let (lo, hi) = (_mm512_set1_ps(-128.0), _mm512_set1_ps(127.0));
                let one = |x: __m512| {
                    let q = _mm512_div_ps(x, safe);
                    // Ties to even; adding +0 makes a rounded -0 the +0
                    // that `round_even_f32` gives.
                    let r = _mm512_add_ps(
                        _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                            q,
                        ),
                        zero,
                    );
                    let c = _mm512_min_ps(_mm512_max_ps(r, lo), hi);
                    // A NaN quotient (0 / 0, inf / inf) converts to 0.
                    let c = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask::<_CMP_ORD_Q>(q, q), c);
                    _mm512_mul_ps(c, scale)
                };
                _mm512_storeu_ps(o.as_mut_ptr(), one(x0));
                _mm512_storeu_ps(o.as_mut_ptr().add(16), one(x1));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abs_max_is_the_chain_of_reduce_max() {
        // The chain as reduceMax writes it: NaN wins, else the larger.
        let chain = |v: &[f32]| {
            v.iter().fold(f32::NEG_INFINITY, |m, &e| {
                let a = e.abs();
                if m.is_nan() || a.is_nan() {
                    f32::NAN
                } else if a > m {
                    a
                } else {
                    m
                }
            })
        };
        let r = crate::backend::testing::random(64, 3);
        for len in 0usize..48 {
            for special in [
                None,
                Some(f32::NAN),
                Some(f32::INFINITY),
                Some(-0.0),
                Some(-f32::INFINITY),
            ] {
                for at in [0, len / 2, len.saturating_sub(1)] {
                    let mut v: Vec<f32> = r[..len].iter().map(|x| x * 10.0).collect();
                    if let (Some(x), true) = (special, at < len) {
                        v[at] = x;
                    }
                    let (got, want) = (abs_max(&v), chain(&v));
                    assert!(
                        got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                        "len {len} {special:?} at {at}: {got} against {want}"
                    );
                }
            }
        }
    }

    fn desc(dt: DataType, shape: &[usize]) -> OperandDescriptor {
        OperandDescriptor {
            data_type: dt,
            shape: shape.to_vec(),
        }
    }

    fn quant(x: Buf, xs: &[usize], s: Buf, z: Buf, block: Vec<usize>, dt: DataType) -> Buf {
        let d = desc(DataType::Float32, xs);
        run(
            &QuantizeOp::Quantize { block },
            &[&x, &s, &z],
            &[&d],
            &[desc(dt, xs)],
        )
        .unwrap()
        .remove(0)
    }

    #[test]
    fn quantize_rounds_half_to_even_and_saturates() {
        let x = Buf::F32(vec![0.5, 1.5, 2.5, -0.5, -1.5, 1000.0, -1000.0, f32::NAN]);
        // scale 1, zero point 0: ties go to the even neighbour. NaN has no
        // quantized value; it becomes 0 whatever the zero point.
        let r = quant(
            x.clone(),
            &[8],
            Buf::F32(vec![1.0]),
            Buf::I8(vec![0]),
            vec![8],
            DataType::Int8,
        );
        assert_eq!(r, Buf::I8(vec![0, 2, 2, 0, -2, 127, -128, 0]));
        let r = quant(
            x.clone(),
            &[8],
            Buf::F32(vec![1.0]),
            Buf::U8(vec![10]),
            vec![8],
            DataType::Uint8,
        );
        assert_eq!(r, Buf::U8(vec![10, 12, 12, 10, 8, 255, 0, 0]));
        let r = quant(
            x.clone(),
            &[8],
            Buf::F32(vec![1.0]),
            Buf::I8(vec![1]),
            vec![8],
            DataType::Int4,
        );
        assert_eq!(r, Buf::I8(vec![1, 3, 3, 1, -1, 7, -8, 0]));
        let r = quant(
            x,
            &[8],
            Buf::F32(vec![1.0]),
            Buf::U8(vec![3]),
            vec![8],
            DataType::Uint4,
        );
        assert_eq!(r, Buf::U8(vec![3, 5, 5, 3, 1, 15, 0, 0]));
    }

    #[test]
    fn blockwise_scales() {
        // [2, 4] input, scale [2, 2]: each scale covers a 1x2 block.
        let x = Buf::F32(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
        let s = Buf::F32(vec![1.0, 2.0, 0.5, 4.0]);
        let z = Buf::I32(vec![0, 100, -5, 1_000_000]);
        let r = quant(x, &[2, 4], s, z, vec![1, 2], DataType::Int32);
        // 1/1, 2/1 | 3/2=1.5->2 +100, 4/2=2 +100 | 10-5, 12-5 | 7/4=1.75->2, 2.
        assert_eq!(
            r,
            Buf::I32(vec![1, 2, 102, 102, 5, 7, 1_000_002, 1_000_002])
        );
        assert_eq!(
            scale_indices(&[3, 4], &[3, 2], 2).unwrap(),
            vec![0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1]
        );
        assert!(scale_indices(&[3, 4], &[3, 2], 3).is_err());
    }

    #[test]
    fn dequantize_all_types() {
        let d = |x: Buf, dt: DataType, z: Buf, s: Buf, out: DataType, n: usize| {
            let di = desc(dt, &[n]);
            run(
                &QuantizeOp::Dequantize { block: vec![n] },
                &[&x, &s, &z],
                &[&di],
                &[desc(out, &[n])],
            )
            .unwrap()
            .remove(0)
            .to_f32_vec()
        };
        let s = Buf::F32(vec![0.5]);
        assert_eq!(
            d(
                Buf::U8(vec![0, 255, 10]),
                DataType::Uint8,
                Buf::U8(vec![10]),
                s.clone(),
                DataType::Float32,
                3
            ),
            vec![-5.0, 122.5, 0.0]
        );
        assert_eq!(
            d(
                Buf::I8(vec![-8, 7, 0]),
                DataType::Int4,
                Buf::I8(vec![-1]),
                s.clone(),
                DataType::Float32,
                3
            ),
            vec![-3.5, 4.0, 0.5]
        );
        // int32 extremes: the difference is exact before scaling.
        assert_eq!(
            d(
                Buf::I32(vec![i32::MAX, i32::MIN]),
                DataType::Int32,
                Buf::I32(vec![i32::MIN]),
                Buf::F32(vec![1.0]),
                DataType::Float32,
                2
            ),
            vec![u32::MAX as f32, 0.0]
        );
        assert_eq!(
            d(
                Buf::U32(vec![7]),
                DataType::Uint32,
                Buf::U32(vec![3]),
                Buf::f16_from_f32(&[0.25]),
                DataType::Float16,
                1
            ),
            vec![1.0]
        );
    }

    /// The row-wise path for 8- and 4-bit inputs gives every element the
    /// value of the definition, `(x - zeroPoint) * scale` rounded once,
    /// with the scale element at `coordinates / block`: blockwise along
    /// every axis, per axis, per tensor, and rank 0.
    #[test]
    fn bytes_dequantize_like_the_definition() {
        let cases: &[(&[usize], &[usize])] = &[
            (&[], &[]),
            (&[64], &[32]),
            (&[3, 64], &[1, 32]),
            (&[3, 64], &[3, 64]),
            (&[4, 6, 8], &[2, 3, 4]),
            (&[5, 96], &[5, 1]),
            (&[300, 512], &[1, 32]),
        ];
        for &(shape, block) in cases {
            let n: usize = shape.iter().product();
            let sshape: Vec<usize> = shape.iter().zip(block).map(|(s, b)| s / b).collect();
            let sn: usize = sshape.iter().product();
            let scale: Vec<f32> = (0..sn).map(|i| 0.01 + (i % 7) as f32 * 0.013).collect();
            let xs = [
                (
                    Buf::U8((0..n).map(|i| (i * 37 % 256) as u8).collect()),
                    Buf::U8((0..sn).map(|i| (i * 11 % 256) as u8).collect()),
                ),
                (
                    Buf::I8((0..n).map(|i| (i * 37 % 256) as u8 as i8).collect()),
                    Buf::I8((0..sn).map(|i| (i * 5 % 16) as i8 - 8).collect()),
                ),
            ];
            for (x, z) in xs {
                let d = desc(DataType::Float32, shape);
                let got = run(
                    &QuantizeOp::Dequantize {
                        block: block.to_vec(),
                    },
                    &[&x, &Buf::F32(scale.clone()), &z],
                    &[&d],
                    std::slice::from_ref(&d),
                )
                .unwrap()
                .remove(0);
                let idx = scale_indices(shape, block, sn).unwrap();
                let want: Vec<f32> = (0..n)
                    .map(|i| ((x.get_f64(i) - z.get_f64(idx[i])) * scale[idx[i]] as f64) as f32)
                    .collect();
                assert_eq!(got, Buf::F32(want), "{shape:?} / {block:?}");
            }
        }
    }

    /// The row-wise path to 8- and 4-bit outputs gives every element the
    /// value of the definition, `saturate(roundEven(x / scale) +
    /// zeroPoint)`, with ties, values past the range, NaN and infinities,
    /// for the same blockings as above.
    #[test]
    fn bytes_quantize_like_the_definition() {
        let cases: &[(&[usize], &[usize])] = &[
            (&[], &[]),
            (&[64], &[32]),
            (&[3, 64], &[1, 32]),
            (&[4, 6, 8], &[2, 3, 4]),
            (&[5, 96], &[5, 1]),
            (&[300, 512], &[1, 32]),
        ];
        // NaNs with payloads and either sign too: the fast path must not
        // store a NaN's bits.
        let specials = [
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            1e30,
            -1e30,
            0.0,
            -0.0,
            f32::from_bits(0x7fc0_00ff),
            f32::from_bits(0xffc0_0081),
            f32::from_bits(0x7f80_0003),
            8_388_607.5,
            -16_777_215.0,
        ];
        for &(shape, block) in cases {
            let n: usize = shape.iter().product();
            let sshape: Vec<usize> = shape.iter().zip(block).map(|(s, b)| s / b).collect();
            let sn: usize = sshape.iter().product();
            let scale: Vec<f32> = (0..sn).map(|i| 0.5 + (i % 3) as f32 * 0.25).collect();
            let idx = scale_indices(shape, block, sn).unwrap();
            // Multiples of half the scale (ties) and values in between.
            let x: Vec<f32> = (0..n)
                .map(|i| match i % 11 {
                    0 => specials[(i / 11) % specials.len()],
                    k => (i % 517) as f32 * 0.5 * scale[idx[i]] - 120.0 + k as f32 * 0.01,
                })
                .collect();
            for dt in [
                DataType::Uint8,
                DataType::Int8,
                DataType::Uint4,
                DataType::Int4,
            ] {
                let (lo, hi) = range(dt).unwrap();
                let z = match dt {
                    DataType::Uint8 | DataType::Uint4 => {
                        Buf::U8((0..sn).map(|i| (i * 3 % (hi as usize + 1)) as u8).collect())
                    }
                    _ => Buf::I8((0..sn).map(|i| (i % 8) as i8 - 4).collect()),
                };
                let d = desc(DataType::Float32, shape);
                let got = run(
                    &QuantizeOp::Quantize {
                        block: block.to_vec(),
                    },
                    &[&Buf::F32(x.clone()), &Buf::F32(scale.clone()), &z],
                    &[&d],
                    &[desc(dt, shape)],
                )
                .unwrap()
                .remove(0);
                let want: Vec<f64> = (0..n)
                    .map(|i| {
                        let q = ((x[i] / scale[idx[i]]) as f64).round_ties_even();
                        (q + z.get_f64(idx[i])).clamp(lo, hi)
                    })
                    .collect();
                let got: Vec<f64> = (0..n).map(|i| got.get_f64(i)).collect();
                // NaN saturates to 0 in the casts.
                let want: Vec<f64> = want
                    .iter()
                    .map(|&w| if w.is_nan() { 0.0 } else { w })
                    .collect();
                assert_eq!(got, want, "{shape:?} / {block:?} {dt:?}");
            }
        }
    }

    /// The shortcut rounds as `round_ties_even` does, ties and large,
    /// tiny, negative and special values included.
    #[test]
    fn round_even_is_round_ties_even() {
        let mut xs = vec![
            0.5,
            1.5,
            2.5,
            -0.5,
            -1.5,
            -2.5,
            0.49999999999999994,
            1e-300,
            -1e-300,
            2_251_799_813_685_247.5,
            2_251_799_813_685_248.0,
            4_503_599_627_370_497.0,
            1e300,
            -1e300,
            f64::INFINITY,
            f64::NEG_INFINITY,
            127.5,
            -128.5,
            255.49,
            // Where the last bit of a float32 or a float64 is worth a half.
            4_194_304.5,
            4_194_305.5,
            -4_194_306.5,
            8_388_607.5,
            -8_388_607.5,
            2_251_799_813_685_248.5,
            4_503_599_627_370_495.5,
            -4_503_599_627_370_494.5,
        ];
        xs.extend((0..2000).map(|i| (i as f64 - 1000.0) * 0.25 + (i % 7) as f64 * 1e-9));
        for x in xs {
            let xf = x as f32;
            let (gf, wf) = (round_even_f32(xf), xf.round_ties_even());
            assert!(gf == wf || (gf.is_nan() && wf.is_nan()), "{xf}: {gf} {wf}");
        }
        assert!(round_even_f32(f32::NAN).is_nan());
        // A zero result is +0, from either side.
        for x in [-0.3, -0.0, 0.0, 0.5, -0.5] {
            assert_eq!(round_even_f32(x as f32).to_bits(), 0, "{x}");
        }
    }

    /// The blocks of 32 on this CPU's vectors give the portable loop's
    /// bits: ties, zeros of both signs, infinities, NaN, subnormal and
    /// huge values, quotients that saturate, and scales that are zero,
    /// NaN (floor) or overflow float16.
    #[test]
    fn rounded_blocks_of_32_match_the_portable_loop() {
        let r = crate::backend::testing::random(32 * 64, 9);
        let mut x: Vec<f32> = r.iter().map(|v| v * 5.0).collect();
        let specials = [
            0.0,
            -0.0,
            0.5,
            -0.5,
            1.5,
            -2.5,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            1.0e-40,
            -1.0e-45,
            3.0e38,
            -3.4e38,
            65519.0,
            127.0,
            -128.0,
        ];
        // Block b gets special value b % 16 at a few places; block 40 is
        // all zeros, block 41 all ties of a scale of 1.
        for b in 0..32 {
            for at in [0, 17, 31] {
                x[b * 32 + (at + b) % 32] = specials[b % specials.len()];
            }
        }
        x[40 * 32..41 * 32].fill(0.0);
        for (j, v) in x[41 * 32..42 * 32].iter_mut().enumerate() {
            *v = j as f32 - 15.5;
        }
        x[41 * 32] = 127.0;
        let specs = [
            RoundBlocks {
                divisor: 127.0,
                floor: 1e-30,
                round16: true,
            },
            RoundBlocks {
                divisor: 127.0,
                floor: 1e-30,
                round16: false,
            },
            RoundBlocks {
                divisor: 127.0,
                floor: 0.0,
                round16: true,
            },
            RoundBlocks {
                divisor: 0.0,
                floor: 0.0,
                round16: false,
            },
            RoundBlocks {
                divisor: 1e-3,
                floor: f32::NAN,
                round16: true,
            },
        ];
        for spec in specs {
            let mut want = vec![0f32; x.len()];
            for (o, v) in want.chunks_exact_mut(32).zip(x.chunks_exact(32)) {
                round_block(&spec, v, o);
            }
            let mut got = vec![0f32; x.len()];
            round_blocks_into(&spec, &x, 32, &mut got);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                    "{spec:?} value {i} ({}): {g} against {w}",
                    x[i]
                );
            }
        }
    }
}
