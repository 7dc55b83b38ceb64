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
//! a failed fsync (the money path's rule, `LedgerError::disk_fault`: an I/O error or a file gone
//! read-only). Any other failure (a full disk, a lock) leaves the WAL holding every commit; it
//! is said once and tried again on the next tick.

use super::{BUSY_TIMEOUT_MS, DiskFault, LedgerError, mark_poisoned, poisoned_why, sqlite};
use rusqlite::{Connection, OpenFlags};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the checkpoint thread copies the WAL into the database.
pub const CHECKPOINT_EVERY: Duration = Duration::from_millis(100);
/// The money connections' own automatic checkpoint, in pages (64 MiB of WAL at 4 KiB): only
/// reached when the checkpoint thread has fallen behind or stopped.
pub const WAL_AUTOCHECKPOINT_BACKSTOP_PAGES: i64 = 16_384;
/// WAL pages left uncopied after a checkpoint at which the thread says it is falling behind.
pub const WAL_BEHIND_WARN_PAGES: i64 = WAL_AUTOCHECKPOINT_BACKSTOP_PAGES / 2;

/// The checkpoint thread of one ledger; stopped and joined when dropped.
#[derive(Debug)]
pub(crate) struct Checkpointer {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Starts the thread on a connection of its own to the ledger at `path`, or none when the
    /// file can only be read (an operator looking at a ledger on a read-only filesystem).
    pub(crate) fn start(path: &Path) -> Result<Option<Checkpointer>, LedgerError> {
        let shown = path.display().to_string();
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).map_err(|e| sqlite(&shown, e))?;
        if conn
            .is_readonly(rusqlite::MAIN_DB)
            .map_err(|e| sqlite(&shown, e))?
        {
            return Ok(None);
        }
        configure(&conn, &shown)?;
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
        Ok(Some(Checkpointer {
            stop,
            thread: Some(thread),
        }))
    }
}

/// The checkpoint decides what the database file holds and, as the last connection to close,
/// whether the WAL may go: it runs with the money connections' durability, read back.
fn configure(conn: &Connection, path: &str) -> Result<(), LedgerError> {
    conn.busy_timeout(Duration::from_millis(BUSY_TIMEOUT_MS))
        .map_err(|e| sqlite(path, e))?;
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(|e| sqlite(path, e))?;
    let synchronous: i64 = conn
        .pragma_query_value(None, "synchronous", |row| row.get(0))
        .map_err(|e| sqlite(path, e))?;
    if synchronous != 2 {
        return Err(LedgerError::Unsafe {
            path: path.to_owned(),
            problem: format!(
                "the checkpoint connection's synchronous reads back {synchronous}, not 2 (FULL)"
            ),
        });
    }
    Ok(())
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        let (stopped, wake) = &*self.stop;
        *stopped.lock().unwrap_or_else(|e| e.into_inner()) = true;
        wake.notify_all();
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the ledger's checkpoint thread panicked");
        }
    }
}

/// Checkpoints every [`CHECKPOINT_EVERY`] until told to stop or an I/O error poisons the file.
fn run(conn: &Connection, path: &Path, stop: &(Mutex<bool>, Condvar)) {
    let (stopped, wake) = stop;
    let mut failing = false;
    let mut behind = false;
    let mut guard = stopped.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        // Waits out the tick unless a stop came, before or during the wait: a stop set while
        // a checkpoint ran finds the flag here, not a lost wake-up.
        let (next, _) = wake
            .wait_timeout_while(guard, CHECKPOINT_EVERY, |stop| !*stop)
            .unwrap_or_else(|e| e.into_inner());
        guard = next;
        if *guard {
            return;
        }
        // The checkpoint runs without the stop lock, so a drop can set the flag meanwhile; it
        // then waits for this one checkpoint to end.
        drop(guard);
        let tick = checkpoint(conn, path);
        guard = stopped.lock().unwrap_or_else(|e| e.into_inner());
        if let Tick::Done { behind: now_behind } = &tick {
            // Said when it starts and when it ends, not at every tick in between.
            match (behind, now_behind) {
                (false, Some((frames, copied))) => tracing::warn!(
                    path = %path.display(),
                    frames,
                    copied,
                    "the ledger's checkpoint is falling behind (a reader holds an old snapshot, or commits outrun it); past {WAL_AUTOCHECKPOINT_BACKSTOP_PAGES} pages a commit checkpoints too"
                ),
                (true, None) => {
                    tracing::info!(path = %path.display(), "the ledger's checkpoint has caught up");
                }
                _ => {}
            }
            behind = now_behind.is_some();
        }
        match tick {
            Tick::Done { .. } if failing => {
                tracing::info!(path = %path.display(), "the ledger's checkpoint runs again");
                failing = false;
            }
            Tick::Done { .. } => {}
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
    /// Ran; `behind` when more than [`WAL_BEHIND_WARN_PAGES`] stayed uncopied (a reader holds
    /// an old snapshot, or commits outrun the thread).
    Done { behind: Option<(i64, i64)> },
    /// Not run (a full disk, a lock): tried again on the next tick.
    Failed(LedgerError),
    /// The file is poisoned in this process: the thread stops.
    Poisoned,
}

/// One `PASSIVE` checkpoint. An I/O error poisons the file, as a failed commit does.
fn checkpoint(conn: &Connection, path: &Path) -> Tick {
    if poisoned_why(path).is_some() {
        return Tick::Poisoned;
    }
    // (busy, frames in the WAL, frames copied): contention and readers holding old snapshots
    // are answered in the row, never as an error.
    let row = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
        Ok((row.get::<_, i64>(1)?, row.get::<_, i64>(2)?))
    });
    let error = match row {
        Ok((frames, copied)) => {
            let behind = (frames - copied > WAL_BEHIND_WARN_PAGES).then_some((frames, copied));
            return Tick::Done { behind };
        }
        Err(error) => error,
    };
    // One rule with the money path (`LedgerError::disk_fault`): an I/O error or a file gone
    // read-only under a read-write connection poisons; anything else is tried again.
    let error = sqlite(&path.display().to_string(), error);
    if error.disk_fault() != Some(DiskFault::Io) {
        return Tick::Failed(error);
    }
    tracing::error!(%error, "the ledger's checkpoint failed with an I/O error; this process writes nothing more");
    mark_poisoned(path, format!("checkpoint: {error}"));
    Tick::Poisoned
}
