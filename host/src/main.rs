use mimalloc::MiMalloc;

// Large tensor copies are markedly faster with mimalloc than with glibc's trimming malloc.
#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

fn main() -> std::process::ExitCode {
    let (cli, as_triton) = tessera::cli::parse_from_env();
    match cli.command {
        tessera::cli::Command::Serve(args) => tessera::cli::serve(&args, as_triton),
        tessera::cli::Command::Guest(tessera::cli::GuestCommand::Build { path, output, root }) => {
            tessera::guest::build(&tessera::guest::BuildOptions { path, output, root })
        }
        tessera::cli::Command::Guest(tessera::cli::GuestCommand::Bindgen { out, root, .. }) => {
            tessera::guest::bindgen_c(&out, root.as_deref())
        }
        tessera::cli::Command::Guest(tessera::cli::GuestCommand::Prepare { repositories, python_guest_builder }) => {
            tessera::guest::prepare(&repositories, python_guest_builder)
        }
        tessera::cli::Command::CompileComponent { output, function_cache, function_cache_max_bytes } => {
            tessera::cli::compile_component(output.as_deref(), function_cache, function_cache_max_bytes)
        }
    }
}
