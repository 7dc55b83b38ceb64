//! `interlock-chaos soak`: steady mixed load on one ledger for minutes or an hour, with rail
//! faults and periodic SIGKILLs, sampled every interval (RSS, open descriptors, ledger bytes per
//! intent, p99 of the agent's calls) and judged at the end as the matrix judges a trial, over
//! every intent: never two, never unknown.
//!
//! One proxy at a time over one ledger and one journal, with `agents` agents calling it at
//! once on its one session (each at `rate`): with more than one, their money calls meet in
//! the ledger's group commit (ADR 0009), so a SIGKILL lands while several intents share an
//! open batch, and a duplicate can race its original. Each *generation* of the
//! proxy serves for `kill_every` with the mock started under the next fault of [`FAULTS`]
//! (aimed at the next few money calls), then is SIGKILLed wherever it is (calls in flight) and
//! restarted: boot recovery takes over what it left. The load mixes new refunds, new
//! settlements, reads and duplicates of earlier money calls (which must replay, never pay).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use interlock_machine::State;
use serde_json::{Map, Value, json};

use crate::ledger::LedgerAt;
use crate::proc::{self, Ended, Files, Proxy, Reply, Start};
use crate::rng::Rng;
use crate::trial::under_way;
use crate::verdict;
use crate::world::{self, Bins, PAYMENT};

/// The longest soak the command accepts (a day).
pub const MINUTES_MAX: u32 = 24 * 60;
/// The most agent calls a second the command accepts (per agent).
pub const RATE_MAX: u32 = 50;
/// The most agents calling at once the command accepts.
pub const AGENTS_MAX: u32 = 32;
/// The longest a generation's closing burst runs before its SIGKILL (see `burst`).
pub const BURST_KILL_AFTER_MS_MAX: u64 = 8;
/// The most samples kept (a day of minutes).
pub const SAMPLES_MAX: usize = 24 * 60;
/// Latencies kept per sample for its p99.
pub const LATENCIES_PER_SAMPLE_MAX: usize = 100_000;
/// How long the end waits for every intent to come to rest.
pub const REST_WAIT_MAX: Duration = Duration::from_secs(300);
/// The soak's balance and payment: room for a day of settlements and refunds.
pub const SOAK_BALANCE: u64 = 1_000_000_000;
/// See [`SOAK_BALANCE`].
pub const SOAK_PAYMENT_AMOUNT: u64 = 100_000_000_000;

/// The mock's faults by generation, in turn; `{n}` is the next money call's number, so each
/// generation's fault meets its first few money calls.
pub const FAULTS: [&str; 8] = [
    "none",
    "timeout_after_apply@{n}-{m}",
    "http_5xx_applied@{n}-{m}",
    "dup_response@{n}-{m}",
    "timeout_before_apply@{n}-{m}",
    "http_5xx_not_applied@{n}-{m}",
    "conn_reset@{n}",
    "read_lag=1500",
];

/// What to run.
#[derive(Debug, Clone)]
pub struct SoakPlan {
    /// How long the load runs.
    pub duration: Duration,
    /// How often a sample is taken.
    pub sample_every: Duration,
    /// Agent calls a second, per agent.
    pub rate: u32,
    /// Agents calling at once, each on its own loop over the one session (1 to
    /// [`AGENTS_MAX`]).
    pub agents: u32,
    /// How long a proxy generation serves before it is SIGKILLed.
    pub kill_every: Duration,
    /// The seed the load derives from.
    pub seed: u64,
}

/// One sample.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// Seconds since the start.
    pub at_secs: f64,
    /// The proxy's resident set, KiB (the generation serving at the sample).
    pub rss_kib: u64,
    /// Its open file descriptors.
    pub fds: u64,
    /// Intents in the ledger.
    pub intents: u64,
    /// Ledger bytes (the file and its WAL) per intent.
    pub bytes_per_intent: f64,
    /// Agent calls answered in the interval.
    pub calls: u64,
    /// p99 of those calls, ms.
    pub p99_ms: f64,
}

/// The whole run.
#[derive(Debug, Clone, Default)]
pub struct SoakOutcome {
    /// Samples, in order.
    pub samples: Vec<Sample>,
    /// Agent calls by what they asked for.
    pub calls: BTreeMap<&'static str, u64>,
    /// Answers by outcome.
    pub answers: BTreeMap<String, u64>,
    /// Generations SIGKILLed.
    pub kills: u64,
    /// The most agent calls seen in flight at once.
    pub in_flight_max: u32,
    /// The most agent calls in flight when a SIGKILL landed.
    pub killed_in_flight_max: u32,
    /// Entities the rail created.
    pub entities: usize,
    /// Intents in the ledger at the end, by state.
    pub states: BTreeMap<String, u64>,
    /// What broke "never two, never unknown", or the run itself.
    pub violations: Vec<String>,
    /// Wall time.
    pub elapsed: Duration,
}

/// Runs the soak in a fresh directory `dir`.
pub async fn run(bins: &Bins, dir: PathBuf, plan: &SoakPlan) -> SoakOutcome {
    let started = Instant::now();
    let mut outcome = SoakOutcome::default();
    if let Err(e) = soak(bins, dir, plan, &mut outcome, started).await {
        outcome.violations.push(format!("TRIAL_ERROR: {e}"));
    }
    outcome.elapsed = started.elapsed();
    outcome
}

/// A money call the agent made, to repeat as a duplicate.
#[derive(Clone)]
struct Asked {
    tool: &'static str,
    args: Map<String, Value>,
}

/// What the agents share: the load's generator and what was counted. Held for bookkeeping
/// only, never across a call.
struct Load {
    rng: Rng,
    asked: Vec<Asked>,
    refunds: u64,
    settlements: u64,
    latencies: Vec<f64>,
    next_sample: Instant,
    in_flight: u32,
    outcome: SoakOutcome,
}

/// The proxy back from the agents, once every one of their tasks has ended.
fn sole(proxy: Arc<Proxy>) -> Result<Proxy, String> {
    Arc::try_unwrap(proxy)
        .map_err(|_| "an agent still holds the proxy after its task ended".to_owned())
}

fn lock(load: &Mutex<Load>) -> MutexGuard<'_, Load> {
    // Bookkeeping only: a lane that panicked left counters, never a half-made call.
    load.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

async fn soak(
    bins: &Bins,
    dir: PathBuf,
    plan: &SoakPlan,
    outcome: &mut SoakOutcome,
    started: Instant,
) -> Result<(), String> {
    if !(1..=AGENTS_MAX).contains(&plan.agents) {
        return Err(format!(
            "{} agents: the soak takes 1 to {AGENTS_MAX}",
            plan.agents
        ));
    }
    let files = files(bins, dir)?;
    let load = Arc::new(Mutex::new(Load {
        rng: Rng::for_trial(plan.seed, "soak", 0),
        asked: Vec::new(),
        refunds: 0,
        settlements: 0,
        latencies: Vec::new(),
        next_sample: started + plan.sample_every,
        in_flight: 0,
        outcome: std::mem::take(outcome),
    }));
    let end = started + plan.duration;
    let mut generation = 0usize;
    let result = loop {
        if Instant::now() >= end {
            break Ok(());
        }
        let faults = generation_faults(bins, &files, generation)?;
        let name = format!("g{generation}");
        let proxy = match proc::start_with(bins, &files, &name, None, &faults).await? {
            Start::Serving(proxy) => Arc::new(*proxy),
            Start::Ended { how, .. } => {
                break Err(format!("{name} ended before serving: {how:?}"));
            }
        };
        let kill_at = (Instant::now() + plan.kill_every).min(end);
        let mut lanes = tokio::task::JoinSet::new();
        for _ in 0..plan.agents {
            let (proxy, load, files) = (Arc::clone(&proxy), Arc::clone(&load), files.clone());
            let (sample_every, pause) = (plan.sample_every, Duration::from_secs(1) / plan.rate);
            lanes.spawn(async move {
                agent(&proxy, &load, &files, started, kill_at, sample_every, pause).await
            });
        }
        let mut failed = None;
        while let Some(lane) = lanes.join_next().await {
            match lane {
                Ok(Ok(())) => {}
                Ok(Err(e)) => failed = failed.or(Some(e)),
                Err(e) => failed = failed.or(Some(format!("an agent's task failed: {e}"))),
            }
        }
        if let Some(e) = failed {
            let _ = sole(proxy)?.kill().await;
            break Err(e);
        }
        if Instant::now() < end {
            if plan.agents > 1 {
                burst(&proxy, &load, plan.agents).await;
            }
            let proxy = sole(proxy)?;
            // The calls the agents left in flight: the proxy is still serving them.
            let in_flight = std::mem::take(&mut lock(&load).in_flight);
            let ended = proxy.kill().await;
            let outcome = &mut lock(&load).outcome;
            outcome.killed_in_flight_max = outcome.killed_in_flight_max.max(in_flight);
            if ended != Ended::Killed {
                outcome.violations.push(format!(
                    "UNCLEAN_EXIT: {name} ended {ended:?} under SIGKILL"
                ));
            }
            outcome.kills += 1;
            generation += 1;
        } else {
            let proxy = sole(proxy)?;
            let mut settled = SoakOutcome::default();
            settle(&proxy, &files, &mut settled).await?;
            let ended = proxy.stop().await;
            let outcome = &mut lock(&load).outcome;
            outcome.violations.append(&mut settled.violations);
            if !ended.is_clean() {
                outcome.violations.push(format!(
                    "UNCLEAN_EXIT: {name} ended {ended:?} when asked to stop"
                ));
            }
        }
    };
    *outcome = std::mem::take(&mut lock(&load).outcome);
    result?;
    judge(bins, &files, outcome)
}

/// One agent's loop on the generation's proxy until `kill_at`: the next call of the shared
/// load, its answer counted, a sample taken when one is due.
async fn agent(
    proxy: &Proxy,
    load: &Mutex<Load>,
    files: &Files,
    started: Instant,
    kill_at: Instant,
    sample_every: Duration,
    pause: Duration,
) -> Result<(), String> {
    while Instant::now() < kill_at {
        let asked_at = Instant::now();
        if !call_once(proxy, load, kill_at).await {
            return Ok(());
        }
        {
            let mut shared = lock(load);
            let shared = &mut *shared;
            if shared.latencies.len() < LATENCIES_PER_SAMPLE_MAX {
                shared
                    .latencies
                    .push(asked_at.elapsed().as_secs_f64() * 1e3);
            }
            if Instant::now() >= shared.next_sample && shared.outcome.samples.len() < SAMPLES_MAX {
                let taken = sample(proxy, files, started, &mut shared.latencies)?;
                shared.outcome.samples.push(taken);
                shared.next_sample += sample_every;
            }
        }
        tokio::time::sleep(pause).await;
    }
    Ok(())
}

/// The next call of the shared load, counted in flight until it is answered; `false` when
/// `deadline` came first. A call cut off by the deadline stays counted as in flight: the proxy
/// is still serving it when the SIGKILL lands, and its answer dies with it.
async fn call_once(proxy: &Proxy, load: &Mutex<Load>, deadline: Instant) -> bool {
    let (tool, args) = {
        let mut shared = lock(load);
        let shared = &mut *shared;
        let (what, tool, args) = next_call(
            &mut shared.rng,
            &mut shared.asked,
            &mut shared.refunds,
            &mut shared.settlements,
        );
        *shared.outcome.calls.entry(what).or_default() += 1;
        shared.in_flight += 1;
        shared.outcome.in_flight_max = shared.outcome.in_flight_max.max(shared.in_flight);
        (tool, args)
    };
    let reply = tokio::select! {
        reply = proxy.call(tool, args) => reply,
        () = tokio::time::sleep_until(deadline.into()) => {
            let mut shared = lock(load);
            *shared.outcome.answers.entry("killed mid-call".to_owned()).or_default() += 1;
            return false;
        }
    };
    let mut shared = lock(load);
    shared.in_flight -= 1;
    *shared.outcome.answers.entry(answer_of(&reply)).or_default() += 1;
    true
}

/// With several agents, a generation ends in a burst: every agent calls at once and the
/// SIGKILL follows 1 to [`BURST_KILL_AFTER_MS_MAX`] ms later, while the burst's money calls
/// are being decided, batched and sent, so the kill meets an open batch of several intents.
async fn burst(proxy: &Arc<Proxy>, load: &Arc<Mutex<Load>>, agents: u32) {
    let after = Duration::from_millis(lock(load).rng.between(1, BURST_KILL_AFTER_MS_MAX));
    let deadline = Instant::now() + after;
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..agents {
        let (proxy, load) = (Arc::clone(proxy), Arc::clone(load));
        calls.spawn(async move { call_once(&proxy, &load, deadline).await });
    }
    while calls.join_next().await.is_some() {}
}

/// The trial files, with a mandate whose window and fee budget a day of load stays within.
fn files(bins: &Bins, dir: PathBuf) -> Result<Files, String> {
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let files = Files {
        mandate: dir.join("mandate.yaml"),
        ledger: LedgerAt::File(dir.join("ledger.db")),
        journal: dir.join("rail.db"),
        seed: dir.join("seed.json"),
        dir,
    };
    let mut seed = world::seed();
    seed["balance"] = json!(SOAK_BALANCE);
    seed["payments"][0]["amount"] = json!(SOAK_PAYMENT_AMOUNT);
    let seed = serde_json::to_string_pretty(&seed).expect("the seed serialises");
    std::fs::write(&files.seed, seed).map_err(|e| format!("cannot write the seed: {e}"))?;
    let pins = bins.pins(&files.seed)?;
    let mandate = world::soak_mandate(&pins)?;
    std::fs::write(&files.mandate, mandate)
        .map_err(|e| format!("cannot write the mandate: {e}"))?;
    Ok(files)
}

/// The mock's `--faults` for `generation`, aimed at the next money calls of the journal.
fn generation_faults(bins: &Bins, files: &Files, generation: usize) -> Result<String, String> {
    let made = if files.journal.exists() {
        proc::inspect(bins, &files.journal)?
            .call_counters
            .money_calls
    } else {
        0
    };
    let (n, m) = (made + 1, made + 3);
    Ok(FAULTS[generation % FAULTS.len()]
        .replace("{n}", &n.to_string())
        .replace("{m}", &m.to_string()))
}

/// The next call: a new refund (40%), a new settlement (20%), a read (20%), or a duplicate of
/// an earlier money call (20%). Amounts and descriptions are unique per new call, so each new
/// call is a new intent and each duplicate must replay.
fn next_call(
    rng: &mut Rng,
    asked: &mut Vec<Asked>,
    refunds: &mut u64,
    settlements: &mut u64,
) -> (&'static str, &'static str, Map<String, Value>) {
    let object = |v: Value| match v {
        Value::Object(map) => map,
        _ => unreachable!("a JSON object literal"),
    };
    let roll = rng.between(0, 99);
    if roll >= 80
        && let Some(earlier) = asked.get(rng.between(0, asked.len() as u64 - 1) as usize)
    {
        return ("duplicate", earlier.tool, earlier.args.clone());
    }
    if (60..80).contains(&roll) {
        return (
            "read",
            "fetch_payment",
            object(json!({"payment_id": PAYMENT})),
        );
    }
    let new = if roll < 40 {
        *refunds += 1;
        Asked {
            tool: "create_refund",
            args: object(json!({"payment_id": PAYMENT, "amount": 100 + *refunds})),
        }
    } else {
        *settlements += 1;
        Asked {
            tool: "create_instant_settlement",
            args: object(json!({"amount": 200 + *settlements,
                                "description": format!("soak settlement {settlements}")})),
        }
    };
    asked.push(new.clone());
    let what = if new.tool == "create_refund" {
        "refund"
    } else {
        "settlement"
    };
    (what, new.tool, new.args)
}

fn answer_of(reply: &Reply) -> String {
    match reply {
        Reply::Result { block, .. } => block["outcome"]
            .as_str()
            .or_else(|| block["reason_code"].as_str())
            .unwrap_or("read")
            .to_owned(),
        Reply::Nothing(_) => "no answer (killed)".to_owned(),
    }
}

fn sample(
    proxy: &Proxy,
    files: &Files,
    started: Instant,
    latencies: &mut Vec<f64>,
) -> Result<Sample, String> {
    let (rss_kib, fds) = proxy.footprint().unwrap_or((0, 0));
    let intents = intent_count(files)?;
    let bytes: u64 = [
        ledger_file(files).to_path_buf(),
        ledger_file(files).with_extension("db-wal"),
    ]
    .iter()
    .filter_map(|p| std::fs::metadata(p).ok())
    .map(|m| m.len())
    .sum();
    let calls = latencies.len() as u64;
    let p99_ms = percentile(latencies, 0.99);
    latencies.clear();
    Ok(Sample {
        at_secs: started.elapsed().as_secs_f64(),
        rss_kib,
        fds,
        intents,
        bytes_per_intent: if intents == 0 {
            0.0
        } else {
            bytes as f64 / intents as f64
        },
        calls,
        p99_ms,
    })
}

fn percentile(values: &mut [f64], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((values.len() as f64) * q).ceil() as usize;
    values[rank.clamp(1, values.len()) - 1]
}

/// The soak's ledger: always a file of its own (the soak measures one host's footprint).
fn ledger_file(files: &Files) -> &Path {
    match &files.ledger {
        LedgerAt::File(path) => path,
        LedgerAt::Postgres(_) => unreachable!("the soak builds its ledger as a file"),
    }
}

fn read_only(files: &Files) -> Result<rusqlite::Connection, String> {
    let conn = rusqlite::Connection::open_with_flags(
        ledger_file(files),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .map_err(|e| format!("cannot open the ledger read-only: {e}"))?;
    conn.busy_timeout(Duration::from_secs(5))
        .map_err(|e| format!("busy timeout: {e}"))?;
    Ok(conn)
}

fn intent_count(files: &Files) -> Result<u64, String> {
    read_only(files)?
        .query_row("SELECT count(*) FROM intents", [], |row| row.get(0))
        .map_err(|e| format!("cannot count intents: {e}"))
}

/// Waits (on the last, clean generation) until no intent is under way.
async fn settle(_proxy: &Proxy, files: &Files, outcome: &mut SoakOutcome) -> Result<(), String> {
    let deadline = Instant::now() + REST_WAIT_MAX;
    loop {
        let conn = read_only(files)?;
        let mut statement = conn
            .prepare("SELECT state FROM intents")
            .map_err(|e| format!("cannot read states: {e}"))?;
        let states: Vec<String> = statement
            .query_map([], |row| row.get(0))
            .and_then(Iterator::collect)
            .map_err(|e| format!("cannot read states: {e}"))?;
        let under_way = states
            .iter()
            .filter(|s| State::parse(s).is_some_and(under_way))
            .count();
        if under_way == 0 {
            return Ok(());
        }
        if Instant::now() >= deadline {
            outcome.violations.push(format!(
                "UNRESOLVED: {under_way} intents still under way {REST_WAIT_MAX:?} after the load"
            ));
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Never two, never unknown, over every intent: at most one entity per stamp, every stamped
/// entity the one its intent says `APPLIED`, every `APPLIED` id on the rail, no intent under
/// way, no quarantine (every fault here is one the reconciler can see through), the machine's
/// history invariants and the audit chain.
fn judge(bins: &Bins, files: &Files, outcome: &mut SoakOutcome) -> Result<(), String> {
    let journal = proc::inspect(bins, &files.journal)?;
    let entities = verdict::created_entities(&journal);
    outcome.entities = entities.len();
    let ledger = files.ledger.open()?;
    let cores = ledger
        .cores()
        .map_err(|e| format!("cannot read intents: {e}"))?;
    let mut by_stamp: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for entity in &entities {
        match &entity.stamp {
            Some(stamp) => by_stamp.entry(stamp).or_default().push(&entity.id),
            None => outcome
                .violations
                .push(format!("UNSTAMPED: {} carries no stamp", entity.id)),
        }
    }
    for (stamp, ids) in &by_stamp {
        if ids.len() > 1 {
            outcome
                .violations
                .push(format!("DOUBLE_APPLIED: {stamp}: {}", ids.join(", ")));
        }
    }
    for core in &cores {
        *outcome.states.entry(core.state.to_string()).or_default() += 1;
        let sik = core.sik.as_str();
        let on_rail = by_stamp.get(sik);
        match (core.state, &core.entity_id, on_rail) {
            (State::Applied, Some(id), Some(ids)) if ids.contains(&id.as_str()) => {}
            (State::Applied, id, _) => outcome.violations.push(format!(
                "PHANTOM_SUCCESS: {sik} APPLIED as {id:?}, not on the rail"
            )),
            (state, _, Some(ids)) => outcome.violations.push(format!(
                "SILENT_LOSS: {sik} is {state} but the rail has {}",
                ids.join(", ")
            )),
            (state, _, None) if under_way(state) => outcome
                .violations
                .push(format!("UNRESOLVED: {sik} left {state}")),
            (State::Quarantined, ..) => outcome
                .violations
                .push(format!("NEEDLESS_QUARANTINE: {sik}")),
            _ => {}
        }
    }
    let known: std::collections::BTreeSet<&str> = cores.iter().map(|c| c.sik.as_str()).collect();
    for stamp in by_stamp.keys() {
        if !known.contains(stamp) {
            outcome
                .violations
                .push(format!("SILENT_LOSS: {stamp} on the rail, no such intent"));
        }
    }
    let history = ledger
        .history()
        .map_err(|e| format!("cannot read the audit log: {e}"))?;
    if let Err(v) = interlock_machine::invariants::check_history(&history) {
        outcome.violations.push(format!("INVARIANT: {v:?}"));
    }
    if let Err(e) = ledger.verify_chain() {
        outcome.violations.push(format!("AUDIT_CHAIN: {e}"));
    }
    Ok(())
}

/// Least-squares slope of `values` against minutes, per hour.
pub fn slope_per_hour(samples: &[Sample], value: impl Fn(&Sample) -> f64) -> f64 {
    let n = samples.len() as f64;
    if samples.len() < 2 {
        return 0.0;
    }
    let xs: Vec<f64> = samples.iter().map(|s| s.at_secs / 3_600.0).collect();
    let ys: Vec<f64> = samples.iter().map(value).collect();
    let (mx, my) = (xs.iter().sum::<f64>() / n, ys.iter().sum::<f64>() / n);
    let sxx: f64 = xs.iter().map(|x| (x - mx) * (x - mx)).sum();
    let sxy: f64 = xs.iter().zip(&ys).map(|(x, y)| (x - mx) * (y - my)).sum();
    if sxx == 0.0 { 0.0 } else { sxy / sxx }
}

/// The results, in Markdown: the figures, the per-sample table, the slopes, the verdict.
pub fn results_markdown(
    outcome: &SoakOutcome,
    plan: &SoakPlan,
    command: &str,
    provenance: &str,
    date: &str,
) -> String {
    let mut out = String::new();
    out.push_str("# Soak results\n\nMachine-written by `interlock-chaos soak`; do not edit by hand, run the command again.\n\n");
    let _ = writeln!(out, "- date (UTC): {date}");
    let _ = writeln!(out, "- binaries: {provenance}");
    let _ = writeln!(out, "- command: `{command}`");
    let _ = writeln!(
        out,
        "- load: {} agent(s) at once, {} calls/s each, for {:.0} s, a SIGKILL every {} s, a sample every {} s, seed {}",
        plan.agents,
        plan.rate,
        outcome.elapsed.as_secs_f64(),
        plan.kill_every.as_secs(),
        plan.sample_every.as_secs(),
        plan.seed
    );
    let _ = writeln!(out, "- **{}**\n", summary(outcome));
    let _ = writeln!(
        out,
        "Calls: {}. Answers: {}. Intents at the end: {}. Calls in flight at once: at most {}; at a SIGKILL, at most {}.\n",
        join(&outcome.calls),
        join(&outcome.answers),
        join(&outcome.states),
        outcome.in_flight_max,
        outcome.killed_in_flight_max
    );
    out.push_str("| t (s) | RSS (KiB) | fds | intents | ledger bytes / intent | calls | p99 (ms) |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for s in &outcome.samples {
        let _ = writeln!(
            out,
            "| {:.0} | {} | {} | {} | {:.0} | {} | {:.1} |",
            s.at_secs, s.rss_kib, s.fds, s.intents, s.bytes_per_intent, s.calls, s.p99_ms
        );
    }
    let samples = &outcome.samples;
    let _ = writeln!(
        out,
        "\nSlopes (least squares, per hour): RSS {:+.0} KiB/h, fds {:+.1}/h, ledger bytes per intent {:+.0}/h, p99 {:+.1} ms/h.",
        slope_per_hour(samples, |s| s.rss_kib as f64),
        slope_per_hour(samples, |s| s.fds as f64),
        slope_per_hour(samples, |s| s.bytes_per_intent),
        slope_per_hour(samples, |s| s.p99_ms),
    );
    if !outcome.violations.is_empty() {
        out.push_str("\n## Violations\n\n");
        for v in &outcome.violations {
            let _ = writeln!(out, "- {v}");
        }
    }
    out
}

/// One line: calls, kills, entities, violations.
pub fn summary(outcome: &SoakOutcome) -> String {
    format!(
        "{} calls, {} SIGKILLs, {} entities on the rail, {} samples, {} violations",
        outcome.calls.values().sum::<u64>(),
        outcome.kills,
        outcome.entities,
        outcome.samples.len(),
        outcome.violations.len()
    )
}

fn join<K: std::fmt::Display>(counts: &BTreeMap<K, u64>) -> String {
    counts
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}
