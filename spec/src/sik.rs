//! The Semantic Idempotency Key: a key derived from what an action means, not from what the
//! caller calls it, so an agent that retries with a fresh UUID still lands on the same intent.
//!
//! ```text
//! sik = base32_nopad(sha256(canonical_json({
//!     v: 1, merchant_id, tool, subject, amount_minor, currency, extra, window, distinct
//! })))[..32]
//! ```
//!
//! Two rules keep the key honest:
//! - **Refunds never carry a time window.** Two refunds of the same amount on the same payment
//!   mean the same thing five seconds or five days apart; a window would let an agent refund
//!   twice by waiting. Which tools are refunds is the rail profile's to say: the profile refuses
//!   a mandate that windows a refund tool, and the driver refuses to key a refund with a window
//!   ([`SikError::RefundWindow`]).
//! - **`distinct` comes only from an explicit reason.** A [`DistinctReason`] can only be made from
//!   non-blank text, so a blank `interlock_distinct_reason` is an error, never a silent "no
//!   reason" that would collapse into the first refund's key, nor a fresh key that would not.

use crate::canonical::{CanonicalError, canonical_json};
use crate::hash::{base32_nopad, sha256};
use crate::ids::{MerchantId, SIK_LENGTH, Sik, ToolName, is_word};
use crate::money::{Currency, Minor};
use serde_json::{Value, json};

/// Version of the key's recipe; bumping it changes every key, so it is part of the preimage.
pub const SIK_VERSION: u64 = 1;
/// Longest distinct reason, in characters after trimming. The reason is logged verbatim in the
/// audit record, so it is bounded like everything else an agent can send.
pub const DISTINCT_REASON_LENGTH_MAX: usize = 500;
/// Longest subject (rail entity id); rail ids are a short prefix and a few dozen characters.
pub const SUBJECT_LENGTH_MAX: usize = 64;

/// Why no key could be computed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SikError {
    /// A time window was supplied for a refund tool.
    #[error(
        "{tool} is a refund: its key never carries a time window (got window {window}), or an agent could refund twice by waiting"
    )]
    RefundWindow {
        /// The refund tool.
        tool: ToolName,
        /// The window bucket that was supplied.
        window: u64,
    },
    /// The subject is empty, too long, or has characters outside `[A-Za-z0-9_]`.
    #[error(
        "subject must be 1..={SUBJECT_LENGTH_MAX} characters of A-Z, a-z, 0-9 and _ (a rail entity id), got {0:?}"
    )]
    Subject(String),
    /// The distinct reason is empty or only whitespace.
    #[error("interlock_distinct_reason must say why this action differs; it was blank")]
    BlankDistinctReason,
    /// The distinct reason is longer than [`DISTINCT_REASON_LENGTH_MAX`].
    #[error(
        "interlock_distinct_reason has {length} characters; at most {DISTINCT_REASON_LENGTH_MAX} are accepted"
    )]
    DistinctReasonTooLong {
        /// Its length in characters, after trimming.
        length: usize,
    },
    /// A window bucket was asked for with a zero-length window.
    #[error("window_ms must be positive to compute a window bucket")]
    ZeroWindow,
    /// `extra` (or a window bucket) has no canonical form.
    #[error("key fields have no canonical form: {0}")]
    Canonical(#[from] CanonicalError),
}

/// An explicit reason an action differs from an otherwise identical one (two ₹500 refunds on one
/// payment: "missing item", "late delivery"). Trimmed, non-blank and bounded.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DistinctReason(String);

impl DistinctReason {
    /// Trims `text` and checks it is non-blank and at most [`DISTINCT_REASON_LENGTH_MAX`]
    /// characters. Surrounding whitespace is not meaning, so `" late "` and `"late"` are one key.
    pub fn parse(text: &str) -> Result<DistinctReason, SikError> {
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Err(SikError::BlankDistinctReason);
        }
        let length = trimmed.chars().count();
        if length > DISTINCT_REASON_LENGTH_MAX {
            return Err(SikError::DistinctReasonTooLong { length });
        }
        Ok(DistinctReason(trimmed.to_owned()))
    }

    /// The trimmed reason.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The fields that make up an action's meaning.
#[derive(Debug, Clone, PartialEq)]
pub struct SikInput {
    /// The rail account the money moves in.
    pub merchant_id: MerchantId,
    /// The upstream tool.
    pub tool: ToolName,
    /// The rail entity the action is about (`pay_1002`), resolved by Interlock from the rail,
    /// never taken from model text.
    pub subject: String,
    /// The amount in minor units.
    pub amount_minor: Minor,
    /// The amount's currency.
    pub currency: Currency,
    /// Further key fields the mandate names, as JSON; key order and whitespace do not matter.
    /// `None` and `Some(Value::Null)` give the same key.
    pub extra: Option<Value>,
    /// The time-window bucket ([`window_bucket`]) for tools whose uniqueness expires; `None`
    /// for permanent uniqueness, and always `None` for refunds.
    pub window: Option<u64>,
    /// An explicit reason this action differs from an otherwise identical one.
    pub distinct: Option<DistinctReason>,
}

/// The window bucket `floor(now_ms / window_ms)`: actions in the same bucket share a key. Time
/// is passed in, never read, so the key is reproducible.
pub fn window_bucket(now_ms: u64, window_ms: u64) -> Result<u64, SikError> {
    now_ms.checked_div(window_ms).ok_or(SikError::ZeroWindow)
}

fn check_subject(subject: &str) -> Result<(), SikError> {
    if is_word(subject, SUBJECT_LENGTH_MAX) {
        Ok(())
    } else {
        Err(SikError::Subject(subject.to_owned()))
    }
}

/// The canonical JSON the key hashes; the audit log records it so a key can be re-derived.
pub fn sik_preimage(input: &SikInput) -> Result<String, SikError> {
    check_subject(&input.subject)?;
    let preimage = json!({
        "v": SIK_VERSION,
        "merchant_id": input.merchant_id.as_str(),
        "tool": input.tool.as_str(),
        "subject": input.subject,
        "amount_minor": input.amount_minor.get(),
        "currency": input.currency.as_str(),
        "extra": input.extra.clone().unwrap_or(Value::Null),
        "window": input.window,
        "distinct": input.distinct.as_ref().map(DistinctReason::as_str),
    });
    Ok(canonical_json(&preimage)?)
}

/// The semantic idempotency key of `input`.
pub fn compute_sik(input: &SikInput) -> Result<Sik, SikError> {
    let preimage = sik_preimage(input)?;
    let encoded = base32_nopad(&sha256(preimage.as_bytes()));
    // 256 bits are 52 base32 characters, all from the SIK alphabet, so the prefix is well-formed.
    let key = Sik::parse(&encoded[..SIK_LENGTH]).expect("a base32 digest prefix is a valid SIK");
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readme_refund() -> SikInput {
        SikInput {
            merchant_id: MerchantId::parse("acc_DEMO000001").unwrap(),
            tool: ToolName::parse("create_refund").unwrap(),
            subject: "pay_1002".to_owned(),
            amount_minor: Minor::positive(189900).unwrap(),
            currency: Currency::INR,
            extra: None,
            window: None,
            distinct: None,
        }
    }

    fn settlement(now_ms: u64) -> SikInput {
        SikInput {
            tool: ToolName::parse("create_instant_settlement").unwrap(),
            subject: "balance".to_owned(),
            amount_minor: Minor::positive(50000).unwrap(),
            window: Some(window_bucket(now_ms, 86_400_000).unwrap()),
            ..readme_refund()
        }
    }

    fn line(name: &str, input: &SikInput) -> String {
        format!(
            "{name}\n  preimage: {}\n  sik:      {}\n",
            sik_preimage(input).unwrap(),
            compute_sik(input).unwrap()
        )
    }

    /// Golden vectors: a change to any of these keys orphans every intent already in a ledger,
    /// so the snapshot must only change together with [`SIK_VERSION`].
    #[test]
    fn golden_vectors() {
        let with_reason = SikInput {
            distinct: Some(DistinctReason::parse("late delivery").unwrap()),
            ..readme_refund()
        };
        let other_amount = SikInput {
            amount_minor: Minor::positive(189800).unwrap(),
            ..readme_refund()
        };
        let with_extra = SikInput {
            extra: Some(json!({"speed": "normal"})),
            ..readme_refund()
        };
        let vectors = [
            line("readme refund", &readme_refund()),
            line("readme refund, distinct reason", &with_reason),
            line("readme refund, amount 189800", &other_amount),
            line("readme refund, extra speed", &with_extra),
            line(
                "settlement at 1700000000000 ms, 24 h window",
                &settlement(1_700_000_000_000),
            ),
        ];
        insta::assert_snapshot!(vectors.concat());
    }

    /// The README's example, computed independently (Python: hashlib + base64.b32encode over the
    /// preimage below), so the snapshot is not only checked against itself.
    #[test]
    fn readme_example_matches_an_independent_computation() {
        let input = readme_refund();
        assert_eq!(
            sik_preimage(&input).unwrap(),
            r#"{"amount_minor":189900,"currency":"INR","distinct":null,"extra":null,"merchant_id":"acc_DEMO000001","subject":"pay_1002","tool":"create_refund","v":1,"window":null}"#
        );
        assert_eq!(compute_sik(&input).unwrap().as_str(), README_SIK);
    }

    const README_SIK: &str = "HQUYGA6KHP3J5C6LSJL73MWU3CB3XOSU";

    #[test]
    fn extra_spelling_does_not_change_the_key() {
        let parse = |text: &str| Some(serde_json::from_str::<Value>(text).unwrap());
        let a = SikInput {
            extra: parse(r#"{"speed":"normal","notes":{"b":1,"a":2}}"#),
            ..readme_refund()
        };
        let b = SikInput {
            extra: parse("{ \"notes\" : { \"a\" : 2 ,\n \"b\" : 1 } , \"speed\" : \"normal\" }"),
            ..readme_refund()
        };
        assert_eq!(compute_sik(&a).unwrap(), compute_sik(&b).unwrap());
        let null_extra = SikInput {
            extra: Some(Value::Null),
            ..readme_refund()
        };
        assert_eq!(
            compute_sik(&null_extra).unwrap(),
            compute_sik(&readme_refund()).unwrap()
        );
    }

    #[test]
    fn every_field_changes_the_key() {
        let base = readme_refund();
        let variants = [
            SikInput {
                merchant_id: MerchantId::parse("acc_DEMO000002").unwrap(),
                ..base.clone()
            },
            SikInput {
                tool: ToolName::parse("create_refund_v2").unwrap(),
                ..base.clone()
            },
            SikInput {
                subject: "pay_1003".to_owned(),
                ..base.clone()
            },
            SikInput {
                amount_minor: Minor::positive(189901).unwrap(),
                ..base.clone()
            },
            SikInput {
                currency: Currency::parse("USD").unwrap(),
                ..base.clone()
            },
            SikInput {
                extra: Some(json!({"speed": "optimum"})),
                ..base.clone()
            },
            SikInput {
                distinct: Some(DistinctReason::parse("missing item").unwrap()),
                ..base.clone()
            },
            SikInput {
                tool: ToolName::parse("create_instant_settlement").unwrap(),
                window: Some(1),
                ..base.clone()
            },
        ];
        let base_key = compute_sik(&base).unwrap();
        let mut keys = vec![base_key];
        for variant in &variants {
            let key = compute_sik(variant).unwrap();
            assert!(!keys.contains(&key), "{variant:?} collided");
            keys.push(key);
        }
        let windowed = |window| SikInput {
            window: Some(window),
            ..variants[7].clone()
        };
        assert_ne!(
            compute_sik(&windowed(1)).unwrap(),
            compute_sik(&windowed(2)).unwrap()
        );
    }

    #[test]
    fn distinct_reasons_are_explicit_trimmed_and_bounded() {
        assert_eq!(
            DistinctReason::parse(""),
            Err(SikError::BlankDistinctReason)
        );
        assert_eq!(
            DistinctReason::parse(" \t\n "),
            Err(SikError::BlankDistinctReason)
        );
        assert_eq!(DistinctReason::parse("  late  ").unwrap().as_str(), "late");
        let longest = "é".repeat(DISTINCT_REASON_LENGTH_MAX);
        assert!(DistinctReason::parse(&longest).is_ok());
        assert_eq!(
            DistinctReason::parse(&format!("{longest}x")),
            Err(SikError::DistinctReasonTooLong {
                length: DISTINCT_REASON_LENGTH_MAX + 1
            })
        );
        let spaced = SikInput {
            distinct: Some(DistinctReason::parse(" late delivery ").unwrap()),
            ..readme_refund()
        };
        let plain = SikInput {
            distinct: Some(DistinctReason::parse("late delivery").unwrap()),
            ..readme_refund()
        };
        assert_eq!(compute_sik(&spaced), compute_sik(&plain));
    }

    #[test]
    fn window_buckets_floor_and_refuse_zero() {
        assert_eq!(window_bucket(0, 1000), Ok(0));
        assert_eq!(window_bucket(999, 1000), Ok(0));
        assert_eq!(window_bucket(1000, 1000), Ok(1));
        assert_eq!(window_bucket(1_700_000_000_000, 86_400_000), Ok(19675));
        assert_eq!(window_bucket(5, 0), Err(SikError::ZeroWindow));
        assert_eq!(
            compute_sik(&settlement(1_700_000_000_000)),
            compute_sik(&settlement(1_700_000_000_000 + 1))
        );
    }

    #[test]
    fn bad_subjects_and_float_extras_are_refused() {
        for subject in [
            "",
            "pay 1002",
            "pay-1002",
            &"p".repeat(SUBJECT_LENGTH_MAX + 1),
        ] {
            let input = SikInput {
                subject: subject.to_owned(),
                ..readme_refund()
            };
            assert_eq!(
                compute_sik(&input),
                Err(SikError::Subject(subject.to_owned()))
            );
        }
        let float_extra = SikInput {
            extra: Some(json!({"fee": 1.5})),
            ..readme_refund()
        };
        assert!(matches!(
            compute_sik(&float_extra),
            Err(SikError::Canonical(CanonicalError::NotAnInteger { .. }))
        ));
    }
}
