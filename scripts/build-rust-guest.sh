#!/usr/bin/env bash
# Builds a Rust guest (a crate using guest-sdk/rust, crate-type cdylib) into a core wasm module.
#
#   usage: scripts/build-rust-guest.sh DIR [OUT.wasm]
#
#   DIR   the guest crate (the directory holding its Cargo.toml; it may be a workspace member,
#         as the crates in example-guests/ are)
#   OUT   where to copy the core module (default DIR/target-out/guest.core.wasm)
#
# The core module carries wit-bindgen's component-type custom section; `tessera guest build`
# turns it into the component (model.wasm) that a model repository serves.
#
# How: rustup cannot add wasm32 targets here, so this uses Debian's rustc-web/cargo-web (/usr/bin,
# installed by scripts/setup-guest-toolchain.sh, which runs first and is silent when nothing is
# missing), builds std from source (-Zbuild-std, allowed on a stable compiler by
# RUSTC_BOOTSTRAP=1) and links with LLVM 22's wasm-ld. Only the guest's build sees this: the host
# keeps building with the rustup toolchain.
#
# Env: CARGO_TARGET_DIR (default <repo>/target/wasm-guests, shared by all guests so std is built
# once: ~3 min cold, seconds warm), CARGO_BUILD_JOBS (cargo's -j). RUSTFLAGS and RUSTC* settings
# meant for the host are ignored. Prints the output path on stdout; cargo's progress and a
# summary go to stderr. Checks the module's imports/exports with wasm-objdump (wabt).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WASM_LD=/usr/lib/llvm-22/bin/wasm-ld

die() { echo "build-rust-guest: $*" >&2; exit 1; }

case "${1:-}" in
  -h|--help|"") sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//' >&2; [[ -n "${1:-}" ]]; exit $? ;;
esac
[[ $# -le 2 ]] || die "too many arguments (usage: $0 DIR [OUT.wasm])"

DIR=$(cd "$1" 2>/dev/null && pwd) || die "no such directory: $1"
MANIFEST=$DIR/Cargo.toml
[[ -f $MANIFEST ]] || die "no Cargo.toml in $DIR"
OUT=${2:-$DIR/target-out/guest.core.wasm}

bash "$ROOT/scripts/setup-guest-toolchain.sh"

# Debian's toolchain first; nothing from a host build (or from a cargo that runs us) leaks in.
export PATH=/usr/bin:$PATH
unset RUSTC RUSTDOC RUSTC_WRAPPER RUSTC_WORKSPACE_WRAPPER RUSTUP_TOOLCHAIN RUSTFLAGS \
  CARGO_ENCODED_RUSTFLAGS CARGO_BUILD_RUSTFLAGS CARGO_BUILD_TARGET CARGO_BUILD_RUSTC \
  CARGO_BUILD_RUSTC_WRAPPER CARGO_BUILD_RUSTDOC
export RUSTC_BOOTSTRAP=1
export CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER=$WASM_LD
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target/wasm-guests}
# std is built with panic_abort: the guest must abort too, whatever its Cargo.toml says.
export CARGO_PROFILE_RELEASE_PANIC=abort

json=$(mktemp)
trap 'rm -f "$json"' EXIT
start=$(date +%s)
/usr/bin/cargo build --release --manifest-path "$MANIFEST" \
  -Zbuild-std=std,panic_abort --target wasm32-unknown-unknown \
  --message-format=json-render-diagnostics >"$json"

# The cdylib artifact of the crate in DIR (not of its dependencies).
built=$(grep '"reason":"compiler-artifact"' "$json" \
  | grep -F "\"manifest_path\":\"$MANIFEST\"" \
  | grep -o '"filenames":\[[^]]*\]' | grep -o '"[^"]*\.wasm"' | tr -d '"' | tail -n1 || true)
[[ -n $built && -f $built ]] || die "cargo built no .wasm for $MANIFEST (is crate-type [\"cdylib\"] set?)"

mkdir -p "$(dirname "$OUT")"
cp "$built" "$OUT.tmp" && mv "$OUT.tmp" "$OUT"

# Check what the host will get: the world's exports and realloc, only imports the host provides
# (the contract and wasi:nn; this script builds for wasm32-unknown-unknown, so no WASI: crates
# built for wasm32-wasip1 go through `tessera guest build`), and wit-bindgen's component-type
# section.
if command -v wasm-objdump >/dev/null 2>&1; then
  details=$(wasm-objdump -x "$OUT")
  problems=()
  for e in initialize execute finalize memory; do
    grep -qE "^ - [a-z]+\[[0-9]+\].* -> \"$e\"$" <<<"$details" || problems+=("no export \"$e\"")
  done
  grep -qE -- '-> "cabi_realloc' <<<"$details" || problems+=("no cabi_realloc export")
  bad_imports=$(grep -E '^ - .* <- ' <<<"$details" | sed -E 's/.* <- //' \
    | grep -vE '^(tessera:model/(types|host)@0\.1\.0|wasi:nn/(tensor|graph|inference|errors)@0\.2\.0-rc-2024-10-28)\.' || true)
  [[ -z $bad_imports ]] || problems+=("imports from other modules: $(tr '\n' ' ' <<<"$bad_imports")")
  grep -q '"component-type:' <<<"$details" || problems+=("no component-type custom section")
  if ((${#problems[@]})); then
    printf 'build-rust-guest: %s: %s\n' "$OUT" "${problems[@]}" >&2
    exit 1
  fi
fi

echo "build-rust-guest: $(basename "$DIR") -> $OUT ($(stat -c %s "$OUT") bytes, $(( $(date +%s) - start )) s)" >&2
echo "$OUT"
