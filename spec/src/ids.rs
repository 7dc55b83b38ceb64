//! Validated identifiers. Each is a newtype whose constructor is the only way in, so a value of the
//! type is proof that the check ran.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Length of a semantic idempotency key, in base32 characters (160 bits of SHA-256).
pub const SIK_LENGTH: usize = 32;
/// Longest merchant id we accept; Razorpay account ids are `acc_` + 14 characters.
pub const MERCHANT_ID_LENGTH_MAX: usize = 64;
/// Longest agent id we accept; agent ids are written by a human into the mandate.
pub const AGENT_ID_LENGTH_MAX: usize = 64;
/// Longest mandate id we accept; mandate ids are written by a human into the mandate.
pub const MANDATE_ID_LENGTH_MAX: usize = 64;
/// Longest tool name we accept; the MCP specification bounds tool names at 128 characters.
pub const TOOL_NAME_LENGTH_MAX: usize = 128;

/// Why an identifier was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// The SIK is not 32 characters of the RFC 4648 base32 alphabet (`A-Z`, `2-7`).
    #[error("sik must be {SIK_LENGTH} characters of A-Z and 2-7, got {0:?}")]
    Sik(String),
    /// The merchant id is empty, too long, or has characters outside `[A-Za-z0-9_]`.
    #[error(
        "merchant_id must be 1..={MERCHANT_ID_LENGTH_MAX} characters of A-Z, a-z, 0-9 and _, got {0:?}"
    )]
    MerchantId(String),
    /// The agent id is empty, too long, or has characters outside `[A-Za-z0-9_]`.
    #[error(
        "agent_id must be 1..={AGENT_ID_LENGTH_MAX} characters of A-Z, a-z, 0-9 and _, got {0:?}"
    )]
    AgentId(String),
    /// The mandate id is empty, too long, or has characters outside `[A-Za-z0-9_]`.
    #[error(
        "mandate_id must be 1..={MANDATE_ID_LENGTH_MAX} characters of A-Z, a-z, 0-9 and _, got {0:?}"
    )]
    MandateId(String),
    /// The tool name is empty, too long, or has characters outside `[A-Za-z0-9_.-]`.
    #[error(
        "tool name must be 1..={TOOL_NAME_LENGTH_MAX} characters of A-Z, a-z, 0-9, _, . and -, got {0:?}"
    )]
    ToolName(String),
}

/// True when `text` is 1..=`length_max` bytes, each accepted by `allowed`.
fn well_formed(text: &str, length_max: usize, allowed: fn(u8) -> bool) -> bool {
    !text.is_empty() && text.len() <= length_max && text.bytes().all(allowed)
}

fn word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// True when `text` is 1..=`length_max` characters of `[A-Za-z0-9_]`, the alphabet of rail
/// entity ids and argument names as well as of our own ids.
pub(crate) fn is_word(text: &str, length_max: usize) -> bool {
    well_formed(text, length_max, word_byte)
}

fn tool_byte(b: u8) -> bool {
    word_byte(b) || b == b'-' || b == b'.'
}

fn base32_byte(b: u8) -> bool {
    b.is_ascii_uppercase() || (b'2'..=b'7').contains(&b)
}

/// The conversions every text id shares: serde goes through `parse`, so a deserialized id is as
/// checked as a constructed one.
macro_rules! text_id {
    ($name:ident, $check:expr, $error:path) => {
        impl $name {
            /// Checks `text` is well-formed.
            pub fn parse(text: &str) -> Result<Self, IdError> {
                if $check(text) {
                    Ok($name(text.to_owned()))
                } else {
                    Err($error(text.to_owned()))
                }
            }

            /// The id as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;
            fn try_from(text: String) -> Result<Self, IdError> {
                $name::parse(&text)
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

/// A semantic idempotency key: the first 32 characters of the unpadded base32 SHA-256 of an
/// action's canonical meaning. Two proposals with the same meaning have the same key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Sik(String);
text_id!(
    Sik,
    |text: &str| text.len() == SIK_LENGTH && well_formed(text, SIK_LENGTH, base32_byte),
    IdError::Sik
);

/// The merchant (rail account) an intent belongs to; half of the intent's primary key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct MerchantId(String);
text_id!(
    MerchantId,
    |text: &str| is_word(text, MERCHANT_ID_LENGTH_MAX),
    IdError::MerchantId
);

/// The agent a mandate authorises; G1 refuses calls from any other agent.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct AgentId(String);
text_id!(
    AgentId,
    |text: &str| is_word(text, AGENT_ID_LENGTH_MAX),
    IdError::AgentId
);

/// The name a human gave a mandate, so audit records and `interlock check` can say which one.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct MandateId(String);
text_id!(
    MandateId,
    |text: &str| is_word(text, MANDATE_ID_LENGTH_MAX),
    IdError::MandateId
);

/// An MCP tool name (`create_refund`, `fetch_payment`), as the upstream server spells it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ToolName(String);
text_id!(
    ToolName,
    |text: &str| well_formed(text, TOOL_NAME_LENGTH_MAX, tool_byte),
    IdError::ToolName
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sik_accepts_only_32_base32_characters() {
        assert!(Sik::parse("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567").is_ok());
        for bad in [
            "",
            "abcdefghijklmnopqrstuvwxyz234567",
            "ABCDEFGHIJKLMNOPQRSTUVWXYZ23456",
            "ABCDEFGHIJKLMNOPQRSTUVWXYZ234561",
            "ABCDEFGHIJKLMNOPQRSTUVWXYZ2345678",
        ] {
            assert_eq!(
                Sik::parse(bad),
                Err(IdError::Sik(bad.to_owned())),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn merchant_id_rejects_empty_long_and_odd_characters() {
        assert!(MerchantId::parse("acc_DEMO000001").is_ok());
        assert!(MerchantId::parse("").is_err());
        assert!(MerchantId::parse("acc-DEMO").is_err());
        assert!(MerchantId::parse(&"a".repeat(MERCHANT_ID_LENGTH_MAX + 1)).is_err());
        assert!(MerchantId::parse(&"a".repeat(MERCHANT_ID_LENGTH_MAX)).is_ok());
    }

    #[test]
    fn agent_and_mandate_ids_use_the_word_alphabet() {
        assert!(AgentId::parse("agent_support_bot").is_ok());
        assert_eq!(
            AgentId::parse("agent bot"),
            Err(IdError::AgentId("agent bot".to_owned()))
        );
        assert!(AgentId::parse(&"a".repeat(AGENT_ID_LENGTH_MAX + 1)).is_err());
        assert!(MandateId::parse("mnd_support_tier1").is_ok());
        assert_eq!(MandateId::parse(""), Err(IdError::MandateId(String::new())));
        assert!(MandateId::parse("mnd/1").is_err());
    }

    #[test]
    fn tool_names_follow_the_mcp_alphabet() {
        for good in ["create_refund", "get-sum", "razorpay.fetch_payment"] {
            assert!(ToolName::parse(good).is_ok(), "{good:?}");
        }
        for bad in ["", "create refund", "tool/x", "é"] {
            assert_eq!(
                ToolName::parse(bad),
                Err(IdError::ToolName(bad.to_owned())),
                "{bad:?}"
            );
        }
        assert!(ToolName::parse(&"t".repeat(TOOL_NAME_LENGTH_MAX)).is_ok());
        assert!(ToolName::parse(&"t".repeat(TOOL_NAME_LENGTH_MAX + 1)).is_err());
    }

    #[test]
    fn serde_goes_through_the_checks() {
        let bad: Result<Sik, _> = serde_json::from_str("\"nope\"");
        assert!(bad.is_err());
        let good: Sik = serde_json::from_str("\"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567\"").unwrap();
        assert_eq!(good.as_str(), "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567");
        let tool: Result<ToolName, _> = serde_json::from_str("\"no spaces\"");
        assert!(tool.is_err());
    }
}
