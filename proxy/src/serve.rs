//! `interlock serve`: on stdio for one agent, or on streamable HTTP (`--listen`) for the agents
//! of an agents file. Both start the same engine per agent in front of one upstream.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use interlock_engine::{Engine, EngineConfig, Ledger};
use interlock_spec::ids::AgentId;
use interlock_spec::mandate::Mandate;
use rmcp::ServiceExt;

use crate::cli::{
    ServeArgs, default_db, instance_id, load_active_mandate, rail_profile,
    refuse_live_unless_allowed, runtime,
};
use crate::http::{self, Fleet};
use crate::server::{Proxy, ProxyServer};
use crate::telemetry::{self, Telemetry, Transport};
use crate::upstream::{McpRail, Upstream};

/// How long in-flight answers get to flush when the server stops.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// The exit status after an I/O fault under the ledger (`EX_TEMPFAIL`): a supervisor (or the
/// agent's MCP client) starts Interlock again, and boot recovery settles what was in flight.
pub const EXIT_LEDGER_IO: i32 = 75;
/// How long the answer that reported the fault gets to reach the agent before the exit.
const RECOVERY_EXIT_DELAY: Duration = Duration::from_millis(300);

/// After a failed write or fsync under the ledger this process trusts neither SQLite's cache
/// nor the kernel's (a failed fsync may drop the dirty pages and report the next one clean), so
/// it stops: every further write is already refused (`Ledger::poisoned`), and the process exits
/// as a crash would, shortly, to restart into recovery rather than retry the fsync.
pub(crate) fn stop_for_recovery(why: &str) {
    STOPPING.call_once(|| {
        tracing::error!(
            exit_code = EXIT_LEDGER_IO,
            "the ledger's disk failed a write ({why}); stopping to restart into recovery"
        );
        std::thread::spawn(|| {
            std::thread::sleep(RECOVERY_EXIT_DELAY);
            std::process::exit(EXIT_LEDGER_IO);
        });
    });
}

/// Set once [`stop_for_recovery`] has run: `serve` then ends with [`EXIT_LEDGER_IO`] whichever
/// way it ends.
static STOPPING: std::sync::Once = std::sync::Once::new();

/// Runs `interlock serve` to its end.
pub(crate) fn serve(args: ServeArgs) -> Result<(), String> {
    refuse_live_unless_allowed(&args.upstream, args.allow_live, "start")?;
    let traces = telemetry::settings(args.otlp_endpoint.as_deref(), |name| {
        std::env::var(name).ok()
    })?;
    let provider = traces.as_ref().map(telemetry::exporting).transpose()?;
    if let Some(traces) = &traces {
        tracing::info!(url = %traces.traces_url, payloads = args.otel_record_payloads, "exporting traces (OTLP)");
    }
    let transport = match args.listen {
        None => Transport::Pipe,
        Some(_) => Transport::Tcp,
    };
    let spans = provider
        .as_ref()
        .map(|p| Telemetry::on(p, args.otel_record_payloads, transport))
        .unwrap_or_default();
    let rt = runtime()?;
    let served = match args.listen {
        None => rt.block_on(stdio(&args, spans)),
        Some(addr) => rt.block_on(listen(&args, addr, spans)),
    };
    // Calls still blocked in the engine must not hold the process open.
    rt.shutdown_timeout(SHUTDOWN_GRACE);
    // The last spans (this run's final calls) are sent before the process exits.
    if let Some(provider) = provider {
        telemetry::shutdown(provider);
    }
    if STOPPING.is_completed() {
        std::process::exit(EXIT_LEDGER_IO);
    }
    served
}

/// The engine settings `serve`'s flags give.
fn engine_config(args: &ServeArgs, instance: String) -> EngineConfig {
    let mut config = EngineConfig::new(instance);
    config.call_timeout_ms = args.call_timeout_ms.max(1);
    let floor = config.call_timeout_ms + interlock_engine::executor::LEASE_MARGIN_MS;
    config.lease_ttl_ms = args
        .lease_ttl_ms
        .unwrap_or_else(|| config.lease_ttl_ms.max(floor));
    config
}

fn approval_wait(args: &ServeArgs) -> Option<Duration> {
    (args.approval_wait_ms > 0).then(|| Duration::from_millis(args.approval_wait_ms))
}

fn call_timeout(args: &ServeArgs) -> Duration {
    Duration::from_millis(args.call_timeout_ms.max(1))
}

/// Opens the ledger at `db` for one engine; the audit chain is verified once, by the caller.
fn engine(
    args: &ServeArgs,
    db: &Path,
    upstream: &Arc<Upstream>,
    mandate: Mandate,
    instance: String,
) -> Result<Arc<Engine<McpRail>>, String> {
    let ledger = Ledger::open_target(&db.to_string_lossy())
        .map_err(|e| format!("cannot open the ledger: {e}"))?;
    let rail = McpRail {
        upstream: upstream.clone(),
        profile: rail_profile(),
    };
    let clock = Arc::new(crate::clock::RuntimeClock::of(&ledger)?);
    Engine::new(ledger, rail, clock, mandate, engine_config(args, instance))
        .map(Arc::new)
        .map_err(|e| format!("cannot start the engine: {e}"))
}

/// Opens the ledger once at start: refused on a filesystem that is read-only or full, and
/// when its audit chain does not verify.
fn verify_chain(db: &Path) -> Result<(), String> {
    let target = db.to_string_lossy();
    // A file's filesystem must take writes; a PostgreSQL server's settings are checked by open.
    if !interlock_engine::ledger::is_postgres_url(&target) {
        interlock_engine::ledger::writable_room(db)
            .map_err(|problem| format!("cannot serve on the ledger {}: {problem}", db.display()))?;
    }
    let ledger =
        Ledger::open_target(&target).map_err(|e| format!("cannot open the ledger: {e}"))?;
    let chain = ledger
        .verify_chain()
        .map_err(|e| format!("the ledger's audit chain does not verify: {e}"))?;
    tracing::info!(db = %db.display(), records = chain.records, "ledger open, chain verified");
    Ok(())
}

/// Boot recovery, then the reconciler on its schedule. Neither depends on a mandate: one engine
/// runs them for every intent in the ledger, whichever agent proposed it.
async fn recover_and_reconcile(engine: Arc<Engine<McpRail>>, every_ms: u64) -> Result<(), String> {
    let report = engine.recover_async().await.map_err(|e| {
        if e.disk_fault() == Some(interlock_engine::ledger::DiskFault::Io) {
            stop_for_recovery(&e.to_string());
        }
        format!("boot recovery failed: {e}")
    })?;
    tracing::info!(
        found = report.found,
        passes = report.passes,
        unsettled = report.unsettled,
        "boot recovery done"
    );
    let every = Duration::from_millis(every_ms.max(10));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            // The ledger's checkpoint thread poisons the file on an I/O error without a caller
            // to tell: an idle proxy stops here, not at the next agent's refund.
            if let Some(why) = engine.ledger().poisoned() {
                stop_for_recovery(&why);
                continue;
            }
            match engine.reconcile_due_async().await {
                Ok(passes) => {
                    for (key, result) in passes {
                        tracing::info!(sik = %key.sik, ?result, "reconcile pass");
                    }
                }
                Err(e) if e.disk_fault() == Some(interlock_engine::ledger::DiskFault::Io) => {
                    stop_for_recovery(&e.to_string());
                }
                Err(e) => tracing::warn!("reconcile failed: {e}"),
            }
        }
    });
    Ok(())
}

async fn upstream(args: &ServeArgs, spans: Telemetry) -> Result<Arc<Upstream>, String> {
    let upstream = Upstream::spawn(&args.upstream, call_timeout(args)).await?;
    let upstream = Arc::new(upstream.with_telemetry(spans));
    tracing::info!(server_id = %upstream.server_id, "upstream started");
    Ok(upstream)
}

/// One agent on stdin/stdout.
async fn stdio(args: &ServeArgs, spans: Telemetry) -> Result<(), String> {
    let (Some(mandate_path), Some(agent)) = (&args.mandate, &args.agent) else {
        return Err(
            "serve on stdio needs --mandate and --agent (or --listen and --agents for HTTP)"
                .to_owned(),
        );
    };
    let mandate = load_active_mandate(mandate_path)?;
    let agent_id = AgentId::parse(agent).map_err(|e| format!("--agent: {e}"))?;
    let db = args.db.clone().unwrap_or_else(|| default_db(mandate_path));
    let upstream = upstream(args, spans).await?;
    verify_chain(&db)?;
    let engine = engine(args, &db, &upstream, mandate, instance_id()?)?;
    recover_and_reconcile(engine.clone(), args.reconcile_every_ms).await?;
    let server = ProxyServer(Arc::new(Proxy {
        engine,
        upstream: upstream.clone(),
        agent_id,
        approval_wait: approval_wait(args),
    }));
    let (pipes, writer) = crate::frames::guard(tokio::io::stdin(), tokio::io::stdout());
    let running = match server.serve(pipes).await {
        Ok(running) => running,
        Err(e) => {
            tracing::info!("the client went away before initialize: {e}");
            return Ok(());
        }
    };
    upstream.forward_list_changed_to(running.peer().clone());
    tracing::info!("serving MCP on stdio");
    let reason = running
        .waiting()
        .await
        .map_err(|e| format!("the MCP session failed: {e}"))?;
    tracing::info!(?reason, "stopped serving");
    // The last answers are flushed before the process exits.
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, writer).await;
    Ok(())
}

/// Every agent of the agents file on streamable HTTP at `addr`.
async fn listen(args: &ServeArgs, addr: SocketAddr, spans: Telemetry) -> Result<(), String> {
    let Some(agents_path) = &args.agents else {
        return Err(
            "--listen needs --agents FILE (the agents, their mandates and token hashes)".to_owned(),
        );
    };
    if !http::is_loopback(&addr) && !args.allow_remote {
        return Err(format!(
            "--listen {addr} is not a loopback address: agents elsewhere could reach it; pass --allow-remote and put a TLS-terminating reverse proxy in front"
        ));
    }
    let specs = http::read_agents(agents_path)?;
    let mandates = specs
        .iter()
        .map(|spec| load_active_mandate(&spec.mandate))
        .collect::<Result<Vec<_>, _>>()?;
    // Without --db, one ledger next to the agents file, shared by every agent in it.
    let db = args.db.clone().unwrap_or_else(|| default_db(agents_path));
    let upstream = upstream(args, spans).await?;
    verify_chain(&db)?;
    let base = instance_id()?;
    let mut servers = Vec::with_capacity(specs.len());
    for (spec, mandate) in specs.iter().zip(mandates) {
        let instance = format!("{base}-{}", spec.id);
        let engine = engine(args, &db, &upstream, mandate, instance)?;
        servers.push(ProxyServer(Arc::new(Proxy {
            engine,
            upstream: upstream.clone(),
            agent_id: spec.id.clone(),
            approval_wait: approval_wait(args),
        })));
    }
    let first = servers[0].0.engine.clone();
    recover_and_reconcile(first, args.reconcile_every_ms).await?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let bound = listener
        .local_addr()
        .map_err(|e| format!("cannot read the bound address: {e}"))?;
    if !http::is_loopback(&bound) {
        tracing::warn!(%bound, "serving on a non-loopback address (--allow-remote): terminate TLS in front of it");
    }
    tracing::info!(
        url = %format!("http://{bound}{}", http::MCP_PATH),
        agents = specs.len(),
        "serving MCP on streamable HTTP"
    );
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(stop_on_signal(stop.clone()));
    http::serve(
        listener,
        Fleet::new(servers, upstream),
        &specs,
        args.allowed_host.clone(),
        stop,
    )
    .await?;
    tracing::info!("stopped serving");
    Ok(())
}

/// Cancels `stop` on SIGINT or SIGTERM, so open sessions end and the listener closes.
async fn stop_on_signal(stop: tokio_util::sync::CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("stopping on a signal");
    stop.cancel();
}
