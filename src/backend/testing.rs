//! Test support that both backends use: deterministic random data of
//! every type, one-operator graphs, argument values and comparisons. It
//! belongs to neither backend, so the CPU tests need not reach into the
//! GPU backend's helpers (or the other way round).

use crate::error::Result;
use crate::graph::args::Val;
use crate::graph::{Graph, GraphBuilder, OperandId};
use crate::tensor::Buf;
use crate::types::{DataType, OperandDescriptor};

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

/// A constant of `dt` from values (4-bit types packed two to a byte, the
/// first in the low half; an odd count leaves the last high half 0).
pub(crate) fn constant(
    b: &mut GraphBuilder,
    dt: DataType,
    shape: &[usize],
    v: &[f64],
) -> OperandId {
    let bytes: Vec<u8> = match dt {
        DataType::Float32 => v.iter().flat_map(|&x| (x as f32).to_le_bytes()).collect(),
        DataType::Float16 => v
            .iter()
            .flat_map(|&x| crate::f16::f32_to_f16(x as f32).to_le_bytes())
            .collect(),
        DataType::Int8 | DataType::Uint8 => v.iter().map(|&x| x as i64 as u8).collect(),
        DataType::Int4 | DataType::Uint4 => v
            .chunks(2)
            .map(|p| (p[0] as i64 as u8 & 15) | (p.get(1).map_or(0, |&x| x as i64 as u8 & 15) << 4))
            .collect(),
        _ => unreachable!("not a type these tests use"),
    };
    b.constant(desc(dt, shape), std::sync::Arc::new(bytes))
        .unwrap()
}

pub(crate) fn operand(b: &GraphBuilder, id: usize) -> Val {
    Val::Operand { builder: b.id, id }
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

/// Every float16 bit pattern, for the tests that check each one (every
/// 257th under Miri, which would take hours over all of them).
pub(crate) fn all_halves() -> Vec<u16> {
    if cfg!(miri) {
        (0..=u16::MAX).step_by(257).collect()
    } else {
        (0..=u16::MAX).collect()
    }
}

/// A second operand for [`all_halves`]: a bit scramble that pairs each
/// value with others of every class (zeros, subnormals, normals,
/// infinities and NaNs of both signs).
pub(crate) fn partner_halves(halves: &[u16]) -> Vec<u16> {
    halves
        .iter()
        .map(|&v| v.wrapping_mul(40_503).rotate_left(5))
        .collect()
}
