//! The chaos matrix's PostgreSQL slice in the test suite: one trial each of a kill, a race of
//! two proxies in two working directories over one database, and the database server itself
//! SIGKILLed at each of its three points, on a real server this test starts (never a mock),
//! judged as the full matrix judges (`cargo run -p interlock-chaos --release -- matrix
//! --backend postgres` runs every cell 20 times).

use std::path::PathBuf;
use std::sync::Arc;

use interlock_chaos::matrix::{self, Plan};
use interlock_chaos::plan::{Action, Backend, Cell, Fault, Point, Shape};
use interlock_chaos::trial;
use interlock_chaos::verdict::KillVerdict;
use interlock_chaos::world::Bins;

fn cell(shape: Shape, point: Point, fault: Fault, action: Action) -> Cell {
    Cell {
        point,
        fault,
        action,
        shape,
        backend: Backend::Postgres,
    }
}

#[test]
fn a_fleet_on_postgresql_never_pays_twice_when_a_proxy_or_the_server_dies() {
    let bins = Bins::beside_test().expect("the binaries build");
    let work = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("chaos-postgres-slice");
    let _ = std::fs::remove_dir_all(&work);
    let setup = trial::setup(bins, work, false, Backend::Postgres)
        .unwrap_or_else(|why| panic!("setup: {why}"));
    let cells = vec![
        cell(
            Shape::Single,
            Point::DuringCall,
            Fault::TimeoutAfterApply,
            Action::Refund,
        ),
        cell(
            Shape::Race,
            Point::AfterWalBeforeCall,
            Fault::None,
            Action::Settlement,
        ),
        cell(
            Shape::ServerKill,
            Point::PgCommit,
            Fault::None,
            Action::Refund,
        ),
        cell(
            Shape::ServerKill,
            Point::AfterWalBeforeCall,
            Fault::TimeoutAfterApply,
            Action::Settlement,
        ),
        cell(
            Shape::ServerKill,
            Point::DuringCall,
            Fault::None,
            Action::Settlement,
        ),
    ];
    let plan = Plan {
        cells: cells.clone(),
        trials: 1,
        stall_trials: 1,
        seed: 20_261_208,
        jobs: 5,
    };
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let outcome = runtime.block_on(matrix::run(Arc::new(setup), &plan));
    eprintln!("{}", matrix::table(&outcome));
    eprintln!("total: {}", matrix::totals(&outcome));
    assert_eq!(outcome.trials(), cells.len());
    for result in &outcome.cells {
        let report = &result.reports[0];
        let story = format!(
            "{}: {:?}\n{}",
            result.cell.label(),
            report.violations,
            report.log.join("\n")
        );
        assert!(report.violations.is_empty(), "{story}");
        assert!(report.after_retry.starts_with("1·APPLIED"), "{story}");
        for kill in &report.kills {
            match (&kill.verdict, result.cell.shape) {
                (KillVerdict::Landed, _) => {}
                (KillVerdict::LostRace(why), Shape::Race) => assert!(!why.is_empty()),
                (verdict, _) => panic!("{}: {verdict:?}\n{story}", kill.process),
            }
        }
        if result.cell.shape == Shape::ServerKill {
            assert!(
                report.log.iter().any(|l| l.contains("SIGKILLed")),
                "the server was killed: {story}"
            );
            // Inside its COMMIT nothing was committed: the restart finds no intent, and the
            // agent's retry is the first call the rail sees.
            if result.cell.point == Point::PgCommit {
                assert_eq!(report.after_recovery, "0·NONE", "{story}");
            }
        }
    }
}
