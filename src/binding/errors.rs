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
            // SAFETY: the current callback's env and a value made in it
            // (raw.rs's rules); napi-rs is told of the pending exception
            // by the returned status.
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

/// Takes the exception pending in `env`, if any: one that the caller's
/// code threw (a getter, a Proxy trap) while an argument was read.
pub fn take_exception(env: napi_env) -> Option<napi_value> {
    let mut pending = false;
    // SAFETY: the current callback's env; `pending` is a live local.
    unsafe { sys::napi_is_exception_pending(env, &mut pending) };
    if !pending {
        return None;
    }
    let mut v = ptr::null_mut();
    // SAFETY: the current callback's env; `v` is a live local that
    // receives a handle in this callback's scope.
    let status = unsafe { sys::napi_get_and_clear_last_exception(env, &mut v) };
    (status == sys::Status::napi_ok && !v.is_null()).then_some(v)
}

/// A promise already rejected (for the promise-returning methods, which
/// report argument errors by rejection as WebIDL says): with the exception
/// the caller's own code threw while its arguments were read, when there is
/// one (WebIDL passes it on unchanged), else with `e`.
pub fn rejected(env: napi_env, e: &Error) -> napi::Result<napi_value> {
    let reason = match take_exception(env) {
        Some(v) => v,
        None => js_error(env, e)?,
    };
    let (d, p) = raw::create_promise(env)?;
    raw::reject(env, d, reason)?;
    Ok(p)
}

/// Runs the body of a promise-returning method: whatever fails in it (a
/// core error, a failed N-API call, an exception the caller's getter threw)
/// becomes a rejected promise. Such a method never throws.
pub fn promise(
    env: napi_env,
    body: impl FnOnce() -> std::result::Result<napi_value, Error>,
) -> napi::Result<super::raw::JsRaw> {
    let p = match body() {
        Ok(p) => p,
        Err(e) => rejected(env, &e)?,
    };
    Ok(super::raw::JsRaw(p))
}

/// Converts napi failures (e.g. a failed N-API call) to a core UnknownError.
pub fn from_napi(e: NapiError) -> Error {
    Error::unknown(e.reason.clone())
}
