//! A loaded model version: its config, the checks its requests pass ([`io`]), its scheduler
//! (which owns the instances), the response cache and the per-request statistics.
//!
//! Files by job: [`io`] validation and reshape, [`classify`] the classification extension,
//! [`warmup`] warmup samples.

pub mod classify;
pub mod io;
mod triton_order;
pub mod warmup;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::backend::{Backend, ComputeTime, ExecRequest, InstanceContext, InstanceDevice, RawResponse};
use crate::cache::ResponseCache;
use crate::config::ModelConfig;
use crate::config::pb::ModelInstanceGroup as InstanceGroup;
use crate::config::pb::model_instance_group::Kind;
use crate::error::{CoreError, CoreResult};
use crate::infer::{InferRequest, InferResponse, ResponseStream};
use crate::scheduler::Scheduler;
use crate::scheduler::ensemble::EnsembleScheduler;
use crate::scheduler::rate_limit::{Claim, RateLimiter};
use crate::stats::latency::{Latency, MetricsSettings};
use crate::stats::{FailureReason, ModelStats};
use crate::trace::{Trace, activity};
pub use io::ModelIo;

pub struct LoadedModel {
    pub name: String,
    pub version: i64,
    pub config: ModelConfig,
    /// The config as `/config` returns it, computed once at load.
    pub config_json: serde_json::Value,
    pub platform: &'static str,
    /// Inputs and outputs, and the checks requests pass against them.
    pub io: ModelIo,
    pub stats: Arc<ModelStats>,
    scheduler: Scheduler,
    /// The server's response cache, when this model enables it.
    cache: Option<Arc<ResponseCache>>,
}

/// Decides where instance groups run, from the machine and the backend: KIND_AUTO becomes
/// KIND_GPU on every GPU when there are GPUs and the backend can use them, else KIND_CPU; KIND_GPU
/// on a backend that cannot use a GPU is an error (never a silent CPU fallback).
fn place_instances(config: &mut ModelConfig, backend: &dyn Backend) -> CoreResult<()> {
    let gpus = crate::gpu::device_ids();
    for group in &mut config.instance_group {
        if group.kind == Kind::Auto as i32 {
            if !gpus.is_empty() && backend.gpu_support().is_ok() {
                group.kind = Kind::Gpu as i32;
                group.gpus = gpus.iter().map(|&g| g as i32).collect();
            } else {
                group.kind = Kind::Cpu as i32;
            }
        }
        if group.kind == Kind::Gpu as i32
            && let Err(reason) = backend.gpu_support()
        {
            return Err(CoreError::invalid_arg(format!(
                "instance group '{}' of model '{}' specifies KIND_GPU, but {reason}",
                group.name, config.name
            )));
        }
    }
    Ok(())
}

/// What an instance of `group` on `device` needs from the rate limiter (CPU instances count as
/// device 0, see `scheduler::rate_limit`).
fn rate_limit_claim(
    limiter: &Arc<RateLimiter>,
    group: &InstanceGroup,
    device: InstanceDevice,
) -> CoreResult<Arc<Claim>> {
    let (resources, priority) = match &group.rate_limiter {
        Some(r) => (r.resources.iter().map(|x| (x.name.clone(), u64::from(x.count), x.global)).collect(), r.priority),
        None => (Vec::new(), 0),
    };
    let device = match device {
        InstanceDevice::Gpu(id) => id,
        InstanceDevice::Cpu => 0,
    };
    limiter.register(&resources, priority, device)
}

/// What the server's flags decide for every model it loads, besides each model's config.
#[derive(Debug, Clone, Default)]
pub struct ModelSettings {
    /// `--metrics-config`: the latency families each model records.
    pub metrics: MetricsSettings,
    /// `--model-unhealthy-after`: executions in a row that fail in a model's instances after
    /// which it reports not ready (0: never); the config parameter `unhealthy_after_failures`
    /// overrides it per model.
    pub unhealthy_after: u32,
    /// `--model-keys`, `TESSERA_MODEL_KEYS`: the keys of sealed model files.
    pub model_keys: std::sync::Arc<crate::backend::sealed::ModelKeys>,
}

/// Statistics recording the latency families the settings and the config's `model_metrics` ask
/// for, with the model's health threshold.
fn model_stats(config: &ModelConfig, settings: &ModelSettings) -> CoreResult<ModelStats> {
    let cached = config.response_cache.as_ref().is_some_and(|c| c.enable);
    let latency = Latency::new(&settings.metrics, config, cached).map_err(CoreError::invalid_arg)?;
    let unhealthy_after = match config.parameters.get("unhealthy_after_failures") {
        None => settings.unhealthy_after,
        Some(p) => p.string_value.trim().parse::<u32>().map_err(|_| {
            CoreError::invalid_arg(format!(
                "parameter 'unhealthy_after_failures' must be a number of executions (0: never), got '{}'",
                p.string_value
            ))
        })?,
    };
    Ok(ModelStats::new(latency, unhealthy_after))
}

impl LoadedModel {
    /// Reads the config's tensors (and label files in `model_dir`), creates every instance of
    /// every instance group with `backend`, picks the scheduler and runs warmup. Blocking
    /// (sessions take tens of ms).
    pub fn load(
        mut config: ModelConfig,
        version: i64,
        backend: &dyn Backend,
        model_dir: &Path,
        model_path: &Path,
        limiter: Option<&Arc<RateLimiter>>,
        settings: &ModelSettings,
    ) -> CoreResult<Self> {
        // Cheap checks first: a bad label file fails before any session is created.
        let io = ModelIo::from_config(&config, model_dir)?;
        let stats = Arc::new(model_stats(&config, settings)?);
        place_instances(&mut config, backend)?;
        let version_dir = model_path.parent().unwrap_or(model_dir);
        // A sealed model file is decrypted once, here, for every instance (and wiped after).
        let plaintext = match crate::backend::sealed::file_is_sealed(model_path) {
            true => Some(crate::backend::sealed::open_file(model_path, &settings.model_keys)?),
            false => None,
        };
        let mut instances = Vec::new();
        let mut claims = Vec::new();
        for group in &config.instance_group {
            let devices: Vec<InstanceDevice> = if group.kind == Kind::Gpu as i32 {
                group.gpus.iter().map(|&g| InstanceDevice::Gpu(g.unsigned_abs())).collect()
            } else {
                vec![InstanceDevice::Cpu]
            };
            // As in Triton, `count` instances per listed GPU, numbered across the group.
            let mut index = 0;
            for device in devices {
                for _ in 0..group.count.max(0) {
                    let ctx = InstanceContext {
                        config: &config,
                        model_dir,
                        version_dir,
                        model_path,
                        model_plaintext: plaintext.as_deref().map(Vec::as_slice),
                        version,
                        instance_name: format!("{}_{index}", group.name),
                        device,
                        stats: &stats,
                    };
                    if let Some(limiter) = limiter {
                        claims.push(rate_limit_claim(limiter, group, device)?);
                    }
                    instances.push(backend.create_instance(&ctx)?);
                    index += 1;
                }
            }
        }
        let rate_limits = limiter.map(|l| (Arc::clone(l), claims));
        let scheduler = Scheduler::new(&config, instances, Arc::clone(&stats), model_dir, rate_limits)?;
        warmup::run(&io, &scheduler, &config.model_warmup, model_dir)?;
        Ok(Self {
            name: config.name.clone(),
            version,
            config_json: crate::config::to_json(&config),
            platform: backend.platform(),
            io,
            stats,
            scheduler,
            cache: None,
            config,
        })
    }

    /// Serves an ensemble: its config's tensors and the checked graph of its steps. Nothing is
    /// created: the steps are models already loaded.
    pub fn load_ensemble(
        config: ModelConfig,
        version: i64,
        ensemble: EnsembleScheduler,
        model_dir: &Path,
        settings: &ModelSettings,
    ) -> CoreResult<Self> {
        // (The plan refused model_warmup and instance groups, as Triton does.)
        let io = ModelIo::from_config(&config, model_dir)?;
        let stats = Arc::new(model_stats(&config, settings)?);
        Ok(Self {
            name: config.name.clone(),
            version,
            config_json: crate::config::to_json(&config),
            platform: "ensemble",
            io,
            stats,
            scheduler: Scheduler::Ensemble(ensemble),
            cache: None,
            config,
        })
    }

    /// Uses the server's response cache when the config enables it (`response_cache { enable:
    /// true }`); without a server cache (`--cache-config`) the setting has no effect.
    pub fn with_response_cache(mut self, cache: Option<Arc<ResponseCache>>) -> Self {
        // Sequence models depend on state, not only on their inputs: never cached.
        if self.response_cache_enabled() && !self.is_decoupled() && !self.scheduler.is_stateful() {
            if cache.is_none() {
                tracing::warn!(
                    model = self.name.as_str(),
                    "response_cache is enabled but the server has no cache (--cache-config local,size=N): not caching"
                );
            }
            self.cache = cache;
        }
        self
    }

    pub fn max_batch_size(&self) -> i64 {
        i64::from(self.config.max_batch_size)
    }

    /// `response_cache { enable: true }` in the config.
    pub fn response_cache_enabled(&self) -> bool {
        self.config.response_cache.as_ref().is_some_and(|c| c.enable)
    }

    /// Decoupled models (`model_transaction_policy { decoupled: true }`) answer 0..n times per
    /// request, so they are reached through [`LoadedModel::infer_stream`] only.
    pub fn is_decoupled(&self) -> bool {
        self.config.model_transaction_policy.as_ref().is_some_and(|p| p.decoupled)
    }

    fn response(&self, id: Option<String>, outputs: Vec<crate::tensor::Tensor>, is_final: bool) -> InferResponse {
        InferResponse {
            model_name: self.name.clone(),
            model_version: self.version,
            id,
            outputs,
            is_final,
            ..Default::default()
        }
    }

    /// Records a finished request (the one place request statistics are kept): success or
    /// failure, and the failure's reason when the caller has the error (a decoupled request's
    /// failures reach its stream instead, so it has none).
    fn record_request(&self, ok: bool, failure: Option<&CoreError>, start: Instant) {
        let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        // A regular model's one response is its first: its time is the request's.
        self.stats.record_request(ok, start.elapsed(), now_ms, !self.is_decoupled());
        if let Some(e) = failure {
            self.stats.record_failure(FailureReason::of(e));
        }
    }

    /// An ensemble executes nothing itself. As Triton does, it reports each request as one
    /// execution whose compute is its steps' summed compute, and a queue entry of zero time
    /// (clients such as perf_analyzer find the version they measure by its queue count).
    fn record_ensemble_execution(&self, batch_size: usize, compute: Duration) {
        self.stats.record_queue(Duration::ZERO);
        self.stats.record_execution(batch_size, Duration::ZERO, compute, Duration::ZERO);
    }

    /// Checks a request and turns it into what an instance sees; returns its batch size too.
    fn prepare(&self, request: InferRequest) -> CoreResult<(ExecRequest, usize, Vec<crate::infer::RequestedOutput>)> {
        self.io.prepare(request)
    }

    /// Runs one request and streams its responses: one for a regular model, 0..n for a decoupled
    /// one. The stream ends after the final response.
    pub async fn infer_stream(self: &Arc<Self>, request: InferRequest) -> CoreResult<ResponseStream> {
        let (tx, rx) = crate::infer::response_stream();
        if !self.is_decoupled() {
            let _ = tx.send(self.infer(request).await).await;
            return Ok(rx);
        }
        let start = Instant::now();
        let id = request.id.clone();
        let trace = self.trace_start(&request);
        let (exec, batch_size, wanted) = self.prepare(request).inspect_err(|_| {
            if let Some(trace) = &trace {
                trace.stamp(activity::REQUEST_END);
            }
        })?;
        self.trace_queued(&exec);
        let (raw_tx, mut raw_rx) = crate::backend::responder();
        // Kept until execute returns, so an instance failure still reaches the caller's stream.
        let error_tx = raw_tx.clone();
        let compute = Arc::new(ComputeTime::default());
        let exec = ExecRequest { responder: Some(raw_tx), compute: Some(Arc::clone(&compute)), ..exec };
        let model = Arc::clone(self);
        // Post-process each raw response while the instance may still be producing more.
        let forward = tokio::spawn(async move {
            let mut ok = true;
            let mut first = true;
            loop {
                // The caller going (a cancelled stream) closes the instance's responder at once,
                // so a guest sees it (`is-cancelled`, a failed send) without sending first.
                let received = tokio::select! {
                    received = raw_rx.recv() => received,
                    () = tx.closed() => None,
                };
                let Some(RawResponse { outputs, parameters, is_final }) = received else { break };
                if std::mem::take(&mut first) {
                    model.stats.record_first_response(start.elapsed());
                }
                let response = outputs
                    .and_then(|outputs| model.io.postprocess(outputs, batch_size, &wanted))
                    .map(|outputs| InferResponse { parameters, ..model.response(id.clone(), outputs, is_final) });
                ok &= response.is_ok();
                if tx.send(response).await.is_err() {
                    break;
                }
            }
            ok
        });
        let model = Arc::clone(self);
        // Execute on its own task, so responses stream to the caller while the instance runs.
        tokio::spawn(async move {
            // A decoupled instance answers through the responder; a failed execute (a trap, say)
            // ends the stream with that error.
            let executed = model.scheduler.execute_decoupled(exec, batch_size).await;
            if let Err(e) = &executed {
                let _ = error_tx.send(RawResponse::new(Err(e.clone()), true)).await;
            }
            drop(error_tx);
            let streamed_ok = forward.await.unwrap_or(false);
            let ok = streamed_ok && executed.is_ok();
            if ok && model.scheduler.ensemble().is_some() {
                model.record_ensemble_execution(batch_size, compute.get());
            }
            model.record_request(ok, None, start);
            if let Some(trace) = trace {
                trace.stamp(activity::REQUEST_END);
            }
        });
        Ok(rx)
    }

    /// Runs one request end to end, recording statistics.
    pub async fn infer(&self, request: InferRequest) -> CoreResult<InferResponse> {
        let start = Instant::now();
        let trace = self.trace_start(&request);
        let result = match &self.cache {
            None => self.infer_uncached(request).await,
            Some(cache) => {
                let key = ResponseCache::key(&self.name, self.version, &request);
                if let Some(outputs) = cache.get(&key) {
                    // A hit counts as a success (recorded below) and a cache hit, not as an execution.
                    self.stats.record_cache(true, start.elapsed());
                    Ok(self.response(request.id, outputs, true))
                } else {
                    let result = self.infer_uncached(request).await;
                    if let Ok(response) = &result {
                        let inserting = Instant::now();
                        cache.insert(key, response.outputs.clone());
                        self.stats.record_cache(false, inserting.elapsed());
                    }
                    result
                }
            }
        };
        self.record_request(result.is_ok(), result.as_ref().err(), start);
        if let Some(trace) = trace {
            trace.stamp(activity::REQUEST_END);
        }
        result
    }

    /// Stamps REQUEST_START on a traced request, with the model that serves it; returns its trace.
    fn trace_start(&self, request: &InferRequest) -> Option<Trace> {
        let trace = request.trace.clone()?;
        trace.set_model(&self.name, self.version, request.id.as_deref());
        trace.stamp(activity::REQUEST_START);
        Some(trace)
    }

    /// Stamps QUEUE_START (and the queued inputs, at level TENSORS) on a traced request that
    /// goes to a scheduler: an ensemble's own request queues nowhere.
    fn trace_queued(&self, exec: &ExecRequest) {
        if let Some(trace) = &exec.trace
            && self.scheduler.ensemble().is_none()
        {
            trace.stamp(activity::QUEUE_START);
            trace.record_tensors(activity::TENSOR_QUEUE_INPUT, &exec.inputs);
        }
    }

    async fn infer_uncached(&self, request: InferRequest) -> CoreResult<InferResponse> {
        if self.is_decoupled() {
            return Err(CoreError::invalid_arg(format!(
                "model '{}' is decoupled (it may send any number of responses) and this endpoint doesn't support \
                 models with decoupled transaction policy: use generate_stream over HTTP, or infer-stream from a guest",
                self.name
            )));
        }
        let id = request.id.clone();
        let (exec, batch_size, wanted) = self.prepare(request)?;
        let compute = Arc::new(ComputeTime::default());
        let parameters = Arc::new(crate::backend::ResponseParameters::default());
        let exec = ExecRequest {
            compute: Some(Arc::clone(&compute)),
            response_parameters: Some(Arc::clone(&parameters)),
            ..exec
        };
        self.trace_queued(&exec);
        let outputs = self.scheduler.execute(exec, batch_size).await?;
        let outputs = self.io.postprocess(outputs, batch_size, &wanted)?;
        if self.scheduler.ensemble().is_some() {
            self.record_ensemble_execution(batch_size, compute.get());
        }
        let parameters = parameters.take();
        Ok(InferResponse { compute: compute.get(), parameters, ..self.response(id, outputs, true) })
    }
}
