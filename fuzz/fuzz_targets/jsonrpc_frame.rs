//! Arbitrary lines into the proxy's request handling, in process and with no child: the frame
//! guard (`interlock::frames`), rmcp's server and the `ProxyServer` behind it, with the engine
//! on a fresh ledger (in `/dev/shm` where there is one) and the mock rail served on an
//! in-process pipe. Each run starts a session (`initialize`, `notifications/initialized`) and
//! then sends the input's lines as the agent's.
//!
//! Checked: never a panic (libFuzzer aborts on one in any thread); the guard passes each frame
//! unchanged, answers it with exactly one JSON-RPC error, or skips a blank one; what reaches
//! stdout is nothing but JSON-RPC server messages, one per line; every request is answered
//! (unless the input cancels one) and none twice; and afterwards the ledger's audit chain
//! verifies and its history keeps the machine's invariants, whatever was asked.
#![no_main]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use interlock::frames::{self, Verdict};
use interlock::server::{Proxy, ProxyServer};
use interlock::upstream::{McpRail, Upstream, tool_sha256};
use interlock_engine::{Engine, EngineConfig, Ledger, SystemClock};
use interlock_rail_mock::journal::{Journal, JournalLocation};
use interlock_rail_mock::seed::{DEMO_SEED_NAME, Seed};
use interlock_rail_mock::server::{RailConfig, RailServer};
use interlock_spec::ids::AgentId;
use interlock_spec::mandate::Mandate;
use libfuzzer_sys::fuzz_target;
use rmcp::ServiceExt;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// How long a run waits for the answers it is owed before calling one lost.
const ANSWERS_WAIT_MAX: Duration = Duration::from_secs(20);
/// The bound on one upstream call (the in-process rail answers in microseconds).
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Pipe buffers, as the guard's own.
const PIPE_BYTES: usize = 64 * 1024;

const AGENT: &str = "agent_support_bot";

/// The session's opening, sent before the input.
const OPENING: &str = concat!(
    r#"{"jsonrpc":"2.0","id":"fuzz-init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"fuzz","version":"0"}}}"#,
    "\n",
    r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    "\n"
);

struct World {
    rt: tokio::runtime::Runtime,
    dir: PathBuf,
    seed: Seed,
    mandate: Mandate,
    runs: AtomicU64,
}

/// The mock rail on an in-process pipe, and the proxy's upstream client connected to it.
async fn rail(seed: &Seed) -> (Upstream, tokio::sync::watch::Sender<bool>) {
    let journal = Journal::open(&JournalLocation::Memory, Some(seed)).expect("the mock's journal");
    let (closed_tx, closed_rx) = tokio::sync::watch::channel(false);
    let (client_end, server_end) = tokio::io::duplex(PIPE_BYTES);
    let server = RailServer::new(journal, RailConfig::default(), closed_rx);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(tokio::io::split(server_end)).await {
            let _ = running.waiting().await;
        }
    });
    let upstream = Upstream::over(tokio::io::split(client_end), CALL_TIMEOUT)
        .await
        .expect("the in-process rail initializes");
    (upstream, closed_tx)
}

/// The tests' mandate (`proxy/tests/common`), pinned to the mock's live tools.
fn mandate(server_id: &str, pins: &serde_json::Map<String, Value>) -> Mandate {
    let pin = |tool: &str| pins[tool].as_str().expect("the mock offers it").to_owned();
    interlock_profile::razorpay::refund_desk(AGENT)
        .mandate_id("mnd_fuzz")
        .expires_at(4_000_000_000_000)
        .max_refunds_per_payment("create_refund", 3)
        .pinned(server_id, &"0".repeat(64))
        .pin("fetch_payment", &pin("fetch_payment"))
        .pin("create_refund", &pin("create_refund"))
        .pin(
            "create_instant_settlement",
            &pin("create_instant_settlement"),
        )
        .build()
        .unwrap_or_else(|e| panic!("the fuzz mandate: {e}"))
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        let seed = Seed::load(DEMO_SEED_NAME).expect("the demo seed");
        let (server_id, pins) = rt.block_on(async {
            let (upstream, _closed) = rail(&seed).await;
            let tools = upstream.tools().await.expect("the mock's tools");
            let pins = tools
                .iter()
                .map(|t| (t.name.to_string(), Value::String(tool_sha256(t).unwrap())))
                .collect();
            let id = upstream.server_id.clone();
            upstream.close().await;
            (id, pins)
        });
        let shm = PathBuf::from("/dev/shm");
        let base = if shm.is_dir() {
            shm
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("interlock-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        World {
            rt,
            dir,
            mandate: mandate(&server_id, &pins),
            seed,
            runs: AtomicU64::new(0),
        }
    })
}

/// What the input's frames are owed. The guard answers each unreadable frame once. rmcp answers
/// every request id, but two requests in flight under one id get one answer between them (found
/// by this target: rmcp keys its in-flight requests by id); JSON-RPC forbids such reuse and an
/// answer could not say which of the two it is for, so an id is owed one answer, not one per
/// request. A request the input cancels is owed nothing (the cancellation may come first).
struct Owed {
    ids: BTreeSet<String>,
    cancelled: BTreeSet<String>,
    guard_answers: usize,
    answers_max: usize,
}

fn owed(data: &[u8]) -> Owed {
    let mut owed = Owed {
        ids: BTreeSet::from(["\"fuzz-init\"".to_owned()]),
        cancelled: BTreeSet::new(),
        guard_answers: 0,
        answers_max: 1,
    };
    for frame in data.split(|b| *b == b'\n') {
        match frames::judge(frame) {
            Verdict::Pass => {
                assert!(serde_json::from_slice::<ClientJsonRpcMessage>(frame).is_ok());
                let value: Value = serde_json::from_slice(frame).expect("a passed frame is JSON");
                if value.get("method").is_some()
                    && let Some(id) = value.get("id")
                {
                    owed.ids.insert(id.to_string());
                    owed.answers_max += 1;
                }
                if value["method"] == "notifications/cancelled" {
                    owed.cancelled
                        .insert(value["params"]["requestId"].to_string());
                }
            }
            Verdict::Answer(answer) => {
                let code = answer["error"]["code"].as_i64();
                assert!(code == Some(frames::PARSE_ERROR) || code == Some(frames::INVALID_REQUEST));
                owed.guard_answers += 1;
                owed.answers_max += 1;
            }
            Verdict::Skip => assert!(frame.iter().all(u8::is_ascii_whitespace)),
        }
    }
    for id in &owed.cancelled {
        owed.ids.remove(id);
    }
    owed
}

fn is_guard_answer(value: &Value) -> bool {
    let code = value["error"]["code"].as_i64();
    code == Some(frames::PARSE_ERROR) || code == Some(frames::INVALID_REQUEST)
}

fn is_answer(value: &Value) -> bool {
    value.get("id").is_some() && (value.get("result").is_some() || value.get("error").is_some())
}

fuzz_target!(|data: &[u8]| {
    let world = world();
    let owed = owed(data);
    let run = world.runs.fetch_add(1, Ordering::Relaxed);
    let db = world.dir.join(format!("ledger-{run}.db"));
    let mut input = OPENING.as_bytes().to_vec();
    input.extend_from_slice(data);
    input.push(b'\n');
    let lines = world.rt.block_on(async {
        let (upstream, _rail_closed) = rail(&world.seed).await;
        let upstream = Arc::new(upstream);
        let ledger = Ledger::open(&db).expect("a fresh ledger");
        let rail = McpRail {
            upstream: upstream.clone(),
            profile: interlock::cli::rail_profile(),
        };
        let mut config = EngineConfig::new(format!("fuzz-{run}"));
        config.call_timeout_ms = CALL_TIMEOUT.as_millis() as u64;
        config.lease_ttl_ms = config.call_timeout_ms + interlock_engine::executor::LEASE_MARGIN_MS;
        let engine = Arc::new(
            Engine::new(ledger, rail, Arc::new(SystemClock), world.mandate.clone(), config)
                .expect("an engine"),
        );
        let server = ProxyServer(Arc::new(Proxy {
            engine: engine.clone(),
            upstream: upstream.clone(),
            agent_id: AgentId::parse(AGENT).unwrap(),
            // A held call is answered as held: the fuzzer's frames never answer an elicitation,
            // and waiting for one would only slow every run down.
            approval_wait: None,
        }));
        let (mut stdin, stdin_read) = tokio::io::duplex(PIPE_BYTES);
        let (stdout_write, stdout) = tokio::io::duplex(PIPE_BYTES);
        let (pipes, writer) = frames::guard(stdin_read, stdout_write);
        let session = tokio::spawn(async move {
            if let Ok(running) = server.serve(pipes).await {
                let _ = running.waiting().await;
            }
        });
        // The agent keeps stdin open until it has its answers, as a real one does.
        let feeder = tokio::spawn(async move {
            let _ = stdin.write_all(&input).await;
            stdin
        });
        let mut stdout = BufReader::new(stdout).lines();
        let mut lines = Vec::new();
        let mut unanswered = owed.ids.clone();
        let mut guard_answers = 0;
        let deadline = tokio::time::Instant::now() + ANSWERS_WAIT_MAX;
        while !unanswered.is_empty() || guard_answers < owed.guard_answers {
            let line = tokio::time::timeout_at(deadline, stdout.next_line())
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "after {ANSWERS_WAIT_MAX:?}, ids {unanswered:?} unanswered and {guard_answers} \
                         of {} unreadable frames answered: {lines:#?}",
                        owed.guard_answers
                    )
                })
                .expect("stdout reads")
                .unwrap_or_else(|| panic!("stdout closed while answers were owed: {lines:#?}"));
            let value: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout is JSON ({e}): {line:?}"));
            if is_answer(&value) {
                unanswered.remove(&value["id"].to_string());
                guard_answers += usize::from(is_guard_answer(&value));
            }
            lines.push(line);
        }
        drop(feeder.await.expect("the feeder"));
        let _ = tokio::time::timeout(ANSWERS_WAIT_MAX, session).await;
        let _ = tokio::time::timeout(ANSWERS_WAIT_MAX, writer).await;
        while let Ok(Ok(Some(line))) =
            tokio::time::timeout(ANSWERS_WAIT_MAX, stdout.next_line()).await
        {
            lines.push(line);
        }
        // Whatever the agent sent, the ledger stays a ledger.
        engine.ledger().verify_chain().expect("the audit chain verifies");
        let history = engine.ledger().history().expect("the history reads");
        if let Err(v) = interlock_machine::invariants::check_history(&history) {
            panic!("{}: {}", v.invariant, v.detail);
        }
        // The rail's client is dropped on the runtime it lives on.
        drop(engine);
        if let Ok(upstream) = Arc::try_unwrap(upstream) {
            upstream.close().await;
        }
        lines
    });
    let mut answers = 0;
    for line in &lines {
        let value: Value = serde_json::from_str(line).expect("stdout is JSON");
        assert_eq!(value["jsonrpc"], "2.0", "{line}");
        assert!(
            serde_json::from_str::<ServerJsonRpcMessage>(line).is_ok(),
            "not a server message: {line}"
        );
        answers += usize::from(is_answer(&value));
    }
    assert!(
        answers <= owed.answers_max,
        "{answers} answers where at most {} are owed: {lines:#?}",
        owed.answers_max
    );
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
});
