//! Helpers for the end-to-end tests: the real `interlock` binary in front of the real
//! `interlock-rail-mock`, driven by rmcp's client over stdio.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

/// The proxy under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_interlock");
/// A call that should answer gets this long.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// The mandate's agent.
pub const AGENT: &str = "agent_support_bot";

static DIRS: AtomicU32 = AtomicU32::new(0);

/// A fresh, empty directory under cargo's per-target temporary directory.
pub fn fresh_dir(name: &str) -> PathBuf {
    let n = DIRS.fetch_add(1, Ordering::Relaxed);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("interlock")
        .join(format!("{name}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

/// The mock rail's binary, built once by the cargo running these tests.
pub fn mock_bin() -> &'static Path {
    static BIN_PATH: OnceLock<PathBuf> = OnceLock::new();
    BIN_PATH.get_or_init(|| {
        // target/<profile>/interlock → target/<profile>/interlock-rail-mock
        let path = Path::new(BIN)
            .parent()
            .expect("the binary's directory")
            .join("interlock-rail-mock");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        let release = Path::new(BIN)
            .parent()
            .and_then(Path::file_name)
            .is_some_and(|n| n == "release");
        let mut build = Command::new(cargo);
        build.args([
            "build",
            "-q",
            "-p",
            "interlock-rail-mock",
            "--bin",
            "interlock-rail-mock",
        ]);
        if release {
            build.arg("--release");
        }
        let status = build.status().expect("run cargo build");
        assert!(status.success(), "building the mock failed");
        assert!(path.exists(), "no mock at {}", path.display());
        path
    })
}

/// The pins of the mock's real tool definitions, from `interlock pin --json`.
pub fn pins() -> &'static Value {
    static PINS: OnceLock<Value> = OnceLock::new();
    PINS.get_or_init(|| {
        let out = Command::new(BIN)
            .args(["pin", "--json", "--"])
            .arg(mock_bin())
            .args(["--seed", "demo", "--log-level", "error"])
            .env("RUST_LOG", "error")
            .output()
            .expect("run pin");
        assert!(
            out.status.success(),
            "pin failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("pin --json prints JSON")
    })
}

/// A test scenario's files.
pub struct Scene {
    /// Its directory.
    pub dir: PathBuf,
    /// The mandate file.
    pub mandate: PathBuf,
    /// The ledger.
    pub db: PathBuf,
    /// The mock's journal.
    pub journal: PathBuf,
}

/// A mandate granting `fetch_payment` and `create_refund` (up to 500000 per call), with pins;
/// `drift` replaces the named tools' pins with a wrong hash.
pub fn scene(name: &str, drift: &[&str]) -> Scene {
    let dir = fresh_dir(name);
    let pins = pins();
    let mut template = interlock_profile::razorpay::refund_desk(AGENT)
        .pinned_by(pins)
        .expect("the mock offers every granted tool");
    for tool in drift {
        template = template.pin(tool, &"0".repeat(64));
    }
    let mandate = dir.join("mandate.yaml");
    std::fs::write(&mandate, template.yaml()).expect("write mandate");
    Scene {
        db: dir.join("ledger.db"),
        journal: dir.join("rail.db"),
        mandate,
        dir,
    }
}

/// A running proxy and an rmcp client connected to it.
pub struct Proxy {
    /// The client session.
    pub client: RunningService<RoleClient, ()>,
    /// The proxy's pid.
    pub pid: u32,
}

impl Scene {
    /// The arguments after `interlock`: `serve … -- interlock-rail-mock …`.
    pub fn serve_args(&self, faults: &str, proxy_flags: &[&str]) -> Vec<std::ffi::OsString> {
        let mut args: Vec<std::ffi::OsString> = vec![
            "serve".into(),
            "--mandate".into(),
            self.mandate.clone().into(),
            "--db".into(),
            self.db.clone().into(),
            "--agent".into(),
            AGENT.into(),
        ];
        args.extend(proxy_flags.iter().map(Into::into));
        args.push("--".into());
        args.push(mock_bin().into());
        args.push("--journal".into());
        args.push(self.journal.clone().into());
        for a in ["--seed", "demo", "--log-level", "error", "--faults", faults] {
            args.push(a.into());
        }
        args
    }

    /// The proxy's command line: `interlock serve … -- interlock-rail-mock …`.
    pub fn command(&self, faults: &str, proxy_flags: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(BIN);
        cmd.args(self.serve_args(faults, proxy_flags))
            .env("RUST_LOG", "interlock=info,warn")
            .env_remove("RAZORPAY_KEY_ID");
        cmd
    }

    /// Starts the proxy and completes the MCP handshake.
    pub async fn proxy(&self, faults: &str, proxy_flags: &[&str]) -> Proxy {
        connect(self.command(faults, proxy_flags)).await
    }

    /// `interlock-rail-mock inspect`, parsed.
    pub fn inspect(&self) -> Value {
        let out = Command::new(mock_bin())
            .arg("inspect")
            .arg("--journal")
            .arg(&self.journal)
            .args(["--log-level", "error"])
            .output()
            .expect("run inspect");
        assert!(out.status.success(), "inspect failed");
        serde_json::from_slice(&out.stdout).expect("inspect prints JSON")
    }

    /// The refunds of `payment_id` in the journal.
    pub fn refunds_of(&self, payment_id: &str) -> Vec<Value> {
        self.inspect()["refunds"]
            .as_array()
            .expect("refunds")
            .iter()
            .filter(|r| r["payment_id"] == payment_id)
            .cloned()
            .collect()
    }

    /// The refunds Interlock stamped, on `payment_id`.
    pub fn stamped_refunds_of(&self, payment_id: &str) -> Vec<Value> {
        self.refunds_of(payment_id)
            .into_iter()
            .filter(|r| r["notes"]["interlock_sik"].is_string())
            .collect()
    }
}

/// Starts `cmd` (an `interlock serve …` command line) and completes the MCP handshake.
pub async fn connect(cmd: tokio::process::Command) -> Proxy {
    connect_with_stderr(cmd, Stdio::inherit()).await
}

/// [`connect`], with the proxy's stderr (its logs) sent to `stderr`.
pub async fn connect_with_stderr(cmd: tokio::process::Command, stderr: Stdio) -> Proxy {
    let (transport, _stderr) = TokioChildProcess::builder(cmd)
        .stderr(stderr)
        .spawn()
        .expect("spawn the proxy");
    let pid = transport.id().expect("child pid");
    let client = tokio::time::timeout(CALL_TIMEOUT, ().serve(transport))
        .await
        .expect("initialize in time")
        .expect("initialize");
    Proxy { client, pid }
}

/// The parameters of one call.
pub fn params(tool: &str, args: Value) -> CallToolRequestParams {
    let p = CallToolRequestParams::new(tool.to_owned());
    match args {
        Value::Object(map) => p.with_arguments(map),
        _ => p,
    }
}

/// The first text block of a result.
pub fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.clone())
        .unwrap_or_default()
}

/// The `interlock` block of a result.
pub fn block(result: &CallToolResult) -> Value {
    result
        .structured_content
        .as_ref()
        .map(|s| s["interlock"].clone())
        .unwrap_or(Value::Null)
}

impl Proxy {
    /// Calls a tool that must answer with a tool result.
    pub async fn call(&self, tool: &str, args: Value) -> CallToolResult {
        tokio::time::timeout(CALL_TIMEOUT, self.client.call_tool(params(tool, args)))
            .await
            .expect("answered in time")
            .expect("a tool result")
    }

    /// A refund of `amount` on `payment_id`.
    pub async fn refund(&self, payment_id: &str, amount: u64) -> CallToolResult {
        self.call(
            "create_refund",
            json!({"payment_id": payment_id, "amount": amount}),
        )
        .await
    }

    /// The names of the tools listed.
    pub async fn tool_names(&self) -> Vec<String> {
        let tools = tokio::time::timeout(CALL_TIMEOUT, self.client.list_all_tools())
            .await
            .expect("listed in time")
            .expect("tools/list");
        tools.into_iter().map(|t| t.name.to_string()).collect()
    }

    /// Closes the session.
    pub async fn close(self) {
        let _ = self.client.cancel().await;
    }
}

/// Runs `interlock ARGS` to its end; (exit code, stdout, stderr).
pub fn interlock(args: &[&std::ffi::OsStr]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .env("RUST_LOG", "error")
        .stdin(Stdio::null())
        .output()
        .expect("run interlock");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// SIGKILL a process.
pub fn kill_9(pid: u32) {
    let status = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -9 {pid}");
}

/// One figure a fault test measured: `test<TAB>name<TAB>value`, appended to the file named by
/// `INTERLOCK_FIGURES` when it is set (`scripts/fault-figures.sh` sets it and writes
/// `docs/RESULTS.faults.md` from the file), on stderr otherwise (captured by `cargo test`).
#[allow(dead_code)]
pub fn figure(test: &str, name: &str, value: impl std::fmt::Display) {
    let line = format!("{test}\t{name}\t{value}\n");
    match std::env::var_os("INTERLOCK_FIGURES") {
        Some(path) => {
            use std::io::Write;
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .expect("the figures file opens for appending");
            file.write_all(line.as_bytes())
                .expect("the figures file takes the line");
        }
        None => eprint!("FIGURE\t{line}"),
    }
}
