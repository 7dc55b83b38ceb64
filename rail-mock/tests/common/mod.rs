//! Helpers shared by the integration tests: spawn the real binary, talk MCP to it with rmcp's
//! client over stdio, and read the journal with `inspect`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService, ServiceError};
use rmcp::transport::TokioChildProcess;
use serde_json::Value;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_interlock-rail-mock");
/// A call that should answer gets this long before the test fails.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(20);
/// A call that must NOT answer (the timeout faults) is given up after this long.
pub const FAULT_TIMEOUT: Duration = Duration::from_millis(1_000);

static DIRS: AtomicU32 = AtomicU32::new(0);

/// A fresh, empty directory under cargo's per-target temporary directory.
pub fn fresh_dir(name: &str) -> PathBuf {
    let n = DIRS.fetch_add(1, Ordering::Relaxed);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("rail-mock")
        .join(format!("{name}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

/// A fresh journal path (the file does not exist yet).
pub fn fresh_journal(name: &str) -> PathBuf {
    fresh_dir(name).join("journal.db")
}

/// A running mock and an rmcp client connected to it.
pub struct Mock {
    /// The client session.
    pub client: RunningService<RoleClient, ()>,
    /// The child's pid.
    pub pid: u32,
}

/// Spawn the mock on `journal` with extra flags and complete the MCP handshake.
pub async fn spawn(journal: &Path, extra: &[&str]) -> Mock {
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.arg("--journal")
        .arg(journal)
        .args(["--log-level", "error"])
        .args(extra);
    let (transport, _stderr) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the mock");
    let pid = transport.id().expect("child pid");
    let client = tokio::time::timeout(CALL_TIMEOUT, ().serve(transport))
        .await
        .expect("initialize in time")
        .expect("initialize");
    Mock { client, pid }
}

/// Spawn the mock seeded from the demo seed.
pub async fn spawn_demo(journal: &Path, faults: &str) -> Mock {
    spawn(journal, &["--seed", "demo", "--faults", faults]).await
}

fn params(tool: &str, args: Value) -> CallToolRequestParams {
    let p = CallToolRequestParams::new(tool.to_owned());
    match args {
        Value::Object(map) => p.with_arguments(map),
        _ => p,
    }
}

/// The text of a result's single content block.
pub fn text_of(result: &CallToolResult) -> String {
    assert_eq!(result.content.len(), 1, "one content block: {result:?}");
    result.content[0]
        .as_text()
        .map(|t| t.text.clone())
        .expect("a text block")
}

impl Mock {
    /// Call a tool, giving up after `limit`.
    pub async fn call_within(
        &self,
        limit: Duration,
        tool: &str,
        args: Value,
    ) -> Result<Result<CallToolResult, ServiceError>, tokio::time::error::Elapsed> {
        tokio::time::timeout(limit, self.client.call_tool(params(tool, args))).await
    }

    /// Call a tool that must answer.
    pub async fn call(&self, tool: &str, args: Value) -> CallToolResult {
        self.call_within(CALL_TIMEOUT, tool, args)
            .await
            .expect("answered in time")
            .expect("a tool result")
    }

    /// Call a tool that must succeed; the API object.
    pub async fn ok(&self, tool: &str, args: Value) -> Value {
        let result = self.call(tool, args).await;
        let text = text_of(&result);
        assert_ne!(result.is_error, Some(true), "{tool} failed: {text}");
        serde_json::from_str(&text).expect("the result is JSON")
    }

    /// Call a tool that must fail; the error text.
    pub async fn err(&self, tool: &str, args: Value) -> String {
        let result = self.call(tool, args).await;
        let text = text_of(&result);
        assert_eq!(
            result.is_error,
            Some(true),
            "{tool} should fail, got {text}"
        );
        text
    }

    /// Close the session (stdin) and let the child exit.
    pub async fn close(self) {
        let _ = self.client.cancel().await;
    }
}

/// SIGKILL a process.
pub fn kill_9(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -9 {pid}");
}

/// `interlock-rail-mock inspect --journal FILE`, parsed.
pub fn inspect(journal: &Path) -> Value {
    let out = std::process::Command::new(BIN)
        .arg("inspect")
        .arg("--journal")
        .arg(journal)
        .args(["--log-level", "error"])
        .output()
        .expect("run inspect");
    assert!(
        out.status.success(),
        "inspect failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("inspect prints JSON")
}

/// The refunds of `payment_id` in an `inspect` dump.
pub fn refunds_of(dump: &Value, payment_id: &str) -> Vec<Value> {
    dump["refunds"]
        .as_array()
        .expect("refunds")
        .iter()
        .filter(|r| r["payment_id"] == payment_id)
        .cloned()
        .collect()
}

/// A payment in an `inspect` dump.
pub fn payment_of(dump: &Value, payment_id: &str) -> Value {
    dump["payments"]
        .as_array()
        .expect("payments")
        .iter()
        .find(|p| p["id"] == payment_id)
        .cloned()
        .expect("the payment")
}
