#!/usr/bin/env bash
# Sets up (idempotently) and runs every test: style (rustfmt, clippy, line width), the Rust unit
# and integration tests, the OCI image build (FROM scratch, buildah), then the suite that drives
# the real binary, the image (podman) and the deployment manifests with the real tritonclient over
# 127.0.0.1.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
bash scripts/setup.sh
bash scripts/check-style.sh
# --features torch: the same build setup.sh made, so the binary the Python suite runs is not rebuilt
# without the TorchScript backend.
cargo test --workspace --features torch
# The image tests/test_deploy.py runs under podman (release build, stripped; prints its size).
bash scripts/build-image.sh
export TESSERA_BIN="$ROOT/target/debug/tessera"
exec .venv/bin/python -m pytest "$@"
