//! The driver of one reconcile pass: settles an intent whose last call ended ambiguously (or was
//! refused, which is verified too) by reading the rail's lists, never by calling again.
//!
//! 1. [`PassCommand::Commit`] of `RECONCILE_STARTED` with this process's lease.
//! 2. [`PassCommand::ListPage`], page after page, into the machine's [`ReconcilePass`] (which
//!    closes the three reconciler traps), at most `RECONCILE_PAGES_MAX`.
//! 3. [`PassCommand::Commit`] of the conclusion with its finding; a conclusion the machine
//!    refuses (a stamped entity with a malformed id) is recorded as an inconclusive pass.
//! 4. [`PassCommand::Done`] with what the pass did.

use crate::config::DriverConfig;
use crate::plan::{Applied, Change, Commit, Finding, IntentKey, IntentView, LeaseChange, Refusal};
use crate::rail::{ListPage, ListQuery, PageAt, RailCall, RailError};
use crate::terms::{Judgement, judge};
use interlock_machine::{Effect, Event, EventKind, PassProgress, ReconcilePass, State};
use serde_json::json;

/// What one pass did.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PassResult {
    /// The pass ran and moved the intent to this state.
    Concluded(State),
    /// Not due yet (or not in a reconcilable state); nothing was read.
    NotDue,
    /// Another process holds the intent.
    Busy,
}

/// What the runner must do next for a pass.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
// Made and carried out once per step, never stored in bulk: boxing would only add an
// allocation to every step.
#[allow(clippy::large_enum_variant)]
pub enum PassCommand {
    /// Commit one transition; hand the result to [`Pass::handle_committed`].
    Commit(Commit),
    /// Read one page of the rail's list; hand it to [`Pass::handle_page`].
    ListPage {
        /// Which list.
        query: ListQuery,
        /// Which page.
        at: PageAt,
    },
    /// The pass is over.
    Done(PassResult),
}

/// Entities of ours whose terms differ that one pass remembers. Two of ours is already a
/// quarantine, so more than two is never needed; the bound keeps a hostile list from growing it.
pub const DIFFERING_REMEMBERED_MAX: usize = 2;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Phase {
    Starting,
    Reading(ReconcilePass),
    Concluding {
        attempt_seq: u32,
        event: Event,
        pages: u32,
        lag_elapsed: bool,
        listing: Option<RailError>,
    },
    FallingBack,
    Done,
}

/// One reconcile pass over one intent. Plain data, like a proposal.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Pass {
    key: IntentKey,
    query: ListQuery,
    /// The authorised call: what a found entity's terms are judged against.
    call: RailCall,
    /// Our entities seen with terms other than authorised, by id.
    differing: Vec<(String, Judgement)>,
    attempt_ended: Option<u64>,
    received: u32,
    phase: Phase,
    next: Option<PassCommand>,
    #[cfg(feature = "flaws")]
    flaw: Option<crate::flaw::Flaw>,
}

impl Pass {
    /// A pass over `view` at `now`, if one is due: the intent is `UNKNOWN` or `FAILED_TERMINAL`
    /// and its reconcile time has come.
    pub fn start(config: &DriverConfig, now: u64, view: &IntentView) -> Pass {
        let due = matches!(view.core.state, State::Unknown | State::FailedTerminal)
            && view.reconcile_not_before.unwrap_or(0) <= now;
        let query = ListQuery {
            kind: view.call.kind,
            subject_id: view.call.subject_id.clone(),
            sik: view.key.sik.clone(),
        };
        let mut pass = Pass {
            key: view.key.clone(),
            query,
            call: view.call.clone(),
            differing: Vec::new(),
            attempt_ended: view.attempt.as_ref().and_then(|a| a.finished_at),
            received: 0,
            phase: Phase::Starting,
            next: None,
            #[cfg(feature = "flaws")]
            flaw: None,
        };
        if !due {
            pass.finish(PassResult::NotDue);
            return pass;
        }
        let claim = Change {
            lease: LeaseChange::Claim {
                owner: config.instance_id.clone(),
                expires_at: now + config.lease_ttl_ms,
            },
            ..Change::default()
        };
        pass.next = Some(PassCommand::Commit(Commit {
            key: view.key.clone(),
            event: Event::ReconcileStarted,
            change: claim,
        }));
        pass.invariants();
        pass
    }

    /// Plants `flaw` (the model checker's mutants).
    #[cfg(feature = "flaws")]
    pub fn with_flaw(mut self, flaw: Option<crate::flaw::Flaw>) -> Pass {
        self.flaw = flaw;
        self
    }

    #[cfg(feature = "flaws")]
    fn absent_from_page_one(&self, pass: &ReconcilePass, page: &ListPage) -> bool {
        self.flaw == Some(crate::flaw::Flaw::AbsentFromPageOne)
            && pass.pages_read() == 1
            && !page
                .entities
                .iter()
                .any(|e| e.entity.stamp.as_ref() == Some(&self.key.sik))
    }

    #[cfg(feature = "flaws")]
    fn ignores_terms(&self) -> bool {
        self.flaw == Some(crate::flaw::Flaw::IgnoreTerms)
    }

    #[cfg(not(feature = "flaws"))]
    fn ignores_terms(&self) -> bool {
        false
    }

    #[cfg(not(feature = "flaws"))]
    fn absent_from_page_one(&self, _pass: &ReconcilePass, _page: &ListPage) -> bool {
        false
    }

    /// The next command, left in place.
    pub fn peek_command(&self) -> Option<&PassCommand> {
        self.next.as_ref()
    }

    /// The next command, if any.
    pub fn poll_command(&mut self) -> Option<PassCommand> {
        self.next.take()
    }

    /// Whether the pass has read its pages and not yet committed what they prove: the most
    /// dangerous moment of a pass (the chaos matrix's `during_reconcile`).
    pub fn is_concluding(&self) -> bool {
        matches!(self.phase, Phase::Concluding { .. })
    }

    /// The ledger's answer to a commit.
    pub fn handle_committed(
        &mut self,
        config: &DriverConfig,
        now: u64,
        committed: Result<Applied, Refusal>,
    ) {
        match (&self.phase, committed) {
            (Phase::Starting, Ok(applied)) => self.begin_reading(config, now, &applied),
            (Phase::Concluding { .. }, Ok(applied)) | (Phase::FallingBack, Ok(applied)) => {
                self.finish(PassResult::Concluded(applied.to.state));
            }
            (Phase::Concluding { event, .. }, Err(Refusal::Illegal(illegal)))
                if event.kind() != EventKind::ReconcileInconclusive =>
            {
                let illegal = illegal.to_string();
                self.fall_back(&illegal);
            }
            (Phase::Starting | Phase::Concluding { .. } | Phase::FallingBack, Err(_)) => {
                self.finish(PassResult::Busy);
            }
            (phase, _) => panic!("a commit's result in phase {phase:?}"),
        }
        self.invariants();
    }

    fn begin_reading(&mut self, config: &DriverConfig, now: u64, applied: &Applied) {
        let Effect::RunReconcile { attempt_seq } = applied.effect else {
            unreachable!("RECONCILE_STARTED always asks for a pass");
        };
        // Trap 2: a reading that begins before the rail's lag has passed since the attempt
        // ended proves nothing about absence.
        let lag_elapsed = self
            .attempt_ended
            .is_some_and(|ended| now.saturating_sub(ended) >= config.rail_lag_ms);
        let pass = ReconcilePass::new(self.key.sik.clone(), attempt_seq, lag_elapsed);
        self.phase = Phase::Reading(pass);
        self.ask_page(0);
    }

    fn ask_page(&mut self, page: u32) {
        self.next = Some(PassCommand::ListPage {
            query: self.query.clone(),
            at: PageAt {
                page,
                skip: self.received,
            },
        });
    }

    /// One page of the list, or why it could not be read.
    pub fn handle_page(&mut self, page: Result<ListPage, RailError>) {
        let Phase::Reading(mut pass) = std::mem::replace(&mut self.phase, Phase::Done) else {
            panic!("a page in phase {:?}", self.phase);
        };
        let listing = match page {
            Ok(found) => {
                // An offset must count what was received, never pages × the size asked for.
                let count = u32::try_from(found.entities.len()).unwrap_or(u32::MAX);
                self.received = self.received.saturating_add(count);
                let judged = self.judge_page(&found);
                let progress = pass.observe_page(&judged, found.is_last);
                if self.absent_from_page_one(&pass, &found) {
                    let attempt_seq = pass.attempt_seq();
                    self.phase = Phase::Reading(pass);
                    self.conclude_with(
                        None,
                        Event::ReconcileConfirmedAbsent {
                            attempt_seq,
                            pagination_exhausted: true,
                            lag_elapsed: true,
                        },
                    );
                    return;
                }
                if progress == PassProgress::NextPage {
                    let next = pass.pages_read();
                    self.phase = Phase::Reading(pass);
                    self.ask_page(next);
                    return;
                }
                None
            }
            Err(error) => {
                pass.list_failed();
                Some(error)
            }
        };
        let event = pass.clone().conclude();
        self.phase = Phase::Reading(pass);
        self.conclude_with(listing, event);
        self.invariants();
    }

    /// Each entity of the page with whether its terms are the authorised ones; our stamped
    /// entities that differ are remembered for the conclusion's record.
    fn judge_page(&mut self, page: &ListPage) -> Vec<(interlock_machine::EntityRef, bool)> {
        let mut judged = Vec::with_capacity(page.entities.len());
        for listed in &page.entities {
            let ours = listed.entity.stamp.as_ref() == Some(&self.key.sik);
            let judgement = judge(&self.call, &listed.terms);
            let as_authorised = !ours || judgement.as_authorised() || self.ignores_terms();
            let known = self.differing.iter().any(|(id, _)| *id == listed.entity.id);
            if !as_authorised && !known && self.differing.len() < DIFFERING_REMEMBERED_MAX {
                self.differing.push((listed.entity.id.clone(), judgement));
            }
            judged.push((listed.entity.clone(), as_authorised));
        }
        judged
    }

    fn conclude_with(&mut self, listing: Option<RailError>, mut event: Event) {
        let Phase::Reading(pass) = std::mem::replace(&mut self.phase, Phase::Done) else {
            unreachable!("concluded while reading");
        };
        let attempt_seq = pass.attempt_seq();
        let pages = pass.pages_read();
        let lag_elapsed = pass.lag_elapsed();
        // A rail that cannot list by stamp leaves nothing to retry: a human reconciles it.
        if let Some(RailError::NotReconcilable(_)) = &listing
            && event.kind() == EventKind::ReconcileInconclusive
        {
            event = Event::Quarantine;
        }
        let mut finding = finding_of(&event, attempt_seq, pages, lag_elapsed, listing.as_ref());
        let mut change = Change {
            detail: listing.as_ref().map(ToString::to_string),
            ..Change::default()
        };
        if let Event::ReconcileFoundApplied {
            entity,
            as_authorised: false,
            ..
        } = &event
        {
            let ours: Vec<&str> = pass.matched().collect();
            let mut judgement = match self.differing.iter().find(|(id, _)| *id == entity.id) {
                Some((_, judgement)) => judgement.clone(),
                None => Judgement {
                    differences: Vec::new(),
                    moved: None,
                },
            };
            // Another entity of ours on the rail too: say so, whatever its terms.
            if ours.len() >= 2 {
                judgement.differences.push(twins(&ours));
            }
            assert!(
                !judgement.as_authorised(),
                "a verdict without a judgement or a twin"
            );
            let sentence = judgement.sentence(&entity.id);
            finding.detail["terms_differ"] = json!(judgement.differences);
            let code = interlock_spec::reason::ReasonCode::RailTermsDiffer;
            change.reason = Some((code.as_str().to_owned(), sentence));
            change.moved_minor = judgement.moved.map(|m| m.get());
        }
        change.finding = Some(finding);
        self.next = Some(PassCommand::Commit(Commit {
            key: self.key.clone(),
            event: event.clone(),
            change,
        }));
        self.phase = Phase::Concluding {
            attempt_seq,
            event,
            pages,
            lag_elapsed,
            listing,
        };
    }

    /// The pages showed something the machine will not accept as proof. That is an
    /// inconclusive pass, recorded as one, not a reason to leave the intent `RECONCILING` under
    /// our lease.
    fn fall_back(&mut self, illegal: &str) {
        let Phase::Concluding {
            attempt_seq,
            event,
            pages,
            lag_elapsed,
            listing,
        } = std::mem::replace(&mut self.phase, Phase::FallingBack)
        else {
            unreachable!("falls back only from a conclusion");
        };
        let fallback = Event::ReconcileInconclusive { attempt_seq };
        let mut finding = finding_of(&fallback, attempt_seq, pages, lag_elapsed, listing.as_ref());
        finding.detail = json!({
            "event": fallback.kind().as_str(),
            "refused_conclusion": event.kind().as_str(),
            "refusal": illegal,
        });
        let change = Change {
            detail: Some(format!("the pass's conclusion was refused: {illegal}")),
            finding: Some(finding),
            ..Change::default()
        };
        self.next = Some(PassCommand::Commit(Commit {
            key: self.key.clone(),
            event: fallback,
            change,
        }));
    }

    fn finish(&mut self, result: PassResult) {
        self.phase = Phase::Done;
        self.next = Some(PassCommand::Done(result));
    }

    /// What holds between any two handlers.
    pub fn invariants(&self) {
        assert!(
            self.next.is_some(),
            "a pass always has its next command out after a handler"
        );
        assert_eq!(self.query.sik, self.key.sik, "a pass seeks its own stamp");
        if let Phase::Reading(pass) = &self.phase {
            assert!(pass.pages_read() <= interlock_machine::RECONCILE_PAGES_MAX);
        }
    }
}

/// Entity ids a twin sentence names: the rest are counted, never listed (a hostile list could
/// carry thousands, and each id is the rail's text).
pub const TWINS_NAMED_MAX: usize = 3;

/// "The rail shows N entities carrying this intent's stamp (a, b, c and N more)".
fn twins(ours: &[&str]) -> String {
    let named: Vec<String> = ours
        .iter()
        .take(TWINS_NAMED_MAX)
        .map(|id| {
            id.chars()
                .take(interlock_machine::ENTITY_ID_LENGTH_MAX)
                .collect()
        })
        .collect();
    let more = ours.len().saturating_sub(TWINS_NAMED_MAX);
    let tail = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!(
        "the rail shows {} entities carrying this intent's stamp ({}{tail}): money moved more than once",
        ours.len(),
        named.join(", ")
    )
}

fn finding_of(
    event: &Event,
    attempt_seq: u32,
    pages: u32,
    lag_elapsed: bool,
    listing: Option<&RailError>,
) -> Finding {
    let (outcome, matched, exhausted) = match event {
        Event::ReconcileFoundApplied { entity, .. } => ("APPLIED", Some(entity.id.clone()), false),
        Event::ReconcileConfirmedAbsent {
            pagination_exhausted,
            ..
        } => ("CONFIRMED_NOT_APPLIED", None, *pagination_exhausted),
        Event::Quarantine => ("QUARANTINED", None, false),
        _ => ("INCONCLUSIVE", None, false),
    };
    Finding {
        attempt_seq,
        outcome,
        pages_scanned: pages,
        pagination_exhausted: exhausted,
        lag_elapsed,
        matched_entity_id: matched,
        detail: json!({
            "event": event.kind().as_str(),
            "list_error": listing.map(ToString::to_string),
        }),
    }
}
