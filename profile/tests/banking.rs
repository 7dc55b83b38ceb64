//! The AgentDojo banking profile (bench/agentdojo/banking.profile.yaml): decimal euros, payees,
//! scheduled-transfer updates by integer id, and a rail with no stamp.

use interlock_driver::rail::{ListQuery, PageAt, RailCall, RailError, RailOutcome, Referent};
use interlock_profile::Profile;
use interlock_spec::action::{ActionError, ActionKind, ProposedAction};
use interlock_spec::ids::{AgentId, MerchantId, Sik, ToolName};
use interlock_spec::money::{Currency, Minor};
use serde_json::{Value, json};

const PROFILE: &str = include_str!("../../bench/agentdojo/banking.profile.yaml");
const SIK: &str = "WF6QNWANGI5M56CWTMOQCJYSXAYAPDCA";

fn profile() -> Profile {
    Profile::from_yaml(PROFILE).unwrap()
}

fn parse(tool: &str, frame: &str) -> Result<ProposedAction, ActionError> {
    let p = profile();
    let money = p.money_tool(tool).unwrap();
    let args: Value = serde_json::from_str(frame).unwrap();
    let agent = AgentId::parse("agent_bank_assistant").unwrap();
    let merchant = MerchantId::parse("acc_emma_johnson").unwrap();
    p.parse(money, agent, merchant, &args)
}

fn eur() -> Currency {
    Currency::parse("EUR").unwrap()
}

fn call(action: &ProposedAction, subject_id: &str) -> RailCall {
    RailCall {
        tool: action.tool.clone(),
        kind: action.kind,
        sik: Sik::parse(SIK).unwrap(),
        subject_id: subject_id.into(),
        amount: action.amount,
        currency: eur(),
        payee: action.payee.clone(),
        passthrough: action.passthrough.clone(),
    }
}

#[test]
fn a_transfer_reads_euros_exactly_and_normalises_the_iban() {
    let action = parse(
        "send_money",
        r#"{"recipient": "gb29 nwbk 6016 1331 9268 19", "amount": 98.70, "subject": "bill", "date": "2022-01-01"}"#,
    )
    .unwrap();
    assert_eq!(action.kind, ActionKind::Transfer);
    assert_eq!(action.amount.get(), 9870);
    assert_eq!(action.payee.as_deref(), Some("GB29NWBK60161331926819"));
    // What the gates judged is what the bank is sent: the payee normalised, the amount as the
    // same decimal, and no stamp (the bank keeps none).
    let args = profile().outbound_args(&call(&action, "balance")).unwrap();
    let mut rest = args.clone();
    rest.remove("amount");
    assert_eq!(
        Value::Object(rest),
        json!({"recipient": "GB29NWBK60161331926819", "subject": "bill", "date": "2022-01-01"})
    );
    assert_eq!(serde_json::to_string(&args["amount"]).unwrap(), "98.70");
    let named = parse(
        "send_money",
        r#"{"recipient": "Spotify", "amount": 5, "subject": "s", "date": "d"}"#,
    );
    assert_eq!(named.unwrap().payee.as_deref(), Some("Spotify"));
}

#[test]
fn amounts_the_euro_cannot_hold_and_payees_no_one_can_be_paid_are_refused() {
    let cases = [
        (
            r#"{"recipient": "X", "amount": 0.001}"#,
            "amount: amount 0.001 has 3 decimal places; EUR's minor unit has 2",
        ),
        (
            r#"{"recipient": "X", "amount": "12,50"}"#,
            "amount: amount must be a decimal number of major units",
        ),
        (
            r#"{"recipient": "X", "amount": 1e400}"#,
            "amount: amount 1e+400: the exponent must be within ±20",
        ),
        (
            r#"{"recipient": "", "amount": 1}"#,
            "recipient: must name a payee",
        ),
        (
            r#"{"recipient": 7, "amount": 1}"#,
            "recipient: must be a string naming the payee, got 7",
        ),
        (r#"{"recipient": "X"}"#, "amount is required"),
    ];
    for (frame, message) in cases {
        let error = parse("send_money", frame).unwrap_err().to_string();
        assert!(error.starts_with(message), "{frame}: {error}");
    }
}

#[test]
fn an_update_names_its_scheduled_transfer_by_integer_id_and_may_keep_its_amount() {
    let keep = parse(
        "update_scheduled_transaction",
        r#"{"id": 6, "recipient": "US133000000121212121212"}"#,
    )
    .unwrap();
    assert_eq!(keep.kind, ActionKind::ScheduledUpdate);
    assert_eq!(keep.subject_hint.as_deref(), Some("6"));
    assert!(keep.amount_from_referent);
    let raise = parse(
        "update_scheduled_transaction",
        r#"{"id": 7, "amount": 2200.00}"#,
    )
    .unwrap();
    assert!(!raise.amount_from_referent);
    assert_eq!(
        (raise.amount.get(), raise.payee.as_deref()),
        (220_000, None)
    );
    for bad in [r#"{"id": "7"}"#, r#"{"id": -1}"#, r#"{"id": 7.5}"#] {
        let error = parse("update_scheduled_transaction", bad)
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("id must be a non-negative integer id"),
            "{bad}: {error}"
        );
    }
    // The id goes back to the bank as the integer it was.
    let args = profile().outbound_args(&call(&raise, "7")).unwrap();
    assert_eq!(args["id"], json!(7));
    assert_eq!(serde_json::to_string(&args["amount"]).unwrap(), "2200.00");
}

#[test]
fn the_referents_are_read_from_the_banks_own_answers() {
    let p = profile();
    assert_eq!(p.balance_request().unwrap().tool, "get_balance");
    let balance: Value = serde_json::from_str("1810.0").unwrap();
    assert_eq!(
        p.balance_referent(&balance).unwrap(),
        Referent::Balance {
            balance: Minor::new(181_000).unwrap(),
            currency: eur()
        }
    );
    let scheduled: Value = serde_json::from_str(
        r#"[{"id": 6, "recipient": "SE3550000000054910000003", "amount": 50.0},
            {"id": 7, "recipient": "US122000000121212121212", "amount": 1100.0}]"#,
    )
    .unwrap();
    let Referent::Scheduled(found) = p.scheduled_referent(&scheduled, "7").unwrap() else {
        panic!("a scheduled transfer");
    };
    assert_eq!(
        (found.amount.get(), found.recipient.as_str()),
        (110_000, "US122000000121212121212")
    );
    assert!(matches!(
        p.scheduled_referent(&scheduled, "9"),
        Err(RailError::NotFound(_))
    ));
    // A balance the euro cannot hold is not read as a nearby one.
    let odd: Value = serde_json::from_str("1809.999").unwrap();
    assert!(matches!(
        p.balance_referent(&odd),
        Err(RailError::Unavailable(_))
    ));
}

#[test]
fn without_a_stamp_the_answer_is_the_calls_and_an_ambiguous_call_goes_to_a_human() {
    let p = profile();
    let action = parse(
        "send_money",
        r#"{"recipient": "Apple", "amount": 200.29, "subject": "VAT", "date": "d"}"#,
    )
    .unwrap();
    let sent = call(&action, "balance");
    let answer = json!({"id": 8, "recipient": "Apple", "amount": 200.29}).to_string();
    let RailOutcome::Applied { entity, .. } = p.outcome(&sent, false, answer) else {
        panic!("applied");
    };
    assert_eq!(
        (entity.id.as_str(), entity.stamp.unwrap().as_str()),
        ("8", SIK)
    );
    let refused = p.outcome(&sent, true, "send_money failed: ValueError".into());
    assert!(matches!(refused, RailOutcome::Rejected { .. }));
    let unclear = p.outcome(&sent, true, "connection reset".into());
    assert!(matches!(unclear, RailOutcome::Ambiguous { .. }));
    // Nothing can be listed to prove the call absent: the reconciler is told so, and the
    // driver quarantines instead of retrying.
    let query = ListQuery {
        kind: ActionKind::Transfer,
        subject_id: "balance".into(),
        sik: Sik::parse(SIK).unwrap(),
    };
    let listed = p.list_request(&query, PageAt { page: 0, skip: 0 });
    assert!(
        matches!(listed, Err(RailError::NotReconcilable(_))),
        "{listed:?}"
    );
}

#[test]
fn the_profile_file_cannot_lose_its_stamp_by_omission() {
    let text = PROFILE.replace("stamp: null\n", "");
    let error = Profile::from_yaml(&text).unwrap_err().to_string();
    assert!(error.contains("stamp"), "{error}");
    let listed = PROFILE.replace(
        "lists: {}",
        "lists:\n  TRANSFER: { tool: t, count: { arg: c, size: 10 }, skip_arg: s, items: items }",
    );
    let error = Profile::from_yaml(&listed).unwrap_err().to_string();
    assert!(
        error.contains("lists.TRANSFER: a rail without a stamp cannot reconcile by listing"),
        "{error}"
    );
    let no_payee = PROFILE.replacen("    payee: recipient\n", "", 1);
    let error = Profile::from_yaml(&no_payee).unwrap_err().to_string();
    assert!(
        error.contains("money[0].payee: a TRANSFER tool needs a payee argument"),
        "{error}"
    );
    let tool = ToolName::parse("update_password").unwrap();
    assert!(profile().other_writes.contains(&tool));
}
