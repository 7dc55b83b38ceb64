//! SHA-256 and the two text encodings we print digests in: lowercase hex (audit chain, mandate
//! and manifest hashes) and unpadded RFC 4648 base32 (the SIK, which must fit Razorpay's
//! 40-character `receipt` after the `ilk_` prefix).

use data_encoding::{BASE32_NOPAD, HEXLOWER};
use sha2::{Digest, Sha256};

/// Length of a SHA-256 digest in lowercase hex characters.
pub const SHA256_HEX_LENGTH: usize = 64;

/// The SHA-256 digest of `bytes`.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// The SHA-256 digest of `bytes` as 64 lowercase hex characters.
pub fn sha256_hex(bytes: &[u8]) -> String {
    HEXLOWER.encode(&sha256(bytes))
}

/// `bytes` in RFC 4648 base32 (`A-Z`, `2-7`) without `=` padding.
pub fn base32_nopad(bytes: &[u8]) -> String {
    BASE32_NOPAD.encode(bytes)
}

/// True when `text` looks like a [`sha256_hex`] output: 64 characters of `0-9a-f`. Uppercase is
/// refused so one digest has one spelling and pins compare as plain strings.
pub fn is_sha256_hex(text: &str) -> bool {
    text.len() == SHA256_HEX_LENGTH
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// FIPS 180-2 appendix B vectors.
    #[test]
    fn sha256_known_vectors() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            sha256_hex(b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        );
        assert_eq!(sha256(b"abc")[0], 0xba);
    }

    /// RFC 4648 §10 base32 vectors, with the padding removed.
    #[test]
    fn base32_rfc_4648_vectors() {
        for (input, expected) in [
            ("", ""),
            ("f", "MY"),
            ("fo", "MZXQ"),
            ("foo", "MZXW6"),
            ("foob", "MZXW6YQ"),
            ("fooba", "MZXW6YTB"),
            ("foobar", "MZXW6YTBOI"),
        ] {
            assert_eq!(base32_nopad(input.as_bytes()), expected, "{input:?}");
        }
    }

    #[test]
    fn sha256_hex_shape() {
        assert!(is_sha256_hex(&sha256_hex(b"abc")));
        assert!(!is_sha256_hex(&sha256_hex(b"abc").to_uppercase()));
        assert!(!is_sha256_hex(&sha256_hex(b"abc")[1..]));
        assert!(!is_sha256_hex(&format!("{}0", sha256_hex(b"abc"))));
        assert!(!is_sha256_hex(&"g".repeat(SHA256_HEX_LENGTH)));
    }
}

/// SHA-256 (lowercase hex) of one MCP tool definition as G6 and `interlock pin` see it: the
/// canonical JSON of `{name, description, inputSchema, annotations}`, absent fields as `null`.
/// A definition with no canonical form (a float in its schema) has no hash, so it can never
/// match a pin.
pub fn tool_definition_sha256(
    name: &str,
    description: Option<&str>,
    input_schema: &serde_json::Value,
    annotations: Option<&serde_json::Value>,
) -> Result<String, crate::canonical::CanonicalError> {
    let definition = serde_json::json!({
        "name": name,
        "description": description,
        "inputSchema": input_schema,
        "annotations": annotations,
    });
    Ok(sha256_hex(
        crate::canonical::canonical_json(&definition)?.as_bytes(),
    ))
}

#[cfg(test)]
mod tool_definition_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_does_not_change_the_hash_but_a_word_does() {
        let schema_a = json!({"type": "object", "properties": {"amount": {"type": "integer"}}});
        let schema_b: serde_json::Value =
            serde_json::from_str(r#"{"properties":{"amount":{"type":"integer"}},"type":"object"}"#)
                .unwrap();
        let a = tool_definition_sha256("create_refund", Some("Refund"), &schema_a, None).unwrap();
        let b = tool_definition_sha256("create_refund", Some("Refund"), &schema_b, None).unwrap();
        assert_eq!(a, b);
        let drifted =
            tool_definition_sha256("create_refund", Some("Refund!"), &schema_a, None).unwrap();
        assert_ne!(a, drifted);
        assert!(is_sha256_hex(&a));
        let float = json!({"minimum": 1.5});
        assert!(tool_definition_sha256("x", None, &float, None).is_err());
    }
}
