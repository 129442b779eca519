//! Rust guests: a crate built for `wasm32-unknown-unknown` (no WASI; the default) or, when its
//! `Cargo.toml` says `[package.metadata.tessera] target = "wasm32-wasip1"`, for WASI preview1, so
//! code written for WASI (`println!`, `std::time::Instant`, `std::fs` under the `filesystem`
//! grant) runs unchanged; the encoder adapts it to WASI 0.2. Both use the toolchain
//! scripts/setup-guest-toolchain.sh installs: Debian's rustc-web with std built from source and
//! LLVM's wasm-ld; WASI builds link Debian's wasi-libc as a reactor (`_initialize` runs once, at
//! instantiation).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const WASM_LD: &str = "/usr/lib/llvm-22/bin/wasm-ld";
const WASI_LIBC: &str = "/usr/lib/wasm32-wasi";

/// The target a guest crate asks for in `[package.metadata.tessera]`.
fn target_of(dir: &Path) -> Result<&'static str, String> {
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml"))
        .map_err(|e| format!("failed to read {}: {e}", dir.join("Cargo.toml").display()))?;
    // A line `target = "..."` under `[package.metadata.tessera]`: enough TOML for this one key.
    let mut in_section = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_section = line == "[package.metadata.tessera]";
            continue;
        }
        let Some((key, value)) = line.split_once('=') else { continue };
        if in_section && key.trim() == "target" {
            // The quoted value; an inline comment after it is not part of it.
            let value = value.trim().strip_prefix('"').and_then(|v| v.split('"').next()).unwrap_or_default();
            return match value {
                "wasm32-unknown-unknown" => Ok("wasm32-unknown-unknown"),
                "wasm32-wasip1" => Ok("wasm32-wasip1"),
                other => Err(format!(
                    "{}: [package.metadata.tessera] target = \"{other}\" is not supported \
                     (wasm32-unknown-unknown or wasm32-wasip1)",
                    dir.display()
                )),
            };
        }
    }
    Ok("wasm32-unknown-unknown")
}

/// Builds a Rust guest crate to a core wasm module and returns its path. Every guest shares
/// `<root>/target/wasm-guests`, so the from-source std is built once per target.
pub(super) fn build(root: &Path, dir: &Path) -> Result<PathBuf, String> {
    if !Path::new("/usr/bin/cargo").exists() || !Path::new(WASM_LD).exists() {
        return Err("the Rust guest toolchain is missing: run scripts/setup-guest-toolchain.sh".into());
    }
    let target = target_of(dir)?;
    let path = format!("/usr/bin:{}", std::env::var("PATH").unwrap_or_default());
    let mut cargo = Command::new("/usr/bin/cargo");
    cargo
        .current_dir(dir)
        .env("PATH", path)
        .env("RUSTC_BOOTSTRAP", "1")
        .env("CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER", WASM_LD)
        .env("CARGO_TARGET_WASM32_WASIP1_LINKER", WASM_LD)
        .env("CARGO_TARGET_DIR", root.join("target/wasm-guests"))
        .env("CARGO_PROFILE_RELEASE_PANIC", "abort")
        .env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("RUSTC")
        .env_remove("CARGO")
        // Flags meant for the host would override the guest target's own (wasi-libc, reactor).
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS");
    if target == "wasm32-wasip1" {
        if !Path::new(WASI_LIBC).join("crt1-reactor.o").exists() {
            return Err("wasi-libc is missing: run scripts/setup-guest-toolchain.sh".into());
        }
        // Debian's wasi-libc, not a self-contained one; linked as a reactor (no `main`).
        cargo.env(
            "CARGO_TARGET_WASM32_WASIP1_RUSTFLAGS",
            format!("-L native={WASI_LIBC} -C link-self-contained=no -C link-arg={WASI_LIBC}/crt1-reactor.o"),
        );
    }
    let output = cargo
        .args([
            "build",
            "--release",
            "-Zbuild-std=std,panic_abort",
            "--target",
            target,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_comes_from_the_crates_tessera_metadata() {
        let scratch = super::super::Scratch::new("test").expect("scratch");
        let dir = scratch.path();
        let write = |body: &str| std::fs::write(dir.join("Cargo.toml"), body).expect("write");
        write("[package]\nname = \"g\"\n");
        assert_eq!(target_of(dir), Ok("wasm32-unknown-unknown"));
        write("[package]\nname = \"g\"\n[package.metadata.tessera]\ntarget = \"wasm32-wasip1\"\n");
        assert_eq!(target_of(dir), Ok("wasm32-wasip1"));
        write("[package.metadata.tessera]\ntarget = \"wasm32-wasip2\"\n");
        assert!(target_of(dir).expect_err("unsupported").contains("wasm32-wasip2"));
        write("[dependencies]\ntarget = \"wasm32-wasip1\"\n");
        assert_eq!(target_of(dir), Ok("wasm32-unknown-unknown"), "only the tessera section counts");
        write("[package.metadata.tessera]\ntarget-dir = \"x\"\ntarget = \"wasm32-wasip1\" # WASI\n");
        assert_eq!(target_of(dir), Ok("wasm32-wasip1"), "other keys and comments are not the target");
    }
}
