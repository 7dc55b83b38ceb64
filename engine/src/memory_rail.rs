//! An in-memory rail with scripted faults, for the engine's own tests and benchmark. It keeps
//! the rail's own rules (a refund never exceeds the unrefunded amount, a receipt is unique per
//! payment, a settlement draws down the balance) so that the engine is tested against a rail
//! that refuses what a real one refuses.
//!
//! Faults are scripted per call, in order, so a run replays exactly. The real-process mock rail
//! (`interlock-rail-mock`) is the MCP counterpart.

use crate::clock::Clock;
use crate::rail::{
    CallBudget, EntityTerms, ListPage, ListQuery, Listed, OrderReferent, PageAt, PaymentReferent,
    Rail, RailCall, RailError, RailOutcome, Referent, ScheduledReferent,
};
use interlock_machine::{EntityRef, RailEntity};
use interlock_spec::action::{ActionKind, ProposedAction};
use interlock_spec::ids::Sik;
use interlock_spec::money::{Currency, Minor};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};

/// The default list page size (Razorpay's default `count`).
pub const PAGE_SIZE_DEFAULT: usize = 10;

/// What the next money call does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecFault {
    /// Applies and answers.
    None,
    /// Applies, then the answer never comes (the caller's timeout).
    TimeoutAfterApply,
    /// Never arrives: nothing applied, no answer.
    TimeoutBeforeApply,
    /// Applies, then answers with a 5xx.
    ServerErrorApplied,
    /// Answers with a 5xx, nothing applied.
    ServerErrorNotApplied,
    /// Applies, then answers with an earlier entity's response (a gateway replay).
    DupResponse,
    /// Refuses with a 4xx, nothing applied.
    Reject,
    /// Applies one minor unit more than asked, and answers with that entity (a rail, or a
    /// profile mapping the wrong argument, that moves other money than authorised).
    MovesOneMore,
    /// As [`ExecFault::MovesOneMore`], but the answer never comes: the reconciler finds it.
    MovesOneMoreSilently,
    /// Applies one minor unit less than asked, and answers with that entity.
    MovesOneLess,
}

/// One entity the rail created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entity {
    /// The rail's id.
    pub id: String,
    /// Refund or settlement.
    pub kind: ActionKind,
    /// The payment id, or `balance`.
    pub subject: String,
    /// The amount.
    pub amount: Minor,
    /// The SIK stamp the call carried, as stored.
    pub stamp: Option<String>,
    /// The rail's own idempotency key for refunds (the call's SIK, as a receipt on a real
    /// rail): unique per payment, so the rail refuses a second refund of one intent.
    pub dedupe_key: Option<String>,
    /// When it was created, by the rail's clock.
    pub created_at_ms: u64,
}

#[derive(Debug, Clone)]
struct Payment {
    amount: Minor,
    refunded: Minor,
    currency: Currency,
    captured: bool,
    order: Option<OrderReferent>,
}

#[derive(Debug)]
struct State {
    payments: BTreeMap<String, Payment>,
    /// Scheduled transfers by id: the amount and the recipient.
    scheduled: BTreeMap<String, (Minor, String)>,
    balance: Minor,
    entities: Vec<Entity>,
    /// `(subject, dedupe key)` of every entity that has one: the receipt check looks here, so a
    /// call costs the same with 50,000 entities as with one (the growth benchmark measures the
    /// engine, not this rail).
    receipts: BTreeSet<(String, String)>,
    exec_faults: VecDeque<ExecFault>,
    list_failures: u32,
    resolve_failures: u32,
    read_lag_ms: u64,
    page_size: usize,
    fee_bps: u64,
    executed: Vec<RailCall>,
    lists: u64,
    settlements_unlistable: bool,
}

/// Called with each call the rail receives, before it does anything: tests record
/// `Record::RailCall` here, in the order calls reached the rail.
pub type CallObserver = Box<dyn Fn(&RailCall) + Send + Sync>;

/// The in-memory rail.
pub struct MemoryRail {
    state: Mutex<State>,
    clock: Arc<dyn Clock>,
    observer: Option<CallObserver>,
}

impl MemoryRail {
    /// An empty rail with `balance` INR settleable.
    pub fn new(clock: Arc<dyn Clock>, balance: Minor) -> MemoryRail {
        MemoryRail {
            state: Mutex::new(State {
                payments: BTreeMap::new(),
                scheduled: BTreeMap::new(),
                balance,
                entities: Vec::new(),
                receipts: BTreeSet::new(),
                exec_faults: VecDeque::new(),
                list_failures: 0,
                resolve_failures: 0,
                read_lag_ms: 0,
                page_size: PAGE_SIZE_DEFAULT,
                fee_bps: 0,
                executed: Vec::new(),
                lists: 0,
                settlements_unlistable: false,
            }),
            clock,
            observer: None,
        }
    }

    /// Calls `observer` with every money call as it arrives.
    pub fn with_observer(mut self, observer: CallObserver) -> MemoryRail {
        self.observer = Some(observer);
        self
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Adds a captured INR payment, optionally on an order with `order_paid` paid.
    pub fn add_payment(&self, id: &str, amount: u64, refunded: u64, order_paid: Option<u64>) {
        let minor = |v| Minor::new(v).expect("test amounts are small");
        let order = order_paid.map(|paid| OrderReferent {
            id: format!("order_{}", id.trim_start_matches("pay_")),
            amount_paid: minor(paid),
        });
        self.state().payments.insert(
            id.to_owned(),
            Payment {
                amount: minor(amount),
                refunded: minor(refunded),
                currency: Currency::INR,
                captured: true,
                order,
            },
        );
    }

    /// Adds a scheduled INR transfer of `amount` to `recipient`.
    pub fn add_scheduled(&self, id: &str, amount: u64, recipient: &str) {
        let amount = Minor::new(amount).expect("test amounts are small");
        let entry = (amount, recipient.to_owned());
        self.state().scheduled.insert(id.to_owned(), entry);
    }

    /// Marks a payment as not captured.
    pub fn uncapture(&self, id: &str) {
        if let Some(payment) = self.state().payments.get_mut(id) {
            payment.captured = false;
        }
    }

    /// Scripts the next money calls' faults, in order; calls past the script apply normally.
    pub fn script(&self, faults: impl IntoIterator<Item = ExecFault>) {
        self.state().exec_faults.extend(faults);
    }

    /// Makes the next `n` list calls fail (a partition); `u32::MAX` for a permanent one.
    pub fn fail_lists(&self, n: u32) {
        self.state().list_failures = n;
    }

    /// Makes the next `n` referent reads fail.
    pub fn fail_resolves(&self, n: u32) {
        self.state().resolve_failures = n;
    }

    /// Lists hide entities younger than `ms` (read-replica lag).
    pub fn set_read_lag(&self, ms: u64) {
        self.state().read_lag_ms = ms;
    }

    /// Settlement lists carry no stamps (as on a rail whose settlement objects drop notes), so
    /// a settlement cannot be reconciled by stamp.
    pub fn set_settlements_unlistable(&self, unlistable: bool) {
        self.state().settlements_unlistable = unlistable;
    }

    /// Lists return at most `n` items per page.
    pub fn set_page_size(&self, n: usize) {
        self.state().page_size = n.max(1);
    }

    /// Charges `bps` basis points of each amount as a fee (tax 18% of the fee on top).
    pub fn set_fee_bps(&self, bps: u64) {
        self.state().fee_bps = bps;
    }

    /// Adds an entity as if someone else had created it (same amount, different stamp).
    pub fn add_foreign_refund(&self, payment: &str, amount: u64) {
        let mut state = self.state();
        let now = self.clock.now_ms();
        let id = format!("rfnd_{:014}", state.entities.len() + 1);
        state.entities.push(Entity {
            id,
            kind: ActionKind::Refund,
            subject: payment.to_owned(),
            amount: Minor::new(amount).expect("small"),
            stamp: None,
            dedupe_key: None,
            created_at_ms: now,
        });
    }

    /// Every entity the rail holds (the ground truth a verifier reads).
    pub fn entities(&self) -> Vec<Entity> {
        self.state().entities.clone()
    }

    /// The entities as the machine's verdict predicates read them.
    pub fn rail_entities(&self) -> Vec<RailEntity> {
        self.entities()
            .into_iter()
            .map(|e| RailEntity {
                id: e.id,
                stamp: e.stamp.and_then(|s| Sik::parse(&s).ok()),
            })
            .collect()
    }

    /// Every money call received, in order.
    pub fn executed(&self) -> Vec<RailCall> {
        self.state().executed.clone()
    }

    /// How many list pages were read.
    pub fn list_calls(&self) -> u64 {
        self.state().lists
    }

    /// The settleable balance.
    pub fn balance(&self) -> Minor {
        self.state().balance
    }

    fn apply(
        &self,
        state: &mut State,
        asked: &RailCall,
        off_by: i64,
    ) -> Result<(Entity, Minor), String> {
        let mut moved = asked.clone();
        let amount = asked.amount.get().saturating_add_signed(off_by).max(1);
        moved.amount = Minor::new(amount).map_err(|e| e.to_string())?;
        let call = &moved;
        let stamp = call.sik.to_string();
        let dedupe_key = (call.kind == ActionKind::Refund).then(|| stamp.clone());
        match call.kind {
            ActionKind::Refund => {
                let Some(payment) = state.payments.get(&call.subject_id) else {
                    return Err(format!(
                        "BAD_REQUEST_ERROR: {} does not exist",
                        call.subject_id
                    ));
                };
                let left = payment.amount.get() - payment.refunded.get();
                if call.amount.get() > left {
                    return Err(format!(
                        "BAD_REQUEST_ERROR: the refund amount {} is greater than the unrefunded {left}",
                        call.amount
                    ));
                }
                let duplicate = dedupe_key.as_ref().is_some_and(|key| {
                    state
                        .receipts
                        .contains(&(call.subject_id.clone(), key.clone()))
                });
                if duplicate {
                    return Err("BAD_REQUEST_ERROR: the receipt has already been used".to_owned());
                }
                let payment = state.payments.get_mut(&call.subject_id).expect("checked");
                payment.refunded = Minor::new(payment.refunded.get() + call.amount.get())
                    .expect("bounded by the amount");
            }
            ActionKind::ScheduledUpdate => {
                let Some(scheduled) = state.scheduled.get_mut(&call.subject_id) else {
                    return Err(format!(
                        "BAD_REQUEST_ERROR: no scheduled transfer {}",
                        call.subject_id
                    ));
                };
                scheduled.0 = call.amount;
                if let Some(payee) = &call.payee {
                    scheduled.1.clone_from(payee);
                }
            }
            ActionKind::Settlement | ActionKind::Transfer | ActionKind::ScheduledTransfer => {
                if call.amount > state.balance {
                    return Err(format!(
                        "BAD_REQUEST_ERROR: the amount {} exceeds the balance {}",
                        call.amount, state.balance
                    ));
                }
                state.balance = Minor::new(state.balance.get() - call.amount.get()).expect("≤");
            }
        }
        let prefix = match call.kind {
            ActionKind::Refund => "rfnd",
            ActionKind::Settlement => "setlod",
            ActionKind::Transfer => "trf",
            ActionKind::ScheduledTransfer | ActionKind::ScheduledUpdate => "sched",
        };
        let entity = Entity {
            id: format!("{prefix}_{:014}", state.entities.len() + 1),
            kind: call.kind,
            subject: call.subject_id.clone(),
            amount: call.amount,
            stamp: Some(stamp),
            dedupe_key,
            created_at_ms: self.clock.now_ms(),
        };
        if let Some(key) = &entity.dedupe_key {
            state.receipts.insert((entity.subject.clone(), key.clone()));
        }
        state.entities.push(entity.clone());
        let fee = Minor::new(call.amount.get() * state.fee_bps / 10_000).expect("≤ amount");
        Ok((entity, fee))
    }
}

/// What this rail states about an entity: its amount and its subject (it keeps no currency).
fn terms_of(entity: &Entity) -> EntityTerms {
    EntityTerms {
        amount: Some(entity.amount),
        subject_id: Some(entity.subject.clone()),
        ..EntityTerms::default()
    }
}

fn outcome_of(entity: &Entity, fee: Minor) -> RailOutcome {
    let tax = Minor::new(fee.get() * 18 / 100).expect("≤ fee");
    let response = serde_json::json!({
        "id": entity.id,
        "amount": entity.amount.get(),
        "stamp": entity.stamp,
        "dedupe_key": entity.dedupe_key,
        "fee": fee.get(),
        "tax": tax.get(),
    });
    RailOutcome::Applied {
        entity: EntityRef {
            id: entity.id.clone(),
            stamp: entity.stamp.as_deref().and_then(|s| Sik::parse(s).ok()),
        },
        terms: terms_of(entity),
        fee,
        tax,
        response: response.to_string(),
    }
}

/// The memory rail answers at once: each future is ready when made.
impl Rail for MemoryRail {
    fn resolve(
        &self,
        action: &ProposedAction,
    ) -> impl Future<Output = Result<Referent, RailError>> + Send {
        std::future::ready(self.resolve_now(action))
    }

    fn execute(
        &self,
        call: &RailCall,
        budget: &CallBudget,
    ) -> impl Future<Output = RailOutcome> + Send {
        std::future::ready(self.execute_now(call, budget))
    }

    fn list_page(
        &self,
        query: &ListQuery,
        at: PageAt,
    ) -> impl Future<Output = Result<ListPage, RailError>> + Send {
        std::future::ready(self.list_page_now(query, at))
    }
}

impl MemoryRail {
    /// Reads a referent, as [`Rail::resolve`] does.
    pub fn resolve_now(&self, action: &ProposedAction) -> Result<Referent, RailError> {
        let mut state = self.state();
        if state.resolve_failures > 0 {
            state.resolve_failures -= 1;
            return Err(RailError::Unavailable(
                "GATEWAY_ERROR: timed out".to_owned(),
            ));
        }
        match action.kind {
            ActionKind::Refund => {
                let id = action.subject_hint.as_deref().unwrap_or_default();
                let payment = state
                    .payments
                    .get(id)
                    .ok_or_else(|| RailError::NotFound(format!("payment {id} does not exist")))?;
                Ok(Referent::Payment(PaymentReferent {
                    id: id.to_owned(),
                    amount: payment.amount,
                    amount_refunded: payment.refunded,
                    currency: payment.currency,
                    captured: payment.captured,
                    order: payment.order.clone(),
                }))
            }
            ActionKind::Settlement | ActionKind::Transfer | ActionKind::ScheduledTransfer => {
                Ok(Referent::Balance {
                    balance: state.balance,
                    currency: Currency::INR,
                })
            }
            ActionKind::ScheduledUpdate => {
                let id = action.subject_hint.as_deref().unwrap_or_default();
                let (amount, recipient) = state.scheduled.get(id).cloned().ok_or_else(|| {
                    RailError::NotFound(format!("scheduled transfer {id} does not exist"))
                })?;
                Ok(Referent::Scheduled(ScheduledReferent {
                    id: id.to_owned(),
                    amount,
                    recipient,
                    currency: Currency::INR,
                }))
            }
        }
    }

    /// Carries out a call, as [`Rail::execute`] does.
    pub fn execute_now(&self, call: &RailCall, budget: &CallBudget) -> RailOutcome {
        // As the MCP rail does, the last check before the request leaves: a call held up past
        // the moment its lease covers it is not sent at all.
        if let Err(detail) = budget.may_send() {
            return RailOutcome::Rejected { detail };
        }
        // In memory, every call answers at once: well within any timeout.
        if let Some(observer) = &self.observer {
            observer(call);
        }
        let mut state = self.state();
        state.executed.push(call.clone());
        let fault = state.exec_faults.pop_front().unwrap_or(ExecFault::None);
        let ambiguous = |detail: &str| RailOutcome::Ambiguous {
            detail: detail.to_owned(),
        };
        match fault {
            ExecFault::TimeoutBeforeApply => return ambiguous("timed out"),
            ExecFault::ServerErrorNotApplied => return ambiguous("SERVER_ERROR: 500"),
            ExecFault::Reject => {
                return RailOutcome::Rejected {
                    detail: "BAD_REQUEST_ERROR: scripted refusal".to_owned(),
                };
            }
            _ => {}
        }
        let previous = state.entities.last().cloned();
        let off_by = match fault {
            ExecFault::MovesOneMore | ExecFault::MovesOneMoreSilently => 1,
            ExecFault::MovesOneLess => -1,
            _ => 0,
        };
        let (entity, fee) = match self.apply(&mut state, call, off_by) {
            Ok(applied) => applied,
            Err(detail) => return RailOutcome::Rejected { detail },
        };
        match fault {
            ExecFault::None | ExecFault::MovesOneMore | ExecFault::MovesOneLess => {
                outcome_of(&entity, fee)
            }
            ExecFault::TimeoutAfterApply | ExecFault::MovesOneMoreSilently => {
                ambiguous("timed out")
            }
            ExecFault::ServerErrorApplied => ambiguous("SERVER_ERROR: 502"),
            ExecFault::DupResponse => match previous {
                Some(previous) => outcome_of(&previous, Minor::ZERO),
                None => ambiguous("SERVER_ERROR: 502"),
            },
            ExecFault::TimeoutBeforeApply
            | ExecFault::ServerErrorNotApplied
            | ExecFault::Reject => {
                unreachable!("answered above")
            }
        }
    }

    /// Reads a page, as [`Rail::list_page`] does.
    pub fn list_page_now(&self, query: &ListQuery, at: PageAt) -> Result<ListPage, RailError> {
        let mut state = self.state();
        state.lists += 1;
        if state.list_failures > 0 {
            state.list_failures = state.list_failures.saturating_sub(1);
            return Err(RailError::Unavailable(
                "GATEWAY_ERROR: partition".to_owned(),
            ));
        }
        if query.kind == ActionKind::Settlement && state.settlements_unlistable {
            return Err(RailError::NotReconcilable(
                "settlements on this rail carry no notes".to_owned(),
            ));
        }
        let now = self.clock.now_ms();
        let visible: Vec<&Entity> = state
            .entities
            .iter()
            .rev() // newest first, as Razorpay lists
            .filter(|e| e.kind == query.kind)
            .filter(|e| query.kind == ActionKind::Settlement || e.subject == query.subject_id)
            .filter(|e| now.saturating_sub(e.created_at_ms) >= state.read_lag_ms)
            .collect();
        let size = state.page_size;
        // This rail pages by number, with a page size it keeps to: it knows its last page.
        let start = (at.page as usize).saturating_mul(size);
        let entities: Vec<Listed> = visible
            .iter()
            .skip(start)
            .take(size)
            .map(|e| Listed {
                entity: EntityRef {
                    id: e.id.clone(),
                    stamp: e.stamp.as_deref().and_then(|s| Sik::parse(s).ok()),
                },
                terms: terms_of(e),
            })
            .collect();
        let is_last = entities.len() < size;
        Ok(ListPage { entities, is_last })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use interlock_spec::ids::ToolName;

    fn refund(sik: &str, subject: &str) -> RailCall {
        RailCall {
            tool: ToolName::parse("create_refund").unwrap(),
            kind: ActionKind::Refund,
            sik: Sik::parse(&sik.repeat(32)).unwrap(),
            subject_id: subject.into(),
            amount: Minor::new(100).unwrap(),
            currency: Currency::INR,
            payee: None,
            passthrough: Default::default(),
        }
    }

    /// A receipt is unique per payment: the same stamp again is refused, another stamp or the
    /// same stamp on another payment is not.
    #[test]
    fn a_receipt_is_refused_the_second_time_on_the_same_payment_only() {
        let rail = MemoryRail::new(Arc::new(ManualClock::new(1)), Minor::ZERO);
        rail.add_payment("pay_1", 1_000, 0, None);
        rail.add_payment("pay_2", 1_000, 0, None);
        let budget = CallBudget::new(1_000, u64::MAX, Arc::new(|| 1));
        let applied = |o: RailOutcome| matches!(o, RailOutcome::Applied { .. });
        assert!(applied(rail.execute_now(&refund("A", "pay_1"), &budget)));
        let again = rail.execute_now(&refund("A", "pay_1"), &budget);
        assert!(
            matches!(&again, RailOutcome::Rejected { detail } if detail.contains("receipt")),
            "{again:?}"
        );
        assert!(applied(rail.execute_now(&refund("B", "pay_1"), &budget)));
        assert!(applied(rail.execute_now(&refund("A", "pay_2"), &budget)));
        assert_eq!(rail.entities().len(), 3);
    }
}
