//! The in-process door: what the HTTP and gRPC doors answer, as values, for code in the server's
//! own process (the Python package's `tessera.tritonserver`, Triton's in-process API). No socket,
//! no encoding: requests are [`InferRequest`]s, answers are [`InferResponse`]s and the JSON the
//! HTTP door would send. Everything else — validation, scheduling, statistics, tracing, the drain
//! — is the same path the network doors take, through the [`Frontend`].

use std::sync::Arc;

use serde_json::{Value, json};

use crate::error::CoreResult;
use crate::execution::Caller;
use crate::frontend::{EXTENSIONS, Frontend, index_json, statistics_json};
use crate::infer::{InferRequest, InferResponse};
use crate::lifecycle::TrackedStream;

/// Renders `/metrics` (the metrics door's exposition) without the metrics door.
pub type MetricsText = Arc<dyn Fn() -> String + Send + Sync>;

/// A running server's in-process door (from `ServerHandle::in_process`). Cheap to clone.
#[derive(Clone)]
pub struct InProcess {
    frontend: Arc<Frontend>,
    metrics: MetricsText,
}

/// How the caller of [`InProcess::infer`] waits for its answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    /// The caller's thread blocks until the answer comes: the execution may run on it.
    Blocking,
    /// The caller waits asynchronously (an event loop): the execution runs elsewhere.
    Async,
}

/// The answers to one request: one for a model that answers once, 0..n for a decoupled model.
pub enum Answers {
    One(Option<CoreResult<InferResponse>>),
    Stream(TrackedStream),
}

impl Answers {
    /// The next answer; `None` after the last. A stream the server's stop cuts short (its exit
    /// timeout passed) ends with an error saying so, not with a plain end.
    pub async fn next(&mut self) -> Option<CoreResult<InferResponse>> {
        match self {
            Answers::One(answer) => answer.take(),
            Answers::Stream(stream) => stream.recv().await,
        }
    }

    /// Whether the last answer has been returned (nothing follows).
    pub fn is_over(&self) -> bool {
        match self {
            Answers::One(answer) => answer.is_none(),
            Answers::Stream(stream) => stream.is_over(),
        }
    }
}

impl InProcess {
    pub(crate) fn new(frontend: Arc<Frontend>, metrics: MetricsText) -> Self {
        Self { frontend, metrics }
    }

    /// Live: the process answers. (Not ready is [`Self::ready`]'s to say.)
    pub fn live(&self) -> bool {
        true
    }

    pub fn ready(&self) -> bool {
        self.frontend.server_ready()
    }

    /// Server metadata: name, version, extensions.
    pub fn metadata(&self) -> Value {
        json!({ "name": self.frontend.server_id, "version": self.frontend.version, "extensions": EXTENSIONS })
    }

    pub fn model_ready(&self, name: &str, version: Option<i64>) -> bool {
        self.frontend.model_ready(name, version)
    }

    pub fn model_metadata(&self, name: &str, version: Option<i64>) -> CoreResult<Value> {
        Ok(self.frontend.metadata(name, version)?.to_json())
    }

    /// The config as HTTP's `/config` returns it.
    pub fn model_config(&self, name: &str, version: Option<i64>) -> CoreResult<Value> {
        Ok(self.frontend.model(name, version)?.config_json().clone())
    }

    /// Whether the model's newest ready version (or `version`) is decoupled.
    pub fn is_decoupled(&self, name: &str, version: Option<i64>) -> CoreResult<bool> {
        Ok(self.frontend.model(name, version)?.is_decoupled())
    }

    /// `{"model_stats": [...]}`: every ready model (no name), one model's ready versions, or one.
    pub fn statistics(&self, name: Option<&str>, version: Option<i64>) -> CoreResult<Value> {
        Ok(statistics_json(&self.frontend.statistics(None, name, version)?))
    }

    /// The repository index, as HTTP's `/v2/repository/index` answers it.
    pub fn index(&self, ready_only: bool) -> Value {
        index_json(self.frontend.repository_index(None, ready_only))
    }

    /// Loads (or reloads) a model (explicit control mode only, as Triton); `config` is a JSON
    /// ModelConfig that overrides config.pbtxt, `files` Triton's `file:<path>` contents.
    pub async fn load(&self, name: &str, config: Option<String>, files: Vec<(String, Vec<u8>)>) -> CoreResult<()> {
        self.frontend.load(None, name, config, files).await
    }

    pub async fn unload(&self, name: &str, unload_dependents: bool) -> CoreResult<()> {
        self.frontend.unload(None, name, unload_dependents).await
    }

    /// The Prometheus text exposition `/metrics` would answer.
    pub fn metrics(&self) -> String {
        (self.metrics)()
    }

    /// Runs a request (on its `model_version`, or the newest ready version) and returns its
    /// answers. A model that answers once is run to its answer here; a decoupled one streams.
    pub async fn infer(&self, mut request: InferRequest, waiting: Waiting) -> CoreResult<Answers> {
        let served = self.frontend.model(&request.model_name, request.model_version)?;
        request.model_version = Some(served.version());
        request.trace = self.frontend.trace(&request.model_name, None);
        if served.is_decoupled() {
            // A stream's reader may be slow: its executions never block the caller's thread.
            request.caller = Caller::Detached;
            return Ok(Answers::Stream(self.frontend.infer_stream(&served, request).await?));
        }
        request.caller = match waiting {
            Waiting::Blocking => Caller::Task,
            Waiting::Async => Caller::Detached,
        };
        let response = self.frontend.infer(&served, request).await;
        Ok(Answers::One(Some(response)))
    }
}
