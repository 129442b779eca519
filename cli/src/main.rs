//! The `tessera` binary: the library's command line (`tessera::cli`) with the backends this
//! build carries (the TorchScript one with the `torch` feature).

use mimalloc::MiMalloc;

// Large tensor copies are markedly faster with mimalloc than with glibc's trimming malloc.
#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

/// The backends this build carries beyond the library's own.
fn backends() -> Vec<std::sync::Arc<dyn tessera::Backend>> {
    #[cfg(feature = "torch")]
    return vec![std::sync::Arc::new(tessera_torch::TorchBackend::new())];
    #[cfg(not(feature = "torch"))]
    return Vec::new();
}

fn main() -> std::process::ExitCode {
    let (cli, as_triton) = tessera::cli::parse_from_env();
    match cli.command {
        tessera::cli::Command::Serve(args) => tessera::cli::serve(&args, as_triton, backends()),
        tessera::cli::Command::Guest(tessera::cli::GuestCommand::Build { path, output, root }) => {
            tessera::guest::build(&tessera::guest::BuildOptions { path, output, root })
        }
        tessera::cli::Command::Guest(tessera::cli::GuestCommand::Bindgen { out, root, .. }) => {
            tessera::guest::bindgen_c(&out, root.as_deref())
        }
        tessera::cli::Command::Guest(tessera::cli::GuestCommand::Prepare { repositories, python_guest_builder }) => {
            tessera::guest::prepare(&repositories, python_guest_builder)
        }
        tessera::cli::Command::Seal { input, output, keys, kid, direct } => {
            tessera::cli::seal(&input, &output, &keys, &kid, direct)
        }
        tessera::cli::Command::CompileComponent { output, function_cache, function_cache_max_bytes } => {
            tessera::cli::compile_component(output.as_deref(), function_cache, function_cache_max_bytes)
        }
    }
}
