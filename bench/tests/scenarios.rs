//! Every scenario runs through `interlock serve` and its assertion is checked, so a regression
//! in any gate, in the exactly-once engine or in recovery fails here: the bounds on money and
//! entities catch an attack that got through, and `expect.gated_reasons` catches a gate that
//! stopped answering even where the rail would refuse the call itself. The direct path (what
//! the attacks do without a gate) is the benchmark's business: `interlock-bench scenarios`.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use interlock_bench::bins::Bins;
use interlock_bench::scenario::model::{Family, KILL_POINTS, load_dir};
use interlock_bench::scenario::run::{PathKind, Suite};
use interlock_bench::scenario::summary::summarise;
use interlock_bench::scenario::{self, SuiteOptions};

/// Scenarios run at once: they spend most of their time waiting on timeouts, leases and the
/// naive harness's back-off, not on the two cores.
const TEST_JOBS: usize = 8;

#[test]
fn the_suite_is_thirty_scenarios_in_five_families() {
    let scenarios = load_dir(&scenario::scenarios_dir()).expect("every scenario file parses");
    let count = |family| scenarios.iter().filter(|s| s.family == family).count();
    assert_eq!(scenarios.len(), 30);
    assert_eq!(
        Family::ALL.map(count),
        [7, 10, 4, 3, 6],
        "scenarios per family A..E"
    );
    // The families the issue names each have the cases it names.
    let kills = scenarios.iter().filter(|s| s.faults.kill.is_some()).count();
    let races = scenarios.iter().filter(|s| s.workers > 1).count();
    let distinct = scenarios.iter().filter(|s| {
        s.task
            .steps
            .iter()
            .any(|c| c.args.contains_key("interlock_distinct_reason"))
    });
    assert!(kills >= 3 && races >= 1 && distinct.count() >= 1);
    assert!(
        scenarios
            .iter()
            .filter(|s| s.family == Family::E)
            .all(|s| s.injection.is_none() && s.faults.rail.is_empty())
    );
    // The parser requires them; checked here too because the CI claim rests on them.
    let unnamed: Vec<&str> = scenarios
        .iter()
        .filter(|s| s.family.is_attack() && s.expect.gated_reasons.is_empty())
        .map(|s| s.id.as_str())
        .collect();
    assert!(
        unnamed.is_empty(),
        "attack scenarios without gated_reasons: {unnamed:?}"
    );
}

#[test]
fn kill_points_are_the_engines_and_the_proxys() {
    let mut expected: Vec<&str> = interlock_engine::KILL_POINTS.to_vec();
    expected.push(interlock::upstream::MID_CALL_KILL_POINT);
    assert_eq!(KILL_POINTS, expected.as_slice());
}

#[test]
fn every_scenario_holds_its_assertion_through_interlock() {
    let started = Instant::now();
    let bench = Path::new(env!("CARGO_BIN_EXE_interlock-bench"));
    let bins = Bins::build_beside(bench)
        .and_then(|bins| bins.with_failpoints(None))
        .expect("the binaries build");
    let scenarios = load_dir(&scenario::scenarios_dir()).expect("the scenarios parse");
    let root = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("interlock-bench")
        .join(format!("scenarios-{}", std::process::id()));
    let suite = Suite::prepare(bins, &scenario::scenarios_dir(), root.clone())
        .expect("the mandate pins and validates");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let agent = scenario::harness("naive").unwrap();
    let options = SuiteOptions {
        jobs: TEST_JOBS,
        direct: false,
    };
    let results = runtime
        .block_on(scenario::run_suite(
            Arc::new(suite),
            scenarios,
            agent,
            options,
        ))
        .expect("every scenario runs");
    assert_eq!(results.len(), 30);
    // Named apart from the other failures: this is the check a regressed gate fails when the
    // rail would have refused the call anyway.
    let codes_missing: Vec<String> = results
        .iter()
        .filter(|r| !r.gated.1.codes_missing.is_empty())
        .map(|r| {
            let missing: Vec<String> = r
                .gated
                .1
                .codes_missing
                .iter()
                .map(ToString::to_string)
                .collect();
            format!("{}: {}", r.scenario.id, missing.join(", "))
        })
        .collect();
    let failures: Vec<String> = results
        .iter()
        .filter(|r| !r.gated.1.passed())
        .map(|r| {
            format!(
                "{}: {} (files in {})",
                r.scenario.id,
                r.gated.1.failures.join("; "),
                r.gated.0.dir.display()
            )
        })
        .collect();
    assert!(
        failures.is_empty(),
        "gated assertions failed:\n{}\nreason codes missing from the gated answers: {}",
        failures.join("\n"),
        if codes_missing.is_empty() {
            "none".to_owned()
        } else {
            codes_missing.join("; ")
        }
    );
    let gated = summarise(&results, PathKind::Gated).unwrap();
    assert_eq!(gated.attack_successes, 0);
    assert_eq!(gated.false_blocks, 0);
    assert_eq!(gated.exactly_once_violations, 0);
    assert_eq!(gated.unstamped, 0);
    eprintln!(
        "30 scenarios gated in {:.1} s: attack success {:.1}%, utility under attack {:.1}%, false blocks {:.1}%",
        started.elapsed().as_secs_f64(),
        gated.attack_success_rate(),
        gated.utility_under_attack(),
        gated.false_block_rate()
    );
    let _ = std::fs::remove_dir_all(root);
}
