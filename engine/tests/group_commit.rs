//! Group commit (issue 21): one engine's concurrent callers share the ledger's transactions and
//! fsyncs, and every guarantee holds as if each had committed alone: each intent has all its
//! records, the chain verifies in order, the rail is called only after the attempt is durable
//! (the rail's observer reads the committed audit head), and a window is counted across the
//! batch. The hand-off itself is model-checked by loom (`group-commit/tests/loom.rs`).

mod common;

use common::*;
use interlock_engine::{Answer, Outcome};
use interlock_spec::mandate::Mandate;
use interlock_spec::reason::ReasonCode;
use std::sync::{Arc, Barrier};

const THREADS: usize = 16;
const REFUNDS_EACH: usize = 8;

fn proposals_at_once(
    engine: &MemoryEngine,
    payment: impl Fn(usize, usize) -> String + Sync,
) -> Vec<Answer> {
    let barrier = &Barrier::new(THREADS);
    let payment = &payment;
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|thread| {
                s.spawn(move || {
                    barrier.wait();
                    (0..REFUNDS_EACH)
                        .map(|n| {
                            engine
                                .propose(&refund(&payment(thread, n), 100), Some(&live()))
                                .unwrap()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    })
}

type MemoryEngine = interlock_engine::Engine<Arc<interlock_engine::memory_rail::MemoryRail>>;

/// An engine whose mandate allows `max_calls` refunds in its window, over a rail with one
/// payment `pay_{prefix}{thread}x{n}` for each refund [`proposals_at_once`] makes.
fn engine_over_payments(
    prefix: &str,
    max_calls: u32,
) -> (
    World,
    Arc<interlock_engine::memory_rail::MemoryRail>,
    MemoryEngine,
) {
    let yaml = mandate_yaml();
    assert!(yaml.contains("max_calls: 40"), "the test mandate's window");
    let yaml = yaml.replace("max_calls: 40", &format!("max_calls: {max_calls}"));
    let world = World::new();
    let rail = Arc::new(world.rail());
    for thread in 0..THREADS {
        for n in 0..REFUNDS_EACH {
            rail.add_payment(&format!("pay_{prefix}{thread}x{n}"), 100_000, 0, None);
        }
    }
    let engine = world.engine_with(
        Arc::clone(&rail),
        prefix,
        Mandate::parse_yaml(&yaml).unwrap(),
    );
    (world, rail, engine)
}

#[test]
fn concurrent_refunds_share_commits_and_keep_every_guarantee() {
    let (world, rail, engine) = engine_over_payments("g", 1000);
    let before = engine.ledger().commits();
    let answers = proposals_at_once(&engine, |thread, n| format!("pay_g{thread}x{n}"));
    let commits = engine.ledger().commits() - before;
    let refunds = (THREADS * REFUNDS_EACH) as u64;
    for answer in &answers {
        assert_eq!(answer.outcome, Outcome::Applied, "{answer:?}");
    }
    assert_eq!(
        rail.executed().len() as u64,
        refunds,
        "one rail call per refund"
    );
    // Alone, each refund is two commits (the deciding one and the outcome's).
    assert!(
        commits < 2 * refunds,
        "{THREADS} threads at once made {commits} commits for {refunds} refunds: nothing was batched"
    );
    // Every intent has its records; the chain verifies; no rail call before its attempt was
    // durable; never two, no phantom, no silent loss.
    assert_all_invariants(&world, engine.ledger(), &rail);
    println!("{refunds} refunds from {THREADS} threads: {commits} commits");
}

#[test]
fn a_window_is_counted_across_one_batch() {
    // Every thread proposes at once into a window of one call: the usage each decision reads
    // includes the decisions made before it in the same, not yet committed, batch.
    let (world, rail, engine) = engine_over_payments("w", 1);
    let answers = proposals_at_once(&engine, |thread, n| format!("pay_w{thread}x{n}"));
    let applied = answers
        .iter()
        .filter(|a| a.outcome == Outcome::Applied)
        .count();
    assert_eq!(applied, 1, "a window of one call let {applied} through");
    for answer in answers.iter().filter(|a| a.outcome != Outcome::Applied) {
        assert_eq!(
            answer.reason_code,
            ReasonCode::WindowCallsExceeded,
            "{answer:?}"
        );
    }
    assert_eq!(rail.entities().len(), 1);
    assert_all_invariants(&world, engine.ledger(), &rail);
}

#[test]
fn the_same_refund_from_every_thread_is_one_rail_call() {
    // Threads in one batch race one intent: the second decision sees the first's insert.
    let world = World::new();
    let rail = Arc::new(world.rail());
    rail.add_payment("pay_one1", 100_000, 0, None);
    let engine = world.engine(Arc::clone(&rail), "same");
    let answers = proposals_at_once(&engine, |_, _| "pay_one1".to_owned());
    let applied = answers
        .iter()
        .filter(|a| a.reason_code == ReasonCode::Applied)
        .count();
    assert_eq!(applied, 1, "{answers:?}");
    for answer in answers
        .iter()
        .filter(|a| a.reason_code != ReasonCode::Applied)
    {
        assert!(
            matches!(
                answer.reason_code,
                ReasonCode::IdempotentReplay | ReasonCode::InProgress
            ),
            "{answer:?}"
        );
    }
    assert_eq!(rail.executed().len(), 1);
    assert_all_invariants(&world, engine.ledger(), &rail);
}
