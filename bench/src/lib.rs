//! `interlock-bench`: benchmarks for Interlock, run as commands that print figures.
//!
//! - [`scenario`]: the scenario benchmark. Thirty attack and failure scenarios
//!   (`bench/scenarios/*.yaml`), each run by the same harness with the same seed once against
//!   the mock rail directly and once through `interlock serve`, judged from the rail's journal.
//! - [`latency`]: the latency `interlock serve` adds to a read and to a refund.
//! - [`throughput`]: refunds per second with K agents at once, direct and gated.
//! - [`growth`]: whether a gated refund costs more as the ledger fills.
//! - [`perf`]: the three above, run in turn, medians against the goals (`docs/RESULTS.perf.md`).
//! - [`agentdojo`]: AgentDojo's banking suite, direct and through Interlock, scored by its own
//!   checks (`bench/agentdojo/`).
//! - [`shim`]: the poisoned upstream the tool-manifest scenarios put in front of the mock.
//!
//! Shared pieces: [`bins`] finds or builds the binaries, [`mcp`] is the client side of MCP,
//! [`figures`] turns durations into quantiles, [`procstat`] reads processes' CPU time.

#![deny(missing_docs)]

pub mod agentdojo;
pub mod bins;
pub mod figures;
pub mod growth;
pub mod latency;
pub mod mcp;
pub mod perf;
pub mod procstat;
pub mod scenario;
pub mod shim;
pub mod strace;
pub mod throughput;

/// Errors in the bench are sentences for the person running it.
pub type Res<T> = Result<T, String>;
