//! `interlock-bench`: benchmarks for Interlock, run as commands that print figures.
//!
//! - [`latency`]: the latency `interlock serve` adds to a read and to a refund.
//!
//! Shared pieces: [`bins`] finds or builds the binaries, [`mcp`] is the client side of MCP,
//! [`figures`] turns durations into quantiles.

#![deny(missing_docs)]

pub mod bins;
pub mod figures;
pub mod latency;
pub mod mcp;

/// Errors in the bench are sentences for the person running it.
pub type Res<T> = Result<T, String>;
