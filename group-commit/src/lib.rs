//! Group commit for a store with one writer (a SQLite connection): concurrent callers run their
//! transactions one after another inside one open batch, and one commit (one fsync) makes the
//! whole batch durable. A ledger that commits each caller on its own is capped at
//! 1 / (commits per call × fsync); batched, the fsync is shared by everyone who queued during
//! the previous one.
//!
//! # The protocol
//! Each caller, on its own thread (its job may borrow from its stack: nothing is sent to
//! another thread):
//! 1. says it is joining, takes the lock, and stops joining;
//! 2. opens a batch if none is open ([`Store::begin`]);
//! 3. runs its job inside a savepoint of the batch: a job that fails is undone on its own
//!    ([`Store::undo`]) and the batch goes on;
//! 4. commits the batch if no other caller is joining (or the batch holds
//!    [`GroupCommit::jobs_max`] jobs); otherwise it leaves the batch open for the next
//!    caller, who is already on its way to the lock;
//! 5. waits until its batch has an outcome, and only then answers: its job's result when the
//!    batch committed, the batch's failure otherwise. It waits on the batch's own slot, not on
//!    the store's lock, so it is not held up by the next batch's jobs and fsync.
//!
//! # Invariants (the loom test checks them over every interleaving it explores)
//! - **Durable before answered.** No caller returns its job's result before the commit of the
//!   batch that holds it; when that commit fails, every caller in it gets the failure.
//! - **None lost.** Every caller's batch gets an outcome: the one that leaves a batch open saw
//!   another caller joining, and that caller reaches step 4 itself.
//! - **One batch at a time, in order.** Batches are begun, committed and numbered one after
//!   another; a job sees the writes of the jobs before it in its batch.
//!
//! A job's error may describe state that an earlier job of the same batch wrote and that is
//! not durable yet, so a failed job waits for its batch too.

mod sync;

use std::panic::{self, AssertUnwindSafe};
use sync::{Arc, AtomicU64, AtomicUsize, Condvar, Mutex, MutexGuard, Ordering};

/// The default bound on jobs in one batch: a caller at the back of a long queue still commits
/// after at most this many jobs, and one failed commit fails at most this many callers.
pub const BATCH_JOBS_MAX: usize = 64;

/// The store a batch runs on: one writer, one transaction at a time, savepoints inside it.
pub trait Store {
    /// Why a batch failed: every caller in it gets a copy.
    type Error: Clone;
    /// Opens the batch's transaction (closing first one that a panicking commit or rollback
    /// may have left open: its callers have been answered).
    fn begin(&mut self) -> Result<(), Self::Error>;
    /// Commits the batch's transaction, durably.
    fn commit(&mut self) -> Result<(), Self::Error>;
    /// Rolls the batch's transaction back (after a failed commit, or a job that panicked).
    fn rollback(&mut self);
    /// Opens a savepoint for one job.
    fn enter(&mut self) -> Result<(), Self::Error>;
    /// Keeps the job's writes in the batch (releases its savepoint).
    fn keep(&mut self) -> Result<(), Self::Error>;
    /// Undoes the job's writes and releases its savepoint.
    fn undo(&mut self) -> Result<(), Self::Error>;
    /// The failure given to every caller of a batch in which a job panicked.
    fn abandoned(&self) -> Self::Error;
}

/// The batch of callers over one store.
pub struct GroupCommit<S: Store> {
    inner: Mutex<Inner<S>>,
    /// Callers between "I am coming" and holding the lock: the one who sees none commits.
    joining: AtomicUsize,
    /// Callers inside [`GroupCommit::run`], for [`GroupCommit::is_idle`].
    inside: AtomicUsize,
    /// Batches committed: an atomic, so that counting them never waits for (or, from inside a
    /// job, deadlocks on) the lock a batch holds.
    batches: AtomicU64,
    jobs_max: usize,
}

struct Inner<S: Store> {
    store: S,
    open: Option<Open<S::Error>>,
    next_id: u64,
}

struct Open<E> {
    id: u64,
    jobs: usize,
    slot: Arc<Slot<E>>,
}

/// Where one batch's outcome is delivered. Its callers wait here rather than on the store's
/// lock: a caller whose batch is decided returns without waiting for the next batch's jobs and
/// fsync to let go of that lock.
struct Slot<E> {
    outcome: Mutex<Option<Result<(), E>>>,
    decided: Condvar,
}

impl<E: Clone> Slot<E> {
    fn new() -> Slot<E> {
        Slot {
            outcome: Mutex::new(None),
            decided: Condvar::new(),
        }
    }

    fn set(&self, outcome: Result<(), E>) {
        let mut slot = self
            .outcome
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        assert!(slot.is_none(), "a batch is decided once");
        *slot = Some(outcome);
        self.decided.notify_all();
    }

    /// Waits until the batch is decided, and takes a copy of its outcome.
    fn wait(&self) -> Result<(), E> {
        let mut slot = self
            .outcome
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        loop {
            if let Some(outcome) = slot.as_ref() {
                return outcome.clone();
            }
            slot = self
                .decided
                .wait(slot)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }
}

impl<S: Store> GroupCommit<S> {
    /// Batches over `store`, at most [`BATCH_JOBS_MAX`] jobs each.
    pub fn new(store: S) -> GroupCommit<S> {
        GroupCommit::with_jobs_max(store, BATCH_JOBS_MAX)
    }

    /// Batches over `store`, at most `jobs_max` jobs each (1: every job commits on its own).
    pub fn with_jobs_max(store: S, jobs_max: usize) -> GroupCommit<S> {
        assert!(jobs_max >= 1, "a batch holds at least one job");
        GroupCommit {
            inner: Mutex::new(Inner {
                store,
                open: None,
                next_id: 0,
            }),
            joining: AtomicUsize::new(0),
            inside: AtomicUsize::new(0),
            batches: AtomicU64::new(0),
            jobs_max,
        }
    }

    /// The bound on jobs in one batch.
    pub fn jobs_max(&self) -> usize {
        self.jobs_max
    }

    /// Whether no caller is inside [`GroupCommit::run`] at this moment: a caller that finds it
    /// so will most likely wait for nothing but its own commit. A hint for scheduling (whether
    /// to tell an async runtime that this thread is about to block), never for correctness: it
    /// may be stale the moment it is read.
    pub fn is_idle(&self) -> bool {
        self.inside.load(Ordering::SeqCst) == 0
    }

    /// Runs `read` on the store if the lock is free and no batch is open, holding the lock so
    /// that no batch begins while it runs: the store then holds only what committed batches
    /// wrote. `None` (and `read` not run) otherwise; it never waits for a job or a commit.
    pub fn between_batches<T>(&self, read: impl FnOnce(&S) -> T) -> Option<T> {
        let inner = match self.inner.try_lock() {
            Ok(inner) => inner,
            // The state behind a poisoned lock is whole (see `lock`).
            Err(sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(sync::TryLockError::WouldBlock) => return None,
        };
        inner.open.is_none().then(|| read(&inner.store))
    }

    /// Batches committed so far (each one commit of the store).
    pub fn batches(&self) -> u64 {
        self.batches.load(Ordering::SeqCst)
    }

    /// The store back, once every caller has been answered.
    ///
    /// # Panics
    /// If a batch is still open or an outcome was never collected: a caller was lost.
    pub fn into_store(self) -> S {
        let inner = self
            .inner
            .into_inner()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        assert!(inner.open.is_none(), "a batch was left open");
        inner.store
    }

    /// Runs `job` in the open batch (or a new one) and answers once that batch is decided:
    /// the job's result if the batch committed, the batch's failure if it did not.
    pub fn run<T, E>(&self, job: impl FnOnce(&mut S) -> Result<T, E>) -> Result<T, E>
    where
        E: From<S::Error>,
    {
        self.inside.fetch_add(1, Ordering::SeqCst);
        // Decremented however this returns, a panic included.
        let _inside = Inside(&self.inside);
        self.joining.fetch_add(1, Ordering::SeqCst);
        let mut inner = self.lock();
        self.joining.fetch_sub(1, Ordering::SeqCst);
        let (id, slot) = match inner.open.as_mut() {
            Some(open) => {
                open.jobs += 1;
                (open.id, open.slot.clone())
            }
            None => {
                // Nothing of this caller is in any batch yet: a failed begin is its answer.
                inner.store.begin()?;
                let id = inner.next_id;
                inner.next_id += 1;
                let slot = Arc::new(Slot::new());
                let open = Open {
                    id,
                    jobs: 1,
                    slot: slot.clone(),
                };
                inner.open = Some(open);
                (id, slot)
            }
        };
        let result = match panic::catch_unwind(AssertUnwindSafe(|| run_job(&mut inner, job))) {
            Ok(result) => result,
            // The job's writes may be half made: none of the batch is kept.
            Err(panic) => self.abandon(inner, panic),
        };
        let (result, savepoint) = result;
        if let Err(broken) = savepoint {
            // A savepoint could not be kept or undone: the batch may hold half a job, so none
            // of it is kept, and every caller in it, this one included, is told the batch's
            // failure. Not the job's own error: a refusal it made may rest on what an earlier
            // job of the batch wrote, which is now rolled back.
            rollback_guarded(&mut inner.store);
            self.decide(&mut inner, Err(broken.clone()));
            drop(inner);
            drop(result);
            return Err(E::from(broken));
        }
        let open = inner
            .open
            .as_ref()
            .expect("this caller's batch is still open");
        assert_eq!(open.id, id, "a batch stays open until it is decided");
        if open.jobs >= self.jobs_max || self.joining.load(Ordering::SeqCst) == 0 {
            let committed = panic::catch_unwind(AssertUnwindSafe(|| {
                let outcome = inner.store.commit();
                if outcome.is_err() {
                    inner.store.rollback();
                }
                outcome
            }));
            match committed {
                Ok(outcome) => self.decide(&mut inner, outcome),
                // Whether the commit happened is not known: no caller of the batch is told it
                // did.
                Err(panic) => self.abandon(inner, panic),
            }
        }
        // Waits on the batch's slot, not on the store's lock.
        drop(inner);
        slot.wait()?;
        result
    }

    /// After a panic in a job or in the commit: rolls the batch back (if that panics too, the
    /// next [`Store::begin`] finds the transaction still open and closes it), tells every
    /// caller in it that it was abandoned, and only then goes on unwinding.
    fn abandon(
        &self,
        mut inner: MutexGuard<'_, Inner<S>>,
        panic: Box<dyn std::any::Any + Send>,
    ) -> ! {
        rollback_guarded(&mut inner.store);
        let abandoned = inner.store.abandoned();
        self.decide(&mut inner, Err(abandoned));
        drop(inner);
        panic::resume_unwind(panic)
    }

    /// Closes the open batch with `outcome` and wakes its waiting callers.
    fn decide(&self, inner: &mut Inner<S>, outcome: Result<(), S::Error>) {
        let open = inner.open.take().expect("only an open batch is decided");
        if outcome.is_ok() {
            self.batches.fetch_add(1, Ordering::SeqCst);
        }
        open.slot.set(outcome);
    }

    fn lock(&self) -> MutexGuard<'_, Inner<S>> {
        // A caller that panicked has decided its batch before unwinding past the lock: the
        // state behind a poisoned lock is whole.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Rolls the batch back on a path that is already failing it. A rollback that panics too must
/// not keep the batch from being decided (its callers would wait for ever, and the next caller
/// would find the half-written batch still open): the panic is dropped here, and the next
/// [`Store::begin`] finds the transaction still open and closes it.
fn rollback_guarded<S: Store>(store: &mut S) {
    let _ = panic::catch_unwind(AssertUnwindSafe(|| store.rollback()));
}

struct Inside<'a>(&'a AtomicUsize);

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Runs `job` in a savepoint of the open batch: the job's result, and whether its savepoint
/// was kept or undone cleanly (when not, the batch can no longer be trusted).
fn run_job<S: Store, T, E>(
    inner: &mut Inner<S>,
    job: impl FnOnce(&mut S) -> Result<T, E>,
) -> (Result<T, E>, Result<(), S::Error>)
where
    E: From<S::Error>,
{
    if let Err(error) = inner.store.enter() {
        // No savepoint, so nothing of this job is in the batch.
        return (Err(E::from(error)), Ok(()));
    }
    let result = job(&mut inner.store);
    let savepoint = match &result {
        Ok(_) => inner.store.keep(),
        Err(_) => inner.store.undo(),
    };
    (result, savepoint)
}
