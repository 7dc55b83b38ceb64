//! The `interlock-rail-mock` binary: serve the mock rail on stdio, or `inspect` a journal.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use interlock_rail_mock::faults::FaultPlan;
use interlock_rail_mock::journal::{Journal, JournalLocation};
use interlock_rail_mock::model::FeeRates;
use interlock_rail_mock::seed::Seed;
use interlock_rail_mock::server::{RailConfig, serve_stdio};
use interlock_rail_mock::{EXIT_OK, EXIT_RUNTIME, EXIT_STARTUP};
use tracing::level_filters::LevelFilter;

/// Worker threads of the runtime (the journal work runs on tokio's blocking pool).
const RUNTIME_WORKERS: usize = 2;
/// How long shutdown waits for stray tasks once stdin has closed.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(500);

#[derive(Parser)]
#[command(
    name = "interlock-rail-mock",
    version,
    about = "A Razorpay-compatible mock payment rail: an MCP server on stdio with a persistent journal and fault profiles.",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeArgs,
    /// Log level on stderr: error, warn, info, debug or trace.
    #[arg(long, value_name = "LEVEL", default_value = "info", global = true)]
    log_level: String,
}

#[derive(Subcommand)]
enum Command {
    /// Print every entity, the balance and the call counters of a journal as JSON on stdout.
    Inspect {
        /// The journal file.
        #[arg(long)]
        journal: PathBuf,
    },
}

#[derive(Args)]
struct ServeArgs {
    /// The SQLite journal. Without it the journal is in memory (and --seed is required).
    #[arg(long, value_name = "FILE")]
    journal: Option<PathBuf>,
    /// Seed an empty journal from FILE, or from the embedded demo seed with `demo`.
    #[arg(long, value_name = "FILE|demo")]
    seed: Option<String>,
    /// Fault profiles, e.g. `timeout_after_apply@2,read_lag=500`.
    #[arg(long, value_name = "P[,P...]", default_value = "none")]
    faults: String,
    /// Fee on a normal-speed refund, basis points of the amount.
    #[arg(long, value_name = "BPS", default_value_t = FeeRates::default().refund_normal_bps)]
    refund_fee_bps: u32,
    /// Fee on an optimum-speed refund, basis points of the amount.
    #[arg(long, value_name = "BPS", default_value_t = FeeRates::default().refund_optimum_bps)]
    refund_optimum_fee_bps: u32,
    /// Fee on an instant settlement, basis points of the amount requested.
    #[arg(long, value_name = "BPS", default_value_t = FeeRates::default().settlement_bps)]
    settlement_fee_bps: u32,
    /// Tax on every fee, basis points of the fee.
    #[arg(long, value_name = "BPS", default_value_t = FeeRates::default().tax_bps)]
    tax_bps: u32,
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn fail(code: i32, message: &str) -> ExitCode {
    eprintln!("interlock-rail-mock: {}", one_line(message));
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            let rendered = e.to_string();
            let first = rendered.lines().next().unwrap_or("bad arguments");
            return fail(EXIT_STARTUP, first.trim_start_matches("error: "));
        }
    };
    let level = match cli.log_level.parse::<LevelFilter>() {
        Ok(level) => level,
        Err(_) => {
            return fail(
                EXIT_STARTUP,
                &format!("--log-level: unknown level {:?}", cli.log_level),
            );
        }
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_max_level(level)
        .init();

    match cli.command {
        Some(Command::Inspect { journal }) => inspect(journal),
        None => serve(cli.serve),
    }
}

fn inspect(path: PathBuf) -> ExitCode {
    let journal = match Journal::open(&JournalLocation::File(path), None) {
        Ok(j) => j,
        Err(e) => return fail(EXIT_STARTUP, &e.to_string()),
    };
    match journal.dump() {
        Ok(dump) => {
            let text = serde_json::to_string_pretty(&dump).unwrap_or_default();
            let mut out = std::io::stdout().lock();
            match writeln!(out, "{text}").and_then(|()| out.flush()) {
                Ok(()) => ExitCode::from(u8::try_from(EXIT_OK).unwrap_or(0)),
                Err(e) => fail(
                    EXIT_RUNTIME,
                    &format!("inspect: cannot write to stdout: {e}"),
                ),
            }
        }
        Err(e) => fail(EXIT_RUNTIME, &format!("inspect: {e}")),
    }
}

fn serve(args: ServeArgs) -> ExitCode {
    let faults = match FaultPlan::parse(&args.faults) {
        Ok(f) => f,
        Err(e) => return fail(EXIT_STARTUP, &e.to_string()),
    };
    let rates = FeeRates {
        refund_normal_bps: args.refund_fee_bps,
        refund_optimum_bps: args.refund_optimum_fee_bps,
        settlement_bps: args.settlement_fee_bps,
        tax_bps: args.tax_bps,
    };
    if let Err(e) = rates.check() {
        return fail(EXIT_STARTUP, &e);
    }
    let seed = match args.seed.as_deref().map(Seed::load).transpose() {
        Ok(s) => s,
        Err(e) => return fail(EXIT_STARTUP, &e.to_string()),
    };
    let location = match args.journal {
        Some(path) => JournalLocation::File(path),
        None => JournalLocation::Memory,
    };
    let journal = match Journal::open(&location, seed.as_ref()) {
        Ok(j) => j,
        Err(e) => return fail(EXIT_STARTUP, &e.to_string()),
    };
    if location == JournalLocation::Memory {
        tracing::warn!(
            "no --journal: the journal is in memory and is lost when this process exits"
        );
    }
    tracing::info!(
        journal = journal.label(),
        faults = args.faults,
        "serving MCP on stdio"
    );

    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(RUNTIME_WORKERS)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(EXIT_RUNTIME, &format!("cannot start the runtime: {e}")),
    };
    let result = runtime.block_on(serve_stdio(journal, RailConfig { rates, faults }));
    runtime.shutdown_timeout(SHUTDOWN_GRACE);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(EXIT_RUNTIME, &e.to_string()),
    }
}
