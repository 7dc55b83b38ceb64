//! `interlock-bench`: benchmarks for Interlock. `latency` measures what `interlock serve` adds
//! to a read and to a refund; see `bench/README.md`.

use clap::{Parser, Subcommand};
use interlock_bench::latency::{LatencyArgs, latency};

/// Benchmarks for Interlock.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Latency of fetch_payment and create_refund, direct on the mock rail vs through interlock.
    Latency(LatencyArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Latency(args) => latency(args),
    };
    if let Err(e) = result {
        eprintln!("interlock-bench: {e}");
        std::process::exit(1);
    }
}
