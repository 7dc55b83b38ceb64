//! The hand-off on real threads: many callers, batches that really form, a job that panics.
//! (`tests/loom.rs` explores the interleavings of a few callers exhaustively.)

#![cfg(not(loom))]

mod common;

use common::{Arc, Durable, Journal, Mutex, check_answer};
use interlock_group_commit::GroupCommit;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Barrier;
use std::thread;

const CALLERS: u32 = 32;

#[test]
fn many_callers_share_commits_and_each_is_answered_once_durable() {
    let durable: Durable = Arc::new(Mutex::new(Vec::new()));
    let group = GroupCommit::new(Journal::new(durable.clone()));
    let start = Barrier::new(CALLERS as usize);
    thread::scope(|scope| {
        for id in 0..CALLERS {
            let (group, durable, start) = (&group, &durable, &start);
            scope.spawn(move || {
                start.wait();
                // Every fifth job fails and must leave nothing behind.
                let answer = group.run(|store: &mut Journal| {
                    // Held long enough that the others queue behind it.
                    thread::sleep(std::time::Duration::from_millis(2));
                    store.write(id, id % 5 == 0)
                });
                check_answer(durable, id, &answer);
            });
        }
    });
    let batches = group.batches();
    let journal = group.into_store();
    journal.assert_quiet();
    let mut on_disk = durable.lock().unwrap().clone();
    on_disk.sort_unstable();
    let expected: Vec<u32> = (0..CALLERS).filter(|id| id % 5 != 0).collect();
    assert_eq!(on_disk, expected);
    assert_eq!(batches, journal.commits as u64);
    assert!(
        batches < u64::from(CALLERS),
        "{CALLERS} queued callers made {batches} commits: nothing was batched"
    );
}

/// Two callers in one batch, the second's job panicking: the first leaves the batch open
/// because the second is joining. The panic must reach its caller, the first must be told
/// nothing was written, nothing of the batch may be durable, and the store must take the next
/// caller's batch and commit it alone.
fn a_job_panics_beside_another(journal: Journal, durable: &Durable) {
    let group = GroupCommit::new(journal);
    let in_batch = Barrier::new(2);
    thread::scope(|scope| {
        let first = scope.spawn(|| {
            group.run(|store: &mut Journal| {
                in_batch.wait();
                // Let the second caller reach the lock and count as joining.
                thread::sleep(std::time::Duration::from_millis(50));
                store.write(1, false)
            })
        });
        in_batch.wait();
        let second = panic::catch_unwind(AssertUnwindSafe(|| {
            group.run(|store: &mut Journal| -> Result<u32, String> {
                store.write(2, false)?;
                panic!("a bug in a job")
            })
        }));
        assert!(second.is_err(), "the panic reaches its caller");
        assert_eq!(
            first.join().unwrap(),
            Err("a job of the batch panicked".to_owned()),
            "the caller batched with a panicking job is told nothing was written"
        );
    });
    assert!(
        durable.lock().unwrap().is_empty(),
        "nothing of the batch kept"
    );
    assert_eq!(
        group.run(|store: &mut Journal| store.write(3, false)),
        Ok(3)
    );
    group.into_store().assert_quiet();
    assert_eq!(
        *durable.lock().unwrap(),
        vec![3],
        "only the next batch was committed"
    );
}

#[test]
fn a_panicking_job_fails_its_whole_batch_and_the_store_goes_on() {
    let durable: Durable = Arc::new(Mutex::new(Vec::new()));
    a_job_panics_beside_another(Journal::new(durable.clone()), &durable);
}

/// A rollback that panics on a path already failing the batch (here, after a job panicked)
/// must not keep the batch from being decided: its other caller is answered, not left waiting
/// for ever, and the half-written batch is never committed by the next caller.
#[test]
fn a_rollback_that_panics_still_decides_the_batch() {
    let durable: Durable = Arc::new(Mutex::new(Vec::new()));
    let mut journal = Journal::new(durable.clone());
    journal.rollback_panics = true;
    a_job_panics_beside_another(journal, &durable);
}

#[test]
fn a_commit_that_panics_is_abandoned_and_the_next_batch_begins() {
    let durable: Durable = Arc::new(Mutex::new(Vec::new()));
    let mut journal = Journal::new(durable.clone());
    journal.commit_panics = true;
    let group = GroupCommit::new(journal);
    let panicked = panic::catch_unwind(AssertUnwindSafe(|| {
        group.run(|store: &mut Journal| store.write(1, false))
    }));
    assert!(panicked.is_err(), "the commit's panic reaches its caller");
    // The store was rolled back: the next caller begins a batch (the journal refuses to begin
    // inside one) and commits.
    assert_eq!(
        group.run(|store: &mut Journal| store.write(2, false)),
        Ok(2)
    );
    group.into_store().assert_quiet();
    assert_eq!(*durable.lock().unwrap(), vec![2]);
}
