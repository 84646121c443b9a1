//! CPU kernels: gru, gruCell, lstm, lstmCell.
//!
//! All four run the same loop: per direction, per time step, one cell
//! update of every batch row, following the gate equations of the spec's
//! gruCell/lstmCell decompositions. Arithmetic is in f64 (the states carry
//! from step to step, so rounding them once per step to float32 or float16
//! would compound); each output is rounded once to its type.

use rayon::prelude::*;

use crate::backend::cpu::simd::with_simd;
use crate::backend::cpu::util::{from_floats, try_copy, try_filled, try_vec};
use crate::error::{Error, Result};
use crate::f16::f16_to_f32;
use crate::graph::ops::recurrent::{RecurrentOp, RnnActivation, RnnDirection, RnnParams};
use crate::tensor::Buf;
use crate::types::{DataType, OperandDescriptor};

/// Runs one operator of this family; returns one buffer per output.
/// `weights`: its weights and recurrent weights prepared at compile
/// ([`Weights::new`]), when both are constants; then inputs 1 and 2 are
/// not read.
pub fn run(
    op: &RecurrentOp,
    inputs: &[&Buf],
    in_descs: &[&OperandDescriptor],
    out_descs: &[OperandDescriptor],
    weights: Option<&Weights>,
) -> Result<Vec<Buf>> {
    let dt = in_descs
        .first()
        .map(|d| d.data_type)
        .ok_or_else(|| Error::operation("a recurrent operator has no input"))?;
    let (p, lstm) = params(op);
    let prepared;
    let weights = match weights {
        Some(w) => w,
        None => {
            let (Some(w), Some(r)) = (inputs.get(1), inputs.get(2)) else {
                return Err(Error::operation("a recurrent operator has no weights"));
            };
            prepared = Weights::new(op, w, r)?;
            &prepared
        }
    };
    // The weights are read from `weights` alone: not converted again.
    let ins: Vec<Vec<f64>> = inputs
        .iter()
        .enumerate()
        .map(|(i, b)| match i {
            1 | 2 => Ok(Vec::new()),
            _ => to_f64(b),
        })
        .collect::<Result<_>>()?;
    let outs = network_with(p, lstm, &ins, weights)?;
    if outs.len() != out_descs.len() {
        return Err(Error::operation(
            "a recurrent operator produced the wrong number of outputs",
        ));
    }
    outs.into_iter().map(|v| from_f64(dt, &v)).collect()
}

fn params(op: &RecurrentOp) -> (&RnnParams, bool) {
    match op {
        RecurrentOp::Gru(p) | RecurrentOp::GruCell(p) => (p, false),
        RecurrentOp::Lstm(p) | RecurrentOp::LstmCell(p) => (p, true),
    }
}

/// A recurrent operator's weights and recurrent weights in f64, each
/// direction's transposed (`isz x rows` and `hidden x rows`), as its
/// steps read them (see [`products`]). Made once at compile where both
/// are constants (a dispatch of a short sequence spent as long converting
/// and transposing them as computing).
pub struct Weights {
    wt: Vec<f64>,
    rt: Vec<f64>,
}

impl Weights {
    pub fn new(op: &RecurrentOp, w: &Buf, r: &Buf) -> Result<Weights> {
        let (p, lstm) = params(op);
        Weights::of_f64(p, lstm, &to_f64(w)?, &to_f64(r)?)
    }

    fn of_f64(p: &RnnParams, lstm: bool, w: &[f64], r: &[f64]) -> Result<Weights> {
        let (dirs, h, isz) = (p.num_directions(), p.hidden, p.input_size);
        let rows = if lstm { 4 * h } else { 3 * h };
        let size = |n: usize| dirs.checked_mul(rows)?.checked_mul(n);
        if size(isz) != Some(w.len()) || size(h) != Some(r.len()) {
            return Err(Error::operation("a recurrent operand has the wrong size"));
        }
        Ok(Weights {
            wt: transposed(w, dirs, rows, isz)?,
            rt: transposed(r, dirs, rows, h)?,
        })
    }
}

fn to_f64(b: &Buf) -> Result<Vec<f64>> {
    let mut out = try_vec(b.len(), "a recurrent operand in float64")?;
    match b {
        Buf::F32(v) => out.extend(v.iter().map(|&x| x as f64)),
        Buf::F16(v) => out.extend(v.iter().map(|&x| f16_to_f32(x) as f64)),
        _ => {
            return Err(Error::operation(
                "a recurrent operator got a non-float tensor",
            ))
        }
    }
    Ok(out)
}

fn from_f64(dt: DataType, v: &[f64]) -> Result<Buf> {
    let mut out = try_vec(v.len(), "a recurrent output in float32")?;
    out.extend(v.iter().map(|&x| x as f32));
    from_floats(dt, out)
}

fn act(a: RnnActivation, x: f64) -> f64 {
    match a {
        RnnActivation::Relu => x.max(0.0),
        RnnActivation::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        RnnActivation::Tanh => x.tanh(),
    }
}

/// Reads an optional input, checking its length.
fn opt(ins: &[Vec<f64>], idx: Option<usize>, len: usize) -> Result<Option<&[f64]>> {
    match idx {
        None => Ok(None),
        Some(i) => match ins.get(i) {
            Some(v) if v.len() == len => Ok(Some(v)),
            _ => Err(Error::operation("a recurrent operand has the wrong size")),
        },
    }
}

/// Weights of one direction: the weights transposed (`wt`: `isz x
/// rows`, `rt`: `hidden x rows`), the rest slices of the packed tensors.
struct Dir<'a> {
    wt: &'a [f64],
    rt: &'a [f64],
    bias: Option<&'a [f64]>,
    rbias: Option<&'a [f64]>,
    peep: Option<&'a [f64]>,
}

/// [`network_with`] given the weights in the operator's own layout (the
/// tests' form).
#[cfg(test)]
fn network(p: &RnnParams, lstm: bool, ins: &[Vec<f64>]) -> Result<Vec<Vec<f64>>> {
    let none = Vec::new();
    let at = |i: usize| ins.get(i).unwrap_or(&none);
    let weights = Weights::of_f64(p, lstm, at(1), at(2))?;
    network_with(p, lstm, ins, &weights)
}

/// The whole network: outputs as in `RecurrentOp`'s documentation
/// (last hidden, [last cell], [sequence]). The weights come prepared
/// (`ins[1]` and `ins[2]` are not read).
fn network_with(
    p: &RnnParams,
    lstm: bool,
    ins: &[Vec<f64>],
    weights: &Weights,
) -> Result<Vec<Vec<f64>>> {
    let (steps, batch, isz, h) = (p.steps, p.batch, p.input_size, p.hidden);
    let dirs = p.num_directions();
    let n_gates = if lstm { 4 } else { 3 };
    let rows = n_gates * h;
    let state_len = dirs * batch * h;
    let x = opt(ins, Some(0), steps * batch * isz)?.unwrap_or_default();
    let bias = opt(ins, p.bias, dirs * rows)?;
    let rbias = opt(ins, p.recurrent_bias, dirs * rows)?;
    let peep = opt(ins, p.peephole, dirs * 3 * h)?;
    let h0 = opt(ins, p.hidden_state, state_len)?;
    let c0 = opt(ins, p.cell_state, state_len)?;

    let mut last_h = try_filled(state_len, 0.0, "the last hidden state")?;
    let mut last_c = try_filled(state_len, 0.0, "the last cell state")?;
    let mut seq = if p.return_sequence {
        try_filled(steps * state_len, 0.0, "the output sequence")?
    } else {
        Vec::new()
    };
    let (wt, rt) = (&weights.wt, &weights.rt);
    if wt.len() != dirs * rows * isz || rt.len() != dirs * rows * h {
        return Err(Error::operation("a recurrent operand has the wrong size"));
    }
    for d in 0..dirs {
        let dir = Dir {
            wt: &wt[d * rows * isz..(d + 1) * rows * isz],
            rt: &rt[d * rows * h..(d + 1) * rows * h],
            bias: bias.map(|b| &b[d * rows..(d + 1) * rows]),
            rbias: rbias.map(|b| &b[d * rows..(d + 1) * rows]),
            peep: peep.map(|b| &b[d * 3 * h..(d + 1) * 3 * h]),
        };
        let st = d * batch * h..(d + 1) * batch * h;
        let state = |init: Option<&[f64]>, what: &str| match init {
            Some(v) => try_copy(&v[st.clone()], what),
            None => try_filled(batch * h, 0.0, what),
        };
        let mut hs = state(h0, "the hidden state")?;
        let mut cs = state(c0, "the cell state")?;
        let xp = project(x, steps * batch, isz, &dir, rows)?;
        let mut scratch = Scratch::new(rows, h)?;
        // The second direction of "both", and "backward", read the
        // sequence from its end.
        let reverse = p.direction == RnnDirection::Backward || d == 1;
        for step in 0..steps {
            let t = if reverse { steps - 1 - step } else { step };
            let xpt = &xp[t * batch * rows..(t + 1) * batch * rows];
            if lstm {
                lstm_step(p, &dir, xpt, &mut hs, &mut cs, &mut scratch);
            } else {
                gru_step(p, &dir, xpt, &mut hs, &mut scratch);
            }
            if p.return_sequence {
                // The sequence is indexed by the time slice, whatever the
                // direction: [t, d, batch, hidden].
                let off = t * state_len + d * batch * h;
                seq[off..off + batch * h].copy_from_slice(&hs);
            }
        }
        last_h[st.clone()].copy_from_slice(&hs);
        last_c[st].copy_from_slice(&cs);
    }
    let mut outs = vec![last_h];
    if lstm {
        outs.push(last_c);
    }
    if p.return_sequence {
        outs.push(seq);
    }
    Ok(outs)
}

/// Each direction's `rows x n` block of `m` transposed to `n x rows`.
fn transposed(m: &[f64], dirs: usize, rows: usize, n: usize) -> Result<Vec<f64>> {
    let mut t = try_filled(
        m.len(),
        0.0,
        "the transposed weights of a recurrent operator",
    )?;
    let block = rows * n;
    if block == 0 {
        return Ok(t);
    }
    for (src, dst) in m
        .chunks_exact(block)
        .zip(t.chunks_exact_mut(block))
        .take(dirs)
    {
        for (r, row) in src.chunks_exact(n).enumerate() {
            for (k, &v) in row.iter().enumerate() {
                dst[k * rows + r] = v;
            }
        }
    }
    Ok(t)
}

/// Multiply-adds of one product above which its rows are split across
/// the pool (a fork and join cost some microseconds; 2^18 multiply-adds
/// take tens).
const PAR_MACS: usize = 1 << 18;

/// `out[i] = Σ_k mt[k * stride + col0 + i] * v[k]`: rows `col0..` of a
/// matrix against `v`, from its transpose `mt` (`stride` rows). Each sum
/// runs in k order from -0.0, as `Iterator::sum` adds a dot product, but
/// with k outside and the rows inside, so the loop vectorises across rows
/// without reordering any sum (the bits of a running dot product per row,
/// at every vector width). Rows are split across the pool when there are
/// enough multiply-adds.
fn products(out: &mut [f64], mt: &[f64], stride: usize, col0: usize, v: &[f64]) {
    let threads = rayon::current_num_threads();
    if out.len().saturating_mul(v.len()) >= PAR_MACS && threads > 1 {
        let chunk = out.len().div_ceil(threads * 2);
        out.par_chunks_mut(chunk).enumerate().for_each(|(c, o)| {
            with_simd(
                #[inline(always)]
                || product_rows(o, mt, stride, col0 + c * chunk, v),
            )
        });
    } else {
        with_simd(
            #[inline(always)]
            || product_rows(out, mt, stride, col0, v),
        );
    }
}

/// The loop of [`products`]. A function rather than a closure, which the
/// compiler would leave out of line, compiled without the vector features.
#[inline(always)]
fn product_rows(out: &mut [f64], mt: &[f64], stride: usize, col0: usize, v: &[f64]) {
    out.fill(-0.0);
    let n = out.len();
    for (k, &vk) in v.iter().enumerate() {
        let col = &mt[k * stride + col0..k * stride + col0 + n];
        for (o, &m) in out.iter_mut().zip(col) {
            *o += m * vk;
        }
    }
}

/// The input's share of every gate at every step, which does not depend
/// on the recurrence: `w[row] · x[s]` for each of the `rows` rows, per row
/// `s < count` of `x` (each `isz` long), the steps across the pool.
fn project(x: &[f64], count: usize, isz: usize, d: &Dir, rows: usize) -> Result<Vec<f64>> {
    let total = count
        .checked_mul(rows)
        .ok_or_else(|| Error::operation("a recurrent projection's size overflows"))?;
    let mut xp = try_filled(total, -0.0, "the input projections of a recurrent operator")?;
    if total == 0 || isz == 0 {
        return Ok(xp);
    }
    let xs = |s: usize| &x[s * isz..(s + 1) * isz];
    let threads = rayon::current_num_threads();
    if total.saturating_mul(isz) >= PAR_MACS && threads > 1 {
        xp.par_chunks_mut(rows).enumerate().for_each(|(s, out)| {
            with_simd(
                #[inline(always)]
                || product_rows(out, d.wt, rows, 0, xs(s)),
            )
        });
    } else {
        with_simd(
            #[inline(always)]
            || {
                for (s, out) in xp.chunks_mut(rows).enumerate() {
                    product_rows(out, d.wt, rows, 0, xs(s));
                }
            },
        );
    }
    Ok(xp)
}

fn at(v: Option<&[f64]>, i: usize) -> f64 {
    v.map_or(0.0, |v| v[i])
}

/// Per-step scratch of a direction, allocated once.
struct Scratch {
    /// The recurrent products of one batch row, one per gate row.
    r: Vec<f64>,
    /// GRU: the gates z and r.
    z: Vec<f64>,
    rg: Vec<f64>,
    /// GRU: the reset gate times the hidden state.
    rh: Vec<f64>,
    /// The new hidden state of one batch row.
    out: Vec<f64>,
}

impl Scratch {
    fn new(rows: usize, h: usize) -> Result<Scratch> {
        let what = "the gates of a recurrent step";
        Ok(Scratch {
            r: try_filled(rows, 0.0, what)?,
            z: try_filled(h, 0.0, what)?,
            rg: try_filled(h, 0.0, what)?,
            rh: try_filled(h, 0.0, what)?,
            out: try_filled(h, 0.0, what)?,
        })
    }
}

/// One gruCell update of every batch row: z and r gates, new gate n, then
/// h' = z * h + (1 - z) * n. `xp` holds the step's input products,
/// `3 * hidden` per batch row. Every pre-activation adds its terms in the
/// order of the gate equations: input product, recurrent product, bias,
/// recurrent bias.
fn gru_step(p: &RnnParams, d: &Dir, xp: &[f64], hs: &mut [f64], sc: &mut Scratch) {
    let h = p.hidden;
    let rows = 3 * h;
    let (zb, rb, nb) = (p.gates[0] * h, p.gates[1] * h, p.gates[2] * h);
    let (fg, fn_) = (p.activations[0], p.activations[1]);
    let Scratch {
        r, z, rg, rh, out, ..
    } = sc;
    for b in 0..p.batch {
        let hb = &hs[b * h..(b + 1) * h];
        let xb = &xp[b * rows..(b + 1) * rows];
        let gate = |r: &[f64], base: usize, j: usize| {
            let row = base + j;
            xb[row] + r[row] + at(d.bias, row) + at(d.rbias, row)
        };
        // The z and r rows against the hidden state (the n rows too when
        // the reset comes after the product).
        if p.reset_after {
            products(r, d.rt, rows, 0, hb);
        } else {
            products(&mut r[zb..zb + h], d.rt, rows, zb, hb);
            products(&mut r[rb..rb + h], d.rt, rows, rb, hb);
        }
        for j in 0..h {
            z[j] = act(fg, gate(r, zb, j));
            rg[j] = act(fg, gate(r, rb, j));
            rh[j] = rg[j] * hb[j];
        }
        if !p.reset_after {
            // The n rows against the reset hidden state.
            products(&mut r[nb..nb + h], d.rt, rows, nb, rh);
        }
        for j in 0..h {
            let row = nb + j;
            let xn = xb[row] + at(d.bias, row);
            let n = if p.reset_after {
                act(fn_, xn + rg[j] * (r[row] + at(d.rbias, row)))
            } else {
                act(fn_, xn + at(d.rbias, row) + r[row])
            };
            out[j] = z[j] * hb[j] + (1.0 - z[j]) * n;
        }
        hs[b * h..(b + 1) * h].copy_from_slice(out);
    }
}

/// One lstmCell update of every batch row: gates i, f, o (with peepholes
/// on the incoming cell state), cell gate g, then c' = f * c + i * g and
/// h' = o * act(c'). `xp` holds the step's input products, `4 * hidden`
/// per batch row.
fn lstm_step(p: &RnnParams, d: &Dir, xp: &[f64], hs: &mut [f64], cs: &mut [f64], sc: &mut Scratch) {
    let h = p.hidden;
    let rows = 4 * h;
    let (ib, ob, fb, gb) = (
        p.gates[0] * h,
        p.gates[1] * h,
        p.gates[2] * h,
        p.gates[3] * h,
    );
    let (fgate, fcell, fout) = (p.activations[0], p.activations[1], p.activations[2]);
    let Scratch { r, out, .. } = sc;
    for b in 0..p.batch {
        let hb = &hs[b * h..(b + 1) * h];
        let xb = &xp[b * rows..(b + 1) * rows];
        products(r, d.rt, rows, 0, hb);
        let pre = |base: usize, j: usize| {
            let row = base + j;
            xb[row] + r[row] + at(d.bias, row) + at(d.rbias, row)
        };
        let cb = &mut cs[b * h..(b + 1) * h];
        for j in 0..h {
            let c = cb[j];
            // Peepholes are packed i, o, f whatever the layout.
            let i = act(fgate, pre(ib, j) + c * at(d.peep, j));
            let o = act(fgate, pre(ob, j) + c * at(d.peep, h + j));
            let f = act(fgate, pre(fb, j) + c * at(d.peep, 2 * h + j));
            let g = act(fcell, pre(gb, j));
            let c_new = f * c + i * g;
            cb[j] = c_new;
            out[j] = o * act(fout, c_new);
        }
        hs[b * h..(b + 1) * h].copy_from_slice(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::simd::{levels, pool_at};

    fn params(lstm: bool, steps: usize, batch: usize, isz: usize, h: usize) -> RnnParams {
        use RnnActivation::*;
        RnnParams {
            steps,
            batch,
            input_size: isz,
            hidden: h,
            direction: RnnDirection::Forward,
            return_sequence: false,
            reset_after: true,
            gates: if lstm {
                vec![0, 1, 2, 3]
            } else {
                vec![0, 1, 2]
            },
            activations: if lstm {
                vec![Sigmoid, Tanh, Tanh]
            } else {
                vec![Sigmoid, Tanh]
            },
            bias: None,
            recurrent_bias: None,
            peephole: None,
            hidden_state: None,
            cell_state: None,
        }
    }

    fn sig(x: f64) -> f64 {
        1.0 / (1.0 + (-x).exp())
    }

    /// Deterministic pseudo-random values in [-1, 1).
    fn vals(n: usize, seed: u64) -> Vec<f64> {
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 33) as f64 / (1u64 << 31) as f64) * 2.0 - 1.0
            })
            .collect()
    }

    /// Naive GRU cell straight from the gate equations (zrn layout,
    /// sigmoid/tanh), one batch row.
    fn gru_ref(
        x: &[f64],
        h: &[f64],
        w: &[f64],
        rw: &[f64],
        b: &[f64],
        rb: &[f64],
        reset_after: bool,
    ) -> Vec<f64> {
        let (isz, hs) = (x.len(), h.len());
        let mv = |m: &[f64], v: &[f64], row: usize| -> f64 {
            (0..v.len()).map(|k| m[row * v.len() + k] * v[k]).sum()
        };
        let z: Vec<f64> = (0..hs)
            .map(|j| sig(mv(w, x, j) + mv(rw, h, j) + b[j] + rb[j]))
            .collect();
        let r: Vec<f64> = (0..hs)
            .map(|j| sig(mv(w, x, hs + j) + mv(rw, h, hs + j) + b[hs + j] + rb[hs + j]))
            .collect();
        let rh: Vec<f64> = (0..hs).map(|j| r[j] * h[j]).collect();
        let _ = isz;
        (0..hs)
            .map(|j| {
                let row = 2 * hs + j;
                let n = if reset_after {
                    (mv(w, x, row) + b[row] + r[j] * (mv(rw, h, row) + rb[row])).tanh()
                } else {
                    (mv(w, x, row) + b[row] + rb[row] + mv(rw, &rh, row)).tanh()
                };
                z[j] * h[j] + (1.0 - z[j]) * n
            })
            .collect()
    }

    #[test]
    fn gru_cell_matches_reference() {
        for &(batch, isz, h, reset_after) in &[
            (1, 1, 1, true),
            (3, 5, 2, false),
            (2, 3, 7, true),
            (1, 4, 3, false),
            // Sums past the dot product's lanes, with a remainder; the
            // recurrent products and the projections split across the
            // pool (520 * 520 and 2 * 1560 * 90 multiply-adds).
            (1, 45, 33, false),
            (2, 90, 520, true),
            (2, 90, 520, false),
        ] {
            let mut p = params(false, 1, batch, isz, h);
            p.reset_after = reset_after;
            p.hidden_state = Some(3);
            p.bias = Some(4);
            p.recurrent_bias = Some(5);
            let x = vals(batch * isz, 1);
            let w = vals(3 * h * isz, 2);
            let rw = vals(3 * h * h, 3);
            let hs = vals(batch * h, 4);
            let b = vals(3 * h, 5);
            let rb = vals(3 * h, 6);
            let ins = vec![
                x.clone(),
                w.clone(),
                rw.clone(),
                hs.clone(),
                b.clone(),
                rb.clone(),
            ];
            let out = at_every_level(|| network(&p, false, &ins).unwrap());
            for bi in 0..batch {
                let want = gru_ref(
                    &x[bi * isz..(bi + 1) * isz],
                    &hs[bi * h..(bi + 1) * h],
                    &w,
                    &rw,
                    &b,
                    &rb,
                    reset_after,
                );
                for j in 0..h {
                    assert!((out[0][bi * h + j] - want[j]).abs() < 1e-12);
                }
            }
        }
    }

    #[test]
    fn lstm_cell_matches_reference() {
        // The last splits the recurrent product (4 * 260 * 260
        // multiply-adds) and the projections across the pool.
        for (batch, isz, h) in [(2, 3, 2), (1, 40, 37), (2, 130, 260)] {
            lstm_cell_case(batch, isz, h);
        }
    }

    /// The transposed products give each row's running dot product
    /// (`Iterator::sum` in k order) to the bit, on one thread and split
    /// across the pool, at every vector width, for a block of rows that
    /// starts inside the matrix.
    #[test]
    fn products_are_the_running_dot_products() {
        for (rows, n) in [(37, 45), (600, 500)] {
            let m = vals(rows * n, 21);
            let v = vals(n, 22);
            let mt = transposed(&m, 1, rows, n).unwrap();
            let col0 = rows / 3;
            let want: Vec<f64> = (col0..rows)
                .map(|r| {
                    m[r * n..(r + 1) * n]
                        .iter()
                        .zip(&v)
                        .map(|(a, b)| a * b)
                        .sum()
                })
                .collect();
            for (threads, level) in [1, 3]
                .into_iter()
                .flat_map(|t| levels().into_iter().map(move |l| (t, l)))
            {
                let mut got = vec![0.0; rows - col0];
                pool_at(level, threads).install(|| products(&mut got, &mt, rows, col0, &v));
                let bits = |x: &[f64]| x.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&got),
                    bits(&want),
                    "{rows}x{n} on {threads} threads at {level:?}"
                );
            }
        }
    }

    /// `f` on a pool of three threads (so that the parallel paths run) at
    /// every vector width this CPU has: the results agree to the bit, and
    /// the first is returned.
    fn at_every_level(f: impl Fn() -> Vec<Vec<f64>> + Sync) -> Vec<Vec<f64>> {
        let bits =
            |r: &[Vec<f64>]| -> Vec<u64> { r.iter().flatten().map(|v| v.to_bits()).collect() };
        let mut runs = levels().into_iter().map(|l| (l, pool_at(l, 3).install(&f)));
        let (first, out) = runs.next().expect("at least the baseline level");
        for (l, r) in runs {
            assert_eq!(bits(&r), bits(&out), "{l:?} against {first:?}");
        }
        out
    }

    fn lstm_cell_case(batch: usize, isz: usize, h: usize) {
        let mut p = params(true, 1, batch, isz, h);
        p.hidden_state = Some(3);
        p.cell_state = Some(4);
        p.peephole = Some(5);
        let x = vals(batch * isz, 7);
        let w = vals(4 * h * isz, 8);
        let rw = vals(4 * h * h, 9);
        let hs = vals(batch * h, 10);
        let cs = vals(batch * h, 11);
        let pw = vals(3 * h, 12);
        let ins = vec![
            x.clone(),
            w.clone(),
            rw.clone(),
            hs.clone(),
            cs.clone(),
            pw.clone(),
        ];
        let out = at_every_level(|| network(&p, true, &ins).unwrap());
        for bi in 0..batch {
            let xb = &x[bi * isz..(bi + 1) * isz];
            let hb = &hs[bi * h..(bi + 1) * h];
            for j in 0..h {
                let pre = |g: usize| -> f64 {
                    let row = g * h + j;
                    (0..isz).map(|k| w[row * isz + k] * xb[k]).sum::<f64>()
                        + (0..h).map(|k| rw[row * h + k] * hb[k]).sum::<f64>()
                };
                let c = cs[bi * h + j];
                let i = sig(pre(0) + pw[j] * c);
                let o = sig(pre(1) + pw[h + j] * c);
                let f = sig(pre(2) + pw[2 * h + j] * c);
                let g = pre(3).tanh();
                let c2 = f * c + i * g;
                assert!((out[1][bi * h + j] - c2).abs() < 1e-12);
                assert!((out[0][bi * h + j] - o * c2.tanh()).abs() < 1e-12);
            }
        }
    }

    /// A two-step network equals two chained cells, and "both" runs the
    /// second direction on the reversed sequence.
    #[test]
    fn network_chains_cells_in_both_directions() {
        let (steps, batch, isz, h) = (2, 2, 3, 2);
        for lstm in [false, true] {
            let g = if lstm { 4 } else { 3 };
            let mut p = params(lstm, steps, batch, isz, h);
            p.direction = RnnDirection::Both;
            p.return_sequence = true;
            let x = vals(steps * batch * isz, 20);
            let w = vals(2 * g * h * isz, 21);
            let rw = vals(2 * g * h * h, 22);
            let out = network(&p, lstm, &[x.clone(), w.clone(), rw.clone()]).unwrap();
            let seq = out.last().unwrap();
            assert_eq!(seq.len(), steps * 2 * batch * h);
            for d in 0..2 {
                let mut c = params(lstm, 1, batch, isz, h);
                c.hidden_state = Some(3);
                if lstm {
                    c.cell_state = Some(4);
                }
                let wd = w[d * g * h * isz..(d + 1) * g * h * isz].to_vec();
                let rwd = rw[d * g * h * h..(d + 1) * g * h * h].to_vec();
                let mut hs = vec![0.0; batch * h];
                let mut cs = vec![0.0; batch * h];
                let order: Vec<usize> = if d == 0 { vec![0, 1] } else { vec![1, 0] };
                for t in order {
                    let xt = x[t * batch * isz..(t + 1) * batch * isz].to_vec();
                    let mut ins = vec![xt, wd.clone(), rwd.clone(), hs.clone()];
                    if lstm {
                        ins.push(cs.clone());
                    }
                    let o = network(&c, lstm, &ins).unwrap();
                    hs = o[0].clone();
                    if lstm {
                        cs = o[1].clone();
                    }
                    let off = t * 2 * batch * h + d * batch * h;
                    assert_eq!(&seq[off..off + batch * h], &hs[..]);
                }
                assert_eq!(&out[0][d * batch * h..(d + 1) * batch * h], &hs[..]);
                if lstm {
                    assert_eq!(&out[1][d * batch * h..(d + 1) * batch * h], &cs[..]);
                }
            }
        }
    }

    #[test]
    fn float16_rounds_once_per_output() {
        // gruCell with zero weights: z = r = sigmoid(0) = 0.5, n = tanh(0)
        // = 0, so h' = 0.5 * h.
        let mut p = params(false, 1, 1, 1, 1);
        p.hidden_state = Some(3);
        let f16 = |x: f32| Buf::F16(vec![crate::f16::f32_to_f16(x)]);
        let (x, w, rw, h) = (
            f16(1.0),
            Buf::F16(vec![0; 3]),
            Buf::F16(vec![0; 3]),
            f16(0.3),
        );
        let d2 = OperandDescriptor::new(DataType::Float16, vec![1, 1]).unwrap();
        let d3 = OperandDescriptor::new(DataType::Float16, vec![3, 1]).unwrap();
        let out = run(
            &RecurrentOp::GruCell(p),
            &[&x, &w, &rw, &h],
            &[&d2, &d3, &d3, &d2],
            std::slice::from_ref(&d2),
            None,
        )
        .unwrap();
        let h16 = crate::f16::f16_to_f32(crate::f16::f32_to_f16(0.3)) as f64;
        let want = crate::f16::f32_to_f16((0.5 * h16) as f32);
        assert_eq!(out[0], Buf::F16(vec![want]));
    }

    #[test]
    fn relu_activations_and_rzn_layout() {
        // gruCell, hidden 1, input 1, x = 1, h = 2, rzn layout: rows are
        // r, z, n. W = [0.5, 0.25, 1], R = [0, 0, 0.5], resetAfter false,
        // relu/relu: r = relu(0.5) = 0.5, z = relu(0.25) = 0.25,
        // n = relu(1 + 0.5 * (0.5 * 2)) = 1.5, h' = 0.25 * 2 + 0.75 * 1.5
        // = 1.625.
        let mut p = params(false, 1, 1, 1, 1);
        p.hidden_state = Some(3);
        p.reset_after = false;
        p.gates = vec![1, 0, 2];
        p.activations = vec![RnnActivation::Relu, RnnActivation::Relu];
        let ins = vec![
            vec![1.0],
            vec![0.5, 0.25, 1.0],
            vec![0.0, 0.0, 0.5],
            vec![2.0],
        ];
        let out = network(&p, false, &ins).unwrap();
        assert_eq!(out[0], vec![1.625]);
    }

    #[test]
    fn a_state_too_large_to_allocate_is_an_error_that_names_the_bytes() {
        // No steps and no input features: every input is tiny (the
        // recurrent weight has 3 elements), but the state of 2^60 batch
        // rows asks for 2^63 bytes, refused fallibly instead of aborting.
        let batch = 1usize << 60;
        let ins = vec![vec![], vec![], vec![0.0; 3]];
        for lstm in [false, true] {
            let ins = match lstm {
                true => vec![vec![], vec![], vec![0.0; 4]],
                false => ins.clone(),
            };
            let e = network(&params(lstm, 0, batch, 0, 1), lstm, &ins).unwrap_err();
            assert!(
                e.message
                    .contains(&format!("cannot allocate {} bytes", (batch as u128) * 8)),
                "{}",
                e.message
            );
        }
    }
}
