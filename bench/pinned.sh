#!/usr/bin/env bash
# Throughput with the server and the load generator on separate cores: on a box
# with enough cores, Tessera pinned to SERVER_CPUS and perf_analyzer to CLIENT_CPUS (taskset), so
# the client no longer takes the server's cores as it does on the 2-core development box.
#
#   usage: bench/pinned.sh
#          SERVER_CPUS=0-3 CLIENT_CPUS=4-15 MODELS="add_sub add_sub_rust" CONCURRENCY="16 64" bench/pinned.sh
#
# Prints a markdown table per model and concurrency: median infer/s (min-max), server CPU µs per
# inference and server-side µs per request, all from bench/server_sample.py around a MEASURE_S
# window of steady load (perf_analyzer is only the load generator: see below).
#
# Env: TESSERA_BIN=target/release/tessera  TESSERA_REPO=model-repos/quickstart  ORT_DYLIB_PATH
#      PERF_ANALYZER, PERF_ANALYZER_LD_LIBRARY_PATH (default: the reference Triton's, bench/lib.sh)
#      PROTOCOL=http  REPEATS=3  WARMUP_S=3  MEASURE_S=10
#      TESSERA_ARGS (extra serve flags)  PYTHON=python3
# Listens on 127.0.0.1:18400-18402 only.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
SERVER_CPUS=${SERVER_CPUS:-0-3}
CLIENT_CPUS=${CLIENT_CPUS:-4-$(( $(nproc) - 1 ))}
MODELS=${MODELS:-add_sub add_sub_rust}
CONCURRENCY=${CONCURRENCY:-16 64}
PROTOCOL=${PROTOCOL:-http}
REPEATS=${REPEATS:-3}
WARMUP_S=${WARMUP_S:-3}
MEASURE_S=${MEASURE_S:-10}
TESSERA_BIN=${TESSERA_BIN:-target/release/tessera}
TESSERA_REPO=${TESSERA_REPO:-model-repos/quickstart}
PYTHON=${PYTHON:-python3}
# shellcheck disable=SC1091
source bench/lib.sh
[ -n "${PERF_ANALYZER:-}" ] || reference_env
if [ -z "${ORT_DYLIB_PATH:-}" ]; then ORT_DYLIB_PATH=$(scripts/setup-python.sh --print-ort-lib); fi
export ORT_DYLIB_PATH
HTTP=18400 GRPC=18401
PORT=$HTTP; [ "$PROTOCOL" = grpc ] && PORT=$GRPC
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/tessera-pinned.XXXXXX)}
log() { echo "pinned: $*" >&2; }

SERVER_PID=
trap '[ -n "$SERVER_PID" ] && kill -TERM "$SERVER_PID" 2>/dev/null; wait 2>/dev/null || true' EXIT
# shellcheck disable=SC2086
taskset -c "$SERVER_CPUS" "$TESSERA_BIN" serve --model-repository "$TESSERA_REPO" --http-address 127.0.0.1 \
  --http-port $HTTP --grpc-address 127.0.0.1 --grpc-port $GRPC --metrics-port 18402 --exit-on-error=false \
  ${TESSERA_ARGS:-} </dev/null >"$OUT_DIR/server.log" 2>&1 &
SERVER_PID=$!
# shellcheck disable=SC2086
wait_models_ready "$SERVER_PID" $HTTP "$OUT_DIR/server.log" $MODELS || exit 1

# perf_analyzer only generates the load here: at these rates (70-95k infer/s) its stabilisation
# passes took over a minute each on the 16-core machine, so throughput and costs come from the
# server's own statistics over a fixed window (Δ success count / Δ time) while it runs.
printf 'model\tc\trep\tinfer_per_s\tcpu_us\tserver_us\texec_per_inf\n' >"$OUT_DIR/results.tsv"
for rep in $(seq "$REPEATS"); do
  for m in $MODELS; do
    for c in $CONCURRENCY; do
      row=$(LOAD_PREFIX="taskset -c $CLIENT_CPUS" PA_LOG="$OUT_DIR/${m}_c${c}_r$rep.txt" \
        load_window "$SERVER_PID" "$HTTP" "$m" "$PORT" "$PROTOCOL" "$c")
      printf '%s\t%s\t%s\t%s\n' "$m" "$c" "$rep" "$row" >>"$OUT_DIR/results.tsv"
      log "$m c=$c rep $rep: $row"
    done
  done
done

"$PYTHON" - "$OUT_DIR/results.tsv" "$SERVER_CPUS" "$CLIENT_CPUS" "$PROTOCOL" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
print(f"### Tessera on CPUs {sys.argv[2]}, perf_analyzer on CPUs {sys.argv[3]} ({sys.argv[4]}, batch 1)\n")
print("| model | c | infer/s median (min-max) | server CPU µs / inference | server-side µs / request | executions / inference |")
print("|---|---:|---:|---:|---:|---:|")
seen = []
for r in rows:
    if (r["model"], r["c"]) not in seen:
        seen.append((r["model"], r["c"]))
for model, c in seen:
    group = [r for r in rows if r["model"] == model and r["c"] == c and r["infer_per_s"] != "NA"]
    if not group:
        continue
    med = lambda k: statistics.median(float(r[k]) for r in group)
    ips = [float(r["infer_per_s"]) for r in group]
    print(f"| {model} | {c} | {med('infer_per_s'):,.0f} ({min(ips):,.0f}-{max(ips):,.0f}) | "
          f"{med('cpu_us'):.1f} | {med('server_us'):.1f} | {med('exec_per_inf'):.2f} |")
EOF
log "raw: $OUT_DIR"
