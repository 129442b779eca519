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
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::child::drain_within;
use super::wasm::{AllowList, WasmBackend};
use super::{Backend, InstanceContext, ModelInstance};
use crate::config::ModelConfig;
use crate::error::{CoreError, CoreResult};

/// How the server builds and sandboxes models served from `model.py`.
#[derive(Clone, Debug)]
pub struct PythonOptions {
    /// The builder: run as `bash BUILDER VERSION_DIR OUT.wasm`. `None`: model.py models fail to
    /// load, saying how to name one.
    pub builder: Option<PathBuf>,
    /// Where built components are kept; `None`: a directory of this process's own.
    pub cache_dir: Option<PathBuf>,
    /// A build still running after this long is stopped and its model fails to load.
    pub build_timeout: Duration,
    /// The BLS allow-list of model.py models (`allowed_models` syntax: `*` or a comma list);
    /// `None`: only what each model's own `allowed_models` parameter lists.
    pub allowed_models: Option<String>,
}

impl Default for PythonOptions {
    fn default() -> Self {
        Self {
            builder: default_builder(),
            cache_dir: default_cache_dir(),
            build_timeout: Duration::from_secs(900),
            allowed_models: None,
        }
    }
}

/// `$XDG_CACHE_HOME/tessera/python-guests`, else `~/.cache/tessera/python-guests`: apart from
/// the compiled components (`--wasm-cache-dir`), so that servers with caches of their own share
/// the builds, which take much longer than compiles.
pub fn default_cache_dir() -> Option<PathBuf> {
    super::wasm::default_cache_dir().and_then(|wasm| wasm.parent().map(|dir| dir.join("python-guests")))
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
    timeout: Duration,
    /// One build of a given model at a time (two instances loading at once build once).
    building: Mutex<HashMap<String, Arc<Mutex<()>>>>,
}

impl PythonGuests {
    pub fn new(options: &PythonOptions) -> Self {
        let builder_hash = options.builder.as_deref().map(builder_hash);
        let cache_dir = options.cache_dir.clone().unwrap_or_else(private_cache_dir);
        Self {
            builder: options.builder.clone(),
            builder_hash,
            cache_dir,
            timeout: options.build_timeout,
            building: Mutex::default(),
        }
    }

    /// The component built from the version directory holding `model_py`, building it if the
    /// cache has none. A server without a builder (the OCI image has none) serves the
    /// `model.wasm` beside `model.py` instead, built elsewhere by `tessera guest build`: the source
    /// is the truth wherever it can be built, so a server with a builder ignores that file.
    pub fn component(&self, model_py: &Path) -> CoreResult<PathBuf> {
        let (Some(builder), Some(builder_hash)) = (&self.builder, &self.builder_hash) else {
            let prebuilt = model_py.with_file_name("model.wasm");
            if prebuilt.is_file() {
                tracing::info!(model = %prebuilt.display(), "no Python guest builder: serving the prebuilt component");
                return Ok(prebuilt);
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
        if !model_py.is_file() {
            return Err(CoreError::unavailable(format!("{} not found", model_py.display())));
        }
        let dir = model_py.parent().unwrap_or(Path::new("."));
        let key = source_hash(dir, builder_hash)?;
        let lock = {
            let mut building = self.building.lock().unwrap_or_else(|e| e.into_inner());
            Arc::clone(building.entry(key.clone()).or_default())
        };
        let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
        let cache_dir = self.usable_cache_dir()?;
        let out = cache_dir.join(format!("{key}.wasm"));
        if out.is_file() {
            return Ok(out);
        }
        let tmp = cache_dir.join(format!(".{key}.{}.wasm", std::process::id()));
        tracing::info!(model = %dir.display(), "building the Python guest (model.py -> component)");
        let started = std::time::Instant::now();
        run_builder(builder, dir, &tmp, self.timeout)
            .map_err(|e| CoreError::unavailable(format!("building {} failed: {e}", model_py.display())))?;
        std::fs::rename(&tmp, &out)
            .map_err(|e| CoreError::unavailable(format!("failed to keep the built {}: {e}", out.display())))?;
        tracing::info!(model = %dir.display(), seconds = started.elapsed().as_secs_f64(), "built the Python guest");
        Ok(out)
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
            if config.is_file() {
                let text = std::fs::read_to_string(&config).map_err(|e| format!("{}: {e}", config.display()))?;
                match crate::config::parse_pbtxt(&text, &config) {
                    Ok(parsed) if parsed.backend == "python" => {}
                    _ => continue,
                }
            }
            let mut versions: Vec<PathBuf> = std::fs::read_dir(&model)
                .map_err(|e| format!("{}: {e}", model.display()))?
                .filter_map(|e| e.ok().map(|e| e.path().join("model.py")))
                .filter(|p| p.is_file())
                .collect();
            versions.sort();
            for model_py in versions {
                built.push(guests.component(&model_py).map_err(|e| e.message)?);
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

/// The models both allow-lists allow (`*` allows any), as an `allowed_models` value.
fn narrow(server: &str, model: &str) -> String {
    AllowList::parse(server).narrowed_by(&AllowList::parse(model)).to_parameter()
}

impl Backend for PythonBackend {
    fn name(&self) -> &'static str {
        "python"
    }

    fn platforms(&self) -> &'static [&'static str] {
        &["python"]
    }

    fn default_model_filename(&self) -> &'static str {
        "model.py"
    }

    fn gpu_support(&self) -> Result<(), String> {
        self.wasm.gpu_support()
    }

    /// Triton's auto-complete: the model's own `auto_complete_config`, run in the guest.
    fn autocomplete(&self, config: &mut ModelConfig, model_path: &Path) -> CoreResult<()> {
        let component = self.guests.component(model_path)?;
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
        let component = self.guests.component(ctx.model_path)?;
        let config = self.sandboxed_config(ctx.config);
        self.wasm.create_instance(&InstanceContext {
            config: &config,
            model_path: &component,
            instance_name: ctx.instance_name.clone(),
            ..*ctx
        })
    }
}

/// The files of a version directory that a build reads (its Python modules and
/// requirements.txt, at the top level) hashed with the builder's hash.
fn source_hash(dir: &Path, builder_hash: &str) -> CoreResult<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| CoreError::unavailable(format!("failed to read {}: {e}", dir.display())))?
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|name| name.ends_with(".py") || name == "requirements.txt")
        .collect();
    names.sort();
    let mut hash = Sha256::new();
    hash.update(builder_hash.as_bytes());
    for name in names {
        let path = dir.join(&name);
        let bytes = std::fs::read(&path)
            .map_err(|e| CoreError::unavailable(format!("failed to read {}: {e}", path.display())))?;
        hash.update((name.len() as u64).to_le_bytes());
        hash.update(name.as_bytes());
        hash.update((bytes.len() as u64).to_le_bytes());
        hash.update(&bytes);
    }
    Ok(hex(&hash.finalize()))
}

/// The builder script's hash and, for the checkout's builder, that of what it builds with: the
/// Python SDK, `wit/`, the scripts it calls and the pinned tool versions.
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
            hash.update(&bytes);
        }
    }
    hex(&hash.finalize())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Runs the builder on `dir` writing `out`, within `timeout`; `Err` holds the end of what it
/// printed (its own message says what is wrong with the model).
fn run_builder(builder: &Path, dir: &Path, out: &Path, timeout: Duration) -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    let mut child = Command::new("bash")
        .arg(builder)
        .arg(dir)
        .arg(out)
        .stdin(Stdio::null())
        // componentize-py is Rust: a backtrace would bury the model's own error (a SyntaxError)
        .env("RUST_BACKTRACE", "0")
        .env("RUST_LIB_BACKTRACE", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("could not start {}: {e}", builder.display()))?;
    let group = child.id() as libc::pid_t;
    let (_, stdout, stderr, timed_out) = drain_within(&mut child, &[], timeout, |_| {
        // The builder's whole process group (it was started as its leader): componentize-py and
        // pip run as its children and hold its pipes. SAFETY: kill(2) touches no memory of this
        // process.
        #[allow(unsafe_code)]
        unsafe {
            libc::kill(-group, libc::SIGKILL);
        }
    });
    let status = child.wait();
    let printed = format!("{}{}", String::from_utf8_lossy(&stdout), String::from_utf8_lossy(&stderr));
    let tail = last_lines(&printed, 30);
    if timed_out {
        let _ = std::fs::remove_file(out);
        return Err(format!(
            "the build took longer than {}s (--python-guest-build-timeout-secs) and was stopped{}",
            timeout.as_secs(),
            if tail.is_empty() { String::new() } else { format!(":\n{tail}") }
        ));
    }
    match status {
        Ok(s) if s.success() && out.is_file() => Ok(()),
        Ok(s) => {
            let _ = std::fs::remove_file(out);
            Err(if tail.is_empty() { format!("the builder exited with {s}") } else { tail })
        }
        Err(e) => Err(format!("waiting for the builder: {e}")),
    }
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
#[path = "python_tests.rs"]
mod tests;
