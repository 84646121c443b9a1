//! Parallel helpers shared by the blocked kernels.

use rayon::prelude::*;

/// Multiply-adds below which a convolution runs on one thread.
pub(super) const PAR_WORK: usize = 1 << 18;

/// A raw pointer that tasks writing disjoint parts share: the start of
/// an output buffer that the kernel holds as `&mut [f32]` while a
/// [`for_units`] call runs.
///
/// Every user keeps to this: the pointer comes from a `&mut [f32]`
/// that outlives the `for_units` call (which returns only when every
/// task has finished), nothing else reads or writes that buffer during
/// the call, and each unit writes only cells of its own (the callers'
/// SAFETY comments name the partition), so no two threads ever touch
/// the same cell.
#[derive(Clone, Copy)]
pub(super) struct Out(pub(super) *mut f32);
// SAFETY: moving the pointer to another thread is sound because the
// buffer it points into outlives every task (see the type's comment)
// and the tasks write disjoint cells, so no access races.
unsafe impl Send for Out {}
// SAFETY: shared between tasks, the pointer is only copied and offset;
// the writes through it go to disjoint cells per unit and end before
// the buffer's borrow does (see the type's comment).
unsafe impl Sync for Out {}

/// Runs `f(u)` for `u` in 0..units, in parallel when `par`.
pub(super) fn for_units(units: usize, par: bool, f: impl Fn(usize) + Sync + Send) {
    if par && units > 1 {
        (0..units).into_par_iter().for_each(f);
    } else {
        (0..units).for_each(f);
    }
}
