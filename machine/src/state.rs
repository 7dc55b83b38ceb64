//! The vocabulary of the machine: states, events, the intent's core, effects and refusals.

use interlock_spec::ids::Sik;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Attempts an intent may make before it must stay settled as `CONFIRMED_NOT_APPLIED`. A bound on
/// retries, named so that an operator reading a refusal knows where the number comes from.
pub const ATTEMPT_SEQ_MAX: u32 = 8;
/// The inconclusive reconcile passes (per attempt) after which the intent is quarantined: the 6th
/// inconclusive pass quarantines instead of returning to `UNKNOWN`.
pub const RECONCILE_INCONCLUSIVE_MAX: u32 = 6;
/// The least wait between an ambiguous outcome and the first reconcile query. Rails have no
/// read-your-writes: a list read too early can miss an entity the primary already committed.
pub const RECONCILE_MIN_DELAY_MS: u64 = 2_000;
/// Ceiling of the reconcile backoff, so a long partition is polled, not abandoned.
pub const RECONCILE_DELAY_MS_MAX: u64 = 60_000;
/// Longest rail entity id we record (Razorpay ids are ~18 characters).
pub const ENTITY_ID_LENGTH_MAX: usize = 64;

const _: () =
    assert!(RECONCILE_MIN_DELAY_MS << RECONCILE_INCONCLUSIVE_MAX > RECONCILE_DELAY_MS_MAX);
const _: () = assert!(ATTEMPT_SEQ_MAX >= 1 && RECONCILE_INCONCLUSIVE_MAX >= 1);

/// The eleven states of an intent. Each names what Interlock *knows* about the money.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum State {
    /// Received from the agent; the gates are judging it.
    Proposed,
    /// A gate asked for a human; nothing has been sent.
    Held,
    /// Refused by the mandate. Absorbing.
    Blocked,
    /// Permitted; eligible to start a rail attempt.
    Authorized,
    /// An attempt is durably recorded and its rail call may be on the wire.
    InFlight,
    /// The rail holds exactly one entity with our stamp, and we know its id. Absorbing.
    Applied,
    /// The rail refused the last attempt. The agent is told so at once, but a refusal is not proof
    /// of absence (a duplicate-receipt 400 means the money moved): the engine verifies it with a
    /// reconcile pass before the intent counts as settled (ADR 0001).
    FailedTerminal,
    /// The last attempt ended ambiguously (timeout, 5xx, crash, foreign reply).
    Unknown,
    /// A reconcile pass is reading the rail's lists.
    Reconciling,
    /// A complete, settled reading of the rail proved the last attempt did not apply.
    ConfirmedNotApplied,
    /// Reconciliation could not decide; an operator must.
    Quarantined,
}

impl State {
    /// Every state, in the order of the table in `docs/state-machine.md`.
    pub const ALL: [State; 11] = [
        State::Proposed,
        State::Held,
        State::Blocked,
        State::Authorized,
        State::InFlight,
        State::Applied,
        State::FailedTerminal,
        State::Unknown,
        State::Reconciling,
        State::ConfirmedNotApplied,
        State::Quarantined,
    ];

    /// The name stored in the ledger's `state` column.
    pub const fn as_str(self) -> &'static str {
        match self {
            State::Proposed => "PROPOSED",
            State::Held => "HELD",
            State::Blocked => "BLOCKED",
            State::Authorized => "AUTHORIZED",
            State::InFlight => "IN_FLIGHT",
            State::Applied => "APPLIED",
            State::FailedTerminal => "FAILED_TERMINAL",
            State::Unknown => "UNKNOWN",
            State::Reconciling => "RECONCILING",
            State::ConfirmedNotApplied => "CONFIRMED_NOT_APPLIED",
            State::Quarantined => "QUARANTINED",
        }
    }

    /// Parses a ledger `state` column; `None` for anything that is not one of the eleven names.
    pub fn parse(text: &str) -> Option<State> {
        State::ALL.into_iter().find(|state| state.as_str() == text)
    }

    /// No event leaves this state (I4).
    pub const fn is_absorbing(self) -> bool {
        matches!(self, State::Applied | State::Blocked)
    }

    /// The money's fate is known and nothing is on the wire: the agent can be given a final answer
    /// and nobody needs to act. `QUARANTINED` is not settled: it waits for an operator.
    pub const fn is_settled(self) -> bool {
        matches!(
            self,
            State::Applied | State::Blocked | State::ConfirmedNotApplied
        )
    }

    /// Counts against the mandate's windows, budgets and in-progress sums: everything that moved
    /// money or still might (a held intent too: an approval would move it). The ledger's
    /// `counted_states` table holds exactly these; a test checks it.
    pub const fn is_counted(self) -> bool {
        matches!(
            self,
            State::Held
                | State::Authorized
                | State::InFlight
                | State::Applied
                | State::FailedTerminal
                | State::Unknown
                | State::Reconciling
                | State::Quarantined
        )
    }

    /// Waits for a person: a hold for an approver, a quarantine for an operator.
    pub const fn awaits_human(self) -> bool {
        matches!(self, State::Held | State::Quarantined)
    }

    /// Will change on its own, with nobody acting: neither settled nor waiting for a person.
    pub const fn is_under_way(self) -> bool {
        !self.is_settled() && !self.awaits_human()
    }

    /// Rail work is under way on it (a call, or a reconcile pass): a lease is held exactly while
    /// an intent is in one of these states.
    pub const fn holds_lease(self) -> bool {
        matches!(self, State::InFlight | State::Reconciling)
    }

    /// Its last call's outcome must be verified against the rail by a reconcile pass.
    pub const fn awaits_reconcile(self) -> bool {
        matches!(self, State::Unknown | State::FailedTerminal)
    }

    /// The names of the states for which `predicate` holds, quoted and comma-separated, for a
    /// SQL `IN (…)` list: state groups in the ledger's SQL come from here, never typed by hand.
    pub fn sql_list(predicate: fn(State) -> bool) -> String {
        State::ALL
            .into_iter()
            .filter(|state| predicate(*state))
            .map(|state| format!("'{}'", state.as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The money's fate is not proven: only reconciliation or an operator can decide it.
    pub const fn is_ambiguous(self) -> bool {
        matches!(
            self,
            State::InFlight | State::Unknown | State::Reconciling | State::FailedTerminal
        )
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// What the rail (or a list of the rail's entities) said about an entity's stamp. The reconciler
/// and the reply classifier match on stamps only, never on amounts: two refunds of the same amount
/// on one payment are different refunds.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EntityRef {
    /// The rail's id for the entity (`rfnd_…`, `setl_…`).
    pub id: String,
    /// The `notes.interlock_sik` (or `receipt = "ilk_" + sik`) the entity carries; `None` if none.
    pub stamp: Option<Sik>,
}

/// Everything that can happen to an intent. Events carry the evidence their guards need.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Event {
    /// Every gate allowed the action.
    GatesPassed,
    /// The weakest gate verdict was HOLD.
    GatesHeld,
    /// The weakest gate verdict was BLOCK.
    GatesBlocked,
    /// A human approved a held intent.
    HoldReleased,
    /// A human refused a held intent.
    HoldRejected,
    /// An operator (or the engine, on a condition it cannot resolve) set the intent aside.
    Quarantine,
    /// The engine claims the next attempt; committing this is the write-ahead record of the call.
    AttemptStarted,
    /// The rail answered the call of `attempt_seq` with an entity.
    RailApplied {
        /// The attempt the reply belongs to.
        attempt_seq: u32,
        /// The entity in the reply. Its stamp must be ours.
        entity: EntityRef,
        /// The entity's amount, currency and subject are the ones authorised. When they are not,
        /// money moved, but not as a human allowed: the intent is quarantined with the entity
        /// recorded, so it can never be retried, and an operator must look. Records written
        /// before the check existed lack the field and read as `true`: they were taken so.
        #[serde(default = "as_authorised_before_the_check")]
        as_authorised: bool,
    },
    /// The rail refused the call of `attempt_seq` outright (a 4xx).
    RailRejected {
        /// The attempt the reply belongs to.
        attempt_seq: u32,
    },
    /// The call of `attempt_seq` ended without a trustworthy answer.
    RailAmbiguous {
        /// The attempt the outcome belongs to.
        attempt_seq: u32,
    },
    /// The process holding the attempt's (or the reconcile pass's) lease is gone.
    LeaseExpired,
    /// A reconcile pass begins reading the rail.
    ReconcileStarted,
    /// The pass found the entity carrying our stamp.
    ReconcileFoundApplied {
        /// The attempt the pass was started for (a pass cannot settle a later attempt).
        attempt_seq: u32,
        /// The entity found. Its stamp must be ours.
        entity: EntityRef,
        /// As for [`Event::RailApplied`]: the entity's terms are the ones authorised.
        #[serde(default = "as_authorised_before_the_check")]
        as_authorised: bool,
    },
    /// The pass read every page after the rail's lag had elapsed and found nothing of ours.
    ReconcileConfirmedAbsent {
        /// The attempt the pass was started for.
        attempt_seq: u32,
        /// The last page said there are no more.
        pagination_exhausted: bool,
        /// The reading began at least [`RECONCILE_MIN_DELAY_MS`] after the attempt ended.
        lag_elapsed: bool,
    },
    /// The pass could not decide (a list failed, pages ran out of budget, lag not elapsed).
    ReconcileInconclusive {
        /// The attempt the pass was started for.
        attempt_seq: u32,
    },
    /// The engine retries an intent proven not applied.
    RetryAuthorized,
    /// A fresh proposal from the agent for an intent that is not in flight.
    Reopened,
    /// An operator established from the rail that the entity exists.
    OperatorConfirmedApplied {
        /// The entity the operator found. Its stamp must be ours.
        entity: EntityRef,
    },
    /// An operator established from the rail that nothing of ours exists.
    OperatorConfirmedNotApplied {
        /// The operator read the rail at least [`RECONCILE_MIN_DELAY_MS`] after the last attempt
        /// ended. An operator's "nothing there" is evidence only once a late call can no longer land.
        lag_elapsed: bool,
    },
}

/// How an audit record written before the rail's terms were checked (schema version 3 and
/// earlier) reads: every stamped entity was then taken as authorised, and replaying the record
/// must give the transition it recorded.
fn as_authorised_before_the_check() -> bool {
    true
}

/// The name of an event without its evidence: the columns of the edge table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[allow(missing_docs)]
pub enum EventKind {
    GatesPassed,
    GatesHeld,
    GatesBlocked,
    HoldReleased,
    HoldRejected,
    Quarantine,
    AttemptStarted,
    RailApplied,
    RailRejected,
    RailAmbiguous,
    LeaseExpired,
    ReconcileStarted,
    ReconcileFoundApplied,
    ReconcileConfirmedAbsent,
    ReconcileInconclusive,
    RetryAuthorized,
    Reopened,
    OperatorConfirmedApplied,
    OperatorConfirmedNotApplied,
}

impl EventKind {
    /// Every event kind, in table order.
    pub const ALL: [EventKind; 19] = [
        EventKind::GatesPassed,
        EventKind::GatesHeld,
        EventKind::GatesBlocked,
        EventKind::HoldReleased,
        EventKind::HoldRejected,
        EventKind::Quarantine,
        EventKind::AttemptStarted,
        EventKind::RailApplied,
        EventKind::RailRejected,
        EventKind::RailAmbiguous,
        EventKind::LeaseExpired,
        EventKind::ReconcileStarted,
        EventKind::ReconcileFoundApplied,
        EventKind::ReconcileConfirmedAbsent,
        EventKind::ReconcileInconclusive,
        EventKind::RetryAuthorized,
        EventKind::Reopened,
        EventKind::OperatorConfirmedApplied,
        EventKind::OperatorConfirmedNotApplied,
    ];

    /// The name written in audit records.
    pub const fn as_str(self) -> &'static str {
        match self {
            EventKind::GatesPassed => "GATES_PASSED",
            EventKind::GatesHeld => "GATES_HELD",
            EventKind::GatesBlocked => "GATES_BLOCKED",
            EventKind::HoldReleased => "HOLD_RELEASED",
            EventKind::HoldRejected => "HOLD_REJECTED",
            EventKind::Quarantine => "QUARANTINE",
            EventKind::AttemptStarted => "ATTEMPT_STARTED",
            EventKind::RailApplied => "RAIL_APPLIED",
            EventKind::RailRejected => "RAIL_REJECTED",
            EventKind::RailAmbiguous => "RAIL_AMBIGUOUS",
            EventKind::LeaseExpired => "LEASE_EXPIRED",
            EventKind::ReconcileStarted => "RECONCILE_STARTED",
            EventKind::ReconcileFoundApplied => "RECONCILE_FOUND_APPLIED",
            EventKind::ReconcileConfirmedAbsent => "RECONCILE_CONFIRMED_ABSENT",
            EventKind::ReconcileInconclusive => "RECONCILE_INCONCLUSIVE",
            EventKind::RetryAuthorized => "RETRY_AUTHORIZED",
            EventKind::Reopened => "REOPENED",
            EventKind::OperatorConfirmedApplied => "OPERATOR_CONFIRMED_APPLIED",
            EventKind::OperatorConfirmedNotApplied => "OPERATOR_CONFIRMED_NOT_APPLIED",
        }
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl Event {
    /// The event's name without its evidence.
    pub const fn kind(&self) -> EventKind {
        match self {
            Event::GatesPassed => EventKind::GatesPassed,
            Event::GatesHeld => EventKind::GatesHeld,
            Event::GatesBlocked => EventKind::GatesBlocked,
            Event::HoldReleased => EventKind::HoldReleased,
            Event::HoldRejected => EventKind::HoldRejected,
            Event::Quarantine => EventKind::Quarantine,
            Event::AttemptStarted => EventKind::AttemptStarted,
            Event::RailApplied { .. } => EventKind::RailApplied,
            Event::RailRejected { .. } => EventKind::RailRejected,
            Event::RailAmbiguous { .. } => EventKind::RailAmbiguous,
            Event::LeaseExpired => EventKind::LeaseExpired,
            Event::ReconcileStarted => EventKind::ReconcileStarted,
            Event::ReconcileFoundApplied { .. } => EventKind::ReconcileFoundApplied,
            Event::ReconcileConfirmedAbsent { .. } => EventKind::ReconcileConfirmedAbsent,
            Event::ReconcileInconclusive { .. } => EventKind::ReconcileInconclusive,
            Event::RetryAuthorized => EventKind::RetryAuthorized,
            Event::Reopened => EventKind::Reopened,
            Event::OperatorConfirmedApplied { .. } => EventKind::OperatorConfirmedApplied,
            Event::OperatorConfirmedNotApplied { .. } => EventKind::OperatorConfirmedNotApplied,
        }
    }
}

/// The part of an intent the machine reasons about. The ledger stores it in the `intents` row;
/// everything else in that row (amounts, leases, timestamps) is the engine's.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct IntentCore {
    /// The intent's key; stamps on rail entities are compared against it.
    pub sik: Sik,
    /// What Interlock knows about the money.
    pub state: State,
    /// Attempts started so far; the current attempt's number. 0 before the first.
    pub attempt_seq: u32,
    /// Inconclusive reconcile passes since the current attempt started.
    pub reconcile_inconclusive: u32,
    /// The rail entity carrying our stamp, once known: always in `APPLIED`, and in `QUARANTINED`
    /// when the rail moved money other than as authorised. Once recorded it is never dropped:
    /// an intent whose money moved can never be proven absent, so never retried.
    pub entity_id: Option<String>,
}

impl IntentCore {
    /// A freshly inserted intent: `PROPOSED`, no attempt yet.
    pub fn proposed(sik: Sik) -> IntentCore {
        IntentCore {
            sik,
            state: State::Proposed,
            attempt_seq: 0,
            reconcile_inconclusive: 0,
            entity_id: None,
        }
    }

    /// Panics if the core breaks a promise the machine makes about every core it returns. Called
    /// on every core `step` accepts and every core it produces, in release builds too: a core that
    /// breaks these came from a bug or from a tampered row, and must not drive money.
    pub fn assert_invariants(&self) {
        assert!(
            self.attempt_seq <= ATTEMPT_SEQ_MAX,
            "attempt_seq over the bound"
        );
        assert!(
            self.reconcile_inconclusive < RECONCILE_INCONCLUSIVE_MAX
                || self.state == State::Quarantined
        );
        assert!(
            self.state != State::Applied || self.entity_id.is_some(),
            "APPLIED without an entity id"
        );
        assert!(
            self.entity_id.is_none()
                || (matches!(self.state, State::Applied | State::Quarantined)
                    && self.attempt_seq >= 1),
            "an entity id outside APPLIED and QUARANTINED, or before any attempt"
        );
        let attempted = matches!(
            self.state,
            State::InFlight
                | State::Applied
                | State::FailedTerminal
                | State::Unknown
                | State::Reconciling
        );
        assert!(
            !attempted || self.attempt_seq >= 1,
            "{} before any attempt",
            self.state
        );
        let never_attempted = matches!(self.state, State::Proposed | State::Held);
        assert!(
            !never_attempted || self.attempt_seq == 0,
            "{} after an attempt",
            self.state
        );
    }
}

/// What the engine must do after committing a step. Effects are data: the machine never performs
/// one. `CallRail` is produced by exactly one edge, `AUTHORIZED → IN_FLIGHT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "effect", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Effect {
    /// Nothing beyond answering whoever is waiting.
    None,
    /// Start the next attempt (the engine proposes `ATTEMPT_STARTED`).
    StartAttempt,
    /// Send the stamped rail call for this attempt, now that its `IN_FLIGHT` row is durable.
    CallRail {
        /// The attempt being sent.
        attempt_seq: u32,
    },
    /// Run a reconcile pass no sooner than `delay_ms` from now (the engine's clock).
    ScheduleReconcile {
        /// How long to wait; at least [`RECONCILE_MIN_DELAY_MS`].
        delay_ms: u64,
    },
    /// Read the rail's lists for this attempt's stamp, page by page.
    RunReconcile {
        /// The attempt being reconciled.
        attempt_seq: u32,
    },
    /// Wait for a human (a hold) or an operator (a quarantine).
    AwaitHuman,
}

/// An accepted transition: the core to persist and the effect to perform once it is durable.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Step {
    /// The new core.
    pub next: IntentCore,
    /// What the engine does after the commit.
    pub effect: Effect,
}

/// Why `step` refused an event. Every refusal is one of these; none is a panic.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "illegal", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Illegal {
    /// There is no edge for this event out of this state.
    NoEdge {
        /// The state the intent is in.
        state: State,
        /// The event refused.
        event: EventKind,
    },
    /// A rail outcome for an attempt other than the current one (a late reply).
    StaleAttempt {
        /// The current attempt.
        current: u32,
        /// The attempt the outcome names.
        got: u32,
    },
    /// An entity without our stamp: someone else's entity, or a replayed response.
    ForeignStamp {
        /// The entity offered.
        entity_id: String,
    },
    /// An entity id that is empty or longer than [`ENTITY_ID_LENGTH_MAX`].
    MalformedEntityId,
    /// Absence concluded before the last page was read.
    PaginationNotExhausted,
    /// Absence concluded from a reading that began before the rail's lag elapsed.
    LagNotElapsed,
    /// An operator claimed an entity exists for an intent that never made a rail call.
    NeverAttempted,
    /// The intent has used every attempt it may make.
    AttemptLimitReached,
    /// An operator claimed nothing moved for an intent whose entity the rail already showed.
    EntityRecorded {
        /// The entity on record.
        entity_id: String,
    },
    /// An operator named an entity other than the one on record.
    OtherEntity {
        /// The entity on record.
        recorded: String,
        /// The entity offered.
        offered: String,
    },
}

impl fmt::Display for Illegal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Illegal::NoEdge { state, event } => {
                write!(f, "{event} is not allowed in state {state}")
            }
            Illegal::StaleAttempt { current, got } => {
                write!(
                    f,
                    "outcome for attempt {got} but the current attempt is {current}"
                )
            }
            Illegal::ForeignStamp { entity_id } => {
                write!(f, "entity {entity_id} does not carry this intent's stamp")
            }
            Illegal::MalformedEntityId => {
                write!(f, "entity id must be 1..={ENTITY_ID_LENGTH_MAX} characters")
            }
            Illegal::PaginationNotExhausted => {
                f.write_str("absence needs every page read; pagination was not exhausted")
            }
            Illegal::LagNotElapsed => write!(
                f,
                "absence needs a reading begun at least {RECONCILE_MIN_DELAY_MS} ms after the attempt"
            ),
            Illegal::NeverAttempted => {
                f.write_str("an intent that never made a rail call cannot have been applied")
            }
            Illegal::AttemptLimitReached => write!(f, "attempt limit {ATTEMPT_SEQ_MAX} reached"),
            Illegal::EntityRecorded { entity_id } => write!(
                f,
                "the rail already showed entity {entity_id} for this intent: its money moved, so it cannot be confirmed not applied"
            ),
            Illegal::OtherEntity { recorded, offered } => write!(
                f,
                "entity {offered} is not the entity on record for this intent ({recorded})"
            ),
        }
    }
}

impl std::error::Error for Illegal {}
