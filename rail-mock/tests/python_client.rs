//! The Python `mcp` 2.x client (a real MCP peer no one here wrote) against the built binary.
//!
//! The test makes its own venv under `target/` and installs `mcp` from PyPI into it the first
//! time, so `cargo test --workspace` on a fresh machine needs nothing installed by hand beyond
//! `python3` with `venv`. If pip cannot install it, the test fails and says so; it never passes
//! silently.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{BIN, fresh_journal};

/// The requirement installed into the venv.
const MCP_REQUIREMENT: &str = "mcp>=2.3,<3";
/// The interpreter that makes the venv.
const PYTHON: &str = "python3";

fn venv_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("rail-mock-py-venv")
}

fn tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// Whether the venv's Python imports an `mcp` that satisfies [`MCP_REQUIREMENT`].
fn has_mcp(python: &Path) -> bool {
    python.exists()
        && Command::new(python)
            .args([
                "-c",
                "import importlib.metadata as m, sys, mcp\n\
                 v = tuple(int(x) for x in m.version('mcp').split('.')[:2])\n\
                 sys.exit(0 if (2, 3) <= v < (3, 0) else 1)",
            ])
            .status()
            .is_ok_and(|s| s.success())
}

/// The venv's Python, with `mcp` installed.
fn venv_python() -> PathBuf {
    let dir = venv_dir();
    let python = dir.join("bin").join("python");
    if has_mcp(&python) {
        return python;
    }
    let out = Command::new(PYTHON)
        .args(["-m", "venv", "--clear"])
        .arg(&dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {PYTHON} to make a venv: {e}"));
    assert!(
        out.status.success(),
        "{PYTHON} -m venv {} failed (is python3-venv installed?):\n{}",
        dir.display(),
        tail(&out.stderr)
    );
    let out = Command::new(dir.join("bin").join("pip"))
        .args([
            "install",
            "--disable-pip-version-check",
            "--quiet",
            MCP_REQUIREMENT,
        ])
        .output()
        .expect("run the venv's pip");
    assert!(
        out.status.success(),
        "pip could not install {MCP_REQUIREMENT:?} into {} (is PyPI reachable?); this test \
         needs it and does not skip:\n{}",
        dir.display(),
        tail(&out.stderr)
    );
    assert!(
        has_mcp(&python),
        "pip ran but {MCP_REQUIREMENT} does not import"
    );
    python
}

#[test]
fn the_python_mcp_client_lists_fetches_refunds_and_sees_errors() {
    let python = venv_python();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/client_smoke.py");
    let journal = fresh_journal("python");
    let out = Command::new(&python)
        .arg(&script)
        .arg(BIN)
        .arg(&journal)
        .output()
        .expect("run client_smoke.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "client_smoke.py failed:\n{stdout}\n{}",
        tail(&out.stderr)
    );
    assert!(stdout.contains("client_smoke: ok"), "{stdout}");
    eprintln!("{}", stdout.trim());
    let dump = common::inspect(&journal);
    assert_eq!(
        common::refunds_of(&dump, "pay_1002").len(),
        1,
        "the refund is in the journal"
    );
}
