//! An intent that waited (held for a human, or proven absent and proposed again) is judged
//! again when it moves, and counts in the window of the moment it moves, not of the moment it
//! was first seen.

mod common;

use common::*;
use interlock_engine::memory_rail::ExecFault;
use interlock_engine::{IntentKey, Outcome};
use interlock_machine::State;
use interlock_spec::ids::MerchantId;
use interlock_spec::mandate::Mandate;
use interlock_spec::reason::ReasonCode;

const HOUR: u64 = 3_600_000;

fn one_call_per_day(hold: bool) -> Mandate {
    let mut yaml = mandate_yaml().replace("max_calls: 40", "max_calls: 1");
    if hold {
        yaml = yaml.replacen(
            "max_refunds_per_payment: 3",
            "max_refunds_per_payment: 3\n      on_unresolvable: hold",
            1,
        );
    }
    Mandate::parse_yaml(&yaml).unwrap()
}

fn key(sik: interlock_spec::ids::Sik) -> IntentKey {
    IntentKey {
        merchant_id: MerchantId::parse("acc_TEST").unwrap(),
        sik,
    }
}

#[test]
fn a_reopened_intent_counts_in_the_window_it_was_reopened_in() {
    let world = World::new();
    let rail = world.rail();
    rail.script([ExecFault::Reject]);
    let engine = world.engine_with(rail, "p1", one_call_per_day(false));
    let x = engine
        .propose(&refund("pay_1002", 1_000), Some(&live()))
        .unwrap();
    assert_eq!(x.outcome, Outcome::Rejected);
    world.clock.advance(2_000);
    engine.reconcile_due().unwrap();
    world.clock.advance(25 * HOUR);
    let again = engine
        .propose(&refund("pay_1002", 1_000), Some(&live()))
        .unwrap();
    assert_eq!(again.outcome, Outcome::Applied, "{again:?}");
    world.clock.advance(60_000);
    let y = engine
        .propose(&refund("pay_2000", 1_000), Some(&live()))
        .unwrap();
    assert_eq!(y.reason_code, ReasonCode::WindowCallsExceeded, "{y:?}");
    assert_eq!(engine.rail().entities().len(), 1);
}

#[test]
fn an_approval_is_refused_when_the_action_no_longer_fits() {
    let world = World::new();
    let engine = world.engine_with(world.rail(), "p1", one_call_per_day(true));
    engine.rail().fail_resolves(1);
    let x = engine
        .propose(&refund("pay_1002", 1_000), Some(&live()))
        .unwrap();
    assert_eq!(x.outcome, Outcome::Held);
    world.clock.advance(25 * HOUR);
    let y = engine
        .propose(&refund("pay_2000", 1_000), Some(&live()))
        .unwrap();
    assert_eq!(y.outcome, Outcome::Applied);
    let approval = engine
        .approve(
            &key(x.sik.clone().unwrap()),
            "ops@example",
            "checked with the customer",
            Some(&live()),
        )
        .unwrap();
    assert_eq!(approval.outcome, Outcome::Refused, "{approval:?}");
    assert_eq!(approval.reason_code, ReasonCode::WindowCallsExceeded);
    assert!(
        approval.message.starts_with("not approved, still held"),
        "{}",
        approval.message
    );
    assert_eq!(approval.state, Some(State::Held));
    // A day later the window has room: the same approval goes through, and counts now.
    world.clock.advance(25 * HOUR);
    let approval = engine
        .approve(
            &key(x.sik.unwrap()),
            "ops@example",
            "checked with the customer",
            Some(&live()),
        )
        .unwrap();
    assert_eq!(approval.outcome, Outcome::Applied, "{approval:?}");
    let z = engine
        .propose(&refund("pay_2000", 2_000), Some(&live()))
        .unwrap();
    assert_eq!(z.reason_code, ReasonCode::WindowCallsExceeded, "{z:?}");
    assert_eq!(engine.rail().entities().len(), 2);
    assert_all_invariants(&world, engine.ledger(), engine.rail());
}

#[test]
fn an_approval_after_the_mandate_expired_or_with_a_drifted_tool_is_refused() {
    let world = World::new();
    let engine = world.engine_with(world.rail(), "p1", one_call_per_day(true));
    engine.rail().fail_resolves(1);
    let x = engine
        .propose(&refund("pay_1002", 1_000), Some(&live()))
        .unwrap();
    let held = key(x.sik.unwrap());
    let drifted = interlock_engine::gates::LiveTool {
        server_id: SERVER.to_owned(),
        sha256: Ok("ee".repeat(32)),
    };
    let approval = engine
        .approve(
            &held,
            "ops@example",
            "checked with the customer",
            Some(&drifted),
        )
        .unwrap();
    assert_eq!(
        approval.reason_code,
        ReasonCode::ToolDrifted,
        "{approval:?}"
    );
    world.clock.advance(1_800_000_000_000 - T0);
    let approval = engine
        .approve(
            &held,
            "ops@example",
            "checked with the customer",
            Some(&live()),
        )
        .unwrap();
    assert_eq!(
        approval.reason_code,
        ReasonCode::MandateExpired,
        "{approval:?}"
    );
    assert!(engine.rail().executed().is_empty());
    let by: i64 = world
        .raw()
        .query_row(
            "SELECT count(*) FROM audit_log WHERE kind = 'HOLD_RELEASED'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(by, 0);
}

#[test]
fn an_approval_is_recorded_with_who_why_and_what_it_binds_to() {
    let world = World::new();
    let mandate = one_call_per_day(true);
    let mandate_sha256 = mandate.hash().unwrap();
    let engine = world.engine_with(world.rail(), "p1", mandate);
    engine.rail().fail_resolves(1);
    let x = engine
        .propose(&refund("pay_1002", 1_000), Some(&live()))
        .unwrap();
    let sik = x.sik.unwrap();
    let approval = engine
        .approve(
            &key(sik.clone()),
            "ops@example",
            "checked with the customer",
            Some(&live()),
        )
        .unwrap();
    assert_eq!(approval.outcome, Outcome::Applied, "{approval:?}");
    let (who, why, bound_sik, amount, currency, bound_mandate): (
        String,
        String,
        String,
        i64,
        String,
        String,
    ) = world
        .raw()
        .query_row(
            "SELECT json_extract(payload_json, '$.context.by'),
                    json_extract(payload_json, '$.context.why'),
                    json_extract(payload_json, '$.context.sik'),
                    json_extract(payload_json, '$.context.amount_minor'),
                    json_extract(payload_json, '$.context.currency'),
                    json_extract(payload_json, '$.context.mandate_sha256')
             FROM audit_log WHERE kind = 'HOLD_RELEASED'",
            [],
            |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                ))
            },
        )
        .unwrap();
    assert_eq!(who, "ops@example");
    assert_eq!(why, "checked with the customer");
    assert_eq!(bound_sik, sik.as_str());
    assert_eq!((amount, currency.as_str()), (1_000, "INR"));
    assert_eq!(bound_mandate, mandate_sha256);
    assert_all_invariants(&world, engine.ledger(), engine.rail());
}

#[test]
fn an_approval_under_another_mandate_is_refused_and_the_intent_stays_held() {
    let world = World::new();
    let held_under = world.engine_with(world.rail(), "p1", one_call_per_day(true));
    held_under.rail().fail_resolves(1);
    let x = held_under
        .propose(&refund("pay_1002", 1_000), Some(&live()))
        .unwrap();
    assert_eq!(x.outcome, Outcome::Held);
    let held = key(x.sik.unwrap());
    // The same merchant and agent, a wider mandate: approving under it would judge the held
    // action by rules it was not held under.
    let wider = Mandate::parse_yaml(
        &mandate_yaml()
            .replace("max_calls: 40", "max_calls: 2")
            .replacen(
                "max_refunds_per_payment: 3",
                "max_refunds_per_payment: 3\n      on_unresolvable: hold",
                1,
            ),
    )
    .unwrap();
    let other = world.engine_with(world.rail(), "p2", wider);
    let refused = other
        .approve(&held, "ops@example", "looks fine", Some(&live()))
        .unwrap_err();
    let (state, mandate_hash): (String, String) = world
        .raw()
        .query_row(
            "SELECT state, mandate_hash FROM intents WHERE sik = ?1",
            [held.sik.as_str()],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    let message = refused.to_string();
    assert!(
        message.starts_with("not approved, still held") && message.contains(&mandate_hash),
        "{message}"
    );
    assert_eq!(state, State::Held.as_str());
    assert!(other.rail().executed().is_empty());
    let approval = held_under
        .approve(&held, "ops@example", "looks fine", Some(&live()))
        .unwrap();
    assert_eq!(approval.outcome, Outcome::Applied, "{approval:?}");
}

#[test]
fn an_approval_is_refused_when_the_rail_names_the_held_subject_differently() {
    let world = World::new();
    let rail = std::sync::Arc::new(world.rail());
    rail.add_payment("pay_abc", 10_000, 0, None);
    // A rail that spells payment ids its own way (as a rail may normalise them).
    let mut renaming = Twisted::new(std::sync::Arc::clone(&rail));
    renaming.on_resolve = Some(Box::new(|referent| {
        if let interlock_engine::Referent::Payment(payment) = referent {
            payment.id = payment.id.to_uppercase().replace("PAY_", "pay_");
        }
    }));
    let engine = world.engine_with(renaming, "p1", one_call_per_day(true));
    rail.fail_resolves(1);
    let x = engine
        .propose(&refund("pay_abc", 1_000), Some(&live()))
        .unwrap();
    assert_eq!(x.outcome, Outcome::Held);
    let approval = engine
        .approve(
            &key(x.sik.unwrap()),
            "ops@example",
            "checked with the customer",
            Some(&live()),
        )
        .unwrap();
    assert_eq!(approval.outcome, Outcome::Refused, "{approval:?}");
    assert!(
        approval
            .message
            .contains("the rail now answers pay_ABC for the held pay_abc"),
        "{}",
        approval.message
    );
    assert!(rail.executed().is_empty());
}
