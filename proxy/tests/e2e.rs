//! End to end through real processes: an rmcp client → `interlock serve` →
//! `interlock-rail-mock`, with the journal read back by `inspect`.

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_benign_refund_is_applied_and_its_retry_is_an_idempotent_replay() {
    let scene = scene("benign", &[]);
    let proxy = scene.proxy("none", &[]).await;
    let first = proxy.refund("pay_1002", 10_000).await;
    let info = block(&first);
    assert_ne!(first.is_error, Some(true), "{}", text_of(&first));
    assert_eq!(info["outcome"], "APPLIED", "{info}");
    assert_eq!(info["reason_code"], "APPLIED");
    let entity = info["rail_entity_id"]
        .as_str()
        .expect("an entity")
        .to_owned();
    let refund: Value = serde_json::from_str(&text_of(&first)).expect("the rail's refund JSON");
    assert_eq!(refund["id"], entity);
    assert_eq!(refund["notes"]["interlock_sik"], info["sik"]);
    assert!(
        info["gates"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["gate"] == "G6" && g["verdict"] == "ALLOW"),
        "{info}"
    );

    let again = proxy.refund("pay_1002", 10_000).await;
    let replay = block(&again);
    assert_ne!(again.is_error, Some(true), "{}", text_of(&again));
    assert_eq!(replay["outcome"], "APPLIED");
    assert_eq!(replay["reason_code"], "IDEMPOTENT_REPLAY");
    assert_eq!(replay["idempotent_replay"], true);
    assert_eq!(replay["rail_entity_id"], entity.as_str());
    assert_eq!(replay["sik"], info["sik"]);
    proxy.close().await;
    assert_eq!(scene.stamped_refunds_of("pay_1002").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_over_refund_is_blocked_with_the_numbers_and_nothing_reaches_the_rail() {
    let scene = scene("over", &[]);
    let proxy = scene.proxy("none", &[]).await;
    let result = proxy.refund("pay_1003", 250_000).await;
    let info = block(&result);
    assert_eq!(result.is_error, Some(true));
    assert_eq!(info["outcome"], "REFUSED", "{info}");
    assert_eq!(info["reason_code"], "REFUND_EXCEEDS_REFUNDABLE", "{info}");
    let text = text_of(&result);
    assert!(
        text.contains("250000") && text.contains("200000"),
        "the numbers: {text}"
    );
    assert_eq!(info["message"].as_str(), Some(text.as_str()));
    proxy.close().await;
    assert!(scene.stamped_refunds_of("pay_1003").is_empty());
    assert_eq!(scene.inspect()["call_counters"]["money_calls"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ungranted_tool_is_neither_listed_nor_callable() {
    let scene = scene("ungranted", &[]);
    let proxy = scene.proxy("none", &[]).await;
    let mut names = proxy.tool_names().await;
    names.sort();
    assert_eq!(
        names,
        [
            "create_instant_settlement",
            "create_refund",
            "fetch_payment"
        ]
    );
    let result = proxy.call("fetch_balance", json!({})).await;
    assert_eq!(result.is_error, Some(true));
    assert_eq!(block(&result)["reason_code"], "TOOL_NOT_GRANTED");
    assert!(text_of(&result).contains("does not grant fetch_balance"));
    // A granted read passes through unchanged.
    let payment = proxy
        .call("fetch_payment", json!({"payment_id": "pay_1002"}))
        .await;
    assert_ne!(payment.is_error, Some(true));
    let payment: Value = serde_json::from_str(&text_of(&payment)).unwrap();
    assert_eq!(payment["id"], "pay_1002");
    proxy.close().await;
    assert_eq!(scene.inspect()["call_counters"]["read_calls"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drifted_tool_is_not_listed_and_refused_when_called() {
    let scene = scene(
        "drift",
        &[
            "fetch_payment",
            "create_refund",
            "create_instant_settlement",
        ],
    );
    let proxy = scene.proxy("none", &[]).await;
    assert!(proxy.tool_names().await.is_empty());
    let read = proxy
        .call("fetch_payment", json!({"payment_id": "pay_1002"}))
        .await;
    assert_eq!(read.is_error, Some(true));
    assert_eq!(block(&read)["reason_code"], "TOOL_DRIFTED");
    let refund = proxy.refund("pay_1002", 10_000).await;
    assert_eq!(refund.is_error, Some(true));
    assert_eq!(block(&refund)["reason_code"], "TOOL_DRIFTED");
    proxy.close().await;
    let dump = scene.inspect();
    assert_eq!(dump["call_counters"]["money_calls"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn float_string_and_negative_amounts_are_refused_with_a_clear_message() {
    let scene = scene("float", &[]);
    let proxy = scene.proxy("none", &[]).await;
    for (amount, expected) in [
        (json!(100.5), "float"),
        (json!(100.0), "float"),
        (json!("100"), "string"),
        (json!(-5), "amount"),
    ] {
        let result = proxy
            .call(
                "create_refund",
                json!({"payment_id": "pay_1002", "amount": amount}),
            )
            .await;
        assert_eq!(result.is_error, Some(true));
        let text = text_of(&result);
        assert!(text.contains(expected), "{amount}: {text}");
        assert_eq!(block(&result)["reason_code"], "ARGUMENTS_INVALID");
    }
    proxy.close().await;
    assert_eq!(scene.inspect()["call_counters"]["money_calls"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_identical_concurrent_refunds_make_one_entity() {
    let scene = scene("concurrent", &[]);
    let proxy = scene.proxy("none", &[]).await;
    let peer = proxy.client.peer().clone();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let peer = peer.clone();
        tasks.push(tokio::spawn(async move {
            peer.call_tool(params(
                "create_refund",
                json!({"payment_id": "pay_1005", "amount": 25_000}),
            ))
            .await
            .expect("a tool result")
        }));
    }
    let mut applied = 0;
    for task in tasks {
        let result = task.await.unwrap();
        let info = block(&result);
        assert!(
            ["APPLIED", "IN_PROGRESS"].contains(&info["outcome"].as_str().unwrap()),
            "{info}"
        );
        if info["outcome"] == "APPLIED" {
            applied += 1;
        }
    }
    assert!(applied >= 1);
    // Whatever was in progress is now a replay.
    let after = proxy.refund("pay_1005", 25_000).await;
    assert_eq!(block(&after)["reason_code"], "IDEMPOTENT_REPLAY");
    proxy.close().await;
    assert_eq!(scene.stamped_refunds_of("pay_1005").len(), 1);
    assert_eq!(scene.inspect()["call_counters"]["money_calls"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_after_apply_is_unknown_then_reconciled_into_a_replay() {
    let scene = scene("timeout", &[]);
    let proxy = scene
        .proxy("timeout_after_apply@1", &["--call-timeout-ms", "1000"])
        .await;
    let first = proxy.refund("pay_1002", 12_345).await;
    let info = block(&first);
    assert_eq!(first.is_error, Some(true));
    assert_eq!(info["outcome"], "UNKNOWN", "{info}");
    // Retries until the reconciler settled it: never a second rail call.
    let deadline = Instant::now() + Duration::from_secs(30);
    let replay = loop {
        let again = proxy.refund("pay_1002", 12_345).await;
        let info = block(&again);
        if info["outcome"] == "APPLIED" {
            break info;
        }
        assert!(
            ["IN_PROGRESS", "UNKNOWN"].contains(&info["outcome"].as_str().unwrap()),
            "{info}"
        );
        assert!(Instant::now() < deadline, "not reconciled in time: {info}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert_eq!(replay["idempotent_replay"], true, "{replay}");
    proxy.close().await;
    assert_eq!(scene.stamped_refunds_of("pay_1002").len(), 1);
    assert_eq!(scene.inspect()["call_counters"]["money_calls"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_killed_mid_call_recovers_on_restart_and_pays_once() {
    let scene = scene("sigkill", &[]);
    let flags = [
        "--call-timeout-ms",
        "3000",
        "--lease-ttl-ms",
        "8000",
        "--reconcile-every-ms",
        "200",
    ];
    let proxy = scene.proxy("timeout_after_apply@1", &flags).await;
    let peer = proxy.client.peer().clone();
    let pending = tokio::spawn(async move {
        peer.call_tool(params(
            "create_refund",
            json!({"payment_id": "pay_1003", "amount": 7_000}),
        ))
        .await
    });
    // The mock commits the refund and hangs; the proxy holds IN_FLIGHT with a lease.
    let deadline = Instant::now() + Duration::from_secs(20);
    while scene.stamped_refunds_of("pay_1003").is_empty() {
        assert!(Instant::now() < deadline, "the mock never applied it");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    kill_9(proxy.pid);
    assert!(pending.await.unwrap().is_err(), "the dead proxy answered");
    drop(proxy);

    let started = Instant::now();
    let proxy = scene.proxy("none", &flags).await;
    let boot = started.elapsed();
    let after = proxy.refund("pay_1003", 7_000).await;
    let info = block(&after);
    assert_eq!(info["outcome"], "APPLIED", "{info} (boot took {boot:?})");
    assert_eq!(info["reason_code"], "IDEMPOTENT_REPLAY", "{info}");
    proxy.close().await;
    assert_eq!(scene.stamped_refunds_of("pay_1003").len(), 1);
    assert_eq!(scene.inspect()["call_counters"]["money_calls"], 1);
    let verify = std::process::Command::new(BIN)
        .args(["audit", "verify", "--json", "--db"])
        .arg(&scene.db)
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    assert!(verify.status.success());
    let verify: Value = serde_json::from_slice(&verify.stdout).unwrap();
    assert_eq!(verify["ok"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_but_json_rpc_is_written_to_stdout() {
    let scene = scene("stdout", &[]);
    let mut cmd = scene.command("none", &[]);
    cmd.env("RUST_LOG", "trace")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    let mut child = cmd.spawn().expect("spawn the proxy");
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let frames = [
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}),
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
        json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}),
        json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"create_refund","arguments":{"payment_id":"pay_1002","amount":1000}}}),
        json!({"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"create_refund","arguments":{"payment_id":"pay_1002","amount":10.5}}}),
        json!({"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"fetch_balance","arguments":{}}}),
        json!({"jsonrpc":"2.0","id":6,"method":"no/such/method"}),
    ];
    let mut lines = BufReader::new(stdout).lines();
    let mut seen = Vec::new();
    for frame in &frames {
        stdin
            .write_all(format!("{frame}\n").as_bytes())
            .await
            .unwrap();
        stdin.flush().await.unwrap();
        if frame.get("id").is_some() {
            let line = tokio::time::timeout(CALL_TIMEOUT, lines.next_line())
                .await
                .expect("an answer in time")
                .unwrap()
                .expect("a line");
            seen.push(line);
        }
    }
    // Unreadable frames are answered, not dropped: rmcp alone would leave the agent waiting.
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"create_refund","arguments":{}{}}}}}"#,
        "[".repeat(300),
        "]".repeat(300)
    );
    let mut errors = Vec::new();
    for raw in [
        deep.as_str(),
        "not json",
        r#"{"jsonrpc":"2.0","id":8,"nethod":"x"}"#,
    ] {
        stdin
            .write_all(format!("{raw}\n").as_bytes())
            .await
            .unwrap();
        stdin.flush().await.unwrap();
        let line = tokio::time::timeout(CALL_TIMEOUT, lines.next_line())
            .await
            .expect("an unreadable frame is answered in time")
            .unwrap()
            .expect("a line");
        errors.push(serde_json::from_str::<Value>(&line).unwrap());
        seen.push(line);
    }
    assert_eq!(errors[0]["error"]["code"], -32700, "{errors:?}");
    assert_eq!(errors[0]["id"], Value::Null);
    assert_eq!(errors[1]["error"]["code"], -32700, "{errors:?}");
    assert_eq!(errors[2]["error"]["code"], -32600, "{errors:?}");
    assert_eq!(errors[2]["id"], 8);
    drop(stdin);
    while let Ok(Some(line)) = tokio::time::timeout(CALL_TIMEOUT, lines.next_line())
        .await
        .expect("stdout closes")
    {
        seen.push(line);
    }
    let _ = child.wait().await;
    assert!(seen.len() >= 6, "{seen:?}");
    for line in &seen {
        let value: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
        assert_eq!(value["jsonrpc"], "2.0", "{line}");
    }
    let by_id = |id: u64| {
        seen.iter()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .find(|v| v["id"] == id)
            .unwrap_or_else(|| panic!("no answer {id}"))
    };
    assert_eq!(
        by_id(3)["result"]["structuredContent"]["interlock"]["outcome"],
        "APPLIED"
    );
    assert_eq!(by_id(4)["result"]["isError"], true);
    assert_eq!(by_id(5)["result"]["isError"], true);
    assert!(
        by_id(6)["error"].is_object(),
        "an unknown method is a protocol error"
    );
}

#[test]
fn serve_refuses_a_live_key_and_an_expired_mandate() {
    let scene = scene("guards", &[]);
    let out = std::process::Command::new(BIN)
        .arg("serve")
        .arg("--mandate")
        .arg(&scene.mandate)
        .args(["--agent", AGENT, "--"])
        .arg(mock_bin())
        .args(["--seed", "demo"])
        .env("RAZORPAY_KEY_ID", "rzp_live_abc123")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--allow-live"), "{stderr}");
    assert!(stderr.contains("RAZORPAY_KEY_ID"), "{stderr}");

    // The same key reaching the upstream another way Razorpay's server reads it: its own
    // `--key` argument, or its config file in the home directory. `approve` sends money too.
    let home = scene.dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join(".razorpay-mcp-server.yaml"),
        "razorpay_key_id: rzp_live_fromfile\n",
    )
    .unwrap();
    let empty_home = scene.dir.join("empty-home");
    std::fs::create_dir_all(&empty_home).unwrap();
    let sik = "A".repeat(32);
    let cases: [(&std::path::Path, Vec<std::ffi::OsString>, &str); 3] = [
        (
            &empty_home,
            vec![
                "serve".into(),
                "--mandate".into(),
                scene.mandate.clone().into(),
                "--agent".into(),
                AGENT.into(),
                "--".into(),
                mock_bin().into(),
                "--key".into(),
                "rzp_live_fromargs".into(),
            ],
            "command line (word 3)",
        ),
        (
            &home,
            vec![
                "serve".into(),
                "--mandate".into(),
                scene.mandate.clone().into(),
                "--agent".into(),
                AGENT.into(),
                "--".into(),
                mock_bin().into(),
            ],
            ".razorpay-mcp-server.yaml",
        ),
        (
            &home,
            vec![
                "approve".into(),
                sik.clone().into(),
                "--mandate".into(),
                scene.mandate.clone().into(),
                "--by".into(),
                "ops".into(),
                "--why".into(),
                "checked".into(),
                "--".into(),
                mock_bin().into(),
            ],
            ".razorpay-mcp-server.yaml",
        ),
    ];
    for (home, args, source) in cases {
        let out = std::process::Command::new(BIN)
            .args(&args)
            .env("HOME", home)
            .env_remove("RAZORPAY_KEY_ID")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains("--allow-live") && stderr.contains(source),
            "{args:?}: {stderr}"
        );
    }

    // With --allow-live it starts and answers initialize.
    let mut live = std::process::Command::new(BIN)
        .args(scene.serve_args("none", &["--allow-live"]))
        .env("RAZORPAY_KEY_ID", "rzp_live_abc123")
        .env("RUST_LOG", "error")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = live.stdin.take().unwrap();
    std::io::Write::write_all(
        &mut stdin,
        br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}
"#,
    )
    .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(live.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    drop(stdin);
    let answer: Value = serde_json::from_str(&line).expect("an initialize answer");
    assert_eq!(
        answer["result"]["serverInfo"]["name"], "interlock",
        "{line}"
    );
    assert!(live.wait().unwrap().success());

    let text = std::fs::read_to_string(&scene.mandate).unwrap();
    let expired = scene.dir.join("expired.yaml");
    std::fs::write(
        &expired,
        text.replace("expires_at: 2000000000000", "expires_at: 1700000000001"),
    )
    .unwrap();
    let out = std::process::Command::new(BIN)
        .arg("serve")
        .arg("--mandate")
        .arg(&expired)
        .args(["--agent", AGENT, "--"])
        .arg(mock_bin())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("expired"), "{stderr}");
    assert!(!scene.dir.join("expired.ledger.db").exists());

    let out = std::process::Command::new(BIN)
        .arg("serve")
        .arg("--mandate")
        .arg(&scene.mandate)
        .arg("--")
        .arg(mock_bin())
        .env_remove("INTERLOCK_AGENT_ID")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "a missing --agent is a usage error"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("--agent"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_upstream_is_unavailable_until_it_restarts_then_its_last_call_is_reconciled() {
    let scene = scene("conn-reset", &[]);
    // The upstream is the mock behind a shell that refuses to start while `down` exists: the
    // first money call is applied and the mock exits without answering (`conn_reset@1`); its
    // restarts then fail until `down` is removed.
    let down = scene.dir.join("down");
    let mut args = scene.serve_args("conn_reset@1", &["--reconcile-every-ms", "200"]);
    let at = args.iter().position(|a| a == "--").expect("--") + 1;
    let mock: Vec<String> = args
        .split_off(at)
        .iter()
        .map(|a| format!("'{}'", a.to_string_lossy()))
        .collect();
    args.extend([
        "sh".into(),
        "-c".into(),
        format!(
            "if [ -e '{}' ]; then exit 1; fi; exec {}",
            down.display(),
            mock.join(" ")
        )
        .into(),
    ]);
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.args(args)
        .env("RUST_LOG", "interlock=info,warn")
        .env_remove("RAZORPAY_KEY_ID");
    let proxy = connect(cmd).await;
    std::fs::write(&down, b"").unwrap();
    let first = proxy.refund("pay_1002", 4_321).await;
    let info = block(&first);
    assert_eq!(first.is_error, Some(true));
    assert_eq!(info["outcome"], "UNKNOWN", "{info}");
    // Down: every call is told to retry, and nothing is sent anywhere.
    for _ in 0..3 {
        let again = proxy.refund("pay_1002", 4_321).await;
        let info = block(&again);
        assert_eq!(info["outcome"], "UNAVAILABLE", "{info}");
        assert_eq!(info["reason_code"], "UPSTREAM_UNAVAILABLE", "{info}");
        assert_eq!(info["retryable"], true, "{info}");
        assert_eq!(info["sik"], Value::Null, "{info}");
        let text = text_of(&again);
        assert!(
            text.contains("being restarted") && text.contains("retry"),
            "{text}"
        );
        let read = proxy
            .call("fetch_payment", json!({"payment_id": "pay_1002"}))
            .await;
        assert_eq!(block(&read)["reason_code"], "UPSTREAM_UNAVAILABLE");
    }
    std::fs::remove_file(&down).unwrap();
    // Up again within the backoff's bound: the reconciler settles the call, never resending it.
    let deadline = Instant::now() + Duration::from_secs(30);
    let replay = loop {
        let again = proxy.refund("pay_1002", 4_321).await;
        let info = block(&again);
        match info["outcome"].as_str().unwrap() {
            "APPLIED" => break info,
            "UNAVAILABLE" | "IN_PROGRESS" | "UNKNOWN" => {}
            other => panic!("{other}: {info}"),
        }
        assert!(Instant::now() < deadline, "not reconciled in time: {info}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(replay["reason_code"], "IDEMPOTENT_REPLAY", "{replay}");
    let payment = proxy
        .call("fetch_payment", json!({"payment_id": "pay_1002"}))
        .await;
    assert_ne!(payment.is_error, Some(true), "{}", text_of(&payment));
    proxy.close().await;
    assert_eq!(scene.stamped_refunds_of("pay_1002").len(), 1);
    assert_eq!(scene.inspect()["call_counters"]["money_calls"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_that_outlives_the_call_bound_is_unavailable_and_retryable() {
    let scene = scene("slow-read", &[]);
    let proxy = scene
        .proxy("slow=3000@1", &["--call-timeout-ms", "1000"])
        .await;
    let started = Instant::now();
    let slow = proxy
        .call("fetch_payment", json!({"payment_id": "pay_1002"}))
        .await;
    let info = block(&slow);
    assert_eq!(slow.is_error, Some(true));
    assert_eq!(info["reason_code"], "UPSTREAM_UNAVAILABLE", "{info}");
    assert_eq!(info["retryable"], true);
    assert!(text_of(&slow).contains("did not answer in time"), "{info}");
    assert!(
        started.elapsed() < Duration::from_millis(2_900),
        "bounded by the call timeout"
    );
    let again = proxy
        .call("fetch_payment", json!({"payment_id": "pay_1002"}))
        .await;
    assert_ne!(again.is_error, Some(true), "{}", text_of(&again));
    proxy.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tool_call_is_one_decision_line_on_stderr() {
    let scene = scene("decision-log", &[]);
    let log = scene.dir.join("stderr.log");
    let proxy = connect_with_stderr(
        scene.command("none", &[]),
        std::fs::File::create(&log).unwrap().into(),
    )
    .await;
    let applied = proxy.refund("pay_1002", 10_000).await;
    let sik = block(&applied)["sik"].as_str().unwrap().to_owned();
    proxy.refund("pay_1002", 10_000).await;
    proxy.refund("pay_1003", 250_000).await;
    proxy
        .call(
            "create_refund",
            json!({"payment_id": "pay_1002", "amount": 1.5}),
        )
        .await;
    proxy.call("fetch_balance", json!({})).await;
    proxy
        .call("fetch_payment", json!({"payment_id": "pay_1002"}))
        .await;
    proxy.close().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let decisions = loop {
        let text = std::fs::read_to_string(&log).unwrap();
        let decisions: Vec<String> = text
            .lines()
            .filter(|l| l.contains(" decision "))
            .map(str::to_owned)
            .collect();
        if decisions.len() >= 6 || Instant::now() > deadline {
            break decisions;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(decisions.len(), 6, "{decisions:#?}");
    for line in &decisions {
        for field in ["sik=", "tool=", "verdict=", "reason=", "latency_ms="] {
            assert!(line.contains(field), "{field} missing: {line}");
        }
    }
    let expect = [
        ("APPLIED", "APPLIED"),
        ("APPLIED", "IDEMPOTENT_REPLAY"),
        ("REFUSED", "REFUND_EXCEEDS_REFUNDABLE"),
        ("REFUSED", "ARGUMENTS_INVALID"),
        ("REFUSED", "TOOL_NOT_GRANTED"),
        ("FORWARDED", "-"),
    ];
    for ((verdict, reason), line) in expect.iter().zip(&decisions) {
        assert!(
            line.contains(&format!("verdict={verdict} "))
                && line.contains(&format!("reason={reason} ")),
            "{verdict}/{reason}: {line}"
        );
    }
    assert!(
        decisions[0].contains(&format!("sik={sik} ")),
        "{}",
        decisions[0]
    );
    assert!(
        decisions[0].contains("tool=create_refund"),
        "{}",
        decisions[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_takes_its_settings_from_the_environment_and_names_a_missing_one() {
    let scene = scene("env", &[]);
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.args(["serve", "--"])
        .arg(mock_bin())
        .arg("--journal")
        .arg(&scene.journal)
        .args(["--seed", "demo", "--log-level", "error"])
        .env("INTERLOCK_MANDATE", &scene.mandate)
        .env("INTERLOCK_AGENT_ID", AGENT)
        .env("INTERLOCK_CALL_TIMEOUT_MS", "5000")
        .env("INTERLOCK_RECONCILE_EVERY_MS", "500")
        .env_remove("INTERLOCK_DB_PATH")
        .env("RUST_LOG", "error")
        .env_remove("RAZORPAY_KEY_ID");
    let proxy = connect(cmd).await;
    let result = proxy.refund("pay_1002", 1_000).await;
    assert_eq!(block(&result)["outcome"], "APPLIED", "{}", text_of(&result));
    proxy.close().await;
    // Without --db or INTERLOCK_DB_PATH the ledger sits beside the mandate.
    assert!(scene.dir.join("mandate.ledger.db").exists());
    assert!(!scene.db.exists());

    for (missing, env) in [
        ("--mandate", "INTERLOCK_MANDATE"),
        ("--agent", "INTERLOCK_AGENT_ID"),
    ] {
        let mut cmd = std::process::Command::new(BIN);
        cmd.args(["serve", "--"])
            .arg(mock_bin())
            .env("INTERLOCK_MANDATE", &scene.mandate)
            .env("INTERLOCK_AGENT_ID", AGENT)
            .env_remove(env)
            .stdin(std::process::Stdio::null());
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{missing}");
        assert!(out.stdout.is_empty());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(missing), "{missing}: {stderr}");
    }
    let out = std::process::Command::new(BIN)
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for env in [
        "INTERLOCK_MANDATE",
        "INTERLOCK_DB_PATH",
        "INTERLOCK_AGENT_ID",
        "INTERLOCK_CALL_TIMEOUT_MS",
        "INTERLOCK_ALLOW_LIVE",
        "INTERLOCK_LEASE_TTL_MS",
        "INTERLOCK_RECONCILE_EVERY_MS",
    ] {
        assert!(help.contains(env), "serve --help names {env}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_arguments_get_clear_refusals_and_leave_the_ledger_unchanged() {
    let scene = scene("hostile", &[]);
    let proxy = scene.proxy("none", &[]).await;
    let mut nested = json!(1);
    // 100, not 200: past serde_json's recursion limit (128) the frame guard answers -32700
    // before anything is parsed (`nothing_but_json_rpc_is_written_to_stdout`).
    for _ in 0..100 {
        nested = json!({ "n": nested });
    }
    let huge = "x".repeat(64 * 1024);
    let cases = [
        (
            json!({"payment_id": "pay_1002", "amount": 1000, "notes": {"big": huge}}),
            "bytes",
        ),
        (
            json!({"payment_id": "pay_1002", "amount": 1000, "receipt": "mine"}),
            "receipt",
        ),
        (
            json!({"payment_id": "pay_1002", "amount": 1000, "notes": {"interlock_sik": "x"}}),
            "interlock_sik",
        ),
        (
            json!({"payment_id": "pay_1002 OR 1=1", "amount": 1000}),
            "payment_id",
        ),
        (json!({"amount": 1000}), "payment_id is required"),
    ];
    for (args, expected) in cases {
        let result = proxy.call("create_refund", args).await;
        assert_eq!(result.is_error, Some(true));
        let text = text_of(&result);
        assert!(text.contains(expected), "{expected}: {text}");
        assert_eq!(block(&result)["sik"], Value::Null);
    }
    // Other arguments are not checked by Interlock: a nested `speed` reaches the rail, which
    // refuses it (BAD_REQUEST_ERROR); the intent is recorded as rejected, nothing moved.
    let result = proxy
        .call(
            "create_refund",
            json!({"payment_id": "pay_1002", "amount": 1000, "speed": nested}),
        )
        .await;
    assert_eq!(result.is_error, Some(true));
    assert_eq!(
        block(&result)["outcome"],
        "REJECTED",
        "{}",
        text_of(&result)
    );
    assert!(text_of(&result).contains("BAD_REQUEST_ERROR"));
    // Unicode in the distinct reason is accepted as text, and makes its own intent.
    let result = proxy
        .call(
            "create_refund",
            json!({"payment_id": "pay_1002", "amount": 1000,
                "interlock_distinct_reason": "レビュー後の返金 ✓"}),
        )
        .await;
    let info = block(&result);
    assert_eq!(info["outcome"], "APPLIED", "{info}");
    proxy.close().await;
    let (code, stdout, _) = interlock(&[
        std::ffi::OsStr::new("ledger"),
        std::ffi::OsStr::new("--db"),
        scene.db.as_os_str(),
        std::ffi::OsStr::new("--json"),
    ]);
    assert_eq!(code, 0);
    let rows: Vec<Value> = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        rows.len(),
        2,
        "only the rail-rejected and the unicode refunds made intents: {rows:?}"
    );
    assert_eq!(scene.stamped_refunds_of("pay_1002").len(), 1);
    let (code, shown, _) = interlock(&[
        std::ffi::OsStr::new("ledger"),
        std::ffi::OsStr::new("--db"),
        scene.db.as_os_str(),
        std::ffi::OsStr::new("--json"),
        std::ffi::OsStr::new("show"),
        std::ffi::OsStr::new(info["sik"].as_str().unwrap()),
    ]);
    assert_eq!(code, 0);
    assert!(
        shown.contains("レビュー後の返金 ✓"),
        "the distinct reason is kept exactly: {shown}"
    );
}

/// `interlock token` and the HTTP flags: the token on stdout alone and its hash in the entry;
/// `--listen` without an agents file, beside `--mandate`, or on a non-loopback address without
/// `--allow-remote` is refused before anything starts, and says why.
#[test]
fn http_mode_is_configured_by_token_and_agents_file_and_refuses_what_is_missing() {
    let scene = scene("http-cli", &[]);
    let out = std::process::Command::new(BIN)
        .args(["token", "--agent", AGENT, "--mandate"])
        .arg(&scene.mandate)
        .output()
        .unwrap();
    assert!(out.status.success());
    let token = String::from_utf8(out.stdout).unwrap();
    let token = token.trim();
    assert!(token.starts_with("ilk_") && !token.contains(char::is_whitespace));
    let entry = String::from_utf8_lossy(&out.stderr);
    let hash = interlock_spec::hash::sha256_hex(token.as_bytes());
    assert!(entry.contains(&format!("token_sha256: {hash}")), "{entry}");
    assert!(entry.contains(&format!("- id: {AGENT}")), "{entry}");

    let agents = scene.dir.join("agents.yaml");
    std::fs::write(
        &agents,
        format!("agents:\n  - id: {AGENT}\n    mandate: mandate.yaml\n    token_sha256: {hash}\n"),
    )
    .unwrap();
    let serve = |args: &[&str]| {
        let out = std::process::Command::new(BIN)
            .arg("serve")
            .args(args)
            .arg("--")
            .arg(mock_bin())
            .env_remove("INTERLOCK_MANDATE")
            .env_remove("INTERLOCK_AGENT_ID")
            .env_remove("INTERLOCK_AGENTS")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(out.stdout.is_empty());
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let agents = agents.to_str().unwrap();
    let mandate = scene.mandate.to_str().unwrap();
    let (code, stderr) = serve(&["--listen", "127.0.0.1:0"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--agents"), "{stderr}");
    let (code, stderr) = serve(&[
        "--listen",
        "127.0.0.1:0",
        "--agents",
        agents,
        "--mandate",
        mandate,
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--mandate"), "{stderr}");
    let (code, stderr) = serve(&["--listen", "0.0.0.0:0", "--agents", agents]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("--allow-remote"), "{stderr}");
    assert!(
        !scene.dir.join("agents.ledger.db").exists(),
        "nothing started"
    );
    std::fs::write(scene.dir.join("bad.yaml"), "agents:\n  - id: x\n").unwrap();
    let bad = scene.dir.join("bad.yaml");
    let (code, stderr) = serve(&["--listen", "127.0.0.1:0", "--agents", bad.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("bad.yaml") && stderr.contains("mandate"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_exits_in_every_money_call_never_gets_one_twice() {
    // Every money call is applied and then the mock exits without answering (`conn_reset`, no
    // `@`): the upstream dies mid-call in a loop, and is restarted each time.
    let scene = scene("conn-reset-loop", &[]);
    let proxy = scene
        .proxy("conn_reset", &["--reconcile-every-ms", "200"])
        .await;
    let payments = ["pay_1002", "pay_1003", "pay_1005"];
    let deadline = Instant::now() + Duration::from_secs(60);
    for payment in payments {
        // The first answer that is not "the upstream is restarting" is the ambiguous call.
        loop {
            let first = proxy.refund(payment, 1_000).await;
            let info = block(&first);
            match info["outcome"].as_str().unwrap() {
                "UNKNOWN" => break,
                "UNAVAILABLE" => assert_eq!(info["retryable"], true, "{info}"),
                other => panic!("{payment}: {other}: {info}"),
            }
            assert!(Instant::now() < deadline, "{payment}: no call went out");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // Each is reconciled from the rail, never resent; the agent's retry learns the refund.
    for payment in payments {
        loop {
            let again = proxy.refund(payment, 1_000).await;
            let info = block(&again);
            match info["outcome"].as_str().unwrap() {
                "APPLIED" => {
                    assert_eq!(info["reason_code"], "IDEMPOTENT_REPLAY", "{info}");
                    break;
                }
                "UNAVAILABLE" | "IN_PROGRESS" | "UNKNOWN" => {}
                other => panic!("{payment}: {other}: {info}"),
            }
            assert!(
                Instant::now() < deadline,
                "{payment} not reconciled: {info}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let read = proxy
        .call("fetch_payment", json!({"payment_id": "pay_1002"}))
        .await;
    assert_ne!(read.is_error, Some(true), "{}", text_of(&read));
    proxy.close().await;
    for payment in payments {
        assert_eq!(scene.stamped_refunds_of(payment).len(), 1, "{payment}");
    }
    assert_eq!(scene.inspect()["call_counters"]["money_calls"], 3);
}
