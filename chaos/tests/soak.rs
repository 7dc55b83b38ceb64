//! The soak's slice in the test suite: one minute of mixed load (refunds, settlements, reads,
//! duplicates) from four agents at once through the real binaries, the mock's faults changing
//! with each generation and a SIGKILL every 20 s, each landing on a burst of calls in flight
//! (so on the ledger's group commit with several intents in an open batch), judged over every
//! intent as the soak judges an hour of it (`cargo run -p interlock-chaos --release -- soak`
//! runs the hour).

use std::path::PathBuf;
use std::time::Duration;

use interlock_chaos::soak::{self, SoakPlan};
use interlock_chaos::world::Bins;

#[test]
fn a_minute_of_mixed_load_with_kills_pays_nothing_twice_and_leaves_nothing_unknown() {
    let bins = Bins::beside_test().expect("the binaries build");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("soak-slice");
    let plan = SoakPlan {
        duration: Duration::from_secs(60),
        sample_every: Duration::from_secs(15),
        rate: 4,
        agents: 4,
        kill_every: Duration::from_secs(20),
        seed: 20_261_206,
    };
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let outcome = runtime.block_on(soak::run(&bins, dir, &plan));
    let text = soak::results_markdown(&outcome, &plan, "test", "this build", "now");
    eprintln!("{text}");
    assert!(outcome.violations.is_empty(), "{text}");
    // It ran: generations were killed, money moved, duplicates were asked, samples were taken.
    assert!(outcome.kills >= 2, "{text}");
    assert!(outcome.entities >= 10, "{text}");
    assert!(
        outcome.calls.get("duplicate").copied().unwrap_or(0) >= 1,
        "{text}"
    );
    assert!(outcome.samples.len() >= 3, "{text}");
    // The agents overlapped, and a SIGKILL found several of their calls in flight.
    assert!(outcome.in_flight_max >= 2, "{text}");
    assert!(outcome.killed_in_flight_max >= 2, "{text}");
    assert!(
        outcome.samples.iter().all(|s| s.rss_kib > 0 && s.fds > 0),
        "{text}"
    );
    // Every entity belongs to an intent that says APPLIED with its id (checked above, per
    // stamp); the ledger holds at least as many intents as the rail has entities.
    let intents: u64 = outcome.states.values().sum();
    assert!(intents as usize >= outcome.entities, "{text}");
}
