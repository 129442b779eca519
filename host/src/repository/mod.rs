//! The model manager: owns the model repositories, versions and version policy, load / unload /
//! poll, readiness, and models registered from code. It implements [`Infer`], the one in-process
//! entry point: every caller (doors, BLS, the library API) runs models through it.
//!
//! Loads build a whole new set of versions off to the side and swap it in at the end, so requests
//! in flight keep the `Arc` of the version they started on and never fail because of a reload.
//!
//! Ensembles depend on other models: loading one first loads the composing models it needs, a
//! cycle between ensembles is refused, and after every change ([`ModelManager::refresh_ensembles`])
//! an ensemble is ready exactly while all of its steps are (the logic is in `dependencies`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::UNIX_EPOCH;

mod dependencies;
mod layout;

use layout::{fingerprint_dir, select_versions, version_dirs};

use crate::backend::{Backend, BackendRegistry};
use crate::cache::ResponseCache;
use crate::config::{self, ModelConfig};
use crate::error::{CoreError, CoreResult};
use crate::infer::{Infer, InferFuture, InferRequest, InferResponse, ResponseStream};
use crate::model::LoadedModel;
use crate::scheduler::ensemble::is_ensemble;
use crate::scheduler::rate_limit::RateLimiter;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ControlMode {
    None,
    Poll,
    Explicit,
}

#[derive(Debug, Clone)]
pub struct RepositoryOptions {
    pub repositories: Vec<PathBuf>,
    pub control_mode: ControlMode,
    /// When false, missing config.pbtxt or missing I/O are auto-completed from the model file.
    pub strict_config: bool,
    /// The server's response cache (`--cache-config local,size=N`), for models that enable it.
    pub response_cache: Option<Arc<ResponseCache>>,
    /// Triton's rate limiter (`--rate-limit execution_count`); `None` when off.
    pub rate_limiter: Option<Arc<RateLimiter>>,
    /// How many models load at once at startup (`--model-load-thread-count`; 0: one per CPU).
    pub load_threads: usize,
}

#[derive(Clone)]
pub enum VersionState {
    Ready(Arc<LoadedModel>),
    Unavailable(String),
}

/// What the repository index reports for one model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexEntry {
    pub name: String,
    pub version: Option<String>,
    pub state: Option<&'static str>,
    pub reason: String,
}

#[derive(Clone, Default)]
struct ModelEntry {
    versions: BTreeMap<i64, VersionState>,
    /// Set when the model as a whole failed (bad config, no versions): reported as UNAVAILABLE.
    error: Option<CoreError>,
    /// Set after an explicit unload: the model stays in the index as UNAVAILABLE "unloaded".
    unloaded: bool,
    /// Registered through the library API rather than found in a repository: polling keeps it.
    registered: bool,
    fingerprint: u64,
    /// For an ensemble: what rebuilding its versions needs when its steps come and go.
    ensemble: Option<dependencies::EnsembleSource>,
    /// Loaded only because an ensemble needed it (not asked for by name): unloading that
    /// ensemble with `unload_dependents` unloads it too, as Triton does.
    as_dependency: bool,
    /// Set when the model was loaded from `file:` overrides: their temporary directory, removed
    /// when this entry goes (unload, replacement by a later load).
    override_dir: Option<Arc<OverrideDir>>,
}

pub struct ModelManager {
    options: RepositoryOptions,
    backends: BackendRegistry,
    models: RwLock<BTreeMap<String, ModelEntry>>,
    /// Serialises load / unload / poll so two reloads of one model never interleave.
    control: tokio::sync::Mutex<()>,
    /// During the startup loads: the last load failure logged (with the model's name taken out)
    /// and how many loads since failed the same way, so that 10,000 models failing for one
    /// reason log it once, not 10,000 times. `None` otherwise: every failure is logged.
    startup_failures: std::sync::Mutex<Option<(String, usize)>>,
}

impl ModelManager {
    pub fn new(options: RepositoryOptions, backends: BackendRegistry) -> Self {
        Self {
            options,
            backends,
            models: RwLock::default(),
            control: tokio::sync::Mutex::new(()),
            startup_failures: std::sync::Mutex::default(),
        }
    }

    pub fn control_mode(&self) -> ControlMode {
        self.options.control_mode
    }

    /// Loads the models the control mode asks for at startup. Returns the failures, so the
    /// caller can honour `--exit-on-error`; models whose backend this binary was built without
    /// are not among them (they stay unavailable with that reason, and a warning names them).
    pub async fn load_startup_models(self: &Arc<Self>, explicit: &[String]) -> Vec<(String, String)> {
        let names: Vec<String> = match self.options.control_mode {
            ControlMode::Explicit if !explicit.iter().any(|n| n == "*") => explicit.to_vec(),
            _ => self.scan().into_keys().collect(),
        };
        let mut failures = Vec::new();
        let (names, invalid): (Vec<String>, Vec<String>) = names.into_iter().partition(|n| valid_name(n));
        for name in invalid {
            failures.push((name.clone(), format!("invalid model name '{name}'")));
        }
        // Models that are not ensembles load in parallel (as Triton's model load threads do);
        // ensembles after them, one by one, each after the composing models it needs.
        let (ensembles, plain): (Vec<String>, Vec<String>) =
            names.into_iter().partition(|name| self.locate(name).is_ok_and(|dir| mentions_ensemble(&dir)));
        if let Ok(mut startup) = self.startup_failures.lock() {
            *startup = Some(Default::default());
        }
        let threads = match self.options.load_threads {
            0 => std::thread::available_parallelism().map_or(1, usize::from),
            n => n,
        };
        {
            use futures_util::StreamExt;
            let _guard = self.control.lock().await;
            let mut loads = futures_util::stream::iter(plain)
                .map(|name| async move {
                    let outcome = self.load_one(&name, None, None).await;
                    (name, outcome)
                })
                .buffer_unordered(threads);
            while let Some((name, outcome)) = loads.next().await {
                if let Err(e) = outcome {
                    failures.push((name, e.message));
                }
            }
        }
        self.refresh_ensembles(None);
        for name in ensembles {
            // Already loaded in this pass as an ensemble's composing model.
            if self.models.read().is_ok_and(|m| m.contains_key(&name)) {
                continue;
            }
            if let Err(e) = self.load(&name, None).await {
                failures.push((name, e.message));
            }
        }
        self.flush_failures();
        failures.sort();
        let (left_out, failures): (Vec<_>, Vec<_>) =
            failures.into_iter().partition(|(name, _)| self.missing_from_build(name).is_some());
        if let Some(reason) = left_out.first().and_then(|(name, _)| self.missing_from_build(name)) {
            let names: Vec<&str> = left_out.iter().map(|(name, _)| name.as_str()).collect();
            tracing::warn!(
                "{} model(s) need a backend this binary was built without and stay unavailable, serving the \
                 rest: {} ({reason})",
                names.len(),
                names.join(", ")
            );
        }
        failures
    }

    /// Model directories present in the repositories (name -> directory). A name found in two
    /// repositories maps to the first; `load` reports the conflict.
    fn scan(&self) -> BTreeMap<String, PathBuf> {
        let mut found = BTreeMap::new();
        for repo in &self.options.repositories {
            let Ok(entries) = std::fs::read_dir(repo) else {
                tracing::warn!(repository = %repo.display(), "model repository is not readable");
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                let Some(name) = path.file_name().and_then(|n| n.to_str()).map(str::to_owned) else { continue };
                if path.is_dir() && !name.starts_with('.') {
                    found.entry(name).or_insert(path);
                }
            }
        }
        found
    }

    /// Where a load reads the model from: its override directory, else its repository directory.
    fn source_dir(&self, name: &str, override_dir: Option<&OverrideDir>) -> CoreResult<PathBuf> {
        match override_dir {
            Some(o) => Ok(o.path.clone()),
            None => self.locate(name),
        }
    }

    fn locate(&self, name: &str) -> CoreResult<PathBuf> {
        let dirs: Vec<PathBuf> =
            self.options.repositories.iter().map(|r| r.join(name)).filter(|p| p.is_dir()).collect();
        match dirs.as_slice() {
            [] => Err(CoreError::internal(format!("failed to load '{name}', failed to poll from model repository"))),
            [one] => Ok(one.clone()),
            _ => Err(CoreError::invalid_arg(format!(
                "failed to load '{name}': model appears in more than one model repository ({})",
                dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
            ))),
        }
    }

    /// Loads (or reloads) a model with every version its policy selects. `config_override` is
    /// the load endpoint's JSON `config` parameter, used instead of config.pbtxt.
    pub async fn load(self: &Arc<Self>, name: &str, config_override: Option<String>) -> CoreResult<()> {
        if !valid_name(name) {
            return Err(CoreError::invalid_arg(format!("invalid model name '{name}'")));
        }
        let _guard = self.control.lock().await;
        let outcome = self.load_locked(name, config_override, None).await;
        self.refresh_ensembles(Some(name));
        outcome
    }

    /// Triton's load with file overrides: `files` (`file:<path>` parameters, paths relative to
    /// the model directory such as `1/model.onnx`) are written to a new temporary directory
    /// that stands in for the model's repository directory, with `config` (JSON) as its
    /// configuration. The directory lives as long as the model: it is removed on unload, when a
    /// later load replaces the model, and at once if this load fails. As in Triton, the client
    /// only learns "failed to poll from model repository" for a bad override; the reason is
    /// logged.
    pub async fn load_override(
        self: &Arc<Self>,
        name: &str,
        config: Option<String>,
        files: Vec<(String, Vec<u8>)>,
    ) -> CoreResult<()> {
        if !valid_name(name) {
            return Err(CoreError::invalid_arg(format!("invalid model name '{name}'")));
        }
        let poll_failed =
            || CoreError::internal(format!("failed to load '{name}', failed to poll from model repository"));
        let Some(config) = config else {
            tracing::error!(
                model = name,
                "Poll failed for model directory '{name}': Load parameter 'config' must be specified for model file \
                override"
            );
            return Err(poll_failed());
        };
        let dir = match OverrideDir::create(name, &files) {
            Ok(dir) => Arc::new(dir),
            Err(reason) => {
                tracing::error!(model = name, "Poll failed for model directory '{name}': {reason}");
                return Err(poll_failed());
            }
        };
        let _guard = self.control.lock().await;
        let outcome = self.load_locked(name, Some(config), Some(dir)).await;
        self.refresh_ensembles(Some(name));
        outcome
    }

    /// `load` under the control lock: an ensemble's missing composing models load first.
    async fn load_locked(
        self: &Arc<Self>,
        name: &str,
        config_override: Option<String>,
        override_dir: Option<Arc<OverrideDir>>,
    ) -> CoreResult<()> {
        let dir = self.source_dir(name, override_dir.as_deref())?;
        let mut order = Vec::new();
        if let Err(cycle) = self.missing_dependencies(name, &dir, config_override.as_deref(), &mut order) {
            let entry =
                ModelEntry { error: Some(cycle.clone()), fingerprint: fingerprint_dir(&dir), ..Default::default() };
            if let Ok(mut models) = self.models.write() {
                models.insert(name.to_string(), entry);
            }
            tracing::error!(model = name, "failed to load model: {}", cycle.message);
            return Err(CoreError::invalid_arg(format!("load failed for model '{name}': {}", cycle.message)));
        }
        for dependency in order {
            // Its own failure shows in the ensemble's message ("not available").
            if Box::pin(self.load_one(&dependency, None, None)).await.is_ok()
                && let Ok(mut models) = self.models.write()
                && let Some(entry) = models.get_mut(&dependency)
            {
                entry.as_dependency = true;
            }
        }
        self.load_one(name, config_override, override_dir).await
    }

    /// Loads one model directory (no dependencies) and swaps it in.
    async fn load_one(
        self: &Arc<Self>,
        name: &str,
        config_override: Option<String>,
        override_dir: Option<Arc<OverrideDir>>,
    ) -> CoreResult<()> {
        let dir = self.source_dir(name, override_dir.as_deref())?;
        let this = Arc::clone(self);
        let model_name = name.to_string();
        let mut entry =
            tokio::task::spawn_blocking(move || this.build_entry(&model_name, &dir, config_override.as_deref()))
                .await
                .map_err(|e| CoreError::internal(format!("model load task failed: {e}")))?;
        entry.override_dir = override_dir;
        let outcome = entry_outcome(name, &entry);
        if let Ok(mut models) = self.models.write() {
            match models.get_mut(name) {
                // As Triton: a failed reload leaves the versions already serving in place. The new
                // fingerprint is kept so polling does not retry the same broken files forever.
                Some(current)
                    if outcome.is_err() && current.versions.values().any(|s| matches!(s, VersionState::Ready(_))) =>
                {
                    current.fingerprint = entry.fingerprint;
                }
                _ => {
                    models.insert(name.to_string(), entry);
                }
            }
        }
        match &outcome {
            Ok(()) => tracing::info!(model = name, "model loaded"),
            Err(e) => self.log_failure(name, &e.message),
        }
        outcome
    }

    /// Logs a load failure, unless the previous one failed the same way: those are counted, and
    /// the count is logged with the next different failure or [`Self::flush_failures`].
    fn log_failure(&self, name: &str, message: &str) {
        if let Ok(mut startup) = self.startup_failures.lock()
            && let Some(last) = startup.as_mut()
        {
            let reason = message.replace(&format!("'{name}'"), "'<model>'").replace(&format!("/{name}/"), "/<model>/");
            if last.0 == reason {
                last.1 += 1;
                tracing::debug!(model = name, "failed to load model: {message}");
                return;
            }
            log_repeats(last);
            *last = (reason, 0);
        }
        tracing::error!(model = name, "failed to load model: {message}");
    }

    /// Logs how many startup loads repeated the last failure, and stops counting repeats.
    fn flush_failures(&self) {
        if let Ok(mut startup) = self.startup_failures.lock()
            && let Some(last) = startup.take()
        {
            log_repeats(&last);
        }
    }

    /// Unloads a model. Ensembles that use it become unavailable until it is loaded again. With
    /// `unload_dependents` (Triton's repository unload parameter), unloading an ensemble also
    /// unloads the composing models that were loaded only for it and that no other loaded
    /// ensemble uses, as Triton's repository manager does (its `qa/L0_lifecycle` checks this).
    pub async fn unload(self: &Arc<Self>, name: &str, unload_dependents: bool) -> CoreResult<()> {
        let _guard = self.control.lock().await;
        let mut names = vec![name.to_string()];
        if unload_dependents {
            names.extend(self.unneeded_dependencies(name));
        }
        {
            let mut models = self.models.write().map_err(|_| CoreError::internal("model table poisoned"))?;
            for name in &names {
                // Triton answers 200 for unloading a model that is not loaded.
                let Some(entry) = models.get_mut(name) else { continue };
                for state in entry.versions.values_mut() {
                    *state = VersionState::Unavailable("unloaded".into());
                }
                entry.error = None;
                entry.unloaded = true;
                // The versions are gone: so are the files an override load wrote for them.
                entry.override_dir = None;
                tracing::info!(model = name.as_str(), "model unloaded");
            }
        }
        self.refresh_ensembles(None);
        Ok(())
    }

    /// Serves a model that is not a repository directory (the library API): the config is
    /// normalised and validated as a config.pbtxt would be, and `backend` creates its instances.
    /// It is served as `version`, beside the other registered versions of that name (replacing
    /// the same version, or a repository model of that name).
    pub async fn register(
        self: &Arc<Self>,
        config: ModelConfig,
        version: i64,
        backend: Arc<dyn Backend>,
    ) -> CoreResult<()> {
        let mut config = config;
        let name = config.name.clone();
        if !valid_name(&name) {
            return Err(CoreError::invalid_arg(format!("invalid model name '{name}'")));
        }
        if version < 1 {
            return Err(CoreError::invalid_arg(format!(
                "invalid version {version} for model '{name}': versions are positive integers"
            )));
        }
        if let Some(field) = file_reference(&config) {
            return Err(CoreError::invalid_arg(format!(
                "model '{name}' is registered without a model directory, so its config cannot name files ({field})"
            )));
        }
        config::normalize(&mut config);
        if config.backend.is_empty() {
            config.backend = backend.name().to_string();
        }
        config::validate(&config, &name).map_err(|e| CoreError::invalid_arg(e.to_string()))?;
        let _guard = self.control.lock().await;
        let cache = self.options.response_cache.clone();
        let limiter = self.options.rate_limiter.clone();
        let loaded = tokio::task::spawn_blocking(move || {
            LoadedModel::load(config, version, backend.as_ref(), Path::new(""), Path::new(""), limiter.as_ref())
                .map(|m| m.with_response_cache(cache))
        })
        .await
        .map_err(|e| CoreError::internal(format!("model load task failed: {e}")))?
        .map_err(|e| CoreError::invalid_arg(format!("load failed for model '{name}': {}", e.message)))?;
        let ready = VersionState::Ready(Arc::new(loaded));
        {
            let mut models = self.models.write().map_err(|_| CoreError::internal("model table poisoned"))?;
            match models.get_mut(&name) {
                // Another version of a registered model: served beside the ones already there.
                Some(entry) if entry.registered && !entry.unloaded => {
                    entry.versions.insert(version, ready);
                }
                _ => {
                    let versions = BTreeMap::from([(version, ready)]);
                    models.insert(name.clone(), ModelEntry { versions, registered: true, ..Default::default() });
                }
            }
        }
        tracing::info!(model = name.as_str(), "model registered");
        self.refresh_ensembles(Some(&name));
        Ok(())
    }

    /// Poll mode: loads new or changed models and removes models whose directory is gone.
    pub async fn poll(self: &Arc<Self>) {
        let present = self.scan();
        let known: BTreeMap<String, u64> = match self.models.read() {
            Ok(models) => {
                models.iter().filter(|(_, e)| !e.registered).map(|(n, e)| (n.clone(), e.fingerprint)).collect()
            }
            Err(_) => return,
        };
        for (name, fingerprint) in &known {
            if !present.contains_key(name) {
                tracing::info!(model = name.as_str(), "model directory removed; unloading");
                if let Ok(mut models) = self.models.write() {
                    models.remove(name);
                }
                self.refresh_ensembles(None);
            } else if let Some(dir) = present.get(name)
                && fingerprint_dir(dir) != *fingerprint
            {
                tracing::info!(model = name.as_str(), "model changed on disk; reloading");
                let _ = self.load(name, None).await;
            }
        }
        let registered = |name: &str| self.models.read().is_ok_and(|m| m.get(name).is_some_and(|e| e.registered));
        for name in present.keys().filter(|n| !known.contains_key(*n) && !registered(n)) {
            tracing::info!(model = name.as_str(), "new model found; loading");
            let _ = self.load(name, None).await;
        }
    }

    fn build_entry(self: &Arc<Self>, name: &str, dir: &Path, config_override: Option<&str>) -> ModelEntry {
        let fingerprint = fingerprint_dir(dir);
        let mut entry = ModelEntry { fingerprint, ..Default::default() };
        let (config, versions) = match self.prepare_config(name, dir, config_override) {
            Ok(prepared) => prepared,
            Err(e) => {
                entry.error = Some(e);
                return entry;
            }
        };
        if is_ensemble(&config) {
            let source = dependencies::EnsembleSource { config, dir: dir.to_path_buf() };
            for version in versions {
                entry.versions.insert(version, self.build_ensemble(&source, version));
            }
            entry.ensemble = Some(source);
            return entry;
        }
        let backend = match self.backends.resolve(&config, None) {
            Ok(b) => b,
            Err(e) => {
                entry.error = Some(e);
                return entry;
            }
        };
        // Triton's normalisation: /config shows the backend and file it actually uses.
        let mut config = config;
        if config.backend.is_empty() {
            config.backend = backend.name().to_string();
        }
        if config.default_model_filename.is_empty() {
            config.default_model_filename = backend.default_model_filename().to_string();
        }
        for version in versions {
            let version_dir = dir.join(version.to_string());
            let file = model_filename(&config, backend.default_model_filename());
            let state = LoadedModel::load(
                config.clone(),
                version,
                backend.as_ref(),
                dir,
                &version_dir.join(file),
                self.options.rate_limiter.as_ref(),
            )
            .map(|m| VersionState::Ready(Arc::new(m.with_response_cache(self.options.response_cache.clone()))))
            .unwrap_or_else(|e| VersionState::Unavailable(e.message));
            entry.versions.insert(version, state);
        }
        entry
    }

    /// Reads, auto-completes, normalises and validates the config; returns it with the versions
    /// its policy selects.
    fn prepare_config(
        &self,
        name: &str,
        dir: &Path,
        config_override: Option<&str>,
    ) -> CoreResult<(ModelConfig, Vec<i64>)> {
        let config_path = dir.join("config.pbtxt");
        let mut config = match config_override {
            // Unparsable configs are INTERNAL errors in Triton ("failed to poll from model repository").
            Some(json) => config::parse_json(json).map_err(|e| CoreError::internal(e.to_string()))?,
            None if config_path.is_file() => {
                let text = std::fs::read_to_string(&config_path)
                    .map_err(|e| CoreError::internal(format!("failed to read {}: {e}", config_path.display())))?;
                config::parse_pbtxt(&text, &config_path).map_err(|e| CoreError::internal(e.to_string()))?
            }
            None if self.options.strict_config => {
                return Err(CoreError::invalid_arg(format!(
                    "model configuration file {} is missing (auto-complete is disabled by --strict-model-config=true)",
                    config_path.display()
                )));
            }
            None => ModelConfig::default(),
        };
        if config.name.is_empty() {
            config.name = name.to_string();
        }
        let available = version_dirs(dir);
        config::normalize(&mut config);
        let versions = select_versions(&config, &available);
        if versions.is_empty() {
            return Err(CoreError::invalid_arg(format!(
                "model '{name}' has no version directory that its version policy selects (found: {:?})",
                available
            )));
        }
        if !self.options.strict_config && !is_ensemble(&config) {
            let backend =
                self.backends.resolve(&config, versions.last().map(|v| dir.join(v.to_string())).as_deref())?;
            if let Some(latest) = versions.last() {
                let path = dir.join(latest.to_string()).join(model_filename(&config, backend.default_model_filename()));
                if path.exists() {
                    backend.autocomplete(&mut config, &path)?;
                }
            }
        }
        config::validate(&config, name).map_err(|e| CoreError::invalid_arg(e.to_string()))?;
        Ok((config, versions))
    }

    /// The model version to serve a request: the given version, or the newest ready one.
    pub fn get(&self, name: &str, version: Option<i64>) -> CoreResult<Arc<LoadedModel>> {
        let models = self.models.read().map_err(|_| CoreError::internal("model table poisoned"))?;
        lookup(&models, name, version)
    }
}

/// The model version to serve a request, in a model table.
fn lookup(models: &BTreeMap<String, ModelEntry>, name: &str, version: Option<i64>) -> CoreResult<Arc<LoadedModel>> {
    {
        let entry = models.get(name).ok_or_else(|| CoreError::unknown_model(name))?;
        match version {
            Some(v) => match entry.versions.get(&v) {
                Some(VersionState::Ready(model)) => Ok(Arc::clone(model)),
                Some(VersionState::Unavailable(_)) => Err(CoreError::unavailable(format!(
                    "Request for unknown model: '{name}' version {v} is not at ready state"
                ))),
                None => {
                    Err(CoreError::not_found(format!("Request for unknown model: '{name}' version {v} is not found")))
                }
            },
            None => entry
                .versions
                .values()
                .rev()
                .find_map(|s| match s {
                    VersionState::Ready(m) => Some(Arc::clone(m)),
                    VersionState::Unavailable(_) => None,
                })
                .ok_or_else(|| {
                    CoreError::not_found(format!("Request for unknown model: '{name}' has no available versions"))
                }),
        }
    }
}

impl ModelManager {
    /// Every ready version, oldest first (for `/v2/models/stats`).
    pub fn ready_models(&self) -> Vec<Arc<LoadedModel>> {
        let Ok(models) = self.models.read() else { return Vec::new() };
        models
            .values()
            .flat_map(|e| e.versions.values())
            .filter_map(|s| match s {
                VersionState::Ready(m) => Some(Arc::clone(m)),
                VersionState::Unavailable(_) => None,
            })
            .collect()
    }

    /// Ready versions of one model, oldest first; NotFound for an unknown model.
    pub fn ready_versions(&self, name: &str) -> CoreResult<Vec<Arc<LoadedModel>>> {
        let models = self.models.read().map_err(|_| CoreError::internal("model table poisoned"))?;
        let entry = models.get(name).ok_or_else(|| CoreError::unknown_model(name))?;
        Ok(entry
            .versions
            .values()
            .filter_map(|s| match s {
                VersionState::Ready(m) => Some(Arc::clone(m)),
                VersionState::Unavailable(_) => None,
            })
            .collect())
    }

    /// Triton's strict readiness: every model that was loaded (and not unloaded) has all its
    /// versions ready.
    pub fn all_ready(&self) -> bool {
        let Ok(models) = self.models.read() else { return false };
        models.values().filter(|e| !e.unloaded).all(|e| {
            e.error.is_none()
                && !e.versions.is_empty()
                && e.versions.values().all(|s| matches!(s, VersionState::Ready(_)))
        })
    }

    /// The repository index: every model directory, with the state of each known version.
    pub fn index(&self, ready_only: bool) -> Vec<IndexEntry> {
        let on_disk: BTreeSet<String> = self.scan().into_keys().collect();
        let Ok(models) = self.models.read() else { return Vec::new() };
        let mut names: BTreeSet<&String> = on_disk.iter().collect();
        names.extend(models.keys());
        let mut out = Vec::new();
        for name in names {
            let Some(entry) = models.get(name) else {
                if !ready_only {
                    out.push(IndexEntry { name: name.clone(), version: None, state: None, reason: String::new() });
                }
                continue;
            };
            if let Some(error) = &entry.error {
                if !ready_only {
                    out.push(IndexEntry {
                        name: name.clone(),
                        version: None,
                        state: Some("UNAVAILABLE"),
                        reason: error.message.clone(),
                    });
                }
                continue;
            }
            for (version, state) in &entry.versions {
                let (state, reason) = match state {
                    VersionState::Ready(_) => ("READY", String::new()),
                    VersionState::Unavailable(reason) => ("UNAVAILABLE", reason.clone()),
                };
                if ready_only && state != "READY" {
                    continue;
                }
                out.push(IndexEntry {
                    name: name.clone(),
                    version: Some(version.to_string()),
                    state: Some(state),
                    reason,
                });
            }
        }
        out
    }
}

impl Infer for ModelManager {
    fn infer(&self, request: InferRequest) -> InferFuture<'_, InferResponse> {
        Box::pin(async move {
            let model = self.get(&request.model_name, request.model_version)?;
            model.infer(request).await
        })
    }

    fn infer_stream(&self, request: InferRequest) -> InferFuture<'_, ResponseStream> {
        Box::pin(async move {
            let model = self.get(&request.model_name, request.model_version)?;
            model.infer_stream(request).await
        })
    }

    fn check_ready(&self, model: &str, version: Option<i64>) -> CoreResult<()> {
        self.get(model, version).map(drop)
    }
}

/// The first config field that names a file in the model directory, if any.
fn file_reference(config: &ModelConfig) -> Option<&'static str> {
    use crate::config::pb::model_config::SchedulingChoice;
    use crate::config::pb::model_sequence_batching::initial_state::StateData;
    use crate::config::pb::model_warmup::input::InputDataType;
    if config.output.iter().any(|o| !o.label_filename.is_empty()) {
        return Some("label_filename");
    }
    let warmup_file =
        |i: &crate::config::pb::model_warmup::Input| matches!(i.input_data_type, Some(InputDataType::InputDataFile(_)));
    if config.model_warmup.iter().any(|w| w.inputs.values().any(warmup_file)) {
        return Some("model_warmup input_data_file");
    }
    if let Some(SchedulingChoice::SequenceBatching(sb)) = &config.scheduling_choice
        && sb.state.iter().flat_map(|s| &s.initial_state).any(|i| matches!(i.state_data, Some(StateData::DataFile(_))))
    {
        return Some("initial_state data_file");
    }
    None
}

/// How many loads repeated a logged failure, if any did.
fn log_repeats(last: &(String, usize)) {
    if last.1 > 0 {
        tracing::error!("{} more model(s) failed to load the same way: {}", last.1, last.0);
    }
}

/// A name that can be a model directory's: not empty, no `/`, not `.` or `..`.
fn valid_name(name: &str) -> bool {
    !(name.is_empty() || name.contains('/') || name == "." || name == "..")
}

/// Whether a model directory's config.pbtxt mentions an ensemble (a cheap test that sends every
/// ensemble, and perhaps a model with "ensemble" in a comment, to the one-by-one startup loads).
fn mentions_ensemble(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("config.pbtxt")).is_ok_and(|text| text.contains("ensemble"))
}

fn entry_outcome(name: &str, entry: &ModelEntry) -> CoreResult<()> {
    if let Some(error) = &entry.error {
        return Err(if error.kind == crate::error::ErrorKind::Internal {
            CoreError::internal(format!(
                "failed to load '{name}', failed to poll from model repository: {}",
                error.message
            ))
        } else {
            CoreError::invalid_arg(format!("load failed for model '{name}': {}", error.message))
        });
    }
    let failures: Vec<String> = entry
        .versions
        .iter()
        .filter_map(|(v, s)| match s {
            VersionState::Unavailable(reason) => Some(format!("version {v} is at UNAVAILABLE state: {reason}")),
            VersionState::Ready(_) => None,
        })
        .collect();
    if failures.is_empty() {
        Ok(())
    } else {
        Err(CoreError::invalid_arg(format!("load failed for model '{name}': {}", failures.join("; "))))
    }
}

fn model_filename<'a>(config: &'a ModelConfig, default: &'a str) -> &'a str {
    if config.default_model_filename.is_empty() { default } else { &config.default_model_filename }
}

/// The temporary directory of a load with file overrides; removed when dropped.
#[derive(Debug)]
pub(crate) struct OverrideDir {
    path: PathBuf,
}

impl OverrideDir {
    /// Writes `files` (relative paths) into a new directory under the system's temporary
    /// directory. The error is Triton's wording for what was wrong.
    fn create(model: &str, files: &[(String, Vec<u8>)]) -> Result<Self, String> {
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let root = std::env::temp_dir();
        let path = loop {
            let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let nanos = std::time::SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
            let candidate = root.join(format!("tessera-override-{}-{n}-{nanos:08x}", std::process::id()));
            match std::fs::create_dir(&candidate) {
                Ok(()) => break candidate,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(format!("failed to create a directory for model '{model}': {e}")),
            }
        };
        // From here on, a failure removes what was written.
        let dir = Self { path };
        for (key, contents) in files {
            let relative = key.strip_prefix("file:").unwrap_or(key);
            let target = dir.contained(relative).ok_or_else(|| {
                format!(
                    "Invalid file parameter '{key}' with normalized path '{}' must stay within model directory.",
                    dir.path.join(relative).display()
                )
            })?;
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|_| format!("Invalid file parameter '{key}', directory has been created as a file"))?;
            }
            std::fs::write(&target, contents).map_err(|e| format!("failed to write file parameter '{key}': {e}"))?;
        }
        Ok(dir)
    }

    /// `relative` under this directory, if it names a file inside it (no `..`, no absolute path).
    fn contained(&self, relative: &str) -> Option<PathBuf> {
        use std::path::Component;
        let mut path = self.path.clone();
        let mut depth = 0usize;
        for part in Path::new(relative).components() {
            match part {
                Component::Normal(p) => {
                    path.push(p);
                    depth += 1;
                }
                Component::CurDir => {}
                Component::ParentDir if depth > 0 => {
                    path.pop();
                    depth -= 1;
                }
                _ => return None,
            }
        }
        (depth > 0).then_some(path)
    }
}

impl Drop for OverrideDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            tracing::warn!(path = %self.path.display(), "could not remove a model override directory: {e}");
        }
    }
}
