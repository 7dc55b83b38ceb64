//! Exact decimal amounts: a rail that speaks major units with a fraction (`98.70` euros) is
//! read from the number's text into integer minor units with the currency's exponent, and
//! written back the same way. No `f64` is ever involved: `0.1 + 0.2` style error cannot reach
//! money, and a number with more precision than the currency has is refused, not rounded.
//!
//! The text comes from the JSON number as the agent wrote it (serde_json keeps it with the
//! workspace's `arbitrary_precision` feature) or from a decimal string.

use crate::money::{Currency, MINOR_MAX, Minor};
use serde_json::{Number, Value};

/// Longest decimal text read, in bytes. 2^53 − 1 minor units is 16 digits; with a sign, a
/// point, an exponent and trailing zeros, 40 bytes is more than any payable amount needs, and a
/// longer text is refused before any digit is looked at.
pub const DECIMAL_TEXT_BYTES_MAX: usize = 40;
/// Largest |exponent| accepted in `1.5e2` notation. Every payable amount is within
/// 10^-4..10^16 major units, so ±20 refuses only numbers that cannot be money (`1e400`).
pub const DECIMAL_EXPONENT_MAX: i32 = 20;

/// ISO 4217 currencies whose minor unit is not 1/100 of the major (list 1, 2024 edition).
const EXPONENTS: &[(&str, u8)] = &[
    ("BHD", 3),
    ("BIF", 0),
    ("CLF", 4),
    ("CLP", 0),
    ("DJF", 0),
    ("GNF", 0),
    ("IQD", 3),
    ("ISK", 0),
    ("JOD", 3),
    ("JPY", 0),
    ("KMF", 0),
    ("KRW", 0),
    ("KWD", 3),
    ("LYD", 3),
    ("OMR", 3),
    ("PYG", 0),
    ("RWF", 0),
    ("TND", 3),
    ("UGX", 0),
    ("UYI", 0),
    ("UYW", 4),
    ("VND", 0),
    ("VUV", 0),
    ("XAF", 0),
    ("XOF", 0),
    ("XPF", 0),
];

/// ISO 4217 currencies whose minor unit is 1/100. A code in neither list has no exponent we
/// know, and a decimal amount in it is refused rather than guessed at: a wrong exponent moves
/// a factor of 10 or 100.
const CENTESIMAL: &str = "AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BMD BND BOB \
BOV BRL BSD BTN BWP BYN BZD CAD CDF CHE CHF CHW CNY COP COU CRC CUP CVE CZK DKK DOP DZD EGP ERN \
ETB EUR FJD FKP GBP GEL GHS GIP GMD GTQ GYD HKD HNL HTG HUF IDR ILS INR IRR JMD KES KGS KHR KPW \
KYD KZT LAK LBP LKR LRD LSL MAD MDL MGA MKD MMK MNT MOP MRU MUR MVR MWK MXN MXV MYR MZN NAD NGN \
NIO NOK NPR NZD PAB PEN PGK PHP PKR PLN QAR RON RSD RUB SAR SBD SCR SDG SEK SGD SHP SLE SOS SRD \
SSP STN SVC SYP SZL THB TJS TMT TOP TRY TTD TWD TZS UAH USD USN UYU UZS VED VES WST XCD YER ZAR \
ZMW ZWG";

impl Currency {
    /// How many decimal places the currency's minor unit has (EUR 2, JPY 0, KWD 3), from ISO
    /// 4217; `None` for a code the list does not have.
    pub fn minor_exponent(&self) -> Option<u8> {
        let code = self.as_str();
        if let Some((_, exponent)) = EXPONENTS.iter().find(|(c, _)| *c == code) {
            return Some(*exponent);
        }
        CENTESIMAL
            .split_ascii_whitespace()
            .any(|c| c == code)
            .then_some(2)
    }
}

/// Why a decimal amount was refused; each says the rule it broke.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecimalError {
    /// Not digits with an optional fraction and exponent.
    #[error(
        "must be a decimal number of major units like 98.70 (digits, an optional '.' and \
         fraction, no sign, comma, space or leading zero), got {0:?}"
    )]
    Syntax(String),
    /// Negative.
    #[error("must not be negative, got {0}")]
    Negative(String),
    /// Zero, where an amount must move money.
    #[error("must be positive, got {0}")]
    Zero(String),
    /// More decimal places than the currency's minor unit has.
    #[error("{got} has {places} decimal places; {currency}'s minor unit has {exponent}")]
    TooPrecise {
        /// The text.
        got: String,
        /// Its significant decimal places.
        places: usize,
        /// The currency.
        currency: Currency,
        /// The currency's places.
        exponent: u8,
    },
    /// An exponent outside ±[`DECIMAL_EXPONENT_MAX`].
    #[error("{0}: the exponent must be within ±{DECIMAL_EXPONENT_MAX}")]
    Exponent(String),
    /// Longer than [`DECIMAL_TEXT_BYTES_MAX`].
    #[error("is {0} bytes long; a decimal amount is at most {DECIMAL_TEXT_BYTES_MAX}")]
    TooLong(usize),
    /// More than [`MINOR_MAX`] minor units.
    #[error("{0} is more than the largest accepted amount, {MINOR_MAX} minor units")]
    TooLarge(String),
    /// The currency has no exponent Interlock knows.
    #[error("{0} is not an ISO 4217 currency with a known minor unit")]
    UnknownCurrency(Currency),
    /// Not a number or a string.
    #[error("must be a decimal number, got {0}")]
    NotANumber(&'static str),
}

/// Reads a positive decimal amount of `currency` from a JSON number's text or a decimal string.
pub fn positive_from_json(value: &Value, currency: Currency) -> Result<Minor, DecimalError> {
    let text = match value {
        Value::Number(number) => number.to_string(),
        Value::String(text) => text.clone(),
        Value::Bool(_) => return Err(DecimalError::NotANumber("a boolean")),
        Value::Null => return Err(DecimalError::NotANumber("null")),
        Value::Array(_) => return Err(DecimalError::NotANumber("an array")),
        Value::Object(_) => return Err(DecimalError::NotANumber("an object")),
    };
    let amount = from_text(&text, currency)?;
    if amount == Minor::ZERO {
        return Err(DecimalError::Zero(text));
    }
    Ok(amount)
}

/// Reads a decimal amount (zero allowed) of `currency` from `text`, exactly.
pub fn from_text(text: &str, currency: Currency) -> Result<Minor, DecimalError> {
    if text.len() > DECIMAL_TEXT_BYTES_MAX {
        return Err(DecimalError::TooLong(text.len()));
    }
    let exponent = currency
        .minor_exponent()
        .ok_or(DecimalError::UnknownCurrency(currency))?;
    if text.starts_with('-') {
        return Err(DecimalError::Negative(text.to_owned()));
    }
    let syntax = || DecimalError::Syntax(text.to_owned());
    let (mantissa, power) = match text.split_once(['e', 'E']) {
        Some((mantissa, power)) => (mantissa, power_of_ten(text, power)?),
        None => (text, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits_only = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let leading_zero = whole.len() > 1 && whole.starts_with('0');
    if !digits_only(whole) || leading_zero || (mantissa.contains('.') && !digits_only(fraction)) {
        return Err(syntax());
    }
    // value = digits × 10^(power − fraction places); in minor units, × 10^exponent more.
    let digits = format!("{whole}{fraction}");
    let fraction_places = i32::try_from(fraction.len()).map_err(|_| syntax())?;
    let shift = i32::from(exponent) + power - fraction_places;
    let scaled = if shift >= 0 {
        let zeros = usize::try_from(shift).map_err(|_| syntax())?;
        format!("{digits}{}", "0".repeat(zeros))
    } else {
        let cut = usize::try_from(-shift).map_err(|_| syntax())?;
        let keep = digits.len().saturating_sub(cut);
        let (kept, dropped) = digits.split_at(keep);
        if dropped.bytes().any(|b| b != b'0') {
            let significant = dropped.trim_end_matches('0').len();
            let places = usize::from(exponent) + significant;
            return Err(DecimalError::TooPrecise {
                got: text.to_owned(),
                places,
                currency,
                exponent,
            });
        }
        kept.to_owned()
    };
    let significant = scaled.trim_start_matches('0');
    let too_large = || DecimalError::TooLarge(text.to_owned());
    // 2^53 − 1 has 16 digits; more cannot be in range and might overflow u64.
    if significant.len() > 16 {
        return Err(too_large());
    }
    let amount: u64 = if significant.is_empty() {
        0
    } else {
        significant.parse().map_err(|_| too_large())?
    };
    Minor::new(amount).map_err(|_| too_large())
}

fn power_of_ten(text: &str, power: &str) -> Result<i32, DecimalError> {
    let digits = power.strip_prefix(['+', '-']).unwrap_or(power);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(DecimalError::Syntax(text.to_owned()));
    }
    // At most three digits are read, so a huge exponent cannot overflow before it is refused.
    let magnitude: i32 = if digits.len() > 3 {
        i32::MAX
    } else {
        digits.parse().unwrap_or(i32::MAX)
    };
    if magnitude > DECIMAL_EXPONENT_MAX {
        return Err(DecimalError::Exponent(text.to_owned()));
    }
    Ok(if power.starts_with('-') {
        -magnitude
    } else {
        magnitude
    })
}

/// `amount` minor units of `currency` as decimal major units: 9870 EUR is `98.70`, 5 JPY is
/// `5`, 5 KWD is `0.005`. Exact: the digits are placed, never computed in floating point.
pub fn to_text(amount: Minor, currency: Currency) -> Result<String, DecimalError> {
    let exponent = usize::from(
        currency
            .minor_exponent()
            .ok_or(DecimalError::UnknownCurrency(currency))?,
    );
    let digits = format!("{:0>width$}", amount.get(), width = exponent + 1);
    let (whole, fraction) = digits.split_at(digits.len() - exponent);
    Ok(if fraction.is_empty() {
        whole.to_owned()
    } else {
        format!("{whole}.{fraction}")
    })
}

/// `amount` as a JSON number written in decimal major units, the text kept exactly.
pub fn to_json(amount: Minor, currency: Currency) -> Result<Value, DecimalError> {
    let text = to_text(amount, currency)?;
    // The text is digits and at most one point: always a JSON number.
    let number: Number = serde_json::from_str(&text).map_err(|_| DecimalError::Syntax(text))?;
    Ok(Value::Number(number))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cur(code: &str) -> Currency {
        Currency::parse(code).unwrap()
    }

    fn json(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn exponents_follow_iso_4217() {
        let exponent = |code: &str| cur(code).minor_exponent();
        assert_eq!(exponent("EUR"), Some(2));
        assert_eq!(exponent("INR"), Some(2));
        assert_eq!(exponent("JPY"), Some(0));
        assert_eq!(exponent("KWD"), Some(3));
        assert_eq!(exponent("CLF"), Some(4));
        assert_eq!(exponent("XYZ"), None);
        assert_eq!(EXPONENTS.len(), 26);
        // Pinned so an edit of either list is deliberate; no code is in both.
        assert_eq!(CENTESIMAL.split_ascii_whitespace().count(), 139);
        for code in CENTESIMAL.split_ascii_whitespace() {
            assert!(EXPONENTS.iter().all(|(c, _)| *c != code), "{code}");
        }
    }

    #[test]
    fn decimal_text_becomes_exact_minor_units() {
        let eur = cur("EUR");
        for (text, minor) in [
            ("98.70", 9870),
            ("98.7", 9870),
            ("98.700", 9870),
            ("0.01", 1),
            ("100", 10000),
            ("1.5e2", 15000),
            ("1E+2", 10000),
            ("12345e-2", 12345),
            ("90071992547409.91", MINOR_MAX),
        ] {
            assert_eq!(from_text(text, eur).map(Minor::get), Ok(minor), "{text}");
        }
        assert_eq!(from_text("5", cur("JPY")).map(Minor::get), Ok(5));
        assert_eq!(from_text("1.234", cur("KWD")).map(Minor::get), Ok(1234));
        // A number with more digits than an f64 holds is still read exactly.
        let long = "1234567890.12";
        assert_eq!(from_text(long, eur).map(Minor::get), Ok(123_456_789_012));
    }

    #[test]
    fn what_is_not_payable_is_refused_with_the_rule() {
        let eur = cur("EUR");
        let cases = [
            (
                "0.001",
                "0.001 has 3 decimal places; EUR's minor unit has 2",
            ),
            (
                "100.00000000000000001",
                "100.00000000000000001 has 17 decimal places; EUR's minor unit has 2",
            ),
            ("1e400", "1e400: the exponent must be within ±20"),
            ("NaN", "must be a decimal number of major units like 98.70"),
            (
                "12,50",
                "must be a decimal number of major units like 98.70",
            ),
            (
                "Infinity",
                "must be a decimal number of major units like 98.70",
            ),
            (" 5", "must be a decimal number of major units like 98.70"),
            ("05", "must be a decimal number of major units like 98.70"),
            (".5", "must be a decimal number of major units like 98.70"),
            ("5.", "must be a decimal number of major units like 98.70"),
            ("+5", "must be a decimal number of major units like 98.70"),
            ("-5.00", "must not be negative, got -5.00"),
            (
                "90071992547409.92",
                "90071992547409.92 is more than the largest accepted amount",
            ),
        ];
        for (text, message) in cases {
            let error = from_text(text, eur).unwrap_err().to_string();
            assert!(error.starts_with(message), "{text}: {error}");
        }
        assert_eq!(
            from_text("1.5", cur("JPY")).unwrap_err().to_string(),
            "1.5 has 1 decimal places; JPY's minor unit has 0"
        );
        assert_eq!(
            from_text("1", cur("XYZ")).unwrap_err(),
            DecimalError::UnknownCurrency(cur("XYZ"))
        );
        let long = "1".repeat(41);
        assert_eq!(from_text(&long, eur), Err(DecimalError::TooLong(41)));
    }

    #[test]
    fn json_numbers_keep_their_text() {
        let eur = cur("EUR");
        assert_eq!(
            positive_from_json(&json("98.70"), eur).map(Minor::get),
            Ok(9870)
        );
        assert_eq!(
            positive_from_json(&json("\"98.70\""), eur).map(Minor::get),
            Ok(9870)
        );
        // 0.1 + 0.2 is not 0.3 in f64; as text it is what was written.
        assert_eq!(
            positive_from_json(&json("0.30"), eur).map(Minor::get),
            Ok(30)
        );
        assert!(matches!(
            positive_from_json(&json("1e400"), eur),
            Err(DecimalError::Exponent(_))
        ));
        assert!(matches!(
            positive_from_json(&json("0.00"), eur),
            Err(DecimalError::Zero(_))
        ));
        assert_eq!(
            positive_from_json(&json("true"), eur),
            Err(DecimalError::NotANumber("a boolean"))
        );
    }

    #[test]
    fn minor_units_are_written_back_as_the_same_decimal() {
        let cases = [
            ("EUR", 9870, "98.70"),
            ("EUR", 5, "0.05"),
            ("JPY", 5, "5"),
            ("KWD", 5, "0.005"),
        ];
        for (code, minor, text) in cases {
            let amount = Minor::new(minor).unwrap();
            assert_eq!(to_text(amount, cur(code)).unwrap(), text);
            assert_eq!(to_json(amount, cur(code)).unwrap().to_string(), text);
            assert_eq!(from_text(text, cur(code)), Ok(amount));
        }
    }
}
