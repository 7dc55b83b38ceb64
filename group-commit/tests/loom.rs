//! The hand-off, model-checked by loom over the interleavings of two and three callers: no
//! caller is answered before its batch's commit, none is lost, and a failed job or a failed
//! commit fails exactly the callers it should.
//!
//! `RUSTFLAGS="--cfg loom" cargo test -p interlock-group-commit --release --test loom`
//! (`scripts/loom.sh` runs it in a target directory of its own).

#![cfg(loom)]

mod common;

use common::{Arc, Durable, Journal, Mutex, check_answer};
use interlock_group_commit::GroupCommit;
use loom::thread;
use std::sync::atomic::{AtomicBool, Ordering};

/// One caller per entry of `fails` (whether its job fails), `commits_to_fail` commits failing
/// first, batches of at most `jobs_max`. Returns each caller's answer.
fn callers(fails: &[bool], commits_to_fail: usize, jobs_max: usize) -> Vec<Result<u32, String>> {
    callers_counted(fails, commits_to_fail, jobs_max, false).0
}

/// [`callers`], and how many commits the store made.
fn callers_counted(
    fails: &[bool],
    commits_to_fail: usize,
    jobs_max: usize,
    undo_breaks: bool,
) -> (Vec<Result<u32, String>>, usize) {
    let durable: Durable = Arc::new(Mutex::new(Vec::new()));
    let mut journal = Journal::new(durable.clone());
    journal.commits_to_fail = commits_to_fail;
    journal.undo_breaks = undo_breaks;
    let group = Arc::new(GroupCommit::with_jobs_max(journal, jobs_max));
    let handles: Vec<_> = (0u32..)
        .zip(fails.iter().copied())
        .map(|(id, fails)| {
            let group = group.clone();
            let durable = durable.clone();
            thread::spawn(move || {
                let answer = group.run(|store: &mut Journal| store.write(id, fails));
                check_answer(&durable, id, &answer);
                answer
            })
        })
        .collect();
    let answers: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let journal = Arc::try_unwrap(group)
        .ok()
        .expect("every caller is done")
        .into_store();
    journal.assert_quiet();
    // Exactly the callers answered Ok are durable, each once.
    let mut on_disk = durable.lock().unwrap().clone();
    on_disk.sort_unstable();
    let ok: Vec<u32> = answers
        .iter()
        .filter_map(|a| a.as_ref().ok().copied())
        .collect();
    assert_eq!(on_disk, ok);
    assert!(
        journal.largest_batch <= jobs_max,
        "a batch held {} jobs, bound {jobs_max}",
        journal.largest_batch
    );
    (answers, journal.commits)
}

fn model(threads_bound: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(threads_bound);
    builder.check(f);
}

#[test]
fn two_callers_are_answered_only_once_durable() {
    // Both shapes must be among the interleavings explored, or the hand-off went unchecked.
    static SHARED: AtomicBool = AtomicBool::new(false);
    static APART: AtomicBool = AtomicBool::new(false);
    model(3, || {
        let (answers, commits) = callers_counted(&[false, false], 0, 64, false);
        assert!(answers.iter().all(Result::is_ok));
        match commits {
            1 => SHARED.store(true, Ordering::Relaxed),
            2 => APART.store(true, Ordering::Relaxed),
            other => panic!("two callers made {other} commits"),
        }
    });
    assert!(
        SHARED.load(Ordering::Relaxed),
        "no interleaving batched the two callers"
    );
    assert!(
        APART.load(Ordering::Relaxed),
        "no interleaving committed them apart"
    );
}

#[test]
fn three_callers_are_answered_only_once_durable() {
    model(2, || {
        let answers = callers(&[false, false, false], 0, 64);
        assert!(answers.iter().all(Result::is_ok));
    });
}

#[test]
fn a_failed_job_is_undone_and_the_batch_goes_on() {
    model(3, || {
        let answers = callers(&[true, false], 0, 64);
        assert!(answers[0].is_err());
        assert_eq!(answers[1], Ok(1));
    });
}

#[test]
fn a_failed_commit_fails_its_callers_and_the_next_batch_commits() {
    model(3, || {
        let answers = callers(&[false, false], 1, 64);
        // The first commit fails whoever was in its batch: one caller or both.
        let failed = answers.iter().filter(|a| a.is_err()).count();
        assert!(failed >= 1, "the failed commit answered someone");
        for answer in answers.iter().filter_map(|a| a.as_ref().err()) {
            assert_eq!(answer, "the disk said no");
        }
    });
}

#[test]
fn a_batch_never_holds_more_than_its_bound() {
    // Three callers, two jobs per batch at most: the bound is checked in `callers_counted`,
    // and some interleaving must reach it (two callers batched) without passing it.
    static REACHED: AtomicBool = AtomicBool::new(false);
    model(2, || {
        let (answers, commits) = callers_counted(&[false, false, false], 0, 2, false);
        assert!(answers.iter().all(Result::is_ok));
        if commits == 2 {
            REACHED.store(true, Ordering::Relaxed);
        }
    });
    assert!(
        REACHED.load(Ordering::Relaxed),
        "no interleaving batched two callers"
    );
}

#[test]
fn batches_of_one_commit_each_caller_alone() {
    model(2, || {
        let answers = callers(&[false, false, false], 0, 1);
        assert!(answers.iter().all(Result::is_ok));
    });
}

#[test]
fn a_broken_savepoint_fails_its_whole_batch() {
    model(3, || {
        let (answers, _) = callers_counted(&[true, false], 0, 64, true);
        // The failed job is told the batch's failure, not its own error (which may rest on an
        // earlier job's rolled-back write); the other caller committed on its own before it,
        // or shared the broken batch and is told so.
        assert_eq!(answers[0], Err("the savepoint broke".to_owned()));
        assert!(
            matches!(&answers[1], Ok(1)) || answers[1] == Err("the savepoint broke".to_owned())
        );
    });
}

#[test]
fn a_read_between_batches_sees_no_open_batch() {
    model(3, || {
        let durable: Durable = Arc::new(Mutex::new(Vec::new()));
        let group = Arc::new(GroupCommit::new(Journal::new(durable.clone())));
        let writers: Vec<_> = (0u32..2)
            .map(|id| {
                let group = group.clone();
                thread::spawn(move || group.run(|store: &mut Journal| store.write(id, false)))
            })
            .collect();
        // Whatever it interleaves with, a read that runs finds nothing uncommitted.
        let read = group.between_batches(|store: &Journal| store.assert_quiet());
        for writer in writers {
            assert!(writer.join().unwrap().is_ok());
        }
        // With every caller answered, the lock is free and no batch is open.
        assert_eq!(group.between_batches(|_| ()), Some(()));
        let _ = read;
    });
}
