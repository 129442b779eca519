//! A tensor as Triton's trace file writes it at level TENSORS: its values comma-joined as C++
//! streams print them (six significant digits for floats), BOOL as 1 or 0, each BYTES element
//! in double quotes, and the shape comma-joined.
//!
//! Unlike Triton, which prints INT8 and UINT8 values as characters and FP16 and BF16 as nothing
//! (both of which its own trace summary tool fails to read), every numeric type prints as
//! numbers here.

use crate::tensor::{DataType, Tensor, bytes_elements};

/// The `data` of a tensor activity.
pub fn data_text(tensor: &Tensor) -> String {
    let data = &tensor.data[..];
    let mut out = Vec::new();
    macro_rules! each {
        ($ty:ty, $size:expr, $show:expr) => {
            for chunk in data.chunks_exact($size) {
                let mut bytes = [0u8; $size];
                bytes.copy_from_slice(chunk);
                let value = <$ty>::from_le_bytes(bytes);
                out.push($show(value));
            }
        };
    }
    match tensor.datatype {
        DataType::Bool => out.extend(data.iter().map(|&b| if b != 0 { "1" } else { "0" }.to_string())),
        DataType::Uint8 => each!(u8, 1, |v: u8| v.to_string()),
        DataType::Int8 => each!(i8, 1, |v: i8| v.to_string()),
        DataType::Uint16 => each!(u16, 2, |v: u16| v.to_string()),
        DataType::Int16 => each!(i16, 2, |v: i16| v.to_string()),
        DataType::Uint32 => each!(u32, 4, |v: u32| v.to_string()),
        DataType::Int32 => each!(i32, 4, |v: i32| v.to_string()),
        DataType::Uint64 => each!(u64, 8, |v: u64| v.to_string()),
        DataType::Int64 => each!(i64, 8, |v: i64| v.to_string()),
        DataType::Fp16 => each!(half::f16, 2, |v: half::f16| general(f64::from(v))),
        DataType::Bf16 => each!(half::bf16, 2, |v: half::bf16| general(f64::from(v))),
        DataType::Fp32 => each!(f32, 4, |v: f32| general(f64::from(v))),
        DataType::Fp64 => each!(f64, 8, general),
        DataType::Bytes => {
            out.extend(bytes_elements(data).map(|item| format!("\"{}\"", String::from_utf8_lossy(item))));
        }
    }
    out.join(",")
}

/// The `shape` of a tensor activity.
pub fn shape_text(tensor: &Tensor) -> String {
    tensor.shape.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
}

/// `value` as C's `%g` prints it (C++ streams' default): six significant digits, trailing
/// zeros dropped, scientific notation below 1e-4 and from 1e6.
pub fn general(value: f64) -> String {
    if !value.is_finite() {
        return if value.is_nan() {
            "nan".into()
        } else if value > 0.0 {
            "inf".into()
        } else {
            "-inf".into()
        };
    }
    if value == 0.0 {
        return if value.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    let scientific = format!("{value:.5e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if !(-4..6).contains(&exponent) {
        let mantissa = trim_zeros(mantissa);
        let sign = if exponent < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exponent.abs());
    }
    let decimals = usize::try_from(5 - exponent).unwrap_or(0);
    trim_zeros(&format!("{value:.decimals$}")).to_string()
}

fn trim_zeros(text: &str) -> &str {
    if text.contains('.') { text.trim_end_matches('0').trim_end_matches('.') } else { text }
}
