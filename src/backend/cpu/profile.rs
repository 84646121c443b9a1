//! Per-node timing of CPU graphs, for finding where a model's time goes:
//! with `WEBNN_CPU_PROFILE=1` in the environment, every node's run time is
//! summed (per graph node: operator, input shapes, output shape) and the
//! table is written to stderr when the backend is dropped (the context is
//! destroyed, or the process exits). Off, it costs one relaxed load per
//! node.

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

fn table() -> &'static Mutex<HashMap<String, Entry>> {
    static TABLE: OnceLock<Mutex<HashMap<String, Entry>>> = OnceLock::new();
    TABLE.get_or_init(Default::default)
}

/// Whether `WEBNN_CPU_PROFILE` asks for the table (read once).
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("WEBNN_CPU_PROFILE").is_ok_and(|v| !v.is_empty() && v != "0"))
}

/// Adds one run of the node that `key` names.
pub fn record(key: impl FnOnce() -> String, nanos: u64) {
    if let Ok(mut t) = table().lock() {
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
pub fn report() {
    let Ok(mut t) = table().lock() else { return };
    if t.is_empty() {
        return;
    }
    let mut rows: Vec<_> = t.drain().collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.1.nanos));
    let total: u64 = rows.iter().map(|r| r.1.nanos).sum();
    let mut out = String::from("webnn-node CPU profile (per node: share, calls, mean, fastest)\n");
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
        let op = key.split_whitespace().nth(1).unwrap_or("");
        *ops.entry(op).or_default() += e.nanos;
    }
    let mut ops: Vec<_> = ops.into_iter().collect();
    ops.sort_by_key(|o| std::cmp::Reverse(o.1));
    for (op, ns) in ops {
        let _ = writeln!(out, "{:5.1}% {op}", 100.0 * ns as f64 / total.max(1) as f64);
    }
    eprint!("{out}");
}
