//! The kernels' cases at sizes Miri interprets in seconds (see
//! `scripts/miri.sh`): the portable 16-lane form everywhere, AVX2's
//! where the build enables it, NEON's in an aarch64 build, through the
//! same raw pointer tiles as natively. Together they reach every edge: panels of 4, 2 and 1
//! blocks, tiles cut at row ends and at the end of a task, stride,
//! dilation, uneven padding, padding past the filter's reach, an NCHW
//! input blocked as it is padded, batches, the depthwise kernel's
//! whole-plane copy and its in-place rows with strips at the sides, and
//! Winograd's tiles cut at the output's edges.

use super::*;

#[test]
fn direct_matches_the_nchw_kernels_small() {
    let cases = [
        // Flat 1x1: 7 blocks (panels of 4, 2 and 1), 14 pixels.
        ((1, 8, 2, 7), (56, 1, 1), [0; 4], 1, 1),
        // Padded, two output blocks, input read in NCHW too.
        ((1, 8, 3, 4), (16, 3, 3), [1, 1, 1, 1], 1, 1),
        // Stride and dilation, uneven padding.
        ((1, 16, 5, 5), (8, 3, 2), [2, 1, 0, 2], 2, 2),
        // Plain input (3 channels), strided; and a batch of 5.
        ((1, 3, 5, 5), (16, 3, 3), [0, 1, 0, 1], 2, 1),
        ((2, 5, 3, 4), (8, 3, 3), [1, 1, 1, 1], 1, 1),
        // Rows of 13 pixels: a tile crosses no row end.
        ((1, 8, 2, 13), (24, 1, 3), [0, 0, 1, 1], 1, 1),
    ];
    for (i, &case) in cases.iter().enumerate() {
        direct_case(i, case);
    }
}

#[test]
fn depthwise_matches_the_nchw_kernel_bitwise_small() {
    let cases = [
        ((1, 8, 3, 3), (3, 3), [1, 1, 1, 1], 1, 1),
        ((2, 16, 5, 4), (3, 3), [0, 1, 0, 1], 2, 1),
        ((1, 8, 1, 1), (3, 3), [1, 1, 1, 1], 1, 1),
        // Windows in the padding only.
        ((1, 8, 3, 3), (3, 3), [4, 3, 5, 4], 1, 1),
        // Windows of more than 512 pixels: the inside read in
        // place, strips copied at the sides, top and bottom rows
        // copied whole; at unit stride (runs of 16 lanes, pairs
        // and single pixels on rows of 9) and at stride 2 with
        // dilation.
        ((1, 8, 60, 9), (3, 3), [1, 1, 1, 1], 1, 1),
        ((1, 8, 40, 13), (3, 3), [0, 1, 2, 1], 2, 2),
    ];
    for (i, &case) in cases.iter().enumerate() {
        depthwise_case(i, case);
    }
}

#[test]
fn winograd_matches_the_nchw_kernel_small() {
    let cases = [
        ((1, 8, 4, 4), 8, [1, 1, 1, 1]),
        // Odd sizes (tiles cut), uneven padding, a batch, 3 blocks.
        ((2, 8, 3, 5), 24, [0, 1, 1, 0]),
        ((1, 8, 3, 3), 8, [3, 3, 3, 3]),
    ];
    for (i, &case) in cases.iter().enumerate() {
        winograd_case(i, case);
    }
}
