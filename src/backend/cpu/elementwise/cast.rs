//! `cast` between every pair of data types.

use super::*;

/// A source value of a cast: floats are exact in f32 (float16 widens
/// exactly), integers exact in i128.
#[derive(Clone, Copy)]
enum Num {
    F(f32),
    I(i128),
}

/// Converts to an integer type of `bits` bits (`signed` or not), whose
/// range is `[lo, hi]`.
///
/// Integers keep their lowest `bits` bits, read as two's complement for
/// signed targets: the WebNN cast table specifies this for out-of-range
/// integer values. Floats truncate toward zero; out of range the spec
/// leaves the result implementation-defined, and here it saturates at the
/// bounds with NaN becoming 0 (total and deterministic).
fn num_to_int(n: Num, lo: i128, hi: i128, bits: u32, signed: bool) -> i128 {
    match n {
        // `as i128` truncates, saturates and maps NaN to 0.
        Num::F(f) => (f as i128).clamp(lo, hi),
        Num::I(i) => {
            let shift = 128 - bits;
            if signed {
                (i << shift) >> shift
            } else {
                (((i << shift) as u128) >> shift) as i128
            }
        }
    }
}

fn num_to_f32(n: Num) -> f32 {
    match n {
        Num::F(f) => f,
        // Rounds to nearest, ties to even.
        Num::I(i) => i as f32,
    }
}

/// Converts every element to `to`. One generic loop per (source, target)
/// pair; `num` reads a source element.
fn cast_from<S: Copy + Sync, F: Fn(S) -> Num + Sync>(
    src: &[S],
    num: F,
    to: DataType,
) -> Result<Buf> {
    let n = src.len();
    macro_rules! int {
        ($variant:ident, $t:ty, $lo:expr, $hi:expr, $bits:expr, $signed:expr) => {
            Buf::$variant(par_map(n, |i| {
                num_to_int(num(src[i]), $lo as i128, $hi as i128, $bits, $signed) as $t
            })?)
        };
    }
    Ok(match to {
        DataType::Float32 => Buf::F32(par_map(n, |i| num_to_f32(num(src[i])))?),
        // Integers reach float16 through f32 without double rounding: those
        // not exact in f32 (beyond 2^24) overflow float16 either way.
        DataType::Float16 => Buf::F16(par_map(n, |i| f32_to_f16(num_to_f32(num(src[i]))))?),
        DataType::Int32 => int!(I32, i32, i32::MIN, i32::MAX, 32, true),
        DataType::Uint32 => int!(U32, u32, 0, u32::MAX, 32, false),
        DataType::Int64 => int!(I64, i64, i64::MIN, i64::MAX, 64, true),
        DataType::Uint64 => int!(U64, u64, 0, u64::MAX, 64, false),
        DataType::Int8 => int!(I8, i8, i8::MIN, i8::MAX, 8, true),
        DataType::Uint8 => int!(U8, u8, 0, u8::MAX, 8, false),
        DataType::Int4 => int!(I8, i8, -8, 7, 4, true),
        DataType::Uint4 => int!(U8, u8, 0, 15, 4, false),
    })
}

/// `cast` between any two data types, following the cast table of the
/// WebNN spec: to float, the nearest representable value (ties to even),
/// +/-Infinity out of range; integer to integer, the same value, or out of
/// range the lowest N bits as two's complement; float to integer, truncated
/// toward zero, and out of range (implementation-defined) saturated, with
/// NaN giving 0. int4/uint4 follow the integer rules with N = 4.
pub fn cast(x: &Buf, to: DataType, out: &OperandDescriptor) -> Result<Buf> {
    if x.len() != out.element_count() {
        return Err(Error::operation(
            "cast: the output size differs from the input",
        ));
    }
    // Between float32 and float16 (a model's roundings to float16): the
    // vector conversions, 8 values per instruction where the CPU has F16C;
    // the same values as the per-element rules below.
    const PER_TASK: usize = 1 << 16;
    match (x, to) {
        (Buf::F32(v), DataType::Float16) => {
            // Recycled memory where the pool has some: a model's roundings
            // to float16 cast whole attention matrices at every run.
            let mut out = Buf::try_f16_for_overwrite(v.len())?;
            out.par_chunks_mut(PER_TASK)
                .zip(v.par_chunks(PER_TASK))
                .for_each(|(o, x)| crate::f16::narrow(x, o));
            return Ok(Buf::F16(out));
        }
        (Buf::F16(v), DataType::Float32) => {
            let mut out = Buf::try_f32_for_overwrite(v.len())?;
            out.par_chunks_mut(PER_TASK)
                .zip(v.par_chunks(PER_TASK))
                .for_each(|(o, h)| crate::f16::widen(h, o));
            return Ok(Buf::F32(out));
        }
        _ => {}
    }
    match x {
        Buf::F32(v) => cast_from(v, Num::F, to),
        Buf::F16(v) => cast_from(v, |h| Num::F(f16_to_f32(h)), to),
        Buf::I32(v) => cast_from(v, |i| Num::I(i as i128), to),
        Buf::U32(v) => cast_from(v, |i| Num::I(i as i128), to),
        Buf::I64(v) => cast_from(v, |i| Num::I(i as i128), to),
        Buf::U64(v) => cast_from(v, |i| Num::I(i as i128), to),
        Buf::I8(v) => cast_from(v, |i| Num::I(i as i128), to),
        Buf::U8(v) => cast_from(v, |i| Num::I(i as i128), to),
    }
}
