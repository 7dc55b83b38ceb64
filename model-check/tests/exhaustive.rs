//! The bounded configurations, checked exhaustively by breadth-first search. State counts are
//! pinned (as stateright's own examples do) so that any change to the model shows up in review.

use interlock_model_check::protocol::{Config, Protocol};
use stateright::{Checker, Model};
use std::time::Instant;

fn check(name: &str, config: Config) -> usize {
    let started = Instant::now();
    let checker = Protocol { config }.checker().threads(2).spawn_bfs().join();
    let seconds = started.elapsed().as_secs_f64();
    let states = checker.unique_state_count();
    eprintln!(
        "{name}: {states} unique states ({} generated), max depth {}, {seconds:.1} s",
        checker.state_count(),
        checker.max_depth()
    );
    checker.assert_properties();
    states
}

#[test]
fn bounded_configuration_satisfies_every_property() {
    let states = check("bounded", Config::bounded());
    assert!(
        states >= 100_000,
        "the bounded configuration must explore at least 100,000 states, got {states}"
    );
    assert_eq!(states, 653_653);
}

#[test]
fn a_quarantining_partition_satisfies_every_property() {
    assert_eq!(check("partition", Config::partition()), PARTITION_STATES);
}

const PARTITION_STATES: usize = 119_266;

#[test]
fn a_stalled_lease_holder_satisfies_every_property() {
    assert_eq!(check("stall", Config::stall()), 64_121);
}
