//! The napi binding layer: the only code that touches N-API.
//!
//! It converts JS values into plain Rust values (`graph::args::Val`,
//! descriptors, element buffers), calls the core, and turns core errors into
//! the exact JS exceptions. Promises are settled through one threadsafe
//! function per context (see `completion`).

// N-API handles (`napi_env`, `napi_value`) are opaque pointers that only
// N-API itself dereferences and validates; functions taking them are not
// unsafe to call in the sense this lint means.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

pub mod builder;
pub mod completion;
pub mod context;
pub mod convert;
pub mod errors;
pub mod limits;
pub mod operand;
pub mod raw;
pub mod tensor;
pub mod views;
// Last: it adds methods to classes declared above, and napi-derive learns a
// class's JS name (`MLTensor`, not `MlTensor`) from its struct only when the
// struct is expanded first.
pub mod inspect;
