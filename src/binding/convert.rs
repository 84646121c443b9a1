//! JS values to plain Rust values: operator arguments ([`Val`]), buffer
//! sources, and dictionaries.

use napi::bindgen_prelude::{ClassInstance, FromNapiValue};
use napi::sys::{napi_env, napi_value};
use napi::ValueType;

use super::builder::MLOperand;
use super::raw;
use crate::error::{Error, Result};
use crate::graph::args::Val;

/// How deep argument objects are followed: WebNN options nest at most an
/// array inside a dictionary, so anything deeper is not an argument.
const MAX_DEPTH: usize = 4;

fn napi_err(e: napi::Error) -> Error {
    Error::type_error(format!("cannot read the argument: {}", e.reason))
}

/// Converts a JS value into a [`Val`] tree.
pub fn to_val(env: napi_env, v: napi_value) -> Result<Val> {
    to_val_depth(env, v, 0).map_err(napi_err)
}

fn to_val_depth(env: napi_env, v: napi_value, depth: usize) -> napi::Result<Val> {
    Ok(match raw::type_of(env, v)? {
        ValueType::Undefined => Val::Undefined,
        ValueType::Null => Val::Null,
        ValueType::Boolean => Val::Bool(raw::get_bool(env, v)?),
        ValueType::Number => Val::Number(raw::get_number(env, v)?),
        ValueType::String => Val::String(raw::get_string(env, v)?),
        ValueType::BigInt => Val::BigInt(raw::get_bigint(env, v)?),
        ValueType::Object => {
            if let Ok(op) = unsafe { ClassInstance::<MLOperand>::from_napi_value(env, v) } {
                return Ok(Val::Operand {
                    builder: op.builder,
                    id: op.id,
                });
            }
            if raw::view_info(env, v)?.is_some() || raw::is_arraybuffer(env, v)? {
                return Ok(Val::Other("a buffer"));
            }
            if depth >= MAX_DEPTH {
                return Ok(Val::Other("a deeply nested object"));
            }
            if raw::is_array(env, v)? {
                let n = raw::array_length(env, v)?;
                let mut items = Vec::with_capacity(n as usize);
                for i in 0..n {
                    items.push(to_val_depth(env, raw::element(env, v, i)?, depth + 1)?);
                }
                Val::List(items)
            } else {
                let mut members = Vec::new();
                for k in raw::keys(env, v, false)? {
                    let item = raw::get(env, v, &k)?;
                    members.push((k, to_val_depth(env, item, depth + 1)?));
                }
                Val::Dict(members)
            }
        }
        ValueType::Function => Val::Other("a function"),
        ValueType::Symbol => Val::Other("a symbol"),
        _ => Val::Other("an unsupported value"),
    })
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
    /// Only valid while the JS value is alive and not detached or resized,
    /// i.e. within the current native call.
    pub unsafe fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            &[]
        } else {
            std::slice::from_raw_parts(self.data, self.len)
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
