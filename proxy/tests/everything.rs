//! `@modelcontextprotocol/server-everything` (npm), an MCP server no one here wrote, as the
//! upstream: a granted `echo` passes through unchanged, an ungranted tool is neither listed nor
//! callable, a granted tool it declares as a write (`readOnlyHint: false`) is neither listed nor
//! forwarded, and a pin that no longer matches `echo`'s description is refused. The test
//! installs the package itself (pinned version, cached under target/tmp); if npm cannot reach
//! the registry it fails saying so, it never skips.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use common::*;
use interlock_spec::mandate::template::Template;
use rmcp::ServiceExt;
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

const PACKAGE: &str = "@modelcontextprotocol/server-everything@2026.8.31";
/// A tool server-everything declares `readOnlyHint: false`: granted and pinned, it must still
/// be neither listed nor forwarded (no money tool Interlock guards, and no read).
const WRITE: &str = "toggle-simulated-logging";

/// `node …/dist/index.js stdio`, installed once.
fn everything() -> &'static [String] {
    static COMMAND: OnceLock<Vec<String>> = OnceLock::new();
    COMMAND.get_or_init(|| {
        let prefix = Path::new(env!("CARGO_TARGET_TMPDIR")).join("npm-server-everything");
        let entry =
            prefix.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
        if !entry.exists() {
            std::fs::create_dir_all(&prefix).expect("create the npm prefix");
            let out = Command::new("npm")
                .args(["install", "--no-audit", "--no-fund", "--prefix"])
                .arg(&prefix)
                .arg(PACKAGE)
                .output()
                .expect("npm must be installed to run this test");
            assert!(
                out.status.success() && entry.exists(),
                "npm install {PACKAGE} failed (is the npm registry reachable?): {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        vec![
            "node".to_owned(),
            entry.to_string_lossy().into_owned(),
            "stdio".to_owned(),
        ]
    })
}

fn pins() -> Value {
    let out = Command::new(BIN)
        .args(["pin", "--json", "--"])
        .args(everything())
        .env("RUST_LOG", "error")
        .stderr(Stdio::inherit())
        .output()
        .expect("run pin");
    assert!(out.status.success(), "pin against server-everything failed");
    serde_json::from_slice(&out.stdout).expect("pin --json prints JSON")
}

fn mandate(dir: &Path, pins: &Value, echo_pin: &str) -> PathBuf {
    let yaml = Template::new(AGENT)
        .mandate_id("mnd_everything")
        .purpose("Echo only")
        .read("echo")
        .read(WRITE)
        .pinned_by(pins)
        .unwrap()
        .pin("echo", echo_pin)
        .yaml();
    let path = dir.join("mandate.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

async fn proxy(dir: &Path, mandate: &Path) -> Proxy {
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.arg("serve")
        .arg("--mandate")
        .arg(mandate)
        .arg("--db")
        .arg(dir.join("ledger.db"))
        .args(["--agent", AGENT, "--"])
        .args(everything())
        .env("RUST_LOG", "interlock=info,warn");
    connect(cmd).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_behind_interlock() {
    let pins = pins();
    let offered = pins["tools"].as_object().expect("tools");
    assert!(
        offered.len() > 5,
        "server-everything offers its tools: {pins}"
    );
    assert!(offered.contains_key("get-sum"), "{pins}");
    let echo_pin = pins["tools"]["echo"]
        .as_str()
        .expect("echo is pinned")
        .to_owned();

    // Direct: what server-everything itself answers.
    let mut direct_cmd = tokio::process::Command::new(&everything()[0]);
    direct_cmd.args(&everything()[1..]);
    let direct = ().serve(TokioChildProcess::new(direct_cmd).unwrap()).await.unwrap();
    let hello = json!({"message": "hello from the agent"});
    let expected = direct
        .call_tool(params("echo", hello.clone()))
        .await
        .unwrap();
    direct.cancel().await.unwrap();

    let dir = fresh_dir("everything");
    let gated = proxy(&dir, &mandate(&dir, &pins, &echo_pin)).await;
    assert_eq!(
        gated.tool_names().await,
        ["echo"],
        "only the granted tool is listed"
    );
    let echoed = gated.call("echo", hello.clone()).await;
    assert_ne!(echoed.is_error, Some(true), "{echoed:?}");
    assert_eq!(
        echoed.content, expected.content,
        "echo passes through unchanged"
    );
    assert!(
        text_of(&echoed).contains("hello from the agent"),
        "{echoed:?}"
    );
    let write = gated.call(WRITE, json!({})).await;
    assert_eq!(write.is_error, Some(true), "{write:?}");
    assert_eq!(
        block(&write)["reason_code"],
        "TOOL_NOT_READ_ONLY",
        "{write:?}"
    );
    assert!(text_of(&write).contains("readOnlyHint"), "{write:?}");
    let sum = gated.call("get-sum", json!({"a": 1, "b": 2})).await;
    assert_eq!(sum.is_error, Some(true), "{sum:?}");
    assert_eq!(block(&sum)["reason_code"], "TOOL_NOT_GRANTED", "{sum:?}");
    gated.close().await;

    // The pin no longer matches echo's definition (as if its description had changed).
    let drifted = fresh_dir("everything-drift");
    let gated = proxy(&drifted, &mandate(&drifted, &pins, &"0".repeat(64))).await;
    assert!(
        gated.tool_names().await.is_empty(),
        "a drifted tool is not listed"
    );
    let refused = gated.call("echo", hello).await;
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    assert_eq!(
        block(&refused)["reason_code"],
        "TOOL_DRIFTED",
        "{refused:?}"
    );
    gated.close().await;
}
