//! Helpers of the GPU kernel tests (every family's tests use them): a
//! backend or a skip, and the comparison with the CPU backend's kernels.
//! What does not depend on the GPU (random inputs, one-operator graphs,
//! argument values) is in `backend/testing.rs`, shared with the CPU
//! backend's tests.

use super::*;
// The backend-independent helpers, so that `use testing::*` in the GPU
// tests finds them here as before.
pub(crate) use crate::backend::testing::*;
use crate::error::ErrorKind;
use crate::graph::args::Val;
use crate::graph::GraphBuilder;

/// The backend, or `None` (after a message) on machines without a
/// Vulkan adapter, so that the suite passes there.
pub(crate) fn backend() -> Option<GpuBackend> {
    match GpuBackend::new("default") {
        Ok(b) => Some(b),
        Err(e) if e.kind == ErrorKind::NotSupported => {
            eprintln!("skipping the GPU test: {}", e.message);
            None
        }
        Err(e) => panic!("creating the GPU backend failed: {e}"),
    }
}

/// Compiles `graph` and runs it once on `inputs`.
pub(crate) fn run(be: &mut GpuBackend, graph: Graph, inputs: Vec<Buf>) -> Result<Vec<Buf>> {
    let g = Arc::new(graph);
    be.compile(1, g.clone())?;
    let out = be.compute(1, &g, inputs);
    be.destroy_graph(1);
    out
}

/// An argument of a one-operator test graph.
#[derive(Clone, Debug)]
pub(crate) enum Arg<'a> {
    /// An input operand of this type and shape, filled with random data.
    T(DataType, &'a [usize]),
    /// An input operand of this descriptor, holding these values.
    D(Buf, OperandDescriptor),
    /// Any other value.
    V(Val),
}

/// Adds `a` to `b`'s arguments: an input (with its data: random ones
/// seeded `seed` plus the number of inputs before it) or the value itself.
fn arg_val(b: &mut GraphBuilder, a: &Arg, data: &mut Vec<(usize, Buf)>, seed: u64) -> Val {
    match a {
        Arg::T(dt, sh) => {
            let k = data.len();
            let id = b.input(&format!("in{k}"), desc(*dt, sh)).unwrap();
            data.push((id, random_buf(*dt, sh.iter().product(), seed + k as u64)));
            operand(b, id)
        }
        Arg::D(values, d) => {
            let id = b.input(&format!("in{}", data.len()), d.clone()).unwrap();
            data.push((id, values.clone()));
            operand(b, id)
        }
        Arg::V(v) => v.clone(),
    }
}

/// Builds `name(args...)`, followed by an `options` dictionary when given
/// (whose members may be operands too), runs it on the GPU and on the CPU
/// backend's kernel with the same random inputs (seeded from `seed`), and
/// compares every output: float32 within `tol`, float16 as f32 within
/// `f16_tol`, other types exactly.
pub(crate) fn check_call_vs_cpu(
    be: &mut GpuBackend,
    name: &str,
    args: &[Arg],
    options: Option<&[(&str, Arg)]>,
    seed: u64,
    tol: f32,
    f16_tol: f32,
) {
    let mut b = GraphBuilder::new();
    let mut data = Vec::new();
    let mut vals: Vec<Val> = args
        .iter()
        .map(|a| arg_val(&mut b, a, &mut data, seed))
        .collect();
    if let Some(members) = options {
        let members: Vec<(&str, Val)> = members
            .iter()
            .map(|(k, a)| (*k, arg_val(&mut b, a, &mut data, seed)))
            .collect();
        vals.push(dict(&members));
    }
    let outs = b.call(name, &vals).unwrap();
    let g = b
        .build(
            outs.iter()
                .enumerate()
                .map(|(i, &o)| (format!("out{i}"), o))
                .collect(),
        )
        .unwrap();
    assert_eq!(g.nodes.len(), 1, "{name} builds one node");
    let node = &g.nodes[0];
    let by_id = |id: usize| &data.iter().find(|(i, _)| *i == id).unwrap().1;
    let refs: Vec<&Buf> = node.inputs.iter().map(|&i| by_id(i)).collect();
    let in_descs: Vec<&OperandDescriptor> = node.inputs.iter().map(|&i| &g.operands[i]).collect();
    let out_descs: Vec<OperandDescriptor> = node
        .outputs
        .iter()
        .map(|&o| g.operands[o].clone())
        .collect();
    let want = crate::backend::cpu::run_op(&node.op, &refs, &in_descs, &out_descs, None).unwrap();
    let inputs: Vec<Buf> = g.inputs.iter().map(|(_, id)| by_id(*id).clone()).collect();
    let what = format!("{name} {args:?} {options:?}");
    let got = run(be, g, inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(got.len(), want.len(), "{what}: outputs");
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        let what = format!("{what}: output {k}");
        match (g, w) {
            (Buf::F32(g), Buf::F32(w)) => assert_close(g, w, tol, &what),
            (Buf::F16(_), Buf::F16(_)) => {
                assert_close(&g.to_f32_vec(), &w.to_f32_vec(), f16_tol, &what)
            }
            (g, w) => assert_eq!(g, w, "{what}"),
        }
    }
}

/// Builds `name` on inputs of `types` and `shapes` (plus `extra`
/// arguments), runs it on the GPU and on the CPU backend's kernel with
/// the same random inputs, and compares (floats within `tol`; float16
/// results within `tol` plus one half ulp of rounding).
pub(crate) fn check_vs_cpu(
    be: &mut GpuBackend,
    name: &str,
    types: &[DataType],
    shapes: &[&[usize]],
    extra: &[Val],
    tol: f32,
) {
    let mut args: Vec<Arg> = shapes
        .iter()
        .zip(types)
        .map(|(sh, dt)| Arg::T(*dt, sh))
        .collect();
    args.extend(extra.iter().cloned().map(Arg::V));
    check_call_vs_cpu(be, name, &args, None, 1000, tol, tol.max(1e-3));
}

pub(crate) const F: DataType = DataType::Float32;
pub(crate) const I: DataType = DataType::Int32;
pub(crate) const U: DataType = DataType::Uint32;
