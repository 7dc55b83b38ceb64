//! Invariants I1–I6, "never two" and the core sentence, as predicates over a recorded history.
//!
//! The stateright model, the proptests here and the engine's tests over a real SQLite ledger all
//! record the same [`Record`]s and call these same functions: the claims are written once.

use crate::state::{Effect, Event, EventKind, IntentCore, State};
use interlock_spec::ids::Sik;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One entry of a recorded history. `Inserted` and `Transition` are ledger records (each is one
/// audit record with a `seq`); `RailCall` is an observation that a call left the process.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Record {
    /// An intent row was inserted in `PROPOSED`.
    Inserted {
        /// The audit record's sequence number.
        seq: u64,
        /// The inserted core.
        core: IntentCore,
    },
    /// A step was committed.
    Transition {
        /// The audit record's sequence number.
        seq: u64,
        /// The core before.
        from: IntentCore,
        /// The event applied.
        event: Event,
        /// The core after.
        to: IntentCore,
        /// The effect `step` returned.
        effect: Effect,
    },
    /// A rail call for `attempt_seq` of `sik` was sent.
    RailCall {
        /// The intent.
        sik: Sik,
        /// The attempt sent.
        attempt_seq: u32,
    },
}

/// An entity on the rail as a verifier sees it in the rail's journal (ground truth).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RailEntity {
    /// The rail's id.
    pub id: String,
    /// The Interlock stamp it carries, if any.
    pub stamp: Option<Sik>,
}

/// A broken invariant: which one, and what in the history broke it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The invariant's short name (`I1` … `I6`, `never-two`, `core-sentence`, `no-phantom-success`).
    pub invariant: &'static str,
    /// What broke it, for a person reading a counterexample.
    pub detail: String,
}

fn violation(invariant: &'static str, detail: String) -> Result<(), Violation> {
    Err(Violation { invariant, detail })
}

fn transitions(
    history: &[Record],
) -> impl Iterator<Item = (&IntentCore, &Event, &IntentCore, &Effect)> {
    history.iter().filter_map(|record| match record {
        Record::Transition {
            from,
            event,
            to,
            effect,
            ..
        } => Some((from, event, to, effect)),
        Record::Inserted { .. } | Record::RailCall { .. } => None,
    })
}

/// I1 single intent identity: at most one intent per key, and every transition continues from the
/// core the previous one left (two writers racing on one key would break the chain).
pub fn i1_single_intent(history: &[Record]) -> Result<(), Violation> {
    let mut current: BTreeMap<&Sik, &IntentCore> = BTreeMap::new();
    for record in history {
        match record {
            Record::Inserted { core, .. } => {
                if current.insert(&core.sik, core).is_some() {
                    return violation("I1", format!("second intent inserted for {}", core.sik));
                }
            }
            Record::Transition { from, to, .. } => match current.get(&from.sik) {
                Some(&now) if now == from && to.sik == from.sik => {
                    current.insert(&to.sik, to);
                }
                Some(now) => {
                    let detail = format!(
                        "{}: transition from {:?} but the row is {:?}",
                        from.sik, from, now
                    );
                    return violation("I1", detail);
                }
                None => return violation("I1", format!("{}: transition before insert", from.sik)),
            },
            Record::RailCall { .. } => {}
        }
    }
    Ok(())
}

/// I2 durable write-ahead: a rail call is sent only while the ledger row *is* `IN_FLIGHT` for that
/// very attempt. Committed before the call, and not moved on since: a call sent after its attempt
/// was expired and reconciled is a late send, as dangerous as one sent before the write.
pub fn i2_write_ahead(history: &[Record]) -> Result<(), Violation> {
    let mut current: BTreeMap<&Sik, &IntentCore> = BTreeMap::new();
    for record in history {
        match record {
            Record::Inserted { core, .. } => {
                current.insert(&core.sik, core);
            }
            Record::Transition { to, .. } => {
                current.insert(&to.sik, to);
            }
            Record::RailCall { sik, attempt_seq } => {
                let row = current.get(sik);
                let in_flight = row.is_some_and(|core| {
                    core.state == State::InFlight && core.attempt_seq == *attempt_seq
                });
                if !in_flight {
                    let found = row.map_or("no row".to_owned(), |c| {
                        format!("{} attempt {}", c.state, c.attempt_seq)
                    });
                    let detail =
                        format!("{sik}: call for attempt {attempt_seq} while the row is {found}");
                    return violation("I2", detail);
                }
            }
        }
    }
    Ok(())
}

/// I3 no blind retries: each attempt is sent at most once, and a second attempt is only ever
/// started after the previous one was proven not applied (`CONFIRMED_NOT_APPLIED`).
pub fn i3_no_blind_retries(history: &[Record]) -> Result<(), Violation> {
    let mut calls: BTreeMap<(&Sik, u32), u32> = BTreeMap::new();
    let mut proven_absent: BTreeMap<&Sik, bool> = BTreeMap::new();
    for record in history {
        match record {
            Record::RailCall { sik, attempt_seq } => {
                let sent = calls.entry((sik, *attempt_seq)).or_insert(0);
                *sent += 1;
                if *sent > 1 {
                    return violation("I3", format!("{sik}: attempt {attempt_seq} sent twice"));
                }
            }
            Record::Transition {
                from, event, to, ..
            } => {
                if to.state == State::ConfirmedNotApplied {
                    proven_absent.insert(&to.sik, true);
                }
                if event.kind() == EventKind::AttemptStarted && from.attempt_seq >= 1 {
                    if proven_absent.get(&from.sik) != Some(&true) {
                        let detail = format!(
                            "{}: attempt {} without proof of absence",
                            from.sik, to.attempt_seq
                        );
                        return violation("I3", detail);
                    }
                    proven_absent.insert(&from.sik, false);
                }
            }
            Record::Inserted { .. } => {}
        }
    }
    Ok(())
}

/// I4 absorbing terminal states: nothing leaves `APPLIED` or `BLOCKED`.
pub fn i4_absorbing(history: &[Record]) -> Result<(), Violation> {
    for (from, event, to, _) in transitions(history) {
        if from.state.is_absorbing() {
            let detail = format!(
                "{}: {} moved {} to {}",
                from.sik,
                event.kind(),
                from.state,
                to.state
            );
            return violation("I4", detail);
        }
    }
    Ok(())
}

/// I5 monotonic sequence: `attempt_seq` rises by exactly one on `ATTEMPT_STARTED` and is kept by
/// every other event; rail calls of one intent carry strictly increasing attempt numbers.
pub fn i5_monotonic(history: &[Record]) -> Result<(), Violation> {
    let mut last_call: BTreeMap<&Sik, u32> = BTreeMap::new();
    for record in history {
        match record {
            Record::Transition {
                from, event, to, ..
            } => {
                let rise = if event.kind() == EventKind::AttemptStarted {
                    1
                } else {
                    0
                };
                if to.attempt_seq != from.attempt_seq + rise {
                    let detail = format!(
                        "{}: {} took attempt_seq {} to {}",
                        from.sik,
                        event.kind(),
                        from.attempt_seq,
                        to.attempt_seq
                    );
                    return violation("I5", detail);
                }
            }
            Record::RailCall { sik, attempt_seq } => {
                if let Some(&last) = last_call.get(sik)
                    && *attempt_seq <= last
                {
                    return violation(
                        "I5",
                        format!("{sik}: call for attempt {attempt_seq} after {last}"),
                    );
                }
                last_call.insert(sik, *attempt_seq);
            }
            Record::Inserted { .. } => {}
        }
    }
    Ok(())
}

/// I6 audit completeness: every ledger record carries the next sequence number, gapless from 1.
/// (The hash chain over those records is the engine's; this is the part the machine can see.)
pub fn i6_audit_gapless(history: &[Record]) -> Result<(), Violation> {
    let mut expected = 1;
    for record in history {
        let seq = match record {
            Record::Inserted { seq, .. } | Record::Transition { seq, .. } => *seq,
            Record::RailCall { .. } => continue,
        };
        if seq != expected {
            return violation("I6", format!("audit seq {seq} where {expected} was due"));
        }
        expected += 1;
    }
    Ok(())
}

/// The core sentence: the only edge into a rail call is `AUTHORIZED → IN_FLIGHT`, and after the
/// first attempt the only edge into `AUTHORIZED` is from `CONFIRMED_NOT_APPLIED`.
pub fn core_sentence(history: &[Record]) -> Result<(), Violation> {
    for (from, event, to, effect) in transitions(history) {
        let calls = matches!(effect, Effect::CallRail { .. });
        if calls != (from.state == State::Authorized && to.state == State::InFlight) {
            let detail = format!(
                "{}: {} {} → {} with effect {:?}",
                from.sik,
                event.kind(),
                from.state,
                to.state,
                effect
            );
            return violation("core-sentence", detail);
        }
        let reauthorised = to.state == State::Authorized && from.attempt_seq >= 1;
        if reauthorised && from.state != State::ConfirmedNotApplied {
            let detail = format!(
                "{}: into AUTHORIZED from {} after attempt {}",
                from.sik, from.state, from.attempt_seq
            );
            return violation("core-sentence", detail);
        }
    }
    Ok(())
}

/// Never two: the rail holds at most one entity stamped with any one key.
pub fn never_two(entities: &[RailEntity]) -> Result<(), Violation> {
    let mut seen: BTreeMap<&Sik, &str> = BTreeMap::new();
    for entity in entities {
        if let Some(stamp) = &entity.stamp
            && let Some(first) = seen.insert(stamp, &entity.id)
        {
            return violation(
                "never-two",
                format!("{stamp}: both {first} and {} on the rail", entity.id),
            );
        }
    }
    Ok(())
}

/// No phantom success: a core that names an entity (`APPLIED`, or `QUARANTINED` because the rail
/// moved money other than as authorised) names one that exists on the rail and carries the
/// core's own stamp.
pub fn no_phantom_success<'a>(
    cores: impl IntoIterator<Item = &'a IntentCore>,
    entities: &[RailEntity],
) -> Result<(), Violation> {
    for core in cores {
        if core.state != State::Applied && core.entity_id.is_none() {
            continue;
        }
        let named = core.entity_id.as_deref();
        let real = entities
            .iter()
            .any(|e| Some(e.id.as_str()) == named && e.stamp.as_ref() == Some(&core.sik));
        if !real {
            return violation(
                "no-phantom-success",
                format!(
                    "{}: {} as {named:?}, no such stamped entity",
                    core.sik, core.state
                ),
            );
        }
    }
    Ok(())
}

/// No silent loss, for a world at rest: an entity carrying a core's stamp means the ledger says
/// `APPLIED` with that entity's id (or `QUARANTINED`, where an operator has been asked). Only
/// meaningful once nothing is in flight: mid-protocol an entity may exist before it is known.
pub fn no_silent_loss<'a>(
    cores: impl IntoIterator<Item = &'a IntentCore>,
    entities: &[RailEntity],
) -> Result<(), Violation> {
    for core in cores {
        let Some(entity) = entities
            .iter()
            .find(|e| e.stamp.as_ref() == Some(&core.sik))
        else {
            continue;
        };
        let recorded =
            core.state == State::Applied && core.entity_id.as_deref() == Some(entity.id.as_str());
        if !recorded && core.state != State::Quarantined {
            let detail = format!(
                "{}: {} on the rail but the ledger says {}",
                core.sik, entity.id, core.state
            );
            return violation("no-silent-loss", detail);
        }
    }
    Ok(())
}

/// Every history predicate, in order, stopping at the first violation.
pub fn check_history(history: &[Record]) -> Result<(), Violation> {
    i1_single_intent(history)?;
    i2_write_ahead(history)?;
    i3_no_blind_retries(history)?;
    i4_absorbing(history)?;
    i5_monotonic(history)?;
    i6_audit_gapless(history)?;
    core_sentence(history)
}
