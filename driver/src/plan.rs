//! The vocabulary between the driver and the ledger: what the driver asks the ledger to commit,
//! and what the ledger reads back for it. The ledger (SQLite today) carries these out; it never
//! decides which event comes next, and the driver never writes a row.

use crate::gates::Ladder;
use crate::rail::RailCall;
use interlock_machine::{Effect, Event, Illegal, IntentCore, State};
use interlock_spec::action::{ActionKind, ProposedAction};
use interlock_spec::ids::{MerchantId, Sik};
use interlock_spec::money::{Currency, Minor};
use serde_json::Value;

/// The key of an intent: the ledger's primary key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IntentKey {
    /// The rail account.
    pub merchant_id: MerchantId,
    /// The semantic idempotency key.
    pub sik: Sik,
}

impl IntentKey {
    /// `merchant/sik`, for messages.
    pub fn describe(&self) -> String {
        format!("{}/{}", self.merchant_id, self.sik)
    }
}

/// What changes beside the core when an event is applied.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Change {
    /// What to do with the lease.
    pub lease: LeaseChange,
    /// Fee the rail charged (outcome events).
    pub fee_minor: u64,
    /// Tax on the fee.
    pub tax_minor: u64,
    /// The amount the rail's entity moved, when it differs from the authorised amount in the
    /// same currency (`RAIL_TERMS_DIFFER`): the windows count it instead.
    pub moved_minor: Option<u64>,
    /// The rail's words or the pass's summary, kept with the attempt and the audit record.
    pub detail: Option<String>,
    /// A reason to record on the row (gate and operator events): code, sentence.
    pub reason: Option<(String, String)>,
    /// The reconcile pass that concluded with this event.
    pub finding: Option<Finding>,
    /// More context for the audit record.
    pub context: Option<Value>,
}

/// The lease side of a transition.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub enum LeaseChange {
    /// Claim it for `owner` until `expires_at`. Refused while another owner's lease is live.
    Claim {
        /// The claimant.
        owner: String,
        /// When the claim lapses.
        expires_at: u64,
    },
    /// The holder's lease has expired; take the intent back (LEASE_EXPIRED). Refused before.
    Expire,
    /// Drop the lease, if any, because the work it guarded is done.
    #[default]
    Release,
}

/// A reconcile pass's record.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Finding {
    /// The attempt the pass was about.
    pub attempt_seq: u32,
    /// `APPLIED`, `CONFIRMED_NOT_APPLIED`, `INCONCLUSIVE` or `QUARANTINED`.
    pub outcome: &'static str,
    /// Pages read.
    pub pages_scanned: u32,
    /// Whether the last page was read.
    pub pagination_exhausted: bool,
    /// Whether the pass began after the rail's lag had passed.
    pub lag_elapsed: bool,
    /// The stamped entity found.
    pub matched_entity_id: Option<String>,
    /// What the pass saw.
    pub detail: Value,
}

/// One transition to commit: `event` on `key`, with what changes beside the core.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Commit {
    /// The intent.
    pub key: IntentKey,
    /// The event, which the ledger steps with `machine::step`.
    pub event: Event,
    /// Lease, fees, detail, reason, finding, context.
    pub change: Change,
}

/// A committed transition.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Applied {
    /// The core before.
    pub from: IntentCore,
    /// The core after.
    pub to: IntentCore,
    /// What must happen now that it is durable.
    pub effect: Effect,
    /// The audit record written.
    pub seq: u64,
}

/// Why the ledger did not apply a transition, in the terms the driver acts on. A ledger that
/// failed (I/O, corruption) is not a refusal: the runner stops with its error.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// The machine refused the event in the intent's current state.
    Illegal(Illegal),
    /// A lease rule refused the write (held by another, or not yet expired).
    Lease(String),
    /// The intent does not exist.
    NoSuchIntent,
    /// Another writer kept moving the intent.
    Contended,
}

/// A new intent, as the ledger inserts it (in `PROPOSED`) before its gate event.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NewIntent {
    /// Its key.
    pub key: IntentKey,
    /// What it does.
    pub kind: ActionKind,
    /// The referent's id.
    pub subject_id: String,
    /// The amount.
    pub amount: Minor,
    /// The currency.
    pub currency: Currency,
    /// Whether the grant calls the tool reversible.
    pub reversible: bool,
    /// `interlock_distinct_reason`, verbatim.
    pub distinct_reason: Option<String>,
    /// The stamped call every attempt sends.
    pub call: RailCall,
    /// The mandate's hash.
    pub mandate_hash: String,
}

/// What the ledger must find before it judges: no intent (a first proposal) or one in a state
/// (a reopen from `CONFIRMED_NOT_APPLIED`, an approval of a `HELD` one).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Expect {
    /// No intent under the key: insert this one, then apply the judged event.
    Absent(Box<NewIntent>),
    /// The intent is in this state: apply the judged event to it.
    InState(State),
}

/// Which usage the ladder is judged against, read inside the deciding transaction.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UsageQuery {
    /// The action being judged.
    pub action: ProposedAction,
    /// Its subject.
    pub subject_id: String,
    /// Its currency.
    pub currency: Currency,
    /// The time of the decision.
    pub now_ms: u64,
    /// Whether the intent being judged is already counted (an approval) and must not count
    /// against itself.
    pub exclude_self: bool,
}

/// One deciding transaction: find the intent as expected, read the usage, call the driver's
/// pure judgement with it, and write what it says, all under one write lock.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Decide {
    /// The intent.
    pub key: IntentKey,
    /// What must be found.
    pub expect: Expect,
    /// What to count.
    pub usage: UsageQuery,
    /// This process, for the decision record.
    pub instance_id: String,
    /// The mandate in force, for the decision record.
    pub mandate_hash: String,
    /// Who claims the attempt. When the judged event leaves the intent ready for an attempt
    /// (`AUTHORIZED`, effect `StartAttempt`), `ATTEMPT_STARTED` is applied with this claim in
    /// the same transaction, after the decision record: the permission and the write-ahead
    /// record of its call are one commit, and so one fsync. `None` leaves the intent
    /// `AUTHORIZED`, as ledgers written before this did.
    pub start_attempt: Option<AttemptClaim>,
}

/// The lease an attempt is claimed with: its owner, and how long it lasts from the moment the
/// claim is written (the ledger reads the runner's clock once it holds the write lock). A
/// lease dated when the commit was planned would be shortened by every wait before the commit
/// (G5's model, the write lock), and the send re-check (A2) would then refuse a call the lease
/// was meant to cover. With group commit the batch's later jobs and its fsync still come
/// between the claim and its commit: milliseconds, against a lease of seconds.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AttemptClaim {
    /// The claimant.
    pub owner: String,
    /// The lease's length from the commit.
    pub ttl_ms: u64,
}

impl AttemptClaim {
    /// The change that claims the lease at `now_ms`.
    pub fn at(&self, now_ms: u64) -> Change {
        Change {
            lease: LeaseChange::Claim {
                owner: self.owner.clone(),
                expires_at: now_ms.saturating_add(self.ttl_ms),
            },
            ..Change::default()
        }
    }
}

/// The driver's judgement inside a deciding transaction.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
// Made and carried out once per step, never stored in bulk: boxing would only add an
// allocation to every step.
#[allow(clippy::large_enum_variant)]
pub enum Judgement {
    /// Refused: change nothing but (if `record`) the decision record.
    Refuse {
        /// The ladder that refused.
        ladder: Ladder,
        /// Whether to write a decision record (`REFUSED`).
        record: bool,
    },
    /// Apply `event` (after inserting the intent, for [`Expect::Absent`]) and write a decision
    /// record saying `record`, if any.
    Apply {
        /// The ladder that decided.
        ladder: Ladder,
        /// `GATES_PASSED`, `GATES_HELD`, `REOPENED` or `HOLD_RELEASED`.
        event: Event,
        /// What changes beside the core.
        change: Change,
        /// `AUTHORIZED` or `HELD`, for the decision record; `None` for an approval, whose
        /// record is the `HOLD_RELEASED` audit record itself.
        record: Option<&'static str>,
    },
}

/// What a deciding transaction found and did.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Decided {
    /// The intent was not as expected; nothing was judged. Its state now.
    Found(Box<IntentView>),
    /// The ladder refused; only the decision was recorded.
    Refused(Ladder),
    /// The judged event was committed, and `ATTEMPT_STARTED` after it when the plan asked for
    /// it and the ledger allowed it: the last transition applied (its effect says which).
    Applied(Applied, Ladder),
}

/// An intent as the ledger holds it: everything the driver reads to answer or to go on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IntentView {
    /// The key.
    pub key: IntentKey,
    /// The machine's part.
    pub core: IntentCore,
    /// Who holds the lease.
    pub lease_owner: Option<String>,
    /// When it lapses.
    pub lease_expires_at: Option<u64>,
    /// When the next reconcile pass is due.
    pub reconcile_not_before: Option<u64>,
    /// The row's reason sentence (why it was held, blocked, approved, resolved).
    pub reason: String,
    /// The stamped call every attempt sends.
    pub call: RailCall,
    /// `interlock_distinct_reason`, verbatim.
    pub distinct_reason: Option<String>,
    /// The hash of the mandate it was proposed under.
    pub mandate_hash: String,
    /// The current attempt, if any was started.
    pub attempt: Option<AttemptView>,
    /// What the rail's entity moved, when it differs from the authorised amount
    /// (`RAIL_TERMS_DIFFER`): an answer says this figure, not the authorised one.
    pub moved_minor: Option<u64>,
}

/// The current attempt of an intent.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AttemptView {
    /// When it started.
    pub started_at: u64,
    /// When its outcome was recorded.
    pub finished_at: Option<u64>,
    /// `APPLIED`, `REJECTED`, `AMBIGUOUS`, or none yet.
    pub outcome: Option<String>,
    /// The rail's words: its answer when applied, its error otherwise.
    pub detail: Option<String>,
}

impl IntentView {
    /// The rail's answer that applied this intent, verbatim, if this process's call received
    /// one. An intent settled by reconciliation or an operator has none: its last attempt's
    /// detail is the error that made it ambiguous, never an answer to replay.
    pub fn applied_response(&self) -> Option<&str> {
        let attempt = self.attempt.as_ref()?;
        let applied_by_call = attempt.outcome.as_deref() == Some("APPLIED");
        (self.core.state == State::Applied && applied_by_call)
            .then_some(attempt.detail.as_deref())
            .flatten()
    }

    /// When the current attempt ended (or, for one never answered, started).
    pub fn attempt_ended_at(&self) -> Option<u64> {
        self.attempt
            .as_ref()
            .map(|attempt| attempt.finished_at.unwrap_or(attempt.started_at))
    }
}
