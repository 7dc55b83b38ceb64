#!/usr/bin/env bash
# Architecture invariant (docs/ARCHITECTURE.md): the crates beneath the engine never depend on
# SQLite, an async runtime, MCP or a clock source, not even transitively. Fails naming the path.
set -euo pipefail
cd "$(dirname "$0")/.."

forbidden='^(rusqlite|libsqlite3-sys|tokio|rmcp|async-std|chrono|time) '
status=0
for crate in interlock-spec interlock-machine interlock-driver interlock-profile interlock-model-check; do
  tree=$(cargo tree --locked -p "$crate" -e normal --prefix none --format '{p}')
  hits=$(printf '%s\n' "$tree" | grep -E "$forbidden" | sort -u || true)
  if [ -n "$hits" ]; then
    echo "$crate depends on what the foundation must not:"
    printf '%s\n' "$hits" | sed 's/^/  /'
    status=1
  fi
done

# machine depends on spec (for ids) and serde, nothing else of its own.
direct=$(cargo tree --locked -p interlock-machine -e normal --depth 1 --prefix none --format '{p}' | tail -n +2 | awk '{print $1}' | sort -u | tr '\n' ' ')
if [ "$direct" != "interlock-spec serde " ]; then
  echo "interlock-machine's direct dependencies must be interlock-spec and serde, got: $direct"
  status=1
fi
# The driver depends on spec, machine and serde (with serde_json and thiserror), nothing else.
direct=$(cargo tree --locked -p interlock-driver -e normal --depth 1 --prefix none --format '{p}' | tail -n +2 | awk '{print $1}' | sort -u | tr '\n' ' ')
if [ "$direct" != "interlock-machine interlock-spec serde serde_json thiserror " ]; then
  echo "interlock-driver's direct dependencies must be interlock-spec, interlock-machine, serde, serde_json and thiserror, got: $direct"
  status=1
fi
[ "$status" -eq 0 ] && echo "spec, machine, driver, profile and model-check depend on no SQLite, tokio, rmcp or clock crate"
exit "$status"
