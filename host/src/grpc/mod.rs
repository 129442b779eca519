//! The gRPC front door: `inference.GRPCInferenceService` (KServe v2 plus Triton's extensions) and
//! `grpc.health.v1.Health`, served by tonic. Like the HTTP door it only translates messages; every
//! call lands in [`Frontend`], and errors map to gRPC codes in one place ([`status`]).
//!
//! Behaviour follows Triton 2.51 as observed (docs/triton-grpc-behaviour.md): errors on
//! `ModelStreamInfer` travel in-stream as `error_message` and the stream stays open; every stream
//! response carries the `triton_final_response` parameter; a decoupled model's final flag without a
//! response is sent as an empty response only when the request sets
//! `triton_enable_empty_final_response`.

pub mod codec;
pub mod limits;
mod restrict;
mod status;

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::FuturesUnordered;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::codec::CompressionEncoding;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};
use tonic::{Request, Response, Status, Streaming};

use crate::connection_threads::ConnectionThreads;
use crate::connection_threads::OpenConnection;
use crate::error::{CoreError, CoreResult};
use crate::frontend::{EXTENSIONS, Frontend, SettingValue};
use crate::infer::{InferResponse, check_string_correlation_id};
use crate::model::LoadedModel;
use crate::proto::health::health_check_response::ServingStatus;
use crate::proto::health::health_server::{Health, HealthServer};
use crate::proto::health::{HealthCheckRequest, HealthCheckResponse};
use crate::proto::inference as pb;
use crate::proto::inference::grpc_inference_service_server::{GrpcInferenceService, GrpcInferenceServiceServer};
use crate::proto::inference::infer_parameter::ParameterChoice;
use crate::restricted::Restrictions;
use crate::stats::Duration2;
use codec::parse_version;

/// Triton's gRPC message size limit (`MAX_GRPC_MESSAGE_SIZE`, INT32_MAX).
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = i32::MAX as usize;

/// Responses buffered per stream before a slow reader pushes back on the models.
const STREAM_BUFFER: usize = 256;

/// Requests of one stream in flight at once; more wait in the client's HTTP/2 window.
const MAX_STREAM_INFLIGHT: usize = 1024;

/// The one request parameter starting with `triton_` that clients may set.
const EMPTY_FINAL_RESPONSE: &str = "triton_enable_empty_final_response";
const FINAL_RESPONSE: &str = "triton_final_response";

#[derive(Debug, Clone)]
pub struct GrpcOptions {
    /// Largest message accepted or sent, in bytes.
    pub max_message_size: usize,
    /// HTTP/2 keepalive ping interval and how long to wait for its acknowledgement.
    pub keepalive_time: Duration,
    pub keepalive_timeout: Duration,
    /// How infer responses are compressed for clients that accept it
    /// (`--grpc-infer-response-compression-level`: none, low = gzip, medium and high = deflate,
    /// the algorithms Triton's gRPC core picks for those levels).
    pub response_compression: Option<CompressionEncoding>,
    /// Triton's `--grpc-restricted-protocol`.
    pub restrictions: Restrictions,
    /// TLS (`--grpc-use-ssl`, `--grpc-use-ssl-mutual`); plaintext when `None`.
    pub tls: Option<GrpcTls>,
    /// Most connections open at once (`--grpc-max-connections`).
    pub max_connections: usize,
}

/// An accepted connection holding one of the door's connection slots until it closes.
struct CappedStream {
    inner: tokio::net::TcpStream,
    _slot: tokio::sync::OwnedSemaphorePermit,
    /// Its place in its connection thread's count, when it runs on one.
    _open: Option<OpenConnection>,
}

impl tonic::transport::server::Connected for CappedStream {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

impl tokio::io::AsyncRead for CappedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for CappedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// PEM contents for the gRPC door's TLS.
#[derive(Clone)]
pub struct GrpcTls {
    pub certificate: Vec<u8>,
    pub key: Vec<u8>,
    /// Set for mutual TLS: client certificates must chain to one of these authorities.
    pub client_ca: Option<Vec<u8>>,
}

impl GrpcTls {
    fn server_config(&self) -> ServerTlsConfig {
        let mut config = ServerTlsConfig::new().identity(Identity::from_pem(&self.certificate, &self.key));
        if let Some(ca) = &self.client_ca {
            config = config.client_ca_root(Certificate::from_pem(ca)).client_auth_optional(false);
        }
        config
    }

    /// Fails when the PEM contents do not make a usable server configuration (checked at startup,
    /// so a bad certificate stops the server instead of its first connection).
    pub fn validate(&self) -> Result<(), String> {
        tonic::transport::Server::builder().tls_config(self.server_config()).map(drop).map_err(|e| {
            format!(
                "gRPC TLS configuration: {}",
                std::error::Error::source(&e).map_or_else(|| e.to_string(), |s| s.to_string())
            )
        })
    }
}

impl std::fmt::Debug for GrpcTls {
    // Never prints the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcTls").field("mutual", &self.client_ca.is_some()).finish_non_exhaustive()
    }
}

impl Default for GrpcOptions {
    fn default() -> Self {
        Self {
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            keepalive_time: Duration::from_millis(7_200_000),
            keepalive_timeout: Duration::from_millis(20_000),
            response_compression: None,
            restrictions: Restrictions::default(),
            tls: None,
            max_connections: 1024,
        }
    }
}

/// Serves both services on `listener` until `stop` turns true: on the connection threads when
/// there are any (one tonic server per thread, fed the connections the accept loop gives it),
/// else on the accepting runtime.
pub async fn serve(
    frontend: Arc<Frontend>,
    listener: tokio::net::TcpListener,
    options: GrpcOptions,
    budget: crate::limits::RequestBudget,
    threads: Arc<ConnectionThreads>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<(), String> {
    let inference =
        GrpcInferenceServiceServer::new(InferenceService { frontend: Arc::clone(&frontend), shutdown: stop.clone() })
            .max_decoding_message_size(options.max_message_size)
            .max_encoding_message_size(options.max_message_size)
            .accept_compressed(CompressionEncoding::Gzip)
            .accept_compressed(CompressionEncoding::Deflate);
    let inference = match options.response_compression {
        Some(encoding) => inference.send_compressed(encoding),
        None => inference,
    };
    let health = HealthServer::new(HealthService { frontend })
        .accept_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Deflate);
    let services = Services { inference, health, options, budget, stop };
    // Small requests are latency-bound: no Nagle delay on accepted connections. Past the
    // connection cap a new connection is closed at once: its client fails fast (UNAVAILABLE)
    // instead of waiting in the backlog.
    let slots = Arc::new(tokio::sync::Semaphore::new(services.options.max_connections.max(1)));
    let max_connections = services.options.max_connections;
    let admit = move |stream: tokio::net::TcpStream| {
        let _ = stream.set_nodelay(true);
        let slot = Arc::clone(&slots).try_acquire_owned().ok();
        if slot.is_none() {
            tracing::warn!("gRPC connection refused: {max_connections} open (--grpc-max-connections)");
        }
        slot.map(|slot| (stream, slot))
    };
    let runtimes = threads.runtimes();
    if runtimes.is_empty() {
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener).filter_map(move |conn| match conn {
            Ok(stream) => admit(stream).map(|(inner, slot)| Ok(CappedStream { inner, _slot: slot, _open: None })),
            Err(e) => Some(Err(e)),
        });
        return services.serve(incoming).await.map_err(|e| e.to_string());
    }
    // One server per connection thread, each reading its connections from a channel. A stream is
    // re-registered with its thread's reactor there, so its reads wake that thread only.
    let mut senders = Vec::with_capacity(runtimes.len());
    let mut servers = tokio::task::JoinSet::new();
    for runtime in &runtimes {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Admitted>();
        senders.push(tx);
        let incoming = tokio_stream::wrappers::UnboundedReceiverStream::new(rx).map(|(stream, slot, open)| {
            tokio::net::TcpStream::from_std(stream).map(|inner| CappedStream { inner, _slot: slot, _open: Some(open) })
        });
        servers.spawn_on(services.clone().serve(incoming), runtime);
    }
    let mut stopped = services.stop.clone();
    let mut failed = None;
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stopped.wait_for(|s| *s) => break,
            // A thread's server ended before the stop (its TLS setup failed, say): the door fails
            // now, instead of handing that thread connections nobody serves.
            ended = servers.join_next() => {
                // The servers also end at the stop, which may win this race: not a failure.
                if !*services.stop.borrow() {
                    failed = Some(match ended {
                        Some(Ok(Err(e))) => e.to_string(),
                        Some(Err(e)) => e.to_string(),
                        Some(Ok(Ok(()))) | None => "a gRPC server thread stopped".to_string(),
                    });
                }
                break;
            }
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            // Out of descriptors and the like: keep serving the connections we have.
            Err(e) => {
                tracing::warn!("gRPC accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some((stream, slot)) = admit(stream) else { continue };
        let (Some((index, _, open)), Ok(stream)) = (threads.pick(), stream.into_std()) else { continue };
        if let Some(tx) = senders.get(index) {
            let _ = tx.send((stream, slot, open));
        }
    }
    // New clients are refused from here on, not left in the backlog while the others drain.
    drop(listener);
    drop(senders);
    if let Some(e) = failed {
        return Err(e);
    }
    let mut result = Ok(());
    while let Some(ended) = servers.join_next().await {
        match ended {
            Ok(Ok(())) => {}
            Ok(Err(e)) => result = Err(e.to_string()),
            Err(e) => result = Err(e.to_string()),
        }
    }
    result
}

/// A connection the accept loop hands to a connection thread's server.
type Admitted = (std::net::TcpStream, tokio::sync::OwnedSemaphorePermit, OpenConnection);

/// What each of the door's tonic servers is built from.
#[derive(Clone)]
struct Services {
    inference: GrpcInferenceServiceServer<InferenceService>,
    health: HealthServer<HealthService>,
    options: GrpcOptions,
    budget: crate::limits::RequestBudget,
    stop: tokio::sync::watch::Receiver<bool>,
}

impl Services {
    async fn serve(
        self,
        incoming: impl tokio_stream::Stream<Item = std::io::Result<CappedStream>> + Send + 'static,
    ) -> Result<(), tonic::transport::Error> {
        let mut stopped = self.stop.clone();
        let shutdown = async move {
            let _ = stopped.wait_for(|s| *s).await;
        };
        let mut builder = tonic::transport::Server::builder();
        if let Some(tls) = &self.options.tls {
            builder = builder.tls_config(tls.server_config())?;
        }
        builder
            .http2_keepalive_interval(Some(self.options.keepalive_time))
            .http2_keepalive_timeout(Some(self.options.keepalive_timeout))
            // Restricted calls are refused before their message is read (restrict.rs).
            .layer(restrict::RestrictionLayer::new(self.options.restrictions.clone()))
            .layer(limits::MessageLimitsLayer::new(self.budget, self.options.max_message_size))
            .add_service(self.inference)
            .add_service(self.health)
            .serve_with_incoming_shutdown(incoming, shutdown)
            .await
    }
}

pub struct InferenceService {
    frontend: Arc<Frontend>,
    /// Becomes true when the server shuts down.
    shutdown: tokio::sync::watch::Receiver<bool>,
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

fn model_statistics(model: &LoadedModel) -> pb::ModelStatistics {
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

#[tonic::async_trait]
impl GrpcInferenceService for InferenceService {
    async fn server_live(&self, _: Request<pb::ServerLiveRequest>) -> GrpcResult<pb::ServerLiveResponse> {
        ok(pb::ServerLiveResponse { live: true })
    }

    async fn server_ready(&self, _: Request<pb::ServerReadyRequest>) -> GrpcResult<pb::ServerReadyResponse> {
        ok(pb::ServerReadyResponse { ready: self.frontend.server_ready() })
    }

    async fn model_ready(&self, request: Request<pb::ModelReadyRequest>) -> GrpcResult<pb::ModelReadyResponse> {
        let request = request.into_inner();
        let version = parse_version(&request.version)?;
        ok(pb::ModelReadyResponse { ready: self.frontend.model_ready(&request.name, version) })
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
        let request = request.into_inner();
        let metadata = self.frontend.metadata(&request.name, parse_version(&request.version)?)?;
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
        let request = request.into_inner();
        let model = self.frontend.ready_model(&request.model_name, parse_version(&request.model_version)?)?;
        reserved_parameters(&request)?;
        if model.is_decoupled() {
            let message = "ModelInfer RPC doesn't support models with decoupled transaction policy";
            return Err(CoreError::unsupported(message).into());
        }
        let mut request = self.frontend.read_shm_inputs(codec::decode_request(request)?)?;
        // The version checked above serves it, even if a newer one turns ready meanwhile.
        request.model_version = Some(model.version);
        // A unary call is its own task: an inline execution may block it.
        let response = crate::infer::with_caller_blocking(true, self.frontend.infer(request)).await?;
        ok(codec::encode_response(response))
    }

    type ModelStreamInferStream = Pin<Box<dyn Stream<Item = Result<pb::ModelStreamInferResponse, Status>> + Send>>;

    async fn model_stream_infer(
        &self,
        request: Request<Streaming<pb::ModelInferRequest>>,
    ) -> GrpcResult<Self::ModelStreamInferStream> {
        let mut incoming = request.into_inner();
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
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
                        Ok(Some(request)) => inflight.push(stream_request(Arc::clone(&frontend), request, tx.clone())),
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
        let request = request.into_inner();
        let model = self.frontend.ready_model(&request.name, parse_version(&request.version)?)?;
        ok(pb::ModelConfigResponse { config: Some(model.config.clone()) })
    }

    async fn model_statistics(
        &self,
        request: Request<pb::ModelStatisticsRequest>,
    ) -> GrpcResult<pb::ModelStatisticsResponse> {
        let request = request.into_inner();
        let name = non_empty(&request.name);
        let version = parse_version(&request.version)?;
        let models = self.frontend.stats_models(name, version)?;
        ok(pb::ModelStatisticsResponse { model_stats: models.iter().map(|m| model_statistics(m)).collect() })
    }

    async fn repository_index(
        &self,
        request: Request<pb::RepositoryIndexRequest>,
    ) -> GrpcResult<pb::RepositoryIndexResponse> {
        let request = request.into_inner();
        no_repository_name(&request.repository_name)?;
        let models = self
            .frontend
            .repository_index(request.ready)
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
        self.frontend.load(&request.model_name, config, files).await?;
        ok(pb::RepositoryModelLoadResponse {})
    }

    async fn repository_model_unload(
        &self,
        request: Request<pb::RepositoryModelUnloadRequest>,
    ) -> GrpcResult<pb::RepositoryModelUnloadResponse> {
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
        self.frontend.unload(&request.model_name, unload_dependents).await?;
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
        let request = request.into_inner();
        let model = non_empty(&request.model_name);
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

/// Resolves once the server is stopping (the `Ref` that `wait_for` yields is not `Send`, so it
/// is dropped here rather than held by the caller's future).
async fn wait_stop(rx: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}

type StreamSender = mpsc::Sender<Result<pb::ModelStreamInferResponse, Status>>;

/// An in-stream error: the request's id, model name and version, and the final flag.
fn stream_error(request: &pb::ModelInferResponse, error: &CoreError, is_final: bool) -> pb::ModelStreamInferResponse {
    let mut echo = request.clone();
    echo.parameters.insert(FINAL_RESPONSE.to_string(), bool_param(is_final));
    pb::ModelStreamInferResponse { error_message: error.message.clone(), infer_response: Some(echo) }
}

fn stream_response(response: InferResponse, is_final: bool) -> pb::ModelStreamInferResponse {
    let mut encoded = codec::encode_response(response);
    encoded.parameters.insert(FINAL_RESPONSE.to_string(), bool_param(is_final));
    pb::ModelStreamInferResponse { error_message: String::new(), infer_response: Some(encoded) }
}

/// Runs one request of a `ModelStreamInfer` stream and sends its responses (or its error).
async fn stream_request(frontend: Arc<Frontend>, request: pb::ModelInferRequest, tx: StreamSender) {
    let echo = pb::ModelInferResponse {
        model_name: request.model_name.clone(),
        model_version: request.model_version.clone(),
        id: request.id.clone(),
        ..Default::default()
    };
    let fail = |e: CoreError| stream_error(&echo, &e, true);
    // Before the request reaches a model, Triton echoes only the id.
    let fail_early = |e: CoreError| pb::ModelStreamInferResponse {
        error_message: e.message,
        infer_response: Some(pb::ModelInferResponse { id: echo.id.clone(), ..Default::default() }),
    };
    let prepared = (|| {
        let model = frontend.ready_model(&request.model_name, parse_version(&request.model_version)?)?;
        let empty_final = reserved_parameters(&request)?;
        // Shared-memory inputs are read here, so their errors come early too, as decoding errors do.
        let mut request = frontend.read_shm_inputs(codec::decode_request(request)?)?;
        request.model_version = Some(model.version);
        Ok::<_, CoreError>((empty_final, model.is_decoupled(), request))
    })();
    let (empty_final, decoupled, request) = match prepared {
        Ok(p) => p,
        Err(e) => {
            let _ = tx.send(Ok(fail_early(e))).await;
            return;
        }
    };
    if !decoupled {
        let message = match frontend.infer(request).await {
            Ok(response) => stream_response(response, true),
            Err(e) => fail(e),
        };
        let _ = tx.send(Ok(message)).await;
        return;
    }
    let mut responses = match frontend.infer_stream(request).await {
        Ok(r) => r,
        Err(e) => {
            let _ = tx.send(Ok(fail(e))).await;
            return;
        }
    };
    let mut final_sent = false;
    // An error's final flag is only known once the next item (or the end) arrives.
    let mut pending_error: Option<CoreError> = None;
    while let Some(item) = responses.recv().await {
        if let Some(e) = pending_error.take()
            && tx.send(Ok(stream_error(&echo, &e, false))).await.is_err()
        {
            return;
        }
        match item {
            Ok(response) => {
                final_sent = response.is_final;
                if tx.send(Ok(stream_response(response, final_sent))).await.is_err() {
                    return;
                }
            }
            Err(e) => pending_error = Some(e),
        }
    }
    if let Some(e) = pending_error {
        // A client that asked for the empty final response gets it after the error, as from
        // Triton; otherwise the error itself carries the final flag.
        if tx.send(Ok(stream_error(&echo, &e, !empty_final))).await.is_err() || !empty_final {
            return;
        }
    }
    if !final_sent && empty_final {
        let mut empty = echo.clone();
        empty.parameters.insert(FINAL_RESPONSE.to_string(), bool_param(true));
        let _ = tx
            .send(Ok(pb::ModelStreamInferResponse { error_message: String::new(), infer_response: Some(empty) }))
            .await;
    }
}

/// `grpc.health.v1.Health`, as Triton answers it: `Check` reports readiness whatever service is
/// named; `Watch` is not implemented.
pub struct HealthService {
    frontend: Arc<Frontend>,
}

#[tonic::async_trait]
impl Health for HealthService {
    async fn check(&self, _: Request<HealthCheckRequest>) -> GrpcResult<HealthCheckResponse> {
        let status = if self.frontend.server_ready() { ServingStatus::Serving } else { ServingStatus::NotServing };
        ok(HealthCheckResponse { status: status as i32 })
    }

    type WatchStream = Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

    async fn watch(&self, _: Request<HealthCheckRequest>) -> GrpcResult<Self::WatchStream> {
        Err(Status::unimplemented("Watch is not implemented; use Check"))
    }
}
