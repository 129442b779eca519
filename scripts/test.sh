#!/usr/bin/env bash
# Sets up (idempotently) and runs every test: Rust unit tests, then the integration suite that
# drives the real binary with the real tritonclient over 127.0.0.1.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
bash scripts/setup.sh
cargo test --workspace
export TESSERA_BIN="$ROOT/target/debug/tessera"
exec .venv/bin/python -m pytest "$@"
