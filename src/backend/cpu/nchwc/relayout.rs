//! Layout changes between NCHW and the blocked layout.

use std::arch::x86_64::*;

use super::par::{for_units, Out};
use super::L;

/// NCHW `x` (`planes` groups of 8 planes of `hw`) into blocked `out`
/// when `into`, the other way when not.
///
/// # Safety
/// AVX2; `x` and `out` hold `planes * 8 * hw` floats.
pub(super) unsafe fn reorder(x: &[f32], out: &mut [f32], planes: usize, hw: usize, into: bool) {
    let o = Out(out.as_mut_ptr());
    let xs = x.as_ptr() as usize;
    for_units(planes, planes * hw * L >= 1 << 16, move |b| {
        let _ = &o;
        // SAFETY: block b's 8 * hw floats of both buffers.
        unsafe {
            reorder_block(
                (xs as *const f32).add(b * L * hw),
                o.0.add(b * L * hw),
                hw,
                into,
            )
        }
    });
}

#[target_feature(enable = "avx2")]
unsafe fn reorder_block(x: *const f32, out: *mut f32, hw: usize, into: bool) {
    let mut p = 0;
    // SAFETY (all): offsets below 8 * hw in both blocks.
    unsafe {
        while p + L <= hw {
            let mut v = [_mm256_setzero_ps(); L];
            for (k, vk) in v.iter_mut().enumerate() {
                // into: row k = channel k's 8 pixels; else pixel p + k.
                *vk = _mm256_loadu_ps(if into {
                    x.add(k * hw + p)
                } else {
                    x.add((p + k) * L)
                });
            }
            let t = crate::backend::cpu::depthwise::transpose(v);
            for (k, tk) in t.iter().enumerate() {
                _mm256_storeu_ps(
                    if into {
                        out.add((p + k) * L)
                    } else {
                        out.add(k * hw + p)
                    },
                    *tk,
                );
            }
            p += L;
        }
        for q in p..hw {
            for l in 0..L {
                if into {
                    *out.add(q * L + l) = *x.add(l * hw + q);
                } else {
                    *out.add(l * hw + q) = *x.add(q * L + l);
                }
            }
        }
    }
}
