//! The WAL checkpoint, off the money path. SQLite's automatic checkpoint runs inside the commit
//! that crosses its threshold: every 25–30 refunds one refund's commit also copied the WAL into
//! the database and fsynced it (issue 21: p99 5.6 ms on disk against 1.8 on tmpfs). Here a
//! thread of the ledger, on a connection of its own, runs a `PASSIVE` checkpoint every
//! [`CHECKPOINT_EVERY`]: it never blocks a writer, and a commit only appends to the WAL.
//!
//! The money connections keep SQLite's automatic checkpoint as a backstop at
//! [`WAL_AUTOCHECKPOINT_BACKSTOP_PAGES`], so the WAL stays bounded if this thread cannot keep
//! up. A checkpoint that fails with an I/O error poisons the ledger's file in this process, as
//! a failed commit does (ADR 0004): what the database file holds is then not known. A full
//! disk is not an I/O error: the WAL keeps every commit, and the next tick tries again.

use super::{DiskFault, LedgerError, poisoned_lock, sqlite};
use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the checkpoint thread copies the WAL into the database.
pub const CHECKPOINT_EVERY: Duration = Duration::from_millis(100);
/// The money connections' own automatic checkpoint, in pages (64 MiB of WAL at 4 KiB): only
/// reached when the checkpoint thread has fallen behind or stopped.
pub const WAL_AUTOCHECKPOINT_BACKSTOP_PAGES: i64 = 16_384;

/// The checkpoint thread of one ledger; stopped and joined when dropped.
#[derive(Debug)]
pub(crate) struct Checkpointer {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Starts the thread on a connection of its own to the ledger at `path`.
    pub(crate) fn start(path: &Path) -> Result<Checkpointer, LedgerError> {
        let shown = path.display().to_string();
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).map_err(|e| sqlite(&shown, e))?;
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let thread = {
            let stop = Arc::clone(&stop);
            let path = path.to_owned();
            std::thread::Builder::new()
                .name("ledger-checkpoint".to_owned())
                .spawn(move || run(&conn, &path, &stop))
                .map_err(|e| LedgerError::Unsafe {
                    path: shown.clone(),
                    problem: format!("cannot start the checkpoint thread: {e}"),
                })?
        };
        Ok(Checkpointer {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        let (stopped, wake) = &*self.stop;
        *stopped.lock().unwrap_or_else(|e| e.into_inner()) = true;
        wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Checkpoints every [`CHECKPOINT_EVERY`] until told to stop or an I/O error poisons the file.
fn run(conn: &Connection, path: &PathBuf, stop: &(Mutex<bool>, Condvar)) {
    let (stopped, wake) = stop;
    let mut guard = stopped.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let (next, _) = wake
            .wait_timeout(guard, CHECKPOINT_EVERY)
            .unwrap_or_else(|e| e.into_inner());
        guard = next;
        if *guard {
            return;
        }
        // Not while holding the stop lock: a drop must not wait for a checkpoint to start.
        drop(guard);
        let outcome = checkpoint(conn, path);
        guard = stopped.lock().unwrap_or_else(|e| e.into_inner());
        if !outcome {
            return;
        }
    }
}

/// One `PASSIVE` checkpoint. `false` when the file is poisoned and the thread must stop.
fn checkpoint(conn: &Connection, path: &PathBuf) -> bool {
    if poisoned_lock().iter().any(|(p, _)| p == path) {
        return false;
    }
    let result = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
    let Err(error) = result else {
        return true;
    };
    let error = sqlite(&path.display().to_string(), error);
    match error.disk_fault() {
        Some(DiskFault::Io) => {
            tracing::error!(%error, "the ledger's checkpoint failed; no more writes in this process");
            let mut poisoned = poisoned_lock();
            if !poisoned.iter().any(|(p, _)| p == path) {
                poisoned.push((path.clone(), format!("checkpoint: {error}")));
            }
            false
        }
        Some(DiskFault::Full) => {
            tracing::warn!(%error, "the ledger's checkpoint found the disk full; the WAL keeps every commit");
            true
        }
        None => {
            tracing::warn!(%error, "the ledger's checkpoint did not run");
            true
        }
    }
}
