//! The library front door: a [`ServerConfig`] in, a running [`ServerHandle`] out. `tessera serve`
//! is one user (it maps its flags onto a config, see [`crate::cli`]); Rust programs that embed
//! the server, and the planned Python package, are others. Through the handle, models can also be registered from code
//! ([`ServerHandle::register_model`]) rather than read from repository directories, and run
//! in-process ([`ServerHandle::infer`]).

mod doors;
mod log_format;
pub mod logging;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use crate::backend::onnx::OnnxBackend;
use crate::backend::python::{PythonBackend, PythonOptions};
use crate::backend::utility::UtilityBackend;
use crate::backend::wasm::{WasmBackend, WasmOptions};
use crate::backend::{Backend, BackendRegistry};
use crate::cache::ResponseCache;
use crate::config::ModelConfig;
use crate::error::CoreResult;
use crate::execution::connection_threads::ConnectionThreads;
use crate::frontend::{Frontend, LogApplier, SettingValue};
use crate::grpc::GrpcOptions;
use crate::http::ConnectionLimits;
use crate::infer::Infer;
use crate::inprocess::InProcess;
use crate::lifecycle::Lifecycle;
use crate::limits::RequestBudget;
use crate::metrics::MetricsState;
use crate::model::ModelSettings;
use crate::repository::{ControlMode, ModelManager, RepositoryOptions};
use crate::restricted::Restrictions;
use crate::scheduler::rate_limit::{RateLimiter, ResourceOverride};
use crate::stats::custom::CustomMetrics;
use crate::stats::host::HostSampler;
use crate::trace::{TraceConfig, Tracer};
use doors::Doors;
pub use doors::{DoorKind, DoorOptions, StartedDoor};

/// Executions in a row failing in a model's instances after which it reports not ready, unless
/// `--model-unhealthy-after` says otherwise.
pub const DEFAULT_UNHEALTHY_AFTER: u32 = 10;
/// Where a front door listens. Port 0 picks a free port ([`ServerHandle`] reports it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listen {
    pub address: String,
    pub port: u16,
}

impl Listen {
    pub fn new(address: impl Into<String>, port: u16) -> Self {
        Self { address: address.into(), port }
    }
}

/// Everything a server is started with. [`ServerConfig::default`] serves nothing on the network
/// and loads models only when asked (explicit mode): embedders turn on what they need.
pub struct ServerConfig {
    /// Model repositories (directories of `<model>/config.pbtxt` and `<model>/<version>/`).
    pub repositories: Vec<PathBuf>,
    pub control_mode: ControlMode,
    /// Models loaded at startup in explicit mode (`*` = all).
    pub startup_models: Vec<String>,
    /// How often poll mode rescans the repositories.
    pub poll_interval: Duration,
    /// When true, every model needs a complete config.pbtxt (no auto-complete).
    pub strict_model_config: bool,
    /// When true, server readiness requires every loaded model to be ready.
    pub strict_readiness: bool,
    /// Models that must have a ready version for the server to be ready, whatever
    /// `strict_readiness` says (`--required-model`).
    pub required_models: Vec<String>,
    /// Fail [`Server::start`] if a model fails to load at startup.
    pub exit_on_error: bool,
    /// Reported as the server name in server metadata.
    pub server_id: String,
    pub http: Option<Listen>,
    /// Largest HTTP request body accepted, after decompression.
    pub http_max_input_size: usize,
    /// Budget of request bytes held at once, server-wide, by both doors (see `limits::RequestBudget`).
    pub max_inflight_request_bytes: usize,
    /// The HTTP door's connection cap and timeouts.
    pub http_connections: ConnectionLimits,
    /// Threads that run both doors' connections (`crate::execution`); 0: the shared runtime's.
    pub connection_threads: usize,
    /// Whether requests may take the execution fast paths (see `crate::execution`; off only to
    /// debug them). Process-wide: the last server started decides.
    pub fast_paths: bool,
    /// Request tracing (`--trace-config`; see `crate::trace`).
    pub trace: TraceConfig,
    /// `--log-requests`: an access line per inference request.
    pub log_requests: bool,
    /// `--allow-client-shm`: clients may register shared memory (off by default, as in Triton 2.7x).
    pub allow_client_shm: bool,
    /// Triton's `--http-restricted-api` (gRPC's are in `grpc_options`).
    pub http_restrictions: Restrictions,
    /// `--tenants FILE`: who may call, and what (see `crate::tenancy`); `None`: anyone may.
    pub tenants: Option<PathBuf>,
    /// HTTPS on the HTTP door (`--http-use-ssl`); plain HTTP when `None`.
    pub http_tls: Option<crate::http::HttpTls>,
    pub grpc: Option<Listen>,
    pub grpc_options: GrpcOptions,
    pub metrics: Option<Listen>,
    /// OpenAI's API on a port of its own (`--openai-port`); the HTTP door serves it either way.
    pub openai: Option<Listen>,
    /// Sampling interval of the CPU and memory gauges; `None` leaves them out.
    pub cpu_metrics_interval: Option<Duration>,
    /// Sampling interval of the GPU gauges (NVML); `None` leaves them out. Without NVML or a
    /// GPU there is nothing to sample and no GPU metric appears.
    pub gpu_metrics_interval: Option<Duration>,
    /// `--metrics-config`: which latency families are recorded.
    pub metrics_settings: crate::stats::latency::MetricsSettings,
    /// `--model-unhealthy-after`: see [`ModelSettings::unhealthy_after`].
    pub unhealthy_after: u32,
    /// `--http-header-forward-pattern`, `--grpc-header-forward-pattern`.
    pub header_forwarding: crate::frontend::ForwardPatterns,
    /// Size of the response cache in bytes, for models that enable it.
    pub response_cache_bytes: Option<usize>,
    /// Triton's rate limiter (`--rate-limit execution_count`) with the `--rate-limit-resource`
    /// totals; `None` when off.
    pub rate_limit: Option<Vec<ResourceOverride>>,
    /// How many models load at once at startup (0: one per CPU).
    pub model_load_threads: usize,
    /// libonnxruntime.so; `None` searches the usual places.
    pub onnxruntime_library: Option<PathBuf>,
    pub wasm: WasmOptions,
    /// The keys of sealed model files (`--model-keys`, `TESSERA_MODEL_KEYS`; `backend::sealed`).
    pub model_keys: Arc<crate::backend::sealed::ModelKeys>,
    /// How models served from `model.py` are built and sandboxed (`backend: "python"`).
    pub python: PythonOptions,
    /// Backends beyond the built-in ones, for models whose `backend:` names them (tried after the
    /// built-in ones when detecting by file). One named like a built-in replaces it (the binary's
    /// TorchScript backend replaces the stand-in that refuses `pytorch` models).
    pub backends: Vec<Arc<dyn Backend>>,
    /// Models that are not repository directories ([`ServerHandle::register_model`]), registered
    /// before the repositories load so that repository ensembles can use them.
    pub registered_models: Vec<RegisteredModel>,
    /// An ensemble whose steps are in no repository waits for models registered later
    /// ([`ServerHandle::register`]) instead of failing the startup (PyTriton's `bind` after start).
    pub ensembles_wait_for_registered: bool,
    /// After [`ServerHandle::stop`], how long open connections get before `wait` gives up on them.
    pub exit_timeout: Duration,
    /// The logging extension's initial settings and what applies later updates to the logger.
    pub log_settings: BTreeMap<String, SettingValue>,
    pub log_applier: Option<LogApplier>,
}

/// A model served from code rather than a repository directory: `config` describes it (validated
/// as a config.pbtxt would be), `backend` creates its instances, and it is served as `version`.
#[derive(Clone)]
pub struct RegisteredModel {
    pub config: ModelConfig,
    pub version: i64,
    pub backend: Arc<dyn Backend>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            repositories: Vec::new(),
            control_mode: ControlMode::Explicit,
            startup_models: Vec::new(),
            poll_interval: Duration::from_secs(15),
            strict_model_config: false,
            strict_readiness: true,
            required_models: Vec::new(),
            exit_on_error: true,
            server_id: "tessera".into(),
            http: None,
            http_max_input_size: 64 << 20,
            max_inflight_request_bytes: 1 << 30,
            http_connections: ConnectionLimits::default(),
            connection_threads: 0,
            fast_paths: true,
            trace: TraceConfig::default(),
            log_requests: false,
            allow_client_shm: false,
            http_restrictions: Restrictions::default(),
            tenants: None,
            http_tls: None,
            grpc: None,
            grpc_options: GrpcOptions::default(),
            metrics: None,
            openai: None,
            cpu_metrics_interval: None,
            gpu_metrics_interval: None,
            metrics_settings: Default::default(),
            unhealthy_after: DEFAULT_UNHEALTHY_AFTER,
            header_forwarding: Default::default(),
            response_cache_bytes: None,
            rate_limit: None,
            model_load_threads: 0,
            onnxruntime_library: None,
            wasm: WasmOptions::default(),
            model_keys: Arc::default(),
            python: PythonOptions::default(),
            backends: Vec::new(),
            registered_models: Vec::new(),
            ensembles_wait_for_registered: false,
            exit_timeout: Duration::from_secs(30),
            log_settings: BTreeMap::new(),
            log_applier: None,
        }
    }
}

impl ServerConfig {
    pub fn repository(mut self, path: impl Into<PathBuf>) -> Self {
        self.repositories.push(path.into());
        self
    }

    pub fn control_mode(mut self, mode: ControlMode) -> Self {
        self.control_mode = mode;
        self
    }

    pub fn http(mut self, listen: Listen) -> Self {
        self.http = Some(listen);
        self
    }

    pub fn grpc(mut self, listen: Listen) -> Self {
        self.grpc = Some(listen);
        self
    }

    pub fn metrics(mut self, listen: Listen) -> Self {
        self.metrics = Some(listen);
        self
    }

    /// Adds a backend for repository models (see [`ServerConfig::backends`]).
    pub fn backend(mut self, backend: Arc<dyn Backend>) -> Self {
        self.backends.push(backend);
        self
    }

    /// The logging extension's initial settings and what applies later updates to the logger.
    pub fn log_settings(mut self, initial: BTreeMap<String, SettingValue>, applier: LogApplier) -> Self {
        self.log_settings = initial;
        self.log_applier = Some(applier);
        self
    }
}

/// Why a server did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("model repository {0} is not a directory")]
    RepositoryMissing(PathBuf),
    #[error("failed to load all models ({}); exiting (pass --exit-on-error=false to serve the others)", names(.0))]
    ModelLoad(Vec<(String, String)>),
    #[error("failed to bind the {what} to {address}: {source}")]
    Bind { what: &'static str, address: String, source: std::io::Error },
    #[error("{0}")]
    Config(String),
}

/// The models that failed (the first ten, and how many more); each failure's reason was already
/// logged as it happened.
fn names(failed: &[(String, String)]) -> String {
    const NAMED: usize = 10;
    let mut names = failed.iter().take(NAMED).map(|(model, _)| model.as_str()).collect::<Vec<_>>().join(", ");
    if failed.len() > NAMED {
        names.push_str(&format!(" and {} more", failed.len() - NAMED));
    }
    names
}

/// Starts servers from a [`ServerConfig`].
pub struct Server;

impl Server {
    /// Loads the startup models, binds the configured doors and starts serving. Call it inside a
    /// tokio runtime; the server's tasks run on that runtime.
    pub async fn start(config: ServerConfig) -> Result<ServerHandle, StartError> {
        for repo in &config.repositories {
            if !repo.is_dir() {
                if config.exit_on_error {
                    return Err(StartError::RepositoryMissing(repo.clone()));
                }
                tracing::error!(repository = %repo.display(), "model repository is not a directory");
            }
        }
        let wasm = Arc::new(WasmBackend::new(config.wasm.clone()));
        let mut backends = BackendRegistry::new()
            .with(Arc::new(OnnxBackend::new(config.onnxruntime_library.as_deref())))
            .with(Arc::clone(&wasm) as Arc<dyn Backend>)
            .with(Arc::new(PythonBackend::new(Arc::clone(&wasm), config.python.clone())))
            // A stand-in refusing TorchScript models with the reason, unless the embedder (the
            // `tessera` binary built with `torch`) registers the backend itself.
            .with(Arc::new(crate::backend::unavailable::UnavailableBackend::pytorch()))
            .with(Arc::new(UtilityBackend::identity()))
            .with(Arc::new(UtilityBackend::repeat()))
            .with(Arc::new(UtilityBackend::square()));
        for backend in &config.backends {
            backends.register(Arc::clone(backend));
        }
        let manager = Arc::new(ModelManager::new(
            RepositoryOptions {
                repositories: config.repositories.clone(),
                control_mode: config.control_mode,
                strict_config: config.strict_model_config,
                response_cache: config.response_cache_bytes.map(|bytes| Arc::new(ResponseCache::new(bytes))),
                rate_limiter: config.rate_limit.clone().map(RateLimiter::new),
                load_threads: config.model_load_threads,
                model_settings: ModelSettings {
                    metrics: config.metrics_settings.clone(),
                    unhealthy_after: config.unhealthy_after,
                    model_keys: Arc::clone(&config.model_keys),
                },
                ensembles_wait_for_registered: config.ensembles_wait_for_registered,
            },
            backends,
        ));
        // Guests reach other models (BLS) through the manager's `Infer`, as ensemble steps do.
        let infer: Weak<dyn Infer> = Arc::downgrade(&(Arc::clone(&manager) as Arc<dyn Infer>));
        wasm.connect(infer);
        let custom_metrics = CustomMetrics::new(config.metrics_settings.custom);
        wasm.set_custom_metrics(Arc::clone(&custom_metrics));
        for model in config.registered_models {
            let name = model.config.name.clone();
            if let Err(e) = manager.register(model.config, model.version, model.backend).await {
                return Err(StartError::ModelLoad(vec![(name, e.message)]));
            }
        }
        let wanted: std::collections::BTreeSet<&str> = config.startup_models.iter().map(String::as_str).collect();
        if config.control_mode == ControlMode::Explicit && wanted.contains("*") && wanted.len() > 1 {
            // Triton's words: `*` (every model) with others named beside it is refused.
            return Err(StartError::Config(
                "Wildcard model name '*' must be the ONLY startup model if specified at all.".into(),
            ));
        }
        let failures = manager.load_startup_models(&config.startup_models).await;
        if !failures.is_empty() {
            // Each reason was logged as it happened (repeats counted once): here, which models.
            tracing::error!("{} model(s) failed to load: {}", failures.len(), names(&failures));
        }
        if !failures.is_empty() && config.exit_on_error {
            return Err(StartError::ModelLoad(failures));
        }

        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let mut tasks = tokio::task::JoinSet::new();
        if config.control_mode == ControlMode::Poll {
            let poller = Arc::downgrade(&manager);
            let every = config.poll_interval.max(Duration::from_secs(1));
            let mut stopped = stop_rx.clone();
            tokio::spawn(async move {
                let mut ticker = tokio::time::interval(every);
                ticker.tick().await;
                loop {
                    tokio::select! {
                        _ = ticker.tick() => {}
                        _ = stopped.wait_for(|s| *s) => return,
                    }
                    let Some(manager) = poller.upgrade() else { return };
                    manager.poll().await;
                }
            });
        }

        let tracer = Tracer::new(config.trace.clone()).map_err(StartError::Config)?;
        // Host CPU and memory: for /metrics and the ORCA load report.
        let host_sampler = config.cpu_metrics_interval.map(HostSampler::start);
        let mut frontend = Frontend::new(Arc::clone(&manager), config.server_id.clone(), config.strict_readiness)
            .with_required_models(config.required_models.clone())
            .with_tracer(Arc::clone(&tracer))
            .with_request_log(config.log_requests)
            .with_client_shm(config.allow_client_shm)
            .with_load_sources(host_sampler.clone(), Arc::clone(&custom_metrics))
            .with_header_forwarding(config.header_forwarding.clone());
        if let Some(applier) = config.log_applier {
            frontend = frontend.with_log_settings(config.log_settings, applier);
        }
        let frontend = Arc::new(frontend);

        // One budget of request bytes in flight for both doors.
        let request_budget = RequestBudget::new(config.max_inflight_request_bytes);
        crate::execution::set_fast_paths(config.fast_paths);
        if !config.fast_paths {
            tracing::warn!(
                "execution fast paths are off (--no-fast-paths): every request is queued and run on a blocking \
                 thread, and connections stay on the shared runtime"
            );
        }
        let connection_threads = if config.fast_paths { config.connection_threads } else { 0 };
        let threads = ConnectionThreads::start(connection_threads)
            .map(Arc::new)
            .map_err(|e| StartError::Config(format!("failed to start the connection threads: {e}")))?;
        let (tenants, http_tls) = doors::access(config.tenants.as_deref(), config.http_tls.as_ref(), &stop_rx)?;
        let doors = Doors {
            frontend: Arc::clone(&frontend),
            http_restrictions: config.http_restrictions.clone(),
            http_max_input_size: config.http_max_input_size,
            http_connections: config.http_connections.clone(),
            http_tls,
            tenants: tenants.clone(),
            grpc_options: GrpcOptions { tenants: tenants.clone(), ..config.grpc_options.clone() },
            budget: request_budget,
            threads,
            metrics: MetricsState {
                manager: Arc::clone(&manager),
                host: host_sampler.clone(),
                gpu: None,
                tracer: Arc::clone(&tracer),
                custom: Arc::clone(&custom_metrics),
                tenants,
            },
            gpu_metrics_interval: config.gpu_metrics_interval,
            stop: stop_rx.clone(),
        };
        let mut addresses = Addresses::default();
        let configured = [
            (DoorKind::Http, &config.http),
            (DoorKind::Grpc, &config.grpc),
            (DoorKind::Metrics, &config.metrics),
            (DoorKind::OpenAi, &config.openai),
        ];
        for (kind, listen) in configured {
            let Some(listen) = listen else { continue };
            let (address, task) = doors.open(kind, listen, DoorOptions::default(), stop_rx.clone()).await?;
            match kind {
                DoorKind::Http => addresses.http = address,
                DoorKind::Grpc => addresses.grpc = address,
                DoorKind::Metrics => addresses.metrics = address,
                DoorKind::OpenAi => addresses.openai = address,
            }
            tasks.spawn(task);
        }
        // A stop ends the model.py builds running now (a load's or an unload's waits on them):
        // the process exits without waiting for a build's time limit.
        let mut stopped = stop_tx.subscribe();
        let preparing = Arc::downgrade(&manager);
        tokio::spawn(async move {
            if stopped.wait_for(|s| *s).await.is_ok()
                && let Some(manager) = preparing.upgrade()
            {
                manager.cancel_preparations();
            }
        });
        let stopping = Arc::new(Stopping {
            stop_tx,
            drain_started: OnceLock::new(),
            lifecycle: Arc::clone(&frontend.lifecycle),
            exit_timeout: config.exit_timeout,
            abort: tokio::sync::Notify::new(),
        });
        Ok(ServerHandle { manager, addresses, stopping, tasks, tracer, doors })
    }
}

async fn bind(what: &'static str, listen: &Listen) -> Result<tokio::net::TcpListener, StartError> {
    let address = format!("{}:{}", listen.address, listen.port);
    let listener = match address.parse::<SocketAddr>() {
        Ok(addr) => tokio::net::TcpListener::bind(addr).await,
        Err(_) => tokio::net::TcpListener::bind(address.as_str()).await,
    };
    match listener {
        Ok(l) => {
            let at = l.local_addr().map_or_else(|_| address.clone(), |a| a.to_string());
            tracing::info!("Started {what} at {at}");
            Ok(l)
        }
        Err(source) => Err(StartError::Bind { what, address, source }),
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Addresses {
    http: Option<SocketAddr>,
    grpc: Option<SocketAddr>,
    metrics: Option<SocketAddr>,
    openai: Option<SocketAddr>,
}

/// A running server: in-process inference, programmatic models, its addresses, and shutdown.
pub struct ServerHandle {
    manager: Arc<ModelManager>,
    addresses: Addresses,
    stopping: Arc<Stopping>,
    tasks: tokio::task::JoinSet<Result<(), String>>,
    /// Closed (its trace file completed) once the doors have ended.
    tracer: Arc<Tracer>,
    /// What doors are built from, for those started later ([`Self::start_door`]).
    doors: Doors,
}

/// How the server ends: the doors' stop signal, and the drain before it.
struct Stopping {
    stop_tx: tokio::sync::watch::Sender<bool>,
    /// When a drain began; the exit timeout counts from there.
    drain_started: OnceLock<Instant>,
    lifecycle: Arc<Lifecycle>,
    exit_timeout: Duration,
    /// Ends the wait for open connections at once (a second signal).
    abort: tokio::sync::Notify,
}

impl Stopping {
    fn stop(&self) {
        let _ = self.stop_tx.send(true);
    }

    fn stop_now(&self) {
        self.stop();
        self.abort.notify_one();
    }

    /// The drain: readiness turns false and the doors stop taking connections at once (requests
    /// already sent on open ones are answered); requests in flight get what is left of the exit
    /// timeout, and those still running then are given up (their streams end with an error).
    async fn drain_then_stop(&self) {
        let started = *self.drain_started.get_or_init(Instant::now);
        self.lifecycle.begin_drain();
        self.stop();
        let waiting = self.lifecycle.in_flight();
        tracing::info!(
            "draining: not ready, not taking connections; waiting up to {}s (--exit-timeout-secs) for {waiting} \
             inference request(s) in flight",
            self.exit_timeout.as_secs()
        );
        if self.lifecycle.wait_idle(self.exit_timeout.saturating_sub(started.elapsed())).await > 0 {
            self.give_up();
        }
    }

    /// At the exit timeout: the requests still in flight are given up (once, whichever of the
    /// drain and [`ServerHandle::wait`] gets there first).
    fn give_up(&self) {
        let left = self.lifecycle.in_flight();
        if left > 0 && !self.lifecycle.is_abandoned() {
            tracing::warn!("{left} inference request(s) still in flight at the exit timeout; stopping anyway");
            self.lifecycle.abandon();
        }
    }

    /// What is left of the exit timeout (counted from the drain's start, or from now).
    fn time_left(&self) -> Duration {
        let started = self.drain_started.get().copied().unwrap_or_else(Instant::now);
        self.exit_timeout.saturating_sub(started.elapsed())
    }
}

impl ServerHandle {
    /// Running a model by name in-process: the path BLS calls and ensemble steps take (the doors
    /// run a request on the version the frontend resolved for it, `Frontend::infer`).
    pub fn infer(&self) -> Arc<dyn Infer> {
        Arc::clone(&self.manager) as Arc<dyn Infer>
    }

    /// Serves a model that is not a repository directory: `config` describes it (validated as a
    /// config.pbtxt would be) and `backend` creates its instances. It is served as version 1 and
    /// stays until [`Self::unload_model`]; repository polling leaves it alone. Registering the
    /// same name and version again replaces it.
    pub async fn register_model(&self, config: ModelConfig, backend: Arc<dyn Backend>) -> CoreResult<()> {
        self.register(RegisteredModel { config, version: 1, backend }).await
    }

    /// [`Self::register_model`] with any version; other registered versions of the name stay.
    pub async fn register(&self, model: RegisteredModel) -> CoreResult<()> {
        self.manager.register(model.config, model.version, model.backend).await
    }

    /// Loads (or reloads) a model from the repositories, whatever the control mode.
    pub async fn load_model(&self, name: &str) -> CoreResult<()> {
        self.manager.load(name, None).await
    }

    /// Unloads a model (registered or from a repository), as the repository extension does.
    pub async fn unload_model(&self, name: &str) -> CoreResult<()> {
        self.manager.unload(name, false).await
    }

    /// The in-process door: what HTTP and gRPC answer, as values, without a socket (the embedded
    /// Python API's way in).
    pub fn in_process(&self) -> InProcess {
        let metrics = self.doors.metrics.clone();
        InProcess::new(Arc::clone(&self.doors.frontend), Arc::new(move || crate::metrics::exposition(&metrics)))
    }

    /// Starts a door on a running server (the server's own ports are in its config). It serves
    /// until [`StartedDoor::stop`] or the server's stop; [`Self::wait`] waits for it too.
    pub async fn start_door(
        &mut self,
        kind: DoorKind,
        listen: &Listen,
        options: DoorOptions,
    ) -> Result<StartedDoor, StartError> {
        let (stop_tx, stop_rx) = self.doors.door_stop();
        let (address, task) = self.doors.open(kind, listen, options, stop_rx).await?;
        let (ended_tx, ended_rx) = tokio::sync::watch::channel(false);
        self.tasks.spawn(async move {
            let result = task.await;
            let _ = ended_tx.send(true);
            result
        });
        Ok(StartedDoor::new(address, stop_tx, ended_rx))
    }

    pub fn http_address(&self) -> Option<SocketAddr> {
        self.addresses.http
    }

    pub fn grpc_address(&self) -> Option<SocketAddr> {
        self.addresses.grpc
    }

    pub fn metrics_address(&self) -> Option<SocketAddr> {
        self.addresses.metrics
    }

    pub fn openai_address(&self) -> Option<SocketAddr> {
        self.addresses.openai
    }

    /// Asks every door to stop taking requests; [`Self::wait`] returns once they are done.
    pub fn stop(&self) {
        self.stopping.stop();
    }

    /// Something that can stop the server from elsewhere (a signal handler) while another task
    /// waits.
    pub fn stop_handle(&self) -> StopHandle {
        StopHandle(Arc::clone(&self.stopping))
    }

    /// Waits until every door has ended (after a stop, or each failing on its own). Connections
    /// still open when the exit timeout runs out (counted from the drain's start, if one ran)
    /// are dropped.
    pub async fn wait(mut self) -> Result<(), String> {
        let mut result = Ok(());
        let exit_timeout = self.stopping.exit_timeout;
        let stopping = Arc::clone(&self.stopping);
        let mut stop_seen = self.stopping.stop_tx.subscribe();
        let deadline = async move {
            let _ = stop_seen.wait_for(|s| *s).await;
            tokio::time::sleep(stopping.time_left()).await;
        };
        tokio::pin!(deadline);
        let aborting = Arc::clone(&self.stopping);
        let abort = aborting.abort.notified();
        tokio::pin!(abort);
        loop {
            tokio::select! {
                joined = self.tasks.join_next() => match joined {
                    None => break,
                    Some(joined) => {
                        if let Err(e) = joined.map_err(|e| e.to_string()).and_then(|r| r) {
                            tracing::error!("{e}");
                            result = Err(e);
                        }
                    }
                },
                () = &mut deadline => {
                    self.stopping.give_up();
                    tracing::warn!("connections still open {}s after the stop signal; exiting", exit_timeout.as_secs());
                    self.tasks.abort_all();
                    break;
                }
                () = &mut abort => {
                    tracing::warn!("stopping now: open connections are dropped");
                    self.tasks.abort_all();
                    break;
                }
            }
        }
        // Traces of requests still running are lost, as in Triton; the file is completed.
        self.tracer.close();
        result
    }
}

/// Stops a server from another task; see [`ServerHandle::stop_handle`].
#[derive(Clone)]
pub struct StopHandle(Arc<Stopping>);

impl StopHandle {
    /// Stops the doors now; requests already running get the exit timeout to finish.
    pub fn stop(&self) {
        self.0.stop();
    }

    /// Stops the doors and drops open connections without waiting (a second signal).
    pub fn stop_now(&self) {
        self.0.stop_now();
    }

    /// What SIGTERM does: readiness turns false and the doors stop taking connections at once,
    /// while requests already sent on open connections are answered; returns once no inference
    /// request is in flight or the exit timeout has passed (see [`crate::lifecycle`]).
    pub async fn drain_then_stop(&self) {
        self.0.drain_then_stop().await;
    }
}
