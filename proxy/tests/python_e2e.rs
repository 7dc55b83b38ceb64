//! End to end with a real MCP peer no one here wrote: the Python `mcp` 2.x client →
//! `interlock serve` → `interlock-rail-mock`, with the rail's journal read back by
//! `interlock-rail-mock inspect --journal`.
//!
//! The test makes its own venv under `target/tmp/` and installs `mcp` from PyPI into it the
//! first time, so a fresh machine needs nothing by hand beyond `python3` with `venv`. If pip
//! cannot install it (PyPI unreachable), the test fails and says so; it never passes silently.

mod common;
#[path = "../../rail-mock/tests/common/python_venv.rs"]
mod python_venv;

use std::path::Path;
use std::process::Command;

use common::*;
use python_venv::{tail, venv_python};
use serde_json::Value;

#[test]
fn the_python_mcp_client_through_interlock_gets_every_decision_and_one_entity() {
    let python = venv_python();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/e2e.py");
    let scene = scene("python-e2e", &[]);
    let out = Command::new(&python)
        .arg(&script)
        .arg("--")
        .arg(BIN)
        .args(scene.serve_args("none", &[]))
        .env_remove("RAZORPAY_KEY_ID")
        .output()
        .expect("run e2e.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "e2e.py failed:\n{stdout}\n{}",
        tail(&out.stderr)
    );
    assert!(stdout.lines().any(|l| l == "e2e: ok"), "{stdout}");
    eprintln!("{}", stdout.trim());
    let summary: Value = stdout
        .lines()
        .find_map(|l| l.strip_prefix("e2e: {").map(|rest| format!("{{{rest}")))
        .and_then(|j| serde_json::from_str(&j).ok())
        .expect("the script's summary line");

    // The rail's journal, read by `interlock-rail-mock inspect --journal`.
    let benign = scene.stamped_refunds_of("pay_1002");
    assert_eq!(benign.len(), 1, "one refund on pay_1002: {benign:?}");
    assert_eq!(benign[0]["id"], summary["benign_entity"]);
    assert_eq!(benign[0]["amount"], 10_000);
    assert!(
        scene.stamped_refunds_of("pay_1003").is_empty(),
        "the over-refund never reached the rail"
    );
    let storm = scene.stamped_refunds_of("pay_1005");
    assert_eq!(
        storm.len(),
        1,
        "8 concurrent refunds, one entity: {storm:?}"
    );
    assert_eq!(storm[0]["id"], summary["concurrent_entity"]);
    let dump = scene.inspect();
    assert_eq!(
        dump["call_counters"]["money_calls"], 2,
        "two money calls reached the rail: {}",
        dump["call_counters"]
    );
}
