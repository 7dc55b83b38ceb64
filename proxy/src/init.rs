//! `interlock init`: a mandate from a short interview, offline. It asks what the agent may do,
//! the most per action, the daily cap and who approves exceptions, pins the upstream's tools
//! when one is given, shows the YAML and its warnings, and writes only after the person types
//! `yes`. There is deliberately no `--yes`: a mandate is a human's authorisation.

use std::io::{BufRead, Write};

use interlock_spec::mandate::Mandate;
use interlock_spec::money::Currency;

/// Tries per question before the interview gives up (piped input must not loop forever).
const ASKS_MAX: u32 = 3;
/// A daily cap more than this many times the largest per-action ceiling earns a warning.
const CAP_RATIO_WARN: u64 = 20;
/// A lifetime longer than this earns a warning.
const LIFETIME_DAYS_WARN: u64 = 90;
/// The longest lifetime `init` writes (ten years); longer is a typo, not a plan.
const LIFETIME_DAYS_MAX: u64 = 3650;
const DAY_MS: u64 = 86_400_000;

/// The Razorpay tools offered when no upstream is given to list its own.
pub const KNOWN_TOOLS: [&str; 4] = [
    "fetch_payment",
    "fetch_order",
    "create_refund",
    "create_instant_settlement",
];

/// What the person answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answers {
    /// The Razorpay account.
    pub merchant_id: String,
    /// The only agent whose calls are accepted.
    pub agent_id: String,
    /// One line a human reads in the audit log.
    pub purpose: String,
    /// The tools granted, in the order offered.
    pub tools: Vec<String>,
    /// The currency every amount is in.
    pub currency: Currency,
    /// Per money tool: the most one action may move, in minor units.
    pub ceilings: Vec<(String, u64)>,
    /// Most money moved in 24 hours (minor units); 0 writes no window.
    pub daily_cap: u64,
    /// Most money-moving calls in 24 hours.
    pub daily_calls: u32,
    /// Who approves held intents (`interlock approve --by`).
    pub approver: String,
    /// How long the mandate is in force.
    pub lifetime_days: u64,
}

/// Reads one answer per question from `input`, prompting on `prompt`. `offered` lists the
/// tools that may be granted. Every error names the question; nothing has been written.
pub fn interview(
    input: &mut dyn BufRead,
    prompt: &mut dyn Write,
    offered: &[String],
) -> Result<Answers, String> {
    let mut ask = Asker { input, prompt };
    let merchant_id = ask.text("Merchant account id (e.g. acc_ABC123)", None)?;
    let agent_id = ask.text("Agent id (the only agent allowed to call)", None)?;
    let purpose = ask.text("Purpose, in one sentence", Some("Refund customer charges"))?;
    let list = offered.join(", ");
    let tools = ask.parse(
        &format!("Tools the agent may use, comma-separated, from: {list}"),
        Some("fetch_payment, create_refund"),
        |text| {
            let mut chosen: Vec<String> = Vec::new();
            for name in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
                if !offered.iter().any(|o| o == name) {
                    return Err(format!("{name} is not offered (offered: {list})"));
                }
                if !chosen.iter().any(|c| c == name) {
                    chosen.push(name.to_owned());
                }
            }
            if chosen.is_empty() {
                return Err("grant at least one tool".to_owned());
            }
            Ok(chosen)
        },
    )?;
    let currency = ask.parse("Currency (ISO code)", Some("INR"), |text| {
        Currency::parse(text).map_err(|e| e.to_string())
    })?;
    let mut ceilings = Vec::new();
    for tool in tools
        .iter()
        .filter(|t| crate::cli::rail_profile().kind_of(t).is_some())
    {
        let most = ask.parse(
            &format!("Most one {tool} may move, in minor units of {currency} (100 = 1.00)"),
            None,
            |text| minor(text).and_then(|v| positive(v, "the most per action")),
        )?;
        ceilings.push((tool.clone(), most));
    }
    let (daily_cap, daily_calls) = if ceilings.is_empty() {
        (0, 0)
    } else {
        let cap = ask.parse(
            &format!("Daily cap on money moved, minor units of {currency} (0 = no cap)"),
            None,
            minor,
        )?;
        let calls = if cap == 0 {
            0
        } else {
            ask.parse("Most money-moving calls per day", Some("40"), |text| {
                let calls = count(text, "calls").and_then(|v| positive(v, "the daily calls"))?;
                u32::try_from(calls).map_err(|_| format!("{calls} calls is too many"))
            })?
        };
        (cap, calls)
    };
    let approver = ask.text("Who approves exceptions (a name or team)", None)?;
    let lifetime_days = ask.parse("Days the mandate stays in force", Some("30"), |text| {
        let days = count(text, "days").and_then(|v| positive(v, "the lifetime"))?;
        if days > LIFETIME_DAYS_MAX {
            return Err(format!(
                "{days} days is over the {LIFETIME_DAYS_MAX}-day limit"
            ));
        }
        Ok(days)
    })?;
    Ok(Answers {
        merchant_id,
        agent_id,
        purpose,
        tools,
        currency,
        ceilings,
        daily_cap,
        daily_calls,
        approver,
        lifetime_days,
    })
}

struct Asker<'a> {
    input: &'a mut dyn BufRead,
    prompt: &'a mut dyn Write,
}

impl Asker<'_> {
    fn text(&mut self, question: &str, default: Option<&str>) -> Result<String, String> {
        self.parse(question, default, |text| {
            if text.contains(['"', '\\']) || text.chars().any(char::is_control) {
                Err("quotes, backslashes and control characters are not accepted".to_owned())
            } else {
                Ok(text.to_owned())
            }
        })
    }

    fn parse<T>(
        &mut self,
        question: &str,
        default: Option<&str>,
        check: impl Fn(&str) -> Result<T, String>,
    ) -> Result<T, String> {
        for _ in 0..ASKS_MAX {
            let hint = default.map(|d| format!(" [{d}]")).unwrap_or_default();
            let _ = write!(self.prompt, "{question}{hint}: ");
            let _ = self.prompt.flush();
            let mut line = String::new();
            let read = self
                .input
                .read_line(&mut line)
                .map_err(|e| format!("cannot read the answer to \"{question}\": {e}"))?;
            if read == 0 {
                return Err(format!(
                    "input ended before \"{question}\" was answered; nothing written"
                ));
            }
            let answer = match (line.trim(), default) {
                ("", Some(d)) => d,
                (text, _) => text,
            };
            if answer.is_empty() {
                let _ = writeln!(self.prompt, "  an answer is needed");
                continue;
            }
            match check(answer) {
                Ok(value) => return Ok(value),
                Err(why) => {
                    let _ = writeln!(self.prompt, "  {why}");
                }
            }
        }
        Err(format!(
            "no valid answer to \"{question}\" after {ASKS_MAX} tries; nothing written"
        ))
    }
}

/// An amount in minor units: digits only, so `1.5`, `1e3`, `-1` and `1,000` are refused.
fn minor(text: &str) -> Result<u64, String> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "{text:?} is not a whole number of minor units (digits only: 150000 for 1,500.00)"
        ));
    }
    let value: u64 = text.parse().map_err(|_| format!("{text} is too large"))?;
    if value > interlock_spec::money::Minor::MAX.get() {
        return Err(format!(
            "{text} is above the largest amount Interlock accepts"
        ));
    }
    Ok(value)
}

/// A count of `unit` (calls, days): digits only, so `1.5`, `-1` and `1,000` are refused in a
/// count's words, not money's.
fn count(text: &str, unit: &str) -> Result<u64, String> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "{text:?} is not a whole number of {unit} (digits only)"
        ));
    }
    text.parse()
        .map_err(|_| format!("{text} {unit} is too many"))
}

fn positive(value: u64, what: &str) -> Result<u64, String> {
    if value == 0 {
        Err(format!("{what} must be above 0"))
    } else {
        Ok(value)
    }
}

/// The mandate's YAML, in force from `now_ms`. `provenance` is a section from `interlock pin`.
pub fn render(answers: &Answers, now_ms: u64, provenance: Option<&str>) -> String {
    let a = answers;
    let expires = now_ms + a.lifetime_days * DAY_MS;
    let mut y = format!(
        "# Written by `interlock init`. Check it with `interlock check --mandate FILE`.\n\
         # Exceptions (held intents) are approved by: {approver}\n\
         #   interlock approve SIK --by \"{approver}\" --why ... -- UPSTREAM...\n\
         v: 1\nmandate_id: mnd_{agent}\nmerchant_id: {merchant}\nagent_id: {agent}\n\
         issued_at: {now_ms}\nexpires_at: {expires} # {days} days\npurpose: \"{purpose}\"\n\
         scope:\n  grants:\n",
        approver = a.approver,
        agent = a.agent_id,
        merchant = a.merchant_id,
        days = a.lifetime_days,
        purpose = a.purpose,
    );
    for tool in &a.tools {
        match a.ceilings.iter().find(|(t, _)| t == tool) {
            Some((_, most)) => y.push_str(&format!(
                "    {tool}:\n      reversibility: irreversible\n      on_unresolvable: hold\n      value:\n        max_amount_minor: {most}\n        min_amount_minor: 100\n        currencies: [{}]\n",
                a.currency
            )),
            None => y.push_str(&format!(
                "    {tool}:\n      reversibility: reversible # a read\n      value:\n        max_amount_minor: 0\n        min_amount_minor: 0\n        currencies: [{}]\n",
                a.currency
            )),
        }
    }
    y.push_str("limits:\n");
    if a.daily_cap == 0 {
        y.push_str("  windows: []\n");
    } else {
        y.push_str(&format!(
            "  windows:\n    - window_ms: {DAY_MS}\n      max_calls: {}\n      max_amount_minor: {}\n      currency: {}\n",
            a.daily_calls, a.daily_cap, a.currency
        ));
    }
    y.push_str("  fee_budgets: {}\nidempotency:\n");
    let mut any_rule = false;
    let profile = crate::cli::rail_profile();
    for (tool, _) in &a.ceilings {
        // Ceilings are asked only for the profile's money tools, each with a default key.
        let Some(key) = profile.default_key(tool) else {
            continue;
        };
        let window = key.window_ms.map_or("null".to_owned(), |ms| ms.to_string());
        y.push_str(&format!(
            "  {tool}:\n    key_fields: [{}]\n    window_ms: {window}\n",
            key.fields.join(", ")
        ));
        any_rule = true;
    }
    if !any_rule {
        y = y.replace("idempotency:\n", "idempotency: {}\n");
    }
    if let Some(section) = provenance {
        y.push_str(section);
    }
    y
}

/// What a careful reviewer would point out before signing.
pub fn warnings(answers: &Answers, pinned: bool) -> Vec<String> {
    let a = answers;
    let mut out = Vec::new();
    for (tool, most) in &a.ceilings {
        out.push(format!(
            "{tool} is irreversible: up to {most} {} per call cannot be called back",
            a.currency
        ));
    }
    if !a.ceilings.is_empty() && a.daily_cap == 0 {
        out.push("no daily window: nothing bounds the total the agent can move".to_owned());
    }
    let highest = a.ceilings.iter().map(|(_, m)| *m).max().unwrap_or(0);
    if highest > 0 && a.daily_cap > highest.saturating_mul(CAP_RATIO_WARN) {
        out.push(format!(
            "the daily cap {} is over {CAP_RATIO_WARN}x the largest per-action ceiling {highest}",
            a.daily_cap
        ));
    }
    if a.lifetime_days > LIFETIME_DAYS_WARN {
        out.push(format!(
            "a {}-day lifetime is long: over {LIFETIME_DAYS_WARN} days",
            a.lifetime_days
        ));
    }
    if !pinned {
        out.push(
            "no upstream pinned: run `interlock pin --mandate FILE --write -- UPSTREAM...` before `serve`"
                .to_owned(),
        );
    }
    out
}

/// Validates `yaml` as `serve` would (parse, then in force at `now_ms`).
pub fn validate(yaml: &str, now_ms: u64) -> Result<Mandate, String> {
    let mandate = crate::cli::parse_mandate(yaml, &crate::cli::rail_profile())
        .map_err(|e| format!("the answers do not make a valid mandate: {e}"))?;
    mandate
        .check_active(now_ms)
        .map_err(|e| format!("the mandate would not be in force: {e}"))?;
    Ok(mandate)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offered() -> Vec<String> {
        KNOWN_TOOLS.iter().map(|t| (*t).to_owned()).collect()
    }

    fn run(script: &str) -> Result<Answers, String> {
        let mut input = std::io::Cursor::new(script.as_bytes().to_vec());
        interview(&mut input, &mut Vec::new(), &offered())
    }

    const GOOD: &str = "acc_DEMO000001\nagent_x\n\nfetch_payment, create_refund\n\n500000\n2000000\n\nops-team\n\n";

    #[test]
    fn a_full_interview_makes_a_mandate_that_validates() {
        let answers = run(GOOD).unwrap();
        assert_eq!(
            answers.ceilings,
            vec![("create_refund".to_owned(), 500_000)]
        );
        assert_eq!((answers.daily_cap, answers.daily_calls), (2_000_000, 40));
        let now = 1_800_000_000_000;
        let mandate = validate(&render(&answers, now, None), now).unwrap();
        assert_eq!(mandate.scope.grants.len(), 2);
        assert_eq!(mandate.expires_at, now + 30 * DAY_MS);
        let w = warnings(&answers, false);
        assert!(w.iter().any(|w| w.contains("irreversible")), "{w:?}");
        assert!(w.iter().any(|w| w.contains("no upstream pinned")), "{w:?}");
    }

    #[test]
    fn a_float_amount_is_asked_again_and_never_rounded() {
        let script = GOOD.replace("500000\n", "1.5\n5000.00\n500000\n");
        assert_eq!(run(&script).unwrap().ceilings[0].1, 500_000);
        let stubborn = GOOD.replace("500000\n", "1.5\n1e3\n-7\n");
        let err = run(&stubborn).unwrap_err();
        assert!(
            err.contains("after 3 tries") && err.contains("nothing written"),
            "{err}"
        );
    }

    #[test]
    fn counts_are_refused_in_a_counts_words_not_moneys() {
        // The calls per day, then the lifetime in days: a bad answer, then a good one.
        let script = GOOD
            .replace("2000000\n\n", "2000000\n2.5\n12\n")
            .replace("ops-team\n\n", "ops-team\nsoon\n7\n");
        let mut input = std::io::Cursor::new(script.into_bytes());
        let mut prompts = Vec::new();
        let answers = interview(&mut input, &mut prompts, &offered()).unwrap();
        assert_eq!((answers.daily_calls, answers.lifetime_days), (12, 7));
        let prompts = String::from_utf8(prompts).unwrap();
        assert!(
            prompts.contains("\"2.5\" is not a whole number of calls"),
            "{prompts}"
        );
        assert!(
            prompts.contains("\"soon\" is not a whole number of days"),
            "{prompts}"
        );
        assert!(
            !prompts.contains("not a whole number of minor units"),
            "{prompts}"
        );
    }

    #[test]
    fn unknown_tools_and_early_end_of_input_are_refused_by_name() {
        let err = run("acc_DEMO000001\nagent_x\n\ncreate_payout\nx\nfetch_payments\n").unwrap_err();
        assert!(err.contains("Tools the agent may use"), "{err}");
        let err = run("acc_DEMO000001\nagent_x\n").unwrap_err();
        assert!(
            err.contains("input ended") && err.contains("Purpose"),
            "{err}"
        );
    }

    #[test]
    fn no_cap_and_a_long_life_and_a_huge_cap_are_warned_about() {
        let script = "acc_DEMO000001\nagent_x\n\ncreate_refund\nINR\n500000\n0\nops\n400\n";
        let none = run(script).unwrap();
        assert_eq!(none.daily_cap, 0);
        let w = warnings(&none, true);
        assert!(w.iter().any(|w| w.contains("no daily window")), "{w:?}");
        assert!(w.iter().any(|w| w.contains("400-day")), "{w:?}");
        let huge = run(&GOOD.replace("2000000", "900000000")).unwrap();
        assert!(warnings(&huge, true).iter().any(|w| w.contains("20x")));
        let now = 1_800_000_000_000;
        validate(&render(&none, now, None), now).unwrap();
    }
}
