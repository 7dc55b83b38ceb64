//! What the agent is told: one table from an intent's state to an answer. Every path that
//! answers (a fresh apply, a replay, a reconciled or operator-settled intent, an approval, a
//! hold, a quarantine, a block) reads this table, so the words and the structured outcome
//! cannot disagree.

use crate::gates::{GateResult, Ladder};
use crate::plan::IntentView;
use interlock_machine::{ATTEMPT_SEQ_MAX, State};
use interlock_spec::ids::Sik;
use interlock_spec::reason::ReasonCode;
use serde::Serialize;

/// What became of a proposal, in one word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
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

/// The answer to one proposal.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
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
    /// The rail's answer to the call that applied it, verbatim, when this process received
    /// one. Never the error of an attempt the reconciler settled.
    pub rail_response: Option<String>,
    /// Whether this answer replays an earlier one.
    pub idempotent_replay: bool,
}

/// Whose work an answer reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Said {
    /// This proposal carried the intent to its state (it made the call, or the gates decided).
    Fresh,
    /// The intent was already there: this proposal found it, or lost a race to it.
    Replay,
}

/// The one State → Answer table.
pub fn of_intent(view: &IntentView, said: Said, gates: Vec<GateResult>) -> Answer {
    let state = view.core.state;
    let (outcome, code, message) = words(view, said);
    Answer {
        outcome,
        reason_code: code,
        message,
        sik: Some(view.key.sik.clone()),
        state: Some(state),
        gates,
        rail_entity_id: view.core.entity_id.clone(),
        rail_response: view.applied_response().map(str::to_owned),
        idempotent_replay: outcome == Outcome::Applied && said == Said::Replay,
    }
}

/// What an intent in its state is, in one word, a code and a sentence.
fn words(view: &IntentView, said: Said) -> (Outcome, ReasonCode, String) {
    let sik = &view.key.sik;
    let state = view.core.state;
    let detail = view.attempt.as_ref().and_then(|a| a.detail.as_deref());
    match state {
        State::Applied => {
            let (code, message) = applied_words(view, said);
            (Outcome::Applied, code, message)
        }
        State::Unknown | State::Reconciling if said == Said::Fresh => (
            Outcome::Unknown,
            ReasonCode::OutcomeUnknown,
            format!(
                "the rail's answer was ambiguous ({}); Interlock is reconciling intent {sik} against the rail and will not send it again unless the rail proves it absent; retry later for the result, do not change the action",
                detail.unwrap_or("no answer")
            ),
        ),
        State::FailedTerminal => (
            Outcome::Rejected,
            ReasonCode::RailRejected,
            format!(
                "the rail refused this action: {} (intent {sik}); Interlock is verifying that nothing moved, retry in a few seconds",
                detail.unwrap_or("no detail")
            ),
        ),
        State::Held => (
            Outcome::Held,
            ReasonCode::AwaitingApproval,
            format!(
                "this action (intent {sik}) is waiting for a human's approval: {}",
                view.reason
            ),
        ),
        State::Blocked => (
            Outcome::Refused,
            ReasonCode::PreviouslyBlocked,
            format!(
                "this action (intent {sik}) was refused before: {}",
                view.reason
            ),
        ),
        State::Quarantined if view.core.entity_id.is_some() => (
            Outcome::Quarantined,
            ReasonCode::RailTermsDiffer,
            format!(
                "the rail moved money for intent {sik}, but not as authorised: {}; it is quarantined until an operator settles it; do not retry: the money has moved",
                view.reason
            ),
        ),
        State::Quarantined => (
            Outcome::Quarantined,
            ReasonCode::Quarantined,
            format!("intent {sik} is quarantined until an operator settles it; do not retry"),
        ),
        State::ConfirmedNotApplied if view.core.attempt_seq >= ATTEMPT_SEQ_MAX => (
            Outcome::Refused,
            ReasonCode::AttemptLimitReached,
            format!(
                "intent {sik} has used all {ATTEMPT_SEQ_MAX} attempts; nothing of it is on the rail; an operator must look at it"
            ),
        ),
        State::Proposed
        | State::Authorized
        | State::InFlight
        | State::Unknown
        | State::Reconciling
        | State::ConfirmedNotApplied => (
            Outcome::InProgress,
            ReasonCode::InProgress,
            format!(
                "this action (intent {sik}) is in progress ({state}); retry later for its result, do not change it"
            ),
        ),
    }
}

/// An applied intent's code and sentence: this proposal's apply, or a replay of it.
fn applied_words(view: &IntentView, said: Said) -> (ReasonCode, String) {
    let sik = &view.key.sik;
    let call = &view.call;
    // An operator may have accepted an entity that moved another amount: say what moved.
    let amount = match view.moved_minor {
        Some(moved) => format!(
            "{moved} {currency} ({} {currency} authorised)",
            call.amount,
            currency = call.currency
        ),
        None => format!("{} {}", call.amount, call.currency),
    };
    let entity = view.core.entity_id.as_deref().unwrap_or("?");
    match said {
        Said::Fresh => (
            ReasonCode::Applied,
            format!(
                "applied as {entity}: {amount} on {} (intent {sik})",
                call.subject_id
            ),
        ),
        Said::Replay => (
            ReasonCode::IdempotentReplay,
            format!(
                "already done: this action was applied as {entity} ({amount} on {}, intent {sik}); nothing was sent again",
                call.subject_id
            ),
        ),
    }
}

/// A refusal by the ladder, before or instead of any intent.
pub fn refused(ladder: Ladder, sik: Option<Sik>, state: Option<State>) -> Answer {
    let deciding = ladder.deciding().clone();
    Answer {
        outcome: Outcome::Refused,
        reason_code: deciding.reason_code,
        message: deciding.message,
        sik,
        state,
        gates: ladder.results,
        rail_entity_id: None,
        rail_response: None,
        idempotent_replay: false,
    }
}

/// A fresh hold: the gate that asked for a human, and the intent's key to approve.
pub fn held(sik: &Sik, ladder: &Ladder) -> Answer {
    let deciding = ladder.deciding();
    Answer {
        outcome: Outcome::Held,
        reason_code: deciding.reason_code,
        message: format!(
            "{} (intent {sik} awaits a human's approval)",
            deciding.message
        ),
        sik: Some(sik.clone()),
        state: Some(State::Held),
        gates: ladder.results.clone(),
        rail_entity_id: None,
        rail_response: None,
        idempotent_replay: false,
    }
}
