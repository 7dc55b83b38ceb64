//! Integer deserialization that refuses everything but integers.
//!
//! Serde's derived `u64` accepts whatever the format coerces: serde-saphyr reads the quoted YAML
//! string `"100"` into a `u64` field as 100. Money and time must be written as integers, so these
//! helpers ask the format what it actually saw (`deserialize_any`) and accept only integer tokens.

use serde::Deserializer;
use serde::de::{self, Unexpected, Visitor};
use std::fmt;

/// A non-negative integer exactly as written; floats, strings, booleans and null are refused.
pub(crate) struct StrictU64(pub(crate) u64);

/// Accepts integer tokens only. `expected` completes "invalid type: floating point `1.5`,
/// expected ..." in the error.
struct IntegerVisitor {
    expected: &'static str,
}

impl Visitor<'_> for IntegerVisitor {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.expected)
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<u64, E> {
        Ok(value)
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<u64, E> {
        u64::try_from(value).map_err(|_| E::invalid_value(Unexpected::Signed(value), &self))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<u64, E> {
        Err(E::invalid_type(Unexpected::Float(value), &self))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<u64, E> {
        Err(E::invalid_type(Unexpected::Str(value), &self))
    }
}

/// Reads a non-negative integer token, whatever the format would otherwise coerce.
pub(crate) fn integer<'de, D: Deserializer<'de>>(
    deserializer: D,
    expected: &'static str,
) -> Result<u64, D::Error> {
    deserializer.deserialize_any(IntegerVisitor { expected })
}

impl<'de> serde::Deserialize<'de> for StrictU64 {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        integer(
            deserializer,
            "a non-negative integer (not a float, not a string)",
        )
        .map(StrictU64)
    }
}

/// `deserialize_with` for a `u64` field.
pub(crate) fn u64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    <StrictU64 as serde::Deserialize>::deserialize(deserializer).map(|n| n.0)
}

/// `deserialize_with` for an `Option<u64>` field: `null` is `None`, anything else must be an
/// integer.
pub(crate) fn option_u64<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<u64>, D::Error> {
    <Option<StrictU64> as serde::Deserialize>::deserialize(deserializer).map(|n| n.map(|n| n.0))
}

/// `deserialize_with` for a `u32` field.
pub(crate) fn u32<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u32, D::Error> {
    let value = u64(deserializer)?;
    u32::try_from(value).map_err(|_| {
        de::Error::invalid_value(
            Unexpected::Unsigned(value),
            &"an integer at most 4294967295",
        )
    })
}

/// `deserialize_with` for an `Option<u32>` field.
pub(crate) fn option_u32<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<u32>, D::Error> {
    match option_u64(deserializer)? {
        None => Ok(None),
        Some(value) => u32::try_from(value).map(Some).map_err(|_| {
            de::Error::invalid_value(
                Unexpected::Unsigned(value),
                &"an integer at most 4294967295",
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    struct Holder {
        #[serde(deserialize_with = "u64")]
        n: u64,
        #[serde(default, deserialize_with = "option_u64")]
        maybe: Option<u64>,
        #[serde(default, deserialize_with = "option_u32")]
        small: Option<u32>,
    }

    fn yaml(text: &str) -> Result<Holder, serde_saphyr::Error> {
        serde_saphyr::from_str(text)
    }

    #[test]
    fn integers_pass_and_null_is_none() {
        let held = yaml("n: 7\nmaybe: null\nsmall: 3").unwrap();
        assert_eq!((held.n, held.maybe, held.small), (7, None, Some(3)));
        assert_eq!(yaml("n: 7\nmaybe: 9").unwrap().maybe, Some(9));
    }

    #[test]
    fn floats_strings_negatives_and_booleans_are_refused() {
        for bad in [
            "n: 1.0",
            "n: 1.5",
            "n: \"100\"",
            "n: '100'",
            "n: -1",
            "n: true",
            "n: null",
            "n: 1\nmaybe: 2.5",
            "n: 1\nmaybe: \"2\"",
            "n: 1\nsmall: 4294967296",
        ] {
            assert!(yaml(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn json_floats_are_refused_too() {
        let bad: Result<Holder, _> = serde_json::from_str(r#"{"n": 100.0}"#);
        assert!(bad.is_err());
    }
}
