//! `interlock init` through the real binary, answers piped on stdin: a mandate pinned against
//! the mock rail is written only after `yes`, and `check` accepts what was written.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use common::*;
use serde_json::Value;

const ANSWERS: &str = "acc_DEMO000001\nagent_support_bot\nRefund duplicates\n\
    fetch_payment, create_refund\nINR\n500000\n2000000\n40\nops-team\n30\n";

fn init(out: &Path, stdin: &str, upstream: bool) -> (i32, String, String) {
    let mock: &[&str] = if upstream {
        &["--seed", "demo", "--log-level", "error"]
    } else {
        &[]
    };
    init_with(out, stdin, upstream, mock)
}

/// `interlock init --json --out OUT`, with the mock (and `mock_args`) as its upstream if
/// `upstream`, answers piped on stdin: (exit code, stdout, stderr).
fn init_with(out: &Path, stdin: &str, upstream: bool, mock_args: &[&str]) -> (i32, String, String) {
    let mut command = Command::new(BIN);
    command.args(["init", "--json", "--out"]).arg(out);
    if upstream {
        command.arg("--").arg(mock_bin()).args(mock_args);
    }
    let mut child = command
        .env("RUST_LOG", "error")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run interlock init");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write answers");
    let out = child.wait_with_output().expect("wait for init");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn init_writes_a_pinned_mandate_only_after_yes() {
    let dir = fresh_dir("init");
    let out = dir.join("mandate.yaml");

    let (code, stdout, stderr) = init(&out, &format!("{ANSWERS}no\n"), true);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("not confirmed"), "{stderr}");
    assert!(
        stdout.is_empty(),
        "nothing on stdout when refused: {stdout}"
    );
    assert!(!out.exists(), "written without yes");

    let (code, stdout, stderr) = init(&out, &format!("{ANSWERS}yes\n"), true);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("warning: create_refund is irreversible"),
        "{stderr}"
    );
    let report: Value = serde_json::from_str(&stdout).expect("--json prints JSON");
    assert_eq!(report["written"], out.to_string_lossy().as_ref());
    let yaml = std::fs::read_to_string(&out).unwrap();
    let pins = pins();
    for tool in ["fetch_payment", "create_refund"] {
        let pin = pins["tools"][tool].as_str().unwrap();
        assert!(yaml.contains(pin), "{tool} not pinned:\n{yaml}");
    }
    assert!(!yaml.contains("create_instant_settlement"), "{yaml}");

    let (code, stdout, stderr) = interlock(&[
        "check".as_ref(),
        "--json".as_ref(),
        "--mandate".as_ref(),
        out.as_os_str(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let check: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(check["mandate_sha256"], report["mandate_sha256"]);
    assert_eq!(check["grants"].as_array().unwrap().len(), 2);

    let (code, _, stderr) = init(&out, &format!("{ANSWERS}yes\n"), true);
    assert_eq!(code, 1);
    assert!(stderr.contains("exists; pass --force"), "{stderr}");
}

#[test]
fn a_float_amount_is_never_written() {
    let dir = fresh_dir("init-float");
    let out = dir.join("mandate.yaml");
    let answers = ANSWERS.replace("500000\n", "5000.00\n1.5\n5e5\n");
    let (code, _, stderr) = init(&out, &format!("{answers}yes\n"), false);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("not a whole number of minor units"),
        "{stderr}"
    );
    assert!(stderr.contains("nothing written"), "{stderr}");
    assert!(!out.exists());
}

#[test]
fn the_upstreams_own_logs_stay_out_of_the_interview_unless_it_fails() {
    let dir = fresh_dir("init-quiet");
    let out = dir.join("mandate.yaml");
    // The mock at its default log level writes INFO lines on stderr as it starts and stops.
    let (code, _, stderr) = init_with(&out, &format!("{ANSWERS}yes\n"), true, &["--seed", "demo"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(out.exists());
    for noise in [" INFO ", "serving MCP on stdio", "interlock_rail_mock"] {
        assert!(!stderr.contains(noise), "{noise:?} in:\n{stderr}");
    }

    // An upstream that fails to start: what it said is shown, with the failure.
    let out = dir.join("failed.yaml");
    let (code, _, stderr) = init_with(
        &out,
        &format!("{ANSWERS}yes\n"),
        true,
        &["--seed", "demo", "--faults", "no_such_fault"],
    );
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("upstream's stderr"), "{stderr}");
    assert!(stderr.contains("interlock-rail-mock: "), "{stderr}");
    assert!(stderr.contains("no_such_fault"), "{stderr}");
    assert!(!out.exists());
}

#[test]
fn a_bad_count_of_calls_is_refused_as_a_count() {
    let dir = fresh_dir("init-calls");
    let out = dir.join("mandate.yaml");
    let answers = ANSWERS.replace("2000000\n40\n", "2000000\n4.5\nmany\n-1\n");
    let (code, _, stderr) = init(&out, &format!("{answers}yes\n"), false);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("\"4.5\" is not a whole number of calls"),
        "{stderr}"
    );
    assert!(!stderr.contains("minor units (digits"), "{stderr}");
    assert!(
        stderr.contains("Most money-moving calls per day"),
        "{stderr}"
    );
    assert!(!out.exists());
}
