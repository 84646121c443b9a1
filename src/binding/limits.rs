//! `opSupportLimits()`, generated from the operator registry that
//! validation uses, so it reports exactly what builds.

use napi::sys::{napi_env, napi_value};

use super::raw;
use crate::graph::ops::{all, OperandLimit, ALL_TYPES, MAX_RANK};
use crate::types::DataType;

fn types_array(env: napi_env, types: &[DataType]) -> napi::Result<napi_value> {
    let items = types
        .iter()
        .map(|t| raw::string(env, t.name()))
        .collect::<napi::Result<Vec<_>>>()?;
    raw::array(env, &items)
}

fn limit(env: napi_env, types: &[DataType], min: usize, max: usize) -> napi::Result<napi_value> {
    let o = raw::object(env)?;
    raw::set(env, o, "dataTypes", types_array(env, types)?)?;
    let r = raw::object(env)?;
    raw::set(env, r, "min", raw::number(env, min as f64)?)?;
    raw::set(env, r, "max", raw::number(env, max as f64)?)?;
    raw::set(env, o, "rankRange", r)?;
    Ok(o)
}

/// Builds the `MLOpSupportLimits` dictionary for a context of `device`.
pub fn op_support_limits(
    env: napi_env,
    device: &str,
    max_bytes: usize,
) -> napi::Result<napi_value> {
    let supported = |op: &str, l: &OperandLimit| -> Vec<DataType> {
        l.types
            .iter()
            .copied()
            .filter(|&t| crate::backend::supports(device, op, l.name, t))
            .collect()
    };
    let o = raw::object(env)?;
    raw::set(env, o, "preferredInputLayout", raw::string(env, "nchw")?)?;
    raw::set(
        env,
        o,
        "maxTensorByteLength",
        raw::number(env, max_bytes as f64)?,
    )?;
    let io_types: Vec<DataType> = ALL_TYPES
        .iter()
        .copied()
        .filter(|&t| crate::backend::supports(device, "", "", t))
        .collect();
    for key in ["input", "constant", "output"] {
        raw::set(env, o, key, limit(env, &io_types, 0, MAX_RANK)?)?;
    }
    for def in all() {
        let d = raw::object(env)?;
        for l in def.operands {
            raw::set(
                env,
                d,
                l.name,
                limit(env, &supported(def.name, l), l.min_rank, l.max_rank)?,
            )?;
        }
        raw::set(env, o, def.name, d)?;
    }
    Ok(o)
}
