#!/usr/bin/env bash
# Idempotent setup for a fresh machine of this kind (Debian 12, rustup toolchain, CPython 3.11):
#   1. Python venv (.venv) with onnx, onnxruntime (its wheel ships libonnxruntime.so, which the
#      server loads at run time), tritonclient, componentize-py and pytest; generates the
#      quickstart ONNX models.
#   2. The guest toolchains: Rust (Debian's rustc-web with std sources, wasm-ld), C/C++ (clang 22,
#      wasi-libc, libc++; apt) and JavaScript (componentize-js; npm ci into .tools/js).
#   3. Builds the server with the TorchScript backend (`--features torch`; LIBTORCH comes from
#      .cargo/config.toml, pointing at the torch wheel setup-python.sh installs). One shared
#      target/ dir; dev profile with optimised dependencies.
#   4. Builds the example WebAssembly guests into the quickstart repository, numpy for Python
#      guests (scripts/build-numpy-wasi.sh, cached outside the checkout by version) and the
#      quickstart's model.py models into the server's cache of built Python guests (`tessera
#      guest prepare`), so that a first start only loads them.
#   5. pip-installs the `tessera` Python package (python/, maturin + PyO3, release build) into .venv.
# Quiet when there is nothing to do. Safe to run repeatedly.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

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

bash scripts/setup-python.sh
bash scripts/setup-guest-toolchain.sh
bash scripts/setup-js-toolchain.sh
cargo build --quiet --features torch --bin tessera
# The `tessera` Python package (python/: the server library through PyO3, PyTriton's API), pip-
# installed from the checkout into .venv in editable mode (its Python files are used in place).
# maturin builds the native module with the release profile: the dev profile's module is about
# 2x slower per call. Cargo decides what to rebuild: seconds when nothing changed.
if ! out=$(PATH=$ROOT/.venv/bin:$PATH .venv/bin/pip install --quiet --no-build-isolation --no-deps \
    --editable ./python 2>&1); then
  echo "$out" >&2
  exit 1
fi
bash scripts/build-guests.sh
bash scripts/build-numpy-wasi.sh
if ! out=$(target/debug/tessera guest prepare model-repos/quickstart 2>&1); then
  echo "$out" >&2
  exit 1
fi
