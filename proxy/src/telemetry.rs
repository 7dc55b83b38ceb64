//! OpenTelemetry traces, off unless asked for (`--otlp-endpoint`, or the standard `OTEL_*`
//! variables): a SERVER span per agent request, a CLIENT span per upstream request, W3C trace
//! context in and out through MCP's `params._meta` (SEP-414), and Interlock's decision as
//! `interlock.*` attributes. Names follow the MCP semantic conventions (`tools/call <tool>`,
//! `mcp.method.name`, `gen_ai.tool.name`, …).
//!
//! Nothing here decides anything: spans are written from what the proxy already knows, after
//! it knows it. Argument values and results are recorded only with `--otel-record-payloads`.
//! Off, every function is a no-op and no `_meta` is read or written.

use std::sync::Arc;
use std::time::Duration;

use interlock_engine::Answer;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer, TracerProvider};
use opentelemetry::{Array, Context, KeyValue, StringValue, Value};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracer};
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanExporter};
use rmcp::model::{CallToolResult, MetaObject, RequestMetaObject};

/// Spans waiting to be exported; past it new spans are dropped (the SDK counts them), never
/// the proxy's memory grown or a call slowed.
pub const SPAN_QUEUE_MAX: usize = 2048;
/// How long one export may take before it is abandoned.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest argument or result text recorded with `--otel-record-payloads`; longer ones are
/// cut at a character boundary and end with `…`.
pub const PAYLOAD_ATTRIBUTE_BYTES_MAX: usize = 4096;
/// The longest JSON-RPC id recorded (an id is the agent's to choose, and a frame may be 4 MiB).
pub const REQUEST_ID_BYTES_MAX: usize = 128;
/// The OTLP/HTTP path of traces, appended to a base endpoint.
const TRACES_PATH: &str = "/v1/traces";

/// How the agent reaches the proxy, as `network.transport` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// stdio.
    Pipe,
    /// Streamable HTTP.
    Tcp,
}

/// Why the proxy sends a request upstream (`interlock.upstream.purpose`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// `tools/list`: what the agent is shown, and G6's live definitions.
    Listing,
    /// A granted read the agent asked for, forwarded as is.
    Forward,
    /// The referent G2 judges against (the payment, the balance).
    ReferentRead,
    /// The money call itself.
    RailCall,
    /// A page of the rail's collection, read to settle an ambiguous intent.
    ReconcilePage,
}

impl Purpose {
    fn as_str(self) -> &'static str {
        match self {
            Purpose::Listing => "listing",
            Purpose::Forward => "forward",
            Purpose::ReferentRead => "referent_read",
            Purpose::RailCall => "rail_call",
            Purpose::ReconcilePage => "reconcile_page",
        }
    }
}

/// The proxy's tracer, or nothing (the default). Cheap to clone.
#[derive(Clone, Default)]
pub struct Telemetry(Option<Arc<On>>);

struct On {
    tracer: SdkTracer,
    record_payloads: bool,
    transport: Transport,
}

/// Where spans go, from the flag and the environment; `None`: tracing is off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The OTLP/HTTP traces URL (`…/v1/traces`).
    pub traces_url: String,
}

/// Reads the settings: `--otlp-endpoint` (a base URL, as `OTEL_EXPORTER_OTLP_ENDPOINT`) wins;
/// otherwise `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as is) or `OTEL_EXPORTER_OTLP_ENDPOINT`,
/// unless `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`. Anything this build cannot
/// honour (https, gRPC, JSON, another exporter) is an error, not a silent fallback.
pub fn settings(
    flag: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<Settings>, String> {
    let set = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    let (origin, url) = match flag {
        Some(base) => ("--otlp-endpoint", traces_url("--otlp-endpoint", base)?),
        None => {
            if set("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
                return Ok(None);
            }
            let exporter = set("OTEL_TRACES_EXPORTER").map(|v| v.trim().to_ascii_lowercase());
            match exporter.as_deref() {
                None | Some("otlp") => {}
                Some("none") => return Ok(None),
                Some(other) => {
                    return Err(format!(
                        "OTEL_TRACES_EXPORTER={other}: Interlock exports traces with OTLP only (otlp, or none)"
                    ));
                }
            }
            if let Some(url) = set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", url)
            } else if let Some(base) = set("OTEL_EXPORTER_OTLP_ENDPOINT") {
                let origin = "OTEL_EXPORTER_OTLP_ENDPOINT";
                (origin, traces_url(origin, &base)?)
            } else {
                return Ok(None);
            }
        }
    };
    // The per-signal variable wins over the general one, as the exporter reads them.
    let protocol = [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ]
    .into_iter()
    .find_map(|name| set(name).map(|value| (name, value)));
    if let Some((name, protocol)) = protocol
        && !protocol.trim().eq_ignore_ascii_case("http/protobuf")
    {
        return Err(format!(
            "{name}={protocol}: Interlock exports OTLP over http/protobuf only"
        ));
    }
    check_url(origin, &url)?;
    Ok(Some(Settings { traces_url: url }))
}

/// A base endpoint's traces URL (`http://collector:4318` → `http://collector:4318/v1/traces`).
fn traces_url(origin: &str, base: &str) -> Result<String, String> {
    let base = base.trim();
    check_url(origin, base)?;
    let base = base.trim_end_matches('/');
    Ok(if base.ends_with(TRACES_PATH) {
        base.to_owned()
    } else {
        format!("{base}{TRACES_PATH}")
    })
}

fn check_url(origin: &str, url: &str) -> Result<(), String> {
    let Some(rest) = url.strip_prefix("http://") else {
        return Err(if url.starts_with("https://") {
            format!(
                "{origin}: {url:?} is https; Interlock sends OTLP over plain HTTP to a collector beside it (an OpenTelemetry Collector forwards over TLS)"
            )
        } else {
            format!("{origin}: {url:?} is not an http:// URL")
        });
    };
    if rest.contains(['?', '#']) {
        return Err(format!(
            "{origin}: {url:?} has a query or fragment; give the collector's address and path only"
        ));
    }
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.is_empty() || authority.contains('@') {
        return Err(format!(
            "{origin}: {url:?} has no host (or carries credentials)"
        ));
    }
    url.parse::<axum::http::Uri>()
        .map(drop)
        .map_err(|e| format!("{origin}: {url:?} is not a URL: {e}"))
}

/// The exporting provider: keep it while serving, [`shutdown`] it at the end so the last spans
/// are sent.
pub fn exporting(settings: &Settings) -> Result<SdkTracerProvider, String> {
    use opentelemetry_otlp::WithExportConfig;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(settings.traces_url.clone())
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|e| format!("cannot start the OTLP exporter: {e}"))?;
    Ok(provider(exporter))
}

/// A provider batching into `exporter` (the in-memory one in tests).
pub fn provider(exporter: impl SpanExporter + 'static) -> SdkTracerProvider {
    let batch = BatchConfigBuilder::default()
        .with_max_queue_size(SPAN_QUEUE_MAX)
        .build();
    let processor = BatchSpanProcessor::builder(exporter)
        .with_batch_config(batch)
        .build();
    let mut resource = opentelemetry_sdk::Resource::builder()
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    // OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES' service.name, when set, names the service
    // (the SDK reads both); otherwise "interlock".
    let named = std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|attributes| {
        attributes
            .split(',')
            .any(|kv| kv.trim().starts_with("service.name="))
    });
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() && !named {
        resource = resource.with_service_name("interlock");
    }
    let mut builder = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource.build());
    // Every money decision is traced unless the operator samples (OTEL_TRACES_SAMPLER, which
    // the SDK reads): an agent's `traceparent` with its sampled flag off must not hide a call.
    if std::env::var_os("OTEL_TRACES_SAMPLER").is_none() {
        builder = builder.with_sampler(opentelemetry_sdk::trace::Sampler::AlwaysOn);
    }
    builder.build()
}

/// Sends what is queued and stops the exporter; run off the async threads (it blocks).
pub fn shutdown(provider: SdkTracerProvider) {
    if let Err(e) = provider.shutdown_with_timeout(EXPORT_TIMEOUT) {
        tracing::warn!("OpenTelemetry: the last spans were not all exported: {e}");
    }
}

impl Telemetry {
    /// Tracing on, through `provider`.
    pub fn on(provider: &SdkTracerProvider, record_payloads: bool, transport: Transport) -> Self {
        Telemetry(Some(Arc::new(On {
            tracer: provider.tracer("interlock"),
            record_payloads,
            transport,
        })))
    }

    /// Whether spans are written.
    pub fn is_on(&self) -> bool {
        self.0.is_some()
    }

    /// The SERVER span of one agent request (`tools/call <tool>`, `tools/list`), a child of the
    /// trace context in the request's `_meta` if it has one. Returns the context to run the
    /// request in (`Context::current()` when off).
    pub fn server_span(&self, request: Request<'_>) -> Context {
        let Some(on) = &self.0 else {
            return Context::current();
        };
        let parent = TraceContextPropagator::new().extract(&MetaFields(request.meta));
        let mut attributes = vec![
            KeyValue::new("mcp.method.name", request.method.to_owned()),
            KeyValue::new(
                "jsonrpc.request.id",
                bounded_to(request.id, REQUEST_ID_BYTES_MAX),
            ),
            KeyValue::new("network.transport", on.transport_name()),
        ];
        if on.transport == Transport::Tcp {
            attributes.push(KeyValue::new("network.protocol.name", "http"));
        }
        if let Some(tool) = request.tool {
            attributes.push(KeyValue::new("gen_ai.tool.name", tool.to_owned()));
            attributes.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
        }
        if let Some(version) = request.protocol_version {
            attributes.push(KeyValue::new("mcp.protocol.version", version));
        }
        if let Some(session) = request.session_id {
            attributes.push(KeyValue::new("mcp.session.id", session));
        }
        if let (true, Some(arguments)) = (on.record_payloads, request.arguments) {
            attributes.push(KeyValue::new(
                "gen_ai.tool.call.arguments",
                bounded(serde_json::to_string(arguments).unwrap_or_default()),
            ));
        }
        let span = on
            .tracer
            .span_builder(span_name(request.method, request.tool))
            .with_kind(SpanKind::Server)
            .with_attributes(attributes)
            .start_with_context(&on.tracer, &parent);
        parent.with_span(span)
    }

    /// Ends a request's SERVER span with what it answered: the `interlock` block's decision, or
    /// `error.type` (the JSON-RPC code, or `tool_error` for a result with `isError`). A request
    /// that answers no tool result (`tools/list`) passes `Ok(None)`.
    pub fn end_server_span(
        &self,
        cx: &Context,
        result: Result<Option<&CallToolResult>, &rmcp::ErrorData>,
    ) {
        let Some(on) = &self.0 else {
            return;
        };
        let span = cx.span();
        match result {
            Err(e) => {
                span.set_attribute(KeyValue::new("error.type", e.code.0.to_string()));
                span.set_attribute(KeyValue::new(
                    "rpc.response.status_code",
                    e.code.0.to_string(),
                ));
                span.set_status(Status::error(e.message.to_string()));
            }
            Ok(None) => {}
            Ok(Some(result)) => {
                let decision = crate::server::Decision::of(result);
                span.set_attribute(KeyValue::new("interlock.verdict", decision.verdict.clone()));
                for (key, value) in [
                    ("interlock.reason_code", &decision.reason),
                    ("interlock.sik", &decision.sik),
                    ("interlock.rail_entity_id", &decision.entity),
                ] {
                    if let Some(value) = value {
                        span.set_attribute(KeyValue::new(key, value.clone()));
                    }
                }
                if !decision.gates.is_empty() {
                    span.set_attribute(KeyValue::new("interlock.gates", strings(&decision.gates)));
                }
                // The conventions record a result only when the tool ran; a refusal's words are
                // in the reason code.
                if on.record_payloads && result.is_error != Some(true) {
                    span.set_attribute(KeyValue::new(
                        "gen_ai.tool.call.result",
                        bounded(crate::upstream::text_of(result)),
                    ));
                }
                if result.is_error == Some(true) {
                    span.set_attribute(KeyValue::new("error.type", "tool_error"));
                    let why = decision.reason.unwrap_or_else(|| decision.verdict.clone());
                    span.set_status(Status::error(why));
                }
            }
        }
        span.end();
    }

    /// A CLIENT span for one request to the upstream, a child of the current context (the
    /// agent's request, or none for the reconciler's own passes).
    pub fn client_span(&self, method: &str, tool: Option<&str>, purpose: Purpose) -> ClientSpan {
        let Some(on) = &self.0 else {
            return ClientSpan(None);
        };
        let mut attributes = vec![
            KeyValue::new("mcp.method.name", method.to_owned()),
            // The upstream is a child process on a pipe.
            KeyValue::new("network.transport", "pipe"),
            KeyValue::new("interlock.upstream.purpose", purpose.as_str()),
        ];
        if let Some(tool) = tool {
            attributes.push(KeyValue::new("gen_ai.tool.name", tool.to_owned()));
            attributes.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
        }
        let parent = Context::current();
        let span = on
            .tracer
            .span_builder(span_name(method, tool))
            .with_kind(SpanKind::Client)
            .with_attributes(attributes)
            .start_with_context(&on.tracer, &parent);
        ClientSpan(Some(parent.with_span(span)))
    }
}

/// Records the intent's state and whether the answer replays an earlier one on the current
/// request's span (the `interlock` block the agent sees does not carry the state).
pub fn record_answer(answer: &Answer) {
    let cx = Context::current();
    let span = cx.span();
    if !span.span_context().is_valid() {
        return;
    }
    if let Some(state) = answer.state {
        span.set_attribute(KeyValue::new("interlock.state", state.as_str()));
    }
    if answer.idempotent_replay {
        span.set_attribute(KeyValue::new("interlock.idempotent_replay", true));
    }
}

impl On {
    fn transport_name(&self) -> &'static str {
        match self.transport {
            Transport::Pipe => "pipe",
            Transport::Tcp => "tcp",
        }
    }
}

/// What the SERVER span is told of a request.
pub struct Request<'a> {
    /// `tools/call`, `tools/list`.
    pub method: &'a str,
    /// The tool of a `tools/call`.
    pub tool: Option<&'a str>,
    /// The JSON-RPC id, as text.
    pub id: String,
    /// The request's `_meta` (where `traceparent` travels).
    pub meta: &'a MetaObject,
    /// The MCP version the client negotiated.
    pub protocol_version: Option<String>,
    /// `Mcp-Session-Id` on streamable HTTP.
    pub session_id: Option<String>,
    /// The call's arguments (recorded only with `--otel-record-payloads`).
    pub arguments: Option<&'a serde_json::Map<String, serde_json::Value>>,
}

/// An upstream request's span (nothing when tracing is off). One dropped before [`end`]
/// (its caller stopped waiting: the driver's deadline on a money call) ends as `abandoned`, so
/// an ambiguous rail call never looks like a clean one.
///
/// [`end`]: ClientSpan::end
pub struct ClientSpan(Option<Context>);

impl Drop for ClientSpan {
    fn drop(&mut self) {
        if let Some(cx) = self.0.take() {
            finish(&cx, Some("abandoned"));
        }
    }
}

fn finish(cx: &Context, error_type: Option<&str>) {
    let span = cx.span();
    if let Some(error_type) = error_type {
        span.set_attribute(KeyValue::new("error.type", error_type.to_owned()));
        span.set_status(Status::error(error_type.to_owned()));
    }
    span.end();
}

impl ClientSpan {
    /// The `_meta` to send with the request: this span's `traceparent` (and `tracestate`).
    pub fn meta(&self) -> Option<RequestMetaObject> {
        let cx = self.0.as_ref()?;
        let mut meta = RequestMetaObject::new();
        TraceContextPropagator::new().inject_context(cx, &mut MetaFieldsMut(&mut meta));
        Some(meta)
    }

    /// Ends the span; `error_type` names a failure (`timeout`, `tool_error`, …).
    pub fn end(mut self, error_type: Option<&str>) {
        if let Some(cx) = self.0.take() {
            finish(&cx, error_type);
        }
    }

    /// Adds the intent's key to a rail call's span.
    pub fn set_sik(&self, sik: &str) {
        if let Some(cx) = &self.0 {
            cx.span()
                .set_attribute(KeyValue::new("interlock.sik", sik.to_owned()));
        }
    }
}

fn span_name(method: &str, tool: Option<&str>) -> String {
    match tool {
        Some(tool) => format!("{method} {tool}"),
        None => method.to_owned(),
    }
}

fn strings(values: &[String]) -> Value {
    Value::Array(Array::String(
        values.iter().cloned().map(StringValue::from).collect(),
    ))
}

/// `text`, cut to [`PAYLOAD_ATTRIBUTE_BYTES_MAX`] at a character boundary.
fn bounded(text: String) -> String {
    bounded_to(text, PAYLOAD_ATTRIBUTE_BYTES_MAX)
}

/// `text`, cut to `max` bytes at a character boundary, ending with `…` when cut.
fn bounded_to(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

struct MetaFields<'a>(&'a MetaObject);

impl Extractor for MetaFields<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(serde_json::Value::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

struct MetaFieldsMut<'a>(&'a mut RequestMetaObject);

impl Injector for MetaFieldsMut<'_> {
    fn set(&mut self, key: &str, value: String) {
        // An empty `tracestate` says nothing; it is left out rather than sent.
        if !value.is_empty() {
            self.0
                .insert(key.to_owned(), serde_json::Value::String(value));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    fn url(flag: Option<&str>, vars: &[(&str, &str)]) -> Result<Option<String>, String> {
        settings(flag, env(vars)).map(|s| s.map(|s| s.traces_url))
    }

    #[test]
    fn off_unless_an_endpoint_is_given() {
        assert_eq!(url(None, &[]), Ok(None));
        assert_eq!(url(None, &[("OTEL_SERVICE_NAME", "x")]), Ok(None));
        assert_eq!(url(None, &[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")]), Ok(None));
    }

    #[test]
    fn the_flag_and_the_standard_variables() {
        let traces = Some("http://c:4318/v1/traces".to_owned());
        assert_eq!(url(Some("http://c:4318"), &[]), Ok(traces.clone()));
        assert_eq!(url(Some("http://c:4318/"), &[]), Ok(traces.clone()));
        assert_eq!(
            url(Some("http://c:4318/v1/traces"), &[]),
            Ok(traces.clone())
        );
        assert_eq!(
            url(None, &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")]),
            Ok(traces.clone())
        );
        // The per-signal variable is the whole URL, used as is, and wins over the base.
        assert_eq!(
            url(
                None,
                &[
                    ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:1/x"),
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                ]
            ),
            Ok(Some("http://t:1/x".to_owned()))
        );
        // The flag is explicit: it wins over the environment, even a disabled SDK.
        assert_eq!(
            url(
                Some("http://c:4318"),
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://other:1"),
                    ("OTEL_SDK_DISABLED", "true")
                ]
            ),
            Ok(traces)
        );
    }

    #[test]
    fn disabled_by_the_standard_switches() {
        let base = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318");
        assert_eq!(url(None, &[base, ("OTEL_SDK_DISABLED", "TRUE")]), Ok(None));
        assert_eq!(
            url(None, &[base, ("OTEL_TRACES_EXPORTER", "none")]),
            Ok(None)
        );
        assert!(
            url(None, &[base, ("OTEL_SDK_DISABLED", "false")])
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn what_this_build_cannot_honour_is_an_error() {
        let base = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318");
        for (vars, words) in [
            (vec![base, ("OTEL_TRACES_EXPORTER", "zipkin")], "OTLP only"),
            (
                vec![base, ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")],
                "http/protobuf",
            ),
            (
                vec![base, ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json")],
                "http/protobuf",
            ),
            (
                vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4318")],
                "https",
            ),
            (
                vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "c:4318")],
                "not an http:// URL",
            ),
            (vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "http://")], "no host"),
            (
                vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "http://u:p@c:1")],
                "credentials",
            ),
        ] {
            let err = url(None, &vars).unwrap_err();
            assert!(err.contains(words), "{vars:?}: {err}");
        }
        // The per-signal protocol wins: http/protobuf for traces is fine whatever else says.
        let traces = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "HTTP/Protobuf");
        let general = ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc");
        assert!(url(None, &[base, traces, general]).unwrap().is_some());
        let err = url(Some("https://c"), &[]).unwrap_err();
        assert!(err.starts_with("--otlp-endpoint"), "{err}");
    }

    #[test]
    fn payloads_are_cut_at_a_character_boundary() {
        assert_eq!(bounded("short".to_owned()), "short");
        let long = "₹".repeat(PAYLOAD_ATTRIBUTE_BYTES_MAX);
        let cut = bounded(long);
        // Cut at the last whole `₹` (3 bytes) at or before the bound, then the ellipsis.
        let whole = PAYLOAD_ATTRIBUTE_BYTES_MAX / 3 * 3;
        assert_eq!(cut.len(), whole + '…'.len_utf8());
        assert!(cut.ends_with('…'));
        assert_eq!(bounded_to("abcdef".to_owned(), 3), "abc…");
    }

    #[test]
    fn off_reads_and_writes_nothing() {
        let off = Telemetry::default();
        assert!(!off.is_on());
        let span = off.client_span("tools/call", Some("create_refund"), Purpose::RailCall);
        assert!(span.meta().is_none());
        span.end(Some("timeout"));
        drop(off.client_span("tools/list", None, Purpose::Listing));
    }

    #[test]
    fn a_client_span_dropped_before_its_end_says_abandoned() {
        let exporter = opentelemetry_sdk::trace::InMemorySpanExporter::default();
        let provider = provider(exporter.clone());
        let on = Telemetry::on(&provider, false, Transport::Pipe);
        drop(on.client_span("tools/call", Some("create_refund"), Purpose::RailCall));
        on.client_span("tools/list", None, Purpose::Listing)
            .end(None);
        provider.force_flush().unwrap();
        let spans = exporter.get_finished_spans().unwrap();
        let error = |name: &str| {
            let span = spans.iter().find(|s| s.name == name).unwrap();
            span.attributes
                .iter()
                .find(|kv| kv.key.as_str() == "error.type")
                .map(|kv| kv.value.as_str().into_owned())
        };
        assert_eq!(
            error("tools/call create_refund").as_deref(),
            Some("abandoned")
        );
        assert_eq!(error("tools/list"), None);
        assert_eq!(spans.len(), 2, "each span ended once");
    }
}
