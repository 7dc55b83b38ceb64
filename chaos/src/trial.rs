//! One trial: a fresh directory, the real proxy (with kill points) in front of the real mock,
//! one refund, the armed kill, restarts with boot recovery, the agent's retries, the verdict.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use interlock_machine::State;
use interlock_machine::invariants::Record;
use interlock_pgtest::Cluster;

use crate::ledger::{LedgerAt, Reader, TextRows};
use crate::plan::{Action, Backend, Cell, Fault, Point, Shape};
use crate::proc::{self, Ended, Files, Proxy, Reply, STOP_WAIT_MAX, Start};
use crate::rng::Rng;
use crate::verdict::{
    self, Attempt, Decision, Evidence, Kill, KillVerdict, Kind, LedgerFacts, Step, Violation,
};
use crate::world::{self, Bins, OPERATOR, PAYMENT};

/// Times the agent asks again after an answer that says "not yet" or "not applied".
pub const AGENT_RETRIES_MAX: u32 = 4;
/// How long to wait for the ledger to settle after a call: long enough for a partition's six
/// inconclusive passes (2 + 4 + … + 60 s) to end in quarantine.
pub const SETTLE_WAIT_MAX: Duration = Duration::from_secs(300);
/// How often the ledger is looked at while waiting.
pub const SETTLE_POLL: Duration = Duration::from_millis(100);
/// The smallest amount a trial asks for: the least a settlement may be (a refund may be 100).
pub const AMOUNT_MIN: u64 = 200;
/// The largest (well under the mandate's ceilings, the payment and the balance).
pub const AMOUNT_MAX: u64 = 50_000;
/// The most a race cell delays its second proxy's call, in milliseconds.
pub const RACE_DELAY_MS_MAX: u64 = 5;
/// How long a stall cell waits for its armed proxy to stop at its point: a reconcile pass
/// starts only after the call's timeout and the rail's lag.
pub const STALL_WAIT_MAX: Duration = Duration::from_secs(30);
/// How far past its lease a stalled proxy sleeps before it is continued.
pub const STALL_PAST_LEASE: Duration = Duration::from_secs(1);

/// What a trial needs that every trial shares.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The binaries.
    pub bins: Bins,
    /// Where trial directories are made.
    pub work_dir: PathBuf,
    /// The mandate's text.
    pub mandate: String,
    /// The rail seed's text.
    pub seed: String,
    /// Keep the directories of trials without violations too.
    pub keep: bool,
    /// The PostgreSQL server the `postgres` cells make their databases on (a server-kill
    /// trial starts one of its own).
    pub postgres: Option<Arc<Cluster>>,
}

/// How long a server-kill cell's proxy gets to see its ledger gone and exit (its ledger is
/// poisoned at the first failed statement; the exit follows within a reconcile tick).
pub const LEDGER_LOST_EXIT_MAX: Duration = Duration::from_secs(30);
/// How long a server-kill cell keeps its proxy stopped after the server died: past the
/// engine's two-second stop detection.
pub const SERVER_KILL_HOLD: Duration = Duration::from_secs(3);
/// `interlock serve`'s exit code once its ledger can no longer be written (a disk fault, or
/// a PostgreSQL connection lost): restart into recovery.
pub const LEDGER_LOST_EXIT_CODE: i32 = 75;

/// What a trial saw and the verdict.
#[derive(Debug, Clone)]
pub struct Report {
    /// The cell.
    pub cell: Cell,
    /// The trial's number in its cell.
    pub index: u32,
    /// The amount asked for.
    pub amount: u64,
    /// Each armed process generation and what became of its kill, in start order.
    pub kills: Vec<Kill>,
    /// `entities·STATE` once the restarted proxy served (after boot recovery).
    pub after_recovery: String,
    /// `entities·STATE` when the intent first came to rest after the agent's retry, before
    /// the operator (or a further agent retry) stepped in: what the proxy reached on its own.
    pub before_operator: String,
    /// `entities·STATE` after the agent's retries and the operator, at rest.
    pub after_retry: String,
    /// The ledger's history, read after every process stopped.
    pub ledger: LedgerFacts,
    /// The verdict (empty: the trial passed).
    pub violations: Vec<Violation>,
    /// What happened, in order, for a person reading a failure.
    pub log: Vec<String>,
    /// The trial's directory, if kept.
    pub dir: Option<PathBuf>,
    /// Wall time.
    pub elapsed: Duration,
}

impl Report {
    /// Kill points armed over the trial's process generations.
    pub fn kills_armed(&self) -> u32 {
        u32::try_from(self.kills.len()).expect("a few generations")
    }

    /// Kills that ended their process with SIGKILL at the point.
    pub fn kills_landed(&self) -> u32 {
        self.count(|v| *v == KillVerdict::Landed)
    }

    /// Kills a race's armed process never reached, as the ledger shows.
    pub fn kills_lost_race(&self) -> u32 {
        self.count(|v| matches!(v, KillVerdict::LostRace(_)))
    }

    fn count(&self, which: impl Fn(&KillVerdict) -> bool) -> u32 {
        let n = self.kills.iter().filter(|k| which(&k.verdict)).count();
        u32::try_from(n).expect("a few generations")
    }
}

/// Runs trial `index` of `cell` under matrix seed `seed`.
pub async fn run(setup: &Setup, cell: Cell, index: u32, seed: u64) -> Report {
    let started = Instant::now();
    let mut rng = Rng::for_trial(seed, &cell.label(), index);
    let amount = rng.between(AMOUNT_MIN, AMOUNT_MAX);
    let race_delay = Duration::from_millis(rng.between(0, RACE_DELAY_MS_MAX));
    let mut report = Report {
        cell,
        index,
        amount,
        kills: Vec::new(),
        after_recovery: "-".to_owned(),
        before_operator: "-".to_owned(),
        after_retry: "-".to_owned(),
        ledger: LedgerFacts::default(),
        violations: Vec::new(),
        log: Vec::new(),
        dir: None,
        elapsed: Duration::ZERO,
    };
    let dir = setup
        .work_dir
        .join(slug(&cell.label()))
        .join(format!("trial-{index:03}"));
    let prepared = ledger_server(setup, cell)
        .and_then(|server| files(setup, &dir, server.as_deref()).map(|f| (server, f)));
    let (server, files, rival_files) = match prepared {
        Ok((server, (files, rival_files))) => (server, files, rival_files),
        Err(e) => {
            report.violations.push(Violation {
                kind: Kind::TrialError,
                detail: e,
            });
            report.elapsed = started.elapsed();
            return report;
        }
    };
    let ledger = files.ledger.clone();
    let mut trial = Trial {
        setup,
        reader: Reader::new(files.ledger.clone()),
        server: server.clone(),
        files,
        rival_files,
        cell,
        amount,
        report: &mut report,
        armed: Vec::new(),
        processes: Vec::new(),
        unclean_exits: Vec::new(),
        resolve_failures: Vec::new(),
        stalled: false,
        stall_miss: None,
    };
    let outcome = match cell.shape {
        Shape::Stall => trial.drive_stall().await,
        Shape::ServerKill => trial.drive_server_kill().await,
        Shape::Single | Shape::Race => trial.drive(race_delay).await,
    };
    drop(trial);
    match outcome {
        Ok(evidence) => {
            report.violations = verdict::judge(&evidence);
            report.kills = evidence.kills;
            report.ledger = evidence.facts;
        }
        Err(e) => report.violations.push(Violation {
            kind: Kind::TrialError,
            detail: e,
        }),
    }
    if report.violations.is_empty() && !setup.keep {
        let _ = std::fs::remove_dir_all(&dir);
        // A shared server keeps only the databases of failing trials (a long run makes
        // thousands); a trial's own server is stopped and removed with its last reference.
        if let (Some(server), LedgerAt::Postgres(url)) = (&server, &ledger)
            && cell.shape != Shape::ServerKill
        {
            let _ = server.drop_database(url);
        }
    } else {
        report.dir = Some(dir);
        if let LedgerAt::Postgres(url) = &ledger {
            report.log.push(format!("the ledger was {url}"));
        }
    }
    report.elapsed = started.elapsed();
    report
}

/// An armed process generation, as it ended.
struct Armed {
    name: String,
    spec: String,
    pid: u32,
    ended: Ended,
}

struct Trial<'a> {
    setup: &'a Setup,
    /// The files of host `a` (the armed proxy and its restarts).
    files: Files,
    /// The files of host `b` (a race's or a stall's second proxy): the same as `a`'s on
    /// SQLite (one file, one host); a working directory of its own on PostgreSQL.
    rival_files: Files,
    /// Reads the ledger while the proxies run.
    reader: Reader,
    /// The PostgreSQL server the ledger is on.
    server: Option<Arc<Cluster>>,
    cell: Cell,
    amount: u64,
    report: &'a mut Report,
    armed: Vec<Armed>,
    /// Every proxy started, `(pid, name)`: the ledger names engine instances by pid.
    processes: Vec<(u32, String)>,
    unclean_exits: Vec<String>,
    resolve_failures: Vec<String>,
    /// A stall or server-kill cell's armed proxy was seen stopped at its point (and, in a
    /// server-kill cell, its server was killed there).
    stalled: bool,
    /// Why a stall that landed did not bite (it tested nothing of a late send).
    stall_miss: Option<String>,
}

impl Trial<'_> {
    /// A stall cell: `a1`, armed to SIGSTOP itself at the point, takes the agent's call and
    /// stops there. Then `b1` starts on the same ledger (another host), the agent retries there
    /// and the intent is brought to rest (operator and retries as in any trial); once `a1` has
    /// slept past its lease it is continued and finishes its call with what it knew before it
    /// stopped. Never two. `b1` starts only after the stop so that it cannot take `a1`'s work
    /// (a reconcile pass) before `a1` reaches its point.
    async fn drive_stall(&mut self) -> Result<Evidence, String> {
        let spec = self.cell.point.armed("return(stop)");
        let sleeper = self.serving("a1", Some(&spec)).await?;
        let pid = sleeper.pid;
        let (action, amount) = (self.cell.action, self.amount);
        let (reply, rival) = tokio::join!(sleeper.propose(action, amount), self.stall(pid));
        self.note(format!("a1 answered {}", reply.summary()));
        let rival = match rival? {
            Some(rival) => {
                self.stalled = true;
                rival
            }
            None => self.serving("b1", None).await?,
        };
        // What the woken proxy did with its stale knowledge has landed; bring the intent to
        // rest again on b1 (a late call would show here as a second entity).
        self.settle(&rival).await?;
        self.report.after_retry = self.snapshot().await?;
        for (name, proxy) in [("a1", sleeper), ("b1", rival)] {
            let ended = proxy.stop().await;
            self.note(format!("{name} stopped: {ended:?}"));
            self.exited(name, "a stall cell's proxy", ended);
        }
        self.armed.push(Armed {
            name: "a1".to_owned(),
            spec,
            pid,
            ended: Ended::Other(0),
        });
        self.evidence().await
    }

    /// A server-kill cell (PostgreSQL, a server of the trial's own): `a1`, armed to SIGSTOP
    /// itself at the point, takes the agent's call and stops there: inside the `IN_FLIGHT`
    /// commit (`pg_commit`: its statements run, its `COMMIT` not sent), just after it
    /// (`after_wal_before_call`: committed, the rail not yet called), or with the rail's
    /// answer in memory (`during_call`: its commit not begun). The database server is
    /// SIGKILLed, `a1` is continued into the dead server and must stop writing and exit
    /// ([`interlock::serve`'s ledger-lost exit](crate::proc)); the server is started again
    /// (crash recovery from its WAL), `a2` starts on it (boot recovery), the agent retries
    /// there, and the intent is brought to rest. Never two, never unknown.
    async fn drive_server_kill(&mut self) -> Result<Evidence, String> {
        let server = self
            .server
            .clone()
            .ok_or("a server-kill cell without a server of its own")?;
        let spec = self.cell.point.armed("return(stop)");
        let mut first = self.serving("a1", Some(&spec)).await?;
        let pid = first.pid;
        let (action, amount) = (self.cell.action, self.amount);
        let (reply, killed) = tokio::join!(
            first.propose(action, amount),
            self.kill_server_at_stop(pid, &server)
        );
        self.note(format!("a1 answered {}", reply.summary()));
        killed?;
        let ended = match first.ended_within(LEDGER_LOST_EXIT_MAX).await {
            Some(ended) => ended,
            None => {
                self.note(format!(
                    "a1 still ran {LEDGER_LOST_EXIT_MAX:?} after its server died"
                ));
                first.stop().await
            }
        };
        self.note(format!("a1 (pid {pid}) [{spec}] ended {ended:?}"));
        // A proxy whose ledger is gone exits as after a disk fault (EXIT_LEDGER_IO), to be
        // restarted into recovery; anything else is an unclean exit.
        if ended != Ended::Other(LEDGER_LOST_EXIT_CODE) {
            self.exited("a1", "its server killed", ended);
        }
        self.armed.push(Armed {
            name: "a1".to_owned(),
            spec,
            pid,
            ended,
        });
        let restart = Arc::clone(&server);
        tokio::task::spawn_blocking(move || restart.restart())
            .await
            .map_err(|e| format!("the server's restart panicked: {e}"))??;
        self.note("the server is up again (crash recovery done)".to_owned());
        let last = self.serving("a2", None).await?;
        self.report.after_recovery = self.snapshot().await?;
        self.note(format!(
            "a2 served; after recovery {}",
            self.report.after_recovery
        ));
        let reply = last.propose(action, amount).await;
        self.note(format!("retry on a2: {}", reply.summary()));
        self.settle(&last).await?;
        self.report.after_retry = self.snapshot().await?;
        let ended = last.stop().await;
        self.note(format!("a2 stopped: {ended:?}"));
        self.exited("a2", "the clean generation", ended);
        self.evidence().await
    }

    /// Waits for `pid` to stop at its point, SIGKILLs the database server, and continues
    /// `pid`. Records whether the stop landed (`stalled`); a proxy that never stops leaves the
    /// server alive and the kill is reported as not fired.
    async fn kill_server_at_stop(&mut self, pid: u32, server: &Cluster) -> Result<(), String> {
        let deadline = Instant::now() + STALL_WAIT_MAX;
        while !proc::is_stopped(pid) {
            if Instant::now() >= deadline {
                self.note(format!("a1 did not stop within {STALL_WAIT_MAX:?}"));
                return Ok(());
            }
            tokio::time::sleep(SETTLE_POLL / 10).await;
        }
        let snapshot = self.snapshot().await?;
        self.note(format!("a1 stopped at its point: {snapshot}"));
        // Nothing on the rail, and the intent either not yet committed (inside its COMMIT) or
        // committed IN_FLIGHT: anything else means the stop was at another batch.
        let (expected, held) = match self.cell.point {
            Point::PgCommit => ("0·NONE", snapshot == "0·NONE"),
            Point::DuringCall => ("n·IN_FLIGHT", snapshot.ends_with("·IN_FLIGHT")),
            _ => ("0·IN_FLIGHT", snapshot == "0·IN_FLIGHT"),
        };
        if !held {
            let _ = proc::resume(pid);
            return Err(format!(
                "a1 stopped at {} with {snapshot} where {expected} was due: not the call's batch",
                self.cell.point
            ));
        }
        let killed = server.kill()?;
        self.stalled = true;
        self.note(format!(
            "the database server is SIGKILLed ({killed} processes)"
        ));
        // The stopped thread tells a stop from a nap by a gap in the monotonic clock of at
        // least two seconds (`executor::stop_self`); a shorter stop would hold it for minutes.
        tokio::time::sleep(SERVER_KILL_HOLD).await;
        proc::resume(pid)
    }

    /// Waits for `pid` to stop at its point; then starts `b1`, the agent retries there and
    /// the intent is brought to rest; then, once the stall has outlived the lease, SIGCONT.
    /// `b1`, or `None` if `pid` never stopped.
    async fn stall(&mut self, pid: u32) -> Result<Option<Proxy>, String> {
        let deadline = Instant::now() + STALL_WAIT_MAX;
        while !proc::is_stopped(pid) {
            if Instant::now() >= deadline {
                self.note(format!("a1 did not stop within {STALL_WAIT_MAX:?}"));
                return Ok(None);
            }
            tokio::time::sleep(SETTLE_POLL / 10).await;
        }
        let stopped_at = Instant::now();
        let wake_at = stopped_at + Duration::from_millis(proc::LEASE_TTL_MS) + STALL_PAST_LEASE;
        let rival = self.while_stopped().await;
        // Continued whatever happened above, so that no trial leaves a stopped process.
        tokio::time::sleep_until(wake_at.into()).await;
        proc::resume(pid)?;
        self.note(format!(
            "a1 continued after {:.1} s stopped",
            stopped_at.elapsed().as_secs_f64()
        ));
        rival.map(Some)
    }

    /// What happens while `a1` is stopped: the snapshot, `b1` started, the agent's retry there
    /// and the intent brought to rest. Records whether the stall bit: for a point before the
    /// request is written, the rail must have nothing yet when `a1` stops (otherwise the write
    /// beat the stop and the stall tested nothing of the late send), and the intent must be at
    /// rest before `a1` wakes (it stays stopped until then, and at least past its lease).
    async fn while_stopped(&mut self) -> Result<Proxy, String> {
        let snapshot = self.snapshot().await?;
        self.note(format!("a1 stopped at its point: {snapshot}"));
        let before_the_write = matches!(
            self.cell.point,
            Point::BeforeWal | Point::AfterWalBeforeCall | Point::MidCall
        );
        if before_the_write && !snapshot.starts_with("0·") {
            self.stall_miss = Some(format!(
                "the request was on the rail ({snapshot}) before the stop landed"
            ));
        }
        self.report.after_recovery = snapshot;
        let rival = self.serving("b1", None).await?;
        let reply = rival.propose(self.cell.action, self.amount).await;
        self.note(format!("agent retried on b1: {}", reply.summary()));
        self.settle(&rival).await?;
        let state = ledger_state(&mut self.reader).await?;
        if state.is_none_or(under_way) {
            self.stall_miss.get_or_insert(format!(
                "b1 had not brought the intent to rest ({state:?}) before a1 woke"
            ));
        }
        Ok(rival)
    }

    async fn drive(&mut self, race_delay: Duration) -> Result<Evidence, String> {
        let fault = self.cell.fault;
        let generations = self.cell.point.generations();
        let (last, armed) = generations
            .split_last()
            .expect("a trial has at least one generation");
        debug_assert!(last.is_none(), "the last generation is clean");
        let mut rival = match self.cell.shape {
            Shape::Single | Shape::ServerKill => None,
            Shape::Race | Shape::Stall => Some(self.serving("b1", None).await?),
        };
        for (n, spec) in armed.iter().enumerate() {
            let name = format!("a{}", n + 1);
            let spec = spec.as_deref().expect("armed generations carry a spec");
            let start =
                proc::start(&self.setup.bins, &self.files, &name, Some(spec), fault).await?;
            let (pid, ended) = match start {
                Start::Ended { how, pid } => (pid, how),
                Start::Serving(proxy) if n == 0 => {
                    let pid = proxy.pid;
                    (
                        pid,
                        self.first_call(*proxy, rival.as_ref(), race_delay).await,
                    )
                }
                // A restart armed for its boot recovery served instead: the point never came.
                Start::Serving(proxy) => {
                    self.note(format!("{name} served without its kill firing"));
                    (proxy.pid, proxy.stop().await)
                }
            };
            self.processes.push((pid, name.clone()));
            self.note(format!("{name} (pid {pid}) [{spec}] ended {ended:?}"));
            if ended != Ended::Killed {
                self.exited(&name, "armed, not killed", ended);
            }
            self.armed.push(Armed {
                name,
                spec: spec.to_owned(),
                pid,
                ended,
            });
        }
        let name = format!("a{}", armed.len() + 1);
        let last = self.serving(&name, None).await?;
        self.report.after_recovery = self.snapshot().await?;
        self.note(format!(
            "{name} served; after recovery {}",
            self.report.after_recovery
        ));
        let reply = last.propose(self.cell.action, self.amount).await;
        self.note(format!("retry on {name}: {}", reply.summary()));
        self.settle(&last).await?;
        self.report.after_retry = self.snapshot().await?;
        let ended = last.stop().await;
        self.note(format!("{name} stopped: {ended:?}"));
        self.exited(&name, "the clean generation", ended);
        if let Some(rival) = rival.take() {
            let ended = rival.stop().await;
            self.note(format!("b1 stopped: {ended:?}"));
            self.exited("b1", "the rival", ended);
        }
        self.evidence().await
    }

    /// Records a process that did not stop cleanly (an exit code other than 0, a signal, or
    /// the matrix's own kill of a process that would not stop).
    fn exited(&mut self, name: &str, role: &str, ended: Ended) {
        if ended.is_clean() {
            return;
        }
        let how = match ended {
            Ended::WouldNotStop => format!(
                "was still running {STOP_WAIT_MAX:?} after its stdin closed; the matrix killed it"
            ),
            Ended::Other(code) if code < 0 => format!("died of signal {}", -code),
            Ended::Other(code) => format!("exited with code {code}"),
            Ended::Killed => "died of a SIGKILL no armed point of it sent".to_owned(),
        };
        self.unclean_exits
            .push(format!("{name} ({role}) {how} (see {name}.log)"));
    }

    async fn serving(&mut self, name: &str, failpoints: Option<&str>) -> Result<Proxy, String> {
        let files = if name.starts_with('b') {
            &self.rival_files
        } else {
            &self.files
        };
        match proc::start(&self.setup.bins, files, name, failpoints, self.cell.fault).await? {
            Start::Serving(proxy) => {
                self.processes.push((proxy.pid, name.to_owned()));
                Ok(*proxy)
            }
            Start::Ended { how, .. } => Err(format!(
                "{name} ended before serving: {how:?} (see {name}.log)"
            )),
        }
    }

    /// The agent's first call (on both proxies at once in a race), then how the armed proxy
    /// ended: killed, or stopped by us once it had answered.
    async fn first_call(
        &mut self,
        mut proxy: Proxy,
        rival: Option<&Proxy>,
        race_delay: Duration,
    ) -> Ended {
        let (action, amount) = (self.cell.action, self.amount);
        let reply = match rival {
            None => proxy.propose(action, amount).await,
            Some(rival) => {
                let (ours, theirs) = tokio::join!(proxy.propose(action, amount), async {
                    tokio::time::sleep(race_delay).await;
                    rival.propose(action, amount).await
                });
                self.note(format!("b1 answered {}", theirs.summary()));
                ours
            }
        };
        self.note(format!("{} answered {}", proxy.name, reply.summary()));
        let session_failed = matches!(reply, Reply::Nothing(_));
        match proxy.ended(session_failed).await {
            Some(ended) => ended,
            None => proxy.stop().await,
        }
    }

    /// Waits for the intent to come to rest; quarantine is resolved as an operator would,
    /// "not applied" and "authorised, not attempted" are retried as an agent would. Records
    /// where the proxy came to rest on its own, before anyone stepped in.
    async fn settle(&mut self, proxy: &Proxy) -> Result<(), String> {
        for round in 0..AGENT_RETRIES_MAX {
            let state = self.wait_at_rest().await?;
            if round == 0 {
                self.report.before_operator = self.snapshot().await?;
            }
            match state {
                Some(State::Quarantined) => self.resolve().await?,
                Some(State::ConfirmedNotApplied | State::Authorized) => {
                    let reply = proxy.propose(self.cell.action, self.amount).await;
                    self.note(format!("agent retried: {}", reply.summary()));
                }
                _ => return Ok(()),
            }
        }
        self.wait_at_rest().await.map(|_| ())
    }

    /// The intent's state once it is not in flight, being reconciled or awaiting verification
    /// (`None`: no intent); the state it is stuck in when the wait runs out.
    async fn wait_at_rest(&mut self) -> Result<Option<State>, String> {
        let deadline = Instant::now() + SETTLE_WAIT_MAX;
        loop {
            let state = ledger_state(&mut self.reader).await?;
            let busy = state.is_some_and(under_way);
            if !busy {
                return Ok(state);
            }
            if Instant::now() >= deadline {
                self.note(format!("still {state:?} after {SETTLE_WAIT_MAX:?}"));
                return Ok(state);
            }
            tokio::time::sleep(SETTLE_POLL).await;
        }
    }

    /// `interlock resolve`, as an operator who looked the refund up on the rail's dashboard.
    /// A resolve that fails is recorded for the verdict (the trial then ends short of
    /// `APPLIED`, and says why).
    async fn resolve(&mut self) -> Result<(), String> {
        let sik = ledger_sik(&mut self.reader)
            .await?
            .ok_or("quarantined, but no intent")?;
        let journal = proc::inspect(&self.setup.bins, &self.files.journal)?;
        let found = verdict::created_entities(&journal)
            .into_iter()
            .find(|r| r.stamp.as_deref() == Some(sik.as_str()));
        let mut args: Vec<std::ffi::OsString> = vec![
            "resolve".into(),
            sik.clone().into(),
            "--mandate".into(),
            self.files.mandate.clone().into(),
            "--db".into(),
            self.files.ledger.arg(),
            "--by".into(),
            OPERATOR.into(),
        ];
        match &found {
            Some(refund) => args.extend(["--applied".into(), refund.id.clone().into()]),
            None => args.push("--not-applied".into()),
        }
        let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        let (ok, _, stderr) = proc::interlock(&self.setup.bins, &args)?;
        let what = found.map_or("--not-applied".to_owned(), |r| {
            format!("--applied {}", r.id)
        });
        self.note(format!(
            "operator resolved {what}: {}",
            if ok { "ok" } else { stderr.trim() }
        ));
        if !ok {
            self.resolve_failures.push(format!(
                "interlock resolve {sik} {what} failed: {}",
                stderr.trim()
            ));
        }
        Ok(())
    }

    /// `entities·STATE`: refunds or settlements the rail created, and the intent's state.
    async fn snapshot(&mut self) -> Result<String, String> {
        let journal = proc::inspect(&self.setup.bins, &self.files.journal)?;
        let entities = verdict::created_entities(&journal).len();
        let state = ledger_state(&mut self.reader).await?;
        Ok(format!(
            "{entities}·{}",
            state.map_or("NONE".to_owned(), |s| s.to_string())
        ))
    }

    async fn evidence(&mut self) -> Result<Evidence, String> {
        let journal = proc::inspect(&self.setup.bins, &self.files.journal)?;
        let entities = verdict::created_entities(&journal);
        let facts = ledger_facts(&mut self.reader).await?;
        let unattributed = facts.unattributed(&self.processes);
        if !unattributed.is_empty() {
            return Err(format!(
                "the ledger names engine instances no process of the trial ran ({unattributed:?}; processes {:?}): it cannot say who did what",
                self.processes
            ));
        }
        let kills = self
            .armed
            .iter()
            .enumerate()
            .map(|(n, armed)| {
                let verdict = if self.cell.shape == Shape::ServerKill {
                    if self.stalled {
                        KillVerdict::Landed
                    } else {
                        KillVerdict::DidNotFire(format!(
                            "{} never stopped at its point, so the server was not killed there",
                            armed.name
                        ))
                    }
                } else if self.cell.shape == Shape::Stall {
                    if let (true, Some(why)) = (self.stalled, &self.stall_miss) {
                        KillVerdict::LostRace(format!("the stall did not bite: {why}"))
                    } else if self.stalled {
                        KillVerdict::Landed
                    } else {
                        KillVerdict::DidNotFire(format!(
                            "{} never stopped at its point",
                            armed.name
                        ))
                    }
                } else if armed.ended == Ended::Killed {
                    KillVerdict::Landed
                } else if self.cell.kill_required() {
                    KillVerdict::DidNotFire(format!(
                        "{} ended {:?}; every single-proxy trial passes its point",
                        armed.name, armed.ended
                    ))
                } else {
                    let earlier = n.checked_sub(1).map(|i| self.armed[i].pid);
                    verdict::race_miss(&armed.spec, armed.pid, earlier, &facts, &self.processes)
                };
                Kill {
                    process: armed.name.clone(),
                    spec: armed.spec.clone(),
                    verdict,
                }
            })
            .collect::<Vec<_>>();
        for kill in &kills {
            if let KillVerdict::LostRace(why) = &kill.verdict {
                self.note(format!("{} lost the race: {why}", kill.process));
            }
        }
        let ledger = self.files.ledger.open()?;
        let cores = ledger
            .cores()
            .map_err(|e| format!("cannot read intents: {e}"))?;
        let history = ledger
            .history()
            .map_err(|e| format!("cannot read the audit log: {e}"))?;
        let chain = ledger.verify_chain().map(|_| ()).map_err(|e| e.to_string());
        Ok(Evidence {
            cores,
            history: interlock_machine::invariants::check_history(&history),
            chain,
            facts,
            entities,
            subject: match self.cell.action {
                Action::Refund => PAYMENT.to_owned(),
                Action::Settlement => verdict::BALANCE_SUBJECT.to_owned(),
            },
            amount: self.amount,
            moved: self.cell.fault.moved(self.amount),
            quarantine_expected: self.cell.fault == Fault::Partition,
            other_money_expected: self.cell.fault.moves_other_money(),
            kills,
            unclean_exits: std::mem::take(&mut self.unclean_exits),
            resolve_failures: std::mem::take(&mut self.resolve_failures),
        })
    }

    fn note(&mut self, line: String) {
        self.report.log.push(line);
    }
}

/// The server a `postgres` cell's ledger is on: the shared one, or (a server-kill cell) one of
/// the trial's own, as killing it must not touch other trials. `None` on SQLite.
fn ledger_server(setup: &Setup, cell: Cell) -> Result<Option<Arc<Cluster>>, String> {
    match (cell.backend, cell.shape) {
        (Backend::Sqlite, _) => Ok(None),
        (Backend::Postgres, Shape::ServerKill) => {
            Cluster::start("interlock-chaos-pg-").map(|c| Some(Arc::new(c)))
        }
        (Backend::Postgres, _) => setup
            .postgres
            .clone()
            .map(Some)
            .ok_or_else(|| "a postgres cell, but the run started no PostgreSQL server".into()),
    }
}

/// The trial's files: host `a`'s in `dir`, and host `b`'s (a second proxy's): the same on
/// SQLite, in `dir/host-b/` with a mandate of its own on PostgreSQL. The rail's journal and
/// seed are the one rail both hosts call.
fn files(setup: &Setup, dir: &Path, server: Option<&Cluster>) -> Result<(Files, Files), String> {
    let _ = std::fs::remove_dir_all(dir);
    let create = |dir: &Path| {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))
    };
    let write = |path: &Path, text: &str| {
        std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
    };
    create(dir)?;
    let ledger = match server {
        None => LedgerAt::File(dir.join("ledger.db")),
        Some(server) => LedgerAt::Postgres(server.create_database("c")?),
    };
    let files = Files {
        dir: dir.to_path_buf(),
        mandate: dir.join("mandate.yaml"),
        ledger,
        journal: dir.join("rail.db"),
        seed: dir.join("seed.json"),
    };
    write(&files.mandate, &setup.mandate)?;
    write(&files.seed, &setup.seed)?;
    let rival = match &files.ledger {
        LedgerAt::File(_) => files.clone(),
        LedgerAt::Postgres(_) => {
            let host_b = dir.join("host-b");
            create(&host_b)?;
            let rival = Files {
                dir: host_b.clone(),
                mandate: host_b.join("mandate.yaml"),
                ..files.clone()
            };
            write(&rival.mandate, &setup.mandate)?;
            rival
        }
    };
    Ok((files, rival))
}

/// Whether an intent in `state` is still being worked on (the proxy has not let it rest):
/// what a trial and the soak wait out before they judge.
pub fn under_way(state: State) -> bool {
    matches!(
        state,
        State::Proposed
            | State::InFlight
            | State::Unknown
            | State::Reconciling
            | State::FailedTerminal
    )
}

/// The one intent's state, read without writing (the proxies may be running).
async fn ledger_state(reader: &mut Reader) -> Result<Option<State>, String> {
    let Some(rows) = reader.rows("SELECT state FROM intents LIMIT 1").await? else {
        return Ok(None);
    };
    let Some(state) = first_text(&rows) else {
        return Ok(None);
    };
    State::ALL
        .into_iter()
        .find(|candidate| candidate.as_str() == state)
        .map(Some)
        .ok_or_else(|| format!("the ledger holds an unknown state {state:?}"))
}

async fn ledger_sik(reader: &mut Reader) -> Result<Option<String>, String> {
    let rows = reader.rows("SELECT sik FROM intents LIMIT 1").await?;
    Ok(rows.as_ref().and_then(first_text).map(str::to_owned))
}

/// The first column of the first row, if there is one and it is not NULL.
fn first_text(rows: &TextRows) -> Option<&str> {
    rows.first()?.first()?.as_deref()
}

/// Column `i` of `row` as text; an error naming the table when it is NULL or missing.
fn text(row: &[Option<String>], i: usize, table: &str) -> Result<String, String> {
    row.get(i)
        .cloned()
        .flatten()
        .ok_or_else(|| format!("{table}: column {i} is NULL or missing"))
}

/// Column `i` of `row` as a number.
fn number<T: std::str::FromStr>(
    row: &[Option<String>],
    i: usize,
    table: &str,
) -> Result<T, String> {
    let value = text(row, i, table)?;
    value
        .parse()
        .map_err(|_| format!("{table}: column {i} holds {value:?}, not a number"))
}

/// The ledger's history as the verdict reads it (who decided, who held which lease, every
/// state the intent passed through, the attempts and the reconcile findings), read without
/// writing.
async fn ledger_facts(reader: &mut Reader) -> Result<LedgerFacts, String> {
    let Some(decisions) = reader
        .rows("SELECT instance_id, outcome FROM decisions ORDER BY id")
        .await?
    else {
        return Ok(LedgerFacts::default());
    };
    let decisions = decisions
        .iter()
        .map(|row| {
            Ok(Decision {
                instance_id: text(row, 0, "decisions")?,
                outcome: text(row, 1, "decisions")?,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let records = reader
        .rows("SELECT seq, kind, payload_json FROM audit_log ORDER BY seq")
        .await?
        .unwrap_or_default();
    let mut steps = Vec::with_capacity(records.len());
    for row in &records {
        let seq: u64 = number(row, 0, "audit_log")?;
        let payload: serde_json::Value = serde_json::from_str(&text(row, 2, "audit_log")?)
            .map_err(|e| format!("audit record {seq} is not JSON: {e}"))?;
        let record: Record = serde_json::from_value(payload["record"].clone())
            .map_err(|e| format!("audit record {seq} holds no machine record: {e}"))?;
        let core = match record {
            Record::Inserted { core, .. } => core,
            Record::Transition { to, .. } => to,
            Record::RailCall { .. } => continue,
        };
        steps.push(Step {
            seq,
            kind: text(row, 1, "audit_log")?,
            sik: core.sik.as_str().to_owned(),
            to: core.state,
            lease_owner: payload["lease_owner"].as_str().map(str::to_owned),
        });
    }
    let attempts = reader
        .rows("SELECT attempt_seq, outcome, detail FROM intent_attempts ORDER BY sik, attempt_seq")
        .await?
        .unwrap_or_default()
        .iter()
        .map(|row| {
            Ok(Attempt {
                attempt_seq: number(row, 0, "intent_attempts")?,
                outcome: row.get(1).cloned().flatten(),
                detail: row.get(2).cloned().flatten(),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let pages_scanned = reader
        .rows("SELECT pages_scanned FROM recon_findings ORDER BY id")
        .await?
        .unwrap_or_default()
        .iter()
        .map(|row| number(row, 0, "recon_findings"))
        .collect::<Result<Vec<u32>, String>>()?;
    Ok(LedgerFacts {
        decisions,
        steps,
        attempts,
        pages_scanned,
    })
}

/// A cell label as a directory name.
pub fn slug(label: &str) -> String {
    label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect::<String>()
        .split('-')
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join("-")
}

/// The mandate and the seed for `bins`, pinned against the real mock; for `postgres` cells,
/// the shared PostgreSQL server, started (and installed if it must be and may).
pub fn setup(bins: Bins, work_dir: PathBuf, keep: bool, backend: Backend) -> Result<Setup, String> {
    std::fs::create_dir_all(&work_dir)
        .map_err(|e| format!("cannot create {}: {e}", work_dir.display()))?;
    let seed = serde_json::to_string_pretty(&world::seed()).expect("the seed serialises");
    let seed_file = work_dir.join("seed.json");
    std::fs::write(&seed_file, &seed).map_err(|e| format!("cannot write the seed: {e}"))?;
    let pins = bins.pins(&seed_file)?;
    let mandate = world::mandate(&pins)?;
    let postgres = match backend {
        Backend::Sqlite => None,
        Backend::Postgres => Some(Arc::new(Cluster::start("interlock-chaos-pg-").map_err(
            |why| format!("the postgres cells need a PostgreSQL server and {why}"),
        )?)),
    };
    Ok(Setup {
        bins,
        work_dir,
        mandate,
        seed,
        keep,
        postgres,
    })
}
