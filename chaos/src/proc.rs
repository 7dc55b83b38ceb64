//! One `interlock serve` process in front of its own `interlock-rail-mock`, and the agent's MCP
//! client on its stdio.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use interlock_rail_mock::harness::{self, Inspection, MockCommand};
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use serde_json::{Value, json};

use crate::ledger::LedgerAt;
use crate::plan::{Action, Fault};
use crate::world::{AGENT, Bins, PAYMENT, SETTLEMENT_DESCRIPTION};

/// The proxy's bound on one rail call. A hung call becomes ambiguous after this.
pub const CALL_TIMEOUT_MS: u64 = 1_000;
/// The proxy's lease: the engine's floor, `CALL_TIMEOUT_MS` + 5000. A restart waits this long
/// for a dead process's intent before it may take it back.
pub const LEASE_TTL_MS: u64 = CALL_TIMEOUT_MS + interlock_engine::executor::LEASE_MARGIN_MS;
/// How often the proxy's background reconciler looks for due intents.
pub const RECONCILE_EVERY_MS: u64 = 200;
/// How long the agent waits for the proxy to answer `initialize`. Boot recovery runs before
/// serving and may wait out leases and a partition's back-off: at most
/// `RECOVERY_ROUNDS_MAX` rounds of at most `RECOVERY_WAIT_MS_MAX`, plus the calls themselves.
pub const BOOT_WAIT_MAX: Duration = Duration::from_secs(
    interlock_engine::recovery::RECOVERY_ROUNDS_MAX as u64
        * interlock_engine::recovery::RECOVERY_WAIT_MS_MAX
        / 1000
        + 60,
);
/// How long the agent waits for one tool call's answer.
pub const AGENT_CALL_WAIT_MAX: Duration = Duration::from_secs(60);
/// How long a process gets to exit once its stdin is closed, before it is killed.
pub const STOP_WAIT_MAX: Duration = Duration::from_secs(15);
/// How long to wait for a process the agent saw die to be reaped.
pub const REAP_WAIT_MAX: Duration = Duration::from_secs(15);

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// SIGKILL that the matrix did not send: an armed kill point fired. (The matrix's own
    /// SIGKILL, for a process that would not stop, is [`Ended::WouldNotStop`], never this.)
    Killed,
    /// Exited, or died of another signal (the exit code, or `-signal`).
    Other(i32),
    /// Still running [`STOP_WAIT_MAX`] after its stdin closed; the matrix killed it.
    WouldNotStop,
}

impl Ended {
    fn of(status: ExitStatus) -> Ended {
        match (status.signal(), status.code()) {
            (Some(9), _) => Ended::Killed,
            (Some(signal), _) => Ended::Other(-signal),
            (None, Some(code)) => Ended::Other(code),
            (None, None) => Ended::Other(i32::MIN),
        }
    }

    /// Exit code 0: the process stopped as asked.
    pub fn is_clean(self) -> bool {
        self == Ended::Other(0)
    }
}

/// What the agent got back from one call.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A tool result: `structuredContent.interlock` (or null) and whether it was `isError`.
    Result {
        /// The `interlock` block.
        block: Value,
        /// `isError`.
        is_error: bool,
    },
    /// No answer: the session failed (the proxy died) or the wait ran out.
    Nothing(String),
}

impl Reply {
    /// `outcome` of the `interlock` block, or what happened instead.
    pub fn summary(&self) -> String {
        match self {
            Reply::Result { block, .. } => block["outcome"]
                .as_str()
                .unwrap_or("NO_INTERLOCK_BLOCK")
                .to_owned(),
            Reply::Nothing(why) => format!("no answer ({why})"),
        }
    }
}

/// The files of a trial a process uses.
#[derive(Debug, Clone)]
pub struct Files {
    /// The process's working directory (its log goes here too).
    pub dir: PathBuf,
    /// The mandate.
    pub mandate: PathBuf,
    /// The ledger.
    pub ledger: LedgerAt,
    /// The rail's journal.
    pub journal: PathBuf,
    /// The rail's seed.
    pub seed: PathBuf,
}

/// A running proxy with the agent connected.
pub struct Proxy {
    child: tokio::process::Child,
    client: Option<RunningService<RoleClient, ()>>,
    /// A name for logs: `a1`, `b1`, `a2`, …
    pub name: String,
    /// Its process id: the ledger names the proxy's engine instance by it.
    pub pid: u32,
}

/// How a start went.
pub enum Start {
    /// Serving, handshake done (boot recovery has run).
    Serving(Box<Proxy>),
    /// The process ended before it served.
    Ended {
        /// How.
        how: Ended,
        /// Its process id.
        pid: u32,
    },
}

/// Starts `interlock serve` with `failpoints` armed (if any) in front of a mock with `fault`,
/// and waits for its handshake (after its boot recovery).
pub async fn start(
    bins: &Bins,
    files: &Files,
    name: &str,
    failpoints: Option<&str>,
    fault: Fault,
) -> Result<Start, String> {
    start_with(bins, files, name, failpoints, fault.mock_faults()).await
}

/// [`start`] with the mock's `--faults` spelled out (the soak varies them by generation).
pub async fn start_with(
    bins: &Bins,
    files: &Files,
    name: &str,
    failpoints: Option<&str>,
    mock_faults: &str,
) -> Result<Start, String> {
    let log = std::fs::File::create(files.dir.join(format!("{name}.log")))
        .map_err(|e| format!("cannot create the log of {name}: {e}"))?;
    let mut command = tokio::process::Command::new(&bins.interlock);
    command
        .arg("serve")
        .arg("--mandate")
        .arg(&files.mandate)
        .arg("--db")
        .arg(files.ledger.arg())
        .args(["--agent", AGENT])
        .args(["--call-timeout-ms", &CALL_TIMEOUT_MS.to_string()])
        .args(["--lease-ttl-ms", &LEASE_TTL_MS.to_string()])
        .args(["--reconcile-every-ms", &RECONCILE_EVERY_MS.to_string()])
        .arg("--")
        .args(
            MockCommand::new(&bins.mock)
                .journal(&files.journal)
                .seed(&files.seed)
                .log_level("warn")
                .faults(mock_faults)
                .argv(),
        )
        .env("RUST_LOG", "interlock=info,warn")
        .env_remove("RAZORPAY_KEY_ID")
        .current_dir(&files.dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(log)
        .kill_on_drop(true);
    match failpoints {
        Some(spec) => command.env("FAILPOINTS", spec),
        None => command.env_remove("FAILPOINTS"),
    };
    let mut child = command
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", bins.interlock.display()))?;
    let pid = child.id().ok_or("a process just started has no pid")?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let stdin = child.stdin.take().ok_or("no stdin")?;
    let handshake = ().serve((stdout, stdin));
    tokio::select! {
        served = tokio::time::timeout(BOOT_WAIT_MAX, handshake) => match served {
            Ok(Ok(client)) => Ok(Start::Serving(Box::new(Proxy {
                child,
                client: Some(client),
                name: name.to_owned(),
                pid,
            }))),
            // The handshake failed: the process is dying or dead.
            Ok(Err(e)) => match reap(&mut child).await {
                Some(how) => Ok(Start::Ended { how, pid }),
                None => Err(format!("{name}: the handshake failed ({e}) and the process lives on")),
            },
            Err(_) => Err(format!("{name}: no handshake within {BOOT_WAIT_MAX:?}")),
        },
        status = child.wait() => {
            let status = status.map_err(|e| format!("{name}: wait: {e}"))?;
            Ok(Start::Ended { how: Ended::of(status), pid })
        }
    }
}

async fn reap(child: &mut tokio::process::Child) -> Option<Ended> {
    match tokio::time::timeout(REAP_WAIT_MAX, child.wait()).await {
        Ok(Ok(status)) => Some(Ended::of(status)),
        _ => None,
    }
}

impl Proxy {
    /// The agent asks for `action` of `amount`: a refund on [`PAYMENT`], or a settlement.
    pub async fn propose(&self, action: Action, amount: u64) -> Reply {
        let Some(client) = &self.client else {
            return Reply::Nothing("not connected".to_owned());
        };
        let (tool, args) = match action {
            Action::Refund => (
                "create_refund",
                json!({"payment_id": PAYMENT, "amount": amount}),
            ),
            Action::Settlement => (
                "create_instant_settlement",
                json!({"amount": amount, "description": SETTLEMENT_DESCRIPTION}),
            ),
        };
        let Value::Object(args) = args else {
            unreachable!("a JSON object literal");
        };
        let params = CallToolRequestParams::new(tool).with_arguments(args);
        match tokio::time::timeout(AGENT_CALL_WAIT_MAX, client.call_tool(params)).await {
            Ok(Ok(result)) => reply_of(&result),
            Ok(Err(e)) => Reply::Nothing(e.to_string()),
            Err(_) => Reply::Nothing(format!("no answer within {AGENT_CALL_WAIT_MAX:?}")),
        }
    }

    /// Any tool call, as the agent makes it.
    pub async fn call(&self, tool: &str, args: serde_json::Map<String, Value>) -> Reply {
        let Some(client) = &self.client else {
            return Reply::Nothing("not connected".to_owned());
        };
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(args);
        match tokio::time::timeout(AGENT_CALL_WAIT_MAX, client.call_tool(params)).await {
            Ok(Ok(result)) => reply_of(&result),
            Ok(Err(e)) => Reply::Nothing(e.to_string()),
            Err(_) => Reply::Nothing(format!("no answer within {AGENT_CALL_WAIT_MAX:?}")),
        }
    }

    /// SIGKILL from outside (the soak's periodic kill), and how it ended.
    pub async fn kill(mut self) -> Ended {
        let _ = self.child.start_kill();
        match reap(&mut self.child).await {
            Some(ended) => ended,
            None => Ended::WouldNotStop,
        }
    }

    /// Resident set size and open file descriptors, from `/proc`.
    pub fn footprint(&self) -> Option<(u64, u64)> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).ok()?;
        let rss_kb = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())?;
        let fds = std::fs::read_dir(format!("/proc/{}/fd", self.pid))
            .ok()?
            .count();
        Some((rss_kb, u64::try_from(fds).ok()?))
    }

    /// Whether the process has ended, and how (`None` while it runs). After the agent saw the
    /// session fail, waits up to [`REAP_WAIT_MAX`] for the process to be gone.
    pub async fn ended(&mut self, session_failed: bool) -> Option<Ended> {
        if session_failed {
            return reap(&mut self.child).await;
        }
        match self.child.try_wait() {
            Ok(Some(status)) => Some(Ended::of(status)),
            _ => None,
        }
    }

    /// Waits up to `limit` for the process to end on its own (an armed point that fires in
    /// the background, such as a reconcile pass).
    pub async fn ended_within(&mut self, limit: Duration) -> Option<Ended> {
        match tokio::time::timeout(limit, self.child.wait()).await {
            Ok(Ok(status)) => Some(Ended::of(status)),
            _ => None,
        }
    }

    /// Closes the agent's side (the proxy exits when its stdin closes) and waits for the
    /// process; SIGKILLs it if it does not go in time (the only SIGKILL the matrix sends to a
    /// process it started, reported as [`Ended::WouldNotStop`]). How it ended.
    pub async fn stop(mut self) -> Ended {
        if let Some(client) = self.client.take() {
            let _ = tokio::time::timeout(STOP_WAIT_MAX, client.cancel()).await;
        }
        match tokio::time::timeout(STOP_WAIT_MAX, self.child.wait()).await {
            Ok(Ok(status)) => Ended::of(status),
            _ => {
                let _ = self.child.start_kill();
                let _ = self.child.wait().await;
                Ended::WouldNotStop
            }
        }
    }
}

fn reply_of(result: &CallToolResult) -> Reply {
    let block = result
        .structured_content
        .as_ref()
        .map(|s| s["interlock"].clone())
        .unwrap_or(Value::Null);
    Reply::Result {
        block,
        is_error: result.is_error == Some(true),
    }
}

/// Runs `interlock ARGS` to its end: (success, stdout, stderr).
pub fn interlock(bins: &Bins, args: &[&std::ffi::OsStr]) -> Result<(bool, String, String), String> {
    let out = std::process::Command::new(&bins.interlock)
        .args(args)
        .env("RUST_LOG", "error")
        .env_remove("FAILPOINTS")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run interlock: {e}"))?;
    Ok((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// `interlock-rail-mock inspect --journal FILE`, parsed: the rail's ground truth.
pub fn inspect(bins: &Bins, journal: &Path) -> Result<Inspection, String> {
    harness::inspect(&bins.mock, journal)
}

/// Whether process `pid` is stopped by a signal: `T` in the state field of `/proc/PID/stat`
/// (the field after the parenthesised command name, which may itself hold spaces).
pub fn is_stopped(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .is_some_and(|state| state == "T")
}

/// Sends SIGCONT to `pid` (with `kill(1)`: the harness is not timing-critical here).
pub fn resume(pid: u32) -> Result<(), String> {
    let status = std::process::Command::new("kill")
        .args(["-CONT", &pid.to_string()])
        .status()
        .map_err(|e| format!("cannot run kill -CONT {pid}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("kill -CONT {pid} failed: {status}"))
    }
}
