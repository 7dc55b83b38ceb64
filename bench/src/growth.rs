//! `interlock-bench growth`: whether a gated refund costs more as the ledger fills. One engine
//! (every gate, the durable commits, the call, the answer) against the in-memory rail, refunds
//! one after another into one ledger; at each checkpoint it prints the p50 and p99 of the last
//! `--window` refunds and the process's CPU per refund over them. The rail keeps its receipts
//! in an index, so what grows is the engine's, not the rail's. It asserts nothing.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use interlock_engine::gates::LiveTool;
use interlock_engine::memory_rail::MemoryRail;
use interlock_engine::{Engine, EngineConfig, Ledger, Outcome, SystemClock};
use interlock_spec::ids::{AgentId, MerchantId};
use interlock_spec::mandate::template::Template;
use interlock_spec::money::Minor;
use serde_json::json;

use crate::Res;
use crate::figures::figures;
use crate::procstat::CpuClock;

/// The most refunds one run makes: a bound on the run's memory (one duration per refund) and
/// time, well past the 50,000 the figure is quoted at.
pub const GROWTH_REFUNDS_MAX: usize = 1_000_000;

/// The options of `interlock-bench growth`.
#[derive(clap::Args, Debug)]
pub struct GrowthArgs {
    /// Checkpoints: ledger sizes (refunds made) at which the last `--window` refunds are read.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000,50000")]
    pub at: Vec<usize>,
    /// Refunds per checkpoint's figure: the last this many before it.
    #[arg(long, default_value_t = 1000)]
    pub window: usize,
    /// Where the ledger lives (its filesystem decides most of the figure: each commit is an
    /// fsync). Default: a fresh temporary directory. Must not exist yet.
    #[arg(long)]
    pub db: Option<PathBuf>,
    /// Print the figures as one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// A ledger size and what the window before it measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GrowthPoint {
    /// Refunds in the ledger at the checkpoint.
    pub refunds: usize,
    /// p50 of the window's refunds, ms.
    pub p50_ms: f64,
    /// p99 of the window's refunds, ms.
    pub p99_ms: f64,
    /// CPU (user + system) of this process per refund over the window, ms.
    pub cpu_ms_per_refund: f64,
}

const PIN: &str = "52d4053d8642b1d01b89677925bf34c415c19e28cec815e39387dee36d171893";

/// One refund tool, pinned, with limits no run reaches.
fn mandate() -> Template {
    Template::new("agent_bench")
        .mandate_id("mnd_bench")
        .merchant_id("acc_BENCH")
        .purpose("benchmark")
        .expires_at(4_000_000_000_000)
        .money("create_refund", 100, 500_000)
        .window(10_000_000, 9_000_000_000_000)
        .fee_budget(9_000_000_000_000)
        .pinned("bench-rail", PIN)
        .pin("create_refund", PIN)
}

/// Checks the checkpoints: ascending, each at least one window, the last within the bound.
fn checkpoints(args: &GrowthArgs) -> Res<Vec<usize>> {
    if args.window == 0 {
        return Err("--window must be at least 1".into());
    }
    let mut at = args.at.clone();
    at.sort_unstable();
    at.dedup();
    let (Some(&first), Some(&last)) = (at.first(), at.last()) else {
        return Err("--at needs at least one ledger size".into());
    };
    if first < args.window {
        return Err(format!(
            "--at {first} is less than --window {}: the figure reads the last {} refunds",
            args.window, args.window
        ));
    }
    if last > GROWTH_REFUNDS_MAX {
        return Err(format!(
            "--at {last} exceeds GROWTH_REFUNDS_MAX ({GROWTH_REFUNDS_MAX})"
        ));
    }
    Ok(at)
}

/// One growth run: the points and what the whole run did.
#[derive(Debug, Clone)]
pub struct GrowthRun {
    /// One per checkpoint, in ascending order.
    pub points: Vec<GrowthPoint>,
    /// Refunds made.
    pub refunds: usize,
    /// Wall time of the refunds.
    pub wall: Duration,
    /// Audit records in the verified chain at the end.
    pub audit_records: u64,
    /// Where the ledger was.
    pub ledger: PathBuf,
}

/// Runs the growth benchmark and returns its points ([`report`] prints them).
pub fn growth(args: &GrowthArgs) -> Res<GrowthRun> {
    let at = checkpoints(args)?;
    let total = *at.last().expect("checked non-empty");
    let tmp = tempfile::Builder::new()
        .prefix("interlock-growth-")
        .tempdir()
        .map_err(|e| format!("temp dir: {e}"))?;
    let path = match &args.db {
        Some(p) if p.exists() => {
            return Err(format!(
                "--db {}: exists; growth starts from an empty ledger",
                p.display()
            ));
        }
        Some(p) => p.clone(),
        None => tmp.path().join("growth.ledger.db"),
    };
    let clock = Arc::new(SystemClock);
    let rail = MemoryRail::new(clock.clone(), Minor::ZERO);
    for i in 0..total {
        rail.add_payment(&format!("pay_g{i}"), 100_000, 0, None);
    }
    let mandate = mandate()
        .build()
        .map_err(|e| format!("the benchmark mandate: {e}"))?;
    let ledger = Ledger::open(&path).map_err(|e| format!("ledger {}: {e}", path.display()))?;
    let engine = Engine::new(ledger, rail, clock, mandate, EngineConfig::new("bench"))
        .map_err(|e| format!("engine: {e}"))?;
    let live = LiveTool {
        server_id: "bench-rail".to_owned(),
        sha256: Ok(PIN.to_owned()),
    };
    let profile = interlock_profile::razorpay::profile();
    let tool = profile
        .money_tool("create_refund")
        .ok_or("the Razorpay profile has no create_refund")?;
    let agent = AgentId::parse("agent_bench").map_err(|e| e.to_string())?;
    let merchant = MerchantId::parse("acc_BENCH").map_err(|e| e.to_string())?;
    let cpu = CpuClock::new()?;
    let mut latencies: Vec<Duration> = Vec::with_capacity(total);
    let mut points = Vec::with_capacity(at.len());
    let mut cpu_marks = std::collections::BTreeMap::new();
    let started = Instant::now();
    for i in 0..total {
        if at.contains(&(i + args.window)) {
            cpu_marks.insert(i + args.window, cpu.self_ms()?);
        }
        let refund = json!({"payment_id": format!("pay_g{i}"), "amount": 10_000});
        let action = profile
            .parse(tool, agent.clone(), merchant.clone(), &refund)
            .map_err(|e| format!("refund {i}: {e}"))?;
        let t = Instant::now();
        let answer = engine
            .propose(&action, Some(&live))
            .map_err(|e| format!("refund {i}: {e}"))?;
        latencies.push(t.elapsed());
        if answer.outcome != Outcome::Applied {
            return Err(format!("refund {i} was not applied: {answer:?}"));
        }
        let made = i + 1;
        if let Some(&mark) = cpu_marks.get(&made) {
            let window = figures(latencies[made - args.window..made].to_vec());
            points.push(GrowthPoint {
                refunds: made,
                p50_ms: window.p50,
                p99_ms: window.p99,
                cpu_ms_per_refund: (cpu.self_ms()? - mark) / args.window as f64,
            });
        }
    }
    let wall = started.elapsed();
    let chain = engine
        .ledger()
        .verify_chain()
        .map_err(|e| format!("the chain does not verify: {e}"))?;
    Ok(GrowthRun {
        points,
        refunds: total,
        wall,
        audit_records: chain.records,
        ledger: path,
    })
}

/// The growth from the first checkpoint to the last, in percent.
pub fn growth_pct(first: f64, last: f64) -> f64 {
    (last / first - 1.0) * 100.0
}

/// Prints a run as a table, or as JSON with `--json`.
pub fn report(args: &GrowthArgs, run: &GrowthRun) {
    let GrowthRun {
        points,
        refunds: total,
        wall,
        audit_records: records,
        ledger: path,
    } = run;
    let (first, last) = (&points[0], &points[points.len() - 1]);
    let p50_pct = growth_pct(first.p50_ms, last.p50_ms);
    let cpu_pct = growth_pct(first.cpu_ms_per_refund, last.cpu_ms_per_refund);
    if args.json {
        let out = json!({
            "window": args.window,
            "refunds": total,
            "wall_s": wall.as_secs_f64(),
            "audit_records": records,
            "points": points,
            "p50_growth_pct": p50_pct,
            "cpu_growth_pct": cpu_pct,
        });
        println!("{out}");
        return;
    }
    println!(
        "growth: gated refunds through the engine, in-memory rail, ledger {}",
        path.display()
    );
    println!(
        "{:>9} {:>9} {:>9} {:>11}   (the last {} refunds before each)",
        "refunds", "p50 ms", "p99 ms", "cpu ms/ref", args.window
    );
    for p in points {
        println!(
            "{:>9} {:>9.3} {:>9.3} {:>11.3}",
            p.refunds, p.p50_ms, p.p99_ms, p.cpu_ms_per_refund
        );
    }
    println!(
        "p50 {p50_pct:+.0}%, cpu per refund {cpu_pct:+.0}% from {} to {} refunds; {total} refunds in {:.1} s, {records} audit records, chain verified",
        first.refunds,
        last.refunds,
        wall.as_secs_f64()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(at: &[usize], window: usize) -> GrowthArgs {
        GrowthArgs {
            at: at.to_vec(),
            window,
            db: None,
            json: true,
        }
    }

    #[test]
    fn checkpoints_are_sorted_and_bounded() {
        assert_eq!(checkpoints(&args(&[30, 10, 30], 10)).unwrap(), vec![10, 30]);
        assert!(
            checkpoints(&args(&[5], 10))
                .unwrap_err()
                .contains("less than")
        );
        assert!(
            checkpoints(&args(&[], 10))
                .unwrap_err()
                .contains("at least one")
        );
        assert!(
            checkpoints(&args(&[10], 0))
                .unwrap_err()
                .contains("--window")
        );
        let over = checkpoints(&args(&[GROWTH_REFUNDS_MAX + 1], 10)).unwrap_err();
        assert!(over.contains("GROWTH_REFUNDS_MAX"), "{over}");
    }

    /// A small real run: every refund is applied, one point per checkpoint, the chain verifies.
    #[test]
    fn a_small_run_gives_one_point_per_checkpoint() {
        let points = growth(&args(&[20, 40], 10)).unwrap().points;
        let sizes: Vec<usize> = points.iter().map(|p| p.refunds).collect();
        assert_eq!(sizes, vec![20, 40]);
        assert!(
            points
                .iter()
                .all(|p| p.p50_ms > 0.0 && p.p99_ms >= p.p50_ms)
        );
    }
}
