#!/usr/bin/env bash
# Where a Python guest's request goes, in-process, in batches: two probe guests and
# add_sub_python, each with a dynamic batcher that waits for 8 requests
# (`max_queue_delay_microseconds: 2000`, `preferred_batch_size: [ 8 ]`), run by
# `cargo bench --bench guest_call` with 8 requests in flight (CONCURRENCY=8):
#   p0_prebuilt      returns prebuilt responses and reads nothing: the SDK's and the host's
#                    share of a request (the pack in, the answer out, the call)
#   p1_reads_inputs  p0 plus both inputs as lists (get_input_tensor_by_name, as_list)
#   add_sub_python   the example guest: p1 plus add_sub's own work (two list comprehensions,
#                    two Tensors, a response)
# Prints guest_call's table: CPU µs per request, a batch's share. Needs the release bench build
# and componentize-py (scripts/setup.sh).
#
#   usage: bench/probes/python_phases.sh            Env: CONCURRENCY=8 KEEP=1 (keep the repository)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
CONCURRENCY=${CONCURRENCY:-8}
REPO=$(mktemp -d /tmp/tessera-python-phases.XXXXXX)
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$REPO"' EXIT
config() {
  sed -e "s/^name: .*/name: \"$1\"/" \
    -e "s/^dynamic_batching { }/dynamic_batching { max_queue_delay_microseconds: 2000 preferred_batch_size: [ $CONCURRENCY ] }/" \
    model-repos/quickstart/add_sub_python/config.pbtxt >"$REPO/$1/config.pbtxt"
}
for probe in p0_prebuilt p1_reads_inputs add_sub_python; do
  mkdir -p "$REPO/$probe/1"
  config "$probe"
  src=bench/probes/python_phases/$probe.py
  [ "$probe" = add_sub_python ] && src=example-guests/add_sub_python
  bash scripts/build-python-guest.sh "$src" "$REPO/$probe/1/model.wasm" >&2
done
grep -q 'preferred_batch_size' "$REPO/add_sub_python/config.pbtxt" || { echo "python_phases: batching config not rewritten" >&2; exit 1; }
bench=$(cargo bench -p tessera --bench guest_call --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("target", {}).get("name") == "guest_call" and m.get("executable"):
        print(m["executable"])')
cd host
REPO=$REPO CONCURRENCY=$CONCURRENCY MODELS=p0_prebuilt,p1_reads_inputs,add_sub_python "$bench" --bench
