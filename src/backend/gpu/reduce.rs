//! The reduce family (`reduceSum`, `reduceMean`, `reduceMax`, ...) over
//! any set of axes: one invocation per output element walks the reduced
//! elements. One generated WGSL source per (reduction, type).

use super::{is_float, is_word, wgsl_type, word, Gpu, NodeIo, Step};
use crate::error::{Error, Result};
use crate::graph::ops::reduce::{ReduceKind, ReduceOp};
use crate::types::{DataType, OperandDescriptor};

/// Row-major element strides of `shape`.
fn strides(shape: &[usize]) -> Vec<u64> {
    let mut s = vec![1u64; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1] as u64;
    }
    s
}

/// The reduction's loop and result: `(init, step on acc and v, result)`,
/// or None where the kind does not take `t`.
fn body(kind: ReduceKind, t: &str) -> Option<(String, String, String)> {
    use ReduceKind::*;
    let float = t == "f32";
    let zero = format!("{t}(0)");
    let (lowest, highest) = match t {
        "f32" => ("-inf()", "inf()"),
        "i32" => ("i32(-2147483647 - 1)", "2147483647"),
        _ => ("0u", "4294967295u"),
    };
    let plain = |init: &str, step: &str, result: &str| {
        Some((init.to_string(), step.to_string(), result.to_string()))
    };
    match kind {
        Sum => plain(&zero, "acc + v", "acc"),
        L1 => plain(&zero, "acc + abs(v)", "acc"),
        SumSquare => plain(&zero, "acc + v * v", "acc"),
        Product => plain(&format!("{t}(1)"), "acc * v", "acc"),
        Mean if float => plain("0.0", "acc + v", "acc / f32(p[3])"),
        L2 if float => plain("0.0", "acc + v * v", "sqrt(acc)"),
        LogSum if float => plain("0.0", "acc + v", "log(acc)"),
        // NaN propagates through the flag `nan`.
        Max if float => plain(lowest, "max(acc, v)", "select(acc, nanv(), nan)"),
        Min if float => plain(highest, "min(acc, v)", "select(acc, nanv(), nan)"),
        Max => plain(lowest, "max(acc, v)", "acc"),
        Min => plain(highest, "min(acc, v)", "acc"),
        LogSumExp if float => plain(
            "0.0",
            "acc + exp(v - m)",
            "select(select(m, m + log(acc), abs(m) <= 3.4028235e38), nanv(), nan)",
        ),
        _ => None,
    }
}

/// The family's answer to [`super::supports`].
pub(super) fn supports(op: &str, _operand: &str, dt: DataType) -> bool {
    match op {
        "reduceSum" | "reduceL1" | "reduceSumSquare" | "reduceProduct" | "reduceMax"
        | "reduceMin" => is_word(dt),
        "reduceMean" | "reduceL2" | "reduceLogSum" | "reduceLogSumExp" => is_float(dt),
        _ => false,
    }
}

/// argMin/argMax and cumulativeSum.
pub(super) fn other(gpu: &mut Gpu, op: &ReduceOp, io: &NodeIo) -> Result<Vec<Step>> {
    let _ = (gpu, io);
    Err(Error::not_supported(format!(
        "{} is not supported on the GPU backend yet",
        op.name()
    )))
}

pub(super) fn reduce(
    gpu: &mut Gpu,
    kind: ReduceKind,
    axes: &[usize],
    input: &wgpu::Buffer,
    in_desc: &OperandDescriptor,
    out: &wgpu::Buffer,
    out_desc: &OperandDescriptor,
) -> Result<Option<Step>> {
    let dt = in_desc.data_type;
    let refuse = || {
        Error::not_supported(format!(
            "{} on {} is not supported on the GPU backend yet",
            kind.name(),
            dt.name()
        ))
    };
    let t = wgsl_type(dt).ok_or_else(refuse)?;
    let (init, step, result) = body(kind, t).ok_or_else(refuse)?;
    let n = out_desc.element_count() as u64;
    if n == 0 {
        return Ok(None);
    }
    word(in_desc.element_count() as u64)?;
    let shape = &in_desc.shape;
    let st = strides(shape);
    let kept: Vec<usize> = (0..shape.len()).filter(|d| !axes.contains(d)).collect();
    let count: u64 = axes.iter().map(|&d| shape[d] as u64).product();
    let mut p = vec![word(n)?, kept.len() as u32, axes.len() as u32, word(count)?];
    for &d in &kept {
        p.push(word(shape[d] as u64)?);
    }
    for &d in &kept {
        p.push(word(st[d])?);
    }
    for &d in axes {
        p.push(word(shape[d] as u64)?);
    }
    for &d in axes {
        p.push(word(st[d])?);
    }
    let float = t == "f32";
    let nan_check = if float {
        "        nan = nan || (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;\n"
    } else {
        ""
    };
    // logSumExp first finds the maximum m.
    let max_pass = if kind == ReduceKind::LogSumExp {
        format!(
            "    for (var j = 0u; j < p[3]; j++) {{
        let v = elem(base, j);
{nan_check}        m = max(m, v);
    }}
"
        )
    } else {
        String::new()
    };
    let source = format!(
        "@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<{t}>;
@group(0) @binding(2) var<storage, read_write> out: array<{t}>;

// Non-finite values read through the parameters, so that no constant
// folding sees them.
fn inf() -> f32 {{
    return bitcast<f32>(p[0] * 0u + 0x7f800000u);
}}

fn nanv() -> f32 {{
    return bitcast<f32>(p[0] * 0u + 0x7fc00000u);
}}

// The j-th reduced element of the output element whose first input
// element is at base.
fn elem(base: u32, j: u32) -> {t} {{
    let rr = p[2];
    let o = 4u + 2u * p[1];
    var r = j;
    var idx = base;
    for (var d = rr; d > 0u; d--) {{
        let k = d - 1u;
        let dim = p[o + k];
        idx += (r % dim) * p[o + rr + k];
        r = r / dim;
    }}
    return x[idx];
}}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let i = gid.y * nwg.x * 256u + gid.x;
    if (i >= p[0]) {{
        return;
    }}
    let rk = p[1];
    var rem = i;
    var base = 0u;
    for (var d = rk; d > 0u; d--) {{
        let k = d - 1u;
        let dim = p[4u + k];
        base += (rem % dim) * p[4u + rk + k];
        rem = rem / dim;
    }}
    var nan = false;
    var m = -inf();
{max_pass}    var acc: {t} = {init};
    for (var j = 0u; j < p[3]; j++) {{
        let v = elem(base, j);
{nan_check}        acc = {step};
    }}
    out[i] = {result};
}}
"
    );
    let params = gpu.params(&p)?;
    let grid = gpu.grid_1d(n)?;
    gpu.step(source, "main", &[&params, input, out], grid)
        .map(Some)
}
