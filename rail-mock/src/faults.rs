//! Fault profiles: `--faults P[,P…]`, each optionally limited to chosen call numbers.
//!
//! Calls are numbered per [`CallClass`], from 1, by counters persisted in the journal, so a
//! restarted mock continues the numbering and a scenario replays identically. A profile without
//! an `@` spec hits every call of the classes it affects; `@N` only call N, `@N-M` calls N to M,
//! `@N+` call N and every later one.

use std::fmt;

/// The largest `read_lag=MS` and `slow=MS`: one hour.
pub const FAULT_MS_MAX: u64 = 3_600_000;
/// The largest `page_size=N` (Razorpay's own largest page).
pub const PAGE_SIZE_MAX: u32 = 100;
/// The most profiles one `--faults` may list.
pub const FAULT_RULES_MAX: usize = 32;

/// The classes calls are numbered in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CallClass {
    /// `create_refund`, `create_instant_settlement`.
    Money,
    /// `fetch_multiple_refunds_for_payment`, `fetch_all_refunds`, `fetch_all_instant_settlements`.
    List,
    /// Every other tool (`fetch_payment`, `fetch_refund`, `fetch_balance`, …).
    Read,
}

/// Which call numbers a profile hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallSpec {
    /// No `@`: every call.
    Every,
    /// `@N`
    Only(u64),
    /// `@N-M`, inclusive.
    Range(u64, u64),
    /// `@N+`
    From(u64),
}

impl CallSpec {
    /// Whether call `n` is hit.
    pub fn hits(self, n: u64) -> bool {
        match self {
            CallSpec::Every => true,
            CallSpec::Only(k) => n == k,
            CallSpec::Range(a, b) => (a..=b).contains(&n),
            CallSpec::From(a) => n >= a,
        }
    }
}

/// What a money call does when a fault hits it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyFault {
    /// Commit, then never answer.
    TimeoutAfterApply,
    /// Never answer; nothing applied.
    TimeoutBeforeApply,
    /// Commit, then answer SERVER_ERROR.
    Http5xxApplied,
    /// Answer SERVER_ERROR; nothing applied.
    Http5xxNotApplied,
    /// Commit, then exit the process without answering.
    ConnReset,
    /// Commit, then answer with the entity committed just before this one.
    DupResponse,
    /// Commit one minor unit less than asked (a rail, or a profile mapping the wrong argument,
    /// that moves other money than authorised), then answer with that entity.
    ShortApply,
    /// As `ShortApply`, then never answer: the reconciler finds the short entity.
    ShortApplyTimeout,
}

impl ApplyFault {
    /// The amount this fault commits for a request of `asked` minor units.
    pub fn moved(self, asked: i64) -> i64 {
        match self {
            ApplyFault::ShortApply | ApplyFault::ShortApplyTimeout if asked > 1 => asked - 1,
            _ => asked,
        }
    }
}

/// One profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// A money-call fault.
    Apply(ApplyFault),
    /// `read_lag=MS`: list calls hide entities younger than MS.
    ReadLag(u64),
    /// List calls, `fetch_refund` and `fetch_instant_settlement_with_id` fail with GATEWAY_ERROR.
    Partition,
    /// `page_size=N`: lists return at most N items per page.
    PageSize(u32),
    /// Lists ordered oldest first.
    OldestFirst,
    /// `slow=MS`: every call sleeps MS first.
    Slow(u64),
}

/// One `--faults` item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultRule {
    /// The profile.
    pub fault: Fault,
    /// The calls it hits.
    pub calls: CallSpec,
}

/// The faults that hit one call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallFaults {
    /// Sleep this long before working.
    pub slow_ms: Option<u64>,
    /// The money-call fault (the first listed wins).
    pub apply: Option<ApplyFault>,
    /// Fail with GATEWAY_ERROR.
    pub partition: bool,
    /// Hide entities younger than this.
    pub read_lag_ms: Option<u64>,
    /// Cap the page.
    pub page_size: Option<u32>,
    /// Reverse the order.
    pub oldest_first: bool,
}

/// The parsed `--faults`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultPlan {
    /// The profiles, in the order given.
    pub rules: Vec<FaultRule>,
}

/// Every profile name, for messages and docs.
pub const PROFILE_NAMES: [&str; 14] = [
    "none",
    "timeout_after_apply",
    "timeout_before_apply",
    "http_5xx_applied",
    "http_5xx_not_applied",
    "conn_reset",
    "dup_response",
    "short_apply",
    "short_apply_timeout",
    "read_lag=MS",
    "partition",
    "page_size=N",
    "oldest_first",
    "slow=MS",
];

/// A `--faults` value that cannot be parsed; the message names the item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultParseError(pub String);

impl fmt::Display for FaultParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "--faults: {}", self.0)
    }
}

impl std::error::Error for FaultParseError {}

fn parse_number(item: &str, what: &str, text: &str) -> Result<u64, FaultParseError> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(FaultParseError(format!(
            "{item:?}: {what} must be a decimal integer, got {text:?}"
        )));
    }
    text.parse::<u64>()
        .map_err(|_| FaultParseError(format!("{item:?}: {what} {text:?} is too large")))
}

fn parse_spec(item: &str, spec: &str) -> Result<CallSpec, FaultParseError> {
    let call = |text: &str| -> Result<u64, FaultParseError> {
        let n = parse_number(item, "a call number", text)?;
        if n == 0 {
            return Err(FaultParseError(format!(
                "{item:?}: call numbers start at 1"
            )));
        }
        Ok(n)
    };
    if let Some(start) = spec.strip_suffix('+') {
        return Ok(CallSpec::From(call(start)?));
    }
    if let Some((a, b)) = spec.split_once('-') {
        let (a, b) = (call(a)?, call(b)?);
        if b < a {
            return Err(FaultParseError(format!(
                "{item:?}: the range @{a}-{b} ends before it starts"
            )));
        }
        return Ok(CallSpec::Range(a, b));
    }
    Ok(CallSpec::Only(call(spec)?))
}

impl FaultPlan {
    /// Parse `P[,P…]` where `P` is `NAME[=PARAM][@N|@N-M|@N+]`.
    pub fn parse(text: &str) -> Result<FaultPlan, FaultParseError> {
        let mut rules = Vec::new();
        for raw in text.split(',') {
            let item = raw.trim();
            if item.is_empty() {
                return Err(FaultParseError(format!("empty profile in {text:?}")));
            }
            let (body, calls) = match item.split_once('@') {
                Some((body, spec)) => (body, parse_spec(item, spec)?),
                None => (item, CallSpec::Every),
            };
            let (name, param) = match body.split_once('=') {
                Some((name, param)) => (name, Some(param)),
                None => (body, None),
            };
            let no_param = |fault: Fault| -> Result<Option<Fault>, FaultParseError> {
                match param {
                    None => Ok(Some(fault)),
                    Some(_) => Err(FaultParseError(format!(
                        "{item:?}: {name} takes no parameter"
                    ))),
                }
            };
            let ms = |what: &str| -> Result<u64, FaultParseError> {
                let Some(param) = param else {
                    return Err(FaultParseError(format!(
                        "{item:?}: {name} needs a parameter: {name}=MS"
                    )));
                };
                let v = parse_number(item, what, param)?;
                if v > FAULT_MS_MAX {
                    return Err(FaultParseError(format!(
                        "{item:?}: {v} ms is above the limit of {FAULT_MS_MAX}"
                    )));
                }
                Ok(v)
            };
            let fault = match name {
                "none" => {
                    if param.is_some() || calls != CallSpec::Every {
                        return Err(FaultParseError(format!(
                            "{item:?}: none takes no parameter and no @ spec"
                        )));
                    }
                    None
                }
                "timeout_after_apply" => no_param(Fault::Apply(ApplyFault::TimeoutAfterApply))?,
                "timeout_before_apply" => no_param(Fault::Apply(ApplyFault::TimeoutBeforeApply))?,
                "http_5xx_applied" => no_param(Fault::Apply(ApplyFault::Http5xxApplied))?,
                "http_5xx_not_applied" => no_param(Fault::Apply(ApplyFault::Http5xxNotApplied))?,
                "conn_reset" => no_param(Fault::Apply(ApplyFault::ConnReset))?,
                "dup_response" => no_param(Fault::Apply(ApplyFault::DupResponse))?,
                "short_apply" => no_param(Fault::Apply(ApplyFault::ShortApply))?,
                "short_apply_timeout" => no_param(Fault::Apply(ApplyFault::ShortApplyTimeout))?,
                "partition" => no_param(Fault::Partition)?,
                "oldest_first" => no_param(Fault::OldestFirst)?,
                "read_lag" => Some(Fault::ReadLag(ms("the lag")?)),
                "slow" => Some(Fault::Slow(ms("the delay")?)),
                "page_size" => {
                    let Some(param) = param else {
                        return Err(FaultParseError(format!(
                            "{item:?}: page_size needs a parameter: page_size=N"
                        )));
                    };
                    let n = parse_number(item, "the page size", param)?;
                    if n == 0 || n > u64::from(PAGE_SIZE_MAX) {
                        return Err(FaultParseError(format!(
                            "{item:?}: the page size must be from 1 to {PAGE_SIZE_MAX}"
                        )));
                    }
                    // n ≤ PAGE_SIZE_MAX, so it fits.
                    Some(Fault::PageSize(u32::try_from(n).unwrap_or(PAGE_SIZE_MAX)))
                }
                _ => {
                    return Err(FaultParseError(format!(
                        "unknown fault profile {name:?} in {item:?} (known: {})",
                        PROFILE_NAMES.join(", ")
                    )));
                }
            };
            if let Some(fault) = fault {
                rules.push(FaultRule { fault, calls });
            }
            if rules.len() > FAULT_RULES_MAX {
                return Err(FaultParseError(format!(
                    "more than {FAULT_RULES_MAX} profiles"
                )));
            }
        }
        Ok(FaultPlan { rules })
    }

    /// The faults that hit call number `n` of `class`. Apply-faults only hit money calls,
    /// list-faults only list calls, `partition` list and read calls (the server applies it only
    /// to the reads that reconciliation uses), `slow` every class.
    pub fn for_call(&self, class: CallClass, n: u64) -> CallFaults {
        let mut out = CallFaults::default();
        for rule in self.rules.iter().filter(|r| r.calls.hits(n)) {
            match (rule.fault, class) {
                (Fault::Slow(ms), _) => {
                    out.slow_ms.get_or_insert(ms);
                }
                (Fault::Apply(f), CallClass::Money) => {
                    out.apply.get_or_insert(f);
                }
                (Fault::Partition, CallClass::List | CallClass::Read) => out.partition = true,
                (Fault::ReadLag(ms), CallClass::List) => {
                    out.read_lag_ms.get_or_insert(ms);
                }
                (Fault::PageSize(n), CallClass::List) => {
                    out.page_size.get_or_insert(n);
                }
                (Fault::OldestFirst, CallClass::List) => out.oldest_first = true,
                _ => {}
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_profile_and_spec() {
        let plan = FaultPlan::parse(
            "none,timeout_after_apply@2,http_5xx_not_applied@3-4,conn_reset@5+,read_lag=250,page_size=3,slow=10@1",
        )
        .expect("parses");
        assert_eq!(plan.rules.len(), 6);
        let c = plan.for_call(CallClass::Money, 2);
        assert_eq!(c.apply, Some(ApplyFault::TimeoutAfterApply));
        assert_eq!(c.read_lag_ms, None);
        assert_eq!(
            plan.for_call(CallClass::Money, 4).apply,
            Some(ApplyFault::Http5xxNotApplied)
        );
        assert_eq!(
            plan.for_call(CallClass::Money, 9).apply,
            Some(ApplyFault::ConnReset)
        );
        assert_eq!(plan.for_call(CallClass::Money, 1).apply, None);
        assert_eq!(plan.for_call(CallClass::Money, 1).slow_ms, Some(10));
        let l = plan.for_call(CallClass::List, 7);
        assert_eq!(
            (l.read_lag_ms, l.page_size, l.apply),
            (Some(250), Some(3), None)
        );
    }

    #[test]
    fn bad_items_are_named() {
        for (text, needle) in [
            ("bogus", "unknown fault profile \"bogus\""),
            ("conn_reset@0", "call numbers start at 1"),
            ("conn_reset@5-3", "ends before it starts"),
            ("conn_reset@x", "must be a decimal integer"),
            ("read_lag", "needs a parameter"),
            ("read_lag=-5", "must be a decimal integer"),
            ("page_size=0", "from 1 to 100"),
            ("partition=3", "takes no parameter"),
            ("slow=99999999", "above the limit"),
            ("conn_reset,,partition", "empty profile"),
        ] {
            let err = FaultPlan::parse(text).unwrap_err().to_string();
            assert!(err.contains(needle), "{text}: {err}");
            assert!(!err.contains('\n'), "{err}");
        }
    }
}
