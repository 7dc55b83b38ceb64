//! The ledger's disk fills up, or will not take writes (issue 23, item 1): the real binary with
//! its ledger on a small tmpfs of its own (mounted here; these tests need root, as CI has, and
//! say so when they do not have it). No rail call without a durable record, a clear retryable
//! error while the disk is full, the same action applied exactly once when space returns, and a
//! clear refusal to start on a full or read-only filesystem.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The size of the ledger's filesystem.
const TMPFS_SIZE: &str = "4m";

/// A tmpfs mounted for one test, unmounted when dropped.
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    fn mount(dir: &Path) -> Tmpfs {
        let dir = dir.join("ledger-fs");
        std::fs::create_dir_all(&dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={TMPFS_SIZE}"), "tmpfs"])
            .arg(&dir)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "these tests mount a small tmpfs for the ledger and need root (CI runs as root): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs { dir }
    }

    /// Fills the filesystem with one file, to the last byte it takes.
    fn fill(&self) {
        use std::io::Write;
        let mut filler = std::fs::File::create(self.dir.join("filler")).unwrap();
        let block = vec![0u8; 4096];
        while filler.write_all(&block).is_ok() {}
        let _ = filler.write_all(&[0u8]);
        let _ = filler.sync_all();
    }

    fn free(&self) {
        std::fs::remove_file(self.dir.join("filler")).unwrap();
    }

    fn remount(&self, mode: &str) {
        let status = Command::new("mount")
            .args(["-o", &format!("remount,{mode}")])
            .arg(&self.dir)
            .status()
            .unwrap();
        assert!(status.success(), "remount {mode}");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

/// The scene with its ledger moved onto `fs`.
fn on(scene: &Scene, fs: &Tmpfs) -> Scene {
    Scene {
        db: fs.dir.join("ledger.db"),
        journal: scene.journal.clone(),
        mandate: scene.mandate.clone(),
        dir: scene.dir.clone(),
    }
}

/// Copies the whole WAL into the database and truncates it to 0 bytes, retrying (at most
/// 100 times, 10 ms apart) while another connection holds the checkpoint lock.
fn truncate_wal(db: &Path) {
    let conn = rusqlite::Connection::open(db).unwrap();
    for _ in 0..100 {
        let busy: i64 = conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| row.get(0))
            .unwrap();
        if busy == 0 {
            let wal = db.with_extension("db-wal");
            let len = std::fs::metadata(&wal).map_or(0, |m| m.len());
            assert_eq!(len, 0, "{} is truncated", wal.display());
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!(
        "the WAL of {} stayed busy: it could not be truncated",
        db.display()
    );
}

fn outcome(result: &rmcp::model::CallToolResult) -> String {
    block(result)["outcome"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_sends_nothing_and_the_call_applies_once_when_space_returns() {
    let base = scene("disk-full", &[]);
    let fs = Tmpfs::mount(&base.dir);
    let scene = on(&base, &fs);
    let proxy = scene.proxy("none", &[]).await;
    let warm = proxy.refund("pay_1003", 1_000).await;
    assert_eq!(outcome(&warm), "APPLIED", "{}", block(&warm));

    // The ledger's checkpoint thread copies the WAL into the database, after which the next
    // commit reuses the WAL's space from its start and needs no new byte. Truncating the WAL
    // first (retried while the thread holds the checkpoint lock) means every commit while the
    // disk is full must grow the file, whatever the thread does meanwhile.
    truncate_wal(&scene.db);
    fs.fill();
    figure(
        T_FULL,
        "ledger filesystem",
        format!("tmpfs size={TMPFS_SIZE}, filled to the last byte"),
    );
    for _ in 0..3 {
        let full = proxy.refund("pay_1002", 2_000).await;
        let text = text_of(&full);
        assert_eq!(full.is_error, Some(true), "{full:?}");
        assert_eq!(
            block(&full)["reason_code"],
            "LEDGER_UNAVAILABLE",
            "{full:?}"
        );
        assert_eq!(block(&full)["retryable"], true, "{full:?}");
        assert!(
            text.contains("disk") || text.contains("full"),
            "the agent is told the ledger's disk is full: {text}"
        );
        assert_eq!(
            scene.stamped_refunds_of("pay_1002").len(),
            0,
            "nothing reached the rail without a durable record"
        );
    }
    figure(
        T_FULL,
        "calls while full",
        "3 × LEDGER_UNAVAILABLE (retryable), 0 on the rail",
    );
    fs.free();
    let freed = std::time::Instant::now();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let applied = loop {
        let again = proxy.refund("pay_1002", 2_000).await;
        if outcome(&again) == "APPLIED" {
            break again;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not applied after space returned: {}",
            text_of(&again)
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert_eq!(block(&applied)["outcome"], "APPLIED");
    figure(
        T_FULL,
        "applied after space returned",
        format!("{} ms", freed.elapsed().as_millis()),
    );
    let replay = proxy.refund("pay_1002", 2_000).await;
    assert_eq!(block(&replay)["reason_code"], "IDEMPOTENT_REPLAY");
    proxy.close().await;
    let on_rail = scene.stamped_refunds_of("pay_1002").len();
    assert_eq!(on_rail, 1);
    figure(T_FULL, "refunds on the rail at the end", on_rail);
}

const T_FULL: &str = "disk full under a serving proxy";
const T_START: &str = "start on a read-only or full filesystem";
const T_FSYNC: &str = "fsync fails (EIO) under a serving proxy";

#[test]
fn serve_refuses_to_start_on_a_read_only_or_full_filesystem() {
    let base = scene("disk-ro", &[]);
    let fs = Tmpfs::mount(&base.dir);
    let scene = on(&base, &fs);
    for (label, prepare) in [("read-only", "ro"), ("full", "full")] {
        if prepare == "ro" {
            fs.remount("ro");
        } else {
            fs.remount("rw");
            fs.fill();
        }
        let out = Command::new(BIN)
            .args(scene.serve_args("none", &[]))
            .env("RUST_LOG", "error")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{label}: {stderr}");
        assert!(
            stderr.contains("ledger") && stderr.contains(&fs.dir.display().to_string()),
            "{label}: the refusal names the ledger and where it is: {stderr}"
        );
        assert!(
            stderr.contains(if prepare == "ro" { "read-only" } else { "full" }),
            "{label}: the refusal says why: {stderr}"
        );
        let said = stderr.lines().last().unwrap_or_default().trim().to_owned();
        let code = out.status.code().unwrap_or(-1);
        figure(T_START, label, format!("exit {code}: {said}"));
    }
}

/// A shim that makes every fsync and fdatasync of the process fail with EIO while the file
/// named by `FSYNC_FAIL_IF` exists, built with the machine's C compiler.
fn fsync_shim(dir: &Path) -> PathBuf {
    let source = dir.join("fsync_shim.c");
    let shim = dir.join("fsync_shim.so");
    std::fs::write(
        &source,
        r#"#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>
static int failing(void) {
    const char *flag = getenv("FSYNC_FAIL_IF");
    return flag != NULL && access(flag, F_OK) == 0;
}
int fsync(int fd) {
    if (failing()) { errno = EIO; return -1; }
    int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    return real(fd);
}
int fdatasync(int fd) {
    if (failing()) { errno = EIO; return -1; }
    int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    return real(fd);
}
"#,
    )
    .unwrap();
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&shim)
        .arg(&source)
        .arg("-ldl")
        .output()
        .expect("this test builds an fsync shim with the machine's C compiler (cc)");
    assert!(
        out.status.success(),
        "cc could not build the fsync shim: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    shim
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_fsync_stops_the_process_for_recovery_and_the_call_applies_once_after() {
    let scene = scene("fsync-fails", &[]);
    let shim = fsync_shim(&scene.dir);
    let flag = scene.dir.join("fail-fsync");
    let status = scene.dir.join("exit-status");
    let stderr = scene.dir.join("stderr");
    // `sh` keeps the proxy's exit status; the mock (the proxy's child) fsyncs for real. The
    // failed commit is the deciding one (the intent, its permission and its attempt under this
    // process's lease): its pages reached the WAL though the fsync failed, so the restart finds
    // the attempt and waits out the dead process's lease before it settles it. A short lease
    // keeps that wait short.
    let command = |with_shim: bool| {
        let mut args = scene.serve_args(
            "none",
            &["--lease-ttl-ms", "6000", "--call-timeout-ms", "1000"],
        );
        let upstream = args.iter().position(|a| a == "--").unwrap() + 1;
        args.splice(
            upstream..upstream,
            ["env".into(), "-u".into(), "LD_PRELOAD".into()],
        );
        let mut cmd = tokio::process::Command::new("sh");
        cmd.arg("-c")
            .arg(format!("\"$@\"; echo $? > '{}'", status.display()))
            .arg("sh")
            .arg(BIN)
            .args(args)
            .env("RUST_LOG", "interlock=info,warn")
            .env_remove("RAZORPAY_KEY_ID")
            .env("FSYNC_FAIL_IF", &flag);
        if with_shim {
            cmd.env("LD_PRELOAD", &shim);
        }
        cmd
    };
    let log = std::fs::File::create(&stderr).unwrap();
    let proxy = connect_with_stderr(command(true), log.into()).await;
    let warm = proxy.refund("pay_1003", 1_000).await;
    assert_eq!(outcome(&warm), "APPLIED", "{}", block(&warm));

    std::fs::write(&flag, b"").unwrap();
    let failed = proxy.refund("pay_1002", 2_000).await;
    let info = block(&failed);
    assert_eq!(info["reason_code"], "LEDGER_UNAVAILABLE", "{info}");
    assert_eq!(info["retryable"], true, "{info}");
    assert!(
        text_of(&failed).contains("restarts into recovery"),
        "{}",
        text_of(&failed)
    );
    assert_eq!(scene.stamped_refunds_of("pay_1002").len(), 0);
    figure(
        T_FSYNC,
        "the failed call",
        "LEDGER_UNAVAILABLE (retryable), 0 on the rail",
    );
    // The process stops on its own, with its own status, rather than retry the fsync.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !status.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the proxy did not stop"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let code = std::fs::read_to_string(&status).unwrap();
    assert_eq!(code.trim(), "75", "EX_TEMPFAIL");
    figure(
        T_FSYNC,
        "the process",
        "stopped by itself, exit 75 (EX_TEMPFAIL), to restart into recovery",
    );
    let logged = std::fs::read_to_string(&stderr).unwrap();
    assert!(logged.contains("restart into recovery"), "{logged}");
    drop(proxy);

    // The disk is well again: a new process recovers, and the agent's retry applies once.
    std::fs::remove_file(&flag).unwrap();
    std::fs::remove_file(&status).unwrap();
    let proxy = connect(command(true)).await;
    let applied = proxy.refund("pay_1002", 2_000).await;
    assert_eq!(outcome(&applied), "APPLIED", "{}", block(&applied));
    let replay = proxy.refund("pay_1002", 2_000).await;
    assert_eq!(block(&replay)["reason_code"], "IDEMPOTENT_REPLAY");
    proxy.close().await;
    let on_rail = scene.stamped_refunds_of("pay_1002").len();
    assert_eq!(on_rail, 1);
    figure(
        T_FSYNC,
        "refunds on the rail after the restart and the retry",
        on_rail,
    );
}
