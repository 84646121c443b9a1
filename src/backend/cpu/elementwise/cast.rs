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
    match cast_as(x, to)? {
        Some(r) => Ok(r),
        None => cast_general(x, to),
    }
}

/// Any pair by [`cast_from`]: every source value read as an f32 or i128.
fn cast_general(x: &Buf, to: DataType) -> Result<Buf> {
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

/// `x as i32` (truncation toward zero, saturation at the bounds, NaN 0)
/// in a form whose loop runs on vectors: the saturating cast alone is
/// compiled one element at a time (float32 to int32 of 1M values: 0.63
/// ms, against 0.08 for a cast to float16; one thread, AVX-512 Zen 5).
#[inline(always)]
fn f32_to_i32(x: f32) -> i32 {
    // 2^31, exact in f32.
    const TWO31: f32 = 2_147_483_648.0;
    // NaN and values out of range go through as 0.
    let inside = if (-TWO31..TWO31).contains(&x) { x } else { 0.0 };
    // SAFETY: `inside` is finite (NaN and the infinities fail the range
    // test) and in [-2^31, 2^31), so its truncation toward zero lies in
    // [-2^31, 2^31 - 1], which i32 represents.
    let t = unsafe { inside.to_int_unchecked::<i32>() };
    if x >= TWO31 {
        i32::MAX
    } else if x < -TWO31 {
        i32::MIN
    } else {
        t
    }
}

/// The pairs where Rust's `as` is the table's rule, on loops that
/// vectorise: integer to integer keeps the low bits (two's complement),
/// float to integer truncates toward zero and saturates with NaN giving 0,
/// integer to float rounds to nearest, ties to even. None for float16
/// sources and for float16, int4 and uint4 targets ([`cast_from`]'s
/// general path, which reads every value as an i128 or f32: float32 to
/// int32 took 9 ms for 1M values there, a library call per element).
fn cast_as(x: &Buf, to: DataType) -> Result<Option<Buf>> {
    macro_rules! to {
        ($v:expr) => {{
            let v = $v;
            Some(match to {
                DataType::Float32 => Buf::F32(map_slice(v, |e| e as f32)?),
                DataType::Int32 => Buf::I32(map_slice(v, |e| e as i32)?),
                DataType::Uint32 => Buf::U32(map_slice(v, |e| e as u32)?),
                DataType::Int64 => Buf::I64(map_slice(v, |e| e as i64)?),
                DataType::Uint64 => Buf::U64(map_slice(v, |e| e as u64)?),
                DataType::Int8 => Buf::I8(map_slice(v, |e| e as i8)?),
                DataType::Uint8 => Buf::U8(map_slice(v, |e| e as u8)?),
                DataType::Float16 | DataType::Int4 | DataType::Uint4 => return Ok(None),
            })
        }};
    }
    Ok(match x {
        Buf::F32(v) if to == DataType::Int32 => Some(Buf::I32(map_slice(v, f32_to_i32)?)),
        Buf::F32(v) => to!(v),
        Buf::I32(v) => to!(v),
        Buf::U32(v) => to!(v),
        Buf::I64(v) => to!(v),
        Buf::U64(v) => to!(v),
        Buf::I8(v) => to!(v),
        Buf::U8(v) => to!(v),
        Buf::F16(_) => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every pair that `cast_as` takes gives the general path's values,
    /// over each type's edges (and float32's NaN, infinities, fractions
    /// and values past every integer range).
    #[test]
    fn the_as_casts_give_the_general_paths_values() {
        let floats = vec![
            0.0f32,
            -0.0,
            0.5,
            -0.5,
            1.9,
            -1.9,
            127.5,
            -128.7,
            255.9,
            256.0,
            -129.0,
            3e9,
            -3e9,
            5e18,
            2e19,
            -1e19,
            1e30,
            -1e30,
            f32::MAX,
            f32::MIN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            2147483520.0,
            -2147483648.0,
            4294967040.0,
            // Either side of int32's bounds, and values that truncate.
            2147483648.0,
            -2147483904.0,
            -2147483520.0,
            -0.9999,
            0.9999,
            -1.0,
            1e-40,
            -1e-40,
            f32::from_bits(0xffc0_0001),
            f32::from_bits(0x7f80_0001),
        ];
        let sources = [
            Buf::F32(floats.clone()),
            Buf::I32(vec![
                0,
                1,
                -1,
                127,
                128,
                -129,
                255,
                256,
                i32::MIN,
                i32::MAX,
                16777217,
            ]),
            Buf::U32(vec![0, 1, 127, 128, 255, 256, u32::MAX, 1 << 31, 16777217]),
            Buf::I64(vec![
                0,
                -1,
                1 << 40,
                i64::MIN,
                i64::MAX,
                -(1 << 33) + 5,
                (1 << 53) + 1,
            ]),
            Buf::U64(vec![0, 1, u64::MAX, 1 << 63, (1 << 32) + 7, (1 << 24) + 1]),
            Buf::I8(vec![0, 1, -1, i8::MIN, i8::MAX]),
            Buf::U8(vec![0, 1, 127, 128, u8::MAX]),
        ];
        let targets = [
            DataType::Float32,
            DataType::Int32,
            DataType::Uint32,
            DataType::Int64,
            DataType::Uint64,
            DataType::Int8,
            DataType::Uint8,
        ];
        let names = [
            "float32", "int32", "uint32", "int64", "uint64", "int8", "uint8",
        ];
        for (x, name) in sources.iter().zip(names) {
            for &to in &targets {
                let fast = cast_as(x, to).unwrap().expect("a pair cast_as takes");
                let general = cast_general(x, to).unwrap();
                // Float32 results compared by bits (NaN stays NaN).
                match (&fast, &general) {
                    (Buf::F32(a), Buf::F32(b)) => {
                        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                        assert_eq!(bits(a), bits(b), "{name} to {to:?}");
                    }
                    _ => assert_eq!(fast, general, "{name} to {to:?}"),
                }
            }
        }
        // The pairs left to the general path.
        assert!(cast_as(&Buf::F16(vec![0]), DataType::Float32)
            .unwrap()
            .is_none());
        for to in [DataType::Float16, DataType::Int4, DataType::Uint4] {
            assert!(cast_as(&Buf::I32(vec![0]), to).unwrap().is_none());
        }
    }
}
