//! Interlock's engine: the ledger, and the runner that carries out the driver's commands
//! against it and a rail. It holds no rule of its own: the gates, which event comes next and
//! what the agent is told are the driver's (`interlock-driver`); what an event does to an
//! intent is the machine's.
//!
//! - [`ledger`]: the SQLite write-ahead ledger, the one function that changes state, and every
//!   SQL statement of the engine, returning typed rows (typed reads for the driver, [`usage`],
//!   [`audit`], [`inspect`]).
//! - [`audit`]: the hash-chained audit log and its verifier.
//! - [`executor`]: the runner of a proposal ([`Engine::propose_async`]), with the chaos kill
//!   points between its steps; [`reconcile`] and [`recovery`]: the runner of reconcile passes,
//!   the sweep and boot recovery, and the operator's edges.
//! - [`memory_rail`]: a scripted in-memory rail for tests and the cost example.
//! - [`usage`]: what G2 and G3 count, from the ledger; [`inspect`]: one intent in full, for
//!   operators.
//! - [`clock`]: time, passed in.
//!
//! Deterministic given its clock, its rail and its instance id. Every wait is bounded: SQLite
//! by its busy timeout, the rail by its own timeout.

pub mod clock;
pub mod executor;
pub mod ledger;
pub mod memory_rail;
pub mod reconcile;
pub mod recovery;

pub use ledger::{audit, inspect, usage};

pub use clock::{Clock, LedgerTime, ManualClock, SystemClock};
pub use executor::{Engine, EngineConfig, EngineError};
pub use interlock_driver::{Answer, IntentView, Outcome, answer, gates, rail};
pub use ledger::{IntentKey, Ledger, LedgerError};
pub use rail::{Rail, RailCall, RailOutcome, Referent};

/// A chaos kill point. With the `failpoints` feature, the `fail` crate decides what happens
/// here (set by `FAILPOINTS=name=return(kill)` or by a test's `fail::cfg`): `return(kill)`
/// SIGKILLs the process on the spot (no destructor, no flush); `return(stop)` SIGSTOPs it, and
/// it carries on from here when sent SIGCONT (a stall: a paused VM, a debugger, a long GC
/// elsewhere); plain `return` makes the enclosing function fail with [`EngineError::Killed`],
/// which a test treats as a crash. Without the feature this expands to nothing: a production
/// build has no kill points.
#[macro_export]
#[doc(hidden)]
macro_rules! kill_point {
    ($name:literal) => {
        #[cfg(feature = "failpoints")]
        {
            if let Some(Some(error)) = ::fail::eval($name, |arg: Option<String>| {
                $crate::executor::at_kill_point($name, arg.as_deref())
            }) {
                return Err(error);
            }
        }
    };
}

/// The kill points, in the order a refund meets them. The chaos matrix arms each in turn.
pub const KILL_POINTS: &[&str] = &[
    "before_wal",
    "after_wal_before_call",
    "during_call",
    "after_call_before_commit",
    "after_commit_before_ack",
    "during_reconcile",
    "during_recovery",
];

/// The kill points of the PostgreSQL ledger only: `pg_commit`, between a batch's last
/// statement and its `COMMIT` (the chaos matrix stops the process there and kills the server).
pub const PG_KILL_POINTS: &[&str] = &["pg_commit"];
