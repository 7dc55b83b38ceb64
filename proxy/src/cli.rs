//! The command line: `serve`, `check`, `pin`, `ledger`, `audit verify`, the operator's
//! commands and `demo`.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use interlock_engine::inspect::{AttemptRow, AuditRow, DecisionRow, FindingRow, IntentDetail};
use interlock_engine::{Engine, EngineConfig, Ledger, SystemClock};
use interlock_profile::Profile;
use interlock_spec::ids::AgentId;
use interlock_spec::mandate::{Mandate, MandateError};
use serde_json::{Value, json};

use crate::upstream::{Carriage, McpRail, Upstream, carriage, tool_sha256};

/// `--version`; a build with kill points says so, so the chaos matrix can refuse one without.
const VERSION: &str = if cfg!(feature = "failpoints") {
    concat!(env!("CARGO_PKG_VERSION"), "+failpoints")
} else {
    env!("CARGO_PKG_VERSION")
};

/// Exit code for a refusal or a failed check.
const EXIT_FAILED: u8 = 1;

#[derive(Parser)]
#[command(
    name = "interlock",
    version = VERSION,
    about = "An MCP proxy that stops AI agents from paying twice or paying more than a human authorised.",
    after_help = "Exit codes: 0 ok; 1 refused or a failed check; 2 usage.\nLogs go to stderr (RUST_LOG=error|warn|info|debug|trace); stdout carries only JSON-RPC in serve mode."
)]
struct Cli {
    /// The rail profile: `razorpay` (built in) or a profile file (YAML) describing the
    /// upstream's money tools. Every command that reads a mandate or calls the rail uses it.
    #[arg(
        long,
        global = true,
        env = "INTERLOCK_PROFILE",
        default_value = "razorpay"
    )]
    profile: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write a mandate from a short interview on stdin (offline); pins UPSTREAM's tools if
    /// given. Shows the YAML and its warnings and writes only after you type `yes`.
    Init(InitArgs),
    /// Serve MCP in front of UPSTREAM (started as a child process): on stdio for one agent,
    /// or on streamable HTTP (`--listen`) for the agents of an agents file.
    Serve(ServeArgs),
    /// Make a bearer token for an agent of `serve --listen`: prints the token (give it to the
    /// agent; it is not stored) and the agents-file entry holding its SHA-256.
    Token(TokenArgs),
    /// Validate a mandate and summarise it.
    Check(CheckArgs),
    /// Print the pins (server id and per-tool SHA-256) of an upstream's tools.
    Pin(PinArgs),
    /// Read the ledger's intents.
    Ledger(LedgerArgs),
    /// The audit log.
    Audit(AuditArgs),
    /// Release a HELD intent: the attempt then runs against UPSTREAM.
    Approve(ApproveArgs),
    /// Refuse a HELD intent for good.
    Reject(RejectArgs),
    /// Settle a QUARANTINED intent: `--applied ENTITY_ID` or `--not-applied`.
    Resolve(ResolveArgs),
    /// Run one reconcile pass now over every intent that is due, against UPSTREAM.
    Reconcile(ReconcileArgs),
    /// The scripted demo: the real proxy in front of interlock-rail-mock (found next to this
    /// executable), six steps, then the ledger and the rail journal. Exit 0 when every step
    /// behaved as the story says, 1 otherwise.
    Demo(DemoArgs),
}

#[derive(Args)]
struct InitArgs {
    /// Where to write the mandate (YAML).
    #[arg(long)]
    out: PathBuf,
    /// Replace FILE if it exists.
    #[arg(long)]
    force: bool,
    /// Machine-readable output (the prompts still go to stderr).
    #[arg(long)]
    json: bool,
    /// The upstream command and its arguments: its tools are offered and pinned.
    #[arg(last = true)]
    upstream: Vec<String>,
}

#[derive(Args)]
struct DemoArgs {
    /// Keep the temporary directory (mandate, ledger, rail journal) after a successful run.
    #[arg(long)]
    keep: bool,
    /// One JSON document on stdout at the end (each step's decision, the ledger, the rail
    /// journal); the story goes to stderr.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ReconcileArgs {
    /// The mandate the intents were judged under.
    #[arg(long, env = "INTERLOCK_MANDATE")]
    mandate: PathBuf,
    /// The ledger; default `<mandate dir>/<mandate file stem>.ledger.db`.
    #[arg(long, env = "INTERLOCK_DB_PATH")]
    db: Option<PathBuf>,
    /// Bound on each rail call, in milliseconds.
    #[arg(long, env = "INTERLOCK_CALL_TIMEOUT_MS", default_value_t = 10_000)]
    call_timeout_ms: u64,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
    /// The upstream command and its arguments.
    #[arg(last = true, required = true)]
    upstream: Vec<String>,
}

#[derive(Args)]
struct OperatorArgs {
    /// The intent's SIK.
    sik: String,
    /// The mandate the intent was judged under (its merchant names the intent).
    #[arg(long, env = "INTERLOCK_MANDATE")]
    mandate: PathBuf,
    /// The ledger; default `<mandate dir>/<mandate file stem>.ledger.db`.
    #[arg(long, env = "INTERLOCK_DB_PATH")]
    db: Option<PathBuf>,
    /// Who decides (recorded in the audit log).
    #[arg(long, env = "INTERLOCK_OPERATOR")]
    by: String,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ApproveArgs {
    #[command(flatten)]
    op: OperatorArgs,
    /// Why (recorded in the audit log).
    #[arg(long)]
    why: String,
    /// Bound on the rail call, in milliseconds.
    #[arg(long, env = "INTERLOCK_CALL_TIMEOUT_MS", default_value_t = 10_000)]
    call_timeout_ms: u64,
    /// Approve even if a live Razorpay key reaches the upstream (real money).
    #[arg(long, env = "INTERLOCK_ALLOW_LIVE")]
    allow_live: bool,
    /// The upstream command and its arguments (the approved attempt is sent through it).
    #[arg(last = true, required = true)]
    upstream: Vec<String>,
}

#[derive(Args)]
struct RejectArgs {
    #[command(flatten)]
    op: OperatorArgs,
    /// Why (recorded in the audit log).
    #[arg(long)]
    why: String,
}

#[derive(Args)]
#[command(group(clap::ArgGroup::new("settled").required(true).args(["applied", "not_applied"])))]
struct ResolveArgs {
    #[command(flatten)]
    op: OperatorArgs,
    /// The rail entity carrying this intent's stamp.
    #[arg(long, value_name = "ENTITY_ID")]
    applied: Option<String>,
    /// Nothing was applied (refused until the rail's lag has passed).
    #[arg(long)]
    not_applied: bool,
}

#[derive(Args)]
pub(crate) struct ServeArgs {
    /// The mandate (YAML), on stdio.
    #[arg(
        long,
        env = "INTERLOCK_MANDATE",
        conflicts_with = "listen",
        required_unless_present = "listen"
    )]
    pub(crate) mandate: Option<PathBuf>,
    /// The ledger: a SQLite file, or a PostgreSQL connection string (`postgres://…`, ADR 0010)
    /// for a fleet on one ledger; default `<mandate dir>/<mandate file stem>.ledger.db` on stdio,
    /// `<agents file dir>/<agents file stem>.ledger.db` on HTTP (one ledger for every agent).
    #[arg(long, env = "INTERLOCK_DB_PATH")]
    pub(crate) db: Option<PathBuf>,
    /// The agent this proxy speaks for, on stdio. Required there: the agent's identity is
    /// configuration, not something read from the mandate it is checked against.
    #[arg(
        long,
        env = "INTERLOCK_AGENT_ID",
        conflicts_with = "listen",
        required_unless_present = "listen"
    )]
    pub(crate) agent: Option<String>,
    /// Serve streamable HTTP on this address (e.g. 127.0.0.1:8402; port 0 picks one) at
    /// `/mcp`, for the agents of `--agents`, instead of stdio.
    #[arg(long, env = "INTERLOCK_LISTEN", requires = "agents")]
    pub(crate) listen: Option<std::net::SocketAddr>,
    /// With --listen: the agents file (YAML): each agent's id, mandate and the SHA-256 of its
    /// bearer token (`interlock token` makes one).
    #[arg(long, env = "INTERLOCK_AGENTS", requires = "listen")]
    pub(crate) agents: Option<PathBuf>,
    /// With --listen: allow a non-loopback address. Terminate TLS in a reverse proxy in front.
    #[arg(long, requires = "listen")]
    pub(crate) allow_remote: bool,
    /// With --listen: a `Host` the server answers besides localhost (the name a reverse proxy
    /// forwards); repeatable. Other hosts are refused (DNS rebinding).
    #[arg(long, requires = "listen")]
    pub(crate) allowed_host: Vec<String>,
    /// Bound on one upstream call, in milliseconds; a money call that runs out is ambiguous.
    #[arg(long, env = "INTERLOCK_CALL_TIMEOUT_MS", default_value_t = 10_000)]
    pub(crate) call_timeout_ms: u64,
    /// Start even if a live Razorpay key (`rzp_live_…`) reaches the upstream: in
    /// RAZORPAY_KEY_ID, in the upstream's arguments, or in ~/.razorpay-mcp-server.yaml.
    #[arg(long, env = "INTERLOCK_ALLOW_LIVE")]
    pub(crate) allow_live: bool,
    /// How long a lease on an intent lasts, in milliseconds; at least the call timeout + 5000.
    /// Default: the larger of 30000 and that minimum. A restart after a crash waits for the dead
    /// process's leases to expire before it settles their intents.
    #[arg(long, env = "INTERLOCK_LEASE_TTL_MS")]
    pub(crate) lease_ttl_ms: Option<u64>,
    /// How often the reconciler runs, in milliseconds.
    #[arg(long, env = "INTERLOCK_RECONCILE_EVERY_MS", default_value_t = 1_000)]
    pub(crate) reconcile_every_ms: u64,
    /// When a call is held for a human and the client supports MCP elicitation, ask the user
    /// in the client and wait this long (milliseconds) for approve or decline; no answer leaves
    /// it held (`interlock approve` still works). 0: never ask.
    #[arg(long, env = "INTERLOCK_APPROVAL_WAIT_MS", default_value_t = crate::approval::APPROVAL_WAIT_DEFAULT_MS)]
    pub(crate) approval_wait_ms: u64,
    /// Export traces (OTLP over http/protobuf) to this collector, e.g. http://127.0.0.1:4318
    /// (`/v1/traces` is appended). Without it, the standard OTEL_EXPORTER_OTLP_ENDPOINT /
    /// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT turn tracing on; with neither it is off.
    #[arg(long, value_name = "URL")]
    pub(crate) otlp_endpoint: Option<String>,
    /// Record each call's arguments and result text on its span (cut at 4 KiB). Off by
    /// default: they carry amounts, payment ids and customer data.
    #[arg(long, env = "INTERLOCK_OTEL_RECORD_PAYLOADS")]
    pub(crate) otel_record_payloads: bool,
    /// The upstream command and its arguments.
    #[arg(last = true, required = true)]
    pub(crate) upstream: Vec<String>,
}

#[derive(Args)]
struct TokenArgs {
    /// The agent the token is for (printed in the agents-file entry).
    #[arg(long)]
    agent: String,
    /// The agent's mandate (printed in the agents-file entry).
    #[arg(long)]
    mandate: PathBuf,
}

#[derive(Args)]
struct CheckArgs {
    /// The mandate (YAML).
    #[arg(long, env = "INTERLOCK_MANDATE")]
    mandate: PathBuf,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct PinArgs {
    /// Pin only the tools this mandate grants (and, with `--write`, update its provenance).
    #[arg(long, env = "INTERLOCK_MANDATE")]
    mandate: Option<PathBuf>,
    /// Rewrite the mandate's `provenance:` section with the pins (the rest of the file, comments
    /// included, is kept). The result is validated before it replaces the file.
    #[arg(long, requires = "mandate")]
    write: bool,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
    /// The upstream command and its arguments.
    #[arg(last = true, required = true)]
    upstream: Vec<String>,
}

#[derive(Args)]
struct LedgerArgs {
    /// The ledger (SQLite).
    #[arg(long, env = "INTERLOCK_DB_PATH")]
    db: PathBuf,
    /// Machine-readable output.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    what: Option<LedgerCommand>,
}

#[derive(Subcommand)]
enum LedgerCommand {
    /// Every intent (the default).
    List,
    /// One intent.
    Show {
        /// The intent's SIK.
        sik: String,
    },
}

#[derive(Args)]
struct AuditArgs {
    #[command(subcommand)]
    what: AuditCommand,
}

#[derive(Subcommand)]
enum AuditCommand {
    /// Walk the hash chain.
    Verify {
        /// The ledger (SQLite).
        #[arg(long, env = "INTERLOCK_DB_PATH")]
        db: PathBuf,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

/// Parses the command line and runs it.
pub fn run() -> ExitCode {
    init_logs();
    let cli = Cli::parse();
    let result = match select_profile(&cli.profile) {
        Err(why) => Err(why),
        Ok(()) => dispatch(cli.command),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("interlock: {why}");
            ExitCode::from(EXIT_FAILED)
        }
    }
}

fn dispatch(command: Command) -> Result<(), String> {
    match command {
        Command::Init(args) => init(args),
        Command::Serve(args) => crate::serve::serve(args),
        Command::Token(args) => token(args),
        Command::Check(args) => check(args),
        Command::Pin(args) => pin(args),
        Command::Ledger(args) => ledger(args),
        Command::Audit(AuditArgs {
            what: AuditCommand::Verify { db, json },
        }) => audit_verify(&db, json),
        Command::Approve(args) => approve(args),
        Command::Reject(args) => reject(args),
        Command::Resolve(args) => resolve(args),
        Command::Reconcile(args) => reconcile(args),
        Command::Demo(args) => crate::demo::run(args.keep, args.json),
    }
}

fn init_logs() {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    // RUST_LOG in the `target=level,level` form; by default our decisions at info, the rest warn.
    let targets = std::env::var("RUST_LOG")
        .ok()
        .and_then(|text| text.parse::<Targets>().ok())
        .unwrap_or_else(|| {
            Targets::new()
                .with_target("interlock", LevelFilter::INFO)
                .with_default(LevelFilter::WARN)
        });
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    tracing_subscriber::registry()
        .with(fmt)
        .with(targets)
        .init();
}

fn now_ms() -> u64 {
    use interlock_engine::Clock;
    SystemClock.now_ms()
}

/// The profile `--profile` selected, set once before any command runs.
static PROFILE: OnceLock<Arc<Profile>> = OnceLock::new();

fn select_profile(name_or_path: &str) -> Result<(), String> {
    let profile = Profile::load(name_or_path).map_err(|e| format!("--profile: {e}"))?;
    tracing::debug!(profile = %profile.name, "rail profile");
    // `run` selects once per process; a second selection (a test calling `run` twice) must
    // name the same profile, or the commands would disagree on what a tool does.
    let chosen = PROFILE.get_or_init(|| Arc::new(profile.clone()));
    if **chosen != profile {
        return Err(format!("--profile: {} is already selected", chosen.name));
    }
    Ok(())
}

/// The rail profile the proxy guards: the one `--profile` selected, Razorpay's by default.
pub fn rail_profile() -> Arc<Profile> {
    PROFILE
        .get()
        .cloned()
        .unwrap_or_else(|| Arc::new(interlock_profile::razorpay::profile()))
}

/// Parses a mandate and checks it against the profile's rules of kinds (a refund's key carries
/// no window, …): what `serve`, `check` and the operator commands all load.
pub fn parse_mandate(text: &str, profile: &Profile) -> Result<Mandate, MandateError> {
    let mandate = Mandate::parse_yaml(text)?;
    profile
        .check_mandate(&mandate)
        .map_err(MandateError::Invalid)?;
    Ok(mandate)
}

fn load_mandate(path: &Path) -> Result<Mandate, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read mandate {}: {e}", path.display()))?;
    parse_mandate(&text, &rail_profile())
        .map_err(|e| format!("mandate {} is invalid: {e}", path.display()))
}

pub(crate) fn load_active_mandate(path: &Path) -> Result<Mandate, String> {
    let mandate = load_mandate(path)?;
    mandate
        .check_active(now_ms())
        .map_err(|e| format!("mandate {} is not in force: {e}", path.display()))?;
    Ok(mandate)
}

/// A lease-owner name unique to this process start: pid and 8 random bytes from the OS.
pub(crate) fn instance_id() -> Result<String, String> {
    use std::io::Read;
    let mut nonce = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut nonce))
        .map_err(|e| format!("cannot read /dev/urandom for the instance id: {e}"))?;
    let hex: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("ilk-{}-{hex}", std::process::id()))
}

pub(crate) fn default_db(mandate: &Path) -> PathBuf {
    let stem = mandate
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "mandate".to_owned());
    mandate
        .parent()
        .unwrap_or(Path::new("."))
        .join(format!("{stem}.ledger.db"))
}

/// The runtime a command runs on. Each `block_on` over it in this file is the one entry from
/// synchronous `main` into a command; none sits on the rail path, where the proxy stays async
/// from the agent's frame to the upstream's answer and back.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))
}

/// The most of a Razorpay MCP server's config file the live-key check reads.
const RAZORPAY_CONFIG_BYTES_MAX: u64 = 64 * 1024;

/// Where a live Razorpay key (`rzp_live_…`) would reach the upstream, if anywhere: the
/// environment it inherits (`RAZORPAY_KEY_ID`), its own arguments (`--key`/`-k`), or the config
/// file Razorpay's server reads from the home directory (`~/.razorpay-mcp-server.yaml`).
fn live_key_source(upstream: &[String]) -> Option<String> {
    const LIVE: &str = "rzp_live_";
    if std::env::var("RAZORPAY_KEY_ID").is_ok_and(|key| key.starts_with(LIVE)) {
        return Some("RAZORPAY_KEY_ID in the environment".to_owned());
    }
    if let Some(arg) = upstream.iter().position(|a| a.contains(LIVE)) {
        return Some(format!("the upstream's command line (word {})", arg + 1));
    }
    let home = std::env::var_os("HOME")?;
    for name in [
        ".razorpay-mcp-server.yaml",
        ".razorpay-mcp-server.yml",
        ".razorpay-mcp-server",
    ] {
        let path = Path::new(&home).join(name);
        let Ok(file) = std::fs::File::open(&path) else {
            continue;
        };
        let mut text = String::new();
        use std::io::Read;
        // An unreadable or non-UTF-8 file is read as far as it goes.
        let _ = file
            .take(RAZORPAY_CONFIG_BYTES_MAX)
            .read_to_string(&mut text);
        if text.contains(LIVE) {
            return Some(format!("{}", path.display()));
        }
    }
    None
}

/// Refuses to `what` (start, approve) in front of an upstream holding a live key, unless the
/// operator said `--allow-live`.
pub(crate) fn refuse_live_unless_allowed(
    upstream: &[String],
    allow_live: bool,
    what: &str,
) -> Result<(), String> {
    match live_key_source(upstream) {
        Some(source) if !allow_live => Err(format!(
            "a live Razorpay key (rzp_live_…) reaches the upstream through {source}: it would move real money; refusing to {what} without --allow-live"
        )),
        Some(source) => {
            tracing::warn!(%source, "a live Razorpay key reaches the upstream: real money (--allow-live)");
            Ok(())
        }
        None => Ok(()),
    }
}

fn token(args: TokenArgs) -> Result<(), String> {
    let agent = AgentId::parse(&args.agent).map_err(|e| format!("--agent: {e}"))?;
    let token = crate::http::new_token()?;
    // The token on stdout alone, so `TOKEN=$(interlock token …)` captures it; the entry on
    // stderr, for the operator to paste.
    println!("{token}");
    eprintln!(
        "# Give the token above to agent {agent} (Authorization: Bearer …); it is shown once and not stored.\n# Add this entry under `agents:` in the agents file:\n  - id: {agent}\n    mandate: {}\n    token_sha256: {}",
        args.mandate.display(),
        crate::http::token_sha256_hex(&token)
    );
    Ok(())
}

fn print(json_out: bool, value: &Value, human: impl FnOnce() -> String) {
    if json_out {
        println!("{value}");
    } else {
        println!("{}", human());
    }
}

fn check(args: CheckArgs) -> Result<(), String> {
    let mandate = load_mandate(&args.mandate)?;
    let active = mandate.check_active(now_ms());
    let hash = mandate.hash().map_err(|e| e.to_string())?;
    let grants: Vec<Value> = mandate
        .scope
        .grants
        .iter()
        .map(|(tool, grant)| {
            json!({"tool": tool, "reversibility": grant.reversibility,
                "max_amount_minor": grant.value.max_amount_minor,
                "pinned": mandate.provenance.as_ref().is_some_and(|p| p.pinned_manifests.contains_key(tool))})
        })
        .collect();
    let summary = json!({
        "ok": active.is_ok(),
        "mandate_id": mandate.mandate_id,
        "merchant_id": mandate.merchant_id,
        "agent_id": mandate.agent_id,
        "mandate_sha256": hash,
        "in_force": active.as_ref().err().map(ToString::to_string),
        "expires_at": mandate.expires_at,
        "grants": grants,
        "server_id": mandate.provenance.as_ref().map(|p| p.server_id.clone()),
    });
    print(args.json, &summary, || {
        let mut out = format!(
            "mandate {} (sha256 {hash}): agent {} on merchant {}, {}\n",
            mandate.mandate_id,
            mandate.agent_id,
            mandate.merchant_id,
            match &active {
                Ok(()) => "in force".to_owned(),
                Err(e) => format!("NOT in force: {e}"),
            }
        );
        for (tool, grant) in &mandate.scope.grants {
            out.push_str(&format!(
                "  grants {tool}: {:?}, at most {} per call\n",
                grant.reversibility, grant.value.max_amount_minor
            ));
        }
        out.trim_end().to_owned()
    });
    active.map_err(|e| format!("mandate {} is not in force: {e}", args.mandate.display()))
}

/// The upstream's self-reported `name@version` and its tools, from one short-lived session.
pub(crate) fn upstream_tools(
    upstream: &[String],
) -> Result<(String, Vec<rmcp::model::Tool>), String> {
    let rt = runtime()?;
    rt.block_on(async {
        let upstream = Upstream::spawn(upstream, Duration::from_secs(20)).await?;
        let tools = upstream.tools().await.map_err(|e| e.to_string())?;
        let id = upstream.server_id.clone();
        upstream.close().await;
        Ok::<_, String>((id, tools))
    })
}

/// How much of an upstream's stderr [`upstream_tools_quietly`] keeps: the end of it.
const UPSTREAM_STDERR_KEPT_BYTES: usize = 16 * 1024;

/// As [`upstream_tools`], with the upstream's stderr captured rather than inherited: `init`
/// interviews a person on this terminal, and the upstream's own logs would scroll through the
/// questions. What it wrote is shown only if listing its tools fails.
fn upstream_tools_quietly(upstream: &[String]) -> Result<(String, Vec<rmcp::model::Tool>), String> {
    use tokio::io::AsyncReadExt;
    let (program, args) = upstream
        .split_first()
        .ok_or("no upstream command given (after --)")?;
    let rt = runtime()?;
    rt.block_on(async {
        let mut command = tokio::process::Command::new(program);
        command.args(args);
        let (transport, stderr) = rmcp::transport::TokioChildProcess::builder(command)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start the upstream {program:?}: {e}"))?;
        // Read to the end, so the upstream never blocks on a full pipe; keep the tail.
        let captured = tokio::spawn(async move {
            let mut kept = Vec::new();
            let Some(mut stderr) = stderr else {
                return kept;
            };
            let mut chunk = [0u8; 4096];
            while let Ok(n @ 1..) = stderr.read(&mut chunk).await {
                kept.extend_from_slice(&chunk[..n]);
                let over = kept.len().saturating_sub(UPSTREAM_STDERR_KEPT_BYTES);
                kept.drain(..over);
            }
            kept
        });
        let listed = async {
            let upstream = Upstream::over(transport, Duration::from_secs(20)).await?;
            let tools = upstream.tools().await.map_err(|e| e.to_string())?;
            let id = upstream.server_id.clone();
            upstream.close().await;
            Ok::<_, String>((id, tools))
        }
        .await;
        match listed {
            Ok(found) => Ok(found),
            Err(why) => {
                // The upstream failed or is going: what it said on the way out explains why.
                let said = tokio::time::timeout(Duration::from_secs(2), captured)
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .unwrap_or_default();
                let said = String::from_utf8_lossy(&said);
                match said.trim_end() {
                    "" => Err(why),
                    said => Err(format!("{why}; the upstream's stderr:\n{said}")),
                }
            }
        }
    })
}

/// The pins of `tools` for which `wanted` holds, as a mandate's `provenance:` section, with
/// the manifest hash (over every tool the upstream offers) and the pins as JSON.
pub(crate) fn provenance_section(
    server_id: &str,
    tools: &[rmcp::model::Tool],
    wanted: impl Fn(&str) -> bool,
) -> Result<(String, String, serde_json::Map<String, Value>), String> {
    let mut pins = serde_json::Map::new();
    let mut manifest = Vec::new();
    for tool in tools {
        let hash = tool_sha256(tool)?;
        manifest.push(json!({"name": tool.name, "sha256": hash}));
        if wanted(&tool.name) {
            pins.insert(tool.name.to_string(), json!(hash));
        }
    }
    let manifest_sha256 = interlock_spec::hash::sha256_hex(
        interlock_spec::canonical::canonical_json(&Value::Array(manifest))
            .map_err(|e| e.to_string())?
            .as_bytes(),
    );
    let mut section = format!(
        "provenance:\n  # Written by `interlock pin`.\n  server_id: \"{server_id}\"\n  manifest_sha256: \"{manifest_sha256}\"\n  pinned_manifests:\n"
    );
    for (name, hash) in &pins {
        section.push_str(&format!(
            "    {name}:\n      sha256: {hash}\n      trust_tier: \"pinned\"\n"
        ));
    }
    Ok((section, manifest_sha256, pins))
}

fn init(args: InitArgs) -> Result<(), String> {
    use crate::init;
    if args.out.exists() && !args.force {
        return Err(format!(
            "{} exists; pass --force to replace it",
            args.out.display()
        ));
    }
    let pinned = if args.upstream.is_empty() {
        None
    } else {
        Some(upstream_tools_quietly(&args.upstream)?)
    };
    let offered: Vec<String> = match &pinned {
        Some((_, tools)) => {
            let (carried, unguarded): (Vec<_>, Vec<_>) = tools
                .iter()
                .partition(|t| carriage(&rail_profile(), &t.name, Some(t)) != Carriage::Unguarded);
            if !unguarded.is_empty() {
                let names: Vec<&str> = unguarded.iter().map(|t| t.name.as_ref()).collect();
                eprintln!(
                    "interlock: not offered (writes Interlock cannot guard: not a money tool it knows, not declared readOnlyHint): {}",
                    names.join(", ")
                );
            }
            carried.iter().map(|t| t.name.to_string()).collect()
        }
        None => init::KNOWN_TOOLS.iter().map(|t| (*t).to_owned()).collect(),
    };
    let mut stdin = std::io::stdin().lock();
    let mut stderr = std::io::stderr();
    let answers = init::interview(&mut stdin, &mut stderr, &offered)?;
    let section = match &pinned {
        Some((server_id, tools)) => Some(
            provenance_section(server_id, tools, |name| {
                answers.tools.iter().any(|t| t == name)
            })?
            .0,
        ),
        None => None,
    };
    let now = now_ms();
    let yaml = init::render(&answers, now, section.as_deref());
    let mandate = init::validate(&yaml, now)?;
    let warnings = init::warnings(&answers, pinned.is_some());
    eprintln!("\n{yaml}");
    for warning in &warnings {
        eprintln!("warning: {warning}");
    }
    eprint!("Type yes to write {}: ", args.out.display());
    let mut confirm = String::new();
    std::io::BufRead::read_line(&mut stdin, &mut confirm)
        .map_err(|e| format!("cannot read the confirmation: {e}"))?;
    if confirm.trim() != "yes" {
        return Err(format!("not confirmed; {} not written", args.out.display()));
    }
    if args.out.exists() && !args.force {
        return Err(format!(
            "{} appeared meanwhile; not replaced",
            args.out.display()
        ));
    }
    let tmp = args.out.with_extension("yaml.tmp");
    std::fs::write(&tmp, &yaml).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, &args.out)
        .map_err(|e| format!("cannot write {}: {e}", args.out.display()))?;
    let hash = mandate.hash().map_err(|e| e.to_string())?;
    let out = json!({"written": args.out, "mandate_sha256": hash, "warnings": warnings});
    print(args.json, &out, || {
        format!(
            "wrote {} (mandate sha256 {hash}, {} warning(s))",
            args.out.display(),
            warnings.len()
        )
    });
    Ok(())
}

fn pin(args: PinArgs) -> Result<(), String> {
    let (server_id, tools) = upstream_tools(&args.upstream)?;
    let mandate = args
        .mandate
        .as_deref()
        .map(load_mandate_to_pin)
        .transpose()?;
    let wanted = |name: &str| {
        mandate.as_ref().is_none_or(|m| {
            interlock_spec::ids::ToolName::parse(name).is_ok_and(|t| m.grant(&t).is_some())
        })
    };
    let (section, manifest_sha256, pins) = provenance_section(&server_id, &tools, wanted)?;
    if let Some(mandate) = &mandate {
        let missing: Vec<&str> = mandate
            .scope
            .grants
            .keys()
            .map(|t| t.as_str())
            .filter(|t| !pins.contains_key(*t))
            .collect();
        if !missing.is_empty() {
            eprintln!(
                "interlock: warning: the upstream does not offer granted tool(s) {}",
                missing.join(", ")
            );
        }
        let unguarded: Vec<&str> = tools
            .iter()
            .filter(|t| {
                wanted(&t.name)
                    && carriage(&rail_profile(), &t.name, Some(t)) == Carriage::Unguarded
            })
            .map(|t| t.name.as_ref())
            .collect();
        if !unguarded.is_empty() {
            eprintln!(
                "interlock: warning: granted tool(s) {} will be refused (TOOL_NOT_READ_ONLY): not a money tool Interlock guards, and not declared readOnlyHint: true",
                unguarded.join(", ")
            );
        }
    }
    if args.write {
        let path = args.mandate.as_deref().expect("clap requires --mandate");
        write_provenance(path, &section)?;
    }
    let out = json!({"server_id": server_id, "manifest_sha256": manifest_sha256, "tools": pins});
    print(args.json, &out, || section.trim_end().to_owned());
    Ok(())
}

/// The mandate at `path` for `pin`, which is what fills its provenance in: a mandate whose only
/// problems are in its `provenance:` block (none yet, `pinned_manifests: {}` without a
/// `manifest_sha256`, a blank hash) is read without that block. Any other problem refuses it
/// as [`load_mandate`] does, naming the path (and the line: the block's lines are blanked,
/// not removed).
fn load_mandate_to_pin(path: &Path) -> Result<Mandate, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read mandate {}: {e}", path.display()))?;
    if let Ok(mandate) = Mandate::parse_yaml(&text) {
        return Ok(mandate);
    }
    let mandate = Mandate::parse_yaml(&without_provenance(&text))
        .map_err(|e| format!("mandate {} is invalid: {e}", path.display()))?;
    eprintln!(
        "interlock: the provenance of {} is missing or incomplete; pin fills it in with --write",
        path.display()
    );
    Ok(mandate)
}

/// `text` with the lines of its top-level `provenance:` block made blank.
fn without_provenance(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut skipping = false;
    for line in text.lines() {
        let top_level = !line.is_empty() && !line.starts_with([' ', '\t', '#']);
        if top_level {
            skipping = line.starts_with("provenance:");
        }
        if !skipping {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// Replaces the top-level `provenance:` block of the mandate at `path` (or appends one), checks
/// the result parses and validates, then renames it into place.
fn write_provenance(path: &Path, section: &str) -> Result<(), String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read mandate {}: {e}", path.display()))?;
    let mut out = String::new();
    let mut skipping = false;
    let mut written = false;
    for line in text.lines() {
        let top_level = !line.is_empty() && !line.starts_with([' ', '\t', '#']);
        if top_level {
            skipping = false;
        }
        if top_level && line.starts_with("provenance:") {
            skipping = true;
            written = true;
            out.push_str(section);
            continue;
        }
        if !skipping {
            out.push_str(line);
            out.push('\n');
        }
    }
    if !written {
        if !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(section);
    }
    Mandate::parse_yaml(&out)
        .map_err(|e| format!("the pinned mandate would not validate, left unchanged: {e}"))?;
    let tmp = path.with_extension("yaml.tmp");
    std::fs::write(&tmp, &out).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("cannot replace {}: {e}", path.display()))?;
    eprintln!("interlock: pinned {}", path.display());
    Ok(())
}

fn open_existing(db: &Path) -> Result<Ledger, String> {
    let target = db.to_string_lossy();
    if !interlock_engine::ledger::is_postgres_url(&target) && !db.exists() {
        return Err(format!("no ledger at {}", db.display()));
    }
    Ledger::open_target(&target).map_err(|e| format!("cannot open the ledger: {e}"))
}

fn ledger(args: LedgerArgs) -> Result<(), String> {
    let ledger = open_existing(&args.db)?;
    let cores = ledger.cores().map_err(|e| e.to_string())?;
    let row = |c: &interlock_machine::IntentCore| {
        json!({"sik": c.sik, "state": c.state.to_string(), "attempts": c.attempt_seq,
            "rail_entity_id": c.entity_id})
    };
    match args.what.unwrap_or(LedgerCommand::List) {
        LedgerCommand::List => {
            let rows: Vec<Value> = cores.iter().map(row).collect();
            print(args.json, &Value::Array(rows), || {
                let mut text = format!("{} intent(s)\n", cores.len());
                for c in &cores {
                    text.push_str(&format!(
                        "  {}  {:<22} attempts {}  {}\n",
                        c.sik,
                        c.state.to_string(),
                        c.attempt_seq,
                        c.entity_id.as_deref().unwrap_or("-")
                    ));
                }
                text.trim_end().to_owned()
            });
            Ok(())
        }
        LedgerCommand::Show { sik } => {
            let key = interlock_spec::ids::Sik::parse(&sik).map_err(|e| format!("SIK: {e}"))?;
            let details = ledger.intent_detail(&key).map_err(|e| e.to_string())?;
            if details.is_empty() {
                return Err(format!("no intent {sik} in {}", args.db.display()));
            }
            let value: Vec<Value> = details.iter().map(detail_json).collect();
            let value = if value.len() == 1 {
                value.into_iter().next().unwrap_or_default()
            } else {
                Value::Array(value)
            };
            print(args.json, &value, || {
                details
                    .iter()
                    .map(detail_text)
                    .collect::<Vec<_>>()
                    .join("\n\n")
            });
            Ok(())
        }
    }
}

fn detail_json(d: &IntentDetail) -> Value {
    json!({"intent": d.intent, "decisions": d.decisions, "attempts": d.attempts,
        "reconcile_findings": d.findings, "audit": d.audit})
}

/// `ledger show` for a person: the intent, then each section oldest first.
fn detail_text(d: &IntentDetail) -> String {
    let i = &d.intent;
    let mut out = format!(
        "intent {} on {}\n  {} ({}) on {}: {} {}, {}\n  state {}, attempt {}, entity {}\n  \
         last change: {} ({})\n  mandate sha256 {}\n  first seen {} ms, updated {} ms (epoch)\n",
        i.sik,
        i.merchant_id,
        i.tool,
        i.kind.as_str(),
        i.subject_id,
        i.amount_minor,
        i.currency,
        i.reversibility,
        i.state,
        i.attempt_seq,
        or_dash(i.rail_entity_id.as_deref()),
        i.reason_code,
        i.reason,
        i.mandate_hash,
        i.first_seen_at,
        i.updated_at,
    );
    out.push_str(&format!("decisions ({}):\n", d.decisions.len()));
    for x in &d.decisions {
        out.push_str(&decision_line(x));
    }
    out.push_str(&format!("attempts ({}):\n", d.attempts.len()));
    for x in &d.attempts {
        out.push_str(&attempt_line(x));
    }
    out.push_str(&format!("reconcile findings ({}):\n", d.findings.len()));
    for x in &d.findings {
        out.push_str(&finding_line(x));
    }
    out.push_str(&format!("audit ({} record(s)):\n", d.audit.len()));
    for x in &d.audit {
        out.push_str(&format!(
            "  seq {} at {} ms: {} {}\n",
            x.seq,
            x.ts,
            x.kind,
            audit_line(x)
        ));
    }
    out.trim_end().to_owned()
}

fn decision_line(x: &DecisionRow) -> String {
    let gates: Vec<String> = x
        .gates_json
        .iter()
        .map(|g| {
            format!(
                "{:?} {} {}",
                g.gate,
                g.verdict.as_str(),
                g.reason_code.as_str()
            )
        })
        .collect();
    format!(
        "  at {} ms: {} {} {} by {} [{}]\n",
        x.decided_at,
        x.verdict.as_str(),
        x.outcome,
        x.reason_code,
        x.agent_id,
        gates.join("; ")
    )
}

fn attempt_line(x: &AttemptRow) -> String {
    format!(
        "  #{} started {} ms, finished {}: {} entity {} fee {} tax {} {}\n",
        x.attempt_seq,
        x.started_at,
        x.finished_at
            .map_or("-".to_owned(), |at| format!("{at} ms")),
        or_dash(x.outcome.as_deref()),
        or_dash(x.rail_entity_id.as_deref()),
        x.fee_minor,
        x.tax_minor,
        or_dash(x.detail.as_deref()),
    )
}

fn finding_line(x: &FindingRow) -> String {
    format!(
        "  attempt {} at {} ms: {} ({} page(s), exhausted {}, lag elapsed {}) matched {}\n",
        x.attempt_seq,
        x.queried_at,
        x.outcome,
        x.pages_scanned,
        x.pagination_exhausted,
        x.lag_elapsed,
        or_dash(x.matched_entity_id.as_deref()),
    )
}

/// A column that may be empty, for a person: `-` when it is.
fn or_dash(value: Option<&str>) -> &str {
    value.unwrap_or("-")
}

/// One audit record's change, reason, actor and detail, for `ledger show`.
fn audit_line(x: &AuditRow) -> String {
    use interlock_machine::Record;
    let mut line = match &x.record {
        Record::Transition { from, to, .. } => format!("{} -> {}", from.state, to.state),
        Record::Inserted { core, .. } => format!("-> {}", core.state),
        Record::RailCall { attempt_seq, .. } => format!("rail call, attempt {attempt_seq}"),
    };
    let notes = &x.notes;
    if let Some(code) = &notes.reason_code {
        line.push_str(&format!(" [{code}]"));
    }
    if let Some(context) = &notes.context {
        match (&context.by, &context.why) {
            (Some(who), Some(why)) => line.push_str(&format!(" by {who}: {why}")),
            (Some(who), None) => line.push_str(&format!(" by {who}")),
            _ => {}
        }
    }
    if let Some(detail) = &notes.detail {
        line.push_str(&format!(" {detail}"));
    }
    line
}

fn audit_verify(db: &Path, json_out: bool) -> Result<(), String> {
    let ledger = open_existing(db)?;
    let report = ledger.verify_chain().map_err(|e| e.to_string())?;
    print(
        json_out,
        &json!({"ok": true, "records": report.records, "head": report.head}),
        || {
            format!(
                "audit chain intact: {} records, head {}",
                report.records, report.head
            )
        },
    );
    Ok(())
}

/// A rail for operator commands that need none: every call fails as unavailable.
struct NoRail;

impl interlock_engine::Rail for NoRail {
    fn resolve(
        &self,
        _action: &interlock_spec::action::ProposedAction,
    ) -> impl Future<Output = Result<interlock_engine::Referent, interlock_engine::rail::RailError>> + Send
    {
        std::future::ready(Err(interlock_engine::rail::RailError::Unavailable(
            "no upstream in this command".into(),
        )))
    }
    fn execute(
        &self,
        _call: &interlock_engine::RailCall,
        _budget: &interlock_engine::rail::CallBudget,
    ) -> impl Future<Output = interlock_engine::RailOutcome> + Send {
        std::future::ready(interlock_engine::RailOutcome::Ambiguous {
            detail: "no upstream in this command".into(),
        })
    }
    fn list_page(
        &self,
        _query: &interlock_engine::rail::ListQuery,
        _at: interlock_engine::rail::PageAt,
    ) -> impl Future<
        Output = Result<interlock_engine::rail::ListPage, interlock_engine::rail::RailError>,
    > + Send {
        std::future::ready(Err(interlock_engine::rail::RailError::Unavailable(
            "no upstream in this command".into(),
        )))
    }
}

fn operator_engine<R: interlock_engine::Rail>(
    op: &OperatorArgs,
    rail: R,
    call_timeout_ms: u64,
) -> Result<(Engine<R>, interlock_engine::IntentKey), String> {
    let mandate = load_mandate(&op.mandate)?;
    let db = op.db.clone().unwrap_or_else(|| default_db(&op.mandate));
    let ledger = open_existing(&db)?;
    let clock = Arc::new(crate::clock::RuntimeClock::of(&ledger)?);
    let sik = interlock_spec::ids::Sik::parse(&op.sik).map_err(|e| format!("SIK: {e}"))?;
    let key = interlock_engine::IntentKey {
        merchant_id: mandate.merchant_id.clone(),
        sik,
    };
    let mut config = EngineConfig::new(instance_id()?);
    config.call_timeout_ms = call_timeout_ms.max(1);
    config.lease_ttl_ms = config
        .lease_ttl_ms
        .max(config.call_timeout_ms + interlock_engine::executor::LEASE_MARGIN_MS);
    let engine = Engine::new(ledger, rail, clock, mandate, config)
        .map_err(|e| format!("cannot start the engine: {e}"))?;
    Ok((engine, key))
}

fn approve(args: ApproveArgs) -> Result<(), String> {
    refuse_live_unless_allowed(&args.upstream, args.allow_live, "approve")?;
    let op = &args.op;
    let timeout = Duration::from_millis(args.call_timeout_ms.max(1));
    let rt = runtime()?;
    let answer = rt.block_on(async {
        let upstream = Arc::new(Upstream::spawn(&args.upstream, timeout).await?);
        let rail = McpRail {
            upstream: upstream.clone(),
            profile: rail_profile(),
        };
        let (engine, key) = operator_engine(op, rail, args.call_timeout_ms)?;
        // The approval is judged again, G6 included: against the upstream's live definition.
        let tool = engine
            .ledger()
            .tool_of(&key)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("no intent {} in the ledger", op.sik))?;
        let tools = upstream
            .tools()
            .await
            .map_err(|e| format!("cannot list the upstream's tools: {e}"))?;
        let live = upstream.live_tool(&tools, &tool);
        let (by, why) = (op.by.clone(), args.why.clone());
        let answer = engine
            .approve_async(&key, &by, &why, live.as_ref())
            .await
            .map_err(|e| format!("cannot approve {}: {e}", op.sik))?;
        if let Ok(upstream) = Arc::try_unwrap(upstream) {
            upstream.close().await;
        }
        Ok::<_, String>(answer)
    })?;
    rt.shutdown_timeout(Duration::from_secs(1));
    let block = crate::server::interlock_block(&answer);
    print(op.json, &block, || {
        format!(
            "approved {} by {}: {:?} ({}) {}",
            op.sik,
            op.by,
            answer.outcome,
            answer.reason_code.as_str(),
            answer.message
        )
    });
    if answer.outcome == interlock_engine::Outcome::Applied {
        Ok(())
    } else {
        Err(format!("approved, but the action is {:?}", answer.outcome))
    }
}

fn reject(args: RejectArgs) -> Result<(), String> {
    let op = &args.op;
    let (engine, key) = operator_engine(op, NoRail, 10_000)?;
    engine
        .reject(&key, &op.by, &args.why)
        .map_err(|e| format!("cannot reject {}: {e}", op.sik))?;
    print(
        op.json,
        &json!({"ok": true, "sik": op.sik, "state": "BLOCKED", "by": op.by}),
        || format!("rejected {} by {}: {}", op.sik, op.by, args.why),
    );
    Ok(())
}

fn resolve(args: ResolveArgs) -> Result<(), String> {
    let op = &args.op;
    let (engine, key) = operator_engine(op, NoRail, 10_000)?;
    let state = match &args.applied {
        Some(entity) => {
            engine
                .resolve_applied(&key, entity, &op.by)
                .map_err(|e| format!("cannot resolve {}: {e}", op.sik))?;
            "APPLIED"
        }
        None => {
            engine
                .resolve_not_applied(&key, &op.by)
                .map_err(|e| format!("cannot resolve {}: {e}", op.sik))?;
            "CONFIRMED_NOT_APPLIED"
        }
    };
    print(
        op.json,
        &json!({"ok": true, "sik": op.sik, "state": state, "by": op.by}),
        || format!("resolved {} as {state} by {}", op.sik, op.by),
    );
    Ok(())
}

fn reconcile(args: ReconcileArgs) -> Result<(), String> {
    let timeout = Duration::from_millis(args.call_timeout_ms.max(1));
    let rt = runtime()?;
    let passes = rt.block_on(async {
        let upstream = Arc::new(Upstream::spawn(&args.upstream, timeout).await?);
        let rail = McpRail {
            upstream: upstream.clone(),
            profile: rail_profile(),
        };
        let op = OperatorArgs {
            sik: String::new(),
            mandate: args.mandate.clone(),
            db: args.db.clone(),
            by: String::new(),
            json: args.json,
        };
        let mandate = load_mandate(&op.mandate)?;
        let db = op.db.clone().unwrap_or_else(|| default_db(&op.mandate));
        let ledger = open_existing(&db)?;
        let clock = Arc::new(crate::clock::RuntimeClock::of(&ledger)?);
        let mut config = EngineConfig::new(instance_id()?);
        config.call_timeout_ms = args.call_timeout_ms.max(1);
        config.lease_ttl_ms = config
            .lease_ttl_ms
            .max(config.call_timeout_ms + interlock_engine::executor::LEASE_MARGIN_MS);
        let engine = Engine::new(ledger, rail, clock, mandate, config)
            .map_err(|e| format!("cannot start the engine: {e}"))?;
        let passes = engine
            .reconcile_due_async()
            .await
            .map_err(|e| format!("reconcile failed: {e}"))?;
        if let Ok(upstream) = Arc::try_unwrap(upstream) {
            upstream.close().await;
        }
        Ok::<_, String>(passes)
    })?;
    rt.shutdown_timeout(Duration::from_secs(1));
    let said = |result: &interlock_engine::reconcile::PassResult| {
        use interlock_engine::reconcile::PassResult;
        match result {
            PassResult::Concluded(state) => (state.as_str(), "the pass ran"),
            PassResult::NotDue => ("NOT_DUE", "not due yet; nothing was read"),
            PassResult::Busy => ("BUSY", "another process holds this intent"),
        }
    };
    let rows: Vec<Value> = passes
        .iter()
        .map(|(key, result)| {
            let (result, meaning) = said(result);
            json!({"sik": key.sik, "result": result, "meaning": meaning})
        })
        .collect();
    print(args.json, &Value::Array(rows), || {
        let mut text = format!("{} intent(s) reconciled\n", passes.len());
        for (key, result) in &passes {
            let (result, meaning) = said(result);
            text.push_str(&format!("  {}  {result} ({meaning})\n", key.sik));
        }
        text.trim_end().to_owned()
    });
    Ok(())
}
