//! The verdict on a trial, read from the rail's journal (ground truth) and the ledger, never
//! from what the proxy answered: "never two, never unknown".

use std::fmt;

use interlock_machine::invariants::{self, RailEntity};
use interlock_machine::{IntentCore, State};
use interlock_spec::ids::Sik;
use serde_json::Value;

/// What went wrong in a trial.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// More than one entity for the one action asked for.
    DoubleApplied,
    /// An intent left `IN_FLIGHT`, `UNKNOWN`, `RECONCILING` or `FAILED_TERMINAL` (a rail refusal
    /// not yet verified) once the rail is healthy and recovery ran.
    Unresolved,
    /// The ledger says `APPLIED` and names no entity the rail has.
    PhantomSuccess,
    /// An entity carries an intent's stamp but the ledger does not say `APPLIED` with its id
    /// (quarantine excepted), or carries a stamp no intent has.
    SilentLoss,
    /// The ledger's `APPLIED` names an entity that is not this intent's: another stamp, another
    /// payment or another amount.
    WrongEntity,
    /// After the agent's retries nothing moved and nothing says why.
    Stuck,
    /// The action, within every limit, ended refused.
    Refused,
    /// An entity without our stamp: money moved that no intent can account for.
    Unstamped,
    /// The armed kill point did not fire although the trial passes it.
    KillDidNotFire,
    /// A history predicate of the machine (I1–I6, the core sentence) failed over the ledger.
    Invariant,
    /// The audit chain does not verify.
    AuditChain,
    /// The trial itself could not be run as written (a process would not start, …).
    TrialError,
}

impl Kind {
    /// The name in tables.
    pub const fn name(self) -> &'static str {
        match self {
            Kind::DoubleApplied => "DOUBLE_APPLIED",
            Kind::Unresolved => "UNRESOLVED",
            Kind::PhantomSuccess => "PHANTOM_SUCCESS",
            Kind::SilentLoss => "SILENT_LOSS",
            Kind::WrongEntity => "WRONG_ENTITY",
            Kind::Stuck => "STUCK",
            Kind::Refused => "REFUSED",
            Kind::Unstamped => "UNSTAMPED",
            Kind::KillDidNotFire => "KILL_DID_NOT_FIRE",
            Kind::Invariant => "INVARIANT",
            Kind::AuditChain => "AUDIT_CHAIN",
            Kind::TrialError => "TRIAL_ERROR",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One violation and what showed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Which.
    pub kind: Kind,
    /// The evidence, for a person.
    pub detail: String,
}

/// The subject a settlement is about, as the engine names it.
pub const BALANCE_SUBJECT: &str = interlock_engine::rail::BALANCE_SUBJECT;

/// An entity the rail created during the trial (seeded ones are not counted): a refund or a
/// settlement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entity {
    /// The rail's id.
    pub id: String,
    /// What it is about: the payment refunded, or [`BALANCE_SUBJECT`].
    pub subject: String,
    /// The amount asked for, in paise (`amount`, or a settlement's `amount_requested`).
    pub amount: u64,
    /// `notes.interlock_sik`, if present.
    pub stamp: Option<String>,
}

/// The refunds and settlements the rail created (ids the mock mints: `rfnd_MOCK…`,
/// `setlod_MOCK…`), from `inspect`'s JSON.
pub fn created_entities(journal: &Value) -> Result<Vec<Entity>, String> {
    let mut created = Vec::new();
    for (list, prefix, amount_field) in [
        ("refunds", "rfnd_MOCK", "amount"),
        ("settlements", "setlod_MOCK", "amount_requested"),
    ] {
        let items = journal[list]
            .as_array()
            .ok_or_else(|| format!("the journal has no {list} array"))?;
        for item in items {
            let id = item["id"].as_str().ok_or("an entity without an id")?;
            if !id.starts_with(prefix) {
                continue;
            }
            let subject = match item["payment_id"].as_str() {
                Some(payment) => payment.to_owned(),
                None => BALANCE_SUBJECT.to_owned(),
            };
            created.push(Entity {
                id: id.to_owned(),
                subject,
                amount: item[amount_field]
                    .as_u64()
                    .ok_or_else(|| format!("{id}: {amount_field} is not an integer"))?,
                stamp: item["notes"]["interlock_sik"].as_str().map(str::to_owned),
            });
        }
    }
    Ok(created)
}

/// Everything the verdict reads, gathered after every process of the trial has stopped.
#[derive(Debug)]
pub struct Evidence {
    /// The ledger's intents.
    pub cores: Vec<IntentCore>,
    /// The machine's history predicates over the ledger's audit records.
    pub history: Result<(), invariants::Violation>,
    /// The audit chain's verification.
    pub chain: Result<(), String>,
    /// The entities the rail created.
    pub entities: Vec<Entity>,
    /// What the agent's action was about: the payment, or [`BALANCE_SUBJECT`].
    pub subject: String,
    /// The amount it asked for.
    pub amount: u64,
}

/// Judges a trial at rest. `kill_missed` names armed points that did not fire where they had
/// to.
pub fn judge(evidence: &Evidence, kill_missed: &[String]) -> Vec<Violation> {
    let mut found = Vec::new();
    let mut flag = |kind, detail: String| found.push(Violation { kind, detail });
    for point in kill_missed {
        flag(
            Kind::KillDidNotFire,
            format!("{point} was armed and did not fire"),
        );
    }
    for entity in &evidence.entities {
        if entity.stamp.is_none() {
            flag(
                Kind::Unstamped,
                format!("{} carries no interlock_sik", entity.id),
            );
        }
    }
    let entities: Vec<RailEntity> = evidence
        .entities
        .iter()
        .map(|r| RailEntity {
            id: r.id.clone(),
            stamp: r.stamp.as_deref().and_then(|s| Sik::parse(s).ok()),
        })
        .collect();
    if let Err(v) = invariants::never_two(&entities) {
        flag(Kind::DoubleApplied, v.detail);
    } else if evidence.entities.len() > 1 {
        let ids: Vec<&str> = evidence.entities.iter().map(|r| r.id.as_str()).collect();
        flag(
            Kind::DoubleApplied,
            format!("one action asked for, {} on the rail: {ids:?}", ids.len()),
        );
    }
    for core in &evidence.cores {
        if matches!(
            core.state,
            State::InFlight | State::Unknown | State::Reconciling | State::FailedTerminal
        ) {
            flag(
                Kind::Unresolved,
                format!("{} left {}", core.sik, core.state),
            );
        }
        if core.state == State::Applied {
            judge_applied(core, evidence, &mut flag);
        }
    }
    if let Err(v) = invariants::no_silent_loss(&evidence.cores, &entities) {
        flag(Kind::SilentLoss, v.detail);
    }
    for entity in &evidence.entities {
        if let Some(stamp) = &entity.stamp
            && !evidence.cores.iter().any(|c| c.sik.as_str() == stamp)
        {
            flag(
                Kind::SilentLoss,
                format!("{} carries {stamp}, which no intent has", entity.id),
            );
        }
    }
    if evidence.entities.is_empty() {
        match evidence.cores.first().map(|c| c.state) {
            Some(State::Blocked) => flag(
                Kind::Refused,
                "the action ended BLOCKED though it was within every limit".to_owned(),
            ),
            Some(State::Applied) | Some(State::Held) | Some(State::Quarantined) => {}
            state => flag(
                Kind::Stuck,
                format!(
                    "nothing on the rail and the ledger says {}",
                    state.map_or("nothing".to_owned(), |s| s.to_string())
                ),
            ),
        }
    }
    if let Err(v) = &evidence.history {
        flag(Kind::Invariant, format!("{}: {}", v.invariant, v.detail));
    }
    if let Err(e) = &evidence.chain {
        flag(Kind::AuditChain, e.clone());
    }
    found
}

fn judge_applied(core: &IntentCore, evidence: &Evidence, flag: &mut impl FnMut(Kind, String)) {
    let named = core.entity_id.as_deref().unwrap_or_default();
    let Some(entity) = evidence.entities.iter().find(|r| r.id == named) else {
        flag(
            Kind::PhantomSuccess,
            format!(
                "{} is APPLIED as {named:?}, which the rail does not have",
                core.sik
            ),
        );
        return;
    };
    let ours = entity.stamp.as_deref() == Some(core.sik.as_str())
        && entity.subject == evidence.subject
        && entity.amount == evidence.amount;
    if !ours {
        flag(
            Kind::WrongEntity,
            format!(
                "{} is APPLIED as {named}, which is {} of {} stamped {:?}; asked {} of {}",
                core.sik,
                entity.amount,
                entity.subject,
                entity.stamp,
                evidence.amount,
                evidence.subject
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use interlock_machine::IntentCore;

    const SIK: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

    fn core(state: State, entity: Option<&str>) -> IntentCore {
        let mut core = IntentCore::proposed(Sik::parse(SIK).unwrap());
        core.state = state;
        core.entity_id = entity.map(str::to_owned);
        core
    }

    fn refund(id: &str, stamp: Option<&str>, amount: u64) -> Entity {
        Entity {
            id: id.to_owned(),
            subject: "pay_X".to_owned(),
            amount,
            stamp: stamp.map(str::to_owned),
        }
    }

    fn evidence(cores: Vec<IntentCore>, entities: Vec<Entity>) -> Evidence {
        Evidence {
            cores,
            history: Ok(()),
            chain: Ok(()),
            entities,
            subject: "pay_X".to_owned(),
            amount: 500,
        }
    }

    fn kinds(e: &Evidence) -> Vec<Kind> {
        let mut kinds: Vec<Kind> = judge(e, &[]).into_iter().map(|v| v.kind).collect();
        kinds.sort();
        kinds.dedup();
        kinds
    }

    #[test]
    fn one_stamped_refund_recorded_as_applied_is_clean() {
        let e = evidence(
            vec![core(State::Applied, Some("rfnd_MOCK1"))],
            vec![refund("rfnd_MOCK1", Some(SIK), 500)],
        );
        assert_eq!(kinds(&e), vec![]);
    }

    #[test]
    fn each_way_of_going_wrong_is_named() {
        let two = evidence(
            vec![core(State::Applied, Some("rfnd_MOCK1"))],
            vec![
                refund("rfnd_MOCK1", Some(SIK), 500),
                refund("rfnd_MOCK2", Some(SIK), 500),
            ],
        );
        assert!(kinds(&two).contains(&Kind::DoubleApplied));
        let phantom = evidence(vec![core(State::Applied, Some("rfnd_MOCK9"))], vec![]);
        assert_eq!(kinds(&phantom), vec![Kind::PhantomSuccess]);
        let lost = evidence(
            vec![core(State::ConfirmedNotApplied, None)],
            vec![refund("rfnd_MOCK1", Some(SIK), 500)],
        );
        assert_eq!(kinds(&lost), vec![Kind::SilentLoss]);
        let wrong = evidence(
            vec![core(State::Applied, Some("rfnd_MOCK1"))],
            vec![refund("rfnd_MOCK1", Some(SIK), 499)],
        );
        assert_eq!(kinds(&wrong), vec![Kind::WrongEntity]);
        let unknown = evidence(vec![core(State::Unknown, None)], vec![]);
        assert_eq!(kinds(&unknown), vec![Kind::Unresolved, Kind::Stuck]);
        let stuck = evidence(vec![core(State::ConfirmedNotApplied, None)], vec![]);
        assert_eq!(kinds(&stuck), vec![Kind::Stuck]);
        let refused = evidence(vec![core(State::Blocked, None)], vec![]);
        assert_eq!(kinds(&refused), vec![Kind::Refused]);
        let orphan = evidence(
            vec![core(State::Applied, Some("rfnd_MOCK1"))],
            vec![refund("rfnd_MOCK1", None, 500)],
        );
        assert!(kinds(&orphan).contains(&Kind::Unstamped));
        let nobody = evidence(vec![], vec![refund("rfnd_MOCK1", Some(SIK), 500)]);
        assert_eq!(kinds(&nobody), vec![Kind::SilentLoss]);
        let missed = judge(&evidence(vec![], vec![]), &["mid_call".to_owned()]);
        assert!(missed.iter().any(|v| v.kind == Kind::KillDidNotFire));
    }

    #[test]
    fn quarantine_is_not_a_silent_loss() {
        let e = evidence(
            vec![core(State::Quarantined, None)],
            vec![refund("rfnd_MOCK1", Some(SIK), 500)],
        );
        assert_eq!(kinds(&e), vec![]);
    }

    #[test]
    fn only_entities_the_rail_minted_are_counted() {
        let journal = serde_json::json!({
            "refunds": [
                {"id": "rfnd_SEED000001", "payment_id": "pay_X", "amount": 100, "notes": {}},
                {"id": "rfnd_MOCK0000000001", "payment_id": "pay_X", "amount": 500,
                 "notes": {"interlock_sik": SIK}, "receipt": format!("ilk_{SIK}")},
            ],
            "settlements": [
                {"id": "setlod_MOCK0000000001", "amount_requested": 700, "fees": 2,
                 "notes": {"interlock_sik": SIK}},
            ],
        });
        let created = created_entities(&journal).unwrap();
        assert_eq!(created.len(), 2);
        assert_eq!(created[0].stamp.as_deref(), Some(SIK));
        assert_eq!(created[1].subject, BALANCE_SUBJECT);
        assert_eq!(created[1].amount, 700);
        assert!(created_entities(&serde_json::json!({})).is_err());
    }
}
