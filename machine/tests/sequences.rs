//! Arbitrary event sequences through `step`: no panic, every refusal is typed and leaves the core
//! as it was, and every accepted history satisfies the invariant predicates.

use interlock_machine::invariants::{self, Record};
use interlock_machine::table::representative;
use interlock_machine::*;
use interlock_spec::ids::Sik;
use proptest::prelude::*;

const EVENTS_PER_CASE_MAX: usize = 64;

fn ours() -> Sik {
    Sik::parse("PROPTESTPROPTESTPROPTESTPROPTEST").unwrap()
}

fn entity() -> impl Strategy<Value = EntityRef> {
    let stamp = prop_oneof![
        Just(Some(ours())),
        Just(Some(Sik::parse(&"Z".repeat(32)).unwrap())),
        Just(None),
    ];
    (
        prop_oneof![
            Just("rfnd_1".to_owned()),
            Just("rfnd_2".to_owned()),
            Just(String::new())
        ],
        stamp,
    )
        .prop_map(|(id, stamp)| EntityRef { id, stamp })
}

fn event() -> impl Strategy<Value = Event> {
    let attempt = 0u32..4;
    prop_oneof![
        Just(Event::GatesPassed),
        Just(Event::GatesHeld),
        Just(Event::GatesBlocked),
        Just(Event::HoldReleased),
        Just(Event::HoldRejected),
        Just(Event::Quarantine),
        Just(Event::AttemptStarted),
        (attempt.clone(), entity(), any::<bool>()).prop_map(
            |(attempt_seq, entity, as_authorised)| Event::RailApplied {
                attempt_seq,
                entity,
                as_authorised,
            }
        ),
        attempt
            .clone()
            .prop_map(|attempt_seq| Event::RailRejected { attempt_seq }),
        attempt
            .clone()
            .prop_map(|attempt_seq| Event::RailAmbiguous { attempt_seq }),
        Just(Event::LeaseExpired),
        Just(Event::ReconcileStarted),
        (attempt.clone(), entity(), any::<bool>()).prop_map(
            |(attempt_seq, entity, as_authorised)| Event::ReconcileFoundApplied {
                attempt_seq,
                entity,
                as_authorised,
            }
        ),
        (attempt.clone(), any::<bool>(), any::<bool>()).prop_map(
            |(attempt_seq, pagination_exhausted, lag_elapsed)| Event::ReconcileConfirmedAbsent {
                attempt_seq,
                pagination_exhausted,
                lag_elapsed,
            }
        ),
        attempt.prop_map(|attempt_seq| Event::ReconcileInconclusive { attempt_seq }),
        Just(Event::RetryAuthorized),
        Just(Event::Reopened),
        entity().prop_map(|entity| Event::OperatorConfirmedApplied { entity }),
        any::<bool>().prop_map(|lag_elapsed| Event::OperatorConfirmedNotApplied { lag_elapsed }),
    ]
}

/// Drives `events` from `start`, recording what a ledger would: one record per accepted step and
/// a rail call for each `CallRail` effect. Returns the history and how many steps were accepted.
fn drive(start: IntentCore, events: &[Event]) -> (Vec<Record>, usize) {
    let mut core = start.clone();
    let mut history = vec![Record::Inserted {
        seq: 1,
        core: start,
    }];
    let mut accepted = 0;
    for event in events {
        match step(&core, event) {
            Ok(next) => {
                accepted += 1;
                let seq = history
                    .iter()
                    .filter(|r| !matches!(r, Record::RailCall { .. }))
                    .count() as u64
                    + 1;
                history.push(Record::Transition {
                    seq,
                    from: core.clone(),
                    event: event.clone(),
                    to: next.next.clone(),
                    effect: next.effect,
                });
                if let Effect::CallRail { attempt_seq } = next.effect {
                    history.push(Record::RailCall {
                        sik: core.sik.clone(),
                        attempt_seq,
                    });
                }
                core = next.next;
            }
            Err(refusal) => {
                // Typed, and about this core: a refusal names the state the intent is really in.
                if let Illegal::NoEdge { state, event: kind } = refusal {
                    assert_eq!((state, kind), (core.state, event.kind()));
                }
                if let Illegal::StaleAttempt { current, .. } = refusal {
                    assert_eq!(current, core.attempt_seq);
                }
            }
        }
    }
    (history, accepted)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn histories_from_proposed_satisfy_every_invariant(events in prop::collection::vec(event(), 0..EVENTS_PER_CASE_MAX)) {
        let (history, _) = drive(IntentCore::proposed(ours()), &events);
        prop_assert_eq!(invariants::check_history(&history), Ok(()));
    }

    #[test]
    fn from_any_state_steps_keep_i4_i5_and_the_core_sentence(
        start in prop::sample::select(State::ALL.to_vec()),
        events in prop::collection::vec(event(), 0..EVENTS_PER_CASE_MAX),
    ) {
        let mut core = representative(start);
        core.sik = ours();
        let (history, _) = drive(core, &events);
        prop_assert_eq!(invariants::i4_absorbing(&history), Ok(()));
        prop_assert_eq!(invariants::i5_monotonic(&history), Ok(()));
        prop_assert_eq!(invariants::core_sentence(&history), Ok(()));
        prop_assert_eq!(invariants::i6_audit_gapless(&history), Ok(()));
    }
}

/// The predicates are not vacuous: hand-made histories that break each one are caught.
#[test]
fn each_predicate_catches_its_violation() {
    let sik = ours();
    let proposed = IntentCore::proposed(sik.clone());
    let mut authorized = proposed.clone();
    authorized.state = State::Authorized;
    let mut flying = authorized.clone();
    flying.state = State::InFlight;
    flying.attempt_seq = 1;
    let mut unknown = flying.clone();
    unknown.state = State::Unknown;
    let mut applied = flying.clone();
    applied.state = State::Applied;
    applied.entity_id = Some("rfnd_1".into());
    let t = |seq, from: &IntentCore, event: Event, to: &IntentCore, effect| Record::Transition {
        seq,
        from: from.clone(),
        event,
        to: to.clone(),
        effect,
    };
    let insert = Record::Inserted {
        seq: 1,
        core: proposed.clone(),
    };
    let good = vec![
        insert.clone(),
        t(
            2,
            &proposed,
            Event::GatesPassed,
            &authorized,
            Effect::StartAttempt,
        ),
        t(
            3,
            &authorized,
            Event::AttemptStarted,
            &flying,
            Effect::CallRail { attempt_seq: 1 },
        ),
        Record::RailCall {
            sik: sik.clone(),
            attempt_seq: 1,
        },
    ];
    assert_eq!(invariants::check_history(&good), Ok(()));

    let twice = [insert.clone(), insert.clone()];
    assert_eq!(
        invariants::i1_single_intent(&twice).unwrap_err().invariant,
        "I1"
    );
    let call_first = [
        insert.clone(),
        Record::RailCall {
            sik: sik.clone(),
            attempt_seq: 1,
        },
    ];
    assert_eq!(
        invariants::i2_write_ahead(&call_first)
            .unwrap_err()
            .invariant,
        "I2"
    );
    let mut late = good[..3].to_vec();
    late.push(t(4, &flying, Event::LeaseExpired, &unknown, Effect::None));
    late.push(Record::RailCall {
        sik: sik.clone(),
        attempt_seq: 1,
    });
    assert_eq!(
        invariants::i2_write_ahead(&late).unwrap_err().invariant,
        "I2",
        "a call sent after its attempt was expired is a late send"
    );
    let mut resent = good.clone();
    resent.push(Record::RailCall {
        sik: sik.clone(),
        attempt_seq: 1,
    });
    assert_eq!(
        invariants::i3_no_blind_retries(&resent)
            .unwrap_err()
            .invariant,
        "I3"
    );
    let mut flying2 = flying.clone();
    flying2.attempt_seq = 2;
    let mut blind = good.clone();
    blind.push(t(
        4,
        &flying,
        Event::RailAmbiguous { attempt_seq: 1 },
        &unknown,
        Effect::None,
    ));
    let mut unknown_authorized = unknown.clone();
    unknown_authorized.state = State::Authorized;
    blind.push(t(
        5,
        &unknown,
        Event::RetryAuthorized,
        &unknown_authorized,
        Effect::StartAttempt,
    ));
    blind.push(t(
        6,
        &unknown_authorized,
        Event::AttemptStarted,
        &flying2,
        Effect::CallRail { attempt_seq: 2 },
    ));
    assert_eq!(
        invariants::i3_no_blind_retries(&blind)
            .unwrap_err()
            .invariant,
        "I3"
    );
    assert_eq!(
        invariants::core_sentence(&blind).unwrap_err().invariant,
        "core-sentence"
    );
    let reopened = [
        insert.clone(),
        t(2, &applied, Event::GatesBlocked, &proposed, Effect::None),
    ];
    assert_eq!(
        invariants::i4_absorbing(&reopened).unwrap_err().invariant,
        "I4"
    );
    let skipped = [
        insert.clone(),
        t(
            2,
            &authorized,
            Event::AttemptStarted,
            &flying2,
            Effect::CallRail { attempt_seq: 2 },
        ),
    ];
    assert_eq!(
        invariants::i5_monotonic(&skipped).unwrap_err().invariant,
        "I5"
    );
    let gap = [
        insert,
        t(
            3,
            &proposed,
            Event::GatesPassed,
            &authorized,
            Effect::StartAttempt,
        ),
    ];
    assert_eq!(
        invariants::i6_audit_gapless(&gap).unwrap_err().invariant,
        "I6"
    );

    let stamped = |id: &str| RailEntity {
        id: id.into(),
        stamp: Some(sik.clone()),
    };
    assert_eq!(invariants::never_two(&[stamped("rfnd_1")]), Ok(()));
    assert_eq!(
        invariants::never_two(&[stamped("rfnd_1"), stamped("rfnd_2")])
            .unwrap_err()
            .invariant,
        "never-two"
    );
    assert_eq!(
        invariants::no_phantom_success([&applied], &[stamped("rfnd_1")]),
        Ok(())
    );
    assert_eq!(
        invariants::no_silent_loss([&applied], &[stamped("rfnd_1")]),
        Ok(())
    );
    assert_eq!(
        invariants::no_silent_loss([&unknown], &[stamped("rfnd_1")])
            .unwrap_err()
            .invariant,
        "no-silent-loss"
    );
    assert_eq!(
        invariants::no_silent_loss([&applied], &[stamped("rfnd_2")])
            .unwrap_err()
            .invariant,
        "no-silent-loss",
        "APPLIED with another entity's id is a loss of the real one"
    );
    let foreign = RailEntity {
        id: "rfnd_1".into(),
        stamp: None,
    };
    assert_eq!(
        invariants::no_phantom_success([&applied], &[foreign])
            .unwrap_err()
            .invariant,
        "no-phantom-success"
    );
}
