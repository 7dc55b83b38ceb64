//! `interlock`: an MCP proxy in front of a payment rail's MCP server that stops an agent from
//! paying twice or paying more than a human authorised.
//!
//! Exit codes: 0 success; 1 refused or a failed check (bad mandate, broken chain, live key
//! without `--allow-live`, upstream or ledger failure); 2 usage (bad flags, missing values).

use std::process::ExitCode;

fn main() -> ExitCode {
    // Reads `FAILPOINTS`; kept alive for the whole run so an armed point stays armed.
    #[cfg(feature = "failpoints")]
    let _kill_points = fail::FailScenario::setup();
    interlock::cli::run()
}
