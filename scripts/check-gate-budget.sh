#!/usr/bin/env bash
# Thin gates: every gate file in driver/src/gates/ (mod.rs, the ladder, excepted) has at most
# GATE_LINES_MAX lines of code, blank lines and comment lines (// and ///) not counted.
set -euo pipefail
cd "$(dirname "$0")/.."

GATE_LINES_MAX=120
status=0
shopt -s nullglob
files=(driver/src/gates/*.rs)
if [ ${#files[@]} -eq 0 ]; then
  echo "no gate files found under driver/src/gates/" >&2
  exit 1
fi
for file in "${files[@]}"; do
  [ "$(basename "$file")" = mod.rs ] && continue
  lines=$(grep -cvE '^\s*($|//)' "$file" || true)
  if [ "$lines" -gt "$GATE_LINES_MAX" ]; then
    echo "FAIL $file: $lines lines of code, budget $GATE_LINES_MAX" >&2
    status=1
  else
    echo "ok   $file: $lines/$GATE_LINES_MAX"
  fi
done
exit $status
