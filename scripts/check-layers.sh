#!/usr/bin/env bash
# The layering of host/src, checked as a crate split would make the compiler check it
# (docs/testing.md says why this check rather than a workspace of crates).
#
# LAYERS is the one list of the layers of host/src, bottom first; README.md, docs/ and the module
# docs point here rather than copy it. The rules, all derived from it:
# - every module of host/src (a directory, or a file other than lib.rs and main.rs and the files
#   a module mounts with #[path]) is in exactly one layer;
# - a module imports (`crate::<module>`, outside comments) only modules of the layers below its
#   own: never one of its own layer, never one above;
# - the doors see the engine only through the frontend: they import nothing from the layers named
#   in THROUGH_FRONTEND;
# - `crate::` paths name a module, not a re-export at the crate root, and each `use crate::`
#   imports from one module (a grouped `use crate::{a, b}` would hide a module from the check);
# - within each module directory, the files' imports of one another (`super::<sibling>`,
#   `crate::<dir>::<sibling>`, outside each file's tests) form no circle.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT/host/src"

LAYERS=(
  # core: error and tensor types, request limits, config, tracing, the request type and `Infer`,
  # statistics, the drain, the response cache, shared memory; bottom first.
  "core.0:     error execution gpu proto restricted"
  "core.1:     tensor limits tenant"
  "core.2:     config trace"
  "core.3:     infer stats"
  "core.4:     lifecycle cache shm tenancy"
  # Backend / ModelInstance: ONNX Runtime, TorchScript, Python and Wasm guests (BLS through
  # Weak<dyn Infer>).
  "backend:    backend"
  # The instance pool, the dynamic and sequence batchers, ensembles.
  "scheduler:  scheduler"
  # One loaded version: validation, classification, warmup, cache, statistics.
  "model:      model"
  # The model manager (implements Infer).
  "repository: repository"
  # What the doors read: the frontend (readiness, metadata, settings, shared memory, inference on a
  # resolved ServedModel) and the Prometheus exposition.
  "frontend:   frontend metrics"
  # The doors: HTTP, gRPC, in-process.
  "doors:      http grpc inprocess"
  # `tessera guest build`, and the fuzzing entry points over the doors' parsers.
  "tools:      guest fuzzing"
  # The library's front door: assembles everything and starts the doors.
  "server:     server"
  # The command line, on top of the library.
  "cli:        cli"
)
# The layers the doors reach only through the frontend.
THROUGH_FRONTEND="backend scheduler model repository"
DOORS_LAYER="doors"

status=0
fail() {
  echo "check-layers: $1" >&2
  [[ $# -gt 1 ]] && echo "$2" >&2
  status=1
}

# Code lines only: grep -n output with comment lines (`//`, `//!`, `///`) dropped.
code_only() { grep -vE '^[^:]+:[0-9]+:\s*//' || true; }

declare -A layer_of=() layer_index=()
layer_names=()
for i in "${!LAYERS[@]}"; do
  line=${LAYERS[$i]}
  name=${line%%:*}
  layer_names+=("$name")
  layer_index[$name]=$i
  for module in ${line#*:}; do
    if [[ -n ${layer_of[$module]:-} ]]; then
      fail "'$module' is in two layers (${layer_of[$module]} and $name)"
    fi
    layer_of[$module]=$i
  done
done

# Files a module mounts with #[path = "..."] belong to that module.
declare -A mounted_by=()
for file in *.rs; do
  for target in $(grep -oE '#\[path = "[^"/]+\.rs"\]' "$file" | sed -E 's/.*"(.*)".*/\1/'); do
    mounted_by[$target]=${file%.rs}
  done
done

# Every module of host/src, and the files of each.
declare -A paths_of=()
modules=()
for entry in *; do
  case $entry in
    lib.rs | main.rs) continue ;;
    *.rs) module=${entry%.rs} ;;
    *) [[ -d $entry ]] || continue; module=$entry ;;
  esac
  if [[ -n ${mounted_by[$entry]:-} ]]; then
    paths_of[${mounted_by[$entry]}]+=" $entry"
    continue
  fi
  modules+=("$module")
  paths_of[$module]+=" $entry"
done
for module in "${modules[@]}"; do
  [[ -n ${layer_of[$module]:-} ]] || fail "'$module' (host/src/${paths_of[$module]# }) is in no layer: add it to LAYERS"
done
for module in "${!layer_of[@]}"; do
  [[ -n ${paths_of[$module]:-} ]] || fail "LAYERS names '$module', which host/src does not have"
done
[[ $status -eq 0 ]] || exit $status

is_module="^($(IFS='|'; echo "${modules[*]}"))$"

# `crate::` paths name modules, one module per `use`.
grouped=$(grep -rnHE "crate::\{" . | code_only || true)
[[ -z $grouped ]] || fail "import each module on its own line (use crate::<module>::...):" "$grouped"
# (grep -o prints the match alone: each hit's line is read again to leave comments out.)
not_modules=$(grep -rnHoE "crate::[A-Za-z_][A-Za-z0-9_]*" . | awk -F'crate::' -v re="$is_module" '$2 !~ re' |
  while IFS= read -r hit; do
    file=${hit%%:*}; rest=${hit#*:}; line=${rest%%:*}
    sed -n "${line}p" "$file" | grep -qE '^\s*//' || echo "$hit"
  done || true)
[[ -z $not_modules ]] || fail "a crate:: path names something other than a module (a root re-export?):" "$not_modules"

# No import of the module's own layer or one above; the doors skip the engine.
for module in "${modules[@]}"; do
  own=${layer_of[$module]}
  forbidden=()
  for other in "${modules[@]}"; do
    [[ $other == "$module" ]] && continue
    (( ${layer_of[$other]} >= own )) && forbidden+=("$other")
  done
  if [[ ${layer_names[$own]} == "$DOORS_LAYER" ]]; then
    for layer in $THROUGH_FRONTEND; do
      for other in ${LAYERS[${layer_index[$layer]}]#*:}; do forbidden+=("$other"); done
    done
  fi
  [[ ${#forbidden[@]} -gt 0 ]] || continue
  # shellcheck disable=SC2086
  found=$(grep -rnHE "crate::($(IFS='|'; echo "${forbidden[*]}"))\b" ${paths_of[$module]} | code_only || true)
  [[ -z $found ]] || fail "'$module' (layer ${layer_names[$own]}) imports its own layer, one above it, or (a door) \
what lies behind the frontend:" "$found"
done

# No circle between the files of one module directory: each file's imports of its siblings (for a
# sibling directory, its mod.rs's `super::` paths and its files' `crate::<dir>::` paths), outside
# tests (a file's `#[cfg(test)] mod ...tests` and what follows it; *_tests.rs, test_support.rs).
code_before_tests() {
  awk '/^#\[cfg\(test\)\]/ { test = 1; next }
       test && /^#\[/ { next }
       test && /^(pub(\([a-z: ]*\))? )?mod [a-z_]*tests?([^a-z0-9_]|$)/ { exit }
       { test = 0; sub(/\/\/.*/, ""); print }' "$@" | tr '\n' ' '
}
while IFS= read -r dir; do
  siblings=()
  for file in "$dir"/*.rs "$dir"/*/mod.rs; do
    [[ -e $file ]] || continue
    name=${file#"$dir"/}
    case $name in mod.rs | *_tests.rs | test_support.rs) continue ;; esac
    name=${name%/mod.rs}
    siblings+=("${name%.rs}")
  done
  [[ ${#siblings[@]} -gt 1 ]] || continue
  sibling_re="^($(IFS='|'; echo "${siblings[*]}"))$"
  crate_path="crate::${dir#./}"
  crate_path=${crate_path//\//::}
  edges=""
  for name in "${siblings[@]}"; do
    if [[ -f $dir/$name.rs ]]; then
      own=$(code_before_tests "$dir/$name.rs")
      all=$own
    else
      own=$(code_before_tests "$dir/$name/mod.rs")
      all=$(find "$dir/$name" -name '*.rs' ! -name '*_tests.rs' ! -name test_support.rs -print0 |
        xargs -0 -n1 bash -c "$(declare -f code_before_tests); code_before_tests \"\$0\"")
    fi
    used=$( {
      grep -oE "super::[a-z_][a-z0-9_]*" <<<"$own" | sed 's/^super:://'
      grep -oE "super::\{[^;]*" <<<"$own" | grep -oE "[a-z_][a-z0-9_]*" | grep -vx super
      grep -oE "${crate_path}::[a-z_][a-z0-9_]*" <<<"$all" | sed "s/^${crate_path}:://"
    } | sort -u | grep -E "$sibling_re" | grep -vx "$name" || true)
    for target in $used; do edges+="$name $target"$'\n'; done
  done
  [[ -n $edges ]] || continue
  loop=$(tsort <<<"$edges" 2>&1 >/dev/null || true)
  if [[ -n $loop ]]; then
    fail "files of host/src/${dir#./} import each other in a circle (tsort's loop):" \
      "$(grep -v 'input contains a loop' <<<"$loop" | sed 's/^tsort: //' | paste -sd' ')"
  fi
done < <(find . -mindepth 1 -type d | sort)
exit $status
