//! Mutation tests: each planted bug must make the checker report a counterexample to the property
//! it breaks. A property no mutant can break would be a property that checks nothing.

use interlock_model_check::protocol::{Config, Mutant, Protocol};
use stateright::{Checker, HasDiscoveries, Model};
use std::collections::BTreeSet;

const NEVER_TWO: &str = "never two";
const SILENT_LOSS: &str =
    "no silent loss: once all is quiet, an entity of ours is recorded as APPLIED";
const PHANTOM: &str = "no phantom success";

/// Each mutant and the claims it must break: the claims whose absence would let it through.
const EXPECTED: [(Mutant, &[&str]); 16] = [
    (
        Mutant::UnknownToAuthorized,
        &["I3 no blind retries", "the core sentence", NEVER_TWO],
    ),
    (Mutant::AbsentFromPageOne, &[NEVER_TWO, SILENT_LOSS]),
    (Mutant::IgnoreLag, &[NEVER_TWO, SILENT_LOSS]),
    (Mutant::MatchByAmount, &[PHANTOM]),
    (
        Mutant::CallBeforeWal,
        &["I2 no rail call without a durable IN_FLIGHT", NEVER_TWO],
    ),
    (Mutant::AcceptReplay, &[PHANTOM, SILENT_LOSS]),
    (
        Mutant::ForgetUnknown,
        &["never unknown: once all is quiet, the money's fate is known"],
    ),
    (Mutant::OperatorIgnoresLag, &[NEVER_TWO, SILENT_LOSS]),
    (
        Mutant::SendWithoutRecheck,
        &["I2 no rail call without a durable IN_FLIGHT", NEVER_TWO],
    ),
    (Mutant::RejectionIsFinal, &[SILENT_LOSS]),
    (
        Mutant::ReopenRejectedDirectly,
        &["the core sentence", NEVER_TWO],
    ),
    (
        Mutant::AnswerBeforeCommit,
        &["no APPLIED answer before the outcome is durable"],
    ),
    (Mutant::ResendAfterTimeout, &[NEVER_TWO]),
    (
        Mutant::IgnoreTerms,
        &["money moved other than authorised is never APPLIED on the rail's word"],
    ),
    (Mutant::NotAppliedDespiteEntity, &[NEVER_TWO]),
    (Mutant::AppliedAsAnotherEntity, &[PHANTOM]),
];

/// Searches the mutant's configuration (`Config::with_mutant`) (breadth first, one thread, so the path is a
/// shortest one) until `property` has a counterexample; returns its length in actions.
fn counterexample(mutant: Mutant, property: &'static str) -> Option<usize> {
    let model = Protocol {
        config: Config::with_mutant(mutant),
    };
    let checker = model
        .checker()
        .threads(1)
        .finish_when(HasDiscoveries::AnyOf(BTreeSet::from([property])))
        .spawn_bfs()
        .join();
    checker
        .discovery(property)
        .map(|path| path.into_actions().len())
}

#[test]
fn every_mutant_is_caught_by_each_property_it_breaks() {
    assert_eq!(
        EXPECTED.map(|(m, _)| m),
        Mutant::ALL,
        "every mutant has its expected properties"
    );
    let mut escaped = Vec::new();
    for (mutant, properties) in EXPECTED {
        for &property in properties {
            match counterexample(mutant, property) {
                Some(length) => {
                    eprintln!("mutant {mutant:?}: {property:?} broken in {length} actions")
                }
                None => escaped.push((mutant, property)),
            }
        }
    }
    assert!(
        escaped.is_empty(),
        "claims a mutant did not break: {escaped:?}"
    );
}
