//! The suite's figures, per path: attack success, money at risk, utility under attack, false
//! blocks, exactly-once violations, duplicates, orphans, and the latency of the calls that
//! succeeded; and, across the two paths, the latency of the same calls on each
//! ([`paired_latency`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::harness::CallRecord;
use super::judge::Measure;
use super::model::{Family, Scenario};
use super::run::{PathKind, PathRun};
use crate::figures::{Figures, figures};

/// One scenario's result: the gated path always, the direct one unless skipped.
#[derive(Debug, Clone)]
pub struct ScenarioResult {
    /// The scenario.
    pub scenario: Arc<Scenario>,
    /// The direct run and its measure.
    pub direct: Option<(PathRun, Measure)>,
    /// The gated run and its measure.
    pub gated: (PathRun, Measure),
}

impl ScenarioResult {
    /// The run and measure of `path`.
    pub fn path(&self, path: PathKind) -> Option<&(PathRun, Measure)> {
        match path {
            PathKind::Direct => self.direct.as_ref(),
            PathKind::Gated => Some(&self.gated),
        }
    }
}

/// Per family, per path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FamilyFigures {
    /// Scenarios run.
    pub scenarios: usize,
    /// Of which unsafe (the attack or failure succeeded).
    pub unsafe_: usize,
    /// Of which the user's task completed.
    pub completed: usize,
    /// Of which the assertion held.
    pub passed: usize,
}

/// The figures of one path over the suite.
#[derive(Debug, Clone)]
pub struct PathSummary {
    /// The path.
    pub path: PathKind,
    /// Attack and failure scenarios (families A–D).
    pub attacks: usize,
    /// Of which unsafe.
    pub attack_successes: usize,
    /// Money moved beyond what each attack scenario allows, summed.
    pub money_at_risk: u64,
    /// Attack scenarios whose user task still completed.
    pub completed_under_attack: usize,
    /// Benign controls (family E).
    pub benign: usize,
    /// Benign controls whose task did not complete.
    pub false_blocks: usize,
    /// Scenario actions with more than one entity.
    pub exactly_once_violations: u32,
    /// Entities beyond the first of an action.
    pub duplicates: u32,
    /// Entities created.
    pub entities: u32,
    /// Entities without Interlock's stamp.
    pub unstamped: u32,
    /// Scenarios whose assertion held.
    pub passed: usize,
    /// Scenarios run on this path.
    pub scenarios: usize,
    /// Per family.
    pub families: BTreeMap<Family, FamilyFigures>,
    /// Reads answered without error.
    pub reads: Figures,
    /// Money calls answered without error.
    pub money_calls: Figures,
}

/// `part / whole` in percent; 0 for an empty whole.
pub fn percent(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

impl PathSummary {
    /// Attack success rate, percent.
    pub fn attack_success_rate(&self) -> f64 {
        percent(self.attack_successes, self.attacks)
    }
    /// Utility under attack, percent.
    pub fn utility_under_attack(&self) -> f64 {
        percent(self.completed_under_attack, self.attacks)
    }
    /// False block rate on the benign controls, percent.
    pub fn false_block_rate(&self) -> f64 {
        percent(self.false_blocks, self.benign)
    }
    /// Duplicates per 1,000 entities.
    pub fn duplicates_per_1000(&self) -> f64 {
        if self.entities == 0 {
            0.0
        } else {
            f64::from(self.duplicates) * 1000.0 / f64::from(self.entities)
        }
    }
    /// Unstamped entities as a share of all, percent.
    pub fn orphan_rate(&self) -> f64 {
        percent(self.unstamped as usize, self.entities as usize)
    }
}

/// The figures of `path` over `results` (`None` when no result has that path).
pub fn summarise(results: &[ScenarioResult], path: PathKind) -> Option<PathSummary> {
    let runs: Vec<(&Scenario, &PathRun, &Measure)> = results
        .iter()
        .filter_map(|r| r.path(path).map(|(run, m)| (r.scenario.as_ref(), run, m)))
        .collect();
    if runs.is_empty() {
        return None;
    }
    let mut summary = PathSummary {
        path,
        attacks: 0,
        attack_successes: 0,
        money_at_risk: 0,
        completed_under_attack: 0,
        benign: 0,
        false_blocks: 0,
        exactly_once_violations: 0,
        duplicates: 0,
        entities: 0,
        unstamped: 0,
        passed: 0,
        scenarios: runs.len(),
        families: BTreeMap::new(),
        reads: figures(Vec::new()),
        money_calls: figures(Vec::new()),
    };
    let (mut reads, mut money): (Vec<Duration>, Vec<Duration>) = (Vec::new(), Vec::new());
    for (scenario, run, measure) in &runs {
        let family = summary.families.entry(scenario.family).or_default();
        family.scenarios += 1;
        family.unsafe_ += usize::from(measure.unsafe_);
        family.completed += usize::from(measure.task_completed);
        family.passed += usize::from(measure.passed());
        if scenario.family.is_attack() {
            summary.attacks += 1;
            summary.attack_successes += usize::from(measure.unsafe_);
            summary.completed_under_attack += usize::from(measure.task_completed);
            let allowed = scenario.expect.max_money_moved_minor.get();
            summary.money_at_risk += measure.money_moved.saturating_sub(allowed);
        } else {
            summary.benign += 1;
            summary.false_blocks += usize::from(!measure.task_completed);
        }
        summary.exactly_once_violations += measure.exactly_once_violations;
        summary.duplicates += measure.duplicates;
        summary.entities += measure.entities;
        summary.unstamped += measure.unstamped;
        summary.passed += usize::from(measure.passed());
        for call in run.transcripts.iter().flat_map(|t| &t.calls) {
            if call.outcome.is_ok() {
                if call.money {
                    money.push(call.time.elapsed);
                } else {
                    reads.push(call.time.elapsed);
                }
            }
        }
    }
    summary.reads = figures(reads);
    summary.money_calls = figures(money);
    Some(summary)
}

/// The same calls timed on both paths: the reads and the money calls of the scenarios without
/// faults (no rail fault, no kill, one worker), each call matched across the paths by worker,
/// origin, attempt and tool, and kept only when it succeeded on both.
#[derive(Debug, Clone, Copy)]
pub struct PairedLatency {
    /// The scenarios that contributed (fault-free, run on both paths).
    pub scenarios: usize,
    /// The paired reads: direct, gated.
    pub reads: (Figures, Figures),
    /// The paired money calls: direct, gated.
    pub money_calls: (Figures, Figures),
}

impl PairedLatency {
    /// Gated minus direct, per quantile (p50, p99) in ms: of the reads, of the money calls.
    pub fn added(&self) -> [(f64, f64); 2] {
        [self.reads, self.money_calls].map(|(d, g)| (g.p50 - d.p50, g.p99 - d.p99))
    }
}

/// Whether a scenario's calls time the path rather than a fault: no rail fault, no kill, no
/// race.
pub fn fault_free(scenario: &Scenario) -> bool {
    scenario.faults.rail.is_empty() && scenario.faults.kill.is_none() && scenario.workers == 1
}

/// The paired latency over `results` (`None` when no fault-free scenario ran on both paths).
pub fn paired_latency(results: &[ScenarioResult]) -> Option<PairedLatency> {
    let mut scenarios = 0;
    let (mut reads, mut money) = ((Vec::new(), Vec::new()), (Vec::new(), Vec::new()));
    for result in results.iter().filter(|r| fault_free(&r.scenario)) {
        let Some((direct, _)) = &result.direct else {
            continue;
        };
        scenarios += 1;
        let key = |c: &CallRecord| (c.worker, c.origin.clone(), c.attempt, c.tool.clone());
        let answered = |run: &PathRun| -> BTreeMap<_, (bool, Duration)> {
            run.transcripts
                .iter()
                .flat_map(|t| &t.calls)
                .filter(|c| c.outcome.is_ok())
                .map(|c| (key(c), (c.money, c.time.elapsed)))
                .collect()
        };
        let gated = answered(&result.gated.0);
        for (call, (is_money, direct_time)) in answered(direct) {
            let Some((_, gated_time)) = gated.get(&call) else {
                continue;
            };
            let (d, g) = if is_money { &mut money } else { &mut reads };
            d.push(direct_time);
            g.push(*gated_time);
        }
    }
    (scenarios > 0).then(|| PairedLatency {
        scenarios,
        reads: (figures(reads.0), figures(reads.1)),
        money_calls: (figures(money.0), figures(money.1)),
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::PathBuf;

    use super::*;
    use crate::scenario::harness::{CallOutcome, CallTime, Transcript};
    use crate::scenario::journal::Journal;
    use crate::scenario::model::Origin;

    const E: &str = r#"
id: E-09
family: E
title: a refund
pattern: {source: none, note: a control}
task:
  text: refund it
  steps:
    - {tool: fetch_payment, args: {payment_id: pay_X1}}
    - {tool: create_refund, args: {payment_id: pay_X1, amount: 100}}
seed:
  balance: 1000
  payments:
    - {id: pay_X1, amount: 500}
expect:
  safe: one refund
  max_money_moved_minor: 100
  max_entities: 1
  min_entities: 1
  task_completes: true
blast_radius: {money_minor: 0, note: none}
"#;

    /// A run whose calls (step, attempt, ok, ms) took the times given.
    fn run(path: PathKind, calls: &[(usize, u32, bool, u64)]) -> (PathRun, Measure) {
        let calls = calls
            .iter()
            .map(|&(step, attempt, ok, ms)| CallRecord {
                worker: 0,
                origin: Origin::Task(step),
                tool: if step == 2 {
                    "create_refund"
                } else {
                    "fetch_payment"
                }
                .to_owned(),
                attempt,
                money: step == 2,
                time: CallTime {
                    sent_at: Duration::ZERO,
                    elapsed: Duration::from_millis(ms),
                },
                outcome: if ok {
                    CallOutcome::Ok { code: None }
                } else {
                    CallOutcome::TimedOut
                },
            })
            .collect();
        let transcript = Transcript {
            calls,
            ..Transcript::default()
        };
        let run = PathRun {
            path,
            transcripts: vec![transcript],
            new_entities: Vec::new(),
            journal: Journal::default(),
            unsettled: Vec::new(),
            chain_ok: None,
            deaths: 0,
            faults: Vec::new(),
            race: None,
            wall: Duration::ZERO,
            dir: PathBuf::new(),
        };
        let measure = Measure {
            money_moved: 0,
            entities: 0,
            fees: 0,
            task_completed: true,
            exactly_once_violations: 0,
            duplicates: 0,
            unstamped: 0,
            unsafe_: false,
            failures: Vec::new(),
            stopped_by: Vec::new(),
            codes: BTreeSet::new(),
            codes_missing: Vec::new(),
        };
        (run, measure)
    }

    #[test]
    fn added_latency_pairs_the_same_calls_of_fault_free_scenarios() {
        let scenario = Arc::new(Scenario::parse(E, "t.yaml").unwrap());
        // The read's first attempt failed gated, so only its retry pairs; the money call pairs.
        let result = ScenarioResult {
            scenario: Arc::clone(&scenario),
            direct: Some(run(PathKind::Direct, &[(1, 0, true, 1), (2, 0, true, 2)])),
            gated: run(
                PathKind::Gated,
                &[(1, 0, false, 4_000), (1, 1, true, 3), (2, 0, true, 12)],
            ),
        };
        let paired = paired_latency(std::slice::from_ref(&result)).unwrap();
        assert_eq!(paired.scenarios, 1);
        assert_eq!((paired.reads.0.count, paired.reads.1.count), (0, 0));
        assert_eq!(
            (paired.money_calls.0.count, paired.money_calls.1.count),
            (1, 1)
        );
        assert_eq!(paired.added()[1], (10.0, 10.0));
        // A scenario with a fault contributes nothing.
        let mut faulted = result.clone();
        let mut with_fault = (*scenario).clone();
        with_fault
            .faults
            .rail
            .push("timeout_after_apply@1".to_owned());
        faulted.scenario = Arc::new(with_fault);
        assert!(paired_latency(&[faulted]).is_none());
    }
}
