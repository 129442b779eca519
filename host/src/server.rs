//! Wires the pieces together for `tessera serve`.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tracing_subscriber::EnvFilter;

use crate::backend::wasm::{WasmBackend, WasmOptions};
use crate::backend::{Backends, onnx::OnnxBackend};
use crate::cli::ServeArgs;
use crate::http::{HttpState, router};
use crate::repository::{ControlMode, ModelManager, RepositoryOptions};

fn init_logging(args: &ServeArgs) {
    let level = if args.log_verbose > 0 {
        "debug"
    } else if args.log_info {
        "info"
    } else if args.log_warning {
        "warn"
    } else if args.log_error {
        "error"
    } else {
        "off"
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(format!("{level},ort=warn")));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi).try_init();
}

pub fn run(args: ServeArgs, as_triton: bool) -> ExitCode {
    init_logging(&args);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("failed to start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(serve(args, as_triton))
}

async fn serve(args: ServeArgs, as_triton: bool) -> ExitCode {
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
    if args.allow_grpc {
        tracing::warn!(port = args.grpc_port, "the gRPC front door is not implemented in this version; only HTTP is served");
    }
    if args.allow_metrics {
        tracing::warn!(port = args.metrics_port, "the metrics endpoint is not implemented in this version");
    }

    let onnx = OnnxBackend::new(args.onnxruntime_library.as_deref());
    let mut wasm_options = WasmOptions { max_instances: args.wasm_max_instances, ..WasmOptions::default() };
    if let Some(dir) = &args.wasm_cache_dir {
        wasm_options.cache_dir = Some(dir.clone());
    }
    let backends = Backends::new(onnx, WasmBackend::new(wasm_options));
    let manager = Arc::new(ModelManager::new(
        RepositoryOptions {
            repositories: args.model_repository.clone(),
            control_mode: args.model_control_mode,
            strict_config: args.strict_config(),
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

    if !args.allow_http {
        tracing::error!("--allow-http=false leaves no front door in this version");
        return ExitCode::FAILURE;
    }
    let address = format!("{}:{}", args.http_address, args.http_port);
    let listener = match address.parse::<SocketAddr>() {
        Ok(addr) => tokio::net::TcpListener::bind(addr).await,
        Err(_) => tokio::net::TcpListener::bind(address.as_str()).await,
    };
    let listener = match listener {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("failed to bind the HTTP service to {address}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let server_id = args.id.clone().unwrap_or_else(|| if as_triton { "triton" } else { "tessera" }.to_string());
    let state = HttpState {
        manager,
        server_id,
        version: env!("CARGO_PKG_VERSION"),
        max_input_size: args.http_max_input_size,
        strict_readiness: args.strict_readiness,
    };
    match listener.local_addr() {
        Ok(addr) => tracing::info!("Started HTTPService at {addr}"),
        Err(_) => tracing::info!("Started HTTPService at {address}"),
    }
    let served = axum::serve(listener, router(state)).with_graceful_shutdown(shutdown_signal()).await;
    match served {
        Ok(()) => {
            tracing::info!("server stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            tracing::error!("HTTP server failed: {e}");
            ExitCode::FAILURE
        }
    }
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
