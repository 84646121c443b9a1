//! The napi binding layer: the only code that touches N-API.
//!
//! It converts JS values into plain Rust values (`graph::args::Val`,
//! descriptors, element buffers), calls the core, and turns core errors into
//! the exact JS exceptions. Promises are settled through one threadsafe
//! function per context (see `completion`).

pub mod builder;
pub mod completion;
pub mod context;
pub mod convert;
pub mod errors;
pub mod limits;
pub mod raw;
pub mod tensor;
pub mod views;
