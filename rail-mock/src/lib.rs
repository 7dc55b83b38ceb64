//! `interlock-rail-mock`: a Razorpay-compatible mock payment rail, served as an MCP server on
//! stdio, with a persistent SQLite journal and deterministic fault profiles.
//!
//! It is the rail the demo, the end-to-end tests, the chaos matrix and the benchmark run against:
//! the same tool names, argument schemas and result shapes as Razorpay's MCP server, so a proxy
//! configuration works against either. The journal is the ground truth that survives the death
//! of any client; `inspect` prints it for verifiers.
//!
//! Modules:
//! - [`model`]: the entities (payment, order, refund, instant settlement) and their JSON, the
//!   validated requests, fee arithmetic.
//! - [`tools`]: the tool list (schemas, annotations) and strict argument validation.
//! - [`error`]: the error-text contract (`"<what> failed: <CODE>: <description>"`).
//! - [`journal`]: SQLite persistence, the rail's checks inside `BEGIN IMMEDIATE`, call counters.
//! - [`seed`]: the seed format and the embedded demo seed.
//! - [`faults`]: `--faults` parsing and which faults hit which call.
//! - [`server`]: the rmcp server handler and the stdio loop.
//! - [`harness`]: for programs that run the mock as a process: its command line, and
//!   `inspect`'s output read back into types.
//!
//! The crate plays someone else's API, so it shares no parsing or money code with the proxy it
//! tests. From Interlock it takes only a wire constant both ends must agree on: the largest
//! amount ([`interlock_spec::money::MINOR_MAX`], the mock's [`model::AMOUNT_MAX`]).

pub mod error;
pub mod faults;
pub mod harness;
pub mod journal;
pub mod model;
pub mod seed;
pub mod server;
pub mod tools;

/// Exit code: served until stdin closed, or `inspect` printed the journal.
pub const EXIT_OK: i32 = 0;
/// Exit code: the journal failed while serving, or the MCP session failed.
pub const EXIT_RUNTIME: i32 = 1;
/// Exit code: a startup error (bad flag, fault, seed or journal); one line on stderr says which.
pub const EXIT_STARTUP: i32 = 2;
pub use server::EXIT_CONN_RESET;
