//! The hash-chained audit log.
//!
//! `hash = sha256(prev_hash + "\n" + canonical_json({seq, ts, kind, payload}))`, starting from
//! [`genesis`], with `seq` gapless from 1 and the head (last seq and hash) kept in `audit_head`
//! in the same transaction. [`verify`] walks the log and names the first seq that does not hold:
//! an edited byte, a deleted row, two swapped rows and a truncated tail are each found there.

use super::Reader;
use super::sql::{DbError, DbResult, Optional, Sql, params};
use interlock_machine::Record;
use interlock_spec::canonical::canonical_json;
use interlock_spec::hash::sha256_hex;
use serde_json::{Value, json};

/// The text whose SHA-256 is the chain's first `prev_hash`.
pub const GENESIS_TEXT: &str = "interlock-genesis-v1";

/// The chain's first `prev_hash`.
pub fn genesis() -> String {
    sha256_hex(GENESIS_TEXT.as_bytes())
}

/// The hash of one record given the one before it, or `None` for a payload with no canonical
/// form (which the engine never writes: arguments are checked when they are parsed).
pub fn record_hash(
    prev_hash: &str,
    seq: u64,
    ts: u64,
    kind: &str,
    payload: &Value,
) -> Option<String> {
    let body = json!({"seq": seq, "ts": ts, "kind": kind, "payload": payload});
    let canonical = canonical_json(&body).ok()?;
    Some(sha256_hex(format!("{prev_hash}\n{canonical}").as_bytes()))
}

/// Where the chain broke.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainBreak {
    /// The first seq that does not verify.
    pub seq: u64,
    /// What is wrong there.
    pub problem: String,
}

/// A verified chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainReport {
    /// How many records it holds.
    pub records: u64,
    /// The last record's hash (the genesis hash for an empty log).
    pub head: String,
}

/// Why verification stopped.
#[derive(Debug)]
pub(crate) enum VerifyFailure {
    /// The chain is broken.
    Broken(ChainBreak),
    /// The ledger could not be read.
    Db(DbError),
}

impl From<DbError> for VerifyFailure {
    fn from(error: DbError) -> VerifyFailure {
        VerifyFailure::Db(error)
    }
}

pub(crate) fn next_seq(conn: &dyn Sql) -> DbResult<u64> {
    let head: Option<u64> = conn
        .row(
            "SELECT seq FROM audit_head WHERE id = 1",
            params![],
            |row| row.get(0),
        )
        .optional()?;
    Ok(head.unwrap_or(0) + 1)
}

pub(crate) fn append(
    conn: &dyn Sql,
    seq: u64,
    ts: u64,
    kind: &str,
    payload: &Value,
) -> DbResult<()> {
    let prev: Option<String> = conn
        .row(
            "SELECT hash FROM audit_head WHERE id = 1",
            params![],
            |row| row.get(0),
        )
        .optional()?;
    let prev = prev.unwrap_or_else(genesis);
    let hash = record_hash(&prev, seq, ts, kind, payload)
        .ok_or_else(|| DbError::Bind("an audit payload without a canonical form".to_owned()))?;
    conn.exec(
        "INSERT INTO audit_log (seq, ts, kind, payload_json, prev_hash, hash)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![seq, ts, kind, payload.to_string(), prev, hash],
    )?;
    conn.exec(
        "INSERT INTO audit_head (id, seq, hash) VALUES (1, ?1, ?2)
         ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash",
        params![seq, hash],
    )?;
    Ok(())
}

/// Walks the log from seq 1. Bounded by the log itself: one pass, one row at a time. Every
/// read is made in one read transaction, so one snapshot: a writer appending while the walk runs
/// (another proxy on the file, an operator's `ledger verify` beside a serving proxy) must not
/// make a log read before its append and a head read after it look like a broken chain.
pub(crate) fn verify(reader: &Reader) -> Result<ChainReport, VerifyFailure> {
    // The snapshot's own error type is the database's: a break travels inside its Ok.
    let walked = reader.snapshot(|conn| match verify_in(conn) {
        Ok(report) => Ok(Ok(report)),
        Err(VerifyFailure::Broken(broken)) => Ok(Err(broken)),
        Err(VerifyFailure::Db(error)) => Err(error),
    })?;
    walked.map_err(VerifyFailure::Broken)
}

fn verify_in(conn: &dyn Sql) -> Result<ChainReport, VerifyFailure> {
    let broken =
        |seq: u64, problem: String| Err(VerifyFailure::Broken(ChainBreak { seq, problem }));
    let mut expected_seq = 1u64;
    let mut prev = genesis();
    let mut found: Option<(u64, String)> = None;
    conn.each(
        "SELECT seq, ts, kind, payload_json, prev_hash, hash FROM audit_log ORDER BY seq",
        params![],
        &mut |row| {
            let seq: u64 = row.get(0)?;
            let ts: u64 = row.get(1)?;
            let kind: String = row.get(2)?;
            let payload: String = row.get(3)?;
            let prev_hash: String = row.get(4)?;
            let hash: String = row.get(5)?;
            let problem = if seq != expected_seq {
                Some((
                    expected_seq,
                    format!("missing; the next record is seq {seq}"),
                ))
            } else if prev_hash != prev {
                Some((
                    seq,
                    "prev_hash does not match the record before it".to_owned(),
                ))
            } else {
                match serde_json::from_str::<Value>(&payload) {
                    Err(_) => Some((seq, "payload is not JSON".to_owned())),
                    Ok(payload) => match record_hash(&prev, seq, ts, &kind, &payload) {
                        None => Some((seq, "payload has no canonical form".to_owned())),
                        Some(recomputed) if recomputed != hash => {
                            Some((seq, "hash does not match the record's contents".to_owned()))
                        }
                        Some(_) => None,
                    },
                }
            };
            if problem.is_some() {
                found = problem;
                return Ok(false);
            }
            prev = hash;
            expected_seq += 1;
            Ok(true)
        },
    )?;
    if let Some((seq, problem)) = found {
        return broken(seq, problem);
    }
    let records = expected_seq - 1;
    let head: Option<(u64, String)> = conn
        .row(
            "SELECT seq, hash FROM audit_head WHERE id = 1",
            params![],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .optional()?;
    match head {
        None if records == 0 => {}
        None => return broken(records, "the chain has no head record".to_owned()),
        Some((seq, _)) if seq > records => {
            return broken(
                records + 1,
                format!("missing: the log ends at seq {records} but its head is seq {seq}"),
            );
        }
        Some((seq, hash)) if seq != records || hash != prev => {
            return broken(seq, "the head does not match the last record".to_owned());
        }
        Some(_) => {}
    }
    // Every row names the audit record of its latest change; none may point past the end.
    let newest: Option<u64> = conn.row("SELECT max(audit_seq) FROM intents", params![], |row| {
        row.get(0)
    })?;
    if let Some(newest) = newest
        && newest > records
    {
        return broken(
            records + 1,
            format!("missing: an intent was changed by seq {newest}, past the log's end"),
        );
    }
    rows_match_their_records(conn)?;
    Ok(ChainReport {
        records,
        head: prev,
    })
}

/// Every intent row must be what its latest audit record says it became: a row edited behind
/// the log's back (a `state` written by hand) is found here, at that record's seq.
fn rows_match_their_records(conn: &dyn Sql) -> Result<(), VerifyFailure> {
    let mut found: Option<ChainBreak> = None;
    conn.each(
        "SELECT i.sik, i.state, i.attempt_seq, i.reconcile_inconclusive, i.rail_entity_id,
                i.audit_seq, a.payload_json
         FROM intents i LEFT JOIN audit_log a ON a.seq = i.audit_seq",
        params![],
        &mut |row| {
            let sik: String = row.get(0)?;
            let state: String = row.get(1)?;
            let attempt_seq: u32 = row.get(2)?;
            let inconclusive: u32 = row.get(3)?;
            let entity: Option<String> = row.get(4)?;
            let seq: u64 = row.get(5)?;
            let payload: Option<String> = row.get(6)?;
            found = row_against_record(sik, state, attempt_seq, inconclusive, entity, seq, payload);
            Ok(found.is_none())
        },
    )?;
    match found {
        Some(broken) => Err(VerifyFailure::Broken(broken)),
        None => Ok(()),
    }
}

/// Where one intent row differs from the audit record it names, if it does.
fn row_against_record(
    sik: String,
    state: String,
    attempt_seq: u32,
    inconclusive: u32,
    entity: Option<String>,
    seq: u64,
    payload: Option<String>,
) -> Option<ChainBreak> {
    let record = payload
        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
        .and_then(|payload| serde_json::from_value::<Record>(payload["record"].clone()).ok());
    let core = match record {
        Some(Record::Inserted { core, .. }) | Some(Record::Transition { to: core, .. }) => core,
        _ => {
            return Some(ChainBreak {
                seq,
                problem: format!("intent {sik} names seq {seq}, which records no state"),
            });
        }
    };
    let matches = core.sik.as_str() == sik
        && core.state.as_str() == state
        && core.attempt_seq == attempt_seq
        && core.reconcile_inconclusive == inconclusive
        && core.entity_id == entity;
    (!matches).then(|| ChainBreak {
        seq,
        problem: format!(
            "intent {sik} reads {state} attempt {attempt_seq}, but seq {seq} recorded {} attempt {}",
            core.state, core.attempt_seq
        ),
    })
}

/// The state records of the log, as the machine's invariant predicates read them. Every
/// record the engine writes is one; a record that does not decode is an error, never skipped
/// (the predicates would otherwise judge a partial history).
pub(crate) fn records(conn: &dyn Sql) -> DbResult<Vec<Record>> {
    let rows = conn.query(
        "SELECT seq, payload_json FROM audit_log ORDER BY seq",
        params![],
    )?;
    rows.iter()
        .map(|row| {
            let seq: u64 = row.get(0)?;
            let text: String = row.get(1)?;
            serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|payload| serde_json::from_value(payload["record"].clone()).ok())
                .ok_or_else(|| DbError::Convert {
                    index: 1,
                    problem: format!("audit record {seq} holds no machine record"),
                })
        })
        .collect()
}
