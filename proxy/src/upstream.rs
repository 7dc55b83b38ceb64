//! The upstream MCP server (the rail), started as a child process and spoken to with rmcp's
//! client; and [`McpRail`], the engine's [`Rail`] over it, which asks the rail profile
//! (`interlock-profile`) for every tool name, argument and answer shape.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use interlock_engine::gates::LiveTool;
use interlock_engine::rail::{CallBudget, ListPage, ListQuery, PageAt, RailError};

use crate::send_gate::{Gated, SIK_META_KEY, SendGate};
use interlock_engine::{Rail, RailCall, RailOutcome, Referent};
use interlock_profile::{Profile, Request};
use interlock_spec::action::{ActionKind, ProposedAction};
use rmcp::ClientHandler;
use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientRequest, ListToolsRequest,
    PaginatedRequestParams, RequestMetaObject, RequestParamsMeta, ServerResult, Tool,
};
use rmcp::service::{
    NotificationContext, Peer, PeerRequestOptions, RoleClient, RoleServer, RunningService,
};
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use serde_json::{Map, Value};

use crate::telemetry::{Purpose, Telemetry};

/// The kill point inside a money call (with the `failpoints` feature): the request is out, the
/// answer is not back. The engine's own points are `interlock_engine::KILL_POINTS`.
pub const MID_CALL_KILL_POINT: &str = "mid_call";

/// The shortest wait before restarting a dead upstream; doubled per failed start.
pub const RESTART_BACKOFF_MIN: Duration = Duration::from_millis(100);
/// The longest wait between restarts.
pub const RESTART_BACKOFF_MAX: Duration = Duration::from_secs(10);

type Client = RunningService<RoleClient, UpstreamHandler>;

/// The most agent sessions the upstream's `tools/list_changed` is passed on to at once: one on
/// stdio; on HTTP, every live session (`crate::http` bounds them per agent, this bounds them all).
pub const LIST_CHANGED_PEERS_MAX: usize = 4096;

/// The most `tools/list` pages read from the upstream for one listing; an upstream whose
/// cursor never ends is an error, not a loop.
pub const LIST_PAGES_MAX: usize = 64;
/// How long past a read's or a listing's deadline the backstop waits for rmcp's own timeout
/// (which cancels the request upstream) before dropping it.
const CANCEL_GRACE: Duration = Duration::from_millis(500);

/// The longest line read from the upstream: rmcp's own bound (16 MiB), which discards a longer
/// line as it reads it (never holding more), and the memory one upstream connection can make
/// Interlock hold for a frame. The request it answered gets no answer and ends at its deadline:
/// a read as unavailable, a money call as ambiguous, then reconciled.
pub const UPSTREAM_FRAME_BYTES_MAX: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;

use std::sync::atomic::Ordering::SeqCst;

/// The client side's handler: passes the upstream's `tools/list_changed` on to the agents. (G6
/// needs no cache to invalidate: every call and every listing reads the live definitions.)
#[derive(Clone, Default)]
pub struct UpstreamHandler {
    agents: Arc<std::sync::Mutex<Vec<Peer<RoleServer>>>>,
    /// Set while one task passes `list_changed` on: a flood of them from the upstream becomes
    /// one pass at a time, not one per notification per agent.
    forwarding: Arc<std::sync::atomic::AtomicBool>,
    /// Set by every `list_changed`, cleared by the pass that tells the agents: one that came
    /// during a pass gets a pass of its own after it, so no change goes untold.
    pending: Arc<std::sync::atomic::AtomicBool>,
}

/// The most passes one forwarding task makes back to back before it hands over (the next
/// notification starts another): a flood keeps one task busy, never an unbounded one.
const LIST_CHANGED_PASSES_MAX: usize = 64;
/// The pause after each pass, during which further notifications merge into the next one: a
/// flood from the upstream reaches each agent at most about ten times a second.
pub const LIST_CHANGED_PAUSE: Duration = Duration::from_millis(100);

impl UpstreamHandler {
    /// The agents' sessions still open (closed ones are dropped on the way).
    fn open_agents(&self) -> Vec<Peer<RoleServer>> {
        let mut agents = self.agents.lock().unwrap_or_else(|e| e.into_inner());
        agents.retain(|peer| !peer.is_transport_closed());
        agents.clone()
    }
}

impl UpstreamHandler {
    /// Passes the pending `list_changed` on, and any that arrive meanwhile, one pass at a time.
    /// SeqCst throughout: the hand-over (store `forwarding`, then load `pending`) against the
    /// notifier (store `pending`, then swap `forwarding`) is the store-buffer pattern, which
    /// weaker orderings allow both sides to miss.
    async fn forward_pending(&self) {
        for _ in 0..LIST_CHANGED_PASSES_MAX {
            // A pass already under way will see `pending` and make one more.
            if self.forwarding.swap(true, SeqCst) {
                return;
            }
            if self.pending.swap(false, SeqCst) {
                tracing::warn!("the upstream's tools changed; each call re-checks its pin");
                for agent in self.open_agents() {
                    // An agent that stops reading must not hold the others' notices.
                    let told =
                        tokio::time::timeout(LIST_CHANGED_PAUSE, agent.notify_tool_list_changed());
                    match told.await {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => tracing::warn!("cannot tell an agent the tools changed: {e}"),
                        Err(_) => {
                            tracing::warn!("an agent did not take the tools/list_changed in time")
                        }
                    }
                }
            }
            tokio::time::sleep(LIST_CHANGED_PAUSE).await;
            self.forwarding.store(false, SeqCst);
            // Checked after the hand-over, so a notification between the two is not lost.
            if !self.pending.load(SeqCst) {
                return;
            }
        }
        // The pass bound is spent and a change is still untold: a fresh task takes over rather
        // than leave it for a notification that may never come.
        tokio::spawn(self.clone().forward_pending_later());
    }

    /// [`UpstreamHandler::forward_pending`] as a boxed future, for the task that takes over.
    fn forward_pending_later(self) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(async move { self.forward_pending().await })
    }
}

impl ClientHandler for UpstreamHandler {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.pending.store(true, SeqCst);
        self.forward_pending().await;
    }
}

/// The upstream: a child process spoken to over MCP, restarted with bounded backoff if it dies.
pub struct Upstream {
    command: Vec<String>,
    /// `name@version` as the upstream reported itself at the first start: the `server_id` G6
    /// compares with the pin. A restarted upstream that reports another is not used.
    pub server_id: String,
    /// The bound on one call.
    pub timeout: Duration,
    session: tokio::sync::Mutex<Session>,
    handler: UpstreamHandler,
    telemetry: Telemetry,
    /// The write-time check of money calls (`send_gate`); shared by every session, so a
    /// restarted upstream's transport checks the same armed calls.
    gate: SendGate,
}

struct Session {
    client: Option<Arc<Client>>,
    failures: u32,
    next_try: tokio::time::Instant,
    last_error: String,
}

/// How an upstream call failed without a tool result.
#[derive(Debug)]
pub enum CallError {
    /// No answer within the bound.
    Timeout,
    /// The session failed (the upstream died, or answered with a protocol error).
    Service(String),
    /// The call's moment to leave had passed by the time the session was ours (the caller's
    /// [`interlock_engine::rail::CallBudget`]); nothing was sent.
    NotSent(String),
    /// The upstream is down and being restarted; nothing was sent.
    Restarting {
        /// Why the last start failed, or that it died.
        why: String,
        /// When the next start is tried.
        retry_in: Duration,
    },
}

impl CallError {
    /// The failure's `error.type` in a span.
    pub fn kind(&self) -> &'static str {
        match self {
            CallError::Timeout => "timeout",
            CallError::Service(_) => "service_error",
            CallError::Restarting { .. } => "upstream_restarting",
            CallError::NotSent(_) => "not_sent",
        }
    }
}

/// A call's `error.type`: the upstream's failure, or `tool_error` for an `isError` result.
fn error_type(called: &Result<CallToolResult, CallError>) -> Option<&'static str> {
    match called {
        Err(e) => Some(e.kind()),
        Ok(result) if result.is_error == Some(true) => Some("tool_error"),
        Ok(_) => None,
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Timeout => write!(f, "the upstream did not answer in time"),
            CallError::Service(why) => write!(f, "the upstream failed: {why}"),
            CallError::NotSent(why) => write!(f, "{why}"),
            CallError::Restarting { why, retry_in } => write!(
                f,
                "the upstream is down and being restarted ({why}); retry in {} ms",
                retry_in.as_millis().max(1)
            ),
        }
    }
}

async fn start(
    command: &[String],
    timeout: Duration,
    handler: UpstreamHandler,
    gate: SendGate,
) -> Result<(Client, String), String> {
    let (program, args) = command
        .split_first()
        .ok_or("no upstream command given (after --)")?;
    let cmd = tokio::process::Command::new(program).configure(|c| {
        c.args(args);
    });
    let (transport, _stderr) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot start the upstream {program:?}: {e}"))?;
    let client = tokio::time::timeout(
        timeout.max(Duration::from_secs(10)),
        handler.serve(Gated::new(transport, gate)),
    )
    .await
    .map_err(|_| format!("the upstream {program:?} did not complete initialize in time"))?
    .map_err(|e| format!("the upstream {program:?} failed to initialize: {e}"))?;
    let server_id = server_id_of(&client);
    Ok((client, server_id))
}

/// `name@version` as the upstream reported itself in `initialize`.
fn server_id_of(client: &Client) -> String {
    client
        .peer_info()
        .and_then(|info| info.server_info.clone())
        .map(|s| format!("{}@{}", s.name, s.version))
        .unwrap_or_else(|| "unknown@unknown".to_owned())
}

impl Upstream {
    /// Starts `command` (program and arguments) and completes the MCP handshake.
    pub async fn spawn(command: &[String], timeout: Duration) -> Result<Upstream, String> {
        let handler = UpstreamHandler::default();
        let gate = SendGate::default();
        let (client, server_id) = start(command, timeout, handler.clone(), gate.clone()).await?;
        Ok(Upstream {
            handler,
            gate,
            telemetry: Telemetry::default(),
            command: command.to_vec(),
            server_id,
            timeout,
            session: tokio::sync::Mutex::new(Session {
                client: Some(Arc::new(client)),
                failures: 0,
                next_try: tokio::time::Instant::now(),
                last_error: String::new(),
            }),
        })
    }

    /// An upstream already reachable over `transport` (in process: the `jsonrpc_frame` fuzz
    /// target runs the mock rail on a pipe). It has no command, so once it dies every call is
    /// answered as unavailable.
    pub async fn over<T, E, A>(transport: T, timeout: Duration) -> Result<Upstream, String>
    where
        T: rmcp::transport::IntoTransport<RoleClient, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let handler = UpstreamHandler::default();
        let client = tokio::time::timeout(timeout, handler.clone().serve(transport))
            .await
            .map_err(|_| "the upstream did not complete initialize in time".to_owned())?
            .map_err(|e| format!("the upstream failed to initialize: {e}"))?;
        Ok(Upstream {
            handler,
            // An in-process transport is not wrapped: its money calls are checked when the
            // session is taken, not again at the write.
            gate: SendGate::default(),
            telemetry: Telemetry::default(),
            command: Vec::new(),
            server_id: server_id_of(&client),
            timeout,
            session: tokio::sync::Mutex::new(Session {
                client: Some(Arc::new(client)),
                failures: 0,
                next_try: tokio::time::Instant::now(),
                last_error: String::new(),
            }),
        })
    }

    /// The live session, restarting a dead upstream when its backoff has passed.
    async fn client(&self) -> Result<Arc<Client>, CallError> {
        let mut session = self.session.lock().await;
        if let Some(client) = &session.client {
            if !client.peer().is_transport_closed() {
                return Ok(client.clone());
            }
            tracing::warn!("the upstream died; restarting it");
            session.client = None;
            session.last_error = "it exited".to_owned();
        }
        let now = tokio::time::Instant::now();
        if now < session.next_try {
            return Err(CallError::Restarting {
                why: session.last_error.clone(),
                retry_in: session.next_try - now,
            });
        }
        let started = match start(
            &self.command,
            self.timeout,
            self.handler.clone(),
            self.gate.clone(),
        )
        .await
        {
            Ok((client, id)) if id == self.server_id => Ok(client),
            Ok((client, id)) => {
                let _ = client.cancel().await;
                Err(format!(
                    "the restarted upstream reports {id:?}, not {:?}",
                    self.server_id
                ))
            }
            Err(e) => Err(e),
        };
        match started {
            Ok(client) => {
                tracing::info!(failures = session.failures, "upstream restarted");
                session.failures = 0;
                let client = Arc::new(client);
                session.client = Some(client.clone());
                Ok(client)
            }
            Err(why) => {
                session.failures = session.failures.saturating_add(1);
                let backoff = RESTART_BACKOFF_MIN
                    .saturating_mul(1 << session.failures.min(10))
                    .min(RESTART_BACKOFF_MAX);
                session.next_try = tokio::time::Instant::now() + backoff;
                session.last_error = why.clone();
                tracing::warn!(
                    failures = session.failures,
                    ?backoff,
                    "upstream restart failed: {why}"
                );
                Err(CallError::Restarting {
                    why,
                    retry_in: backoff,
                })
            }
        }
    }

    /// Adds an agent's session to those the upstream's `tools/list_changed` is passed on to.
    /// Past [`LIST_CHANGED_PEERS_MAX`] open sessions the new one is not added (and a warning
    /// says so): it still gets every call checked against the live definitions, only not the
    /// early notice.
    pub fn forward_list_changed_to(&self, agent: Peer<RoleServer>) {
        let mut agents = self
            .handler
            .agents
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        agents.retain(|peer| !peer.is_transport_closed());
        if agents.len() >= LIST_CHANGED_PEERS_MAX {
            tracing::warn!(
                sessions = agents.len(),
                "{LIST_CHANGED_PEERS_MAX} sessions already get tools/list_changed; this one will not"
            );
            return;
        }
        agents.push(agent);
    }

    /// Spans for this upstream's requests (and the agents' requests the proxy serves with it).
    pub fn with_telemetry(mut self, telemetry: Telemetry) -> Self {
        self.telemetry = telemetry;
        self
    }

    /// The proxy's tracer (off unless configured).
    pub fn telemetry(&self) -> &Telemetry {
        &self.telemetry
    }

    /// The upstream's tools, now: every page asked of the upstream itself. (rmcp's
    /// `list_all_tools` may answer from a cache the upstream's `ttlMs` controls, or with a stale
    /// list when the upstream fails; G6 judges the live definitions, so neither will do.)
    pub async fn tools(&self) -> Result<Vec<Tool>, CallError> {
        let span = self
            .telemetry
            .client_span("tools/list", None, Purpose::Listing);
        let listed = self.list_pages(span.meta()).await;
        span.end(listed.as_ref().err().map(CallError::kind));
        listed
    }

    async fn list_pages(&self, meta: Option<RequestMetaObject>) -> Result<Vec<Tool>, CallError> {
        let client = self.client().await?;
        let deadline = tokio::time::Instant::now() + self.timeout;
        let list = async {
            let mut tools = Vec::new();
            let mut cursor = None;
            for _ in 0..LIST_PAGES_MAX {
                let mut params = PaginatedRequestParams::default().with_cursor(cursor);
                *params.meta_mut() = meta.clone();
                let request = ClientRequest::ListToolsRequest(ListToolsRequest {
                    method: Default::default(),
                    params: Some(params),
                    extensions: Default::default(),
                });
                // rmcp's own deadline on each page: when it passes, rmcp tells the upstream
                // (`notifications/cancelled`) and forgets the request, where a dropped future
                // would leave it pending until the upstream answered.
                let mut options = PeerRequestOptions::no_options();
                options.timeout =
                    Some(deadline.saturating_duration_since(tokio::time::Instant::now()));
                let sent = client.send_cancellable_request(request, options).await;
                let answered = match sent {
                    Ok(handle) => handle.await_response().await,
                    Err(e) => Err(e),
                };
                let page = match answered {
                    Ok(ServerResult::ListToolsResult(page)) => page,
                    Err(rmcp::service::ServiceError::Timeout { .. }) => {
                        return Err(CallError::Timeout);
                    }
                    Ok(_) => {
                        return Err(CallError::Service(
                            "the upstream answered tools/list with something else".to_owned(),
                        ));
                    }
                    Err(e) => return Err(CallError::Service(e.to_string())),
                };
                tools.extend(page.tools);
                cursor = page.next_cursor;
                if cursor.is_none() {
                    return Ok(tools);
                }
            }
            Err(CallError::Service(format!(
                "the upstream's tools/list goes on past {LIST_PAGES_MAX} pages"
            )))
        };
        // A backstop a little past rmcp's deadline, should the send itself hang.
        match tokio::time::timeout_at(deadline + CANCEL_GRACE, list).await {
            Err(_) => Err(CallError::Timeout),
            Ok(listed) => listed,
        }
    }

    /// One tool call, bounded by the timeout; `purpose` names it in its span.
    pub async fn call(
        &self,
        tool: &str,
        args: Option<Map<String, Value>>,
        purpose: Purpose,
    ) -> Result<CallToolResult, CallError> {
        let span = self
            .telemetry
            .client_span("tools/call", Some(tool), purpose);
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.meta = span.meta();
        if let Some(args) = args {
            params = params.with_arguments(args);
        }
        let called = self.call_once(params).await;
        span.end(error_type(&called));
        called
    }

    async fn call_once(&self, params: CallToolRequestParams) -> Result<CallToolResult, CallError> {
        let client = self.client().await?;
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        // rmcp's own deadline, as for a listing: past it the upstream is told
        // (`notifications/cancelled`) and the request forgotten, not left pending until a hung
        // upstream answers. A read can be cancelled; a money call (below) is not.
        let mut options = PeerRequestOptions::no_options();
        options.timeout = Some(self.timeout);
        let exchange = async {
            let handle = client.send_cancellable_request(request, options).await?;
            handle.await_response().await
        };
        let answered = tokio::time::timeout(self.timeout + CANCEL_GRACE, exchange).await;
        match answered {
            Err(_) | Ok(Err(rmcp::service::ServiceError::Timeout { .. })) => {
                Err(CallError::Timeout)
            }
            Ok(Err(e)) => Err(CallError::Service(e.to_string())),
            Ok(Ok(ServerResult::CallToolResult(result))) => Ok(result),
            Ok(Ok(_)) => Err(CallError::Service(
                "the upstream answered a tool call with something else".to_owned(),
            )),
        }
    }

    /// A money call: like [`Upstream::call`], but the request is handed to the transport
    /// before the answer is awaited, so that the chaos kill point `mid_call` can fire with the
    /// request out and its answer not back (the rail may or may not have it). The request is
    /// not cancelled when the deadline passes: a rail does not un-send a refund because its
    /// caller stopped waiting, and telling it to would only suggest otherwise.
    pub async fn call_money(
        &self,
        tool: &str,
        sik: &str,
        args: Map<String, Value>,
        budget: &CallBudget,
    ) -> Result<CallToolResult, CallError> {
        let span = self
            .telemetry
            .client_span("tools/call", Some(tool), Purpose::RailCall);
        span.set_sik(sik);
        let mut params = CallToolRequestParams::new(tool.to_owned()).with_arguments(args);
        let called = match self.gate.arm(sik, budget.clone()) {
            Ok(armed) => {
                // The call's own key, by which the transport finds its budget.
                let mut meta = span.meta().unwrap_or_default();
                meta.0.insert(
                    SIK_META_KEY.to_owned(),
                    Value::String(armed.key().to_owned()),
                );
                params.meta = Some(meta);
                let called = self.send_money(params, budget).await;
                match (armed.refusal(), called) {
                    // The transport refused to write it: nothing left.
                    (Some(why), Err(CallError::Service(_))) => Err(CallError::NotSent(why)),
                    (_, called) => called,
                }
            }
            Err(why) => Err(CallError::NotSent(why)),
        };
        span.end(error_type(&called));
        called
    }

    async fn send_money(
        &self,
        params: CallToolRequestParams,
        budget: &CallBudget,
    ) -> Result<CallToolResult, CallError> {
        let client = self.client().await?;
        // The last check before the request is handed to the transport: whatever this call
        // waited on since the driver re-read its lease (the session lock, a restart, a stopped
        // process) is behind us now. What is left unchecked is this clock read → the transport
        // task's write(2) (ADR 0003, A2).
        budget.may_send().map_err(CallError::NotSent)?;
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let exchange = async {
            let handle = client
                .send_cancellable_request(request, PeerRequestOptions::no_options())
                .await?;
            // `return(kill)` SIGKILLs the process here, `return(stop)` stalls it here; a plain
            // `return` loses the answer as a dying transport would.
            #[cfg(feature = "failpoints")]
            if let Some(Some(_)) = fail::eval(MID_CALL_KILL_POINT, |arg: Option<String>| {
                interlock_engine::executor::at_kill_point("mid_call", arg.as_deref())
            }) {
                return Err(rmcp::service::ServiceError::TransportClosed);
            }
            handle.await_response().await
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Err(_) => Err(CallError::Timeout),
            Ok(Err(e)) => Err(CallError::Service(e.to_string())),
            Ok(Ok(ServerResult::CallToolResult(result))) => Ok(result),
            Ok(Ok(_)) => Err(CallError::Service(
                "the upstream answered a tool call with something else".to_owned(),
            )),
        }
    }

    /// The live definition of `tool` as G6 sees it, or `None` if the upstream does not list it.
    pub fn live_tool(&self, tools: &[Tool], name: &str) -> Option<LiveTool> {
        tools.iter().find(|t| t.name == name).map(|t| LiveTool {
            server_id: self.server_id.clone(),
            sha256: tool_sha256(t),
        })
    }

    /// Closes the session; the child exits when its stdin closes.
    pub async fn close(self) {
        let client = self.session.into_inner().client;
        if let Some(client) = client.and_then(|c| Arc::try_unwrap(c).ok()) {
            let _ = client.cancel().await;
        }
    }
}

/// A tool definition's pin hash, as `interlock pin` and G6 compute it.
pub fn tool_sha256(tool: &Tool) -> Result<String, String> {
    let schema = Value::Object((*tool.input_schema).clone());
    let annotations = match &tool.annotations {
        Some(a) => Some(serde_json::to_value(a).map_err(|e| e.to_string())?),
        None => None,
    };
    interlock_spec::hash::tool_definition_sha256(
        &tool.name,
        tool.description.as_deref(),
        &schema,
        annotations.as_ref(),
    )
    .map_err(|e| e.to_string())
}

/// All text blocks of a result, joined.
pub fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// How the proxy may carry a granted tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carriage {
    /// A money tool of the profile: through the engine.
    Money(ActionKind),
    /// A read, or a write the profile says moves no money: forwarded as is after G6.
    Read,
    /// Neither: a write the profile does not know (`update_refund`, `capture_payment`, …).
    /// Forwarding it would move or rewrite money with no gate, so it is refused.
    Unguarded,
}

/// What a granted tool is, from the profile and the upstream's live definition. A tool outside
/// the profile is a read only if its definition says `readOnlyHint: true`; that annotation is
/// inside the pin's hash, so it cannot change under a pinned mandate without G6 refusing the
/// tool. Absent, or `false`, the MCP default holds: the tool may write.
pub fn carriage(profile: &Profile, name: &str, live: Option<&Tool>) -> Carriage {
    if let Some(kind) = profile.kind_of(name) {
        return Carriage::Money(kind);
    }
    // The profile says it moves no money: carried as a read is, G6 on every call.
    if profile.other_writes.iter().any(|t| t.as_str() == name) {
        return Carriage::Read;
    }
    let read_only = live
        .and_then(|t| t.annotations.as_ref())
        .and_then(|a| a.read_only_hint);
    if read_only == Some(true) {
        Carriage::Read
    } else {
        Carriage::Unguarded
    }
}

/// The refusal of an [`Carriage::Unguarded`] tool, a sentence with what to do.
pub fn unguarded_message(profile: &Profile, name: &str) -> String {
    format!(
        "{name} is granted, but Interlock guards only the money tools it knows ({}) and forwards only reads, and {name}'s definition does not declare readOnlyHint: true. Remove it from the mandate, or use it outside Interlock",
        profile.money_tool_names().join(", ")
    )
}

/// What the rail's answer to a stamped money call says happened, as the profile reads it.
pub fn outcome_of(profile: &Profile, call: &RailCall, result: &CallToolResult) -> RailOutcome {
    profile.outcome(call, result.is_error == Some(true), text_of(result))
}

/// The engine's [`Rail`] over the upstream, shaped by a rail profile. Async: the runner awaits
/// each read and call on the proxy's runtime, with no thread hop and no `block_on`.
#[derive(Clone)]
pub struct McpRail {
    /// The upstream.
    pub upstream: Arc<Upstream>,
    /// The upstream's rail profile.
    pub profile: Arc<Profile>,
}

impl McpRail {
    /// A read: the object, or why not.
    async fn read(&self, request: Request, purpose: Purpose) -> Result<Value, RailError> {
        let tool = request.tool;
        let result = self
            .upstream
            .call(&tool, Some(request.args), purpose)
            .await
            .map_err(|e| RailError::Unavailable(format!("{tool}: {e}")))?;
        let text = text_of(&result);
        if result.is_error == Some(true) {
            return Err(self.profile.read_error(text));
        }
        serde_json::from_str(&text)
            .map_err(|e| RailError::Unavailable(format!("{tool} answered non-JSON: {e}")))
    }

    async fn resolve_owned(&self, action: ProposedAction) -> Result<Referent, RailError> {
        let profile = &self.profile;
        let hint = action.subject_hint.unwrap_or_default();
        match action.kind {
            ActionKind::Refund => {
                let payment = self
                    .read(profile.payment_request(&hint)?, Purpose::ReferentRead)
                    .await?;
                let order = match profile.order_request(&payment) {
                    Some(request) => Some(self.read(request, Purpose::ReferentRead).await?),
                    None => None,
                };
                profile.payment_referent(&payment, order.as_ref())
            }
            ActionKind::Settlement | ActionKind::Transfer | ActionKind::ScheduledTransfer => {
                let balance = self
                    .read(profile.balance_request()?, Purpose::ReferentRead)
                    .await?;
                profile.balance_referent(&balance)
            }
            ActionKind::ScheduledUpdate => {
                let scheduled = self
                    .read(profile.scheduled_request(&hint)?, Purpose::ReferentRead)
                    .await?;
                profile.scheduled_referent(&scheduled, &hint)
            }
        }
    }

    async fn execute_owned(&self, call: RailCall, budget: CallBudget) -> RailOutcome {
        let args = match self.profile.outbound_args(&call) {
            Ok(args) => args,
            // Nothing was sent, so nothing can have moved.
            Err(detail) => {
                return RailOutcome::Rejected {
                    detail: format!(
                        "Interlock could not write the call, nothing was sent: {detail}"
                    ),
                };
            }
        };
        // The driver sized its lease on this call ending within `timeout_ms`: abandon it then,
        // whatever the upstream's own timeout says.
        let timeout_ms = budget.timeout_ms;
        let deadline = Duration::from_millis(timeout_ms);
        let call_once =
            self.upstream
                .call_money(call.tool.as_str(), call.sik.as_str(), args, &budget);
        let result = match tokio::time::timeout(deadline, call_once).await {
            Ok(Ok(result)) => result,
            // Held up past its moment: nothing left, so nothing moved.
            Ok(Err(CallError::NotSent(detail))) => {
                tracing::warn!(sik = %call.sik, "a money call held up past its moment: {detail}");
                return RailOutcome::Rejected { detail };
            }
            Ok(Err(e)) => {
                return RailOutcome::Ambiguous {
                    detail: e.to_string(),
                };
            }
            Err(_) => {
                return RailOutcome::Ambiguous {
                    detail: format!("no answer within {timeout_ms} ms"),
                };
            }
        };
        outcome_of(&self.profile, &call, &result)
    }

    async fn list_page_owned(&self, query: ListQuery, at: PageAt) -> Result<ListPage, RailError> {
        let collection = self
            .read(
                self.profile.list_request(&query, at)?,
                Purpose::ReconcilePage,
            )
            .await?;
        self.profile.list_page(query.kind, &collection)
    }
}

impl Rail for McpRail {
    fn resolve(
        &self,
        action: &ProposedAction,
    ) -> impl Future<Output = Result<Referent, RailError>> + Send {
        let rail = self.clone();
        let action = action.clone();
        async move { rail.resolve_owned(action).await }
    }

    fn execute(
        &self,
        call: &RailCall,
        budget: &CallBudget,
    ) -> impl Future<Output = RailOutcome> + Send {
        let rail = self.clone();
        let call = call.clone();
        let budget = budget.clone();
        async move { rail.execute_owned(call, budget).await }
    }

    fn list_page(
        &self,
        query: &ListQuery,
        at: PageAt,
    ) -> impl Future<Output = Result<ListPage, RailError>> + Send {
        let rail = self.clone();
        let query = query.clone();
        async move { rail.list_page_owned(query, at).await }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use interlock_spec::action::STAMP_NOTE_KEY;
    use interlock_spec::ids::{Sik, ToolName};
    use interlock_spec::money::{Currency, Minor};
    use serde_json::json;

    fn razorpay() -> Profile {
        interlock_profile::razorpay::profile()
    }
    use rmcp::model::{ContentBlock, ToolAnnotations};

    const SIK: &str = "WF6QNWANGI5M56CWTMOQCJYSXAYAPDCA";

    fn refund_call() -> RailCall {
        RailCall {
            tool: ToolName::parse("create_refund").unwrap(),
            kind: ActionKind::Refund,
            sik: Sik::parse(SIK).unwrap(),
            subject_id: "pay_1002".into(),
            amount: Minor::new(50_000).unwrap(),
            currency: Currency::parse("INR").unwrap(),
            payee: None,
            passthrough: Map::new(),
        }
    }

    fn answered(body: Value) -> CallToolResult {
        CallToolResult::success(vec![ContentBlock::text(body.to_string())])
    }

    fn fees(outcome: RailOutcome) -> (u64, u64) {
        match outcome {
            RailOutcome::Applied { fee, tax, .. } => (fee.get(), tax.get()),
            other => panic!("not applied: {other:?}"),
        }
    }

    /// An upstream whose tools/list says "cache this for an hour" and changes a description
    /// every time it is asked; or, `endless`, whose cursor never ends.
    struct Fickle {
        listed: std::sync::atomic::AtomicU32,
        endless: bool,
    }

    impl rmcp::ServerHandler for Fickle {
        fn get_info(&self) -> rmcp::model::ServerConfig {
            rmcp::model::ServerConfig::new(
                rmcp::model::ServerCapabilities::builder()
                    .enable_tools()
                    .build(),
            )
        }

        async fn list_tools(
            &self,
            _request: Option<rmcp::model::PaginatedRequestParams>,
            _context: rmcp::service::RequestContext<RoleServer>,
        ) -> Result<rmcp::model::ListToolsResult, rmcp::ErrorData> {
            let n = self
                .listed
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let tool = Tool::new(
                "fetch_payment",
                format!("version {n}"),
                Arc::new(Map::new()),
            );
            let mut result = rmcp::model::ListToolsResult::with_all_items(vec![tool]);
            result.ttl_ms = Some(3_600_000);
            if self.endless {
                result.next_cursor = Some(format!("page-{n}"));
            }
            Ok(result)
        }
    }

    async fn fickle(endless: bool) -> Upstream {
        let (client_end, server_end) = tokio::io::duplex(64 * 1024);
        let server = Fickle {
            listed: Default::default(),
            endless,
        };
        tokio::spawn(async move {
            if let Ok(running) = server.serve(tokio::io::split(server_end)).await {
                let _ = running.waiting().await;
            }
        });
        Upstream::over(tokio::io::split(client_end), Duration::from_secs(10))
            .await
            .unwrap()
    }

    /// An upstream whose tools/list never answers; it notes when the request is cancelled.
    struct Hung(Arc<tokio::sync::Notify>);

    impl rmcp::ServerHandler for Hung {
        fn get_info(&self) -> rmcp::model::ServerConfig {
            rmcp::model::ServerConfig::new(
                rmcp::model::ServerCapabilities::builder()
                    .enable_tools()
                    .build(),
            )
        }

        async fn list_tools(
            &self,
            _request: Option<rmcp::model::PaginatedRequestParams>,
            context: rmcp::service::RequestContext<RoleServer>,
        ) -> Result<rmcp::model::ListToolsResult, rmcp::ErrorData> {
            context.ct.cancelled().await;
            self.0.notify_one();
            Err(rmcp::ErrorData::internal_error("cancelled", None))
        }
    }

    #[tokio::test]
    async fn a_listing_past_its_deadline_is_cancelled_upstream() {
        let (client_end, server_end) = tokio::io::duplex(64 * 1024);
        let cancelled = Arc::new(tokio::sync::Notify::new());
        let server = Hung(cancelled.clone());
        tokio::spawn(async move {
            if let Ok(running) = server.serve(tokio::io::split(server_end)).await {
                let _ = running.waiting().await;
            }
        });
        let upstream = Upstream::over(tokio::io::split(client_end), Duration::from_millis(300))
            .await
            .unwrap();
        assert!(matches!(upstream.tools().await, Err(CallError::Timeout)));
        // The upstream was told: the request is not left pending on either side.
        tokio::time::timeout(Duration::from_secs(5), cancelled.notified())
            .await
            .expect("the upstream saw notifications/cancelled");
    }

    #[tokio::test]
    async fn every_listing_asks_the_upstream_whatever_its_ttl_says() {
        let upstream = fickle(false).await;
        let first = upstream.tools().await.unwrap();
        let second = upstream.tools().await.unwrap();
        // A cached listing would show G6 the definition of an hour ago.
        assert_eq!(first[0].description.as_deref(), Some("version 0"));
        assert_eq!(second[0].description.as_deref(), Some("version 1"));
    }

    #[tokio::test]
    async fn a_listing_that_never_ends_is_an_error_at_the_page_bound() {
        let upstream = fickle(true).await;
        let err = upstream.tools().await.unwrap_err().to_string();
        assert!(
            err.contains(&format!("past {LIST_PAGES_MAX} pages")),
            "{err}"
        );
    }

    #[test]
    fn fees_are_read_absent_as_zero_and_unreadable_as_the_whole_amount() {
        let call = refund_call();
        let stamped = |extra: Value| {
            let mut body = json!({"id": "rfnd_1", "notes": {STAMP_NOTE_KEY: SIK}});
            body.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            answered(body)
        };
        assert_eq!(
            fees(outcome_of(&razorpay(), &call, &stamped(json!({})))),
            (0, 0)
        );
        assert_eq!(
            fees(outcome_of(
                &razorpay(),
                &call,
                &stamped(json!({"fee": 150, "tax": 27}))
            )),
            (150, 27)
        );
        for unreadable in [json!(1.5), json!("150"), json!(-3)] {
            let outcome = outcome_of(
                &razorpay(),
                &call,
                &stamped(json!({"fee": unreadable, "tax": 0})),
            );
            assert_eq!(fees(outcome), (50_000, 0), "fee {unreadable}");
        }
    }

    #[test]
    fn only_a_bad_request_is_a_rejection() {
        let call = refund_call();
        let error = |text: &str| CallToolResult::error(vec![ContentBlock::text(text.to_owned())]);
        assert!(matches!(
            outcome_of(
                &razorpay(),
                &call,
                &error("BAD_REQUEST_ERROR: amount too large")
            ),
            RailOutcome::Rejected { .. }
        ));
        // Razorpay's own server words a refusal without the code: reconciled, never believed.
        for text in [
            "creating refund failed: Duplicate receipt found for this refund request.",
            "gateway timeout",
        ] {
            assert!(
                matches!(
                    outcome_of(&razorpay(), &call, &error(text)),
                    RailOutcome::Ambiguous { .. }
                ),
                "{text}"
            );
        }
        for body in ["not json", r#"{"entity": "refund"}"#] {
            let result = CallToolResult::success(vec![ContentBlock::text(body.to_owned())]);
            assert!(
                matches!(
                    outcome_of(&razorpay(), &call, &result),
                    RailOutcome::Ambiguous { .. }
                ),
                "{body}"
            );
        }
    }

    #[test]
    fn a_tool_outside_the_profile_is_a_read_only_if_it_says_so() {
        let tool = |annotations: Option<ToolAnnotations>| {
            let mut tool = Tool::new("update_refund", "d", Arc::new(Map::new()));
            tool.annotations = annotations;
            tool
        };
        assert_eq!(
            carriage(&razorpay(), "create_refund", None),
            Carriage::Money(ActionKind::Refund)
        );
        assert_eq!(
            carriage(
                &razorpay(),
                "update_refund",
                Some(&tool(Some(ToolAnnotations::new().read_only(true))))
            ),
            Carriage::Read
        );
        for annotations in [
            None,
            Some(ToolAnnotations::new()),
            Some(ToolAnnotations::new().read_only(false).destructive(false)),
        ] {
            assert_eq!(
                carriage(
                    &razorpay(),
                    "update_refund",
                    Some(&tool(annotations.clone()))
                ),
                Carriage::Unguarded,
                "{annotations:?}"
            );
        }
        assert_eq!(
            carriage(&razorpay(), "fetch_payment", None),
            Carriage::Unguarded
        );
    }
}
