#!/usr/bin/env bash
# Sets up (idempotently) and runs every test: style (line counts, rustfmt, clippy, layers), the
# Rust unit and integration tests, the OCI image build (FROM scratch, buildah), then the suite that
# drives the real binary, the image (podman) and the deployment manifests with the real tritonclient
# over 127.0.0.1. Ends with each step's wall time. Arguments go to pytest.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
free_gib() { df -Pk . | awk 'NR == 2 { printf "%.1f", $4 / 1048576 }'; }
times=" start $(free_gib)G"
step() {  # NAME COMMAND...
  local name=$1 t0=$SECONDS rc=0
  shift
  "$@" || rc=$?
  # Each step's wall time and the disk left after it: a step that fails for want of disk (the
  # linker dies with SIGBUS) then says so in the last line.
  times="$times $name $((SECONDS - t0))s,$(free_gib)G"
  return "$rc"
}
image() {
  # The image the deployment tests run: build-image.sh's recipe around a dev-profile server built
  # without the TorchScript backend (the image carries no libtorch). The library is the one
  # setup.sh built, so only the binary links again; scripts/build-image.sh alone makes the
  # release image.
  # (Steps run with errexit off, as the left of `||`: `&&` says what stops this one.)
  cargo build --quiet --bin tessera && mkdir -p target/image \
    && cp target/debug/tessera target/image/tessera-dev \
    && cargo build --quiet --features torch --bin tessera `# puts the suite's binary back` \
    && bash scripts/build-image.sh --binary target/image/tessera-dev
}

step setup bash scripts/setup.sh
step style bash scripts/check-style.sh
# --features torch: the same build setup.sh made, so nothing is rebuilt without the backend.
step rust-tests cargo test --quiet --workspace --features torch
step image image
export TESSERA_BIN="$ROOT/target/debug/tessera"
status=0
# Two workers (TESSERA_TEST_WORKERS; 0: none): much of the suite waits on servers, builds and
# clients, so a second worker fills the other core. tests/conftest.py groups the files.
if [ "$#" -eq 0 ]; then
  # test_ray_serve.py kills a replica under load and times each request: it runs alone first, so
  # the other worker's guest builds cannot starve its two-node cluster.
  step pytest-ray .venv/bin/python -m pytest tests/test_ray_serve.py || status=$?
  set -- --ignore=tests/test_ray_serve.py
fi
step pytest .venv/bin/python -m pytest -n "${TESSERA_TEST_WORKERS:-2}" "$@" || status=$?
echo "test: ${SECONDS}s in all; steps (wall time, GiB free after):$times" >&2
exit "$status"
