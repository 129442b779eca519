//! The session call of a CPU model whose inputs and outputs are all plain numbers, made through
//! ONNX Runtime's C API directly.
//!
//! The `ort` crate's general path costs about as much as a tiny model's run itself: per call it
//! copies every input into a new buffer, turns names into C strings, builds a `ValueType` (with
//! symbolic dimension names) for every output of the graph, and reads each output's type again
//! to extract it: a large share of a tiny model's execution. Here the request's bytes are lent to ONNX
//! Runtime as they are (little-endian numbers, already checked against the config; copied only
//! when misaligned for their type), names are made once per instance, only the requested outputs
//! are asked for, and each output is read with one call that borrows its type and shape.
//!
//! BOOL (a byte that must be 0 or 1 for ONNX Runtime) and BYTES (string tensors) models, and GPU
//! sessions, keep the `ort` path.
#![allow(unsafe_code)]

use std::ffi::{CString, c_char, c_void};
use std::ptr;

use ort::AsPointer;
use ort::memory::{AllocationDevice, AllocatorType, MemoryInfo, MemoryType};
use ort::session::Session;
use ort::sys::{ONNXTensorElementDataType as Onnx, OrtValue};

use super::status::check;
use crate::backend::ExecRequest;
use crate::error::{CoreError, CoreResult};
use crate::tensor::{DataType, Tensor};

/// Names made once, and the memory description every borrowed input is created with.
pub struct DirectRun {
    inputs: Vec<(String, CString)>,
    outputs: Vec<(String, CString)>,
    cpu: MemoryInfo<'static>,
}

impl DirectRun {
    /// For a CPU session whose inputs and outputs (`(name, datatype)`) all have a plain numeric
    /// type; `None` otherwise, or when a name cannot be a C string.
    pub fn new<'a>(
        inputs: impl IntoIterator<Item = (&'a str, DataType)>,
        outputs: impl IntoIterator<Item = (&'a str, DataType)>,
    ) -> Option<Self> {
        if cfg!(target_endian = "big") {
            return None;
        }
        let inputs = plain_names(inputs)?;
        let outputs = plain_names(outputs)?;
        let cpu = MemoryInfo::new(AllocationDevice::CPU, 0, AllocatorType::Device, MemoryType::Default).ok()?;
        Some(Self { inputs, outputs, cpu })
    }

    /// Runs `session` on the request's inputs and returns its outputs, in the request's order.
    /// `None`, before any work, when this path cannot take the request: a tensor that is not one
    /// of the session's or not of a plain numeric type, or no output asked for.
    pub fn run(&self, session: &mut Session, request: &ExecRequest) -> Option<CoreResult<Vec<Tensor>>> {
        let mut input_names: Vec<*const c_char> = Vec::with_capacity(request.inputs.len());
        let mut input_types = Vec::with_capacity(request.inputs.len());
        for tensor in &request.inputs {
            input_names.push(find(&self.inputs, &tensor.name)?.as_ptr());
            input_types.push(element_type(tensor.datatype)?);
        }
        let output_names: Vec<*const c_char> =
            request.outputs.iter().map(|name| find(&self.outputs, name).map(|c| c.as_ptr())).collect::<Option<_>>()?;
        if output_names.is_empty() {
            return None;
        }
        Some(self.run_named(session, request, &input_names, &input_types, &output_names))
    }

    /// [`Self::run`] once every name and type is known.
    fn run_named(
        &self,
        session: &mut Session,
        request: &ExecRequest,
        input_names: &[*const c_char],
        input_types: &[Onnx],
        output_names: &[*const c_char],
    ) -> CoreResult<Vec<Tensor>> {
        let api = ort::api();
        // Aligned copies of misaligned inputs. Declared before `inputs`, so that on every path the
        // values borrowing them are released first.
        let mut copies: Vec<Vec<u64>> = Vec::new();
        let mut inputs = Values(Vec::with_capacity(request.inputs.len()));
        for (tensor, &ty) in request.inputs.iter().zip(input_types) {
            let bytes: &[u8] = &tensor.data;
            let mut data = bytes.as_ptr();
            if data.align_offset(tensor.datatype.element_size().unwrap_or(1)) != 0 {
                let mut copy = vec![0u64; bytes.len().div_ceil(8)];
                let target = copy.as_mut_ptr().cast::<u8>();
                // SAFETY: `copy` holds at least `bytes.len()` bytes; the two do not overlap.
                unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), target, bytes.len()) };
                data = target;
                copies.push(copy);
            }
            let mut value: *mut OrtValue = ptr::null_mut();
            // SAFETY: `data` points at `bytes.len()` readable bytes (the request's, or a copy in
            // `copies`) that outlive the value: both are dropped after `inputs`. ONNX Runtime
            // refuses a buffer shorter than the shape needs, and never writes to an input.
            check(
                unsafe {
                    (api.CreateTensorWithDataAsOrtValue)(
                        self.cpu.ptr(),
                        data.cast_mut().cast::<c_void>(),
                        bytes.len(),
                        tensor.shape.as_ptr(),
                        tensor.shape.len(),
                        ty,
                        &mut value,
                    )
                },
                || format!("failed to create ONNX tensor for input '{}'", tensor.name),
            )
            // As the `ort` path answers (the request's shape and bytes are checked before this).
            .map_err(|e| CoreError::invalid_arg(e.message))?;
            inputs.0.push(value);
        }
        let mut outputs = Values(vec![ptr::null_mut(); output_names.len()]);
        // SAFETY: the name and value arrays have the lengths passed and live across the call; the
        // session is ours (`&mut`); ONNX Runtime fills `outputs` with values we then own.
        check(
            unsafe {
                (api.Run)(
                    session.ptr().cast_mut(),
                    ptr::null(),
                    input_names.as_ptr(),
                    inputs.0.as_ptr().cast::<*const OrtValue>(),
                    inputs.0.len(),
                    output_names.as_ptr(),
                    output_names.len(),
                    outputs.0.as_mut_ptr(),
                )
            },
            || "onnxruntime execution failure".to_owned(),
        )?;
        // Read before the inputs go: an output may share an input's buffer (a graph passing an
        // input through).
        let tensors =
            request.outputs.iter().zip(outputs.0.iter()).map(|(name, &value)| read_output(name, value)).collect();
        drop(outputs);
        drop(inputs);
        drop(copies);
        tensors
    }
}

/// Each `(name, datatype)` with its C string; `None` when a datatype is not plain or a name
/// cannot be a C string.
fn plain_names<'a>(list: impl IntoIterator<Item = (&'a str, DataType)>) -> Option<Vec<(String, CString)>> {
    list.into_iter()
        .map(|(name, datatype)| {
            element_type(datatype)?;
            Some((name.to_owned(), CString::new(name).ok()?))
        })
        .collect()
}

fn find<'a>(names: &'a [(String, CString)], name: &str) -> Option<&'a CString> {
    names.iter().find(|(n, _)| n == name).map(|(_, c)| c)
}

/// Copies one output of a finished run into a tensor.
fn read_output(name: &str, value: *mut OrtValue) -> CoreResult<Tensor> {
    let api = ort::api();
    if value.is_null() {
        return Err(CoreError::internal(format!("model did not produce output '{name}'")));
    }
    // Read as a plain integer: a type number a newer ONNX Runtime adds must not land in the enum.
    let mut ty: i32 = 0;
    let mut dims: *const i64 = ptr::null();
    let mut rank = 0usize;
    // SAFETY: `value` is a live value from the run; the shape it lends lives as long as it does.
    // The element type is an `i32`-sized C enum, written through a pointer to an `i32`.
    check(
        unsafe {
            (api.GetTensorElementTypeAndShapeDataReference)(value, (&raw mut ty).cast::<Onnx>(), &mut dims, &mut rank)
        },
        || format!("failed to read output '{name}'"),
    )?;
    let shape: Vec<i64> = match (rank, dims.is_null()) {
        (0, _) => Vec::new(),
        // SAFETY: a non-null shape of `rank` dimensions, lent by the live value.
        (_, false) => unsafe { std::slice::from_raw_parts(dims, rank) }.to_vec(),
        (_, true) => return Err(CoreError::internal(format!("ONNX Runtime returned no shape for output '{name}'"))),
    };
    let datatype = datatype(ty)
        .ok_or_else(|| CoreError::internal(format!("output '{name}' has unsupported element type {ty}")))?;
    let elements = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(usize::try_from(d).ok()?));
    let len = elements
        .and_then(|n| n.checked_mul(datatype.element_size().unwrap_or(1)))
        .ok_or_else(|| CoreError::internal(format!("output '{name}' has an invalid shape {shape:?}")))?;
    let mut data: *mut c_void = ptr::null_mut();
    // SAFETY: as above; for a numeric tensor the data holds `len` bytes (elements x size).
    check(unsafe { (api.GetTensorMutableData)(value, &mut data) }, || format!("failed to read output '{name}'"))?;
    let bytes = if len == 0 {
        Vec::new()
    } else if data.is_null() {
        return Err(CoreError::internal(format!("ONNX Runtime returned no data for output '{name}'")));
    } else {
        // SAFETY: the tensor's data, `len` bytes (its elements times their size), alive with it.
        unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) }.to_vec()
    };
    Tensor::new(name, datatype, shape, bytes::Bytes::from(bytes))
}

/// Values created or returned by one run, released when dropped.
struct Values(Vec<*mut OrtValue>);

impl Drop for Values {
    fn drop(&mut self) {
        let api = ort::api();
        for &value in &self.0 {
            if !value.is_null() {
                // SAFETY: each non-null value is ours and released once.
                unsafe { (api.ReleaseValue)(value) };
            }
        }
    }
}

/// ONNX Runtime's element type for a plain numeric datatype (not BOOL, not BYTES).
fn element_type(datatype: DataType) -> Option<Onnx> {
    Some(match datatype {
        DataType::Uint8 => Onnx::ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8,
        DataType::Int8 => Onnx::ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8,
        DataType::Uint16 => Onnx::ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16,
        DataType::Int16 => Onnx::ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16,
        DataType::Uint32 => Onnx::ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32,
        DataType::Int32 => Onnx::ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32,
        DataType::Uint64 => Onnx::ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64,
        DataType::Int64 => Onnx::ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64,
        DataType::Fp16 => Onnx::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16,
        DataType::Bf16 => Onnx::ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16,
        DataType::Fp32 => Onnx::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT,
        DataType::Fp64 => Onnx::ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE,
        DataType::Bool | DataType::Bytes => return None,
    })
}

/// The plain numeric datatype of an ONNX Runtime element type number.
fn datatype(ty: i32) -> Option<DataType> {
    DataType::ALL.into_iter().find(|&d| element_type(d).is_some_and(|e| e as i32 == ty))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_plain_datatype_maps_to_its_own_onnx_type_and_back() {
        let plain: Vec<DataType> =
            ["UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "UINT64", "INT64", "FP16", "BF16", "FP32", "FP64"]
                .into_iter()
                .filter_map(DataType::from_protocol)
                .collect();
        assert_eq!(plain.len(), 12);
        for d in plain {
            let ty = element_type(d).map(|e| e as i32);
            assert_eq!(ty.and_then(datatype), Some(d), "{d:?}");
        }
        // Left to the `ort` path.
        assert_eq!(element_type(DataType::Bool), None);
        assert_eq!(element_type(DataType::Bytes), None);
        assert_eq!(datatype(Onnx::ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL as i32), None);
        assert_eq!(datatype(Onnx::ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING as i32), None);
        // FP32 is 1, FP16 10, BF16 16 in ONNX's numbering.
        assert_eq!(element_type(DataType::Fp32).map(|e| e as i32), Some(1));
        assert_eq!(element_type(DataType::Fp16).map(|e| e as i32), Some(10));
        assert_eq!(element_type(DataType::Bf16).map(|e| e as i32), Some(16));
    }
}
