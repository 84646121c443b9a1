use super::blocking::MAX_KG;
use super::*;

/// Equal bit for bit, any NaN matching any NaN.
fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
}

/// Deterministic pseudo-random values in [-1, 1).
fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e3779b97f4a7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// f64 reference of `a' * b'` (transposes as in `sgemm_t`).
#[allow(clippy::too_many_arguments)]
fn naive(m: usize, n: usize, k: usize, a: &[f32], a_t: bool, b: &[f32], b_t: bool) -> Vec<f32> {
    let mut c = vec![0.0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut s = 0.0f64;
            for p in 0..k {
                let x = if a_t { a[p * m + i] } else { a[i * k + p] };
                let y = if b_t { b[j * k + p] } else { b[p * n + j] };
                s += x as f64 * y as f64;
            }
            c[i * n + j] = s as f32;
        }
    }
    c
}

/// Values in [-1, 1): the rounding error grows about like sqrt(K),
/// bounded here by K ulps-ish of the largest partial sum.
fn check(got: &[f32], want: &[f32], k: usize, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    let tol = 1e-6 * (k as f32 + 1.0) * 4.0;
    for (i, (x, y)) in got.iter().zip(want).enumerate() {
        assert!((x - y).abs() <= tol, "{what}: element {i}: {x} vs {y}");
    }
}

const SHAPES: &[(usize, usize, usize)] = &[
    (1, 1, 1),
    (1, 1000, 1),
    (1, 1000, 37),
    (1, 45, 600),
    (1000, 1, 3),
    (2, 3, 4),
    (6, 16, 256),
    (12, 32, 192),
    (12, 32, 384),
    (3, 40, 769),
    (7, 17, 257),
    (17, 33, 65),
    (130, 257, 70),
    (145, 31, 300),
    (64, 300, 513),
    // Edge row panels that have kernels of their own (AVX-512: 4 or 8
    // rows left, AVX2: 2 or 4), over more than one KC block.
    (8, 33, 65),
    (20, 70, 300),
    (26, 32, 500),
    (100, 40, 30),
    (128, 64, 400),
    (5, 4100, 9),
    (0, 3, 4),
    (3, 0, 4),
    (3, 4, 0),
];

#[test]
fn every_kernel_matches_naive() {
    for kern in available_kernels() {
        for &(m, n, k) in SHAPES {
            for (a_t, b_t) in [(false, false), (true, false), (false, true), (true, true)] {
                kernel_paths(kern, m, n, k, a_t, b_t, ALL_THREADS);
            }
        }
    }
}

/// The thread counts the tests split products over (Miri runs most
/// shapes on one: a parallel section costs it about a second).
const ALL_THREADS: &[usize] = &[1, 2, 3, 4];

/// The counts of `want` that `threads` allows.
fn some(threads: &[usize], want: &[usize]) -> Vec<usize> {
    want.iter()
        .copied()
        .filter(|t| threads.contains(t))
        .collect()
}

/// `kern`'s product of one shape against [`naive`], and every other
/// path of it (splits across threads, B packed in advance, generated,
/// read in place, one row streamed) against that, bit for bit, on the
/// thread counts of `threads` (and one).
#[allow(clippy::too_many_arguments)]
fn kernel_paths(
    kern: &'static Kernel,
    m: usize,
    n: usize,
    k: usize,
    a_t: bool,
    b_t: bool,
    threads: &[usize],
) {
    let split = |want: &[usize]| some(threads, want);
    let a = data(m * k, 1 + m as u64);
    let b = data(k * n, 2 + n as u64);
    let want = naive(m, n, k, &a, a_t, &b, b_t);
    let am = Mat::new(&a, m, k, a_t).unwrap();
    let bm = Mat::new(&b, k, n, b_t).unwrap();
    let what = format!("{} {m}x{n}x{k} a_t={a_t} b_t={b_t}", kern.name);
    let mut c1 = vec![7.0f32; m * n];
    gemm_blocked(kern, m, n, k, am, BSrc::Plain(bm), &mut c1, 1);
    check(&c1, &want, k, &what);
    // Any split gives bit-identical results.
    for threads in split(&[2, 3, 4]) {
        let mut c2 = vec![-3.0f32; m * n];
        gemm_blocked(kern, m, n, k, am, BSrc::Plain(bm), &mut c2, threads);
        assert_eq!(c1, c2, "{what} threads={threads}");
    }
    let pb = PackedB::with_kernel(kern, &b, k, n, b_t).unwrap();
    let mut c3 = vec![1.0f32; m * n];
    let two = split(&[2]).first().copied().unwrap_or(1);
    gemm_blocked(kern, m, n, k, am, BSrc::Packed(&pb), &mut c3, two);
    assert_eq!(c1, c3, "{what} packed");
    // One row: the packed panels streamed (same bits).
    if m == 1 {
        for threads in split(&[1, 2]) {
            let mut c9 = vec![6.0f32; n];
            gemv_packed(&pb, &a[..k], &mut c9, threads, None);
            assert_eq!(c1, c9, "{what} gemv_packed threads={threads}");
        }
    }
    // Panels generated on demand: the same as packing B.
    let gen = |p0: usize, kc: usize, j0: usize, cols: usize, nr: usize, dst: &mut [f32]| {
        for (q, panel) in dst.chunks_mut(kc * nr).enumerate() {
            let j = j0 + q * nr;
            pack_b_panel(bm, p0, kc, j, nr.min(j0 + cols - j), nr, panel);
        }
    };
    for threads in split(&[1, 2]) {
        let mut c4 = vec![5.0f32; m * n];
        gemm_blocked(kern, m, n, k, am, BSrc::Gen(&gen), &mut c4, threads);
        assert_eq!(c1, c4, "{what} generated");
    }
    // B's rows read in place (packed where the kernel has no rows form):
    // scattered rows with gaps between them.
    if !b_t {
        let (gap, start) = (3, 5);
        let mut spread = vec![f32::NAN; start + k * (n + gap)];
        let offs: Vec<usize> = (0..k).map(|p| start + p * (n + gap)).collect();
        for (p, &o) in offs.iter().enumerate() {
            spread[o..o + n].copy_from_slice(&b[p * n..(p + 1) * n]);
        }
        let rb = RowsB::new(&spread, &offs, n).unwrap();
        for threads in split(&[1, 2, 3]) {
            let mut c6 = vec![4.0f32; m * n];
            gemm_blocked(kern, m, n, k, am, BSrc::Rows(rb), &mut c6, threads);
            assert_eq!(c1, c6, "{what} rows in place threads={threads}");
        }
    }
}

#[test]
fn public_entry_points() {
    for &(m, n, k) in SHAPES {
        entry_points(m, n, k);
    }
}

/// The public entry points on one shape: against [`naive`], packed A
/// against plain, fused epilogues against applying them after, short
/// biases and rows outside B refused.
fn entry_points(m: usize, n: usize, k: usize) {
    let a = data(m * k, 3);
    let b = data(k * n, 4);
    let want = naive(m, n, k, &a, false, &b, false);
    let mut c = vec![9.0f32; m * n];
    sgemm(m, n, k, &a, &b, &mut c, true);
    check(&c, &want, k, "sgemm");
    let mut c2 = vec![9.0f32; m * n];
    sgemm(m, n, k, &a, &b, &mut c2, false);
    assert_eq!(c, c2);
    // A packed in advance.
    let pa = PackedA::new(&a, m, k).unwrap();
    assert_eq!((pa.m(), pa.k()), (m, k));
    let mut c3 = vec![9.0f32; m * n];
    sgemm_packed_a(&pa, n, &b, &mut c3, true, &Fuse::default()).unwrap();
    check(&c3, &want, k, "sgemm_packed_a");
    // A fused bias and bounds give the bits of applying them
    // afterwards, in full and edge tiles alike; NaN passes.
    let mut rb = data(m, 5);
    let cb = data(n, 6);
    if m > 2 {
        rb[2] = f32::NAN;
    }
    for fuse in [
        Fuse {
            row_bias: Some(&rb),
            col_bias: None,
            bounds: Some((-0.25, 0.5)),
        },
        Fuse {
            row_bias: None,
            col_bias: Some(&cb),
            bounds: None,
        },
        Fuse {
            row_bias: Some(&rb),
            col_bias: Some(&cb),
            bounds: Some((0.0, f32::INFINITY)),
        },
    ] {
        let mut c5 = vec![9.0f32; m * n];
        sgemm_packed_a(&pa, n, &b, &mut c5, true, &fuse).unwrap();
        let mut want5 = c3.clone();
        for (i, row) in want5.chunks_exact_mut(n.max(1)).enumerate() {
            fuse.apply(i, 0, row);
        }
        let same = same_bits(&c5, &want5);
        assert!(same, "fused {fuse:?} {m}x{n}x{k}");
        // The scalar form clamps as the clamp operator does.
        if let Some((lo, hi)) = fuse.bounds {
            assert!(c5.iter().all(|x| x.is_nan() || (lo..=hi).contains(x)));
        }
    }
    let short = Fuse {
        row_bias: Some(&rb[..m.saturating_sub(1)]),
        ..Fuse::default()
    };
    if m > 0 {
        assert!(sgemm_packed_a(&pa, n, &b, &mut c3.clone(), true, &short).is_err());
    }
    let gen = |p0: usize, kc: usize, j0: usize, cols: usize, nr: usize, dst: &mut [f32]| {
        for (q, panel) in dst.chunks_exact_mut(kc * nr).enumerate() {
            for (p, row) in panel.chunks_exact_mut(nr).enumerate() {
                for (j, x) in row.iter_mut().enumerate() {
                    let col = j0 + q * nr + j;
                    *x = if col < j0 + cols {
                        b[(p0 + p) * n + col]
                    } else {
                        0.0
                    };
                }
            }
        }
    };
    let mut c4 = vec![9.0f32; m * n];
    sgemm_gen_packed_a(&pa, n, &gen, &mut c4, true, &Fuse::default()).unwrap();
    assert_eq!(c3, c4, "sgemm_gen_packed_a {m}x{n}x{k}");
    // B's rows read in place, with a fused epilogue: the bits of
    // the packed path (the same sums in the same order).
    let offs: Vec<usize> = (0..k).map(|p| p * n).collect();
    let rows = RowsB::new(&b, &offs, n).unwrap();
    let fuse = Fuse {
        row_bias: Some(&rb),
        col_bias: Some(&cb),
        bounds: Some((-0.25, 0.5)),
    };
    for parallel in [true, false] {
        let mut c7 = vec![9.0f32; m * n];
        sgemm_rows_packed_a(&pa, rows, &mut c7, parallel, &Fuse::default()).unwrap();
        assert_eq!(c3, c7, "sgemm_rows_packed_a {m}x{n}x{k}");
        let (mut c8, mut want8) = (vec![9.0f32; m * n], vec![9.0f32; m * n]);
        sgemm_rows_packed_a(&pa, rows, &mut c8, parallel, &fuse).unwrap();
        sgemm_packed_a(&pa, n, &b, &mut want8, parallel, &fuse).unwrap();
        let same = same_bits(&c8, &want8);
        assert!(same, "sgemm_rows_packed_a fused {m}x{n}x{k}");
    }
    // Rows must lie inside the buffer; one row per K.
    if k > 0 && n > 0 {
        let past = vec![b.len() - n + 1; k];
        assert!(RowsB::new(&b, &past, n).is_err());
        let few = RowsB::new(&b, &offs[..k - 1], n).unwrap();
        assert!(sgemm_rows_packed_a(&pa, few, &mut c3.clone(), true, &fuse).is_err());
    }
    for (a_t, b_t) in [(true, false), (false, true), (true, true)] {
        let want = naive(m, n, k, &a, a_t, &b, b_t);
        let mut c = vec![9.0f32; m * n];
        sgemm_t(m, n, k, &a, a_t, &b, b_t, &mut c, true).unwrap();
        check(&c, &want, k, "sgemm_t");
        let pb = PackedB::new(&b, k, n, b_t).unwrap();
        assert_eq!((pb.k(), pb.n()), (k, n));
        let mut c = vec![9.0f32; m * n];
        sgemm_packed(m, &a, a_t, &pb, &mut c, true, &Fuse::default()).unwrap();
        check(&c, &want, k, "sgemm_packed");
        // With a fused epilogue: the bits of applying it after.
        let fuse = Fuse {
            row_bias: Some(&rb),
            col_bias: Some(&cb),
            bounds: Some((-0.25, 0.5)),
        };
        let mut cf = vec![9.0f32; m * n];
        sgemm_packed(m, &a, a_t, &pb, &mut cf, true, &fuse).unwrap();
        for (i, row) in c.chunks_exact_mut(n.max(1)).enumerate() {
            fuse.apply(i, 0, row);
        }
        let same = same_bits(&cf, &c);
        assert!(same, "sgemm_packed fused {m}x{n}x{k} a_t={a_t} b_t={b_t}");
    }
}

#[test]
fn inside_a_pool_and_with_big_strides() {
    // Larger than one NC block and several KC blocks, on 2 threads.
    let (m, n, k) = (37, 4096 + 40, 600);
    let a = data(m * k, 5);
    let b = data(k * n, 6);
    let want = naive(m, n, k, &a, false, &b, false);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    let mut c = vec![0.0f32; m * n];
    pool.install(|| sgemm(m, n, k, &a, &b, &mut c, true));
    check(&c, &want, k, "pool");
}

#[test]
fn short_buffers_are_errors() {
    let mut c = vec![0.0f32; 4];
    assert!(sgemm_t(2, 2, 2, &[1.0; 3], false, &[1.0; 4], false, &mut c, false).is_err());
    assert!(sgemm_t(2, 2, 2, &[1.0; 4], false, &[1.0; 3], true, &mut c, false).is_err());
    assert!(sgemm_t(
        2,
        2,
        2,
        &[1.0; 4],
        false,
        &[1.0; 4],
        true,
        &mut c[..3],
        false
    )
    .is_err());
    assert!(PackedB::new(&[1.0; 5], 2, 3, false).is_err());
    let pb = PackedB::new(&[1.0; 6], 2, 3, false).unwrap();
    let mut c = vec![0.0f32; 6];
    assert!(sgemm_packed(2, &[1.0; 3], false, &pb, &mut c, false, &Fuse::default()).is_err());
    sgemm_packed(2, &[1.0; 4], false, &pb, &mut c, false, &Fuse::default()).unwrap();
    assert_eq!(c, vec![2.0; 6]);
}

/// Sizes whose products overflow are errors, not a short check: 2^20 x
/// 2^44 wraps to 0 elements, which an empty C would pass, and the tiles
/// would then be stored far past it (B generated, so nothing is read
/// from a short buffer first). Likewise an A or B of m * k or k * n
/// elements that wrap.
#[test]
fn overflowing_sizes_are_errors() {
    let (m, n, k) = (1usize << 20, 1usize << 44, 1);
    let a = vec![1.0f32; m];
    let gen = |_: usize, _: usize, _: usize, _: usize, _: usize, dst: &mut [f32]| dst.fill(1.0);
    let fuse = Fuse::default();
    assert!(sgemm_gen(m, n, k, &a, false, &gen, &mut [], false, &fuse).is_err());
    let pa = PackedA::new(&a, m, k).unwrap();
    assert!(sgemm_gen_packed_a(&pa, n, &gen, &mut [], false, &fuse).is_err());
    let big = 1usize << 32;
    assert!(sgemm_t(big, big, big, &[], false, &[], false, &mut [], false).is_err());
    assert!(PackedB::new(&[], big, big, false).is_err());
    assert!(PackedA::new(&[], big, big).is_err());
}

/// This process's user + system CPU time (Linux; 0 elsewhere), to
/// tell whether the threads ran at once on a loaded machine.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime
    // are the 14th and 15th fields overall, in clock ticks (100 Hz).
    let rest = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<f64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|x| x.parse().ok())
        .collect();
    f.iter().sum::<f64>() / 100.0
}

/// `cargo test --release --lib sgemm_bench -- --ignored --nocapture`
#[test]
#[ignore]
fn sgemm_bench() {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load: {}", load.trim());
    println!("kernel: {}", best_kernel().name);
    let reps: usize = std::env::var("SGEMM_REPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(15);
    // `SGEMM_SHAPES=2048x2048x2048,512x512x4096` measures other shapes.
    let shapes: Vec<(usize, usize, usize)> = std::env::var("SGEMM_SHAPES")
        .ok()
        .map(|s| {
            s.split(',')
                .filter_map(|t| {
                    let d: Vec<usize> =
                        t.split('x').filter_map(|v| v.trim().parse().ok()).collect();
                    (d.len() == 3).then(|| (d[0], d[1], d[2]))
                })
                .collect()
        })
        .unwrap_or_else(|| vec![(1024, 1024, 1024), (64, 3136, 576), (256, 256, 256)]);
    // `SGEMM_THREADS=1,2,8` measures other thread counts (1 and 2 unless
    // set); each figure is also given as a fraction of the FMA peak of
    // the kernel's instruction set at that count (as the benchmark
    // measures it), so that runs on other machines compare.
    let counts: Vec<usize> = std::env::var("SGEMM_THREADS")
        .ok()
        .map(|s| {
            s.split(',')
                .filter_map(|t| t.trim().parse().ok())
                .filter(|&t| t > 0)
                .collect()
        })
        .filter(|v: &Vec<usize>| !v.is_empty())
        .unwrap_or_else(|| vec![1, 2]);
    let peaks: Vec<f64> = counts
        .iter()
        .map(|&t| {
            measure_peak(best_kernel().name, t, std::time::Duration::from_millis(250))
                .map_or(f64::NAN, |p| p.gflops)
        })
        .collect();
    for (t, p) in counts.iter().zip(&peaks) {
        println!("peak {}: {t} threads {p:.1} GFLOP/s", best_kernel().name);
    }
    println!("{}", best_kernel().blocking_report());
    kernel_alone(peaks.get(counts.iter().position(|&t| t == 1).unwrap_or(usize::MAX)));
    for &(m, n, k) in &shapes {
        let a = data(m * k, 1);
        let b = data(k * n, 2);
        let pb = PackedB::new(&b, k, n, false).unwrap();
        let mut c = vec![0.0f32; m * n];
        let flops = 2.0 * (m * n * k) as f64;
        for (&threads, &peak) in counts.iter().zip(&peaks) {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            for packed in [false, true] {
                let mut best = f64::MAX;
                let mut times = Vec::new();
                let cpu0 = cpu_seconds();
                for _ in 0..reps {
                    let t = std::time::Instant::now();
                    pool.install(|| {
                        if packed {
                            sgemm_packed(m, &a, false, &pb, &mut c, true, &Fuse::default()).unwrap()
                        } else {
                            sgemm(m, n, k, &a, &b, &mut c, true)
                        }
                    });
                    let dt = t.elapsed().as_secs_f64();
                    times.push(dt);
                    best = best.min(dt);
                }
                let cpu = cpu_seconds() - cpu0;
                let wall: f64 = times.iter().sum();
                times.sort_by(f64::total_cmp);
                let med = times[times.len() / 2];
                println!(
                    "{m}x{n}x{k} threads={threads} packed={packed}: min {:.3} ms ({:.1} GFLOP/s, {:.0}% of peak), median {:.3} ms ({:.1} GFLOP/s, {:.0}%), cpu/wall {:.2}",
                    best * 1e3,
                    flops / best / 1e9,
                    100.0 * flops / best / 1e9 / peak,
                    med * 1e3,
                    flops / med / 1e9,
                    100.0 * flops / med / 1e9 / peak,
                    cpu / wall
                );
            }
        }
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load after: {}", load.trim());
}

/// The micro-kernel alone on one thread, its A and B panels (one KC
/// block) and C tile in L1, called again and again: the ceiling of the
/// blocked product on this machine, before any packing, blocking or
/// memory traffic. Printed beside the FMA peak, which a loop without
/// loads reaches and a kernel, which must load its operands, may not.
fn kernel_alone(peak: Option<&f64>) {
    let kern = best_kernel();
    let (mr, nr, kc) = (kern.mr, kern.nr, kern.kc);
    let mut a = AlignedBuf::try_zeroed(kc * mr).unwrap();
    a.as_mut_slice().copy_from_slice(&data(kc * mr, 1));
    let mut b = AlignedBuf::try_zeroed(kc * nr).unwrap();
    b.as_mut_slice().copy_from_slice(&data(kc * nr, 2));
    let mut c = vec![0.0f32; mr * nr];
    let calls = 20_000;
    let mut best = 0.0f64;
    for _ in 0..5 {
        let t = std::time::Instant::now();
        for _ in 0..calls {
            // SAFETY: the kernel is this CPU's best (its features are
            // present); `a` holds kc * mr floats and `b` kc * nr; `c` is
            // an mr x nr tile, nr apart, referenced by nothing else; no
            // fuse.
            unsafe {
                (kern.func)(
                    kc,
                    a.as_slice().as_ptr(),
                    b.as_slice().as_ptr(),
                    c.as_mut_ptr(),
                    nr,
                    true,
                    std::ptr::null(),
                )
            };
        }
        let gflops = 2.0 * (kc * mr * nr * calls) as f64 / t.elapsed().as_secs_f64() / 1e9;
        best = best.max(gflops);
    }
    let of_peak = peak.map_or(String::new(), |p| {
        format!(", {:.0}% of peak", 100.0 * best / p)
    });
    println!("kernel alone, panels in L1, 1 thread: {best:.1} GFLOP/s{of_peak}");
}

/// The edge kernels give the bits of the path they replace (the full
/// kernel into a scratch tile, copied, the bias and bounds applied in
/// scalar form), with B packed, in place and generated, one KC block or
/// several, a fused bias on rows or columns and bounds, on 1 and 2
/// threads.
#[test]
fn edge_kernels_give_the_bits_of_the_scratch_path() {
    for kern in available_kernels()
        .into_iter()
        .filter(|k| !k.edges.is_empty())
    {
        let plain = without_edges(kern);
        // Column edges of every narrow kind on both widths of panel (32
        // and 16): 49 (17 and 1 past the panels), 36 (4), 25 (25, 9),
        // 48 (16, none), 9 (9 on either); and of the column pass (one or
        // two columns past 16: 49, 33, 50, 18, 17, 2), over one row
        // panel to several groups of them, one KC block and several.
        for &(m, n, k) in &[
            (31, 50, 800),
            (130, 17, 40),
            (7, 18, 400),
            (61, 2, 9),
            (8, 70, 400),
            (20, 64, 100),
            (26, 33, 300),
            (100, 40, 30),
            (4, 96, 800),
            (2, 70, 7),
            (26, 49, 320),
            (13, 36, 96),
            (30, 25, 40),
            (12, 48, 17),
            (7, 9, 500),
        ] {
            edge_paths(kern, plain, (m, n, k), ALL_THREADS);
        }
    }
}

/// A narrow kernel writes the columns it computes with the full kernel's
/// bits, whether it adds to C or writes it, with a bias on rows or on
/// columns and bounds, and leaves the other columns of the tile alone.
/// (In a product they are called into scratch only, without either; the
/// edge test below covers that.)
#[test]
fn narrow_kernels_give_the_full_kernels_columns() {
    for kern in available_kernels() {
        let Some(narrow) = kern.narrow else { continue };
        let (mr, nr) = (kern.mr, kern.nr);
        for kc in [1, 5, 64] {
            let a = data(kc * mr, 11 + kc as u64);
            let b = data(kc * nr, 12 + kc as u64);
            let (rb, cb) = (data(mr, 13), data(nr, 14));
            let ldc = nr + 3;
            let c0: Vec<f32> = data(mr * ldc, 15);
            let fuses = [
                None,
                Some(TileFuse {
                    rb: rb.as_ptr(),
                    cb: std::ptr::null(),
                    lo: -0.5,
                    hi: 0.25,
                    clamp: true,
                }),
                Some(TileFuse {
                    rb: std::ptr::null(),
                    cb: cb.as_ptr(),
                    lo: 0.0,
                    hi: 0.0,
                    clamp: false,
                }),
            ];
            for fuse in &fuses {
                let tp = fuse
                    .as_ref()
                    .map_or(std::ptr::null(), |f| f as *const TileFuse);
                for accumulate in [false, true] {
                    let run = |func: KernelFn| {
                        let mut c = c0.clone();
                        // SAFETY: the kernel comes from this CPU's list;
                        // `a` holds kc * mr floats, `b` kc * nr, `c` mr
                        // rows of ldc >= nr; `tp` is null or points to
                        // a fuse whose biases hold mr and nr floats.
                        unsafe {
                            func(
                                kc,
                                a.as_ptr(),
                                b.as_ptr(),
                                c.as_mut_ptr(),
                                ldc,
                                accumulate,
                                tp,
                            )
                        };
                        c
                    };
                    let full = run(kern.func);
                    for (func, cols) in [(narrow.half, nr / 2), (narrow.half_and_one, nr / 2 + 1)] {
                        let got = run(func);
                        for r in 0..mr {
                            let row = r * ldc..(r + 1) * ldc;
                            let (g, f, o) = (&got[row.clone()], &full[row.clone()], &c0[row]);
                            let what = format!(
                                "{} kc={kc} cols={cols} row {r} acc={accumulate} fuse={}",
                                kern.name,
                                fuse.is_some()
                            );
                            assert!(same_bits(&g[..cols], &f[..cols]), "{what}");
                            assert!(same_bits(&g[cols..], &o[cols..]), "{what}: beyond");
                        }
                    }
                }
            }
        }
    }
}

/// `kern` with no edge kernels (so its edges take the scratch path), from
/// a static table: the packed forms hold `&'static Kernel`.
fn without_edges(kern: &'static Kernel) -> &'static Kernel {
    static PLAIN: std::sync::OnceLock<Vec<Kernel>> = std::sync::OnceLock::new();
    PLAIN
        .get_or_init(|| {
            available_kernels()
                .into_iter()
                .map(|k| Kernel {
                    edges: &[],
                    narrow: None,
                    column: None,
                    ..*k
                })
                .collect()
        })
        .iter()
        .find(|p| p.name == kern.name)
        .expect("every available kernel has a plain form")
}

/// [`edge_kernels_give_the_bits_of_the_scratch_path`] on one shape:
/// `plain` is `kern` without its edge kernels.
/// Thread counts as in [`kernel_paths`].
fn edge_paths(
    kern: &'static Kernel,
    plain: &'static Kernel,
    (m, n, k): (usize, usize, usize),
    threads: &[usize],
) {
    let a = data(m * k, 3 + m as u64);
    let b = data(k * n, 4 + n as u64);
    let (rbias, cbias) = (data(m, 5), data(n, 6));
    let am = Mat::new(&a, m, k, false).unwrap();
    let bm = Mat::new(&b, k, n, false).unwrap();
    let offs: Vec<usize> = (0..k).map(|p| p * n).collect();
    let rb = RowsB::new(&b, &offs, n).unwrap();
    let fuses = [
        None,
        Some(Fuse {
            row_bias: Some(&rbias),
            col_bias: None,
            bounds: Some((-0.5, 0.5)),
        }),
        Some(Fuse {
            row_bias: None,
            col_bias: Some(&cbias),
            bounds: None,
        }),
    ];
    for fuse in &fuses {
        for threads in some(threads, &[1, 2]) {
            let run = |kn: &'static Kernel, rows: bool| {
                let mut c = vec![2.0f32; m * n];
                let pb = PackedB::with_kernel(kn, &b, k, n, false).unwrap();
                let src = if rows {
                    BSrc::Rows(rb)
                } else {
                    BSrc::Packed(&pb)
                };
                gemm_blocked_a(
                    kn,
                    m,
                    n,
                    k,
                    ASrc::Plain(am),
                    src,
                    &mut c,
                    threads,
                    fuse.as_ref(),
                );
                c
            };
            for rows in [false, true] {
                let what = format!(
                    "{} {m}x{n}x{k} rows={rows} threads={threads} fuse={fuse:?}",
                    kern.name
                );
                let (got, want) = (run(kern, rows), run(plain, rows));
                assert!(same_bits(&got, &want), "{what}");
                check(&got, &naive_fused(m, n, k, &a, &b, fuse.as_ref()), k, &what);
            }
            let mut c = vec![2.0f32; m * n];
            gemm_blocked_a(
                kern,
                m,
                n,
                k,
                ASrc::Plain(am),
                BSrc::Plain(bm),
                &mut c,
                threads,
                fuse.as_ref(),
            );
            assert!(
                same_bits(&c, &run(plain, false)),
                "{} {m}x{n}x{k} plain B",
                kern.name
            );
        }
    }
}

/// `kern` with small blocks (several KC blocks and row blocks in the
/// tests' shapes) and the KC blocks grouped `kg` at a time, from a static
/// table (the product needs `&'static Kernel`); `kc` 0 keeps `kern`'s.
fn grouped(kern: &'static Kernel, kc: usize, kg: usize) -> &'static Kernel {
    static TABLE: std::sync::Mutex<Vec<&'static Kernel>> = std::sync::Mutex::new(Vec::new());
    let kc = if kc == 0 { kern.kc } else { kc };
    let mut table = TABLE.lock().unwrap();
    let same = |k: &&&Kernel| k.name == kern.name && k.kc == kc && k.kg == kg;
    if let Some(&k) = table.iter().find(same) {
        return k;
    }
    let k: &'static Kernel = Box::leak(Box::new(Kernel {
        kc,
        mc: kern.mr,
        nc: kern.nr * 4,
        kg,
        ..*kern
    }));
    table.push(k);
    k
}

/// Grouping KC blocks changes only where a C tile waits between blocks,
/// never the order of the sums: every B source, with A plain or packed,
/// fused or not, on one and two threads, gives the bits of one block at
/// a time.
#[test]
fn grouped_blocks_give_the_bits_of_one_block_at_a_time() {
    for kern in available_kernels() {
        let (mr, nr) = (kern.mr, kern.nr);
        for (m, n, k) in [
            (37, 70, 300),
            (mr * 13 + 4, nr * 9 + 3, 64 * 7 + 13),
            (mr * 2, nr, 128),
            (5, nr * 2, 65),
        ] {
            let a = data(m * k, 7 + m as u64);
            let b = data(k * n, 8 + n as u64);
            let rbias = data(m, 9);
            let am = Mat::new(&a, m, k, false).unwrap();
            let bm = Mat::new(&b, k, n, false).unwrap();
            let offs: Vec<usize> = (0..k).map(|p| p * n).collect();
            let rb = RowsB::new(&b, &offs, n).unwrap();
            let gen = |p0: usize, kc: usize, j0: usize, cols: usize, nr: usize, dst: &mut [f32]| {
                for (q, panel) in dst.chunks_mut(kc * nr).enumerate() {
                    let j = j0 + q * nr;
                    pack_b_panel(bm, p0, kc, j, nr.min(j0 + cols - j), nr, panel);
                }
            };
            let fuse = Fuse {
                row_bias: Some(&rbias),
                col_bias: None,
                bounds: Some((-1.5, 1.5)),
            };
            let run = |kn: &'static Kernel, src: usize, fused: bool, threads: usize| {
                let pb = PackedB::with_kernel(kn, &b, k, n, false).unwrap();
                let bsrc = match src {
                    0 => BSrc::Plain(bm),
                    1 => BSrc::Packed(&pb),
                    2 => BSrc::Gen(&gen),
                    _ => BSrc::Rows(rb),
                };
                let mut c = vec![3.0f32; m * n];
                let f = fused.then_some(&fuse);
                gemm_blocked_a(kn, m, n, k, ASrc::Plain(am), bsrc, &mut c, threads, f);
                c
            };
            let one = grouped(kern, 64, 1);
            for kg in [2, 3, MAX_KG] {
                let many = grouped(kern, 64, kg);
                // The first two shapes are grouped on one thread and two.
                if m == 37 || m == mr * 13 + 4 {
                    assert!(many.grouping(m, n, k, 2).0 > 1, "{} kg {kg}", kern.name);
                }
                for src in 0..4 {
                    for fused in [false, true] {
                        for threads in [1, 2] {
                            let want = run(one, src, fused, 1);
                            let got = run(many, src, fused, threads);
                            let what = format!(
                                "{} {m}x{n}x{k} kg {kg} src {src} fused {fused} threads {threads}",
                                kern.name
                            );
                            assert!(same_bits(&got, &want), "{what}");
                        }
                    }
                }
            }
            check(
                &run(one, 0, false, 1),
                &naive(m, n, k, &a, false, &b, false),
                k,
                "one",
            );
        }
    }
    // A packed in advance (in the best kernel's blocks).
    let best = best_kernel();
    let (m, k) = (best.mr * 20 + 7, best.kc * 2 + 100);
    // Columns enough that half of C outgrows the A block's room (mc = mr
    // here), whatever the kernel's nr and kc, so that the product groups.
    let n = (best.nr * 3 + 1).max(4 * best.mr * best.kc / m + 1);
    let a = data(m * k, 11);
    let b = data(k * n, 12);
    let pa = PackedA::new(&a, m, k).unwrap();
    let bm = Mat::new(&b, k, n, false).unwrap();
    let am = Mat::new(&a, m, k, false).unwrap();
    let mut want = vec![0.0f32; m * n];
    let one = grouped(best, 0, 1);
    gemm_blocked_a(
        one,
        m,
        n,
        k,
        ASrc::Plain(am),
        BSrc::Plain(bm),
        &mut want,
        1,
        None,
    );
    for kg in [2, 3] {
        for threads in [1, 2] {
            let mut got = vec![0.0f32; m * n];
            let many = grouped(best, 0, kg);
            assert!(many.grouping(m, n, k, threads).0 > 1);
            let src = ASrc::Packed(&pa);
            gemm_blocked_a(many, m, n, k, src, BSrc::Plain(bm), &mut got, threads, None);
            assert!(same_bits(&got, &want), "packed A kg {kg} threads {threads}");
        }
    }
}

/// [`naive`] with a fused bias and bounds applied after.
fn naive_fused(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    b: &[f32],
    fuse: Option<&Fuse>,
) -> Vec<f32> {
    let mut c = naive(m, n, k, a, false, b, false);
    if let Some(f) = fuse {
        for (i, row) in c.chunks_mut(n).enumerate() {
            f.apply(i, 0, row);
        }
    }
    c
}

/// The paths above on shapes small enough for Miri (`scripts/miri.sh`),
/// which interprets the packing, the kernels' raw pointer reads and
/// writes and the tasks' shared C for undefined behaviour. Each shape
/// is a few thousand multiply-adds at most, yet together they reach
/// every edge of the blocked product for the portable kernel (4 x 8
/// tiles) and AVX2's (6 x 16, edge kernels of 2 and 4 rows): partial
/// row and column panels, two KC blocks (the second accumulating, and
/// shallow), two MC row blocks, two NC column blocks, B packed in
/// parallel groups of 8 panels, one row, and empty dimensions. They run
/// on one thread, except the shapes of `SPLIT`: under Miri a
/// parallel section costs about a second (its threads are interpreted
/// too, spinning included).
mod miri {
    use super::*;

    const SHAPES: &[(usize, usize, usize)] = &[
        (0, 3, 4),
        (3, 0, 4),
        (3, 4, 0),
        (1, 1, 1),
        (1, 20, 3),
        (2, 3, 4),
        (4, 8, 3),
        (6, 16, 3),
        (7, 17, 5),
        (8, 33, 2),
        (10, 16, 2),
        (5, 9, 257),
        (145, 2, 3),
    ];

    /// Shapes split across two threads: tiles of one C written from
    /// both (row blocks, then column chunks), B packed in parallel
    /// groups of 8 panels, one row streamed in parallel.
    const SPLIT: &[(usize, usize, usize)] = &[(3, 130, 2), (145, 17, 2), (1, 40, 3)];

    /// Two NC blocks of columns (4096 for every kernel): one thread,
    /// one transposition, as the column count makes it the longest
    /// case here.
    const WIDE: (usize, usize, usize) = (2, 4097, 1);

    #[test]
    fn every_kernel_matches_naive_small() {
        for kern in available_kernels() {
            for &(m, n, k) in SHAPES {
                for (a_t, b_t) in [(false, false), (true, false), (false, true), (true, true)] {
                    kernel_paths(kern, m, n, k, a_t, b_t, &[1]);
                }
            }
            let (m, n, k) = WIDE;
            kernel_paths(kern, m, n, k, false, false, &[1]);
        }
    }

    #[test]
    fn every_kernel_splits_across_threads_small() {
        for kern in available_kernels() {
            for &(m, n, k) in SPLIT {
                kernel_paths(kern, m, n, k, false, false, &[1, 2]);
            }
        }
    }

    #[test]
    fn public_entry_points_small() {
        for &(m, n, k) in SHAPES {
            entry_points(m, n, k);
        }
    }

    #[test]
    fn edge_kernels_give_the_bits_of_the_scratch_path_small() {
        for kern in available_kernels()
            .into_iter()
            .filter(|k| !k.edges.is_empty())
        {
            let plain = without_edges(kern);
            // Edges of 2 and 4 rows (AVX2) or 4 and 8 (AVX-512), one KC
            // block and two, whole and partial column panels; one
            // split across threads.
            for &(m, n, k) in &[(8, 32, 3), (10, 33, 2), (4, 16, 257)] {
                edge_paths(kern, plain, (m, n, k), &[1]);
            }
            edge_paths(kern, plain, (20, 40, 2), &[1, 2]);
        }
    }
}

#[test]
fn a_few_rows_give_the_bits_of_one_row_at_a_time() {
    // Attention's query rows against a cache block (gemv_rows): every
    // vector form the CPU has, the tiles and the columns past them, a
    // row stride wider than the columns, against `gemv` row by row.
    for (m, n, k, rs) in [
        (1, 96, 20, 100),
        (2, 5, 3, 5),
        (3, 128, 64, 128),
        (4, 70, 9, 80),
        (3, 33, 1, 40),
        (2, 64, 128, 64),
        // Tiles of every width in one product (8, 4 and 2 vectors, then
        // the columns past them), and 4 rows (4 then 2).
        (3, 128 + 64 + 32 + 5, 7, 240),
        (1, 300, 3, 300),
        (4, 100, 5, 100),
    ] {
        let a = data(m * k, (m * n + k) as u64);
        let b = data(k * rs, rs as u64);
        let bm = Mat::new(&b, k, rs, false).unwrap();
        let mut want = vec![0f32; m * n];
        for (row, dst) in a.chunks_exact(k).zip(want.chunks_exact_mut(n)) {
            gemv(n, k, row, bm, dst, 1);
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let mut got = vec![f32::NAN; m * n];
        gemv_rows(m, n, k, &a, bm, &mut got, 1);
        assert_eq!(bits(&got), bits(&want), "gemv_rows {m}x{n}x{k}");
        // A float16 B ([k, n], row-major) read as it is: the bits of the
        // same rows against B widened first.
        let mut h = vec![0u16; k * n];
        let dense: Vec<f32> = (0..k * n).map(|i| b[i / n * rs + i % n]).collect();
        crate::f16::narrow(&dense, &mut h);
        let mut wide = vec![0f32; k * n];
        crate::f16::widen(&h, &mut wide);
        let wm = Mat::new(&wide, k, n, false).unwrap();
        let mut want16 = vec![0f32; m * n];
        for (row, dst) in a.chunks_exact(k).zip(want16.chunks_exact_mut(n)) {
            gemv(n, k, row, wm, dst, 1);
        }
        let mut got16 = vec![f32::NAN; m * n];
        sgemm_f16b(m, n, k, &a, &h, &mut got16, false).unwrap();
        assert_eq!(bits(&got16), bits(&want16), "sgemm_f16b {m}x{n}x{k}");
        #[cfg(target_arch = "x86_64")]
        {
            use crate::backend::cpu::simd::{detected_level, SimdLevel};
            type Form = unsafe fn(usize, usize, usize, &[f32], &[f32], usize, &mut [f32]) -> usize;
            let mut forms: Vec<(&str, Form)> = Vec::new();
            if detected_level() >= SimdLevel::Avx2 {
                forms.push(("avx2", rows_x86::avx2));
            }
            if detected_level() >= SimdLevel::Avx512 {
                forms.push(("avx512", rows_x86::avx512));
            }
            for (name, f) in forms {
                let mut got = want.clone();
                got.iter_mut().for_each(|x| *x = f32::NAN);
                // SAFETY: the CPU has the form's features (detected
                // above); the operands have the shapes the form needs.
                let done = unsafe { f(m, n, k, &a, &b, rs, &mut got) };
                for (g, w) in got.chunks_exact(n).zip(want.chunks_exact(n)) {
                    assert_eq!(bits(&g[..done]), bits(&w[..done]), "{name} {m}x{n}x{k}");
                }
            }
        }
    }
}

#[test]
fn outer_products_give_the_bits_of_the_blocked_path() {
    // k = 1 (a decoding step's one-hot placement of its new rows): the
    // product sgemm_t takes against the blocked kernel's, every layout,
    // with signed zeros and a zero row among the values.
    for (m, n) in [(5, 3), (128, 64), (64, 128), (33, 17)] {
        for (a_t, b_t) in [(false, false), (true, false), (false, true), (true, true)] {
            let mut a = data(m, m as u64);
            let mut b = data(n, n as u64 + 7);
            a[0] = -0.0;
            a[1] = 0.0;
            b[0] = -0.0;
            let mut got = vec![f32::NAN; m * n];
            sgemm_t(m, n, 1, &a, a_t, &b, b_t, &mut got, false).unwrap();
            let (am, bm) = (
                Mat::new(&a, m, 1, a_t).unwrap(),
                Mat::new(&b, 1, n, b_t).unwrap(),
            );
            for kern in available_kernels() {
                let mut want = vec![f32::NAN; m * n];
                gemm_blocked(kern, m, n, 1, am, BSrc::Plain(bm), &mut want, 1);
                assert!(
                    same_bits(&got, &want),
                    "{} {m}x{n} a_t {a_t} b_t {b_t}",
                    kern.name()
                );
            }
        }
    }
}

/// `sgemm_t` reads a row-major B in place for a product of few rows
/// (`reads_b_in_place`), and packs it otherwise: either way the bits of
/// the packed path, edge columns and the deep products' KC blocks
/// included.
#[test]
fn sgemm_reads_b_in_place_with_the_packed_bits() {
    let kern = best_kernel();
    for &(m, n, k, in_place) in &[
        (128, 128, 64, true),
        (37, 100, 130, true),
        (13, 45, 800, true),
        (512, 96, 20, true),
        (513, 96, 20, false),
        (20, 1024, 50, false),
        (20, 2048, 9, false),
    ] {
        assert_eq!(
            reads_b_in_place(kern, m, n),
            in_place && kern.rows.is_some(),
            "{m}x{n}"
        );
        let (a, b) = (data(m * k, 11), data(k * n, 12));
        let am = Mat::new(&a, m, k, false).unwrap();
        let bm = Mat::new(&b, k, n, false).unwrap();
        for threads in [1, 2] {
            let mut packed = vec![3.0f32; m * n];
            gemm_blocked(kern, m, n, k, am, BSrc::Plain(bm), &mut packed, threads);
            let mut c = vec![7.0f32; m * n];
            sgemm_t(m, n, k, &a, false, &b, false, &mut c, threads > 1).unwrap();
            assert!(same_bits(&packed, &c), "{m}x{n}x{k} threads={threads}");
        }
        let mut c = vec![0.0f32; m * n];
        sgemm(m, n, k, &a, &b, &mut c, false);
        check(&c, &naive(m, n, k, &a, false, &b, false), k, "in place");
    }
}
