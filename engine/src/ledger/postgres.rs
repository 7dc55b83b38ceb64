//! The ledger on PostgreSQL (issue 20, ADR 0010): the same statements as on SQLite (`sql.rs`
//! rewrites `?N` into `$N`), its own schema (`schema/postgres/`), and the same group commit:
//! this process's concurrent writes share one transaction, in savepoints.
//!
//! **One lock for every writer of the fleet.** Each batch takes one transaction-scoped
//! advisory lock ([`LEDGER_LOCK_KEY`]) as its first statement, so the writing transactions of
//! every host run one at a time, as SQLite's write lock makes them on one host. That is what
//! keeps the windows, the fee budget and the refunds-per-payment count exact across hosts (the
//! usage read, the ladder and the insert sit under the lock) and the one audit chain gapless
//! (the head is read and moved under it). Isolation is `READ COMMITTED` on purpose: each
//! statement after the lock sees every transaction committed before the lock was granted,
//! where a `REPEATABLE READ` snapshot would date from before the wait.
//!
//! **Bounded.** Connecting waits at most [`PG_CONNECT_TIMEOUT_MS`], a lock at most
//! [`PG_LOCK_TIMEOUT_MS`] (then the batch is tried again, at most `APPLY_RETRIES_MAX` times,
//! and refused as contended), a statement at most [`PG_STATEMENT_TIMEOUT_MS`]. A writer that
//! stops inside a batch (a stalled process holds the fleet's lock) is cut off by the server
//! after [`PG_IDLE_IN_TRANSACTION_MS`]: its batch rolls back and it writes nothing more.
//!
//! **A lost connection ends this ledger's writing.** Whether a `COMMIT` whose answer was lost
//! took effect is not known, so the handle refuses every later write (as after an I/O error
//! on SQLite) and the process restarts into recovery, which reads what was committed.

use super::sql::{DbError, DbResult, Dialect, Row, Sql, Val};
use super::writer::{BatchFailure, Cause};
use super::{APPLY_RETRIES_MAX, BUSY_TIMEOUT_MS, LedgerError, mark_poisoned, poisoned_why};
use bytes::BytesMut;
use futures_util::{StreamExt, pin_mut};
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};
use tokio_postgres::{Client, Config, NoTls, Statement};

/// The advisory lock every writing transaction of every Interlock on the database takes first:
/// "Interloc" in ASCII.
pub const LEDGER_LOCK_KEY: i64 = 0x496e_7465_726c_6f63;
/// How long connecting to the server may take.
pub const PG_CONNECT_TIMEOUT_MS: u64 = 5_000;
/// How long a batch waits for the ledger's lock before it is tried again: the same bound as
/// SQLite's busy timeout.
pub const PG_LOCK_TIMEOUT_MS: u64 = BUSY_TIMEOUT_MS;
/// How long one statement may run.
pub const PG_STATEMENT_TIMEOUT_MS: u64 = 30_000;
/// How long a session may sit idle inside a transaction before the server ends it.
pub const PG_IDLE_IN_TRANSACTION_MS: u64 = 10_000;
/// Prepared statements kept per connection; the cache is emptied when it would grow past this.
pub const PG_STATEMENTS_MAX: usize = 256;

/// Migrations of the PostgreSQL schema, in order; `interlock_schema.version` is how many have
/// run. Forward only, as on SQLite.
const MIGRATIONS: &[&str] = &[include_str!("../../schema/postgres/0001_ledger.sql")];
/// The schema version a PostgreSQL ledger this build opens is migrated to.
pub const PG_SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

const SQLSTATE_LOCK_NOT_AVAILABLE: &str = "55P03";
const SQLSTATE_DEADLOCK: &str = "40P01";
const SQLSTATE_SERIALIZATION: &str = "40001";

/// The runtime that drives this ledger's connections; callers wait on the client's futures
/// with `pollster`, so no caller needs (or must not have) a runtime of its own.
struct Background(Mutex<Option<tokio::runtime::Runtime>>);

impl Drop for Background {
    fn drop(&mut self) {
        // Not `drop(runtime)`: that blocks, and panics inside another runtime's context.
        let runtime = self.0.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(runtime) = runtime {
            runtime.shutdown_background();
        }
    }
}

/// One connection to the server.
pub(crate) struct PgConn {
    client: Client,
    statements: RefCell<HashMap<String, Statement>>,
    target: String,
    _background: Arc<Background>,
}

/// What `open` hands the ledger.
pub(crate) struct Opened {
    pub(crate) target: String,
    pub(crate) writer: PgWriter,
    pub(crate) reader: PgConn,
}

/// `host=… port=… dbname=… user=…` of `config`: what messages name, never the password.
fn describe(config: &Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|host| match host {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    let ports: Vec<String> = config.get_ports().iter().map(u16::to_string).collect();
    format!(
        "postgres host={} port={} dbname={} user={}",
        if hosts.is_empty() {
            "localhost".to_owned()
        } else {
            hosts.join(",")
        },
        if ports.is_empty() {
            "5432".to_owned()
        } else {
            ports.join(",")
        },
        config.get_dbname().unwrap_or("(the user's)"),
        config.get_user().unwrap_or("(the OS user)"),
    )
}

fn unsafe_ledger(target: &str, problem: impl Into<String>) -> LedgerError {
    LedgerError::Unsafe {
        path: target.to_owned(),
        problem: problem.into(),
    }
}

fn pg_error(target: &str, error: tokio_postgres::Error) -> LedgerError {
    super::db_error(target, DbError::Postgres(error))
}

/// Connects (writer and reader), checks the server's settings, migrates, and hands both over.
pub(crate) fn open(url: &str) -> Result<Opened, LedgerError> {
    let mut config: Config = url.parse().map_err(|e| {
        unsafe_ledger(
            "postgres",
            format!("{url:?} is not a PostgreSQL connection string: {e}"),
        )
    })?;
    config
        .connect_timeout(Duration::from_millis(PG_CONNECT_TIMEOUT_MS))
        .application_name("interlock");
    let target = describe(&config);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("interlock-postgres")
        .enable_all()
        .build()
        .map_err(|e| unsafe_ledger(&target, format!("cannot start its I/O thread: {e}")))?;
    let background = Arc::new(Background(Mutex::new(Some(runtime))));
    let writer = PgConn::connect(&config, &target, &background)?;
    check_settings(&writer)?;
    migrate(&writer)?;
    let reader = PgConn::connect(&config, &target, &background)?;
    Ok(Opened {
        target: target.clone(),
        writer: PgWriter {
            conn: writer,
            file: PathBuf::from(&target),
            target,
        },
        reader,
    })
}

impl PgConn {
    fn connect(
        config: &Config,
        target: &str,
        background: &Arc<Background>,
    ) -> Result<PgConn, LedgerError> {
        let handle = {
            let runtime = background.0.lock().unwrap_or_else(|e| e.into_inner());
            runtime
                .as_ref()
                .expect("running until dropped")
                .handle()
                .clone()
        };
        let config = config.clone();
        let connecting = handle.spawn(async move { config.connect(NoTls).await });
        let (client, connection) = pollster::block_on(connecting)
            .map_err(|e| unsafe_ledger(target, format!("its connection task failed: {e}")))?
            .map_err(|e| pg_error(target, e))?;
        let shown = target.to_owned();
        handle.spawn(async move {
            if let Err(error) = connection.await {
                tracing::error!(ledger = %shown, error = %super::sql::postgres_text(&error), "the PostgreSQL connection ended");
            }
        });
        let conn = PgConn {
            client,
            statements: RefCell::new(HashMap::new()),
            target: target.to_owned(),
            _background: Arc::clone(background),
        };
        // Per session, read back by `check_settings`: a commit is durable on the server's disk
        // before it is answered, and every wait is bounded.
        conn.batch(&format!(
            "SET synchronous_commit = on; SET lock_timeout = {PG_LOCK_TIMEOUT_MS};
             SET statement_timeout = {PG_STATEMENT_TIMEOUT_MS};
             SET idle_in_transaction_session_timeout = {PG_IDLE_IN_TRANSACTION_MS};
             SET default_transaction_isolation = 'read committed'"
        ))
        .map_err(|e| pg_error(target, e))?;
        Ok(conn)
    }

    /// Statements without parameters, in one round trip (the simple protocol).
    fn batch(&self, sql: &str) -> Result<(), tokio_postgres::Error> {
        pollster::block_on(self.client.batch_execute(sql))
    }

    fn statement(&self, sql: &str) -> DbResult<Statement> {
        if let Some(statement) = self.statements.borrow().get(sql) {
            return Ok(statement.clone());
        }
        let statement = pollster::block_on(self.client.prepare(&dollar_parameters(sql)))?;
        let mut statements = self.statements.borrow_mut();
        if statements.len() >= PG_STATEMENTS_MAX {
            statements.clear();
        }
        statements.insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }

    /// `f` in one `REPEATABLE READ` read-only transaction: one snapshot for all its reads.
    pub(crate) fn snapshot<T>(&self, f: impl FnOnce(&dyn Sql) -> DbResult<T>) -> DbResult<T> {
        self.batch("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")?;
        let read = f(self);
        let ended = self.batch(if read.is_ok() { "COMMIT" } else { "ROLLBACK" });
        let value = read?;
        ended?;
        Ok(value)
    }

    fn bind(params: &[Val]) -> Vec<&(dyn ToSql + Sync)> {
        params
            .iter()
            .map(|value| value as &(dyn ToSql + Sync))
            .collect()
    }
}

/// `?N` (both dialects' spelling in the ledger's statements) as PostgreSQL's `$N`.
fn dollar_parameters(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '?' && chars.peek().is_some_and(char::is_ascii_digit) {
            out.push('$');
        } else {
            out.push(c);
        }
    }
    out
}

fn pg_row(row: &tokio_postgres::Row) -> DbResult<Row> {
    let convert = |index: usize, error: tokio_postgres::Error| DbError::Convert {
        index,
        problem: error.to_string(),
    };
    let mut values = Vec::with_capacity(row.len());
    for (index, column) in row.columns().iter().enumerate() {
        let ty = column.type_();
        let value = if *ty == Type::INT8 {
            row.try_get::<_, Option<i64>>(index)
                .map(|v| v.map(Val::Int))
        } else if *ty == Type::INT4 {
            row.try_get::<_, Option<i32>>(index)
                .map(|v| v.map(|v| Val::Int(v.into())))
        } else if *ty == Type::INT2 {
            row.try_get::<_, Option<i16>>(index)
                .map(|v| v.map(|v| Val::Int(v.into())))
        } else if *ty == Type::BOOL {
            row.try_get::<_, Option<bool>>(index)
                .map(|v| v.map(|v| Val::Int(v.into())))
        } else if [Type::TEXT, Type::VARCHAR, Type::BPCHAR, Type::NAME].contains(ty) {
            row.try_get::<_, Option<String>>(index)
                .map(|v| v.map(Val::Text))
        } else {
            return Err(DbError::Convert {
                index,
                problem: format!(
                    "column {:?} is of type {ty}, which the ledger does not read (cast it)",
                    column.name()
                ),
            });
        };
        values.push(value.map_err(|e| convert(index, e))?.unwrap_or(Val::Null));
    }
    Ok(Row(values))
}

impl Sql for PgConn {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn target(&self) -> String {
        self.target.clone()
    }

    fn query(&self, sql: &str, params: &[Val]) -> DbResult<Vec<Row>> {
        let statement = self.statement(sql)?;
        let rows = pollster::block_on(self.client.query(&statement, &PgConn::bind(params)))?;
        rows.iter().map(pg_row).collect()
    }

    fn exec(&self, sql: &str, params: &[Val]) -> DbResult<u64> {
        let statement = self.statement(sql)?;
        Ok(pollster::block_on(
            self.client.execute(&statement, &PgConn::bind(params)),
        )?)
    }

    fn each(
        &self,
        sql: &str,
        params: &[Val],
        each: &mut dyn FnMut(&Row) -> DbResult<bool>,
    ) -> DbResult<()> {
        let statement = self.statement(sql)?;
        let rows = pollster::block_on(self.client.query_raw(&statement, params.iter()))?;
        pin_mut!(rows);
        while let Some(row) = pollster::block_on(rows.next()) {
            if !each(&pg_row(&row?)?)? {
                break;
            }
        }
        Ok(())
    }
}

impl ToSql for Val {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            Val::Null => Ok(IsNull::Yes),
            Val::Int(int) if *ty == Type::INT8 => int.to_sql(ty, out),
            Val::Int(int) if *ty == Type::INT4 => i32::try_from(*int)?.to_sql(ty, out),
            Val::Int(int) if *ty == Type::INT2 => i16::try_from(*int)?.to_sql(ty, out),
            Val::Int(0) if *ty == Type::BOOL => false.to_sql(ty, out),
            Val::Int(1) if *ty == Type::BOOL => true.to_sql(ty, out),
            Val::Text(text)
                if [Type::TEXT, Type::VARCHAR, Type::BPCHAR, Type::NAME].contains(ty) =>
            {
                text.as_str().to_sql(ty, out)
            }
            Val::Unbindable(problem) => Err(problem.clone().into()),
            other => Err(format!("{other:?} cannot be bound to a {ty} parameter").into()),
        }
    }

    fn accepts(ty: &Type) -> bool {
        [
            Type::INT8,
            Type::INT4,
            Type::INT2,
            Type::BOOL,
            Type::TEXT,
            Type::VARCHAR,
            Type::BPCHAR,
            Type::NAME,
        ]
        .contains(ty)
    }

    to_sql_checked!();
}

/// Refuses a server that would not keep a commit through a crash, or a session whose settings
/// did not take.
fn check_settings(conn: &PgConn) -> Result<(), LedgerError> {
    let show = |name: &str| -> Result<String, LedgerError> {
        let rows = pollster::block_on(conn.client.simple_query(&format!("SHOW {name}")))
            .map_err(|e| pg_error(&conn.target, e))?;
        rows.iter()
            .find_map(|message| match message {
                tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
                _ => None,
            })
            .ok_or_else(|| unsafe_ledger(&conn.target, format!("SHOW {name} answered nothing")))
    };
    let expected = [
        ("fsync", "on".to_owned()),
        ("full_page_writes", "on".to_owned()),
        ("synchronous_commit", "on".to_owned()),
        ("default_transaction_isolation", "read committed".to_owned()),
        ("lock_timeout", format!("{}s", PG_LOCK_TIMEOUT_MS / 1000)),
        (
            "idle_in_transaction_session_timeout",
            format!("{}s", PG_IDLE_IN_TRANSACTION_MS / 1000),
        ),
    ];
    for (name, wanted) in expected {
        let value = show(name)?;
        if value != wanted {
            return Err(unsafe_ledger(
                &conn.target,
                format!("{name} reads back {value:?}, not {wanted:?}"),
            ));
        }
    }
    Ok(())
}

/// Runs the migrations this build knows past the database's version, under the ledger's lock
/// (two hosts starting at once migrate once), in one transaction.
fn migrate(conn: &PgConn) -> Result<(), LedgerError> {
    let target = conn.target.clone();
    let fail = |e: tokio_postgres::Error| {
        let _ = conn.batch("ROLLBACK");
        pg_error(&target, e)
    };
    conn.batch(&format!(
        "BEGIN ISOLATION LEVEL READ COMMITTED; SELECT pg_advisory_xact_lock({LEDGER_LOCK_KEY});
         CREATE TABLE IF NOT EXISTS interlock_schema (
             id INTEGER PRIMARY KEY CHECK (id = 1),
             version BIGINT NOT NULL CHECK (version >= 0))"
    ))
    .map_err(|e| pg_error(&target, e))?;
    let version: i64 = pollster::block_on(
        conn.client
            .query_opt("SELECT version FROM interlock_schema WHERE id = 1", &[]),
    )
    .map_err(fail)?
    .map(|row| row.get(0))
    .unwrap_or(0);
    if version > PG_SCHEMA_VERSION {
        let _ = conn.batch("ROLLBACK");
        return Err(unsafe_ledger(
            &target,
            format!(
                "schema version {version} was written by a newer Interlock (this one knows {PG_SCHEMA_VERSION}); refusing to touch it"
            ),
        ));
    }
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        conn.batch(sql).map_err(fail)?;
        conn.batch(&format!(
            "INSERT INTO interlock_schema (id, version) VALUES (1, {})
             ON CONFLICT (id) DO UPDATE SET version = excluded.version",
            index + 1
        ))
        .map_err(fail)?;
    }
    conn.batch("COMMIT").map_err(|e| pg_error(&target, e))
}

/// The writing connection as a group-commit store (`writer.rs`).
pub(crate) struct PgWriter {
    conn: PgConn,
    /// The key this ledger is poisoned under (see `Ledger::poisoned`).
    file: PathBuf,
    target: String,
}

impl PgWriter {
    pub(crate) fn conn(&self) -> &PgConn {
        &self.conn
    }

    fn failure(&self, error: &tokio_postgres::Error) -> BatchFailure {
        BatchFailure {
            path: self.target.clone(),
            cause: Cause::Postgres(
                error.code().map(|code| code.code().to_owned()),
                super::sql::postgres_text(error),
            ),
        }
    }

    fn poisoned(&self) -> Option<BatchFailure> {
        poisoned_why(&self.file).map(|why| BatchFailure {
            path: self.target.clone(),
            cause: Cause::Poisoned(why),
        })
    }

    /// Ends this handle's writing: the connection is gone, or a commit's outcome is unknown.
    fn poison(&self, why: String) -> BatchFailure {
        tracing::error!(ledger = %self.target, "{why}");
        mark_poisoned(&self.file, why.clone());
        BatchFailure {
            path: self.target.clone(),
            cause: Cause::Poisoned(why),
        }
    }

    fn run(&self, sql: &str) -> Result<(), BatchFailure> {
        self.conn.batch(sql).map_err(|error| {
            if error.is_closed() || error.as_db_error().is_none() {
                self.poison(format!(
                    "the connection failed ({}); this process writes nothing more and must restart into recovery",
                    super::sql::postgres_text(&error)
                ))
            } else {
                self.failure(&error)
            }
        })
    }

    fn is_busy(failure: &BatchFailure) -> bool {
        matches!(&failure.cause, Cause::Postgres(Some(code), _)
            if [SQLSTATE_LOCK_NOT_AVAILABLE, SQLSTATE_DEADLOCK, SQLSTATE_SERIALIZATION]
                .contains(&code.as_str()))
    }

    pub(crate) fn begin(&mut self) -> Result<(), BatchFailure> {
        if let Some(poisoned) = self.poisoned() {
            return Err(poisoned);
        }
        for _ in 0..APPLY_RETRIES_MAX {
            match self.run(&format!(
                "BEGIN ISOLATION LEVEL READ COMMITTED; SELECT pg_advisory_xact_lock({LEDGER_LOCK_KEY})"
            )) {
                Ok(()) => return Ok(()),
                Err(failure) if PgWriter::is_busy(&failure) => self.rollback(),
                Err(failure) => {
                    self.rollback();
                    return Err(failure);
                }
            }
        }
        Err(BatchFailure {
            path: self.target.clone(),
            cause: Cause::Busy,
        })
    }

    pub(crate) fn commit(&mut self) -> Result<(), BatchFailure> {
        if let Some(poisoned) = self.poisoned() {
            return Err(poisoned);
        }
        // The chaos matrix stops the process here (`pg_commit=1*return(stop)`) and kills the
        // database server before it continues: the COMMIT then goes to a dead server.
        #[cfg(feature = "failpoints")]
        if let Some(Some(error)) = fail::eval("pg_commit", |arg: Option<String>| {
            crate::executor::at_kill_point("pg_commit", arg.as_deref())
        }) {
            return Err(self.poison(format!("{error} before its COMMIT")));
        }
        match self.conn.batch("COMMIT") {
            Ok(()) => Ok(()),
            // The server answered: it did not commit (a deferred check failed, say).
            Err(error) if error.as_db_error().is_some() && !error.is_closed() => {
                Err(self.failure(&error))
            }
            // No answer: committed or not, nobody here knows.
            Err(error) => Err(self.poison(format!(
                "a COMMIT went unanswered ({}); what it wrote is for recovery to read",
                super::sql::postgres_text(&error)
            ))),
        }
    }

    pub(crate) fn rollback(&mut self) {
        if let Err(error) = self.conn.batch("ROLLBACK")
            && (error.is_closed() || error.as_db_error().is_none())
        {
            self.poison(format!(
                "a batch could not be rolled back: {}",
                super::sql::postgres_text(&error)
            ));
        }
    }

    pub(crate) fn enter(&mut self) -> Result<(), BatchFailure> {
        self.run("SAVEPOINT job")
    }

    pub(crate) fn keep(&mut self) -> Result<(), BatchFailure> {
        self.run("RELEASE SAVEPOINT job")
    }

    pub(crate) fn undo(&mut self) -> Result<(), BatchFailure> {
        if let Some(poisoned) = self.poisoned() {
            return Err(poisoned);
        }
        self.run("ROLLBACK TO SAVEPOINT job; RELEASE SAVEPOINT job")
    }

    pub(crate) fn abandoned(&self) -> BatchFailure {
        BatchFailure {
            path: self.target.clone(),
            cause: Cause::Abandoned,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::dollar_parameters;

    #[test]
    fn question_mark_parameters_become_dollar_parameters_and_nothing_else_moves() {
        assert_eq!(
            dollar_parameters("SELECT ?1, ?12 FROM t WHERE a = ?2 AND b IS NOT DISTINCT FROM ?3"),
            "SELECT $1, $12 FROM t WHERE a = $2 AND b IS NOT DISTINCT FROM $3"
        );
        assert_eq!(dollar_parameters("SELECT '?' || x"), "SELECT '?' || x");
    }
}
