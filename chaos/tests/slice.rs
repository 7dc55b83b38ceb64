//! The chaos matrix's slice in the test suite: one refund trial of every kill point under three
//! rail profiles, one settlement trial of every kill point under an applied-but-unanswered call
//! (a settlement has no receipt: nothing on the rail stops a second one), the settlement cells
//! that need the seeded settlement history (a replayed foreign answer, a proof 31 pages deep),
//! two cells where the rail moves other money than asked (answered, and found by a pass),
//! three race cells (one a double crash), and two stall cells (a proxy stopped past its lease
//! at its last lease check, and with its request queued for the transport), through the real
//! binaries, judged as the full matrix judges (`cargo run -p interlock-chaos --release -- matrix` runs every cell 20 times).

use std::path::PathBuf;
use std::sync::Arc;

use interlock_chaos::matrix::{self, Plan};
use interlock_chaos::plan::{self, Action, Backend, Cell, Fault, Point, Shape};
use interlock_chaos::trial::{self, Report};
use interlock_chaos::verdict::KillVerdict;
use interlock_chaos::world::{Bins, SEEDED_SETTLEMENTS};

/// An applied call whose answer never comes; the proof on the 31st page of one item; an answer
/// that names someone else's entity.
const PROFILES: [Fault; 3] = [
    Fault::TimeoutAfterApply,
    Fault::DeepPages,
    Fault::DupResponse,
];

/// The seeded settlement `dup_response` replays to the first settlement: the last one seeded.
const LAST_SEEDED_SETTLEMENT: &str = "setlod_SEED000030";

fn single(point: Point, fault: Fault, action: Action) -> Cell {
    Cell {
        point,
        fault,
        action,
        shape: Shape::Single,
        backend: Backend::Sqlite,
    }
}

fn race(point: Point, fault: Fault, action: Action) -> Cell {
    Cell {
        shape: Shape::Race,
        ..single(point, fault, action)
    }
}

fn stall(point: Point, fault: Fault, action: Action) -> Cell {
    Cell {
        shape: Shape::Stall,
        ..single(point, fault, action)
    }
}

#[test]
fn every_kill_point_never_pays_twice_and_never_leaves_an_unknown() {
    let bins = Bins::beside_test().expect("the binaries build");
    let work = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("chaos-slice");
    let _ = std::fs::remove_dir_all(&work);
    let setup = Arc::new(trial::setup(bins, work, false, Backend::Sqlite).expect("setup"));
    let mut cells = plan::cells(
        Backend::Sqlite,
        &[Action::Refund],
        &Point::ALL,
        &PROFILES,
        &[Shape::Single],
    );
    cells.extend(plan::cells(
        Backend::Sqlite,
        &[Action::Settlement],
        &Point::ALL,
        &[Fault::TimeoutAfterApply],
        &[Shape::Single],
    ));
    // Nothing is sent before the kill: the retry's call is the first, and meets the fault.
    let replayed = single(
        Point::AfterWalBeforeCall,
        Fault::DupResponse,
        Action::Settlement,
    );
    let deep = single(
        Point::AfterWalBeforeCall,
        Fault::DeepPages,
        Action::Settlement,
    );
    // The rail moves one minor unit less than asked: answered (a settlement, killed before its
    // answer reaches the agent), and unanswered (a refund killed mid-call, found by the pass).
    let short = single(
        Point::AfterCommitBeforeAck,
        Fault::ShortApply,
        Action::Settlement,
    );
    let short_found = single(Point::DuringCall, Fault::ShortApplyTimeout, Action::Refund);
    cells.extend([replayed, deep, short, short_found]);
    let races = [
        race(Point::AfterWalBeforeCall, Fault::None, Action::Refund),
        race(Point::MidCall, Fault::None, Action::Settlement),
        race(
            Point::DuringRecovery,
            Fault::TimeoutAfterApply,
            Action::Refund,
        ),
    ];
    cells.extend(races);
    // A proxy stopped past its lease where its lease was last checked, and where its request
    // sits queued for the transport: a settlement, which no receipt on the rail protects.
    let stalls = [
        stall(Point::AfterWalBeforeCall, Fault::None, Action::Settlement),
        stall(Point::MidCall, Fault::None, Action::Settlement),
    ];
    cells.extend(stalls);
    let plan = Plan {
        cells,
        trials: 1,
        // Whether rmcp's writer beats the stop at `mid_call` is up to the scheduler: two
        // trials, of which one must bite.
        stall_trials: 2,
        seed: 20_261_203,
        jobs: 6,
    };
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let outcome = runtime.block_on(matrix::run(setup, &plan));
    eprintln!("{}", matrix::table(&outcome));
    eprintln!("total: {}", matrix::totals(&outcome));
    assert_eq!(
        outcome.trials(),
        Point::ALL.len() * (PROFILES.len() + 1) + 4 + races.len() + 2 * stalls.len()
    );
    let report_of = |cell: Cell| -> &Report {
        &outcome
            .cells
            .iter()
            .find(|c| c.cell == cell)
            .expect("the cell ran")
            .reports[0]
    };
    for cell in &outcome.cells {
        for report in &cell.reports {
            let story = format!(
                "{} #{}: {:?}\n{}",
                cell.cell.label(),
                report.index,
                report.violations,
                report.log.join("\n")
            );
            assert!(report.violations.is_empty(), "{story}");
            assert!(report.after_retry.starts_with("1·APPLIED"), "{story}");
            for kill in &report.kills {
                match (&kill.verdict, cell.cell.shape) {
                    (KillVerdict::Landed, _) => {}
                    // A miss in a race passes only with the ledger's proof that it was lost.
                    (KillVerdict::LostRace(why), Shape::Race | Shape::Stall) => {
                        assert!(!why.is_empty())
                    }
                    (verdict, _) => panic!("{}: {verdict:?}\n{story}", kill.process),
                }
            }
        }
    }
    // The stall at the last lease check always bites (nothing else can send the call); the
    // one with the request queued for the transport must bite at least once.
    for (cell, needed) in [(stalls[0], 2), (stalls[1], 1)] {
        let result = outcome.cells.iter().find(|c| c.cell == cell).expect("ran");
        let (bit, _) = result.kills();
        assert!(bit >= needed, "{}: {bit} stalls bit", cell.label());
    }
    // The settlement replayed to the proxy is the seeded one, which it took as not its own.
    let report = report_of(replayed);
    assert!(
        report.ledger.attempts.iter().any(|a| {
            a.outcome.as_deref() == Some("AMBIGUOUS")
                && a.detail
                    .as_deref()
                    .is_some_and(|d| d.contains(LAST_SEEDED_SETTLEMENT))
        }),
        "no attempt was answered with {LAST_SEEDED_SETTLEMENT}: {:?}",
        report.ledger.attempts
    );
    // Proving the settlement absent took every page of the seeded history, one item a page.
    let report = report_of(deep);
    let deepest = report.ledger.pages_scanned.iter().max().copied();
    assert!(
        deepest >= Some(u32::try_from(SEEDED_SETTLEMENTS).unwrap() + 1),
        "a pass read {deepest:?} pages: {:?}",
        report.ledger.pages_scanned
    );
    // Money moved one unit short is quarantined with its entity, by the rail's answer or by the
    // pass that found it, and settled only by the operator.
    for (cell, event) in [
        (short, "RAIL_APPLIED"),
        (short_found, "RECONCILE_FOUND_APPLIED"),
    ] {
        let steps = &report_of(cell).ledger.steps;
        let kinds: Vec<(&str, interlock_machine::State)> =
            steps.iter().map(|s| (s.kind.as_str(), s.to)).collect();
        assert!(
            kinds.contains(&(event, interlock_machine::State::Quarantined))
                && kinds.contains(&(
                    "OPERATOR_CONFIRMED_APPLIED",
                    interlock_machine::State::Applied
                )),
            "{}: {kinds:?}",
            cell.label()
        );
    }
}
