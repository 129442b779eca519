#!/usr/bin/env bash
# Builds a Triton-style Python model (model.py with class TritonPythonModel) into a Tessera
# WebAssembly component (world tessera:model/model in wit/model.wit) with componentize-py.
#
#   usage: scripts/build-python-guest.sh [--stub-wasi] MODEL_DIR_OR_FILE OUT.wasm
#
#   MODEL_DIR_OR_FILE  a directory holding model.py (e.g. a Triton version directory
#                      `my_model/1`), or the .py file itself (any name). The file's directory is on
#                      the guest's module path, so model.py may import sibling .py modules; only
#                      modules that are imported end up in the component (data files do not: read
#                      them through the `filesystem = read-only` model parameter instead).
#   OUT.wasm           the component to write (e.g. my_model/1/model.wasm).
#   TESSERA_PYTHON_PATH=dir1:dir2  more directories of pure-Python modules for the guest.
#   --stub-wasi        replace every WASI import with a trapping stub (the component then imports
#                      only tessera:model). Clocks (time.time, datetime.now) and os.urandom
#                      trap, and `random` replays the seed baked in at build time; print()
#                      still works (the SDK sends stdout/stderr to the host log).
#
# The guest imports `triton_python_backend_utils` from guest-sdk/python. Module-level code of
# model.py runs once, at build time (componentize-py pre-initializes the interpreter and
# snapshots it).
#
# numpy: when a .py file beside model.py imports numpy (or requirements.txt names it), the numpy
# that scripts/build-numpy-wasi.sh builds for wasm32-wasi (cached; 3-4 min of CPU the first time)
# goes into the guest; other guests do not carry it (~20 MB without numpy, ~41 MB with it).
# requests: when the model's code imports it (and requirements.txt does not name it), requests,
# urllib3, idna, certifi and charset_normalizer (pure Python, as the builder's environment has
# them) go into the guest; a request from the guest fails with a clear error (no network grant).
# requirements.txt beside model.py: its pure-Python wheels (py3-none-any) are installed for the
# guest's Python 3.14 and bundled, cached by the file's content; a requirement with native code
# (other than numpy) fails the build with its name.
#
# requirements.txt is data, never instructions: each line must be a package name with an optional
# exact version (`name==1.2`), extras, an environment marker and `--hash=` options; pip options,
# URLs, paths, `-r`/`-c` and version ranges are refused, naming the line (scripts/
# python_guest_deps.py). Only wheels are installed, from pip's configured index: no sdist build
# ever runs.
#
# TESSERA_BUILD_PHASE: `fetch` only installs requirements.txt's wheels into the dependency cache
# (the one part that needs the network); `build` does the rest offline, failing if numpy or the
# wheels are not in the caches; unset, both. The server runs the two phases as separate confined
# processes (host/src/backend/python/confine.rs): the fetch may write only the dependency cache
# and its build directory, the build only its build directory, with no network.
#
# componentize-py comes from $COMPONENTIZE_PY, else <repo>/.venv/bin/componentize-py (installed by
# scripts/setup-python.sh from tests/requirements.txt), else PATH. About 5-30 s and 0.4-0.7 GB of
# RAM per build. TESSERA_CACHE_DIR: where numpy and dependency builds are cached (default
# ${XDG_CACHE_HOME:-~/.cache}/tessera).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SDK=$ROOT/guest-sdk/python

# Run by the server, this shell only supervises: the server gives it SIGTERM when it dies
# (PR_SET_PDEATHSIG), and it then kills its whole process group (componentize-py, pip), which
# would otherwise run on orphaned. `wait` returns at once when a trapped signal arrives.
if [ -n "${TESSERA_BUILD_PHASE:-}" ] && [ -z "${TESSERA_BUILD_SUPERVISED:-}" ]; then
  trap 'kill -KILL 0' TERM
  TESSERA_BUILD_SUPERVISED=1 bash "${BASH_SOURCE[0]}" "$@" &
  build=$!
  wait "$build"
  exit $?
fi
WIT=$ROOT/wit

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

stub=()
args=()
for a in "$@"; do
  case "$a" in
    --stub-wasi) stub=(--stub-wasi) ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "build-python-guest: unknown option $a" >&2; usage >&2; exit 2 ;;
    *) args+=("$a") ;;
  esac
done
[ "${#args[@]}" -eq 2 ] || { usage >&2; exit 2; }
src=${args[0]}
out=${args[1]}
phase=${TESSERA_BUILD_PHASE:-all}
case "$phase" in
  all|fetch|build) ;;
  *) echo "build-python-guest: TESSERA_BUILD_PHASE must be fetch, build or unset" >&2; exit 2 ;;
esac

if [ -d "$src" ]; then
  file=$src/model.py
  [ -f "$file" ] || { echo "build-python-guest: $src has no model.py" >&2; exit 1; }
elif [ -f "$src" ]; then
  file=$src
else
  echo "build-python-guest: $src: no such file or directory" >&2; exit 1
fi
file=$(realpath "$file")
model_dir=$(dirname "$file")

CPY=${COMPONENTIZE_PY:-}
if [ -z "$CPY" ]; then
  if [ -x "$ROOT/.venv/bin/componentize-py" ]; then
    CPY=$ROOT/.venv/bin/componentize-py
  elif command -v componentize-py >/dev/null 2>&1; then
    CPY=$(command -v componentize-py)
  else
    echo "build-python-guest: componentize-py not found; run scripts/setup-python.sh (or pip install componentize-py==0.25.1) or set COMPONENTIZE_PY" >&2
    exit 1
  fi
fi
case "$CPY" in */*) CPY=$(realpath "$CPY") ;; esac

# As Triton's stub does, the guest imports the model file as module `<version>.<name>` (`1.model`)
# with the version directory and the model directory on its path (guest-sdk/python/tessera_guest/
# _entry.py): the version directory is a package, so siblings import relatively or by name. The
# package is named after the version directory when that is a number, else `1`; copies of its
# `.py` files (subpackages too; no links, hidden directories or __pycache__) are staged as it.
PY=$ROOT/.venv/bin/python
[ -x "$PY" ] || PY=python3
name=$(basename "$file")
case "$name" in
  *.py) ;;
  *) echo "build-python-guest: Model name must end with '.py'. Model name is \"$name\"." >&2; exit 1 ;;
esac
package=$(basename "$model_dir")
[[ "$package" =~ ^[0-9]+$ ]] || package=1
stage=$(mktemp -d "${TMPDIR:-/tmp}/tessera-pyguest.XXXXXX")
trap 'rm -rf "$stage"' EXIT
pkgdir=$stage/models/$package
mkdir -p "$pkgdir" "$stage/entry"
(cd "$model_dir" && find . -mindepth 1 \( -name '.*' -o -name __pycache__ \) -prune -o -type f -name '*.py' -print0) |
  while IFS= read -r -d '' f; do
    mkdir -p "$pkgdir/$(dirname "$f")"
    cp "$model_dir/$f" "$pkgdir/$f"
  done
printf 'PACKAGE = %s\nMODULE = %s\n' "$("$PY" -c 'import sys; print(repr(sys.argv[1]))' "$package")" \
  "$("$PY" -c 'import sys; print(repr(sys.argv[1]))' "$package.${name%.py}")" > "$stage/entry/tessera_model_entry.py"
paths=(-p "$pkgdir" -p "$stage/models" -p "$stage/entry" -p "$SDK")
CACHE=${TESSERA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera}
requirements=$model_dir/requirements.txt
[ -f "$requirements" ] || requirements=
numpy_version=$(sed -n 's/^NUMPY_VERSION=//p' "$ROOT/scripts/build-numpy-wasi.sh")
offline=()
[ "$phase" = build ] && offline=(--offline)
if [ "$phase" = fetch ]; then
  if [ -n "$requirements" ]; then
    "$PY" "$ROOT/scripts/python_guest_deps.py" requirements "$requirements" "$CACHE/python-deps" "$numpy_version" >/dev/null
  fi
  exit 0
fi
if "$PY" "$ROOT/scripts/python_guest_deps.py" uses-numpy "$pkgdir" $requirements; then
  cached=()
  [ "$phase" = build ] && cached=(--cached-only)
  numpy_site=$(bash "$ROOT/scripts/build-numpy-wasi.sh" --print-dir "${cached[@]}")
  paths+=(-p "$numpy_site")
fi
# requests (as a Triton python environment has it): bundled when the model's code imports it; its
# connections fail with a clear error in the guest (tessera_guest/_net.py).
if "$PY" "$ROOT/scripts/python_guest_deps.py" uses-requests "$pkgdir" $requirements; then
  "$PY" "$ROOT/scripts/python_guest_deps.py" bundle-requests "$stage/bundled"
  paths+=(-p "$stage/bundled")
fi
if [ -n "$requirements" ]; then
  deps_site=$("$PY" "$ROOT/scripts/python_guest_deps.py" requirements "${offline[@]}" "$requirements" "$CACHE/python-deps" "$numpy_version")
  paths+=(-p "$deps_site")
fi
# Extra pure-Python dependencies: TESSERA_PYTHON_PATH=dir1:dir2 (e.g. a `pip install --target` dir).
# (Not in the server's confined builds: its environment does not reach them.)
IFS=: read -r -a extra <<< "${TESSERA_PYTHON_PATH:-}"
for d in "${extra[@]}"; do [ -n "$d" ] && paths+=(-p "$(realpath "$d")"); done

mkdir -p "$(dirname "$out")"
tmp_out=$stage/out.wasm
# Keep componentize-py from adding a virtualenv's or the system's site-packages (CPython builds of
# native packages cannot run in Wasm): point VIRTUAL_ENV at an empty directory.
mkdir -p "$stage/empty-venv/lib/site-packages"
(cd "$stage" && VIRTUAL_ENV="$stage/empty-venv" "$CPY" -q -d "$WIT" -w model-by-value componentize \
  "${stub[@]}" "${paths[@]}" -o "$tmp_out" tessera_guest.app)
mv "$tmp_out" "$out"
echo "build-python-guest: wrote $out ($(stat -c %s "$out") bytes)" >&2
