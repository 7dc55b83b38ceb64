//! The runner: carries out the driver's commands against the ledger and the rail. It holds no
//! rule of its own: which event comes next, what the gates say and what the agent is told are
//! the driver's ([`interlock_driver::Proposal`]); what a transition does to the row is the
//! machine's, applied by the ledger. This module only performs I/O in the order it is asked,
//! with the chaos kill points between the steps.
//!
//! The async methods (`*_async`) are what the proxy awaits on its runtime; the blocking ones
//! with the plain names drive the same futures to completion on the calling thread, for a rail
//! whose futures complete without a runtime (the memory rail: the engine's tests, the
//! bench's `growth` command, the operator commands).

use crate::clock::Clock;
use crate::kill_point;
use crate::ledger::{ApplyError, IntentKey, Ledger, LedgerError, is_outcome};
use interlock_driver::gates::{self, GateResult, LiveTool, ModelGate, Usage};
use interlock_driver::{
    Answer, CallBudget, Command, Context, DriverConfig, Failure, Proposal, Rail, Refusal,
};
use interlock_machine::EventKind;
use interlock_spec::action::ProposedAction;
use interlock_spec::mandate::Mandate;
use std::sync::Arc;

pub use interlock_driver::config::{
    CALL_TIMEOUT_MS_MAX, LEASE_MARGIN_MS, LEASE_TTL_MS_MAX, RAIL_LAG_MS_MAX,
};
pub use interlock_driver::{Outcome, PROPOSAL_COMMANDS_MAX};

/// How the engine runs: the driver's configuration.
pub type EngineConfig = DriverConfig;

/// Why the engine could not give an answer. Refusals are answers, not errors.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The ledger failed.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// A transition the engine needed was refused in a way it does not expect.
    #[error("ledger transition failed: {0}")]
    Apply(#[from] ApplyError),
    /// The key could not be computed.
    #[error("the idempotency key could not be computed: {0}")]
    Sik(String),
    /// A bad configuration.
    #[error("engine configuration: {0}")]
    Config(String),
    /// The mandate has no hash (it would not validate).
    #[error("the mandate cannot be hashed: {0}")]
    Mandate(String),
    /// An operator's approval that does not bind to the held intent; it stays held.
    #[error("not approved, still held: {0}")]
    NotApprovable(String),
    /// A kill point fired (tests only).
    #[error("killed at {0}")]
    Killed(&'static str),
}

impl EngineError {
    /// The disk fault under this error, if it is one (see [`crate::ledger::DiskFault`]).
    pub fn disk_fault(&self) -> Option<crate::ledger::DiskFault> {
        match self {
            EngineError::Ledger(error) => error.disk_fault(),
            EngineError::Apply(error) => error.disk_fault(),
            _ => None,
        }
    }
}

impl From<Failure> for EngineError {
    fn from(failure: Failure) -> EngineError {
        match failure {
            Failure::Sik(problem) => EngineError::Sik(problem),
            Failure::NotApprovable(why) => EngineError::NotApprovable(why),
            Failure::Refused(refusal) => EngineError::Apply(apply_error(refusal)),
        }
    }
}

/// A refusal as the engine's error, for callers that did not expect one.
pub(crate) fn apply_error(refusal: Refusal) -> ApplyError {
    match refusal {
        Refusal::Illegal(illegal) => ApplyError::Illegal(illegal),
        Refusal::Lease(why) => ApplyError::Lease(why),
        Refusal::NoSuchIntent => ApplyError::NoSuchIntent("(as asked)".to_owned()),
        Refusal::Contended => ApplyError::Contended("(as asked)".to_owned()),
    }
}

/// Called by [`kill_point!`]: `kill` SIGKILLs this process; `stop` SIGSTOPs it and returns
/// `None` once it is continued (the caller goes on); anything else is the error that fails the
/// caller.
pub fn at_kill_point(point: &'static str, arg: Option<&str>) -> Option<EngineError> {
    if arg == Some("stop") {
        stop_self();
        return None;
    }
    killed_at::<()>(point, arg).err()
}

/// `kill` SIGKILLs this process; anything else fails the caller.
pub fn killed_at<T>(point: &'static str, arg: Option<&str>) -> Result<T, EngineError> {
    if arg == Some("kill") {
        kill_self();
        // A SIGKILL sent to ourselves is delivered before `kill` returns, so this is reached
        // only if it could not be sent. Die anyway (SIGABRT, also without destructors) rather
        // than carry on past a point armed to stop us: the matrix counts only SIGKILL as a
        // landed kill, so this shows as a missed one.
        std::process::abort();
    }
    Err(EngineError::Killed(point))
}

/// SIGKILL to this process by a direct `kill(2)`: uncatchable, no destructor, no flush, and
/// every thread stopped as the call returns.
#[cfg(feature = "failpoints")]
fn kill_self() {
    use rustix::process::{Signal, getpid, kill_process};
    let _ = kill_process(getpid(), Signal::KILL);
}

/// Without kill points nothing arms `kill`; the caller aborts.
#[cfg(not(feature = "failpoints"))]
fn kill_self() {}

/// SIGSTOP to this process: every thread stops until someone sends SIGCONT, and the clocks
/// keep running meanwhile (the chaos matrix's stall cells).
///
/// A signal sent to the process is taken by whichever thread the kernel picks (often the main
/// one), and until that thread has run and stopped the rest, the caller runs on: far enough,
/// on a busy machine, to send the very request the stall was meant to hold back (seen in the
/// first stall runs). So the caller holds here until the stop has come and gone, which shows
/// as a gap in the monotonic clock (it runs while the process is stopped) far longer than its
/// naps. It never waits more than `STOP_HOLD_MAX`; a stop that never comes aborts, which the
/// matrix reports as a stall that did not land.
#[cfg(feature = "failpoints")]
fn stop_self() {
    use rustix::process::{Signal, getpid, kill_process};
    use std::time::{Duration, Instant};
    const STOP_HOLD_MAX: Duration = Duration::from_secs(120);
    const NAP: Duration = Duration::from_millis(10);
    const STOPPED_GAP: Duration = Duration::from_secs(2);
    // Read before the signal: a stop that lands before the first nap must still show as a gap.
    let started = Instant::now();
    let mut last = started;
    if kill_process(getpid(), Signal::STOP).is_err() {
        std::process::abort();
    }
    while started.elapsed() < STOP_HOLD_MAX {
        std::thread::sleep(NAP);
        let now = Instant::now();
        if now.duration_since(last) >= STOPPED_GAP {
            return;
        }
        last = now;
    }
    std::process::abort();
}

/// Without kill points nothing arms `stop`.
#[cfg(not(feature = "failpoints"))]
fn stop_self() {}

/// The exactly-once engine over one ledger and one rail.
pub struct Engine<R: Rail> {
    pub(crate) ledger: Ledger,
    pub(crate) rail: R,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) mandate: Mandate,
    pub(crate) mandate_hash: String,
    pub(crate) config: DriverConfig,
    pub(crate) model: Option<Box<dyn ModelGate>>,
}

impl<R: Rail> Engine<R> {
    /// An engine over `ledger` (already opened and verified) and `rail`.
    pub fn new(
        ledger: Ledger,
        rail: R,
        clock: Arc<dyn Clock>,
        mandate: Mandate,
        config: EngineConfig,
    ) -> Result<Engine<R>, EngineError> {
        config.check().map_err(EngineError::Config)?;
        let mandate_hash = mandate
            .hash()
            .map_err(|e| EngineError::Mandate(e.to_string()))?;
        Ok(Engine {
            ledger,
            rail,
            clock,
            mandate,
            mandate_hash,
            config,
            model: None,
        })
    }

    /// Turns G5 on with `model`. Off unless called.
    pub fn with_model_gate(mut self, model: Box<dyn ModelGate>) -> Engine<R> {
        self.model = Some(model);
        self
    }

    /// The ledger.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// The rail.
    pub fn rail(&self) -> &R {
        &self.rail
    }

    /// The mandate in force.
    pub fn mandate(&self) -> &Mandate {
        &self.mandate
    }

    /// The engine's configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    pub(crate) fn context(&self) -> Context<'_> {
        Context {
            mandate: &self.mandate,
            mandate_hash: &self.mandate_hash,
            config: &self.config,
            wall_ms: self.clock.wall_ms(),
        }
    }

    /// Judges `action` and, if it may proceed, carries it out exactly once.
    pub async fn propose_async(
        &self,
        action: &ProposedAction,
        live_tool: Option<&LiveTool>,
    ) -> Result<Answer, EngineError> {
        kill_point!("before_wal");
        let now = self.clock.now_ms();
        let proposal = Proposal::new(self.context(), now, action.clone(), live_tool.cloned());
        self.carry(proposal).await
    }

    /// [`Engine::propose_async`] on the calling thread.
    pub fn propose(
        &self,
        action: &ProposedAction,
        live_tool: Option<&LiveTool>,
    ) -> Result<Answer, EngineError> {
        pollster::block_on(self.propose_async(action, live_tool))
    }

    /// A human approves a held intent: judged again against the rail and the ledger as they
    /// are now, inside the transaction that releases it (a hold lifts holds, never a block),
    /// then carried out. Bound to the intent's SIK, amount and the mandate it was held under.
    pub async fn approve_async(
        &self,
        key: &IntentKey,
        by: &str,
        why: &str,
        live_tool: Option<&LiveTool>,
    ) -> Result<Answer, EngineError> {
        let held = self
            .ledger
            .read_intent(key)?
            .ok_or_else(|| ApplyError::NoSuchIntent(key.describe()))?;
        let proposal = Proposal::approve(self.context(), &held, by, why, live_tool.cloned());
        self.carry(proposal).await
    }

    /// [`Engine::approve_async`] on the calling thread.
    pub fn approve(
        &self,
        key: &IntentKey,
        by: &str,
        why: &str,
        live_tool: Option<&LiveTool>,
    ) -> Result<Answer, EngineError> {
        pollster::block_on(self.approve_async(key, by, why, live_tool))
    }

    /// Carries out `proposal`'s commands until it answers.
    async fn carry(&self, mut proposal: Proposal) -> Result<Answer, EngineError> {
        for _ in 0..=PROPOSAL_COMMANDS_MAX + 1 {
            let Some(command) = proposal.poll_command() else {
                break;
            };
            match command {
                Command::ReadReferent(action) => {
                    let referent = self.rail.resolve(&action).await.map_err(|e| e.to_string());
                    let now = self.clock.now_ms();
                    proposal.handle_referent(self.context(), now, referent);
                    self.advise(&mut proposal, now);
                }
                Command::Decide(plan) => {
                    let now = plan.usage.now_ms;
                    let context = self.context();
                    let clock = || self.clock.now_ms();
                    let decided = self.ledger.decide(&plan, clock, &self.mandate, |usage| {
                        proposal.judge(context, now, usage)
                    })?;
                    proposal.handle_decided(context, self.clock.now_ms(), decided);
                }
                Command::Commit(commit) => {
                    let kind = commit.event.kind();
                    self.before_commit(kind)?;
                    let committed = self.ledger.commit(&commit, self.clock.now_ms())?;
                    if is_outcome(kind) && committed.is_ok() {
                        kill_point!("after_commit_before_ack");
                    }
                    proposal.handle_committed(self.context(), self.clock.now_ms(), committed);
                }
                Command::ReadIntent(key) => {
                    let view = self.ledger.read_intent(&key)?;
                    proposal.handle_intent(self.context(), self.clock.now_ms(), view);
                }
                Command::CallRail {
                    call,
                    attempt_seq: _,
                    timeout_ms,
                    send_by_ms,
                } => {
                    kill_point!("after_wal_before_call");
                    let clock = Arc::clone(&self.clock);
                    let budget =
                        CallBudget::new(timeout_ms, send_by_ms, Arc::new(move || clock.now_ms()));
                    let outcome = self.rail.execute(&call, &budget).await;
                    // The call has left and the rail has done whatever it did; its answer dies
                    // with us.
                    kill_point!("during_call");
                    proposal.handle_rail_outcome(self.context(), self.clock.now_ms(), outcome);
                }
                Command::Answer(answer) => return Ok(answer),
                Command::Fail(failure) => return Err(failure.into()),
            }
        }
        unreachable!("a proposal answers within PROPOSAL_COMMANDS_MAX commands")
    }

    /// The kill points in front of a commit, by what it records. None stands between a
    /// permission and its attempt: the deciding transaction commits both (ADR 0004).
    fn before_commit(&self, kind: EventKind) -> Result<(), EngineError> {
        if is_outcome(kind) {
            kill_point!("after_call_before_commit");
        }
        Ok(())
    }

    /// G5's advice, if a model gate is on, computed outside any transaction.
    fn advise(&self, proposal: &mut Proposal, now: u64) {
        let Some(model) = self.model.as_deref() else {
            return;
        };
        let unread = Usage::default();
        let advice: Option<GateResult> = proposal
            .advice_input(self.context(), now, &unread)
            .map(|input| gates::model::check(model, &input));
        if let Some(advice) = advice
            && !proposal.is_done()
        {
            proposal.set_advice(advice);
        }
    }
}
