//! Winograd's minimal filtering, F(2x2, 3x3), for plain 3x3
//! convolutions at unit stride and dilation.
//!
//! A 2x2 block of output pixels ("a tile") of a 3x3 convolution needs a
//! 4x4 patch of its input. Winograd's transforms turn the 36 products
//! per channel pair that the direct form does for it into 16: the
//! patch becomes `V = Bt d B`, the filter `U = G g Gt` (once, at build),
//! each of the 16 positions multiplies them and sums over the input
//! channels, and `Y = At M A` brings the sums back to the tile's 4
//! outputs. The sums over input channels are 16 matrix products, one per
//! position, of tiles by input channels times input by output channels;
//! they run on the direct kernel's tile (`direct::pointwise`, as a 1x1
//! convolution whose "pixels" are tiles), so they keep its register
//! blocking and its AVX-512 form. The transforms are additions and
//! subtractions of 8-channel vectors (the filter's halves are exact).
//!
//! The work is split into groups of tiles whose transformed input and
//! products (16 positions each) stay in L2: one group transforms its
//! patches, runs the 16 products, and transforms the sums back into the
//! blocked output with the bias, the bounds and a residual.
//!
//! The results differ from the direct form's by rounding: the
//! transforms add a few roundings per term, but each position sums only
//! the input channels, so the error measured smaller than the direct
//! form's (64 channels on 56x56, against a float64 reference: at most
//! 0.76 eps times the sum of the terms' magnitudes, against 2.06), and
//! both stay inside the bound the tests hold them to. A NaN input
//! reaches exactly the outputs whose windows hold it; an infinite one
//! may give NaN where the direct form gives an infinity (in a transform
//! it meets itself with the opposite sign).

use super::direct::{pointwise, tile_pixels, Geometry};
use super::par::{for_units, Out, PAR_WORK};
use super::simd::Vf;
use super::{Panel, L};
use crate::graph::ops::conv::Conv2dParams;

/// Positions of a transformed tile: 4 x 4.
pub(super) const POS: usize = 16;

/// Bytes of one group's transformed input and products.
const GROUP_BYTES: usize = 256 << 10;

/// `U = G g Gt` of every filter (`f` in OIHW, 3x3), packed for
/// `direct::pointwise` as one 1x1 convolution per position: position `k`'s
/// slab (`oc * ic` floats, at `k * oc * ic`) holds `panels` in order,
/// each `[ic][nb * 8]`. Computed in double precision and rounded once.
pub(super) fn pack(f: &[f32], ic: usize, oc: usize, panels: &[Panel]) -> Vec<f32> {
    // G g Gt for one 3x3 filter, row-major 4x4.
    let transform = |g: &[f32]| -> [f32; POS] {
        let g: Vec<f64> = g.iter().map(|&v| f64::from(v)).collect();
        // Gg: the rows of g combined (4 x 3).
        let mut gg = [[0.0f64; 3]; 4];
        for c in 0..3 {
            let (a, b, d) = (g[c], g[3 + c], g[6 + c]);
            gg[0][c] = a;
            gg[1][c] = (a + b + d) / 2.0;
            gg[2][c] = (a - b + d) / 2.0;
            gg[3][c] = d;
        }
        let mut u = [0.0f32; POS];
        for (r, row) in gg.iter().enumerate() {
            let [a, b, d] = *row;
            let v = [a, (a + b + d) / 2.0, (a - b + d) / 2.0, d];
            for (c, x) in v.into_iter().enumerate() {
                u[r * 4 + c] = x as f32;
            }
        }
        u
    };
    let mut u = vec![[0.0f32; POS]; oc * ic];
    for (o, row) in u.chunks_mut(ic).enumerate() {
        for (i, t) in row.iter_mut().enumerate() {
            let at = (o * ic + i) * 9;
            *t = transform(&f[at..at + 9]);
        }
    }
    let mut w = Vec::with_capacity(POS * oc * ic);
    for k in 0..POS {
        for pn in panels {
            for i in 0..ic {
                let rows = &u[pn.ob0 * L * ic..(pn.ob0 + pn.nb) * L * ic];
                w.extend(rows.iter().skip(i).step_by(ic).map(|t| t[k]));
            }
        }
    }
    w
}

/// Whether a conv2d of `p` can run here: plain, 3x3, unit strides and
/// dilations, whole blocks of 8 channels in and out.
pub(super) fn fits(p: &Conv2dParams) -> bool {
    // Either layout: the input is read blocked.
    p.groups == 1
        && p.kernel_h == 3
        && p.kernel_w == 3
        && p.strides == [1, 1]
        && p.dilations == [1, 1]
        && p.in_channels.is_multiple_of(L)
        && p.out_channels.is_multiple_of(L)
        && p.batch > 0
        && p.in_channels > 0
        && p.out_channels > 0
        && p.out_h > 0
        && p.out_w > 0
        // The output is what a 3x3 window over the padded input gives.
        && p.out_h + 2 == p.in_h + p.padding[0] + p.padding[1]
        && p.out_w + 2 == p.in_w + p.padding[2] + p.padding[3]
}

/// The tiles of one convolution and where they come from.
struct Tiles {
    /// Tiles per row and per image.
    tw: usize,
    per_image: usize,
    h: usize,
    w: usize,
    oh: usize,
    ow: usize,
    pt: usize,
    pl: usize,
    icb: usize,
    ocb: usize,
}

impl Tiles {
    /// Image, first output row and column of tile `t`.
    fn at(&self, t: usize) -> (usize, usize, usize) {
        let (b, r) = (t / self.per_image, t % self.per_image);
        (b, 2 * (r / self.tw), 2 * (r % self.tw))
    }
}

/// `Bt d B` of the 4x4 patch of input block `xb` (a plane of `h * w`
/// pixels of 8 channels) whose top left is at row `y0`, column `x0` (the
/// padding's offsets applied: either may be negative), zeros outside
/// the plane; position `k` stored at `dst + k * ps`.
///
/// # Safety
/// `N`'s features (8 lanes); `xb` is a whole plane, `h * w * 8`
/// readable floats; `dst + k * ps .. + 8` writable for `k < 16`.
#[inline(always)]
unsafe fn input_tile<N: Vf>(
    xb: *const f32,
    (h, w): (usize, usize),
    (y0, x0): (isize, isize),
    dst: *mut f32,
    ps: usize,
) {
    let inside = y0 >= 0 && x0 >= 0 && y0 as usize + 4 <= h && x0 as usize + 4 <= w;
    // SAFETY: `N`'s features, which the caller guarantees.
    let mut d = unsafe { [[N::splat(0.0); 4]; 4] };
    // SAFETY: `N`'s features (the caller's). Every load is the 8 floats
    // of a pixel `(y, x)` with `y < h`, `x < w` (the whole patch checked
    // by `inside`, else each pixel), inside the plane; each store is at
    // `dst + k * ps` for `k = r * 4 + c < 16`, writable by the contract.
    unsafe {
        if inside {
            let base = xb.add((y0 as usize * w + x0 as usize) * L);
            for (i, row) in d.iter_mut().enumerate() {
                for (j, v) in row.iter_mut().enumerate() {
                    *v = N::load(base.add((i * w + j) * L));
                }
            }
        } else {
            for (i, row) in d.iter_mut().enumerate() {
                let y = y0 + i as isize;
                if y < 0 || y as usize >= h {
                    continue;
                }
                for (j, v) in row.iter_mut().enumerate() {
                    let x = x0 + j as isize;
                    if x >= 0 && (x as usize) < w {
                        *v = N::load(xb.add((y as usize * w + x as usize) * L));
                    }
                }
            }
        }
        // Bt on the rows, then B on the columns.
        let mut s = [[N::splat(0.0); 4]; 4];
        for j in 0..4 {
            s[0][j] = N::sub(d[0][j], d[2][j]);
            s[1][j] = N::add(d[1][j], d[2][j]);
            s[2][j] = N::sub(d[2][j], d[1][j]);
            s[3][j] = N::sub(d[1][j], d[3][j]);
        }
        for (r, row) in s.iter().enumerate() {
            let v = [
                N::sub(row[0], row[2]),
                N::add(row[1], row[2]),
                N::sub(row[2], row[1]),
                N::sub(row[1], row[3]),
            ];
            for (c, x) in v.into_iter().enumerate() {
                x.store(dst.add((r * 4 + c) * ps));
            }
        }
    }
}

/// `At m A` of one tile's 16 sums (position `k` at `m + k * ps`, 8
/// channels), then the bias, the bounds and the residual as the direct
/// kernel's epilogue does them, into the pixels of output plane `ob`
/// (at `out`, `ow` wide) that lie inside it (`rows`, `cols`: 1 or 2).
///
/// # Safety
/// `N`'s features (8 lanes); `m + k * ps .. + 8` readable for `k < 16`;
/// `out + (r * ow + c) * 8 .. + 8` writable (and `sum` at the same
/// offsets readable, when not null) for `r < rows`, `c < cols`, cells
/// no one else accesses during the call.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn output_tile<N: Vf>(
    m: *const f32,
    ps: usize,
    bias: N,
    (lo, hi): (N, N),
    out: *mut f32,
    (sum, (alo, ahi)): (*const f32, (N, N)),
    ow: usize,
    (rows, cols): (usize, usize),
) {
    // SAFETY: `N`'s features (the caller's); the loads from `m` are
    // positions `k < 16`, the stores (and residual loads) pixels `(r, c)`
    // with `r < rows`, `c < cols`, all as the contract allows.
    unsafe {
        let v = |k: usize| N::load(m.add(k * ps));
        let mut t = [[N::splat(0.0); 4]; 2];
        // An index loop, not closures (`from_fn`): a closure that is not
        // inlined loses `N`'s features.
        #[allow(clippy::needless_range_loop)]
        for c in 0..4 {
            let (a, b, d, e) = (v(c), v(4 + c), v(8 + c), v(12 + c));
            t[0][c] = N::add(N::add(a, b), d);
            t[1][c] = N::sub(N::sub(b, d), e);
        }
        for (r, row) in t.iter().enumerate().take(rows) {
            let y = [
                N::add(N::add(row[0], row[1]), row[2]),
                N::sub(N::sub(row[1], row[2]), row[3]),
            ];
            for (c, &yc) in y.iter().enumerate().take(cols) {
                let at = (r * ow + c) * L;
                let mut z = N::min(hi, N::max(lo, N::add(yc, bias)));
                if !sum.is_null() {
                    z = N::add(z, N::load(sum.add(at)));
                    z = N::min(ahi, N::max(alo, z));
                }
                z.store(out.add(at));
            }
        }
    }
}

/// Runs the convolution `p` (which [`fits`]) of blocked `x` with the
/// filter `u` packed by [`pack`] for `panels`, into blocked `res`: the
/// bias, bounds `(lo, hi)` and residual `sum` as `direct::direct` takes
/// them. Panels whose channels fill whole `V` vectors run their products
/// on `V`, the others on `N` (8 lanes); the transforms run on `N`.
///
/// # Safety
/// The CPU has `V`'s and `N`'s features; `p` [`fits`]; `u` and `panels`
/// are [`pack`]'s for `p`'s channels (`u.len()` = `16 * oc * ic`), `x`
/// holds `batch * ic * in_h * in_w` floats, `bias` (if any) `oc`, `sum`
/// (if any) and `res` `batch * oc * out_h * out_w`. `super::conv`
/// checks all of these but the panels, which the plan made with `u`.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn winograd<V: Vf, N: Vf>(
    u: &[f32],
    panels: &[Panel],
    p: &Conv2dParams,
    x: &[f32],
    bias: Option<&[f32]>,
    (lo, hi): (f32, f32),
    (sum, after): (Option<&[f32]>, (f32, f32)),
    res: &mut [f32],
) {
    let (ic, oc) = (p.in_channels, p.out_channels);
    let (th, tw) = (p.out_h.div_ceil(2), p.out_w.div_ceil(2));
    let tiles = Tiles {
        tw,
        per_image: th * tw,
        h: p.in_h,
        w: p.in_w,
        oh: p.out_h,
        ow: p.out_w,
        pt: p.padding[0],
        pl: p.padding[2],
        icb: ic / L,
        ocb: oc / L,
    };
    let count = p.batch * th * tw;
    // Tiles per group: a whole number of the products' rows (the widest
    // tile's), as many as keep the group's scratch in L2, and at least
    // two rows of them, since each group reads the whole filter (with
    // 512 channels in and out 16 MB, for one row of 12 tiles: 512 to 512
    // channels on 7x7, 2.06 ms against 2.51 for the direct form).
    let mr = tile_pixels(V::W, 2).max(tile_pixels(N::W, 2));
    let per_tile = POS * (ic + oc) * 4;
    let mut group = ((GROUP_BYTES / per_tile / mr).max(2) * mr).min(count);
    let work = count * POS * ic * oc;
    let par = work >= PAR_WORK;
    let threads = rayon::current_num_threads();
    if par {
        // A whole number of groups per thread (then a little smaller).
        group = count.div_ceil(count.div_ceil(group).next_multiple_of(threads));
    }
    let groups = count.div_ceil(group);
    // Too few groups to go round: split the panels too (each part
    // transforms the group's input again, a small cost beside the
    // products of many channels).
    let splits = match par && groups < 4 * threads {
        true => (4 * threads).div_ceil(groups).min(panels.len()),
        false => 1,
    };
    let units = groups * splits;
    let tasks = match par {
        true => units.min(2 * threads),
        false => 1,
    };
    let o = Out(res.as_mut_ptr());
    let (xs, us) = (x.as_ptr() as usize, u.as_ptr() as usize);
    let bs = bias.map(|b| b.as_ptr() as usize);
    let ss = sum.map(|r| r.as_ptr() as usize);
    let tiles = &tiles;
    for_units(tasks, par, move |task| {
        let _ = &o;
        let mut scratch = crate::tensor::Buf::f32_for_overwrite(POS * group * (ic + oc));
        let (vs, ms) = scratch.split_at_mut(POS * group * ic);
        let mut last = usize::MAX;
        for unit in task * units / tasks..(task + 1) * units / tasks {
            let (gi, si) = (unit / splits, unit % splits);
            let t0 = gi * group;
            let n = group.min(count - t0);
            let mine = &panels[si * panels.len() / splits..(si + 1) * panels.len() / splits];
            // SAFETY: the caller's features, which `V::with` enables.
            // `run_group`'s contract: tiles `t0 .. t0 + n` exist (`n <=
            // count - t0`); `vs` and `ms` hold `16 * group * ic` and `16 *
            // group * oc` floats of this task's own scratch, room for
            // `n <= group` tiles, and `vs` holds this group's transform
            // when `last == gi` (the same task made it, for the same
            // `n`); `mine` is a run of consecutive panels of `pack`'s
            // layout; the sizes are the caller's. The output cells it
            // writes, its tiles' pixels of `mine`'s blocks, belong to
            // this unit alone: units split the groups and the panels,
            // tasks the units, and `res` stays borrowed until
            // `for_units` returns.
            unsafe {
                V::with(
                    #[inline(always)]
                    || {
                        run_group::<V, N>(
                            tiles,
                            (t0, n, last != gi),
                            xs as *const f32,
                            (us as *const f32, mine),
                            (bs, ss),
                            (lo, hi, after),
                            (vs.as_mut_ptr(), ms.as_mut_ptr()),
                            o.0,
                        )
                    },
                )
            };
            last = gi;
        }
        crate::tensor::Buf::F32(scratch).recycle();
    });
}

/// One group: tiles `t0..t0 + n`, the output channels of `panels`.
/// `vs` holds `[16][icb][n][8]` (the transformed patches, made when
/// `fresh`, else those of the same group's last call), `ms`
/// `[16][ocb][n][8]` (their products).
///
/// # Safety
/// `V`'s and `N`'s features; `x`, `u`, `bias`, `sum` and `out` as
/// [`winograd`]'s contract has them for the convolution `tl` describes,
/// tiles `t0..t0 + n` among its tiles and `panels` a run of consecutive
/// panels of `u`'s; `vs` and `ms` hold `16 * n * ic` and `16 * n * oc`
/// floats, `vs` this group's transformed input when not `fresh`; the
/// output pixels of these tiles in `panels`' blocks are the caller's
/// alone.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn run_group<V: Vf, N: Vf>(
    tl: &Tiles,
    (t0, n, fresh): (usize, usize, bool),
    x: *const f32,
    (u, panels): (*const f32, &[Panel]),
    (bias, sum): (Option<usize>, Option<usize>),
    (lo, hi, after): (f32, f32, (f32, f32)),
    (vs, ms): (*mut f32, *mut f32),
    out: *mut f32,
) {
    let (icb, ocb) = (tl.icb, tl.ocb);
    let plane = tl.h * tl.w * L;
    // SAFETY: the features are the caller's. Input transform: `xb` is
    // plane `(b, ib)` of `x` (`b < batch` from `at`, `ib < icb`), and
    // position `k` of tile `i` goes to `vs + (ib * n + i) * 8 + k * vps`,
    // below `16 * vps` = `16 * n * ic`. Products: position `k`'s input
    // is `vs + k * vps` (`icb` blocks `n * 8` apart, `n` pixels), its
    // filter slab `u + k * slab` (`slab` = `ic * oc`, the panels inside
    // it at `pn.off`), its output `ms + k * mps` (`ocb` blocks `n * 8`
    // apart), below `16 * mps` = `16 * n * oc`, and only `panels`'
    // blocks are written or, below, read. Output transform: block `ob`
    // of `panels`' run, tile `i`'s sums at `ms + (ob * n + i) * 8` (step
    // `mps`); the bias at `ob * 8` of `oc`; the tile's pixels at `at`
    // in plane `(b, ob)` of `out` (and `sum`), only the `fit` rows and
    // columns inside the `oh x ow` plane.
    unsafe {
        // Input transform, block by block, tile by tile along the row;
        // not when `vs` holds this group's already.
        let vps = icb * n * L;
        if fresh {
            for ib in 0..icb {
                for i in 0..n {
                    let (b, oy, ox) = tl.at(t0 + i);
                    let xb = x.add((b * icb + ib) * plane);
                    let at = (oy as isize - tl.pt as isize, ox as isize - tl.pl as isize);
                    input_tile::<N>(xb, (tl.h, tl.w), at, vs.add((ib * n + i) * L), vps);
                }
            }
        }
        // The 16 products: tiles by input channels, times the position's
        // filter slab, into tiles by output channels.
        let mps = ocb * n * L;
        let g = Geometry {
            px: L,
            taps: &[0],
            ibs: n * L,
            icb,
            cl: L,
            cs: 1,
            obs: n * L,
            lo: f32::NEG_INFINITY,
            hi: f32::INFINITY,
        };
        let slab = icb * ocb * L * L;
        for k in 0..POS {
            let (vk, mk) = (vs.add(k * vps), ms.add(k * mps));
            let (none, uk) = (std::ptr::null(), u.add(k * slab));
            pointwise::<V, N>(uk, panels, &g, vk, none, none, mk, n);
        }
        // Output transform, with the epilogue.
        let (lo, hi) = (N::splat(lo), N::splat(hi));
        let after = (N::splat(after.0), N::splat(after.1));
        let opl = tl.oh * tl.ow * L;
        let (Some(first), Some(end)) = (panels.first(), panels.last()) else {
            return;
        };
        for ob in first.ob0..end.ob0 + end.nb {
            let bv = match bias {
                Some(bp) => N::load((bp as *const f32).add(ob * L)),
                None => N::splat(-0.0),
            };
            for i in 0..n {
                let (b, oy, ox) = tl.at(t0 + i);
                let at = (b * ocb + ob) * opl + (oy * tl.ow + ox) * L;
                let sp = sum.map_or(std::ptr::null(), |s| (s as *const f32).add(at));
                let fit = ((tl.oh - oy).min(2), (tl.ow - ox).min(2));
                output_tile::<N>(
                    ms.add((ob * n + i) * L),
                    mps,
                    bv,
                    (lo, hi),
                    out.add(at),
                    (sp, after),
                    tl.ow,
                    fit,
                );
            }
        }
    }
}
