#!/usr/bin/env bash
# Writes each target's seed inputs (tessera::fuzzing::seeds) into fuzz/corpus/<target>/, where
# cargo-fuzz starts from. Runs the stable driver's test binary to print them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo test --quiet -p tessera --lib fuzzing::tests::write_seed_corpus -- --ignored --nocapture
