//! G3 limits and velocity: sliding windows on calls and amount (each over every money tool, or
//! over the tools it names), the fee budget, and the count of refunds on one payment. Counts
//! include intents authorised, held or in progress as well as applied ones, and are read in the
//! transaction that inserts this intent, so concurrent calls cannot together exceed a window
//! (counting applied ones only, as the reference did, races).

use super::{Gate, GateInput, GateResult};
use crate::rail::Referent;
use interlock_spec::action::ActionKind;
use interlock_spec::ids::ToolName;
use interlock_spec::money::Minor;
use interlock_spec::reason::ReasonCode;

/// Judges the call against the mandate's limits.
pub fn check(input: &GateInput<'_>) -> GateResult {
    let (action, mandate, usage) = (input.action, input.mandate, input.usage);
    let block = |code, message: String| GateResult::block(Gate::G3, code, message);
    let Ok(referent) = input.referent else {
        return GateResult::allow(
            Gate::G3,
            ReasonCode::LimitsOk,
            "no referent to count against",
        );
    };
    let currency = referent.currency();
    for (index, window) in mandate.limits.windows.iter().enumerate() {
        if window.currency != currency || !window.counts(&action.tool) {
            continue;
        }
        // A scoped window names its tools, so the agent knows which budget it ran out of.
        let of = match &window.tools {
            Some(tools) => format!(" of {}", join(tools)),
            None => String::new(),
        };
        let used = usage.windows.get(index).copied().unwrap_or_default();
        let calls = used.calls.saturating_add(1);
        if calls > window.max_calls {
            return block(
                ReasonCode::WindowCallsExceeded,
                format!(
                    "this would be call {calls}{of} in {} ms; the window allows {} ({} already counted)",
                    window.window_ms, window.max_calls, used.calls
                ),
            );
        }
        let total = used.amount.checked_add(action.amount);
        if total.is_none_or(|total| total > window.max_amount_minor) {
            return block(
                ReasonCode::WindowAmountExceeded,
                format!(
                    "{} {currency} would bring the {} ms window{of} to {}; its cap is {} ({} already counted)",
                    action.amount,
                    window.window_ms,
                    total.map_or_else(
                        || format!("more than {}", interlock_spec::money::MINOR_MAX),
                        |t| t.to_string()
                    ),
                    window.max_amount_minor,
                    used.amount
                ),
            );
        }
    }
    if let Some(budget) = mandate.limits.fee_budgets.get(&currency) {
        let spent = usage.fees.get(&currency).copied().unwrap_or(Minor::ZERO);
        if spent >= budget.max_fee_minor {
            return block(
                ReasonCode::FeeBudgetExhausted,
                format!(
                    "rail fees of {spent} {currency} in the last {} ms have used the budget of {}",
                    budget.window_ms, budget.max_fee_minor
                ),
            );
        }
    }
    let grant = mandate.grant(&action.tool);
    let per_payment = grant.and_then(|grant| grant.max_refunds_per_payment);
    if let (Some(max), Referent::Payment(payment)) = (per_payment, referent)
        && action.kind == ActionKind::Refund
        && usage.subject_count >= max
    {
        return block(
            ReasonCode::RefundsPerPaymentExceeded,
            format!(
                "{} already has {} refunds through Interlock; the mandate allows {max} per payment",
                payment.id, usage.subject_count
            ),
        );
    }
    GateResult::allow(
        Gate::G3,
        ReasonCode::LimitsOk,
        "within every window and budget",
    )
}

fn join(tools: &[ToolName]) -> String {
    let names: Vec<&str> = tools.iter().map(ToolName::as_str).collect();
    names.join(", ")
}
