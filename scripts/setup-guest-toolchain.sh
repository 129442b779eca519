#!/usr/bin/env bash
# Idempotent setup of the toolchains that build Rust, C and C++ guests (models written as
# WebAssembly components, see guest-sdk/rust/ and guest-sdk/c/) on a fresh Debian 12 machine of
# this kind. JavaScript guests: scripts/setup-js-toolchain.sh.
#
#   usage: scripts/setup-guest-toolchain.sh
#
# rustup cannot add the wasm32 targets here, so Rust guests are built with Debian's own Rust
# (rustc-web / cargo-web 1.96 from bookworm-security, installed as /usr/bin/rustc and
# /usr/bin/cargo), whose std is compiled from source (rust-web-src, -Zbuild-std) and linked with
# LLVM 22's wasm-ld (lld-22). wabt provides wasm-objdump, used to check the built modules.
# The host (the tessera server) keeps building with the normal rustup toolchain; /usr/bin only comes
# first on PATH inside `tessera guest build` (host/src/guest/rust.rs).
#
# Silent on a no-op run; progress goes to stderr. Installs with apt (needs root), runs
# `apt-get update` only when something is missing or too old.
set -euo pipefail

# C and C++ guests: clang 22 for wasm32-wasi with its builtins, wasi-libc, libc++ / libc++abi.
PACKAGES=(rustc-web cargo-web rust-web-src lld-22 wabt
          clang-22 libclang-rt-22-dev-wasm32 wasi-libc libc++-22-dev-wasm32 libc++abi-22-dev-wasm32)
MIN_RUSTC=1.96          # the version the guest build recipe was verified with
WASM_LD=/usr/lib/llvm-22/bin/wasm-ld

log() { echo "setup-guest-toolchain: $*" >&2; }

installed() { # PACKAGE -> 0 when dpkg has it fully installed
  [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" == "install ok installed" ]]
}

rustc_ok() { # /usr/bin/rustc exists and is at least MIN_RUSTC
  local v
  v=$(/usr/bin/rustc --version 2>/dev/null | awk '{print $2}') || return 1
  [[ -n "$v" ]] || return 1
  [[ "$(printf '%s\n%s\n' "$MIN_RUSTC" "${v%%-*}" | sort -V | head -n1)" == "$MIN_RUSTC" ]]
}

missing=()
for p in "${PACKAGES[@]}"; do
  installed "$p" || missing+=("$p")
done
if installed rustc-web && ! rustc_ok; then
  missing+=(rustc-web cargo-web rust-web-src)   # installed but older than the verified version
fi

if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    log "missing or outdated: ${missing[*]}; run me as root (or: sudo apt-get install ${PACKAGES[*]})"
    exit 1
  fi
  log "installing ${missing[*]} (apt)"
  export DEBIAN_FRONTEND=noninteractive
  apt_opts=(-o DPkg::Lock::Timeout=300 -qq)
  apt_log=$(mktemp)
  trap 'rm -f "$apt_log"' EXIT
  # rustc-web 1.96 and lld-22 come from bookworm-security: stale lists only offer 1.85, so update.
  if ! { apt-get "${apt_opts[@]}" update && \
         apt-get "${apt_opts[@]}" install -y --no-install-recommends "${missing[@]}"; } >"$apt_log" 2>&1; then
    cat "$apt_log" >&2
    log "apt-get failed"
    exit 1
  fi
fi

# Check the result, so a half-working toolchain fails here rather than in the middle of a build.
fail=0
if ! rustc_ok; then
  log "/usr/bin/rustc is $(/usr/bin/rustc --version 2>/dev/null || echo missing); need >= $MIN_RUSTC"
  log "  (apt-cache policy rustc-web: is bookworm-security in the apt sources?)"
  fail=1
fi
[[ -x /usr/bin/cargo ]] || { log "/usr/bin/cargo missing (package cargo-web)"; fail=1; }
[[ -x $WASM_LD ]] || { log "$WASM_LD missing (package lld-22)"; fail=1; }
[[ -x /usr/bin/clang-22 ]] || { log "/usr/bin/clang-22 missing (package clang-22)"; fail=1; }
[[ -f /usr/lib/wasm32-wasi/crt1-reactor.o ]] || { log "wasi-libc missing (package wasi-libc)"; fail=1; }
if [[ ! -f /usr/lib/rustlib/src/rust/library/Cargo.lock ]]; then
  log "std sources missing at /usr/lib/rustlib/src/rust/library (package rust-web-src)"
  fail=1
fi
exit $fail
