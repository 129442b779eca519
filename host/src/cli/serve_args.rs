//! The flags of `tessera serve` (Triton's names for everything it supports) and the server
//! configuration they make.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::values::{
    default_connection_threads, default_max_connections, parse_bool, parse_byte_size, parse_grpc_infer_threads,
    parse_max_input_size, parse_response_pool,
};
use crate::backend::python::PythonOptions;
use crate::backend::wasm::{GuestEnv, GuestSecrets, KeyValueOptions, WasmOptions};
use crate::grpc::{GrpcOptions, GrpcTls};
use crate::http::{ConnectionLimits, HttpTls};
use crate::repository::ControlMode;
use crate::restricted::Restrictions;
use crate::scheduler::rate_limit::ResourceOverride;
use crate::server::logging::LogFlags;
use crate::server::{Listen, ServerConfig};

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Path to a model repository; repeat for several.
    #[arg(long = "model-repository", visible_alias = "model-store", required = true, env = "TESSERA_MODEL_REPOSITORY")]
    pub model_repository: Vec<PathBuf>,

    /// Address the HTTP server binds.
    #[arg(long, default_value = "0.0.0.0", env = "TESSERA_HTTP_ADDRESS")]
    pub http_address: String,
    #[arg(long, default_value_t = 8000, env = "TESSERA_HTTP_PORT")]
    pub http_port: u16,
    #[arg(long, default_value = "true", value_parser = parse_bool, action = clap::ArgAction::Set)]
    pub allow_http: bool,
    /// Largest request body accepted, after decompression (Triton's default: 64 MiB).
    #[arg(long, default_value = "67108864", value_parser = parse_max_input_size)]
    pub http_max_input_size: usize,
    /// Server-wide budget of request bytes held at once by both doors (HTTP bodies and gRPC
    /// messages as received, plus what decompression and decoding make of them); a request that
    /// does not fit is refused with 503 / UNAVAILABLE, and a gRPC message larger than the whole
    /// budget can never be served. Default: 1 GiB, or 4x --http-max-input-size when that is larger.
    #[arg(long, value_parser = parse_byte_size, env = "TESSERA_MAX_INFLIGHT_REQUEST_BYTES")]
    pub max_inflight_request_bytes: Option<usize>,
    /// Most HTTP connections open at once; a client beyond them is answered 503 and closed.
    /// Default: 1024, or a third of the process's open-file limit when that is lower.
    #[arg(long, env = "TESSERA_HTTP_MAX_CONNECTIONS")]
    pub http_max_connections: Option<usize>,
    /// Seconds a client has to send a request's whole header once its first byte arrives; also how
    /// long a new gRPC connection may stay silent before its first bytes.
    #[arg(long, default_value_t = 30)]
    pub http_header_read_timeout: u64,
    /// Seconds a client has to send a request's whole body once its header arrived.
    #[arg(long, default_value_t = 300)]
    pub http_body_read_timeout: u64,
    /// Seconds an HTTP connection may stay open with no request in progress and no traffic.
    #[arg(long, default_value_t = 120)]
    pub http_keepalive_timeout: u64,
    /// Triton's restricted APIs: `<api-list>:<key>=<value>` (repeatable). The listed categories
    /// (health, metadata, inference, shared-memory, model-config, model-repository, statistics,
    /// trace, logging) answer only requests with header `<key>: <value>`, others get 403.
    #[arg(long)]
    pub http_restricted_api: Vec<String>,
    /// Threads that run HTTP and gRPC connections, each connection staying on one (default: one
    /// per CPU the process may use; 0, or a single CPU: the server's shared runtime runs them).
    /// Triton's `--http-thread-count` is the same flag.
    #[arg(long = "connection-thread-count", alias = "http-thread-count", env = "TESSERA_CONNECTION_THREAD_COUNT")]
    pub connection_thread_count: Option<usize>,
    /// Lets clients register system and CUDA shared memory for inputs and outputs (Triton 2.7x's
    /// flag; off by default, as there).
    #[arg(long, default_value = "false", value_parser = parse_bool, action = clap::ArgAction::Set)]
    pub allow_client_shm: bool,
    /// Turns off every fast path of request execution (inline and in-place executions, the
    /// batcher's shortcut, connection threads, repolls), for debugging: each request is queued
    /// and run on a blocking thread. Answers are the same, at more CPU per request. Process-wide.
    #[arg(long, env = "TESSERA_NO_FAST_PATHS")]
    pub no_fast_paths: bool,

    /// Request tracing, as Triton: `<setting>=<value>` (`mode`, `level`, `rate`, `count`) or
    /// `<mode>,<setting>=<value>` (`triton,file=`, `triton,log-frequency=`, `opentelemetry,...`).
    /// Repeatable.
    #[arg(long)]
    pub trace_config: Vec<String>,
    /// Deprecated as in Triton: `--trace-config triton,file=`.
    #[arg(long)]
    pub trace_file: Option<String>,
    /// Deprecated as in Triton: `--trace-config level=`.
    #[arg(long)]
    pub trace_level: Vec<String>,
    /// Deprecated as in Triton: `--trace-config rate=`.
    #[arg(long)]
    pub trace_rate: Option<String>,
    /// Deprecated as in Triton: `--trace-config count=`.
    #[arg(long)]
    pub trace_count: Option<String>,
    /// Deprecated as in Triton: `--trace-config triton,log-frequency=`.
    #[arg(long)]
    pub trace_log_frequency: Option<String>,

    /// Address the gRPC server binds.
    #[arg(long, default_value = "0.0.0.0", env = "TESSERA_GRPC_ADDRESS")]
    pub grpc_address: String,
    #[arg(long, default_value_t = 8001, env = "TESSERA_GRPC_PORT")]
    pub grpc_port: u16,
    #[arg(long, default_value = "true", value_parser = parse_bool, action = clap::ArgAction::Set)]
    pub allow_grpc: bool,
    /// Largest gRPC message received or sent, in bytes (Triton's fixed limit: INT32_MAX).
    #[arg(long, default_value = "2147483647", value_parser = parse_byte_size)]
    pub grpc_max_message_size: usize,
    /// Compression of infer responses for clients that accept it: none, low (gzip), medium or
    /// high (deflate), as Triton's gRPC core chooses; one compression level for all.
    #[arg(long, default_value = "none", value_parser = ["none", "low", "medium", "high"])]
    pub grpc_infer_response_compression_level: String,
    /// Milliseconds between HTTP/2 keepalive pings.
    #[arg(long, default_value_t = 7_200_000)]
    pub grpc_keepalive_time: u64,
    /// Milliseconds to wait for a keepalive ping's acknowledgement before closing the connection.
    #[arg(long, default_value_t = 20_000)]
    pub grpc_keepalive_timeout: u64,
    /// Accepted for compatibility with Triton command lines (tonic answers pings without calls).
    #[arg(long, default_value = "false", value_parser = parse_bool, action = clap::ArgAction::Set)]
    pub grpc_keepalive_permit_without_calls: bool,
    /// Milliseconds a gRPC connection may have no call in flight before it is closed gracefully
    /// (GOAWAY: its client reconnects at its next call); 0: never.
    #[arg(long, default_value_t = 300_000)]
    pub grpc_max_connection_idle: u64,
    /// Accepted for compatibility with Triton command lines.
    #[arg(long)]
    pub grpc_http2_max_pings_without_data: Option<u64>,
    /// Accepted for compatibility with Triton command lines.
    #[arg(long)]
    pub grpc_http2_min_recv_ping_interval_without_data: Option<u64>,
    /// Accepted for compatibility with Triton command lines.
    #[arg(long)]
    pub grpc_http2_max_ping_strikes: Option<u64>,
    /// Accepted for compatibility with Triton command lines (responses are not pooled).
    #[arg(long)]
    pub grpc_infer_allocation_pool_size: Option<u64>,
    /// Triton 2.7x's gRPC handler threads (2 to 128, checked as Triton checks it). Tessera's gRPC
    /// handlers run on the server's runtime threads, so the count changes nothing else.
    #[arg(long, value_parser = parse_grpc_infer_threads)]
    pub grpc_infer_thread_count: Option<u32>,
    /// The most responses a gRPC stream holds for its client at once (Triton 2.7x: the response
    /// objects in the response queue); past it, the stream's requests wait. Default 256.
    #[arg(long, value_parser = parse_response_pool)]
    pub grpc_max_response_pool_size: Option<usize>,
    /// Triton 2.7x's CUDA peer access between GPUs; accepted (Tessera copies between devices
    /// through the host).
    #[arg(long, value_parser = parse_bool, action = clap::ArgAction::Set)]
    pub enable_peer_access: Option<bool>,
    /// Most gRPC connections open at once; a connection beyond them is closed at once (its
    /// client fails with UNAVAILABLE). Default: as --http-max-connections.
    #[arg(long, env = "TESSERA_GRPC_MAX_CONNECTIONS")]
    pub grpc_max_connections: Option<usize>,
    /// Serve gRPC over TLS (rustls) with `--grpc-server-cert` and `--grpc-server-key`.
    #[arg(long, default_value = "false", value_parser = parse_bool, action = clap::ArgAction::Set)]
    pub grpc_use_ssl: bool,
    /// TLS that also requires a client certificate signed by `--grpc-root-cert` (implies
    /// `--grpc-use-ssl`, as in Triton).
    #[arg(long, default_value = "false", value_parser = parse_bool, action = clap::ArgAction::Set)]
    pub grpc_use_ssl_mutual: bool,
    /// PEM file with the server's certificate chain.
    #[arg(long)]
    pub grpc_server_cert: Option<PathBuf>,
    /// PEM file with the server's private key.
    #[arg(long)]
    pub grpc_server_key: Option<PathBuf>,
    /// PEM file with the certificate authorities that client certificates must chain to.
    #[arg(long)]
    pub grpc_root_cert: Option<PathBuf>,
    /// Serve the HTTP port over TLS (HTTPS) with `--http-server-cert` and `--http-server-key`;
    /// with `--http-root-cert`, client certificates are verified against it (and can name a
    /// tenant in `--tenants`). Tessera's own flags: Triton's HTTP is plain text.
    #[arg(long, default_value = "false", value_parser = parse_bool, action = clap::ArgAction::Set)]
    pub http_use_ssl: bool,
    /// HTTPS that requires a client certificate signed by `--http-root-cert` (implies
    /// `--http-use-ssl`).
    #[arg(long, default_value = "false", value_parser = parse_bool, action = clap::ArgAction::Set)]
    pub http_use_ssl_mutual: bool,
    /// PEM file with the HTTP port's certificate chain.
    #[arg(long)]
    pub http_server_cert: Option<PathBuf>,
    /// PEM file with the HTTP port's private key.
    #[arg(long)]
    pub http_server_key: Option<PathBuf>,
    /// PEM file with the authorities client certificates on the HTTP port must chain to.
    #[arg(long)]
    pub http_root_cert: Option<PathBuf>,
    /// Tenants: API keys and client certificates, each tenant's models, roles, weight, rate and
    /// cap (TOML; docs/tenants.md). Watched: changes apply without a restart.
    #[arg(long, env = "TESSERA_TENANTS")]
    pub tenants: Option<PathBuf>,
    /// Request headers whose name matches this regular expression (case-insensitive unless it
    /// starts `(?-i)`) become string parameters of the inference request, as in Triton.
    #[arg(long)]
    pub http_header_forward_pattern: Option<String>,
    /// gRPC metadata whose key matches this regular expression become request parameters.
    #[arg(long)]
    pub grpc_header_forward_pattern: Option<String>,
    /// Triton's restricted protocols: `<api-list>:<key>=<value>` (repeatable). The listed
    /// categories (health, metadata, inference, shared-memory, model-config, model-repository,
    /// statistics, trace, logging) answer only calls with metadata `triton-grpc-protocol-<key>:
    /// <value>`.
    #[arg(long)]
    pub grpc_restricted_protocol: Vec<String>,

    /// Address of the Prometheus metrics endpoint (`GET /metrics`).
    #[arg(long, default_value = "0.0.0.0", env = "TESSERA_METRICS_ADDRESS")]
    pub metrics_address: String,
    #[arg(long, default_value_t = 8002, env = "TESSERA_METRICS_PORT")]
    pub metrics_port: u16,
    #[arg(long, default_value = "true", value_parser = parse_bool, action = clap::ArgAction::Set)]
    pub allow_metrics: bool,
    /// OpenAI's API (`/v1`, docs/openai.md) on a port of its own too, besides the HTTP port
    /// (Triton's OpenAI frontend listens on 9000); none unless given.
    #[arg(long, env = "TESSERA_OPENAI_PORT")]
    pub openai_port: Option<u16>,
    /// Address of the `/v1` port.
    #[arg(long, default_value = "0.0.0.0", env = "TESSERA_OPENAI_ADDRESS")]
    pub openai_address: String,
    /// nv_cpu_utilization and nv_cpu_memory_* gauges.
    #[arg(long, default_value = "true", value_parser = parse_bool, action = clap::ArgAction::Set)]
    pub allow_cpu_metrics: bool,
    /// nv_gpu_utilization, nv_gpu_memory_*, nv_gpu_power_* and nv_energy_consumption gauges,
    /// read from NVML (absent where there is no NVML library or no GPU).
    #[arg(long, default_value = "true", value_parser = parse_bool, action = clap::ArgAction::Set)]
    pub allow_gpu_metrics: bool,
    /// Milliseconds between samples of the CPU and memory gauges.
    #[arg(long, default_value_t = 2000)]
    pub metrics_interval_ms: u64,
    /// Triton's metrics settings, `<setting>=<value>` (repeatable): `counter_latencies`,
    /// `histogram_latencies`, `summary_latencies`, `summary_quantiles=<q>:<error>,...`, and
    /// Tessera's `summary_max_age=<seconds>` and `phase_histograms` (see docs/metrics.md).
    #[arg(long)]
    pub metrics_config: Vec<String>,

    /// A model whose instances fail this many executions in a row (traps, an instance that
    /// cannot start again, backend errors) reports not ready until one works again; with strict
    /// readiness the server follows. 0: never. A config parameter `unhealthy_after_failures`
    /// overrides it per model.
    #[arg(long, default_value_t = crate::server::DEFAULT_UNHEALTHY_AFTER)]
    pub model_unhealthy_after: u32,

    #[arg(long, value_enum, default_value = "none", env = "TESSERA_MODEL_CONTROL_MODE")]
    pub model_control_mode: ControlMode,
    /// Model to load at startup in explicit mode; `*` loads all. Repeatable.
    #[arg(long)]
    pub load_model: Vec<String>,
    /// Seconds between repository scans in poll mode.
    #[arg(long, default_value_t = 15)]
    pub repository_poll_secs: u64,
    /// When true, every model needs a complete config.pbtxt (no auto-complete from the model file).
    #[arg(long, default_value = "false", value_parser = parse_bool, action = clap::ArgAction::Set)]
    pub strict_model_config: bool,
    /// Triton's newer spelling of --strict-model-config=true.
    #[arg(long)]
    pub disable_auto_complete_config: bool,
    /// When true, /v2/health/ready is 200 only if every loaded model is ready.
    #[arg(long, default_value = "true", value_parser = parse_bool, action = clap::ArgAction::Set)]
    pub strict_readiness: bool,
    /// A model that must have a ready version for the server to be ready (/v2/health/ready),
    /// whatever --strict-readiness says; repeatable. It is not loaded by being named here.
    #[arg(long = "required-model", env = "TESSERA_REQUIRED_MODELS", value_delimiter = ',')]
    pub required_models: Vec<String>,
    /// Triton's SageMaker and Vertex AI endpoints are not implemented: `false` (what ModelMesh's
    /// Triton runtime passes) is accepted, `true` refused at startup.
    #[arg(long, default_value = "false", value_parser = parse_bool, action = clap::ArgAction::Set)]
    pub allow_sagemaker: bool,
    #[arg(long, default_value = "false", value_parser = parse_bool, action = clap::ArgAction::Set)]
    pub allow_vertex_ai: bool,
    /// Exit at startup if any model fails to load (Triton's default: true).
    #[arg(long, default_value = "true", value_parser = parse_bool, action = clap::ArgAction::Set)]
    pub exit_on_error: bool,

    /// Seconds open connections get to finish after SIGINT/SIGTERM before the server exits anyway.
    #[arg(long, default_value_t = 30)]
    pub exit_timeout_secs: u64,

    /// Server identifier reported by server metadata (default: "triton" when invoked as
    /// `tritonserver`, else "tessera").
    #[arg(long)]
    pub id: Option<String>,

    /// Verbose logging level; > 0 turns on debug logs.
    #[arg(long, default_value_t = 0)]
    pub log_verbose: u32,
    #[arg(long, default_value = "true", value_parser = parse_bool, action = clap::ArgAction::Set)]
    pub log_info: bool,
    #[arg(long, default_value = "true", value_parser = parse_bool, action = clap::ArgAction::Set)]
    pub log_warning: bool,
    #[arg(long, default_value = "true", value_parser = parse_bool, action = clap::ArgAction::Set)]
    pub log_error: bool,
    /// Log line format: `default` and `ISO8601` as Triton's, or `json` (one object per line).
    #[arg(long, default_value = "default", value_parser = ["default", "ISO8601", "json"])]
    pub log_format: String,
    /// Logs one line per inference request (door, model, version, request id, status, duration).
    #[arg(long, default_value = "false", value_parser = parse_bool, action = clap::ArgAction::Set)]
    pub log_requests: bool,

    /// Path of libonnxruntime.so; by default it is looked for next to the binary, in the
    /// workspace's .venv (scripts/setup.sh) and in system library directories.
    #[arg(long, env = "TESSERA_ONNXRUNTIME_LIBRARY")]
    pub onnxruntime_library: Option<PathBuf>,

    /// Directory for compiled WebAssembly components (default: ~/.cache/tessera/wasm); a restart
    /// with a warm cache skips compilation.
    #[arg(long, env = "TESSERA_WASM_CACHE_DIR")]
    pub wasm_cache_dir: Option<PathBuf>,
    /// Size cap of the compiled-component cache, in MiB (0: none): past it the least recently
    /// used entries are deleted (`tessera_disk_cache_*` on /metrics).
    #[arg(long, env = "TESSERA_WASM_CACHE_MAX_MIB", default_value_t = 4096)]
    pub wasm_cache_max_mib: u64,
    /// Most WebAssembly model instances live at once (sizes the pooling allocator). A server may
    /// hold more Wasm models than this: past it, the least recently used idle instance is
    /// evicted and rebuilt on its model's next request.
    #[arg(long, env = "TESSERA_WASM_MAX_INSTANCES", default_value_t = 1000)]
    pub wasm_max_instances: u32,
    /// Evict a live WebAssembly instance after this many seconds unused (0: only when its room
    /// is needed).
    #[arg(long, env = "TESSERA_WASM_INSTANCE_IDLE_SECS", default_value_t = 0)]
    pub wasm_instance_idle_secs: u64,
    /// Where `tessera serve` compiles WebAssembly components: `process`, a compiler process of
    /// their own (its memory leaves with it, and a compile that crashes fails only its model),
    /// or `in-process`. An embedded server started from flags compiles in-process.
    #[arg(long, env = "TESSERA_WASM_COMPILER", default_value = "process", value_parser = ["process", "in-process"])]
    pub wasm_compiler: String,
    /// With `--wasm-compiler process`: a compile still running after this many seconds (at
    /// least 1) is stopped and its model fails to load. An in-process compile has no limit.
    #[arg(long, env = "TESSERA_WASM_COMPILE_TIMEOUT_SECS", default_value_t = 300)]
    pub wasm_compile_timeout_secs: u64,
    /// With `--wasm-compiler process`: MiB of private writable memory a compile may map (its
    /// `RLIMIT_DATA`: heap, stacks, reserved arenas; 0: no cap). A compile that needs more fails
    /// its model's load, and the reason names this flag. The model-load threads compile at once,
    /// so the worst case is this times `--model-load-thread-count`.
    #[arg(long, env = "TESSERA_WASM_COMPILE_MEMORY_MIB", default_value_t = 4096)]
    pub wasm_compile_memory_mib: u64,

    /// The Python guest builder for models served from `model.py` (`backend: "python"`): run
    /// as `bash BUILDER VERSION_DIR OUT.wasm`. Default: scripts/build-python-guest.sh of the
    /// checkout this binary was built in, when it is there.
    #[arg(long, env = "TESSERA_PYTHON_GUEST_BUILDER")]
    pub python_guest_builder: Option<PathBuf>,
    /// A model.py build still running after this many seconds is stopped and its model fails
    /// to load (a first build with numpy also builds numpy for the guest: minutes).
    #[arg(long, env = "TESSERA_PYTHON_GUEST_BUILD_TIMEOUT_SECS", default_value_t = 900)]
    pub python_guest_build_timeout_secs: u64,
    /// Size cap of the cache of built model.py guests, in MiB (0: none): past it the least
    /// recently used are deleted (`tessera_disk_cache_*` on /metrics). Every distinct uploaded
    /// model.py adds one (20-40 MiB).
    #[arg(long, env = "TESSERA_PYTHON_GUEST_CACHE_MAX_MIB", default_value_t = 4096)]
    pub python_guest_cache_max_mib: u64,
    /// The models that models served from `model.py` may call through BLS (`*`, or a comma
    /// list), as Triton lets a Python model call any model; a model's own `allowed_models`
    /// parameter narrows it. Default: only what each model's `allowed_models` lists.
    #[arg(long, env = "TESSERA_PYTHON_ALLOWED_MODELS", value_name = "MODELS")]
    pub python_allowed_models: Option<String>,

    /// How many model.py builds run at once (0, the default: one per CPU, fewer when the
    /// available memory holds fewer, at ~0.75 GiB a build). Builds run before the model-load
    /// threads take their models, so this bounds them whatever --model-load-thread-count says.
    #[arg(long, env = "TESSERA_PYTHON_GUEST_BUILD_JOBS", default_value_t = 0)]
    pub python_guest_build_jobs: usize,
    /// A server environment variable guests may be given: a name, or `PREFIX*` for every
    /// variable starting with PREFIX (repeatable, or a comma list; a bare `*` is refused). A
    /// model sees only those of them its `environment_variables` parameter asks for; without
    /// this flag no guest sees any variable of the server (docs/wasm.md, "Environment variables").
    #[arg(long = "guest-env", env = "TESSERA_GUEST_ENV", value_name = "NAME", value_delimiter = ',')]
    pub guest_env: Vec<String>,
    /// A TOML file of secrets for guests: each names where its value comes from (`env` or
    /// `file`, outside every repository) and the models granted it, which read it through
    /// wasi:config. Read again at each model load (docs/capabilities.md).
    #[arg(long = "guest-secrets", env = "TESSERA_GUEST_SECRETS", value_name = "FILE")]
    pub guest_secrets: Option<PathBuf>,
    /// The largest key-value store quota (`keyvalue_max_bytes`) a model may ask for; 0 grants
    /// none (docs/capabilities.md).
    #[arg(long, env = "TESSERA_GUEST_KEYVALUE_MAX_BYTES", default_value_t = 64 << 20)]
    pub guest_keyvalue_max_bytes: u64,
    /// A JWK Set (JSON) of AES-256 keys for sealed model files: model.onnx, model.pt or
    /// model.wasm stored as a JWE (A256KW or dir, A256GCM), decrypted in memory only
    /// (docs/server.md, "Models encrypted at rest"). TESSERA_MODEL_KEYS may hold more keys.
    #[arg(long, env = "TESSERA_MODEL_KEYS_FILE", value_name = "FILE")]
    pub model_keys: Option<PathBuf>,
    /// Where models with `keyvalue` = `persistent` keep their stores (one file per model).
    #[arg(long, env = "TESSERA_GUEST_KEYVALUE_DIR", value_name = "DIR")]
    pub guest_keyvalue_dir: Option<PathBuf>,

    /// Triton's rate limiter: `execution_count` makes every execution wait until the resources
    /// its instance group lists (`rate_limiter` in config.pbtxt) are free; `off` (default)
    /// ignores them.
    #[arg(long, env = "TESSERA_RATE_LIMIT", default_value = "off", value_parser = ["off", "execution_count"])]
    pub rate_limit: String,
    /// How many copies of a rate-limiter resource exist, as `<name>:<count>[:<device>]`
    /// (repeatable; without a device, on every device). By default: the largest count any
    /// loaded instance asks for.
    #[arg(long = "rate-limit-resource", value_name = "NAME:COUNT[:DEVICE]")]
    pub rate_limit_resource: Vec<ResourceOverride>,

    /// Accepted for compatibility with Triton command lines; Tessera's backends are built in.
    #[arg(long)]
    pub backend_directory: Option<PathBuf>,
    /// Accepted for compatibility with Triton command lines.
    #[arg(long)]
    pub cache_directory: Option<PathBuf>,
    /// The response cache, as Triton: `local,size=<bytes>` (repeatable). Models opt in with
    /// `response_cache { enable: true }`.
    #[arg(long)]
    pub cache_config: Vec<String>,
    /// Accepted for compatibility with Triton command lines (`<backend>,<setting>=<value>`).
    #[arg(long)]
    pub backend_config: Vec<String>,
    /// How many models load at once at startup (default: one per CPU). Ensembles load after
    /// the other models, one by one.
    #[arg(long, env = "TESSERA_MODEL_LOAD_THREAD_COUNT")]
    pub model_load_thread_count: Option<u32>,
}

/// A PEM file that `flag` needs, read now (`--name` names the flag that gives its path).
fn read_pem(flag: &str, name: &str, path: &Option<PathBuf>) -> Result<Vec<u8>, String> {
    let path = path.as_ref().ok_or_else(|| format!("{flag} needs --{name}"))?;
    std::fs::read(path).map_err(|e| format!("--{name}={}: {e}", path.display()))
}

impl ServeArgs {
    pub fn strict_config(&self) -> bool {
        self.strict_model_config || self.disable_auto_complete_config
    }

    pub(super) fn log_flags(&self) -> LogFlags {
        LogFlags {
            verbose: self.log_verbose,
            info: self.log_info,
            warning: self.log_warning,
            error: self.log_error,
            format: crate::server::logging::LogFormat::parse(&self.log_format)
                .unwrap_or(crate::server::logging::LogFormat::Default),
        }
    }

    /// The trace settings: `--trace-config` over the deprecated `--trace-*` flags, which warn.
    fn trace_config(&self) -> Result<crate::trace::TraceConfig, String> {
        let legacy = crate::trace::LegacyFlags {
            file: self.trace_file.clone(),
            level: self.trace_level.clone(),
            rate: self.trace_rate.clone(),
            count: self.trace_count.clone(),
            log_frequency: self.trace_log_frequency.clone(),
        };
        let deprecated = [
            ("--trace-file", legacy.file.is_some(), "triton,file"),
            ("--trace-level", !legacy.level.is_empty(), "level"),
            ("--trace-rate", legacy.rate.is_some(), "rate"),
            ("--trace-count", legacy.count.is_some(), "count"),
            ("--trace-log-frequency", legacy.log_frequency.is_some(), "triton,log-frequency"),
        ];
        for (flag, given, setting) in deprecated {
            if given {
                tracing::warn!("{flag} is deprecated and will be removed: use --trace-config {setting}=<value>");
            }
        }
        crate::trace::TraceConfig::from_flags(&self.trace_config, &legacy)
    }

    fn inflight_budget(&self) -> Result<usize, String> {
        match self.max_inflight_request_bytes {
            None => Ok((1usize << 30).max(self.http_max_input_size.saturating_mul(4))),
            // A compressed request may hold its body and its inflated form at once.
            Some(n) if n < self.http_max_input_size.saturating_mul(2) => Err(format!(
                "--max-inflight-request-bytes={n} must be at least twice --http-max-input-size ({}), or no \
                 maximal compressed request could ever be served",
                self.http_max_input_size
            )),
            Some(n) => Ok(n),
        }
    }

    /// The gRPC door's TLS settings, with the PEM files read now so a bad path fails the start.
    fn grpc_tls(&self) -> Result<Option<GrpcTls>, String> {
        if !self.grpc_use_ssl && !self.grpc_use_ssl_mutual {
            return Ok(None);
        }
        let flag = if self.grpc_use_ssl_mutual { "--grpc-use-ssl-mutual" } else { "--grpc-use-ssl" };
        let read = |name: &str, path: &Option<PathBuf>| read_pem(flag, name, path);
        let tls = GrpcTls {
            certificate: read("grpc-server-cert", &self.grpc_server_cert)?,
            key: read("grpc-server-key", &self.grpc_server_key)?,
            client_ca: if self.grpc_use_ssl_mutual {
                Some(read("grpc-root-cert", &self.grpc_root_cert)?)
            } else {
                None
            },
        };
        tls.validate()?;
        Ok(Some(tls))
    }

    /// The HTTP door's TLS settings, with the PEM files read now so a bad path fails the start.
    fn http_tls(&self) -> Result<Option<HttpTls>, String> {
        if !self.http_use_ssl && !self.http_use_ssl_mutual {
            return Ok(None);
        }
        let flag = if self.http_use_ssl_mutual { "--http-use-ssl-mutual" } else { "--http-use-ssl" };
        let read = |name: &str, path: &Option<PathBuf>| read_pem(flag, name, path);
        let client_ca = match (&self.http_root_cert, self.http_use_ssl_mutual) {
            (None, false) => None,
            (root, _) => Some(read("http-root-cert", root)?),
        };
        let tls = HttpTls {
            certificate: read("http-server-cert", &self.http_server_cert)?,
            key: read("http-server-key", &self.http_server_key)?,
            client_ca,
            require_client_cert: self.http_use_ssl_mutual,
        };
        tls.acceptor()?;
        Ok(Some(tls))
    }

    /// The server configuration these flags describe; `as_triton` names the server "triton".
    pub fn server_config(&self, as_triton: bool) -> Result<ServerConfig, String> {
        if self.allow_sagemaker || self.allow_vertex_ai {
            return Err("--allow-sagemaker and --allow-vertex-ai: those endpoints are not implemented (only false is \
                accepted); use the KServe v2 HTTP or gRPC protocol"
                .into());
        }
        let mut wasm = WasmOptions {
            max_instances: self.wasm_max_instances,
            idle_timeout: (self.wasm_instance_idle_secs > 0)
                .then(|| std::time::Duration::from_secs(self.wasm_instance_idle_secs)),
            cache_max_bytes: self.wasm_cache_max_mib.saturating_mul(1 << 20),
            ..WasmOptions::default()
        };
        if let Some(dir) = &self.wasm_cache_dir {
            wasm.cache_dir = Some(dir.clone());
        }
        wasm.guest_env = GuestEnv::from_server(&self.guest_env)?;
        if let Some(file) = &self.guest_secrets {
            wasm.guest_secrets = GuestSecrets::load(file, &self.model_repository)?;
        }
        wasm.keyvalue =
            KeyValueOptions { max_bytes: self.guest_keyvalue_max_bytes, dir: self.guest_keyvalue_dir.clone() };
        if let Some(dir) = &wasm.keyvalue.dir {
            std::fs::create_dir_all(dir).map_err(|e| format!("--guest-keyvalue-dir {}: {e}", dir.display()))?;
        }
        let mut python = PythonOptions {
            build_timeout: Duration::from_secs(self.python_guest_build_timeout_secs.max(1)),
            allowed_models: self.python_allowed_models.clone(),
            cache_max_bytes: self.python_guest_cache_max_mib.saturating_mul(1 << 20),
            build_jobs: self.python_guest_build_jobs,
            ..PythonOptions::default()
        };
        if let Some(builder) = &self.python_guest_builder {
            python.builder = Some(builder.clone());
        }
        Ok(ServerConfig {
            repositories: self.model_repository.clone(),
            model_keys: std::sync::Arc::new(crate::backend::sealed::ModelKeys::load(
                self.model_keys.as_deref(),
                std::env::var("TESSERA_MODEL_KEYS").ok().as_deref(),
            )?),
            control_mode: self.model_control_mode,
            startup_models: self.load_model.clone(),
            poll_interval: Duration::from_secs(self.repository_poll_secs.max(1)),
            strict_model_config: self.strict_config(),
            strict_readiness: self.strict_readiness,
            required_models: self.required_models.clone(),
            exit_on_error: self.exit_on_error,
            server_id: self.id.clone().unwrap_or_else(|| if as_triton { "triton" } else { "tessera" }.to_string()),
            http: self.allow_http.then(|| Listen::new(&self.http_address, self.http_port)),
            http_max_input_size: self.http_max_input_size,
            max_inflight_request_bytes: self.inflight_budget()?,
            http_connections: ConnectionLimits {
                max_connections: self.http_max_connections.unwrap_or_else(default_max_connections).max(1),
                header_read: Duration::from_secs(self.http_header_read_timeout.max(1)),
                body_read: Duration::from_secs(self.http_body_read_timeout.max(1)),
                keepalive_idle: Duration::from_secs(self.http_keepalive_timeout.max(1)),
            },
            http_restrictions: Restrictions::parse("http-restricted-api", &self.http_restricted_api)?,
            tenants: self.tenants.clone(),
            http_tls: self.http_tls()?,
            connection_threads: self.connection_thread_count.unwrap_or_else(default_connection_threads),
            fast_paths: !self.no_fast_paths,
            trace: self.trace_config()?,
            log_requests: self.log_requests,
            allow_client_shm: self.allow_client_shm,
            grpc: self.allow_grpc.then(|| Listen::new(&self.grpc_address, self.grpc_port)),
            grpc_options: GrpcOptions {
                max_message_size: self.grpc_max_message_size,
                keepalive_time: Duration::from_millis(self.grpc_keepalive_time.max(1)),
                keepalive_timeout: Duration::from_millis(self.grpc_keepalive_timeout.max(1)),
                response_compression: match self.grpc_infer_response_compression_level.as_str() {
                    "none" => None,
                    "low" => Some(tonic::codec::CompressionEncoding::Gzip),
                    _ => Some(tonic::codec::CompressionEncoding::Deflate),
                },
                restrictions: Restrictions::parse("grpc-restricted-protocol", &self.grpc_restricted_protocol)?,
                tls: self.grpc_tls()?,
                max_connections: self.grpc_max_connections.unwrap_or_else(default_max_connections).max(1),
                stream_responses: self.grpc_max_response_pool_size.unwrap_or(crate::grpc::DEFAULT_STREAM_RESPONSES),
                first_bytes_timeout: Duration::from_secs(self.http_header_read_timeout.max(1)),
                max_connection_idle: (self.grpc_max_connection_idle > 0)
                    .then(|| Duration::from_millis(self.grpc_max_connection_idle)),
                tenants: None,
            },
            metrics: self.allow_metrics.then(|| Listen::new(&self.metrics_address, self.metrics_port)),
            openai: self.openai_port.map(|port| Listen::new(&self.openai_address, port)),
            cpu_metrics_interval: self.allow_cpu_metrics.then(|| Duration::from_millis(self.metrics_interval_ms)),
            gpu_metrics_interval: self.allow_gpu_metrics.then(|| Duration::from_millis(self.metrics_interval_ms)),
            metrics_settings: crate::stats::latency::MetricsSettings::parse(&self.metrics_config)?,
            unhealthy_after: self.model_unhealthy_after,
            header_forwarding: crate::frontend::ForwardPatterns::new(
                self.http_header_forward_pattern.as_deref(),
                self.grpc_header_forward_pattern.as_deref(),
            )?,
            response_cache_bytes: crate::cache::parse_cache_config(&self.cache_config)?,
            rate_limit: (self.rate_limit == "execution_count").then(|| self.rate_limit_resource.clone()),
            model_load_threads: self.model_load_thread_count.unwrap_or(0) as usize,
            onnxruntime_library: self.onnxruntime_library.clone(),
            wasm,
            python,
            backends: Vec::new(),
            registered_models: Vec::new(),
            ensembles_wait_for_registered: false,
            exit_timeout: Duration::from_secs(self.exit_timeout_secs),
            log_settings: self.log_flags().settings(),
            log_applier: None,
        })
    }
}
