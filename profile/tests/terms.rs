//! The terms a rail's entity states, read by the profile for the driver to judge against the
//! authorised call (issue 23, item 5).

use interlock_driver::rail::{EntityTerms, RailCall, RailOutcome};
use interlock_driver::terms::judge;
use interlock_profile::razorpay;
use interlock_spec::action::ActionKind;
use interlock_spec::ids::{Sik, ToolName};
use interlock_spec::money::{Currency, Minor};
use serde_json::json;

const SIK: &str = "WF6QNWANGI5M56CWTMOQCJYSXAYAPDCA";

fn refund_call(amount: u64) -> RailCall {
    RailCall {
        tool: ToolName::parse("create_refund").unwrap(),
        kind: ActionKind::Refund,
        sik: Sik::parse(SIK).unwrap(),
        subject_id: "pay_1002".into(),
        amount: Minor::new(amount).unwrap(),
        currency: Currency::INR,
        payee: None,
        passthrough: Default::default(),
    }
}

fn refund_answer(amount: serde_json::Value, payment: &str) -> String {
    json!({
        "id": "rfnd_1", "entity": "refund", "amount": amount, "currency": "INR",
        "payment_id": payment, "notes": { "interlock_sik": SIK },
    })
    .to_string()
}

fn terms_of(outcome: RailOutcome) -> EntityTerms {
    match outcome {
        RailOutcome::Applied { terms, .. } => terms,
        other => panic!("not applied: {other:?}"),
    }
}

#[test]
fn a_refund_states_its_amount_currency_and_payment() {
    let p = razorpay::profile();
    let call = refund_call(500);
    let terms = terms_of(p.outcome(&call, false, refund_answer(json!(500), "pay_1002")));
    assert_eq!(
        terms,
        EntityTerms {
            amount: Some(Minor::new(500).unwrap()),
            currency: Some(Currency::INR),
            subject_id: Some("pay_1002".into()),
            unreadable: None,
        }
    );
    assert!(judge(&call, &terms).as_authorised());
    let other = terms_of(p.outcome(&call, false, refund_answer(json!(499), "pay_9")));
    let judgement = judge(&call, &other);
    assert_eq!(judgement.moved, Some(Minor::new(499).unwrap()));
    assert_eq!(judgement.differences.len(), 2, "{judgement:?}");
}

#[test]
fn an_amount_the_profile_maps_but_cannot_read_is_not_authorised() {
    let p = razorpay::profile();
    let call = refund_call(500);
    for amount in [json!("500"), json!(5.0), json!(null)] {
        let terms = terms_of(p.outcome(&call, false, refund_answer(amount.clone(), "pay_1002")));
        assert!(terms.unreadable.is_some(), "{amount}: {terms:?}");
        assert!(!judge(&call, &terms).as_authorised(), "{amount}");
    }
}

#[test]
fn a_listed_settlement_states_the_amount_it_was_asked_for() {
    let p = razorpay::profile();
    let page = json!({ "items": [
        { "id": "setlod_1", "amount_requested": 1000, "amount_settled": 0, "currency": "INR",
          "notes": { "interlock_sik": SIK } },
    ]});
    let listed = p.list_page(ActionKind::Settlement, &page).unwrap();
    assert_eq!(listed.entities.len(), 1);
    assert_eq!(
        listed.entities[0].terms.amount,
        Some(Minor::new(1000).unwrap())
    );
    assert_eq!(listed.entities[0].terms.subject_id, None, "not mapped");
}
