//! A profile file: strict YAML (unknown fields, duplicate keys and merge keys refused, the
//! mandate's budgets), then the rules no schema can say, each refusal naming its path.

use crate::Profile;
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
        let refuse = |path: String, rule: &str| {
            Err(ProfileError::Rule {
                path,
                rule: rule.to_owned(),
            })
        };
        if self.name.trim().is_empty() {
            return refuse("profile".into(), "must name the profile");
        }
        if self.money.is_empty() || self.money.len() > MONEY_TOOLS_MAX {
            return refuse("money".into(), "must list 1 to 32 money tools");
        }
        let mut names = BTreeSet::new();
        for (i, money) in self.money.iter().enumerate() {
            let at = format!("money[{i}]");
            if !names.insert(money.tool.as_str()) {
                return refuse(format!("{at}.tool"), "names a tool listed twice");
            }
            self.check_args(&at, money)?;
            if let AmountEncoding::DecimalMajor(currency) = money.amount.encoding
                && currency.minor_exponent().is_none()
            {
                return refuse(
                    format!("{at}.amount.encoding"),
                    "decimal amounts need an ISO 4217 currency whose minor unit is known",
                );
            }
        }
        if let Some(receipt) = &self.stamp.receipt
            && let Some(kind) = receipt.kinds.iter().find(|k| !self.has_kind(**k))
        {
            let rule = format!("{} is not the kind of any money tool", kind.as_str());
            return refuse("stamp.receipt.kinds".into(), &rule);
        }
        for (kind, list) in [
            ("REFUND", &self.lists.refund),
            ("SETTLEMENT", &self.lists.settlement),
        ] {
            if !(1..=PAGE_SIZE_MAX).contains(&list.count.size) {
                return refuse(
                    format!("lists.{kind}.count.size"),
                    "must be 1 to 1000 (the page a reconcile pass holds)",
                );
            }
        }
        if self.rejected_marker.is_empty() {
            // An empty marker is in every error: every error would read as "nothing moved".
            return refuse("rejected_marker".into(), "must not be empty");
        }
        Ok(())
    }

    /// The arguments Interlock reads or writes on one tool must be distinct: an amount that is
    /// also the receipt would be overwritten by the stamp.
    fn check_args(&self, at: &str, money: &crate::MoneyTool) -> Result<(), ProfileError> {
        let mut used = vec![("amount.arg", money.amount.arg.as_str())];
        used.push(("stamp.notes", self.stamp.notes_arg.as_str()));
        if let Some(subject) = &money.subject {
            used.push(("subject.arg", subject.arg.as_str()));
            if subject.prefix.is_empty() {
                return Err(ProfileError::Rule {
                    path: format!("{at}.subject.prefix"),
                    rule: "must not be empty: the prefix is how a subject id is recognised".into(),
                });
            }
        }
        if let Some(receipt) = &self.stamp.receipt
            && receipt.kinds.contains(&money.kind)
        {
            used.push(("stamp.receipt.arg", receipt.arg.as_str()));
        }
        used.extend(money.false_only.iter().map(|f| ("false_only", f.as_str())));
        let mut seen = BTreeSet::new();
        for (field, arg) in used {
            if arg.is_empty() || !seen.insert(arg) {
                return Err(ProfileError::Rule {
                    path: format!("{at}.{field}"),
                    rule: format!("{arg:?} is empty or already used by another role"),
                });
            }
        }
        Ok(())
    }

    fn has_kind(&self, kind: ActionKind) -> bool {
        self.money.iter().any(|m| m.kind == kind)
    }
}
