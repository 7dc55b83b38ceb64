//! One way to run the ledger's statements on either backend (issue 20): SQLite through
//! `rusqlite`, PostgreSQL through `tokio-postgres` (`postgres.rs`). Every statement of the
//! ledger is written once, in the subset both dialects read the same way (`?N` parameters,
//! `IS NOT DISTINCT FROM`, `CASE` for a scalar maximum, `CAST(sum(..) AS BIGINT)`); the
//! PostgreSQL side rewrites `?N` into `$N` and nothing else. The two statements that need a
//! JSON function ask for the [`Dialect`] and are written in both, side by side.
//!
//! Values cross as [`Val`] (null, a signed 64-bit integer, text): every column of the schema is
//! one of those, so a row reads the same whichever backend it came from. A `u64` over
//! `i64::MAX` is refused at bind time, never wrapped.

use std::fmt;

/// Which SQL a backend speaks, for the few statements written twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    Sqlite,
    Postgres,
}

/// A parameter or a column value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Val {
    Null,
    Int(i64),
    Text(String),
    /// A value that has no column type: bound, it fails with this message.
    Unbindable(String),
}

/// Why a statement failed or a row did not read.
#[derive(Debug)]
pub(crate) enum DbError {
    Sqlite(rusqlite::Error),
    Postgres(tokio_postgres::Error),
    /// The query returned no row where one was expected.
    NoRows,
    /// A value did not fit the type asked for, or a row held what the schema refuses.
    Convert {
        index: usize,
        problem: String,
    },
    /// A parameter could not be bound.
    Bind(String),
}

pub(crate) type DbResult<T> = Result<T, DbError>;

impl fmt::Display for DbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DbError::Sqlite(error) => write!(f, "{error}"),
            DbError::Postgres(error) => write!(f, "{}", postgres_text(error)),
            DbError::NoRows => write!(f, "the query returned no row"),
            DbError::Convert { index, problem } => write!(f, "column {index}: {problem}"),
            DbError::Bind(problem) => write!(f, "a parameter cannot be bound: {problem}"),
        }
    }
}

/// PostgreSQL's error with its server message, code and detail (the plain `Display` says only
/// "db error").
pub(crate) fn postgres_text(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => {
            let mut text = format!("{} ({})", db.message(), db.code().code());
            if let Some(detail) = db.detail() {
                text.push_str(": ");
                text.push_str(detail);
            }
            text
        }
        None => match std::error::Error::source(error) {
            Some(cause) => format!("{error}: {cause}"),
            None => error.to_string(),
        },
    }
}

impl From<rusqlite::Error> for DbError {
    fn from(error: rusqlite::Error) -> DbError {
        match error {
            rusqlite::Error::QueryReturnedNoRows => DbError::NoRows,
            other => DbError::Sqlite(other),
        }
    }
}

impl From<tokio_postgres::Error> for DbError {
    fn from(error: tokio_postgres::Error) -> DbError {
        DbError::Postgres(error)
    }
}

/// A row, read whole.
#[derive(Debug, Clone)]
pub(crate) struct Row(pub(crate) Vec<Val>);

impl Row {
    /// Column `index` as `T`.
    pub(crate) fn get<T: FromVal>(&self, index: usize) -> DbResult<T> {
        let value = self.0.get(index).ok_or_else(|| DbError::Convert {
            index,
            problem: format!("the row has {} columns", self.0.len()),
        })?;
        T::from_val(value).map_err(|problem| DbError::Convert { index, problem })
    }
}

/// A Rust value a column converts into.
pub(crate) trait FromVal: Sized {
    fn from_val(value: &Val) -> Result<Self, String>;
}

impl FromVal for i64 {
    fn from_val(value: &Val) -> Result<i64, String> {
        match value {
            Val::Int(int) => Ok(*int),
            other => Err(format!("expected an integer, read {other:?}")),
        }
    }
}

macro_rules! from_int {
    ($($t:ty),*) => {$(
        impl FromVal for $t {
            fn from_val(value: &Val) -> Result<$t, String> {
                let int = i64::from_val(value)?;
                <$t>::try_from(int).map_err(|_| {
                    format!("{int} is out of range for {}", stringify!($t))
                })
            }
        }
    )*};
}
from_int!(u64, u32, u8, usize, i32);

impl FromVal for bool {
    fn from_val(value: &Val) -> Result<bool, String> {
        match i64::from_val(value)? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(format!("{other} is not a boolean (0 or 1)")),
        }
    }
}

impl FromVal for String {
    fn from_val(value: &Val) -> Result<String, String> {
        match value {
            Val::Text(text) => Ok(text.clone()),
            other => Err(format!("expected text, read {other:?}")),
        }
    }
}

impl<T: FromVal> FromVal for Option<T> {
    fn from_val(value: &Val) -> Result<Option<T>, String> {
        match value {
            Val::Null => Ok(None),
            other => T::from_val(other).map(Some),
        }
    }
}

/// A Rust value a parameter is bound from.
pub(crate) trait ToVal {
    fn to_val(&self) -> Val;
}

impl ToVal for i64 {
    fn to_val(&self) -> Val {
        Val::Int(*self)
    }
}

macro_rules! to_int {
    ($($t:ty),*) => {$(
        impl ToVal for $t {
            fn to_val(&self) -> Val {
                match i64::try_from(*self) {
                    Ok(int) => Val::Int(int),
                    Err(_) => Val::Unbindable(format!("{self} is over i64::MAX")),
                }
            }
        }
    )*};
}
to_int!(u64, u32, u8, usize, i32);

impl ToVal for bool {
    fn to_val(&self) -> Val {
        Val::Int(i64::from(*self))
    }
}

impl ToVal for str {
    fn to_val(&self) -> Val {
        Val::Text(self.to_owned())
    }
}

impl ToVal for String {
    fn to_val(&self) -> Val {
        Val::Text(self.clone())
    }
}

impl<T: ToVal + ?Sized> ToVal for &T {
    fn to_val(&self) -> Val {
        (**self).to_val()
    }
}

impl<T: ToVal> ToVal for Option<T> {
    fn to_val(&self) -> Val {
        match self {
            Some(value) => value.to_val(),
            None => Val::Null,
        }
    }
}

/// The parameters of a statement, in order (`?1` is the first).
macro_rules! params {
    () => { &[] as &[$crate::ledger::sql::Val] };
    ($($value:expr),+ $(,)?) => {
        &[$($crate::ledger::sql::ToVal::to_val(&$value)),+] as &[$crate::ledger::sql::Val]
    };
}
pub(crate) use params;

/// A connection (or a transaction on one) that runs the ledger's statements.
pub(crate) trait Sql {
    /// Which SQL it speaks.
    fn dialect(&self) -> Dialect;
    /// What messages call the ledger: its file, or the server and database.
    fn target(&self) -> String;
    /// Every row of `sql`.
    fn query(&self, sql: &str, params: &[Val]) -> DbResult<Vec<Row>>;
    /// Runs `sql` and says how many rows it changed.
    fn exec(&self, sql: &str, params: &[Val]) -> DbResult<u64>;
    /// Calls `each` with every row of `sql` in turn without holding them all, until it answers
    /// false (the audit walk reads a whole log this way).
    fn each(
        &self,
        sql: &str,
        params: &[Val],
        each: &mut dyn FnMut(&Row) -> DbResult<bool>,
    ) -> DbResult<()>;
}

impl dyn Sql + '_ {
    /// The first row of `sql` through `f`, or [`DbError::NoRows`].
    pub(crate) fn row<T>(
        &self,
        sql: &str,
        params: &[Val],
        f: impl FnOnce(&Row) -> DbResult<T>,
    ) -> DbResult<T> {
        let rows = self.query(sql, params)?;
        f(rows.first().ok_or(DbError::NoRows)?)
    }
}

/// `Ok(None)` for no row.
pub(crate) trait Optional<T> {
    fn optional(self) -> DbResult<Option<T>>;
}

impl<T> Optional<T> for DbResult<T> {
    fn optional(self) -> DbResult<Option<T>> {
        match self {
            Ok(value) => Ok(Some(value)),
            Err(DbError::NoRows) => Ok(None),
            Err(error) => Err(error),
        }
    }
}

// ---- SQLite ----

impl rusqlite::ToSql for Val {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        match self {
            Val::Null => Ok(ToSqlOutput::Borrowed(ValueRef::Null)),
            Val::Int(int) => Ok(ToSqlOutput::Borrowed(ValueRef::Integer(*int))),
            Val::Text(text) => Ok(ToSqlOutput::Borrowed(ValueRef::Text(text.as_bytes()))),
            Val::Unbindable(problem) => Err(rusqlite::Error::ToSqlConversionFailure(
                problem.clone().into(),
            )),
        }
    }
}

fn sqlite_row(row: &rusqlite::Row<'_>) -> DbResult<Row> {
    use rusqlite::types::ValueRef;
    let count = row.as_ref().column_count();
    let mut values = Vec::with_capacity(count);
    for index in 0..count {
        values.push(match row.get_ref(index)? {
            ValueRef::Null => Val::Null,
            ValueRef::Integer(int) => Val::Int(int),
            ValueRef::Text(bytes) => Val::Text(
                std::str::from_utf8(bytes)
                    .map_err(|e| DbError::Convert {
                        index,
                        problem: e.to_string(),
                    })?
                    .to_owned(),
            ),
            other => {
                return Err(DbError::Convert {
                    index,
                    problem: format!("a {:?} value: the schema has none", other.data_type()),
                });
            }
        });
    }
    Ok(Row(values))
}

impl Sql for rusqlite::Connection {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn target(&self) -> String {
        self.path().unwrap_or("?").to_owned()
    }

    fn query(&self, sql: &str, params: &[Val]) -> DbResult<Vec<Row>> {
        let mut rows = Vec::new();
        self.each(sql, params, &mut |row| {
            rows.push(row.clone());
            Ok(true)
        })?;
        Ok(rows)
    }

    fn exec(&self, sql: &str, params: &[Val]) -> DbResult<u64> {
        let changed = self
            .prepare_cached(sql)?
            .execute(rusqlite::params_from_iter(params))?;
        Ok(changed as u64)
    }

    fn each(
        &self,
        sql: &str,
        params: &[Val],
        each: &mut dyn FnMut(&Row) -> DbResult<bool>,
    ) -> DbResult<()> {
        let mut statement = self.prepare_cached(sql)?;
        let mut rows = statement.query(rusqlite::params_from_iter(params))?;
        while let Some(row) = rows.next()? {
            if !each(&sqlite_row(row)?)? {
                break;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_u64_over_i64_max_is_refused_not_wrapped() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        let sql: &dyn Sql = &conn;
        let error = sql.query("SELECT ?1", params![u64::MAX]).unwrap_err();
        assert!(error.to_string().contains("over i64::MAX"), "{error}");
        let row = sql
            .row(
                "SELECT ?1, ?2, ?3",
                params![7u64, "x", None::<i64>],
                |row| {
                    Ok((
                        row.get::<u64>(0)?,
                        row.get::<String>(1)?,
                        row.get::<Option<i64>>(2)?,
                    ))
                },
            )
            .unwrap();
        assert_eq!(row, (7, "x".to_owned(), None));
    }

    #[test]
    fn a_value_of_the_wrong_type_is_an_error_naming_its_column() {
        let row = Row(vec![Val::Text("7".into()), Val::Int(-1)]);
        assert!(
            row.get::<i64>(0)
                .unwrap_err()
                .to_string()
                .starts_with("column 0")
        );
        assert!(
            row.get::<u64>(1)
                .unwrap_err()
                .to_string()
                .contains("out of range")
        );
        assert!(row.get::<bool>(1).is_err());
        assert!(
            row.get::<String>(2)
                .unwrap_err()
                .to_string()
                .contains("2 columns")
        );
    }
}
