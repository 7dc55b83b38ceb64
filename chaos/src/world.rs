//! A trial's files: the rail's seed, the mandate (pinned against the real mock), and the
//! binaries both are run with.

use std::path::{Path, PathBuf};
use std::process::Command;

use interlock_rail_mock::harness::{BIN_NAME, MockCommand};
use serde_json::{Value, json};

/// The payment every refund trial refunds.
pub const PAYMENT: &str = "pay_CHAOS01";
/// The merchant's settleable balance, far above anything a settlement trial settles.
pub const BALANCE: u64 = 1_000_000;
/// The description every settlement carries (the mandate keys settlements on it).
pub const SETTLEMENT_DESCRIPTION: &str = "chaos trial";
/// Its amount, far above anything a trial refunds.
pub const PAYMENT_AMOUNT: u64 = 10_000_000;
/// Seeded refunds on it, so that a list has pages to walk (`deep_pages` shows one per page).
pub const SEEDED_REFUNDS: u64 = 30;
/// Each seeded refund's amount.
pub const SEEDED_REFUND_AMOUNT: u64 = 100;
/// Instant settlements already made from the balance, so that a settlement trial has history
/// too: an earlier settlement for `dup_response` to replay, pages for `deep_pages` to walk.
pub const SEEDED_SETTLEMENTS: u64 = 30;
/// Each seeded settlement's amount.
pub const SEEDED_SETTLEMENT_AMOUNT: u64 = 1_000;
/// The mandate's agent.
pub const AGENT: &str = "agent_chaos";
/// The operator who resolves quarantined intents.
pub const OPERATOR: &str = "chaos_operator";

/// The two binaries a trial runs.
#[derive(Debug, Clone)]
pub struct Bins {
    /// `interlock`, built with the `failpoints` feature.
    pub interlock: PathBuf,
    /// `interlock-rail-mock`.
    pub mock: PathBuf,
}

impl Bins {
    /// The binaries in `dir`, after checking that `interlock` has kill points compiled in (a
    /// build without them would make every kill "not fire" for a reason that is not ours).
    pub fn in_dir(dir: &Path) -> Result<Bins, String> {
        let bins = Bins {
            interlock: dir.join("interlock"),
            mock: dir.join(BIN_NAME),
        };
        for path in [&bins.interlock, &bins.mock] {
            if !path.is_file() {
                return Err(format!("no binary at {}", path.display()));
            }
        }
        let out = Command::new(&bins.interlock)
            .arg("--version")
            .output()
            .map_err(|e| format!("cannot run {}: {e}", bins.interlock.display()))?;
        let version = String::from_utf8_lossy(&out.stdout);
        if !version.trim_end().ends_with("+failpoints") {
            return Err(format!(
                "{} says {:?}: it was built without kill points; build it with `cargo build -p interlock --features interlock/failpoints`",
                bins.interlock.display(),
                version.trim_end()
            ));
        }
        Ok(bins)
    }

    /// Builds both binaries with cargo, from the workspace this crate was built in, into the
    /// target directory `target_profile_dir` belongs to (`target/debug` or `target/release`),
    /// copies them to `<profile>/interlock-chaos-bins/`, puts the plain `interlock` back, and
    /// returns the copies. Cargo keeps the build with kill points apart from the one without
    /// and only swaps which one sits at `<profile>/interlock`, so the swap costs no compile
    /// after the first time; the copies keep a long run safe from a `cargo build` meanwhile.
    pub fn build(target_profile_dir: &Path) -> Result<Bins, String> {
        let release = target_profile_dir
            .file_name()
            .is_some_and(|name| name == "release");
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .ok_or("the chaos crate has no workspace")?;
        let target_dir = target_profile_dir
            .parent()
            .ok_or("the profile directory has no target directory")?;
        let cargo = |features: &[&str]| -> Result<(), String> {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
            let mut build = Command::new(cargo);
            build
                .current_dir(workspace)
                .args(["build", "-q", "--bins", "-p", "interlock", "-p"])
                .arg(BIN_NAME)
                .args(features)
                .arg("--target-dir")
                .arg(target_dir);
            if release {
                build.arg("--release");
            }
            let status = build
                .status()
                .map_err(|e| format!("cannot run cargo: {e}"))?;
            if status.success() {
                Ok(())
            } else {
                Err(format!("building the binaries failed ({status})"))
            }
        };
        cargo(&["--features", "interlock/failpoints"])?;
        let aside = target_profile_dir.join("interlock-chaos-bins");
        std::fs::create_dir_all(&aside)
            .map_err(|e| format!("cannot create {}: {e}", aside.display()))?;
        for name in ["interlock", BIN_NAME] {
            std::fs::copy(target_profile_dir.join(name), aside.join(name))
                .map_err(|e| format!("cannot copy {name} to {}: {e}", aside.display()))?;
        }
        cargo(&[])?;
        Bins::in_dir(&aside)
    }

    /// [`Bins::build`] into the profile directory of the test binary calling it
    /// (`target/<profile>/deps/<test>-…` → `target/<profile>`): the chaos tests' binaries.
    pub fn beside_test() -> Result<Bins, String> {
        let exe = std::env::current_exe().map_err(|e| format!("the test's path: {e}"))?;
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .ok_or("the test binary is not in a target profile directory")?;
        Bins::build(profile_dir)
    }

    /// The pins of the mock's tools, from `interlock pin --json`.
    pub fn pins(&self, seed: &Path) -> Result<Value, String> {
        let out = Command::new(&self.interlock)
            .args(["pin", "--json", "--"])
            .args(
                MockCommand::new(&self.mock)
                    .seed(seed)
                    .log_level("error")
                    .argv(),
            )
            .env("RUST_LOG", "error")
            .output()
            .map_err(|e| format!("cannot run interlock pin: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "interlock pin failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        serde_json::from_slice(&out.stdout).map_err(|e| format!("pin --json: {e}"))
    }
}

/// The rail's seed: one payment with [`SEEDED_REFUNDS`] small refunds already on it, and
/// [`SEEDED_SETTLEMENTS`] earlier settlements (for either action, earlier entities for
/// `dup_response` to replay and pages for `deep_pages` to walk).
pub fn seed() -> Value {
    let refunds: Vec<Value> = (1..=SEEDED_REFUNDS)
        .map(|n| {
            json!({
                "id": format!("rfnd_SEED{n:06}"),
                "payment_id": PAYMENT,
                "amount": SEEDED_REFUND_AMOUNT,
                "receipt": format!("seed-{n}"),
            })
        })
        .collect();
    let settlements: Vec<Value> = (1..=SEEDED_SETTLEMENTS)
        .map(|n| {
            json!({
                "id": format!("setlod_SEED{n:06}"),
                "amount_requested": SEEDED_SETTLEMENT_AMOUNT,
                "description": format!("seeded {n}"),
            })
        })
        .collect();
    json!({
        "currency": "INR",
        "balance": BALANCE,
        "payments": [{"id": PAYMENT, "amount": PAYMENT_AMOUNT, "notes": {}}],
        "orders": [],
        "refunds": refunds,
        "settlements": settlements,
    })
}

/// A mandate granting `fetch_payment`, `create_refund` and `create_instant_settlement` (up to
/// 500000 each), pinned; a settlement is keyed on its description, with no time window (each
/// trial has a ledger of its own, and a window boundary mid-trial would make the retry a new
/// settlement).
pub fn mandate(pins: &Value) -> Result<String, String> {
    Ok(interlock_profile::razorpay::refund_desk(AGENT)
        .mandate_id("mnd_chaos")
        .merchant_id("acc_CHAOS00001")
        .purpose("Refund customers (chaos matrix)")
        .expires_at(4_000_000_000_000)
        .max_amount("create_instant_settlement", 500_000)
        .on_unresolvable("create_instant_settlement", None)
        .idempotency("create_instant_settlement", &["description"], None)
        .pinned_by(pins)?
        .yaml())
}

/// The soak's mandate: the chaos mandate with a window and a fee budget that a day of load
/// stays within (the soak tests exactly-once under load, not the limits).
pub fn soak_mandate(pins: &Value) -> Result<String, String> {
    Ok(interlock_profile::razorpay::refund_desk(AGENT)
        .mandate_id("mnd_soak")
        .merchant_id("acc_CHAOS00001")
        .purpose("Refund customers (soak)")
        .expires_at(4_000_000_000_000)
        .max_amount("create_instant_settlement", 500_000)
        .on_unresolvable("create_instant_settlement", None)
        .idempotency("create_instant_settlement", &["description"], None)
        .window(10_000_000, 1_000_000_000_000)
        .fee_budget(1_000_000_000_000)
        .pinned_by(pins)?
        .yaml())
}
