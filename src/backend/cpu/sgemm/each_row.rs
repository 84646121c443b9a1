//! The micro-kernels' epilogue unrolled by row, for the x86 kernels
//! (`kernels.rs`) and the NEON one (`neon.rs`) alike.
//!
//! A loop over a tile's rows indexes its array of accumulators, which
//! then lives on the stack: zeroed at every tile (by a memset call in the
//! 12-row AVX-512 kernel), stored and loaded again. Written out row by row
//! with constant indices, the tile stays in registers.

/// `$body` once for each row `$r` of a tile of `$mr` rows (a literal),
/// with `$r` a constant in each copy: the kernels' epilogue, unrolled.
macro_rules! each_row {
    (2, $r:ident => $body:block) => { each_row!(@ $r $body; 0 1) };
    (4, $r:ident => $body:block) => { each_row!(@ $r $body; 0 1 2 3) };
    (6, $r:ident => $body:block) => { each_row!(@ $r $body; 0 1 2 3 4 5) };
    (8, $r:ident => $body:block) => { each_row!(@ $r $body; 0 1 2 3 4 5 6 7) };
    (12, $r:ident => $body:block) => { each_row!(@ $r $body; 0 1 2 3 4 5 6 7 8 9 10 11) };
    (@ $r:ident $body:block; $($i:literal)*) => { $({
        let $r: usize = $i;
        $body
    })* };
}
pub(super) use each_row;
