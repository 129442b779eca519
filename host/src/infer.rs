//! The one request/response type every door (HTTP, gRPC, in-process BLS, the library API)
//! translates to, and [`Infer`], the one in-process entry point they all call.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

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

tokio::task_local! {
    static CALLER_MAY_BLOCK: bool;
}

/// Runs `call` telling the scheduler whether an execution may block the calling task's thread
/// (see `ModelInstance::runs_inline`). A unary door call says yes: its task waits on nothing
/// else. Everything else (streams, BLS with its timeout, an ensemble's parallel steps) is left
/// out by default, since a blocked task there stalls other work or misses a deadline.
pub async fn with_caller_blocking<F: Future>(may_block: bool, call: F) -> F::Output {
    CALLER_MAY_BLOCK.scope(may_block, call).await
}

/// Runs `wait`, which blocks its thread (a BLS call waiting for its model, a send waiting for a
/// slow reader), from code that may be running on an async runtime thread (an execution the pool
/// runs inline): tokio's `block_in_place` then moves that thread's other tasks elsewhere first.
/// On a blocking thread, or outside a runtime, it just runs `wait`.
pub fn blocking<R>(wait: impl FnOnce() -> R) -> R {
    if on_multi_thread_runtime() { tokio::task::block_in_place(wait) } else { wait() }
}

thread_local! {
    /// The runtime whose worker this thread holds while it runs an execution inline (see
    /// [`run_inline`]).
    static INLINE_ON: std::cell::RefCell<Option<tokio::runtime::Handle>> = const { std::cell::RefCell::new(None) };
}

/// Runs an execution inline on a worker of `runtime` (this thread's, from
/// [`multi_thread_runtime`]): a long one may then hand the worker over ([`hand_off_worker`]).
/// Nested calls (a BLS callee running inline inside its caller's execution, where the current
/// runtime is the one its `wait_for` entered) keep the outermost runtime, whose worker the thread
/// holds.
pub fn run_inline<R>(runtime: tokio::runtime::Handle, work: impl FnOnce() -> R) -> R {
    struct Outermost;
    impl Drop for Outermost {
        fn drop(&mut self) {
            INLINE_ON.set(None);
        }
    }
    let _outermost = INLINE_ON.with_borrow(Option::is_none).then(|| {
        INLINE_ON.set(Some(runtime));
        Outermost
    });
    work()
}

/// Hands the async runtime worker this thread holds for an inline execution ([`run_inline`]) to
/// another thread, so the worker's other tasks go on while this thread stays in a long synchronous
/// run (a guest past its first epoch ticks, see `backend::wasm::instance`). On a one-worker runtime
/// (a connection thread) nothing else would serve that thread's connections meanwhile. Once the
/// worker is handed over, or on a thread that holds none (a blocking-pool thread), it does
/// nothing.
///
/// tokio's `block_in_place` takes the worker back when its closure returns if the new thread has
/// not picked it up yet, so the closure waits (at most [`HAND_OFF_WAIT`]) for a marker task
/// spawned on that runtime, which only a running worker can run.
pub fn hand_off_worker() {
    // Taken: after this the thread no longer holds the worker.
    let Some(runtime) = INLINE_ON.take() else { return };
    if !on_multi_thread_runtime() {
        return;
    }
    let taken = Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
    let marker = Arc::clone(&taken);
    runtime.spawn(async move {
        if let Ok(mut done) = marker.0.lock() {
            *done = true;
        }
        marker.1.notify_one();
    });
    tokio::task::block_in_place(|| {
        let (done, changed) = &*taken;
        if let Ok(guard) = done.lock() {
            let _ = changed.wait_timeout_while(guard, HAND_OFF_WAIT, |done| !*done);
        }
    });
}

/// How long [`hand_off_worker`] waits for another thread to take the worker over.
const HAND_OFF_WAIT: std::time::Duration = std::time::Duration::from_millis(20);

/// Whether this thread belongs to a multi-thread tokio runtime: `block_in_place` panics on a
/// current-thread one, and only a multi-thread runtime has other workers to move tasks to.
pub fn on_multi_thread_runtime() -> bool {
    multi_thread_runtime().is_some()
}

/// The multi-thread tokio runtime this thread belongs to, if it does (see
/// [`on_multi_thread_runtime`]).
pub fn multi_thread_runtime() -> Option<tokio::runtime::Handle> {
    tokio::runtime::Handle::try_current()
        .ok()
        .filter(|handle| handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
}

/// Runs `future` to its end from synchronous code (a guest's host call): polled once right here,
/// where a callee that runs inline (an idle instance, short executions) finishes with no thread
/// hop at all; only a future that has to wait is then blocked on, through [`blocking`].
pub fn wait_for<F: Future>(runtime: &tokio::runtime::Handle, future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    {
        // Entered so that the first poll can reach the runtime's timers and I/O.
        let _entered = runtime.enter();
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        let was = WAITING_IN_PLACE.replace(true);
        let polled = future.as_mut().poll(&mut context);
        WAITING_IN_PLACE.set(was);
        if let std::task::Poll::Ready(output) = polled {
            return output;
        }
    }
    blocking(|| runtime.block_on(future))
}

thread_local! {
    /// Set during [`wait_for`]'s first poll.
    static WAITING_IN_PLACE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the request being submitted comes from a caller that blocks its thread until the
/// answer comes ([`wait_for`]: a guest's BLS call): the dynamic batcher runs such a request at
/// once on an idle instance even under load, since nothing can gather while its caller waits.
pub fn caller_waits_in_place() -> bool {
    WAITING_IN_PLACE.get()
}

/// Whether the current task said it may block (see [`with_caller_blocking`]).
pub fn caller_may_block() -> bool {
    CALLER_MAY_BLOCK.try_with(|may| *may).unwrap_or(false)
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

/// The one in-process way to run a model: request in, response (or response stream) out.
///
/// The model manager implements it; the HTTP and gRPC doors, the generate extension, BLS calls
/// from guests and the library API all call it, so every caller gets the same validation,
/// scheduling, statistics and errors. Code below the manager (backends, schedulers) reaches
/// other models only through this trait, never by importing the manager.
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
