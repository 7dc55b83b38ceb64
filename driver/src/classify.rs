//! The classification of a rail's answer to a stamped money call: which event it proves. An
//! answer that does not carry our stamp is not evidence that our call applied (a replayed
//! response): it is ambiguous, and so is one that came after the call's timeout, since the
//! lease was sized on the rail keeping it.

use crate::plan::Change;
use crate::rail::{RailCall, RailOutcome};
use crate::terms::judge;
use interlock_machine::{ENTITY_ID_LENGTH_MAX, Event};
use interlock_spec::reason::ReasonCode;

/// The event an outcome of attempt `attempt_seq` of `call` proves, with what it records.
/// `took_ms` is how long the call was out by the runner's clock.
pub fn classify(
    call: &RailCall,
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
            terms,
            fee,
            tax,
            response,
        } if entity.stamp.as_ref() == Some(&call.sik)
            && !entity.id.is_empty()
            && entity.id.len() <= ENTITY_ID_LENGTH_MAX =>
        {
            let judgement = judge(call, &terms);
            let mut change = Change {
                fee_minor: fee.get(),
                tax_minor: tax.get(),
                detail: Some(response),
                ..Change::default()
            };
            if !judgement.as_authorised() {
                let sentence = judgement.sentence(&entity.id);
                change.reason = Some((ReasonCode::RailTermsDiffer.as_str().to_owned(), sentence));
                change.moved_minor = judgement.moved.map(|m| m.get());
            }
            let event = Event::RailApplied {
                attempt_seq,
                entity,
                as_authorised: judgement.as_authorised(),
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
