//! Plain Rust values of operator arguments, and WebIDL-style readers.
//!
//! The binding layer turns each JS argument into a [`Val`] tree once; every
//! operator then reads its arguments and options from that tree here, in pure
//! Rust. This keeps napi at the edge and lets `cargo test` exercise argument
//! handling. Integer arguments are stricter than WebIDL's ToNumber: strings,
//! BigInts, fractions and non-finite numbers are refused with a TypeError
//! rather than silently converted, so a mistake in the caller surfaces at
//! once.

use crate::error::{op_error, Error, Result};
use crate::graph::OperandId;
use crate::types::{DataType, OperandDescriptor};

/// A JS value, as far as WebNN arguments need it.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    Undefined,
    Null,
    Bool(bool),
    Number(f64),
    BigInt(i128),
    String(String),
    List(Vec<Val>),
    /// A plain object: its enumerable string-keyed properties.
    Dict(Vec<(String, Val)>),
    /// An `MLOperand`: the id of its builder and its id in that builder.
    Operand {
        builder: u64,
        id: OperandId,
    },
    /// Anything else (functions, symbols, typed arrays, other classes),
    /// named by its JS type for messages.
    Other(&'static str),
}

impl Val {
    pub fn is_undefined(&self) -> bool {
        matches!(self, Val::Undefined)
    }

    pub fn type_name(&self) -> &'static str {
        match self {
            Val::Undefined => "undefined",
            Val::Null => "null",
            Val::Bool(_) => "a boolean",
            Val::Number(_) => "a number",
            Val::BigInt(_) => "a bigint",
            Val::String(_) => "a string",
            Val::List(_) => "an array",
            Val::Dict(_) => "an object",
            Val::Operand { .. } => "an MLOperand",
            Val::Other(t) => t,
        }
    }

    /// Looks up a dictionary member; `undefined` when absent or when this is
    /// `undefined`/`null` (an omitted options dictionary).
    pub fn member(&self, key: &str) -> &Val {
        static UNDEF: Val = Val::Undefined;
        match self {
            Val::Dict(m) => m
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v)
                .unwrap_or(&UNDEF),
            _ => &UNDEF,
        }
    }
}

/// Context for reading one operator's arguments: names the operator and its
/// label in every error.
pub struct Ctx<'a> {
    pub op: &'a str,
    pub label: String,
}

impl<'a> Ctx<'a> {
    pub fn new(op: &'a str) -> Self {
        Ctx {
            op,
            label: String::new(),
        }
    }

    pub fn err(&self, message: impl std::fmt::Display) -> Error {
        op_error(self.op, &self.label, message)
    }

    /// Checks that an options argument is a dictionary (or omitted) and
    /// records its `label`.
    pub fn options<'v>(&mut self, v: &'v Val) -> Result<&'v Val> {
        match v {
            Val::Undefined | Val::Null | Val::Dict(_) => {}
            other => {
                return Err(self.err(format!(
                    "options must be a dictionary, not {}",
                    other.type_name()
                )))
            }
        }
        if let Some(l) = self.opt_string(v.member("label"), "label")? {
            self.label = l;
        }
        Ok(v)
    }

    pub fn bool_or(&self, v: &Val, what: &str, default: bool) -> Result<bool> {
        match v {
            Val::Undefined => Ok(default),
            Val::Bool(b) => Ok(*b),
            other => Err(self.err(format!(
                "{what} must be a boolean, not {}",
                other.type_name()
            ))),
        }
    }

    /// An `unrestricted double` / `float` (NaN and infinities allowed).
    pub fn number(&self, v: &Val, what: &str) -> Result<f64> {
        match v {
            Val::Number(n) => Ok(*n),
            Val::Undefined => Err(self.err(format!("{what} is required"))),
            other => Err(self.err(format!(
                "{what} must be a number, not {}",
                other.type_name()
            ))),
        }
    }

    pub fn number_or(&self, v: &Val, what: &str, default: f64) -> Result<f64> {
        if v.is_undefined() {
            Ok(default)
        } else {
            self.number(v, what)
        }
    }

    /// A `double` (finite).
    pub fn finite_or(&self, v: &Val, what: &str, default: f64) -> Result<f64> {
        let x = self.number_or(v, what, default)?;
        if x.is_finite() {
            Ok(x)
        } else {
            Err(self.err(format!("{what} must be a finite number")))
        }
    }

    /// An `MLNumber` (`bigint or unrestricted double`), as f64 or i128.
    pub fn ml_number(&self, v: &Val, what: &str) -> Result<MlNumber> {
        match v {
            Val::Number(n) => Ok(MlNumber::Double(*n)),
            Val::BigInt(b) => Ok(MlNumber::BigInt(*b)),
            Val::Undefined => Err(self.err(format!("{what} is required"))),
            other => Err(self.err(format!(
                "{what} must be a number or a bigint, not {}",
                other.type_name()
            ))),
        }
    }

    /// A non-negative integer that fits in `u32` (`[EnforceRange] unsigned
    /// long`).
    pub fn u32(&self, v: &Val, what: &str) -> Result<u32> {
        let x = self.integer(v, what)?;
        if (0.0..=u32::MAX as f64).contains(&x) {
            Ok(x as u32)
        } else {
            Err(self.err(format!("{what} must be an integer in [0, 2^32), not {x}")))
        }
    }

    pub fn u32_or(&self, v: &Val, what: &str, default: u32) -> Result<u32> {
        if v.is_undefined() {
            Ok(default)
        } else {
            self.u32(v, what)
        }
    }

    /// A `long` (i32).
    pub fn i32(&self, v: &Val, what: &str) -> Result<i32> {
        let x = self.integer(v, what)?;
        if (i32::MIN as f64..=i32::MAX as f64).contains(&x) {
            Ok(x as i32)
        } else {
            Err(self.err(format!("{what} must be a 32-bit integer, not {x}")))
        }
    }

    fn integer(&self, v: &Val, what: &str) -> Result<f64> {
        match v {
            Val::Number(n) if n.is_finite() && n.fract() == 0.0 => Ok(*n),
            Val::Number(n) => Err(self.err(format!("{what} must be an integer, not {n}"))),
            Val::Undefined => Err(self.err(format!("{what} is required"))),
            other => Err(self.err(format!(
                "{what} must be an integer, not {}",
                other.type_name()
            ))),
        }
    }

    pub fn list<'v>(&self, v: &'v Val, what: &str) -> Result<&'v [Val]> {
        match v {
            Val::List(items) => Ok(items),
            Val::Undefined => Err(self.err(format!("{what} is required"))),
            other => Err(self.err(format!(
                "{what} must be an array, not {}",
                other.type_name()
            ))),
        }
    }

    pub fn u32_list(&self, v: &Val, what: &str) -> Result<Vec<u32>> {
        self.list(v, what)?
            .iter()
            .enumerate()
            .map(|(i, x)| self.u32(x, &format!("{what}[{i}]")))
            .collect()
    }

    pub fn opt_u32_list(&self, v: &Val, what: &str) -> Result<Option<Vec<u32>>> {
        if v.is_undefined() {
            Ok(None)
        } else {
            self.u32_list(v, what).map(Some)
        }
    }

    pub fn string<'v>(&self, v: &'v Val, what: &str) -> Result<&'v str> {
        match v {
            Val::String(s) => Ok(s),
            Val::Undefined => Err(self.err(format!("{what} is required"))),
            other => Err(self.err(format!(
                "{what} must be a string, not {}",
                other.type_name()
            ))),
        }
    }

    pub fn opt_string(&self, v: &Val, what: &str) -> Result<Option<String>> {
        if v.is_undefined() {
            Ok(None)
        } else {
            self.string(v, what).map(|s| Some(s.to_string()))
        }
    }

    /// A WebIDL enum value: one of `allowed`, else a TypeError.
    pub fn enum_or<'v>(
        &self,
        v: &'v Val,
        what: &str,
        allowed: &[&'static str],
        default: &'static str,
    ) -> Result<&'v str>
    where
        'static: 'v,
    {
        if v.is_undefined() {
            return Ok(default);
        }
        let s = self.string(v, what)?;
        if allowed.contains(&s) {
            Ok(s)
        } else {
            Err(self.err(format!("{what} must be one of {allowed:?}, not {s:?}")))
        }
    }

    pub fn data_type(&self, v: &Val, what: &str) -> Result<DataType> {
        let s = self.string(v, what)?;
        DataType::parse(s)
            .ok_or_else(|| self.err(format!("{what}: {s:?} is not an MLOperandDataType")))
    }
}

/// An `MLNumber`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MlNumber {
    Double(f64),
    BigInt(i128),
}

impl MlNumber {
    pub fn as_f64(self) -> f64 {
        match self {
            MlNumber::Double(d) => d,
            MlNumber::BigInt(b) => b as f64,
        }
    }
}

/// Reads an `MLOperandDescriptor` dictionary (`dataType`, `shape`; the
/// deprecated `dimensions` is accepted when `shape` is absent, as older
/// callers still pass it).
pub fn descriptor(ctx: &Ctx, v: &Val) -> Result<OperandDescriptor> {
    if !matches!(v, Val::Dict(_)) {
        return Err(ctx.err(format!(
            "the descriptor must be a dictionary, not {}",
            v.type_name()
        )));
    }
    let dt = ctx.data_type(v.member("dataType"), "descriptor.dataType")?;
    let shape_val = match v.member("shape") {
        Val::Undefined => v.member("dimensions"),
        s => s,
    };
    let shape: Vec<usize> = ctx
        .u32_list(shape_val, "descriptor.shape")?
        .into_iter()
        .map(|d| d as usize)
        .collect();
    if shape.len() > crate::types::MAX_RANK {
        return Err(ctx.err(format!(
            "the shape {shape:?} has more than {} dimensions",
            crate::types::MAX_RANK
        )));
    }
    OperandDescriptor::new(dt, shape).map_err(|e| ctx.err(e.message))
}

/// The external bytes of a scalar `value` of type `dt` (`constant(type,
/// value)`): floats round to nearest, integers truncate toward zero and
/// wrap like a typed-array store.
pub fn scalar_bytes(dt: DataType, value: MlNumber) -> Vec<u8> {
    let as_i128 = match value {
        MlNumber::BigInt(b) => b,
        MlNumber::Double(d) if d.is_finite() => d.trunc() as i128,
        MlNumber::Double(_) => 0,
    };
    match dt {
        DataType::Float32 => (value.as_f64() as f32).to_le_bytes().to_vec(),
        DataType::Float16 => crate::f16::f32_to_f16(value.as_f64() as f32)
            .to_le_bytes()
            .to_vec(),
        DataType::Int32 => (as_i128 as i32).to_le_bytes().to_vec(),
        DataType::Uint32 => (as_i128 as u32).to_le_bytes().to_vec(),
        DataType::Int64 => (as_i128 as i64).to_le_bytes().to_vec(),
        DataType::Uint64 => (as_i128 as u64).to_le_bytes().to_vec(),
        DataType::Int8 => vec![as_i128 as i8 as u8],
        DataType::Uint8 => vec![as_i128 as u8],
        DataType::Int4 | DataType::Uint4 => vec![(as_i128 as u8) & 0xf],
    }
}
