//! The profile on the wire: the requests the proxy sends for reads and lists, and how the
//! rail's answers are read back into the driver's vocabulary, by the field names the profile
//! declares. A field named `.` is the whole answer (a rail that answers a balance with a bare
//! number, or its scheduled transfers with a bare list).

use crate::{CurrencyAt, ListTool, Profile};
use interlock_driver::rail::{
    EntityTerms, ListPage, ListQuery, Listed, OrderReferent, PageAt, PaymentReferent, RailCall,
    RailError, RailOutcome, Referent, ScheduledReferent,
};
use interlock_machine::EntityRef;
use interlock_spec::action::{ActionKind, AmountEncoding, STAMP_NOTE_KEY};
use interlock_spec::decimal;
use interlock_spec::ids::Sik;
use interlock_spec::money::{Currency, Minor};
use interlock_spec::payee;
use serde_json::{Map, Value};

/// Most scheduled transfers searched for the one an update names.
pub const SCHEDULED_ITEMS_MAX: usize = 10_000;

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

fn no_read(what: &str) -> RailError {
    // The profile's check makes every money kind's read present; this is the last line.
    RailError::Unavailable(format!("the rail profile has no {what} read"))
}

impl Profile {
    /// The read of the payment the agent named.
    pub fn payment_request(&self, hint: &str) -> Result<Request, RailError> {
        let read = &self
            .referent
            .payment
            .as_ref()
            .ok_or_else(|| no_read("payment"))?
            .read;
        let arg = read.arg.iter().map(|a| (a.clone(), Value::from(hint)));
        Ok(Request::new(&read.tool, arg))
    }

    /// The read of the payment's order, when it names one and the profile reads orders.
    pub fn order_request(&self, payment: &Value) -> Option<Request> {
        let field = &self.referent.payment.as_ref()?.fields.order_id;
        let order_id = payment[field.as_str()]
            .as_str()
            .filter(|id| !id.is_empty())?;
        let read = &self.referent.order.as_ref()?.read;
        let arg = read.arg.iter().map(|a| (a.clone(), Value::from(order_id)));
        Some(Request::new(&read.tool, arg))
    }

    /// The payment referent from the payment and its order as the rail sent them.
    pub fn payment_referent(
        &self,
        payment: &Value,
        order: Option<&Value>,
    ) -> Result<Referent, RailError> {
        let fields = &self
            .referent
            .payment
            .as_ref()
            .ok_or_else(|| no_read("payment"))?
            .fields;
        let order = match (order, &self.referent.order) {
            (Some(order), Some(read)) => Some(OrderReferent {
                id: order[read.fields.id.as_str()]
                    .as_str()
                    .or(payment[fields.order_id.as_str()].as_str())
                    .unwrap_or_default()
                    .to_owned(),
                amount_paid: self.amount(order, &read.fields.amount_paid)?,
            }),
            _ => None,
        };
        let id = payment[fields.id.as_str()]
            .as_str()
            .ok_or_else(|| RailError::Unavailable("the payment has no id".into()))?;
        Ok(Referent::Payment(PaymentReferent {
            id: id.to_owned(),
            amount: self.amount(payment, &fields.amount)?,
            amount_refunded: self.amount(payment, &fields.amount_refunded)?,
            currency: currency(payment, &fields.currency)?,
            captured: payment[fields.captured.as_str()].as_bool().unwrap_or(false),
            order,
        }))
    }

    /// The read of the account's balance.
    pub fn balance_request(&self) -> Result<Request, RailError> {
        let read = &self
            .referent
            .balance
            .as_ref()
            .ok_or_else(|| no_read("balance"))?
            .read;
        Ok(Request::new(&read.tool, []))
    }

    /// The balance referent from the rail's answer.
    pub fn balance_referent(&self, balance: &Value) -> Result<Referent, RailError> {
        let fields = &self
            .referent
            .balance
            .as_ref()
            .ok_or_else(|| no_read("balance"))?
            .fields;
        Ok(Referent::Balance {
            balance: self.amount(balance, &fields.balance)?,
            currency: currency(balance, &fields.currency)?,
        })
    }

    /// The read of the scheduled transfers, for the one with id `hint`.
    pub fn scheduled_request(&self, hint: &str) -> Result<Request, RailError> {
        let read = &self
            .referent
            .scheduled
            .as_ref()
            .ok_or_else(|| no_read("scheduled"))?
            .read;
        let arg = read.arg.iter().map(|a| (a.clone(), Value::from(hint)));
        Ok(Request::new(&read.tool, arg))
    }

    /// The scheduled transfer with id `id` in the rail's answer; `NotFound` when it has none.
    pub fn scheduled_referent(&self, answer: &Value, id: &str) -> Result<Referent, RailError> {
        let read = self
            .referent
            .scheduled
            .as_ref()
            .ok_or_else(|| no_read("scheduled"))?;
        let fields = &read.fields;
        let items = field(answer, &read.items).as_array().ok_or_else(|| {
            RailError::Unavailable(format!("the scheduled list has no {}", read.items))
        })?;
        if items.len() > SCHEDULED_ITEMS_MAX {
            return Err(RailError::Unavailable(format!(
                "{} scheduled transfers; at most {SCHEDULED_ITEMS_MAX} are searched",
                items.len()
            )));
        }
        let found = items
            .iter()
            .find(|item| id_text(&item[fields.id.as_str()]).as_deref() == Some(id))
            .ok_or_else(|| RailError::NotFound(format!("no scheduled transfer has id {id}")))?;
        let recipient = found[fields.recipient.as_str()]
            .as_str()
            .unwrap_or_default();
        let recipient = payee::normalize(recipient).map_err(|e| {
            RailError::Unavailable(format!("the scheduled transfer's recipient {e}"))
        })?;
        Ok(Referent::Scheduled(ScheduledReferent {
            id: id.to_owned(),
            amount: self.amount(found, &fields.amount)?,
            recipient,
            currency: currency(found, &fields.currency)?,
        }))
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

    /// What the rail's answer to a money call says happened. A rejection only when the rail
    /// says it refused; any other error, or an answer that is not a JSON entity with an id, is
    /// ambiguous: the reconciler settles it. On a rail without a stamp the answer is believed
    /// as this call's (it is the reply to our request); nothing else could be.
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
        let Some(id) = id_text(&value[self.entities.id.as_str()]) else {
            return RailOutcome::Ambiguous {
                detail: format!("the rail's answer has no id: {text}"),
            };
        };
        let fee_field = self
            .money_tool(call.tool.as_str())
            .map_or("fee", |m| m.fee_field.as_str());
        let mut entity = self.entity(&id, &value);
        if self.stamp.is_none() {
            entity.stamp = Some(call.sik.clone());
        }
        RailOutcome::Applied {
            entity,
            terms: self.terms(call.kind, &value),
            fee: charged(call, &value, fee_field),
            tax: charged(call, &value, "tax"),
            response: text,
        }
    }

    /// The list a reconcile pass walks for `kind`; `NotReconcilable` on a rail that cannot be
    /// searched for our stamp (then a human decides, and nothing is retried).
    pub fn list_of(&self, kind: ActionKind) -> Result<&ListTool, RailError> {
        self.lists.get(&kind).ok_or_else(|| {
            RailError::NotReconcilable(format!(
                "the {} profile has no stamp to list {} entities by: an operator must settle this intent",
                self.name,
                kind.as_str()
            ))
        })
    }

    /// The request for the page at `at` of the list `query` walks.
    pub fn list_request(&self, query: &ListQuery, at: PageAt) -> Result<Request, RailError> {
        let list = self.list_of(query.kind)?;
        let subject = list
            .subject_arg
            .iter()
            .map(|arg| (arg.clone(), Value::from(query.subject_id.clone())));
        let paging = [
            (list.count.arg.clone(), Value::from(list.count.size)),
            (list.skip_arg.clone(), Value::from(at.skip)),
        ];
        Ok(Request::new(&list.tool, subject.chain(paging)))
    }

    /// One page of a list as the rail sent it. The rail pages by offset and reports no total:
    /// only an empty page proves the end. A short page may be the end or a page the rail capped
    /// below the count; treating it as the end would call an entity on a later page absent, and
    /// absence licenses a retry.
    pub fn list_page(&self, kind: ActionKind, collection: &Value) -> Result<ListPage, RailError> {
        let name = self.list_of(kind)?.items.as_str();
        let items = field(collection, name)
            .as_array()
            .ok_or_else(|| RailError::Unavailable(format!("the list has no {name}")))?;
        let id_field = self.entities.id.as_str();
        let entities = items
            .iter()
            .filter_map(|item| {
                id_text(&item[id_field]).map(|id| Listed {
                    entity: self.entity(&id, item),
                    terms: self.terms(kind, item),
                })
            })
            .collect();
        Ok(ListPage {
            is_last: items.is_empty(),
            entities,
        })
    }

    /// An entity's id and the stamp in its notes (which the rail may send as `{}` or `[]`).
    fn entity(&self, id: &str, value: &Value) -> EntityRef {
        let stamp = self
            .stamp
            .as_ref()
            .and_then(|stamp| value[stamp.notes_arg.as_str()].as_object())
            .and_then(|notes| notes.get(STAMP_NOTE_KEY))
            .and_then(Value::as_str);
        EntityRef {
            id: id.to_owned(),
            stamp: stamp.and_then(|text| Sik::parse(text).ok()),
        }
    }

    /// What an entity of `kind` states it did, read from the fields the profile maps for it.
    fn terms(&self, kind: ActionKind, value: &Value) -> EntityTerms {
        let mut terms = EntityTerms::default();
        let Some(fields) = self.entities.terms.get(&kind) else {
            return terms;
        };
        let mut unreadable = Vec::new();
        if let Some(name) = &fields.amount {
            match self.amount(value, name) {
                Ok(amount) => terms.amount = Some(amount),
                Err(e) => unreadable.push(e.to_string()),
            }
        }
        if let Some(name) = &fields.currency {
            match currency(value, &CurrencyAt::Field(name.clone())) {
                Ok(currency) => terms.currency = Some(currency),
                Err(e) => unreadable.push(e.to_string()),
            }
        }
        if let Some(name) = &fields.subject {
            match id_text(field(value, name)) {
                Some(subject) => terms.subject_id = Some(subject),
                None => unreadable.push(format!("the entity's {name} is not an id")),
            }
        }
        terms.unreadable = (!unreadable.is_empty()).then(|| unreadable.join("; "));
        terms
    }

    /// An amount in a referent's answer, in the encoding the profile declares for them.
    fn amount(&self, value: &Value, name: &str) -> Result<Minor, RailError> {
        let given = field(value, name);
        let read = match self.referent.amounts {
            AmountEncoding::MinorInteger => Minor::from_json(given).map_err(|e| e.to_string()),
            AmountEncoding::DecimalMajor(currency) => match given {
                Value::Number(number) => decimal::from_text(&number.to_string(), currency)
                    .map_err(|e| format!("amount {e}")),
                other => Err(format!("amount must be a number, got {other}")),
            },
        };
        read.map_err(|e| RailError::Unavailable(format!("the rail's {name} is not an amount: {e}")))
    }
}

/// The field `name` of `value`; `.` is the value itself.
fn field<'v>(value: &'v Value, name: &str) -> &'v Value {
    if name == "." { value } else { &value[name] }
}

/// An id as text: a string as it is, a non-negative integer in decimal (rails that number their
/// entities); anything else is no id.
fn id_text(value: &Value) -> Option<String> {
    match value {
        Value::String(text) if !text.is_empty() => Some(text.clone()),
        Value::Number(number) => number.as_u64().map(|n| n.to_string()),
        _ => None,
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

fn currency(value: &Value, at: &CurrencyAt) -> Result<Currency, RailError> {
    let field = match at {
        CurrencyAt::Fixed(currency) => return Ok(*currency),
        CurrencyAt::Field(field) => field.as_str(),
    };
    let text = value[field].as_str().unwrap_or("");
    Currency::parse(text)
        .map_err(|e| RailError::Unavailable(format!("the rail's currency {text:?}: {e}")))
}
