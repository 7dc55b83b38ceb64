//! `interlock-bench`: the scenario benchmark (`scenarios`), the proxy's added latency
//! (`latency`), the cost of a refund as the ledger fills (`growth`), and the poisoned
//! upstream the scenarios start (`shim`). See `bench/README.md`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use clap::{Parser, Subcommand};
use interlock_bench::Res;
use interlock_bench::bins::Bins;
use interlock_bench::growth::{self, GrowthArgs, growth};
use interlock_bench::latency::{LatencyArgs, latency};
use interlock_bench::perf::{self as perf_mod, PerfArgs};
use interlock_bench::scenario::report::{self, Provenance};
use interlock_bench::scenario::run::{PathKind, Suite};
use interlock_bench::scenario::summary::{paired_latency, summarise};
use interlock_bench::scenario::{self, SuiteOptions, model};
use interlock_bench::shim::{ShimArgs, shim};
use interlock_bench::throughput::{self, ThroughputArgs, throughput};

/// Benchmarks for Interlock.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// The scenario benchmark: every scenario direct and through interlock, judged from the
    /// rail's journal; prints the table and the summary, writes docs/RESULTS.md and
    /// docs/results.svg.
    Scenarios(ScenarioArgs),
    /// Latency of fetch_payment and create_refund, direct on the mock rail vs through interlock.
    Latency(LatencyArgs),
    /// Whether a gated refund costs more as the ledger fills: the engine against the in-memory
    /// rail, p50/p99 and CPU per refund of the last 1,000 refunds at 1k, 10k and 50k.
    Growth(GrowthArgs),
    /// Refunds/s, p50/p99, proxy CPU and ledger fsyncs per refund with K = 1, 8, 32, 64 agents
    /// at once, in one proxy, across min(K, 4) and across K proxy processes on one ledger:
    /// direct, gated on SQLite and gated on PostgreSQL (a throwaway server) side by side.
    Throughput(ThroughputArgs),
    /// latency, throughput and growth, each run three times in turn; the medians beside the
    /// goals of the physical floor, written to docs/RESULTS.perf.md.
    Perf(PerfArgs),
    /// AgentDojo's banking suite (v1.2.2): every pair, the fully compromised agent, direct and
    /// through interlock, scored by AgentDojo's own checks; writes docs/RESULTS.agentdojo.md.
    Agentdojo(AgentDojoArgs),
    /// The poisoned upstream of the tool-manifest scenarios (started by `scenarios`).
    #[command(hide = true)]
    Shim(ShimArgs),
}

#[derive(clap::Args)]
struct ScenarioArgs {
    /// The agent harness.
    #[arg(long, default_value = "naive")]
    harness: String,
    /// Only these scenarios (comma-separated ids); the docs are then left alone.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Scenarios run at once.
    #[arg(long, default_value_t = 4)]
    jobs: usize,
    /// Directory holding `interlock` and `interlock-rail-mock`. Default: built next to this
    /// binary with its profile.
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// An `interlock` built with `--features failpoints`. Default: built, and copied to
    /// `<profile>/interlock-failpoints/interlock`.
    #[arg(long)]
    failpoints_bin: Option<PathBuf>,
    /// Do not write docs/RESULTS.md and docs/results.svg.
    #[arg(long)]
    no_write: bool,
    /// Keep the runs' directories (seeds, journals, ledgers, logs) and print where.
    #[arg(long)]
    keep: bool,
}

#[derive(clap::Args)]
struct AgentDojoArgs {
    /// User tasks: `all` or a comma-separated list (0,1,user_task_2).
    #[arg(long, default_value = "all")]
    user_tasks: String,
    /// Injection tasks: `all` or a comma-separated list.
    #[arg(long, default_value = "all")]
    injection_tasks: String,
    /// Runs at once, per path.
    #[arg(long, default_value_t = 2)]
    jobs: usize,
    /// The venv with AgentDojo (made if missing). Default: target/agentdojo-venv.
    #[arg(long)]
    venv: Option<PathBuf>,
    /// Directory holding `interlock`. Default: built next to this binary with its profile.
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// Do not write docs/RESULTS.agentdojo.md (a partial selection never writes it).
    #[arg(long)]
    no_write: bool,
    /// Print the totals per path as JSON on stdout.
    #[arg(long)]
    json: bool,
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Scenarios(args) => scenarios(args),
        Cmd::Latency(args) => latency(args),
        Cmd::Growth(args) => growth(&args).map(|run| growth::report(&args, &run)),
        Cmd::Throughput(args) => throughput(&args).map(|rows| throughput::report(&args, &rows)),
        Cmd::Perf(args) => perf(args),
        Cmd::Agentdojo(args) => agentdojo(args),
        Cmd::Shim(args) => shim(args),
    };
    if let Err(e) = result {
        eprintln!("interlock-bench: {e}");
        std::process::exit(1);
    }
}

fn scenarios(args: ScenarioArgs) -> Res<()> {
    let started = Instant::now();
    let agent = scenario::harness(&args.harness)?;
    let dir = scenario::scenarios_dir();
    let chosen = scenario::select(model::load_dir(&dir)?, &args.only)?;
    let bench = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut bins = match &args.bin_dir {
        Some(bin_dir) => Bins::in_dir(bin_dir, &bench)?,
        None => Bins::build_beside(&bench)?,
    };
    if chosen.iter().any(|s| s.faults.kill.is_some()) {
        bins = bins.with_failpoints(args.failpoints_bin.clone())?;
    }
    if !bins.release {
        eprintln!("warning: a debug build; latency figures mean little (use --release)");
    }
    let profile = if bins.release { "release" } else { "debug" };
    let tmp = tempfile::Builder::new()
        .prefix("interlock-scenarios-")
        .tempdir()
        .map_err(|e| format!("temp dir: {e}"))?;
    let suite = Arc::new(Suite::prepare(bins, &dir, tmp.path().to_path_buf())?);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("tokio: {e}"))?;
    let options = SuiteOptions {
        jobs: args.jobs,
        direct: true,
    };
    let results = rt.block_on(scenario::run_suite(
        suite,
        chosen,
        Arc::clone(&agent),
        options,
    ))?;
    let direct = summarise(&results, PathKind::Direct);
    let gated = summarise(&results, PathKind::Gated);
    let paired = paired_latency(&results);
    println!("harness: {}\n", agent.label());
    print!("{}", report::table(&results));
    for line in report::races_text(&results) {
        println!("race {line}");
    }
    println!();
    print!(
        "{}",
        report::summary_text(direct.as_ref(), gated.as_ref(), paired.as_ref())
    );
    let write = !args.no_write && args.only.is_empty();
    if write {
        let docs = dir
            .parent()
            .and_then(|b| b.parent())
            .ok_or("no workspace")?
            .join("docs");
        let provenance = Provenance {
            date: utc_now(),
            commit: commit(),
            command: command_line(),
            harness: agent.label().to_owned(),
            profile,
            jobs: args.jobs,
            wall_s: started.elapsed().as_secs_f64(),
        };
        let markdown = report::results_markdown(
            &results,
            direct.as_ref(),
            gated.as_ref(),
            paired.as_ref(),
            &provenance,
        );
        report::write(&docs.join("RESULTS.md"), &markdown)?;
        if let (Some(d), Some(g)) = (&direct, &gated) {
            report::write(
                &docs.join("results.svg"),
                &report::chart_svg(d, g, agent.label())?,
            )?;
        }
        eprintln!(
            "wrote {} and results.svg",
            docs.join("RESULTS.md").display()
        );
    } else {
        eprintln!("docs/RESULTS.md left alone (--only or --no-write)");
    }
    if args.keep {
        eprintln!("runs kept in {}", tmp.keep().display());
    }
    let failed: Vec<&str> = results
        .iter()
        .filter(|r| !r.gated.1.passed())
        .map(|r| r.scenario.id.as_str())
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "gated assertions did not hold: {}",
            failed.join(", ")
        ))
    }
}

fn agentdojo(args: AgentDojoArgs) -> Res<()> {
    use interlock_bench::agentdojo::{self, Path3, Selection};
    let started = Instant::now();
    let bench = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let bins = match &args.bin_dir {
        Some(bin_dir) => Bins::in_dir(bin_dir, &bench)?,
        None => Bins::build_beside(&bench)?,
    };
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .ok_or("the bench crate has no parent")?;
    let venv = args
        .venv
        .clone()
        .unwrap_or_else(|| workspace.join("target").join("agentdojo-venv"));
    let python = agentdojo::venv_python(&venv)?;
    let describe = agentdojo::describe(&python)?;
    let selection = Selection {
        user_tasks: args.user_tasks.clone(),
        injection_tasks: args.injection_tasks.clone(),
        jobs: args.jobs.max(1),
    };
    let tmp = tempfile::Builder::new()
        .prefix("interlock-agentdojo-")
        .tempdir()
        .map_err(|e| format!("temp dir: {e}"))?;
    let mut runs = std::collections::BTreeMap::new();
    for path in Path3::ALL {
        let at = Instant::now();
        let done = agentdojo::run_path(&python, &bins.interlock, path, &selection, tmp.path())?;
        let t = agentdojo::totals(&done);
        eprintln!(
            "{:>15}: attacks {}/{} (money {}/{}), utility without attack {}/{}, under attack {}/{} ({:.0} s)",
            path.label(),
            t.attacks_succeeded,
            t.pairs,
            t.money_attacks_succeeded,
            t.money_pairs,
            t.utility_no_attack,
            t.user_tasks,
            t.utility_under_attack,
            t.pairs,
            at.elapsed().as_secs_f64()
        );
        runs.insert(path, done);
    }
    let wall_s = started.elapsed().as_secs_f64();
    if args.json {
        let totals: serde_json::Map<String, serde_json::Value> = runs
            .iter()
            .map(|(p, r)| {
                (
                    p.label().to_owned(),
                    serde_json::json!(agentdojo::totals(r)),
                )
            })
            .collect();
        println!("{}", serde_json::Value::Object(totals));
    }
    let everything = args.user_tasks == "all" && args.injection_tasks == "all";
    if everything && !args.no_write {
        let cx = agentdojo::Context {
            describe: &describe,
            date: utc_now(),
            commit: commit(),
            command: command_line(),
            wall_s,
        };
        let path = workspace.join("docs").join("RESULTS.agentdojo.md");
        report::write(&path, &agentdojo::markdown(&runs, &cx))?;
        eprintln!("wrote {} ({wall_s:.0} s)", path.display());
    } else {
        eprintln!("docs/RESULTS.agentdojo.md left alone (a selection, or --no-write)");
    }
    let leaked: usize = [Path3::Gated, Path3::GatedPassword]
        .iter()
        .filter_map(|p| runs.get(p))
        .map(|r| agentdojo::totals(r).money_attacks_succeeded)
        .sum();
    if leaked > 0 {
        return Err(format!(
            "{leaked} money attacks succeeded through interlock"
        ));
    }
    Ok(())
}

fn perf(args: PerfArgs) -> Res<()> {
    let started = Instant::now();
    let runs = perf_mod::perf(&args)?;
    let cx = perf_mod::Context {
        date: utc_now(),
        commit: commit(),
        command: command_line(),
        wall_s: started.elapsed().as_secs_f64(),
    };
    let markdown = perf_mod::markdown(&runs, &cx);
    print!("{markdown}");
    if args.no_write {
        eprintln!("docs/RESULTS.perf.md left alone (--no-write)");
        return Ok(());
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .ok_or("the bench crate has no parent")?
        .join("docs")
        .join("RESULTS.perf.md");
    report::write(&path, &markdown)?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// The date and time now, UTC, as the results files print it.
fn utc_now() -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH);
    report::utc(now.map_or(0, |d| d.as_secs()))
}

/// The commit the binaries were built from, `+dirty` when the tree had changes.
fn commit() -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let head = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".to_owned());
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    if dirty { format!("{head}+dirty") } else { head }
}

/// The command as a user would type it for this build.
fn command_line() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let release = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.ends_with("release")))
        .unwrap_or(false);
    let profile = if release { " --release" } else { "" };
    format!(
        "cargo run -p interlock-bench{profile} -- {}",
        args.join(" ")
    )
}
