//! The verdict on a trial, read from the rail's journal (ground truth) and the ledger, never
//! from what the proxy answered: "never two, never unknown".

use std::fmt;

use interlock_machine::invariants::{self, RailEntity};
use interlock_machine::{EventKind, IntentCore, State};
use interlock_rail_mock::harness::{EntityKind, Inspection};
use interlock_spec::action::STAMP_NOTE_KEY;
use interlock_spec::ids::Sik;

/// What went wrong in a trial.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// More than one entity for the one action asked for.
    DoubleApplied,
    /// An intent left `IN_FLIGHT`, `UNKNOWN`, `RECONCILING` or `FAILED_TERMINAL` (a rail refusal
    /// not yet verified) once the rail is healthy and recovery ran.
    Unresolved,
    /// The ledger says `APPLIED` and names no entity the rail has.
    PhantomSuccess,
    /// An entity carries an intent's stamp but the ledger does not say `APPLIED` with its id
    /// (quarantine excepted), or carries a stamp no intent has.
    SilentLoss,
    /// The ledger's `APPLIED` names an entity that is not this intent's: another stamp, another
    /// payment or another amount.
    WrongEntity,
    /// The trial ended with its intent at rest but not `APPLIED` (`QUARANTINED`, `HELD`,
    /// `AUTHORIZED`, `CONFIRMED_NOT_APPLIED`), or with no intent at all, though the agent
    /// retried and the operator resolved what was quarantined.
    Stuck,
    /// The intent was quarantined under a fault profile that leaves the rail readable: a
    /// liveness failure even when the trial's operator then settled it.
    NeedlessQuarantine,
    /// `interlock resolve`, run as the operator would, failed.
    ResolveFailed,
    /// The action, within every limit, ended refused.
    Refused,
    /// An entity without our stamp: money moved that no intent can account for.
    Unstamped,
    /// The armed kill point did not fire although the trial passes it.
    KillDidNotFire,
    /// A process ended neither by its armed kill nor by a clean exit: a panic, a crash, or it
    /// would not stop and the matrix killed it.
    UncleanExit,
    /// A history predicate of the machine (I1–I6, the core sentence) failed over the ledger.
    Invariant,
    /// The audit chain does not verify.
    AuditChain,
    /// An entity of ours moved another amount than asked, and the ledger took it as applied on
    /// the rail's word (or a pass's) instead of quarantining it for an operator.
    TermsUnchecked,
    /// The trial itself could not be run as written (a process would not start, …).
    TrialError,
}

impl Kind {
    /// The name in tables.
    pub const fn name(self) -> &'static str {
        match self {
            Kind::DoubleApplied => "DOUBLE_APPLIED",
            Kind::Unresolved => "UNRESOLVED",
            Kind::PhantomSuccess => "PHANTOM_SUCCESS",
            Kind::TermsUnchecked => "TERMS_UNCHECKED",
            Kind::SilentLoss => "SILENT_LOSS",
            Kind::WrongEntity => "WRONG_ENTITY",
            Kind::Stuck => "STUCK",
            Kind::NeedlessQuarantine => "NEEDLESS_QUARANTINE",
            Kind::ResolveFailed => "RESOLVE_FAILED",
            Kind::Refused => "REFUSED",
            Kind::Unstamped => "UNSTAMPED",
            Kind::KillDidNotFire => "KILL_DID_NOT_FIRE",
            Kind::UncleanExit => "UNCLEAN_EXIT",
            Kind::Invariant => "INVARIANT",
            Kind::AuditChain => "AUDIT_CHAIN",
            Kind::TrialError => "TRIAL_ERROR",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One violation and what showed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Which.
    pub kind: Kind,
    /// The evidence, for a person.
    pub detail: String,
}

/// The subject a settlement is about, as the engine names it.
pub const BALANCE_SUBJECT: &str = interlock_engine::rail::BALANCE_SUBJECT;

/// An entity the rail created during the trial (seeded ones are not counted): a refund or a
/// settlement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entity {
    /// The rail's id.
    pub id: String,
    /// What it is about: the payment refunded, or [`BALANCE_SUBJECT`].
    pub subject: String,
    /// The amount asked for, in paise (`amount`, or a settlement's `amount_requested`).
    pub amount: u64,
    /// `notes.interlock_sik`, if present.
    pub stamp: Option<String>,
}

/// The refunds and settlements the rail created (ids the mock mints: `rfnd_MOCK…`,
/// `setlod_MOCK…`), from `inspect`.
pub fn created_entities(journal: &Inspection) -> Vec<Entity> {
    journal
        .entities()
        .filter(|e| match e.kind {
            EntityKind::Refund => e.id.starts_with("rfnd_MOCK"),
            EntityKind::Settlement => e.id.starts_with("setlod_MOCK"),
        })
        .map(|e| Entity {
            id: e.id.to_owned(),
            subject: e.payment_id.unwrap_or(BALANCE_SUBJECT).to_owned(),
            amount: e.amount,
            stamp: e.note(STAMP_NOTE_KEY).map(str::to_owned),
        })
        .collect()
}

/// What the ledger says happened, as the verdict reads it: who decided, who claimed which
/// lease, and every state the intent passed through. Read from the file after every process
/// has stopped (the ledger is ground truth for the proxies' own history).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerFacts {
    /// Every row of `decisions`, in order.
    pub decisions: Vec<Decision>,
    /// Every audit record, in order.
    pub steps: Vec<Step>,
    /// Every row of `intent_attempts`, in order.
    pub attempts: Vec<Attempt>,
    /// `pages_scanned` of every reconcile finding, in order.
    pub pages_scanned: Vec<u32>,
}

/// One decision: which engine instance (process start) decided, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The engine's instance id (`ilk-<pid>-<nonce>`).
    pub instance_id: String,
    /// `AUTHORIZED`, `HELD`, `REFUSED`.
    pub outcome: String,
}

/// One audit record of an intent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// Its sequence number.
    pub seq: u64,
    /// The event's name (`ATTEMPT_STARTED`, …) or `INSERTED`.
    pub kind: String,
    /// The intent.
    pub sik: String,
    /// The state it moved to.
    pub to: State,
    /// The lease's holder after the step (set exactly while the intent does rail work).
    pub lease_owner: Option<String>,
}

/// One attempt row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// Its number.
    pub attempt_seq: u32,
    /// `APPLIED`, `REJECTED`, `AMBIGUOUS`, or none while open.
    pub outcome: Option<String>,
    /// The rail's words or the proxy's reading of them.
    pub detail: Option<String>,
}

impl LedgerFacts {
    /// Audit records that moved an intent into `QUARANTINED`.
    pub fn quarantines(&self) -> impl Iterator<Item = &Step> {
        self.steps.iter().filter(|s| s.to == State::Quarantined)
    }

    /// Instance ids in the ledger (deciders and lease holders) that name no process of the
    /// trial: the ledger cannot then say who did what.
    pub fn unattributed(&self, processes: &[(u32, String)]) -> Vec<String> {
        let known =
            |id: &str| instance_pid(id).is_some_and(|pid| name_of(processes, pid).is_some());
        let mut unknown: Vec<String> = self
            .decisions
            .iter()
            .map(|d| d.instance_id.as_str())
            .chain(self.steps.iter().filter_map(|s| s.lease_owner.as_deref()))
            .filter(|id| !known(id))
            .map(str::to_owned)
            .collect();
        unknown.sort();
        unknown.dedup();
        unknown
    }

    fn by(&self, kind: &str, pid: u32) -> Option<&Step> {
        self.steps.iter().find(|s| {
            s.kind == kind && s.lease_owner.as_deref().and_then(instance_pid) == Some(pid)
        })
    }

    /// Whether process `pid` claimed an attempt and died holding it: the intent's next record
    /// after its `ATTEMPT_STARTED` is a `LEASE_EXPIRED`, not the attempt's own outcome.
    fn died_holding_an_attempt(&self, pid: u32) -> bool {
        self.steps.iter().enumerate().any(|(i, claim)| {
            claim.kind == "ATTEMPT_STARTED"
                && claim.lease_owner.as_deref().and_then(instance_pid) == Some(pid)
                && self.steps[i + 1..]
                    .iter()
                    .find(|next| next.sik == claim.sik)
                    .is_some_and(|next| next.kind == "LEASE_EXPIRED")
        })
    }
}

/// The process id in an engine instance id, as the proxy names its instances
/// (`ilk-<pid>-<16 hex digits>`, `proxy/src/cli.rs`). `None` for any other shape, which the
/// trial reports rather than guess about.
pub fn instance_pid(instance_id: &str) -> Option<u32> {
    let (pid, nonce) = instance_id.strip_prefix("ilk-")?.split_once('-')?;
    if nonce.is_empty() || !nonce.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    pid.parse().ok()
}

fn name_of(processes: &[(u32, String)], pid: u32) -> Option<&str> {
    processes
        .iter()
        .find(|(p, _)| *p == pid)
        .map(|(_, name)| name.as_str())
}

/// What became of one armed kill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KillVerdict {
    /// The process ended by SIGKILL at its point.
    Landed,
    /// A race cell's armed process never reached its point, and the ledger shows why.
    LostRace(String),
    /// The point was on the process's path and did not fire.
    DidNotFire(String),
}

/// One armed process generation and its kill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kill {
    /// The process (`a1`, `a2`).
    pub process: String,
    /// Its `FAILPOINTS`.
    pub spec: String,
    /// The verdict.
    pub verdict: KillVerdict,
}

/// Why the armed process `pid` of a race cell, which ended cleanly without its kill, did not
/// die at the point armed by `spec`, from the ledger. A miss is a lost race only when the
/// ledger shows the process never did the step that leads to its point:
///
/// - `before_wal` is the first thing every proposal does, before it reads the ledger: no race
///   can keep a proposal from it, so a miss there never is one.
/// - the call-path points (`after_wal_before_call` … `after_commit_before_ack`) follow its
///   claim of an attempt (`ATTEMPT_STARTED` under its lease).
/// - `during_reconcile` comes in every pass it starts (`RECONCILE_STARTED` under its lease).
/// - `during_recovery` (armed for boot recovery's third round) is reached whenever the process
///   before it (`earlier`) died holding an attempt: its lease keeps everyone off the intent
///   for rounds 0 and 1.
pub fn race_miss(
    spec: &str,
    pid: u32,
    earlier: Option<u32>,
    facts: &LedgerFacts,
    processes: &[(u32, String)],
) -> KillVerdict {
    let point = spec.split_once('=').map_or(spec, |(point, _)| point);
    let me = name_of(processes, pid)
        .unwrap_or("the armed proxy")
        .to_owned();
    let holder = |kind: &str| {
        facts
            .steps
            .iter()
            .find(|s| s.kind == kind)
            .and_then(|s| s.lease_owner.as_deref())
            .and_then(instance_pid)
            .and_then(|p| name_of(processes, p))
            .map_or("no one".to_owned(), str::to_owned)
    };
    let claimed = facts.by("ATTEMPT_STARTED", pid);
    match point {
        "before_wal" => KillVerdict::DidNotFire(format!(
            "{me}'s proposal passes before_wal before it reads the ledger, whoever wins"
        )),
        "after_wal_before_call"
        | "mid_call"
        | "during_call"
        | "after_call_before_commit"
        | "after_commit_before_ack" => match claimed {
            Some(step) => KillVerdict::DidNotFire(format!(
                "{me} claimed attempt at audit seq {}, so its call path passed the point",
                step.seq
            )),
            None => KillVerdict::LostRace(format!(
                "{me} never claimed an attempt ({} did)",
                holder("ATTEMPT_STARTED")
            )),
        },
        "during_reconcile" => match facts.by("RECONCILE_STARTED", pid) {
            Some(step) => KillVerdict::DidNotFire(format!(
                "{me} started a reconcile pass at audit seq {}",
                step.seq
            )),
            None => KillVerdict::LostRace(format!(
                "{me} started no reconcile pass ({} ran the first)",
                holder("RECONCILE_STARTED")
            )),
        },
        "during_recovery" => match earlier {
            Some(dead) if facts.died_holding_an_attempt(dead) => KillVerdict::DidNotFire(format!(
                "{} died holding an attempt, so {me}'s recovery had an intent to wait out",
                name_of(processes, dead).unwrap_or("the process before")
            )),
            _ => KillVerdict::LostRace(format!(
                "no process died holding an attempt before {me} booted: its recovery had nothing to wait out"
            )),
        },
        other => KillVerdict::DidNotFire(format!("{other}: no rule says what reaches it")),
    }
}

/// Everything the verdict reads, gathered after every process of the trial has stopped.
#[derive(Debug)]
pub struct Evidence {
    /// The ledger's intents.
    pub cores: Vec<IntentCore>,
    /// The machine's history predicates over the ledger's audit records.
    pub history: Result<(), invariants::Violation>,
    /// The audit chain's verification.
    pub chain: Result<(), String>,
    /// The ledger's history as the verdict reads it.
    pub facts: LedgerFacts,
    /// The entities the rail created.
    pub entities: Vec<Entity>,
    /// What the agent's action was about: the payment, or [`BALANCE_SUBJECT`].
    pub subject: String,
    /// The amount it asked for.
    pub amount: u64,
    /// The amount the rail's fault profile commits for it (the asked amount, but for
    /// `short_apply*`): what the `APPLIED` entity must hold.
    pub moved: u64,
    /// Whether the rail's fault profile makes quarantine the right answer (`partition`: nothing
    /// can be proven). Anywhere else a quarantine is a violation.
    pub quarantine_expected: bool,
    /// Whether the rail moves other money than asked (`short_apply*`): then the one quarantine
    /// allowed is the one that records that entity (`RAIL_APPLIED` or `RECONCILE_FOUND_APPLIED`
    /// into `QUARANTINED`).
    pub other_money_expected: bool,
    /// The armed kills and what became of them.
    pub kills: Vec<Kill>,
    /// Processes that ended neither by their armed kill nor cleanly, and how.
    pub unclean_exits: Vec<String>,
    /// `interlock resolve` runs that failed, with what they said.
    pub resolve_failures: Vec<String>,
}

/// Judges a trial at rest: it must end with exactly one entity on the rail, stamped with the
/// intent's key, and the ledger `APPLIED` with that entity's id; every armed kill on the path
/// must have landed; every other process must have stopped cleanly.
pub fn judge(evidence: &Evidence) -> Vec<Violation> {
    let mut found = Vec::new();
    let mut flag = |kind, detail: String| found.push(Violation { kind, detail });
    for kill in &evidence.kills {
        if let KillVerdict::DidNotFire(why) = &kill.verdict {
            flag(
                Kind::KillDidNotFire,
                format!(
                    "{} [{}] did not die at its point: {why}",
                    kill.process, kill.spec
                ),
            );
        }
    }
    for exit in &evidence.unclean_exits {
        flag(Kind::UncleanExit, exit.clone());
    }
    for failure in &evidence.resolve_failures {
        flag(Kind::ResolveFailed, failure.clone());
    }
    for entity in &evidence.entities {
        if entity.stamp.is_none() {
            flag(
                Kind::Unstamped,
                format!("{} carries no {STAMP_NOTE_KEY}", entity.id),
            );
        }
    }
    let entities: Vec<RailEntity> = evidence
        .entities
        .iter()
        .map(|r| RailEntity {
            id: r.id.clone(),
            stamp: r.stamp.as_deref().and_then(|s| Sik::parse(s).ok()),
        })
        .collect();
    if let Err(v) = invariants::never_two(&entities) {
        flag(Kind::DoubleApplied, v.detail);
    } else if evidence.entities.len() > 1 {
        let ids: Vec<&str> = evidence.entities.iter().map(|r| r.id.as_str()).collect();
        flag(
            Kind::DoubleApplied,
            format!("one action asked for, {} on the rail: {ids:?}", ids.len()),
        );
    }
    if evidence.cores.is_empty() {
        flag(
            Kind::Stuck,
            "the trial ended with no intent in the ledger".to_owned(),
        );
    }
    for core in &evidence.cores {
        match core.state {
            State::Applied => judge_applied(core, evidence, &mut flag),
            state if state.is_ambiguous() => flag(
                Kind::Unresolved,
                format!("{} left {}", core.sik, core.state),
            ),
            State::Blocked => flag(
                Kind::Refused,
                format!(
                    "{} ended BLOCKED though it was within every limit",
                    core.sik
                ),
            ),
            // Whatever else it rests in: waiting for a person, proven absent, or never sent.
            _ => flag(
                Kind::Stuck,
                format!(
                    "{} ended {} with {} of its kind on the rail: the agent retried and the operator resolved, so it must end APPLIED",
                    core.sik,
                    core.state,
                    evidence.entities.len()
                ),
            ),
        }
    }
    if let Err(v) = invariants::no_silent_loss(&evidence.cores, &entities) {
        flag(Kind::SilentLoss, v.detail);
    }
    for entity in &evidence.entities {
        if let Some(stamp) = &entity.stamp
            && !evidence.cores.iter().any(|c| c.sik.as_str() == stamp)
        {
            flag(
                Kind::SilentLoss,
                format!("{} carries {stamp}, which no intent has", entity.id),
            );
        }
    }
    let allowed = |step: &Step| {
        evidence.quarantine_expected || (evidence.other_money_expected && records_an_entity(step))
    };
    let needless = evidence.facts.quarantines().find(|step| !allowed(step));
    if let Some(step) = needless {
        flag(
            Kind::NeedlessQuarantine,
            format!(
                "{} was QUARANTINED ({} at audit seq {}) on a rail that answers its lists",
                step.sik, step.kind, step.seq
            ),
        );
    }
    judge_terms(evidence, &mut flag);
    if let Err(v) = &evidence.history {
        flag(Kind::Invariant, format!("{}: {}", v.invariant, v.detail));
    }
    if let Err(e) = &evidence.chain {
        flag(Kind::AuditChain, e.clone());
    }
    found
}

/// A quarantine that records the entity the rail or a pass showed (money moved, not as asked).
fn records_an_entity(step: &Step) -> bool {
    is_entity_event(&step.kind)
}

/// The events that name an entity of ours: the rail's answer and a pass's finding.
fn is_entity_event(kind: &str) -> bool {
    [EventKind::RailApplied, EventKind::ReconcileFoundApplied]
        .iter()
        .any(|k| k.as_str() == kind)
}

/// An entity of ours that moved another amount than asked may end `APPLIED` only by an
/// operator's word, after a quarantine: never by the rail's answer or a pass's finding.
fn judge_terms(evidence: &Evidence, flag: &mut impl FnMut(Kind, String)) {
    let Some(short) = evidence.entities.iter().find(|e| {
        e.amount != evidence.amount
            && evidence
                .cores
                .iter()
                .any(|c| e.stamp.as_deref() == Some(c.sik.as_str()))
    }) else {
        return;
    };
    let by_the_rail = evidence
        .facts
        .steps
        .iter()
        .find(|s| s.to == State::Applied && is_entity_event(&s.kind));
    if let Some(step) = by_the_rail {
        flag(
            Kind::TermsUnchecked,
            format!(
                "{} moved {} where {} was asked, and {} took it as APPLIED at audit seq {}",
                short.id, short.amount, evidence.amount, step.kind, step.seq
            ),
        );
    }
    if !evidence.facts.quarantines().any(records_an_entity) {
        flag(
            Kind::TermsUnchecked,
            format!(
                "{} moved {} where {} was asked, and no quarantine recorded it",
                short.id, short.amount, evidence.amount
            ),
        );
    }
}

fn judge_applied(core: &IntentCore, evidence: &Evidence, flag: &mut impl FnMut(Kind, String)) {
    let named = core.entity_id.as_deref().unwrap_or_default();
    let Some(entity) = evidence.entities.iter().find(|r| r.id == named) else {
        flag(
            Kind::PhantomSuccess,
            format!(
                "{} is APPLIED as {named:?}, which the rail does not have",
                core.sik
            ),
        );
        return;
    };
    let ours = entity.stamp.as_deref() == Some(core.sik.as_str())
        && entity.subject == evidence.subject
        && entity.amount == evidence.moved;
    if !ours {
        flag(
            Kind::WrongEntity,
            format!(
                "{} is APPLIED as {named}, which is {} of {} stamped {:?}; the rail was to move {} of {}",
                core.sik,
                entity.amount,
                entity.subject,
                entity.stamp,
                evidence.moved,
                evidence.subject
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use interlock_machine::IntentCore;

    const SIK: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    const A1: &str = "ilk-101-00112233aabbccdd";
    const B1: &str = "ilk-202-8899aabbccddeeff";
    const A2: &str = "ilk-303-0123456789abcdef";

    fn processes() -> Vec<(u32, String)> {
        vec![
            (101, "a1".to_owned()),
            (202, "b1".to_owned()),
            (303, "a2".to_owned()),
        ]
    }

    fn core(state: State, entity: Option<&str>) -> IntentCore {
        let mut core = IntentCore::proposed(Sik::parse(SIK).unwrap());
        core.state = state;
        core.entity_id = entity.map(str::to_owned);
        core
    }

    fn refund(id: &str, stamp: Option<&str>, amount: u64) -> Entity {
        Entity {
            id: id.to_owned(),
            subject: "pay_X".to_owned(),
            amount,
            stamp: stamp.map(str::to_owned),
        }
    }

    fn evidence(cores: Vec<IntentCore>, entities: Vec<Entity>) -> Evidence {
        Evidence {
            cores,
            history: Ok(()),
            chain: Ok(()),
            facts: LedgerFacts::default(),
            entities,
            subject: "pay_X".to_owned(),
            amount: 500,
            moved: 500,
            quarantine_expected: false,
            other_money_expected: false,
            kills: Vec::new(),
            unclean_exits: Vec::new(),
            resolve_failures: Vec::new(),
        }
    }

    fn applied() -> Evidence {
        evidence(
            vec![core(State::Applied, Some("rfnd_MOCK1"))],
            vec![refund("rfnd_MOCK1", Some(SIK), 500)],
        )
    }

    fn kinds(e: &Evidence) -> Vec<Kind> {
        let mut kinds: Vec<Kind> = judge(e).into_iter().map(|v| v.kind).collect();
        kinds.sort();
        kinds.dedup();
        kinds
    }

    fn step(seq: u64, kind: &str, to: State, owner: Option<&str>) -> Step {
        Step {
            seq,
            kind: kind.to_owned(),
            sik: SIK.to_owned(),
            to,
            lease_owner: owner.map(str::to_owned),
        }
    }

    fn decision(instance: &str, outcome: &str) -> Decision {
        Decision {
            instance_id: instance.to_owned(),
            outcome: outcome.to_owned(),
        }
    }

    #[test]
    fn one_stamped_refund_recorded_as_applied_is_clean() {
        assert_eq!(kinds(&applied()), vec![]);
    }

    #[test]
    fn each_way_of_going_wrong_is_named() {
        let two = evidence(
            vec![core(State::Applied, Some("rfnd_MOCK1"))],
            vec![
                refund("rfnd_MOCK1", Some(SIK), 500),
                refund("rfnd_MOCK2", Some(SIK), 500),
            ],
        );
        assert!(kinds(&two).contains(&Kind::DoubleApplied));
        let phantom = evidence(vec![core(State::Applied, Some("rfnd_MOCK9"))], vec![]);
        assert_eq!(kinds(&phantom), vec![Kind::PhantomSuccess]);
        let lost = evidence(
            vec![core(State::ConfirmedNotApplied, None)],
            vec![refund("rfnd_MOCK1", Some(SIK), 500)],
        );
        assert_eq!(kinds(&lost), vec![Kind::SilentLoss, Kind::Stuck]);
        let wrong = evidence(
            vec![core(State::Applied, Some("rfnd_MOCK1"))],
            vec![refund("rfnd_MOCK1", Some(SIK), 499)],
        );
        assert_eq!(kinds(&wrong), vec![Kind::WrongEntity, Kind::TermsUnchecked]);
        let unknown = evidence(vec![core(State::Unknown, None)], vec![]);
        assert_eq!(kinds(&unknown), vec![Kind::Unresolved]);
        let stuck = evidence(vec![core(State::ConfirmedNotApplied, None)], vec![]);
        assert_eq!(kinds(&stuck), vec![Kind::Stuck]);
        let refused = evidence(vec![core(State::Blocked, None)], vec![]);
        assert_eq!(kinds(&refused), vec![Kind::Refused]);
        let orphan = evidence(
            vec![core(State::Applied, Some("rfnd_MOCK1"))],
            vec![refund("rfnd_MOCK1", None, 500)],
        );
        assert!(kinds(&orphan).contains(&Kind::Unstamped));
        let nobody = evidence(vec![], vec![refund("rfnd_MOCK1", Some(SIK), 500)]);
        assert_eq!(kinds(&nobody), vec![Kind::SilentLoss, Kind::Stuck]);
        let nothing = evidence(vec![], vec![]);
        assert_eq!(kinds(&nothing), vec![Kind::Stuck]);
    }

    /// The trial's agent retries and its operator resolves: every trial must end `APPLIED`.
    /// Quarantine, a hold or an unused authorisation at the end is a trial that did not finish
    /// its refund, whether or not the rail has it.
    #[test]
    fn a_trial_that_ends_short_of_applied_is_stuck() {
        for state in [
            State::Quarantined,
            State::Held,
            State::Authorized,
            State::ConfirmedNotApplied,
        ] {
            let none = evidence(vec![core(state, None)], vec![]);
            assert_eq!(kinds(&none), vec![Kind::Stuck], "{state} with nothing");
        }
        // Quarantine is not a silent loss (the ledger says it does not know), but it is stuck.
        let quarantined = evidence(
            vec![core(State::Quarantined, None)],
            vec![refund("rfnd_MOCK1", Some(SIK), 500)],
        );
        assert_eq!(kinds(&quarantined), vec![Kind::Stuck]);
    }

    #[test]
    fn a_quarantine_is_needless_unless_the_rail_is_partitioned() {
        let mut e = applied();
        e.facts.steps = vec![
            step(5, "QUARANTINE", State::Quarantined, None),
            step(6, "RECONCILE_FOUND_APPLIED", State::Applied, None),
        ];
        assert_eq!(kinds(&e), vec![Kind::NeedlessQuarantine]);
        e.quarantine_expected = true;
        assert_eq!(kinds(&e), vec![]);
    }

    #[test]
    fn a_failed_resolve_a_missed_kill_and_an_unclean_exit_are_violations() {
        let mut e = applied();
        e.resolve_failures = vec!["resolve SIK --applied rfnd_MOCK1: exit 2".to_owned()];
        assert_eq!(kinds(&e), vec![Kind::ResolveFailed]);
        let mut e = applied();
        e.unclean_exits = vec!["a2 ended Other(101)".to_owned()];
        assert_eq!(kinds(&e), vec![Kind::UncleanExit]);
        let mut e = applied();
        e.kills = vec![
            Kill {
                process: "a1".to_owned(),
                spec: "mid_call=return(kill)".to_owned(),
                verdict: KillVerdict::Landed,
            },
            Kill {
                process: "a2".to_owned(),
                spec: "during_reconcile=return(kill)".to_owned(),
                verdict: KillVerdict::LostRace("b1 ran the pass".to_owned()),
            },
        ];
        assert_eq!(kinds(&e), vec![]);
        e.kills[1].verdict = KillVerdict::DidNotFire("a2 ran a pass".to_owned());
        assert_eq!(kinds(&e), vec![Kind::KillDidNotFire]);
    }

    #[test]
    fn instance_ids_name_their_process() {
        assert_eq!(instance_pid(A1), Some(101));
        assert_eq!(instance_pid("ilk-7-ab"), Some(7));
        for bad in ["ilk-7", "ilk--ab", "ilk-x-ab", "ilk-7-xyz", "p1", "ilk-7-"] {
            assert_eq!(instance_pid(bad), None, "{bad}");
        }
        let facts = LedgerFacts {
            decisions: vec![
                decision(A1, "AUTHORIZED"),
                decision("p_other", "AUTHORIZED"),
            ],
            steps: vec![step(
                2,
                "ATTEMPT_STARTED",
                State::InFlight,
                Some("ilk-999-00"),
            )],
            ..LedgerFacts::default()
        };
        assert_eq!(
            facts.unattributed(&processes()),
            vec!["ilk-999-00".to_owned(), "p_other".to_owned()]
        );
    }

    /// b1 won: it decided and claimed. a1 found the intent taken and answered from it.
    fn b1_won() -> LedgerFacts {
        LedgerFacts {
            decisions: vec![decision(B1, "AUTHORIZED")],
            steps: vec![
                step(1, "GATES_PASSED", State::Authorized, None),
                step(2, "ATTEMPT_STARTED", State::InFlight, Some(B1)),
                step(3, "RAIL_APPLIED", State::Applied, None),
            ],
            ..LedgerFacts::default()
        }
    }

    /// a1 won, claimed, and the kill should have stopped it; it carried on instead.
    fn a1_claimed() -> LedgerFacts {
        LedgerFacts {
            decisions: vec![decision(A1, "AUTHORIZED")],
            steps: vec![
                step(1, "GATES_PASSED", State::Authorized, None),
                step(2, "ATTEMPT_STARTED", State::InFlight, Some(A1)),
                step(3, "RAIL_APPLIED", State::Applied, None),
            ],
            ..LedgerFacts::default()
        }
    }

    fn lost(v: &KillVerdict) -> bool {
        matches!(v, KillVerdict::LostRace(_))
    }

    #[test]
    fn a_race_miss_is_a_lost_race_only_when_the_ledger_shows_it() {
        let p = processes();
        for point in [
            "after_wal_before_call",
            "mid_call",
            "during_call",
            "after_call_before_commit",
            "after_commit_before_ack",
        ] {
            let spec = format!("{point}=return(kill)");
            assert!(lost(&race_miss(&spec, 101, None, &b1_won(), &p)), "{point}");
            assert!(
                !lost(&race_miss(&spec, 101, None, &a1_claimed(), &p)),
                "{point}: a1 claimed, so it passed the point"
            );
        }
        // A decision by a1 without its claim (a ledger from before the two were one commit):
        // the call path is reached only by the claim.
        let mut split = b1_won();
        split.decisions = vec![decision(A1, "AUTHORIZED")];
        assert!(lost(&race_miss(
            "during_call=return(kill)",
            101,
            None,
            &split,
            &p
        )));
        // Nothing keeps a proposal from before_wal.
        assert!(!lost(&race_miss(
            "before_wal=return(kill)",
            101,
            None,
            &b1_won(),
            &p
        )));
    }

    #[test]
    fn a_second_order_miss_is_judged_on_its_own_step() {
        let p = processes();
        let mut facts = b1_won();
        // during_reconcile: a2 ran no pass (b1 did) → lost; a2 ran one → it had to fire.
        facts
            .steps
            .push(step(4, "RECONCILE_STARTED", State::Reconciling, Some(B1)));
        assert!(lost(&race_miss(
            "during_reconcile=return(kill)",
            303,
            Some(101),
            &facts,
            &p
        )));
        facts
            .steps
            .push(step(5, "RECONCILE_STARTED", State::Reconciling, Some(A2)));
        assert!(!lost(&race_miss(
            "during_reconcile=return(kill)",
            303,
            Some(101),
            &facts,
            &p
        )));
        // during_recovery: required once a1 died holding its attempt.
        let spec = "during_recovery=2*off->return(kill)";
        assert!(lost(&race_miss(spec, 303, Some(101), &b1_won(), &p)));
        let died = LedgerFacts {
            decisions: vec![decision(A1, "AUTHORIZED")],
            steps: vec![
                step(1, "GATES_PASSED", State::Authorized, None),
                step(2, "ATTEMPT_STARTED", State::InFlight, Some(A1)),
                step(3, "LEASE_EXPIRED", State::Unknown, None),
            ],
            ..LedgerFacts::default()
        };
        assert!(!lost(&race_miss(spec, 303, Some(101), &died, &p)));
        assert!(lost(&race_miss(spec, 303, Some(101), &a1_claimed(), &p)));
    }

    #[test]
    fn only_entities_the_rail_minted_are_counted() {
        let journal: Inspection = serde_json::from_value(serde_json::json!({
            "journal": "rail.db", "currency": "INR", "balance": 0,
            "call_counters": {"list_calls": 0, "money_calls": 2, "read_calls": 0},
            "payments": [], "orders": [],
            "refunds": [
                {"id": "rfnd_SEED000001", "payment_id": "pay_X", "amount": 100, "fee": 0,
                 "tax": 0, "receipt": null, "notes": {}},
                {"id": "rfnd_MOCK0000000001", "payment_id": "pay_X", "amount": 500, "fee": 0,
                 "tax": 0, "notes": {"interlock_sik": SIK}, "receipt": format!("ilk_{SIK}")},
            ],
            "settlements": [
                {"id": "setlod_SEED000001", "amount_requested": 1000, "fees": 0, "tax": 0,
                 "description": null, "notes": {}},
                {"id": "setlod_MOCK0000000001", "amount_requested": 700, "fees": 2, "tax": 0,
                 "description": null, "notes": {"interlock_sik": SIK}},
            ],
        }))
        .unwrap();
        let created = created_entities(&journal);
        assert_eq!(created.len(), 2);
        assert_eq!(created[0].stamp.as_deref(), Some(SIK));
        assert_eq!(created[1].subject, BALANCE_SUBJECT);
        assert_eq!(created[1].amount, 700);
    }

    #[test]
    fn a_short_entity_must_be_quarantined_and_settled_by_an_operator() {
        // Taken as applied on the rail's word: the check of its terms was skipped.
        let mut e = evidence(
            vec![core(State::Applied, Some("rfnd_MOCK1"))],
            vec![refund("rfnd_MOCK1", Some(SIK), 499)],
        );
        e.moved = 499;
        e.other_money_expected = true;
        e.facts.steps = vec![step(3, "RAIL_APPLIED", State::Applied, None)];
        assert_eq!(kinds(&e), [Kind::TermsUnchecked]);
        // Quarantined with the entity, then settled by the operator: no violation.
        e.facts.steps = vec![
            step(3, "RAIL_APPLIED", State::Quarantined, None),
            step(4, "OPERATOR_CONFIRMED_APPLIED", State::Applied, None),
        ];
        assert_eq!(kinds(&e), []);
        // A quarantine that records nothing (six inconclusive passes) does not count, and is
        // needless on a rail that answers its lists.
        e.facts.steps = vec![
            step(3, "RECONCILE_INCONCLUSIVE", State::Quarantined, None),
            step(4, "OPERATOR_CONFIRMED_APPLIED", State::Applied, None),
        ];
        assert_eq!(kinds(&e), [Kind::NeedlessQuarantine, Kind::TermsUnchecked]);
        e.facts.steps = vec![
            step(3, "RAIL_APPLIED", State::Quarantined, None),
            step(4, "OPERATOR_CONFIRMED_APPLIED", State::Applied, None),
        ];
        // The operator settled it with the amount the rail did not move: a wrong entity.
        e.moved = 500;
        assert_eq!(kinds(&e), [Kind::WrongEntity]);
    }
}
