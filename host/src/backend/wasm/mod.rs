//! The WebAssembly backend (`backend: "wasm"`, or a `model.wasm` in the version directory): custom
//! pre/post-processing and business logic as sandboxed components implementing `wit/model.wit`.
//!
//! Sandbox, per model, from config `parameters` (string values):
//! - `max_memory_bytes` (default 256 MiB): linear memory cap; growing past it traps. It also
//!   bounds the host's side: the tensors held for the guest (4x, `state::held_limit`) and what
//!   one call may make the host copy (2x, `Sandbox::max_hostcall_bytes`).
//! - `max_execute_ms` (default 10000): wall time per `execute` (epoch interruption), and the
//!   bound on each BLS call the guest makes.
//! - `allowed_models` (default none): comma-separated models the guest may call through BLS
//!   (`*` = any).
//! - `filesystem` = `read-only`: the model's version directory, read-only, at `/model` (and at
//!   `/model/<version>`, where Triton's `model_repository` + `model_version` path leads).
//! - `environment_variables`: the server variables the guest sees, among those the operator
//!   grants with `--guest-env` (`sandbox::GuestEnv`); none without both.
//! - `clocks` = `true`: real wall and monotonic clocks (otherwise both read zero).
//! - `max_async_requests` (default 64, at most 1024): for a decoupled model, how many requests
//!   one instance runs at once in `async def execute` (see `adopt`).
//! - `config.<key>`: a value the guest reads through wasi:config (`config_store`), beside the
//!   secrets the operator grants the model (`--guest-secrets`, `secrets`).
//! - `keyvalue` (`none`, `memory`, `persistent`) and `keyvalue_max_bytes`: a key-value store
//!   through wasi:keyvalue (`keyvalue`).
//! - `isolation` = `fresh`: every execution in a new instance (`instance`); `reuse` by default.
//!
//! No network or other files are ever visible, nor any environment variable not granted so. A
//! trap (panic, `unreachable`, time or memory limit) fails only that batch's requests; the
//! instance is then rebuilt from the pre-instantiated component and re-initialised, and the
//! model stays ready.
//!
//! Execution is synchronous on the thread the instance pool runs it on (see `crate::execution`);
//! BLS calls re-enter the async core through the runtime handle. An instance runs one call at a
//! time; a decoupled model's call may take in requests that arrive while it runs, which its
//! guest's event loop runs concurrently (Triton's `async def execute`; `adopt`), each request
//! ending, and answering its caller, on its own.
//!
//! Files, shaped like wasmtime-wasi: `bindings` (what wasmtime generates from `wit/`, and the
//! short names `wit` and `wit_host` every file imports from there); `resources` (the host's side
//! of the guest's resources, which `bindings` maps them to); `state`
//! (the store's data in parts by concern, and the views each WIT interface is implemented on,
//! projected in `engine`'s `add_to_linker` calls); one file per interface or resource: `tensor`,
//! `request`, `sender` (interface `types`), `host` and `bls` (interface `host`: logging, guests
//! calling models), `nn` (the standard wasi:nn interfaces over served models), `clocks` (wasi
//! timers that end by the time limit); `engine`, `settings`, `cache` and `compile` (the engine,
//! its settings, the compile cache, compiling in a process of its own); `sandbox` (per-model
//! limits and grants); `instance` and `live` (one guest instance's life, and the live set that
//! bounds them); `outlet` (a decoupled request's buffered responses); `adopt` (requests that
//! join a decoupled model's running call: WIT `host.adopt`, `wait`, `finish`); `convert` (core types <->
//! WIT types); `pack` (the tensor pack of `execute-by-value`); `autocomplete` (config completion);
//! `grants` (what a model's guests may reach), `config_store` and `secrets` (wasi:config: config
//! values and the operator's secrets),
//! `keyvalue` and `kv_store` (wasi:keyvalue: a store per model, apart per tenant; see
//! docs/capabilities.md);
//! `options` ([`WasmOptions`]) and `timing` (how executions are timed). Files import their
//! siblings, never this one.

mod adopt;
mod autocomplete;
mod bls;
mod cache;
mod clocks;
mod compile;
mod config_store;
mod convert;
mod engine;
mod functions;
mod grants;
mod host;
mod instance;
mod keyvalue;
mod kv_store;
mod live;
mod nn;
mod options;
mod outlet;
pub(crate) mod pack;
mod request;
mod resources;
mod sandbox;
mod secrets;
mod sender;
mod settings;
mod state;
mod telemetry;
mod tensor;
#[cfg(test)]
mod test_support;
mod timing;

use std::path::Path;
use std::sync::{Arc, OnceLock, Weak};

use wasmtime::Engine;
use wasmtime::component::Linker;

use super::{Backend, BackendKind, InstanceContext, ModelInstance};
use crate::config::ModelConfig;
use crate::error::{CoreError, CoreResult};
use crate::infer::Infer;
use cache::CompileCache;
pub use compile::{Compiler, CompilerProcess, compile_component_main};
pub use functions::FunctionCache;
use instance::{ComponentSource, InstanceParts, WasmInstance};
pub use keyvalue::KeyValueOptions;
use live::LiveSet;
pub(crate) use sandbox::AllowList;
pub use sandbox::GuestEnv;
use sandbox::Sandbox;
pub use secrets::GuestSecrets;
use state::{GuestShared, GuestState};

/// The bindings wasmtime generates from wit/ (world `model`).
mod bindings;

use bindings::wit;
pub use options::WasmOptions;
pub(crate) use options::default_cache_dir;
use timing::ExecutionClock;

pub struct WasmBackend {
    engine: Engine,
    linker: Arc<Linker<GuestState>>,
    /// Compiled components, shared by every instance and version.
    components: Arc<CompileCache>,
    /// Which instances hold a store (and a pooling-allocator slot) now.
    live_set: Arc<LiveSet<instance::Live>>,
    /// Set once the model manager exists: BLS calls go through it.
    infer: OnceLock<Weak<dyn Infer>>,
    runtime: Option<tokio::runtime::Handle>,
    /// Why the engine could not be built; every model load then fails with it.
    engine_error: Option<String>,
    /// Where guests' own metrics go, once the server has set it.
    custom_metrics: OnceLock<Arc<crate::stats::custom::CustomMetrics>>,
    /// The operator's grant of environment variables (`--guest-env`).
    guest_env: GuestEnv,
    /// The operator's secrets (`--guest-secrets`), read again at each load.
    guest_secrets: secrets::GuestSecrets,
    /// The operator's bounds on key-value stores, and the stores open now.
    keyvalue: (keyvalue::KeyValueOptions, kv_store::KeyValueStores),
}

impl WasmBackend {
    pub fn new(options: WasmOptions) -> Self {
        let (engine, linker, engine_error) = engine::build(&options);
        Self {
            engine,
            linker: Arc::new(linker),
            components: Arc::new(CompileCache::new(options.cache_dir, options.cache_max_bytes, options.compiler)),
            live_set: LiveSet::new(options.max_instances, options.idle_timeout),
            infer: OnceLock::new(),
            runtime: tokio::runtime::Handle::try_current().ok(),
            engine_error,
            custom_metrics: OnceLock::new(),
            guest_env: options.guest_env,
            guest_secrets: options.guest_secrets,
            keyvalue: (options.keyvalue, kv_store::KeyValueStores::default()),
        }
    }

    /// Triton's auto-complete by the guest itself: the config the component at `component`
    /// completes `config` to (see `autocomplete`), or `None` when it takes no part in it.
    pub fn auto_complete(
        &self,
        component: &Path,
        config: &ModelConfig,
        version_dir: &Path,
    ) -> CoreResult<Option<ModelConfig>> {
        let (_, pre) = self.prepare(component)?;
        autocomplete::complete(&pre, config, version_dir)
    }

    /// Compiles the component at `component` into the compile cache, as a load would.
    pub fn precompile(&self, component: &Path) -> CoreResult<()> {
        self.prepare(component).map(drop)
    }

    /// The component at `path`, compiled (or from the cache) and pre-instantiated, with its
    /// cache key; every use fails with the reason when the engine could not be built.
    fn prepare(&self, path: &Path) -> CoreResult<(String, cache::Prepared)> {
        if let Some(e) = &self.engine_error {
            return Err(CoreError::unavailable(format!("WebAssembly engine unavailable: {e}")));
        }
        self.components.prepare(&self.engine, &self.linker, path)
    }

    /// [`Self::prepare`] for a sealed component's plaintext: compiled without the disk caches.
    fn prepare_sealed(&self, bytes: &[u8], path: &Path) -> CoreResult<(String, cache::Prepared)> {
        if let Some(e) = &self.engine_error {
            return Err(CoreError::unavailable(format!("WebAssembly engine unavailable: {e}")));
        }
        self.components.prepare_sealed(&self.engine, &self.linker, bytes, path)
    }

    /// Lets guests call models (BLS). Called once at startup; a `Weak` so the backend does not
    /// keep the model manager (which owns the backends) alive.
    pub fn connect(&self, infer: Weak<dyn Infer>) {
        let _ = self.infer.set(infer);
    }

    /// Where guests' own metrics (WIT interface `telemetry`) go: the registry `/metrics` renders.
    pub fn set_custom_metrics(&self, metrics: Arc<crate::stats::custom::CustomMetrics>) {
        let _ = self.custom_metrics.set(metrics);
    }
}

impl Backend for WasmBackend {
    fn kind(&self) -> BackendKind {
        BackendKind { name: "wasm", platforms: &["wasm"], default_model_filename: "model.wasm" }
    }

    /// A guest does not touch the GPU itself; a GPU instance learns its device id in `initialize`
    /// (to pick GPU models it calls through BLS), as Triton's Python models do.
    fn gpu_support(&self) -> Result<(), String> {
        Ok(())
    }

    fn autocomplete(&self, _config: &mut ModelConfig, _model_path: &Path) -> CoreResult<()> {
        // A component does not describe its tensors: the config must list inputs and outputs.
        Ok(())
    }

    fn create_instance(&self, ctx: &InstanceContext<'_>) -> CoreResult<Box<dyn ModelInstance>> {
        let (key, pre) = match ctx.model_plaintext {
            Some(bytes) => self.prepare_sealed(bytes, ctx.model_path)?,
            None => self.prepare(ctx.model_path)?,
        };
        let mut sandbox = Sandbox::from_config(ctx.config, ctx.version_dir)?;
        sandbox.grant_env(&self.guest_env)?;
        let capabilities = grants::Capabilities {
            config: grants::ConfigValues::for_model(ctx.config, &self.guest_secrets)?,
            keyvalue: keyvalue::grant(ctx.config, &self.keyvalue.0, &self.keyvalue.1)?,
        };
        let shared = Arc::new(GuestShared {
            model_name: ctx.config.name.clone(),
            allowed_models: sandbox.allowed_models.clone(),
            bls_timeout: sandbox.max_execute,
            infer: self.infer.get().cloned(),
            runtime: self.runtime.clone().or_else(|| tokio::runtime::Handle::try_current().ok()),
            clock: ExecutionClock::for_quota(sandbox.max_cpu_per_second),
            telemetry: state::GuestTelemetry {
                metrics: self.custom_metrics.get().cloned(),
                model_version: ctx.version,
            },
            capabilities,
        });
        let args = wit::InitializeArgs {
            model_config: crate::config::to_json(ctx.config).to_string(),
            model_name: ctx.config.name.clone(),
            model_version: ctx.version.to_string(),
            model_repository: ctx.model_dir.display().to_string(),
            model_instance_kind: ctx.device.kind().into(),
            model_instance_name: ctx.instance_name.clone(),
            model_instance_device_id: ctx.device.id().to_string(),
        };
        let decoupled = ctx.config.model_transaction_policy.as_ref().is_some_and(|p| p.decoupled);
        let parts = InstanceParts {
            engine: self.engine.clone(),
            pre,
            component: ComponentSource {
                cache: Arc::clone(&self.components),
                linker: Arc::clone(&self.linker),
                key,
                path: ctx.model_path.to_path_buf(),
            },
            live_set: Arc::clone(&self.live_set),
            stats: Arc::clone(ctx.stats),
            max_async_requests: adopt::max_async_requests(ctx.config)?,
            // A sealed component is never on disk to load again after an eviction.
            pin: ctx.model_plaintext.is_some(),
        };
        let instance = WasmInstance::start(parts, sandbox, shared, args, decoupled)?;
        Ok(Box::new(instance))
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::{EMPTY_COMPONENT, TempDir};
    use super::*;
    use crate::error::ErrorKind;
    use crate::infer::{InferFuture, InferRequest, InferResponse, ResponseStream};

    fn backend() -> WasmBackend {
        WasmBackend::new(WasmOptions { cache_dir: None, max_instances: 1, ..WasmOptions::default() })
    }

    fn create(backend: &WasmBackend, dir: &Path) -> CoreResult<Box<dyn ModelInstance>> {
        let config = sandbox::tests::config(&[]);
        let version_dir = dir.join("1");
        let model_path = version_dir.join("model.wasm");
        let ctx = InstanceContext {
            config: &config,
            model_dir: dir,
            version_dir: &version_dir,
            model_path: &model_path,
            model_plaintext: None,
            version: 1,
            instance_name: "guest_0".into(),
            device: Default::default(),
            stats: &Arc::default(),
        };
        backend.create_instance(&ctx)
    }

    fn error(result: CoreResult<Box<dyn ModelInstance>>) -> crate::error::CoreError {
        match result {
            Ok(_) => panic!("creating the instance must fail"),
            Err(e) => e,
        }
    }

    #[test]
    fn describes_itself() {
        let b = backend();
        assert_eq!(b.name(), "wasm");
        assert_eq!(b.platforms(), &["wasm"]);
        assert_eq!(b.platform(), "wasm");
        assert_eq!(b.default_model_filename(), "model.wasm");
        let mut config = sandbox::tests::config(&[("clocks", "true")]);
        let before = config.clone();
        b.autocomplete(&mut config, Path::new("/nonexistent/model.wasm")).expect("autocomplete");
        assert_eq!(config, before, "a component does not describe its tensors");
    }

    #[test]
    fn reports_a_missing_or_incomplete_component() {
        let b = backend();
        let tmp = TempDir::new("backend");
        let e = error(create(&b, &tmp.0));
        assert_eq!(e.kind, ErrorKind::InvalidArg);
        assert!(e.message.starts_with("failed to read "), "{}", e.message);

        std::fs::create_dir_all(tmp.0.join("1")).expect("version dir");
        std::fs::write(tmp.0.join("1").join("model.wasm"), EMPTY_COMPONENT).expect("write");
        let e = error(create(&b, &tmp.0));
        assert!(e.message.contains("does not implement the tessera:model world"), "{}", e.message);
    }

    #[test]
    fn an_engine_that_failed_fails_every_load() {
        let mut b = backend();
        b.engine_error = Some("no virtual memory".into());
        let tmp = TempDir::new("engine-error");
        let e = error(create(&b, &tmp.0));
        assert_eq!(e.kind, ErrorKind::Unavailable);
        assert_eq!(e.message, "WebAssembly engine unavailable: no virtual memory");
    }

    struct Nothing;

    impl Infer for Nothing {
        fn infer(&self, _request: InferRequest) -> InferFuture<'_, InferResponse> {
            Box::pin(async { Err(CoreError::internal("unused")) })
        }
        fn infer_stream(&self, _request: InferRequest) -> InferFuture<'_, ResponseStream> {
            Box::pin(async { Err(CoreError::internal("unused")) })
        }
    }

    #[test]
    fn connect_holds_the_first_target_weakly() {
        let b = backend();
        assert!(b.infer.get().is_none());
        let first: Arc<dyn Infer> = Arc::new(Nothing);
        let second: Arc<dyn Infer> = Arc::new(Nothing);
        b.connect(Arc::downgrade(&first));
        b.connect(Arc::downgrade(&second));
        let held = b.infer.get().and_then(Weak::upgrade).expect("connected");
        assert!(Arc::ptr_eq(&held, &first));
        drop((held, first));
        assert!(b.infer.get().and_then(Weak::upgrade).is_none(), "the backend does not keep it alive");
    }
}
