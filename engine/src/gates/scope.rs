//! G1 scope: is this call inside the mandate at all? The merchant, the agent, the mandate's
//! validity at the decision's time, and the grant of the tool.

use super::{Gate, GateInput, GateResult};
use interlock_spec::mandate::MandateTimeError;
use interlock_spec::reason::ReasonCode;

/// Judges the call's scope.
pub fn check(input: &GateInput<'_>) -> GateResult {
    let (action, mandate) = (input.action, input.mandate);
    let block = |code, message: String| GateResult::block(Gate::G1, code, message);
    if action.merchant_id != mandate.merchant_id {
        return block(
            ReasonCode::MerchantMismatch,
            format!(
                "this call acts on merchant {} but mandate {} covers only {}",
                action.merchant_id, mandate.mandate_id, mandate.merchant_id
            ),
        );
    }
    if action.agent_id != mandate.agent_id {
        return block(
            ReasonCode::AgentMismatch,
            format!(
                "agent {} is not the agent mandate {} authorises ({})",
                action.agent_id, mandate.mandate_id, mandate.agent_id
            ),
        );
    }
    match mandate.check_active(input.now_ms) {
        Ok(()) => {}
        Err(MandateTimeError::NotYetValid { now_ms, issued_at }) => {
            return block(
                ReasonCode::MandateNotYetValid,
                format!(
                    "mandate {} is valid from {issued_at} (epoch ms); it is {now_ms}",
                    mandate.mandate_id
                ),
            );
        }
        Err(MandateTimeError::Expired { now_ms, expires_at }) => {
            return block(
                ReasonCode::MandateExpired,
                format!(
                    "mandate {} expired at {expires_at} (epoch ms); it is {now_ms}; a human must issue a new one",
                    mandate.mandate_id
                ),
            );
        }
    }
    if mandate.grant(&action.tool).is_none() {
        let granted: Vec<&str> = mandate.scope.grants.keys().map(|t| t.as_str()).collect();
        return block(
            ReasonCode::ToolNotGranted,
            format!(
                "mandate {} does not grant {}; it grants {}",
                mandate.mandate_id,
                action.tool,
                granted.join(", ")
            ),
        );
    }
    GateResult::allow(
        Gate::G1,
        ReasonCode::ScopeOk,
        format!(
            "{} is granted by mandate {}",
            action.tool, mandate.mandate_id
        ),
    )
}
