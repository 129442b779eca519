#!/usr/bin/env bash
# HTTP benchmark, Tessera vs reference Triton: bench/perf.sh with PROTOCOL=http (see its header).
exec env PROTOCOL=http "$(dirname "${BASH_SOURCE[0]}")/perf.sh" "$@"
