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

/// Which backend the tests' ledgers are on: `INTERLOCK_TEST_BACKEND=postgres` runs the same
/// tests on PostgreSQL (a fresh database per world), anything else or nothing on SQLite.
pub fn backend() -> Backend {
    match std::env::var("INTERLOCK_TEST_BACKEND").as_deref() {
        Ok("postgres") => Backend::Postgres,
        Ok("sqlite") | Err(_) => Backend::Sqlite,
        Ok(other) => panic!("INTERLOCK_TEST_BACKEND={other:?}: expected sqlite or postgres"),
    }
}

pub use interlock_engine::ledger::Backend;

/// A rail whose calls are recorded, with the ledger's audit head at the moment each arrived.
pub struct World {
    pub dir: tempfile::TempDir,
    pub clock: Arc<ManualClock>,
    pub calls: Arc<Mutex<Vec<(u64, Record)>>>,
    /// The PostgreSQL database of this world, when the tests run on PostgreSQL.
    pub postgres: Option<String>,
}

impl World {
    pub fn new() -> World {
        World {
            dir: tempfile::tempdir().expect("a temp dir"),
            clock: Arc::new(ManualClock::new(T0)),
            calls: Arc::new(Mutex::new(Vec::new())),
            postgres: (backend() == Backend::Postgres).then(interlock_pgtest::fresh_database),
        }
    }

    /// A world on SQLite whatever the backend of the run: for tests of the file itself (its
    /// pragmas, its migrations, bytes edited behind the ledger's back). Their PostgreSQL
    /// counterparts are in `tests/postgres.rs`.
    pub fn on_sqlite() -> World {
        World {
            dir: tempfile::tempdir().expect("a temp dir"),
            clock: Arc::new(ManualClock::new(T0)),
            calls: Arc::new(Mutex::new(Vec::new())),
            postgres: None,
        }
    }

    /// The SQLite file (on PostgreSQL, a path no ledger is at: use `target`).
    pub fn db(&self) -> PathBuf {
        self.dir.path().join("ledger.db")
    }

    /// What `Ledger::open_target` opens: the file, or the PostgreSQL database.
    pub fn target(&self) -> String {
        match &self.postgres {
            Some(url) => url.clone(),
            None => self.db().display().to_string(),
        }
    }

    /// A second handle on this world's ledger.
    pub fn open_ledger(&self) -> Ledger {
        Ledger::open_target(&self.target()).expect("the ledger opens")
    }

    /// A raw connection for tests that inspect the ledger's tables.
    pub fn raw(&self) -> Raw {
        match &self.postgres {
            Some(url) => Raw::Postgres(url.clone()),
            None => Raw::Sqlite(raw(&self.db())),
        }
    }

    /// A rail with the standard payments: pay_1002 (189900, none refunded, order paid
    /// 189900) and pay_2000 (1000000), and a balance of 500000.
    pub fn rail(&self) -> MemoryRail {
        let db = self.db();
        let postgres = self.postgres.clone();
        let calls = Arc::clone(&self.calls);
        let rail = MemoryRail::new(self.clock.clone(), Minor::new(500_000).unwrap()).with_observer(
            Box::new(move |call| {
                let raw = match &postgres {
                    Some(url) => Raw::Postgres(url.clone()),
                    None => Raw::Sqlite(raw(&db)),
                };
                let head: u64 = raw
                    .query_row("SELECT coalesce(max(seq), 0) FROM audit_log", [], |row| {
                        row.get(0)
                    })
                    .unwrap_or(0);
                let attempt_seq: u32 = raw
                    .query_row(
                        "SELECT attempt_seq FROM intents WHERE sik = ?1",
                        [call.sik.as_str()],
                        |row| row.get(0),
                    )
                    .unwrap_or(0);
                calls.lock().unwrap().push((
                    head,
                    Record::RailCall {
                        sik: call.sik.clone(),
                        attempt_seq,
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
        let ledger = self.open_ledger();
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

/// A connection for reading the ledger's tables in a test, on either backend. Values come
/// back as text (PostgreSQL's simple protocol), parsed into what the test asks for; on
/// PostgreSQL a statement's `?N` are filled in as quoted literals and SQLite's
/// `json_extract(col, '$.a.b')` is read as `col::jsonb #>> '{a,b}'`.
pub enum Raw {
    Sqlite(rusqlite::Connection),
    Postgres(String),
}

/// One row of a [`Raw`] query.
pub struct RawRow(Vec<Option<String>>);

impl RawRow {
    pub fn get<I: RawIndex, T: FromRaw>(&self, index: I) -> Result<T, String> {
        let index = index.index();
        let value = self.0.get(index).ok_or(format!("no column {index}"))?;
        T::from_raw(value.as_deref())
    }
}

/// A column number (only `usize`: a literal `0` is one).
pub trait RawIndex {
    fn index(self) -> usize;
}

impl RawIndex for usize {
    fn index(self) -> usize {
        self
    }
}

pub trait FromRaw: Sized {
    fn from_raw(text: Option<&str>) -> Result<Self, String>;
}

macro_rules! from_raw_parsed {
    ($($t:ty),*) => {$(
        impl FromRaw for $t {
            fn from_raw(text: Option<&str>) -> Result<$t, String> {
                let text = text.ok_or("NULL")?;
                text.parse().map_err(|e| format!("{text:?}: {e}"))
            }
        }
    )*};
}
from_raw_parsed!(i64, u64, u32, i32, String);

impl<T: FromRaw> FromRaw for Option<T> {
    fn from_raw(text: Option<&str>) -> Result<Option<T>, String> {
        text.map(|text| T::from_raw(Some(text))).transpose()
    }
}

impl Raw {
    pub fn query_row<T, const N: usize>(
        &self,
        sql: &str,
        params: [&str; N],
        f: impl FnOnce(&RawRow) -> Result<T, String>,
    ) -> Result<T, String> {
        let rows = self.query(sql, &params)?;
        f(rows.first().ok_or("the query returned no row")?)
    }

    pub fn query(&self, sql: &str, params: &[&str]) -> Result<Vec<RawRow>, String> {
        match self {
            Raw::Sqlite(conn) => {
                let mut statement = conn.prepare(sql).map_err(|e| e.to_string())?;
                let count = statement.column_count();
                let rows = statement
                    .query_map(rusqlite::params_from_iter(params), |row| {
                        (0..count)
                            .map(|i| {
                                Ok(match row.get_ref(i)? {
                                    rusqlite::types::ValueRef::Null => None,
                                    rusqlite::types::ValueRef::Integer(v) => Some(v.to_string()),
                                    rusqlite::types::ValueRef::Real(v) => Some(v.to_string()),
                                    rusqlite::types::ValueRef::Text(t) => {
                                        Some(String::from_utf8_lossy(t).into_owned())
                                    }
                                    rusqlite::types::ValueRef::Blob(_) => Some("<blob>".into()),
                                })
                            })
                            .collect::<rusqlite::Result<Vec<_>>>()
                            .map(RawRow)
                    })
                    .map_err(|e| e.to_string())?;
                rows.collect::<rusqlite::Result<Vec<_>>>()
                    .map_err(|e| e.to_string())
            }
            Raw::Postgres(url) => {
                let sql = postgres_sql(sql, params);
                let url = url.clone();
                // On a thread of its own: the sync client may not run inside a runtime.
                std::thread::spawn(move || {
                    let mut client = ::postgres::Client::connect(&url, ::postgres::NoTls)
                        .map_err(|e| e.to_string())?;
                    let messages = client.simple_query(&sql).map_err(|e| format!("{e:?}"))?;
                    Ok(messages
                        .iter()
                        .filter_map(|message| match message {
                            ::postgres::SimpleQueryMessage::Row(row) => Some(RawRow(
                                (0..row.len())
                                    .map(|i| row.get(i).map(str::to_owned))
                                    .collect(),
                            )),
                            _ => None,
                        })
                        .collect())
                })
                .join()
                .expect("the query thread")
            }
        }
    }

    /// Runs statements that return nothing.
    pub fn execute(&self, sql: &str) -> Result<(), String> {
        self.query(sql, &[]).map(drop)
    }
}

/// `sql` for PostgreSQL's simple protocol: `?N` as quoted literals, `json_extract` as `#>>`.
fn postgres_sql(sql: &str, params: &[&str]) -> String {
    let mut out = String::new();
    let mut rest = sql;
    while let Some(at) = rest.find("json_extract(") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "json_extract(".len()..];
        let close = after.find(')').expect("json_extract( has its )");
        let (column, path) = after[..close]
            .split_once(',')
            .expect("json_extract(column, path)");
        let path = path.trim().trim_matches('\'').trim_start_matches("$.");
        out.push_str(&format!(
            "(CAST({} AS jsonb) #>> '{{{}}}')",
            column.trim(),
            path.replace('.', ",")
        ));
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    let mut filled = String::new();
    let mut chars = out.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '?' && chars.peek().is_some_and(char::is_ascii_digit) {
            let mut digits = String::new();
            while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                digits.push(*d);
                chars.next();
            }
            let index: usize = digits.parse().expect("a parameter number");
            let value = params[index - 1];
            filled.push_str(&format!("'{}'", value.replace('\'', "''")));
        } else {
            filled.push(c);
        }
    }
    filled
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
