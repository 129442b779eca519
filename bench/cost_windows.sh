#!/usr/bin/env bash
# A server's own cost under perf_analyzer's load, over one fixed window per cell: for servers that
# are already running (Tessera, the reference Triton), so several can be compared side by side,
# in rounds, without restarting them.
#
#   usage: ROUNDS=3 CONCURRENCY="1 16" bench/cost_windows.sh NAME=HTTP_PORT:PID:MODEL ...
#   e.g.   bench/cost_windows.sh triton=18200:1234:add_sub tessera=18300:5678:add_sub_rust
#
# Prints one markdown row per server, model, concurrency and round: infer/s, server CPU µs per
# inference (the server's whole process tree, Triton's python stubs included), server-side µs per
# request (the statistics extension's success time / count) and executions per inference, all
# from bench/server_sample.py around a MEASURE_S window that starts WARMUP_S after perf_analyzer
# does. perf_analyzer only generates the load (its own measurement is never waited for): at
# Tessera's c=16 rates its stabilisation passes can run for minutes while its memory grows
# (20 GB once here, with ../shared/reference/triton/cpu_cost.py), so each run is cut off with
# `timeout` once the window is taken. Cells run in the order given, round after round, so drift
# hits every server alike.
#
# Env: ROUNDS=3 CONCURRENCY="1 16" WARMUP_S=2 MEASURE_S=4 PYTHON=python3
#      PERF_ANALYZER, PERF_ANALYZER_LD_LIBRARY_PATH (default: /opt/triton-reference/triton/env.sh,
#      from ../shared/reference/triton/setup.sh)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROUNDS=${ROUNDS:-3}
CONCURRENCY=${CONCURRENCY:-1 16}
WARMUP_S=${WARMUP_S:-2}
MEASURE_S=${MEASURE_S:-4}
PYTHON=${PYTHON:-python3}
if [ -z "${PERF_ANALYZER:-}" ]; then
  # shellcheck disable=SC1091
  source /opt/triton-reference/triton/env.sh
fi
[ $# -gt 0 ] || { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2; }

sample() { "$PYTHON" "$ROOT/bench/server_sample.py" "$1" "$2" "$3"; }
echo "| round | server | model | c | infer/s | server CPU µs / inference | server-side µs / request | executions / inference |"
echo "|---:|---|---|---:|---:|---:|---:|---:|"
for round in $(seq "$ROUNDS"); do
  for c in $CONCURRENCY; do
    for spec in "$@"; do
      name=${spec%%=*}
      IFS=: read -r port pid model <<<"${spec#*=}"
      LD_LIBRARY_PATH=$PERF_ANALYZER_LD_LIBRARY_PATH timeout $((WARMUP_S + MEASURE_S + 30)) \
        "$PERF_ANALYZER" -m "$model" -u "127.0.0.1:$port" -i http -b 1 --concurrency-range "$c" \
        --measurement-interval 60000 --max-trials 1 -s 100 >/dev/null 2>&1 &
      load=$!
      sleep "$WARMUP_S"
      read -r cpu0 n0 ns0 ex0 < <(sample "$pid" "$port" "$model")
      t0=$(date +%s.%N)
      sleep "$MEASURE_S"
      read -r cpu1 n1 ns1 ex1 < <(sample "$pid" "$port" "$model")
      t1=$(date +%s.%N)
      kill "$load" 2>/dev/null || true
      wait "$load" 2>/dev/null || true
      "$PYTHON" -c "
n = max($n1 - $n0, 1)
print(f'| $round | $name | $model | $c | {n / ($t1 - $t0):,.0f} | {($cpu1 - $cpu0) * 1e6 / n:.1f} | '
      f'{($ns1 - $ns0) / n / 1000:.1f} | {($ex1 - $ex0) / n:.2f} |')"
    done
  done
done
