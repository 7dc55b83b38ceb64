//! `interlock demo` end to end: the built binary, with the mock next to it, runs its six steps
//! and asserts its own story; here its exit code and a few of its lines are checked.

mod common;

use std::process::Command;

use common::*;

#[test]
fn the_demo_runs_its_six_steps_and_exits_zero() {
    // The demo finds the mock next to itself; building it puts it there.
    mock_bin();
    let out = Command::new(BIN)
        .arg("demo")
        .env("RUST_LOG", "error")
        .output()
        .expect("run interlock demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed:\n{stdout}\n{stderr}");
    for line in [
        "-> APPLIED / APPLIED  entity rfnd_MOCK0000000001",
        "-> APPLIED / IDEMPOTENT_REPLAY  entity rfnd_MOCK0000000001  (idempotent replay)",
        "-> REFUSED / REFUND_EXCEEDS_REFUNDABLE",
        "-> UNKNOWN / OUTCOME_UNKNOWN",
        "-> APPLIED / IDEMPOTENT_REPLAY  entity rfnd_MOCK0000000002  (idempotent replay)",
        "-> REFUSED / TOOL_DRIFTED",
        "-> HELD / REFERENT_UNRESOLVABLE_HELD",
        "-> APPLIED / APPLIED  entity setlod_MOCK0000000001",
        "=== ledger (interlock ledger list) ===",
        "=== rail journal (interlock-rail-mock inspect) ===",
        "invariant checked: entities with an Interlock stamp: 3, each stamp once",
        "demo passed in",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in:\n{stdout}");
    }
}
