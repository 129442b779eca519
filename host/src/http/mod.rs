//! The HTTP/REST front door: KServe v2 plus Triton's extensions (model configuration, statistics,
//! repository, classification, binary tensor data). It only translates the wire format; all
//! inference goes through [`ModelManager`] and [`LoadedModel::infer`](crate::model::LoadedModel::infer).

pub mod codec;
mod generate;

use std::io::Read;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use serde_json::{Value, json};
use tower_http::compression::predicate::{DefaultPredicate, Predicate};

use crate::error::{CoreError, CoreResult};
use crate::frontend::{EXTENSIONS, Frontend, SettingValue};
use crate::model::LoadedModel;

#[derive(Clone)]
pub struct HttpState {
    pub frontend: Arc<Frontend>,
    /// Largest request body accepted, after decompression (Triton's --http-max-input-size).
    pub max_input_size: usize,
}

impl IntoResponse for CoreError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.http_status()).unwrap_or(StatusCode::BAD_REQUEST);
        json_response(status, &json!({ "error": self.message }))
    }
}

fn json_response(status: StatusCode, value: &Value) -> Response {
    let mut response = (status, value.to_string()).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn ok_json(value: &Value) -> Response {
    json_response(StatusCode::OK, value)
}

/// Server readiness: 200 with an empty body, or 400 with an empty body, as Triton answers.
fn status_only(ok: bool) -> Response {
    if ok { StatusCode::OK.into_response() } else { StatusCode::BAD_REQUEST.into_response() }
}

/// Model readiness: 200, or 400 with Triton's "Model version not ready".
fn model_ready_response(ok: bool) -> Response {
    if ok {
        StatusCode::OK.into_response()
    } else {
        json_response(StatusCode::BAD_REQUEST, &json!({ "error": "Model version not ready" }))
    }
}

pub fn router(state: HttpState) -> Router {
    // Triton compresses infer responses only (when Accept-Encoding allows).
    let infer_routes = Router::new()
        .route("/v2/models/{model}/infer", post(infer))
        .route("/v2/models/{model}/versions/{version}/infer", post(infer_version))
        .layer(
            tower_http::compression::CompressionLayer::new()
                .gzip(true)
                .deflate(true)
                // Errors stay uncompressed: tritonclient's aio client reads error bodies raw.
                .compress_when(DefaultPredicate::new().and(|status: StatusCode, _: http::Version, _: &HeaderMap, _: &http::Extensions| {
                    status.is_success()
                })),
        );
    Router::new()
        .route("/v2", get(server_metadata))
        .route("/v2/health/live", get(|| async { StatusCode::OK }))
        .route("/v2/health/ready", get(server_ready))
        .route("/v2/models/stats", get(all_stats))
        .route("/v2/models/{model}", get(model_metadata))
        .route("/v2/models/{model}/versions/{version}", get(model_metadata_version))
        .route("/v2/models/{model}/ready", get(model_ready))
        .route("/v2/models/{model}/versions/{version}/ready", get(model_ready_version))
        .route("/v2/models/{model}/config", get(model_config))
        .route("/v2/models/{model}/versions/{version}/config", get(model_config_version))
        .route("/v2/models/{model}/stats", get(model_stats))
        .route("/v2/models/{model}/versions/{version}/stats", get(model_stats_version))
        .route("/v2/models/{model}/generate", post(generate))
        .route("/v2/models/{model}/versions/{version}/generate", post(generate_version))
        .route("/v2/models/{model}/generate_stream", post(generate_stream))
        .route("/v2/models/{model}/versions/{version}/generate_stream", post(generate_stream_version))
        .route("/v2/repository/index", post(repository_index))
        .route("/v2/repository/models/{model}/load", post(repository_load))
        .route("/v2/repository/models/{model}/unload", post(repository_unload))
        .route("/v2/systemsharedmemory/status", get(shm_status_all))
        .route("/v2/systemsharedmemory/region/{region}/status", get(shm_status))
        .route("/v2/systemsharedmemory/region/{region}/register", post(shm_register))
        .route("/v2/systemsharedmemory/unregister", post(shm_unregister_all))
        .route("/v2/systemsharedmemory/region/{region}/unregister", post(shm_unregister))
        .route("/v2/cudasharedmemory/status", get(|| async { ok_json(&json!([])) }))
        .route("/v2/cudasharedmemory/region/{region}/status", get(cuda_shm_status))
        .route("/v2/cudasharedmemory/region/{region}/register", post(cuda_shm_register))
        .route("/v2/cudasharedmemory/unregister", post(|| async { StatusCode::OK }))
        .route("/v2/cudasharedmemory/region/{region}/unregister", post(|| async { StatusCode::OK }))
        .route("/v2/trace/setting", get(trace_get).post(trace_update))
        .route("/v2/models/{model}/trace/setting", get(model_trace_get).post(model_trace_update))
        .route("/v2/logging", get(log_get).post(log_update))
        .merge(infer_routes)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

async fn not_found() -> Response {
    json_response(StatusCode::NOT_FOUND, &json!({ "error": "Not Found" }))
}

async fn method_not_allowed() -> Response {
    json_response(StatusCode::METHOD_NOT_ALLOWED, &json!({ "error": "Method Not Allowed" }))
}

/// The `{version}` path segment. Triton's router does not match other paths at all: 404.
fn parse_version(version: &str) -> CoreResult<Option<i64>> {
    crate::infer::parse_version(version, || CoreError::not_found(format!("Not Found: '{version}' is not a model version")))
}

/// 200 with an empty body, or the error.
fn empty_ok(result: CoreResult<()>) -> Response {
    match result {
        Ok(()) => StatusCode::OK.into_response(),
        Err(e) => e.into_response(),
    }
}

async fn server_metadata(State(state): State<HttpState>) -> Response {
    ok_json(&json!({ "name": state.frontend.server_id, "version": state.frontend.version, "extensions": EXTENSIONS }))
}

async fn server_ready(State(state): State<HttpState>) -> Response {
    status_only(state.frontend.server_ready())
}

fn metadata_response(state: &HttpState, model: &str, version: Option<i64>) -> CoreResult<Response> {
    let m = state.frontend.metadata(model, version)?;
    let io = |ts: &[crate::frontend::TensorMetadata]| -> Vec<Value> {
        ts.iter().map(|t| json!({ "name": t.name, "datatype": t.datatype, "shape": t.shape })).collect()
    };
    Ok(ok_json(&json!({
        "name": m.name,
        "versions": m.versions,
        "platform": m.platform,
        "inputs": io(&m.inputs),
        "outputs": io(&m.outputs),
    })))
}

async fn model_metadata(State(state): State<HttpState>, Path(model): Path<String>) -> Response {
    metadata_response(&state, &model, None).unwrap_or_else(IntoResponse::into_response)
}

async fn model_metadata_version(State(state): State<HttpState>, Path((model, version)): Path<(String, String)>) -> Response {
    parse_version(&version)
        .and_then(|v| metadata_response(&state, &model, v))
        .unwrap_or_else(IntoResponse::into_response)
}

async fn model_ready(State(state): State<HttpState>, Path(model): Path<String>) -> Response {
    model_ready_response(state.frontend.model_ready(&model, None))
}

async fn model_ready_version(State(state): State<HttpState>, Path((model, version)): Path<(String, String)>) -> Response {
    model_ready_response(parse_version(&version).is_ok_and(|v| state.frontend.model_ready(&model, v)))
}

async fn model_config(State(state): State<HttpState>, Path(model): Path<String>) -> Response {
    state.frontend.manager.get(&model, None).map(|m| ok_json(&m.config_json)).unwrap_or_else(IntoResponse::into_response)
}

async fn model_config_version(State(state): State<HttpState>, Path((model, version)): Path<(String, String)>) -> Response {
    parse_version(&version)
        .and_then(|v| state.frontend.manager.get(&model, v))
        .map(|m| ok_json(&m.config_json))
        .unwrap_or_else(IntoResponse::into_response)
}

fn stats_json(models: &[Arc<LoadedModel>]) -> Value {
    json!({ "model_stats": models.iter().map(|m| m.stats.to_json(&m.name, m.version)).collect::<Vec<_>>() })
}

async fn all_stats(State(state): State<HttpState>) -> Response {
    state.frontend.stats_models(None, None).map(|m| ok_json(&stats_json(&m))).unwrap_or_else(IntoResponse::into_response)
}

async fn model_stats(State(state): State<HttpState>, Path(model): Path<String>) -> Response {
    state.frontend.stats_models(Some(&model), None).map(|m| ok_json(&stats_json(&m))).unwrap_or_else(IntoResponse::into_response)
}

async fn model_stats_version(State(state): State<HttpState>, Path((model, version)): Path<(String, String)>) -> Response {
    let models = match parse_version(&version) {
        Ok(v) => state.frontend.stats_models(Some(&model), v),
        Err(_) => Err(CoreError::invalid_arg(format!("requested model version is not available for model '{model}'"))),
    };
    models.map(|m| ok_json(&stats_json(&m))).unwrap_or_else(IntoResponse::into_response)
}

async fn infer(State(state): State<HttpState>, Path(model): Path<String>, request: Request) -> Response {
    infer_impl(state, model, None, request).await.unwrap_or_else(infer_error_response)
}

async fn infer_version(State(state): State<HttpState>, Path((model, version)): Path<(String, String)>, request: Request) -> Response {
    match parse_version(&version) {
        Ok(v) => infer_impl(state, model, v, request).await.unwrap_or_else(infer_error_response),
        Err(e) => e.into_response(),
    }
}

/// Like Triton, an unsupported Content-Encoding also says which encodings are accepted.
fn infer_error_response(error: CoreError) -> Response {
    let unsupported_encoding = error.message.starts_with(UNSUPPORTED_COMPRESSION);
    let mut response = error.into_response();
    if unsupported_encoding {
        response.headers_mut().insert(header::ACCEPT_ENCODING, HeaderValue::from_static("gzip, deflate"));
    }
    response
}

const UNSUPPORTED_COMPRESSION: &str = "Unsupported compression type";

async fn infer_impl(state: HttpState, model: String, version: Option<i64>, request: Request) -> CoreResult<Response> {
    let (parts, body) = request.into_parts();
    let header_length = match parts.headers.get("inference-header-content-length") {
        None => None,
        Some(v) => Some(v.to_str().ok().and_then(|s| s.trim().parse::<i64>().ok()).ok_or_else(|| {
            CoreError::invalid_arg(format!(
                "Inference-Header-Content-Length header value {v:?} is not a valid byte count (model '{model}')"
            ))
        })?),
    };
    let body = read_body(&parts.headers, body, state.max_input_size).await?;
    // Resolve the model before decoding, so an unknown model is reported as such even when
    // the body is also wrong.
    let loaded = state.frontend.manager.get(&model, version)?;
    let decoded = codec::decode_request(&state.frontend, body, header_length, &model, version)?;
    let response = state.frontend.infer_on(&loaded, decoded.request).await?;
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
    Ok(http)
}

/// Reads the whole body, undoing Content-Encoding (gzip / deflate), never holding more than
/// `limit` bytes of compressed or decompressed data.
async fn read_body(headers: &HeaderMap, body: Body, limit: usize) -> CoreResult<Bytes> {
    let too_large =
        || CoreError::invalid_arg(format!("request body exceeds the maximum allowed size of {limit} bytes (--http-max-input-size)"));
    let raw = axum::body::to_bytes(body, limit).await.map_err(|e| {
        let source = std::error::Error::source(&e).map(ToString::to_string).unwrap_or_default();
        if source.contains("length limit") || e.to_string().contains("length limit") {
            too_large()
        } else {
            CoreError::invalid_arg(format!("failed to read the request body: {e}"))
        }
    })?;
    let encoding = headers.get(header::CONTENT_ENCODING).map(|v| v.to_str().unwrap_or("").trim().to_ascii_lowercase());
    let mut decoder: Box<dyn Read> = match encoding.as_deref() {
        None | Some("" | "identity") => return Ok(raw),
        Some("gzip") => Box::new(flate2::read::GzDecoder::new(&raw[..])),
        Some("deflate") => Box::new(flate2::read::ZlibDecoder::new(&raw[..])),
        Some(other) => {
            return Err(CoreError::unsupported(format!("{UNSUPPORTED_COMPRESSION} '{other}' (supported: gzip, deflate)")));
        }
    };
    let mut out = Vec::new();
    decoder
        .by_ref()
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| CoreError::invalid_arg(format!("failed to decompress the {} request body: {e}", encoding.unwrap_or_default())))?;
    if out.len() > limit {
        return Err(too_large());
    }
    Ok(Bytes::from(out))
}

async fn generate_impl(state: HttpState, model: String, version: Option<i64>, request: Request, streaming: bool) -> CoreResult<Response> {
    let (parts, body) = request.into_parts();
    let body = read_body(&parts.headers, body, state.max_input_size).await?;
    let loaded = state.frontend.manager.get(&model, version)?;
    let request = generate::decode(&loaded, &body)?;
    if streaming { generate::stream(loaded, request).await } else { generate::single(loaded, request).await }
}

async fn generate(State(state): State<HttpState>, Path(model): Path<String>, request: Request) -> Response {
    generate_impl(state, model, None, request, false).await.unwrap_or_else(IntoResponse::into_response)
}

async fn generate_version(State(state): State<HttpState>, Path((model, version)): Path<(String, String)>, request: Request) -> Response {
    match parse_version(&version) {
        Ok(v) => generate_impl(state, model, v, request, false).await.unwrap_or_else(IntoResponse::into_response),
        Err(e) => e.into_response(),
    }
}

async fn generate_stream(State(state): State<HttpState>, Path(model): Path<String>, request: Request) -> Response {
    generate_impl(state, model, None, request, true).await.unwrap_or_else(IntoResponse::into_response)
}

async fn generate_stream_version(State(state): State<HttpState>, Path((model, version)): Path<(String, String)>, request: Request) -> Response {
    match parse_version(&version) {
        Ok(v) => generate_impl(state, model, v, request, true).await.unwrap_or_else(IntoResponse::into_response),
        Err(e) => e.into_response(),
    }
}

async fn repository_index(State(state): State<HttpState>, body: Bytes) -> Response {
    let ready_only = if body.is_empty() {
        false
    } else {
        match serde_json::from_slice::<Value>(&body) {
            Ok(v) => v.get("ready").and_then(Value::as_bool).unwrap_or(false),
            Err(e) => return CoreError::internal(format!("failed to parse the request JSON buffer: {e}")).into_response(),
        }
    };
    let entries: Vec<Value> = state
        .frontend
        .manager
        .index(ready_only)
        .into_iter()
        .map(|e| {
            let mut v = json!({ "name": e.name });
            if let Some(version) = e.version {
                v["version"] = json!(version);
            }
            if let Some(state) = e.state {
                v["state"] = json!(state);
            }
            if !e.reason.is_empty() {
                v["reason"] = json!(e.reason);
            }
            v
        })
        .collect();
    ok_json(&Value::Array(entries))
}

async fn repository_load(State(state): State<HttpState>, Path(model): Path<String>, body: Bytes) -> Response {
    let mut config = None;
    let mut file_override = None;
    if !body.is_empty() {
        let parsed: Value = match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => return CoreError::internal(format!("failed to parse the request JSON buffer: {e}")).into_response(),
        };
        let parameters = parsed.get("parameters").and_then(Value::as_object);
        file_override = parameters.and_then(|p| p.keys().find(|k| k.starts_with("file:")).cloned());
        config = match parameters.and_then(|p| p.get("config")) {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => return CoreError::invalid_arg("load parameter 'config' must be a JSON string").into_response(),
        };
    }
    empty_ok(state.frontend.load(&model, config, file_override.as_deref()).await)
}

async fn repository_unload(State(state): State<HttpState>, Path(model): Path<String>) -> Response {
    empty_ok(state.frontend.unload(&model).await)
}

fn parse_json_body(body: &[u8]) -> CoreResult<Value> {
    if body.is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_slice(body).map_err(|e| CoreError::invalid_arg(format!("failed to parse the request JSON buffer: {e}")))
}

fn shm_status_json(regions: Vec<crate::shm::RegionStatus>) -> Response {
    ok_json(&Value::Array(
        regions
            .into_iter()
            .map(|r| json!({ "name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size }))
            .collect(),
    ))
}

async fn shm_status_all(State(state): State<HttpState>) -> Response {
    state.frontend.shm.status(None).map(shm_status_json).unwrap_or_else(IntoResponse::into_response)
}

async fn shm_status(State(state): State<HttpState>, Path(region): Path<String>) -> Response {
    state.frontend.shm.status(Some(&region)).map(shm_status_json).unwrap_or_else(IntoResponse::into_response)
}

async fn shm_register(State(state): State<HttpState>, Path(region): Path<String>, body: Bytes) -> Response {
    let register = || -> CoreResult<()> {
        let body = parse_json_body(&body)?;
        let key = body
            .get("key")
            .and_then(Value::as_str)
            .ok_or_else(|| CoreError::invalid_arg("Shared memory register request has no 'key' field"))?;
        let byte_size = body
            .get("byte_size")
            .and_then(Value::as_u64)
            .ok_or_else(|| CoreError::invalid_arg("Shared memory register request has no 'byte_size' field"))?;
        let offset = match body.get("offset") {
            None => 0,
            Some(v) => v.as_u64().ok_or_else(|| CoreError::invalid_arg("'offset' must be a non-negative integer"))?,
        };
        state.frontend.shm.register(&region, key, offset, byte_size)
    };
    empty_ok(register())
}

async fn shm_unregister_all(State(state): State<HttpState>) -> Response {
    empty_ok(state.frontend.shm.unregister(None))
}

async fn shm_unregister(State(state): State<HttpState>, Path(region): Path<String>) -> Response {
    empty_ok(state.frontend.shm.unregister(Some(&region)))
}

async fn cuda_shm_status(Path(region): Path<String>) -> Response {
    match crate::shm::cuda::status(Some(&region)) {
        Ok(()) => ok_json(&json!([])),
        Err(e) => e.into_response(),
    }
}

async fn cuda_shm_register(Path(region): Path<String>) -> Response {
    empty_ok(crate::shm::cuda::register(&region))
}

fn settings_json(settings: std::collections::BTreeMap<String, SettingValue>) -> Response {
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

fn trace_update_impl(state: &HttpState, model: Option<&str>, body: &[u8]) -> CoreResult<Response> {
    let Value::Object(body) = parse_json_body(body)? else {
        return Err(CoreError::invalid_arg("trace settings must be a JSON object"));
    };
    let mut updates = std::collections::BTreeMap::new();
    for (key, value) in body {
        let value = match value {
            Value::Null => None,
            Value::String(s) => Some(vec![s]),
            Value::Array(items) => Some(
                items
                    .into_iter()
                    .map(|i| i.as_str().map(str::to_owned).ok_or_else(|| CoreError::invalid_arg(format!("expect a string for '{key}'"))))
                    .collect::<CoreResult<Vec<_>>>()?,
            ),
            Value::Number(n) => Some(vec![n.to_string()]),
            _ => return Err(CoreError::invalid_arg(format!("expect a string for '{key}'"))),
        };
        updates.insert(key, value);
    }
    state.frontend.update_trace_settings(model, updates).map(settings_json)
}

async fn trace_get(State(state): State<HttpState>) -> Response {
    state.frontend.trace_settings(None).map(settings_json).unwrap_or_else(IntoResponse::into_response)
}

async fn trace_update(State(state): State<HttpState>, body: Bytes) -> Response {
    trace_update_impl(&state, None, &body).unwrap_or_else(IntoResponse::into_response)
}

async fn model_trace_get(State(state): State<HttpState>, Path(model): Path<String>) -> Response {
    state.frontend.trace_settings(Some(&model)).map(settings_json).unwrap_or_else(IntoResponse::into_response)
}

async fn model_trace_update(State(state): State<HttpState>, Path(model): Path<String>, body: Bytes) -> Response {
    trace_update_impl(&state, Some(&model), &body).unwrap_or_else(IntoResponse::into_response)
}

async fn log_get(State(state): State<HttpState>) -> Response {
    state.frontend.log_settings().map(settings_json).unwrap_or_else(IntoResponse::into_response)
}

async fn log_update(State(state): State<HttpState>, body: Bytes) -> Response {
    let update = || -> CoreResult<Response> {
        let Value::Object(body) = parse_json_body(&body)? else {
            return Err(CoreError::invalid_arg("log settings must be a JSON object"));
        };
        let mut updates = std::collections::BTreeMap::new();
        for (key, value) in body {
            let value = match value {
                Value::Bool(b) => SettingValue::Bool(b),
                Value::Number(n) => match n.as_u64().and_then(|u| u32::try_from(u).ok()) {
                    Some(u) => SettingValue::Uint(u),
                    None => return Err(CoreError::invalid_arg(format!("expect int32 for '{key}'"))),
                },
                Value::String(s) => SettingValue::Str(s),
                other => return Err(CoreError::invalid_arg(format!("unexpected value {other} for '{key}'"))),
            };
            updates.insert(key, value);
        }
        state.frontend.update_log_settings(updates).map(settings_json)
    };
    update().unwrap_or_else(IntoResponse::into_response)
}
