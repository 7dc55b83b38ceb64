//! `interlock-chaos`: the chaos matrix.
//!
//! A trial runs the real `interlock serve` binary, built with kill points, in front of the real
//! `interlock-rail-mock`, drives it with an MCP client, lets an armed kill point SIGKILL the
//! proxy (no destructors, no flush), restarts it (boot recovery runs), has the agent retry, and
//! judges the result from the rail's journal and the ledger, never from the proxy's answers.
//! The matrix runs trials for every kill point under every fault profile of the mock, plus
//! cells where two proxies on one ledger race the same refund, and the same on PostgreSQL, where
//! the database server itself is SIGKILLed too.

pub mod ledger;
pub mod matrix;
pub mod plan;
pub mod proc;
pub mod rng;
pub mod soak;
pub mod trial;
pub mod verdict;
pub mod world;
