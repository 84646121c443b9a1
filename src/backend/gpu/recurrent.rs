//! gru, gruCell, lstm, lstmCell, as a chain of small float32 kernels.
//!
//! One operator becomes: state initialisation (the initial states, or
//! zeros, copied into the last-hidden/last-cell outputs, which then hold
//! the running state), one input projection for every time step at once
//! (`W . x_t`), and per time step a recurrent projection (`R . h`, every
//! direction at once), for gru without resetAfter a second pass over the
//! new gate's rows (`R_n . (r * h)`), and a gate kernel that adds the
//! biases, applies the activations and updates the states and the
//! sequence output in place. A cell is a one-step network.
//!
//! The gate kernels sum each pre-activation in the reference's order
//! (`W.x + R.h + bias + recurrentBias`): the conformance tolerance of lstm
//! is 3 ULP, which a different order can exceed once relu lets the states
//! grow.

use super::{is_float, word, Gpu, NodeIo, Step};
use crate::error::{Error, Result};
use crate::graph::ops::recurrent::{RecurrentOp, RnnActivation, RnnDirection, RnnParams};
use crate::types::DataType;

/// The family's answer to [`super::supports`]: every operand of the four
/// operators is float32 or float16 (computed in f32).
pub(super) fn supports(op: &str, _operand: &str, dt: DataType) -> bool {
    matches!(op, "gru" | "gruCell" | "lstm" | "lstmCell") && is_float(dt)
}

/// A kernel's source: recurrent_common.wgsl, then the given files, joined
/// at compile time.
macro_rules! with_common {
    ($($file:literal),+) => {
        concat!(include_str!("shaders/recurrent_common.wgsl") $(, "\n", include_str!($file))+)
    };
}

const INIT: &str = include_str!("shaders/recurrent_init.wgsl");
const PROJECT: &str = with_common!("shaders/recurrent_project.wgsl");
const HIDDEN: &str = with_common!("shaders/recurrent_hidden.wgsl");
// The kernels with one invocation per hidden unit share recurrent_unit.wgsl too.
const RESET: &str = with_common!(
    "shaders/recurrent_unit.wgsl",
    "shaders/recurrent_reset.wgsl"
);
const GRU: &str = with_common!("shaders/recurrent_unit.wgsl", "shaders/recurrent_gru.wgsl");
const LSTM: &str = with_common!("shaders/recurrent_unit.wgsl", "shaders/recurrent_lstm.wgsl");

fn act_code(a: RnnActivation) -> u32 {
    match a {
        RnnActivation::Relu => 0,
        RnnActivation::Sigmoid => 1,
        RnnActivation::Tanh => 2,
    }
}

/// The parameter words shared by the kernels of one operator (see
/// recurrent_common.wgsl), less the invocation count and the step.
struct Words {
    w: Vec<u32>,
}

impl Words {
    fn new(p: &RnnParams, lstm: bool, has_seq: bool) -> Result<Self> {
        let n_gates = if lstm { 4 } else { 3 };
        let mut w = vec![0u32; 21];
        for (k, v) in [
            p.steps,
            p.num_directions(),
            p.batch,
            p.input_size,
            p.hidden,
            n_gates,
        ]
        .into_iter()
        .enumerate()
        {
            w[1 + k] = word(v as u64)?;
        }
        w[8] = u32::from(p.direction == RnnDirection::Backward);
        w[9] = u32::from(p.bias.is_some());
        w[10] = u32::from(p.recurrent_bias.is_some());
        w[11] = u32::from(lstm && p.peephole.is_some());
        w[12] = u32::from(p.reset_after);
        w[13] = u32::from(has_seq);
        if p.gates.len() != n_gates || p.activations.len() != n_gates - 1 {
            return Err(Error::operation(format!(
                "a recurrent operator needs {n_gates} gates and {} activations",
                n_gates - 1
            )));
        }
        for (k, &g) in p.gates.iter().enumerate() {
            w[14 + k] = word(g as u64)?;
        }
        for (k, &a) in p.activations.iter().enumerate() {
            w[18 + k] = act_code(a);
        }
        Ok(Words { w })
    }

    /// The words of a kernel of `n` invocations at step `s`.
    fn at(&self, n: u64, s: usize) -> Result<Vec<u32>> {
        let mut w = self.w.clone();
        w[0] = word(n)?;
        w[7] = word(s as u64)?;
        Ok(w)
    }
}

/// The steps of one operator of the family.
pub(super) fn build(gpu: &mut Gpu, op: &RecurrentOp, io: &NodeIo) -> Result<Vec<Step>> {
    let (p, lstm, cell) = match op {
        RecurrentOp::Gru(p) => (p, false, false),
        RecurrentOp::GruCell(p) => (p, false, true),
        RecurrentOp::Lstm(p) => (p, true, false),
        RecurrentOp::LstmCell(p) => (p, true, true),
    };
    let bad = || {
        Error::operation(format!(
            "{}: the operands do not match the parameters",
            op.name()
        ))
    };
    let n_gates: u64 = if lstm { 4 } else { 3 };
    let dirs = p.num_directions() as u64;
    let (steps, batch, isz, hs) = (
        p.steps as u64,
        p.batch as u64,
        p.input_size as u64,
        p.hidden as u64,
    );
    let has_seq = !cell && p.return_sequence;
    // Outputs: last hidden, [last cell], [sequence].
    let n_outs = 1 + usize::from(lstm) + usize::from(has_seq);
    if io.outs.len() != n_outs || io.out_descs.len() != n_outs || io.ins.len() < 3 {
        return Err(bad());
    }
    let state_len = dirs * batch * hs;
    let rows = n_gates * hs;
    // Every operand's size, as the kernels index it.
    let expect = |idx: Option<usize>, len: u64| -> Result<()> {
        match idx {
            None => Ok(()),
            Some(i) => match io.in_descs.get(i) {
                Some(d) if d.element_count() as u64 == len => word(len).map(|_| ()),
                _ => Err(bad()),
            },
        }
    };
    expect(Some(0), steps * batch * isz)?;
    expect(Some(1), dirs * rows * isz)?;
    expect(Some(2), dirs * rows * hs)?;
    expect(p.bias, dirs * rows)?;
    expect(p.recurrent_bias, dirs * rows)?;
    expect(p.peephole, dirs * 3 * hs)?;
    expect(p.hidden_state, state_len)?;
    expect(p.cell_state, state_len)?;
    for (k, d) in io.out_descs.iter().enumerate() {
        let want = if k == n_outs - 1 && has_seq {
            steps * state_len
        } else {
            state_len
        };
        if d.element_count() as u64 != want {
            return Err(bad());
        }
    }
    let gx_len = steps * dirs * batch * rows;
    word(gx_len)?;
    word(steps * state_len)?;
    if state_len == 0 || steps == 0 {
        return Ok(Vec::new());
    }

    let words = Words::new(p, lstm, has_seq)?;
    let h = io.outs[0];
    let seq_buf;
    let seq = if has_seq {
        io.outs[n_outs - 1]
    } else {
        // Bound but never written when there is no sequence output.
        seq_buf = gpu.storage(4, "unused sequence")?;
        &seq_buf
    };
    let gx = gpu.storage(gx_len * 4, "recurrent input projection")?;
    let gh = gpu.storage(state_len * n_gates * 4, "recurrent projection")?;
    let input = |idx: Option<usize>| idx.and_then(|i| io.ins.get(i).copied());

    let mut out = Vec::new();
    let state_grid = gpu.grid_1d(state_len)?;
    out.push(init_state(gpu, state_len, input(p.hidden_state), h)?);
    let c = if lstm {
        let c = io.outs[1];
        out.push(init_state(gpu, state_len, input(p.cell_state), c)?);
        Some(c)
    } else {
        None
    };

    let params = gpu.params(&words.at(gx_len, 0)?)?;
    out.push(gpu.step(
        PROJECT.to_string(),
        "main",
        &[&params, io.ins[0], io.ins[1], &gx],
        gpu.grid_1d(gx_len)?,
    )?);

    let proj_len = state_len * n_gates;
    let proj_grid = gpu.grid_1d(proj_len)?;
    for s in 0..p.steps {
        let params = gpu.params(&words.at(proj_len, s)?)?;
        out.push(gpu.step(
            HIDDEN.to_string(),
            "main",
            &[&params, io.ins[2], h, &gh],
            proj_grid,
        )?);
        let params = gpu.params(&words.at(state_len, s)?)?;
        // Absent operands: the parameters stand in for their bindings
        // (the kernels never index them then).
        let bias = input(p.bias).unwrap_or(&params);
        let rbias = input(p.recurrent_bias).unwrap_or(&params);
        if let Some(c) = c {
            let peep = input(p.peephole).unwrap_or(&params);
            out.push(gpu.step(
                LSTM.to_string(),
                "main",
                &[&params, &gx, &gh, bias, rbias, peep, h, c, seq],
                state_grid,
            )?);
        } else {
            if !p.reset_after {
                out.push(gpu.step(
                    RESET.to_string(),
                    "main",
                    &[&params, &gx, &gh, bias, rbias, io.ins[2], h],
                    state_grid,
                )?);
            }
            out.push(gpu.step(
                GRU.to_string(),
                "main",
                &[&params, &gx, &gh, bias, rbias, h, seq],
                state_grid,
            )?);
        }
    }
    Ok(out)
}

/// A step that sets a state of `len` elements to `src`, or to zeros.
fn init_state(
    gpu: &mut Gpu,
    len: u64,
    src: Option<&wgpu::Buffer>,
    dst: &wgpu::Buffer,
) -> Result<Step> {
    let params = gpu.params(&[word(len)?, u32::from(src.is_some())])?;
    let src = src.unwrap_or(&params);
    let grid = gpu.grid_1d(len)?;
    gpu.step(INIT.to_string(), "main", &[&params, src, dst], grid)
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::backend::Backend;
    use crate::graph::args::Val;
    use crate::graph::GraphBuilder;
    use crate::tensor::Buf;
    use crate::types::DataType;

    /// Runs `name(args..., options)` on the GPU and on the CPU kernel with
    /// the same random data, where `operand_opts` are option members that
    /// are operands of type `dt` (given by shape) and `opts` the other
    /// members; compares every output.
    fn check(
        be: &mut super::super::GpuBackend,
        name: &str,
        dt: DataType,
        args: &[Arg],
        operand_opts: &[(&str, Vec<usize>)],
        opts: &[(&str, Val)],
    ) {
        let mut members: Vec<(&str, Arg)> =
            opts.iter().map(|(k, v)| (*k, Arg::V(v.clone()))).collect();
        members.extend(operand_opts.iter().map(|(k, sh)| (*k, Arg::T(dt, sh))));
        // The CPU computes in f64, the GPU in f32: states that grow
        // through relu over several steps differ in the fifth digit.
        // float16 results: one half ulp of rounding on top.
        check_call_vs_cpu(be, name, args, Some(&members), 31, 1e-4, 2e-3);
    }

    fn acts(v: &[&str]) -> Val {
        Val::List(v.iter().map(|a| s(a)).collect())
    }

    #[test]
    fn gru_and_lstm_networks() {
        let Some(mut be) = backend() else { return };
        let (steps, batch, isz, h) = (5usize, 3usize, 4usize, 6usize);
        for lstm in [false, true] {
            let name = if lstm { "lstm" } else { "gru" };
            let g = if lstm { 4 } else { 3 };
            for dir in ["forward", "backward", "both"] {
                let nd = if dir == "both" { 2 } else { 1 };
                for variant in 0..4 {
                    let mut ops: Vec<(&str, Vec<usize>)> = Vec::new();
                    let mut o: Vec<(&str, Val)> = vec![("direction", s(dir))];
                    if variant >= 1 {
                        ops.push(("bias", vec![nd, g * h]));
                        ops.push(("recurrentBias", vec![nd, g * h]));
                        ops.push(("initialHiddenState", vec![nd, batch, h]));
                        o.push(("returnSequence", Val::Bool(true)));
                    }
                    if variant >= 2 {
                        if lstm {
                            ops.push(("peepholeWeight", vec![nd, 3 * h]));
                            ops.push(("initialCellState", vec![nd, batch, h]));
                            o.push(("layout", s("ifgo")));
                        } else {
                            o.push(("resetAfter", Val::Bool(false)));
                            o.push(("layout", s("rzn")));
                        }
                    }
                    if variant == 3 {
                        if lstm {
                            o.push(("activations", acts(&["tanh", "relu", "sigmoid"])));
                        } else {
                            o.push(("activations", acts(&["tanh", "relu"])));
                            o.push(("resetAfter", Val::Bool(true)));
                        }
                        // Only a bias: recurrentBias absent.
                        ops.retain(|(k, _)| *k != "recurrentBias");
                    }
                    for dt in [DataType::Float32, DataType::Float16] {
                        check(
                            &mut be,
                            name,
                            dt,
                            &[
                                Arg::T(dt, &[steps, batch, isz]),
                                Arg::T(dt, &[nd, g * h, isz]),
                                Arg::T(dt, &[nd, g * h, h]),
                                Arg::V(n(steps as f64)),
                                Arg::V(n(h as f64)),
                            ],
                            &ops,
                            &o,
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn long_and_wide_networks() {
        let Some(mut be) = backend() else { return };
        // Many steps, and states of more than 256 elements.
        for (steps, batch, isz, h) in [(40usize, 1usize, 1usize, 1usize), (3, 7, 9, 50)] {
            for (name, g) in [("gru", 3usize), ("lstm", 4)] {
                check(
                    &mut be,
                    name,
                    DataType::Float32,
                    &[
                        Arg::T(F, &[steps, batch, isz]),
                        Arg::T(F, &[2, g * h, isz]),
                        Arg::T(F, &[2, g * h, h]),
                        Arg::V(n(steps as f64)),
                        Arg::V(n(h as f64)),
                    ],
                    &[("bias", vec![2, g * h])],
                    &[
                        ("direction", s("both")),
                        ("returnSequence", Val::Bool(true)),
                    ],
                );
            }
        }
    }

    #[test]
    fn cells() {
        let Some(mut be) = backend() else { return };
        for (batch, isz, h) in [(1usize, 1usize, 1usize), (4, 3, 5), (2, 17, 130)] {
            for dt in [DataType::Float32, DataType::Float16] {
                for reset_after in [true, false] {
                    for with_bias in [false, true] {
                        let ops: Vec<(&str, Vec<usize>)> = if with_bias {
                            vec![("bias", vec![3 * h]), ("recurrentBias", vec![3 * h])]
                        } else {
                            vec![]
                        };
                        check(
                            &mut be,
                            "gruCell",
                            dt,
                            &[
                                Arg::T(dt, &[batch, isz]),
                                Arg::T(dt, &[3 * h, isz]),
                                Arg::T(dt, &[3 * h, h]),
                                Arg::T(dt, &[batch, h]),
                                Arg::V(n(h as f64)),
                            ],
                            &ops,
                            &[("resetAfter", Val::Bool(reset_after))],
                        );
                    }
                }
                for layout in ["iofg", "ifgo"] {
                    for with_bias in [false, true] {
                        let ops: Vec<(&str, Vec<usize>)> = if with_bias {
                            vec![
                                ("bias", vec![4 * h]),
                                ("recurrentBias", vec![4 * h]),
                                ("peepholeWeight", vec![3 * h]),
                            ]
                        } else {
                            vec![]
                        };
                        check(
                            &mut be,
                            "lstmCell",
                            dt,
                            &[
                                Arg::T(dt, &[batch, isz]),
                                Arg::T(dt, &[4 * h, isz]),
                                Arg::T(dt, &[4 * h, h]),
                                Arg::T(dt, &[batch, h]),
                                Arg::T(dt, &[batch, h]),
                                Arg::V(n(h as f64)),
                            ],
                            &ops,
                            &[("layout", s(layout))],
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn states_restart_on_every_dispatch() {
        // The outputs carry the running state: a second dispatch must
        // start again from the initial state, not from the last result.
        let Some(mut be) = backend() else { return };
        let mut b = GraphBuilder::new();
        let x = b.input("x", desc(F, &[2, 1, 2])).unwrap();
        let w = b.input("w", desc(F, &[1, 12, 2])).unwrap();
        let r = b.input("r", desc(F, &[1, 12, 3])).unwrap();
        let args = [
            operand(&b, x),
            operand(&b, w),
            operand(&b, r),
            n(2.0),
            n(3.0),
            dict(&[]),
        ];
        let outs = b.call("lstm", &args).unwrap();
        let g = std::sync::Arc::new(
            b.build(vec![("c".into(), outs[1]), ("h".into(), outs[0])])
                .unwrap(),
        );
        let data: Vec<Buf> = g
            .inputs
            .iter()
            .map(|(_, id)| random_buf(F, g.operands[*id].element_count(), *id as u64))
            .collect();
        be.compile(1, g.clone()).unwrap();
        let first = be.compute(1, &g, data.clone()).unwrap();
        let second = be.compute(1, &g, data).unwrap();
        assert_eq!(first, second);
        assert!(f32s(&first[1]).iter().any(|&v| v != 0.0));
    }
}
