//! `interlock`: an MCP proxy in front of a payment rail's MCP server that stops an agent from
//! paying twice or paying more than a human authorised.
//!
//! The binary (`src/main.rs`) is a thin shell over this library, as ripgrep's is over its
//! crates: the fuzz targets and the chaos runner drive the same request handling in process.

pub mod approval;
pub mod cli;
pub mod clock;
pub mod demo;
pub mod frames;
pub mod http;
pub mod init;
mod send_gate;
mod serve;
pub mod server;
pub mod telemetry;
pub mod upstream;
