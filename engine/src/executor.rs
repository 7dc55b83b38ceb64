//! The exactly-once executor: from a parsed action to an answer, with every step that matters
//! durable before the next one starts.
//!
//! 1. G1 and G6, which need nothing from the rail: a call outside the mandate never reaches it.
//! 2. The referent, read from the rail by the engine (never taken from the agent's text).
//! 3. The SIK, from the resolved action.
//! 4. One `IMMEDIATE` transaction: find the intent (I1 is the primary key) or count the usage,
//!    run the ladder, insert the intent and apply its gate event.
//! 5. For an authorised intent: claim the lease and commit `IN_FLIGHT` with its attempt row
//!    (fsync) before the call; re-check the row and the lease; send the stamped call; classify
//!    the answer (one without our stamp is ambiguous); commit; only then answer.

use crate::clock::Clock;
use crate::gates::{self, GateInput, GateResult, Ladder, LiveTool, ModelGate, Usage};
use crate::kill_point;
use crate::ledger::Cached;
use crate::ledger::{
    self, Applied, ApplyError, Change, IntentKey, LeaseChange, Ledger, LedgerError, NewIntent,
};
use crate::rail::{Rail, RailCall, RailOutcome, Referent};
use interlock_machine::{Effect, Event, Illegal, State, Verdict};
use interlock_spec::action::{ActionKind, ProposedAction};
use interlock_spec::ids::Sik;
use interlock_spec::mandate::{Mandate, Reversibility};
use interlock_spec::money::{Currency, Minor};
use interlock_spec::reason::ReasonCode;
use interlock_spec::sik::{SikError, SikInput, compute_sik};
use rusqlite::{OptionalExtension, Transaction, params};
use serde::Serialize;
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// Margin between the end of the longest rail call and the lease's expiry: a lease is never
/// taken back from a holder whose call could still be running.
pub const LEASE_MARGIN_MS: u64 = 5_000;
/// Longest lease the engine accepts (one hour).
pub const LEASE_TTL_MS_MAX: u64 = 3_600_000;
/// Longest rail call timeout the engine accepts (ten minutes).
pub const CALL_TIMEOUT_MS_MAX: u64 = 600_000;
/// Longest rail lag bound the engine accepts (ten minutes).
pub const RAIL_LAG_MS_MAX: u64 = 600_000;
/// Steps one proposal may drive (start, call, outcome); bounds the executor's loop.
pub const DRIVE_STEPS_MAX: u32 = 4;

/// How the engine runs. Every duration is in milliseconds of the engine's clock.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// This process's lease-owner name; unique per process start (the proxy derives it from its
    /// pid and a random nonce, tests name it).
    pub instance_id: String,
    /// How long a lease on an intent lasts.
    pub lease_ttl_ms: u64,
    /// The longest a rail call can take before the rail reports it ambiguous.
    pub call_timeout_ms: u64,
    /// How long the rail may take to show a new entity in its lists (at least the machine's
    /// `RECONCILE_MIN_DELAY_MS`).
    pub rail_lag_ms: u64,
}

impl EngineConfig {
    /// Defaults for a real rail: 10 s calls, 30 s leases.
    pub fn new(instance_id: impl Into<String>) -> EngineConfig {
        EngineConfig {
            instance_id: instance_id.into(),
            lease_ttl_ms: 30_000,
            call_timeout_ms: 10_000,
            rail_lag_ms: interlock_machine::RECONCILE_MIN_DELAY_MS,
        }
    }

    fn check(&self) -> Result<(), EngineError> {
        let bad = |problem: String| Err(EngineError::Config(problem));
        if self.instance_id.is_empty() || self.instance_id.len() > 64 {
            return bad("instance_id must be 1..=64 characters".to_owned());
        }
        if self.lease_ttl_ms < self.call_timeout_ms.saturating_add(LEASE_MARGIN_MS) {
            return bad(format!(
                "lease_ttl_ms {} must be at least call_timeout_ms {} + {LEASE_MARGIN_MS}",
                self.lease_ttl_ms, self.call_timeout_ms
            ));
        }
        // Bounds that keep every deadline the engine computes far from overflow, and name what
        // a sane configuration looks like.
        for (name, value, max) in [
            ("lease_ttl_ms", self.lease_ttl_ms, LEASE_TTL_MS_MAX),
            ("call_timeout_ms", self.call_timeout_ms, CALL_TIMEOUT_MS_MAX),
            ("rail_lag_ms", self.rail_lag_ms, RAIL_LAG_MS_MAX),
        ] {
            if value > max {
                return bad(format!("{name} {value} is above its bound {max}"));
            }
        }
        if self.rail_lag_ms < interlock_machine::RECONCILE_MIN_DELAY_MS {
            return bad(format!(
                "rail_lag_ms {} is below the minimum {}",
                self.rail_lag_ms,
                interlock_machine::RECONCILE_MIN_DELAY_MS
            ));
        }
        Ok(())
    }
}

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
    Sik(#[from] SikError),
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

/// Called by [`kill_point!`]. `kill` SIGKILLs this process; anything else fails the caller.
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
/// every thread stopped as the call returns, not after the fork and exec of a spawned `kill`,
/// during which the others ran on.
#[cfg(feature = "failpoints")]
fn kill_self() {
    use rustix::process::{Signal, getpid, kill_process};
    let _ = kill_process(getpid(), Signal::KILL);
}

/// Without kill points nothing arms `kill`; the caller aborts.
#[cfg(not(feature = "failpoints"))]
fn kill_self() {}

/// What became of a proposal, in one word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Outcome {
    /// The money moved (now, or earlier for an idempotent replay).
    Applied,
    /// Refused by a gate or by an earlier decision.
    Refused,
    /// Waiting for a human.
    Held,
    /// The same action is being carried out or verified.
    InProgress,
    /// The rail's answer was ambiguous; the reconciler will settle it.
    Unknown,
    /// The rail refused the call; the ledger is verifying nothing moved.
    Rejected,
    /// Quarantined for an operator.
    Quarantined,
}

/// The engine's answer to one proposal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Answer {
    /// What became of it.
    pub outcome: Outcome,
    /// Why, as a code.
    pub reason_code: ReasonCode,
    /// Why, as a sentence the agent can act on.
    pub message: String,
    /// The intent's key, once there is one.
    pub sik: Option<Sik>,
    /// The intent's state after this proposal.
    pub state: Option<State>,
    /// The gates that ran for this proposal.
    pub gates: Vec<GateResult>,
    /// The rail's entity, when applied.
    pub rail_entity_id: Option<String>,
    /// The rail's answer, verbatim, when applied.
    pub rail_response: Option<String>,
    /// Whether this answer replays an earlier one.
    pub idempotent_replay: bool,
}

/// The exactly-once engine over one ledger and one rail.
pub struct Engine<R: Rail> {
    pub(crate) ledger: Ledger,
    pub(crate) rail: R,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) mandate: Mandate,
    pub(crate) mandate_hash: String,
    pub(crate) config: EngineConfig,
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
        config.check()?;
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

    /// Judges `action` and, if it may proceed, carries it out exactly once.
    pub fn propose(
        &self,
        action: &ProposedAction,
        live_tool: Option<&LiveTool>,
    ) -> Result<Answer, EngineError> {
        let now = self.clock.now_ms();
        kill_point!("before_wal");
        let unresolved: Result<Referent, String> = Err("not read yet".to_owned());
        let usage = Usage::default();
        let mut input = GateInput {
            action,
            mandate: &self.mandate,
            now_ms: now,
            referent: &unresolved,
            usage: &usage,
            live_tool,
        };
        let early = gates::before_resolve(&input);
        if early.verdict == Verdict::Block {
            return Ok(refusal(early, None));
        }
        let referent = self.rail.resolve(action).map_err(|e| e.to_string());
        input.referent = &referent;
        let Some((subject, currency)) = self.subject_of(action, &referent) else {
            let message = format!(
                "the rail could not confirm what this call is about ({}), and the grant of {} names more than one currency; refused",
                referent.as_ref().err().map_or("", String::as_str),
                action.tool
            );
            let result = GateResult::block(
                gates::Gate::G2,
                ReasonCode::ReferentUnresolvableBlocked,
                message,
            );
            return Ok(refusal(ladder_of(early, result), None));
        };
        let sik = self.sik_of(action, &subject, currency, now)?;
        let key = IntentKey {
            merchant_id: action.merchant_id.clone(),
            sik: sik.clone(),
        };
        let advice = self.advice(&input);
        let decided = self.ledger.write(|tx| {
            if let Some(row) = ledger::read_row(tx, &key).map_err(|e| self.ledger.err(e))? {
                return Ok(Decided::Existing(row.core.state));
            }
            let usage = self.usage(tx, action, &subject, currency, now)?;
            let input = GateInput {
                usage: &usage,
                ..input
            };
            let ladder = gates::ladder(&input, advice.clone());
            if ladder.verdict == Verdict::Block {
                self.record_decision(tx, Some(&key), action, &ladder, "REFUSED", now)?;
                return Ok(Decided::Refused(ladder));
            }
            let call = match &referent {
                Ok(referent) => RailCall::stamped(action, referent, &sik),
                Err(_) => unresolved_call(action, &subject, currency, &sik),
            };
            let intent = self.new_intent(action, &key, &subject, currency, &call)?;
            ledger::insert_locked(tx, &intent, now)?;
            let deciding = ladder.deciding();
            let (event, outcome) = match ladder.verdict {
                Verdict::Allow => (Event::GatesPassed, "AUTHORIZED"),
                _ => (Event::GatesHeld, "HELD"),
            };
            let change = Change {
                reason: Some((
                    deciding.reason_code.as_str().to_owned(),
                    deciding.message.clone(),
                )),
                context: Some(json!({"gates": ladder.results})),
                ..Change::default()
            };
            let seen = ledger::read_row(tx, &key)
                .map_err(|e| self.ledger.err(e))?
                .expect("inserted in this transaction");
            let applied = ledger::apply_locked(tx, &key, &seen, &event, now, &change)?
                .expect("the row cannot move inside our own transaction");
            self.record_decision(tx, Some(&key), action, &ladder, outcome, now)?;
            Ok(Decided::Inserted(applied, ladder))
        })?;
        match decided {
            Decided::Refused(ladder) => Ok(refusal(ladder, Some(sik))),
            Decided::Inserted(applied, ladder) => match applied.effect {
                Effect::StartAttempt => self.drive(&key, Effect::StartAttempt, ladder.results),
                _ => Ok(held(&key, &ladder)),
            },
            Decided::Existing(state) => self.answer_existing(&key, state, action, live_tool, now),
        }
    }

    /// A second proposal of an action the ledger already holds: answered by the intent's state.
    fn answer_existing(
        &self,
        key: &IntentKey,
        state: State,
        action: &ProposedAction,
        live_tool: Option<&LiveTool>,
        now: u64,
    ) -> Result<Answer, EngineError> {
        let info = self.intent_info(key)?;
        let answer = |outcome, code: ReasonCode, message: String| Answer {
            outcome,
            reason_code: code,
            message,
            sik: Some(key.sik.clone()),
            state: Some(state),
            gates: Vec::new(),
            rail_entity_id: info.entity_id.clone(),
            rail_response: None,
            idempotent_replay: false,
        };
        let sik = &key.sik;
        Ok(match state {
            State::Applied => {
                let mut replay = answer(
                    Outcome::Applied,
                    ReasonCode::IdempotentReplay,
                    format!(
                        "already done: this action was applied as {} (intent {sik}); nothing was sent again",
                        info.entity_id.as_deref().unwrap_or("?")
                    ),
                );
                replay.rail_response = info.response;
                replay.idempotent_replay = true;
                replay
            }
            State::Held => answer(
                Outcome::Held,
                ReasonCode::AwaitingApproval,
                format!(
                    "this action (intent {sik}) is waiting for a human's approval: {}",
                    info.reason
                ),
            ),
            State::Blocked => answer(
                Outcome::Refused,
                ReasonCode::PreviouslyBlocked,
                format!(
                    "this action (intent {sik}) was refused before: {}",
                    info.reason
                ),
            ),
            State::Quarantined => answer(
                Outcome::Quarantined,
                ReasonCode::Quarantined,
                format!(
                    "this action (intent {sik}) is quarantined until an operator settles it; do not retry"
                ),
            ),
            State::ConfirmedNotApplied => return self.reopen(key, action, live_tool, now),
            State::Authorized => return self.drive(key, Effect::StartAttempt, Vec::new()),
            State::FailedTerminal => answer(
                Outcome::Rejected,
                ReasonCode::RailRejected,
                format!(
                    "the rail refused this action (intent {sik}); Interlock is verifying that nothing moved, retry in a few seconds"
                ),
            ),
            State::Proposed | State::InFlight | State::Unknown | State::Reconciling => answer(
                Outcome::InProgress,
                ReasonCode::InProgress,
                format!(
                    "this action (intent {sik}) is in progress ({state}); retry later for its result, do not change it"
                ),
            ),
        })
    }

    /// A fresh proposal of an action proven not applied: judged again, then `REOPENED`.
    fn reopen(
        &self,
        key: &IntentKey,
        action: &ProposedAction,
        live_tool: Option<&LiveTool>,
        now: u64,
    ) -> Result<Answer, EngineError> {
        let referent = self.rail.resolve(action).map_err(|e| e.to_string());
        // The key fixed the subject and currency when the intent was first proposed.
        let (subject, currency): (String, String) = self
            .ledger
            .conn()
            .row(
                "SELECT subject_id, currency FROM intents WHERE merchant_id = ?1 AND sik = ?2",
                params![key.merchant_id.as_str(), key.sik.as_str()],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .map_err(|e| self.ledger.err(e))?;
        let currency = Currency::parse(&currency).map_err(|e| LedgerError::Corrupt {
            key: ledger::describe(key),
            problem: e.to_string(),
        })?;
        let unread = Usage::default();
        let advice = self.advice(&GateInput {
            action,
            mandate: &self.mandate,
            now_ms: now,
            referent: &referent,
            usage: &unread,
            live_tool,
        });
        let reopened = self.ledger.write(|tx| {
            // Someone may have reopened it since we looked: then it is theirs to answer for,
            // and judging it now would count it against itself.
            let Some(seen) = ledger::read_row(tx, key).map_err(|e| self.ledger.err(e))? else {
                return Err(ApplyError::NoSuchIntent(ledger::describe(key)));
            };
            if seen.core.state != State::ConfirmedNotApplied {
                return Ok(Err(None));
            }
            let usage = self.usage(tx, action, &subject, currency, now)?;
            let input = GateInput {
                action,
                mandate: &self.mandate,
                now_ms: now,
                referent: &referent,
                usage: &usage,
                live_tool,
            };
            let ladder = gates::ladder(&input, advice.clone());
            if ladder.verdict != Verdict::Allow {
                self.record_decision(tx, Some(key), action, &ladder, "REFUSED", now)?;
                return Ok(Err(Some(ladder)));
            }
            let change = Change {
                context: Some(json!({"gates": ladder.results})),
                ..Change::default()
            };
            match ledger::apply_locked(tx, key, &seen, &Event::Reopened, now, &change) {
                Ok(Some(_)) => {
                    self.record_decision(tx, Some(key), action, &ladder, "AUTHORIZED", now)?;
                    Ok(Ok(ladder))
                }
                Ok(None) => Err(ApplyError::Contended(ledger::describe(key))),
                Err(error) => Err(error),
            }
        });
        match reopened {
            Ok(Ok(ladder)) => self.drive(key, Effect::StartAttempt, ladder.results),
            Ok(Err(None)) => {
                let state = ledger::read_row(&self.ledger.conn(), key)
                    .map_err(|e| self.ledger.err(e))?
                    .map_or(State::Proposed, |row| row.core.state);
                self.answer_existing(key, state, action, live_tool, now)
            }
            Ok(Err(Some(ladder))) => {
                let mut answer = refusal(ladder, Some(key.sik.clone()));
                answer.state = Some(State::ConfirmedNotApplied);
                Ok(answer)
            }
            Err(ApplyError::Illegal(Illegal::AttemptLimitReached)) => Ok(Answer {
                outcome: Outcome::Refused,
                reason_code: ReasonCode::AttemptLimitReached,
                message: format!(
                    "this action (intent {}) has used all {} attempts; an operator must look at it",
                    key.sik,
                    interlock_machine::ATTEMPT_SEQ_MAX
                ),
                sik: Some(key.sik.clone()),
                state: Some(State::ConfirmedNotApplied),
                gates: Vec::new(),
                rail_entity_id: None,
                rail_response: None,
                idempotent_replay: false,
            }),
            Err(ApplyError::Illegal(_)) => {
                let state = ledger::read_row(&self.ledger.conn(), key)
                    .map_err(|e| self.ledger.err(e))?
                    .map_or(State::Proposed, |row| row.core.state);
                self.answer_existing(key, state, action, live_tool, now)
            }
            Err(error) => Err(error.into()),
        }
    }

    /// G5's advice, if a model gate is on, computed outside any transaction (the ledger's usage
    /// is not read for it: it is advisory, and may only lower the verdict).
    pub(crate) fn advice(&self, input: &GateInput<'_>) -> Option<GateResult> {
        self.model
            .as_deref()
            .map(|model| gates::model::check(model, input))
    }

    /// Performs `effect` and the effects that follow it, at most [`DRIVE_STEPS_MAX`] steps.
    pub(crate) fn drive(
        &self,
        key: &IntentKey,
        mut effect: Effect,
        gates: Vec<GateResult>,
    ) -> Result<Answer, EngineError> {
        for _ in 0..DRIVE_STEPS_MAX {
            effect = match effect {
                Effect::StartAttempt => {
                    // AUTHORIZED is committed, the attempt is not: a crash here leaves a
                    // permission no one has used, which only a fresh proposal takes up.
                    kill_point!("after_authorize");
                    let now = self.clock.now_ms();
                    let claim = Change {
                        lease: LeaseChange::Claim {
                            owner: self.config.instance_id.clone(),
                            expires_at: now + self.config.lease_ttl_ms,
                        },
                        ..Change::default()
                    };
                    match self.ledger.apply(key, &Event::AttemptStarted, now, &claim) {
                        Ok(applied) => applied.effect,
                        Err(ApplyError::Illegal(Illegal::AttemptLimitReached)) => {
                            return self.state_answer(key, gates);
                        }
                        // Someone else started it first: theirs is the attempt.
                        Err(ApplyError::Illegal(_) | ApplyError::Lease(_)) => {
                            return self.others_answer(key, gates);
                        }
                        Err(error) => return Err(error.into()),
                    }
                }
                Effect::CallRail { attempt_seq } => {
                    kill_point!("after_wal_before_call");
                    match self.call(key, attempt_seq)? {
                        Some(applied) => {
                            kill_point!("after_commit_before_ack");
                            applied.effect
                        }
                        None => return self.others_answer(key, gates),
                    }
                }
                Effect::None
                | Effect::AwaitHuman
                | Effect::ScheduleReconcile { .. }
                | Effect::RunReconcile { .. } => return self.state_answer(key, gates),
            };
        }
        self.state_answer(key, gates)
    }

    /// Sends attempt `attempt_seq` if the row and our lease still say we may, and commits the
    /// outcome. `None` when the re-check said no (nothing was sent).
    fn call(&self, key: &IntentKey, attempt_seq: u32) -> Result<Option<Applied>, EngineError> {
        let now = self.clock.now_ms();
        // ADR 0003 (A2): the step that sends re-reads the row and the lease, and sends only if
        // the lease outlives the longest call. A lease that lapsed while we were slow may have
        // been reclaimed; a late send would then race a reconcile and pay twice.
        let (row, call) = {
            let conn = self.ledger.conn();
            let row = ledger::read_row(&conn, key).map_err(|e| self.ledger.err(e))?;
            let call: Option<String> = conn
                .row(
                    "SELECT call_json FROM intents WHERE merchant_id = ?1 AND sik = ?2",
                    params![key.merchant_id.as_str(), key.sik.as_str()],
                    |row| row.get(0),
                )
                .optional()
                .map_err(|e| self.ledger.err(e))?;
            (row, call)
        };
        let ours = row.as_ref().is_some_and(|row| {
            row.core.state == State::InFlight
                && row.core.attempt_seq == attempt_seq
                && row.lease_owner.as_deref() == Some(self.config.instance_id.as_str())
                && row.lease_expires_at.is_some_and(|until| {
                    until >= now.saturating_add(self.config.call_timeout_ms + LEASE_MARGIN_MS / 2)
                })
        });
        if !ours {
            return Ok(None);
        }
        let call: RailCall = match call.as_deref().map(serde_json::from_str) {
            Some(Ok(call)) => call,
            _ => {
                return Err(EngineError::Ledger(LedgerError::Corrupt {
                    key: ledger::describe(key),
                    problem: "call_json does not hold a rail call".to_owned(),
                }));
            }
        };
        assert_eq!(call.sik, key.sik, "an intent's call carries its own stamp");
        let outcome = self.rail.execute(&call, self.config.call_timeout_ms);
        let took = self.clock.now_ms().saturating_sub(now);
        // The lease was sized on the rail keeping its timeout; one that did not may have let
        // another process take the intent over while the call was out. Believe nothing it says.
        let outcome = if took > self.config.call_timeout_ms {
            RailOutcome::Ambiguous {
                detail: format!(
                    "the rail answered after {took} ms, past its {} ms timeout",
                    self.config.call_timeout_ms
                ),
            }
        } else {
            outcome
        };
        // The call has left and the rail has done whatever it did; its answer dies with us.
        kill_point!("during_call");
        let (event, change) = classify(&key.sik, attempt_seq, outcome);
        kill_point!("after_call_before_commit");
        let now = self.clock.now_ms();
        match self.ledger.apply(key, &event, now, &change) {
            Ok(applied) => Ok(Some(applied)),
            // The lease was taken back while the call ran (the call outlived its timeout): the
            // reconciler owns the intent now and will find what the rail did.
            Err(ApplyError::Illegal(_) | ApplyError::Lease(_)) => Ok(None),
            Err(error) => Err(error.into()),
        }
    }

    /// The answer to a proposal whose work another proposal (or process) did: if the intent is
    /// applied, this is a replay of that result, not a second success.
    fn others_answer(
        &self,
        key: &IntentKey,
        gates: Vec<GateResult>,
    ) -> Result<Answer, EngineError> {
        let mut answer = self.state_answer(key, gates)?;
        if answer.outcome == Outcome::Applied {
            answer.reason_code = ReasonCode::IdempotentReplay;
            answer.idempotent_replay = true;
        }
        Ok(answer)
    }

    /// The answer an intent's current state gives.
    pub(crate) fn state_answer(
        &self,
        key: &IntentKey,
        gates: Vec<GateResult>,
    ) -> Result<Answer, EngineError> {
        let info = self.intent_info(key)?;
        let sik = &key.sik;
        let (outcome, code, message) = match info.state {
            State::Applied => (
                Outcome::Applied,
                ReasonCode::Applied,
                format!(
                    "applied as {} (intent {sik})",
                    info.entity_id.as_deref().unwrap_or("?")
                ),
            ),
            State::Unknown | State::Reconciling => (
                Outcome::Unknown,
                ReasonCode::OutcomeUnknown,
                format!(
                    "the rail's answer was ambiguous ({}); Interlock is reconciling intent {sik} against the rail and will not send it again unless the rail proves it absent; retry later for the result",
                    info.detail.as_deref().unwrap_or("no answer")
                ),
            ),
            State::FailedTerminal => (
                Outcome::Rejected,
                ReasonCode::RailRejected,
                format!(
                    "the rail refused this action: {} (intent {sik})",
                    info.detail.as_deref().unwrap_or("no detail")
                ),
            ),
            State::Held => (
                Outcome::Held,
                ReasonCode::AwaitingApproval,
                info.reason.clone(),
            ),
            State::Blocked => (
                Outcome::Refused,
                ReasonCode::PreviouslyBlocked,
                info.reason.clone(),
            ),
            State::Quarantined => (
                Outcome::Quarantined,
                ReasonCode::Quarantined,
                format!("intent {sik} is quarantined until an operator settles it; do not retry"),
            ),
            State::ConfirmedNotApplied
                if info.attempt_seq >= interlock_machine::ATTEMPT_SEQ_MAX =>
            {
                (
                    Outcome::Refused,
                    ReasonCode::AttemptLimitReached,
                    format!("intent {sik} has used all its attempts; an operator must look at it"),
                )
            }
            state => (
                Outcome::InProgress,
                ReasonCode::InProgress,
                format!("intent {sik} is in progress ({state}); retry later for its result"),
            ),
        };
        Ok(Answer {
            outcome,
            reason_code: code,
            message,
            sik: Some(sik.clone()),
            state: Some(info.state),
            gates,
            rail_entity_id: info.entity_id,
            rail_response: if info.state == State::Applied {
                info.response
            } else {
                None
            },
            idempotent_replay: false,
        })
    }

    fn subject_of(
        &self,
        action: &ProposedAction,
        referent: &Result<Referent, String>,
    ) -> Option<(String, Currency)> {
        match referent {
            Ok(referent) => Some((referent.subject_id().to_owned(), referent.currency())),
            // Unresolvable: a hold keys on the agent's text, in the grant's only currency; the
            // human who approves it vouches for both.
            Err(_) => {
                let grant = self.mandate.grant(&action.tool)?;
                let [currency] = grant.value.currencies.as_slice() else {
                    return None;
                };
                let subject = match action.kind {
                    ActionKind::Refund => action.payment_hint.clone()?,
                    ActionKind::Settlement => crate::rail::BALANCE_SUBJECT.to_owned(),
                };
                Some((subject, *currency))
            }
        }
    }

    fn sik_of(
        &self,
        action: &ProposedAction,
        subject: &str,
        currency: Currency,
        now: u64,
    ) -> Result<Sik, EngineError> {
        let rule = self.mandate.idempotency.get(&action.tool);
        let window = match rule {
            Some(rule) => rule.window_bucket(now)?,
            None => None,
        };
        let extra = rule.and_then(|rule| {
            let fields: Map<String, Value> = rule
                .key_fields
                .iter()
                .filter(|field| !matches!(field.as_str(), "payment_id" | "amount"))
                .map(|field| {
                    let value = action
                        .passthrough
                        .get(field)
                        .cloned()
                        .unwrap_or(Value::Null);
                    (field.clone(), value)
                })
                .collect();
            (!fields.is_empty()).then_some(Value::Object(fields))
        });
        let input = SikInput {
            merchant_id: action.merchant_id.clone(),
            tool: action.tool.clone(),
            subject: subject.to_owned(),
            amount_minor: action.amount,
            currency,
            extra,
            window,
            distinct: action.distinct_reason(),
        };
        Ok(compute_sik(&input)?)
    }

    fn new_intent(
        &self,
        action: &ProposedAction,
        key: &IntentKey,
        subject: &str,
        currency: Currency,
        call: &RailCall,
    ) -> Result<NewIntent, ApplyError> {
        let grant = self.mandate.grant(&action.tool);
        let reversibility = match grant.map(|g| g.reversibility) {
            Some(Reversibility::Reversible) => "reversible",
            _ => "irreversible",
        };
        Ok(NewIntent {
            key: key.clone(),
            tool: action.tool.to_string(),
            kind: action.kind.as_str(),
            subject_id: subject.to_owned(),
            amount_minor: action.amount.get(),
            currency: currency.to_string(),
            reversibility,
            distinct_reason: action.distinct.clone(),
            call: serde_json::to_value(call).expect("a rail call serializes"),
            mandate_hash: self.mandate_hash.clone(),
        })
    }

    /// What G2 and G3 count, read inside the write transaction.
    fn usage(
        &self,
        tx: &Transaction<'_>,
        action: &ProposedAction,
        subject: &str,
        currency: Currency,
        now: u64,
    ) -> Result<Usage, ApplyError> {
        crate::usage::read(tx, &self.mandate, action, subject, currency, now, None)
            .map_err(|e| ApplyError::Ledger(self.ledger.err(e)))
    }

    fn record_decision(
        &self,
        tx: &Transaction<'_>,
        key: Option<&IntentKey>,
        action: &ProposedAction,
        ladder: &Ladder,
        outcome: &str,
        now: u64,
    ) -> Result<(), ApplyError> {
        let head: u64 = tx
            .row("SELECT coalesce(max(seq), 0) FROM audit_log", [], |row| {
                row.get(0)
            })
            .map_err(|e| ApplyError::Ledger(self.ledger.err(e)))?;
        let verdict = serde_json::to_value(ladder.verdict).expect("verdicts serialize");
        tx.exec(
            "INSERT INTO decisions (instance_id, merchant_id, sik, agent_id, tool, mandate_hash,
                verdict, outcome, reason_code, gates_json, decided_at, audit_seq)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            params![
                self.config.instance_id,
                action.merchant_id.as_str(),
                key.map(|k| k.sik.as_str()),
                action.agent_id.as_str(),
                action.tool.as_str(),
                self.mandate_hash,
                verdict.as_str(),
                outcome,
                ladder.deciding().reason_code.as_str(),
                serde_json::to_string(&ladder.results).expect("gate results serialize"),
                now,
                head,
            ],
        )
        .map_err(|e| ApplyError::Ledger(self.ledger.err(e)))?;
        Ok(())
    }

    fn intent_info(&self, key: &IntentKey) -> Result<IntentInfo, EngineError> {
        let conn = self.ledger.conn();
        let info = conn
            .row(
                "SELECT i.state, i.rail_entity_id, i.reason, i.attempt_seq,
                        (SELECT detail FROM intent_attempts a
                          WHERE a.merchant_id = i.merchant_id AND a.sik = i.sik
                          ORDER BY attempt_seq DESC LIMIT 1)
                 FROM intents i WHERE i.merchant_id = ?1 AND i.sik = ?2",
                params![key.merchant_id.as_str(), key.sik.as_str()],
                |row| {
                    Ok((
                        row.get::<_, String>(0)?,
                        row.get::<_, Option<String>>(1)?,
                        row.get::<_, String>(2)?,
                        row.get::<_, u32>(3)?,
                        row.get::<_, Option<String>>(4)?,
                    ))
                },
            )
            .optional()
            .map_err(|e| self.ledger.err(e))?;
        let Some((state, entity_id, reason, attempt_seq, detail)) = info else {
            return Err(ApplyError::NoSuchIntent(ledger::describe(key)).into());
        };
        let state = State::parse(&state).ok_or_else(|| LedgerError::Corrupt {
            key: ledger::describe(key),
            problem: format!("unknown state {state:?}"),
        })?;
        let response = (state == State::Applied).then(|| detail.clone()).flatten();
        Ok(IntentInfo {
            state,
            entity_id,
            reason,
            attempt_seq,
            detail,
            response,
        })
    }
}

struct IntentInfo {
    state: State,
    entity_id: Option<String>,
    reason: String,
    attempt_seq: u32,
    detail: Option<String>,
    response: Option<String>,
}

enum Decided {
    Existing(State),
    Refused(Ladder),
    Inserted(Applied, Ladder),
}

/// Turns a rail outcome into the event it proves. An answer that does not carry our stamp is
/// not evidence that our call applied (a replayed response): it is ambiguous.
pub(crate) fn classify(sik: &Sik, attempt_seq: u32, outcome: RailOutcome) -> (Event, Change) {
    match outcome {
        RailOutcome::Applied {
            entity,
            fee,
            tax,
            response,
        } if entity.stamp.as_ref() == Some(sik)
            && !entity.id.is_empty()
            && entity.id.len() <= interlock_machine::ENTITY_ID_LENGTH_MAX =>
        {
            let change = Change {
                fee_minor: fee.get(),
                tax_minor: tax.get(),
                detail: Some(response),
                ..Change::default()
            };
            (
                Event::RailApplied {
                    attempt_seq,
                    entity,
                },
                change,
            )
        }
        RailOutcome::Applied { entity, .. } => {
            let detail = format!(
                "the rail answered with {} which does not carry this intent's stamp (a replayed response?)",
                entity.id
            );
            let change = Change {
                detail: Some(detail),
                ..Change::default()
            };
            (Event::RailAmbiguous { attempt_seq }, change)
        }
        RailOutcome::Rejected { detail } => (
            Event::RailRejected { attempt_seq },
            Change {
                detail: Some(detail),
                ..Change::default()
            },
        ),
        RailOutcome::Ambiguous { detail } => (
            Event::RailAmbiguous { attempt_seq },
            Change {
                detail: Some(detail),
                ..Change::default()
            },
        ),
    }
}

fn unresolved_call(
    action: &ProposedAction,
    subject: &str,
    currency: Currency,
    sik: &Sik,
) -> RailCall {
    let referent = match action.kind {
        ActionKind::Refund => Referent::Payment(crate::rail::PaymentReferent {
            id: subject.to_owned(),
            amount: action.amount,
            amount_refunded: Minor::ZERO,
            currency,
            captured: true,
            order: None,
        }),
        ActionKind::Settlement => Referent::Balance {
            balance: action.amount,
            currency,
        },
    };
    RailCall::stamped(action, &referent, sik)
}

fn ladder_of(mut early: Ladder, result: GateResult) -> Ladder {
    early.results.push(result);
    early.verdict = Verdict::meet_all(early.results.iter().map(|r| r.verdict));
    early
}

pub(crate) fn refusal(ladder: Ladder, sik: Option<Sik>) -> Answer {
    let deciding = ladder.deciding().clone();
    Answer {
        outcome: Outcome::Refused,
        reason_code: deciding.reason_code,
        message: deciding.message,
        sik,
        state: None,
        gates: ladder.results,
        rail_entity_id: None,
        rail_response: None,
        idempotent_replay: false,
    }
}

fn held(key: &IntentKey, ladder: &Ladder) -> Answer {
    let deciding = ladder.deciding();
    Answer {
        outcome: Outcome::Held,
        reason_code: deciding.reason_code,
        message: format!(
            "{} (intent {} awaits a human's approval)",
            deciding.message, key.sik
        ),
        sik: Some(key.sik.clone()),
        state: Some(State::Held),
        gates: ladder.results.clone(),
        rail_entity_id: None,
        rail_response: None,
        idempotent_replay: false,
    }
}
