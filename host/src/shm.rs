//! Triton's system shared memory extension: clients register named POSIX shared-memory regions
//! (`shm_open` keys such as `/input_data`), then point request inputs and outputs at byte ranges
//! of them instead of sending tensor bytes over the socket.
//!
//! A region is opened once at registration and kept as an open file descriptor on
//! `/dev/shm/<key>`; tensor bytes are moved with `pread`/`pwrite` on it. That keeps this module free
//! of `unsafe` (no `mmap` aliasing a buffer other processes write to) and makes unregistering a
//! region that a request is still using safe: the request holds its own `Arc<Region>`, so the
//! descriptor stays valid until that request is done, and the client's later `shm_unlink` only
//! removes the name.
//!
//! CUDA shared memory (the `cudasharedmemory` extension) shares the same table, as in Triton (a
//! name is unique across both kinds): a region is a client's CUDA IPC allocation opened with
//! [`crate::gpu::ipc::CudaMemory`], read and written with device copies. On a machine without a
//! GPU registration fails as Triton 2.51 does there ("failed to register shared memory region:
//! invalid args", 400 / INVALID_ARGUMENT, with the reason appended), status lists nothing and
//! unregister succeeds.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use bytes::Bytes;

use crate::error::{CoreError, CoreResult};
use crate::gpu::ipc::CudaMemory;
use crate::infer::{ParamValue, Parameters, ShmTarget};
use crate::tensor::DataType;

/// Where POSIX shared-memory objects live on Linux (`shm_open("/k")` is `/dev/shm/k`).
const SHM_DIR: &str = "/dev/shm";

/// The shared-memory parameters of a tensor over HTTP (`shared_memory_region`,
/// `shared_memory_offset`, `shared_memory_byte_size`) as a byte range, read as Triton's HTTP door
/// reads them: `None` without a region (an offset alone is ignored), a byte size of 0 when none
/// is given, and TritonJson's messages for values of the wrong type. (The gRPC door has its own
/// rules and words, in `grpc::codec`.)
pub fn parse_target(params: &Parameters) -> CoreResult<Option<ShmTarget>> {
    let not_a = |key: &str, kind: &str| {
        CoreError::internal(format!("Unable to parse '{key}': attempt to access JSON non-{kind} as {kind}"))
    };
    let region = match params.get("shared_memory_region") {
        None => return Ok(None),
        Some(ParamValue::String(s)) => s.clone(),
        Some(_) => return Err(not_a("shared_memory_region", "string")),
    };
    let uint = |key: &str| -> CoreResult<u64> {
        match params.get(key) {
            None => Ok(0),
            Some(ParamValue::Int(i)) => u64::try_from(*i).map_err(|_| not_a(key, "unsigned-integer")),
            Some(ParamValue::Uint(u)) => Ok(*u),
            Some(_) => Err(not_a(key, "unsigned-integer")),
        }
    };
    Ok(Some(ShmTarget { region, offset: uint("shared_memory_offset")?, byte_size: uint("shared_memory_byte_size")? }))
}

/// Triton's bounds check for a tensor's range in a region of `region_size` bytes. An empty range
/// at offset 0 fails as in Triton, whose end (`offset + byte_size - 1`) wraps there.
pub fn check_range(region: &str, region_size: u64, offset: u64, byte_size: u64) -> CoreResult<()> {
    if offset >= region_size {
        return Err(CoreError::invalid_arg(format!("Invalid offset for shared memory region: '{region}'")));
    }
    let inside = offset.checked_add(byte_size).is_some_and(|end| end <= region_size);
    if !inside || (byte_size == 0 && offset == 0) {
        return Err(CoreError::invalid_arg(format!("Invalid offset + byte size for shared memory region: '{region}'")));
    }
    Ok(())
}

/// An input whose bytes are in shared memory, as a door decoded it: described, not yet read.
/// The doors leave the reading to [`crate::frontend::Frontend`], which owns the registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShmInput {
    /// Where the tensor goes among the request's inputs (the index in the order the client sent them).
    pub position: usize,
    pub name: String,
    pub datatype: DataType,
    pub shape: Vec<i64>,
    pub target: ShmTarget,
}

/// One registered region: `byte_size` bytes starting at `offset` of the shared-memory object `key`
/// (for a CUDA region, `key` names the device allocation and `offset` is 0).
#[derive(Debug)]
pub struct Region {
    pub name: String,
    pub key: String,
    pub offset: u64,
    pub byte_size: u64,
    backing: Backing,
}

#[derive(Debug)]
enum Backing {
    System(File),
    Cuda(CudaMemory),
}

/// What the CUDA status endpoints report for a region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaRegionStatus {
    pub name: String,
    pub device_id: i64,
    pub byte_size: u64,
}

/// What the status endpoints report for a region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionStatus {
    pub name: String,
    pub key: String,
    pub offset: u64,
    pub byte_size: u64,
}

impl Region {
    fn status(&self) -> RegionStatus {
        RegionStatus { name: self.name.clone(), key: self.key.clone(), offset: self.offset, byte_size: self.byte_size }
    }

    /// Checks that `[offset, offset + len)` lies inside the region; returns the file offset.
    fn file_offset(&self, offset: u64, len: u64) -> CoreResult<u64> {
        check_range(&self.name, self.byte_size, offset, len)?;
        Ok(self.offset + offset)
    }

    fn is_cuda(&self) -> bool {
        matches!(self.backing, Backing::Cuda(_))
    }

    /// Copies `len` bytes at `offset` (relative to the region) out of shared memory.
    pub fn read(&self, offset: u64, len: u64, tensor: &str) -> CoreResult<Bytes> {
        let at = self.file_offset(offset, len)?;
        let len = usize::try_from(len).map_err(|_| CoreError::invalid_arg(format!("input '{tensor}' is too large")))?;
        let read = match &self.backing {
            Backing::System(file) => {
                let mut buf = vec![0u8; len];
                file.read_exact_at(&mut buf, at).map(|()| Bytes::from(buf)).map_err(|e| e.to_string())
            }
            Backing::Cuda(memory) => memory.read(at, len),
        };
        read.map_err(|e| self.copy_failed(&format!("read input '{tensor}' from"), &e))
    }

    /// Copies `data` into shared memory at `offset` (relative to the region).
    pub fn write(&self, offset: u64, data: &[u8], tensor: &str) -> CoreResult<()> {
        if data.is_empty() {
            return Ok(());
        }
        let at = self.file_offset(offset, data.len() as u64)?;
        let written = match &self.backing {
            Backing::System(file) => file.write_all_at(data, at).map_err(|e| e.to_string()),
            Backing::Cuda(memory) => memory.write(at, data),
        };
        written.map_err(|e| self.copy_failed(&format!("write output '{tensor}' to"), &e))
    }

    /// The error for a copy that failed: `failed to <copy> [CUDA ]shared memory region '<name>': <e>`.
    fn copy_failed(&self, copy: &str, e: &str) -> CoreError {
        let cuda = if self.is_cuda() { "CUDA " } else { "" };
        CoreError::internal(format!("failed to {copy} {cuda}shared memory region '{}': {e}", self.name))
    }
}

/// The registered system shared-memory regions of this server, by name.
#[derive(Debug, Default)]
pub struct SharedMemoryManager {
    regions: RwLock<BTreeMap<String, Arc<Region>>>,
    /// `--allow-client-shm`: off (Triton 2.7x's default), clients cannot register or unregister
    /// regions, so no request can name one.
    allow_client: bool,
}

/// Triton 2.7x's refusal while client shared memory is off.
const CLIENT_SHM_DISABLED: &str =
    "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable.";

/// Maps a `shm_open` key to its file, refusing keys that `shm_open` itself would refuse (a key is
/// one path component after an optional leading '/'), so a client cannot name other files.
fn key_path(key: &str) -> CoreResult<PathBuf> {
    let bare = key.strip_prefix('/').unwrap_or(key);
    if bare.is_empty() || bare.len() > 255 || bare.contains('/') || bare == "." || bare == ".." || bare.contains('\0') {
        // Triton's message for any shm_open failure (the reason is logged).
        tracing::warn!(key, "shared memory key refused: a POSIX shared memory key is '/name' with no other '/'");
        return Err(CoreError::internal(format!("Unable to open shared memory region: '{key}'")));
    }
    Ok(PathBuf::from(SHM_DIR).join(bare))
}

/// The prefix of the keys Triton's Python backend names its own regions with: Triton 2.7x
/// refuses it to clients, so that a client cannot map a backend's memory.
const RESERVED_KEY_PREFIX: &str = "triton_python_backend_shm_region_";

/// Triton 2.7x's checks on a key before it is opened (leading slashes are not part of the name).
fn check_key(name: &str, key: &str) -> CoreResult<()> {
    let bare = key.trim_start_matches('/');
    if bare.is_empty() && !key.is_empty() {
        return Err(CoreError::invalid_arg(format!(
            "cannot register shared memory region '{name}' - invalid shm key '{key}'"
        )));
    }
    if bare.starts_with(RESERVED_KEY_PREFIX) {
        return Err(CoreError::invalid_arg(format!(
            "cannot register shared memory region '{name}' with key '{key}' as the key contains the reserved \
             prefix '{RESERVED_KEY_PREFIX}'"
        )));
    }
    Ok(())
}

/// A name is unique across system and CUDA regions, as in Triton.
fn ensure_vacant(regions: &BTreeMap<String, Arc<Region>>, name: &str) -> CoreResult<()> {
    if regions.contains_key(name) {
        return Err(CoreError::new(
            crate::error::ErrorKind::AlreadyExists,
            format!("shared memory region '{name}' already in manager"),
        ));
    }
    Ok(())
}

impl SharedMemoryManager {
    pub fn new() -> Self {
        Self::default()
    }

    /// Lets clients register and unregister regions (`--allow-client-shm=true`).
    pub fn allow_clients(&mut self, on: bool) {
        self.allow_client = on;
    }

    /// Triton's UNSUPPORTED refusal of a client's register or unregister while client shared
    /// memory is off; the doors ask first, before they read the request, as Triton's do.
    pub fn check_client_allowed(&self) -> CoreResult<()> {
        if self.allow_client { Ok(()) } else { Err(CoreError::unsupported(CLIENT_SHM_DISABLED)) }
    }

    /// Registers `name` as `byte_size` bytes at `offset` of the shared-memory object `key`.
    pub fn register(&self, name: &str, key: &str, offset: u64, byte_size: u64) -> CoreResult<()> {
        self.check_client_allowed()?;
        check_key(name, key)?;
        // An empty name is a name (Triton accepts it over gRPC; the HTTP route needs one).
        let path = key_path(key)?;
        let mut regions = self.regions.write().map_err(|_| CoreError::internal("shared memory table poisoned"))?;
        ensure_vacant(&regions, name)?;
        // As shm_open does: no following symlinks out of /dev/shm, and only regular files.
        let file =
            OpenOptions::new().read(true).write(true).custom_flags(libc::O_NOFOLLOW).open(&path).map_err(|e| {
                tracing::warn!(key, "shm_open failed: {e}");
                CoreError::internal(format!("Unable to open shared memory region: '{key}'"))
            })?;
        if !file.metadata().is_ok_and(|m| m.is_file()) {
            return Err(CoreError::internal(format!(
                "Invalid shared memory region: '{key}' is not a shared memory object"
            )));
        }
        let size = file
            .metadata()
            .map_err(|e| CoreError::internal(format!("Unable to read the size of shared memory region '{key}': {e}")))?
            .len();
        // Triton's messages: an offset + size that wraps fails its mmap, one past the end its size check.
        match offset.checked_add(byte_size) {
            None => {
                return Err(CoreError::invalid_arg(format!(
                    "failed to register shared memory region '{name}': unable to process address spaceInvalid \
                    argument"
                )));
            }
            Some(end) if end > size => {
                tracing::warn!(name, key, offset, byte_size, size, "shared memory region larger than its object");
                return Err(CoreError::invalid_arg(format!(
                    "failed to register shared memory region '{name}': invalid args"
                )));
            }
            Some(_) => {}
        }
        regions.insert(
            name.to_string(),
            Arc::new(Region {
                name: name.to_string(),
                key: key.to_string(),
                offset,
                byte_size,
                backing: Backing::System(file),
            }),
        );
        tracing::debug!(name, key, offset, byte_size, "registered system shared memory region");
        Ok(())
    }

    /// Registers `name` as the client's CUDA IPC allocation `raw_handle` (a `cudaIpcMemHandle_t`)
    /// of `byte_size` bytes on GPU `device_id`.
    pub fn register_cuda(&self, name: &str, raw_handle: &[u8], device_id: i64, byte_size: u64) -> CoreResult<()> {
        self.check_client_allowed()?;
        let mut regions = self.regions.write().map_err(|_| CoreError::internal("shared memory table poisoned"))?;
        ensure_vacant(&regions, name)?;
        if crate::gpu::devices().is_empty() {
            // Triton 2.51 (a GPU build) on a machine without a GPU answers exactly this first
            // sentence (checked against the reference server); the reason is ours.
            return Err(CoreError::invalid_arg(
                "failed to register shared memory region: invalid args (no CUDA-capable device is detected)",
            ));
        }
        let memory = CudaMemory::open(raw_handle, device_id, byte_size).map_err(|e| {
            CoreError::invalid_arg(format!("failed to register CUDA shared memory region '{name}': {e}"))
        })?;
        // Two names for the same allocation share this key, so overlapping outputs are caught.
        let key = format!("cuda:{device_id}:{}", memory.address());
        regions.insert(
            name.to_string(),
            Arc::new(Region { name: name.to_string(), key, offset: 0, byte_size, backing: Backing::Cuda(memory) }),
        );
        tracing::debug!(name, device_id, byte_size, "registered CUDA shared memory region");
        Ok(())
    }

    /// Unregisters one system region, or every system region when `name` is `None`. Unregistering
    /// a name that is not registered succeeds, as in Triton. Requests already using a region
    /// finish with it.
    pub fn unregister(&self, name: Option<&str>) -> CoreResult<()> {
        self.check_client_allowed()?;
        self.unregister_kind(name, false)
    }

    /// [`Self::unregister`] for CUDA regions.
    pub fn unregister_cuda(&self, name: Option<&str>) -> CoreResult<()> {
        self.check_client_allowed()?;
        self.unregister_kind(name, true)
    }

    fn unregister_kind(&self, name: Option<&str>, cuda: bool) -> CoreResult<()> {
        let mut regions = self.regions.write().map_err(|_| CoreError::internal("shared memory table poisoned"))?;
        match name {
            Some(name) => {
                if regions.get(name).is_some_and(|r| r.is_cuda() == cuda) {
                    regions.remove(name);
                }
            }
            None => regions.retain(|_, r| r.is_cuda() != cuda),
        }
        Ok(())
    }

    /// Status of one system region (NotFound when unknown) or of all of them.
    pub fn status(&self, name: Option<&str>) -> CoreResult<Vec<RegionStatus>> {
        let regions = self.regions.read().map_err(|_| CoreError::internal("shared memory table poisoned"))?;
        match name {
            Some(name) => match regions.get(name) {
                Some(r) if r.is_cuda() => Err(CoreError::not_found(format!(
                    "The region named '{name}' is registered as CUDA shared memory, not system shared memory"
                ))),
                Some(r) => Ok(vec![r.status()]),
                None => Err(CoreError::not_found(format!("Unable to find system shared memory region: '{name}'"))),
            },
            None => Ok(regions.values().filter(|r| !r.is_cuda()).map(|r| r.status()).collect()),
        }
    }

    /// Status of one CUDA region (NotFound when unknown) or of all of them.
    pub fn cuda_status(&self, name: Option<&str>) -> CoreResult<Vec<CudaRegionStatus>> {
        let regions = self.regions.read().map_err(|_| CoreError::internal("shared memory table poisoned"))?;
        let status = |r: &Region| match &r.backing {
            Backing::Cuda(m) => {
                Some(CudaRegionStatus { name: r.name.clone(), device_id: m.device_id, byte_size: r.byte_size })
            }
            Backing::System(_) => None,
        };
        match name {
            Some(name) => match regions.get(name) {
                Some(r) if !r.is_cuda() => Err(CoreError::not_found(format!(
                    "The region named '{name}' is registered as system shared memory, not CUDA shared memory"
                ))),
                region => region
                    .and_then(|r| status(r))
                    .map(|s| vec![s])
                    .ok_or_else(|| CoreError::not_found(format!("Unable to find cuda shared memory region: '{name}'"))),
            },
            None => Ok(regions.values().filter_map(|r| status(r)).collect()),
        }
    }

    pub fn get(&self, name: &str) -> CoreResult<Arc<Region>> {
        let regions = self.regions.read().map_err(|_| CoreError::internal("shared memory table poisoned"))?;
        regions
            .get(name)
            .cloned()
            .ok_or_else(|| CoreError::not_found(format!("Unable to find shared memory region: '{name}'")))
    }

    /// Reads an input tensor's bytes from the range a request names.
    pub fn read_input(&self, tensor: &str, target: &ShmTarget) -> CoreResult<Bytes> {
        self.get(&target.region)?.read(target.offset, target.byte_size, tensor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct ShmFile(PathBuf, String);
    impl ShmFile {
        fn new(tag: &str, size: usize) -> Self {
            let key = format!("/tessera-test-{}-{tag}", std::process::id());
            let path = key_path(&key).unwrap();
            std::fs::write(&path, vec![0u8; size]).unwrap();
            Self(path, key)
        }
    }
    impl Drop for ShmFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    /// A manager that lets clients register, as `--allow-client-shm=true`.
    fn allowed() -> SharedMemoryManager {
        let mut m = SharedMemoryManager::new();
        m.allow_clients(true);
        m
    }

    #[test]
    fn client_shared_memory_is_off_unless_allowed() {
        let m = SharedMemoryManager::new();
        for refused in [m.register("r", "/k", 0, 8), m.unregister(None), m.unregister_cuda(Some("c"))] {
            let e = refused.unwrap_err();
            assert_eq!(e.kind, crate::error::ErrorKind::Unsupported);
            assert_eq!(e.message, CLIENT_SHM_DISABLED);
        }
        assert!(m.status(None).is_ok(), "status stays open");
    }

    #[test]
    fn register_read_write_and_bounds() {
        let shm = ShmFile::new("rw", 64);
        let m = allowed();
        m.register("r", &shm.1, 16, 32).unwrap();
        let dup = m.register("r", &shm.1, 0, 8).unwrap_err();
        assert_eq!(dup.kind, crate::error::ErrorKind::AlreadyExists);
        assert!(dup.message.contains("already in manager"));
        let region = m.get("r").unwrap();
        region.write(4, &[1, 2, 3, 4], "y").unwrap();
        let raw = std::fs::read(&shm.0).unwrap();
        assert_eq!(&raw[20..24], &[1, 2, 3, 4], "offsets are relative to the region's own offset");
        assert_eq!(&region.read(4, 4, "x").unwrap()[..], &[1, 2, 3, 4]);
        let over = region.read(30, 4, "x").unwrap_err();
        assert!(over.message.contains("Invalid offset + byte size for shared memory region: 'r'"), "{}", over.message);
        assert!(region.read(u64::MAX, 2, "x").is_err(), "overflowing ranges are rejected");
        let too_big = m.register("big", &shm.1, 60, 8).unwrap_err();
        assert!(too_big.message.ends_with("invalid args"), "{}", too_big.message);
        assert_eq!(m.status(None).unwrap().len(), 1);
        // Unregistering while a request holds the region leaves the region usable for it.
        m.unregister(Some("r")).unwrap();
        assert_eq!(&region.read(4, 4, "x").unwrap()[..], &[1, 2, 3, 4]);
        assert!(m.get("r").is_err());
        assert!(m.status(Some("r")).is_err());
        m.unregister(Some("never-registered")).unwrap();
    }

    #[test]
    fn cuda_regions_without_a_gpu_answer_as_triton_does() {
        if !crate::gpu::devices().is_empty() {
            return; // covered by tests/gpu on a GPU machine
        }
        let m = allowed();
        let err = m.register_cuda("c", &[0u8; 64], 0, 64).unwrap_err();
        assert_eq!(err.kind, crate::error::ErrorKind::InvalidArg);
        assert_eq!(
            err.message,
            "failed to register shared memory region: invalid args (no CUDA-capable device is detected)"
        );
        assert!(m.cuda_status(None).unwrap().is_empty());
        assert!(
            m.cuda_status(Some("c")).unwrap_err().message.contains("Unable to find cuda shared memory region: 'c'")
        );
        m.unregister_cuda(None).unwrap();
        m.unregister_cuda(Some("c")).unwrap();
    }

    #[test]
    fn keys_cannot_escape_dev_shm() {
        let m = allowed();
        for key in ["/../etc/passwd", "/a/b", "", "..", "/.."] {
            let err = m.register("x", key, 0, 1).unwrap_err();
            assert!(err.message.contains("Unable to open shared memory region"), "{key}: {}", err.message);
        }
        let missing = m.register("x", "/tessera-no-such-region", 0, 1).unwrap_err();
        assert!(missing.message.contains("Unable to open shared memory region: '/tessera-no-such-region'"));
    }

    #[test]
    fn keys_triton_2_7x_reserves_are_refused_before_they_are_opened() {
        let m = allowed();
        let reserved = m.register("r", "/triton_python_backend_shm_region_1", 0, 8).unwrap_err();
        assert_eq!(reserved.kind, crate::error::ErrorKind::InvalidArg);
        assert_eq!(
            reserved.message,
            "cannot register shared memory region 'r' with key '/triton_python_backend_shm_region_1' as the key \
             contains the reserved prefix 'triton_python_backend_shm_region_'"
        );
        let slashes = m.register("r", "//", 0, 8).unwrap_err();
        assert_eq!(slashes.message, "cannot register shared memory region 'r' - invalid shm key '//'");
    }
}
