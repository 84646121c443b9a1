//! JS values to plain Rust values: operator arguments ([`Val`]), buffer
//! sources, and dictionaries.

use napi::bindgen_prelude::{ClassInstance, FromNapiValue};
use napi::sys::{napi_env, napi_value};
use napi::ValueType;

use super::operand::MLOperand;
use super::raw;
use crate::error::{Error, Result};
use crate::graph::args::Val;

/// How deep argument objects are followed: WebNN options nest at most an
/// array inside a dictionary, so anything deeper is not an argument.
const MAX_DEPTH: usize = 4;

fn napi_err(e: napi::Error) -> Error {
    Error::type_error(format!("cannot read the argument: {}", e.reason))
}

/// The longest list of numbers or strings that [`to_val`] reads: every
/// such list in a descriptor or an options dictionary is indexed by
/// dimension (a shape, axes, padding, strides), so none can be longer than
/// the largest rank.
pub const MAX_LIST: usize = crate::graph::ops::MAX_RANK;

/// Converts a JS value into a [`Val`] tree; lists of numbers or strings
/// longer than [`MAX_LIST`] are refused.
pub fn to_val(env: napi_env, v: napi_value) -> Result<Val> {
    to_val_within(env, v, MAX_LIST)
}

/// Converts a JS value into a [`Val`] tree, refusing at once what no WebNN
/// argument can be, before anything is read or allocated per element: a
/// list of numbers or strings longer than `max_list`, a list with a hole
/// or an `undefined` element (no WebNN sequence holds one). So a sparse
/// `new Array(2 ** 32 - 1)` fails in constant time and memory, and a long
/// dense list of numbers after its first element. Lists of operands
/// (`concat`) are not bounded by `max_list`: their length is the caller's
/// data, converted one element at a time, and a hole ends them.
pub fn to_val_within(env: napi_env, v: napi_value, max_list: usize) -> Result<Val> {
    match to_val_depth(env, v, 0, max_list) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e),
        Err(e) => Err(napi_err(e)),
    }
}

fn to_val_depth(
    env: napi_env,
    v: napi_value,
    depth: usize,
    max_list: usize,
) -> napi::Result<Result<Val>> {
    Ok(Ok(match raw::type_of(env, v)? {
        ValueType::Undefined => Val::Undefined,
        ValueType::Null => Val::Null,
        ValueType::Boolean => Val::Bool(raw::get_bool(env, v)?),
        ValueType::Number => Val::Number(raw::get_number(env, v)?),
        ValueType::String => Val::String(raw::get_string(env, v)?),
        ValueType::BigInt => Val::BigInt(raw::get_bigint(env, v)?),
        ValueType::Object => {
            // SAFETY: the current callback's env and a handle of it
            // (raw.rs's rules); `from_napi_value` unwraps only an object
            // napi-rs wrapped as an MLOperand (type tag and class checked),
            // else an error; the handle keeps it alive while `op` is read
            // here, and MLOperand has no `&mut self` method to alias.
            if let Ok(op) = unsafe { ClassInstance::<MLOperand>::from_napi_value(env, v) } {
                return Ok(Ok(Val::Operand {
                    builder: op.builder,
                    id: op.id,
                }));
            }
            if raw::view_info(env, v)?.is_some() || raw::is_arraybuffer(env, v)? {
                return Ok(Ok(Val::Other("a buffer")));
            }
            if depth >= MAX_DEPTH {
                return Ok(Ok(Val::Other("a deeply nested object")));
            }
            if raw::is_array(env, v)? {
                let n = raw::array_length(env, v)? as usize;
                let mut items: Vec<Val> = Vec::with_capacity(n.min(max_list));
                for i in 0..n {
                    let item = match to_val_depth(
                        env,
                        raw::element(env, v, i as u32)?,
                        depth + 1,
                        max_list,
                    )? {
                        Ok(item) => item,
                        Err(e) => return Ok(Err(e)),
                    };
                    let refused = match &item {
                        Val::Undefined => Some(format!(
                            "element {i} of a list of {n} is undefined (a hole?)"
                        )),
                        Val::Operand { .. } => None,
                        _ if n > max_list => Some(format!(
                            "a list of {n} values is longer than any such argument can be ({max_list})"
                        )),
                        _ => None,
                    };
                    if let Some(m) = refused {
                        return Ok(Err(Error::type_error(m)));
                    }
                    items.push(item);
                }
                Val::List(items)
            } else {
                let mut members = Vec::new();
                for k in raw::keys(env, v, false)? {
                    let item = raw::get(env, v, &k)?;
                    match to_val_depth(env, item, depth + 1, max_list)? {
                        Ok(item) => members.push((k, item)),
                        Err(e) => return Ok(Err(e)),
                    }
                }
                Val::Dict(members)
            }
        }
        ValueType::Function => Val::Other("a function"),
        ValueType::Symbol => Val::Other("a symbol"),
        _ => Val::Other("an unsupported value"),
    }))
}

/// Bytes of a buffer source (`AllowSharedBufferSource`): any typed array,
/// DataView, ArrayBuffer or SharedArrayBuffer. The slice borrows JS memory:
/// copy it before returning to JS.
pub struct BufferSource {
    pub data: *const u8,
    pub len: usize,
}

impl BufferSource {
    /// # Safety
    /// The source must have been read by [`buffer_source`] in the current
    /// callback with no JS code run since (a getter or Proxy trap could
    /// detach, transfer or resize the buffer), and the slice must be
    /// dropped before any JS code runs (copy it at once).
    pub unsafe fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            &[]
        } else {
            // SAFETY: the contract: `data` points to the source's `len`
            // bytes, kept alive by its handle in this callback and not
            // changed by JS while the slice lives. A SharedArrayBuffer's
            // bytes may still be written by another thread meanwhile,
            // which JS allows to tear; callers only copy them.
            unsafe { std::slice::from_raw_parts(self.data, self.len) }
        }
    }
}

/// Reads a buffer source, or a TypeError naming `what`.
pub fn buffer_source(env: napi_env, v: napi_value, what: &str) -> Result<BufferSource> {
    let inner = || -> napi::Result<Option<BufferSource>> {
        if raw::type_of(env, v)? != ValueType::Object {
            return Ok(None);
        }
        if let Some(info) = raw::view_info(env, v)? {
            return Ok(Some(BufferSource {
                data: info.data,
                len: info.byte_length,
            }));
        }
        if raw::is_arraybuffer(env, v)? {
            let (data, len) = raw::arraybuffer_info(env, v)?;
            return Ok(Some(BufferSource { data, len }));
        }
        // N-API has no accessor for SharedArrayBuffer data; a byte view
        // over it gives the same memory.
        Ok(raw::shared_arraybuffer_bytes(env, v)?.map(|(data, len)| BufferSource { data, len }))
    };
    match inner() {
        Ok(Some(b)) => Ok(b),
        Ok(None) => Err(Error::type_error(format!(
            "{what} must be an ArrayBuffer, a SharedArrayBuffer or a view of one"
        ))),
        Err(e) => Err(napi_err(e)),
    }
}
