//! # interlock-driver
//!
//! Interlock's sans-IO core: everything that decides what happens to a money call, and nothing
//! that performs it. The proxy (and the engine's blocking facade, and the model checker) feed it
//! what the world said through `handle_*(now, …)` calls and carry out the commands it returns.
//!
//! - [`Proposal`]: one proposal (or approval) from a parsed action to an [`Answer`], through
//!   [`Command`]s: read the referent, decide (the ladder inside the ledger's transaction),
//!   commit, re-read, call the rail, answer.
//! - [`Pass`]: one reconcile pass, through [`PassCommand`]s: commit its start, list pages,
//!   commit what they prove.
//! - [`Sweep`]: what boot recovery and the background reconciler do with an unsettled intent.
//! - [`gates`]: G1–G3, G5 (advisory type only), G6 as pure predicates, and the ladder.
//! - [`rail`]: the rail vocabulary and the [`Rail`] trait the runner performs rail commands with.
//! - [`classify()`]: which event a rail's answer proves.
//! - [`answer`]: the one State → Answer table.
//! - [`plan`]: what the driver asks the ledger to commit and what it reads back.
//!
//! Architecture invariant: depends on `interlock-spec` and `interlock-machine` (and serde)
//! only. No SQLite, no async runtime, no MCP, no clock: time is the `now` every handler is
//! given, I/O is a command. The machine's rules stay in `machine::step`, which the ledger calls
//! when it commits; the driver decides only which event to propose when.
#![deny(missing_docs)]

pub mod answer;
mod classify;
pub mod config;
#[cfg_attr(not(feature = "flaws"), allow(dead_code))]
mod flaw;
pub mod gates;
pub mod operator;
mod pass;
pub mod plan;
mod propose;
pub mod rail;
mod sweep;
pub mod terms;

pub use answer::{Answer, Outcome, Said};
pub use classify::classify;
pub use config::{DriverConfig, LEASE_MARGIN_MS};
#[cfg(feature = "flaws")]
pub use flaw::Flaw;
pub use pass::{Pass, PassCommand, PassResult};
pub use plan::{
    Applied, AttemptClaim, AttemptView, Change, Commit, Decide, Decided, Expect, Finding,
    IntentKey, IntentView, Judgement, LeaseChange, NewIntent, Refusal, UsageQuery,
};
pub use propose::{Command, Context, Failure, PROPOSAL_COMMANDS_MAX, Proposal};
pub use rail::{CallBudget, Rail, RailCall, RailError, RailOutcome, Referent};
pub use sweep::{Sweep, SweepStep, expire_lease};
