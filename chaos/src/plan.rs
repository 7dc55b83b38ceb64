//! What the matrix runs: kill points, rail fault profiles, cells, and for each cell which
//! process generation is armed with what.

use std::fmt;

/// Where a process is killed. Every point but `mid_call` is one of the engine's
/// (`interlock_engine::KILL_POINTS`); `mid_call` is the proxy's (the request is out, the answer
/// not back).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Point {
    /// At the top of a proposal: nothing is written.
    BeforeWal,
    /// `IN_FLIGHT` is committed (the write-ahead); nothing is sent.
    AfterWalBeforeCall,
    /// The request is handed to the upstream; its answer is not back.
    MidCall,
    /// The rail has answered; the answer is only in memory.
    DuringCall,
    /// The answer is classified; its commit has not happened.
    AfterCallBeforeCommit,
    /// The outcome is committed; the agent has not been answered.
    AfterCommitBeforeAck,
    /// Inside a reconcile pass, once it has read its pages (its proof, or the failure that
    /// ends it) and before it commits what it found. A double crash: the first process dies at
    /// `during_call`, the restart dies here in its boot recovery's pass.
    DuringReconcile,
    /// Inside boot recovery, at its third round (a lease taken back, a pass due). A double
    /// crash: the first process dies at `during_call`, the restart dies here.
    DuringRecovery,
    /// PostgreSQL only (`interlock_engine::PG_KILL_POINTS`): the first batch's statements
    /// (the intent, its permission and its `IN_FLIGHT` attempt) have run and its `COMMIT` is
    /// not sent. Not in [`Point::ALL`]: a server-kill cell stops the proxy here and kills the
    /// server, so that the `COMMIT` goes to a dead server.
    PgCommit,
}

impl Point {
    /// Every point, in the order a refund meets them.
    pub const ALL: [Point; 8] = [
        Point::BeforeWal,
        Point::AfterWalBeforeCall,
        Point::MidCall,
        Point::DuringCall,
        Point::AfterCallBeforeCommit,
        Point::AfterCommitBeforeAck,
        Point::DuringReconcile,
        Point::DuringRecovery,
    ];

    /// Where a server-kill cell kills the database server: during the `IN_FLIGHT` commit
    /// (its `COMMIT` not yet sent), after it with the rail not yet called (the held proxy
    /// must not send late), and after it with the rail's answer in memory (the outcome's
    /// commit meets a dead server).
    pub const SERVER_KILL: [Point; 3] = [
        Point::PgCommit,
        Point::AfterWalBeforeCall,
        Point::DuringCall,
    ];

    /// The fail point's name.
    pub const fn name(self) -> &'static str {
        match self {
            Point::BeforeWal => "before_wal",
            Point::AfterWalBeforeCall => "after_wal_before_call",
            Point::MidCall => "mid_call",
            Point::DuringCall => "during_call",
            Point::AfterCallBeforeCommit => "after_call_before_commit",
            Point::AfterCommitBeforeAck => "after_commit_before_ack",
            Point::DuringReconcile => "during_reconcile",
            Point::DuringRecovery => "during_recovery",
            Point::PgCommit => "pg_commit",
        }
    }

    /// The point named `name`.
    pub fn parse(name: &str) -> Result<Point, String> {
        Point::ALL
            .into_iter()
            .chain([Point::PgCommit])
            .find(|p| p.name() == name)
            .ok_or_else(|| {
                format!(
                    "unknown kill point {name:?} (known: {})",
                    names(&Point::ALL)
                )
            })
    }

    /// `FAILPOINTS` for each process generation of a trial, in start order; the last
    /// generation is always clean. Points on the call path kill the first process; the two
    /// second-order points need something to recover, so the first process dies at
    /// `during_call` and the restart dies at the point.
    pub fn generations(self) -> Vec<Option<String>> {
        let kill = |spec: &str| Some(spec.to_owned());
        match self {
            Point::DuringReconcile => vec![
                kill("during_call=return(kill)"),
                kill("during_reconcile=return(kill)"),
                None,
            ],
            // Rounds 0 and 1 wait for the dead process's lease and take it back; round 2 is
            // the first with a reconcile pass due.
            Point::DuringRecovery => vec![
                kill("during_call=return(kill)"),
                kill("during_recovery=2*off->return(kill)"),
                None,
            ],
            point => vec![Some(point.armed("return(kill)")), None],
        }
    }

    /// The `FAILPOINTS` entry that does `task` (`return(kill)`, `return(stop)`) at this point
    /// on the agent's call. `pg_commit` is met first by the boot's batch (the ledger clock's
    /// record), so it fires on its second pass: the call's batch, which commits the intent,
    /// its permission and its `IN_FLIGHT` attempt.
    pub fn armed(self, task: &str) -> String {
        match self {
            Point::PgCommit => format!("pg_commit=1*off->1*{task}"),
            point => format!("{}={task}", point.name()),
        }
    }
}

impl fmt::Display for Point {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A fault profile of the mock rail, as the matrix names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fault {
    /// A healthy rail.
    None,
    /// The first money call is applied and never answered.
    TimeoutAfterApply,
    /// The first money call is never answered and not applied.
    TimeoutBeforeApply,
    /// The first money call is applied, then answered 5xx.
    Http5xxApplied,
    /// The first money call is answered 5xx and not applied.
    Http5xxNotApplied,
    /// The first money call is applied and answered with an earlier entity's JSON (the last
    /// seeded refund, or the last seeded settlement).
    DupResponse,
    /// Lists hide entities younger than 1.5 s (within the proxy's 2 s lag bound).
    ReadLag,
    /// Lists and fetch-by-id fail for good: nothing can be proven; the intent ends
    /// `QUARANTINED` and the trial resolves it as an operator would.
    Partition,
    /// The first money call is applied, then the rail's process exits without answering.
    ConnReset,
    /// One entity per list page, oldest first, behind 30 seeded refunds (or 30 seeded
    /// settlements): the proof is on the 31st page.
    DeepPages,
    /// The first money call commits one minor unit less than asked and answers with it: the
    /// intent must be quarantined with the entity recorded, never taken as applied.
    ShortApply,
    /// As `ShortApply`, but the answer never comes: the reconciler finds the short entity.
    ShortApplyTimeout,
}

impl Fault {
    /// Every profile.
    pub const ALL: [Fault; 12] = [
        Fault::None,
        Fault::TimeoutAfterApply,
        Fault::TimeoutBeforeApply,
        Fault::Http5xxApplied,
        Fault::Http5xxNotApplied,
        Fault::DupResponse,
        Fault::ReadLag,
        Fault::Partition,
        Fault::ConnReset,
        Fault::DeepPages,
        Fault::ShortApply,
        Fault::ShortApplyTimeout,
    ];

    /// The profile's name in the matrix.
    pub const fn name(self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::TimeoutAfterApply => "timeout_after_apply",
            Fault::TimeoutBeforeApply => "timeout_before_apply",
            Fault::Http5xxApplied => "http_5xx_applied",
            Fault::Http5xxNotApplied => "http_5xx_not_applied",
            Fault::DupResponse => "dup_response",
            Fault::ReadLag => "read_lag",
            Fault::Partition => "partition",
            Fault::ConnReset => "conn_reset",
            Fault::DeepPages => "deep_pages",
            Fault::ShortApply => "short_apply",
            Fault::ShortApplyTimeout => "short_apply_timeout",
        }
    }

    /// The mock's `--faults` argument. Money faults hit the first money call of the journal
    /// (numbering survives restarts), whichever process generation makes it.
    pub const fn mock_faults(self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::TimeoutAfterApply => "timeout_after_apply@1",
            Fault::TimeoutBeforeApply => "timeout_before_apply@1",
            Fault::Http5xxApplied => "http_5xx_applied@1",
            Fault::Http5xxNotApplied => "http_5xx_not_applied@1",
            Fault::DupResponse => "dup_response@1",
            Fault::ReadLag => "read_lag=1500",
            Fault::Partition => "partition",
            Fault::ConnReset => "conn_reset@1",
            Fault::DeepPages => "page_size=1,oldest_first",
            Fault::ShortApply => "short_apply@1",
            Fault::ShortApplyTimeout => "short_apply_timeout@1",
        }
    }

    /// The amount the rail commits for a call of `asked`: what an `APPLIED` intent must name.
    pub const fn moved(self, asked: u64) -> u64 {
        match self {
            Fault::ShortApply | Fault::ShortApplyTimeout if asked > 1 => asked - 1,
            _ => asked,
        }
    }

    /// Whether the rail moves other money than asked under this profile: the intent must be
    /// quarantined with that entity recorded, and by nothing else.
    pub const fn moves_other_money(self) -> bool {
        matches!(self, Fault::ShortApply | Fault::ShortApplyTimeout)
    }

    /// The profile named `name`.
    pub fn parse(name: &str) -> Result<Fault, String> {
        Fault::ALL
            .into_iter()
            .find(|f| f.name() == name)
            .ok_or_else(|| {
                format!(
                    "unknown fault profile {name:?} (known: {})",
                    names(&Fault::ALL)
                )
            })
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The money call a trial makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Action {
    /// `create_refund` on a payment. The rail refuses a second refund with the same receipt
    /// (`ilk_<sik>`), a backstop of its own behind Interlock's.
    Refund,
    /// `create_instant_settlement` from the balance. It takes no receipt: nothing on the rail
    /// stops a second settlement, so exactly-once rests on Interlock alone.
    Settlement,
}

impl Action {
    /// Both.
    pub const ALL: [Action; 2] = [Action::Refund, Action::Settlement];

    /// The name in the matrix.
    pub const fn name(self) -> &'static str {
        match self {
            Action::Refund => "refund",
            Action::Settlement => "settlement",
        }
    }

    /// The action named `name`.
    pub fn parse(name: &str) -> Result<Action, String> {
        Action::ALL
            .into_iter()
            .find(|a| a.name() == name)
            .ok_or_else(|| format!("unknown action {name:?} (known: refund, settlement)"))
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How many proxies a trial runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Shape {
    /// One proxy, killed and restarted.
    Single,
    /// Two proxies on one ledger (each with its own mock on one journal) racing the same
    /// refund; only the first is armed. Whether its kill lands depends on who wins the race.
    Race,
    /// Two proxies on one ledger; the first is stopped (SIGSTOP) at its point for longer than
    /// its lease while the agent retries on the second, then continued (SIGCONT): a process
    /// that wakes with stale knowledge (ADR 0003, A2).
    Stall,
    /// PostgreSQL only, a server of the trial's own: the proxy stops itself (SIGSTOP) at its
    /// point, the database server is SIGKILLed, the proxy is continued into the dead server,
    /// the server is started again (crash recovery from its WAL), and the agent retries on a
    /// fresh proxy.
    ServerKill,
}

/// Where the ledger is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Backend {
    /// A SQLite file in the trial's directory (the proxies of a race or a stall share it).
    Sqlite,
    /// A database of the trial's own on a real PostgreSQL server; each proxy runs in a
    /// working directory of its own, as on two hosts.
    Postgres,
}

impl Backend {
    /// Both.
    pub const ALL: [Backend; 2] = [Backend::Sqlite, Backend::Postgres];

    /// Its name on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }

    /// A backend by name.
    pub fn parse(name: &str) -> Result<Backend, String> {
        Backend::ALL
            .into_iter()
            .find(|b| b.name() == name)
            .ok_or_else(|| format!("unknown backend {name:?} (known: sqlite, postgres)"))
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One cell of the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cell {
    /// The kill point.
    pub point: Point,
    /// The rail's fault profile.
    pub fault: Fault,
    /// The money call.
    pub action: Action,
    /// One proxy, two racing, one stalled while the other serves, or the server killed.
    pub shape: Shape,
    /// Where the ledger is.
    pub backend: Backend,
}

impl Shape {
    /// Every shape, in the order the matrix runs them.
    pub const ALL: [Shape; 4] = [Shape::Single, Shape::Race, Shape::Stall, Shape::ServerKill];

    /// Its name on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            Shape::Single => "single",
            Shape::Race => "race",
            Shape::Stall => "stall",
            Shape::ServerKill => "server_kill",
        }
    }

    /// A shape by name.
    pub fn parse(name: &str) -> Result<Shape, String> {
        Shape::ALL
            .into_iter()
            .find(|s| s.name() == name)
            .ok_or_else(|| {
                format!("unknown shape {name:?} (known: single, race, stall, server_kill)")
            })
    }
}

impl Cell {
    /// The cell's name in tables: `refund: point × fault`, `race settlement: point × fault`,
    /// and `pg …` before each on PostgreSQL.
    pub fn label(&self) -> String {
        let backend = match self.backend {
            Backend::Sqlite => "",
            Backend::Postgres => "pg ",
        };
        let shape = match self.shape {
            Shape::Single => "",
            Shape::Race => "race ",
            Shape::Stall => "stall ",
            Shape::ServerKill => "server-kill ",
        };
        format!(
            "{backend}{shape}{}: {} × {}",
            self.action, self.point, self.fault
        )
    }

    /// Whether every trial of this cell must land its kill (or its stall). A race cell's armed
    /// process may lose the race and never reach its point; that is reported, not judged per
    /// trial.
    pub fn kill_required(&self) -> bool {
        self.shape != Shape::Race
    }
}

/// The stall cells' fault profiles: a healthy rail and an applied-but-unanswered call (the
/// one under which the stalled proxy is reconciling when `during_reconcile` stops it).
pub const STALL_FAULTS: [Fault; 2] = [Fault::None, Fault::TimeoutAfterApply];

/// Whether `point` × `fault` is a stall cell: the point must be on the first proxy's path
/// with the second one waiting. Boot recovery (`during_recovery`) runs before a proxy serves,
/// so no second proxy is waiting on it; a reconcile pass runs only after an ambiguous call.
pub fn stalls_at(point: Point, fault: Fault) -> bool {
    match point {
        Point::DuringRecovery => false,
        Point::DuringReconcile => fault == Fault::TimeoutAfterApply,
        _ => STALL_FAULTS.contains(&fault),
    }
}

/// The race cells' fault profiles: a healthy rail and an applied-but-unanswered call.
pub const RACE_FAULTS: [Fault; 2] = [Fault::None, Fault::TimeoutAfterApply];

/// The fault profiles of every PostgreSQL cell: a healthy rail, and an applied-but-unanswered
/// call (the one that leaves an intent for recovery and the reconciler to prove). The rail's
/// other faults meet the same driver on either backend; what differs here is the ledger.
pub const POSTGRES_FAULTS: [Fault; 2] = [Fault::None, Fault::TimeoutAfterApply];

/// The cells of `actions` × `points` × `faults` in `shapes` on `backend`: single-process
/// first, then the race cells under those of [`RACE_FAULTS`] that were chosen, then the stall
/// cells ([`stalls_at`]), then (PostgreSQL only) the server-kill cells at the chosen points of
/// [`Point::SERVER_KILL`]. On PostgreSQL every cell runs under [`POSTGRES_FAULTS`] only.
pub fn cells(
    backend: Backend,
    actions: &[Action],
    points: &[Point],
    faults: &[Fault],
    shapes: &[Shape],
) -> Vec<Cell> {
    let mut cells = Vec::new();
    for shape in Shape::ALL {
        if !shapes.contains(&shape) || (shape == Shape::ServerKill && backend != Backend::Postgres)
        {
            continue;
        }
        for &action in actions {
            for &point in points {
                for &fault in faults {
                    let chosen = match shape {
                        Shape::Single => Point::ALL.contains(&point),
                        Shape::Race => Point::ALL.contains(&point) && RACE_FAULTS.contains(&fault),
                        Shape::Stall => Point::ALL.contains(&point) && stalls_at(point, fault),
                        Shape::ServerKill => Point::SERVER_KILL.contains(&point),
                    };
                    let on_backend = backend == Backend::Sqlite || POSTGRES_FAULTS.contains(&fault);
                    if !chosen || !on_backend {
                        continue;
                    }
                    cells.push(Cell {
                        point,
                        fault,
                        action,
                        shape,
                        backend,
                    });
                }
            }
        }
    }
    cells
}

fn names<T: fmt::Display>(all: &[T]) -> String {
    all.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_engine_kill_point_is_in_the_matrix() {
        for name in interlock_engine::KILL_POINTS {
            assert!(
                Point::parse(name).is_ok(),
                "{name} is not run by the matrix"
            );
        }
        assert_eq!(Point::ALL.len(), interlock_engine::KILL_POINTS.len() + 1);
        assert!(Point::parse("mid_call").is_ok());
        for name in interlock_engine::PG_KILL_POINTS {
            let point = Point::parse(name).expect("a PostgreSQL kill point is known");
            assert!(
                Point::SERVER_KILL.contains(&point),
                "{name} has server-kill cells"
            );
        }
    }

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for point in Point::ALL {
            assert_eq!(Point::parse(point.name()), Ok(point));
        }
        for fault in Fault::ALL {
            assert_eq!(Fault::parse(fault.name()), Ok(fault));
        }
        for action in Action::ALL {
            assert_eq!(Action::parse(action.name()), Ok(action));
        }
        assert!(Action::parse("payout").is_err());
        assert!(
            Point::parse("before_wall")
                .unwrap_err()
                .contains("before_wal")
        );
        assert!(
            Fault::parse("http_500")
                .unwrap_err()
                .contains("http_5xx_applied")
        );
    }

    #[test]
    fn the_last_generation_is_clean_and_second_order_points_crash_twice() {
        for point in Point::ALL {
            let generations = point.generations();
            assert_eq!(generations.last(), Some(&None), "{point}");
            assert!(generations[0].is_some(), "{point}");
            let armed: Vec<&String> = generations.iter().flatten().collect();
            assert!(
                armed.iter().any(|spec| spec.starts_with(point.name())),
                "{point}"
            );
        }
        assert_eq!(Point::DuringRecovery.generations().len(), 3);
        assert_eq!(Point::BeforeWal.generations().len(), 2);
    }

    #[test]
    fn race_and_stall_cells_only_under_their_profiles() {
        let all = cells(
            Backend::Sqlite,
            &Action::ALL,
            &Point::ALL,
            &Fault::ALL,
            &Shape::ALL,
        );
        let count = |shape: Shape| all.iter().filter(|c| c.shape == shape).count();
        assert_eq!(
            count(Shape::Single),
            2 * Point::ALL.len() * Fault::ALL.len()
        );
        assert_eq!(count(Shape::Race), 2 * Point::ALL.len() * RACE_FAULTS.len());
        // Every point but boot recovery under both profiles, a reconcile pass under the one
        // that leaves a call ambiguous.
        assert_eq!(count(Shape::Stall), 2 * (6 * STALL_FAULTS.len() + 1));
        assert_eq!(
            count(Shape::ServerKill),
            0,
            "no server to kill under SQLite"
        );
        assert!(
            cells(
                Backend::Sqlite,
                &Action::ALL,
                &Point::ALL,
                &[Fault::Partition],
                &Shape::ALL
            )
            .iter()
            .all(|c| c.shape == Shape::Single)
        );
        assert!(
            cells(
                Backend::Sqlite,
                &Action::ALL,
                &Point::ALL,
                &Fault::ALL,
                &[Shape::Single]
            )
            .iter()
            .all(|c| c.shape == Shape::Single)
        );
        let labels: std::collections::BTreeSet<String> = all.iter().map(Cell::label).collect();
        assert_eq!(labels.len(), all.len(), "labels name cells apart");
    }

    #[test]
    fn postgres_cells_race_every_point_and_kill_the_server_at_its_three() {
        // As the command's default: every point, and the one of PostgreSQL only.
        let mut points = Point::ALL.to_vec();
        points.push(Point::PgCommit);
        let all = cells(
            Backend::Postgres,
            &Action::ALL,
            &points,
            &Fault::ALL,
            &Shape::ALL,
        );
        let count = |shape: Shape| all.iter().filter(|c| c.shape == shape).count();
        let faults = POSTGRES_FAULTS.len();
        assert_eq!(count(Shape::Single), 2 * Point::ALL.len() * faults);
        assert_eq!(count(Shape::Race), 2 * Point::ALL.len() * faults);
        assert_eq!(
            count(Shape::ServerKill),
            2 * Point::SERVER_KILL.len() * faults
        );
        assert!(all.iter().all(|c| c.backend == Backend::Postgres));
        assert!(
            all.iter()
                .all(|c| c.point != Point::PgCommit || c.shape == Shape::ServerKill),
            "pg_commit is a server-kill point only"
        );
        let labels: std::collections::BTreeSet<String> = all.iter().map(Cell::label).collect();
        assert_eq!(labels.len(), all.len(), "labels name cells apart");
        assert!(labels.contains("pg server-kill refund: pg_commit × none"));
    }
}
