//! The journal: the rail's ground truth in SQLite, shared safely by several mock processes.
//!
//! Every entity is committed, in a `BEGIN IMMEDIATE` transaction that also makes the rail's checks
//! (refund ceiling, receipt uniqueness, balance), before the caller is answered. The write lock
//! SQLite takes for `BEGIN IMMEDIATE` is what serialises two mock processes on one file, so the
//! checks hold across processes, not only inside one. Tables are STRICT; the connection that
//! writes entities runs `journal_mode=WAL`, `synchronous=FULL`.
//!
//! The call counters (which decide which calls a fault hits) live in the same file but are
//! committed through a second connection with `synchronous=NORMAL`: a counter increment survives
//! the death of the process (the WAL is in the OS cache) but not a power cut, and a read call does
//! not pay an fsync for it.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OpenFlags, OptionalExtension, Row, TransactionBehavior, params};
use serde_json::{Map, Value, json};

use crate::error::RailError;
use crate::faults::CallClass;
use crate::model::{
    FeeRates, ListOrder, ListQuery, Order, Payment, Refund, RefundRequest, SETTLEMENT_AMOUNT_MIN,
    Settlement, SettlementRequest, Speed,
};
use crate::seed::{
    GENERATED_REFUND_PREFIX, GENERATED_SETTLEMENT_PREFIX, SEED_CREATED_AT_DEFAULT, Seed,
};

/// How long a connection waits for another process's write lock before giving up.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);
/// How many times opening a journal is tried while another process holds a lock.
pub const OPEN_ATTEMPTS: u32 = 100;
/// The pause between two such tries (so at most ~2 s in all).
pub const OPEN_RETRY_DELAY: Duration = Duration::from_millis(20);
/// The schema version written to `meta`; a journal of another version is refused.
pub const SCHEMA_VERSION: &str = "1";
/// Digits after the `MOCK` of a generated id (`rfnd_MOCK0000000001`: 14 characters after `rfnd_`).
pub const GENERATED_ID_DIGITS: usize = 10;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS counters (
    name  TEXT PRIMARY KEY NOT NULL,
    value INTEGER NOT NULL CHECK (value >= 0)
) STRICT;
CREATE TABLE IF NOT EXISTS balance (
    id     INTEGER PRIMARY KEY CHECK (id = 1),
    amount INTEGER NOT NULL CHECK (amount >= 0)
) STRICT;
CREATE TABLE IF NOT EXISTS payments (
    id              TEXT PRIMARY KEY NOT NULL,
    amount          INTEGER NOT NULL CHECK (amount > 0),
    amount_refunded INTEGER NOT NULL CHECK (amount_refunded >= 0 AND amount_refunded <= amount),
    order_id        TEXT,
    notes           TEXT NOT NULL,
    created_at      INTEGER NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS orders (
    id          TEXT PRIMARY KEY NOT NULL,
    amount      INTEGER NOT NULL CHECK (amount > 0),
    amount_paid INTEGER NOT NULL CHECK (amount_paid >= 0 AND amount_paid <= amount),
    receipt     TEXT,
    notes       TEXT NOT NULL,
    created_at  INTEGER NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS refunds (
    seq           INTEGER PRIMARY KEY,
    id            TEXT NOT NULL UNIQUE,
    payment_id    TEXT NOT NULL REFERENCES payments (id),
    amount        INTEGER NOT NULL CHECK (amount > 0),
    notes         TEXT NOT NULL,
    receipt       TEXT,
    speed         TEXT NOT NULL CHECK (speed IN ('normal', 'optimum')),
    fee           INTEGER NOT NULL CHECK (fee >= 0),
    tax           INTEGER NOT NULL CHECK (tax >= 0),
    created_at    INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL,
    UNIQUE (payment_id, receipt)
) STRICT;
CREATE TABLE IF NOT EXISTS settlements (
    seq                 INTEGER PRIMARY KEY,
    id                  TEXT NOT NULL UNIQUE,
    amount_requested    INTEGER NOT NULL CHECK (amount_requested > 0),
    amount_settled      INTEGER NOT NULL CHECK (amount_settled >= 0),
    fees                INTEGER NOT NULL CHECK (fees >= 0),
    tax                 INTEGER NOT NULL CHECK (tax >= 0),
    settle_full_balance INTEGER NOT NULL CHECK (settle_full_balance IN (0, 1)),
    description         TEXT,
    notes               TEXT NOT NULL,
    created_at          INTEGER NOT NULL,
    created_at_ms       INTEGER NOT NULL
) STRICT;
";

const COUNTERS: [&str; 5] = [
    "calls.money",
    "calls.list",
    "calls.read",
    "ids.refund",
    "ids.settlement",
];

/// Where the journal lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JournalLocation {
    /// A SQLite file, shared by every mock process given the same path.
    File(PathBuf),
    /// A private in-memory database, lost when the process exits (no `--journal`).
    Memory,
}

/// A journal that cannot be opened; the message says what and where.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// `--journal FILE` names no file and no seed was given to create it.
    #[error("journal {0}: does not exist (pass --seed FILE or --seed demo to create it)")]
    NotFound(PathBuf),
    /// The file exists but was never seeded.
    #[error("journal {0}: has never been seeded (pass --seed FILE or --seed demo)")]
    NotSeeded(String),
    /// The journal was seeded from another seed.
    #[error(
        "journal {0}: was seeded from a different seed; refusing to reseed a non-empty journal"
    )]
    DifferentSeed(String),
    /// No `--journal` and no `--seed`: an in-memory rail with nothing in it.
    #[error("no --journal and no --seed: an in-memory journal needs a seed (e.g. --seed demo)")]
    MemoryNeedsSeed,
    /// SQLite refused.
    #[error("journal {path}: {message}")]
    Sqlite {
        /// The journal's path or `:memory:`.
        path: String,
        /// SQLite's message, with context.
        message: String,
        /// Another connection held a lock (worth retrying while opening).
        busy: bool,
    },
}

fn sqlite_error(path: &str, context: &str, e: &rusqlite::Error) -> JournalError {
    let busy = matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    );
    let message = if context.is_empty() {
        e.to_string()
    } else {
        format!("{context}: {e}")
    };
    JournalError::Sqlite {
        path: path.to_owned(),
        message,
        busy,
    }
}

/// The journal.
pub struct Journal {
    conn: Connection,
    /// Second connection (synchronous=NORMAL) for call counters; `None` for an in-memory journal.
    counters: Option<Connection>,
    label: String,
    /// The seed's currency, fixed once seeded (read once at open).
    currency: String,
}

/// Unix time now, in milliseconds. The mock is the rail, not our money path: it may read the clock.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn server_error(context: &str, e: impl std::fmt::Display) -> RailError {
    tracing::error!("journal: {context}: {e}");
    RailError::server()
}

fn notes_text(notes: &Map<String, Value>) -> String {
    Value::Object(notes.clone()).to_string()
}

fn notes_from(text: &str) -> rusqlite::Result<Map<String, Value>> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(m)) => Ok(m),
        _ => Err(rusqlite::Error::InvalidColumnType(
            0,
            "notes".to_owned(),
            rusqlite::types::Type::Text,
        )),
    }
}

fn order_status(amount: i64, amount_paid: i64) -> &'static str {
    if amount_paid == 0 {
        "created"
    } else if amount_paid < amount {
        "attempted"
    } else {
        "paid"
    }
}

const REFUND_COLUMNS: &str =
    "id, payment_id, amount, notes, receipt, speed, fee, tax, created_at, created_at_ms";
const SETTLEMENT_COLUMNS: &str = "id, amount_requested, amount_settled, fees, tax, \
     settle_full_balance, description, notes, created_at, created_at_ms";

fn refund_row(row: &Row<'_>, currency: &str) -> rusqlite::Result<Refund> {
    let speed: String = row.get(5)?;
    Ok(Refund {
        id: row.get(0)?,
        payment_id: row.get(1)?,
        amount: row.get(2)?,
        currency: currency.to_owned(),
        notes: notes_from(&row.get::<_, String>(3)?)?,
        receipt: row.get(4)?,
        speed_requested: Speed::parse(&speed).unwrap_or(Speed::Normal),
        fee: row.get(6)?,
        tax: row.get(7)?,
        created_at: row.get(8)?,
        created_at_ms: row.get(9)?,
    })
}

fn settlement_row(row: &Row<'_>, currency: &str) -> rusqlite::Result<Settlement> {
    Ok(Settlement {
        id: row.get(0)?,
        amount_requested: row.get(1)?,
        amount_settled: row.get(2)?,
        fees: row.get(3)?,
        tax: row.get(4)?,
        currency: currency.to_owned(),
        settle_full_balance: row.get::<_, i64>(5)? == 1,
        description: row.get(6)?,
        notes: notes_from(&row.get::<_, String>(7)?)?,
        created_at: row.get(8)?,
        created_at_ms: row.get(9)?,
    })
}

fn generated_id(prefix: &str, n: i64) -> String {
    format!("{prefix}{n:0width$}", width = GENERATED_ID_DIGITS)
}

impl Journal {
    /// Open (and, if it is empty and a seed is given, seed) the journal.
    ///
    /// A file that does not exist is created only when `seed` is given. A seeded journal reopened
    /// with a seed must have been seeded from the same one.
    pub fn open(location: &JournalLocation, seed: Option<&Seed>) -> Result<Journal, JournalError> {
        match location {
            JournalLocation::Memory => {
                let seed = seed.ok_or(JournalError::MemoryNeedsSeed)?;
                let label = ":memory:".to_owned();
                let sql = |e: rusqlite::Error| sqlite_error(&label, "", &e);
                let conn = Connection::open_in_memory().map_err(sql)?;
                let mut journal = Journal {
                    conn,
                    counters: None,
                    label: label.clone(),
                    currency: String::new(),
                };
                journal.configure(false)?;
                journal.initialise(Some(seed))?;
                journal.load_currency()?;
                Ok(journal)
            }
            JournalLocation::File(path) => Journal::open_file(path, seed),
        }
    }

    /// Open a file journal, retrying while another process holds a lock: two mocks started at
    /// once on a fresh file race to switch it to WAL and to seed it, and SQLite answers the loser
    /// `database is locked` without waiting on the busy timeout.
    fn open_file(path: &Path, seed: Option<&Seed>) -> Result<Journal, JournalError> {
        let mut attempt = 1;
        loop {
            match Journal::open_file_once(path, seed) {
                Err(JournalError::Sqlite { busy: true, .. }) if attempt < OPEN_ATTEMPTS => {
                    attempt += 1;
                    std::thread::sleep(OPEN_RETRY_DELAY);
                }
                other => return other,
            }
        }
    }

    fn open_file_once(path: &Path, seed: Option<&Seed>) -> Result<Journal, JournalError> {
        let label = path.display().to_string();
        let exists = path.exists();
        if !exists && seed.is_none() {
            return Err(JournalError::NotFound(path.to_owned()));
        }
        let flags = if exists {
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX
        } else {
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX
        };
        let sql = |e: rusqlite::Error| sqlite_error(&label, "", &e);
        let conn = Connection::open_with_flags(path, flags).map_err(sql)?;
        let mut journal = Journal {
            conn,
            counters: None,
            label: label.clone(),
            currency: String::new(),
        };
        journal.configure(true)?;
        journal.initialise(seed)?;
        journal.load_currency()?;
        let counters = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(sql)?;
        counters.busy_timeout(BUSY_TIMEOUT).map_err(sql)?;
        counters
            .pragma_update(None, "synchronous", "NORMAL")
            .map_err(sql)?;
        journal.counters = Some(counters);
        Ok(journal)
    }

    fn sql_error(&self, context: &str, e: rusqlite::Error) -> JournalError {
        sqlite_error(&self.label, context, &e)
    }

    /// Pragmas, checked after setting: WAL (files only), synchronous=FULL, busy timeout, FKs.
    fn configure(&self, wal: bool) -> Result<(), JournalError> {
        let c = &self.conn;
        c.busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| self.sql_error("busy_timeout", e))?;
        if wal {
            let mode: String = c
                .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
                .map_err(|e| self.sql_error("journal_mode", e))?;
            if !mode.eq_ignore_ascii_case("wal") {
                return Err(self.sql_error(
                    "journal_mode",
                    rusqlite::Error::InvalidParameterName(format!("WAL refused, got {mode}")),
                ));
            }
        }
        c.pragma_update(None, "synchronous", "FULL")
            .map_err(|e| self.sql_error("synchronous", e))?;
        let sync: i64 = c
            .pragma_query_value(None, "synchronous", |r| r.get(0))
            .map_err(|e| self.sql_error("synchronous", e))?;
        if sync != 2 {
            return Err(self.sql_error(
                "synchronous",
                rusqlite::Error::InvalidParameterName(format!("FULL (2) refused, got {sync}")),
            ));
        }
        c.pragma_update(None, "foreign_keys", "ON")
            .map_err(|e| self.sql_error("foreign_keys", e))?;
        Ok(())
    }

    /// Create the schema and seed an empty journal, in one IMMEDIATE transaction.
    fn initialise(&mut self, seed: Option<&Seed>) -> Result<(), JournalError> {
        let label = self.label.clone();
        let err = |context: &str, e: rusqlite::Error| sqlite_error(&label, context, &e);
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| err("begin", e))?;
        tx.execute_batch(SCHEMA).map_err(|e| err("schema", e))?;
        let stored: Option<String> = tx
            .query_row("SELECT value FROM meta WHERE key = 'seed'", [], |r| {
                r.get(0)
            })
            .optional()
            .map_err(|e| err("meta", e))?;
        match (stored, seed) {
            (Some(stored), Some(seed)) if stored != seed.canonical() => {
                return Err(JournalError::DifferentSeed(label));
            }
            (Some(_), _) => {
                let version: Option<String> = tx
                    .query_row(
                        "SELECT value FROM meta WHERE key = 'schema_version'",
                        [],
                        |r| r.get(0),
                    )
                    .optional()
                    .map_err(|e| err("meta", e))?;
                if version.as_deref() != Some(SCHEMA_VERSION) {
                    return Err(err(
                        "schema_version",
                        rusqlite::Error::InvalidParameterName(format!(
                            "expected {SCHEMA_VERSION}, got {version:?}"
                        )),
                    ));
                }
            }
            (None, None) => return Err(JournalError::NotSeeded(label)),
            (None, Some(seed)) => {
                insert_seed(&tx, seed).map_err(|e| err("seeding", e))?;
            }
        }
        tx.commit().map_err(|e| err("commit", e))?;
        Ok(())
    }

    /// The path or `:memory:`.
    pub fn label(&self) -> &str {
        &self.label
    }

    fn load_currency(&mut self) -> Result<(), JournalError> {
        self.currency = self
            .conn
            .query_row("SELECT value FROM meta WHERE key = 'currency'", [], |r| {
                r.get(0)
            })
            .map_err(|e| self.sql_error("currency", e))?;
        Ok(())
    }

    fn currency(&self) -> Result<String, RailError> {
        Ok(self.currency.clone())
    }

    /// Count one call of `class`, durably, and return its number (the first call is 1).
    pub fn next_call(&mut self, class: CallClass) -> Result<u64, RailError> {
        let name = match class {
            CallClass::Money => "calls.money",
            CallClass::List => "calls.list",
            CallClass::Read => "calls.read",
        };
        let conn = self.counters.as_mut().unwrap_or(&mut self.conn);
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| server_error("count call", e))?;
        let n: i64 = tx
            .query_row(
                "UPDATE counters SET value = value + 1 WHERE name = ?1 RETURNING value",
                [name],
                |r| r.get(0),
            )
            .map_err(|e| server_error("count call", e))?;
        tx.commit().map_err(|e| server_error("count call", e))?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// A payment by id.
    pub fn payment(&self, id: &str) -> Result<Option<Payment>, RailError> {
        let currency = self.currency()?;
        self.conn
            .query_row(
                "SELECT id, amount, amount_refunded, order_id, notes, created_at
                 FROM payments WHERE id = ?1",
                [id],
                |r| {
                    Ok(Payment {
                        id: r.get(0)?,
                        amount: r.get(1)?,
                        currency: currency.clone(),
                        amount_refunded: r.get(2)?,
                        order_id: r.get(3)?,
                        notes: notes_from(&r.get::<_, String>(4)?)?,
                        created_at: r.get(5)?,
                    })
                },
            )
            .optional()
            .map_err(|e| server_error("payment", e))
    }

    /// An order by id.
    pub fn order(&self, id: &str) -> Result<Option<Order>, RailError> {
        let currency = self.currency()?;
        self.conn
            .query_row(
                "SELECT id, amount, amount_paid, receipt, notes, created_at FROM orders WHERE id = ?1",
                [id],
                |r| {
                    let amount: i64 = r.get(1)?;
                    let amount_paid: i64 = r.get(2)?;
                    Ok(Order {
                        id: r.get(0)?,
                        amount,
                        amount_paid,
                        currency: currency.clone(),
                        receipt: r.get(3)?,
                        status: order_status(amount, amount_paid).to_owned(),
                        notes: notes_from(&r.get::<_, String>(4)?)?,
                        created_at: r.get(5)?,
                    })
                },
            )
            .optional()
            .map_err(|e| server_error("order", e))
    }

    /// A refund by id.
    pub fn refund(&self, id: &str) -> Result<Option<Refund>, RailError> {
        let currency = self.currency()?;
        self.conn
            .query_row(
                &format!("SELECT {REFUND_COLUMNS} FROM refunds WHERE id = ?1"),
                [id],
                |r| refund_row(r, &currency),
            )
            .optional()
            .map_err(|e| server_error("refund", e))
    }

    /// A settlement by id.
    pub fn settlement(&self, id: &str) -> Result<Option<Settlement>, RailError> {
        let currency = self.currency()?;
        self.conn
            .query_row(
                &format!("SELECT {SETTLEMENT_COLUMNS} FROM settlements WHERE id = ?1"),
                [id],
                |r| settlement_row(r, &currency),
            )
            .optional()
            .map_err(|e| server_error("settlement", e))
    }

    /// `(balance, currency)`.
    pub fn balance(&self) -> Result<(i64, String), RailError> {
        let currency = self.currency()?;
        let amount = self
            .conn
            .query_row("SELECT amount FROM balance WHERE id = 1", [], |r| r.get(0))
            .map_err(|e| server_error("balance", e))?;
        Ok((amount, currency))
    }

    /// One page of refunds (of one payment, or all).
    pub fn list_refunds(&self, q: &ListQuery) -> Result<Vec<Refund>, RailError> {
        let currency = self.currency()?;
        let order = match q.order {
            ListOrder::NewestFirst => "created_at DESC, id DESC",
            ListOrder::OldestFirst => "created_at ASC, id ASC",
        };
        let sql = format!(
            "SELECT {REFUND_COLUMNS} FROM refunds
             WHERE (?1 IS NULL OR payment_id = ?1) AND (?2 IS NULL OR created_at >= ?2)
               AND (?3 IS NULL OR created_at <= ?3) AND (?4 IS NULL OR created_at_ms <= ?4)
             ORDER BY {order} LIMIT ?5 OFFSET ?6"
        );
        let mut stmt = self
            .conn
            .prepare(&sql)
            .map_err(|e| server_error("list refunds", e))?;
        let rows = stmt
            .query_map(
                params![
                    q.payment_id,
                    q.from,
                    q.to,
                    q.visible_until_ms,
                    i64::from(q.count),
                    i64::try_from(q.skip).unwrap_or(i64::MAX)
                ],
                |r| refund_row(r, &currency),
            )
            .map_err(|e| server_error("list refunds", e))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| server_error("list refunds", e))
    }

    /// One page of instant settlements.
    pub fn list_settlements(&self, q: &ListQuery) -> Result<Vec<Settlement>, RailError> {
        let currency = self.currency()?;
        let order = match q.order {
            ListOrder::NewestFirst => "created_at DESC, id DESC",
            ListOrder::OldestFirst => "created_at ASC, id ASC",
        };
        let sql = format!(
            "SELECT {SETTLEMENT_COLUMNS} FROM settlements
             WHERE (?1 IS NULL OR created_at >= ?1) AND (?2 IS NULL OR created_at <= ?2)
               AND (?3 IS NULL OR created_at_ms <= ?3)
             ORDER BY {order} LIMIT ?4 OFFSET ?5"
        );
        let mut stmt = self
            .conn
            .prepare(&sql)
            .map_err(|e| server_error("list settlements", e))?;
        let rows = stmt
            .query_map(
                params![
                    q.from,
                    q.to,
                    q.visible_until_ms,
                    i64::from(q.count),
                    i64::try_from(q.skip).unwrap_or(i64::MAX)
                ],
                |r| settlement_row(r, &currency),
            )
            .map_err(|e| server_error("list settlements", e))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| server_error("list settlements", e))
    }

    /// Apply a refund: check it against the payment and commit it, or refuse it (nothing applied).
    pub fn create_refund(
        &mut self,
        req: &RefundRequest,
        rates: &FeeRates,
    ) -> Result<Refund, RailError> {
        let currency = self.currency()?;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| server_error("begin refund", e))?;
        let payment: Option<(i64, i64)> = tx
            .query_row(
                "SELECT amount, amount_refunded FROM payments WHERE id = ?1",
                [&req.payment_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(|e| server_error("refund payment", e))?;
        let Some((amount, refunded)) = payment else {
            return Err(RailError::no_such_id());
        };
        let unrefunded = amount - refunded;
        if unrefunded == 0 {
            return Err(RailError::bad_request(
                "The payment has been fully refunded already",
            ));
        }
        if req.amount > unrefunded {
            return Err(RailError::bad_request(format!(
                "The refund amount provided is greater than the unrefunded amount of {unrefunded} on {}",
                req.payment_id
            )));
        }
        if let Some(receipt) = &req.receipt {
            let taken: Option<String> = tx
                .query_row(
                    "SELECT id FROM refunds WHERE payment_id = ?1 AND receipt = ?2",
                    params![req.payment_id, receipt],
                    |r| r.get(0),
                )
                .optional()
                .map_err(|e| server_error("refund receipt", e))?;
            if let Some(taken) = taken {
                return Err(RailError::bad_request(format!(
                    "The receipt {receipt} has already been used for refund {taken} on payment {}",
                    req.payment_id
                )));
            }
        }
        let n: i64 = tx
            .query_row(
                "UPDATE counters SET value = value + 1 WHERE name = 'ids.refund' RETURNING value",
                [],
                |r| r.get(0),
            )
            .map_err(|e| server_error("refund id", e))?;
        let now = now_ms();
        let (fee, tax) = rates.refund(req.amount, req.speed);
        let refund = Refund {
            id: generated_id(GENERATED_REFUND_PREFIX, n),
            payment_id: req.payment_id.clone(),
            amount: req.amount,
            currency,
            notes: req.notes.clone(),
            receipt: req.receipt.clone(),
            speed_requested: req.speed,
            fee,
            tax,
            created_at: now / 1000,
            created_at_ms: now,
        };
        insert_refund(&tx, &refund).map_err(|e| server_error("insert refund", e))?;
        tx.execute(
            "UPDATE payments SET amount_refunded = amount_refunded + ?2 WHERE id = ?1",
            params![req.payment_id, req.amount],
        )
        .map_err(|e| server_error("update payment", e))?;
        tx.commit().map_err(|e| server_error("commit refund", e))?;
        Ok(refund)
    }

    /// Apply an instant settlement against the balance, or refuse it (nothing applied).
    pub fn create_settlement(
        &mut self,
        req: &SettlementRequest,
        rates: &FeeRates,
    ) -> Result<Settlement, RailError> {
        let currency = self.currency()?;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| server_error("begin settlement", e))?;
        let balance: i64 = tx
            .query_row("SELECT amount FROM balance WHERE id = 1", [], |r| r.get(0))
            .map_err(|e| server_error("balance", e))?;
        let requested = if req.settle_full_balance {
            balance
        } else {
            req.amount
        };
        if requested < SETTLEMENT_AMOUNT_MIN {
            return Err(RailError::bad_request(format!(
                "The settleable balance of {balance} is below the minimum instant settlement of {SETTLEMENT_AMOUNT_MIN}"
            )));
        }
        if requested > balance {
            return Err(RailError::bad_request(format!(
                "The amount requested is greater than the settleable balance of {balance}"
            )));
        }
        let n: i64 = tx
            .query_row(
                "UPDATE counters SET value = value + 1 WHERE name = 'ids.settlement' RETURNING value",
                [],
                |r| r.get(0),
            )
            .map_err(|e| server_error("settlement id", e))?;
        let now = now_ms();
        let (fees, tax) = rates.settlement(requested);
        let settlement = Settlement {
            id: generated_id(GENERATED_SETTLEMENT_PREFIX, n),
            amount_requested: requested,
            amount_settled: requested - fees - tax,
            fees,
            tax,
            currency,
            settle_full_balance: req.settle_full_balance,
            description: req.description.clone(),
            notes: req.notes.clone(),
            created_at: now / 1000,
            created_at_ms: now,
        };
        tx.execute(
            &format!(
                "INSERT INTO settlements ({SETTLEMENT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
            ),
            params![
                settlement.id,
                settlement.amount_requested,
                settlement.amount_settled,
                settlement.fees,
                settlement.tax,
                i64::from(settlement.settle_full_balance),
                settlement.description,
                notes_text(&settlement.notes),
                settlement.created_at,
                settlement.created_at_ms
            ],
        )
        .map_err(|e| server_error("insert settlement", e))?;
        tx.execute(
            "UPDATE balance SET amount = amount - ?1 WHERE id = 1",
            [requested],
        )
        .map_err(|e| server_error("update balance", e))?;
        tx.commit()
            .map_err(|e| server_error("commit settlement", e))?;
        Ok(settlement)
    }

    /// The refund committed most recently before `id` (the `dup_response` fault's answer).
    pub fn refund_before(&self, id: &str) -> Result<Option<Refund>, RailError> {
        let currency = self.currency()?;
        self.conn
            .query_row(
                &format!(
                    "SELECT {REFUND_COLUMNS} FROM refunds
                     WHERE seq < (SELECT seq FROM refunds WHERE id = ?1) ORDER BY seq DESC LIMIT 1"
                ),
                [id],
                |r| refund_row(r, &currency),
            )
            .optional()
            .map_err(|e| server_error("earlier refund", e))
    }

    /// The settlement committed most recently before `id`.
    pub fn settlement_before(&self, id: &str) -> Result<Option<Settlement>, RailError> {
        let currency = self.currency()?;
        self.conn
            .query_row(
                &format!(
                    "SELECT {SETTLEMENT_COLUMNS} FROM settlements
                     WHERE seq < (SELECT seq FROM settlements WHERE id = ?1) ORDER BY seq DESC LIMIT 1"
                ),
                [id],
                |r| settlement_row(r, &currency),
            )
            .optional()
            .map_err(|e| server_error("earlier settlement", e))
    }

    /// Everything in the journal as JSON, for `inspect`: entities as the API returns them, in the
    /// order they were committed, plus the balance and the call counters.
    pub fn dump(&self) -> Result<Value, RailError> {
        // One read transaction: a consistent snapshot even while other processes write.
        let snapshot = self
            .conn
            .unchecked_transaction()
            .map_err(|e| server_error("dump", e))?;
        let (balance, currency) = self.balance()?;
        let mut payments = Vec::new();
        {
            let mut stmt = self
                .conn
                .prepare("SELECT id FROM payments ORDER BY rowid")
                .map_err(|e| server_error("dump", e))?;
            let ids = stmt
                .query_map([], |r| r.get::<_, String>(0))
                .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
                .map_err(|e| server_error("dump", e))?;
            for id in ids {
                if let Some(p) = self.payment(&id)? {
                    payments.push(p.to_json());
                }
            }
        }
        let mut orders = Vec::new();
        {
            let mut stmt = self
                .conn
                .prepare("SELECT id FROM orders ORDER BY rowid")
                .map_err(|e| server_error("dump", e))?;
            let ids = stmt
                .query_map([], |r| r.get::<_, String>(0))
                .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
                .map_err(|e| server_error("dump", e))?;
            for id in ids {
                if let Some(o) = self.order(&id)? {
                    orders.push(o.to_json());
                }
            }
        }
        let refunds: Vec<Value> = {
            let mut stmt = self
                .conn
                .prepare(&format!(
                    "SELECT {REFUND_COLUMNS} FROM refunds ORDER BY seq"
                ))
                .map_err(|e| server_error("dump", e))?;
            stmt.query_map([], |r| refund_row(r, &currency))
                .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
                .map_err(|e| server_error("dump", e))?
                .iter()
                .map(Refund::to_json)
                .collect()
        };
        let settlements: Vec<Value> = {
            let mut stmt = self
                .conn
                .prepare(&format!(
                    "SELECT {SETTLEMENT_COLUMNS} FROM settlements ORDER BY seq"
                ))
                .map_err(|e| server_error("dump", e))?;
            stmt.query_map([], |r| settlement_row(r, &currency))
                .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
                .map_err(|e| server_error("dump", e))?
                .iter()
                .map(Settlement::to_json)
                .collect()
        };
        let mut counters = Map::new();
        {
            let mut stmt = self
                .conn
                .prepare("SELECT name, value FROM counters WHERE name LIKE 'calls.%' ORDER BY name")
                .map_err(|e| server_error("dump", e))?;
            let rows = stmt
                .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
                .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
                .map_err(|e| server_error("dump", e))?;
            for (name, value) in rows {
                let key = format!("{}_calls", name.trim_start_matches("calls."));
                counters.insert(key, json!(value));
            }
        }
        snapshot.finish().map_err(|e| server_error("dump", e))?;
        Ok(json!({
            "journal": self.label,
            "currency": currency,
            "balance": balance,
            "call_counters": counters,
            "payments": payments,
            "orders": orders,
            "refunds": refunds,
            "settlements": settlements,
        }))
    }
}

fn insert_refund(tx: &rusqlite::Transaction<'_>, r: &Refund) -> rusqlite::Result<()> {
    tx.execute(
        &format!(
            "INSERT INTO refunds ({REFUND_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
        ),
        params![
            r.id,
            r.payment_id,
            r.amount,
            notes_text(&r.notes),
            r.receipt,
            r.speed_requested.as_str(),
            r.fee,
            r.tax,
            r.created_at,
            r.created_at_ms
        ],
    )?;
    Ok(())
}

fn insert_seed(tx: &rusqlite::Transaction<'_>, seed: &Seed) -> rusqlite::Result<()> {
    for (key, value) in [
        ("schema_version", SCHEMA_VERSION.to_owned()),
        ("currency", seed.currency.clone()),
        ("seed", seed.canonical()),
    ] {
        tx.execute(
            "INSERT INTO meta (key, value) VALUES (?1, ?2)",
            params![key, value],
        )?;
    }
    for name in COUNTERS {
        tx.execute("INSERT INTO counters (name, value) VALUES (?1, 0)", [name])?;
    }
    tx.execute(
        "INSERT INTO balance (id, amount) VALUES (1, ?1)",
        [seed.balance],
    )?;
    for o in &seed.orders {
        tx.execute(
            "INSERT INTO orders (id, amount, amount_paid, receipt, notes, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                o.id,
                o.amount,
                o.amount_paid,
                o.receipt,
                notes_text(&o.notes),
                o.created_at.unwrap_or(SEED_CREATED_AT_DEFAULT)
            ],
        )?;
    }
    for p in &seed.payments {
        let refunded: i64 = seed
            .refunds
            .iter()
            .filter(|r| r.payment_id == p.id)
            .map(|r| r.amount)
            .sum();
        tx.execute(
            "INSERT INTO payments (id, amount, amount_refunded, order_id, notes, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                p.id,
                p.amount,
                refunded,
                p.order_id,
                notes_text(&p.notes),
                p.created_at.unwrap_or(SEED_CREATED_AT_DEFAULT)
            ],
        )?;
    }
    for r in &seed.refunds {
        let created_at = r.created_at.unwrap_or(SEED_CREATED_AT_DEFAULT);
        let refund = Refund {
            id: r.id.clone(),
            payment_id: r.payment_id.clone(),
            amount: r.amount,
            currency: seed.currency.clone(),
            notes: r.notes.clone(),
            receipt: r.receipt.clone(),
            speed_requested: r
                .speed
                .as_deref()
                .and_then(Speed::parse)
                .unwrap_or(Speed::Normal),
            fee: r.fee,
            tax: r.tax,
            created_at,
            created_at_ms: created_at.saturating_mul(1000),
        };
        insert_refund(tx, &refund)?;
    }
    // In the order given: `seq` is commit order, which `dup_response` replays from.
    for st in &seed.settlements {
        let created_at = st.created_at.unwrap_or(SEED_CREATED_AT_DEFAULT);
        tx.execute(
            &format!(
                "INSERT INTO settlements ({SETTLEMENT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
            ),
            params![
                st.id,
                st.amount_requested,
                st.amount_requested - st.fees - st.tax,
                st.fees,
                st.tax,
                i64::from(st.settle_full_balance),
                st.description,
                notes_text(&st.notes),
                created_at,
                created_at.saturating_mul(1000)
            ],
        )?;
    }
    Ok(())
}
