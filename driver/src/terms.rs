//! The rail's entity judged against the intent: did the money move as a human authorised it?
//!
//! A stamped entity proves *that* our call applied, not *how*. A rail (or a profile mapping the
//! wrong argument) can move another amount, in another currency, on another referent. Such an
//! entity is not a clean success: the machine quarantines the intent with the entity recorded
//! (so it is never retried), the agent is told, and the windows count what actually moved.

use crate::rail::{EntityTerms, RailCall};
use interlock_spec::money::Minor;

/// What the entity did, set against what was authorised.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Judgement {
    /// Each way the entity differs from the authorised call, in words, with both figures.
    pub differences: Vec<String>,
    /// The amount the entity moved, when it differs from the authorised one in the same
    /// currency: what the windows and budgets count instead of the authorised amount.
    pub moved: Option<Minor>,
}

impl Judgement {
    /// The entity is exactly what was authorised (as far as its terms are stated).
    pub fn as_authorised(&self) -> bool {
        self.differences.is_empty()
    }

    /// One sentence for the operator, the audit record and the agent.
    pub fn sentence(&self, entity_id: &str) -> String {
        format!(
            "the rail's entity {entity_id} carries this intent's stamp but is not what was authorised: {}",
            self.differences.join("; ")
        )
    }
}

/// Sets `terms` against `call`. Only stated terms are compared; an unreadable one is a difference.
pub fn judge(call: &RailCall, terms: &EntityTerms) -> Judgement {
    let mut differences = Vec::new();
    let mut moved = None;
    if let Some(why) = &terms.unreadable {
        differences.push(format!("its terms could not be read ({why})"));
    }
    let same_currency = terms.currency.is_none_or(|c| c == call.currency);
    if !same_currency {
        let stated = terms.currency.map(|c| c.to_string()).unwrap_or_default();
        differences.push(format!(
            "currency {stated} where {} was authorised",
            call.currency
        ));
    }
    if let Some(amount) = terms.amount
        && amount != call.amount
    {
        differences.push(format!(
            "amount {} minor units where {} {} was authorised",
            amount.get(),
            call.amount.get(),
            call.currency
        ));
        if same_currency {
            moved = Some(amount);
        }
    }
    if let Some(subject) = &terms.subject_id
        && *subject != call.subject_id
    {
        differences.push(format!(
            "subject {subject} where {} was authorised",
            call.subject_id
        ));
    }
    Judgement { differences, moved }
}

#[cfg(test)]
mod tests {
    use super::*;
    use interlock_spec::action::ActionKind;
    use interlock_spec::ids::{Sik, ToolName};
    use interlock_spec::money::Currency;

    fn call() -> RailCall {
        RailCall {
            tool: ToolName::parse("create_refund").unwrap(),
            kind: ActionKind::Refund,
            sik: Sik::parse(&"A".repeat(32)).unwrap(),
            subject_id: "pay_1".into(),
            amount: Minor::new(500).unwrap(),
            currency: Currency::parse("INR").unwrap(),
            payee: None,
            passthrough: Default::default(),
        }
    }

    fn terms(amount: u64, currency: &str, subject: &str) -> EntityTerms {
        EntityTerms {
            amount: Some(Minor::new(amount).unwrap()),
            currency: Some(Currency::parse(currency).unwrap()),
            subject_id: Some(subject.into()),
            unreadable: None,
        }
    }

    #[test]
    fn the_authorised_terms_and_unstated_terms_pass() {
        assert!(judge(&call(), &terms(500, "INR", "pay_1")).as_authorised());
        assert!(judge(&call(), &EntityTerms::default()).as_authorised());
    }

    #[test]
    fn each_difference_is_named_with_both_figures() {
        let more = judge(&call(), &terms(600, "INR", "pay_1"));
        assert_eq!(more.moved, Some(Minor::new(600).unwrap()));
        assert_eq!(
            more.differences,
            ["amount 600 minor units where 500 INR was authorised"]
        );
        let elsewhere = judge(&call(), &terms(500, "USD", "pay_2"));
        assert_eq!(elsewhere.moved, None);
        assert_eq!(elsewhere.differences.len(), 2, "{elsewhere:?}");
        assert!(elsewhere.differences[0].contains("USD where INR"));
        assert!(elsewhere.differences[1].contains("pay_2 where pay_1"));
        let unread = EntityTerms {
            unreadable: Some("amount is \"5.x\"".into()),
            ..EntityTerms::default()
        };
        assert!(!judge(&call(), &unread).as_authorised());
    }
}
