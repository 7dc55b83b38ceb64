//! Where a trial's ledger lives (a SQLite file, or a database on a PostgreSQL server), and
//! reading it while the trial's proxies run, without writing: the snapshots and the verdict's
//! facts are read with plain SQL over either backend, as text.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The ledger a trial's proxies share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LedgerAt {
    /// A SQLite file.
    File(PathBuf),
    /// A PostgreSQL connection string.
    Postgres(String),
}

/// SQLSTATE `undefined_table`: no proxy has made the schema yet, which reads as an empty
/// ledger, like a file not yet created.
const SQLSTATE_UNDEFINED_TABLE: &str = "42P01";
/// How long a read may wait to connect (the server may be down in a server-kill cell).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

impl LedgerAt {
    /// `interlock … --db` this.
    pub fn arg(&self) -> OsString {
        match self {
            LedgerAt::File(path) => path.clone().into_os_string(),
            LedgerAt::Postgres(url) => url.into(),
        }
    }

    /// The engine's handle, for the verdict once every process of the trial has stopped.
    pub fn open(&self) -> Result<interlock_engine::Ledger, String> {
        let opened = match self {
            LedgerAt::File(path) => interlock_engine::Ledger::open(path),
            LedgerAt::Postgres(url) => interlock_engine::Ledger::open_postgres(url),
        };
        opened.map_err(|e| format!("cannot open the ledger: {e}"))
    }
}

/// Rows as text (`None` for SQL NULL), the way both backends can give them.
pub type TextRows = Vec<Vec<Option<String>>>;

/// A reader of one ledger. On PostgreSQL it keeps one connection (a trial polls every 100 ms)
/// and makes a new one after the old one broke.
pub struct Reader {
    at: LedgerAt,
    client: Option<tokio_postgres::Client>,
}

impl Reader {
    /// A reader of `at`; nothing is opened yet.
    pub fn new(at: LedgerAt) -> Reader {
        Reader { at, client: None }
    }

    /// What `sql` selects, or `None` when there is no ledger yet (no file, no schema).
    pub async fn rows(&mut self, sql: &str) -> Result<Option<TextRows>, String> {
        match &self.at {
            LedgerAt::File(path) => sqlite_rows(path, sql),
            LedgerAt::Postgres(url) => {
                let url = url.clone();
                self.postgres_rows(&url, sql).await
            }
        }
    }

    async fn postgres_rows(&mut self, url: &str, sql: &str) -> Result<Option<TextRows>, String> {
        if self
            .client
            .as_ref()
            .is_none_or(tokio_postgres::Client::is_closed)
        {
            let mut config: tokio_postgres::Config = url
                .parse()
                .map_err(|e| format!("the ledger's connection string: {e}"))?;
            config.connect_timeout(CONNECT_TIMEOUT);
            let (client, connection) = config
                .connect(tokio_postgres::NoTls)
                .await
                .map_err(|e| format!("cannot connect to the ledger: {e}"))?;
            tokio::spawn(connection);
            self.client = Some(client);
        }
        let client = self.client.as_ref().expect("connected above");
        let messages = match client.simple_query(sql).await {
            Ok(messages) => messages,
            Err(e)
                if e.code().map(tokio_postgres::error::SqlState::code)
                    == Some(SQLSTATE_UNDEFINED_TABLE) =>
            {
                return Ok(None);
            }
            Err(e) => return Err(format!("cannot read the ledger: {e}")),
        };
        let rows = messages
            .into_iter()
            .filter_map(|message| match message {
                tokio_postgres::SimpleQueryMessage::Row(row) => Some(
                    (0..row.len())
                        .map(|i| row.get(i).map(str::to_owned))
                        .collect(),
                ),
                _ => None,
            })
            .collect();
        Ok(Some(rows))
    }
}

fn sqlite_rows(path: &Path, sql: &str) -> Result<Option<TextRows>, String> {
    use rusqlite::types::ValueRef;
    if !path.exists() {
        return Ok(None);
    }
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .map_err(|e| format!("cannot open {} read-only: {e}", path.display()))?;
    conn.busy_timeout(Duration::from_secs(5))
        .map_err(|e| format!("busy timeout: {e}"))?;
    let read = |e: rusqlite::Error| format!("cannot read the ledger: {e}");
    let mut statement = conn.prepare(sql).map_err(read)?;
    let columns = statement.column_count();
    let rows = statement
        .query_map([], |row| {
            (0..columns)
                .map(|i| {
                    Ok(match row.get_ref(i)? {
                        ValueRef::Null => None,
                        ValueRef::Integer(n) => Some(n.to_string()),
                        ValueRef::Real(x) => Some(x.to_string()),
                        ValueRef::Text(t) | ValueRef::Blob(t) => {
                            Some(String::from_utf8_lossy(t).into_owned())
                        }
                    })
                })
                .collect::<rusqlite::Result<Vec<_>>>()
        })
        .and_then(Iterator::collect::<rusqlite::Result<TextRows>>)
        .map_err(read)?;
    Ok(Some(rows))
}
