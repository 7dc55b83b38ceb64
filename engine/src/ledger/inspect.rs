//! Read-only views of the ledger for operators (`interlock ledger show`): one intent with
//! everything recorded about it, as typed rows. A value the types cannot hold (a state the
//! machine does not name, a `gates_json` that is not a list of gate results, an audit payload
//! without a machine record) is an error naming the table and the column, never a blank in the
//! output. JSON keys are the schema's column names.

use crate::ledger::sql::{DbError, DbResult, Dialect, Row, Sql, params};
use crate::ledger::{Ledger, LedgerError};
use interlock_driver::gates::GateResult;
use interlock_driver::rail::RailCall;
use interlock_machine::{Record, State, Verdict};
use interlock_spec::action::ActionKind;
use interlock_spec::ids::Sik;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Everything the ledger holds about one intent.
#[derive(Debug, Clone, PartialEq)]
pub struct IntentDetail {
    /// The `intents` row.
    pub intent: IntentRow,
    /// The gate decisions made on its key, oldest first (with every gate's verdict).
    pub decisions: Vec<DecisionRow>,
    /// Its rail attempts, in order.
    pub attempts: Vec<AttemptRow>,
    /// What each reconcile pass found, oldest first.
    pub findings: Vec<FindingRow>,
    /// Its audit records, in chain order (approvals and resolutions say who and why).
    pub audit: Vec<AuditRow>,
}

/// One `intents` row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IntentRow {
    /// The merchant account the intent belongs to.
    pub merchant_id: String,
    /// The semantic idempotency key.
    pub sik: Sik,
    /// The money tool called.
    pub tool: String,
    /// What kind of money movement it is.
    pub kind: ActionKind,
    /// The payment (or other referent) it acts on.
    pub subject_id: String,
    /// The amount, in minor units.
    pub amount_minor: u64,
    /// The amount's ISO 4217 currency.
    pub currency: String,
    /// `reversible` or `irreversible`.
    pub reversibility: String,
    /// The agent's reason for a deliberate second identical action, if any.
    pub distinct_reason: Option<String>,
    /// The outbound call every attempt sends.
    pub call_json: RailCall,
    /// The machine state.
    pub state: State,
    /// The current attempt (0 before the first).
    pub attempt_seq: u32,
    /// Reconcile passes that proved nothing, in a row.
    pub reconcile_inconclusive: u32,
    /// The rail's id of what it created, once known.
    pub rail_entity_id: Option<String>,
    /// The instance holding the lease, while one does.
    pub lease_owner: Option<String>,
    /// When that lease lapses (ms since the epoch).
    pub lease_expires_at: Option<u64>,
    /// The earliest next reconcile pass (ms since the epoch).
    pub reconcile_not_before: Option<u64>,
    /// The reason code of its latest change.
    pub reason_code: String,
    /// The same, in words.
    pub reason: String,
    /// SHA-256 of the mandate it was judged under.
    pub mandate_hash: String,
    /// The audit record of the row's latest change.
    pub audit_seq: u64,
    /// Where the windows place it (ms since the epoch), while counted.
    pub counted_at: Option<u64>,
    /// When it was first proposed (ms since the epoch).
    pub first_seen_at: u64,
    /// When the row last changed (ms since the epoch).
    pub updated_at: u64,
}

/// One `decisions` row: a judgement of the gate ladder.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DecisionRow {
    /// The row id, in insertion order.
    pub id: u64,
    /// The proxy instance that decided.
    pub instance_id: String,
    /// The agent that proposed.
    pub agent_id: String,
    /// The tool it was called through.
    pub tool: String,
    /// SHA-256 of the mandate it judged under.
    pub mandate_hash: String,
    /// The meet of every gate's verdict.
    pub verdict: Verdict,
    /// What came of it.
    pub outcome: String,
    /// The deciding gate's reason code.
    pub reason_code: String,
    /// Every gate's result, in ladder order.
    pub gates_json: Vec<GateResult>,
    /// When (ms since the epoch).
    pub decided_at: u64,
    /// The last audit record when it was made.
    pub audit_seq: u64,
}

/// One `intent_attempts` row: one call to the rail.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttemptRow {
    /// The attempt.
    pub attempt_seq: u32,
    /// When the call left (ms since the epoch).
    pub started_at: u64,
    /// When its outcome was recorded, once it was.
    pub finished_at: Option<u64>,
    /// `APPLIED`, `REJECTED` or `AMBIGUOUS`, once known.
    pub outcome: Option<String>,
    /// The rail's id of what it created, once known.
    pub rail_entity_id: Option<String>,
    /// The fee the rail charged, in minor units.
    pub fee_minor: u64,
    /// The tax on that fee, in minor units.
    pub tax_minor: u64,
    /// The rail's words about it.
    pub detail: Option<String>,
}

/// One `recon_findings` row: what a reconcile pass concluded.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FindingRow {
    /// The row id, in insertion order.
    pub id: u64,
    /// The attempt the pass was about.
    pub attempt_seq: u32,
    /// What the pass concluded.
    pub outcome: String,
    /// Pages of the rail's list read.
    pub pages_scanned: u32,
    /// Whether every page was read.
    pub pagination_exhausted: bool,
    /// Whether the rail's listing lag had passed.
    pub lag_elapsed: bool,
    /// The entity that carried the stamp, if found.
    pub matched_entity_id: Option<String>,
    /// When the pass ran (ms since the epoch).
    pub queried_at: u64,
    /// The pass's own account.
    pub detail_json: Value,
}

/// One `audit_log` record naming the intent. `payload_json` is shown as it was hashed; the
/// parts an operator reads are typed beside it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditRow {
    /// The record's place in the chain.
    pub seq: u64,
    /// When it was written (ms since the epoch).
    pub ts: u64,
    /// The event's name (`INTENT_PROPOSED`, `ATTEMPT_STARTED`, …).
    pub kind: String,
    /// The payload, exactly as hashed into the chain.
    pub payload_json: Value,
    /// The record's chain hash.
    pub hash: String,
    /// The machine record the payload carries.
    #[serde(skip)]
    pub record: Record,
    /// What the payload says beside it.
    #[serde(skip)]
    pub notes: AuditNotes,
}

/// The parts of an audit payload beside its machine record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct AuditNotes {
    /// The reason code recorded with a gate or operator event.
    pub reason_code: Option<String>,
    /// The rail's words or the reconcile pass's summary.
    pub detail: Option<String>,
    /// Who acted and why, for an operator's event.
    pub context: Option<AuditContext>,
}

/// Who acted on an intent by hand, and why.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct AuditContext {
    /// Who.
    pub by: Option<String>,
    /// Why, in their words.
    pub why: Option<String>,
}

/// A column that holds JSON, read as `T`; an error names the column.
fn json_column<T: DeserializeOwned>(row: &Row, index: usize, column: &str) -> DbResult<T> {
    let text: String = row.get(index)?;
    serde_json::from_str(&text).map_err(|e| conversion(index, format!("{column}: {e}")))
}

fn conversion(index: usize, problem: String) -> DbError {
    DbError::Convert { index, problem }
}

fn intent_row(row: &Row) -> DbResult<IntentRow> {
    let state: String = row.get(10)?;
    let kind: String = row.get(3)?;
    Ok(IntentRow {
        merchant_id: row.get(0)?,
        sik: Sik::parse(&row.get::<String>(1)?)
            .map_err(|e| conversion(1, format!("intents.sik: {e}")))?,
        tool: row.get(2)?,
        kind: serde_json::from_value(Value::String(kind.clone()))
            .map_err(|_| conversion(3, format!("intents.kind: {kind:?} is no action kind")))?,
        subject_id: row.get(4)?,
        amount_minor: row.get(5)?,
        currency: row.get(6)?,
        reversibility: row.get(7)?,
        distinct_reason: row.get(8)?,
        call_json: json_column(row, 9, "intents.call_json")?,
        state: State::parse(&state)
            .ok_or_else(|| conversion(10, format!("intents.state: {state:?} is no state")))?,
        attempt_seq: row.get(11)?,
        reconcile_inconclusive: row.get(12)?,
        rail_entity_id: row.get(13)?,
        lease_owner: row.get(14)?,
        lease_expires_at: row.get(15)?,
        reconcile_not_before: row.get(16)?,
        reason_code: row.get(17)?,
        reason: row.get(18)?,
        mandate_hash: row.get(19)?,
        audit_seq: row.get(20)?,
        counted_at: row.get(21)?,
        first_seen_at: row.get(22)?,
        updated_at: row.get(23)?,
    })
}

const INTENT: &str = "SELECT merchant_id, sik, tool, kind, subject_id, amount_minor, currency,
        reversibility, distinct_reason, call_json, state, attempt_seq, reconcile_inconclusive,
        rail_entity_id, lease_owner, lease_expires_at, reconcile_not_before, reason_code, reason,
        mandate_hash, audit_seq, counted_at, first_seen_at, updated_at
    FROM intents WHERE merchant_id = ?1 AND sik = ?2";

fn decision_row(row: &Row) -> DbResult<DecisionRow> {
    let verdict: String = row.get(5)?;
    Ok(DecisionRow {
        id: row.get(0)?,
        instance_id: row.get(1)?,
        agent_id: row.get(2)?,
        tool: row.get(3)?,
        mandate_hash: row.get(4)?,
        verdict: Verdict::parse(&verdict).ok_or_else(|| {
            conversion(5, format!("decisions.verdict: {verdict:?} is no verdict"))
        })?,
        outcome: row.get(6)?,
        reason_code: row.get(7)?,
        gates_json: json_column(row, 8, "decisions.gates_json")?,
        decided_at: row.get(9)?,
        audit_seq: row.get(10)?,
    })
}

const DECISIONS: &str = "SELECT id, instance_id, agent_id, tool, mandate_hash, verdict, outcome,
        reason_code, gates_json, decided_at, audit_seq
    FROM decisions WHERE merchant_id = ?1 AND sik = ?2 ORDER BY id";

fn attempt_row(row: &Row) -> DbResult<AttemptRow> {
    Ok(AttemptRow {
        attempt_seq: row.get(0)?,
        started_at: row.get(1)?,
        finished_at: row.get(2)?,
        outcome: row.get(3)?,
        rail_entity_id: row.get(4)?,
        fee_minor: row.get(5)?,
        tax_minor: row.get(6)?,
        detail: row.get(7)?,
    })
}

const ATTEMPTS: &str = "SELECT attempt_seq, started_at, finished_at, outcome, rail_entity_id,
        fee_minor, tax_minor, detail
    FROM intent_attempts WHERE merchant_id = ?1 AND sik = ?2 ORDER BY attempt_seq";

fn finding_row(row: &Row) -> DbResult<FindingRow> {
    Ok(FindingRow {
        id: row.get(0)?,
        attempt_seq: row.get(1)?,
        outcome: row.get(2)?,
        pages_scanned: row.get(3)?,
        pagination_exhausted: row.get(4)?,
        lag_elapsed: row.get(5)?,
        matched_entity_id: row.get(6)?,
        queried_at: row.get(7)?,
        detail_json: json_column(row, 8, "recon_findings.detail_json")?,
    })
}

const FINDINGS: &str = "SELECT id, attempt_seq, outcome, pages_scanned, pagination_exhausted,
        lag_elapsed, matched_entity_id, queried_at, detail_json
    FROM recon_findings WHERE merchant_id = ?1 AND sik = ?2 ORDER BY id";

fn audit_row(row: &Row) -> DbResult<AuditRow> {
    let seq: u64 = row.get(0)?;
    let payload: Value = json_column(row, 3, "audit_log.payload_json")?;
    let record = serde_json::from_value(payload["record"].clone()).map_err(|e| {
        conversion(
            3,
            format!("audit record {seq} holds no machine record: {e}"),
        )
    })?;
    let notes = serde_json::from_value(payload.clone())
        .map_err(|e| conversion(3, format!("audit record {seq}: {e}")))?;
    Ok(AuditRow {
        seq,
        ts: row.get(1)?,
        kind: row.get(2)?,
        payload_json: payload,
        hash: row.get(4)?,
        record,
        notes,
    })
}

/// An intent's records name it in their machine record: the inserted core, or the core a
/// transition left.
/// Written in each dialect: the one statement of this module that reads inside JSON.
const AUDIT_SQLITE: &str = "SELECT seq, ts, kind, payload_json, hash FROM audit_log
    WHERE json_extract(payload_json, '$.merchant_id') = ?1
      AND coalesce(json_extract(payload_json, '$.record.core.sik'),
                   json_extract(payload_json, '$.record.from.sik')) = ?2
    ORDER BY seq";
const AUDIT_POSTGRES: &str = "SELECT seq, ts, kind, payload_json, hash FROM audit_log
    WHERE CAST(payload_json AS jsonb) ->> 'merchant_id' = ?1
      AND coalesce(CAST(payload_json AS jsonb) #>> '{record,core,sik}',
                   CAST(payload_json AS jsonb) #>> '{record,from,sik}') = ?2
    ORDER BY seq";

fn all<T>(
    conn: &dyn Sql,
    sql: &str,
    key: (&str, &str),
    map: fn(&Row) -> DbResult<T>,
) -> DbResult<Vec<T>> {
    conn.query(sql, params![key.0, key.1])?
        .iter()
        .map(map)
        .collect()
}

fn detail(conn: &dyn Sql, merchant: &str, sik: &str) -> DbResult<IntentDetail> {
    let key = (merchant, sik);
    Ok(IntentDetail {
        intent: conn.row(INTENT, params![merchant, sik], intent_row)?,
        decisions: all(conn, DECISIONS, key, decision_row)?,
        attempts: all(conn, ATTEMPTS, key, attempt_row)?,
        findings: all(conn, FINDINGS, key, finding_row)?,
        audit: match conn.dialect() {
            Dialect::Sqlite => all(conn, AUDIT_SQLITE, key, audit_row)?,
            Dialect::Postgres => all(conn, AUDIT_POSTGRES, key, audit_row)?,
        },
    })
}

impl Ledger {
    /// Every intent with this SIK (one per merchant account that has it; in practice one), in
    /// full. Empty if there is none.
    pub fn intent_detail(&self, sik: &Sik) -> Result<Vec<IntentDetail>, LedgerError> {
        // One snapshot for the row and its decisions, attempts, findings and records: read
        // beside a serving proxy, they must not come from two moments.
        self.conn()
            .snapshot(|conn| {
                let merchants = conn.query(
                    "SELECT merchant_id FROM intents WHERE sik = ?1 ORDER BY merchant_id",
                    params![sik.as_str()],
                )?;
                merchants
                    .iter()
                    .map(|row| detail(conn, &row.get::<String>(0)?, sik.as_str()))
                    .collect()
            })
            .map_err(|e| self.err(e))
    }
}
