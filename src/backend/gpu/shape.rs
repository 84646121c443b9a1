//! Data movement and conversion: `transpose`, `slice`, `concat` (one
//! strided-copy kernel over 32-bit words, `shaders/copy.wgsl`), `cast`
//! between float32, int32 and uint32, and `softmax`.

use super::elementwise::coalesce;
use super::{wgsl_type, word, Gpu, Step};
use crate::error::{Error, Result};
use crate::types::{DataType, OperandDescriptor};

const COPY: &str = include_str!("shaders/copy.wgsl");
const SOFTMAX: &str = include_str!("shaders/softmax.wgsl");

/// Row-major element strides of `shape`.
fn strides(shape: &[usize]) -> Vec<u64> {
    let mut s = vec![1u64; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1] as u64;
    }
    s
}

/// Checks that the tensors of a copy hold 32-bit elements.
fn check_words(op: &str, dt: DataType) -> Result<()> {
    if wgsl_type(dt).is_none() {
        return Err(Error::not_supported(format!(
            "{op} on {} is not supported on the GPU backend yet",
            dt.name()
        )));
    }
    Ok(())
}

/// A step copying the walk over `shape` from `src` (offset `so`, strides
/// `ss`) to `dst` (offset `dof`, strides `ds`); none when it is empty.
#[allow(clippy::too_many_arguments)]
fn copy(
    gpu: &mut Gpu,
    shape: &[usize],
    so: u64,
    ss: &[u64],
    dof: u64,
    ds: &[u64],
    src: &wgpu::Buffer,
    dst: &wgpu::Buffer,
) -> Result<Option<Step>> {
    let n: u64 = shape.iter().map(|&d| d as u64).product();
    if n == 0 {
        return Ok(None);
    }
    let dims = coalesce(shape, ss, ds);
    let mut p = vec![word(n)?, dims.len() as u32, word(so)?, word(dof)?];
    for &(size, _, _) in &dims {
        p.push(word(size)?);
    }
    for &(_, s, _) in &dims {
        p.push(word(s)?);
    }
    for &(_, _, s) in &dims {
        p.push(word(s)?);
    }
    let params = gpu.params(&p)?;
    let grid = gpu.grid_1d(n)?;
    gpu.step(COPY.to_string(), "main", &[&params, src, dst], grid)
        .map(Some)
}

pub(super) fn transpose(
    gpu: &mut Gpu,
    permutation: &[usize],
    input: &wgpu::Buffer,
    in_desc: &OperandDescriptor,
    out: &wgpu::Buffer,
    out_desc: &OperandDescriptor,
) -> Result<Option<Step>> {
    check_words("transpose", out_desc.data_type)?;
    let is = strides(&in_desc.shape);
    let ss: Vec<u64> = permutation.iter().map(|&a| is[a]).collect();
    let ds = strides(&out_desc.shape);
    copy(gpu, &out_desc.shape, 0, &ss, 0, &ds, input, out)
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
    check_words("slice", out_desc.data_type)?;
    let is = strides(&in_desc.shape);
    let so: u64 = starts.iter().zip(&is).map(|(&s, &st)| s as u64 * st).sum();
    let ss: Vec<u64> = steps
        .iter()
        .zip(&is)
        .map(|(&k, &st)| k as u64 * st)
        .collect();
    let ds = strides(&out_desc.shape);
    copy(gpu, &out_desc.shape, so, &ss, 0, &ds, input, out)
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
    check_words("concat", out_desc.data_type)?;
    let ds = strides(&out_desc.shape);
    let mut steps = Vec::new();
    let mut at = 0u64;
    for (buf, d) in ins.iter().zip(in_descs) {
        let ss = strides(&d.shape);
        steps.extend(copy(gpu, &d.shape, 0, &ss, at * ds[axis], &ds, buf, out)?);
        at += d.shape[axis] as u64;
    }
    Ok(steps)
}

/// `cast` among float32, int32 and uint32. Floats truncate toward zero and
/// saturate out of range, NaN giving 0; integers keep their bits.
pub(super) fn cast(
    gpu: &mut Gpu,
    input: &wgpu::Buffer,
    in_desc: &OperandDescriptor,
    out: &wgpu::Buffer,
    out_desc: &OperandDescriptor,
) -> Result<Option<Step>> {
    use DataType::*;
    let (from, to) = (in_desc.data_type, out_desc.data_type);
    let expr = match (from, to) {
        _ if from == to => "v",
        (Float32, Int32) => {
            "select(select(select(i32(v), 2147483647, v >= 2147483648.0), \
             -2147483647 - 1, v < -2147483648.0), 0, (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u)"
        }
        (Float32, Uint32) => {
            "select(select(select(u32(v), 4294967295u, v >= 4294967296.0), 0u, v <= 0.0), \
             0u, (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u)"
        }
        (Int32 | Uint32, Float32) => "f32(v)",
        (Int32, Uint32) => "bitcast<u32>(v)",
        (Uint32, Int32) => "bitcast<i32>(v)",
        _ => {
            return Err(Error::not_supported(format!(
                "cast from {} to {} is not supported on the GPU backend yet",
                from.name(),
                to.name()
            )))
        }
    };
    let n = out_desc.element_count() as u64;
    if n == 0 {
        return Ok(None);
    }
    let (ti, to) = (
        wgsl_type(from).unwrap_or("u32"),
        wgsl_type(to).unwrap_or("u32"),
    );
    let source = format!(
        "@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<{ti}>;
@group(0) @binding(2) var<storage, read_write> out: array<{to}>;

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
    if out_desc.data_type != DataType::Float32 {
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
