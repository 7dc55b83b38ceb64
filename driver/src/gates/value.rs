//! G2 value authorisation: the amount against the grant's bounds, then against the referent the
//! engine read from the rail itself (never the agent's text): a refund within what is still
//! refundable on its payment and what was paid on its order; a settlement or a transfer within
//! the available balance (a scheduled one is paid later: not bounded by today's). Amounts
//! already authorised or in flight on the same subject count as spent.

use super::{Gate, GateInput, GateResult};
use crate::rail::Referent;
use interlock_spec::action::ActionKind;
use interlock_spec::money::Minor;
use interlock_spec::reason::ReasonCode;

/// Judges the amount.
pub fn check(input: &GateInput<'_>) -> GateResult {
    let action = input.action;
    let block = |code, message: String| GateResult::block(Gate::G2, code, message);
    let Some(grant) = input.mandate.grant(&action.tool) else {
        return block(
            ReasonCode::ToolNotGranted,
            format!("{} is not granted", action.tool),
        );
    };
    let referent = match input.referent {
        Ok(referent) => referent,
        Err(why) => return super::unresolvable::judge(grant, why),
    };
    let (amount, currency) = (action.amount, referent.currency());
    let limit = &grant.value;
    if !limit.currencies.contains(&currency) {
        let allowed: Vec<&str> = limit.currencies.iter().map(|c| c.as_str()).collect();
        return block(
            ReasonCode::CurrencyNotAllowed,
            format!(
                "{} moves {currency}; the grant allows only {}",
                action.tool,
                allowed.join(", ")
            ),
        );
    }
    if amount > limit.max_amount_minor {
        return block(
            ReasonCode::AmountAboveCeiling,
            format!(
                "{amount} exceeds the {} {currency} per-call ceiling of {}",
                limit.max_amount_minor, action.tool
            ),
        );
    }
    if amount < limit.min_amount_minor {
        return block(
            ReasonCode::AmountBelowMinimum,
            format!(
                "{amount} is below the {} {currency} minimum of {}",
                limit.min_amount_minor, action.tool
            ),
        );
    }
    let pending = input.usage.subject_in_progress;
    match referent {
        Referent::Payment(payment) => {
            if !payment.captured {
                return block(
                    ReasonCode::PaymentNotCaptured,
                    format!(
                        "{} is not captured, so nothing on it can be refunded",
                        payment.id
                    ),
                );
            }
            let left = payment
                .amount
                .checked_sub(payment.amount_refunded)
                .unwrap_or(Minor::ZERO);
            let refundable = left.checked_sub(pending).unwrap_or(Minor::ZERO);
            if amount > refundable {
                return block(
                    ReasonCode::RefundExceedsRefundable,
                    format!(
                        "{amount} exceeds the {refundable} still refundable on {} ({} captured, {} refunded, {pending} in progress)",
                        payment.id, payment.amount, payment.amount_refunded
                    ),
                );
            }
            if let Some(order) = &payment.order
                && amount > order.amount_paid
            {
                return block(
                    ReasonCode::RefundExceedsOrderPaid,
                    format!(
                        "{amount} exceeds the {} paid on order {}",
                        order.amount_paid, order.id
                    ),
                );
            }
        }
        // A scheduled transfer is paid later, so today's balance does not bound it.
        Referent::Balance { balance, .. } if action.kind.draws_on_balance_now() => {
            let available = balance.checked_sub(pending).unwrap_or(Minor::ZERO);
            let what = match action.kind {
                ActionKind::Settlement => "settleable",
                _ => "available",
            };
            if amount > available {
                return block(
                    ReasonCode::SettlementExceedsBalance,
                    format!(
                        "{amount} exceeds the {available} {currency} {what} balance ({balance} balance, {pending} in progress)"
                    ),
                );
            }
        }
        // An update is bounded by the ceiling above and G3's windows, like a new transfer.
        Referent::Balance { .. } | Referent::Scheduled(_) => {}
    }
    GateResult::allow(
        Gate::G2,
        ReasonCode::ValueOk,
        format!(
            "{amount} {currency} on {} is within every value bound",
            referent.subject_id()
        ),
    )
}
