//! Two engines (two connections, as two processes would have) on one ledger file, racing.

mod common;

use common::*;
use interlock_engine::{Answer, Outcome};
use interlock_spec::mandate::Mandate;
use interlock_spec::reason::ReasonCode;
use std::sync::{Arc, Barrier};

const ROUNDS: u64 = 40;

#[test]
fn two_engines_proposing_the_same_refund_make_one_rail_call() {
    let world = World::new();
    let rail = Arc::new(world.rail());
    let a = world.engine(Arc::clone(&rail), "engine_a");
    let b = world.engine(Arc::clone(&rail), "engine_b");
    for round in 0..ROUNDS {
        let payment = format!("pay_race{round}");
        rail.add_payment(&payment, 100_000, 0, None);
        let barrier = &Barrier::new(2);
        let (a, b, payment) = (&a, &b, payment.as_str());
        let (x, y): (Answer, Answer) = std::thread::scope(|s| {
            let x = s.spawn(move || {
                barrier.wait();
                a.propose(&refund(payment, 10_000), Some(&live())).unwrap()
            });
            let y = s.spawn(move || {
                barrier.wait();
                b.propose(&refund(payment, 10_000), Some(&live())).unwrap()
            });
            (x.join().unwrap(), y.join().unwrap())
        });
        assert_eq!(x.sik, y.sik);
        let applied = [&x, &y]
            .iter()
            .filter(|a| a.reason_code == ReasonCode::Applied)
            .count();
        assert_eq!(applied, 1, "round {round}: {x:?} {y:?}");
        let other = if x.reason_code == ReasonCode::Applied {
            &y
        } else {
            &x
        };
        assert!(
            matches!(
                other.reason_code,
                ReasonCode::IdempotentReplay | ReasonCode::InProgress
            ),
            "round {round}: {other:?}"
        );
    }
    assert_eq!(
        rail.executed().len() as u64,
        ROUNDS,
        "one rail call per refund"
    );
    assert_eq!(rail.entities().len() as u64, ROUNDS);
    assert_all_invariants(&world, a.ledger(), &rail);
}

#[test]
fn concurrent_refunds_cannot_together_exceed_a_window() {
    let yaml = mandate_yaml().replace("max_calls: 40", "max_calls: 1");
    let world = World::new();
    let rail = Arc::new(world.rail());
    let a = world.engine_with(
        Arc::clone(&rail),
        "engine_a",
        Mandate::parse_yaml(&yaml).unwrap(),
    );
    let b = world.engine_with(
        Arc::clone(&rail),
        "engine_b",
        Mandate::parse_yaml(&yaml).unwrap(),
    );
    for round in 0..ROUNDS {
        let barrier = &Barrier::new(2);
        let (a, b) = (&a, &b);
        let (x, y) = std::thread::scope(|s| {
            let x = s.spawn(move || {
                barrier.wait();
                a.propose(&refund("pay_1002", 1_000 + round), Some(&live()))
                    .unwrap()
            });
            let y = s.spawn(move || {
                barrier.wait();
                b.propose(&refund("pay_2000", 1_000 + round), Some(&live()))
                    .unwrap()
            });
            (x.join().unwrap(), y.join().unwrap())
        });
        let outcomes = [x.outcome, y.outcome];
        let applied = outcomes.iter().filter(|o| **o == Outcome::Applied).count();
        // The first round: one of the two fits the window of one call. Later rounds: none.
        let expected = usize::from(round == 0);
        assert_eq!(applied, expected, "round {round}: {x:?} {y:?}");
        for answer in [&x, &y] {
            if answer.outcome != Outcome::Applied {
                assert_eq!(
                    answer.reason_code,
                    ReasonCode::WindowCallsExceeded,
                    "{answer:?}"
                );
            }
        }
    }
    assert_eq!(rail.entities().len(), 1);
}

#[test]
fn one_engine_shared_by_threads_makes_one_rail_call_per_refund() {
    // The proxy serves calls concurrently on one engine: the same race, inside one process.
    let world = World::new();
    let rail = Arc::new(world.rail());
    let engine = world.engine(Arc::clone(&rail), "shared");
    const THREADS: usize = 4;
    for round in 0..ROUNDS {
        let payment = format!("pay_same{round}");
        rail.add_payment(&payment, 100_000, 0, None);
        let barrier = &Barrier::new(THREADS);
        let (engine, payment) = (&engine, payment.as_str());
        let answers: Vec<Answer> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|_| {
                    s.spawn(move || {
                        barrier.wait();
                        engine
                            .propose(&refund(payment, 10_000), Some(&live()))
                            .unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let applied = answers
            .iter()
            .filter(|a| a.reason_code == ReasonCode::Applied)
            .count();
        assert_eq!(applied, 1, "round {round}: {answers:?}");
    }
    assert_eq!(rail.executed().len() as u64, ROUNDS);
    assert_all_invariants(&world, engine.ledger(), &rail);
}

/// The chain verified by one connection while another appends: every verification sees one
/// snapshot, so an append made while the log is walked is never taken for a break. (Each
/// verification used to read the log, the head and the rows in three snapshots.)
#[test]
fn the_chain_verifies_while_another_connection_appends() {
    const REFUNDS: u64 = 40;
    let world = World::new();
    let rail = world.rail();
    for n in 0..REFUNDS {
        rail.add_payment(&format!("pay_v{n}"), 100_000, 0, None);
    }
    let engine = world.engine(rail, "writer");
    let verifier = world.open_ledger();
    let done = std::sync::atomic::AtomicBool::new(false);
    let verified = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            for n in 0..REFUNDS {
                let answer = engine
                    .propose(&refund(&format!("pay_v{n}"), 100), Some(&live()))
                    .unwrap();
                assert_eq!(answer.outcome, Outcome::Applied, "{answer:?}");
            }
            done.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        let mut verified = 0u64;
        loop {
            // A writer that panicked ends the loop too; its join below reports it.
            let finished = done.load(std::sync::atomic::Ordering::SeqCst) || writer.is_finished();
            verifier
                .verify_chain()
                .expect("the chain verifies mid-append");
            verified += 1;
            if finished {
                break;
            }
        }
        writer.join().unwrap();
        verified
    });
    assert!(verified > 1, "the verifier ran while the writer appended");
    let report = verifier.verify_chain().unwrap();
    assert_eq!(
        report.records,
        engine.ledger().history().unwrap().len() as u64
    );
}
