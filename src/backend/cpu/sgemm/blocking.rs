//! Cache blocking from the caches of the machine the product runs on.
//!
//! A kernel's `kc`, `mc` and `nc` (see [`Kernel`]) are derived here from
//! the data cache sizes this process can read, rather than being
//! constants tuned on one CPU: a Zen 3 core has a 32 KiB L1d and 512 KiB
//! of L2, a Sapphire Rapids core 48 KiB and 2 MiB, an Apple core 128 KiB
//! and a shared 16 MiB L2, and one set of constants cannot suit them all.
//!
//! Where the sizes come from, first found wins: Linux's
//! `/sys/devices/system/cpu/cpu0/cache` (every architecture), then on
//! x86-64 the CPUID leaf of deterministic cache parameters (leaf 4 on
//! Intel, 0x8000001D on AMD: the same layout), else [`Caches::FALLBACK`].
//! Under Miri (which refuses both) the fallback is used.

use std::sync::OnceLock;

use super::Kernel;

/// Data cache sizes in bytes, as one core sees them: `l3` is the share of
/// one core (the cache divided by the cores that share it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caches {
    pub l1d: usize,
    pub l2: usize,
    pub l3: usize,
    /// Where the figures came from, for the benchmark's header.
    pub source: &'static str,
}

impl Caches {
    /// Sizes common to current x86-64 and Arm server cores, used when the
    /// machine says nothing.
    pub const FALLBACK: Caches = Caches {
        l1d: 32 << 10,
        l2: 512 << 10,
        l3: 2 << 20,
        source: "assumed",
    };

    /// This machine's caches, read once.
    pub fn this_machine() -> Caches {
        static CACHES: OnceLock<Caches> = OnceLock::new();
        *CACHES.get_or_init(|| {
            if cfg!(miri) {
                return Caches::FALLBACK;
            }
            sysfs().or_else(cpuid).unwrap_or(Caches::FALLBACK)
        })
    }
}

/// Parses a sysfs cache size: `32K`, `1024K`, `16M` or plain bytes.
fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let (digits, unit) = match s.as_bytes().last()? {
        b'K' => (&s[..s.len() - 1], 1 << 10),
        b'M' => (&s[..s.len() - 1], 1 << 20),
        b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    digits.parse::<usize>().ok()?.checked_mul(unit)
}

/// Counts the CPUs of a sysfs list such as `0-7,16-23` or `3`.
fn count_cpus(list: &str) -> Option<usize> {
    let mut n = 0usize;
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        n += match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (a.parse::<usize>().ok()?, b.parse::<usize>().ok()?);
                b.checked_sub(a)? + 1
            }
            None => {
                part.parse::<usize>().ok()?;
                1
            }
        };
    }
    (n > 0).then_some(n)
}

/// One cache level as sysfs describes it.
struct Level {
    level: u32,
    data: bool,
    size: usize,
    shared_by: usize,
}

/// Combines the levels of one core into [`Caches`]; needs L1d and L2 (a
/// missing L3 counts as none: the B block then sizes to L2).
fn combine(levels: &[Level], source: &'static str) -> Option<Caches> {
    let find = |l: u32| {
        levels
            .iter()
            .filter(|c| c.level == l && c.data && c.size > 0)
            .map(|c| c.size / c.shared_by.max(1))
            .max()
    };
    let (l1d, l2) = (find(1)?, find(2)?);
    Some(Caches {
        l1d,
        l2,
        l3: find(3).unwrap_or(0),
        source,
    })
}

fn sysfs() -> Option<Caches> {
    let dir = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
    let mut levels = Vec::new();
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let read = |f: &str| std::fs::read_to_string(entry.path().join(f)).ok();
        let (Some(level), Some(kind), Some(size)) = (read("level"), read("type"), read("size"))
        else {
            continue;
        };
        levels.push(Level {
            level: level.trim().parse().unwrap_or(0),
            data: matches!(kind.trim(), "Data" | "Unified"),
            size: parse_size(&size).unwrap_or(0),
            shared_by: read("shared_cpu_list")
                .and_then(|l| count_cpus(&l))
                .unwrap_or(1),
        });
    }
    combine(&levels, "sysfs")
}

#[cfg(all(target_arch = "x86_64", not(miri)))]
fn cpuid() -> Option<Caches> {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    // Leaf 0 and 0x80000000 report the highest standard and extended
    // leaves; the leaves read below are asked for only within those.
    let (max_std, max_ext) = (__cpuid(0).eax, __cpuid(0x8000_0000).eax);
    // AMD reports its caches in 0x8000001D (with topology extensions);
    // Intel in leaf 4. Both use the same register layout.
    let leaf = if max_ext >= 0x8000_001D {
        0x8000_001D
    } else if max_std >= 4 {
        4
    } else {
        return None;
    };
    let mut levels = Vec::new();
    for sub in 0..16 {
        let r = __cpuid_count(leaf, sub);
        let kind = r.eax & 0x1f;
        if kind == 0 {
            break;
        }
        let ways = ((r.ebx >> 22) & 0x3ff) as usize + 1;
        let partitions = ((r.ebx >> 12) & 0x3ff) as usize + 1;
        let line = (r.ebx & 0xfff) as usize + 1;
        let sets = r.ecx as usize + 1;
        levels.push(Level {
            level: (r.eax >> 5) & 0x7,
            // 1 data, 3 unified (2 is instructions).
            data: kind == 1 || kind == 3,
            size: ways * partitions * line * sets,
            shared_by: ((r.eax >> 14) & 0xfff) as usize + 1,
        });
    }
    combine(&levels, "cpuid")
}

#[cfg(not(all(target_arch = "x86_64", not(miri))))]
fn cpuid() -> Option<Caches> {
    None
}

/// The largest blocking any kernel takes: the per-thread packing
/// buffers of a block are sized by it (`pack.rs`, `AlignedBuf::ensure`).
pub(super) const MAX_KC: usize = 1024;
const MAX_MC: usize = 1020;
const MAX_NC: usize = 8192;
/// The most KC blocks a task takes at once (the tasks hold one A panel
/// and one B block per block of the group in fixed arrays).
pub(super) const MAX_KG: usize = 8;
/// The fewest MR panels of rows a group's A block must hold: fewer, and
/// the B panels (read again for every row block) cost more than the C
/// passes that grouping saves.
const GROUP_MIN_PANELS: usize = 16;

/// Rounds `x` down to a multiple of `m` (at least `m`).
fn round_down(x: usize, m: usize) -> usize {
    (x / m).max(1) * m
}

impl Kernel {
    /// This kernel with its blocking derived from `caches`:
    /// - `kc`: a `kc x nr` B panel takes [`Kernel::l1_share`] of L1d
    ///   (it is reused from L1 by every A panel of the block);
    /// - `mc`: the `mc x kc` A block takes half of L2 (it is reused from
    ///   L2 by every B panel), leaving room for the B panel and C lines;
    /// - `nc`: the `kc x nc` B block takes half of the core's L3 share,
    ///   or of L2 where there is no L3;
    /// - `kg`: as many KC blocks as fit, `16 * mr` rows deep, in half of
    ///   L2 (see [`Kernel::grouping`]).
    pub(super) fn blocked_for(&self, caches: &Caches) -> Kernel {
        let (num, den) = self.l1_share;
        let kc = round_down(caches.l1d * num / den / (self.nr * 4), 16).clamp(64, MAX_KC);
        let mc = round_down(caches.l2 / 2 / (kc * 4), self.mr).clamp(self.mr * 4, MAX_MC);
        let outer = if caches.l3 > caches.l2 {
            caches.l3
        } else {
            caches.l2
        };
        let nc = round_down(outer / 2 / (kc * 4), self.nr).clamp(self.nr * 16, MAX_NC);
        let kg = (caches.l2 / 2 / (GROUP_MIN_PANELS * self.mr * kc * 4)).clamp(1, MAX_KG);
        Kernel {
            kc,
            mc,
            nc,
            kg,
            ..*self
        }
    }

    /// How an `m x n` product `k` deep on `threads` threads is blocked:
    /// `(g, mc, nc)`, the KC blocks one task takes at once and the rows
    /// and columns of its blocks.
    ///
    /// Each KC block's sums are added to C in K order whatever the
    /// grouping (the kernel sums a block from zero and adds it to the
    /// tile), so results are the same bits with or without it; what a
    /// group changes is where the C tile is between blocks. Without it,
    /// every block sweeps all of C: 1024^3 reads and writes its 4 MiB,
    /// which L2 does not hold, three times. In a group, the kernel sums
    /// each block into a tile still in L1. The A block then holds `g`
    /// blocks, so it has `g` times fewer rows (it stays in half of L2),
    /// and the B block `g` times fewer columns. Where a thread's share of
    /// C fits in an A block's room in L2 (`mc * kc` floats), it stays
    /// there between blocks anyway, and grouping would only spread the
    /// B panels a tile reads over `g` blocks: 128 x 384 x 1536 measured
    /// 3% slower grouped.
    ///
    /// Measured on an Intel Sapphire Rapids core (2 MiB of L2) of a cloud
    /// virtual machine, 1024^3 with B packed, the module alone
    /// (`sgemm_bench`), three interleaved rounds of 30, the medians'
    /// means: one block at a time (`kg=1`) 14.2 ms at one thread and
    /// 6.9 at two; grouped (3 blocks, mc 216) 13.0 and 6.4; one block
    /// at a time with the same mc 216, 13.3 and 6.6. With B plain
    /// (packed per group): 14.3 against 13.6 at one thread, 7.5 against
    /// 7.0 at two.
    pub(super) fn grouping(
        &self,
        m: usize,
        n: usize,
        k: usize,
        threads: usize,
    ) -> (usize, usize, usize) {
        let g = self.kg.min(k.div_ceil(self.kc)).clamp(1, MAX_KG);
        let c_share = m.saturating_mul(n) / threads.max(1);
        if g == 1 || c_share <= self.mc * self.kc {
            return (1, self.mc, self.nc);
        }
        (
            g,
            round_down(self.mc / g, self.mr),
            round_down(self.nc / g, self.nr),
        )
    }

    /// This kernel with the sizes `spec` names (`WEBNN_CPU_BLOCKING`,
    /// for example `kc=256,mc=480`; `kg` sets [`Kernel::kg`]) in place of its own, each rounded
    /// down to the multiple the loops need and held within the bounds
    /// that [`Kernel::blocked_for`] keeps (the packing buffers are sized
    /// by them). `None` when `spec` is not such a list, so that a typo
    /// is not silently half applied.
    pub(super) fn with_blocking(&self, spec: &str) -> Option<Kernel> {
        let mut k = Kernel { ..*self };
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) = part.split_once('=')?;
            let v: usize = value.trim().parse().ok()?;
            match name.trim() {
                "kc" => k.kc = round_down(v, 16).clamp(64, MAX_KC),
                "mc" => k.mc = round_down(v, self.mr).clamp(self.mr, round_down(MAX_MC, self.mr)),
                "nc" => k.nc = round_down(v, self.nr).clamp(self.nr, round_down(MAX_NC, self.nr)),
                "kg" => k.kg = v.clamp(1, MAX_KG),
                _ => return None,
            }
        }
        Some(k)
    }
}

/// The sizes `WEBNN_CPU_BLOCKING` gives, if it is set and reads as a
/// list of `kc`, `mc`, `nc` and `kg` (see [`Kernel::with_blocking`]): for
/// measuring other blockings on a machine without rebuilding.
pub(super) fn blocking_override(kern: &Kernel) -> Option<Kernel> {
    let spec = std::env::var("WEBNN_CPU_BLOCKING").ok()?;
    kern.with_blocking(&spec)
}

impl Kernel {
    /// The tile and blocking, and the caches they came from, as the
    /// benchmark's header prints them.
    pub fn blocking_report(&self) -> String {
        let c = Caches::this_machine();
        let from = if blocking_override(self).is_some() {
            "WEBNN_CPU_BLOCKING; the caches are"
        } else {
            "from"
        };
        format!(
            "{}x{} tile, kc {} mc {} nc {} kg {}, {from} L1d {} KiB, L2 {} KiB, L3 {} KiB per core ({})",
            self.mr,
            self.nr,
            self.kc,
            self.mc,
            self.nc,
            self.kg,
            c.l1d >> 10,
            c.l2 >> 10,
            c.l3 >> 10,
            c.source
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_cpu_lists_parse() {
        assert_eq!(parse_size("32K\n"), Some(32 << 10));
        assert_eq!(parse_size("16M"), Some(16 << 20));
        assert_eq!(parse_size("1048576"), Some(1 << 20));
        assert_eq!(parse_size("K"), None);
        assert_eq!(parse_size("x"), None);
        assert_eq!(count_cpus("0-7,16-23\n"), Some(16));
        assert_eq!(count_cpus("3"), Some(1));
        assert_eq!(count_cpus("7-3"), None);
        assert_eq!(count_cpus(""), None);
    }

    #[test]
    fn levels_combine_per_core() {
        let lv = |level, data, size, shared_by| Level {
            level,
            data,
            size,
            shared_by,
        };
        // An instruction cache is not a data cache; L3 is split between
        // the cores that share it.
        let c = combine(
            &[
                lv(1, false, 64 << 10, 1),
                lv(1, true, 48 << 10, 1),
                lv(2, true, 2 << 20, 1),
                lv(3, true, 32 << 20, 8),
            ],
            "test",
        )
        .unwrap();
        assert_eq!((c.l1d, c.l2, c.l3), (48 << 10, 2 << 20, 4 << 20));
        assert!(combine(&[lv(1, true, 32 << 10, 1)], "test").is_none());
    }

    #[test]
    fn this_machine_has_plausible_caches() {
        let c = Caches::this_machine();
        assert!(c.l1d >= 4 << 10 && c.l1d <= 1 << 20, "{c:?}");
        assert!(c.l2 >= c.l1d, "{c:?}");
    }

    #[test]
    fn blocking_follows_the_caches() {
        let caches = |l1d, l2, l3| Caches {
            l1d,
            l2,
            l3,
            source: "test",
        };
        // A Zen 2 or Zen 3 core.
        let zen = caches(32 << 10, 512 << 10, 4 << 20);
        for kern in available_kernels() {
            let b = kern.blocked_for(&zen);
            // The AVX2 kernel takes the blocking measured best there (see
            // `AVX2`): a 384 x 16 B panel, three quarters of L1d, and a
            // 168 x 384 A block.
            if kern.name == "avx2+fma" {
                assert_eq!((b.kc, b.mc), (384, 168));
            }
            assert_eq!(b.kc % 16, 0);
            assert_eq!(b.mc % kern.mr, 0);
            assert_eq!(b.nc % kern.nr, 0);
            assert!(b.kc * kern.nr * 4 <= zen.l1d, "{}: {b:?}", kern.name);
            assert!(b.mc * b.kc * 4 <= zen.l2 / 2, "{}: {b:?}", kern.name);
            // A Sapphire Rapids core (see `AVX512`): a 384 x 32 B panel
            // in its 48 KiB L1d, a 672 x 384 A block in half its 2 MiB L2.
            if kern.name == "avx512f" {
                let spr = kern.blocked_for(&caches(48 << 10, 2 << 20, 1875 << 10));
                assert_eq!((spr.kc, spr.mc), (384, 672));
                // Three 192-row blocks of 384 fit in half its L2: 1024^3
                // takes its three KC blocks at once, in 216-row A blocks,
                // on one thread or two; a product 384 deep, or one whose
                // C stays in L2, is not grouped.
                assert_eq!(spr.kg, 3);
                assert_eq!(spr.grouping(1024, 1024, 1024, 1).0, 3);
                assert_eq!(spr.grouping(1024, 1024, 1024, 2).1, 216);
                assert_eq!(spr.grouping(1024, 1024, 384, 1), (1, 672, spr.nc));
                assert_eq!(spr.grouping(128, 384, 1536, 1).0, 1);
                assert_eq!(spr.grouping(4096, 64, 5000, 1).0, 3);
            }
            // A Zen 3 core's 512 KiB L2 holds no group of 16 row panels.
            if kern.name == "avx2+fma" {
                assert_eq!(b.kg, 1);
            }
            assert!(b.kc * b.nc * 4 <= zen.l3 / 2, "{}: {b:?}", kern.name);
            // Larger caches never give smaller blocks.
            let g = kern.blocked_for(&caches(64 << 10, 2 << 20, 8 << 20));
            assert!(g.kc >= b.kc && g.mc >= b.mc && g.nc >= b.nc, "{g:?} {b:?}");
            // Absurd reports stay within bounds.
            let t = kern.blocked_for(&caches(1, 1, 0));
            assert!(t.kc >= 64 && t.mc >= kern.mr && t.nc >= kern.nr, "{t:?}");
        }
    }

    #[test]
    fn a_blocking_override_is_rounded_and_bounded() {
        for kern in available_kernels() {
            let k = kern.with_blocking("kc=250, mc=100,nc=5000").unwrap();
            assert_eq!(k.kc, 240);
            assert_eq!(k.mc, 100 / kern.mr * kern.mr);
            assert_eq!(k.nc, 5000 / kern.nr * kern.nr);
            assert_eq!(kern.with_blocking("kg=3").unwrap().kg, 3);
            assert_eq!(kern.with_blocking("kg=0").unwrap().kg, 1);
            assert_eq!(kern.with_blocking("kg=99").unwrap().kg, MAX_KG);
            let k = kern.with_blocking("kc=1,mc=0,nc=99999").unwrap();
            assert!(k.kc == 64 && k.mc == kern.mr && k.nc <= 8192 && k.nc % kern.nr == 0);
            let k = kern.with_blocking("mc=100000").unwrap();
            assert!(k.mc <= 1020 && k.mc % kern.mr == 0 && k.kc == kern.kc);
            assert_eq!(kern.with_blocking("").unwrap().kc, kern.kc);
            for bad in ["kc", "kc=x", "kc=-1", "kx=256", "kc=256;mc=96"] {
                assert!(kern.with_blocking(bad).is_none(), "{bad}");
            }
        }
    }

    use super::super::available_kernels;
}
