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
    let mut command = Command::new(BIN);
    command.args(["init", "--json", "--out"]).arg(out);
    if upstream {
        command
            .arg("--")
            .arg(mock_bin())
            .args(["--seed", "demo", "--log-level", "error"]);
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
