#!/usr/bin/env bash
# The engine's SQL lives in one module and takes its state names from `machine`:
# - no SQL statement in engine/src outside engine/src/ledger/;
# - no state name typed as a SQL literal ('APPLIED', ...) in that module: state groups come from
#   `State::sql_list` and names are bound from `State::as_str`. (The schema file's CHECKs are
#   checked against the machine's predicates by engine/tests/ledger.rs.)
set -euo pipefail
cd "$(dirname "$0")/.."

status=0
outside=$(grep -rnE "\b(SELECT|INSERT INTO|DELETE FROM|UPDATE [a-z_]+ SET)\b" engine/src \
  --include='*.rs' | grep -v '^engine/src/ledger/' || true)
if [ -n "$outside" ]; then
  echo "SQL outside engine/src/ledger/:" >&2
  echo "$outside" >&2
  status=1
fi
states=$(sed -n 's/^ *State::\([A-Za-z]*\) => "\([A-Z_]*\)",$/\2/p' machine/src/state.rs | paste -sd'|')
if [ -z "$states" ]; then
  echo "could not read the state names from machine/src/state.rs" >&2
  exit 1
fi
typed=$(grep -rnE "'($states)'" engine/src/ledger --include='*.rs' || true)
if [ -n "$typed" ]; then
  echo "a state name typed by hand in the ledger's SQL (bind State::as_str instead):" >&2
  echo "$typed" >&2
  status=1
fi
[ $status -eq 0 ] && echo "engine SQL only in engine/src/ledger/, no state name typed in it ($(echo "$states" | tr '|' '\n' | wc -l) states known)"
exit $status
