#!/usr/bin/env bash
# The code habits the test command enforces: size limits on source files, README.md and
# docs/benchmarks.md; rustfmt (rustfmt.toml), clippy with the workspace lints as errors, and no
# source line wider than rustfmt's max_width (rustfmt leaves long string literals and comments
# alone, so they are checked here).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

# Sizes first: they cost nothing, so a breach fails before the slow cargo steps. Every tracked
# Rust, Python and shell file stays within max_lines; README.md stays a short entry point and
# docs/benchmarks.md a summary.
max_lines=700
readme_max_lines=150
readme_max_width=200
benchmarks_max_lines=300
# Exempt from max_lines, by explicit path prefix: code copied verbatim from other projects (their
# licences ship with it), which the tests run as-is.
size_exempt=(
  tests/third_party/
)
size_errors=()
sources=$(git ls-files -- '*.rs' '*.py' '*.sh')
while IFS= read -r file; do
  exempt=0
  for prefix in "${size_exempt[@]}"; do
    [[ $file == "$prefix"* ]] && exempt=1
  done
  ((exempt)) || [[ ! -f $file ]] && continue
  lines=$(wc -l <"$file")
  ((lines > max_lines)) && size_errors+=("$file: $lines lines (at most $max_lines for a source file)")
done <<<"$sources"
lines=$(wc -l <README.md)
((lines > readme_max_lines)) && size_errors+=("README.md: $lines lines (at most $readme_max_lines)")
# perl counts characters where awk may count bytes (README.md has µ and dashes).
while IFS= read -r wide; do
  size_errors+=("$wide")
done < <(max=$readme_max_width perl -CSD -nle \
  'printf "README.md:%d: %d characters (at most %d a line)\n", $., length, $ENV{max} if length > $ENV{max}' README.md)
lines=$(wc -l <docs/benchmarks.md)
((lines > benchmarks_max_lines)) && size_errors+=("docs/benchmarks.md: $lines lines (at most $benchmarks_max_lines)")
if ((${#size_errors[@]})); then
  echo "check-style: files over their size limits:" >&2
  printf '  %s\n' "${size_errors[@]}" >&2
  exit 1
fi

cargo fmt --all --check
cargo clippy --workspace --all-targets --features torch --quiet -- -D warnings
# The default build (no libtorch) must keep compiling and stay lint-clean too.
cargo clippy --quiet -- -D warnings
# One build of the server library serves the binary and the Python module.
bash scripts/check-one-build.sh

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
