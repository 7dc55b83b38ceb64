//! The Python `mcp` 2.x client's venv, shared by the tests that drive our binaries with it
//! (rail-mock's own, and the proxy's through `#[path]`): made under the building crate's
//! `target/tmp/` the first time, with `mcp` installed from PyPI. If pip cannot install it, the
//! calling test fails and says so; it never passes silently.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The venv's directory name under `CARGO_TARGET_TMPDIR`.
const VENV_NAME: &str = "py-mcp-venv";
/// The requirement installed into the venv.
const MCP_REQUIREMENT: &str = "mcp>=2.3,<3";
/// The interpreter that makes the venv.
const PYTHON: &str = "python3";

fn venv_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(VENV_NAME)
}

pub fn tail(bytes: &[u8]) -> String {
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

/// The venv's Python, with `mcp` installed. Made once per test binary: tests of one binary run
/// on parallel threads, and two `venv --clear` at once would break each other's venv.
pub fn venv_python() -> PathBuf {
    static PYTHON_PATH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PYTHON_PATH.get_or_init(make_venv).clone()
}

fn make_venv() -> PathBuf {
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
