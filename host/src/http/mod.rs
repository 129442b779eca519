//! The HTTP/REST front door: KServe v2 plus Triton's extensions (model configuration, statistics,
//! repository, classification, binary tensor data, shared memory, trace, logging, generate). It
//! only translates the wire format: every call lands in [`Frontend`], and errors become HTTP
//! statuses in one place ([`HttpError`]).

mod body;
pub(crate) mod caller;
pub mod codec;
mod error;
mod gate;
mod generate;
pub(crate) mod json_data;
mod json_structure;
mod json_syntax;
mod openai;
mod orca;
mod path;
mod response;
mod serve;
mod tls;

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use bytes::Bytes;
use serde_json::{Value, json};
use tower_http::compression::CompressionLayer;
use tower_http::compression::predicate::{DefaultPredicate, Predicate};

use self::body::UNSUPPORTED_COMPRESSION;
use self::caller::Requester;
pub use self::error::HttpError;
pub use self::path::ModelPath;
use self::response::{empty_ok, error_json, ok_json};
pub use self::serve::{Access, ConnectionLimits, serve};
pub use self::tls::HttpTls;
use crate::error::{CoreError, CoreResult, ErrorKind};
use crate::frontend::{
    Door, EXTENSIONS, Frontend, SettingValue, VersionStats, add_forwarded, index_json, statistics_json,
};
use crate::restricted::{ApiCategory, Restrictions};
use crate::trace::{activity, stamp};

#[derive(Clone)]
pub struct HttpState {
    pub frontend: Arc<Frontend>,
    /// Triton's `--http-restricted-api`.
    pub restrictions: Arc<Restrictions>,
    /// Largest request body accepted, after decompression (Triton's --http-max-input-size).
    pub max_input_size: usize,
    /// The server's budget of request bytes in flight (`--max-inflight-request-bytes`).
    pub body_budget: crate::limits::RequestBudget,
}

type HttpResult = Result<Response, HttpError>;

/// Routes `/v2/models/{model}<suffix>` and `/v2/models/{model}/versions/{version}<suffix>` to
/// one handler, which reads both through [`ModelPath`].
fn model_routes(router: Router<HttpState>, suffix: &str, handler: MethodRouter<HttpState>) -> Router<HttpState> {
    router
        .route(&format!("/v2/models/{{model}}{suffix}"), handler.clone())
        .route(&format!("/v2/models/{{model}}/versions/{{version}}{suffix}"), handler)
}

pub fn router(state: HttpState) -> Router {
    // Triton compresses infer responses only (when Accept-Encoding allows). Errors stay
    // uncompressed: tritonclient's aio client reads error bodies raw.
    let successes = DefaultPredicate::new()
        .and(|status: StatusCode, _: http::Version, _: &HeaderMap, _: &http::Extensions| status.is_success());
    let compression = CompressionLayer::new().gzip(true).deflate(true).compress_when(successes);
    let infer_routes = model_routes(Router::new(), "/infer", post(infer)).layer(compression);
    let mut router = Router::new()
        .route("/v2", get(server_metadata))
        .route("/v2/health/live", get(|| async { empty_ok() }))
        .route("/v2/health/ready", get(server_ready))
        .route("/v2/models/stats", get(all_stats));
    for (suffix, handler) in [
        ("", get(model_metadata)),
        ("/ready", get(model_ready)),
        ("/config", get(model_config)),
        ("/stats", get(model_stats)),
        ("/generate", post(generate)),
        ("/generate_stream", post(generate_stream)),
    ] {
        router = model_routes(router, suffix, handler);
    }
    let restrictions = Arc::clone(&state.restrictions);
    // Each kind of shared memory: status and unregister for all regions or one, register for one.
    for (kind, status, register, unregister) in [
        ("system", get(shm_status), post(shm_register), post(shm_unregister)),
        ("cuda", get(cuda_shm_status), post(cuda_shm_register), post(cuda_shm_unregister)),
    ] {
        let at = |path: &str| format!("/v2/{kind}sharedmemory{path}");
        router = router
            .route(&at("/status"), status.clone())
            .route(&at("/region/{region}/status"), status)
            .route(&at("/region/{region}/register"), register)
            .route(&at("/register"), post(move |state| shm_register_unnamed(state, kind)))
            .route(&at("/unregister"), unregister.clone())
            .route(&at("/region/{region}/unregister"), unregister);
    }
    let router = router
        .route("/v2/repository/index", post(repository_index))
        .route("/v2/repository/models/{model}/load", post(repository_load))
        .route("/v2/repository/models/{model}/unload", post(repository_unload))
        .route("/v2/trace/setting", get(trace_get).post(trace_update))
        .route("/v2/models/{model}/trace/setting", get(model_trace_get).post(model_trace_update))
        .route("/v2/logging", get(log_get).post(log_update))
        .merge(infer_routes);
    let router = openai::routes(router)
        .fallback(|uri: axum::http::Uri| async move {
            match uri.path() {
                path if path.starts_with("/v1/") => openai::OpenAiError::not_found(path).into_response(),
                _ => error_json(StatusCode::NOT_FOUND, "Not Found"),
            }
        })
        .method_not_allowed_fallback(|| async { error_json(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed") })
        .with_state(state);
    with_restrictions(router, restrictions)
}

/// Triton's restricted APIs in front of every route (the tenants gate runs before the router,
/// in the connection's own service: `serve.rs`).
fn with_restrictions(router: Router, restrictions: Arc<Restrictions>) -> Router {
    if restrictions.is_empty() {
        router
    } else {
        router.layer(axum::middleware::from_fn_with_state(restrictions, restrict))
    }
}

/// OpenAI's API alone, for a port of its own (`--openai-port`): the same routes and checks as on
/// the HTTP port, and OpenAI's 404 for any other path.
pub fn openai_router(state: HttpState) -> Router {
    let restrictions = Arc::clone(&state.restrictions);
    let router = openai::routes(Router::new())
        .fallback(|uri: axum::http::Uri| async move { openai::OpenAiError::not_found(uri.path()).into_response() })
        .with_state(state);
    with_restrictions(router, restrictions)
}

/// Triton's restricted APIs: a call in a restricted category without the right header is
/// refused before it is routed, with Triton's 403 (a JSON body that Triton labels text/plain).
async fn restrict(State(restrictions): State<Arc<Restrictions>>, request: Request, next: Next) -> Response {
    if let Some(category) = ApiCategory::of_http_path(request.uri().path()) {
        let headers = request.headers();
        if let Err(refusal) = restrictions.check(category, "", |name| headers.get(name).and_then(|v| v.to_str().ok())) {
            if category == ApiCategory::OpenAi {
                return openai::OpenAiError::restricted(&refusal.expected).into_response();
            }
            let body = json!({ "error": format!("This API is restricted, expecting header '{}'", refusal.expected) });
            return (StatusCode::FORBIDDEN, [(header::CONTENT_TYPE, "text/plain")], body.to_string()).into_response();
        }
    }
    next.run(request).await
}

/// A request's JSON body, `{}` when empty. Triton answers a malformed body with INTERNAL on the
/// repository routes and INVALID_ARG on the others: `kind` says which.
fn parse_json_body(body: &[u8], kind: ErrorKind) -> CoreResult<Value> {
    if body.is_empty() {
        return Ok(json!({}));
    }
    parse_json(body, kind)
}

/// JSON as Triton reads it (rapidjson: text up to a NUL byte, a byte-order mark skipped), with
/// rapidjson's words and byte offset for a syntax error.
fn parse_json(body: &[u8], kind: ErrorKind) -> CoreResult<Value> {
    let read = json_syntax::as_rapidjson_reads(body);
    let read = read.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(read);
    serde_json::from_slice(read).map_err(|e| {
        let message = json_syntax::rapidjson_error(body)
            .unwrap_or_else(|| format!("failed to parse the request JSON buffer: {e}"));
        CoreError::new(kind, message)
    })
}

async fn server_metadata(State(state): State<HttpState>) -> Response {
    let frontend = &state.frontend;
    ok_json(&json!({ "name": frontend.server_id, "version": frontend.version, "extensions": EXTENSIONS }))
}

/// 200 or 400, both with an empty body, as Triton answers.
async fn server_ready(State(state): State<HttpState>) -> Response {
    if state.frontend.server_ready() { empty_ok() } else { StatusCode::BAD_REQUEST.into_response() }
}

async fn model_metadata(State(state): State<HttpState>, ModelPath { model, version }: ModelPath) -> HttpResult {
    Ok(ok_json(&state.frontend.metadata(&model, version?)?.to_json()))
}

/// 200, or 400 with Triton's "Model version not ready" (also for a segment that is not a version).
async fn model_ready(State(state): State<HttpState>, ModelPath { model, version }: ModelPath) -> Response {
    if version.is_ok_and(|v| state.frontend.model_ready(&model, v)) {
        empty_ok()
    } else {
        error_json(StatusCode::BAD_REQUEST, "Model version not ready")
    }
}

async fn model_config(State(state): State<HttpState>, ModelPath { model, version }: ModelPath) -> HttpResult {
    Ok(ok_json(state.frontend.model(&model, version?)?.config_json()))
}

fn stats_json(models: &[VersionStats]) -> Response {
    ok_json(&statistics_json(models))
}

async fn all_stats(State(state): State<HttpState>, caller: Requester) -> HttpResult {
    Ok(stats_json(&state.frontend.statistics(caller.principal(), None, None)?))
}

async fn model_stats(State(state): State<HttpState>, ModelPath { model, version }: ModelPath) -> HttpResult {
    // Triton's statistics answer a segment that is not a version as a version that is not there.
    let version = version
        .map_err(|_| CoreError::invalid_arg(format!("requested model version is not available for model '{model}'")))?;
    Ok(stats_json(&state.frontend.statistics(None, Some(&model), version)?))
}

async fn infer(
    State(state): State<HttpState>,
    ModelPath { model, version }: ModelPath,
    caller: Requester,
    request: Request,
) -> HttpResult {
    let version = version?;
    let started = std::time::Instant::now();
    let mut request_id = None;
    let result = infer_model(&state, &model, version, request, &mut request_id, &caller).await;
    let status = match &result {
        Ok(_) => "OK",
        Err(e) => e.kind.as_str(),
    };
    let took = started.elapsed();
    state.frontend.log_request("http", &model, version, request_id.as_deref(), status, took, &caller.audit());
    result.map_err(|error| {
        // Like Triton, an unsupported Content-Encoding also says which encodings are accepted.
        let unsupported_encoding = error.message.starts_with(UNSUPPORTED_COMPRESSION);
        let error = HttpError::from(error);
        if unsupported_encoding { error.with_accept_encoding("gzip, deflate") } else { error }
    })
}

/// Runs an HTTP infer; `request_id` gets the request's id once decoded, for the access line.
async fn infer_model(
    state: &HttpState,
    model: &str,
    version: Option<i64>,
    request: Request,
    request_id: &mut Option<String>,
    caller: &Requester,
) -> CoreResult<Response> {
    let (parts, body) = request.into_parts();
    // Read as Triton 2.7x reads it (`std::stoi`): "12abc" is 12; a value with no digits is refused,
    // after the body is read (2.51's atoi read it as 0, a raw binary request).
    let header_length = parts.headers.get("inference-header-content-length").map(|v| {
        stoi(v.as_bytes()).ok_or_else(|| {
            let text = String::from_utf8_lossy(v.as_bytes());
            CoreError::invalid_arg(format!("Unable to parse Inference-Header-Content-Length, got: {text}"))
        })
    });
    // As Triton does, the model is looked up (and a decoupled one refused) before the body is read.
    // The request runs on this version, even if another turns ready meanwhile.
    let served = state.frontend.model(model, version)?;
    if served.is_decoupled() {
        return Err(CoreError::unsupported("HTTP end point doesn't support models with decoupled transaction policy"));
    }
    let trace = state.frontend.trace(model, traceparent(&parts.headers));
    stamp(&trace, activity::HTTP_RECV_START);
    // Held until the response is built: the request's bytes count against the server's budget.
    let (body, _reservation) = body::read(&parts.headers, body, state.max_input_size, &state.body_budget).await?;
    stamp(&trace, activity::HTTP_RECV_END);
    let header_length = header_length.transpose()?;
    let decoded = match header_length {
        // Triton's raw binary request: the body is the model's one input. An empty body without
        // the header is one too (Triton takes the header length to be the body's).
        Some(0) => codec::decode_raw(body, &served)?,
        None if body.is_empty() => codec::decode_raw(body, &served)?,
        _ => codec::decode_request(body, header_length, model, version)?,
    };
    if state.frontend.logs_requests() {
        request_id.clone_from(&decoded.request.request.id);
    }
    let forwarded = forwarded_headers(state, &parts.headers);
    let principal = caller.principal.clone();
    let response = state.frontend.infer_decoded(&served, decoded.request, forwarded, &trace, principal).await?;
    stamp(&trace, activity::HTTP_SEND_START);
    let (body, header_length) = codec::encode_response(&response, &decoded.binary_outputs)?;
    let mut http = Response::new(Body::from(body));
    let headers = http.headers_mut();
    match header_length {
        Some(n) => {
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
            headers.insert("inference-header-content-length", HeaderValue::from(n));
        }
        None => {
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
    }
    orca::add(&parts.headers, headers, || state.frontend.load_report());
    // The response is built; hyper writes it after this (not timed).
    stamp(&trace, activity::HTTP_SEND_END);
    Ok(http)
}

/// The request's headers that `--http-header-forward-pattern` forwards to the model.
fn forwarded_headers(state: &HttpState, headers: &HeaderMap) -> CoreResult<Vec<(String, String)>> {
    state
        .frontend
        .forwarded_headers(Door::Http, headers.iter().map(|(name, value)| (name.as_str(), value.to_str().ok())))
}

/// The W3C `traceparent` header a client sent, if any.
fn traceparent(headers: &HeaderMap) -> Option<&str> {
    headers.get("traceparent").and_then(|v| v.to_str().ok())
}

async fn generate(State(state): State<HttpState>, path: ModelPath, caller: Requester, request: Request) -> HttpResult {
    generate_model(&state, path, caller, request, false).await
}

async fn generate_stream(
    State(state): State<HttpState>,
    path: ModelPath,
    caller: Requester,
    request: Request,
) -> HttpResult {
    generate_model(&state, path, caller, request, true).await
}

async fn generate_model(
    state: &HttpState,
    path: ModelPath,
    caller: Requester,
    request: Request,
    streaming: bool,
) -> HttpResult {
    let version = path.version?;
    let (parts, body) = request.into_parts();
    let trace = state.frontend.trace(&path.model, traceparent(&parts.headers));
    stamp(&trace, activity::HTTP_RECV_START);
    let (body, _reservation) = body::read(&parts.headers, body, state.max_input_size, &state.body_budget).await?;
    stamp(&trace, activity::HTTP_RECV_END);
    let model = state.frontend.model(&path.model, version)?;
    let mut request = generate::decode(&model, &body)?;
    add_forwarded(&mut request, &forwarded_headers(state, &parts.headers)?);
    request.trace = trace.clone();
    request.principal = caller.principal;
    let mut response = if streaming {
        generate::stream(&state.frontend, &model, request).await?
    } else {
        generate::single(&state.frontend, &model, request).await?
    };
    orca::add(&parts.headers, response.headers_mut(), || state.frontend.load_report());
    // For a stream: when its response starts, not when its last event is sent.
    stamp(&trace, activity::HTTP_SEND_START);
    stamp(&trace, activity::HTTP_SEND_END);
    Ok(response)
}

async fn repository_index(State(state): State<HttpState>, caller: Requester, body: Bytes) -> HttpResult {
    let ready_only = match parse_json_body(&body, ErrorKind::Internal)?.get("ready") {
        None => false,
        Some(Value::Bool(ready)) => *ready,
        // Triton 2.7x; 2.51 read any other value as false.
        Some(_) => return Err(CoreError::invalid_arg("Invalid value for 'ready': expected a boolean").into()),
    };
    Ok(ok_json(&index_json(state.frontend.repository_index(caller.principal(), ready_only))))
}

/// C++'s `std::stoi`: optional whitespace and sign, then digits up to the first non-digit; `None`
/// without digits; saturating instead of overflowing (out of range then fails the range check).
fn stoi(text: &[u8]) -> Option<i64> {
    let text = text.trim_ascii_start();
    let (negative, digits) = match text.first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let digits: Vec<u8> = digits.iter().take_while(|b| b.is_ascii_digit()).copied().collect();
    if digits.is_empty() {
        return None;
    }
    let value = digits.iter().fold(0i64, |acc, &d| acc.saturating_mul(10).saturating_add(i64::from(d - b'0')));
    Some(if negative { -value } else { value })
}

/// Triton's load: `parameters` may hold `config` (a JSON string) and `file:<path>` entries
/// (base64 strings); every value is a string, anything else is Triton's INTERNAL error. The body
/// is bounded by --http-max-input-size (model files travel in it) and the in-flight budget.
async fn repository_load(
    State(state): State<HttpState>,
    Path(model): Path<String>,
    caller: Requester,
    request: Request,
) -> HttpResult {
    use base64::Engine as _;
    let (parts, body) = request.into_parts();
    let (body, _reservation) = body::read(&parts.headers, body, state.max_input_size, &state.body_budget).await?;
    let body = parse_json_body(&body, ErrorKind::Internal)?;
    let mut config = None;
    let mut files = Vec::new();
    if let Some(parameters) = body.get("parameters").and_then(Value::as_object) {
        for (key, value) in parameters {
            let Some(text) = value.as_str() else {
                return Err(CoreError::internal("attempt to access JSON non-string as string").into());
            };
            if key == "config" {
                config = Some(text.to_string());
            } else if key.starts_with("file:") {
                // Decision: malformed base64 is refused (Triton's decoder skips bad characters and
                // loads whatever bytes remain).
                let contents = base64::engine::general_purpose::STANDARD
                    .decode(text.trim())
                    .map_err(|e| CoreError::invalid_arg(format!("load parameter '{key}' is not valid base64: {e}")))?;
                files.push((key.clone(), contents));
            } else {
                return Err(CoreError::internal("unexpected error on creating Triton parameter").into());
            }
        }
    }
    if !files.is_empty()
        && let Some(Err(denied)) = caller.identity.as_ref().map(crate::tenancy::Identity::may_load_files)
    {
        return Ok(error_json(StatusCode::FORBIDDEN, &denied.0));
    }
    state.frontend.load(caller.principal(), &model, config, files).await?;
    Ok(empty_ok())
}

async fn repository_unload(
    State(state): State<HttpState>,
    Path(model): Path<String>,
    caller: Requester,
    body: Bytes,
) -> HttpResult {
    // The body is optional: `{"parameters": {"unload_dependents": true}}`.
    let body = if body.is_empty() { Value::Null } else { parse_json_body(&body, ErrorKind::Internal)? };
    let unload_dependents = match body.get("parameters").and_then(|p| p.get("unload_dependents")) {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(CoreError::invalid_arg("unload parameter 'unload_dependents' must be a boolean").into()),
    };
    state.frontend.unload(caller.principal(), &model, unload_dependents).await?;
    Ok(empty_ok())
}

/// The region a shared-memory route names (`.../region/{region}/...`), `None` for all of them.
fn named(region: &Option<Path<String>>) -> Option<&str> {
    region.as_deref().map(String::as_str)
}

async fn shm_status(State(state): State<HttpState>, region: Option<Path<String>>) -> HttpResult {
    let regions = state.frontend.shm.status(named(&region))?.into_iter();
    let regions =
        regions.map(|r| json!({ "name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size }));
    Ok(ok_json(&Value::Array(regions.collect())))
}

/// Triton's reading of a register body: rapidjson's errors (500, an empty body included), a
/// missing `key` or `byte_size` (400), and TritonJson's words, without a prefix, for values of
/// the wrong type (500).
async fn shm_register(State(state): State<HttpState>, Path(region): Path<String>, body: Bytes) -> HttpResult {
    // Before the body is read, as Triton refuses (the manager checks again for every caller).
    state.frontend.shm.check_client_allowed()?;
    let body = parse_json(&body, ErrorKind::Internal)?;
    let wrong = |kind: &str| CoreError::internal(format!("attempt to access JSON non-{kind} as {kind}"));
    let key =
        body.get("key").ok_or_else(|| CoreError::invalid_arg("Shared memory register request has no 'key' field"))?;
    let key = key.as_str().ok_or_else(|| wrong("string"))?;
    let offset = match body.get("offset") {
        None => 0,
        Some(v) => v.as_u64().ok_or_else(|| wrong("unsigned-integer"))?,
    };
    let byte_size = body
        .get("byte_size")
        .ok_or_else(|| CoreError::invalid_arg("Shared memory register request has no 'byte_size' field"))?;
    let byte_size = byte_size.as_u64().ok_or_else(|| wrong("unsigned-integer"))?;
    state.frontend.shm.register(&region, key, offset, byte_size)?;
    Ok(empty_ok())
}

/// `POST /v2/{system,cuda}sharedmemory/register` without a region name (`kind`: `system` or
/// `cuda`): Triton's 400.
async fn shm_register_unnamed(State(state): State<HttpState>, kind: &str) -> HttpResult {
    state.frontend.shm.check_client_allowed()?;
    Err(CoreError::invalid_arg(format!("'region name' is necessary to register {kind} shared memory region")).into())
}

async fn shm_unregister(State(state): State<HttpState>, region: Option<Path<String>>) -> HttpResult {
    state.frontend.shm.unregister(named(&region))?;
    Ok(empty_ok())
}

async fn cuda_shm_status(State(state): State<HttpState>, region: Option<Path<String>>) -> HttpResult {
    let regions = state.frontend.shm.cuda_status(named(&region))?.into_iter();
    let regions = regions.map(|r| json!({ "name": r.name, "device_id": r.device_id, "byte_size": r.byte_size }));
    Ok(ok_json(&Value::Array(regions.collect())))
}

/// Body: `{"raw_handle": {"b64": "<base64 of cudaIpcMemHandle_t>"}, "device_id": 0, "byte_size": N}`,
/// read as Triton reads it: rapidjson's errors, TritonJson's words without a prefix (500) for a
/// missing or mistyped member, in the order `raw_handle`, `b64`, `device_id`, `byte_size`, then
/// a handle that does not decode to the 64 bytes of a `cudaIpcMemHandle_t` (400), all before
/// any GPU is looked at.
async fn cuda_shm_register(State(state): State<HttpState>, Path(region): Path<String>, body: Bytes) -> HttpResult {
    state.frontend.shm.check_client_allowed()?;
    use base64::Engine as _;
    let body = parse_json(&body, ErrorKind::Internal)?;
    let missing = |field: &str| CoreError::internal(format!("attempt to access non-existing object member '{field}'"));
    let wrong = |kind: &str| CoreError::internal(format!("attempt to access JSON non-{kind} as {kind}"));
    let handle = body.get("raw_handle").ok_or_else(|| missing("raw_handle"))?;
    let handle = handle.as_object().ok_or_else(|| wrong("object"))?;
    let b64 = handle.get("b64").ok_or_else(|| missing("b64"))?.as_str().ok_or_else(|| wrong("string"))?;
    let device_id = body.get("device_id").ok_or_else(|| missing("device_id"))?;
    let device_id = device_id.as_i64().ok_or_else(|| wrong("signed-integer"))?;
    let byte_size = body.get("byte_size").ok_or_else(|| missing("byte_size"))?;
    let byte_size = byte_size.as_u64().ok_or_else(|| wrong("unsigned-integer"))?;
    let raw_handle = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .ok()
        .filter(|h| h.len() == CUDA_IPC_HANDLE_BYTES)
        .ok_or_else(|| CoreError::invalid_arg("'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t"))?;
    state.frontend.shm.register_cuda(&region, &raw_handle, device_id, byte_size)?;
    Ok(empty_ok())
}

/// `sizeof(cudaIpcMemHandle_t)`.
const CUDA_IPC_HANDLE_BYTES: usize = 64;

async fn cuda_shm_unregister(State(state): State<HttpState>, region: Option<Path<String>>) -> HttpResult {
    state.frontend.shm.unregister_cuda(named(&region))?;
    Ok(empty_ok())
}

fn settings_json(settings: BTreeMap<String, SettingValue>) -> Response {
    let object: serde_json::Map<String, Value> = settings
        .into_iter()
        .map(|(k, v)| {
            let v = match v {
                SettingValue::Bool(b) => json!(b),
                SettingValue::Uint(u) => json!(u),
                SettingValue::Str(s) => json!(s),
                SettingValue::List(l) => json!(l),
            };
            (k, v)
        })
        .collect();
    ok_json(&Value::Object(object))
}

/// Updates the server's trace settings (`model` `None`) or a model's. A `null` value restores
/// the default.
fn update_trace_settings(state: &HttpState, model: Option<&str>, body: &[u8]) -> HttpResult {
    let Value::Object(body) = parse_json_body(body, ErrorKind::InvalidArg)? else {
        return Err(CoreError::invalid_arg("trace settings must be a JSON object").into());
    };
    let not_a_string = |key: &str| CoreError::invalid_arg(format!("expect a string for '{key}'"));
    let mut updates = BTreeMap::new();
    for (key, value) in body {
        let value = match value {
            Value::Null => None,
            Value::String(s) => Some(vec![s]),
            Value::Array(items) => Some(
                items
                    .into_iter()
                    .map(|i| i.as_str().map(str::to_owned).ok_or_else(|| not_a_string(&key)))
                    .collect::<CoreResult<Vec<_>>>()?,
            ),
            Value::Number(n) => Some(vec![n.to_string()]),
            _ => return Err(not_a_string(&key).into()),
        };
        updates.insert(key, value);
    }
    Ok(settings_json(state.frontend.update_trace_settings(model, updates)?))
}

async fn trace_get(State(state): State<HttpState>) -> HttpResult {
    Ok(settings_json(state.frontend.trace_settings(None)?))
}

async fn trace_update(State(state): State<HttpState>, body: Bytes) -> HttpResult {
    update_trace_settings(&state, None, &body)
}

async fn model_trace_get(State(state): State<HttpState>, Path(model): Path<String>, caller: Requester) -> HttpResult {
    let model = crate::tenant::visible_name(caller.principal(), &model);
    Ok(settings_json(state.frontend.trace_settings(Some(&model))?))
}

async fn model_trace_update(
    State(state): State<HttpState>,
    Path(model): Path<String>,
    caller: Requester,
    body: Bytes,
) -> HttpResult {
    let model = crate::tenant::visible_name(caller.principal(), &model);
    update_trace_settings(&state, Some(&model), &body)
}

async fn log_get(State(state): State<HttpState>) -> HttpResult {
    Ok(settings_json(state.frontend.log_settings()?))
}

async fn log_update(State(state): State<HttpState>, body: Bytes) -> HttpResult {
    let Value::Object(body) = parse_json_body(&body, ErrorKind::InvalidArg)? else {
        return Err(CoreError::invalid_arg("log settings must be a JSON object").into());
    };
    let mut updates = BTreeMap::new();
    for (key, value) in body {
        let value = match value {
            Value::Bool(b) => SettingValue::Bool(b),
            Value::Number(n) => match n.as_u64().and_then(|u| u32::try_from(u).ok()) {
                Some(u) => SettingValue::Uint(u),
                None => return Err(CoreError::invalid_arg(format!("expect int32 for '{key}'")).into()),
            },
            Value::String(s) => SettingValue::Str(s),
            other => return Err(CoreError::invalid_arg(format!("unexpected value {other} for '{key}'")).into()),
        };
        updates.insert(key, value);
    }
    Ok(settings_json(state.frontend.update_log_settings(updates)?))
}

#[cfg(test)]
#[path = "http_tests.rs"]
mod tests;
