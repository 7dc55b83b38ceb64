//! Boot recovery and the human's edges, carried out.
//!
//! Before a process serves, every intent left `IN_FLIGHT`, `RECONCILING`, `UNKNOWN` or
//! `FAILED_TERMINAL` is swept ([`interlock_driver::Sweep`]): leases taken back once expired,
//! reconcile passes run once due, until each is settled or quarantined. Waiting is on the
//! engine's clock, bounded.

use crate::executor::{Engine, EngineError};
use crate::kill_point;
use crate::ledger::{ApplyError, Commit, IntentKey};
use interlock_driver::{Rail, Sweep, SweepStep, operator};

/// Rounds of boot recovery before it gives up and reports what is left. Each round waits for
/// the earliest lease expiry or reconcile time, so this bounds the wait as well: six
/// inconclusive passes (the quarantine threshold) with their back-off fit well inside it.
pub const RECOVERY_ROUNDS_MAX: u32 = 64;
/// The longest one round waits, so that progress elsewhere is seen.
pub const RECOVERY_WAIT_MS_MAX: u64 = 5_000;
/// Unsettled intents one round looks at; the rest wait for the next round.
pub const RECOVERY_BATCH_MAX: usize = 4_096;

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
    pub async fn recover_async(&self) -> Result<RecoveryReport, EngineError> {
        let mut report = RecoveryReport::default();
        for round in 0..RECOVERY_ROUNDS_MAX {
            kill_point!("during_recovery");
            let now = self.clock.now_ms();
            let pending = self
                .ledger
                .sweep_candidates(now, false, RECOVERY_BATCH_MAX)?;
            if round == 0 {
                report.found = pending.len();
            }
            if pending.is_empty() {
                report.rounds = round;
                return Ok(report);
            }
            let mut wake = now.saturating_add(RECOVERY_WAIT_MS_MAX);
            for key in &pending {
                wake = wake.min(self.recover_one(key, now, &mut report).await?);
            }
            let now_after = self.clock.now_ms();
            if wake > now_after {
                let wait = (wake - now_after).min(RECOVERY_WAIT_MS_MAX);
                self.clock.sleep_ms(wait).await;
            }
            report.rounds = round + 1;
        }
        let now = self.clock.now_ms();
        report.unsettled = self
            .ledger
            .sweep_candidates(now, false, RECOVERY_BATCH_MAX)?
            .len();
        Ok(report)
    }

    /// One intent's sweep step; returns when recovery should look again.
    async fn recover_one(
        &self,
        key: &IntentKey,
        now: u64,
        report: &mut RecoveryReport,
    ) -> Result<u64, EngineError> {
        let Some(view) = self.ledger.read_intent(key)? else {
            return Ok(u64::MAX);
        };
        Ok(match Sweep::new().next_step(now, &view) {
            SweepStep::WaitUntil(until) => until,
            SweepStep::ExpireLease(commit) => {
                if self.ledger.commit(&commit, now)?.is_ok() {
                    report.leases_expired += 1;
                }
                now + interlock_machine::RECONCILE_MIN_DELAY_MS
            }
            SweepStep::Reconcile => {
                self.reconcile_async(key).await?;
                report.passes += 1;
                now
            }
            SweepStep::Nothing => u64::MAX,
        })
    }

    /// [`Engine::recover_async`] on the calling thread.
    pub fn recover(&self) -> Result<RecoveryReport, EngineError> {
        pollster::block_on(self.recover_async())
    }

    /// A human rejects a held intent: `HOLD_REJECTED`, for good.
    pub fn reject(&self, key: &IntentKey, by: &str, why: &str) -> Result<(), EngineError> {
        self.operate(&operator::reject(key, by, why))
    }

    /// An operator settles a quarantined intent as applied, naming the rail's entity (which
    /// must carry the intent's stamp: the operator read it on the rail).
    pub fn resolve_applied(
        &self,
        key: &IntentKey,
        entity_id: &str,
        by: &str,
    ) -> Result<(), EngineError> {
        self.operate(&operator::resolve_applied(key, entity_id, by))
    }

    /// An operator settles a quarantined intent as not applied. Refused until the rail's lag
    /// has passed since the last attempt ended, by the engine's clock, not the operator's word.
    pub fn resolve_not_applied(&self, key: &IntentKey, by: &str) -> Result<(), EngineError> {
        let view = self
            .ledger
            .read_intent(key)?
            .ok_or_else(|| ApplyError::NoSuchIntent(key.describe()))?;
        let now = self.clock.now_ms();
        self.operate(&operator::resolve_not_applied(&self.config, now, &view, by))
    }

    fn operate(&self, commit: &Commit) -> Result<(), EngineError> {
        let now = self.clock.now_ms();
        self.ledger
            .apply(&commit.key, &commit.event, now, &commit.change)?;
        Ok(())
    }
}
