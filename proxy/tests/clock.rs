//! The wall clock jumps while Interlock serves (issue 23, item 2): the real binary under
//! libfaketime (Debian's `faketime` package, installed here when missing), its offset moved a
//! day forward and back through libfaketime's timestamp file, the mock rail on the real clock.
//! A day-long window must never admit more than its cap within a real day: not in the process
//! that saw the jump, and not in a second process started after it on the same ledger.

mod common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// libfaketime's path, installing Debian's package when it is missing (once per test process:
/// two concurrent `apt-get`s would fight over dpkg's lock).
fn libfaketime() -> &'static Path {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(install_libfaketime);
    Path::new(LIBFAKETIME)
}

fn install_libfaketime() {
    if !Path::new(LIBFAKETIME).exists() {
        let installed = Command::new("apt-get")
            .args(["install", "-y", "-q", "faketime"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status();
        let installed = match installed {
            Ok(status) if status.success() => true,
            // A fresh machine may not have read the package lists yet.
            _ => {
                let _ = Command::new("apt-get").args(["update", "-q"]).status();
                Command::new("apt-get")
                    .args(["install", "-y", "-q", "faketime"])
                    .env("DEBIAN_FRONTEND", "noninteractive")
                    .status()
                    .is_ok_and(|s| s.success())
            }
        };
        assert!(
            installed && Path::new(LIBFAKETIME).exists(),
            "these tests need libfaketime ({LIBFAKETIME}) and could not install Debian's `faketime` package: run `apt-get install faketime` as root"
        );
    }
}

struct Jumps {
    file: PathBuf,
}

impl Jumps {
    /// Moves the faked wall clock to `offset` from the real one (libfaketime's `+1d`, `-1d`).
    fn set(&self, offset: &str) {
        std::fs::write(&self.file, format!("{offset}\n")).expect("write the offset");
    }
}

/// `interlock serve` under libfaketime; the mock rail (its child) on the real clock.
fn serve(scene: &Scene, jumps: &Jumps, mandate: &Path) -> tokio::process::Command {
    let mut args = scene.serve_args("none", &[]);
    let at = args.iter().position(|a| a == "--mandate").unwrap() + 1;
    args[at] = mandate.into();
    let upstream = args.iter().position(|a| a == "--").unwrap() + 1;
    args.splice(
        upstream..upstream,
        ["env".into(), "-u".into(), "LD_PRELOAD".into()],
    );
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.args(args)
        .env("RUST_LOG", "interlock=info,warn")
        .env_remove("RAZORPAY_KEY_ID")
        .env("LD_PRELOAD", libfaketime())
        .env("FAKETIME_TIMESTAMP_FILE", &jumps.file)
        .env("FAKETIME_NO_CACHE", "1")
        // Only the wall clock jumps: the monotonic and boot clocks do not (they cannot).
        .env("DONT_FAKE_MONOTONIC", "1");
    cmd
}

fn outcome(result: &rmcp::model::CallToolResult) -> (String, String) {
    let info = block(result);
    let text = |key: &str| info[key].as_str().unwrap_or_default().to_owned();
    (text("outcome"), text("reason_code"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_day_window_admits_no_more_than_its_cap_when_the_wall_clock_jumps() {
    let scene = scene("clock-jumps", &[]);
    let jumps = Jumps {
        file: scene.dir.join("faketime"),
    };
    jumps.set("+0");
    // Two money calls a day.
    let mandate = scene.dir.join("two-a-day.yaml");
    let template = interlock_profile::razorpay::refund_desk(AGENT)
        .pinned_by(pins())
        .expect("the mock offers every granted tool")
        .window(2, 2_000_000);
    std::fs::write(&mandate, template.yaml()).unwrap();

    let first = connect(serve(&scene, &jumps, &mandate)).await;
    for payment in ["pay_1002", "pay_1003"] {
        let applied = first.refund(payment, 1_000).await;
        assert_eq!(outcome(&applied).0, "APPLIED", "{:?}", block(&applied));
    }
    let third = |label: &'static str, result: rmcp::model::CallToolResult| {
        assert_eq!(
            outcome(&result),
            ("REFUSED".to_owned(), "WINDOW_CALLS_EXCEEDED".to_owned()),
            "{label}: {}",
            block(&result)
        );
    };
    third("no jump", first.refund("pay_1005", 1_000).await);
    jumps.set("+1d");
    third("a day forward", first.refund("pay_1005", 1_000).await);
    jumps.set("-1d");
    third("a day back", first.refund("pay_1005", 1_000).await);
    figure(
        T_WINDOW,
        "third call of a 2-a-day window",
        "WINDOW_CALLS_EXCEEDED with no jump, a day forward, a day back",
    );
    let read = first
        .call(
            "fetch_payment",
            serde_json::json!({"payment_id": "pay_1002"}),
        )
        .await;
    assert_ne!(read.is_error, Some(true), "{}", text_of(&read));
    first.close().await;

    // A process that starts after the jump keeps the ledger's time, not the jumped wall's.
    jumps.set("+1d");
    let second = connect(serve(&scene, &jumps, &mandate)).await;
    third(
        "started a day ahead",
        second.refund("pay_1005", 1_000).await,
    );
    second.close().await;

    let stamped: usize = ["pay_1002", "pay_1003", "pay_1005"]
        .iter()
        .map(|p| scene.stamped_refunds_of(p).len())
        .sum();
    assert_eq!(stamped, 2, "{:?}", scene.inspect()["refunds"]);
    figure(
        T_WINDOW,
        "refunds on the rail (cap 2, five asked, one process started a day ahead)",
        stamped,
    );
    assert_eq!(
        scene.inspect()["call_counters"]["money_calls"],
        Value::from(2)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_lease_survives_a_day_jump_and_a_second_process_sends_nothing() {
    // A settlement (which no rail receipt protects) whose call is on the wire for 6 s: its
    // proxy holds the lease. The wall clock jumps a day forward and a second proxy starts on
    // the same ledger: by wall time the lease expired a day ago; by ledger time it is live.
    let scene = scene("clock-lease", &[]);
    let jumps = Jumps {
        file: scene.dir.join("faketime"),
    };
    jumps.set("+0");
    let mandate = scene.mandate.clone();
    // Every call of its rail takes 6 s: the balance read, then the settlement.
    let mut slow = serve(&scene, &jumps, &mandate);
    let args: Vec<_> = slow.as_std().get_args().map(|a| a.to_owned()).collect();
    let faults = args.iter().position(|a| a == "--faults").unwrap() + 1;
    let mut args = args;
    args[faults] = "slow=6000".into();
    slow = tokio::process::Command::new(BIN);
    slow.args(&args);
    for (key, value) in serve(&scene, &jumps, &mandate).as_std().get_envs() {
        match value {
            Some(value) => slow.env(key, value),
            None => slow.env_remove(key),
        };
    }
    let first = std::sync::Arc::new(connect(slow).await);
    let settle = serde_json::json!({"amount": 10_000, "description": "clock payout"});
    let sending = {
        let first = first.clone();
        let settle = settle.clone();
        tokio::spawn(async move { first.call("create_instant_settlement", settle).await })
    };
    // The read is back at 6 s; the money call is on the wire from then until 12 s.
    tokio::time::sleep(std::time::Duration::from_millis(7_000)).await;
    jumps.set("+1d");
    let second = connect(serve(&scene, &jumps, &mandate)).await;
    let sent = sending.await.unwrap();
    assert_eq!(outcome(&sent).0, "APPLIED", "{}", block(&sent));
    // The agent retries at the second process until it learns the outcome. (Its boot recovery
    // waited for the live lease; by wall time it would have taken the attempt over, found
    // nothing on the rail before the call landed, and let this retry send a second one.)
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let again = second
            .call("create_instant_settlement", settle.clone())
            .await;
        match outcome(&again).0.as_str() {
            "APPLIED" => break,
            "IN_PROGRESS" | "UNKNOWN" => {}
            other => panic!("{other}: {}", block(&again)),
        }
        assert!(std::time::Instant::now() < deadline, "{}", block(&again));
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    second.close().await;
    if let Ok(first) = std::sync::Arc::try_unwrap(first) {
        first.close().await;
    }
    let journal = scene.inspect();
    assert_eq!(
        journal["call_counters"]["money_calls"],
        Value::from(1),
        "{journal}"
    );
    figure(
        T_LEASE,
        "settlement calls on the rail (lease live by ledger time, expired by a day by wall time)",
        journal["call_counters"]["money_calls"].clone(),
    );
}

const T_WINDOW: &str = "wall clock jumps ±1 day under a serving proxy (libfaketime)";
const T_LEASE: &str = "wall clock jumps +1 day while a settlement is on the wire";
