//! Helpers of the GPU kernel tests (every family's tests use them): a
//! backend or a skip, random inputs of every type, one-operator graphs and
//! the comparison with the CPU backend's kernels.

use super::*;
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

/// Deterministic pseudo-random values in [-2, 2).
pub(crate) fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32 * 4.0 - 2.0
        })
        .collect()
}

/// A descriptor built directly, so the backend's handling of shapes
/// that validation refuses (zero-sized) is still exercised.
pub(crate) fn desc(dt: DataType, shape: &[usize]) -> OperandDescriptor {
    OperandDescriptor {
        data_type: dt,
        shape: shape.to_vec(),
    }
}

pub(crate) fn operand(b: &GraphBuilder, id: usize) -> Val {
    Val::Operand { builder: b.id, id }
}

/// Compiles `graph` and runs it once on `inputs`.
pub(crate) fn run(be: &mut GpuBackend, graph: Graph, inputs: Vec<Buf>) -> Result<Vec<Buf>> {
    let g = Arc::new(graph);
    be.compile(1, g.clone())?;
    let out = be.compute(1, &g, inputs);
    be.destroy_graph(1);
    out
}

/// Builds `name(a, b, ...extra)` on inputs of the given shapes.
pub(crate) fn op_graph(
    name: &str,
    dt: DataType,
    shapes: &[&[usize]],
    extra: &[Val],
) -> Result<Graph> {
    let mut b = GraphBuilder::new();
    let mut args = Vec::new();
    for (i, s) in shapes.iter().enumerate() {
        let id = b.input(&format!("in{i}"), desc(dt, s))?;
        args.push(operand(&b, id));
    }
    args.extend(extra.iter().cloned());
    let out = b.call(name, &args)?[0];
    b.build(vec![("out".into(), out)])
}

/// The index into an input of `shape` for each output element
/// (a straightforward numpy broadcast, independent of the kernel's).
pub(crate) fn broadcast_index(out: &[usize], shape: &[usize], i: usize) -> usize {
    let mut rem = i;
    let mut coords = vec![0; out.len()];
    for d in (0..out.len()).rev() {
        coords[d] = rem % out[d];
        rem /= out[d];
    }
    let offset = out.len() - shape.len();
    let mut idx = 0;
    for (d, &size) in shape.iter().enumerate() {
        idx = idx * size + if size == 1 { 0 } else { coords[offset + d] };
    }
    idx
}

pub(crate) fn assert_close(got: &[f32], want: &[f32], tol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g - w).abs() <= tol * (1.0 + w.abs()) || (g.is_nan() && w.is_nan()) || g == w;
        assert!(ok, "{what}: element {i} is {g}, expected {w}");
    }
}

pub(crate) type BinaryFn = fn(f32, f32) -> f32;
pub(crate) type UnaryFn = fn(f32) -> f32;

pub(crate) fn f32s(b: &Buf) -> Vec<f32> {
    match b {
        Buf::F32(v) => v.clone(),
        other => panic!("expected float32 data, got {other:?}"),
    }
}

/// Random data of any type: floats in [-2, 2), signed integers in about
/// [-50, 50), unsigned ones in [0, 100) (small types within their range),
/// uint8 as 0/1 (the logical operators' domain).
pub(crate) fn random_buf(dt: DataType, n: usize, seed: u64) -> Buf {
    let r = random(n, seed);
    match dt {
        DataType::Float32 => Buf::F32(r),
        DataType::Float16 => Buf::f16_from_f32(&r),
        DataType::Int32 => Buf::I32(r.iter().map(|v| (v * 25.0) as i32).collect()),
        DataType::Uint32 => Buf::U32(r.iter().map(|v| ((v + 2.0) * 25.0) as u32).collect()),
        DataType::Int64 => Buf::I64(r.iter().map(|v| (v * 25.0) as i64).collect()),
        DataType::Uint64 => Buf::U64(r.iter().map(|v| ((v + 2.0) * 25.0) as u64).collect()),
        DataType::Int8 => Buf::I8(r.iter().map(|v| (v * 25.0) as i8).collect()),
        DataType::Int4 => Buf::I8(r.iter().map(|v| (v * 3.9) as i8).collect()),
        DataType::Uint4 => Buf::U8(r.iter().map(|v| ((v + 2.0) * 3.9) as u8).collect()),
        DataType::Uint8 => Buf::U8(r.iter().map(|&v| u8::from(v > 0.0)).collect()),
    }
}

pub(crate) fn n(v: f64) -> Val {
    Val::Number(v)
}

pub(crate) fn list(v: &[f64]) -> Val {
    Val::List(v.iter().map(|&x| Val::Number(x)).collect())
}

pub(crate) fn dict(entries: &[(&str, Val)]) -> Val {
    Val::Dict(
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
    )
}

pub(crate) fn s(v: &str) -> Val {
    Val::String(v.into())
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
