//! `interlock-bench latency`: one rmcp client calls `fetch_payment` and `create_refund` directly
//! on an `interlock-rail-mock` and through `interlock serve` in front of another mock (same seed,
//! its own journal), interleaved in one run, and prints p50/p99 of each path and the latency the
//! proxy adds, beside the floor a gated refund cannot go below, measured in the same run: the
//! direct `fetch_payment` p50 (the referent read G2 needs) plus two fsyncs of the ledger's own
//! directory (the write-ahead record and the outcome). See `bench/README.md`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use interlock_rail_mock::harness::MockCommand;
use serde_json::{Value, json};

use crate::Res;
use crate::bins::Bins;
use crate::figures::{Figures, figures};
use crate::mcp::{self, Client, Reply};

/// The options of `interlock-bench latency`.
#[derive(clap::Args, Debug)]
pub struct LatencyArgs {
    /// Measured calls of each tool on each path.
    #[arg(long, default_value_t = 300)]
    pub calls: usize,
    /// Unmeasured warm-up calls of fetch_payment on each path.
    #[arg(long, default_value_t = 20)]
    pub warmup: usize,
    /// Directory holding the `interlock` and `interlock-rail-mock` binaries. Default: the
    /// directory of this binary, after `cargo build` of both with this binary's profile.
    #[arg(long)]
    pub bin_dir: Option<PathBuf>,
    /// Print the figures as one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// How the client reaches `interlock serve`: its stdio, or streamable HTTP on loopback
    /// (`serve --listen`, with a bearer token). The direct path is the mock on stdio either way.
    #[arg(long, value_enum, default_value_t = Transport::Stdio)]
    pub transport: Transport,
}

/// The transport between the client and `interlock serve`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// The proxy as the client's child process, on its stdin and stdout.
    Stdio,
    /// `interlock serve --listen 127.0.0.1:PORT`, one agent with a bearer token.
    Http,
}

impl Transport {
    fn name(self) -> &'static str {
        match self {
            Transport::Stdio => "stdio",
            Transport::Http => "http",
        }
    }
}

/// fdatasyncs timed for the floor's fsync figure.
pub const FSYNC_SAMPLES: usize = 200;
/// The bytes written before each of them: one SQLite page.
const FSYNC_WRITE_BYTES: usize = 4096;
/// Durable commits a gated refund cannot do without: its `IN_FLIGHT` record and its outcome.
pub const FLOOR_FSYNCS: f64 = 2.0;

/// The p50 of [`FSYNC_SAMPLES`] page writes each followed by `fdatasync`, in a file in `dir`
/// (the ledger's directory: its filesystem is the one a commit waits for), in ms.
pub fn fsync_p50_ms(dir: &Path) -> Res<f64> {
    use std::io::{Seek, Write};
    let path = dir.join("fsync-probe");
    let mut file = std::fs::File::create(&path).map_err(|e| format!("fsync probe: {e}"))?;
    let page = vec![0x5a_u8; FSYNC_WRITE_BYTES];
    let mut samples = Vec::with_capacity(FSYNC_SAMPLES);
    for _ in 0..FSYNC_SAMPLES {
        file.rewind().map_err(|e| format!("fsync probe: {e}"))?;
        file.write_all(&page)
            .map_err(|e| format!("fsync probe: {e}"))?;
        let started = std::time::Instant::now();
        file.sync_data().map_err(|e| format!("fsync probe: {e}"))?;
        samples.push(started.elapsed());
    }
    drop(file);
    let _ = std::fs::remove_file(&path);
    Ok(figures(samples).p50)
}

/// The longest one measured call may take before the run fails.
pub(crate) const LATENCY_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// A seed with `n` fresh, unrefunded payments `pay_B000000`…, each refunded once by the run.
pub(crate) fn seed(n: usize) -> Value {
    let payments: Vec<Value> = (0..n)
        .map(|i| json!({"id": payment_id(i), "amount": 100_000}))
        .collect();
    json!({"currency": "INR", "balance": 1_000_000_000_u64, "payments": payments})
}

pub(crate) fn payment_id(i: usize) -> String {
    format!("pay_B{i:06}")
}

/// A mandate granting `fetch_payment` and `create_refund`, with limits no run reaches.
pub(crate) fn mandate(pins: &Value, agent: &str, calls: usize) -> Res<String> {
    let max_calls = u32::try_from(calls * 4 + 100).map_err(|_| format!("{calls} calls"))?;
    Ok(interlock_profile::razorpay::refund_desk(agent)
        .mandate_id("mnd_bench")
        .merchant_id("acc_BENCH00001")
        .purpose("Latency benchmark")
        .expires_at(4_000_000_000_000)
        .without("create_instant_settlement")
        .max_amount("create_refund", 100_000)
        .window(max_calls, 100_000_000_000)
        .fee_budget(100_000_000_000)
        .pinned_by(pins)?
        .yaml())
}

/// One timed call; an error result is a failed run (the benchmark measures successes only).
pub(crate) async fn timed(
    client: &rmcp::service::Peer<rmcp::service::RoleClient>,
    tool: &str,
    args: Value,
    what: &str,
) -> Res<Duration> {
    let (reply, elapsed) = mcp::call(client, tool, args, LATENCY_CALL_TIMEOUT).await;
    match reply {
        Reply::Answered(result) if result.is_error != Some(true) => Ok(elapsed),
        Reply::Answered(result) => Err(format!(
            "{what} {tool} returned an error: {}",
            mcp::text_of(&result)
        )),
        Reply::Failed(e) => Err(format!("{what} {tool}: {e}")),
        Reply::TimedOut => Err(format!(
            "{what} {tool}: no answer within {} s",
            LATENCY_CALL_TIMEOUT.as_secs()
        )),
    }
}

/// What `interlock serve` on the measured path is started with.
struct ThroughArgs<'a> {
    interlock: &'a std::path::Path,
    dir: &'a std::path::Path,
    mandate_file: &'a std::path::Path,
    agent: &'a str,
    transport: Transport,
}

/// Starts `interlock serve` in front of the mock `rail_argv` on the chosen transport and
/// connects to it; over HTTP, also the server process (killed when dropped).
async fn start_through(
    args: &ThroughArgs<'_>,
    rail_argv: Vec<std::ffi::OsString>,
) -> Res<(Client, Option<tokio::process::Child>)> {
    let mut cmd = tokio::process::Command::new(args.interlock);
    cmd.arg("serve").arg("--db").arg(args.dir.join("ledger.db"));
    let token = "ilk_bench_latency";
    let listen = match args.transport {
        Transport::Stdio => {
            cmd.arg("--mandate")
                .arg(args.mandate_file)
                .args(["--agent", args.agent]);
            None
        }
        Transport::Http => {
            let agents = args.dir.join("agents.yaml");
            let entry = json!({"agents": [{"id": args.agent, "mandate": args.mandate_file,
                "token_sha256": interlock_spec::hash::sha256_hex(token.as_bytes())}]});
            std::fs::write(&agents, entry.to_string())
                .map_err(|e| format!("write agents file: {e}"))?;
            let listen = mcp::free_loopback_port()?;
            cmd.arg("--listen")
                .arg(listen.to_string())
                .arg("--agents")
                .arg(&agents);
            Some(listen)
        }
    };
    cmd.arg("--")
        .args(rail_argv)
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .env_remove("RAZORPAY_KEY_ID");
    let Some(listen) = listen else {
        return Ok((
            mcp::connect(cmd, Stdio::null(), "interlock serve").await?,
            None,
        ));
    };
    let server = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("spawn interlock serve --listen: {e}"))?;
    let client = mcp::connect_http(listen, token, "interlock serve --listen").await?;
    Ok((client, Some(server)))
}

/// What one latency run measured.
#[derive(Debug, Clone, Copy)]
pub struct LatencyFigures {
    /// `fetch_payment`: direct, through.
    pub read: (Figures, Figures),
    /// `create_refund`: direct, through.
    pub refund: (Figures, Figures),
    /// p50 of an fsync of the ledger's directory, ms.
    pub fsync_p50_ms: f64,
}

impl LatencyFigures {
    /// The floor of a gated refund: the referent read plus the two durable commits, ms.
    pub fn floor_ms(&self) -> f64 {
        self.read.0.p50 + FLOOR_FSYNCS * self.fsync_p50_ms
    }
}

/// Runs the latency benchmark and prints its figures.
pub fn latency(args: LatencyArgs) -> Res<()> {
    let measured = measure(&args)?;
    report(&args, &measured);
    Ok(())
}

/// Runs the latency benchmark and returns its figures.
pub fn measure(args: &LatencyArgs) -> Res<LatencyFigures> {
    if args.calls == 0 {
        return Err("--calls must be at least 1".into());
    }
    let bins = Bins::for_figures(args.bin_dir.as_deref())?;
    let (interlock, mock) = (bins.interlock, bins.mock);
    let tmp = tempfile::Builder::new()
        .prefix("interlock-bench-")
        .tempdir()
        .map_err(|e| format!("temp dir: {e}"))?;
    let dir = tmp.path();
    let seed_file = dir.join("seed.json");
    std::fs::write(&seed_file, seed(args.calls).to_string())
        .map_err(|e| format!("write seed: {e}"))?;

    let pins = mcp::pins(&interlock, &mock, &seed_file)?;
    let agent = "agent_bench";
    let mandate_file = dir.join("mandate.yaml");
    std::fs::write(&mandate_file, mandate(&pins, agent, args.calls)?)
        .map_err(|e| format!("write mandate: {e}"))?;

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("tokio: {e}"))?;
    rt.block_on(async {
        let rail = |journal: &str| {
            MockCommand::new(&mock)
                .journal(dir.join(journal))
                .seed(&seed_file)
                .log_level("error")
        };
        let direct_cmd = tokio::process::Command::from(rail("direct-rail.db").command());
        let direct = mcp::connect(direct_cmd, Stdio::null(), "the direct mock").await?;

        let through_args = ThroughArgs {
            interlock: &interlock,
            dir,
            mandate_file: &mandate_file,
            agent,
            transport: args.transport,
        };
        let (through, _server) =
            start_through(&through_args, rail("through-rail.db").argv()).await?;

        let read_args = || json!({"payment_id": payment_id(0)});
        for _ in 0..args.warmup {
            timed(&direct, "fetch_payment", read_args(), "direct").await?;
            timed(&through, "fetch_payment", read_args(), "through").await?;
        }

        let n = args.calls;
        let (mut read_d, mut read_t) = (Vec::with_capacity(n), Vec::with_capacity(n));
        let (mut pay_d, mut pay_t) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for i in 0..n {
            let refund = json!({"payment_id": payment_id(i), "amount": 100});
            // Alternate which path goes first, so neither always runs on a warmer cache.
            if i % 2 == 0 {
                read_d.push(timed(&direct, "fetch_payment", read_args(), "direct").await?);
                read_t.push(timed(&through, "fetch_payment", read_args(), "through").await?);
                pay_d.push(timed(&direct, "create_refund", refund.clone(), "direct").await?);
                pay_t.push(timed(&through, "create_refund", refund, "through").await?);
            } else {
                read_t.push(timed(&through, "fetch_payment", read_args(), "through").await?);
                read_d.push(timed(&direct, "fetch_payment", read_args(), "direct").await?);
                pay_t.push(timed(&through, "create_refund", refund.clone(), "through").await?);
                pay_d.push(timed(&direct, "create_refund", refund, "direct").await?);
            }
        }
        let _ = direct.cancel().await;
        let _ = through.cancel().await;
        // After the calls, so the probe's fsyncs do not queue behind the ledger's.
        Ok::<_, String>(LatencyFigures {
            read: (figures(read_d), figures(read_t)),
            refund: (figures(pay_d), figures(pay_t)),
            fsync_p50_ms: fsync_p50_ms(dir)?,
        })
    })
}

fn report(args: &LatencyArgs, measured: &LatencyFigures) {
    let mut out = serde_json::Map::new();
    let rows = [
        ("fetch_payment", measured.read),
        ("create_refund", measured.refund),
    ];
    if !args.json {
        println!(
            "latency: {} calls of each tool on each path, interleaved (ms); the proxy on {}",
            args.calls,
            args.transport.name()
        );
        println!(
            "{:<14} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "tool",
            "direct50",
            "direct99",
            "thru50",
            "thru99",
            "added50",
            "added99",
            "dmean",
            "tmean"
        );
    }
    for (tool, (d, t)) in rows {
        if args.json {
            out.insert(
                tool.to_owned(),
                json!({
                    "direct": {"p50_ms": d.p50, "p99_ms": d.p99, "mean_ms": d.mean},
                    "through": {"p50_ms": t.p50, "p99_ms": t.p99, "mean_ms": t.mean},
                    "added": {"p50_ms": t.p50 - d.p50, "p99_ms": t.p99 - d.p99},
                    "added_p50_ms": t.p50 - d.p50,
                    "added_p99_ms": t.p99 - d.p99,
                }),
            );
        } else {
            println!(
                "{:<14} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
                tool,
                d.p50,
                d.p99,
                t.p50,
                t.p99,
                t.p50 - d.p50,
                t.p99 - d.p99,
                d.mean,
                t.mean
            );
        }
    }
    let (read_p50, fsync_p50) = (measured.read.0.p50, measured.fsync_p50_ms);
    let floor = measured.floor_ms();
    if args.json {
        out.insert("calls".into(), json!(args.calls));
        out.insert("transport".into(), json!(args.transport.name()));
        out.insert("fsync_p50_ms".into(), json!(fsync_p50));
        out.insert("floor_ms".into(), json!(floor));
        println!("{}", Value::Object(out));
    } else {
        println!(
            "floor of a gated refund: direct fetch_payment p50 {read_p50:.3} + {FLOOR_FSYNCS} × fsync p50 {fsync_p50:.3} (the ledger's directory, {FSYNC_SAMPLES} samples) = {floor:.3} ms"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_has_one_fresh_payment_per_call() {
        let s = seed(3);
        assert_eq!(s["payments"].as_array().unwrap().len(), 3);
        assert_eq!(s["payments"][2]["id"], "pay_B000002");
    }

    #[test]
    fn the_fsync_probe_measures_a_positive_figure_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p50 = fsync_p50_ms(dir.path()).unwrap();
        assert!(p50 > 0.0, "{p50}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
