//! Backends turn a model version directory into executable instances. The scheduler only sees
//! [`ModelInstance`]; nothing here knows about HTTP or gRPC.

pub mod batch;
pub mod callable;
mod child;
pub(crate) mod disk_cache;
pub mod mailbox;
pub mod onnx;
pub mod python;
pub mod sealed;
pub mod unavailable;
pub mod utility;
pub mod wasm;

use std::path::Path;
use std::sync::Arc;

use crate::config::ModelConfig;
use crate::error::{CoreError, CoreResult};
use crate::infer::Parameters;
use crate::tensor::Tensor;

/// One response of a decoupled model: its outputs (or error), its response parameters (Triton's
/// `InferenceResponse(parameters=...)`, sent to the client with the outputs) and whether it is
/// the final one.
#[derive(Debug)]
pub struct RawResponse {
    pub outputs: CoreResult<Vec<Tensor>>,
    pub parameters: Parameters,
    pub is_final: bool,
}

impl RawResponse {
    /// A response without parameters.
    pub fn new(outputs: CoreResult<Vec<Tensor>>, is_final: bool) -> Self {
        Self { outputs, parameters: Parameters::new(), is_final }
    }
}

/// The response parameters a backend gives a (not decoupled) request while it executes it, read
/// by whoever builds the request's response: a side channel, as [`ComputeTime`] is, so that
/// batch results stay tensors. Parameters given to a request whose answer is an error are
/// dropped with it.
#[derive(Debug, Default)]
pub struct ResponseParameters(std::sync::Mutex<Parameters>);

impl ResponseParameters {
    /// Replaces the parameters given so far.
    pub fn set(&self, parameters: Parameters) {
        if let Ok(mut slot) = self.0.lock() {
            *slot = parameters;
        }
    }

    /// The parameters given, leaving none.
    pub fn take(&self) -> Parameters {
        self.0.lock().map(|mut slot| std::mem::take(&mut *slot)).unwrap_or_default()
    }
}

/// Where a decoupled model's responses for one request go. Dropping the sender also ends the
/// request: a final flag without a response. It is bounded ([`crate::infer::RESPONSE_BUFFER`]):
/// a backend producing faster than the caller reads waits ([`send_blocking`] on its own thread,
/// `send().await` in a task) instead of queueing without bound.
pub type Responder = tokio::sync::mpsc::Sender<RawResponse>;

/// A new responder and the receiving end the scheduler reads.
pub fn responder() -> (Responder, tokio::sync::mpsc::Receiver<RawResponse>) {
    tokio::sync::mpsc::channel(crate::infer::RESPONSE_BUFFER)
}

/// Sends from a backend's own (blocking) thread, waiting while the caller's buffer is full;
/// false when the caller has gone.
pub fn send_blocking(responder: &Responder, response: RawResponse) -> bool {
    match responder.try_send(response) {
        Ok(()) => true,
        Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => false,
        Err(tokio::sync::mpsc::error::TrySendError::Full(response)) => {
            crate::execution::blocking(|| responder.blocking_send(response).is_ok())
        }
    }
}

/// What became of a response sent with [`send_blocking_until`].
#[derive(Debug, PartialEq, Eq)]
pub enum Sent {
    Delivered,
    /// The caller has gone.
    Gone,
    /// The caller's buffer stayed full until the deadline: it is not reading.
    TimedOut,
}

/// [`send_blocking`], but waiting for a full buffer only until `deadline`: a caller that stops
/// reading a stream must not hold the producer (a Wasm instance, which its own time limit cannot
/// interrupt inside a host call) for ever.
pub fn send_blocking_until(
    responder: &Responder,
    response: RawResponse,
    deadline: std::time::Instant,
    runtime: &tokio::runtime::Handle,
) -> Sent {
    match responder.try_send(response) {
        Ok(()) => Sent::Delivered,
        Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => Sent::Gone,
        Err(tokio::sync::mpsc::error::TrySendError::Full(response)) => {
            let deadline = tokio::time::Instant::from_std(deadline);
            // An async block: the timer is made at the first poll, inside the runtime's context.
            let wait = async { tokio::time::timeout_at(deadline, responder.send(response)).await };
            match crate::execution::wait_for(runtime, wait) {
                Ok(Ok(())) => Sent::Delivered,
                Ok(Err(_)) => Sent::Gone,
                Err(_) => Sent::TimedOut,
            }
        }
    }
}

/// One request as an instance sees it: inputs already checked against the config and reshaped to
/// what the model expects, plus the names of the outputs the caller needs.
#[derive(Debug, Clone, Default)]
pub struct ExecRequest {
    pub id: Option<String>,
    pub inputs: Vec<Tensor>,
    pub outputs: Vec<String>,
    pub parameters: Parameters,
    /// Set for decoupled models only.
    pub responder: Option<Responder>,
    /// Where the scheduler adds the compute time of the execution(s) that served this request,
    /// so a caller (an ensemble summing its steps) learns it whatever batch the request joined.
    pub compute: Option<Arc<ComputeTime>>,
    /// Who waits for the answer (from [`crate::infer::InferRequest::caller`]).
    pub caller: crate::execution::Caller,
    /// The request's trace, when it is sampled (from [`crate::infer::InferRequest::trace`]).
    pub trace: Option<crate::trace::Trace>,
    /// For a decoupled request the pool may hand to a busy instance (see
    /// `crate::backend::mailbox`): answered when the request ends, which may be before its
    /// execution does.
    pub done: Option<crate::backend::mailbox::Done>,
    /// Where a backend puts the parameters of this request's response (not decoupled requests:
    /// theirs go with each [`RawResponse`]); none when nobody reads them.
    pub response_parameters: Option<Arc<ResponseParameters>>,
    /// Who the request runs as (from [`crate::infer::InferRequest::principal`]): its flow in
    /// the model's queue, and what its BLS calls may reach.
    pub principal: Option<Arc<crate::tenant::Principal>>,
}

/// Compute time spent for one request, in nanoseconds (added to from the scheduler's tasks).
#[derive(Debug, Default)]
pub struct ComputeTime(std::sync::atomic::AtomicU64);

impl ComputeTime {
    pub fn add(&self, d: std::time::Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.0.fetch_add(ns, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn get(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.0.load(std::sync::atomic::Ordering::Relaxed))
    }
}

/// Where an instance runs, decided at load from its instance group (`KIND_GPU` with `gpus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InstanceDevice {
    #[default]
    Cpu,
    Gpu(u32),
}

impl InstanceDevice {
    /// Triton's `model_instance_kind` string.
    pub fn kind(self) -> &'static str {
        match self {
            Self::Cpu => "CPU",
            Self::Gpu(_) => "GPU",
        }
    }

    /// Triton's `model_instance_device_id` (0 for CPU instances).
    pub fn id(self) -> u32 {
        match self {
            Self::Cpu => 0,
            Self::Gpu(id) => id,
        }
    }
}

/// What a backend gets to create one instance.
pub struct InstanceContext<'a> {
    pub config: &'a ModelConfig,
    pub model_dir: &'a Path,
    pub version_dir: &'a Path,
    /// The model file (`<version_dir>/<default_model_filename>`).
    pub model_path: &'a Path,
    /// The model file's plaintext when it is sealed (encrypted at rest, see [`sealed`]): a
    /// backend reads the model from here then, never from `model_path`.
    pub model_plaintext: Option<&'a [u8]>,
    pub version: i64,
    /// `<group name>_<index>`, as Triton names instances.
    pub instance_name: String,
    pub device: InstanceDevice,
    /// The model version's statistics, where a sandboxing backend counts what its instances use.
    pub stats: &'a std::sync::Arc<crate::stats::ModelStats>,
}

/// One loaded copy of a model (Triton's "model instance"). An instance runs one batch at a time;
/// the scheduler guarantees that by taking `&mut self`.
pub trait ModelInstance: Send {
    /// Executes a batch; returns one result per request, in order.
    fn execute(&mut self, batch: Vec<ExecRequest>) -> Vec<CoreResult<Vec<Tensor>>>;

    /// Whether a request dispatched by its own task (an idle instance, or no batcher; a unary
    /// door call, see `crate::execution::Caller`) should run on that task's thread
    /// (tokio's `block_in_place`, which moves the worker's other tasks elsewhere) instead of
    /// being handed to a blocking thread; batches a batcher forms are always handed off. Worth
    /// it when one execution costs about as much as two thread wake-ups (an embedded Python
    /// function: tens of microseconds). The price: that call cannot be abandoned midway (a
    /// client disconnect waits for the execution).
    fn runs_inline(&self) -> bool {
        false
    }

    /// Whether `execute` only computes: it never waits on other threads, locks, I/O or timers,
    /// except through [`crate::execution::blocking`] (which a BLS call or a full response buffer
    /// goes through). Such an instance's executions run on the async runtime's own thread, with
    /// no hand-off at all, once the scheduler has measured them short (see
    /// `scheduler::pool::InlineGate`): for a few-microsecond model the hand-off to a blocking
    /// thread and back costs more than the work.
    fn only_computes(&self) -> bool {
        false
    }

    /// Where the pool leaves requests for this instance while it executes, for an instance that
    /// can take them then (see `crate::backend::mailbox`); `None` for the others.
    fn mailbox(&self) -> Option<Arc<crate::backend::mailbox::Mailbox>> {
        None
    }
}

/// The names a backend answers to in configs and model directories.
#[derive(Clone, Copy, Debug)]
pub struct BackendKind {
    /// The `backend:` name in config.pbtxt.
    pub name: &'static str,
    /// The `platform:` strings that select this backend (the first is the one Triton reports).
    pub platforms: &'static [&'static str],
    /// The model file in a version directory (`""` for a backend without one).
    pub default_model_filename: &'static str,
}

/// The TorchScript backend's names, also where a build without it registers them
/// ([`unavailable::UnavailableBackend::pytorch`]).
pub const PYTORCH: BackendKind =
    BackendKind { name: "pytorch", platforms: &["pytorch_libtorch"], default_model_filename: "model.pt" };

pub trait Backend: Send + Sync {
    /// The backend's names; [`Self::name`], [`Self::platforms`] and
    /// [`Self::default_model_filename`] read them.
    fn kind(&self) -> BackendKind;
    /// The `backend:` name in config.pbtxt.
    fn name(&self) -> &'static str {
        self.kind().name
    }
    /// The `platform:` strings that select this backend (the first is the one Triton reports).
    fn platforms(&self) -> &'static [&'static str] {
        self.kind().platforms
    }
    /// The platform reported in model metadata.
    fn platform(&self) -> &'static str {
        self.platforms().first().copied().unwrap_or_else(|| self.name())
    }
    fn default_model_filename(&self) -> &'static str {
        self.kind().default_model_filename
    }
    /// Whether instances can run on a GPU (`Err` says why not). KIND_AUTO picks GPUs only for
    /// backends that can use them; KIND_GPU on one that cannot is a load error.
    fn gpu_support(&self) -> Result<(), String> {
        Err(format!("the {} backend runs on CPU only", self.name()))
    }
    /// Why this binary cannot serve the backend's models at all (a cargo feature left out of the
    /// build), or `None`. Such models stay unavailable with this reason without stopping a server
    /// started with `--exit-on-error`: the build, not the repository, is what lacks them.
    fn missing_from_build(&self) -> Option<&str> {
        None
    }
    /// Fills inputs, outputs and max_batch_size from the model file (Triton's auto-complete).
    fn autocomplete(&self, config: &mut ModelConfig, model_path: &Path) -> CoreResult<()>;
    /// `autocomplete` for a sealed model file, given its plaintext. By default the file is not
    /// read; a backend that reads it to complete a config overrides this.
    fn autocomplete_sealed(&self, config: &mut ModelConfig, model_path: &Path, _plaintext: &[u8]) -> CoreResult<()> {
        self.autocomplete(config, model_path)
    }
    fn create_instance(&self, ctx: &InstanceContext<'_>) -> CoreResult<Box<dyn ModelInstance>>;
    /// Slow work a load does before it takes the repository's control lock (a model.py build),
    /// so that it holds up no other load or unload; the load under the lock then finds it done,
    /// or its failure, remembered until the next load of the model begins
    /// ([`Self::begin_preparation`]). `Err` only when the work was cancelled: the load ends there.
    fn prepare_outside_lock(&self, _model: &str, _model_path: &Path) -> CoreResult<()> {
        Ok(())
    }
    /// Cancels the preparation of `model` running now (every model's for `None`: the server
    /// stops, and nothing is prepared after that).
    fn cancel_preparation(&self, _model: Option<&str>) {}
    /// A load of the model directory `dir` begins: what an earlier load's preparation remembered
    /// of it goes, so this load tries afresh.
    fn begin_preparation(&self, _dir: &Path) {}
    /// How many preparations of this backend are worth running at once (the startup loads run
    /// that many ahead of the model-load threads); 1 for a backend with nothing slow to prepare.
    fn preparations_at_once(&self) -> usize {
        1
    }
}

/// The backends this server was started with, in the order auto-detection tries their model
/// files. Adding a backend is one `register` call (heavy ones in a crate of their own, such as
/// torch-backend/, registered by the binary: `ServerConfig::backends`).
#[derive(Clone, Default)]
pub struct BackendRegistry {
    backends: Vec<Arc<dyn Backend>>,
}

impl BackendRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a backend; one with the name of a backend already here replaces it in its place
    /// (an embedder's TorchScript backend replaces the stand-in that refuses its models).
    pub fn register(&mut self, backend: Arc<dyn Backend>) -> &mut Self {
        match self.backends.iter_mut().find(|b| b.name() == backend.name()) {
            Some(slot) => *slot = backend,
            None => self.backends.push(backend),
        }
        self
    }

    pub fn with(mut self, backend: Arc<dyn Backend>) -> Self {
        self.register(backend);
        self
    }

    /// [`Backend::cancel_preparation`] on every backend.
    pub fn cancel_preparation(&self, model: Option<&str>) {
        self.backends.iter().for_each(|b| b.cancel_preparation(model));
    }

    /// The most preparations any backend runs at once ([`Backend::preparations_at_once`]).
    pub fn preparations_at_once(&self) -> usize {
        self.backends.iter().map(|b| b.preparations_at_once()).max().unwrap_or(1).max(1)
    }

    /// [`Backend::begin_preparation`] on every backend.
    pub fn begin_preparation(&self, dir: &Path) {
        self.backends.iter().for_each(|b| b.begin_preparation(dir));
    }

    fn names(&self) -> String {
        self.backends.iter().map(|b| b.name()).collect::<Vec<_>>().join(", ")
    }

    fn platforms(&self) -> String {
        self.backends.iter().flat_map(|b| b.platforms().iter().copied()).collect::<Vec<_>>().join(", ")
    }

    /// Picks the backend for a config, as Triton does from `backend`, then `platform`, then the
    /// files present in the version directory (auto-complete).
    pub fn resolve(&self, config: &ModelConfig, version_dir: Option<&Path>) -> CoreResult<Arc<dyn Backend>> {
        let by_name = |name: &str| self.backends.iter().find(|b| b.name() == name);
        let by_platform = |platform: &str| self.backends.iter().find(|b| b.platforms().contains(&platform));
        let found = match (config.backend.as_str(), config.platform.as_str()) {
            ("", "") => {
                // A file, or a directory in the backend's layout (ONNX's `model.onnx/model.onnx`).
                let has = |b: &&Arc<dyn Backend>| {
                    version_dir.is_some_and(|dir| dir.join(b.default_model_filename()).exists())
                };
                return self.backends.iter().find(has).cloned().ok_or_else(|| {
                    CoreError::invalid_arg(
                        "model configuration must specify 'backend' or 'platform' (no model file from which \
                        to infer it)",
                    )
                });
            }
            (backend, "") => by_name(backend).ok_or_else(|| {
                CoreError::unsupported(format!(
                    "backend '{backend}' is not supported by this server (supported: {})",
                    self.names()
                ))
            })?,
            ("", platform) => by_platform(platform).ok_or_else(|| {
                CoreError::unsupported(format!(
                    "platform '{platform}' is not supported by this server (supported: {})",
                    self.platforms()
                ))
            })?,
            (backend, platform) => match by_name(backend) {
                Some(b) if b.platforms().contains(&platform) => b,
                _ => {
                    return Err(CoreError::invalid_arg(format!(
                        "backend '{backend}' and platform '{platform}' do not agree"
                    )));
                }
            },
        };
        Ok(Arc::clone(found))
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    fn response() -> RawResponse {
        RawResponse::new(Ok(Vec::new()), false)
    }

    #[test]
    fn a_send_waits_for_a_full_buffer_only_until_its_deadline() {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_time().build().expect("rt");
        let (tx, mut rx) = responder();
        let soon = || Instant::now() + Duration::from_millis(30);
        for _ in 0..crate::infer::RESPONSE_BUFFER {
            assert_eq!(send_blocking_until(&tx, response(), soon(), runtime.handle()), Sent::Delivered);
        }
        let started = Instant::now();
        assert_eq!(send_blocking_until(&tx, response(), soon(), runtime.handle()), Sent::TimedOut);
        assert!(started.elapsed() >= Duration::from_millis(25), "it waited for the reader first");
        // A reader that takes one response makes room.
        assert!(rx.try_recv().is_ok());
        assert_eq!(send_blocking_until(&tx, response(), soon(), runtime.handle()), Sent::Delivered);
        drop(rx);
        assert_eq!(send_blocking_until(&tx, response(), soon(), runtime.handle()), Sent::Gone);
    }
}
