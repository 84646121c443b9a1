//! A second product folded into a quantized one: the per-block sums of
//! A times a constant [N, K / QK] matrix, added to the outputs.
//!
//! A graph with llama.cpp's numerics multiplies Q4_1's per-block minimum
//! this way, as llama.cpp's dot product does (the minimum times the sum of
//! the block's rounded activations, that sum kept in float16): beside the
//! product over the codes it writes
//! `gemm(cast(cast(reduceSum(reshape(x, [rows, nb, 32])), f16), f32), M,
//! {bTranspose: true})` and adds the two. Run as written, that is three
//! nodes and a float32 GEMM over M per product; folded, the sums are taken
//! from A as the product reads it and M is read once, in float16 where its
//! values are float16 (a GGUF file's minimums), in panels of 16 outputs
//! whose factors lie together. A one-row product (a decoding step) adds
//! each task's columns in the task, right after their dot products, and
//! asks for the next task's panels as it asks for its scales: the
//! factors are a tenth of a Q4_1 matrix's bytes, and read as a pass of
//! their own after the product they had cost a decoding step a twentieth
//! of its time.
//!
//! Each output's sum is the chain the GEMM computes for it (from zero, one
//! multiply-add per block in block order, fused where the GEMM's kernel
//! fuses), added to the product's output as the graph's `add` did: the
//! bits of the graph as written. A block's sum of A is exact when A is
//! int8 codes times a float16 scale per block (the rounded activations);
//! for other values it is summed in order, which `reduceSum` may not do.

use super::{ScaleView, Scales, QK};
use crate::error::{Error, Result};
use crate::f16::{f16_to_f32, f32_to_f16};

/// Columns per panel of the held matrix: one AVX-512 register of float32
/// sums, two AVX2 ones.
pub(super) const PANEL: usize = 16;

/// `m` ([n, nb], row-major) held to add `sum over b of s[i, b] * m[j, b]`
/// to output `(i, j)`, `s[i, b]` the sum of block b of row i of A
/// (rounded to float16 when `round16`).
#[derive(Debug)]
pub struct BlockSums {
    n: usize,
    nb: usize,
    /// `m` in panels of [`PANEL`] columns: column `j`'s factor of block
    /// `b` at `((j / PANEL) * nb + b) * PANEL + j % PANEL`, the last
    /// panel padded with zeros; float16 where every value is one (a GGUF
    /// file's minimums), which halves what a product reads for them. A
    /// panel's factors lie together, so the columns a task of the product
    /// owns are one run of memory, and a panel's sums stay in registers
    /// over all its blocks.
    panels: Scales,
    round16: bool,
}

impl BlockSums {
    /// Holds `m` ([n, nb]), or fails when it has another length or the
    /// memory cannot be had.
    pub fn new(m: &[f32], n: usize, nb: usize, round16: bool) -> Result<BlockSums> {
        if n.checked_mul(nb) != Some(m.len()) {
            return Err(Error::operation(
                "block sums: the matrix does not match its shape",
            ));
        }
        let len = n
            .div_ceil(PANEL)
            .checked_mul(nb * PANEL)
            .ok_or_else(|| Error::operation("block sums: the matrix is too large"))?;
        let mut p = super::try_alloc(len, 0f32, "a block-sum product's matrix")?;
        for (j, row) in m.chunks_exact(nb.max(1)).enumerate() {
            for (b, &v) in row.iter().enumerate() {
                p[((j / PANEL) * nb + b) * PANEL + j % PANEL] = v;
            }
        }
        let panels = Scales::new(p)?;
        Ok(BlockSums {
            n,
            nb,
            panels,
            round16,
        })
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.panels.bytes()
    }

    /// The outputs (columns of the product) of this product.
    pub fn n(&self) -> usize {
        self.n
    }

    /// The sum of each block of each of `rows` rows of `a` ([rows, nb *
    /// QK]), in order from the first element, rounded to float16 when
    /// the graph rounds them: what [`BlockSums::add_cols`] multiplies.
    pub fn block_sums(&self, rows: usize, a: &[f32]) -> Result<Vec<f32>> {
        if a.len() != rows * self.nb * QK {
            return Err(Error::operation(
                "block sums: the operands do not match the shapes",
            ));
        }
        let mut s = super::try_alloc(rows * self.nb, 0f32, "the activations' block sums")?;
        for (s, blk) in s.iter_mut().zip(a.chunks_exact(QK)) {
            let mut v: f32 = blk.iter().sum();
            if self.round16 {
                v = f16_to_f32(f32_to_f16(v));
            }
            *s = v;
        }
        Ok(s)
    }

    /// Adds the block-sum product of `rows` rows of `a` ([rows, nb * QK])
    /// to `c` ([rows, n]).
    pub fn add_to(&self, rows: usize, a: &[f32], c: &mut [f32]) -> Result<()> {
        if c.len() != rows * self.n {
            return Err(Error::operation(
                "block sums: the operands do not match the shapes",
            ));
        }
        if rows == 0 || self.n == 0 {
            return Ok(());
        }
        let s = self.block_sums(rows, a)?;
        let form = Form::here();
        let (n, nb) = (self.n, self.nb.max(1));
        // A prompt's rows: with AVX-512, groups of rows take each panel's
        // factors once for all of them (a widened load per eight
        // multiply-adds, not per one); the columns past the whole panels,
        // and other forms, a row at a time. Each output's chain is the
        // same either way.
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        let done = match (form, self.panels.view()) {
            (Form::Avx512, ScaleView::F16(p)) if rows > 1 => {
                let whole = n / PANEL;
                for (sg, cg) in s.chunks(nb * x86::ROWS).zip(c.chunks_mut(n * x86::ROWS)) {
                    // SAFETY: `here` chose this form only where AVX-512F
                    // was detected; `p` holds `n.div_ceil(PANEL)` panels
                    // of `nb` blocks (`new`), `sg` a whole number of rows'
                    // `nb` sums and `cg` as many rows of `n` outputs: the
                    // kernel's reads and writes (its contract).
                    unsafe { x86::panels_rows_avx512(sg, nb, p, whole, cg, n) };
                }
                whole * PANEL
            }
            _ => 0,
        };
        #[cfg(not(all(target_arch = "x86_64", not(miri))))]
        let done = 0;
        if done < n {
            for (si, ci) in s.chunks_exact(nb).zip(c.chunks_exact_mut(n)) {
                self.add_cols_in(form, si, done..n, &mut ci[done..]);
            }
        }
        Ok(())
    }

    /// Adds the terms of columns `cols` of one row, whose block sums are
    /// `s` (`nb` of them, from [`BlockSums::block_sums`]), to `out`
    /// (`cols.len()` outputs): each output's chain from zero, one
    /// multiply-add per block in block order (fused where the GEMM's
    /// kernel fuses), then added to the output.
    pub fn add_cols(&self, s: &[f32], cols: std::ops::Range<usize>, out: &mut [f32]) {
        self.add_cols_in(Form::here(), s, cols, out);
    }

    fn add_cols_in(&self, form: Form, s: &[f32], cols: std::ops::Range<usize>, out: &mut [f32]) {
        let nb = self.nb;
        assert!(s.len() == nb && cols.end <= self.n && out.len() == cols.len());
        let mut j = cols.start;
        while j < cols.end {
            let whole = match j % PANEL {
                0 => (cols.end - j) / PANEL,
                _ => 0,
            };
            let at = j - cols.start;
            if whole > 0 {
                let first = j / PANEL * nb * PANEL;
                let src = self.panels.view().range(first..first + whole * nb * PANEL);
                form.panels(s, src, &mut out[at..at + whole * PANEL]);
                j += whole * PANEL;
                continue;
            }
            // A column outside whole panels: its chain alone.
            let (base, lane) = (j / PANEL * nb * PANEL, j % PANEL);
            let view = self.panels.view();
            let mut acc = 0f32;
            for (b, &sb) in s.iter().enumerate() {
                acc = form.step(sb, view.get(base + b * PANEL + lane), acc);
            }
            out[at] += acc;
            j += 1;
        }
    }

    /// Asks for the panels of columns `cols` ahead of their use (a
    /// product's task asks for the next task's): a hint only.
    pub fn prefetch(&self, cols: std::ops::Range<usize>) {
        let nb = self.nb;
        let at = cols.start / PANEL * nb * PANEL..cols.end.div_ceil(PANEL) * nb * PANEL;
        self.panels.view().prefetch(at);
    }
}

/// How this machine takes the chains: as the GEMM's kernel multiplies
/// and adds (fused or not), with the widest vectors that keep those bits.
#[derive(Clone, Copy)]
enum Form {
    /// One rounding per multiply-add (`mul_add`), a column at a time.
    Fused,
    /// A rounded product, then a rounded sum.
    Unfused,
    /// AVX-512F, fused: four panels' sums in registers at a time.
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    Avx512,
    /// AVX2, FMA and F16C, fused: a panel's sums in two registers, two
    /// panels at a time.
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    Avx2,
}

impl Form {
    fn here() -> Form {
        let fused = super::super::sgemm::fuses_multiply_add();
        if !fused {
            return Form::Unfused;
        }
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                return Form::Avx512;
            }
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
                && std::arch::is_x86_feature_detected!("f16c")
            {
                return Form::Avx2;
            }
        }
        Form::Fused
    }

    /// One multiply-add of a chain, as every form takes it.
    #[inline]
    fn step(self, s: f32, m: f32, acc: f32) -> f32 {
        match self {
            Form::Unfused => acc + s * m,
            _ => s.mul_add(m, acc),
        }
    }

    /// Adds the chains of whole panels (`src` holds `out.len() / PANEL`
    /// panels of `s.len()` blocks) to `out`.
    fn panels(self, s: &[f32], src: ScaleView, out: &mut [f32]) {
        let nb = s.len();
        let count = out.len() / PANEL;
        assert!(out.len() == count * PANEL && src.len() == count * nb * PANEL);
        match self {
            #[cfg(all(target_arch = "x86_64", not(miri)))]
            // SAFETY: `here` chose this form only where AVX-512F was
            // detected; the lengths were asserted just above, which is
            // what the kernel reads and writes.
            Form::Avx512 => unsafe { x86::panels_avx512(s, src, out) },
            #[cfg(all(target_arch = "x86_64", not(miri)))]
            // SAFETY: `here` chose this form only where AVX2, FMA and
            // F16C were detected; lengths as above.
            Form::Avx2 => unsafe { x86::panels_avx2(s, src, out) },
            _ => {
                for (q, oq) in out.chunks_exact_mut(PANEL).enumerate() {
                    let mut acc = [0f32; PANEL];
                    for (b, &sb) in s.iter().enumerate() {
                        let at = (q * nb + b) * PANEL;
                        for (l, a) in acc.iter_mut().enumerate() {
                            *a = self.step(sb, src.get(at + l), *a);
                        }
                    }
                    for (o, a) in oq.iter_mut().zip(acc) {
                        *o += a;
                    }
                }
            }
        }
    }
}

#[cfg(all(target_arch = "x86_64", not(miri)))]
mod x86 {
    use super::{ScaleView, PANEL};
    use std::arch::x86_64::*;

    /// # Safety
    /// AVX-512F; `src` holds `out.len() / PANEL` panels of `s.len()`
    /// blocks, `out.len()` a multiple of `PANEL`.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn panels_avx512(s: &[f32], src: ScaleView, out: &mut [f32]) {
        let nb = s.len();
        let count = out.len() / PANEL;
        // Panel q's block b: 16 values at `(q * nb + b) * 16`.
        let load = |q: usize, b: usize| -> __m512 {
            let at = (q * nb + b) * PANEL;
            // SAFETY: q < count and b < nb, so the 16 values lie in `src`
            // (the caller's contract); unaligned forms.
            unsafe {
                match src {
                    ScaleView::F16(p) => {
                        _mm512_cvtph_ps(_mm256_loadu_si256(p.as_ptr().add(at).cast()))
                    }
                    ScaleView::F32(p) => _mm512_loadu_ps(p.as_ptr().add(at)),
                }
            }
        };
        let o = out.as_mut_ptr();
        let mut q = 0;
        // Four panels at a time: four independent chains in flight
        // rather than one waiting on each multiply-add's latency.
        while q + 4 <= count {
            let mut acc = [_mm512_setzero_ps(); 4];
            for (b, &sb) in s.iter().enumerate() {
                let sv = _mm512_set1_ps(sb);
                for (r, a) in acc.iter_mut().enumerate() {
                    *a = _mm512_fmadd_ps(sv, load(q + r, b), *a);
                }
            }
            for (r, a) in acc.into_iter().enumerate() {
                // SAFETY: panel q + r < count's 16 outputs, inside `out`.
                unsafe {
                    let p = o.add((q + r) * PANEL);
                    _mm512_storeu_ps(p, _mm512_add_ps(_mm512_loadu_ps(p), a));
                }
            }
            q += 4;
        }
        while q < count {
            let mut acc = _mm512_setzero_ps();
            for (b, &sb) in s.iter().enumerate() {
                acc = _mm512_fmadd_ps(_mm512_set1_ps(sb), load(q, b), acc);
            }
            // SAFETY: panel q < count's 16 outputs, inside `out`.
            unsafe {
                let p = o.add(q * PANEL);
                _mm512_storeu_ps(p, _mm512_add_ps(_mm512_loadu_ps(p), acc));
            }
            q += 1;
        }
    }

    /// Rows [`panels_rows_avx512`] takes at a time.
    pub const ROWS: usize = 8;

    /// `out[r * n + j] += chain` for the rows of `s` (`s.len() / nb` of
    /// them, at most [`ROWS`]) and the columns of the first `whole` panels
    /// of `p`: per panel, each row's sums in a register of its own over
    /// all the blocks, each block's factors widened once for every row.
    ///
    /// # Safety
    /// AVX-512F; `p` holds at least `whole * nb * PANEL` values; `out`
    /// holds `s.len() / nb` rows of `n >= whole * PANEL` outputs.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn panels_rows_avx512(
        s: &[f32],
        nb: usize,
        p: &[u16],
        whole: usize,
        out: &mut [f32],
        n: usize,
    ) {
        let rows = s.len() / nb;
        assert!(
            rows <= ROWS
                && p.len() >= whole * nb * PANEL
                && out.len() >= rows * n
                && n >= whole * PANEL
        );
        let o = out.as_mut_ptr();
        for q in 0..whole {
            let mut acc = [_mm512_setzero_ps(); ROWS];
            for b in 0..nb {
                // SAFETY: panel q < whole's block b < nb: inside `p`
                // (asserted); unaligned form.
                let m = unsafe {
                    _mm512_cvtph_ps(_mm256_loadu_si256(
                        p.as_ptr().add((q * nb + b) * PANEL).cast(),
                    ))
                };
                for (r, a) in acc.iter_mut().enumerate().take(rows) {
                    *a = _mm512_fmadd_ps(_mm512_set1_ps(s[r * nb + b]), m, *a);
                }
            }
            for (r, a) in acc.into_iter().enumerate().take(rows) {
                // SAFETY: row r < rows, columns q * 16 .. + 16 <= n: inside
                // `out` (asserted).
                unsafe {
                    let at = o.add(r * n + q * PANEL);
                    _mm512_storeu_ps(at, _mm512_add_ps(_mm512_loadu_ps(at), a));
                }
            }
        }
    }

    /// # Safety
    /// AVX2, FMA and F16C; as [`panels_avx512`] otherwise.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn panels_avx2(s: &[f32], src: ScaleView, out: &mut [f32]) {
        let nb = s.len();
        let count = out.len() / PANEL;
        // Half h (8 values) of panel q's block b.
        let load = |q: usize, b: usize, h: usize| -> __m256 {
            let at = (q * nb + b) * PANEL + h * 8;
            // SAFETY: inside `src`, as in `panels_avx512`.
            unsafe {
                match src {
                    ScaleView::F16(p) => {
                        _mm256_cvtph_ps(_mm_loadu_si128(p.as_ptr().add(at).cast()))
                    }
                    ScaleView::F32(p) => _mm256_loadu_ps(p.as_ptr().add(at)),
                }
            }
        };
        let o = out.as_mut_ptr();
        let mut q = 0;
        while q + 2 <= count {
            let mut acc = [_mm256_setzero_ps(); 4];
            for (b, &sb) in s.iter().enumerate() {
                let sv = _mm256_set1_ps(sb);
                for (r, a) in acc.iter_mut().enumerate() {
                    *a = _mm256_fmadd_ps(sv, load(q + r / 2, b, r % 2), *a);
                }
            }
            for (r, a) in acc.into_iter().enumerate() {
                // SAFETY: half r % 2 of panel q + r / 2 < count: in `out`.
                unsafe {
                    let p = o.add((q + r / 2) * PANEL + (r % 2) * 8);
                    _mm256_storeu_ps(p, _mm256_add_ps(_mm256_loadu_ps(p), a));
                }
            }
            q += 2;
        }
        if q < count {
            let mut acc = [_mm256_setzero_ps(); 2];
            for (b, &sb) in s.iter().enumerate() {
                let sv = _mm256_set1_ps(sb);
                for (h, a) in acc.iter_mut().enumerate() {
                    *a = _mm256_fmadd_ps(sv, load(q, b, h), *a);
                }
            }
            for (h, a) in acc.into_iter().enumerate() {
                // SAFETY: half h of panel q < count: in `out`.
                unsafe {
                    let p = o.add(q * PANEL + h * 8);
                    _mm256_storeu_ps(p, _mm256_add_ps(_mm256_loadu_ps(p), a));
                }
            }
        }
    }
}
