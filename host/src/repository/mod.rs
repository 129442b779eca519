//! The model manager: owns the model repositories, versions and version policy, load / unload /
//! poll, readiness, and models registered from code. It implements [`Infer`], running a model by
//! name, for the callers below the doors (BLS, ensemble steps) and the library API; the doors
//! resolve a version through the frontend instead (`Frontend::model`) and run requests on it.
//!
//! Loads build a whole new set of versions off to the side and swap it in at the end, so requests
//! in flight keep the `Arc` of the version they started on and never fail because of a reload.
//!
//! Ensembles depend on other models: loading one first loads the composing models it needs, a
//! cycle between ensembles is refused, and after every change ([`ModelManager::refresh_ensembles`])
//! an ensemble is ready exactly while all of its steps are (the logic is in `dependencies`).
//!
//! Files by job: `scan` (where models are on disk) and `layout` (version directories, policy,
//! fingerprints) read the repositories; this file loads, unloads, polls and registers; `startup`
//! runs the loads a server starts with; `index` answers readiness and the repository index;
//! `overrides` holds a load's file overrides.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

mod dependencies;
mod index;
mod layout;
mod overrides;
mod prepare;
mod scan;
mod startup;
mod state;

use layout::{fingerprint_dir, select_versions, version_dirs};
use overrides::OverrideDir;
use scan::check_name;
/// Triton's checks of a name given to load (`ValidateModelName`).
pub(crate) use scan::check_name as check_model_name;
use state::ModelState;
pub use state::VersionState;

use crate::backend::{Backend, BackendRegistry};
use crate::cache::ResponseCache;
use crate::config::{self, ModelConfig};
use crate::error::{CoreError, CoreResult};
use crate::infer::{Infer, InferFuture, InferRequest, InferResponse, ResponseStream};
use crate::model::{LoadedModel, ModelSettings};
use crate::scheduler::ensemble::is_ensemble;
use crate::scheduler::rate_limit::RateLimiter;
use crate::stats::latency::MetricsSettings;

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
    /// What the server's flags decide for every model (latency families, health threshold).
    pub model_settings: ModelSettings,
    /// An ensemble whose steps are in no repository waits (unavailable, not failed) for models
    /// registered from code later, rather than failing the startup (see `load_startup_models`).
    pub ensembles_wait_for_registered: bool,
}

impl RepositoryOptions {
    /// No repository, cache or rate limiter, one load thread: for unit tests.
    #[cfg(test)]
    pub(crate) fn empty(control_mode: ControlMode) -> Self {
        Self {
            repositories: vec![],
            control_mode,
            strict_config: false,
            response_cache: None,
            rate_limiter: None,
            load_threads: 1,
            model_settings: Default::default(),
            ensembles_wait_for_registered: false,
        }
    }
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
    state: ModelState,
    versions: BTreeMap<i64, VersionState>,
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
    /// The `--metrics-config` settings models are loaded with.
    pub fn metrics_settings(&self) -> &MetricsSettings {
        &self.options.model_settings.metrics
    }

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

    /// Loads (or reloads) a model with every version its policy selects. `config_override` is
    /// the load endpoint's JSON `config` parameter, used instead of config.pbtxt.
    pub async fn load(self: &Arc<Self>, name: &str, config_override: Option<String>) -> CoreResult<()> {
        check_name(name)?;
        self.prepare_outside_lock(name, config_override.clone(), None).await?;
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
        check_name(name)?;
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
        self.prepare_outside_lock(name, Some(config.clone()), Some(Arc::clone(&dir))).await?;
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
            let entry = ModelEntry {
                state: ModelState::Failed(cycle.clone()),
                fingerprint: fingerprint_dir(&dir),
                ..Default::default()
            };
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
        self.mark_loading(name);
        let this = Arc::clone(self);
        let model_name = name.to_string();
        let fingerprint = fingerprint_dir(&dir);
        let built =
            tokio::task::spawn_blocking(move || this.build_entry(&model_name, &dir, config_override.as_deref())).await;
        // Swapped in whatever happened, so the model never stays LOADING.
        let mut entry = built.unwrap_or_else(|e| ModelEntry {
            state: ModelState::Failed(CoreError::internal(format!("model load task failed: {e}"))),
            fingerprint,
            ..Default::default()
        });
        entry.override_dir = override_dir;
        let outcome = entry_outcome(name, &entry);
        if let Ok(mut models) = self.models.write() {
            match models.get_mut(name) {
                // As Triton: a failed reload leaves the versions already serving in place. The new
                // fingerprint is kept so polling does not retry the same broken files forever.
                Some(current) if outcome.is_err() && current.versions.values().any(|s| s.ready().is_some()) => {
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

    /// Unloads a model. Ensembles that use it become unavailable until it is loaded again. With
    /// `unload_dependents` (Triton's repository unload parameter), unloading an ensemble also
    /// unloads the composing models that were loaded only for it and that no other loaded
    /// ensemble uses, as Triton's repository manager does (its `qa/L0_lifecycle` checks this).
    pub async fn unload(self: &Arc<Self>, name: &str, unload_dependents: bool) -> CoreResult<()> {
        // A build of the model running now (before or under the lock) ends first.
        self.backends.cancel_preparation(Some(name));
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
                    state.unload();
                }
                entry.state.unload();
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
        check_name(&name)?;
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
        let settings = self.options.model_settings.clone();
        let loaded = tokio::task::spawn_blocking(move || {
            let (model_dir, model_path) = (Path::new(""), Path::new(""));
            LoadedModel::load(config, version, backend.as_ref(), model_dir, model_path, limiter.as_ref(), &settings)
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
                Some(entry) if entry.registered && !entry.state.is_unloaded() => {
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
                entry.state.fail(e);
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
                entry.state.fail(e);
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
                &self.options.model_settings,
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
        let (mut config, versions) = self.read_config(name, dir, config_override)?;
        if !self.options.strict_config && !is_ensemble(&config) {
            let backend =
                self.backends.resolve(&config, versions.last().map(|v| dir.join(v.to_string())).as_deref())?;
            if let Some(latest) = versions.last() {
                let path = dir.join(latest.to_string()).join(model_filename(&config, backend.default_model_filename()));
                if path.exists() && crate::backend::sealed::file_is_sealed(&path) {
                    let plaintext = crate::backend::sealed::open_file(&path, &self.options.model_settings.model_keys)?;
                    backend.autocomplete_sealed(&mut config, &path, &plaintext)?;
                } else if path.exists() {
                    backend.autocomplete(&mut config, &path)?;
                }
            }
        }
        config::validate(&config, name).map_err(|e| CoreError::invalid_arg(e.to_string()))?;
        Ok((config, versions))
    }

    /// The model's config as written (or overridden), normalised and with its file names
    /// checked, and the versions its policy selects: before auto-complete and validation.
    fn read_config(
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
        // Before any file the config names is looked at: no path may leave the model directory.
        config::check_file_names(&config).map_err(|e| CoreError::invalid_arg(e.to_string()))?;
        let versions = select_versions(&config, &available);
        if versions.is_empty() {
            return Err(CoreError::invalid_arg(format!(
                "model '{name}' has no version directory that its version policy selects (found: {:?})",
                available
            )));
        }
        Ok((config, versions))
    }

    /// A load starts: a model with no version serving is LOADING until the new versions swap in;
    /// one with versions serving keeps serving them meanwhile (a reload).
    fn mark_loading(&self, name: &str) {
        let Ok(mut models) = self.models.write() else { return };
        let entry = models.entry(name.to_string()).or_default();
        if !entry.versions.values().any(|s| s.ready().is_some()) {
            entry.state.begin_load();
        }
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
        if matches!(entry.state, ModelState::Loading) {
            return Err(CoreError::unknown_model(name));
        }
        match version {
            Some(v) => match entry.versions.get(&v) {
                Some(VersionState::Ready(model)) => Ok(Arc::clone(model)),
                Some(VersionState::Unloading(_) | VersionState::Unavailable(_)) => Err(CoreError::unavailable(
                    format!("Request for unknown model: '{name}' version {v} is not at ready state"),
                )),
                None => {
                    Err(CoreError::not_found(format!("Request for unknown model: '{name}' version {v} is not found")))
                }
            },
            None => entry.versions.values().rev().find_map(|s| s.ready().cloned()).ok_or_else(|| {
                CoreError::not_found(format!("Request for unknown model: '{name}' has no available versions"))
            }),
        }
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

fn entry_outcome(name: &str, entry: &ModelEntry) -> CoreResult<()> {
    if let Some(error) = entry.state.load_error(name) {
        return Err(error);
    }
    let failures: Vec<String> = entry
        .versions
        .iter()
        .filter(|(_, s)| s.ready().is_none())
        .map(|(v, s)| {
            let (state, reason) = s.reported();
            format!("version {v} is at {state} state: {reason}")
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
