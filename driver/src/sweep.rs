//! The sweep: what boot recovery and the background reconciler do with an intent a crash, a
//! stall or an ambiguous answer left unsettled. A lease is taken back only once it has expired,
//! so a live process in the middle of a call keeps its intent (ADR 0003); a reconcile pass runs
//! only once its time has come.

use crate::plan::{Change, Commit, IntentView, LeaseChange};
use interlock_machine::{Event, State};

/// What to do next with one unsettled intent.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
// Made and carried out once per step, never stored in bulk: boxing would only add an
// allocation to every step.
#[allow(clippy::large_enum_variant)]
pub enum SweepStep {
    /// Its lease has lapsed: commit `LEASE_EXPIRED`.
    ExpireLease(Commit),
    /// A reconcile pass is due: start one ([`crate::Pass::start`]).
    Reconcile,
    /// Nothing before this time.
    WaitUntil(u64),
    /// Nothing: the intent needs no sweep (settled, held, quarantined, or authorised).
    Nothing,
}

/// The sweep's rules. Plain data so the model checker can plant a flaw in it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Sweep {
    #[cfg(feature = "flaws")]
    flaw: Option<crate::flaw::Flaw>,
}

impl Sweep {
    /// The sweep as it ships.
    pub fn new() -> Sweep {
        Sweep::default()
    }

    /// Plants `flaw` (the model checker's mutants).
    #[cfg(feature = "flaws")]
    pub fn with_flaw(flaw: Option<crate::flaw::Flaw>) -> Sweep {
        Sweep { flaw }
    }

    #[cfg(feature = "flaws")]
    fn skips(&self, state: State) -> bool {
        use crate::flaw::Flaw;
        match self.flaw {
            Some(Flaw::ForgetUnknown) => state == State::Unknown,
            Some(Flaw::RejectionIsFinal) => state == State::FailedTerminal,
            _ => false,
        }
    }

    #[cfg(not(feature = "flaws"))]
    fn skips(&self, _state: State) -> bool {
        false
    }

    /// The next step for `view` at `now`.
    pub fn next_step(&self, now: u64, view: &IntentView) -> SweepStep {
        let state = view.core.state;
        if self.skips(state) {
            return SweepStep::Nothing;
        }
        if state.holds_lease() {
            return match view.lease_expires_at {
                Some(until) if until > now => SweepStep::WaitUntil(until),
                _ => SweepStep::ExpireLease(expire_lease(view)),
            };
        }
        if state.awaits_reconcile() {
            let due = view.reconcile_not_before.unwrap_or(0);
            return if due <= now {
                SweepStep::Reconcile
            } else {
                SweepStep::WaitUntil(due)
            };
        }
        SweepStep::Nothing
    }
}

/// `LEASE_EXPIRED` for an intent whose holder died or stalled past its lease.
pub fn expire_lease(view: &IntentView) -> Commit {
    Commit {
        key: view.key.clone(),
        event: Event::LeaseExpired,
        change: Change {
            lease: LeaseChange::Expire,
            detail: Some("lease expired: the holder died or stalled".into()),
            ..Change::default()
        },
    }
}
