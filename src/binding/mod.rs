//! The napi binding layer: the only code that touches N-API.
//!
//! It converts JS values into plain Rust values (`graph::args::Val`,
//! descriptors, element buffers), calls the core, and turns core errors into
//! the exact JS exceptions. Promises are settled through one threadsafe
//! function per context (see `completion`).
//!
//! Its files import one way, bottom to top: `raw` and `errors`; the plain
//! conversions (`operand`, `convert`, `views`, `limits`); `shared` (a
//! context's JS-thread state, its pending promises, the `MLContext` and
//! `TensorInfo` structs); `tensor` (`MLTensor`, `MLGraph`); `completion`
//! (which settles promises with new contexts, tensors and graphs);
//! `context` (`MLContext`'s methods); `builder`; `inspect`.

// N-API handles (`napi_env`, `napi_value`) are opaque pointers that only
// N-API itself dereferences and validates; functions taking them are not
// unsafe to call in the sense this lint means.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

// First: it declares the MLContext struct, whose methods context.rs adds
// (napi-derive learns a class's JS name from its struct only when the
// struct is expanded first; see `inspect` below).
pub mod shared;

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
