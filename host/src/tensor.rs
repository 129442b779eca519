//! Core tensor type shared by every front door and backend.
//!
//! Data is always raw little-endian bytes in row-major order. BYTES tensors use Triton's binary
//! serialisation (each element a 4-byte little-endian length followed by its bytes), so the same
//! buffer travels unchanged from the binary HTTP extension to a backend and back.

use bytes::Bytes;

use crate::error::{CoreError, CoreResult};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DataType {
    Bool,
    Uint8,
    Uint16,
    Uint32,
    Uint64,
    Int8,
    Int16,
    Int32,
    Int64,
    Fp16,
    Bf16,
    Fp32,
    Fp64,
    Bytes,
}

impl DataType {
    pub const ALL: [DataType; 14] = [
        DataType::Bool,
        DataType::Uint8,
        DataType::Uint16,
        DataType::Uint32,
        DataType::Uint64,
        DataType::Int8,
        DataType::Int16,
        DataType::Int32,
        DataType::Int64,
        DataType::Fp16,
        DataType::Bf16,
        DataType::Fp32,
        DataType::Fp64,
        DataType::Bytes,
    ];

    /// The KServe v2 protocol name ("FP32", "BYTES", ...).
    pub fn as_str(self) -> &'static str {
        match self {
            DataType::Bool => "BOOL",
            DataType::Uint8 => "UINT8",
            DataType::Uint16 => "UINT16",
            DataType::Uint32 => "UINT32",
            DataType::Uint64 => "UINT64",
            DataType::Int8 => "INT8",
            DataType::Int16 => "INT16",
            DataType::Int32 => "INT32",
            DataType::Int64 => "INT64",
            DataType::Fp16 => "FP16",
            DataType::Bf16 => "BF16",
            DataType::Fp32 => "FP32",
            DataType::Fp64 => "FP64",
            DataType::Bytes => "BYTES",
        }
    }

    pub fn from_protocol(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.as_str() == name)
    }

    /// Bytes per element; `None` for variable-size BYTES.
    pub fn element_size(self) -> Option<usize> {
        match self {
            DataType::Bool | DataType::Uint8 | DataType::Int8 => Some(1),
            DataType::Uint16 | DataType::Int16 | DataType::Fp16 | DataType::Bf16 => Some(2),
            DataType::Uint32 | DataType::Int32 | DataType::Fp32 => Some(4),
            DataType::Uint64 | DataType::Int64 | DataType::Fp64 => Some(8),
            DataType::Bytes => None,
        }
    }

    /// Whether values of this type can be ranked for the classification extension.
    pub fn is_numeric(self) -> bool {
        !matches!(self, DataType::Bytes | DataType::Bool)
    }
}

impl std::fmt::Display for DataType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Number of elements of a fully specified shape, or an error when it overflows or is negative.
pub fn element_count(shape: &[i64]) -> CoreResult<usize> {
    shape.iter().try_fold(1usize, |acc, &d| {
        let d = usize::try_from(d)
            .map_err(|_| CoreError::invalid_arg(format!("invalid dimension {d} in shape {shape:?}")))?;
        acc.checked_mul(d).ok_or_else(|| CoreError::invalid_arg(format!("shape {shape:?} has too many elements")))
    })
}

/// A named tensor with its data.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    pub name: String,
    pub datatype: DataType,
    pub shape: Vec<i64>,
    pub data: Bytes,
}

impl Tensor {
    /// The same tensor with its bytes in a buffer of its own, for a consumer that keeps a
    /// stream's tensors: they no longer hold the producer's buffer (a decoupled Wasm guest counts
    /// its responses' bytes until they are dropped, and waits for a reader past its budget).
    pub fn with_own_bytes(mut self) -> Self {
        if !self.data.is_empty() {
            self.data = Bytes::copy_from_slice(&self.data);
        }
        self
    }

    /// Builds a tensor, checking that the data length fits the shape and datatype.
    pub fn new(name: impl Into<String>, datatype: DataType, shape: Vec<i64>, data: Bytes) -> CoreResult<Self> {
        Self::new_as("input", name, datatype, shape, data)
    }

    /// A tensor as a client sent it, not yet checked. The doors build these and leave the checks
    /// to the model (`ModelIo::prepare`), which makes them in Triton's order and words before any
    /// backend sees the tensor.
    pub fn unchecked(name: impl Into<String>, datatype: DataType, shape: Vec<i64>, data: Bytes) -> Self {
        Self { name: name.into(), datatype, shape, data }
    }

    /// [`Self::new`] whose errors call the tensor a `role` ("output", "tensor") rather than an
    /// input: for tensors a model makes.
    pub fn new_as(
        role: &str,
        name: impl Into<String>,
        datatype: DataType,
        shape: Vec<i64>,
        data: Bytes,
    ) -> CoreResult<Self> {
        let tensor = Self::unchecked(name, datatype, shape, data);
        tensor.check(role)?;
        Ok(tensor)
    }

    /// Checks that the data fits the shape and datatype: non-negative dims whose product does not
    /// overflow, the exact byte size, or well-formed BYTES elements of the right count.
    pub fn validate(&self) -> CoreResult<()> {
        self.check("input")
    }

    /// [`Self::validate`], with `role` ("input", "output", "tensor") in its messages.
    fn check(&self, role: &str) -> CoreResult<()> {
        let name = &self.name;
        let count = element_count(&self.shape)?;
        match self.datatype.element_size() {
            Some(size) => {
                let expected = count.saturating_mul(size);
                if self.data.len() != expected {
                    return Err(CoreError::invalid_arg(format!(
                        "{role} byte size mismatch for {role} '{name}'. Expected {expected}, got {}",
                        self.data.len()
                    )));
                }
            }
            None => {
                let found = bytes_element_count(&self.data)
                    .map_err(|e| CoreError::invalid_arg(format!("invalid BYTES data for {role} '{name}': {e}")))?;
                if found != count {
                    return Err(CoreError::invalid_arg(format!(
                        "unexpected number of string elements {found} for {role} '{name}', expecting {count}"
                    )));
                }
            }
        }
        Ok(())
    }

    pub fn element_count(&self) -> usize {
        // Shapes are validated on construction; a corrupt shape counts as empty rather than panicking.
        element_count(&self.shape).unwrap_or(0)
    }
}

/// Counts the elements of a length-prefixed BYTES buffer, checking every prefix stays in bounds.
pub fn bytes_element_count(data: &[u8]) -> Result<usize, String> {
    let mut rest = data;
    let mut count = 0;
    while !rest.is_empty() {
        let (len, tail) = split_bytes_element(rest)?;
        rest = &tail[len..];
        count += 1;
    }
    Ok(count)
}

fn split_bytes_element(data: &[u8]) -> Result<(usize, &[u8]), String> {
    let Some((prefix, tail)) = data.split_first_chunk::<4>() else {
        return Err(format!("truncated length prefix ({} trailing bytes)", data.len()));
    };
    let len = u32::from_le_bytes(*prefix) as usize;
    if len > tail.len() {
        return Err(format!("element of {len} bytes overruns the buffer ({} bytes left)", tail.len()));
    }
    Ok((len, tail))
}

/// Iterates the elements of a length-prefixed BYTES buffer (stops at the first malformed element).
pub fn bytes_elements(data: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = data;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let (len, tail) = split_bytes_element(rest).ok()?;
        let (item, next) = tail.split_at(len);
        rest = next;
        Some(item)
    })
}

/// Appends one element in BYTES serialisation.
pub fn push_bytes_element(out: &mut Vec<u8>, item: &[u8]) -> CoreResult<()> {
    let len = u32::try_from(item.len()).map_err(|_| CoreError::invalid_arg("BYTES element larger than 4 GiB"))?;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(item);
    Ok(())
}

/// The bytes of an all-zero tensor: zeros for numbers, empty strings for BYTES.
pub fn zeros(datatype: DataType, shape: &[i64]) -> CoreResult<Bytes> {
    let count = element_count(shape)?;
    Ok(match datatype.element_size() {
        Some(size) => Bytes::from(vec![0u8; count * size]),
        None => Bytes::from([0u8; 4].repeat(count)),
    })
}

/// Stacks tensors along dim 0 (the batch dimension): the dynamic batcher's merge. All parts
/// share name, datatype and non-batch dims (the batcher only merges such requests). Works for
/// BYTES too, since length-prefixed elements concatenate.
pub fn concat_batch(parts: &[&Tensor]) -> CoreResult<Tensor> {
    let Some(first) = parts.first() else {
        return Err(CoreError::internal("no tensors to batch"));
    };
    let mut rows = 0i64;
    let mut data = bytes::BytesMut::with_capacity(parts.iter().map(|t| t.data.len()).sum());
    for t in parts {
        if t.datatype != first.datatype || t.shape.get(1..) != first.shape.get(1..) || t.shape.is_empty() {
            return Err(CoreError::internal(format!("cannot batch tensor '{}': shapes or datatypes differ", t.name)));
        }
        rows += t.shape[0];
        data.extend_from_slice(&t.data);
    }
    let mut shape = first.shape.clone();
    shape[0] = rows;
    Ok(Tensor { name: first.name.clone(), datatype: first.datatype, shape, data: data.freeze() })
}

/// Splits a batched tensor along dim 0 into parts of `rows` rows each (the inverse of
/// [`concat_batch`]), without copying fixed-size data.
pub fn split_batch(tensor: &Tensor, rows: &[usize]) -> CoreResult<Vec<Tensor>> {
    let total: usize = rows.iter().sum();
    let dim0 = tensor.shape.first().and_then(|&d| usize::try_from(d).ok());
    if dim0 != Some(total) {
        return Err(CoreError::internal(format!(
            "output '{}' has shape {:?}; expected {total} rows to split among {} batched requests",
            tensor.name,
            tensor.shape,
            rows.len()
        )));
    }
    let per_row = tensor.element_count().checked_div(total).unwrap_or(0);
    let mut parts = Vec::with_capacity(rows.len());
    let mut offset = 0usize;
    // For BYTES, the byte offset of each element.
    let starts: Vec<usize> = if tensor.datatype == DataType::Bytes {
        let mut starts = Vec::with_capacity(tensor.element_count() + 1);
        let mut at = 0usize;
        for item in bytes_elements(&tensor.data) {
            starts.push(at);
            at += 4 + item.len();
        }
        starts.push(at);
        starts
    } else {
        Vec::new()
    };
    let size = tensor.datatype.element_size();
    for &n in rows {
        let (from, to) = match size {
            Some(size) => (offset * per_row * size, (offset + n) * per_row * size),
            None => {
                let at = |row: usize| starts.get(row * per_row).copied();
                match (at(offset), at(offset + n)) {
                    (Some(a), Some(b)) => (a, b),
                    _ => return Err(CoreError::internal(format!("output '{}' has malformed BYTES data", tensor.name))),
                }
            }
        };
        if to > tensor.data.len() || from > to {
            return Err(CoreError::internal(format!("output '{}' is shorter than its shape", tensor.name)));
        }
        let mut shape = tensor.shape.clone();
        shape[0] = n as i64;
        parts.push(Tensor {
            name: tensor.name.clone(),
            datatype: tensor.datatype,
            shape,
            data: tensor.data.slice(from..to),
        });
        offset += n;
    }
    Ok(parts)
}

/// A shape as Triton prints it in messages: `[1,-1,16]`.
pub fn format_shape(shape: &[i64]) -> String {
    format!("[{}]", shape.iter().map(i64::to_string).collect::<Vec<_>>().join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datatype_names_round_trip() {
        for d in DataType::ALL {
            assert_eq!(DataType::from_protocol(d.as_str()), Some(d));
        }
        assert_eq!(DataType::from_protocol("FLOAT"), None);
    }

    #[test]
    fn tensor_checks_byte_size() {
        let ok = Tensor::new("x", DataType::Fp32, vec![2, 2], Bytes::from(vec![0u8; 16]));
        assert!(ok.is_ok());
        let err = Tensor::new("x", DataType::Fp32, vec![2, 2], Bytes::from(vec![0u8; 15])).unwrap_err();
        assert!(err.message.contains("Expected 16, got 15"), "{}", err.message);
        let neg = Tensor::new("x", DataType::Fp32, vec![-1, 2], Bytes::new()).unwrap_err();
        assert!(neg.message.contains("invalid dimension"));
    }

    #[test]
    fn bytes_serialisation_round_trips_and_rejects_overruns() {
        let mut buf = Vec::new();
        push_bytes_element(&mut buf, b"hello").unwrap();
        push_bytes_element(&mut buf, b"").unwrap();
        assert_eq!(bytes_element_count(&buf), Ok(2));
        assert_eq!(bytes_elements(&buf).collect::<Vec<_>>(), vec![&b"hello"[..], &b""[..]]);
        let t = Tensor::new("s", DataType::Bytes, vec![2], Bytes::from(buf.clone())).unwrap();
        assert_eq!(t.element_count(), 2);
        buf.truncate(6);
        assert!(bytes_element_count(&buf).is_err());
        assert!(bytes_element_count(&[1, 0]).is_err());
    }

    #[test]
    fn concat_and_split_batches() {
        let a = Tensor::new("x", DataType::Int32, vec![1, 2], Bytes::from(vec![1, 0, 0, 0, 2, 0, 0, 0])).unwrap();
        let b = Tensor::new("x", DataType::Int32, vec![2, 2], Bytes::from([3u8, 0, 0, 0].repeat(4))).unwrap();
        let merged = concat_batch(&[&a, &b]).unwrap();
        assert_eq!(merged.shape, vec![3, 2]);
        let parts = split_batch(&merged, &[1, 2]).unwrap();
        assert_eq!(parts, vec![a.clone(), b.clone()]);
        assert!(split_batch(&merged, &[1, 1]).is_err());
        let mut s1 = Vec::new();
        push_bytes_element(&mut s1, b"hello").unwrap();
        let mut s2 = Vec::new();
        push_bytes_element(&mut s2, b"").unwrap();
        push_bytes_element(&mut s2, b"xyz").unwrap();
        let t1 = Tensor::new("s", DataType::Bytes, vec![1, 1], Bytes::from(s1)).unwrap();
        let t2 = Tensor::new("s", DataType::Bytes, vec![2, 1], Bytes::from(s2)).unwrap();
        let merged = concat_batch(&[&t1, &t2]).unwrap();
        assert_eq!(split_batch(&merged, &[1, 2]).unwrap(), vec![t1, t2]);
        let odd = Tensor::new("x", DataType::Int32, vec![1, 3], Bytes::from(vec![0u8; 12])).unwrap();
        assert!(concat_batch(&[&a, &odd]).is_err());
    }
}
