#!/usr/bin/env bash
# Architecture invariant (docs/ARCHITECTURE.md, "the profile"): the names of a rail's tools and
# arguments live in its profile (profile/profiles/razorpay.yaml, loaded by profile/src/), never in spec, machine, the driver or
# the ledger. This looks for any of Razorpay's names as a string literal in their non-test code:
# everything from a file's first `#[cfg(test)]` on, and files named tests.rs, are tests. The
# engine's memory rail is a mock (it speaks Razorpay's error code, as the mock server does).
set -euo pipefail
cd "$(dirname "$0")/.."

names='create_refund|create_instant_settlement|fetch_payment|fetch_order|fetch_balance|fetch_multiple_refunds_for_payment|fetch_all_instant_settlements|payment_id|order_id|receipt|settle_full_balance|notes|amount_refunded|amount_paid|BAD_REQUEST_ERROR'
status=0
while IFS= read -r file; do
  case "$file" in
    */tests.rs | engine/src/memory_rail.rs) continue ;;
  esac
  hits=$(awk '/#\[cfg\(test\)\]/ { exit } { print FILENAME ":" FNR ": " $0 }' "$file" \
    | grep -E "\"($names)[\" .:]" || true)
  if [ -n "$hits" ]; then
    printf '%s\n' "$hits"
    status=1
  fi
done < <(find spec/src machine/src driver/src engine/src -name '*.rs' | sort)
if [ "$status" -ne 0 ]; then
  echo "a rail's tool or argument name outside its profile (move it to profile/src/)"
else
  echo "no rail tool or argument name in spec, machine, driver or engine outside tests"
fi
exit "$status"
