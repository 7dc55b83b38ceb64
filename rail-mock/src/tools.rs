//! The tool surface: Razorpay's tool names and argument schemas, and the strict validation of
//! the arguments an MCP client sends (nothing a client sends can panic the rail).

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{Map, Value, json};

use crate::error::RailError;
use crate::faults::CallClass;
use crate::model::{
    AMOUNT_MAX, REFUND_AMOUNT_MIN, RefundRequest, SETTLEMENT_AMOUNT_MIN, SettlementRequest, Speed,
};

/// Razorpay's longest `receipt`.
pub const RECEIPT_CHARS_MAX: usize = 40;
/// Razorpay's most `notes` keys.
pub const NOTES_KEYS_MAX: usize = 15;
/// Razorpay's longest `notes` value.
pub const NOTE_VALUE_CHARS_MAX: usize = 256;
/// The longest `notes` key the mock accepts.
pub const NOTE_KEY_CHARS_MAX: usize = 256;
/// Razorpay's longest instant-settlement `description`.
pub const DESCRIPTION_CHARS_MAX: usize = 30;
/// A list's page size when `count` is absent.
pub const LIST_COUNT_DEFAULT: u32 = 10;
/// Razorpay's largest `count`.
pub const LIST_COUNT_MAX: u32 = 100;
/// The largest `skip`, `from` and `to` (2^53 - 1).
pub const LIST_INTEGER_MAX: i64 = AMOUNT_MAX;

/// The tools, by wire name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ToolName {
    /// `fetch_payment(payment_id)`
    FetchPayment,
    /// `fetch_order(order_id)`
    FetchOrder,
    /// `create_refund(payment_id, amount, speed?, notes?, receipt?)`
    CreateRefund,
    /// `fetch_refund(refund_id)`
    FetchRefund,
    /// `fetch_multiple_refunds_for_payment(payment_id, from?, to?, count?, skip?)`
    FetchMultipleRefundsForPayment,
    /// `fetch_all_refunds(from?, to?, count?, skip?)`
    FetchAllRefunds,
    /// `create_instant_settlement(amount, settle_full_balance?, description?, notes?)`
    CreateInstantSettlement,
    /// `fetch_all_instant_settlements(count?, skip?, from?, to?)`
    FetchAllInstantSettlements,
    /// `fetch_instant_settlement_with_id(settlement_id)`
    FetchInstantSettlementWithId,
    /// `fetch_balance()`: ours; Razorpay's MCP server has no balance tool.
    FetchBalance,
}

impl ToolName {
    /// Every tool, in the order `tools/list` gives them.
    pub const ALL: [ToolName; 10] = [
        ToolName::FetchPayment,
        ToolName::FetchOrder,
        ToolName::CreateRefund,
        ToolName::FetchRefund,
        ToolName::FetchMultipleRefundsForPayment,
        ToolName::FetchAllRefunds,
        ToolName::CreateInstantSettlement,
        ToolName::FetchAllInstantSettlements,
        ToolName::FetchInstantSettlementWithId,
        ToolName::FetchBalance,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolName::FetchPayment => "fetch_payment",
            ToolName::FetchOrder => "fetch_order",
            ToolName::CreateRefund => "create_refund",
            ToolName::FetchRefund => "fetch_refund",
            ToolName::FetchMultipleRefundsForPayment => "fetch_multiple_refunds_for_payment",
            ToolName::FetchAllRefunds => "fetch_all_refunds",
            ToolName::CreateInstantSettlement => "create_instant_settlement",
            ToolName::FetchAllInstantSettlements => "fetch_all_instant_settlements",
            ToolName::FetchInstantSettlementWithId => "fetch_instant_settlement_with_id",
            ToolName::FetchBalance => "fetch_balance",
        }
    }

    /// Look up a wire name.
    pub fn parse(name: &str) -> Option<ToolName> {
        ToolName::ALL.into_iter().find(|t| t.as_str() == name)
    }

    /// The class the call is numbered in.
    pub fn class(self) -> CallClass {
        match self {
            ToolName::CreateRefund | ToolName::CreateInstantSettlement => CallClass::Money,
            ToolName::FetchMultipleRefundsForPayment
            | ToolName::FetchAllRefunds
            | ToolName::FetchAllInstantSettlements => CallClass::List,
            _ => CallClass::Read,
        }
    }

    /// The start of a failure text: `"<what> failed: …"`.
    pub fn what(self) -> &'static str {
        match self {
            ToolName::FetchPayment => "fetching payment",
            ToolName::FetchOrder => "fetching order",
            ToolName::CreateRefund => "creating refund",
            ToolName::FetchRefund => "fetching refund",
            ToolName::FetchMultipleRefundsForPayment => "fetching refunds for payment",
            ToolName::FetchAllRefunds => "fetching refunds",
            ToolName::CreateInstantSettlement => "creating instant settlement",
            ToolName::FetchAllInstantSettlements => "fetching instant settlements",
            ToolName::FetchInstantSettlementWithId => "fetching instant settlement",
            ToolName::FetchBalance => "fetching balance",
        }
    }

    /// Whether the tool moves money.
    pub fn is_write(self) -> bool {
        self.class() == CallClass::Money
    }

    /// The tool's description and input schema.
    pub fn tool(self) -> Tool {
        let (description, schema) = match self {
            ToolName::FetchPayment => (
                "Fetch a payment by its id: amount, status, how much of it has been refunded.",
                object(
                    json!({"payment_id": id_field("The payment's id, starting with pay_.")}),
                    &["payment_id"],
                ),
            ),
            ToolName::FetchOrder => (
                "Fetch an order by its id: amount, amount paid, amount due, receipt and status.",
                object(
                    json!({"order_id": id_field("The order's id, starting with order_.")}),
                    &["order_id"],
                ),
            ),
            ToolName::CreateRefund => (
                "Refund a captured payment, in full or in part. The amount is an integer in the \
                 currency's smallest unit (paise: 29500 refunds 295.00 INR).",
                object(
                    json!({
                        "payment_id": id_field("The id of the payment to refund, starting with pay_."),
                        "amount": {
                            "type": "integer",
                            "minimum": REFUND_AMOUNT_MIN,
                            "maximum": AMOUNT_MAX,
                            "description": "The amount to refund, an integer in the smallest currency unit (e.g. 29500 for 295.00 INR)."
                        },
                        "speed": {
                            "type": "string",
                            "enum": ["normal", "optimum"],
                            "description": "normal (the default) or optimum (instant where the bank allows it)."
                        },
                        "notes": notes_field(),
                        "receipt": {
                            "type": "string",
                            "maxLength": RECEIPT_CHARS_MAX,
                            "description": "Your own reference for the refund, unique per payment."
                        }
                    }),
                    &["payment_id", "amount"],
                ),
            ),
            ToolName::FetchRefund => (
                "Fetch a refund by its id.",
                object(
                    json!({"refund_id": id_field("The refund's id, starting with rfnd_.")}),
                    &["refund_id"],
                ),
            ),
            ToolName::FetchMultipleRefundsForPayment => (
                "List the refunds of one payment, newest first, a page at a time (count, skip).",
                object(
                    with_list_fields(
                        json!({"payment_id": id_field("The payment's id, starting with pay_.")}),
                    ),
                    &["payment_id"],
                ),
            ),
            ToolName::FetchAllRefunds => (
                "List all refunds, newest first, a page at a time (count, skip).",
                object(with_list_fields(json!({})), &[]),
            ),
            ToolName::CreateInstantSettlement => (
                "Settle part or all of the settleable balance to the bank account now. The amount \
                 is an integer in the smallest currency unit.",
                object(
                    json!({
                        "amount": {
                            "type": "integer",
                            "minimum": SETTLEMENT_AMOUNT_MIN,
                            "maximum": AMOUNT_MAX,
                            "description": "The amount to settle, an integer in the smallest currency unit (e.g. 29500 for 295.00 INR)."
                        },
                        "settle_full_balance": {
                            "type": "boolean",
                            "default": false,
                            "description": "If true, settle the whole settleable balance and ignore amount."
                        },
                        "description": {
                            "type": "string",
                            "maxLength": DESCRIPTION_CHARS_MAX,
                            "pattern": "^[a-zA-Z0-9 ]*$",
                            "description": "A note for the settlement, letters, digits and spaces only."
                        },
                        "notes": notes_field()
                    }),
                    &["amount"],
                ),
            ),
            ToolName::FetchAllInstantSettlements => (
                "List instant settlements, newest first, a page at a time (count, skip).",
                object(with_list_fields(json!({})), &[]),
            ),
            ToolName::FetchInstantSettlementWithId => (
                "Fetch an instant settlement by its id.",
                object(
                    json!({"settlement_id": id_field("The instant settlement's id, starting with setlod_.")}),
                    &["settlement_id"],
                ),
            ),
            ToolName::FetchBalance => (
                "Fetch the settleable balance (not a Razorpay MCP tool: the mock rail's own).",
                object(json!({}), &[]),
            ),
        };
        let annotations = if self.is_write() {
            ToolAnnotations::new().read_only(false).destructive(true)
        } else {
            ToolAnnotations::new().read_only(true).destructive(false)
        };
        Tool::new(self.as_str(), description, Arc::new(schema)).with_annotations(annotations)
    }
}

/// Every tool, as `tools/list` returns them.
pub fn tool_list() -> Vec<Tool> {
    ToolName::ALL.into_iter().map(ToolName::tool).collect()
}

fn object(properties: Value, required: &[&str]) -> JsonObject {
    let mut schema = Map::new();
    schema.insert("type".into(), json!("object"));
    schema.insert("properties".into(), properties);
    if !required.is_empty() {
        schema.insert("required".into(), json!(required));
    }
    schema
}

fn id_field(description: &str) -> Value {
    json!({"type": "string", "description": description})
}

fn notes_field() -> Value {
    json!({
        "type": "object",
        "maxProperties": NOTES_KEYS_MAX,
        "additionalProperties": {"type": "string", "maxLength": NOTE_VALUE_CHARS_MAX},
        "description": "Key-value pairs for your own use: at most 15, each value a string of at most 256 characters."
    })
}

fn with_list_fields(mut properties: Value) -> Value {
    if let Some(map) = properties.as_object_mut() {
        map.insert(
            "from".into(),
            json!({"type": "integer", "minimum": 0, "description": "Only entities created at or after this unix time (seconds)."}),
        );
        map.insert(
            "to".into(),
            json!({"type": "integer", "minimum": 0, "description": "Only entities created at or before this unix time (seconds)."}),
        );
        map.insert(
            "count".into(),
            json!({"type": "integer", "minimum": 1, "maximum": LIST_COUNT_MAX, "description": "How many to return (default 10, at most 100)."}),
        );
        map.insert(
            "skip".into(),
            json!({"type": "integer", "minimum": 0, "description": "How many to skip (default 0)."}),
        );
    }
    properties
}

/// The arguments of one call, read strictly. JSON `null` counts as absent.
#[derive(Debug, Clone, Copy)]
pub struct Args<'a> {
    map: Option<&'a JsonObject>,
}

impl<'a> Args<'a> {
    /// Wrap a call's `arguments`.
    pub fn new(map: Option<&'a JsonObject>) -> Self {
        Args { map }
    }

    fn get(&self, name: &str) -> Option<&'a Value> {
        self.map.and_then(|m| m.get(name)).filter(|v| !v.is_null())
    }

    fn required(&self, name: &str) -> Result<&'a Value, RailError> {
        self.get(name)
            .ok_or_else(|| RailError::bad_request(format!("The {name} field is required.")))
    }

    /// A required, non-empty string.
    pub fn required_str(&self, name: &str) -> Result<String, RailError> {
        match self.required(name)? {
            Value::String(s) if s.is_empty() => Err(RailError::bad_request(format!(
                "The {name} field is required."
            ))),
            Value::String(s) => Ok(s.clone()),
            _ => Err(RailError::bad_request(format!(
                "The {name} must be a string."
            ))),
        }
    }

    /// An optional string; `""` counts as absent, as Razorpay's MCP server treats it.
    pub fn optional_str(&self, name: &str) -> Result<Option<String>, RailError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) if s.is_empty() => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(RailError::bad_request(format!(
                "The {name} must be a string."
            ))),
        }
    }

    /// An optional integer in `min..=max`: a float (even `100.0`), a string or a bool is refused.
    pub fn optional_int(&self, name: &str, min: i64, max: i64) -> Result<Option<i64>, RailError> {
        let Some(value) = self.get(name) else {
            return Ok(None);
        };
        let Value::Number(n) = value else {
            return Err(RailError::bad_request(format!(
                "The {name} must be an integer."
            )));
        };
        let v = if let Some(v) = n.as_i64() {
            v
        } else if n.is_u64() {
            // Above i64::MAX, so above every max we use.
            return Err(RailError::bad_request(format!(
                "The {name} may not be greater than {max}."
            )));
        } else {
            return Err(RailError::bad_request(format!(
                "The {name} must be an integer."
            )));
        };
        if v < min {
            return Err(RailError::bad_request(format!(
                "The {name} must be at least {min}."
            )));
        }
        if v > max {
            return Err(RailError::bad_request(format!(
                "The {name} may not be greater than {max}."
            )));
        }
        Ok(Some(v))
    }

    /// A required integer in `min..=max`.
    pub fn required_int(&self, name: &str, min: i64, max: i64) -> Result<i64, RailError> {
        self.required(name)?;
        self.optional_int(name, min, max)?
            .ok_or_else(|| RailError::bad_request(format!("The {name} field is required.")))
    }

    /// An optional boolean.
    pub fn optional_bool(&self, name: &str) -> Result<Option<bool>, RailError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(RailError::bad_request(format!(
                "The {name} must be a boolean."
            ))),
        }
    }

    /// Optional `notes`: an object of at most 15 string values of at most 256 characters.
    pub fn notes(&self) -> Result<Map<String, Value>, RailError> {
        let notes = match self.get("notes") {
            None => return Ok(Map::new()),
            Some(Value::Object(m)) => m,
            Some(_) => return Err(RailError::bad_request("The notes must be an object.")),
        };
        if notes.len() > NOTES_KEYS_MAX {
            return Err(RailError::bad_request(format!(
                "The notes may not have more than {NOTES_KEYS_MAX} keys."
            )));
        }
        for (key, value) in notes {
            if key.chars().count() > NOTE_KEY_CHARS_MAX {
                return Err(RailError::bad_request(format!(
                    "The notes keys may not be greater than {NOTE_KEY_CHARS_MAX} characters."
                )));
            }
            match value {
                Value::String(s) if s.chars().count() <= NOTE_VALUE_CHARS_MAX => {}
                Value::String(_) => {
                    return Err(RailError::bad_request(format!(
                        "The notes.{key} may not be greater than {NOTE_VALUE_CHARS_MAX} characters."
                    )));
                }
                _ => {
                    return Err(RailError::bad_request(format!(
                        "The notes.{key} must be a string."
                    )));
                }
            }
        }
        Ok(notes.clone())
    }
}

/// Validate `create_refund`'s arguments.
pub fn refund_request(args: Args<'_>) -> Result<RefundRequest, RailError> {
    let payment_id = args.required_str("payment_id")?;
    let amount = args.required_int("amount", REFUND_AMOUNT_MIN, AMOUNT_MAX)?;
    let speed = match args.optional_str("speed")? {
        None => Speed::Normal,
        Some(s) => Speed::parse(&s).ok_or_else(|| {
            RailError::bad_request("The selected speed is invalid. It must be normal or optimum.")
        })?,
    };
    let notes = args.notes()?;
    let receipt = args.optional_str("receipt")?;
    if let Some(r) = &receipt
        && r.chars().count() > RECEIPT_CHARS_MAX
    {
        return Err(RailError::bad_request(format!(
            "The receipt may not be greater than {RECEIPT_CHARS_MAX} characters."
        )));
    }
    Ok(RefundRequest {
        payment_id,
        amount,
        speed,
        notes,
        receipt,
    })
}

/// Validate `create_instant_settlement`'s arguments.
pub fn settlement_request(args: Args<'_>) -> Result<SettlementRequest, RailError> {
    let amount = args.required_int("amount", SETTLEMENT_AMOUNT_MIN, AMOUNT_MAX)?;
    let settle_full_balance = args.optional_bool("settle_full_balance")?.unwrap_or(false);
    let description = args.optional_str("description")?;
    if let Some(d) = &description {
        if d.chars().count() > DESCRIPTION_CHARS_MAX {
            return Err(RailError::bad_request(format!(
                "The description may not be greater than {DESCRIPTION_CHARS_MAX} characters."
            )));
        }
        if !d.chars().all(|c| c.is_ascii_alphanumeric() || c == ' ') {
            return Err(RailError::bad_request(
                "The description may only contain letters, digits and spaces.",
            ));
        }
    }
    let notes = args.notes()?;
    Ok(SettlementRequest {
        amount,
        settle_full_balance,
        description,
        notes,
    })
}

/// A list call's paging and time filter, before the list faults are applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListParams {
    /// `from` (unix seconds).
    pub from: Option<i64>,
    /// `to` (unix seconds).
    pub to: Option<i64>,
    /// `count`, default [`LIST_COUNT_DEFAULT`].
    pub count: u32,
    /// `skip`, default 0.
    pub skip: u64,
}

/// Validate `from`, `to`, `count`, `skip`.
pub fn list_params(args: Args<'_>) -> Result<ListParams, RailError> {
    let from = args.optional_int("from", 0, LIST_INTEGER_MAX)?;
    let to = args.optional_int("to", 0, LIST_INTEGER_MAX)?;
    let count = args
        .optional_int("count", 1, i64::from(LIST_COUNT_MAX))?
        .map_or(LIST_COUNT_DEFAULT, |c| {
            u32::try_from(c).unwrap_or(LIST_COUNT_MAX)
        });
    let skip = args
        .optional_int("skip", 0, LIST_INTEGER_MAX)?
        .map_or(0, |s| u64::try_from(s).unwrap_or(0));
    Ok(ListParams {
        from,
        to,
        count,
        skip,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: Value) -> JsonObject {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn amounts_must_be_json_integers() {
        for (amount, text) in [
            (json!(100.0), "The amount must be an integer."),
            (json!(1.5), "The amount must be an integer."),
            (json!("100"), "The amount must be an integer."),
            (json!(true), "The amount must be an integer."),
            (json!(-100), "The amount must be at least 100."),
            (json!(99), "The amount must be at least 100."),
            (
                json!(9_007_199_254_740_992_u64),
                "The amount may not be greater than 9007199254740991.",
            ),
            (
                json!(u64::MAX),
                "The amount may not be greater than 9007199254740991.",
            ),
            (json!(1e300), "The amount must be an integer."),
        ] {
            let a = args(json!({"payment_id": "pay_1", "amount": amount}));
            let err = refund_request(Args::new(Some(&a))).unwrap_err();
            assert_eq!(err, RailError::bad_request(text), "{amount}");
        }
    }

    #[test]
    fn the_amount_bound_is_interlocks() {
        // One bound for the proxy and the rail: accepted at it, refused one above it.
        assert_eq!(
            AMOUNT_MAX,
            i64::try_from(interlock_spec::money::MINOR_MAX).unwrap()
        );
        let at = json!(interlock_spec::money::MINOR_MAX);
        let above = json!(interlock_spec::money::MINOR_MAX + 1);
        let a = args(json!({"payment_id": "pay_1", "amount": at}));
        assert_eq!(
            refund_request(Args::new(Some(&a))).map(|r| r.amount),
            Ok(9_007_199_254_740_991)
        );
        let a = args(json!({"amount": at}));
        assert_eq!(
            settlement_request(Args::new(Some(&a))).map(|s| s.amount),
            Ok(9_007_199_254_740_991)
        );
        let too_large =
            RailError::bad_request("The amount may not be greater than 9007199254740991.");
        let a = args(json!({"payment_id": "pay_1", "amount": above}));
        assert_eq!(refund_request(Args::new(Some(&a))).unwrap_err(), too_large);
        let a = args(json!({"amount": above}));
        assert_eq!(
            settlement_request(Args::new(Some(&a))).unwrap_err(),
            too_large
        );
    }

    #[test]
    fn missing_required_arguments_are_named() {
        let err = refund_request(Args::new(None)).unwrap_err();
        assert_eq!(err.description, "The payment_id field is required.");
        let a = args(json!({"payment_id": "pay_1"}));
        let err = refund_request(Args::new(Some(&a))).unwrap_err();
        assert_eq!(err.description, "The amount field is required.");
        let a = args(json!({"payment_id": "pay_1", "amount": null}));
        let err = refund_request(Args::new(Some(&a))).unwrap_err();
        assert_eq!(err.description, "The amount field is required.");
    }

    #[test]
    fn receipt_speed_notes_and_description_are_bounded() {
        let long = "x".repeat(41);
        let a = args(json!({"payment_id": "pay_1", "amount": 100, "receipt": long}));
        assert!(refund_request(Args::new(Some(&a))).is_err());
        let a = args(json!({"payment_id": "pay_1", "amount": 100, "speed": "fast"}));
        assert!(refund_request(Args::new(Some(&a))).is_err());
        let many: Map<String, Value> = (0..16).map(|i| (format!("k{i}"), json!("v"))).collect();
        let a = args(json!({"payment_id": "pay_1", "amount": 100, "notes": many}));
        assert!(refund_request(Args::new(Some(&a))).is_err());
        let a = args(json!({"payment_id": "pay_1", "amount": 100, "notes": {"n": 5}}));
        assert!(refund_request(Args::new(Some(&a))).is_err());
        let a = args(json!({"amount": 200, "description": "no-dashes"}));
        assert!(settlement_request(Args::new(Some(&a))).is_err());
        let a = args(json!({"amount": 199}));
        assert!(settlement_request(Args::new(Some(&a))).is_err());
        let a =
            args(json!({"amount": 200, "description": "Payday 12", "settle_full_balance": true}));
        assert!(settlement_request(Args::new(Some(&a))).is_ok());
    }

    #[test]
    fn list_defaults_and_bounds() {
        let p = list_params(Args::new(None)).expect("defaults");
        assert_eq!((p.count, p.skip, p.from, p.to), (10, 0, None, None));
        let a = args(json!({"count": 101}));
        assert!(list_params(Args::new(Some(&a))).is_err());
        let a = args(json!({"count": 0}));
        assert!(list_params(Args::new(Some(&a))).is_err());
    }
}
