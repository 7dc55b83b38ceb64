//! The write-ahead ledger: one SQLite file, opened only in a configuration that keeps its
//! promises (WAL, `synchronous=FULL`, foreign keys, STRICT tables), migrated forward only.
//!
//! **One way to change state.** [`Ledger::apply`] (and, inside a transaction the engine already
//! holds, [`apply_locked`]) reads the intent's core, asks [`interlock_machine::step`] for the
//! next one, and writes the row, the attempt row where the event concerns one, and exactly one
//! audit record, in one `IMMEDIATE` transaction. Nothing else in this crate writes `state`.
//!
//! **Group commit.** Every write of this process runs in a savepoint of one open batch on the
//! writing connection, and the batch's one commit makes them all durable before any of their
//! callers is answered ([`writer`], ADR 0009). Reads go through a second connection: they see
//! committed batches only.
//!
//! **Every SQL statement of the engine is in this module**, each returning typed rows: here the
//! schema, the migrations and the writes; [`rows`] the driver's reads; [`usage`] what G2 and G3
//! count; [`audit`] the hash chain and its verifier; [`inspect`] one intent in full for
//! operators. The runner (`executor`, `reconcile`, `recovery`) holds none.

pub mod audit;
pub mod checkpoint;
pub mod clock;
pub mod inspect;
mod postgres;
pub use postgres::{
    LEDGER_LOCK_KEY, PG_CONNECT_TIMEOUT_MS, PG_IDLE_IN_TRANSACTION_MS, PG_LOCK_TIMEOUT_MS,
    PG_SCHEMA_VERSION, PG_STATEMENT_TIMEOUT_MS, PG_STATEMENTS_MAX,
};
mod rows;
pub(crate) mod sql;
pub mod usage;
mod writer;

use interlock_driver::gates::{Ladder, Usage};
pub use interlock_driver::plan::{
    Applied, Change, Commit, Finding, IntentKey, LeaseChange, NewIntent, Refusal,
};
use interlock_driver::plan::{Decide, Decided, Expect, IntentView, Judgement};
use interlock_group_commit::GroupCommit;
use interlock_machine::{Effect, EntityRef, Event, EventKind, Illegal, IntentCore, State, step};
use interlock_spec::ids::{MerchantId, Sik};
use interlock_spec::mandate::Mandate;
use rusqlite::{Connection, OpenFlags};
use serde_json::json;
use sql::{DbError, DbResult, Optional, Sql, params};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use writer::{SqliteWriter, Tx, Writer};

/// Migrations, in order; `user_version` is how many have run. Forward only: a ledger written by
/// a newer Interlock is refused, never rewritten.
const MIGRATIONS: &[&str] = &[
    include_str!("../../schema/0001_ledger.sql"),
    include_str!("../../schema/0002_kinds.sql"),
    include_str!("../../schema/0003_clock.sql"),
    include_str!("../../schema/0004_terms.sql"),
];
/// The schema version a ledger this build opens is migrated to: how many migrations exist.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;
/// The free space the ledger's filesystem must have for Interlock to start (1 MiB: room for
/// a checkpoint's worth of WAL). Below it, `open` refuses with the figure.
pub const LEDGER_FREE_BYTES_MIN: u64 = 1024 * 1024;
/// How long a connection waits for another process's write lock before giving up.
pub const BUSY_TIMEOUT_MS: u64 = 5_000;
/// Prepared statements kept per connection: more than the hot path uses (about two dozen), so
/// none is parsed twice. rusqlite's default of 16 made every proposal re-parse half of them.
pub const STATEMENT_CACHE_CAPACITY: usize = 64;
/// SQLite's page cache per connection, in KiB (written as a negative `cache_size`).
pub const CACHE_KIB: i64 = -16 * 1024;
/// How many times the switch to `journal_mode=WAL` is tried while another process holds the
/// fresh file's lock (SQLite does not wait on its busy handler for that switch).
pub const WAL_SWITCH_ATTEMPTS_MAX: u32 = 100;
/// The wait between two tries of the switch: with the bound above, 2 s in all.
pub const WAL_SWITCH_RETRY_DELAY: Duration = Duration::from_millis(20);
/// How many times a batch's `BEGIN IMMEDIATE` or `COMMIT` is tried while another process keeps
/// the database busy past [`BUSY_TIMEOUT_MS`].
pub const APPLY_RETRIES_MAX: u32 = 8;
/// How many times [`Ledger::pragmas`] looks for the writing connection between two batches
/// (1 ms apart: a batch lasts about one fsync) before it says the ledger is busy.
pub const PRAGMAS_TRIES_MAX: u32 = 1_000;

/// Why the ledger refused to open or to write.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// SQLite said no.
    #[error("ledger {path}: {source}")]
    Sqlite {
        /// The ledger file.
        path: String,
        /// SQLite's error.
        source: rusqlite::Error,
    },
    /// PostgreSQL said no.
    #[error("ledger {target}: {message}")]
    Postgres {
        /// The server and database, without a password.
        target: String,
        /// PostgreSQL's SQLSTATE, when the server answered.
        code: Option<String>,
        /// The server's message, or why the connection failed.
        message: String,
    },
    /// A row did not read as its columns' types, or a value could not be bound.
    #[error("ledger {target}: {problem}")]
    Row {
        /// The ledger.
        target: String,
        /// What is wrong.
        problem: String,
    },
    /// A pragma did not read back as set, or the database is not a durable file.
    #[error("ledger {path}: {problem}")]
    Unsafe {
        /// The ledger file.
        path: String,
        /// What is wrong.
        problem: String,
    },
    /// The audit chain is broken.
    #[error("ledger {path}: audit chain broken at seq {}: {}", broken.seq, broken.problem)]
    ChainBroken {
        /// The ledger file.
        path: String,
        /// Where and how.
        broken: audit::ChainBreak,
    },
    /// A row holds something the schema's CHECKs should have refused (the file was edited).
    #[error("ledger row for {key} is corrupt: {problem}")]
    Corrupt {
        /// The intent.
        key: String,
        /// What is wrong.
        problem: String,
    },
    /// A transaction batched with this one (group commit) panicked: the batch was rolled back,
    /// or, if its commit panicked, whether it was written is not known. Either way the caller
    /// is answered as not written, and boot recovery settles what a commit did write.
    #[error(
        "ledger {path}: a transaction of the same batch panicked; this one is answered as not written (if the commit itself panicked, recovery finds what it wrote)"
    )]
    Abandoned {
        /// The ledger file.
        path: String,
    },
    /// An earlier write failed with an I/O error: nothing more is written through this
    /// connection (ADR 0004, "after a failed fsync").
    #[error(
        "ledger {path}: an earlier write failed with an I/O error ({why}); this process writes nothing more and must restart into recovery"
    )]
    Poisoned {
        /// The ledger file.
        path: String,
        /// The I/O error that poisoned it.
        why: String,
    },
}

/// What a ledger error says about the disk under it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskFault {
    /// The filesystem is full (or the file reached its size limit): the write was not made,
    /// SQLite rolled it back, and the same write can succeed once there is space.
    Full,
    /// A write or an fsync failed (or the filesystem went read-only): what is durable is not
    /// known, so the process stops writing and restarts into recovery.
    Io,
}

impl LedgerError {
    /// The disk fault this error is, if it is one.
    pub fn disk_fault(&self) -> Option<DiskFault> {
        use rusqlite::ErrorCode::{DiskFull, ReadOnly, SystemIoFailure};
        match self {
            LedgerError::Poisoned { .. } => Some(DiskFault::Io),
            LedgerError::Sqlite { source, .. } => match source.sqlite_error_code()? {
                DiskFull => Some(DiskFault::Full),
                SystemIoFailure | ReadOnly => Some(DiskFault::Io),
                _ => None,
            },
            _ => None,
        }
    }
}

impl ApplyError {
    /// The disk fault under this refusal, if it is one.
    pub fn disk_fault(&self) -> Option<DiskFault> {
        match self {
            ApplyError::Ledger(error) => error.disk_fault(),
            _ => None,
        }
    }
}

/// Why a transition was not applied.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The machine refused the event in the intent's current state.
    #[error("{0}")]
    Illegal(Illegal),
    /// The intent does not exist.
    #[error("no intent {0}")]
    NoSuchIntent(String),
    /// A lease rule refused the write (held by another, or not yet expired).
    #[error("{0}")]
    Lease(String),
    /// The write could not be made: another process kept the write lock through
    /// [`APPLY_RETRIES_MAX`] tries, or the row was not the one read in the same transaction
    /// (never expected: the compare-and-set stays as a check).
    #[error("{0} could not be written (contended); gave up")]
    Contended(String),
    /// The ledger failed.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// The ledger file, its writing connection (every write of this process's callers goes through
/// it, in batches: group commit) and its reading connection.
pub struct Ledger {
    writer: GroupCommit<Writer>,
    /// Reads see only committed batches: a transition waiting in an open batch is not yet
    /// durable, and nothing read from it may reach an agent or the driver.
    reader: Mutex<Reader>,
    /// The file, or for PostgreSQL the server and database without a password.
    path: PathBuf,
    /// Copies the WAL into the database off the money path; stopped when the ledger drops.
    /// None on a file this process can only read.
    _checkpointer: Option<checkpoint::Checkpointer>,
}

/// The ledger files of this process that a write failed on with an I/O error, and why. After a
/// failed fsync the kernel may have dropped the dirty pages it could not write and report the
/// next fsync clean (PostgreSQL's "fsyncgate", 2018), and SQLite's cache may hold pages the
/// disk does not: retrying would build on what may not be there, so every later write to that
/// file by any connection of the process (an HTTP proxy opens one per agent) is refused.
static POISONED: Mutex<Vec<(PathBuf, String)>> = Mutex::new(Vec::new());

fn poisoned_lock() -> MutexGuard<'static, Vec<(PathBuf, String)>> {
    POISONED.lock().unwrap_or_else(|e| e.into_inner())
}

/// Marks `file` poisoned with `why`, unless it already is (the first reason stands).
pub(crate) fn mark_poisoned(file: &Path, why: String) {
    let mut poisoned = poisoned_lock();
    if !poisoned.iter().any(|(path, _)| path == file) {
        poisoned.push((file.to_owned(), why));
    }
}

/// Why `file` takes no more writes from this process, if it is poisoned.
pub(crate) fn poisoned_why(file: &Path) -> Option<String> {
    poisoned_lock()
        .iter()
        .find(|(path, _)| path == file)
        .map(|(_, why)| why.clone())
}

impl Ledger {
    /// Opens (creating if absent) the ledger at `path`, checks every pragma, migrates, and
    /// verifies the audit chain. Refuses an in-memory database: it would lose every promise at
    /// the first crash.
    pub fn open(path: &Path) -> Result<Ledger, LedgerError> {
        let shown = path.display().to_string();
        if shown.is_empty() || shown == ":memory:" || shown.starts_with("file::memory:") {
            return Err(unsafe_ledger(
                &shown,
                "an in-memory database is not a ledger",
            ));
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).map_err(|e| sqlite(&shown, e))?;
        configure(&conn, &shown)?;
        migrate(&conn, &shown)?;
        let reader = Connection::open_with_flags(path, flags).map_err(|e| sqlite(&shown, e))?;
        configure(&reader, &shown)?;
        let ledger = Ledger {
            writer: GroupCommit::new(Writer::Sqlite(SqliteWriter::new(conn, path.to_owned()))),
            reader: Mutex::new(Reader::Sqlite(reader)),
            path: path.to_owned(),
            _checkpointer: checkpoint::Checkpointer::start(path)?,
        };
        ledger.verified()
    }

    /// Opens the ledger `db` names: a PostgreSQL connection string (`postgres://…` or
    /// `postgresql://…`) selects PostgreSQL ([`Ledger::open_postgres`]); anything else is a
    /// SQLite file ([`Ledger::open`]).
    pub fn open_target(db: &str) -> Result<Ledger, LedgerError> {
        if is_postgres_url(db) {
            Ledger::open_postgres(db)
        } else {
            Ledger::open(Path::new(db))
        }
    }

    /// Opens the PostgreSQL ledger at `url`: checks the server's durability settings, migrates
    /// under the ledger's lock and verifies the audit chain (`postgres.rs`, ADR 0010).
    pub fn open_postgres(url: &str) -> Result<Ledger, LedgerError> {
        let opened = postgres::open(url)?;
        let ledger = Ledger {
            path: PathBuf::from(opened.target.clone()),
            writer: GroupCommit::new(Writer::Postgres(opened.writer)),
            reader: Mutex::new(Reader::Postgres(opened.reader)),
            _checkpointer: None,
        };
        ledger.verified()
    }

    /// Which backend this ledger is on.
    pub fn backend(&self) -> Backend {
        match &*self.conn() {
            Reader::Sqlite(_) => Backend::Sqlite,
            Reader::Postgres(_) => Backend::Postgres,
        }
    }

    fn verified(self) -> Result<Ledger, LedgerError> {
        let shown = self.path.display().to_string();
        let ledger = self;
        ledger.verify_chain().map_err(|broken| match broken {
            VerifyError::Broken(broken) => LedgerError::ChainBroken {
                path: shown.clone(),
                broken,
            },
            VerifyError::Ledger(error) => error,
        })?;
        Ok(ledger)
    }

    /// The durability settings as SQLite reads them back on the writing connection.
    pub fn pragmas(&self) -> Result<Pragmas, LedgerError> {
        let read = |conn: &Connection| -> rusqlite::Result<Pragmas> {
            let text =
                |name: &str| conn.pragma_query_value(None, name, |row| row.get::<_, String>(0));
            let number =
                |name: &str| conn.pragma_query_value(None, name, |row| row.get::<_, i64>(0));
            Ok(Pragmas {
                journal_mode: text("journal_mode")?,
                synchronous: number("synchronous")?,
                foreign_keys: number("foreign_keys")?,
                busy_timeout_ms: number("busy_timeout")?,
                user_version: number("user_version")?,
                wal_autocheckpoint_pages: number("wal_autocheckpoint")?,
            })
        };
        // On the writing connection between batches (a batch would open a write transaction,
        // which a read-only file refuses); at most PRAGMAS_TRIES_MAX tries, 1 ms apart, while
        // batches come and go.
        for _ in 0..PRAGMAS_TRIES_MAX {
            let between = self.writer.between_batches(|writer: &Writer| match writer {
                Writer::Sqlite(writer) => Ok(writer.between_batches().map(read)),
                Writer::Postgres(_) => Err(()),
            });
            match between {
                Some(Err(())) => {
                    return Err(unsafe_ledger(
                        &self.path.display().to_string(),
                        "a PostgreSQL ledger has no pragmas (its settings are checked when it opens)",
                    ));
                }
                Some(Ok(Some(pragmas))) => {
                    return pragmas.map_err(|e| sqlite(&self.path.display().to_string(), e));
                }
                _ => {}
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        // Busy, not unsafe: another caller kept the writing connection inside batches.
        let busy = rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY);
        Err(sqlite(
            &self.path.display().to_string(),
            rusqlite::Error::SqliteFailure(
                busy,
                Some(format!(
                    "the writing connection stayed inside a batch through {PRAGMAS_TRIES_MAX} tries 1 ms apart; its pragmas were not read (try again)"
                )),
            ),
        ))
    }

    /// The ledger file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn err(&self, error: DbError) -> LedgerError {
        db_error(&self.path.display().to_string(), error)
    }

    /// The reading connection: it sees committed batches only.
    pub(crate) fn conn(&self) -> MutexGuard<'_, Reader> {
        // A panic while reading leaves nothing half done (a read writes nothing), so a poisoned
        // lock is safe to take over.
        self.reader
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `f` in the open batch of this process's writes (group commit, `writer.rs`) and
    /// answers once that batch is committed: `f`'s result, or the batch's failure. A write to a
    /// file an I/O error poisoned is refused; one that hits an I/O error poisons it, before any
    /// later batch can begin.
    pub(crate) fn write<T>(
        &self,
        f: impl FnOnce(&Tx<'_>) -> Result<T, ApplyError>,
    ) -> Result<T, ApplyError> {
        // The caller may wait for other callers' jobs and fsync: on a runtime's worker that
        // would stall every task queued behind it, so the worker's other tasks move to another
        // thread first. That hand-over costs a thread switch, so a caller that finds no other
        // caller inside (one agent at a time) runs inline and blocks only on its own fsync,
        // as every write did before group commit.
        let write = || {
            self.writer.run(|writer: &mut Writer| {
                let written = f(&writer.tx());
                if let Err(error) = &written {
                    writer.job_failed(error);
                    if error.disk_fault() == Some(DiskFault::Io) {
                        mark_poisoned(&self.path, error.to_string());
                    }
                }
                written
            })
        };
        if self.writer.is_idle() {
            write()
        } else {
            blocking(write)
        }
    }

    /// Write transactions (batches) committed through this handle since it was opened: each
    /// that wrote is one fsync of the WAL under `synchronous=FULL`, so a test can hold the money
    /// path to its count of commits. One that found nothing to write (a replay's) counts too;
    /// SQLite syncs nothing for it.
    pub fn commits(&self) -> u64 {
        self.writer.batches()
    }

    /// Why this ledger refuses every write, if an I/O error poisoned its file in this process.
    pub fn poisoned(&self) -> Option<String> {
        poisoned_why(&self.path)
    }

    /// Applies `event` to the intent `key`: the one way the engine changes state. The row is
    /// read, stepped and written inside one `IMMEDIATE` transaction (a batch's savepoint), so
    /// no other writer moves it in between.
    pub fn apply(
        &self,
        key: &IntentKey,
        event: &Event,
        now_ms: u64,
        change: &Change,
    ) -> Result<Applied, ApplyError> {
        self.write(|tx| {
            let seen = read_row(tx, key)
                .map_err(|e| self.err(e))?
                .ok_or_else(|| ApplyError::NoSuchIntent(describe(key)))?;
            apply_locked(tx, key, &seen, event, now_ms, change)?
                .ok_or_else(|| ApplyError::Contended(format!("intent {}", describe(key))))
        })
    }
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// Runs `f`, which may block on other callers' jobs and fsync. On a multi-threaded tokio
/// runtime's worker the runtime is told first (`block_in_place`: its queued tasks move to
/// another thread); anywhere else (a plain thread, a blocking-pool thread, a single-threaded
/// runtime, which cannot lend its thread) `f` just runs. Not for a `LocalSet` on a
/// multi-threaded runtime, where tokio refuses `block_in_place` with a panic (ADR 0009, 5).
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

/// What [`Ledger::pragmas`] reads back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pragmas {
    /// `wal`.
    pub journal_mode: String,
    /// 2 (`FULL`).
    pub synchronous: i64,
    /// 1 (on).
    pub foreign_keys: i64,
    /// [`BUSY_TIMEOUT_MS`].
    pub busy_timeout_ms: i64,
    /// How many migrations have run.
    pub user_version: i64,
    /// [`checkpoint::WAL_AUTOCHECKPOINT_BACKSTOP_PAGES`]: a commit checkpoints only as a backstop.
    pub wal_autocheckpoint_pages: i64,
}

/// The parts of an intent row that a transition reads and compares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowCore {
    /// The machine's view of the row.
    pub core: IntentCore,
    /// Who holds the lease.
    pub lease_owner: Option<String>,
    /// When it lapses.
    pub lease_expires_at: Option<u64>,
}

/// Reads the core and lease of `key`.
pub(crate) fn read_row(conn: &dyn Sql, key: &IntentKey) -> DbResult<Option<RowCore>> {
    conn.row(
        "SELECT state, attempt_seq, reconcile_inconclusive, rail_entity_id, lease_owner,
                lease_expires_at
         FROM intents WHERE merchant_id = ?1 AND sik = ?2",
        params![key.merchant_id.as_str(), key.sik.as_str()],
        |row| {
            let state: String = row.get(0)?;
            let state = State::parse(&state).ok_or_else(|| DbError::Convert {
                index: 0,
                problem: format!("unknown state {state:?}"),
            })?;
            Ok(RowCore {
                core: IntentCore {
                    sik: key.sik.clone(),
                    state,
                    attempt_seq: row.get(1)?,
                    reconcile_inconclusive: row.get(2)?,
                    entity_id: row.get(3)?,
                },
                lease_owner: row.get(4)?,
                lease_expires_at: row.get(5)?,
            })
        },
    )
    .optional()
}

/// Steps `seen` (the row as read inside `tx`) with `event` and writes the result: the row by
/// compare-and-set, the attempt row, the finding, and one audit record. `Ok(None)` means the
/// compare failed: the row is no longer `seen`.
pub(crate) fn apply_locked(
    tx: &Tx<'_>,
    key: &IntentKey,
    seen: &RowCore,
    event: &Event,
    now_ms: u64,
    change: &Change,
) -> Result<Option<Applied>, ApplyError> {
    let stepped = step(&seen.core, event).map_err(ApplyError::Illegal)?;
    let (lease_owner, lease_expires_at) = lease_after(seen, &change.lease, now_ms)?;
    let to = stepped.next;
    // A lease is held exactly while the intent is doing rail work.
    let (lease_owner, lease_expires_at) =
        if matches!(to.state, State::InFlight | State::Reconciling) {
            match (lease_owner, lease_expires_at) {
                (Some(owner), Some(until)) => (Some(owner), Some(until)),
                _ => return Err(ApplyError::Lease(format!("{} needs a lease", event.kind()))),
            }
        } else {
            (None, None)
        };
    let not_before = match stepped.effect {
        Effect::ScheduleReconcile { delay_ms } => Some(now_ms.saturating_add(delay_ms)),
        _ => None,
    };
    let seq = audit::next_seq(tx).map_err(|e| ledger_err(tx, e))?;
    let (reason_code, reason) = change.reason.clone().unzip();
    let updated = tx
        .exec(
            "UPDATE intents SET state = ?3, attempt_seq = ?4, reconcile_inconclusive = ?5,
                rail_entity_id = ?6, lease_owner = ?7, lease_expires_at = ?8,
                reconcile_not_before = ?9, reason_code = coalesce(?10, reason_code),
                reason = coalesce(?11, reason), audit_seq = ?12,
                updated_at = CASE WHEN updated_at > ?13 THEN updated_at ELSE ?13 END, moved_minor = coalesce(?20, moved_minor),
                counted_at = CASE
                    WHEN ?3 IN (SELECT state FROM counted_states)
                        AND (?14 NOT IN (SELECT state FROM counted_states) OR ?3 = ?19)
                    THEN ?13 ELSE counted_at END
             WHERE merchant_id = ?1 AND sik = ?2 AND state = ?14 AND attempt_seq = ?15
                AND reconcile_inconclusive = ?16 AND lease_owner IS NOT DISTINCT FROM ?17
                AND lease_expires_at IS NOT DISTINCT FROM ?18",
            params![
                key.merchant_id.as_str(),
                key.sik.as_str(),
                to.state.as_str(),
                to.attempt_seq,
                to.reconcile_inconclusive,
                to.entity_id,
                lease_owner,
                lease_expires_at,
                not_before,
                reason_code,
                reason,
                seq,
                now_ms,
                seen.core.state.as_str(),
                seen.core.attempt_seq,
                seen.core.reconcile_inconclusive,
                seen.lease_owner,
                seen.lease_expires_at,
                // (Re)authorisation restarts the windows' clock: see `counted_at` in the schema.
                State::Authorized.as_str(),
                change.moved_minor,
            ],
        )
        .map_err(|e| ledger_err(tx, e))?;
    if updated == 0 {
        return Ok(None);
    }
    assert_eq!(updated, 1, "a primary key matched two rows");
    write_attempt(tx, key, event, &to, now_ms, change).map_err(|e| ledger_err(tx, e))?;
    if let Some(finding) = &change.finding {
        write_finding(tx, key, finding, now_ms).map_err(|e| ledger_err(tx, e))?;
    }
    let record = interlock_machine::Record::Transition {
        seq,
        from: seen.core.clone(),
        event: event.clone(),
        to: to.clone(),
        effect: stepped.effect,
    };
    let payload = json!({
        "merchant_id": key.merchant_id.as_str(),
        "record": record,
        "lease_owner": lease_owner,
        "detail": change.detail,
        "reason_code": change.reason.as_ref().map(|(code, _)| code),
        "reason": change.reason.as_ref().map(|(_, reason)| reason),
        "moved_minor": change.moved_minor,
        "context": change.context,
    });
    audit::append(tx, seq, now_ms, event.kind().as_str(), &payload)
        .map_err(|e| ledger_err(tx, e))?;
    Ok(Some(Applied {
        from: seen.core.clone(),
        to,
        effect: stepped.effect,
        seq,
    }))
}

fn lease_after(
    seen: &RowCore,
    lease: &LeaseChange,
    now_ms: u64,
) -> Result<(Option<String>, Option<u64>), ApplyError> {
    match lease {
        LeaseChange::Claim { owner, expires_at } => {
            // A claim that ran out before its commit (its process stalled in between) is
            // refused like a lease held by another: nothing may be sent under it.
            if *expires_at <= now_ms {
                return Err(ApplyError::Lease(format!(
                    "the claim by {owner} ran out at {expires_at}, before its commit at {now_ms}"
                )));
            }
            if let (Some(holder), Some(until)) = (&seen.lease_owner, seen.lease_expires_at)
                && holder != owner
                && until > now_ms
            {
                return Err(ApplyError::Lease(format!(
                    "lease held by {holder} until {until}"
                )));
            }
            Ok((Some(owner.clone()), Some(*expires_at)))
        }
        LeaseChange::Expire => match seen.lease_expires_at {
            Some(until) if until > now_ms => Err(ApplyError::Lease(format!(
                "lease of {} runs until {until}; it is {now_ms}",
                seen.lease_owner.as_deref().unwrap_or("?")
            ))),
            _ => Ok((None, None)),
        },
        LeaseChange::Release => Ok((None, None)),
    }
}

fn write_attempt(
    tx: &Tx<'_>,
    key: &IntentKey,
    event: &Event,
    to: &IntentCore,
    now_ms: u64,
    change: &Change,
) -> DbResult<()> {
    let outcome = match event {
        Event::AttemptStarted => {
            tx.exec(
                "INSERT INTO intent_attempts (merchant_id, sik, attempt_seq, started_at)
                 VALUES (?1, ?2, ?3, ?4)",
                params![
                    key.merchant_id.as_str(),
                    key.sik.as_str(),
                    to.attempt_seq,
                    now_ms
                ],
            )?;
            return Ok(());
        }
        Event::RailApplied { .. } => "APPLIED",
        Event::RailRejected { .. } => "REJECTED",
        Event::RailAmbiguous { .. } => "AMBIGUOUS",
        // A crash, a reconcile pass or an operator settles the attempt whose call left no
        // answer: close it as ambiguous the first time the intent moves on without one.
        Event::LeaseExpired if to.state == State::Unknown => "AMBIGUOUS",
        _ => return Ok(()),
    };
    let entity = match event {
        Event::RailApplied { entity, .. } => Some(entity.id.as_str()),
        _ => None,
    };
    tx.exec(
        "UPDATE intent_attempts SET finished_at = CASE WHEN started_at > ?4 THEN started_at ELSE ?4 END,
            outcome = ?5,
            rail_entity_id = ?6, fee_minor = ?7, tax_minor = ?8, detail = ?9
         WHERE merchant_id = ?1 AND sik = ?2 AND attempt_seq = ?3 AND outcome IS NULL",
        params![
            key.merchant_id.as_str(),
            key.sik.as_str(),
            to.attempt_seq,
            now_ms,
            outcome,
            entity,
            change.fee_minor,
            change.tax_minor,
            change.detail,
        ],
    )?;
    Ok(())
}

fn write_finding(tx: &Tx<'_>, key: &IntentKey, finding: &Finding, now_ms: u64) -> DbResult<()> {
    tx.exec(
        "INSERT INTO recon_findings (merchant_id, sik, attempt_seq, outcome, pages_scanned,
            pagination_exhausted, lag_elapsed, matched_entity_id, queried_at, detail_json)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        params![
            key.merchant_id.as_str(),
            key.sik.as_str(),
            finding.attempt_seq,
            finding.outcome,
            finding.pages_scanned,
            finding.pagination_exhausted,
            finding.lag_elapsed,
            finding.matched_entity_id,
            now_ms,
            finding.detail.to_string(),
        ],
    )?;
    Ok(())
}

/// Inserts `intent` in `PROPOSED` with its audit record. The primary key makes a second insert
/// of the same key fail: that is I1.
pub(crate) fn insert_locked(
    tx: &Tx<'_>,
    intent: &NewIntent,
    now_ms: u64,
) -> Result<u64, ApplyError> {
    let seq = audit::next_seq(tx).map_err(|e| ledger_err(tx, e))?;
    let core = IntentCore::proposed(intent.key.sik.clone());
    let reversibility = if intent.reversible {
        "reversible"
    } else {
        "irreversible"
    };
    let call = serde_json::to_value(&intent.call).expect("a rail call serializes");
    // The new row's reason code is the state it starts in (?11), as it always was.
    tx.exec(
        "INSERT INTO intents (merchant_id, sik, tool, kind, subject_id, amount_minor, currency,
            reversibility, distinct_reason, call_json, state, attempt_seq,
            reconcile_inconclusive, reason_code, reason, mandate_hash, audit_seq,
            first_seen_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, 0, 0, ?11, '', ?12, ?13,
            ?14, ?14)",
        params![
            intent.key.merchant_id.as_str(),
            intent.key.sik.as_str(),
            intent.call.tool.as_str(),
            intent.kind.as_str(),
            intent.subject_id,
            intent.amount.get(),
            intent.currency.to_string(),
            reversibility,
            intent.distinct_reason,
            call.to_string(),
            core.state.as_str(),
            intent.mandate_hash,
            seq,
            now_ms,
        ],
    )
    .map_err(|e| ledger_err(tx, e))?;
    let record = interlock_machine::Record::Inserted { seq, core };
    let payload = json!({
        "merchant_id": intent.key.merchant_id.as_str(),
        "record": record,
        "tool": intent.call.tool.as_str(),
        "subject_id": intent.subject_id,
        "amount_minor": intent.amount.get(),
        "currency": intent.currency.to_string(),
        "distinct_reason": intent.distinct_reason,
        "mandate_hash": intent.mandate_hash,
        "call": call,
    });
    audit::append(tx, seq, now_ms, "INTENT_PROPOSED", &payload).map_err(|e| ledger_err(tx, e))?;
    Ok(seq)
}

/// Why [`Ledger::verify_chain`] failed.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// The chain is broken.
    #[error("audit chain broken at seq {}: {}", .0.seq, .0.problem)]
    Broken(audit::ChainBreak),
    /// The ledger could not be read.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

impl Ledger {
    /// Walks the whole audit log and returns how many records it holds, or the first bad seq.
    pub fn verify_chain(&self) -> Result<audit::ChainReport, VerifyError> {
        let conn = self.conn();
        audit::verify(&conn).map_err(|error| match error {
            audit::VerifyFailure::Broken(broken) => VerifyError::Broken(broken),
            audit::VerifyFailure::Db(error) => VerifyError::Ledger(self.err(error)),
        })
    }

    /// The ledger's history as the machine's invariant predicates read it.
    pub fn history(&self) -> Result<Vec<interlock_machine::Record>, LedgerError> {
        let conn = self.conn();
        audit::records(conn.sql()).map_err(|e| self.err(e))
    }

    /// The upstream tool an intent calls (an approval needs its live definition for G6).
    pub fn tool_of(&self, key: &IntentKey) -> Result<Option<String>, LedgerError> {
        let conn = self.conn();
        conn.sql()
            .row(
                "SELECT tool FROM intents WHERE merchant_id = ?1 AND sik = ?2",
                params![key.merchant_id.as_str(), key.sik.as_str()],
                |row| row.get(0),
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    /// Every intent's current core.
    pub fn cores(&self) -> Result<Vec<IntentCore>, LedgerError> {
        // One snapshot: the keys and then each row, with this process's batches committing.
        let mut parsed = Ok(());
        let cores = self
            .conn()
            .snapshot(|conn| {
                let keys = conn.query(
                    "SELECT merchant_id, sik FROM intents ORDER BY merchant_id, sik",
                    params![],
                )?;
                let mut cores = Vec::with_capacity(keys.len());
                for row in keys {
                    let key = match parse_key(&row.get::<String>(0)?, &row.get::<String>(1)?) {
                        Ok(key) => key,
                        Err(error) => {
                            parsed = Err(error);
                            break;
                        }
                    };
                    cores.extend(read_row(conn, &key)?.map(|row| row.core));
                }
                Ok(cores)
            })
            .map_err(|e| self.err(e))?;
        parsed.map(|()| cores)
    }
}

/// Parses a key read back from the ledger.
pub(crate) fn parse_key(merchant: &str, sik: &str) -> Result<IntentKey, LedgerError> {
    let corrupt = |problem: String| LedgerError::Corrupt {
        key: format!("{merchant}/{sik}"),
        problem,
    };
    Ok(IntentKey {
        merchant_id: MerchantId::parse(merchant).map_err(|e| corrupt(e.to_string()))?,
        sik: Sik::parse(sik).map_err(|e| corrupt(e.to_string()))?,
    })
}

/// `merchant/sik`, for messages.
pub fn describe(key: &IntentKey) -> String {
    key.describe()
}

/// An entity reference from an entity id and a stamp text read from the rail.
pub fn entity(id: &str, stamp: Option<&str>) -> EntityRef {
    EntityRef {
        id: id.to_owned(),
        stamp: stamp.and_then(|text| Sik::parse(text).ok()),
    }
}

/// Whether `kind` is an event that settles an attempt's call (used by tests and the executor).
pub fn is_outcome(kind: EventKind) -> bool {
    matches!(
        kind,
        EventKind::RailApplied | EventKind::RailRejected | EventKind::RailAmbiguous
    )
}

fn configure(conn: &Connection, path: &str) -> Result<(), LedgerError> {
    conn.busy_timeout(Duration::from_millis(BUSY_TIMEOUT_MS))
        .map_err(|e| sqlite(path, e))?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE_CAPACITY);
    let mode = switch_to_wal(conn, path)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(unsafe_ledger(
            path,
            &format!("journal_mode reads back {mode:?}, not \"wal\""),
        ));
    }
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(|e| sqlite(path, e))?;
    conn.pragma_update(None, "foreign_keys", "ON")
        .map_err(|e| sqlite(path, e))?;
    // The checkpoint thread copies the WAL into the database; a commit checkpoints only as a
    // backstop, when that thread has fallen far behind (`checkpoint.rs`).
    conn.pragma_update(
        None,
        "wal_autocheckpoint",
        checkpoint::WAL_AUTOCHECKPOINT_BACKSTOP_PAGES.to_string(),
    )
    .map_err(|e| sqlite(path, e))?;
    // 16 MiB of page cache (negative = KiB): the hot indexes of a busy day stay in memory.
    // Savepoints (one per job of a batch) keep a sub-journal; in memory, it never spills to a
    // file in the temporary directory, whose I/O error would poison the ledger (ADR 0009).
    conn.pragma_update(None, "temp_store", "MEMORY")
        .map_err(|e| sqlite(path, e))?;
    conn.pragma_update(None, "cache_size", CACHE_KIB.to_string())
        .map_err(|e| sqlite(path, e))?;
    let read = |name: &str| -> Result<i64, LedgerError> {
        conn.pragma_query_value(None, name, |row| row.get(0))
            .map_err(|e| sqlite(path, e))
    };
    // synchronous: 2 = FULL. foreign_keys: 1 = ON.
    let busy = BUSY_TIMEOUT_MS as i64;
    for (name, expected) in [
        ("synchronous", 2),
        ("foreign_keys", 1),
        ("busy_timeout", busy),
        (
            "wal_autocheckpoint",
            checkpoint::WAL_AUTOCHECKPOINT_BACKSTOP_PAGES,
        ),
    ] {
        let value = read(name)?;
        if value != expected {
            return Err(unsafe_ledger(
                path,
                &format!("{name} reads back {value}, not {expected}"),
            ));
        }
    }
    let file: String = conn
        .query_row(
            "SELECT file FROM pragma_database_list WHERE name = 'main'",
            [],
            |row| row.get(0),
        )
        .map_err(|e| sqlite(path, e))?;
    if file.is_empty() {
        return Err(unsafe_ledger(
            path,
            "the database has no file: it is in memory or temporary",
        ));
    }
    Ok(())
}

/// Sets `journal_mode=WAL` and returns the mode read back. On a fresh file that another process
/// is opening at the same moment, SQLite answers the switch with `SQLITE_BUSY` without calling
/// the busy handler, so the switch is retried here, boundedly.
fn switch_to_wal(conn: &Connection, path: &str) -> Result<String, LedgerError> {
    for attempt in 1..=WAL_SWITCH_ATTEMPTS_MAX {
        match conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0)) {
            Ok(mode) => return Ok(mode),
            Err(e) if is_busy(&e) && attempt < WAL_SWITCH_ATTEMPTS_MAX => {
                std::thread::sleep(WAL_SWITCH_RETRY_DELAY);
            }
            Err(e) => return Err(sqlite(path, e)),
        }
    }
    unreachable!("the last attempt returns")
}

/// Checks that the filesystem under the ledger at `path` takes writes and has
/// [`LEDGER_FREE_BYTES_MIN`] free: `serve` refuses to start on a ledger that cannot record,
/// with the reason, rather than find out at the first call. (Operator commands that only read
/// do not ask: an operator must be able to look while the disk is full.)
pub fn writable_room(path: &Path) -> Result<(), String> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let Ok(fs) = rustix::fs::statvfs(dir) else {
        // The open that follows names what is wrong with the path.
        return Ok(());
    };
    if fs.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY) {
        return Err(format!(
            "{} is on a read-only filesystem; the ledger must be writable",
            dir.display()
        ));
    }
    let free = fs.f_bavail.saturating_mul(fs.f_frsize);
    if free < LEDGER_FREE_BYTES_MIN {
        return Err(format!(
            "the filesystem under {} is full: {free} bytes free, below the {LEDGER_FREE_BYTES_MIN} the ledger needs to start",
            dir.display()
        ));
    }
    Ok(())
}

fn migrate(conn: &Connection, path: &str) -> Result<(), LedgerError> {
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(|e| sqlite(path, e))?;
    let known = MIGRATIONS.len() as i64;
    if version > known {
        return Err(unsafe_ledger(
            path,
            &format!(
                "schema version {version} was written by a newer Interlock (this one knows {known}); refusing to touch it"
            ),
        ));
    }
    // `PRAGMA foreign_keys` cannot change inside a transaction: off around the migrations, on
    // again whatever happens (`open` then checks that it is).
    conn.execute_batch("PRAGMA foreign_keys = OFF")
        .map_err(|e| sqlite(path, e))?;
    let migrated = run_migrations(conn, path, version);
    conn.execute_batch("PRAGMA foreign_keys = ON")
        .map_err(|e| sqlite(path, e))?;
    migrated
}

fn run_migrations(conn: &Connection, path: &str, version: i64) -> Result<(), LedgerError> {
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        let target = index as i64 + 1;
        let rollback = |e| {
            let _ = conn.execute_batch("ROLLBACK");
            sqlite(path, e)
        };
        conn.execute_batch("BEGIN IMMEDIATE")
            .map_err(|e| sqlite(path, e))?;
        // Read again under the write lock: another process opening the same fresh file may
        // have run this migration while we waited for the lock (two proxies started at once).
        let now: i64 = conn
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .map_err(rollback)?;
        if now < target {
            conn.execute_batch(&format!("{sql}\nPRAGMA user_version = {target};"))
                .map_err(rollback)?;
            // Foreign keys are off while a migration rebuilds a table (SQLite's documented
            // procedure); every reference must hold again before the migration commits.
            let orphans: i64 = conn
                .query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |row| {
                    row.get(0)
                })
                .map_err(rollback)?;
            if orphans != 0 {
                let _ = conn.execute_batch("ROLLBACK");
                return Err(unsafe_ledger(
                    path,
                    &format!(
                        "migration {target} would leave {orphans} rows without their intent; rolled back"
                    ),
                ));
            }
        }
        conn.execute_batch("COMMIT").map_err(rollback)?;
    }
    Ok(())
}

fn is_busy(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

fn sqlite(path: &str, source: rusqlite::Error) -> LedgerError {
    LedgerError::Sqlite {
        path: path.to_owned(),
        source,
    }
}

fn ledger_err(tx: &dyn Sql, source: DbError) -> ApplyError {
    ApplyError::Ledger(db_error(&tx.target(), source))
}

/// The ledger's error for a failed statement on `target`.
pub(crate) fn db_error(target: &str, error: DbError) -> LedgerError {
    match error {
        DbError::Sqlite(source) => sqlite(target, source),
        DbError::Postgres(error) => LedgerError::Postgres {
            target: target.to_owned(),
            code: error.code().map(|code| code.code().to_owned()),
            message: sql::postgres_text(&error),
        },
        other => LedgerError::Row {
            target: target.to_owned(),
            problem: other.to_string(),
        },
    }
}

/// Whether `db` is a PostgreSQL connection string rather than a SQLite file.
pub fn is_postgres_url(db: &str) -> bool {
    db.starts_with("postgres://") || db.starts_with("postgresql://")
}

/// The database a ledger is kept in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// One SQLite file (the embedded default).
    Sqlite,
    /// A PostgreSQL database shared by a fleet.
    Postgres,
}

/// The reading connection of a ledger.
pub(crate) enum Reader {
    Sqlite(Connection),
    Postgres(postgres::PgConn),
}

impl Reader {
    /// `f` over one snapshot: every read it makes sees the same committed state, while other
    /// writers go on committing.
    pub(crate) fn snapshot<T>(&self, f: impl FnOnce(&dyn Sql) -> DbResult<T>) -> DbResult<T> {
        match self {
            Reader::Sqlite(conn) => {
                // Deferred: the snapshot is taken by the first read and held to the end; dropped,
                // it rolls back, having written nothing.
                let snapshot = conn.unchecked_transaction()?;
                f(&*snapshot)
            }
            Reader::Postgres(conn) => conn.snapshot(f),
        }
    }

    /// The connection, for a read that is one statement.
    pub(crate) fn sql(&self) -> &dyn Sql {
        match self {
            Reader::Sqlite(conn) => conn,
            Reader::Postgres(conn) => conn,
        }
    }
}

fn unsafe_ledger(path: &str, problem: &str) -> LedgerError {
    LedgerError::Unsafe {
        path: path.to_owned(),
        problem: problem.to_owned(),
    }
}

impl ApplyError {
    /// Splits a failed transition into the refusal the driver acts on, or the ledger's own
    /// failure, which stops the runner.
    pub fn into_refusal(self) -> Result<Refusal, LedgerError> {
        match self {
            ApplyError::Illegal(illegal) => Ok(Refusal::Illegal(illegal)),
            ApplyError::Lease(why) => Ok(Refusal::Lease(why)),
            ApplyError::NoSuchIntent(_) => Ok(Refusal::NoSuchIntent),
            ApplyError::Contended(_) => Ok(Refusal::Contended),
            ApplyError::Ledger(error) => Err(error),
        }
    }
}

/// A transition's result as the driver takes it: applied or refused. The ledger's own failure
/// is the outer error.
pub type Committed<T> = Result<Result<T, Refusal>, LedgerError>;

fn split<T>(result: Result<T, ApplyError>) -> Committed<T> {
    match result {
        Ok(value) => Ok(Ok(value)),
        Err(error) => error.into_refusal().map(Err),
    }
}

impl Ledger {
    /// Commits one transition the driver asked for ([`Ledger::apply`]).
    pub fn commit(&self, commit: &Commit, now_ms: u64) -> Committed<Applied> {
        split(self.apply(&commit.key, &commit.event, now_ms, &commit.change))
    }

    /// One deciding transaction (`IMMEDIATE`): finds the intent as `plan` expects, reads the
    /// usage the ladder counts, calls the driver's pure `judge` with it, and writes what the
    /// judgement says (the intent, its gate event, the decision record and, when the plan
    /// claims it, the first attempt), all under one lock, so that two concurrent proposals
    /// cannot both fit into one window. `now_ms` reads the runner's clock; it is read once the
    /// write lock is held: the attempt starts then, and its lease runs from then.
    pub fn decide(
        &self,
        plan: &Decide,
        now_ms: impl Fn() -> u64,
        mandate: &Mandate,
        mut judge: impl FnMut(&Usage) -> Judgement,
    ) -> Committed<Decided> {
        split(self.write(|tx| {
            let seen = read_row(tx, &plan.key).map_err(|e| self.err(e))?;
            let expected = match (&plan.expect, &seen) {
                (Expect::Absent(_), None) => true,
                (Expect::InState(state), Some(row)) => row.core.state == *state,
                (Expect::InState(_), None) => {
                    return Err(ApplyError::NoSuchIntent(describe(&plan.key)));
                }
                (Expect::Absent(_), Some(_)) => false,
            };
            if !expected {
                let view = rows::read_intent(tx, &plan.key)
                    .map_err(|e| self.err(e))?
                    .ok_or_else(|| ApplyError::NoSuchIntent(describe(&plan.key)))?;
                return Ok(Decided::Found(Box::new(view)));
            }
            let query = &plan.usage;
            let exclude = query.exclude_self.then_some(&plan.key);
            let usage = crate::usage::read(
                tx,
                mandate,
                &query.action,
                &query.subject_id,
                query.currency,
                query.now_ms,
                exclude,
            )
            .map_err(|e| self.err(e))?;
            match judge(&usage) {
                Judgement::Refuse { ladder, record } => {
                    if record {
                        record_decision(tx, plan, &ladder, "REFUSED").map_err(|e| self.err(e))?;
                    }
                    Ok(Decided::Refused(ladder))
                }
                Judgement::Apply {
                    ladder,
                    event,
                    change,
                    record,
                } => {
                    let applied = self.apply_judged(tx, plan, &event, &change)?;
                    if let Some(outcome) = record {
                        record_decision(tx, plan, &ladder, outcome).map_err(|e| self.err(e))?;
                    }
                    let started = self.start_judged(tx, plan, &applied, now_ms())?;
                    Ok(Decided::Applied(started.unwrap_or(applied), ladder))
                }
            }
        }))
    }

    fn apply_judged(
        &self,
        tx: &Tx<'_>,
        plan: &Decide,
        event: &Event,
        change: &Change,
    ) -> Result<Applied, ApplyError> {
        let now = plan.usage.now_ms;
        if let Expect::Absent(intent) = &plan.expect {
            assert_eq!(
                intent.key, plan.key,
                "a new intent is inserted under its own key"
            );
            insert_locked(tx, intent, now)?;
        }
        let seen = read_row(tx, &plan.key)
            .map_err(|e| self.err(e))?
            .ok_or_else(|| ApplyError::NoSuchIntent(describe(&plan.key)))?;
        apply_locked(tx, &plan.key, &seen, event, now, change)?
            .ok_or_else(|| ApplyError::Contended(format!("intent {}", describe(&plan.key))))
    }

    /// `ATTEMPT_STARTED` in the deciding transaction, after the decision record (whose
    /// `audit_seq` names the gate event), when the plan carries a claim and the judged event
    /// left the intent ready for it. A refusal here changes nothing: the decision stands and
    /// the driver claims the attempt on its own, as it would from an older ledger. None is
    /// expected (an `AUTHORIZED` row holds no lease, and the machine reopens only with
    /// attempts left), so one is said at WARN.
    fn start_judged(
        &self,
        tx: &Tx<'_>,
        plan: &Decide,
        decided: &Applied,
        now_ms: u64,
    ) -> Result<Option<Applied>, ApplyError> {
        let Some(claim) = &plan.start_attempt else {
            return Ok(None);
        };
        if decided.effect != Effect::StartAttempt {
            return Ok(None);
        }
        let seen = read_row(tx, &plan.key)
            .map_err(|e| self.err(e))?
            .ok_or_else(|| ApplyError::NoSuchIntent(describe(&plan.key)))?;
        assert_eq!(seen.core, decided.to, "the row is the one just decided");
        // Never before the decision it follows, whatever the two readings of the clock.
        let at = now_ms.max(plan.usage.now_ms);
        let event = Event::AttemptStarted;
        let refused = match apply_locked(tx, &plan.key, &seen, &event, at, &claim.at(at)) {
            Ok(Some(started)) => return Ok(Some(started)),
            Ok(None) => "the row moved".to_owned(),
            Err(ApplyError::Illegal(illegal)) => illegal.to_string(),
            Err(ApplyError::Lease(why)) => why,
            Err(error) => return Err(error),
        };
        tracing::warn!(
            intent = %describe(&plan.key),
            refused = %refused,
            "the deciding transaction could not start the attempt; it is claimed in a commit of its own"
        );
        Ok(None)
    }

    /// The intent under `key` as the driver reads it, or `None`. Read on the writing
    /// connection between batches (its page cache is warm; the reading connection drops its
    /// cache whenever another connection has written), else on the reading connection.
    pub fn read_intent(&self, key: &IntentKey) -> Result<Option<IntentView>, LedgerError> {
        // One snapshot on either connection: the row, its attempt and its lease from one
        // commit, while this process's batches (or another process) go on committing.
        let between = self.writer.between_batches(|writer: &Writer| {
            let warm = writer.between_batches()?;
            let snapshot = warm.unchecked_transaction().map_err(DbError::from);
            Some(snapshot.and_then(|snapshot| rows::read_intent(&*snapshot, key)))
        });
        match between.flatten() {
            Some(view) => view.map_err(|e| self.err(e)),
            None => self
                .conn()
                .snapshot(|conn| rows::read_intent(conn, key))
                .map_err(|e| self.err(e)),
        }
    }

    /// Keys of intents the sweep must look at, oldest first, at most `limit`: a lease that has
    /// lapsed by `now`, or a reconcile pass due by `now`. With `due_only` false, every intent in
    /// a lease-holding or reconcile-awaiting state (boot recovery waits for the rest itself).
    pub fn sweep_candidates(
        &self,
        now_ms: u64,
        due_only: bool,
        limit: usize,
    ) -> Result<Vec<IntentKey>, LedgerError> {
        let conn = self.conn();
        rows::sweep_candidates(conn.sql(), now_ms, due_only, limit).map_err(|e| self.err(e))
    }
}

/// The decision record of one judgement, written in the transaction that made it.
fn record_decision(tx: &Tx<'_>, plan: &Decide, ladder: &Ladder, outcome: &str) -> DbResult<()> {
    let head: u64 = tx.row(
        "SELECT coalesce(max(seq), 0) FROM audit_log",
        params![],
        |row| row.get(0),
    )?;
    let verdict = serde_json::to_value(ladder.verdict).expect("verdicts serialize");
    let action = &plan.usage.action;
    tx.exec(
        "INSERT INTO decisions (instance_id, merchant_id, sik, agent_id, tool, mandate_hash,
            verdict, outcome, reason_code, gates_json, decided_at, audit_seq)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
        params![
            plan.instance_id,
            action.merchant_id.as_str(),
            plan.key.sik.as_str(),
            action.agent_id.as_str(),
            action.tool.as_str(),
            plan.mandate_hash,
            verdict.as_str(),
            outcome,
            ladder.deciding().reason_code.as_str(),
            serde_json::to_string(&ladder.results).expect("gate results serialize"),
            plan.usage.now_ms,
            head,
        ],
    )?;
    Ok(())
}
