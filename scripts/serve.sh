#!/usr/bin/env bash
# Sets up (idempotently) and serves model-repos/quickstart: HTTP on 127.0.0.1:8000 and gRPC on
# 127.0.0.1:8001 by default. Extra arguments go to `tessera serve` (e.g. --http-port 9000).
#
# Once setup has completed (target/.setup-complete), this runs setup (seconds) and serves every
# model. On the first run it serves as soon as the server is built: the ONNX and TorchScript
# models load at start, under --model-control-mode=explicit, while the rest of setup (guest
# toolchains' builds, numpy for Python guests) runs beside the server; each other model is then
# loaded through the repository API (LOADING, then READY in the index). Stopping this script
# stops both.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=$ROOT/target/debug/tessera
REPO=$ROOT/model-repos/quickstart
ARGS=(serve --model-repository "$REPO" --http-address 127.0.0.1 --grpc-address 127.0.0.1
      --allow-client-shm=true)

if [ -f "$ROOT/target/.setup-complete" ]; then
  bash "$ROOT/scripts/setup.sh"
  exec "$BIN" "${ARGS[@]}" "$@"
fi

bash "$ROOT/scripts/setup.sh" --core
log() { echo "serve: $*" >&2; }
port=8000
prev=""
for arg in "$@"; do
  case "$arg" in --http-port=*) port=${arg#*=} ;; esac
  [ "$prev" = --http-port ] && port=$arg
  prev=$arg
done

now=() later=() ensembles=()
for dir in "$REPO"/*/; do
  name=$(basename "$dir")
  if grep -q '^platform: *"ensemble"' "$dir/config.pbtxt" 2>/dev/null; then
    ensembles+=("$name")
  elif compgen -G "$dir[0-9]*/model.onnx" >/dev/null || compgen -G "$dir[0-9]*/model.pt" >/dev/null; then
    now+=("--load-model=$name")
  else
    later+=("$name")
  fi
done

finish_setup() {  # the rest of setup, then the models it made ready
  bash "$ROOT/scripts/setup.sh"
  local deadline=$((SECONDS + 600))
  until curl -sf "http://127.0.0.1:$port/v2/health/live" >/dev/null; do
    (( SECONDS < deadline )) || { log "the server did not come up on port $port"; return 1; }
    sleep 1
  done
  local name failed=0
  for name in "${later[@]}" "${ensembles[@]}"; do
    curl -sf -X POST "http://127.0.0.1:$port/v2/repository/models/$name/load" >/dev/null \
      || { log "model $name did not load (see the server's log)"; failed=1; }
  done
  (( failed )) || log "setup complete: every quickstart model is loaded"
}

log "first run: serving the ONNX and TorchScript models now; the ${#later[@]} guest models" \
  "and ${#ensembles[@]} ensembles load when the rest of setup has built them"
# Stopping this script stops the server and the rest of setup, with everything they started.
# shellcheck source=scripts/jobs.sh
source "$ROOT/scripts/jobs.sh"
trap stop_jobs EXIT
trap 'exit 130' INT TERM
"$BIN" "${ARGS[@]}" --model-control-mode=explicit "${now[@]}" "$@" &
server=$!
finish_setup &
wait "$server"
