//! End to end with a real MCP peer no one here wrote: the Python `mcp` 2.x client →
//! `interlock serve` → `interlock-rail-mock`, with the rail's journal read back by
//! `interlock-rail-mock inspect --journal`.
//!
//! The test makes its own venv under `target/tmp/` and installs `mcp` from PyPI into it the
//! first time, so a fresh machine needs nothing by hand beyond `python3` with `venv`. If pip
//! cannot install it (PyPI unreachable), the test fails and says so; it never passes silently.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use serde_json::Value;

/// The requirement installed into the venv.
const MCP_REQUIREMENT: &str = "mcp>=2.3,<3";
/// The interpreter that makes the venv.
const PYTHON: &str = "python3";

fn venv_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("proxy-py-venv")
}

fn tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// Whether the venv's Python imports an `mcp` that satisfies [`MCP_REQUIREMENT`].
fn has_mcp(python: &Path) -> bool {
    python.exists()
        && Command::new(python)
            .args([
                "-c",
                "import importlib.metadata as m, sys, mcp\n\
                 v = tuple(int(x) for x in m.version('mcp').split('.')[:2])\n\
                 sys.exit(0 if (2, 3) <= v < (3, 0) else 1)",
            ])
            .status()
            .is_ok_and(|s| s.success())
}

/// The venv's Python, with `mcp` installed.
fn venv_python() -> PathBuf {
    let dir = venv_dir();
    let python = dir.join("bin").join("python");
    if has_mcp(&python) {
        return python;
    }
    let out = Command::new(PYTHON)
        .args(["-m", "venv", "--clear"])
        .arg(&dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {PYTHON} to make a venv: {e}"));
    assert!(
        out.status.success(),
        "{PYTHON} -m venv {} failed (is python3-venv installed?):\n{}",
        dir.display(),
        tail(&out.stderr)
    );
    let out = Command::new(dir.join("bin").join("pip"))
        .args([
            "install",
            "--disable-pip-version-check",
            "--quiet",
            MCP_REQUIREMENT,
        ])
        .output()
        .expect("run the venv's pip");
    assert!(
        out.status.success(),
        "pip could not install {MCP_REQUIREMENT:?} into {} (is PyPI reachable?); this test \
         needs it and does not skip:\n{}",
        dir.display(),
        tail(&out.stderr)
    );
    assert!(
        has_mcp(&python),
        "pip ran but {MCP_REQUIREMENT} does not import"
    );
    python
}

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
