#!/usr/bin/env bash
# One build of the server library (host/) serves both the binary with the TorchScript backend
# (`--features torch --bin tessera`) and the Python module (`-p tessera-python`): that holds while
# every crate the two dependency graphs share gets the same features in both (host/Cargo.toml turns
# on the ones tch's side adds). Fails naming each crate whose features differ, since a difference
# makes cargo compile the library, and everything between, twice.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
graph() { cargo tree --quiet -e build,normal,features -f '{p} {f}' --prefix none "$@" | sort -u; }
binary=$(graph -p tessera-cli --features torch)
module=$(graph -p tessera-python)
python3 - "$binary" "$module" <<'PY'
import sys

def features(text):
    crates = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 2 or not parts[1].startswith("v"):
            continue
        listed = parts[2] if len(parts) > 2 and not parts[2].startswith("(") else ""
        crates.setdefault(f"{parts[0]} {parts[1]}", set()).update(f for f in listed.split(",") if f)
    return crates

binary, module = features(sys.argv[1]), features(sys.argv[2])
differ = [f"  {c}: binary {sorted(binary[c])}, module {sorted(module[c])}"
          for c in sorted(binary.keys() & module.keys()) if binary[c] != module[c]]
if differ:
    print("check-one-build: crates the binary and the Python module share get other features in each "
          "(the library would compile twice; turn them on in host/Cargo.toml):", *differ, sep="\n")
    sys.exit(1)
PY
