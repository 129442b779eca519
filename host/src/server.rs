//! Wires the pieces together for `tessera serve`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tracing_subscriber::EnvFilter;

use crate::backend::wasm::{WasmBackend, WasmOptions};
use crate::backend::{Backends, onnx::OnnxBackend};
use crate::cli::ServeArgs;
use crate::frontend::{Frontend, LogApplier, SettingValue};
use crate::grpc::GrpcOptions;
use crate::metrics::{HostSampler, MetricsState};
use crate::http::{HttpState, router};
use crate::repository::{ControlMode, ModelManager, RepositoryOptions};

fn level_for(verbose: u32, info: bool, warning: bool, error: bool) -> &'static str {
    if verbose > 0 {
        "debug"
    } else if info {
        "info"
    } else if warning {
        "warn"
    } else if error {
        "error"
    } else {
        "off"
    }
}

/// The log filter for a level; ONNX Runtime's own chatter stays at warnings.
fn filter_for(level: &str) -> EnvFilter {
    EnvFilter::new(format!("{level},ort=warn"))
}

type FilterHandle = tracing_subscriber::reload::Handle<EnvFilter, tracing_subscriber::Registry>;

/// Installs the logger. The filter sits behind a reload handle so the logging extension
/// (`/v2/logging`, gRPC LogSettings) can change levels at run time. RUST_LOG, when set, wins.
fn init_logging(args: &ServeArgs) -> Option<FilterHandle> {
    use tracing_subscriber::prelude::*;
    let level = level_for(args.log_verbose, args.log_info, args.log_warning, args.log_error);
    let (filter, from_env) = match EnvFilter::try_from_default_env() {
        Ok(f) => (f, true),
        Err(_) => (filter_for(level), false),
    };
    let (filter, handle) = tracing_subscriber::reload::Layer::new(filter);
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(ansi);
    let installed = tracing_subscriber::registry().with(filter).with(fmt).try_init().is_ok();
    (installed && !from_env).then_some(handle)
}

fn log_settings(args: &ServeArgs) -> BTreeMap<String, SettingValue> {
    BTreeMap::from([
        ("log_info".to_string(), SettingValue::Bool(args.log_info)),
        ("log_warning".to_string(), SettingValue::Bool(args.log_warning)),
        ("log_error".to_string(), SettingValue::Bool(args.log_error)),
        ("log_verbose_level".to_string(), SettingValue::Uint(args.log_verbose)),
    ])
}

fn log_applier(handle: Option<FilterHandle>) -> LogApplier {
    Box::new(move |settings| {
        let flag = |key: &str| matches!(settings.get(key), Some(SettingValue::Bool(true)));
        let verbose = match settings.get("log_verbose_level") {
            Some(SettingValue::Uint(v)) => *v,
            _ => 0,
        };
        let level = level_for(verbose, flag("log_info"), flag("log_warning"), flag("log_error"));
        if let Some(handle) = &handle {
            let _ = handle.reload(filter_for(level));
        }
    })
}

async fn bind(what: &str, host: &str, port: u16) -> Option<tokio::net::TcpListener> {
    let address = format!("{host}:{port}");
    let listener = match address.parse::<SocketAddr>() {
        Ok(addr) => tokio::net::TcpListener::bind(addr).await,
        Err(_) => tokio::net::TcpListener::bind(address.as_str()).await,
    };
    match listener {
        Ok(l) => {
            let at = l.local_addr().map_or(address, |a| a.to_string());
            tracing::info!("Started {what} at {at}");
            Some(l)
        }
        Err(e) => {
            tracing::error!("failed to bind the {what} to {address}: {e}");
            None
        }
    }
}

pub fn run(args: ServeArgs, as_triton: bool) -> ExitCode {
    let log_handle = init_logging(&args);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("failed to start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(serve(args, as_triton, log_handle))
}

async fn serve(args: ServeArgs, as_triton: bool, log_handle: Option<FilterHandle>) -> ExitCode {
    for repo in &args.model_repository {
        if !repo.is_dir() {
            tracing::error!(repository = %repo.display(), "model repository is not a directory");
            if args.exit_on_error {
                return ExitCode::FAILURE;
            }
        }
    }
    if args.backend_directory.is_some() || args.cache_directory.is_some() || !args.backend_config.is_empty() {
        tracing::info!("--backend-directory, --cache-directory and --backend-config are accepted for compatibility and ignored");
    }
    if args.grpc_use_ssl {
        tracing::error!("--grpc-use-ssl=true: TLS is not supported by this version (terminate TLS in a proxy)");
        return ExitCode::FAILURE;
    }
    if !args.grpc_restricted_protocol.is_empty() {
        tracing::error!("--grpc-restricted-protocol is not supported by this version; refusing to serve those protocols unprotected");
        return ExitCode::FAILURE;
    }

    let onnx = OnnxBackend::new(args.onnxruntime_library.as_deref());
    let mut wasm_options = WasmOptions { max_instances: args.wasm_max_instances, ..WasmOptions::default() };
    if let Some(dir) = &args.wasm_cache_dir {
        wasm_options.cache_dir = Some(dir.clone());
    }
    let backends = Backends::new(onnx, WasmBackend::new(wasm_options));
    let response_cache = match crate::cache::parse_cache_config(&args.cache_config) {
        Ok(size) => size.map(|bytes| Arc::new(crate::cache::ResponseCache::new(bytes))),
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let manager = Arc::new(ModelManager::new(
        RepositoryOptions {
            repositories: args.model_repository.clone(),
            control_mode: args.model_control_mode,
            strict_config: args.strict_config(),
            response_cache,
        },
        backends.clone(),
    ));
    backends.wasm.connect(&manager);
    let failures = manager.load_startup_models(&args.load_model).await;
    for (model, reason) in &failures {
        tracing::error!(model = model.as_str(), "{reason}");
    }
    if !failures.is_empty() && args.exit_on_error {
        tracing::error!("failed to load all models; exiting (pass --exit-on-error=false to serve the others)");
        return ExitCode::FAILURE;
    }

    if args.model_control_mode == ControlMode::Poll {
        let poller = Arc::clone(&manager);
        let every = Duration::from_secs(args.repository_poll_secs.max(1));
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(every);
            ticker.tick().await;
            loop {
                ticker.tick().await;
                poller.poll().await;
            }
        });
    }

    if !args.allow_http && !args.allow_grpc {
        tracing::error!("--allow-http=false and --allow-grpc=false leave no front door");
        return ExitCode::FAILURE;
    }
    let server_id = args.id.clone().unwrap_or_else(|| if as_triton { "triton" } else { "tessera" }.to_string());
    let frontend = Arc::new(
        Frontend::new(manager, server_id, args.strict_readiness).with_log_settings(log_settings(&args), log_applier(log_handle)),
    );

    // Both doors stop together on SIGINT/SIGTERM.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = stop_tx.send(true);
    });
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };

    let mut servers = tokio::task::JoinSet::new();
    if args.allow_http {
        let Some(listener) = bind("HTTPService", &args.http_address, args.http_port).await else {
            return ExitCode::FAILURE;
        };
        let state = HttpState { frontend: Arc::clone(&frontend), max_input_size: args.http_max_input_size };
        let shutdown = stopped(stop_rx.clone());
        servers.spawn(async move {
            axum::serve(listener, router(state)).with_graceful_shutdown(shutdown).await.map_err(|e| format!("HTTP server failed: {e}"))
        });
    }
    if args.allow_grpc {
        let Some(listener) = bind("GRPCInferenceService", &args.grpc_address, args.grpc_port).await else {
            return ExitCode::FAILURE;
        };
        let options = GrpcOptions {
            max_message_size: args.grpc_max_message_size,
            keepalive_time: Duration::from_millis(args.grpc_keepalive_time.max(1)),
            keepalive_timeout: Duration::from_millis(args.grpc_keepalive_timeout.max(1)),
            compress_responses: args.grpc_infer_response_compression_level != "none",
        };
        let stop = stop_rx.clone();
        let frontend = Arc::clone(&frontend);
        servers.spawn(async move {
            crate::grpc::serve(frontend, listener, options, stop).await.map_err(|e| format!("gRPC server failed: {e}"))
        });
    }
    if args.allow_metrics {
        let Some(listener) = bind("Metrics Service", &args.metrics_address, args.metrics_port).await else {
            return ExitCode::FAILURE;
        };
        let host = args.allow_cpu_metrics.then(|| HostSampler::start(Duration::from_millis(args.metrics_interval_ms)));
        let state = MetricsState { manager: Arc::clone(&frontend.manager), host };
        let shutdown = stopped(stop_rx.clone());
        servers.spawn(async move {
            axum::serve(listener, crate::metrics::router(state))
                .with_graceful_shutdown(shutdown)
                .await
                .map_err(|e| format!("metrics server failed: {e}"))
        });
    }
    let mut code = ExitCode::SUCCESS;
    // After a stop signal, connections get --exit-timeout-secs to finish (Triton's flag).
    let exit_timeout = Duration::from_secs(args.exit_timeout_secs);
    let mut stop_seen = stop_rx.clone();
    let deadline = async move {
        let _ = stop_seen.wait_for(|s| *s).await;
        tokio::time::sleep(exit_timeout).await;
    };
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            joined = servers.join_next() => match joined {
                None => break,
                Some(result) => {
                    if let Err(e) = result.map_err(|e| e.to_string()).and_then(|r| r) {
                        tracing::error!("{e}");
                        code = ExitCode::FAILURE;
                    }
                }
            },
            () = &mut deadline => {
                tracing::warn!("connections still open {}s after the stop signal; exiting", exit_timeout.as_secs());
                servers.abort_all();
                break;
            }
        }
    }
    tracing::info!("server stopped");
    code
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutting down");
}
