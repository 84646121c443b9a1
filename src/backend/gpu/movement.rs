//! The movement family: expand, pad, reverse, split, tile, triangular, resample2d.
//!
//! expand and split are strided copies ([`shape::copy`]). tile, pad,
//! reverse and nearest-neighbour resample2d map each output coordinate of
//! each dimension to an input offset (or to the padding value)
//! independently of the other dimensions; the host builds one table per
//! dimension from the resolved parameters, exactly as the CPU kernels do,
//! and one kernel (`shaders/movement_remap.wgsl`) walks them. Everything
//! but resample2d moves whole elements (word pairs for int64/uint64), so it
//! takes every data type; resample2d is float only.

use super::shape::{self, strides};
use super::{broadcast_strides, convert, is_float, word, Gpu, NodeIo, Step};
use crate::error::{Error, Result};
use crate::graph::args::MlNumber;
use crate::graph::ops::movement::{MovementOp, PadMode};
use crate::types::{DataType, OperandDescriptor};

const REMAP: &str = include_str!("shaders/movement_remap.wgsl");
const TRIANGULAR: &str = include_str!("shaders/movement_triangular.wgsl");
const LINEAR: &str = include_str!("shaders/movement_linear.wgsl");

/// A table entry meaning "the padding value".
const FILL: u32 = u32::MAX;

/// The family's answer to [`super::supports`].
pub(super) fn supports(op: &str, _operand: &str, dt: DataType) -> bool {
    match op {
        "expand" | "pad" | "reverse" | "split" | "tile" | "triangular" => true,
        "resample2d" => is_float(dt) || matches!(dt, DataType::Int8 | DataType::Uint8),
        _ => false,
    }
}

/// The steps of one operator of the family.
pub(super) fn build(gpu: &mut Gpu, op: &MovementOp, io: &NodeIo) -> Result<Vec<Step>> {
    let (input, in_desc, out, out_desc) = io.first(op.name())?;
    let dt = in_desc.data_type;
    let in_shape = &in_desc.shape;
    let out_shape = &out_desc.shape;
    if !matches!(op, MovementOp::Expand | MovementOp::Split { .. })
        && in_shape.len() != out_shape.len()
    {
        return Err(Error::operation(format!(
            "{}: the output rank differs from the input rank",
            op.name()
        )));
    }
    let is = strides(in_shape);
    let one = |s: Option<Step>| s.into_iter().collect::<Vec<_>>();
    match op {
        MovementOp::Expand => {
            if out_shape.len() < in_shape.len() {
                return Err(Error::operation(
                    "expand: the output rank is below the input rank",
                ));
            }
            let ss = broadcast_strides(in_shape, out_shape);
            shape::copy_into(gpu, 0, &ss, input, out, out_desc).map(one)
        }
        MovementOp::Split { axis, sizes } => {
            let axis = *axis;
            if io.outs.len() != sizes.len()
                || io.out_descs.len() != sizes.len()
                || axis >= in_shape.len()
                || sizes.iter().sum::<usize>() != in_shape[axis]
            {
                return Err(Error::operation("split: inconsistent outputs"));
            }
            let mut steps = Vec::new();
            let mut start = 0u64;
            for ((&o, d), &size) in io.outs.iter().zip(io.out_descs).zip(sizes) {
                if d.shape.len() != in_shape.len() || d.shape[axis] != size {
                    return Err(Error::operation("split: inconsistent outputs"));
                }
                steps.extend(shape::copy_into(gpu, start * is[axis], &is, input, o, d)?);
                start += size as u64;
            }
            Ok(steps)
        }
        MovementOp::Reverse { axes } => {
            let tables = (0..in_shape.len())
                .map(|d| {
                    let (n, s) = (in_shape[d] as u64, is[d]);
                    if axes.contains(&d) {
                        (0..n).map(|o| Some((n - 1 - o) * s)).collect()
                    } else {
                        (0..n).map(|o| Some(o * s)).collect()
                    }
                })
                .collect::<Vec<_>>();
            remap(gpu, dt, &tables, [0, 0], input, out, out_desc).map(one)
        }
        MovementOp::Tile { repetitions } => {
            let tables = (0..in_shape.len())
                .map(|d| {
                    let (n, s) = (in_shape[d] as u64, is[d]);
                    (0..out_shape[d] as u64)
                        .map(|o| Some(o.checked_rem(n).unwrap_or(0) * s))
                        .collect()
                })
                .collect::<Vec<_>>();
            let expected: Vec<usize> = in_shape
                .iter()
                .enumerate()
                .map(|(d, &n)| n * repetitions.get(d).copied().unwrap_or(1))
                .collect();
            if &expected != out_shape {
                return Err(Error::operation("tile: inconsistent output shape"));
            }
            remap(gpu, dt, &tables, [0, 0], input, out, out_desc).map(one)
        }
        MovementOp::Pad {
            begin,
            end,
            mode,
            value,
        } => {
            let tables = pad_tables(in_shape, &is, begin, end, *mode);
            let fill = fill_words(dt, *value);
            remap(gpu, dt, &tables, fill, input, out, out_desc).map(one)
        }
        MovementOp::Triangular { upper, diagonal } => {
            triangular(gpu, dt, *upper, *diagonal, input, out, out_desc).map(one)
        }
        MovementOp::Resample2d { linear, axes } => {
            // int8/uint8 (#891) are computed as i32/u32 words.
            if !is_float(dt) && !matches!(dt, DataType::Int8 | DataType::Uint8) {
                return Err(Error::not_supported(format!(
                    "resample2d on {} is not supported on the GPU backend",
                    dt.name()
                )));
            }
            if axes.iter().any(|&a| a >= in_shape.len()) || axes[0] == axes[1] {
                return Err(Error::operation("resample2d: inconsistent axes"));
            }
            if *linear {
                resample_linear(gpu, dt, in_shape, &is, *axes, input, out, out_desc).map(one)
            } else {
                let tables = (0..in_shape.len())
                    .map(|d| {
                        let (n, m, s) = (in_shape[d], out_shape[d], is[d]);
                        if axes.contains(&d) {
                            (0..m).map(|o| Some(nearest(n, m, o) as u64 * s)).collect()
                        } else {
                            (0..m as u64).map(|o| Some(o * s)).collect()
                        }
                    })
                    .collect::<Vec<_>>();
                remap(gpu, dt, &tables, [0, 0], input, out, out_desc).map(one)
            }
        }
    }
}

/// Output coordinate `o` of a padded dimension of size `n` reads input
/// coordinate `o - begin`, mirrored or clamped into `[0, n)` outside it
/// (the CPU kernel's rule); `None` is the padding value.
fn pad_tables(
    shape: &[usize],
    st: &[u64],
    begin: &[usize],
    end: &[usize],
    mode: PadMode,
) -> Vec<Vec<Option<u64>>> {
    (0..shape.len())
        .map(|d| {
            let (n, s) = (shape[d], st[d]);
            let (p0, p1) = (
                begin.get(d).copied().unwrap_or(0),
                end.get(d).copied().unwrap_or(0),
            );
            (0..n + p0 + p1)
                .map(|o| mode.source(o, n, p0).map(|i| i as u64 * s))
                .collect()
        })
        .collect()
}

/// The (already cast) padding value in the working representation of
/// `dt`: f32 bits for floats, the two's complement low word (and the high
/// word for int64/uint64) for integers.
fn fill_words(dt: DataType, v: MlNumber) -> [u32; 2] {
    if is_float(dt) {
        return [(v.as_f64() as f32).to_bits(), 0];
    }
    let i = match v {
        MlNumber::BigInt(i) => i,
        MlNumber::Double(d) => d as i128,
    };
    let bits = i as u64;
    [bits as u32, (bits >> 32) as u32]
}

/// A step running the remap kernel over `tables` (one per output
/// dimension, an input element offset or `None` for the padding value per
/// output coordinate).
fn remap(
    gpu: &mut Gpu,
    dt: DataType,
    tables: &[Vec<Option<u64>>],
    fill: [u32; 2],
    input: &wgpu::Buffer,
    out: &wgpu::Buffer,
    out_desc: &OperandDescriptor,
) -> Result<Option<Step>> {
    let w = convert::words(dt);
    let total = out_desc.element_count() as u64;
    if total == 0 {
        return Ok(None);
    }
    if tables.len() != out_desc.shape.len()
        || tables
            .iter()
            .zip(&out_desc.shape)
            .any(|(t, &m)| t.len() != m)
    {
        return Err(Error::operation("inconsistent remap tables"));
    }
    word(total * w)?;
    let mut p = vec![
        word(total)?,
        tables.len() as u32,
        w as u32,
        fill[0],
        fill[1],
    ];
    for t in tables {
        p.push(word(t.len() as u64)?);
    }
    for t in tables {
        for e in t {
            p.push(match e {
                // An offset of FILL would need an input of 2^32 elements,
                // which `word` refuses.
                Some(off) => word(*off).and_then(|v| {
                    if v == FILL {
                        Err(Error::operation("the input is too large for GPU indexing"))
                    } else {
                        Ok(v)
                    }
                })?,
                None => FILL,
            });
        }
    }
    let params = gpu.params(&p)?;
    let grid = gpu.grid_1d(total)?;
    gpu.step(REMAP.to_string(), "main", &[&params, input, out], grid)
        .map(Some)
}

/// triangular over the last two dimensions of the output shape.
fn triangular(
    gpu: &mut Gpu,
    dt: DataType,
    upper: bool,
    diagonal: i64,
    input: &wgpu::Buffer,
    out: &wgpu::Buffer,
    out_desc: &OperandDescriptor,
) -> Result<Option<Step>> {
    let shape = &out_desc.shape;
    let r = shape.len();
    if r < 2 {
        return Err(Error::operation("triangular needs rank 2 or more"));
    }
    let total = out_desc.element_count() as u64;
    if total == 0 {
        return Ok(None);
    }
    let w = convert::words(dt);
    word(total * w)?;
    let (rows, cols) = (shape[r - 2] as u64, shape[r - 1] as u64);
    // column - row lies in [1 - rows, cols - 1]; a diagonal beyond
    // [-rows, cols] decides the same as those bounds, and they fit a word.
    let diag = diagonal.clamp(-(rows as i64), cols as i64);
    let p = [
        word(total)?,
        word(rows)?,
        word(cols)?,
        w as u32,
        u32::from(upper),
        u32::from(diag < 0),
        word(diag.unsigned_abs())?,
    ];
    let params = gpu.params(&p)?;
    let grid = gpu.grid_1d(total)?;
    gpu.step(TRIANGULAR.to_string(), "main", &[&params, input, out], grid)
        .map(Some)
}

/// The spec's half-pixel input coordinate of output coordinate `o` when a
/// dimension of size `n` is resampled to `m`, clamped to `[0, n - 1]` (as
/// the CPU kernel computes it, in f64).
fn source_coordinate(n: usize, m: usize, o: usize) -> f64 {
    let scale = m as f64 / n as f64;
    let c = (o as f64 + 0.5) / scale - 0.5;
    c.clamp(0.0, n.saturating_sub(1) as f64)
}

/// Nearest neighbour: `ceil(coordinate - 0.5)`, so halves round down.
fn nearest(n: usize, m: usize, o: usize) -> usize {
    let c = (source_coordinate(n, m, o) - 0.5).ceil().max(0.0) as usize;
    c.min(n.saturating_sub(1))
}

/// Bilinear resample2d: the host computes, per output coordinate of the
/// two axes, the neighbouring input offsets and the weight (in f64, as the
/// CPU does, rounded to f32 once); the kernel interpolates in f32.
#[allow(clippy::too_many_arguments)]
fn resample_linear(
    gpu: &mut Gpu,
    dt: DataType,
    in_shape: &[usize],
    is: &[u64],
    axes: [usize; 2],
    input: &wgpu::Buffer,
    out: &wgpu::Buffer,
    out_desc: &OperandDescriptor,
) -> Result<Option<Step>> {
    let out_shape = &out_desc.shape;
    let total = out_desc.element_count() as u64;
    if total == 0 || in_shape.contains(&0) {
        return Ok(None);
    }
    let mut p = vec![
        word(total)?,
        in_shape.len() as u32,
        axes[0] as u32,
        axes[1] as u32,
    ];
    for &m in out_shape {
        p.push(word(m as u64)?);
    }
    for d in 0..in_shape.len() {
        let (n, m, s) = (in_shape[d], out_shape[d], is[d]);
        for o in 0..m {
            let (lo, hi, t) = if axes.contains(&d) {
                let c = source_coordinate(n, m, o);
                let (lo, hi) = (c.floor(), c.ceil());
                (lo as u64 * s, hi as u64 * s, (c - lo) as f32)
            } else {
                (o as u64 * s, o as u64 * s, 0.0)
            };
            p.extend([word(lo)?, word(hi)?, t.to_bits()]);
        }
    }
    let params = gpu.params(&p)?;
    let grid = gpu.grid_1d(total)?;
    // Integer words (int8/uint8) interpolate in f32 and round to the
    // nearest, ties to even (WGSL round), as the CPU kernel does; the
    // weights sum to 1, so the result stays in the type's range.
    let source = match convert::compute_type(dt) {
        "f32" => LINEAR.to_string(),
        t => LINEAR
            .replace(
                "var<storage, read> src: array<f32>",
                &format!("var<storage, read> src: array<{t}>"),
            )
            .replace(
                "var<storage, read_write> dst: array<f32>",
                &format!("var<storage, read_write> dst: array<{t}>"),
            )
            .replace(
                "return src[min(off, arrayLength(&src) - 1u)];",
                "return f32(src[min(off, arrayLength(&src) - 1u)]);",
            )
            .replace(
                "dst[i] = v0 * (1.0 - ty) + v1 * ty;",
                &format!("dst[i] = {t}(round(v0 * (1.0 - ty) + v1 * ty));"),
            ),
    };
    gpu.step(source, "main", &[&params, input, out], grid)
        .map(Some)
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::graph::args::Val;
    use crate::types::DataType;

    #[test]
    fn expand_every_type() {
        let Some(mut be) = backend() else { return };
        for dt in DataType::ALL {
            check_vs_cpu(
                &mut be,
                "expand",
                &[dt],
                &[&[3, 1, 5]],
                &[list(&[2, 3, 4, 5].map(f64::from))],
                0.0,
            );
        }
        for (x, to) in [
            (&[][..], &[7usize, 300][..]),
            (&[1], &[1]),
            (&[1, 257], &[3, 257]),
            (&[4, 1], &[2, 4, 301]),
        ] {
            let shape: Vec<f64> = to.iter().map(|&v| v as f64).collect();
            for dt in [F, DataType::Int64] {
                check_vs_cpu(&mut be, "expand", &[dt], &[x], &[list(&shape)], 0.0);
            }
        }
    }

    #[test]
    fn pad_modes() {
        let Some(mut be) = backend() else { return };
        for mode in ["constant", "edge", "reflection"] {
            for dt in DataType::ALL {
                let value = match dt {
                    DataType::Uint8 | DataType::Uint4 | DataType::Uint32 | DataType::Uint64 => 3.0,
                    DataType::Float32 | DataType::Float16 => -2.5,
                    _ => -3.0,
                };
                let opts = dict(&[("mode", s(mode)), ("value", n(value))]);
                check_vs_cpu(
                    &mut be,
                    "pad",
                    &[dt],
                    &[&[3, 4, 5]],
                    &[list(&[1.0, 0.0, 2.0]), list(&[2.0, 3.0, 0.0]), opts],
                    0.0,
                );
            }
            check_vs_cpu(
                &mut be,
                "pad",
                &[F],
                &[&[1, 300]],
                &[
                    list(&[0.0, 17.0]),
                    list(&[0.0, 4.0]),
                    dict(&[("mode", s(mode))]),
                ],
                0.0,
            );
        }
        // A huge int64 padding value keeps both words.
        let opts = dict(&[("value", Val::BigInt(-(1i128 << 40) - 7))]);
        check_vs_cpu(
            &mut be,
            "pad",
            &[DataType::Int64],
            &[&[2, 3]],
            &[list(&[1.0, 1.0]), list(&[1.0, 2.0]), opts],
            0.0,
        );
    }

    #[test]
    fn reverse_tile_split() {
        let Some(mut be) = backend() else { return };
        for dt in DataType::ALL {
            for axes in [&[][..], &[0.0], &[1.0, 2.0], &[0.0, 1.0, 2.0]] {
                let opts = dict(&[("axes", list(axes))]);
                check_vs_cpu(&mut be, "reverse", &[dt], &[&[2, 3, 45]], &[opts], 0.0);
            }
            check_vs_cpu(&mut be, "reverse", &[dt], &[&[2, 1, 3]], &[], 0.0);
            check_vs_cpu(
                &mut be,
                "tile",
                &[dt],
                &[&[2, 1, 3]],
                &[list(&[2.0, 5.0, 1.0])],
                0.0,
            );
            check_vs_cpu(
                &mut be,
                "split",
                &[dt],
                &[&[4, 9, 3]],
                &[n(3.0), dict(&[("axis", n(1.0))])],
                0.0,
            );
            check_vs_cpu(
                &mut be,
                "split",
                &[dt],
                &[&[5, 2]],
                &[list(&[1.0, 3.0, 1.0])],
                0.0,
            );
        }
        check_vs_cpu(&mut be, "reverse", &[F], &[&[]], &[], 0.0);
        check_vs_cpu(&mut be, "tile", &[F], &[&[]], &[list(&[])], 0.0);
        check_vs_cpu(&mut be, "tile", &[F], &[&[300]], &[list(&[3.0])], 0.0);
        check_vs_cpu(
            &mut be,
            "split",
            &[F],
            &[&[1, 600]],
            &[list(&[257.0, 343.0]), dict(&[("axis", n(1.0))])],
            0.0,
        );
    }

    #[test]
    fn triangular_diagonals() {
        let Some(mut be) = backend() else { return };
        for upper in [true, false] {
            for diag in [
                0.0,
                1.0,
                -1.0,
                2.0,
                -3.0,
                100.0,
                -100.0,
                2147483647.0,
                -2147483648.0,
            ] {
                let opts = dict(&[("upper", Val::Bool(upper)), ("diagonal", n(diag))]);
                check_vs_cpu(&mut be, "triangular", &[F], &[&[2, 3, 4]], &[opts], 0.0);
            }
            for dt in DataType::ALL {
                let opts = dict(&[("upper", Val::Bool(upper)), ("diagonal", n(1.0))]);
                check_vs_cpu(
                    &mut be,
                    "triangular",
                    &[dt],
                    &[&[4, 3]],
                    std::slice::from_ref(&opts),
                    0.0,
                );
                check_vs_cpu(
                    &mut be,
                    "triangular",
                    &[dt],
                    &[&[3, 1, 17, 19]],
                    &[opts],
                    0.0,
                );
            }
        }
    }

    #[test]
    fn resample2d_modes() {
        let Some(mut be) = backend() else { return };
        for mode in ["nearest-neighbor", "linear"] {
            // int8 and uint8 since #891: linear rounds ties to even on
            // both backends, so they agree exactly.
            for dt in [F, DataType::Float16, DataType::Int8, DataType::Uint8] {
                for (shape, extra) in [
                    (&[1, 2, 5, 7][..], vec![("scales", list(&[2.0, 1.5]))]),
                    (&[2, 3, 4, 4], vec![("sizes", list(&[3.0, 9.0]))]),
                    (
                        &[1, 6, 7, 2],
                        vec![("sizes", list(&[2.0, 17.0])), ("axes", list(&[1.0, 2.0]))],
                    ),
                    (&[1, 1, 3, 3], vec![("scales", list(&[0.5, 0.7]))]),
                    (&[1, 1, 1, 1], vec![("sizes", list(&[19.0, 20.0]))]),
                ] {
                    let mut o = extra.clone();
                    o.push(("mode", s(mode)));
                    check_vs_cpu(&mut be, "resample2d", &[dt], &[shape], &[dict(&o)], 1e-5);
                }
            }
        }
    }
}
