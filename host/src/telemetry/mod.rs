//! OpenTelemetry traces: set up from the standard `OTEL_*` variables, off unless an OTLP
//! endpoint is given; the W3C trace context between the worker and its task processes.
//!
//! Exported over OTLP/HTTP with protobuf ([`http`]) through a batch span processor with a
//! bounded queue (`OTEL_BSP_*`; spans beyond it are dropped, never waited for), flushed when
//! the process ends within [`FLUSH_TIMEOUT`], and not waited for at all once the collector is
//! known to be down ([`probe`]: an empty export when traces are set up, then each export's
//! outcome). Spans that never reached the collector are counted ([`SpanTally`]): logged when the
//! process ends, and a task process's sent to its worker for `ctxhost_otel_spans_dropped_total`. The span names and attributes follow the GenAI semantic conventions ([`genai`]).
//!
//! Variables: `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (on),
//! `OTEL_SDK_DISABLED=true` (off whatever else is set), `OTEL_SERVICE_NAME` (default
//! `ctxhost`), `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_EXPORTER_OTLP_HEADERS` (sent, never logged),
//! `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true` (message contents on the spans),
//! `OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT` / `OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT` (attribute
//! values cut to that many characters, 4096 by default: [`limits`]).

pub mod genai;
pub mod http;
pub mod limits;
pub mod probe;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry::trace::{Span as _, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue, global};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter, SpanProcessor};

/// The variable a task process reads its parent's trace context from (W3C `traceparent`).
pub const TRACEPARENT: &str = "TRACEPARENT";
/// Its companion (W3C `tracestate`).
pub const TRACESTATE: &str = "TRACESTATE";
/// Longest wait for the last spans to reach the collector when a process ends.
pub const FLUSH_TIMEOUT: Duration = Duration::from_millis(1000);
/// The instrumentation scope's name.
const SCOPE: &str = "ctxhost";

/// Whether the variables ask for traces: an endpoint set, the SDK not disabled.
pub fn enabled() -> bool {
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
    let disabled =
        std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.trim().eq_ignore_ascii_case("true"));
    !disabled && (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
}

/// Whether message contents go on the spans
/// (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`).
pub fn capture_content() -> bool {
    std::env::var("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
        .is_ok_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// The installed exporter; its spans are flushed when it is dropped or [`Telemetry::finish`]ed
/// (within [`FLUSH_TIMEOUT`]).
#[derive(Debug)]
pub struct Telemetry {
    provider: SdkTracerProvider,
    tally: Arc<Tally>,
    finished: bool,
}

/// What became of this process's spans: ended (handed to the export queue) and exported
/// (accepted by the collector). The rest were dropped: the queue was full, the collector
/// refused, failed or did not answer in time, or the flush at the end ran out of time.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SpanTally {
    /// Spans ended.
    pub ended: u64,
    /// Spans the collector accepted.
    pub exported: u64,
}

impl SpanTally {
    /// Spans ended and never exported.
    pub fn dropped(&self) -> u64 {
        self.ended.saturating_sub(self.exported)
    }
}

/// The counts behind [`SpanTally`], kept by [`Counting`] and [`CountingExporter`], and what is
/// known of the collector ([`probe`]).
#[derive(Debug, Default)]
struct Tally {
    ended: AtomicU64,
    exported: AtomicU64,
    collector: probe::Collector,
}

impl Telemetry {
    /// Flush the last spans (within [`FLUSH_TIMEOUT`]) and say what became of this process's
    /// spans; spans not exported are logged (a warning, with the count).
    pub fn finish(mut self) -> SpanTally {
        self.flush()
    }

    fn flush(&mut self) -> SpanTally {
        if !self.finished {
            self.finished = true;
            // A collector known to be down is not waited for (its spans are lost either way);
            // one not known yet gets the rest of the time once the probe has said.
            let deadline = std::time::Instant::now() + FLUSH_TIMEOUT;
            let wait = match self.tally.collector.settle(deadline) {
                probe::Reach::Down => Duration::ZERO,
                _ => deadline.saturating_duration_since(std::time::Instant::now()),
            };
            if let Err(e) = self.provider.shutdown_with_timeout(wait) {
                tracing::debug!("OpenTelemetry: the last spans were not all exported: {e}");
            }
        }
        let tally = SpanTally {
            ended: self.tally.ended.load(Ordering::Relaxed),
            exported: self.tally.exported.load(Ordering::Relaxed),
        };
        if tally.dropped() > 0 {
            tracing::warn!(
                spans_dropped = tally.dropped(),
                spans = tally.ended,
                "OpenTelemetry: {} of {} spans were not exported (the collector refused them, was unreachable or too slow, or the queue of OTEL_BSP_MAX_QUEUE_SIZE spans was full)",
                tally.dropped(),
                tally.ended
            );
        }
        tally
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        self.flush();
    }
}

/// The batch span processor, counting the spans that end ([`Tally::ended`]).
#[derive(Debug)]
struct Counting<P> {
    inner: P,
    tally: Arc<Tally>,
    /// Characters an attribute value keeps ([`limits::value_length_limit`]).
    value_limit: usize,
}

impl<P: SpanProcessor> SpanProcessor for Counting<P> {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, mut span: SpanData) {
        self.tally.ended.fetch_add(1, Ordering::Relaxed);
        limits::bound_span(&mut span, self.value_limit);
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

/// The OTLP exporter, counting the spans the collector accepted ([`Tally::exported`]).
#[derive(Debug)]
struct CountingExporter<E> {
    inner: E,
    tally: Arc<Tally>,
}

impl<E: SpanExporter> SpanExporter for CountingExporter<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len() as u64;
        let result = self.inner.export(batch).await;
        if result.is_ok() {
            self.tally.exported.fetch_add(n, Ordering::Relaxed);
        }
        self.tally.collector.exported(result.is_ok());
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

/// Install the exporter if [`enabled`]; `None` when off (spans are then no-ops) or when the
/// exporter cannot be built (logged: traces never fail a task).
pub fn init() -> Option<Telemetry> {
    global::set_text_map_propagator(TraceContextPropagator::new());
    if !enabled() {
        return None;
    }
    use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
    let exporter = match opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_http_client(http::UreqClient::new())
        .build()
    {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!("OpenTelemetry traces are off: the OTLP exporter cannot be set up: {e}");
            return None;
        }
    };
    let mut resource = opentelemetry_sdk::Resource::builder().build();
    let named = resource
        .get(&opentelemetry::Key::new("service.name"))
        .is_some_and(|v| !v.as_str().starts_with("unknown_service"));
    if !named {
        resource = opentelemetry_sdk::Resource::builder()
            .with_service_name(SCOPE)
            .build();
    }
    let tally = Arc::new(Tally::default());
    if let Some(url) = probe::traces_url() {
        tally.collector.probe(url, probe::headers());
    }
    let exporter = CountingExporter {
        inner: exporter,
        tally: tally.clone(),
    };
    let processor = Counting {
        inner: opentelemetry_sdk::trace::BatchSpanProcessor::builder(exporter).build(),
        tally: tally.clone(),
        value_limit: limits::value_length_limit(),
    };
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource)
        .build();
    global::set_tracer_provider(provider.clone());
    tracing::debug!("OpenTelemetry traces exported over OTLP/HTTP");
    Some(Telemetry {
        provider,
        tally,
        finished: false,
    })
}

/// A span of this process, ended when dropped.
#[derive(Debug)]
pub struct Span {
    span: global::BoxedSpan,
}

impl Span {
    /// Start span `name` of `kind` with `attributes`, a child of the current context's span.
    pub fn start(
        name: String,
        kind: opentelemetry::trace::SpanKind,
        attributes: Vec<KeyValue>,
    ) -> Span {
        let tracer = global::tracer(SCOPE);
        let span = tracer
            .span_builder(name)
            .with_kind(kind)
            .with_attributes(attributes)
            .start(&tracer);
        Span { span }
    }

    /// Set one attribute.
    pub fn set(&mut self, attribute: KeyValue) {
        self.span.set_attribute(attribute);
    }

    /// Mark the span failed: `error.type` (a short class, e.g. `timeout`, `http_429`) and
    /// the status's description (already redacted by the caller).
    pub fn fail(&mut self, error_type: &str, description: &str) {
        self.span
            .set_attribute(KeyValue::new("error.type", error_type.to_string()));
        self.span
            .set_status(opentelemetry::trace::Status::error(description.to_string()));
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        self.span.end();
    }
}

/// A span current for as long as it is held (a task's run, a strategy hook): spans started
/// meanwhile on this thread are its children. Held in scope order (the last started is
/// dropped first).
#[derive(Debug)]
pub struct RunSpan {
    cx: Context,
    _attached: opentelemetry::ContextGuard,
}

impl RunSpan {
    /// Start `name` (kind internal) under `parent` and make it the current span.
    pub fn start(parent: &Context, name: String, attributes: Vec<KeyValue>) -> RunSpan {
        let tracer = global::tracer(SCOPE);
        let span = tracer
            .span_builder(name)
            .with_attributes(attributes)
            .start_with_context(&tracer, parent);
        let cx = parent.with_span(span);
        RunSpan {
            _attached: cx.clone().attach(),
            cx,
        }
    }

    /// The trace id (32 lowercase hex digits), `None` when traces are off.
    pub fn trace_id(&self) -> Option<String> {
        let sc = self.cx.span().span_context().clone();
        sc.is_valid().then(|| sc.trace_id().to_string())
    }

    /// Set one attribute.
    pub fn set(&self, attribute: KeyValue) {
        self.cx.span().set_attribute(attribute);
    }

    /// Mark the run failed with `description`.
    pub fn fail(&self, description: &str) {
        self.cx
            .span()
            .set_status(opentelemetry::trace::Status::error(description.to_string()));
    }
}

impl Drop for RunSpan {
    fn drop(&mut self) {
        self.cx.span().end();
    }
}

/// A span the worker holds for a task process (not current on the worker's thread: the
/// worker runs many).
#[derive(Debug, Clone)]
pub struct ChildSpan {
    cx: Context,
}

impl ChildSpan {
    /// Start span `name` (a root: one trace per task run).
    pub fn start(name: &str) -> ChildSpan {
        let tracer = global::tracer(SCOPE);
        let span = tracer
            .span_builder(name.to_string())
            .start_with_context(&tracer, &Context::new());
        ChildSpan {
            cx: Context::new().with_span(span),
        }
    }

    /// The variables that carry this span's context to the task process
    /// ([`TRACEPARENT`], [`TRACESTATE`]); empty when traces are off.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let mut carrier: HashMap<String, String> = HashMap::new();
        global::get_text_map_propagator(|p| p.inject_context(&self.cx, &mut carrier));
        let mut vars = Vec::new();
        if let Some(v) = carrier.remove("traceparent") {
            vars.push((TRACEPARENT, v));
        }
        if let Some(v) = carrier.remove("tracestate").filter(|v| !v.is_empty()) {
            vars.push((TRACESTATE, v));
        }
        vars
    }

    /// Set one attribute.
    pub fn set(&self, attribute: KeyValue) {
        self.cx.span().set_attribute(attribute);
    }

    /// End the span (`failed`: with an error status saying so).
    pub fn end(&self, failed: Option<&str>) {
        if let Some(d) = failed {
            self.cx
                .span()
                .set_status(opentelemetry::trace::Status::error(d.to_string()));
        }
        self.cx.span().end();
    }
}

/// The parent context given by the worker ([`TRACEPARENT`]); an empty context (a new trace)
/// when not set or not valid.
pub fn parent_from_env() -> Context {
    let mut carrier: HashMap<String, String> = HashMap::new();
    if let Ok(v) = std::env::var(TRACEPARENT) {
        carrier.insert("traceparent".to_string(), v);
    }
    if let Ok(v) = std::env::var(TRACESTATE) {
        carrier.insert("tracestate".to_string(), v);
    }
    global::get_text_map_propagator(|p| p.extract(&carrier))
}

/// The trace id of the task's latest run with traces on (the last line of its
/// [`ctxhost_format::files::TRACE_IDS`]), if it is 32 hex digits.
pub fn last_trace_id(dir: &crate::task_dir::TaskDir) -> Option<String> {
    let bytes = dir.read(ctxhost_format::files::TRACE_IDS).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let last = text.lines().rev().find(|l| !l.trim().is_empty())?.trim();
    (last.len() == 32 && last.bytes().all(|b| b.is_ascii_hexdigit())).then(|| last.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_well_formed_trace_id_is_the_one_shown() {
        let t = tempfile::tempdir().unwrap();
        let dir = crate::task_dir::TaskDir::open(t.path()).unwrap();
        assert_eq!(last_trace_id(&dir), None);
        let a = "0af7651916cd43dd8448eb211c80319c";
        let b = "4bf92f3577b34da6a3ce929d0e0e4736";
        dir.append_line(ctxhost_format::files::TRACE_IDS, a)
            .unwrap();
        dir.append_line(ctxhost_format::files::TRACE_IDS, b)
            .unwrap();
        assert_eq!(last_trace_id(&dir).as_deref(), Some(b));
        dir.append_line(ctxhost_format::files::TRACE_IDS, "<script>")
            .unwrap();
        assert_eq!(last_trace_id(&dir), None, "not 32 hex digits: not shown");
    }

    #[test]
    fn a_span_of_the_worker_carries_no_context_when_traces_are_off() {
        // No provider installed in this test process: the no-op tracer's spans are invalid.
        let span = ChildSpan::start("task run");
        assert!(span.env().is_empty());
        span.end(None);
    }
}
