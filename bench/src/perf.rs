//! `interlock-bench perf`: the latency, throughput and growth commands, each run `--runs`
//! times in turn, reduced to the median of each figure and written to `docs/RESULTS.perf.md`
//! beside the goals of issue 21. The file is machine-written: every number in it comes from
//! this run.

use std::path::PathBuf;

use crate::Res;
use crate::growth::{GrowthArgs, GrowthPoint, growth, growth_pct};
use crate::latency::{FLOOR_FSYNCS, LatencyArgs, LatencyFigures, Transport, measure};
use crate::throughput::{Backend, Gated, Row, Shape, ThroughputArgs, throughput};

/// The most runs of each command one `perf` makes.
pub const PERF_RUNS_MAX: usize = 9;

/// The options of `interlock-bench perf`.
#[derive(clap::Args, Debug)]
pub struct PerfArgs {
    /// Runs of each command; each figure is the median of the runs.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// `latency --calls`.
    #[arg(long, default_value_t = 300)]
    pub calls: usize,
    /// `throughput --refunds` (per K and shape).
    #[arg(long, default_value_t = 640)]
    pub refunds: usize,
    /// `growth --at`.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000,50000")]
    pub growth_at: Vec<usize>,
    /// Directory holding `interlock` and `interlock-rail-mock`. Default: built beside this binary.
    #[arg(long)]
    pub bin_dir: Option<PathBuf>,
    /// Do not write docs/RESULTS.perf.md.
    #[arg(long)]
    pub no_write: bool,
}

/// Where and how the figures were made, for the file's header.
pub struct Context {
    /// UTC date and time of the run.
    pub date: String,
    /// The commit the binaries were built from.
    pub commit: String,
    /// The command line.
    pub command: String,
    /// Wall time, seconds.
    pub wall_s: f64,
}

/// Every run of every command.
pub struct Perf {
    /// The latency runs.
    pub latency: Vec<LatencyFigures>,
    /// The throughput runs: rows in the same order in each.
    pub throughput: Vec<Vec<Row>>,
    /// The growth runs: points in the same order in each.
    pub growth: Vec<Vec<GrowthPoint>>,
}

/// Runs each command `args.runs` times, one after another in turn.
pub fn perf(args: &PerfArgs) -> Res<Perf> {
    if args.runs == 0 || args.runs > PERF_RUNS_MAX {
        return Err(format!(
            "--runs {}: must be 1..={PERF_RUNS_MAX} (PERF_RUNS_MAX)",
            args.runs
        ));
    }
    let mut all = Perf {
        latency: Vec::new(),
        throughput: Vec::new(),
        growth: Vec::new(),
    };
    for run in 1..=args.runs {
        eprintln!("perf: run {run} of {}: latency", args.runs);
        all.latency.push(measure(&LatencyArgs {
            calls: args.calls,
            warmup: 20,
            bin_dir: args.bin_dir.clone(),
            json: true,
            transport: Transport::Stdio,
        })?);
        eprintln!("perf: run {run} of {}: throughput", args.runs);
        all.throughput.push(throughput(&ThroughputArgs {
            ks: vec![1, 8, 32, 64],
            refunds: args.refunds,
            shapes: vec![Shape::One, Shape::Many],
            // Issue 21's goals are for the embedded ledger; `throughput` sets PostgreSQL beside it.
            backends: vec![Backend::Sqlite],
            no_fsyncs: false,
            bin_dir: args.bin_dir.clone(),
            json: true,
        })?);
        eprintln!("perf: run {run} of {}: growth", args.runs);
        all.growth.push(
            growth(&GrowthArgs {
                at: args.growth_at.clone(),
                window: 1000,
                db: None,
                json: true,
            })?
            .points,
        );
    }
    Ok(all)
}

/// The median of `values` (the mean of the middle two for an even count); NaN when empty.
pub fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// The median over runs of one figure of the row at `i`.
fn row_median(runs: &[Vec<Row>], i: usize, f: impl Fn(&Row) -> f64) -> f64 {
    median(runs.iter().map(|rows| f(&rows[i])).collect())
}

/// One figure of a row's gated run on SQLite, the one backend `perf` measures; NaN if absent.
fn sqlite(r: &Row, f: impl Fn(&Gated) -> f64) -> f64 {
    r.on(Backend::Sqlite).map_or(f64::NAN, f)
}

fn find(rows: &[Row], k: usize, shape: Shape) -> Option<usize> {
    rows.iter().position(|r| r.k == k && r.shape == shape)
}

/// A goal against a figure: "met" or "not met", never left to the reader.
fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "**not met**" }
}

/// The markdown of `docs/RESULTS.perf.md`.
pub fn markdown(p: &Perf, cx: &Context) -> String {
    let n = p.latency.len();
    let lat = |f: &dyn Fn(&LatencyFigures) -> f64| median(p.latency.iter().map(f).collect());
    let refund_p50 = lat(&|l| l.refund.1.p50 - l.refund.0.p50);
    let refund_p99 = lat(&|l| l.refund.1.p99 - l.refund.0.p99);
    let read_p50 = lat(&|l| l.read.1.p50 - l.read.0.p50);
    let direct_read = lat(&|l| l.read.0.p50);
    let fsync = lat(&|l| l.fsync_p50_ms);
    let floor = lat(&|l| l.floor_ms());
    let mut out = String::new();
    let mut line = |s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    line("# Performance: the money path against its floor".into());
    line(String::new());
    line(format!(
        "Machine-written by `{}` on {} at commit `{}`, {:.0} s. Each figure is the median of {n} \
         runs of each command, run in turn (latency, throughput, growth). Machine: {}.",
        cx.command,
        cx.date,
        cx.commit,
        cx.wall_s,
        machine()
    ));
    line(String::new());
    line("| figure | now | floor / direct | goal | |".into());
    line("| --- | --- | --- | --- | --- |".into());
    line(format!(
        "| create_refund added p50 / p99 | {refund_p50:.2} / {refund_p99:.2} ms | floor = direct \
         fetch_payment p50 {direct_read:.2} + {FLOOR_FSYNCS} × fsync p50 {fsync:.3} = {floor:.2} ms \
         | p50 ≤ 1.2 × floor ({:.2}), p99 ≤ 2 ms | {} |",
        1.2 * floor,
        verdict(refund_p50 <= 1.2 * floor && refund_p99 <= 2.0)
    ));
    line(format!(
        "| fetch_payment added p50 | {read_p50:.2} ms | — | ≤ 0.15 ms | {} |",
        verdict(read_p50 <= 0.15)
    ));
    if let Some(i) = find(&p.throughput[0], 1, Shape::One) {
        let syncs = row_median(&p.throughput, i, |r| {
            sqlite(r, |g| g.fsyncs_per_refund.unwrap_or(f64::NAN))
        });
        let trips = row_median(&p.throughput, i, |r| {
            sqlite(r, |g| g.upstream_requests_per_refund.unwrap_or(f64::NAN))
        });
        line(format!(
            "| upstream requests per refund (K = 1, one proxy) | {trips:.2} | direct: 1 | 2, provenance still checked for every call | {} |",
            verdict(trips <= 2.0)
        ));
        let checkpoint = row_median(&p.throughput, i, |r| {
            sqlite(r, |g| g.checkpoint_fsyncs_per_refund.unwrap_or(f64::NAN))
        });
        // Judged on every sync of the ledger's files, the checkpoint thread's included: they
        // are off the refund's path but not off the disk.
        line(format!(
            "| ledger fsyncs per refund (K = 1, one proxy) | {syncs:.2} ({checkpoint:.2} of them by the checkpoint thread) | 2 | 2 | {} |",
            verdict(syncs <= 2.0)
        ));
        let wal = row_median(&p.throughput, i, |r| {
            sqlite(r, |g| g.wal_bytes_per_refund.unwrap_or(f64::NAN))
        });
        line(format!(
            "| WAL bytes per refund (K = 1, one proxy) | {:.1} KB | — | ≤ 32 KB | {} |",
            wal / 1024.0,
            verdict(wal <= 32.0 * 1024.0)
        ));
        let cpu = row_median(&p.throughput, i, |r| {
            sqlite(r, |g| g.path.cpu_ms_per_refund)
        });
        let mock = row_median(&p.throughput, i, |r| r.direct.cpu_ms_per_refund);
        line(format!(
            "| proxy CPU per refund (K = 1, one proxy) | {cpu:.2} ms | mock: {mock:.2} ms | ≤ 0.5 ms | {} |",
            verdict(cpu <= 0.5)
        ));
    }
    for (shape, what, goal, p99_goal) in [
        (Shape::One, "one proxy, 64 calls in flight", 0.8, None),
        (
            Shape::Many,
            "64 proxy processes on one ledger",
            0.6,
            Some(100.0),
        ),
    ] {
        let Some(i) = find(&p.throughput[0], 64, shape) else {
            continue;
        };
        let g = row_median(&p.throughput, i, |r| sqlite(r, |g| g.path.refunds_per_s));
        let d = row_median(&p.throughput, i, |r| r.direct.refunds_per_s);
        let ratio = row_median(&p.throughput, i, |r| sqlite(r, |g| g.ratio));
        let p99 = row_median(&p.throughput, i, |r| sqlite(r, |g| g.path.p99_ms));
        let goal_text = match p99_goal {
            Some(ms) => format!("≥ {goal}, p99 ≤ {ms:.0} ms"),
            None => format!("≥ {goal}"),
        };
        line(format!(
            "| gated / direct refunds/s, {what} | {g:.0} / {d:.0} = {ratio:.2}, gated p99 {p99:.0} ms | — | {goal_text} | {} |",
            verdict(ratio >= goal && p99_goal.is_none_or(|ms| p99 <= ms))
        ));
    }
    if let Some(first) = p.growth.first() {
        let p50s: Vec<f64> = (0..first.len())
            .map(|i| median(p.growth.iter().map(|g| g[i].p50_ms).collect()))
            .collect();
        let cpus: Vec<f64> = (0..first.len())
            .map(|i| median(p.growth.iter().map(|g| g[i].cpu_ms_per_refund).collect()))
            .collect();
        let sizes: Vec<String> = first.iter().map(|g| g.refunds.to_string()).collect();
        let shown: Vec<String> = p50s.iter().map(|v| format!("{v:.2}")).collect();
        let pct = growth_pct(p50s[0], p50s[p50s.len() - 1]);
        let cpu_pct = growth_pct(cpus[0], cpus[cpus.len() - 1]);
        line(format!(
            "| p50 of the last 1,000 refunds at {} in the ledger (engine, in-memory rail) | {} ms ({pct:+.0}%; CPU {cpu_pct:+.0}%) | flat | ≤ +10% | {} |",
            sizes.join(" / "),
            shown.join(" / "),
            verdict(pct <= 10.0)
        ));
    }
    line(String::new());
    line("## Latency (`latency --calls`, stdio), each run".into());
    line(String::new());
    line("| run | fetch_payment direct p50 | added p50 | create_refund direct p50 | added p50 / p99 | fsync p50 | floor |".into());
    line("| --- | --- | --- | --- | --- | --- | --- |".into());
    for (i, l) in p.latency.iter().enumerate() {
        line(format!(
            "| {} | {:.3} | {:.3} | {:.3} | {:.3} / {:.3} | {:.3} | {:.3} |",
            i + 1,
            l.read.0.p50,
            l.read.1.p50 - l.read.0.p50,
            l.refund.0.p50,
            l.refund.1.p50 - l.refund.0.p50,
            l.refund.1.p99 - l.refund.0.p99,
            l.fsync_p50_ms,
            l.floor_ms()
        ));
    }
    line(String::new());
    line("## Throughput (`throughput --backends sqlite`), medians of the runs".into());
    line(String::new());
    line("`one`: one server, K calls in flight on one session. `many`: K server processes (K proxies on one ledger, each before its own mock on one shared journal; direct: K mocks on one journal). CPU: the servers' own, per refund, from `/proc/PID/stat` (10 ms ticks summed per process, so the mocks' small shares in `many` are coarse). fsyncs, WAL bytes and upstream requests: from a second gated run under `strace -f -y`, the ledger's files only, from the first call to the last answer.".into());
    line(String::new());
    line("| K | shape | refunds | direct/s | direct p50 / p99 ms | gated/s | gated p50 / p99 ms | gated/direct | proxy CPU ms/refund | mock CPU ms/refund | fsyncs/refund | of them, checkpoint | WAL KB/refund | upstream requests/refund |".into());
    line(
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
            .into(),
    );
    for (i, r) in p.throughput[0].iter().enumerate() {
        let m = |f: &dyn Fn(&Row) -> f64| row_median(&p.throughput, i, f);
        line(format!(
            "| {} | {} | {} | {:.0} | {:.2} / {:.2} | {:.0} | {:.2} / {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1} | {:.2} |",
            r.k,
            format!("{:?}", r.shape).to_lowercase(),
            r.refunds,
            m(&|r| r.direct.refunds_per_s),
            m(&|r| r.direct.p50_ms),
            m(&|r| r.direct.p99_ms),
            m(&|r| sqlite(r, |g| g.path.refunds_per_s)),
            m(&|r| sqlite(r, |g| g.path.p50_ms)),
            m(&|r| sqlite(r, |g| g.path.p99_ms)),
            m(&|r| sqlite(r, |g| g.ratio)),
            m(&|r| sqlite(r, |g| g.path.cpu_ms_per_refund)),
            m(&|r| r.direct.cpu_ms_per_refund),
            m(&|r| sqlite(r, |g| g.fsyncs_per_refund.unwrap_or(f64::NAN))),
            m(&|r| sqlite(r, |g| g.checkpoint_fsyncs_per_refund.unwrap_or(f64::NAN))),
            m(&|r| sqlite(r, |g| g.wal_bytes_per_refund.unwrap_or(f64::NAN))) / 1024.0,
            m(&|r| sqlite(r, |g| g.upstream_requests_per_refund.unwrap_or(f64::NAN))),
        ));
    }
    line(String::new());
    line("## Growth (`growth`), each run".into());
    line(String::new());
    line("The engine against its in-memory rail, one ledger filling up in a temporary directory; the last 1,000 refunds before each size.".into());
    line(String::new());
    line("| run | refunds | p50 ms | p99 ms | CPU ms/refund |".into());
    line("| --- | --- | --- | --- | --- |".into());
    for (i, g) in p.growth.iter().enumerate() {
        for point in g {
            line(format!(
                "| {} | {} | {:.3} | {:.3} | {:.3} |",
                i + 1,
                point.refunds,
                point.p50_ms,
                point.p99_ms,
                point.cpu_ms_per_refund
            ));
        }
    }
    out
}

/// Cores and kernel, as the file's reader needs them to weigh the figures.
fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".to_owned());
    format!("{cores} cores, Linux {kernel}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_odd_and_even_counts() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(vec![]).is_nan());
    }

    #[test]
    fn the_number_of_runs_is_bounded() {
        let args = |runs| PerfArgs {
            runs,
            calls: 1,
            refunds: 1,
            growth_at: vec![1000],
            bin_dir: None,
            no_write: true,
        };
        assert!(perf(&args(0)).err().unwrap().contains("PERF_RUNS_MAX"));
        assert!(
            perf(&args(PERF_RUNS_MAX + 1))
                .err()
                .unwrap()
                .contains("1..=")
        );
    }
}
