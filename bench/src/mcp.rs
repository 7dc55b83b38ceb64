//! The client side of MCP, shared by every command: start a server as a child process and
//! complete the handshake, call a tool with a bound and a stopwatch, read `interlock pin`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use interlock_rail_mock::harness::MockCommand;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{Peer, RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use serde_json::Value;

use crate::Res;

/// A client session with one server process (the process dies with the session).
pub type Client = RunningService<RoleClient, ()>;

/// The longest a server gets to complete `initialize`. An `interlock serve` restarted after a
/// SIGKILL first waits for the dead process's leases and settles its intents (boot recovery),
/// which with the bench's 6 s leases takes about 8 s.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// Starts `cmd` and completes the MCP handshake. `stderr` receives the server's logs.
pub async fn connect(cmd: tokio::process::Command, stderr: Stdio, what: &str) -> Res<Client> {
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(stderr)
        .spawn()
        .map_err(|e| format!("spawn {what}: {e}"))?;
    within_handshake(().serve(transport), what).await
}

/// Completes the MCP handshake over a server's stdio that the caller spawned (and watches).
pub async fn serve(
    stdout: tokio::process::ChildStdout,
    stdin: tokio::process::ChildStdin,
    what: &str,
) -> Res<Client> {
    within_handshake(().serve((stdout, stdin)), what).await
}

/// Waits for `handshake` at most [`HANDSHAKE_TIMEOUT`], naming `what` in either error.
async fn within_handshake<E: std::fmt::Display>(
    handshake: impl std::future::Future<Output = Result<Client, E>>,
    what: &str,
) -> Res<Client> {
    tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake)
        .await
        .map_err(|_| {
            format!(
                "{what}: no MCP handshake within {} s",
                HANDSHAKE_TIMEOUT.as_secs()
            )
        })?
        .map_err(|e| format!("{what}: MCP handshake: {e}"))
}

/// A loopback address with a port free at the time of asking (the server binds it next).
pub fn free_loopback_port() -> Res<std::net::SocketAddr> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("no free loopback port: {e}"))
}

/// Completes the MCP handshake over streamable HTTP with `interlock serve --listen addr`,
/// waiting for it to listen (it verifies its ledger and starts its upstream first).
pub async fn connect_http(addr: std::net::SocketAddr, token: &str, what: &str) -> Res<Client> {
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        if Instant::now() > deadline {
            return Err(format!("{what}: nothing listens on {addr}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let config = StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp"))
        .auth_header(token);
    let transport = StreamableHttpClientTransport::from_config(config);
    within_handshake(().serve(transport), what).await
}

/// The request for `tool` with `args` (an object; anything else sends no arguments).
pub fn params(tool: &str, args: Value) -> CallToolRequestParams {
    let p = CallToolRequestParams::new(tool.to_owned());
    match args {
        Value::Object(map) => p.with_arguments(map),
        _ => p,
    }
}

/// How one call ended, seen from the client.
#[derive(Debug, Clone)]
pub enum Reply {
    /// The server answered with a tool result (which may be `isError`).
    Answered(CallToolResult),
    /// The session failed: the server died, or answered with a protocol error.
    Failed(String),
    /// No answer within the client's bound (the request stays with the server).
    TimedOut,
}

/// Calls `tool` and waits at most `timeout`; returns the reply and how long it took.
pub async fn call(
    client: &Peer<RoleClient>,
    tool: &str,
    args: Value,
    timeout: Duration,
) -> (Reply, Duration) {
    let start = Instant::now();
    let reply = match tokio::time::timeout(timeout, client.call_tool(params(tool, args))).await {
        Err(_) => Reply::TimedOut,
        Ok(Err(e)) => Reply::Failed(e.to_string()),
        Ok(Ok(result)) => Reply::Answered(result),
    };
    (reply, start.elapsed())
}

/// Every text block of a result, joined by newlines.
pub fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `interlock pin --json` against the mock started with `seed`: the server id, the manifest
/// hash and each tool's pin, as the mandate's `provenance` needs them.
pub fn pins(interlock: &Path, mock: &Path, seed: &Path) -> Res<Value> {
    let out = Command::new(interlock)
        .args(["pin", "--json", "--"])
        .args(MockCommand::new(mock).seed(seed).log_level("error").argv())
        .env("RUST_LOG", "error")
        .env_remove("RAZORPAY_KEY_ID")
        .output()
        .map_err(|e| format!("run interlock pin: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "interlock pin failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("interlock pin --json output: {e}"))
}
