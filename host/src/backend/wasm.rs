//! The WebAssembly backend (`backend: "wasm"`, or a `model.wasm` in the version directory): custom
//! pre/post-processing and business logic as sandboxed components implementing `wit/model.wit`.
//!
//! Sandbox, per model, from config `parameters` (string values):
//! - `max_memory_bytes` (default 256 MiB): linear memory cap; growing past it traps.
//! - `max_execute_ms` (default 10000): wall time per `execute` (epoch interruption), and the
//!   bound on each BLS call the guest makes.
//! - `allowed_models` (default none): comma-separated models the guest may call through BLS
//!   (`*` = any).
//! - `filesystem` = `read-only`: the model's version directory, read-only, at `/model`.
//! - `clocks` = `true`: real wall and monotonic clocks (otherwise both read zero).
//!
//! No network, environment or other files are ever visible. A trap (panic, `unreachable`, time or
//! memory limit) fails only that batch's requests; the instance is then rebuilt from the
//! pre-instantiated component and re-initialised, and the model stays ready.
//!
//! Execution is synchronous on the blocking thread the instance pool runs it on; BLS calls
//! re-enter the async core through the runtime handle, which blocking threads may block on.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use bytes::Bytes;
use sha2::{Digest, Sha256};
use wasmtime::component::{Component, HasSelf, Linker, Resource, ResourceTable};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, ResourceLimiter, Store, Trap};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::{Backend, ExecRequest, InstanceContext, ModelInstance, Responder};
use crate::config::ModelConfig;
use crate::error::{CoreError, CoreResult, ErrorKind};
use crate::infer::{InferRequest, ParamValue, Parameters, RequestedOutput};
use crate::repository::ModelManager;
use crate::tensor::{DataType, Tensor};

mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "model",
        with: {
            "tessera:model/types.tensor": super::HostTensor,
            "tessera:model/types.request": super::HostRequest,
            "tessera:model/types.response-sender": super::HostSender,
            "tessera:model/host.response-stream": super::HostResponseStream,
        },
        imports: { default: trappable },
    });
}

use bindings::tessera::model::{host as wit_host, types as wit};

const EPOCH_TICK: Duration = Duration::from_millis(5);
const DEFAULT_MAX_MEMORY: usize = 256 << 20;
const DEFAULT_MAX_EXECUTE_MS: u64 = 10_000;

/// A tensor resource: the core tensor, whose bytes are shared (`Bytes`), never copied by handles.
pub struct HostTensor(Tensor);

/// A request resource handed to `execute`.
pub struct HostRequest {
    id: String,
    inputs: Vec<Tensor>,
    outputs: Vec<String>,
    parameters: Parameters,
    responder: SharedResponder,
}

/// One request's responder, shared by the request and every sender made from it, so the host can
/// close it when `execute` returns whatever handles the guest still holds. `None` once closed.
type SharedResponder = Arc<Mutex<Option<Responder>>>;

/// A decoupled request's response sender.
pub struct HostSender(SharedResponder);

/// Responses of a BLS `infer-stream` call.
pub struct HostResponseStream(crate::model::ResponseStream);

/// Engine-wide settings for Wasm models.
#[derive(Debug, Clone)]
pub struct WasmOptions {
    /// Where compiled components are cached (keyed by content hash and engine settings).
    pub cache_dir: Option<PathBuf>,
    /// Upper bound on live guest instances (sizes the pooling allocator).
    pub max_instances: u32,
}

impl Default for WasmOptions {
    fn default() -> Self {
        Self { cache_dir: default_cache_dir(), max_instances: 200 }
    }
}

fn default_cache_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .map(|d| d.join("tessera").join("wasm"))
}

pub struct WasmBackend {
    engine: Engine,
    linker: Linker<GuestState>,
    options: WasmOptions,
    /// Compiled components by content hash, shared by every instance and version.
    components: Mutex<HashMap<String, bindings::ModelPre<GuestState>>>,
    /// Set once the model manager exists: BLS calls go through it.
    manager: OnceLock<Weak<ModelManager>>,
    runtime: Option<tokio::runtime::Handle>,
    engine_error: Option<String>,
}

impl WasmBackend {
    pub fn new(options: WasmOptions) -> Self {
        let (engine, linker, engine_error) = match Self::build_engine(&options) {
            Ok((engine, linker)) => {
                // Epoch interruption needs a clock: one thread ticks the engine until it is dropped.
                let ticker = engine.weak();
                std::thread::Builder::new()
                    .name("tessera-wasm-epoch".into())
                    .spawn(move || {
                        while let Some(engine) = ticker.upgrade() {
                            engine.increment_epoch();
                            drop(engine);
                            std::thread::sleep(EPOCH_TICK);
                        }
                    })
                    .ok();
                (engine, linker, None)
            }
            Err(e) => {
                tracing::error!("failed to create the WebAssembly engine: {e}");
                let engine = Engine::default();
                let linker = Linker::new(&engine);
                (engine, linker, Some(e.to_string()))
            }
        };
        Self {
            engine,
            linker,
            options,
            components: Mutex::default(),
            manager: OnceLock::new(),
            runtime: tokio::runtime::Handle::try_current().ok(),
            engine_error,
        }
    }

    fn build_engine(options: &WasmOptions) -> wasmtime::Result<(Engine, Linker<GuestState>)> {
        let n = options.max_instances.max(1);
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(n)
            .total_core_instances(n * 16)
            .max_core_instances_per_component(32)
            .total_memories(n * 4)
            .max_memories_per_component(8)
            .total_tables(n * 16)
            .max_tables_per_component(16)
            .table_elements(100_000)
            .max_memory_size(4 << 30)
            .max_core_instance_size(16 << 20)
            .max_component_instance_size(4 << 20)
            .total_stacks(n);
        let mut config = Config::new();
        config.epoch_interruption(true);
        config.wasm_component_model(true);
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&config)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
        bindings::Model::add_to_linker::<GuestState, HasSelf<GuestState>>(&mut linker, |s| s)?;
        Ok((engine, linker))
    }

    /// Lets guests call models through the manager (BLS). Called once at startup.
    pub fn connect(&self, manager: &Arc<ModelManager>) {
        let _ = self.manager.set(Arc::downgrade(manager));
    }

    /// Compiles (or loads from the disk cache) and pre-instantiates a component.
    fn prepare(&self, path: &Path) -> CoreResult<bindings::ModelPre<GuestState>> {
        if let Some(e) = &self.engine_error {
            return Err(CoreError::unavailable(format!("WebAssembly engine unavailable: {e}")));
        }
        let bytes = std::fs::read(path).map_err(|e| CoreError::invalid_arg(format!("failed to read {}: {e}", path.display())))?;
        let key = self.cache_key(&bytes);
        if let Some(pre) = self.components.lock().ok().and_then(|c| c.get(&key).cloned()) {
            return Ok(pre);
        }
        let component = self.load_component(&bytes, &key, path)?;
        let pre = self
            .linker
            .instantiate_pre(&component)
            .and_then(bindings::ModelPre::new)
            .map_err(|e| CoreError::invalid_arg(format!("{} does not implement the tessera:model world: {e:#}", path.display())))?;
        if let Ok(mut cache) = self.components.lock() {
            cache.insert(key, pre.clone());
        }
        Ok(pre)
    }

    fn cache_key(&self, bytes: &[u8]) -> String {
        use std::hash::{Hash, Hasher};
        let mut engine_hash = std::hash::DefaultHasher::new();
        self.engine.precompile_compatibility_hash().hash(&mut engine_hash);
        let digest = Sha256::digest(bytes);
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        format!("{hex}-{:016x}", engine_hash.finish())
    }

    fn load_component(&self, bytes: &[u8], key: &str, path: &Path) -> CoreResult<Component> {
        let cached = self.options.cache_dir.as_ref().map(|d| d.join(format!("{key}.cwasm")));
        if let Some(file) = &cached
            && file.is_file()
        {
            match deserialize_cached(&self.engine, file) {
                Ok(component) => return Ok(component),
                Err(e) => tracing::warn!(file = %file.display(), "ignoring unusable compile cache entry: {e}"),
            }
        }
        let started = std::time::Instant::now();
        let component = Component::from_binary(&self.engine, bytes)
            .map_err(|e| CoreError::invalid_arg(format!("{} is not a valid WebAssembly component: {e:#}", path.display())))?;
        tracing::info!(model = %path.display(), elapsed_ms = started.elapsed().as_millis() as u64, "compiled WebAssembly component");
        if let Some(file) = &cached {
            let written = component.serialize().map_err(|e| e.to_string()).and_then(|data| write_atomically(file, &data));
            if let Err(e) = written {
                tracing::warn!(file = %file.display(), "could not write the compile cache: {e}");
            }
        }
        Ok(component)
    }
}

#[allow(unsafe_code)]
fn deserialize_cached(engine: &Engine, file: &Path) -> wasmtime::Result<Component> {
    // SAFETY: the file was produced by `Component::serialize` of an engine with the same
    // compatibility hash (it is part of the file name) and lives in the server's own cache
    // directory; wasmtime additionally checks its header and engine settings when loading.
    unsafe { Component::deserialize_file(engine, file) }
}

fn write_atomically(file: &Path, data: &[u8]) -> Result<(), String> {
    let dir = file.parent().ok_or("cache path has no directory")?;
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let tmp = dir.join(format!(".{}.tmp{}", file.file_name().and_then(|n| n.to_str()).unwrap_or("entry"), std::process::id()));
    std::fs::write(&tmp, data).map_err(|e| e.to_string())?;
    std::fs::rename(&tmp, file).map_err(|e| e.to_string())
}

impl Backend for WasmBackend {
    fn name(&self) -> &'static str {
        "wasm"
    }

    fn platforms(&self) -> &'static [&'static str] {
        &["wasm"]
    }

    fn default_model_filename(&self) -> &'static str {
        "model.wasm"
    }

    fn autocomplete(&self, _config: &mut ModelConfig, _model_path: &Path) -> CoreResult<()> {
        // A component does not describe its tensors: the config must list inputs and outputs.
        Ok(())
    }

    fn create_instance(&self, ctx: &InstanceContext<'_>) -> CoreResult<Box<dyn ModelInstance>> {
        let pre = self.prepare(ctx.model_path)?;
        let sandbox = Sandbox::from_config(ctx.config, ctx.version_dir)?;
        let shared = Arc::new(GuestShared {
            model_name: ctx.config.name.clone(),
            allowed_models: sandbox.allowed_models.clone(),
            bls_timeout: sandbox.max_execute,
            manager: self.manager.get().cloned().unwrap_or_default(),
            runtime: self.runtime.clone().or_else(|| tokio::runtime::Handle::try_current().ok()),
        });
        let args = wit::InitializeArgs {
            model_config: crate::config::to_json(ctx.config).to_string(),
            model_name: ctx.config.name.clone(),
            model_version: ctx.version.to_string(),
            model_repository: ctx.model_dir.display().to_string(),
            model_instance_kind: "CPU".into(),
            model_instance_name: ctx.instance_name.clone(),
            model_instance_device_id: "0".into(),
        };
        let decoupled = ctx.config.model_transaction_policy.as_ref().is_some_and(|p| p.decoupled);
        let mut instance = WasmInstance { engine: self.engine.clone(), pre, sandbox, shared, args, decoupled, live: None };
        instance.start()?;
        Ok(Box::new(instance))
    }
}

/// Per-model sandbox settings, read from config parameters.
#[derive(Clone)]
struct Sandbox {
    max_memory: usize,
    max_execute: Duration,
    allowed_models: AllowList,
    read_only_dir: Option<PathBuf>,
    clocks: bool,
}

#[derive(Clone, Debug, Default)]
enum AllowList {
    #[default]
    Nothing,
    Any,
    Only(Vec<String>),
}

impl AllowList {
    fn allows(&self, model: &str) -> bool {
        match self {
            AllowList::Nothing => false,
            AllowList::Any => true,
            AllowList::Only(list) => list.iter().any(|m| m == model),
        }
    }
}

impl Sandbox {
    fn from_config(config: &ModelConfig, version_dir: &Path) -> CoreResult<Self> {
        let param = |key: &str| config.parameters.get(key).map(|p| p.string_value.trim().to_string());
        let number = |key: &str, default: u64| -> CoreResult<u64> {
            match param(key) {
                None => Ok(default),
                Some(v) => v.parse::<u64>().ok().filter(|n| *n > 0).ok_or_else(|| {
                    CoreError::invalid_arg(format!("parameter '{key}' must be a positive integer, got '{v}'"))
                }),
            }
        };
        let max_memory = usize::try_from(number("max_memory_bytes", DEFAULT_MAX_MEMORY as u64)?).unwrap_or(usize::MAX);
        if max_memory > 4 << 30 {
            return Err(CoreError::invalid_arg("parameter 'max_memory_bytes' must be at most 4 GiB"));
        }
        let allowed_models = match param("allowed_models").as_deref() {
            None | Some("") => AllowList::Nothing,
            Some("*") => AllowList::Any,
            Some(list) => AllowList::Only(list.split(',').map(|m| m.trim().to_string()).filter(|m| !m.is_empty()).collect()),
        };
        let read_only_dir = match param("filesystem").as_deref() {
            None | Some("" | "none") => None,
            Some("read-only") => Some(version_dir.to_path_buf()),
            Some(other) => {
                return Err(CoreError::invalid_arg(format!(
                    "parameter 'filesystem' must be 'none' or 'read-only', got '{other}'"
                )));
            }
        };
        let clocks = match param("clocks").as_deref() {
            None | Some("" | "false") => false,
            Some("true") => true,
            Some(other) => return Err(CoreError::invalid_arg(format!("parameter 'clocks' must be true or false, got '{other}'"))),
        };
        Ok(Self {
            max_memory,
            max_execute: Duration::from_millis(number("max_execute_ms", DEFAULT_MAX_EXECUTE_MS)?),
            allowed_models,
            read_only_dir,
            clocks,
        })
    }

    fn wasi(&self) -> CoreResult<WasiCtx> {
        let mut builder = WasiCtx::builder();
        if !self.clocks {
            builder.wall_clock(FrozenClock).monotonic_clock(FrozenClock);
        }
        builder.allow_ip_name_lookup(false);
        if let Some(dir) = &self.read_only_dir {
            builder
                .preopened_dir(dir, "/model", wasmtime_wasi::FsPerms::ReadOnly)
                .map_err(|e| CoreError::internal(format!("failed to grant read-only access to {}: {e}", dir.display())))?;
        }
        Ok(builder.build())
    }
}

/// The clock a guest sees without the `clocks` grant: always zero.
struct FrozenClock;

impl wasmtime_wasi::HostWallClock for FrozenClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl wasmtime_wasi::HostMonotonicClock for FrozenClock {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }
    fn now(&self) -> u64 {
        0
    }
}

/// What every store of one model shares.
struct GuestShared {
    model_name: String,
    allowed_models: AllowList,
    bls_timeout: Duration,
    manager: Weak<ModelManager>,
    runtime: Option<tokio::runtime::Handle>,
}

/// Caps linear memory (a grow past the cap traps) and remembers the high-water mark, so an
/// instance that leaks (componentize-py leaks every `list<u8>` a guest passes to the host) is
/// recycled between calls before it hits the cap.
struct GuestLimiter {
    max_memory: usize,
    peak: usize,
}

impl ResourceLimiter for GuestLimiter {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.max_memory {
            return Err(wasmtime::Error::msg(format!(
                "linear memory would grow to {desired} bytes, beyond the model's limit of {} bytes",
                self.max_memory
            )));
        }
        self.peak = self.peak.max(desired);
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
    }
}

/// The data of one guest's store.
pub struct GuestState {
    table: ResourceTable,
    wasi: WasiCtx,
    limits: GuestLimiter,
    shared: Arc<GuestShared>,
    /// Log lines the guest wrote during the current call (kept to explain traps).
    last_log: Vec<String>,
    /// Responders of the current `execute` call, closed when it returns.
    call_responders: Vec<SharedResponder>,
}

impl WasiView for GuestState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

struct Live {
    store: Store<GuestState>,
    model: bindings::Model,
}

struct WasmInstance {
    engine: Engine,
    pre: bindings::ModelPre<GuestState>,
    sandbox: Sandbox,
    shared: Arc<GuestShared>,
    args: wit::InitializeArgs,
    decoupled: bool,
    /// `None` after a trap until the next request rebuilds it.
    live: Option<Live>,
}

impl WasmInstance {
    /// Instantiates the component in a fresh store and runs `initialize`.
    fn start(&mut self) -> CoreResult<()> {
        let state = GuestState {
            table: ResourceTable::new(),
            wasi: self.sandbox.wasi()?,
            limits: GuestLimiter { max_memory: self.sandbox.max_memory, peak: 0 },
            shared: Arc::clone(&self.shared),
            last_log: Vec::new(),
            call_responders: Vec::new(),
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limits);
        store.set_epoch_deadline(self.deadline_ticks());
        store.epoch_deadline_trap();
        let model = self
            .pre
            .instantiate(&mut store)
            .map_err(|e| CoreError::unavailable(format!("failed to instantiate WebAssembly model '{}': {e:#}", self.shared.model_name)))?;
        let initialized = model.call_initialize(&mut store, &self.args);
        match initialized {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                return Err(CoreError::new(
                    kind_from_wit(e.code),
                    format!("model '{}' initialize failed: {}", self.shared.model_name, e.message),
                ));
            }
            Err(trap) => return Err(trap_error(&self.shared.model_name, "initialize", &trap, &self.sandbox, &store.data().last_log)),
        }
        self.live = Some(Live { store, model });
        Ok(())
    }

    fn deadline_ticks(&self) -> u64 {
        (self.sandbox.max_execute.as_millis() / EPOCH_TICK.as_millis()).max(1) as u64 + 1
    }

    fn run(&mut self, batch: Vec<ExecRequest>) -> CoreResult<Vec<CoreResult<Vec<Tensor>>>> {
        if self.live.is_none() {
            self.start()?;
        }
        let ticks = self.deadline_ticks();
        let Some(live) = self.live.as_mut() else {
            return Err(CoreError::internal("instance is not running"));
        };
        let count = batch.len();
        let mut handles = Vec::with_capacity(count);
        for request in batch {
            let responder: SharedResponder = Arc::new(Mutex::new(request.responder));
            live.store.data_mut().call_responders.push(Arc::clone(&responder));
            let resource = live
                .store
                .data_mut()
                .table
                .push(HostRequest {
                    id: request.id.unwrap_or_default(),
                    inputs: request.inputs,
                    outputs: request.outputs,
                    parameters: request.parameters,
                    responder,
                })
                .map_err(|e| CoreError::internal(format!("resource table: {e}")))?;
            handles.push(resource);
        }
        live.store.data_mut().last_log.clear();
        live.store.set_epoch_deadline(ticks);
        let called = live.model.call_execute(&mut live.store, &handles);
        // The contract: when execute returns, every request's stream is final, whatever
        // request or sender handles the guest kept.
        for responder in live.store.data_mut().call_responders.drain(..) {
            if let Ok(mut r) = responder.lock() {
                r.take();
            }
        }
        let results = match called {
            Ok(results) => results,
            Err(trap) => {
                let error = trap_error(&self.shared.model_name, "execute", &trap, &self.sandbox, &live.store.data().last_log);
                // A trapped instance can never be entered again: drop it, rebuild on the next request
                // (or now, so the next request does not pay for it).
                self.live = None;
                if let Err(e) = self.start() {
                    tracing::warn!(model = self.shared.model_name.as_str(), "could not restart the instance yet: {}", e.message);
                }
                return Err(error);
            }
        };
        let high_water = live.store.data().limits.peak > self.sandbox.max_memory / 4 * 3;
        let results = self.collect(results, count);
        if high_water {
            tracing::info!(model = self.shared.model_name.as_str(), "recycling a guest instance near its memory limit");
            self.live = None;
            if let Err(e) = self.start() {
                tracing::warn!(model = self.shared.model_name.as_str(), "could not restart the instance yet: {}", e.message);
            }
        }
        results
    }

    /// Turns `execute`'s return value into per-request results, taking tensors out of the table.
    fn collect(
        &mut self,
        results: Vec<Result<Vec<Resource<HostTensor>>, wit::Error>>,
        count: usize,
    ) -> CoreResult<Vec<CoreResult<Vec<Tensor>>>> {
        let Some(live) = self.live.as_mut() else {
            return Err(CoreError::internal("instance is not running"));
        };
        let table = &mut live.store.data_mut().table;
        if self.decoupled {
            if !results.is_empty() {
                return Err(CoreError::internal(format!(
                    "decoupled model '{}' returned {} responses from execute; it must answer through response senders and return an empty list",
                    self.shared.model_name,
                    results.len()
                )));
            }
            return Ok((0..count).map(|_| Ok(Vec::new())).collect());
        }
        if results.len() != count {
            let got = results.len();
            // Drop the handles the guest returned, then fail the whole batch.
            for result in results.into_iter().flatten() {
                for tensor in result {
                    let _ = table.delete(tensor);
                }
            }
            return Err(CoreError::internal(format!(
                "model '{}' returned {got} responses for {count} requests",
                self.shared.model_name
            )));
        }
        Ok(results
            .into_iter()
            .map(|result| match result {
                Ok(tensors) => tensors
                    .into_iter()
                    .map(|t| table.delete(t).map(|t| t.0).map_err(|e| CoreError::internal(format!("bad tensor handle in response: {e}"))))
                    .collect(),
                Err(e) => Err(CoreError::new(kind_from_wit(e.code), e.message)),
            })
            .collect())
    }
}

impl ModelInstance for WasmInstance {
    fn execute(&mut self, batch: Vec<ExecRequest>) -> Vec<CoreResult<Vec<Tensor>>> {
        let count = batch.len();
        match self.run(batch) {
            Ok(results) => results,
            Err(e) => (0..count).map(|_| Err(e.clone())).collect(),
        }
    }
}

impl Drop for WasmInstance {
    fn drop(&mut self) {
        if let Some(live) = self.live.as_mut() {
            live.store.set_epoch_deadline(self.sandbox.max_execute.as_millis() as u64 / EPOCH_TICK.as_millis() as u64 + 1);
            if let Err(e) = live.model.call_finalize(&mut live.store) {
                tracing::warn!(model = self.shared.model_name.as_str(), "finalize trapped: {e}");
            }
        }
    }
}

/// Explains a trap: time limit, memory limit, or a guest panic with its last log lines.
fn trap_error(model: &str, call: &str, error: &wasmtime::Error, sandbox: &Sandbox, log: &[String]) -> CoreError {
    let trap = error.downcast_ref::<Trap>();
    let detail = match trap {
        Some(Trap::Interrupt) => format!("exceeded its time limit of {} ms (max_execute_ms)", sandbox.max_execute.as_millis()),
        Some(Trap::AllocationTooLarge) => format!("exceeded its memory limit of {} bytes (max_memory_bytes)", sandbox.max_memory),
        _ if format!("{error:#}").contains("grow") => {
            format!("exceeded its memory limit of {} bytes (max_memory_bytes): {error}", sandbox.max_memory)
        }
        Some(trap) => format!("trapped: {trap}\n{error}"),
        None => format!("trapped: {error:#}"),
    };
    let mut message = format!("WebAssembly model '{model}' {call} {detail}");
    if let Some(last) = log.last() {
        message.push_str(&format!(" (last guest log: {last})"));
    }
    CoreError::internal(message)
}

fn kind_from_wit(code: wit::ErrorCode) -> ErrorKind {
    match code {
        wit::ErrorCode::Unknown => ErrorKind::Unknown,
        wit::ErrorCode::Internal => ErrorKind::Internal,
        wit::ErrorCode::NotFound => ErrorKind::NotFound,
        wit::ErrorCode::InvalidArg => ErrorKind::InvalidArg,
        wit::ErrorCode::Unavailable => ErrorKind::Unavailable,
        wit::ErrorCode::Unsupported => ErrorKind::Unsupported,
        wit::ErrorCode::AlreadyExists => ErrorKind::AlreadyExists,
        wit::ErrorCode::Cancelled => ErrorKind::Cancelled,
    }
}

fn wit_error(e: CoreError) -> wit::Error {
    let code = match e.kind {
        ErrorKind::Unknown => wit::ErrorCode::Unknown,
        ErrorKind::Internal => wit::ErrorCode::Internal,
        ErrorKind::NotFound => wit::ErrorCode::NotFound,
        ErrorKind::InvalidArg => wit::ErrorCode::InvalidArg,
        ErrorKind::Unavailable => wit::ErrorCode::Unavailable,
        ErrorKind::Unsupported => wit::ErrorCode::Unsupported,
        ErrorKind::AlreadyExists => wit::ErrorCode::AlreadyExists,
        ErrorKind::Cancelled => wit::ErrorCode::Cancelled,
    };
    wit::Error { code, message: e.message }
}

fn datatype_to_wit(d: DataType) -> wit::DataType {
    match d {
        DataType::Bool => wit::DataType::Bool,
        DataType::Uint8 => wit::DataType::Uint8,
        DataType::Uint16 => wit::DataType::Uint16,
        DataType::Uint32 => wit::DataType::Uint32,
        DataType::Uint64 => wit::DataType::Uint64,
        DataType::Int8 => wit::DataType::Int8,
        DataType::Int16 => wit::DataType::Int16,
        DataType::Int32 => wit::DataType::Int32,
        DataType::Int64 => wit::DataType::Int64,
        DataType::Fp16 => wit::DataType::Fp16,
        DataType::Bf16 => wit::DataType::Bf16,
        DataType::Fp32 => wit::DataType::Fp32,
        DataType::Fp64 => wit::DataType::Fp64,
        DataType::Bytes => wit::DataType::Bytes,
    }
}

fn datatype_from_wit(d: wit::DataType) -> DataType {
    match d {
        wit::DataType::Bool => DataType::Bool,
        wit::DataType::Uint8 => DataType::Uint8,
        wit::DataType::Uint16 => DataType::Uint16,
        wit::DataType::Uint32 => DataType::Uint32,
        wit::DataType::Uint64 => DataType::Uint64,
        wit::DataType::Int8 => DataType::Int8,
        wit::DataType::Int16 => DataType::Int16,
        wit::DataType::Int32 => DataType::Int32,
        wit::DataType::Int64 => DataType::Int64,
        wit::DataType::Fp16 => DataType::Fp16,
        wit::DataType::Bf16 => DataType::Bf16,
        wit::DataType::Fp32 => DataType::Fp32,
        wit::DataType::Fp64 => DataType::Fp64,
        wit::DataType::Bytes => DataType::Bytes,
    }
}

fn params_to_wit(params: &Parameters) -> Vec<wit::Parameter> {
    params
        .iter()
        .map(|(key, value)| wit::Parameter {
            key: key.clone(),
            value: match value {
                ParamValue::Bool(b) => wit::ParamValue::Bool(*b),
                ParamValue::Int(i) => wit::ParamValue::Int(*i),
                ParamValue::Double(d) => wit::ParamValue::Double(*d),
                // The contract has no unsigned variant; a value above i64::MAX travels exactly as text.
                ParamValue::Uint(u) => wit::ParamValue::String(u.to_string()),
                ParamValue::String(s) => wit::ParamValue::String(s.clone()),
            },
        })
        .collect()
}

fn params_from_wit(params: Vec<wit::Parameter>) -> Parameters {
    params
        .into_iter()
        .map(|p| {
            let value = match p.value {
                wit::ParamValue::Bool(b) => ParamValue::Bool(b),
                wit::ParamValue::Int(i) => ParamValue::Int(i),
                wit::ParamValue::Double(d) => ParamValue::Double(d),
                wit::ParamValue::String(s) => ParamValue::String(s),
            };
            (p.key, value)
        })
        .collect()
}

fn table_error(e: wasmtime::component::ResourceTableError) -> wasmtime::Error {
    wasmtime::Error::msg(format!("resource table: {e}"))
}

impl GuestState {
    fn tensor(&self, handle: &Resource<HostTensor>) -> wasmtime::Result<&Tensor> {
        self.table.get(handle).map(|t| &t.0).map_err(table_error)
    }

    fn new_tensor(&mut self, tensor: Tensor) -> wasmtime::Result<Resource<HostTensor>> {
        self.table.push(HostTensor(tensor)).map_err(table_error)
    }

    /// BLS: runs `model` through the manager, blocking this (blocking-pool) thread.
    /// `call` (infer or infer_stream on the target) runs bounded by the caller's time limit.
    fn bls<T, Fut>(
        &mut self,
        model: String,
        version: Option<i64>,
        inputs: Vec<Resource<HostTensor>>,
        outputs: Vec<String>,
        parameters: Vec<wit::Parameter>,
        call: impl FnOnce(Arc<crate::model::LoadedModel>, InferRequest) -> Fut,
    ) -> wasmtime::Result<Result<T, wit::Error>>
    where
        Fut: std::future::Future<Output = CoreResult<T>>,
    {
        let shared = Arc::clone(&self.shared);
        if !shared.allowed_models.allows(&model) {
            return Ok(Err(wit_error(CoreError::new(
                ErrorKind::InvalidArg,
                format!(
                    "model '{}' is not allowed to call model '{model}' (add it to the 'allowed_models' parameter)",
                    shared.model_name
                ),
            ))));
        }
        let mut tensors = Vec::with_capacity(inputs.len());
        for handle in &inputs {
            tensors.push(self.tensor(handle)?.clone());
        }
        let (Some(manager), Some(runtime)) = (shared.manager.upgrade(), shared.runtime.clone()) else {
            return Ok(Err(wit_error(CoreError::unavailable("the server is shutting down"))));
        };
        let target = match manager.get(&model, version) {
            Ok(m) => m,
            Err(e) => return Ok(Err(wit_error(e))),
        };
        let request = InferRequest {
            model_name: model.clone(),
            model_version: version,
            id: None,
            inputs: tensors,
            outputs: outputs.into_iter().map(RequestedOutput::named).collect(),
            parameters: params_from_wit(parameters),
        };
        let timeout = shared.bls_timeout;
        let result = runtime.block_on(async move {
            tokio::time::timeout(timeout, call(target, request)).await.unwrap_or_else(|_| {
                Err(CoreError::unavailable(format!("BLS call to model '{model}' timed out after {} ms", timeout.as_millis())))
            })
        });
        Ok(result.map_err(wit_error))
    }
}

impl wit::Host for GuestState {}

impl wit::HostTensor for GuestState {
    fn create(
        &mut self,
        name: String,
        datatype: wit::DataType,
        shape: Vec<i64>,
        data: Vec<u8>,
    ) -> wasmtime::Result<Result<Resource<HostTensor>, wit::Error>> {
        match Tensor::new(name, datatype_from_wit(datatype), shape, Bytes::from(data)) {
            Ok(t) => Ok(Ok(self.new_tensor(t)?)),
            Err(e) => Ok(Err(wit_error(e))),
        }
    }

    fn name(&mut self, handle: Resource<HostTensor>) -> wasmtime::Result<String> {
        Ok(self.tensor(&handle)?.name.clone())
    }

    fn datatype(&mut self, handle: Resource<HostTensor>) -> wasmtime::Result<wit::DataType> {
        Ok(datatype_to_wit(self.tensor(&handle)?.datatype))
    }

    fn shape(&mut self, handle: Resource<HostTensor>) -> wasmtime::Result<Vec<i64>> {
        Ok(self.tensor(&handle)?.shape.clone())
    }

    fn byte_size(&mut self, handle: Resource<HostTensor>) -> wasmtime::Result<u64> {
        Ok(self.tensor(&handle)?.data.len() as u64)
    }

    fn data(&mut self, handle: Resource<HostTensor>) -> wasmtime::Result<Vec<u8>> {
        Ok(self.tensor(&handle)?.data.to_vec())
    }

    fn with_name(&mut self, handle: Resource<HostTensor>, name: String) -> wasmtime::Result<Resource<HostTensor>> {
        let mut tensor = self.tensor(&handle)?.clone();
        tensor.name = name;
        self.new_tensor(tensor)
    }

    fn drop(&mut self, handle: Resource<HostTensor>) -> wasmtime::Result<()> {
        self.table.delete(handle).map(|_| ()).map_err(table_error)
    }
}

impl wit::HostRequest for GuestState {
    fn id(&mut self, handle: Resource<HostRequest>) -> wasmtime::Result<String> {
        Ok(self.table.get(&handle).map_err(table_error)?.id.clone())
    }

    fn input(&mut self, handle: Resource<HostRequest>, name: String) -> wasmtime::Result<Option<Resource<HostTensor>>> {
        let found = self.table.get(&handle).map_err(table_error)?.inputs.iter().find(|t| t.name == name).cloned();
        found.map(|t| self.new_tensor(t)).transpose()
    }

    fn inputs(&mut self, handle: Resource<HostRequest>) -> wasmtime::Result<Vec<Resource<HostTensor>>> {
        let inputs = self.table.get(&handle).map_err(table_error)?.inputs.clone();
        inputs.into_iter().map(|t| self.new_tensor(t)).collect()
    }

    fn requested_outputs(&mut self, handle: Resource<HostRequest>) -> wasmtime::Result<Vec<String>> {
        Ok(self.table.get(&handle).map_err(table_error)?.outputs.clone())
    }

    fn parameters(&mut self, handle: Resource<HostRequest>) -> wasmtime::Result<Vec<wit::Parameter>> {
        Ok(params_to_wit(&self.table.get(&handle).map_err(table_error)?.parameters))
    }

    fn sender(&mut self, handle: Resource<HostRequest>) -> wasmtime::Result<Resource<HostSender>> {
        let responder = Arc::clone(&self.table.get(&handle).map_err(table_error)?.responder);
        self.table.push(HostSender(responder)).map_err(table_error)
    }

    fn drop(&mut self, handle: Resource<HostRequest>) -> wasmtime::Result<()> {
        self.table.delete(handle).map(|_| ()).map_err(table_error)
    }
}

impl wit::HostResponseSender for GuestState {
    fn send(&mut self, handle: Resource<HostSender>, outputs: Vec<Resource<HostTensor>>, final_: bool) -> wasmtime::Result<Result<(), wit::Error>> {
        let mut tensors = Vec::with_capacity(outputs.len());
        for t in outputs {
            tensors.push(self.table.delete(t).map_err(table_error)?.0);
        }
        let sender = self.table.get_mut(&handle).map_err(table_error)?;
        Ok(send_on(sender, Ok(tensors), final_))
    }

    fn send_error(&mut self, handle: Resource<HostSender>, error: wit::Error, final_: bool) -> wasmtime::Result<Result<(), wit::Error>> {
        let sender = self.table.get_mut(&handle).map_err(table_error)?;
        Ok(send_on(sender, Err(CoreError::new(kind_from_wit(error.code), error.message)), final_))
    }

    fn drop(&mut self, handle: Resource<HostSender>) -> wasmtime::Result<()> {
        self.table.delete(handle).map(|_| ()).map_err(table_error)
    }
}

fn send_on(sender: &mut HostSender, item: CoreResult<Vec<Tensor>>, final_: bool) -> Result<(), wit::Error> {
    let Ok(mut slot) = sender.0.lock() else {
        return Err(wit_error(CoreError::internal("response sender state is poisoned")));
    };
    let Some(tx) = slot.as_ref() else {
        return Err(wit_error(CoreError::unavailable(
            "no more responses can be sent for this request (the final response was sent, or the model is not decoupled)",
        )));
    };
    // An empty final response only carries the final flag (as Triton's repeat sends it).
    let flag_only = final_ && matches!(&item, Ok(outputs) if outputs.is_empty());
    if !flag_only {
        // A gone receiver means the caller stopped listening; that is not the guest's error.
        let _ = tx.send(super::RawResponse { outputs: item, is_final: final_ });
    }
    if final_ {
        *slot = None;
    }
    Ok(())
}

impl wit_host::Host for GuestState {
    fn log(&mut self, level: wit_host::LogLevel, message: String) -> wasmtime::Result<()> {
        let model = self.shared.model_name.as_str();
        match level {
            wit_host::LogLevel::Error => tracing::error!(model, "{message}"),
            wit_host::LogLevel::Warn => tracing::warn!(model, "{message}"),
            wit_host::LogLevel::Info => tracing::info!(model, "{message}"),
            wit_host::LogLevel::Verbose => tracing::debug!(model, "{message}"),
        }
        if self.last_log.len() >= 16 {
            self.last_log.remove(0);
        }
        self.last_log.push(message);
        Ok(())
    }

    fn infer(
        &mut self,
        model: String,
        version: Option<i64>,
        inputs: Vec<Resource<HostTensor>>,
        outputs: Vec<String>,
        parameters: Vec<wit::Parameter>,
    ) -> wasmtime::Result<Result<Vec<Resource<HostTensor>>, wit::Error>> {
        let called = self.bls(model, version, inputs, outputs, parameters, |target, request| async move {
            target.infer(request).await
        })?;
        match called {
            Ok(response) => Ok(Ok(response.outputs.into_iter().map(|t| self.new_tensor(t)).collect::<wasmtime::Result<_>>()?)),
            Err(e) => Ok(Err(e)),
        }
    }

    fn infer_stream(
        &mut self,
        model: String,
        version: Option<i64>,
        inputs: Vec<Resource<HostTensor>>,
        outputs: Vec<String>,
        parameters: Vec<wit::Parameter>,
    ) -> wasmtime::Result<Result<Resource<HostResponseStream>, wit::Error>> {
        let started = self.bls(model, version, inputs, outputs, parameters, |target, request| async move {
            target.infer_stream(request).await
        })?;
        match started {
            Ok(stream) => Ok(Ok(self.table.push(HostResponseStream(stream)).map_err(table_error)?)),
            Err(e) => Ok(Err(e)),
        }
    }
}

impl wit_host::HostResponseStream for GuestState {
    fn next(&mut self, handle: Resource<HostResponseStream>) -> wasmtime::Result<Option<Result<Vec<Resource<HostTensor>>, wit::Error>>> {
        let Some(runtime) = self.shared.runtime.clone() else {
            return Ok(None);
        };
        let timeout = self.shared.bls_timeout;
        let stream = self.table.get_mut(&handle).map_err(table_error)?;
        let item = runtime.block_on(async { tokio::time::timeout(timeout, stream.0.recv()).await });
        match item {
            Ok(None) => Ok(None),
            Ok(Some(Ok(response))) => {
                Ok(Some(Ok(response.outputs.into_iter().map(|t| self.new_tensor(t)).collect::<wasmtime::Result<_>>()?)))
            }
            Ok(Some(Err(e))) => Ok(Some(Err(wit_error(e)))),
            Err(_) => Ok(Some(Err(wit_error(CoreError::unavailable(format!(
                "no response from the streaming BLS call within {} ms",
                timeout.as_millis()
            )))))),
        }
    }

    fn drop(&mut self, handle: Resource<HostResponseStream>) -> wasmtime::Result<()> {
        self.table.delete(handle).map(|_| ()).map_err(table_error)
    }
}
