//! `interlock-bench throughput`: refunds per second with K agents calling at once, direct on
//! `interlock-rail-mock` and through `interlock serve`, in three shapes:
//!
//! - `one`: one server process, K calls in flight on one MCP session;
//! - `spread`: P = min(K, [`SPREAD_PROCESSES_MAX`]) server processes, one session each, the K
//!   agents dealt to them in turn (K/P calls in flight on each session);
//! - `many`: K server processes, one session each: K mocks on one journal (direct), or K
//!   proxies on one ledger, each in front of its own mock on one shared journal (gated).
//!
//! Each (K, shape) is one direct run and one gated run per ledger backend (`--backends`):
//! SQLite (a file in the run's directory) and PostgreSQL (a fresh database per run on one
//! throwaway cluster the command starts, every proxy of the run on it: K proxies on one
//! ledger). Every refund is of a fresh payment, so none is refused. Per run it prints
//! refunds/s, the p50/p99 of the calls, the proxies' CPU per refund (from `/proc/PID/stat`),
//! and, on SQLite, from a second gated run of the same shape under `strace`, per refund: the
//! ledger's fsyncs (only syncs of files named `ledger.db*` count; the mock's journal is not the
//! ledger), the bytes written to its WAL, and the requests sent upstream, from the first call
//! to the last answer. On PostgreSQL the syncs and the WAL are the server's, not the proxy's:
//! those figures are not measured (and the straced run is not made). After each run the rail's
//! journal must hold exactly the refunds asked for, or the command fails.

use std::collections::BTreeMap;
use std::ffi::OsString;
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
    /// Ledgers of the gated path, each beside the same direct run: `sqlite` (a file) and
    /// `postgres` (a fresh database per run, shared by the run's proxies, on a throwaway
    /// PostgreSQL cluster this command starts and stops; installed from Debian's packages when
    /// missing and the command runs as root).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Backend::Sqlite, Backend::Postgres])]
    pub backends: Vec<Backend>,
    /// Do not count the ledger's fsyncs (the second, straced run of each gated shape on
    /// SQLite; on PostgreSQL the syncs are the server's and are never counted).
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

/// The ledger the gated path writes.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// SQLite: `ledger.db` in the run's directory, every proxy of the run on that file.
    Sqlite,
    /// PostgreSQL: a fresh database on the command's throwaway cluster, every proxy on it.
    Postgres,
}

impl Backend {
    /// The name `--backends` and the JSON use.
    pub fn label(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

impl Shape {
    /// The name `--shapes` and the JSON use.
    pub fn label(self) -> &'static str {
        match self {
            Shape::One => "one",
            Shape::Spread => "spread",
            Shape::Many => "many",
        }
    }

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

/// The gated path on one backend: its figures, and the ledger's fsyncs per refund.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Gated {
    /// Refunds/s, p50/p99, and the proxies' CPU per refund (on PostgreSQL the server's CPU is
    /// not in it).
    #[serde(flatten)]
    pub path: PathFigures,
    /// gated / direct refunds per second.
    pub ratio: f64,
    /// fdatasync + fsync calls on the ledger's files per gated refund. `None` when not
    /// measured, as are the three below: with `--no-fsyncs`, and always on PostgreSQL, whose
    /// syncs and WAL are the server's, not the proxy's.
    pub fsyncs_per_refund: Option<f64>,
    /// Of those, the ones the ledger's checkpoint thread made, off the money path.
    pub checkpoint_fsyncs_per_refund: Option<f64>,
    /// Bytes written to the ledger's WAL per gated refund.
    pub wal_bytes_per_refund: Option<f64>,
    /// JSON-RPC requests the proxies sent upstream per gated refund.
    pub upstream_requests_per_refund: Option<f64>,
}

impl Gated {
    /// The figures of a gated run beside the direct one, with the trace of its straced twin.
    fn new(
        path: PathFigures,
        direct: &PathFigures,
        traced: Option<Traced>,
        refunds: usize,
    ) -> Gated {
        let per_refund = |f: fn(&Traced) -> u64| traced.map(|t| f(&t) as f64 / refunds as f64);
        Gated {
            ratio: path.refunds_per_s / direct.refunds_per_s,
            path,
            fsyncs_per_refund: per_refund(|t| t.ledger_syncs),
            checkpoint_fsyncs_per_refund: per_refund(|t| t.checkpoint_syncs),
            wal_bytes_per_refund: per_refund(|t| t.wal_bytes),
            upstream_requests_per_refund: per_refund(|t| t.upstream_requests),
        }
    }
}

/// One (K, shape): the direct run, and the gated run on each backend asked for.
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
    /// Through `interlock serve`, one entry per backend of `--backends` (in JSON an object
    /// keyed `sqlite`, `postgres`).
    pub gated: BTreeMap<Backend, Gated>,
}

impl Row {
    /// The gated figures on `backend`, if it was measured.
    pub fn on(&self, backend: Backend) -> Option<&Gated> {
        self.gated.get(&backend)
    }
}

/// Which path a run measures.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PathKind<'a> {
    Direct,
    Gated(Ledger<'a>),
    /// Gated on SQLite, each proxy under `strace`, to count its syncs; the times are not kept.
    GatedStraced,
}

/// Where the proxies of a gated run keep their one ledger.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ledger<'a> {
    /// `ledger.db` in the run's directory.
    Sqlite,
    /// This PostgreSQL connection string.
    Postgres(&'a str),
}

impl PathKind<'_> {
    /// For the person reading an error.
    fn label(self) -> &'static str {
        match self {
            PathKind::Direct => "direct",
            PathKind::Gated(Ledger::Sqlite) => "gated on SQLite",
            PathKind::Gated(Ledger::Postgres(_)) => "gated on PostgreSQL",
            PathKind::GatedStraced => "gated on SQLite under strace",
        }
    }
}

/// Checks the options; the per-agent refund count of each K.
fn plan(args: &ThroughputArgs) -> Res<()> {
    if args.ks.is_empty() || args.shapes.is_empty() || args.backends.is_empty() {
        return Err("--ks, --shapes and --backends each need at least one value".into());
    }
    for (i, backend) in args.backends.iter().enumerate() {
        if args.backends[..i].contains(backend) {
            return Err(format!(
                "--backends names {} twice: each backend is one column",
                backend.label()
            ));
        }
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
    if !args.no_fsyncs && args.backends.contains(&Backend::Sqlite) {
        strace_present()?;
    }
    // One server for the whole command, each gated run on a database of its own; stopped
    // and removed when dropped at the end (or by its watchdog if this process dies).
    let cluster = if args.backends.contains(&Backend::Postgres) {
        eprintln!("starting a throwaway PostgreSQL cluster…");
        let started = interlock_pgtest::Cluster::start("interlock-bench-pg-").map_err(|why| {
            format!(
                "--backends postgres needs a PostgreSQL server: {why} \
                 (--backends sqlite measures SQLite alone)"
            )
        })?;
        Some(started)
    } else {
        None
    };
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
            let refunds = k * per_agent;
            let direct = rt.block_on(run.path(PathKind::Direct, &dir("direct")?))?;
            let mut gated = BTreeMap::new();
            let mut said = format!(
                "K={k:<3} {}: direct {:.0}/s",
                shape.label(),
                direct.refunds_per_s
            );
            for &backend in &args.backends {
                let figures = match backend {
                    Backend::Sqlite => {
                        let kind = PathKind::Gated(Ledger::Sqlite);
                        let path = rt.block_on(run.path(kind, &dir("sqlite")?))?;
                        let traced = if args.no_fsyncs {
                            None
                        } else {
                            let straced = dir("sqlite-straced")?;
                            Some(
                                rt.block_on(run.path(PathKind::GatedStraced, &straced))?
                                    .traced,
                            )
                        };
                        Gated::new(path, &direct, traced, refunds)
                    }
                    Backend::Postgres => {
                        let cluster = cluster
                            .as_ref()
                            .ok_or("no PostgreSQL cluster was started for --backends postgres")?;
                        let url = cluster.create_database("b")?;
                        let kind = PathKind::Gated(Ledger::Postgres(&url));
                        let path = rt.block_on(run.path(kind, &dir("postgres")?))?;
                        // The fsyncs are the server's, made by processes this command does
                        // not trace: not measured, never guessed.
                        Gated::new(path, &direct, None, refunds)
                    }
                };
                said.push_str(&format!(
                    ", {} {:.0}/s",
                    backend.label(),
                    figures.path.refunds_per_s
                ));
                gated.insert(backend, figures);
            }
            eprintln!("{said}");
            rows.push(Row {
                k,
                shape,
                refunds,
                direct,
                gated,
            });
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
    async fn path(&self, kind: PathKind<'_>, dir: &Path) -> Res<PathFigures> {
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
        let db: OsString = match kind {
            PathKind::Gated(Ledger::Postgres(url)) => url.into(),
            _ => dir.join("ledger.db").into(),
        };
        // One at a time: the first proxy creates the ledger, the others open it.
        for i in 0..servers {
            let cmd = match kind {
                PathKind::Direct => tokio::process::Command::from(mock(&journal).command()),
                PathKind::Gated(_) | PathKind::GatedStraced => {
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
                        .arg(&db)
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
                "the rail holds {refunds} refunds where {total} were made (K={}, {}, {})",
                self.k,
                self.shape.label(),
                kind.label()
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
    } else {
        print!("{}", table(&args.backends, rows));
    }
}

/// A figure from the straced run: `-` when it was not made (`--no-fsyncs`), `n/a` on
/// PostgreSQL, where it is never made.
fn traced_cell(backend: Backend, v: Option<f64>, scale: f64) -> String {
    match (backend, v) {
        (Backend::Postgres, _) => "n/a".to_owned(),
        (Backend::Sqlite, None) => "-".to_owned(),
        (Backend::Sqlite, Some(f)) => format!("{:.2}", f / scale),
    }
}

/// The table [`report`] prints: refunds/s, p50 and p99 direct and per backend, one line per
/// (K, shape); then the costs of a gated refund, one line per (K, shape, backend); then what
/// each column is and what was not measured.
pub fn table(backends: &[Backend], rows: &[Row]) -> String {
    use std::fmt::Write;
    let mut backends = backends.to_vec();
    backends.sort();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "throughput: refunds/s with K agents at once, direct on the mock vs through interlock serve on each ledger"
    );
    let _ = write!(
        out,
        "{:>4} {:<6} {:>7} {:>9} {:>8} {:>8}",
        "K", "shape", "refunds", "direct/s", "p50", "p99"
    );
    for b in &backends {
        let _ = write!(
            out,
            " | {:>10} {:>8} {:>8} {:>5}",
            format!("{}/s", b.label()),
            "p50",
            "p99",
            "ratio"
        );
    }
    out.push('\n');
    for r in rows {
        let _ = write!(
            out,
            "{:>4} {:<6} {:>7} {:>9.0} {:>8.2} {:>8.2}",
            r.k,
            r.shape.label(),
            r.refunds,
            r.direct.refunds_per_s,
            r.direct.p50_ms,
            r.direct.p99_ms
        );
        for &b in &backends {
            match r.on(b) {
                Some(g) => {
                    let _ = write!(
                        out,
                        " | {:>10.0} {:>8.2} {:>8.2} {:>5.2}",
                        g.path.refunds_per_s, g.path.p50_ms, g.path.p99_ms, g.ratio
                    );
                }
                None => {
                    let _ = write!(out, " | {:>10} {:>8} {:>8} {:>5}", "-", "-", "-", "-");
                }
            }
        }
        out.push('\n');
    }
    let _ = writeln!(out, "\nper gated refund:");
    let _ = writeln!(
        out,
        "{:>4} {:<6} {:<8} {:>9} {:>9} {:>7} {:>9} {:>6}",
        "K", "shape", "backend", "cpu ms/r", "fsyncs/r", "ckpt/r", "WAL KB/r", "up/r"
    );
    for r in rows {
        for (&b, g) in &r.gated {
            let _ = writeln!(
                out,
                "{:>4} {:<6} {:<8} {:>9.3} {:>9} {:>7} {:>9} {:>6}",
                r.k,
                r.shape.label(),
                b.label(),
                g.path.cpu_ms_per_refund,
                traced_cell(b, g.fsyncs_per_refund, 1.0),
                traced_cell(b, g.checkpoint_fsyncs_per_refund, 1.0),
                traced_cell(b, g.wal_bytes_per_refund, 1024.0),
                traced_cell(b, g.upstream_requests_per_refund, 1.0)
            );
        }
    }
    for note in [
        "",
        "p50/p99: ms per call; ratio: gated / direct refunds/s; cpu ms/r: the proxies' own CPU",
        "(on PostgreSQL the server's is not in it). fsyncs/r (ckpt/r of them by the checkpoint",
        "thread), WAL KB/r and up/r (requests upstream) are counted in a second SQLite run with",
        "each proxy under strace, syncs of ledger.db* only. -: not measured (--no-fsyncs).",
        "n/a: not measured on PostgreSQL, whose fsyncs and WAL writes happen in the server, not",
        "in the proxy (no straced run is made).",
    ] {
        let _ = writeln!(out, "{note}");
    }
    out
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
            backends: vec![Backend::Sqlite],
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
    fn every_backend_is_one_column() {
        let mut twice = args(&[1], 8);
        twice.backends = vec![Backend::Sqlite, Backend::Postgres, Backend::Sqlite];
        assert!(plan(&twice).unwrap_err().contains("sqlite twice"));
        twice.backends.clear();
        assert!(plan(&twice).unwrap_err().contains("--backends"));
    }

    fn figures(refunds_per_s: f64) -> PathFigures {
        PathFigures {
            refunds_per_s,
            p50_ms: 1.0,
            p99_ms: 2.0,
            cpu_ms_per_refund: 0.5,
            traced: Traced::default(),
        }
    }

    #[test]
    fn the_servers_syncs_are_not_measured_and_say_so() {
        let direct = figures(1000.0);
        let traced = Traced {
            ledger_syncs: 16,
            ..Traced::default()
        };
        let gated = BTreeMap::from([
            (
                Backend::Sqlite,
                Gated::new(figures(500.0), &direct, Some(traced), 8),
            ),
            (
                Backend::Postgres,
                Gated::new(figures(250.0), &direct, None, 8),
            ),
        ]);
        let row = Row {
            k: 2,
            shape: Shape::Spread,
            refunds: 8,
            direct,
            gated,
        };
        let sqlite = row.on(Backend::Sqlite).unwrap();
        assert_eq!((sqlite.ratio, sqlite.fsyncs_per_refund), (0.5, Some(2.0)));
        let text = table(
            &[Backend::Postgres, Backend::Sqlite],
            std::slice::from_ref(&row),
        );
        let head = text.lines().nth(1).unwrap();
        assert!(
            head.find("sqlite/s").unwrap() < head.find("postgres/s").unwrap(),
            "{text}"
        );
        let pg_line = text.lines().find(|l| l.contains(" postgres ")).unwrap();
        assert_eq!(pg_line.matches("n/a").count(), 4, "{text}");
        let sq_line = text.lines().find(|l| l.contains(" sqlite ")).unwrap();
        assert!(
            sq_line.contains("2.00") && !sq_line.contains("n/a"),
            "{text}"
        );
        let json = rows_json(&[row]);
        let pg = &json["rows"][0]["gated"]["postgres"];
        assert_eq!(pg["ratio"].as_f64(), Some(0.25), "{json}");
        assert!(pg["fsyncs_per_refund"].is_null(), "{json}");
        assert_eq!(json["rows"][0]["shape"], "spread");
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
