//! A rough latency figure, not a benchmark (that is `bench/`, not built yet): the same rmcp
//! client calls the mock directly and through `interlock`, interleaved. Ignored by default:
//! `cargo test -p interlock --test latency -- --ignored --nocapture`.

mod common;

use std::time::{Duration, Instant};

use common::*;
use rmcp::ServiceExt;
use rmcp::transport::TokioChildProcess;
use serde_json::json;

fn pct(mut v: Vec<Duration>, p: f64) -> f64 {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i].as_secs_f64() * 1e3
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn latency_direct_vs_through_the_proxy() {
    let scene = scene("latency", &[]);
    let proxy = scene.proxy("none", &[]).await;
    let mut cmd = tokio::process::Command::new(mock_bin());
    cmd.arg("--journal")
        .arg(&scene.journal)
        .args(["--seed", "demo", "--log-level", "error"]);
    let (transport, _) = TokioChildProcess::builder(cmd).spawn().unwrap();
    let direct = ().serve(transport).await.unwrap();
    let (mut read_d, mut read_p, mut pay_d, mut pay_p) = (vec![], vec![], vec![], vec![]);
    for _ in 0..300 {
        let t = Instant::now();
        direct
            .call_tool(params("fetch_payment", json!({"payment_id": "pay_1002"})))
            .await
            .unwrap();
        read_d.push(t.elapsed());
        let t = Instant::now();
        proxy
            .call("fetch_payment", json!({"payment_id": "pay_1002"}))
            .await;
        read_p.push(t.elapsed());
    }
    // The test mandate allows 40 money calls a day.
    for i in 0..35 {
        let t = Instant::now();
        direct
            .call_tool(params(
                "create_refund",
                json!({"payment_id": "pay_1005", "amount": 100, "receipt": format!("direct-{i}")}),
            ))
            .await
            .unwrap();
        pay_d.push(t.elapsed());
        let t = Instant::now();
        let r = proxy
            .call(
                "create_refund",
                json!({"payment_id": "pay_1005", "amount": 100,
                    "interlock_distinct_reason": format!("latency run {i}")}),
            )
            .await;
        pay_p.push(t.elapsed());
        assert_eq!(block(&r)["outcome"], "APPLIED", "{}", text_of(&r));
    }
    for (name, d, p) in [
        ("fetch_payment", read_d, read_p),
        ("create_refund", pay_d, pay_p),
    ] {
        let (d50, d99, p50, p99) = (
            pct(d.clone(), 0.5),
            pct(d, 0.99),
            pct(p.clone(), 0.5),
            pct(p, 0.99),
        );
        eprintln!(
            "{name}: direct p50 {d50:.2} ms p99 {d99:.2} ms; through interlock p50 {p50:.2} ms p99 {p99:.2} ms; added p50 {:.2} ms p99 {:.2} ms",
            p50 - d50,
            p99 - d99
        );
    }
    let _ = direct.cancel().await;
    proxy.close().await;
}
