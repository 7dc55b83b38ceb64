//! G1's payee rules (scope: who may be paid is part of what was granted, like AP2's
//! `allowed_payees`): the recipient of a new transfer or scheduled transfer, and the new
//! recipient of an update of a scheduled transfer, must be on the grant's allow-list; a grant
//! may forbid changing the recipient of an existing scheduled transfer at all. Payees are
//! compared in `spec::payee`'s normal form (IBANs without spaces, upper case; names exactly).

use super::{Gate, GateInput, GateResult};
use crate::rail::Referent;
use interlock_spec::mandate::RecipientChanges;
use interlock_spec::payee;
use interlock_spec::reason::ReasonCode;

/// Judges the payee.
pub fn check(input: &GateInput<'_>) -> GateResult {
    let action = input.action;
    let Some(grant) = input.mandate.grant(&action.tool) else {
        let message = format!("{} is not granted", action.tool);
        return GateResult::block(Gate::G1, ReasonCode::ToolNotGranted, message);
    };
    let Some(to) = &action.payee else {
        let message = format!("{} names no new payee", action.tool);
        return GateResult::allow(Gate::G1, ReasonCode::PayeeOk, message);
    };
    if let Ok(Referent::Scheduled(scheduled)) = input.referent
        && scheduled.recipient != *to
        && grant.recipient_changes == Some(RecipientChanges::Forbid)
    {
        let message = format!(
            "{} may not change the recipient of scheduled transfer {} (from {} to {to})",
            action.tool, scheduled.id, scheduled.recipient
        );
        return GateResult::block(Gate::G1, ReasonCode::RecipientChangeForbidden, message);
    }
    let allowed = grant.payees.as_deref().unwrap_or_default();
    let on_list = allowed
        .iter()
        .any(|p| payee::normalize(p).is_ok_and(|p| p == *to));
    if on_list {
        let message = format!("{to} is an allowed payee of {}", action.tool);
        return GateResult::allow(Gate::G1, ReasonCode::PayeeOk, message);
    }
    let message = format!(
        "{to} is not an allowed payee of {} (allowed: {})",
        action.tool,
        if allowed.is_empty() {
            "none".to_owned()
        } else {
            allowed.join(", ")
        }
    );
    GateResult::block(Gate::G1, ReasonCode::PayeeNotAllowed, message)
}
