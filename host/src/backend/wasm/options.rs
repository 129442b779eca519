//! The engine-wide settings of the Wasm backend ([`WasmOptions`]) and where compiled components
//! are cached by default.

use std::path::PathBuf;

use super::compile::Compiler;
use super::keyvalue::KeyValueOptions;
use super::sandbox::GuestEnv;
use super::secrets::GuestSecrets;
use crate::backend::disk_cache::DEFAULT_CACHE_MAX_BYTES;

/// Engine-wide settings for Wasm models.
#[derive(Debug, Clone)]
pub struct WasmOptions {
    /// Where compiled components are cached (keyed by content hash and engine settings).
    pub cache_dir: Option<PathBuf>,
    /// Upper bound on live guest instances (sizes the pooling allocator); past it the least
    /// recently used idle instance is evicted (see `live`).
    pub max_instances: u32,
    /// Instances unused this long are evicted; `None` keeps them until their room is needed.
    pub idle_timeout: Option<std::time::Duration>,
    /// Where components are compiled: the `tessera` binary compiles in a process of its own
    /// (see `compile`); an embedder compiles in-process.
    pub compiler: Compiler,
    /// The size cap of `cache_dir` in bytes (0: none); the least recently used entries go.
    pub cache_max_bytes: u64,
    /// The server's environment variables guests may be given (`--guest-env`); a model sees
    /// those its `environment_variables` parameter asks for.
    pub guest_env: GuestEnv,
    /// The operator's secrets and the models granted each (`--guest-secrets`), which guests read
    /// through `wasi:config`.
    pub guest_secrets: GuestSecrets,
    /// The bounds on guests' key-value stores (`--guest-keyvalue-max-bytes`, `--guest-keyvalue-dir`).
    pub keyvalue: KeyValueOptions,
}

impl Default for WasmOptions {
    fn default() -> Self {
        Self {
            cache_dir: default_cache_dir(),
            max_instances: 1000,
            idle_timeout: None,
            compiler: Compiler::InProcess,
            cache_max_bytes: DEFAULT_CACHE_MAX_BYTES,
            guest_env: GuestEnv::default(),
            guest_secrets: GuestSecrets::default(),
            keyvalue: KeyValueOptions::default(),
        }
    }
}

/// `$XDG_CACHE_HOME/tessera/wasm`, else `~/.cache/tessera/wasm`.
pub(crate) fn default_cache_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .map(|d| d.join("tessera").join("wasm"))
}
