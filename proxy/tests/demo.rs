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
        "=== the ledger (interlock ledger list) beside the rail's journal (interlock-rail-mock inspect) ===",
        "invariant checked: entities with an Interlock stamp: 3, each stamp once",
        "demo passed in",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in:\n{stdout}");
    }
    // Side by side: each applied intent on the line of the rail entity carrying its stamp, and
    // the seed's refunds shown as made outside Interlock.
    for entity in [
        "rfnd_MOCK0000000001",
        "rfnd_MOCK0000000002",
        "setlod_MOCK0000000001",
    ] {
        assert!(
            stdout.lines().any(|l| l.contains("APPLIED")
                && l.matches(entity).count() == 2
                && l.contains(" | ")),
            "no side-by-side line for {entity} in:\n{stdout}"
        );
    }
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("(not made through Interlock)") && l.contains("rfnd_SEED")),
        "{stdout}"
    );
}

#[test]
fn the_demo_with_json_prints_one_document_and_tells_the_story_on_stderr() {
    mock_bin();
    let out = Command::new(BIN)
        .args(["demo", "--json"])
        .env("RUST_LOG", "error")
        .output()
        .expect("run interlock demo --json");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed:\n{stdout}\n{stderr}");
    let doc: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON document");
    assert_eq!(doc["passed"], true);
    let decisions: Vec<String> = doc["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            format!(
                "{}/{}",
                d["outcome"].as_str().unwrap(),
                d["reason_code"].as_str().unwrap()
            )
        })
        .collect();
    for expected in [
        "APPLIED/APPLIED",
        "APPLIED/IDEMPOTENT_REPLAY",
        "REFUSED/REFUND_EXCEEDS_REFUNDABLE",
        "UNKNOWN/OUTCOME_UNKNOWN",
        "REFUSED/TOOL_DRIFTED",
        "HELD/REFERENT_UNRESOLVABLE_HELD",
    ] {
        assert!(
            decisions.iter().any(|d| d == expected),
            "{expected} not in {decisions:?}"
        );
    }
    assert_eq!(doc["stamped_entities"], 3);
    assert_eq!(
        doc["ledger"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["state"] == "APPLIED")
            .count(),
        3
    );
    assert!(stderr.contains("demo passed in"), "{stderr}");
}

/// A passing demo logs no error and no warning: each session it ends, it ends by closing its
/// end of a pipe, and a peer hanging up is the normal end of an MCP session (rmcp used to log
/// `ERROR … failed to send pending response during drain error=Broken pipe` for the mock's
/// answer to the call it was hanging in step 4).
#[test]
fn a_passing_demo_logs_no_error_and_no_warning() {
    mock_bin();
    let out = Command::new(BIN)
        .arg("demo")
        // The default log filters, as a person running the demo has them.
        .env_remove("RUST_LOG")
        .output()
        .expect("run interlock demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("demo passed in"), "{stdout}");
    for line in stdout.lines().chain(stderr.lines()) {
        assert!(
            !line.contains(" ERROR ") && !line.contains(" WARN "),
            "a passing demo logged {line:?}:\n{stdout}\n{stderr}"
        );
    }
}
