//! Triton's classification extension: an output requested with `classification: k` is
//! returned as the top k values of each batch row, as "score:index[:label]" strings.

use bytes::Bytes;

use crate::error::{CoreError, CoreResult};
use crate::tensor::{DataType, Tensor, push_bytes_element};

/// Triton's classification extension: per batch item, the top `k` values as
/// "score:index[:label]" BYTES strings, highest first.
pub fn classify(tensor: &Tensor, k: usize, labels: Option<&[String]>, batch: Option<usize>) -> CoreResult<Tensor> {
    let values = numeric_values(tensor)?;
    let rows = batch.unwrap_or(1).max(1);
    let per_row = values.len() / rows;
    let k = k.min(per_row);
    let mut data = Vec::new();
    for row in values.chunks(per_row.max(1)).take(rows) {
        let mut order: Vec<usize> = (0..row.len()).collect();
        order.sort_by(|&a, &b| row[b].0.total_cmp(&row[a].0).then(a.cmp(&b)));
        for &index in order.iter().take(k) {
            let mut text = format!("{}:{index}", row[index].1);
            if let Some(label) = labels.and_then(|l| l.get(index)) {
                text.push(':');
                text.push_str(label);
            }
            push_bytes_element(&mut data, text.as_bytes())?;
        }
    }
    let shape = match batch {
        Some(b) => vec![b as i64, k as i64],
        None => vec![k as i64],
    };
    Tensor::new(tensor.name.clone(), DataType::Bytes, shape, Bytes::from(data))
}

/// Each element as (ranking key, display text formatted like C++ `std::to_string`).
fn numeric_values(tensor: &Tensor) -> CoreResult<Vec<(f64, String)>> {
    fn ints<const N: usize>(d: &[u8], f: impl Fn([u8; N]) -> i128) -> Vec<(f64, String)> {
        d.chunks_exact(N).map(|c| f(c.try_into().unwrap_or([0; N]))).map(|v| (v as f64, v.to_string())).collect()
    }
    fn floats<const N: usize>(d: &[u8], f: impl Fn([u8; N]) -> f64) -> Vec<(f64, String)> {
        d.chunks_exact(N).map(|c| f(c.try_into().unwrap_or([0; N]))).map(|v| (v, format!("{v:.6}"))).collect()
    }
    let d = &tensor.data[..];
    Ok(match tensor.datatype {
        DataType::Uint8 => ints::<1>(d, |b| i128::from(b[0])),
        DataType::Int8 => ints::<1>(d, |b| i128::from(b[0] as i8)),
        DataType::Uint16 => ints::<2>(d, |b| i128::from(u16::from_le_bytes(b))),
        DataType::Int16 => ints::<2>(d, |b| i128::from(i16::from_le_bytes(b))),
        DataType::Uint32 => ints::<4>(d, |b| i128::from(u32::from_le_bytes(b))),
        DataType::Int32 => ints::<4>(d, |b| i128::from(i32::from_le_bytes(b))),
        DataType::Uint64 => ints::<8>(d, |b| i128::from(u64::from_le_bytes(b))),
        DataType::Int64 => ints::<8>(d, |b| i128::from(i64::from_le_bytes(b))),
        DataType::Fp16 => floats::<2>(d, |b| f64::from(half::f16::from_le_bytes(b))),
        DataType::Bf16 => floats::<2>(d, |b| f64::from(half::bf16::from_le_bytes(b))),
        DataType::Fp32 => floats::<4>(d, |b| f64::from(f32::from_le_bytes(b))),
        DataType::Fp64 => floats::<8>(d, f64::from_le_bytes),
        DataType::Bool | DataType::Bytes => {
            return Err(CoreError::invalid_arg(format!(
                "classification is not supported for output '{}' of type {}",
                tensor.name, tensor.datatype
            )));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification_formats_like_triton() {
        let values: Vec<u8> = [0.1f32, 0.7, 0.2, 0.5, 0.0, 0.9].iter().flat_map(|v| v.to_le_bytes()).collect();
        let t = Tensor::new("o", DataType::Fp32, vec![2, 3], Bytes::from(values)).unwrap();
        let labels = vec!["a".to_string(), "b".to_string(), "c".to_string()];
        let out = classify(&t, 2, Some(&labels), Some(2)).unwrap();
        assert_eq!(out.shape, vec![2, 2]);
        let strings: Vec<_> =
            crate::tensor::bytes_elements(&out.data).map(|s| String::from_utf8_lossy(s).into_owned()).collect();
        assert_eq!(strings, vec!["0.700000:1:b", "0.200000:2:c", "0.900000:2:c", "0.500000:0:a"]);
        let ints: Vec<u8> = [3i32, 9, 1].iter().flat_map(|v| v.to_le_bytes()).collect();
        let t = Tensor::new("o", DataType::Int32, vec![3], Bytes::from(ints)).unwrap();
        let out = classify(&t, 5, None, None).unwrap();
        assert_eq!(out.shape, vec![3]);
        let strings: Vec<_> =
            crate::tensor::bytes_elements(&out.data).map(|s| String::from_utf8_lossy(s).into_owned()).collect();
        assert_eq!(strings, vec!["9:1", "3:0", "1:2"]);
    }
}
