#!/usr/bin/env bash
# The group-commit hand-off under loom's model checker (group-commit/tests/loom.rs). `--cfg loom`
# reaches every crate it builds, so it builds in a target directory of its own and leaves the
# workspace's build alone. `cargo test --workspace` runs the same (group-commit/tests/under_loom.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
  cargo test --locked -p interlock-group-commit --release --test loom -- --nocapture
