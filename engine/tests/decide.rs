//! The deciding transaction: the permission and the write-ahead record of its call are one
//! commit, and an intent left `AUTHORIZED` without its attempt (by a ledger written before the
//! two were merged) is still taken up by a fresh proposal, once.

mod common;

use common::*;
use interlock_driver::{Command, Context, Decided, Proposal};
use interlock_engine::memory_rail::MemoryRail;
use interlock_engine::{Engine, Outcome, Rail};
use interlock_machine::{Effect, Event, EventKind, Record, State};
use interlock_spec::action::ProposedAction;
use interlock_spec::reason::ReasonCode;
use std::sync::{Arc, Barrier};

/// Every `Transition` record's event kind, in order.
fn events(world: &World, engine: &Engine<MemoryRail>) -> Vec<(u64, EventKind)> {
    world
        .history(engine.ledger())
        .into_iter()
        .filter_map(|record| match record {
            Record::Transition { seq, event, .. } => Some((seq, event.kind())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_refund_is_two_commits_the_permission_and_its_attempt_being_one() {
    let world = World::new();
    let engine = world.engine(world.rail(), "p1");
    let before = engine.ledger().commits();
    let answer = engine
        .propose(&refund("pay_1002", 50_000), Some(&live()))
        .unwrap();
    assert_eq!(answer.outcome, Outcome::Applied, "{answer:?}");
    // The deciding transaction (intent, GATES_PASSED, decision, ATTEMPT_STARTED), then the
    // outcome: one fsync each. Three commits here would be the permission committed apart.
    assert_eq!(engine.ledger().commits() - before, 2);
    let kinds = events(&world, &engine);
    let [(gates_seq, gates), (start_seq, start), (_, outcome)] = kinds.as_slice() else {
        panic!("three transitions: {kinds:?}");
    };
    assert_eq!(
        (*gates, *start, *outcome),
        (
            EventKind::GatesPassed,
            EventKind::AttemptStarted,
            EventKind::RailApplied
        )
    );
    assert_eq!(
        *start_seq,
        gates_seq + 1,
        "both records, in the machine's order"
    );
    // The decision record names the gate event, not the attempt written after it.
    let sik = answer.sik.clone().unwrap();
    let detail = &engine.ledger().intent_detail(&sik).unwrap()[0];
    assert_eq!(detail.decisions.len(), 1);
    assert_eq!(detail.decisions[0].audit_seq, *gates_seq);
    assert_eq!(detail.decisions[0].outcome, "AUTHORIZED");
    assert_all_invariants(&world, engine.ledger(), engine.rail());
}

/// Runs `action`'s proposal by hand up to its deciding transaction and commits that decision
/// without the attempt's claim, as a ledger written before the merge did; returns the command
/// the proposal queued next. The proposal is then dropped, as a process that died there.
fn authorize_without_attempt<R: Rail>(engine: &Engine<R>, action: &ProposedAction) -> Command {
    let hash = engine.mandate().hash().unwrap();
    let context = Context {
        mandate: engine.mandate(),
        mandate_hash: &hash,
        config: engine.config(),
        wall_ms: T0,
    };
    let mut proposal = Proposal::new(context, T0, action.clone(), Some(live()));
    let Some(Command::ReadReferent(read)) = proposal.poll_command() else {
        panic!("a fresh proposal reads its referent first");
    };
    let referent = pollster::block_on(engine.rail().resolve(&read)).map_err(|e| e.to_string());
    proposal.handle_referent(context, T0, referent);
    let Some(Command::Decide(mut plan)) = proposal.poll_command() else {
        panic!("then it decides");
    };
    assert!(plan.start_attempt.is_some(), "a decision carries its claim");
    plan.start_attempt = None;
    let decided = engine
        .ledger()
        .decide(
            &plan,
            || T0,
            engine.mandate(),
            |usage| proposal.judge(context, T0, usage),
        )
        .unwrap();
    let Ok(Decided::Applied(applied, _)) = &decided else {
        panic!("the gates pass: {decided:?}");
    };
    assert_eq!(applied.to.state, State::Authorized);
    assert_eq!(applied.effect, Effect::StartAttempt);
    proposal.handle_decided(context, T0, decided);
    proposal.poll_command().expect("the proposal goes on")
}

#[test]
fn a_decision_left_without_its_attempt_claims_it_in_a_commit_of_its_own() {
    let world = World::new();
    let engine = world.engine(world.rail(), "p1");
    let next = authorize_without_attempt(&engine, &refund("pay_1002", 50_000));
    let Command::Commit(commit) = next else {
        panic!("the attempt is claimed next: {next:?}");
    };
    assert_eq!(commit.event, Event::AttemptStarted);
    assert!(
        matches!(
            commit.change.lease,
            interlock_driver::LeaseChange::Claim { ref owner, .. } if owner == "p1"
        ),
        "{commit:?}"
    );
    assert!(engine.rail().executed().is_empty());
}

#[test]
fn an_authorized_intent_from_an_older_ledger_is_taken_up_once() {
    let world = World::new();
    let engine = world.engine(world.rail(), "p1");
    let action = refund("pay_1002", 50_000);
    authorize_without_attempt(&engine, &action);
    drop(engine);
    // A new process on the same ledger; the agent asks again.
    let engine = world.engine(world.rail(), "p2");
    let answer = engine.propose(&action, Some(&live())).unwrap();
    assert_eq!(answer.outcome, Outcome::Applied, "{answer:?}");
    let again = engine.propose(&action, Some(&live())).unwrap();
    assert!(again.idempotent_replay, "{again:?}");
    assert_eq!(engine.rail().executed().len(), 1);
    let kinds: Vec<EventKind> = events(&world, &engine).into_iter().map(|e| e.1).collect();
    assert_eq!(
        kinds,
        [
            EventKind::GatesPassed,
            EventKind::AttemptStarted,
            EventKind::RailApplied
        ]
    );
    assert_all_invariants(&world, engine.ledger(), engine.rail());
}

/// A rolling upgrade: intents an older ledger left `AUTHORIZED`, taken up by two processes at
/// once. The claim is a compare-and-set on the row and its lease: one attempt, one call.
#[test]
fn two_engines_taking_up_one_authorized_intent_make_one_rail_call() {
    const ROUNDS: u64 = 20;
    let world = World::new();
    let rail = Arc::new(world.rail());
    let a = world.engine(Arc::clone(&rail), "engine_a");
    let b = world.engine(Arc::clone(&rail), "engine_b");
    for round in 0..ROUNDS {
        let payment = format!("pay_old{round}");
        rail.add_payment(&payment, 100_000, 0, None);
        let action = refund(&payment, 10_000);
        authorize_without_attempt(&a, &action);
        let barrier = &Barrier::new(2);
        let (x, y) = std::thread::scope(|s| {
            let x = s.spawn(|| {
                barrier.wait();
                a.propose(&action, Some(&live())).unwrap()
            });
            let y = s.spawn(|| {
                barrier.wait();
                b.propose(&action, Some(&live())).unwrap()
            });
            (x.join().unwrap(), y.join().unwrap())
        });
        let applied = [&x, &y]
            .iter()
            .filter(|answer| answer.reason_code == ReasonCode::Applied)
            .count();
        assert_eq!(applied, 1, "round {round}: {x:?} {y:?}");
    }
    assert_eq!(rail.executed().len() as u64, ROUNDS, "one call per intent");
    assert_all_invariants(&world, a.ledger(), &rail);
}

/// A G5 model that takes 20 s of the 30 s lease to answer (and says nothing).
struct SlowModel(Arc<interlock_engine::ManualClock>);

impl interlock_engine::gates::ModelGate for SlowModel {
    fn name(&self) -> &str {
        "slow-model"
    }

    fn evaluate(
        &self,
        _input: &interlock_engine::gates::GateInput<'_>,
    ) -> Option<interlock_engine::gates::Advice> {
        self.0.advance(20_000);
        None
    }
}

/// The lease of an attempt started in the deciding transaction runs from that commit, not from
/// when the decision was planned: a slow model before the commit leaves the call its whole
/// lease. Dated at the plan, 10 s would be left, short of the 10 s call plus its margin, and
/// the send re-check would refuse.
#[test]
fn a_slow_model_gate_does_not_eat_into_the_attempts_lease() {
    let world = World::new();
    let engine = world
        .engine(world.rail(), "p1")
        .with_model_gate(Box::new(SlowModel(Arc::clone(&world.clock))));
    let answer = engine
        .propose(&refund("pay_1002", 50_000), Some(&live()))
        .unwrap();
    assert_eq!(answer.outcome, Outcome::Applied, "{answer:?}");
    assert_eq!(engine.rail().executed().len(), 1);
}
