//! What G2 and G3 count, read inside the write transaction that inserts a new intent.
//!
//! A sliding window is summed from per-minute buckets (kept by triggers in the same
//! transaction as each state change) for its whole minutes, plus an exact scan of the intents
//! in its first, partial minute: exact, and a cost that grows with the window's length in
//! minutes rather than with the number of intents in it. Debug builds check every figure
//! against a full scan.

use crate::gates::{Usage, WindowUsage};
use crate::ledger::IntentKey;
use crate::ledger::sql::{DbError, DbResult, Dialect, Sql, params};
use interlock_machine::State;
use interlock_spec::action::ProposedAction;
use interlock_spec::ids::ToolName;
use interlock_spec::mandate::Mandate;
use interlock_spec::money::{Currency, Minor};
use std::collections::BTreeMap;

/// The bucket width of the pre-summed windows.
pub const BUCKET_MS: u64 = 60_000;

const COUNTED: &str = "state IN (SELECT state FROM counted_states)";

/// The amount an intent counts in the windows: what was authorised, or what the rail moved when
/// that is more (ADR 0008). The window triggers of migration 0004 count the same expression.
const WINDOWED: &str =
    "CASE WHEN coalesce(moved_minor, 0) > amount_minor THEN moved_minor ELSE amount_minor END";

/// Reads the usage `action` is judged against at `now`. `exclude` is an intent already in the
/// ledger that is being judged again (an approval): it must not count against itself.
pub(crate) fn read(
    conn: &dyn Sql,
    mandate: &Mandate,
    action: &ProposedAction,
    subject: &str,
    currency: Currency,
    now: u64,
    exclude: Option<&IntentKey>,
) -> DbResult<Usage> {
    let mut usage = read_all(conn, mandate, action, subject, currency, now)?;
    if let Some(key) = exclude {
        subtract_self(conn, mandate, action, subject, now, key, &mut usage)?;
    }
    Ok(usage)
}

/// An intent's own contribution: state, amount, counted_at, currency, subject, kind, tool, and
/// the amount its windows count (the larger of the authorised and what the rail moved).
type OwnRow = (
    String,
    u64,
    Option<u64>,
    String,
    String,
    String,
    String,
    u64,
);

fn subtract_self(
    conn: &dyn Sql,
    mandate: &Mandate,
    action: &ProposedAction,
    subject: &str,
    now: u64,
    key: &IntentKey,
    usage: &mut Usage,
) -> DbResult<()> {
    let own: Option<OwnRow> = conn
        .row(
            &format!(
                "SELECT state, amount_minor, counted_at, currency, subject_id, kind, tool,
                    {WINDOWED}
                 FROM intents WHERE merchant_id = ?1 AND sik = ?2 AND {COUNTED}"
            ),
            params![key.merchant_id.as_str(), key.sik.as_str()],
            |row| {
                Ok(Some((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                    row.get(5)?,
                    row.get(6)?,
                    row.get(7)?,
                )))
            },
        )
        .or_else(|e| match e {
            DbError::NoRows => Ok(None),
            e => Err(e),
        })?;
    let Some((state, amount, counted_at, currency, own_subject, kind, tool, counted)) = own else {
        return Ok(());
    };
    let less = |minor: Minor, by: u64| Minor::new(minor.get().saturating_sub(by)).unwrap_or(minor);
    for (window, used) in mandate.limits.windows.iter().zip(usage.windows.iter_mut()) {
        let since = now.saturating_sub(window.window_ms);
        let counted_here = ToolName::parse(&tool).is_ok_and(|tool| window.counts(&tool));
        if window.currency.as_str() == currency
            && counted_here
            && counted_at.is_some_and(|at| at > since)
        {
            used.calls = used.calls.saturating_sub(1);
            used.amount = less(used.amount, counted);
        }
    }
    if own_subject == subject && kind == action.kind.as_str() {
        if state != State::Applied.as_str() {
            usage.subject_in_progress = less(usage.subject_in_progress, amount);
        }
        if tool == action.tool.as_str() {
            usage.subject_count = usage.subject_count.saturating_sub(1);
        }
    }
    Ok(())
}

fn read_all(
    conn: &dyn Sql,
    mandate: &Mandate,
    action: &ProposedAction,
    subject: &str,
    currency: Currency,
    now: u64,
) -> DbResult<Usage> {
    let merchant = action.merchant_id.as_str();
    let mut windows = Vec::with_capacity(mandate.limits.windows.len());
    for window in &mandate.limits.windows {
        let since = now.saturating_sub(window.window_ms);
        let currency = window.currency.as_str();
        let (calls, amount) = match &window.tools {
            None => window_usage(conn, merchant, currency, since)?,
            Some(tools) => scoped_window_usage(conn, merchant, currency, since, tools)?,
        };
        windows.push(WindowUsage {
            calls: u32::try_from(calls).unwrap_or(u32::MAX),
            amount: Minor::new(amount).unwrap_or(Minor::MAX),
        });
    }
    let mut fees = BTreeMap::new();
    if let Some(budget) = mandate.limits.fee_budgets.get(&currency) {
        let since = now.saturating_sub(budget.window_ms);
        let spent = fees_spent(conn, merchant, currency.as_str(), since)?;
        fees.insert(currency, Minor::new(spent).unwrap_or(Minor::MAX));
    }
    let (in_progress, count): (u64, u32) = conn.row(
        &format!(
            "SELECT CAST(coalesce(sum(CASE WHEN state <> ?5 THEN amount_minor END), 0) AS BIGINT),
                    count(CASE WHEN tool = ?4 THEN 1 END)
             FROM intents
             WHERE merchant_id = ?1 AND subject_id = ?2 AND kind = ?3 AND {COUNTED}"
        ),
        params![
            merchant,
            subject,
            action.kind.as_str(),
            action.tool.as_str(),
            State::Applied.as_str()
        ],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )?;
    Ok(Usage {
        windows,
        fees,
        subject_in_progress: Minor::new(in_progress).unwrap_or(Minor::MAX),
        subject_count: count,
    })
}

/// Calls and amount of intents counted after `since`.
fn window_usage(
    conn: &dyn Sql,
    merchant: &str,
    currency: &str,
    since: u64,
) -> DbResult<(u64, u64)> {
    // Minutes wholly after `since` come from the buckets; the minute holding `since` is scanned.
    let first_whole = since / BUCKET_MS + 1;
    let (bucket_calls, bucket_amount): (u64, u64) = conn.row(
        "SELECT CAST(coalesce(sum(calls), 0) AS BIGINT),
                CAST(coalesce(sum(amount_minor), 0) AS BIGINT) FROM window_buckets
         WHERE merchant_id = ?1 AND currency = ?2 AND minute >= ?3",
        params![merchant, currency, first_whole],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )?;
    let (edge_calls, edge_amount): (u64, u64) = conn.row(
        &format!(
            "SELECT count(*), CAST(coalesce(sum({WINDOWED}), 0) AS BIGINT) FROM intents
             WHERE merchant_id = ?1 AND currency = ?2 AND counted_at > ?3
               AND counted_at < ?4 AND {COUNTED}"
        ),
        params![merchant, currency, since, first_whole * BUCKET_MS],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )?;
    let usage = (bucket_calls + edge_calls, bucket_amount + edge_amount);
    if cfg!(debug_assertions) {
        let scanned: (u64, u64) = conn.row(
            &format!(
                "SELECT count(*), CAST(coalesce(sum({WINDOWED}), 0) AS BIGINT) FROM intents
                 WHERE merchant_id = ?1 AND currency = ?2 AND counted_at > ?3 AND {COUNTED}"
            ),
            params![merchant, currency, since],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )?;
        assert_eq!(usage, scanned, "window buckets disagree with the intents");
    }
    Ok(usage)
}

/// Calls and amount of intents of `tools` counted after `since`. A scoped window is written
/// for a tool called a few times a day (instant settlements), so it is summed by a scan of the
/// window's intents rather than from the per-minute buckets, which do not know the tool.
fn scoped_window_usage(
    conn: &dyn Sql,
    merchant: &str,
    currency: &str,
    since: u64,
    tools: &[ToolName],
) -> DbResult<(u64, u64)> {
    let names: Vec<&str> = tools.iter().map(ToolName::as_str).collect();
    let names = serde_json::to_string(&names).expect("a list of names serializes");
    // The one statement of this module that needs a JSON function: the tool list is one
    // parameter, unpacked by each dialect's own.
    let tools_of = match conn.dialect() {
        Dialect::Sqlite => "SELECT value FROM json_each(?4)",
        Dialect::Postgres => "SELECT jsonb_array_elements_text(CAST(CAST(?4 AS TEXT) AS jsonb))",
    };
    conn.row(
        &format!(
            "SELECT count(*), CAST(coalesce(sum({WINDOWED}), 0) AS BIGINT) FROM intents
             WHERE merchant_id = ?1 AND currency = ?2 AND counted_at > ?3 AND {COUNTED}
               AND tool IN ({tools_of})"
        ),
        params![merchant, currency, since, names],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )
}

/// Fees and tax charged on attempts that ended after `since`.
fn fees_spent(conn: &dyn Sql, merchant: &str, currency: &str, since: u64) -> DbResult<u64> {
    let first_whole = since / BUCKET_MS + 1;
    let buckets: u64 = conn.row(
        "SELECT CAST(coalesce(sum(fee_minor), 0) AS BIGINT) FROM fee_buckets
         WHERE merchant_id = ?1 AND currency = ?2 AND minute >= ?3",
        params![merchant, currency, first_whole],
        |row| row.get(0),
    )?;
    let charged = |upper: Option<u64>| -> DbResult<u64> {
        conn.row(
            "SELECT CAST(coalesce(sum(a.fee_minor + a.tax_minor), 0) AS BIGINT)
             FROM intent_attempts a JOIN intents i USING (merchant_id, sik)
             WHERE a.merchant_id = ?1 AND a.finished_at > ?3 AND a.finished_at < ?4
               AND a.fee_minor + a.tax_minor > 0 AND i.currency = ?2",
            params![merchant, currency, since, upper.unwrap_or(u64::MAX >> 1)],
            |row| row.get(0),
        )
    };
    let spent = buckets + charged(Some(first_whole * BUCKET_MS))?;
    if cfg!(debug_assertions) {
        assert_eq!(
            spent,
            charged(None)?,
            "fee buckets disagree with the attempts"
        );
    }
    Ok(spent)
}
