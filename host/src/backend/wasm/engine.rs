//! The engine every Wasm model shares (pooling allocator, epoch interruption, the WIT linker) and
//! the compile cache: components compiled once per content and engine, in memory and on disk.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::host::GuestState;
use super::{WasmOptions, bindings};
use crate::error::{CoreError, CoreResult};

/// How often the engine's epoch advances: the resolution of `max_execute_ms`.
pub(super) const EPOCH_TICK: Duration = Duration::from_millis(5);

/// Builds the engine and linker and starts the epoch ticker. If the engine cannot be built, a
/// default one stands in (so the server still starts) together with the reason, which every
/// Wasm model load then reports.
pub(super) fn build(options: &WasmOptions) -> (Engine, Linker<GuestState>, Option<String>) {
    match build_engine(options.max_instances) {
        Ok((engine, linker)) => {
            spawn_epoch_ticker(&engine);
            (engine, linker, None)
        }
        Err(e) => {
            tracing::error!("failed to create the WebAssembly engine: {e}");
            let engine = Engine::default();
            let linker = Linker::new(&engine);
            (engine, linker, Some(e.to_string()))
        }
    }
}

fn build_engine(max_instances: u32) -> wasmtime::Result<(Engine, Linker<GuestState>)> {
    let n = max_instances.max(1);
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(n)
        .total_core_instances(n * 16)
        .max_core_instances_per_component(32)
        .total_memories(n * 4)
        .max_memories_per_component(8)
        .total_tables(n * 16)
        .max_tables_per_component(16)
        .table_elements(100_000)
        .max_memory_size(4 << 30)
        .max_core_instance_size(16 << 20)
        .max_component_instance_size(4 << 20)
        .total_stacks(n);
    let mut config = Config::new();
    config.epoch_interruption(true);
    config.wasm_component_model(true);
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    let engine = Engine::new(&config)?;
    let mut linker = Linker::new(&engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
    bindings::Model::add_to_linker::<GuestState, HasSelf<GuestState>>(&mut linker, |s| s)?;
    Ok((engine, linker))
}

/// Epoch interruption needs a clock: one thread ticks the engine until it is dropped.
fn spawn_epoch_ticker(engine: &Engine) {
    let ticker = engine.weak();
    std::thread::Builder::new()
        .name("tessera-wasm-epoch".into())
        .spawn(move || {
            while let Some(engine) = ticker.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
            }
        })
        .ok();
}

/// Compiled, pre-instantiated components by [`cache_key`], shared by every instance and version
/// (a reload of an unchanged model compiles nothing), backed by `<dir>/<key>.cwasm` files so a
/// restart compiles nothing either.
pub(super) struct CompileCache {
    dir: Option<PathBuf>,
    components: Mutex<HashMap<String, bindings::ModelPre<GuestState>>>,
}

impl CompileCache {
    pub(super) fn new(dir: Option<PathBuf>) -> Self {
        Self { dir, components: Mutex::default() }
    }

    /// Compiles (or loads from the disk cache) and pre-instantiates a component.
    pub(super) fn prepare(
        &self,
        engine: &Engine,
        linker: &Linker<GuestState>,
        path: &Path,
    ) -> CoreResult<bindings::ModelPre<GuestState>> {
        let bytes = std::fs::read(path)
            .map_err(|e| CoreError::invalid_arg(format!("failed to read {}: {e}", path.display())))?;
        let key = cache_key(engine, &bytes);
        if let Some(pre) = self.components.lock().ok().and_then(|c| c.get(&key).cloned()) {
            return Ok(pre);
        }
        let component = self.load_component(engine, &bytes, &key, path)?;
        let pre = linker.instantiate_pre(&component).and_then(bindings::ModelPre::new).map_err(|e| {
            CoreError::invalid_arg(format!("{} does not implement the tessera:model world: {e:#}", path.display()))
        })?;
        if let Ok(mut cache) = self.components.lock() {
            cache.insert(key, pre.clone());
        }
        Ok(pre)
    }

    fn load_component(&self, engine: &Engine, bytes: &[u8], key: &str, path: &Path) -> CoreResult<Component> {
        let cached = self.dir.as_ref().map(|d| d.join(format!("{key}.cwasm")));
        if let Some(file) = &cached
            && file.is_file()
        {
            match deserialize_cached(engine, file) {
                Ok(component) => return Ok(component),
                Err(e) => tracing::warn!(file = %file.display(), "ignoring unusable compile cache entry: {e}"),
            }
        }
        let started = std::time::Instant::now();
        let component = Component::from_binary(engine, bytes).map_err(|e| {
            CoreError::invalid_arg(format!("{} is not a valid WebAssembly component: {e:#}", path.display()))
        })?;
        tracing::info!(
            model = %path.display(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "compiled WebAssembly component"
        );
        if let Some(file) = &cached {
            let written =
                component.serialize().map_err(|e| e.to_string()).and_then(|data| write_atomically(file, &data));
            if let Err(e) = written {
                tracing::warn!(file = %file.display(), "could not write the compile cache: {e}");
            }
        }
        Ok(component)
    }
}

/// The component's SHA-256 and the engine's compatibility hash: a compiled artifact is reused only
/// for the same bytes on an engine with the same settings and wasmtime version.
pub(super) fn cache_key(engine: &Engine, bytes: &[u8]) -> String {
    use std::hash::{Hash, Hasher};
    let mut engine_hash = std::hash::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut engine_hash);
    let digest = Sha256::digest(bytes);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("{hex}-{:016x}", engine_hash.finish())
}

#[allow(unsafe_code)]
fn deserialize_cached(engine: &Engine, file: &Path) -> wasmtime::Result<Component> {
    // SAFETY: the file was produced by `Component::serialize` of an engine with the same
    // compatibility hash (it is part of the file name) and lives in the server's own cache
    // directory; wasmtime additionally checks its header and engine settings when loading.
    unsafe { Component::deserialize_file(engine, file) }
}

/// Writes through a temporary file and a rename, so a concurrent reader (another server sharing
/// the cache) never sees a half-written entry.
fn write_atomically(file: &Path, data: &[u8]) -> Result<(), String> {
    let dir = file.parent().ok_or("cache path has no directory")?;
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("entry");
    let tmp = dir.join(format!(".{name}.tmp{}", std::process::id()));
    std::fs::write(&tmp, data).map_err(|e| e.to_string())?;
    std::fs::rename(&tmp, file).map_err(|e| e.to_string())
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// The smallest valid component: the preamble (magic, component version 0x0d, layer 1).
    pub(in super::super) const EMPTY_COMPONENT: &[u8] = b"\0asm\x0d\x00\x01\x00";

    /// A fresh directory under the system temp dir, removed on drop.
    pub(in super::super) struct TempDir(pub PathBuf);

    impl TempDir {
        pub(in super::super) fn new(tag: &str) -> Self {
            use std::sync::atomic::{AtomicU32, Ordering};
            static NEXT: AtomicU32 = AtomicU32::new(0);
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let dir = std::env::temp_dir().join(format!("tessera-wasm-{tag}-{}-{n}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("create temp dir");
            Self(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn cwasm_files(dir: &Path) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .expect("read cache dir")
            .map(|e| e.expect("dir entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "cwasm"))
            .collect();
        files.sort();
        files
    }

    #[test]
    fn cache_key_is_content_hash_and_engine_hash() {
        let engine = Engine::default();
        let a = cache_key(&engine, b"model one");
        assert_eq!(a, cache_key(&engine, b"model one"), "same bytes, same key");
        assert_ne!(a, cache_key(&engine, b"model two"), "other bytes, other key");
        let (hex, engine_part) = a.split_once('-').expect("key has two parts");
        assert_eq!(hex.len(), 64);
        assert_eq!(engine_part.len(), 16);
        assert!(a.chars().all(|c| c == '-' || c.is_ascii_hexdigit()));
        // The content part is the plain SHA-256 of the bytes.
        assert!(
            cache_key(&engine, b"").starts_with("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855-")
        );
    }

    #[test]
    fn cache_key_changes_with_engine_settings() {
        let plain = Engine::default();
        let mut config = Config::new();
        config.epoch_interruption(true);
        let epochs = Engine::new(&config).expect("engine");
        let (a, b) = (cache_key(&plain, b"same"), cache_key(&epochs, b"same"));
        assert_eq!(a.split_once('-').map(|p| p.0), b.split_once('-').map(|p| p.0));
        assert_ne!(a, b);
    }

    #[test]
    fn write_atomically_creates_the_directory_and_leaves_no_temp_file() {
        let tmp = TempDir::new("atomic");
        let file = tmp.0.join("nested").join("entry.cwasm");
        write_atomically(&file, b"first").expect("write");
        write_atomically(&file, b"second").expect("overwrite");
        assert_eq!(std::fs::read(&file).expect("read back"), b"second");
        let names: Vec<_> =
            std::fs::read_dir(tmp.0.join("nested")).expect("list").map(|e| e.expect("entry").file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("entry.cwasm")]);
    }

    #[test]
    fn compiled_components_go_to_disk_and_come_back() {
        let tmp = TempDir::new("cache");
        let engine = Engine::default();
        let path = tmp.0.join("model.wasm");
        let key = cache_key(&engine, EMPTY_COMPONENT);

        let cache = CompileCache::new(Some(tmp.0.join("cache")));
        cache.load_component(&engine, EMPTY_COMPONENT, &key, &path).expect("compile");
        let files = cwasm_files(&tmp.0.join("cache"));
        assert_eq!(files, vec![tmp.0.join("cache").join(format!("{key}.cwasm"))]);

        // A fresh cache (a restarted server) loads the artifact; a corrupt one is recompiled.
        let restarted = CompileCache::new(Some(tmp.0.join("cache")));
        restarted.load_component(&engine, EMPTY_COMPONENT, &key, &path).expect("load from disk");
        std::fs::write(&files[0], b"not a compiled component").expect("corrupt the entry");
        restarted.load_component(&engine, EMPTY_COMPONENT, &key, &path).expect("recompile");
        assert_ne!(std::fs::read(&files[0]).expect("read entry"), b"not a compiled component");
    }

    #[test]
    fn prepare_reports_unreadable_invalid_and_incomplete_components() {
        let tmp = TempDir::new("prepare");
        let (engine, linker) = build_engine(1).expect("engine");
        let cache = CompileCache::new(None);

        let missing = tmp.0.join("missing.wasm");
        let Err(e) = cache.prepare(&engine, &linker, &missing) else { panic!("a missing file must fail") };
        assert_eq!(e.kind, crate::error::ErrorKind::InvalidArg);
        assert!(e.message.starts_with(&format!("failed to read {}: ", missing.display())), "{}", e.message);

        let garbage = tmp.0.join("garbage.wasm");
        std::fs::write(&garbage, b"garbage").expect("write");
        let Err(e) = cache.prepare(&engine, &linker, &garbage) else { panic!("garbage must fail") };
        let expected = format!("{} is not a valid WebAssembly component: ", garbage.display());
        assert!(e.message.starts_with(&expected), "{}", e.message);

        let empty = tmp.0.join("empty.wasm");
        std::fs::write(&empty, EMPTY_COMPONENT).expect("write");
        let Err(e) = cache.prepare(&engine, &linker, &empty) else { panic!("an empty component must fail") };
        let expected = format!("{} does not implement the tessera:model world: ", empty.display());
        assert!(e.message.starts_with(&expected), "{}", e.message);
        // Nothing was written to disk without a cache directory.
        assert!(cwasm_files(&tmp.0).is_empty());
    }
}
