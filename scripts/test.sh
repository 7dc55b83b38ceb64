#!/usr/bin/env bash
# Every test: the workspace's on the embedded default (SQLite), then the engine's integration
# tests again with every ledger on PostgreSQL (issue 20). The PostgreSQL run starts its own
# throwaway cluster (the `interlock-pgtest` crate), installing PostgreSQL from Debian's
# packages when it is missing; it fails with the reason when it cannot. Extra arguments go to
# both cargo test runs (e.g. --locked).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace "$@" -- --nocapture  # --nocapture: the model checker prints its figures
INTERLOCK_TEST_BACKEND=postgres cargo test -p interlock-engine --tests "$@"
