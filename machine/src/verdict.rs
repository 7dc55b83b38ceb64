//! The verdict lattice of the gate ladder: `BLOCK < HOLD < ALLOW`, combined by meet (the weakest
//! verdict wins), and the advisory verdict a model-driven gate may return, which has no `ALLOW`.

use serde::{Deserialize, Serialize};

/// A deterministic gate's verdict. The derived order is the lattice order: `Block < Hold < Allow`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Verdict {
    /// Refuse; absorbs every other verdict.
    Block,
    /// Ask a human.
    Hold,
    /// Proceed.
    Allow,
}

impl Verdict {
    /// Every verdict, weakest first.
    pub const ALL: [Verdict; 3] = [Verdict::Block, Verdict::Hold, Verdict::Allow];

    /// The verdict's name as the ledger and the wire write it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Verdict::Block => "BLOCK",
            Verdict::Hold => "HOLD",
            Verdict::Allow => "ALLOW",
        }
    }

    /// The verdict [`Verdict::as_str`] names, or `None`.
    pub fn parse(text: &str) -> Option<Verdict> {
        Verdict::ALL.into_iter().find(|v| v.as_str() == text)
    }

    /// The greatest lower bound of two verdicts.
    pub fn meet(self, other: Verdict) -> Verdict {
        self.min(other)
    }

    /// The meet of a ladder's verdicts. An empty ladder blocks: no gate ran, so nothing was judged.
    pub fn meet_all(verdicts: impl IntoIterator<Item = Verdict>) -> Verdict {
        let mut iter = verdicts.into_iter();
        match iter.next() {
            None => Verdict::Block,
            Some(first) => iter.fold(first, Verdict::meet),
        }
    }
}

/// What an advisory (model-driven) gate may say. There is no `Allow`: the strongest thing a
/// confused or injected model can do is fail to object, which leaves the deterministic verdict as it
/// was. A model cannot express an upgrade, and this does not compile:
///
/// ```compile_fail
/// use interlock_machine::AdvisoryVerdict;
/// let upgrade = AdvisoryVerdict::Allow;
/// ```
///
/// Nor can an advisory verdict be turned into `Allow` by conversion; the only way in is `From`:
///
/// ```
/// use interlock_machine::{AdvisoryVerdict, Verdict};
/// assert_eq!(Verdict::Allow.meet(AdvisoryVerdict::Hold.into()), Verdict::Hold);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AdvisoryVerdict {
    /// Ask a human.
    Hold,
    /// Refuse.
    Block,
}

impl From<AdvisoryVerdict> for Verdict {
    fn from(advisory: AdvisoryVerdict) -> Verdict {
        match advisory {
            AdvisoryVerdict::Hold => Verdict::Hold,
            AdvisoryVerdict::Block => Verdict::Block,
        }
    }
}

impl Verdict {
    /// Folds an optional advisory objection into a deterministic verdict; never raises it.
    pub fn with_advice(self, advice: Option<AdvisoryVerdict>) -> Verdict {
        match advice {
            None => self,
            Some(advisory) => self.meet(advisory.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Verdict; 3] = Verdict::ALL;

    #[test]
    fn names_are_the_serialized_names_and_parse_back() {
        for verdict in ALL {
            let serialized = serde_json::to_value(verdict).unwrap();
            assert_eq!(serialized, verdict.as_str());
            assert_eq!(Verdict::parse(verdict.as_str()), Some(verdict));
        }
        assert_eq!(Verdict::parse("allow"), None);
    }

    #[test]
    fn meet_is_a_lattice_meet() {
        for a in ALL {
            assert_eq!(a.meet(a), a, "idempotent");
            assert_eq!(a.meet(Verdict::Block), Verdict::Block, "block absorbs");
            assert_eq!(a.meet(Verdict::Allow), a, "allow is the identity");
            for b in ALL {
                assert_eq!(a.meet(b), b.meet(a), "commutative");
                assert!(a.meet(b) <= a && a.meet(b) <= b, "lower bound");
                for c in ALL {
                    assert_eq!(a.meet(b).meet(c), a.meet(b.meet(c)), "associative");
                }
            }
        }
    }

    #[test]
    fn ladder_meet_and_empty_ladder() {
        assert_eq!(
            Verdict::meet_all([Verdict::Allow, Verdict::Hold, Verdict::Allow]),
            Verdict::Hold
        );
        assert_eq!(
            Verdict::meet_all([Verdict::Allow, Verdict::Block, Verdict::Hold]),
            Verdict::Block
        );
        assert_eq!(Verdict::meet_all([Verdict::Allow]), Verdict::Allow);
        assert_eq!(Verdict::meet_all([]), Verdict::Block);
    }

    #[test]
    fn advice_never_upgrades() {
        for base in ALL {
            for advice in [
                None,
                Some(AdvisoryVerdict::Hold),
                Some(AdvisoryVerdict::Block),
            ] {
                assert!(base.with_advice(advice) <= base);
            }
        }
        assert_eq!(
            Verdict::Block.with_advice(Some(AdvisoryVerdict::Hold)),
            Verdict::Block
        );
    }
}
