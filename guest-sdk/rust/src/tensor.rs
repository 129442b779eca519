//! Tensors: handles to bytes that live in the host.
//!
//! Creating a tensor from guest data ([`Tensor::from_f32`], ...) copies the bytes into the host
//! once; reading one ([`Tensor::as_f32`], [`Tensor::data`]) copies them into the guest. Handing a
//! tensor on (as an output, as a BLS input, or renamed with [`Tensor::with_name`]) copies nothing.

use std::cell::{Cell, OnceCell};

use crate::bindings::tessera::model::types::{Tensor as RawTensor, TensorData};
use crate::{DataType, Error};

/// A tensor owned by the host: name, datatype, shape and raw little-endian row-major bytes
/// (BYTES tensors: each element is a 4-byte little-endian length and the bytes).
///
/// Datatype and shape never change, so the first host call that returns them (including a read
/// of the data, which returns all three in one call) is the last: each host call costs about as
/// much as copying a small tensor.
#[derive(Debug)]
pub struct Tensor {
    pub(crate) raw: RawTensor,
    datatype: Cell<Option<DataType>>,
    shape: OnceCell<Vec<i64>>,
}

mod sealed {
    pub trait Sealed {}
}

/// Element types with a fixed-size little-endian encoding: `bool`, `u8`..`u64`, `i8`..`i64`,
/// `f32`, `f64`.
pub trait Element: Copy + sealed::Sealed + 'static {
    /// The tensor datatype that stores this element type.
    const DATATYPE: DataType;
    /// Bytes per element.
    const SIZE: usize;
    /// Appends the little-endian encoding of `self`.
    fn put(self, out: &mut Vec<u8>);
    /// Decodes one element from exactly `SIZE` bytes.
    fn get(bytes: &[u8]) -> Self;
}

macro_rules! numeric_element {
    ($($t:ty => $dt:ident),* $(,)?) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DATATYPE: DataType = DataType::$dt;
            const SIZE: usize = core::mem::size_of::<$t>();
            #[inline]
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            #[inline]
            fn get(bytes: &[u8]) -> Self {
                let mut b = [0u8; core::mem::size_of::<$t>()];
                b.copy_from_slice(bytes);
                <$t>::from_le_bytes(b)
            }
        }
    )*};
}

numeric_element! {
    u8 => Uint8, u16 => Uint16, u32 => Uint32, u64 => Uint64,
    i8 => Int8, i16 => Int16, i32 => Int32, i64 => Int64,
    f32 => Fp32, f64 => Fp64,
}

impl sealed::Sealed for bool {}
impl Element for bool {
    const DATATYPE: DataType = DataType::Bool;
    const SIZE: usize = 1;
    #[inline]
    fn put(self, out: &mut Vec<u8>) {
        out.push(u8::from(self));
    }
    #[inline]
    fn get(bytes: &[u8]) -> Self {
        bytes[0] != 0
    }
}

impl DataType {
    /// The KServe v2 / Triton name: `BOOL`, `UINT8`, ..., `FP32`, `BYTES`.
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

    /// Bytes per element, or `None` for BYTES (variable length).
    pub fn element_size(self) -> Option<usize> {
        Some(match self {
            DataType::Bool | DataType::Uint8 | DataType::Int8 => 1,
            DataType::Uint16 | DataType::Int16 | DataType::Fp16 | DataType::Bf16 => 2,
            DataType::Uint32 | DataType::Int32 | DataType::Fp32 => 4,
            DataType::Uint64 | DataType::Int64 | DataType::Fp64 => 8,
            DataType::Bytes => return None,
        })
    }
}

/// Number of elements a shape holds, or an `invalid-arg` error for a negative dimension or an
/// overflowing product.
pub(crate) fn element_count(shape: &[i64]) -> Result<usize, Error> {
    shape.iter().try_fold(1usize, |n, &d| {
        let d = usize::try_from(d)
            .map_err(|_| Error::invalid_arg(format!("negative dimension in shape {shape:?}")))?;
        n.checked_mul(d)
            .ok_or_else(|| Error::invalid_arg(format!("shape {shape:?} is too large")))
    })
}

fn check_len(name: &str, shape: &[i64], len: usize) -> Result<(), Error> {
    let n = element_count(shape)?;
    if n == len {
        Ok(())
    } else {
        Err(Error::invalid_arg(format!(
            "tensor '{name}': shape {shape:?} holds {n} elements, got {len}"
        )))
    }
}

/// Serialises BYTES elements: for each, a 4-byte little-endian length and the bytes.
pub fn encode_bytes_elements<S: AsRef<[u8]>>(values: &[S]) -> Result<Vec<u8>, Error> {
    let total: usize = values.iter().map(|v| 4 + v.as_ref().len()).sum();
    let mut out = Vec::with_capacity(total);
    for v in values {
        let v = v.as_ref();
        let len = u32::try_from(v.len())
            .map_err(|_| Error::invalid_arg("a BYTES element is longer than 4 GiB"))?;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(v);
    }
    Ok(out)
}

/// Parses serialised BYTES elements (4-byte little-endian length + bytes, repeated).
pub fn decode_bytes_elements(mut data: &[u8]) -> Result<Vec<Vec<u8>>, Error> {
    let mut out = Vec::new();
    while !data.is_empty() {
        if data.len() < 4 {
            return Err(Error::invalid_arg(
                "truncated BYTES tensor: incomplete length prefix",
            ));
        }
        let len = u32::from_le_bytes([data[0], data[1], data[2], data[3]]) as usize;
        data = &data[4..];
        if data.len() < len {
            return Err(Error::invalid_arg(format!(
                "truncated BYTES tensor: element of {len} bytes, {} left",
                data.len()
            )));
        }
        out.push(data[..len].to_vec());
        data = &data[len..];
    }
    Ok(out)
}

impl Tensor {
    /// A new host tensor holding a copy of `data` (raw little-endian bytes; for BYTES, the
    /// serialised elements). The host checks that the length fits shape and datatype.
    pub fn new(
        name: &str,
        datatype: DataType,
        shape: &[i64],
        data: &[u8],
    ) -> Result<Tensor, Error> {
        let raw = RawTensor::create(name, datatype, shape, data)?;
        let tensor = Tensor::from_raw(raw);
        tensor.datatype.set(Some(datatype));
        let _ = tensor.shape.set(shape.to_vec());
        Ok(tensor)
    }

    /// A new tensor from typed elements; `values.len()` must equal the shape's element count.
    pub fn from_slice<T: Element>(
        name: &str,
        shape: &[i64],
        values: &[T],
    ) -> Result<Tensor, Error> {
        check_len(name, shape, values.len())?;
        let mut bytes = Vec::with_capacity(values.len() * T::SIZE);
        for &v in values {
            v.put(&mut bytes);
        }
        Tensor::new(name, T::DATATYPE, shape, &bytes)
    }

    /// An FP32 tensor.
    pub fn from_f32(name: &str, shape: &[i64], values: &[f32]) -> Result<Tensor, Error> {
        Tensor::from_slice(name, shape, values)
    }

    /// An FP64 tensor.
    pub fn from_f64(name: &str, shape: &[i64], values: &[f64]) -> Result<Tensor, Error> {
        Tensor::from_slice(name, shape, values)
    }

    /// An INT32 tensor.
    pub fn from_i32(name: &str, shape: &[i64], values: &[i32]) -> Result<Tensor, Error> {
        Tensor::from_slice(name, shape, values)
    }

    /// An INT64 tensor.
    pub fn from_i64(name: &str, shape: &[i64], values: &[i64]) -> Result<Tensor, Error> {
        Tensor::from_slice(name, shape, values)
    }

    /// A UINT32 tensor.
    pub fn from_u32(name: &str, shape: &[i64], values: &[u32]) -> Result<Tensor, Error> {
        Tensor::from_slice(name, shape, values)
    }

    /// A UINT8 tensor.
    pub fn from_u8(name: &str, shape: &[i64], values: &[u8]) -> Result<Tensor, Error> {
        check_len(name, shape, values.len())?;
        Tensor::new(name, DataType::Uint8, shape, values)
    }

    /// A BOOL tensor.
    pub fn from_bool(name: &str, shape: &[i64], values: &[bool]) -> Result<Tensor, Error> {
        Tensor::from_slice(name, shape, values)
    }

    /// A BYTES tensor: each value (a `&str`, `String`, `&[u8]`, `Vec<u8>`, ...) becomes one
    /// element, serialised as a 4-byte little-endian length and the bytes.
    pub fn from_strings<S: AsRef<[u8]>>(
        name: &str,
        shape: &[i64],
        values: &[S],
    ) -> Result<Tensor, Error> {
        check_len(name, shape, values.len())?;
        Tensor::new(
            name,
            DataType::Bytes,
            shape,
            &encode_bytes_elements(values)?,
        )
    }

    /// The tensor's name.
    pub fn name(&self) -> String {
        self.raw.name()
    }

    /// The tensor's datatype.
    pub fn datatype(&self) -> DataType {
        if let Some(datatype) = self.datatype.get() {
            return datatype;
        }
        let datatype = self.raw.datatype();
        self.datatype.set(Some(datatype));
        datatype
    }

    /// The tensor's shape.
    pub fn shape(&self) -> Vec<i64> {
        self.shape.get_or_init(|| self.raw.shape()).clone()
    }

    /// Size of the data in bytes (without copying it).
    pub fn byte_size(&self) -> u64 {
        self.raw.byte_size()
    }

    /// A copy of the raw bytes in guest memory (with the datatype and shape, in one host call,
    /// when they are not known yet).
    pub fn data(&self) -> Vec<u8> {
        if self.datatype.get().is_some() && self.shape.get().is_some() {
            return self.raw.data();
        }
        let TensorData { datatype, shape, data } = self.raw.read();
        self.datatype.set(Some(datatype));
        let _ = self.shape.set(shape);
        data
    }

    /// The same host bytes under another name: no copy. Use it to hand an input on as an output
    /// or as a BLS input of a different name.
    pub fn with_name(&self, name: &str) -> Tensor {
        Tensor {
            raw: self.raw.with_name(name),
            datatype: self.datatype.clone(),
            shape: self.shape.clone(),
        }
    }

    /// The bytes of a tensor of datatype `want`, or an `invalid-arg` error: one host call when
    /// nothing is known yet; a datatype already known is checked before any bytes are copied.
    fn checked_data(&self, want: DataType) -> Result<Vec<u8>, Error> {
        if self.datatype.get().is_some_and(|got| got != want) {
            return Err(self.datatype_error(want));
        }
        let bytes = self.data();
        if self.datatype() == want {
            Ok(bytes)
        } else {
            Err(self.datatype_error(want))
        }
    }

    fn datatype_error(&self, want: DataType) -> Error {
        Error::invalid_arg(format!(
            "tensor '{}' has datatype {}, expected {}",
            self.name(),
            self.datatype().as_str(),
            want.as_str()
        ))
    }

    /// Copies the elements out; fails with `invalid-arg` when the datatype is not `T`'s.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>, Error> {
        let bytes = self.checked_data(T::DATATYPE)?;
        if bytes.len() % T::SIZE != 0 {
            return Err(Error::internal(format!(
                "tensor '{}': {} bytes is not a whole number of {} elements",
                self.name(),
                bytes.len(),
                T::DATATYPE.as_str()
            )));
        }
        Ok(bytes.chunks_exact(T::SIZE).map(T::get).collect())
    }

    /// The elements of an FP32 tensor.
    pub fn as_f32(&self) -> Result<Vec<f32>, Error> {
        self.to_vec()
    }

    /// The elements of an FP64 tensor.
    pub fn as_f64(&self) -> Result<Vec<f64>, Error> {
        self.to_vec()
    }

    /// The elements of an INT32 tensor.
    pub fn as_i32(&self) -> Result<Vec<i32>, Error> {
        self.to_vec()
    }

    /// The elements of an INT64 tensor.
    pub fn as_i64(&self) -> Result<Vec<i64>, Error> {
        self.to_vec()
    }

    /// The elements of a UINT32 tensor.
    pub fn as_u32(&self) -> Result<Vec<u32>, Error> {
        self.to_vec()
    }

    /// The elements of a UINT8 tensor.
    pub fn as_u8(&self) -> Result<Vec<u8>, Error> {
        self.checked_data(DataType::Uint8)
    }

    /// The elements of a BOOL tensor.
    pub fn as_bool(&self) -> Result<Vec<bool>, Error> {
        self.to_vec()
    }

    /// The elements of a BYTES tensor, as byte strings.
    pub fn as_byte_strings(&self) -> Result<Vec<Vec<u8>>, Error> {
        decode_bytes_elements(&self.checked_data(DataType::Bytes)?)
            .map_err(|e| e.context(format!("tensor '{}'", self.name())))
    }

    /// The elements of a BYTES tensor, as UTF-8 strings (`invalid-arg` if one is not UTF-8).
    pub fn as_strings(&self) -> Result<Vec<String>, Error> {
        self.as_byte_strings()?
            .into_iter()
            .map(|b| {
                String::from_utf8(b).map_err(|_| {
                    Error::invalid_arg(format!(
                        "tensor '{}': a BYTES element is not UTF-8",
                        self.name()
                    ))
                })
            })
            .collect()
    }

    /// The generated resource handle, for code that talks to the bindings directly.
    #[doc(hidden)]
    pub fn into_raw(self) -> RawTensor {
        self.raw
    }

    #[doc(hidden)]
    pub fn from_raw(raw: RawTensor) -> Tensor {
        Tensor { raw, datatype: Cell::new(None), shape: OnceCell::new() }
    }
}

/// Lookups by name in a list of tensors, e.g. the outputs of a BLS call.
pub trait TensorsExt {
    /// The tensor with this name, or a `not-found` error.
    fn named(&self, name: &str) -> Result<&Tensor, Error>;
    /// Removes and returns the tensor with this name, or a `not-found` error.
    fn take_named(&mut self, name: &str) -> Result<Tensor, Error>;
}

impl TensorsExt for Vec<Tensor> {
    fn named(&self, name: &str) -> Result<&Tensor, Error> {
        self.iter()
            .find(|t| t.name() == name)
            .ok_or_else(|| Error::not_found(format!("no tensor named '{name}'")))
    }

    fn take_named(&mut self, name: &str) -> Result<Tensor, Error> {
        let i = self
            .iter()
            .position(|t| t.name() == name)
            .ok_or_else(|| Error::not_found(format!("no tensor named '{name}'")))?;
        Ok(self.swap_remove(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_elements_round_trip() {
        let encoded = encode_bytes_elements(&["ab", "", "ü"]).unwrap();
        assert_eq!(
            encoded,
            [2, 0, 0, 0, b'a', b'b', 0, 0, 0, 0, 2, 0, 0, 0, 0xc3, 0xbc]
        );
        let decoded = decode_bytes_elements(&encoded).unwrap();
        assert_eq!(
            decoded,
            [b"ab".to_vec(), Vec::new(), "ü".as_bytes().to_vec()]
        );
    }

    #[test]
    fn truncated_bytes_are_invalid_arg() {
        let e = decode_bytes_elements(&[5, 0, 0, 0, b'x']).unwrap_err();
        assert!(e.code == crate::ErrorCode::InvalidArg, "{e:?}");
        assert!(decode_bytes_elements(&[1, 0]).is_err());
    }

    #[test]
    fn elements_are_little_endian() {
        let mut out = Vec::new();
        1.5f32.put(&mut out);
        (-2i64).put(&mut out);
        true.put(&mut out);
        assert_eq!(&out[..4], &1.5f32.to_le_bytes());
        assert_eq!(i64::get(&out[4..12]), -2);
        assert!(bool::get(&out[12..]));
    }

    #[test]
    fn element_counts() {
        assert_eq!(element_count(&[2, 3]).unwrap(), 6);
        assert_eq!(element_count(&[]).unwrap(), 1);
        assert!(element_count(&[-1, 3]).is_err());
        assert!(check_len("T", &[2, 2], 3).is_err());
    }
}
