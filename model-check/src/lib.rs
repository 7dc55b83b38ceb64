//! # interlock-model-check
//!
//! An exhaustive stateright model of Interlock's exactly-once protocol ([`protocol`]), built on
//! `interlock_machine::step`, with a bounded and a large configuration and planted mutants.
#![deny(missing_docs)]

pub mod protocol;
