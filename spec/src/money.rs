//! Money as integers: [`Minor`] (an amount in a currency's smallest unit), [`Currency`] (an ISO
//! 4217-shaped code) and [`Money`] (the two together).
//!
//! Floats never become money. An agent that writes `18.99` meaning rupees, or `100.0` meaning
//! paise, is refused with a reason rather than rounded, because a rounding guess that is wrong by
//! a factor of 100 moves real money.

use crate::strict;
use serde::de;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use std::fmt;

/// Largest amount we accept, in minor units: 2^53 − 1 (9007199254740991), JavaScript's
/// `Number.MAX_SAFE_INTEGER`. JSON peers (JavaScript, many Python JSON paths) hold numbers as
/// IEEE doubles; 2^53 − 1 is the largest integer `n` for which every such peer reads `n` exactly
/// *and* tells it apart from `n + 1` (2^53 and 2^53 + 1 are the same double), so an amount in
/// range reaches the rail as the number we checked. Both ends of Interlock use this one bound:
/// the proxy's [`Minor`] and the mock rail's argument checks.
pub const MINOR_MAX: u64 = (1 << 53) - 1;

/// Why a value was refused as an amount of money.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AmountError {
    /// A JSON number with a fraction or exponent part, even when its value is whole (`100.0`).
    #[error("amount must be an integer in minor units, got float {0}")]
    Float(String),
    /// A string, even one that spells an integer (`"100"`).
    #[error("amount must be a JSON integer in minor units, not a string, got {0:?}")]
    String(String),
    /// A negative integer.
    #[error("amount must not be negative, got {0}")]
    Negative(i64),
    /// Zero where a positive amount is required.
    #[error("amount must be positive, got 0")]
    Zero,
    /// An integer above [`MINOR_MAX`].
    #[error("amount {0} exceeds the largest accepted amount {MINOR_MAX} (2^53 - 1)")]
    TooLarge(u64),
    /// A decimal amount that is not exactly a number of minor units (see [`crate::decimal`]).
    #[error("amount {0}")]
    Decimal(crate::decimal::DecimalError),
    /// Not a number at all: a boolean, null, array or object.
    #[error("amount must be an integer in minor units, got {0}")]
    NotANumber(&'static str),
}

/// An amount of money in a currency's smallest unit (paise for INR, cents for USD), in
/// `0..=MINOR_MAX`. Which currency is not part of the type; see [`Money`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Minor(u64);

impl Minor {
    /// No money; a mandate uses it for tools that move none (`fetch_payment`).
    pub const ZERO: Minor = Minor(0);
    /// The largest amount, [`MINOR_MAX`]: what a sum too large to count saturates to.
    pub const MAX: Minor = Minor(MINOR_MAX);

    /// An amount in `0..=MINOR_MAX`.
    pub fn new(amount: u64) -> Result<Minor, AmountError> {
        if amount > MINOR_MAX {
            return Err(AmountError::TooLarge(amount));
        }
        Ok(Minor(amount))
    }

    /// An amount in `1..=MINOR_MAX`, for anything that actually moves money.
    pub fn positive(amount: u64) -> Result<Minor, AmountError> {
        if amount == 0 {
            return Err(AmountError::Zero);
        }
        Minor::new(amount)
    }

    /// The amount as an integer.
    pub fn get(self) -> u64 {
        self.0
    }

    /// The sum, or `None` if it would exceed [`MINOR_MAX`].
    pub fn checked_add(self, other: Minor) -> Option<Minor> {
        self.0
            .checked_add(other.0)
            .and_then(|sum| Minor::new(sum).ok())
    }

    /// The difference, or `None` if `other` is larger.
    pub fn checked_sub(self, other: Minor) -> Option<Minor> {
        self.0.checked_sub(other.0).map(Minor)
    }

    /// Reads an amount (zero allowed) from a tool argument as the agent sent it.
    pub fn from_json(value: &Value) -> Result<Minor, AmountError> {
        let number = match value {
            Value::Number(number) => number,
            Value::String(text) => return Err(AmountError::String(text.clone())),
            Value::Bool(_) => return Err(AmountError::NotANumber("a boolean")),
            Value::Null => return Err(AmountError::NotANumber("null")),
            Value::Array(_) => return Err(AmountError::NotANumber("an array")),
            Value::Object(_) => return Err(AmountError::NotANumber("an object")),
        };
        // serde_json keeps a number written with `.` or `e` as a float even when it is whole,
        // so `100.0` lands here rather than being read as 100.
        if let Some(amount) = number.as_u64() {
            Minor::new(amount)
        } else if let Some(amount) = number.as_i64() {
            Err(AmountError::Negative(amount))
        } else {
            Err(AmountError::Float(number.to_string()))
        }
    }

    /// Reads an amount that must move money (zero refused) from a tool argument.
    pub fn positive_from_json(value: &Value) -> Result<Minor, AmountError> {
        let amount = Minor::from_json(value)?;
        if amount == Minor::ZERO {
            return Err(AmountError::Zero);
        }
        Ok(amount)
    }
}

impl fmt::Display for Minor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl<'de> Deserialize<'de> for Minor {
    /// Accepts only integer tokens: YAML `1.5` and `"100"` are refused, not coerced.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let expected = "an integer amount in minor units (not a float, not a string)";
        let amount = strict::integer(deserializer, expected)?;
        Minor::new(amount).map_err(de::Error::custom)
    }
}

/// Why a currency code was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("currency must be three uppercase letters A-Z (ISO 4217 shape), got {0:?}")]
pub struct CurrencyError(pub String);

/// A currency code of ISO 4217 shape (`^[A-Z]{3}$`). We check the shape, not membership of the
/// ISO list: the rail is the authority on which currencies it settles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Currency([u8; 3]);

impl Currency {
    /// Indian rupees, Razorpay's home currency.
    pub const INR: Currency = Currency(*b"INR");

    /// Checks `text` is three ASCII uppercase letters.
    pub fn parse(text: &str) -> Result<Currency, CurrencyError> {
        match <[u8; 3]>::try_from(text.as_bytes()) {
            Ok(code) if code.iter().all(u8::is_ascii_uppercase) => Ok(Currency(code)),
            _ => Err(CurrencyError(text.to_owned())),
        }
    }

    /// The code as text.
    pub fn as_str(&self) -> &str {
        // The constructor admits only ASCII letters, which are always valid UTF-8.
        std::str::from_utf8(&self.0).expect("currency codes are ASCII")
    }
}

impl TryFrom<String> for Currency {
    type Error = CurrencyError;
    fn try_from(text: String) -> Result<Self, CurrencyError> {
        Currency::parse(&text)
    }
}

impl From<Currency> for String {
    fn from(currency: Currency) -> String {
        currency.as_str().to_owned()
    }
}

impl fmt::Display for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An amount together with its currency, so the two cannot be separated by accident.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Money {
    /// The amount in `currency`'s minor unit.
    pub amount: Minor,
    /// The currency the amount is in.
    pub currency: Currency,
}

impl fmt::Display for Money {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.amount, self.currency)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn constructors_bound_the_amount() {
        assert_eq!(Minor::new(0), Ok(Minor::ZERO));
        assert_eq!(Minor::new(MINOR_MAX).map(Minor::get), Ok(MINOR_MAX));
        assert_eq!(
            Minor::new(MINOR_MAX + 1),
            Err(AmountError::TooLarge(MINOR_MAX + 1))
        );
        assert_eq!(Minor::positive(0), Err(AmountError::Zero));
        assert_eq!(Minor::positive(1).map(Minor::get), Ok(1));
        assert_eq!(
            Minor::positive(u64::MAX),
            Err(AmountError::TooLarge(u64::MAX))
        );
    }

    #[test]
    fn the_bound_is_javascripts_largest_safe_integer() {
        assert_eq!(MINOR_MAX, 9_007_199_254_740_991);
        // Accepted at the bound, refused one above it, whichever way the amount arrives.
        assert_eq!(Minor::positive(MINOR_MAX).map(Minor::get), Ok(MINOR_MAX));
        assert_eq!(
            Minor::positive(MINOR_MAX + 1),
            Err(AmountError::TooLarge(9_007_199_254_740_992))
        );
        assert_eq!(
            Minor::from_json(&json!(9_007_199_254_740_991_u64)).map(Minor::get),
            Ok(MINOR_MAX)
        );
        assert_eq!(
            Minor::from_json(&json!(9_007_199_254_740_992_u64)),
            Err(AmountError::TooLarge(9_007_199_254_740_992))
        );
    }

    #[test]
    fn arithmetic_stays_inside_the_range() {
        let max = Minor::new(MINOR_MAX).unwrap();
        let one = Minor::positive(1).unwrap();
        assert_eq!(max.checked_add(one), None);
        assert_eq!(one.checked_add(one).map(Minor::get), Some(2));
        assert_eq!(Minor::ZERO.checked_sub(one), None);
        assert_eq!(max.checked_sub(max), Some(Minor::ZERO));
    }

    #[test]
    fn json_integers_are_amounts() {
        assert_eq!(Minor::from_json(&json!(189900)).map(Minor::get), Ok(189900));
        assert_eq!(Minor::from_json(&json!(0)), Ok(Minor::ZERO));
        assert_eq!(
            Minor::positive_from_json(&json!(MINOR_MAX)).map(Minor::get),
            Ok(MINOR_MAX)
        );
    }

    #[test]
    fn json_floats_are_refused_even_when_whole() {
        for text in ["100.0", "18.99", "1e3", "-0.0"] {
            let value: Value = serde_json::from_str(text).unwrap();
            assert!(
                matches!(Minor::from_json(&value), Err(AmountError::Float(_))),
                "{text}"
            );
        }
        let error = Minor::from_json(&json!(100.0)).unwrap_err();
        assert_eq!(
            error.to_string(),
            "amount must be an integer in minor units, got float 100.0"
        );
    }

    #[test]
    fn json_strings_are_refused_even_when_numeric() {
        assert_eq!(
            Minor::from_json(&json!("100")),
            Err(AmountError::String("100".to_owned()))
        );
        assert_eq!(
            Minor::positive_from_json(&json!("abc")),
            Err(AmountError::String("abc".to_owned()))
        );
    }

    #[test]
    fn json_negatives_zero_and_huge_are_refused() {
        assert_eq!(
            Minor::from_json(&json!(-100)),
            Err(AmountError::Negative(-100))
        );
        assert_eq!(Minor::positive_from_json(&json!(0)), Err(AmountError::Zero));
        assert_eq!(
            Minor::from_json(&json!(MINOR_MAX + 1)),
            Err(AmountError::TooLarge(MINOR_MAX + 1))
        );
        assert_eq!(
            Minor::from_json(&json!(u64::MAX)),
            Err(AmountError::TooLarge(u64::MAX))
        );
    }

    #[test]
    fn json_non_numbers_are_refused() {
        for (value, kind) in [
            (json!(true), "a boolean"),
            (json!(null), "null"),
            (json!([100]), "an array"),
            (json!({"amount": 100}), "an object"),
        ] {
            assert_eq!(Minor::from_json(&value), Err(AmountError::NotANumber(kind)));
        }
    }

    #[test]
    fn serde_refuses_floats_strings_and_negatives() {
        assert_eq!(serde_json::from_str::<Minor>("100").unwrap().get(), 100);
        for bad in [
            "100.0",
            "1.5",
            "\"100\"",
            "-1",
            "true",
            "null",
            "9007199254740993",
        ] {
            assert!(serde_json::from_str::<Minor>(bad).is_err(), "{bad}");
        }
        assert_eq!(serde_saphyr::from_str::<Minor>("100").unwrap().get(), 100);
        for bad in ["1.5", "100.0", "\"100\"", "'100'", "-5", "~", "1e3"] {
            assert!(serde_saphyr::from_str::<Minor>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn currency_has_iso_shape() {
        assert_eq!(Currency::parse("INR"), Ok(Currency::INR));
        assert_eq!(Currency::parse("USD").unwrap().as_str(), "USD");
        for bad in ["", "inr", "INRR", "IN", "IN1", "ÍNR", "I R"] {
            assert_eq!(
                Currency::parse(bad),
                Err(CurrencyError(bad.to_owned())),
                "{bad:?}"
            );
        }
        assert!(serde_json::from_str::<Currency>("\"usd\"").is_err());
    }

    #[test]
    fn money_round_trips_through_json() {
        let money = Money {
            amount: Minor::positive(189900).unwrap(),
            currency: Currency::INR,
        };
        let text = serde_json::to_string(&money).unwrap();
        assert_eq!(text, r#"{"amount":189900,"currency":"INR"}"#);
        assert_eq!(serde_json::from_str::<Money>(&text).unwrap(), money);
        assert_eq!(money.to_string(), "189900 INR");
        assert!(serde_json::from_str::<Money>(r#"{"amount":1.5,"currency":"INR"}"#).is_err());
    }
}
