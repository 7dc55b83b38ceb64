//! `interlock`: an MCP proxy in front of a payment rail's MCP server that stops an agent from
//! paying twice or paying more than a human authorised.
//!
//! Exit codes: 0 success; 1 refused or a failed check (bad mandate, broken chain, live key
//! without `--allow-live`, upstream or ledger failure); 2 usage (bad flags, missing values).

use std::process::ExitCode;

fn main() -> ExitCode {
    interlock::cli::run()
}
