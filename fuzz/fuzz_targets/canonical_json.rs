//! Arbitrary JSON through RFC 8785 canonicalisation and the SIK: canonicalising is idempotent,
//! and neither key order nor whitespace changes the canonical text or the key.
#![no_main]

use interlock_spec::canonical::canonical_json;
use interlock_spec::ids::{MerchantId, ToolName};
use interlock_spec::money::{Currency, Minor};
use interlock_spec::sik::{SikInput, compute_sik};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

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

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let Ok(canonical) = canonical_json(&value) else {
        return;
    };
    let reparsed: Value = serde_json::from_str(&canonical).expect("canonical text is JSON");
    assert_eq!(
        canonical_json(&reparsed).expect("still canonical"),
        canonical,
        "idempotent"
    );
    let pretty = serde_json::to_string_pretty(&reversed(&value)).expect("serializes");
    let shuffled: Value = serde_json::from_str(&pretty).expect("pretty text is JSON");
    assert_eq!(
        canonical_json(&shuffled).expect("canonical"),
        canonical,
        "order and space"
    );
    let key = |extra: Value| {
        compute_sik(&SikInput {
            merchant_id: MerchantId::parse("acc_FUZZ").unwrap(),
            tool: ToolName::parse("create_refund").unwrap(),
            subject: "pay_fuzz".to_owned(),
            amount_minor: Minor::new(100).unwrap(),
            currency: Currency::INR,
            extra: Some(extra),
            window: None,
            distinct: None,
        })
    };
    assert_eq!(
        key(value).ok(),
        key(shuffled).ok(),
        "the SIK ignores key order and space"
    );
});
