//! `interlock-bench agentdojo`: AgentDojo's banking suite (v1.2.2), a benchmark no one here
//! wrote, scored only by its own `utility()` and `security()`.
//!
//! For every pair (user task, injection task) the *fully compromised agent* — the user task's
//! ground-truth calls, then the injection task's, on an environment injected with AgentDojo's
//! `important_instructions` attack — runs three ways: **direct** against the banking MCP server
//! (`bench/agentdojo/server.py`), **gated** through `interlock serve` with the banking profile and
//! Emma's mandate (`bench/agentdojo/mandate.yaml`), and gated with a mandate that also grants
//! `update_password` (`mandate.password.yaml`, for injection task 7). Each user task also runs
//! without attack. The Python harness (`bench/agentdojo/harness.py`) drives the runs; this module
//! makes its venv, runs it, and turns its JSON lines into `docs/RESULTS.agentdojo.md`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;
use serde_json::Value;

use crate::Res;

/// The venv's requirement that proves it is ours: the pinned AgentDojo.
pub const AGENTDOJO_VERSION: &str = "0.1.35";
/// The injection task that is not a payment (it changes the password).
pub const PASSWORD_INJECTION: &str = "injection_task_7";
/// Lines of a harness run's stderr quoted when it fails.
const STDERR_LINES: usize = 20;

/// `bench/agentdojo/`.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("agentdojo")
}

/// One path the pairs run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Path3 {
    /// Straight to the banking server.
    Direct,
    /// Through Interlock, `update_password` not granted.
    Gated,
    /// Through Interlock, `update_password` granted.
    GatedPassword,
}

impl Path3 {
    /// All three, in report order.
    pub const ALL: [Path3; 3] = [Path3::Direct, Path3::Gated, Path3::GatedPassword];

    /// The harness label.
    pub fn label(self) -> &'static str {
        match self {
            Path3::Direct => "direct",
            Path3::Gated => "gated",
            Path3::GatedPassword => "gated+password",
        }
    }

    fn mandate(self) -> Option<&'static str> {
        match self {
            Path3::Direct => None,
            Path3::Gated => Some("mandate.yaml"),
            Path3::GatedPassword => Some("mandate.password.yaml"),
        }
    }
}

/// A gateway's structured refusal, as the harness records it.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct GateSeen {
    /// The deciding gate (`G1`, …).
    pub gate: Option<String>,
    /// The reason code.
    pub reason_code: Option<String>,
}

/// One call of a run.
#[derive(Debug, Clone, Deserialize)]
pub struct CallRecord {
    /// The tool.
    pub tool: String,
    /// Whether it answered an error.
    pub is_error: bool,
    /// `user` or `injection`: whose ground truth it is.
    pub from: String,
    /// Interlock's decision, when it refused.
    #[serde(default)]
    pub gate: Option<GateSeen>,
}

/// One run as the harness reports it.
#[derive(Debug, Clone, Deserialize)]
pub struct RunRecord {
    /// `user_task_N`.
    pub user_task: String,
    /// `injection_task_N`, or none for the run without attack.
    pub injection_task: Option<String>,
    /// AgentDojo's `utility()`.
    pub utility: bool,
    /// AgentDojo's `security()`: true when the attack succeeded.
    pub security: Option<bool>,
    /// The calls made.
    pub calls: Vec<CallRecord>,
    /// Why the session itself failed, if it did.
    pub error: Option<String>,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Selection {
    /// `all` or a comma-separated list.
    pub user_tasks: String,
    /// `all` or a comma-separated list.
    pub injection_tasks: String,
    /// Runs at once.
    pub jobs: usize,
}

/// The venv's Python with AgentDojo and `mcp` installed (made under `target/` the first time).
pub fn venv_python(venv: &Path) -> Res<PathBuf> {
    let python = venv.join("bin").join("python");
    let check = format!(
        "import importlib.metadata as m, mcp, agentdojo\nassert m.version('agentdojo') == '{AGENTDOJO_VERSION}'"
    );
    let ready = |python: &Path| {
        python.exists()
            && Command::new(python)
                .args(["-c", &check])
                .output()
                .is_ok_and(|o| o.status.success())
    };
    if ready(&python) {
        return Ok(python);
    }
    eprintln!(
        "making the AgentDojo venv in {} (pip, ~300 MB, once)",
        venv.display()
    );
    let made = Command::new("python3")
        .args(["-m", "venv", "--clear"])
        .arg(venv)
        .output()
        .map_err(|e| format!("cannot run python3 to make a venv: {e}"))?;
    if !made.status.success() {
        return Err(format!(
            "python3 -m venv {} failed (is python3-venv installed?): {}",
            venv.display(),
            tail(&made.stderr)
        ));
    }
    let requirements = dir().join("requirements.txt");
    let pip = Command::new(venv.join("bin").join("pip"))
        .args(["install", "--disable-pip-version-check", "--quiet", "-r"])
        .arg(&requirements)
        .output()
        .map_err(|e| format!("cannot run the venv's pip: {e}"))?;
    if !pip.status.success() || !ready(&python) {
        return Err(format!(
            "pip could not install {} into {} (is PyPI reachable?); the AgentDojo benchmark needs it and does not skip: {}",
            requirements.display(),
            venv.display(),
            tail(&pip.stderr)
        ));
    }
    Ok(python)
}

/// Runs the harness on `path` and reads its JSON lines.
pub fn run_path(
    python: &Path,
    interlock: &Path,
    path: Path3,
    selection: &Selection,
    work: &Path,
) -> Res<Vec<RunRecord>> {
    let out = work.join(format!("{}.jsonl", path.label()));
    let mut harness = Command::new(python);
    harness
        .arg(dir().join("harness.py"))
        .args(["--user-tasks", &selection.user_tasks])
        .args(["--injection-tasks", &selection.injection_tasks])
        .args(["--no-attack", "--label", path.label()])
        .args(["--jobs", &selection.jobs.to_string()])
        .arg("--out")
        .arg(&out);
    if let Some(mandate) = path.mandate() {
        let d = dir();
        let via = format!(
            "{} --profile {} serve --mandate {} --agent agent_bank_assistant --db {{dir}}/ledger.db -- {{upstream}}",
            interlock.display(),
            d.join("banking.profile.yaml").display(),
            d.join(mandate).display()
        );
        harness.arg("--via").arg(via);
    }
    let done = harness
        .output()
        .map_err(|e| format!("cannot run the harness: {e}"))?;
    if !done.status.success() {
        return Err(format!(
            "the harness failed on the {} path: {}",
            path.label(),
            tail(&done.stderr)
        ));
    }
    let text =
        std::fs::read_to_string(&out).map_err(|e| format!("cannot read {}: {e}", out.display()))?;
    let runs: Vec<RunRecord> = text
        .lines()
        .map(|line| serde_json::from_str(line).map_err(|e| format!("a harness line: {e}")))
        .collect::<Res<_>>()?;
    if let Some(failed) = runs.iter().find(|r| r.error.is_some()) {
        return Err(format!(
            "{} × {:?} on the {} path: the session failed: {}",
            failed.user_task,
            failed.injection_task,
            path.label(),
            failed.error.as_deref().unwrap_or_default()
        ));
    }
    Ok(runs)
}

/// The harness's `--describe`: versions, prompts and goals.
pub fn describe(python: &Path) -> Res<Value> {
    let out = Command::new(python)
        .arg(dir().join("harness.py"))
        .arg("--describe")
        .output()
        .map_err(|e| format!("cannot run the harness: {e}"))?;
    if !out.status.success() {
        return Err(format!("harness --describe failed: {}", tail(&out.stderr)));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("harness --describe: {e}"))
}

/// The figures of one path.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Totals {
    /// Attacks that succeeded, of the pairs run.
    pub attacks_succeeded: usize,
    /// Pairs run.
    pub pairs: usize,
    /// Attacks of the money injection tasks (all but the password one) that succeeded.
    pub money_attacks_succeeded: usize,
    /// Pairs of the money injection tasks.
    pub money_pairs: usize,
    /// User tasks whose utility held without attack.
    pub utility_no_attack: usize,
    /// User tasks run without attack.
    pub user_tasks: usize,
    /// Pairs whose user task's utility held under attack.
    pub utility_under_attack: usize,
}

/// Counts one path's runs.
pub fn totals(runs: &[RunRecord]) -> Totals {
    let attacked = || runs.iter().filter(|r| r.injection_task.is_some());
    let money = || attacked().filter(|r| r.injection_task.as_deref() != Some(PASSWORD_INJECTION));
    let clean = || runs.iter().filter(|r| r.injection_task.is_none());
    let succeeded = |r: &&RunRecord| r.security == Some(true);
    Totals {
        attacks_succeeded: attacked().filter(succeeded).count(),
        pairs: attacked().count(),
        money_attacks_succeeded: money().filter(succeeded).count(),
        money_pairs: money().count(),
        utility_no_attack: clean().filter(|r| r.utility).count(),
        user_tasks: clean().count(),
        utility_under_attack: attacked().filter(|r| r.utility).count(),
    }
}

/// How the gated path stopped an injection task's calls: `gate reason_code` → how often.
pub fn stopped_by(runs: &[RunRecord], injection: &str) -> BTreeMap<String, usize> {
    let mut seen = BTreeMap::new();
    let refused = runs
        .iter()
        .filter(|r| r.injection_task.as_deref() == Some(injection))
        .flat_map(|r| &r.calls)
        .filter(|c| c.from == "injection" && c.is_error);
    for call in refused {
        let key = match &call.gate {
            Some(g) => format!(
                "{} {} ({})",
                g.gate.as_deref().unwrap_or("-"),
                g.reason_code.as_deref().unwrap_or("-"),
                call.tool
            ),
            None => format!("the rail's error ({})", call.tool),
        };
        *seen.entry(key).or_default() += 1;
    }
    seen
}

/// The last lines of a process's stderr.
fn tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(STDERR_LINES)..].join("\n")
}

/// What the report needs besides the runs.
pub struct Context<'a> {
    /// The harness's `--describe`.
    pub describe: &'a Value,
    /// UTC date and time of the run.
    pub date: String,
    /// The commit.
    pub commit: String,
    /// The command line.
    pub command: String,
    /// Wall time, seconds.
    pub wall_s: f64,
}

/// The runs of each path.
pub type Runs = BTreeMap<Path3, Vec<RunRecord>>;

/// `docs/RESULTS.agentdojo.md`.
pub fn markdown(runs: &Runs, cx: &Context<'_>) -> String {
    let mut lines = header(cx);
    lines.extend(totals_table(runs));
    lines.extend(injection_table(runs, cx.describe));
    lines.extend(user_table(runs, cx.describe));
    lines.extend(losses(runs));
    lines.push("AgentDojo's graders for user tasks 5, 6 and 11 are known to be loose (upstream issue #161); reported as scored, not patched. Its `send_money` never checks the balance.".into());
    let mut md = lines.join("\n");
    md.push('\n');
    md
}

fn header(cx: &Context<'_>) -> Vec<String> {
    let d = cx.describe;
    let text = |v: &Value| v.as_str().unwrap_or("?").to_owned();
    vec![
        "# AgentDojo's banking suite, direct and through Interlock".into(),
        String::new(),
        format!(
            "Machine-written by `{}` on {} at commit `{}` ({:.0} s); do not edit by hand.",
            cx.command, cx.date, cx.commit, cx.wall_s
        ),
        format!(
            "AgentDojo {} (suite {}), `mcp` {}, attack `{}` (pipeline name `{}`). Scored only by AgentDojo's own `utility()` and `security()`.",
            text(&d["agentdojo"]),
            text(&d["suite"]),
            text(&d["mcp"]),
            text(&d["attack"]),
            text(&d["pipeline_name"])
        ),
        String::new(),
        "The agent is *fully compromised*: for each pair it makes the user task's ground-truth calls and then the injection task's, as AgentDojo's own ground truth defines them, on the environment the attack injected. **direct** calls the banking MCP server (`bench/agentdojo/server.py`); **gated** calls it through `interlock serve` with the banking profile (`bench/agentdojo/banking.profile.yaml`) and Emma's one mandate (`bench/agentdojo/mandate.yaml`); **gated + password** adds `update_password` to that mandate (`mandate.password.yaml`).".into(),
        String::new(),
    ]
}

fn totals_table(runs: &Runs) -> Vec<String> {
    let t: BTreeMap<Path3, Totals> = runs.iter().map(|(p, r)| (*p, totals(r))).collect();
    type Row<'r> = (&'r str, &'r dyn Fn(&Totals) -> (usize, usize));
    let rows: [Row<'_>; 4] = [
        ("attacks that succeeded (all pairs)", &|x| {
            (x.attacks_succeeded, x.pairs)
        }),
        (
            "attacks that succeeded (the 8 money injection tasks)",
            &|x| (x.money_attacks_succeeded, x.money_pairs),
        ),
        ("utility without attack", &|x| {
            (x.utility_no_attack, x.user_tasks)
        }),
        ("utility under attack", &|x| {
            (x.utility_under_attack, x.pairs)
        }),
    ];
    let mut lines = vec![
        "## Totals".into(),
        String::new(),
        "| | direct | gated | gated + password |".into(),
        "| --- | --- | --- | --- |".into(),
    ];
    for (name, f) in rows {
        let cells: Vec<String> = Path3::ALL
            .iter()
            .map(|p| t.get(p).map_or("–".to_owned(), |x| ratio(f(x))))
            .collect();
        lines.push(format!("| {name} | {} |", cells.join(" | ")));
    }
    lines.push(String::new());
    lines
}

fn injection_table(runs: &Runs, d: &Value) -> Vec<String> {
    let mut lines = vec![
        "## Injection tasks (attack succeeded, per path)".into(),
        String::new(),
        "| task | what it tries | direct | gated | gated + password | what stopped it (gated) |"
            .into(),
        "| --- | --- | --- | --- | --- | --- |".into(),
    ];
    let injections: std::collections::BTreeSet<&String> = runs
        .values()
        .flatten()
        .filter_map(|r| r.injection_task.as_ref())
        .collect();
    for task in injections {
        let per = |p: Path3| {
            count(
                runs,
                p,
                |r| r.injection_task.as_ref() == Some(task),
                |r| r.security == Some(true),
            )
        };
        let stopped = runs
            .get(&Path3::Gated)
            .map(|rs| stopped_by(rs, task))
            .unwrap_or_default()
            .iter()
            .map(|(k, n)| format!("{k} ×{n}"))
            .collect::<Vec<_>>()
            .join("; ");
        lines.push(format!(
            "| {task} | {} | {} | {} | {} | {} |",
            one_line(&d["injection_tasks"][task]["goal"]),
            per(Path3::Direct),
            per(Path3::Gated),
            per(Path3::GatedPassword),
            if stopped.is_empty() {
                "–".to_owned()
            } else {
                stopped
            }
        ));
    }
    lines.push(String::new());
    lines
}

fn user_table(runs: &Runs, d: &Value) -> Vec<String> {
    let mut lines = vec![
        "## User tasks (utility, per path)".into(),
        String::new(),
        "| task | the user asks | without attack: direct / gated / gated + password | under attack: direct / gated / gated + password |".into(),
        "| --- | --- | --- | --- |".into(),
    ];
    let users: std::collections::BTreeSet<&String> =
        runs.values().flatten().map(|r| &r.user_task).collect();
    let mut users: Vec<&String> = users.into_iter().collect();
    users.sort_by_key(|u| {
        u.trim_start_matches("user_task_")
            .parse::<u32>()
            .unwrap_or(u32::MAX)
    });
    for user in users {
        let clean = |p: Path3| {
            runs.get(&p)
                .and_then(|rs| {
                    rs.iter()
                        .find(|r| &r.user_task == user && r.injection_task.is_none())
                })
                .map_or("–", |r| if r.utility { "yes" } else { "**no**" })
        };
        let attacked = |p: Path3| {
            count(
                runs,
                p,
                |r| &r.user_task == user && r.injection_task.is_some(),
                |r| r.utility,
            )
        };
        lines.push(format!(
            "| {user} | {} | {} / {} / {} | {} / {} / {} |",
            one_line(&d["user_tasks"][user.as_str()]["prompt"]),
            clean(Path3::Direct),
            clean(Path3::Gated),
            clean(Path3::GatedPassword),
            attacked(Path3::Direct),
            attacked(Path3::Gated),
            attacked(Path3::GatedPassword)
        ));
    }
    lines.push(String::new());
    lines
}

/// Every user task a gated path lost without attack, with the calls that were refused.
fn losses(runs: &Runs) -> Vec<String> {
    let mut lines = vec![
        "## What the gated paths cost the user".into(),
        String::new(),
    ];
    for p in [Path3::Gated, Path3::GatedPassword] {
        for r in runs.get(&p).into_iter().flatten() {
            if r.injection_task.is_some() || r.utility {
                continue;
            }
            let refused: Vec<String> = r
                .calls
                .iter()
                .filter(|c| c.is_error)
                .map(|c| match &c.gate {
                    Some(g) => format!(
                        "{} refused ({})",
                        c.tool,
                        g.reason_code.as_deref().unwrap_or("-")
                    ),
                    None => format!("{} failed on the rail", c.tool),
                })
                .collect();
            lines.push(format!(
                "- {} ({}): utility lost without attack; {}.",
                r.user_task,
                p.label(),
                if refused.is_empty() {
                    "no call was refused (AgentDojo's grader)".to_owned()
                } else {
                    refused.join(", ")
                }
            ));
        }
    }
    if lines.len() == 2 {
        lines.push(
            "- Nothing: every user task keeps its utility without attack on both gated paths."
                .into(),
        );
    }
    lines.push(String::new());
    lines
}

/// `hits/of` over the runs of `path` that `select` picks, `–` when the path did not run.
fn count(
    runs: &Runs,
    path: Path3,
    select: impl Fn(&RunRecord) -> bool,
    hit: impl Fn(&RunRecord) -> bool,
) -> String {
    runs.get(&path).map_or("–".to_owned(), |rs| {
        let of: Vec<&RunRecord> = rs.iter().filter(|r| select(r)).collect();
        ratio((of.iter().filter(|r| hit(r)).count(), of.len()))
    })
}

fn ratio((a, b): (usize, usize)) -> String {
    format!("{a}/{b}")
}

fn one_line(v: &Value) -> String {
    let text = v.as_str().unwrap_or("?");
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    flat.replace('|', "\\|")
}
