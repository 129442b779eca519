//! The Python backend (`backend: "python"`, or a `model.py` in the version directory): a
//! Triton python-backend model served as it is. At load, the version directory's `model.py`
//! (with its sibling modules and `requirements.txt`) is built into a WebAssembly component by the
//! Python guest builder (`scripts/build-python-guest.sh` of a set-up checkout, or
//! `--python-guest-builder`), and then served by the Wasm backend, in its sandbox.
//!
//! Built components are cached by content: the hash of the model's `.py` files and
//! `requirements.txt` and of the builder (its script, the guest SDK and `wit/`), so a restart or
//! a second instance costs no build. A build that fails or outlives its time limit fails only
//! that model's load, with the builder's own message.
//!
//! `--python-allowed-models` is the allow-list for BLS calls of models served from `model.py`
//! (Triton lets a Python model call any model); a model's own `allowed_models` parameter
//! narrows it further.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};

mod build;
mod confine;
mod reason;
mod slots;
mod sources;

use build::{BuildError, Builds, Run};
use confine::Confinement;
use slots::BuildSlots;
use sources::Sources;

use super::disk_cache::{DEFAULT_CACHE_MAX_BYTES, DiskCache, EntryLock, Pinned, hex};
use super::wasm::{AllowList, WasmBackend};
use super::{Backend, BackendKind, InstanceContext, ModelInstance};
use crate::config::ModelConfig;
use crate::error::{CoreError, CoreResult, ErrorKind};

/// How the server builds and sandboxes models served from `model.py`.
#[derive(Clone, Debug)]
pub struct PythonOptions {
    /// The builder: run as `bash BUILDER SOURCE.py OUT.wasm`, confined (see `confine`).
    /// `None`: model.py models fail to load, saying how to name one.
    pub builder: Option<PathBuf>,
    /// Where built components are kept; `None`: a directory of this process's own.
    pub cache_dir: Option<PathBuf>,
    /// A build still running after this long is stopped and its model fails to load.
    pub build_timeout: Duration,
    /// The BLS allow-list of model.py models (`allowed_models` syntax: `*` or a comma list);
    /// `None`: only what each model's own `allowed_models` parameter lists.
    pub allowed_models: Option<String>,
    /// The cap on the built components kept in `cache_dir`, in bytes (0: none); the least
    /// recently used go first.
    pub cache_max_bytes: u64,
    /// How many builds run at once (`--python-guest-build-jobs`); 0: one per CPU, fewer when
    /// the available memory holds fewer ([`slots::default_jobs`]).
    pub build_jobs: usize,
}

impl Default for PythonOptions {
    fn default() -> Self {
        Self {
            builder: default_builder(),
            cache_dir: default_cache_dir(),
            build_timeout: Duration::from_secs(900),
            allowed_models: None,
            cache_max_bytes: DEFAULT_CACHE_MAX_BYTES,
            build_jobs: 0,
        }
    }
}

/// `$XDG_CACHE_HOME/tessera/python-guests`, else `~/.cache/tessera/python-guests`: apart from
/// the compiled components (`--wasm-cache-dir`), so that servers with caches of their own share
/// the builds, which take much longer than compiles.
pub fn default_cache_dir() -> Option<PathBuf> {
    cache_root().map(|root| root.join("python-guests"))
}

/// Where the builder keeps numpy and dependency builds, as `scripts/build-python-guest.sh`
/// finds it: `$TESSERA_CACHE_DIR`, else `$XDG_CACHE_HOME/tessera`, else `~/.cache/tessera`.
fn cache_root() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("TESSERA_CACHE_DIR").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    super::wasm::default_cache_dir().and_then(|wasm| wasm.parent().map(Path::to_path_buf))
}

/// The checkout's builder, when the binary runs from a set-up checkout.
pub fn default_builder() -> Option<PathBuf> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/build-python-guest.sh");
    script.is_file().then(|| script.canonicalize().unwrap_or(script))
}

/// Builds model.py models into components, cached by content.
pub struct PythonGuests {
    builder: Option<PathBuf>,
    /// The builder's own hash: a changed SDK or builder rebuilds every guest.
    builder_hash: Option<String>,
    cache_dir: PathBuf,
    cache: DiskCache,
    timeout: Duration,
    /// One build of a given model at a time (two instances loading at once build once).
    building: Mutex<HashMap<String, Arc<Mutex<()>>>>,
    /// The builds running now, to cancel.
    builds: Builds,
    /// How many builds run at once.
    slots: BuildSlots,
    /// Failed builds by model file, with their key, until the next load of the model begins:
    /// the part of a load under the repository lock reports the failure of the build done
    /// before it rather than building again (a model.py that loops would hold the lock). A
    /// cancelled build is not remembered: the next load builds again.
    failures: Mutex<HashMap<PathBuf, (String, CoreError)>>,
}

impl PythonGuests {
    pub fn new(options: &PythonOptions) -> Self {
        let builder_hash = options.builder.as_deref().map(builder_hash);
        let cache_dir = options.cache_dir.clone().unwrap_or_else(private_cache_dir);
        sweep_leftovers(&cache_dir);
        Self {
            builder: options.builder.clone(),
            builder_hash,
            cache_dir,
            cache: DiskCache::new("python_guests", ".wasm", options.cache_max_bytes),
            timeout: options.build_timeout,
            building: Mutex::default(),
            builds: Builds::default(),
            slots: BuildSlots::new(options.build_jobs),
            failures: Mutex::default(),
        }
    }

    /// The component built from `model_py` (the model file in its version directory; any name),
    /// building it if the cache has none. A server without a builder (the OCI image has none)
    /// serves the `model.wasm` beside it instead, built elsewhere by `tessera guest build`: the
    /// source is the truth wherever it can be built, so a server with a builder ignores that file.
    pub fn component(&self, model_py: &Path, model: &str) -> CoreResult<PathBuf> {
        self.component_pinned(model_py, model).map(|(path, _)| path)
    }

    /// [`Self::component`], kept from the cache's eviction while the guard lives (the caller
    /// reads it before dropping the guard).
    fn component_pinned(&self, model_py: &Path, model: &str) -> CoreResult<(PathBuf, Option<Pinned<'_>>)> {
        let (Some(builder), Some(builder_hash)) = (&self.builder, &self.builder_hash) else {
            let prebuilt = model_py.with_file_name("model.wasm");
            if prebuilt.is_file() {
                tracing::info!(model = %prebuilt.display(), "no Python guest builder: serving the prebuilt component");
                return Ok((prebuilt, None));
            }
            return Err(CoreError::unavailable(format!(
                "{} is a Python model, and this server has no Python guest builder: start it with \
                 --python-guest-builder <checkout>/scripts/build-python-guest.sh (after that checkout's \
                 scripts/setup.sh), or build it beside model.py with `tessera guest build {}` (writes \
                 model.wasm, which a server without a builder serves)",
                model_py.display(),
                model_py.parent().unwrap_or(Path::new(".")).display()
            )));
        };
        if self.builds.closed() {
            return Err(CoreError::new(ErrorKind::Cancelled, "the server is stopping: no Python guest is built"));
        }
        let version_dir = model_py.parent().unwrap_or(Path::new("."));
        let sources = Sources::read(version_dir, model_py)?;
        let key = sources.key(builder_hash);
        if let Some(error) = self.failed(model_py, &key) {
            return Err(error);
        }
        let lock = {
            let mut building = self.building.lock().unwrap_or_else(|e| e.into_inner());
            Arc::clone(building.entry(key.clone()).or_default())
        };
        let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
        let cache_dir = self.usable_cache_dir()?;
        let out = cache_dir.join(format!("{key}.wasm"));
        let pinned = self.cache.pin(&out);
        if out.is_file() {
            self.cache.hit(&cache_dir, &out);
            return Ok((out, Some(pinned)));
        }
        if let Some(error) = self.failed(model_py, &key) {
            return Err(error);
        }
        // Another server sharing the cache may be building these very sources: wait for it
        // rather than build them twice.
        let making = EntryLock::acquire(&cache_dir, &key, || self.builds.closed());
        if self.builds.closed() {
            return Err(CoreError::new(ErrorKind::Cancelled, "the server is stopping: no Python guest is built"));
        }
        if making.is_some() && out.is_file() {
            self.cache.hit(&cache_dir, &out);
            return Ok((out, Some(pinned)));
        }
        let Some(_slot) = self.slots.acquire(|| self.builds.closed()) else {
            return Err(CoreError::new(ErrorKind::Cancelled, "the server is stopping: no Python guest is built"));
        };
        tracing::info!(model, "building the Python guest ({} -> component)", sources.entry.display());
        let started = std::time::Instant::now();
        match self.build(builder, &sources, &cache_dir, &out, model) {
            Ok(()) => {
                tracing::info!(model, seconds = started.elapsed().as_secs_f64(), "built the Python guest");
                self.cache.admit(&cache_dir, &out);
                Ok((out, Some(pinned)))
            }
            Err(e) => {
                // Named relative to the version directory: the server's paths are not the
                // client's business.
                let entry = sources.entry.display();
                let error = match e {
                    BuildError::Failed(why) => CoreError::unavailable(format!("building {entry} failed: {why}")),
                    BuildError::Cancelled => CoreError::new(
                        ErrorKind::Cancelled,
                        format!("the build of {entry} was cancelled (model unloaded or server stopping)"),
                    ),
                };
                tracing::warn!(model, path = %model_py.display(), "{}", error.message);
                if error.kind != ErrorKind::Cancelled {
                    let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
                    failures.insert(model_py.to_path_buf(), (key, error.clone()));
                }
                Err(error)
            }
        }
    }

    /// The remembered failure of a build of these very sources (see `failures`).
    fn failed(&self, model_py: &Path, key: &str) -> Option<CoreError> {
        let failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        failures.get(model_py).filter(|(k, _)| k == key).map(|(_, e)| e.clone())
    }

    /// Builds in a fresh build directory: a fetch of requirements.txt's wheels (network, the
    /// dependency cache writable), then the build proper (no network, only the build
    /// directory writable). The component is moved to `cached` (in `cache_dir`) at the end.
    fn build(
        &self,
        builder: &Path,
        sources: &Sources,
        cache_dir: &Path,
        cached: &Path,
        model: &str,
    ) -> Result<(), BuildError> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let key = cached.file_stem().map(|k| k.to_string_lossy().into_owned()).unwrap_or_default();
        let dir = BuildDir::create(&cache_dir.join(format!(".build-{key}-{}-{n}", std::process::id())))?;
        // Named as the version directory: the guest imports the model file from it as a package.
        let src = dir.0.join("src").join(sources.version.as_deref().unwrap_or("1"));
        sources.write(&src).map_err(|e| BuildError::Failed(format!("failed to stage the sources: {e}")))?;
        let entry = src.join(&sources.entry);
        let out = dir.0.join("out.wasm");
        let root = cache_root();
        let toolchain = toolchain(builder);
        let checkout = checkout_of(builder);
        let model_files: Vec<String> = sources
            .files
            .iter()
            .map(|(path, _)| path.to_string_lossy().into_owned())
            .filter(|path| path.ends_with(".py"))
            .collect();
        let fetch = sources.has_requirements().then(|| {
            let mut fetch = toolchain.clone();
            fetch.network = true;
            fetch.write.push(dir.0.clone());
            if let Some(root) = &root {
                let deps = root.join("python-deps");
                let _ = std::fs::create_dir_all(&deps);
                fetch.write.push(deps);
            }
            fetch.read.extend(build::find_links_dirs());
            fetch
        });
        let mut run = Run {
            builder,
            phase: "fetch",
            source: &entry,
            out: &out,
            build_dir: &dir.0,
            cache_root: root.as_deref(),
            confinement: fetch.as_ref(),
            timeout: self.timeout,
            model,
            model_files: &model_files,
        };
        if fetch.is_some() {
            run.run(&self.builds).map_err(|e| e.redacted(&dir.0, root.as_deref(), checkout))?;
        }
        let mut confined = toolchain;
        confined.write.push(dir.0.clone());
        // Of the shared caches, only numpy's and the dependencies' (not other models' guests).
        confined.read.extend(root.iter().flat_map(|r| [r.join("numpy-wasi"), r.join("python-deps")]));
        run.phase = "build";
        run.confinement = Some(&confined);
        run.run(&self.builds).map_err(|e| e.redacted(&dir.0, root.as_deref(), checkout))?;
        // A regular file, not a link the build made to another model's guest or a host file.
        if !std::fs::symlink_metadata(&out).is_ok_and(|m| m.is_file()) {
            return Err(BuildError::Failed("the builder exited with success but wrote no component".into()));
        }
        // The build directory is in the cache directory: one rename, on one filesystem.
        std::fs::rename(&out, cached).map_err(|e| BuildError::Failed(format!("failed to keep the built guest: {e}")))
    }

    /// Ends the builds of `model` (all of them for `None`; after that no build starts).
    pub fn cancel(&self, model: Option<&str>) {
        self.builds.cancel(model);
    }

    /// A load of the model in `dir` begins: the build failures remembered of it go.
    pub fn forget(&self, dir: &Path) {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        failures.retain(|path, _| !path.starts_with(dir));
    }

    /// The cache directory, made if missing; where it cannot be (a container's read-only home),
    /// a directory of this process's own: built guests then live as long as the process.
    fn usable_cache_dir(&self) -> CoreResult<PathBuf> {
        let Err(e) = std::fs::create_dir_all(&self.cache_dir) else {
            return Ok(self.cache_dir.clone());
        };
        let cache = self.cache_dir.display();
        tracing::warn!(%cache, "cannot keep built Python guests there ({e}); using a private directory");
        let private = private_cache_dir();
        std::fs::create_dir_all(&private)
            .map_err(|e| CoreError::unavailable(format!("failed to create {}: {e}", private.display())))?;
        Ok(private)
    }
}

/// What builds of a killed server left in the cache (their build directories), a day after: a
/// build in progress is never that old.
fn sweep_leftovers(cache_dir: &Path) {
    let Ok(read) = std::fs::read_dir(cache_dir) else { return };
    let day_ago = std::time::SystemTime::now() - Duration::from_secs(24 * 3600);
    for entry in read.filter_map(|e| e.ok()) {
        let name = entry.file_name();
        let old = entry.metadata().and_then(|m| m.modified()).is_ok_and(|t| t < day_ago);
        if name.to_string_lossy().starts_with('.') && old {
            let path = entry.path();
            let _ = if path.is_dir() { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) };
        }
    }
}

/// A build directory, removed with everything in it when dropped.
struct BuildDir(PathBuf);

impl BuildDir {
    fn create(path: &Path) -> Result<Self, BuildError> {
        // Fresh: whatever a killed server left under this name goes first.
        let _ = std::fs::remove_dir_all(path);
        std::fs::create_dir(path)
            .map_err(|e| BuildError::Failed(format!("failed to create the build directory: {e}")))?;
        Ok(Self(path.to_path_buf()))
    }
}

impl Drop for BuildDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What every run of `builder` may read and execute: the system, and the checkout it belongs
/// to (its scripts, the guest SDK, `wit/`, the `.venv` with componentize-py and the Python it
/// was made from).
fn toolchain(builder: &Path) -> Confinement {
    let mut c = Confinement::system();
    c.read_exec.push(builder.to_path_buf());
    // A checkout's builder (`<root>/scripts/build-python-guest.sh`) and what it builds with;
    // another builder gets only itself and the system.
    if let Some(root) = checkout_of(builder) {
        for dir in ["scripts", "guest-sdk", "wit", ".venv"] {
            c.read_exec.push(root.join(dir));
        }
        c.read.push(root.join("tests/requirements.txt"));
        // The interpreter the venv was made from (`home = <prefix>/bin` in pyvenv.cfg), when
        // that is a prefix of its own (not `/`, and not holding the caches).
        let cache = cache_root();
        if let Ok(cfg) = std::fs::read_to_string(root.join(".venv/pyvenv.cfg"))
            && let Some(home) =
                cfg.lines().find_map(|l| l.strip_prefix("home").map(|v| v.trim_start_matches([' ', '='])))
            && let Some(prefix) = Path::new(home.trim()).parent()
            && prefix.components().count() > 2
            && cache.as_deref().is_none_or(|cache| !cache.starts_with(prefix))
        {
            c.read_exec.push(prefix.to_path_buf());
        }
    }
    c
}

/// The checkout a builder belongs to (`<root>/scripts/build-python-guest.sh`), if it is one's.
fn checkout_of(builder: &Path) -> Option<&Path> {
    builder.parent().filter(|dir| dir.file_name().is_some_and(|n| n == "scripts")).and_then(Path::parent)
}

/// `tessera guest prepare`: builds every model.py model of `repositories` (a model whose
/// config.pbtxt says `backend: "python"`, or that has none) into the cache, as a server would at
/// load, so that a first start only loads them. Returns the components, or the first failure.
pub fn prepare(repositories: &[PathBuf], options: &PythonOptions) -> Result<Vec<PathBuf>, String> {
    let guests = PythonGuests::new(options);
    let mut built = Vec::new();
    for repository in repositories {
        let models = std::fs::read_dir(repository).map_err(|e| format!("{}: {e}", repository.display()))?;
        let mut models: Vec<PathBuf> = models.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_dir()).collect();
        models.sort();
        for model in models {
            let config = model.join("config.pbtxt");
            let mut file = "model.py".to_string();
            if config.is_file() {
                let text = std::fs::read_to_string(&config).map_err(|e| format!("{}: {e}", config.display()))?;
                match crate::config::parse_pbtxt(&text, &config) {
                    Ok(parsed) if parsed.backend == "python" => {
                        if !parsed.default_model_filename.is_empty() {
                            crate::config::check_file_name("default_model_filename", &parsed.default_model_filename)
                                .map_err(|e| format!("{}: {e}", config.display()))?;
                            file = parsed.default_model_filename;
                        }
                    }
                    _ => continue,
                }
            }
            let name = model.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let mut versions: Vec<PathBuf> = std::fs::read_dir(&model)
                .map_err(|e| format!("{}: {e}", model.display()))?
                .filter_map(|e| e.ok().map(|e| e.path().join(&file)))
                .filter(|p| p.is_file())
                .collect();
            versions.sort();
            for model_py in versions {
                built.push(guests.component(&model_py, &name).map_err(|e| e.message)?);
            }
        }
    }
    Ok(built)
}

/// A directory of this process's own, for built guests when no cache can be kept.
fn private_cache_dir() -> PathBuf {
    std::env::temp_dir().join(format!("tessera-python-guests-{}", std::process::id()))
}

pub struct PythonBackend {
    wasm: Arc<WasmBackend>,
    guests: PythonGuests,
    allowed_models: Option<String>,
}

impl PythonBackend {
    pub fn new(wasm: Arc<WasmBackend>, options: PythonOptions) -> Self {
        Self { wasm, guests: PythonGuests::new(&options), allowed_models: options.allowed_models }
    }

    /// The config the Wasm backend sandboxes the model by: `--python-allowed-models` as the
    /// model's allow-list, narrowed by its own `allowed_models`.
    fn sandboxed_config(&self, config: &ModelConfig) -> ModelConfig {
        let mut config = config.clone();
        if let Some(default) = &self.allowed_models {
            let own = config.parameters.get("allowed_models").map(|p| p.string_value.clone());
            let effective = match own {
                None => default.clone(),
                Some(own) => narrow(default, &own),
            };
            config
                .parameters
                .insert("allowed_models".into(), crate::config::pb::ModelParameter { string_value: effective });
        }
        config
    }
}

/// Triton's parameter naming a conda-pack environment for the model.
const EXECUTION_ENV_PATH: &str = "EXECUTION_ENV_PATH";

/// Refuses what a guest cannot honour, before anything is built: `EXECUTION_ENV_PATH` (a
/// conda-pack archive holds a CPython and native packages for the host, which cannot run in a
/// guest; the guest's environment is built from requirements.txt instead).
fn check_config(config: &ModelConfig) -> CoreResult<()> {
    if config.parameters.get(EXECUTION_ENV_PATH).is_some_and(|p| !p.string_value.trim().is_empty()) {
        return Err(CoreError::invalid_arg(format!(
            "parameter '{EXECUTION_ENV_PATH}' (a conda-pack environment) is not supported: the server builds the \
             model's Python environment into its WebAssembly guest. Remove the parameter and list the model's \
             pure-Python dependencies in requirements.txt beside the model file (name==version lines; numpy is \
             built in); packages with native code other than numpy cannot run in a guest"
        )));
    }
    Ok(())
}

/// The models both allow-lists allow (`*` allows any), as an `allowed_models` value.
fn narrow(server: &str, model: &str) -> String {
    AllowList::parse(server).narrowed_by(&AllowList::parse(model)).to_parameter()
}

impl Backend for PythonBackend {
    fn kind(&self) -> BackendKind {
        BackendKind { name: "python", platforms: &["python"], default_model_filename: "model.py" }
    }

    fn gpu_support(&self) -> Result<(), String> {
        self.wasm.gpu_support()
    }

    /// Triton's auto-complete: the model's own `auto_complete_config`, run in the guest.
    fn autocomplete(&self, config: &mut ModelConfig, model_path: &Path) -> CoreResult<()> {
        check_config(config)?;
        let (component, _pinned) = self.guests.component_pinned(model_path, &config.name)?;
        let version_dir = model_path.parent().unwrap_or(Path::new("."));
        if let Some(completed) = self.wasm.auto_complete(&component, config, version_dir)? {
            *config = completed;
        }
        if config.backend.is_empty() && config.platform.is_empty() {
            config.backend = self.name().to_string();
        }
        Ok(())
    }

    fn create_instance(&self, ctx: &InstanceContext<'_>) -> CoreResult<Box<dyn ModelInstance>> {
        check_config(ctx.config)?;
        let (component, _pinned) = self.guests.component_pinned(ctx.model_path, &ctx.config.name)?;
        let config = self.sandboxed_config(ctx.config);
        self.wasm.create_instance(&InstanceContext {
            config: &config,
            model_path: &component,
            // The built component is the server's own, never sealed.
            model_plaintext: None,
            instance_name: ctx.instance_name.clone(),
            ..*ctx
        })
    }

    fn prepare_outside_lock(&self, model: &str, model_path: &Path) -> CoreResult<()> {
        match self.guests.component(model_path, model) {
            Err(e) if e.kind == ErrorKind::Cancelled => Err(e),
            // A failure is remembered for the load under the lock, which reports it.
            _ => Ok(()),
        }
    }

    fn cancel_preparation(&self, model: Option<&str>) {
        self.guests.cancel(model);
    }

    fn begin_preparation(&self, dir: &Path) {
        self.guests.forget(dir);
    }

    fn preparations_at_once(&self) -> usize {
        self.guests.slots.jobs()
    }
}

/// The builder script's hash and, for the checkout's builder, that of what it builds with: the
/// Python SDK, `wit/`, the scripts it calls and the pinned componentize-py (of
/// `tests/requirements.txt` only that line: pinning a test client must not rebuild every guest).
fn builder_hash(script: &Path) -> String {
    let mut hash = Sha256::new();
    let mut files = vec![script.to_path_buf()];
    let root = script.parent().and_then(Path::parent);
    if let Some(root) = root {
        for name in [
            "scripts/python_guest_deps.py",
            "scripts/build-numpy-wasi.sh",
            "scripts/numpy_wasi.py",
            "tests/requirements.txt",
        ] {
            files.push(root.join(name));
        }
        for dir in ["guest-sdk/python/tessera_guest", "guest-sdk/python", "wit"] {
            let mut found: Vec<PathBuf> = std::fs::read_dir(root.join(dir))
                .into_iter()
                .flatten()
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "py" || e == "wit"))
                .collect();
            found.sort();
            files.extend(found);
        }
    }
    // Paths relative to the checkout: two clones of one commit share their builds.
    let root = root.unwrap_or(Path::new("/"));
    for file in files {
        hash.update(file.strip_prefix(root).unwrap_or(&file).to_string_lossy().as_bytes());
        if let Ok(bytes) = std::fs::read(&file) {
            if file.ends_with("tests/requirements.txt") {
                let pins = bytes.split(|b| *b == b'\n').filter(|line| line.starts_with(b"componentize-py"));
                pins.for_each(|line| hash.update(line));
            } else {
                hash.update(&bytes);
            }
        }
    }
    hex(&hash.finalize())
}

#[cfg(test)]
mod tests;
