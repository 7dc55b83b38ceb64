//! [`ProposedAction`]: a money-moving tool call as the agent sent it, parsed strictly, before
//! anything about it has been checked against the rail.
//!
//! The parser refuses rather than guesses: a float, a string or a missing amount, an unknown
//! shape of subject id, an argument that tries to write one of our stamps. Nothing here is
//! trusted yet: the subject id is only a *hint* that G2 resolves on the rail, and the SIK's
//! subject is the id the rail answers with, never this text.
//!
//! This module knows no rail: which argument is the amount, which names the subject and which
//! Interlock writes itself come in an [`ArgShape`] that a rail profile (`interlock-profile`)
//! supplies for each of its money tools.

use crate::decimal::{self, DecimalError};
use crate::ids::{AgentId, MerchantId, ToolName};
use crate::money::{AmountError, Currency, Minor};
use crate::payee;
use crate::sik::{DistinctReason, SikError};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The argument an agent uses to say two otherwise identical actions are meant to be distinct.
pub const DISTINCT_REASON_ARG: &str = "interlock_distinct_reason";
/// The key Interlock stamps with the SIK in the notes (metadata) object of every outbound money
/// call whose rail carries one.
pub const STAMP_NOTE_KEY: &str = "interlock_sik";
/// Largest argument object we parse, in bytes of its JSON text: a tool call is a few hundred.
pub const TOOL_ARGS_BYTES_MAX: usize = 16 * 1024;
/// Longest subject id hint we accept (a rail's prefix and id, with room to spare).
pub const SUBJECT_HINT_LENGTH_MAX: usize = 40;

/// What kind of money movement an action is; a rail profile maps tool names to kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ActionKind {
    /// Money back to a customer; the subject is a payment.
    Refund,
    /// Money out of the merchant balance to the merchant's bank; the subject is the balance.
    Settlement,
    /// Money out of the account's balance to a payee, now; the subject is the balance.
    Transfer,
    /// A transfer to a payee on a later date, possibly recurring; the subject is the balance
    /// it will be paid from, which today's balance does not bound.
    ScheduledTransfer,
    /// A change to an existing scheduled transfer (its amount, payee, date or subject); the
    /// subject is that scheduled transfer, read from the rail.
    ScheduledUpdate,
}

impl ActionKind {
    /// Every kind, in the ledger's order.
    pub const ALL: [ActionKind; 5] = [
        ActionKind::Refund,
        ActionKind::Settlement,
        ActionKind::Transfer,
        ActionKind::ScheduledTransfer,
        ActionKind::ScheduledUpdate,
    ];

    /// The kind's name as stored in the ledger.
    pub const fn as_str(self) -> &'static str {
        match self {
            ActionKind::Refund => "REFUND",
            ActionKind::Settlement => "SETTLEMENT",
            ActionKind::Transfer => "TRANSFER",
            ActionKind::ScheduledTransfer => "SCHEDULED_TRANSFER",
            ActionKind::ScheduledUpdate => "SCHEDULED_UPDATE",
        }
    }

    /// Whether the action pays a payee the agent names (G1's payee rules apply).
    pub const fn pays_a_payee(self) -> bool {
        matches!(
            self,
            ActionKind::Transfer | ActionKind::ScheduledTransfer | ActionKind::ScheduledUpdate
        )
    }

    /// Whether the action takes money from the balance now, so the balance bounds it (G2).
    pub const fn draws_on_balance_now(self) -> bool {
        matches!(self, ActionKind::Settlement | ActionKind::Transfer)
    }
}

/// The argument names of one money tool, as its rail profile declares them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArgShape<'a> {
    /// What the tool does with money.
    pub kind: ActionKind,
    /// The argument holding the amount.
    pub amount: &'a str,
    /// How the amount is written.
    pub encoding: AmountEncoding,
    /// The argument naming the subject (a payment, a scheduled transfer) and the form of its
    /// ids; `None` when the subject is implied (a merchant's balance).
    pub subject: Option<(&'a str, SubjectForm<'a>)>,
    /// The argument naming the payee, if the tool pays one (a transfer's recipient).
    pub payee: Option<&'a str>,
    /// Whether the amount may be absent (an update that keeps its amount): the action then
    /// moves the amount its referent already has.
    pub amount_optional: bool,
    /// Arguments Interlock writes itself (a receipt): an agent may not supply them.
    pub reserved: &'a [&'a str],
    /// The argument whose object carries [`STAMP_NOTE_KEY`], if the rail has one.
    pub notes: Option<&'a str>,
    /// Boolean arguments that must be absent or `false` (one that moves an unnamed amount).
    pub false_only: &'a [&'a str],
}

/// How a rail spells a subject's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubjectForm<'a> {
    /// A string: this prefix, then 1 to [`SUBJECT_HINT_LENGTH_MAX`] − its length letters or
    /// digits (`pay_1002`).
    Prefixed(&'a str),
    /// A JSON integer in `0..=MINOR_MAX` (`7`), recorded as its decimal text.
    Integer,
}

/// How a rail writes amounts. In a profile file: `minor_integer` or `{decimal_major: EUR}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AmountEncoding {
    /// An integer in minor units (Razorpay's paise); every float is refused.
    MinorInteger,
    /// Decimal major units of a currency known before the call (`98.70` euros), read exactly
    /// from the number's text into minor units; more places than the currency has are refused.
    DecimalMajor(Currency),
}

impl AmountEncoding {
    /// Reads a positive amount written this way.
    pub fn read(self, value: &Value) -> Result<Minor, AmountError> {
        match self {
            AmountEncoding::MinorInteger => Minor::positive_from_json(value),
            AmountEncoding::DecimalMajor(currency) => {
                decimal::positive_from_json(value, currency).map_err(AmountError::Decimal)
            }
        }
    }

    /// Writes `amount` this way, for the outbound call.
    pub fn write(self, amount: Minor) -> Result<Value, DecimalError> {
        match self {
            AmountEncoding::MinorInteger => Ok(Value::from(amount.get())),
            AmountEncoding::DecimalMajor(currency) => decimal::to_json(amount, currency),
        }
    }
}

/// A money-moving tool call, parsed but not yet judged.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct ProposedAction {
    /// The agent making the call (from the proxy's configuration, not from the arguments).
    pub agent_id: AgentId,
    /// The rail account the call acts on (from the proxy's configuration).
    pub merchant_id: MerchantId,
    /// The upstream tool.
    pub tool: ToolName,
    /// What the tool does with money.
    pub kind: ActionKind,
    /// The subject id as the agent wrote it (a refund's payment, an update's scheduled
    /// transfer). Resolved on the rail before use.
    pub subject_hint: Option<String>,
    /// The payee in `payee::normalize`'s form, for a tool that pays one; also written back into
    /// `passthrough` in that form, so the rail is sent what the gates judged.
    pub payee: Option<String>,
    /// The amount in the referent's minor unit (the currency comes from the rail). Zero until
    /// resolved when `amount_from_referent`.
    pub amount: Minor,
    /// The agent gave no amount (an update that keeps its amount): the driver takes the
    /// referent's before anything is keyed or judged.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub amount_from_referent: bool,
    /// `interlock_distinct_reason`, if given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub distinct: Option<String>,
    /// Every other argument, forwarded as given (notes, a description, a speed, …).
    pub passthrough: Map<String, Value>,
    /// The argument names whose values the key already holds as its subject and amount: a
    /// mandate that names them as key fields adds nothing to the key's `extra`.
    #[serde(skip)]
    pub covered_args: Vec<String>,
}

impl ProposedAction {
    /// The parsed distinct reason.
    pub fn distinct_reason(&self) -> Option<DistinctReason> {
        // Parsing already checked it, so this cannot fail on a value `parse` built.
        self.distinct
            .as_deref()
            .map(|text| DistinctReason::parse(text).expect("checked at parse"))
    }
}

/// Why a tool call's arguments were refused before any gate ran.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ActionError {
    /// The arguments are not a JSON object.
    #[error("the arguments must be a JSON object")]
    NotAnObject,
    /// The arguments are larger than [`TOOL_ARGS_BYTES_MAX`].
    #[error("the arguments are {0} bytes; at most {TOOL_ARGS_BYTES_MAX} are accepted")]
    TooLarge(usize),
    /// A required argument is absent.
    #[error("{0} is required")]
    Missing(String),
    /// The amount is not a positive integer in minor units.
    #[error("{0}: {1}")]
    Amount(String, AmountError),
    /// The subject id is not the profile's prefix followed by letters and digits.
    #[error("{arg} must be {prefix:?} followed by 1 to {longest} letters or digits, got {got:?}")]
    SubjectId {
        /// The argument.
        arg: String,
        /// The prefix its ids carry.
        prefix: String,
        /// The most characters after the prefix.
        longest: usize,
        /// What the agent sent.
        got: String,
    },
    /// The subject id is not a non-negative JSON integer.
    #[error("{arg} must be a non-negative integer id, got {got}")]
    SubjectInteger {
        /// The argument.
        arg: String,
        /// What the agent sent.
        got: String,
    },
    /// The payee is not one a rail could pay.
    #[error("{0}: {1}")]
    Payee(String, payee::PayeeError),
    /// `interlock_distinct_reason` is not a usable reason.
    #[error("{DISTINCT_REASON_ARG}: {0}")]
    DistinctReason(String),
    /// The agent tried to write a field Interlock stamps.
    #[error("{0} is written by Interlock and must not be supplied")]
    Reserved(String),
    /// A flag that would move an unnamed amount (a full balance) is set.
    #[error("{0} must be false: give the amount explicitly")]
    MustBeFalse(String),
    /// An argument has no canonical JSON form (a float, an integer above 2^53, nesting deeper
    /// than the canonicalizer allows): it could not be keyed or recorded exactly.
    #[error("arguments: {0}")]
    NotCanonical(String),
}

/// Parses the arguments of a money tool whose profile declares `shape`.
pub fn parse(
    shape: &ArgShape<'_>,
    agent_id: AgentId,
    merchant_id: MerchantId,
    tool: ToolName,
    args: &Value,
) -> Result<ProposedAction, ActionError> {
    let Value::Object(object) = args else {
        return Err(ActionError::NotAnObject);
    };
    let size = serde_json::to_string(args).map_or(usize::MAX, |text| text.len());
    if size > TOOL_ARGS_BYTES_MAX {
        return Err(ActionError::TooLarge(size));
    }
    let amount_error = |e| ActionError::Amount(shape.amount.to_owned(), e);
    // Every argument is recorded in the hash-chained audit log and some enter the SIK, both as
    // canonical JSON: one without a canonical form (a float anywhere, not only in the amount)
    // is refused here rather than found later. The amount is read first for its own message,
    // and leaves the arguments as integer minor units: a decimal amount is exact once read.
    let mut passthrough = object.clone();
    let (amount, amount_from_referent) = match passthrough.remove(shape.amount) {
        Some(Value::Null) | None if shape.amount_optional => (Minor::ZERO, true),
        None | Some(Value::Null) => return Err(ActionError::Missing(shape.amount.to_owned())),
        Some(amount) => (shape.encoding.read(&amount).map_err(amount_error)?, false),
    };
    let distinct = match passthrough.remove(DISTINCT_REASON_ARG) {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(distinct_reason(&text)?),
        Some(_) => return Err(ActionError::DistinctReason("must be a string".to_owned())),
    };
    check_reserved(shape, &passthrough)?;
    let subject_hint = match shape.subject {
        Some((arg, form)) => {
            let id = passthrough
                .remove(arg)
                .ok_or_else(|| ActionError::Missing(arg.to_owned()))?;
            Some(subject_id(arg, form, &id)?)
        }
        None => None,
    };
    let payee = match shape.payee {
        Some(arg) => match passthrough.get(arg) {
            None | Some(Value::Null) => None,
            Some(Value::String(text)) => {
                let normal =
                    payee::normalize(text).map_err(|e| ActionError::Payee(arg.to_owned(), e))?;
                passthrough.insert(arg.to_owned(), Value::from(normal.clone()));
                Some(normal)
            }
            Some(other) => {
                let e = payee::PayeeError::NotAString(other.to_string());
                return Err(ActionError::Payee(arg.to_owned(), e));
            }
        },
        None => None,
    };
    // What is left is recorded and keyed as canonical JSON (the subject and amount are already
    // read into their own forms).
    crate::canonical::canonical_json(&Value::Object(passthrough.clone()))
        .map_err(|e| ActionError::NotCanonical(e.to_string()))?;
    let covered_args = std::iter::once(shape.amount)
        .chain(shape.subject.map(|(arg, _)| arg))
        .map(str::to_owned)
        .collect();
    Ok(ProposedAction {
        agent_id,
        merchant_id,
        tool,
        kind: shape.kind,
        subject_hint,
        payee,
        amount,
        amount_from_referent,
        distinct,
        passthrough,
        covered_args,
    })
}

/// Refuses an argument Interlock writes, a stamp planted in the notes, or a set flag that
/// would move an unnamed amount.
fn check_reserved(shape: &ArgShape<'_>, args: &Map<String, Value>) -> Result<(), ActionError> {
    if let Some(arg) = shape.reserved.iter().find(|arg| args.contains_key(**arg)) {
        return Err(ActionError::Reserved((*arg).to_owned()));
    }
    if let Some(notes) = shape.notes
        && let Some(Value::Object(object)) = args.get(notes)
        && object.contains_key(STAMP_NOTE_KEY)
    {
        return Err(ActionError::Reserved(format!("{notes}.{STAMP_NOTE_KEY}")));
    }
    for flag in shape.false_only {
        match args.get(*flag) {
            None | Some(Value::Bool(false)) => {}
            Some(_) => return Err(ActionError::MustBeFalse((*flag).to_owned())),
        }
    }
    Ok(())
}

fn distinct_reason(text: &str) -> Result<String, ActionError> {
    DistinctReason::parse(text)
        .map(|reason| reason.as_str().to_owned())
        .map_err(|error: SikError| ActionError::DistinctReason(error.to_string()))
}

fn subject_id(arg: &str, form: SubjectForm<'_>, value: &Value) -> Result<String, ActionError> {
    let prefix = match form {
        SubjectForm::Prefixed(prefix) => prefix,
        SubjectForm::Integer => {
            return value
                .as_u64()
                .filter(|id| *id <= crate::money::MINOR_MAX)
                .map(|id| id.to_string())
                .ok_or_else(|| ActionError::SubjectInteger {
                    arg: arg.to_owned(),
                    got: value.to_string(),
                });
        }
    };
    let longest = SUBJECT_HINT_LENGTH_MAX.saturating_sub(prefix.len());
    let refuse = |got: String| ActionError::SubjectId {
        arg: arg.to_owned(),
        prefix: prefix.to_owned(),
        longest,
        got,
    };
    let text = match value {
        Value::String(text) => text.as_str(),
        other => return Err(refuse(other.to_string())),
    };
    let well_formed = text.len() <= SUBJECT_HINT_LENGTH_MAX
        && text.strip_prefix(prefix).is_some_and(|rest| {
            !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_alphanumeric())
        });
    if well_formed {
        Ok(text.to_owned())
    } else {
        Err(refuse(text.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // The shapes of a refund and a settlement tool as the Razorpay profile declares them.
    const REFUND: ArgShape<'static> = ArgShape {
        kind: ActionKind::Refund,
        amount: "amount",
        encoding: AmountEncoding::MinorInteger,
        subject: Some(("payment_id", SubjectForm::Prefixed("pay_"))),
        payee: None,
        amount_optional: false,
        reserved: &["receipt"],
        notes: Some("notes"),
        false_only: &[],
    };
    const SETTLEMENT: ArgShape<'static> = ArgShape {
        kind: ActionKind::Settlement,
        amount: "amount",
        encoding: AmountEncoding::MinorInteger,
        subject: None,
        payee: None,
        amount_optional: false,
        reserved: &[],
        notes: Some("notes"),
        false_only: &["settle_full_balance"],
    };

    fn refund(args: Value) -> Result<ProposedAction, ActionError> {
        parse(
            &REFUND,
            AgentId::parse("agent_a").unwrap(),
            MerchantId::parse("acc_1").unwrap(),
            ToolName::parse("create_refund").unwrap(),
            &args,
        )
    }

    #[test]
    fn a_refund_parses_and_keeps_other_arguments() {
        let action = refund(
            json!({"payment_id": "pay_1002", "amount": 1000, "speed": "normal",
            "interlock_distinct_reason": " late delivery "}),
        )
        .unwrap();
        assert_eq!(action.subject_hint.as_deref(), Some("pay_1002"));
        assert_eq!(action.amount.get(), 1000);
        assert_eq!(action.covered_args, ["amount", "payment_id"]);
        assert_eq!(action.distinct.as_deref(), Some("late delivery"));
        assert_eq!(
            action.passthrough,
            json!({"speed": "normal"}).as_object().unwrap().clone()
        );
    }

    #[test]
    fn hostile_arguments_are_refused_with_the_field_named() {
        let cases = [
            (json!([1]), "the arguments must be a JSON object"),
            (json!({"payment_id": "pay_1"}), "amount is required"),
            (
                json!({"payment_id": "pay_1", "amount": 18.99}),
                "amount: amount must be an integer in minor units, got float 18.99",
            ),
            (
                json!({"payment_id": "pay_1", "amount": 100.0}),
                "amount: amount must be an integer in minor units, got float 100.0",
            ),
            (
                json!({"payment_id": "pay_1", "amount": "100"}),
                "amount: amount must be a JSON integer in minor units, not a string, got \"100\"",
            ),
            (
                json!({"payment_id": "pay_1", "amount": 0}),
                "amount: amount must be positive, got 0",
            ),
            (json!({"amount": 100}), "payment_id is required"),
            (
                json!({"payment_id": "pay_1 OR 1=1", "amount": 100}),
                "payment_id must be \"pay_\" followed by 1 to 36 letters or digits, got \"pay_1 OR 1=1\"",
            ),
            (
                json!({"payment_id": "pay_１", "amount": 100}),
                "payment_id must be \"pay_\" followed by 1 to 36 letters or digits, got \"pay_１\"",
            ),
            (
                json!({"payment_id": "pay_1", "amount": 100, "receipt": "r"}),
                "receipt is written by Interlock and must not be supplied",
            ),
            (
                json!({"payment_id": "pay_1", "amount": 100, "notes": {"interlock_sik": "x"}}),
                "notes.interlock_sik is written by Interlock and must not be supplied",
            ),
            (
                json!({"payment_id": "pay_1", "amount": 100, "interlock_distinct_reason": "  "}),
                "interlock_distinct_reason: interlock_distinct_reason must say why this action differs; it was blank",
            ),
        ];
        for (args, expected) in cases {
            let error = refund(args.clone()).unwrap_err().to_string();
            assert!(error.starts_with(expected), "{args}: {error}");
        }
        let huge =
            json!({"payment_id": "pay_1", "amount": 100, "notes": {"k": "x".repeat(20_000)}});
        assert!(matches!(refund(huge), Err(ActionError::TooLarge(_))));
    }

    #[test]
    fn an_argument_without_a_canonical_form_is_refused_wherever_it_is() {
        for args in [
            json!({"payment_id": "pay_1", "amount": 100, "speed": 1.5}),
            json!({"payment_id": "pay_1", "amount": 100, "notes": {"x": 9_007_199_254_740_993u64}}),
        ] {
            let error = refund(args.clone()).unwrap_err();
            assert!(
                matches!(error, ActionError::NotCanonical(_)),
                "{args}: {error}"
            );
        }
    }

    #[test]
    fn a_full_balance_settlement_is_refused() {
        let settle = |args: Value| {
            parse(
                &SETTLEMENT,
                AgentId::parse("agent_a").unwrap(),
                MerchantId::parse("acc_1").unwrap(),
                ToolName::parse("create_instant_settlement").unwrap(),
                &args,
            )
        };
        assert_eq!(
            settle(json!({"amount": 500, "settle_full_balance": true})),
            Err(ActionError::MustBeFalse("settle_full_balance".into()))
        );
        assert_eq!(
            settle(json!({"amount": 500, "settle_full_balance": true}))
                .unwrap_err()
                .to_string(),
            "settle_full_balance must be false: give the amount explicitly"
        );
        let ok = settle(json!({"amount": 500, "settle_full_balance": false})).unwrap();
        assert_eq!(ok.subject_hint, None);
    }
}
