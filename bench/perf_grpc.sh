#!/usr/bin/env bash
# gRPC benchmarks, Tessera vs reference Triton: bench/perf.sh with PROTOCOL=grpc, first with tensors
# inline (raw_input_contents), then with SHM=system (perf_analyzer --shared-memory system).
set -euo pipefail
here=$(dirname "${BASH_SOURCE[0]}")
env PROTOCOL=grpc SHM=none "$here/perf.sh" "$@"
env PROTOCOL=grpc SHM=system "$here/perf.sh" "$@"
