//! The built-in profile: Razorpay's MCP server (`razorpay-mcp`), and the demo's refund desk
//! mandate written for it. Every Razorpay tool and argument name Interlock uses outside tests,
//! the mock, the bench and chaos is in this file.

use crate::Profile;
use interlock_spec::mandate::OnUnresolvable;
use interlock_spec::mandate::template::{DAY_MS, Template};
use std::sync::OnceLock;

/// The profile file, built into the binary.
pub const PROFILE_YAML: &str = include_str!("../profiles/razorpay.yaml");

/// Razorpay's profile: `create_refund` (a refund of a payment, stamped with a receipt and a
/// note) and `create_instant_settlement` (a settlement from the balance, stamped with a note).
pub fn profile() -> Profile {
    static PROFILE: OnceLock<Profile> = OnceLock::new();
    PROFILE
        .get_or_init(|| {
            // The file is part of the binary and a test reads it: a failure is a build defect.
            Profile::from_yaml(PROFILE_YAML).expect("the built-in Razorpay profile is valid")
        })
        .clone()
}

/// The demo's refund desk for `agent_id`, unpinned:
///
/// - `fetch_payment`: a read, moves no money;
/// - `create_refund`: irreversible, 100..=500000 per call, keyed on `payment_id` forever;
/// - `create_instant_settlement`: irreversible, 200..=100000 per call, held for a human when
///   the balance cannot be read, keyed on `description` for a day;
/// - one day: at most 40 money calls and 2000000 moved, at most 20000 in fees.
pub fn refund_desk(agent_id: &str) -> Template {
    Template::new(agent_id)
        .read("fetch_payment")
        .money("create_refund", 100, 500_000)
        .money("create_instant_settlement", 200, 100_000)
        .on_unresolvable("create_instant_settlement", Some(OnUnresolvable::Hold))
        .window(40, 2_000_000)
        .fee_budget(20_000)
        .idempotency("create_refund", &["payment_id"], None)
        .idempotency("create_instant_settlement", &["description"], Some(DAY_MS))
}

#[cfg(test)]
mod tests {
    use super::*;
    use interlock_driver::rail::RailCall;
    use interlock_driver::rail::RailOutcome;
    use interlock_spec::action::ActionKind;
    use interlock_spec::ids::ToolName;
    use interlock_spec::ids::{AgentId, MerchantId, Sik};
    use interlock_spec::money::{Currency, Minor};
    use serde_json::{Value, json};

    const SIK: &str = "WF6QNWANGI5M56CWTMOQCJYSXAYAPDCA";

    fn call(kind: ActionKind, passthrough: Value) -> RailCall {
        let (name, subject) = match kind {
            ActionKind::Refund => ("create_refund", "pay_1002"),
            _ => ("create_instant_settlement", "balance"),
        };
        RailCall {
            tool: ToolName::parse(name).unwrap(),
            kind,
            sik: Sik::parse(SIK).unwrap(),
            subject_id: subject.into(),
            amount: Minor::new(1000).unwrap(),
            currency: Currency::INR,
            payee: None,
            passthrough: passthrough.as_object().unwrap().clone(),
        }
    }

    #[test]
    fn a_refund_goes_out_with_the_receipt_and_the_note_and_the_agents_notes_kept() {
        let args = profile()
            .outbound_args(&call(
                ActionKind::Refund,
                json!({"speed": "normal", "notes": {"why": "late"}}),
            ))
            .unwrap();
        assert_eq!(
            Value::Object(args),
            json!({"speed": "normal", "amount": 1000, "payment_id": "pay_1002",
                   "notes": {"why": "late", "interlock_sik": SIK}, "receipt": format!("ilk_{SIK}")})
        );
    }

    #[test]
    fn a_settlement_goes_out_with_the_note_and_never_the_full_balance() {
        let args = profile()
            .outbound_args(&call(
                ActionKind::Settlement,
                json!({"description": "d", "notes": []}),
            ))
            .unwrap();
        assert_eq!(
            Value::Object(args),
            json!({"description": "d", "amount": 1000, "settle_full_balance": false,
                   "notes": {"interlock_sik": SIK}})
        );
    }

    #[test]
    fn parsing_follows_the_profile_and_refuses_what_interlock_writes() {
        let p = profile();
        let parse = |name: &str, args: Value| {
            let money = p.money_tool(name).unwrap();
            let agent = AgentId::parse("agent_a").unwrap();
            let merchant = MerchantId::parse("acc_1").unwrap();
            p.parse(money, agent, merchant, &args)
        };
        let refund = parse("create_refund", json!({"payment_id": "pay_1", "amount": 5})).unwrap();
        assert_eq!(refund.subject_hint.as_deref(), Some("pay_1"));
        assert_eq!(refund.kind, ActionKind::Refund);
        let cases = [
            (
                "create_refund",
                json!({"payment_id": "pay_1", "amount": 5, "receipt": "r"}),
                "receipt is written by Interlock and must not be supplied",
            ),
            (
                "create_refund",
                json!({"payment_id": "x_1", "amount": 5}),
                "payment_id must be \"pay_\" followed by 1 to 36 letters or digits, got \"x_1\"",
            ),
            (
                "create_instant_settlement",
                json!({"amount": 5, "settle_full_balance": true}),
                "settle_full_balance must be false: give the amount explicitly",
            ),
            (
                "create_instant_settlement",
                json!({"amount": 5, "notes": {"interlock_sik": "x"}}),
                "notes.interlock_sik is written by Interlock and must not be supplied",
            ),
        ];
        for (name, args, message) in cases {
            assert_eq!(parse(name, args).unwrap_err().to_string(), message);
        }
        assert_eq!(p.kind_of("fetch_payment"), None);
        assert_eq!(
            p.kind_of("create_instant_settlement"),
            Some(ActionKind::Settlement)
        );
    }

    #[test]
    fn answers_are_classified_by_the_profile() {
        let p = profile();
        let refund = call(ActionKind::Refund, json!({}));
        let applied = p.outcome(
            &refund,
            false,
            json!({"id": "rfnd_1", "fee": 12, "tax": 2, "notes": {"interlock_sik": SIK}})
                .to_string(),
        );
        let RailOutcome::Applied {
            entity, fee, tax, ..
        } = applied
        else {
            panic!("{applied:?}");
        };
        assert_eq!(
            (entity.id.as_str(), fee.get(), tax.get()),
            ("rfnd_1", 12, 2)
        );
        assert_eq!(entity.stamp.unwrap().as_str(), SIK);
        let rejected = p.outcome(&refund, true, "BAD_REQUEST_ERROR: no".into());
        assert!(matches!(rejected, RailOutcome::Rejected { .. }));
        for (is_error, text) in [
            (true, "HTTP 502"),
            (false, "not json"),
            (false, "{\"x\":1}"),
        ] {
            let outcome = p.outcome(&refund, is_error, text.into());
            assert!(matches!(outcome, RailOutcome::Ambiguous { .. }), "{text}");
        }
        // A settlement's fee is in `fees`; a float fee counts as the whole amount.
        let settlement = call(ActionKind::Settlement, json!({}));
        let text = json!({"id": "setlod_1", "fees": 1.5}).to_string();
        let RailOutcome::Applied { fee, .. } = p.outcome(&settlement, false, text) else {
            panic!("applied");
        };
        assert_eq!(fee.get(), 1000);
    }

    #[test]
    fn the_desk_passes_the_profiles_own_mandate_rules() {
        let mandate = refund_desk("agent_a").build().unwrap();
        profile().check_mandate(&mandate).unwrap();
        let windowed = refund_desk("agent_a")
            .idempotency("create_refund", &["payment_id"], Some(DAY_MS))
            .build()
            .unwrap();
        let problems = profile().check_mandate(&windowed).unwrap_err();
        assert_eq!(problems[0].path, "idempotency.create_refund.window_ms");
    }
}
