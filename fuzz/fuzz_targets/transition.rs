//! Arbitrary event sequences through `machine::step` from every starting state: nothing
//! panics, every refusal is a typed `Illegal`, and the invariant predicates hold over the
//! accepted history (calls recorded exactly when the effect asks for one).
#![no_main]

use arbitrary::{Arbitrary, Result, Unstructured};
use interlock_machine::invariants::{self, Record};
use interlock_machine::{
    ATTEMPT_SEQ_MAX, Effect, EntityRef, Event, IntentCore, RECONCILE_INCONCLUSIVE_MAX, State, step,
};
use interlock_spec::ids::Sik;
use libfuzzer_sys::fuzz_target;

/// Events in one run: more than any path through the machine needs.
const EVENTS_MAX: usize = 64;

fn sik(u: &mut Unstructured<'_>) -> Result<Sik> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let first = ALPHABET[usize::from(u8::arbitrary(u)?) % ALPHABET.len()] as char;
    Ok(Sik::parse(&first.to_string().repeat(32)).expect("32 base32 characters"))
}

/// A core that keeps the machine's promises, in any of the 11 states.
fn core(u: &mut Unstructured<'_>, sik: &Sik) -> Result<IntentCore> {
    let state = State::ALL[usize::from(u8::arbitrary(u)?) % State::ALL.len()];
    let attempt_seq = match state {
        State::Proposed | State::Held => 0,
        State::InFlight
        | State::Applied
        | State::FailedTerminal
        | State::Unknown
        | State::Reconciling => u.int_in_range(1..=ATTEMPT_SEQ_MAX)?,
        _ => u.int_in_range(0..=ATTEMPT_SEQ_MAX)?,
    };
    let reconcile_inconclusive = if state == State::Quarantined {
        u.int_in_range(0..=RECONCILE_INCONCLUSIVE_MAX)?
    } else {
        u.int_in_range(0..=RECONCILE_INCONCLUSIVE_MAX - 1)?
    };
    let entity_id = (state == State::Applied).then(|| "rfnd_fuzz".to_owned());
    Ok(IntentCore {
        sik: sik.clone(),
        state,
        attempt_seq,
        reconcile_inconclusive,
        entity_id,
    })
}

fn entity(u: &mut Unstructured<'_>, ours: &Sik) -> Result<EntityRef> {
    let id_len = u.int_in_range(0..=70)?;
    let stamp = match u8::arbitrary(u)? % 3 {
        0 => None,
        1 => Some(ours.clone()),
        _ => Some(sik(u)?),
    };
    Ok(EntityRef {
        id: "e".repeat(id_len),
        stamp,
    })
}

fn event(u: &mut Unstructured<'_>, ours: &Sik, current: u32) -> Result<Event> {
    // Mostly the current attempt, sometimes a stale or future one.
    let attempt_seq = match u8::arbitrary(u)? % 4 {
        0 => u.int_in_range(0..=ATTEMPT_SEQ_MAX + 1)?,
        _ => current,
    };
    Ok(match u8::arbitrary(u)? % 19 {
        0 => Event::GatesPassed,
        1 => Event::GatesHeld,
        2 => Event::GatesBlocked,
        3 => Event::HoldReleased,
        4 => Event::HoldRejected,
        5 => Event::Quarantine,
        6 => Event::AttemptStarted,
        7 => Event::RailApplied {
            attempt_seq,
            entity: entity(u, ours)?,
        },
        8 => Event::RailRejected { attempt_seq },
        9 => Event::RailAmbiguous { attempt_seq },
        10 => Event::LeaseExpired,
        11 => Event::ReconcileStarted,
        12 => Event::ReconcileFoundApplied {
            attempt_seq,
            entity: entity(u, ours)?,
        },
        13 => Event::ReconcileConfirmedAbsent {
            attempt_seq,
            pagination_exhausted: bool::arbitrary(u)?,
            lag_elapsed: bool::arbitrary(u)?,
        },
        14 => Event::ReconcileInconclusive { attempt_seq },
        15 => Event::RetryAuthorized,
        16 => Event::Reopened,
        17 => Event::OperatorConfirmedApplied {
            entity: entity(u, ours)?,
        },
        _ => Event::OperatorConfirmedNotApplied {
            lag_elapsed: bool::arbitrary(u)?,
        },
    })
}

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let ours = sik(u)?;
    let start = core(u, &ours)?;
    // Only a history that starts at PROPOSED is a whole history the predicates can judge.
    let whole = start.state == State::Proposed;
    let mut seq = 1;
    let mut history = vec![Record::Inserted {
        seq,
        core: start.clone(),
    }];
    let mut current = start;
    for _ in 0..EVENTS_MAX {
        if u.is_empty() {
            break;
        }
        let event = event(u, &ours, current.attempt_seq)?;
        // A refusal is a value; a panic here is a finding.
        let Ok(accepted) = step(&current, &event) else {
            continue;
        };
        seq += 1;
        history.push(Record::Transition {
            seq,
            from: current.clone(),
            event,
            to: accepted.next.clone(),
            effect: accepted.effect,
        });
        if let Effect::CallRail { attempt_seq } = accepted.effect {
            history.push(Record::RailCall {
                sik: ours.clone(),
                attempt_seq,
            });
        }
        current = accepted.next;
    }
    if whole {
        if let Err(violation) = invariants::check_history(&history) {
            panic!(
                "{}: {}\n{history:#?}",
                violation.invariant, violation.detail
            );
        }
    } else {
        // From a mid-way start, the edge-local claims still hold.
        invariants::core_sentence(&history).expect("core sentence");
        invariants::i4_absorbing(&history).expect("I4");
        invariants::i5_monotonic(&history).expect("I5");
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
