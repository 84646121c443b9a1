//! Differential fuzzing of the backends.
//!
//! Two comparisons, on small graphs drawn by seeded generators
//! (`differential/gen.rs`) and built through `GraphBuilder::call`, the
//! path the JS binding takes:
//! - `cpu_matches_reference`: the optimised CPU backend (compile + compute)
//!   against a plain float64 reference of each operator written from the
//!   spec (`differential/reference.rs`), float16 outputs rounded once;
//! - `gpu_matches_cpu`: the GPU backend (wgpu; Mesa's lavapipe where there
//!   is no GPU) against the CPU backend on the same graphs. Without a
//!   Vulkan adapter it prints that it skipped and checks nothing (set
//!   `WEBNN_DIFF_REQUIRE_GPU=1` to make that a failure).
//!
//! Tolerances are the conformance runner's per-operator rules
//! (`differential/tolerance.rs`); NaN must match NaN, integers exactly.
//!
//! The run is sized by case count, not time, so it is reproducible:
//! - `WEBNN_DIFF_CASES`: cases per comparison (default 20000 on the CPU,
//!   6000 on the GPU, each about a minute on two cores);
//! - `WEBNN_DIFF_SEED`: the seed (decimal or 0x-hex; default 0x5eed);
//!   case `i` of a run is drawn from `(seed, i)` alone;
//! - `WEBNN_DIFF_FAMILIES`: a comma-separated list of generators (names
//!   in `gen::FAMILIES`) to restrict a run to;
//! - `WEBNN_DIFF_CASE`: run only case `i` of the seed (to replay one).
//!
//! A failure prints the case shrunk (the smallest draw of its generator
//! that still fails, then inputs set to zero where that keeps it failing):
//! the operators with their parameters, the input shapes and values, the
//! first differing element with got/want, and the seed and case index.
//! Cases that found bugs are kept below as named tests.

#[path = "differential/f16.rs"]
mod f16;
#[path = "differential/gen.rs"]
mod gen;
#[path = "differential/model.rs"]
mod model;
#[path = "differential/reference.rs"]
mod reference;
#[path = "differential/tolerance.rs"]
mod tolerance;

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use webnn_node::backend::cpu::CpuBackend;
use webnn_node::backend::Backend;
use webnn_node::error::ErrorKind;
use webnn_node::tensor::Buf;
use webnn_node::types::DataType;

use model::{Case, Input, Node, Op, Src, Tensor};
use tolerance::Tol;

const DEFAULT_SEED: u64 = 0x5eed;
const CPU_CASES: usize = 20000;
const GPU_CASES: usize = 6000;

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    let parsed = match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => v.parse(),
    };
    Some(parsed.unwrap_or_else(|_| panic!("{name}={v} is not a number")))
}

/// The seed of case `i` of a run.
fn case_seed(seed: u64, i: u64) -> u64 {
    let mut z = seed ^ i.wrapping_mul(0xd134_2543_de82_ef95);
    z = (z ^ (z >> 32)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z ^ (z >> 29)
}

/// The reference's output and the graph's tolerance.
fn reference(case: &Case) -> (Tensor, Tol) {
    let mut outs: Vec<Tensor> = Vec::new();
    let mut tols = Vec::new();
    for node in &case.nodes {
        let ins: Vec<&Tensor> = node
            .args
            .iter()
            .map(|s| match *s {
                Src::In(i) => &case.inputs[i].t,
                Src::Node(i) => &outs[i],
            })
            .collect();
        let out = reference::eval(&node.op, &ins);
        tols.push(tolerance::of(&node.op, &ins, out.dt));
        outs.push(out);
    }
    (outs.pop().unwrap(), tolerance::sum(&tols))
}

enum Run {
    Out(Vec<usize>, Buf),
    /// The backend does not implement something the case needs.
    Unsupported(String),
    Failed(String),
}

/// Builds, compiles and runs the case on `be` (a panic is a failure).
fn run(be: &mut dyn Backend, case: &Case) -> Run {
    let (g, feeds) = match case.build() {
        Ok(x) => x,
        Err(e) => return Run::Failed(format!("building the graph failed: {e}")),
    };
    let shape = g.operands[g.outputs[0].1].shape.clone();
    let g = Arc::new(g);
    let result = catch_unwind(AssertUnwindSafe(|| {
        be.compile(1, g.clone())?;
        let out = be.compute(1, &g, feeds);
        be.destroy_graph(1);
        out
    }));
    match result {
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Run::Failed(format!("the backend panicked: {msg}"))
        }
        Ok(Err(e)) if e.kind == ErrorKind::NotSupported => Run::Unsupported(e.message),
        Ok(Err(e)) => Run::Failed(format!("compute failed: {e}")),
        Ok(Ok(mut out)) => Run::Out(shape, out.remove(0)),
    }
}

fn describe_index(shape: &[usize], i: usize) -> String {
    let mut c = vec![0; shape.len()];
    let mut r = i;
    for d in (0..shape.len()).rev() {
        c[d] = r % shape[d].max(1);
        r /= shape[d].max(1);
    }
    format!("{i} {c:?}")
}

fn show(dt: DataType, x: f64) -> String {
    match dt {
        DataType::Float32 => format!("{x:e} ({:#010x})", (x as f32).to_bits()),
        DataType::Float16 => format!("{x:e} ({:#06x})", f16::to_bits(x)),
        _ => format!("{x}"),
    }
}

/// What differs, or `None`.
fn compare(
    what: &str,
    shape: &[usize],
    got: &Buf,
    want_shape: &[usize],
    want: &[f64],
    dt: DataType,
    tol: Tol,
) -> Option<String> {
    if shape != want_shape {
        return Some(format!(
            "{what}: output shape {shape:?}, expected {want_shape:?}"
        ));
    }
    let g = tolerance::values(got);
    if g.len() != want.len() {
        return Some(format!(
            "{what}: {} output elements, expected {}",
            g.len(),
            want.len()
        ));
    }
    tolerance::compare(dt, &g, want, tol).map(|m| {
        format!(
            "{what}: {} of {} elements off ({tol:?}); first at {}: got {}, want {} (distance {})",
            m.count,
            want.len(),
            describe_index(shape, m.index),
            show(dt, m.got),
            show(dt, m.want),
            m.distance
        )
    })
}

/// The CPU backend against the reference: a description of the failure.
fn cpu_vs_reference(cpu: &mut dyn Backend, case: &Case) -> Option<String> {
    let (want, tol) = reference(case);
    match run(cpu, case) {
        Run::Out(shape, got) => compare(
            "cpu vs reference",
            &shape,
            &got,
            &want.shape,
            &want.v,
            want.dt,
            tol,
        ),
        Run::Unsupported(m) => Some(format!("the CPU backend does not support it: {m}")),
        Run::Failed(m) => Some(format!("cpu: {m}")),
    }
}

enum GpuCheck {
    Pass,
    Unsupported,
    /// Fails only by a disagreement that the fuzzer found and that is not
    /// fixed (see [`known_gpu_disagreement`]).
    Known(&'static str),
    Fail(String),
}

/// The GPU backend's disagreements that the fuzzer found and that remain
/// (docs/memory-safety.md says why each is left): a case whose every
/// mismatch is explained by one of them is counted under its name and
/// printed, never passed silently, and any other mismatch still fails.
///
/// - sin and cos of |x| > 2^24: WGSL defines their accuracy on [-pi, pi]
///   only, and the drivers reduce larger arguments with a float pi, which
///   leaves nothing of the result at that size (lavapipe gives -1 for
///   sin(1e30), whose value is -0.79). Only single sin/cos nodes on a
///   graph input are judged; the elements of smaller |x| must pass.
/// - layerNormalization and reduceLogSumExp whose result is the
///   difference of numbers much larger than itself (x - mean with x near
///   the mean, a bias cancelling the normalised value; m + log(sum) with
///   the sum near 1): a rounding of those float32 intermediates, which
///   the spec's own float32 decomposition has too, is many ULP of the
///   result. The CPU backend computes these in f64 and does not show it.
///   Judged with the operator's own ULP count, measured at the
///   magnitude of its inputs (|x| |scale|, |bias|; max(1, |x|)) where
///   that exceeds the result's.
/// - pow with |y ln x| > 16: WGSL defines pow as exp2(y log2(x)), whose
///   error grows with the exponent (55 ULP for 1.98^31.2); only pow on
///   two graph inputs of one shape is judged, and the elements of smaller
///   exponent must pass.
fn known_gpu_disagreement(
    case: &Case,
    shape: &[usize],
    dt: DataType,
    got: &[f64],
    want: &[f64],
    tol: tolerance::Tol,
) -> Option<&'static str> {
    let [node] = case.nodes.as_slice() else {
        return None;
    };
    match &node.op {
        model::Op::Unary(k) if matches!(*k, "sin" | "cos") => {
            let model::Src::In(i) = node.args[0] else {
                return None;
            };
            let x = &case.inputs[i].t.v;
            let inside: Vec<bool> = x.iter().map(|v| v.abs() <= 16_777_216.0).collect();
            if x.len() != got.len() || inside.iter().all(|&k| k) {
                return None;
            }
            passes_where(dt, got, want, tol, &inside).then_some("sin/cos of |x| > 2^24")
        }
        model::Op::LayerNorm { scale, bias, .. } if dt == DataType::Float32 => {
            // The largest magnitude among the normalised values' inputs
            // (|x| times |scale|) and the bias.
            let most = |k: usize| -> Option<f64> {
                match node.args.get(k)? {
                    model::Src::In(i) => Some(
                        case.inputs[*i]
                            .t
                            .v
                            .iter()
                            .fold(0.0f64, |m, v| m.max(v.abs())),
                    ),
                    model::Src::Node(_) => None,
                }
            };
            let x = most(0)?;
            let s = if *scale { most(1)? } else { 1.0 };
            let b = if *bias {
                most(1 + *scale as usize)?
            } else {
                0.0
            };
            within_at(dt, got, want, tol, (x * s).max(b))
                .then_some("layerNormalization that cancels")
        }
        model::Op::Binary("pow") if dt == DataType::Float32 => {
            // The elements whose |y ln x| is at most 16 must pass.
            let (model::Src::In(a), model::Src::In(b)) = (node.args[0], node.args[1]) else {
                return None;
            };
            let (xa, xb) = (&case.inputs[a].t, &case.inputs[b].t);
            let small: Vec<bool> = (0..got.len())
                .map(|i| {
                    let (x, y) = (broadcast_at(xa, shape, i), broadcast_at(xb, shape, i));
                    let z = y * x.abs().ln();
                    !z.is_finite() || z.abs() <= 16.0
                })
                .collect();
            if small.iter().all(|&s| s) {
                return None;
            }
            passes_where(dt, got, want, tol, &small).then_some("pow with |y ln x| > 16")
        }
        model::Op::Reduce {
            kind: "reduceLogSumExp",
            ..
        } if dt == DataType::Float32 => {
            let model::Src::In(i) = node.args[0] else {
                return None;
            };
            let x = case.inputs[i]
                .t
                .v
                .iter()
                .fold(1.0f64, |m, v| m.max(v.abs()));
            within_at(dt, got, want, tol, x).then_some("reduceLogSumExp that cancels")
        }
        _ => None,
    }
}

/// Whether the elements of `got` that `keep` marks are within `tol` of
/// `want`'s.
fn passes_where(
    dt: DataType,
    got: &[f64],
    want: &[f64],
    tol: tolerance::Tol,
    keep: &[bool],
) -> bool {
    let kept = |v: &[f64]| -> Vec<f64> {
        v.iter()
            .zip(keep)
            .filter(|(_, &k)| k)
            .map(|(v, _)| *v)
            .collect()
    };
    tolerance::compare(dt, &kept(got), &kept(want), tol).is_none()
}

/// The value of `t` at element `i` of `out`, `t` broadcast to it (numpy's
/// rules: trailing dimensions aligned, 1 stretched).
fn broadcast_at(t: &Tensor, out: &[usize], mut i: usize) -> f64 {
    let lead = out.len() - t.shape.len();
    let (mut at, mut stride) = (0, 1);
    for d in (0..out.len()).rev() {
        let coord = i % out[d];
        i /= out[d];
        if d >= lead {
            let n = t.shape[d - lead];
            if n != 1 {
                at += coord * stride;
            }
            stride *= n;
        }
    }
    t.v[at]
}

/// Whether every element of `got` is within `tol` of `want`, its ULP
/// counted at the magnitude `at` where that exceeds the element's own.
fn within_at(dt: DataType, got: &[f64], want: &[f64], tol: tolerance::Tol, at: f64) -> bool {
    let tolerance::Tol::Ulp(n) = tol else {
        return false;
    };
    let ulp = |v: f64| {
        let f = (v.abs() as f32).max(f32::MIN_POSITIVE);
        (f32::from_bits(f.to_bits() + 1) - f) as f64
    };
    got.iter().zip(want).all(|(&g, &w)| {
        tolerance::check(dt, g, w, tol).0 || (g - w).abs() <= n as f64 * ulp(w.abs().max(at))
    })
}

/// The GPU backend against the CPU backend (the reference's value is
/// shown alongside).
fn gpu_vs_cpu(gpu: &mut dyn Backend, cpu: &mut dyn Backend, case: &Case) -> GpuCheck {
    let (want, tol) = reference(case);
    let (shape, expected) = match run(cpu, case) {
        Run::Out(s, b) => (s, b),
        Run::Unsupported(m) | Run::Failed(m) => {
            return GpuCheck::Fail(format!("the CPU side failed: {m}"))
        }
    };
    match run(gpu, case) {
        Run::Out(s, got) => {
            let e = tolerance::values(&expected);
            match compare("gpu vs cpu", &s, &got, &shape, &e, want.dt, tol) {
                None => GpuCheck::Pass,
                Some(_) if s == shape => {
                    match known_gpu_disagreement(
                        case,
                        &s,
                        want.dt,
                        &tolerance::values(&got),
                        &e,
                        tol,
                    ) {
                        Some(name) => GpuCheck::Known(name),
                        None => gpu_failure(&s, &got, &shape, &e, &want, tol),
                    }
                }
                Some(_) => gpu_failure(&s, &got, &shape, &e, &want, tol),
            }
        }
        Run::Unsupported(_) => GpuCheck::Unsupported,
        Run::Failed(m) => GpuCheck::Fail(format!("gpu: {m}")),
    }
}

/// The report of a GPU result that disagrees with the CPU's `e`.
fn gpu_failure(
    s: &[usize],
    got: &Buf,
    shape: &[usize],
    e: &[f64],
    want: &Tensor,
    tol: tolerance::Tol,
) -> GpuCheck {
    match compare("gpu vs cpu", s, got, shape, e, want.dt, tol) {
        None => GpuCheck::Pass,
        Some(mut m) => {
            if let Some(mm) = tolerance::compare(want.dt, &tolerance::values(got), e, tol) {
                m += &format!("; reference there: {}", show(want.dt, want.v[mm.index]));
            }
            GpuCheck::Fail(m)
        }
    }
}

/// A smaller case that still fails: first the smallest draw of the same
/// generator with a lower cap on its free dimensions, then inputs set to
/// zero one by one where the failure stays.
fn shrink(case: &Case, seed: u64, gpu_mode: bool, mut fails: impl FnMut(&Case) -> bool) -> Case {
    let family = gen::family(case.family);
    let mut best = case.clone();
    'caps: for cap in [1, 2, 3, 4, 6, 8, 12] {
        for t in 0..30u64 {
            let c = family(&mut gen::G::new(
                case_seed(seed, 1 << 40 | t),
                cap,
                gpu_mode,
            ));
            if c.size() < best.size() && fails(&c) {
                best = c;
                continue 'caps;
            }
        }
    }
    let mut tries = 0;
    for i in 0..best.inputs.len() {
        // Integer operands keep their values: a zero divisor or exponent
        // would change what is tested.
        if !best.inputs[i].t.dt.is_float() {
            continue;
        }
        for k in 0..best.inputs[i].t.len() {
            if tries >= 96 {
                return best;
            }
            if best.inputs[i].t.v[k] == 0.0 {
                continue;
            }
            tries += 1;
            let mut c = best.clone();
            c.inputs[i].t.v[k] = 0.0;
            if fails(&c) {
                best = c;
            }
        }
    }
    best
}

struct Tally {
    run: usize,
    failed: usize,
    unsupported: usize,
    known: usize,
}

fn families() -> Vec<(&'static str, gen::Family)> {
    let only = std::env::var("WEBNN_DIFF_FAMILIES").ok();
    let list: Vec<_> = gen::FAMILIES
        .iter()
        .filter(|(n, _)| {
            only.as_ref()
                .is_none_or(|o| o.split(',').any(|x| x.trim() == *n))
        })
        .copied()
        .collect();
    assert!(!list.is_empty(), "WEBNN_DIFF_FAMILIES names no generator");
    list
}

/// What one case's check found.
enum Verdict {
    Pass,
    Unsupported,
    /// A named known disagreement (counted and printed, not a failure).
    Known(&'static str),
    Fail(String),
}

fn fuzz(name: &str, gpu_mode: bool, default_cases: usize, mut check: impl FnMut(&Case) -> Verdict) {
    let seed = env_u64("WEBNN_DIFF_SEED").unwrap_or(DEFAULT_SEED);
    let cases = env_u64("WEBNN_DIFF_CASES").map_or(default_cases, |n| n as usize);
    let one = env_u64("WEBNN_DIFF_CASE");
    let fams = families();
    let mut tally: BTreeMap<&str, Tally> = BTreeMap::new();
    let mut reports = Vec::new();
    let mut failed_families = Vec::new();
    let mut known: BTreeMap<&str, usize> = BTreeMap::new();
    let range: Vec<u64> = match one {
        Some(i) => vec![i],
        None => (0..cases as u64).collect(),
    };
    for i in range {
        let (fname, family) = fams[i as usize % fams.len()];
        let case = family(&mut gen::G::new(case_seed(seed, i), 16, gpu_mode));
        let t = tally.entry(fname).or_insert(Tally {
            run: 0,
            failed: 0,
            unsupported: 0,
            known: 0,
        });
        match check(&case) {
            Verdict::Pass => t.run += 1,
            Verdict::Unsupported => t.unsupported += 1,
            Verdict::Known(name) => {
                t.run += 1;
                t.known += 1;
                *known.entry(name).or_insert(0usize) += 1;
            }
            Verdict::Fail(first) => {
                t.run += 1;
                t.failed += 1;
                // One shrunk report per generator and first operator.
                let key = (fname, case.nodes[0].op.name());
                if failed_families.contains(&key) || reports.len() >= 8 {
                    continue;
                }
                failed_families.push(key);
                let small = shrink(&case, case_seed(seed, i), gpu_mode, |c| {
                    matches!(check(c), Verdict::Fail(_))
                });
                let why = match check(&small) {
                    Verdict::Fail(m) => m,
                    _ => first.clone(),
                };
                reports.push(format!(
                    "{name}: seed {seed:#x} case {i} ({fname}) failed: {first}\nshrunk: {why}\n{small}"
                ));
            }
        }
    }
    eprintln!("{name}: seed {seed:#x}, per generator (run / failed / unsupported / known):");
    let mut total = 0;
    for (f, t) in &tally {
        total += t.run;
        eprintln!(
            "  {f:20} {:5} {:5} {:5} {:5}",
            t.run, t.failed, t.unsupported, t.known
        );
    }
    eprintln!("{name}: {total} cases compared");
    for (k, n) in &known {
        eprintln!("{name}: {n} cases fail only by the known disagreement \"{k}\"");
    }
    assert!(reports.is_empty(), "\n{}", reports.join("\n\n"));
}

fn gpu_backend() -> Option<Box<dyn Backend>> {
    match webnn_node::backend::gpu::create("default") {
        Ok(b) => Some(b),
        Err(e) if e.kind == ErrorKind::NotSupported => {
            assert!(
                std::env::var("WEBNN_DIFF_REQUIRE_GPU").is_err(),
                "no GPU adapter: {}",
                e.message
            );
            eprintln!(
                "SKIPPED: no GPU adapter ({}); nothing was compared",
                e.message
            );
            None
        }
        Err(e) => panic!("creating the GPU backend failed: {e}"),
    }
}

#[test]
fn cpu_matches_reference() {
    let mut cpu = CpuBackend::new();
    fuzz("cpu vs reference", false, CPU_CASES, |case| {
        match cpu_vs_reference(&mut cpu, case) {
            None => Verdict::Pass,
            Some(m) => {
                // A panic may leave the backend in any state.
                cpu = CpuBackend::new();
                Verdict::Fail(m)
            }
        }
    });
}

#[test]
fn gpu_matches_cpu() {
    let Some(mut gpu) = gpu_backend() else {
        return;
    };
    let mut cpu = CpuBackend::new();
    fuzz("gpu vs cpu", true, GPU_CASES, |case| {
        match gpu_vs_cpu(gpu.as_mut(), &mut cpu, case) {
            GpuCheck::Pass => Verdict::Pass,
            GpuCheck::Unsupported => Verdict::Unsupported,
            GpuCheck::Known(name) => Verdict::Known(name),
            GpuCheck::Fail(m) => Verdict::Fail(m),
        }
    });
}

// ---------------------------------------------------------------------------
// Cases that found bugs, kept as regression tests.

/// An input holding `v` as `dt` stores it (floats rounded to float32,
/// then to `dt`).
fn input(dt: DataType, shape: &[usize], v: &[f64]) -> Input {
    let v = v
        .iter()
        .map(|&x| {
            if dt.is_float() {
                reference::fit(dt, x as f32 as f64)
            } else {
                x
            }
        })
        .collect();
    Input {
        t: Tensor::new(dt, shape.to_vec(), v),
        constant: false,
    }
}

fn node(op: Op, args: &[Src]) -> Node {
    Node {
        op,
        args: args.to_vec(),
    }
}

/// Asserts that the CPU matches the reference and, where there is a GPU
/// adapter, that the GPU matches the CPU, for every case (reporting all
/// that fail).
fn assert_cases(cases: &[Case]) {
    let mut cpu = CpuBackend::new();
    let mut gpu = gpu_backend();
    let mut failures = Vec::new();
    for case in cases {
        if let Some(m) = cpu_vs_reference(&mut cpu, case) {
            failures.push(format!("{m}\n{case}"));
        }
        if let Some(gpu) = gpu.as_mut() {
            match gpu_vs_cpu(gpu.as_mut(), &mut cpu, case) {
                GpuCheck::Pass => {}
                GpuCheck::Unsupported => {
                    failures.push(format!("the GPU backend does not support\n{case}"))
                }
                GpuCheck::Known(k) => {
                    failures.push(format!("the known disagreement \"{k}\"\n{case}"))
                }
                GpuCheck::Fail(m) => failures.push(format!("{m}\n{case}")),
            }
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn reference_self_check() {
    // The reference itself on values whose answers are known by hand.
    let t = |v: &[f64]| Tensor::new(DataType::Float32, vec![v.len()], v.to_vec());
    let out = reference::eval(
        &Op::Cast(DataType::Float16),
        &[&t(&[1.00048828125, 65520.0, 0.1])],
    );
    assert_eq!(out.v, vec![1.0, f64::INFINITY, 0.0999755859375]);
    let i = Tensor::new(DataType::Int32, vec![3], vec![300.0, -129.0, 127.0]);
    let out = reference::eval(&Op::Cast(DataType::Int8), &[&i]);
    assert_eq!(out.v, vec![44.0, 127.0, 127.0]);
    let out = reference::eval(&Op::Cast(DataType::Uint8), &[&i]);
    assert_eq!(out.v, vec![44.0, 127.0, 127.0]);
    let n = t(&[f64::NAN, 1.0]);
    let one = t(&[1.0, 1.0]);
    let out = reference::eval(&Op::Logical("notEqual"), &[&n, &one]);
    assert_eq!(out.v, vec![1.0, 0.0]);
    let out = reference::eval(&Op::Logical("equal"), &[&n, &n]);
    assert_eq!(out.v, vec![0.0, 1.0]);
    assert!((reference::erf(0.5) - 0.520_499_877_813_046_5).abs() < 1e-15);
    assert!((reference::erf(3.0) - 0.999_977_909_503_001_4).abs() < 1e-15);
}

/// float32 -> float16 -> float32: the middle value must be a half.
#[test]
fn cast_to_float16_inside_a_graph_rounds() {
    let case = Case {
        family: "cast_chain",
        inputs: vec![input(
            DataType::Float32,
            &[6],
            &[1.0004883, 0.1, 65519.0, 65520.0, 2049.0, 1e-7],
        )],
        nodes: vec![
            node(Op::Cast(DataType::Float16), &[Src::In(0)]),
            node(Op::Cast(DataType::Float32), &[Src::Node(0)]),
        ],
    };
    assert_cases(&[case]);
}

/// int32 -> int8 -> int32: the middle value must wrap to 8 bits.
#[test]
fn cast_to_int8_inside_a_graph_wraps() {
    let case = Case {
        family: "cast_chain",
        inputs: vec![input(
            DataType::Int32,
            &[5],
            &[300.0, -129.0, 128.0, 255.0, -1.0],
        )],
        nodes: vec![
            node(Op::Cast(DataType::Int8), &[Src::In(0)]),
            node(Op::Cast(DataType::Int32), &[Src::Node(0)]),
        ],
    };
    assert_cases(&[case]);
}

/// Comparisons with NaN operands are false, except notEqual.
#[test]
fn comparisons_of_nan_are_false() {
    let nan = f64::NAN;
    let mut cases = Vec::new();
    for dt in [DataType::Float32, DataType::Float16] {
        for kind in [
            "equal",
            "notEqual",
            "greater",
            "greaterOrEqual",
            "lesser",
            "lesserOrEqual",
        ] {
            cases.push(Case {
                family: "compare",
                inputs: vec![
                    input(dt, &[5], &[nan, nan, 1.0, 0.0, f64::INFINITY]),
                    input(dt, &[5], &[nan, 1.0, nan, -0.0, nan]),
                ],
                nodes: vec![node(Op::Logical(kind), &[Src::In(0), Src::In(1)])],
            });
        }
    }
    assert_cases(&cases);
}

/// A +inf in a softmax group makes the whole group NaN, as the spec's
/// formula (exp(x - max) / sum) does: the CPU gave 0 beside the NaN.
#[test]
fn softmax_of_a_group_holding_infinity_is_nan() {
    let inf = f64::INFINITY;
    let mut cases = Vec::new();
    for (dt, axis) in [
        (DataType::Float32, 1),
        (DataType::Float16, 1),
        (DataType::Float32, 0),
    ] {
        cases.push(Case {
            family: "softmax",
            inputs: vec![input(dt, &[2, 3], &[0.0, inf, 1.0, 2.0, -inf, -inf])],
            nodes: vec![node(Op::Softmax { axis }, &[Src::In(0)])],
        });
    }
    assert_cases(&cases);
}

/// sign is 1 above zero, -1 below, and 0 otherwise, NaN included (the
/// CPU returned NaN).
#[test]
fn sign_of_nan_is_zero() {
    let mut cases = Vec::new();
    for dt in [DataType::Float32, DataType::Float16] {
        cases.push(Case {
            family: "unary",
            inputs: vec![input(dt, &[5], &[f64::NAN, -0.0, 0.0, -2.5, 1e-40])],
            nodes: vec![node(Op::Unary("sign"), &[Src::In(0)])],
        });
    }
    assert_cases(&cases);
}

/// What the GPU comparison found in the GPU's element-wise operators, each
/// fixed there (shaders/float.wgsl, binary.wgsl): NaN dropped by relu,
/// max, min and clamp (drivers' max(NaN, 0) is 0); pow with a NaN or an
/// infinite base ((-inf)^0.5 was NaN, 0^NaN inf); exp 36 ULP off at large
/// arguments; log near 1 (21 ULP at 0.95) and of subnormals (-inf); and
/// the log-sum reductions built on them.
#[test]
fn gpu_nan_and_precision_regressions() {
    let (nan, inf) = (f64::NAN, f64::INFINITY);
    let mut cases = Vec::new();
    for dt in [DataType::Float32, DataType::Float16] {
        let x = [nan, -1.5, 0.0, 2.0, -inf, inf];
        for k in ["relu", "exp", "log", "sign"] {
            cases.push(Case {
                family: "unary",
                inputs: vec![input(dt, &[6], &x)],
                nodes: vec![node(Op::Unary(k), &[Src::In(0)])],
            });
        }
        for k in ["max", "min"] {
            cases.push(Case {
                family: "binary",
                inputs: vec![
                    input(dt, &[4], &[nan, 1.0, nan, -2.0]),
                    input(dt, &[4], &[0.0, nan, nan, 3.0]),
                ],
                nodes: vec![node(Op::Binary(k), &[Src::In(0), Src::In(1)])],
            });
        }
        cases.push(Case {
            family: "clamp",
            inputs: vec![input(dt, &[4], &[nan, -7.0, 0.5, 9.0])],
            nodes: vec![node(
                Op::Clamp {
                    min: Some(-1.0),
                    max: Some(1.0),
                },
                &[Src::In(0)],
            )],
        });
    }
    // pow: NaN and infinite bases, 1 to a NaN power, 0 to a NaN power.
    cases.push(Case {
        family: "binary",
        inputs: vec![
            input(
                DataType::Float32,
                &[8],
                &[-inf, -inf, -inf, -inf, 0.0, 1.0, nan, 2.0],
            ),
            input(
                DataType::Float32,
                &[8],
                &[0.5, -0.5, 3.0, -3.0, nan, nan, 0.0, nan],
            ),
        ],
        nodes: vec![node(Op::Binary("pow"), &[Src::In(0), Src::In(1)])],
    });
    // exp near the ends of its range; log near 1 and of subnormals.
    cases.push(Case {
        family: "unary",
        inputs: vec![input(
            DataType::Float32,
            &[6],
            &[80.0, 88.5, -87.0, -100.0, 60.25, -45.75],
        )],
        nodes: vec![node(Op::Unary("exp"), &[Src::In(0)])],
    });
    cases.push(Case {
        family: "unary",
        inputs: vec![input(
            DataType::Float32,
            &[7],
            &[0.95, 1.0000001, 0.99999994, 1.3, 1e-40, 1.4e-45, 3.0e38],
        )],
        nodes: vec![node(Op::Unary("log"), &[Src::In(0)])],
    });
    for kind in ["reduceLogSum", "reduceLogSumExp"] {
        cases.push(Case {
            family: "reduce",
            inputs: vec![input(
                DataType::Float32,
                &[2, 2],
                &[0.33908361196517944, 0.6109428405761719, -3.5, -4.25],
            )],
            nodes: vec![node(
                Op::Reduce {
                    kind,
                    axes: Some(vec![1]),
                    keep: false,
                },
                &[Src::In(0)],
            )],
        });
    }
    assert_cases(&cases);
}

/// Padding is zeros added to the input, so a NaN weight whose tap falls in
/// the padding still makes that output NaN (0 * NaN); the GPU skipped
/// padded taps and gave the bias.
#[test]
fn conv2d_nan_weight_meets_the_padding() {
    let nan = f64::NAN;
    let case = Case {
        family: "conv2d",
        inputs: vec![
            input(DataType::Float32, &[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0]),
            Input {
                t: Tensor::new(
                    DataType::Float32,
                    vec![1, 1, 2, 2],
                    vec![nan, 1.0, 1.0, 1.0],
                ),
                constant: true,
            },
        ],
        nodes: vec![node(
            Op::Conv2d(model::Conv {
                pad: [1, 0, 1, 0],
                strides: [1, 1],
                dil: [1, 1],
                groups: 1,
                nhwc: false,
                filter_layout: "oihw",
                bias: false,
                out_pad: [0, 0],
                out_sizes: None,
            }),
            &[Src::In(0), Src::In(1)],
        )],
    };
    assert_cases(&[case]);
}
