//! Approvals in the agent's client: when a call is held for a human and the client declared
//! MCP elicitation, Interlock asks the **user** (elicitation is shown to the person, not the
//! model) with one form naming what would move, and carries out only an explicit approve.
//!
//! The approval is the same engine operation as `interlock approve` (`Engine::approve_async`:
//! judged again, G6 against the live definition, bound to the intent's SIK, amount and the
//! mandate it was held under, recorded in the audit log). It is single use by construction: it
//! releases a HELD intent, and an intent is HELD at most once after its gates. A decline is
//! `interlock reject`. No answer within the bound leaves the intent HELD and the agent gets
//! today's answer; the CLI still works.

use std::time::Duration;

use interlock_engine::{Answer, IntentKey, Outcome};
use interlock_spec::decimal;
use interlock_spec::ids::AgentId;
use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema, ProtocolVersion};
use rmcp::service::{Peer, RoleServer};
use serde_json::{Value, json};

/// How long Interlock waits for the human's answer by default (`--approval-wait-ms`).
pub const APPROVAL_WAIT_DEFAULT_MS: u64 = 60_000;
/// The longest note a human may attach (it goes into the audit record).
pub const APPROVAL_NOTE_CHARS_MAX: usize = 200;

/// What the human said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Carry it out.
    Approve {
        /// The human's note, for the audit record.
        note: String,
    },
    /// Refuse it for good.
    Decline {
        /// The human's note, for the audit record.
        note: String,
    },
    /// No decision: cancelled, timed out, unreadable, or the client cannot be asked.
    NoAnswer(String),
}

/// What the form shows, taken from the held intent itself (never from the agent's arguments).
#[derive(Debug, Clone)]
pub struct Held {
    /// The intent.
    pub key: IntentKey,
    /// The tool.
    pub tool: String,
    /// The amount in minor units and its currency.
    pub amount_minor: u64,
    /// Its currency.
    pub currency: interlock_spec::money::Currency,
    /// What the money is about (a payment, the balance, a scheduled transfer).
    pub subject: String,
    /// Who is paid, for a tool that pays someone.
    pub payee: Option<String>,
    /// Why it was held.
    pub reason: String,
    /// The mandate it was held under.
    pub mandate_id: String,
    /// That mandate's hash.
    pub mandate_hash: String,
}

/// Whether the client can be asked: it declared form elicitation, and its protocol still
/// allows a server to send it a request (2026-07-28 replaced that with results that ask for
/// input, which Interlock does not speak yet).
pub fn can_ask(peer: &Peer<RoleServer>) -> bool {
    let Some(info) = peer.peer_info() else {
        return false;
    };
    info.capabilities.elicitation.is_some()
        && info.protocol_version < ProtocolVersion::V_2026_07_28
        && peer
            .supported_elicitation_modes()
            .contains(&rmcp::service::ElicitationMode::Form)
}

/// Whether `answer` is one a human can release.
pub fn is_held(answer: &Answer) -> bool {
    answer.outcome == Outcome::Held && answer.sik.is_some()
}

/// The amount in digits and in words: `1,234.50 INR (one thousand two hundred thirty-four
/// INR and 50/100; 123450 minor units)`.
pub fn amount_text(amount_minor: u64, currency: interlock_spec::money::Currency) -> String {
    let code = currency.as_str();
    let Ok(minor) = interlock_spec::money::Minor::new(amount_minor) else {
        return format!("{amount_minor} minor units of {code}");
    };
    let Ok(text) = decimal::to_text(minor, currency) else {
        return format!("{amount_minor} minor units of {code}");
    };
    let (whole, fraction) = text.split_once('.').unwrap_or((&text, ""));
    let grouped = group_thousands(whole);
    let words = whole.parse::<u64>().map(in_words).unwrap_or_default();
    let digits = if fraction.is_empty() {
        grouped
    } else {
        format!("{grouped}.{fraction}")
    };
    let spoken = if fraction.is_empty() {
        format!("{words} {code}")
    } else {
        format!(
            "{words} {code} and {fraction}/1{}",
            "0".repeat(fraction.len())
        )
    };
    format!("{digits} {code} ({spoken}; {amount_minor} minor units)")
}

fn group_thousands(digits: &str) -> String {
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `n` in English words (short scale), for the amount a human approves.
pub fn in_words(n: u64) -> String {
    const ONES: [&str; 20] = [
        "zero",
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "eleven",
        "twelve",
        "thirteen",
        "fourteen",
        "fifteen",
        "sixteen",
        "seventeen",
        "eighteen",
        "nineteen",
    ];
    const TENS: [&str; 10] = [
        "", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety",
    ];
    const SCALES: [(u64, &str); 6] = [
        (1_000_000_000_000_000_000, "quintillion"),
        (1_000_000_000_000_000, "quadrillion"),
        (1_000_000_000_000, "trillion"),
        (1_000_000_000, "billion"),
        (1_000_000, "million"),
        (1_000, "thousand"),
    ];
    fn below_thousand(n: u64, ones: &[&str; 20], tens: &[&str; 10]) -> String {
        let (hundreds, rest) = (n / 100, n % 100);
        let mut parts = Vec::new();
        if hundreds > 0 {
            parts.push(format!("{} hundred", ones[hundreds as usize]));
        }
        if rest >= 20 {
            let unit = rest % 10;
            parts.push(if unit == 0 {
                tens[(rest / 10) as usize].to_owned()
            } else {
                format!("{}-{}", tens[(rest / 10) as usize], ones[unit as usize])
            });
        } else if rest > 0 {
            parts.push(ones[rest as usize].to_owned());
        }
        parts.join(" ")
    }
    if n == 0 {
        return ONES[0].to_owned();
    }
    let (mut rest, mut parts) = (n, Vec::new());
    for (scale, name) in SCALES {
        if rest >= scale {
            parts.push(format!(
                "{} {name}",
                below_thousand(rest / scale, &ONES, &TENS)
            ));
            rest %= scale;
        }
    }
    if rest > 0 {
        parts.push(below_thousand(rest, &ONES, &TENS));
    }
    parts.join(" ")
}

/// The sentence the human reads.
pub fn message(held: &Held, agent: &AgentId) -> String {
    let payee = held
        .payee
        .as_ref()
        .map(|p| format!(" to {p}"))
        .unwrap_or_default();
    format!(
        "Agent {agent} asks to run {tool}: {amount}{payee}, about {subject}.\n\
         Interlock held it for a human: {reason}\n\
         Mandate {mandate} (sha256 {hash}); intent {sik}.\n\
         Approve to send it to the rail now; decline to refuse it for good.",
        tool = held.tool,
        amount = amount_text(held.amount_minor, held.currency),
        subject = held.subject,
        reason = held.reason,
        mandate = held.mandate_id,
        hash = held.mandate_hash,
        sik = held.key.sik,
    )
}

/// The form: an explicit choice (no default, so nothing is approved by submitting blindly) and
/// an optional note for the audit record.
pub fn schema() -> ElicitationSchema {
    let schema = json!({
        "type": "object",
        "properties": {
            "decision": {
                "type": "string",
                "title": "Decision",
                "description": "approve sends this payment to the rail now; decline refuses it for good",
                "enum": ["approve", "decline"],
            },
            "note": {
                "type": "string",
                "title": "Note for the audit log (optional)",
                "maxLength": APPROVAL_NOTE_CHARS_MAX,
            },
        },
        "required": ["decision"],
    });
    serde_json::from_value(schema).expect("the approval form is a valid elicitation schema")
}

/// Reads the human's answer. Only `accept` with `decision: "approve"` approves.
pub fn decision(action: ElicitationAction, content: Option<&Value>) -> Decision {
    let note = content
        .and_then(|c| c.get("note"))
        .and_then(Value::as_str)
        .map(|n| n.chars().take(APPROVAL_NOTE_CHARS_MAX).collect::<String>())
        .unwrap_or_default();
    match action {
        ElicitationAction::Accept => {
            match content
                .and_then(|c| c.get("decision"))
                .and_then(Value::as_str)
            {
                Some("approve") => Decision::Approve { note },
                Some("decline") => Decision::Decline { note },
                other => Decision::NoAnswer(format!(
                    "the form came back without a decision of approve or decline ({other:?})"
                )),
            }
        }
        ElicitationAction::Decline => Decision::Decline { note },
        ElicitationAction::Cancel => Decision::NoAnswer("the user dismissed the form".to_owned()),
        // An action a later protocol adds is not an approval.
        _ => Decision::NoAnswer(format!("an answer Interlock does not know: {action:?}")),
    }
}

/// Asks the human through `peer` and waits at most `wait`.
pub async fn ask(
    peer: &Peer<RoleServer>,
    held: &Held,
    agent: &AgentId,
    wait: Duration,
) -> Decision {
    let params = ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: message(held, agent),
        requested_schema: schema(),
    };
    match peer
        .create_elicitation_with_timeout(params, Some(wait))
        .await
    {
        Ok(result) => decision(result.action, result.content.as_ref()),
        Err(e) => Decision::NoAnswer(format!("no answer from the client: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use interlock_spec::money::Currency;

    #[test]
    fn amounts_are_shown_in_digits_and_words_exactly() {
        assert_eq!(
            amount_text(123_450, Currency::INR),
            "1,234.50 INR (one thousand two hundred thirty-four INR and 50/100; 123450 minor units)"
        );
        let jpy = Currency::parse("JPY").unwrap();
        assert_eq!(
            amount_text(1_000_000, jpy),
            "1,000,000 JPY (one million JPY; 1000000 minor units)"
        );
        let kwd = Currency::parse("KWD").unwrap();
        assert_eq!(
            amount_text(5, kwd),
            "0.005 KWD (zero KWD and 005/1000; 5 minor units)"
        );
        assert_eq!(in_words(19), "nineteen");
        assert_eq!(in_words(90_017), "ninety thousand seventeen");
        assert_eq!(
            in_words(u64::MAX),
            "eighteen quintillion four hundred forty-six quadrillion seven hundred forty-four trillion seventy-three billion seven hundred nine million five hundred fifty-one thousand six hundred fifteen"
        );
    }

    #[test]
    fn only_an_explicit_approve_approves() {
        let accept = |content: Value| decision(ElicitationAction::Accept, Some(&content));
        assert_eq!(
            accept(json!({"decision": "approve", "note": "ok"})),
            Decision::Approve { note: "ok".into() }
        );
        assert_eq!(
            accept(json!({"decision": "decline"})),
            Decision::Decline {
                note: String::new()
            }
        );
        for unclear in [
            json!({}),
            json!({"decision": "yes"}),
            json!({"decision": true}),
        ] {
            assert!(matches!(accept(unclear), Decision::NoAnswer(_)));
        }
        assert!(matches!(
            decision(ElicitationAction::Accept, None),
            Decision::NoAnswer(_)
        ));
        assert_eq!(
            decision(ElicitationAction::Decline, None),
            Decision::Decline {
                note: String::new()
            }
        );
        assert!(matches!(
            decision(ElicitationAction::Cancel, None),
            Decision::NoAnswer(_)
        ));
        let long = "x".repeat(APPROVAL_NOTE_CHARS_MAX * 2);
        let Decision::Approve { note } = accept(json!({"decision": "approve", "note": long}))
        else {
            panic!("approved");
        };
        assert_eq!(note.chars().count(), APPROVAL_NOTE_CHARS_MAX);
    }

    #[test]
    fn the_form_requires_a_decision_and_offers_no_default() {
        let schema = serde_json::to_value(schema()).unwrap();
        assert_eq!(schema["required"], json!(["decision"]));
        assert_eq!(
            schema["properties"]["decision"]["enum"],
            json!(["approve", "decline"])
        );
        assert!(schema["properties"]["decision"].get("default").is_none());
    }
}
