//! The profile on the wire: the requests the proxy sends for reads and lists, and how the
//! rail's answers are read back into the driver's vocabulary, by the field names the profile
//! declares.

use crate::{CurrencyAt, Profile};
use interlock_driver::rail::{
    ListPage, ListQuery, OrderReferent, PageAt, PaymentReferent, RailCall, RailError, RailOutcome,
    Referent,
};
use interlock_machine::EntityRef;
use interlock_spec::action::{ActionKind, STAMP_NOTE_KEY};
use interlock_spec::ids::Sik;
use interlock_spec::money::{Currency, Minor};
use serde_json::{Map, Value};

/// One read the proxy sends to the upstream: a tool and its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The tool.
    pub tool: String,
    /// Its arguments.
    pub args: Map<String, Value>,
}

impl Request {
    fn new(tool: &str, args: impl IntoIterator<Item = (String, Value)>) -> Request {
        Request {
            tool: tool.to_owned(),
            args: args.into_iter().collect(),
        }
    }
}

impl Profile {
    /// The read of the payment the agent named.
    pub fn payment_request(&self, hint: &str) -> Request {
        let read = &self.referent.payment.read;
        let arg = read.arg.iter().map(|a| (a.clone(), Value::from(hint)));
        Request::new(&read.tool, arg)
    }

    /// The read of the payment's order, when it names one.
    pub fn order_request(&self, payment: &Value) -> Option<Request> {
        let field = &self.referent.payment.fields.order_id;
        let order_id = payment[field.as_str()]
            .as_str()
            .filter(|id| !id.is_empty())?;
        let read = &self.referent.order.read;
        let arg = read.arg.iter().map(|a| (a.clone(), Value::from(order_id)));
        Some(Request::new(&read.tool, arg))
    }

    /// The payment referent from the payment and its order as the rail sent them.
    pub fn payment_referent(
        &self,
        payment: &Value,
        order: Option<&Value>,
    ) -> Result<Referent, RailError> {
        let fields = &self.referent.payment.fields;
        let order_fields = &self.referent.order.fields;
        let order = match order {
            Some(order) => Some(OrderReferent {
                id: order[order_fields.id.as_str()]
                    .as_str()
                    .or(payment[fields.order_id.as_str()].as_str())
                    .unwrap_or_default()
                    .to_owned(),
                amount_paid: minor(order, &order_fields.amount_paid)?,
            }),
            None => None,
        };
        let id = payment[fields.id.as_str()]
            .as_str()
            .ok_or_else(|| RailError::Unavailable("the payment has no id".into()))?;
        Ok(Referent::Payment(PaymentReferent {
            id: id.to_owned(),
            amount: minor(payment, &fields.amount)?,
            amount_refunded: minor(payment, &fields.amount_refunded)?,
            currency: currency(payment, &fields.currency)?,
            captured: payment[fields.captured.as_str()].as_bool().unwrap_or(false),
            order,
        }))
    }

    /// The read of the merchant's settleable balance.
    pub fn balance_request(&self) -> Request {
        Request::new(&self.referent.balance.read.tool, [])
    }

    /// The balance referent from the rail's answer.
    pub fn balance_referent(&self, balance: &Value) -> Result<Referent, RailError> {
        let fields = &self.referent.balance.fields;
        Ok(Referent::Balance {
            balance: minor(balance, &fields.balance)?,
            currency: currency(balance, &fields.currency)?,
        })
    }

    /// A read's error answer: the rail's refusal means the object is not there (or not what
    /// the action needs); anything else, that the rail could not be read.
    pub fn read_error(&self, text: String) -> RailError {
        if text.contains(&self.rejected_marker) {
            RailError::NotFound(text)
        } else {
            RailError::Unavailable(text)
        }
    }

    /// What the rail's answer to a stamped money call says happened. A rejection only when the
    /// rail says it refused; any other error, or an answer that is not a JSON entity with an
    /// id, is ambiguous: the reconciler settles it.
    pub fn outcome(&self, call: &RailCall, is_error: bool, text: String) -> RailOutcome {
        if is_error {
            return if text.contains(&self.rejected_marker) {
                RailOutcome::Rejected { detail: text }
            } else {
                RailOutcome::Ambiguous { detail: text }
            };
        }
        let Ok(value) = serde_json::from_str::<Value>(&text) else {
            return RailOutcome::Ambiguous {
                detail: format!("the rail answered something that is not JSON: {text}"),
            };
        };
        let Some(id) = value[self.entities.id.as_str()].as_str() else {
            return RailOutcome::Ambiguous {
                detail: format!("the rail's answer has no id: {text}"),
            };
        };
        let fee_field = self
            .money_tool(call.tool.as_str())
            .map_or("fee", |m| m.fee_field.as_str());
        let entity = self.entity(id, &value);
        RailOutcome::Applied {
            entity,
            fee: charged(call, &value, fee_field),
            tax: charged(call, &value, "tax"),
            response: text,
        }
    }

    /// The request for the page at `at` of the list `query` walks.
    pub fn list_request(&self, query: &ListQuery, at: PageAt) -> Request {
        let list = self.list_of(query.kind);
        let subject = list
            .subject_arg
            .iter()
            .map(|arg| (arg.clone(), Value::from(query.subject_id.clone())));
        let paging = [
            (list.count.arg.clone(), Value::from(list.count.size)),
            (list.skip_arg.clone(), Value::from(at.skip)),
        ];
        Request::new(&list.tool, subject.chain(paging))
    }

    /// One page of a list as the rail sent it. The rail pages by offset and reports no total:
    /// only an empty page proves the end. A short page may be the end or a page the rail capped
    /// below the count; treating it as the end would call an entity on a later page absent, and
    /// absence licenses a retry.
    pub fn list_page(&self, kind: ActionKind, collection: &Value) -> Result<ListPage, RailError> {
        let field = self.list_of(kind).items.as_str();
        let items = collection[field]
            .as_array()
            .ok_or_else(|| RailError::Unavailable(format!("the list has no {field}")))?;
        let id_field = self.entities.id.as_str();
        let entities = items
            .iter()
            .filter_map(|item| item[id_field].as_str().map(|id| self.entity(id, item)))
            .collect();
        Ok(ListPage {
            is_last: items.is_empty(),
            entities,
        })
    }

    fn list_of(&self, kind: ActionKind) -> &crate::ListTool {
        match kind {
            ActionKind::Refund => &self.lists.refund,
            ActionKind::Settlement => &self.lists.settlement,
        }
    }

    /// An entity's id and the stamp in its notes (which the rail may send as `{}` or `[]`).
    fn entity(&self, id: &str, value: &Value) -> EntityRef {
        let stamp = value[self.stamp.notes_arg.as_str()]
            .as_object()
            .and_then(|notes| notes.get(STAMP_NOTE_KEY))
            .and_then(Value::as_str);
        EntityRef {
            id: id.to_owned(),
            stamp: stamp.and_then(|text| Sik::parse(text).ok()),
        }
    }
}

/// A fee or tax the rail charged. Absent: nothing (Razorpay omits `fee` on a normal refund).
/// Present but unreadable (a float, a string, negative): counted as the whole amount, the most a
/// fee can be, so the fee budget errs toward refusing, never toward room it lacks.
fn charged(call: &RailCall, value: &Value, field: &str) -> Minor {
    match &value[field] {
        Value::Null => Minor::ZERO,
        given => Minor::from_json(given).unwrap_or_else(|_| {
            tracing::warn!(
                sik = %call.sik,
                field,
                given = %given,
                "the rail's {field} is not an amount in minor units; counted as the whole amount"
            );
            call.amount
        }),
    }
}

fn minor(value: &Value, field: &str) -> Result<Minor, RailError> {
    Minor::from_json(&value[field])
        .map_err(|e| RailError::Unavailable(format!("the rail's {field} is not an amount: {e}")))
}

fn currency(value: &Value, at: &CurrencyAt) -> Result<Currency, RailError> {
    let field = match at {
        CurrencyAt::Fixed(currency) => return Ok(*currency),
        CurrencyAt::Field(field) => field.as_str(),
    };
    let text = value[field].as_str().unwrap_or("");
    Currency::parse(text)
        .map_err(|e| RailError::Unavailable(format!("the rail's currency {text:?}: {e}")))
}
