//! The classification of a rail's answer to a stamped money call: which event it proves. An
//! answer that does not carry our stamp is not evidence that our call applied (a replayed
//! response): it is ambiguous, and so is one that came after the call's timeout, since the
//! lease was sized on the rail keeping it.

use crate::plan::Change;
use crate::rail::RailOutcome;
use interlock_machine::{ENTITY_ID_LENGTH_MAX, Event};
use interlock_spec::ids::Sik;

/// The event an outcome of attempt `attempt_seq` of `sik` proves, with what it records.
/// `took_ms` is how long the call was out by the runner's clock.
pub fn classify(
    sik: &Sik,
    attempt_seq: u32,
    outcome: RailOutcome,
    took_ms: u64,
    timeout_ms: u64,
) -> (Event, Change) {
    let detail = |text: String| Change {
        detail: Some(text),
        ..Change::default()
    };
    if took_ms > timeout_ms {
        let text =
            format!("the rail answered after {took_ms} ms, past its {timeout_ms} ms timeout");
        return (Event::RailAmbiguous { attempt_seq }, detail(text));
    }
    match outcome {
        RailOutcome::Applied {
            entity,
            fee,
            tax,
            response,
        } if entity.stamp.as_ref() == Some(sik)
            && !entity.id.is_empty()
            && entity.id.len() <= ENTITY_ID_LENGTH_MAX =>
        {
            let change = Change {
                fee_minor: fee.get(),
                tax_minor: tax.get(),
                detail: Some(response),
                ..Change::default()
            };
            let event = Event::RailApplied {
                attempt_seq,
                entity,
            };
            (event, change)
        }
        RailOutcome::Applied { entity, .. } => {
            let text = format!(
                "the rail answered with {} which does not carry this intent's stamp (a replayed response?)",
                entity.id
            );
            (Event::RailAmbiguous { attempt_seq }, detail(text))
        }
        RailOutcome::Rejected { detail: text } => {
            (Event::RailRejected { attempt_seq }, detail(text))
        }
        RailOutcome::Ambiguous { detail: text } => {
            (Event::RailAmbiguous { attempt_seq }, detail(text))
        }
    }
}
