//! Profile files: the built-in one, a decimal-amount one derived from it, and the refusals.

use interlock_driver::rail::RailCall;
use interlock_profile::razorpay::PROFILE_YAML;
use interlock_profile::{Profile, ProfileError};
use interlock_spec::action::{ActionKind, AmountEncoding};
use interlock_spec::ids::{AgentId, MerchantId, Sik, ToolName};
use interlock_spec::money::{Currency, Minor};
use serde_json::{Value, json};

const SIK: &str = "WF6QNWANGI5M56CWTMOQCJYSXAYAPDCA";

/// The built-in profile with `from` replaced by `to` (exactly once).
fn edited(from: &str, to: &str) -> String {
    assert_eq!(PROFILE_YAML.matches(from).count(), 1, "{from}");
    PROFILE_YAML.replacen(from, to, 1)
}

fn refused(text: &str) -> String {
    Profile::from_yaml(text).unwrap_err().to_string()
}

/// A rail that pays euros in decimal major units (the settlement tool of the built-in profile,
/// re-encoded).
fn euro_profile() -> Profile {
    let text = edited(
        "amount: { arg: amount, encoding: minor_integer }\n    false_only",
        "amount: { arg: amount, encoding: { decimal_major: EUR } }\n    false_only",
    );
    Profile::from_yaml(&text).unwrap()
}

#[test]
fn the_built_in_profile_is_the_file_shipped_with_it() {
    let profile = Profile::load("razorpay").unwrap();
    assert_eq!(profile, Profile::from_yaml(PROFILE_YAML).unwrap());
    assert_eq!(profile.name, "razorpay");
    assert_eq!(
        profile.money_tool_names(),
        ["create_refund", "create_instant_settlement"]
    );
    let refund = profile.money_tool("create_refund").unwrap();
    assert_eq!(refund.amount.encoding, AmountEncoding::MinorInteger);
    assert_eq!(
        refund.subject.as_ref().unwrap().prefix.as_deref(),
        Some("pay_")
    );
    assert_eq!(profile.receipt().next().unwrap().prefix, "ilk_");
    assert_eq!(profile.lists[&ActionKind::Refund].count.size, 100);
}

#[test]
fn a_profile_file_on_disk_is_loaded_and_an_unknown_name_is_refused() {
    let dir = std::env::temp_dir().join(format!("interlock-profile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("rail.yaml");
    std::fs::write(&path, edited("profile: razorpay", "profile: my_rail")).unwrap();
    let loaded = Profile::load(path.to_str().unwrap()).unwrap();
    assert_eq!(loaded.name, "my_rail");
    assert_eq!(
        Profile::load("stripe").unwrap_err(),
        ProfileError::Unknown("stripe".into())
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_decimal_rail_reads_and_writes_exact_amounts() {
    let profile = euro_profile();
    let money = profile.money_tool("create_instant_settlement").unwrap();
    let parse = |args: Value| {
        let agent = AgentId::parse("agent_a").unwrap();
        let merchant = MerchantId::parse("acc_1").unwrap();
        profile.parse(money, agent, merchant, &args)
    };
    // The number's text, not an f64: 98.70 is 9870 cents, and 0.30 is 30.
    let frame = r#"{"amount": 98.70, "description": "d"}"#;
    let args: Value = serde_json::from_str(frame).unwrap();
    assert_eq!(parse(args).unwrap().amount.get(), 9870);
    assert_eq!(parse(json!({"amount": "0.30"})).unwrap().amount.get(), 30);
    let cases = [
        (
            r#"{"amount": 0.001}"#,
            "amount: amount 0.001 has 3 decimal places; EUR's minor unit has 2",
        ),
        (
            r#"{"amount": 1e400}"#,
            "amount: amount 1e+400: the exponent must be within ±20",
        ),
        (
            r#"{"amount": "NaN"}"#,
            "amount: amount must be a decimal number of major units like 98.70",
        ),
        (
            r#"{"amount": "12,50"}"#,
            "amount: amount must be a decimal number of major units like 98.70",
        ),
        (
            r#"{"amount": -5}"#,
            "amount: amount must not be negative, got -5",
        ),
        (
            r#"{"amount": 0.00}"#,
            "amount: amount must be positive, got 0.00",
        ),
    ];
    for (frame, message) in cases {
        let args: Value = serde_json::from_str(frame).unwrap();
        let error = parse(args).unwrap_err().to_string();
        assert!(error.starts_with(message), "{frame}: {error}");
    }
    // The outbound call carries the amount as the rail writes it, exactly.
    let call = RailCall {
        tool: ToolName::parse("create_instant_settlement").unwrap(),
        kind: ActionKind::Settlement,
        sik: Sik::parse(SIK).unwrap(),
        subject_id: "balance".into(),
        amount: Minor::new(9870).unwrap(),
        currency: Currency::parse("EUR").unwrap(),
        payee: None,
        passthrough: serde_json::Map::new(),
    };
    let args = profile.outbound_args(&call).unwrap();
    assert_eq!(serde_json::to_string(&args["amount"]).unwrap(), "98.70");
}

#[test]
fn an_integer_rail_still_refuses_every_float() {
    let profile = Profile::load("razorpay").unwrap();
    let money = profile.money_tool("create_refund").unwrap();
    let args: Value = serde_json::from_str(r#"{"payment_id": "pay_1", "amount": 98.70}"#).unwrap();
    let agent = AgentId::parse("agent_a").unwrap();
    let merchant = MerchantId::parse("acc_1").unwrap();
    let error = profile.parse(money, agent, merchant, &args).unwrap_err();
    assert_eq!(
        error.to_string(),
        "amount: amount must be an integer in minor units, got float 98.70"
    );
}

#[test]
fn a_bad_profile_is_refused_with_its_path() {
    let unknown = refused(&edited(
        "profile: razorpay",
        "profile: razorpay\ncolour: red",
    ));
    assert!(unknown.contains("colour"), "{unknown}");
    let cases = [
        (
            edited(
                "encoding: minor_integer } # paise",
                "encoding: { decimal_major: XYZ } } # paise",
            ),
            "money[0].amount.encoding: decimal amounts need an ISO 4217 currency",
        ),
        (
            edited("tool: create_instant_settlement", "tool: create_refund"),
            "money[1].tool: names a tool listed twice",
        ),
        (
            edited("false_only: [settle_full_balance]", "false_only: [notes]"),
            "money[1].false_only: \"notes\" is empty or already used",
        ),
        (
            edited("false_only: [settle_full_balance]", "false_only: [amount]"),
            "money[1].false_only: \"amount\" is empty or already used",
        ),
        (
            edited(
                "count: { arg: count, size: 100 } # Razorpay's maximum",
                "count: { arg: count, size: 0 }",
            ),
            "lists.REFUND.count.size: must be 1 to 1000",
        ),
        (
            edited(
                "rejected_marker: BAD_REQUEST_ERROR",
                "rejected_marker: \"\"",
            ),
            "rejected_marker: must not be empty",
        ),
        (
            edited("prefix: \"pay_\"", "prefix: \"\""),
            "money[0].subject.prefix: must not be empty",
        ),
    ];
    for (text, message) in cases {
        let error = refused(&text);
        assert!(
            error.starts_with(&format!("the profile is not valid: {message}")),
            "{message}: {error}"
        );
    }
    let huge = format!("{PROFILE_YAML}\n#{}", "x".repeat(70_000));
    assert_eq!(
        Profile::from_yaml(&huge).unwrap_err(),
        ProfileError::TooLarge(huge.len())
    );
}
