//! C and C++ guests: a directory of `.c` (and `.cpp` / `.cc` / `.cxx`) files.
//!
//! The bindings of the `model-nn` world (Tessera's contract plus wasi:nn) are generated in-process
//! by the `wit-bindgen-c` library (`model_nn.h`, `model_nn.c`, `model_nn_component_type.o`), the
//! C SDK (`guest-sdk/c`: `tessera.h`, `tessera.c`) is compiled with the guest's sources by Debian's
//! clang 22 for `wasm32-wasi` against wasi-libc (and libc++ for C++), linked by wasm-ld as a
//! reactor, and the core module is encoded with WASI's preview1 adapter (`printf` and friends
//! become WASI 0.2 imports; the host discards their output: log with `tessera_log`).
//!
//! `CFLAGS`, `CXXFLAGS` and `LDFLAGS` from the environment are added (split on whitespace).

use std::path::{Path, PathBuf};
use std::process::Command;

use wit_bindgen_core::wit_parser::Resolve;

const CLANG: &str = "/usr/bin/clang-22";
const CLANGXX: &str = "/usr/bin/clang++-22";
const WASM_LD: &str = "/usr/lib/llvm-22/bin/wasm-ld";
/// The world C guests are built against.
const WORLD: &str = "model-nn";

const C_EXTENSIONS: [&str; 1] = ["c"];
const CXX_EXTENSIONS: [&str; 3] = ["cpp", "cc", "cxx"];

fn extension_of(path: &Path) -> Option<&str> {
    path.extension().and_then(|e| e.to_str())
}

/// The guest's own sources: the C and C++ files directly in `dir`, sorted. Generated bindings
/// that `tessera guest bindgen c` may have left there (`model_nn.c`) are not: the build makes its
/// own.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .filter(|p| p.file_stem().is_none_or(|stem| stem != "model_nn"))
        .filter(|p| extension_of(p).is_some_and(|e| C_EXTENSIONS.contains(&e) || CXX_EXTENSIONS.contains(&e)))
        .collect();
    files.sort();
    files
}

pub(super) fn has_sources(dir: &Path) -> bool {
    !sources(dir).is_empty()
}

/// Writes the generated C bindings of the `model-nn` world into `out`.
pub fn write_bindings(root: &Path, out: &Path) -> Result<(), String> {
    let wit = root.join("wit");
    let mut resolve = Resolve::default();
    let (package, _) = resolve.push_path(&wit).map_err(|e| format!("failed to read {}: {e:#}", wit.display()))?;
    let world =
        resolve.select_world(&[package], Some(WORLD)).map_err(|e| format!("no world '{WORLD}' in wit/: {e:#}"))?;
    let mut files = wit_bindgen_core::Files::default();
    wit_bindgen_c::Opts::default()
        .build()
        .generate(&mut resolve, world, &mut files)
        .map_err(|e| format!("failed to generate the C bindings: {e:#}"))?;
    std::fs::create_dir_all(out).map_err(|e| format!("failed to create {}: {e}", out.display()))?;
    for (name, bytes) in files.iter() {
        super::write_file(&out.join(name), bytes)?;
    }
    Ok(())
}

fn flags(var: &str) -> Vec<String> {
    std::env::var(var).map(|v| v.split_whitespace().map(String::from).collect()).unwrap_or_default()
}

fn run(command: &mut Command, what: &str) -> Result<(), String> {
    let status = command.status().map_err(|e| format!("failed to run {what}: {e}"))?;
    if status.success() { Ok(()) } else { Err(format!("{what} failed")) }
}

/// Builds the guest in `dir` to a core module under `scratch`; returns its path.
pub(super) fn build(root: &Path, dir: &Path, scratch: &Path) -> Result<PathBuf, String> {
    let guest_sources = sources(dir);
    let cxx = guest_sources.iter().any(|p| extension_of(p).is_some_and(|e| CXX_EXTENSIONS.contains(&e)));
    for tool in [CLANG, WASM_LD].into_iter().chain(cxx.then_some(CLANGXX)) {
        if !Path::new(tool).exists() {
            return Err(format!("{tool} is missing: run scripts/setup-guest-toolchain.sh (the C guest toolchain)"));
        }
    }
    let bindings = scratch.join("bindings");
    write_bindings(root, &bindings)?;
    let sdk = root.join("guest-sdk/c");
    let objects_dir = scratch.join("obj");
    std::fs::create_dir_all(&objects_dir).map_err(|e| format!("failed to create {}: {e}", objects_dir.display()))?;
    let all_sources =
        guest_sources.iter().cloned().chain([sdk.join("tessera.c"), bindings.join("model_nn.c")]).collect::<Vec<_>>();
    let mut objects = Vec::with_capacity(all_sources.len() + 1);
    for (i, source) in all_sources.iter().enumerate() {
        let is_cxx = extension_of(source).is_some_and(|e| CXX_EXTENSIONS.contains(&e));
        let object = objects_dir.join(format!("{i}.o"));
        let mut compile = Command::new(if is_cxx { CLANGXX } else { CLANG });
        compile
            .args(["--target=wasm32-wasi", "--sysroot=/usr", "-O2", "-Wno-deprecated", "-c"])
            .arg("-I")
            .arg(&bindings)
            .arg("-I")
            .arg(&sdk)
            .arg("-I")
            .arg(dir);
        if is_cxx {
            // wasi-libc's libc++ has no exception runtime.
            compile.arg("-fno-exceptions").args(flags("CXXFLAGS"));
        } else {
            compile.args(flags("CFLAGS"));
        }
        run(compile.arg(source).arg("-o").arg(&object), &format!("compiling {}", source.display()))?;
        objects.push(object);
    }
    objects.push(bindings.join("model_nn_component_type.o"));
    let core = scratch.join("core.wasm");
    let mut link = Command::new(if cxx { CLANGXX } else { CLANG });
    link.args(["--target=wasm32-wasi", "--sysroot=/usr", "-mexec-model=reactor", "-Wno-deprecated"])
        .arg(format!("-fuse-ld={WASM_LD}"))
        // Debian's wasi-libc carries DWARF: 50 KB of it in a trivial guest.
        .arg("-Wl,--strip-debug")
        .args(flags("LDFLAGS"))
        .args(&objects)
        .arg("-o")
        .arg(&core);
    run(&mut link, &format!("linking the guest in {}", dir.display()))?;
    Ok(core)
}
