//! A loaded model version: its config, its instances, request validation against the config,
//! output post-processing (reshape back, classification) and statistics.
//!
//! Scheduling here is Triton's default scheduler: each request runs alone on the next free
//! instance. The dynamic and sequence batchers (a later issue) replace [`InstancePool::execute`]'s
//! caller, not the instances.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::backend::{Backend, ExecRequest, InstanceContext, ModelInstance};
use crate::config::{ModelConfig, TensorConfig, datatype_from_config};
use crate::error::{CoreError, CoreResult};
use crate::infer::{InferRequest, InferResponse, RequestedOutput};
use crate::cache::ResponseCache;
use crate::scheduler::{BatcherConfig, DynamicBatcher};
use crate::sequence::{SequenceBatcher, SequenceConfig};
use crate::stats::ModelStats;
use crate::tensor::{DataType, Tensor, push_bytes_element};

pub use crate::infer::ResponseStream;

/// An input or output as the config declares it.
#[derive(Debug, Clone)]
pub struct IoSpec {
    pub name: String,
    pub datatype: DataType,
    /// Dims without the batch dimension, as written in the config.
    pub dims: Vec<i64>,
    /// The shape the model itself uses, when the config reshapes.
    pub reshape: Option<Vec<i64>>,
    pub optional: bool,
}

impl IoSpec {
    fn from_config(tensor: &impl TensorConfig, optional: bool) -> CoreResult<Self> {
        Ok(Self {
            name: tensor.name().to_string(),
            datatype: config_datatype(tensor.name(), tensor.data_type())?,
            dims: tensor.dims().to_vec(),
            reshape: tensor.reshape().map(|r| r.shape.clone()),
            optional,
        })
    }
}

fn config_datatype(name: &str, value: i32) -> CoreResult<DataType> {
    datatype_from_config(value).ok_or_else(|| CoreError::invalid_arg(format!("tensor '{name}' has no valid data_type")))
}

pub struct LoadedModel {
    pub name: String,
    pub version: i64,
    pub config: ModelConfig,
    /// The config as `/config` returns it, computed once at load.
    pub config_json: serde_json::Value,
    pub platform: &'static str,
    pub inputs: Vec<IoSpec>,
    pub outputs: Vec<IoSpec>,
    labels: HashMap<String, Arc<Vec<String>>>,
    pool: Arc<InstancePool>,
    pub stats: Arc<ModelStats>,
    /// Set when the config has `dynamic_batching` (and the model batches).
    batcher_config: Option<BatcherConfig>,
    /// Started on the first request (inside the async runtime).
    batcher: OnceLock<DynamicBatcher>,
    /// The server's response cache, when this model enables it.
    cache: Option<Arc<ResponseCache>>,
    /// Set when the config has `sequence_batching`.
    sequence_config: Option<SequenceConfig>,
    sequencer: OnceLock<SequenceBatcher>,
}

impl LoadedModel {
    /// Creates every instance of every instance group. Blocking (sessions take tens of ms).
    pub fn load(
        config: ModelConfig,
        version: i64,
        backend: &dyn Backend,
        model_dir: &Path,
        model_path: &Path,
    ) -> CoreResult<Self> {
        let inputs = config.input.iter().map(|i| IoSpec::from_config(i, i.optional)).collect::<CoreResult<Vec<_>>>()?;
        let outputs = config.output.iter().map(|o| IoSpec::from_config(o, false)).collect::<CoreResult<Vec<_>>>()?;
        let mut labels = HashMap::new();
        for output in config.output.iter().filter(|o| !o.label_filename.is_empty()) {
            let path = model_dir.join(&output.label_filename);
            let text = std::fs::read_to_string(&path).map_err(|e| {
                CoreError::invalid_arg(format!("failed to read label file {} for output '{}': {e}", path.display(), output.name))
            })?;
            labels.insert(output.name.clone(), Arc::new(text.lines().map(str::to_owned).collect()));
        }
        let version_dir = model_path.parent().unwrap_or(model_dir);
        let mut instances = Vec::new();
        for group in &config.instance_group {
            for index in 0..group.count.max(0) {
                let ctx = InstanceContext {
                    config: &config,
                    model_dir,
                    version_dir,
                    model_path,
                    version,
                    instance_name: format!("{}_{index}", group.name),
                };
                instances.push(backend.create_instance(&ctx)?);
            }
        }
        if instances.is_empty() {
            return Err(CoreError::invalid_arg(format!("model '{}' has no instances (instance_group count is 0)", config.name)));
        }
        let sequence_config = match &config.scheduling_choice {
            Some(crate::config::pb::model_config::SchedulingChoice::SequenceBatching(_))
                if config.model_transaction_policy.as_ref().is_some_and(|p| p.decoupled) =>
            {
                return Err(CoreError::unsupported(format!(
                    "model '{}': sequence batching for decoupled models is not supported",
                    config.name
                )));
            }
            Some(crate::config::pb::model_config::SchedulingChoice::SequenceBatching(sb)) => {
                Some(SequenceConfig::new(&config.name, config.max_batch_size, instances.len(), sb, model_dir)?)
            }
            _ => None,
        };
        let batcher_config = match &config.scheduling_choice {
            Some(crate::config::pb::model_config::SchedulingChoice::DynamicBatching(d)) if config.max_batch_size > 0 => {
                Some(BatcherConfig::new(config.max_batch_size, d))
            }
            _ => None,
        };
        Self {
            name: config.name.clone(),
            version,
            config_json: crate::config::to_json(&config),
            platform: backend.platform(),
            inputs,
            outputs,
            labels,
            pool: Arc::new(InstancePool::new(instances)),
            stats: Arc::new(ModelStats::default()),
            batcher_config,
            batcher: OnceLock::new(),
            cache: None,
            sequence_config,
            sequencer: OnceLock::new(),
            config,
        }
        .warmed_up(model_dir)
    }

    /// Uses the server's response cache when the config enables it (`response_cache { enable:
    /// true }`); without a server cache (`--cache-config`) the setting has no effect.
    pub fn with_response_cache(mut self, cache: Option<Arc<ResponseCache>>) -> Self {
        // Sequence models depend on state, not only on their inputs: never cached.
        if self.response_cache_enabled() && !self.is_decoupled() && self.sequence_config.is_none() {
            if cache.is_none() {
                tracing::warn!(model = self.name.as_str(), "response_cache is enabled but the server has no cache (--cache-config local,size=N): not caching");
            }
            self.cache = cache;
        }
        self
    }

    /// Runs the config's `model_warmup` samples on every instance before the model is served; a
    /// failing sample fails the load with its error.
    fn warmed_up(self, model_dir: &Path) -> CoreResult<Self> {
        for sample in &self.config.model_warmup {
            let fail = |e: CoreError| {
                CoreError::new(e.kind, format!("model '{}' failed warmup sample '{}': {}", self.name, sample.name, e.message))
            };
            let request = self.warmup_request(sample, model_dir).map_err(fail)?;
            let (exec, batch_size) = self.prepare(&request).map_err(fail)?;
            let wanted = self.check_outputs(&request).map_err(fail)?;
            let exec = ExecRequest { outputs: wanted.iter().map(|o| o.name.clone()).collect(), ..exec };
            let Ok(mut idle) = self.pool.idle.lock() else {
                return Err(CoreError::internal("instance pool poisoned"));
            };
            for instance in idle.iter_mut() {
                for _ in 0..sample.count.max(1) {
                    let outputs = instance
                        .execute(vec![exec.clone()])
                        .pop()
                        .unwrap_or_else(|| Err(CoreError::internal("instance returned no result")))
                        .map_err(fail)?;
                    self.postprocess(outputs, batch_size, &wanted).map_err(fail)?;
                }
            }
            tracing::info!(model = self.name.as_str(), sample = sample.name.as_str(), "warmup done");
        }
        Ok(self)
    }

    fn warmup_request(&self, sample: &crate::config::pb::ModelWarmup, model_dir: &Path) -> CoreResult<InferRequest> {
        use crate::config::pb::model_warmup::input::InputDataType;
        let mut request = InferRequest { model_name: self.name.clone(), id: Some(format!("warmup:{}", sample.name)), ..Default::default() };
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut random = move || {
            // xorshift64*: deterministic, dependency-free filler
            seed ^= seed >> 12;
            seed ^= seed << 25;
            seed ^= seed >> 27;
            seed.wrapping_mul(0x2545_f491_4f6c_dd1d)
        };
        for (name, input) in &sample.inputs {
            let datatype = config_datatype(name, input.data_type)?;
            let mut shape = if self.max_batch_size() > 0 { vec![i64::from(sample.batch_size.max(1))] } else { Vec::new() };
            shape.extend(&input.dims);
            let count = crate::tensor::element_count(&shape)?;
            let data: Bytes = match &input.input_data_type {
                Some(InputDataType::InputDataFile(file)) => {
                    let path = model_dir.join("warmup").join(file);
                    Bytes::from(std::fs::read(&path).map_err(|e| {
                        CoreError::invalid_arg(format!("cannot read warmup data file {}: {e}", path.display()))
                    })?)
                }
                Some(InputDataType::RandomData(true)) => match datatype.element_size() {
                    None => {
                        let mut out = Vec::new();
                        for _ in 0..count {
                            let word: Vec<u8> = (0..8).map(|_| b'a' + (random() % 26) as u8).collect();
                            push_bytes_element(&mut out, &word)?;
                        }
                        Bytes::from(out)
                    }
                    Some(size) => {
                        let mut out = Vec::with_capacity(count * size);
                        for _ in 0..count {
                            let r = random();
                            match datatype {
                                DataType::Fp32 => out.extend_from_slice(&((r >> 40) as f32 / (1u64 << 24) as f32).to_le_bytes()),
                                DataType::Fp64 => out.extend_from_slice(&((r >> 11) as f64 / (1u64 << 53) as f64).to_le_bytes()),
                                DataType::Fp16 => out.extend_from_slice(&half::f16::from_f32((r >> 40) as f32 / (1u64 << 24) as f32).to_le_bytes()),
                                DataType::Bf16 => out.extend_from_slice(&half::bf16::from_f32((r >> 40) as f32 / (1u64 << 24) as f32).to_le_bytes()),
                                DataType::Bool => out.push((r & 1) as u8),
                                // small non-negative integers are valid for every integer type
                                _ => {
                                    let mut v = vec![0u8; size];
                                    v[0] = (r % 100) as u8;
                                    out.extend_from_slice(&v);
                                }
                            }
                        }
                        Bytes::from(out)
                    }
                },
                // zero_data, or nothing chosen
                _ => crate::tensor::zeros(datatype, &shape)?,
            };
            request.inputs.push(Tensor::new(name.clone(), datatype, shape, data)?);
        }
        Ok(request)
    }

    pub fn max_batch_size(&self) -> i64 {
        i64::from(self.config.max_batch_size)
    }

    /// Decoupled models (`model_transaction_policy { decoupled: true }`) answer 0..n times per
    /// request, so they are reached through [`LoadedModel::infer_stream`] only.
    /// `response_cache { enable: true }` in the config.
    pub fn response_cache_enabled(&self) -> bool {
        self.config.response_cache.as_ref().is_some_and(|c| c.enable)
    }

    pub fn is_decoupled(&self) -> bool {
        self.config.model_transaction_policy.as_ref().is_some_and(|p| p.decoupled)
    }

    /// Runs one request and streams its responses: one for a regular model, 0..n for a decoupled
    /// one. The stream ends after the final response.
    pub async fn infer_stream(self: &Arc<Self>, request: InferRequest) -> CoreResult<ResponseStream> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        if !self.is_decoupled() {
            let _ = tx.send(self.infer(request).await);
            return Ok(rx);
        }
        let start = Instant::now();
        let (exec, batch_size) = self.prepare(&request).map_err(|e| self.with_request_id(&request, e))?;
        let wanted = self.check_outputs(&request)?;
        let (raw_tx, mut raw_rx) = tokio::sync::mpsc::unbounded_channel();
        // Kept until execute returns, so an instance failure still reaches the caller's stream.
        let error_tx = raw_tx.clone();
        let exec = ExecRequest { outputs: wanted.iter().map(|o| o.name.clone()).collect(), responder: Some(raw_tx), ..exec };
        let model = Arc::clone(self);
        let id = request.id.clone();
        // Post-process each raw response while the instance may still be producing more.
        let forward = tokio::spawn(async move {
            let mut ok = true;
            while let Some(super::backend::RawResponse { outputs: item, is_final }) = raw_rx.recv().await {
                let response = item.and_then(|outputs| model.postprocess(outputs, batch_size, &wanted)).map(|outputs| InferResponse {
                    model_name: model.name.clone(),
                    model_version: model.version,
                    id: id.clone(),
                    outputs,
                    parameters: Default::default(),
                    shared_memory: Default::default(),
                    is_final,
                });
                ok &= response.is_ok();
                if tx.send(response).is_err() {
                    break;
                }
            }
            ok
        });
        let model = Arc::clone(self);
        // Execute on its own task, so responses stream to the caller while the instance runs.
        tokio::spawn(async move {
        let queued = Instant::now();
        let executed = model.pool.execute(vec![exec], || model.stats.record_queue(queued.elapsed())).await;
        let infer_done = Instant::now();
        // A decoupled instance answers through the responder; a failed execute (a trap, say) ends
        // the stream with that error.
        let instance_error = match executed {
            Ok(mut results) => results.pop().and_then(Result::err),
            Err(e) => Some(e),
        };
        if let Some(e) = &instance_error {
            let _ = error_tx.send(crate::backend::RawResponse { outputs: Err(e.clone()), is_final: true });
        }
        drop(error_tx);
        let streamed_ok = forward.await.unwrap_or(false);
        let ok = streamed_ok && instance_error.is_none();
        model.stats.record_execution(batch_size, queued.saturating_duration_since(start), infer_done - queued, Duration::ZERO);
        let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        model.stats.record_request(ok, start.elapsed(), now_ms);
        });
        Ok(rx)
    }

    fn with_request_id(&self, request: &InferRequest, e: CoreError) -> CoreError {
        // Triton prefixes the core's input-validation errors with the request id.
        let id = request.id.as_deref().filter(|id| !id.is_empty()).unwrap_or("<id_unknown>");
        CoreError::new(e.kind, format!("[request id: {id}] {}", e.message))
    }

    /// Runs one request end to end, recording statistics.
    pub async fn infer(&self, request: InferRequest) -> CoreResult<InferResponse> {
        let start = Instant::now();
        let result = match &self.cache {
            None => self.infer_inner(request, start).await,
            Some(cache) => {
                let key = ResponseCache::key(&self.name, self.version, &request);
                if let Some(outputs) = cache.get(&key) {
                    // A hit counts as a success (recorded below) and a cache hit, not as an execution.
                    self.stats.record_cache(true, start.elapsed());
                    Ok(InferResponse {
                        model_name: self.name.clone(),
                        model_version: self.version,
                        id: request.id,
                        outputs,
                        is_final: true,
                        ..Default::default()
                    })
                } else {
                    let result = self.infer_inner(request, start).await;
                    if let Ok(response) = &result {
                        let inserting = Instant::now();
                        cache.insert(key, response.outputs.clone());
                        self.stats.record_cache(false, inserting.elapsed());
                    }
                    result
                }
            }
        };
        let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        self.stats.record_request(result.is_ok(), start.elapsed(), now_ms);
        if let Err(e) = &result {
            self.stats.record_failure(crate::stats::FailureReason::of(e));
        }
        result
    }

    async fn infer_inner(&self, request: InferRequest, start: Instant) -> CoreResult<InferResponse> {
        if self.is_decoupled() {
            return Err(CoreError::invalid_arg(format!(
                "model '{}' is decoupled (it may send any number of responses) and this endpoint doesn't support models with decoupled transaction policy: use generate_stream over HTTP, or infer-stream from a guest",
                self.name
            )));
        }
        let (exec, batch_size) = self.prepare(&request).map_err(|e| self.with_request_id(&request, e))?;
        let wanted = self.check_outputs(&request)?;
        let exec = ExecRequest { outputs: wanted.iter().map(|o| o.name.clone()).collect(), ..exec };
        let outputs = if let Some(config) = &self.sequence_config {
            let sequencer = self.sequencer.get_or_init(|| {
                SequenceBatcher::start(config.clone(), Arc::clone(&self.pool), Arc::clone(&self.stats))
            });
            let outputs = sequencer.submit(exec, batch_size).await?;
            self.postprocess(outputs, batch_size, &wanted)?
        } else if let Some(config) = &self.batcher_config {
            // The batcher records queue and execution statistics per batch.
            let batcher = self.batcher.get_or_init(|| {
                DynamicBatcher::start(config.clone(), Arc::clone(&self.pool), Arc::clone(&self.stats), self.name.clone())
            });
            let outputs = batcher.submit(exec, batch_size).await?.outputs?;
            self.postprocess(outputs, batch_size, &wanted)?
        } else {
            let queued = Instant::now();
            let pending = PendingGuard::new(&self.stats);
            let dequeued = || {
                pending.release();
                self.stats.record_queue(queued.elapsed());
            };
            let mut results = self.pool.execute(vec![exec], dequeued).await?;
            let infer_done = Instant::now();
            let outputs = results.pop().unwrap_or_else(|| Err(CoreError::internal("instance returned no result")))?;
            let outputs = self.postprocess(outputs, batch_size, &wanted)?;
            let output_done = Instant::now();
            self.stats.record_execution(
                batch_size,
                queued.saturating_duration_since(start),
                infer_done.saturating_duration_since(queued),
                output_done.saturating_duration_since(infer_done),
            );
            outputs
        };
        Ok(InferResponse {
            model_name: self.name.clone(),
            model_version: self.version,
            id: request.id,
            outputs,
            parameters: Default::default(),
            shared_memory: Default::default(),
            is_final: true,
        })
    }

    /// Checks the request's inputs against the config (names, datatypes, shapes, batch size) and
    /// applies input reshapes. Returns the instance-facing inputs and the batch size (1 for models
    /// that do not batch).
    fn prepare(&self, request: &InferRequest) -> CoreResult<(ExecRequest, usize)> {
        let model = &self.name;
        let batching = self.config.max_batch_size > 0;
        // Like Triton, agree on the batch size (dim 0 of every input) before checking shapes.
        let mut batch_size: Option<(i64, &str)> = None;
        if batching {
            for tensor in &request.inputs {
                let b = tensor.shape.first().copied().unwrap_or(0);
                match batch_size {
                    None => batch_size = Some((b, &tensor.name)),
                    Some((prev, first)) if prev != b => {
                        return Err(CoreError::invalid_arg(format!(
                            "input '{}' batch size does not match other inputs for '{model}' (input '{first}' has batch size {prev}, '{}' has {b})",
                            tensor.name, tensor.name
                        )));
                    }
                    Some(_) => {}
                }
            }
        }
        let mut inputs = Vec::with_capacity(request.inputs.len());
        for (i, tensor) in request.inputs.iter().enumerate() {
            if request.inputs[..i].iter().any(|t| t.name == tensor.name) {
                return Err(CoreError::invalid_arg(format!("input '{}' already exists in request", tensor.name)));
            }
            let spec = self.inputs.iter().find(|s| s.name == tensor.name).ok_or_else(|| {
                CoreError::invalid_arg(format!(
                    "unexpected inference input '{}' for model '{model}'. Allowed inputs are: {}",
                    tensor.name,
                    self.inputs.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", ")
                ))
            })?;
            if tensor.datatype != spec.datatype {
                return Err(CoreError::invalid_arg(format!(
                    "inference input '{}' data-type is '{}', but model '{model}' expects '{}'",
                    tensor.name, tensor.datatype, spec.datatype
                )));
            }
            let dims = if batching {
                let Some((_, rest)) = tensor.shape.split_first() else {
                    return Err(CoreError::invalid_arg(format!(
                        "input '{}' has no batch dimension but model '{model}' supports batching (max_batch_size {})",
                        tensor.name, self.config.max_batch_size
                    )));
                };
                rest
            } else {
                &tensor.shape[..]
            };
            if !shape_matches(dims, &spec.dims) {
                let expected: Vec<i64> = if batching { [-1].iter().chain(&spec.dims).copied().collect() } else { spec.dims.clone() };
                return Err(CoreError::invalid_arg(format!(
                    "unexpected shape for input '{}' for model '{model}'. Expected {}, got {}. {}",
                    tensor.name,
                    format_shape(&expected),
                    format_shape(&tensor.shape),
                    if batching { BATCH_NOTE } else { "" }
                )));
            }
            let mut model_tensor = tensor.clone();
            if let Some(reshape) = &spec.reshape {
                let mut shape: Vec<i64> = if batching { vec![tensor.shape[0]] } else { Vec::new() };
                shape.extend(fill_variable_dims(reshape, &spec.dims, dims));
                model_tensor.shape = shape;
            }
            inputs.push(model_tensor);
        }
        let missing: Vec<&str> = self
            .inputs
            .iter()
            .filter(|s| !s.optional && !request.inputs.iter().any(|t| t.name == s.name))
            .map(|s| s.name.as_str())
            .collect();
        if !missing.is_empty() {
            let quoted = |names: &mut dyn Iterator<Item = &str>| names.map(|n| format!("'{n}'")).collect::<Vec<_>>().join(",");
            return Err(CoreError::invalid_arg(format!(
                "expected {} inputs but got {} inputs for model '{model}'. Got input(s) [{}], but missing required input(s) [{}]. Please provide all required input(s).",
                self.inputs.iter().filter(|s| !s.optional).count(),
                request.inputs.len(),
                quoted(&mut request.inputs.iter().map(|t| t.name.as_str())),
                quoted(&mut missing.iter().copied())
            )));
        }
        let batch_size = batch_size.map_or(1, |(b, _)| b);
        if batching && (batch_size < 1 || batch_size > self.max_batch_size()) {
            return Err(CoreError::invalid_arg(format!(
                "inference request batch-size must be <= {} for '{model}'",
                self.config.max_batch_size
            )));
        }

        let exec = ExecRequest {
            id: request.id.clone(),
            inputs,
            parameters: request.parameters.clone(),
            ..Default::default()
        };
        Ok((exec, usize::try_from(batch_size).unwrap_or(1)))
    }

    /// The outputs to return: the requested ones (checked against the config), or all of them.
    fn check_outputs(&self, request: &InferRequest) -> CoreResult<Vec<RequestedOutput>> {
        let model = &self.name;
        Ok(if request.outputs.is_empty() {
            self.outputs.iter().map(|o| RequestedOutput::named(o.name.clone())).collect()
        } else {
            for (i, out) in request.outputs.iter().enumerate() {
                let spec = self.outputs.iter().find(|s| s.name == out.name).ok_or_else(|| {
                    CoreError::invalid_arg(format!("unexpected inference output '{}' for model '{model}'", out.name))
                })?;
                if request.outputs[..i].iter().any(|o| o.name == out.name) {
                    return Err(CoreError::invalid_arg(format!("output '{}' requested more than once", out.name)));
                }
                if out.class_count > 0 && !spec.datatype.is_numeric() {
                    return Err(CoreError::invalid_arg(format!(
                        "classification is not supported for output '{}' of type {}",
                        out.name, spec.datatype
                    )));
                }
            }
            request.outputs.clone()
        })
    }

    /// Checks outputs against the config, undoes output reshapes and applies classification.
    fn postprocess(&self, outputs: Vec<Tensor>, batch_size: usize, wanted: &[RequestedOutput]) -> CoreResult<Vec<Tensor>> {
        let batching = self.config.max_batch_size > 0;
        let mut outputs = outputs;
        let mut result = Vec::with_capacity(wanted.len());
        for want in wanted {
            let position = outputs.iter().position(|t| t.name == want.name).ok_or_else(|| {
                CoreError::internal(format!("model '{}' did not produce requested output '{}'", self.name, want.name))
            })?;
            let mut tensor = outputs.swap_remove(position);
            let spec = self
                .outputs
                .iter()
                .find(|s| s.name == tensor.name)
                .ok_or_else(|| CoreError::internal(format!("model produced unexpected output '{}'", tensor.name)))?;
            let model_dims = spec.reshape.as_ref().unwrap_or(&spec.dims);
            let (batch_ok, dims) = match tensor.shape.split_first() {
                Some((&b, rest)) if batching => (b == batch_size as i64, rest),
                _ => (!batching, &tensor.shape[..]),
            };
            if !batch_ok || !shape_matches(dims, model_dims) {
                return Err(CoreError::internal(format!(
                    "model '{}' produced output '{}' with shape {}, which does not match its configuration {}{}",
                    self.name,
                    tensor.name,
                    format_shape(&tensor.shape),
                    format_shape(model_dims),
                    if batching { format!(" with batch size {batch_size}") } else { String::new() }
                )));
            }
            if tensor.datatype != spec.datatype {
                return Err(CoreError::internal(format!(
                    "output '{}' of model '{}' has datatype {} but the configuration declares {}",
                    tensor.name, self.name, tensor.datatype, spec.datatype
                )));
            }
            if let Some(reshape) = &spec.reshape {
                let (prefix, model_dims) =
                    if batching { tensor.shape.split_at(1.min(tensor.shape.len())) } else { (&[][..], &tensor.shape[..]) };
                let mut shape = prefix.to_vec();
                shape.extend(fill_variable_dims(&spec.dims, reshape, model_dims));
                if crate::tensor::element_count(&shape)? != tensor.element_count() {
                    return Err(CoreError::internal(format!(
                        "output '{}' has shape {} which cannot be reshaped to {}",
                        tensor.name,
                        format_shape(&tensor.shape),
                        format_shape(&shape)
                    )));
                }
                tensor.shape = shape;
            }
            if want.class_count > 0 {
                let labels = self.labels.get(&tensor.name).map(|l| l.as_slice());
                tensor = classify(&tensor, want.class_count as usize, labels, batching.then_some(batch_size))?;
            }
            result.push(tensor);
        }
        Ok(result)
    }
}

const BATCH_NOTE: &str = "NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be prepended to each input shape. If you want to specify the full shape including the batch dim in your input dims config, try setting max_batch_size to zero. See the model configuration docs for more info on max_batch_size.";

/// `actual` matches `expected` when ranks agree and every fixed dim is equal (-1 is a wildcard).
fn shape_matches(actual: &[i64], expected: &[i64]) -> bool {
    actual.len() == expected.len() && actual.iter().zip(expected).all(|(&a, &e)| e == -1 || a == e)
}

/// Produces `target` with its -1 dims replaced, in order, by the values `actual` has at the
/// positions where `source` has -1.
fn fill_variable_dims(target: &[i64], source: &[i64], actual: &[i64]) -> Vec<i64> {
    let mut variable = source.iter().zip(actual).filter(|&(&s, _)| s == -1).map(|(_, &a)| a);
    target.iter().map(|&d| if d == -1 { variable.next().unwrap_or(-1) } else { d }).collect()
}

pub fn format_shape(shape: &[i64]) -> String {
    format!("[{}]", shape.iter().map(i64::to_string).collect::<Vec<_>>().join(","))
}

/// Triton's classification extension: per batch item, the top `k` values as
/// "score:index[:label]" BYTES strings, highest first.
fn classify(tensor: &Tensor, k: usize, labels: Option<&[String]>, batch: Option<usize>) -> CoreResult<Tensor> {
    let values = numeric_values(tensor)?;
    let rows = batch.unwrap_or(1).max(1);
    let per_row = values.len() / rows;
    let k = k.min(per_row);
    let mut data = Vec::new();
    for row in values.chunks(per_row.max(1)).take(rows) {
        let mut order: Vec<usize> = (0..row.len()).collect();
        order.sort_by(|&a, &b| row[b].0.total_cmp(&row[a].0).then(a.cmp(&b)));
        for &index in order.iter().take(k) {
            let mut text = format!("{}:{index}", row[index].1);
            if let Some(label) = labels.and_then(|l| l.get(index)) {
                text.push(':');
                text.push_str(label);
            }
            push_bytes_element(&mut data, text.as_bytes())?;
        }
    }
    let shape = match batch {
        Some(b) => vec![b as i64, k as i64],
        None => vec![k as i64],
    };
    Tensor::new(tensor.name.clone(), DataType::Bytes, shape, Bytes::from(data))
}

/// Each element as (ranking key, display text formatted like C++ `std::to_string`).
fn numeric_values(tensor: &Tensor) -> CoreResult<Vec<(f64, String)>> {
    fn ints<const N: usize>(d: &[u8], f: impl Fn([u8; N]) -> i128) -> Vec<(f64, String)> {
        d.chunks_exact(N).map(|c| f(c.try_into().unwrap_or([0; N]))).map(|v| (v as f64, v.to_string())).collect()
    }
    fn floats<const N: usize>(d: &[u8], f: impl Fn([u8; N]) -> f64) -> Vec<(f64, String)> {
        d.chunks_exact(N).map(|c| f(c.try_into().unwrap_or([0; N]))).map(|v| (v, format!("{v:.6}"))).collect()
    }
    let d = &tensor.data[..];
    Ok(match tensor.datatype {
        DataType::Uint8 => ints::<1>(d, |b| i128::from(b[0])),
        DataType::Int8 => ints::<1>(d, |b| i128::from(b[0] as i8)),
        DataType::Uint16 => ints::<2>(d, |b| i128::from(u16::from_le_bytes(b))),
        DataType::Int16 => ints::<2>(d, |b| i128::from(i16::from_le_bytes(b))),
        DataType::Uint32 => ints::<4>(d, |b| i128::from(u32::from_le_bytes(b))),
        DataType::Int32 => ints::<4>(d, |b| i128::from(i32::from_le_bytes(b))),
        DataType::Uint64 => ints::<8>(d, |b| i128::from(u64::from_le_bytes(b))),
        DataType::Int64 => ints::<8>(d, |b| i128::from(i64::from_le_bytes(b))),
        DataType::Fp16 => floats::<2>(d, |b| f64::from(half::f16::from_le_bytes(b))),
        DataType::Bf16 => floats::<2>(d, |b| f64::from(half::bf16::from_le_bytes(b))),
        DataType::Fp32 => floats::<4>(d, |b| f64::from(f32::from_le_bytes(b))),
        DataType::Fp64 => floats::<8>(d, f64::from_le_bytes),
        DataType::Bool | DataType::Bytes => {
            return Err(CoreError::invalid_arg(format!(
                "classification is not supported for output '{}' of type {}",
                tensor.name, tensor.datatype
            )));
        }
    })
}

/// Counts a request as pending (waiting for an instance) until released or dropped, so a caller
/// that goes away while waiting does not leave the gauge high.
struct PendingGuard<'a> {
    stats: &'a ModelStats,
    counted: std::sync::atomic::AtomicBool,
}

impl<'a> PendingGuard<'a> {
    fn new(stats: &'a ModelStats) -> Self {
        stats.pending_add(1);
        Self { stats, counted: std::sync::atomic::AtomicBool::new(true) }
    }

    fn release(&self) {
        if self.counted.swap(false, std::sync::atomic::Ordering::Relaxed) {
            self.stats.pending_add(-1);
        }
    }
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.release();
    }
}

/// Instances of one model version. A semaphore with one permit per idle instance means a
/// request waits (rather than fails) when all instances are busy, and no instance ever runs two
/// batches at once.
pub struct InstancePool {
    idle: Arc<Mutex<Vec<Box<dyn ModelInstance>>>>,
    available: Arc<Semaphore>,
    /// Instances not retired after a panic; at zero the semaphore is closed so that waiting and
    /// later requests fail instead of waiting forever.
    alive: Arc<std::sync::atomic::AtomicUsize>,
}

impl InstancePool {
    pub fn new(instances: Vec<Box<dyn ModelInstance>>) -> Self {
        let available = Arc::new(Semaphore::new(instances.len()));
        let alive = Arc::new(std::sync::atomic::AtomicUsize::new(instances.len()));
        Self { idle: Arc::new(Mutex::new(instances)), available, alive }
    }

    /// An idle instance's slot, if one is free right now.
    pub fn try_acquire(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.available).try_acquire_owned().ok()
    }

    /// Waits for an idle instance's slot.
    pub fn acquire(&self) -> impl std::future::Future<Output = CoreResult<OwnedSemaphorePermit>> + 'static {
        let available = Arc::clone(&self.available);
        async move {
            available.acquire_owned().await.map_err(|_| {
                CoreError::unavailable("no model instance is left (every instance panicked and was retired): reload the model")
            })
        }
    }

    async fn execute(
        &self,
        batch: Vec<ExecRequest>,
        on_dequeue: impl FnOnce(),
    ) -> CoreResult<Vec<CoreResult<Vec<Tensor>>>> {
        let permit = self.acquire().await?;
        on_dequeue();
        self.execute_with(permit, batch).await
    }

    /// Runs a batch on an idle instance; `permit` is that instance's slot (from [`Self::acquire`]).
    pub async fn execute_with(
        &self,
        permit: OwnedSemaphorePermit,
        batch: Vec<ExecRequest>,
    ) -> CoreResult<Vec<CoreResult<Vec<Tensor>>>> {
        let instance = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        let Some(mut instance) = instance else {
            return Err(CoreError::internal("no idle model instance despite a free slot"));
        };
        let idle = Arc::clone(&self.idle);
        let alive = Arc::clone(&self.alive);
        let available = Arc::clone(&self.available);
        // The blocking task itself returns the instance and its slot, so a caller that goes away
        // mid-execution (client disconnect, BLS timeout) cannot lose the instance.
        let joined = tokio::task::spawn_blocking(move || {
            let result = std::panic::catch_unwind(AssertUnwindSafe(|| instance.execute(batch)));
            match result {
                Ok(results) => {
                    if let Ok(mut idle) = idle.lock() {
                        idle.push(instance);
                    }
                    drop(permit);
                    Some(results)
                }
                Err(_) => {
                    // The instance may be in an inconsistent state: retire it and its slot.
                    permit.forget();
                    tracing::error!("model instance panicked during execution and was retired");
                    if alive.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) == 1 {
                        available.close();
                    }
                    None
                }
            }
        })
        .await;
        match joined {
            Ok(Some(results)) => Ok(results),
            Ok(None) | Err(_) => Err(CoreError::internal("model instance failed during execution")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An instance that stays inside execute until `target` executions overlap (or `patience` passes),
    /// counting how many run at once.
    struct GatedInstance {
        running: Arc<std::sync::atomic::AtomicUsize>,
        peak: Arc<std::sync::atomic::AtomicUsize>,
        target: usize,
        patience: std::time::Duration,
    }

    impl ModelInstance for GatedInstance {
        fn execute(&mut self, batch: Vec<ExecRequest>) -> Vec<CoreResult<Vec<Tensor>>> {
            use std::sync::atomic::Ordering::SeqCst;
            let now = self.running.fetch_add(1, SeqCst) + 1;
            self.peak.fetch_max(now, SeqCst);
            let deadline = Instant::now() + self.patience;
            while self.peak.load(SeqCst) < self.target && Instant::now() < deadline {
                std::thread::yield_now();
            }
            self.running.fetch_sub(1, SeqCst);
            batch.into_iter().map(|_| Ok(Vec::new())).collect()
        }
    }

    async fn peak_concurrency(instances: usize, requests: usize, target: usize, patience_ms: u64) -> usize {
        let patience = std::time::Duration::from_millis(patience_ms);
        let running = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let peak = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let pool = Arc::new(InstancePool::new(
            (0..instances)
                .map(|_| Box::new(GatedInstance { running: running.clone(), peak: peak.clone(), target, patience }) as Box<dyn ModelInstance>)
                .collect(),
        ));
        let tasks: Vec<_> = (0..requests)
            .map(|_| {
                let pool = pool.clone();
                tokio::spawn(async move { pool.execute(vec![ExecRequest::default()], || {}).await })
            })
            .collect();
        for task in tasks {
            assert!(task.await.unwrap().is_ok());
        }
        peak.load(std::sync::atomic::Ordering::SeqCst)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn instances_run_concurrently_but_never_twice_at_once() {
        // Two instances, two requests that wait for each other: they overlap.
        assert_eq!(peak_concurrency(2, 2, 2, 5000).await, 2);
        // One instance, three requests that would wait for an overlap: it never comes.
        assert_eq!(peak_concurrency(1, 3, 2, 200).await, 1);
    }

    #[test]
    fn variable_dims_fill_in_order() {
        assert_eq!(fill_variable_dims(&[16], &[4, 4], &[4, 4]), vec![16]);
        assert_eq!(fill_variable_dims(&[-1, 4], &[4, -1], &[4, 7]), vec![7, 4]);
        assert!(shape_matches(&[3, 16], &[-1, 16]));
        assert!(!shape_matches(&[16], &[-1, 16]));
        assert!(!shape_matches(&[1, 15], &[1, 16]));
    }

    #[test]
    fn classification_formats_like_triton() {
        let values: Vec<u8> = [0.1f32, 0.7, 0.2, 0.5, 0.0, 0.9].iter().flat_map(|v| v.to_le_bytes()).collect();
        let t = Tensor::new("o", DataType::Fp32, vec![2, 3], Bytes::from(values)).unwrap();
        let labels = vec!["a".to_string(), "b".to_string(), "c".to_string()];
        let out = classify(&t, 2, Some(&labels), Some(2)).unwrap();
        assert_eq!(out.shape, vec![2, 2]);
        let strings: Vec<_> = crate::tensor::bytes_elements(&out.data).map(|s| String::from_utf8_lossy(s).into_owned()).collect();
        assert_eq!(strings, vec!["0.700000:1:b", "0.200000:2:c", "0.900000:2:c", "0.500000:0:a"]);
        let ints: Vec<u8> = [3i32, 9, 1].iter().flat_map(|v| v.to_le_bytes()).collect();
        let t = Tensor::new("o", DataType::Int32, vec![3], Bytes::from(ints)).unwrap();
        let out = classify(&t, 5, None, None).unwrap();
        assert_eq!(out.shape, vec![3]);
        let strings: Vec<_> = crate::tensor::bytes_elements(&out.data).map(|s| String::from_utf8_lossy(s).into_owned()).collect();
        assert_eq!(strings, vec!["9:1", "3:0", "1:2"]);
    }
}
