//! The compile cache: components compiled once per content and engine settings, kept in memory
//! while used and on disk as `<key>.cwasm`, compiled by [`super::compile`] when neither has them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::{Component, Linker};

use super::bindings;
use super::compile::{self, Compiled, Compiler};
use super::functions::{self, FunctionCache};
use super::state::GuestState;
use crate::backend::disk_cache::{DiskCache, EntryLock, write_atomically};
use crate::error::{CoreError, CoreResult};

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
    /// The size cap of `dir` (least recently used entries go).
    disk: DiskCache,
    /// The size cap of the function cache in `dir` ([`functions`]), which compiler processes
    /// use and add to.
    functions: DiskCache,
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
    pub(super) fn new(dir: Option<PathBuf>, max_bytes: u64, compiler: Compiler) -> Self {
        let disk = DiskCache::new("compiled_components", ".cwasm", max_bytes);
        let functions = DiskCache::new("compiled_functions", functions::SUFFIX, functions::cap_for(max_bytes));
        Self { dir, disk, functions, compiler, components: Mutex::default(), preparing: Mutex::default() }
    }

    /// A cache file was just read: it counts as the most recently used.
    fn used(&self, file: &Path) {
        if let Some(dir) = &self.dir {
            self.disk.hit(dir, file);
        }
    }

    /// A cache file was just written: the cache keeps to its cap.
    fn written(&self, file: &Path) {
        if let Some(dir) = &self.dir {
            self.disk.admit(dir, file);
        }
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

    /// [`Self::prepare`] for a sealed component's plaintext (`backend::sealed`): compiled
    /// without the disk cache or the function cache, so nothing derived from it is written; it
    /// stays in memory while an instance holds it (`instance` keeps it pinned).
    pub(super) fn prepare_sealed(
        &self,
        engine: &Engine,
        linker: &Linker<GuestState>,
        bytes: &[u8],
        path: &Path,
    ) -> CoreResult<(String, Prepared)> {
        let key = cache_key(engine, bytes);
        let prepared = self.resident_or_load(&key, || {
            let component = match compile::compile(&self.compiler, engine, bytes, path, None, None)? {
                Compiled::FromProcess(component) | Compiled::InServer(component) => component,
                Compiled::File(_) => return Err(CoreError::internal("a sealed component was written to a file")),
            };
            // Its instances pin it; once the model goes, nothing of it stays.
            self.pre_instantiate_kept(linker, &component, &key, path, false)
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
                self.used(&file);
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
        self.pre_instantiate_kept(linker, component, key, path, self.dir.is_none())
    }

    /// [`Self::pre_instantiate`], kept in memory for good when `keep` (there is no disk cache to
    /// load it from again), else only while an instance holds it.
    fn pre_instantiate_kept(
        &self,
        linker: &Linker<GuestState>,
        component: &Component,
        key: &str,
        path: &Path,
        keep: bool,
    ) -> CoreResult<Prepared> {
        let pre = linker.instantiate_pre(component).and_then(bindings::ModelPre::new).map_err(|e| {
            CoreError::invalid_arg(format!("{} does not implement the tessera:model world: {e:#}", path.display()))
        })?;
        let pre = Arc::new(pre);
        if let Ok(mut cache) = self.components.lock() {
            let entry = match keep {
                false => Resident::WhileUsed(Arc::downgrade(&pre)),
                true => Resident::Kept(Arc::clone(&pre)),
            };
            cache.insert(key.to_string(), entry);
        }
        Ok(pre)
    }

    fn load_component(&self, engine: &Engine, bytes: &[u8], key: &str, path: &Path) -> CoreResult<Component> {
        let cached = self.dir.as_ref().map(|d| d.join(format!("{key}.cwasm")));
        let from_disk = || {
            let file = cached.as_ref().filter(|f| f.is_file())?;
            match deserialize_cached(engine, file) {
                Ok(component) => {
                    self.used(file);
                    Some(component)
                }
                Err(e) => {
                    tracing::warn!(file = %file.display(), "ignoring unusable compile cache entry: {e}");
                    None
                }
            }
        };
        if let Some(component) = from_disk() {
            return Ok(component);
        }
        // Another server sharing the directory may be compiling this very component: wait for
        // it rather than compile it twice.
        let making = self.dir.as_deref().and_then(|dir| EntryLock::acquire(dir, key, || false));
        if making.is_some()
            && let Some(component) = from_disk()
        {
            return Ok(component);
        }
        // Only a compiler process uses the function cache (see `functions`).
        let functions = match (&self.compiler, self.dir.as_deref()) {
            (Compiler::Process(_), Some(dir)) => {
                Some(FunctionCache { dir: functions::dir_in(dir), max_bytes: self.functions.max_bytes() })
            }
            _ => None,
        };
        let compiled = compile::compile(&self.compiler, engine, bytes, path, cached.as_deref(), functions.as_ref());
        if let Some(functions) = &functions {
            self.functions.sweep(&functions.dir);
        }
        match compiled? {
            Compiled::File(file) => {
                let component = deserialize_cached(engine, &file).map_err(|e| {
                    CoreError::internal(format!(
                        "the compiled {} did not load from {}: {e:#}",
                        path.display(),
                        file.display()
                    ))
                })?;
                self.written(&file);
                Ok(component)
            }
            Compiled::FromProcess(component) => Ok(component),
            Compiled::InServer(component) => {
                if let Some(file) = &cached {
                    let written =
                        component.serialize().map_err(|e| e.to_string()).and_then(|data| write_atomically(file, &data));
                    match written {
                        Ok(()) => self.written(file),
                        Err(e) => tracing::warn!(file = %file.display(), "could not write the compile cache: {e}"),
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
    format!("{}-{:016x}", crate::backend::disk_cache::hex(&digest), engine_hash.finish())
}

#[allow(unsafe_code)]
fn deserialize_cached(engine: &Engine, file: &Path) -> wasmtime::Result<Component> {
    // SAFETY: the file was produced by `Component::serialize` of an engine with the same
    // compatibility hash (it is part of the file name) and lives in the server's own cache
    // directory; wasmtime additionally checks its header and engine settings when loading.
    unsafe { Component::deserialize_file(engine, file) }
}

#[cfg(test)]
mod tests {
    use wasmtime::Config;

    use super::*;
    use crate::backend::wasm::engine::build_engine;
    use crate::backend::wasm::settings::Allocation;
    use crate::backend::wasm::test_support::{EMPTY_COMPONENT, TempDir};

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
    fn compiled_components_go_to_disk_and_come_back() {
        let tmp = TempDir::new("cache");
        let engine = Engine::default();
        let path = tmp.0.join("model.wasm");
        let key = cache_key(&engine, EMPTY_COMPONENT);

        let cache = CompileCache::new(Some(tmp.0.join("cache")), 0, Compiler::InProcess);
        cache.load_component(&engine, EMPTY_COMPONENT, &key, &path).expect("compile");
        let files = cwasm_files(&tmp.0.join("cache"));
        assert_eq!(files, vec![tmp.0.join("cache").join(format!("{key}.cwasm"))]);

        // A fresh cache (a restarted server) loads the artifact; a corrupt one is recompiled.
        let restarted = CompileCache::new(Some(tmp.0.join("cache")), 0, Compiler::InProcess);
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
        let cache = CompileCache::new(Some(tmp.0.join("cache")), 0, compiler);
        cache.load_component(&engine, EMPTY_COMPONENT, &key, &tmp.0.join("model.wasm")).expect("compile");
        assert_eq!(cwasm_files(&tmp.0.join("cache")), vec![tmp.0.join("cache").join(format!("{key}.cwasm"))]);
    }

    #[test]
    fn prepare_reports_unreadable_invalid_and_incomplete_components() {
        let tmp = TempDir::new("prepare");
        let (engine, linker) = build_engine(Allocation::Pooling(1)).expect("engine");
        let cache = CompileCache::new(None, 0, Compiler::InProcess);

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
