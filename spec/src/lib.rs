//! # interlock-spec
//!
//! The vocabulary every other Interlock crate speaks. Pure: no I/O, no clock, no SQLite, no MCP.
//! Time is always an argument (`now_ms`), never read.
//!
//! # Brief overview
//!
//! - [`money`]: [`Minor`](money::Minor), an integer amount in minor units (`0..=2^53 - 1`) that
//!   refuses floats, strings and negatives both from tool arguments
//!   ([`Minor::positive_from_json`](money::Minor::positive_from_json)) and through serde;
//!   [`Currency`](money::Currency) (`^[A-Z]{3}$`); [`Money`](money::Money), the two together.
//! - [`ids`]: validated identifiers: [`Sik`](ids::Sik), [`MerchantId`](ids::MerchantId),
//!   [`AgentId`](ids::AgentId), [`MandateId`](ids::MandateId), [`ToolName`](ids::ToolName).
//! - [`canonical`]: [`canonical_json`](canonical::canonical_json), RFC 8785 over the integer-only
//!   JSON subset we hash (floats are refused).
//! - [`hash`]: [`sha256_hex`](hash::sha256_hex) and [`base32_nopad`](hash::base32_nopad).
//! - [`sik`]: the semantic idempotency key: [`SikInput`](sik::SikInput) →
//!   [`compute_sik`](sik::compute_sik); refunds never carry a time window, and a
//!   [`DistinctReason`](sik::DistinctReason) is always explicit.
//! - [`mandate`]: the human-approved [`Mandate`](mandate::Mandate):
//!   [`parse_yaml`](mandate::Mandate::parse_yaml) (strict, bounded YAML, then
//!   [`validate`](mandate::Mandate::validate)), [`check_active`](mandate::Mandate::check_active)
//!   at a given instant, and [`hash`](mandate::Mandate::hash) for audit records.
//!
//! Every refusal is a typed error that names the offending value or path.
#![deny(missing_docs)]

pub mod action;
pub mod canonical;
pub mod decimal;
pub mod hash;
pub mod ids;
pub mod mandate;
pub mod money;
pub mod payee;
pub mod reason;
pub mod sik;
mod strict;
