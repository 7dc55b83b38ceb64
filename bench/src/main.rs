//! `interlock-bench`: benchmarks for Interlock.
//!
//! `interlock-bench latency [--calls N]`: one rmcp client calls `fetch_payment` and
//! `create_refund` directly on an `interlock-rail-mock` and through `interlock serve` in front
//! of another mock (same seed, its own journal), interleaved in one run, and prints p50/p99 of
//! each path and the latency the proxy adds. See `bench/README.md`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

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

#[derive(clap::Args)]
struct LatencyArgs {
    /// Measured calls of each tool on each path.
    #[arg(long, default_value_t = 300)]
    calls: usize,
    /// Unmeasured warm-up calls of fetch_payment on each path.
    #[arg(long, default_value_t = 20)]
    warmup: usize,
    /// Directory holding the `interlock` and `interlock-rail-mock` binaries. Default: the
    /// directory of this binary, after `cargo build` of both with this binary's profile.
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// Print the figures as one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

type Res<T> = Result<T, String>;

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

/// The directory of the binaries: `--bin-dir`, or next to this binary after building them.
fn bin_dir(args: &LatencyArgs) -> Res<PathBuf> {
    if let Some(dir) = &args.bin_dir {
        return Ok(dir.clone());
    }
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let dir = exe
        .parent()
        .ok_or("the bench binary has no directory")?
        .to_path_buf();
    let release = dir.file_name().is_some_and(|n| n == "release");
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .ok_or("no workspace")?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut build = Command::new(cargo);
    build.current_dir(workspace).args([
        "build",
        "-q",
        "-p",
        "interlock",
        "-p",
        "interlock-rail-mock",
        "--bins",
    ]);
    if release {
        build.arg("--release");
    }
    eprintln!(
        "building interlock and interlock-rail-mock ({})…",
        if release { "release" } else { "debug" }
    );
    let status = build
        .status()
        .map_err(|e| format!("run cargo build: {e}"))?;
    if !status.success() {
        return Err("cargo build of interlock and interlock-rail-mock failed".into());
    }
    if !release {
        eprintln!("warning: a debug build; run with --release for meaningful figures");
    }
    Ok(dir)
}

/// A seed with `n` fresh, unrefunded payments `pay_B000000`…, each refunded once by the run.
fn seed(n: usize) -> Value {
    let payments: Vec<Value> = (0..n)
        .map(|i| json!({"id": payment_id(i), "amount": 100_000}))
        .collect();
    json!({"currency": "INR", "balance": 1_000_000_000_u64, "payments": payments})
}

fn payment_id(i: usize) -> String {
    format!("pay_B{i:06}")
}

/// A mandate granting `fetch_payment` and `create_refund`, with limits no run reaches.
fn mandate(pins: &Value, agent: &str, calls: usize) -> Res<String> {
    let s = |v: &Value| {
        v.as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("pin --json: unexpected output {pins}"))
    };
    Ok(format!(
        r#"v: 1
mandate_id: mnd_bench
merchant_id: acc_BENCH00001
agent_id: {agent}
issued_at: 1700000000000
expires_at: 4000000000000
purpose: "Latency benchmark"
scope:
  grants:
    fetch_payment:
      reversibility: reversible
      value:
        max_amount_minor: 0
        min_amount_minor: 0
        currencies: [INR]
    create_refund:
      reversibility: irreversible
      value:
        max_amount_minor: 100000
        min_amount_minor: 100
        currencies: [INR]
limits:
  windows:
    - window_ms: 86400000
      max_calls: {max_calls}
      max_amount_minor: 100000000000
      currency: INR
  fee_budgets:
    INR:
      window_ms: 86400000
      max_fee_minor: 100000000000
idempotency:
  create_refund:
    key_fields: [payment_id]
    window_ms: null
provenance:
  server_id: "{server_id}"
  manifest_sha256: "{manifest}"
  pinned_manifests:
    fetch_payment:
      sha256: "{p1}"
      trust_tier: "pinned"
    create_refund:
      sha256: "{p2}"
      trust_tier: "pinned"
"#,
        max_calls = calls * 4 + 100,
        server_id = s(&pins["server_id"])?,
        manifest = s(&pins["manifest_sha256"])?,
        p1 = s(&pins["tools"]["fetch_payment"])?,
        p2 = s(&pins["tools"]["create_refund"])?,
    ))
}

fn params(tool: &str, args: Value) -> CallToolRequestParams {
    let p = CallToolRequestParams::new(tool.to_owned());
    match args {
        Value::Object(map) => p.with_arguments(map),
        _ => p,
    }
}

type Client = RunningService<RoleClient, ()>;

async fn connect(cmd: tokio::process::Command, what: &str) -> Res<Client> {
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("spawn {what}: {e}"))?;
    tokio::time::timeout(Duration::from_secs(30), ().serve(transport))
        .await
        .map_err(|_| format!("{what}: no MCP handshake within 30 s"))?
        .map_err(|e| format!("{what}: MCP handshake: {e}"))
}

/// One timed call; an error result is a failed run (the benchmark measures successes only).
async fn timed(client: &Client, tool: &str, args: Value, what: &str) -> Res<Duration> {
    let start = Instant::now();
    let result = client
        .call_tool(params(tool, args))
        .await
        .map_err(|e| format!("{what} {tool}: {e}"))?;
    let elapsed = start.elapsed();
    if result.is_error == Some(true) {
        let text = result
            .content
            .first()
            .and_then(|c| c.as_text())
            .map(|t| t.text.clone())
            .unwrap_or_default();
        return Err(format!("{what} {tool} returned an error: {text}"));
    }
    Ok(elapsed)
}

/// The `p` quantile (0..=1) in milliseconds, nearest rank.
fn quantile_ms(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    let i = rank.clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1e3
}

struct Figures {
    p50: f64,
    p99: f64,
    mean: f64,
}

fn figures(mut v: Vec<Duration>) -> Figures {
    v.sort();
    let mean = v.iter().map(Duration::as_secs_f64).sum::<f64>() / v.len().max(1) as f64 * 1e3;
    Figures {
        p50: quantile_ms(&v, 0.50),
        p99: quantile_ms(&v, 0.99),
        mean,
    }
}

fn latency(args: LatencyArgs) -> Res<()> {
    if args.calls == 0 {
        return Err("--calls must be at least 1".into());
    }
    let bins = bin_dir(&args)?;
    let interlock = bins.join("interlock");
    let mock = bins.join("interlock-rail-mock");
    for b in [&interlock, &mock] {
        if !b.exists() {
            return Err(format!("no binary at {}", b.display()));
        }
    }
    let tmp = tempfile::Builder::new()
        .prefix("interlock-bench-")
        .tempdir()
        .map_err(|e| format!("temp dir: {e}"))?;
    let dir = tmp.path();
    let seed_file = dir.join("seed.json");
    std::fs::write(&seed_file, seed(args.calls).to_string())
        .map_err(|e| format!("write seed: {e}"))?;

    // Pins of the mock's tools, from `interlock pin --json`.
    let out = Command::new(&interlock)
        .args(["pin", "--json", "--"])
        .arg(&mock)
        .arg("--seed")
        .arg(&seed_file)
        .args(["--log-level", "error"])
        .env("RUST_LOG", "error")
        .env_remove("RAZORPAY_KEY_ID")
        .output()
        .map_err(|e| format!("run interlock pin: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "interlock pin failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let pins: Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("pin --json output: {e}"))?;
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
        let mut direct_cmd = tokio::process::Command::new(&mock);
        direct_cmd
            .arg("--journal")
            .arg(dir.join("direct-rail.db"))
            .arg("--seed")
            .arg(&seed_file)
            .args(["--log-level", "error"]);
        let direct = connect(direct_cmd, "the direct mock").await?;

        let mut through_cmd = tokio::process::Command::new(&interlock);
        through_cmd
            .arg("serve")
            .arg("--mandate")
            .arg(&mandate_file)
            .arg("--db")
            .arg(dir.join("ledger.db"))
            .args(["--agent", agent, "--"])
            .arg(&mock)
            .arg("--journal")
            .arg(dir.join("through-rail.db"))
            .arg("--seed")
            .arg(&seed_file)
            .args(["--log-level", "error"])
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .env_remove("RAZORPAY_KEY_ID");
        let through = connect(through_cmd, "interlock serve").await?;

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
        report(
            &args,
            [
                ("fetch_payment", read_d, read_t),
                ("create_refund", pay_d, pay_t),
            ],
        );
        Ok::<(), String>(())
    })
}

fn report(args: &LatencyArgs, rows: [(&str, Vec<Duration>, Vec<Duration>); 2]) {
    let mut out = serde_json::Map::new();
    if !args.json {
        println!(
            "latency: {} calls of each tool on each path, interleaved (ms)",
            args.calls
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
    for (tool, d, t) in rows {
        let (d, t) = (figures(d), figures(t));
        if args.json {
            out.insert(
                tool.to_owned(),
                json!({
                    "direct": {"p50_ms": d.p50, "p99_ms": d.p99, "mean_ms": d.mean},
                    "through": {"p50_ms": t.p50, "p99_ms": t.p99, "mean_ms": t.mean},
                    "added": {"p50_ms": t.p50 - d.p50, "p99_ms": t.p99 - d.p99},
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
    if args.json {
        out.insert("calls".into(), json!(args.calls));
        println!("{}", Value::Object(out));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_quantiles() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(quantile_ms(&v, 0.50), 50.0);
        assert_eq!(quantile_ms(&v, 0.99), 99.0);
        assert_eq!(quantile_ms(&v[..1], 0.99), 1.0);
    }

    #[test]
    fn the_seed_has_one_fresh_payment_per_call() {
        let s = seed(3);
        assert_eq!(s["payments"].as_array().unwrap().len(), 3);
        assert_eq!(s["payments"][2]["id"], "pay_B000002");
    }
}
