//! The scenario benchmark: thirty attack and failure scenarios in five families
//! (`bench/scenarios/*.yaml`, described in [`model`]), each run by the same harness on the
//! same seed twice: once against the mock rail directly and once through `interlock serve`
//! ([`run`]). The rail's journal is the ground truth ([`journal`]); each run is held against
//! the scenario's assertion ([`judge`]) and the suite's figures are [`summary`]'s: attack
//! success, money at risk, utility under attack and false blocks side by side, so that
//! refusing everything can never pass as a result. [`report`] prints and writes them.
//!
//! Harnesses implement [`harness::Agent`]; the one that exists is [`naive::Naive`], a
//! scripted strawman.

pub mod harness;
pub mod journal;
pub mod judge;
pub mod model;
pub mod naive;
pub mod report;
pub mod run;
pub mod summary;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use harness::Agent;
use model::Scenario;
use run::{PathKind, Suite};
use summary::ScenarioResult;

use crate::Res;

/// The mandate template in the scenarios directory: the one mandate every gated run uses.
pub const MANDATE_FILE: &str = "mandate.yaml";
/// Most scenarios run at once.
pub const JOBS_MAX: usize = 16;

/// `bench/scenarios/`.
pub fn scenarios_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios")
}

/// The harness called `name`.
pub fn harness(name: &str) -> Res<Arc<dyn Agent>> {
    match name {
        "naive" => Ok(Arc::new(naive::Naive)),
        other => Err(format!(
            "no harness {other:?}; there is `naive` (a model-driven one implements scenario::harness::Agent)"
        )),
    }
}

/// The scenarios named in `only` (all when empty), refusing ids that do not exist.
pub fn select(all: Vec<Scenario>, only: &[String]) -> Res<Vec<Scenario>> {
    if only.is_empty() {
        return Ok(all);
    }
    for id in only {
        if !all.iter().any(|s| &s.id == id) {
            return Err(format!("--only: no scenario {id}"));
        }
    }
    Ok(all.into_iter().filter(|s| only.contains(&s.id)).collect())
}

/// How a suite runs.
#[derive(Debug, Clone, Copy)]
pub struct SuiteOptions {
    /// Scenarios run at once (each runs its two paths one after the other).
    pub jobs: usize,
    /// Whether to run the direct path too (the test suite runs only the gated one).
    pub direct: bool,
}

/// Runs every scenario with `agent` and measures each path.
pub async fn run_suite(
    suite: Arc<Suite>,
    scenarios: Vec<Scenario>,
    agent: Arc<dyn Agent>,
    options: SuiteOptions,
) -> Res<Vec<ScenarioResult>> {
    let jobs = options.jobs.clamp(1, JOBS_MAX);
    let permits = Arc::new(tokio::sync::Semaphore::new(jobs));
    let mut tasks = Vec::new();
    for scenario in scenarios {
        let (suite, agent, permits) =
            (Arc::clone(&suite), Arc::clone(&agent), Arc::clone(&permits));
        let scenario = Arc::new(scenario);
        tasks.push(tokio::spawn(async move {
            let _permit = permits.acquire().await.map_err(|e| e.to_string())?;
            run_scenario(&suite, scenario, &agent, options.direct).await
        }));
    }
    let mut results = Vec::new();
    for task in tasks {
        results.push(
            task.await
                .map_err(|e| format!("a scenario task failed: {e}"))??,
        );
    }
    results.sort_by(|a, b| a.scenario.id.cmp(&b.scenario.id));
    Ok(results)
}

async fn run_scenario(
    suite: &Suite,
    scenario: Arc<Scenario>,
    agent: &Arc<dyn Agent>,
    direct: bool,
) -> Res<ScenarioResult> {
    let mut measured = Vec::new();
    let paths: &[PathKind] = if direct {
        &[PathKind::Direct, PathKind::Gated]
    } else {
        &[PathKind::Gated]
    };
    for &path in paths {
        let started = Instant::now();
        let run = suite.run_path(&scenario, path, agent).await?;
        let measure = judge::measure(&scenario, &run)?;
        eprintln!(
            "{} {:<6} {:>5.1} s  moved {} in {} entities, task {}, {}",
            scenario.id,
            path.name(),
            started.elapsed().as_secs_f64(),
            report::rupees(measure.money_moved),
            measure.entities,
            if measure.task_completed {
                "done"
            } else {
                "not done"
            },
            if measure.passed() {
                "assertion held".to_owned()
            } else {
                format!("assertion failed: {}", measure.failures.join("; "))
            }
        );
        measured.push((run, measure));
    }
    let gated = measured.pop().expect("the gated path always runs");
    Ok(ScenarioResult {
        scenario,
        direct: measured.pop(),
        gated,
    })
}
