//! Arbitrary JSON arguments into the money-action parser: a clear refusal or a valid action,
//! never a panic. Floats anywhere (serde_json reads an integer past u64 as one, so huge integers
//! too) are refused. A valid action is exactly what the agent wrote, never a coerced reading:
//! its amount is the JSON integer given, in range; its payment id is the string given, ASCII
//! (a look-alike such as `pay_１００２` is refused, not normalised); the reserved stamps are
//! absent; every argument it keeps has a canonical form; and key order does not change it.
#![no_main]

use interlock_spec::action::{ActionKind, ProposedAction, STAMP_NOTE_KEY};
use interlock_spec::canonical::canonical_json;
use interlock_spec::ids::{AgentId, MerchantId};
use interlock_spec::money::MINOR_MAX;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn has_float(value: &Value) -> bool {
    match value {
        Value::Number(n) => n.is_f64(),
        Value::Array(items) => items.iter().any(has_float),
        Value::Object(map) => map.values().any(has_float),
        _ => false,
    }
}

fn reversed(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .rev()
                .map(|(k, v)| (k.clone(), reversed(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(reversed).collect()),
        other => other.clone(),
    }
}

fn parse(kind: ActionKind, tool: &str, args: &Value) -> Result<ProposedAction, String> {
    let profile = interlock_profile::razorpay::profile();
    let money = profile
        .money_tool(tool)
        .expect("a money tool of the profile");
    assert_eq!(money.kind, kind);
    profile
        .parse(
            money,
            AgentId::parse("agent_fuzz").unwrap(),
            MerchantId::parse("acc_FUZZ").unwrap(),
            args,
        )
        .map_err(|e| e.to_string())
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let Ok(args) = serde_json::from_slice::<Value>(rest) else {
        return;
    };
    let (kind, tool) = if selector % 2 == 0 {
        (ActionKind::Refund, "create_refund")
    } else {
        (ActionKind::Settlement, "create_instant_settlement")
    };
    let parsed = parse(kind, tool, &args);
    // Key order is not meaning: the same arguments, keys reversed, get the same answer.
    let reordered = parse(kind, tool, &reversed(&args));
    assert_eq!(
        parsed
            .as_ref()
            .map(|a| canonical_json(&serde_json::to_value(a).unwrap()).unwrap()),
        reordered
            .as_ref()
            .map(|a| canonical_json(&serde_json::to_value(a).unwrap()).unwrap()),
        "key order changed the action"
    );
    let action = match parsed {
        Err(error) => {
            assert!(!error.is_empty(), "a refusal says why");
            return;
        }
        Ok(action) => action,
    };
    assert!(!has_float(&args), "a float was accepted: {args}");
    let amount = action.amount.get();
    assert!(amount > 0 && amount <= MINOR_MAX, "{amount}");
    assert_eq!(
        args["amount"].as_u64(),
        Some(amount),
        "the amount as written"
    );
    assert!(args.get("receipt").is_none(), "receipt is the stamp's");
    assert!(
        args["notes"].get(STAMP_NOTE_KEY).is_none(),
        "notes.{STAMP_NOTE_KEY} is the stamp's"
    );
    let kept = Value::Object(action.passthrough.clone());
    canonical_json(&kept).expect("kept arguments are canonical");
    for key in ["amount", "interlock_distinct_reason"] {
        assert!(
            !action.passthrough.contains_key(key),
            "{key} is not passed through"
        );
    }
    for (key, value) in &action.passthrough {
        assert_eq!(args.get(key), Some(value), "{key} passed through unchanged");
    }
    if kind == ActionKind::Refund {
        let id = action
            .subject_hint
            .as_deref()
            .expect("a refund names its payment");
        assert_eq!(
            args["payment_id"].as_str(),
            Some(id),
            "the payment id as written"
        );
        assert!(
            !action.passthrough.contains_key("payment_id"),
            "a refund's subject is not passed through"
        );
        assert!(id.starts_with("pay_") && id.is_ascii());
    } else {
        assert!(action.subject_hint.is_none());
        assert!(
            matches!(
                args.get("settle_full_balance"),
                None | Some(Value::Bool(false))
            ),
            "a settlement of the full balance has no amount to bound"
        );
    }
    if let Some(reason) = &action.distinct {
        let given = args["interlock_distinct_reason"]
            .as_str()
            .expect("a string");
        assert_eq!(
            reason.as_str(),
            given.trim(),
            "the distinct reason, trimmed"
        );
        assert!(!reason.is_empty());
    }
});
