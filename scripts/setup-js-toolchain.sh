#!/usr/bin/env bash
# Idempotent setup of the toolchain that builds JavaScript guests (`tessera guest build model.js`):
# npm `@bytecodealliance/componentize-js` (SpiderMonkey compiled to Wasm, plus Wizer), pinned by
# guest-sdk/js/toolchain/package-lock.json, installed with `npm ci` into .tools/js (gitignored,
# kept between runs: a no-op run takes no time). Needs Node.js >= 18 and npm: the machine's, or
# Debian's `nodejs npm` (installed here with apt if node is missing).
#
#   usage: scripts/setup-js-toolchain.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LOCK_DIR=$ROOT/guest-sdk/js/toolchain
DEST=$ROOT/.tools/js
STAMP=$DEST/.installed-lock

log() { echo "setup-js-toolchain: $*" >&2; }

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  if [[ $(id -u) -ne 0 ]]; then
    log "node/npm missing; run me as root (or: sudo apt-get install nodejs npm)"
    exit 1
  fi
  log "installing nodejs npm (apt)"
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 -qq update >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 -qq install -y --no-install-recommends nodejs npm >/dev/null
fi
major=$(node -p 'process.versions.node.split(".")[0]')
if (( major < 18 )); then
  log "node $(node --version) is too old; componentize-js needs Node.js >= 18"
  exit 1
fi

# Reinstall only when the lockfile changed (or nothing is installed).
if [[ -f $STAMP ]] && cmp -s "$STAMP" "$LOCK_DIR/package-lock.json" \
   && [[ -f $DEST/node_modules/@bytecodealliance/componentize-js/package.json ]]; then
  exit 0
fi
log "installing componentize-js into $DEST (npm ci)"
mkdir -p "$DEST"
cp "$LOCK_DIR/package.json" "$LOCK_DIR/package-lock.json" "$DEST/"
npm_log=$(mktemp)
trap 'rm -f "$npm_log"' EXIT
if ! (cd "$DEST" && npm ci --no-audit --no-fund --loglevel=error) >"$npm_log" 2>&1; then
  cat "$npm_log" >&2
  log "npm ci failed"
  exit 1
fi
cp "$LOCK_DIR/package-lock.json" "$STAMP"
