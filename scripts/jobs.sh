# Shared by setup.sh and serve.sh (sourced, not run): stopping a script's background jobs with
# everything they started, however the script ends.

# descendants PID: every process below PID, children before their own.
descendants() { local child; for child in $(pgrep -P "$1"); do echo "$child"; descendants "$child"; done; }

# stop_jobs: kills this shell's background jobs and their descendants.
stop_jobs() { local job; for job in $(jobs -p); do kill $(descendants "$job") "$job" 2>/dev/null || true; done; }
