//! `interlock-chaos matrix`: SIGKILL the real proxy at every kill point under every rail fault,
//! restart it, retry, and judge "never two, never unknown" from the rail's journal and the
//! ledger. Exit codes: 0 no violation; 1 a violation, or the run could not be set up; 2 usage.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use interlock_chaos::matrix::{self, JOBS_MAX, Plan, TRIALS_MAX};
use interlock_chaos::plan::{self, Action, Backend, Fault, Point, Shape};
use interlock_chaos::soak;
use interlock_chaos::trial;
use interlock_chaos::world::Bins;

/// The chaos matrix.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the matrix, print the per-cell table and the total, write docs/RESULTS.chaos.md.
    Matrix(MatrixArgs),
    /// Steady mixed load with rail faults and periodic SIGKILLs on one ledger, sampled every
    /// interval, judged at the end; writes docs/RESULTS.soak.md.
    Soak(SoakArgs),
}

#[derive(clap::Args)]
struct SoakArgs {
    /// How long the load runs, in minutes.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u32).range(1..=i64::from(soak::MINUTES_MAX)))]
    minutes: u32,
    /// Seconds between samples.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    sample_secs: u64,
    /// Agent calls a second, per agent.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=i64::from(soak::RATE_MAX)))]
    rate: u32,
    /// Agents calling at once on the proxy's one session: their money calls share the
    /// ledger's group commit, so a SIGKILL lands on an open batch of several intents.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=i64::from(soak::AGENTS_MAX)))]
    agents: u32,
    /// Seconds a proxy serves before it is SIGKILLed and restarted.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    kill_every_secs: u64,
    /// The seed the load derives from.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Use the binaries in DIR (as `matrix --bin-dir`).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// The soak's directory (kept). Default: a fresh one under the temporary directory.
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// The results file.
    #[arg(long, default_value = "docs/RESULTS.soak.md")]
    out: PathBuf,
    /// Do not write the results file.
    #[arg(long)]
    no_write: bool,
}

#[derive(clap::Args)]
struct MatrixArgs {
    /// Trials per cell.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=i64::from(TRIALS_MAX)))]
    trials: u32,
    /// Kill points, comma-separated (default: all).
    #[arg(long, value_delimiter = ',', value_parser = Point::parse)]
    points: Vec<Point>,
    /// Fault profiles, comma-separated (default: all).
    #[arg(long, value_delimiter = ',', value_parser = Fault::parse)]
    faults: Vec<Fault>,
    /// Money calls, comma-separated: refund, settlement (default: both).
    #[arg(long, value_delimiter = ',', value_parser = Action::parse)]
    actions: Vec<Action>,
    /// Leave out the cells where two proxies race the same refund.
    #[arg(long)]
    no_races: bool,
    /// Cell shapes, comma-separated: single, race, stall, server_kill (default: all). A stall
    /// cell stops a proxy (SIGSTOP) past its lease at its point while a second one serves the
    /// ledger; a server-kill cell (PostgreSQL only) SIGKILLs the database server.
    #[arg(long, value_delimiter = ',', value_parser = Shape::parse)]
    shapes: Vec<Shape>,
    /// Where the ledger is: `sqlite` (a file per trial) or `postgres` (a database per trial on
    /// a throwaway PostgreSQL cluster this command starts, installing PostgreSQL if it must;
    /// a server of its own for each server-kill trial). A run writes its backend's part of
    /// the results file and keeps the other's.
    #[arg(long, default_value = "sqlite", value_parser = Backend::parse)]
    backend: Backend,
    /// Trials per stall cell (each waits out a lease, so they are fewer by default).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=i64::from(TRIALS_MAX)))]
    stall_trials: u32,
    /// The seed every trial's inputs derive from.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Trials at once (each is two or three processes, mostly waiting on timers).
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u64).range(1..=JOBS_MAX as u64))]
    jobs: u64,
    /// Use the `interlock` (built with `--features failpoints`) and `interlock-rail-mock` in DIR
    /// instead of building them.
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// Where trial directories go (a failing trial's is kept). Default: a fresh directory
    /// under the system's temporary directory.
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Keep every trial's directory, not only failing ones.
    #[arg(long)]
    keep: bool,
    /// The results file.
    #[arg(long, default_value = "docs/RESULTS.chaos.md")]
    out: PathBuf,
    /// Do not write the results file (a partial run should not replace the full one).
    #[arg(long)]
    no_write: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let run = match cli.command {
        Command::Matrix(args) => matrix_command(args),
        Command::Soak(args) => soak_command(args),
    };
    match run {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("interlock-chaos: {e}");
            ExitCode::from(1)
        }
    }
}

/// The binaries, built unless `bin_dir` names them, and where they came from.
fn binaries(bin_dir: Option<&PathBuf>) -> Result<(Bins, String), String> {
    // Read before building, so that it names the tree the build starts from.
    let source = source_tree();
    let provenance = match bin_dir {
        Some(dir) => format!(
            "from `{}`, not verified against the source tree ({source} when the run started)",
            dir.display()
        ),
        None => format!("built by the run from {source}"),
    };
    let bins = match bin_dir {
        Some(dir) => Bins::in_dir(dir)?,
        None => {
            let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
            let profile_dir = exe.parent().ok_or("the binary has no directory")?;
            if profile_dir.file_name().is_some_and(|n| n != "release") {
                eprintln!("interlock-chaos: a debug build; timings mean little (use --release)");
            }
            eprintln!(
                "interlock-chaos: building interlock (with kill points) and interlock-rail-mock…"
            );
            Bins::build(profile_dir)?
        }
    };
    Ok((bins, provenance))
}

fn soak_command(args: SoakArgs) -> Result<bool, String> {
    let (bins, provenance) = binaries(args.bin_dir.as_ref())?;
    let dir = args.work_dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("interlock-soak-{}", std::process::id()))
    });
    let plan = soak::SoakPlan {
        duration: Duration::from_secs(u64::from(args.minutes) * 60),
        sample_every: Duration::from_secs(args.sample_secs),
        rate: args.rate,
        agents: args.agents,
        kill_every: Duration::from_secs(args.kill_every_secs),
        seed: args.seed,
    };
    eprintln!(
        "interlock-chaos: soak for {} min, {} agent(s) at {} calls/s each, a SIGKILL every {} s, in {}",
        args.minutes,
        args.agents,
        args.rate,
        args.kill_every_secs,
        dir.display()
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let outcome = runtime.block_on(soak::run(&bins, dir, &plan));
    let command = std::iter::once("cargo run -p interlock-chaos --release --".to_owned())
        .chain(std::env::args().skip(1))
        .collect::<Vec<_>>()
        .join(" ");
    let text = soak::results_markdown(&outcome, &plan, &command, &provenance, &matrix::utc_now());
    println!("{text}");
    if !args.no_write {
        std::fs::write(&args.out, &text)
            .map_err(|e| format!("cannot write {}: {e}", args.out.display()))?;
        eprintln!("interlock-chaos: wrote {}", args.out.display());
    }
    Ok(outcome.violations.is_empty())
}

fn matrix_command(args: MatrixArgs) -> Result<bool, String> {
    let (bins, provenance) = binaries(args.bin_dir.as_ref())?;
    let work_dir = args.work_dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("interlock-chaos-{}", std::process::id()))
    });
    let points = if args.points.is_empty() {
        let mut all = Point::ALL.to_vec();
        if args.backend == Backend::Postgres {
            all.push(Point::PgCommit);
        }
        all
    } else {
        args.points.clone()
    };
    let faults = if args.faults.is_empty() {
        Fault::ALL.to_vec()
    } else {
        args.faults.clone()
    };
    let actions = if args.actions.is_empty() {
        Action::ALL.to_vec()
    } else {
        args.actions.clone()
    };
    let shapes: Vec<Shape> = Shape::ALL
        .into_iter()
        .filter(|s| args.shapes.is_empty() || args.shapes.contains(s))
        .filter(|s| !(args.no_races && *s == Shape::Race))
        .collect();
    if args.backend == Backend::Sqlite && args.shapes.contains(&Shape::ServerKill) {
        return Err(
            "server_kill cells need --backend postgres (there is no server to kill under SQLite)"
                .into(),
        );
    }
    let plan = Plan {
        cells: plan::cells(args.backend, &actions, &points, &faults, &shapes),
        trials: args.trials,
        stall_trials: args.stall_trials,
        seed: args.seed,
        jobs: usize::try_from(args.jobs).expect("bounded by JOBS_MAX"),
    };
    eprintln!(
        "interlock-chaos: {} cells × {} trials ({} per stall cell), {} at once, seed {}; trial directories under {}",
        plan.cells.len(),
        plan.trials,
        plan.stall_trials,
        plan.jobs,
        plan.seed,
        work_dir.display()
    );
    eprintln!("interlock-chaos: binaries {provenance}");
    if plan.cells.is_empty() {
        return Err(format!(
            "the options select no cell on {} (its cells run under {} only)",
            args.backend,
            match args.backend {
                Backend::Sqlite => "the chosen faults".to_owned(),
                Backend::Postgres => plan::POSTGRES_FAULTS
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
            }
        ));
    }
    let setup = Arc::new(trial::setup(
        bins,
        work_dir.clone(),
        args.keep,
        args.backend,
    )?);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let outcome = runtime.block_on(matrix::run(setup, &plan));
    println!("{}", matrix::table(&outcome));
    println!("total: {}", matrix::totals(&outcome));
    if !args.no_write {
        let command = std::iter::once("cargo run -p interlock-chaos --release --".to_owned())
            .chain(std::env::args().skip(1))
            .collect::<Vec<_>>()
            .join(" ");
        let part = matrix::results_markdown(
            &outcome,
            &plan,
            args.backend,
            &command,
            &provenance,
            &matrix::utc_now(),
        );
        let existing = std::fs::read_to_string(&args.out).ok();
        let text = matrix::merge_results(existing.as_deref(), args.backend, &part);
        std::fs::write(&args.out, text)
            .map_err(|e| format!("cannot write {}: {e}", args.out.display()))?;
        eprintln!("interlock-chaos: wrote {}", args.out.display());
    }
    if outcome.violation_count() == 0 && !args.keep {
        let _ = std::fs::remove_dir_all(&work_dir);
    }
    Ok(outcome.violation_count() == 0)
}

/// The source tree's commit, and whether `git status --porcelain` listed anything (a change,
/// or a file git does not track, either of which a build may have used).
fn source_tree() -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let Some(head) = git(&["rev-parse", "--short=12", "HEAD"]) else {
        return "an unknown commit (git could not be asked)".to_owned();
    };
    match git(&["status", "--porcelain"]) {
        Some(changes) if changes.is_empty() => format!("commit `{head}` (a clean tree)"),
        Some(changes) => format!(
            "commit `{head}` with {} uncommitted or untracked paths (a dirty tree)",
            changes.lines().count()
        ),
        None => format!("commit `{head}` (whether the tree was clean is unknown)"),
    }
}
