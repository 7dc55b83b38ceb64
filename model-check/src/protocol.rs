//! # The exactly-once protocol, as a stateright model
//!
//! One refund, proposed by an agent that retries with a fresh request id (a retry storm), handled
//! by two proxy processes that share one SQLite ledger, sent to a rail that may apply, refuse
//! (before or after applying), time out after or before applying, replay another refund's
//! response, hide young entities from its lists (read lag), fail its lists (a partition) and return
//! them a page at a time. Processes crash at any point (the volatile part of their state is lost,
//! the ledger is kept) and run boot recovery on restart, which may itself be killed; a live lease
//! holder may stall while another process takes over; the engine may set an intent aside and an
//! operator resolves it.
//!
//! Every change of the ledger's state goes through `interlock_machine::step`: the model holds no
//! copy of the rules, only the *world around them* (processes, network, rail, agent, operator).
//! A mutant swaps one piece of that world, or one edge, for a plausible bug; each one must be
//! caught by a property.
//!
//! ## What is durable, what is volatile, what is ghost
//! - durable: the intent row (`ledger`) and its audit records (the `Inserted`/`Transition` entries
//!   of `history`), written one step per action, as one SQLite transaction each;
//! - volatile: each process's [`Proc`] (what it was doing), lost on a crash;
//! - the rail: its journal (`entities`, ground truth) and the calls on the wire (`wire`);
//! - ghost: `RailCall` entries of `history`, observations for the invariants, read by nobody.
//!
//! ## The timing assumptions (ADR 0003)
//! A1: a reconcile pass starts reading only after `RECONCILE_MIN_DELAY_MS`. The model encodes what
//! the delay is *for*: [`Action::WaitLag`] is enabled only once no call of ours is still on the
//! wire, and it makes every entity visible in lists. A rail slower than that delay breaks the
//! assumption, and the proof with it; the `IgnoreLag` mutant shows what the assumption buys.
//! A2: no stall between a sender's lease re-check and its call leaving (they are one action here).
//! A3: an operator's "not applied" counts only with `lag_elapsed`, which by A1 means an empty wire.

use interlock_machine::invariants::{self, RailEntity, Record};
use interlock_machine::{
    EntityRef, Event, Illegal, IntentCore, PassProgress, ReconcilePass, State, Step, step,
};
use interlock_spec::ids::Sik;
use stateright::{Model, Property};

/// Process ids: small integers, an index into `World::procs`.
pub type ProcId = usize;
/// Rail entity ids: an index into `World::entities`.
pub type EntityId = usize;

/// Amount of the refund the agent asks for, in minor units.
pub const REFUND_MINOR: u64 = 100;
/// The payment's amount: room for the pre-existing refund and ours, not for a second of ours.
pub const PAYMENT_MINOR: u64 = 2 * REFUND_MINOR;
/// Entities per list page: the rail's own size, small so that ours lands on a later page.
pub const PAGE_SIZE: usize = 1;

/// The key of the refund the agent keeps proposing.
pub fn our_sik() -> Sik {
    Sik::parse("MODELMODELMODELMODELMODELMODEL22").expect("well-formed")
}

/// The stamp of a refund someone else made on the same payment, for the same amount.
pub fn other_sik() -> Sik {
    Sik::parse("OTHEROTHEROTHEROTHEROTHEROTHER22").expect("well-formed")
}

/// A plausible bug planted in the protocol. Each must make some property fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mutant {
    /// A timed-out intent is retried at once: `UNKNOWN → AUTHORIZED` allowed.
    UnknownToAuthorized,
    /// Reconciliation concludes absence from the first page.
    AbsentFromPageOne,
    /// Reconciliation reads the lists without waiting out the rail's lag.
    IgnoreLag,
    /// Reconciliation matches an entity by amount instead of by stamp.
    MatchByAmount,
    /// The rail call is sent before the `IN_FLIGHT` row is committed.
    CallBeforeWal,
    /// A replayed response (another refund's) is accepted as ours.
    AcceptReplay,
    /// Boot recovery and the background reconciler skip `UNKNOWN` intents (the reference's bug 1).
    ForgetUnknown,
    /// An operator clears a quarantine while a call may still land (claims the lag has passed).
    OperatorIgnoresLag,
    /// The sender does not re-check its lease just before the call leaves.
    SendWithoutRecheck,
    /// A refusal is taken as proof of absence and never verified against the rail.
    RejectionIsFinal,
    /// The reference's edge: `FAILED_TERMINAL --REOPENED--> AUTHORIZED`, no proof of absence.
    ReopenRejectedDirectly,
}

impl Mutant {
    /// Every mutant.
    pub const ALL: [Mutant; 11] = [
        Mutant::UnknownToAuthorized,
        Mutant::AbsentFromPageOne,
        Mutant::IgnoreLag,
        Mutant::MatchByAmount,
        Mutant::CallBeforeWal,
        Mutant::AcceptReplay,
        Mutant::ForgetUnknown,
        Mutant::OperatorIgnoresLag,
        Mutant::SendWithoutRecheck,
        Mutant::RejectionIsFinal,
        Mutant::ReopenRejectedDirectly,
    ];
}

/// The bounds of one exhaustive check.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Config {
    /// Proxy processes sharing the ledger.
    pub procs: usize,
    /// Times the agent proposes the refund (each with a fresh request id).
    pub proposals: u8,
    /// Process crashes, anywhere, boot recovery included.
    pub crashes: u8,
    /// Ambiguous outcomes: 5xx after or before applying, and client-side timeouts.
    pub ambiguous: u8,
    /// Replies replayed from another refund.
    pub replays: u8,
    /// Refusals by the rail (4xx), each either before applying or after (a duplicate receipt).
    pub rejections: u8,
    /// List calls that fail (a partition).
    pub list_failures: u8,
    /// Times the engine sets an `UNKNOWN` intent aside (`QUARANTINE`) for an operator.
    pub quarantines: u8,
    /// Times a live lease holder stalls past its lease and another process takes the intent over.
    pub stalls: u8,
    /// The planted bug, if any.
    pub mutant: Option<Mutant>,
}

impl Config {
    /// The configuration `cargo test` checks exhaustively: two processes, two crashes, two
    /// ambiguous outcomes, a replayed reply, a refusal, a partition that heals after two failed
    /// list calls, read lag and two pages.
    pub fn bounded() -> Config {
        Config {
            procs: 2,
            proposals: 2,
            crashes: 2,
            ambiguous: 2,
            replays: 1,
            rejections: 1,
            list_failures: 2,
            quarantines: 0,
            stalls: 0,
            mutant: None,
        }
    }

    /// A partition long enough to quarantine (every reconcile pass fails), an engine that sets an
    /// ambiguous intent aside, and an operator. Checked in `cargo test` beside
    /// [`Config::bounded`], with smaller budgets elsewhere.
    pub fn partition() -> Config {
        Config {
            crashes: 1,
            ambiguous: 1,
            replays: 0,
            rejections: 0,
            list_failures: interlock_machine::RECONCILE_INCONCLUSIVE_MAX as u8,
            quarantines: 1,
            ..Config::bounded()
        }
    }

    /// A lease holder that stalls (a GC pause, a stopped VM) while another process takes its
    /// intent over: late replies, late reconcile passes, and a sender that must re-check its lease.
    pub fn stall() -> Config {
        Config {
            crashes: 1,
            ambiguous: 1,
            replays: 0,
            list_failures: 0,
            stalls: 1,
            ..Config::bounded()
        }
    }

    /// The bounded budgets and a quarantining partition at once (`check --config large`).
    pub fn large() -> Config {
        Config {
            list_failures: interlock_machine::RECONCILE_INCONCLUSIVE_MAX as u8,
            ..Config::bounded()
        }
    }

    /// The configuration in which `mutant` can show itself, with the bug planted.
    pub fn with_mutant(mutant: Mutant) -> Config {
        let base = match mutant {
            Mutant::OperatorIgnoresLag => Config::partition(),
            Mutant::SendWithoutRecheck => Config::stall(),
            _ => Config::bounded(),
        };
        Config {
            mutant: Some(mutant),
            ..base
        }
    }
}

/// What a process is doing. Lost on a crash.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Proc {
    /// Alive, serving no agent call; its background reconciler may pick up `UNKNOWN` intents.
    Idle,
    /// Serving an agent's call; `fresh` until its first ledger write.
    Serving {
        /// The call has not yet written anything.
        fresh: bool,
    },
    /// `IN_FLIGHT` is committed; the call is about to leave (`CallBeforeWal`: it already left).
    Sending {
        /// The attempt.
        attempt_seq: u32,
    },
    /// Waiting for the rail's reply.
    Calling {
        /// The attempt.
        attempt_seq: u32,
    },
    /// Holds a reply not yet committed.
    Replied {
        /// The attempt.
        attempt_seq: u32,
        /// What came back.
        reply: Reply,
    },
    /// Running a reconcile pass; `pass` is `None` until the lag has been waited out.
    Reconciling {
        /// The attempt the pass was started for.
        attempt_seq: u32,
        /// The pass, once reading.
        pass: Option<ReconcilePass>,
        /// An agent call waits on this process (so proven absence is retried at once).
        serving: bool,
    },
    /// Killed.
    Down,
    /// Restarted; boot recovery has not finished.
    Recovering,
}

/// A reply from the rail as the process received it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reply {
    /// An entity came back: ours, or (replayed) someone else's.
    Entity(EntityId),
    /// A 4xx.
    Rejected,
    /// A 5xx or a timeout.
    Ambiguous,
}

/// A call on the wire: sent, not yet processed by the rail.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Call {
    /// Who sent it (the reply goes back there, if anyone is still waiting).
    pub from: ProcId,
    /// The attempt it carries.
    pub attempt_seq: u32,
}

/// An entity in the rail's journal.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Entity {
    /// The stamp it carries.
    pub stamp: Sik,
    /// Refunded amount.
    pub amount_minor: u64,
    /// Shown by list calls (false while the rail's read lag hides it).
    pub visible: bool,
}

/// What the rail does with a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RailOutcome {
    /// Applies and answers with the entity.
    Apply,
    /// Refuses (4xx), applying nothing.
    Reject,
    /// Applies, then answers 5xx (or never answers).
    ApplyThenAmbiguous,
    /// Answers 5xx without applying.
    AmbiguousNotApplied,
    /// Applies, but answers with a replay of another refund's response.
    ApplyThenReplay,
    /// Applies, then answers 4xx (a duplicate receipt, a rail that checks after writing).
    ApplyThenReject,
}

/// The whole world: ledger, processes, rail, agent and the fault budgets left.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct World {
    /// The durable intent row (`None` before the first proposal is recorded).
    pub ledger: Option<IntentCore>,
    /// The durable lease column: which process holds the in-flight attempt or reconcile pass.
    pub lease: Option<ProcId>,
    /// Ledger records and rail-call observations, in order.
    pub history: Vec<Record>,
    /// Each process's volatile state.
    pub procs: Vec<Proc>,
    /// The rail's journal: entity 0 is the pre-existing refund of someone else.
    pub entities: Vec<Entity>,
    /// Calls on the wire.
    pub wire: Vec<Call>,
    /// Proposals the agent will still make.
    pub proposals_left: u8,
    /// Crashes left.
    pub crashes_left: u8,
    /// Ambiguous outcomes left.
    pub ambiguous_left: u8,
    /// Replayed replies left.
    pub replays_left: u8,
    /// Rejections left.
    pub rejections_left: u8,
    /// Failing list calls left.
    pub list_failures_left: u8,
    /// Engine quarantines left.
    pub quarantines_left: u8,
    /// Stalls left.
    pub stalls_left: u8,
    /// Ghost: `step` refused a reply as not carrying our stamp.
    pub foreign_refused: bool,
    /// Ghost: `step` refused an outcome or conclusion for an earlier attempt.
    pub stale_refused: bool,
}

/// The model's actions. Each is one atomic step of one participant.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Action {
    /// The agent proposes the refund to a process (a fresh request id each time).
    Propose(ProcId),
    /// A serving process takes its next ledger step (insert, gates, attempt, reopen, answer).
    Drive(ProcId),
    /// The call leaves the process.
    Send(ProcId),
    /// The rail processes the call at this position of the wire.
    Rail(usize, RailOutcome),
    /// The process gives up waiting: ambiguous, while the call may still be on the wire.
    Timeout(ProcId),
    /// The process commits the reply it holds.
    Commit(ProcId),
    /// An idle process's background reconciler starts a pass on an `UNKNOWN` intent.
    Background(ProcId),
    /// The pass waits out the rail's lag before reading.
    WaitLag(ProcId),
    /// The pass reads its next page (and commits the conclusion when it has one).
    ReadPage(ProcId),
    /// The pass's list call fails (partition).
    ListFails(ProcId),
    /// The process is killed (SIGKILL: nothing is flushed, nothing is undone).
    Crash(ProcId),
    /// A killed process is started again.
    Restart(ProcId),
    /// Boot recovery: takes over an in-flight or reconciling intent, then serves.
    Recover(ProcId),
    /// An operator, reading the rail's dashboard, resolves a quarantined intent.
    Operator,
    /// The engine sets an `UNKNOWN` intent aside for an operator.
    Quarantine,
    /// An idle process takes over an intent whose lease holder has stalled past its lease.
    TakeOver(ProcId),
}

/// The model: a configuration.
#[derive(Debug, Clone)]
pub struct Protocol {
    /// Its bounds and mutant.
    pub config: Config,
}

impl Protocol {
    fn mutant(&self, mutant: Mutant) -> bool {
        self.config.mutant == Some(mutant)
    }

    /// `machine::step`, except for the edge a mutant adds.
    fn step(&self, core: &IntentCore, event: &Event) -> Result<Step, Illegal> {
        let blind_retry = self.mutant(Mutant::UnknownToAuthorized)
            && core.state == State::Unknown
            && *event == Event::RetryAuthorized;
        let blind_reopen = self.mutant(Mutant::ReopenRejectedDirectly)
            && core.state == State::FailedTerminal
            && *event == Event::Reopened;
        if blind_retry || blind_reopen {
            let mut next = core.clone();
            next.state = State::Authorized;
            return Ok(Step {
                next,
                effect: interlock_machine::Effect::StartAttempt,
            });
        }
        step(core, event)
    }

    /// Applies `event` to the ledger as one transaction with its audit record; `false` if refused.
    fn apply(&self, world: &mut World, event: Event) -> bool {
        self.try_apply(world, event).is_ok()
    }

    /// [`Protocol::apply`], keeping `step`'s refusal; a refusal for an earlier attempt is noted
    /// in the ghost `stale_refused`, so the model shows that guard carrying load.
    fn try_apply(&self, world: &mut World, event: Event) -> Result<(), Illegal> {
        let core = world
            .ledger
            .clone()
            .expect("only an inserted intent is stepped");
        let next = self.step(&core, &event).inspect_err(|refusal| {
            if matches!(refusal, Illegal::StaleAttempt { .. }) {
                world.stale_refused = true;
            }
        })?;
        let seq = ledger_records(&world.history) + 1;
        world.history.push(Record::Transition {
            seq,
            from: core,
            event,
            to: next.next.clone(),
            effect: next.effect,
        });
        world.ledger = Some(next.next);
        world.lease = None;
        Ok(())
    }

    /// [`Protocol::apply`] for a step that takes the lease (`ATTEMPT_STARTED`, `RECONCILE_STARTED`),
    /// written in the same transaction.
    fn apply_leased(&self, world: &mut World, event: Event, holder: ProcId) -> bool {
        let applied = self.apply(world, event);
        if applied {
            world.lease = Some(holder);
        }
        applied
    }

    /// Whether the lease holder is still alive and working on what the lease covers. Timing
    /// assumption: a live holder sends its call and times out before its lease expires (the
    /// engine re-checks the lease just before sending and keeps the call timeout under the TTL);
    /// so only a holder that crashed since (or never held) can have its lease expired.
    fn lease_is_live(&self, world: &World) -> bool {
        let (Some(holder), Some(core)) = (world.lease, world.ledger.as_ref()) else {
            return false;
        };
        match (&world.procs[holder], core.state) {
            (
                Proc::Sending { attempt_seq }
                | Proc::Calling { attempt_seq }
                | Proc::Replied { attempt_seq, .. },
                State::InFlight,
            ) => *attempt_seq == core.attempt_seq,
            (Proc::Reconciling { .. }, State::Reconciling) => true,
            _ => false,
        }
    }

    fn send(&self, world: &mut World, from: ProcId, attempt_seq: u32) {
        world.wire.push(Call { from, attempt_seq });
        world.history.push(Record::RailCall {
            sik: our_sik(),
            attempt_seq,
        });
    }
}

fn ledger_records(history: &[Record]) -> u64 {
    history
        .iter()
        .filter(|r| !matches!(r, Record::RailCall { .. }))
        .count() as u64
}

fn attempt_of(world: &World) -> u32 {
    world.ledger.as_ref().map_or(0, |core| core.attempt_seq)
}

fn state_of(world: &World) -> Option<State> {
    world.ledger.as_ref().map(|core| core.state)
}

impl World {
    /// The rail's journal as a verifier reads it.
    pub fn rail_entities(&self) -> Vec<RailEntity> {
        self.entities
            .iter()
            .enumerate()
            .map(|(id, e)| RailEntity {
                id: entity_name(id),
                stamp: Some(e.stamp.clone()),
            })
            .collect()
    }

    fn ours(&self) -> Vec<EntityId> {
        (0..self.entities.len())
            .filter(|&id| self.entities[id].stamp == our_sik())
            .collect()
    }

    /// Nothing more will happen: no participant has an action left but a crash (a crash is the
    /// environment's move, not progress, and "never unknown" must not hang on one being spent).
    pub fn quiescent(&self, model: &Protocol) -> bool {
        let mut actions = Vec::new();
        model.actions(self, &mut actions);
        actions.iter().all(|a| matches!(a, Action::Crash(_)))
    }
}

/// The rail's id for an entity.
pub fn entity_name(id: EntityId) -> String {
    format!("rfnd_{id}")
}

impl Model for Protocol {
    type State = World;
    type Action = Action;

    fn init_states(&self) -> Vec<World> {
        let c = &self.config;
        let theirs = Entity {
            stamp: other_sik(),
            amount_minor: REFUND_MINOR,
            visible: true,
        };
        vec![World {
            ledger: None,
            lease: None,
            history: Vec::new(),
            procs: vec![Proc::Idle; c.procs],
            entities: vec![theirs],
            wire: Vec::new(),
            proposals_left: c.proposals,
            crashes_left: c.crashes,
            ambiguous_left: c.ambiguous,
            replays_left: c.replays,
            rejections_left: c.rejections,
            list_failures_left: c.list_failures,
            quarantines_left: c.quarantines,
            stalls_left: c.stalls,
            foreign_refused: false,
            stale_refused: false,
        }]
    }

    fn actions(&self, world: &World, actions: &mut Vec<Action>) {
        self.enabled(world, actions);
    }

    fn next_state(&self, world: &World, action: Action) -> Option<World> {
        self.perform(world, action)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = vec![
            Property::<Self>::always("I1 at most one intent per key", |_, w| {
                invariants::i1_single_intent(&w.history).is_ok()
            }),
            Property::<Self>::always("I2 no rail call without a durable IN_FLIGHT", |_, w| {
                invariants::i2_write_ahead(&w.history).is_ok()
            }),
            Property::<Self>::always("I3 no blind retries", |_, w| {
                invariants::i3_no_blind_retries(&w.history).is_ok()
            }),
            Property::<Self>::always("I4 APPLIED and BLOCKED are absorbing", |_, w| {
                invariants::i4_absorbing(&w.history).is_ok()
            }),
            Property::<Self>::always("I5 attempt_seq is monotonic", |_, w| {
                invariants::i5_monotonic(&w.history).is_ok()
            }),
            Property::<Self>::always("I6 one gapless audit record per step", |_, w| {
                invariants::i6_audit_gapless(&w.history).is_ok()
            }),
            Property::<Self>::always("the core sentence", |_, w| {
                invariants::core_sentence(&w.history).is_ok()
            }),
            Property::<Self>::always("never two", |_, w| {
                invariants::never_two(&w.rail_entities()).is_ok()
            }),
            Property::<Self>::always("no phantom success", |_, w| {
                invariants::no_phantom_success(w.ledger.iter(), &w.rail_entities()).is_ok()
            }),
            Property::<Self>::always(
                "no silent loss: once all is quiet, an entity of ours is recorded as APPLIED",
                |m, w| {
                    !w.quiescent(m)
                        || invariants::no_silent_loss(w.ledger.iter(), &w.rail_entities()).is_ok()
                },
            ),
            Property::<Self>::always("refunded total within the refundable", |_, w| {
                w.entities.iter().map(|e| e.amount_minor).sum::<u64>() <= PAYMENT_MINOR
            }),
            Property::<Self>::always(
                "never unknown: once all is quiet, the money's fate is known",
                |m, w| {
                    !w.quiescent(m)
                        || state_of(w).is_none_or(|s| !s.is_ambiguous() && s != State::Quarantined)
                },
            ),
            Property::<Self>::sometimes("applied", |_, w| state_of(w) == Some(State::Applied)),
            Property::<Self>::sometimes("retried after proven absence", |_, w| {
                w.ledger.as_ref().is_some_and(|c| c.attempt_seq >= 2)
            }),
            // Someone else's refund is listed first and pages hold one entity, so a pass that finds
            // ours has read past page one.
            Property::<Self>::sometimes("applied, found on a later page", |_, w| {
                w.history.iter().any(|r| {
                    matches!(
                        r,
                        Record::Transition {
                            event: Event::ReconcileFoundApplied { .. },
                            ..
                        }
                    )
                })
            }),
        ];
        if self.config.replays > 0 {
            properties.push(Property::<Self>::sometimes(
                "a replayed reply refused as foreign",
                |_, w| w.foreign_refused,
            ));
        }
        if self.config.rejections > 0 {
            properties.push(Property::<Self>::sometimes(
                "a refusal whose money moved, found and recorded",
                |_, w| {
                    let refused = w.history.iter().any(|r| {
                        matches!(
                            r,
                            Record::Transition {
                                event: Event::RailRejected { .. },
                                ..
                            }
                        )
                    });
                    refused && state_of(w) == Some(State::Applied)
                },
            ));
        }
        if self.config.stalls > 0 {
            properties.push(Property::<Self>::sometimes(
                "a late outcome refused as stale",
                |_, w| w.stale_refused,
            ));
        }
        // Examples only a configuration with the budget for them can reach.
        if self.config.list_failures as u32 >= interlock_machine::RECONCILE_INCONCLUSIVE_MAX {
            properties.push(Property::<Self>::sometimes("quarantined", |_, w| {
                state_of(w) == Some(State::Quarantined)
            }));
            properties.push(Property::<Self>::sometimes("quarantine resolved by an operator", |_, w| {
                w.history.iter().any(|r| matches!(r, Record::Transition { from, to, .. } if from.state == State::Quarantined && to.state != State::Quarantined))
            }));
        }
        if self.config.crashes >= 2 {
            properties.push(Property::<Self>::sometimes(
                "applied after a double crash",
                |m, w| w.crashes_left == 0 && w.quiescent(m) && state_of(w) == Some(State::Applied),
            ));
        }
        properties
    }
}

/// Lists the entities a pass sees on `page` (visible ones only, in journal order), as the
/// process reports them to the machine's pass; and whether the page is the last.
pub fn list_page(model: &Protocol, world: &World, page: usize) -> (Vec<EntityRef>, bool) {
    let visible: Vec<EntityId> = (0..world.entities.len())
        .filter(|&id| world.entities[id].visible)
        .collect();
    let start = page * PAGE_SIZE;
    let end = (start + PAGE_SIZE).min(visible.len());
    let refs = visible[start.min(end)..end]
        .iter()
        .map(|&id| {
            let entity = &world.entities[id];
            let same_amount = entity.amount_minor == REFUND_MINOR;
            let stamp = if model.mutant(Mutant::MatchByAmount) && same_amount {
                our_sik()
            } else {
                entity.stamp.clone()
            };
            EntityRef {
                id: entity_name(id),
                stamp: Some(stamp),
            }
        })
        .collect();
    (refs, end >= visible.len())
}

/// The pass's next conclusion after reading a page, if it has one.
pub fn after_page(
    model: &Protocol,
    pass: &mut ReconcilePass,
    page: &[EntityRef],
    last: bool,
) -> Option<Event> {
    let progress = pass.observe_page(page, last);
    let first_page_says_absent = model.mutant(Mutant::AbsentFromPageOne)
        && pass.pages_read() == 1
        && !page.iter().any(|e| e.stamp.as_ref() == Some(&our_sik()));
    if first_page_says_absent {
        return Some(Event::ReconcileConfirmedAbsent {
            attempt_seq: pass.attempt_seq(),
            pagination_exhausted: true,
            lag_elapsed: true,
        });
    }
    match progress {
        PassProgress::NextPage => None,
        PassProgress::Conclude => Some(pass.clone().conclude()),
    }
}

impl Protocol {
    fn enabled(&self, world: &World, actions: &mut Vec<Action>) {
        for (p, proc) in world.procs.iter().enumerate() {
            match proc {
                Proc::Idle => {
                    if world.proposals_left > 0 {
                        actions.push(Action::Propose(p));
                    }
                    // The background reconciler verifies ambiguous outcomes and refusals alike.
                    let state = state_of(world);
                    let unknown =
                        state == Some(State::Unknown) && !self.mutant(Mutant::ForgetUnknown);
                    let refused = state == Some(State::FailedTerminal)
                        && !self.mutant(Mutant::RejectionIsFinal);
                    if unknown || refused {
                        actions.push(Action::Background(p));
                    }
                    let stalled_holder = world.lease.is_some_and(|holder| holder != p);
                    if world.stalls_left > 0 && stalled_holder && self.lease_is_live(world) {
                        actions.push(Action::TakeOver(p));
                    }
                }
                Proc::Serving { .. } => actions.push(Action::Drive(p)),
                Proc::Sending { .. } => actions.push(Action::Send(p)),
                Proc::Calling { .. } if world.ambiguous_left > 0 => {
                    actions.push(Action::Timeout(p))
                }
                Proc::Calling { .. } => {}
                Proc::Replied { .. } => actions.push(Action::Commit(p)),
                Proc::Reconciling { pass: None, .. } => {
                    if world.wire.is_empty() || self.mutant(Mutant::IgnoreLag) {
                        actions.push(Action::WaitLag(p));
                    }
                }
                Proc::Reconciling { pass: Some(_), .. } => {
                    actions.push(Action::ReadPage(p));
                    if world.list_failures_left > 0 {
                        actions.push(Action::ListFails(p));
                    }
                }
                Proc::Down => actions.push(Action::Restart(p)),
                Proc::Recovering => actions.push(Action::Recover(p)),
            }
            if *proc != Proc::Down && world.crashes_left > 0 {
                actions.push(Action::Crash(p));
            }
        }
        for i in 0..world.wire.len() {
            actions.push(Action::Rail(i, RailOutcome::Apply));
            if world.rejections_left > 0 {
                actions.push(Action::Rail(i, RailOutcome::Reject));
                actions.push(Action::Rail(i, RailOutcome::ApplyThenReject));
            }
            if world.ambiguous_left > 0 {
                actions.push(Action::Rail(i, RailOutcome::ApplyThenAmbiguous));
                actions.push(Action::Rail(i, RailOutcome::AmbiguousNotApplied));
            }
            if world.replays_left > 0 {
                actions.push(Action::Rail(i, RailOutcome::ApplyThenReplay));
            }
        }
        let quarantined = state_of(world) == Some(State::Quarantined);
        let settled_rail = world.wire.is_empty() || self.mutant(Mutant::OperatorIgnoresLag);
        if quarantined && settled_rail && world.ours().len() <= 1 {
            actions.push(Action::Operator);
        }
        if world.quarantines_left > 0 && state_of(world) == Some(State::Unknown) {
            actions.push(Action::Quarantine);
        }
    }

    fn perform(&self, world: &World, action: Action) -> Option<World> {
        let mut next = world.clone();
        match action {
            Action::Propose(p) => {
                next.proposals_left -= 1;
                next.procs[p] = Proc::Serving { fresh: true };
            }
            Action::Drive(p) => self.drive(&mut next, p),
            Action::Send(p) => self.send_call(&mut next, p),
            Action::Rail(i, outcome) => self.rail(&mut next, i, outcome),
            Action::Timeout(p) => {
                let Proc::Calling { attempt_seq } = next.procs[p] else {
                    unreachable!("enabled only when calling")
                };
                next.ambiguous_left -= 1;
                next.procs[p] = Proc::Replied {
                    attempt_seq,
                    reply: Reply::Ambiguous,
                };
            }
            Action::Commit(p) => self.commit(&mut next, p),
            Action::Background(p) => {
                let started = self.apply_leased(&mut next, Event::ReconcileStarted, p);
                next.procs[p] = if started {
                    Proc::Reconciling {
                        attempt_seq: attempt_of(&next),
                        pass: None,
                        serving: false,
                    }
                } else {
                    Proc::Idle
                };
            }
            Action::WaitLag(p) => self.wait_lag(&mut next, p),
            Action::ReadPage(p) => self.read_page(&mut next, p, false),
            Action::ListFails(p) => {
                next.list_failures_left -= 1;
                self.read_page(&mut next, p, true);
            }
            Action::Crash(p) => {
                next.crashes_left -= 1;
                next.procs[p] = Proc::Down;
            }
            Action::Restart(p) => next.procs[p] = Proc::Recovering,
            Action::Recover(p) => {
                let held = matches!(state_of(&next), Some(State::InFlight | State::Reconciling));
                if held && !self.lease_is_live(&next) {
                    self.apply(&mut next, Event::LeaseExpired);
                }
                next.procs[p] = Proc::Idle;
            }
            Action::Operator => self.operator(&mut next),
            Action::Quarantine => {
                next.quarantines_left -= 1;
                let set_aside = self.apply(&mut next, Event::Quarantine);
                assert!(set_aside, "enabled only on an UNKNOWN intent");
            }
            Action::TakeOver(p) => {
                next.stalls_left -= 1;
                let taken = self.apply(&mut next, Event::LeaseExpired);
                assert!(taken, "enabled only on a leased intent");
                next.procs[p] = Proc::Idle;
            }
        }
        Some(next)
    }

    /// The pass has waited out the reconcile delay: by assumption A1 (ADR 0003) every entity is
    /// now listed, and the pass may conclude absence.
    fn wait_lag(&self, world: &mut World, p: ProcId) {
        let Proc::Reconciling {
            attempt_seq,
            serving,
            ..
        } = world.procs[p]
        else {
            unreachable!("enabled only when reconciling")
        };
        if !self.mutant(Mutant::IgnoreLag) {
            // The delay has passed: by the timing assumption every entity is now listed.
            world.entities.iter_mut().for_each(|e| e.visible = true);
        }
        let pass = ReconcilePass::new(our_sik(), attempt_seq, true);
        world.procs[p] = Proc::Reconciling {
            attempt_seq,
            pass: Some(pass),
            serving,
        };
    }

    /// An operator, reading the rail's dashboard (ground truth), resolves a quarantine.
    fn operator(&self, world: &mut World) {
        let event = match world.ours().as_slice() {
            // By A1, the delay has passed once nothing of ours is on the wire; the operator's tool
            // reports whether it has (`OperatorIgnoresLag` claims it always has).
            [] => Event::OperatorConfirmedNotApplied {
                lag_elapsed: world.wire.is_empty() || self.mutant(Mutant::OperatorIgnoresLag),
            },
            [id] => Event::OperatorConfirmedApplied {
                entity: EntityRef {
                    id: entity_name(*id),
                    stamp: Some(our_sik()),
                },
            },
            _ => unreachable!("enabled only with at most one of ours"),
        };
        let resolved = self.apply(world, event);
        assert!(
            resolved,
            "an operator's resolution of a quarantine is always an edge"
        );
    }

    /// A serving process's next ledger step, chosen from the durable state it reads.
    fn drive(&self, world: &mut World, p: ProcId) {
        let Proc::Serving { fresh } = world.procs[p] else {
            unreachable!("enabled only when serving")
        };
        let serving = Proc::Serving { fresh: false };
        let Some(core) = world.ledger.clone() else {
            let seq = ledger_records(&world.history) + 1;
            let core = IntentCore::proposed(our_sik());
            world.history.push(Record::Inserted {
                seq,
                core: core.clone(),
            });
            world.ledger = Some(core);
            world.procs[p] = serving;
            return;
        };
        world.procs[p] = match core.state {
            State::Proposed if self.apply(world, Event::GatesPassed) => serving,
            State::Authorized => self.start_attempt(world, p, core.attempt_seq + 1),
            State::Unknown if self.mutant(Mutant::UnknownToAuthorized) => {
                if self.apply(world, Event::RetryAuthorized) {
                    serving
                } else {
                    Proc::Idle
                }
            }
            State::Unknown if self.apply_leased(world, Event::ReconcileStarted, p) => {
                Proc::Reconciling {
                    attempt_seq: core.attempt_seq,
                    pass: None,
                    serving: true,
                }
            }
            State::ConfirmedNotApplied => {
                let event = if fresh {
                    Event::Reopened
                } else {
                    Event::RetryAuthorized
                };
                if self.apply(world, event) {
                    serving
                } else {
                    Proc::Idle
                }
            }
            State::FailedTerminal if fresh && self.apply(world, Event::Reopened) => serving,
            // In flight or reconciling elsewhere, settled, held, quarantined, or refused: answer.
            _ => Proc::Idle,
        };
    }

    fn start_attempt(&self, world: &mut World, p: ProcId, attempt_seq: u32) -> Proc {
        if self.mutant(Mutant::CallBeforeWal) {
            self.send(world, p, attempt_seq);
            return Proc::Sending { attempt_seq };
        }
        if self.apply_leased(world, Event::AttemptStarted, p) {
            Proc::Sending { attempt_seq }
        } else {
            Proc::Idle
        }
    }

    fn send_call(&self, world: &mut World, p: ProcId) {
        let Proc::Sending { attempt_seq } = world.procs[p] else {
            unreachable!("enabled only when sending")
        };
        if self.mutant(Mutant::CallBeforeWal) {
            let recorded = self.apply_leased(world, Event::AttemptStarted, p);
            world.procs[p] = if recorded {
                Proc::Calling { attempt_seq }
            } else {
                Proc::Idle
            };
            return;
        }
        // The engine's duty under A2 (ADR 0003): in the same step as the send, check that this
        // process still holds the lease on this very attempt; a stalled sender drops its call.
        let still_ours = world.lease == Some(p)
            && world
                .ledger
                .as_ref()
                .is_some_and(|c| c.state == State::InFlight && c.attempt_seq == attempt_seq);
        if !still_ours && !self.mutant(Mutant::SendWithoutRecheck) {
            world.procs[p] = Proc::Idle;
            return;
        }
        self.send(world, p, attempt_seq);
        world.procs[p] = Proc::Calling { attempt_seq };
    }

    fn rail(&self, world: &mut World, i: usize, outcome: RailOutcome) {
        let call = world.wire.remove(i);
        let applies = matches!(
            outcome,
            RailOutcome::Apply
                | RailOutcome::ApplyThenAmbiguous
                | RailOutcome::ApplyThenReplay
                | RailOutcome::ApplyThenReject
        );
        match outcome {
            RailOutcome::Apply => {}
            RailOutcome::Reject | RailOutcome::ApplyThenReject => world.rejections_left -= 1,
            RailOutcome::ApplyThenAmbiguous | RailOutcome::AmbiguousNotApplied => {
                world.ambiguous_left -= 1
            }
            RailOutcome::ApplyThenReplay => world.replays_left -= 1,
        }
        if applies {
            let entity = Entity {
                stamp: our_sik(),
                amount_minor: REFUND_MINOR,
                // Read lag: a new entity is listed only once the reconcile delay has passed.
                visible: false,
            };
            world.entities.push(entity);
        }
        let reply = match outcome {
            RailOutcome::Apply => Reply::Entity(world.entities.len() - 1),
            RailOutcome::Reject | RailOutcome::ApplyThenReject => Reply::Rejected,
            RailOutcome::ApplyThenAmbiguous | RailOutcome::AmbiguousNotApplied => Reply::Ambiguous,
            RailOutcome::ApplyThenReplay => Reply::Entity(0),
        };
        // The reply reaches the caller only if it is still waiting for this very attempt.
        if world.procs[call.from]
            == (Proc::Calling {
                attempt_seq: call.attempt_seq,
            })
        {
            world.procs[call.from] = Proc::Replied {
                attempt_seq: call.attempt_seq,
                reply,
            };
        }
    }

    fn commit(&self, world: &mut World, p: ProcId) {
        let Proc::Replied { attempt_seq, reply } = world.procs[p] else {
            unreachable!("enabled only with a reply")
        };
        let event = match reply {
            Reply::Entity(id) => {
                // The engine reports the stamp the reply carries; `AcceptReplay` trusts it as ours.
                let carried = world.entities[id].stamp.clone();
                let stamp = if self.mutant(Mutant::AcceptReplay) {
                    our_sik()
                } else {
                    carried
                };
                let entity = EntityRef {
                    id: entity_name(id),
                    stamp: Some(stamp),
                };
                Event::RailApplied {
                    attempt_seq,
                    entity,
                }
            }
            Reply::Ambiguous => Event::RailAmbiguous { attempt_seq },
            Reply::Rejected => Event::RailRejected { attempt_seq },
        };
        let committed = match self.try_apply(world, event) {
            // A reply without our stamp is not ours: ambiguous, for the reconciler to settle.
            Err(Illegal::ForeignStamp { .. }) => {
                world.foreign_refused = true;
                self.apply(world, Event::RailAmbiguous { attempt_seq })
            }
            outcome => outcome.is_ok(),
        };
        let unknown = state_of(world) == Some(State::Unknown);
        world.procs[p] = if committed && unknown {
            Proc::Serving { fresh: false }
        } else {
            Proc::Idle
        };
    }

    fn read_page(&self, world: &mut World, p: ProcId, list_fails: bool) {
        let Proc::Reconciling {
            attempt_seq,
            pass: Some(mut pass),
            serving,
        } = world.procs[p].clone()
        else {
            unreachable!("enabled only while reading")
        };
        let concluded = if list_fails {
            pass.list_failed();
            Some(pass.clone().conclude())
        } else {
            let (page, last) = list_page(self, world, pass.pages_read() as usize);
            after_page(self, &mut pass, &page, last)
        };
        let Some(event) = concluded else {
            world.procs[p] = Proc::Reconciling {
                attempt_seq,
                pass: Some(pass),
                serving,
            };
            return;
        };
        let committed = self.apply(world, event);
        let retry = serving && state_of(world) == Some(State::ConfirmedNotApplied);
        let again = serving && state_of(world) == Some(State::Unknown);
        world.procs[p] = if committed && (retry || again) {
            Proc::Serving { fresh: false }
        } else {
            Proc::Idle
        };
    }
}
