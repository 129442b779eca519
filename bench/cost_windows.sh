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
# from bench/lib.sh's load_window: a MEASURE_S window that starts WARMUP_S after perf_analyzer
# does, which only generates the load (at Tessera's c=16 rates its own stabilisation passes can
# run for minutes while its memory grows). Cells run in the order given, round after round, so
# drift hits every server alike.
#
# Env: ROUNDS=3 CONCURRENCY="1 16" WARMUP_S=2 MEASURE_S=4 PYTHON=python3
#      PERF_ANALYZER, PERF_ANALYZER_LD_LIBRARY_PATH (default: the reference Triton's, bench/lib.sh)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROUNDS=${ROUNDS:-3}
CONCURRENCY=${CONCURRENCY:-1 16}
WARMUP_S=${WARMUP_S:-2}
MEASURE_S=${MEASURE_S:-4}
PYTHON=${PYTHON:-python3}
[ $# -gt 0 ] || { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2; }
# shellcheck disable=SC1091
source "$ROOT/bench/lib.sh"
[ -n "${PERF_ANALYZER:-}" ] || reference_env
echo "| round | server | model | c | infer/s | server CPU µs / inference | server-side µs / request | executions / inference |"
echo "|---:|---|---|---:|---:|---:|---:|---:|"
for round in $(seq "$ROUNDS"); do
  for c in $CONCURRENCY; do
    for spec in "$@"; do
      name=${spec%%=*}
      IFS=: read -r port pid model <<<"${spec#*=}"
      IFS=$'\t' read -r ips cpu server execs < <(load_window "$pid" "$port" "$model" "$port" http "$c")
      echo "| $round | $name | $model | $c | $ips | $cpu | $server | $execs |"
    done
  done
done
