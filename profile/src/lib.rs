//! Rail profiles: everything Interlock knows about one payment server's tools, in one place.
//!
//! A [`Profile`] says which tools move money and as what ([`ActionKind`]), the argument names of
//! amount and subject, the arguments Interlock writes itself, how a call is stamped with its SIK
//! (a key in a notes object, a receipt argument), how the referent G2 needs is read, how the
//! rail's answer is classified, and how entities are listed for reconciliation and where their
//! stamp is found. The driver, the ledger, `spec` and `machine` know none of it: they speak of
//! refunds, settlements, subjects and stamps, and the proxy maps those onto tools through the
//! profile ([`Profile::outbound_args`], [`Profile::outcome`], [`Profile::list_request`], …).
//!
//! Razorpay's MCP server is the one profile today ([`razorpay`]); a profile cannot weaken a
//! guarantee: a tool it does not describe is forwarded only as a read whose pinned definition
//! says `readOnlyHint: true`, and refused otherwise (the proxy's `carriage`).

mod file;
pub mod razorpay;
mod wire;

use interlock_driver::rail::RailCall;
use interlock_spec::action::{
    self, ActionError, ActionKind, AmountEncoding, ArgShape, ProposedAction, SubjectForm,
};
use interlock_spec::ids::{AgentId, MerchantId, ToolName};
use interlock_spec::mandate::{Mandate, Violation};
use interlock_spec::money::Currency;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

pub use file::{PAGE_SIZE_MAX, PROFILE_YAML_BYTES_MAX, ProfileError};
pub use wire::Request;

/// A payment server's tools, as Interlock carries them. Read from a profile file
/// ([`Profile::from_yaml`]); the field docs are the file's documentation.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// The profile's name (`razorpay`).
    #[serde(rename = "profile")]
    pub name: String,
    /// The tools that move money. Every other tool is a read or refused.
    pub money: Vec<MoneyTool>,
    /// Tools that write but move no money (a password, an address): when granted they are
    /// forwarded as reads are, after G1 and G6 on every call, and never enter the ledger. A
    /// write in neither list is refused whatever the mandate grants.
    #[serde(default)]
    pub other_writes: Vec<ToolName>,
    /// How an outbound call carries its SIK; `null` for a rail whose entities keep nothing of
    /// ours. On such a rail the direct answer to a call is believed as that call's, and an
    /// ambiguous call can never be proven absent: it is quarantined for a human, never retried.
    /// The key is required, so a profile cannot lose its stamp by omission.
    #[serde(deserialize_with = "present_or_null")]
    pub stamp: Option<Stamp>,
    /// The reads G2 makes to resolve what a call is about.
    pub referent: ReferentReads,
    /// The lists a reconcile pass walks, one per kind (`REFUND: …`); none without a stamp.
    pub lists: BTreeMap<ActionKind, ListTool>,
    /// Where an entity of the rail (a refund, a settlement) keeps its id.
    pub entities: Entities,
    /// Text in an error answer by which the rail says it refused the request (nothing moved);
    /// any other error is ambiguous.
    pub rejected_marker: String,
}

/// One money tool.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MoneyTool {
    /// The tool's name on the upstream.
    pub tool: ToolName,
    /// What it does with money.
    pub kind: ActionKind,
    /// The argument holding the amount, and how the amount is written.
    pub amount: AmountArg,
    /// The argument naming the subject and the form of its ids; absent when the subject is the
    /// account's balance.
    #[serde(default)]
    pub subject: Option<SubjectArg>,
    /// The argument naming the payee, for a tool that pays one (a transfer's recipient).
    #[serde(default)]
    pub payee: Option<String>,
    /// Boolean arguments that must be absent or false, and are sent `false`.
    #[serde(default)]
    pub false_only: Vec<String>,
    /// The field of the rail's answer that holds the fee.
    pub fee_field: String,
    /// The key fields `interlock init` proposes, and the window (none for a refund).
    pub default_key: DefaultKey,
}

/// The amount argument.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AmountArg {
    /// Its name.
    pub arg: String,
    /// How it is written: `minor_integer`, or `{decimal_major: EUR}`.
    pub encoding: AmountEncoding,
    /// Whether it may be absent (an update that keeps its amount).
    #[serde(default)]
    pub optional: bool,
}

/// What `interlock init` proposes as a tool's idempotency key.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DefaultKey {
    /// The key's argument names.
    pub fields: Vec<String>,
    /// Its window in milliseconds; `null` for none.
    pub window_ms: Option<u64>,
}

/// The argument naming a subject.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubjectArg {
    /// Its name.
    pub arg: String,
    /// The prefix every id of it carries (`pay_`); or
    #[serde(default)]
    pub prefix: Option<String>,
    /// `true`: its ids are JSON integers.
    #[serde(default)]
    pub integer: bool,
}

impl SubjectArg {
    /// The form `spec::action::parse` checks.
    pub fn form(&self) -> SubjectForm<'_> {
        match &self.prefix {
            Some(prefix) => SubjectForm::Prefixed(prefix),
            None => SubjectForm::Integer,
        }
    }
}

/// How a call is stamped.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stamp {
    /// The argument whose object gets `interlock_sik = sik`, and whose object in the rail's
    /// entities carries it back.
    #[serde(rename = "notes")]
    pub notes_arg: String,
    /// A receipt argument the rail keeps unique per subject, set to `prefix + sik`, for the
    /// kinds listed: the rail itself then refuses a second call of the same intent.
    #[serde(default)]
    pub receipt: Option<Receipt>,
}

/// A receipt stamp.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Receipt {
    /// The argument.
    pub arg: String,
    /// What precedes the SIK in it.
    pub prefix: String,
    /// The kinds whose calls carry it.
    pub kinds: Vec<ActionKind>,
}

/// A read of one object: a tool and the argument that names the object.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Read {
    /// The tool.
    pub tool: String,
    /// The argument naming the object (none for the balance).
    #[serde(default)]
    pub arg: Option<String>,
}

/// Where a currency is found.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum CurrencyAt {
    /// In this field of the object read.
    Field(String),
    /// Always this currency (a rail of one currency).
    Fixed(Currency),
}

/// The reads that resolve a referent; each kind of money tool needs its own.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReferentReads {
    /// How the amounts in these answers are written.
    pub amounts: AmountEncoding,
    /// A payment, by its id (refunds).
    #[serde(default)]
    pub payment: Option<PaymentRead>,
    /// The payment's order, read when the payment names one (G2 bounds refunds by it too).
    #[serde(default)]
    pub order: Option<OrderRead>,
    /// The account's balance (settlements, transfers, scheduled transfers).
    #[serde(default)]
    pub balance: Option<BalanceRead>,
    /// The scheduled transfers, one of which an update changes.
    #[serde(default)]
    pub scheduled: Option<ScheduledRead>,
}

/// The read of the scheduled transfers and the fields of each.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduledRead {
    /// The read (its argument, if any, is given the id).
    pub read: Read,
    /// The field of the answer holding the list (`.`: the answer is the list).
    pub items: String,
    /// The fields of one.
    pub fields: ScheduledFields,
}

/// A scheduled transfer's fields.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduledFields {
    /// Its id.
    pub id: String,
    /// What it will pay.
    pub amount: String,
    /// Who it pays.
    pub recipient: String,
    /// Its currency.
    pub currency: CurrencyAt,
}

/// The read of a payment and the fields of its answer.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaymentRead {
    /// The read.
    pub read: Read,
    /// The fields.
    pub fields: PaymentFields,
}

/// A payment's fields, by name in the rail's answer.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaymentFields {
    /// Its id.
    pub id: String,
    /// The captured amount, in minor units.
    pub amount: String,
    /// What has been refunded of it, in minor units.
    pub amount_refunded: String,
    /// Its currency.
    pub currency: CurrencyAt,
    /// Whether it is captured.
    pub captured: String,
    /// Its order's id, if any.
    pub order_id: String,
}

/// The read of an order and the fields of its answer.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrderRead {
    /// The read.
    pub read: Read,
    /// The fields.
    pub fields: OrderFields,
}

/// An order's fields.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrderFields {
    /// Its id.
    pub id: String,
    /// What the customer paid on it, in minor units.
    pub amount_paid: String,
}

/// The read of the balance and the fields of its answer.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BalanceRead {
    /// The read.
    pub read: Read,
    /// The fields.
    pub fields: BalanceFields,
}

/// The balance's fields.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BalanceFields {
    /// What can be paid out now (`.`: the answer is the amount).
    pub balance: String,
    /// Its currency.
    pub currency: CurrencyAt,
}

/// A list of entities, paged by offset.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListTool {
    /// The tool.
    pub tool: String,
    /// The argument naming the subject, for lists scoped to one (refunds of a payment).
    #[serde(default)]
    pub subject_arg: Option<String>,
    /// The page size argument and the size asked for.
    pub count: PageCount,
    /// The offset argument.
    pub skip_arg: String,
    /// The field of the answer holding the page's entities.
    pub items: String,
}

/// A list's page size.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageCount {
    /// The argument.
    pub arg: String,
    /// The size asked for, 1..=[`PAGE_SIZE_MAX`].
    pub size: u32,
}

/// Where an entity keeps what reconciliation reads.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entities {
    /// Its id.
    pub id: String,
    /// Optional, per kind: where an entity states what it did. Interlock checks every stated
    /// term against the authorised call; an entity whose terms differ (or whose mapped term
    /// is missing or unreadable) is quarantined for an operator with both figures, never
    /// taken as a clean success. A kind without an entry is not checked.
    #[serde(default)]
    pub terms: BTreeMap<ActionKind, TermFields>,
}

/// The fields of an entity's answer that state its terms; each optional.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TermFields {
    /// The amount it moved, in the referent reads' encoding (`referent.amounts`).
    #[serde(default)]
    pub amount: Option<String>,
    /// Its ISO currency code.
    #[serde(default)]
    pub currency: Option<String>,
    /// The id of the referent it is about (a refund's payment).
    #[serde(default)]
    pub subject: Option<String>,
}

impl Profile {
    /// The money tool called `name`, if this profile has one.
    pub fn money_tool(&self, name: &str) -> Option<&MoneyTool> {
        self.money.iter().find(|m| m.tool.as_str() == name)
    }

    /// What the tool called `name` does with money, if it moves any.
    pub fn kind_of(&self, name: &str) -> Option<ActionKind> {
        self.money_tool(name).map(|m| m.kind)
    }

    /// The money tools' names, for messages.
    pub fn money_tool_names(&self) -> Vec<&str> {
        self.money.iter().map(|m| m.tool.as_str()).collect()
    }

    /// Parses the arguments of the money tool `money` strictly (see `spec::action::parse`).
    pub fn parse(
        &self,
        money: &MoneyTool,
        agent_id: AgentId,
        merchant_id: MerchantId,
        args: &Value,
    ) -> Result<ProposedAction, ActionError> {
        let reserved: Vec<&str> = self
            .receipt()
            .filter(|receipt| receipt.kinds.contains(&money.kind))
            .map(|receipt| receipt.arg.as_str())
            .collect();
        let false_only: Vec<&str> = money.false_only.iter().map(String::as_str).collect();
        let shape = ArgShape {
            kind: money.kind,
            amount: &money.amount.arg,
            encoding: money.amount.encoding,
            subject: money.subject.as_ref().map(|s| (s.arg.as_str(), s.form())),
            payee: money.payee.as_deref(),
            amount_optional: money.amount.optional,
            reserved: &reserved,
            notes: self.stamp.as_ref().map(|stamp| stamp.notes_arg.as_str()),
            false_only: &false_only,
        };
        action::parse(&shape, agent_id, merchant_id, money.tool.clone(), args)
    }

    /// The rules of the mandate that depend on what each tool does (a refund's key carries no
    /// window; a count of refunds per payment applies to refund tools only).
    pub fn check_mandate(&self, mandate: &Mandate) -> Result<(), Vec<Violation>> {
        mandate.validate_kinds(|tool| self.kind_of(tool.as_str()))
    }

    /// The arguments of the outbound money call: the agent's own arguments, the amount and
    /// subject the intent records, and the stamps. Every attempt of one intent sends exactly
    /// these, so a retry is the same request.
    ///
    /// Fails, before anything is sent, when the amount cannot be written in the profile's
    /// encoding (a decimal currency with no known exponent).
    pub fn outbound_args(&self, call: &RailCall) -> Result<Map<String, Value>, String> {
        let mut args = call.passthrough.clone();
        let money = self
            .money_tool(call.tool.as_str())
            .ok_or_else(|| format!("{} is not a money tool of this profile", call.tool))?;
        let amount = money
            .amount
            .encoding
            .write(call.amount)
            .map_err(|e| format!("{}: {e}", money.amount.arg))?;
        args.insert(money.amount.arg.clone(), amount);
        let money = Some(money);
        if let Some(subject) = money.and_then(|m| m.subject.as_ref()) {
            let id = match subject.form() {
                SubjectForm::Prefixed(_) => Value::from(call.subject_id.clone()),
                // Parsed from a JSON integer, so it reads back as one.
                SubjectForm::Integer => {
                    call.subject_id
                        .parse::<u64>()
                        .map(Value::from)
                        .map_err(|_| {
                            format!(
                                "{}: {:?} is not an integer id",
                                subject.arg, call.subject_id
                            )
                        })?
                }
            };
            args.insert(subject.arg.clone(), id);
        }
        for flag in money.iter().flat_map(|m| &m.false_only) {
            args.insert(flag.clone(), Value::Bool(false));
        }
        let Some(stamp) = &self.stamp else {
            return Ok(args);
        };
        // Notes that are not an object (Razorpay sends an empty one as `[]`) carry nothing to
        // keep: the stamp replaces them.
        let mut notes = match args.remove(&stamp.notes_arg) {
            Some(Value::Object(notes)) => notes,
            _ => Map::new(),
        };
        let sik = Value::from(call.sik.to_string());
        notes.insert(action::STAMP_NOTE_KEY.to_owned(), sik);
        args.insert(stamp.notes_arg.clone(), Value::Object(notes));
        if let Some(receipt) = &stamp.receipt
            && receipt.kinds.contains(&call.kind)
        {
            let stamp = format!("{}{}", receipt.prefix, call.sik);
            args.insert(receipt.arg.clone(), Value::from(stamp));
        }
        Ok(args)
    }

    /// The receipt stamp, if the rail has one.
    pub fn receipt(&self) -> impl Iterator<Item = &Receipt> {
        self.stamp.iter().filter_map(|stamp| stamp.receipt.as_ref())
    }

    /// The key fields and window `interlock init` proposes for `tool`.
    pub fn default_key(&self, tool: &str) -> Option<&DefaultKey> {
        self.money_tool(tool).map(|m| &m.default_key)
    }
}

/// A required field whose value may be `null`: serde treats a missing `Option` as `None`, and a
/// profile must say so rather than lose its stamp by omission.
fn present_or_null<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer)
}
