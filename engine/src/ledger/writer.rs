//! The ledger's one writing connection as a group-commit store: every transition of every
//! concurrent caller of this process runs in a savepoint of one open `IMMEDIATE` transaction,
//! and one commit (one fsync of the WAL) makes the batch durable (issue 21; the hand-off is
//! `interlock-group-commit`, checked by loom). Across processes SQLite's write lock still
//! takes one batch at a time.
//!
//! After an I/O error nothing more is written (ADR 0004): a batch whose job or commit hit one
//! is rolled back whole, and every caller in it is told.

use super::postgres::PgWriter;
use super::sql::{DbResult, Row, Sql, Val};
use super::{APPLY_RETRIES_MAX, LedgerError, mark_poisoned, poisoned_why};
use interlock_group_commit::Store;
use rusqlite::{Connection, ffi};
use std::ops::Deref;
use std::path::PathBuf;

/// The connection, seen from inside a batch's transaction: what a job writes through.
pub(crate) struct Tx<'c>(&'c dyn Sql);

impl<'c> Deref for Tx<'c> {
    type Target = dyn Sql + 'c;

    fn deref(&self) -> &(dyn Sql + 'c) {
        self.0
    }
}

impl Sql for Tx<'_> {
    fn dialect(&self) -> super::sql::Dialect {
        self.0.dialect()
    }

    fn target(&self) -> String {
        self.0.target()
    }

    fn query(&self, sql: &str, params: &[Val]) -> DbResult<Vec<Row>> {
        self.0.query(sql, params)
    }

    fn exec(&self, sql: &str, params: &[Val]) -> DbResult<u64> {
        self.0.exec(sql, params)
    }

    fn each(
        &self,
        sql: &str,
        params: &[Val],
        each: &mut dyn FnMut(&Row) -> DbResult<bool>,
    ) -> DbResult<()> {
        self.0.each(sql, params, each)
    }
}

/// The writing connection of either backend, as one group-commit store.
pub(crate) enum Writer {
    Sqlite(SqliteWriter),
    Postgres(PgWriter),
}

impl Writer {
    /// Notes the error of a job that failed (SQLite: see `job_error`).
    pub(crate) fn job_failed(&mut self, error: &super::ApplyError) {
        match self {
            Writer::Sqlite(writer) => writer.job_failed(error),
            Writer::Postgres(_) => {}
        }
    }

    /// SQLite's connection when no transaction is open on it; never PostgreSQL's (it has no
    /// warm cache to spare the reader).
    pub(crate) fn between_batches(&self) -> Option<&Connection> {
        match self {
            Writer::Sqlite(writer) => writer.between_batches(),
            Writer::Postgres(_) => None,
        }
    }

    /// The connection inside the open batch.
    pub(crate) fn tx(&self) -> Tx<'_> {
        match self {
            Writer::Sqlite(writer) => Tx(&writer.conn),
            Writer::Postgres(writer) => Tx(writer.conn()),
        }
    }
}

impl Store for Writer {
    type Error = BatchFailure;

    fn begin(&mut self) -> Result<(), BatchFailure> {
        match self {
            Writer::Sqlite(writer) => writer.begin(),
            Writer::Postgres(writer) => writer.begin(),
        }
    }

    fn commit(&mut self) -> Result<(), BatchFailure> {
        match self {
            Writer::Sqlite(writer) => writer.commit(),
            Writer::Postgres(writer) => writer.commit(),
        }
    }

    fn rollback(&mut self) {
        match self {
            Writer::Sqlite(writer) => writer.rollback(),
            Writer::Postgres(writer) => writer.rollback(),
        }
    }

    fn enter(&mut self) -> Result<(), BatchFailure> {
        match self {
            Writer::Sqlite(writer) => writer.enter(),
            Writer::Postgres(writer) => writer.enter(),
        }
    }

    fn keep(&mut self) -> Result<(), BatchFailure> {
        match self {
            Writer::Sqlite(writer) => writer.keep(),
            Writer::Postgres(writer) => writer.keep(),
        }
    }

    fn undo(&mut self) -> Result<(), BatchFailure> {
        match self {
            Writer::Sqlite(writer) => writer.undo(),
            Writer::Postgres(writer) => writer.undo(),
        }
    }

    fn abandoned(&self) -> BatchFailure {
        match self {
            Writer::Sqlite(writer) => writer.abandoned(),
            Writer::Postgres(writer) => writer.abandoned(),
        }
    }
}

/// The writing connection and the file it writes.
pub(crate) struct SqliteWriter {
    conn: Connection,
    file: PathBuf,
    /// `file` as messages show it.
    path: String,
    /// SQLite's error of the last job that failed with one: when SQLite rolled the whole batch
    /// back after it (a full disk), the batch's other callers are told that error.
    job_error: Option<(ffi::Error, String)>,
}

impl SqliteWriter {
    pub(crate) fn new(conn: Connection, file: PathBuf) -> SqliteWriter {
        let path = file.display().to_string();
        SqliteWriter {
            conn,
            file,
            path,
            job_error: None,
        }
    }

    /// Notes SQLite's error of a job that failed (see `job_error`).
    pub(crate) fn job_failed(&mut self, error: &super::ApplyError) {
        if let super::ApplyError::Ledger(LedgerError::Sqlite {
            source: rusqlite::Error::SqliteFailure(code, message),
            ..
        }) = error
        {
            let message = message.clone().unwrap_or_else(|| code.to_string());
            self.job_error = Some((*code, message));
        }
    }

    /// Refuses to go on when SQLite has rolled the batch's transaction back on its own (it may,
    /// after a full disk or an I/O error in a statement): the batch's earlier jobs are gone, and
    /// a savepoint statement outside a transaction would start or commit one of its own.
    fn in_batch(&self) -> Result<(), BatchFailure> {
        if !self.conn.is_autocommit() {
            return Ok(());
        }
        let (code, message) = self.job_error.clone().unwrap_or_else(|| {
            let code = ffi::Error::new(ffi::SQLITE_ABORT);
            (
                code,
                "SQLite rolled the batch's transaction back".to_owned(),
            )
        });
        let failure = BatchFailure {
            path: self.path.clone(),
            cause: Cause::Sqlite(code, message),
        };
        self.poison_on_io(&failure);
        Err(failure)
    }

    /// The connection when no transaction is open on it (between batches: what it reads then is
    /// committed), or `None`.
    pub(crate) fn between_batches(&self) -> Option<&Connection> {
        self.conn.is_autocommit().then_some(&self.conn)
    }

    /// Runs one statement of the batch's bookkeeping. An I/O error in any of them (a savepoint
    /// reads back its sub-journal) poisons the file before the lock is let go.
    fn run(&self, sql: &str) -> Result<(), BatchFailure> {
        self.conn
            .prepare_cached(sql)
            .and_then(|mut statement| statement.execute([]))
            .map(drop)
            .map_err(|error| {
                let failure = self.failure(error);
                self.poison_on_io(&failure);
                failure
            })
    }

    fn failure(&self, error: rusqlite::Error) -> BatchFailure {
        let cause = match error {
            rusqlite::Error::SqliteFailure(code, message) => {
                let message = message.unwrap_or_else(|| code.to_string());
                Cause::Sqlite(code, message)
            }
            other => Cause::Sqlite(ffi::Error::new(ffi::SQLITE_ERROR), other.to_string()),
        };
        BatchFailure {
            path: self.path.clone(),
            cause,
        }
    }

    /// Marks the file poisoned when `failure` is an I/O error (under the batch's lock, so no
    /// later batch of this process begins before the mark).
    fn poison_on_io(&self, failure: &BatchFailure) {
        let error = LedgerError::from(failure.clone());
        if error.disk_fault() == Some(super::DiskFault::Io) {
            mark_poisoned(&self.file, error.to_string());
        }
    }

    /// Why the file takes no more writes, if a write of this process failed with an I/O error.
    fn poisoned(&self) -> Option<BatchFailure> {
        poisoned_why(&self.file).map(|why| BatchFailure {
            path: self.path.clone(),
            cause: Cause::Poisoned(why),
        })
    }

    /// Runs `sql`, tried again while another process keeps the database busy past the busy
    /// timeout, at most [`APPLY_RETRIES_MAX`] times.
    fn run_while_busy(&self, sql: &str) -> Result<(), BatchFailure> {
        for _ in 0..APPLY_RETRIES_MAX {
            match self.run(sql) {
                Ok(()) => return Ok(()),
                Err(failure) if SqliteWriter::is_busy(&failure) => continue,
                Err(failure) => return Err(failure),
            }
        }
        Err(BatchFailure {
            path: self.path.clone(),
            cause: Cause::Busy,
        })
    }

    fn is_busy(failure: &BatchFailure) -> bool {
        matches!(
            &failure.cause,
            Cause::Sqlite(code, _) if matches!(
                code.code,
                rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
            )
        )
    }
}

/// Why a batch failed: every caller in it gets a copy.
#[derive(Debug, Clone)]
pub(crate) struct BatchFailure {
    pub(crate) path: String,
    pub(crate) cause: Cause,
}

#[derive(Debug, Clone)]
pub(crate) enum Cause {
    /// PostgreSQL's error: its SQLSTATE when the server answered, and its message.
    Postgres(Option<String>, String),
    /// SQLite's error, code and message.
    Sqlite(ffi::Error, String),
    /// Another process kept the write lock through every try.
    Busy,
    /// A job of the batch panicked.
    Abandoned,
    /// An I/O error poisoned the file (this batch's or an earlier one).
    Poisoned(String),
}

impl From<BatchFailure> for LedgerError {
    fn from(failure: BatchFailure) -> LedgerError {
        let path = failure.path;
        match failure.cause {
            Cause::Sqlite(code, message) => LedgerError::Sqlite {
                path,
                source: rusqlite::Error::SqliteFailure(code, Some(message)),
            },
            Cause::Busy => LedgerError::Sqlite {
                path,
                source: rusqlite::Error::SqliteFailure(
                    ffi::Error::new(ffi::SQLITE_BUSY),
                    Some(format!(
                        "another process kept the write lock through {APPLY_RETRIES_MAX} tries"
                    )),
                ),
            },
            Cause::Postgres(code, message) => LedgerError::Postgres {
                target: path,
                code,
                message,
            },
            Cause::Abandoned => LedgerError::Abandoned { path },
            Cause::Poisoned(why) => LedgerError::Poisoned { path, why },
        }
    }
}

impl From<BatchFailure> for super::ApplyError {
    fn from(failure: BatchFailure) -> super::ApplyError {
        match failure.cause {
            Cause::Busy => super::ApplyError::Contended(format!(
                "the ledger (another process held its write lock through {APPLY_RETRIES_MAX} tries)"
            )),
            _ => super::ApplyError::Ledger(failure.into()),
        }
    }
}

impl SqliteWriter {
    fn begin(&mut self) -> Result<(), BatchFailure> {
        if let Some(poisoned) = self.poisoned() {
            return Err(poisoned);
        }
        self.job_error = None;
        // A transaction left open (a commit that panicked, a rollback that failed and did not
        // poison): its callers were answered, so it is rolled back before a batch begins on it.
        if !self.conn.is_autocommit() {
            tracing::warn!(ledger = %self.path, "a transaction was left open; rolled back before the next batch");
            self.rollback();
            if let Some(poisoned) = self.poisoned() {
                return Err(poisoned);
            }
        }
        self.run_while_busy("BEGIN IMMEDIATE")
    }

    fn commit(&mut self) -> Result<(), BatchFailure> {
        // A job of this batch may have poisoned the file: none of the batch is kept then.
        if let Some(poisoned) = self.poisoned() {
            return Err(poisoned);
        }
        self.in_batch()?;
        // A COMMIT refused as busy leaves the transaction open and may be tried again.
        self.run_while_busy("COMMIT")
    }

    fn rollback(&mut self) {
        // SQLite may have rolled the transaction back itself (after an I/O error or a full
        // disk); then there is nothing to roll back and that is the state wanted.
        if self.conn.is_autocommit() {
            return;
        }
        if let Err(failure) = self.run("ROLLBACK") {
            // What the connection holds is not known: nothing more is written through it.
            let why = format!(
                "a batch could not be rolled back: {}",
                LedgerError::from(failure)
            );
            tracing::error!(ledger = %self.path, "{why}");
            mark_poisoned(&self.file, why);
        }
    }

    fn enter(&mut self) -> Result<(), BatchFailure> {
        self.in_batch()?;
        self.run("SAVEPOINT job")
    }

    fn keep(&mut self) -> Result<(), BatchFailure> {
        self.in_batch()?;
        self.run("RELEASE job")
    }

    fn undo(&mut self) -> Result<(), BatchFailure> {
        // A job that hit an I/O error poisoned the file: the whole batch goes, not just the job.
        if let Some(poisoned) = self.poisoned() {
            return Err(poisoned);
        }
        self.in_batch()?;
        // The job's error was undone with it: a later rollback of the batch is not its doing.
        self.job_error = None;
        self.run("ROLLBACK TO job")?;
        self.run("RELEASE job")
    }

    fn abandoned(&self) -> BatchFailure {
        BatchFailure {
            path: self.path.clone(),
            cause: Cause::Abandoned,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{ApplyError, DiskFault, Ledger, LedgerError};
    use super::Tx;
    use crate::ledger::sql::{DbError, params};
    use std::sync::Barrier;
    use std::time::Duration;

    fn anchors(ledger: &Ledger) -> i64 {
        ledger
            .conn()
            .sql()
            .row("SELECT count(*) FROM clock_anchors", params![], |row| {
                row.get(0)
            })
            .unwrap()
    }

    /// What a job wrote is not durable until its batch commits, so no read of the ledger may
    /// see it before then: the driver and the agent act on what is read.
    #[test]
    fn reads_see_no_write_of_an_open_batch() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::open(&dir.path().join("ledger.db")).unwrap();
        let seen_inside = ledger
            .write(|tx| {
                tx.exec(
                    "INSERT INTO clock_anchors (boot_id, wall_at_boot_ms, wall_said_ms)
                     VALUES ('boot', 1, 1)",
                    params![],
                )
                .map_err(|e| ApplyError::Ledger(ledger.err(e)))?;
                // Another thread reads while the batch is open (this job holds it open).
                Ok(std::thread::scope(|s| {
                    s.spawn(|| anchors(&ledger)).join().unwrap()
                }))
            })
            .unwrap();
        assert_eq!(
            seen_inside, 0,
            "a read saw a write its batch had not committed"
        );
        assert_eq!(anchors(&ledger), 1, "once committed it is read");
    }

    /// Two callers in one batch: the first leaves it open for the second (still on its way to
    /// the lock while the first's job sleeps), whose job then fails with `second_fails`.
    fn shared_batch(
        ledger: &Ledger,
        second_fails: impl FnOnce(&Tx<'_>) -> Result<(), ApplyError> + Send,
    ) -> (Result<(), ApplyError>, Result<(), ApplyError>) {
        let in_first = Barrier::new(2);
        std::thread::scope(|s| {
            let first = s.spawn(|| {
                ledger.write(|tx| {
                    insert_anchor(ledger, tx, "first")?;
                    in_first.wait();
                    std::thread::sleep(Duration::from_millis(200));
                    Ok(())
                })
            });
            in_first.wait();
            let second = ledger.write(second_fails);
            (first.join().unwrap(), second)
        })
    }

    fn insert_anchor(ledger: &Ledger, tx: &Tx<'_>, boot: &str) -> Result<(), ApplyError> {
        tx.exec(
            "INSERT INTO clock_anchors (boot_id, wall_at_boot_ms, wall_said_ms)
             VALUES (?1, 1, 1)",
            params![boot],
        )
        .map(drop)
        .map_err(|e| ApplyError::Ledger(ledger.err(e)))
    }

    /// ADR 0004: after an I/O error nothing more is written. The batch it happened in is
    /// rolled back whole, its other caller is told, and the next write is refused.
    #[test]
    fn an_io_error_in_one_job_fails_its_whole_batch() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::open(&dir.path().join("ledger.db")).unwrap();
        let (first, second) = shared_batch(&ledger, |tx| {
            insert_anchor(&ledger, tx, "second")?;
            let io = rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_IOERR);
            Err(ApplyError::Ledger(ledger.err(DbError::Sqlite(
                rusqlite::Error::SqliteFailure(io, None),
            ))))
        });
        let fault = |r: &Result<(), ApplyError>| r.as_ref().err().and_then(ApplyError::disk_fault);
        assert_eq!(fault(&second), Some(DiskFault::Io), "{second:?}");
        assert_eq!(fault(&first), Some(DiskFault::Io), "{first:?}");
        assert_eq!(anchors(&ledger), 0, "nothing of the batch is durable");
        let next = ledger.write(|tx| insert_anchor(&ledger, tx, "next"));
        assert!(
            matches!(&next, Err(ApplyError::Ledger(LedgerError::Poisoned { .. }))),
            "{next:?}"
        );
    }

    /// A full disk makes SQLite roll the whole transaction back: the batch's other caller is
    /// told it was a full disk (a retryable fault), not a missing savepoint, and the ledger
    /// takes writes again once there is room.
    #[test]
    fn a_full_disk_in_one_job_is_a_full_disk_for_its_whole_batch() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::open(&dir.path().join("ledger.db")).unwrap();
        let (first, second) = shared_batch(&ledger, |tx| {
            let pages: i64 = tx
                .row("PRAGMA page_count", params![], |r| r.get(0))
                .unwrap();
            let cap = format!("PRAGMA max_page_count = {}", pages + 1);
            tx.row(&cap, params![], |_| Ok(())).unwrap();
            tx.exec("CREATE TABLE IF NOT EXISTS filler (x BLOB)", params![])
                .and_then(|_| tx.exec("INSERT INTO filler VALUES (zeroblob(1000000))", params![]))
                .map(drop)
                .map_err(|e| ApplyError::Ledger(ledger.err(e)))
        });
        let fault = |r: &Result<(), ApplyError>| r.as_ref().err().and_then(ApplyError::disk_fault);
        assert_eq!(fault(&second), Some(DiskFault::Full), "{second:?}");
        assert_eq!(fault(&first), Some(DiskFault::Full), "{first:?}");
        assert_eq!(anchors(&ledger), 0, "nothing of the batch is durable");
        ledger
            .write(|tx| {
                tx.row("PRAGMA max_page_count = 1073741823", params![], |_| Ok(()))
                    .map_err(|e| ApplyError::Ledger(ledger.err(e)))?;
                insert_anchor(&ledger, tx, "after")
            })
            .expect("a full disk does not poison the ledger");
        assert_eq!(anchors(&ledger), 1);
    }
}
