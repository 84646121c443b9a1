//! How each data type lives on the GPU, and the steps that convert between
//! a tensor's packed bytes and a graph's working representation.
//!
//! Tensors (and the input/output slots of a graph) hold the external byte
//! layout: float16 as packed halves, int8/uint8 four to a word, int4/uint4
//! eight to a word. Inside a compiled graph every operand is *widened* to
//! what kernels compute on, one 32-bit word per element (float16 as f32,
//! the small integers as i32/u32), so each kernel is written once per
//! compute type and needs no sub-word stores, which WGSL cannot do
//! without races. int64/uint64 keep their external layout, a pair of
//! words (low, high) per element, and only the kernels that know pairs
//! accept them.
//!
//! After an operator that computes a new value of a narrow type, a
//! fix-up step rounds float16 results to the nearest half (ties to even,
//! as the CPU backend does once per operator output) and wraps integer
//! results to the type's bits (two's complement, as the CPU backend's
//! wrapping arithmetic).

use super::{word, Gpu, Step};
use crate::error::{Error, Result};
use crate::f16::f16_to_f32;
use crate::types::DataType;

/// The WGSL type an element of `dt` is computed in: one word for every
/// type but int64/uint64 (a `vec2<u32>` of low and high words).
pub(crate) fn compute_type(dt: DataType) -> &'static str {
    match dt {
        DataType::Float32 | DataType::Float16 => "f32",
        DataType::Int32 | DataType::Int8 | DataType::Int4 => "i32",
        DataType::Uint32 | DataType::Uint8 | DataType::Uint4 => "u32",
        DataType::Int64 | DataType::Uint64 => "vec2<u32>",
    }
}

/// Words per element in a graph's working representation.
pub(crate) fn words(dt: DataType) -> u64 {
    match dt {
        DataType::Int64 | DataType::Uint64 => 2,
        _ => 1,
    }
}

/// Whether `dt` is widened inside graphs (its packed layout differs from
/// the working one).
pub(crate) fn widened(dt: DataType) -> bool {
    matches!(
        dt,
        DataType::Float16 | DataType::Int8 | DataType::Uint8 | DataType::Int4 | DataType::Uint4
    )
}

/// Elements of `dt` per packed 32-bit word (for widened types).
fn per_word(dt: DataType) -> u64 {
    match dt {
        DataType::Float16 => 2,
        DataType::Int8 | DataType::Uint8 => 4,
        _ => 8,
    }
}

/// A constant's bytes in the working representation.
pub(crate) fn widen_constant(dt: DataType, bytes: &[u8], n: usize) -> Result<Vec<u8>> {
    if !widened(dt) {
        return Ok(bytes.to_vec());
    }
    let buf = crate::tensor::Buf::from_bytes(dt, bytes, n)?;
    let mut out = Vec::with_capacity(n * 4);
    match &buf {
        crate::tensor::Buf::F16(v) => {
            for &h in v {
                out.extend_from_slice(&f16_to_f32(h).to_le_bytes());
            }
        }
        crate::tensor::Buf::I8(v) => {
            for &x in v {
                out.extend_from_slice(&i32::from(x).to_le_bytes());
            }
        }
        crate::tensor::Buf::U8(v) => {
            for &x in v {
                out.extend_from_slice(&u32::from(x).to_le_bytes());
            }
        }
        _ => return Err(Error::operation("unexpected constant representation")),
    }
    Ok(out)
}

const HEADER: &str = "@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<u32>;
";

/// WGSL conversions between f32 and float16 bits, written out because
/// WGSL leaves `pack2x16float`/`quantizeToF16` indeterminate beyond the
/// half range and does not fix their rounding: nearest, ties to even,
/// overflow to infinity, subnormal halves kept, NaN kept NaN.
pub(crate) const HALF: &str = "
fn half_bits(v: f32) -> u32 {
    let b = bitcast<u32>(v);
    let s = (b >> 16u) & 0x8000u;
    let a = b & 0x7fffffffu;
    if (a > 0x7f800000u) {
        return s | 0x7e00u | ((a >> 13u) & 0x3ffu);
    }
    if (a >= 0x477ff000u) {
        return s | 0x7c00u;
    }
    if (a >= 0x38800000u) {
        let r = a + 0xfffu + ((a >> 13u) & 1u);
        return s | ((r - 0x38000000u) >> 13u);
    }
    let e = a >> 23u;
    if (e < 102u) {
        return s;
    }
    let m = (a & 0x7fffffu) | 0x800000u;
    let shift = 126u - e;
    var q = m >> shift;
    let rem = m & ((1u << shift) - 1u);
    let half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u) == 1u)) {
        q += 1u;
    }
    return s | q;
}

fn half_value(h: u32) -> f32 {
    let s = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if (e == 0u) {
        let mag = f32(m) * 5.9604645e-8;
        return select(mag, -mag, s != 0u);
    }
    if (e == 31u) {
        return bitcast<f32>(s | 0x7f800000u | (m << 13u));
    }
    return bitcast<f32>(s | ((e + 112u) << 23u) | (m << 13u));
}
";

fn main_fn(body: &str) -> String {
    format!(
        "@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let i = gid.y * nwg.x * 256u + gid.x;
{body}
}}
"
    )
}

/// The step widening `n` packed elements of `dt` in `packed` into `wide`.
pub(crate) fn unpack(
    gpu: &mut Gpu,
    dt: DataType,
    n: u64,
    packed: &wgpu::Buffer,
    wide: &wgpu::Buffer,
) -> Result<Option<Step>> {
    if n == 0 || !widened(dt) {
        return Ok(None);
    }
    let (t, value) = match dt {
        DataType::Float16 => (
            "f32",
            "half_value((x[i / 2u] >> (16u * (i % 2u))) & 0xffffu)",
        ),
        DataType::Int8 => (
            "i32",
            "bitcast<i32>(x[i / 4u] << (24u - 8u * (i % 4u))) >> 24u",
        ),
        DataType::Uint8 => ("u32", "(x[i / 4u] >> (8u * (i % 4u))) & 0xffu"),
        DataType::Int4 => (
            "i32",
            "bitcast<i32>(x[i / 8u] << (28u - 4u * (i % 8u))) >> 28u",
        ),
        _ => ("u32", "(x[i / 8u] >> (4u * (i % 8u))) & 0xfu"),
    };
    let source = format!(
        "{HEADER}@group(0) @binding(2) var<storage, read_write> out: array<{t}>;
{HALF}
{}",
        main_fn(&format!(
            "    if (i >= p[0]) {{
        return;
    }}
    out[i] = {value};"
        ))
    );
    let params = gpu.params(&[word(n)?])?;
    let grid = gpu.grid_1d(n)?;
    gpu.step(source, "main", &[&params, packed, wide], grid)
        .map(Some)
}

/// The step packing `n` widened elements of `dt` in `wide` into `packed`:
/// one invocation per packed word, so no two write the same word.
pub(crate) fn pack(
    gpu: &mut Gpu,
    dt: DataType,
    n: u64,
    wide: &wgpu::Buffer,
    packed: &wgpu::Buffer,
) -> Result<Option<Step>> {
    if n == 0 || !widened(dt) {
        return Ok(None);
    }
    let k = per_word(dt);
    let (t, bits) = match dt {
        DataType::Float16 => ("f32", 16),
        DataType::Int8 => ("i32", 8),
        DataType::Uint8 => ("u32", 8),
        DataType::Int4 => ("i32", 4),
        _ => ("u32", 4),
    };
    let part = if dt == DataType::Float16 {
        "half_bits(v)".to_string()
    } else {
        format!("bitcast<u32>(v) & {}u", (1u32 << bits) - 1)
    };
    let source = format!(
        "@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<{t}>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;
{HALF}
{}",
        main_fn(&format!(
            "    let w = i;
    if (w * {k}u >= p[0]) {{
        return;
    }}
    var r = 0u;
    for (var j = 0u; j < {k}u; j++) {{
        let e = w * {k}u + j;
        if (e < p[0]) {{
            let v = x[e];
            r |= ({part}) << ({bits}u * j);
        }}
    }}
    out[w] = r;"
        ))
    );
    let params = gpu.params(&[word(n)?])?;
    let grid = gpu.grid_1d(n.div_ceil(k))?;
    gpu.step(source, "main", &[&params, wide, packed], grid)
        .map(Some)
}

/// The in-place step bringing `n` working elements of `dt` back into the
/// type's values (see the module comment); none for types that need none.
pub(crate) fn fix_up(
    gpu: &mut Gpu,
    dt: DataType,
    n: u64,
    buf: &wgpu::Buffer,
) -> Result<Option<Step>> {
    if n == 0 || !widened(dt) {
        return Ok(None);
    }
    let (t, expr) = match dt {
        DataType::Float16 => ("f32", "half_value(half_bits(v))"),
        DataType::Int8 => ("i32", "(v << 24u) >> 24u"),
        DataType::Uint8 => ("u32", "v & 0xffu"),
        DataType::Int4 => ("i32", "(v << 28u) >> 28u"),
        _ => ("u32", "v & 0xfu"),
    };
    let source = format!(
        "@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read_write> x: array<{t}>;
{HALF}
{}",
        main_fn(&format!(
            "    if (i >= p[0]) {{
        return;
    }}
    let v = x[i];
    x[i] = {expr};"
        ))
    );
    let params = gpu.params(&[word(n)?])?;
    let grid = gpu.grid_1d(n)?;
    gpu.step(source, "main", &[&params, buf], grid).map(Some)
}
