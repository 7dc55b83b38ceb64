//! A reconcile pass as a pure fold over the pages the rail returns. The engine feeds it pages; the
//! pass decides which event the pages prove. The three reconciler traps are closed here, once:
//! absence on page one is not absence, a reading before the rail's lag elapsed proves nothing, and
//! an amount is not an identity (only the stamp matches). An entity's terms (amount, currency,
//! subject) are judged by the driver, which knows the intent; the pass only carries its verdict.

use crate::state::{ENTITY_ID_LENGTH_MAX, EntityRef, Event};
use interlock_spec::ids::Sik;

/// Pages one pass may read before it gives up as inconclusive. Bounds the loop; a rail with more
/// pages of entities for one subject than this is quarantined rather than read forever.
pub const RECONCILE_PAGES_MAX: u32 = 100;

/// One pass over the rail's list for one intent.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReconcilePass {
    sik: Sik,
    attempt_seq: u32,
    lag_elapsed: bool,
    pages_read: u32,
    matches: Vec<(String, bool)>,
    exhausted: bool,
    failed: bool,
}

/// Whether the pass wants another page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassProgress {
    /// Fetch the next page.
    NextPage,
    /// Stop reading and call [`ReconcilePass::conclude`].
    Conclude,
}

impl ReconcilePass {
    /// Starts a pass for attempt `attempt_seq` of `sik` (the attempt of the `RunReconcile`
    /// effect): its conclusion cannot settle any later attempt. `lag_elapsed` says the reading
    /// begins at least [`crate::RECONCILE_MIN_DELAY_MS`] after the attempt ended, by the engine's
    /// clock.
    pub fn new(sik: Sik, attempt_seq: u32, lag_elapsed: bool) -> ReconcilePass {
        ReconcilePass {
            sik,
            attempt_seq,
            lag_elapsed,
            pages_read: 0,
            matches: Vec::new(),
            exhausted: false,
            failed: false,
        }
    }

    /// Takes one page: each entity with whether its terms are the ones authorised. `is_last` is
    /// the rail's own word that no page follows (for count/skip lists: fewer items than asked
    /// for).
    pub fn observe_page(&mut self, entities: &[(EntityRef, bool)], is_last: bool) -> PassProgress {
        assert!(
            !self.exhausted && !self.failed,
            "page observed after the pass ended"
        );
        self.pages_read += 1;
        for (entity, as_authorised) in entities {
            if entity.stamp.as_ref() != Some(&self.sik) {
                continue;
            }
            // One entity listed twice with two verdicts is judged by the worse.
            match self.matches.iter_mut().find(|(id, _)| *id == entity.id) {
                Some((_, verdict)) => *verdict &= *as_authorised,
                None => self.matches.push((entity.id.clone(), *as_authorised)),
            }
        }
        self.exhausted = is_last;
        if is_last || self.pages_read >= RECONCILE_PAGES_MAX {
            PassProgress::Conclude
        } else {
            PassProgress::NextPage
        }
    }

    /// The ids of the entities of ours the pass has seen, in the order first seen.
    pub fn matched(&self) -> impl Iterator<Item = &str> {
        self.matches.iter().map(|(id, _)| id.as_str())
    }

    /// A list call failed (partition, 5xx): the pass can prove nothing.
    pub fn list_failed(&mut self) {
        self.failed = true;
    }

    /// The attempt this pass is about.
    pub fn attempt_seq(&self) -> u32 {
        self.attempt_seq
    }

    /// Whether the reading began after the rail's lag had passed.
    pub fn lag_elapsed(&self) -> bool {
        self.lag_elapsed
    }

    /// Pages read so far.
    pub fn pages_read(&self) -> u32 {
        self.pages_read
    }

    /// The event these pages prove. A match anywhere wins (an entity with our stamp exists, whatever
    /// else failed); absence needs every page and a settled rail; two matches mean money moved twice
    /// already, which no event can mend, so the intent is quarantined for an operator with the
    /// first entity recorded (as one whose terms differ), which no operator's word can un-move.
    pub fn conclude(self) -> Event {
        match self.matches.as_slice() {
            [(one, as_authorised)] => Event::ReconcileFoundApplied {
                entity: EntityRef {
                    id: one.clone(),
                    stamp: Some(self.sik),
                },
                attempt_seq: self.attempt_seq,
                as_authorised: *as_authorised,
            },
            [] if self.exhausted && self.lag_elapsed && !self.failed => {
                Event::ReconcileConfirmedAbsent {
                    attempt_seq: self.attempt_seq,
                    pagination_exhausted: true,
                    lag_elapsed: true,
                }
            }
            [] => Event::ReconcileInconclusive {
                attempt_seq: self.attempt_seq,
            },
            // Two entities of ours: money moved more than once. Not a clean success, and never
            // "not applied": quarantined with one recorded, like an entity whose terms differ,
            // so that no operator's word can lead to a retry. The first id the machine can
            // record: a malformed first id must not leave the intent with nothing on record.
            [(first, _), _, ..] => {
                let recordable = |id: &&String| (1..=ENTITY_ID_LENGTH_MAX).contains(&id.len());
                let id = self
                    .matches
                    .iter()
                    .map(|(id, _)| id)
                    .find(recordable)
                    .unwrap_or(first);
                Event::ReconcileFoundApplied {
                    entity: EntityRef {
                        id: id.clone(),
                        stamp: Some(self.sik.clone()),
                    },
                    attempt_seq: self.attempt_seq,
                    as_authorised: false,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sik(c: char) -> Sik {
        Sik::parse(&c.to_string().repeat(32)).unwrap()
    }

    fn entity(id: &str, stamp: Option<Sik>) -> EntityRef {
        EntityRef {
            id: id.to_owned(),
            stamp,
        }
    }

    /// An entity listed with terms as authorised.
    fn seen(id: &str, stamp: Option<Sik>) -> (EntityRef, bool) {
        (entity(id, stamp), true)
    }

    #[test]
    fn absence_on_page_one_is_not_absence() {
        let mut pass = ReconcilePass::new(sik('A'), 1, true);
        let foreign = [seen("rfnd_1", Some(sik('B')))];
        assert_eq!(pass.observe_page(&foreign, false), PassProgress::NextPage);
        assert_eq!(
            pass.observe_page(&[seen("rfnd_2", Some(sik('A')))], true),
            PassProgress::Conclude
        );
        assert_eq!(
            pass.conclude(),
            Event::ReconcileFoundApplied {
                attempt_seq: 1,
                entity: entity("rfnd_2", Some(sik('A'))),
                as_authorised: true,
            }
        );
    }

    #[test]
    fn absence_needs_exhaustion_and_lag() {
        for (exhausted, lag, absent) in [
            (true, true, true),
            (false, true, false),
            (true, false, false),
        ] {
            let mut pass = ReconcilePass::new(sik('A'), 1, lag);
            pass.observe_page(&[seen("rfnd_1", None)], exhausted);
            let concluded = pass.conclude();
            assert_eq!(
                concluded.kind() == crate::EventKind::ReconcileConfirmedAbsent,
                absent
            );
            if !absent {
                assert_eq!(concluded, Event::ReconcileInconclusive { attempt_seq: 1 });
            }
        }
    }

    #[test]
    fn amount_is_not_identity_and_unstamped_entities_never_match() {
        let mut pass = ReconcilePass::new(sik('A'), 1, true);
        pass.observe_page(
            &[
                seen("rfnd_same_amount", None),
                seen("rfnd_x", Some(sik('C'))),
            ],
            true,
        );
        assert_eq!(
            pass.conclude().kind(),
            crate::EventKind::ReconcileConfirmedAbsent
        );
    }

    #[test]
    fn a_failed_list_proves_nothing_but_a_match_still_counts() {
        let mut pass = ReconcilePass::new(sik('A'), 1, true);
        pass.list_failed();
        assert_eq!(
            pass.conclude(),
            Event::ReconcileInconclusive { attempt_seq: 1 }
        );
        let mut pass = ReconcilePass::new(sik('A'), 1, true);
        pass.observe_page(&[seen("rfnd_9", Some(sik('A')))], false);
        pass.list_failed();
        assert_eq!(
            pass.conclude().kind(),
            crate::EventKind::ReconcileFoundApplied
        );
    }

    #[test]
    fn two_stamped_entities_quarantine_and_pages_are_bounded() {
        let mut pass = ReconcilePass::new(sik('A'), 1, true);
        pass.observe_page(
            &[
                seen("rfnd_1", Some(sik('A'))),
                seen("rfnd_2", Some(sik('A'))),
            ],
            true,
        );
        assert_eq!(
            pass.conclude(),
            Event::ReconcileFoundApplied {
                attempt_seq: 1,
                entity: entity("rfnd_1", Some(sik('A'))),
                as_authorised: false,
            },
            "two of ours: quarantined with the first recorded"
        );
        let mut pass = ReconcilePass::new(sik('A'), 1, true);
        for page in 1..RECONCILE_PAGES_MAX {
            assert_eq!(
                pass.observe_page(&[], false),
                PassProgress::NextPage,
                "page {page}"
            );
        }
        assert_eq!(pass.observe_page(&[], false), PassProgress::Conclude);
        assert_eq!(pass.pages_read(), RECONCILE_PAGES_MAX);
        assert_eq!(
            pass.conclude(),
            Event::ReconcileInconclusive { attempt_seq: 1 }
        );
    }

    #[test]
    fn an_entity_listed_twice_is_judged_by_its_worse_sighting() {
        let mut pass = ReconcilePass::new(sik('A'), 1, true);
        let ours = entity("rfnd_7", Some(sik('A')));
        pass.observe_page(&[(ours.clone(), true)], false);
        pass.observe_page(&[(ours.clone(), false)], true);
        assert_eq!(
            pass.conclude(),
            Event::ReconcileFoundApplied {
                attempt_seq: 1,
                entity: ours,
                as_authorised: false,
            }
        );
    }

    #[test]
    fn an_entity_not_as_authorised_is_found_with_that_verdict() {
        let mut pass = ReconcilePass::new(sik('A'), 1, true);
        let differing = (entity("rfnd_7", Some(sik('A'))), false);
        pass.observe_page(&[seen("rfnd_1", None), differing], true);
        assert_eq!(
            pass.conclude(),
            Event::ReconcileFoundApplied {
                attempt_seq: 1,
                entity: entity("rfnd_7", Some(sik('A'))),
                as_authorised: false,
            }
        );
    }

    #[test]
    fn two_of_ours_record_the_first_id_the_machine_can_record() {
        let mut pass = ReconcilePass::new(sik('A'), 1, true);
        let long = "x".repeat(crate::ENTITY_ID_LENGTH_MAX + 1);
        pass.observe_page(
            &[seen(&long, Some(sik('A'))), seen("rfnd_2", Some(sik('A')))],
            true,
        );
        assert_eq!(
            pass.conclude(),
            Event::ReconcileFoundApplied {
                attempt_seq: 1,
                entity: entity("rfnd_2", Some(sik('A'))),
                as_authorised: false,
            }
        );
    }
}
