//! Arbitrary JSON arguments into the money-action parser: a clear refusal or a valid action,
//! never a panic. A valid action's amount is a positive integer in range, and every argument it
//! keeps has a canonical form (so it can be keyed and audited).
#![no_main]

use interlock_spec::action::{self, ActionKind};
use interlock_spec::canonical::canonical_json;
use interlock_spec::ids::{AgentId, MerchantId, ToolName};
use interlock_spec::money::MINOR_MAX;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

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
    let parsed = action::parse(
        kind,
        AgentId::parse("agent_fuzz").unwrap(),
        MerchantId::parse("acc_FUZZ").unwrap(),
        ToolName::parse(tool).unwrap(),
        &args,
    );
    match parsed {
        Err(error) => assert!(!error.to_string().is_empty(), "a refusal says why"),
        Ok(action) => {
            assert!(action.amount.get() > 0 && action.amount.get() <= MINOR_MAX);
            let kept = Value::Object(action.passthrough.clone());
            canonical_json(&kept).expect("kept arguments are canonical");
            if kind == ActionKind::Refund {
                let id = action
                    .payment_hint
                    .as_deref()
                    .expect("a refund names its payment");
                assert!(id.starts_with("pay_") && id.is_ascii());
            }
        }
    }
});
