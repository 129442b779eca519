#!/usr/bin/env bash
# Throughput of one saturated server core, Tessera and the reference Triton side by side.
#
# On the 2-core development box perf_analyzer takes most of a core itself and tops out near 14k
# infer/s, so it cannot saturate a server. Here each server, with its whole process tree (Triton's
# python stubs too), runs on SERVER_CPU alone, and `wrk` on CLIENT_CPU sends the KServe v2 JSON
# request of the add_sub models (two FP32 [1,16] inputs) over CONCURRENCY keep-alive connections.
# The servers run one at a time; rounds alternate between them.
#
#   usage: bench/saturated.sh
#          MODELS="add_sub add_sub_rust" CONCURRENCY="16 64" ROUNDS=3 bench/saturated.sh
#
# Each server starts under `taskset -c SERVER_CPU`, its children (Triton's python stubs) inherit it.
# Prints a markdown table: infer/s median (min-max) over ROUNDS, server CPU µs per inference,
# server-side µs per request, requests per execution (all from bench/server_sample.py: the server's
# statistics extension and /proc), and infer/s as a ratio of Triton's python add_sub at the same
# concurrency.
#
# Env: SERVER_CPU=0  CLIENT_CPU=1  MODELS="add_sub add_sub_rust" (Tessera's)  CONCURRENCY="16 64"
#      ROUNDS=3  SECS=4 (a window)  WARMUP_S=1  TRITON=1 (0: Tessera only; the reference Triton
#      is bench/lib.sh's TRITON_REFERENCE, set up first if it is not)
#      TRITON_MODEL=add_sub  TESSERA_BIN=target/release/tessera  TESSERA_REPO=model-repos/quickstart
#      ORT_DYLIB_PATH  TESSERA_ARGS (extra serve flags)  PYTHON=python3  OUT_DIR
# Needs wrk (apt-get install -y wrk; a benchmark tool only, not installed by the setup scripts).
# Listens on 127.0.0.1:18500-18502 (Tessera) and 18510-18512 (Triton) only.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
MODELS=${MODELS:-add_sub add_sub_rust}
CONCURRENCY=${CONCURRENCY:-16 64}
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-4}
WARMUP_S=${WARMUP_S:-1}
TRITON=${TRITON:-1}
TRITON_MODEL=${TRITON_MODEL:-add_sub}
TESSERA_BIN=${TESSERA_BIN:-target/release/tessera}
TESSERA_REPO=${TESSERA_REPO:-model-repos/quickstart}
PYTHON=${PYTHON:-python3}
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/tessera-saturated.XXXXXX)}
TESSERA_HTTP=18500 TRITON_HTTP=18510
log() { echo "saturated: $*" >&2; }
command -v wrk >/dev/null || { log "wrk is missing: apt-get install -y wrk"; exit 2; }
[ -x "$TESSERA_BIN" ] || { log "$TESSERA_BIN is not an executable (cargo build --release)"; exit 2; }
if [ -z "${ORT_DYLIB_PATH:-}" ]; then ORT_DYLIB_PATH=$(scripts/setup-python.sh --print-ort-lib); fi
export ORT_DYLIB_PATH
# shellcheck disable=SC1091
source bench/lib.sh
TRITON_REF_DIR=$TRITON_REFERENCE

TESSERA_PID= TRITON_PID=
cleanup() {
  [ -n "$TESSERA_PID" ] && kill -TERM "$TESSERA_PID" 2>/dev/null
  [ -n "$TRITON_PID" ] && RUN_DIR=$OUT_DIR/triton-run STOP_TIMEOUT=20 bash "$TRITON_REF_DIR/stop.sh" >/dev/null 2>&1
  wait 2>/dev/null || true
}
trap cleanup EXIT

# ---- servers -------------------------------------------------------------------------------------
# Both start pinned, so each sizes its thread pools to the one core it sees (tokio: one worker), as
# in a container given one CPU; pinning a running server instead leaves its pools sized for two.
# shellcheck disable=SC2086
taskset -c "$SERVER_CPU" "$TESSERA_BIN" serve --model-repository "$TESSERA_REPO" --http-address 127.0.0.1 --http-port $TESSERA_HTTP \
  --grpc-address 127.0.0.1 --grpc-port $((TESSERA_HTTP + 1)) --metrics-address 127.0.0.1 \
  --metrics-port $((TESSERA_HTTP + 2)) --exit-on-error=false ${TESSERA_ARGS:-} </dev/null >"$OUT_DIR/tessera.log" 2>&1 &
TESSERA_PID=$!
# shellcheck disable=SC2086
wait_models_ready "$TESSERA_PID" $TESSERA_HTTP "$OUT_DIR/tessera.log" $MODELS || exit 1
TARGETS=()
for m in $MODELS; do TARGETS+=("tessera:$m"); done
if [ "$TRITON" = 1 ]; then
  reference_env
  mkdir -p "$OUT_DIR/triton-repo"
  cp -r "$TRITON_REF_DIR/model_repository/$TRITON_MODEL" "$OUT_DIR/triton-repo/"
  TRITON_PID=$(HTTP_PORT=$TRITON_HTTP GRPC_PORT=$((TRITON_HTTP + 1)) METRICS_PORT=$((TRITON_HTTP + 2)) \
    RUN_DIR=$OUT_DIR/triton-run taskset -c "$SERVER_CPU" bash "$TRITON_REF_DIR/run.sh" "$OUT_DIR/triton-repo" 2>"$OUT_DIR/triton-run.log") \
    || { cat "$OUT_DIR/triton-run.log" >&2; exit 1; }
    TARGETS+=("triton:$TRITON_MODEL")
fi
log "Tessera PID $TESSERA_PID${TRITON_PID:+, Triton PID $TRITON_PID}, both on CPU $SERVER_CPU; wrk on CPU $CLIENT_CPU"

# ---- load ----------------------------------------------------------------------------------------
cat >"$OUT_DIR/body.lua" <<'EOF'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = [[{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"FP32","data":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]},{"name":"INPUT1","shape":[1,16],"datatype":"FP32","data":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]}]}]]
EOF
printf 'server\tmodel\tc\tround\tinfer_per_s\tcpu_us\tserver_us\treq_per_exec\n' >"$OUT_DIR/results.tsv"
for round in $(seq "$ROUNDS"); do
  for target in "${TARGETS[@]}"; do
    server=${target%%:*} m=${target#*:}
    if [ "$server" = tessera ]; then pid=$TESSERA_PID port=$TESSERA_HTTP; else pid=$TRITON_PID port=$TRITON_HTTP; fi
    for c in $CONCURRENCY; do
      url=http://127.0.0.1:$port/v2/models/$m/infer
      [ "$WARMUP_S" = 0 ] || taskset -c "$CLIENT_CPU" wrk -t1 -c"$c" -d"${WARMUP_S}s" -s "$OUT_DIR/body.lua" "$url" >/dev/null
      before=$("$PYTHON" bench/server_sample.py "$pid" "$port" "$m"); t0=$(date +%s.%N)
      taskset -c "$CLIENT_CPU" wrk -t1 -c"$c" -d"${SECS}s" -s "$OUT_DIR/body.lua" "$url" >"$OUT_DIR/wrk_${server}_${m}_c${c}_r$round.txt"
      after=$("$PYTHON" bench/server_sample.py "$pid" "$port" "$m"); t1=$(date +%s.%N)
      # A benchmark of failures measures nothing: wrk reports any non-2xx answer.
      if grep -q "Non-2xx" "$OUT_DIR/wrk_${server}_${m}_c${c}_r$round.txt"; then
        log "$server $m c=$c: requests failed"; cat "$OUT_DIR/wrk_${server}_${m}_c${c}_r$round.txt" >&2; exit 1
      fi
      row=$(awk -v a="$before" -v b="$after" -v t0="$t0" -v t1="$t1" 'BEGIN { split(a, x, " "); split(b, y, " ")
        n = y[2] - x[2]; e = y[4] - x[4]; if (n <= 0 || e <= 0) { print "NA\tNA\tNA\tNA"; exit }
        printf "%.0f\t%.1f\t%.1f\t%.2f", n / (t1 - t0), (y[1] - x[1]) * 1e6 / n, (y[3] - x[3]) / n / 1000, n / e }')
      printf '%s\t%s\t%s\t%s\t%s\n' "$server" "$m" "$c" "$round" "$row" >>"$OUT_DIR/results.tsv"
      log "round $round $server $m c=$c: $row"
    done
  done
done

"$PYTHON" - "$OUT_DIR/results.tsv" "$SERVER_CPU" "$CLIENT_CPU" <<'EOF'
import csv, statistics, sys
rows = [r for r in csv.DictReader(open(sys.argv[1]), delimiter="\t") if r["infer_per_s"] != "NA"]
print(f"### One saturated server core: server on CPU {sys.argv[2]}, wrk -t1 on CPU {sys.argv[3]} (HTTP, JSON, batch 1)\n")
print("| server | model | c | infer/s median (min-max) | server CPU µs / inference | server-side µs / request "
      "| requests / execution | infer/s vs Triton |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
groups = {}
for r in rows:
    groups.setdefault((r["server"], r["model"], r["c"]), []).append(r)
triton = {c: statistics.median(float(r["infer_per_s"]) for r in g) for (s, _, c), g in groups.items() if s == "triton"}
for (server, model, c), g in groups.items():
    med = lambda k: statistics.median(float(r[k]) for r in g)
    ips = [float(r["infer_per_s"]) for r in g]
    ratio = f"{med('infer_per_s') / triton[c]:.2f}x" if c in triton else ""
    print(f"| {server} | {model} | {c} | {med('infer_per_s'):,.0f} ({min(ips):,.0f}-{max(ips):,.0f}) | "
          f"{med('cpu_us'):.1f} | {med('server_us'):.1f} | {med('req_per_exec'):.2f} | {ratio} |")
EOF
log "raw: $OUT_DIR"
