//! One scenario on one path: its files, its processes, the history, the agents, the wait for
//! the ledger to settle, and the journal read back.
//!
//! Direct, the agent's endpoint is `interlock-rail-mock` itself. Gated, it is
//! `interlock serve` in front of an `interlock-rail-mock` on the same kind of journal. Both
//! paths get the same seed, the same fault profiles (plus, direct, the rail-side equivalent of
//! a gated kill) and the same harness. With two workers each gets its own process: two mocks on
//! one journal, or two proxies on one ledger, each with its own mock on one journal.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use interlock_rail_mock::harness::MockCommand;
use interlock_spec::mandate::Mandate;
use serde_json::{Value, json};

use super::harness::{Agent, CallTime, Ended, Endpoint, Transcript};
use super::journal::{self, Entity, Journal};
use super::model::{Scenario, Vector};
use crate::Res;
use crate::bins::Bins;
use crate::mcp::{self, Reply};

/// The agent id the bench's mandate authorises.
pub const AGENT_ID: &str = "agent_bench";
/// The gated proxy's bound on one rail call: short, so ambiguous outcomes show in seconds.
pub const PROXY_CALL_TIMEOUT_MS: u64 = 1_000;
/// The gated proxy's lease: the engine's floor, call timeout + `LEASE_MARGIN_MS` (5000). A
/// restart after a kill waits this long for the dead process's lease.
pub const PROXY_LEASE_TTL_MS: u64 = 6_000;
/// How often the gated proxy's reconciler runs.
pub const PROXY_RECONCILE_EVERY_MS: u64 = 200;
/// The longest a run waits, after its agents are done, for the gated ledger to settle every
/// intent (a reconcile pass waits at least 2 s for the rail's lists to catch up).
pub const SETTLE_WAIT_MAX: Duration = Duration::from_secs(15);
/// How often the wait looks at the ledger.
pub const SETTLE_POLL: Duration = Duration::from_millis(200);
/// The bound on one history call.
pub const HISTORY_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Which path a run takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathKind {
    /// The agent talks to the mock rail.
    Direct,
    /// The agent talks to `interlock serve` in front of the mock rail.
    Gated,
}

impl PathKind {
    /// `direct` or `gated`.
    pub fn name(self) -> &'static str {
        match self {
            PathKind::Direct => "direct",
            PathKind::Gated => "gated",
        }
    }
}

/// Whether a named fault was reached: the rail received a call it applies to.
#[derive(Debug, Clone)]
pub struct FaultCheck {
    /// The profile or kill point as the scenario names it.
    pub fault: String,
    /// Whether it was reached.
    pub reached: bool,
    /// The evidence.
    pub detail: String,
}

/// Whether racing workers' first money calls were in flight at the same time, from the
/// transcripts' send and answer times.
#[derive(Debug, Clone)]
pub struct Race {
    /// Per worker, when its first money call was sent and answered, if it made one.
    pub calls: Vec<Option<CallTime>>,
    /// Whether every worker made one and all were in flight together at some instant: the
    /// last was sent before the first was answered.
    pub overlapped: bool,
}

impl Race {
    /// Reads the race off `transcripts` (one per worker).
    pub fn of(transcripts: &[Transcript]) -> Race {
        let calls: Vec<Option<CallTime>> = transcripts
            .iter()
            .map(|t| {
                t.calls
                    .iter()
                    .find(|c| c.money && c.attempt == 0)
                    .map(|c| c.time)
            })
            .collect();
        let times: Vec<CallTime> = calls.iter().flatten().copied().collect();
        let last_sent = times.iter().map(|t| t.sent_at).max();
        let first_answered = times.iter().map(CallTime::answered_at).min();
        let overlapped = times.len() == calls.len()
            && times.len() > 1
            && matches!((last_sent, first_answered), (Some(s), Some(a)) if s < a);
        Race { calls, overlapped }
    }

    /// The evidence, in words: each worker's send and answer times on the run's clock.
    pub fn detail(&self) -> String {
        let ms = |d: Duration| format!("{:.1}", d.as_secs_f64() * 1e3);
        let each: Vec<String> = self
            .calls
            .iter()
            .enumerate()
            .map(|(worker, call)| match call {
                Some(t) => format!(
                    "w{worker} sent at {} ms, answered at {} ms",
                    ms(t.sent_at),
                    ms(t.answered_at())
                ),
                None => format!("w{worker} made no money call"),
            })
            .collect();
        let verdict = if self.overlapped {
            "in flight together"
        } else {
            "not in flight together"
        };
        format!("first money calls {verdict}: {}", each.join("; "))
    }
}

/// Everything one path of one scenario produced.
#[derive(Debug, Clone)]
pub struct PathRun {
    /// The path.
    pub path: PathKind,
    /// One transcript per worker.
    pub transcripts: Vec<Transcript>,
    /// Entities the agents' run created (the seed's and the history's excluded).
    pub new_entities: Vec<Entity>,
    /// The journal after the run.
    pub journal: Journal,
    /// Gated: intents still unsettled when the wait ended (`SIK STATE`).
    pub unsettled: Vec<String>,
    /// Gated: whether `interlock audit verify` accepted the ledger's chain.
    pub chain_ok: Option<bool>,
    /// Servers that died under the agents.
    pub deaths: u32,
    /// Each named fault, and whether it was reached.
    pub faults: Vec<FaultCheck>,
    /// With two or more workers: whether their first money calls overlapped.
    pub race: Option<Race>,
    /// Wall time of the run.
    pub wall: Duration,
    /// Its directory (seed, journal, ledger, logs).
    pub dir: PathBuf,
}

/// What every run of a suite shares.
pub struct Suite {
    /// The binaries.
    pub bins: Bins,
    /// The bench's mandate with the mock's pins, as written for each gated run.
    pub mandate: String,
    /// Where runs put their files.
    pub root: PathBuf,
}

/// Writes `value` as JSON to `path`.
fn write_json(path: &Path, value: &Value) -> Res<()> {
    std::fs::write(path, value.to_string()).map_err(|e| format!("write {}: {e}", path.display()))
}

impl Suite {
    /// Reads the mandate template from `scenarios_dir`, pins it to the mock's tools, and checks
    /// it as `interlock serve` would.
    pub fn prepare(bins: Bins, scenarios_dir: &Path, root: PathBuf) -> Res<Suite> {
        let template_path = scenarios_dir.join(super::MANDATE_FILE);
        let template = std::fs::read_to_string(&template_path)
            .map_err(|e| format!("read {}: {e}", template_path.display()))?;
        let unpinned = Mandate::parse_yaml(&template)
            .map_err(|e| format!("{}: {e}", template_path.display()))?;
        if unpinned.provenance.is_some() {
            return Err(format!(
                "{}: leave provenance out; the run pins the mock's live tools",
                template_path.display()
            ));
        }
        std::fs::create_dir_all(&root).map_err(|e| format!("create {}: {e}", root.display()))?;
        let seed = root.join("pin-seed.json");
        write_json(&seed, &json!({"balance": 0}))?;
        let pins = mcp::pins(&bins.interlock, &bins.mock, &seed)?;
        let field = |v: &Value| {
            v.as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("interlock pin --json: unexpected output {pins}"))
        };
        let mut mandate = template.trim_end().to_owned();
        mandate.push_str(&format!(
            "\nprovenance:\n  server_id: \"{}\"\n  manifest_sha256: \"{}\"\n  pinned_manifests:\n",
            field(&pins["server_id"])?,
            field(&pins["manifest_sha256"])?
        ));
        for tool in unpinned.scope.grants.keys() {
            let pin = field(&pins["tools"][tool.as_str()])
                .map_err(|_| format!("the mock has no tool {tool} to pin"))?;
            mandate.push_str(&format!(
                "    {tool}:\n      sha256: \"{pin}\"\n      trust_tier: pinned\n"
            ));
        }
        Mandate::parse_yaml(&mandate).map_err(|e| format!("the pinned mandate: {e}"))?;
        Ok(Suite {
            bins,
            mandate,
            root,
        })
    }

    /// Runs `scenario` on `path` with `agent`.
    pub async fn run_path(
        &self,
        scenario: &Arc<Scenario>,
        path: PathKind,
        agent: &Arc<dyn Agent>,
    ) -> Res<PathRun> {
        let started = Instant::now();
        let dir = self.root.join(format!("{}-{}", scenario.id, path.name()));
        let ends = Ends {
            epoch: started,
            race: None,
        };
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let files = self.write_files(scenario, &dir)?;
        let rail_faults = rail_faults(scenario, path);
        let history = self.endpoint(scenario, path, &files, &rail_faults, None, &ends)?;
        run_history(scenario, &history).await?;
        history.close().await;
        // What was on the rail before the agents: the seed's refunds, and the history's work.
        let mut baseline: BTreeSet<String> =
            scenario.seed.refunds.iter().map(|r| r.id.clone()).collect();
        if files.journal.exists() {
            let before = journal::inspect(&self.bins.mock, &files.journal)?;
            baseline.extend(before.entities.into_iter().map(|e| e.id));
        }

        // Racing workers' first money calls leave together from one start line, so the race
        // is a race and not two calls that happen to be near each other.
        let workers = usize::try_from(scenario.workers).expect("workers are few");
        let ends = Ends {
            race: (workers > 1).then(|| Arc::new(tokio::sync::Barrier::new(workers))),
            ..ends
        };
        let mut endpoints = Vec::new();
        for worker in 0..scenario.workers {
            endpoints.push(Arc::new(self.endpoint(
                scenario,
                path,
                &files,
                &rail_faults,
                Some(worker),
                &ends,
            )?));
        }
        let mut tasks = Vec::new();
        for (worker, endpoint) in endpoints.iter().enumerate() {
            let (scenario, endpoint, agent) = (
                Arc::clone(scenario),
                Arc::clone(endpoint),
                Arc::clone(agent),
            );
            let worker = u32::try_from(worker).expect("workers are few");
            tasks.push(tokio::spawn(async move {
                agent.run(&scenario, &endpoint, worker).await
            }));
        }
        let mut transcripts = Vec::new();
        for task in tasks {
            transcripts.push(
                task.await
                    .map_err(|e| format!("an agent task failed: {e}"))?,
            );
        }
        // Kept beside the journal for whoever wants to see what the agent was told.
        let record = serde_json::to_value(&transcripts).map_err(|e| format!("transcript: {e}"))?;
        write_json(&dir.join("transcripts.json"), &record)?;
        let unsettled = match path {
            PathKind::Gated if scenario.expect.ledger_settles => {
                self.settle(&files.ledger, &endpoints[0]).await?
            }
            PathKind::Gated => unsettled(&self.bins.interlock, &files.ledger)?,
            PathKind::Direct => Vec::new(),
        };
        for endpoint in &endpoints {
            endpoint.close().await;
        }
        // Each worker's starts, their kill points and how each process ended, for `--keep`.
        let starts: Vec<_> = endpoints.iter().map(|e| e.starts()).collect();
        let starts = serde_json::to_value(&starts).map_err(|e| format!("starts: {e}"))?;
        write_json(&dir.join("starts.json"), &starts)?;
        let journal = journal::inspect(&self.bins.mock, &files.journal)?;
        let new_entities = journal
            .entities
            .iter()
            .filter(|e| !baseline.contains(&e.id))
            .cloned()
            .collect();
        let deaths = endpoints.iter().map(|e| e.deaths()).sum();
        let chain_ok = match path {
            PathKind::Gated => Some(chain_verifies(&self.bins.interlock, &files.ledger)),
            PathKind::Direct => None,
        };
        let race = (scenario.workers > 1).then(|| Race::of(&transcripts));
        let mut faults = fault_checks(scenario, path, &rail_faults, &journal, &endpoints[0]);
        if let Some(race) = &race {
            faults.push(FaultCheck {
                fault: format!("{} workers racing", scenario.workers),
                reached: race.overlapped,
                detail: race.detail(),
            });
        }
        Ok(PathRun {
            path,
            transcripts,
            new_entities,
            journal,
            unsettled,
            chain_ok,
            deaths,
            faults,
            race,
            wall: started.elapsed(),
            dir,
        })
    }

    fn write_files(&self, scenario: &Scenario, dir: &Path) -> Res<Files> {
        let files = Files {
            seed: dir.join("seed.json"),
            journal: dir.join("rail.db"),
            ledger: dir.join("ledger.db"),
            mandate: dir.join("mandate.yaml"),
            overlay: dir.join("overlay.json"),
            dir: dir.to_path_buf(),
        };
        write_json(
            &files.seed,
            &scenario.seed.to_json(scenario.injection.as_ref())?,
        )?;
        std::fs::write(&files.mandate, &self.mandate)
            .map_err(|e| format!("write {}: {e}", files.mandate.display()))?;
        if let Some(injection) = &scenario.injection
            && injection.vector != Vector::Data
        {
            let overlay = match injection.vector {
                Vector::ToolDescription => json!({"describe": {&injection.tool: injection.text}}),
                _ => json!({"add": [{"name": injection.tool, "description": injection.text,
                    "forwards_to": injection.forwards_to}]}),
            };
            write_json(&files.overlay, &overlay)?;
        }
        Ok(files)
    }

    /// The rail's command line: the mock, behind the shim when the scenario poisons the
    /// tool manifest.
    fn rail_command(&self, scenario: &Scenario, files: &Files, faults: &[String]) -> Vec<OsString> {
        let mut command: Vec<OsString> = Vec::new();
        let poisoned = scenario
            .injection
            .as_ref()
            .is_some_and(|i| i.vector != Vector::Data);
        if poisoned {
            command.push(self.bins.bench.clone().into());
            command.extend(["shim".into(), "--overlay".into()]);
            command.push(files.overlay.clone().into());
            command.push("--".into());
        }
        command.extend(
            MockCommand::new(&self.bins.mock)
                .journal(&files.journal)
                .seed(&files.seed)
                .log_level("error")
                .faults(&faults.join(","))
                .argv(),
        );
        command
    }

    /// The endpoint of `worker` (or of the history, for `None`) on `path`.
    fn endpoint(
        &self,
        scenario: &Scenario,
        path: PathKind,
        files: &Files,
        faults: &[String],
        worker: Option<u32>,
        ends: &Ends,
    ) -> Res<Endpoint> {
        let rail = self.rail_command(scenario, files, faults);
        let who = worker.map_or("history".to_owned(), |w| format!("w{w}"));
        let log = files.dir.join(format!("{who}.stderr.log"));
        let race = worker.and(ends.race.clone());
        if path == PathKind::Direct {
            let (env, points) = (Vec::new(), Vec::new());
            return Endpoint::new("the mock rail", rail, env, points, log, ends.epoch, race);
        }
        // Worker 0 carries the kill; its every start uses the kill-point build (later starts
        // unarmed), so the process that recovers is the same code that died.
        let kill = scenario.faults.kill.as_ref().filter(|_| worker == Some(0));
        let interlock = match kill {
            Some(_) => self
                .bins
                .interlock_failpoints
                .clone()
                .ok_or("a kill scenario needs the failpoints build of interlock")?,
            None => self.bins.interlock.clone(),
        };
        let mut command: Vec<OsString> = vec![interlock.into(), "serve".into()];
        command.extend(["--mandate".into(), files.mandate.clone().into()]);
        command.extend(["--db".into(), files.ledger.clone().into()]);
        command.extend(["--agent".into(), AGENT_ID.into()]);
        for (flag, value) in [
            ("--call-timeout-ms", PROXY_CALL_TIMEOUT_MS),
            ("--lease-ttl-ms", PROXY_LEASE_TTL_MS),
            ("--reconcile-every-ms", PROXY_RECONCILE_EVERY_MS),
        ] {
            command.extend([flag.into(), value.to_string().into()]);
        }
        command.push("--".into());
        command.extend(rail);
        let log_level = std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".to_owned());
        let env = vec![("RUST_LOG".to_owned(), log_level)];
        let points = kill.map(|k| k.points.clone()).unwrap_or_default();
        Endpoint::new(
            "interlock serve",
            command,
            env,
            points,
            log,
            ends.epoch,
            race,
        )
    }

    /// Waits until the ledger has no unsettled intent, or [`SETTLE_WAIT_MAX`]. A proxy is kept
    /// running meanwhile (its reconciler does the work); if every one has died, one is started.
    async fn settle(&self, ledger: &Path, endpoint: &Endpoint) -> Res<Vec<String>> {
        let deadline = Instant::now() + SETTLE_WAIT_MAX;
        let mut keeper = None;
        loop {
            let left = unsettled(&self.bins.interlock, ledger)?;
            if left.is_empty() || Instant::now() >= deadline {
                return Ok(left);
            }
            if keeper.is_none() && !endpoint.live() {
                keeper = Some(endpoint.connect().await?);
            }
            tokio::time::sleep(SETTLE_POLL).await;
        }
    }
}

/// What a run's endpoints share: the run's clock, and the racing workers' start line.
struct Ends {
    epoch: Instant,
    race: Option<Arc<tokio::sync::Barrier>>,
}

struct Files {
    dir: PathBuf,
    seed: PathBuf,
    journal: PathBuf,
    ledger: PathBuf,
    mandate: PathBuf,
    overlay: PathBuf,
}

/// The fault profiles of `path`: the scenario's, and direct, the kill's rail-side equivalent.
fn rail_faults(scenario: &Scenario, path: PathKind) -> Vec<String> {
    let mut faults = scenario.faults.rail.clone();
    if path == PathKind::Direct
        && let Some(kill) = &scenario.faults.kill
    {
        faults.extend(kill.direct.iter().cloned());
    }
    faults
}

/// The history's calls, each of which must succeed: they are the day so far, not the test.
async fn run_history(scenario: &Scenario, endpoint: &Endpoint) -> Res<()> {
    if scenario.history.is_empty() {
        return Ok(());
    }
    let session = endpoint.connect().await?;
    for (index, call) in scenario.history.iter().enumerate() {
        let action = scenario.action_id(&super::model::Origin::History(index + 1));
        let mut args = call.args.clone();
        if call.is_money() {
            args.insert("notes".to_owned(), json!({"agent_action": action}));
        }
        let (reply, _) = session
            .call(&call.tool, Value::Object(args), HISTORY_CALL_TIMEOUT)
            .await;
        match reply {
            Reply::Answered(result) if result.is_error != Some(true) => {}
            Reply::Answered(result) => {
                return Err(format!(
                    "{}: history {action} failed: {}",
                    scenario.id,
                    mcp::text_of(&result)
                ));
            }
            other => return Err(format!("{}: history {action}: {other:?}", scenario.id)),
        }
    }
    Ok(())
}

/// `SIK STATE` of every intent not yet settled, from `interlock ledger --json`.
fn unsettled(interlock: &Path, ledger: &Path) -> Res<Vec<String>> {
    if !ledger.exists() {
        return Ok(Vec::new());
    }
    let out = Command::new(interlock)
        .args(["ledger", "--json", "--db"])
        .arg(ledger)
        .output()
        .map_err(|e| format!("run interlock ledger: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "interlock ledger: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let rows: Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("interlock ledger --json: {e}"))?;
    let rows = rows
        .as_array()
        .ok_or("interlock ledger --json: not a list")?;
    Ok(rows
        .iter()
        .filter(|row| {
            row["state"]
                .as_str()
                .and_then(interlock_machine::State::parse)
                .is_some_and(interlock_machine::State::is_under_way)
        })
        .map(|row| format!("{} {}", row["sik"].as_str().unwrap_or("?"), row["state"]))
        .collect())
}

fn chain_verifies(interlock: &Path, ledger: &Path) -> bool {
    ledger.exists()
        && Command::new(interlock)
            .args(["audit", "verify", "--db"])
            .arg(ledger)
            .output()
            .is_ok_and(|out| out.status.success())
}

/// Which call class a mock fault profile hits, and from which call number.
fn fault_reach(fault: &str) -> (&'static str, u64) {
    let (name, spec) = fault.split_once('@').unwrap_or((fault, ""));
    let name = name.split('=').next().unwrap_or(name);
    let first = spec
        .trim_end_matches('+')
        .split('-')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    let class = match name {
        "read_lag" | "page_size" | "oldest_first" | "partition" => "list",
        "slow" => "any",
        _ => "money",
    };
    (class, first)
}

fn fault_checks(
    scenario: &Scenario,
    path: PathKind,
    faults: &[String],
    journal: &Journal,
    endpoint: &Endpoint,
) -> Vec<FaultCheck> {
    let mut checks = Vec::new();
    for fault in faults {
        let (class, first) = fault_reach(fault);
        let calls = match class {
            "money" => journal.money_calls,
            "list" => journal.list_calls,
            _ => journal.money_calls + journal.list_calls + journal.read_calls,
        };
        checks.push(FaultCheck {
            fault: fault.clone(),
            reached: calls >= first,
            detail: format!(
                "the rail received {calls} {class} call(s); the fault hits from call {first}"
            ),
        });
    }
    if let (PathKind::Gated, Some(kill)) = (path, &scenario.faults.kill) {
        checks.push(kill_check(&kill.points, endpoint));
    }
    checks
}

/// Whether each armed start died at its kill point. Only one point is armed per start and the
/// failpoints build SIGKILLs itself there, while the run sends SIGKILL only when it closes the
/// endpoint (and says so): a start armed with `P` that ended by a SIGKILL the run did not send
/// died at `P`. The process's exit cannot name the point itself; an outside SIGKILL (the OOM
/// killer) would pass for it.
fn kill_check(points: &[String], endpoint: &Endpoint) -> FaultCheck {
    let starts = endpoint.starts();
    let mut reached = true;
    let mut each = Vec::new();
    for (index, point) in points.iter().enumerate() {
        let ended = starts.get(index).map(|s| s.ended);
        let how = match ended {
            Some(Ended::SelfKilled) => "SIGKILLed itself there".to_owned(),
            Some(Ended::ClosedByRun) => "lived until the run closed it".to_owned(),
            Some(Ended::Running) => "was never reaped".to_owned(),
            Some(Ended::Other(code)) => format!("ended otherwise (status {code})"),
            None => "was never made".to_owned(),
        };
        reached &= ended == Some(Ended::SelfKilled);
        each.push(format!("start {} armed at {point} {how}", index + 1));
    }
    FaultCheck {
        fault: format!("kill {}", points.join(", ")),
        reached,
        detail: format!(
            "{}; {} start(s) in all, {} death(s) under the agent",
            each.join("; "),
            starts.len(),
            endpoint.deaths()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transcript(worker: u32, sent_ms: u64, elapsed_ms: u64) -> Transcript {
        use super::super::harness::{CallOutcome, CallRecord};
        use super::super::model::Origin;
        let time = |sent: u64, elapsed: u64| CallTime {
            sent_at: Duration::from_millis(sent),
            elapsed: Duration::from_millis(elapsed),
        };
        let call = |origin, money, attempt, time| CallRecord {
            worker,
            origin,
            tool: if money {
                "create_refund"
            } else {
                "fetch_payment"
            }
            .to_owned(),
            attempt,
            money,
            time,
            outcome: CallOutcome::Ok { code: None },
        };
        Transcript {
            calls: vec![
                call(Origin::Task(1), false, 0, time(0, 5)),
                call(Origin::Task(2), true, 0, time(sent_ms, elapsed_ms)),
                // A retry, much later: only the first attempt is the race.
                call(Origin::Task(2), true, 1, time(5_000, 10)),
            ],
            ..Transcript::default()
        }
    }

    #[test]
    fn a_race_is_first_money_calls_in_flight_together() {
        let together = Race::of(&[transcript(0, 100, 20), transcript(1, 101, 5)]);
        assert!(together.overlapped, "{}", together.detail());
        // The second is sent after the first was answered: two calls in a row, not a race.
        let apart = Race::of(&[transcript(0, 100, 20), transcript(1, 121, 5)]);
        assert!(!apart.overlapped, "{}", apart.detail());
        assert!(
            apart.detail().contains("w1 sent at 121.0 ms"),
            "{}",
            apart.detail()
        );
        let mut absent = transcript(1, 100, 5);
        absent.calls.retain(|c| !c.money);
        let alone = Race::of(&[transcript(0, 100, 20), absent]);
        assert!(!alone.overlapped && alone.detail().contains("w1 made no money call"));
    }

    #[test]
    fn fault_reach_reads_the_class_and_the_first_call() {
        assert_eq!(fault_reach("timeout_after_apply@2"), ("money", 2));
        assert_eq!(fault_reach("http_5xx_applied@1-2"), ("money", 1));
        assert_eq!(fault_reach("conn_reset@3+"), ("money", 3));
        assert_eq!(fault_reach("partition"), ("list", 1));
        assert_eq!(fault_reach("read_lag=500"), ("list", 1));
        assert_eq!(fault_reach("slow=100@4"), ("any", 4));
    }
}
