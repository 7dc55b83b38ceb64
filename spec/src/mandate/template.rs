//! The mandate the demo, the tests, the chaos matrix, the benchmarks and the fuzz targets run
//! under, written once.
//!
//! A template starts empty ([`Template::new`]); a rail profile builds its demo desk on it (the
//! Razorpay refund desk is `interlock_profile::razorpay::refund_desk`). Each caller states only
//! what it changes, then writes the YAML ([`Template::yaml`]) for a file the proxy reads, or
//! parses it ([`Template::build`]) where it needs the [`Mandate`] itself:
//!
//! ```
//! use interlock_spec::mandate::template::Template;
//! let mandate = Template::new("agent_chaos")
//!     .mandate_id("mnd_chaos")
//!     .expires_at(4_000_000_000_000)
//!     .read("lookup")
//!     .money("pay_out", 100, 500_000)
//!     .window(10, 1_000_000)
//!     .pinned("some-mcp@1.0.0", &"0".repeat(64))
//!     .pin("pay_out", &"1".repeat(64))
//!     .build()
//!     .unwrap();
//! assert_eq!(mandate.mandate_id.as_str(), "mnd_chaos");
//! ```
//!
//! The template writes YAML text and reads it back through [`Mandate::parse_yaml`], so what a
//! caller gets has passed the same strict parser and validation as a mandate a human wrote; a
//! value the rules refuse is an error from [`Template::build`], not a panic. The YAML text of
//! `examples/mandate.yaml` and of spec's own tests stays hand-written: there the text is what is
//! tested.

use super::{Mandate, MandateError, OnUnresolvable};
use serde_json::Value;

/// 2023-11-14T22:13:20Z: when every template mandate starts.
pub const ISSUED_AT: u64 = 1_700_000_000_000;
/// 2033-05-18T03:33:20Z: when a template mandate ends unless [`Template::expires_at`] says.
pub const EXPIRES_AT: u64 = 2_000_000_000_000;
/// One day, the length of the template's window and fee budget.
pub const DAY_MS: u64 = 86_400_000;

/// One grant as the template writes it.
#[derive(Debug, Clone)]
struct GrantSpec {
    tool: String,
    irreversible: bool,
    min: u64,
    max: u64,
    on_unresolvable: Option<OnUnresolvable>,
    max_refunds_per_payment: Option<u32>,
}

/// A mandate being written: start from [`Template::refund_desk`] or [`Template::new`], change
/// what differs, then [`Template::yaml`] or [`Template::build`]. Amounts are minor units of INR,
/// times epoch milliseconds.
#[derive(Debug, Clone)]
pub struct Template {
    mandate_id: String,
    merchant_id: String,
    agent_id: String,
    issued_at: u64,
    expires_at: u64,
    purpose: String,
    grants: Vec<GrantSpec>,
    /// `(max_calls, max_amount_minor)` of each one-day INR window.
    windows: Vec<(u32, u64)>,
    /// `max_fee_minor` of the one-day INR fee budget, if any.
    fee_budget: Option<u64>,
    /// `(tool, key_fields, window_ms)`.
    idempotency: Vec<(String, Vec<String>, Option<u64>)>,
    provenance: Option<Pins>,
}

/// `provenance` as the template writes it.
#[derive(Debug, Clone)]
struct Pins {
    server_id: String,
    manifest_sha256: String,
    /// `(tool, sha256)`.
    tools: Vec<(String, String)>,
}

impl Template {
    /// A mandate for `agent_id` that grants nothing and sets no limits (`windows: []`,
    /// `fee_budgets: {}`), `mnd_test` on `acc_DEMO000001`, valid from [`ISSUED_AT`] to
    /// [`EXPIRES_AT`], unpinned.
    pub fn new(agent_id: &str) -> Template {
        Template {
            mandate_id: "mnd_test".to_owned(),
            merchant_id: "acc_DEMO000001".to_owned(),
            agent_id: agent_id.to_owned(),
            issued_at: ISSUED_AT,
            expires_at: EXPIRES_AT,
            purpose: "Refund duplicate customer charges".to_owned(),
            grants: Vec::new(),
            windows: Vec::new(),
            fee_budget: None,
            idempotency: Vec::new(),
            provenance: None,
        }
    }

    /// `mandate_id`.
    pub fn mandate_id(mut self, id: &str) -> Template {
        id.clone_into(&mut self.mandate_id);
        self
    }

    /// `merchant_id`.
    pub fn merchant_id(mut self, id: &str) -> Template {
        id.clone_into(&mut self.merchant_id);
        self
    }

    /// `purpose`.
    pub fn purpose(mut self, purpose: &str) -> Template {
        purpose.clone_into(&mut self.purpose);
        self
    }

    /// `expires_at` (`issued_at` is always [`ISSUED_AT`]).
    pub fn expires_at(mut self, expires_at: u64) -> Template {
        self.expires_at = expires_at;
        self
    }

    /// Grants `tool` as a reversible tool that moves no money (a read, or an MCP server's
    /// non-payment tool), replacing any grant it had.
    pub fn read(self, tool: &str) -> Template {
        self.granted(GrantSpec {
            tool: tool.to_owned(),
            irreversible: false,
            min: 0,
            max: 0,
            on_unresolvable: None,
            max_refunds_per_payment: None,
        })
    }

    /// Grants `tool` as an irreversible money tool moving `min..=max` per call, replacing any
    /// grant it had.
    pub fn money(self, tool: &str, min: u64, max: u64) -> Template {
        self.granted(GrantSpec {
            tool: tool.to_owned(),
            irreversible: true,
            min,
            max,
            on_unresolvable: None,
            max_refunds_per_payment: None,
        })
    }

    fn granted(mut self, grant: GrantSpec) -> Template {
        match self.grants.iter_mut().find(|g| g.tool == grant.tool) {
            Some(old) => *old = grant,
            None => self.grants.push(grant),
        }
        self
    }

    #[track_caller]
    fn grant_mut(&mut self, tool: &str) -> &mut GrantSpec {
        match self.grants.iter_mut().find(|g| g.tool == tool) {
            Some(grant) => grant,
            None => panic!("the template grants no {tool} to change"),
        }
    }

    /// The most `tool` may move in one call.
    ///
    /// # Panics
    /// If `tool` is not granted: a fixture that changes a grant it does not have is a bug.
    #[track_caller]
    pub fn max_amount(mut self, tool: &str, max: u64) -> Template {
        self.grant_mut(tool).max = max;
        self
    }

    /// `tool`'s `on_unresolvable`; `None` leaves it to the default of its reversibility.
    ///
    /// # Panics
    /// If `tool` is not granted.
    #[track_caller]
    pub fn on_unresolvable(mut self, tool: &str, policy: Option<OnUnresolvable>) -> Template {
        self.grant_mut(tool).on_unresolvable = policy;
        self
    }

    /// `tool`'s `max_refunds_per_payment`.
    ///
    /// # Panics
    /// If `tool` is not granted.
    #[track_caller]
    pub fn max_refunds_per_payment(mut self, tool: &str, count: u32) -> Template {
        self.grant_mut(tool).max_refunds_per_payment = Some(count);
        self
    }

    /// Takes `tool` out: its grant, its idempotency rule and its pin.
    pub fn without(mut self, tool: &str) -> Template {
        self.grants.retain(|g| g.tool != tool);
        self.idempotency.retain(|(t, ..)| t != tool);
        if let Some(pins) = &mut self.provenance {
            pins.tools.retain(|(t, _)| t != tool);
        }
        self
    }

    /// The velocity limit: one day, at most `max_calls` money calls and `max_amount_minor`
    /// moved, replacing the windows there were.
    pub fn window(mut self, max_calls: u32, max_amount_minor: u64) -> Template {
        self.windows = vec![(max_calls, max_amount_minor)];
        self
    }

    /// The fee budget: at most `max_fee_minor` of fees in one day.
    pub fn fee_budget(mut self, max_fee_minor: u64) -> Template {
        self.fee_budget = Some(max_fee_minor);
        self
    }

    /// `tool`'s idempotency rule (replacing any it had); `window_ms: None` is `null`, forever.
    pub fn idempotency(
        mut self,
        tool: &str,
        key_fields: &[&str],
        window_ms: Option<u64>,
    ) -> Template {
        let rule = (
            tool.to_owned(),
            key_fields.iter().map(|f| (*f).to_owned()).collect(),
            window_ms,
        );
        match self.idempotency.iter_mut().find(|(t, ..)| t == tool) {
            Some(old) => *old = rule,
            None => self.idempotency.push(rule),
        }
        self
    }

    /// Takes `tool`'s idempotency rule out (its key is then the standard fields only).
    pub fn without_idempotency(mut self, tool: &str) -> Template {
        self.idempotency.retain(|(t, ..)| t != tool);
        self
    }

    /// Pins the upstream `server_id` and its manifest hash; each tool's pin is [`Template::pin`]'s.
    pub fn pinned(mut self, server_id: &str, manifest_sha256: &str) -> Template {
        let tools = self.provenance.take().map(|p| p.tools).unwrap_or_default();
        self.provenance = Some(Pins {
            server_id: server_id.to_owned(),
            manifest_sha256: manifest_sha256.to_owned(),
            tools,
        });
        self
    }

    /// Pins `tool`'s description to `sha256` (replacing any pin it had); call after
    /// [`Template::pinned`] or [`Template::pinned_by`]. Without them there is no provenance to
    /// pin in, and the pin is dropped.
    pub fn pin(mut self, tool: &str, sha256: &str) -> Template {
        if let Some(pins) = &mut self.provenance {
            match pins.tools.iter_mut().find(|(t, _)| t == tool) {
                Some(old) => sha256.clone_into(&mut old.1),
                None => pins.tools.push((tool.to_owned(), sha256.to_owned())),
            }
        }
        self
    }

    /// Pins the server and every granted tool from what `interlock pin --json` prints:
    /// `{"server_id": …, "manifest_sha256": …, "tools": {"<tool>": "<sha256>", …}}`. Fails
    /// naming what is missing, e.g. a granted tool the server does not offer.
    pub fn pinned_by(self, pins: &Value) -> Result<Template, String> {
        let text = |value: &Value, what: &str| {
            value
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("the pins have no {what}: {pins}"))
        };
        let server_id = text(&pins["server_id"], "server_id")?;
        let manifest = text(&pins["manifest_sha256"], "manifest_sha256")?;
        let tools: Vec<String> = self.grants.iter().map(|g| g.tool.clone()).collect();
        let mut pinned = self.pinned(&server_id, &manifest);
        for tool in tools {
            let sha256 = text(&pins["tools"][&tool], &format!("pin for {tool}"))?;
            pinned = pinned.pin(&tool, &sha256);
        }
        Ok(pinned)
    }

    /// The mandate as YAML, ready to write to a file: block style for its sections, one flow
    /// line for each value bound, window, fee budget, idempotency rule and pin. Tests edit this
    /// text (the engine's replace `max_calls: 40` or a window's line), so its layout is kept.
    pub fn yaml(&self) -> String {
        let mut y = String::new();
        let mut line = |text: String| {
            y.push_str(&text);
            y.push('\n');
        };
        line("v: 1".to_owned());
        line(format!("mandate_id: {}", scalar(&self.mandate_id)));
        line(format!("merchant_id: {}", scalar(&self.merchant_id)));
        line(format!("agent_id: {}", scalar(&self.agent_id)));
        line(format!("issued_at: {}", self.issued_at));
        line(format!("expires_at: {}", self.expires_at));
        line(format!("purpose: {}", quoted(&self.purpose)));
        line("scope:".to_owned());
        line(format!("  grants:{}", empty_map(self.grants.is_empty())));
        for g in &self.grants {
            line(format!("    {}:", scalar(&g.tool)));
            let reversibility = if g.irreversible {
                "irreversible"
            } else {
                "reversible"
            };
            line(format!("      reversibility: {reversibility}"));
            line(format!(
                "      value: {{max_amount_minor: {}, min_amount_minor: {}, currencies: [INR]}}",
                g.max, g.min
            ));
            if let Some(policy) = g.on_unresolvable {
                let policy = match policy {
                    OnUnresolvable::Hold => "hold",
                    OnUnresolvable::Block => "block",
                };
                line(format!("      on_unresolvable: {policy}"));
            }
            if let Some(count) = g.max_refunds_per_payment {
                line(format!("      max_refunds_per_payment: {count}"));
            }
        }
        line("limits:".to_owned());
        if self.windows.is_empty() {
            line("  windows: []".to_owned());
        } else {
            line("  windows:".to_owned());
        }
        for (max_calls, max_amount) in &self.windows {
            line(format!(
                "    - {{window_ms: {DAY_MS}, max_calls: {max_calls}, max_amount_minor: {max_amount}, currency: INR}}"
            ));
        }
        line(format!(
            "  fee_budgets:{}",
            empty_map(self.fee_budget.is_none())
        ));
        if let Some(max_fee) = self.fee_budget {
            line(format!(
                "    INR: {{window_ms: {DAY_MS}, max_fee_minor: {max_fee}}}"
            ));
        }
        line(format!(
            "idempotency:{}",
            empty_map(self.idempotency.is_empty())
        ));
        for (tool, fields, window_ms) in &self.idempotency {
            let fields: Vec<String> = fields.iter().map(|f| scalar(f)).collect();
            let window_ms = window_ms.map_or("null".to_owned(), |w| w.to_string());
            line(format!(
                "  {}: {{key_fields: [{}], window_ms: {window_ms}}}",
                scalar(tool),
                fields.join(", ")
            ));
        }
        if let Some(pins) = &self.provenance {
            line("provenance:".to_owned());
            line(format!("  server_id: {}", quoted(&pins.server_id)));
            line(format!(
                "  manifest_sha256: {}",
                quoted(&pins.manifest_sha256)
            ));
            line(format!(
                "  pinned_manifests:{}",
                empty_map(pins.tools.is_empty())
            ));
            for (tool, sha256) in &pins.tools {
                line(format!(
                    "    {}: {{sha256: {}, trust_tier: pinned}}",
                    scalar(tool),
                    quoted(sha256)
                ));
            }
        }
        y
    }

    /// The mandate, read back from [`Template::yaml`] by [`Mandate::parse_yaml`]: an error
    /// names what the rules refuse.
    pub fn build(&self) -> Result<Mandate, MandateError> {
        Mandate::parse_yaml(&self.yaml())
    }
}

/// `text` as a YAML double-quoted scalar: a JSON string is one.
fn quoted(text: &str) -> String {
    Value::from(text).to_string()
}

/// `text` plain when YAML reads it back as that same string (a name such as `create_refund`
/// or `get-sum`), quoted otherwise.
fn scalar(text: &str) -> String {
    let plain = text
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && !["null", "true", "false", "yes", "no", "on", "off", "y", "n"]
            .contains(&text.to_ascii_lowercase().as_str());
    if plain { text.to_owned() } else { quoted(text) }
}

/// ` {}` after a key whose map is empty, nothing otherwise.
fn empty_map(empty: bool) -> &'static str {
    if empty { " {}" } else { "" }
}

#[cfg(test)]
mod tests {
    // The Razorpay desk as the profile builds it (interlock_profile::razorpay::refund_desk);
    // spec cannot depend on the profile, so its tests spell it out.
    fn refund_desk(agent_id: &str) -> Template {
        Template::new(agent_id)
            .read("fetch_payment")
            .money("create_refund", 100, 500_000)
            .money("create_instant_settlement", 200, 100_000)
            .on_unresolvable("create_instant_settlement", Some(OnUnresolvable::Hold))
            .window(40, 2_000_000)
            .fee_budget(20_000)
            .idempotency("create_refund", &["payment_id"], None)
            .idempotency("create_instant_settlement", &["description"], Some(DAY_MS))
    }

    use super::*;
    use crate::ids::ToolName;
    use crate::money::Minor;
    use serde_json::json;

    fn tool(name: &str) -> ToolName {
        ToolName::parse(name).unwrap()
    }

    #[test]
    fn the_refund_desk_validates_and_says_what_its_doc_says() {
        let mandate = refund_desk("agent_support_bot").build().unwrap();
        assert_eq!(mandate.agent_id.as_str(), "agent_support_bot");
        assert_eq!(mandate.scope.grants.len(), 3);
        let refund = mandate.grant(&tool("create_refund")).unwrap();
        assert_eq!(refund.value.max_amount_minor, Minor::new(500_000).unwrap());
        let settlement = mandate.grant(&tool("create_instant_settlement")).unwrap();
        assert_eq!(settlement.on_unresolvable(), OnUnresolvable::Hold);
        assert_eq!(mandate.limits.windows[0].max_calls, 40);
        assert_eq!(
            mandate.idempotency[&tool("create_instant_settlement")].window_ms,
            Some(DAY_MS)
        );
        assert!(mandate.provenance.is_none());
    }

    #[test]
    fn pins_come_from_pin_json_and_can_be_overridden() {
        let pins = json!({
            "server_id": "razorpay-mcp@0.1.0",
            "manifest_sha256": "a".repeat(64),
            "tools": {"fetch_payment": "b".repeat(64), "create_refund": "c".repeat(64),
                      "create_instant_settlement": "d".repeat(64), "other": "e".repeat(64)},
        });
        let mandate = refund_desk("agent_x")
            .pinned_by(&pins)
            .unwrap()
            .pin("create_refund", &"0".repeat(64))
            .build()
            .unwrap();
        let provenance = mandate.provenance.unwrap();
        assert_eq!(provenance.server_id, "razorpay-mcp@0.1.0");
        assert_eq!(provenance.pinned_manifests.len(), 3, "granted tools only");
        assert_eq!(
            provenance.pinned_manifests[&tool("create_refund")].sha256,
            "0".repeat(64)
        );
        assert_eq!(
            provenance.pinned_manifests[&tool("fetch_payment")].sha256,
            "b".repeat(64)
        );

        let missing = json!({"server_id": "s", "manifest_sha256": "a".repeat(64), "tools": {}});
        let err = refund_desk("agent_x").pinned_by(&missing).unwrap_err();
        assert!(err.contains("pin for fetch_payment"), "{err}");
    }

    #[test]
    fn without_takes_the_grant_its_rule_and_its_pin() {
        let mandate = refund_desk("agent_x")
            .pinned("s", &"a".repeat(64))
            .pin("create_instant_settlement", &"b".repeat(64))
            .pin("create_refund", &"c".repeat(64))
            .without("create_instant_settlement")
            .build()
            .unwrap();
        let settlement = tool("create_instant_settlement");
        assert!(mandate.grant(&settlement).is_none());
        assert!(!mandate.idempotency.contains_key(&settlement));
        let pins = mandate.provenance.unwrap().pinned_manifests;
        assert_eq!(pins.keys().collect::<Vec<_>>(), [&tool("create_refund")]);
    }

    #[test]
    fn an_empty_template_writes_empty_collections() {
        let mandate = Template::new("agent_x")
            .read("get-sum")
            .pinned("s", &"a".repeat(64))
            .build()
            .unwrap();
        assert!(mandate.limits.windows.is_empty());
        assert!(mandate.limits.fee_budgets.is_empty());
        assert!(mandate.idempotency.is_empty());
        assert!(mandate.grant(&tool("get-sum")).is_some());
        assert!(mandate.provenance.unwrap().pinned_manifests.is_empty());
    }

    #[test]
    fn what_the_rules_refuse_is_an_error_not_a_panic() {
        let err = refund_desk("agent x").build().unwrap_err();
        assert!(matches!(err, MandateError::Yaml(_)), "{err}");
        let err = refund_desk("agent_x")
            .max_amount("create_refund", 50)
            .build()
            .unwrap_err();
        assert!(matches!(err, MandateError::Invalid(_)), "{err}");
    }

    #[test]
    fn names_yaml_would_read_otherwise_are_quoted() {
        assert_eq!(scalar("create_refund"), "create_refund");
        assert_eq!(scalar("get-sum"), "get-sum");
        for text in ["true", "No", "null", "1e3", "7", "a b", "x: y", ""] {
            assert!(scalar(text).starts_with('"'), "{text:?}");
        }
        let mandate = Template::new("agent_x")
            .read("true")
            .read("null")
            .read("get-sum")
            .build()
            .unwrap();
        for name in ["true", "null", "get-sum"] {
            assert!(mandate.grant(&tool(name)).is_some(), "{name}");
        }
    }

    #[test]
    #[should_panic(expected = "the template grants no create_payout to change")]
    fn changing_a_grant_it_does_not_have_is_a_bug() {
        let _ = refund_desk("agent_x").max_amount("create_payout", 1);
    }
}
