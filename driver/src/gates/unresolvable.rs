//! Part of G2: what to do when the rail cannot tell what an action is about. The mandate says
//! (`on_unresolvable`); absent that, a reversible tool is held for a human and an irreversible
//! one is refused, because money that leaves on a guess cannot be called back.

use super::{Gate, GateResult};
use interlock_machine::Verdict;
use interlock_spec::mandate::{Grant, OnUnresolvable};
use interlock_spec::reason::ReasonCode;

/// The verdict for an action whose referent could not be read (`why`).
pub fn judge(grant: &Grant, why: &str) -> GateResult {
    let (verdict, code, then) = match grant.on_unresolvable() {
        OnUnresolvable::Hold => (
            Verdict::Hold,
            ReasonCode::ReferentUnresolvableHeld,
            "held for a human to approve",
        ),
        OnUnresolvable::Block => (
            Verdict::Block,
            ReasonCode::ReferentUnresolvableBlocked,
            "refused; retry when the rail can be read",
        ),
    };
    let message = format!("the rail could not confirm what this call is about ({why}); {then}");
    GateResult::new(Gate::G2, verdict, code, message)
}
