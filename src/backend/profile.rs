//! Per-node timing of graphs, for finding where a model's time goes: with
//! `WEBNN_CPU_PROFILE=1` ([`CPU`]) or `WEBNN_GPU_PROFILE=1` ([`GPU`]) in
//! the environment, every node's run time is summed (per graph node:
//! operator, input shapes, output shape) and the table is written to
//! stderr when the backend is dropped (the context is destroyed, or the
//! process exits). Off, it costs one relaxed load per node (the CPU) or
//! per dispatch (the GPU).

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::{Mutex, OnceLock};

#[derive(Default)]
struct Entry {
    calls: u64,
    nanos: u64,
    /// The fastest run: on a busy machine, closer to the node's cost than
    /// the mean.
    best: u64,
}

/// One backend's table and the variable that turns it on.
pub struct Profile {
    var: &'static str,
    what: &'static str,
    on: OnceLock<bool>,
    table: OnceLock<Mutex<HashMap<String, Entry>>>,
}

/// The CPU backend's: each node's run on the pool.
pub static CPU: Profile = Profile::new("WEBNN_CPU_PROFILE", "CPU");

/// The GPU backend's: each node's steps submitted alone and waited for,
/// so a figure is the GPU's time plus one submission's round trip (tens
/// of microseconds), and the whole dispatch is far slower than without.
pub static GPU: Profile = Profile::new("WEBNN_GPU_PROFILE", "GPU");

impl Profile {
    const fn new(var: &'static str, what: &'static str) -> Profile {
        Profile {
            var,
            what,
            on: OnceLock::new(),
            table: OnceLock::new(),
        }
    }

    fn table(&self) -> &Mutex<HashMap<String, Entry>> {
        self.table.get_or_init(Default::default)
    }

    /// Whether the variable asks for the table (read once).
    pub fn enabled(&self) -> bool {
        *self
            .on
            .get_or_init(|| std::env::var(self.var).is_ok_and(|v| !v.is_empty() && v != "0"))
    }

    /// Adds one run of the node that `key` names.
    pub fn record(&self, key: impl FnOnce() -> String, nanos: u64) {
        if let Ok(mut t) = self.table().lock() {
            let e = t.entry(key()).or_default();
            e.best = if e.calls == 0 {
                nanos
            } else {
                e.best.min(nanos)
            };
            e.calls += 1;
            e.nanos += nanos;
        }
    }

    /// Writes the table, slowest nodes first, and clears it.
    pub fn report(&self) {
        let Ok(mut t) = self.table().lock() else {
            return;
        };
        if t.is_empty() {
            return;
        }
        let mut rows: Vec<_> = t.drain().collect();
        rows.sort_by_key(|r| std::cmp::Reverse(r.1.nanos));
        let total: u64 = rows.iter().map(|r| r.1.nanos).sum();
        let mut out = format!(
            "webnn-node {} profile (per node: share, calls, mean, fastest)\n",
            self.what
        );
        for (key, e) in &rows {
            let _ = writeln!(
                out,
                "{:5.1}% {:6} {:10.1} us {:10.1} us  {key}",
                100.0 * e.nanos as f64 / total.max(1) as f64,
                e.calls,
                e.nanos as f64 / e.calls.max(1) as f64 / 1e3,
                e.best as f64 / 1e3,
            );
        }
        // Per operator, summed over nodes.
        let mut ops: HashMap<&str, u64> = HashMap::new();
        for (key, e) in &rows {
            // Keys are `index operator ...`, or a parenthesised phrase.
            let mut words = key.split_whitespace();
            let op = match (words.next(), words.next()) {
                (Some(n), Some(op)) if n.parse::<usize>().is_ok() => op,
                _ => key.trim(),
            };
            *ops.entry(op).or_default() += e.nanos;
        }
        let mut ops: Vec<_> = ops.into_iter().collect();
        ops.sort_by_key(|o| std::cmp::Reverse(o.1));
        for (op, ns) in ops {
            let _ = writeln!(out, "{:5.1}% {op}", 100.0 * ns as f64 / total.max(1) as f64);
        }
        eprint!("{out}");
    }
}
