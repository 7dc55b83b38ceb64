//! What an agent harness sees of a run, and what it leaves behind.
//!
//! An [`Agent`] is given the scenario and an [`Endpoint`]: the MCP server it talks to, which is
//! the mock rail itself on the direct path and `interlock serve` on the gated one; it cannot
//! tell which. It returns a [`Transcript`] of every call it made. The run judges money,
//! entities and completion from the rail's journal, never from the transcript; the transcript
//! only says which answers the agent got (which gate refused what) and when calls were sent and
//! answered.
//!
//! The scripted harness is [`crate::scenario::naive::Naive`]. A model-driven harness (for
//! example LangGraph over the Python MCP adapters, replaying recorded model responses) is
//! another `Agent`, with the duties [`Agent`] lists.

use std::ffi::OsString;
use std::future::Future;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::CallToolResult;
use serde_json::Value;
use tokio::sync::{Barrier, oneshot};

use super::model::{MONEY_TOOLS, Origin, Scenario};
use crate::Res;
use crate::mcp::{self, Client, Reply};

/// A future an [`Agent`] returns (agents are trait objects, so their futures are boxed).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Most sessions one endpoint opens in a run (the first, and each reconnect after a death).
pub const SESSIONS_MAX: usize = 16;

/// How long a racing worker's first money call waits at the start line for the others. Longer
/// than a proxy's start and the reads before the call; a worker that never arrives (its reads
/// failed) releases the rest at this bound, and the transcripts then show no overlap.
pub const RACE_START_WAIT_MAX: Duration = Duration::from_secs(20);
/// How long closing an endpoint waits for each server it killed to be reaped.
pub const REAP_WAIT_MAX: Duration = Duration::from_secs(10);

/// An agent harness.
///
/// Its duties, which the judging relies on:
///
/// 1. **Tag every money call.** Put `notes.agent_action` = [`Scenario::action_id`] of the
///    call's [`Origin`] in the arguments of every call of a money tool (a tool in
///    [`MONEY_TOOLS`], or one [`Scenario::is_money`] says forwards to one), the same on every
///    retry and every worker. It is how the journal's entities are told apart by the action
///    that made them: duplicates, exactly-once violations and task completion are counted by
///    it. The judge refuses a run with an entity that carries no tag, or a tag that names no
///    money action of the scenario, with an error naming the scenario (so an untagged harness
///    cannot score wrongly in silence).
/// 2. **Start servers through the [`Endpoint`].** [`Endpoint::connect`] starts each server,
///    arms the kill point of each start, and watches how each process ends: deaths under the
///    agent and kill points reached are read from those exits, and a racing worker's first
///    money call waits at the start line ([`Session::call`]). A harness that brings its own
///    MCP client can start the server from [`Endpoint::command_line`], but then nothing of
///    that is seen: a kill or race scenario fails as not reached.
/// 3. **Leave the servers running.** Sessions stay open until the run closes the endpoint:
///    after the agents return, the gated run waits for the ledger to settle, and keeps a proxy
///    alive meanwhile only through the sessions the endpoint opened (it starts one if none is
///    live).
/// 4. **Record every call** in the [`Transcript`], with where it came from ([`Origin`]),
///    whether it moves money, and the [`CallTime`] the session gave it.
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

/// How one start of the server ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Ended {
    /// Not reaped (yet).
    Running,
    /// Killed by the run when it closed the endpoint.
    ClosedByRun,
    /// SIGKILL, which the run did not send: an armed kill point fired (the failpoints build
    /// SIGKILLs itself at the point; nothing else here sends SIGKILL but the run's close).
    SelfKilled,
    /// Exited with this code, or died of another signal (`-signal`).
    Other(i32),
}

impl Ended {
    fn of(status: ExitStatus) -> Ended {
        match (status.signal(), status.code()) {
            (Some(9), _) => Ended::SelfKilled,
            (Some(signal), _) => Ended::Other(-signal),
            (None, Some(code)) => Ended::Other(code),
            (None, None) => Ended::Other(i32::MIN),
        }
    }

    /// Whether the server died under the agent (before the run closed it).
    pub fn died(self) -> bool {
        matches!(self, Ended::SelfKilled | Ended::Other(_))
    }
}

/// One start of the server: the kill point it was armed with, and how it ended.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Start {
    /// The kill point armed through `FAILPOINTS`, if any.
    pub kill_point: Option<String>,
    /// How the process ended.
    pub ended: Ended,
}

/// A started server's process, watched by a task that records how it ends.
struct Process {
    kill_point: Option<String>,
    ended: Arc<Mutex<Ended>>,
    stop: Option<oneshot::Sender<()>>,
    watcher: Option<tokio::task::JoinHandle<()>>,
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
    /// The run's clock: [`CallTime::sent_at`] counts from here, the same for every worker.
    epoch: Instant,
    /// The start line racing workers' first money calls wait at (shared by their endpoints).
    race: Option<Arc<Barrier>>,
    /// Whether this endpoint's first money call has left the start line.
    raced: AtomicBool,
    processes: Mutex<Vec<Process>>,
    sessions: Mutex<Vec<Arc<Client>>>,
}

/// When a call was sent and how long its answer took.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct CallTime {
    /// When the request was sent, from the start of the run (every worker's endpoint counts
    /// from the same instant, so workers' calls can be compared).
    pub sent_at: Duration,
    /// How long until the answer (or the failure, or the agent's timeout).
    pub elapsed: Duration,
}

impl CallTime {
    /// When the answer came, from the start of the run.
    pub fn answered_at(&self) -> Duration {
        self.sent_at + self.elapsed
    }
}

impl Endpoint {
    /// An endpoint that starts `program args…` with `env`; start `n` is killed at
    /// `kill_points[n]`, when there is one. The server's stderr is appended to `stderr_log`.
    /// `epoch` is the run's start; `race`, when racing workers share one, is their start line.
    pub fn new(
        what: impl Into<String>,
        command: Vec<OsString>,
        env: Vec<(String, String)>,
        kill_points: Vec<String>,
        stderr_log: PathBuf,
        epoch: Instant,
        race: Option<Arc<Barrier>>,
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
            epoch,
            race,
            raced: AtomicBool::new(false),
            processes: Mutex::new(Vec::new()),
            sessions: Mutex::new(Vec::new()),
        })
    }

    /// What the server is, for messages (`interlock serve`, `the mock rail`).
    pub fn what(&self) -> &str {
        &self.what
    }

    /// The command line of the next start, for an agent that brings its own MCP client (see
    /// [`Agent`]: such a start is not watched).
    pub fn command_line(&self) -> (PathBuf, Vec<OsString>, Vec<(String, String)>) {
        let start = self.processes.lock().expect("never poisoned").len();
        (self.program.clone(), self.args.clone(), self.env_for(start))
    }

    fn env_for(&self, start: usize) -> Vec<(String, String)> {
        let mut env = self.env.clone();
        if let Some(point) = self.kill_points.get(start) {
            env.push(("FAILPOINTS".to_owned(), format!("{point}=return(kill)")));
        }
        env
    }

    /// Starts the server and completes the handshake. A start that dies before serving
    /// (killed during boot recovery) is an error here and a death in [`Endpoint::starts`].
    pub async fn connect(&self) -> Res<Session<'_>> {
        let (stdout, stdin) = self.spawn()?;
        let client = Arc::new(mcp::serve(stdout, stdin, &self.what).await?);
        self.sessions
            .lock()
            .expect("the sessions lock is never poisoned")
            .push(Arc::clone(&client));
        Ok(Session {
            client,
            endpoint: self,
        })
    }

    /// Starts the next process, armed with its start's kill point, and hands it to a task that
    /// records how it ends and kills it when told to stop (or when the endpoint is dropped
    /// without closing).
    fn spawn(&self) -> Res<(tokio::process::ChildStdout, tokio::process::ChildStdin)> {
        // Held while spawning, so two connects at once cannot take the same start's kill point.
        let mut processes = self.processes.lock().expect("never poisoned");
        let start = processes.len();
        if start >= SESSIONS_MAX {
            return Err(format!(
                "{}: more than {SESSIONS_MAX} starts in one run",
                self.what
            ));
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.stderr_log)
            .map_err(|e| format!("open {}: {e}", self.stderr_log.display()))?;
        let mut cmd = tokio::process::Command::new(&self.program);
        cmd.args(&self.args)
            .env_remove("RAZORPAY_KEY_ID")
            .envs(self.env_for(start))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            // A backstop: the watcher kills it on close, this if the runtime goes first.
            .kill_on_drop(true);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", self.what))?;
        let pipes = (child.stdout.take(), child.stdin.take());
        let ended = Arc::new(Mutex::new(Ended::Running));
        let (stop, stopped) = oneshot::channel::<()>();
        let record = Arc::clone(&ended);
        let watcher = tokio::spawn(async move {
            let end = tokio::select! {
                // An exit already there is the process's own, not the close's.
                biased;
                status = child.wait() => status.map_or(Ended::Other(i32::MIN), Ended::of),
                _ = stopped => match child.try_wait() {
                    Ok(Some(status)) => Ended::of(status),
                    _ => {
                        let _ = child.kill().await;
                        Ended::ClosedByRun
                    }
                },
            };
            *record.lock().expect("never poisoned") = end;
        });
        processes.push(Process {
            kill_point: self.kill_points.get(start).cloned(),
            ended,
            stop: Some(stop),
            watcher: Some(watcher),
        });
        match pipes {
            (Some(stdout), Some(stdin)) => Ok((stdout, stdin)),
            _ => Err(format!("{}: no stdio pipes", self.what)),
        }
    }

    /// Every start so far: its kill point and how its process ended.
    pub fn starts(&self) -> Vec<Start> {
        let processes = self.processes.lock().expect("never poisoned");
        processes
            .iter()
            .map(|p| Start {
                kill_point: p.kill_point.clone(),
                ended: *p.ended.lock().expect("never poisoned"),
            })
            .collect()
    }

    /// How many servers died under the agent (before the run closed them), from their exits.
    pub fn deaths(&self) -> u32 {
        let died = self.starts().iter().filter(|s| s.ended.died()).count();
        u32::try_from(died).unwrap_or(u32::MAX)
    }

    /// Now, on the run's clock (for a call that was never sent).
    pub fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    /// Whether some session is still connected.
    pub fn live(&self) -> bool {
        let sessions = self.sessions.lock().expect("never poisoned");
        sessions.iter().any(|c| !c.is_transport_closed())
    }

    /// Closes every session and kills every server still running, then waits (at most
    /// [`REAP_WAIT_MAX`] each) until each is reaped, so [`Endpoint::starts`] is final.
    pub async fn close(&self) {
        let mut watchers = Vec::new();
        {
            let mut processes = self.processes.lock().expect("never poisoned");
            for process in processes.iter_mut() {
                if let Some(stop) = process.stop.take() {
                    let _ = stop.send(());
                }
                watchers.extend(process.watcher.take());
            }
        }
        for watcher in watchers {
            let _ = tokio::time::timeout(REAP_WAIT_MAX, watcher).await;
        }
        let sessions: Vec<Arc<Client>> =
            std::mem::take(&mut *self.sessions.lock().expect("never poisoned"));
        for client in sessions {
            if let Ok(client) = Arc::try_unwrap(client) {
                let _ = client.cancel().await;
            }
        }
    }

    /// Waits at the start line if this is a racing worker's first money call.
    async fn start_line(&self, tool: &str) {
        let Some(race) = &self.race else { return };
        if !MONEY_TOOLS.contains(&tool) || self.raced.swap(true, Ordering::SeqCst) {
            return;
        }
        // A worker that never comes lets the others go at the bound; the transcripts tell.
        let _ = tokio::time::timeout(RACE_START_WAIT_MAX, race.wait()).await;
    }
}

/// One connection to the endpoint's server.
pub struct Session<'a> {
    client: Arc<Client>,
    endpoint: &'a Endpoint,
}

/// A tool as `tools/list` showed it.
#[derive(Debug, Clone)]
pub struct ListedTool {
    /// Its name.
    pub name: String,
    /// Its description.
    pub description: String,
}

impl Session<'_> {
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

    /// Calls `tool`, waiting at most `timeout` for the answer. A racing worker's first money
    /// call first waits at the start line, so the workers' calls leave together; the time it
    /// was sent is taken after that.
    pub async fn call(&self, tool: &str, args: Value, timeout: Duration) -> (Reply, CallTime) {
        self.endpoint.start_line(tool).await;
        let sent_at = self.endpoint.epoch.elapsed();
        let (reply, elapsed) = mcp::call(&self.client, tool, args, timeout).await;
        (reply, CallTime { sent_at, elapsed })
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
    /// When it was sent and how long its answer took.
    pub time: CallTime,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_sigkill_the_run_did_not_send_is_a_kill_point() {
        // Wait statuses as waitpid reports them: a signal in the low bits, a code in the next.
        assert_eq!(Ended::of(ExitStatus::from_raw(9)), Ended::SelfKilled);
        assert_eq!(Ended::of(ExitStatus::from_raw(6)), Ended::Other(-6));
        assert_eq!(Ended::of(ExitStatus::from_raw(0)), Ended::Other(0));
        assert_eq!(Ended::of(ExitStatus::from_raw(1 << 8)), Ended::Other(1));
        assert!(Ended::SelfKilled.died() && Ended::Other(1).died());
        assert!(!Ended::ClosedByRun.died() && !Ended::Running.died());
    }
}
