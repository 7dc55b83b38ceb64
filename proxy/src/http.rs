//! `interlock serve --listen`: MCP over streamable HTTP, one process for many agents.
//!
//! Each agent has its own mandate and its own engine; they share the upstream and the ledger
//! file. Who is calling comes from the bearer token alone, never from the request body: the
//! layer in front of rmcp's HTTP service hashes the token, finds the agent in the agents file
//! and puts it on the request; the handler then serves that agent's [`ProxyServer`], exactly as
//! stdio serves its one. A session is bound to the agent that opened it: another agent's token
//! on it gets 404, as an unknown session does.
//!
//! The HTTP protocol itself (sessions, SSE, protocol versions, the body limit, the `Host`
//! check against DNS rebinding) is rmcp's streamable HTTP server.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use interlock_spec::hash::{is_sha256_hex, sha256, sha256_hex};
use interlock_spec::ids::AgentId;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ListToolsResult, PaginatedRequestParams, ServerConfig,
};
use rmcp::service::{NotificationContext, RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{
    SessionId, SessionManager, StreamableHttpServerConfig, StreamableHttpService,
};
use rmcp::{ErrorData as McpError, ServerHandler};
use serde::Deserialize;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::server::{ProxyServer, server_config};
use crate::upstream::Upstream;

/// The most agents one agents file may name.
pub const AGENTS_MAX: usize = 256;
/// The largest agents file read.
pub const AGENTS_FILE_BYTES_MAX: usize = 256 * 1024;
/// The largest request body accepted (413 past it). A `tools/call` is a few hundred bytes.
pub const HTTP_BODY_BYTES_MAX: usize = 256 * 1024;
/// The most `tools/call` and `tools/list` requests one agent may have in flight at once, over
/// all its sessions; one more is answered with an error at once and nothing is sent.
pub const CALLS_IN_FLIGHT_PER_AGENT_MAX: usize = 32;
/// The most open sessions per agent; one more `initialize` gets 429.
pub const SESSIONS_PER_AGENT_MAX: usize = 16;
/// A session with no request for this long is closed (the client re-initializes).
pub const SESSION_IDLE_MAX: Duration = Duration::from_secs(10 * 60);
/// The path the MCP endpoint is served on.
pub const MCP_PATH: &str = "/mcp";
/// The prefix of the tokens `interlock token` makes (so a leaked one is easy to recognise).
pub const TOKEN_PREFIX: &str = "ilk_";
/// Random bytes in a token.
const TOKEN_BYTES: usize = 32;

/// An agents file as written: each agent, its mandate and the SHA-256 of its bearer token.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentsFile {
    agents: Vec<AgentEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentEntry {
    id: String,
    mandate: String,
    token_sha256: String,
}

/// One agent the HTTP server serves.
#[derive(Debug, Clone)]
pub struct AgentSpec {
    /// Who the token speaks for.
    pub id: AgentId,
    /// Its mandate (relative paths are read from the agents file's directory).
    pub mandate: PathBuf,
    /// SHA-256 of its bearer token; the token itself is never stored.
    pub token_sha256: [u8; 32],
}

/// Reads and checks an agents file: at least one agent, at most [`AGENTS_MAX`], ids valid and
/// distinct, token hashes 64 lower-case hex digits and distinct. Errors name the entry.
pub fn read_agents(path: &Path) -> Result<Vec<AgentSpec>, String> {
    let what = format!("agents file {}", path.display());
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {what}: {e}"))?;
    if text.len() > AGENTS_FILE_BYTES_MAX {
        return Err(format!(
            "{what} is {} bytes; the most read is {AGENTS_FILE_BYTES_MAX}",
            text.len()
        ));
    }
    let file: AgentsFile =
        serde_saphyr::from_str_with_options(&text, interlock_spec::mandate::strict_yaml_options())
            .map_err(|e| format!("{what} is invalid: {e}"))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    parse_entries(file.agents, dir).map_err(|e| format!("{what}: {e}"))
}

fn parse_entries(entries: Vec<AgentEntry>, dir: &Path) -> Result<Vec<AgentSpec>, String> {
    if entries.is_empty() {
        return Err("agents: names no agent".to_owned());
    }
    if entries.len() > AGENTS_MAX {
        return Err(format!(
            "agents: names {} agents; the most is {AGENTS_MAX}",
            entries.len()
        ));
    }
    let mut specs: Vec<AgentSpec> = Vec::with_capacity(entries.len());
    for (i, entry) in entries.into_iter().enumerate() {
        let at = format!("agents[{i}]");
        let id = AgentId::parse(&entry.id).map_err(|e| format!("{at}.id: {e}"))?;
        if !is_sha256_hex(&entry.token_sha256) {
            return Err(format!(
                "{at}.token_sha256: must be 64 lower-case hex digits (`interlock token` prints one)"
            ));
        }
        let token_sha256 = hex32(&entry.token_sha256);
        if let Some(twin) = specs.iter().find(|s| s.id == id) {
            return Err(format!("{at}.id: agent {} is named twice", twin.id));
        }
        if specs.iter().any(|s| s.token_sha256 == token_sha256) {
            return Err(format!(
                "{at}.token_sha256: the same token is given to two agents"
            ));
        }
        specs.push(AgentSpec {
            id,
            mandate: dir.join(&entry.mandate),
            token_sha256,
        });
    }
    Ok(specs)
}

fn hex32(text: &str) -> [u8; 32] {
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).expect("checked as sha256 hex");
    }
    out
}

/// A new bearer token: [`TOKEN_PREFIX`] and 32 random bytes from the OS, in base32.
pub fn new_token() -> Result<String, String> {
    use std::io::Read;
    let mut bytes = [0u8; TOKEN_BYTES];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| format!("cannot read /dev/urandom for a token: {e}"))?;
    Ok(format!(
        "{TOKEN_PREFIX}{}",
        interlock_spec::hash::base32_nopad(&bytes).to_lowercase()
    ))
}

/// The SHA-256 of a token, as the agents file holds it.
pub fn token_sha256_hex(token: &str) -> String {
    sha256_hex(token.as_bytes())
}

/// The agent a request was authenticated as, put on the request by [`authenticate`].
#[derive(Debug, Clone)]
struct Caller(AgentId);

/// One agent's proxy and its in-flight bound.
struct Served {
    server: ProxyServer,
    calls: Arc<Semaphore>,
}

/// The MCP handler of the HTTP server: finds the caller's proxy and hands the request to it.
#[derive(Clone)]
pub struct Fleet {
    agents: Arc<HashMap<AgentId, Served>>,
    upstream: Arc<Upstream>,
}

impl Fleet {
    /// The handler over each agent's proxy (all in front of `upstream`).
    pub fn new(servers: Vec<ProxyServer>, upstream: Arc<Upstream>) -> Fleet {
        let agents = servers
            .into_iter()
            .map(|server| {
                let served = Served {
                    server,
                    calls: Arc::new(Semaphore::new(CALLS_IN_FLIGHT_PER_AGENT_MAX)),
                };
                (served.server.0.agent_id.clone(), served)
            })
            .collect();
        Fleet {
            agents: Arc::new(agents),
            upstream,
        }
    }

    /// The proxy of the agent this request was authenticated as, with a slot of its bound.
    fn caller(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<(&Served, tokio::sync::OwnedSemaphorePermit), McpError> {
        let caller = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Caller>())
            .ok_or_else(|| {
                McpError::internal_error("the request carries no authenticated agent", None)
            })?;
        let served = self.agents.get(&caller.0).ok_or_else(|| {
            McpError::internal_error(format!("agent {} is not served here", caller.0), None)
        })?;
        let permit = served.calls.clone().try_acquire_owned().map_err(|_| {
            McpError::invalid_request(
                format!(
                    "agent {} already has {CALLS_IN_FLIGHT_PER_AGENT_MAX} requests in flight (the bound per agent); nothing was sent, retry when one has answered",
                    caller.0
                ),
                None,
            )
        })?;
        Ok((served, permit))
    }
}

impl ServerHandler for Fleet {
    fn get_info(&self) -> ServerConfig {
        server_config()
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let (served, _permit) = self.caller(&context)?;
        served.server.list_tools(request, context).await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let (served, _permit) = self.caller(&context)?;
        served.server.call_tool(request, context).await
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.upstream.forward_list_changed_to(context.peer);
    }
}

/// The bearer-token layer: who the caller is, and that a session is used only by its opener.
struct Auth {
    by_token: HashMap<[u8; 32], AgentId>,
    /// Which agent opened each session (recorded from the `initialize` response).
    sessions: Mutex<HashMap<SessionId, AgentId>>,
    manager: Arc<LocalSessionManager>,
}

const SESSION_HEADER: &str = "mcp-session-id";

impl Auth {
    /// Forgets sessions rmcp has closed; returns how many `agent` still has open.
    async fn open_sessions(&self, agent: &AgentId) -> usize {
        let mine: Vec<SessionId> = {
            let sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
            sessions
                .iter()
                .filter(|(_, owner)| *owner == agent)
                .map(|(id, _)| id.clone())
                .collect()
        };
        let mut open = 0;
        for id in mine {
            if self.manager.has_session(&id).await.unwrap_or(false) {
                open += 1;
            } else {
                let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
                sessions.remove(&id);
            }
        }
        open
    }

    fn owner(&self, session: &str) -> Option<AgentId> {
        let sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions.get(session).cloned()
    }
}

fn unauthorized(error: Option<&str>, message: &str) -> Response {
    let challenge = match error {
        None => r#"Bearer realm="interlock""#.to_owned(),
        Some(error) => format!(r#"Bearer realm="interlock", error="{error}""#),
    };
    let mut response = (StatusCode::UNAUTHORIZED, message.to_owned()).into_response();
    if let Ok(value) = HeaderValue::from_str(&challenge) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
    response
}

fn bearer(request: &Request) -> Option<&str> {
    let value = request
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|token| !token.is_empty())
}

/// Authenticates every request by its bearer token (401 with `WWW-Authenticate` when missing
/// or unknown), keeps each session to the agent that opened it, and bounds sessions per agent.
async fn authenticate(State(auth): State<Arc<Auth>>, mut request: Request, next: Next) -> Response {
    let Some(token) = bearer(&request) else {
        return unauthorized(
            None,
            "Interlock needs `Authorization: Bearer <token>`; none was sent",
        );
    };
    // The token is compared by its hash: no stored secret, and a lookup that leaks nothing of it.
    let Some(agent) = auth.by_token.get(&sha256(token.as_bytes())).cloned() else {
        return unauthorized(
            Some("invalid_token"),
            "this bearer token is not in the agents file",
        );
    };
    let session = request
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    match &session {
        Some(id) if auth.owner(id).as_ref() != Some(&agent) => {
            tracing::warn!(%agent, "a request on a session this agent did not open");
            return (
                StatusCode::NOT_FOUND,
                format!("no session {id} for agent {agent}; initialize a new one"),
            )
                .into_response();
        }
        Some(_) => {}
        None if auth.open_sessions(&agent).await >= SESSIONS_PER_AGENT_MAX => {
            return (
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "agent {agent} has {SESSIONS_PER_AGENT_MAX} sessions open (the bound per agent); close one or wait {} s for an idle one to expire",
                    SESSION_IDLE_MAX.as_secs()
                ),
            )
                .into_response();
        }
        None => {}
    }
    request.extensions_mut().insert(Caller(agent.clone()));
    let closing = request.method() == axum::http::Method::DELETE;
    let mut response = next.run(request).await;
    if closing && response.status() == StatusCode::ACCEPTED {
        // rmcp answers a closed session 202; clients (the Python SDK's among them) expect 200 or
        // 204 for DELETE and log a failure otherwise. The session is closed either way.
        *response.status_mut() = StatusCode::NO_CONTENT;
    }
    if session.is_none()
        && let Some(opened) = response
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
    {
        let mut sessions = auth.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions.insert(SessionId::from(opened), agent);
    }
    response
}

/// Whether `addr` is a loopback address (no `--allow-remote` needed).
pub fn is_loopback(addr: &SocketAddr) -> bool {
    addr.ip().is_loopback()
}

/// Serves `fleet` on `listener` until `stop` is cancelled.
pub async fn serve(
    listener: tokio::net::TcpListener,
    fleet: Fleet,
    agents: &[AgentSpec],
    allowed_hosts: Vec<String>,
    stop: CancellationToken,
) -> Result<(), String> {
    let mut manager = LocalSessionManager::default();
    manager.session_config.keep_alive = Some(SESSION_IDLE_MAX);
    let manager = Arc::new(manager);
    let mut config = StreamableHttpServerConfig::default()
        .with_max_request_body_bytes(HTTP_BODY_BYTES_MAX)
        .with_cancellation_token(stop.child_token());
    if !allowed_hosts.is_empty() {
        let mut hosts = config.allowed_hosts.clone();
        hosts.extend(allowed_hosts);
        config = config.with_allowed_hosts(hosts);
    }
    let service = StreamableHttpService::new(move || Ok(fleet.clone()), manager.clone(), config);
    let auth = Arc::new(Auth {
        by_token: agents
            .iter()
            .map(|a| (a.token_sha256, a.id.clone()))
            .collect(),
        sessions: Mutex::new(HashMap::new()),
        manager,
    });
    let router = axum::Router::new()
        .nest_service(MCP_PATH, service)
        .layer(axum::middleware::from_fn_with_state(auth, authenticate));
    axum::serve(listener, router)
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await
        .map_err(|e| format!("the HTTP server failed: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<Vec<AgentSpec>, String> {
        let dir = std::env::temp_dir().join(format!("interlock-agents-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{}.yaml", sha256_hex(yaml.as_bytes())));
        std::fs::write(&path, yaml).unwrap();
        read_agents(&path)
    }

    fn hash(token: &str) -> String {
        token_sha256_hex(token)
    }

    #[test]
    fn an_agents_file_names_agents_mandates_and_token_hashes() {
        let yaml = format!(
            "agents:\n  - id: agent_a\n    mandate: a.yaml\n    token_sha256: {}\n  - id: agent_b\n    mandate: /etc/b.yaml\n    token_sha256: {}\n",
            hash("ilk_a"),
            hash("ilk_b")
        );
        let agents = parse(&yaml).unwrap();
        assert_eq!(agents.len(), 2);
        assert_eq!(agents[0].id.as_str(), "agent_a");
        assert_eq!(agents[0].token_sha256, sha256(b"ilk_a"));
        assert!(agents[0].mandate.is_absolute() && agents[0].mandate.ends_with("a.yaml"));
        assert_eq!(agents[1].mandate, PathBuf::from("/etc/b.yaml"));
    }

    #[test]
    fn a_bad_agents_file_is_refused_and_the_error_names_the_entry() {
        let a = hash("ilk_a");
        let cases = [
            ("agents: []\n".to_owned(), "names no agent"),
            (
                format!(
                    "agents:\n  - id: agent_a\n    mandate: a.yaml\n    token_sha256: {a}\n    role: admin\n"
                ),
                "role",
            ),
            (
                "agents:\n  - id: agent_a\n    mandate: a.yaml\n    token_sha256: ABC\n".to_owned(),
                "agents[0].token_sha256",
            ),
            (
                format!(
                    "agents:\n  - id: agent_a\n    mandate: a.yaml\n    token_sha256: {}\n",
                    a.to_uppercase()
                ),
                "lower-case hex",
            ),
            (
                format!(
                    "agents:\n  - id: agent_a\n    mandate: a.yaml\n    token_sha256: {a}\n  - id: agent_a\n    mandate: b.yaml\n    token_sha256: {}\n",
                    hash("ilk_b")
                ),
                "agents[1].id: agent agent_a is named twice",
            ),
            (
                format!(
                    "agents:\n  - id: agent_a\n    mandate: a.yaml\n    token_sha256: {a}\n  - id: agent_b\n    mandate: b.yaml\n    token_sha256: {a}\n"
                ),
                "agents[1].token_sha256: the same token",
            ),
            (
                format!("agents:\n  - id: 'agent a'\n    mandate: a.yaml\n    token_sha256: {a}\n"),
                "agents[0].id",
            ),
            (
                format!("agents:\n  - id: agent_a\n    token_sha256: {a}\n"),
                "mandate",
            ),
        ];
        for (yaml, needle) in cases {
            let error = parse(&yaml).expect_err(&yaml);
            assert!(error.contains(needle), "{needle:?} not in {error:?}");
            assert!(error.contains("agents file"), "{error}");
        }
    }

    #[test]
    fn an_agents_file_past_its_bounds_is_refused() {
        let big = format!("# {}\nagents: []\n", "x".repeat(AGENTS_FILE_BYTES_MAX));
        assert!(parse(&big).unwrap_err().contains("bytes"));
        let mut many = String::from("agents:\n");
        for i in 0..=AGENTS_MAX {
            many.push_str(&format!(
                "  - id: agent_{i}\n    mandate: m.yaml\n    token_sha256: {}\n",
                hash(&format!("ilk_{i}"))
            ));
        }
        assert!(
            parse(&many)
                .unwrap_err()
                .contains(&format!("the most is {AGENTS_MAX}"))
        );
    }

    #[test]
    fn tokens_are_prefixed_random_and_stored_only_as_their_hash() {
        let (one, two) = (new_token().unwrap(), new_token().unwrap());
        assert!(one.starts_with(TOKEN_PREFIX) && one.len() > TOKEN_PREFIX.len() + 50);
        assert_ne!(one, two);
        assert!(is_sha256_hex(&token_sha256_hex(&one)));
    }

    #[test]
    fn the_bearer_scheme_is_read_case_blind_and_an_empty_token_is_none() {
        let with = |value: &str| {
            let mut request = Request::new(axum::body::Body::empty());
            request
                .headers_mut()
                .insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
            bearer(&request).map(str::to_owned)
        };
        assert_eq!(with("Bearer ilk_x").as_deref(), Some("ilk_x"));
        assert_eq!(with("bearer  ilk_x ").as_deref(), Some("ilk_x"));
        assert_eq!(with("Basic dXNlcjpwdw=="), None);
        assert_eq!(with("Bearer "), None);
        assert_eq!(with("ilk_x"), None);
        assert_eq!(bearer(&Request::new(axum::body::Body::empty())), None);
    }
}
