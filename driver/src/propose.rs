//! The driver of one proposal: from a parsed money call (or a human's approval of a held one) to
//! an answer, as a sans-IO state machine. The runner feeds it what the world said through
//! `handle_*(now, …)` and carries out the [`Command`]s it polls, in order:
//!
//! 1. G1 and G6, which need nothing from the rail: a call outside the mandate never reaches it.
//! 2. [`Command::ReadReferent`]: the referent, read from the rail (never the agent's text).
//! 3. The SIK, from the resolved action.
//! 4. [`Command::Decide`]: one transaction finds the intent (I1 is the primary key) or counts the
//!    usage, runs [`Proposal::judge`] (the ladder), inserts the intent with its gate event and,
//!    when the gates pass, applies `ATTEMPT_STARTED` with this process's lease: the write-ahead
//!    record, in the same commit as the permission (ADR 0004).
//! 5. [`Command::Commit`] of `ATTEMPT_STARTED` only where the decision left the intent
//!    `AUTHORIZED` without its attempt (a ledger written before step 4 merged them).
//! 6. [`Command::ReadIntent`]: the row and the lease re-checked just before the send (A2).
//! 7. [`Command::CallRail`]: the stamped call; its outcome is classified (one without our stamp
//!    is ambiguous) and committed ([`Command::Commit`]) before the answer.
//! 8. [`Command::Answer`], from the one State → Answer table.

use crate::answer::{self, Answer, Said};
use crate::config::DriverConfig;
use crate::gates::{self, Gate, GateInput, GateResult, Ladder, LiveTool, Usage};
use crate::plan::{
    Applied, AttemptClaim, Change, Commit, Decide, Decided, Expect, IntentKey, IntentView,
    Judgement, NewIntent, Refusal, UsageQuery,
};
use crate::rail::{
    BALANCE_SUBJECT, PaymentReferent, RailCall, RailOutcome, Referent, ScheduledReferent,
};
use interlock_machine::{ATTEMPT_SEQ_MAX, Effect, Event, Illegal, State, Verdict};
use interlock_spec::action::{ActionKind, ProposedAction};
use interlock_spec::ids::Sik;
use interlock_spec::mandate::{Mandate, Reversibility};
use interlock_spec::money::{Currency, Minor};
use interlock_spec::reason::ReasonCode;
use interlock_spec::sik::{SikError, SikInput, compute_sik};
use serde_json::{Map, Value, json};
use std::collections::VecDeque;

/// Commands one proposal may issue before it must answer: read, decide, reopen, start, re-check,
/// call, record, read the answer, with room for a lost race that re-reads. Bounds the runner's
/// loop; a proposal that reaches it answers with the intent's state as it stands.
pub const PROPOSAL_COMMANDS_MAX: u32 = 16;
/// Commands queued at once (a flaw may queue an answer before its commit).
const QUEUED_MAX: usize = 2;

/// What the driver of a proposal needs to know beside what it is handed: the mandate in force
/// and how the driver runs. Borrowed, never stored, so a proposal stays plain data.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// The mandate in force.
    pub mandate: &'a Mandate,
    /// Its hash, recorded with every intent and bound to every approval.
    pub mandate_hash: &'a str,
    /// Lease owner and durations.
    pub config: &'a DriverConfig,
    /// The wall clock's reading, passed in: a mandate's validity is a statement about wall
    /// time (ADR 0007). Every other time the driver uses is the `now` of each call.
    pub wall_ms: u64,
}

/// What the runner must do next for a proposal.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Command {
    /// Read the action's referent from the rail; hand it to [`Proposal::handle_referent`].
    ReadReferent(ProposedAction),
    /// Run a deciding transaction with [`Proposal::judge`]; hand the result to
    /// [`Proposal::handle_decided`]. Boxed: it carries the new intent and the attempt's claim,
    /// several times any other command.
    Decide(Box<Decide>),
    /// Commit one transition; hand the result to [`Proposal::handle_committed`].
    Commit(Commit),
    /// Read the intent; hand it to [`Proposal::handle_intent`].
    ReadIntent(IntentKey),
    /// Send the stamped call (its `IN_FLIGHT` row is durable and the lease re-checked); hand
    /// the outcome to [`Proposal::handle_rail_outcome`].
    CallRail {
        /// The call, exactly as every attempt of the intent sends it.
        call: RailCall,
        /// The attempt it carries.
        attempt_seq: u32,
        /// Abandon it (ambiguous) after this long.
        timeout_ms: u64,
        /// The last clock reading at which it may still leave: the runner's rail checks it
        /// again just before the request is written ([`crate::rail::CallBudget`]).
        send_by_ms: u64,
    },
    /// Give this answer. The proposal is over.
    Answer(Answer),
    /// The proposal cannot be carried on (a key that cannot be computed, an approval that
    /// does not bind, an intent that vanished). The proposal is over; nothing moved.
    Fail(Failure),
}

/// Why a proposal failed rather than answered.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Failure {
    /// The idempotency key could not be computed.
    Sik(String),
    /// An approval that does not bind to the held intent; it stays held.
    NotApprovable(String),
    /// The ledger refused in a way the driver does not expect (no such intent, not held).
    Refused(Refusal),
}

/// What a proposal is for: the agent's call, its repetition, or a human's approval.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Purpose {
    /// A first proposal under its key.
    New,
    /// A fresh proposal of an intent proven not applied (`REOPENED`).
    Reopen,
    /// A human releases a hold (`HOLD_RELEASED`).
    Approve {
        /// Who approved.
        by: String,
        /// Why.
        why: String,
    },
}

/// Where a proposal is: which `handle_*` it waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Phase {
    Resolving,
    Deciding,
    Starting,
    Rechecking {
        attempt_seq: u32,
    },
    Calling {
        attempt_seq: u32,
        sent_at: u64,
    },
    Recording,
    /// Reading the intent to answer from it (`None`: to go on from it as a repetition).
    Reading {
        said: Option<Said>,
    },
    Done,
}

/// One proposal in flight through the driver. Plain data: the model checker keeps it in its
/// state, the proxy in a task; a crash loses it, and the ledger holds all that must survive.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Proposal {
    action: ProposedAction,
    live_tool: Option<LiveTool>,
    advice: Option<GateResult>,
    purpose: Purpose,
    phase: Phase,
    referent: Option<Result<Referent, String>>,
    key: Option<IntentKey>,
    subject: Option<(String, Currency)>,
    gates: Vec<GateResult>,
    said: Said,
    /// The call of the attempt out on the rail: its terms judge the rail's entity.
    sent: Option<RailCall>,
    queue: VecDeque<Command>,
    commands: u32,
    #[cfg(feature = "flaws")]
    flaw: Option<crate::flaw::Flaw>,
}

impl Proposal {
    /// A proposal of `action` by the agent. G1 and G6 judge it at once; the referent is read
    /// only if they pass.
    pub fn new(
        context: Context<'_>,
        now: u64,
        action: ProposedAction,
        live_tool: Option<LiveTool>,
    ) -> Proposal {
        let mut proposal = Proposal::blank(action, live_tool, Purpose::New);
        let unread: Result<Referent, String> = Err("not read yet".to_owned());
        let early =
            gates::before_resolve(&proposal.input(context, now, &unread, &Usage::default()));
        if early.verdict == Verdict::Block {
            proposal.finish(Command::Answer(answer::refused(early, None, None)));
        } else {
            proposal.gates = early.results;
            proposal.push(Command::ReadReferent(proposal.action.clone()));
        }
        proposal.invariants();
        proposal
    }

    /// A human's approval of the held intent `held`, judged again against the rail and the
    /// ledger as they are now. The approval binds to the intent's SIK (its key), its amount
    /// (the held call's, which the approver cannot change) and the mandate it was held under.
    pub fn approve(
        context: Context<'_>,
        held: &IntentView,
        by: &str,
        why: &str,
        live_tool: Option<LiveTool>,
    ) -> Proposal {
        let action = action_of(context.mandate, held);
        let purpose = Purpose::Approve {
            by: by.to_owned(),
            why: why.to_owned(),
        };
        let mut proposal = Proposal::blank(action, live_tool, purpose);
        proposal.key = Some(held.key.clone());
        proposal.subject = Some((held.call.subject_id.clone(), held.call.currency));
        if held.mandate_hash != context.mandate_hash {
            let message = format!(
                "intent {} was held under the mandate with sha256 {}, and this approval is given under mandate {} (sha256 {}); approve it with the mandate it was held under, or reject it and let the agent propose again",
                held.key.sik, held.mandate_hash, context.mandate.mandate_id, context.mandate_hash
            );
            proposal.finish(Command::Fail(Failure::NotApprovable(message)));
        } else {
            proposal.push(Command::ReadReferent(proposal.action.clone()));
        }
        proposal.invariants();
        proposal
    }

    fn blank(action: ProposedAction, live_tool: Option<LiveTool>, purpose: Purpose) -> Proposal {
        Proposal {
            action,
            live_tool,
            advice: None,
            purpose,
            phase: Phase::Resolving,
            referent: None,
            key: None,
            subject: None,
            gates: Vec::new(),
            said: Said::Fresh,
            sent: None,
            queue: VecDeque::new(),
            commands: 0,
            #[cfg(feature = "flaws")]
            flaw: None,
        }
    }

    /// Plants `flaw` (the model checker's mutants).
    #[cfg(feature = "flaws")]
    pub fn with_flaw(mut self, flaw: Option<crate::flaw::Flaw>) -> Proposal {
        self.flaw = flaw;
        self
    }

    #[cfg(feature = "flaws")]
    fn planted(&self, flaw: crate::flaw::Flaw) -> bool {
        self.flaw == Some(flaw)
    }

    #[cfg(not(feature = "flaws"))]
    fn planted(&self, _flaw: crate::flaw::Flaw) -> bool {
        false
    }

    /// The next command to carry out, if any. `None` once the proposal has answered or failed.
    pub fn poll_command(&mut self) -> Option<Command> {
        self.queue.pop_front()
    }

    /// Commands queued and not yet polled.
    pub fn pending_commands(&self) -> usize {
        self.queue.len()
    }

    /// Whether the proposal has answered or failed.
    pub fn is_done(&self) -> bool {
        self.phase == Phase::Done && self.queue.is_empty()
    }

    /// G5's advice, computed by the runner outside any transaction (a model may be slow, and
    /// the ledger's write lock must not wait on it). Advisory: it can only lower the verdict.
    pub fn set_advice(&mut self, advice: GateResult) {
        assert_eq!(advice.gate, Gate::G5, "only G5 is advice");
        assert!(
            self.phase == Phase::Deciding,
            "advice comes with the referent"
        );
        self.advice = Some(advice);
    }

    /// The gate input G5 is consulted with, once the referent is read.
    pub fn advice_input<'a>(
        &'a self,
        context: Context<'a>,
        now: u64,
        unread: &'a Usage,
    ) -> Option<GateInput<'a>> {
        let referent = self.referent.as_ref()?;
        Some(self.input(context, now, referent, unread))
    }

    fn input<'a>(
        &'a self,
        context: Context<'a>,
        now: u64,
        referent: &'a Result<Referent, String>,
        usage: &'a Usage,
    ) -> GateInput<'a> {
        GateInput {
            action: &self.action,
            mandate: context.mandate,
            now_ms: now,
            wall_ms: context.wall_ms,
            referent,
            usage,
            live_tool: self.live_tool.as_ref(),
        }
    }

    /// The referent the rail reported (or why it could not be read).
    pub fn handle_referent(
        &mut self,
        context: Context<'_>,
        now: u64,
        referent: Result<Referent, String>,
    ) {
        assert_eq!(
            self.phase,
            Phase::Resolving,
            "a referent only while resolving"
        );
        self.phase = Phase::Deciding;
        if let Purpose::Approve { .. } = self.purpose {
            // An approval compares the rail's answer with the held subject itself (and refuses).
            self.decide_approval(context, now, referent);
        } else {
            let referent = referent.and_then(|found| of_the_subject_asked(&self.action, found));
            self.decide_new(context, now, referent);
        }
        self.invariants();
    }

    fn decide_new(&mut self, context: Context<'_>, now: u64, referent: Result<Referent, String>) {
        // An update that keeps its amount moves the amount the rail says it has: taken before
        // anything is keyed or judged, so the ceiling and the windows see it. Without a
        // referent there is no amount to judge.
        if self.action.amount_from_referent {
            let Ok(Referent::Scheduled(scheduled)) = &referent else {
                let message = format!(
                    "{} gives no amount and the rail could not confirm the one it keeps ({}); refused",
                    self.action.tool,
                    referent
                        .as_ref()
                        .err()
                        .map_or("not a scheduled transfer", String::as_str)
                );
                let result =
                    GateResult::block(Gate::G2, ReasonCode::ReferentUnresolvableBlocked, message);
                let ladder = ladder_with(std::mem::take(&mut self.gates), result);
                return self.finish(Command::Answer(answer::refused(ladder, None, None)));
            };
            self.action.amount = scheduled.amount;
            self.action.amount_from_referent = false;
        }
        let Some((subject, currency)) = subject_of(context.mandate, &self.action, &referent) else {
            let message = format!(
                "the rail could not confirm what this call is about ({}), and the grant of {} names more than one currency; refused",
                referent.as_ref().err().map_or("", String::as_str),
                self.action.tool
            );
            let result =
                GateResult::block(Gate::G2, ReasonCode::ReferentUnresolvableBlocked, message);
            let ladder = ladder_with(std::mem::take(&mut self.gates), result);
            return self.finish(Command::Answer(answer::refused(ladder, None, None)));
        };
        let sik = match sik_of(context.mandate, &self.action, &subject, currency, now) {
            Ok(sik) => sik,
            Err(problem) => return self.finish(Command::Fail(Failure::Sik(problem))),
        };
        let key = IntentKey {
            merchant_id: self.action.merchant_id.clone(),
            sik: sik.clone(),
        };
        let call = match &referent {
            Ok(referent) => RailCall::stamped(&self.action, referent, &sik),
            Err(_) => unresolved_call(&self.action, &subject, currency, &sik),
        };
        let intent = NewIntent {
            key: key.clone(),
            kind: self.action.kind,
            subject_id: subject.clone(),
            amount: self.action.amount,
            currency,
            reversible: is_reversible(context.mandate, &self.action),
            distinct_reason: self.action.distinct.clone(),
            call,
            mandate_hash: context.mandate_hash.to_owned(),
        };
        self.referent = Some(referent);
        self.key = Some(key.clone());
        self.subject = Some((subject, currency));
        self.push_decide(context, now, Expect::Absent(Box::new(intent)), false);
    }

    fn decide_approval(
        &mut self,
        context: Context<'_>,
        now: u64,
        referent: Result<Referent, String>,
    ) {
        let (subject, _) = self.subject.clone().expect("an approval knows its subject");
        // A hold made while the rail could not be read is keyed on the agent's text. If the rail
        // now names the subject differently, this intent is not the action the rail would carry
        // out: approving it could pay a twin that the limits never saw together.
        if let Ok(found) = &referent
            && found.subject_id() != subject
        {
            let message = format!(
                "not approved, still held: the rail now answers {} for the held {subject}; reject this hold and propose the action again",
                found.subject_id()
            );
            let result =
                GateResult::block(Gate::G2, ReasonCode::ReferentUnresolvableBlocked, message);
            let ladder = ladder_with(Vec::new(), result);
            let sik = self.key.as_ref().map(|key| key.sik.clone());
            return self.finish(Command::Answer(answer::refused(
                ladder,
                sik,
                Some(State::Held),
            )));
        }
        self.referent = Some(referent);
        self.push_decide(context, now, Expect::InState(State::Held), true);
    }

    fn push_decide(&mut self, context: Context<'_>, now: u64, expect: Expect, exclude_self: bool) {
        let key = self.key.clone().expect("a decision has a key");
        let (subject_id, currency) = self.subject.clone().expect("a decision has a subject");
        self.phase = Phase::Deciding;
        // A planted `CallBeforeWal` leaves the attempt to its own commit, so that its call can
        // leave before that commit, as the flaw would have it.
        let start_attempt =
            (!self.planted(crate::flaw::Flaw::CallBeforeWal)).then(|| claim(context));
        self.push(Command::Decide(Box::new(Decide {
            key,
            expect,
            usage: UsageQuery {
                action: self.action.clone(),
                subject_id,
                currency,
                now_ms: now,
                exclude_self,
            },
            instance_id: context.config.instance_id.clone(),
            mandate_hash: context.mandate_hash.to_owned(),
            start_attempt,
        })));
    }

    /// The judgement inside the deciding transaction, over the usage it read. Pure.
    pub fn judge(&self, context: Context<'_>, now: u64, usage: &Usage) -> Judgement {
        assert_eq!(self.phase, Phase::Deciding, "judged only while deciding");
        let referent = self.referent.as_ref().expect("judged after the referent");
        let ladder = gates::ladder(
            &self.input(context, now, referent, usage),
            self.advice.clone(),
        );
        let gates_context = Some(json!({"gates": ladder.results}));
        match &self.purpose {
            Purpose::New => judge_new(ladder),
            Purpose::Reopen if ladder.verdict != Verdict::Allow => Judgement::Refuse {
                ladder,
                record: true,
            },
            Purpose::Reopen => Judgement::Apply {
                event: Event::Reopened,
                change: Change {
                    context: gates_context,
                    ..Change::default()
                },
                record: Some("AUTHORIZED"),
                ladder,
            },
            Purpose::Approve { .. } if ladder.verdict == Verdict::Block => Judgement::Refuse {
                ladder,
                record: false,
            },
            Purpose::Approve { by, why } => {
                let change = self.approval_change(context, by, why, &ladder);
                Judgement::Apply {
                    event: Event::HoldReleased,
                    change,
                    record: None,
                    ladder,
                }
            }
        }
    }

    /// What the approval binds to, in the hash-chained record.
    fn approval_change(
        &self,
        context: Context<'_>,
        by: &str,
        why: &str,
        ladder: &Ladder,
    ) -> Change {
        let (_, currency) = self
            .subject
            .as_ref()
            .expect("an approval knows its currency");
        Change {
            reason: Some(("APPROVED".into(), format!("approved by {by}: {why}"))),
            context: Some(json!({
                "by": by,
                "why": why,
                "sik": self.key.as_ref().map(|key| key.sik.clone()),
                "amount_minor": self.action.amount,
                "currency": currency,
                "mandate_sha256": context.mandate_hash,
                "gates": ladder.results,
            })),
            ..Change::default()
        }
    }

    /// What the deciding transaction found and did.
    pub fn handle_decided(
        &mut self,
        context: Context<'_>,
        now: u64,
        decided: Result<Decided, Refusal>,
    ) {
        assert_eq!(
            self.phase,
            Phase::Deciding,
            "a decision only while deciding"
        );
        match decided {
            Ok(Decided::Refused(ladder)) => self.answer_refusal(ladder),
            Ok(Decided::Applied(applied, ladder)) => {
                self.gates = ladder.results.clone();
                self.after_decision(context, now, &applied, &ladder);
            }
            Ok(Decided::Found(view)) => match self.purpose {
                Purpose::Approve { .. } => {
                    let illegal = Illegal::NoEdge {
                        state: view.core.state,
                        event: interlock_machine::EventKind::HoldReleased,
                    };
                    self.finish(Command::Fail(Failure::Refused(Refusal::Illegal(illegal))));
                }
                _ => self.go_on_from(context, now, &view),
            },
            Err(Refusal::Illegal(_) | Refusal::Contended | Refusal::Lease(_))
                if self.purpose == Purpose::Reopen =>
            {
                self.read(Some(Said::Replay));
            }
            Err(refusal) => self.finish(Command::Fail(Failure::Refused(refusal))),
        }
        self.invariants();
    }

    fn answer_refusal(&mut self, ladder: Ladder) {
        let sik = self.key.as_ref().map(|key| key.sik.clone());
        let answer = match self.purpose {
            Purpose::New => answer::refused(ladder, sik, None),
            Purpose::Reopen => answer::refused(ladder, sik, Some(State::ConfirmedNotApplied)),
            Purpose::Approve { .. } => {
                let mut answer = answer::refused(ladder, sik, Some(State::Held));
                answer.message = format!("not approved, still held: {}", answer.message);
                answer
            }
        };
        self.finish(Command::Answer(answer));
    }

    fn after_decision(
        &mut self,
        context: Context<'_>,
        now: u64,
        applied: &Applied,
        ladder: &Ladder,
    ) {
        match applied.effect {
            // The attempt was started in the deciding transaction: re-check, then send.
            Effect::CallRail { attempt_seq } => self.recheck(attempt_seq),
            // The ledger left it `AUTHORIZED` (it refused the attempt in the same transaction):
            // the attempt is claimed on its own, and a refusal there is handled as ever.
            Effect::StartAttempt => self.start_attempt(context, now, applied.to.attempt_seq + 1),
            Effect::AwaitHuman => {
                let key = self.key.as_ref().expect("a held intent has a key");
                self.finish(Command::Answer(answer::held(&key.sik, ladder)));
            }
            Effect::None | Effect::ScheduleReconcile { .. } | Effect::RunReconcile { .. } => {
                self.read(Some(Said::Fresh))
            }
        }
    }

    /// A repetition of an action the ledger already holds: answered by the intent's state, or
    /// carried on where that state lets a fresh proposal carry it (reopen after proven
    /// absence, an authorisation no one has used).
    fn go_on_from(&mut self, context: Context<'_>, now: u64, view: &IntentView) {
        self.said = Said::Replay;
        let attempts_left = view.core.attempt_seq < ATTEMPT_SEQ_MAX;
        match view.core.state {
            State::ConfirmedNotApplied if attempts_left => {
                self.purpose = Purpose::Reopen;
                self.said = Said::Fresh;
                self.push_decide(
                    context,
                    now,
                    Expect::InState(State::ConfirmedNotApplied),
                    false,
                );
            }
            State::Authorized => {
                self.said = Said::Fresh;
                self.start_attempt(context, now, view.core.attempt_seq + 1);
            }
            State::Unknown if self.planted(crate::flaw::Flaw::RetryUnknown) => {
                self.said = Said::Fresh;
                self.commit(view.key.clone(), Event::RetryAuthorized, Change::default());
                self.phase = Phase::Starting;
            }
            State::FailedTerminal if self.planted(crate::flaw::Flaw::ReopenRejected) => {
                self.said = Said::Fresh;
                self.commit(view.key.clone(), Event::Reopened, Change::default());
                self.phase = Phase::Starting;
            }
            _ => {
                let answer = answer::of_intent(view, Said::Replay, Vec::new());
                self.finish(Command::Answer(answer));
            }
        }
    }

    /// `ATTEMPT_STARTED` with this process's lease: the write-ahead record of the call.
    fn start_attempt(&mut self, context: Context<'_>, now: u64, next_attempt: u32) {
        let key = self.key.clone().expect("an attempt has a key");
        self.phase = Phase::Starting;
        if self.planted(crate::flaw::Flaw::CallBeforeWal) {
            self.send_unrecorded(context, now, next_attempt);
        }
        self.commit(key, Event::AttemptStarted, claim(context).at(now));
    }

    /// The flaw `CallBeforeWal`: the call leaves before its attempt is recorded.
    fn send_unrecorded(&mut self, context: Context<'_>, now: u64, attempt_seq: u32) {
        let Some(Ok(referent)) = &self.referent else {
            return;
        };
        let key = self.key.as_ref().expect("an attempt has a key");
        let call = RailCall::stamped(&self.action, referent, &key.sik);
        self.sent = Some(call.clone());
        self.push(Command::CallRail {
            call,
            attempt_seq,
            timeout_ms: context.config.call_timeout_ms,
            // A planted flaw's call: it checks no lease, so the runner is not asked to.
            send_by_ms: u64::MAX,
        });
        self.phase = Phase::Calling {
            attempt_seq,
            sent_at: now,
        };
    }

    /// The ledger's answer to a commit.
    pub fn handle_committed(
        &mut self,
        context: Context<'_>,
        now: u64,
        committed: Result<Applied, Refusal>,
    ) {
        match (self.phase, committed) {
            (Phase::Starting, Ok(applied)) => match applied.effect {
                Effect::CallRail { attempt_seq } => self.recheck(attempt_seq),
                Effect::StartAttempt => {
                    self.start_attempt(context, now, applied.to.attempt_seq + 1);
                }
                _ => self.read(Some(Said::Fresh)),
            },
            (Phase::Calling { sent_at, .. }, Ok(applied)) => {
                // Only `CallBeforeWal` commits while its call is out: the attempt it recorded
                // is the one already on the wire.
                let Effect::CallRail { attempt_seq } = applied.effect else {
                    return self.read(Some(Said::Replay));
                };
                self.phase = Phase::Calling {
                    attempt_seq,
                    sent_at,
                };
            }
            (Phase::Starting, Err(Refusal::Illegal(Illegal::AttemptLimitReached))) => {
                self.read(Some(Said::Fresh));
            }
            // Someone else started it first, or took it back: theirs is the attempt.
            (Phase::Starting | Phase::Calling { .. }, Err(_)) => self.read(Some(Said::Replay)),
            (Phase::Recording, Ok(_)) => self.read(Some(Said::Fresh)),
            // The lease was taken back while the call ran (the call outlived its timeout): the
            // reconciler owns the intent now and will find what the rail did.
            (Phase::Recording, Err(_)) => self.read(Some(Said::Replay)),
            (phase, _) => panic!("a commit's result in phase {phase:?}"),
        }
        self.invariants();
    }

    fn recheck(&mut self, attempt_seq: u32) {
        let key = self.key.clone().expect("an attempt has a key");
        self.phase = Phase::Rechecking { attempt_seq };
        self.push(Command::ReadIntent(key));
    }

    /// The intent as the ledger holds it now (`None`: there is no such intent).
    pub fn handle_intent(&mut self, context: Context<'_>, now: u64, view: Option<IntentView>) {
        let Some(view) = view else {
            return self.finish(Command::Fail(Failure::Refused(Refusal::NoSuchIntent)));
        };
        assert_eq!(Some(&view.key), self.key.as_ref(), "the intent asked for");
        match self.phase {
            Phase::Rechecking { attempt_seq } => {
                self.send_if_ours(context, now, &view, attempt_seq)
            }
            Phase::Reading { said: Some(said) } => {
                let answer = answer::of_intent(&view, said, std::mem::take(&mut self.gates));
                self.finish(Command::Answer(answer));
            }
            Phase::Reading { said: None } => self.go_on_from(context, now, &view),
            phase => panic!("an intent read in phase {phase:?}"),
        }
        self.invariants();
    }

    /// ADR 0003 (A2): the step that sends re-reads the row and the lease, and sends only if the
    /// lease outlives the longest call. A lease that lapsed while we were slow may have been
    /// reclaimed; a late send would then race a reconcile and pay twice.
    fn send_if_ours(
        &mut self,
        context: Context<'_>,
        now: u64,
        view: &IntentView,
        attempt_seq: u32,
    ) {
        let config = context.config;
        let ours = view.core.state == State::InFlight
            && view.core.attempt_seq == attempt_seq
            && view.lease_owner.as_deref() == Some(config.instance_id.as_str())
            && view
                .lease_expires_at
                .is_some_and(|until| config.lease_covers_call(now, until));
        // A planted `SendWithoutRecheck` gets here without a lease that covers the call, and
        // sends regardless: the flaw is the missing check, so the runner is not asked either.
        let send_by_ms = match view.lease_expires_at {
            Some(until) if ours => config.send_by(until),
            _ => u64::MAX,
        };
        if !ours && !self.planted(crate::flaw::Flaw::SendWithoutRecheck) {
            let answer = answer::of_intent(view, Said::Replay, std::mem::take(&mut self.gates));
            return self.finish(Command::Answer(answer));
        }
        assert_eq!(
            view.call.sik, view.key.sik,
            "an intent's call carries its own stamp"
        );
        self.phase = Phase::Calling {
            attempt_seq,
            sent_at: now,
        };
        self.sent = Some(view.call.clone());
        self.push(Command::CallRail {
            call: view.call.clone(),
            attempt_seq,
            timeout_ms: config.call_timeout_ms,
            send_by_ms,
        });
    }

    /// How the call ended, as far as the runner could tell.
    pub fn handle_rail_outcome(&mut self, context: Context<'_>, now: u64, outcome: RailOutcome) {
        let Phase::Calling {
            attempt_seq,
            sent_at,
        } = self.phase
        else {
            panic!("a rail outcome in phase {:?}", self.phase);
        };
        let key = self.key.clone().expect("a call has a key");
        let timeout_ms = context.config.call_timeout_ms;
        let took_ms = now.saturating_sub(sent_at);
        let call = self.sent.clone().expect("a call out has its terms");
        let (mut event, change) =
            crate::classify::classify(&call, attempt_seq, outcome, took_ms, timeout_ms);
        self.flaw_ignore_terms(&mut event);
        if self.flawed_outcome(context, &key, &event) {
            return;
        }
        self.phase = Phase::Recording;
        self.commit(key, event, change);
        self.invariants();
    }

    /// `IgnoreTerms`: the entity counts as authorised whatever it moved.
    #[cfg(feature = "flaws")]
    fn flaw_ignore_terms(&self, event: &mut Event) {
        if self.flaw == Some(crate::flaw::Flaw::IgnoreTerms)
            && let Event::RailApplied { as_authorised, .. } = event
        {
            *as_authorised = true;
        }
    }

    #[cfg(not(feature = "flaws"))]
    fn flaw_ignore_terms(&self, _event: &mut Event) {}

    /// The flaws that act on a rail's answer; `true` if one took over.
    fn flawed_outcome(&mut self, context: Context<'_>, key: &IntentKey, event: &Event) -> bool {
        use crate::flaw::Flaw;
        if let Event::RailAmbiguous { attempt_seq } = event
            && self.planted(Flaw::ResendAfterTimeout)
            && self.commands < PROPOSAL_COMMANDS_MAX / 2
        {
            let Some(Ok(referent)) = &self.referent else {
                return false;
            };
            let call = RailCall::stamped(&self.action, referent, &key.sik);
            self.push(Command::CallRail {
                call,
                attempt_seq: *attempt_seq,
                timeout_ms: context.config.call_timeout_ms,
                // A planted flaw's blind resend: it checks no lease, so the runner is not asked to.
                send_by_ms: u64::MAX,
            });
            return true;
        }
        if let Event::RailApplied { entity, .. } = event
            && self.planted(Flaw::AnswerBeforeCommit)
        {
            let answer = Answer {
                outcome: answer::Outcome::Applied,
                reason_code: ReasonCode::Applied,
                message: format!("applied as {}", entity.id),
                sik: Some(key.sik.clone()),
                state: Some(State::Applied),
                gates: Vec::new(),
                rail_entity_id: Some(entity.id.clone()),
                rail_response: None,
                idempotent_replay: false,
            };
            self.push(Command::Answer(answer));
        }
        false
    }

    fn read(&mut self, said: Option<Said>) {
        let key = self.key.clone().expect("an intent to read has a key");
        self.phase = Phase::Reading { said };
        self.push(Command::ReadIntent(key));
    }

    fn commit(&mut self, key: IntentKey, event: Event, change: Change) {
        self.push(Command::Commit(Commit { key, event, change }));
    }

    /// Queues `command`; past [`PROPOSAL_COMMANDS_MAX`] the proposal answers from the state as
    /// it stands instead of going on.
    fn push(&mut self, command: Command) {
        self.commands += 1;
        let terminal = matches!(command, Command::Answer(_) | Command::Fail(_));
        if self.commands > PROPOSAL_COMMANDS_MAX && !terminal {
            let key = self.key.clone().expect("a proposal that long has a key");
            self.phase = Phase::Reading {
                said: Some(Said::Replay),
            };
            self.queue.push_back(Command::ReadIntent(key));
            return;
        }
        assert!(
            self.queue.len() < QUEUED_MAX,
            "the proposal's queue is full"
        );
        self.queue.push_back(command);
    }

    fn finish(&mut self, command: Command) {
        self.phase = Phase::Done;
        self.push(command);
    }

    /// What holds between any two handlers.
    pub fn invariants(&self) {
        assert!(
            self.queue.len() <= QUEUED_MAX,
            "the proposal's queue is bounded"
        );
        assert!(
            self.commands <= PROPOSAL_COMMANDS_MAX + 1,
            "the proposal's commands are bounded"
        );
        if let Some(key) = &self.key {
            assert_eq!(
                key.merchant_id, self.action.merchant_id,
                "the key is the action's"
            );
        }
        let needs_key = matches!(
            self.phase,
            Phase::Starting | Phase::Rechecking { .. } | Phase::Calling { .. } | Phase::Recording
        );
        assert!(
            !needs_key || self.key.is_some(),
            "{:?} without a key",
            self.phase
        );
        let waiting_on_rail = matches!(self.phase, Phase::Calling { .. });
        assert!(
            self.phase == Phase::Done || waiting_on_rail || !self.queue.is_empty(),
            "a proposal that waits has a command out"
        );
    }
}

/// This process's claim of an attempt.
fn claim(context: Context<'_>) -> AttemptClaim {
    AttemptClaim {
        owner: context.config.instance_id.clone(),
        ttl_ms: context.config.lease_ttl_ms,
    }
}

fn judge_new(ladder: Ladder) -> Judgement {
    if ladder.verdict == Verdict::Block {
        return Judgement::Refuse {
            ladder,
            record: true,
        };
    }
    let deciding = ladder.deciding();
    let (event, outcome) = match ladder.verdict {
        Verdict::Allow => (Event::GatesPassed, "AUTHORIZED"),
        Verdict::Hold | Verdict::Block => (Event::GatesHeld, "HELD"),
    };
    let change = Change {
        reason: Some((
            deciding.reason_code.as_str().to_owned(),
            deciding.message.clone(),
        )),
        context: Some(json!({"gates": ladder.results})),
        ..Change::default()
    };
    Judgement::Apply {
        ladder,
        event,
        change,
        record: Some(outcome),
    }
}

fn ladder_with(mut results: Vec<GateResult>, result: GateResult) -> Ladder {
    results.push(result);
    let verdict = Verdict::meet_all(results.iter().map(|r| r.verdict));
    Ladder { verdict, results }
}

fn is_reversible(mandate: &Mandate, action: &ProposedAction) -> bool {
    let grant = mandate.grant(&action.tool);
    matches!(
        grant.map(|g| g.reversibility),
        Some(Reversibility::Reversible)
    )
}

/// A read answered about another subject than the one asked for (a wrong or hostile upstream,
/// crossed answers) is no reading of the one asked for: it is judged unreadable, never taken
/// as the subject of the call, which would point the money at an object the agent never named.
fn of_the_subject_asked(action: &ProposedAction, found: Referent) -> Result<Referent, String> {
    match &action.subject_hint {
        Some(asked)
            if !matches!(found, Referent::Balance { .. }) && found.subject_id() != asked =>
        {
            Err(format!(
                "the rail answered the read of {asked} with {}; not trusted as {asked}",
                found.subject_id()
            ))
        }
        _ => Ok(found),
    }
}

/// The subject and currency the key is computed over: the referent's, or, when the rail could
/// not be read, the agent's text in the grant's only currency (the human who approves the hold
/// vouches for both).
fn subject_of(
    mandate: &Mandate,
    action: &ProposedAction,
    referent: &Result<Referent, String>,
) -> Option<(String, Currency)> {
    match referent {
        Ok(referent) => Some((referent.subject_id().to_owned(), referent.currency())),
        Err(_) => {
            let grant = mandate.grant(&action.tool)?;
            let [currency] = grant.value.currencies.as_slice() else {
                return None;
            };
            let subject = match action.kind {
                ActionKind::Refund | ActionKind::ScheduledUpdate => action.subject_hint.clone()?,
                ActionKind::Settlement | ActionKind::Transfer | ActionKind::ScheduledTransfer => {
                    BALANCE_SUBJECT.to_owned()
                }
            };
            Some((subject, *currency))
        }
    }
}

fn sik_of(
    mandate: &Mandate,
    action: &ProposedAction,
    subject: &str,
    currency: Currency,
    now: u64,
) -> Result<Sik, String> {
    let rule = mandate.idempotency.get(&action.tool);
    let window = match rule {
        Some(rule) => rule.window_bucket(now).map_err(|e| e.to_string())?,
        None => None,
    };
    let extra = rule.and_then(|rule| {
        let fields: Map<String, Value> = rule
            .key_fields
            .iter()
            .filter(|field| !action.covered_args.contains(field))
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
    if let (Some(window), ActionKind::Refund) = (window, action.kind) {
        // The profile refuses such a mandate at load; this is the last line, not the first.
        let error = SikError::RefundWindow {
            tool: action.tool.clone(),
            window,
        };
        return Err(error.to_string());
    }
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
    compute_sik(&input).map_err(|e| e.to_string())
}

fn unresolved_call(
    action: &ProposedAction,
    subject: &str,
    currency: Currency,
    sik: &Sik,
) -> RailCall {
    let referent = match action.kind {
        ActionKind::Refund => Referent::Payment(PaymentReferent {
            id: subject.to_owned(),
            amount: action.amount,
            amount_refunded: Minor::ZERO,
            currency,
            captured: true,
            order: None,
        }),
        ActionKind::Settlement | ActionKind::Transfer | ActionKind::ScheduledTransfer => {
            Referent::Balance {
                balance: action.amount,
                currency,
            }
        }
        ActionKind::ScheduledUpdate => Referent::Scheduled(ScheduledReferent {
            id: subject.to_owned(),
            amount: action.amount,
            recipient: action.payee.clone().unwrap_or_default(),
            currency,
        }),
    };
    RailCall::stamped(action, &referent, sik)
}

/// The action a held intent proposes, rebuilt from its stamped call so the ladder can judge it
/// again. The agent is the mandate's: G1 admitted no other when the intent was proposed.
fn action_of(mandate: &Mandate, held: &IntentView) -> ProposedAction {
    let call = &held.call;
    ProposedAction {
        agent_id: mandate.agent_id.clone(),
        merchant_id: held.key.merchant_id.clone(),
        tool: call.tool.clone(),
        kind: call.kind,
        subject_hint: match call.kind {
            ActionKind::Refund | ActionKind::ScheduledUpdate => Some(call.subject_id.clone()),
            ActionKind::Settlement | ActionKind::Transfer | ActionKind::ScheduledTransfer => None,
        },
        payee: call.payee.clone(),
        amount: call.amount,
        // The held call carries the amount its referent gave at proposal.
        amount_from_referent: false,
        distinct: held.distinct_reason.clone(),
        passthrough: call.passthrough.clone(),
        // The held intent keeps its key; an approval never computes a key again.
        covered_args: Vec::new(),
    }
}
