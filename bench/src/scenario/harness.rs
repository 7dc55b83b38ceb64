//! What an agent harness sees of a run, and what it leaves behind.
//!
//! An [`Agent`] is given the scenario and an [`Endpoint`]: the MCP server it talks to, which is
//! the mock rail itself on the direct path and `interlock serve` on the gated one; it cannot
//! tell which. It returns a [`Transcript`] of every call it made. The run judges money,
//! entities and completion from the rail's journal, never from the transcript; the transcript
//! only says which answers the agent got (which gate refused what) and how long calls took.
//!
//! The scripted harness is [`crate::scenario::naive::Naive`]. A model-driven harness (for
//! example LangGraph over the Python MCP adapters, replaying recorded model responses) is
//! another `Agent`: it can start the server itself from [`Endpoint::command_line`], or use
//! [`Endpoint::connect`].

use std::ffi::OsString;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::CallToolResult;
use serde_json::Value;

use super::model::{Origin, Scenario};
use crate::Res;
use crate::mcp::{self, Client, Reply};

/// A future an [`Agent`] returns (agents are trait objects, so their futures are boxed).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Most sessions one endpoint opens in a run (the first, and each reconnect after a death).
pub const SESSIONS_MAX: usize = 16;

/// An agent harness.
pub trait Agent: Send + Sync {
    /// The name `--harness` selects.
    fn name(&self) -> &'static str;
    /// How tables label its figures: a scripted harness says it is a strawman.
    fn label(&self) -> &'static str;
    /// Carries out `scenario`'s task as worker `worker` through `endpoint`.
    fn run<'a>(
        &'a self,
        scenario: &'a Scenario,
        endpoint: &'a Endpoint,
        worker: u32,
    ) -> BoxFuture<'a, Transcript>;
}

/// The MCP server an agent talks to, started as a child process on each [`Endpoint::connect`].
///
/// Sessions stay open until the run closes the endpoint: an agent that returns must not take
/// the proxy down with it while the proxy still has ambiguous outcomes to reconcile.
pub struct Endpoint {
    what: String,
    program: PathBuf,
    args: Vec<OsString>,
    env: Vec<(String, String)>,
    /// One kill point per start, armed through `FAILPOINTS` (gated kill scenarios only).
    kill_points: Vec<String>,
    stderr_log: PathBuf,
    starts: AtomicU32,
    deaths: AtomicU32,
    sessions: Mutex<Vec<Arc<Client>>>,
}

impl Endpoint {
    /// An endpoint that starts `program args…` with `env`; start `n` is killed at
    /// `kill_points[n]`, when there is one. The server's stderr is appended to `stderr_log`.
    pub fn new(
        what: impl Into<String>,
        command: Vec<OsString>,
        env: Vec<(String, String)>,
        kill_points: Vec<String>,
        stderr_log: PathBuf,
    ) -> Res<Endpoint> {
        let mut command = command.into_iter();
        let program = command.next().ok_or("an endpoint needs a program")?;
        Ok(Endpoint {
            what: what.into(),
            program: PathBuf::from(program),
            args: command.collect(),
            env,
            kill_points,
            stderr_log,
            starts: AtomicU32::new(0),
            deaths: AtomicU32::new(0),
            sessions: Mutex::new(Vec::new()),
        })
    }

    /// What the server is, for messages (`interlock serve`, `the mock rail`).
    pub fn what(&self) -> &str {
        &self.what
    }

    /// The command line of the next start, for an agent that brings its own MCP client.
    pub fn command_line(&self) -> (PathBuf, Vec<OsString>, Vec<(String, String)>) {
        let start = self.starts.load(Ordering::SeqCst) as usize;
        (self.program.clone(), self.args.clone(), self.env_for(start))
    }

    fn env_for(&self, start: usize) -> Vec<(String, String)> {
        let mut env = self.env.clone();
        if let Some(point) = self.kill_points.get(start) {
            env.push(("FAILPOINTS".to_owned(), format!("{point}=return(kill)")));
        }
        env
    }

    /// Starts the server and completes the handshake.
    pub async fn connect(&self) -> Res<Session> {
        let start = self.starts.fetch_add(1, Ordering::SeqCst) as usize;
        if start >= SESSIONS_MAX {
            return Err(format!(
                "{}: more than {SESSIONS_MAX} starts in one run",
                self.what
            ));
        }
        let mut cmd = tokio::process::Command::new(&self.program);
        cmd.args(&self.args).env_remove("RAZORPAY_KEY_ID");
        cmd.envs(self.env_for(start));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.stderr_log)
            .map_err(|e| format!("open {}: {e}", self.stderr_log.display()))?;
        let client = match mcp::connect(cmd, Stdio::from(log), &self.what).await {
            Ok(client) => Arc::new(client),
            Err(e) => {
                // A start that dies before serving (killed during boot recovery) is a death.
                self.deaths.fetch_add(1, Ordering::SeqCst);
                return Err(e);
            }
        };
        self.sessions
            .lock()
            .expect("the sessions lock is never poisoned")
            .push(Arc::clone(&client));
        Ok(Session { client })
    }

    /// Records that a session's server died under a call.
    pub fn note_death(&self) {
        self.deaths.fetch_add(1, Ordering::SeqCst);
    }

    /// How many servers died under the agent (calls that failed with the transport, and
    /// starts that never served).
    pub fn deaths(&self) -> u32 {
        self.deaths.load(Ordering::SeqCst)
    }

    /// How many times the server was started.
    pub fn starts(&self) -> u32 {
        self.starts.load(Ordering::SeqCst)
    }

    /// Whether some session is still connected.
    pub fn live(&self) -> bool {
        let sessions = self.sessions.lock().expect("never poisoned");
        sessions.iter().any(|c| !c.is_transport_closed())
    }

    /// Closes every session; each server exits when its stdin closes (or is killed).
    pub async fn close(&self) {
        let sessions: Vec<Arc<Client>> =
            std::mem::take(&mut *self.sessions.lock().expect("never poisoned"));
        for client in sessions {
            if let Ok(client) = Arc::try_unwrap(client) {
                let _ = client.cancel().await;
            }
        }
    }
}

/// One connection to the endpoint's server.
pub struct Session {
    client: Arc<Client>,
}

/// A tool as `tools/list` showed it.
#[derive(Debug, Clone)]
pub struct ListedTool {
    /// Its name.
    pub name: String,
    /// Its description.
    pub description: String,
}

impl Session {
    /// `tools/list`.
    pub async fn list_tools(&self) -> Res<Vec<ListedTool>> {
        let tools = self
            .client
            .list_all_tools()
            .await
            .map_err(|e| format!("tools/list: {e}"))?;
        Ok(tools
            .into_iter()
            .map(|t| ListedTool {
                name: t.name.to_string(),
                description: t.description.map(|d| d.to_string()).unwrap_or_default(),
            })
            .collect())
    }

    /// Calls `tool`, waiting at most `timeout`.
    pub async fn call(&self, tool: &str, args: Value, timeout: Duration) -> (Reply, Duration) {
        mcp::call(&self.client, tool, args, timeout).await
    }

    /// Whether the server has gone (its transport closed).
    pub fn is_dead(&self) -> bool {
        self.client.is_transport_closed()
    }
}

/// How one call ended, as the agent saw it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum CallOutcome {
    /// A result that is not an error. `code` is Interlock's reason code when it sent one
    /// (`APPLIED`, `IDEMPOTENT_REPLAY`).
    Ok {
        /// Interlock's reason code, if any.
        code: Option<String>,
    },
    /// An `isError` result: Interlock's refusal or unknown outcome (with its code and deciding
    /// gate), or the rail's own error text.
    Error {
        /// Interlock's reason code, if the answer came from Interlock.
        code: Option<String>,
        /// The gate whose verdict decided, if one did.
        gate: Option<String>,
        /// The text.
        text: String,
    },
    /// The session failed: the server died under the call.
    Failed(String),
    /// The agent stopped waiting.
    TimedOut,
}

impl CallOutcome {
    /// Reads a reply into an outcome.
    pub fn of(reply: &Reply) -> CallOutcome {
        match reply {
            Reply::Answered(result) => {
                let (code, gate) = interlock_code(result);
                if result.is_error == Some(true) {
                    CallOutcome::Error {
                        code,
                        gate,
                        text: mcp::text_of(result),
                    }
                } else {
                    CallOutcome::Ok { code }
                }
            }
            Reply::Failed(e) => CallOutcome::Failed(e.clone()),
            Reply::TimedOut => CallOutcome::TimedOut,
        }
    }

    /// Whether the agent got what it asked for.
    pub fn is_ok(&self) -> bool {
        matches!(self, CallOutcome::Ok { .. })
    }
}

/// `structuredContent.interlock.reason_code`, and the first gate that did not allow.
fn interlock_code(result: &CallToolResult) -> (Option<String>, Option<String>) {
    let Some(block) = result
        .structured_content
        .as_ref()
        .and_then(|s| s.get("interlock"))
    else {
        return (None, None);
    };
    let code = block["reason_code"].as_str().map(str::to_owned);
    let gate = block["gates"].as_array().and_then(|gates| {
        gates
            .iter()
            .find(|g| g["verdict"] != "ALLOW")
            .and_then(|g| g["gate"].as_str().map(str::to_owned))
    });
    (code, gate)
}

/// One call an agent made.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CallRecord {
    /// The worker that made it.
    pub worker: u32,
    /// Where in the scenario it came from.
    pub origin: Origin,
    /// The tool.
    pub tool: String,
    /// 0 for the first attempt, then each retry.
    pub attempt: u32,
    /// Whether it moves money.
    pub money: bool,
    /// How long until the answer (or the failure, or the agent's timeout).
    pub elapsed: Duration,
    /// How it ended.
    pub outcome: CallOutcome,
}

/// Everything an agent did in one run.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Transcript {
    /// Every call, in order.
    pub calls: Vec<CallRecord>,
    /// Whether the agent read the injected text (and so was exposed to it).
    pub saw_injection: bool,
    /// Things that went wrong outside calls (a reconnect that failed…).
    pub notes: Vec<String>,
}
