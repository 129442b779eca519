//! ONNX string tensors as byte strings. The `ort` crate goes through C strings on the way in (a NUL
//! byte inside an element is refused) and through `String` on the way out (non-UTF-8 is refused).
//! Triton's BYTES elements are arbitrary bytes, so both directions here use ONNX Runtime's
//! length-carrying calls: `GetResizedStringTensorElementBuffer` to write an element of any bytes,
//! `GetStringTensorContent` (contents plus offsets) to read them back.
#![allow(unsafe_code)]

use ort::AsPointer;
use ort::value::{DynValue, Tensor as OrtTensor};

use super::status::check;
use crate::error::{CoreError, CoreResult};

/// A string tensor of `shape` holding `elements` byte for byte (NUL and non-UTF-8 bytes included).
pub fn tensor_from_bytes<'a>(
    shape: Vec<i64>,
    elements: impl ExactSizeIterator<Item = &'a [u8]>,
) -> CoreResult<DynValue> {
    // Created with empty elements through the safe API, then each element resized and filled.
    let empty = vec![""; elements.len()];
    let mut value = OrtTensor::from_string_array((shape, &empty[..]))
        .map_err(|e| CoreError::internal(format!("failed to create a string tensor: {e}")))?
        .into_dyn();
    let api = ort::api();
    let ptr = value.ptr_mut();
    for (index, element) in elements.enumerate() {
        if element.is_empty() {
            continue;
        }
        let mut buffer: *mut std::ffi::c_char = std::ptr::null_mut();
        // SAFETY: `ptr` is a live string tensor with more than `index` elements; the call returns a
        // buffer of exactly `element.len()` bytes owned by the tensor, which we fill completely.
        unsafe {
            check((api.GetResizedStringTensorElementBuffer)(ptr, index, element.len(), &mut buffer), || {
                "ONNX Runtime failed to size a string".to_owned()
            })?;
            if buffer.is_null() {
                return Err(CoreError::internal("ONNX Runtime returned no buffer for a string element"));
            }
            std::ptr::copy_nonoverlapping(element.as_ptr(), buffer.cast::<u8>(), element.len());
        }
    }
    Ok(value)
}

/// The elements of a string tensor with `count` elements, as byte strings.
pub fn tensor_to_bytes(value: &DynValue, count: usize) -> CoreResult<Vec<Vec<u8>>> {
    let api = ort::api();
    let ptr = value.ptr();
    let mut total = 0usize;
    // SAFETY: `ptr` is a live tensor; ONNX Runtime checks it holds strings and writes `total`.
    check(unsafe { (api.GetStringTensorDataLength)(ptr, &mut total) }, || {
        "ONNX Runtime failed to read a string tensor's length".to_owned()
    })?;
    let mut contents = vec![0u8; total];
    let mut offsets = vec![0usize; count];
    if count > 0 {
        // SAFETY: both buffers have the lengths passed; ONNX Runtime checks them against the tensor.
        check(
            unsafe {
                (api.GetStringTensorContent)(ptr, contents.as_mut_ptr().cast(), total, offsets.as_mut_ptr(), count)
            },
            || "ONNX Runtime failed to read a string tensor".to_owned(),
        )?;
    }
    let mut elements = Vec::with_capacity(count);
    for (i, &start) in offsets.iter().enumerate() {
        let end = offsets.get(i + 1).copied().unwrap_or(total);
        let element = contents
            .get(start..end)
            .ok_or_else(|| CoreError::internal("ONNX Runtime returned string offsets outside the tensor"))?;
        elements.push(element.to_vec());
    }
    Ok(elements)
}
