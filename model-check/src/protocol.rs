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
//! Every decision a process takes is taken by **the driver that ships** (`interlock-driver`): a
//! serving process holds a [`Proposal`] and carries out its commands, a reconciling one a
//! [`Pass`], and recovery and the background reconciler ask the [`Sweep`]. Every change of the
//! ledger's state goes through `interlock_machine::step`. The model holds no copy of either, only
//! the *world around them* (processes, network, rail, agent, operator) and a ledger that commits
//! what the driver asks, as the SQLite ledger does. A mutant swaps one piece of that world, one
//! edge, or one decision of the driver (a [`Flaw`] planted in it) for a plausible bug; each one
//! must be caught by a property.
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
//!
//! ## Time
//! The driver is handed one `now` throughout ([`NOW_MS`]); the model's actions, not a clock,
//! decide when a lease has lapsed (a crashed or stalled holder) and when the rail's lag has
//! passed (A1: once nothing of ours is on the wire). The views it hands the driver say so: a lease
//! that may be taken back ends before `now`, an attempt whose lag has passed ended long before it.
//! A3: an operator's "not applied" counts only with `lag_elapsed`, which by A1 means an empty wire.

use interlock_driver::gates::{LiveTool, Usage};
use interlock_driver::rail::{EntityTerms, ListPage, Listed, PaymentReferent, RailError, Referent};
use interlock_driver::{
    Answer, AttemptView, Command, Commit, Context, Decide, Decided, DriverConfig, Expect, Flaw,
    IntentKey, IntentView, Judgement, LeaseChange, Outcome, Pass, PassCommand, Proposal, RailCall,
    Refusal, Sweep, SweepStep,
};
use interlock_machine::invariants::{self, RailEntity, Record};
use interlock_machine::{Effect, EntityRef, Event, Illegal, IntentCore, State, Step, step};
use interlock_spec::action::{ActionKind, ProposedAction};
use interlock_spec::ids::Sik;
use interlock_spec::mandate::Mandate;
use interlock_spec::money::{Currency, Minor};
use serde_json::Map;
use stateright::{Model, Property};
use std::sync::OnceLock;

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

/// The one `now` the driver is handed (inside the model mandate's validity).
pub const NOW_MS: u64 = 1_800_000_000_000;

/// The mandate the model's proposals are judged under: the repository's example mandate.
pub fn mandate() -> &'static Mandate {
    static MANDATE: OnceLock<Mandate> = OnceLock::new();
    MANDATE.get_or_init(|| {
        let mandate = Mandate::parse_yaml(include_str!("../../examples/mandate.yaml"))
            .expect("the example mandate parses");
        mandate.validate().expect("the example mandate validates");
        mandate
    })
}

fn mandate_hash() -> &'static str {
    static HASH: OnceLock<String> = OnceLock::new();
    HASH.get_or_init(|| mandate().hash().expect("the example mandate hashes"))
}

/// The live definition of `create_refund`, as pinned in the example mandate.
fn live_tool() -> LiveTool {
    let provenance = mandate().provenance.as_ref().expect("pinned");
    let tool = interlock_spec::ids::ToolName::parse("create_refund").expect("a tool name");
    LiveTool {
        server_id: provenance.server_id.clone(),
        sha256: Ok(provenance.pinned_manifests[&tool].sha256.clone()),
    }
}

/// The refund the agent keeps proposing.
pub fn our_action() -> ProposedAction {
    let mandate = mandate();
    ProposedAction {
        agent_id: mandate.agent_id.clone(),
        merchant_id: mandate.merchant_id.clone(),
        tool: interlock_spec::ids::ToolName::parse("create_refund").expect("a tool name"),
        kind: ActionKind::Refund,
        subject_hint: Some(PAYMENT_ID.to_owned()),
        payee: None,
        amount: Minor::new(REFUND_MINOR).expect("an amount"),
        amount_from_referent: false,
        distinct: None,
        passthrough: Map::new(),
        covered_args: vec!["amount".to_owned(), "payment_id".to_owned()],
    }
}

/// The payment the refund is about.
pub const PAYMENT_ID: &str = "pay_model";

/// The key of the refund the agent keeps proposing, as the driver computes it.
pub fn our_sik() -> Sik {
    static SIK: OnceLock<Sik> = OnceLock::new();
    SIK.get_or_init(|| {
        let config = DriverConfig::new("model");
        let context = Context {
            mandate: mandate(),
            mandate_hash: mandate_hash(),
            config: &config,
            wall_ms: NOW_MS,
        };
        let mut proposal = Proposal::new(context, NOW_MS, our_action(), Some(live_tool()));
        let _ = proposal.poll_command();
        proposal.handle_referent(context, NOW_MS, Ok(referent()));
        match proposal.poll_command() {
            Some(Command::Decide(plan)) => plan.key.sik,
            other => panic!("the model's refund is decided, got {other:?}"),
        }
    })
    .clone()
}

/// The payment as the rail reports it: someone else's refund is already on it.
fn referent() -> Referent {
    Referent::Payment(PaymentReferent {
        id: PAYMENT_ID.to_owned(),
        amount: Minor::new(PAYMENT_MINOR).expect("an amount"),
        amount_refunded: Minor::new(REFUND_MINOR).expect("an amount"),
        currency: Currency::parse("INR").expect("a currency"),
        captured: true,
        order: None,
    })
}

/// The stamp of a refund someone else made on the same payment, for the same amount.
pub fn other_sik() -> Sik {
    Sik::parse("OTHEROTHEROTHEROTHEROTHEROTHER22").expect("well-formed")
}

/// A plausible bug planted in the protocol: in the world around the driver, in the machine's
/// edges, or in the driver itself. Each must make some property fail.
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
    /// The driver tells the agent APPLIED before the outcome is committed.
    AnswerBeforeCommit,
    /// The driver re-sends a call that timed out, at once.
    ResendAfterTimeout,
    /// The driver takes a stamped entity as applied without checking its amount.
    IgnoreTerms,
    /// `OPERATOR_CONFIRMED_NOT_APPLIED` is accepted though an entity is recorded.
    NotAppliedDespiteEntity,
    /// `OPERATOR_CONFIRMED_APPLIED` is accepted naming another entity than the one recorded.
    AppliedAsAnotherEntity,
}

impl Mutant {
    /// Every mutant.
    pub const ALL: [Mutant; 16] = [
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
        Mutant::AnswerBeforeCommit,
        Mutant::ResendAfterTimeout,
        Mutant::IgnoreTerms,
        Mutant::NotAppliedDespiteEntity,
        Mutant::AppliedAsAnotherEntity,
    ];

    /// The flaw this mutant plants in the driver, if it is (or needs) one.
    pub fn flaw(self) -> Option<Flaw> {
        match self {
            Mutant::UnknownToAuthorized => Some(Flaw::RetryUnknown),
            Mutant::ReopenRejectedDirectly => Some(Flaw::ReopenRejected),
            Mutant::AbsentFromPageOne => Some(Flaw::AbsentFromPageOne),
            Mutant::CallBeforeWal => Some(Flaw::CallBeforeWal),
            Mutant::ForgetUnknown => Some(Flaw::ForgetUnknown),
            Mutant::SendWithoutRecheck => Some(Flaw::SendWithoutRecheck),
            Mutant::RejectionIsFinal => Some(Flaw::RejectionIsFinal),
            Mutant::AnswerBeforeCommit => Some(Flaw::AnswerBeforeCommit),
            Mutant::ResendAfterTimeout => Some(Flaw::ResendAfterTimeout),
            Mutant::IgnoreTerms => Some(Flaw::IgnoreTerms),
            Mutant::IgnoreLag
            | Mutant::NotAppliedDespiteEntity
            | Mutant::AppliedAsAnotherEntity
            | Mutant::MatchByAmount
            | Mutant::AcceptReplay
            | Mutant::OperatorIgnoresLag => None,
        }
    }
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
    /// Calls the rail applies with another amount than asked (one minor unit less).
    pub misapplied: u8,
    /// Times an operator, wrong about the rail, tries to settle an intent whose entity is
    /// recorded as not applied, or as another entity: `step` must refuse both.
    pub careless: u8,
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
            misapplied: 0,
            careless: 0,
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
            misapplied: 1,
            careless: 1,
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
            Mutant::OperatorIgnoresLag
            | Mutant::IgnoreTerms
            | Mutant::NotAppliedDespiteEntity
            | Mutant::AppliedAsAnotherEntity => Config::partition(),
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
    /// Alive, serving no agent call; its background reconciler may pick up unsettled intents.
    Idle,
    /// Serving an agent's call: the driver's proposal, with its next command queued.
    Serving(Box<Proposal>),
    /// The proposal's call is on the wire; waiting for the rail's reply.
    Calling {
        /// The proposal.
        proposal: Box<Proposal>,
        /// The attempt on the wire.
        attempt_seq: u32,
    },
    /// Holds a reply the proposal has not yet been handed.
    Replied {
        /// The proposal.
        proposal: Box<Proposal>,
        /// What came back.
        reply: Reply,
    },
    /// Running a reconcile pass: the driver's pass, reading once the lag has been waited out.
    Reconciling {
        /// The pass, with its next command queued.
        pass: Box<Pass>,
        /// Whether the rail's lag has been waited out.
        waited: bool,
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

impl Entity {
    /// What the adapter reads from the entity: its amount (one subject, one currency here).
    fn terms(&self) -> EntityTerms {
        EntityTerms {
            amount: Some(Minor::new(self.amount_minor).expect("an amount")),
            ..EntityTerms::default()
        }
    }
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
    /// Applies one minor unit less than asked and answers with that entity.
    ApplyOtherAmount,
    /// Applies one minor unit less than asked, then answers 5xx: the reconciler finds it.
    ApplyOtherAmountThenAmbiguous,
}

/// The whole world: ledger, processes, rail, agent and the fault budgets left.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct World {
    /// The durable intent row (`None` before the first proposal is recorded).
    pub ledger: Option<IntentCore>,
    /// The durable lease column: which process (and which start of it) holds the intent.
    pub lease: Option<(ProcId, u8)>,
    /// Ledger records and rail-call observations, in order.
    pub history: Vec<Record>,
    /// Each process's volatile state.
    pub procs: Vec<Proc>,
    /// Each process's start count: its lease-owner name changes with every start, as the
    /// proxy's instance id does.
    pub starts: Vec<u8>,
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
    /// Calls the rail may still apply with another amount.
    pub misapplied_left: u8,
    /// Careless operator attempts left.
    pub careless_left: u8,
    /// Ghost: a reply without our stamp was committed as ambiguous, not as ours.
    pub foreign_refused: bool,
    /// Ghost: `step` refused an outcome or conclusion for an earlier attempt.
    pub stale_refused: bool,
    /// Ghost: an agent was told APPLIED while the ledger did not yet say so.
    pub premature_applied: bool,
    /// Ghost: `step` refused a careless operator's resolution of a recorded entity.
    pub careless_refused: bool,
}

/// The model's actions. Each is one atomic step of one participant.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Action {
    /// The agent proposes the refund to a process (a fresh request id each time).
    Propose(ProcId),
    /// A serving process carries out its proposal's next commands, up to one ledger write or
    /// one send.
    Drive(ProcId),
    /// The rail processes the call at this position of the wire.
    Rail(usize, RailOutcome),
    /// The process gives up waiting: ambiguous, while the call may still be on the wire.
    Timeout(ProcId),
    /// The process hands the reply it holds to its proposal, and carries out what follows.
    Commit(ProcId),
    /// An idle process's background reconciler starts a pass the sweep says is due.
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
    /// Boot recovery: the sweep takes back a lease whose holder is gone, then the process serves.
    Recover(ProcId),
    /// An operator, reading the rail's dashboard, resolves a quarantined intent.
    Operator,
    /// An operator, wrong about the rail, tries to settle an intent whose entity is recorded:
    /// as not applied (`true`), or as someone else's entity (`false`).
    CarelessOperator(bool),
    /// An operator sets an `UNKNOWN` intent aside.
    Quarantine,
    /// An idle process's sweep takes over an intent whose lease holder stalled past its lease.
    TakeOver(ProcId),
}

/// The model: a configuration.
#[derive(Debug, Clone)]
pub struct Protocol {
    /// Its bounds and mutant.
    pub config: Config,
}

/// The driver's configuration for process `p` in its `start`-th life.
fn driver_config(p: ProcId, start: u8) -> DriverConfig {
    DriverConfig::new(format!("p{p}s{start}"))
}

/// A lease that ends long after `now` (a live holder's) and one that has ended (a gone one's).
const LEASE_LIVE_UNTIL: u64 = NOW_MS + 3_600_000;
const LEASE_LAPSED_AT: u64 = NOW_MS - 1;

impl Protocol {
    fn mutant(&self, mutant: Mutant) -> bool {
        self.config.mutant == Some(mutant)
    }

    fn flaw(&self) -> Option<Flaw> {
        self.config.mutant.and_then(Mutant::flaw)
    }

    fn sweep(&self) -> Sweep {
        Sweep::with_flaw(self.flaw())
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
        if let Some(entity_id) = core
            .entity_id
            .as_ref()
            .filter(|_| core.state == State::Quarantined)
        {
            // The operator's guards on a recorded entity, dropped: the core as it would be
            // without the entity on record.
            let forgotten = match event {
                Event::OperatorConfirmedNotApplied { .. } => {
                    self.mutant(Mutant::NotAppliedDespiteEntity)
                }
                Event::OperatorConfirmedApplied { entity } => {
                    self.mutant(Mutant::AppliedAsAnotherEntity) && entity.id != *entity_id
                }
                _ => false,
            };
            if forgotten {
                let mut unrecorded = core.clone();
                unrecorded.entity_id = None;
                return step(&unrecorded, event);
            }
        }
        step(core, event)
    }

    /// Whether the lease holder is still alive and working on what the lease covers. Timing
    /// assumption: a live holder sends its call and times out before its lease expires (the
    /// driver re-checks the lease just before sending and keeps the call timeout under the TTL);
    /// so only a holder that crashed since (or never held) can have its lease expired.
    fn lease_is_live(&self, world: &World) -> bool {
        let (Some((holder, start)), Some(core)) = (world.lease, world.ledger.as_ref()) else {
            return false;
        };
        if world.starts[holder] != start {
            return false;
        }
        matches!(
            (&world.procs[holder], core.state),
            (
                Proc::Serving(_) | Proc::Calling { .. } | Proc::Replied { .. },
                State::InFlight
            ) | (Proc::Reconciling { .. }, State::Reconciling)
        )
    }

    /// The intent as the ledger would show it to the driver of process `p`. `lease_lapsed`: the
    /// model has decided the lease may be taken back (its holder is gone or stalled).
    fn view(&self, world: &World, lease_lapsed: bool) -> Option<IntentView> {
        let core = world.ledger.clone()?;
        let (lease_owner, lease_expires_at) = match world.lease {
            Some((holder, start)) => (
                Some(driver_config(holder, start).instance_id),
                Some(if lease_lapsed || !self.lease_is_live(world) {
                    LEASE_LAPSED_AT
                } else {
                    LEASE_LIVE_UNTIL
                }),
            ),
            None => (None, None),
        };
        // A1: once nothing of ours is on the wire, the rail's lag has passed since the attempt
        // ended; before, it has not (the operator's evidence reads this).
        let lag_passed = world.wire.is_empty() || self.mutant(Mutant::OperatorIgnoresLag);
        let ended = if lag_passed { 0 } else { NOW_MS };
        let attempt = (core.attempt_seq > 0).then_some(AttemptView {
            started_at: 0,
            finished_at: Some(ended),
            outcome: None,
            detail: None,
        });
        Some(IntentView {
            key: our_key(),
            core,
            lease_owner,
            lease_expires_at,
            reconcile_not_before: Some(0),
            reason: String::new(),
            call: our_call(),
            distinct_reason: None,
            mandate_hash: mandate_hash().to_owned(),
            attempt,
            moved_minor: None,
        })
    }

    /// Commits `commit` for process `p` as the ledger does: the machine's step, the lease rule,
    /// one audit record. `expire_allowed`: the model has decided the lease has lapsed.
    fn commit(
        &self,
        world: &mut World,
        p: ProcId,
        commit: &Commit,
        expire_allowed: bool,
    ) -> Result<interlock_driver::Applied, Refusal> {
        let Some(core) = world.ledger.clone() else {
            return Err(Refusal::NoSuchIntent);
        };
        let owner = (p, world.starts[p]);
        let lease = match &commit.change.lease {
            LeaseChange::Claim { .. } => {
                if world.lease.is_some_and(|held| held != owner) && self.lease_is_live(world) {
                    return Err(Refusal::Lease("held by a live process".into()));
                }
                Some(owner)
            }
            LeaseChange::Expire if !expire_allowed && self.lease_is_live(world) => {
                return Err(Refusal::Lease("not expired".into()));
            }
            LeaseChange::Expire | LeaseChange::Release => None,
        };
        let stepped = self.step(&core, &commit.event).map_err(|refusal| {
            if matches!(refusal, Illegal::StaleAttempt { .. }) {
                world.stale_refused = true;
            }
            Refusal::Illegal(refusal)
        })?;
        // As the ledger: a lease is held exactly while the intent is doing rail work.
        let lease = if stepped.next.state.holds_lease() {
            Some(lease.ok_or_else(|| Refusal::Lease("rail work needs a lease".into()))?)
        } else {
            None
        };
        let seq = ledger_records(&world.history) + 1;
        world.history.push(Record::Transition {
            seq,
            from: core.clone(),
            event: commit.event.clone(),
            to: stepped.next.clone(),
            effect: stepped.effect,
        });
        world.ledger = Some(stepped.next.clone());
        world.lease = lease;
        Ok(interlock_driver::Applied {
            from: core,
            to: stepped.next,
            effect: stepped.effect,
            seq,
        })
    }

    /// One deciding transaction, as the ledger runs it.
    fn decide(
        &self,
        world: &mut World,
        p: ProcId,
        plan: &Decide,
        proposal: &Proposal,
    ) -> Result<Decided, Refusal> {
        let expected = match (&plan.expect, &world.ledger) {
            (Expect::Absent(_), None) => true,
            (Expect::InState(state), Some(core)) => core.state == *state,
            (Expect::InState(_), None) => return Err(Refusal::NoSuchIntent),
            (Expect::Absent(_), Some(_)) => false,
        };
        if !expected {
            let view = self.view(world, false).expect("an intent is there");
            return Ok(Decided::Found(Box::new(view)));
        }
        let config = driver_config(p, world.starts[p]);
        // One refund on one payment: nothing else counts against it.
        match proposal.judge(context(&config), NOW_MS, &Usage::default()) {
            Judgement::Refuse { ladder, .. } => Ok(Decided::Refused(ladder)),
            Judgement::Apply {
                ladder,
                event,
                change,
                ..
            } => {
                if let Expect::Absent(intent) = &plan.expect {
                    let seq = ledger_records(&world.history) + 1;
                    let core = IntentCore::proposed(intent.key.sik.clone());
                    world.history.push(Record::Inserted {
                        seq,
                        core: core.clone(),
                    });
                    world.ledger = Some(core);
                }
                let commit = Commit {
                    key: plan.key.clone(),
                    event,
                    change,
                };
                let applied = self.commit(world, p, &commit, false)?;
                // As the ledger: the attempt is started in the same transaction when the
                // decision leaves the intent ready for it; a refusal leaves the decision alone.
                let start = match (&plan.start_attempt, applied.effect) {
                    (Some(claim), Effect::StartAttempt) => Some(Commit {
                        key: plan.key.clone(),
                        event: Event::AttemptStarted,
                        change: claim.at(NOW_MS),
                    }),
                    _ => None,
                };
                let started = start.and_then(|start| self.commit(world, p, &start, false).ok());
                Ok(Decided::Applied(started.unwrap_or(applied), ladder))
            }
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

fn context(config: &DriverConfig) -> Context<'_> {
    Context {
        mandate: mandate(),
        mandate_hash: mandate_hash(),
        config,
        // The model's mandate is in force at every step; only its own clock moves.
        wall_ms: NOW_MS,
    }
}

/// The refund's key.
pub fn our_key() -> IntentKey {
    IntentKey {
        merchant_id: mandate().merchant_id.clone(),
        sik: our_sik(),
    }
}

/// The stamped call every attempt of the refund sends.
fn our_call() -> RailCall {
    RailCall::stamped(&our_action(), &referent(), &our_sik())
}

fn ledger_records(history: &[Record]) -> u64 {
    history
        .iter()
        .filter(|r| !matches!(r, Record::RailCall { .. }))
        .count() as u64
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

    /// A transition the rail's answer or a reconcile pass made into `APPLIED` names an entity
    /// that moved the authorised amount (an operator may accept another, knowingly).
    fn as_authorised_if_applied(&self, record: &Record) -> bool {
        let Record::Transition { event, to, .. } = record else {
            return true;
        };
        let entity = match event {
            Event::RailApplied { entity, .. } | Event::ReconcileFoundApplied { entity, .. } => {
                entity
            }
            _ => return true,
        };
        to.state != State::Applied
            || self
                .entities
                .iter()
                .enumerate()
                .any(|(id, e)| entity_name(id) == entity.id && e.amount_minor == REFUND_MINOR)
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
            starts: vec![0; c.procs],
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
            misapplied_left: c.misapplied,
            careless_left: c.careless,
            foreign_refused: false,
            stale_refused: false,
            premature_applied: false,
            careless_refused: false,
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
            Property::<Self>::always("no APPLIED answer before the outcome is durable", |_, w| {
                !w.premature_applied
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
            Property::<Self>::always(
                "money moved other than authorised is never APPLIED on the rail's word",
                |_, w| w.history.iter().all(|r| w.as_authorised_if_applied(r)),
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
        if self.config.misapplied > 0 {
            properties.push(Property::<Self>::sometimes(
                "money moved other than authorised, quarantined with its entity",
                |_, w| {
                    w.ledger
                        .as_ref()
                        .is_some_and(|c| c.state == State::Quarantined && c.entity_id.is_some())
                },
            ));
        }
        if self.config.careless > 0 {
            properties.push(Property::<Self>::sometimes(
                "a careless operator's resolution of a recorded entity refused",
                |_, w| w.careless_refused,
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
/// adapter reports them to the driver; the last page is the first empty one.
pub fn list_page(model: &Protocol, world: &World, skip: usize) -> ListPage {
    let visible: Vec<EntityId> = (0..world.entities.len())
        .filter(|&id| world.entities[id].visible)
        .collect();
    let start = skip.min(visible.len());
    let end = (start + PAGE_SIZE).min(visible.len());
    let entities = visible[start..end]
        .iter()
        .map(|&id| {
            let entity = &world.entities[id];
            let same_amount = entity.amount_minor == REFUND_MINOR;
            let stamp = if model.mutant(Mutant::MatchByAmount) && same_amount {
                our_sik()
            } else {
                entity.stamp.clone()
            };
            Listed {
                entity: EntityRef {
                    id: entity_name(id),
                    stamp: Some(stamp),
                },
                terms: entity.terms(),
            }
        })
        .collect::<Vec<_>>();
    ListPage {
        is_last: end >= visible.len(),
        entities,
    }
}

impl Protocol {
    fn enabled(&self, world: &World, actions: &mut Vec<Action>) {
        for (p, proc) in world.procs.iter().enumerate() {
            match proc {
                Proc::Idle => self.idle_actions(world, p, actions),
                Proc::Serving(_) => actions.push(Action::Drive(p)),
                Proc::Calling { .. } if world.ambiguous_left > 0 => {
                    actions.push(Action::Timeout(p))
                }
                Proc::Calling { .. } => {}
                Proc::Replied { .. } => actions.push(Action::Commit(p)),
                Proc::Reconciling { waited: false, .. } => {
                    if world.wire.is_empty() || self.mutant(Mutant::IgnoreLag) {
                        actions.push(Action::WaitLag(p));
                    }
                }
                Proc::Reconciling { waited: true, .. } => {
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
            if world.misapplied_left > 0 {
                actions.push(Action::Rail(i, RailOutcome::ApplyOtherAmount));
                actions.push(Action::Rail(i, RailOutcome::ApplyOtherAmountThenAmbiguous));
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
        let recorded = world.ledger.as_ref().is_some_and(|c| c.entity_id.is_some());
        if world.careless_left > 0 && quarantined && recorded && world.wire.is_empty() {
            actions.push(Action::CarelessOperator(true));
            actions.push(Action::CarelessOperator(false));
        }
    }

    fn idle_actions(&self, world: &World, p: ProcId, actions: &mut Vec<Action>) {
        if world.proposals_left > 0 {
            actions.push(Action::Propose(p));
        }
        // The background reconciler does what the sweep says is due.
        if let Some(view) = self.view(world, false)
            && self.sweep().next_step(NOW_MS, &view) == SweepStep::Reconcile
        {
            actions.push(Action::Background(p));
        }
        let stalled_holder = world.lease.is_some_and(|(holder, _)| holder != p);
        if world.stalls_left > 0 && stalled_holder && self.lease_is_live(world) {
            actions.push(Action::TakeOver(p));
        }
    }

    fn perform(&self, world: &World, action: Action) -> Option<World> {
        let mut next = world.clone();
        match action {
            Action::Propose(p) => {
                next.proposals_left -= 1;
                let config = driver_config(p, next.starts[p]);
                let proposal =
                    Proposal::new(context(&config), NOW_MS, our_action(), Some(live_tool()))
                        .with_flaw(self.flaw());
                next.procs[p] = Proc::Serving(Box::new(proposal));
            }
            Action::Drive(p) => {
                let Proc::Serving(proposal) = next.procs[p].clone() else {
                    unreachable!("enabled only when serving")
                };
                self.carry(&mut next, p, *proposal);
            }
            Action::Rail(i, outcome) => self.rail(&mut next, i, outcome),
            Action::Timeout(p) => {
                let Proc::Calling { proposal, .. } = next.procs[p].clone() else {
                    unreachable!("enabled only when calling")
                };
                next.ambiguous_left -= 1;
                next.procs[p] = Proc::Replied {
                    proposal,
                    reply: Reply::Ambiguous,
                };
            }
            Action::Commit(p) => self.hand_reply(&mut next, p),
            Action::Background(p) => self.background(&mut next, p),
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
            Action::Restart(p) => {
                next.starts[p] += 1;
                next.procs[p] = Proc::Recovering;
            }
            Action::Recover(p) => {
                self.sweep_lease(&mut next, p, false);
                next.procs[p] = Proc::Idle;
            }
            Action::Operator => self.operator(&mut next),
            Action::CarelessOperator(not_applied) => self.careless_operator(&mut next, not_applied),
            Action::Quarantine => {
                next.quarantines_left -= 1;
                let commit = Commit {
                    key: our_key(),
                    event: Event::Quarantine,
                    change: Default::default(),
                };
                let set_aside = self.commit(&mut next, 0, &commit, false);
                assert!(set_aside.is_ok(), "enabled only on an UNKNOWN intent");
            }
            Action::TakeOver(p) => {
                next.stalls_left -= 1;
                let taken = self.sweep_lease(&mut next, p, true);
                assert!(taken, "enabled only on a leased intent");
                next.procs[p] = Proc::Idle;
            }
        }
        Some(next)
    }

    /// The sweep's lease step for process `p`: takes back a lease whose holder is gone (or, with
    /// `stalled`, one the model has let lapse under a stalled holder). `true` if it did.
    fn sweep_lease(&self, world: &mut World, p: ProcId, stalled: bool) -> bool {
        let Some(view) = self.view(world, stalled) else {
            return false;
        };
        match self.sweep().next_step(NOW_MS, &view) {
            SweepStep::ExpireLease(commit) => self.commit(world, p, &commit, stalled).is_ok(),
            SweepStep::Reconcile | SweepStep::WaitUntil(_) | SweepStep::Nothing => false,
        }
    }

    /// Carries out the proposal's commands until it has made one ledger write or sent its call
    /// (each is its own step of the world), or has answered.
    fn carry(&self, world: &mut World, p: ProcId, mut proposal: Proposal) {
        let config = driver_config(p, world.starts[p]);
        let context = context(&config);
        let mut sent = None;
        while let Some(command) = proposal.poll_command() {
            let write = matches!(command, Command::Decide(_) | Command::Commit(_));
            match command {
                Command::ReadReferent(_) => {
                    proposal.handle_referent(context, NOW_MS, Ok(referent()))
                }
                Command::Decide(plan) => {
                    let decided = self.decide(world, p, &plan, &proposal);
                    proposal.handle_decided(context, NOW_MS, decided);
                }
                Command::Commit(commit) => {
                    let committed = self.commit(world, p, &commit, false);
                    proposal.handle_committed(context, NOW_MS, committed);
                }
                Command::ReadIntent(_) => {
                    let view = self.view(world, false);
                    proposal.handle_intent(context, NOW_MS, view);
                }
                Command::CallRail { attempt_seq, .. } => {
                    self.send(world, p, attempt_seq);
                    sent = Some(attempt_seq);
                    // Only a flawed driver queues more behind its call (`CallBeforeWal`'s late
                    // write-ahead): carry it out in the same step, then wait for the reply.
                    if proposal.pending_commands() == 0 {
                        break;
                    }
                    continue;
                }
                Command::Answer(answer) => self.answered(world, &answer),
                Command::Fail(_) => {}
            }
            if write && sent.is_none() && !proposal.is_done() {
                world.procs[p] = Proc::Serving(Box::new(proposal));
                return;
            }
        }
        world.procs[p] = match sent {
            Some(attempt_seq) if !proposal.is_done() => Proc::Calling {
                proposal: Box::new(proposal),
                attempt_seq,
            },
            Some(_) | None => Proc::Idle,
        };
    }

    /// Ghost: an APPLIED answer must be backed by a durable APPLIED record.
    fn answered(&self, world: &mut World, answer: &Answer) {
        if answer.outcome == Outcome::Applied && state_of(world) != Some(State::Applied) {
            world.premature_applied = true;
        }
    }

    /// The reply reaches the proposal, which classifies it; what follows is carried out.
    fn hand_reply(&self, world: &mut World, p: ProcId) {
        let Proc::Replied { proposal, reply } = world.procs[p].clone() else {
            unreachable!("enabled only with a reply")
        };
        let mut proposal = *proposal;
        let config = driver_config(p, world.starts[p]);
        let outcome = match reply {
            Reply::Entity(id) => {
                // The adapter reports the stamp the reply carries; `AcceptReplay` reports ours.
                let carried = world.entities[id].stamp.clone();
                let foreign = carried != our_sik();
                let stamp = if self.mutant(Mutant::AcceptReplay) {
                    our_sik()
                } else {
                    carried
                };
                if foreign && !self.mutant(Mutant::AcceptReplay) {
                    world.foreign_refused = true;
                }
                interlock_driver::RailOutcome::Applied {
                    entity: EntityRef {
                        id: entity_name(id),
                        stamp: Some(stamp),
                    },
                    terms: world.entities[id].terms(),
                    fee: Minor::ZERO,
                    tax: Minor::ZERO,
                    response: String::new(),
                }
            }
            Reply::Ambiguous => interlock_driver::RailOutcome::Ambiguous {
                detail: String::new(),
            },
            Reply::Rejected => interlock_driver::RailOutcome::Rejected {
                detail: String::new(),
            },
        };
        proposal.handle_rail_outcome(context(&config), NOW_MS, outcome);
        self.carry(world, p, proposal);
    }

    fn background(&self, world: &mut World, p: ProcId) {
        let config = driver_config(p, world.starts[p]);
        let view = self.view(world, false).expect("enabled on an intent");
        let pass = Pass::start(&config, NOW_MS, &view).with_flaw(self.flaw());
        self.run_pass(world, p, pass, false);
    }

    /// Carries out the pass's commands until it wants a page it may not read yet, or ends.
    fn run_pass(&self, world: &mut World, p: ProcId, mut pass: Pass, waited: bool) {
        let config = driver_config(p, world.starts[p]);
        loop {
            if let Some(PassCommand::ListPage { .. }) = pass.peek_command() {
                world.procs[p] = Proc::Reconciling {
                    pass: Box::new(pass),
                    waited,
                };
                return;
            }
            match pass.poll_command() {
                Some(PassCommand::Commit(commit)) => {
                    let committed = self.commit(world, p, &commit, false);
                    pass.handle_committed(&config, NOW_MS, committed);
                }
                Some(PassCommand::ListPage { .. }) => unreachable!("parked above"),
                Some(PassCommand::Done(_)) | None => {
                    world.procs[p] = Proc::Idle;
                    return;
                }
            }
        }
    }

    /// The pass has waited out the reconcile delay: by assumption A1 (ADR 0003) every entity is
    /// now listed.
    fn wait_lag(&self, world: &mut World, p: ProcId) {
        let Proc::Reconciling { pass, .. } = world.procs[p].clone() else {
            unreachable!("enabled only when reconciling")
        };
        if !self.mutant(Mutant::IgnoreLag) {
            world.entities.iter_mut().for_each(|e| e.visible = true);
        }
        world.procs[p] = Proc::Reconciling { pass, waited: true };
    }

    /// An operator, reading the rail's dashboard (ground truth), resolves a quarantine through
    /// the driver's operator edges.
    fn operator(&self, world: &mut World) {
        let view = self.view(world, false).expect("a quarantined intent");
        let config = driver_config(0, world.starts[0]);
        let commit = match world.ours().as_slice() {
            [] => interlock_driver::operator::resolve_not_applied(&config, NOW_MS, &view, "ops"),
            [id] => {
                interlock_driver::operator::resolve_applied(&our_key(), &entity_name(*id), "ops")
            }
            _ => unreachable!("enabled only with at most one of ours"),
        };
        let resolved = self.commit(world, 0, &commit, false);
        // Only `MatchByAmount` records an entity that is not ours (the phantom it is caught
        // for); the machine then refuses to file ours under it, and the intent stays put.
        let phantom = matches!(resolved, Err(Refusal::Illegal(Illegal::OtherEntity { .. })));
        assert!(
            resolved.is_ok() || (phantom && self.mutant(Mutant::MatchByAmount)),
            "an operator's resolution of a quarantine is always an edge: {resolved:?}"
        );
    }

    /// An operator who misread the rail: "not applied" for an intent whose entity is on record,
    /// or "applied as" someone else's refund (entity 0). `step` refuses both; a mutant that drops
    /// the refusal lets the first retry and pay again, the second record a phantom.
    fn careless_operator(&self, world: &mut World, not_applied: bool) {
        world.careless_left -= 1;
        let view = self.view(world, false).expect("a quarantined intent");
        let config = driver_config(0, world.starts[0]);
        let commit = if not_applied {
            interlock_driver::operator::resolve_not_applied(&config, NOW_MS, &view, "ops")
        } else {
            interlock_driver::operator::resolve_applied(&our_key(), &entity_name(0), "ops")
        };
        let resolved = self.commit(world, 0, &commit, false);
        world.careless_refused |= resolved.is_err();
        let dropped = if not_applied {
            self.mutant(Mutant::NotAppliedDespiteEntity)
        } else {
            self.mutant(Mutant::AppliedAsAnotherEntity)
        };
        assert_eq!(
            resolved.is_ok(),
            dropped,
            "a careless resolution of a recorded entity is refused unless a mutant drops the guard: {resolved:?}"
        );
    }

    fn rail(&self, world: &mut World, i: usize, outcome: RailOutcome) {
        let call = world.wire.remove(i);
        let applies = matches!(
            outcome,
            RailOutcome::Apply
                | RailOutcome::ApplyThenAmbiguous
                | RailOutcome::ApplyThenReplay
                | RailOutcome::ApplyThenReject
                | RailOutcome::ApplyOtherAmount
                | RailOutcome::ApplyOtherAmountThenAmbiguous
        );
        let otherwise = matches!(
            outcome,
            RailOutcome::ApplyOtherAmount | RailOutcome::ApplyOtherAmountThenAmbiguous
        );
        match outcome {
            RailOutcome::Apply => {}
            RailOutcome::Reject | RailOutcome::ApplyThenReject => world.rejections_left -= 1,
            RailOutcome::ApplyThenAmbiguous | RailOutcome::AmbiguousNotApplied => {
                world.ambiguous_left -= 1
            }
            RailOutcome::ApplyThenReplay => world.replays_left -= 1,
            RailOutcome::ApplyOtherAmount | RailOutcome::ApplyOtherAmountThenAmbiguous => {
                world.misapplied_left -= 1
            }
        }
        if applies {
            world.entities.push(Entity {
                stamp: our_sik(),
                amount_minor: if otherwise {
                    REFUND_MINOR - 1
                } else {
                    REFUND_MINOR
                },
                // Read lag: a new entity is listed only once the reconcile delay has passed.
                visible: false,
            });
        }
        let reply = match outcome {
            RailOutcome::Apply | RailOutcome::ApplyOtherAmount => {
                Reply::Entity(world.entities.len() - 1)
            }
            RailOutcome::Reject | RailOutcome::ApplyThenReject => Reply::Rejected,
            RailOutcome::ApplyThenAmbiguous
            | RailOutcome::AmbiguousNotApplied
            | RailOutcome::ApplyOtherAmountThenAmbiguous => Reply::Ambiguous,
            RailOutcome::ApplyThenReplay => Reply::Entity(0),
        };
        // The reply reaches the caller only if it is still waiting for this very attempt.
        if let Proc::Calling {
            proposal,
            attempt_seq,
        } = &world.procs[call.from]
            && *attempt_seq == call.attempt_seq
        {
            world.procs[call.from] = Proc::Replied {
                proposal: proposal.clone(),
                reply,
            };
        }
    }

    fn read_page(&self, world: &mut World, p: ProcId, list_fails: bool) {
        let Proc::Reconciling { pass, waited } = world.procs[p].clone() else {
            unreachable!("enabled only while reading")
        };
        let (mut pass, at) = pass_resume(*pass);
        let page = if list_fails {
            Err(RailError::Unavailable("partition".into()))
        } else {
            Ok(list_page(self, world, at.skip as usize))
        };
        pass.handle_page(page);
        self.run_pass(world, p, pass, waited);
    }
}

/// The parked pass and the page it asked for.
fn pass_resume(pass: Pass) -> (Pass, interlock_driver::rail::PageAt) {
    let mut pass = pass;
    match pass.poll_command() {
        Some(PassCommand::ListPage { at, .. }) => (pass, at),
        other => unreachable!("a parked pass waits for a page, got {other:?}"),
    }
}
