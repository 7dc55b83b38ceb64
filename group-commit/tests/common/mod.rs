//! A journal store for the hand-off tests: a batch is a list of caller ids, and a commit moves it
//! onto the durable list that the callers check after they are answered.

#![allow(dead_code)] // each test file uses part of it

#[cfg(loom)]
pub use loom::sync::{Arc, Mutex};
#[cfg(not(loom))]
pub use std::sync::{Arc, Mutex};

use interlock_group_commit::Store;

/// What the disk holds, shared with the test threads.
pub type Durable = Arc<Mutex<Vec<u32>>>;

/// The store: one open batch at most, savepoints inside it.
pub struct Journal {
    pub durable: Durable,
    pending: Vec<u32>,
    savepoint: Option<usize>,
    in_batch: bool,
    /// How many commits still to fail, from the next one.
    pub commits_to_fail: usize,
    /// Whether undoing a failed job breaks (the batch can then no longer be trusted).
    pub undo_breaks: bool,
    /// Whether the next commit panics (once).
    pub commit_panics: bool,
    /// Whether the next rollback panics (once), leaving the batch open.
    pub rollback_panics: bool,
    /// A rollback panicked with the batch open: the next begin must close it.
    left_open: bool,
    pub commits: usize,
    /// Jobs entered in the open batch, and the most any committed batch held.
    jobs_in_batch: usize,
    pub largest_batch: usize,
}

impl Journal {
    pub fn new(durable: Durable) -> Journal {
        Journal {
            durable,
            pending: Vec::new(),
            savepoint: None,
            in_batch: false,
            commits_to_fail: 0,
            undo_breaks: false,
            commit_panics: false,
            rollback_panics: false,
            left_open: false,
            commits: 0,
            jobs_in_batch: 0,
            largest_batch: 0,
        }
    }

    /// A job: writes `id` into the batch; `fails` makes it then fail (and be undone).
    pub fn write(&mut self, id: u32, fails: bool) -> Result<u32, String> {
        assert!(
            self.in_batch && self.savepoint.is_some(),
            "a job runs inside a savepoint"
        );
        self.pending.push(id);
        if fails {
            Err(format!("job {id} failed"))
        } else {
            Ok(id)
        }
    }

    /// Nothing open, nothing pending: the state a quiet store must be in.
    pub fn assert_quiet(&self) {
        assert!(!self.in_batch, "no batch left open");
        assert!(self.pending.is_empty(), "nothing left pending");
    }
}

impl Store for Journal {
    type Error = String;

    fn begin(&mut self) -> Result<(), String> {
        if self.in_batch {
            // Only a rollback that panicked may leave a batch open; its callers were answered.
            assert!(std::mem::take(&mut self.left_open), "one batch at a time");
            self.pending.clear();
            self.savepoint = None;
        }
        self.in_batch = true;
        self.jobs_in_batch = 0;
        Ok(())
    }

    fn commit(&mut self) -> Result<(), String> {
        assert!(
            self.in_batch && self.savepoint.is_none(),
            "commit between jobs"
        );
        if std::mem::take(&mut self.commit_panics) {
            panic!("a bug in the store's commit");
        }
        if self.commits_to_fail > 0 {
            self.commits_to_fail -= 1;
            return Err("the disk said no".to_owned());
        }
        self.durable.lock().unwrap().append(&mut self.pending);
        self.in_batch = false;
        self.commits += 1;
        self.largest_batch = self.largest_batch.max(self.jobs_in_batch);
        Ok(())
    }

    fn rollback(&mut self) {
        if std::mem::take(&mut self.rollback_panics) {
            self.left_open = true;
            panic!("a bug in the store's rollback");
        }
        self.pending.clear();
        self.savepoint = None;
        self.in_batch = false;
    }

    fn enter(&mut self) -> Result<(), String> {
        assert!(
            self.in_batch && self.savepoint.is_none(),
            "one savepoint at a time"
        );
        self.savepoint = Some(self.pending.len());
        self.jobs_in_batch += 1;
        Ok(())
    }

    fn keep(&mut self) -> Result<(), String> {
        self.savepoint.take().expect("a savepoint to keep");
        Ok(())
    }

    fn undo(&mut self) -> Result<(), String> {
        let mark = self.savepoint.take().expect("a savepoint to undo");
        if self.undo_breaks {
            return Err("the savepoint broke".to_owned());
        }
        self.pending.truncate(mark);
        Ok(())
    }

    fn abandoned(&self) -> String {
        "a job of the batch panicked".to_owned()
    }
}

/// What one caller's answer says, checked the moment it is answered.
pub fn check_answer(durable: &Durable, id: u32, answer: &Result<u32, String>) {
    let on_disk = durable.lock().unwrap().contains(&id);
    match answer {
        Ok(got) => {
            assert_eq!(*got, id);
            assert!(
                on_disk,
                "caller {id} was answered before its batch was durable"
            );
        }
        Err(_) => assert!(!on_disk, "caller {id} failed but its write is durable"),
    }
}
