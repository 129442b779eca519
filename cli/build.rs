//! The TorchScript backend links libtorch dynamically: with the `torch` feature, record where it
//! is (the torch wheel in .venv, `LIBTORCH` from .cargo/config.toml) so the binary and its tests
//! find it without LD_LIBRARY_PATH. Elsewhere (the GPU machine, an image) LD_LIBRARY_PATH names
//! that machine's libtorch.

fn main() {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    if std::env::var_os("CARGO_FEATURE_TORCH").is_some()
        && let Some(libtorch) = std::env::var_os("LIBTORCH")
    {
        let lib = std::path::PathBuf::from(libtorch).join("lib");
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    }
}
