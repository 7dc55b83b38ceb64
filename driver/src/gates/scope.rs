//! G1 scope: is this call inside the mandate at all? The merchant, the agent, the mandate's
//! validity at the decision's time, and the grant of the tool.

use super::{Gate, GateInput, GateResult};
use interlock_spec::ids::{AgentId, MerchantId, ToolName};
use interlock_spec::mandate::{Mandate, MandateTimeError};
use interlock_spec::reason::ReasonCode;

/// Judges the call's scope.
pub fn check(input: &GateInput<'_>) -> GateResult {
    let action = input.action;
    check_call(
        input.mandate,
        &action.merchant_id,
        &action.agent_id,
        &action.tool,
        input.wall_ms,
    )
}

/// G1 over what any tool call has, money or not (the proxy asks it before a read is forwarded).
pub fn check_call(
    mandate: &Mandate,
    merchant_id: &MerchantId,
    agent_id: &AgentId,
    tool: &ToolName,
    now_ms: u64,
) -> GateResult {
    let block = |code, message: String| GateResult::block(Gate::G1, code, message);
    if *merchant_id != mandate.merchant_id {
        return block(
            ReasonCode::MerchantMismatch,
            format!(
                "this call acts on merchant {merchant_id} but mandate {} covers only {}",
                mandate.mandate_id, mandate.merchant_id
            ),
        );
    }
    if *agent_id != mandate.agent_id {
        return block(
            ReasonCode::AgentMismatch,
            format!(
                "agent {agent_id} is not the agent mandate {} authorises ({})",
                mandate.mandate_id, mandate.agent_id
            ),
        );
    }
    match mandate.check_active(now_ms) {
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
    if mandate.grant(tool).is_none() {
        let granted: Vec<&str> = mandate.scope.grants.keys().map(|t| t.as_str()).collect();
        return block(
            ReasonCode::ToolNotGranted,
            format!(
                "mandate {} does not grant {tool}; it grants {}",
                mandate.mandate_id,
                granted.join(", ")
            ),
        );
    }
    GateResult::allow(
        Gate::G1,
        ReasonCode::ScopeOk,
        format!("{tool} is granted by mandate {}", mandate.mandate_id),
    )
}
