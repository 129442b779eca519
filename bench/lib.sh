# Shared by the bench scripts (sourced, not run).

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
