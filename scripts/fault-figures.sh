#!/usr/bin/env bash
# Runs the fault tests the chaos matrix does not reach as cells (issue 23, items 1, 2 and 4:
# proxy/tests/disk.rs, clock.rs, hostile.rs) with their figures printed, and writes
# docs/RESULTS.faults.md from what they printed: each test's result and each `FIGURE` line.
# Needs root (the disk tests mount a tmpfs) and installs libfaketime itself (the clock tests).
# Exits non-zero if any test failed; the file is written either way, with the failures in it.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/RESULTS.faults.md}
log=$(mktemp)
figures=$(mktemp)
trap 'rm -f "$log" "$figures"' EXIT
command="cargo test --release -p interlock --test disk --test clock --test hostile -- --test-threads=1"
status=0
INTERLOCK_FIGURES="$figures" $command >"$log" 2>&1 || status=$?
commit=$(git rev-parse --short=12 HEAD)
# Results files a run of the benchmarks leaves behind do not make the code uncommitted.
if [ -n "$(git status --porcelain --untracked-files=no -- . ':!docs')" ]; then
    tree="with uncommitted changes"
else
    tree="a clean tree"
fi
{
    echo "# Fault test results"
    echo
    echo "Machine-written by \`scripts/fault-figures.sh\`; do not edit by hand, run the script again."
    echo
    echo "- date (UTC): $(date -u '+%Y-%m-%d %H:%M')"
    echo "- commit: \`$commit\` ($tree)"
    echo "- command: \`scripts/fault-figures.sh\`: \`$command\` with \`INTERLOCK_FIGURES\` naming the file the tests append their figures to"
    echo "- result: $(grep -E '^test result:' "$log" | awk '{p+=$4; f+=$6} END {printf "%d passed, %d failed", p, f}')"
    echo
    echo "The faults of issue 23 that are tests rather than chaos matrix cells: the ledger's disk full"
    echo "or failing its fsync, the wall clock jumping a day (libfaketime against the real binary), and an"
    echo "upstream that answers 100 MB, another request's id, invalid UTF-8, a trickle or a flood. Each test"
    echo "asserts nothing lost, never two, never unknown and a clear error; the figures are what it measured."
    echo
    echo "## Tests"
    echo
    echo "| test | result |"
    echo "| --- | --- |"
    # The proxies the tests start log to the same stderr, so a test's "ok" may land lines
    # after its name: a test failed if libtest lists it under "failures:", passed otherwise.
    failed=$(sed -n '/^failures:$/,/^test result/p' "$log" | grep -E '^    [a-z_0-9]+$' | tr -d ' ' || true)
    for name in $(grep -oE '^test [a-z_0-9]+ \.\.\. ' "$log" | awk '{print $2}'); do
        if grep -qx "$name" <<<"$failed"; then echo "| \`$name\` | FAILED |"; else echo "| \`$name\` | ok |"; fi
    done
    echo
    echo "## Figures"
    echo
    echo "| fault | figure | value |"
    echo "| --- | --- | --- |"
    awk -F'\t' '{gsub(/\|/, "\\|"); printf "| %s | %s | %s |\n", $1, $2, $3}' "$figures"
} >"$out"
echo "wrote $out"
grep -E '^test result:|FAILED|panicked' "$log" || true
exit "$status"
