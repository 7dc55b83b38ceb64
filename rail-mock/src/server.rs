//! The MCP server: dispatches tool calls, counts them, applies the fault profiles, and runs the
//! journal's work off the async threads.

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer, ServerInitializeError};
use rmcp::{ErrorData as McpError, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;

use crate::error::RailError;
use crate::faults::{ApplyFault, CallClass, CallFaults, FaultPlan};
use crate::journal::{Journal, now_ms};
use crate::model::{FeeRates, ListOrder, ListQuery, collection};
use crate::tools::{self, Args, ToolName, list_params, tool_list};

/// How long the timeout faults keep a call unanswered, unless stdin closes first.
pub const HANG_BOUND: Duration = Duration::from_secs(3_600);
/// The exit code of the `conn_reset` fault.
pub const EXIT_CONN_RESET: i32 = 3;
/// The server's name in `initialize`.
pub const SERVER_NAME: &str = "interlock-rail-mock";

/// What the rail is configured with besides its journal.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RailConfig {
    /// Fee and tax rates.
    pub rates: FeeRates,
    /// Fault profiles.
    pub faults: FaultPlan,
}

struct Inner {
    journal: Mutex<Journal>,
    config: RailConfig,
    tools: Vec<Tool>,
    stdin_closed: watch::Receiver<bool>,
}

/// The rail as an rmcp [`ServerHandler`].
#[derive(Clone)]
pub struct RailServer {
    inner: Arc<Inner>,
}

impl RailServer {
    /// A server on `journal`; `stdin_closed` turns true when the client has gone.
    pub fn new(journal: Journal, config: RailConfig, stdin_closed: watch::Receiver<bool>) -> Self {
        RailServer {
            inner: Arc::new(Inner {
                journal: Mutex::new(journal),
                config,
                tools: tool_list(),
                stdin_closed,
            }),
        }
    }

    async fn with_journal<T, F>(&self, f: F) -> Result<T, RailError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Journal) -> Result<T, RailError> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || {
            let mut journal = inner.journal.lock().unwrap_or_else(PoisonError::into_inner);
            f(&mut journal)
        })
        .await
        .unwrap_or_else(|e| {
            tracing::error!("journal task failed: {e}");
            Err(RailError::server())
        })
    }

    /// Never answer: wait out [`HANG_BOUND`] or the client's departure, whichever comes first.
    async fn hang(&self) -> RailError {
        let mut closed = self.inner.stdin_closed.clone();
        tokio::select! {
            () = tokio::time::sleep(HANG_BOUND) => {
                tracing::warn!("hang bound elapsed; answering GATEWAY_ERROR");
            }
            _ = closed.wait_for(|c| *c) => {
                tracing::info!("stdin closed while hanging");
            }
        }
        RailError::gateway()
    }

    async fn run(
        &self,
        tool: ToolName,
        args: Option<rmcp::model::JsonObject>,
    ) -> Result<Value, RailError> {
        let class = tool.class();
        let n = self.with_journal(move |j| j.next_call(class)).await?;
        let faults = self.inner.config.faults.for_call(class, n);
        tracing::info!(tool = tool.as_str(), ?class, call = n, ?faults, "call");
        if let Some(ms) = faults.slow_ms {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        match class {
            CallClass::Money => self.money(tool, args, faults.apply).await,
            CallClass::List => {
                if faults.partition {
                    return Err(RailError::gateway());
                }
                self.list(tool, args, faults).await
            }
            CallClass::Read => {
                let partitioned = faults.partition
                    && matches!(
                        tool,
                        ToolName::FetchRefund | ToolName::FetchInstantSettlementWithId
                    );
                if partitioned {
                    return Err(RailError::gateway());
                }
                self.read(tool, args).await
            }
        }
    }

    async fn money(
        &self,
        tool: ToolName,
        args: Option<rmcp::model::JsonObject>,
        fault: Option<ApplyFault>,
    ) -> Result<Value, RailError> {
        match fault {
            Some(ApplyFault::TimeoutBeforeApply) => return Err(self.hang().await),
            Some(ApplyFault::Http5xxNotApplied) => return Err(RailError::server()),
            _ => {}
        }
        let rates = self.inner.config.rates;
        let (value, earlier) = match tool {
            ToolName::CreateRefund => {
                let mut req = tools::refund_request(Args::new(args.as_ref()))?;
                req.amount = fault.map_or(req.amount, |f| f.moved(req.amount));
                self.with_journal(move |j| {
                    let refund = j.create_refund(&req, &rates)?;
                    tracing::info!(id = refund.id, amount = refund.amount, "refund committed");
                    let earlier = if fault == Some(ApplyFault::DupResponse) {
                        j.refund_before(&refund.id)?.map(|r| r.to_json())
                    } else {
                        None
                    };
                    Ok((refund.to_json(), earlier))
                })
                .await?
            }
            _ => {
                let mut req = tools::settlement_request(Args::new(args.as_ref()))?;
                req.amount = fault.map_or(req.amount, |f| f.moved(req.amount));
                self.with_journal(move |j| {
                    let s = j.create_settlement(&req, &rates)?;
                    tracing::info!(
                        id = s.id,
                        amount = s.amount_requested,
                        "settlement committed"
                    );
                    let earlier = if fault == Some(ApplyFault::DupResponse) {
                        j.settlement_before(&s.id)?.map(|s| s.to_json())
                    } else {
                        None
                    };
                    Ok((s.to_json(), earlier))
                })
                .await?
            }
        };
        match fault {
            Some(ApplyFault::TimeoutAfterApply | ApplyFault::ShortApplyTimeout) => {
                Err(self.hang().await)
            }
            Some(ApplyFault::Http5xxApplied) => Err(RailError::server()),
            Some(ApplyFault::ConnReset) => {
                tracing::warn!("conn_reset: exiting after the commit, without answering");
                std::process::exit(EXIT_CONN_RESET);
            }
            Some(ApplyFault::DupResponse) => earlier.ok_or_else(RailError::server),
            _ => Ok(value),
        }
    }

    async fn list(
        &self,
        tool: ToolName,
        args: Option<rmcp::model::JsonObject>,
        faults: CallFaults,
    ) -> Result<Value, RailError> {
        let a = Args::new(args.as_ref());
        let payment_id = if tool == ToolName::FetchMultipleRefundsForPayment {
            Some(a.required_str("payment_id")?)
        } else {
            None
        };
        let p = list_params(a)?;
        let query = ListQuery {
            payment_id,
            from: p.from,
            to: p.to,
            count: faults.page_size.map_or(p.count, |cap| p.count.min(cap)),
            skip: p.skip,
            visible_until_ms: faults
                .read_lag_ms
                .map(|lag| now_ms().saturating_sub(i64::try_from(lag).unwrap_or(i64::MAX))),
            order: if faults.oldest_first {
                ListOrder::OldestFirst
            } else {
                ListOrder::NewestFirst
            },
        };
        self.with_journal(move |j| {
            let items: Vec<Value> = match tool {
                ToolName::FetchAllInstantSettlements => j
                    .list_settlements(&query)?
                    .iter()
                    .map(|s| s.to_json())
                    .collect(),
                _ => {
                    if let Some(id) = &query.payment_id
                        && j.payment(id)?.is_none()
                    {
                        return Err(RailError::no_such_id());
                    }
                    j.list_refunds(&query)?
                        .iter()
                        .map(|r| r.to_json())
                        .collect()
                }
            };
            Ok(collection(items))
        })
        .await
    }

    async fn read(
        &self,
        tool: ToolName,
        args: Option<rmcp::model::JsonObject>,
    ) -> Result<Value, RailError> {
        let a = Args::new(args.as_ref());
        let id = match tool {
            ToolName::FetchPayment => a.required_str("payment_id")?,
            ToolName::FetchOrder => a.required_str("order_id")?,
            ToolName::FetchRefund => a.required_str("refund_id")?,
            ToolName::FetchInstantSettlementWithId => a.required_str("settlement_id")?,
            _ => String::new(),
        };
        self.with_journal(move |j| {
            let found = match tool {
                ToolName::FetchPayment => j.payment(&id)?.map(|p| p.to_json()),
                ToolName::FetchOrder => j.order(&id)?.map(|o| o.to_json()),
                ToolName::FetchRefund => j.refund(&id)?.map(|r| r.to_json()),
                ToolName::FetchInstantSettlementWithId => j.settlement(&id)?.map(|s| s.to_json()),
                _ => {
                    let (balance, currency) = j.balance()?;
                    Some(json!({"entity": "balance", "balance": balance, "currency": currency}))
                }
            };
            found.ok_or_else(RailError::no_such_id)
        })
        .await
    }
}

impl ServerHandler for RailServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(SERVER_NAME, env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "A mock Razorpay rail for tests and demos. Amounts are integers in paise.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.inner.tools.clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let Some(tool) = ToolName::parse(&request.name) else {
            return Err(McpError::invalid_params(
                format!("unknown tool: {}", request.name),
                None,
            ));
        };
        // The call runs in its own task: once the rail has received a call it works it to the
        // end, even if the client cancels or gives up waiting (as a real rail would). rmcp 3.11
        // only signals the request's token on `notifications/cancelled`, which we ignore; the
        // task keeps that promise from depending on how rmcp treats handler futures.
        let this = self.clone();
        let args = request.arguments;
        let outcome = tokio::spawn(async move { this.run(tool, args).await })
            .await
            .unwrap_or_else(|e| {
                tracing::error!("call task failed: {e}");
                Err(RailError::server())
            });
        let result = match outcome {
            Ok(value) => CallToolResult::success(vec![ContentBlock::text(value.to_string())]),
            Err(e) => {
                tracing::info!(tool = tool.as_str(), "answering isError: {e}");
                CallToolResult::error(vec![ContentBlock::text(e.text(tool.what()))])
            }
        };
        Ok(result.into())
    }
}

/// Stdin that reports its end: the server's hanging calls stop waiting once the client is gone.
struct EofSignal<R> {
    inner: R,
    closed: watch::Sender<bool>,
}

impl<R: AsyncRead + Unpin> AsyncRead for EofSignal<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
        let ended = match &poll {
            Poll::Ready(Ok(())) => buf.filled().len() == before,
            Poll::Ready(Err(_)) => true,
            Poll::Pending => false,
        };
        if ended {
            self.closed.send_replace(true);
        }
        poll
    }
}

/// Stdout that takes a client's hang-up as the normal end it is: once a write finds the pipe
/// closed (`EPIPE`), that is logged at debug and every later write is accepted and dropped, so
/// rmcp, answering a call that was hanging when the client left, does not log a send failure.
struct HangUpTolerant<W> {
    inner: W,
    gone: bool,
}

impl<W> HangUpTolerant<W> {
    /// `poll`, with a closed pipe turned into `done`: the client has gone.
    fn absorb<T>(&mut self, poll: Poll<std::io::Result<T>>, done: T) -> Poll<std::io::Result<T>> {
        match poll {
            Poll::Ready(Err(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                tracing::debug!("the client closed its end; answers still in flight are dropped");
                self.gone = true;
                Poll::Ready(Ok(done))
            }
            other => other,
        }
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for HangUpTolerant<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if self.gone {
            return Poll::Ready(Ok(buf.len()));
        }
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.absorb(poll, buf.len())
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if self.gone {
            return Poll::Ready(Ok(()));
        }
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        self.absorb(poll, ())
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if self.gone {
            return Poll::Ready(Ok(()));
        }
        let poll = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.absorb(poll, ())
    }
}

#[cfg(test)]
mod hang_up_tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn writes_after_the_client_hung_up_are_dropped_not_failed() {
        let (ours, theirs) = tokio::io::duplex(64);
        drop(theirs);
        let mut out = HangUpTolerant {
            inner: ours,
            gone: false,
        };
        for _ in 0..3 {
            out.write_all(b"{}\n").await.expect("accepted");
            out.flush().await.expect("accepted");
        }
        assert!(out.gone);
        out.shutdown().await.expect("accepted");
    }
}

/// Why serving stopped abnormally.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The MCP handshake failed.
    #[error("MCP initialize failed: {0}")]
    Initialize(String),
    /// The service task failed.
    #[error("MCP service failed: {0}")]
    Service(String),
}

/// Serve MCP on stdin/stdout until stdin closes. stdout carries only JSON-RPC.
pub async fn serve_stdio(journal: Journal, config: RailConfig) -> Result<(), ServeError> {
    let (closed_tx, closed_rx) = watch::channel(false);
    // Non-blocking pipes when stdin/stdout are FIFOs (as an MCP client launches us): no
    // blocking-pool hand-off per message. Falls back to tokio's blocking stdio otherwise.
    let (reader, writer) = rmcp::transport::io::stdio_pipes();
    let stdin = EofSignal {
        inner: reader,
        closed: closed_tx,
    };
    let writer = HangUpTolerant {
        inner: writer,
        gone: false,
    };
    let server = RailServer::new(journal, config, closed_rx);
    let running = match server.serve((stdin, writer)).await {
        Ok(running) => running,
        Err(ServerInitializeError::ConnectionClosed(why)) => {
            tracing::info!("stdin closed before initialize ({why})");
            return Ok(());
        }
        Err(e) => return Err(ServeError::Initialize(e.to_string())),
    };
    let reason = running
        .waiting()
        .await
        .map_err(|e| ServeError::Service(e.to_string()))?;
    tracing::info!(?reason, "stopped serving");
    Ok(())
}
