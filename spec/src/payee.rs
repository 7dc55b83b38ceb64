//! Payees: who a transfer pays, in one normal form, so a mandate's allow-list and an agent's
//! argument are compared the same way.
//!
//! An IBAN is compared without its spaces and in upper case (`de89 3704 0044 0532 0130 00` is
//! `DE89370400440532013000`), as banks print it in groups and read it either way. Anything that
//! is not IBAN-shaped is a name and is compared exactly: a rail that pays `Spotify` pays that
//! name, and `spotify` might be someone else.

/// Longest payee accepted, in bytes: an IBAN is at most 34 characters, a name a few dozen.
pub const PAYEE_BYTES_MAX: usize = 128;

/// Why a payee was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayeeError {
    /// Empty or blank.
    #[error("must name a payee, got {0:?}")]
    Blank(String),
    /// Longer than [`PAYEE_BYTES_MAX`].
    #[error("is {0} bytes long; a payee is at most {PAYEE_BYTES_MAX}")]
    TooLong(usize),
    /// A control character (a newline would split an audit line; nothing pays one).
    #[error("must not contain control characters, got {0:?}")]
    Control(String),
    /// Not a string.
    #[error("must be a string naming the payee, got {0}")]
    NotAString(String),
}

/// The normal form of `text`: an IBAN without spaces in upper case, or a name exactly.
pub fn normalize(text: &str) -> Result<String, PayeeError> {
    if text.len() > PAYEE_BYTES_MAX {
        return Err(PayeeError::TooLong(text.len()));
    }
    if text.trim().is_empty() {
        return Err(PayeeError::Blank(text.to_owned()));
    }
    if text.chars().any(char::is_control) {
        return Err(PayeeError::Control(text.to_owned()));
    }
    let compact: String = text
        .chars()
        .filter(|c| *c != ' ')
        .map(|c| c.to_ascii_uppercase())
        .collect();
    Ok(if is_iban_shaped(&compact) {
        compact
    } else {
        text.to_owned()
    })
}

/// Two letters, two check digits, then 1 to 30 letters or digits (ISO 13616's shape; the
/// check digits are the bank's to verify, not ours).
fn is_iban_shaped(text: &str) -> bool {
    let bytes = text.as_bytes();
    (5..=34).contains(&bytes.len())
        && bytes[..2].iter().all(u8::is_ascii_uppercase)
        && bytes[2..4].iter().all(u8::is_ascii_digit)
        && bytes[4..]
            .iter()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ibans_lose_spaces_and_case_and_names_stay_exact() {
        let cases = [
            ("DE89370400440532013000", "DE89370400440532013000"),
            ("de89 3704 0044 0532 0130 00", "DE89370400440532013000"),
            ("US133000000121212121212", "US133000000121212121212"),
            ("Spotify", "Spotify"),
            ("Apple Inc.", "Apple Inc."),
            ("spotify", "spotify"),
        ];
        for (given, normal) in cases {
            assert_eq!(normalize(given).as_deref(), Ok(normal), "{given}");
        }
    }

    #[test]
    fn what_cannot_be_a_payee_is_refused() {
        assert_eq!(normalize(" "), Err(PayeeError::Blank(" ".into())));
        assert_eq!(normalize("a\nb"), Err(PayeeError::Control("a\nb".into())));
        let long = "x".repeat(129);
        assert_eq!(normalize(&long), Err(PayeeError::TooLong(129)));
    }
}
