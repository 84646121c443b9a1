//! The graph IR: operands, operator nodes, and the builder that validates
//! each operator as it is added.
//!
//! Everything here is pure Rust. The binding layer feeds [`GraphBuilder`]
//! with [`args::Val`] trees; operator families under [`ops`] read and
//! validate their arguments and return resolved parameters ([`op::Op`]) and
//! output descriptors. A finished [`Graph`] is immutable and shared with the
//! backend that compiles it.

pub mod args;
pub mod op;
pub mod ops;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::types::OperandDescriptor;
use args::{Ctx, Val};
pub use op::Op;

/// Index of an operand in its graph.
pub type OperandId = usize;

/// Where an operand's value comes from.
#[derive(Debug, Clone)]
pub enum Source {
    /// A named graph input, fed at dispatch.
    Input(String),
    /// A constant: its bytes in the external layout.
    Constant(Arc<Vec<u8>>),
    /// Output `index` of node `node`.
    Node { node: usize, index: usize },
}

/// One operator application.
#[derive(Debug, Clone)]
pub struct Node {
    pub op: Op,
    /// Operand inputs, in the order the operator family documents.
    pub inputs: Vec<OperandId>,
    pub outputs: Vec<OperandId>,
    /// The operator's `label` option (empty when not given).
    pub label: String,
}

/// A validated, immutable graph: what `build()` hands to a backend.
#[derive(Debug, Clone)]
pub struct Graph {
    pub operands: Vec<OperandDescriptor>,
    pub sources: Vec<Source>,
    /// Nodes in topological order (creation order), only those that the
    /// outputs depend on.
    pub nodes: Vec<Node>,
    pub inputs: Vec<(String, OperandId)>,
    pub outputs: Vec<(String, OperandId)>,
}

impl Graph {
    pub fn input_index(&self, name: &str) -> Option<usize> {
        self.inputs.iter().position(|(n, _)| n == name)
    }
    pub fn output_index(&self, name: &str) -> Option<usize> {
        self.outputs.iter().position(|(n, _)| n == name)
    }
    /// The constant bytes of an operand, if it is a constant.
    pub fn constant(&self, id: OperandId) -> Option<&Arc<Vec<u8>>> {
        match self.sources.get(id) {
            Some(Source::Constant(c)) => Some(c),
            _ => None,
        }
    }

    /// The bytes of all its constants.
    pub fn constant_bytes(&self) -> usize {
        (0..self.operands.len())
            .filter_map(|i| self.constant(i))
            .map(|c| c.len())
            .sum()
    }

    /// What a caller of the graph needs (its operands' descriptors and its
    /// named inputs and outputs), without its nodes and sources: what an
    /// `MLGraph` keeps once the backend has compiled the graph, so that a
    /// graph's structure is held once, by its backend.
    pub fn interface(&self) -> Graph {
        Graph {
            operands: self.operands.clone(),
            sources: Vec::new(),
            nodes: Vec::new(),
            inputs: self.inputs.clone(),
            outputs: self.outputs.clone(),
        }
    }
}

static NEXT_BUILDER_ID: AtomicU64 = AtomicU64::new(1);

/// Accumulates operands and nodes, validating each operator as it is added.
#[derive(Debug)]
pub struct GraphBuilder {
    /// Unique among all builders of the process: operands carry it so that
    /// an operand of another builder is refused.
    pub id: u64,
    operands: Vec<OperandDescriptor>,
    sources: Vec<Source>,
    nodes: Vec<Node>,
    input_names: HashSet<String>,
    built: bool,
}

impl Default for GraphBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl GraphBuilder {
    pub fn new() -> Self {
        GraphBuilder {
            id: NEXT_BUILDER_ID.fetch_add(1, Ordering::Relaxed),
            operands: Vec::new(),
            sources: Vec::new(),
            nodes: Vec::new(),
            input_names: HashSet::new(),
            built: false,
        }
    }

    pub fn is_built(&self) -> bool {
        self.built
    }

    /// Where an operand comes from, for `util.inspect`: `input "name"`,
    /// `constant`, or the operator whose output it is, with that
    /// operator's label.
    pub fn origin(&self, id: OperandId) -> (String, String) {
        match &self.sources[id] {
            Source::Input(name) => (format!("input {name:?}"), String::new()),
            Source::Constant(_) => ("constant".to_string(), String::new()),
            Source::Node { node, .. } => {
                let n = &self.nodes[*node];
                (n.op.name().to_string(), n.label.clone())
            }
        }
    }

    pub fn desc(&self, id: OperandId) -> &OperandDescriptor {
        &self.operands[id]
    }

    fn check_open(&self) -> Result<()> {
        if self.built {
            Err(Error::invalid_state(
                "this MLGraphBuilder has already built its graph",
            ))
        } else {
            Ok(())
        }
    }

    /// `input(name, descriptor)`.
    pub fn input(&mut self, name: &str, desc: OperandDescriptor) -> Result<OperandId> {
        self.check_open()?;
        if name.is_empty() {
            return Err(Error::type_error("input: the name must not be empty"));
        }
        if !self.input_names.insert(name.to_string()) {
            return Err(Error::type_error(format!(
                "input: the name {name:?} is already used by another input"
            )));
        }
        Ok(self.add_operand(desc, Source::Input(name.to_string())))
    }

    /// `constant(descriptor, buffer)`: `data` holds exactly the descriptor's
    /// byte length in the external layout.
    pub fn constant(&mut self, desc: OperandDescriptor, data: Arc<Vec<u8>>) -> Result<OperandId> {
        self.check_open()?;
        if data.len() != desc.byte_length() {
            return Err(Error::type_error(format!(
                "constant: the buffer holds {} bytes but the descriptor needs {}",
                data.len(),
                desc.byte_length()
            )));
        }
        Ok(self.add_operand(desc, Source::Constant(data)))
    }

    /// The bytes of a constant operand (external layout), so validation
    /// can check values the spec constrains; `None` for other operands.
    pub fn constant_bytes(&self, id: OperandId) -> Option<&Arc<Vec<u8>>> {
        match self.sources.get(id) {
            Some(Source::Constant(c)) => Some(c),
            _ => None,
        }
    }

    fn add_operand(&mut self, desc: OperandDescriptor, source: Source) -> OperandId {
        self.operands.push(desc);
        self.sources.push(source);
        self.operands.len() - 1
    }

    /// Resolves an operand argument, refusing values that are not operands
    /// of this builder.
    pub fn operand(&self, ctx: &Ctx, v: &Val, what: &str) -> Result<OperandId> {
        match v {
            Val::Operand { builder, id } if *builder == self.id && *id < self.operands.len() => {
                Ok(*id)
            }
            Val::Operand { .. } => {
                Err(ctx.err(format!("{what} is an MLOperand of another MLGraphBuilder")))
            }
            Val::Undefined => Err(ctx.err(format!("{what} is required"))),
            other => Err(ctx.err(format!(
                "{what} must be an MLOperand, not {}",
                other.type_name()
            ))),
        }
    }

    /// An optional operand option (`undefined` gives `None`).
    pub fn opt_operand(&self, ctx: &Ctx, v: &Val, what: &str) -> Result<Option<OperandId>> {
        if v.is_undefined() {
            Ok(None)
        } else {
            self.operand(ctx, v, what).map(Some)
        }
    }

    /// A `sequence<MLOperand>`.
    pub fn operand_list(&self, ctx: &Ctx, v: &Val, what: &str) -> Result<Vec<OperandId>> {
        ctx.list(v, what)?
            .iter()
            .enumerate()
            .map(|(i, x)| self.operand(ctx, x, &format!("{what}[{i}]")))
            .collect()
    }

    /// Adds a validated node and returns its output operands.
    pub fn push(
        &mut self,
        op: impl Into<Op>,
        inputs: Vec<OperandId>,
        outputs: Vec<OperandDescriptor>,
        label: String,
    ) -> Vec<OperandId> {
        let node = self.nodes.len();
        let ids: Vec<OperandId> = outputs
            .into_iter()
            .enumerate()
            .map(|(index, d)| self.add_operand(d, Source::Node { node, index }))
            .collect();
        self.nodes.push(Node {
            op: op.into(),
            inputs,
            outputs: ids.clone(),
            label,
        });
        ids
    }

    /// Calls the builder method `name` with the converted JS arguments.
    /// Returns the output operands (one for most operators).
    pub fn call(&mut self, name: &str, args: &[Val]) -> Result<Vec<OperandId>> {
        self.check_open()?;
        let f = ops::lookup(name).ok_or_else(|| {
            Error::type_error(format!("{name} is not an MLGraphBuilder operator"))
        })?;
        f(self, args)
    }

    /// `build(outputs)`: checks the outputs, keeps only the nodes they need,
    /// and freezes the graph. The builder cannot be used afterwards.
    pub fn build(&mut self, outputs: Vec<(String, OperandId)>) -> Result<Graph> {
        self.check_open()?;
        if outputs.is_empty() {
            return Err(Error::type_error("build: the outputs must not be empty"));
        }
        let mut names = HashSet::new();
        for (name, id) in &outputs {
            if name.is_empty() {
                return Err(Error::type_error("build: an output name must not be empty"));
            }
            if !names.insert(name) {
                return Err(Error::type_error(format!(
                    "build: duplicate output name {name:?}"
                )));
            }
            match self.sources[*id] {
                Source::Input(_) | Source::Constant(_) => {
                    return Err(Error::type_error(format!(
                        "build: the output {name:?} is an input or a constant, not an operator's result"
                    )))
                }
                Source::Node { .. } => {}
            }
        }
        // Mark what the outputs depend on, walking the nodes backwards.
        let mut needed = vec![false; self.operands.len()];
        for (_, id) in &outputs {
            needed[*id] = true;
        }
        let mut keep = vec![false; self.nodes.len()];
        for (n, node) in self.nodes.iter().enumerate().rev() {
            if node.outputs.iter().any(|&o| needed[o]) {
                keep[n] = true;
                for &i in &node.inputs {
                    needed[i] = true;
                }
            }
        }
        // The builder is spent from here (`check_open` refuses it), so its
        // parts move into the graph rather than being copied: a JS builder
        // lives until it is collected, long after its graph is built.
        let mut remap: HashMap<usize, usize> = HashMap::new();
        let mut nodes = Vec::with_capacity(keep.iter().filter(|&&k| k).count());
        for (n, node) in std::mem::take(&mut self.nodes).into_iter().enumerate() {
            if keep[n] {
                remap.insert(n, nodes.len());
                nodes.push(node);
            }
        }
        let mut sources: Vec<Source> = std::mem::take(&mut self.sources)
            .into_iter()
            .map(|s| match s {
                Source::Node { node, index } => match remap.get(&node) {
                    Some(&n) => Source::Node { node: n, index },
                    // Unused operand: keep a harmless placeholder.
                    None => Source::Node {
                        node: usize::MAX,
                        index,
                    },
                },
                other => other,
            })
            .collect();
        sources.shrink_to_fit();
        let inputs = sources
            .iter()
            .enumerate()
            .filter_map(|(id, s)| match s {
                Source::Input(name) if needed[id] => Some((name.clone(), id)),
                _ => None,
            })
            .collect();
        self.input_names = HashSet::new();
        self.built = true;
        let mut operands = std::mem::take(&mut self.operands);
        operands.shrink_to_fit();
        Ok(Graph {
            operands,
            sources,
            nodes,
            inputs,
            outputs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::DataType;

    fn f32_desc(shape: &[usize]) -> OperandDescriptor {
        OperandDescriptor::new(DataType::Float32, shape.to_vec()).unwrap()
    }

    /// x + c, and an unused relu of x.
    fn two_ops() -> (GraphBuilder, OperandId) {
        let mut b = GraphBuilder::new();
        let x = b.input("x", f32_desc(&[2])).unwrap();
        let c = b.constant(f32_desc(&[2]), Arc::new(vec![0u8; 8])).unwrap();
        let val = |id| Val::Operand { builder: b.id, id };
        let (vx, vc) = (val(x), val(c));
        b.call("relu", std::slice::from_ref(&vx)).unwrap();
        let sum = b.call("add", &[vx, vc]).unwrap()[0];
        (b, sum)
    }

    #[test]
    fn build_moves_the_builders_parts_into_the_graph() {
        let (mut b, sum) = two_ops();
        let g = b.build(vec![("y".into(), sum)]).unwrap();
        // The unused relu is gone, and nothing is held twice: the spent
        // builder keeps no nodes, sources or operands.
        assert_eq!(g.nodes.len(), 1);
        assert_eq!(g.nodes.capacity(), 1);
        assert_eq!(g.sources.len(), 4);
        assert!(b.nodes.is_empty() && b.sources.is_empty() && b.operands.is_empty());
        assert!(b.build(vec![("y".into(), sum)]).is_err());
    }

    #[test]
    fn an_interface_keeps_what_a_caller_needs() {
        let (mut b, sum) = two_ops();
        let g = b.build(vec![("y".into(), sum)]).unwrap();
        let i = g.interface();
        assert!(i.nodes.is_empty() && i.sources.is_empty());
        assert_eq!(i.operands, g.operands);
        assert_eq!(i.inputs, g.inputs);
        assert_eq!(i.outputs, g.outputs);
        assert_eq!(g.constant_bytes(), 8);
        // Its operands have no sources: none reads as a constant.
        assert_eq!(i.constant(1), None);
        assert_eq!(i.constant_bytes(), 0);
    }
}
