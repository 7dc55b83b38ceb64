//! The state × event table, computed by calling [`step`] on every pair, never written by hand.
//! `docs/state-machine.md` and the insta snapshot are both rendered from it.

use crate::state::{
    EntityRef, Event, EventKind, IntentCore, RECONCILE_INCONCLUSIVE_MAX, State, Step,
};
use crate::step::step;
use interlock_spec::ids::Sik;
use std::fmt::Write;

/// The key used for the table's representative cores.
fn table_sik() -> Sik {
    Sik::parse("TABLETABLETABLETABLETABLETABLE22").expect("a well-formed key")
}

/// A representative core in `state`: no attempt before one is possible, one attempt after.
pub fn representative(state: State) -> IntentCore {
    let mut core = IntentCore::proposed(table_sik());
    core.state = state;
    core.attempt_seq = match state {
        State::Proposed | State::Held | State::Authorized | State::Blocked => 0,
        _ => 1,
    };
    if state == State::Applied {
        core.entity_id = Some("rfnd_table".to_owned());
    }
    core
}

/// The event of `kind` carrying well-formed evidence for `core` (our stamp, the current attempt,
/// a complete and settled reading): the event whose only possible refusal is "no such edge".
pub fn well_formed(kind: EventKind, core: &IntentCore) -> Event {
    let ours = || EntityRef {
        id: "rfnd_table".to_owned(),
        stamp: Some(core.sik.clone()),
    };
    let attempt_seq = core.attempt_seq;
    match kind {
        EventKind::GatesPassed => Event::GatesPassed,
        EventKind::GatesHeld => Event::GatesHeld,
        EventKind::GatesBlocked => Event::GatesBlocked,
        EventKind::HoldReleased => Event::HoldReleased,
        EventKind::HoldRejected => Event::HoldRejected,
        EventKind::Quarantine => Event::Quarantine,
        EventKind::AttemptStarted => Event::AttemptStarted,
        EventKind::RailApplied => Event::RailApplied {
            attempt_seq,
            entity: ours(),
            as_authorised: true,
        },
        EventKind::RailRejected => Event::RailRejected { attempt_seq },
        EventKind::RailAmbiguous => Event::RailAmbiguous { attempt_seq },
        EventKind::LeaseExpired => Event::LeaseExpired,
        EventKind::ReconcileStarted => Event::ReconcileStarted,
        EventKind::ReconcileFoundApplied => Event::ReconcileFoundApplied {
            attempt_seq,
            entity: ours(),
            as_authorised: true,
        },
        EventKind::ReconcileConfirmedAbsent => Event::ReconcileConfirmedAbsent {
            attempt_seq,
            pagination_exhausted: true,
            lag_elapsed: true,
        },
        EventKind::ReconcileInconclusive => Event::ReconcileInconclusive { attempt_seq },
        EventKind::RetryAuthorized => Event::RetryAuthorized,
        EventKind::Reopened => Event::Reopened,
        EventKind::OperatorConfirmedApplied => Event::OperatorConfirmedApplied { entity: ours() },
        EventKind::OperatorConfirmedNotApplied => {
            Event::OperatorConfirmedNotApplied { lag_elapsed: true }
        }
    }
}

/// One (state, event) pair of the table.
#[derive(Debug, Clone)]
pub struct Cell {
    /// The source state.
    pub state: State,
    /// The event, with well-formed evidence.
    pub event: EventKind,
    /// The accepted step, or `None` where `step` refused.
    pub edge: Option<Step>,
}

/// Every (state, event) cell, in table order.
pub fn cells() -> Vec<Cell> {
    let mut cells = Vec::with_capacity(State::ALL.len() * EventKind::ALL.len());
    for state in State::ALL {
        let core = representative(state);
        for event in EventKind::ALL {
            let edge = step(&core, &well_formed(event, &core)).ok();
            cells.push(Cell { state, event, edge });
        }
    }
    cells
}

/// Guarded refusals: events on a legal edge that `step` still refuses because their evidence is
/// wrong, each with the refusal's text.
fn guard_examples() -> Vec<(String, String)> {
    let foreign = EntityRef {
        id: "rfnd_other".to_owned(),
        stamp: None,
    };
    let mut reconciling = representative(State::Reconciling);
    let cases = [
        (
            State::InFlight,
            Event::RailApplied {
                attempt_seq: 1,
                entity: foreign.clone(),
                as_authorised: true,
            },
        ),
        (State::InFlight, Event::RailAmbiguous { attempt_seq: 0 }),
        (
            State::Reconciling,
            Event::ReconcileInconclusive { attempt_seq: 0 },
        ),
        (
            State::Reconciling,
            Event::ReconcileFoundApplied {
                attempt_seq: 1,
                entity: foreign,
                as_authorised: true,
            },
        ),
        (
            State::Reconciling,
            Event::ReconcileConfirmedAbsent {
                attempt_seq: 1,
                pagination_exhausted: false,
                lag_elapsed: true,
            },
        ),
        (
            State::Reconciling,
            Event::ReconcileConfirmedAbsent {
                attempt_seq: 1,
                pagination_exhausted: true,
                lag_elapsed: false,
            },
        ),
    ];
    let mut out: Vec<(String, String)> = cases
        .into_iter()
        .map(|(state, event)| {
            let refusal = step(&representative(state), &event).expect_err("a guarded refusal");
            (format!("{state} + {event:?}"), refusal.to_string())
        })
        .collect();
    let early = Event::OperatorConfirmedNotApplied { lag_elapsed: false };
    let refusal = step(&representative(State::Quarantined), &early).expect_err("lag guard");
    out.push((format!("QUARANTINED + {early:?}"), refusal.to_string()));
    let mut quarantined_early = representative(State::Quarantined);
    quarantined_early.attempt_seq = 0;
    let event = well_formed(EventKind::OperatorConfirmedApplied, &quarantined_early);
    let refusal = step(&quarantined_early, &event).expect_err("never attempted");
    out.push((
        "QUARANTINED (no attempt yet) + OPERATOR_CONFIRMED_APPLIED".to_owned(),
        refusal.to_string(),
    ));
    let mut spent = representative(State::ConfirmedNotApplied);
    spent.attempt_seq = crate::ATTEMPT_SEQ_MAX;
    let refusal = step(&spent, &Event::RetryAuthorized).expect_err("attempts exhausted");
    out.push((
        format!(
            "CONFIRMED_NOT_APPLIED (attempt {}) + RETRY_AUTHORIZED",
            crate::ATTEMPT_SEQ_MAX
        ),
        refusal.to_string(),
    ));
    reconciling.reconcile_inconclusive = RECONCILE_INCONCLUSIVE_MAX - 1;
    let quarantined = step(
        &reconciling,
        &Event::ReconcileInconclusive { attempt_seq: 1 },
    )
    .expect("an edge");
    out.push((
        format!(
            "RECONCILING ({} inconclusive) + RECONCILE_INCONCLUSIVE",
            RECONCILE_INCONCLUSIVE_MAX - 1
        ),
        format!(
            "accepted: → {} (the {}th inconclusive pass quarantines)",
            quarantined.next.state, RECONCILE_INCONCLUSIVE_MAX
        ),
    ));
    out.extend(entity_examples());
    out
}

/// The entity that moved money other than as authorised: quarantined with the entity recorded,
/// and from there only an operator's "applied" (naming that entity) leads out.
fn entity_examples() -> Vec<(String, String)> {
    let in_flight = representative(State::InFlight);
    let mut differing = well_formed(EventKind::RailApplied, &in_flight);
    if let Event::RailApplied { as_authorised, .. } = &mut differing {
        *as_authorised = false;
    }
    let held = step(&in_flight, &differing).expect("an edge");
    let mut out = vec![(
        "IN_FLIGHT + RAIL_APPLIED (our stamp, terms not as authorised)".to_owned(),
        format!(
            "accepted: → {} / {:?}, entity {} recorded",
            held.next.state,
            held.effect,
            held.next.entity_id.as_deref().unwrap_or("?")
        ),
    )];
    let not_applied = Event::OperatorConfirmedNotApplied { lag_elapsed: true };
    let refusal = step(&held.next, &not_applied).expect_err("entity recorded");
    out.push((
        "QUARANTINED (entity recorded) + OPERATOR_CONFIRMED_NOT_APPLIED".to_owned(),
        refusal.to_string(),
    ));
    let other = Event::OperatorConfirmedApplied {
        entity: EntityRef {
            id: "rfnd_other".to_owned(),
            stamp: Some(held.next.sik.clone()),
        },
    };
    let refusal = step(&held.next, &other).expect_err("another entity");
    out.push((
        "QUARANTINED (entity recorded) + OPERATOR_CONFIRMED_APPLIED (another entity)".to_owned(),
        refusal.to_string(),
    ));
    out
}

/// The full table as plain text: one line per (state, event) cell. Snapshotted by insta.
pub fn render_text() -> String {
    let mut out = String::new();
    for Cell {
        state,
        event: kind,
        edge,
    } in cells()
    {
        let cell = match edge {
            Some(edge) => format!("→ {} / {:?}", edge.next.state, edge.effect),
            None => "refused".to_owned(),
        };
        writeln!(out, "{state:<22} {kind:<31} {cell}").expect("writing to a String");
    }
    out
}

/// `docs/state-machine.md`, rendered from the table.
pub fn render_markdown() -> String {
    let mut out = String::from(
        "<!-- Generated from machine::table by `UPDATE_DOCS=1 cargo test -p interlock-machine`. Do not edit. -->\n\
         # The state machine\n\n\
         Computed by calling `machine::step` on every (state, event) pair with well-formed evidence.\n\
         A cell that is not listed as an edge is refused with `Illegal::NoEdge`.\n\n\
         > The only edge into a rail call is `AUTHORIZED → IN_FLIGHT`, and after the first attempt the only\n\
         > edge into `AUTHORIZED` is from `CONFIRMED_NOT_APPLIED`.\n\n```mermaid\nstateDiagram-v2\n    [*] --> PROPOSED\n",
    );
    let edges: Vec<_> = cells()
        .into_iter()
        .filter_map(|c| {
            c.edge
                .map(|e| (c.state, c.event, e.next.state, format!("{:?}", e.effect)))
        })
        .collect();
    for (state, kind, target, _) in &edges {
        writeln!(out, "    {state} --> {target}: {kind}").expect("writing to a String");
    }
    out.push_str("    APPLIED --> [*]\n    BLOCKED --> [*]\n```\n\n## Edges\n\n| from | event | to | effect |\n| --- | --- | --- | --- |\n");
    for (state, kind, target, effect) in &edges {
        writeln!(out, "| `{state}` | `{kind}` | `{target}` | `{effect}` |")
            .expect("writing to a String");
    }
    out.push_str("\n## Guards\n\nEvents on a legal edge that `step` still refuses, because their evidence is wrong:\n\n| case | answer |\n| --- | --- |\n");
    for (case, answer) in guard_examples() {
        writeln!(out, "| `{case}` | {answer} |").expect("writing to a String");
    }
    writeln!(
        out,
        "\n{} states × {} events = {} cells, {} edges.",
        State::ALL.len(),
        EventKind::ALL.len(),
        State::ALL.len() * EventKind::ALL.len(),
        edges.len()
    )
    .expect("writing to a String");
    out
}
