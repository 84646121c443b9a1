//! webnn-node: the W3C Web Neural Network API for Node.js.
//!
//! Layers, from the JS edge inwards (see ARCHITECTURE.md):
//! - [`binding`]: the only code that touches napi;
//! - [`timeline`]: one worker thread per context, running commands in order;
//! - [`graph`]: the graph IR and the pure per-operator validation;
//! - [`backend`]: the CPU and GPU (wgpu) implementations of one trait;
//! - [`copy`]: large copies on the JS thread, shared with an idle pool thread.

// Proving that wgpu's context types are `Send` walks deeper than the default
// limit of 128; newer compilers warn that this will become an error.
#![recursion_limit = "256"]

pub mod backend;
pub mod binding;
pub mod copy;
pub mod error;
pub mod f16;
pub mod graph;
pub mod tensor;
pub mod timeline;
pub mod types;
