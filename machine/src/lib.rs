//! # interlock-machine
//!
//! The exactly-once machine of Interlock, written once. Everything that changes an intent's state
//! (the SQLite engine, the stateright model, the fuzz targets, the proxy) calls [`step`].
//!
//! - [`State`] (11), [`Event`] (19 kinds) and [`IntentCore`], the part of an intent the rules see.
//! - [`step`]`(&core, &event) -> Result<`[`Step`]`, `[`Illegal`]`>`: total and pure; the next core
//!   plus the [`Effect`] the engine performs once that core is durable, or a typed refusal.
//! - [`ReconcilePass`]: a pure fold over the rail's list pages that decides which reconcile event
//!   they prove (the three reconciler traps live there).
//! - [`invariants`]: I1–I6, "never two", "no phantom success" and the core sentence as predicates
//!   over a recorded history of [`Record`]s.
//! - [`Verdict`] (`BLOCK < HOLD < ALLOW`, meet) and [`AdvisoryVerdict`] (no `ALLOW`).
//! - [`table`]: the state × event table rendered from `step`, for the docs and the snapshot.
//!
//! The one sentence this crate exists to keep true:
//!
//! > The only edge into a rail call is `AUTHORIZED → IN_FLIGHT`, and after the first attempt the
//! > only edge into `AUTHORIZED` is from `CONFIRMED_NOT_APPLIED`.
//!
//! Architecture invariant: no I/O, no clock, no SQLite, no async. Time enters only as evidence an
//! event carries (`lag_elapsed`) or as a relative delay an effect asks for.
#![deny(missing_docs)]

pub mod invariants;
mod reconcile;
mod state;
mod step;
pub mod table;
mod verdict;

pub use invariants::{RailEntity, Record, Violation};
pub use reconcile::{PassProgress, RECONCILE_PAGES_MAX, ReconcilePass};
pub use state::{
    ATTEMPT_SEQ_MAX, ENTITY_ID_LENGTH_MAX, Effect, EntityRef, Event, EventKind, Illegal,
    IntentCore, RECONCILE_DELAY_MS_MAX, RECONCILE_INCONCLUSIVE_MAX, RECONCILE_MIN_DELAY_MS, State,
    Step,
};
pub use step::{reconcile_delay_ms, step};
pub use verdict::{AdvisoryVerdict, Verdict};
