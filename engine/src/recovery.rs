//! Boot recovery and the human's edges.
//!
//! Before a process serves, every intent left `IN_FLIGHT`, `RECONCILING`, `UNKNOWN` or
//! `FAILED_TERMINAL` is taken through `LEASE_EXPIRED` and reconcile passes until it is settled
//! or quarantined. A lease is taken back only once it has expired, so a live process in the
//! middle of a call keeps its intent (ADR 0003). Waiting is on the engine's clock, bounded.

use crate::executor::{Answer, Engine, EngineError, refusal};
use crate::gates::{self, GateInput, LiveTool};
use crate::kill_point;
use crate::ledger::Cached;
use crate::ledger::{self, ApplyError, LedgerError};
use crate::ledger::{Change, IntentKey};
use crate::rail::Rail;
use crate::rail::RailCall;
use interlock_machine::{Effect, Verdict};
use interlock_machine::{EntityRef, Event, State};
use interlock_spec::action::{ProposedAction, STAMP_NOTE_KEY};
use interlock_spec::mandate::Mandate;
use rusqlite::params;
use serde_json::json;

/// Rounds of boot recovery before it gives up and reports what is left. Each round waits for
/// the earliest lease expiry or reconcile time, so this bounds the wait as well: six
/// inconclusive passes (the quarantine threshold) with their back-off fit well inside it.
pub const RECOVERY_ROUNDS_MAX: u32 = 64;
/// The longest one round waits, so that progress elsewhere is seen.
pub const RECOVERY_WAIT_MS_MAX: u64 = 5_000;

/// What boot recovery did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Intents that needed recovery when it began.
    pub found: usize,
    /// Leases taken back (`LEASE_EXPIRED`).
    pub leases_expired: u32,
    /// Reconcile passes run.
    pub passes: u32,
    /// Rounds used.
    pub rounds: u32,
    /// Intents still unsettled when the rounds ran out (none when recovery finished).
    pub unsettled: usize,
}

impl<R: Rail> Engine<R> {
    /// Boot recovery: settles or quarantines every intent a crash may have left mid-way.
    pub fn recover(&self) -> Result<RecoveryReport, EngineError> {
        let mut report = RecoveryReport::default();
        for round in 0..RECOVERY_ROUNDS_MAX {
            kill_point!("during_recovery");
            let now = self.clock.now_ms();
            let pending = self.keys_where(
                "state IN ('IN_FLIGHT', 'RECONCILING', 'UNKNOWN', 'FAILED_TERMINAL') AND ?1 >= 0",
                now,
            )?;
            if round == 0 {
                report.found = pending.len();
            }
            if pending.is_empty() {
                report.rounds = round;
                return Ok(report);
            }
            let mut wake = now.saturating_add(RECOVERY_WAIT_MS_MAX);
            for key in &pending {
                let (state, lease_until, not_before) = self.recovery_view(key)?;
                match state {
                    State::InFlight | State::Reconciling => match lease_until {
                        Some(until) if until > now => wake = wake.min(until),
                        _ => {
                            if self.expire_lease(key, now)? {
                                report.leases_expired += 1;
                                wake = wake.min(now + interlock_machine::RECONCILE_MIN_DELAY_MS);
                            }
                        }
                    },
                    State::Unknown | State::FailedTerminal if not_before <= now => {
                        self.reconcile(key)?;
                        report.passes += 1;
                        wake = now;
                    }
                    State::Unknown | State::FailedTerminal => wake = wake.min(not_before),
                    _ => {}
                }
            }
            let now_after = self.clock.now_ms();
            if wake > now_after {
                self.clock
                    .sleep_ms((wake - now_after).min(RECOVERY_WAIT_MS_MAX));
            }
            report.rounds = round + 1;
        }
        let now = self.clock.now_ms();
        report.unsettled = self
            .keys_where(
                "state IN ('IN_FLIGHT', 'RECONCILING', 'UNKNOWN', 'FAILED_TERMINAL') AND ?1 >= 0",
                now,
            )?
            .len();
        Ok(report)
    }

    fn recovery_view(&self, key: &IntentKey) -> Result<(State, Option<u64>, u64), EngineError> {
        let conn = self.ledger.conn();
        let (state, until, not_before): (String, Option<u64>, u64) = conn
            .row(
                "SELECT state, lease_expires_at, coalesce(reconcile_not_before, 0) FROM intents
                 WHERE merchant_id = ?1 AND sik = ?2",
                params![key.merchant_id.as_str(), key.sik.as_str()],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
            )
            .map_err(|e| self.ledger.err(e))?;
        Ok((
            State::parse(&state).unwrap_or(State::Quarantined),
            until,
            not_before,
        ))
    }

    /// A human approves a held intent. The approval binds to the intent: its SIK (the key), its
    /// amount (the held call's, which the approver cannot change) and the mandate it was held
    /// under (an approval given under another mandate is refused: reject the hold and let the
    /// agent propose again). All three, with who and why, go into the `HOLD_RELEASED` record.
    /// The action is judged again first, against the rail and the ledger as they are now,
    /// inside the transaction that releases it: a hold lifts holds, never a block (an expired
    /// mandate, a window filled since, a payment refunded since, a drifted tool). Then the
    /// attempt runs.
    pub fn approve(
        &self,
        key: &IntentKey,
        by: &str,
        why: &str,
        live_tool: Option<&LiveTool>,
    ) -> Result<Answer, EngineError> {
        let now = self.clock.now_ms();
        let (call, distinct, held_under) = self.held_call(key)?;
        if held_under != self.mandate_hash {
            return Err(EngineError::NotApprovable(format!(
                "intent {} was held under the mandate with sha256 {held_under}, and this approval is given under mandate {} (sha256 {}); approve it with the mandate it was held under, or reject it and let the agent propose again",
                key.sik, self.mandate.mandate_id, self.mandate_hash
            )));
        }
        let action = action_of(&self.mandate, key, &call, distinct);
        let referent = self.rail.resolve(&action).map_err(|e| e.to_string());
        // A hold made while the rail could not be read is keyed on the agent's text. If the
        // rail now names the subject differently, this intent is not the action the rail would
        // carry out: approving it could pay a twin that the limits never saw together.
        if let Ok(found) = &referent
            && found.subject_id() != call.subject_id
        {
            let message = format!(
                "not approved, still held: the rail now answers {} for the held {}; reject this hold and propose the action again",
                found.subject_id(),
                call.subject_id
            );
            let result = gates::GateResult::block(
                gates::Gate::G2,
                interlock_spec::reason::ReasonCode::ReferentUnresolvableBlocked,
                message,
            );
            let ladder = gates::Ladder {
                verdict: Verdict::Block,
                results: vec![result],
            };
            let mut answer = refusal(ladder, Some(key.sik.clone()));
            answer.state = Some(State::Held);
            return Ok(answer);
        }
        let unread = gates::Usage::default();
        let advice = self.advice(&GateInput {
            action: &action,
            mandate: &self.mandate,
            now_ms: now,
            referent: &referent,
            usage: &unread,
            live_tool,
        });
        let approved = self.ledger.write(|tx| {
            let Some(seen) = ledger::read_row(tx, key).map_err(|e| self.ledger.err(e))? else {
                return Err(ApplyError::NoSuchIntent(ledger::describe(key)));
            };
            // Only a held intent can be approved; anything else is the machine's refusal.
            if seen.core.state != State::Held {
                return Err(ApplyError::Illegal(interlock_machine::Illegal::NoEdge {
                    state: seen.core.state,
                    event: interlock_machine::EventKind::HoldReleased,
                }));
            }
            let usage = crate::usage::read(
                tx,
                &self.mandate,
                &action,
                &call.subject_id,
                call.currency,
                now,
                Some(key),
            )
            .map_err(|e| ApplyError::Ledger(self.ledger.err(e)))?;
            let input = GateInput {
                action: &action,
                mandate: &self.mandate,
                now_ms: now,
                referent: &referent,
                usage: &usage,
                live_tool,
            };
            let ladder = gates::ladder(&input, advice.clone());
            if ladder.verdict == Verdict::Block {
                return Ok(Err(ladder));
            }
            let change = Change {
                reason: Some(("APPROVED".into(), format!("approved by {by}: {why}"))),
                // What the approval binds to, in the hash-chained record.
                context: Some(json!({
                    "by": by,
                    "why": why,
                    "sik": key.sik,
                    "amount_minor": call.amount,
                    "currency": call.currency,
                    "mandate_sha256": held_under,
                    "gates": ladder.results,
                })),
                ..Change::default()
            };
            match ledger::apply_locked(tx, key, &seen, &Event::HoldReleased, now, &change)? {
                Some(_) => Ok(Ok(ladder)),
                None => Err(ApplyError::Contended(ledger::describe(key))),
            }
        })?;
        match approved {
            Ok(ladder) => self.drive(key, Effect::StartAttempt, ladder.results),
            Err(ladder) => {
                let mut answer = refusal(ladder, Some(key.sik.clone()));
                answer.message = format!("not approved, still held: {}", answer.message);
                answer.state = Some(State::Held);
                Ok(answer)
            }
        }
    }

    /// The held intent's call, distinct reason and the hash of the mandate it was held under.
    fn held_call(
        &self,
        key: &IntentKey,
    ) -> Result<(RailCall, Option<String>, String), EngineError> {
        let (call, distinct, mandate_hash): (String, Option<String>, String) = self
            .ledger
            .conn()
            .row(
                "SELECT call_json, distinct_reason, mandate_hash FROM intents
                 WHERE merchant_id = ?1 AND sik = ?2",
                params![key.merchant_id.as_str(), key.sik.as_str()],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
            )
            .map_err(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => {
                    EngineError::Apply(ApplyError::NoSuchIntent(ledger::describe(key)))
                }
                e => self.ledger.err(e).into(),
            })?;
        let call = serde_json::from_str(&call).map_err(|e| LedgerError::Corrupt {
            key: ledger::describe(key),
            problem: format!("call_json: {e}"),
        })?;
        Ok((call, distinct, mandate_hash))
    }

    /// A human rejects a held intent: `HOLD_REJECTED`, for good.
    pub fn reject(&self, key: &IntentKey, by: &str, why: &str) -> Result<(), EngineError> {
        let change = Change {
            reason: Some(("REJECTED".into(), format!("rejected by {by}: {why}"))),
            // Who and why, in the hash-chained record as well as in the row's reason.
            context: Some(json!({"by": by, "why": why})),
            ..Change::default()
        };
        self.ledger
            .apply(key, &Event::HoldRejected, self.clock.now_ms(), &change)?;
        Ok(())
    }

    /// An operator settles a quarantined intent as applied, naming the rail's entity (which
    /// must carry the intent's stamp: the operator read it on the rail).
    pub fn resolve_applied(
        &self,
        key: &IntentKey,
        entity_id: &str,
        by: &str,
    ) -> Result<(), EngineError> {
        let event = Event::OperatorConfirmedApplied {
            entity: EntityRef {
                id: entity_id.to_owned(),
                stamp: Some(key.sik.clone()),
            },
        };
        let change = Change {
            reason: Some((
                "OPERATOR_APPLIED".into(),
                format!("settled as {entity_id} by {by}"),
            )),
            context: Some(json!({"by": by})),
            ..Change::default()
        };
        self.ledger
            .apply(key, &event, self.clock.now_ms(), &change)?;
        Ok(())
    }

    /// An operator settles a quarantined intent as not applied. Refused until the rail's lag
    /// has passed since the last attempt ended, by the engine's clock, not the operator's word.
    pub fn resolve_not_applied(&self, key: &IntentKey, by: &str) -> Result<(), EngineError> {
        let now = self.clock.now_ms();
        let ended: Option<u64> = self
            .ledger
            .conn()
            .row(
                "SELECT max(coalesce(finished_at, started_at)) FROM intent_attempts
                 WHERE merchant_id = ?1 AND sik = ?2",
                params![key.merchant_id.as_str(), key.sik.as_str()],
                |row| row.get(0),
            )
            .map_err(|e| self.ledger.err(e))?;
        let lag_elapsed =
            ended.is_none_or(|ended| now.saturating_sub(ended) >= self.config.rail_lag_ms);
        let change = Change {
            reason: Some((
                "OPERATOR_NOT_APPLIED".into(),
                format!("settled as not applied by {by}"),
            )),
            context: Some(json!({"by": by})),
            ..Change::default()
        };
        let event = Event::OperatorConfirmedNotApplied { lag_elapsed };
        self.ledger.apply(key, &event, now, &change)?;
        Ok(())
    }
}

/// The action a held intent proposes, rebuilt from its stamped call so the ladder can judge it
/// again. The agent is the mandate's: G1 admitted no other when the intent was proposed.
fn action_of(
    mandate: &Mandate,
    key: &IntentKey,
    call: &RailCall,
    distinct: Option<String>,
) -> ProposedAction {
    let mut passthrough = call.passthrough.clone();
    let mut notes = call.notes.clone();
    notes.remove(STAMP_NOTE_KEY);
    if !notes.is_empty() {
        passthrough.insert("notes".to_owned(), serde_json::Value::Object(notes));
    }
    ProposedAction {
        agent_id: mandate.agent_id.clone(),
        merchant_id: key.merchant_id.clone(),
        tool: call.tool.clone(),
        kind: call.kind,
        payment_hint: match call.kind {
            interlock_spec::action::ActionKind::Refund => Some(call.subject_id.clone()),
            interlock_spec::action::ActionKind::Settlement => None,
        },
        amount: call.amount,
        distinct,
        passthrough,
    }
}
