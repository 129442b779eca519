# Shared by the bench scripts (sourced, not run).

# wait_models_ready PID HTTP_PORT LOG MODEL...: waits (60 s at most) until every MODEL answers
# ready on 127.0.0.1:HTTP_PORT; fails with the log's tail if the server PID exits first.
wait_models_ready() {
  local pid=$1 port=$2 server_log=$3 m code
  shift 3
  for m in "$@"; do
    code=
    for _ in $(seq 600); do
      code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 "http://127.0.0.1:$port/v2/models/$m/ready" || true)
      [ "$code" = 200 ] && break
      kill -0 "$pid" 2>/dev/null || { tail -20 "$server_log" >&2; echo "server exited during startup" >&2; return 1; }
      sleep 0.1
    done
    [ "$code" = 200 ] || { echo "$m not ready after 60 s (log: $server_log)" >&2; return 1; }
  done
}
