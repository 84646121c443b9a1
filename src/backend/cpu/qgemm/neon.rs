//! The block dot products on aarch64, with AdvSIMD (NEON).
//!
//! NEON is part of the aarch64 base architecture (every Rust target for
//! a CPU with floating point enables it), so no detection is needed:
//! [`best`](super::best) hands this form out on every aarch64 CPU, and
//! the assertion below makes a build for a target without it fail rather
//! than run NEON code there.
//!
//! Each block's codes are widened to float32 (bytes to 16 bits to 32,
//! then converted), multiplied by the activations in 4-lane vectors
//! (`vfmaq_f32`, two chains per block, one per half), and the block's 4
//! lanes of sums are scaled by its `d` into one of two accumulators,
//! alternately, so that consecutive blocks do not wait on each other's
//! multiply-add. The sums are taken in another order than the portable
//! form's, within the rounding of a float32 sum of the block's products.
//!
//! The slices are read as whole blocks through arrays (`as_chunks`), so
//! every load lies inside them whatever their lengths ([`Kernel::q4`]
//! and [`Kernel::q8`] check those anyway); NEON is the one requirement
//! that makes the functions below `unsafe`.

use std::arch::aarch64::*;

use super::{Kernel, QK};

const _: () = assert!(
    cfg!(target_feature = "neon"),
    "the quantized kernels' aarch64 form needs NEON in the target's base features"
);

/// Half a block: 16 codes, 16 activations.
const HALF: usize = QK / 2;

pub static KERNEL: Kernel = Kernel {
    name: "neon",
    q4: |c, d, a| {
        // SAFETY: NEON, all `q4` needs, is in every aarch64 CPU (asserted
        // above for the target); its loads read whole blocks through
        // arrays, inside the slices (whose lengths `Kernel::q4` checked).
        unsafe { q4(c, d, a) }
    },
    q8: |c, d, a| {
        // SAFETY: as above, for `q8` and `Kernel::q8`.
        unsafe { q8(c, d, a) }
    },
    // No integer form yet (its byte dot product, `sdot`, is an extension
    // to detect): the float forms serve.
    q4i: None,
    q8i: None,
    q4i4: None,
    q8i4: None,
};

/// 16 unsigned bytes as four vectors of 4 floats, in order.
///
/// # Safety
/// NEON must be present.
#[inline(always)]
unsafe fn widen_u8(v: uint8x16_t) -> [float32x4_t; 4] {
    let lo = vmovl_u8(vget_low_u8(v));
    let hi = vmovl_high_u8(v);
    [
        vcvtq_f32_u32(vmovl_u16(vget_low_u16(lo))),
        vcvtq_f32_u32(vmovl_high_u16(lo)),
        vcvtq_f32_u32(vmovl_u16(vget_low_u16(hi))),
        vcvtq_f32_u32(vmovl_high_u16(hi)),
    ]
}

/// 16 signed bytes as four vectors of 4 floats, in order.
///
/// # Safety
/// NEON must be present.
#[inline(always)]
unsafe fn widen_s8(v: int8x16_t) -> [float32x4_t; 4] {
    let lo = vmovl_s8(vget_low_s8(v));
    let hi = vmovl_high_s8(v);
    [
        vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))),
        vcvtq_f32_s32(vmovl_high_s16(lo)),
        vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))),
        vcvtq_f32_s32(vmovl_high_s16(hi)),
    ]
}

/// The 16 products of `w` (16 weights in 4 vectors) and `x`, summed
/// into 4 lanes.
///
/// # Safety
/// NEON must be present.
#[inline(always)]
unsafe fn dot16(w: [float32x4_t; 4], x: &[f32; HALF]) -> float32x4_t {
    // In bounds: `x` holds 16 floats, read 4 at a time from 0, 4, 8, 12.
    let p = x.as_ptr();
    let s = vmulq_f32(vld1q_f32(p), w[0]);
    let s = vfmaq_f32(s, vld1q_f32(p.add(4)), w[1]);
    let s = vfmaq_f32(s, vld1q_f32(p.add(8)), w[2]);
    vfmaq_f32(s, vld1q_f32(p.add(12)), w[3])
}

/// One block of 4-bit codes (byte `j`: element `j` low, `j + 16` high)
/// against its activations, in 4 lanes.
///
/// # Safety
/// NEON must be present.
#[inline(always)]
unsafe fn q4_block(c: &[u8; HALF], x: &[[f32; HALF]; 2]) -> float32x4_t {
    // In bounds: `c` holds 16 bytes.
    let raw = vld1q_u8(c.as_ptr());
    let lo = vandq_u8(raw, vdupq_n_u8(0x0f));
    let hi = vshrq_n_u8::<4>(raw);
    vaddq_f32(dot16(widen_u8(lo), &x[0]), dot16(widen_u8(hi), &x[1]))
}

/// One block of 8-bit codes against its activations, in 4 lanes.
///
/// # Safety
/// NEON must be present.
#[inline(always)]
unsafe fn q8_block(c: &[[i8; HALF]; 2], x: &[[f32; HALF]; 2]) -> float32x4_t {
    // In bounds: each half of `c` holds 16 bytes.
    let lo = vld1q_s8(c[0].as_ptr());
    let hi = vld1q_s8(c[1].as_ptr());
    vaddq_f32(dot16(widen_s8(lo), &x[0]), dot16(widen_s8(hi), &x[1]))
}

/// # Safety
/// NEON must be present (the lengths only decide how many blocks are
/// read: `Kernel::q4` checks that they agree).
#[target_feature(enable = "neon")]
unsafe fn q4(codes: &[u8], d: &[f32], a: &[f32]) -> f32 {
    let cb = codes.as_chunks::<HALF>().0;
    let ab = a.as_chunks::<HALF>().0.as_chunks::<2>().0;
    let mut blocks = cb.iter().zip(ab).zip(d);
    let (mut acc0, mut acc1) = (vdupq_n_f32(0.0), vdupq_n_f32(0.0));
    // Blocks alternate between the two accumulators.
    while let Some(((c, x), &db)) = blocks.next() {
        acc0 = vfmaq_n_f32(acc0, q4_block(c, x), db);
        let Some(((c, x), &db)) = blocks.next() else {
            break;
        };
        acc1 = vfmaq_n_f32(acc1, q4_block(c, x), db);
    }
    vaddvq_f32(vaddq_f32(acc0, acc1))
}

/// # Safety
/// NEON must be present (the lengths only decide how many blocks are
/// read: `Kernel::q8` checks that they agree).
#[target_feature(enable = "neon")]
unsafe fn q8(codes: &[i8], d: &[f32], a: &[f32]) -> f32 {
    let cb = codes.as_chunks::<HALF>().0.as_chunks::<2>().0;
    let ab = a.as_chunks::<HALF>().0.as_chunks::<2>().0;
    let mut blocks = cb.iter().zip(ab).zip(d);
    let (mut acc0, mut acc1) = (vdupq_n_f32(0.0), vdupq_n_f32(0.0));
    // Blocks alternate between the two accumulators.
    while let Some(((c, x), &db)) = blocks.next() {
        acc0 = vfmaq_n_f32(acc0, q8_block(c, x), db);
        let Some(((c, x), &db)) = blocks.next() else {
            break;
        };
        acc1 = vfmaq_n_f32(acc1, q8_block(c, x), db);
    }
    vaddvq_f32(vaddq_f32(acc0, acc1))
}
