//! The seed: the payments, orders, refunds and balance an empty journal starts from.
//!
//! Format (JSON, unknown fields refused, integers only):
//! `{"currency":"INR","balance":N,"payments":[…],"orders":[…],"refunds":[…],"settlements":[…]}`;
//! see the crate's README for every field. `--seed demo` is the embedded [`DEMO_SEED`].

use std::collections::{HashMap, HashSet};
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::model::{AMOUNT_MAX, REFUND_AMOUNT_MIN, SETTLEMENT_AMOUNT_MIN, Speed};
use crate::tools::{
    DESCRIPTION_CHARS_MAX, NOTE_KEY_CHARS_MAX, NOTE_VALUE_CHARS_MAX, NOTES_KEYS_MAX,
    RECEIPT_CHARS_MAX,
};

/// The embedded demo seed (`rail-mock/seeds/demo.json`).
pub const DEMO_SEED: &str = include_str!("../seeds/demo.json");
/// The name that selects [`DEMO_SEED`] in `--seed`.
pub const DEMO_SEED_NAME: &str = "demo";
/// The largest seed file read.
pub const SEED_BYTES_MAX: u64 = 4 * 1024 * 1024;
/// The longest entity id accepted in a seed.
pub const SEED_ID_CHARS_MAX: usize = 40;
/// `created_at` of a seeded entity that gives none (2025-12-02T00:00:00Z).
pub const SEED_CREATED_AT_DEFAULT: i64 = 1_764_633_600;
/// The id prefix of refunds the rail creates; a seed may not use it.
pub const GENERATED_REFUND_PREFIX: &str = "rfnd_MOCK";
/// The id prefix of settlements the rail creates.
pub const GENERATED_SETTLEMENT_PREFIX: &str = "setlod_MOCK";

fn default_currency() -> String {
    "INR".to_owned()
}

/// A seed document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Seed {
    /// The currency of every entity (default `INR`).
    #[serde(default = "default_currency")]
    pub currency: String,
    /// The settleable balance, in minor units.
    pub balance: i64,
    /// Captured payments.
    #[serde(default)]
    pub payments: Vec<SeedPayment>,
    /// Orders.
    #[serde(default)]
    pub orders: Vec<SeedOrder>,
    /// Refunds that already exist; they count against their payment's refundable amount.
    #[serde(default)]
    pub refunds: Vec<SeedRefund>,
    /// Instant settlements already made. They are history: `balance` is what is left after
    /// them. Left out of the canonical text when empty, so a journal seeded before the field
    /// existed still matches its seed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub settlements: Vec<SeedSettlement>,
}

/// A seeded payment (captured; `amount_refunded` follows from the seeded refunds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedPayment {
    /// `pay_…`
    pub id: String,
    /// Captured amount.
    pub amount: i64,
    /// The order it paid.
    #[serde(default)]
    pub order_id: Option<String>,
    /// Notes.
    #[serde(default)]
    pub notes: Map<String, Value>,
    /// Unix seconds (default [`SEED_CREATED_AT_DEFAULT`]).
    #[serde(default)]
    pub created_at: Option<i64>,
}

/// A seeded order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedOrder {
    /// `order_…`
    pub id: String,
    /// Order amount.
    pub amount: i64,
    /// Paid so far (default 0).
    #[serde(default)]
    pub amount_paid: i64,
    /// Receipt.
    #[serde(default)]
    pub receipt: Option<String>,
    /// Notes.
    #[serde(default)]
    pub notes: Map<String, Value>,
    /// Unix seconds (default [`SEED_CREATED_AT_DEFAULT`]).
    #[serde(default)]
    pub created_at: Option<i64>,
}

/// A seeded refund.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedRefund {
    /// `rfnd_…` (not starting with [`GENERATED_REFUND_PREFIX`]).
    pub id: String,
    /// A seeded payment.
    pub payment_id: String,
    /// Amount.
    pub amount: i64,
    /// Receipt, unique per payment.
    #[serde(default)]
    pub receipt: Option<String>,
    /// `normal` (default) or `optimum`.
    #[serde(default)]
    pub speed: Option<String>,
    /// Notes.
    #[serde(default)]
    pub notes: Map<String, Value>,
    /// Fee charged (default 0).
    #[serde(default)]
    pub fee: i64,
    /// Tax on the fee (default 0).
    #[serde(default)]
    pub tax: i64,
    /// Unix seconds (default [`SEED_CREATED_AT_DEFAULT`]).
    #[serde(default)]
    pub created_at: Option<i64>,
}

/// A seeded instant settlement (`amount_settled` follows: requested minus fees and tax).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedSettlement {
    /// `setlod_…` (not starting with [`GENERATED_SETTLEMENT_PREFIX`]).
    pub id: String,
    /// What was drawn from the balance, at least [`SETTLEMENT_AMOUNT_MIN`].
    pub amount_requested: i64,
    /// Fee charged (default 0).
    #[serde(default)]
    pub fees: i64,
    /// Tax on the fee (default 0).
    #[serde(default)]
    pub tax: i64,
    /// Whether the whole balance was asked for (default false).
    #[serde(default)]
    pub settle_full_balance: bool,
    /// Description, as `create_instant_settlement` accepts it.
    #[serde(default)]
    pub description: Option<String>,
    /// Notes.
    #[serde(default)]
    pub notes: Map<String, Value>,
    /// Unix seconds (default [`SEED_CREATED_AT_DEFAULT`]).
    #[serde(default)]
    pub created_at: Option<i64>,
}

/// A seed that could not be read or is not valid; the message names the source and the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("seed {source_name}: {message}")]
pub struct SeedError {
    /// `demo` or the file path.
    pub source_name: String,
    /// What is wrong, with the field path or the line.
    pub message: String,
}

impl Seed {
    /// Load `--seed ARG`: [`DEMO_SEED_NAME`] selects the embedded seed, anything else is a path.
    pub fn load(arg: &str) -> Result<Seed, SeedError> {
        if arg == DEMO_SEED_NAME {
            return Seed::parse(DEMO_SEED, DEMO_SEED_NAME);
        }
        let fail = |message: String| SeedError {
            source_name: arg.to_owned(),
            message,
        };
        let path = Path::new(arg);
        let meta = std::fs::metadata(path).map_err(|e| fail(format!("cannot read: {e}")))?;
        if meta.len() > SEED_BYTES_MAX {
            return Err(fail(format!(
                "{} bytes is larger than the limit of {SEED_BYTES_MAX}",
                meta.len()
            )));
        }
        let text = std::fs::read_to_string(path).map_err(|e| fail(format!("cannot read: {e}")))?;
        Seed::parse(&text, arg)
    }

    /// Parse and validate seed text; `source_name` is used in messages.
    pub fn parse(text: &str, source_name: &str) -> Result<Seed, SeedError> {
        let fail = |message: String| SeedError {
            source_name: source_name.to_owned(),
            message,
        };
        let seed: Seed = serde_json::from_str(text).map_err(|e| fail(e.to_string()))?;
        seed.validate().map_err(fail)?;
        Ok(seed)
    }

    /// The canonical text stored in the journal, compared when a journal is reopened with a seed.
    pub fn canonical(&self) -> String {
        // Serialising plain structs, maps and strings cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The semantic checks serde cannot make; the error names the field path.
    fn validate(&self) -> Result<(), String> {
        if self.currency.len() != 3 || !self.currency.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(format!(
                "currency: must be three capital letters, got {:?}",
                self.currency
            ));
        }
        check_amount("balance", self.balance, 0)?;
        let mut ids = HashSet::new();
        let mut unrefunded = HashMap::new();
        for (i, p) in self.payments.iter().enumerate() {
            let at = format!("payments[{i}]");
            check_id(&at, &p.id, "pay_", &mut ids)?;
            check_amount(&format!("{at}.amount"), p.amount, REFUND_AMOUNT_MIN)?;
            check_notes(&format!("{at}.notes"), &p.notes)?;
            check_time(&format!("{at}.created_at"), p.created_at)?;
            unrefunded.insert(p.id.as_str(), p.amount);
        }
        let order_ids: HashSet<&str> = self.orders.iter().map(|o| o.id.as_str()).collect();
        for (i, p) in self.payments.iter().enumerate() {
            if let Some(order_id) = &p.order_id
                && !order_ids.contains(order_id.as_str())
            {
                return Err(format!(
                    "payments[{i}].order_id: {order_id:?} is not a seeded order"
                ));
            }
        }
        for (i, o) in self.orders.iter().enumerate() {
            let at = format!("orders[{i}]");
            check_id(&at, &o.id, "order_", &mut ids)?;
            check_amount(&format!("{at}.amount"), o.amount, REFUND_AMOUNT_MIN)?;
            check_amount(&format!("{at}.amount_paid"), o.amount_paid, 0)?;
            if o.amount_paid > o.amount {
                return Err(format!(
                    "{at}.amount_paid: {} is more than the order amount {}",
                    o.amount_paid, o.amount
                ));
            }
            check_receipt(&format!("{at}.receipt"), o.receipt.as_deref())?;
            check_notes(&format!("{at}.notes"), &o.notes)?;
            check_time(&format!("{at}.created_at"), o.created_at)?;
        }
        let mut receipts = HashSet::new();
        for (i, r) in self.refunds.iter().enumerate() {
            let at = format!("refunds[{i}]");
            check_id(&at, &r.id, "rfnd_", &mut ids)?;
            if r.id.starts_with(GENERATED_REFUND_PREFIX) {
                return Err(format!(
                    "{at}.id: {:?} uses the prefix {GENERATED_REFUND_PREFIX} that the rail keeps for the refunds it creates",
                    r.id
                ));
            }
            check_amount(&format!("{at}.amount"), r.amount, REFUND_AMOUNT_MIN)?;
            let Some(left) = unrefunded.get_mut(r.payment_id.as_str()) else {
                return Err(format!(
                    "{at}.payment_id: {:?} is not a seeded payment",
                    r.payment_id
                ));
            };
            if r.amount > *left {
                return Err(format!(
                    "{at}.amount: {} is more than the {} still refundable on {}",
                    r.amount, left, r.payment_id
                ));
            }
            *left -= r.amount;
            check_receipt(&format!("{at}.receipt"), r.receipt.as_deref())?;
            if let Some(receipt) = &r.receipt
                && !receipts.insert((r.payment_id.as_str(), receipt.as_str()))
            {
                return Err(format!(
                    "{at}.receipt: {receipt:?} is already used by another refund of {}",
                    r.payment_id
                ));
            }
            if let Some(speed) = &r.speed
                && Speed::parse(speed).is_none()
            {
                return Err(format!(
                    "{at}.speed: must be normal or optimum, got {speed:?}"
                ));
            }
            check_amount(&format!("{at}.fee"), r.fee, 0)?;
            check_amount(&format!("{at}.tax"), r.tax, 0)?;
            check_notes(&format!("{at}.notes"), &r.notes)?;
            check_time(&format!("{at}.created_at"), r.created_at)?;
        }
        for (i, st) in self.settlements.iter().enumerate() {
            let at = format!("settlements[{i}]");
            check_id(&at, &st.id, "setlod_", &mut ids)?;
            if st.id.starts_with(GENERATED_SETTLEMENT_PREFIX) {
                return Err(format!(
                    "{at}.id: {:?} uses the prefix {GENERATED_SETTLEMENT_PREFIX} that the rail keeps for the settlements it creates",
                    st.id
                ));
            }
            check_amount(
                &format!("{at}.amount_requested"),
                st.amount_requested,
                SETTLEMENT_AMOUNT_MIN,
            )?;
            check_amount(&format!("{at}.fees"), st.fees, 0)?;
            check_amount(&format!("{at}.tax"), st.tax, 0)?;
            // Both are at most AMOUNT_MAX (2^53 - 1), so the sum cannot overflow.
            if st.fees + st.tax > st.amount_requested {
                return Err(format!(
                    "{at}.fees: fees {} and tax {} are more than the {} requested",
                    st.fees, st.tax, st.amount_requested
                ));
            }
            if let Some(d) = &st.description
                && (d.chars().count() > DESCRIPTION_CHARS_MAX
                    || !d.chars().all(|c| c.is_ascii_alphanumeric() || c == ' '))
            {
                return Err(format!(
                    "{at}.description: at most {DESCRIPTION_CHARS_MAX} letters, digits or spaces, got {d:?}"
                ));
            }
            check_notes(&format!("{at}.notes"), &st.notes)?;
            check_time(&format!("{at}.created_at"), st.created_at)?;
        }
        Ok(())
    }
}

fn check_id(at: &str, id: &str, prefix: &str, seen: &mut HashSet<String>) -> Result<(), String> {
    let chars = id.chars().count();
    if !id.starts_with(prefix)
        || chars <= prefix.len()
        || chars > SEED_ID_CHARS_MAX
        || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return Err(format!(
            "{at}.id: must be {prefix} followed by letters, digits or _ (at most {SEED_ID_CHARS_MAX} characters), got {id:?}"
        ));
    }
    if !seen.insert(id.to_owned()) {
        return Err(format!("{at}.id: {id:?} appears twice"));
    }
    Ok(())
}

fn check_amount(at: &str, value: i64, min: i64) -> Result<(), String> {
    if value < min || value > AMOUNT_MAX {
        return Err(format!(
            "{at}: must be an integer from {min} to {AMOUNT_MAX}, got {value}"
        ));
    }
    Ok(())
}

fn check_time(at: &str, value: Option<i64>) -> Result<(), String> {
    match value {
        Some(v) if !(0..=AMOUNT_MAX / 1000).contains(&v) => {
            Err(format!("{at}: must be unix seconds, got {v}"))
        }
        _ => Ok(()),
    }
}

fn check_receipt(at: &str, receipt: Option<&str>) -> Result<(), String> {
    match receipt {
        Some(r) if r.is_empty() || r.chars().count() > RECEIPT_CHARS_MAX => Err(format!(
            "{at}: must be 1 to {RECEIPT_CHARS_MAX} characters, got {r:?}"
        )),
        _ => Ok(()),
    }
}

fn check_notes(at: &str, notes: &Map<String, Value>) -> Result<(), String> {
    if notes.len() > NOTES_KEYS_MAX {
        return Err(format!(
            "{at}: at most {NOTES_KEYS_MAX} keys, got {}",
            notes.len()
        ));
    }
    for (k, v) in notes {
        let ok = k.chars().count() <= NOTE_KEY_CHARS_MAX
            && v.as_str()
                .is_some_and(|s| s.chars().count() <= NOTE_VALUE_CHARS_MAX);
        if !ok {
            return Err(format!(
                "{at}.{k}: must be a string of at most {NOTE_VALUE_CHARS_MAX} characters under a key of at most {NOTE_KEY_CHARS_MAX}"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demo_seed_is_valid() {
        let seed = Seed::load(DEMO_SEED_NAME).expect("demo seed");
        assert!(
            seed.payments
                .iter()
                .any(|p| p.id == "pay_1002" && p.amount == 189_900)
        );
    }

    #[test]
    fn a_float_amount_names_the_line() {
        let err = Seed::parse(
            r#"{"balance": 1, "payments": [{"id": "pay_1", "amount": 100.0}]}"#,
            "x.json",
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("seed x.json: invalid type: floating point"),
            "{err}"
        );
        assert!(err.to_string().contains("line 1"), "{err}");
    }

    #[test]
    fn an_over_refunded_payment_names_the_field() {
        let err = Seed::parse(
            r#"{"balance": 0, "payments": [{"id": "pay_1", "amount": 100}],
                "refunds": [{"id": "rfnd_1", "payment_id": "pay_1", "amount": 200}]}"#,
            "x.json",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "seed x.json: refunds[0].amount: 200 is more than the 100 still refundable on pay_1"
        );
    }

    #[test]
    fn an_unknown_field_is_refused() {
        let err = Seed::parse(r#"{"balance": 0, "payouts": []}"#, "x.json").unwrap_err();
        assert!(err.message.contains("unknown field `payouts`"), "{err}");
        let err = Seed::parse(
            r#"{"balance": 0, "settlements": [{"id": "setlod_1", "amount_requested": 500, "amount": 5}]}"#,
            "x.json",
        )
        .unwrap_err();
        assert!(err.message.contains("unknown field `amount`"), "{err}");
    }

    #[test]
    fn seeded_settlements_are_read_and_checked() {
        let seed = Seed::parse(
            r#"{"balance": 0, "settlements": [{"id": "setlod_SEED1", "amount_requested": 500,
                "fees": 2, "tax": 1, "description": "last week", "notes": {"k": "v"}}]}"#,
            "x.json",
        )
        .expect("a valid settlement");
        assert_eq!(seed.settlements[0].amount_requested, 500);
        assert!(!seed.settlements[0].settle_full_balance);
        for (settlement, message) in [
            (
                r#"{"id": "setl_1", "amount_requested": 500}"#,
                "settlements[0].id: must be setlod_",
            ),
            (
                r#"{"id": "setlod_MOCK0000000001", "amount_requested": 500}"#,
                "settlements[0].id: \"setlod_MOCK0000000001\" uses the prefix setlod_MOCK",
            ),
            (
                r#"{"id": "setlod_1", "amount_requested": 199}"#,
                "settlements[0].amount_requested: must be an integer from 200",
            ),
            (
                r#"{"id": "setlod_1", "amount_requested": 500, "fees": 400, "tax": 101}"#,
                "settlements[0].fees: fees 400 and tax 101 are more than the 500 requested",
            ),
            (
                r#"{"id": "setlod_1", "amount_requested": 500, "description": "no-dashes"}"#,
                "settlements[0].description: at most 30 letters, digits or spaces",
            ),
            (
                r#"{"id": "setlod_1", "amount_requested": 500, "created_at": -1}"#,
                "settlements[0].created_at: must be unix seconds",
            ),
        ] {
            let text = format!(r#"{{"balance": 0, "settlements": [{settlement}]}}"#);
            let err = Seed::parse(&text, "x.json").unwrap_err();
            assert!(err.message.starts_with(message), "{settlement}: {err}");
        }
        let twice = r#"{"balance": 0,
            "settlements": [{"id": "setlod_1", "amount_requested": 500},
                            {"id": "setlod_1", "amount_requested": 600}]}"#;
        let err = Seed::parse(twice, "x.json").unwrap_err();
        assert!(err.message.contains("appears twice"), "{err}");
    }

    #[test]
    fn a_seed_without_settlements_keeps_its_canonical_text() {
        // Journals seeded before settlements existed store this text; it must still match.
        let seed = Seed::parse(r#"{"balance": 5}"#, "x.json").unwrap();
        assert_eq!(
            seed.canonical(),
            r#"{"currency":"INR","balance":5,"payments":[],"orders":[],"refunds":[]}"#
        );
    }
}
