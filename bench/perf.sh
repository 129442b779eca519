#!/usr/bin/env bash
# Side-by-side benchmark: Tessera vs the reference NVIDIA Triton, with Triton's perf_analyzer, over
# HTTP or gRPC, with tensors inline or in system shared memory.
#
#   usage: bench/perf.sh                 (from anywhere; paths are relative to the repo root)
#          PROTOCOL=grpc SHM=system bench/perf.sh
#          bench/perf_http.sh            (= PROTOCOL=http bench/perf.sh)
#
# 1. runs the reference setup (idempotent): perf_analyzer 2.51.0 and tritonserver 2.51.0;
# 2. starts Tessera on model-repos/quickstart (HTTP 18100, gRPC 18101, metrics 18102) and waits for
#    every model it compares to be ready;
# 3. starts the reference Triton on its python-backend model repository (18200-18202) via run.sh;
# 4. measures add_sub over PROTOCOL at each concurrency, REPEATS times, interleaving the servers (and
#    alternating which goes first) so that drift from other load hits both;
# 5. prints a markdown table (median infer/s with min-max, p50/p99 µs, Tessera/Triton ratios), the
#    machine and the exact commands; saves it, the raw CSVs and the logs under OUT_DIR;
# 6. stops both servers on exit (only the PIDs it started; Triton through stop.sh).
#
# Env (defaults):
#   PROTOCOL=http         http or grpc (perf_analyzer -i)
#   SHM=none              none or system (perf_analyzer --shared-memory; inputs and outputs in
#                         POSIX shm regions that perf_analyzer registers with the server)
#   ONLY=                 "tessera" or "triton" to run one server only (table without ratios)
#   TESSERA_BIN=target/debug/tessera   (use a release build for numbers worth quoting)
#   TESSERA_ARGS=         extra arguments appended to `tessera serve ...`
#   TESSERA_REPO=model-repos/quickstart   the repository Tessera serves
#   ORT_DYLIB_PATH=       onnxruntime library for Tessera; default: the one in .venv, from
#                         scripts/setup-python.sh (which also generates the model files)
#   MODEL=add_sub  CONCURRENCY="1 16"  REPEATS=3  MEASURE_MS=3000  WARMUP=1
#   TESSERA_MODEL=$MODEL  the quickstart model Tessera serves (add_sub = ONNX, add_sub_rust /
#                         add_sub_python = WebAssembly guests)
#   PAIRS="$MODEL:$TESSERA_MODEL"  several comparisons in one run, each TRITON_MODEL:TESSERA_MODEL,
#                         e.g. PAIRS="add_sub:add_sub add_sub:add_sub_rust bls_add_sub:bls_add_sub";
#                         with both bls_add_sub and add_sub:add_sub in it, the report adds the BLS
#                         hop (bls_add_sub's server-side time minus add_sub's) for each server
#
# Besides perf_analyzer's client view (infer/s, p50, p99), every measurement window reports each
# server's own cost, from bench/server_sample.py before and after it: CPU time of the server's
# whole process tree per inference (Triton's python stubs included) and server-side time per
# request (the statistics extension's success time / count), plus executions per inference (below
# 1 means dynamic batching merged requests). On a box where the client shares the cores these are
# the fair figures; client throughput mostly measures the client.
#   PA_TIMEOUT=60         seconds per perf_analyzer run (one retry after a failure or timeout)
#   READY_TIMEOUT=60      seconds for each server to become ready
#   TRITON_REFERENCE, TRITON_REFERENCE_ENV: the reference Triton (bench/lib.sh)
#   TRITON_REPO=$TRITON_REFERENCE/model_repository   (served from a copy under OUT_DIR)
#   OUT_DIR=$(mktemp -d /tmp/tessera-perf-http.XXXXXX)
#
# Everything listens on 127.0.0.1. Time: about (REPEATS x servers x concurrencies) x (4-5 windows of
# MEASURE_MS + ~1 s), e.g. ~3 min for the defaults with both servers.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
# shellcheck disable=SC1091
source bench/lib.sh

PROTOCOL=${PROTOCOL:-http}
SHM=${SHM:-none}
case "$PROTOCOL" in http|grpc) ;; *) echo "PROTOCOL must be http or grpc (got '$PROTOCOL')" >&2; exit 2 ;; esac
case "$SHM" in none|system) ;; *) echo "SHM must be none or system (got '$SHM')" >&2; exit 2 ;; esac
ONLY=${ONLY:-}
TESSERA_BIN=${TESSERA_BIN:-target/debug/tessera}
TESSERA_ARGS=${TESSERA_ARGS:-}
MODEL=${MODEL:-add_sub}
# The model Tessera serves for the comparison (e.g. add_sub_rust, add_sub_python); Triton always
# serves MODEL from its python-backend repository.
TESSERA_MODEL=${TESSERA_MODEL:-$MODEL}
PAIRS=${PAIRS:-$MODEL:$TESSERA_MODEL}
CONCURRENCY=${CONCURRENCY:-1 16}
REPEATS=${REPEATS:-3}
MEASURE_MS=${MEASURE_MS:-3000}
WARMUP=${WARMUP:-1}
PA_TIMEOUT=${PA_TIMEOUT:-60}
READY_TIMEOUT=${READY_TIMEOUT:-60}
TESSERA_HTTP=18100 TESSERA_GRPC=18101 TESSERA_METRICS=18102
TRITON_HTTP=18200 TRITON_GRPC=18201 TRITON_METRICS=18202
TRITON_REF_DIR=$(cd "$TRITON_REFERENCE" && pwd)
TRITON_REPO=${TRITON_REPO:-$TRITON_REF_DIR/model_repository}
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/tessera-perf-$PROTOCOL.XXXXXX)}
mkdir -p "$OUT_DIR/raw"
TRITON_RUN_DIR=$OUT_DIR/triton-run
# Triton needs a version directory even for an ensemble, and git keeps no empty directory: serve a
# copy of the reference repository in which every model has one.
if [ -d "$TRITON_REPO" ]; then
  cp -r "$TRITON_REPO" "$OUT_DIR/triton-repo"
  for model in "$OUT_DIR"/triton-repo/*/; do
    compgen -G "$model[0-9]*" >/dev/null || mkdir -p "${model}1"
  done
  TRITON_REPO=$OUT_DIR/triton-repo
fi

case "$ONLY" in
  "") SERVERS=(tessera triton) ;;
  tessera|triton) SERVERS=("$ONLY") ;;
  *) echo "ONLY must be empty, tessera or triton (got '$ONLY')" >&2; exit 2 ;;
esac
has() { [[ " ${SERVERS[*]} " == *" $1 "* ]]; }
log() { echo "perf: $*" >&2; }
port_of() {
  if [ "$PROTOCOL" = grpc ]; then
    if [ "$1" = tessera ]; then echo "$TESSERA_GRPC"; else echo "$TRITON_GRPC"; fi
  else
    if [ "$1" = tessera ]; then echo "$TESSERA_HTTP"; else echo "$TRITON_HTTP"; fi
  fi
}
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# ---- cleanup: only what this script started ------------------------------------------------------
TESSERA_PID=
TRITON_STARTED=0
PA_PID=
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$PA_PID" ]; then kill -TERM "$PA_PID" 2>/dev/null || true; wait "$PA_PID" 2>/dev/null || true; fi
  if [ -n "$TESSERA_PID" ] && kill -0 "$TESSERA_PID" 2>/dev/null; then
    kill -TERM "$TESSERA_PID" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$TESSERA_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$TESSERA_PID" 2>/dev/null || true
    wait "$TESSERA_PID" 2>/dev/null || true
  fi
  if [ "$TRITON_STARTED" = 1 ]; then
    RUN_DIR=$TRITON_RUN_DIR STOP_TIMEOUT=20 bash "$TRITON_REF_DIR/stop.sh" >>"$OUT_DIR/triton-stop.log" 2>&1 || true
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- 1. reference tools --------------------------------------------------------------------------
log "reference setup (perf_analyzer, tritonserver) ..."
if ! bash "$TRITON_REF_DIR/setup.sh" >"$OUT_DIR/setup.log" 2>&1; then
  tail -30 "$OUT_DIR/setup.log" >&2; log "reference setup failed (log: $OUT_DIR/setup.log)"; exit 1
fi
# shellcheck disable=SC1090
source "$TRITON_REFERENCE_ENV"
PA_VERSION=$(LD_LIBRARY_PATH=$PERF_ANALYZER_LD_LIBRARY_PATH "$PERF_ANALYZER" --version 2>&1 | head -1)

for s in "${SERVERS[@]}"; do
  if [ "$s" = tessera ]; then ports="$TESSERA_HTTP $TESSERA_GRPC $TESSERA_METRICS"; else ports="$TRITON_HTTP $TRITON_GRPC $TRITON_METRICS"; fi
  for p in $ports; do port_free "$p" || { log "port $p on 127.0.0.1 is already in use"; exit 1; }; done
done

# ---- 2. Tessera ----------------------------------------------------------------------------------
TESSERA_CMD=
if has tessera; then
  [ -x "$TESSERA_BIN" ] || { log "$TESSERA_BIN is not an executable (build it, or set TESSERA_BIN / ONLY=triton)"; exit 1; }
  if [ -z "${ORT_DYLIB_PATH:-}" ]; then
    ORT_DYLIB_PATH=$(scripts/setup-python.sh --print-ort-lib)
  fi
  export ORT_DYLIB_PATH
  # shellcheck disable=SC2206
  tcmd=("$TESSERA_BIN" serve --model-repository "${TESSERA_REPO:-model-repos/quickstart}" --http-address 127.0.0.1
        --http-port "$TESSERA_HTTP" --grpc-address 127.0.0.1 --grpc-port "$TESSERA_GRPC"
        --metrics-port "$TESSERA_METRICS" --exit-on-error=false $TESSERA_ARGS)
  TESSERA_CMD="ORT_DYLIB_PATH=$ORT_DYLIB_PATH ${tcmd[*]}"
  log "starting Tessera: ${tcmd[*]}"
  t0=$(date +%s%N)
  "${tcmd[@]}" </dev/null >"$OUT_DIR/tessera.log" 2>&1 &
  TESSERA_PID=$!
  # shellcheck disable=SC2046
  wait_models_ready "$TESSERA_PID" "$TESSERA_HTTP" "$OUT_DIR/tessera.log" \
    $(for pair in $PAIRS; do echo "${pair#*:}"; done | sort -u) || { log "Tessera did not start"; exit 1; }
  TESSERA_READY_S=$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN{printf "%.2f", (b-a)/1e9}')
  log "Tessera ready in ${TESSERA_READY_S}s (PID $TESSERA_PID)"
fi

# ---- 3. reference Triton -------------------------------------------------------------------------
TRITON_CMD="HTTP_PORT=$TRITON_HTTP GRPC_PORT=$TRITON_GRPC METRICS_PORT=$TRITON_METRICS RUN_DIR=$TRITON_RUN_DIR bash $TRITON_REF_DIR/run.sh $TRITON_REPO"
if has triton; then
  log "starting Triton: $TRITON_CMD"
  TRITON_STARTED=1   # from here on stop.sh runs on exit (it reads the PID that run.sh records)
  TRITON_PID=$(HTTP_PORT=$TRITON_HTTP GRPC_PORT=$TRITON_GRPC METRICS_PORT=$TRITON_METRICS \
    RUN_DIR=$TRITON_RUN_DIR READY_TIMEOUT=$READY_TIMEOUT bash "$TRITON_REF_DIR/run.sh" "$TRITON_REPO" 2>"$OUT_DIR/triton-run.log") \
    || { cat "$OUT_DIR/triton-run.log" >&2; log "Triton failed to start"; exit 1; }
  TRITON_READY_S=$(cat "$TRITON_RUN_DIR/startup_s" 2>/dev/null || echo "?")
  log "Triton ready in ${TRITON_READY_S}s (PID $TRITON_PID)"
fi

# ---- 4. measurements -----------------------------------------------------------------------------
pa_args() {  # model port concurrency window_ms
  local shm_args=
  [ "$SHM" = system ] && shm_args="--shared-memory system --output-shared-memory-size 1024"
  echo "-m $1 -i $PROTOCOL -u 127.0.0.1:$2 -b 1 --concurrency-range $3 -p $4 -s 100 -r 5 $shm_args"
}
model_of() {  # server pair -> the model that server serves for the pair
  if [ "$1" = tessera ]; then echo "${2#*:}"; else echo "${2%%:*}"; fi
}
pid_of() { if [ "$1" = tessera ]; then echo "$TESSERA_PID"; else echo "$TRITON_PID"; fi; }
http_of() { if [ "$1" = tessera ]; then echo "$TESSERA_HTTP"; else echo "$TRITON_HTTP"; fi; }
sample() {  # server model -> "cpu_s count ns executions"
  "${PYTHON:-python3}" bench/server_sample.py "$(pid_of "$1")" "$(http_of "$1")" "$2" 2>/dev/null || echo "NA NA NA NA"
}
pa() {  # csv_or_empty port concurrency window_ms   (stdout+stderr to the caller)
  local csv=$1 rc=0; shift
  # in the background + wait, so that INT/TERM reach the trap at once (cleanup stops it too)
  # shellcheck disable=SC2046
  timeout -k 5 "$PA_TIMEOUT" env LD_LIBRARY_PATH="$PERF_ANALYZER_LD_LIBRARY_PATH" \
    "$PERF_ANALYZER" $(pa_args "$@") ${csv:+-f "$csv"} &
  PA_PID=$!
  wait "$PA_PID" || rc=$?
  PA_PID=
  return "$rc"
}
# perf_analyzer's CSV: a header line, then one row per concurrency; find columns by name.
parse_csv() {  # csv -> "infer_per_s p50_us p99_us"
  awk -F, 'NR==1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
           NR==2 { print $col["Inferences/Second"], $col["p50 latency"], $col["p99 latency"]; ok = 1 }
           END   { if (!ok) exit 1 }' "$1"
}

if [ "$WARMUP" = 1 ]; then
  maxc=$(tr ' ' '\n' <<<"$CONCURRENCY" | sort -n | tail -1)
  for pair in $PAIRS; do
    for s in "${SERVERS[@]}"; do
      m=$(model_of "$s" "$pair")
      log "warm-up $s $m (concurrency $maxc, 1 s windows, not recorded)"
      pa "" "$m" "$(port_of "$s")" "$maxc" 1000 >"$OUT_DIR/raw/warmup_${s}_$m.txt" 2>&1 \
        || log "warm-up of $s $m failed (rc $?), see $OUT_DIR/raw/warmup_${s}_$m.txt"
    done
  done
fi

RESULTS=$OUT_DIR/results.tsv
printf 'pair\tserver\tconcurrency\trepeat\tinfer_per_s\tp50_us\tp99_us\ttries\tcpu_us\tserver_us\texec_per_inf\n' >"$RESULTS"
n_total=$(( REPEATS * $(wc -w <<<"$PAIRS") * $(wc -w <<<"$CONCURRENCY") * ${#SERVERS[@]} ))
n=0
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
for rep in $(seq "$REPEATS"); do
  for pair in $PAIRS; do
    for c in $CONCURRENCY; do
      order=("${SERVERS[@]}")
      if [ $(( rep % 2 )) = 0 ] && [ "${#order[@]}" = 2 ]; then order=("${order[1]}" "${order[0]}"); fi
      for s in "${order[@]}"; do
        n=$((n + 1))
        m=$(model_of "$s" "$pair")
        base=$OUT_DIR/raw/${s}_${m}_c${c}_r${rep}
        vals=
        for try in 1 2; do
          rm -f "$base.csv"
          before=$(sample "$s" "$m")
          if pa "$base.csv" "$m" "$(port_of "$s")" "$c" "$MEASURE_MS" >"$base.try$try.txt" 2>&1 \
             && vals=$(parse_csv "$base.csv"); then
            after=$(sample "$s" "$m")
            break
          fi
          vals=
          log "  $s $m c=$c rep $rep try $try failed (rc/log: $base.try$try.txt)"
        done
        if [ -n "$vals" ]; then
          read -r ips p50 p99 <<<"$vals"
          # CPU and server-side figures over every inference of the window (perf_analyzer's
          # stabilisation windows included: the same load, so the same cost per inference).
          read -r cpu server execs <<<"$(awk -v a="$before" -v b="$after" 'BEGIN {
            split(a, x, " "); split(b, y, " "); n = y[2] - x[2]
            if (x[1] == "NA" || y[1] == "NA" || n <= 0) { print "NA NA NA"; exit }
            printf "%.1f %.1f %.2f\n", (y[1] - x[1]) * 1e6 / n, (y[3] - x[3]) / n / 1000, (y[4] - x[4]) / n }')"
        else
          ips=NA p50=NA p99=NA try=2 cpu=NA server=NA execs=NA
        fi
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$pair" "$s" "$c" "$rep" "$ips" "$p50" "$p99" \
          "$try" "$cpu" "$server" "$execs" >>"$RESULTS"
        log "[$n/$n_total] $s $m c=$c rep $rep: $ips infer/s, p50 $p50 us, p99 $p99 us; server CPU $cpu us/inference, server-side $server us/request"
      done
    done
  done
done
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- 5. report -----------------------------------------------------------------------------------
CPU_MODEL=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
export PROTOCOL SHM RESULTS PAIRS REPEATS MEASURE_MS PA_VERSION TESSERA_CMD TRITON_CMD CPU_MODEL LOAD_START LOAD_END
export NPROC=$(nproc) KERNEL=$(uname -r) DATE=$(date -u '+%Y-%m-%d %H:%M UTC')
export GIT_REV=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo "no commit")
export TESSERA_READY_S=${TESSERA_READY_S:-} TRITON_READY_S=${TRITON_READY_S:-}
export PA_EXAMPLE="LD_LIBRARY_PATH=\$PERF_ANALYZER_LD_LIBRARY_PATH \$PERF_ANALYZER $(pa_args MODEL PORT C "$MEASURE_MS") -f out.csv"
"${PYTHON:-python3}" bench/perf_report.py >"$OUT_DIR/results.md"
cat "$OUT_DIR/results.md"
log "raw results, CSVs and logs: $OUT_DIR"
if awk -F'\t' 'NR > 1 && $5 == "NA" { bad = 1 } END { exit !bad }' "$RESULTS"; then
  log "some measurements failed (n/a in the table)"; exit 1
fi
