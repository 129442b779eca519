#!/usr/bin/env bash
# Sets up (idempotently) and serves model-repos/quickstart: HTTP on 127.0.0.1:8000 and gRPC on 127.0.0.1:8001 by default.
# Extra arguments go to `tessera serve` (e.g. --http-port 9000 --http-address 0.0.0.0).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$ROOT/scripts/setup.sh"
exec "$ROOT/target/debug/tessera" serve --model-repository "$ROOT/model-repos/quickstart" --http-address 127.0.0.1 --grpc-address 127.0.0.1 \
  --allow-client-shm=true "$@"
