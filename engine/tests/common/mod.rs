//! Shared fixtures for the engine's tests: a mandate, a scripted rail, an engine on a fresh
//! ledger file, and the verdicts over the ledger and the rail.
#![allow(dead_code)]

use interlock_engine::gates::LiveTool;
use interlock_engine::memory_rail::MemoryRail;
use interlock_engine::{Engine, EngineConfig, Ledger, ManualClock};
use interlock_machine::{Record, invariants};
use interlock_spec::action::{ActionKind, ProposedAction};
use interlock_spec::ids::{AgentId, MerchantId};
use interlock_spec::mandate::Mandate;
use interlock_spec::money::Minor;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// 2023-11-15T00:00:00Z, inside the test mandate's validity.
pub const T0: u64 = 1_700_006_400_000;
/// The pin every test tool definition hashes to.
pub const PIN: &str = "52d4053d8642b1d01b89677925bf34c415c19e28cec815e39387dee36d171893";
pub const SERVER: &str = "razorpay-mcp@0.1.0";

/// The tests' mandate as YAML. Some tests edit the text (`max_calls: 40`, the first
/// `currencies: [INR]}`, the window's flow line, the settlement's pin line): the template writes
/// those as one flow line each.
pub fn mandate_yaml() -> String {
    interlock_profile::razorpay::refund_desk("agent_test")
        .merchant_id("acc_TEST")
        .purpose("test refunds")
        .expires_at(1_800_000_000_000)
        .without("fetch_payment")
        .max_refunds_per_payment("create_refund", 3)
        .max_amount("create_instant_settlement", 1_000_000)
        .on_unresolvable("create_instant_settlement", None)
        .without_idempotency("create_instant_settlement")
        .pinned(SERVER, PIN)
        .pin("create_refund", PIN)
        .pin("create_instant_settlement", PIN)
        .yaml()
}

pub fn mandate() -> Mandate {
    Mandate::parse_yaml(&mandate_yaml()).expect("the test mandate validates")
}

pub fn live() -> LiveTool {
    LiveTool {
        server_id: SERVER.to_owned(),
        sha256: Ok(PIN.to_owned()),
    }
}

pub fn refund(payment: &str, amount: u64) -> ProposedAction {
    refund_args(json!({"payment_id": payment, "amount": amount}))
}

pub fn refund_args(args: Value) -> ProposedAction {
    parse(ActionKind::Refund, "create_refund", args)
}

pub fn settlement(amount: u64) -> ProposedAction {
    parse(
        ActionKind::Settlement,
        "create_instant_settlement",
        json!({"amount": amount, "settle_full_balance": false}),
    )
}

pub fn parse(kind: ActionKind, tool: &str, args: Value) -> ProposedAction {
    // A tool outside the profile (an ungranted one, for G1) is parsed with its kind's shape.
    let profile = interlock_profile::razorpay::profile();
    let money = profile
        .money
        .iter()
        .find(|m| m.kind == kind)
        .expect("both kinds");
    let mut action = profile
        .parse(
            money,
            AgentId::parse("agent_test").unwrap(),
            MerchantId::parse("acc_TEST").unwrap(),
            &args,
        )
        .expect("test arguments parse");
    action.tool = interlock_spec::ids::ToolName::parse(tool).unwrap();
    action
}

/// The built-in profile with a bank's two tools added: `send_money` (a transfer to a payee)
/// and `update_scheduled_transaction` (an update of a scheduled transfer by integer id, which
/// may keep its amount), in paise like the rest.
pub fn bank_profile() -> interlock_profile::Profile {
    let yaml = interlock_profile::razorpay::PROFILE_YAML
        .replace(
            "\nstamp:\n",
            "  - tool: send_money
    kind: TRANSFER
    amount: { arg: amount, encoding: minor_integer }
    payee: recipient
    fee_field: fee
    default_key: { fields: [recipient], window_ms: 86400000 }
  - tool: update_scheduled_transaction
    kind: SCHEDULED_UPDATE
    amount: { arg: amount, encoding: minor_integer, optional: true }
    subject: { arg: id, integer: true }
    payee: recipient
    fee_field: fee
    default_key: { fields: [id], window_ms: 86400000 }

stamp:
",
        )
        .replace(
            "  amounts: minor_integer # paise in every answer\n",
            "  amounts: minor_integer
  scheduled:
    read: { tool: list_scheduled }
    items: items
    fields: { id: id, amount: amount, recipient: recipient, currency: { field: currency } }
",
        )
        .replace(
            "\nlists:\n",
            "
lists:
  TRANSFER: { tool: list_transfers, count: { arg: count, size: 10 }, skip_arg: skip, items: items }
  SCHEDULED_UPDATE: { tool: list_updates, count: { arg: count, size: 10 }, skip_arg: skip, items: items }
",
        );
    interlock_profile::Profile::from_yaml(&yaml).expect("the bank profile is valid")
}

/// The tests' mandate with the bank's two tools granted, each with its payees.
pub fn bank_mandate_yaml() -> String {
    mandate_yaml()
        .replacen(
            "  grants:\n",
            "  grants:
    send_money:
      reversibility: irreversible
      value: { max_amount_minor: 100000, min_amount_minor: 1, currencies: [INR] }
      payees: [DE89 3704 0044 0532 0130 00]
    update_scheduled_transaction:
      reversibility: irreversible
      value: { max_amount_minor: 100000, min_amount_minor: 1, currencies: [INR] }
      payees: [DE89370400440532013000, Landlord]
      recipient_changes: forbid
",
            1,
        )
        .replacen(
            "  pinned_manifests:\n",
            &format!(
                "  pinned_manifests:
    send_money: {{ sha256: \"{PIN}\", trust_tier: pinned }}
    update_scheduled_transaction: {{ sha256: \"{PIN}\", trust_tier: pinned }}
"
            ),
            1,
        )
}

/// A call of one of the bank profile's tools.
pub fn bank_call(tool: &str, args: Value) -> ProposedAction {
    let profile = bank_profile();
    let money = profile.money_tool(tool).expect("a bank tool");
    profile
        .parse(
            money,
            AgentId::parse("agent_test").unwrap(),
            MerchantId::parse("acc_TEST").unwrap(),
            &args,
        )
        .expect("test arguments parse")
}

/// A rail whose calls are recorded, with the ledger's audit head at the moment each arrived.
pub struct World {
    pub dir: tempfile::TempDir,
    pub clock: Arc<ManualClock>,
    pub calls: Arc<Mutex<Vec<(u64, Record)>>>,
}

impl World {
    pub fn new() -> World {
        World {
            dir: tempfile::tempdir().expect("a temp dir"),
            clock: Arc::new(ManualClock::new(T0)),
            calls: Arc::new(Mutex::new(Vec::new())),
        }
    }

    pub fn db(&self) -> PathBuf {
        self.dir.path().join("ledger.db")
    }

    /// A rail with the standard payments: pay_1002 (189900, none refunded, order paid
    /// 189900) and pay_2000 (1000000), and a balance of 500000.
    pub fn rail(&self) -> MemoryRail {
        let db = self.db();
        let calls = Arc::clone(&self.calls);
        let rail = MemoryRail::new(self.clock.clone(), Minor::new(500_000).unwrap()).with_observer(
            Box::new(move |call| {
                let head = audit_head(&db);
                calls.lock().unwrap().push((
                    head,
                    Record::RailCall {
                        sik: call.sik.clone(),
                        attempt_seq: current_attempt(&db, call.sik.as_str()),
                    },
                ));
            }),
        );
        rail.add_payment("pay_1002", 189_900, 0, Some(189_900));
        rail.add_payment("pay_2000", 1_000_000, 0, None);
        rail
    }

    pub fn engine<R: interlock_engine::Rail>(&self, rail: R, instance: &str) -> Engine<R> {
        self.engine_with(rail, instance, mandate())
    }

    pub fn engine_with<R: interlock_engine::Rail>(
        &self,
        rail: R,
        instance: &str,
        mandate: Mandate,
    ) -> Engine<R> {
        let ledger = Ledger::open(&self.db()).expect("the ledger opens");
        Engine::new(
            ledger,
            rail,
            self.clock.clone(),
            mandate,
            EngineConfig::new(instance),
        )
        .expect("the engine starts")
    }

    /// The ledger's history with the observed rail calls placed after the audit record that
    /// was the head when each call arrived.
    pub fn history(&self, ledger: &Ledger) -> Vec<Record> {
        let records = ledger.history().expect("history reads");
        let calls = self.calls.lock().unwrap().clone();
        let mut merged = Vec::with_capacity(records.len() + calls.len());
        let mut pending = calls.into_iter().peekable();
        for record in records {
            let seq = match &record {
                Record::Inserted { seq, .. } | Record::Transition { seq, .. } => *seq,
                Record::RailCall { .. } => 0,
            };
            while pending.peek().is_some_and(|(head, _)| *head < seq) {
                merged.push(pending.next().unwrap().1);
            }
            merged.push(record);
        }
        merged.extend(pending.map(|(_, record)| record));
        merged
    }
}

/// Every claim, over the real ledger file and the rail's ground truth.
pub fn assert_all_invariants(world: &World, ledger: &Ledger, rail: &MemoryRail) {
    let history = world.history(ledger);
    if let Err(violation) = invariants::check_history(&history) {
        panic!(
            "{}: {}\nhistory: {history:#?}",
            violation.invariant, violation.detail
        );
    }
    let entities = rail.rail_entities();
    let cores = ledger.cores().expect("cores read");
    invariants::never_two(&entities).unwrap_or_else(|v| panic!("{}: {}", v.invariant, v.detail));
    invariants::no_phantom_success(&cores, &entities)
        .unwrap_or_else(|v| panic!("{}: {}", v.invariant, v.detail));
    invariants::no_silent_loss(&cores, &entities)
        .unwrap_or_else(|v| panic!("{}: {}", v.invariant, v.detail));
    ledger.verify_chain().expect("the audit chain verifies");
}

fn audit_head(db: &Path) -> u64 {
    let conn = rusqlite::Connection::open(db).expect("a second connection");
    conn.query_row("SELECT coalesce(max(seq), 0) FROM audit_log", [], |row| {
        row.get::<_, i64>(0)
    })
    .map(|v| v as u64)
    .unwrap_or(0)
}

fn current_attempt(db: &Path, sik: &str) -> u32 {
    let conn = rusqlite::Connection::open(db).expect("a second connection");
    conn.query_row(
        "SELECT attempt_seq FROM intents WHERE sik = ?1",
        [sik],
        |row| row.get(0),
    )
    .unwrap_or(0)
}

/// A raw connection for tests that inspect or tamper with the file.
pub fn raw(db: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open(db).expect("a raw connection")
}

/// The scripted rail with one behaviour changed: its referents, its answers' timing, or its
/// list pages. For tests that need a rail a little unlike the in-memory one.
pub struct Twisted {
    pub inner: Arc<MemoryRail>,
    pub on_resolve: Option<Twist<interlock_engine::Referent>>,
    pub before_execute: Option<BeforeExecute>,
    pub on_page: Option<Twist<interlock_engine::rail::ListPage>>,
}

/// What runs as a call is about to be executed (a slow rail, a stalled process).
pub type BeforeExecute = Box<dyn Fn(&interlock_engine::rail::CallBudget) + Send + Sync>;

/// A change made to what the scripted rail returned.
pub type Twist<T> = Box<dyn Fn(&mut T) + Send + Sync>;

impl Twisted {
    pub fn new(inner: Arc<MemoryRail>) -> Twisted {
        Twisted {
            inner,
            on_resolve: None,
            before_execute: None,
            on_page: None,
        }
    }
}

impl interlock_engine::Rail for Twisted {
    fn resolve(
        &self,
        action: &ProposedAction,
    ) -> impl Future<Output = Result<interlock_engine::Referent, interlock_engine::rail::RailError>> + Send
    {
        let referent = self.inner.resolve_now(action).map(|mut referent| {
            if let Some(twist) = &self.on_resolve {
                twist(&mut referent);
            }
            referent
        });
        std::future::ready(referent)
    }

    fn execute(
        &self,
        call: &interlock_engine::RailCall,
        budget: &interlock_engine::rail::CallBudget,
    ) -> impl Future<Output = interlock_engine::RailOutcome> + Send {
        if let Some(twist) = &self.before_execute {
            twist(budget);
        }
        std::future::ready(self.inner.execute_now(call, budget))
    }

    fn list_page(
        &self,
        query: &interlock_engine::rail::ListQuery,
        at: interlock_engine::rail::PageAt,
    ) -> impl Future<
        Output = Result<interlock_engine::rail::ListPage, interlock_engine::rail::RailError>,
    > + Send {
        let found = self.inner.list_page_now(query, at).map(|mut found| {
            if let Some(twist) = &self.on_page {
                twist(&mut found);
            }
            found
        });
        std::future::ready(found)
    }
}
