//! The cases the fuzzer runs: small graphs of operators with typed
//! parameters, their inputs as exact values, and how each turns into the
//! builder calls the JS binding makes (`GraphBuilder::call`).

use std::fmt;
use std::sync::Arc;

use webnn_node::graph::args::Val;
use webnn_node::graph::{Graph, GraphBuilder};
use webnn_node::tensor::Buf;
use webnn_node::types::{DataType, OperandDescriptor};

use super::f16;

/// A tensor of exact values: every value is representable in `dt`
/// (float16 values are rounded, integers are whole and in range), so the
/// f64 holds it without loss. Integers stay below 2^53 in magnitude.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub dt: DataType,
    pub shape: Vec<usize>,
    pub v: Vec<f64>,
}

impl Tensor {
    pub fn new(dt: DataType, shape: Vec<usize>, v: Vec<f64>) -> Tensor {
        debug_assert_eq!(shape.iter().product::<usize>(), v.len());
        Tensor { dt, shape, v }
    }

    pub fn len(&self) -> usize {
        self.v.len()
    }

    /// The backends' storage of these values.
    pub fn to_buf(&self) -> Buf {
        let v = &self.v;
        match self.dt {
            DataType::Float32 => Buf::F32(v.iter().map(|&x| x as f32).collect()),
            DataType::Float16 => Buf::F16(v.iter().map(|&x| f16::to_bits(x)).collect()),
            DataType::Int32 => Buf::I32(v.iter().map(|&x| x as i32).collect()),
            DataType::Uint32 => Buf::U32(v.iter().map(|&x| x as u32).collect()),
            DataType::Int64 => Buf::I64(v.iter().map(|&x| x as i64).collect()),
            DataType::Uint64 => Buf::U64(v.iter().map(|&x| x as u64).collect()),
            DataType::Int8 | DataType::Int4 => Buf::I8(v.iter().map(|&x| x as i8).collect()),
            DataType::Uint8 | DataType::Uint4 => Buf::U8(v.iter().map(|&x| x as u8).collect()),
        }
    }

    pub fn desc(&self) -> OperandDescriptor {
        OperandDescriptor {
            data_type: self.dt,
            shape: self.shape.clone(),
        }
    }
}

/// Where a node's operand comes from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Src {
    /// The case's input (or constant) `i`.
    In(usize),
    /// The output of node `i` (an earlier one).
    Node(usize),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Conv {
    /// [top, bottom, left, right].
    pub pad: [usize; 4],
    pub strides: [usize; 2],
    pub dil: [usize; 2],
    pub groups: usize,
    pub nhwc: bool,
    pub filter_layout: &'static str,
    pub bias: bool,
    /// convTranspose2d only.
    pub out_pad: [usize; 2],
    /// convTranspose2d only: explicit output sizes.
    pub out_sizes: Option<[usize; 2]>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Pool {
    pub kind: &'static str,
    pub window: Option<[usize; 2]>,
    pub pad: [usize; 4],
    pub strides: [usize; 2],
    pub dil: [usize; 2],
    pub nhwc: bool,
    pub ceil: bool,
}

/// An operator with its parameters; operands come from the node's
/// `args` in the order the operator takes them (optional operands such as
/// a bias last, in the order named here).
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// add, sub, mul, div, max, min, pow.
    Binary(&'static str),
    /// equal, notEqual, greater, greaterOrEqual, lesser, lesserOrEqual,
    /// logicalAnd, logicalOr, logicalXor.
    Logical(&'static str),
    /// logicalNot, isNaN, isInfinite.
    LogicalUnary(&'static str),
    /// abs, ceil, floor, neg, relu, sigmoid, tanh, exp, log, sqrt,
    /// reciprocal, sign, identity, roundEven, erf, sin, cos.
    Unary(&'static str),
    Cast(DataType),
    Clamp {
        min: Option<f64>,
        max: Option<f64>,
    },
    Softmax {
        axis: usize,
    },
    /// reduceSum, reduceMean, ...: `axes` absent means all.
    Reduce {
        kind: &'static str,
        axes: Option<Vec<usize>>,
        keep: bool,
    },
    Transpose {
        perm: Option<Vec<usize>>,
    },
    Reshape {
        shape: Vec<usize>,
    },
    /// Operands: every input, in order.
    Concat {
        axis: usize,
    },
    Slice {
        starts: Vec<usize>,
        sizes: Vec<usize>,
        strides: Option<Vec<usize>>,
    },
    /// Operands: input, filter, bias?
    Conv2d(Conv),
    /// Operands: input, filter, bias?
    ConvTranspose2d(Conv),
    Matmul,
    /// Operands: a, b, c?
    Gemm {
        alpha: Option<f64>,
        beta: Option<f64>,
        at: bool,
        bt: bool,
        c: bool,
    },
    Pool(Pool),
    /// Operands: input, mean, variance, scale?, bias?
    BatchNorm {
        axis: usize,
        eps: f64,
        scale: bool,
        bias: bool,
    },
    /// Operands: input, scale?, bias?
    LayerNorm {
        axes: Option<Vec<usize>>,
        eps: f64,
        scale: bool,
        bias: bool,
    },
}

impl Op {
    pub fn name(&self) -> &'static str {
        match self {
            Op::Binary(n) | Op::Logical(n) | Op::LogicalUnary(n) | Op::Unary(n) => n,
            Op::Cast(_) => "cast",
            Op::Clamp { .. } => "clamp",
            Op::Softmax { .. } => "softmax",
            Op::Reduce { kind, .. } => kind,
            Op::Transpose { .. } => "transpose",
            Op::Reshape { .. } => "reshape",
            Op::Concat { .. } => "concat",
            Op::Slice { .. } => "slice",
            Op::Conv2d(_) => "conv2d",
            Op::ConvTranspose2d(_) => "convTranspose2d",
            Op::Matmul => "matmul",
            Op::Gemm { .. } => "gemm",
            Op::Pool(p) => p.kind,
            Op::BatchNorm { .. } => "batchNormalization",
            Op::LayerNorm { .. } => "layerNormalization",
        }
    }

    /// The arguments of the builder call, given the operands' values.
    pub fn args(&self, ops: &[Val]) -> Vec<Val> {
        let n = |x: usize| Val::Number(x as f64);
        let list = |v: &[usize]| Val::List(v.iter().map(|&x| n(x)).collect());
        let dict = |entries: Vec<(&str, Val)>| {
            Val::Dict(
                entries
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect(),
            )
        };
        let s = |x: &str| Val::String(x.to_string());
        match self {
            Op::Binary(_) | Op::Logical(_) | Op::Matmul => vec![ops[0].clone(), ops[1].clone()],
            Op::LogicalUnary(_) | Op::Unary(_) => vec![ops[0].clone()],
            Op::Cast(dt) => vec![ops[0].clone(), s(dt.name())],
            Op::Clamp { min, max } => {
                let mut e = Vec::new();
                if let Some(m) = min {
                    e.push(("minValue", Val::Number(*m)));
                }
                if let Some(m) = max {
                    e.push(("maxValue", Val::Number(*m)));
                }
                vec![ops[0].clone(), dict(e)]
            }
            Op::Softmax { axis } => vec![ops[0].clone(), n(*axis)],
            Op::Reduce { axes, keep, .. } => {
                let mut e = vec![("keepDimensions", Val::Bool(*keep))];
                if let Some(a) = axes {
                    e.push(("axes", list(a)));
                }
                vec![ops[0].clone(), dict(e)]
            }
            Op::Transpose { perm } => {
                let mut e = Vec::new();
                if let Some(p) = perm {
                    e.push(("permutation", list(p)));
                }
                vec![ops[0].clone(), dict(e)]
            }
            Op::Reshape { shape } => vec![ops[0].clone(), list(shape)],
            Op::Concat { axis } => vec![Val::List(ops.to_vec()), n(*axis)],
            Op::Slice {
                starts,
                sizes,
                strides,
            } => {
                let mut e = Vec::new();
                if let Some(st) = strides {
                    e.push(("strides", list(st)));
                }
                vec![ops[0].clone(), list(starts), list(sizes), dict(e)]
            }
            Op::Conv2d(c) | Op::ConvTranspose2d(c) => {
                let mut e = vec![
                    ("padding", list(&c.pad)),
                    ("strides", list(&c.strides)),
                    ("dilations", list(&c.dil)),
                    ("groups", n(c.groups)),
                    ("inputLayout", s(if c.nhwc { "nhwc" } else { "nchw" })),
                    ("filterLayout", s(c.filter_layout)),
                ];
                if c.bias {
                    e.push(("bias", ops[2].clone()));
                }
                if matches!(self, Op::ConvTranspose2d(_)) {
                    e.push(("outputPadding", list(&c.out_pad)));
                    if let Some(o) = c.out_sizes {
                        e.push(("outputSizes", list(&o)));
                    }
                }
                vec![ops[0].clone(), ops[1].clone(), dict(e)]
            }
            Op::Gemm {
                alpha,
                beta,
                at,
                bt,
                c,
            } => {
                let mut e = vec![
                    ("aTranspose", Val::Bool(*at)),
                    ("bTranspose", Val::Bool(*bt)),
                ];
                if let Some(a) = alpha {
                    e.push(("alpha", Val::Number(*a)));
                }
                if let Some(b) = beta {
                    e.push(("beta", Val::Number(*b)));
                }
                if *c {
                    e.push(("c", ops[2].clone()));
                }
                vec![ops[0].clone(), ops[1].clone(), dict(e)]
            }
            Op::Pool(p) => {
                let mut e = vec![
                    ("padding", list(&p.pad)),
                    ("strides", list(&p.strides)),
                    ("dilations", list(&p.dil)),
                    ("layout", s(if p.nhwc { "nhwc" } else { "nchw" })),
                    (
                        "outputShapeRounding",
                        s(if p.ceil { "ceil" } else { "floor" }),
                    ),
                ];
                if let Some(w) = p.window {
                    e.push(("windowDimensions", list(&w)));
                }
                vec![ops[0].clone(), dict(e)]
            }
            Op::BatchNorm {
                axis,
                eps,
                scale,
                bias,
            } => {
                let mut e = vec![("axis", n(*axis)), ("epsilon", Val::Number(*eps))];
                let mut k = 3;
                if *scale {
                    e.push(("scale", ops[k].clone()));
                    k += 1;
                }
                if *bias {
                    e.push(("bias", ops[k].clone()));
                }
                vec![ops[0].clone(), ops[1].clone(), ops[2].clone(), dict(e)]
            }
            Op::LayerNorm {
                axes,
                eps,
                scale,
                bias,
            } => {
                let mut e = vec![("epsilon", Val::Number(*eps))];
                if let Some(a) = axes {
                    e.push(("axes", list(a)));
                }
                let mut k = 1;
                if *scale {
                    e.push(("scale", ops[k].clone()));
                    k += 1;
                }
                if *bias {
                    e.push(("bias", ops[k].clone()));
                }
                vec![ops[0].clone(), dict(e)]
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub op: Op,
    pub args: Vec<Src>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Input {
    pub t: Tensor,
    /// A graph constant (`builder.constant`) rather than an input.
    pub constant: bool,
}

/// A graph: its inputs, its nodes in order; the last node's output is the
/// graph's one output.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// The generator that drew it (for the report and for shrinking).
    pub family: &'static str,
    pub inputs: Vec<Input>,
    pub nodes: Vec<Node>,
}

impl Case {
    /// Builds the graph through `GraphBuilder::call`, as the binding does;
    /// returns it with the input data in `graph.inputs` order.
    pub fn build(&self) -> webnn_node::error::Result<(Graph, Vec<Buf>)> {
        let mut b = GraphBuilder::new();
        let mut in_ids = Vec::new();
        let mut feeds = Vec::new();
        for (i, input) in self.inputs.iter().enumerate() {
            let d = input.t.desc();
            let buf = input.t.to_buf();
            let id = if input.constant {
                b.constant(d.clone(), Arc::new(buf.to_bytes(d.data_type)))?
            } else {
                feeds.push(buf);
                b.input(&format!("in{i}"), d)?
            };
            in_ids.push(id);
        }
        let mut outs = Vec::new();
        for node in &self.nodes {
            let vals: Vec<Val> = node
                .args
                .iter()
                .map(|s| Val::Operand {
                    builder: b.id,
                    id: match *s {
                        Src::In(i) => in_ids[i],
                        Src::Node(i) => outs[i],
                    },
                })
                .collect();
            let ids = b.call(node.op.name(), &node.op.args(&vals))?;
            outs.push(ids[0]);
        }
        let last = *outs.last().expect("a case has a node");
        let g = b.build(vec![("out".to_string(), last)])?;
        Ok((g, feeds))
    }

    /// Elements over all inputs (the size that shrinking reduces).
    pub fn size(&self) -> usize {
        self.inputs.iter().map(|i| i.t.len()).sum::<usize>() + self.nodes.len()
    }
}

fn fmt_values(f: &mut fmt::Formatter<'_>, t: &Tensor) -> fmt::Result {
    const SHOWN: usize = 48;
    write!(f, "[")?;
    for (k, x) in t.v.iter().take(SHOWN).enumerate() {
        if k > 0 {
            write!(f, ", ")?;
        }
        if *x == 0.0 && x.is_sign_negative() {
            write!(f, "-0")?;
        } else {
            write!(f, "{x:e}")?;
        }
    }
    if t.len() > SHOWN {
        write!(f, ", ... ({} values)", t.len())?;
    }
    write!(f, "]")
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "case ({}):", self.family)?;
        for (i, input) in self.inputs.iter().enumerate() {
            write!(
                f,
                "  in{i}: {} {:?}{} = ",
                input.t.dt.name(),
                input.t.shape,
                if input.constant { " constant" } else { "" }
            )?;
            fmt_values(f, &input.t)?;
            writeln!(f)?;
        }
        for (i, node) in self.nodes.iter().enumerate() {
            let args: Vec<String> = node
                .args
                .iter()
                .map(|s| match s {
                    Src::In(k) => format!("in{k}"),
                    Src::Node(k) => format!("n{k}"),
                })
                .collect();
            writeln!(
                f,
                "  n{i} = {}({}) {:?}",
                node.op.name(),
                args.join(", "),
                node.op
            )?;
        }
        Ok(())
    }
}
