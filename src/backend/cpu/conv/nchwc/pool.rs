//! Global pooling (one window over each whole plane, as at the end of
//! most image classifiers) read straight from the blocked layout.
//!
//! Without it the blocked operand was first copied back to NCHW only to
//! be reduced to one value per plane. The output, `[n, c, 1, 1]`, is the
//! same in both layouts, so it is written as NCHW. Each channel's plane
//! is reduced front to back with the NCHW kernel's own steps
//! (`pool_step`, `pool_finish`), eight channels side by side: the same
//! bits.

use rayon::prelude::*;

use super::L;
use crate::backend::cpu::conv::common::{is_global_pool, pool_finish, pool_identity, pool_step};
use crate::error::{Error, Result};
use crate::graph::op::Pool2dParams;

/// Whether pooling `p` of a float32 NCHW operand reduces each whole
/// plane to one value, over whole channel blocks.
pub(super) fn is_global(p: &Pool2dParams) -> bool {
    // Either layout: the plan checks that the input is blocked from the
    // pool's own layout, and the [n, c, 1, 1] result is [n, 1, 1, c]'s
    // bytes too.
    is_global_pool(p) && p.channels.is_multiple_of(L)
}

/// Global pooling of blocked `x` (`[n, c / 8, h, w, 8]`) into NCHW
/// `[n, c, 1, 1]`.
pub(super) fn global(p: &Pool2dParams, x: &[f32]) -> Result<Vec<f32>> {
    let hw = p.in_h * p.in_w;
    let blocks = p.batch * p.channels / L;
    if !is_global(p) || x.len() != blocks * hw * L {
        return Err(Error::operation(
            "pool2d: the operands do not match the parameters",
        ));
    }
    let kind = p.kind;
    let mut out = vec![0.0f32; blocks * L];
    // Blocks per task: about 16 K floats of input each.
    let per = ((1 << 14) / (hw * L)).max(1);
    let run = |(t, dst): (usize, &mut [f32])| {
        for (i, dst) in dst.chunks_exact_mut(L).enumerate() {
            let b = t * per + i;
            let mut acc = [pool_identity(kind); L];
            for px in x[b * hw * L..(b + 1) * hw * L].chunks_exact(L) {
                for (a, &v) in acc.iter_mut().zip(px) {
                    *a = pool_step(kind, *a, v);
                }
            }
            for (d, a) in dst.iter_mut().zip(acc) {
                *d = pool_finish(kind, a, hw);
            }
        }
    };
    if x.len() >= 1 << 16 {
        out.par_chunks_mut(per * L).enumerate().for_each(run);
    } else {
        out.chunks_mut(per * L).enumerate().for_each(run);
    }
    Ok(out)
}
