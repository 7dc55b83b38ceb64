//! Validated identifiers. Each is a newtype whose constructor is the only way in, so a value of the
//! type is proof that the check ran.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Length of a semantic idempotency key, in base32 characters (160 bits of SHA-256).
pub const SIK_LENGTH: usize = 32;
/// Longest merchant id we accept; Razorpay account ids are `acc_` + 14 characters.
pub const MERCHANT_ID_LENGTH_MAX: usize = 64;

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
}

/// A semantic idempotency key: the first 32 characters of the unpadded base32 SHA-256 of an
/// action's canonical meaning. Two proposals with the same meaning have the same key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Sik(String);

impl Sik {
    /// Checks `text` is a well-formed key.
    pub fn parse(text: &str) -> Result<Self, IdError> {
        let well_formed = text.len() == SIK_LENGTH
            && text
                .bytes()
                .all(|b| b.is_ascii_uppercase() || (b'2'..=b'7').contains(&b));
        if well_formed {
            Ok(Sik(text.to_owned()))
        } else {
            Err(IdError::Sik(text.to_owned()))
        }
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Sik {
    type Error = IdError;
    fn try_from(text: String) -> Result<Self, IdError> {
        Sik::parse(&text)
    }
}

impl From<Sik> for String {
    fn from(sik: Sik) -> String {
        sik.0
    }
}

impl fmt::Display for Sik {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The merchant (rail account) an intent belongs to; half of the intent's primary key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct MerchantId(String);

impl MerchantId {
    /// Checks `text` is a well-formed merchant id.
    pub fn parse(text: &str) -> Result<Self, IdError> {
        let well_formed = !text.is_empty()
            && text.len() <= MERCHANT_ID_LENGTH_MAX
            && text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if well_formed {
            Ok(MerchantId(text.to_owned()))
        } else {
            Err(IdError::MerchantId(text.to_owned()))
        }
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for MerchantId {
    type Error = IdError;
    fn try_from(text: String) -> Result<Self, IdError> {
        MerchantId::parse(&text)
    }
}

impl From<MerchantId> for String {
    fn from(id: MerchantId) -> String {
        id.0
    }
}

impl fmt::Display for MerchantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

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
    fn serde_goes_through_the_checks() {
        let bad: Result<Sik, _> = serde_json::from_str("\"nope\"");
        assert!(bad.is_err());
        let good: Sik = serde_json::from_str("\"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567\"").unwrap();
        assert_eq!(good.as_str(), "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567");
    }
}
