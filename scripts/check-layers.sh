#!/usr/bin/env bash
# The layering of host/src, checked as a crate split would make the compiler check it: each
# module may import (`crate::<module>` outside comments) only from the layers below it.
#   core:       error tensor execution infer config stats cache lifecycle limits restricted gpu proto
#   backend:    backend traits, ONNX, TorchScript, Wasm ...
#   scheduler:  pool, batchers, ensembles
#   model:      one loaded version
#   repository: the model manager (implements Infer)
#   frontend:   what the doors share (shm, metadata, settings)
#   doors:      http grpc metrics inprocess
#   top:        server cli guest fuzzing
# (docs/testing.md says why this check rather than a workspace of crates.)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT/host/src"

above_core="backend|scheduler|model|repository|frontend|shm|http|grpc|metrics|server|cli|guest"
declare -A forbidden=(
  [error]=$above_core [tensor]=$above_core [execution]=$above_core [infer]=$above_core
  [config]=$above_core [stats]=$above_core [cache]=$above_core [lifecycle]=$above_core
  [limits]=$above_core [restricted]=$above_core [gpu]=$above_core
  [backend]="scheduler|model|repository|frontend|shm|http|grpc|metrics|server|cli"
  [scheduler]="model|repository|frontend|shm|http|grpc|metrics|server|cli"
  [model]="repository|frontend|shm|http|grpc|metrics|server|cli"
  [repository]="frontend|shm|http|grpc|metrics|server|cli"
  [frontend]="http|grpc|metrics|server|cli"
  [shm]="http|grpc|metrics|server|cli"
  [http]="backend|scheduler|model|repository|grpc|metrics|server|cli"
  [grpc]="backend|scheduler|model|repository|http|metrics|server|cli"
  [inprocess]="backend|scheduler|model|repository|http|grpc|metrics|server|cli"
)

status=0
# Grouped imports (`use crate::{a, b}`) would hide a module from the check below.
grouped=$(grep -rnHE "use crate::\{" . || true)
if [[ -n $grouped ]]; then
  echo "check-layers: import each module on its own line (use crate::<module>::...):" >&2
  echo "$grouped" >&2
  status=1
fi
for module in "${!forbidden[@]}"; do
  paths=()
  [[ -f $module.rs ]] && paths+=("$module.rs")
  [[ -d $module ]] && paths+=("$module")
  found=$(grep -rnHE "crate::(${forbidden[$module]})\b" "${paths[@]}" | grep -vE '^[^:]+:[0-9]+:\s*//' || true)
  if [[ -n $found ]]; then
    echo "check-layers: '$module' reaches up into a layer above it:" >&2
    echo "$found" >&2
    status=1
  fi
done
exit $status
