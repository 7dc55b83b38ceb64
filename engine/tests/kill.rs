//! A kill point armed with `kill` ends its process by SIGKILL, the one signal nothing can catch
//! or clean up after. The matrix counts only that as a landed kill, so a regression to a
//! softer death (an abort, a plain return) would show there as missed kills; this shows it here.

use std::os::unix::process::ExitStatusExt;
use std::process::Command;

/// Set in the child process only: it then fires the kill instead of passing.
const CHILD_ENV: &str = "INTERLOCK_KILL_TEST_CHILD";
const CHILD_TEST: &str = "child_fires_a_kill_point";

/// The child: does nothing in a normal run; with [`CHILD_ENV`] set, fires a kill point.
#[test]
fn child_fires_a_kill_point() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let _ = interlock_engine::executor::killed_at::<()>("test_point", Some("kill"));
    // Not reached: `killed_at` either kills or aborts.
    std::process::exit(0);
}

#[test]
fn a_kill_point_armed_with_kill_ends_the_process_by_sigkill() {
    let exe = std::env::current_exe().expect("the test binary's path");
    let status = Command::new(exe)
        .args([CHILD_TEST, "--exact", "--test-threads", "1"])
        .env(CHILD_ENV, "1")
        .output()
        .expect("the child runs")
        .status;
    assert_eq!(status.signal(), Some(9), "the child ended {status:?}");
}
