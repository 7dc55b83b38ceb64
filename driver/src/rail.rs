//! The rail vocabulary: referents, the stamped call, its outcome, list pages, and the [`Rail`]
//! trait the runner carries the driver's rail commands out with. The MCP adapter (the proxy)
//! and the engine's in-memory test rail implement it; a rail profile maps these calls to a
//! real rail's tools.
//!
//! A rail implementation owns its own timeout and reports a call that ran out of time as
//! [`RailOutcome::Ambiguous`], never as a failure.

use interlock_machine::EntityRef;
use interlock_spec::action::{ActionKind, ProposedAction};
use interlock_spec::ids::{Sik, ToolName};
use interlock_spec::money::{Currency, Minor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A payment as the rail reports it: what G2 bounds a refund by.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PaymentReferent {
    /// The payment id as the rail spells it; this, not the agent's text, enters the SIK.
    pub id: String,
    /// The captured amount.
    pub amount: Minor,
    /// What has been refunded so far.
    pub amount_refunded: Minor,
    /// The payment's currency (a refund is always in it).
    pub currency: Currency,
    /// Whether the payment is captured; nothing can be refunded on one that is not.
    pub captured: bool,
    /// The payment's order, when it has one.
    pub order: Option<OrderReferent>,
}

/// An order as the rail reports it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OrderReferent {
    /// The order id.
    pub id: String,
    /// What the customer paid on it.
    pub amount_paid: Minor,
}

/// A scheduled transfer as the rail reports it: what an update of it changes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ScheduledReferent {
    /// Its id as the rail spells it.
    pub id: String,
    /// The amount it will pay.
    pub amount: Minor,
    /// Who it pays, in `spec::payee`'s normal form.
    pub recipient: String,
    /// Its currency.
    pub currency: Currency,
}

/// What an action is about, read from the rail by the engine itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "referent", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Referent {
    /// A refund's payment.
    Payment(PaymentReferent),
    /// The source of a settlement or a transfer: the account's balance.
    Balance {
        /// What can be paid out now.
        balance: Minor,
        /// Its currency.
        currency: Currency,
    },
    /// The scheduled transfer an update changes.
    Scheduled(ScheduledReferent),
}

impl Referent {
    /// The id that enters the SIK as its subject.
    pub fn subject_id(&self) -> &str {
        match self {
            Referent::Payment(payment) => &payment.id,
            Referent::Balance { .. } => BALANCE_SUBJECT,
            Referent::Scheduled(scheduled) => &scheduled.id,
        }
    }

    /// The currency the action moves.
    pub fn currency(&self) -> Currency {
        match self {
            Referent::Payment(payment) => payment.currency,
            Referent::Balance { currency, .. } => *currency,
            Referent::Scheduled(scheduled) => scheduled.currency,
        }
    }
}

/// The subject of every settlement and transfer: there is one balance per account.
pub const BALANCE_SUBJECT: &str = "balance";

/// A stamped outbound money call, exactly as every attempt of one intent sends it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RailCall {
    /// The upstream tool.
    pub tool: ToolName,
    /// What the tool does.
    pub kind: ActionKind,
    /// The SIK this call is stamped with.
    pub sik: Sik,
    /// The referent's id (`pay_…`, or [`BALANCE_SUBJECT`]).
    pub subject_id: String,
    /// The amount.
    pub amount: Minor,
    /// The amount's currency.
    pub currency: Currency,
    /// The payee the gates judged, for a tool that pays one (also in `passthrough`, where the
    /// rail reads it); kept so an approval judges the same payee again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payee: Option<String>,
    /// The agent's other arguments (its notes, a description, …), forwarded unchanged. How
    /// the call is stamped with `sik` on the wire (a notes key, a receipt) is the rail
    /// profile's business: it is derived from `sik` when the call is sent, never stored twice.
    pub passthrough: Map<String, Value>,
}

impl RailCall {
    /// Builds the stamped call for `action` about `referent`.
    pub fn stamped(action: &ProposedAction, referent: &Referent, sik: &Sik) -> RailCall {
        RailCall {
            tool: action.tool.clone(),
            kind: action.kind,
            sik: sik.clone(),
            subject_id: referent.subject_id().to_owned(),
            amount: action.amount,
            currency: referent.currency(),
            payee: action.payee.clone(),
            passthrough: action.passthrough.clone(),
        }
    }
}

/// What an entity on the rail says it did, as far as the rail's answer states it: the terms the
/// driver checks against what was authorised. A term the profile does not map is `None` and is
/// not checked; one it maps but the answer lacks or spells unreadably is named in `unreadable`,
/// and an entity with an unreadable term is not taken as authorised.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct EntityTerms {
    /// The amount the entity moved.
    pub amount: Option<Minor>,
    /// Its currency.
    pub currency: Option<Currency>,
    /// The referent it is about (a refund's payment).
    pub subject_id: Option<String>,
    /// The first mapped term the answer did not state readably, and why.
    pub unreadable: Option<String>,
}

/// An entity in a list, with its stamp and its terms.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Listed {
    /// The entity and its stamp.
    pub entity: EntityRef,
    /// What it says it did.
    pub terms: EntityTerms,
}

/// How one rail call ended, as far as the caller can tell.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RailOutcome {
    /// The rail answered with an entity. The engine believes it only if it carries our stamp.
    Applied {
        /// The entity and the stamp read from it.
        entity: EntityRef,
        /// What the entity says it did; checked against the call before it counts as applied.
        terms: EntityTerms,
        /// The fee the rail charged.
        fee: Minor,
        /// The tax on the fee.
        tax: Minor,
        /// The rail's answer, verbatim (replayed to a duplicate proposal).
        response: String,
    },
    /// The rail said no, definitely (a 4xx-style refusal): it did not apply this request.
    Rejected {
        /// The rail's words.
        detail: String,
    },
    /// Anything else: a timeout, a 5xx, a dropped connection, an answer we cannot read.
    Ambiguous {
        /// What happened.
        detail: String,
    },
}

/// Which list a reconcile pass reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ListQuery {
    /// The kind of entity sought.
    pub kind: ActionKind,
    /// The referent's id (a payment for refunds).
    pub subject_id: String,
    /// The stamp sought.
    pub sik: Sik,
}

/// Where a page of a reconcile pass starts. Rails page in two ways: by page number (their own
/// page size) or by offset (`skip`, Razorpay's). An offset must count what was *received*, not
/// pages × the size asked for: a rail may send fewer items than asked without being at the end,
/// and `page × size` would then skip entities never seen, the entity sought among them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PageAt {
    /// The page's number in the pass, from 0.
    pub page: u32,
    /// Entities the pass received before this page.
    pub skip: u32,
}

/// One page of a list, in the rail's order.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ListPage {
    /// The entities on the page with the stamps and terms read from them.
    pub entities: Vec<Listed>,
    /// Whether the rail has said there is nothing after this page. An adapter that cannot
    /// tell (a short page may be a capped one) must say `false` until it reads an empty page.
    pub is_last: bool,
}

/// Why a read from the rail failed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, thiserror::Error)]
pub enum RailError {
    /// The rail could not be reached or answered with an error; try again later.
    #[error("the rail is unavailable: {0}")]
    Unavailable(String),
    /// The referent does not exist on the rail (or is not what the action needs).
    #[error("{0}")]
    NotFound(String),
    /// This rail cannot list entities by stamp for this kind: a human must reconcile.
    #[error("the rail cannot reconcile this by stamp: {0}")]
    NotReconcilable(String),
}

/// What a money call may spend: how long it may run, and the last moment it may leave.
///
/// The driver sends only after re-reading its lease (ADR 0003, A2), but the runner may wait
/// between that read and the write that puts the request on the wire: on a session lock, on an
/// upstream restart, or in a process stopped by a signal or a paused VM. A call that leaves
/// after its lease lapsed may race the process that took the intent over. So the rail asks
/// [`CallBudget::may_send`] once more, as late as it can: after it holds the session, just
/// before it writes the request. What then remains unchecked is the gap between that clock
/// read and the write (`docs/adr/0003-what-the-model-assumes-about-time.md`).
#[derive(Clone)]
pub struct CallBudget {
    /// Abandon the call (ambiguous) after this long.
    pub timeout_ms: u64,
    /// The last reading of the runner's clock at which the call may still leave.
    pub send_by_ms: u64,
    now_ms: std::sync::Arc<dyn Fn() -> u64 + Send + Sync>,
}

impl CallBudget {
    /// A budget read against `now_ms`, the clock the driver's `now` came from.
    pub fn new(
        timeout_ms: u64,
        send_by_ms: u64,
        now_ms: std::sync::Arc<dyn Fn() -> u64 + Send + Sync>,
    ) -> CallBudget {
        CallBudget {
            timeout_ms,
            send_by_ms,
            now_ms,
        }
    }

    /// `Ok` while the call may still leave; otherwise why not. A rail that gets `Err` sends
    /// nothing and reports [`RailOutcome::Rejected`]: nothing left, so nothing moved.
    pub fn may_send(&self) -> Result<(), String> {
        let now = (self.now_ms)();
        if now <= self.send_by_ms {
            return Ok(());
        }
        Err(format!(
            "Interlock did not send the call: it was due to leave by {} ms and the clock reads {now} ms \
             ({} ms late; the process was held up, and its lease may no longer cover the call), \
             nothing was sent",
            self.send_by_ms,
            now - self.send_by_ms
        ))
    }
}

impl std::fmt::Debug for CallBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallBudget")
            .field("timeout_ms", &self.timeout_ms)
            .field("send_by_ms", &self.send_by_ms)
            .finish_non_exhaustive()
    }
}

/// A payment rail, as the runner uses it: three kinds of I/O, each a future the runner awaits
/// (on the proxy's runtime; the memory rail's are ready at once). The driver never calls it: it
/// asks for a read, a call or a page with a command, and is handed the result.
pub trait Rail: Send + Sync {
    /// Reads what `action` is about (a payment, the balance). Read-only.
    fn resolve(
        &self,
        action: &ProposedAction,
    ) -> impl Future<Output = Result<Referent, RailError>> + Send;
    /// Sends one stamped money call and returns within `budget.timeout_ms`, whatever happens: a
    /// call that has not answered by then is abandoned and reported `Ambiguous`. Just before
    /// the request is written it asks [`CallBudget::may_send`], and sends nothing if refused. The driver sizes
    /// its lease on this promise (`lease_ttl_ms >= call_timeout_ms + LEASE_MARGIN_MS`); a rail
    /// that overruns it lets another process take the intent over while the call is still
    /// out (ADR 0004, section 7). A request abandoned at time t that the rail still applies
    /// later must show in its lists by t + `rail_lag_ms` (ADR 0003, A1).
    fn execute(
        &self,
        call: &RailCall,
        budget: &CallBudget,
    ) -> impl Future<Output = RailOutcome> + Send;
    /// Reads the page at `at` of the list a reconcile pass walks.
    fn list_page(
        &self,
        query: &ListQuery,
        at: PageAt,
    ) -> impl Future<Output = Result<ListPage, RailError>> + Send;
}

/// A shared rail is a rail: several engines (processes, in tests) can talk to one.
impl<R: Rail + ?Sized> Rail for std::sync::Arc<R> {
    fn resolve(
        &self,
        action: &ProposedAction,
    ) -> impl Future<Output = Result<Referent, RailError>> + Send {
        (**self).resolve(action)
    }
    fn execute(
        &self,
        call: &RailCall,
        budget: &CallBudget,
    ) -> impl Future<Output = RailOutcome> + Send {
        (**self).execute(call, budget)
    }
    fn list_page(
        &self,
        query: &ListQuery,
        at: PageAt,
    ) -> impl Future<Output = Result<ListPage, RailError>> + Send {
        (**self).list_page(query, at)
    }
}
