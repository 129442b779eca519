#!/usr/bin/env bash
# The function cache's gain (host/src/backend/wasm/functions.rs): compile times of two Python
# guests that differ only in their model.py, through the server's compiler process
# (`tessera compile-component`), with an empty function cache and with one holding the other
# guest's functions. Per guest kind (numpy: the python_backend add_sub example; plain:
# example-guests/add_sub_python), ROUNDS rounds (default 3) of: A cold, then B from A's functions.
#
#   usage: ROUNDS=3 bench/compile_functions.sh      (TESSERA_BIN: default target/release/tessera)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${TESSERA_BIN:-$ROOT/target/release/tessera}
ROUNDS=${ROUNDS:-3}
WORK=$(mktemp -d /tmp/tessera-compile-bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# guest NAME SOURCE_DIR VARIANT: builds SOURCE_DIR's model.py with a variant line into NAME.wasm.
guest() {
  mkdir -p "$WORK/$1"
  cp "$2/model.py" "$WORK/$1/model.py"
  echo "VARIANT = $3" >>"$WORK/$1/model.py"
  bash "$ROOT/scripts/build-python-guest.sh" "$WORK/$1" "$WORK/$1.wasm" >/dev/null
}

# seconds FUNCTIONS_DIR WASM: one compile's wall time.
seconds() {
  local start ms
  start=$(date +%s%N)
  "$BIN" compile-component --output "$WORK/out.cwasm" --function-cache "$1" <"$2"
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  printf '%d.%02d' $((ms / 1000)) $((ms % 1000 / 10))
}

for kind in numpy plain; do
  case $kind in
    numpy) src=$ROOT/tests/third_party/python_backend/examples/add_sub ;;
    plain) src=$ROOT/example-guests/add_sub_python ;;
  esac
  guest "$kind-a" "$src" 1
  guest "$kind-b" "$src" 2
  for r in $(seq "$ROUNDS"); do
    rm -rf "$WORK/functions"
    cold=$(seconds "$WORK/functions" "$WORK/$kind-a.wasm")
    reused=$(seconds "$WORK/functions" "$WORK/$kind-b.wasm")
    entries=$(find "$WORK/functions" -name '*.fn' | wc -l)
    echo "$kind round $r: cold ${cold} s, second guest ${reused} s, $entries functions cached"
  done
done
