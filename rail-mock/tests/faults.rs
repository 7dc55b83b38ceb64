//! Every fault profile, its call-level behaviour checked against the journal (`inspect`), the
//! call numbering across a restart, persistence across SIGKILL, two processes on one journal,
//! and a prompt exit when stdin closes.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

fn refund(amount: i64, receipt: &str) -> Value {
    json!({"payment_id": "pay_1005", "amount": amount, "receipt": receipt})
}

/// Poll `inspect` until `done` holds (or fail after 10 s); the last dump.
async fn wait_for(journal: &std::path::Path, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let dump = inspect(journal);
        if done(&dump) {
            return dump;
        }
        assert!(
            Instant::now() < deadline,
            "the journal never got there: {dump}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn ids(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|r| r["id"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn timeout_after_apply_commits_then_never_answers() {
    let journal = fresh_journal("timeout-after");
    let mock = spawn_demo(&journal, "timeout_after_apply@2").await;
    mock.ok("create_refund", refund(1_000, "a")).await;
    let answer = mock
        .call_within(FAULT_TIMEOUT, "create_refund", refund(2_000, "b"))
        .await;
    assert!(answer.is_err(), "the client must time out, got {answer:?}");
    // The commit precedes the hang; on a loaded machine it may trail the client's timeout.
    let dump = wait_for(&journal, |d| refunds_of(d, "pay_1005").len() == 2).await;
    let receipts: Vec<Value> = refunds_of(&dump, "pay_1005")
        .iter()
        .map(|r| r["receipt"].clone())
        .collect();
    assert_eq!(
        receipts,
        [json!("a"), json!("b")],
        "the unanswered refund is applied"
    );
    assert_eq!(dump["call_counters"]["money_calls"], 2);
    // The rail still serves other calls while one hangs.
    mock.ok("create_refund", refund(3_000, "c")).await;
    mock.close().await;
}

#[tokio::test]
async fn timeout_before_apply_never_answers_and_applies_nothing() {
    let journal = fresh_journal("timeout-before");
    let mock = spawn_demo(&journal, "timeout_before_apply").await;
    let answer = mock
        .call_within(FAULT_TIMEOUT, "create_refund", refund(1_000, "a"))
        .await;
    assert!(answer.is_err(), "the client must time out");
    let settle = mock
        .call_within(
            FAULT_TIMEOUT,
            "create_instant_settlement",
            json!({"amount": 500}),
        )
        .await;
    assert!(settle.is_err(), "the client must time out");
    let dump = inspect(&journal);
    assert!(refunds_of(&dump, "pay_1005").is_empty());
    assert_eq!(dump["settlements"], json!([]));
    assert_eq!(dump["balance"], 2_500_000);
    assert_eq!(dump["call_counters"]["money_calls"], 2);
    mock.close().await;
}

#[tokio::test]
async fn http_5xx_applied_commits_and_answers_server_error() {
    let journal = fresh_journal("5xx-applied");
    let mock = spawn_demo(&journal, "http_5xx_applied").await;
    let err = mock.err("create_refund", refund(1_000, "a")).await;
    assert!(
        err.starts_with("creating refund failed: SERVER_ERROR: "),
        "{err}"
    );
    let err = mock
        .err("create_instant_settlement", json!({"amount": 500}))
        .await;
    assert!(
        err.starts_with("creating instant settlement failed: SERVER_ERROR: "),
        "{err}"
    );
    let dump = inspect(&journal);
    assert_eq!(refunds_of(&dump, "pay_1005").len(), 1, "applied");
    assert_eq!(dump["settlements"].as_array().map(Vec::len), Some(1));
    assert_eq!(dump["balance"], 2_500_000 - 500);
    // A rejection is still a rejection: nothing applied, so the fault has nothing to add.
    let err = mock.err("create_refund", refund(99_999_999, "z")).await;
    assert!(err.contains("BAD_REQUEST_ERROR"), "{err}");
    // Reads are untouched.
    mock.ok("fetch_payment", json!({"payment_id": "pay_1005"}))
        .await;
    mock.close().await;
}

#[tokio::test]
async fn http_5xx_not_applied_answers_server_error_and_applies_nothing() {
    let journal = fresh_journal("5xx-not-applied");
    let mock = spawn_demo(&journal, "http_5xx_not_applied@1").await;
    let err = mock.err("create_refund", refund(1_000, "a")).await;
    assert!(
        err.starts_with("creating refund failed: SERVER_ERROR: "),
        "{err}"
    );
    assert!(refunds_of(&inspect(&journal), "pay_1005").is_empty());
    // Call 2 is not hit: the same refund now lands.
    let r = mock.ok("create_refund", refund(1_000, "a")).await;
    let dump = inspect(&journal);
    assert_eq!(refunds_of(&dump, "pay_1005"), vec![r]);
    mock.close().await;
}

#[tokio::test]
async fn conn_reset_commits_then_the_process_dies() {
    let journal = fresh_journal("conn-reset");
    let mock = spawn_demo(&journal, "conn_reset@2").await;
    mock.ok("create_refund", refund(1_000, "a")).await;
    let answer = mock
        .call_within(Duration::from_secs(10), "create_refund", refund(2_000, "b"))
        .await;
    let answer = answer.expect("the transport fails fast, not a timeout");
    assert!(answer.is_err(), "the transport must die, got {answer:?}");
    let dump = inspect(&journal);
    assert_eq!(
        refunds_of(&dump, "pay_1005").len(),
        2,
        "the refund is in the journal"
    );
    // A restarted mock on the same journal continues the numbering: call 3 is not reset.
    let mock = spawn_demo(&journal, "conn_reset@2").await;
    mock.ok("create_refund", refund(3_000, "c")).await;
    assert_eq!(inspect(&journal)["call_counters"]["money_calls"], 3);
    mock.close().await;
}

/// The raw process view of `conn_reset`: a non-zero exit code and no answer on stdout.
#[test]
fn conn_reset_exits_non_zero_without_answering() {
    let journal = fresh_journal("conn-reset-raw");
    let mut child = Command::new(BIN)
        .arg("--journal")
        .arg(&journal)
        .args([
            "--seed",
            "demo",
            "--faults",
            "conn_reset",
            "--log-level",
            "error",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    for line in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "create_refund", "arguments": refund(1_000, "a")}}),
    ] {
        writeln!(stdin, "{line}").expect("write");
    }
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(interlock_rail_mock::EXIT_CONN_RESET));
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().expect("stdout"), &mut out)
        .expect("read");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "only the initialize answer: {out}");
    assert!(lines[0].contains("\"id\":1"), "{out}");
    assert_eq!(refunds_of(&inspect(&journal), "pay_1005").len(), 1);
}

#[tokio::test]
async fn dup_response_answers_with_an_earlier_refund() {
    let journal = fresh_journal("dup");
    let mock = spawn_demo(&journal, "dup_response@2-3").await;
    let first = mock.ok("create_refund", refund(1_000, "a")).await;
    let answer = mock.ok("create_refund", refund(2_000, "b")).await;
    assert_eq!(answer, first, "the answer replays the earlier refund");
    let dump = inspect(&journal);
    let committed = refunds_of(&dump, "pay_1005");
    assert_eq!(committed.len(), 2);
    assert_ne!(
        answer["id"], committed[1]["id"],
        "the answer is not the new refund"
    );
    assert_eq!(committed[1]["receipt"], "b");
    // No earlier settlement exists: the answer is a SERVER_ERROR, and the settlement is applied.
    let err = mock
        .err("create_instant_settlement", json!({"amount": 500}))
        .await;
    assert!(
        err.starts_with("creating instant settlement failed: SERVER_ERROR: "),
        "{err}"
    );
    assert_eq!(
        inspect(&journal)["settlements"].as_array().map(Vec::len),
        Some(1)
    );
    mock.close().await;
}

/// A seed with three earlier instant settlements: history for `dup_response` to replay and for
/// a small page size to spread over pages.
fn settlement_seed(dir: &std::path::Path) -> std::path::PathBuf {
    let settlements: Vec<Value> = (1..=3)
        .map(|n| {
            json!({"id": format!("setlod_SEED{n}"), "amount_requested": 1_000 * n,
                        "description": format!("seeded {n}"), "created_at": 1_764_633_600 + n})
        })
        .collect();
    let path = dir.join("seed.json");
    let seed = json!({"balance": 100_000, "settlements": settlements});
    std::fs::write(&path, seed.to_string()).expect("write the seed");
    path
}

#[tokio::test]
async fn dup_response_replays_a_seeded_settlement_and_pages_walk_them() {
    let dir = fresh_dir("dup-settlement");
    let seed = settlement_seed(&dir);
    let journal = dir.join("journal.db");
    let seed_arg = seed.to_str().expect("a UTF-8 path");
    let mock = spawn(
        &journal,
        &["--seed", seed_arg, "--faults", "dup_response@1,page_size=1"],
    )
    .await;
    let answer = mock
        .ok(
            "create_instant_settlement",
            json!({"amount": 700, "notes": {"k": "ours"}}),
        )
        .await;
    assert_eq!(
        answer["id"], "setlod_SEED3",
        "the latest earlier settlement"
    );
    assert_eq!(answer["amount_requested"], 3_000);
    assert_eq!(answer["notes"], json!({}), "the replay is not ours");
    let dump = inspect(&journal);
    let settlements = dump["settlements"].as_array().expect("settlements");
    assert_eq!(settlements.len(), 4, "3 seeded + the applied one");
    assert_eq!(settlements[0]["amount_settled"], 1_000);
    assert_eq!(settlements[3]["notes"], json!({"k": "ours"}));
    assert_eq!(dump["balance"], 100_000 - 700, "seeded ones are history");
    let mut seen = Vec::new();
    for skip in 0..5 {
        let page = mock
            .ok(
                "fetch_all_instant_settlements",
                json!({"count": 100, "skip": skip}),
            )
            .await;
        assert!(page["count"].as_u64() <= Some(1), "{page}");
        seen.extend(ids(&page));
    }
    assert_eq!(seen.len(), 4, "one a page, then an empty page: {seen:?}");
    assert_eq!(&seen[1..], ["setlod_SEED3", "setlod_SEED2", "setlod_SEED1"]);
    mock.close().await;
}

#[tokio::test]
async fn read_lag_hides_young_entities_from_lists_only() {
    let journal = fresh_journal("read-lag");
    let lag = Duration::from_millis(1_500);
    let mock = spawn_demo(&journal, &format!("read_lag={}", lag.as_millis())).await;
    let made = Instant::now();
    let r = mock.ok("create_refund", refund(1_000, "a")).await;
    let list = json!({"payment_id": "pay_1005"});
    let early = mock
        .ok("fetch_multiple_refunds_for_payment", list.clone())
        .await;
    let early_all = mock.ok("fetch_all_refunds", json!({})).await;
    assert!(made.elapsed() < lag, "the check ran in time");
    assert_eq!(early["count"], 0, "hidden while young: {early}");
    assert!(!ids(&early_all).contains(&r["id"].as_str().unwrap_or_default().to_owned()));
    assert_eq!(
        mock.ok("fetch_refund", json!({"refund_id": r["id"]})).await,
        r,
        "fetch by id sees it"
    );
    tokio::time::sleep(lag + Duration::from_millis(100)).await;
    let late = mock.ok("fetch_multiple_refunds_for_payment", list).await;
    assert_eq!(late["items"], json!([r]), "shown once old enough");
    mock.close().await;
}

#[tokio::test]
async fn partition_fails_lists_and_reconciliation_reads() {
    let journal = fresh_journal("partition");
    let mock = spawn_demo(&journal, "partition").await;
    let r = mock.ok("create_refund", refund(1_000, "a")).await;
    for (tool, args, what) in [
        (
            "fetch_multiple_refunds_for_payment",
            json!({"payment_id": "pay_1005"}),
            "fetching refunds for payment",
        ),
        ("fetch_all_refunds", json!({}), "fetching refunds"),
        (
            "fetch_all_instant_settlements",
            json!({}),
            "fetching instant settlements",
        ),
        (
            "fetch_refund",
            json!({"refund_id": r["id"]}),
            "fetching refund",
        ),
        (
            "fetch_instant_settlement_with_id",
            json!({"settlement_id": "setlod_x"}),
            "fetching instant settlement",
        ),
    ] {
        let err = mock.err(tool, args).await;
        assert!(
            err.starts_with(&format!("{what} failed: GATEWAY_ERROR: ")),
            "{err}"
        );
    }
    mock.ok("fetch_payment", json!({"payment_id": "pay_1005"}))
        .await;
    mock.ok("fetch_balance", json!({})).await;
    mock.close().await;
}

#[tokio::test]
async fn page_size_caps_pages_and_skip_walks_them() {
    let journal = fresh_journal("page-size");
    let mock = spawn_demo(&journal, "page_size=2").await;
    let mut made = Vec::new();
    for i in 0..5 {
        let r = mock
            .ok("create_refund", refund(1_000 + i, &format!("r{i}")))
            .await;
        made.push(r["id"].as_str().expect("id").to_owned());
    }
    made.reverse();
    let mut seen = Vec::new();
    for skip in [0, 2, 4] {
        let page = mock
            .ok(
                "fetch_multiple_refunds_for_payment",
                json!({"payment_id": "pay_1005", "count": 10, "skip": skip}),
            )
            .await;
        assert!(page["count"].as_u64() <= Some(2), "{page}");
        seen.extend(ids(&page));
    }
    assert_eq!(seen, made, "every refund once, newest first");
    let last = mock
        .ok("fetch_all_refunds", json!({"count": 100, "skip": 6}))
        .await;
    assert_eq!(
        last["count"], 1,
        "5 new + 2 seeded refunds: the seventh is alone on its page"
    );
    mock.close().await;
}

#[tokio::test]
async fn oldest_first_puts_a_new_entity_on_the_last_page() {
    let journal = fresh_journal("oldest-first");
    let mock = spawn_demo(&journal, "oldest_first,page_size=2").await;
    let r = mock
        .ok(
            "create_refund",
            json!({"payment_id": "pay_1003", "amount": 1_000}),
        )
        .await;
    let first = mock.ok("fetch_all_refunds", json!({})).await;
    assert_eq!(ids(&first), ["rfnd_SEED0000000001", "rfnd_SEED0000000002"]);
    let second = mock.ok("fetch_all_refunds", json!({"skip": 2})).await;
    assert_eq!(second["items"], json!([r]));
    mock.close().await;
}

#[tokio::test]
async fn slow_delays_every_call() {
    let journal = fresh_journal("slow");
    let mock = spawn_demo(&journal, "slow=300").await;
    for (tool, args) in [
        ("fetch_payment", json!({"payment_id": "pay_1002"})),
        ("fetch_all_refunds", json!({})),
        ("create_refund", refund(1_000, "a")),
    ] {
        let start = Instant::now();
        mock.ok(tool, args).await;
        assert!(
            start.elapsed() >= Duration::from_millis(300),
            "{tool} answered in {:?}",
            start.elapsed()
        );
    }
    mock.close().await;
}

#[tokio::test]
async fn a_call_the_client_gives_up_on_is_still_worked_to_its_end() {
    let journal = fresh_journal("cancelled");
    let mock = spawn_demo(&journal, "slow=600").await;
    let answer = mock
        .call_within(
            Duration::from_millis(150),
            "create_refund",
            refund(1_000, "a"),
        )
        .await;
    assert!(answer.is_err(), "the client gives up first");
    wait_for(&journal, |d| refunds_of(d, "pay_1005").len() == 1).await;
    mock.close().await;
}

#[tokio::test]
async fn call_numbers_survive_a_restart() {
    let journal = fresh_journal("numbering");
    let faults = "http_5xx_not_applied@3,partition@2";
    let mock = spawn_demo(&journal, faults).await;
    mock.ok("create_refund", refund(1_000, "a")).await;
    mock.ok("create_refund", refund(1_000, "b")).await;
    mock.ok("fetch_all_refunds", json!({})).await;
    mock.close().await;
    let mock = spawn_demo(&journal, faults).await;
    let err = mock.err("create_refund", refund(1_000, "c")).await;
    assert!(
        err.contains("SERVER_ERROR"),
        "money call 3 is hit after the restart: {err}"
    );
    let err = mock.err("fetch_all_refunds", json!({})).await;
    assert!(
        err.contains("GATEWAY_ERROR"),
        "list call 2 is hit after the restart: {err}"
    );
    mock.ok("create_refund", refund(1_000, "c")).await;
    mock.ok("fetch_all_refunds", json!({})).await;
    let dump = inspect(&journal);
    assert_eq!(dump["call_counters"]["money_calls"], 4);
    assert_eq!(dump["call_counters"]["list_calls"], 3);
    assert_eq!(refunds_of(&dump, "pay_1005").len(), 3);
    mock.close().await;
}

#[tokio::test]
async fn the_journal_survives_sigkill() {
    let journal = fresh_journal("sigkill");
    let mock = spawn_demo(&journal, "none").await;
    let r = mock.ok("create_refund", refund(1_000, "a")).await;
    let s = mock
        .ok("create_instant_settlement", json!({"amount": 10_000}))
        .await;
    kill_9(mock.pid);
    let dead = mock
        .call_within(Duration::from_secs(10), "fetch_balance", json!({}))
        .await;
    assert!(
        matches!(dead, Ok(Err(_))),
        "the transport is gone: {dead:?}"
    );
    // Restart without --seed: the journal alone carries the state.
    let mock = spawn(&journal, &[]).await;
    assert_eq!(
        mock.ok("fetch_refund", json!({"refund_id": r["id"]})).await,
        r
    );
    assert_eq!(
        mock.ok(
            "fetch_instant_settlement_with_id",
            json!({"settlement_id": s["id"]})
        )
        .await,
        s
    );
    let p = mock
        .ok("fetch_payment", json!({"payment_id": "pay_1005"}))
        .await;
    assert_eq!(p["amount_refunded"], 1_000);
    let dump = inspect(&journal);
    assert_eq!(dump["balance"], 2_500_000 - 10_000);
    assert_eq!(refunds_of(&dump, "pay_1005"), vec![r]);
    mock.close().await;
}

#[tokio::test]
async fn two_processes_on_one_journal_never_over_refund() {
    const PER_PROCESS: usize = 4;
    let journal = fresh_journal("race");
    let a = spawn_demo(&journal, "none").await;
    let b = spawn_demo(&journal, "none").await;
    // pay_1002 is 189900: three refunds of 50000 fit, a fourth does not.
    let mut calls = Vec::new();
    for mock in [&a, &b] {
        for i in 0..PER_PROCESS {
            calls.push(mock.call(
                "create_refund",
                json!({"payment_id": "pay_1002", "amount": 50_000, "notes": {"i": i.to_string()}}),
            ));
        }
    }
    // The same receipt from both processes at once: exactly one lands.
    calls.push(a.call(
        "create_refund",
        json!({"payment_id": "pay_1005", "amount": 100, "receipt": "same"}),
    ));
    calls.push(b.call(
        "create_refund",
        json!({"payment_id": "pay_1005", "amount": 100, "receipt": "same"}),
    ));
    let results = futures_join_all(calls).await;
    let (mut ok, mut refused) = (0, 0);
    for r in &results {
        let text = text_of(r);
        if r.is_error == Some(true) {
            assert!(
                text.starts_with("creating refund failed: BAD_REQUEST_ERROR: "),
                "{text}"
            );
            refused += 1;
        } else {
            ok += 1;
        }
    }
    assert_eq!((ok, refused), (4, 2 * PER_PROCESS + 2 - 4));
    let dump = inspect(&journal);
    assert_eq!(refunds_of(&dump, "pay_1002").len(), 3);
    assert_eq!(payment_of(&dump, "pay_1002")["amount_refunded"], 150_000);
    assert_eq!(refunds_of(&dump, "pay_1005").len(), 1);
    assert_eq!(dump["call_counters"]["money_calls"], 2 * PER_PROCESS + 2);
    a.close().await;
    b.close().await;
}

/// Poll every future concurrently (in this task) until all are ready; results in input order.
async fn futures_join_all<F, T>(futures: Vec<F>) -> Vec<T>
where
    F: std::future::Future<Output = T>,
{
    let mut pinned: Vec<_> = futures.into_iter().map(Box::pin).collect();
    let mut done: Vec<Option<T>> = pinned.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, slot) in pinned.iter_mut().zip(done.iter_mut()) {
            if slot.is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *slot = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    done.into_iter().flatten().collect()
}

/// Mocks started at the same instant on a fresh journal all come up (one seeds, the others see
/// the same seed); SQLite's `database is locked` during the WAL switch is retried.
#[test]
fn mocks_started_together_on_a_fresh_journal_all_come_up() {
    const ROUNDS: usize = 5;
    const PROCESSES: usize = 3;
    for round in 0..ROUNDS {
        let journal = fresh_journal(&format!("together-{round}"));
        let children: Vec<_> = (0..PROCESSES)
            .map(|_| {
                Command::new(BIN)
                    .arg("--journal")
                    .arg(&journal)
                    .args(["--seed", "demo", "--log-level", "error"])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("spawn")
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().expect("wait");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert_eq!(inspect(&journal)["balance"], 2_500_000);
    }
}

/// An orphaned mock (its client gone, stdin closed) exits promptly, even mid-hang.
#[test]
fn the_mock_exits_when_stdin_closes_even_while_a_call_hangs() {
    let journal = fresh_journal("stdin-close");
    let mut child = Command::new(BIN)
        .arg("--journal")
        .arg(&journal)
        .args([
            "--seed",
            "demo",
            "--faults",
            "timeout_after_apply",
            "--log-level",
            "error",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    for line in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "create_refund", "arguments": refund(1_000, "a")}}),
    ] {
        writeln!(stdin, "{line}").expect("write");
    }
    let mut first = String::new();
    stdout.read_line(&mut first).expect("initialize answer");
    // Wait until the refund is committed, i.e. the call is hanging.
    let deadline = Instant::now() + Duration::from_secs(10);
    while refunds_of(&inspect(&journal), "pay_1005").is_empty() {
        assert!(Instant::now() < deadline, "the refund never landed");
        std::thread::sleep(Duration::from_millis(20));
    }
    let closed = Instant::now();
    drop(stdin);
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        assert!(
            closed.elapsed() < Duration::from_secs(5),
            "the mock lingers after stdin closed"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
    eprintln!("exited {:?} after stdin closed", closed.elapsed());
}

#[tokio::test]
async fn short_apply_commits_one_unit_less_and_answers_with_it() {
    let journal = fresh_journal("short");
    let mock = spawn_demo(&journal, "short_apply@1-2").await;
    let refund_answer = mock.ok("create_refund", refund(1_000, "a")).await;
    assert_eq!(refund_answer["amount"], 999);
    let settlement = mock
        .ok("create_instant_settlement", json!({"amount": 500}))
        .await;
    assert_eq!(settlement["amount_requested"], 499);
    // The third call is past the spec: as asked.
    let whole = mock.ok("create_refund", refund(2_000, "b")).await;
    assert_eq!(whole["amount"], 2_000);
    let dump = inspect(&journal);
    let amounts: Vec<Value> = refunds_of(&dump, "pay_1005")
        .iter()
        .map(|r| r["amount"].clone())
        .collect();
    assert_eq!(amounts, [json!(999), json!(2_000)]);
    mock.close().await;
}
