//! The transition function: the only place the rules of the machine are written.

use crate::state::{
    ATTEMPT_SEQ_MAX, ENTITY_ID_LENGTH_MAX, Effect, EntityRef, Event, EventKind, Illegal,
    IntentCore, RECONCILE_DELAY_MS_MAX, RECONCILE_INCONCLUSIVE_MAX, RECONCILE_MIN_DELAY_MS, State,
    Step,
};

/// Applies `event` to `core`. Total and pure: every (state, event) pair returns the next core and
/// the effect the engine must perform once that core is durable, or a typed refusal. The engine,
/// the model checker, the fuzz targets and the proxy all call this one function.
///
/// # Panics
/// Only on a programming error: a `core` that breaks [`IntentCore::assert_invariants`] (no core
/// this function returned can), or a result that would break the core sentence.
pub fn step(core: &IntentCore, event: &Event) -> Result<Step, Illegal> {
    core.assert_invariants();
    let result = transition(core, event);
    if let Ok(step) = &result {
        step.next.assert_invariants();
        assert_core_sentence(core, step);
    }
    result
}

fn transition(core: &IntentCore, event: &Event) -> Result<Step, Illegal> {
    use State::*;
    let kind = event.kind();
    match event {
        Event::GatesPassed => edge(core, kind, &[Proposed], Authorized, Effect::StartAttempt),
        Event::GatesHeld => edge(core, kind, &[Proposed], Held, Effect::AwaitHuman),
        Event::GatesBlocked => edge(core, kind, &[Proposed, Authorized], Blocked, Effect::None),
        Event::HoldReleased => edge(core, kind, &[Held], Authorized, Effect::StartAttempt),
        Event::HoldRejected => edge(core, kind, &[Held], Blocked, Effect::None),
        Event::Quarantine => {
            let sources = [Held, Authorized, Unknown, Reconciling];
            edge(core, kind, &sources, Quarantined, Effect::AwaitHuman)
        }
        Event::AttemptStarted => attempt_started(core, kind),
        Event::RailApplied {
            attempt_seq,
            entity,
            as_authorised,
        } => {
            about_attempt(core, kind, InFlight, *attempt_seq)?;
            applied(core, entity, *as_authorised)
        }
        Event::RailRejected { attempt_seq } => {
            // The agent hears the refusal now; the ledger verifies it in the background.
            about_attempt(core, kind, InFlight, *attempt_seq)?;
            let effect = schedule_reconcile(core.reconcile_inconclusive);
            Ok(to(core, FailedTerminal, effect))
        }
        Event::RailAmbiguous { attempt_seq } => {
            about_attempt(core, kind, InFlight, *attempt_seq)?;
            let effect = schedule_reconcile(core.reconcile_inconclusive);
            Ok(to(core, Unknown, effect))
        }
        Event::LeaseExpired => {
            let effect = schedule_reconcile(core.reconcile_inconclusive);
            edge(core, kind, &[InFlight, Reconciling], Unknown, effect)
        }
        Event::ReconcileStarted => {
            let effect = Effect::RunReconcile {
                attempt_seq: core.attempt_seq,
            };
            edge(core, kind, &[Unknown, FailedTerminal], Reconciling, effect)
        }
        Event::ReconcileFoundApplied {
            attempt_seq,
            entity,
            as_authorised,
        } => {
            about_attempt(core, kind, Reconciling, *attempt_seq)?;
            applied(core, entity, *as_authorised)
        }
        Event::ReconcileConfirmedAbsent {
            attempt_seq,
            pagination_exhausted,
            lag_elapsed,
        } => {
            about_attempt(core, kind, Reconciling, *attempt_seq)?;
            confirmed_absent(core, *pagination_exhausted, *lag_elapsed)
        }
        Event::ReconcileInconclusive { attempt_seq } => {
            about_attempt(core, kind, Reconciling, *attempt_seq)?;
            Ok(reconcile_inconclusive(core))
        }
        Event::RetryAuthorized => reauthorize(core, kind),
        Event::Reopened => match core.state {
            // A rejection is the rail's word about one request, not a proof about the intent (a
            // duplicate-receipt 400 means the money *did* move): reconcile before any new attempt.
            FailedTerminal => Ok(to(core, Unknown, schedule_reconcile(0))),
            _ => reauthorize(core, kind),
        },
        Event::OperatorConfirmedApplied { entity } => {
            require(core, kind, &[Quarantined])?;
            // Nothing was ever sent, so nothing of ours can exist on the rail.
            if core.attempt_seq == 0 {
                return Err(Illegal::NeverAttempted);
            }
            if let Some(recorded) = core.entity_id.as_ref().filter(|id| **id != entity.id) {
                return Err(Illegal::OtherEntity {
                    recorded: recorded.clone(),
                    offered: entity.id.clone(),
                });
            }
            // The operator accepts what the rail did, as it did it.
            applied(core, entity, true)
        }
        Event::OperatorConfirmedNotApplied { lag_elapsed } => {
            require(core, kind, &[Quarantined])?;
            // Money that the rail showed moving cannot be un-moved by a word: that would
            // re-authorise, and pay, a second time.
            if let Some(entity_id) = &core.entity_id {
                return Err(Illegal::EntityRecorded {
                    entity_id: entity_id.clone(),
                });
            }
            if !lag_elapsed {
                return Err(Illegal::LagNotElapsed);
            }
            Ok(to(core, ConfirmedNotApplied, Effect::None))
        }
    }
}

fn attempt_started(core: &IntentCore, kind: EventKind) -> Result<Step, Illegal> {
    require(core, kind, &[State::Authorized])?;
    if core.attempt_seq >= ATTEMPT_SEQ_MAX {
        return Err(Illegal::AttemptLimitReached);
    }
    let attempt_seq = core.attempt_seq + 1;
    let mut next = to(core, State::InFlight, Effect::CallRail { attempt_seq });
    next.next.attempt_seq = attempt_seq;
    next.next.reconcile_inconclusive = 0;
    Ok(next)
}

/// Absence is proven only by a reading that saw every page after the rail's lag had passed.
fn confirmed_absent(
    core: &IntentCore,
    exhausted: bool,
    lag_elapsed: bool,
) -> Result<Step, Illegal> {
    if !exhausted {
        return Err(Illegal::PaginationNotExhausted);
    }
    if !lag_elapsed {
        return Err(Illegal::LagNotElapsed);
    }
    Ok(to(core, State::ConfirmedNotApplied, Effect::None))
}

/// Back to `UNKNOWN` with a longer delay, or, on the 6th inconclusive pass, to `QUARANTINED`.
fn reconcile_inconclusive(core: &IntentCore) -> Step {
    let inconclusive = core.reconcile_inconclusive + 1;
    let mut next = if inconclusive >= RECONCILE_INCONCLUSIVE_MAX {
        to(core, State::Quarantined, Effect::AwaitHuman)
    } else {
        to(core, State::Unknown, schedule_reconcile(inconclusive))
    };
    next.next.reconcile_inconclusive = inconclusive;
    next
}

/// The only edges into `AUTHORIZED` once an attempt has been made: out of `CONFIRMED_NOT_APPLIED`.
fn reauthorize(core: &IntentCore, kind: EventKind) -> Result<Step, Illegal> {
    require(core, kind, &[State::ConfirmedNotApplied])?;
    if core.attempt_seq >= ATTEMPT_SEQ_MAX {
        return Err(Illegal::AttemptLimitReached);
    }
    Ok(to(core, State::Authorized, Effect::StartAttempt))
}

/// Our entity is on the rail: `APPLIED`, or, when its terms are not the ones authorised,
/// `QUARANTINED` with the entity recorded, which no edge leads back to a retry from.
fn applied(core: &IntentCore, entity: &EntityRef, as_authorised: bool) -> Result<Step, Illegal> {
    if entity.id.is_empty() || entity.id.len() > ENTITY_ID_LENGTH_MAX {
        return Err(Illegal::MalformedEntityId);
    }
    if entity.stamp.as_ref() != Some(&core.sik) {
        return Err(Illegal::ForeignStamp {
            entity_id: entity.id.clone(),
        });
    }
    let mut next = if as_authorised {
        to(core, State::Applied, Effect::None)
    } else {
        to(core, State::Quarantined, Effect::AwaitHuman)
    };
    next.next.entity_id = Some(entity.id.clone());
    Ok(next)
}

/// The reconcile delay after `inconclusive` inconclusive passes: doubling from the minimum, capped.
pub fn reconcile_delay_ms(inconclusive: u32) -> u64 {
    let shift = inconclusive.min(RECONCILE_INCONCLUSIVE_MAX);
    (RECONCILE_MIN_DELAY_MS << shift).min(RECONCILE_DELAY_MS_MAX)
}

fn schedule_reconcile(inconclusive: u32) -> Effect {
    Effect::ScheduleReconcile {
        delay_ms: reconcile_delay_ms(inconclusive),
    }
}

fn require(core: &IntentCore, event: EventKind, sources: &[State]) -> Result<(), Illegal> {
    if sources.contains(&core.state) {
        Ok(())
    } else {
        Err(Illegal::NoEdge {
            state: core.state,
            event,
        })
    }
}

/// An outcome is accepted only in `source` and only for the current attempt: a late reply, or a
/// pass started for an earlier attempt, must not settle this one.
fn about_attempt(
    core: &IntentCore,
    event: EventKind,
    source: State,
    attempt_seq: u32,
) -> Result<(), Illegal> {
    require(core, event, &[source])?;
    require_current_attempt(core, attempt_seq)
}

fn require_current_attempt(core: &IntentCore, attempt_seq: u32) -> Result<(), Illegal> {
    if attempt_seq == core.attempt_seq {
        Ok(())
    } else {
        Err(Illegal::StaleAttempt {
            current: core.attempt_seq,
            got: attempt_seq,
        })
    }
}

fn edge(
    core: &IntentCore,
    event: EventKind,
    sources: &[State],
    target: State,
    effect: Effect,
) -> Result<Step, Illegal> {
    require(core, event, sources)?;
    Ok(to(core, target, effect))
}

/// Moves to `target`, keeping the counters; leaving `QUARANTINED` for a settled state starts the
/// inconclusive count afresh, since the operator's word settled what the passes could not.
fn to(core: &IntentCore, target: State, effect: Effect) -> Step {
    let mut next = core.clone();
    next.state = target;
    if core.state == State::Quarantined {
        next.reconcile_inconclusive = 0;
    }
    Step { next, effect }
}

/// The core sentence, checked on every accepted step: the only edge into a rail call is
/// `AUTHORIZED → IN_FLIGHT`, and after the first attempt the only edge into `AUTHORIZED` is from
/// `CONFIRMED_NOT_APPLIED`.
fn assert_core_sentence(core: &IntentCore, step: &Step) {
    let calls_rail = matches!(step.effect, Effect::CallRail { .. });
    let into_flight = core.state == State::Authorized && step.next.state == State::InFlight;
    assert_eq!(
        calls_rail, into_flight,
        "a rail call outside AUTHORIZED → IN_FLIGHT"
    );
    if step.next.state == State::Authorized && core.attempt_seq >= 1 {
        assert_eq!(
            core.state,
            State::ConfirmedNotApplied,
            "re-authorised without proof of absence"
        );
    }
    assert!(
        step.next.attempt_seq >= core.attempt_seq,
        "attempt_seq went backwards"
    );
    assert!(
        core.entity_id.is_none() || step.next.entity_id == core.entity_id,
        "a recorded entity was dropped or replaced"
    );
    if core.state.is_absorbing() {
        unreachable!("an absorbing state accepted an event");
    }
}
