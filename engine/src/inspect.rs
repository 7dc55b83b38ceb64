//! Read-only views of the ledger for operators (`interlock ledger show`): one intent with
//! everything recorded about it. Rows come back as JSON objects keyed by column name, so a
//! column added by a migration shows up without a change here; `*_json` columns are parsed.

use crate::ledger::{Ledger, LedgerError};
use interlock_spec::ids::Sik;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, params};
use serde_json::{Map, Value};

/// Everything the ledger holds about one intent.
#[derive(Debug, Clone, PartialEq)]
pub struct IntentDetail {
    /// The `intents` row.
    pub intent: Value,
    /// The gate decisions made on its key, oldest first (with every gate's verdict).
    pub decisions: Vec<Value>,
    /// Its rail attempts, in order.
    pub attempts: Vec<Value>,
    /// What each reconcile pass found, oldest first.
    pub findings: Vec<Value>,
    /// Its audit records, in chain order (approvals and resolutions say who and why).
    pub audit: Vec<Value>,
}

fn cell(name: &str, value: ValueRef<'_>) -> Value {
    match value {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(n) => Value::from(n),
        ValueRef::Real(x) => Value::from(x),
        ValueRef::Text(bytes) => {
            let text = String::from_utf8_lossy(bytes);
            if name.ends_with("_json")
                && let Ok(parsed) = serde_json::from_str::<Value>(&text)
            {
                return parsed;
            }
            Value::String(text.into_owned())
        }
        // The schema has no BLOB column; one from a hand edit is shown, not refused.
        ValueRef::Blob(bytes) => Value::String(bytes.iter().map(|b| format!("{b:02x}")).collect()),
    }
}

fn rows(conn: &Connection, sql: &str, merchant: &str, sik: &str) -> rusqlite::Result<Vec<Value>> {
    let mut statement = conn.prepare(sql)?;
    let names: Vec<String> = statement.column_names().map(str::to_owned).collect();
    let mut out = Vec::new();
    let mut query = statement.query(params![merchant, sik])?;
    while let Some(row) = query.next()? {
        let mut object = Map::new();
        for (index, name) in names.iter().enumerate() {
            object.insert(name.clone(), cell(name, row.get_ref(index)?));
        }
        out.push(Value::Object(object));
    }
    Ok(out)
}

impl Ledger {
    /// Every intent with this SIK (one per merchant account that has it; in practice one), in
    /// full. Empty if there is none.
    pub fn intent_detail(&self, sik: &Sik) -> Result<Vec<IntentDetail>, LedgerError> {
        let conn = self.conn();
        let read = || -> rusqlite::Result<Vec<IntentDetail>> {
            let mut merchants = conn
                .prepare("SELECT merchant_id FROM intents WHERE sik = ?1 ORDER BY merchant_id")?;
            let merchants = merchants
                .query_map(params![sik.as_str()], |row| row.get::<_, String>(0))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let mut details = Vec::with_capacity(merchants.len());
            for merchant in &merchants {
                let one = |sql: &str| rows(&conn, sql, merchant, sik.as_str());
                let intent = one("SELECT * FROM intents WHERE merchant_id = ?1 AND sik = ?2")?
                    .into_iter()
                    .next()
                    .unwrap_or(Value::Null);
                details.push(IntentDetail {
                    intent,
                    decisions: one(
                        "SELECT * FROM decisions WHERE merchant_id = ?1 AND sik = ?2 ORDER BY id",
                    )?,
                    attempts: one(
                        "SELECT * FROM intent_attempts WHERE merchant_id = ?1 AND sik = ?2
                         ORDER BY attempt_seq",
                    )?,
                    findings: one(
                        "SELECT * FROM recon_findings WHERE merchant_id = ?1 AND sik = ?2
                         ORDER BY id",
                    )?,
                    // An intent's records name it in their machine record: the inserted core,
                    // or the core a transition left.
                    audit: one("SELECT seq, ts, kind, payload_json, hash FROM audit_log
                         WHERE json_extract(payload_json, '$.merchant_id') = ?1
                           AND coalesce(json_extract(payload_json, '$.record.core.sik'),
                                        json_extract(payload_json, '$.record.from.sik')) = ?2
                         ORDER BY seq")?,
                });
            }
            Ok(details)
        };
        read().map_err(|e| self.err(e))
    }
}
