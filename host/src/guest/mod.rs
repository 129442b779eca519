//! `tessera guest build PATH`: turns a guest's source into a `model.wasm` component.
//!
//! What PATH is decides the language (first match wins):
//! - a directory with `Cargo.toml`: a Rust guest ([`rust`]);
//! - a `model.py`, or a directory holding one: a Python guest ([`python`]);
//! - a `model.js` (or `.mjs`), or a directory holding one: a JavaScript guest ([`js`]);
//! - a directory holding `.c` / `.cpp` / `.cc` / `.cxx` files: a C or C++ guest ([`c`]);
//! - a core `.wasm` module carrying wit-bindgen's component-type section: encoded only.
//!
//! `tessera guest bindgen c DIR` writes the C bindings alone (for editors, or to build with
//! another build system and encode the core module with `tessera guest build core.wasm`).
//!
//! Every build ends in [`encode_component`], which always passes WASI's preview1 adapter: a
//! core module that uses WASI preview1 (C's stdio, Rust's `wasm32-wasip1` std) becomes a
//! component importing WASI 0.2, which the host links (with nothing granted: no files, no
//! environment, output discarded); a module that does not is encoded byte for byte as before.

mod c;
mod js;
mod python;
mod rust;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub use c::write_bindings as write_c_bindings;

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
    report(build_inner(options))
}

/// `tessera guest prepare REPO...`: the repositories' model.py models built and compiled into
/// the caches a server takes them from (see `backend::python::prepare`).
pub fn prepare(repositories: &[PathBuf], builder: Option<PathBuf>) -> ExitCode {
    let mut options = crate::backend::python::PythonOptions::default();
    if builder.is_some() {
        options.builder = builder;
    }
    // Compiled as a server compiles them (the same engine settings and cache), so that its
    // first start only loads them.
    let wasm = crate::backend::wasm::WasmBackend::new(crate::backend::wasm::WasmOptions {
        max_instances: 1,
        ..Default::default()
    });
    let prepared = crate::backend::python::prepare(repositories, &options).and_then(|built| {
        built.into_iter().try_for_each(|component| {
            wasm.precompile(&component).map_err(|e| e.message)?;
            eprintln!("ready {}", component.display());
            Ok(())
        })
    });
    match prepared {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `tessera guest bindgen c DIR`: the generated C bindings of the `model-nn` world.
pub fn bindgen_c(out: &Path, root: Option<&Path>) -> ExitCode {
    let root = root.map(Path::to_path_buf).unwrap_or_else(workspace_root);
    report(write_c_bindings(&root, out).map(|()| out.to_path_buf()))
}

fn report(result: Result<PathBuf, String>) -> ExitCode {
    match result {
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

/// The file a guest source names, if it is `stem.<ext>` or a directory holding `stem.<ext>`.
fn source_file(path: &Path, stem: &str, extensions: &[&str]) -> Option<PathBuf> {
    let named =
        |p: &Path| p.is_file() && p.extension().and_then(|e| e.to_str()).is_some_and(|e| extensions.contains(&e));
    if path.is_dir() {
        return extensions.iter().map(|e| path.join(format!("{stem}.{e}"))).find(|p| p.is_file());
    }
    named(path).then(|| path.to_path_buf())
}

fn parent_dir(file: &Path) -> PathBuf {
    file.parent().map(Path::to_path_buf).filter(|p| !p.as_os_str().is_empty()).unwrap_or_else(|| PathBuf::from("."))
}

fn build_inner(options: &BuildOptions) -> Result<PathBuf, String> {
    let root = options.root.clone().unwrap_or_else(workspace_root);
    let path = &options.path;
    let default_out = |dir: &Path| dir.join("model.wasm");
    if path.is_dir() && path.join("Cargo.toml").is_file() {
        let core = rust::build(&root, path)?;
        let out = options.output.clone().unwrap_or_else(|| default_out(path));
        encode_file(&core, &out)?;
        return Ok(out);
    }
    if let Some(model_py) = source_file(path, "model", &["py"]) {
        let out = options.output.clone().unwrap_or_else(|| default_out(&parent_dir(&model_py)));
        python::build(&root, &model_py, &out)?;
        return Ok(out);
    }
    if let Some(model_js) = source_file(path, "model", &["js", "mjs"]) {
        let out = options.output.clone().unwrap_or_else(|| default_out(&parent_dir(&model_js)));
        js::build(&root, &model_js, &out)?;
        return Ok(out);
    }
    if path.is_dir() && c::has_sources(path) {
        let scratch = Scratch::new("c")?;
        let core = c::build(&root, path, scratch.path())?;
        let out = options.output.clone().unwrap_or_else(|| default_out(path));
        encode_file(&core, &out)?;
        return Ok(out);
    }
    if path.extension().is_some_and(|e| e == "wasm") && path.is_file() {
        let out = options.output.clone().unwrap_or_else(|| path.with_extension("component.wasm"));
        encode_file(path, &out)?;
        return Ok(out);
    }
    Err(format!(
        "{} is not a guest: expected a Rust crate directory (Cargo.toml), a model.py, a model.js, a directory of \
         C/C++ sources, or a core .wasm module",
        path.display()
    ))
}

/// Encodes a core module (with its component-type custom section) as a component. WASI
/// preview1 imports, if any, are adapted to WASI 0.2 (the adapter is left out when unused).
pub fn encode_component(core: &[u8]) -> Result<Vec<u8>, String> {
    use wasi_preview1_component_adapter_provider::{
        WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME, WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
    };
    wit_component::ComponentEncoder::default()
        .module(core)
        .and_then(|e| {
            e.validate(true).adapter(WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME, WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER)
        })
        .and_then(|mut e| e.encode())
        .map_err(|e| format!("failed to encode the component: {e:#}"))
}

fn encode_file(core: &Path, out: &Path) -> Result<(), String> {
    let bytes = std::fs::read(core).map_err(|e| format!("failed to read {}: {e}", core.display()))?;
    let component = encode_component(&bytes)?;
    write_file(out, &component)
}

fn write_file(out: &Path, bytes: &[u8]) -> Result<(), String> {
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("failed to create {}: {e}", dir.display()))?;
    }
    std::fs::write(out, bytes).map_err(|e| format!("failed to write {}: {e}", out.display()))
}

/// A private temporary directory (new, mode 0700), removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(what: &str) -> Result<Self, String> {
        use std::os::unix::fs::DirBuilderExt;
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        for _ in 0..16 {
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let dir = std::env::temp_dir().join(format!("tessera-guest-{what}-{}-{nanos}-{n}", std::process::id()));
            // `create`, not `create_all`: a directory that already exists is someone else's.
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => return Ok(Self(dir)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(format!("failed to create {}: {e}", dir.display())),
            }
        }
        Err("failed to create a fresh temporary directory".into())
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_core_module_without_wasi_imports_gets_no_adapter() {
        // (module (memory (export "memory") 1)), by hand.
        let core = [
            0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version 1
            0x05, 0x03, 0x01, 0x00, 0x01, // memory section: one memory, min 1 page
            0x07, 0x0a, 0x01, 0x06, b'm', b'e', b'm', b'o', b'r', b'y', 0x02, 0x00, // export "memory"
        ];
        let component = encode_component(&core).expect("encodes");
        assert_eq!(&component[..8], b"\0asm\x0d\0\x01\0", "a component's header");
        let wasi = component.windows(5).any(|w| w == b"wasi:");
        assert!(!wasi, "the preview1 adapter was pulled in by a module that does not use it");
    }

    #[test]
    fn guest_sources_are_recognised_by_their_file_names() {
        let dir = Scratch::new("test").expect("scratch");
        let js = dir.path().join("model.js");
        std::fs::write(&js, "").expect("write");
        assert_eq!(source_file(dir.path(), "model", &["js", "mjs"]), Some(js.clone()));
        assert_eq!(source_file(&js, "model", &["js", "mjs"]), Some(js.clone()));
        assert_eq!(source_file(dir.path(), "model", &["py"]), None);
        assert!(!c::has_sources(dir.path()));
        std::fs::write(dir.path().join("guest.c"), "").expect("write");
        assert!(c::has_sources(dir.path()));
    }
}
