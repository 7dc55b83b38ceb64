//! The reconciler: settles an intent whose last call ended ambiguously (or was refused, which
//! is verified too) by reading the rail's lists, never by calling again.
//!
//! The three traps are closed by [`interlock_machine::ReconcilePass`]; this module only feeds it:
//! not before the rail's lag has passed since the attempt ended, every page until the rail says
//! there is no more (at most `RECONCILE_PAGES_MAX`), matching on the stamp only. Each pass is
//! recorded in `recon_findings` in the transaction that applies its conclusion.

use crate::executor::{Engine, EngineError};
use crate::kill_point;
use crate::ledger::Cached;
use crate::ledger::{self, ApplyError, Change, Finding, IntentKey, LeaseChange};
use crate::rail::{ListQuery, PageAt, Rail, RailError};
use interlock_machine::{
    Effect, Event, EventKind, PassProgress, RECONCILE_PAGES_MAX, ReconcilePass, State,
};
use interlock_spec::action::ActionKind;
use rusqlite::params;
use serde_json::json;

/// Intents one [`Engine::reconcile_due`] call takes on; the rest wait for the next call.
pub const RECONCILE_BATCH_MAX: usize = 64;

/// What one pass did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PassResult {
    /// The pass ran and moved the intent to this state.
    Concluded(State),
    /// Not due yet (or not in a reconcilable state); nothing was read.
    NotDue,
    /// Another process holds the intent.
    Busy,
}

impl<R: Rail> Engine<R> {
    /// Runs a pass for every intent whose reconcile is due, at most [`RECONCILE_BATCH_MAX`].
    pub fn reconcile_due(&self) -> Result<Vec<(IntentKey, PassResult)>, EngineError> {
        let now = self.clock.now_ms();
        // A holder that died or stalled past its lease leaves its intent to whoever runs next;
        // a running process must not wait for a reboot to take it back.
        let lapsed = self.keys_where(
            "state IN ('IN_FLIGHT', 'RECONCILING') AND lease_expires_at <= ?1",
            now,
        )?;
        for key in lapsed.iter().take(RECONCILE_BATCH_MAX) {
            self.expire_lease(key, now)?;
        }
        let keys = self.keys_where(
            "state IN ('UNKNOWN', 'FAILED_TERMINAL') AND coalesce(reconcile_not_before, 0) <= ?1",
            now,
        )?;
        let mut results = Vec::with_capacity(keys.len());
        for key in keys.into_iter().take(RECONCILE_BATCH_MAX) {
            let result = self.reconcile(&key)?;
            results.push((key, result));
        }
        Ok(results)
    }

    /// One reconcile pass over `key`, if it is due.
    pub fn reconcile(&self, key: &IntentKey) -> Result<PassResult, EngineError> {
        let now = self.clock.now_ms();
        let Some(due) = self.due(key)? else {
            return Ok(PassResult::NotDue);
        };
        if due.not_before > now {
            return Ok(PassResult::NotDue);
        }
        let claim = Change {
            lease: LeaseChange::Claim {
                owner: self.config.instance_id.clone(),
                expires_at: now + self.config.lease_ttl_ms,
            },
            ..Change::default()
        };
        let started = match self
            .ledger
            .apply(key, &Event::ReconcileStarted, now, &claim)
        {
            Ok(applied) => applied,
            Err(ApplyError::Illegal(_) | ApplyError::Lease(_)) => return Ok(PassResult::Busy),
            Err(error) => return Err(error.into()),
        };
        let Effect::RunReconcile { attempt_seq } = started.effect else {
            unreachable!("RECONCILE_STARTED always asks for a pass");
        };
        // Trap 2: a reading that begins before the rail's lag has passed since the attempt
        // ended proves nothing about absence.
        let lag_elapsed = due
            .attempt_ended
            .is_some_and(|ended| now.saturating_sub(ended) >= self.config.rail_lag_ms);
        let mut pass = ReconcilePass::new(key.sik.clone(), attempt_seq, lag_elapsed);
        let query = ListQuery {
            kind: due.kind,
            subject_id: due.subject.clone(),
            sik: key.sik.clone(),
        };
        let mut listing = Ok(());
        let mut received: u32 = 0;
        for page in 0..RECONCILE_PAGES_MAX {
            let at = PageAt {
                page,
                skip: received,
            };
            match self.rail.list_page(&query, at) {
                Ok(found) => {
                    let count = u32::try_from(found.entities.len()).unwrap_or(u32::MAX);
                    received = received.saturating_add(count);
                    if pass.observe_page(&found.entities, found.is_last) == PassProgress::Conclude {
                        break;
                    }
                }
                Err(error) => {
                    pass.list_failed();
                    listing = Err(error);
                    break;
                }
            }
        }
        // The most dangerous moment of a pass: it has read what it will read (its proof, or the
        // failure that ends it) and committed nothing. Reached by every pass, however many
        // pages it read, so the chaos point can be armed for any trial.
        kill_point!("during_reconcile");
        let pages = pass.pages_read();
        let mut event = pass.conclude();
        // A rail that cannot list by stamp leaves nothing to retry: a human reconciles it.
        if let Err(RailError::NotReconcilable(_)) = &listing
            && event.kind() == EventKind::ReconcileInconclusive
        {
            event = Event::Quarantine;
        }
        let finding = finding_of(&event, attempt_seq, pages, lag_elapsed, &listing);
        let change = Change {
            detail: listing.as_ref().err().map(ToString::to_string),
            finding: Some(finding),
            ..Change::default()
        };
        let now = self.clock.now_ms();
        match self.ledger.apply(key, &event, now, &change) {
            Ok(applied) => Ok(PassResult::Concluded(applied.to.state)),
            // The pages showed something the machine will not accept as proof (a stamped entity
            // with a malformed id, say). That is an inconclusive pass, recorded as one, not a
            // reason to leave the intent RECONCILING under our lease.
            Err(ApplyError::Illegal(illegal))
                if event.kind() != EventKind::ReconcileInconclusive =>
            {
                let fallback = Event::ReconcileInconclusive { attempt_seq };
                let mut finding = finding_of(&fallback, attempt_seq, pages, lag_elapsed, &listing);
                finding.detail = json!({
                    "event": fallback.kind().as_str(),
                    "refused_conclusion": event.kind().as_str(),
                    "refusal": illegal.to_string(),
                });
                let change = Change {
                    detail: Some(format!("the pass's conclusion was refused: {illegal}")),
                    finding: Some(finding),
                    ..Change::default()
                };
                match self.ledger.apply(key, &fallback, now, &change) {
                    Ok(applied) => Ok(PassResult::Concluded(applied.to.state)),
                    Err(ApplyError::Illegal(_) | ApplyError::Lease(_)) => Ok(PassResult::Busy),
                    Err(error) => Err(error.into()),
                }
            }
            Err(ApplyError::Illegal(_) | ApplyError::Lease(_)) => Ok(PassResult::Busy),
            Err(error) => Err(error.into()),
        }
    }

    /// Takes back the lease on `key` if it has lapsed (`LEASE_EXPIRED`); `false` if it had not
    /// or the intent moved on.
    pub(crate) fn expire_lease(&self, key: &IntentKey, now: u64) -> Result<bool, EngineError> {
        let change = Change {
            lease: LeaseChange::Expire,
            detail: Some("lease expired: the holder died or stalled".into()),
            ..Change::default()
        };
        match self.ledger.apply(key, &Event::LeaseExpired, now, &change) {
            Ok(_) => Ok(true),
            Err(ApplyError::Illegal(_) | ApplyError::Lease(_)) => Ok(false),
            Err(error) => Err(error.into()),
        }
    }

    /// Keys of intents matching `condition` (with `?1` bound to `now`), oldest first.
    pub(crate) fn keys_where(
        &self,
        condition: &str,
        now: u64,
    ) -> Result<Vec<IntentKey>, EngineError> {
        let conn = self.ledger.conn();
        let sql = format!(
            "SELECT merchant_id, sik FROM intents WHERE {condition} ORDER BY updated_at, sik"
        );
        let mut statement = conn.prepare(&sql).map_err(|e| self.ledger.err(e))?;
        let rows = statement
            .query_map(params![now], |row| {
                Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
            })
            .and_then(Iterator::collect::<rusqlite::Result<Vec<_>>>)
            .map_err(|e| self.ledger.err(e))?;
        rows.iter()
            .map(|(merchant, sik)| ledger::parse_key(merchant, sik).map_err(Into::into))
            .collect()
    }

    fn due(&self, key: &IntentKey) -> Result<Option<Due>, EngineError> {
        let conn = self.ledger.conn();
        let row = conn
            .row(
                "SELECT i.kind, i.subject_id, coalesce(i.reconcile_not_before, 0),
                        (SELECT a.finished_at FROM intent_attempts a
                          WHERE a.merchant_id = i.merchant_id AND a.sik = i.sik
                            AND a.attempt_seq = i.attempt_seq)
                 FROM intents i
                 WHERE i.merchant_id = ?1 AND i.sik = ?2
                   AND i.state IN ('UNKNOWN', 'FAILED_TERMINAL')",
                params![key.merchant_id.as_str(), key.sik.as_str()],
                |row| {
                    Ok((
                        row.get::<_, String>(0)?,
                        row.get::<_, String>(1)?,
                        row.get::<_, u64>(2)?,
                        row.get::<_, Option<u64>>(3)?,
                    ))
                },
            )
            .map(Some)
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok(None),
                e => Err(e),
            })
            .map_err(|e| self.ledger.err(e))?;
        Ok(row.map(|(kind, subject, not_before, attempt_ended)| Due {
            kind: if kind == "SETTLEMENT" {
                ActionKind::Settlement
            } else {
                ActionKind::Refund
            },
            subject,
            not_before,
            attempt_ended,
        }))
    }
}

struct Due {
    kind: ActionKind,
    subject: String,
    not_before: u64,
    attempt_ended: Option<u64>,
}

fn finding_of(
    event: &Event,
    attempt_seq: u32,
    pages: u32,
    lag_elapsed: bool,
    listing: &Result<(), RailError>,
) -> Finding {
    let (outcome, matched, exhausted) = match event {
        Event::ReconcileFoundApplied { entity, .. } => ("APPLIED", Some(entity.id.clone()), false),
        Event::ReconcileConfirmedAbsent {
            pagination_exhausted,
            ..
        } => ("CONFIRMED_NOT_APPLIED", None, *pagination_exhausted),
        Event::Quarantine => ("QUARANTINED", None, false),
        _ => ("INCONCLUSIVE", None, false),
    };
    Finding {
        attempt_seq,
        outcome,
        pages_scanned: pages,
        pagination_exhausted: exhausted,
        lag_elapsed,
        matched_entity_id: matched,
        detail: json!({
            "event": event.kind().as_str(),
            "list_error": listing.as_ref().err().map(ToString::to_string),
        }),
    }
}
