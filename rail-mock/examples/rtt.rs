//! Round-trip time of `fetch_payment` and `create_refund` through an rmcp client over stdio.
//!
//! ```sh
//! cargo run --release -p interlock-rail-mock --example rtt -- --calls 1000
//! ```
//!
//! Spawns the `interlock-rail-mock` binary of the same profile (building it first with the cargo
//! that runs this example) on a fresh demo journal in the system temp directory, warms up, then
//! makes `--calls` sequential calls of each tool and prints the median, p99, mean and max.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

/// Calls measured per tool unless `--calls` says otherwise.
const CALLS_DEFAULT: usize = 1_000;
/// The most calls per tool: pay_1005's 1,200,000 paise hold this many refunds of 100.
const CALLS_MAX: usize = 10_000;
/// Unmeasured calls per tool before measuring.
const WARMUP_CALLS: usize = 50;
/// The amount of each benchmark refund (the rail's minimum).
const REFUND_AMOUNT: i64 = 100;

fn usage() -> ! {
    eprintln!("usage: rtt [--calls N] [--bin PATH]   (N from 1 to {CALLS_MAX})");
    std::process::exit(2)
}

fn parse_args() -> (usize, Option<PathBuf>) {
    let mut calls = CALLS_DEFAULT;
    let mut bin = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--calls" => {
                calls = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|n| (1..=CALLS_MAX).contains(n))
                    .unwrap_or_else(|| usage());
            }
            "--bin" => bin = Some(PathBuf::from(args.next().unwrap_or_else(|| usage()))),
            _ => usage(),
        }
    }
    (calls, bin)
}

/// The mock binary next to this example, built first by the cargo that runs us.
fn mock_binary() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    // target/<profile>/examples/rtt → target/<profile>/interlock-rail-mock
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or("cannot locate the target directory")?;
    let release = profile_dir.file_name().is_some_and(|n| n == "release");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut build = Command::new(cargo);
    build.args([
        "build",
        "-q",
        "-p",
        "interlock-rail-mock",
        "--bin",
        "interlock-rail-mock",
    ]);
    if release {
        build.arg("--release");
    }
    let status = build
        .status()
        .map_err(|e| format!("cannot run cargo build: {e}"))?;
    if !status.success() {
        return Err("cargo build of interlock-rail-mock failed".to_owned());
    }
    Ok(profile_dir.join("interlock-rail-mock"))
}

fn summary(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let n = samples.len();
    let pick = |q: f64| {
        // Nearest-rank percentile.
        let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
        samples[rank - 1]
    };
    let mean = samples.iter().sum::<Duration>() / u32::try_from(n).unwrap_or(u32::MAX);
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "{name:<14} n={n:<6} median={:>8.1} µs  p99={:>8.1} µs  mean={:>8.1} µs  max={:>8.1} µs",
        us(pick(0.5)),
        us(pick(0.99)),
        us(mean),
        us(samples[n - 1]),
    );
}

async fn call(
    client: &rmcp::service::RunningService<rmcp::RoleClient, ()>,
    tool: &str,
    args: Value,
) -> Result<Duration, String> {
    let Value::Object(map) = args else {
        return Err("arguments must be an object".to_owned());
    };
    let start = Instant::now();
    let result = client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(map))
        .await
        .map_err(|e| format!("{tool}: {e}"))?;
    let elapsed = start.elapsed();
    if result.is_error == Some(true) {
        return Err(format!("{tool} failed: {:?}", result.content));
    }
    Ok(elapsed)
}

#[tokio::main]
async fn main() -> Result<(), String> {
    let (calls, bin) = parse_args();
    let bin = match bin {
        Some(bin) => bin,
        None => mock_binary()?,
    };
    let journal =
        std::env::temp_dir().join(format!("interlock-rail-mock-rtt-{}.db", std::process::id()));
    let mut cmd = tokio::process::Command::new(&bin);
    cmd.arg("--journal")
        .arg(&journal)
        .args(["--seed", "demo", "--log-level", "error"]);
    let transport =
        TokioChildProcess::new(cmd).map_err(|e| format!("spawn {}: {e}", bin.display()))?;
    let client = ().serve(transport).await.map_err(|e| e.to_string())?;
    println!(
        "rail mock {} · journal {} · {calls} calls per tool after {WARMUP_CALLS} warm-up calls, sequential",
        bin.display(),
        journal.display()
    );

    let payment = json!({"payment_id": "pay_1002"});
    for _ in 0..WARMUP_CALLS {
        call(&client, "fetch_payment", payment.clone()).await?;
    }
    let mut samples = Vec::with_capacity(calls);
    for _ in 0..calls {
        samples.push(call(&client, "fetch_payment", payment.clone()).await?);
    }
    summary("fetch_payment", samples);

    let refund = |i: usize| json!({"payment_id": "pay_1005", "amount": REFUND_AMOUNT, "receipt": format!("rtt-{i}")});
    for i in 0..WARMUP_CALLS {
        call(&client, "create_refund", refund(i)).await?;
    }
    let mut samples = Vec::with_capacity(calls);
    for i in 0..calls {
        samples.push(call(&client, "create_refund", refund(WARMUP_CALLS + i)).await?);
    }
    summary("create_refund", samples);

    let _ = client.cancel().await;
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", journal.display()));
    }
    Ok(())
}
