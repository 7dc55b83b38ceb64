//! `interlock demo`: the real proxy in front of `interlock-rail-mock`, driven by a scripted MCP
//! client through six steps. Each step's decision is printed to stdout and checked; any step that
//! does not behave as the story says ends the demo with an error (exit 1).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use interlock_rail_mock::harness::{self, EntityKind, Inspection, MockCommand};
use interlock_spec::action::STAMP_NOTE_KEY;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

/// The demo mandate's agent.
const AGENT: &str = "agent_support_bot";
/// A call that should answer gets this long.
const CALL_BOUND: Duration = Duration::from_secs(30);

/// The mock rail's binary name, looked up next to the running `interlock`.
const MOCK: &str = harness::BIN_NAME;

/// `--json`: the story goes to stderr and one JSON document to stdout at the end. A static,
/// because the demo is one run of one process and `say!` is used from free functions.
static JSON_OUT: AtomicBool = AtomicBool::new(false);
/// Each step's `interlock` block, in order, for the JSON document.
static DECISIONS: Mutex<Vec<Value>> = Mutex::new(Vec::new());

/// A line of the story: stdout, or stderr under `--json`.
macro_rules! say {
    ($($arg:tt)*) => {
        if JSON_OUT.load(Ordering::Relaxed) {
            eprintln!($($arg)*)
        } else {
            println!($($arg)*)
        }
    };
}

struct Demo {
    exe: PathBuf,
    mock: PathBuf,
    dir: PathBuf,
    journal: PathBuf,
    db: PathBuf,
    mandate: PathBuf,
}

type Client = RunningService<RoleClient, ()>;

/// Fails the demo with `why` unless `ok`.
fn expect(ok: bool, why: impl FnOnce() -> String) -> Result<(), String> {
    if ok { Ok(()) } else { Err(why()) }
}

/// Runs the demo; `keep` leaves the temporary directory in place; `json` prints one JSON
/// document (the decisions, the ledger, the journal) on stdout and the story on stderr.
pub fn run(keep: bool, json: bool) -> Result<(), String> {
    JSON_OUT.store(json, Ordering::Relaxed);
    let started = Instant::now();
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let mock = exe
        .parent()
        .ok_or("this executable has no directory")?
        .join(MOCK);
    if !mock.exists() {
        return Err(format!(
            "the demo needs {MOCK} next to {} (not found); build both first: \
             cargo build --release -p interlock-rail-mock -p interlock && target/release/interlock demo",
            exe.display()
        ));
    }
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!("interlock-demo-{}-{stamp}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let demo = Demo {
        exe,
        mock,
        journal: dir.join("rail.db"),
        db: dir.join("ledger.db"),
        mandate: dir.join("mandate.yaml"),
        dir,
    };
    say!("Interlock demo, in {}", demo.dir.display());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let result = rt.block_on(demo.story());
    rt.shutdown_timeout(Duration::from_secs(1));
    let seconds = started.elapsed().as_secs_f64();
    let decisions = DECISIONS
        .lock()
        .map(|d| d.clone())
        .unwrap_or_else(|p| p.into_inner().clone());
    match result {
        Ok(end) => {
            say!("demo passed in {seconds:.1} s");
            if keep {
                say!("files kept in {}", demo.dir.display());
            } else {
                let _ = std::fs::remove_dir_all(&demo.dir);
            }
            if json {
                let kept = keep.then(|| demo.dir.display().to_string());
                println!(
                    "{}",
                    json!({"passed": true, "seconds": seconds, "dir": kept,
                        "decisions": decisions, "ledger": end["ledger"],
                        "journal": end["journal"], "stamped_entities": end["stamped_entities"]})
                );
            }
            Ok(())
        }
        Err(why) => {
            let why = format!("demo FAILED: {why} (files kept in {})", demo.dir.display());
            if json {
                println!(
                    "{}",
                    json!({"passed": false, "seconds": seconds, "error": why,
                        "dir": demo.dir.display().to_string(), "decisions": decisions})
                );
            }
            Err(why)
        }
    }
}

/// The `interlock` block of a result.
fn block(result: &CallToolResult) -> Value {
    result
        .structured_content
        .as_ref()
        .map(|s| s["interlock"].clone())
        .unwrap_or(Value::Null)
}

/// Prints a decision on one line, the message on the next.
fn show(result: &CallToolResult) -> Value {
    let b = block(result);
    if let Ok(mut decisions) = DECISIONS.lock() {
        decisions.push(b.clone());
    }
    let entity = b["rail_entity_id"].as_str().unwrap_or("-");
    say!(
        "   -> {} / {}  entity {}{}",
        b["outcome"].as_str().unwrap_or("?"),
        b["reason_code"].as_str().unwrap_or("?"),
        entity,
        if b["idempotent_replay"] == true {
            "  (idempotent replay)"
        } else {
            ""
        }
    );
    if let Some(message) = b["message"].as_str() {
        say!("      {message}");
    }
    b
}

fn params(tool: &str, args: Value) -> CallToolRequestParams {
    let p = CallToolRequestParams::new(tool.to_owned());
    match args {
        Value::Object(map) => p.with_arguments(map),
        _ => p,
    }
}

async fn call(client: &Client, tool: &str, args: Value) -> Result<CallToolResult, String> {
    tokio::time::timeout(CALL_BOUND, client.call_tool(params(tool, args)))
        .await
        .map_err(|_| format!("{tool} did not answer in {CALL_BOUND:?}"))?
        .map_err(|e| format!("{tool} failed: {e}"))
}

fn refund(payment_id: &str, amount: u64) -> Value {
    json!({"payment_id": payment_id, "amount": amount})
}

impl Demo {
    /// `interlock ARGS` to its end: (success, stdout, stderr).
    fn interlock(&self, args: &[&std::ffi::OsStr]) -> Result<(bool, String, String), String> {
        let out = Command::new(&self.exe)
            .args(args)
            .env("RUST_LOG", "error")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", self.exe.display()))?;
        Ok((
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    }

    /// The mock's journal, from `inspect`.
    fn inspect(&self) -> Result<Inspection, String> {
        harness::inspect(&self.mock, &self.journal)
    }

    fn money_calls(&self) -> Result<u64, String> {
        Ok(self.inspect()?.call_counters.money_calls)
    }

    /// Refunds of `payment_id` carrying an Interlock stamp.
    fn stamped_refunds_of(&self, payment_id: &str) -> Result<usize, String> {
        Ok(self
            .inspect()?
            .entities()
            .filter(|e| e.payment_id == Some(payment_id) && e.note(STAMP_NOTE_KEY).is_some())
            .count())
    }

    /// The mock on the demo's journal, seeded with the embedded demo seed; `faults` if any.
    fn rail(&self, faults: &str) -> MockCommand {
        MockCommand::new(&self.mock)
            .journal(&self.journal)
            .seed("demo")
            .log_level("error")
            .faults(faults)
    }

    /// Seeds the journal: the mock started once on it with `--seed demo`, stdin closed at once.
    fn seed(&self) -> Result<(), String> {
        self.rail("")
            .run_to_end()
            .map_err(|e| format!("seeding the mock journal failed: {e}"))
    }

    /// The pins of the mock's live tools, from `interlock pin --json`.
    fn pins(&self) -> Result<Value, String> {
        let mut all: Vec<std::ffi::OsString> = vec!["pin".into(), "--json".into(), "--".into()];
        all.extend(
            MockCommand::new(&self.mock)
                .seed("demo")
                .log_level("error")
                .argv(),
        );
        let all: Vec<&std::ffi::OsStr> = all.iter().map(|a| a.as_os_str()).collect();
        let (ok, stdout, stderr) = self.interlock(&all)?;
        expect(ok, || format!("interlock pin failed: {stderr}"))?;
        serde_json::from_str(&stdout).map_err(|e| format!("pin printed no JSON: {e}"))
    }

    /// The demo mandate, with `pins`; `drift` names a tool whose pin is altered.
    fn write_mandate(&self, path: &Path, pins: &Value, drift: Option<&str>) -> Result<(), String> {
        let pin = |tool: &str| -> Result<String, String> {
            let real = pins["tools"][tool]
                .as_str()
                .ok_or_else(|| format!("no pin for {tool}"))?;
            if drift == Some(tool) {
                // One hex digit changed: the description the human approved is not this one.
                let flipped = if real.starts_with('0') { "1" } else { "0" };
                Ok(format!("{flipped}{}", &real[1..]))
            } else {
                Ok(real.to_owned())
            }
        };
        let mut mandate = interlock_profile::razorpay::refund_desk(AGENT)
            .mandate_id("mnd_demo")
            .pinned_by(pins)?;
        if let Some(tool) = drift {
            mandate = mandate.pin(tool, &pin(tool)?);
        }
        std::fs::write(path, mandate.yaml())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))
    }

    /// Starts `interlock serve` (mandate, db, faults, flags) and connects to it.
    async fn proxy(
        &self,
        mandate: &Path,
        db: &Path,
        faults: &str,
        flags: &[&str],
    ) -> Result<Client, String> {
        let mut cmd = tokio::process::Command::new(&self.exe);
        cmd.arg("serve")
            .arg("--mandate")
            .arg(mandate)
            .arg("--db")
            .arg(db)
            .args(["--agent", AGENT])
            .args(flags)
            .arg("--")
            .args(self.rail(faults).argv())
            .env("RUST_LOG", "error")
            .env_remove("RAZORPAY_KEY_ID");
        let (transport, _stderr) = TokioChildProcess::builder(cmd)
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start interlock serve: {e}"))?;
        tokio::time::timeout(CALL_BOUND, ().serve(transport))
            .await
            .map_err(|_| "interlock serve did not initialize in time".to_owned())?
            .map_err(|e| format!("interlock serve did not initialize: {e}"))
    }

    async fn story(&self) -> Result<Value, String> {
        self.seed()?;
        let pins = self.pins()?;
        self.write_mandate(&self.mandate, &pins, None)?;
        say!(
            "mock rail seeded (--seed demo); mandate written with the pins of the mock's live tools\n"
        );

        // Steps 1–4 on one proxy whose rail hangs, after applying it, on the 2nd money call.
        let proxy = self
            .proxy(
                &self.mandate,
                &self.db,
                "timeout_after_apply@2",
                &["--call-timeout-ms", "1000", "--reconcile-every-ms", "500"],
            )
            .await?;

        say!("1) benign refund: create_refund pay_1002 amount 10000");
        let first = show(&call(&proxy, "create_refund", refund("pay_1002", 10_000)).await?);
        expect(
            first["outcome"] == "APPLIED" && first["reason_code"] == "APPLIED",
            || format!("step 1: expected APPLIED, got {first}"),
        )?;
        let entity = first["rail_entity_id"].as_str().unwrap_or("").to_owned();

        say!("\n2) the agent retries it with a fresh request: the same refund again");
        let again = show(&call(&proxy, "create_refund", refund("pay_1002", 10_000)).await?);
        expect(
            again["reason_code"] == "IDEMPOTENT_REPLAY" && again["rail_entity_id"] == entity,
            || format!("step 2: expected an idempotent replay of {entity}, got {again}"),
        )?;
        let stamped = self.stamped_refunds_of("pay_1002")?;
        expect(stamped == 1, || {
            format!("step 2: {stamped} stamped refunds on pay_1002")
        })?;
        say!("      rail: 1 refund on pay_1002");

        say!("\n3) injected over-refund: create_refund pay_1003 amount 250000 (refundable 200000)");
        let over = show(&call(&proxy, "create_refund", refund("pay_1003", 250_000)).await?);
        let message = over["message"].as_str().unwrap_or("");
        expect(
            over["outcome"] == "REFUSED"
                && over["reason_code"] == "REFUND_EXCEEDS_REFUNDABLE"
                && message.contains("250000")
                && message.contains("200000"),
            || format!("step 3: expected REFUND_EXCEEDS_REFUNDABLE with the numbers, got {over}"),
        )?;
        let money = self.money_calls()?;
        expect(money == 1, || {
            format!("step 3: the rail saw {money} money calls, not 1")
        })?;
        say!("      rail: no money call made");

        say!(
            "\n4) 504 after apply: create_refund pay_1005 amount 25000; the rail applies it and never answers"
        );
        let lost = show(&call(&proxy, "create_refund", refund("pay_1005", 25_000)).await?);
        expect(lost["outcome"] == "UNKNOWN", || {
            format!("step 4: expected UNKNOWN after the call timeout, got {lost}")
        })?;
        say!("   retry storm: 5 identical retries at once");
        let peer = proxy.peer().clone();
        let storm: Vec<_> = (0..5)
            .map(|_| {
                let peer = peer.clone();
                tokio::spawn(async move {
                    peer.call_tool(params("create_refund", refund("pay_1005", 25_000)))
                        .await
                })
            })
            .collect();
        for task in storm {
            let result = task
                .await
                .map_err(|e| format!("step 4: a retry task failed: {e}"))?
                .map_err(|e| format!("step 4: a retry failed: {e}"))?;
            let b = show(&result);
            expect(
                ["APPLIED", "UNKNOWN", "IN_PROGRESS"]
                    .contains(&b["outcome"].as_str().unwrap_or("")),
                || format!("step 4: a retry was {b}"),
            )?;
        }
        say!("   the agent keeps retrying until the reconciler has settled it");
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut calls = 6;
        let settled = loop {
            calls += 1;
            let result = call(&proxy, "create_refund", refund("pay_1005", 25_000)).await?;
            let b = block(&result);
            if b["outcome"] == "APPLIED" {
                break show(&result);
            }
            expect(Instant::now() < deadline, || {
                format!("step 4: not reconciled in 20 s: {b}")
            })?;
            tokio::time::sleep(Duration::from_millis(300)).await;
        };
        expect(settled["reason_code"] == "IDEMPOTENT_REPLAY", || {
            format!("step 4: expected a replay of the reconciled refund, got {settled}")
        })?;
        let stamped = self.stamped_refunds_of("pay_1005")?;
        let money = self.money_calls()?;
        expect(stamped == 1 && money == 2, || {
            format!("step 4: {stamped} stamped refunds on pay_1005, {money} money calls")
        })?;
        say!(
            "      rail: exactly 1 refund on pay_1005 after {calls} identical calls (2 money calls in all)"
        );
        let _ = proxy.cancel().await;

        say!(
            "\n5) drifted tool description: a proxy whose mandate pins another create_refund than the rail serves"
        );
        let drifted = self.dir.join("drifted.yaml");
        self.write_mandate(&drifted, &pins, Some("create_refund"))?;
        let proxy = self
            .proxy(&drifted, &self.dir.join("drifted.ledger.db"), "none", &[])
            .await?;
        let tools = tokio::time::timeout(CALL_BOUND, proxy.list_all_tools())
            .await
            .map_err(|_| "step 5: tools/list timed out".to_owned())?
            .map_err(|e| format!("step 5: tools/list failed: {e}"))?;
        let mut names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
        names.sort();
        say!("   tools/list: {}", names.join(", "));
        expect(!names.iter().any(|n| n == "create_refund"), || {
            "step 5: the drifted create_refund was listed".into()
        })?;
        say!("   create_refund pay_1002 amount 5000");
        let refused = show(&call(&proxy, "create_refund", refund("pay_1002", 5_000)).await?);
        expect(refused["reason_code"] == "TOOL_DRIFTED", || {
            format!("step 5: expected TOOL_DRIFTED, got {refused}")
        })?;
        let money = self.money_calls()?;
        expect(money == 2, || {
            format!("step 5: the rail saw {money} money calls, not 2")
        })?;
        say!("      rail: no money call made");
        let _ = proxy.cancel().await;

        say!(
            "\n6) held settlement: create_instant_settlement 10000; the balance read outlives the call bound"
        );
        let reads = self.inspect()?.call_counters.read_calls;
        let slow = format!("slow=2500@{}", reads + 1);
        let proxy = self
            .proxy(
                &self.mandate,
                &self.db,
                &slow,
                &["--call-timeout-ms", "1000"],
            )
            .await?;
        let settle = json!({"amount": 10_000, "description": "payout"});
        let held = show(&call(&proxy, "create_instant_settlement", settle.clone()).await?);
        expect(held["outcome"] == "HELD", || {
            format!("step 6: expected HELD, got {held}")
        })?;
        let sik = held["sik"].as_str().unwrap_or("").to_owned();
        say!("   interlock approve {sik} --by ops@example.com");
        let os = std::ffi::OsStr::new;
        let mut approve = vec![
            os("approve"),
            os(&sik),
            os("--mandate"),
            self.mandate.as_os_str(),
            os("--db"),
            self.db.as_os_str(),
            os("--by"),
            os("ops@example.com"),
            os("--why"),
            os("the balance was checked by hand"),
            os("--json"),
            os("--"),
        ];
        let rail = self.rail("").argv();
        approve.extend(rail.iter().map(|a| a.as_os_str()));
        let (ok, stdout, stderr) = self.interlock(&approve)?;
        expect(ok, || format!("step 6: approve failed: {stdout} {stderr}"))?;
        let approved: Value = serde_json::from_str(&stdout)
            .map_err(|e| format!("step 6: approve printed no JSON: {e}"))?;
        say!(
            "   -> {} / {}  entity {}",
            approved["outcome"].as_str().unwrap_or("?"),
            approved["reason_code"].as_str().unwrap_or("?"),
            approved["rail_entity_id"].as_str().unwrap_or("-")
        );
        expect(approved["outcome"] == "APPLIED", || {
            format!("step 6: approval did not apply: {approved}")
        })?;
        say!("   the agent asks again");
        let after = show(&call(&proxy, "create_instant_settlement", settle).await?);
        expect(
            after["reason_code"] == "IDEMPOTENT_REPLAY"
                && after["rail_entity_id"] == approved["rail_entity_id"],
            || format!("step 6: expected a replay of the approved settlement, got {after}"),
        )?;
        let _ = proxy.cancel().await;

        self.summary()
    }

    /// The ledger and the rail journal, then the invariant.
    fn summary(&self) -> Result<Value, String> {
        let os = std::ffi::OsStr::new;
        let (ok, json_text, stderr) = self.interlock(&[
            os("ledger"),
            os("--db"),
            self.db.as_os_str(),
            os("list"),
            os("--json"),
        ])?;
        expect(ok, || format!("ledger list --json failed: {stderr}"))?;
        let rows: Vec<Value> =
            serde_json::from_str(&json_text).map_err(|e| format!("ledger list JSON: {e}"))?;
        let journal = self.inspect()?;
        // (stamp, entity id, what, subject, amount) of every entity on the rail.
        let entities: Vec<(Option<String>, String, &str, String, u64)> = journal
            .entities()
            .map(|e| {
                (
                    e.note(STAMP_NOTE_KEY).map(str::to_owned),
                    e.id.to_owned(),
                    match e.kind {
                        EntityKind::Refund => "refund",
                        EntityKind::Settlement => "settlement",
                    },
                    e.payment_id.unwrap_or("balance").to_owned(),
                    e.amount,
                )
            })
            .collect();
        let stamps: Vec<(String, String)> = entities
            .iter()
            .filter_map(|(stamp, id, ..)| stamp.clone().map(|s| (s, id.clone())))
            .collect();

        // One line per intent beside the entity carrying its stamp, then the entities no
        // intent made (the seed's history).
        say!(
            "\n=== the ledger (interlock ledger list) beside the rail's journal ({MOCK} inspect) ==="
        );
        say!(
            "{:<32} {:<21} {:<21} | {:<10} {:<21} {:<8} {:>7}",
            "intent (SIK)",
            "state",
            "ledger's entity",
            "rail",
            "entity",
            "subject",
            "amount"
        );
        let mut shown = vec![false; entities.len()];
        for r in &rows {
            let sik = r["sik"].as_str().unwrap_or("?");
            let left = format!(
                "{:<32} {:<21} {:<21}",
                sik,
                r["state"].as_str().unwrap_or("?"),
                r["rail_entity_id"].as_str().unwrap_or("-")
            );
            let mine: Vec<usize> = (0..entities.len())
                .filter(|&i| entities[i].0.as_deref() == Some(sik))
                .collect();
            if mine.is_empty() {
                say!("{left} | (no entity carries this stamp)");
            }
            for i in mine {
                shown[i] = true;
                let (_, id, what, subject, amount) = &entities[i];
                say!("{left} | {what:<10} {id:<21} {subject:<8} {amount:>7}");
            }
        }
        for (i, (stamp, id, what, subject, amount)) in entities.iter().enumerate() {
            if !shown[i] {
                let whose = match stamp {
                    Some(s) => format!("stamped {s}, no such intent"),
                    None => "(not made through Interlock)".to_owned(),
                };
                say!(
                    "{:<32} {:<21} {:<21} | {what:<10} {id:<21} {subject:<8} {amount:>7}",
                    whose,
                    "",
                    ""
                );
            }
        }
        say!(
            "rail call counters: {}",
            serde_json::to_string(&journal.call_counters).unwrap_or_default()
        );

        // Invariant: each stamp once in the rail, and the stamped entities are exactly the
        // ledger's APPLIED intents.
        let mut unique: Vec<&String> = stamps.iter().map(|(s, _)| s).collect();
        unique.sort();
        unique.dedup();
        expect(unique.len() == stamps.len(), || {
            format!("a stamp appears twice in the rail: {stamps:?}")
        })?;
        let applied: Vec<(String, String)> = rows
            .iter()
            .filter(|r| r["state"] == "APPLIED")
            .map(|r| {
                (
                    r["sik"].as_str().unwrap_or("").to_owned(),
                    r["rail_entity_id"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect();
        let mut a = applied.clone();
        let mut s = stamps.clone();
        a.sort();
        s.sort();
        expect(a == s, || {
            format!("the ledger's applied intents {a:?} are not the rail's stamped entities {s:?}")
        })?;
        say!(
            "\ninvariant checked: entities with an Interlock stamp: {}, each stamp once, each one an APPLIED intent in the ledger",
            stamps.len()
        );
        Ok(json!({"ledger": rows, "journal": journal, "stamped_entities": stamps.len()}))
    }
}
