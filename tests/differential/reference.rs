//! The reference: each operator written plainly from the spec's
//! definitions, computed in f64 and rounded once to the output's data
//! type (float16 to nearest even), so that its only error is that final
//! rounding. Loops over coordinates, no blocking, no fusion.

use webnn_node::types::DataType;

use super::f16;
use super::model::{Conv, Op, Pool, Tensor};

/// `x` as the nearest value of float type `dt`; integers pass as they are
/// (each operator makes sure they are whole and in range).
pub fn fit(dt: DataType, x: f64) -> f64 {
    match dt {
        DataType::Float32 => x as f32 as f64,
        DataType::Float16 => f16::round(x),
        _ => x,
    }
}

/// Lowest `bits` bits of `x` (a whole number), read as two's complement
/// when `signed`: the cast table's rule for integers out of range.
pub fn wrap(x: f64, bits: u32, signed: bool) -> f64 {
    let i = x as i128;
    let m = 1i128 << bits;
    let low = i.rem_euclid(m);
    let v = if signed && low >= m / 2 { low - m } else { low };
    v as f64
}

fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

fn coords(shape: &[usize], mut i: usize) -> Vec<usize> {
    let mut c = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        c[d] = i % shape[d].max(1);
        i /= shape[d].max(1);
    }
    c
}

/// numpy broadcasting of two shapes (the generator only draws ones that
/// broadcast).
pub fn broadcast(a: &[usize], b: &[usize]) -> Vec<usize> {
    let r = a.len().max(b.len());
    (0..r)
        .map(|i| {
            let da = if i + a.len() >= r {
                a[i + a.len() - r]
            } else {
                1
            };
            let db = if i + b.len() >= r {
                b[i + b.len() - r]
            } else {
                1
            };
            if da == 1 {
                db
            } else {
                da
            }
        })
        .collect()
}

/// The index into a tensor of `shape` for output coordinates `c` (which
/// has at least its rank) under broadcasting.
fn bindex(shape: &[usize], c: &[usize]) -> usize {
    let off = c.len() - shape.len();
    let mut idx = 0;
    for (d, &n) in shape.iter().enumerate() {
        idx = idx * n + if n == 1 { 0 } else { c[off + d] };
    }
    idx
}

fn as_int(x: f64) -> i128 {
    x as i128
}

fn int_range(dt: DataType) -> (f64, f64) {
    match dt {
        DataType::Int8 => (-128.0, 127.0),
        DataType::Uint8 => (0.0, 255.0),
        DataType::Int4 => (-8.0, 7.0),
        DataType::Uint4 => (0.0, 15.0),
        DataType::Int32 => (i32::MIN as f64, i32::MAX as f64),
        DataType::Uint32 => (0.0, u32::MAX as f64),
        DataType::Int64 => (i64::MIN as f64, i64::MAX as f64),
        DataType::Uint64 => (0.0, u64::MAX as f64),
        _ => (f64::NEG_INFINITY, f64::INFINITY),
    }
}

fn binary(kind: &str, dt: DataType, x: f64, y: f64) -> f64 {
    if dt.is_float() {
        let r = match kind {
            "add" => x + y,
            "sub" => x - y,
            "mul" => x * y,
            "div" => x / y,
            "max" | "min" if x.is_nan() || y.is_nan() => f64::NAN,
            "max" => x.max(y),
            "min" => x.min(y),
            "pow" => x.powf(y),
            _ => unreachable!("{kind}"),
        };
        return fit(dt, r);
    }
    let (a, b) = (as_int(x), as_int(y));
    let r = match kind {
        "add" => a + b,
        "sub" => a - b,
        "mul" => a * b,
        // Truncates toward zero, as the spec asks of integer division.
        "div" => a / b,
        "max" => a.max(b),
        "min" => a.min(b),
        "pow" => a.pow(b as u32),
        _ => unreachable!("{kind}"),
    };
    r as f64
}

fn logical(kind: &str, x: f64, y: f64) -> f64 {
    let r = match kind {
        "equal" => x == y,
        "notEqual" => x != y,
        "greater" => x > y,
        "greaterOrEqual" => x >= y,
        "lesser" => x < y,
        "lesserOrEqual" => x <= y,
        "logicalAnd" => x != 0.0 && y != 0.0,
        "logicalOr" => x != 0.0 || y != 0.0,
        "logicalXor" => (x != 0.0) != (y != 0.0),
        _ => unreachable!("{kind}"),
    };
    f64::from(u8::from(r))
}

/// erf by its Maclaurin series near zero and its continued fraction
/// (Lentz) beyond, both far more accurate than any tolerance used here.
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    let r = if a < 2.5 {
        // erf(x) = 2/sqrt(pi) * sum (-1)^n x^(2n+1) / (n! (2n+1))
        let mut term = a;
        let mut sum = a;
        let mut n = 0.0;
        while term.abs() > 1e-17 * sum.abs() {
            n += 1.0;
            term *= -a * a / n;
            sum += term / (2.0 * n + 1.0);
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else if a < 27.0 {
        // erfc(x) = exp(-x^2)/sqrt(pi) * 1/(x + 1/2/(x + 1/(x + 3/2/(x + ...))))
        let mut f = a;
        let (mut c, mut d) = (a, 0.0);
        for k in 1..200 {
            let ak = k as f64 / 2.0;
            d = a + ak * d;
            d = 1.0 / d;
            c = a + ak / c;
            f *= c * d;
        }
        1.0 - (-a * a).exp() / std::f64::consts::PI.sqrt() / f
    } else {
        1.0
    };
    r.copysign(x)
}

fn unary(kind: &str, dt: DataType, x: f64) -> f64 {
    let r = match kind {
        "abs" => x.abs(),
        "neg" => -x,
        "ceil" => x.ceil(),
        "floor" => x.floor(),
        "roundEven" => x.round_ties_even(),
        "relu" if x.is_nan() => x,
        "relu" => x.max(0.0),
        "sigmoid" => 1.0 / (1.0 + (-x).exp()),
        "tanh" => x.tanh(),
        "exp" => x.exp(),
        "log" => x.ln(),
        "sqrt" => x.sqrt(),
        "reciprocal" => 1.0 / x,
        "sign" if x > 0.0 => 1.0,
        "sign" if x < 0.0 => -1.0,
        // "0 otherwise": zeros and NaN.
        "sign" => 0.0,
        "identity" => x,
        "erf" => erf(x),
        "sin" => x.sin(),
        "cos" => x.cos(),
        _ => unreachable!("{kind}"),
    };
    fit(dt, r)
}

fn cast(x: f64, from: DataType, to: DataType) -> f64 {
    if to.is_float() {
        return fit(to, x);
    }
    if from.is_float() {
        // In range (the generator's values): truncated.
        return x.trunc();
    }
    let signed = matches!(
        to,
        DataType::Int8 | DataType::Int32 | DataType::Int64 | DataType::Int4
    );
    wrap(x, to.bits() as u32, signed)
}

fn map(t: &Tensor, dt: DataType, f: impl Fn(f64) -> f64) -> Tensor {
    Tensor::new(dt, t.shape.clone(), t.v.iter().map(|&x| f(x)).collect())
}

fn zip(a: &Tensor, b: &Tensor, dt: DataType, f: impl Fn(f64, f64) -> f64) -> Tensor {
    let shape = broadcast(&a.shape, &b.shape);
    let n: usize = shape.iter().product();
    let v = (0..n)
        .map(|i| {
            let c = coords(&shape, i);
            f(a.v[bindex(&a.shape, &c)], b.v[bindex(&b.shape, &c)])
        })
        .collect();
    Tensor::new(dt, shape, v)
}

/// Visits every element of `shape`, grouped by the coordinates outside
/// `axes`: `f(out_index, members)` for each output position, the members
/// being the input indices that share it.
fn groups(shape: &[usize], axes: &[usize], mut f: impl FnMut(usize, &[usize])) {
    let kept: Vec<usize> = (0..shape.len()).filter(|d| !axes.contains(d)).collect();
    let out_shape: Vec<usize> = kept.iter().map(|&d| shape[d]).collect();
    let red_shape: Vec<usize> = axes.iter().map(|&d| shape[d]).collect();
    let st = strides(shape);
    let n_out: usize = out_shape.iter().product();
    let n_red: usize = red_shape.iter().product();
    let mut members = Vec::with_capacity(n_red);
    for o in 0..n_out {
        let oc = coords(&out_shape, o);
        let base: usize = kept.iter().zip(&oc).map(|(&d, &c)| c * st[d]).sum();
        members.clear();
        for r in 0..n_red {
            let rc = coords(&red_shape, r);
            members.push(
                base + axes
                    .iter()
                    .zip(&rc)
                    .map(|(&d, &c)| c * st[d])
                    .sum::<usize>(),
            );
        }
        f(o, &members);
    }
}

fn reduce(kind: &str, t: &Tensor, axes: &[usize], keep: bool) -> Tensor {
    let dt = t.dt;
    let shape: Vec<usize> = (0..t.shape.len())
        .filter_map(|d| {
            if axes.contains(&d) {
                keep.then_some(1)
            } else {
                Some(t.shape[d])
            }
        })
        .collect();
    let mut v = vec![0.0; shape.iter().product()];
    groups(&t.shape, axes, |o, m| {
        let x = m.iter().map(|&i| t.v[i]);
        let n = m.len() as f64;
        let r = match kind {
            "reduceSum" => x.sum(),
            "reduceMean" => x.sum::<f64>() / n,
            "reduceMax" => x.fold(f64::NEG_INFINITY, |a, b| {
                if b.is_nan() || a.is_nan() {
                    f64::NAN
                } else {
                    a.max(b)
                }
            }),
            "reduceMin" => x.fold(f64::INFINITY, |a, b| {
                if b.is_nan() || a.is_nan() {
                    f64::NAN
                } else {
                    a.min(b)
                }
            }),
            "reduceProduct" => x.product(),
            "reduceL1" => x.map(f64::abs).sum(),
            "reduceL2" => x.map(|a| a * a).sum::<f64>().sqrt(),
            "reduceLogSum" => x.sum::<f64>().ln(),
            "reduceLogSumExp" => x.map(f64::exp).sum::<f64>().ln(),
            "reduceSumSquare" => x.map(|a| a * a).sum(),
            _ => unreachable!("{kind}"),
        };
        v[o] = fit(dt, r);
    });
    Tensor::new(dt, shape, v)
}

fn softmax(t: &Tensor, axis: usize) -> Tensor {
    let mut v = t.v.clone();
    groups(&t.shape, &[axis], |_, m| {
        let max = m.iter().map(|&i| t.v[i]).fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = m.iter().map(|&i| (t.v[i] - max).exp()).sum();
        for &i in m {
            v[i] = fit(t.dt, (t.v[i] - max).exp() / sum);
        }
    });
    Tensor::new(t.dt, t.shape.clone(), v)
}

fn transpose(t: &Tensor, perm: &[usize]) -> Tensor {
    let shape: Vec<usize> = perm.iter().map(|&p| t.shape[p]).collect();
    let st = strides(&t.shape);
    let v = (0..t.len())
        .map(|i| {
            let c = coords(&shape, i);
            t.v[perm.iter().zip(&c).map(|(&p, &x)| x * st[p]).sum::<usize>()]
        })
        .collect();
    Tensor::new(t.dt, shape, v)
}

fn concat(ts: &[&Tensor], axis: usize) -> Tensor {
    let mut shape = ts[0].shape.clone();
    shape[axis] = ts.iter().map(|t| t.shape[axis]).sum();
    let n: usize = shape.iter().product();
    let v = (0..n)
        .map(|i| {
            let mut c = coords(&shape, i);
            let mut k = 0;
            while c[axis] >= ts[k].shape[axis] {
                c[axis] -= ts[k].shape[axis];
                k += 1;
            }
            let st = strides(&ts[k].shape);
            ts[k].v[c.iter().zip(&st).map(|(a, b)| a * b).sum::<usize>()]
        })
        .collect();
    Tensor::new(ts[0].dt, shape, v)
}

fn slice(t: &Tensor, starts: &[usize], sizes: &[usize], steps: &[usize]) -> Tensor {
    let shape: Vec<usize> = sizes
        .iter()
        .zip(steps)
        .map(|(&s, &st)| s.div_ceil(st))
        .collect();
    let ist = strides(&t.shape);
    let n: usize = shape.iter().product();
    let v = (0..n)
        .map(|i| {
            let c = coords(&shape, i);
            let idx: usize = (0..c.len())
                .map(|d| (starts[d] + c[d] * steps[d]) * ist[d])
                .sum();
            t.v[idx]
        })
        .collect();
    Tensor::new(t.dt, shape, v)
}

/// Reads an NCHW or NHWC tensor as (n, c, h, w).
fn nchw(nhwc: bool, shape: &[usize]) -> [usize; 4] {
    if nhwc {
        [shape[0], shape[3], shape[1], shape[2]]
    } else {
        [shape[0], shape[1], shape[2], shape[3]]
    }
}

fn at4(t: &Tensor, nhwc: bool, n: usize, c: usize, y: usize, x: usize) -> f64 {
    let s = &t.shape;
    if nhwc {
        t.v[((n * s[1] + y) * s[2] + x) * s[3] + c]
    } else {
        t.v[((n * s[1] + c) * s[2] + y) * s[3] + x]
    }
}

fn out4(nhwc: bool, n: usize, c: usize, h: usize, w: usize) -> Vec<usize> {
    if nhwc {
        vec![n, h, w, c]
    } else {
        vec![n, c, h, w]
    }
}

fn index4(shape: &[usize], nhwc: bool, n: usize, c: usize, y: usize, x: usize) -> usize {
    if nhwc {
        ((n * shape[1] + y) * shape[2] + x) * shape[3] + c
    } else {
        ((n * shape[1] + c) * shape[2] + y) * shape[3] + x
    }
}

/// A filter element by (o, i, ky, kx) in any of the layouts, given the
/// layout's own shape.
fn filt(f: &Tensor, layout: &str, o: usize, i: usize, ky: usize, kx: usize) -> f64 {
    let s = &f.shape;
    let idx = match layout {
        // conv2d's layouts name (output, input); convTranspose2d's
        // (input, output): the caller passes them in that naming.
        "oihw" => ((o * s[1] + i) * s[2] + ky) * s[3] + kx,
        "hwio" => ((ky * s[1] + kx) * s[2] + i) * s[3] + o,
        "ohwi" => ((o * s[1] + ky) * s[2] + kx) * s[3] + i,
        "ihwo" => ((i * s[1] + ky) * s[2] + kx) * s[3] + o,
        "iohw" => ((i * s[1] + o) * s[2] + ky) * s[3] + kx,
        "hwoi" => ((ky * s[1] + kx) * s[2] + o) * s[3] + i,
        _ => unreachable!("{layout}"),
    };
    f.v[idx]
}

/// (filter output channels, filter input channels, kh, kw) of a filter.
pub fn filter_dims(layout: &str, s: &[usize]) -> [usize; 4] {
    match layout {
        "oihw" => [s[0], s[1], s[2], s[3]],
        "hwio" => [s[3], s[2], s[0], s[1]],
        "ohwi" => [s[0], s[3], s[1], s[2]],
        "ihwo" => [s[3], s[0], s[1], s[2]],
        "iohw" => [s[1], s[0], s[2], s[3]],
        "hwoi" => [s[2], s[3], s[0], s[1]],
        _ => unreachable!("{layout}"),
    }
}

pub fn conv_out(i: usize, k: usize, pb: usize, pe: usize, s: usize, d: usize) -> Option<usize> {
    let span = (k - 1) * d + 1;
    (i + pb + pe).checked_sub(span).map(|r| r / s + 1)
}

fn conv2d(x: &Tensor, f: &Tensor, bias: Option<&Tensor>, c: &Conv) -> Tensor {
    let [n, ic, ih, iw] = nchw(c.nhwc, &x.shape);
    let [oc, icg, kh, kw] = filter_dims(c.filter_layout, &f.shape);
    let oh = conv_out(ih, kh, c.pad[0], c.pad[1], c.strides[0], c.dil[0]).unwrap();
    let ow = conv_out(iw, kw, c.pad[2], c.pad[3], c.strides[1], c.dil[1]).unwrap();
    let ocg = oc / c.groups;
    debug_assert_eq!(icg * c.groups, ic);
    let shape = out4(c.nhwc, n, oc, oh, ow);
    let mut v = vec![0.0; shape.iter().product()];
    for b in 0..n {
        for o in 0..oc {
            let g = o / ocg;
            for y in 0..oh {
                for xx in 0..ow {
                    let mut sum = bias.map_or(0.0, |t| t.v[o]);
                    for i in 0..icg {
                        for ky in 0..kh {
                            let iy =
                                (y * c.strides[0] + ky * c.dil[0]) as isize - c.pad[0] as isize;
                            for kx in 0..kw {
                                let ix = (xx * c.strides[1] + kx * c.dil[1]) as isize
                                    - c.pad[2] as isize;
                                // Padding is rows and columns of zeros added
                                // to the input: they meet the filter like any
                                // other value (a NaN weight makes NaN there).
                                let inside =
                                    iy >= 0 && iy < ih as isize && ix >= 0 && ix < iw as isize;
                                let xv = if inside {
                                    at4(x, c.nhwc, b, g * icg + i, iy as usize, ix as usize)
                                } else {
                                    0.0
                                };
                                sum += xv * filt(f, c.filter_layout, o, i, ky, kx);
                            }
                        }
                    }
                    v[index4(&shape, c.nhwc, b, o, y, xx)] = fit(x.dt, sum);
                }
            }
        }
    }
    Tensor::new(x.dt, shape, v)
}

/// convTranspose2d's output size before `outputSizes`.
pub fn conv_t_out(
    i: usize,
    k: usize,
    pb: usize,
    pe: usize,
    s: usize,
    d: usize,
    op: usize,
) -> Option<usize> {
    ((i - 1) * s + (k - 1) * d + 1 + op).checked_sub(pb + pe)
}

fn conv_transpose2d(x: &Tensor, f: &Tensor, bias: Option<&Tensor>, c: &Conv) -> Tensor {
    let [n, ic, ih, iw] = nchw(c.nhwc, &x.shape);
    // filter_dims names (output, input) in the filter's own terms.
    let [ocg, icf, kh, kw] = filter_dims(c.filter_layout, &f.shape);
    debug_assert_eq!(icf, ic);
    let (oh, ow) = match c.out_sizes {
        Some([h, w]) => (h, w),
        None => (
            conv_t_out(
                ih,
                kh,
                c.pad[0],
                c.pad[1],
                c.strides[0],
                c.dil[0],
                c.out_pad[0],
            )
            .unwrap(),
            conv_t_out(
                iw,
                kw,
                c.pad[2],
                c.pad[3],
                c.strides[1],
                c.dil[1],
                c.out_pad[1],
            )
            .unwrap(),
        ),
    };
    let oc = ocg * c.groups;
    let icg = ic / c.groups;
    let shape = out4(c.nhwc, n, oc, oh, ow);
    let mut acc = vec![0.0; shape.iter().product()];
    for b in 0..n {
        for o in 0..oc {
            for y in 0..oh {
                for xx in 0..ow {
                    acc[index4(&shape, c.nhwc, b, o, y, xx)] = bias.map_or(0.0, |t| t.v[o]);
                }
            }
        }
        for i in 0..ic {
            let g = i / icg;
            for iy in 0..ih {
                for ix in 0..iw {
                    let xv = at4(x, c.nhwc, b, i, iy, ix);
                    for og in 0..ocg {
                        let o = g * ocg + og;
                        for ky in 0..kh {
                            let y =
                                (iy * c.strides[0] + ky * c.dil[0]) as isize - c.pad[0] as isize;
                            if y < 0 || y >= oh as isize {
                                continue;
                            }
                            for kx in 0..kw {
                                let xo = (ix * c.strides[1] + kx * c.dil[1]) as isize
                                    - c.pad[2] as isize;
                                if xo < 0 || xo >= ow as isize {
                                    continue;
                                }
                                acc[index4(&shape, c.nhwc, b, o, y as usize, xo as usize)] +=
                                    xv * filt(f, c.filter_layout, og, i, ky, kx);
                            }
                        }
                    }
                }
            }
        }
    }
    Tensor::new(x.dt, shape, acc.into_iter().map(|s| fit(x.dt, s)).collect())
}

fn matmul(a: &Tensor, b: &Tensor) -> Tensor {
    let (ra, rb) = (a.shape.len(), b.shape.len());
    let (m, k, n) = (a.shape[ra - 2], a.shape[ra - 1], b.shape[rb - 1]);
    let batch = broadcast(&a.shape[..ra - 2], &b.shape[..rb - 2]);
    let nb: usize = batch.iter().product();
    let mut shape = batch.clone();
    shape.extend([m, n]);
    let mut v = vec![0.0; nb * m * n];
    let a_batch = &a.shape[..ra - 2];
    let b_batch = &b.shape[..rb - 2];
    for bi in 0..nb {
        let c = coords(&batch, bi);
        let ao = bindex(a_batch, &c) * m * k;
        let bo = bindex(b_batch, &c) * k * n;
        for i in 0..m {
            for j in 0..n {
                let s: f64 = (0..k)
                    .map(|p| a.v[ao + i * k + p] * b.v[bo + p * n + j])
                    .sum();
                v[bi * m * n + i * n + j] = fit(a.dt, s);
            }
        }
    }
    Tensor::new(a.dt, shape, v)
}

fn gemm(a: &Tensor, b: &Tensor, c: Option<&Tensor>, op: &Op) -> Tensor {
    let Op::Gemm {
        alpha,
        beta,
        at,
        bt,
        ..
    } = op
    else {
        unreachable!()
    };
    let (alpha, beta) = (alpha.unwrap_or(1.0), beta.unwrap_or(1.0));
    let (m, k) = if *at {
        (a.shape[1], a.shape[0])
    } else {
        (a.shape[0], a.shape[1])
    };
    let n = if *bt { b.shape[0] } else { b.shape[1] };
    let ga = |i: usize, p: usize| if *at { a.v[p * m + i] } else { a.v[i * k + p] };
    let gb = |p: usize, j: usize| if *bt { b.v[j * k + p] } else { b.v[p * n + j] };
    let shape = vec![m, n];
    let mut v = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let s: f64 = (0..k).map(|p| ga(i, p) * gb(p, j)).sum();
            let cv = c.map_or(0.0, |t| t.v[bindex(&t.shape, &[i, j])]);
            v[i * n + j] = fit(a.dt, alpha * s + if c.is_some() { beta * cv } else { 0.0 });
        }
    }
    Tensor::new(a.dt, shape, v)
}

pub fn pool_out(i: usize, k: usize, pb: usize, pe: usize, s: usize, d: usize, ceil: bool) -> usize {
    let span = (k - 1) * d + 1;
    let r = i + pb + pe - span;
    if ceil {
        r.div_ceil(s) + 1
    } else {
        r / s + 1
    }
}

fn pool(x: &Tensor, p: &Pool) -> Tensor {
    let [n, ch, ih, iw] = nchw(p.nhwc, &x.shape);
    let [kh, kw] = p.window.unwrap_or([ih, iw]);
    let oh = pool_out(ih, kh, p.pad[0], p.pad[1], p.strides[0], p.dil[0], p.ceil);
    let ow = pool_out(iw, kw, p.pad[2], p.pad[3], p.strides[1], p.dil[1], p.ceil);
    let shape = out4(p.nhwc, n, ch, oh, ow);
    let mut v = vec![0.0; shape.iter().product()];
    for b in 0..n {
        for c in 0..ch {
            for y in 0..oh {
                for xx in 0..ow {
                    // The window's elements that lie in the input (padding
                    // contributes nothing, and does not count in the mean).
                    let mut vals = Vec::new();
                    for ky in 0..kh {
                        let iy = (y * p.strides[0] + ky * p.dil[0]) as isize - p.pad[0] as isize;
                        if iy < 0 || iy >= ih as isize {
                            continue;
                        }
                        for kx in 0..kw {
                            let ix =
                                (xx * p.strides[1] + kx * p.dil[1]) as isize - p.pad[2] as isize;
                            if ix < 0 || ix >= iw as isize {
                                continue;
                            }
                            vals.push(at4(x, p.nhwc, b, c, iy as usize, ix as usize));
                        }
                    }
                    let r = match p.kind {
                        "averagePool2d" => vals.iter().sum::<f64>() / vals.len() as f64,
                        "l2Pool2d" => vals.iter().map(|a| a * a).sum::<f64>().sqrt(),
                        "maxPool2d" => vals.iter().fold(f64::NEG_INFINITY, |a, &b| {
                            if a.is_nan() || b.is_nan() {
                                f64::NAN
                            } else {
                                a.max(b)
                            }
                        }),
                        k => unreachable!("{k}"),
                    };
                    v[index4(&shape, p.nhwc, b, c, y, xx)] = fit(x.dt, r);
                }
            }
        }
    }
    Tensor::new(x.dt, shape, v)
}

fn batch_norm(ins: &[&Tensor], axis: usize, eps: f64, scale: bool, bias: bool) -> Tensor {
    let (x, mean, var) = (ins[0], ins[1], ins[2]);
    let s = scale.then(|| ins[3]);
    let b = bias.then(|| ins[3 + usize::from(scale)]);
    let st = strides(&x.shape);
    let v = (0..x.len())
        .map(|i| {
            let c = (i / st[axis]) % x.shape[axis];
            let mut r = (x.v[i] - mean.v[c]) / (var.v[c] + eps).sqrt();
            if let Some(s) = s {
                r *= s.v[c];
            }
            if let Some(b) = b {
                r += b.v[c];
            }
            fit(x.dt, r)
        })
        .collect();
    Tensor::new(x.dt, x.shape.clone(), v)
}

fn layer_norm(ins: &[&Tensor], axes: &[usize], eps: f64, scale: bool, bias: bool) -> Tensor {
    let x = ins[0];
    let s = scale.then(|| ins[1]);
    let b = bias.then(|| ins[1 + usize::from(scale)]);
    let mut sorted = axes.to_vec();
    sorted.sort_unstable();
    let mut v = vec![0.0; x.len()];
    groups(&x.shape, &sorted, |_, m| {
        let n = m.len() as f64;
        let mean = m.iter().map(|&i| x.v[i]).sum::<f64>() / n;
        let var = m.iter().map(|&i| (x.v[i] - mean).powi(2)).sum::<f64>() / n;
        for &i in m {
            let c = coords(&x.shape, i);
            // scale and bias have the input's sizes at `axes`, in the
            // order `axes` lists them.
            let mut k = 0;
            for &a in axes {
                k = k * x.shape[a] + c[a];
            }
            let mut r = (x.v[i] - mean) / (var + eps).sqrt();
            if let Some(s) = s {
                r *= s.v[k];
            }
            if let Some(b) = b {
                r += b.v[k];
            }
            v[i] = fit(x.dt, r);
        }
    });
    Tensor::new(x.dt, x.shape.clone(), v)
}

/// The operator applied to its operands.
pub fn eval(op: &Op, ins: &[&Tensor]) -> Tensor {
    let x = ins[0];
    match op {
        Op::Binary(k) => zip(x, ins[1], x.dt, |a, b| binary(k, x.dt, a, b)),
        Op::Logical(k) => zip(x, ins[1], DataType::Uint8, |a, b| logical(k, a, b)),
        Op::LogicalUnary(k) => map(x, DataType::Uint8, |a| {
            f64::from(u8::from(match *k {
                "logicalNot" => a == 0.0,
                "isNaN" => a.is_nan(),
                "isInfinite" => a.is_infinite(),
                _ => unreachable!("{k}"),
            }))
        }),
        Op::Unary(k) => map(x, x.dt, |a| unary(k, x.dt, a)),
        Op::Cast(to) => map(x, *to, |a| cast(a, x.dt, *to)),
        Op::Clamp { min, max } => {
            let (lo, hi) = (
                min.unwrap_or(f64::NEG_INFINITY),
                max.unwrap_or(f64::INFINITY),
            );
            let (rlo, rhi) = int_range(x.dt);
            map(x, x.dt, |a| {
                if a.is_nan() {
                    a
                } else {
                    // Integer bounds beyond the type's range do nothing.
                    fit(x.dt, a.max(lo.max(rlo)).min(hi.min(rhi)))
                }
            })
        }
        Op::Softmax { axis } => softmax(x, *axis),
        Op::Reduce { kind, axes, keep } => {
            let all: Vec<usize> = (0..x.shape.len()).collect();
            reduce(kind, x, axes.as_deref().unwrap_or(&all), *keep)
        }
        Op::Transpose { perm } => {
            let rev: Vec<usize> = (0..x.shape.len()).rev().collect();
            transpose(x, perm.as_deref().unwrap_or(&rev))
        }
        Op::Reshape { shape } => Tensor::new(x.dt, shape.clone(), x.v.clone()),
        Op::Concat { axis } => concat(ins, *axis),
        Op::Slice {
            starts,
            sizes,
            strides,
        } => {
            let ones = vec![1; starts.len()];
            slice(x, starts, sizes, strides.as_deref().unwrap_or(&ones))
        }
        Op::Conv2d(c) => conv2d(x, ins[1], ins.get(2).copied(), c),
        Op::ConvTranspose2d(c) => conv_transpose2d(x, ins[1], ins.get(2).copied(), c),
        Op::Matmul => matmul(x, ins[1]),
        Op::Gemm { .. } => gemm(x, ins[1], ins.get(2).copied(), op),
        Op::Pool(p) => pool(x, p),
        Op::BatchNorm {
            axis,
            eps,
            scale,
            bias,
        } => batch_norm(ins, *axis, *eps, *scale, *bias),
        Op::LayerNorm {
            axes,
            eps,
            scale,
            bias,
        } => {
            let default: Vec<usize> = (1..x.shape.len()).collect();
            layer_norm(
                ins,
                axes.as_deref().unwrap_or(&default),
                *eps,
                *scale,
                *bias,
            )
        }
    }
}
