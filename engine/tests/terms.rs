//! The rail's result checked against the intent (issue 23, item 5): a stamped entity that moved
//! another amount than authorised is quarantined with the entity recorded, both figures in the
//! row, the answer and the audit record; the windows count what moved; nothing is ever sent
//! again, and no operator's word can turn the moved money into "not applied".

mod common;

use common::*;
use interlock_engine::Outcome;
use interlock_engine::memory_rail::ExecFault;
use interlock_machine::State;
use interlock_spec::reason::ReasonCode;

fn key(sik: &interlock_spec::ids::Sik) -> interlock_engine::IntentKey {
    interlock_engine::IntentKey {
        merchant_id: interlock_spec::ids::MerchantId::parse("acc_TEST").unwrap(),
        sik: sik.clone(),
    }
}

/// The intent's state, entity and moved amount, as the row holds them.
fn row(world: &World, sik: &str) -> (String, Option<String>, Option<i64>) {
    world
        .raw()
        .query_row(
            "SELECT state, rail_entity_id, moved_minor FROM intents WHERE sik = ?1",
            [sik],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap()
}

fn window_amount(world: &World) -> i64 {
    world
        .raw()
        .query_row(
            "SELECT coalesce(sum(amount_minor), 0) FROM window_buckets",
            [],
            |r| r.get(0),
        )
        .unwrap()
}

#[test]
fn an_entity_that_moved_another_amount_is_quarantined_with_both_figures() {
    let world = World::new();
    let rail = world.rail();
    rail.script([ExecFault::MovesOneMore]);
    let engine = world.engine(rail, "p1");
    let answer = engine
        .propose(&refund("pay_1002", 50_000), Some(&live()))
        .unwrap();
    assert_eq!(answer.outcome, Outcome::Quarantined, "{answer:#?}");
    assert_eq!(answer.reason_code, ReasonCode::RailTermsDiffer);
    for words in ["amount 50001", "50000 INR was authorised", "do not retry"] {
        assert!(answer.message.contains(words), "{:?}", answer.message);
    }
    let sik = answer.sik.clone().unwrap();
    let entity = engine.rail().entities()[0].id.clone();
    assert_eq!(
        row(&world, sik.as_str()),
        ("QUARANTINED".into(), Some(entity.clone()), Some(50_001))
    );
    // The windows count what the rail moved, not what was authorised.
    assert_eq!(window_amount(&world), 50_001);
    // The audit record of the quarantine carries both figures.
    let (reason, moved): (String, i64) = world.raw()
        .query_row(
            "SELECT json_extract(payload_json, '$.reason'), json_extract(payload_json, '$.moved_minor')
             FROM audit_log WHERE kind = 'RAIL_APPLIED'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert!(
        reason.contains("amount 50001") && reason.contains("50000 INR"),
        "{reason}"
    );
    assert_eq!(moved, 50_001);

    // A duplicate is told the same and sends nothing.
    let again = engine
        .propose(&refund("pay_1002", 50_000), Some(&live()))
        .unwrap();
    assert_eq!(again.reason_code, ReasonCode::RailTermsDiffer);
    assert_eq!(engine.rail().executed().len(), 1);

    // Moved money cannot be declared not applied, even after the rail's lag.
    world.clock.advance(60_000);
    let refused = engine.resolve_not_applied(&key(&sik), "ops@example");
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.to_string().contains("money moved")),
        "{refused:?}"
    );
    assert_eq!(row(&world, sik.as_str()).0, "QUARANTINED");
    // Nor can an operator name another entity; naming this one settles it as applied.
    assert!(
        engine
            .resolve_applied(&key(&sik), "rfnd_someone_else", "ops@example")
            .is_err()
    );
    engine
        .resolve_applied(&key(&sik), &entity, "ops@example")
        .unwrap();
    assert_eq!(
        row(&world, sik.as_str()),
        ("APPLIED".into(), Some(entity), Some(50_001))
    );
    assert_eq!(window_amount(&world), 50_001);
    assert_eq!(engine.rail().executed().len(), 1);
    assert_all_invariants(&world, engine.ledger(), engine.rail());
}

#[test]
fn the_reconciler_checks_the_entity_it_finds_too() {
    let world = World::new();
    let rail = world.rail();
    rail.script([ExecFault::MovesOneMoreSilently]);
    let engine = world.engine(rail, "p1");
    let answer = engine
        .propose(&refund("pay_1002", 50_000), Some(&live()))
        .unwrap();
    assert_eq!(answer.outcome, Outcome::Unknown, "{answer:#?}");
    let sik = answer.sik.clone().unwrap();
    world.clock.advance(2_000);
    let passes = engine.reconcile_due().unwrap();
    assert_eq!(
        passes[0].1,
        interlock_engine::reconcile::PassResult::Concluded(State::Quarantined),
        "{passes:?}"
    );
    let entity = engine.rail().entities()[0].id.clone();
    assert_eq!(
        row(&world, sik.as_str()),
        ("QUARANTINED".into(), Some(entity), Some(50_001))
    );
    assert_eq!(window_amount(&world), 50_001);
    let differences: String = world
        .raw()
        .query_row(
            "SELECT json_extract(detail_json, '$.terms_differ') FROM recon_findings",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(differences.contains("amount 50001"), "{differences}");
    let retry = engine
        .propose(&refund("pay_1002", 50_000), Some(&live()))
        .unwrap();
    assert_eq!(retry.reason_code, ReasonCode::RailTermsDiffer);
    assert_eq!(engine.rail().executed().len(), 1, "nothing is sent again");
    assert_all_invariants(&world, engine.ledger(), engine.rail());
}

#[test]
fn a_rail_that_says_it_moved_less_frees_no_room_in_the_windows() {
    let world = World::new();
    let rail = world.rail();
    rail.script([ExecFault::MovesOneLess]);
    let engine = world.engine(rail, "p1");
    let answer = engine
        .propose(&refund("pay_1002", 50_000), Some(&live()))
        .unwrap();
    assert_eq!(
        answer.reason_code,
        ReasonCode::RailTermsDiffer,
        "{answer:#?}"
    );
    assert!(
        answer.message.contains("amount 49999"),
        "{}",
        answer.message
    );
    let sik = answer.sik.unwrap();
    assert_eq!(row(&world, sik.as_str()).2, Some(49_999));
    // The answer may be the lie: until a human looks, the windows keep the authorised amount.
    assert_eq!(window_amount(&world), 50_000);
    assert_all_invariants(&world, engine.ledger(), engine.rail());
}

/// A pass that lists our stamp on two entities: money moved more than once. The intent is
/// quarantined with one recorded (never "not applied"), the reason names both; a first id the
/// machine cannot record does not leave the intent with nothing on record.
#[test]
fn two_entities_of_ours_found_by_a_pass_quarantine_with_one_recorded() {
    for malformed_first in [false, true] {
        let world = World::new();
        let rail = std::sync::Arc::new(world.rail());
        rail.script([ExecFault::TimeoutAfterApply]);
        let mut twinned = Twisted::new(std::sync::Arc::clone(&rail));
        twinned.on_page = Some(Box::new(move |page| {
            let Some(ours) = page.entities.first().cloned() else {
                return;
            };
            let mut twin = ours.clone();
            if malformed_first {
                twin.entity.id = "x".repeat(65);
                page.entities.insert(0, twin);
            } else {
                twin.entity.id = "rfnd_twin".to_owned();
                page.entities.push(twin);
            }
        }));
        let engine = world.engine(twinned, "p1");
        let answer = engine
            .propose(&refund("pay_1002", 50_000), Some(&live()))
            .unwrap();
        assert_eq!(answer.outcome, Outcome::Unknown, "{answer:#?}");
        let sik = answer.sik.clone().unwrap();
        world.clock.advance(2_000);
        engine.reconcile_due().unwrap();
        let real = rail.entities()[0].id.clone();
        let (state, recorded, moved) = row(&world, sik.as_str());
        assert_eq!(
            (state.as_str(), recorded.as_deref(), moved),
            ("QUARANTINED", Some(real.as_str()), None),
            "malformed first: {malformed_first}"
        );
        let retry = engine
            .propose(&refund("pay_1002", 50_000), Some(&live()))
            .unwrap();
        assert_eq!(retry.reason_code, ReasonCode::RailTermsDiffer);
        assert!(
            retry
                .message
                .contains("2 entities carrying this intent's stamp"),
            "{}",
            retry.message
        );
        world.clock.advance(60_000);
        assert!(
            engine
                .resolve_not_applied(&key(&sik), "ops@example")
                .is_err()
        );
        assert_eq!(rail.executed().len(), 1, "nothing was sent again");
    }
}
