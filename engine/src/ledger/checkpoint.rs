//! The WAL checkpoint, off the money path. SQLite's automatic checkpoint runs inside the commit
//! that crosses its threshold: every 25–30 refunds one refund's commit also copied the WAL into
//! the database and fsynced it (issue 21: p99 5.6 ms on disk against 1.8 on tmpfs). Here a
//! thread of the ledger, on a connection of its own, runs a `PASSIVE` checkpoint every
//! [`CHECKPOINT_EVERY`]: it never blocks a writer, and a commit only appends to the WAL.
//!
//! The money connections keep SQLite's automatic checkpoint as a backstop at
//! [`WAL_AUTOCHECKPOINT_BACKSTOP_PAGES`], so the WAL stays bounded if this thread cannot keep
//! up. A checkpoint that fails with an I/O error poisons the ledger's file in this process, as
//! a failed commit does (ADR 0004): the process trusts neither its cache nor the kernel's after
//! a failed fsync. Any other failure (a full disk, a read-only file) leaves the WAL holding
//! every commit; it is said once and tried again on the next tick.

use super::{LedgerError, poisoned_lock, sqlite};
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
    let mut failing = false;
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
        let tick = checkpoint(conn, path);
        guard = stopped.lock().unwrap_or_else(|e| e.into_inner());
        match tick {
            Tick::Done if failing => {
                tracing::info!(path = %path.display(), "the ledger's checkpoint runs again");
                failing = false;
            }
            Tick::Done => {}
            Tick::Failed(error) => {
                // Said once per run of failures, not ten times a second.
                if !failing {
                    tracing::warn!(%error, "the ledger's checkpoint did not run; the WAL keeps every commit, and it is tried again every {CHECKPOINT_EVERY:?}");
                }
                failing = true;
            }
            Tick::Poisoned => return,
        }
    }
}

/// How one checkpoint went.
enum Tick {
    Done,
    /// Not run (a full disk, a read-only file, a lock): tried again on the next tick.
    Failed(LedgerError),
    /// The file is poisoned in this process: the thread stops.
    Poisoned,
}

/// One `PASSIVE` checkpoint. An I/O error poisons the file, as a failed commit does.
fn checkpoint(conn: &Connection, path: &PathBuf) -> Tick {
    if poisoned_lock().iter().any(|(p, _)| p == path) {
        return Tick::Poisoned;
    }
    let Err(error) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) else {
        return Tick::Done;
    };
    let io = error.sqlite_error_code() == Some(rusqlite::ErrorCode::SystemIoFailure);
    let error = sqlite(&path.display().to_string(), error);
    if !io {
        return Tick::Failed(error);
    }
    tracing::error!(%error, "the ledger's checkpoint failed with an I/O error; this process writes nothing more");
    let mut poisoned = poisoned_lock();
    if !poisoned.iter().any(|(p, _)| p == path) {
        poisoned.push((path.clone(), format!("checkpoint: {error}")));
    }
    Tick::Poisoned
}
