//! The Python `mcp` 2.x client (a real MCP peer no one here wrote) against the built binary.
//!
//! The test makes its own venv under `target/` and installs `mcp` from PyPI into it the first
//! time, so `cargo test --workspace` on a fresh machine needs nothing installed by hand beyond
//! `python3` with `venv`. If pip cannot install it, the test fails and says so; it never passes
//! silently.

mod common;
#[path = "common/python_venv.rs"]
mod python_venv;

use std::path::Path;
use std::process::Command;

use common::{BIN, fresh_journal};
use python_venv::{tail, venv_python};

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
