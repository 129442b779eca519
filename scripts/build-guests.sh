#!/usr/bin/env bash
# Builds every example guest (example-guests/) into a model.wasm component with `tessera guest
# build`: the quickstart ones into model-repos/quickstart/<model>/1/, the test guests `faulty`
# and `telemetry_probe` into target/guests/<name>/. Idempotent: an output newer than its guest's sources, the
# SDK and wit/ is left alone. Needs the guest toolchain (scripts/setup-guest-toolchain.sh) and
# the server binary (TESSERA_BIN, default target/debug/tessera). The C guests' bindings come from
# the binary itself, so a rebuilt binary (a changed wit/) is caught through wit/.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BIN=${TESSERA_BIN:-$ROOT/target/debug/tessera}
Q=model-repos/quickstart

build() {  # SRC SDK OUT
  local src=$1 sdk=$2 out=$3
  if [ -s "$out" ] && [ -z "$(find "$src" "$sdk" wit -type f -newer "$out" -not -path '*/target*' -not -name '*.pyc' 2>/dev/null | head -1)" ]; then
    return 0
  fi
  echo "build-guests: $src -> $out" >&2
  mkdir -p "$(dirname "$out")"
  "$BIN" guest build "$src" -o "$out" --root "$ROOT" 2>&1 | grep -v '^wrote ' >&2 || true
  [ -s "$out" ] || { echo "build-guests: failed to build $src" >&2; exit 1; }
  touch "$out"
}

for guest in add_sub_rust bls_add_sub tokenizer bls_router repeat bls_fanout score_label text_pipeline_bls nn_classify; do
  build "example-guests/$guest" guest-sdk/rust "$Q/$guest/1/model.wasm"
done
# JavaScript (componentize-js, scripts/setup-js-toolchain.sh) and C / C++ (clang 22, wasi-libc).
for guest in add_sub_js bls_add_sub_js repeat_js; do
  build "example-guests/$guest" guest-sdk/js "$Q/$guest/1/model.wasm"
done
for guest in add_sub_c bls_add_sub_c add_sub_cpp; do
  build "example-guests/$guest" guest-sdk/c "$Q/$guest/1/model.wasm"
done
# The OpenAI adapter (WASI, for its tokenizer files): one build, in each adapter's directory.
build example-guests/openai_adapter guest-sdk/rust "$Q/tiny_gpt_openai/1/model.wasm"
if ! cmp -s "$Q/tiny_gpt_openai/1/model.wasm" "$Q/minilm_openai/1/model.wasm"; then
  cp "$Q/tiny_gpt_openai/1/model.wasm" "$Q/minilm_openai/1/model.wasm"
fi
build example-guests/faulty guest-sdk/rust target/guests/faulty/model.wasm
build example-guests/telemetry_probe guest-sdk/rust target/guests/telemetry_probe/model.wasm
build example-guests/capability_probe guest-sdk/rust target/guests/capability_probe/model.wasm
build example-guests/add_sub_python/model.py guest-sdk/python "$Q/add_sub_python/1/model.wasm"
build example-guests/bls_fanout_python/model.py guest-sdk/python "$Q/bls_fanout_python/1/model.wasm"
