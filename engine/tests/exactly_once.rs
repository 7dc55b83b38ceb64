//! The executor and the reconciler against the scripted rail: each fault the rail can show,
//! and what the ledger and the rail hold afterwards.

mod common;

use common::*;
use interlock_engine::Outcome;
use interlock_engine::memory_rail::ExecFault;
use interlock_machine::State;
use interlock_spec::reason::ReasonCode;
use serde_json::json;

#[test]
fn a_refund_is_applied_once_and_a_duplicate_is_replayed() {
    let world = World::new();
    let engine = world.engine(world.rail(), "p1");
    let first = engine
        .propose(&refund("pay_1002", 50_000), Some(&live()))
        .unwrap();
    assert_eq!(first.outcome, Outcome::Applied, "{first:?}");
    assert_eq!(first.reason_code, ReasonCode::Applied);
    assert_eq!(first.state, Some(State::Applied));
    let entity = first.rail_entity_id.clone().unwrap();
    // The agent retries with a fresh request: same meaning, same key, nothing sent.
    let again = engine
        .propose(&refund("pay_1002", 50_000), Some(&live()))
        .unwrap();
    assert_eq!(again.outcome, Outcome::Applied);
    assert_eq!(again.reason_code, ReasonCode::IdempotentReplay);
    assert!(again.idempotent_replay);
    assert_eq!(again.rail_entity_id.as_deref(), Some(entity.as_str()));
    assert_eq!(again.rail_response, first.rail_response);
    assert!(again.message.contains(&entity), "{}", again.message);
    assert_eq!(engine.rail().executed().len(), 1);
    assert_eq!(engine.rail().entities().len(), 1);
    let call = &engine.rail().executed()[0];
    let sik = first.sik.clone().unwrap();
    assert_eq!(call.sik, sik);
    let entity = &engine.rail().entities()[0];
    assert_eq!(entity.stamp.as_deref(), Some(sik.as_str()));
    assert_eq!(entity.dedupe_key.as_deref(), Some(sik.as_str()));
    assert_all_invariants(&world, engine.ledger(), engine.rail());
}

#[test]
fn a_timeout_after_apply_is_reconciled_to_applied_not_retried() {
    let world = World::new();
    let rail = world.rail();
    rail.script([ExecFault::TimeoutAfterApply]);
    let engine = world.engine(rail, "p1");
    let answer = engine
        .propose(&refund("pay_1002", 50_000), Some(&live()))
        .unwrap();
    assert_eq!(answer.outcome, Outcome::Unknown, "{answer:?}");
    assert_eq!(answer.reason_code, ReasonCode::OutcomeUnknown);
    // A retry while unknown is told to wait; nothing is sent.
    let retry = engine
        .propose(&refund("pay_1002", 50_000), Some(&live()))
        .unwrap();
    assert_eq!(retry.reason_code, ReasonCode::InProgress);
    // Not before the rail's lag: the first pass is not due yet.
    assert!(engine.reconcile_due().unwrap().is_empty());
    world.clock.advance(2_000);
    let passes = engine.reconcile_due().unwrap();
    assert_eq!(passes.len(), 1);
    let retry = engine
        .propose(&refund("pay_1002", 50_000), Some(&live()))
        .unwrap();
    assert_eq!(retry.reason_code, ReasonCode::IdempotentReplay, "{retry:?}");
    assert_eq!(engine.rail().executed().len(), 1);
    assert_all_invariants(&world, engine.ledger(), engine.rail());
}

#[test]
fn a_proven_absence_allows_exactly_one_more_attempt() {
    let world = World::new();
    let rail = world.rail();
    rail.script([ExecFault::ServerErrorNotApplied]);
    let engine = world.engine(rail, "p1");
    let answer = engine
        .propose(&refund("pay_1002", 50_000), Some(&live()))
        .unwrap();
    assert_eq!(answer.outcome, Outcome::Unknown);
    world.clock.advance(2_000);
    engine.reconcile_due().unwrap();
    let sik = answer.sik.unwrap();
    let state = engine
        .ledger()
        .cores()
        .unwrap()
        .into_iter()
        .find(|c| c.sik == sik)
        .unwrap()
        .state;
    assert_eq!(state, State::ConfirmedNotApplied);
    let retry = engine
        .propose(&refund("pay_1002", 50_000), Some(&live()))
        .unwrap();
    assert_eq!(retry.outcome, Outcome::Applied, "{retry:?}");
    assert_eq!(engine.rail().executed().len(), 2);
    assert_eq!(engine.rail().entities().len(), 1);
    assert_all_invariants(&world, engine.ledger(), engine.rail());
}

#[test]
fn a_replayed_response_without_our_stamp_is_ambiguous_not_success() {
    let world = World::new();
    let rail = world.rail();
    rail.add_foreign_refund("pay_2000", 7_000);
    rail.script([ExecFault::DupResponse]);
    let engine = world.engine(rail, "p1");
    let answer = engine
        .propose(&refund("pay_1002", 50_000), Some(&live()))
        .unwrap();
    assert_eq!(answer.outcome, Outcome::Unknown, "{answer:?}");
    assert!(
        answer
            .message
            .contains("does not carry this intent's stamp"),
        "{}",
        answer.message
    );
    world.clock.advance(2_000);
    engine.reconcile_due().unwrap();
    let retry = engine
        .propose(&refund("pay_1002", 50_000), Some(&live()))
        .unwrap();
    assert_eq!(retry.reason_code, ReasonCode::IdempotentReplay);
    assert_ne!(retry.rail_entity_id.as_deref(), Some("rfnd_00000000000001"));
    assert_all_invariants(&world, engine.ledger(), engine.rail());
}

#[test]
fn absence_on_page_one_is_not_absence() {
    let world = World::new();
    let rail = world.rail();
    rail.set_page_size(2);
    rail.script([ExecFault::TimeoutAfterApply]);
    let engine = world.engine(rail, "p1");
    let answer = engine
        .propose(&refund("pay_2000", 1_000), Some(&live()))
        .unwrap();
    assert_eq!(answer.outcome, Outcome::Unknown);
    // Five refunds by someone else after ours push ours to the third page (newest first).
    for _ in 0..5 {
        engine.rail().add_foreign_refund("pay_2000", 1_000);
    }
    world.clock.advance(2_000);
    engine.reconcile_due().unwrap();
    assert!(
        engine.rail().list_calls() >= 3,
        "read {} pages",
        engine.rail().list_calls()
    );
    let retry = engine
        .propose(&refund("pay_2000", 1_000), Some(&live()))
        .unwrap();
    assert_eq!(retry.reason_code, ReasonCode::IdempotentReplay, "{retry:?}");
    assert_eq!(engine.rail().executed().len(), 1);
    assert_all_invariants(&world, engine.ledger(), engine.rail());
}

#[test]
fn a_list_read_before_the_rails_lag_has_passed_proves_nothing() {
    let world = World::new();
    let rail = world.rail();
    rail.set_read_lag(3_000);
    rail.script([ExecFault::TimeoutAfterApply]);
    let mut config = interlock_engine::EngineConfig::new("p1");
    config.rail_lag_ms = 3_000;
    let ledger = world.open_ledger();
    let engine =
        interlock_engine::Engine::new(ledger, rail, world.clock.clone(), mandate(), config)
            .unwrap();
    let answer = engine
        .propose(&refund("pay_1002", 50_000), Some(&live()))
        .unwrap();
    assert_eq!(answer.outcome, Outcome::Unknown);
    // The machine's minimum delay (2 s) has passed, the rail's lag (3 s) has not: the list
    // hides our refund, and the pass must not conclude absence from that.
    world.clock.advance(2_000);
    let passes = engine.reconcile_due().unwrap();
    assert_eq!(passes.len(), 1);
    assert_eq!(
        passes[0].1,
        interlock_engine::reconcile::PassResult::Concluded(State::Unknown)
    );
    world.clock.advance(10_000);
    engine.reconcile_due().unwrap();
    let retry = engine
        .propose(&refund("pay_1002", 50_000), Some(&live()))
        .unwrap();
    assert_eq!(retry.reason_code, ReasonCode::IdempotentReplay, "{retry:?}");
    assert_eq!(engine.rail().executed().len(), 1);
    assert_all_invariants(&world, engine.ledger(), engine.rail());
}

#[test]
fn a_permanent_partition_ends_quarantined_after_six_passes() {
    let world = World::new();
    let rail = world.rail();
    rail.fail_lists(u32::MAX);
    rail.script([ExecFault::TimeoutAfterApply]);
    let engine = world.engine(rail, "p1");
    let answer = engine
        .propose(&refund("pay_1002", 50_000), Some(&live()))
        .unwrap();
    let sik = answer.sik.unwrap();
    let report = engine.recover().unwrap();
    assert_eq!(report.unsettled, 0, "{report:?}");
    assert_eq!(report.passes, 6, "{report:?}");
    let retry = engine
        .propose(&refund("pay_1002", 50_000), Some(&live()))
        .unwrap();
    assert_eq!(retry.outcome, Outcome::Quarantined);
    assert_eq!(retry.reason_code, ReasonCode::Quarantined);
    let findings: i64 = world.raw()
        .query_row(
            "SELECT count(*) FROM recon_findings WHERE sik = ?1 AND outcome IN ('INCONCLUSIVE', 'QUARANTINED')",
            [sik.as_str()],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(findings, 6);
    // The operator reads the rail, finds the stamped refund, and settles it.
    let entity = engine.rail().entities()[0].id.clone();
    let key = interlock_engine::IntentKey {
        merchant_id: interlock_spec::ids::MerchantId::parse("acc_TEST").unwrap(),
        sik,
    };
    engine
        .resolve_applied(&key, &entity, "ops@example")
        .unwrap();
    let retry = engine
        .propose(&refund("pay_1002", 50_000), Some(&live()))
        .unwrap();
    assert_eq!(retry.reason_code, ReasonCode::IdempotentReplay);
    assert_all_invariants(&world, engine.ledger(), engine.rail());
}

#[test]
fn a_rejection_is_verified_before_the_action_may_run_again() {
    let world = World::new();
    let rail = world.rail();
    rail.script([ExecFault::Reject]);
    let engine = world.engine(rail, "p1");
    let first = engine
        .propose(&refund("pay_1002", 50_000), Some(&live()))
        .unwrap();
    assert_eq!(first.outcome, Outcome::Rejected, "{first:?}");
    assert_eq!(first.reason_code, ReasonCode::RailRejected);
    assert!(
        first
            .message
            .contains("BAD_REQUEST_ERROR: scripted refusal"),
        "{}",
        first.message
    );
    // Until the ledger has verified that nothing moved, the action is not sent again.
    let retry = engine
        .propose(&refund("pay_1002", 50_000), Some(&live()))
        .unwrap();
    assert_eq!(retry.outcome, Outcome::Rejected);
    assert_eq!(engine.rail().executed().len(), 1);
    world.clock.advance(2_000);
    engine.reconcile_due().unwrap();
    let retry = engine
        .propose(&refund("pay_1002", 50_000), Some(&live()))
        .unwrap();
    assert_eq!(retry.outcome, Outcome::Applied, "{retry:?}");
    assert_eq!(engine.rail().executed().len(), 2);
    assert_eq!(engine.rail().entities().len(), 1);
    assert_all_invariants(&world, engine.ledger(), engine.rail());
}

#[test]
fn a_distinct_reason_makes_a_second_identical_refund_a_new_intent() {
    let world = World::new();
    let engine = world.engine(world.rail(), "p1");
    let a = engine
        .propose(&refund("pay_2000", 50_000), Some(&live()))
        .unwrap();
    let b = engine
        .propose(
            &refund_args(json!({"payment_id": "pay_2000", "amount": 50_000,
                "interlock_distinct_reason": "late delivery"})),
            Some(&live()),
        )
        .unwrap();
    assert_eq!(a.outcome, Outcome::Applied);
    assert_eq!(b.outcome, Outcome::Applied);
    assert_ne!(a.sik, b.sik);
    assert_eq!(engine.rail().entities().len(), 2);
    let reason: String = world.raw()
        .query_row(
            "SELECT json_extract(payload_json, '$.distinct_reason') FROM audit_log
             WHERE kind = 'INTENT_PROPOSED' AND json_extract(payload_json, '$.distinct_reason') IS NOT NULL",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(reason, "late delivery");
    assert_all_invariants(&world, engine.ledger(), engine.rail());
}

#[test]
fn a_settlement_is_bounded_by_the_balance_and_drawn_from_it() {
    let world = World::new();
    let engine = world.engine(world.rail(), "p1");
    let ok = engine.propose(&settlement(300_000), Some(&live())).unwrap();
    assert_eq!(ok.outcome, Outcome::Applied, "{ok:?}");
    assert_eq!(engine.rail().balance().get(), 200_000);
    let over = engine.propose(&settlement(250_000), Some(&live())).unwrap();
    assert_eq!(over.reason_code, ReasonCode::SettlementExceedsBalance);
    assert!(
        over.message
            .contains("250000 exceeds the 200000 INR settleable balance"),
        "{}",
        over.message
    );
    // A refusal is decided and recorded, but creates no intent (ADR 0004, decision 5).
    let (outcome, code, sik): (String, String, Option<String>) = world
        .raw()
        .query_row(
            "SELECT outcome, reason_code, sik FROM decisions ORDER BY id DESC LIMIT 1",
            [],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )
        .unwrap();
    assert_eq!(
        (outcome.as_str(), code.as_str()),
        ("REFUSED", "SETTLEMENT_EXCEEDS_BALANCE")
    );
    assert_eq!(sik.as_deref(), over.sik.as_ref().map(|s| s.as_str()));
    assert_eq!(
        engine.ledger().cores().unwrap().len(),
        1,
        "only the applied settlement"
    );
    assert_all_invariants(&world, engine.ledger(), engine.rail());
}

#[test]
fn a_settlement_that_cannot_be_reconciled_by_stamp_waits_for_a_human() {
    let world = World::new();
    let rail = world.rail();
    rail.set_settlements_unlistable(true);
    rail.script([ExecFault::TimeoutAfterApply]);
    let engine = world.engine(rail, "p1");
    let answer = engine.propose(&settlement(100_000), Some(&live())).unwrap();
    assert_eq!(answer.outcome, Outcome::Unknown);
    let report = engine.recover().unwrap();
    assert_eq!(report.passes, 1, "one pass, then a human: {report:?}");
    let retry = engine.propose(&settlement(100_000), Some(&live())).unwrap();
    assert_eq!(retry.outcome, Outcome::Quarantined, "{retry:?}");
    assert_eq!(engine.rail().executed().len(), 1, "never sent again");
    let finding: String = world
        .raw()
        .query_row("SELECT outcome FROM recon_findings", [], |row| row.get(0))
        .unwrap();
    assert_eq!(finding, "QUARANTINED");
    assert_all_invariants(&world, engine.ledger(), engine.rail());
}

#[test]
fn a_pass_whose_proof_the_machine_refuses_is_inconclusive_not_stuck() {
    let world = World::new();
    let rail = std::sync::Arc::new(world.rail());
    rail.script([ExecFault::TimeoutAfterApply]);
    // The rail's lists show our stamp on an entity id the machine refuses (65 characters).
    let mut mangled = Twisted::new(std::sync::Arc::clone(&rail));
    mangled.on_page = Some(Box::new(|page| {
        for entity in &mut page.entities {
            entity.entity.id = "x".repeat(65);
        }
    }));
    let engine = world.engine(mangled, "p1");
    let answer = engine
        .propose(&refund("pay_1002", 50_000), Some(&live()))
        .unwrap();
    assert_eq!(answer.outcome, Outcome::Unknown);
    world.clock.advance(2_000);
    let passes = engine.reconcile_due().unwrap();
    assert_eq!(
        passes[0].1,
        interlock_engine::reconcile::PassResult::Concluded(State::Unknown),
        "{passes:?}"
    );
    let refused: String = world
        .raw()
        .query_row(
            "SELECT json_extract(detail_json, '$.refused_conclusion') FROM recon_findings",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(refused, "RECONCILE_FOUND_APPLIED");
    // Six such passes, and an operator is asked; nothing is sent again meanwhile.
    engine.recover().unwrap();
    let retry = engine
        .propose(&refund("pay_1002", 50_000), Some(&live()))
        .unwrap();
    assert_eq!(retry.outcome, Outcome::Quarantined, "{retry:?}");
    assert_eq!(rail.executed().len(), 1);
}

#[test]
fn the_rail_is_given_the_call_timeout_and_an_answer_after_it_is_not_believed() {
    let world = World::new();
    let inner = std::sync::Arc::new(world.rail());
    // A rail that takes 12 s of the engine's clock per call and records the timeout it got.
    let timeouts = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut slow = Twisted::new(std::sync::Arc::clone(&inner));
    let (seen, clock) = (std::sync::Arc::clone(&timeouts), world.clock.clone());
    slow.before_execute = Some(Box::new(move |budget| {
        seen.lock().unwrap().push(budget.timeout_ms);
        clock.advance(12_000);
    }));
    let engine = world.engine(slow, "p1");
    let answer = engine
        .propose(&refund("pay_1002", 50_000), Some(&live()))
        .unwrap();
    assert_eq!(timeouts.lock().unwrap().as_slice(), &[10_000]);
    assert_eq!(answer.outcome, Outcome::Unknown, "{answer:?}");
    assert!(
        answer.message.contains("past its 10000 ms timeout"),
        "{}",
        answer.message
    );
    // The entity is real; the reconciler, not the late answer, is what settles it.
    world.clock.advance(2_000);
    engine.reconcile_due().unwrap();
    let retry = engine
        .propose(&refund("pay_1002", 50_000), Some(&live()))
        .unwrap();
    assert_eq!(retry.reason_code, ReasonCode::IdempotentReplay, "{retry:?}");
    assert_eq!(inner.entities().len(), 1);
}

#[test]
fn an_action_without_a_canonical_form_is_an_error_not_a_panic() {
    // The parser refuses such arguments; an action built some other way must still not take
    // the engine down inside its transaction.
    let world = World::new();
    let engine = world.engine(world.rail(), "p1");
    let mut action = refund("pay_1002", 1_000);
    action.passthrough.insert("speed".into(), json!(1.5));
    let result = engine.propose(&action, Some(&live()));
    assert!(result.is_err(), "{result:?}");
    assert!(
        engine.ledger().cores().unwrap().is_empty(),
        "nothing was written"
    );
    assert!(engine.rail().executed().is_empty());
    engine.ledger().verify_chain().unwrap();
}

#[test]
fn a_read_answered_about_another_payment_never_points_the_money_at_it() {
    let world = World::new();
    let rail = std::sync::Arc::new(world.rail());
    // A wrong (or hostile) upstream: the read of pay_1002 comes back as pay_2000, a payment the
    // agent never named, with room for the refund.
    let mut crossed = Twisted::new(std::sync::Arc::clone(&rail));
    crossed.on_resolve = Some(Box::new(|referent| {
        if let interlock_engine::Referent::Payment(payment) = referent {
            payment.id = "pay_2000".to_owned();
            payment.amount = interlock_spec::money::Minor::new(1_000_000).unwrap();
        }
    }));
    let engine = world.engine(crossed, "p1");
    let answer = engine
        .propose(&refund("pay_1002", 50_000), Some(&live()))
        .unwrap();
    assert!(
        answer.message.contains("pay_2000") && answer.message.contains("pay_1002"),
        "{answer:#?}"
    );
    assert!(
        rail.executed()
            .iter()
            .all(|call| call.subject_id == "pay_1002"),
        "money pointed at a payment the agent never named: {:?}",
        rail.executed()
    );
    assert!(rail.executed().is_empty(), "{answer:#?}");
    assert_ne!(answer.outcome, Outcome::Applied, "{answer:#?}");
    assert_eq!(answer.reason_code, ReasonCode::ReferentUnresolvableBlocked);
    assert_all_invariants(&world, engine.ledger(), &rail);
}
