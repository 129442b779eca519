//! Command line. `tessera serve` takes Triton's flag names for everything it supports, so the
//! binary invoked through a symlink named `tritonserver` is a drop-in (no `serve` needed).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::backend::wasm::{Compiler, CompilerProcess};
use crate::server::logging;
use crate::server::{Server, ServerConfig};
pub use serve_args::ServeArgs;

mod serve_args;
mod values;

#[derive(Debug, Parser)]
#[command(
    name = "tessera",
    version,
    about = "Triton-compatible inference server with sandboxed WebAssembly custom backends"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve one or more Triton model repositories.
    // Triton lets a later flag override an earlier one (`--http-port 1 --http-port 2`).
    #[command(args_override_self = true)]
    Serve(Box<ServeArgs>),
    /// Work with WebAssembly guests (models written as components).
    #[command(subcommand)]
    Guest(GuestCommand),
    /// Seal (encrypt at rest) a model file for `--model-keys`: a JWE (A256KW + A256GCM, as
    /// KServe's confidential serving reads) written to OUTPUT, sealed with the key KID of the
    /// JWK Set in --keys.
    Seal {
        /// The model file (model.onnx, model.pt, model.wasm).
        input: PathBuf,
        /// Where to write the sealed file (not INPUT).
        output: PathBuf,
        /// A JWK Set (JSON) holding the key.
        #[arg(long)]
        keys: PathBuf,
        /// The id of the key to seal with.
        #[arg(long)]
        kid: String,
        /// Encrypt with the key directly (`alg` dir) instead of wrapping a random content key.
        #[arg(long)]
        direct: bool,
    },
    /// The server's compiler process: a component's bytes on stdin, the compiled artifact to
    /// `--output` or stdout (see `backend/wasm/compile.rs`).
    #[command(name = "compile-component", hide = true)]
    CompileComponent {
        #[arg(long)]
        output: Option<PathBuf>,
        /// Compiled functions to reuse and add to (see `backend/wasm/functions.rs`).
        #[arg(long)]
        function_cache: Option<PathBuf>,
        /// The most bytes this compile adds to the function cache (0: no bound).
        #[arg(long, default_value_t = 0)]
        function_cache_max_bytes: u64,
    },
}

#[derive(Debug, Subcommand)]
pub enum GuestCommand {
    /// Build a guest into a model.wasm component: a Rust crate directory, a Triton-style
    /// model.py, a model.js, a directory of C/C++ sources, or a core .wasm module.
    Build {
        /// The guest's source.
        path: PathBuf,
        /// Output file (default: model.wasm next to the source).
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Checkout holding wit/ and guest-sdk/ (default: the one this binary was built from).
        #[arg(long)]
        root: Option<PathBuf>,
    },
    /// Build and compile the model.py models of model repositories (`backend: "python"`, or no
    /// config) into the caches a server takes them from, as a server does at load, so that its
    /// first start only loads them. scripts/setup.sh runs it on the quickstart.
    Prepare {
        /// Model repositories.
        #[arg(required = true)]
        repositories: Vec<PathBuf>,
        /// As `tessera serve --python-guest-builder`.
        #[arg(long, env = "TESSERA_PYTHON_GUEST_BUILDER")]
        python_guest_builder: Option<PathBuf>,
    },
    /// Write a language's generated bindings of the contract (world `model-nn`), for editors or
    /// another build system (then `tessera guest build core.wasm` encodes the result).
    Bindgen {
        /// The language: `c` (also used by C++).
        #[arg(value_parser = ["c"])]
        language: String,
        /// Directory to write the bindings into.
        out: PathBuf,
        /// Checkout holding wit/ (default: the one this binary was built from).
        #[arg(long)]
        root: Option<PathBuf>,
    },
}

/// The server an embedder (the Python package) starts from `tessera serve` flags, given without
/// the subcommand: parsed and checked exactly as on the command line, with logging installed.
pub fn embedded_server_config(flags: &[String]) -> Result<ServerConfig, String> {
    use clap::{CommandFactory, FromArgMatches};
    // An embedded server may have no repository: its models are registered from code.
    let command =
        Cli::command().mut_subcommand("serve", |serve| serve.mut_arg("model_repository", |arg| arg.required(false)));
    let argv = ["tessera".to_string(), "serve".to_string()].into_iter().chain(flags.iter().cloned());
    let matches = command.try_get_matches_from(argv).map_err(|e| e.to_string())?;
    let cli = Cli::from_arg_matches(&matches).map_err(|e| e.to_string())?;
    let Command::Serve(args) = cli.command else {
        return Err("expected server flags".into());
    };
    let applier = logging::init(args.log_flags());
    let mut config = args.server_config(false)?;
    config.log_applier = Some(applier);
    Ok(config)
}

/// `tessera seal`: writes `input` sealed for key `kid` of the JWK Set `keys` to `output`.
pub fn seal(
    input: &std::path::Path,
    output: &std::path::Path,
    keys: &std::path::Path,
    kid: &str,
    direct: bool,
) -> ExitCode {
    let sealed = crate::backend::sealed::ModelKeys::load(Some(keys), None).and_then(|set| {
        let key = set.key(kid).ok_or_else(|| format!("{} has no key '{kid}'", keys.display()))?;
        let plain = zeroize::Zeroizing::new(std::fs::read(input).map_err(|e| format!("{}: {e}", input.display()))?);
        crate::backend::sealed::seal(&plain, kid, key, direct)
    });
    match sealed.and_then(|text| std::fs::write(output, text).map_err(|e| format!("{}: {e}", output.display()))) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tessera seal: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `tessera compile-component`: the server's compiler process.
pub fn compile_component(
    output: Option<&std::path::Path>,
    function_cache: Option<PathBuf>,
    max_bytes: u64,
) -> ExitCode {
    let functions = function_cache.map(|dir| crate::backend::wasm::FunctionCache { dir, max_bytes });
    crate::backend::wasm::compile_component_main(output, functions)
}

/// `tessera serve`: logging, the runtime, the server, and a graceful stop on SIGINT/SIGTERM.
/// `backends`: those this build carries beyond the library's (see [`ServerConfig::backends`]).
pub fn serve(
    args: &ServeArgs,
    as_triton: bool,
    backends: Vec<std::sync::Arc<dyn crate::backend::Backend>>,
) -> ExitCode {
    let applier = logging::init(args.log_flags());
    if args.backend_directory.is_some() || args.cache_directory.is_some() || !args.backend_config.is_empty() {
        tracing::info!(
            "--backend-directory, --cache-directory and --backend-config are accepted for compatibility and ignored"
        );
    }
    // An embedded server may have no door (Triton's in-process API); `tessera serve` needs one.
    let config = if !args.allow_http && !args.allow_grpc {
        Err("--allow-http=false and --allow-grpc=false leave no front door".to_string())
    } else {
        args.server_config(as_triton)
    };
    let mut config = match config {
        Ok(config) => config,
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::FAILURE;
        }
    };
    config.log_applier = Some(applier);
    config.backends.extend(backends);
    if args.wasm_compiler == "process" {
        // This binary is its own compiler (`tessera compile-component`). `/proc/self/exe` is this
        // very program even after an upgrade replaced the file: a newer binary's artifacts would
        // not load in this server's engine.
        let this_program = std::path::Path::new("/proc/self/exe");
        let program = if this_program.exists() { Ok(this_program.to_path_buf()) } else { std::env::current_exe() };
        match program {
            Ok(program) => {
                let timeout = Duration::from_secs(args.wasm_compile_timeout_secs.max(1));
                let memory_limit =
                    (args.wasm_compile_memory_mib > 0).then_some(args.wasm_compile_memory_mib.saturating_mul(1 << 20));
                config.wasm.compiler = Compiler::Process(CompilerProcess { program, timeout, memory_limit });
            }
            Err(e) => tracing::warn!("compiling WebAssembly components in the server: cannot find this binary ({e})"),
        }
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("failed to start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = runtime.block_on(async move {
        let server = match Server::start(config).await {
            Ok(server) => server,
            Err(e) => {
                tracing::error!("{e}");
                return ExitCode::FAILURE;
            }
        };
        let stop = server.stop_handle();
        tokio::spawn(async move {
            shutdown_signal().await;
            // A second signal during the drain stops at once.
            tokio::select! {
                () = stop.drain_then_stop() => {}
                () = shutdown_signal() => stop.stop_now(),
            }
        });
        // Returns after a stop signal, or once every door has ended on its own.
        let code = match server.wait().await {
            Ok(()) => ExitCode::SUCCESS,
            Err(_) => ExitCode::FAILURE,
        };
        tracing::info!("server stopped");
        code
    });
    // The process ends here. Dropping the runtime would shut its timers down under work still
    // running past the exit timeout (a guest blocked in a call, which then panics) and wait for
    // that work without bound: leave it to the process's exit instead.
    std::mem::forget(runtime);
    code
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutting down");
}

/// Parses the process arguments. When the executable's name is `tritonserver`, the `serve`
/// subcommand is implied. Returns the CLI and whether we run as `tritonserver`.
pub fn parse_from_env() -> (Cli, bool) {
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let as_triton = args
        .first()
        .and_then(|a| std::path::Path::new(a).file_name().map(|n| n.to_string_lossy().into_owned()))
        .is_some_and(|n| n == "tritonserver");
    if as_triton {
        args.insert(1, "serve".into());
    }
    (Cli::parse_from(args), as_triton)
}

#[cfg(test)]
#[path = "cli_tests.rs"]
mod tests;
