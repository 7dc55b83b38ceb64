//! The MCP server the agent talks to: lists only granted, pinned tools; forwards granted reads
//! after G6; sends money tools through the engine.

use std::sync::Arc;
use std::time::Instant;

use interlock_engine::gates::{self, GateResult, LiveTool};
use interlock_engine::{Answer, Engine, IntentKey, Outcome};
use interlock_machine::State;
use interlock_spec::ids::{AgentId, ToolName};
use interlock_spec::mandate::Mandate;
use interlock_spec::reason::ReasonCode;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::{Peer, RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler};
use serde_json::{Value, json};

use crate::approval;
use crate::telemetry::{self, Purpose};
use crate::upstream::{Carriage, McpRail, Upstream, carriage, unguarded_message};
use opentelemetry::context::FutureExt;

/// What the proxy serves with.
pub struct Proxy {
    /// The engine (synchronous; run on blocking threads).
    pub engine: Arc<Engine<McpRail>>,
    /// The upstream.
    pub upstream: Arc<Upstream>,
    /// The agent this proxy speaks for (from configuration).
    pub agent_id: AgentId,
    /// How long to wait for a human's answer when a held call can be put to the user through
    /// the client (MCP elicitation); `None`: never ask, held calls answer as held.
    pub approval_wait: Option<std::time::Duration>,
}

impl Proxy {
    /// The upstream's rail profile (the engine's rail holds it).
    pub fn profile(&self) -> &interlock_profile::Profile {
        &self.engine.rail().profile
    }
}

/// The handler (cheap to clone).
#[derive(Clone)]
pub struct ProxyServer(pub Arc<Proxy>);

/// The `interlock` block for an engine answer.
pub fn interlock_block(answer: &Answer) -> Value {
    let mut block = json!({
        "outcome": answer.outcome,
        "reason_code": answer.reason_code,
        "message": answer.message,
        "sik": answer.sik,
        "gates": answer.gates.iter().map(gate_json).collect::<Vec<_>>(),
    });
    if let Some(id) = &answer.rail_entity_id {
        block["rail_entity_id"] = json!(id);
    }
    if answer.idempotent_replay {
        block["idempotent_replay"] = json!(true);
    }
    block
}

fn gate_json(g: &GateResult) -> Value {
    json!({"gate": g.gate, "verdict": g.verdict, "reason_code": g.reason_code})
}

/// A refusal decided by the proxy itself (before the engine): `isError`, the message first.
fn refusal(reason_code: ReasonCode, message: String, gates: Vec<Value>) -> CallToolResult {
    let mut result = CallToolResult::error(vec![ContentBlock::text(message.clone())]);
    result.structured_content = Some(json!({"interlock": {
        "outcome": "REFUSED",
        "reason_code": reason_code,
        "message": message,
        "sik": null,
        "gates": gates,
    }}));
    result
}

/// The upstream is down, or a read through it failed: a retryable error; no money moved.
fn unavailable(e: &crate::upstream::CallError) -> CallToolResult {
    let message = format!("{e}; no money moved, retry this call as is");
    let mut result = CallToolResult::error(vec![ContentBlock::text(message.clone())]);
    result.structured_content = Some(json!({"interlock": {
        "outcome": "UNAVAILABLE",
        "reason_code": ReasonCode::UpstreamUnavailable,
        "message": message,
        "sik": null,
        "gates": [],
        "retryable": true,
    }}));
    result
}

fn gate_refusal(g: &GateResult) -> CallToolResult {
    refusal(g.reason_code, g.message.clone(), vec![gate_json(g)])
}

fn answer_result(answer: &Answer) -> CallToolResult {
    let block = json!({"interlock": interlock_block(answer)});
    let mut result = if answer.outcome == Outcome::Applied {
        CallToolResult::success(applied_text(answer))
    } else {
        CallToolResult::error(vec![ContentBlock::text(answer.message.clone())])
    };
    result.structured_content = Some(block);
    result
}

/// The text of an APPLIED answer, in the words an agent acts on. A call this proposal made and
/// the rail answered reads exactly as the rail's answer (what a direct call returns). A replay
/// leads with Interlock's sentence (the entity, the amount, and that nothing was sent again),
/// then the rail's answer to the call that applied it, when one was received; an intent settled
/// by the reconciler or an operator has no such answer, and never shows the error of the
/// attempt that left it ambiguous.
fn applied_text(answer: &Answer) -> Vec<ContentBlock> {
    match (&answer.rail_response, answer.idempotent_replay) {
        (Some(response), false) => vec![ContentBlock::text(response.clone())],
        (Some(response), true) => vec![
            ContentBlock::text(answer.message.clone()),
            ContentBlock::text(response.clone()),
        ],
        (None, _) => vec![ContentBlock::text(answer.message.clone())],
    }
}

impl Proxy {
    /// G1 before anything is read or forwarded: the engine's own gate, over what every call
    /// has. (The merchant is the mandate's by construction: the proxy takes it from there,
    /// never from the arguments.)
    fn scope(&self, tool: &ToolName) -> Option<GateResult> {
        let mandate: &Mandate = self.engine.mandate();
        let now = interlock_spec_now();
        let g1 = gates::scope::check_call(mandate, &mandate.merchant_id, &self.agent_id, tool, now);
        (g1.verdict != interlock_machine::Verdict::Allow).then_some(g1)
    }

    async fn call(
        &self,
        request: CallToolRequestParams,
        client: Option<Peer<RoleServer>>,
    ) -> Result<CallToolResult, McpError> {
        let name = request.name.to_string();
        let Ok(tool) = ToolName::parse(&name) else {
            let mandate = self.engine.mandate();
            return Ok(refusal(
                ReasonCode::ToolNotGranted,
                format!(
                    "mandate {} does not grant {name:?}; it grants {}",
                    mandate.mandate_id,
                    granted(mandate).join(", ")
                ),
                Vec::new(),
            ));
        };
        if let Some(refused) = self.scope(&tool) {
            return Ok(gate_refusal(&refused));
        }
        // G6 against the live definition, fetched for this call: a pin checked only at listing
        // is a bypass.
        let tools = match self.upstream.tools().await {
            Ok(tools) => tools,
            // Nothing is sent anywhere: the agent may retry as is.
            Err(e) => return Ok(unavailable(&e)),
        };
        let live = self.upstream.live_tool(&tools, &name);
        let definition = tools.iter().find(|t| t.name == name);
        let kind = match carriage(self.profile(), &name, definition) {
            Carriage::Money(kind) => kind,
            other => return Ok(self.forward(&tool, live, other, request.arguments).await),
        };
        let args = request
            .arguments
            .map(Value::Object)
            .unwrap_or_else(|| json!({}));
        let mandate = self.engine.mandate();
        let money = self
            .profile()
            .money_tool(tool.as_str())
            .expect("carriage found this money tool in the profile");
        debug_assert_eq!(money.kind, kind);
        let parsed = self.profile().parse(
            money,
            self.agent_id.clone(),
            mandate.merchant_id.clone(),
            &args,
        );
        let proposed = match parsed {
            Ok(proposed) => proposed,
            Err(e) => {
                return Ok(refusal(
                    ReasonCode::ArgumentsInvalid,
                    format!("refused before any check: {e}; nothing was sent to the rail"),
                    Vec::new(),
                ));
            }
        };
        let answer = match self.engine.propose_async(&proposed, live.as_ref()).await {
            Ok(answer) => answer,
            Err(e) => return engine_failure(&e),
        };
        let answer = match (self.approval_wait, client) {
            (Some(wait), Some(client))
                if approval::is_held(&answer) && approval::can_ask(&client) =>
            {
                self.ask_the_human(&client, answer, wait).await?
            }
            _ => answer,
        };
        telemetry::record_answer(&answer);
        Ok(answer_result(&answer))
    }

    /// A call that moves no money: G6 against the live definition, then the upstream's answer,
    /// forwarded, with any `interlock` block of the upstream's own renamed (only Interlock
    /// speaks as Interlock: a forged `APPLIED` would reach the agent, the log and the trace).
    async fn forward(
        &self,
        tool: &ToolName,
        live: Option<LiveTool>,
        carriage: Carriage,
        arguments: Option<serde_json::Map<String, Value>>,
    ) -> CallToolResult {
        let g6 = gates::provenance::check(self.engine.mandate(), tool, live.as_ref());
        if g6.verdict != interlock_machine::Verdict::Allow {
            return gate_refusal(&g6);
        }
        if carriage == Carriage::Unguarded {
            return refusal(
                ReasonCode::ToolNotReadOnly,
                format!(
                    "{}; nothing was sent",
                    unguarded_message(self.profile(), tool.as_str())
                ),
                vec![gate_json(&g6)],
            );
        }
        match self
            .upstream
            .call(tool.as_str(), arguments, Purpose::Forward)
            .await
        {
            Ok(mut result) => {
                disown_interlock_block(&mut result);
                result
            }
            Err(e) => unavailable(&e),
        }
    }

    /// Puts a held call to the user through the client and acts on the answer: approve is
    /// `interlock approve`, decline is `interlock reject`, anything else leaves it held and
    /// the agent gets the held answer.
    async fn ask_the_human(
        &self,
        client: &Peer<RoleServer>,
        held_answer: Answer,
        wait: std::time::Duration,
    ) -> Result<Answer, McpError> {
        let Some(held) = self.held(&held_answer).await? else {
            return Ok(held_answer);
        };
        let decision = approval::ask(client, &held, &self.agent_id, wait).await;
        tracing::info!(sik = %held.key.sik, ?decision, "the human's answer through the client");
        // Recorded as given in the client, under the identity the proxy serves.
        let by = format!("{} via the MCP client", self.agent_id);
        match decision {
            approval::Decision::Approve { note } => {
                // The approval is for what the form showed: the same intent, still held, with
                // the same amount under the same mandate (the engine checks the mandate again).
                if !self.still_as_shown(&held).await? {
                    return self.current_answer(&held.key, held_answer).await;
                }
                let tools = match self.upstream.tools().await {
                    Ok(tools) => tools,
                    Err(e) => {
                        tracing::warn!(sik = %held.key.sik, "approved, but the upstream cannot be listed: {e}; it stays held");
                        return Ok(held_answer);
                    }
                };
                let live = self.upstream.live_tool(&tools, &held.tool);
                let why = format!("approved in the MCP client (elicitation). {note}");
                match self
                    .engine
                    .approve_async(&held.key, &by, why.trim(), live.as_ref())
                    .await
                {
                    Ok(answer) => Ok(answer),
                    // Another approval or a rejection got there first (a second form for the
                    // same intent, the CLI): the intent's answer as it stands.
                    // The ledger's disk failed: still held (an I/O fault also stops the
                    // process for recovery).
                    Err(e) if e.disk_fault().is_some() => {
                        let _ = engine_failure(&e);
                        tracing::warn!(sik = %held.key.sik, "approved in the client, but the ledger failed: {e}");
                        Ok(held_answer)
                    }
                    Err(e) => {
                        tracing::warn!(sik = %held.key.sik, "approved in the client, but not released: {e}");
                        self.current_answer(&held.key, held_answer).await
                    }
                }
            }
            approval::Decision::Decline { note } => {
                let engine = self.engine.clone();
                let key = held.key.clone();
                let why = format!("declined in the MCP client (elicitation). {note}");
                let rejected =
                    tokio::task::spawn_blocking(move || engine.reject(&key, &by, why.trim()))
                        .await
                        .map_err(|e| {
                            McpError::internal_error(format!("the reject task failed: {e}"), None)
                        })?;
                if let Err(e) = rejected {
                    if e.disk_fault().is_some() {
                        // Stops the process for recovery on an I/O fault; the agent hears it
                        // is still held.
                        let _ = engine_failure(&e);
                    }
                    tracing::warn!(sik = %held.key.sik, "declined, but not rejected: {e}");
                }
                self.current_answer(&held.key, held_answer).await
            }
            approval::Decision::NoAnswer(why) => {
                tracing::info!(sik = %held.key.sik, "still held: {why}");
                Ok(held_answer)
            }
        }
    }

    /// What the form shows, read from the held intent in the ledger.
    async fn held(&self, answer: &Answer) -> Result<Option<approval::Held>, McpError> {
        let Some(sik) = answer.sik.clone() else {
            return Ok(None);
        };
        let key = IntentKey {
            merchant_id: self.engine.mandate().merchant_id.clone(),
            sik,
        };
        let Some(view) = self.read_intent(&key).await? else {
            return Ok(None);
        };
        if view.core.state != State::Held {
            return Ok(None);
        }
        let mandate = self.engine.mandate();
        Ok(Some(approval::Held {
            tool: view.call.tool.to_string(),
            amount_minor: view.call.amount.get(),
            currency: view.call.currency,
            subject: view.call.subject_id.clone(),
            payee: view.call.payee.clone(),
            reason: view.reason.clone(),
            mandate_id: mandate.mandate_id.to_string(),
            mandate_hash: view.mandate_hash.clone(),
            key,
        }))
    }

    async fn still_as_shown(&self, held: &approval::Held) -> Result<bool, McpError> {
        Ok(self.read_intent(&held.key).await?.is_some_and(|view| {
            view.core.state == State::Held
                && view.call.amount.get() == held.amount_minor
                && view.call.currency == held.currency
                && view.mandate_hash == held.mandate_hash
        }))
    }

    /// The intent's answer as it stands now (after a decline, `PREVIOUSLY_BLOCKED`).
    async fn current_answer(&self, key: &IntentKey, fallback: Answer) -> Result<Answer, McpError> {
        Ok(match self.read_intent(key).await? {
            Some(view) => interlock_engine::answer::of_intent(
                &view,
                interlock_engine::answer::Said::Replay,
                Vec::new(),
            ),
            None => fallback,
        })
    }

    async fn read_intent(
        &self,
        key: &IntentKey,
    ) -> Result<Option<interlock_engine::IntentView>, McpError> {
        let engine = self.engine.clone();
        let key = key.clone();
        tokio::task::spawn_blocking(move || engine.ledger().read_intent(&key))
            .await
            .map_err(|e| McpError::internal_error(format!("the ledger task failed: {e}"), None))?
            .map_err(|e| McpError::internal_error(format!("cannot read the intent: {e}"), None))
    }
}

fn undecided(e: impl std::fmt::Display) -> McpError {
    McpError::internal_error(format!("Interlock could not decide this call: {e}"), None)
}

/// The engine's error as the agent's answer: a disk fault under the ledger is a retryable
/// `LEDGER_UNAVAILABLE` (and, for an I/O fault, the process stops for recovery); anything
/// else stays a JSON-RPC error.
fn engine_failure(e: &interlock_engine::EngineError) -> Result<CallToolResult, McpError> {
    use interlock_engine::ledger::DiskFault;
    let what = match e.disk_fault() {
        None => return Err(undecided(e)),
        Some(DiskFault::Full) => "the ledger's disk is full",
        Some(DiskFault::Io) => {
            crate::serve::stop_for_recovery(&e.to_string());
            "the ledger's disk failed a write; Interlock takes no more calls in this process and restarts into recovery (it exits with status 75 for its supervisor or client to start it again)"
        }
    };
    let message = format!(
        "{what} ({e}). Nothing is sent to the rail without a durable record, and a call that was already on its way is reconciled; retry this call as is: it is sent at most once"
    );
    let mut result = CallToolResult::error(vec![ContentBlock::text(message.clone())]);
    result.structured_content = Some(json!({"interlock": {
        "outcome": "UNAVAILABLE",
        "reason_code": ReasonCode::LedgerUnavailable,
        "message": message,
        "sik": null,
        "gates": [],
        "retryable": true,
    }}));
    Ok(result)
}

/// What a `tools/call` answer says was decided, read from its `interlock` block: the log line
/// and the request's span say the same thing because they read it here. A granted read
/// forwarded unchanged carries no block: its verdict is `FORWARDED` (and the upstream's own
/// `isError` is noted as `UPSTREAM_ERROR`).
pub struct Decision {
    /// `APPLIED`, `REFUSED`, …, or `FORWARDED`.
    pub verdict: String,
    /// The reason code.
    pub reason: Option<String>,
    /// The intent's SIK, once there is one.
    pub sik: Option<String>,
    /// The rail's entity, when applied.
    pub entity: Option<String>,
    /// The sentence.
    pub message: Option<String>,
    /// Each gate that ran, as `G2 ALLOW REFUND_WITHIN_CAPTURED`.
    pub gates: Vec<String>,
}

impl Decision {
    /// The decision `result` carries.
    pub fn of(result: &CallToolResult) -> Decision {
        let block = result
            .structured_content
            .as_ref()
            .and_then(|content| content.get("interlock"));
        let text = |key: &str| {
            block
                .and_then(|b| b.get(key))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let gates = block
            .and_then(|b| b.get("gates"))
            .and_then(Value::as_array)
            .map(|gates| {
                gates
                    .iter()
                    .map(|g| {
                        let part = |key| g.get(key).and_then(Value::as_str).unwrap_or("-");
                        format!(
                            "{} {} {}",
                            part("gate"),
                            part("verdict"),
                            part("reason_code")
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let (verdict, reason) = match block {
            Some(_) => (
                text("outcome").unwrap_or_else(|| "-".to_owned()),
                text("reason_code"),
            ),
            None if result.is_error == Some(true) => {
                ("FORWARDED".to_owned(), Some("UPSTREAM_ERROR".to_owned()))
            }
            None => ("FORWARDED".to_owned(), None),
        };
        Decision {
            verdict,
            reason,
            sik: text("sik"),
            entity: text("rail_entity_id"),
            message: text("message"),
            gates,
        }
    }
}

/// The key an upstream's own `interlock` block is moved to in a forwarded result.
pub const UPSTREAM_INTERLOCK_KEY: &str = "upstream_interlock";

/// Moves an upstream's `structuredContent.interlock` to [`UPSTREAM_INTERLOCK_KEY`]: kept for
/// the agent to read, never read as Interlock's decision.
fn disown_interlock_block(result: &mut CallToolResult) {
    if let Some(Value::Object(content)) = result.structured_content.as_mut()
        && let Some(block) = content.remove("interlock")
    {
        tracing::warn!(
            "the upstream's answer carried an `interlock` block of its own; passed on as `{UPSTREAM_INTERLOCK_KEY}`"
        );
        content.insert(UPSTREAM_INTERLOCK_KEY.to_owned(), block);
    }
}

/// The one log line of a `tools/call` decision (stderr, target `interlock::server`): SIK, tool,
/// verdict, reason code, latency and the sentence.
fn log_decision(
    tool: &str,
    result: &Result<CallToolResult, McpError>,
    elapsed: std::time::Duration,
) {
    let latency_ms = format!("{:.2}", elapsed.as_secs_f64() * 1e3);
    let result = match result {
        Ok(result) => result,
        Err(e) => {
            tracing::error!(
                sik = "-",
                tool = %tool,
                verdict = "ERROR",
                reason = "-",
                latency_ms = %latency_ms,
                why = %e.message,
                "decision"
            );
            return;
        }
    };
    let decision = Decision::of(result);
    let dash = |value: &Option<String>| value.clone().unwrap_or_else(|| "-".to_owned());
    tracing::info!(
        sik = %dash(&decision.sik),
        tool = %tool,
        verdict = %decision.verdict,
        reason = %dash(&decision.reason),
        latency_ms = %latency_ms,
        why = %dash(&decision.message),
        "decision"
    );
}

/// What the agent is shown of a tool: only what its pin covers (name, description, input schema,
/// annotations). A title, an output schema, icons or `_meta` could change under the pin
/// unnoticed, and a title reaches the model as surely as a description does.
fn pinned_part(tool: &rmcp::model::Tool) -> rmcp::model::Tool {
    let mut shown = tool.clone();
    shown.title = None;
    shown.output_schema = None;
    shown.icons = None;
    shown.meta = None;
    shown
}

fn granted(mandate: &Mandate) -> Vec<&str> {
    mandate.scope.grants.keys().map(|t| t.as_str()).collect()
}

fn interlock_spec_now() -> u64 {
    use interlock_engine::Clock;
    interlock_engine::SystemClock.now_ms()
}

/// What Interlock says of itself at `initialize`, on stdio and on HTTP alike.
pub fn server_config() -> ServerConfig {
    ServerConfig::new(
        ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .build(),
    )
    .with_server_info(Implementation::new("interlock", env!("CARGO_PKG_VERSION")))
    .with_instructions(
        "Interlock guards money-moving tools: refusals are tool results with isError and a reason.",
    )
}

impl ProxyServer {
    /// The granted tools whose live definitions match their pins, as the agent is shown them.
    async fn listed(&self) -> Result<ListToolsResult, McpError> {
        let proxy = &self.0;
        let tools = proxy.upstream.tools().await.map_err(|e| {
            McpError::internal_error(format!("cannot list the upstream's tools: {e}"), None)
        })?;
        let mandate = proxy.engine.mandate();
        let mut listed = Vec::new();
        for tool in &tools {
            let Ok(name) = ToolName::parse(&tool.name) else {
                continue;
            };
            if mandate.grant(&name).is_none() {
                continue;
            }
            let live = proxy.upstream.live_tool(&tools, &tool.name);
            let g6 = gates::provenance::check(mandate, &name, live.as_ref());
            if g6.verdict != interlock_machine::Verdict::Allow {
                tracing::warn!(tool = %name, reason = ?g6.reason_code, "not listed: {}", g6.message);
            } else if carriage(self.0.profile(), &tool.name, Some(tool)) == Carriage::Unguarded {
                tracing::warn!(tool = %name, reason = ?ReasonCode::ToolNotReadOnly, "not listed: {}", unguarded_message(self.0.profile(), &tool.name));
            } else {
                listed.push(pinned_part(tool));
            }
        }
        Ok(ListToolsResult::with_all_items(listed))
    }
}

impl ServerHandler for ProxyServer {
    fn get_info(&self) -> ServerConfig {
        server_config()
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let telemetry = self.0.upstream.telemetry();
        let span = telemetry.server_span(request_of("tools/list", None, &context, None));
        let listed = self.listed().with_context(span.clone()).await;
        telemetry.end_server_span(&span, listed.as_ref().map(|_| None));
        listed
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let proxy = self.0.clone();
        let started = Instant::now();
        let tool = request.name.to_string();
        let telemetry = proxy.upstream.telemetry().clone();
        // A name no mandate could grant is the agent's free text: not a span name.
        let named = ToolName::parse(&tool).is_ok().then_some(tool.as_str());
        let span = telemetry.server_span(request_of(
            "tools/call",
            named,
            &context,
            request.arguments.as_ref(),
        ));
        let client = context.peer.clone();
        // Worked to its end, and logged, in its own task even if the agent goes away mid-call.
        let result = tokio::spawn(async move {
            let result = proxy
                .call(request, Some(client))
                .with_context(span.clone())
                .await;
            log_decision(&tool, &result, started.elapsed());
            telemetry.end_server_span(&span, result.as_ref().map(Some));
            result
        })
        .await
        .map_err(|e| McpError::internal_error(format!("the call task failed: {e}"), None))??;
        Ok(result.into())
    }
}

/// What a request's SERVER span is told of it: its id, `_meta`, the negotiated protocol and,
/// on streamable HTTP, its session.
fn request_of<'a>(
    method: &'a str,
    tool: Option<&'a str>,
    context: &'a RequestContext<RoleServer>,
    arguments: Option<&'a serde_json::Map<String, Value>>,
) -> telemetry::Request<'a> {
    let session_id = context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.headers.get("mcp-session-id"))
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    telemetry::Request {
        method,
        tool,
        id: context.id.to_string(),
        meta: &context.meta,
        protocol_version: context
            .peer
            .peer_info()
            .map(|info| info.protocol_version.to_string()),
        session_id,
        arguments,
    }
}
