//! RFC 8785 (JSON Canonicalization Scheme) over the JSON subset Interlock hashes: objects,
//! arrays, strings, integers of magnitude at most 2^53, booleans and null.
//!
//! Two JSON texts with the same meaning (key order, whitespace, escape spelling) have the same
//! canonical form, so hashing it gives a key for the meaning rather than the spelling.
//!
//! Non-integer numbers are refused rather than serialized. RFC 8785 formats them with the
//! ECMAScript number-to-string algorithm; we carry no floats (money is integer minor units, time
//! is integer milliseconds), so a float reaching a hash is a bug or an attack, and refusing it is
//! both smaller and safer than reproducing ECMAScript's shortest round-trip printing. For the
//! integers we accept, ECMAScript's output is plain decimal, so our bytes equal RFC 8785's.

use serde_json::{Map, Number, Value};
use std::fmt::Write as _;

/// Largest integer magnitude we canonicalize: 2^53. Above it IEEE doubles (and so every
/// ECMAScript-based JCS implementation) cannot hold every integer, and two implementations could
/// disagree about the bytes.
pub const JSON_INTEGER_MAX: u64 = 1 << 53;
/// Deepest nesting of arrays and objects we canonicalize; the walk is recursive, so this bounds
/// the stack for values built in memory (serde_json's parser stops at 128 on its own).
pub const CANONICAL_DEPTH_MAX: usize = 128;

// Every amount of money must canonicalize, or hashing a valid action could fail.
const _: () = assert!(crate::money::MINOR_MAX <= JSON_INTEGER_MAX);

/// Why a value has no canonical form here. `pointer` is the RFC 6901 JSON Pointer of the
/// offending value (`""` is the root).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CanonicalError {
    /// A number with a fraction or exponent part, including whole ones such as `100.0`.
    #[error("value at {pointer:?} is not an integer ({number}); only integers are canonicalized")]
    NotAnInteger {
        /// Where the number is.
        pointer: String,
        /// The number as serde_json prints it.
        number: String,
    },
    /// An integer whose magnitude exceeds [`JSON_INTEGER_MAX`].
    #[error("integer {number} at {pointer:?} exceeds 2^53 in magnitude")]
    IntegerTooLarge {
        /// Where the number is.
        pointer: String,
        /// The integer.
        number: String,
    },
    /// Arrays and objects nested deeper than [`CANONICAL_DEPTH_MAX`].
    #[error("value at {pointer:?} is nested deeper than {CANONICAL_DEPTH_MAX}")]
    TooDeep {
        /// The first value past the limit.
        pointer: String,
    },
}

/// One step of the path from the root to the value being written, kept so an error can name
/// its place without formatting a path for every value that succeeds.
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

fn pointer(path: &[Step<'_>]) -> String {
    let mut text = String::new();
    for step in path {
        text.push('/');
        match step {
            Step::Key(key) => text.push_str(&key.replace('~', "~0").replace('/', "~1")),
            Step::Index(index) => text.push_str(&index.to_string()),
        }
    }
    text
}

/// The RFC 8785 canonical text of `value`.
pub fn canonical_json(value: &Value) -> Result<String, CanonicalError> {
    let mut out = String::new();
    let mut path = Vec::new();
    write_value(value, &mut path, &mut out)?;
    Ok(out)
}

fn write_value<'a>(
    value: &'a Value,
    path: &mut Vec<Step<'a>>,
    out: &mut String,
) -> Result<(), CanonicalError> {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(number) => write_integer(number, path, out)?,
        Value::String(text) => write_string(text, out),
        Value::Array(items) => write_array(items, path, out)?,
        Value::Object(map) => write_object(map, path, out)?,
    }
    Ok(())
}

fn enter(path: &[Step<'_>]) -> Result<(), CanonicalError> {
    if path.len() >= CANONICAL_DEPTH_MAX {
        return Err(CanonicalError::TooDeep {
            pointer: pointer(path),
        });
    }
    Ok(())
}

fn write_array<'a>(
    items: &'a [Value],
    path: &mut Vec<Step<'a>>,
    out: &mut String,
) -> Result<(), CanonicalError> {
    enter(path)?;
    out.push('[');
    for (index, item) in items.iter().enumerate() {
        if index > 0 {
            out.push(',');
        }
        path.push(Step::Index(index));
        write_value(item, path, out)?;
        path.pop();
    }
    out.push(']');
    Ok(())
}

fn write_object<'a>(
    map: &'a Map<String, Value>,
    path: &mut Vec<Step<'a>>,
    out: &mut String,
) -> Result<(), CanonicalError> {
    enter(path)?;
    // RFC 8785 §3.2.3: members sorted by their names as arrays of UTF-16 code units, which is
    // not the order of UTF-8 bytes or of code points once characters above U+FFFF appear.
    let mut members: Vec<(&String, &Value)> = map.iter().collect();
    members.sort_by(|(a, _), (b, _)| a.encode_utf16().cmp(b.encode_utf16()));
    out.push('{');
    for (index, (key, item)) in members.into_iter().enumerate() {
        if index > 0 {
            out.push(',');
        }
        write_string(key, out);
        out.push(':');
        path.push(Step::Key(key));
        write_value(item, path, out)?;
        path.pop();
    }
    out.push('}');
    Ok(())
}

fn write_integer(
    number: &Number,
    path: &[Step<'_>],
    out: &mut String,
) -> Result<(), CanonicalError> {
    let magnitude = if let Some(n) = number.as_u64() {
        n
    } else if let Some(n) = number.as_i64() {
        n.unsigned_abs()
    } else {
        return Err(CanonicalError::NotAnInteger {
            pointer: pointer(path),
            number: number.to_string(),
        });
    };
    if magnitude > JSON_INTEGER_MAX {
        return Err(CanonicalError::IntegerTooLarge {
            pointer: pointer(path),
            number: number.to_string(),
        });
    }
    // serde_json prints integers as plain decimal with a leading '-' when negative, which is
    // exactly ECMAScript's Number::toString for |n| <= 2^53.
    out.push_str(&number.to_string());
    Ok(())
}

/// RFC 8785 §3.2.2.2: escape only `"`, `\` and the controls below U+0020, using the two-character
/// forms where JSON has them and lowercase `\u00xx` otherwise; everything else is literal UTF-8.
fn write_string(text: &str, out: &mut String) {
    out.push('"');
    for ch in text.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{c}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            control if control < '\u{20}' => {
                // Writing to a String cannot fail.
                let _ = write!(out, "\\u{:04x}", u32::from(control));
            }
            other => out.push(other),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn canonical_of(text: &str) -> Result<String, CanonicalError> {
        canonical_json(&serde_json::from_str(text).unwrap())
    }

    /// RFC 8785 §3.2.3, "Sorting of Object Properties": the names sort by UTF-16 code units, so
    /// the emoji (surrogates D83D DE00) sorts before U+FB33 although its code point is larger.
    #[test]
    fn rfc_8785_property_sorting_example() {
        let input = r#"{
            "\u20ac": "Euro Sign",
            "\r": "Carriage Return",
            "\ufb33": "Hebrew Letter Dalet With Dagesh",
            "1": "One",
            "\ud83d\ude00": "Emoji: Grinning Face",
            "\u0080": "Control",
            "\u00f6": "Latin Small Letter O With Diaeresis"
        }"#;
        let expected = "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",\
            \"\u{f6}\":\"Latin Small Letter O With Diaeresis\",\"\u{20ac}\":\"Euro Sign\",\
            \"\u{1f600}\":\"Emoji: Grinning Face\",\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}";
        assert_eq!(canonical_of(input).unwrap(), expected);
    }

    /// RFC 8785 §3.2.2's example without its `numbers` member (all floats, refused below): the
    /// string shows which characters are escaped and which are written literally.
    #[test]
    fn rfc_8785_string_and_literal_example() {
        let input = r#"{
            "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
            "literals": [null, true, false]
        }"#;
        let expected = r#"{"literals":[null,true,false],"string":"€$\u000f\nA'B\"\\\\\"/"}"#;
        assert_eq!(canonical_of(input).unwrap(), expected);
    }

    /// The same RFC example with its numbers: every one is a float, so we refuse it and name the
    /// first offender rather than print ECMAScript float text.
    #[test]
    fn rfc_8785_number_example_is_refused() {
        let input = r#"{
            "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
            "literals": [null, true, false]
        }"#;
        // The printed number is serde_json's reading of the float, which is beside the point.
        assert!(matches!(
            canonical_of(input),
            Err(CanonicalError::NotAnInteger { pointer, .. }) if pointer == "/numbers/0"
        ));
        for float in ["1E30", "4.50", "2e-3", "1e-27", "100.0", "-0.0"] {
            assert!(
                matches!(
                    canonical_of(float),
                    Err(CanonicalError::NotAnInteger { .. })
                ),
                "{float}"
            );
        }
    }

    #[test]
    fn integers_up_to_two_to_the_53_in_magnitude() {
        let max = JSON_INTEGER_MAX;
        assert_eq!(canonical_json(&json!(max)).unwrap(), "9007199254740992");
        assert_eq!(
            canonical_json(&json!(-(max as i64))).unwrap(),
            "-9007199254740992"
        );
        assert_eq!(canonical_json(&json!([0, -1, 42])).unwrap(), "[0,-1,42]");
        assert_eq!(
            canonical_json(&json!({"a": [max + 1]})),
            Err(CanonicalError::IntegerTooLarge {
                pointer: "/a/0".to_owned(),
                number: "9007199254740993".to_owned(),
            })
        );
        assert!(canonical_json(&json!(-(max as i64) - 1)).is_err());
        assert!(canonical_json(&json!(u64::MAX)).is_err());
    }

    #[test]
    fn whitespace_and_member_order_do_not_matter() {
        let a = canonical_of(r#"{ "b" : 1, "a" : [ 1 , {"y":null, "x":true} ] }"#).unwrap();
        let b = canonical_of(r#"{"a":[1,{"x":true,"y":null}],"b":1}"#).unwrap();
        assert_eq!(a, r#"{"a":[1,{"x":true,"y":null}],"b":1}"#);
        assert_eq!(a, b);
    }

    #[test]
    fn only_quote_backslash_and_low_controls_are_escaped() {
        let value = json!("\u{0}\u{1f}\u{7f}/<>\u{2028}é\u{8}\u{c}");
        assert_eq!(
            canonical_json(&value).unwrap(),
            "\"\\u0000\\u001f\u{7f}/<>\u{2028}é\\b\\f\""
        );
    }

    #[test]
    fn error_pointers_escape_tilde_and_slash() {
        let value = json!({"a/b": {"c~d": 1.5}});
        assert_eq!(
            canonical_json(&value),
            Err(CanonicalError::NotAnInteger {
                pointer: "/a~1b/c~0d".to_owned(),
                number: "1.5".to_owned(),
            })
        );
    }

    #[test]
    fn nesting_is_bounded() {
        let mut deep = json!(0);
        for _ in 0..CANONICAL_DEPTH_MAX {
            deep = json!([deep]);
        }
        assert!(canonical_json(&deep).is_ok());
        let too_deep = json!([deep]);
        assert!(matches!(
            canonical_json(&too_deep),
            Err(CanonicalError::TooDeep { .. })
        ));
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let max = JSON_INTEGER_MAX as i64;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-max..=max).prop_map(|n| json!(n)),
            any::<String>().prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                prop::collection::vec((any::<String>(), inner), 0..8)
                    .prop_map(|members| Value::Object(members.into_iter().collect())),
            ]
        })
    }

    /// The same value with every object's members inserted in reverse order.
    fn reversed(value: &Value) -> Value {
        match value {
            Value::Array(items) => Value::Array(items.iter().map(reversed).collect()),
            Value::Object(map) => Value::Object(
                map.iter()
                    .rev()
                    .map(|(key, item)| (key.clone(), reversed(item)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    proptest! {
        #[test]
        fn canonical_form_is_a_fixed_point(value in json_value()) {
            let once = canonical_json(&value).unwrap();
            let parsed: Value = serde_json::from_str(&once).unwrap();
            prop_assert_eq!(&parsed, &value);
            prop_assert_eq!(canonical_json(&parsed).unwrap(), once);
        }

        #[test]
        fn insertion_order_does_not_change_the_form(value in json_value()) {
            prop_assert_eq!(canonical_json(&reversed(&value)).unwrap(), canonical_json(&value).unwrap());
        }
    }
}
