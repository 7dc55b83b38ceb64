//! OpenTelemetry spans, checked with the SDK's in-memory exporter: the proxy in process, the
//! mock rail on an in-process pipe whose frames are recorded, and an rmcp client as the agent
//! sending its own `traceparent` in `_meta`. Proves the span names, kinds, parentage across
//! the agent → proxy → upstream hops, the MCP semantic-convention attributes, Interlock's
//! decision attributes, the `traceparent` the upstream receives, that payloads stay out unless
//! asked for, and that tracing off exports nothing and sends no trace context. Last, the real
//! binary with `--otlp-endpoint` posts OTLP/protobuf to a collector (a local listener).

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use interlock::server::{Proxy, ProxyServer};
use interlock::telemetry::{self, Telemetry, Transport};
use interlock::upstream::{McpRail, Upstream, tool_sha256};
use interlock_engine::{Engine, EngineConfig, Ledger, SystemClock};
use interlock_rail_mock::journal::{Journal, JournalLocation};
use interlock_rail_mock::seed::{DEMO_SEED_NAME, Seed};
use interlock_rail_mock::server::{RailConfig, RailServer};
use interlock_spec::ids::AgentId;
use interlock_spec::mandate::Mandate;
use opentelemetry::trace::{SpanKind, Status};
use opentelemetry::{Array, Value as OtelValue};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult, RequestMetaObject};
use rmcp::service::{RoleClient, RunningService};
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const AGENT: &str = "agent_support_bot";
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
const PIPE_BYTES: usize = 64 * 1024;
/// The agent's own trace: the proxy's spans must join it.
const AGENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const AGENT_SPAN: &str = "00f067aa0ba902b7";

/// What the proxy sent the upstream, one JSON-RPC frame per entry.
type Frames = Arc<Mutex<Vec<Value>>>;

struct World {
    agent: RunningService<RoleClient, ()>,
    exporter: InMemorySpanExporter,
    provider: SdkTracerProvider,
    upstream_frames: Frames,
}

/// The mock rail behind a recording relay: every line the proxy writes upstream is kept.
async fn rail(seed: &Seed, frames: Frames) -> Upstream {
    let journal = Journal::open(&JournalLocation::Memory, Some(seed)).expect("the mock's journal");
    let (_closed_tx, closed_rx) = tokio::sync::watch::channel(false);
    let (client_end, relay_a) = tokio::io::duplex(PIPE_BYTES);
    let (relay_b, server_end) = tokio::io::duplex(PIPE_BYTES);
    let server = RailServer::new(journal, RailConfig::default(), closed_rx);
    tokio::spawn(async move {
        let _keep_open = _closed_tx;
        if let Ok(running) = server.serve(tokio::io::split(server_end)).await {
            let _ = running.waiting().await;
        }
    });
    let (from_proxy, mut to_proxy) = tokio::io::split(relay_a);
    let (from_rail, mut to_rail) = tokio::io::split(relay_b);
    tokio::spawn(async move {
        let mut lines = BufReader::new(from_proxy).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if let Ok(frame) = serde_json::from_str(&line) {
                frames.lock().unwrap().push(frame);
            }
            if to_rail
                .write_all(format!("{line}\n").as_bytes())
                .await
                .is_err()
            {
                break;
            }
        }
    });
    tokio::spawn(async move {
        let mut from_rail = from_rail;
        let _ = tokio::io::copy(&mut from_rail, &mut to_proxy).await;
    });
    Upstream::over(tokio::io::split(client_end), CALL_TIMEOUT)
        .await
        .expect("the in-process rail initializes")
}

fn mandate(upstream: &Upstream, tools: &[rmcp::model::Tool]) -> Mandate {
    let pin = |name: &str| {
        let tool = tools
            .iter()
            .find(|t| t.name == name)
            .expect("the mock offers it");
        tool_sha256(tool).unwrap()
    };
    interlock_profile::razorpay::refund_desk(AGENT)
        .mandate_id("mnd_otel")
        .expires_at(4_000_000_000_000)
        .pinned(&upstream.server_id, &"0".repeat(64))
        .pin("fetch_payment", &pin("fetch_payment"))
        .pin("create_refund", &pin("create_refund"))
        .pin(
            "create_instant_settlement",
            &pin("create_instant_settlement"),
        )
        .build()
        .unwrap_or_else(|e| panic!("the test mandate: {e}"))
}

/// The proxy in process, traced into an in-memory exporter (or not traced at all).
async fn world(name: &str, tracing: Option<bool>) -> World {
    let dir = common::fresh_dir(&format!("otel-{name}"));
    let exporter = InMemorySpanExporter::default();
    let provider = telemetry::provider(exporter.clone());
    let spans = match tracing {
        Some(record_payloads) => Telemetry::on(&provider, record_payloads, Transport::Pipe),
        None => Telemetry::default(),
    };
    let seed = Seed::load(DEMO_SEED_NAME).expect("the demo seed");
    let upstream_frames = Frames::default();
    let upstream = rail(&seed, upstream_frames.clone())
        .await
        .with_telemetry(spans);
    let tools = upstream.tools().await.expect("the mock's tools");
    let mandate = mandate(&upstream, &tools);
    let upstream = Arc::new(upstream);
    let mut config = EngineConfig::new(format!("otel-{name}"));
    config.call_timeout_ms = CALL_TIMEOUT.as_millis() as u64;
    config.lease_ttl_ms = config.call_timeout_ms + interlock_engine::executor::LEASE_MARGIN_MS;
    let rail = McpRail {
        upstream: upstream.clone(),
        profile: interlock::cli::rail_profile(),
    };
    let ledger = Ledger::open(&dir.join("ledger.db")).expect("a fresh ledger");
    let engine = Engine::new(ledger, rail, Arc::new(SystemClock), mandate, config).unwrap();
    let server = ProxyServer(Arc::new(Proxy {
        engine: Arc::new(engine),
        upstream,
        agent_id: AgentId::parse(AGENT).unwrap(),
        approval_wait: None,
    }));
    let (agent_end, proxy_end) = tokio::io::duplex(PIPE_BYTES);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(tokio::io::split(proxy_end)).await {
            let _ = running.waiting().await;
        }
    });
    let agent = ().serve(tokio::io::split(agent_end)).await.expect("initialize");
    // The setup's own listing is not what the tests look at.
    provider.force_flush().unwrap();
    exporter.reset();
    upstream_frames.lock().unwrap().clear();
    World {
        agent,
        exporter,
        provider,
        upstream_frames,
    }
}

impl World {
    /// A `tools/call` carrying the agent's `traceparent` (sampled).
    async fn call(&self, tool: &str, args: Value) -> CallToolResult {
        self.call_flagged(tool, args, "01").await
    }

    /// A `tools/call` whose `traceparent` carries `flags`.
    async fn call_flagged(&self, tool: &str, args: Value, flags: &str) -> CallToolResult {
        let mut meta = RequestMetaObject::new();
        meta.set_traceparent(format!("00-{AGENT_TRACE}-{AGENT_SPAN}-{flags}"));
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.meta = Some(meta);
        if let Value::Object(args) = args {
            params = params.with_arguments(args);
        }
        self.agent.call_tool(params).await.expect("an answer")
    }

    fn spans(&self) -> Vec<SpanData> {
        self.provider.force_flush().unwrap();
        self.exporter.get_finished_spans().unwrap()
    }
}

fn attr<'a>(span: &'a SpanData, key: &str) -> Option<&'a OtelValue> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

fn text(span: &SpanData, key: &str) -> String {
    match attr(span, key) {
        Some(value) => value.as_str().into_owned(),
        None => panic!("span {:?} has no {key}: {:#?}", span.name, span.attributes),
    }
}

fn one<'a>(spans: &'a [SpanData], name: &str, kind: SpanKind) -> &'a SpanData {
    let found: Vec<_> = spans
        .iter()
        .filter(|s| s.name == name && s.span_kind == kind)
        .collect();
    assert_eq!(found.len(), 1, "one {kind:?} span {name:?} in {spans:#?}");
    found[0]
}

fn children<'a>(spans: &'a [SpanData], parent: &SpanData) -> Vec<&'a SpanData> {
    spans
        .iter()
        .filter(|s| s.parent_span_id == parent.span_context.span_id())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_is_one_trace_from_the_agent_through_the_proxy_to_the_rail() {
    let world = world("refund", Some(false)).await;
    let result = world
        .call(
            "create_refund",
            json!({"payment_id": "pay_1002", "amount": 1000}),
        )
        .await;
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let spans = world.spans();

    let server = one(&spans, "tools/call create_refund", SpanKind::Server);
    // The agent's trace, continued: same trace id, the agent's span as parent.
    assert_eq!(
        server.span_context.trace_id().to_string(),
        AGENT_TRACE,
        "the proxy's span joins the agent's trace"
    );
    assert_eq!(server.parent_span_id.to_string(), AGENT_SPAN);
    for (key, value) in [
        ("mcp.method.name", "tools/call"),
        ("gen_ai.tool.name", "create_refund"),
        ("gen_ai.operation.name", "execute_tool"),
        ("network.transport", "pipe"),
        ("interlock.verdict", "APPLIED"),
        ("interlock.state", "APPLIED"),
    ] {
        assert_eq!(text(server, key), value, "{key}");
    }
    assert!(!text(server, "jsonrpc.request.id").is_empty());
    assert!(!text(server, "mcp.protocol.version").is_empty());
    let sik = text(server, "interlock.sik");
    assert_eq!(sik.len(), 32, "a SIK: {sik}");
    assert!(text(server, "interlock.rail_entity_id").starts_with("rfnd_"));
    let Some(OtelValue::Array(Array::String(gates))) = attr(server, "interlock.gates") else {
        panic!("the gates as a string array: {:#?}", server.attributes);
    };
    assert!(
        gates.iter().any(|g| g.as_str().starts_with("G2 ALLOW")),
        "{gates:?}"
    );
    assert!(attr(server, "error.type").is_none());
    assert_eq!(server.status, Status::Unset);
    // Payloads were not asked for.
    assert!(attr(server, "gen_ai.tool.call.arguments").is_none());
    assert!(attr(server, "gen_ai.tool.call.result").is_none());

    // Every upstream request of this call is a CLIENT child of the proxy's span.
    let hops = children(&spans, server);
    assert!(
        hops.iter().all(|s| s.span_kind == SpanKind::Client),
        "{hops:#?}"
    );
    let purposes: Vec<String> = hops
        .iter()
        .map(|s| format!("{} {}", s.name, text(s, "interlock.upstream.purpose")))
        .collect();
    for expected in [
        "tools/list listing",
        "tools/call fetch_payment referent_read",
        "tools/call create_refund rail_call",
    ] {
        assert!(
            purposes.iter().any(|p| p == expected),
            "{expected}: {purposes:?}"
        );
    }
    let rail_call = one(&spans, "tools/call create_refund", SpanKind::Client);
    assert_eq!(text(rail_call, "interlock.sik"), sik);
    assert_eq!(text(rail_call, "mcp.method.name"), "tools/call");

    // The upstream received the rail call's span as its parent, in `_meta`.
    let frames = world.upstream_frames.lock().unwrap().clone();
    let sent = frames
        .iter()
        .find(|f| f["method"] == "tools/call" && f["params"]["name"] == "create_refund")
        .expect("the refund reached the rail");
    assert_eq!(
        sent["params"]["_meta"]["traceparent"],
        json!(format!(
            "00-{AGENT_TRACE}-{}-01",
            rail_call.span_context.span_id()
        )),
        "{sent}"
    );
    for frame in frames
        .iter()
        .filter(|f| f.get("method").is_some() && f.get("id").is_some())
    {
        let traceparent = frame["params"]["_meta"]["traceparent"].as_str();
        assert!(
            traceparent.is_some_and(|t| t.contains(AGENT_TRACE)),
            "every upstream request carries the trace: {frame}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_and_a_forwarded_read_say_what_they_were() {
    let world = world("refusal", Some(false)).await;
    let refused = world
        .call(
            "create_refund",
            json!({"payment_id": "pay_1002", "amount": 600_000}),
        )
        .await;
    assert_eq!(refused.is_error, Some(true));
    let read = world
        .call("fetch_payment", json!({"payment_id": "pay_1002"}))
        .await;
    assert_ne!(read.is_error, Some(true));
    let spans = world.spans();

    let server = one(&spans, "tools/call create_refund", SpanKind::Server);
    assert_eq!(text(server, "interlock.verdict"), "REFUSED");
    assert_eq!(text(server, "error.type"), "tool_error");
    let reason = text(server, "interlock.reason_code");
    assert!(matches!(server.status, Status::Error { ref description } if description == &reason));
    // Refused before the rail: no money call was made, so no span says one was.
    assert!(
        spans
            .iter()
            .all(|s| !(s.span_kind == SpanKind::Client && s.name == "tools/call create_refund")),
        "{spans:#?}"
    );

    let read = one(&spans, "tools/call fetch_payment", SpanKind::Server);
    assert_eq!(text(read, "interlock.verdict"), "FORWARDED");
    let forwarded: Vec<String> = children(&spans, read)
        .iter()
        .map(|s| format!("{} {}", s.name, text(s, "interlock.upstream.purpose")))
        .collect();
    assert!(
        forwarded.contains(&"tools/call fetch_payment forward".to_owned()),
        "{forwarded:?}"
    );

    // An agent's listing: a SERVER span with the upstream listing under it.
    world.agent.list_all_tools().await.unwrap();
    let spans = world.spans();
    let list = one(&spans, "tools/list", SpanKind::Server);
    assert_eq!(text(list, "mcp.method.name"), "tools/list");
    assert!(attr(list, "gen_ai.tool.name").is_none());
    let under: Vec<_> = children(&spans, list);
    assert_eq!(under.len(), 1, "{under:#?}");
    assert_eq!(text(under[0], "interlock.upstream.purpose"), "listing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_does_not_sample_cannot_hide_a_call() {
    let world = world("unsampled", Some(false)).await;
    world
        .call_flagged(
            "create_refund",
            json!({"payment_id": "pay_1002", "amount": 1000}),
            "00",
        )
        .await;
    let spans = world.spans();
    let server = one(&spans, "tools/call create_refund", SpanKind::Server);
    assert_eq!(server.span_context.trace_id().to_string(), AGENT_TRACE);
    one(&spans, "tools/call create_refund", SpanKind::Client);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_name_no_mandate_could_grant_is_not_a_span_name() {
    let world = world("badname", Some(false)).await;
    let name = "x".repeat(10_000);
    let refused = world.call(&name, json!({})).await;
    assert_eq!(refused.is_error, Some(true));
    let spans = world.spans();
    let server = one(&spans, "tools/call", SpanKind::Server);
    assert!(attr(server, "gen_ai.tool.name").is_none());
    assert_eq!(text(server, "interlock.verdict"), "REFUSED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payloads_are_recorded_only_when_asked_for() {
    let world = world("payloads", Some(true)).await;
    world
        .call(
            "create_refund",
            json!({"payment_id": "pay_1002", "amount": 1000}),
        )
        .await;
    let spans = world.spans();
    let server = one(&spans, "tools/call create_refund", SpanKind::Server);
    let arguments: Map<String, Value> =
        serde_json::from_str(&text(server, "gen_ai.tool.call.arguments")).unwrap();
    assert_eq!(arguments["payment_id"], "pay_1002");
    assert!(text(server, "gen_ai.tool.call.result").contains("rfnd_"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_exports_nothing_and_adds_no_meta() {
    let world = world("off", None).await;
    let result = world
        .call(
            "create_refund",
            json!({"payment_id": "pay_1002", "amount": 1000}),
        )
        .await;
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let frames = world.upstream_frames.lock().unwrap().clone();
    assert!(
        frames
            .iter()
            .any(|f| f["params"]["name"] == "create_refund"),
        "{frames:?}"
    );
    // rmcp's own `_meta` (a progress token) still goes; no trace context does.
    for frame in &frames {
        let meta = &frame["params"]["_meta"];
        for key in ["traceparent", "tracestate"] {
            assert!(meta.get(key).is_none(), "{frame}");
        }
    }
}

/// One HTTP request as a collector receives it: the request line, the headers, the body.
struct Posted {
    head: String,
    body: Vec<u8>,
}

/// Accepts one connection and reads one request from it, answering 200.
async fn receive_one(listener: &tokio::net::TcpListener) -> Posted {
    use tokio::io::AsyncReadExt;
    let (mut socket, _) = listener.accept().await.unwrap();
    let mut bytes = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = socket.read(&mut buf).await.unwrap();
        assert!(n > 0, "the exporter hung up mid-request");
        bytes.extend_from_slice(&buf[..n]);
        let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&bytes[..end]).to_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map(|v| v.trim().parse().unwrap())
            .expect("a content-length");
        if bytes.len() >= end + 4 + length {
            let body = bytes[end + 4..end + 4 + length].to_vec();
            socket
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                .await
                .unwrap();
            return Posted { head, body };
        }
    }
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_exports_its_spans_to_the_otlp_endpoint() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let scene = common::scene("otel-cli", &[]);
    let mut cmd = scene.command("none", &["--otlp-endpoint", &endpoint]);
    for name in [
        "OTEL_SDK_DISABLED",
        "OTEL_TRACES_EXPORTER",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        cmd.env_remove(name);
    }
    let proxy = common::connect(cmd).await;
    let result = proxy
        .client
        .call_tool(common::params(
            "create_refund",
            json!({"payment_id": "pay_1002", "amount": 1000}),
        ))
        .await
        .unwrap();
    assert_ne!(result.is_error, Some(true), "{result:?}");
    // The agent leaves; the proxy exits and sends what it has queued on the way out.
    proxy.client.cancel().await.unwrap();
    let mut bodies = Vec::new();
    while !bodies
        .iter()
        .any(|b: &Vec<u8>| contains(b, "tools/call create_refund"))
    {
        let posted = tokio::time::timeout(Duration::from_secs(30), receive_one(&listener))
            .await
            .expect("the proxy exports its spans when it stops");
        assert!(
            posted.head.starts_with("post /v1/traces "),
            "{}",
            posted.head
        );
        assert!(
            posted.head.contains("content-type: application/x-protobuf"),
            "{}",
            posted.head
        );
        bodies.push(posted.body);
    }
    let body = bodies.concat();
    for needle in [
        "tools/call create_refund",
        "tools/call fetch_payment",
        "tools/list",
        "interlock.verdict",
        "APPLIED",
        "interlock.upstream.purpose",
        "rail_call",
        "service.name",
    ] {
        assert!(contains(&body, needle), "the export carries {needle:?}");
    }
    // The resource's service.name value: a protobuf string of 9 bytes (tag 0x0a, length 9).
    assert!(
        contains(&body, "\u{a}\u{9}interlock"),
        "service.name = interlock"
    );
}

#[test]
fn a_collector_url_this_build_cannot_reach_is_refused_at_start() {
    let scene = common::scene("otel-https", &[]);
    let mut args = scene.serve_args(
        "none",
        &["--otlp-endpoint", "https://collector.example:4318"],
    );
    args.insert(0, "--profile".into());
    args.insert(1, "razorpay".into());
    let out = std::process::Command::new(common::BIN)
        .args(&args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--otlp-endpoint") && stderr.contains("https"),
        "{stderr}"
    );
}
