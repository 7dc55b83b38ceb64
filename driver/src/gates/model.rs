//! G5, the advisory model gate. Off by default, and unable to allow anything: a [`ModelGate`]
//! returns an [`AdvisoryVerdict`] (`HOLD` or `BLOCK`, no `ALLOW`) or nothing, and the ladder
//! meets it with the deterministic verdicts, so the strongest thing a confused or injected model
//! can do is fail to object. No implementation ships that could move money.

use super::{Gate, GateInput, GateResult};
use interlock_machine::{AdvisoryVerdict, Verdict};
use interlock_spec::reason::ReasonCode;

/// A model's objection and its reason, in its words.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Advice {
    /// What it asks for.
    pub verdict: AdvisoryVerdict,
    /// Why, for the audit log and the agent.
    pub reason: String,
}

/// An advisory gate. Must be deterministic given its input for the ledger to replay decisions;
/// a model-backed one records its answers so that it is.
pub trait ModelGate: Send + Sync {
    /// The gate's name, for the audit log.
    fn name(&self) -> &str;
    /// An objection, or `None` for none.
    fn evaluate(&self, input: &GateInput<'_>) -> Option<Advice>;
}

/// Runs `model` and turns its advice into a gate result that can only lower the verdict.
pub fn check(model: &dyn ModelGate, input: &GateInput<'_>) -> GateResult {
    match model.evaluate(input) {
        None => GateResult::allow(
            Gate::G5,
            ReasonCode::ModelSilent,
            format!("{} did not object", model.name()),
        ),
        Some(advice) => {
            let verdict = Verdict::Allow.with_advice(Some(advice.verdict));
            let code = match advice.verdict {
                AdvisoryVerdict::Hold => ReasonCode::ModelHeld,
                AdvisoryVerdict::Block => ReasonCode::ModelBlocked,
            };
            let message = format!("{} objected: {}", model.name(), advice.reason);
            GateResult::new(Gate::G5, verdict, code, message)
        }
    }
}
