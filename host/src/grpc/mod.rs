//! The gRPC front door: `inference.GRPCInferenceService` (KServe v2 plus Triton's extensions) and
//! `grpc.health.v1.Health`, served by tonic. Like the HTTP door it only translates messages; every
//! call lands in [`Frontend`], and errors map to gRPC codes in one place ([`status`]).
//!
//! Behaviour follows Triton 2.51 as observed (docs/triton-grpc-behaviour.md): errors on
//! `ModelStreamInfer` travel in-stream as `error_message` and the stream stays open; every stream
//! response carries the `triton_final_response` parameter; a decoupled model's final flag without a
//! response is sent as an empty response only when the request sets
//! `triton_enable_empty_final_response`.
//!
//! Files by job: `options` (the door's settings), `serve` (the accept loop, TLS, the layers in
//! front of the services: `restrict` for restricted protocols, `limits` for message bounds),
//! `connection` (one connection's slot and its silent and idle clocks), this file
//! (the inference service's calls), `stream` (`ModelStreamInfer`'s requests), `health`, `codec`
//! (protobuf <-> core types) and `status` (errors to gRPC codes).

pub mod codec;
mod connection;
mod health;
pub mod limits;
mod options;
mod restrict;
mod scan;
mod serve;
mod status;
mod stream;
mod tenant;

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;

use futures_util::stream::FuturesUnordered;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

use crate::error::{CoreError, CoreResult};
use crate::frontend::{Door, EXTENSIONS, Frontend, SettingValue, VersionStats};
use crate::infer::check_string_correlation_id;
use crate::proto::inference as pb;
use crate::proto::inference::grpc_inference_service_server::GrpcInferenceService;
use crate::proto::inference::infer_parameter::ParameterChoice;
use crate::stats::Duration2;
use crate::trace::{activity, stamp};
use codec::parse_version;

pub use options::{GrpcOptions, GrpcTls};
pub use serve::serve;
use stream::{stream_request, wait_stop};
use tenant::{Requester, caller_of};

/// Responses buffered per stream before a slow reader pushes back on the models.
pub const DEFAULT_STREAM_RESPONSES: usize = 256;

/// Triton 2.7x's answer to an inference call once the server is stopping.
const SHUTTING_DOWN: &str = "GRPC server is shutting down and has stopped accepting new requests.";

/// Requests of one stream in flight at once; more wait in the client's HTTP/2 window.
const MAX_STREAM_INFLIGHT: usize = 1024;

/// The one request parameter starting with `triton_` that clients may set.
const EMPTY_FINAL_RESPONSE: &str = "triton_enable_empty_final_response";
const FINAL_RESPONSE: &str = "triton_final_response";

pub struct InferenceService {
    frontend: Arc<Frontend>,
    /// Becomes true when the server shuts down.
    shutdown: tokio::sync::watch::Receiver<bool>,
    /// Responses a stream holds for its client at once (`--grpc-max-response-pool-size`).
    stream_responses: usize,
}

type GrpcResult<T> = Result<Response<T>, Status>;

/// Optional string fields of Triton's messages: empty means "not given" (all models, all regions).
fn non_empty(s: &str) -> Option<&str> {
    Some(s).filter(|s| !s.is_empty())
}

/// Models come from every repository together; a request naming one is refused, as in Triton.
fn no_repository_name(repository_name: &str) -> CoreResult<()> {
    if repository_name.is_empty() {
        Ok(())
    } else {
        Err(CoreError::unsupported("'repository_name' specification is not supported"))
    }
}

fn ok<T>(message: T) -> GrpcResult<T> {
    Ok(Response::new(message))
}

fn bool_param(v: bool) -> pb::InferParameter {
    pb::InferParameter { parameter_choice: Some(ParameterChoice::BoolParam(v)) }
}

fn duration(d: Duration2) -> Option<pb::StatisticDuration> {
    Some(pb::StatisticDuration { count: d.count, ns: d.ns })
}

fn model_statistics(model: &VersionStats) -> pb::ModelStatistics {
    let s = model.stats.snapshot();
    pb::ModelStatistics {
        name: model.name.clone(),
        version: model.version.to_string(),
        last_inference: s.last_inference_ms,
        inference_count: s.inference_count,
        execution_count: s.execution_count,
        inference_stats: Some(pb::InferStatistics {
            success: duration(s.success),
            fail: duration(s.fail),
            queue: duration(s.queue),
            compute_input: duration(s.compute_input),
            compute_infer: duration(s.compute_infer),
            compute_output: duration(s.compute_output),
            cache_hit: duration(s.cache_hit),
            cache_miss: duration(s.cache_miss),
        }),
        batch_stats: s
            .batches
            .iter()
            .map(|(size, [i, c, o])| pb::InferBatchStatistics {
                batch_size: *size as u64,
                compute_input: duration(*i),
                compute_infer: duration(*c),
                compute_output: duration(*o),
            })
            .collect(),
        memory_usage: Vec::new(),
        response_stats: BTreeMap::new(),
    }
}

/// Checks the request parameters as Triton's gRPC door does (`SetInferenceRequestMetadata`):
/// the types of the ones it reserves, `triton_` keys, and the types custom parameters may have.
/// Returns whether an empty final response was asked for.
fn reserved_parameters(request: &pb::ModelInferRequest) -> CoreResult<bool> {
    let mut empty_final = false;
    let wrong_type = |key: &str, expected: &str| {
        CoreError::invalid_arg(format!("invalid value type for '{key}' parameter, expected {expected}."))
    };
    for (key, value) in &request.parameters {
        let choice = value.parameter_choice.as_ref();
        match key.as_str() {
            "sequence_id" => match choice {
                Some(ParameterChoice::Int64Param(_)) => {}
                Some(ParameterChoice::StringParam(id)) => check_string_correlation_id(id)?,
                _ => return Err(wrong_type(key, "int64_param or string_param")),
            },
            "sequence_start" | "sequence_end" => {
                if !matches!(choice, Some(ParameterChoice::BoolParam(_))) {
                    return Err(wrong_type(key, "bool_param"));
                }
            }
            "priority" => match choice {
                Some(ParameterChoice::Int64Param(p)) if *p < 0 => {
                    return Err(CoreError::invalid_arg("invalid value for 'priority', expected value >= 0."));
                }
                Some(ParameterChoice::Int64Param(_) | ParameterChoice::Uint64Param(_)) => {}
                _ => return Err(wrong_type(key, "int64_param or uint64_param")),
            },
            "timeout" => {
                if !matches!(choice, Some(ParameterChoice::Int64Param(_))) {
                    return Err(wrong_type(key, "int64_param"));
                }
            }
            EMPTY_FINAL_RESPONSE => match choice {
                Some(ParameterChoice::BoolParam(b)) => empty_final = *b,
                _ => return Err(wrong_type(key, "bool_param")),
            },
            _ if key.starts_with("triton_") => {
                return Err(CoreError::invalid_arg(format!(
                    "parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys \
                    starting with 'triton_' are allowed: {EMPTY_FINAL_RESPONSE}"
                )));
            }
            _ => {
                if matches!(choice, None | Some(ParameterChoice::Uint64Param(_))) {
                    return Err(wrong_type(key, "int64_param, bool_param, or string_param"));
                }
            }
        }
    }
    Ok(empty_final)
}

impl InferenceService {
    /// ModelInfer itself (see `model_infer`, which adds the access line).
    /// Triton 2.7x's refusal of an inference call that arrives once the server is stopping (a
    /// call tonic takes before its GOAWAY reaches the client).
    fn refuse_when_stopping(&self) -> Result<(), Status> {
        if *self.shutdown.borrow() {
            return Err(Status::unavailable(SHUTTING_DOWN));
        }
        Ok(())
    }

    async fn infer_unary(
        &self,
        request: Request<pb::ModelInferRequest>,
        caller: &Requester,
    ) -> GrpcResult<pb::ModelInferResponse> {
        self.refuse_when_stopping()?;
        let traceparent = traceparent(request.metadata());
        let forwarded = forwarded_metadata(&self.frontend, request.metadata())?;
        let request = request.into_inner();
        // Resolved once: the request runs on this version, even if another turns ready meanwhile.
        let name = caller.visible(&request.model_name);
        let model = self.frontend.model(&name, parse_version(&request.model_version)?)?;
        reserved_parameters(&request)?;
        if model.is_decoupled() {
            let message = "ModelInfer RPC doesn't support models with decoupled transaction policy";
            return Err(CoreError::unsupported(message).into());
        }
        // tonic has read the message by now: its read is these two instants.
        let trace = self.frontend.trace(model.name(), traceparent.as_deref());
        stamp(&trace, activity::GRPC_WAITREAD_START);
        stamp(&trace, activity::GRPC_WAITREAD_END);
        let decoded = codec::decode_request(request)?;
        let principal = caller.principal.clone();
        let response = self.frontend.infer_decoded(&model, decoded, Ok(forwarded), &trace, principal).await?;
        stamp(&trace, activity::GRPC_SEND_START);
        let encoded = codec::encode_response(response);
        stamp(&trace, activity::GRPC_SEND_END);
        ok(encoded)
    }
}

#[tonic::async_trait]
impl GrpcInferenceService for InferenceService {
    async fn server_live(&self, _: Request<pb::ServerLiveRequest>) -> GrpcResult<pb::ServerLiveResponse> {
        ok(pb::ServerLiveResponse { live: true })
    }

    async fn server_ready(&self, _: Request<pb::ServerReadyRequest>) -> GrpcResult<pb::ServerReadyResponse> {
        ok(pb::ServerReadyResponse { ready: self.frontend.server_ready() })
    }

    async fn model_ready(&self, request: Request<pb::ModelReadyRequest>) -> GrpcResult<pb::ModelReadyResponse> {
        let caller = caller_of(&request);
        let request = request.into_inner();
        let version = parse_version(&request.version)?;
        ok(pb::ModelReadyResponse { ready: self.frontend.model_ready(&caller.visible(&request.name), version) })
    }

    async fn server_metadata(&self, _: Request<pb::ServerMetadataRequest>) -> GrpcResult<pb::ServerMetadataResponse> {
        ok(pb::ServerMetadataResponse {
            name: self.frontend.server_id.clone(),
            version: self.frontend.version.to_string(),
            extensions: EXTENSIONS.iter().map(ToString::to_string).collect(),
        })
    }

    async fn model_metadata(
        &self,
        request: Request<pb::ModelMetadataRequest>,
    ) -> GrpcResult<pb::ModelMetadataResponse> {
        let caller = caller_of(&request);
        let request = request.into_inner();
        let metadata = self.frontend.metadata(&caller.visible(&request.name), parse_version(&request.version)?)?;
        let tensors = |ts: Vec<crate::frontend::TensorMetadata>| {
            ts.into_iter()
                .map(|t| pb::model_metadata_response::TensorMetadata {
                    name: t.name,
                    datatype: t.datatype.to_string(),
                    shape: t.shape,
                })
                .collect()
        };
        ok(pb::ModelMetadataResponse {
            name: metadata.name,
            versions: metadata.versions,
            platform: metadata.platform,
            inputs: tensors(metadata.inputs),
            outputs: tensors(metadata.outputs),
        })
    }

    async fn model_infer(&self, request: Request<pb::ModelInferRequest>) -> GrpcResult<pb::ModelInferResponse> {
        let caller = caller_of(&request);
        if !self.frontend.logs_requests() {
            return self.infer_unary(request, &caller).await;
        }
        let started = std::time::Instant::now();
        let (model, version, id) = {
            let r = request.get_ref();
            (r.model_name.clone(), r.model_version.clone(), r.id.clone())
        };
        let result = self.infer_unary(request, &caller).await;
        let code = match &result {
            Ok(_) => "OK".to_string(),
            Err(status) => format!("{:?}", status.code()),
        };
        let version = version.parse().ok();
        let id = Some(id.as_str()).filter(|id| !id.is_empty());
        self.frontend.log_request("grpc", &model, version, id, &code, started.elapsed(), &caller.audit());
        result
    }

    type ModelStreamInferStream = Pin<Box<dyn Stream<Item = Result<pb::ModelStreamInferResponse, Status>> + Send>>;

    async fn model_stream_infer(
        &self,
        request: Request<Streaming<pb::ModelInferRequest>>,
    ) -> GrpcResult<Self::ModelStreamInferStream> {
        self.refuse_when_stopping()?;
        let caller = Arc::new(caller_of(&request));
        // The stream's metadata: every request on it is traced under the same parent.
        let traceparent = traceparent(request.metadata());
        // Every request on the stream gets the stream's forwarded metadata (or its error).
        let forwarded = Arc::new(forwarded_metadata(&self.frontend, request.metadata()));
        let mut incoming = request.into_inner();
        let (tx, rx) = mpsc::channel(self.stream_responses.max(1));
        let frontend = Arc::clone(&self.frontend);
        let mut shutdown = self.shutdown.clone();
        tokio::spawn(async move {
            // Requests on one stream run concurrently, as in Triton, and each request's own
            // responses stay in order. They are driven from this one task: a FuturesUnordered
            // first polls futures in the order they were pushed, so requests reach their model's
            // queue in arrival order (the sequence batcher relies on it for one sequence's
            // requests on one stream).
            let mut inflight = FuturesUnordered::new();
            loop {
                tokio::select! {
                    // Past the limit, stop reading: HTTP/2 flow control then slows the client.
                    message = incoming.message(), if inflight.len() < MAX_STREAM_INFLIGHT => match message {
                        Ok(Some(request)) => inflight.push(stream_request(
                            Arc::clone(&frontend),
                            Arc::clone(&caller),
                            request,
                            traceparent.clone(),
                            Arc::clone(&forwarded),
                            tx.clone(),
                        )),
                        Ok(None) => break,
                        // A message that does not decode ends the stream with its status.
                        Err(status) => {
                            let _ = tx.send(Err(status)).await;
                            break;
                        }
                    },
                    Some(()) = inflight.next(), if !inflight.is_empty() => {}
                    // On shutdown, take no more requests; the stream ends once those in flight are answered.
                    () = wait_stop(&mut shutdown) => break,
                }
            }
            drop(tx);
            while inflight.next().await.is_some() {}
        });
        ok(Box::pin(ReceiverStream::new(rx)))
    }

    async fn model_config(&self, request: Request<pb::ModelConfigRequest>) -> GrpcResult<pb::ModelConfigResponse> {
        let caller = caller_of(&request);
        let request = request.into_inner();
        let model = self.frontend.model(&caller.visible(&request.name), parse_version(&request.version)?)?;
        ok(pb::ModelConfigResponse { config: Some(model.config().clone()) })
    }

    async fn model_statistics(
        &self,
        request: Request<pb::ModelStatisticsRequest>,
    ) -> GrpcResult<pb::ModelStatisticsResponse> {
        let caller = caller_of(&request);
        let request = request.into_inner();
        let name = non_empty(&request.name).map(|n| caller.visible(n));
        let version = parse_version(&request.version)?;
        let models = self.frontend.statistics(caller.principal(), name.as_deref(), version)?;
        ok(pb::ModelStatisticsResponse { model_stats: models.iter().map(model_statistics).collect() })
    }

    async fn repository_index(
        &self,
        request: Request<pb::RepositoryIndexRequest>,
    ) -> GrpcResult<pb::RepositoryIndexResponse> {
        let caller = caller_of(&request);
        let request = request.into_inner();
        no_repository_name(&request.repository_name)?;
        let models = self
            .frontend
            .repository_index(caller.principal(), request.ready)
            .into_iter()
            .map(|e| pb::repository_index_response::ModelIndex {
                name: e.name,
                version: e.version.unwrap_or_default(),
                state: e.state.unwrap_or_default().to_string(),
                reason: e.reason,
            })
            .collect();
        ok(pb::RepositoryIndexResponse { models })
    }

    async fn repository_model_load(
        &self,
        request: Request<pb::RepositoryModelLoadRequest>,
    ) -> GrpcResult<pb::RepositoryModelLoadResponse> {
        use pb::model_repository_parameter::ParameterChoice as P;
        let caller = caller_of(&request);
        let request = request.into_inner();
        no_repository_name(&request.repository_name)?;
        let mut config = None;
        let mut files = Vec::new();
        for (key, value) in request.parameters {
            match (key.as_str(), value.parameter_choice) {
                ("config", Some(P::StringParam(json))) => config = Some(json),
                ("config", _) => {
                    return Err(CoreError::invalid_arg(
                        "invalid value type for load parameter 'config', expected string_param.",
                    )
                    .into());
                }
                (file, Some(P::BytesParam(contents))) if file.starts_with("file:") => files.push((key, contents)),
                (file, _) if file.starts_with("file:") => {
                    return Err(CoreError::invalid_arg(format!(
                        "invalid value type for load parameter '{file}', expected bytes_param."
                    ))
                    .into());
                }
                (other, _) => {
                    return Err(CoreError::invalid_arg(format!("unrecognized load parameter '{other}'.")).into());
                }
            }
        }
        if !files.is_empty()
            && let Some(Err(denied)) = caller.identity.as_ref().map(crate::tenancy::Identity::may_load_files)
        {
            return Err(Status::permission_denied(denied.0));
        }
        self.frontend.load(caller.principal(), &request.model_name, config, files).await?;
        ok(pb::RepositoryModelLoadResponse {})
    }

    async fn repository_model_unload(
        &self,
        request: Request<pb::RepositoryModelUnloadRequest>,
    ) -> GrpcResult<pb::RepositoryModelUnloadResponse> {
        let caller = caller_of(&request);
        let request = request.into_inner();
        no_repository_name(&request.repository_name)?;
        use pb::model_repository_parameter::ParameterChoice as P;
        let mut unload_dependents = false;
        for (key, value) in &request.parameters {
            match (key.as_str(), &value.parameter_choice) {
                ("unload_dependents", Some(P::BoolParam(b))) => unload_dependents = *b,
                ("unload_dependents", _) => {
                    return Err(CoreError::invalid_arg(
                        "invalid value type for unload parameter 'unload_dependents', expected bool_param.",
                    )
                    .into());
                }
                (other, _) => {
                    return Err(CoreError::invalid_arg(format!("unrecognized unload parameter '{other}'.")).into());
                }
            }
        }
        self.frontend.unload(caller.principal(), &request.model_name, unload_dependents).await?;
        ok(pb::RepositoryModelUnloadResponse {})
    }

    async fn system_shared_memory_status(
        &self,
        request: Request<pb::SystemSharedMemoryStatusRequest>,
    ) -> GrpcResult<pb::SystemSharedMemoryStatusResponse> {
        let name = request.into_inner().name;
        let regions = self.frontend.shm.status(non_empty(&name))?;
        ok(pb::SystemSharedMemoryStatusResponse {
            regions: regions
                .into_iter()
                .map(|r| {
                    let status = pb::system_shared_memory_status_response::RegionStatus {
                        name: r.name.clone(),
                        key: r.key,
                        offset: r.offset,
                        byte_size: r.byte_size,
                    };
                    (r.name, status)
                })
                .collect(),
        })
    }

    async fn system_shared_memory_register(
        &self,
        request: Request<pb::SystemSharedMemoryRegisterRequest>,
    ) -> GrpcResult<pb::SystemSharedMemoryRegisterResponse> {
        let r = request.into_inner();
        self.frontend.shm.register(&r.name, &r.key, r.offset, r.byte_size)?;
        ok(pb::SystemSharedMemoryRegisterResponse {})
    }

    async fn system_shared_memory_unregister(
        &self,
        request: Request<pb::SystemSharedMemoryUnregisterRequest>,
    ) -> GrpcResult<pb::SystemSharedMemoryUnregisterResponse> {
        let name = request.into_inner().name;
        self.frontend.shm.unregister(non_empty(&name))?;
        ok(pb::SystemSharedMemoryUnregisterResponse {})
    }

    async fn cuda_shared_memory_status(
        &self,
        request: Request<pb::CudaSharedMemoryStatusRequest>,
    ) -> GrpcResult<pb::CudaSharedMemoryStatusResponse> {
        let name = request.into_inner().name;
        let regions = self.frontend.shm.cuda_status(non_empty(&name))?;
        ok(pb::CudaSharedMemoryStatusResponse {
            regions: regions
                .into_iter()
                .map(|r| {
                    let status = pb::cuda_shared_memory_status_response::RegionStatus {
                        name: r.name.clone(),
                        device_id: u64::try_from(r.device_id).unwrap_or(0),
                        byte_size: r.byte_size,
                    };
                    (r.name, status)
                })
                .collect(),
        })
    }

    async fn cuda_shared_memory_register(
        &self,
        request: Request<pb::CudaSharedMemoryRegisterRequest>,
    ) -> GrpcResult<pb::CudaSharedMemoryRegisterResponse> {
        let r = request.into_inner();
        self.frontend.shm.register_cuda(&r.name, &r.raw_handle, r.device_id, r.byte_size)?;
        ok(pb::CudaSharedMemoryRegisterResponse {})
    }

    async fn cuda_shared_memory_unregister(
        &self,
        request: Request<pb::CudaSharedMemoryUnregisterRequest>,
    ) -> GrpcResult<pb::CudaSharedMemoryUnregisterResponse> {
        let name = request.into_inner().name;
        self.frontend.shm.unregister_cuda(non_empty(&name))?;
        ok(pb::CudaSharedMemoryUnregisterResponse {})
    }

    async fn trace_setting(&self, request: Request<pb::TraceSettingRequest>) -> GrpcResult<pb::TraceSettingResponse> {
        let caller = caller_of(&request);
        let request = request.into_inner();
        let model = non_empty(&request.model_name).map(|m| caller.visible(m));
        let model = model.as_deref();
        let settings = if request.settings.is_empty() {
            self.frontend.trace_settings(model)?
        } else {
            let updates = request
                .settings
                .into_iter()
                .map(|(k, v)| (k, if v.value.is_empty() { None } else { Some(v.value) }))
                .collect();
            self.frontend.update_trace_settings(model, updates)?
        };
        let settings = settings
            .into_iter()
            .map(|(k, v)| {
                let value = match v {
                    SettingValue::List(l) => l,
                    SettingValue::Str(s) => vec![s],
                    SettingValue::Bool(b) => vec![b.to_string()],
                    SettingValue::Uint(u) => vec![u.to_string()],
                };
                (k, pb::trace_setting_response::SettingValue { value })
            })
            .collect();
        ok(pb::TraceSettingResponse { settings })
    }

    async fn log_settings(&self, request: Request<pb::LogSettingsRequest>) -> GrpcResult<pb::LogSettingsResponse> {
        use pb::log_settings_request::setting_value::ParameterChoice as In;
        use pb::log_settings_response::setting_value::ParameterChoice as Out;
        let request = request.into_inner();
        let settings = if request.settings.is_empty() {
            self.frontend.log_settings()?
        } else {
            let updates = request
                .settings
                .into_iter()
                .filter_map(|(k, v)| {
                    let value = match v.parameter_choice? {
                        In::BoolParam(b) => SettingValue::Bool(b),
                        In::Uint32Param(u) => SettingValue::Uint(u),
                        In::StringParam(s) => SettingValue::Str(s),
                    };
                    Some((k, value))
                })
                .collect();
            self.frontend.update_log_settings(updates)?
        };
        let settings = settings
            .into_iter()
            .map(|(k, v)| {
                let choice = match v {
                    SettingValue::Bool(b) => Out::BoolParam(b),
                    SettingValue::Uint(u) => Out::Uint32Param(u),
                    SettingValue::Str(s) => Out::StringParam(s),
                    SettingValue::List(l) => Out::StringParam(l.join(",")),
                };
                (k, pb::log_settings_response::SettingValue { parameter_choice: Some(choice) })
            })
            .collect();
        ok(pb::LogSettingsResponse { settings })
    }
}

/// The W3C `traceparent` a client sent in the call's metadata, if any.
/// The metadata that `--grpc-header-forward-pattern` forwards to the model (text values only).
pub(crate) fn forwarded_metadata(
    frontend: &Frontend,
    metadata: &tonic::metadata::MetadataMap,
) -> CoreResult<Vec<(String, String)>> {
    use tonic::metadata::KeyAndValueRef;
    let text = metadata.iter().filter_map(|entry| match entry {
        KeyAndValueRef::Ascii(key, value) => Some((key.as_str(), value.to_str().ok())),
        KeyAndValueRef::Binary(..) => None,
    });
    frontend.forwarded_headers(Door::Grpc, text)
}

pub(crate) fn traceparent(metadata: &tonic::metadata::MetadataMap) -> Option<String> {
    metadata.get("traceparent").and_then(|v| v.to_str().ok()).map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn inference_calls_are_refused_once_the_server_is_stopping() {
        let (stop, shutdown) = tokio::sync::watch::channel(false);
        let service = InferenceService {
            frontend: Arc::new(Frontend::for_tests()),
            shutdown,
            stream_responses: DEFAULT_STREAM_RESPONSES,
        };
        let request = || Request::new(pb::ModelInferRequest { model_name: "m".into(), ..Default::default() });
        let before = service.model_infer(request()).await.unwrap_err();
        assert_eq!(before.code(), tonic::Code::NotFound, "{before:?}");
        stop.send(true).unwrap();
        let after = service.model_infer(request()).await.unwrap_err();
        assert_eq!((after.code(), after.message()), (tonic::Code::Unavailable, SHUTTING_DOWN));
    }
}
