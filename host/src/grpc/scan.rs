//! Scanning a `ModelInferRequest`'s wire format, without decoding it: its counts of inputs,
//! outputs and parameters (bounded before anything is allocated for them) and what decoding it
//! will allocate beyond its own bytes (charged to the budget first). See `limits.rs`.

use crate::limits::{MAX_INPUTS, MAX_OUTPUTS, MAX_PARAMETERS};
use tonic::Status;

/// What a `ModelInferRequest`'s wire bytes say about decoding it: its counts, and the bytes
/// decoding allocates beyond the message's own (vector and map entries; an overestimate).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct InferRequestShape {
    pub inputs: usize,
    pub outputs: usize,
    pub decoded_extra: usize,
}

/// Bytes a decoded map entry, input, output or `bytes` element costs besides its own bytes
/// (generous: struct sizes plus growth of the vectors and maps that hold them).
const PER_PARAMETER: usize = 128;
const PER_TENSOR: usize = 512;
const PER_BYTES_ELEMENT: usize = 64;

/// Why a scan refused a message.
#[derive(Debug, PartialEq, Eq)]
pub enum ScanError {
    /// Not protobuf: answered as a failed decode is (INTERNAL, as Triton's gRPC core does).
    Malformed,
    /// Past one of this server's bounds (INVALID_ARGUMENT).
    TooMany(String),
}

impl ScanError {
    pub(super) fn status(self) -> Status {
        match self {
            Self::Malformed => {
                Status::internal("failed to decode Protobuf message: buffer underflow or invalid wire format")
            }
            Self::TooMany(message) => Status::invalid_argument(message),
        }
    }
}

/// Scans a `ModelInferRequest` (field numbers from grpc_service.proto) without decoding it.
pub fn scan_infer_request(message: &[u8]) -> Result<InferRequestShape, ScanError> {
    let mut shape = InferRequestShape::default();
    let mut parameters = 0usize;
    for field in Fields(message) {
        let field = field?;
        match (field.number, field.value) {
            (4, Value::Bytes(_)) => {
                parameters += 1;
                shape.decoded_extra += PER_PARAMETER;
            }
            (5, Value::Bytes(input)) => {
                shape.inputs += 1;
                shape.decoded_extra += PER_TENSOR + scan_tensor(input, 4, Some(3), Some(5))?;
            }
            (6, Value::Bytes(output)) => {
                shape.outputs += 1;
                shape.decoded_extra += PER_TENSOR + scan_tensor(output, 2, None, None)?;
            }
            (7, Value::Bytes(_)) => shape.decoded_extra += PER_BYTES_ELEMENT,
            _ => {}
        }
    }
    if shape.inputs > MAX_INPUTS {
        return Err(ScanError::TooMany(format!("the request has more than {MAX_INPUTS} inputs (this server's limit)")));
    }
    if shape.outputs > MAX_OUTPUTS {
        return Err(ScanError::TooMany(format!(
            "the request has more than {MAX_OUTPUTS} requested outputs (this server's limit)"
        )));
    }
    if parameters > MAX_PARAMETERS {
        return Err(ScanError::TooMany(format!(
            "the request has more than {MAX_PARAMETERS} parameters (this server's limit)"
        )));
    }
    Ok(shape)
}

/// Extra decoded bytes of one input or output tensor message: its parameters (field
/// `parameters_field`, bounded by [`MAX_PARAMETERS`]), its shape (packed or not) and its typed
/// contents.
fn scan_tensor(
    message: &[u8],
    parameters_field: u32,
    shape_field: Option<u32>,
    contents_field: Option<u32>,
) -> Result<usize, ScanError> {
    let mut extra = 0usize;
    let mut parameters = 0usize;
    for field in Fields(message) {
        let field = field?;
        if field.number == parameters_field {
            parameters += 1;
            extra += PER_PARAMETER;
        } else if Some(field.number) == shape_field {
            extra += repeated_scalar_bytes(&field.value, 8);
        } else if Some(field.number) == contents_field
            && let Value::Bytes(contents) = field.value
        {
            extra += scan_contents(contents)?;
        }
    }
    if parameters > MAX_PARAMETERS {
        return Err(ScanError::TooMany(format!(
            "a tensor of the request has more than {MAX_PARAMETERS} parameters (this server's limit)"
        )));
    }
    Ok(extra)
}

/// Decoded bytes of `InferTensorContents`: every repeated field's elements at their in-memory
/// size, twice over for vector growth.
fn scan_contents(message: &[u8]) -> Result<usize, ScanError> {
    let mut extra = 0usize;
    for field in Fields(message) {
        let field = field?;
        extra += match field.number {
            1 => repeated_scalar_bytes(&field.value, 1),
            2 | 4 | 6 => repeated_scalar_bytes(&field.value, 4),
            3 | 5 | 7 => repeated_scalar_bytes(&field.value, 8),
            8 => PER_BYTES_ELEMENT,
            _ => 0,
        };
    }
    Ok(extra)
}

/// In-memory bytes (twice over, for vector growth) of the elements one occurrence of a repeated
/// scalar field holds: a packed run counts its varints (or fixed-width values), a lone value one.
fn repeated_scalar_bytes(value: &Value<'_>, size: usize) -> usize {
    let elements = match value {
        // Varints end at bytes without the continuation bit; fixed-width values are shorter
        // than that count, so it bounds both.
        Value::Bytes(packed) => packed.iter().filter(|b| **b < 0x80).count(),
        Value::Scalar => 1,
    };
    elements.saturating_mul(size).saturating_mul(2)
}

/// Deepest nesting of groups a message may have (prost's recursion limit).
const MAX_GROUP_DEPTH: usize = 100;

/// A field's payload: length-delimited bytes, or any other wire type.
enum Value<'a> {
    Bytes(&'a [u8]),
    Scalar,
}

struct Field<'a> {
    number: u32,
    value: Value<'a>,
}

/// The fields of a protobuf message, in order, read from its wire format.
struct Fields<'a>(&'a [u8]);

impl<'a> Iterator for Fields<'a> {
    type Item = Result<Field<'a>, ScanError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.0.is_empty() {
            return None;
        }
        let result = self.read_field();
        if result.is_err() {
            self.0 = &[];
        }
        Some(result)
    }
}

impl<'a> Fields<'a> {
    fn varint(&mut self) -> Result<u64, ScanError> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let Some((&byte, rest)) = self.0.split_first() else {
                return Err(ScanError::Malformed);
            };
            self.0 = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return Ok(value);
            }
        }
        Err(ScanError::Malformed)
    }

    fn skip(&mut self, n: usize) -> Result<&'a [u8], ScanError> {
        if self.0.len() < n {
            return Err(ScanError::Malformed);
        }
        let (taken, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(taken)
    }

    fn read_field(&mut self) -> Result<Field<'a>, ScanError> {
        let key = self.varint()?;
        let number = u32::try_from(key >> 3).map_err(|_| ScanError::Malformed)?;
        let value = match key & 7 {
            0 => {
                self.varint()?;
                Value::Scalar
            }
            1 => {
                self.skip(8)?;
                Value::Scalar
            }
            2 => {
                let len = usize::try_from(self.varint()?).map_err(|_| ScanError::Malformed)?;
                Value::Bytes(self.skip(len)?)
            }
            5 => {
                self.skip(4)?;
                Value::Scalar
            }
            3 => {
                self.skip_group(number)?;
                Value::Scalar
            }
            // An end-group without its start, or a wire type that does not exist.
            _ => return Err(ScanError::Malformed),
        };
        Ok(Field { number, value })
    }

    /// Skips a (deprecated, but valid) group up to its end-group key, as decoders skip unknown
    /// groups; nested at most [`MAX_GROUP_DEPTH`] deep, as prost's recursion limit bounds them.
    fn skip_group(&mut self, number: u32) -> Result<(), ScanError> {
        let mut open = vec![number];
        while let Some(&innermost) = open.last() {
            let key = self.varint()?;
            let inner = u32::try_from(key >> 3).map_err(|_| ScanError::Malformed)?;
            match key & 7 {
                0 => drop(self.varint()?),
                1 => drop(self.skip(8)?),
                2 => {
                    let len = usize::try_from(self.varint()?).map_err(|_| ScanError::Malformed)?;
                    self.skip(len)?;
                }
                5 => drop(self.skip(4)?),
                3 if open.len() < MAX_GROUP_DEPTH => open.push(inner),
                4 if inner == innermost => drop(open.pop()),
                _ => return Err(ScanError::Malformed),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use prost::Message;

    use super::*;
    use crate::proto::inference as pb;

    fn input(name: &str) -> pb::model_infer_request::InferInputTensor {
        pb::model_infer_request::InferInputTensor {
            name: name.into(),
            datatype: "BYTES".into(),
            shape: vec![3],
            ..Default::default()
        }
    }

    #[test]
    fn counts_and_decoded_size_are_read_without_decoding() {
        let mut request = pb::ModelInferRequest {
            model_name: "m".into(),
            inputs: vec![input("a"), input("b")],
            ..Default::default()
        };
        request.inputs[0].contents =
            Some(pb::InferTensorContents { bytes_contents: vec![vec![1], vec![], vec![2]], ..Default::default() });
        request.raw_input_contents = vec![Bytes::from_static(b"xyz")];
        let shape = scan_infer_request(&request.encode_to_vec()).unwrap();
        assert_eq!((shape.inputs, shape.outputs), (2, 0));
        // Two tensors, two shapes of one element, three bytes elements, one raw entry.
        assert_eq!(shape.decoded_extra, 2 * PER_TENSOR + 2 * 16 + 3 * PER_BYTES_ELEMENT + PER_BYTES_ELEMENT);
    }

    #[test]
    fn too_many_inputs_or_parameters_are_refused_before_decoding() {
        let request = pb::ModelInferRequest {
            inputs: (0..=MAX_INPUTS).map(|i| input(&i.to_string())).collect(),
            ..Default::default()
        };
        let error = scan_infer_request(&request.encode_to_vec()).err().unwrap();
        assert!(matches!(&error, ScanError::TooMany(m) if m.contains("more than 4096 inputs")), "{error:?}");
        let mut one = input("x");
        one.parameters = (0..=MAX_PARAMETERS).map(|i| (i.to_string(), pb::InferParameter::default())).collect();
        let request = pb::ModelInferRequest { inputs: vec![one], ..Default::default() };
        let error = scan_infer_request(&request.encode_to_vec()).err().unwrap();
        assert!(matches!(&error, ScanError::TooMany(m) if m.contains("more than 1024 parameters")), "{error:?}");
    }

    #[test]
    fn a_packed_run_of_one_byte_varints_is_charged_at_its_decoded_size() {
        let mut one = input("x");
        one.contents = Some(pb::InferTensorContents { int64_contents: vec![0; 1000], ..Default::default() });
        let request = pb::ModelInferRequest { inputs: vec![one], ..Default::default() };
        let shape = scan_infer_request(&request.encode_to_vec()).unwrap();
        assert!(shape.decoded_extra >= 8 * 1000, "{shape:?}");
    }

    #[test]
    fn malformed_bytes_are_an_error_not_a_panic() {
        for bytes in [&[0x2a, 0x05, 1][..], &[0xff; 11][..], &[0x0b][..], &[0x2a][..]] {
            assert_eq!(scan_infer_request(bytes).err(), Some(ScanError::Malformed), "{bytes:?}");
        }
    }
}
