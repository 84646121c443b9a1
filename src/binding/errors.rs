//! Turns core [`Error`]s into the exact JS exceptions of the spec.
//!
//! TypeError comes from `napi_create_type_error`; every other kind is a
//! `DOMException` built from the global constructor, so all errors belong to
//! the main realm of the addon's environment.

use std::ptr;

use napi::sys::{self, napi_env, napi_value};
use napi::{Error as NapiError, Status};

use super::raw::{self, call};
use crate::error::{Error, ErrorKind};

/// Builds the JS error object for `e`.
pub fn js_error(env: napi_env, e: &Error) -> napi::Result<napi_value> {
    let msg = raw::string(env, &e.message)?;
    match e.kind {
        ErrorKind::Type => {
            let mut v = ptr::null_mut();
            call!(napi_create_type_error(env, ptr::null_mut(), msg, &mut v))?;
            Ok(v)
        }
        kind => {
            let name = raw::string(env, kind.js_name())?;
            raw::construct_global(env, "DOMException", &[msg, name])
        }
    }
}

/// Throws `e` as its JS exception and returns the napi error that tells
/// napi-rs an exception is already pending.
pub fn throw(env: napi_env, e: Error) -> NapiError {
    match js_error(env, &e) {
        Ok(v) => {
            unsafe { sys::napi_throw(env, v) };
            NapiError::new(Status::PendingException, e.message)
        }
        Err(inner) => inner,
    }
}

/// Converts a core result into a napi result, throwing on error.
pub fn or_throw<T>(env: napi_env, r: crate::error::Result<T>) -> napi::Result<T> {
    r.map_err(|e| throw(env, e))
}

/// A promise already rejected with `e` (for the promise-returning methods,
/// which report argument errors by rejection as the spec says).
pub fn rejected(env: napi_env, e: &Error) -> napi::Result<napi_value> {
    let (d, p) = raw::create_promise(env)?;
    raw::reject(env, d, js_error(env, e)?)?;
    Ok(p)
}

/// Converts napi failures (e.g. a failed N-API call) to a core UnknownError.
pub fn from_napi(e: NapiError) -> Error {
    Error::unknown(e.reason.clone())
}
