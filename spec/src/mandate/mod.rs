//! The human-approved mandate: which tools one agent may call on one merchant account, how much
//! money they may move, how fast, and which upstream tool descriptions are trusted.
//!
//! A mandate is read from YAML with [`Mandate::parse_yaml`], which parses strictly (unknown
//! fields, floats, quoted numbers, duplicate keys, merge keys and unknown tags are refused; input
//! size, depth and alias expansion are bounded) and then runs [`Mandate::validate`]. Whether it
//! is in force at a given instant is [`Mandate::check_active`], with the time passed in.
//!
//! [`template::Template`] writes the mandate the demo, tests, benchmarks and fuzz targets run
//! under, so each states only what it changes.
//!
//! [`Mandate::hash`] is the SHA-256 of the mandate's canonical JSON, so comments, layout and key
//! order in the YAML do not change it, and every decision can name the mandate it was made under.

pub mod template;
mod validate;
mod yaml;
pub use yaml::options as strict_yaml_options;

#[cfg(test)]
mod tests;

pub use validate::{
    CURRENCIES_PER_GRANT_MAX, FEE_BUDGETS_MAX, GRANTS_MAX, KEY_FIELD_LENGTH_MAX, KEY_FIELDS_MAX,
    PURPOSE_LENGTH_MAX, Problem, SERVER_ID_LENGTH_MAX, TIME_MS_MAX, Violation, WINDOWS_MAX,
};
pub use yaml::{
    MANDATE_YAML_ALIASES_MAX, MANDATE_YAML_ANCHORS_MAX, MANDATE_YAML_BYTES_MAX,
    MANDATE_YAML_DEPTH_MAX, MANDATE_YAML_EVENTS_MAX, MANDATE_YAML_NODES_MAX,
    MANDATE_YAML_REPLAYED_EVENTS_MAX, MANDATE_YAML_SCALAR_BYTES_MAX,
};

use crate::canonical::{CanonicalError, canonical_json};
use crate::hash::sha256_hex;
use crate::ids::{AgentId, MandateId, MerchantId, ToolName};
use crate::money::{Currency, Minor};
use crate::sik::{SikError, window_bucket};
use crate::strict;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The only mandate format version this crate reads.
pub const MANDATE_VERSION: u32 = 1;

/// Why a mandate was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MandateError {
    /// The YAML text is larger than [`MANDATE_YAML_BYTES_MAX`].
    #[error("mandate is {bytes} bytes; at most {MANDATE_YAML_BYTES_MAX} are read")]
    TooLarge {
        /// The size of the text.
        bytes: usize,
    },
    /// The YAML did not parse into a mandate: bad syntax, an unknown or missing field, a float
    /// or string where an integer belongs, a malformed id, or a breached input budget. The text
    /// is serde-saphyr's message, with line and column.
    #[error("mandate YAML is malformed: {0}")]
    Yaml(String),
    /// The mandate parsed but breaks one or more rules; every violation is listed.
    #[error("mandate is invalid: {}", validate::join(.0))]
    Invalid(Vec<Violation>),
}

/// Why a valid mandate is not in force at an instant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MandateTimeError {
    /// The instant is before `issued_at`.
    #[error("mandate is not valid until {issued_at} ms; it is now {now_ms} ms")]
    NotYetValid {
        /// The instant asked about.
        now_ms: u64,
        /// When the mandate starts.
        issued_at: u64,
    },
    /// The instant is at or after `expires_at`.
    #[error("mandate expired at {expires_at} ms; it is now {now_ms} ms")]
    Expired {
        /// The instant asked about.
        now_ms: u64,
        /// When the mandate ended.
        expires_at: u64,
    },
}

/// A human-approved mandate. See the module documentation and `examples/mandate.yaml`.
///
/// Optional fields added after v1's first shape (`on_unresolvable`, `max_refunds_per_payment`,
/// `provenance`, a window's `tools`) are left out of the serialized form when absent, so adding such a field to the
/// format does not change the hash of mandates that do not use it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mandate {
    /// Format version; must be [`MANDATE_VERSION`].
    #[serde(deserialize_with = "strict::u32")]
    pub v: u32,
    /// The mandate's name.
    pub mandate_id: MandateId,
    /// The rail account the agent acts on.
    pub merchant_id: MerchantId,
    /// The only agent the mandate authorises.
    pub agent_id: AgentId,
    /// Start of validity, epoch milliseconds (inclusive).
    #[serde(deserialize_with = "strict::u64")]
    pub issued_at: u64,
    /// End of validity, epoch milliseconds (exclusive).
    #[serde(deserialize_with = "strict::u64")]
    pub expires_at: u64,
    /// What the human approved, in their words; G5 (when enabled) judges calls against it.
    pub purpose: String,
    /// The tools granted.
    pub scope: Scope,
    /// Velocity and fee limits across calls.
    pub limits: Limits,
    /// Per-tool idempotency key rules. Absent means none are configured.
    #[serde(default)]
    pub idempotency: BTreeMap<ToolName, IdempotencyRule>,
    /// Pins of the upstream tool descriptions (written by `interlock pin`). Absent means nothing
    /// is pinned yet; G6 decides what that allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Provenance>,
}

/// The tools a mandate grants.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scope {
    /// One grant per tool, keyed by the upstream tool name.
    pub grants: BTreeMap<ToolName, Grant>,
}

/// Permission to call one tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    /// Whether the tool's effect can be undone.
    pub reversibility: Reversibility,
    /// Bounds on the amount of one call.
    pub value: ValueLimit,
    /// What to do when the action's referent cannot be resolved on the rail. Absent means
    /// [`Grant::on_unresolvable`]'s default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_unresolvable: Option<OnUnresolvable>,
    /// For refund tools: at most this many refunds of one payment, however the amount is
    /// split. Absent means no count limit (the refundable amount still bounds the total).
    #[serde(
        default,
        deserialize_with = "strict::option_u32",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_refunds_per_payment: Option<u32>,
    /// For tools that pay a payee (transfers, scheduled transfers and their updates): the only
    /// recipients allowed, as the rail spells them; IBANs are compared without spaces in upper
    /// case, names exactly (`spec::payee`). Required for such tools: there is no "any payee".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payees: Option<Vec<String>>,
    /// For updates of a scheduled transfer: whether an update may change its recipient (to an
    /// allowed payee). Absent means `allow`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recipient_changes: Option<RecipientChanges>,
}

/// Whether an update may change a scheduled transfer's recipient.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecipientChanges {
    /// To any payee on the allow-list.
    Allow,
    /// Never: an update keeps the recipient it was scheduled with.
    Forbid,
}

impl Grant {
    /// The effective policy for an unresolvable referent: the one written, or else `hold` for a
    /// reversible tool (a human can look) and `block` for an irreversible one (money that leaves
    /// on a guess cannot be called back).
    pub fn on_unresolvable(&self) -> OnUnresolvable {
        self.on_unresolvable.unwrap_or(match self.reversibility {
            Reversibility::Reversible => OnUnresolvable::Hold,
            Reversibility::Irreversible => OnUnresolvable::Block,
        })
    }
}

/// Whether a tool's effect can be undone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reversibility {
    /// Undoable, or no effect at all (reads).
    Reversible,
    /// Money that leaves cannot be called back (refunds, settlements).
    Irreversible,
}

/// The policy for an action whose referent cannot be resolved on the rail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnUnresolvable {
    /// Hold the action for a human to approve or reject.
    Hold,
    /// Refuse the action.
    Block,
}

/// Bounds on the amount of one call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValueLimit {
    /// Largest amount of one call, in minor units.
    pub max_amount_minor: Minor,
    /// Smallest amount of one call, in minor units.
    pub min_amount_minor: Minor,
    /// Currencies the tool may move; any other is refused.
    pub currencies: Vec<Currency>,
}

/// Limits across calls.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Sliding windows on call count and cumulative amount. Required, so "no velocity limit"
    /// is written (`windows: []`), never implied by a missing key.
    pub windows: Vec<WindowLimit>,
    /// Per-currency budgets for fees the rail charges. Required for the same reason.
    pub fee_budgets: BTreeMap<Currency, FeeBudget>,
}

/// A sliding-window limit on money-moving calls in one currency.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowLimit {
    /// Window length in milliseconds.
    #[serde(deserialize_with = "strict::u64")]
    pub window_ms: u64,
    /// Most calls in any window.
    #[serde(deserialize_with = "strict::u32")]
    pub max_calls: u32,
    /// Most money moved in any window, in minor units.
    pub max_amount_minor: Minor,
    /// The currency the window counts.
    pub currency: Currency,
    /// The tools whose calls the window counts; absent means every money tool. A merchant
    /// writes one window for refunds and another for instant settlements, so that a day's
    /// settlement neither uses up the refunds' cap nor hides inside it. Left out of the
    /// serialized form when absent, so mandates without it keep their hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<ToolName>>,
}

impl WindowLimit {
    /// Whether a call of `tool` counts against this window.
    pub fn counts(&self, tool: &ToolName) -> bool {
        self.tools.as_ref().is_none_or(|tools| tools.contains(tool))
    }
}

/// A budget for rail fees in one currency.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeeBudget {
    /// Window length in milliseconds.
    #[serde(deserialize_with = "strict::u64")]
    pub window_ms: u64,
    /// Most fees (tax included) in any window, in minor units.
    pub max_fee_minor: Minor,
}

/// How one tool's semantic idempotency key is formed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdempotencyRule {
    /// Tool arguments that, with the standard fields, make up the key.
    pub key_fields: Vec<String>,
    /// How long a key stays unique, in milliseconds; `null` (or absent) means forever, and
    /// refund tools must use `null`.
    #[serde(default, deserialize_with = "strict::option_u64")]
    pub window_ms: Option<u64>,
}

impl IdempotencyRule {
    /// The SIK window bucket for an action at `now_ms`: `None` for permanent uniqueness.
    pub fn window_bucket(&self, now_ms: u64) -> Result<Option<u64>, SikError> {
        self.window_ms
            .map(|window_ms| window_bucket(now_ms, window_ms))
            .transpose()
    }
}

/// Pins of the upstream server's tool descriptions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    /// The upstream server's name and version as it reports them.
    pub server_id: String,
    /// SHA-256 (lowercase hex) of the canonical JSON of the whole tool manifest.
    pub manifest_sha256: String,
    /// Per-tool pins.
    #[serde(default)]
    pub pinned_manifests: BTreeMap<ToolName, PinnedManifest>,
}

/// The pin of one tool's description.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PinnedManifest {
    /// SHA-256 (lowercase hex) of the canonical JSON of the tool's description.
    pub sha256: String,
    /// How the pin is enforced.
    pub trust_tier: TrustTier,
}

/// How a pin is enforced. Only `pinned` exists in v1; another tier is a format change that G6
/// must learn first, so an unknown tier is refused rather than read as something weaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TrustTier {
    /// The description must hash to the pin exactly; drift blocks the tool.
    Pinned,
}

impl Mandate {
    /// Parses `text` strictly and validates the result.
    pub fn parse_yaml(text: &str) -> Result<Mandate, MandateError> {
        let mandate = yaml::parse(text)?;
        mandate.validate().map_err(MandateError::Invalid)?;
        Ok(mandate)
    }

    /// Checks every rule that does not depend on the time; returns every violation found.
    pub fn validate(&self) -> Result<(), Vec<Violation>> {
        validate::mandate(self)
    }

    /// Checks the rules that depend on what each tool does, as a rail profile's `kind_of` says
    /// ([`validate::kinds`]): the proxy runs them with its profile wherever it loads a mandate.
    pub fn validate_kinds(
        &self,
        kind_of: impl Fn(&ToolName) -> Option<crate::action::ActionKind>,
    ) -> Result<(), Vec<Violation>> {
        validate::kinds(self, kind_of)
    }

    /// Checks the mandate is in force at `now_ms`: `issued_at <= now_ms < expires_at`.
    pub fn check_active(&self, now_ms: u64) -> Result<(), MandateTimeError> {
        if now_ms < self.issued_at {
            return Err(MandateTimeError::NotYetValid {
                now_ms,
                issued_at: self.issued_at,
            });
        }
        if now_ms >= self.expires_at {
            return Err(MandateTimeError::Expired {
                now_ms,
                expires_at: self.expires_at,
            });
        }
        Ok(())
    }

    /// SHA-256 (lowercase hex) of the mandate's canonical JSON. Fails only for a mandate that
    /// would not validate (an integer above 2^53).
    pub fn hash(&self) -> Result<String, CanonicalError> {
        // Every map key is a string-serialized id, so serializing to a Value cannot fail.
        let value = serde_json::to_value(self).expect("a mandate serializes to JSON");
        Ok(sha256_hex(canonical_json(&value)?.as_bytes()))
    }

    /// The grant for `tool`, if the mandate grants it.
    pub fn grant(&self, tool: &ToolName) -> Option<&Grant> {
        self.scope.grants.get(tool)
    }
}
