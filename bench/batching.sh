#!/usr/bin/env bash
# Dynamic batching benchmark (Tessera only): the same ONNX model (bench/gen_batching_models.py,
# weight-bound dense layers) served three ways, measured with perf_analyzer over gRPC:
#   dense_unbatched  default scheduler           c=16 and c=1
#   dense_batched    dynamic_batching, 200 µs delay   c=16 and c=1
#   dense_queue0     dynamic_batching, no delay  c=1 (the queue's own cost vs dense_unbatched)
# Prints a table of medians over REPEATS interleaved runs with min-max, the c=16 throughput ratio
# batched/unbatched, and the c=1 p50 added by the queue.
#
#   usage: TESSERA_BIN=target/release/tessera bench/batching.sh
#   env: SIZE=small (4 MiB of weights) or large (32 MiB); REPEATS=3 MEASURE_MS=3000 PA_TIMEOUT=90
#        OUT_DIR=$(mktemp -d)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
TESSERA_BIN=${TESSERA_BIN:-target/release/tessera}
SIZE=${SIZE:-small}
REPEATS=${REPEATS:-3}
MEASURE_MS=${MEASURE_MS:-3000}
PA_TIMEOUT=${PA_TIMEOUT:-90}
HTTP=18300 GRPC=18301 METRICS=18302
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/tessera-batching.XXXXXX)}
mkdir -p "$OUT_DIR/raw"
log() { echo "batching: $*" >&2; }

# shellcheck disable=SC1091
source "$ROOT/bench/lib.sh"
reference_env
ORT_DYLIB_PATH=$(scripts/setup-python.sh --print-ort-lib)
export ORT_DYLIB_PATH

REPO=$OUT_DIR/repo
.venv/bin/python bench/gen_batching_models.py "$REPO" "$SIZE" >/dev/null
"$TESSERA_BIN" serve --model-repository "$REPO" --http-address 127.0.0.1 --http-port $HTTP \
  --grpc-address 127.0.0.1 --grpc-port $GRPC --metrics-port $METRICS </dev/null >"$OUT_DIR/tessera.log" 2>&1 &
PID=$!
trap 'kill -TERM $PID 2>/dev/null || true; wait $PID 2>/dev/null || true' EXIT
for _ in $(seq 600); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$HTTP/v2/health/ready" || true)" = 200 ] && break
  kill -0 $PID 2>/dev/null || { tail -20 "$OUT_DIR/tessera.log" >&2; exit 1; }
  sleep 0.05
done

pa() {  # model concurrency csv
  timeout -k 5 "$PA_TIMEOUT" env LD_LIBRARY_PATH="$PERF_ANALYZER_LD_LIBRARY_PATH" "$PERF_ANALYZER" \
    -m "$1" -i grpc -u 127.0.0.1:$GRPC -b 1 --concurrency-range "$2" -p "$MEASURE_MS" -s 100 -r 5 -f "$3" \
    >"$3.txt" 2>&1
}
parse() { awk -F, 'NR==1{for(i=1;i<=NF;i++)c[$i]=i;next} NR==2{print $c["Inferences/Second"], $c["p50 latency"]}' "$1"; }

RUNS=("dense_unbatched 16" "dense_batched 16" "dense_unbatched 1" "dense_queue0 1" "dense_batched 1")
log "warm-up"
for run in "${RUNS[@]}"; do read -r m c <<<"$run"; pa "$m" "$c" "$OUT_DIR/raw/warm_${m}_$c.csv" || true; done
RESULTS=$OUT_DIR/results.tsv
printf 'model\tconcurrency\trepeat\tinfer_per_s\tp50_us\n' >"$RESULTS"
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
for rep in $(seq "$REPEATS"); do
  for run in "${RUNS[@]}"; do
    read -r m c <<<"$run"
    csv=$OUT_DIR/raw/${m}_c${c}_r$rep.csv
    if pa "$m" "$c" "$csv" && vals=$(parse "$csv") && [ -n "$vals" ]; then
      read -r ips p50 <<<"$vals"
    else
      ips=NA p50=NA
    fi
    printf '%s\t%s\t%s\t%s\t%s\n' "$m" "$c" "$rep" "$ips" "$p50" >>"$RESULTS"
    log "rep $rep $m c=$c: $ips infer/s, p50 $p50 us"
  done
done
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
curl -s "http://127.0.0.1:$HTTP/v2/models/dense_batched/stats" >"$OUT_DIR/dense_batched_stats.json"

export RESULTS LOAD_START LOAD_END REPEATS MEASURE_MS OUT_DIR SIZE
export CPU_MODEL=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo) NPROC=$(nproc)
python3 - <<'EOF'
import csv, json, os, statistics as st
rows = list(csv.DictReader(open(os.environ["RESULTS"]), delimiter="\t"))
def vals(m, c, k):
    return [float(r[k]) for r in rows if r["model"] == m and int(r["concurrency"]) == c and r[k] != "NA"]
def med(v):
    return st.median(v) if v else float("nan")
print(f"### Dynamic batching ({os.environ['SIZE']} dense model), perf_analyzer -i grpc, batch 1, median of {os.environ['REPEATS']} ({os.environ['MEASURE_MS']} ms windows)\n")
print("| model | concurrency | infer/s | min-max | p50 µs |")
print("|---|---:|---:|---:|---:|")
for m, c in (("dense_unbatched", 16), ("dense_batched", 16), ("dense_unbatched", 1), ("dense_queue0", 1), ("dense_batched", 1)):
    ips = vals(m, c, "infer_per_s")
    rng = f"{min(ips):,.0f}-{max(ips):,.0f}" if ips else "n/a"
    print(f"| {m} | {c} | {med(ips):,.0f} | {rng} | {med(vals(m, c, 'p50_us')):,.0f} |")
ratio = med(vals("dense_batched", 16, "infer_per_s")) / med(vals("dense_unbatched", 16, "infer_per_s"))
added = med(vals("dense_queue0", 1, "p50_us")) - med(vals("dense_unbatched", 1, "p50_us"))
print(f"\n- c=16 throughput, batched / unbatched: **{ratio:.2f}x**")
print(f"- c=1 p50 added by the dynamic batcher's queue (dense_queue0 - dense_unbatched): **{added:+.0f} µs**")
stats = json.load(open(os.path.join(os.environ["OUT_DIR"], "dense_batched_stats.json")))["model_stats"][0]
sizes = sorted(((int(b["batch_size"]), int(b["compute_infer"]["count"])) for b in stats["batch_stats"]), key=lambda x: -x[1])[:6]
print(f"- dense_batched executions by batch size (most frequent): {', '.join(f'{s}: {n}' for s, n in sizes)}")
print(f"- machine: {os.environ['NPROC']} CPUs, {os.environ['CPU_MODEL']}; perf_analyzer shares them. "
      f"Load average before {os.environ['LOAD_START']}, after {os.environ['LOAD_END']}.")
EOF
log "raw results: $OUT_DIR"
