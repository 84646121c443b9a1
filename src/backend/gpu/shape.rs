//! Data movement and conversion: `transpose`, `slice`, `concat` (one
//! strided-copy kernel over 32-bit words, `shaders/copy.wgsl`), `cast`
//! between float32, int32 and uint32, and `softmax`.

use super::elementwise::coalesce;
use super::{convert, is_float, word, Gpu, Step};
use crate::error::{Error, Result};
use crate::types::{DataType, OperandDescriptor};

const COPY: &str = include_str!("shaders/copy.wgsl");
const SOFTMAX: &str = concat!(
    include_str!("shaders/softmax.wgsl"),
    "\n",
    include_str!("shaders/float.wgsl")
);

/// Row-major element strides of `shape`.
pub(super) fn strides(shape: &[usize]) -> Vec<u64> {
    let mut s = vec![1u64; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1] as u64;
    }
    s
}

/// The family's answer to [`super::supports`]: the copies move words (and
/// word pairs), so they take every type; cast converts between all.
pub(super) fn supports(op: &str, _operand: &str, dt: DataType) -> bool {
    match op {
        "transpose" | "slice" | "concat" | "cast" => true,
        "softmax" => is_float(dt),
        _ => false,
    }
}

/// A step copying the walk over `shape` from `src` (offset `so`, strides
/// `ss`, in elements) to `dst` (offset `dof`, strides `ds`) for elements
/// of `dt`; none when it is empty. Strides may be negative as wrapped u32
/// (the kernel's index arithmetic wraps), which walks a dimension
/// backwards. Elements of two words (int64/uint64) become a trailing
/// walk over the pair.
#[allow(clippy::too_many_arguments)]
pub(super) fn copy(
    gpu: &mut Gpu,
    dt: DataType,
    shape: &[usize],
    so: u64,
    ss: &[u64],
    dof: u64,
    ds: &[u64],
    src: &wgpu::Buffer,
    dst: &wgpu::Buffer,
) -> Result<Option<Step>> {
    let w = convert::words(dt);
    let n: u64 = shape.iter().map(|&d| d as u64).product::<u64>() * w;
    if n == 0 {
        return Ok(None);
    }
    let mut shape = shape.to_vec();
    let scale = |v: &[u64]| -> Vec<u64> { v.iter().map(|&x| x.wrapping_mul(w)).collect() };
    let (mut ss, mut ds) = (scale(ss), scale(ds));
    if w > 1 {
        shape.push(w as usize);
        ss.push(1);
        ds.push(1);
    }
    let dims = coalesce(&shape, &ss, &ds);
    let wrap = |v: u64| v as u32;
    let mut p = vec![
        word(n)?,
        dims.len() as u32,
        wrap(so.wrapping_mul(w)),
        wrap(dof.wrapping_mul(w)),
    ];
    for &(size, _, _) in &dims {
        p.push(word(size)?);
    }
    for &(_, s, _) in &dims {
        p.push(wrap(s));
    }
    for &(_, _, s) in &dims {
        p.push(wrap(s));
    }
    let params = gpu.params(&p)?;
    let grid = gpu.grid_1d(n)?;
    gpu.step(COPY.to_string(), "main", &[&params, src, dst], grid)
        .map(Some)
}

/// A step filling all of `dst` (row-major, of `dst_desc`) from `src`,
/// read from offset `so` with strides `ss` per dimension of `dst`.
pub(super) fn copy_into(
    gpu: &mut Gpu,
    so: u64,
    ss: &[u64],
    src: &wgpu::Buffer,
    dst: &wgpu::Buffer,
    dst_desc: &OperandDescriptor,
) -> Result<Option<Step>> {
    let (dt, shape) = (dst_desc.data_type, &dst_desc.shape);
    copy(gpu, dt, shape, so, ss, 0, &strides(shape), src, dst)
}

pub(super) fn transpose(
    gpu: &mut Gpu,
    permutation: &[usize],
    input: &wgpu::Buffer,
    in_desc: &OperandDescriptor,
    out: &wgpu::Buffer,
    out_desc: &OperandDescriptor,
) -> Result<Option<Step>> {
    let is = strides(&in_desc.shape);
    let ss: Vec<u64> = permutation.iter().map(|&a| is[a]).collect();
    copy_into(gpu, 0, &ss, input, out, out_desc)
}

pub(super) fn slice(
    gpu: &mut Gpu,
    starts: &[usize],
    steps: &[usize],
    input: &wgpu::Buffer,
    in_desc: &OperandDescriptor,
    out: &wgpu::Buffer,
    out_desc: &OperandDescriptor,
) -> Result<Option<Step>> {
    let is = strides(&in_desc.shape);
    let so: u64 = starts.iter().zip(&is).map(|(&s, &st)| s as u64 * st).sum();
    let ss: Vec<u64> = steps
        .iter()
        .zip(&is)
        .map(|(&k, &st)| k as u64 * st)
        .collect();
    copy_into(gpu, so, &ss, input, out, out_desc)
}

/// One copy step per input, each into its block of the output.
pub(super) fn concat(
    gpu: &mut Gpu,
    axis: usize,
    ins: &[&wgpu::Buffer],
    in_descs: &[&OperandDescriptor],
    out: &wgpu::Buffer,
    out_desc: &OperandDescriptor,
) -> Result<Vec<Step>> {
    let ds = strides(&out_desc.shape);
    let mut steps = Vec::new();
    let mut at = 0u64;
    for (buf, d) in ins.iter().zip(in_descs) {
        let ss = strides(&d.shape);
        steps.extend(copy(
            gpu,
            out_desc.data_type,
            &d.shape,
            0,
            &ss,
            at * ds[axis],
            &ds,
            buf,
            out,
        )?);
        at += d.shape[axis] as u64;
    }
    Ok(steps)
}

/// WGSL helpers of `cast` for word pairs (int64/uint64, low word first).
const CAST64: &str = "
// NaN by its bits: WGSL lets compilers assume floats are never NaN.
fn is_nan(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;
}

fn i64_of_i32(v: i32) -> vec2<u32> {
    return vec2<u32>(bitcast<u32>(v), select(0u, 0xffffffffu, v < 0));
}

// Truncates toward zero; saturates at the int64 (or, when `unsigned`, the
// uint64) range; NaN gives 0.
fn i64_of_f32(v: f32, unsigned: bool) -> vec2<u32> {
    if (is_nan(v)) {
        return vec2<u32>(0u, 0u);
    }
    if (unsigned) {
        if (v <= 0.0) {
            return vec2<u32>(0u, 0u);
        }
        if (v >= 18446744073709551616.0) {
            return vec2<u32>(0xffffffffu, 0xffffffffu);
        }
    } else {
        if (v >= 9223372036854775808.0) {
            return vec2<u32>(0xffffffffu, 0x7fffffffu);
        }
        if (v <= -9223372036854775808.0) {
            return vec2<u32>(0u, 0x80000000u);
        }
    }
    let a = trunc(abs(v));
    // For |v| >= 2^24 the value is an integer and both parts are exact.
    let hi = floor(a / 4294967296.0);
    let lo = a - hi * 4294967296.0;
    var r = vec2<u32>(u32(lo), u32(hi));
    if (v < 0.0) {
        // Two's complement negation of the pair.
        let nlo = ~r.x + 1u;
        r = vec2<u32>(nlo, ~r.y + select(0u, 1u, nlo == 0u));
    }
    return r;
}

// The nearest f32 of a signed (or unsigned) 64-bit value; exact rounding
// whenever the value fits 32 bits, else within one f32 rounding step.
fn f32_of_i64(v: vec2<u32>, unsigned: bool) -> f32 {
    if (!unsigned && v.y == select(0u, 0xffffffffu, (v.x & 0x80000000u) != 0u)) {
        return f32(bitcast<i32>(v.x));
    }
    if (unsigned && v.y == 0u) {
        return f32(v.x);
    }
    if (!unsigned && (v.y & 0x80000000u) != 0u) {
        let nlo = ~v.x + 1u;
        let nhi = ~v.y + select(0u, 1u, nlo == 0u);
        return -(f32(nhi) * 4294967296.0 + f32(nlo));
    }
    return f32(v.y) * 4294967296.0 + f32(v.x);
}
";

/// `cast` between any two data types, as the CPU backend: to a float, the
/// nearest value (the fix-up after the step rounds float16); float to an
/// integer type, truncated and saturated at that type's range, NaN giving
/// 0; integer to integer, the low bits (the fix-up wraps the narrow
/// types). Elements are in the working representation of their types.
pub(super) fn cast(
    gpu: &mut Gpu,
    input: &wgpu::Buffer,
    in_desc: &OperandDescriptor,
    out: &wgpu::Buffer,
    out_desc: &OperandDescriptor,
) -> Result<Option<Step>> {
    use DataType::*;
    let (from, to) = (in_desc.data_type, out_desc.data_type);
    let n = out_desc.element_count() as u64;
    if n == 0 {
        return Ok(None);
    }
    let (ti, tout) = (convert::compute_type(from), convert::compute_type(to));
    let unsigned_from = matches!(from, Uint64);
    // Range of an integer target, for saturating float sources.
    let (lo, hi): (f64, f64) = match to {
        Int32 => (-2147483648.0, 2147483647.0),
        Uint32 => (0.0, 4294967295.0),
        Int8 => (-128.0, 127.0),
        Uint8 => (0.0, 255.0),
        Int4 => (-8.0, 7.0),
        Uint4 => (0.0, 15.0),
        _ => (0.0, 0.0),
    };
    let expr = match (ti, tout) {
        // Same working type: the value (or its bits); the fix-up after
        // the step rounds or wraps it into a narrower target.
        _ if ti == tout => "v".to_string(),
        ("f32", "i32") => {
            let lo_s = if lo == -2147483648.0 {
                "(-2147483647 - 1)".to_string()
            } else {
                format!("{}", lo as i64)
            };
            format!(
                "select(select(select(i32(v), {hi}, v >= {hi}.0), {lo_s}, v <= {lo}.0), 0, is_nan(v))",
                hi = hi as i64,
                lo = lo as i64,
            )
        }
        ("f32", "u32") => format!(
            "select(select(select(u32(v), {h}u, v >= {h}.0), 0u, v <= 0.0), 0u, is_nan(v))",
            h = hi as u64
        ),
        ("f32", _) => format!("i64_of_f32(v, {})", to == Uint64),
        ("i32" | "u32", "f32") => "f32(v)".to_string(),
        ("i32", "u32") => "bitcast<u32>(v)".to_string(),
        ("u32", "i32") => "bitcast<i32>(v)".to_string(),
        ("i32", _) => "i64_of_i32(v)".to_string(),
        ("u32", _) => "vec2<u32>(v, 0u)".to_string(),
        (_, "f32") => format!("f32_of_i64(v, {unsigned_from})"),
        (_, "i32") => "bitcast<i32>(v.x)".to_string(),
        (_, "u32") => "v.x".to_string(),
        _ => "v".to_string(),
    };
    let source = format!(
        "@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<{ti}>;
@group(0) @binding(2) var<storage, read_write> out: array<{tout}>;
{CAST64}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let i = gid.y * nwg.x * 256u + gid.x;
    if (i >= p[0]) {{
        return;
    }}
    let v = x[i];
    out[i] = {expr};
}}
"
    );
    let params = gpu.params(&[word(n)?])?;
    let grid = gpu.grid_1d(n)?;
    gpu.step(source, "main", &[&params, input, out], grid)
        .map(Some)
}

/// `softmax` of float32 along `axis`.
pub(super) fn softmax(
    gpu: &mut Gpu,
    axis: usize,
    input: &wgpu::Buffer,
    out: &wgpu::Buffer,
    out_desc: &OperandDescriptor,
) -> Result<Option<Step>> {
    if !is_float(out_desc.data_type) {
        return Err(Error::not_supported(format!(
            "softmax on {} is not supported on the GPU backend yet",
            out_desc.data_type.name()
        )));
    }
    let shape = &out_desc.shape;
    let len = shape[axis] as u64;
    let inner: u64 = shape[axis + 1..].iter().map(|&d| d as u64).product();
    let outer: u64 = shape[..axis].iter().map(|&d| d as u64).product();
    let rows = outer * inner;
    if rows * len == 0 {
        return Ok(None);
    }
    word(rows * len)?;
    let params = gpu.params(&[word(rows)?, word(len)?, word(inner)?])?;
    let grid = gpu.grid_1d(rows)?;
    gpu.step(SOFTMAX.to_string(), "main", &[&params, input, out], grid)
        .map(Some)
}
