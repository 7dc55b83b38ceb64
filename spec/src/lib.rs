//! # interlock-spec
//!
//! The vocabulary every other Interlock crate speaks. Pure: no I/O, no clock, no SQLite, no MCP.
//!
//! - [`ids`]: validated identifiers ([`ids::Sik`], [`ids::MerchantId`]).
#![deny(missing_docs)]

pub mod canonical;
pub mod hash;
pub mod ids;
pub mod mandate;
pub mod money;
pub mod sik;
mod strict;
