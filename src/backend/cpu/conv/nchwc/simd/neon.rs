//! The blocked kernels' vector on aarch64: 8 lanes in two NEON
//! (AdvSIMD) registers, one channel block per vector, so that the
//! kernels run with AVX2's shapes (tiles of 6 pixels by 2 blocks, 12
//! accumulators: 24 of the 32 registers).
//!
//! Each operation gives every lane the bits that [`Lanes`] (and x86's
//! instructions) give it: `vfmaq_f32` rounds the multiply-add once, as
//! `f32::mul_add` does; max and min are a compare and a select
//! (`a > b ? a : b`), because NEON's own `fmax` and `fmin` return NaN
//! for a NaN operand and order -0 below +0, where the kernels' clamps
//! must return the second operand for both (the clamp operator's
//! results, and x86's `maxps`).
//!
//! NEON is part of the aarch64 base architecture (every Rust target for
//! a CPU with floating point enables it), so no detection is needed and
//! [`Vf::with`] just runs its closure (the kernels compile with NEON
//! wherever they land); the assertion below makes a build for a target
//! without it fail rather than run NEON code there. The intrinsics are
//! still `unsafe` to call outside a `#[target_feature(enable = "neon")]`
//! function, so each method says why its call is sound, as the x86
//! kinds' do.
//!
//! [`Lanes`]: super::Lanes

use std::arch::aarch64::*;

use super::{Block8, Vf};

const _: () = assert!(
    cfg!(target_feature = "neon"),
    "the blocked convolutions' aarch64 form needs NEON in the target's base features"
);

/// 8 floats: lanes 0..4 in the first register, 4..8 in the second.
#[derive(Clone, Copy)]
pub(in crate::backend::cpu) struct Neon8(float32x4_t, float32x4_t);

// Every method is an `unsafe fn` whose caller guarantees NEON (the
// trait's contract, which every aarch64 CPU meets), the feature of each
// intrinsic; the arithmetic touches registers only, and the pointer
// methods use `vld1q_f32` and `vst1q_f32`, which need only `f32`
// alignment, so the caller's range is all they need (each reads or
// writes the 8 floats at `p` as two runs of 4).
impl Vf for Neon8 {
    const W: usize = 8;
    #[inline(always)]
    unsafe fn with<R>(f: impl FnOnce() -> R) -> R {
        // NEON is always enabled (see the module comment): the kernels
        // compile with it wherever they land.
        f()
    }
    #[inline(always)]
    unsafe fn splat(v: f32) -> Self {
        // SAFETY: NEON (the caller's); registers only.
        unsafe { Neon8(vdupq_n_f32(v), vdupq_n_f32(v)) }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: NEON (the caller's); the caller makes `p .. p + 8`
        // readable, and the loads read `p .. p + 4` and `p + 4 .. p +
        // 8`, unaligned.
        unsafe { Neon8(vld1q_f32(p), vld1q_f32(p.add(4))) }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: NEON (the caller's); the caller makes `p .. p + 8`
        // writable, and the stores write `p .. p + 4` and `p + 4 .. p +
        // 8`, unaligned.
        unsafe {
            vst1q_f32(p, self.0);
            vst1q_f32(p.add(4), self.1);
        }
    }
    #[inline(always)]
    unsafe fn load8_dup(p: *const f32) -> Self {
        // SAFETY: one group (`W` is 8): the 8 floats at `p`, which the
        // caller makes readable.
        unsafe { Self::load(p) }
    }
    #[inline(always)]
    unsafe fn load_split(p: *const f32, _: usize) -> Self {
        // SAFETY: one group of 8 (`W / 8` is 1), at `p`, which the
        // caller makes readable.
        unsafe { Self::load(p) }
    }
    #[inline(always)]
    unsafe fn store_split(self, p: *mut f32, _: usize) {
        // SAFETY: one group of 8 (`W / 8` is 1), at `p`, which the
        // caller makes writable.
        unsafe { self.store(p) }
    }
    #[inline(always)]
    unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
        // `vfmaq_f32(acc, x, y)` is `acc + x * y`, rounded once.
        // SAFETY: NEON (the caller's); registers only.
        unsafe { Neon8(vfmaq_f32(c.0, a.0, b.0), vfmaq_f32(c.1, a.1, b.1)) }
    }
    #[inline(always)]
    unsafe fn mul(a: Self, b: Self) -> Self {
        // SAFETY: NEON (the caller's); registers only.
        unsafe { Neon8(vmulq_f32(a.0, b.0), vmulq_f32(a.1, b.1)) }
    }
    #[inline(always)]
    unsafe fn add(a: Self, b: Self) -> Self {
        // SAFETY: NEON (the caller's); registers only.
        unsafe { Neon8(vaddq_f32(a.0, b.0), vaddq_f32(a.1, b.1)) }
    }
    #[inline(always)]
    unsafe fn sub(a: Self, b: Self) -> Self {
        // SAFETY: NEON (the caller's); registers only.
        unsafe { Neon8(vsubq_f32(a.0, b.0), vsubq_f32(a.1, b.1)) }
    }
    #[inline(always)]
    unsafe fn max(a: Self, b: Self) -> Self {
        // Not `vmaxq_f32`: see the module comment. Lanes where `a > b`
        // (all bits set) take `a`, the others `b`.
        // SAFETY: NEON (the caller's); registers only.
        unsafe {
            Neon8(
                vbslq_f32(vcgtq_f32(a.0, b.0), a.0, b.0),
                vbslq_f32(vcgtq_f32(a.1, b.1), a.1, b.1),
            )
        }
    }
    #[inline(always)]
    unsafe fn min(a: Self, b: Self) -> Self {
        // SAFETY: NEON (the caller's); registers only.
        unsafe {
            Neon8(
                vbslq_f32(vcltq_f32(a.0, b.0), a.0, b.0),
                vbslq_f32(vcltq_f32(a.1, b.1), a.1, b.1),
            )
        }
    }
}

/// The 4 x 4 transpose of rows `r`: two stages of pair exchanges, 32-bit
/// lanes within pairs of rows, then 64-bit halves.
///
/// # Safety
/// The CPU has NEON.
#[inline(always)]
unsafe fn transpose4(r: [float32x4_t; 4]) -> [float32x4_t; 4] {
    // SAFETY: NEON (the caller's); registers only (the reinterpretations
    // move bits unchanged).
    unsafe {
        // [a0 b0 a2 b2], [a1 b1 a3 b3], [c0 d0 c2 d2], [c1 d1 c3 d3].
        let t0 = vreinterpretq_f64_f32(vtrn1q_f32(r[0], r[1]));
        let t1 = vreinterpretq_f64_f32(vtrn2q_f32(r[0], r[1]));
        let t2 = vreinterpretq_f64_f32(vtrn1q_f32(r[2], r[3]));
        let t3 = vreinterpretq_f64_f32(vtrn2q_f32(r[2], r[3]));
        [
            vreinterpretq_f32_f64(vtrn1q_f64(t0, t2)),
            vreinterpretq_f32_f64(vtrn1q_f64(t1, t3)),
            vreinterpretq_f32_f64(vtrn2q_f64(t0, t2)),
            vreinterpretq_f32_f64(vtrn2q_f64(t1, t3)),
        ]
    }
}

impl Block8 for Neon8 {
    #[inline(always)]
    unsafe fn transpose8(r: [Self; 8]) -> [Self; 8] {
        // Four 4 x 4 blocks: output vector `j < 4` takes lane `j` of the
        // rows' first halves (rows 0..4, then 4..8), `j >= 4` lane `j -
        // 4` of their second halves.
        let q = |rows: std::ops::Range<usize>, hi: bool| {
            let half = |i: usize| match hi {
                true => r[rows.start + i].1,
                false => r[rows.start + i].0,
            };
            // SAFETY: NEON, the caller's; registers only.
            unsafe { transpose4(std::array::from_fn(half)) }
        };
        let (a, b) = (q(0..4, false), q(4..8, false));
        let (c, d) = (q(0..4, true), q(4..8, true));
        std::array::from_fn(|j| match j {
            0..4 => Neon8(a[j], b[j]),
            _ => Neon8(c[j - 4], d[j - 4]),
        })
    }
    #[inline(always)]
    unsafe fn nan_or(a: Self, b: Self) -> Self {
        // `a == a` (all bits set) where `a` is not NaN: `b` there.
        // SAFETY: NEON (the caller's); registers only.
        unsafe {
            Neon8(
                vbslq_f32(vceqq_f32(a.0, a.0), b.0, a.0),
                vbslq_f32(vceqq_f32(a.1, a.1), b.1, a.1),
            )
        }
    }
}
