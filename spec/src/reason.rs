//! Reason codes: the machine-readable half of every answer Interlock gives an agent. The other
//! half is a sentence with the numbers in it, written where the decision is made.
//!
//! Codes are part of the public surface (agents and dashboards match on them), so a code is
//! never renamed or reused; a new situation gets a new code.

use serde::{Deserialize, Serialize};

macro_rules! reason_codes {
    ($( $(#[doc = $doc:literal])* $variant:ident => $text:literal, )*) => {
        /// Why a gate or the engine decided what it did.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(rename_all = "SCREAMING_SNAKE_CASE")]
        pub enum ReasonCode {
            $( $(#[doc = $doc])* $variant, )*
        }

        impl ReasonCode {
            /// Every code, in declaration order.
            pub const ALL: &'static [ReasonCode] = &[$(ReasonCode::$variant),*];

            /// The code as agents see it (`REFUND_EXCEEDS_REFUNDABLE`).
            pub const fn as_str(self) -> &'static str {
                match self { $(ReasonCode::$variant => $text,)* }
            }

            /// The code spelled by [`ReasonCode::as_str`].
            pub fn parse(text: &str) -> Option<ReasonCode> {
                ReasonCode::ALL.iter().copied().find(|code| code.as_str() == text)
            }
        }
    };
}

reason_codes! {
    /// G1: the call is within the mandate's scope.
    ScopeOk => "SCOPE_OK",
    /// G1: the call acts on another merchant account than the mandate's.
    MerchantMismatch => "MERCHANT_MISMATCH",
    /// G1: the call comes from another agent than the mandate's.
    AgentMismatch => "AGENT_MISMATCH",
    /// G1: the mandate's validity has not begun.
    MandateNotYetValid => "MANDATE_NOT_YET_VALID",
    /// G1: the mandate has expired.
    MandateExpired => "MANDATE_EXPIRED",
    /// G1: the mandate does not grant the tool.
    ToolNotGranted => "TOOL_NOT_GRANTED",
    /// G1: the payee is on the grant's allow-list, or the call names none.
    PayeeOk => "PAYEE_OK",
    /// G1: the payee is not on the grant's allow-list.
    PayeeNotAllowed => "PAYEE_NOT_ALLOWED",
    /// G1: the grant forbids changing a scheduled transfer's recipient.
    RecipientChangeForbidden => "RECIPIENT_CHANGE_FORBIDDEN",
    /// G2: the amount is within every value bound.
    ValueOk => "VALUE_OK",
    /// G2: the referent's currency is not one the grant allows.
    CurrencyNotAllowed => "CURRENCY_NOT_ALLOWED",
    /// G2: the amount is above the grant's per-call ceiling.
    AmountAboveCeiling => "AMOUNT_ABOVE_CEILING",
    /// G2: the amount is below the grant's per-call minimum.
    AmountBelowMinimum => "AMOUNT_BELOW_MINIMUM",
    /// G2: the payment is not captured, so nothing on it can be refunded.
    PaymentNotCaptured => "PAYMENT_NOT_CAPTURED",
    /// G2: the refund exceeds what is still refundable on the payment.
    RefundExceedsRefundable => "REFUND_EXCEEDS_REFUNDABLE",
    /// G2: the refund exceeds what was paid on the payment's order.
    RefundExceedsOrderPaid => "REFUND_EXCEEDS_ORDER_PAID",
    /// G2: the settlement exceeds the settleable balance.
    SettlementExceedsBalance => "SETTLEMENT_EXCEEDS_BALANCE",
    /// G2: the referent could not be read from the rail; the mandate says hold.
    ReferentUnresolvableHeld => "REFERENT_UNRESOLVABLE_HELD",
    /// G2: the referent could not be read from the rail; the mandate says block.
    ReferentUnresolvableBlocked => "REFERENT_UNRESOLVABLE_BLOCKED",
    /// G3: the call is within every window and budget.
    LimitsOk => "LIMITS_OK",
    /// G3: a window's call count would be exceeded.
    WindowCallsExceeded => "WINDOW_CALLS_EXCEEDED",
    /// G3: a window's cumulative amount would be exceeded.
    WindowAmountExceeded => "WINDOW_AMOUNT_EXCEEDED",
    /// G3: the fee budget is spent.
    FeeBudgetExhausted => "FEE_BUDGET_EXHAUSTED",
    /// G3: the payment already has as many refunds as the grant allows.
    RefundsPerPaymentExceeded => "REFUNDS_PER_PAYMENT_EXCEEDED",
    /// G5: the advisory model did not object (or is off).
    ModelSilent => "MODEL_SILENT",
    /// G5: the advisory model asked for a human.
    ModelHeld => "MODEL_HELD",
    /// G5: the advisory model objected.
    ModelBlocked => "MODEL_BLOCKED",
    /// G6: the tool's live definition matches its pin.
    ProvenanceOk => "PROVENANCE_OK",
    /// G6: the mandate pins no tool definitions at all.
    ProvenanceMissing => "PROVENANCE_MISSING",
    /// G6: the tool has no pin.
    ToolUnpinned => "TOOL_UNPINNED",
    /// G6: the upstream server is not the one the pins were taken from.
    ServerUntrusted => "SERVER_UNTRUSTED",
    /// G6: the tool's live definition differs from its pin.
    ToolDrifted => "TOOL_DRIFTED",
    /// G6: the tool's live definition was not available to compare.
    ManifestUnavailable => "MANIFEST_UNAVAILABLE",
    /// Engine: the action was carried out on the rail.
    Applied => "APPLIED",
    /// Engine: the same action was already carried out; this is its original result.
    IdempotentReplay => "IDEMPOTENT_REPLAY",
    /// Engine: the same action is being carried out or verified; ask again later.
    InProgress => "IN_PROGRESS",
    /// Engine: the same action is waiting for a human's approval.
    AwaitingApproval => "AWAITING_APPROVAL",
    /// Engine: the same action was refused before; this is that refusal.
    PreviouslyBlocked => "PREVIOUSLY_BLOCKED",
    /// Engine: the action is quarantined until an operator settles it.
    Quarantined => "QUARANTINED",
    /// Engine: the rail's entity carries our stamp but moved another amount, currency or
    /// subject than authorised; quarantined for an operator, never retried.
    RailTermsDiffer => "RAIL_TERMS_DIFFER",
    /// Engine: the rail refused the call; it is being verified as not applied.
    RailRejected => "RAIL_REJECTED",
    /// Engine: the rail's answer was ambiguous; the action is being reconciled.
    OutcomeUnknown => "OUTCOME_UNKNOWN",
    /// Engine: the action has used every attempt it may make.
    AttemptLimitReached => "ATTEMPT_LIMIT_REACHED",
    /// Proxy: the tool call's arguments were refused before any gate (a float or string
    /// amount, a reserved field, a malformed payment id…); nothing was sent to the rail.
    ArgumentsInvalid => "ARGUMENTS_INVALID",
    /// Proxy: the upstream is down, being restarted, or did not answer a read in time; no money
    /// moved and the same call may be retried as is.
    UpstreamUnavailable => "UPSTREAM_UNAVAILABLE",
    /// Proxy: the ledger could not be written (its disk is full, or a write or an fsync
    /// failed). Nothing is sent without a durable record; a call already on the rail is
    /// reconciled; the same call may be retried as is.
    LedgerUnavailable => "LEDGER_UNAVAILABLE",
    /// Proxy: the tool is granted but is neither a money tool of the rail profile nor declared
    /// read-only by its (pinned) definition; forwarding it would move money with no gate, so
    /// nothing was sent.
    ToolNotReadOnly => "TOOL_NOT_READ_ONLY",
}

impl ReasonCode {
    /// The codes the proxy decides on its own, before or around the engine; the engine never
    /// produces them.
    pub const PROXY: &'static [ReasonCode] = &[
        ReasonCode::ArgumentsInvalid,
        ReasonCode::UpstreamUnavailable,
        ReasonCode::LedgerUnavailable,
        ReasonCode::ToolNotReadOnly,
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_round_trip() {
        let mut seen = std::collections::BTreeSet::new();
        for &code in ReasonCode::ALL {
            assert!(seen.insert(code.as_str()), "{} twice", code.as_str());
            assert_eq!(ReasonCode::parse(code.as_str()), Some(code));
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
        }
        assert_eq!(ReasonCode::parse("NOPE"), None);
    }
}
