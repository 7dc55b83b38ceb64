//! The operator's commands against a live proxy's ledger: a held settlement approved with
//! `interlock approve`, another rejected with `interlock reject`, both seen by `ledger list`.

mod common;

use std::ffi::OsStr;

use common::*;
use interlock_spec::mandate::Mandate;
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

    // `ledger show` has the approval in the audit log, with who and why, and the rejection too.
    let show = |sik: &str, json: bool| {
        let mut args = vec![
            OsStr::new("ledger"),
            OsStr::new("--db"),
            scene.db.as_os_str(),
            OsStr::new("show"),
            OsStr::new(sik),
        ];
        if json {
            args.push(OsStr::new("--json"));
        }
        let (code, stdout, stderr) = interlock(&args);
        assert_eq!(code, 0, "{stderr}");
        stdout
    };
    let approved_detail: Value = serde_json::from_str(&show(&sik, true)).unwrap();
    let released = approved_detail["audit"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["kind"] == "HOLD_RELEASED")
        .expect("the release is audited");
    let bound = &released["payload_json"]["context"];
    assert_eq!(bound["by"], "ops@example.com");
    assert_eq!(bound["why"], "the balance was checked by hand");
    assert_eq!(bound["sik"], sik.as_str());
    assert_eq!(bound["amount_minor"], 10_000);
    assert_eq!(bound["currency"], "INR");
    assert_eq!(
        bound["mandate_sha256"],
        approved_detail["intent"]["mandate_hash"]
    );
    assert_eq!(approved_detail["intent"]["amount_minor"], 10_000);
    let text = show(&other_sik, false);
    assert!(
        text.contains("HOLD_REJECTED HELD -> BLOCKED [REJECTED] by ops@example.com: not needed"),
        "{text}"
    );

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

#[test]
fn the_profile_is_chosen_by_name_or_file_and_a_bad_one_stops_every_command() {
    let scene = scene("profile", &[]);
    let check = |profile: &OsStr| {
        interlock(&[
            OsStr::new("--profile"),
            profile,
            OsStr::new("check"),
            OsStr::new("--mandate"),
            scene.mandate.as_os_str(),
        ])
    };
    let (code, _, stderr) = check(OsStr::new("razorpay"));
    assert_eq!(code, 0, "{stderr}");
    // A copy of the built-in profile under another name is the same rail.
    let file = scene.dir.join("rail.yaml");
    let text =
        interlock_profile::razorpay::PROFILE_YAML.replace("profile: razorpay", "profile: mine");
    std::fs::write(&file, text).unwrap();
    let (code, _, stderr) = check(file.as_os_str());
    assert_eq!(code, 0, "{stderr}");
    let (code, stdout, stderr) = check(OsStr::new("stripe"));
    assert_eq!((code, stdout.as_str()), (1, ""));
    assert!(
        stderr.contains(
            "--profile: \"stripe\" is neither a built-in profile (razorpay) nor a profile file"
        ),
        "{stderr}"
    );
    // A bad profile stops the command before the mandate is read, naming the path.
    let bad =
        interlock_profile::razorpay::PROFILE_YAML.replace("kind: REFUND #", "kind: SETTLEMENT #");
    std::fs::write(&file, bad).unwrap();
    let (code, _, stderr) = check(file.as_os_str());
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("money[0].subject: a SETTLEMENT tool takes no subject argument"),
        "{stderr}"
    );
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

/// `interlock pin --mandate FILE --write -- mock`: (exit code, stdout, stderr).
fn pin_write(mandate: &std::path::Path) -> (i32, String, String) {
    let mock = mock_bin().as_os_str().to_owned();
    interlock(&[
        OsStr::new("pin"),
        OsStr::new("--mandate"),
        mandate.as_os_str(),
        OsStr::new("--write"),
        OsStr::new("--json"),
        OsStr::new("--"),
        &mock,
        OsStr::new("--seed"),
        OsStr::new("demo"),
        OsStr::new("--log-level"),
        OsStr::new("error"),
    ])
}

#[test]
fn pin_write_fills_in_a_hand_written_mandate_without_complete_provenance() {
    let dir = fresh_dir("pin-hand-written");
    let body = interlock_profile::razorpay::refund_desk(AGENT).yaml();
    assert!(!body.contains("provenance"));
    for (name, provenance) in [
        ("none", ""),
        ("empty", "provenance:\n  pinned_manifests: {}\n"),
        ("no-server", "provenance: {}\n"),
        (
            "blank",
            "provenance:\n  server_id: \"\"\n  manifest_sha256: \"\"\n  pinned_manifests: {}\n",
        ),
    ] {
        let path = dir.join(format!("{name}.yaml"));
        std::fs::write(&path, format!("{body}{provenance}")).unwrap();
        let (code, stdout, stderr) = pin_write(&path);
        assert_eq!(code, 0, "{name}: {stderr}");
        let out: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(out["tools"].as_object().unwrap().len(), 3, "{name}: {out}");
        // The written file validates in full, pins included, and keeps the rest of the text.
        let after = std::fs::read_to_string(&path).unwrap();
        assert!(after.starts_with(&body), "{name}: {after}");
        let mandate = Mandate::parse_yaml(&after).unwrap_or_else(|e| panic!("{name}: {e}"));
        let provenance = mandate.provenance.expect("pinned");
        assert_eq!(provenance.server_id, pins()["server_id"], "{name}");
        assert_eq!(provenance.pinned_manifests.len(), 3, "{name}");
        let (code, _, stderr) = interlock(&[
            OsStr::new("check"),
            OsStr::new("--mandate"),
            path.as_os_str(),
        ]);
        assert_eq!(code, 0, "{name}: {stderr}");
    }

    // Any other problem is still refused, naming the file and the path in it.
    let bad = dir.join("bad.yaml");
    let text = format!("{body}provenance:\n  pinned_manifests: {{}}\n")
        .replace("max_amount_minor: 500000", "max_amount_minor: 50");
    std::fs::write(&bad, &text).unwrap();
    let (code, _, stderr) = pin_write(&bad);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("bad.yaml"), "{stderr}");
    assert!(stderr.contains("scope.grants.create_refund"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(&bad).unwrap(),
        text,
        "left unchanged"
    );
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
        if let Some(pass) = passes.iter().find(|p| p["sik"] == sik.as_str()) {
            assert_eq!(pass["result"], "APPLIED", "{pass}");
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
    // `ledger show`: the intent in full, its decision, its attempt, the finding that settled it
    // and its audit records, for a machine and for a person.
    let detail: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(detail["intent"]["state"], "APPLIED", "{detail}");
    assert_eq!(detail["intent"]["sik"], sik.as_str());
    assert_eq!(detail["intent"]["amount_minor"], 5_555);
    let decisions = detail["decisions"].as_array().unwrap();
    assert_eq!(decisions.len(), 1, "{detail}");
    assert!(
        decisions[0]["gates_json"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["gate"] == "G2" && g["reason_code"] == "VALUE_OK"),
        "{detail}"
    );
    let attempts = detail["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "{detail}");
    assert_eq!(attempts[0]["outcome"], "AMBIGUOUS", "{detail}");
    let findings = detail["reconcile_findings"].as_array().unwrap();
    assert_eq!(findings.last().unwrap()["outcome"], "APPLIED", "{detail}");
    let entity = findings.last().unwrap()["matched_entity_id"].clone();
    assert_eq!(detail["intent"]["rail_entity_id"], entity);
    let kinds: Vec<&str> = detail["audit"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.first(), Some(&"INTENT_PROPOSED"), "{kinds:?}");
    assert!(kinds.contains(&"RAIL_AMBIGUOUS"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"RECONCILE_FOUND_APPLIED"), "{kinds:?}");
    let (code, text, _) = interlock(&[
        OsStr::new("ledger"),
        OsStr::new("--db"),
        scene.db.as_os_str(),
        OsStr::new("show"),
        OsStr::new(&sik),
    ]);
    assert_eq!(code, 0);
    for part in [
        "state APPLIED",
        "decisions (1):",
        "attempts (1):",
        "AMBIGUOUS",
        "reconcile findings (",
        "RECONCILE_FOUND_APPLIED",
        entity.as_str().unwrap(),
    ] {
        assert!(text.contains(part), "{part} missing from:\n{text}");
    }
    assert_eq!(scene.stamped_refunds_of("pay_1002").len(), 1);

    // Settling by hand is only for quarantined intents: refused here, exit 1, nothing changed.
    let (code, _, stderr) = interlock(&[
        OsStr::new("resolve"),
        OsStr::new(&sik),
        OsStr::new("--mandate"),
        scene.mandate.as_os_str(),
        OsStr::new("--db"),
        scene.db.as_os_str(),
        OsStr::new("--by"),
        OsStr::new("ops@example.com"),
        OsStr::new("--not-applied"),
    ]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("cannot resolve"), "{stderr}");
    let (code, _, stderr) = interlock(&[
        OsStr::new("ledger"),
        OsStr::new("--db"),
        scene.db.as_os_str(),
        OsStr::new("show"),
        OsStr::new("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
    ]);
    assert_eq!(code, 1);
    assert!(stderr.contains("no intent"), "{stderr}");
}

#[test]
fn every_command_has_help_and_the_exit_codes_are_stated() {
    let commands: &[&[&str]] = &[
        &[],
        &["init"],
        &["serve"],
        &["check"],
        &["pin"],
        &["ledger"],
        &["ledger", "list"],
        &["ledger", "show"],
        &["audit"],
        &["audit", "verify"],
        &["approve"],
        &["reject"],
        &["resolve"],
        &["reconcile"],
        &["demo"],
    ];
    for command in commands {
        let mut args: Vec<&OsStr> = command.iter().map(OsStr::new).collect();
        args.push(OsStr::new("--help"));
        let (code, stdout, stderr) = interlock(&args);
        assert_eq!(code, 0, "{command:?} --help: {stderr}");
        assert!(stdout.contains("Usage: interlock"), "{command:?}: {stdout}");
    }
    let (_, stdout, _) = interlock(&[OsStr::new("--help")]);
    assert!(stdout.contains("Exit codes: 0 ok; 1 refused or a failed check; 2 usage"));
    // Every command that prints a result has --json.
    for command in [
        "init",
        "check",
        "pin",
        "ledger",
        "approve",
        "reject",
        "resolve",
        "reconcile",
        "demo",
    ] {
        let (_, stdout, _) = interlock(&[OsStr::new(command), OsStr::new("--help")]);
        assert!(stdout.contains("--json"), "{command} --help lacks --json");
    }
    let (_, stdout, _) = interlock(&[
        OsStr::new("audit"),
        OsStr::new("verify"),
        OsStr::new("--help"),
    ]);
    assert!(stdout.contains("--json"));
}
