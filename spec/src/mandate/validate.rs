//! The rules a parsed mandate must satisfy. Every violation is collected, each naming its path
//! (`scope.grants.create_refund.value.max_amount_minor`), so one `interlock check` run lists
//! everything a human has to fix.

use super::{MANDATE_VERSION, Mandate, Provenance};
use crate::action::ActionKind;
use crate::canonical::JSON_INTEGER_MAX;
use crate::hash::is_sha256_hex;
use crate::ids::{ToolName, is_word};
use crate::money::{Currency, Minor};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// Longest purpose text, in characters.
pub const PURPOSE_LENGTH_MAX: usize = 1_000;
/// Most tools one mandate grants.
pub const GRANTS_MAX: usize = 64;
/// Most currencies one grant lists.
pub const CURRENCIES_PER_GRANT_MAX: usize = 16;
/// Most sliding windows.
pub const WINDOWS_MAX: usize = 16;
/// Most fee budgets.
pub const FEE_BUDGETS_MAX: usize = 16;
/// Most key fields in one idempotency rule.
pub const KEY_FIELDS_MAX: usize = 16;
/// Longest key field name.
pub const KEY_FIELD_LENGTH_MAX: usize = 64;
/// Longest upstream server id.
pub const SERVER_ID_LENGTH_MAX: usize = 128;
/// Largest time or duration, in milliseconds: 2^53, so the mandate always has a canonical JSON
/// form and therefore a hash.
pub const TIME_MS_MAX: u64 = JSON_INTEGER_MAX;

/// One broken rule, at one place in the mandate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {problem}")]
pub struct Violation {
    /// Where, as dotted keys with `[i]` for list items: `limits.windows[0].window_ms`.
    pub path: String,
    /// What is wrong there.
    pub problem: Problem,
}

/// What is wrong at a [`Violation`]'s path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// `v` is not a version this crate reads.
    #[error("must be {MANDATE_VERSION}, got {0}")]
    UnsupportedVersion(u32),
    /// `expires_at` is not after `issued_at`.
    #[error("must be after issued_at ({issued_at}), got {expires_at}")]
    ExpiresNotAfterIssued {
        /// The start.
        issued_at: u64,
        /// The end.
        expires_at: u64,
    },
    /// A time or duration above [`TIME_MS_MAX`].
    #[error("must be at most {TIME_MS_MAX} ms, got {0}")]
    TimeTooLarge(u64),
    /// A duration of zero.
    #[error("must be positive, got 0")]
    Zero,
    /// Text that is empty or only whitespace.
    #[error("must not be blank")]
    Blank,
    /// Text longer than its limit.
    #[error("has {length} characters; at most {max} are accepted")]
    TooLong {
        /// Its length.
        length: usize,
        /// The limit.
        max: usize,
    },
    /// A list or map that must have entries has none.
    #[error("must not be empty")]
    Empty,
    /// A list or map with more entries than its limit.
    #[error("has {count} entries; at most {max} are accepted")]
    TooMany {
        /// How many there are.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// The same entry listed twice.
    #[error("lists {0} more than once")]
    Duplicate(String),
    /// A maximum below its minimum.
    #[error("must be ≥ min_amount_minor ({min}), got {max}")]
    MaxBelowMin {
        /// The minimum.
        min: Minor,
        /// The maximum.
        max: Minor,
    },
    /// A reference to a tool `scope.grants` does not grant.
    #[error("refers to {0}, which scope.grants does not grant")]
    UngrantedTool(ToolName),
    /// A limit in a currency no grant may move, which would leave the real currency unlimited.
    #[error("counts {0}, which no grant may move; did you mean one of the granted currencies?")]
    UngrantedCurrency(Currency),
    /// A window on a refund tool's idempotency key.
    #[error(
        "must be null for a refund tool, got {0}: a refund is the same refund however long the agent waits"
    )]
    RefundWindow(u64),
    /// A tool that pays a payee, granted without an allow-list of payees.
    #[error("{0} pays a payee: list the payees it may pay (an AP2-style allow-list)")]
    PayeesRequired(ToolName),
    /// `payees` or `recipient_changes` on a tool that pays no payee.
    #[error("applies only to tools that pay a payee, and the rail profile says {0} does not")]
    NotAPayeeTool(ToolName),
    /// A payee that is not one (`spec::payee`).
    #[error("{0}")]
    BadPayee(crate::payee::PayeeError),
    /// `max_refunds_per_payment` on a tool that is not a refund.
    #[error("applies only to refund tools, and the rail profile says {0} is not one")]
    NotARefundTool(ToolName),
    /// A key field that is not an argument name.
    #[error("must be 1..={KEY_FIELD_LENGTH_MAX} characters of A-Z, a-z, 0-9 and _, got {0:?}")]
    BadKeyField(String),
    /// A hash that is not 64 lowercase hex characters.
    #[error("must be a SHA-256 in 64 lowercase hex characters, got {0:?}")]
    NotSha256Hex(String),
    /// A count limit of zero, which would revoke what the mandate grants.
    #[error("must be at least 1 (to allow nothing, remove the grant)")]
    ZeroCount,
}

pub(super) fn join(violations: &[Violation]) -> String {
    let lines: Vec<String> = violations.iter().map(Violation::to_string).collect();
    lines.join("; ")
}

/// Collects violations as the checks walk the mandate.
#[derive(Default)]
struct Checker {
    violations: Vec<Violation>,
}

impl Checker {
    fn finish(self) -> Result<(), Vec<Violation>> {
        if self.violations.is_empty() {
            Ok(())
        } else {
            Err(self.violations)
        }
    }

    fn fail(&mut self, path: impl fmt::Display, problem: Problem) {
        self.violations.push(Violation {
            path: path.to_string(),
            problem,
        });
    }

    fn text(&mut self, path: &str, text: &str, length_max: usize) {
        let length = text.chars().count();
        if text.trim().is_empty() {
            self.fail(path, Problem::Blank);
        } else if length > length_max {
            self.fail(
                path,
                Problem::TooLong {
                    length,
                    max: length_max,
                },
            );
        }
    }

    fn count(&mut self, path: &str, count: usize, max: usize) {
        if count > max {
            self.fail(path, Problem::TooMany { count, max });
        }
    }

    fn duration(&mut self, path: &str, window_ms: u64) {
        if window_ms == 0 {
            self.fail(path, Problem::Zero);
        } else if window_ms > TIME_MS_MAX {
            self.fail(path, Problem::TimeTooLarge(window_ms));
        }
    }

    fn granted<T>(&mut self, section: &str, entries: &BTreeMap<ToolName, T>, mandate: &Mandate) {
        for tool in entries.keys() {
            if mandate.grant(tool).is_none() {
                self.fail(
                    format_args!("{section}.{tool}"),
                    Problem::UngrantedTool(tool.clone()),
                );
            }
        }
    }

    fn sha256(&mut self, path: &str, text: &str) {
        if !is_sha256_hex(text) {
            self.fail(path, Problem::NotSha256Hex(text.to_owned()));
        }
    }
}

pub(super) fn mandate(mandate: &Mandate) -> Result<(), Vec<Violation>> {
    let mut checker = Checker::default();
    header(&mut checker, mandate);
    grants(&mut checker, mandate);
    limits(&mut checker, mandate, &granted_currencies(mandate));
    idempotency(&mut checker, mandate);
    if let Some(provenance) = &mandate.provenance {
        pins(&mut checker, provenance, mandate);
    }
    checker.finish()
}

fn header(checker: &mut Checker, mandate: &Mandate) {
    if mandate.v != MANDATE_VERSION {
        checker.fail("v", Problem::UnsupportedVersion(mandate.v));
    }
    for (path, time) in [
        ("issued_at", mandate.issued_at),
        ("expires_at", mandate.expires_at),
    ] {
        if time > TIME_MS_MAX {
            checker.fail(path, Problem::TimeTooLarge(time));
        }
    }
    if mandate.expires_at <= mandate.issued_at {
        checker.fail(
            "expires_at",
            Problem::ExpiresNotAfterIssued {
                issued_at: mandate.issued_at,
                expires_at: mandate.expires_at,
            },
        );
    }
    checker.text("purpose", &mandate.purpose, PURPOSE_LENGTH_MAX);
}

fn grants(checker: &mut Checker, mandate: &Mandate) {
    let grants = &mandate.scope.grants;
    if grants.is_empty() {
        checker.fail("scope.grants", Problem::Empty);
    }
    checker.count("scope.grants", grants.len(), GRANTS_MAX);
    for (tool, grant) in grants {
        let path = format!("scope.grants.{tool}");
        let value = &grant.value;
        if value.max_amount_minor < value.min_amount_minor {
            checker.fail(
                format_args!("{path}.value.max_amount_minor"),
                Problem::MaxBelowMin {
                    min: value.min_amount_minor,
                    max: value.max_amount_minor,
                },
            );
        }
        currencies(
            checker,
            &format!("{path}.value.currencies"),
            &value.currencies,
        );
        if grant.max_refunds_per_payment == Some(0) {
            checker.fail(
                format_args!("{path}.max_refunds_per_payment"),
                Problem::ZeroCount,
            );
        }
    }
}

fn currencies(checker: &mut Checker, path: &str, currencies: &[Currency]) {
    if currencies.is_empty() {
        checker.fail(path, Problem::Empty);
    }
    checker.count(path, currencies.len(), CURRENCIES_PER_GRANT_MAX);
    let mut seen = BTreeSet::new();
    for currency in currencies {
        if !seen.insert(currency) {
            checker.fail(path, Problem::Duplicate(currency.to_string()));
        }
    }
}

fn granted_currencies(mandate: &Mandate) -> BTreeSet<Currency> {
    let grants = mandate.scope.grants.values();
    grants
        .flat_map(|grant| grant.value.currencies.iter().copied())
        .collect()
}

fn limits(checker: &mut Checker, mandate: &Mandate, granted: &BTreeSet<Currency>) {
    let limits = &mandate.limits;
    checker.count("limits.windows", limits.windows.len(), WINDOWS_MAX);
    for (index, window) in limits.windows.iter().enumerate() {
        let path = format!("limits.windows[{index}]");
        checker.duration(&format!("{path}.window_ms"), window.window_ms);
        if window.max_calls == 0 {
            checker.fail(format_args!("{path}.max_calls"), Problem::ZeroCount);
        }
        if !granted.contains(&window.currency) {
            checker.fail(
                format_args!("{path}.currency"),
                Problem::UngrantedCurrency(window.currency),
            );
        }
        if let Some(tools) = &window.tools {
            window_tools(checker, &format!("{path}.tools"), tools, mandate);
        }
    }
    let budgets = &limits.fee_budgets;
    checker.count("limits.fee_budgets", budgets.len(), FEE_BUDGETS_MAX);
    for (currency, budget) in budgets {
        let path = format!("limits.fee_budgets.{currency}");
        checker.duration(&format!("{path}.window_ms"), budget.window_ms);
        if !granted.contains(currency) {
            checker.fail(&path, Problem::UngrantedCurrency(*currency));
        }
    }
}

/// A window's scope: some granted tools, each once. An empty list would count nothing, which
/// reads as a limit but is none, so it is refused rather than taken to mean "every tool".
fn window_tools(checker: &mut Checker, path: &str, tools: &[ToolName], mandate: &Mandate) {
    if tools.is_empty() {
        checker.fail(path, Problem::Empty);
    }
    checker.count(path, tools.len(), GRANTS_MAX);
    let mut seen = BTreeSet::new();
    for tool in tools {
        if mandate.grant(tool).is_none() {
            checker.fail(path, Problem::UngrantedTool(tool.clone()));
        } else if !seen.insert(tool) {
            checker.fail(path, Problem::Duplicate(tool.to_string()));
        }
    }
}

fn idempotency(checker: &mut Checker, mandate: &Mandate) {
    checker.granted("idempotency", &mandate.idempotency, mandate);
    for (tool, rule) in &mandate.idempotency {
        let path = format!("idempotency.{tool}");
        let fields_path = format!("{path}.key_fields");
        if rule.key_fields.is_empty() {
            checker.fail(&fields_path, Problem::Empty);
        }
        checker.count(&fields_path, rule.key_fields.len(), KEY_FIELDS_MAX);
        let mut seen = BTreeSet::new();
        for field in &rule.key_fields {
            if !is_word(field, KEY_FIELD_LENGTH_MAX) {
                checker.fail(&fields_path, Problem::BadKeyField(field.clone()));
            } else if !seen.insert(field) {
                checker.fail(&fields_path, Problem::Duplicate(field.clone()));
            }
        }
        if let Some(window_ms) = rule.window_ms {
            checker.duration(&format!("{path}.window_ms"), window_ms);
        }
    }
}

/// The rules that depend on what each tool does, which only a rail profile knows: a refund's
/// key never carries a window (or an agent could refund twice by waiting), and a count of
/// refunds per payment applies only to a refund tool. `kind_of` is the profile's answer.
pub fn kinds(
    mandate: &Mandate,
    kind_of: impl Fn(&ToolName) -> Option<ActionKind>,
) -> Result<(), Vec<Violation>> {
    let mut checker = Checker::default();
    for (tool, grant) in &mandate.scope.grants {
        let is_refund = kind_of(tool) == Some(ActionKind::Refund);
        if grant.max_refunds_per_payment.is_some() && !is_refund {
            checker.fail(
                format_args!("scope.grants.{tool}.max_refunds_per_payment"),
                Problem::NotARefundTool(tool.clone()),
            );
        }
        let pays = kind_of(tool).is_some_and(ActionKind::pays_a_payee);
        match (&grant.payees, pays) {
            (None, true) => checker.fail(
                format_args!("scope.grants.{tool}.payees"),
                Problem::PayeesRequired(tool.clone()),
            ),
            (Some(_), false) => checker.fail(
                format_args!("scope.grants.{tool}.payees"),
                Problem::NotAPayeeTool(tool.clone()),
            ),
            _ => {}
        }
        if grant.recipient_changes.is_some() && kind_of(tool) != Some(ActionKind::ScheduledUpdate) {
            checker.fail(
                format_args!("scope.grants.{tool}.recipient_changes"),
                Problem::NotAPayeeTool(tool.clone()),
            );
        }
        for (i, payee) in grant.payees.iter().flatten().enumerate() {
            if let Err(e) = crate::payee::normalize(payee) {
                checker.fail(
                    format_args!("scope.grants.{tool}.payees[{i}]"),
                    Problem::BadPayee(e),
                );
            }
        }
    }
    for (tool, rule) in &mandate.idempotency {
        if let Some(window_ms) = rule.window_ms
            && kind_of(tool) == Some(ActionKind::Refund)
        {
            checker.fail(
                format_args!("idempotency.{tool}.window_ms"),
                Problem::RefundWindow(window_ms),
            );
        }
    }
    checker.finish()
}

fn pins(checker: &mut Checker, provenance: &Provenance, mandate: &Mandate) {
    checker.text(
        "provenance.server_id",
        &provenance.server_id,
        SERVER_ID_LENGTH_MAX,
    );
    checker.sha256("provenance.manifest_sha256", &provenance.manifest_sha256);
    checker.granted(
        "provenance.pinned_manifests",
        &provenance.pinned_manifests,
        mandate,
    );
    for (tool, pin) in &provenance.pinned_manifests {
        checker.sha256(
            &format!("provenance.pinned_manifests.{tool}.sha256"),
            &pin.sha256,
        );
    }
}
