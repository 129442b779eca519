//! `tessera guest build PATH`: turns a guest's source into a `model.wasm` component.
//!
//! - A directory with `Cargo.toml`: a Rust guest. Built for `wasm32-unknown-unknown` with the
//!   toolchain scripts/setup-guest-toolchain.sh installs (Debian's rustc-web, std built from
//!   source, wasm-ld), then the core module is encoded as a component with `wit-component`.
//! - A `model.py` (or a directory holding one): a Python guest, componentized by
//!   `componentize-py` against `wit/` with the Python SDK (`guest-sdk/python`) on its path.
//! - A core `.wasm` module carrying wit-bindgen's component-type section: encoded only.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

/// Source checkout the binary was built from: default place of `wit/` and the SDKs.
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub struct BuildOptions {
    pub path: PathBuf,
    pub output: Option<PathBuf>,
    /// Where `wit/` and `guest-sdk/` live (default: the checkout this binary was built from).
    pub root: Option<PathBuf>,
}

pub fn build(options: &BuildOptions) -> ExitCode {
    match build_inner(options) {
        Ok(out) => {
            eprintln!("wrote {}", out.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn build_inner(options: &BuildOptions) -> Result<PathBuf, String> {
    let root = options.root.clone().unwrap_or_else(workspace_root);
    let path = &options.path;
    let default_out = |dir: &Path| dir.join("model.wasm");
    if path.is_dir() && path.join("Cargo.toml").is_file() {
        let core = build_rust(&root, path)?;
        let out = options.output.clone().unwrap_or_else(|| default_out(path));
        encode_file(&core, &out)?;
        return Ok(out);
    }
    let python = if path.is_dir() { Some(path.join("model.py")).filter(|p| p.is_file()) } else { None }
        .or_else(|| (path.extension().is_some_and(|e| e == "py")).then(|| path.clone()));
    if let Some(model_py) = python {
        let dir = model_py.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."));
        let out = options.output.clone().unwrap_or_else(|| default_out(&dir));
        build_python(&root, &model_py, &out)?;
        return Ok(out);
    }
    if path.extension().is_some_and(|e| e == "wasm") && path.is_file() {
        let out = options.output.clone().unwrap_or_else(|| path.with_extension("component.wasm"));
        encode_file(path, &out)?;
        return Ok(out);
    }
    Err(format!(
        "{} is not a guest: expected a Rust crate directory (Cargo.toml), a model.py, or a core .wasm module",
        path.display()
    ))
}

/// Encodes a core module (with its component-type custom section) as a component.
pub fn encode_component(core: &[u8]) -> Result<Vec<u8>, String> {
    wit_component::ComponentEncoder::default()
        .module(core)
        .and_then(|e| e.validate(true).encode())
        .map_err(|e| format!("failed to encode the component: {e:#}"))
}

fn encode_file(core: &Path, out: &Path) -> Result<(), String> {
    let bytes = std::fs::read(core).map_err(|e| format!("failed to read {}: {e}", core.display()))?;
    let component = encode_component(&bytes)?;
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("failed to create {}: {e}", dir.display()))?;
    }
    std::fs::write(out, component).map_err(|e| format!("failed to write {}: {e}", out.display()))
}

/// Builds a Rust guest crate to a core wasm module and returns its path. Every guest shares
/// `<root>/target/wasm-guests`, so the from-source std is built once.
fn build_rust(root: &Path, dir: &Path) -> Result<PathBuf, String> {
    let linker = "/usr/lib/llvm-22/bin/wasm-ld";
    if !Path::new("/usr/bin/cargo").exists() || !Path::new(linker).exists() {
        return Err("the Rust guest toolchain is missing: run scripts/setup-guest-toolchain.sh".into());
    }
    let path = format!("/usr/bin:{}", std::env::var("PATH").unwrap_or_default());
    let output = Command::new("/usr/bin/cargo")
        .current_dir(dir)
        .env("PATH", path)
        .env("RUSTC_BOOTSTRAP", "1")
        .env("CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER", linker)
        .env("CARGO_TARGET_DIR", root.join("target/wasm-guests"))
        .env("CARGO_PROFILE_RELEASE_PANIC", "abort")
        .env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("RUSTC")
        .env_remove("CARGO")
        .args([
            "build",
            "--release",
            "-Zbuild-std=std,panic_abort",
            "--target",
            "wasm32-unknown-unknown",
            "--message-format=json-render-diagnostics",
        ])
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("failed to run cargo: {e}"))?;
    if !output.status.success() {
        return Err(format!("cargo build failed for {}", dir.display()));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut artifacts: Vec<PathBuf> = stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|msg| {
            msg["reason"] == "compiler-artifact"
                && msg["target"]["kind"].as_array().is_some_and(|k| k.iter().any(|k| k == "cdylib"))
        })
        .filter_map(|msg| msg["filenames"].as_array().cloned())
        .flatten()
        .filter_map(|f| f.as_str().map(PathBuf::from))
        .filter(|f| f.extension().is_some_and(|e| e == "wasm"))
        .collect();
    artifacts.pop().ok_or_else(|| {
        format!("cargo produced no cdylib .wasm for {} (is crate-type = [\"cdylib\"] set?)", dir.display())
    })
}

/// Componentizes a Triton-style model.py with componentize-py.
fn build_python(root: &Path, model_py: &Path, out: &Path) -> Result<(), String> {
    let tool = ["componentize-py"]
        .into_iter()
        .map(PathBuf::from)
        .chain(std::iter::once(root.join(".venv/bin/componentize-py")))
        .find(|p| {
            Command::new(p)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .ok_or("componentize-py not found: run scripts/setup.sh (it installs it into .venv)")?;
    let script = root.join("scripts/build-python-guest.sh");
    let status = Command::new("bash")
        .arg(&script)
        .arg(model_py)
        .arg(out)
        .env("COMPONENTIZE_PY", &tool)
        .status()
        .map_err(|e| format!("failed to run {}: {e}", script.display()))?;
    if status.success() { Ok(()) } else { Err(format!("componentize-py failed for {}", model_py.display())) }
}
