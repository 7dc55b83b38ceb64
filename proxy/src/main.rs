//! `interlock`: an MCP proxy in front of a payment rail's MCP server that stops an agent from
//! paying twice or paying more than a human authorised.
//!
//! Exit codes: 0 success; 1 refused or a failed check (bad mandate, broken chain, live key
//! without `--allow-live`, upstream or ledger failure); 2 usage (bad flags, missing values).

mod cli;
mod demo;
mod server;
mod upstream;

use std::process::ExitCode;

fn main() -> ExitCode {
    cli::run()
}
