//! Typed-array views: matching them to data types, filling them, and the
//! detach/hand-back protocol of `compute()`.

use std::collections::HashSet;

use napi::sys::{self, napi_env, napi_typedarray_type as Kind, napi_value, TypedarrayType as T};

use super::raw::{self, StrongRef, ViewInfo};
use crate::error::{Error, Result};
use crate::tensor::Buf;
use crate::types::{DataType, OperandDescriptor};

/// Whether a typed array kind may carry `dt` (the spec's
/// MLOperandDataType / ArrayBufferView compatibility table; `Uint8Array`
/// fits every type, float16 also travels as `Uint16Array` bit patterns in
/// runtimes without `Float16Array`).
pub fn kind_fits(kind: Option<Kind>, dt: DataType) -> bool {
    let Some(kind) = kind else {
        return true; // DataView
    };
    if kind == T::uint8_array {
        return true;
    }
    match dt {
        DataType::Float32 => kind == T::float32_array,
        DataType::Float16 => kind == T::uint16_array || kind == FLOAT16_ARRAY,
        DataType::Int32 => kind == T::int32_array,
        DataType::Uint32 => kind == T::uint32_array,
        DataType::Int64 => kind == T::bigint64_array,
        DataType::Uint64 => kind == T::biguint64_array,
        DataType::Int8 => kind == T::int8_array,
        DataType::Uint8 | DataType::Int4 | DataType::Uint4 => false,
    }
}

/// N-API's value for `Float16Array` (newer than our headers).
const FLOAT16_ARRAY: i32 = 11;

/// Checks a view or buffer against a descriptor ("validate buffer with
/// descriptor"): exact byte length and a compatible view type.
pub fn check_fits(info: &ViewInfo, desc: &OperandDescriptor, what: &str) -> Result<()> {
    if info.byte_length != desc.byte_length() {
        return Err(Error::type_error(format!(
            "{what} has {} bytes but the {} tensor of shape {:?} has {}",
            info.byte_length,
            desc.data_type.name(),
            desc.shape,
            desc.byte_length()
        )));
    }
    if !kind_fits(info.kind, desc.data_type) {
        return Err(Error::type_error(format!(
            "{what} is not a typed array that can hold {} data",
            desc.data_type.name()
        )));
    }
    Ok(())
}

/// [`check_fits`] for the data of `writeTensor()` and the destination of
/// `readTensor(tensor, view)`, which also take an `Int8Array` as a view of
/// the tensor's raw bytes, whatever its data type (the byte length must still
/// match exactly). This is a compatibility extension beyond the spec's table:
/// onnxruntime-web's WebNN execution provider moves tensors across its
/// partition boundaries through `Int8Array` views of its WebAssembly heap,
/// because early implementations accepted any view type there.
pub fn check_tensor_io_fits(info: &ViewInfo, desc: &OperandDescriptor, what: &str) -> Result<()> {
    if info.kind == Some(T::int8_array) && info.byte_length == desc.byte_length() {
        return Ok(());
    }
    check_fits(info, desc, what)
}

/// Reads a view argument (typed array or DataView), or a TypeError.
pub fn view(env: napi_env, v: napi_value, what: &str) -> Result<ViewInfo> {
    match raw::view_info(env, v) {
        Ok(Some(i)) => Ok(i),
        _ => Err(Error::type_error(format!(
            "{what} must be a typed array or DataView"
        ))),
    }
}

/// Copies the tensor bytes into a view kept alive by `view`.
pub fn copy_into_view(
    env: napi_env,
    view: &StrongRef,
    buf: &Buf,
    dt: DataType,
    help: &crate::copy::CopyHelp,
) -> Result<()> {
    let v = view.get(env).map_err(super::errors::from_napi)?;
    let info = match raw::view_info(env, v) {
        Ok(Some(i)) => i,
        _ => {
            // An ArrayBuffer or SharedArrayBuffer was passed.
            let bytes = super::convert::buffer_source(env, v, "outputData")?;
            ViewInfo {
                kind: None,
                data: bytes.data as *mut u8,
                byte_length: bytes.len,
                byte_offset: 0,
                buffer: v,
                length: bytes.len,
            }
        }
    };
    // The buffer's own bytes where its layout is the external one (one
    // copy, into the view); 4-bit types are packed first.
    let bytes = buf.external_bytes(dt);
    if info.byte_length != bytes.len() || (info.data.is_null() && !bytes.is_empty()) {
        return Err(Error::type_error(
            "outputData was detached or resized while the read was pending",
        ));
    }
    if !bytes.is_empty() {
        // SAFETY: `info` was read just above, in this callback, from the
        // view the StrongRef kept alive, and no JS code has run since, so
        // it still describes the view's memory now: `info.data` is not
        // null and has byte_length == bytes.len() writable bytes (checked
        // above; a detached or shrunk buffer fails that check). `bytes` is
        // Rust memory (the buffer or a copy of it), so the two do not
        // overlap. (On a SharedArrayBuffer another thread may access the
        // same bytes meanwhile; JS allows such unsynchronised access to
        // tear, and Rust holds no reference into that memory.) The copy
        // returns only when it is whole, before any JS runs.
        unsafe { crate::copy::copy_nonoverlapping(bytes.as_ptr(), info.data, bytes.len(), help) };
    }
    Ok(())
}

/// The finalizer of an ArrayBuffer made by [`arraybuffer_from_buf`].
///
/// # Safety
/// `hint` must be the `Box<Buf>` pointer that function gave N-API, which
/// calls this once, when JS can no longer reach the buffer's memory.
unsafe extern "C" fn free_buf(
    _env: sys::napi_env,
    _data: *mut std::ffi::c_void,
    hint: *mut std::ffi::c_void,
) {
    // The memory goes back to the pool for the next read of this size.
    // SAFETY: the contract: `hint` came from `Box::into_raw` and N-API
    // passes it to this finalizer once, so the box is owned here.
    unsafe { Box::from_raw(hint as *mut Buf) }.recycle();
}

/// Results up to this many bytes are copied into a new ArrayBuffer rather
/// than handed over (see [`arraybuffer_from_buf`]).
const COPY_BELOW: usize = 16 * 1024;

/// Whether `readTensor()` of `byte_length` bytes for a new ArrayBuffer
/// borrows the tensor's own buffer ([`arraybuffer_from_shared`]) rather
/// than taking a copy made on the worker. A small result is copied once,
/// straight into the memory V8 allocates; a copy on the worker first
/// would cost an allocation there and its free on this thread, and the
/// two threads then contend for the allocator's lock (a quarter of a
/// 1,000-element read's round trip). A large one is copied with the
/// context's threads' help. In between, the worker's copy is handed to
/// JS as it is, with no second copy.
pub fn read_shares(byte_length: usize) -> bool {
    byte_length <= COPY_BELOW || byte_length >= crate::copy::HELP_BYTES
}

/// An ArrayBuffer of exactly the bytes of `buf`, a result for
/// `readTensor()` that the tensor may still hold ([`read_shares`]). A
/// buffer held here alone goes to [`arraybuffer_from_buf`]; a tensor's
/// own is copied, with `help` where it is large, and goes back to the
/// pool if the tensor has moved on from it meanwhile.
pub fn arraybuffer_from_shared(
    env: napi_env,
    buf: std::sync::Arc<Buf>,
    dt: DataType,
    help: &crate::copy::CopyHelp,
) -> Result<napi_value> {
    let n = super::errors::from_napi;
    let copy_here =
        !matches!(dt, DataType::Int4 | DataType::Uint4) && buf.raw_bytes().len() <= COPY_BELOW;
    let v = match std::sync::Arc::try_unwrap(buf) {
        Ok(b) => return arraybuffer_from_buf(env, b, dt).map_err(n),
        Err(shared) if copy_here => {
            let v = raw::arraybuffer_copy(env, shared.raw_bytes()).map_err(n);
            Buf::recycle_shared(shared);
            v?
        }
        Err(shared) => {
            let copy = shared.helped_clone(help);
            Buf::recycle_shared(shared);
            arraybuffer_from_buf(env, copy?, dt).map_err(n)?
        }
    };
    Ok(v)
}

/// An ArrayBuffer of exactly the tensor's bytes. The buffer's own memory is
/// handed to JS without a copy where its layout is the external one.
pub fn arraybuffer_from_buf(env: napi_env, buf: Buf, dt: DataType) -> napi::Result<napi_value> {
    if matches!(dt, DataType::Int4 | DataType::Uint4) || buf.is_empty() {
        return raw::arraybuffer_copy(env, &buf.to_bytes(dt));
    }
    if buf.raw_bytes().len() <= COPY_BELOW {
        // Small: a copy into memory V8 allocates costs less than an
        // external buffer (its backing store, its finalizer's run after
        // collection, and the external memory accounting).
        let v = raw::arraybuffer_copy(env, buf.raw_bytes());
        buf.recycle();
        return v;
    }
    let bytes = buf.raw_bytes();
    let (ptr, len) = (bytes.as_ptr() as *mut std::ffi::c_void, bytes.len());
    let hint = Box::into_raw(Box::new(buf)) as *mut std::ffi::c_void;
    let mut v = std::ptr::null_mut();
    // SAFETY: the current callback's env, and `v` a live local. `ptr` and
    // `len` are the buffer's own elements as bytes: moving the `Buf` into
    // the box left its heap storage where it was, and the box (owned by
    // N-API from here) keeps it alive and unchanged until `free_buf` runs,
    // after JS has dropped the ArrayBuffer; nothing in Rust keeps a
    // reference to it. The buffer is not empty (handled above), as the
    // pointer of an empty vector is dangling.
    let status = unsafe {
        sys::napi_create_external_arraybuffer(env, ptr, len, Some(free_buf), hint, &mut v)
    };
    if status == sys::Status::napi_ok {
        return Ok(v);
    }
    if status != sys::Status::napi_no_external_buffers_allowed {
        // Any other failure may come after N-API took the finalizer: Node
        // runs it at once for a length above its largest Buffer (4 GiB on
        // Node 20), so the box may be freed already. Leave it to N-API (at
        // worst it leaks, where a runtime failed before taking it). Node
        // also throws its RangeError, which must be cleared for the read
        // to be rejected instead.
        let _ = super::errors::take_exception(env);
        return Err(napi::Error::new(
            napi::Status::from(status),
            format!("cannot hand over a result of {len} bytes"),
        ));
    }
    // Runtimes that forbid external buffers: copy instead.
    // SAFETY: `napi_no_external_buffers_allowed` is returned before N-API
    // takes the finalizer (that is its meaning), so `free_buf` will never
    // run for `hint`: the box is still ours alone, taken back once.
    let buf = unsafe { Box::from_raw(hint as *mut Buf) };
    raw::arraybuffer_copy(env, &buf.to_bytes(dt))
}

/// How to rebuild a caller's view over a new buffer.
pub struct OutView {
    pub kind: Option<Kind>,
    pub length: usize,
}

/// One checked `compute()` argument.
pub struct ComputeArg {
    pub name: String,
    pub info: ViewInfo,
}

/// Checks that the views of `compute()` can be transferred: not shared,
/// spanning their whole (not detached) ArrayBuffer, and no buffer used twice.
pub fn check_transferable(env: napi_env, args: &[&ComputeArg]) -> Result<()> {
    let mut seen = HashSet::new();
    for a in args {
        let shared = raw::is_shared_arraybuffer(env, a.info.buffer).unwrap_or(true);
        if shared {
            return Err(Error::type_error(format!(
                "compute: {:?} is a view of a SharedArrayBuffer, which cannot be transferred",
                a.name
            )));
        }
        if raw::is_detached(env, a.info.buffer).unwrap_or(true) {
            return Err(Error::type_error(format!(
                "compute: the buffer of {:?} is detached",
                a.name
            )));
        }
        let (data, len) =
            raw::arraybuffer_info(env, a.info.buffer).map_err(super::errors::from_napi)?;
        if a.info.byte_offset != 0 || len != a.info.byte_length {
            return Err(Error::type_error(format!(
                "compute: {:?} does not span its whole ArrayBuffer (a pooled Buffer?); transferring it would empty its neighbours",
                a.name
            )));
        }
        // Distinct ArrayBuffers have distinct data (an empty one has none to
        // share, so only non-empty buffers are compared).
        if len > 0 && !seen.insert(data as usize) {
            return Err(Error::type_error(format!(
                "compute: {:?} shares its ArrayBuffer with another argument",
                a.name
            )));
        }
    }
    Ok(())
}

/// A view like the caller's `v` over a new ArrayBuffer holding `buf`
/// (its own memory where [`arraybuffer_from_buf`] can hand it over).
fn view_of(env: napi_env, v: &OutView, buf: Buf, dt: DataType) -> napi::Result<napi_value> {
    let ab = arraybuffer_from_buf(env, buf, dt)?;
    match v.kind {
        Some(kind) => raw::typed_array(env, kind, v.length, ab),
        None => raw::construct_global(env, "DataView", &[ab]),
    }
}

/// Builds `{inputs, outputs}` of new views for a finished `compute()`:
/// the inputs over the very buffers the worker read (copied from the
/// caller's views before they were detached), the outputs over the
/// results, neither copied again.
pub fn compute_result(
    env: napi_env,
    in_views: Vec<(String, OutView, DataType)>,
    inputs: Vec<Buf>,
    out_views: Vec<(String, OutView, DataType)>,
    outputs: Vec<Buf>,
) -> napi::Result<napi_value> {
    let record = |views: Vec<(String, OutView, DataType)>, bufs: Vec<Buf>| {
        let o = raw::object(env)?;
        for ((name, v, dt), buf) in views.into_iter().zip(bufs) {
            raw::set(env, o, &name, view_of(env, &v, buf, dt)?)?;
        }
        Ok::<_, napi::Error>(o)
    };
    let ins = record(in_views, inputs)?;
    let outs = record(out_views, outputs)?;
    let r = raw::object(env)?;
    raw::set(env, r, "inputs", ins)?;
    raw::set(env, r, "outputs", outs)?;
    Ok(r)
}
