//! `interlock-bench throughput`: refunds per second with K agents calling at once, direct on
//! `interlock-rail-mock` and through `interlock serve`, in three shapes:
//!
//! - `one`: one server process, K calls in flight on one MCP session;
//! - `spread`: P = min(K, [`SPREAD_PROCESSES_MAX`]) server processes, one session each, the K
//!   agents dealt to them in turn (K/P calls in flight on each session);
//! - `many`: K server processes, one session each: K mocks on one journal (direct), or K
//!   proxies on one ledger, each in front of its own mock on one shared journal (gated).
//!
//! Every refund is of a fresh payment, so none is refused. Per run it prints refunds/s, the
//! p50/p99 of the calls, the proxies' CPU per refund (from `/proc/PID/stat`), and, from a second
//! gated run of the same shape under `strace`, per refund: the ledger's fsyncs (only syncs of
//! files named `ledger.db*` count; the mock's journal is not the ledger), the bytes written to
//! its WAL, and the requests sent upstream, from the first call to the last answer. After each run the
//! rail's journal must hold exactly the refunds asked for, or the command fails.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use interlock_rail_mock::harness::{MockCommand, inspect};
use serde_json::{Value, json};

use crate::Res;
use crate::bins::Bins;
use crate::figures::figures;
use crate::latency::{mandate, payment_id, seed, timed};
use crate::mcp::{self, Client};
use crate::procstat::CpuClock;
use crate::strace::{self, Traced};

/// The most agents one run may have (each is a session, and in `many` a process or two).
pub const THROUGHPUT_AGENTS_MAX: usize = 256;
/// The most refunds one run may make.
pub const THROUGHPUT_REFUNDS_MAX: usize = 100_000;
/// The most server processes of the `spread` shape: K agents over P = min(K, this).
pub const SPREAD_PROCESSES_MAX: usize = 4;

/// The options of `interlock-bench throughput`.
#[derive(clap::Args, Debug, Clone)]
pub struct ThroughputArgs {
    /// Concurrent agents, one run per value and shape.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32,64")]
    pub ks: Vec<usize>,
    /// Refunds per run, shared evenly by its agents (rounded down to a multiple of K).
    #[arg(long, default_value_t = 640)]
    pub refunds: usize,
    /// Shapes: `one` (one server, K calls in flight on its session), `spread` (P = min(K, 4)
    /// server processes, one session each, K/P calls in flight on each) and `many` (K server
    /// processes, one call in flight on each).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Shape::One, Shape::Spread, Shape::Many])]
    pub shapes: Vec<Shape>,
    /// Do not count the ledger's fsyncs (the second, straced run of each gated shape).
    #[arg(long)]
    pub no_fsyncs: bool,
    /// Directory holding `interlock` and `interlock-rail-mock`. Default: built beside this binary.
    #[arg(long)]
    pub bin_dir: Option<PathBuf>,
    /// Print the figures as one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// How the K agents reach the server.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Shape {
    /// One server process, K calls in flight on one session.
    One,
    /// P = min(K, 4) server processes (`SPREAD_PROCESSES_MAX`), one session each, the agents
    /// dealt to them in turn: K/P calls in flight on each session, one ledger (and one journal).
    Spread,
    /// K server processes, one session each, on one ledger (and one journal).
    Many,
}

impl Shape {
    /// How many server processes K agents reach in this shape.
    pub fn servers(self, k: usize) -> usize {
        match self {
            Shape::One => 1,
            Shape::Spread => k.min(SPREAD_PROCESSES_MAX),
            Shape::Many => k,
        }
    }
}

/// What one path of one run measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PathFigures {
    /// Refunds answered per second of wall time (first call sent to last answer).
    pub refunds_per_s: f64,
    /// p50 of the calls, ms.
    pub p50_ms: f64,
    /// p99 of the calls, ms.
    pub p99_ms: f64,
    /// CPU of the server processes per refund, ms (the proxies on the gated path, the mocks on
    /// the direct one; their children not included).
    pub cpu_ms_per_refund: f64,
    /// What the trace counted during the calls (on the straced run only).
    #[serde(skip)]
    traced: Traced,
}

/// One (K, shape) run: both paths, and the ledger's fsyncs per gated refund.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    /// Concurrent agents.
    pub k: usize,
    /// The shape.
    pub shape: Shape,
    /// Refunds made on each path.
    pub refunds: usize,
    /// Straight to the mock.
    pub direct: PathFigures,
    /// Through `interlock serve`.
    pub gated: PathFigures,
    /// gated / direct refunds per second.
    pub ratio: f64,
    /// fdatasync + fsync calls on the ledger's files per gated refund (`None` with `--no-fsyncs`,
    /// as are the two below).
    pub fsyncs_per_refund: Option<f64>,
    /// Of those, the ones the ledger's checkpoint thread made, off the money path.
    pub checkpoint_fsyncs_per_refund: Option<f64>,
    /// Bytes written to the ledger's WAL per gated refund.
    pub wal_bytes_per_refund: Option<f64>,
    /// JSON-RPC requests the proxies sent upstream per gated refund.
    pub upstream_requests_per_refund: Option<f64>,
}

/// Which path a run measures.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PathKind {
    Direct,
    Gated,
    /// Gated, each proxy under `strace`, to count its syncs; the times are not kept.
    GatedStraced,
}

/// Checks the options; the per-agent refund count of each K.
fn plan(args: &ThroughputArgs) -> Res<()> {
    if args.ks.is_empty() || args.shapes.is_empty() {
        return Err("--ks and --shapes each need at least one value".into());
    }
    for &k in &args.ks {
        if k == 0 || k > THROUGHPUT_AGENTS_MAX {
            return Err(format!(
                "--ks {k}: each K must be 1..={THROUGHPUT_AGENTS_MAX} (THROUGHPUT_AGENTS_MAX)"
            ));
        }
        if args.refunds < k {
            return Err(format!(
                "--refunds {} is less than K = {k}: every agent makes at least one",
                args.refunds
            ));
        }
    }
    if args.refunds > THROUGHPUT_REFUNDS_MAX {
        return Err(format!(
            "--refunds {} exceeds THROUGHPUT_REFUNDS_MAX ({THROUGHPUT_REFUNDS_MAX})",
            args.refunds
        ));
    }
    Ok(())
}

/// Runs the throughput benchmark and returns its rows ([`report`] prints them).
pub fn throughput(args: &ThroughputArgs) -> Res<Vec<Row>> {
    plan(args)?;
    let bins = Bins::for_figures(args.bin_dir.as_deref())?;
    if !args.no_fsyncs {
        strace_present()?;
    }
    let cpu = CpuClock::new()?;
    let tmp = tempfile::Builder::new()
        .prefix("interlock-throughput-")
        .tempdir()
        .map_err(|e| format!("temp dir: {e}"))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("tokio: {e}"))?;
    let mut rows = Vec::new();
    for &shape in &args.shapes {
        for &k in &args.ks {
            let per_agent = args.refunds / k;
            let run = Run {
                bins: &bins,
                cpu,
                k,
                per_agent,
                shape,
            };
            let dir = |what: &str| -> Res<PathBuf> {
                let d = tmp.path().join(format!("{shape:?}-{k}-{what}"));
                std::fs::create_dir(&d).map_err(|e| format!("{}: {e}", d.display()))?;
                Ok(d)
            };
            let direct = rt.block_on(run.path(PathKind::Direct, &dir("direct")?))?;
            let gated = rt.block_on(run.path(PathKind::Gated, &dir("gated")?))?;
            let traced = if args.no_fsyncs {
                None
            } else {
                let straced = rt.block_on(run.path(PathKind::GatedStraced, &dir("straced")?))?;
                Some(straced.traced)
            };
            let per_refund =
                |f: fn(&Traced) -> u64| traced.map(|t| f(&t) as f64 / (k * per_agent) as f64);
            let row = Row {
                k,
                shape,
                refunds: k * per_agent,
                ratio: gated.refunds_per_s / direct.refunds_per_s,
                direct,
                gated,
                fsyncs_per_refund: per_refund(|t| t.ledger_syncs),
                checkpoint_fsyncs_per_refund: per_refund(|t| t.checkpoint_syncs),
                wal_bytes_per_refund: per_refund(|t| t.wal_bytes),
                upstream_requests_per_refund: per_refund(|t| t.upstream_requests),
            };
            eprintln!(
                "K={k:<3} {shape:?}: direct {:.0}/s, gated {:.0}/s",
                row.direct.refunds_per_s, row.gated.refunds_per_s
            );
            rows.push(row);
        }
    }
    Ok(rows)
}

/// One (K, shape) of the benchmark.
struct Run<'a> {
    bins: &'a Bins,
    cpu: CpuClock,
    k: usize,
    per_agent: usize,
    shape: Shape,
}

/// A server the agents talk to: its session(s) and the pid whose CPU is counted.
struct Server {
    client: Client,
    pid: u32,
    child: tokio::process::Child,
}

/// How long a server gets to exit by itself once its session is closed.
const SERVER_EXIT_TIMEOUT: Duration = Duration::from_secs(10);

impl Server {
    /// Closes the session and waits for the process to exit by itself: a proxy then stops its
    /// upstream, and a traced one lets `strace` finish. Killing `strace` instead would leave
    /// its tracee and the tracee's mock running. Killed only past [`SERVER_EXIT_TIMEOUT`].
    async fn stop(mut self) {
        let _ = self.client.cancel().await;
        if tokio::time::timeout(SERVER_EXIT_TIMEOUT, self.child.wait())
            .await
            .is_err()
        {
            eprintln!(
                "warning: server {} did not exit within {} s of its session closing; killed",
                self.pid,
                SERVER_EXIT_TIMEOUT.as_secs()
            );
            let _ = self.child.kill().await;
        }
    }
}

impl Run<'_> {
    /// Starts the servers of `kind` in `dir`, makes every refund, checks the rail's journal.
    async fn path(&self, kind: PathKind, dir: &Path) -> Res<PathFigures> {
        let trace_now = |kind| match kind {
            PathKind::GatedStraced => traced(dir),
            _ => Ok(Traced::default()),
        };
        let total = self.k * self.per_agent;
        let seed_file = dir.join("seed.json");
        std::fs::write(&seed_file, seed(total).to_string())
            .map_err(|e| format!("write seed: {e}"))?;
        let journal = dir.join("rail.db");
        let mock = |journal: &Path| {
            MockCommand::new(&self.bins.mock)
                .journal(journal)
                .seed(&seed_file)
                .log_level("error")
        };
        // The journal is made once, before any server shares it.
        mock(&journal).run_to_end()?;
        let servers = self.shape.servers(self.k);
        let mut started = Vec::with_capacity(servers);
        let mandate_file = dir.join("mandate.yaml");
        if kind != PathKind::Direct {
            let pins = mcp::pins(&self.bins.interlock, &self.bins.mock, &seed_file)?;
            std::fs::write(&mandate_file, mandate(&pins, "agent_bench", total)?)
                .map_err(|e| format!("write mandate: {e}"))?;
        }
        // One at a time: the first proxy creates the ledger, the others open it.
        for i in 0..servers {
            let cmd = match kind {
                PathKind::Direct => tokio::process::Command::from(mock(&journal).command()),
                PathKind::Gated | PathKind::GatedStraced => {
                    let mut cmd = match kind {
                        PathKind::GatedStraced => {
                            let mut c = tokio::process::Command::new("strace");
                            c.args(["-f", "-qq", "--seccomp-bpf", "-y"])
                                .args(["-s", strace::STRING_BYTES, "-e", strace::TRACED])
                                .arg("-o")
                                .arg(dir.join(format!("strace.{i}")))
                                .arg(&self.bins.interlock);
                            c
                        }
                        _ => tokio::process::Command::new(&self.bins.interlock),
                    };
                    cmd.arg("serve")
                        .arg("--db")
                        .arg(dir.join("ledger.db"))
                        .arg("--mandate")
                        .arg(&mandate_file)
                        .args(["--agent", "agent_bench", "--"])
                        .args(mock(&journal).argv())
                        .env("RUST_LOG", "warn")
                        .env_remove("RAZORPAY_KEY_ID");
                    cmd
                }
            };
            started.push(spawn(cmd, i).await?);
        }
        // The syncs of opening and creating the ledger are not the refunds'.
        let at_start = trace_now(kind)?;
        let before = self.cpu_of(&started)?;
        let t0 = Instant::now();
        let mut calls = tokio::task::JoinSet::new();
        for agent in 0..self.k {
            // Dealt in turn: in `spread`, K/P agents share each server's session.
            let client = started[agent % servers].client.peer().clone();
            let first = agent * self.per_agent;
            let n = self.per_agent;
            calls.spawn(async move {
                let mut took = Vec::with_capacity(n);
                for i in first..first + n {
                    let refund = json!({"payment_id": payment_id(i), "amount": 100});
                    took.push(timed(&client, "create_refund", refund, "refund").await?);
                }
                Ok::<_, String>(took)
            });
        }
        let mut latencies = Vec::with_capacity(total);
        while let Some(done) = calls.join_next().await {
            latencies.extend(done.map_err(|e| format!("an agent task: {e}"))??);
        }
        let wall = t0.elapsed();
        let after = self.cpu_of(&started)?;
        for s in started {
            s.stop().await;
        }
        let during = trace_now(kind)?.since(at_start);
        let refunds = inspect(&self.bins.mock, &journal)?.refunds.len();
        if refunds != total {
            return Err(format!(
                "the rail holds {refunds} refunds where {total} were made (K={}, {:?})",
                self.k, self.shape
            ));
        }
        let f = figures(latencies);
        Ok(PathFigures {
            refunds_per_s: total as f64 / wall.as_secs_f64(),
            p50_ms: f.p50,
            p99_ms: f.p99,
            cpu_ms_per_refund: (after - before) / total as f64,
            traced: during,
        })
    }

    fn cpu_of(&self, servers: &[Server]) -> Res<f64> {
        servers.iter().map(|s| self.cpu.pid_ms(s.pid)).sum()
    }
}

/// Spawns a server on piped stdio and completes the handshake.
async fn spawn(mut cmd: tokio::process::Command, i: usize) -> Res<Server> {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("spawn server {i}: {e}"))?;
    let pid = child.id().ok_or("a server exited at once")?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let stdin = child.stdin.take().ok_or("no stdin")?;
    let client = mcp::serve(stdout, stdin, &format!("server {i}")).await?;
    Ok(Server { client, pid, child })
}

/// `strace` must be on PATH to count syncs; say how to do without it.
fn strace_present() -> Res<()> {
    match std::process::Command::new("strace")
        .arg("-V")
        .stdout(Stdio::null())
        .status()
    {
        Ok(s) if s.success() => Ok(()),
        _ => Err(
            "strace is not on PATH: install it (apt-get install strace) to count the \
                  ledger's fsyncs, or pass --no-fsyncs"
                .into(),
        ),
    }
}

/// The counts of every `strace.*` file in `dir`.
fn traced(dir: &Path) -> Res<Traced> {
    let mut sum = Traced::default();
    for entry in std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))? {
        let path = entry.map_err(|e| e.to_string())?.path();
        let is_trace = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("strace."));
        if is_trace {
            let text =
                std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            sum = sum.plus(Traced::of(&text));
        }
    }
    Ok(sum)
}

/// Prints `rows` as a table, or as JSON with `--json`.
pub fn report(args: &ThroughputArgs, rows: &[Row]) {
    if args.json {
        println!("{}", rows_json(rows));
        return;
    }
    println!(
        "throughput: refunds/s with K agents at once, direct on the mock vs through interlock serve"
    );
    println!(
        "{:>4} {:<6} {:>8} {:>9} {:>8} {:>8} {:>9} {:>8} {:>8} {:>6} {:>9} {:>9} {:>7} {:>9} {:>6}",
        "K",
        "shape",
        "refunds",
        "direct/s",
        "d p50",
        "d p99",
        "gated/s",
        "g p50",
        "g p99",
        "ratio",
        "cpu ms/r",
        "fsyncs/r",
        "ckpt/r",
        "WAL KB/r",
        "up/r"
    );
    for r in rows {
        let traced = |v: Option<f64>, scale: f64| {
            v.map_or_else(|| "-".to_owned(), |f| format!("{:.2}", f / scale))
        };
        println!(
            "{:>4} {:<6} {:>8} {:>9.0} {:>8.2} {:>8.2} {:>9.0} {:>8.2} {:>8.2} {:>6.2} {:>9.3} {:>9} {:>7} {:>9} {:>6}",
            r.k,
            format!("{:?}", r.shape).to_lowercase(),
            r.refunds,
            r.direct.refunds_per_s,
            r.direct.p50_ms,
            r.direct.p99_ms,
            r.gated.refunds_per_s,
            r.gated.p50_ms,
            r.gated.p99_ms,
            r.ratio,
            r.gated.cpu_ms_per_refund,
            traced(r.fsyncs_per_refund, 1.0),
            traced(r.checkpoint_fsyncs_per_refund, 1.0),
            traced(r.wal_bytes_per_refund, 1024.0),
            traced(r.upstream_requests_per_refund, 1.0)
        );
    }
}

/// The JSON of `rows`, as `--json` prints it.
pub fn rows_json(rows: &[Row]) -> Value {
    json!({ "rows": rows })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(ks: &[usize], refunds: usize) -> ThroughputArgs {
        ThroughputArgs {
            ks: ks.to_vec(),
            refunds,
            shapes: vec![Shape::One],
            no_fsyncs: true,
            bin_dir: None,
            json: true,
        }
    }

    #[test]
    fn the_plan_is_bounded() {
        assert!(plan(&args(&[1, 8], 8)).is_ok());
        assert!(plan(&args(&[0], 8)).unwrap_err().contains("1..="));
        let many = plan(&args(&[THROUGHPUT_AGENTS_MAX + 1], 100_000)).unwrap_err();
        assert!(many.contains("THROUGHPUT_AGENTS_MAX"), "{many}");
        assert!(plan(&args(&[8], 4)).unwrap_err().contains("at least one"));
        let big = plan(&args(&[1], THROUGHPUT_REFUNDS_MAX + 1)).unwrap_err();
        assert!(big.contains("THROUGHPUT_REFUNDS_MAX"), "{big}");
    }

    #[test]
    fn spread_puts_k_agents_on_at_most_four_processes() {
        let spread: Vec<usize> = [1, 3, 4, 8, 64]
            .iter()
            .map(|&k| Shape::Spread.servers(k))
            .collect();
        assert_eq!(spread, vec![1, 3, 4, 4, SPREAD_PROCESSES_MAX]);
        assert_eq!(Shape::One.servers(64), 1);
        assert_eq!(Shape::Many.servers(64), 64);
    }
}
