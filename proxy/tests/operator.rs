//! The operator's commands against a live proxy's ledger: a held settlement approved with
//! `interlock approve`, another rejected with `interlock reject`, both seen by `ledger list`.

mod common;

use std::ffi::OsStr;

use common::*;
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_settlements_are_approved_or_rejected_by_a_human() {
    let scene = scene("held", &[]);
    // The first two reads (the balance for each settlement) outlive the call bound: the
    // referent is unresolvable and the grant says hold.
    let proxy = scene
        .proxy("slow=2500@1-2", &["--call-timeout-ms", "1000"])
        .await;
    let settle = |amount: u64| json!({"amount": amount, "description": "payout"});
    let first = proxy
        .call("create_instant_settlement", settle(10_000))
        .await;
    let held = block(&first);
    assert_eq!(first.is_error, Some(true));
    assert_eq!(held["outcome"], "HELD", "{held}");
    assert_eq!(held["reason_code"], "REFERENT_UNRESOLVABLE_HELD", "{held}");
    let second = proxy
        .call("create_instant_settlement", settle(20_000))
        .await;
    let other = block(&second);
    assert_eq!(other["outcome"], "HELD", "{other}");
    let sik = held["sik"].as_str().unwrap().to_owned();
    let other_sik = other["sik"].as_str().unwrap().to_owned();

    let mock = mock_bin().as_os_str().to_owned();
    let mut approve: Vec<&OsStr> = vec![
        OsStr::new("approve"),
        OsStr::new(&sik),
        OsStr::new("--mandate"),
        scene.mandate.as_os_str(),
        OsStr::new("--db"),
        scene.db.as_os_str(),
        OsStr::new("--by"),
        OsStr::new("ops@example.com"),
        OsStr::new("--why"),
        OsStr::new("the balance was checked by hand"),
        OsStr::new("--json"),
        OsStr::new("--"),
        &mock,
        OsStr::new("--journal"),
        scene.journal.as_os_str(),
    ];
    approve.extend(["--seed", "demo", "--log-level", "error"].map(OsStr::new));
    let (code, stdout, stderr) = interlock(&approve);
    assert_eq!(code, 0, "{stdout} {stderr}");
    let approved: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(approved["outcome"], "APPLIED", "{approved}");
    let entity = approved["rail_entity_id"].as_str().unwrap().to_owned();

    let reject = [
        OsStr::new("reject"),
        OsStr::new(&other_sik),
        OsStr::new("--mandate"),
        scene.mandate.as_os_str(),
        OsStr::new("--db"),
        scene.db.as_os_str(),
        OsStr::new("--by"),
        OsStr::new("ops@example.com"),
        OsStr::new("--why"),
        OsStr::new("not needed"),
    ];
    let (code, stdout, stderr) = interlock(&reject);
    assert_eq!(code, 0, "{stdout} {stderr}");

    // The agent asking again sees each decision.
    let again = proxy
        .call("create_instant_settlement", settle(10_000))
        .await;
    assert_eq!(block(&again)["reason_code"], "IDEMPOTENT_REPLAY");
    assert_eq!(block(&again)["rail_entity_id"], entity.as_str());
    let refused = proxy
        .call("create_instant_settlement", settle(20_000))
        .await;
    assert_eq!(refused.is_error, Some(true));
    assert_eq!(block(&refused)["reason_code"], "PREVIOUSLY_BLOCKED");
    proxy.close().await;

    let (code, stdout, _) = interlock(&[
        OsStr::new("ledger"),
        OsStr::new("--db"),
        scene.db.as_os_str(),
        OsStr::new("list"),
        OsStr::new("--json"),
    ]);
    assert_eq!(code, 0);
    let rows: Vec<Value> = serde_json::from_str(&stdout).unwrap();
    let state_of = |s: &str| {
        rows.iter()
            .find(|r| r["sik"] == s)
            .map(|r| r["state"].clone())
            .unwrap()
    };
    assert_eq!(state_of(&sik), "APPLIED");
    assert_eq!(state_of(&other_sik), "BLOCKED");
    let settlements = scene.inspect()["settlements"].as_array().unwrap().clone();
    assert_eq!(settlements.len(), 1);
    assert_eq!(settlements[0]["id"], entity.as_str());

    // A second approval of the same intent is refused (exit 1), and nothing moves.
    let (code, _, stderr) = interlock(&approve);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(scene.inspect()["settlements"].as_array().unwrap().len(), 1);
}

#[test]
fn check_summarises_a_mandate_and_refuses_unknown_fields() {
    let scene = scene("check", &[]);
    let (code, stdout, _) = interlock(&[
        OsStr::new("check"),
        OsStr::new("--json"),
        OsStr::new("--mandate"),
        scene.mandate.as_os_str(),
    ]);
    assert_eq!(code, 0);
    let summary: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary["ok"], true);
    assert_eq!(summary["mandate_id"], "mnd_test");
    let text = std::fs::read_to_string(&scene.mandate).unwrap();
    let bad = scene.dir.join("bad.yaml");
    std::fs::write(&bad, format!("{text}surprise: 1\n")).unwrap();
    let (code, stdout, stderr) = interlock(&[
        OsStr::new("check"),
        OsStr::new("--mandate"),
        bad.as_os_str(),
    ]);
    assert_eq!(code, 1);
    assert!(stdout.is_empty());
    assert!(stderr.contains("surprise"), "{stderr}");
    let (code, _, _) = interlock(&[OsStr::new("check")]);
    assert_eq!(code, 2, "a missing --mandate is a usage error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pin_write_repairs_drifted_pins_and_keeps_the_rest_of_the_file() {
    let scene = scene(
        "pin-write",
        &[
            "fetch_payment",
            "create_refund",
            "create_instant_settlement",
        ],
    );
    let before = std::fs::read_to_string(&scene.mandate).unwrap();
    let mock = mock_bin().as_os_str().to_owned();
    let (code, stdout, stderr) = interlock(&[
        OsStr::new("pin"),
        OsStr::new("--mandate"),
        scene.mandate.as_os_str(),
        OsStr::new("--write"),
        OsStr::new("--json"),
        OsStr::new("--"),
        &mock,
        OsStr::new("--seed"),
        OsStr::new("demo"),
        OsStr::new("--log-level"),
        OsStr::new("error"),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let out: Value = serde_json::from_str(&stdout).unwrap();
    let pinned: Vec<&String> = out["tools"].as_object().unwrap().keys().collect();
    assert_eq!(pinned.len(), 3, "only the granted tools: {pinned:?}");
    let after = std::fs::read_to_string(&scene.mandate).unwrap();
    assert!(!after.contains(&"0".repeat(64)));
    let head = |t: &str| t[..t.find("provenance:").unwrap()].to_owned();
    assert_eq!(head(&before), head(&after), "the rest of the file is kept");
    let proxy = scene.proxy("none", &[]).await;
    assert_eq!(proxy.tool_names().await.len(), 3);
    proxy.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_settles_an_unknown_outcome_from_the_command_line() {
    let scene = scene("reconcile-cli", &[]);
    let proxy = scene
        .proxy(
            "timeout_after_apply@1",
            &[
                "--call-timeout-ms",
                "1000",
                "--reconcile-every-ms",
                "3600000",
            ],
        )
        .await;
    let first = proxy.refund("pay_1002", 5_555).await;
    let info = block(&first);
    assert_eq!(info["outcome"], "UNKNOWN", "{info}");
    let sik = info["sik"].as_str().unwrap().to_owned();
    proxy.close().await;
    let mock = mock_bin().as_os_str().to_owned();
    let args = [
        OsStr::new("reconcile"),
        OsStr::new("--json"),
        OsStr::new("--mandate"),
        scene.mandate.as_os_str(),
        OsStr::new("--db"),
        scene.db.as_os_str(),
        OsStr::new("--"),
        &mock,
        OsStr::new("--journal"),
        scene.journal.as_os_str(),
        OsStr::new("--seed"),
        OsStr::new("demo"),
        OsStr::new("--log-level"),
        OsStr::new("error"),
    ];
    // Due once the rail's lag has passed.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (code, stdout, stderr) = interlock(&args);
        assert_eq!(code, 0, "{stderr}");
        let passes: Vec<Value> = serde_json::from_str(&stdout).unwrap();
        if passes.iter().any(|p| p["sik"] == sik.as_str()) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never due");
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    let (_, stdout, _) = interlock(&[
        OsStr::new("ledger"),
        OsStr::new("--db"),
        scene.db.as_os_str(),
        OsStr::new("show"),
        OsStr::new(&sik),
        OsStr::new("--json"),
    ]);
    let row: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(row["state"], "APPLIED", "{row}");
    assert_eq!(scene.stamped_refunds_of("pay_1002").len(), 1);
}
