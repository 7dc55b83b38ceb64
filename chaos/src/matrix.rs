//! Many trials: run concurrently, summarised per cell, printed as a table and written to
//! `docs/RESULTS.chaos.md`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::plan::{Backend, Cell, Shape};
use crate::trial::{self, Report, Setup};
use crate::verdict::{KillVerdict, Kind, Violation};

/// The most trials per cell the command accepts.
pub const TRIALS_MAX: u32 = 1_000;
/// The most trials run at once.
pub const JOBS_MAX: usize = 64;
/// A race cell with at least this many trials must land its kill at least once. Each trial's
/// miss is judged on its own from the ledger (a lost race, or a kill that did not fire); a
/// cell whose armed proxy lost every race tested its point not at all, which the table must
/// not pass off as a result.
pub const RACE_TRIALS_FOR_A_KILL: u32 = 5;

/// What to run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The cells.
    pub cells: Vec<Cell>,
    /// Trials per cell.
    pub trials: u32,
    /// Trials per stall cell (each waits out a lease: longer than a kill's trial).
    pub stall_trials: u32,
    /// The seed every trial's inputs derive from.
    pub seed: u64,
    /// Trials at once.
    pub jobs: usize,
}

impl Plan {
    /// How many trials `cell` runs.
    pub fn trials_of(&self, cell: &Cell) -> u32 {
        match cell.shape {
            Shape::Stall => self.stall_trials,
            Shape::Single | Shape::Race | Shape::ServerKill => self.trials,
        }
    }
}

/// One cell's trials, summed up.
#[derive(Debug, Clone)]
pub struct CellResult {
    /// The cell.
    pub cell: Cell,
    /// Its trials' reports, in trial order.
    pub reports: Vec<Report>,
    /// Violations of the cell as a whole (a race cell that never landed its kill).
    pub cell_violations: Vec<Violation>,
}

impl CellResult {
    /// Kills that landed, and kills armed.
    pub fn kills(&self) -> (u32, u32) {
        self.reports.iter().fold((0, 0), |(landed, armed), r| {
            (landed + r.kills_landed(), armed + r.kills_armed())
        })
    }

    /// Kills the armed proxy of a race never reached, as the ledger shows.
    pub fn kills_lost_race(&self) -> u32 {
        self.reports.iter().map(Report::kills_lost_race).sum()
    }

    /// Every violation, per trial and of the cell.
    pub fn violations(&self) -> impl Iterator<Item = &Violation> {
        self.reports
            .iter()
            .flat_map(|r| r.violations.iter())
            .chain(self.cell_violations.iter())
    }
}

/// The whole run.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Per cell, in plan order.
    pub cells: Vec<CellResult>,
    /// Wall time.
    pub elapsed: Duration,
}

impl Outcome {
    /// Trials run.
    pub fn trials(&self) -> usize {
        self.cells.iter().map(|c| c.reports.len()).sum()
    }

    /// Violations found.
    pub fn violation_count(&self) -> usize {
        self.cells.iter().map(|c| c.violations().count()).sum()
    }
}

/// Runs `plan`, printing progress to stderr as trials finish.
pub async fn run(setup: Arc<Setup>, plan: &Plan) -> Outcome {
    assert!(
        (1..=TRIALS_MAX).contains(&plan.trials) && (1..=TRIALS_MAX).contains(&plan.stall_trials),
        "trials within 1..={TRIALS_MAX}"
    );
    assert!(
        plan.jobs >= 1 && plan.jobs <= JOBS_MAX,
        "jobs within 1..={JOBS_MAX}"
    );
    let started = Instant::now();
    let gate = Arc::new(tokio::sync::Semaphore::new(plan.jobs));
    let mut running = tokio::task::JoinSet::new();
    for (position, &cell) in plan.cells.iter().enumerate() {
        for index in 0..plan.trials_of(&cell) {
            let setup = Arc::clone(&setup);
            let gate = Arc::clone(&gate);
            let seed = plan.seed;
            running.spawn(async move {
                let _permit = gate
                    .acquire_owned()
                    .await
                    .expect("the gate is never closed");
                (position, trial::run(&setup, cell, index, seed).await)
            });
        }
    }
    let total: usize = plan.cells.iter().map(|c| plan.trials_of(c) as usize).sum();
    let mut by_cell: Vec<Vec<Report>> = vec![Vec::new(); plan.cells.len()];
    let mut done = 0usize;
    let mut cells_done = 0usize;
    while let Some(joined) = running.join_next().await {
        let (position, report) = joined.expect("a trial task does not panic");
        done += 1;
        by_cell[position].push(report);
        let report = by_cell[position].last().expect("just pushed");
        if by_cell[position].len() == plan.trials_of(&plan.cells[position]) as usize {
            cells_done += 1;
        }
        let verdict = if report.violations.is_empty() {
            "ok".to_owned()
        } else {
            report
                .violations
                .iter()
                .map(|v| v.kind.name())
                .collect::<Vec<_>>()
                .join(",")
        };
        eprintln!(
            "[{done}/{total} trials, {cells_done}/{} cells, {}s] {} #{}: {} → {} in {:.1}s: {verdict}",
            plan.cells.len(),
            started.elapsed().as_secs(),
            report.cell.label(),
            report.index,
            report.after_recovery,
            report.after_retry,
            report.elapsed.as_secs_f64(),
        );
        for kill in &report.kills {
            if let KillVerdict::LostRace(why) = &kill.verdict {
                eprintln!("    {} [{}] lost the race: {why}", kill.process, kill.spec);
            }
        }
        if !report.violations.is_empty() {
            for v in &report.violations {
                eprintln!("    {}: {}", v.kind, v.detail);
            }
            for line in &report.log {
                eprintln!("    | {line}");
            }
            if let Some(dir) = &report.dir {
                eprintln!("    kept {}", dir.display());
            }
        }
    }
    let cells = plan
        .cells
        .iter()
        .zip(by_cell)
        .map(|(&cell, mut reports)| {
            reports.sort_by_key(|r| r.index);
            let landed: u32 = reports.iter().map(Report::kills_landed).sum();
            let mut cell_violations = Vec::new();
            if cell.shape != Shape::Single
                && plan.trials_of(&cell) >= RACE_TRIALS_FOR_A_KILL
                && landed == 0
            {
                cell_violations.push(Violation {
                    kind: Kind::KillDidNotFire,
                    detail: format!(
                        "{}: the armed proxy's kill landed in none of {} trials",
                        cell.label(),
                        plan.trials
                    ),
                });
            }
            CellResult {
                cell,
                reports,
                cell_violations,
            }
        })
        .collect();
    Outcome {
        cells,
        elapsed: started.elapsed(),
    }
}

/// `20× 1·APPLIED` or `12× 1·APPLIED, 8× 0·CONFIRMED_NOT_APPLIED`.
fn distribution<'a>(values: impl Iterator<Item = &'a str>) -> String {
    let mut counts: BTreeMap<&str, u32> = BTreeMap::new();
    for value in values {
        *counts.entry(value).or_default() += 1;
    }
    let mut counts: Vec<(&str, u32)> = counts.into_iter().collect();
    counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    counts
        .iter()
        .map(|(value, n)| format!("{n}× {value}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The per-cell table, in Markdown (readable as plain text too).
pub fn table(outcome: &Outcome) -> String {
    let mut out = String::new();
    out.push_str(
        "| cell | trials | kills landed | after recovery | before operator | after retry | violations |\n",
    );
    out.push_str("| --- | ---: | ---: | --- | --- | --- | --- |\n");
    for cell in &outcome.cells {
        let (landed, armed) = cell.kills();
        let mut kinds: BTreeMap<Kind, u32> = BTreeMap::new();
        for v in cell.violations() {
            *kinds.entry(v.kind).or_default() += 1;
        }
        let violations = if kinds.is_empty() {
            "0".to_owned()
        } else {
            kinds
                .iter()
                .map(|(kind, n)| format!("{n} {kind}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let lost = cell.kills_lost_race();
        let kills = if lost == 0 {
            format!("{landed}/{armed}")
        } else {
            format!("{landed}/{armed} ({lost} lost the race)")
        };
        let _ = writeln!(
            out,
            "| {} | {} | {kills} | {} | {} | {} | {violations} |",
            cell.cell.label(),
            cell.reports.len(),
            distribution(cell.reports.iter().map(|r| r.after_recovery.as_str())),
            distribution(cell.reports.iter().map(|r| r.before_operator.as_str())),
            distribution(cell.reports.iter().map(|r| r.after_retry.as_str())),
        );
    }
    out
}

/// The totals line.
pub fn totals(outcome: &Outcome) -> String {
    let (landed, armed) = outcome.cells.iter().fold((0, 0), |(l, a), c| {
        let (cl, ca) = c.kills();
        (l + cl, a + ca)
    });
    let single_missed = outcome
        .cells
        .iter()
        .filter(|c| c.cell.kill_required())
        .map(|c| {
            let (l, a) = c.kills();
            a - l - c.kills_lost_race()
        })
        .sum::<u32>();
    let stalls_blunt: u32 = outcome
        .cells
        .iter()
        .filter(|c| c.cell.shape == Shape::Stall)
        .map(CellResult::kills_lost_race)
        .sum();
    let races = outcome.cells.iter().filter(|c| c.cell.shape == Shape::Race);
    let (race_missed, race_lost) = races.fold((0, 0), |(missed, lost), c| {
        let (l, a) = c.kills();
        (missed + a - l, lost + c.kills_lost_race())
    });
    let race_not_fired = race_missed - race_lost;
    format!(
        "{cells} cells, {trials} trials, kills landed {landed}/{armed} (missed: {single_missed} in single-proxy and stall cells, where every kill or stall must land, and {stalls_blunt} stalls that landed but did not bite (the write beat the stop); {race_missed} in race cells, of which the ledger shows {race_lost} lost the race and {race_not_fired} did not fire), {violations} violations, {secs:.0} s",
        cells = outcome.cells.len(),
        trials = outcome.trials(),
        violations = outcome.violation_count(),
        secs = outcome.elapsed.as_secs_f64()
    )
}

/// The heading the PostgreSQL part of `docs/RESULTS.chaos.md` starts at: a `--backend
/// postgres` run replaces the file from here on, a SQLite run everything before it.
pub const POSTGRES_HEADING: &str = "## PostgreSQL cells";

/// The results file with `backend`'s part replaced by `part` and the other backend's part of
/// `existing` (if any) kept as it was.
pub fn merge_results(existing: Option<&str>, backend: Backend, part: &str) -> String {
    let marker = format!("\n{POSTGRES_HEADING}\n");
    let (sqlite, postgres) = match existing.and_then(|text| text.find(&marker)) {
        Some(at) => {
            let text = existing.expect("found in it");
            (Some(&text[..at]), Some(&text[at + 1..]))
        }
        None => (existing, None),
    };
    match backend {
        Backend::Sqlite => match postgres {
            Some(postgres) => format!("{}\n{postgres}", part.trim_end()),
            None => part.to_owned(),
        },
        Backend::Postgres => {
            let sqlite = sqlite.map_or_else(
                || "# Chaos matrix results\n\nThe SQLite cells have not been run into this file yet: `cargo run -p interlock-chaos --release -- matrix --jobs 14`.\n".to_owned(),
                |text| text.trim_end().to_owned() + "\n",
            );
            format!("{sqlite}\n{}", part.trim_end()) + "\n"
        }
    }
}

/// One backend's part of `docs/RESULTS.chaos.md`: machine-written, with the date, where the
/// binaries came from (`provenance`, one sentence) and the command.
pub fn results_markdown(
    outcome: &Outcome,
    plan: &Plan,
    backend: Backend,
    command: &str,
    provenance: &str,
    date: &str,
) -> String {
    let mut out = String::new();
    match backend {
        Backend::Sqlite => {
            out.push_str("# Chaos matrix results\n\n");
            out.push_str("Machine-written by `interlock-chaos matrix`; do not edit by hand, run the command again. The SQLite cells come first; the PostgreSQL cells, from a run of their own (`--backend postgres`), follow under their heading.\n\n");
        }
        Backend::Postgres => {
            let _ = writeln!(out, "{POSTGRES_HEADING}\n");
            out.push_str("Machine-written by `interlock-chaos matrix --backend postgres`. The same trials on a real PostgreSQL server (a throwaway cluster the run starts: `initdb`, a Unix socket): each trial's ledger is a database of its own, and each proxy runs in a working directory of its own, as on two hosts; `race` cells race the two over the one database. A `server-kill` cell has a server of its own: its proxy stops itself (SIGSTOP) inside the first batch's `COMMIT` (`pg_commit`: the intent and its `IN_FLIGHT` attempt written, the `COMMIT` not sent), just after it (`after_wal_before_call`: the rail not yet called, and the proxy, held past its moment, must not send late), or with the rail's answer in memory (`during_call`: the outcome's commit meets the dead server), the server is SIGKILLed (the postmaster, then every process it started), the proxy is continued into the dead server and must exit without calling the rail again, the server is started again (crash recovery from its WAL), and the agent retries on a fresh proxy. `kills landed` there counts the server kills made at the point.\n\n");
        }
    }
    let _ = writeln!(out, "- date (UTC): {date}");
    let _ = writeln!(out, "- binaries: {provenance}");
    let _ = writeln!(out, "- command: `{command}`");
    let _ = writeln!(
        out,
        "- seed: {}, trials per cell: {} ({} per stall cell), trials at once: {}",
        plan.seed, plan.trials, plan.stall_trials, plan.jobs
    );
    let _ = writeln!(out, "- **total: {}**\n", totals(outcome));
    if backend == Backend::Sqlite {
        out.push_str("Each trial: a fresh directory, the real `interlock serve` (built with kill points) in front of the real `interlock-rail-mock`, one refund, the armed point SIGKILLs the proxy, restarts with boot recovery, the agent retries, and the verdict is read from the rail's journal and the ledger. A stall cell instead SIGSTOPs the armed proxy at its point past its lease while the agent retries on a second proxy over the same ledger, then SIGCONTs it; `kills landed` there counts stalls that landed. `after recovery`, `before operator` and `after retry` are `entities on the rail·intent state`: once the restarted proxy serves, when the intent first rests after the agent's retry (what the proxy reached on its own), and at the end. `chaos/README.md` explains the cells, the generations of each trial and every violation kind.\n\n");
        out.push_str("Faults the matrix does not reach as cells are measured elsewhere, each machine-written too: a full or failing disk under the ledger, wall-clock jumps and a hostile upstream in `docs/RESULTS.faults.md` (`scripts/fault-figures.sh`, the tests of `proxy/tests/{disk,clock,hostile}.rs` with their figures), an hour of mixed load with kills in `docs/RESULTS.soak.md` (`interlock-chaos soak`).\n\n");
    }
    out.push_str(&table(outcome));
    let failures: Vec<(&Report, &Violation)> = outcome
        .cells
        .iter()
        .flat_map(|c| c.reports.iter())
        .flat_map(|r| r.violations.iter().map(move |v| (r, v)))
        .collect();
    let cell_failures: Vec<&Violation> = outcome
        .cells
        .iter()
        .flat_map(|c| c.cell_violations.iter())
        .collect();
    if !failures.is_empty() || !cell_failures.is_empty() {
        out.push_str("\n## Violations\n\n");
        for (report, v) in failures {
            let _ = writeln!(
                out,
                "- {} #{}: {} — {}",
                report.cell.label(),
                report.index,
                v.kind,
                v.detail
            );
        }
        for v in cell_failures {
            let _ = writeln!(out, "- {}: {}", v.kind, v.detail);
        }
    }
    out
}

/// Today's date from the system clock, as `YYYY-MM-DD HH:MM` (UTC). The chaos runner is not on
/// the money path; reading the clock for a report's header is fine.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    utc(secs)
}

/// Unix seconds as `YYYY-MM-DD HH:MM` (UTC, proleptic Gregorian).
pub fn utc(secs: u64) -> String {
    let days = i64::try_from(secs / 86_400).expect("u64 seconds / 86400 fits i64");
    let (hour, minute) = ((secs % 86_400) / 3_600, (secs % 3_600) / 60);
    // Days since 1970-01-01 to a civil date, counted in eras of 400 years from 0000-03-01.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {hour:02}:{minute:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distributions_put_the_most_common_first() {
        let values = ["1·APPLIED", "0·UNKNOWN", "1·APPLIED"];
        assert_eq!(
            distribution(values.into_iter()),
            "2× 1·APPLIED, 1× 0·UNKNOWN"
        );
        assert_eq!(distribution(std::iter::empty()), "");
    }

    #[test]
    fn each_backend_replaces_its_own_part_and_keeps_the_other() {
        let sqlite_v1 = "# Chaos matrix results\n\nsqlite one\n";
        let pg_v1 = format!("{POSTGRES_HEADING}\n\npg one\n");
        let both = merge_results(Some(sqlite_v1), Backend::Postgres, &pg_v1);
        assert!(both.starts_with(sqlite_v1));
        assert!(both.ends_with(&pg_v1));
        let sqlite_v2 = "# Chaos matrix results\n\nsqlite two\n";
        let again = merge_results(Some(&both), Backend::Sqlite, sqlite_v2);
        assert!(again.contains("sqlite two") && !again.contains("sqlite one"));
        assert!(
            again.ends_with(&pg_v1),
            "the PostgreSQL part is kept: {again}"
        );
        let pg_v2 = format!("{POSTGRES_HEADING}\n\npg two\n");
        let last = merge_results(Some(&again), Backend::Postgres, &pg_v2);
        assert!(last.contains("sqlite two") && last.contains("pg two") && !last.contains("pg one"));
        assert_eq!(last.matches(POSTGRES_HEADING).count(), 1);
        assert_eq!(merge_results(None, Backend::Sqlite, sqlite_v1), sqlite_v1);
        assert!(merge_results(None, Backend::Postgres, &pg_v1).contains("have not been run"));
    }

    #[test]
    fn unix_seconds_become_the_right_civil_date() {
        assert_eq!(utc(0), "1970-01-01 00:00");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00");
        assert_eq!(utc(1_764_633_600 + 3_600 * 13 + 60 * 7), "2025-12-02 13:07");
        assert_eq!(utc(4_107_542_399), "2100-02-28 23:59");
    }
}
