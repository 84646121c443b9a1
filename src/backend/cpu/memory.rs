//! The memory a CPU graph needs, planned at `build()`: the bytes of the
//! intermediates alive at once, node after node, with the same bookkeeping
//! as `execute` (an output is counted from its node on, an intermediate
//! until its last reader; inputs and constants are the caller's), and
//! the largest single buffer. A graph whose peak cannot fit in the
//! context's `memoryLimit` or in the memory the process can have is
//! rejected there with an `OperationError` that names the operand, rather
//! than failing at every dispatch (or, before allocations were fallible,
//! taking the process down).

use super::CompiledGraph;
use crate::error::{Error, Result};
use crate::graph::Source;

/// The memory this process may use at most, where the system says (Linux):
/// the machine's physical memory, or its control group's limit when lower.
pub(super) fn physical_memory() -> Option<usize> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: usize = info
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    let total = kb.checked_mul(1024)?;
    // cgroup v2: a number of bytes, or "max".
    let group = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok());
    Some(group.map_or(total, |g| g.min(total)))
}

/// What [`plan`] found.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct MemoryPlan {
    /// The most bytes of intermediates alive at once.
    pub peak: usize,
    /// By node: the bytes alive once its outputs exist (before its dead
    /// inputs go).
    pub live: Vec<usize>,
    /// The largest single intermediate: operand id and bytes.
    pub largest: Option<(usize, usize)>,
}

/// Walks the compiled graph as `execute` does, counting bytes instead of
/// allocating them.
pub(super) fn plan(cg: &CompiledGraph) -> MemoryPlan {
    let g = &*cg.graph;
    let mut held = vec![false; g.operands.len()];
    let mut at = Vec::with_capacity(g.nodes.len());
    let (mut live, mut peak) = (0usize, 0usize);
    let mut largest: Option<(usize, usize)> = None;
    for (n, node) in g.nodes.iter().enumerate() {
        let plan = cg.nchwc.as_ref();
        let fused = plan.is_some_and(|pl| pl.is_fused(n));
        if !fused {
            let outs: Vec<usize> = match plan.and_then(|pl| pl.chain(n)) {
                Some(ch) => vec![ch.out],
                None => node.outputs.clone(),
            };
            for o in outs {
                let bytes = cg.operand_bytes(o);
                live = live.saturating_add(bytes);
                held[o] = matches!(g.sources[o], Source::Node { .. });
                if largest.is_none_or(|(_, b)| bytes > b) {
                    largest = Some((o, bytes));
                }
            }
            peak = peak.max(live);
        }
        at.push(live);
        for &i in &node.inputs {
            if cg.last_use[i] == n && std::mem::replace(&mut held[i], false) {
                live = live.saturating_sub(cg.operand_bytes(i));
            }
        }
    }
    MemoryPlan {
        peak,
        live: at,
        largest,
    }
}

/// Refuses a graph whose plan exceeds `limit` (`what` says whose limit).
pub(super) fn check(cg: &CompiledGraph, p: &MemoryPlan, limit: usize, what: &str) -> Result<()> {
    // The first node whose output does not fit is the one to name.
    let Some(n) = p.live.iter().position(|&l| l > limit) else {
        return Ok(());
    };
    let g = &*cg.graph;
    let node = &g.nodes[n];
    let label = match node.label.is_empty() {
        true => String::new(),
        false => format!(" [{}]", node.label),
    };
    let outs = node
        .outputs
        .iter()
        .map(|&o| format!("{:?} ({} bytes)", g.operands[o].shape, cg.operand_bytes(o)))
        .collect::<Vec<_>>()
        .join(", ");
    let largest = match p.largest {
        Some((o, bytes)) => format!(
            "; the largest intermediate is {:?} {:?} ({bytes} bytes)",
            g.operands[o].data_type, g.operands[o].shape
        ),
        None => String::new(),
    };
    Err(Error::operation(format!(
        "this graph needs {} bytes of intermediates at once from the output of {}{label} \
         (shape {outs}) on (its peak: {} bytes), more than {what} of {limit} bytes{largest}",
        p.live[n],
        node.op.name(),
        p.peak,
    )))
}

#[cfg(test)]
mod tests {
    use crate::backend::cpu::CpuBackend;
    use crate::backend::testing::{list, operand};
    use crate::backend::Backend;
    use crate::error::ErrorKind;
    use crate::graph::{Graph, GraphBuilder};
    use crate::types::{DataType, OperandDescriptor};
    use std::sync::Arc;

    /// `x` [n] float32 through `ops` one after another (each a unary
    /// builder method), `out` the last.
    fn chain(n: usize, ops: &[&str]) -> Graph {
        let mut b = GraphBuilder::new();
        let desc = OperandDescriptor::new(DataType::Float32, vec![n]).unwrap();
        let mut v = b.input("x", desc).unwrap();
        for op in ops {
            v = b.call(op, &[operand(&b, v)]).unwrap()[0];
        }
        b.build(vec![("out".into(), v)]).unwrap()
    }

    /// A chain of element-wise nodes holds two intermediates at once (a
    /// node's input until its output is made), never the whole chain.
    #[test]
    fn the_peak_is_what_is_alive_at_once() {
        let mut be = CpuBackend::new();
        be.compile(1, Arc::new(chain(1000, &["relu", "neg", "abs", "exp"])))
            .unwrap();
        let p = super::plan(&be.graphs[&1]);
        assert_eq!(p.peak, 8000);
        assert_eq!(p.largest.map(|(_, b)| b), Some(4000));
    }

    /// A graph whose peak exceeds the memoryLimit is refused at compile
    /// with an OperationError naming the operator, its label and shape and
    /// the bytes; one that fits compiles.
    #[test]
    fn a_graph_over_the_limit_is_refused_at_build() {
        let mut be = CpuBackend::new().with_memory_limit(Some(7999));
        let e = be
            .compile(1, Arc::new(chain(1000, &["relu", "neg"])))
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Operation);
        assert!(e.message.contains("8000 bytes"), "{}", e.message);
        assert!(e.message.contains("neg"), "{}", e.message);
        assert!(e.message.contains("[1000]"), "{}", e.message);
        assert!(e.message.contains("memoryLimit of 7999"), "{}", e.message);
        let mut be = CpuBackend::new().with_memory_limit(Some(8000));
        be.compile(1, Arc::new(chain(1000, &["relu", "neg"])))
            .unwrap();
    }

    /// The graph: one float32 element expanded to the largest
    /// legal count (8 GiB) fits no small limit, and is refused at build
    /// rather than at dispatch.
    #[test]
    fn a_huge_expand_is_refused_at_build() {
        let mut b = GraphBuilder::new();
        let desc = OperandDescriptor::new(DataType::Float32, vec![1]).unwrap();
        let x = b.input("x", desc).unwrap();
        let e = b
            .call("expand", &[operand(&b, x), list(&[2147483647.0])])
            .unwrap()[0];
        let m = b.call("reduceMax", &[operand(&b, e)]).unwrap()[0];
        let g = b.build(vec![("m".into(), m)]).unwrap();
        let mut be = CpuBackend::new().with_memory_limit(Some(1 << 30));
        let err = be.compile(1, Arc::new(g)).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Operation);
        assert!(err.message.contains("8589934588 bytes"), "{}", err.message);
        assert!(err.message.contains("expand"), "{}", err.message);
    }
}
