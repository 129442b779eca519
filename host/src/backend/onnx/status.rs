//! ONNX Runtime's C API statuses as errors, for the calls made without the `ort` crate.
#![allow(unsafe_code)]

use crate::error::{CoreError, CoreResult};

/// Turns a non-null status into an error with ONNX Runtime's message (and frees the status).
pub fn check(status: ort::sys::OrtStatusPtr, what: impl FnOnce() -> String) -> CoreResult<()> {
    if status.0.is_null() {
        return Ok(());
    }
    let api = ort::api();
    // SAFETY: a non-null status returned by the API; its message lives until ReleaseStatus.
    let message = unsafe {
        let text = (api.GetErrorMessage)(status.0);
        let message = if text.is_null() {
            String::from("unknown error")
        } else {
            std::ffi::CStr::from_ptr(text).to_string_lossy().into_owned()
        };
        (api.ReleaseStatus)(status.0);
        message
    };
    Err(CoreError::internal(format!("{}: {message}", what())))
}
