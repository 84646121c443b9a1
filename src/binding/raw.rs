//! Thin safe-ish wrappers over the raw N-API calls the binding needs.
//!
//! napi-rs gives us class registration and wrapping; for everything that
//! must be exact (which JS error is thrown, typed-array details, detaching,
//! promises resolved from our own threadsafe function) we call N-API
//! directly through these helpers. Every helper returns a `napi::Result`
//! so that a failing N-API call becomes a JS exception, never a crash.
//!
//! The handles the binding passes to N-API obey three rules, which the
//! `SAFETY` comments of the binding refer to:
//! - **env**: a `napi_env` is the environment of the N-API callback now
//!   running on this JS thread (napi-rs hands it to each method; our own
//!   callbacks, finalizers and hooks receive it as an argument), used
//!   only on this thread before that callback returns;
//! - **handles**: a `napi_value` was made in that callback (an argument,
//!   or returned by an N-API call in it), so its handle scope is still
//!   open; what must outlive the callback is kept as a [`StrongRef`] or
//!   as a raw `napi_deferred` or threadsafe function handle, each with
//!   its own rule where it is kept;
//! - **pointers**: out-parameters point to live locals of the right type,
//!   and a (pointer, length) pair describes a live Rust buffer of that
//!   length.
//!
//! N-API itself checks what a value is (an object, a typed array...) and
//! reports a mismatch as a status, so a JS value of the wrong kind is an
//! error here, never undefined behaviour.

use std::ffi::c_void;
use std::ptr;

use napi::bindgen_prelude::{FromNapiValue, ToNapiValue, TypeName, ValidateNapiValue};
use napi::sys::{self, napi_env, napi_value};
use napi::{Error as NapiError, Result, Status, ValueType};

/// A raw JS value passed through napi-rs untouched, so that the binding
/// converts it itself with exact errors.
#[derive(Clone, Copy)]
pub struct JsRaw(pub napi_value);

impl TypeName for JsRaw {
    fn type_name() -> &'static str {
        "unknown"
    }
    fn value_type() -> ValueType {
        ValueType::Unknown
    }
}

impl ValidateNapiValue for JsRaw {}

impl FromNapiValue for JsRaw {
    unsafe fn from_napi_value(_env: napi_env, v: napi_value) -> Result<Self> {
        Ok(JsRaw(v))
    }
}

impl ToNapiValue for JsRaw {
    unsafe fn to_napi_value(_env: napi_env, v: Self) -> Result<napi_value> {
        Ok(v.0)
    }
}

pub fn check(status: sys::napi_status, what: &str) -> Result<()> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(NapiError::new(
            Status::from(status),
            format!("N-API call failed: {what}"),
        ))
    }
}

/// Calls the N-API function `$f` and turns its status into a
/// `napi::Result`. A use is an unsafe call, whose arguments must follow
/// the module's rules (env, handles, pointers); each use's arguments are
/// visible at the call, all of them locals, handles of the current
/// callback, or pointers to live buffers with their lengths.
macro_rules! call {
    ($f:ident ( $($arg:expr),* $(,)? )) => {
        $crate::binding::raw::check(
            // SAFETY: every use passes the current callback's env and
            // handles, out-pointers to live locals and (pointer, length)
            // pairs of live buffers (the module's rules); N-API reports a
            // value of the wrong kind as a status.
            unsafe { sys::$f($($arg),*) },
            stringify!($f),
        )
    };
}
pub(crate) use call;

pub fn type_of(env: napi_env, v: napi_value) -> Result<ValueType> {
    let mut t = 0;
    call!(napi_typeof(env, v, &mut t))?;
    Ok(ValueType::from(t))
}

pub fn undefined(env: napi_env) -> Result<napi_value> {
    let mut v = ptr::null_mut();
    call!(napi_get_undefined(env, &mut v))?;
    Ok(v)
}

pub fn global(env: napi_env) -> Result<napi_value> {
    let mut v = ptr::null_mut();
    call!(napi_get_global(env, &mut v))?;
    Ok(v)
}

pub fn string(env: napi_env, s: &str) -> Result<napi_value> {
    let mut v = ptr::null_mut();
    call!(napi_create_string_utf8(
        env,
        s.as_ptr() as *const _,
        s.len() as isize,
        &mut v
    ))?;
    Ok(v)
}

pub fn number(env: napi_env, x: f64) -> Result<napi_value> {
    let mut v = ptr::null_mut();
    call!(napi_create_double(env, x, &mut v))?;
    Ok(v)
}

pub fn boolean(env: napi_env, b: bool) -> Result<napi_value> {
    let mut v = ptr::null_mut();
    call!(napi_get_boolean(env, b, &mut v))?;
    Ok(v)
}

pub fn object(env: napi_env) -> Result<napi_value> {
    let mut v = ptr::null_mut();
    call!(napi_create_object(env, &mut v))?;
    Ok(v)
}

pub fn array(env: napi_env, items: &[napi_value]) -> Result<napi_value> {
    let mut v = ptr::null_mut();
    call!(napi_create_array_with_length(env, items.len(), &mut v))?;
    for (i, &it) in items.iter().enumerate() {
        call!(napi_set_element(env, v, i as u32, it))?;
    }
    Ok(v)
}

pub fn set(env: napi_env, obj: napi_value, key: &str, v: napi_value) -> Result<()> {
    let k = string(env, key)?;
    call!(napi_set_property(env, obj, k, v))
}

pub fn get(env: napi_env, obj: napi_value, key: &str) -> Result<napi_value> {
    let k = string(env, key)?;
    let mut v = ptr::null_mut();
    call!(napi_get_property(env, obj, k, &mut v))?;
    Ok(v)
}

pub fn get_string(env: napi_env, v: napi_value) -> Result<String> {
    // Names and option strings are short: one call into a stack buffer
    // reads most of them whole. N-API stops one byte short of the buffer
    // (for the NUL), so a string that fills it may be longer: then ask for
    // the length and read again.
    let mut small = [0u8; 128];
    let mut len = 0;
    call!(napi_get_value_string_utf8(
        env,
        v,
        small.as_mut_ptr() as *mut _,
        small.len(),
        &mut len
    ))?;
    if len < small.len() - 1 {
        return String::from_utf8(small[..len].to_vec())
            .map_err(|_| NapiError::from_reason("invalid UTF-8"));
    }
    len = 0;
    call!(napi_get_value_string_utf8(
        env,
        v,
        ptr::null_mut(),
        0,
        &mut len
    ))?;
    let mut buf = vec![0u8; len + 1];
    call!(napi_get_value_string_utf8(
        env,
        v,
        buf.as_mut_ptr() as *mut _,
        buf.len(),
        &mut len
    ))?;
    buf.truncate(len);
    String::from_utf8(buf).map_err(|_| NapiError::from_reason("invalid UTF-8"))
}

pub fn get_number(env: napi_env, v: napi_value) -> Result<f64> {
    let mut x = 0.0;
    call!(napi_get_value_double(env, v, &mut x))?;
    Ok(x)
}

pub fn get_bool(env: napi_env, v: napi_value) -> Result<bool> {
    let mut b = false;
    call!(napi_get_value_bool(env, v, &mut b))?;
    Ok(b)
}

/// A BigInt as i128 (values beyond 128 bits are clamped, which no WebNN
/// data type can hold anyway).
pub fn get_bigint(env: napi_env, v: napi_value) -> Result<i128> {
    let mut count = 0usize;
    let mut sign = 0i32;
    // Asking for the word count alone requires a null sign pointer.
    call!(napi_get_value_bigint_words(
        env,
        v,
        ptr::null_mut(),
        &mut count,
        ptr::null_mut()
    ))?;
    let mut words = vec![0u64; count.max(1)];
    let mut count2 = words.len();
    call!(napi_get_value_bigint_words(
        env,
        v,
        &mut sign,
        &mut count2,
        words.as_mut_ptr()
    ))?;
    let mag: i128 = if count > 2 || (count == 2 && words[1] >> 63 != 0) {
        i128::MAX
    } else {
        (words[0] as i128) | ((*words.get(1).unwrap_or(&0) as i128) << 64)
    };
    Ok(if sign != 0 { -mag } else { mag })
}

pub fn bigint_i64(env: napi_env, x: i64) -> Result<napi_value> {
    let mut v = ptr::null_mut();
    call!(napi_create_bigint_int64(env, x, &mut v))?;
    Ok(v)
}

pub fn is_array(env: napi_env, v: napi_value) -> Result<bool> {
    let mut b = false;
    call!(napi_is_array(env, v, &mut b))?;
    Ok(b)
}

pub fn array_length(env: napi_env, v: napi_value) -> Result<u32> {
    let mut n = 0;
    call!(napi_get_array_length(env, v, &mut n))?;
    Ok(n)
}

pub fn element(env: napi_env, v: napi_value, i: u32) -> Result<napi_value> {
    let mut e = ptr::null_mut();
    call!(napi_get_element(env, v, i, &mut e))?;
    Ok(e)
}

/// The string keys of an object: own enumerable ones when `own_only`
/// (records), else including the prototype chain (dictionaries).
pub fn keys(env: napi_env, obj: napi_value, own_only: bool) -> Result<Vec<String>> {
    let names = key_array(env, obj, own_only)?;
    (0..array_length(env, names)?)
        .map(|i| get_string(env, element(env, names, i)?))
        .collect()
}

/// The own enumerable string-keyed entries of an object (a record's
/// conversion): each key with its value, read through the key value N-API
/// returned rather than a string made again from it.
pub fn entries(env: napi_env, obj: napi_value) -> Result<Vec<(String, napi_value)>> {
    let names = object_keys(env, obj)?;
    (0..array_length(env, names)?)
        .map(|i| {
            let key = element(env, names, i)?;
            let mut v = ptr::null_mut();
            call!(napi_get_property(env, obj, key, &mut v))?;
            Ok((get_string(env, key)?, v))
        })
        .collect()
}

/// `Object.keys(obj)`: the own enumerable string keys, as
/// [`key_array`] with `own_only` gives them, in the same order and with
/// the same traps of a Proxy, but from V8's cache of an object's keys
/// where it has one. N-API's own collection takes the general path every
/// time, which was a fifth of a small `dispatch()`'s cost.
fn object_keys(env: napi_env, obj: napi_value) -> Result<napi_value> {
    let keys = intrinsics(env)?.2;
    let mut names = ptr::null_mut();
    call!(napi_call_function(env, obj, keys, 1, &obj, &mut names))?;
    Ok(names)
}

/// The array of [`keys`]' names, as N-API makes it.
fn key_array(env: napi_env, obj: napi_value, own_only: bool) -> Result<napi_value> {
    let mut names = ptr::null_mut();
    let mode = if own_only {
        sys::KeyCollectionMode::own_only
    } else {
        sys::KeyCollectionMode::include_prototypes
    };
    call!(napi_get_all_property_names(
        env,
        obj,
        mode,
        sys::KeyFilter::enumerable | sys::KeyFilter::skip_symbols,
        sys::KeyConversion::numbers_to_strings,
        &mut names
    ))?;
    Ok(names)
}

/// `instanceof` against a global constructor (e.g. "SharedArrayBuffer").
pub fn instance_of_global(env: napi_env, v: napi_value, ctor: &str) -> Result<bool> {
    let c = get(env, global(env)?, ctor)?;
    if type_of(env, c)? != ValueType::Function {
        return Ok(false);
    }
    let mut b = false;
    call!(napi_instanceof(env, v, c, &mut b))?;
    Ok(b)
}

thread_local! {
    /// This JS thread's `SharedArrayBuffer.prototype.byteLength` getter,
    /// `Uint8Array` constructor and `Object.keys`, taken from the global
    /// object the first time they are needed (index.js asks at load,
    /// before any caller's code can replace them).
    static INTRINSICS: std::cell::RefCell<Option<(StrongRef, StrongRef, StrongRef)>> =
        const { std::cell::RefCell::new(None) };
}

fn intrinsics(env: napi_env) -> Result<(napi_value, napi_value, napi_value)> {
    INTRINSICS.with(|slot| {
        let mut slot = slot.borrow_mut();
        if slot.is_none() {
            let g = global(env)?;
            let proto = get(env, get(env, g, "SharedArrayBuffer")?, "prototype")?;
            let object = get(env, g, "Object")?;
            let describe = get(env, object, "getOwnPropertyDescriptor")?;
            let key = string(env, "byteLength")?;
            let mut d = ptr::null_mut();
            call!(napi_call_function(
                env,
                object,
                describe,
                2,
                [proto, key].as_ptr(),
                &mut d
            ))?;
            let getter = get(env, d, "get")?;
            let u8 = get(env, g, "Uint8Array")?;
            let keys = get(env, object, "keys")?;
            *slot = Some((
                StrongRef::new(env, getter)?,
                StrongRef::new(env, u8)?,
                StrongRef::new(env, keys)?,
            ));
        }
        let (getter, u8, keys) = slot.as_ref().expect("filled above");
        Ok((getter.get(env)?, u8.get(env)?, keys.get(env)?))
    })
}

/// Takes the intrinsics that [`shared_arraybuffer_bytes`] and [`entries`] need, so that code
/// run later (a caller's) cannot replace them.
pub fn capture_intrinsics(env: napi_env) {
    let _ = intrinsics(env);
}

/// Lets go of the intrinsics as the environment ends (their references
/// are then deleted by the [`sweep`] that follows).
pub fn release_intrinsics() {
    let _ = INTRINSICS.try_with(|slot| slot.borrow_mut().take());
}

/// Data and length of `v` when it is a SharedArrayBuffer (of any realm),
/// `None` otherwise. Runs none of the caller's code: the byteLength
/// getter checks the internal slot and throws for anything else (a Proxy
/// included, without consulting its traps), and a Uint8Array over a real
/// SharedArrayBuffer reads nothing the caller can change.
pub fn shared_arraybuffer_bytes(env: napi_env, v: napi_value) -> Result<Option<(*mut u8, usize)>> {
    if type_of(env, v)? != ValueType::Object || is_arraybuffer(env, v)? {
        return Ok(None);
    }
    let (getter, u8, _) = intrinsics(env)?;
    let mut len = ptr::null_mut();
    // SAFETY: the current callback's env and handles (`v`, and `getter`
    // from a StrongRef of this thread); no arguments (a null argv with
    // argc 0), and `len` a live local. Called directly rather than through
    // `call!`: a failure here is an answer, not an error.
    let status = unsafe { sys::napi_call_function(env, v, getter, 0, ptr::null(), &mut len) };
    if status != sys::Status::napi_ok {
        // Not a SharedArrayBuffer: the getter's TypeError is ours to drop.
        let mut e = ptr::null_mut();
        // SAFETY: the same env; `e` is a live local that receives the
        // exception (dropped: a handle in this callback's scope).
        unsafe { sys::napi_get_and_clear_last_exception(env, &mut e) };
        return Ok(None);
    }
    let mut view = ptr::null_mut();
    call!(napi_new_instance(env, u8, 1, [v].as_ptr(), &mut view))?;
    Ok(view_info(env, view)?.map(|i| (i.data, i.byte_length)))
}

/// Whether `v` is a SharedArrayBuffer of any realm.
pub fn is_shared_arraybuffer(env: napi_env, v: napi_value) -> Result<bool> {
    Ok(shared_arraybuffer_bytes(env, v)?.is_some())
}

/// `new globalThis[ctor](...args)`.
pub fn construct_global(env: napi_env, ctor: &str, args: &[napi_value]) -> Result<napi_value> {
    let c = get(env, global(env)?, ctor)?;
    let mut v = ptr::null_mut();
    call!(napi_new_instance(env, c, args.len(), args.as_ptr(), &mut v))?;
    Ok(v)
}

/// Details of a typed array or DataView.
pub struct ViewInfo {
    /// The typed array kind, `None` for a DataView.
    pub kind: Option<sys::napi_typedarray_type>,
    pub data: *mut u8,
    pub byte_length: usize,
    pub byte_offset: usize,
    pub buffer: napi_value,
    /// Elements (typed arrays) or bytes (DataView).
    pub length: usize,
}

/// Reads a typed array or DataView; `None` for other values.
pub fn view_info(env: napi_env, v: napi_value) -> Result<Option<ViewInfo>> {
    let mut is = false;
    call!(napi_is_typedarray(env, v, &mut is))?;
    if is {
        let (mut t, mut len, mut data, mut buf, mut off) = (
            0,
            0usize,
            ptr::null_mut::<c_void>(),
            ptr::null_mut(),
            0usize,
        );
        call!(napi_get_typedarray_info(
            env, v, &mut t, &mut len, &mut data, &mut buf, &mut off
        ))?;
        let el = element_size(t);
        return Ok(Some(ViewInfo {
            kind: Some(t),
            data: data as *mut u8,
            byte_length: len * el,
            byte_offset: off,
            buffer: buf,
            length: len,
        }));
    }
    call!(napi_is_dataview(env, v, &mut is))?;
    if is {
        let (mut len, mut data, mut buf, mut off) =
            (0usize, ptr::null_mut::<c_void>(), ptr::null_mut(), 0usize);
        call!(napi_get_dataview_info(
            env, v, &mut len, &mut data, &mut buf, &mut off
        ))?;
        return Ok(Some(ViewInfo {
            kind: None,
            data: data as *mut u8,
            byte_length: len,
            byte_offset: off,
            buffer: buf,
            length: len,
        }));
    }
    Ok(None)
}

pub fn element_size(t: sys::napi_typedarray_type) -> usize {
    match t {
        sys::TypedarrayType::int8_array
        | sys::TypedarrayType::uint8_array
        | sys::TypedarrayType::uint8_clamped_array => 1,
        sys::TypedarrayType::int16_array | sys::TypedarrayType::uint16_array => 2,
        sys::TypedarrayType::int32_array
        | sys::TypedarrayType::uint32_array
        | sys::TypedarrayType::float32_array => 4,
        sys::TypedarrayType::float64_array
        | sys::TypedarrayType::bigint64_array
        | sys::TypedarrayType::biguint64_array => 8,
        // float16_array and anything newer.
        _ => 2,
    }
}

pub fn is_arraybuffer(env: napi_env, v: napi_value) -> Result<bool> {
    let mut b = false;
    call!(napi_is_arraybuffer(env, v, &mut b))?;
    Ok(b)
}

/// Data pointer and length of an ArrayBuffer.
pub fn arraybuffer_info(env: napi_env, v: napi_value) -> Result<(*mut u8, usize)> {
    let (mut data, mut len) = (ptr::null_mut::<c_void>(), 0usize);
    call!(napi_get_arraybuffer_info(env, v, &mut data, &mut len))?;
    Ok((data as *mut u8, len))
}

pub fn is_detached(env: napi_env, ab: napi_value) -> Result<bool> {
    let mut b = false;
    call!(napi_is_detached_arraybuffer(env, ab, &mut b))?;
    Ok(b)
}

pub fn detach(env: napi_env, ab: napi_value) -> Result<()> {
    call!(napi_detach_arraybuffer(env, ab))
}

/// A new ArrayBuffer holding a copy of `bytes`.
pub fn arraybuffer_copy(env: napi_env, bytes: &[u8]) -> Result<napi_value> {
    let mut data = ptr::null_mut::<c_void>();
    let mut v = ptr::null_mut();
    call!(napi_create_arraybuffer(env, bytes.len(), &mut data, &mut v))?;
    if !bytes.is_empty() {
        // SAFETY: `napi_create_arraybuffer` succeeded, so `data` points to
        // the new buffer's bytes.len() writable bytes, which no JS code
        // has seen yet (nothing else reads or writes them), and they
        // cannot overlap `bytes`, a Rust borrow.
        unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), data as *mut u8, bytes.len()) };
    }
    Ok(v)
}

/// A new typed array of `kind` over `buffer` (whole buffer).
pub fn typed_array(
    env: napi_env,
    kind: sys::napi_typedarray_type,
    length: usize,
    buffer: napi_value,
) -> Result<napi_value> {
    let mut v = ptr::null_mut();
    call!(napi_create_typedarray(env, kind, length, buffer, 0, &mut v))?;
    Ok(v)
}

pub fn create_promise(env: napi_env) -> Result<(sys::napi_deferred, napi_value)> {
    let mut d = ptr::null_mut();
    let mut p = ptr::null_mut();
    call!(napi_create_promise(env, &mut d, &mut p))?;
    Ok((d, p))
}

pub fn resolve(env: napi_env, d: sys::napi_deferred, v: napi_value) -> Result<()> {
    call!(napi_resolve_deferred(env, d, v))
}

pub fn reject(env: napi_env, d: sys::napi_deferred, v: napi_value) -> Result<()> {
    call!(napi_reject_deferred(env, d, v))
}

/// A strong reference that keeps a JS value alive until deleted. It is
/// neither `Send` nor `Sync` (a raw pointer inside), so it stays on the JS
/// thread whose environment made it, the only one that may use it; every
/// one is kept in a thread-local table or a value of that thread.
///
/// Node does not free a reference made by `napi_create_reference` when
/// the environment ends: each must be deleted, which needs the env. One
/// dropped without [`StrongRef::delete`] (a value dropped in a finalizer,
/// or a table emptied at teardown) is queued on its thread and deleted by
/// the next [`sweep`], which the binding runs on entry to its common calls
/// and last in the environment's cleanup hook.
pub struct StrongRef {
    r: sys::napi_ref,
}

thread_local! {
    /// References of this JS thread dropped without an env at hand.
    static DROPPED: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl StrongRef {
    pub fn new(env: napi_env, v: napi_value) -> Result<StrongRef> {
        let mut r = ptr::null_mut();
        call!(napi_create_reference(env, v, 1, &mut r))?;
        Ok(StrongRef { r })
    }
    pub fn get(&self, env: napi_env) -> Result<napi_value> {
        let mut v = ptr::null_mut();
        call!(napi_get_reference_value(env, self.r, &mut v))?;
        Ok(v)
    }
    /// Deletes the reference (must run on the JS thread).
    pub fn delete(mut self, env: napi_env) {
        let r = std::mem::replace(&mut self.r, ptr::null_mut());
        // SAFETY: `r` was made by `napi_create_reference` on this thread
        // (the type is not Send), in the environment `env` belongs to (one
        // per JS thread), and is deleted once: it was taken out of `self`,
        // whose drop then sees null and queues nothing.
        unsafe { sys::napi_delete_reference(env, r) };
    }
}

impl Drop for StrongRef {
    fn drop(&mut self) {
        if self.r.is_null() {
            return;
        }
        let r = self.r as usize;
        // At thread exit the queue may be gone already; the environment
        // (and so every reference) is then being torn down without us.
        let _ = DROPPED.try_with(|d| d.borrow_mut().push(r));
    }
}

/// Deletes the references of this JS thread that were dropped since the
/// last sweep. `env` must be the environment of the current callback (or
/// cleanup hook) on this thread.
pub fn sweep(env: napi_env) {
    let dropped = DROPPED
        .try_with(|d| std::mem::take(&mut *d.borrow_mut()))
        .unwrap_or_default();
    for r in dropped {
        // SAFETY: each entry is a reference that `napi_create_reference`
        // made on this thread (StrongRef is not Send, and the queue is
        // thread-local) in the environment of this thread, `env`, that no
        // StrongRef holds any more (its drop queued it) and that is taken
        // out of the queue once, so it is deleted once.
        unsafe { sys::napi_delete_reference(env, r as sys::napi_ref) };
    }
}
