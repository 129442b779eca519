//! What both front doors (HTTP in [`crate::http`], gRPC in [`crate::grpc`]) share: readiness,
//! metadata, statistics, repository control, trace/log settings and inference with the
//! shared-memory extension. The doors reach the models only through these calls: they translate
//! their wire format and map [`CoreError`] to their status; no inference logic lives in a door.
//!
//! A request resolves its model once: a door asks for the [`ServedModel`] (the ready version the
//! request names), reads the request against it and runs it there. The version is held until the
//! request ends, as the manager's requests in flight hold theirs, so a reload or unload meanwhile
//! never changes what a request already checked runs on.

mod access;
mod forward;
mod load;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::config::IoSpec;
use crate::error::{CoreError, CoreResult};
use crate::execution::Caller;
use crate::infer::{InferRequest, InferResponse, ShmTarget};
use crate::lifecycle::{Lifecycle, TrackedStream};
use crate::model::LoadedModel;
use crate::repository::{ControlMode, IndexEntry, ModelManager};
use crate::shm::{Region, SharedMemoryManager, ShmInput};
use crate::stats::custom::CustomMetrics;
use crate::stats::host::HostSampler;
use crate::tenant::Principal;
use crate::tensor::Tensor;
use crate::trace::{SettingAnswer, Trace, Tracer, activity, stamp};
pub use access::Requester;
pub use forward::{Door, Patterns as ForwardPatterns, add_to as add_forwarded};
pub use load::LoadReport;

/// Extensions reported in server metadata: only what this server implements.
pub const EXTENSIONS: &[&str] = &[
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "system_shared_memory",
    "cuda_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
];

/// A ready model version resolved for one request ([`Frontend::model`]): what a door reads the
/// request against, and where [`Frontend::infer`] runs it.
#[derive(Clone)]
pub struct ServedModel(Arc<LoadedModel>);

impl ServedModel {
    pub fn name(&self) -> &str {
        &self.0.name
    }

    pub fn version(&self) -> i64 {
        self.0.version
    }

    pub fn is_decoupled(&self) -> bool {
        self.0.is_decoupled()
    }

    /// 0: the model does not batch (its inputs have no batch dimension).
    pub fn max_batch_size(&self) -> i64 {
        self.0.max_batch_size()
    }

    /// The inputs the config declares, in its order.
    pub fn inputs(&self) -> &[IoSpec] {
        &self.0.io.inputs
    }

    /// The config, as gRPC's `ModelConfig` returns it.
    pub fn config(&self) -> &crate::config::ModelConfig {
        &self.0.config
    }

    /// The config as HTTP's `/config` returns it.
    pub fn config_json(&self) -> &serde_json::Value {
        &self.0.config_json
    }
}

/// One ready version's statistics, for both doors' statistics answers.
pub struct VersionStats {
    pub name: String,
    pub version: i64,
    pub stats: Arc<crate::stats::ModelStats>,
}

impl VersionStats {
    fn of(model: &LoadedModel) -> Self {
        Self { name: model.name.clone(), version: model.version, stats: Arc::clone(&model.stats) }
    }
}

/// A tensor as model metadata describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorMetadata {
    pub name: String,
    pub datatype: &'static str,
    /// With a leading -1 for the batch dimension of batching models.
    pub shape: Vec<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelMetadata {
    pub name: String,
    pub versions: Vec<String>,
    pub platform: String,
    pub inputs: Vec<TensorMetadata>,
    pub outputs: Vec<TensorMetadata>,
}

impl ModelMetadata {
    /// As HTTP's model metadata answers it (gRPC's message has the same fields).
    pub fn to_json(&self) -> serde_json::Value {
        let tensors = |ts: &[TensorMetadata]| -> Vec<serde_json::Value> {
            ts.iter().map(|t| serde_json::json!({ "name": t.name, "datatype": t.datatype, "shape": t.shape })).collect()
        };
        serde_json::json!({
            "name": self.name,
            "versions": self.versions,
            "platform": self.platform,
            "inputs": tensors(&self.inputs),
            "outputs": tensors(&self.outputs),
        })
    }
}

/// Statistics as HTTP answers them: `{"model_stats": [...]}`.
pub fn statistics_json(models: &[VersionStats]) -> serde_json::Value {
    serde_json::json!({ "model_stats": models.iter().map(|m| m.stats.to_json(&m.name, m.version)).collect::<Vec<_>>() })
}

/// The repository index as HTTP answers it.
pub fn index_json(entries: Vec<IndexEntry>) -> serde_json::Value {
    let entries = entries
        .into_iter()
        .map(|e| {
            let mut entry = serde_json::json!({ "name": e.name });
            if let Some(version) = e.version {
                entry["version"] = serde_json::json!(version);
            }
            if let Some(state) = e.state {
                entry["state"] = serde_json::json!(state);
            }
            if !e.reason.is_empty() {
                entry["reason"] = serde_json::json!(e.reason);
            }
            entry
        })
        .collect();
    serde_json::Value::Array(entries)
}

/// A value of a trace or log setting, as the trace/logging extensions carry them.
#[derive(Debug, Clone, PartialEq)]
pub enum SettingValue {
    Bool(bool),
    Uint(u32),
    Str(String),
    List(Vec<String>),
}

fn setting_values(answer: BTreeMap<String, SettingAnswer>) -> BTreeMap<String, SettingValue> {
    answer
        .into_iter()
        .map(|(key, value)| {
            let value = match value {
                SettingAnswer::Str(s) => SettingValue::Str(s),
                SettingAnswer::List(l) => SettingValue::List(l),
            };
            (key, value)
        })
        .collect()
}

/// Called with the new log settings after an update, so the server can apply them.
pub type LogApplier = Box<dyn Fn(&BTreeMap<String, SettingValue>) + Send + Sync>;

pub struct Frontend {
    manager: Arc<ModelManager>,
    pub shm: SharedMemoryManager,
    /// Reported as the server name: "triton" when invoked as `tritonserver`, else "tessera".
    pub server_id: String,
    pub version: &'static str,
    pub strict_readiness: bool,
    /// Models that must be ready for the server to be ready, whatever `strict_readiness` says.
    required_models: Vec<String>,
    /// Requests in flight and the drain that SIGTERM starts.
    pub lifecycle: Arc<Lifecycle>,
    /// Trace settings, sampling and the trace file (`crate::trace`).
    tracer: Arc<Tracer>,
    /// `--log-requests`: an access line per inference request.
    log_requests: bool,
    log: Mutex<BTreeMap<String, SettingValue>>,
    log_applier: Option<LogApplier>,
    /// The server's shared runtime, where models load: a model's background tasks (its batcher)
    /// belong there, not on the HTTP connection thread that asked for the load.
    runtime: Option<tokio::runtime::Handle>,
    /// What the ORCA load report reads besides the models (see [`Frontend::load_report`]).
    host: Option<Arc<HostSampler>>,
    custom_metrics: Option<Arc<CustomMetrics>>,
    /// `--http-header-forward-pattern`, `--grpc-header-forward-pattern` (see `forward`).
    forward_patterns: forward::Patterns,
}

/// An infer request as a door decoded it. Inputs sent inline are in `request.inputs`; inputs in
/// shared memory are only described, and [`Frontend::read_shm_inputs`] reads them into place, so
/// the codecs stay pure translations and the registry has one user.
#[derive(Debug, Clone, Default)]
pub struct DecodedRequest {
    pub request: InferRequest,
    /// In the order the client sent them.
    pub shm_inputs: Vec<ShmInput>,
}

/// Shared-memory outputs of one request, resolved before it runs so a bad region fails the
/// request before any work is done.
struct ShmOutputs(Vec<(String, Arc<Region>, ShmTarget)>);

impl Frontend {
    pub fn new(manager: Arc<ModelManager>, server_id: String, strict_readiness: bool) -> Self {
        let log = BTreeMap::from([
            ("log_file".to_string(), SettingValue::Str(String::new())),
            ("log_info".to_string(), SettingValue::Bool(true)),
            ("log_warning".to_string(), SettingValue::Bool(true)),
            ("log_error".to_string(), SettingValue::Bool(true)),
            ("log_verbose_level".to_string(), SettingValue::Uint(0)),
            ("log_format".to_string(), SettingValue::Str("default".to_string())),
        ]);
        Self {
            manager,
            shm: SharedMemoryManager::new(),
            server_id,
            version: env!("CARGO_PKG_VERSION"),
            strict_readiness,
            required_models: Vec::new(),
            lifecycle: Lifecycle::new(),
            tracer: Tracer::off(),
            log_requests: false,
            log: Mutex::new(log),
            log_applier: None,
            runtime: tokio::runtime::Handle::try_current().ok(),
            host: None,
            custom_metrics: None,
            forward_patterns: forward::Patterns::default(),
        }
    }

    /// Runs `work` on the server's shared runtime (see `runtime`), to its end even if the caller
    /// goes away meanwhile.
    async fn on_server_runtime(&self, work: impl Future<Output = CoreResult<()>> + Send + 'static) -> CoreResult<()> {
        let here = tokio::runtime::Handle::try_current().ok().map(|h| h.id());
        match &self.runtime {
            Some(runtime) if here != Some(runtime.id()) => runtime
                .spawn(work)
                .await
                .map_err(|e| CoreError::internal(format!("the model load or unload failed: {e}")))?,
            _ => work.await,
        }
    }

    /// Sets the initial log settings (from the command line) and what applies later updates.
    pub fn with_log_settings(mut self, initial: BTreeMap<String, SettingValue>, applier: LogApplier) -> Self {
        if let Ok(mut log) = self.log.lock() {
            log.extend(initial);
        }
        self.log_applier = Some(applier);
        self
    }

    /// A frontend over an empty repository, for unit tests.
    #[cfg(test)]
    pub(crate) fn for_tests() -> Self {
        let options = crate::repository::RepositoryOptions::empty(ControlMode::None);
        let manager = Arc::new(ModelManager::new(options, crate::backend::BackendRegistry::new()));
        Self::new(manager, "tessera".into(), true).with_client_shm(true)
    }

    /// Models that must be ready (`--required-model`) for the server to be.
    pub fn with_required_models(mut self, models: Vec<String>) -> Self {
        self.required_models = models;
        self
    }

    /// Ready: not draining, every required model has a ready version, and with strict readiness
    /// every loaded model is ready.
    pub fn server_ready(&self) -> bool {
        !self.lifecycle.is_draining()
            && self.required_models.iter().all(|name| self.model_ready(name, None))
            && (!self.strict_readiness || self.manager.all_ready())
    }

    /// Whether the version (the newest ready one for `None`) is ready and its instances are not
    /// failing one execution after another.
    pub fn model_ready(&self, name: &str, version: Option<i64>) -> bool {
        self.manager.get(name, version).is_ok_and(|model| model.stats.health.healthy())
    }

    /// The ready model version a request for `name` / `version` runs on (the newest ready one when
    /// `version` is `None`), or Triton's error for it.
    pub fn model(&self, name: &str, version: Option<i64>) -> CoreResult<ServedModel> {
        self.manager.get(name, version).map(ServedModel)
    }

    /// Model metadata for one version, or for every ready version when `version` is `None`.
    pub fn metadata(&self, name: &str, version: Option<i64>) -> CoreResult<ModelMetadata> {
        let versions = match version {
            Some(v) => vec![self.manager.get(name, Some(v))?],
            None => {
                let versions = self.manager.ready_versions(name)?;
                if versions.is_empty() {
                    return Err(CoreError::not_found(format!(
                        "Request for unknown model: '{name}' has no available versions"
                    )));
                }
                versions
            }
        };
        let Some(newest) = versions.last() else {
            return Err(CoreError::internal("no versions"));
        };
        let batching = newest.max_batch_size() > 0;
        let io = |specs: &[IoSpec]| -> Vec<TensorMetadata> {
            specs
                .iter()
                .map(|s| TensorMetadata {
                    name: s.name.clone(),
                    datatype: s.datatype.as_str(),
                    shape: if batching {
                        std::iter::once(-1).chain(s.dims.iter().copied()).collect()
                    } else {
                        s.dims.clone()
                    },
                })
                .collect()
        };
        Ok(ModelMetadata {
            name: newest.name.clone(),
            versions: versions.iter().map(|m| m.version.to_string()).collect(),
            platform: newest.platform.to_string(),
            inputs: io(&newest.io.inputs),
            outputs: io(&newest.io.outputs),
        })
    }

    /// The versions whose statistics are asked for: all ready models (no name), all ready
    /// versions of one model, or one version.
    /// Without a name, only the models `who` may call.
    pub fn statistics(
        &self,
        who: Option<&Principal>,
        name: Option<&str>,
        version: Option<i64>,
    ) -> CoreResult<Vec<VersionStats>> {
        let models = match (name, version) {
            (None, _) => {
                let mut models = self.manager.ready_models();
                if let Some(who) = who {
                    models.retain(|m| who.may_call(&m.name));
                }
                models
            }
            (Some(name), None) => match self.manager.ready_versions(name) {
                Ok(versions) if !versions.is_empty() => versions,
                _ => return Err(CoreError::invalid_arg(format!("requested model '{name}' is not available"))),
            },
            (Some(name), Some(v)) => self.manager.get(name, Some(v)).map(|m| vec![m]).map_err(|_| {
                CoreError::invalid_arg(format!("requested model version is not available for model '{name}'"))
            })?,
        };
        Ok(models.iter().map(|m| VersionStats::of(m)).collect())
    }

    fn explicit_only(&self) -> CoreResult<()> {
        if self.manager.control_mode() == ControlMode::Explicit {
            Ok(())
        } else {
            Err(CoreError::unavailable("explicit model load / unload is not allowed if polling is enabled"))
        }
    }

    /// Loads (or reloads) a model; `config` is a JSON ModelConfig overriding config.pbtxt, and
    /// `files` are Triton's `file:<path>` override contents (then the model is loaded from a
    /// temporary directory holding them, see `ModelManager::load_override`).
    /// `who` is the caller's principal: a model it may not call is answered as a model that is
    /// not in any repository.
    pub async fn load(
        &self,
        who: Option<&Principal>,
        name: &str,
        config: Option<String>,
        files: Vec<(String, Vec<u8>)>,
    ) -> CoreResult<()> {
        self.explicit_only()?;
        if who.is_some_and(|p| !p.may_call(name)) {
            crate::repository::check_model_name(name)?;
            return Err(CoreError::internal(format!("failed to load '{name}', failed to poll from model repository")));
        }
        let (manager, name) = (Arc::clone(&self.manager), name.to_string());
        self.on_server_runtime(async move {
            if files.is_empty() {
                manager.load(&name, config).await
            } else {
                manager.load_override(&name, config, files).await
            }
        })
        .await
    }

    /// Unloads a model; with `unload_dependents`, the ensembles that use it too.
    pub async fn unload(&self, who: Option<&Principal>, name: &str, unload_dependents: bool) -> CoreResult<()> {
        self.explicit_only()?;
        let name = crate::tenant::visible_name(who, name);
        let (manager, name) = (Arc::clone(&self.manager), name.into_owned());
        self.on_server_runtime(async move { manager.unload(&name, unload_dependents).await }).await
    }

    /// The repository index: every model directory, with the state of each known version.
    /// Only the models `who` may call are listed.
    pub fn repository_index(&self, who: Option<&Principal>, ready_only: bool) -> Vec<IndexEntry> {
        let mut index = self.manager.index(ready_only);
        if let Some(who) = who {
            index.retain(|entry| who.may_call(&entry.name));
        }
        index
    }

    /// Reads a decoded request's shared-memory inputs and puts each at its position among the
    /// inline inputs, giving the request the models run.
    pub fn read_shm_inputs(&self, decoded: DecodedRequest) -> CoreResult<InferRequest> {
        let DecodedRequest { mut request, shm_inputs } = decoded;
        if shm_inputs.is_empty() {
            return Ok(request);
        }
        let mut inline = std::mem::take(&mut request.inputs).into_iter();
        let mut inputs = Vec::with_capacity(inline.len() + shm_inputs.len());
        for input in shm_inputs {
            // The inline inputs the client sent before this one keep their places.
            while inputs.len() < input.position {
                let Some(tensor) = inline.next() else { break };
                inputs.push(tensor);
            }
            let data = self.shm.read_input(&input.name, &input.target)?;
            inputs.push(Tensor::unchecked(input.name, input.datatype, input.shape, data));
        }
        inputs.extend(inline);
        request.inputs = inputs;
        Ok(request)
    }

    /// Resolves the regions of the outputs that go to shared memory, checking that no two of
    /// them overlap (they would overwrite each other).
    fn shm_outputs(&self, request: &InferRequest) -> CoreResult<ShmOutputs> {
        let mut resolved: Vec<(String, Arc<Region>, ShmTarget)> = Vec::new();
        for output in &request.outputs {
            let Some(target) = &output.shared_memory else { continue };
            let region = self.shm.get(&target.region)?;
            crate::shm::check_range(&target.region, region.byte_size, target.offset, target.byte_size)?;
            if let Some((other, _, _)) = resolved.iter().find(|(_, r, t)| {
                r.key.trim_start_matches('/') == region.key.trim_start_matches('/')
                    && t.byte_size > 0
                    && target.byte_size > 0
                    && region.offset + target.offset < r.offset + t.offset + t.byte_size
                    && r.offset + t.offset < region.offset + target.offset + target.byte_size
            }) {
                return Err(CoreError::invalid_arg(format!(
                    "shared memory ranges of outputs '{other}' and '{}' overlap; each output needs its own bytes",
                    output.name
                )));
            }
            resolved.push((output.name.clone(), region, target.clone()));
        }
        Ok(ShmOutputs(resolved))
    }

    /// Moves the bytes of shared-memory outputs into their regions; their tensors keep name,
    /// datatype and shape but no data, and the response records where the bytes went.
    fn write_shm_outputs(outputs: &ShmOutputs, response: &mut InferResponse) -> CoreResult<()> {
        for (name, region, target) in &outputs.0 {
            let Some(tensor) = response.outputs.iter_mut().find(|t| &t.name == name) else { continue };
            if tensor.data.len() as u64 > target.byte_size {
                return Err(CoreError::internal(format!(
                    "shared memory size specified with the request for output '{name}' ({} bytes) should be at least \
                    {} bytes to hold the results",
                    target.byte_size,
                    tensor.data.len()
                )));
            }
            region.write(target.offset, &tensor.data, name)?;
            let written = tensor.data.len() as u64;
            tensor.data = bytes::Bytes::new();
            response.shared_memory.insert(name.clone(), ShmTarget { byte_size: written, ..target.clone() });
        }
        Ok(())
    }

    /// Runs one request on `model` (not decoupled), with shared-memory outputs written.
    pub async fn infer(&self, model: &ServedModel, request: InferRequest) -> CoreResult<InferResponse> {
        let _in_flight = self.lifecycle.start_request();
        let shm_outputs = self.shm_outputs(&request)?;
        let mut response = model.0.infer(request).await?;
        Self::write_shm_outputs(&shm_outputs, &mut response)?;
        Ok(response)
    }

    /// Runs a request a door decoded (unary, on its own task: an inline execution may block it):
    /// its shared-memory inputs read, then the forwarded headers added (an `Err` refuses it
    /// there), on the version `model` resolved, traced with `trace`.
    pub async fn infer_decoded(
        &self,
        model: &ServedModel,
        decoded: DecodedRequest,
        forwarded: CoreResult<Vec<(String, String)>>,
        trace: &Option<Trace>,
        principal: Option<Arc<Principal>>,
    ) -> CoreResult<InferResponse> {
        let mut request = self.read_shm_inputs(decoded)?;
        add_forwarded(&mut request, &forwarded?);
        request.model_version = Some(model.version());
        request.caller = Caller::Task;
        request.trace = trace.clone();
        request.principal = principal;
        let response = self.infer(model, request).await?;
        stamp(trace, activity::INFER_RESPONSE_COMPLETE);
        Ok(response)
    }

    /// Runs one request and streams its responses (0..n for a decoupled model), each with its
    /// shared-memory outputs written.
    /// The request counts as in flight until the stream is dropped.
    pub async fn infer_stream(&self, model: &ServedModel, request: InferRequest) -> CoreResult<TrackedStream> {
        let in_flight = self.lifecycle.start_request();
        let shm_outputs = self.shm_outputs(&request)?;
        let mut inner = model.0.infer_stream(request).await?;
        if shm_outputs.0.is_empty() {
            return Ok(TrackedStream::new(inner, in_flight));
        }
        let (tx, rx) = crate::infer::response_stream();
        tokio::spawn(async move {
            while let Some(item) = inner.recv().await {
                let item = item.and_then(|mut r| Self::write_shm_outputs(&shm_outputs, &mut r).map(|()| r));
                if tx.send(item).await.is_err() {
                    break;
                }
            }
        });
        Ok(TrackedStream::new(rx, in_flight))
    }

    /// Lets clients register shared memory (`--allow-client-shm=true`).
    pub fn with_client_shm(mut self, on: bool) -> Self {
        self.shm.allow_clients(on);
        self
    }

    /// Logs an access line per inference request (`--log-requests`).
    pub fn with_request_log(mut self, on: bool) -> Self {
        self.log_requests = on;
        self
    }

    /// Whether the doors log an access line per inference request.
    pub fn logs_requests(&self) -> bool {
        self.log_requests
    }

    /// The tracer requests are sampled by; see [`Self::trace`].
    pub fn with_tracer(mut self, tracer: Arc<Tracer>) -> Self {
        self.tracer = tracer;
        self
    }

    /// A trace for a request a door received for `model`, if the trace settings sample it (or,
    /// in OpenTelemetry mode, the client sent this `traceparent`).
    pub fn trace(&self, model: &str, traceparent: Option<&str>) -> Option<Trace> {
        self.tracer.sample(model, traceparent)
    }

    pub fn trace_settings(&self, model: Option<&str>) -> CoreResult<BTreeMap<String, SettingValue>> {
        self.check_trace_model(model)?;
        Ok(setting_values(self.tracer.settings(model.filter(|m| !m.is_empty()))))
    }

    fn check_trace_model(&self, model: Option<&str>) -> CoreResult<()> {
        match model.filter(|m| !m.is_empty()) {
            Some(name) if self.manager.ready_versions(name).is_err() => {
                Err(CoreError::not_found(format!("Request for unknown model : {name}")))
            }
            _ => Ok(()),
        }
    }

    /// Updates the trace settings of `model`, or the global ones (Triton's trace extension; see
    /// `crate::trace`). A `None` value restores the default, or for a model the global value.
    pub fn update_trace_settings(
        &self,
        model: Option<&str>,
        updates: BTreeMap<String, Option<Vec<String>>>,
    ) -> CoreResult<BTreeMap<String, SettingValue>> {
        self.check_trace_model(model)?;
        self.tracer.update(model.filter(|m| !m.is_empty()), updates).map(setting_values)
    }

    pub fn log_settings(&self) -> CoreResult<BTreeMap<String, SettingValue>> {
        self.log.lock().map(|l| l.clone()).map_err(|_| CoreError::internal("log settings poisoned"))
    }

    /// Updates log settings (Triton's logging extension) and applies them to the running
    /// server's logger. Unknown keys are ignored.
    pub fn update_log_settings(
        &self,
        updates: BTreeMap<String, SettingValue>,
    ) -> CoreResult<BTreeMap<String, SettingValue>> {
        let mut log = self.log.lock().map_err(|_| CoreError::internal("log settings poisoned"))?;
        let mut next = log.clone();
        for (key, value) in updates {
            match (key.as_str(), &value) {
                ("log_file", _) => {
                    return Err(CoreError::unsupported(
                        "log file location can not be updated through network protocol",
                    ));
                }
                ("log_info" | "log_warning" | "log_error", SettingValue::Bool(_)) => {}
                ("log_info" | "log_warning" | "log_error", _) => {
                    return Err(CoreError::invalid_arg(format!("expect boolean for '{key}'")));
                }
                ("log_verbose_level", SettingValue::Uint(_)) => {}
                ("log_verbose_level", _) => return Err(CoreError::invalid_arg(format!("expect int32 for '{key}'"))),
                ("log_format", SettingValue::Str(f)) if f == "default" || f == "ISO8601" || f == "json" => {}
                ("log_format", other) => {
                    let got = match other {
                        SettingValue::Str(s) => s.clone(),
                        other => format!("{other:?}"),
                    };
                    return Err(CoreError::invalid_arg(format!("invalid argument for log_format, got: {got}")));
                }
                _ => continue,
            }
            next.insert(key, value);
        }
        if let Some(apply) = &self.log_applier {
            apply(&next);
        }
        *log = next.clone();
        Ok(next)
    }
}

#[cfg(test)]
#[path = "frontend_tests.rs"]
mod tests;
