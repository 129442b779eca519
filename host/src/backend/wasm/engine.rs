//! The engine every Wasm model shares (pooling allocator, epoch interruption, the WIT linker) and
//! the compile cache: components compiled once per content and engine, in memory and on disk.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, ProfilingStrategy};

use super::compile::{self, Compiled, Compiler};
use super::host::GuestState;
use super::{WasmOptions, bindings};
use crate::error::{CoreError, CoreResult};

/// How often the engine's epoch advances: the resolution of `max_execute_ms`.
pub(super) const EPOCH_TICK: Duration = Duration::from_millis(5);

/// Builds the engine and linker and starts the epoch ticker. If the engine cannot be built, a
/// default one stands in (so the server still starts) together with the reason, which every
/// Wasm model load then reports.
pub(super) fn build(options: &WasmOptions) -> (Engine, Linker<GuestState>, Option<String>) {
    let pooled = build_engine(Allocation::Pooling(options.max_instances));
    let built = match pooled {
        Ok(built) => Ok(built),
        Err(e) => {
            // Said once, here: the pool's address space reservation failed (too many instances
            // for this machine's virtual memory or map count). Every model still loads, with
            // instances allocated one by one (slower instantiation, same limits).
            tracing::error!(
                max_instances = options.max_instances,
                "could not reserve the WebAssembly instance pool ({e}); allocating instances on demand instead \
                 (lower --wasm-max-instances to get the pool back)"
            );
            build_engine(Allocation::OnDemand)
        }
    };
    match built {
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

/// How the engine allocates instances: from a pool reserved up front for this many live
/// instances (fast instantiation), or one by one.
#[derive(Clone, Copy, Debug)]
pub(super) enum Allocation {
    Pooling(u32),
    OnDemand,
}

pub(super) fn build_engine(allocation: Allocation) -> wasmtime::Result<(Engine, Linker<GuestState>)> {
    let engine = Engine::new(&engine_config(allocation))?;
    let mut linker = Linker::new(&engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
    super::clocks::add_to_linker(&mut linker)?;
    bindings::Model::add_to_linker::<GuestState, HasSelf<GuestState>>(&mut linker, |s| s)?;
    super::nn::add_to_linker(&mut linker)?;
    Ok((engine, linker))
}

/// The engine's settings: the server's and its compiler process's ([`super::compile`]), whose
/// artifacts must load in the server's engine.
pub(super) fn engine_config(allocation: Allocation) -> Config {
    let mut config = Config::new();
    config.epoch_interruption(true);
    config.wasm_component_model(true);
    if let Allocation::Pooling(max_instances) = allocation {
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool_config(max_instances)));
    }
    // For profiling guests with `perf`: compiled guest functions get names in /tmp/perf-<pid>.map.
    if std::env::var_os("TESSERA_WASM_PERFMAP").is_some_and(|v| v == "1") {
        config.profiler(ProfilingStrategy::PerfMap);
    }
    config
}

fn pool_config(max_instances: u32) -> PoolingAllocationConfig {
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
    pool
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

/// A compiled, pre-instantiated component.
pub(super) type Prepared = Arc<bindings::ModelPre<GuestState>>;

/// Compiled, pre-instantiated components by [`cache_key`], shared by every instance and version
/// (a reload of an unchanged model compiles nothing), backed by `<dir>/<key>.cwasm` files so a
/// restart compiles nothing either.
///
/// With a cache directory, a component stays in memory only while a live instance uses it
/// (about 150 KB of code and metadata for a small guest: 10,000 distinct guests kept resident
/// would hold 1.5 GB); an instance rebuilt after eviction loads it back from its `.cwasm` file
/// ([`Self::reload`], a fraction of a millisecond). Without one, components stay resident, since
/// getting one back would mean compiling it again.
pub(super) struct CompileCache {
    dir: Option<PathBuf>,
    compiler: Compiler,
    components: Mutex<HashMap<String, Resident>>,
    /// One lock per key being prepared: models loading in parallel with the same component
    /// compile it once.
    preparing: Mutex<HashMap<String, Arc<Mutex<()>>>>,
}

enum Resident {
    Kept(Prepared),
    WhileUsed(Weak<bindings::ModelPre<GuestState>>),
}

impl CompileCache {
    pub(super) fn new(dir: Option<PathBuf>, compiler: Compiler) -> Self {
        Self { dir, compiler, components: Mutex::default(), preparing: Mutex::default() }
    }

    /// Compiles (or loads from the disk cache) and pre-instantiates a component; returns it with
    /// its cache key, which [`Self::reload`] takes.
    pub(super) fn prepare(
        &self,
        engine: &Engine,
        linker: &Linker<GuestState>,
        path: &Path,
    ) -> CoreResult<(String, Prepared)> {
        let bytes = std::fs::read(path)
            .map_err(|e| CoreError::invalid_arg(format!("failed to read {}: {e}", path.display())))?;
        let key = cache_key(engine, &bytes);
        let prepared = self.resident_or_load(&key, || {
            let component = self.load_component(engine, &bytes, &key, path)?;
            self.pre_instantiate(linker, &component, &key, path)
        })?;
        Ok((key, prepared))
    }

    /// Component `key` from memory, else from `load`, run with no other load of that key
    /// running (the first of several waiting for one key loads it, the others find it resident).
    fn resident_or_load(&self, key: &str, load: impl FnOnce() -> CoreResult<Prepared>) -> CoreResult<Prepared> {
        if let Some(pre) = self.resident(key) {
            return Ok(pre);
        }
        let gate = self.preparing.lock().map(|mut p| Arc::clone(p.entry(key.to_string()).or_default())).ok();
        let result = {
            let _preparing = gate.as_ref().map(|g| g.lock());
            match self.resident(key) {
                Some(pre) => Ok(pre),
                None => load(),
            }
        };
        // The last one through removes the gate (the map holds one reference, this call one).
        if let (Some(gate), Ok(mut preparing)) = (gate, self.preparing.lock())
            && Arc::strong_count(&gate) == 2
        {
            preparing.remove(key);
        }
        result
    }

    /// The component `key` again (for an instance rebuilt after eviction): from memory if some
    /// instance still uses it, else from the disk cache, else compiled from `path` again, which
    /// must still hold the same bytes.
    pub(super) fn reload(
        &self,
        engine: &Engine,
        linker: &Linker<GuestState>,
        key: &str,
        path: &Path,
    ) -> CoreResult<Prepared> {
        self.resident_or_load(key, || {
            if let Some(file) = self.dir.as_ref().map(|d| d.join(format!("{key}.cwasm")))
                && let Ok(component) = deserialize_cached(engine, &file)
            {
                return self.pre_instantiate(linker, &component, key, path);
            }
            let bytes = std::fs::read(path)
                .map_err(|e| CoreError::unavailable(format!("failed to read {}: {e}", path.display())))?;
            if cache_key(engine, &bytes) != key {
                return Err(CoreError::unavailable(format!(
                    "{} changed since the model was loaded: load the model again",
                    path.display()
                )));
            }
            let component = self.load_component(engine, &bytes, key, path)?;
            self.pre_instantiate(linker, &component, key, path)
        })
    }

    fn resident(&self, key: &str) -> Option<Prepared> {
        match self.components.lock().ok()?.get(key)? {
            Resident::Kept(pre) => Some(Arc::clone(pre)),
            Resident::WhileUsed(weak) => weak.upgrade(),
        }
    }

    fn pre_instantiate(
        &self,
        linker: &Linker<GuestState>,
        component: &Component,
        key: &str,
        path: &Path,
    ) -> CoreResult<Prepared> {
        let pre = linker.instantiate_pre(component).and_then(bindings::ModelPre::new).map_err(|e| {
            CoreError::invalid_arg(format!("{} does not implement the tessera:model world: {e:#}", path.display()))
        })?;
        let pre = Arc::new(pre);
        if let Ok(mut cache) = self.components.lock() {
            let entry = match self.dir {
                Some(_) => Resident::WhileUsed(Arc::downgrade(&pre)),
                None => Resident::Kept(Arc::clone(&pre)),
            };
            cache.insert(key.to_string(), entry);
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
        match compile::compile(&self.compiler, engine, bytes, path, cached.as_deref())? {
            Compiled::File(file) => deserialize_cached(engine, &file).map_err(|e| {
                CoreError::internal(format!(
                    "the compiled {} did not load from {}: {e:#}",
                    path.display(),
                    file.display()
                ))
            }),
            Compiled::FromProcess(component) => Ok(component),
            Compiled::InServer(component) => {
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
pub(super) fn write_atomically(file: &Path, data: &[u8]) -> Result<(), String> {
    let dir = file.parent().ok_or("cache path has no directory")?;
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("entry");
    // A temporary file of its own, created new: servers in other containers sharing the cache
    // may have the same pid (each compiler process counts from 0), and writing into another's
    // temporary file could publish a torn entry.
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let (tmp, mut out) = loop {
        let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = dir.join(format!(".{name}.tmp{}-{nanos}-{n}", std::process::id()));
        match std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(out) => break (tmp, out),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e.to_string()),
        }
    };
    let written = std::io::Write::write_all(&mut out, data).and_then(|()| out.sync_data());
    drop(out);
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, file)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e.to_string());
    }
    Ok(())
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

        let cache = CompileCache::new(Some(tmp.0.join("cache")), Compiler::InProcess);
        cache.load_component(&engine, EMPTY_COMPONENT, &key, &path).expect("compile");
        let files = cwasm_files(&tmp.0.join("cache"));
        assert_eq!(files, vec![tmp.0.join("cache").join(format!("{key}.cwasm"))]);

        // A fresh cache (a restarted server) loads the artifact; a corrupt one is recompiled.
        let restarted = CompileCache::new(Some(tmp.0.join("cache")), Compiler::InProcess);
        restarted.load_component(&engine, EMPTY_COMPONENT, &key, &path).expect("load from disk");
        std::fs::write(&files[0], b"not a compiled component").expect("corrupt the entry");
        restarted.load_component(&engine, EMPTY_COMPONENT, &key, &path).expect("recompile");
        assert_ne!(std::fs::read(&files[0]).expect("read entry"), b"not a compiled component");
    }

    #[test]
    fn a_component_compiled_in_the_server_for_want_of_a_compiler_is_still_cached() {
        let tmp = TempDir::new("fallback");
        let engine = Engine::default();
        let key = cache_key(&engine, EMPTY_COMPONENT);
        let compiler = Compiler::Process(compile::CompilerProcess::new("/nonexistent/tessera"));
        let cache = CompileCache::new(Some(tmp.0.join("cache")), compiler);
        cache.load_component(&engine, EMPTY_COMPONENT, &key, &tmp.0.join("model.wasm")).expect("compile");
        assert_eq!(cwasm_files(&tmp.0.join("cache")), vec![tmp.0.join("cache").join(format!("{key}.cwasm"))]);
    }

    #[test]
    fn a_pool_too_large_for_the_address_space_falls_back_to_on_demand_allocation() {
        // 400,000 memories of 4 GiB: far past the 128 TiB a process can map.
        let options = WasmOptions { cache_dir: None, max_instances: 100_000, ..WasmOptions::default() };
        assert!(build_engine(Allocation::Pooling(options.max_instances)).is_err(), "the pool cannot be reserved");
        let (engine, linker, error) = build(&options);
        assert_eq!(error, None, "the server still gets a working engine");
        drop((engine, linker));
    }

    #[test]
    fn prepare_reports_unreadable_invalid_and_incomplete_components() {
        let tmp = TempDir::new("prepare");
        let (engine, linker) = build_engine(Allocation::Pooling(1)).expect("engine");
        let cache = CompileCache::new(None, Compiler::InProcess);

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
