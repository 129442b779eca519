#!/usr/bin/env bash
# Memory soak: the server's RSS under steady perf_analyzer load, sampled every SAMPLE_S seconds.
#
#   usage: bench/soak.sh                       (add_sub_python, concurrency 16, 600 s)
#          MODEL=add_sub_rust SECS=120 bench/soak.sh
#
# Starts Tessera on model-repos/quickstart (127.0.0.1, ports 18700-18702), waits for MODEL, runs
# one perf_analyzer window of SECS seconds at CONCURRENCY over HTTP and prints RSS over time, then
# a summary: RSS after the first minute (the warm baseline: allocator pools and the instance's
# linear memory grow to their working size first), at the end, the maximum, the drift from the
# baseline in %, throughput, and how many times a guest instance was recycled near its memory
# limit (the target is flat RSS without relying on recycling, so 0).
#
# Env: MODEL=add_sub_python CONCURRENCY=16 SECS=600 SAMPLE_S=10 TESSERA_BIN=target/release/tessera
#      ORT_DYLIB_PATH (default: the one scripts/setup-python.sh installs)
#      COLD=1: start with an empty Wasm compile cache, so every guest compiles at start (with
#      TESSERA_WASM_COMPILER=in-process, RSS then grows under load); default: the server's usual cache, warm once any server compiled these
#      guests)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
MODEL=${MODEL:-add_sub_python}
CONCURRENCY=${CONCURRENCY:-16}
SECS=${SECS:-600}
SAMPLE_S=${SAMPLE_S:-10}
TESSERA_BIN=${TESSERA_BIN:-target/release/tessera}
HTTP=18700
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/tessera-soak.XXXXXX)}
log() { echo "soak: $*" >&2; }

[ -x "$TESSERA_BIN" ] || { log "$TESSERA_BIN is not an executable (cargo build --release)"; exit 1; }
# shellcheck disable=SC1091
source "$ROOT/bench/lib.sh"
reference_env || { log "reference setup failed (perf_analyzer): $OUT_DIR/triton-setup.log"; exit 1; }
ORT_DYLIB_PATH=${ORT_DYLIB_PATH:-$(scripts/setup-python.sh --print-ort-lib)}
export ORT_DYLIB_PATH

SERVER_PID= PA_PID=
cleanup() {
  [ -n "$PA_PID" ] && kill "$PA_PID" 2>/dev/null || true
  if [ -n "$SERVER_PID" ]; then kill -TERM "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
}
trap cleanup EXIT
if [ "${COLD:-0}" = 1 ]; then
  export TESSERA_WASM_CACHE_DIR=$OUT_DIR/wasm-cache
  log "cold start: compile cache $TESSERA_WASM_CACHE_DIR"
fi
"$TESSERA_BIN" serve --model-repository model-repos/quickstart --http-address 127.0.0.1 --http-port $HTTP \
  --grpc-address 127.0.0.1 --grpc-port $((HTTP + 1)) --metrics-port $((HTTP + 2)) --exit-on-error=false \
  </dev/null >"$OUT_DIR/server.log" 2>&1 &
SERVER_PID=$!
# shellcheck disable=SC1091,SC2086
source bench/lib.sh
wait_models_ready "$SERVER_PID" $HTTP "$OUT_DIR/server.log" "$MODEL" || exit 1

rss() { awk '/^VmRSS/ { printf "%.1f", $2 / 1024 }' "/proc/$SERVER_PID/status"; }
count() { python3 bench/server_sample.py "$SERVER_PID" "$HTTP" "$MODEL" | cut -d' ' -f2; }
# One perf_analyzer window longer than the soak; stopped when the sampling ends.
LD_LIBRARY_PATH=$PERF_ANALYZER_LD_LIBRARY_PATH "$PERF_ANALYZER" -m "$MODEL" \
  -u 127.0.0.1:$HTTP -i http -b 1 --concurrency-range "$CONCURRENCY" --measurement-mode time_windows \
  -p $(((SECS + 120) * 1000)) -r 1 --max-trials 1 >"$OUT_DIR/perf_analyzer.log" 2>&1 &
PA_PID=$!
echo "| t (s) | RSS MiB |"
echo "|---:|---:|"
: >"$OUT_DIR/rss.tsv"
first=$(count); t0=$(date +%s.%N)
t=0
while [ "$t" -le "$SECS" ]; do
  kill -0 "$PA_PID" 2>/dev/null || { log "perf_analyzer stopped early: $OUT_DIR/perf_analyzer.log"; exit 1; }
  r=$(rss)
  printf '%s\t%s\n' "$t" "$r" >>"$OUT_DIR/rss.tsv"
  echo "| $t | $r |"
  [ "$t" -lt "$SECS" ] && sleep "$SAMPLE_S"
  t=$((t + SAMPLE_S))
done
last=$(count)
throughput=$(awk -v a="$first" -v b="$last" -v t0="$t0" -v t1="$(date +%s.%N)" 'BEGIN { printf "%.0f infer/s", (b - a) / (t1 - t0) }')
kill "$PA_PID" 2>/dev/null || true; wait "$PA_PID" 2>/dev/null || true; PA_PID=
recycled=$(grep -c "recycling a guest instance" "$OUT_DIR/server.log" || true)
awk -F'\t' -v model="$MODEL" -v c="$CONCURRENCY" -v secs="$SECS" -v tp="$throughput" -v rec="$recycled" '
  $1 >= 60 && base == "" { base = $2 }
  { if ($2 > max) max = $2; last = $2 }
  END {
    if (base == "") base = last
    printf "\n%s at concurrency %s for %s s: RSS %.1f MiB at 60 s, %.1f MiB at the end, max %.1f MiB; drift %+.1f%% of the 60 s figure; throughput %s; instances recycled: %s\n",
      model, c, secs, base, last, max, (last - base) * 100 / base, tp, rec
  }' "$OUT_DIR/rss.tsv"
log "logs: $OUT_DIR"
