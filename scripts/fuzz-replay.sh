#!/usr/bin/env bash
# Builds the fuzz targets on stable (no cargo-fuzz needed) and replays each target's seed
# corpus and every past crash (`-runs=0`: run the inputs, do not fuzz), so a fixed bug stays
# fixed. Long fuzzing is a command of its own: see the README's development section.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
# The fuzz crate is its own workspace: keep its build beside it whatever the caller's
# CARGO_TARGET_DIR says, so the binaries are where this script runs them from.
export CARGO_TARGET_DIR="$PWD/target"

cargo build --locked --bins
status=0
for target in $(sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.toml | grep -v '^interlock-fuzz$'); do
  dirs=()
  for dir in "corpus/$target" "regressions/$target"; do
    [ -d "$dir" ] && dirs+=("$dir")
  done
  if [ ${#dirs[@]} -eq 0 ]; then
    echo "FAIL $target: no corpus" >&2
    status=1
    continue
  fi
  inputs=$(find "${dirs[@]}" -type f | wc -l)
  if "./target/debug/$target" -runs=0 "${dirs[@]}" > "target/replay-$target.log" 2>&1; then
    echo "ok   $target: $inputs inputs replayed"
  else
    echo "FAIL $target: see fuzz/target/replay-$target.log" >&2
    tail -n 30 "target/replay-$target.log" >&2
    status=1
  fi
done
exit $status
