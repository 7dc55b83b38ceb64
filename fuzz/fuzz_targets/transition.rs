//! Arbitrary event sequences through `machine::step` from every starting state: nothing
//! panics, every refusal is a typed `Illegal`, and the invariant predicates hold over the
//! accepted history (calls recorded exactly when the effect asks for one).
#![no_main]

use arbitrary::{Arbitrary, Result, Unstructured};
use interlock_machine::invariants::{self, Record};
use interlock_machine::{
    ATTEMPT_SEQ_MAX, Effect, EntityRef, Event, EventKind, Illegal, IntentCore,
    RECONCILE_INCONCLUSIVE_MAX, State, step,
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
    // Every kind, by the machine's own list; the match has no wildcard, so an event added to
    // the machine does not compile here until the fuzzer can make it.
    let kind = EventKind::ALL[usize::from(u8::arbitrary(u)?) % EventKind::ALL.len()];
    Ok(match kind {
        EventKind::GatesPassed => Event::GatesPassed,
        EventKind::GatesHeld => Event::GatesHeld,
        EventKind::GatesBlocked => Event::GatesBlocked,
        EventKind::HoldReleased => Event::HoldReleased,
        EventKind::HoldRejected => Event::HoldRejected,
        EventKind::Quarantine => Event::Quarantine,
        EventKind::AttemptStarted => Event::AttemptStarted,
        EventKind::RailApplied => Event::RailApplied {
            attempt_seq,
            entity: entity(u, ours)?,
            as_authorised: bool::arbitrary(u)?,
        },
        EventKind::RailRejected => Event::RailRejected { attempt_seq },
        EventKind::RailAmbiguous => Event::RailAmbiguous { attempt_seq },
        EventKind::LeaseExpired => Event::LeaseExpired,
        EventKind::ReconcileStarted => Event::ReconcileStarted,
        EventKind::ReconcileFoundApplied => Event::ReconcileFoundApplied {
            attempt_seq,
            entity: entity(u, ours)?,
            as_authorised: bool::arbitrary(u)?,
        },
        EventKind::ReconcileConfirmedAbsent => Event::ReconcileConfirmedAbsent {
            attempt_seq,
            pagination_exhausted: bool::arbitrary(u)?,
            lag_elapsed: bool::arbitrary(u)?,
        },
        EventKind::ReconcileInconclusive => Event::ReconcileInconclusive { attempt_seq },
        EventKind::RetryAuthorized => Event::RetryAuthorized,
        EventKind::Reopened => Event::Reopened,
        EventKind::OperatorConfirmedApplied => Event::OperatorConfirmedApplied {
            entity: entity(u, ours)?,
        },
        EventKind::OperatorConfirmedNotApplied => Event::OperatorConfirmedNotApplied {
            lag_elapsed: bool::arbitrary(u)?,
        },
    })
}

/// A refusal names what it refused: the state and event for a missing edge, the attempts for a
/// stale outcome, and a sentence either way.
fn refusal_is_typed(current: &IntentCore, event: &Event, illegal: &Illegal) {
    assert!(!illegal.to_string().is_empty(), "a refusal says why");
    match illegal {
        Illegal::NoEdge { state, event: kind } => {
            assert_eq!(*state, current.state, "{illegal}");
            assert_eq!(*kind, event.kind(), "{illegal}");
        }
        Illegal::StaleAttempt { current: now, got } => {
            assert_eq!(*now, current.attempt_seq, "{illegal}");
            assert_ne!(got, now, "{illegal}");
        }
        _ => {}
    }
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
        // A refusal is a value; a panic here is a finding. `step` is pure: the same question
        // gets the same answer.
        let answer = step(&current, &event);
        assert_eq!(answer, step(&current, &event), "step is deterministic");
        let accepted = match answer {
            Ok(accepted) => accepted,
            Err(illegal) => {
                refusal_is_typed(&current, &event, &illegal);
                continue;
            }
        };
        assert_eq!(accepted.next.sik, current.sik, "an intent keeps its key");
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
        // From a mid-way start every claim but I3 still holds (I3 needs the proof of absence
        // that came before the start, which a mid-way history does not show).
        for (name, check) in [
            ("I1", invariants::i1_single_intent as fn(&[Record]) -> _),
            ("I2", invariants::i2_write_ahead),
            ("I4", invariants::i4_absorbing),
            ("I5", invariants::i5_monotonic),
            ("I6", invariants::i6_audit_gapless),
            ("core sentence", invariants::core_sentence),
        ] {
            if let Err(violation) = check(&history) {
                panic!("{name}: {}\n{history:#?}", violation.detail);
            }
        }
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
