//! Interlock's engine: everything between a parsed money tool call and the rail, with no MCP in
//! it (the proxy wires it to MCP).
//!
//! - [`ledger`]: the SQLite write-ahead ledger and the one function that changes state.
//! - [`audit`]: the hash-chained audit log and its verifier.
//! - [`gates`]: G1–G3, G5 (advisory type only), G6, as pure predicates, and the ladder.
//! - [`executor`]: the exactly-once executor ([`Engine::propose`]).
//! - [`reconcile`] and [`recovery`]: settling ambiguous outcomes, and boot recovery.
//! - [`rail`]: the [`Rail`] trait; [`memory_rail`]: a scripted in-memory rail for tests.
//! - [`usage`]: what G2 and G3 count, from the ledger; [`inspect`]: one intent in full, for operators.
//! - [`clock`]: time, passed in.
//!
//! The engine is synchronous and deterministic given its clock, its rail and its instance id.
//! Every blocking call is bounded: SQLite by its busy timeout, the rail by its own timeout.

pub mod audit;
pub mod clock;
pub mod executor;
pub mod gates;
pub mod inspect;
pub mod ledger;
pub mod memory_rail;
pub mod rail;
pub mod reconcile;
pub mod recovery;
pub mod usage;

pub use clock::{Clock, ManualClock, SystemClock};
pub use executor::{Answer, Engine, EngineConfig, EngineError, Outcome};
pub use ledger::{IntentKey, Ledger, LedgerError};
pub use rail::{Rail, RailCall, RailOutcome, Referent};

/// A chaos kill point. With the `failpoints` feature, the `fail` crate decides what happens
/// here (set by `FAILPOINTS=name=return(kill)` or by a test's `fail::cfg`): `return(kill)`
/// SIGKILLs the process on the spot (no destructor, no flush); plain `return` makes the
/// enclosing function fail with [`EngineError::Killed`], which a test treats as a crash.
/// Without the feature this expands to nothing: a production build has no kill points.
#[macro_export]
#[doc(hidden)]
macro_rules! kill_point {
    ($name:literal) => {
        ::fail::fail_point!($name, |arg: Option<String>| {
            $crate::executor::killed_at($name, arg.as_deref())
        })
    };
}

/// The kill points, in the order a refund meets them. The chaos matrix arms each in turn.
pub const KILL_POINTS: &[&str] = &[
    "before_wal",
    "after_authorize",
    "after_wal_before_call",
    "during_call",
    "after_call_before_commit",
    "after_commit_before_ack",
    "during_reconcile",
    "during_recovery",
];
