#!/usr/bin/env bash
# Builds numpy for Python guests: componentize-py's CPython 3.14 on wasm32-wasip2, whose native
# extensions are dylink modules it links into the component. Idempotent and cached outside the
# checkout, keyed by the numpy and componentize-py versions and this recipe's own hash, so a
# warm run costs a second and a fresh clone on the same machine reuses it.
#
#   usage: scripts/build-numpy-wasi.sh [--print-dir [--cached-only]]
#
#   --print-dir   print only the directory holding the built `numpy` package on stdout (what
#                 scripts/build-python-guest.sh puts on the guest's path when model code imports
#                 numpy); progress goes to stderr either way.
#   --cached-only never build: fail unless the build is in the cache (the server's confined,
#                 offline guest builds; scripts/setup.sh builds it).
#
# Env: TESSERA_CACHE_DIR (default ${XDG_CACHE_HOME:-~/.cache}/tessera), NUMPY_WASI_JOBS (ninja's
# -j, default: the cores). A cold build takes about 3-4 minutes of CPU.
#
# Where the parts come from (all package registries; nothing is downloaded from elsewhere):
#   - Debian 12: clang-22 / lld-22 (compiler and wasm-ld), libc++-22-dev-wasm32 (libc++ headers,
#     ABI namespace std::__2 like the libc++.so componentize-py bundles), libclang-rt-22-dev-wasm32
#     (compiler-rt builtins), llvm-22 (llvm-ar); installed with apt when missing.
#   - Debian testing, pinned by version and sha256 below: wasi-libc (wasip2 headers; Debian 12's
#     has none) and libpython3.14-dev (CPython 3.14's headers; pyconfig.h is regenerated for
#     wasm32-wasi from the sysconfigdata componentize-py embeds). Read through a private apt state
#     in the cache: the system's apt sources are not touched.
#   - PyPI: numpy's sdist (pinned sha256), componentize-py (its runtime dylibs: libc, libpython,
#     libc++, libc++abi), cython, ninja, zstandard.
# The recipe and every error it works around: docs/wasm.md, "numpy in Python guests".
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

NUMPY_VERSION=2.3.5
NUMPY_SHA256=784db1dcdab56bf0517743e746dfb0f885fc68d948aba86eeec2cba234bdf1c0
# Debian testing (suites tried in this order: the version can move from one to the other)
TESTING_SUITES=(forky sid)
TESTING_DEBS=(
  "wasi-libc 0.0~git20260423.161b319-2 1051dbb0a5e6d3f709de83b6afb423e07a8ab19a9e9f12ef20ff902131e7b8bc"
  "libpython3.14-dev 3.14.8-1 86249e59881a141029423a718e766fe0d3fd076de3cecc1127156e540cb1c905"
)
BUILD_TOOLS=(cython==3.1.8 ninja==1.13.0 zstandard==0.25.0)
APT_PACKAGES=(clang-22 lld-22 llvm-22 libc++-22-dev-wasm32 libclang-rt-22-dev-wasm32)
LLVM=/usr/lib/llvm-22/bin

print_dir=0
cached_only=0
case "${1:-}" in
  "") ;;
  --print-dir) print_dir=1 ;;
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "usage: $0 [--print-dir [--cached-only]]" >&2; exit 2 ;;
esac
case "${2:-}" in
  "") ;;
  --cached-only) cached_only=1 ;;
  *) echo "usage: $0 [--print-dir [--cached-only]]" >&2; exit 2 ;;
esac

log() { echo "build-numpy-wasi: $*" >&2; }
die() { log "$*"; exit 1; }

CPY_VERSION=$(sed -n 's/^componentize-py==\([^ ]*\).*/\1/p' "$ROOT/tests/requirements.txt")
[ -n "$CPY_VERSION" ] || die "tests/requirements.txt pins no componentize-py version"
recipe=$(cat "$0" "$ROOT/scripts/numpy_wasi.py" | sha256sum | cut -c1-12)
CACHE=${TESSERA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera}/numpy-wasi
OUT=$CACHE/numpy-$NUMPY_VERSION-cpy-$CPY_VERSION-$recipe
done_dir() { [ "$print_dir" = 1 ] && echo "$OUT/site"; exit 0; }

[ -f "$OUT/site/.complete" ] && done_dir
[ "$cached_only" = 0 ] || die "numpy for Python guests is not built ($OUT): run scripts/build-numpy-wasi.sh (scripts/setup.sh does) before serving models that use numpy"
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
[ -f "$OUT/site/.complete" ] && done_dir   # built by a run we waited for

log "building numpy $NUMPY_VERSION for componentize-py $CPY_VERSION guests in $OUT (3-4 min of CPU)"
W=$OUT/work
rm -rf "$OUT"
mkdir -p "$W"
cd "$W"

# 1. Debian 12 toolchain -------------------------------------------------------------------------
missing=()
for p in "${APT_PACKAGES[@]}"; do
  [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)" == "install ok installed" ]] || missing+=("$p")
done
if ((${#missing[@]})); then
  [ "$(id -u)" -eq 0 ] || die "missing ${missing[*]}; run me as root (or: apt-get install ${missing[*]})"
  log "installing ${missing[*]} (apt)"
  { apt-get -qq -o DPkg::Lock::Timeout=300 update &&
    DEBIAN_FRONTEND=noninteractive apt-get -qq -o DPkg::Lock::Timeout=300 install -y --no-install-recommends \
      "${missing[@]}"; } >apt.log 2>&1 || { cat apt.log >&2; die "apt-get install ${missing[*]} failed"; }
fi
AR=$LLVM/llvm-ar
[ -x "$AR" ] || die "$AR missing (package llvm-22)"

# 2. build tools (PyPI) --------------------------------------------------------------------------
PY=${PYTHON:-python3}
"$PY" -m venv venv
venv/bin/pip install -q "componentize-py==$CPY_VERSION" "${BUILD_TOOLS[@]}" \
  || die "pip could not install componentize-py==$CPY_VERSION ${BUILD_TOOLS[*]}"

# 3. Debian testing's packages, pinned -----------------------------------------------------------
mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $0 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
[ -n "$mirror" ] || die "no Debian mirror found in /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list"
mkdir -p apt/lists/partial apt/archives/partial apt/parts debs root
: >apt/status
for suite in "${TESTING_SUITES[@]}"; do
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $suite main"
done >apt/sources.list
cat >apt/apt.conf <<EOF
Dir::Etc::SourceList "$W/apt/sources.list"; Dir::Etc::SourceParts "$W/apt/parts";
Dir::State "$W/apt"; Dir::State::Lists "$W/apt/lists"; Dir::State::status "$W/apt/status";
Dir::Cache "$W/apt"; Dir::Cache::archives "$W/apt/archives";
EOF
export APT_CONFIG=$W/apt/apt.conf
apt-get -qq update >apt-update.log 2>&1 || { cat apt-update.log >&2; die "apt-get update of Debian testing (${TESTING_SUITES[*]}) failed"; }
for entry in "${TESTING_DEBS[@]}"; do
  read -r pkg version sha <<<"$entry"
  if ! (cd debs && apt-get -qq download "$pkg=$version") >apt-download.log 2>&1; then
    have=$(apt-cache policy "$pkg" 2>/dev/null | awk '/Candidate:/ {print $2}')
    die "Debian testing no longer has $pkg $version (it has ${have:-none}): update the pin in scripts/build-numpy-wasi.sh, version and sha256, and check the build"
  fi
  deb=$(ls debs/"${pkg}"_*.deb)
  got=$(sha256sum "$deb" | cut -d' ' -f1)
  [ "$got" = "$sha" ] || die "$pkg $version from Debian testing has sha256 $got, not the pinned $sha"
  dpkg-deb -x "$deb" root
done
unset APT_CONFIG

# 4. componentize-py's runtime libraries and sysconfigdata ----------------------------------------
SO=$(echo venv/lib/python3*/site-packages/componentize_py/componentize_py.abi3.so)
CPY_VERSION=$CPY_VERSION venv/bin/python "$ROOT/scripts/numpy_wasi.py" runtime "$SO" runtime

# 5. sysroot: wasip2 headers and static libraries (meson's link probes), libc++ headers, the
#    runtime libraries (the real links), an empty libpython3.14.a and the exception shim.
SR=$W/sysroot
mkdir -p "$SR/include" "$SR/lib/wasm32-wasip2"
cp -a root/usr/include/wasm32-wasip2 "$SR/include/"
# -L: Debian's libc++ headers are reached through a relative symlink that a plain copy leaves dangling
cp -rL /usr/include/wasm32-wasi/c++ "$SR/include/wasm32-wasip2/"
cp -a root/usr/lib/wasm32-wasip2/. runtime/*.so "$SR/lib/wasm32-wasip2/"
CC=("$LLVM/clang" --target=wasm32-wasip2 --sysroot="$SR")
printf '' | "${CC[@]}" -x c -c - -o empty.o
"$AR" rcs "$SR/lib/wasm32-wasip2/libpython3.14.a" empty.o
# The libc++abi componentize-py bundles is built without exceptions, yet clang still emits calls
# to these for numpy's C++ (pocketfft, sorting). A throw cannot be caught here: it writes a line
# and traps, which fails the request in flight (the host replaces the instance).
cat >eh_shim.c <<'EOF'
#include <stdio.h>
#include <stdlib.h>
#define HIDDEN __attribute__((visibility("hidden")))
HIDDEN void *__cxa_allocate_exception(size_t n) { void *p = malloc(n); if (!p) abort(); return p; }
HIDDEN void __cxa_free_exception(void *p) { free(p); }
__attribute__((noinline)) HIDDEN _Noreturn void tessera_numpy_cxx_exception(void) {
  fputs("numpy: a C++ exception was thrown inside the Wasm guest, which cannot catch it\n", stderr);
  __builtin_trap();
}
HIDDEN _Noreturn void __cxa_throw(void *o, void *t, void (*d)(void *)) {
  (void)o; (void)t; (void)d; tessera_numpy_cxx_exception();
}
EOF
"${CC[@]}" -fPIC -O2 -c eh_shim.c -o eh_shim.o
"$AR" rcs "$SR/lib/wasm32-wasip2/libnpywasi_eh.a" eh_shim.o

# 6. CPython 3.14 headers with a wasm32-wasi pyconfig.h ------------------------------------------
INC=$W/py314/include/python3.14
mkdir -p "$INC"
cp -r root/usr/include/python3.14/. "$INC/"
template=$(ls root/usr/include/*-linux-gnu/python3.14/pyconfig.h | head -1)
venv/bin/python "$ROOT/scripts/numpy_wasi.py" pyconfig "$template" runtime/_sysconfigdata__wasi_wasm32-wasi.py "$INC/pyconfig.h"

# 7. meson's cross "python" (the build python answering sysconfig as wasm32-wasi 3.14) and a
#    wasm-ld that drops the ELF-only options meson passes it
mkdir -p pywrap bin
cp runtime/_sysconfigdata__wasi_wasm32-wasi.py pywrap/
cat >pywrap/sitecustomize.py <<'EOF'
import os
import sysconfig

_get_paths = sysconfig.get_paths


def get_paths(scheme=None, vars=None, expand=True):
    paths = dict(_get_paths(scheme, vars, expand) if scheme else _get_paths(vars=vars, expand=expand))
    paths["include"] = paths["platinclude"] = os.environ["WASI_PY_INCLUDE"]
    return paths


sysconfig.get_paths = get_paths
sysconfig.get_python_version = lambda: "3.14"
sysconfig.get_platform = lambda: "wasi-wasm32"
EOF
cat >pywrap/python <<EOF
#!/bin/sh
export _PYTHON_SYSCONFIGDATA_NAME=_sysconfigdata__wasi_wasm32-wasi WASI_PY_INCLUDE=$INC PYTHONPATH=$W/pywrap
exec $W/venv/bin/python "\$@"
EOF
cat >bin/wasm-ld <<EOF
#!/bin/bash
args=()
for a in "\$@"; do
  case "\$a" in --allow-shlib-undefined|--start-group|--end-group|--as-needed|--no-as-needed) ;; *) args+=("\$a") ;; esac
done
exec $LLVM/wasm-ld "\${args[@]}"
EOF
chmod +x pywrap/python bin/wasm-ld
flags="'-fPIC', '-I$INC', '-D_WASI_EMULATED_SIGNAL', '-D_WASI_EMULATED_PROCESS_CLOCKS', '-D_WASI_EMULATED_MMAN', '-DNPY_NO_SIGNAL', '-Wno-unused-command-line-argument'"
cat >cross.ini <<EOF
[binaries]
c = ['$LLVM/clang', '--target=wasm32-wasip2', '--sysroot=$SR']
cpp = ['$LLVM/clang++', '--target=wasm32-wasip2', '--sysroot=$SR']
ar = '$AR'
strip = '/bin/true'
python = '$W/pywrap/python'
cython = '$W/venv/bin/cython'
pkg-config = '/bin/false'

[built-in options]
c_args = [$flags]
cpp_args = [$flags]
c_link_args = ['-fuse-ld=$W/bin/wasm-ld', '-lpython3.14']
cpp_link_args = ['-fuse-ld=$W/bin/wasm-ld', '-lpython3.14', '-lnpywasi_eh']

[properties]
needs_exe_wrapper = true
skip_sanity_check = true
longdouble_format = 'IEEE_QUAD_LE'

[host_machine]
system = 'wasi'
cpu_family = 'wasm32'
cpu = 'wasm32'
endian = 'little'
EOF

# 8. numpy: sdist, one source line, meson cross build --------------------------------------------
venv/bin/python "$ROOT/scripts/numpy_wasi.py" sdist numpy "$NUMPY_VERSION" "$NUMPY_SHA256" .
tar xzf "numpy-$NUMPY_VERSION.tar.gz"
cd "numpy-$NUMPY_VERSION"
# numpy knows wasm32 only as Emscripten's
sed -i 's/^#elif defined(__EMSCRIPTEN__)$/#elif defined(__EMSCRIPTEN__) || defined(__wasm__)/' \
  numpy/_core/include/numpy/npy_cpu.h
grep -q '__wasm__' numpy/_core/include/numpy/npy_cpu.h || die "numpy $NUMPY_VERSION's npy_cpu.h did not take the wasm32 patch"
export PATH=$W/venv/bin:$PATH
python vendored-meson/meson/meson.py setup build-wasi --cross-file ../cross.ini --prefix=/ \
  --buildtype=release -Db_ndebug=if-release -Db_lundef=false -Db_asneeded=false \
  -Dallow-noblas=true -Dblas=none -Dlapack=none -Ddisable-optimization=true -Dcpu-baseline=none \
  -Dcpu-dispatch=none -Ddisable-threading=true -Ddisable-svml=true -Ddisable-highway=true \
  -Ddisable-intel-sort=true >"$W/meson-setup.log" 2>&1 \
  || { tail -40 "$W/meson-setup.log" >&2; die "meson setup failed (log: $W/meson-setup.log)"; }
nice -n 19 ninja -C build-wasi -j "${NUMPY_WASI_JOBS:-$(nproc)}" >"$W/ninja.log" 2>&1 \
  || { grep -B2 -A10 -m3 'error' "$W/ninja.log" >&2 || tail -40 "$W/ninja.log" >&2; die "numpy build failed (log: $W/ninja.log)"; }
python vendored-meson/meson/meson.py install -C build-wasi --destdir "$W/install" \
  --tags runtime,python-runtime >"$W/meson-install.log" 2>&1 || die "meson install failed (log: $W/meson-install.log)"
cd "$W"
mkdir -p "$OUT/site"
cp -a install/lib/python3*/site-packages/numpy "$OUT/site/"
find "$OUT/site" -name __pycache__ -prune -exec rm -rf {} +
# numpy's tests are not importable in a guest without pytest and only make guests larger
rm -rf "$OUT/site/numpy/tests" "$OUT/site/numpy"/*/tests "$OUT/site/numpy"/_core/include
echo "numpy $NUMPY_VERSION, componentize-py $CPY_VERSION, recipe $recipe" >"$OUT/site/.complete"
cd "$OUT"
rm -rf "$W"
log "done: $OUT/site ($(du -sh "$OUT/site" | cut -f1))"
done_dir
