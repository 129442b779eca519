#!/usr/bin/env bash
# The code habits the test command enforces: rustfmt (rustfmt.toml), clippy with the workspace
# lints as errors, and no source line wider than rustfmt's max_width (rustfmt leaves long string
# literals and comments alone, so they are checked here).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

cargo fmt --all --check
cargo clippy --workspace --all-targets --features torch --quiet -- -D warnings
# The default build (no libtorch) must keep compiling and stay lint-clean too.
cargo clippy --workspace --lib --quiet -- -D warnings

# The layers of host/src, as a crate split would enforce them.
bash scripts/check-layers.sh

max_width=$(sed -n 's/^max_width *= *\([0-9]*\).*/\1/p' rustfmt.toml)
too_long=$(find host python/src -name '*.rs' -not -path '*/target/*' -print0 \
  | xargs -0 awk -v max="$max_width" 'length($0) > max { printf "%s:%d: %d characters\n", FILENAME, FNR, length($0) }')
if [[ -n $too_long ]]; then
  echo "check-style: lines wider than $max_width characters:" >&2
  echo "$too_long" >&2
  exit 1
fi
