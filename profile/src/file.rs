//! A profile file: strict YAML (unknown fields, duplicate keys and merge keys refused, the
//! mandate's budgets), then the rules no schema can say, each refusal naming its path.

use crate::{Profile, SubjectArg};
use interlock_spec::action::{ActionKind, AmountEncoding};
use interlock_spec::mandate::strict_yaml_options;
use std::collections::BTreeSet;
use std::path::Path;

/// Largest profile file read. The built-in Razorpay profile is about 3 KiB.
pub const PROFILE_YAML_BYTES_MAX: usize = 64 * 1024;
/// Largest page a profile may ask a list for: a reconcile pass holds a page in memory.
pub const PAGE_SIZE_MAX: u32 = 1_000;
/// Most money tools one profile describes.
pub const MONEY_TOOLS_MAX: usize = 32;

/// Why a profile was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProfileError {
    /// The file could not be read.
    #[error("cannot read the profile {path}: {error}")]
    Read {
        /// The path.
        path: String,
        /// The I/O error.
        error: String,
    },
    /// Larger than [`PROFILE_YAML_BYTES_MAX`].
    #[error("the profile is {0} bytes; at most {PROFILE_YAML_BYTES_MAX} are read")]
    TooLarge(usize),
    /// Not YAML of a profile's shape (the message names the field and line).
    #[error("the profile is not valid: {0}")]
    Yaml(String),
    /// Well-formed but breaks a rule.
    #[error("the profile is not valid: {path}: {rule}")]
    Rule {
        /// Where.
        path: String,
        /// What.
        rule: String,
    },
    /// `--profile` named neither a built-in profile nor a file.
    #[error("{0:?} is neither a built-in profile (razorpay) nor a profile file")]
    Unknown(String),
}

impl Profile {
    /// Reads and checks a profile from its YAML text.
    pub fn from_yaml(text: &str) -> Result<Profile, ProfileError> {
        if text.len() > PROFILE_YAML_BYTES_MAX {
            return Err(ProfileError::TooLarge(text.len()));
        }
        let profile: Profile = serde_saphyr::from_str_with_options(text, strict_yaml_options())
            .map_err(|e| ProfileError::Yaml(e.to_string()))?;
        profile.check()?;
        Ok(profile)
    }

    /// `razorpay` (the built-in profile), or a profile file's path.
    pub fn load(name_or_path: &str) -> Result<Profile, ProfileError> {
        if name_or_path == "razorpay" {
            return Ok(crate::razorpay::profile());
        }
        let path = Path::new(name_or_path);
        if !path.exists() {
            return Err(ProfileError::Unknown(name_or_path.to_owned()));
        }
        let text = std::fs::read_to_string(path).map_err(|e| ProfileError::Read {
            path: path.display().to_string(),
            error: e.to_string(),
        })?;
        Profile::from_yaml(&text)
    }

    fn check(&self) -> Result<(), ProfileError> {
        if self.name.trim().is_empty() {
            return refuse("profile", "must name the profile");
        }
        if self.money.is_empty() || self.money.len() > MONEY_TOOLS_MAX {
            return refuse("money", "must list 1 to 32 money tools");
        }
        let mut names = BTreeSet::new();
        for (i, money) in self.money.iter().enumerate() {
            let at = format!("money[{i}]");
            if !names.insert(money.tool.as_str()) {
                return refuse(&format!("{at}.tool"), "names a tool listed twice");
            }
            self.check_args(&at, money)?;
            self.check_shape(&at, money)?;
            check_encoding(&format!("{at}.amount.encoding"), money.amount.encoding)?;
        }
        check_encoding("referent.amounts", self.referent.amounts)?;
        if let Some(tool) = self
            .other_writes
            .iter()
            .find(|t| self.kind_of(t.as_str()).is_some())
        {
            let rule = format!("{tool} is a money tool: it cannot also be a write that moves none");
            return refuse("other_writes", &rule);
        }
        if let Some(kind) = self
            .receipt()
            .flat_map(|r| &r.kinds)
            .find(|k| !self.has_kind(**k))
        {
            let rule = format!("{} is not the kind of any money tool", kind.as_str());
            return refuse("stamp.receipt.kinds", &rule);
        }
        self.check_lists()?;
        if self.rejected_marker.is_empty() {
            // An empty marker is in every error: every error would read as "nothing moved".
            return refuse("rejected_marker", "must not be empty");
        }
        Ok(())
    }

    /// What each kind needs: its subject, its payee, its referent read.
    fn check_shape(&self, at: &str, money: &crate::MoneyTool) -> Result<(), ProfileError> {
        let kind = money.kind;
        let has_subject = matches!(kind, ActionKind::Refund | ActionKind::ScheduledUpdate);
        if money.subject.is_some() != has_subject {
            let rule = format!(
                "a {} tool {} subject argument",
                kind.as_str(),
                needs(has_subject)
            );
            return refuse(&format!("{at}.subject"), &rule);
        }
        if let Some(subject) = &money.subject
            && subject.prefix.is_some() == subject.integer
        {
            let rule = "give exactly one of prefix (ids are that prefix and letters or digits) or integer: true";
            return refuse(&format!("{at}.subject"), rule);
        }
        if let Some(SubjectArg {
            prefix: Some(prefix),
            ..
        }) = &money.subject
            && prefix.is_empty()
        {
            return refuse(
                &format!("{at}.subject.prefix"),
                "must not be empty: the prefix is how a subject id is recognised",
            );
        }
        if money.payee.is_some() != kind.pays_a_payee() {
            let rule = format!(
                "a {} tool {} payee argument",
                kind.as_str(),
                needs(kind.pays_a_payee())
            );
            return refuse(&format!("{at}.payee"), &rule);
        }
        if money.amount.optional && kind != ActionKind::ScheduledUpdate {
            return refuse(
                &format!("{at}.amount.optional"),
                "only an update of a scheduled transfer may keep its amount",
            );
        }
        let read = match kind {
            ActionKind::Refund => self
                .referent
                .payment
                .is_some()
                .then_some(())
                .ok_or("payment"),
            ActionKind::ScheduledUpdate => self
                .referent
                .scheduled
                .is_some()
                .then_some(())
                .ok_or("scheduled"),
            _ => self
                .referent
                .balance
                .is_some()
                .then_some(())
                .ok_or("balance"),
        };
        if let Err(read) = read {
            let rule = format!("a {} tool needs the {read} read", kind.as_str());
            return refuse(&format!("referent.{read}"), &rule);
        }
        Ok(())
    }

    /// A stamped rail lists every kind it moves; an unstamped one lists none (nothing in a list
    /// could be matched to a call).
    fn check_lists(&self) -> Result<(), ProfileError> {
        for (kind, list) in &self.lists {
            let at = format!("lists.{}", kind.as_str());
            if self.stamp.is_none() {
                return refuse(
                    &at,
                    "a rail without a stamp cannot reconcile by listing: remove it",
                );
            }
            if !self.has_kind(*kind) {
                return refuse(&at, "no money tool has this kind");
            }
            if !(1..=PAGE_SIZE_MAX).contains(&list.count.size) {
                return refuse(
                    &format!("{at}.count.size"),
                    "must be 1 to 1000 (the page a reconcile pass holds)",
                );
            }
        }
        if self.stamp.is_some()
            && let Some(money) = self
                .money
                .iter()
                .find(|m| !self.lists.contains_key(&m.kind))
        {
            let rule = format!(
                "a stamped rail must say how {} entities are listed",
                money.kind.as_str()
            );
            return refuse(&format!("lists.{}", money.kind.as_str()), &rule);
        }
        Ok(())
    }

    /// The arguments Interlock reads or writes on one tool must be distinct: an amount that is
    /// also the receipt would be overwritten by the stamp.
    fn check_args(&self, at: &str, money: &crate::MoneyTool) -> Result<(), ProfileError> {
        let mut used = vec![("amount.arg", money.amount.arg.as_str())];
        if let Some(stamp) = &self.stamp {
            used.push(("stamp.notes", stamp.notes_arg.as_str()));
        }
        if let Some(subject) = &money.subject {
            used.push(("subject.arg", subject.arg.as_str()));
        }
        if let Some(payee) = &money.payee {
            used.push(("payee", payee.as_str()));
        }
        if let Some(receipt) = self.receipt().find(|r| r.kinds.contains(&money.kind)) {
            used.push(("stamp.receipt.arg", receipt.arg.as_str()));
        }
        used.extend(money.false_only.iter().map(|f| ("false_only", f.as_str())));
        let mut seen = BTreeSet::new();
        for (field, arg) in used {
            if arg.is_empty() || !seen.insert(arg) {
                let rule = format!("{arg:?} is empty or already used by another role");
                return refuse(&format!("{at}.{field}"), &rule);
            }
        }
        Ok(())
    }

    fn has_kind(&self, kind: ActionKind) -> bool {
        self.money.iter().any(|m| m.kind == kind)
    }
}

fn refuse(path: &str, rule: &str) -> Result<(), ProfileError> {
    Err(ProfileError::Rule {
        path: path.to_owned(),
        rule: rule.to_owned(),
    })
}

fn needs(yes: bool) -> &'static str {
    if yes { "needs a" } else { "takes no" }
}

fn check_encoding(path: &str, encoding: AmountEncoding) -> Result<(), ProfileError> {
    match encoding {
        AmountEncoding::DecimalMajor(currency) if currency.minor_exponent().is_none() => refuse(
            path,
            "decimal amounts need an ISO 4217 currency whose minor unit is known",
        ),
        _ => Ok(()),
    }
}
