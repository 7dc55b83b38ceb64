//! The machine's edges, one claim per test.

use interlock_machine::table::{cells, representative, well_formed};
use interlock_machine::*;
use interlock_spec::ids::Sik;

fn sik() -> Sik {
    Sik::parse("EDGESEDGESEDGESEDGESEDGESEDGES22").unwrap()
}

fn ours(core: &IntentCore, id: &str) -> EntityRef {
    EntityRef {
        id: id.to_owned(),
        stamp: Some(core.sik.clone()),
    }
}

/// Applies events in order, panicking on a refusal; returns the last step.
fn run(core: IntentCore, events: &[Event]) -> Step {
    let mut last = Step {
        next: core,
        effect: Effect::None,
    };
    for event in events {
        last = step(&last.next, event).unwrap_or_else(|e| panic!("{event:?} refused: {e}"));
    }
    last
}

#[test]
fn happy_path_calls_the_rail_once_then_applies() {
    let core = IntentCore::proposed(sik());
    let authorized = run(core.clone(), &[Event::GatesPassed]);
    assert_eq!(
        (authorized.next.state, authorized.effect),
        (State::Authorized, Effect::StartAttempt)
    );
    let flying = run(authorized.next, &[Event::AttemptStarted]);
    assert_eq!(flying.effect, Effect::CallRail { attempt_seq: 1 });
    let entity = ours(&core, "rfnd_1");
    let applied = run(
        flying.next,
        &[Event::RailApplied {
            attempt_seq: 1,
            entity,
            as_authorised: true,
        }],
    );
    assert_eq!(applied.next.state, State::Applied);
    assert_eq!(applied.next.entity_id.as_deref(), Some("rfnd_1"));
}

#[test]
fn ambiguity_goes_to_reconciliation_and_only_proof_of_absence_reopens() {
    let core = IntentCore::proposed(sik());
    let unknown = run(
        core,
        &[
            Event::GatesPassed,
            Event::AttemptStarted,
            Event::RailAmbiguous { attempt_seq: 1 },
        ],
    );
    assert_eq!(unknown.next.state, State::Unknown);
    assert_eq!(
        unknown.effect,
        Effect::ScheduleReconcile {
            delay_ms: RECONCILE_MIN_DELAY_MS
        }
    );
    for blind in [
        Event::RetryAuthorized,
        Event::AttemptStarted,
        Event::GatesPassed,
        Event::Reopened,
    ] {
        assert!(
            matches!(step(&unknown.next, &blind), Err(Illegal::NoEdge { .. })),
            "{blind:?}"
        );
    }
    let absent = Event::ReconcileConfirmedAbsent {
        attempt_seq: 1,
        pagination_exhausted: true,
        lag_elapsed: true,
    };
    let retried = run(
        unknown.next,
        &[
            Event::ReconcileStarted,
            absent,
            Event::RetryAuthorized,
            Event::AttemptStarted,
        ],
    );
    assert_eq!(retried.effect, Effect::CallRail { attempt_seq: 2 });
    assert_eq!(retried.next.attempt_seq, 2);
}

#[test]
fn the_sixth_inconclusive_pass_quarantines() {
    let mut core = run(
        IntentCore::proposed(sik()),
        &[
            Event::GatesPassed,
            Event::AttemptStarted,
            Event::LeaseExpired,
        ],
    )
    .next;
    for pass in 1..RECONCILE_INCONCLUSIVE_MAX {
        let back = run(
            core,
            &[
                Event::ReconcileStarted,
                Event::ReconcileInconclusive { attempt_seq: 1 },
            ],
        );
        assert_eq!(back.next.state, State::Unknown, "pass {pass}");
        assert_eq!(
            back.effect,
            Effect::ScheduleReconcile {
                delay_ms: reconcile_delay_ms(pass)
            }
        );
        core = back.next;
    }
    let last = run(
        core,
        &[
            Event::ReconcileStarted,
            Event::ReconcileInconclusive { attempt_seq: 1 },
        ],
    );
    assert_eq!(
        (last.next.state, last.effect),
        (State::Quarantined, Effect::AwaitHuman)
    );
    let resolved = run(
        last.next,
        &[Event::OperatorConfirmedNotApplied { lag_elapsed: true }],
    );
    assert_eq!(
        (resolved.next.state, resolved.next.reconcile_inconclusive),
        (State::ConfirmedNotApplied, 0)
    );
}

#[test]
fn backoff_doubles_and_is_capped() {
    assert_eq!(reconcile_delay_ms(0), RECONCILE_MIN_DELAY_MS);
    assert_eq!(reconcile_delay_ms(1), 2 * RECONCILE_MIN_DELAY_MS);
    assert_eq!(reconcile_delay_ms(u32::MAX), RECONCILE_DELAY_MS_MAX);
    let delays: Vec<u64> = (0..10).map(reconcile_delay_ms).collect();
    assert!(delays.windows(2).all(|w| w[0] <= w[1]), "{delays:?}");
}

#[test]
fn a_rejection_is_reconciled_before_any_new_attempt() {
    let failed = run(
        IntentCore::proposed(sik()),
        &[
            Event::GatesPassed,
            Event::AttemptStarted,
            Event::RailRejected { attempt_seq: 1 },
        ],
    );
    assert_eq!(failed.next.state, State::FailedTerminal);
    let reopened = run(failed.next.clone(), &[Event::Reopened]);
    assert_eq!(
        reopened.next.state,
        State::Unknown,
        "REOPENED out of FAILED_TERMINAL must prove absence first"
    );
    assert!(matches!(
        step(&failed.next, &Event::RetryAuthorized),
        Err(Illegal::NoEdge { .. })
    ));
}

#[test]
fn replies_for_other_attempts_and_foreign_entities_are_refused() {
    let flying = run(
        IntentCore::proposed(sik()),
        &[Event::GatesPassed, Event::AttemptStarted],
    )
    .next;
    let stale = step(&flying, &Event::RailAmbiguous { attempt_seq: 0 });
    assert_eq!(stale, Err(Illegal::StaleAttempt { current: 1, got: 0 }));
    let replayed = EntityRef {
        id: "rfnd_someone_else".into(),
        stamp: Some(Sik::parse(&"B".repeat(32)).unwrap()),
    };
    let refused = step(
        &flying,
        &Event::RailApplied {
            attempt_seq: 1,
            entity: replayed,
            as_authorised: true,
        },
    );
    assert_eq!(
        refused,
        Err(Illegal::ForeignStamp {
            entity_id: "rfnd_someone_else".into()
        })
    );
    let unstamped = EntityRef {
        id: "rfnd_x".into(),
        stamp: None,
    };
    assert!(matches!(
        step(
            &flying,
            &Event::RailApplied {
                attempt_seq: 1,
                entity: unstamped,
                as_authorised: true,
            }
        ),
        Err(Illegal::ForeignStamp { .. })
    ));
    let empty = EntityRef {
        id: String::new(),
        stamp: Some(sik()),
    };
    assert_eq!(
        step(
            &flying,
            &Event::RailApplied {
                attempt_seq: 1,
                entity: empty,
                as_authorised: true,
            }
        ),
        Err(Illegal::MalformedEntityId)
    );
}

#[test]
fn absence_needs_exhausted_pages_and_elapsed_lag() {
    let reconciling = representative(State::Reconciling);
    let early = Event::ReconcileConfirmedAbsent {
        attempt_seq: 1,
        pagination_exhausted: true,
        lag_elapsed: false,
    };
    assert_eq!(step(&reconciling, &early), Err(Illegal::LagNotElapsed));
    let partial = Event::ReconcileConfirmedAbsent {
        attempt_seq: 1,
        pagination_exhausted: false,
        lag_elapsed: true,
    };
    assert_eq!(
        step(&reconciling, &partial),
        Err(Illegal::PaginationNotExhausted)
    );
}

#[test]
fn attempts_are_bounded() {
    let mut spent = representative(State::ConfirmedNotApplied);
    spent.attempt_seq = ATTEMPT_SEQ_MAX;
    assert_eq!(
        step(&spent, &Event::RetryAuthorized),
        Err(Illegal::AttemptLimitReached)
    );
    assert_eq!(
        step(&spent, &Event::Reopened),
        Err(Illegal::AttemptLimitReached)
    );
    let mut authorized = representative(State::Authorized);
    authorized.attempt_seq = ATTEMPT_SEQ_MAX;
    assert_eq!(
        step(&authorized, &Event::AttemptStarted),
        Err(Illegal::AttemptLimitReached)
    );
}

#[test]
fn an_intent_never_attempted_cannot_be_confirmed_applied() {
    let held = run(
        IntentCore::proposed(sik()),
        &[Event::GatesHeld, Event::Quarantine],
    )
    .next;
    let claim = Event::OperatorConfirmedApplied {
        entity: ours(&held, "rfnd_1"),
    };
    assert_eq!(step(&held, &claim), Err(Illegal::NeverAttempted));
    let cleared = run(
        held,
        &[
            Event::OperatorConfirmedNotApplied { lag_elapsed: true },
            Event::RetryAuthorized,
        ],
    );
    assert_eq!(cleared.next.state, State::Authorized);
}

#[test]
fn absorbing_states_refuse_every_event() {
    for state in [State::Applied, State::Blocked] {
        let core = representative(state);
        for kind in EventKind::ALL {
            let refusal = step(&core, &well_formed(kind, &core));
            assert_eq!(refusal, Err(Illegal::NoEdge { state, event: kind }));
        }
    }
}

/// The core sentence, read literally off the table of every (state, event) pair.
#[test]
fn the_core_sentence_holds_over_the_whole_table() {
    for state in State::ALL {
        let core = representative(state);
        for kind in EventKind::ALL {
            let Ok(next) = step(&core, &well_formed(kind, &core)) else {
                continue;
            };
            let calls = matches!(next.effect, Effect::CallRail { .. });
            assert_eq!(
                calls,
                (state, kind) == (State::Authorized, EventKind::AttemptStarted),
                "{state} {kind}"
            );
            if next.next.state == State::Authorized && core.attempt_seq >= 1 {
                assert_eq!(
                    state,
                    State::ConfirmedNotApplied,
                    "{kind} re-authorised out of {state}"
                );
            }
        }
    }
    let into_authorized: Vec<_> = cells()
        .into_iter()
        .filter(|c| {
            c.edge
                .as_ref()
                .is_some_and(|e| e.next.state == State::Authorized)
        })
        .map(|c| format!("{}/{}", c.state, c.event))
        .collect();
    assert_eq!(
        into_authorized,
        [
            "PROPOSED/GATES_PASSED",
            "HELD/HOLD_RELEASED",
            "CONFIRMED_NOT_APPLIED/RETRY_AUTHORIZED",
            "CONFIRMED_NOT_APPLIED/REOPENED"
        ]
    );
}

#[test]
fn state_names_round_trip_through_text_and_serde() {
    for state in State::ALL {
        assert_eq!(State::parse(state.as_str()), Some(state));
        assert_eq!(
            serde_json::to_string(&state).unwrap(),
            format!("\"{}\"", state.as_str())
        );
    }
    assert_eq!(State::parse("applied"), None);
    for kind in EventKind::ALL {
        assert_eq!(
            serde_json::to_string(&kind).unwrap(),
            format!("\"{}\"", kind.as_str())
        );
    }
    let event = Event::RailAmbiguous { attempt_seq: 3 };
    assert_eq!(
        serde_json::to_value(&event).unwrap(),
        serde_json::json!({"event": "RAIL_AMBIGUOUS", "attempt_seq": 3})
    );
}

#[test]
fn a_tampered_core_is_refused_loudly() {
    let mut tampered = representative(State::Applied);
    tampered.entity_id = None;
    let outcome = std::panic::catch_unwind(|| step(&tampered, &Event::GatesPassed));
    assert!(
        outcome.is_err(),
        "a core that breaks the machine's promises must not be stepped"
    );
}

#[test]
fn a_reconcile_conclusion_cannot_settle_a_later_attempt() {
    let mut second = representative(State::Reconciling);
    second.attempt_seq = 2;
    let stale_absent = Event::ReconcileConfirmedAbsent {
        attempt_seq: 1,
        pagination_exhausted: true,
        lag_elapsed: true,
    };
    assert_eq!(
        step(&second, &stale_absent),
        Err(Illegal::StaleAttempt { current: 2, got: 1 })
    );
    let stale_found = Event::ReconcileFoundApplied {
        attempt_seq: 1,
        entity: ours(&second, "rfnd_1"),
        as_authorised: true,
    };
    assert!(matches!(
        step(&second, &stale_found),
        Err(Illegal::StaleAttempt { .. })
    ));
    let pass = ReconcilePass::new(second.sik.clone(), 2, true);
    assert_eq!(
        step(&second, &pass.conclude()).map(|s| s.next.state),
        Ok(State::Unknown),
        "a pass that read nothing is inconclusive, for its own attempt"
    );
}

#[test]
fn a_rejection_is_verified_against_the_rail_before_it_counts_as_settled() {
    let flying = run(
        IntentCore::proposed(sik()),
        &[Event::GatesPassed, Event::AttemptStarted],
    )
    .next;
    let failed = run(flying, &[Event::RailRejected { attempt_seq: 1 }]);
    assert_eq!(failed.next.state, State::FailedTerminal);
    assert_eq!(
        failed.effect,
        Effect::ScheduleReconcile {
            delay_ms: RECONCILE_MIN_DELAY_MS
        }
    );
    assert!(!State::FailedTerminal.is_settled() && State::FailedTerminal.is_ambiguous());
    let entity = ours(&failed.next, "rfnd_dup_receipt");
    let found = run(
        failed.next,
        &[
            Event::ReconcileStarted,
            Event::ReconcileFoundApplied {
                attempt_seq: 1,
                entity,
                as_authorised: true,
            },
        ],
    );
    assert_eq!(
        found.next.state,
        State::Applied,
        "a 400 whose money moved is found and recorded"
    );
}

#[test]
fn an_operator_cannot_clear_a_quarantine_before_the_lag_has_passed() {
    let quarantined = representative(State::Quarantined);
    let early = Event::OperatorConfirmedNotApplied { lag_elapsed: false };
    assert_eq!(step(&quarantined, &early), Err(Illegal::LagNotElapsed));
}

#[test]
fn money_moved_other_than_authorised_is_quarantined_with_its_entity_and_never_retried() {
    let core = IntentCore::proposed(sik());
    let flying = run(core.clone(), &[Event::GatesPassed, Event::AttemptStarted]);
    let differing = Event::RailApplied {
        attempt_seq: 1,
        entity: ours(&core, "rfnd_wrong"),
        as_authorised: false,
    };
    let held = run(flying.next.clone(), &[differing]);
    assert_eq!(
        (held.next.state, held.effect, held.next.entity_id.as_deref()),
        (State::Quarantined, Effect::AwaitHuman, Some("rfnd_wrong"))
    );
    // No word of an operator's can turn moved money into "not applied", so nothing re-authorises.
    let not_applied = Event::OperatorConfirmedNotApplied { lag_elapsed: true };
    assert_eq!(
        step(&held.next, &not_applied),
        Err(Illegal::EntityRecorded {
            entity_id: "rfnd_wrong".into()
        })
    );
    for event in [
        Event::RetryAuthorized,
        Event::Reopened,
        Event::AttemptStarted,
    ] {
        assert!(step(&held.next, &event).is_err(), "{event:?} accepted");
    }
    let other = Event::OperatorConfirmedApplied {
        entity: ours(&core, "rfnd_other"),
    };
    assert!(matches!(
        step(&held.next, &other),
        Err(Illegal::OtherEntity { .. })
    ));
    let accepted = Event::OperatorConfirmedApplied {
        entity: ours(&core, "rfnd_wrong"),
    };
    let applied = run(held.next, &[accepted]);
    assert_eq!(
        (applied.next.state, applied.next.entity_id.as_deref()),
        (State::Applied, Some("rfnd_wrong"))
    );
}

#[test]
fn a_reconcile_pass_that_finds_money_moved_otherwise_quarantines_too() {
    let core = IntentCore::proposed(sik());
    let reconciling = run(
        core.clone(),
        &[
            Event::GatesPassed,
            Event::AttemptStarted,
            Event::RailAmbiguous { attempt_seq: 1 },
            Event::ReconcileStarted,
        ],
    );
    let found = Event::ReconcileFoundApplied {
        attempt_seq: 1,
        entity: ours(&core, "rfnd_found"),
        as_authorised: false,
    };
    let held = run(reconciling.next, &[found]);
    assert_eq!(
        (held.next.state, held.next.entity_id.as_deref()),
        (State::Quarantined, Some("rfnd_found"))
    );
}

#[test]
fn an_audit_record_written_before_the_terms_check_reads_as_authorised() {
    // Schema version 3 and earlier wrote these events without `as_authorised`; every stamped
    // entity was then taken as authorised, and replaying the record must say so.
    for (json, kind) in [
        (
            r#"{"event":"RAIL_APPLIED","attempt_seq":1,"entity":{"id":"rfnd_1","stamp":null}}"#,
            EventKind::RailApplied,
        ),
        (
            r#"{"event":"RECONCILE_FOUND_APPLIED","attempt_seq":2,"entity":{"id":"rfnd_1","stamp":null}}"#,
            EventKind::ReconcileFoundApplied,
        ),
    ] {
        let event: Event = serde_json::from_str(json).unwrap();
        assert_eq!(event.kind(), kind);
        let as_authorised = match event {
            Event::RailApplied { as_authorised, .. }
            | Event::ReconcileFoundApplied { as_authorised, .. } => as_authorised,
            other => panic!("{other:?}"),
        };
        assert!(as_authorised, "{json}");
    }
}
