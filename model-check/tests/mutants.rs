//! Mutation tests: each planted bug must make the checker report a counterexample. A property no
//! mutant can break would be a property that checks nothing.

use interlock_model_check::protocol::{Config, Mutant, Protocol};
use stateright::{Checker, Expectation, HasDiscoveries, Model};

/// Runs the bounded configuration with `mutant` until the first failure; returns the broken
/// property and the counterexample's length in actions.
fn counterexample(mutant: Mutant) -> Option<(&'static str, usize)> {
    let model = Protocol {
        config: Config::with_mutant(mutant),
    };
    let always: Vec<&'static str> = model
        .properties()
        .into_iter()
        .filter(|p| p.expectation == Expectation::Always)
        .map(|p| p.name)
        .collect();
    let checker = model
        .checker()
        .threads(1)
        .finish_when(HasDiscoveries::AnyFailures)
        .spawn_bfs()
        .join();
    let discoveries = checker.discoveries();
    always
        .into_iter()
        .filter_map(|name| {
            discoveries
                .get(name)
                .map(|path| (name, path.clone().into_actions().len()))
        })
        .min_by_key(|(_, length)| *length)
}

/// Each mutant and the property that must catch it: the claim whose absence would let it through.
const EXPECTED: [(Mutant, &str); 7] = [
    (Mutant::UnknownToAuthorized, "I3 no blind retries"),
    (Mutant::AbsentFromPageOne, "never two"),
    (Mutant::IgnoreLag, "never two"),
    (Mutant::MatchByAmount, "no phantom success"),
    (
        Mutant::CallBeforeWal,
        "I2 no rail call without a durable IN_FLIGHT",
    ),
    (Mutant::AcceptReplay, "no phantom success"),
    (
        Mutant::ForgetUnknown,
        "never unknown: once all is quiet, the money's fate is known",
    ),
];

#[test]
fn every_mutant_is_caught_by_the_property_it_breaks() {
    assert_eq!(
        EXPECTED.map(|(m, _)| m),
        Mutant::ALL,
        "every mutant has an expected property"
    );
    let mut wrong = Vec::new();
    for (mutant, expected) in EXPECTED {
        let caught = counterexample(mutant);
        match caught {
            Some((property, length)) => eprintln!(
                "mutant {mutant:?}: caught by {property:?}, counterexample of {length} actions"
            ),
            None => eprintln!("mutant {mutant:?}: NOT CAUGHT"),
        }
        if caught.map(|(property, _)| property) != Some(expected) {
            wrong.push((mutant, caught));
        }
    }
    assert!(
        wrong.is_empty(),
        "mutants not caught by their property: {wrong:?}"
    );
}
