//! Typed reads of the ledger for the driver: an intent as one [`IntentView`], and the keys the
//! sweep must look at. State groups in this SQL come from `interlock_machine::State`'s own
//! predicates, never typed by hand.

use crate::ledger::sql::{DbError, DbResult, Optional, Sql, params};
use crate::ledger::{IntentKey, parse_key, read_row};
use interlock_driver::plan::{AttemptView, IntentView};
use interlock_driver::rail::RailCall;
use interlock_machine::State;

/// Reason, call, distinct reason, mandate hash, reconcile time, moved amount.
type IntentColumns = (
    String,
    String,
    Option<String>,
    String,
    Option<u64>,
    Option<u64>,
);

/// The intent under `key` with its current attempt, or `None`.
pub(crate) fn read_intent(conn: &dyn Sql, key: &IntentKey) -> DbResult<Option<IntentView>> {
    let Some(row) = read_row(conn, key)? else {
        return Ok(None);
    };
    let (reason, call, distinct_reason, mandate_hash, not_before, moved_minor): IntentColumns =
        conn.row(
            "SELECT reason, call_json, distinct_reason, mandate_hash, reconcile_not_before,
                moved_minor
             FROM intents WHERE merchant_id = ?1 AND sik = ?2",
            params![key.merchant_id.as_str(), key.sik.as_str()],
            |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                    row.get(5)?,
                ))
            },
        )?;
    let call: RailCall = serde_json::from_str(&call).map_err(|e| DbError::Convert {
        index: 1,
        problem: format!("intents.call_json: {e}"),
    })?;
    let attempt = conn
        .row(
            "SELECT started_at, finished_at, outcome, detail FROM intent_attempts
             WHERE merchant_id = ?1 AND sik = ?2 AND attempt_seq = ?3",
            params![
                key.merchant_id.as_str(),
                key.sik.as_str(),
                row.core.attempt_seq
            ],
            |row| {
                Ok(AttemptView {
                    started_at: row.get(0)?,
                    finished_at: row.get(1)?,
                    outcome: row.get(2)?,
                    detail: row.get(3)?,
                })
            },
        )
        .optional()?;
    Ok(Some(IntentView {
        key: key.clone(),
        core: row.core,
        lease_owner: row.lease_owner,
        lease_expires_at: row.lease_expires_at,
        reconcile_not_before: not_before,
        reason,
        call,
        distinct_reason,
        mandate_hash,
        attempt,
        moved_minor,
    }))
}

/// Keys of intents the sweep must look at, oldest first, at most `limit`.
pub(crate) fn sweep_candidates(
    conn: &dyn Sql,
    now_ms: u64,
    due_only: bool,
    limit: usize,
) -> DbResult<Vec<IntentKey>> {
    let leased = State::sql_list(State::holds_lease);
    let awaiting = State::sql_list(State::awaits_reconcile);
    let condition = if due_only {
        format!(
            "(state IN ({leased}) AND lease_expires_at <= ?1)
             OR (state IN ({awaiting}) AND coalesce(reconcile_not_before, 0) <= ?1)"
        )
    } else {
        format!("state IN ({leased}, {awaiting}) AND CAST(?1 AS BIGINT) >= 0")
    };
    let sql = format!(
        "SELECT merchant_id, sik FROM intents WHERE {condition} ORDER BY updated_at, sik LIMIT ?2"
    );
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = conn.query(&sql, params![now_ms, limit])?;
    rows.iter()
        .map(|row| {
            parse_key(&row.get::<String>(0)?, &row.get::<String>(1)?).map_err(|e| {
                DbError::Convert {
                    index: 0,
                    problem: e.to_string(),
                }
            })
        })
        .collect()
}
