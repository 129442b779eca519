//! Where libtorch is (`LIBTORCH`, the torch wheel in .venv), recorded in this crate's unit tests
//! so they run without LD_LIBRARY_PATH (the binary records it too: cli/build.rs).

fn main() {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    if let Some(libtorch) = std::env::var_os("LIBTORCH") {
        let lib = std::path::PathBuf::from(libtorch).join("lib");
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    }
}
