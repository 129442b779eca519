#!/usr/bin/env bash
# Idempotent Python setup for Tessera's tests and tools.
#
#   usage: scripts/setup-python.sh [--print-ort-lib]
#
#   1. creates .venv (python3 -m venv) when missing, or recreates it when its interpreter no longer
#      runs (e.g. a .venv copied from another machine);
#   2. installs tests/requirements.txt only when that file changed since the last successful install
#      (its sha256 is kept in .venv/.requirements.sha256);
#   3. runs scripts/gen_models.py to (re)generate model-repos/quickstart/*/1/model.onnx when one is
#      missing, when gen_models.py is newer than one of them, or after a (re)install;
#   4. installs libtorch for the TorchScript backend: the torch 2.11.0 wheel with --no-deps plus the
#      two CUDA runtime wheels libtorch_cpu.so links against (cudart, cupti; ~1.2 GB in all, no
#      other CUDA wheel: the server's CPU path never loads them), links .venv/libtorch to it (what
#      .cargo/config.toml's LIBTORCH points at) and writes the TorchScript models with
#      scripts/gen_torch_models.py (no `import torch`: that would need 3 GB more of CUDA wheels);
#   5. records the path of the onnxruntime shared library shipped in the venv's onnxruntime wheel in
#      .venv/ort-lib-path; with --print-ort-lib it also prints that path (only that) on stdout,
#      e.g.  ORT_LIB=$(scripts/setup-python.sh --print-ort-lib)
#
# Silent on a no-op run. Progress goes to stderr. Needs python >= 3.11 (numpy 2.4) and network
# access to PyPI on the first run only. Env: PYTHON (interpreter used to create the venv, default
# python3), TESSERA_VENV (default <repo>/.venv).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${TESSERA_VENV:-$ROOT/.venv}
REQ=$ROOT/tests/requirements.txt
GEN=$ROOT/scripts/gen_models.py
MODELS_DIR=$ROOT/model-repos/quickstart
MODEL_FILES=(add_sub/1/model.onnx simple/1/model.onnx classifier/1/model.onnx text_scorer/1/model.onnx simple_sequence/1/model.onnx)
PY=${PYTHON:-python3}

print_ort=0
case "${1:-}" in
  "") ;;
  --print-ort-lib) print_ort=1 ;;
  -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "usage: $0 [--print-ort-lib]" >&2; exit 2 ;;
esac

log() { echo "setup-python: $*" >&2; }

# Serialize concurrent runs (parallel test jobs) for this checkout.
LOCK=${TMPDIR:-/tmp}/tessera-setup-python.$(printf '%s' "$VENV" | sha256sum | cut -c1-16).lock
exec 9>"$LOCK"
flock 9

# 1. venv -----------------------------------------------------------------------------------------
venv_ok() { "$VENV/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; }
if ! venv_ok; then
  "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || { log "$PY is $("$PY" -V 2>&1); need python >= 3.11 (set PYTHON=...)"; exit 1; }
  if [ -e "$VENV" ]; then
    log "recreating $VENV (its interpreter does not run here)"
    "$PY" -m venv --clear "$VENV"
  else
    log "creating $VENV"
    "$PY" -m venv "$VENV"
  fi
fi

# 2. requirements ---------------------------------------------------------------------------------
STAMP=$VENV/.requirements.sha256
# tests/requirements-ray.txt includes requirements.txt (pip resolves both together; see there).
REQ_ALL=$(dirname "$REQ")/requirements-ray.txt
want=$(cat "$REQ" "$REQ_ALL" | sha256sum | cut -d' ' -f1)
have=$(cat "$STAMP" 2>/dev/null || true)
installed=0
if [ "$want" != "$have" ]; then
  log "installing $(realpath --relative-to="$ROOT" "$REQ_ALL") (with requirements.txt) into $VENV"
  rm -f "$STAMP"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -r "$REQ_ALL"
  echo "$want" > "$STAMP"
  installed=1
fi

# 3. model files ----------------------------------------------------------------------------------
regen=$installed
for f in "${MODEL_FILES[@]}"; do
  if [ ! -s "$MODELS_DIR/$f" ] || [ "$GEN" -nt "$MODELS_DIR/$f" ]; then regen=1; fi
done
if [ "$regen" = 1 ]; then
  "$VENV/bin/python" "$GEN" "$MODELS_DIR"
  log "models OK in $(realpath --relative-to="$ROOT" "$MODELS_DIR")"
fi

# 4. libtorch ---------------------------------------------------------------------------------------
# tch 0.24 is built against torch 2.11.0; the GPU machine's python3 ships the same torch.
TORCH_PINS=("torch==2.11.0" "nvidia-cuda-runtime==13.0.96.*" "nvidia-cuda-cupti==13.0.85.*")
TORCH_STAMP=$VENV/.torch-installed
if [ "$(cat "$TORCH_STAMP" 2>/dev/null || true)" != "${TORCH_PINS[*]}" ]; then
  log "installing libtorch (${TORCH_PINS[*]}, --no-deps) into $VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-input --no-deps "${TORCH_PINS[@]}"
  echo "${TORCH_PINS[*]}" > "$TORCH_STAMP"
fi
torch_dirs=("$VENV"/lib/python3*/site-packages/torch)
[ -f "${torch_dirs[0]}/lib/libtorch_cpu.so" ] || { log "libtorch_cpu.so missing under ${torch_dirs[0]}"; exit 1; }
if [ "$(readlink "$VENV/libtorch" 2>/dev/null || true)" != "${torch_dirs[0]}" ]; then
  ln -sfn "${torch_dirs[0]}" "$VENV/libtorch"
fi
TORCH_GEN=$ROOT/scripts/gen_torch_models.py
for f in text_scorer_torch/1/model.pt linear_classifier/1/model.pt; do
  if [ ! -s "$MODELS_DIR/$f" ] || [ "$TORCH_GEN" -nt "$MODELS_DIR/$f" ]; then
    "$VENV/bin/python" "$TORCH_GEN" "$MODELS_DIR"
    log "TorchScript models OK in $(realpath --relative-to="$ROOT" "$MODELS_DIR")"
    break
  fi
done

# 5. onnxruntime shared library -------------------------------------------------------------------
shopt -s nullglob
libs=("$VENV"/lib/python3*/site-packages/onnxruntime/capi/libonnxruntime.so.[0-9]*)
shopt -u nullglob
[ "${#libs[@]}" -eq 1 ] || { log "expected one libonnxruntime.so.* in the venv, found ${#libs[@]}: ${libs[*]:-none}"; exit 1; }
ORT_LIB=${libs[0]}
if [ "$(cat "$VENV/ort-lib-path" 2>/dev/null || true)" != "$ORT_LIB" ]; then
  echo "$ORT_LIB" > "$VENV/ort-lib-path"
fi
if [ "$print_ort" = 1 ]; then echo "$ORT_LIB"; fi
