use super::kernels::{self, available, PORTABLE};
use super::*;
use crate::backend::testing::random;

/// Random codes (4 or 8 bits), scales and offsets for an [n, k] matrix.
fn matrix(n: usize, k: usize, wide: bool, seed: u64) -> (Vec<i32>, Vec<f32>, Vec<f32>) {
    let r = random(n * k, seed);
    let codes: Vec<i32> = r
        .iter()
        .map(|&x| {
            let u = ((x + 2.0) * 0.25 * 255.99) as i32;
            if wide {
                u - 128
            } else {
                u >> 4
            }
        })
        .collect();
    let blocks = n * k / QK;
    let d = random(blocks, seed + 1)
        .iter()
        .map(|x| 0.01 + x.abs() * 0.02)
        .collect();
    let m = random(blocks, seed + 2).iter().map(|x| x * 0.1).collect();
    (codes, d, m)
}

/// The product from the definition, in f64 over float32 weights.
fn naive(
    rows: usize,
    a: &[f32],
    codes: &[i32],
    d: &[f32],
    m: &[f32],
    n: usize,
    k: usize,
) -> Vec<f32> {
    let mut c = vec![0f32; rows * n];
    for i in 0..rows {
        for j in 0..n {
            let mut s = 0f64;
            for t in 0..k {
                let b = (j * k + t) / QK;
                let w = codes[j * k + t] as f32 * d[b] + m[b];
                s += a[i * k + t] as f64 * w as f64;
            }
            c[i * n + j] = s as f32;
        }
    }
    c
}

/// Within what a float32 sum of k products rounds to: relative to the
/// sum of the products' magnitudes.
fn assert_close(got: &[f32], want: &[f32], scale: &[f32], what: &str) {
    assert_eq!(got.len(), want.len());
    for (i, ((g, w), s)) in got.iter().zip(want).zip(scale).enumerate() {
        let tol = 1e-5 * s.max(1.0);
        assert!(
            (g - w).abs() <= tol,
            "{what}: element {i}: {g} against {w} (tolerance {tol})"
        );
    }
}

/// The sums of |a| * |w| for each output, the scale of its rounding.
fn magnitudes(
    rows: usize,
    a: &[f32],
    codes: &[i32],
    d: &[f32],
    m: &[f32],
    n: usize,
    k: usize,
) -> Vec<f32> {
    let abs_a: Vec<f32> = a.iter().map(|x| x.abs()).collect();
    let abs_c: Vec<i32> = codes.iter().map(|x| x.abs()).collect();
    let abs_m: Vec<f32> = m.iter().map(|x| x.abs()).collect();
    naive(rows, &abs_a, &abs_c, d, &abs_m, n, k)
}

#[test]
fn every_kernel_matches_the_portable_one() {
    for wide in [false, true] {
        let (n, k) = (3, 256);
        let (codes, d, _) = matrix(n, k, wide, 7);
        let q = QMatrix::pack(n, k, wide, |i| codes[i], d.clone(), vec![0.0; n * k / QK]).unwrap();
        let a = random(k, 9);
        for kernel in available() {
            for r in 0..n {
                let dr = &d[r * k / QK..(r + 1) * k / QK];
                let (want, got) = match (q.codes.nibbles(), q.codes.bytes()) {
                    (Some(c), _) => {
                        let c = &c[r * k / 2..(r + 1) * k / 2];
                        (PORTABLE.q4(c, dr, &a), kernel.q4(c, dr, &a))
                    }
                    (_, Some(c)) => {
                        let c = &c[r * k..(r + 1) * k];
                        (PORTABLE.q8(c, dr, &a), kernel.q8(c, dr, &a))
                    }
                    _ => unreachable!("a matrix has 4- or 8-bit codes"),
                };
                let tol = 1e-5 * want.abs().max(1.0);
                assert!(
                    (got - want).abs() <= tol,
                    "{} wide {wide}: {got} against {want}",
                    kernel.name
                );
            }
        }
    }
}

#[test]
fn products_match_the_definition() {
    // Rows below and above SMALL_M; a column count that is not a whole
    // number of tasks or tiles.
    for wide in [false, true] {
        for rows in [1, 3, SMALL_M, 19] {
            let (n, k) = (70, 96);
            let (codes, d, m) = matrix(n, k, wide, rows as u64);
            let q = QMatrix::pack(n, k, wide, |i| codes[i], d.clone(), m.clone()).unwrap();
            let a = random(rows * k, 100 + rows as u64);
            let mut c = vec![f32::NAN; rows * n];
            product(rows, &a, &q, &mut c).unwrap();
            let want = naive(rows, &a, &codes, &d, &m, n, k);
            let mag = magnitudes(rows, &a, &codes, &d, &m, n, k);
            assert_close(&c, &want, &mag, &format!("wide {wide} rows {rows}"));
        }
    }
}

#[test]
fn bad_shapes_and_codes_are_errors() {
    let d = vec![1.0; 2];
    assert!(QMatrix::pack(2, 33, false, |_| 0, d.clone(), d.clone()).is_err());
    assert!(QMatrix::pack(2, 32, false, |_| 16, d.clone(), d.clone()).is_err());
    assert!(QMatrix::pack(2, 32, true, |_| 128, d.clone(), d.clone()).is_err());
    assert!(QMatrix::pack(2, 32, false, |_| 0, vec![1.0], d.clone()).is_err());
    let q = QMatrix::pack(2, 32, false, |i| (i % 16) as i32, d.clone(), d).unwrap();
    assert_eq!(q.bytes(), 32 + 2 * 2 + 2 * 4);
    let mut c = vec![0.0; 2];
    assert!(product(1, &[0.0; 31], &q, &mut c).is_err());
    assert!(product(1, &[0.0; 32], &q, &mut c[..1]).is_err());
}

/// `uint4`/`int8` bytes of the codes as a WebNN constant holds them.
fn constant_bytes(codes: &[i32], wide: bool) -> Vec<u8> {
    match wide {
        true => codes.iter().map(|&c| c as i8 as u8).collect(),
        false => codes
            .chunks_exact(2)
            .map(|p| (p[0] as u8) | (p[1] as u8) << 4)
            .collect(),
    }
}

#[test]
fn shared_constant_bytes_give_the_packed_products() {
    for wide in [false, true] {
        for rows in [1, 5, 19] {
            let (n, k) = (40, 128);
            let (codes, d, m) = matrix(n, k, wide, 30 + rows as u64);
            let bytes = Arc::new(constant_bytes(&codes, wide));
            let shared = QMatrix::share(n, k, wide, bytes.clone(), d.clone(), m.clone()).unwrap();
            assert!(shared.shares_codes());
            let packed = QMatrix::pack(n, k, wide, |i| codes[i], d.clone(), m.clone()).unwrap();
            assert!(!packed.shares_codes());
            // The packed codes are the constant's bytes themselves.
            let own = match (packed.codes.nibbles(), packed.codes.bytes()) {
                (Some(c), _) => c.to_vec(),
                (_, Some(c)) => c.iter().map(|&x| x as u8).collect(),
                _ => unreachable!("a matrix has 4- or 8-bit codes"),
            };
            assert_eq!(own, *bytes);
            let a = random(rows * k, 200 + rows as u64);
            let (mut c1, mut c2) = (vec![f32::NAN; rows * n], vec![f32::NAN; rows * n]);
            product(rows, &a, &shared, &mut c1).unwrap();
            product(rows, &a, &packed, &mut c2).unwrap();
            assert_eq!(c1, c2, "wide {wide} rows {rows}");
            let want = naive(rows, &a, &codes, &d, &m, n, k);
            let mag = magnitudes(rows, &a, &codes, &d, &m, n, k);
            assert_close(
                &c1,
                &want,
                &mag,
                &format!("shared, wide {wide} rows {rows}"),
            );
        }
    }
    // Too few bytes for the shape.
    let d = vec![1.0; 2];
    assert!(QMatrix::share(2, 32, false, Arc::new(vec![0; 31]), d.clone(), d.clone()).is_err());
    assert!(QMatrix::share(2, 32, true, Arc::new(vec![0; 63]), d.clone(), d).is_err());
}

#[test]
fn zero_offsets_are_not_kept() {
    let (n, k) = (4, 64);
    let d = vec![0.5; n * k / QK];
    let q = QMatrix::pack(
        n,
        k,
        false,
        |i| (i % 16) as i32,
        d.clone(),
        vec![0.0; n * k / QK],
    )
    .unwrap();
    // Float16 scales (0.5 is one) are kept in 2 bytes, others in 4.
    assert_eq!(q.bytes(), n * k / 2 + d.len() * 2);
    let d1 = vec![0.1; n * k / QK];
    let q1 = QMatrix::pack(
        n,
        k,
        false,
        |i| (i % 16) as i32,
        d1.clone(),
        vec![0.0; d1.len()],
    )
    .unwrap();
    assert_eq!(q1.bytes(), n * k / 2 + d1.len() * 4);
    assert!(q1.has_blocks(&d1, &vec![0.0; d1.len()]));
    assert!(q.has_blocks(&d, &vec![0.0; d.len()]));
    assert!(
        q.has_blocks(&d, &vec![-0.0; d.len()]),
        "no offsets, of either sign"
    );
    assert!(!q.has_blocks(&d, &vec![1.0; d.len()]));
    assert!(!q.has_blocks(&vec![0.25; d.len()], &vec![0.0; d.len()]));
}

/// Activations that are int8 codes times a float16 scale per block, as a
/// graph with llama.cpp's rounding makes them.
fn int8_rows(rows: usize, k: usize, seed: u64) -> Vec<f32> {
    let r = random(rows * k, seed);
    let mut a = vec![0f32; rows * k];
    for (blk, out) in r.chunks_exact(QK).zip(a.chunks_exact_mut(QK)) {
        let amax = blk.iter().fold(0f32, |m, x| m.max(x.abs()));
        let d = amax / 127.0;
        let d16 = crate::f16::f16_to_f32(crate::f16::f32_to_f16(d));
        for (o, &x) in out.iter_mut().zip(blk) {
            *o = (x / d).round() * d16;
        }
    }
    a
}

#[test]
fn int8_activations_are_recognised_only_when_exact() {
    let a = int8_rows(3, 96, 40);
    let (qa, da) = exact_int8(&a).unwrap().expect("exact int8 rows");
    for (i, &x) in a.iter().enumerate() {
        assert_eq!(qa[i] as f32 * da[i / QK], x);
    }
    // A zero block; ordinary floats; a NaN in an otherwise zero block.
    let mut z = a.clone();
    z[32..64].fill(0.0);
    assert!(exact_int8(&z).unwrap().is_some());
    assert!(exact_int8(&random(96, 41)).unwrap().is_none());
    z[40] = f32::NAN;
    assert!(exact_int8(&z).unwrap().is_none());
    let mut inf = a.clone();
    inf[5] = f32::INFINITY;
    assert!(exact_int8(&inf).unwrap().is_none());
}

/// The vector form of the int8 check (where the CPU has one) finds the
/// portable loop's codes and scales, and declines the same blocks: exact
/// rows, zeros of both signs, a block of zeros with a NaN, infinities,
/// NaNs beside other values, and values off the grid by one ulp.
#[test]
fn the_int8_check_on_vectors_is_the_loop() {
    let base = int8_rows(4, 128, 70);
    let mut cases = vec![base.clone(), random(128, 71)];
    let mut z = base.clone();
    z[32..64].fill(0.0);
    z[40] = -0.0;
    cases.push(z.clone());
    let mut zn = z.clone();
    zn[41] = f32::NAN;
    cases.push(zn);
    for (at, v) in [
        (5, f32::INFINITY),
        (6, f32::NEG_INFINITY),
        (7, f32::NAN),
        (100, f32::NAN),
    ] {
        let mut c = base.clone();
        c[at] = v;
        cases.push(c);
    }
    let mut off = base.clone();
    off[77] = f32::from_bits(off[77].to_bits() + 1);
    cases.push(off);
    for (i, a) in cases.iter().enumerate() {
        let (mut q0, mut d0) = (vec![0i8; a.len()], vec![0f32; a.len() / QK]);
        let want = exact_int8_portable(a, &mut q0, &mut d0);
        let (mut q1, mut d1) = (vec![0i8; a.len()], vec![0f32; a.len() / QK]);
        if let Some(got) = super::tiles::exact_int8(a, &mut q1, &mut d1) {
            assert_eq!(got, want, "case {i}");
            if want {
                assert_eq!(q1, q0, "case {i}");
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&d1), bits(&d0), "case {i}");
            }
        }
        assert_eq!(want, i == 0 || i == 2, "case {i}");
    }
}

#[test]
fn integer_kernels_match_the_integer_reference_and_the_float_forms() {
    for wide in [false, true] {
        let (n, k) = (5, 256);
        let (codes, d, _) = matrix(n, k, wide, 50);
        let q = QMatrix::pack(n, k, wide, |i| codes[i], d.clone(), vec![0.0; n * k / QK]).unwrap();
        let a = int8_rows(1, k, 51);
        let (qa, da) = exact_int8(&a).unwrap().unwrap();
        for kernel in available() {
            for r in 0..n {
                let dr = &d[r * k / QK..(r + 1) * k / QK];
                let (reference, got, float) = match (q.codes.nibbles(), q.codes.bytes()) {
                    (Some(c), _) => {
                        let c = &c[r * k / 2..(r + 1) * k / 2];
                        // The float forms take each block's even and odd
                        // activations apart, the integer ones in order.
                        let mut parted = vec![0f32; k];
                        deinterleave(&a, &mut parted);
                        (
                            kernels::q4i_portable(c, dr, &qa, &da),
                            kernel.q4i(c, dr, &qa, &da),
                            PORTABLE.q4(c, dr, &parted),
                        )
                    }
                    (_, Some(c)) => {
                        let c = &c[r * k..(r + 1) * k];
                        (
                            kernels::q8i_portable(c, dr, &qa, &da),
                            kernel.q8i(c, dr, &qa, &da),
                            PORTABLE.q8(c, dr, &a),
                        )
                    }
                    _ => unreachable!("a matrix has 4- or 8-bit codes"),
                };
                for (what, v) in [("kernel", got), ("float form", float)] {
                    let tol = 1e-5 * reference.abs().max(1.0);
                    assert!(
                        (v - reference).abs() <= tol,
                        "{} wide {wide} {what}: {v} against {reference}",
                        kernel.name
                    );
                }
            }
        }
    }
}

#[test]
fn products_over_int8_activations_match_the_definition() {
    for wide in [false, true] {
        for rows in [1, 4] {
            let (n, k) = (70, 128);
            let (codes, d, m) = matrix(n, k, wide, 60 + rows as u64);
            let q = QMatrix::pack(n, k, wide, |i| codes[i], d.clone(), m.clone()).unwrap();
            let a = int8_rows(rows, k, 61);
            let mut c = vec![f32::NAN; rows * n];
            product(rows, &a, &q, &mut c).unwrap();
            let want = naive(rows, &a, &codes, &d, &m, n, k);
            let mag = magnitudes(rows, &a, &codes, &d, &m, n, k);
            assert_close(
                &c,
                &want,
                &mag,
                &format!("int8 rows, wide {wide} rows {rows}"),
            );
        }
    }
}

#[test]
fn float16_scales_are_kept_as_such_and_give_the_definition() {
    for wide in [false, true] {
        for rows in [1, 3, 19] {
            let (n, k) = (33, 96);
            let (codes, d, m) = matrix(n, k, wide, 70 + rows as u64);
            let d16: Vec<f32> = d
                .iter()
                .map(|&x| crate::f16::f16_to_f32(crate::f16::f32_to_f16(x)))
                .collect();
            let q = QMatrix::pack(n, k, wide, |i| codes[i], d16.clone(), m.clone()).unwrap();
            assert!(matches!(q.d, Scales::F16(_)));
            assert!(q.has_blocks(&d16, &m) && !q.has_blocks(&d, &m));
            let a = random(rows * k, 71);
            let mut c = vec![f32::NAN; rows * n];
            product(rows, &a, &q, &mut c).unwrap();
            let want = naive(rows, &a, &codes, &d16, &m, n, k);
            let mag = magnitudes(rows, &a, &codes, &d16, &m, n, k);
            assert_close(
                &c,
                &want,
                &mag,
                &format!("float16 scales, wide {wide} rows {rows}"),
            );
        }
    }
}

/// Scales read from a float16 constant's bytes give the products of the
/// matrix's own copy, bit for bit; bytes that are not exactly its scales
/// (one value off, too few, or scales that float16 cannot hold) leave
/// it its copy.
#[test]
fn scales_are_read_from_a_float16_constant_that_holds_them() {
    use crate::f16::{f16_to_f32, f32_to_f16};
    let (n, k) = (24, 128);
    for wide in [false, true] {
        let (codes, d, m) = matrix(n, k, wide, 90);
        let d16: Vec<f32> = d.iter().map(|&x| f16_to_f32(f32_to_f16(x))).collect();
        let halves: Vec<u8> = d16
            .iter()
            .flat_map(|&x| f32_to_f16(x).to_le_bytes())
            .collect();
        let own = QMatrix::pack(n, k, wide, |i| codes[i], d16.clone(), m.clone()).unwrap();
        let mut shared = QMatrix::pack(n, k, wide, |i| codes[i], d16.clone(), m.clone()).unwrap();
        assert!(shared.read_scales_from(Arc::new(halves.clone())));
        assert!(shared.shares_scales() && shared.has_blocks(&d16, &m));
        for rows in [1, 4, 19] {
            let a = random(rows * k, 91 + rows as u64);
            let (mut c1, mut c2) = (vec![f32::NAN; rows * n], vec![f32::NAN; rows * n]);
            product(rows, &a, &own, &mut c1).unwrap();
            product(rows, &a, &shared, &mut c2).unwrap();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&c1), bits(&c2), "wide {wide} rows {rows}");
        }
        let mut off = halves.clone();
        off[6] ^= 1;
        let mut q = QMatrix::pack(n, k, wide, |i| codes[i], d16.clone(), m.clone()).unwrap();
        assert!(!q.read_scales_from(Arc::new(off)));
        assert!(!q.read_scales_from(Arc::new(halves[..halves.len() - 2].to_vec())));
        assert!(!q.shares_scales());
        assert!(
            !QMatrix::pack(n, k, wide, |i| codes[i], d.clone(), m.clone())
                .unwrap()
                .read_scales_from(Arc::new(halves))
        );
    }
}

#[test]
fn four_row_forms_give_the_one_row_sums_bit_for_bit() {
    for wide in [false, true] {
        let (n, k) = (9, 192);
        let nb = k / QK;
        let (codes, d, _) = matrix(n, k, wide, 70);
        let q = QMatrix::pack(n, k, wide, |i| codes[i], d.clone(), vec![0.0; n * nb]).unwrap();
        let a = int8_rows(1, k, 71);
        let (qa, da) = exact_int8(&a).unwrap().unwrap();
        // Every x86 integer form (AVX2's byte multiplies, VNNI's dot
        // products) takes the same exact lane sums in the same order:
        // the one-row sums of the first are every other's too.
        let integer: Vec<_> = available().into_iter().filter(|k| k.integer()).collect();
        for kernel in available() {
            for r in 0..=n - kernels::ROWS {
                let rows = r..r + kernels::ROWS;
                let dr = &d[rows.start * nb..rows.end * nb];
                let one = |kernel: &kernels::Kernel| -> [f32; kernels::ROWS] {
                    std::array::from_fn(|j| {
                        let dj = &d[(r + j) * nb..(r + j + 1) * nb];
                        match (q.codes.nibbles(), q.codes.bytes()) {
                            (Some(c), _) => {
                                kernel.q4i(&c[(r + j) * k / 2..(r + j + 1) * k / 2], dj, &qa, &da)
                            }
                            (_, Some(c)) => {
                                kernel.q8i(&c[(r + j) * k..(r + j + 1) * k], dj, &qa, &da)
                            }
                            _ => unreachable!("a matrix has 4- or 8-bit codes"),
                        }
                    })
                };
                let mut four = [0f32; kernels::ROWS];
                match (q.codes.nibbles(), q.codes.bytes()) {
                    (Some(c), _) => kernel.q4i4(
                        &c[rows.start * k / 2..rows.end * k / 2],
                        dr,
                        &qa,
                        &da,
                        &mut four,
                    ),
                    (_, Some(c)) => {
                        kernel.q8i4(&c[rows.start * k..rows.end * k], dr, &qa, &da, &mut four)
                    }
                    _ => unreachable!("a matrix has 4- or 8-bit codes"),
                };
                let bits = |v: [f32; kernels::ROWS]| v.map(f32::to_bits);
                assert_eq!(
                    bits(four),
                    bits(one(kernel)),
                    "{} wide {wide} rows {rows:?}",
                    kernel.name
                );
                if let (true, Some(first)) = (kernel.integer(), integer.first()) {
                    assert_eq!(
                        bits(one(kernel)),
                        bits(one(first)),
                        "{} against {}, wide {wide} rows {rows:?}",
                        kernel.name,
                        first.name
                    );
                }
            }
            // Two groups in one call: each row's sum in its place.
            let whole = 2 * kernels::ROWS;
            let mut got = vec![f32::NAN; whole];
            match (q.codes.nibbles(), q.codes.bytes()) {
                (Some(c), _) => {
                    kernel.q4i4(&c[..whole * k / 2], &d[..whole * nb], &qa, &da, &mut got)
                }
                (_, Some(c)) => kernel.q8i4(&c[..whole * k], &d[..whole * nb], &qa, &da, &mut got),
                _ => unreachable!("a matrix has 4- or 8-bit codes"),
            }
            for (r, g) in got.iter().enumerate() {
                let dr = &d[r * nb..(r + 1) * nb];
                let want = match (q.codes.nibbles(), q.codes.bytes()) {
                    (Some(c), _) => kernel.q4i(&c[r * k / 2..(r + 1) * k / 2], dr, &qa, &da),
                    (_, Some(c)) => kernel.q8i(&c[r * k..(r + 1) * k], dr, &qa, &da),
                    _ => unreachable!("a matrix has 4- or 8-bit codes"),
                };
                assert_eq!(
                    g.to_bits(),
                    want.to_bits(),
                    "{} wide {wide} row {r} of two groups",
                    kernel.name
                );
            }
        }
    }
}

#[test]
fn the_bandwidth_measurement_reports_both_rates() {
    let r = measure_gemv(1, 100_000, std::time::Duration::from_millis(1)).unwrap();
    assert!(r.bytes >= 100_000, "{r:?}");
    assert!(r.weights > 0.0 && r.weights.is_finite(), "{r:?}");
    assert!(r.read > 0.0 && r.read.is_finite(), "{r:?}");
    assert_eq!(r.isa, kernels::isa_name());
}

/// A prompt's product (SMALL_M rows or more) dequantizes the weights
/// into the GEMM's packed panels: the bits of the float32 GEMM over the
/// dequantized matrix (`code * d + m`), for both code widths, a K of
/// several of the GEMM's K blocks (its edges inside blocks of 32), and
/// an N that is no whole number of panels.
#[test]
fn prompt_products_give_the_gemm_over_the_dequantized_weights() {
    use crate::backend::cpu::sgemm::sgemm_t;
    for wide in [false, true] {
        let (rows, n, k) = (19, 70, 32 * 41);
        let (codes, d, m) = matrix(n, k, wide, 7);
        let q = QMatrix::pack(n, k, wide, |i| codes[i], d.clone(), m.clone()).unwrap();
        let a = random(rows * k, 8);
        let mut got = vec![f32::NAN; rows * n];
        product(rows, &a, &q, &mut got).unwrap();
        let w: Vec<f32> = (0..n * k)
            .map(|i| codes[i] as f32 * d[i / QK] + m[i / QK])
            .collect();
        let mut want = vec![0f32; rows * n];
        sgemm_t(rows, n, k, &a, false, &w, true, &mut want, true).unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&want), "wide {wide}");
    }
}

/// The integer tile forms of a prompt's product ([`tiles`]): each form
/// gives the portable one's bits, for rows that are and are not a whole
/// number of tiles, N not a whole number of panels (and under 16 past
/// the last), and K of one block and of many; the portable one gives the
/// definition (exact block sums, each scaled by `d * da` rounded once and
/// added by a fused multiply-add, blocks in order) bit for bit.
#[test]
fn integer_tile_forms_give_the_definition_bit_for_bit() {
    use super::tiles::{self, Form, IntRows};
    for (rows, n, k) in [(9, 70, 32), (16, 64, 576), (13, 45, 32 * 7), (8, 3, 64)] {
        let (codes, d, _) = matrix(n, k, false, 90 + k as u64);
        let q = QMatrix::pack(n, k, false, |i| codes[i], d.clone(), vec![0.0; n * k / QK]).unwrap();
        let a = int8_rows(rows, k, 91);
        let (qa, da) = exact_int8(&a).unwrap().unwrap();
        let nb = k / QK;
        let mut want = vec![0f32; rows * n];
        for i in 0..rows {
            for j in 0..n {
                let mut acc = 0f32;
                for b in 0..nb {
                    let isum: i32 = (b * QK..(b + 1) * QK)
                        .map(|p| qa[i * k + p] as i32 * codes[j * k + p])
                        .sum();
                    acc = (isum as f32).mul_add(d[j * nb + b] * da[i * nb + b], acc);
                }
                want[i * n + j] = acc;
            }
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let ints = IntRows {
            rows,
            qa: &qa,
            da: &da,
        };
        for form in Form::available() {
            let mut got = vec![f32::NAN; rows * n];
            assert!(tiles::product_as(form, &ints, &q, &mut got).unwrap());
            assert_eq!(bits(&got), bits(&want), "{form:?} rows {rows} n {n} k {k}");
        }
    }
}

/// Where the integer tile form runs (this CPU has one), a prompt's
/// product over int8 activations is it; and it declines weights with
/// offsets (their term would need the activations' block sums), which
/// take the float path's bits instead.
#[test]
fn prompt_products_over_int8_rows_take_the_integer_tiles_where_the_cpu_has_them() {
    use super::tiles::{self, Form, IntRows};
    let (rows, n, k) = (12, 40, 96);
    let (codes, d, m) = matrix(n, k, false, 95);
    let a = int8_rows(rows, k, 96);
    let (qa, da) = exact_int8(&a).unwrap().unwrap();
    let ints = IntRows {
        rows,
        qa: &qa,
        da: &da,
    };
    let plain = QMatrix::pack(n, k, false, |i| codes[i], d.clone(), vec![0.0; n * k / QK]).unwrap();
    let mut got = vec![f32::NAN; rows * n];
    product(rows, &a, &plain, &mut got).unwrap();
    let mut tile = vec![f32::NAN; rows * n];
    assert!(tiles::product_as(Form::Portable, &ints, &plain, &mut tile).unwrap());
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    if Form::best().is_some() {
        assert_eq!(bits(&got), bits(&tile));
    }
    let mag = magnitudes(rows, &a, &codes, &d, &vec![0.0; n * k / QK], n, k);
    assert_close(
        &got,
        &naive(rows, &a, &codes, &d, &vec![0.0; n * k / QK], n, k),
        &mag,
        "int8 rows",
    );
    let offs = QMatrix::pack(n, k, false, |i| codes[i], d.clone(), m.clone()).unwrap();
    assert!(!tiles::product_as(Form::Portable, &ints, &offs, &mut tile).unwrap());
}

/// A block gathered across a panel's rows (`panels::block_panel`) holds
/// the bits that dequantizing each row and writing it across gives, with
/// offsets and without, for panels of 16 and 32 rows; where the CPU has
/// no such form, or the panel runs past the matrix, or the codes are 8
/// bits, it writes nothing and says so.
#[test]
fn a_block_gathered_across_a_panel_is_the_rows_dequantized() {
    let (n, k) = (40, 96);
    for offsets in [true, false] {
        let (codes, d, m) = matrix(n, k, false, 7);
        let m = if offsets { m } else { vec![0.0; n * k / QK] };
        let q = QMatrix::pack(n, k, false, |i| codes[i], d.clone(), m.clone()).unwrap();
        for nr in [16, 32] {
            let mut formed = 0;
            for jb in [0, 3, n - nr, n - nr + 1] {
                for blk in 0..k / QK {
                    let mut got = vec![f32::NAN; QK * nr];
                    if !super::panels::block_panel(&q, jb, blk, nr, &mut got) {
                        assert!(got.iter().all(|x| x.is_nan()), "written, then refused");
                        continue;
                    }
                    assert!(jb + nr <= n, "a panel past the matrix's rows");
                    formed += 1;
                    let mut row = vec![0f32; QK];
                    for jj in 0..nr {
                        q.dequantize_span(jb + jj, blk * QK, &mut row);
                        for (i, want) in row.iter().enumerate() {
                            assert_eq!(
                                got[i * nr + jj].to_bits(),
                                want.to_bits(),
                                "nr {nr} row {} block {blk} weight {i}",
                                jb + jj
                            );
                        }
                    }
                }
            }
            // The forms this CPU has, where it has them (none elsewhere).
            #[cfg(all(target_arch = "x86_64", not(miri)))]
            let has = match nr {
                32 => is_x86_feature_detected!("avx512f"),
                _ => is_x86_feature_detected!("avx2"),
            };
            #[cfg(not(all(target_arch = "x86_64", not(miri))))]
            let has = false;
            assert_eq!(formed > 0, has, "nr {nr}");
        }
    }
    let (codes, d, m) = matrix(n, k, true, 8);
    let q = QMatrix::pack(n, k, true, |i| codes[i], d, m).unwrap();
    let mut out = vec![0f32; QK * 32];
    assert!(!super::panels::block_panel(&q, 0, 0, 32, &mut out));
}

/// `cargo test --release --lib qgemm_bench -- --ignored --nocapture`:
/// a prompt's product (128 rows by a 4-bit 3072 x 576 matrix) against
/// the float32 GEMM of the same shape with the weights packed once.
#[test]
#[ignore]
fn qgemm_bench() {
    // QGEMM_BENCH="rows,n,k" for another shape.
    let shape: Vec<usize> = std::env::var("QGEMM_BENCH")
        .map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_default();
    let (rows, n, k) = match shape[..] {
        [rows, n, k] => (rows, n, k),
        _ => (128, 3072, 576),
    };
    let (codes, d, m) = matrix(n, k, false, 3);
    let q = QMatrix::pack(n, k, false, |i| codes[i], d, m).unwrap();
    let a = random(rows * k, 4);
    let mut c = vec![0f32; rows * n];
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let time = |f: &mut dyn FnMut()| {
        let mut best = f64::MAX;
        for _ in 0..20 {
            let t = std::time::Instant::now();
            f();
            best = best.min(t.elapsed().as_secs_f64());
        }
        best * 1e3
    };
    let tq = pool.install(|| time(&mut || product(rows, &a, &q, &mut c).unwrap()));
    let mut w = vec![0f32; n * k];
    for (r, row) in w.chunks_exact_mut(k).enumerate() {
        q.dequantize_span(r, 0, row);
    }
    let pb = crate::backend::cpu::sgemm::PackedB::new(&w, k, n, true).unwrap();
    let ts = pool.install(|| {
        time(&mut || {
            crate::backend::cpu::sgemm::sgemm_packed(
                rows,
                &a,
                false,
                &pb,
                &mut c,
                true,
                &Fuse::default(),
            )
            .unwrap()
        })
    });
    let gf = 2.0 * (rows * n * k) as f64 / 1e6;
    println!(
        "quantized {tq:.3} ms ({:.0} GFLOP/s), float32 packed once {ts:.3} ms ({:.0} GFLOP/s)",
        gf / tq,
        gf / ts
    );
    // The same product over int8 activations: the integer tiles where the
    // CPU has a form for them.
    let q = QMatrix::pack(
        n,
        k,
        false,
        |i| codes[i],
        vec![0.01; n * k / QK],
        vec![0.0; n * k / QK],
    )
    .unwrap();
    let a = int8_rows(rows, k, 5);
    let ti = pool.install(|| time(&mut || product(rows, &a, &q, &mut c).unwrap()));
    let tx = time(&mut || {
        std::hint::black_box(exact_int8(&a).unwrap());
    });
    let tv = time(&mut || {
        std::hint::black_box(simd::with_simd(|| exact_int8(&a)).unwrap());
    });
    println!(
        "over int8 activations ({:?}): {ti:.3} ms ({:.0} GFLOP/s); their int8 codes found in {tx:.3} ms, {tv:.3} ms on the CPU's vectors",
        super::tiles::Form::best(),
        gf / ti
    );
}

/// The folded block-sum product, each output's chain as the graph writes
/// it: from zero, one multiply-add per block in block order (fused where
/// the GEMM's kernel fuses), then added to the output.
fn block_sum_reference(rows: usize, a: &[f32], m: &[f32], n: usize, round16: bool, c: &mut [f32]) {
    use crate::f16::{f16_to_f32, f32_to_f16};
    let nb = m.len() / n;
    let fused = crate::backend::cpu::sgemm::fuses_multiply_add();
    for i in 0..rows {
        let s: Vec<f32> = a[i * nb * QK..(i + 1) * nb * QK]
            .chunks_exact(QK)
            .map(|blk| {
                let v: f32 = blk.iter().sum();
                match round16 {
                    true => f16_to_f32(f32_to_f16(v)),
                    false => v,
                }
            })
            .collect();
        for j in 0..n {
            let mut acc = 0f32;
            for (b, &sb) in s.iter().enumerate() {
                acc = match fused {
                    true => sb.mul_add(m[j * nb + b], acc),
                    false => acc + sb * m[j * nb + b],
                };
            }
            c[i * n + j] += acc;
        }
    }
}

#[test]
fn folded_block_sums_are_the_chains_of_the_graph_bit_for_bit() {
    use crate::f16::{f16_to_f32, f32_to_f16};
    // Widths around the panels (16 columns) and the vector forms' groups
    // of four and two panels; block counts of SmolLM2's products.
    for (n, nb) in [
        (1, 1),
        (15, 18),
        (16, 18),
        (33, 2),
        (100, 48),
        (197, 18),
        (64 * 5 + 16, 3),
    ] {
        for (half, round16) in [(true, true), (false, false), (true, false)] {
            let m: Vec<f32> = random(n * nb, (n * nb) as u64)
                .iter()
                .map(|&x| match half {
                    true => f16_to_f32(f32_to_f16(x * 0.1)),
                    false => x * 0.1 + 1e-7,
                })
                .collect();
            let bs = BlockSums::new(&m, n, nb, round16).unwrap();
            let rows = 3;
            let a = random(rows * nb * QK, 7);
            let c0 = random(rows * n, 8);
            let mut want = c0.clone();
            block_sum_reference(rows, &a, &m, n, round16, &mut want);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            let mut got = c0.clone();
            bs.add_to(rows, &a, &mut got).unwrap();
            assert_eq!(bits(&got), bits(&want), "add_to n {n} nb {nb} f16 {half}");
            // Columns in pieces that start and end inside panels.
            let s = bs.block_sums(rows, &a).unwrap();
            let mut got = c0.clone();
            let cuts = [0, n / 3, n / 3 + 17, n];
            for i in 0..rows {
                for w in cuts.windows(2) {
                    let (lo, hi) = (w[0].min(n), w[1].min(n));
                    if lo >= hi {
                        continue;
                    }
                    bs.add_cols(
                        &s[i * nb..(i + 1) * nb],
                        lo..hi,
                        &mut got[i * n + lo..i * n + hi],
                    );
                }
            }
            assert_eq!(bits(&got), bits(&want), "add_cols n {n} nb {nb} f16 {half}");
        }
    }
}

#[test]
fn a_product_with_folded_block_sums_is_the_product_then_the_sums() {
    for (n, k) in [(37, 64), (200, 576), (96, 1536)] {
        let nb = k / QK;
        let (codes, d, m) = matrix(n, k, false, n as u64);
        let q = QMatrix::pack(n, k, false, |i| codes[i], d, vec![0.0; n * nb]).unwrap();
        let bs = BlockSums::new(&m, n, nb, true).unwrap();
        for rows in [1, 3, SMALL_M + 1] {
            for a in [random(rows * k, 5), int8_rows(rows, k, 6)] {
                let mut want = vec![0f32; rows * n];
                product(rows, &a, &q, &mut want).unwrap();
                block_sum_reference(rows, &a, &m, n, true, &mut want);
                let mut got = vec![0f32; rows * n];
                product_with(rows, &a, &q, Some(&bs), &mut got).unwrap();
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "n {n} k {k} rows {rows}");
            }
        }
        let other = BlockSums::new(&m[..(n - 1) * nb], n - 1, nb, true).unwrap();
        let mut c = vec![0f32; n];
        assert!(product_with(1, &random(k, 1), &q, Some(&other), &mut c).is_err());
    }
}

#[test]
fn block_sums_of_no_rows_or_no_columns_change_nothing() {
    let bs = BlockSums::new(&[], 0, 2, true).unwrap();
    let mut c: Vec<f32> = Vec::new();
    bs.add_to(3, &random(3 * 2 * QK, 1), &mut c).unwrap();
    let bs = BlockSums::new(&random(5 * 2, 2), 5, 2, true).unwrap();
    bs.add_to(0, &[], &mut c).unwrap();
    assert!(bs.add_to(1, &random(2 * QK, 3), &mut [0.0; 4]).is_err());
}
