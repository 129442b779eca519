//! The one request/response type every caller translates to (the HTTP, gRPC and in-process
//! doors, BLS calls from guests, ensemble steps, the library API), and [`Infer`], the way to run
//! a model by name that the model manager implements.
//!
//! Two paths lead to a model, and both end in the loaded version's `LoadedModel::infer`: the
//! doors resolve the version once through the frontend (`Frontend::model`, a `ServedModel`) and
//! run the request there (`Frontend::infer`, with shared memory and the drain); BLS, ensemble
//! steps and `ServerHandle::infer` go through [`Infer`].

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;

use crate::error::CoreResult;
use crate::tensor::Tensor;

/// Request/response parameter values, as in the KServe v2 `parameters` object.
#[derive(Debug, Clone, PartialEq)]
pub enum ParamValue {
    Bool(bool),
    Int(i64),
    /// An unsigned value above i64::MAX (e.g. a uint64 correlation id).
    Uint(u64),
    Double(f64),
    String(String),
}

pub type Parameters = BTreeMap<String, ParamValue>;

/// Longest string correlation id Triton accepts (`TRITONSERVER_InferenceRequestSetCorrelationIdString`).
const MAX_STRING_CORRELATION_ID: usize = 128;

/// Triton's check on a string `sequence_id`, made at both doors.
pub fn check_string_correlation_id(id: &str) -> crate::error::CoreResult<()> {
    if id.len() > MAX_STRING_CORRELATION_ID {
        return Err(crate::error::CoreError::unsupported(format!(
            "string correlation ID cannot be longer than {MAX_STRING_CORRELATION_ID} characters"
        )));
    }
    Ok(())
}

/// A model version as both doors receive it, as text: empty means "the server's choice" (the
/// newest ready version). Anything but a non-negative integer gets the door's own `invalid` error.
pub fn parse_version(
    version: &str,
    invalid: impl FnOnce() -> crate::error::CoreError,
) -> crate::error::CoreResult<Option<i64>> {
    if version.is_empty() {
        return Ok(None);
    }
    version.parse::<i64>().ok().filter(|v| *v >= 0).map(Some).ok_or_else(invalid)
}

/// Triton's message for a version string its `std::stol` cannot read.
pub fn version_error(version: &str) -> String {
    format!(
        "failed to get model version from specified version string '{version}' (details: stol), version should be \
        an integral value > 0"
    )
}

/// A version as Triton's gRPC door reads it (`std::stol`): leading whitespace, an optional sign,
/// then digits up to the first other character (`"1abc"` is 1); no digits, or too large, is an
/// error; a negative version is refused.
pub fn parse_version_stol(version: &str) -> crate::error::CoreResult<Option<i64>> {
    use crate::error::CoreError;
    if version.is_empty() {
        return Ok(None);
    }
    let text = version.trim_start();
    let (sign, rest) = match text.as_bytes().first() {
        Some(b'-') => ("-", &text[1..]),
        Some(b'+') => ("", &text[1..]),
        _ => ("", text),
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    if digits.is_empty() {
        return Err(CoreError::invalid_arg(version_error(version)));
    }
    let value: i64 = format!("{sign}{digits}").parse().map_err(|_| CoreError::invalid_arg(version_error(version)))?;
    if value < 0 {
        return Err(CoreError::invalid_arg(format!(
            "invalid model version specified '{version}' , version should be an integral value > 0"
        )));
    }
    Ok(Some(value))
}

/// A byte range of a registered shared-memory region (the `shared_memory_region`,
/// `shared_memory_offset` and `shared_memory_byte_size` tensor parameters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShmTarget {
    pub region: String,
    pub offset: u64,
    pub byte_size: u64,
}

/// An output the caller asked for, with the classification extension's `class_count` (0 = raw
/// tensor) and, optionally, the shared-memory range its bytes are to be written into.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestedOutput {
    pub name: String,
    pub class_count: u32,
    pub shared_memory: Option<ShmTarget>,
}

impl RequestedOutput {
    pub fn named(name: impl Into<String>) -> Self {
        Self { name: name.into(), ..Self::default() }
    }
}

#[derive(Debug, Clone, Default)]
pub struct InferRequest {
    pub model_name: String,
    /// `None` asks for the newest ready version, as Triton does.
    pub model_version: Option<i64>,
    pub id: Option<String>,
    pub inputs: Vec<Tensor>,
    /// Empty means "every output of the model".
    pub outputs: Vec<RequestedOutput>,
    pub parameters: Parameters,
    /// Inputs whose datatype the client named with a string this server does not know (their
    /// tensors carry BYTES as a stand-in). Triton reports such an input as `'<invalid>'` in its
    /// datatype check, in its order, so the doors leave it to the model's checks too.
    pub unknown_datatype_inputs: Vec<String>,
    /// Who waits for the answer: set where the request enters (a door, a BLS call, an ensemble
    /// step), it decides whether the execution may run on the caller's thread.
    pub caller: crate::execution::Caller,
    /// Set when the request is sampled for tracing (see `crate::trace`): each layer it passes
    /// stamps its activities on it.
    pub trace: Option<crate::trace::Trace>,
    /// Who the request runs as (see `crate::tenant`): set by a door that identified a tenant or
    /// read a fairness id, and passed on to the request's BLS calls and ensemble steps. `None`:
    /// the trusted in-process API, or a server without tenants.
    pub principal: Option<std::sync::Arc<crate::tenant::Principal>>,
}

#[derive(Debug, Clone, Default)]
pub struct InferResponse {
    pub model_name: String,
    pub model_version: i64,
    pub id: Option<String>,
    pub outputs: Vec<Tensor>,
    pub parameters: Parameters,
    /// Outputs whose bytes were written to shared memory (their `data` here is empty), by name.
    pub shared_memory: BTreeMap<String, ShmTarget>,
    /// Whether this is the request's last response (always true for non-decoupled models; a
    /// decoupled model may also end a request with a final flag and no response).
    pub is_final: bool,
    /// Compute time of the execution(s) behind this response (an ensemble: its steps' sum).
    /// Server-internal: the doors do not send it.
    pub compute: std::time::Duration,
}

/// Responses of one request, in order; the stream ends after the final one.
pub type ResponseStream = tokio::sync::mpsc::Receiver<CoreResult<InferResponse>>;
/// The producing end of a [`ResponseStream`].
pub type ResponseSender = tokio::sync::mpsc::Sender<CoreResult<InferResponse>>;

/// Responses buffered per request (in a [`ResponseStream`], and in a decoupled backend's
/// responder) before the producer waits for its reader: the back-pressure that keeps a slow or
/// stalled reader from making the server buffer a decoupled model's output without bound.
pub const RESPONSE_BUFFER: usize = 64;

/// A new response stream and its sender.
pub fn response_stream() -> (ResponseSender, ResponseStream) {
    tokio::sync::mpsc::channel(RESPONSE_BUFFER)
}

/// A boxed future, so [`Infer`] can be used as `dyn Infer` (BLS holds a `Weak<dyn Infer>`).
pub type InferFuture<'a, T> = Pin<Box<dyn Future<Output = CoreResult<T>> + Send + 'a>>;

/// Running a model by name in-process: request in, response (or response stream) out.
///
/// The model manager implements it; BLS calls from guests, ensemble steps and the library API
/// (`ServerHandle::infer`) call it. The doors do not: they run a request on the version the
/// frontend resolved for it (`Frontend::infer`). Both reach the same `LoadedModel::infer`, so
/// every caller gets the same validation, scheduling, statistics and errors. Code below the
/// manager (backends, schedulers) reaches other models only through this trait, never by
/// importing the manager.
pub trait Infer: Send + Sync {
    /// Runs a request on a model that answers exactly once (not decoupled).
    fn infer(&self, request: InferRequest) -> InferFuture<'_, InferResponse>;

    /// Runs a request and streams its responses: one for a regular model, 0..n for a decoupled
    /// one. Errors before the request starts are returned; later ones arrive in the stream.
    fn infer_stream(&self, request: InferRequest) -> InferFuture<'_, ResponseStream>;

    /// Whether a request to `model` (at `version`, or its newest ready one) would find it ready;
    /// the error is the one that request would get. For callers that resolve a model before
    /// they run it (wasi:nn's `load-by-name`). By default every model is taken as ready.
    fn check_ready(&self, model: &str, version: Option<i64>) -> CoreResult<()> {
        let _ = (model, version);
        Ok(())
    }
}
