//! The rail's entities as Razorpay returns them, the validated requests that create them, and the
//! fee arithmetic.

use serde_json::{Map, Value, json};

/// The largest amount the rail accepts: Interlock's own bound,
/// [`interlock_spec::money::MINOR_MAX`] (2^53 − 1, the largest integer every JSON peer reads
/// exactly). One number for both ends, so no amount the proxy lets through is one the rail
/// refuses for its size, and the other way round.
pub const AMOUNT_MAX: i64 = {
    // The cast is lossless: 2^53 − 1 < i64::MAX.
    assert!(interlock_spec::money::MINOR_MAX < i64::MAX as u64);
    interlock_spec::money::MINOR_MAX as i64
};
/// Razorpay's smallest refund: ₹1.00.
pub const REFUND_AMOUNT_MIN: i64 = 100;
/// Razorpay's smallest instant settlement: ₹2.00.
pub const SETTLEMENT_AMOUNT_MIN: i64 = 200;
/// Basis points in a whole.
pub const BPS_WHOLE: i64 = 10_000;
/// The largest fee rate a flag may set (10 %), so fee + tax never exceed the amount.
pub const FEE_BPS_MAX: u32 = 1_000;
/// The largest tax rate (as a share of the fee) a flag may set (100 %).
pub const TAX_BPS_MAX: u32 = 10_000;

/// A refund's `speed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Speed {
    /// `normal`: the default, 5–7 working days at Razorpay.
    Normal,
    /// `optimum`: instant where the bank allows it.
    Optimum,
}

impl Speed {
    /// The wire name as requested.
    pub fn as_str(self) -> &'static str {
        match self {
            Speed::Normal => "normal",
            Speed::Optimum => "optimum",
        }
    }

    /// What Razorpay reports as `speed_processed` (the mock always manages instant for optimum).
    pub fn processed(self) -> &'static str {
        match self {
            Speed::Normal => "normal",
            Speed::Optimum => "instant",
        }
    }

    /// Parse a wire name.
    pub fn parse(s: &str) -> Option<Speed> {
        match s {
            "normal" => Some(Speed::Normal),
            "optimum" => Some(Speed::Optimum),
            _ => None,
        }
    }
}

/// Fee and tax rates, in basis points. Integer arithmetic, rounding down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeeRates {
    /// Fee on a `normal` refund, in basis points of the amount.
    pub refund_normal_bps: u32,
    /// Fee on an `optimum` refund, in basis points of the amount.
    pub refund_optimum_bps: u32,
    /// Fee on an instant settlement, in basis points of the amount requested.
    pub settlement_bps: u32,
    /// Tax (GST), in basis points of the fee.
    pub tax_bps: u32,
}

impl Default for FeeRates {
    fn default() -> Self {
        FeeRates {
            refund_normal_bps: 0,
            refund_optimum_bps: 50,
            settlement_bps: 30,
            tax_bps: 1_800,
        }
    }
}

/// `amount * bps / 10_000`, rounded down, without overflow.
pub fn apply_bps(amount: i64, bps: u32) -> i64 {
    let product = i128::from(amount) * i128::from(bps) / i128::from(BPS_WHOLE);
    // amount ≤ AMOUNT_MAX and bps ≤ BPS_WHOLE, so the quotient fits back into i64.
    i64::try_from(product).unwrap_or(i64::MAX)
}

impl FeeRates {
    /// `(fee, tax)` of a refund.
    pub fn refund(&self, amount: i64, speed: Speed) -> (i64, i64) {
        let bps = match speed {
            Speed::Normal => self.refund_normal_bps,
            Speed::Optimum => self.refund_optimum_bps,
        };
        let fee = apply_bps(amount, bps);
        (fee, apply_bps(fee, self.tax_bps))
    }

    /// `(fees, tax)` of an instant settlement of `amount`.
    pub fn settlement(&self, amount: i64) -> (i64, i64) {
        let fee = apply_bps(amount, self.settlement_bps);
        (fee, apply_bps(fee, self.tax_bps))
    }

    /// Check the rates against [`FEE_BPS_MAX`] and [`TAX_BPS_MAX`]; the error names the flag.
    pub fn check(&self) -> Result<(), String> {
        for (flag, value, max) in [
            ("--refund-fee-bps", self.refund_normal_bps, FEE_BPS_MAX),
            (
                "--refund-optimum-fee-bps",
                self.refund_optimum_bps,
                FEE_BPS_MAX,
            ),
            ("--settlement-fee-bps", self.settlement_bps, FEE_BPS_MAX),
            ("--tax-bps", self.tax_bps, TAX_BPS_MAX),
        ] {
            if value > max {
                return Err(format!("{flag} {value} is above the limit of {max}"));
            }
        }
        Ok(())
    }
}

/// A captured payment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payment {
    /// `pay_…`
    pub id: String,
    /// Captured amount in minor units.
    pub amount: i64,
    /// ISO currency code.
    pub currency: String,
    /// Sum of the refunds on this payment.
    pub amount_refunded: i64,
    /// The order this payment paid, if any.
    pub order_id: Option<String>,
    /// Merchant notes.
    pub notes: Map<String, Value>,
    /// Unix seconds.
    pub created_at: i64,
}

impl Payment {
    /// What is still refundable.
    pub fn unrefunded(&self) -> i64 {
        self.amount - self.amount_refunded
    }

    /// Razorpay's `refund_status`: `null`, `"partial"` or `"full"`.
    pub fn refund_status(&self) -> Value {
        if self.amount_refunded == 0 {
            Value::Null
        } else if self.amount_refunded < self.amount {
            json!("partial")
        } else {
            json!("full")
        }
    }

    /// The API object.
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "entity": "payment",
            "amount": self.amount,
            "currency": self.currency,
            "status": "captured",
            "captured": true,
            "amount_refunded": self.amount_refunded,
            "refund_status": self.refund_status(),
            "order_id": self.order_id,
            "notes": self.notes,
            "created_at": self.created_at,
        })
    }
}

/// An order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Order {
    /// `order_…`
    pub id: String,
    /// Order amount.
    pub amount: i64,
    /// Amount paid so far.
    pub amount_paid: i64,
    /// ISO currency code.
    pub currency: String,
    /// The merchant's receipt.
    pub receipt: Option<String>,
    /// `created`, `attempted` or `paid`.
    pub status: String,
    /// Merchant notes.
    pub notes: Map<String, Value>,
    /// Unix seconds.
    pub created_at: i64,
}

impl Order {
    /// The API object.
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "entity": "order",
            "amount": self.amount,
            "amount_paid": self.amount_paid,
            "amount_due": self.amount - self.amount_paid,
            "currency": self.currency,
            "receipt": self.receipt,
            "status": self.status,
            "notes": self.notes,
            "created_at": self.created_at,
        })
    }
}

/// A refund.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refund {
    /// `rfnd_…`
    pub id: String,
    /// The refunded payment.
    pub payment_id: String,
    /// Refunded amount.
    pub amount: i64,
    /// ISO currency code.
    pub currency: String,
    /// Merchant notes.
    pub notes: Map<String, Value>,
    /// The merchant's receipt, unique per payment.
    pub receipt: Option<String>,
    /// Speed asked for.
    pub speed_requested: Speed,
    /// Fee charged.
    pub fee: i64,
    /// Tax on the fee.
    pub tax: i64,
    /// Unix seconds.
    pub created_at: i64,
    /// Unix milliseconds (not on the wire; `read_lag` uses it).
    pub created_at_ms: i64,
}

impl Refund {
    /// The API object.
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "entity": "refund",
            "amount": self.amount,
            "currency": self.currency,
            "payment_id": self.payment_id,
            "notes": self.notes,
            "receipt": self.receipt,
            "created_at": self.created_at,
            "status": "processed",
            "speed_requested": self.speed_requested.as_str(),
            "speed_processed": self.speed_requested.processed(),
            "fee": self.fee,
            "tax": self.tax,
        })
    }
}

/// An instant (on-demand) settlement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement {
    /// `setlod_…`
    pub id: String,
    /// What was drawn from the balance.
    pub amount_requested: i64,
    /// What reached the bank: requested minus fees and tax.
    pub amount_settled: i64,
    /// Fee charged.
    pub fees: i64,
    /// Tax on the fee.
    pub tax: i64,
    /// ISO currency code.
    pub currency: String,
    /// Whether the whole balance was asked for.
    pub settle_full_balance: bool,
    /// The merchant's description.
    pub description: Option<String>,
    /// Merchant notes.
    pub notes: Map<String, Value>,
    /// Unix seconds.
    pub created_at: i64,
    /// Unix milliseconds (not on the wire; `read_lag` uses it).
    pub created_at_ms: i64,
}

impl Settlement {
    /// The API object.
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "entity": "settlement.ondemand",
            "amount_requested": self.amount_requested,
            "amount_settled": self.amount_settled,
            "amount_pending": 0,
            "amount_reversed": 0,
            "fees": self.fees,
            "tax": self.tax,
            "currency": self.currency,
            "settle_full_balance": self.settle_full_balance,
            "status": "processed",
            "description": self.description,
            "notes": self.notes,
            "created_at": self.created_at,
        })
    }
}

/// A validated `create_refund`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundRequest {
    /// The payment to refund.
    pub payment_id: String,
    /// Amount, at least [`REFUND_AMOUNT_MIN`].
    pub amount: i64,
    /// Requested speed (default normal).
    pub speed: Speed,
    /// Notes (≤ 15 string values).
    pub notes: Map<String, Value>,
    /// Receipt (≤ 40 characters), unique per payment.
    pub receipt: Option<String>,
}

/// A validated `create_instant_settlement`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettlementRequest {
    /// Amount asked for, at least [`SETTLEMENT_AMOUNT_MIN`]; ignored when `settle_full_balance`.
    pub amount: i64,
    /// Settle the whole balance.
    pub settle_full_balance: bool,
    /// Description (≤ 30 characters of `[a-zA-Z0-9 ]`).
    pub description: Option<String>,
    /// Notes.
    pub notes: Map<String, Value>,
}

/// Display order of a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListOrder {
    /// Razorpay's order: `created_at` descending, then id descending.
    NewestFirst,
    /// The `oldest_first` fault: the reverse, so a new entity lands on the last page.
    OldestFirst,
}

/// A validated list query plus the list faults in force for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery {
    /// Only this payment's refunds.
    pub payment_id: Option<String>,
    /// `created_at ≥ from` (unix seconds).
    pub from: Option<i64>,
    /// `created_at ≤ to` (unix seconds).
    pub to: Option<i64>,
    /// Page size after `page_size` capped it.
    pub count: u32,
    /// Entities to skip.
    pub skip: u64,
    /// Hide entities whose `created_at_ms` is later than this (the `read_lag` fault).
    pub visible_until_ms: Option<i64>,
    /// Display order.
    pub order: ListOrder,
}

/// Razorpay's collection envelope.
pub fn collection(items: Vec<Value>) -> Value {
    json!({ "entity": "collection", "count": items.len(), "items": items })
}
