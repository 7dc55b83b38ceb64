//! Runs `tests/loom.rs` under loom from the plain `cargo test --workspace`, so that the README's
//! one test command checks the hand-off too. `--cfg loom` must reach this crate's build alone,
//! so the run builds in `target/loom` (as `scripts/loom.sh` does), beside the workspace's build.

#![cfg(not(loom))]

use std::process::Command;

/// The loom tests `tests/loom.rs` holds: a run that reports fewer did not check them all.
const LOOM_TESTS: usize = 8;

#[test]
fn the_hand_off_holds_under_loom() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .current_dir(root)
        .env("RUSTFLAGS", "--cfg loom")
        .env("CARGO_TARGET_DIR", format!("{root}/target/loom"))
        .args([
            "test",
            "--locked",
            "-p",
            "interlock-group-commit",
            "--release",
        ])
        .args(["--test", "loom"])
        .output()
        .expect("cargo runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the loom tests failed:\n{stdout}\n{stderr}"
    );
    let passed = format!("test result: ok. {LOOM_TESTS} passed");
    assert!(
        stdout.contains(&passed),
        "expected {LOOM_TESTS} loom tests to pass:\n{stdout}"
    );
}
