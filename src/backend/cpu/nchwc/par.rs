//! Parallel helpers shared by the blocked kernels.

use rayon::prelude::*;

/// Multiply-adds below which a convolution runs on one thread.
pub(super) const PAR_WORK: usize = 1 << 18;

/// A raw pointer that tasks writing disjoint parts share.
#[derive(Clone, Copy)]
pub(super) struct Out(pub(super) *mut f32);
// SAFETY: each task writes its own cells (see the callers).
unsafe impl Send for Out {}
unsafe impl Sync for Out {}

/// Runs `f(u)` for `u` in 0..units, in parallel when `par`.
pub(super) fn for_units(units: usize, par: bool, f: impl Fn(usize) + Sync + Send) {
    if par && units > 1 {
        (0..units).into_par_iter().for_each(f);
    } else {
        (0..units).for_each(f);
    }
}
