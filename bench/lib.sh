# Shared by the bench scripts (sourced, not run).

# The reference Triton, as bench/benchlib.py finds it: TRITON_REFERENCE, the directory of its
# scripts (setup.sh, run.sh, stop.sh, model_repository/), and TRITON_REFERENCE_ENV, the
# environment file its setup.sh writes (PERF_ANALYZER, TRITONSERVER, ...).
TRITON_REFERENCE=${TRITON_REFERENCE:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/../shared/reference/triton}
TRITON_REFERENCE_ENV=${TRITON_REFERENCE_ENV:-/opt/triton-reference/triton/env.sh}

# reference_env: sources the reference's environment file, setting it up first (idempotent; its
# log in ${OUT_DIR:-/tmp}/triton-setup.log).
reference_env() {
  if [ ! -f "$TRITON_REFERENCE_ENV" ]; then
    bash "$TRITON_REFERENCE/setup.sh" >"${OUT_DIR:-/tmp}/triton-setup.log" 2>&1 \
      || { tail -20 "${OUT_DIR:-/tmp}/triton-setup.log" >&2; echo "reference setup failed" >&2; return 1; }
  fi
  # shellcheck disable=SC1090
  source "$TRITON_REFERENCE_ENV"
}

# wait_models_ready PID HTTP_PORT LOG MODEL...: waits until every MODEL answers ready on
# 127.0.0.1:HTTP_PORT, READY_TIMEOUT seconds at most (default 60); fails with the log's tail if
# the server PID exits first. Per model, not /v2/health/ready: a binary built without a backend
# that some other quickstart model needs is never ready as a whole.
wait_models_ready() {
  local pid=$1 port=$2 server_log=$3 deadline m code
  shift 3
  deadline=$(( $(date +%s) + ${READY_TIMEOUT:-60} ))
  for m in "$@"; do
    while :; do
      code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 "http://127.0.0.1:$port/v2/models/$m/ready" || true)
      [ "$code" = 200 ] && break
      kill -0 "$pid" 2>/dev/null || { tail -30 "$server_log" >&2; echo "server exited during startup (log: $server_log)" >&2; return 1; }
      [ "$(date +%s)" -lt "$deadline" ] || { tail -30 "$server_log" >&2; echo "$m not ready after ${READY_TIMEOUT:-60} s" >&2; return 1; }
      sleep 0.05
    done
  done
}

# load_window PID HTTP_PORT MODEL LOAD_PORT PROTOCOL CONCURRENCY: one window of a running server's
# own cost under perf_analyzer's load. perf_analyzer only generates the load (its own measurement
# is never waited for: at Tessera's rates its stabilisation passes can run for minutes while its
# memory grows), and is stopped once the window is taken. Prints "infer/s<TAB>server CPU µs per
# inference<TAB>server-side µs per request<TAB>executions per inference" from bench/server_sample.py
# before and after MEASURE_S seconds that start WARMUP_S after the load does, or NA fields when
# nothing succeeded. Env: PERF_ANALYZER, PERF_ANALYZER_LD_LIBRARY_PATH, WARMUP_S, MEASURE_S,
# PYTHON (python3), LOAD_PREFIX (a command to run perf_analyzer under, e.g. "taskset -c 4-15"),
# PA_LOG (perf_analyzer's output, /dev/null by default).
load_window() {
  local pid=$1 http=$2 model=$3 port=$4 protocol=$5 c=$6 here before after t0 t1 pa
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  # shellcheck disable=SC2086
  ${LOAD_PREFIX:-} env LD_LIBRARY_PATH="$PERF_ANALYZER_LD_LIBRARY_PATH" \
    timeout $((WARMUP_S + MEASURE_S + 30)) "$PERF_ANALYZER" -m "$model" -i "$protocol" -u "127.0.0.1:$port" \
    -b 1 --concurrency-range "$c" -p 600000 -r 1 >"${PA_LOG:-/dev/null}" 2>&1 &
  pa=$!
  sleep "$WARMUP_S"
  before=$("${PYTHON:-python3}" "$here/server_sample.py" "$pid" "$http" "$model"); t0=$(date +%s.%N)
  sleep "$MEASURE_S"
  after=$("${PYTHON:-python3}" "$here/server_sample.py" "$pid" "$http" "$model"); t1=$(date +%s.%N)
  kill "$pa" 2>/dev/null || true; wait "$pa" 2>/dev/null || true
  awk -v a="$before" -v b="$after" -v t0="$t0" -v t1="$t1" 'BEGIN { split(a, x, " "); split(b, y, " ")
    n = y[2] - x[2]; if (n <= 0) { print "NA\tNA\tNA\tNA"; exit }
    printf "%.0f\t%.1f\t%.1f\t%.2f\n", n / (t1 - t0), (y[1] - x[1]) * 1e6 / n, (y[3] - x[3]) / n / 1000, (y[4] - x[4]) / n }'
}
