//! The cost of one gated refund through the engine against the in-memory rail: every gate, the
//! SIK, three durable commits (intent + GATES_PASSED, ATTEMPT_STARTED, RAIL_APPLIED), the rail
//! call and the answer. Prints the latency distribution; it asserts nothing.
//!
//! ```text
//! cargo run --release -p interlock-engine --example refund_cost -- --refunds 10000
//! strace -f -c -e trace=fsync,fdatasync target/release/examples/refund_cost --refunds 1000
//! ```
//!
//! `--db PATH` puts the ledger somewhere else than a fresh temporary directory (the disk under
//! it decides most of the figure: each commit is an fsync).

use interlock_engine::gates::LiveTool;
use interlock_engine::memory_rail::MemoryRail;
use interlock_engine::{Engine, EngineConfig, Ledger, Outcome, SystemClock};
use interlock_spec::ids::{AgentId, MerchantId};
use interlock_spec::mandate::template::Template;
use interlock_spec::money::Minor;
use std::sync::Arc;
use std::time::{Duration, Instant};

const PIN: &str = "52d4053d8642b1d01b89677925bf34c415c19e28cec815e39387dee36d171893";

/// One refund tool, pinned, with limits no run reaches.
fn mandate() -> Template {
    Template::new("agent_bench")
        .mandate_id("mnd_bench")
        .merchant_id("acc_BENCH")
        .purpose("benchmark")
        .expires_at(4_000_000_000_000)
        .money("create_refund", 100, 500_000)
        .window(1_000_000, 9_000_000_000_000)
        .fee_budget(9_000_000_000_000)
        .pinned("bench-rail", PIN)
        .pin("create_refund", PIN)
}

fn main() {
    let mut refunds = 10_000usize;
    let mut db = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--refunds", Some(n)) => refunds = n.parse().expect("--refunds takes a number"),
            ("--db", Some(path)) => db = Some(std::path::PathBuf::from(path)),
            _ => {
                eprintln!("usage: refund_cost [--refunds N] [--db PATH]");
                std::process::exit(2);
            }
        }
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = db.unwrap_or_else(|| dir.path().join("bench.ledger.db"));
    let clock = Arc::new(SystemClock);
    let rail = MemoryRail::new(clock.clone(), Minor::ZERO);
    for i in 0..refunds {
        rail.add_payment(&format!("pay_b{i}"), 100_000, 0, None);
    }
    let mandate = mandate().build().expect("the benchmark mandate validates");
    let ledger = Ledger::open(&path).expect("the ledger opens");
    let engine = Engine::new(ledger, rail, clock, mandate, EngineConfig::new("bench"))
        .expect("the engine starts");
    let live = LiveTool {
        server_id: "bench-rail".to_owned(),
        sha256: Ok(PIN.to_owned()),
    };
    let profile = interlock_profile::razorpay::profile();
    let mut latencies = Vec::with_capacity(refunds);
    let started = Instant::now();
    for i in 0..refunds {
        let args = serde_json::json!({"payment_id": format!("pay_b{i}"), "amount": 10_000});
        let action = profile
            .parse(
                profile
                    .money_tool("create_refund")
                    .expect("Razorpay refunds"),
                AgentId::parse("agent_bench").unwrap(),
                MerchantId::parse("acc_BENCH").unwrap(),
                &args,
            )
            .expect("benchmark arguments parse");
        let t = Instant::now();
        let answer = engine
            .propose(&action, Some(&live))
            .expect("the engine answers");
        latencies.push(t.elapsed());
        assert_eq!(answer.outcome, Outcome::Applied, "{answer:?}");
    }
    let total = started.elapsed();
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() as f64 - 1.0) * q).round() as usize];
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "gated refunds through the engine, in-memory rail, ledger {}",
        path.display()
    );
    println!("refunds      {refunds}");
    println!(
        "total        {:.2} s ({:.0} refunds/s)",
        total.as_secs_f64(),
        refunds as f64 / total.as_secs_f64()
    );
    println!("median       {:.3} ms", ms(at(0.5)));
    println!("p90          {:.3} ms", ms(at(0.9)));
    println!("p99          {:.3} ms", ms(at(0.99)));
    println!("max          {:.3} ms", ms(at(1.0)));
    let chain = engine.ledger().verify_chain().expect("the chain verifies");
    println!("audit        {} records, chain verified", chain.records);
}
