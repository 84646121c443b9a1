//! gru, gruCell, lstm, lstmCell.
//!
//! The four operators share one resolved form, [`RnnParams`]: a cell is a
//! one-step, one-direction network whose hidden (and cell) state is given.
//! The graph layer resolves the gate order of the layout, the activations
//! and where each optional operand sits among the node's inputs, so the
//! kernel only loops.

use super::{arg, check, lim, OpDef, FLOATS};
use crate::error::Result;
use crate::graph::args::{Ctx, Val};
use crate::graph::{GraphBuilder, OperandId};
use crate::types::{DataType, OperandDescriptor};

/// `MLRecurrentNetworkActivation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RnnActivation {
    Relu,
    Sigmoid,
    Tanh,
}

impl RnnActivation {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "relu" => Some(RnnActivation::Relu),
            "sigmoid" => Some(RnnActivation::Sigmoid),
            "tanh" => Some(RnnActivation::Tanh),
            _ => None,
        }
    }
}

/// `MLRecurrentNetworkDirection`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RnnDirection {
    Forward,
    Backward,
    Both,
}

/// Resolved parameters of gru/gruCell/lstm/lstmCell.
///
/// Node inputs: input, weight, recurrentWeight, then the optional operands
/// at the indices recorded here (`None` when absent). For the cells the
/// hidden state (and cell state) are the "initial" states.
#[derive(Debug, Clone, PartialEq)]
pub struct RnnParams {
    pub steps: usize,
    pub batch: usize,
    pub input_size: usize,
    pub hidden: usize,
    pub direction: RnnDirection,
    pub return_sequence: bool,
    /// gru only: apply the reset gate after the recurrent matmul.
    pub reset_after: bool,
    /// Row block (in units of `hidden`) of each gate in the weights and
    /// biases. GRU: [z, r, n]; LSTM: [i, o, f, g].
    pub gates: Vec<usize>,
    /// GRU: [gates, new]; LSTM: [gates, cell, output filter].
    pub activations: Vec<RnnActivation>,
    pub bias: Option<usize>,
    pub recurrent_bias: Option<usize>,
    pub peephole: Option<usize>,
    pub hidden_state: Option<usize>,
    pub cell_state: Option<usize>,
}

impl RnnParams {
    pub fn num_directions(&self) -> usize {
        if self.direction == RnnDirection::Both {
            2
        } else {
            1
        }
    }
}

/// The resolved operators of this family.
#[derive(Debug, Clone, PartialEq)]
pub enum RecurrentOp {
    /// Outputs: last hidden [dirs, batch, hidden], and the sequence
    /// [steps, dirs, batch, hidden] when `return_sequence`.
    Gru(RnnParams),
    /// Output: the new hidden state [batch, hidden].
    GruCell(RnnParams),
    /// Outputs: last hidden, last cell, and the sequence when
    /// `return_sequence`.
    Lstm(RnnParams),
    /// Outputs: new hidden state, new cell state.
    LstmCell(RnnParams),
}

impl RecurrentOp {
    pub fn name(&self) -> &'static str {
        match self {
            RecurrentOp::Gru(_) => "gru",
            RecurrentOp::GruCell(_) => "gruCell",
            RecurrentOp::Lstm(_) => "lstm",
            RecurrentOp::LstmCell(_) => "lstmCell",
        }
    }
}

/// Whether the operator is a GRU (3 gates) or an LSTM (4 gates).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Gru,
    Lstm,
}

/// The options common to the four operators, read (WebIDL conversion)
/// before any method step runs.
struct Options {
    bias: Option<OperandId>,
    recurrent_bias: Option<OperandId>,
    peephole: Option<OperandId>,
    initial_hidden: Option<OperandId>,
    initial_cell: Option<OperandId>,
    reset_after: bool,
    return_sequence: bool,
    direction: RnnDirection,
    gates: Vec<usize>,
    activations: Option<Vec<RnnActivation>>,
}

fn read_options(
    b: &GraphBuilder,
    ctx: &Ctx,
    opts: &Val,
    kind: Kind,
    cell: bool,
) -> Result<Options> {
    let bias = b.opt_operand(ctx, opts.member("bias"), "bias")?;
    let recurrent_bias = b.opt_operand(ctx, opts.member("recurrentBias"), "recurrentBias")?;
    let peephole = if kind == Kind::Lstm {
        b.opt_operand(ctx, opts.member("peepholeWeight"), "peepholeWeight")?
    } else {
        None
    };
    let (initial_hidden, initial_cell) = if cell {
        (None, None)
    } else {
        (
            b.opt_operand(ctx, opts.member("initialHiddenState"), "initialHiddenState")?,
            if kind == Kind::Lstm {
                b.opt_operand(ctx, opts.member("initialCellState"), "initialCellState")?
            } else {
                None
            },
        )
    };
    let reset_after =
        kind == Kind::Gru && ctx.bool_or(opts.member("resetAfter"), "resetAfter", true)?;
    let return_sequence =
        !cell && ctx.bool_or(opts.member("returnSequence"), "returnSequence", false)?;
    let direction = if cell {
        RnnDirection::Forward
    } else {
        match ctx.enum_or(
            opts.member("direction"),
            "direction",
            &["forward", "backward", "both"],
            "forward",
        )? {
            "forward" => RnnDirection::Forward,
            "backward" => RnnDirection::Backward,
            _ => RnnDirection::Both,
        }
    };
    // Row block of each gate, in the kernel's order (GRU z, r, n; LSTM i,
    // o, f, g), for the layout's packing order.
    let gates = match kind {
        Kind::Gru => match ctx.enum_or(opts.member("layout"), "layout", &["zrn", "rzn"], "zrn")? {
            "zrn" => vec![0, 1, 2],
            _ => vec![1, 0, 2],
        },
        Kind::Lstm => {
            match ctx.enum_or(opts.member("layout"), "layout", &["iofg", "ifgo"], "iofg")? {
                "iofg" => vec![0, 1, 2, 3],
                // i, f, g, o: i at 0, o at 3, f at 1, g at 2.
                _ => vec![0, 3, 1, 2],
            }
        }
    };
    let activations = match opts.member("activations") {
        Val::Undefined => None,
        v => Some(
            ctx.list(v, "activations")?
                .iter()
                .enumerate()
                .map(|(i, a)| {
                    let what = format!("activations[{i}]");
                    let s = ctx.string(a, &what)?;
                    RnnActivation::parse(s).ok_or_else(|| {
                        ctx.err(format!(
                            "{what} must be one of [\"relu\", \"sigmoid\", \"tanh\"], not {s:?}"
                        ))
                    })
                })
                .collect::<Result<Vec<_>>>()?,
        ),
    };
    Ok(Options {
        bias,
        recurrent_bias,
        peephole,
        initial_hidden,
        initial_cell,
        reset_after,
        return_sequence,
        direction,
        gates,
        activations,
    })
}

/// Checks an operand's data type and rank against the registry, that its
/// type equals the input's, and that its shape is `shape`.
fn expect(
    b: &GraphBuilder,
    ctx: &Ctx,
    id: OperandId,
    name: &str,
    dt: DataType,
    shape: &[usize],
) -> Result<()> {
    let d = b.desc(id);
    check(ctx, name, d)?;
    if d.data_type != dt {
        return Err(ctx.err(format!(
            "{name} has data type {}, not the input's {}",
            d.data_type.name(),
            dt.name()
        )));
    }
    if d.shape != shape {
        return Err(ctx.err(format!("{name} has shape {:?}, not {shape:?}", d.shape)));
    }
    Ok(())
}

/// A `hiddenSize * factor` that must be a valid dimension (greater than
/// zero, within `long`).
fn valid_dimension(ctx: &Ctx, hidden: usize, factor: usize) -> Result<()> {
    match hidden.checked_mul(factor) {
        Some(n) if n > 0 && n <= i32::MAX as usize => Ok(()),
        _ => Err(ctx.err(format!(
            "hiddenSize * {factor} ({hidden} * {factor}) is not a valid dimension"
        ))),
    }
}

/// `gru` / `lstm(input, weight, recurrentWeight, steps, hiddenSize,
/// options)`.
fn build_network(b: &mut GraphBuilder, args: &[Val], kind: Kind) -> Result<Vec<OperandId>> {
    let name = if kind == Kind::Gru { "gru" } else { "lstm" };
    let n_gates = if kind == Kind::Gru { 3 } else { 4 };
    let mut ctx = Ctx::new(name);
    let x = b.operand(&ctx, arg(args, 0), "input")?;
    let w = b.operand(&ctx, arg(args, 1), "weight")?;
    let rw = b.operand(&ctx, arg(args, 2), "recurrentWeight")?;
    let steps = ctx.u32(arg(args, 3), "steps")? as usize;
    let hidden = ctx.u32(arg(args, 4), "hiddenSize")? as usize;
    let opts = ctx.options(arg(args, 5))?;
    let o = read_options(b, &ctx, opts, kind, false)?;
    let num_dirs = if o.direction == RnnDirection::Both {
        2
    } else {
        1
    };

    let dx = b.desc(x).clone();
    check(&ctx, "input", &dx)?;
    let dt = dx.data_type;
    for (id, n) in [(w, "weight"), (rw, "recurrentWeight")] {
        let d = b.desc(id);
        check(&ctx, n, d)?;
        if d.data_type != dt {
            return Err(ctx.err(format!(
                "{n} has data type {}, not the input's {}",
                d.data_type.name(),
                dt.name()
            )));
        }
    }
    if steps == 0 {
        return Err(ctx.err("steps must be greater than 0"));
    }
    if dx.shape[0] != steps {
        return Err(ctx.err(format!(
            "input's first dimension ({}) is not steps ({steps})",
            dx.shape[0]
        )));
    }
    let (batch, input_size) = (dx.shape[1], dx.shape[2]);
    let rows = hidden
        .checked_mul(n_gates)
        .ok_or_else(|| ctx.err("hiddenSize is too large"))?;
    expect(b, &ctx, w, "weight", dt, &[num_dirs, rows, input_size])?;
    expect(
        b,
        &ctx,
        rw,
        "recurrentWeight",
        dt,
        &[num_dirs, rows, hidden],
    )?;
    valid_dimension(&ctx, hidden, 2 * n_gates)?;

    let mut inputs = vec![x, w, rw];
    let mut slot = |id: Option<OperandId>| {
        id.map(|id| {
            inputs.push(id);
            inputs.len() - 1
        })
    };
    if let Some(id) = o.bias {
        expect(b, &ctx, id, "bias", dt, &[num_dirs, rows])?;
    }
    if let Some(id) = o.recurrent_bias {
        expect(b, &ctx, id, "recurrentBias", dt, &[num_dirs, rows])?;
    }
    if let Some(id) = o.peephole {
        expect(b, &ctx, id, "peepholeWeight", dt, &[num_dirs, 3 * hidden])?;
    }
    let state = [num_dirs, batch, hidden];
    if let Some(id) = o.initial_hidden {
        expect(b, &ctx, id, "initialHiddenState", dt, &state)?;
    }
    if let Some(id) = o.initial_cell {
        expect(b, &ctx, id, "initialCellState", dt, &state)?;
    }
    let activations = resolve_activations(&ctx, o.activations, kind)?;

    let bias = slot(o.bias);
    let recurrent_bias = slot(o.recurrent_bias);
    let peephole = slot(o.peephole);
    let hidden_state = slot(o.initial_hidden);
    let cell_state = slot(o.initial_cell);

    let desc =
        |shape: Vec<usize>| OperandDescriptor::new(dt, shape).map_err(|e| ctx.err(e.message));
    let mut outs = vec![desc(state.to_vec())?];
    if kind == Kind::Lstm {
        outs.push(desc(state.to_vec())?);
    }
    if o.return_sequence {
        outs.push(desc(vec![steps, num_dirs, batch, hidden])?);
    }
    let params = RnnParams {
        steps,
        batch,
        input_size,
        hidden,
        direction: o.direction,
        return_sequence: o.return_sequence,
        reset_after: o.reset_after,
        gates: o.gates,
        activations,
        bias,
        recurrent_bias,
        peephole,
        hidden_state,
        cell_state,
    };
    let op = if kind == Kind::Gru {
        RecurrentOp::Gru(params)
    } else {
        RecurrentOp::Lstm(params)
    };
    Ok(b.push(op, inputs, outs, ctx.label))
}

fn resolve_activations(
    ctx: &Ctx,
    given: Option<Vec<RnnActivation>>,
    kind: Kind,
) -> Result<Vec<RnnActivation>> {
    use RnnActivation::*;
    let n = if kind == Kind::Gru { 2 } else { 3 };
    match given {
        Some(a) if a.len() != n => Err(ctx.err(format!(
            "activations must hold {n} functions, not {}",
            a.len()
        ))),
        Some(a) => Ok(a),
        None if kind == Kind::Gru => Ok(vec![Sigmoid, Tanh]),
        None => Ok(vec![Sigmoid, Tanh, Tanh]),
    }
}

/// `gruCell(input, weight, recurrentWeight, hiddenState, hiddenSize,
/// options)` / `lstmCell(input, weight, recurrentWeight, hiddenState,
/// cellState, hiddenSize, options)`.
fn build_cell(b: &mut GraphBuilder, args: &[Val], kind: Kind) -> Result<Vec<OperandId>> {
    let name = if kind == Kind::Gru {
        "gruCell"
    } else {
        "lstmCell"
    };
    let n_gates = if kind == Kind::Gru { 3 } else { 4 };
    let mut ctx = Ctx::new(name);
    let x = b.operand(&ctx, arg(args, 0), "input")?;
    let w = b.operand(&ctx, arg(args, 1), "weight")?;
    let rw = b.operand(&ctx, arg(args, 2), "recurrentWeight")?;
    let h = b.operand(&ctx, arg(args, 3), "hiddenState")?;
    let (c, next) = if kind == Kind::Lstm {
        (Some(b.operand(&ctx, arg(args, 4), "cellState")?), 5)
    } else {
        (None, 4)
    };
    let hidden = ctx.u32(arg(args, next), "hiddenSize")? as usize;
    let opts = ctx.options(arg(args, next + 1))?;
    let o = read_options(b, &ctx, opts, kind, true)?;

    let dx = b.desc(x).clone();
    check(&ctx, "input", &dx)?;
    let dt = dx.data_type;
    let mut required = vec![(w, "weight"), (rw, "recurrentWeight"), (h, "hiddenState")];
    if let Some(c) = c {
        required.push((c, "cellState"));
    }
    for &(id, n) in &required {
        let d = b.desc(id);
        check(&ctx, n, d)?;
        if d.data_type != dt {
            return Err(ctx.err(format!(
                "{n} has data type {}, not the input's {}",
                d.data_type.name(),
                dt.name()
            )));
        }
    }
    let (batch, input_size) = (dx.shape[0], dx.shape[1]);
    let rows = hidden
        .checked_mul(n_gates)
        .ok_or_else(|| ctx.err("hiddenSize is too large"))?;
    expect(b, &ctx, w, "weight", dt, &[rows, input_size])?;
    expect(b, &ctx, rw, "recurrentWeight", dt, &[rows, hidden])?;
    expect(b, &ctx, h, "hiddenState", dt, &[batch, hidden])?;
    if let Some(c) = c {
        expect(b, &ctx, c, "cellState", dt, &[batch, hidden])?;
    }
    valid_dimension(&ctx, hidden, 2 * n_gates)?;
    if let Some(id) = o.bias {
        expect(b, &ctx, id, "bias", dt, &[rows])?;
    }
    if let Some(id) = o.recurrent_bias {
        expect(b, &ctx, id, "recurrentBias", dt, &[rows])?;
    }
    if let Some(id) = o.peephole {
        expect(b, &ctx, id, "peepholeWeight", dt, &[3 * hidden])?;
    }
    let activations = resolve_activations(&ctx, o.activations, kind)?;

    let mut inputs = vec![x, w, rw, h];
    let hidden_state = Some(3);
    let cell_state = c.map(|c| {
        inputs.push(c);
        4
    });
    let mut slot = |id: Option<OperandId>| {
        id.map(|id| {
            inputs.push(id);
            inputs.len() - 1
        })
    };
    let bias = slot(o.bias);
    let recurrent_bias = slot(o.recurrent_bias);
    let peephole = slot(o.peephole);

    let out = OperandDescriptor::new(dt, vec![batch, hidden]).map_err(|e| ctx.err(e.message))?;
    let outs = if kind == Kind::Lstm {
        vec![out.clone(), out]
    } else {
        vec![out]
    };
    let params = RnnParams {
        steps: 1,
        batch,
        input_size,
        hidden,
        direction: RnnDirection::Forward,
        return_sequence: false,
        reset_after: o.reset_after,
        gates: o.gates,
        activations,
        bias,
        recurrent_bias,
        peephole,
        hidden_state,
        cell_state,
    };
    let op = if kind == Kind::Gru {
        RecurrentOp::GruCell(params)
    } else {
        RecurrentOp::LstmCell(params)
    };
    Ok(b.push(op, inputs, outs, ctx.label))
}

fn build_gru(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    build_network(b, args, Kind::Gru)
}

fn build_lstm(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    build_network(b, args, Kind::Lstm)
}

fn build_gru_cell(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    build_cell(b, args, Kind::Gru)
}

fn build_lstm_cell(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    build_cell(b, args, Kind::Lstm)
}

/// This family's builder methods.
pub const DEFS: &[OpDef] = &[
    OpDef {
        name: "gru",
        build: build_gru,
        operands: &[
            lim("input", FLOATS, 3, 3),
            lim("weight", FLOATS, 3, 3),
            lim("recurrentWeight", FLOATS, 3, 3),
            lim("bias", FLOATS, 2, 2),
            lim("recurrentBias", FLOATS, 2, 2),
            lim("initialHiddenState", FLOATS, 3, 3),
            // The spec names each output: the last hidden state, then (with
            // returnSequence) the sequence of hidden states.
            lim("output0", FLOATS, 3, 3),
            lim("output1", FLOATS, 4, 4),
        ],
    },
    OpDef {
        name: "gruCell",
        build: build_gru_cell,
        operands: &[
            lim("input", FLOATS, 2, 2),
            lim("weight", FLOATS, 2, 2),
            lim("recurrentWeight", FLOATS, 2, 2),
            lim("hiddenState", FLOATS, 2, 2),
            lim("bias", FLOATS, 1, 1),
            lim("recurrentBias", FLOATS, 1, 1),
            lim("output", FLOATS, 2, 2),
        ],
    },
    OpDef {
        name: "lstm",
        build: build_lstm,
        operands: &[
            lim("input", FLOATS, 3, 3),
            lim("weight", FLOATS, 3, 3),
            lim("recurrentWeight", FLOATS, 3, 3),
            lim("bias", FLOATS, 2, 2),
            lim("recurrentBias", FLOATS, 2, 2),
            lim("peepholeWeight", FLOATS, 2, 2),
            lim("initialHiddenState", FLOATS, 3, 3),
            lim("initialCellState", FLOATS, 3, 3),
            // The last hidden state, the last cell state, then (with
            // returnSequence) the sequence of hidden states.
            lim("output0", FLOATS, 3, 3),
            lim("output1", FLOATS, 3, 3),
            lim("output2", FLOATS, 4, 4),
        ],
    },
    OpDef {
        name: "lstmCell",
        build: build_lstm_cell,
        operands: &[
            lim("input", FLOATS, 2, 2),
            lim("weight", FLOATS, 2, 2),
            lim("recurrentWeight", FLOATS, 2, 2),
            lim("hiddenState", FLOATS, 2, 2),
            lim("cellState", FLOATS, 2, 2),
            lim("bias", FLOATS, 1, 1),
            lim("recurrentBias", FLOATS, 1, 1),
            lim("peepholeWeight", FLOATS, 1, 1),
            // The new hidden state and the new cell state.
            lim("output0", FLOATS, 2, 2),
            lim("output1", FLOATS, 2, 2),
        ],
    },
];

#[cfg(test)]
mod tests {
    use super::super::testing::input;
    use crate::error::Error;
    use crate::graph::args::Val;
    use crate::graph::GraphBuilder;
    use crate::types::DataType;

    fn f32in(b: &mut GraphBuilder, name: &str, shape: &[usize]) -> Val {
        input(b, name, DataType::Float32, shape)
    }

    fn n(x: usize) -> Val {
        Val::Number(x as f64)
    }

    fn s(x: &str) -> Val {
        Val::String(x.to_string())
    }

    fn dict(m: Vec<(&str, Val)>) -> Val {
        Val::Dict(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
    }

    fn type_error(r: Result<Vec<usize>, Error>, mention: &str) {
        let e = r.expect_err("expected a TypeError");
        assert_eq!(e.kind, crate::error::ErrorKind::Type);
        assert!(
            e.message.contains(mention),
            "{:?} does not mention {mention:?}",
            e.message
        );
    }

    /// gru with steps 2, batch 3, input 4, hidden 5.
    fn gru_args(b: &mut GraphBuilder, dirs: usize, opts: Vec<(&str, Val)>) -> Vec<Val> {
        let x = f32in(b, "x", &[2, 3, 4]);
        let w = f32in(b, "w", &[dirs, 15, 4]);
        let r = f32in(b, "r", &[dirs, 15, 5]);
        vec![x, w, r, n(2), n(5), dict(opts)]
    }

    #[test]
    fn gru_shapes() {
        let mut b = GraphBuilder::new();
        let args = gru_args(
            &mut b,
            2,
            vec![
                ("direction", s("both")),
                ("returnSequence", Val::Bool(true)),
            ],
        );
        let out = b.call("gru", &args).unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(b.desc(out[0]).shape, vec![2, 3, 5]);
        assert_eq!(b.desc(out[1]).shape, vec![2, 2, 3, 5]);

        let mut b = GraphBuilder::new();
        let args = gru_args(&mut b, 1, vec![]);
        let out = b.call("gru", &args).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(b.desc(out[0]).shape, vec![1, 3, 5]);
    }

    #[test]
    fn gru_errors() {
        // Weights for one direction with direction "both".
        let mut b = GraphBuilder::new();
        let args = gru_args(&mut b, 1, vec![("direction", s("both"))]);
        type_error(b.call("gru", &args), "weight");
        // steps differs from the input's first dimension.
        let mut b = GraphBuilder::new();
        let mut args = gru_args(&mut b, 1, vec![]);
        args[3] = n(3);
        type_error(b.call("gru", &args), "steps");
        // Wrong number of activations.
        let mut b = GraphBuilder::new();
        let args = gru_args(&mut b, 1, vec![("activations", Val::List(vec![s("relu")]))]);
        type_error(b.call("gru", &args), "activations");
        // Unknown activation / layout / direction.
        for (k, v) in [
            ("activations", Val::List(vec![s("relu"), s("gelu")])),
            ("layout", s("ifgo")),
            ("direction", s("up")),
        ] {
            let mut b = GraphBuilder::new();
            let args = gru_args(&mut b, 1, vec![(k, v)]);
            type_error(b.call("gru", &args), k);
        }
        // A bias of the wrong shape and of the wrong type.
        let mut b = GraphBuilder::new();
        let bias = f32in(&mut b, "b", &[1, 16]);
        let args = gru_args(&mut b, 1, vec![("bias", bias)]);
        type_error(b.call("gru", &args), "bias");
        let mut b = GraphBuilder::new();
        let bias = input(&mut b, "b", DataType::Float16, &[1, 15]);
        let args = gru_args(&mut b, 1, vec![("bias", bias)]);
        type_error(b.call("gru", &args), "bias");
        // initialHiddenState of the wrong shape.
        let mut b = GraphBuilder::new();
        let h0 = f32in(&mut b, "h", &[1, 3, 4]);
        let args = gru_args(&mut b, 1, vec![("initialHiddenState", h0)]);
        type_error(b.call("gru", &args), "initialHiddenState");
        // An integer input.
        let mut b = GraphBuilder::new();
        let x = input(&mut b, "x", DataType::Int32, &[1, 1, 1]);
        let w = f32in(&mut b, "w", &[1, 3, 1]);
        let r = f32in(&mut b, "r", &[1, 3, 1]);
        type_error(b.call("gru", &[x, w, r, n(1), n(1)]), "input");
        // hiddenSize 0: no weight can have 0 rows, so the weight check fails.
        let mut b = GraphBuilder::new();
        let x = f32in(&mut b, "x", &[1, 1, 1]);
        let w = f32in(&mut b, "w", &[1, 3, 1]);
        let r = f32in(&mut b, "r", &[1, 3, 1]);
        type_error(b.call("gru", &[x, w, r, n(1), n(0)]), "weight");
    }

    #[test]
    fn gru_cell_shapes_and_errors() {
        let mut b = GraphBuilder::new();
        let x = f32in(&mut b, "x", &[3, 4]);
        let w = f32in(&mut b, "w", &[6, 4]);
        let r = f32in(&mut b, "r", &[6, 2]);
        let h = f32in(&mut b, "h", &[3, 2]);
        let out = b
            .call(
                "gruCell",
                &[x.clone(), w.clone(), r.clone(), h.clone(), n(2)],
            )
            .unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(b.desc(out[0]).shape, vec![3, 2]);
        type_error(
            b.call(
                "gruCell",
                &[x.clone(), w.clone(), r.clone(), h.clone(), n(3)],
            ),
            "weight",
        );
        type_error(
            b.call(
                "gruCell",
                &[x.clone(), w.clone(), r.clone(), x.clone(), n(2)],
            ),
            "hiddenState",
        );
        let rb = f32in(&mut b, "rb", &[5]);
        type_error(
            b.call(
                "gruCell",
                &[x, w, r, h, n(2), dict(vec![("recurrentBias", rb)])],
            ),
            "recurrentBias",
        );
    }

    #[test]
    fn lstm_shapes_and_errors() {
        let mut b = GraphBuilder::new();
        let x = f32in(&mut b, "x", &[2, 3, 4]);
        let w = f32in(&mut b, "w", &[2, 8, 4]);
        let r = f32in(&mut b, "r", &[2, 8, 2]);
        let p = f32in(&mut b, "p", &[2, 6]);
        let c0 = f32in(&mut b, "c", &[2, 3, 2]);
        let out = b
            .call(
                "lstm",
                &[
                    x.clone(),
                    w.clone(),
                    r.clone(),
                    n(2),
                    n(2),
                    dict(vec![
                        ("direction", s("both")),
                        ("returnSequence", Val::Bool(true)),
                        ("peepholeWeight", p.clone()),
                        ("initialCellState", c0.clone()),
                    ]),
                ],
            )
            .unwrap();
        assert_eq!(out.len(), 3);
        assert_eq!(b.desc(out[0]).shape, vec![2, 3, 2]);
        assert_eq!(b.desc(out[1]).shape, vec![2, 3, 2]);
        assert_eq!(b.desc(out[2]).shape, vec![2, 2, 3, 2]);
        // steps 0.
        type_error(
            b.call("lstm", &[x.clone(), w.clone(), r.clone(), n(0), n(2)]),
            "steps",
        );
        // A peephole for one direction only.
        let p1 = f32in(&mut b, "p1", &[1, 6]);
        type_error(
            b.call(
                "lstm",
                &[
                    x,
                    w,
                    r,
                    n(2),
                    n(2),
                    dict(vec![("direction", s("both")), ("peepholeWeight", p1)]),
                ],
            ),
            "peepholeWeight",
        );
    }

    #[test]
    fn lstm_cell_shapes_and_errors() {
        let mut b = GraphBuilder::new();
        let x = f32in(&mut b, "x", &[1, 3]);
        let w = f32in(&mut b, "w", &[4, 3]);
        let r = f32in(&mut b, "r", &[4, 1]);
        let h = f32in(&mut b, "h", &[1, 1]);
        let c = f32in(&mut b, "c", &[1, 1]);
        let out = b
            .call(
                "lstmCell",
                &[x.clone(), w.clone(), r.clone(), h.clone(), c.clone(), n(1)],
            )
            .unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(b.desc(out[1]).shape, vec![1, 1]);
        let c16 = input(&mut b, "c16", DataType::Float16, &[1, 1]);
        type_error(
            b.call(
                "lstmCell",
                &[x.clone(), w.clone(), r.clone(), h.clone(), c16, n(1)],
            ),
            "cellState",
        );
        type_error(
            b.call(
                "lstmCell",
                &[
                    x,
                    w,
                    r,
                    h,
                    c,
                    n(1),
                    dict(vec![("activations", Val::List(vec![s("relu"), s("relu")]))]),
                ],
            ),
            "activations",
        );
    }
}
