//! CUDA IPC memory: the device buffers clients register with the CUDA shared-memory extension
//! (tritonclient's `cuda_shared_memory` hands over a `cudaIpcMemHandle_t`, 64 bytes).
//!
//! A region is opened once at registration (`cuIpcOpenMemHandle` in the device's primary
//! context) and closed when the last request using it is done. Tensor bytes move with synchronous
//! `cuMemcpyHtoD`/`cuMemcpyDtoH` copies, so the client sees outputs as soon as the response
//! arrives, as with Triton.

#![allow(unsafe_code)]

use bytes::Bytes;
use cudarc::driver::sys;

/// Size of `cudaIpcMemHandle_t` / `CUipcMemHandle`.
pub const IPC_HANDLE_SIZE: usize = 64;

/// An opened CUDA IPC allocation of `byte_size` bytes on device `device_id`.
#[derive(Debug)]
pub struct CudaMemory {
    pub device_id: i64,
    pub byte_size: u64,
    context: sys::CUcontext,
    base: sys::CUdeviceptr,
}

// SAFETY: the fields are a driver context handle and a device address, both plain values valid
// in any thread; every use makes the context current on the calling thread first.
unsafe impl Send for CudaMemory {}
// SAFETY: as above; the driver API is thread-safe and copies do not mutate this struct.
unsafe impl Sync for CudaMemory {}

fn driver_error(what: &str, code: sys::CUresult) -> String {
    let text = cudarc::driver::DriverError(code).error_string().map(|s| s.to_string_lossy().into_owned());
    format!("{what}: {}", text.unwrap_or_else(|_| format!("{code:?}")))
}

fn check(what: &str, code: sys::CUresult) -> Result<(), String> {
    if code == sys::CUresult::CUDA_SUCCESS { Ok(()) } else { Err(driver_error(what, code)) }
}

impl CudaMemory {
    /// Opens a client's IPC handle on `device_id`. Errors are Triton's texts ("failed to open CUDA
    /// IPC handle: <driver message>").
    pub fn open(raw_handle: &[u8], device_id: i64, byte_size: u64) -> Result<Self, String> {
        if super::devices().is_empty() {
            // cudarc's loader panics when a driver function is called without libcuda: never call
            // one here. (The shared-memory manager answers this case with Triton's message first.)
            return Err("failed to open CUDA IPC handle: no CUDA-capable device is detected".into());
        }
        let handle_bytes: [u8; IPC_HANDLE_SIZE] =
            raw_handle.try_into().map_err(|_| "failed to open CUDA IPC handle: invalid argument".to_string())?;
        let ordinal = i32::try_from(device_id).map_err(|_| "failed to open CUDA IPC handle: invalid device ordinal")?;
        let dev =
            cudarc::driver::result::device::get(ordinal).map_err(|e| format!("failed to open CUDA IPC handle: {e}"))?;
        let mut context: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: `dev` comes from cuDeviceGet; the out-pointer is valid. The primary context is
        // retained for the life of this region and released in Drop.
        check("failed to open CUDA IPC handle", unsafe { sys::cuDevicePrimaryCtxRetain(&mut context, dev) })?;
        let mut handle = sys::CUipcMemHandle { reserved: [0; IPC_HANDLE_SIZE] };
        for (dst, src) in handle.reserved.iter_mut().zip(handle_bytes) {
            *dst = src as std::ffi::c_char;
        }
        let mut base: sys::CUdeviceptr = 0;
        // SAFETY: the context was just retained; `handle` is a by-value copy of the client's bytes,
        // which the driver validates (an invalid handle is an error code, not UB).
        let opened = unsafe {
            check("failed to open CUDA IPC handle", sys::cuCtxSetCurrent(context)).and_then(|()| {
                check(
                    "failed to open CUDA IPC handle",
                    sys::cuIpcOpenMemHandle_v2(
                        &mut base,
                        handle,
                        sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as std::ffi::c_uint,
                    ),
                )
            })
        };
        if let Err(e) = opened {
            // SAFETY: releases the retain above.
            unsafe { sys::cuDevicePrimaryCtxRelease_v2(dev) };
            return Err(e);
        }
        Ok(Self { device_id, byte_size, context, base })
    }

    /// The device address of the allocation (identifies it across region names).
    pub fn address(&self) -> u64 {
        self.base
    }

    fn current(&self) -> Result<(), String> {
        // SAFETY: the context is retained by this region until Drop.
        check("failed to set the CUDA context", unsafe { sys::cuCtxSetCurrent(self.context) })
    }

    /// Copies `len` bytes at `offset` (already bounds-checked by the caller) to the host.
    pub fn read(&self, offset: u64, len: usize) -> Result<Bytes, String> {
        self.current()?;
        let mut buf = vec![0u8; len];
        if len > 0 {
            // SAFETY: `[base + offset, + len)` lies inside the opened allocation (checked by the
            // shared-memory manager against byte_size); `buf` has `len` writable bytes.
            check("failed to copy from CUDA shared memory", unsafe {
                sys::cuMemcpyDtoH_v2(buf.as_mut_ptr().cast(), self.base + offset, len)
            })?;
        }
        Ok(Bytes::from(buf))
    }

    /// Copies `data` to `offset` (already bounds-checked by the caller) on the device.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), String> {
        self.current()?;
        if data.is_empty() {
            return Ok(());
        }
        // SAFETY: the destination range lies inside the opened allocation (checked by the caller);
        // `data` is a valid host slice.
        check("failed to copy to CUDA shared memory", unsafe {
            sys::cuMemcpyHtoD_v2(self.base + offset, data.as_ptr().cast(), data.len())
        })
    }
}

impl Drop for CudaMemory {
    fn drop(&mut self) {
        // SAFETY: `base` was opened by cuIpcOpenMemHandle in `context`, which is still retained.
        unsafe {
            if self.current().is_ok() {
                sys::cuIpcCloseMemHandle(self.base);
            }
            if let Ok(dev) = cudarc::driver::result::device::get(self.device_id as i32) {
                sys::cuDevicePrimaryCtxRelease_v2(dev);
            }
        }
    }
}
