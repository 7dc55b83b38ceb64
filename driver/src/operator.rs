//! A human's edges, as commits: reject a hold, settle a quarantine as applied or as not applied.
//! (Approving a hold judges the action again, so it is a [`crate::Proposal`].) Who and why go
//! into the hash-chained record as well as the row's reason.

use crate::config::DriverConfig;
use crate::plan::{Change, Commit, IntentKey, IntentView};
use interlock_machine::{EntityRef, Event};
use serde_json::json;

/// `HOLD_REJECTED`, for good.
pub fn reject(key: &IntentKey, by: &str, why: &str) -> Commit {
    Commit {
        key: key.clone(),
        event: Event::HoldRejected,
        change: Change {
            reason: Some(("REJECTED".into(), format!("rejected by {by}: {why}"))),
            context: Some(json!({"by": by, "why": why})),
            ..Change::default()
        },
    }
}

/// `OPERATOR_CONFIRMED_APPLIED`: the operator read the entity on the rail; it must carry the
/// intent's stamp, which the machine checks.
pub fn resolve_applied(key: &IntentKey, entity_id: &str, by: &str) -> Commit {
    Commit {
        key: key.clone(),
        event: Event::OperatorConfirmedApplied {
            entity: EntityRef {
                id: entity_id.to_owned(),
                stamp: Some(key.sik.clone()),
            },
        },
        change: Change {
            reason: Some((
                "OPERATOR_APPLIED".into(),
                format!("settled as {entity_id} by {by}"),
            )),
            context: Some(json!({"by": by})),
            ..Change::default()
        },
    }
}

/// `OPERATOR_CONFIRMED_NOT_APPLIED`. Its evidence, `lag_elapsed`, is the runner's clock against
/// the last attempt's end, not the operator's word: refused by the machine until a late call
/// can no longer land.
pub fn resolve_not_applied(config: &DriverConfig, now: u64, view: &IntentView, by: &str) -> Commit {
    let lag_elapsed = view
        .attempt_ended_at()
        .is_none_or(|ended| now.saturating_sub(ended) >= config.rail_lag_ms);
    Commit {
        key: view.key.clone(),
        event: Event::OperatorConfirmedNotApplied { lag_elapsed },
        change: Change {
            reason: Some((
                "OPERATOR_NOT_APPLIED".into(),
                format!("settled as not applied by {by}"),
            )),
            context: Some(json!({"by": by})),
            ..Change::default()
        },
    }
}
