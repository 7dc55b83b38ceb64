//! The suite's figures, per path: attack success, money at risk, utility under attack, false
//! blocks, exactly-once violations, duplicates, orphans, and the latency of the calls that
//! succeeded.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

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
