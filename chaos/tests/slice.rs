//! The chaos matrix's slice in the test suite: one refund trial of every kill point under three
//! rail profiles, one settlement trial of every kill point under an applied-but-unanswered call
//! (a settlement has no receipt: nothing on the rail stops a second one), and two race cells,
//! through the real binaries, judged as the full matrix judges (`cargo run -p interlock-chaos
//! --release -- matrix` runs every cell 20 times).

use std::path::PathBuf;
use std::sync::Arc;

use interlock_chaos::matrix::{self, Plan};
use interlock_chaos::plan::{self, Action, Cell, Fault, Point, Shape};
use interlock_chaos::trial;
use interlock_chaos::world::Bins;

/// An applied call whose answer never comes; the proof on the 31st page of one item; an answer
/// that names someone else's entity.
const PROFILES: [Fault; 3] = [
    Fault::TimeoutAfterApply,
    Fault::DeepPages,
    Fault::DupResponse,
];

#[test]
fn every_kill_point_never_pays_twice_and_never_leaves_an_unknown() {
    let exe = std::env::current_exe().expect("the test's path");
    // target/<profile>/deps/slice-… → target/<profile>
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("a target profile directory");
    let bins = Bins::build(profile_dir).expect("the binaries build");
    let work = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("chaos-slice");
    let _ = std::fs::remove_dir_all(&work);
    let setup = Arc::new(trial::setup(bins, work, false).expect("setup"));
    let mut cells = plan::cells(&[Action::Refund], &Point::ALL, &PROFILES, false);
    cells.extend(plan::cells(
        &[Action::Settlement],
        &Point::ALL,
        &[Fault::TimeoutAfterApply],
        false,
    ));
    for (point, action) in [
        (Point::AfterWalBeforeCall, Action::Refund),
        (Point::MidCall, Action::Settlement),
    ] {
        cells.push(Cell {
            point,
            fault: Fault::None,
            action,
            shape: Shape::Race,
        });
    }
    let plan = Plan {
        cells,
        trials: 1,
        seed: 20_261_203,
        jobs: 6,
    };
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let outcome = runtime.block_on(matrix::run(setup, &plan));
    eprintln!("{}", matrix::table(&outcome));
    eprintln!("total: {}", matrix::totals(&outcome));
    assert_eq!(
        outcome.trials(),
        Point::ALL.len() * (PROFILES.len() + 1) + 2
    );
    for cell in &outcome.cells {
        for report in &cell.reports {
            assert!(
                report.violations.is_empty(),
                "{} #{}: {:?}\n{}",
                cell.cell.label(),
                report.index,
                report.violations,
                report.log.join("\n")
            );
            if cell.cell.shape == Shape::Single {
                assert_eq!(
                    report.kills_landed,
                    report.kills_armed,
                    "{}",
                    cell.cell.label()
                );
                assert!(
                    report.after_retry.starts_with("1·APPLIED"),
                    "{}: {}",
                    cell.cell.label(),
                    report.after_retry
                );
            }
        }
    }
}
