//! End to end with a real MCP peer no one here wrote: the Python `mcp` 2.x client →
//! `interlock serve` → `interlock-rail-mock`, through every reason code an agent can meet
//! (`tests/python/e2e.py` lists the scenes, and the codes it cannot reach with why), with the
//! rail's journals read back by `interlock-rail-mock inspect --journal`.
//!
//! The test makes its own venv under `target/tmp/` and installs `mcp` from PyPI into it the
//! first time, so a fresh machine needs nothing by hand beyond `python3` with `venv`. If pip
//! cannot install it (PyPI unreachable), the test fails and says so; it never passes silently.

mod common;
#[path = "../../rail-mock/tests/common/python_venv.rs"]
mod python_venv;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use common::*;
use interlock_spec::reason::ReasonCode;
use python_venv::{tail, venv_python};
use serde_json::Value;

/// The codes an agent cannot meet through the proxy in front of the mock, each with why (the
/// script's docstring says the same). Everything else must be seen.
const UNREACHABLE: &[(ReasonCode, &str)] = &[
    (
        ReasonCode::LedgerUnavailable,
        "a full or failing disk under the ledger: tests/disk.rs mounts one",
    ),
    (
        ReasonCode::MerchantMismatch,
        "the proxy takes the merchant from the mandate",
    ),
    (
        ReasonCode::MandateNotYetValid,
        "serve refuses to start with it (the script checks that refusal)",
    ),
    (
        ReasonCode::PaymentNotCaptured,
        "every payment the mock seeds is captured",
    ),
    (
        ReasonCode::ModelSilent,
        "the proxy runs no advisory model (no G5)",
    ),
    (ReasonCode::ModelHeld, "the proxy runs no advisory model"),
    (ReasonCode::ModelBlocked, "the proxy runs no advisory model"),
    (
        ReasonCode::PayeeNotAllowed,
        "Razorpay's tools pay no payee (the AgentDojo bench's banking profile reaches it)",
    ),
    (
        ReasonCode::RecipientChangeForbidden,
        "Razorpay's tools pay no payee (engine/tests/reasons.rs reaches it)",
    ),
];

fn inspect(journal: &str) -> Value {
    let out = Command::new(mock_bin())
        .args(["inspect", "--journal", journal, "--log-level", "error"])
        .output()
        .expect("run inspect");
    assert!(out.status.success(), "inspect {journal} failed");
    serde_json::from_slice(&out.stdout).expect("inspect prints JSON")
}

fn stamped(journal: &Value, kind: &str, payment: Option<&str>) -> Vec<Value> {
    journal[kind]
        .as_array()
        .expect("entities")
        .iter()
        .filter(|e| e["notes"]["interlock_sik"].is_string())
        .filter(|e| payment.is_none_or(|p| e["payment_id"] == p))
        .cloned()
        .collect()
}

/// Runs `e2e.py` over `transport` (`stdio` or `http`) and returns its summary line.
fn run_e2e(transport: &str) -> Value {
    let python = venv_python();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/e2e.py");
    let dir = fresh_dir(&format!("python-e2e-{transport}"));
    let pins_file = dir.join("pins.json");
    std::fs::write(&pins_file, pins().to_string()).unwrap();
    let out = Command::new(&python)
        .arg(&script)
        .arg("--transport")
        .arg(transport)
        .arg("--interlock")
        .arg(BIN)
        .arg("--mock")
        .arg(mock_bin())
        .arg("--dir")
        .arg(&dir)
        .arg("--pins")
        .arg(&pins_file)
        .env_remove("RAZORPAY_KEY_ID")
        .output()
        .expect("run e2e.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "e2e.py --transport {transport} failed:\n{stdout}\n{}",
        tail(&out.stderr)
    );
    assert!(stdout.lines().any(|l| l == "e2e: ok"), "{stdout}");
    eprintln!("{}", stdout.trim());
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("e2e: {").map(|rest| format!("{{{rest}")))
        .and_then(|j| serde_json::from_str(&j).ok())
        .expect("the script's summary line")
}

#[test]
fn the_python_mcp_client_over_stdio_meets_every_reachable_reason_code() {
    check_every_scene(&run_e2e("stdio"));
}

/// The same scenes over streamable HTTP with a bearer token, and the HTTP-only scene: two
/// agents on one server and one ledger, wrong and missing tokens, a session used across agents.
#[test]
fn the_python_mcp_client_over_streamable_http_meets_the_same_codes_and_each_agent_its_own_mandate()
{
    let summary = run_e2e("http");
    check_every_scene(&summary);
    let journal = inspect(summary["http_journal"].as_str().unwrap());
    let entities = summary["http_entities"].as_array().unwrap();
    let support = stamped(&journal, "refunds", Some("pay_3001"));
    assert_eq!(support.len(), 1, "support's refund: {support:?}");
    assert_eq!(support[0]["id"], entities[0]);
    assert!(
        stamped(&journal, "refunds", Some("pay_3002")).is_empty(),
        "ops' refund above its own ceiling moved nothing"
    );
    let shared = stamped(&journal, "refunds", Some("pay_3003"));
    assert_eq!(
        shared.len(),
        1,
        "asked by both agents, paid once: {shared:?}"
    );
    assert_eq!(shared[0]["id"], entities[1]);
}

/// What every transport's run must show: each reachable code seen, and the rails' journals.
fn check_every_scene(summary: &Value) {
    // Every code is either seen or listed as unreachable with a reason, never both.
    let seen: BTreeSet<&str> = summary["seen"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    for code in ReasonCode::ALL {
        let unreachable = UNREACHABLE.iter().any(|(c, _)| c == code);
        assert!(
            seen.contains(code.as_str()) != unreachable,
            "{}: seen {}, listed unreachable {unreachable}",
            code.as_str(),
            seen.contains(code.as_str())
        );
    }
    for code in &seen {
        assert!(ReasonCode::parse(code).is_some(), "an unknown code {code}");
    }

    // The rails' journals, the ground truth.
    let main = inspect(summary["main_journal"].as_str().unwrap());
    let benign = stamped(&main, "refunds", Some("pay_1002"));
    assert_eq!(benign.len(), 1, "one refund on pay_1002: {benign:?}");
    assert_eq!(benign[0]["id"], summary["benign_entity"]);
    assert!(stamped(&main, "refunds", Some("pay_1003")).is_empty());
    assert!(stamped(&main, "refunds", Some("pay_2001")).is_empty());
    let storm = stamped(&main, "refunds", Some("pay_1005"));
    assert_eq!(
        storm.len(),
        1,
        "8 concurrent refunds, one entity: {storm:?}"
    );
    assert_eq!(storm[0]["id"], summary["concurrent_entity"]);
    assert_eq!(stamped(&main, "refunds", Some("pay_3003")).len(), 2);
    let held = inspect(summary["held_journal"].as_str().unwrap());
    let settlements = stamped(&held, "settlements", None);
    assert_eq!(
        settlements.len(),
        1,
        "one approved, one rejected: {settlements:?}"
    );
    assert_eq!(settlements[0]["id"], summary["settlement_entity"]);

    let tight = inspect(summary["tight_journal"].as_str().unwrap());
    assert_eq!(stamped(&tight, "refunds", None).len(), 2);

    let attempts = inspect(summary["attempts_journal"].as_str().unwrap());
    assert!(stamped(&attempts, "refunds", None).is_empty());
    assert_eq!(attempts["call_counters"]["money_calls"], 8);

    // Approvals in the client: the approved settlement and the one approved later by the CLI
    // moved money; the declined one did not.
    let approvals = inspect(summary["approvals_journal"].as_str().unwrap());
    let settled = stamped(&approvals, "settlements", None);
    let amounts: BTreeSet<u64> = settled
        .iter()
        .map(|e| e["amount_requested"].as_u64().expect("an amount"))
        .collect();
    assert_eq!(
        settled.len(),
        2,
        "approved in the client, then by the CLI: {settled:?}"
    );
    assert_eq!(amounts, BTreeSet::from([10_000, 30_000]), "{settled:?}");
    assert_eq!(settled[0]["id"], summary["approvals_entities"][0]);

    let restart = inspect(summary["restart_journal"].as_str().unwrap());
    let paid = stamped(&restart, "refunds", Some("pay_3007"));
    assert_eq!(paid.len(), 1, "killed mid-call, paid once: {paid:?}");
    assert_eq!(paid[0]["id"], summary["restart_entity"]);
    assert_eq!(restart["call_counters"]["money_calls"], 1);
}
