//! GPUs: discovery through the CUDA driver API (cudarc, with libcuda opened at run time), the CUDA
//! IPC regions behind the CUDA shared-memory extension ([`ipc`]) and NVML metrics ([`metrics`]).
//!
//! Nothing here needs a GPU to exist: without libcuda (or with no device) [`devices`] is empty,
//! KIND_GPU configs are refused at load, CUDA shared-memory registration fails as Triton's does,
//! and no GPU metric is exported. `CUDA_VISIBLE_DEVICES` is honoured by the driver itself.

// The driver API is C: every call here is `unsafe`, each one justified where it is made.
#![allow(unsafe_code)]

pub mod ipc;
pub mod metrics;

use std::ffi::CString;
use std::sync::OnceLock;

use cudarc::driver::{result as cu, sys};

/// One CUDA device visible to this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuDevice {
    /// The CUDA ordinal (what `gpus: [ ... ]` in an instance group names).
    pub id: u32,
    pub name: String,
    /// `GPU-xxxxxxxx-xxxx-...`, as nvidia-smi and Triton's `gpu_uuid` label print it.
    pub uuid: String,
    pub total_memory: u64,
}

static DEVICES: OnceLock<Vec<GpuDevice>> = OnceLock::new();

/// The GPUs this server can use (detected once; empty where there is no driver or device).
pub fn devices() -> &'static [GpuDevice] {
    DEVICES.get_or_init(|| match detect() {
        Ok(found) => {
            for d in &found {
                tracing::info!(id = d.id, name = d.name.as_str(), uuid = d.uuid.as_str(), "GPU found");
            }
            found
        }
        Err(reason) => {
            tracing::info!("no GPU: {reason}");
            Vec::new()
        }
    })
}

/// The device ids, for configs that name none (`KIND_GPU` without `gpus`).
pub fn device_ids() -> Vec<u32> {
    devices().iter().map(|d| d.id).collect()
}

/// Initialises the driver API once; an error says why CUDA cannot be used here.
pub(crate) fn driver() -> Result<(), String> {
    static INIT: OnceLock<Result<(), String>> = OnceLock::new();
    INIT.get_or_init(|| {
        // SAFETY: only probes whether libcuda can be opened; nothing else is called when it cannot
        // (calling a driver function without the library would panic in cudarc's loader).
        if !unsafe { sys::is_culib_present() } {
            return Err("the CUDA driver library (libcuda.so) is not present".into());
        }
        cu::init().map_err(|e| format!("cuInit failed: {e}"))
    })
    .clone()
}

fn detect() -> Result<Vec<GpuDevice>, String> {
    driver()?;
    let count = cu::device::get_count().map_err(|e| format!("cuDeviceGetCount failed: {e}"))?;
    let mut found = Vec::new();
    for ordinal in 0..count {
        let dev = cu::device::get(ordinal).map_err(|e| format!("cuDeviceGet({ordinal}) failed: {e}"))?;
        let name = cu::device::get_name(dev).unwrap_or_else(|_| "unknown".into());
        let uuid = cu::device::get_uuid(dev).map(|u| format_uuid(&u.bytes)).unwrap_or_default();
        // SAFETY: `dev` was returned by cuDeviceGet above.
        let total_memory = unsafe { cu::device::total_mem(dev) }.unwrap_or(0) as u64;
        found.push(GpuDevice { id: ordinal.unsigned_abs(), name, uuid, total_memory });
    }
    Ok(found)
}

fn format_uuid(bytes: &[std::ffi::c_char; 16]) -> String {
    let b: Vec<u8> = bytes.iter().map(|&c| c as u8).collect();
    let hex = |r: std::ops::Range<usize>| b[r].iter().map(|x| format!("{x:02x}")).collect::<String>();
    format!("GPU-{}-{}-{}-{}-{}", hex(0..4), hex(4..6), hex(6..8), hex(8..10), hex(10..16))
}

/// Opens a shared library with RTLD_GLOBAL, so that what it registers at load (libtorch's CUDA
/// device hooks) becomes visible to libraries already loaded. The handle is kept for the process.
pub fn dlopen_global(name: &str) -> Result<(), String> {
    let c_name = CString::new(name).map_err(|_| format!("invalid library name {name:?}"))?;
    // SAFETY: dlopen with a valid C string; the handle is intentionally never closed.
    let handle = unsafe { libc::dlopen(c_name.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if handle.is_null() {
        // SAFETY: dlerror returns a thread-local C string (or null) describing the last failure.
        let err = unsafe { libc::dlerror() };
        let reason = if err.is_null() {
            "unknown error".to_string()
        } else {
            // SAFETY: non-null pointer from dlerror points to a NUL-terminated string.
            unsafe { std::ffi::CStr::from_ptr(err) }.to_string_lossy().into_owned()
        };
        return Err(reason);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_is_formatted_like_nvidia_smi() {
        let raw = [0x12u8, 0x34, 0x56, 0x78, 0x9a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15]
            .map(|v| v as std::ffi::c_char);
        assert_eq!(format_uuid(&raw), "GPU-12345678-9a0b-0c0d-0e0f-101112131415");
    }

    #[test]
    fn detection_never_fails_the_process() {
        // On a machine without a driver this is empty; with one, ids are 0..n.
        let ids = device_ids();
        assert!(ids.iter().enumerate().all(|(i, &id)| id as usize == i));
    }
}
