//! OpenTelemetry traces: the OTLP export of our `tracing` spans, and the trace context that
//! rides with a like from its mutation through the stream, the worker's batch and Pub/Sub to
//! the subscribers' deliveries.
//!
//! Off by default. Setting `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`)
//! turns it on for `serve` and `worker`; `OTEL_SDK_DISABLED=true` turns it off again. Everything
//! else is the OpenTelemetry SDK's own reading of the standard variables: the protocol
//! (`http/protobuf`, the default, or `http/json`), headers, timeouts, `OTEL_SERVICE_NAME`
//! (default `course-forum`), `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER` and its
//! argument, and the batch processor's `OTEL_BSP_*`.
//!
//! When off, no layer is installed and the span-only callsites (SQL statements, Redis
//! commands) are disabled by the log filter, so they cost one interest check; the trace
//! context helpers answer `None` after one atomic load.
//!
//! A trace context travels as a W3C `traceparent` (`00-<trace>-<span>-<flags>`): in an HTTP
//! request's header, in a like-stream entry's `tp` field, and in front of a Pub/Sub payload.
//! Only sampled contexts are sent: an unsampled one would make the next hop create spans for
//! nothing.

use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, TracerProvider};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Subscriber;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

/// Whether a trace exporter is installed in this process.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// The service name when `OTEL_SERVICE_NAME` does not give one.
const DEFAULT_SERVICE_NAME: &str = "course-forum";

/// Whether spans are exported (and so whether trace contexts are worth carrying).
pub(crate) fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The exporter of a process whose traces are on; flushes what is buffered when shut down.
pub(crate) struct TraceExport {
    provider: SdkTracerProvider,
}

impl TraceExport {
    /// Exports what the batch processor still holds, within its timeout. Called once the
    /// server or worker has stopped, so the last requests' spans are not lost.
    pub(crate) fn shutdown(self) {
        if let Err(err) = self.provider.force_flush() {
            tracing::warn!(error = %err, "could not export the last spans");
        }
        let _ = self.provider.shutdown();
        ENABLED.store(false, Ordering::Relaxed);
    }
}

/// The endpoint variable that turns traces on, when one is set (and the SDK not disabled).
fn configured_endpoint() -> Option<(&'static str, String)> {
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.trim().eq_ignore_ascii_case("true"));
    if disabled {
        return None;
    }
    ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"]
        .into_iter()
        .find_map(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()).map(|v| (name, v)))
}

/// Checks the variables this build cannot honour, with one sentence naming the setting.
fn check_settings(endpoint_var: &str, endpoint: &str) -> Result<(), String> {
    match url::Url::parse(endpoint.trim()) {
        Ok(url) if matches!(url.scheme(), "http" | "https") => {}
        _ => {
            return Err(format!(
                "{endpoint_var}={endpoint:?} is not an http(s) URL; an OTLP/HTTP collector listens at e.g. \
                 http://localhost:4318"
            ));
        }
    }
    for name in ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"] {
        if let Ok(protocol) = std::env::var(name) {
            match protocol.trim() {
                "" | "http/protobuf" | "http/json" => {}
                "grpc" => {
                    return Err(format!(
                        "{name}=grpc: this server exports over OTLP/HTTP only; set http/protobuf (a collector's port \
                         4318) or http/json"
                    ));
                }
                other => {
                    return Err(format!("{name}={other:?} is not a protocol; use http/protobuf or http/json"));
                }
            }
        }
    }
    Ok(())
}

/// Builds the exporter and the layer that feeds it, when the environment asks for traces.
/// `Ok(None)` when it does not; `Err` with a sentence naming the setting when it asks for
/// something this build cannot do.
pub(crate) fn from_env<S>() -> Result<Option<(TraceExport, impl Layer<S>)>, String>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let Some((endpoint_var, endpoint)) = configured_endpoint() else {
        return Ok(None);
    };
    check_settings(endpoint_var, &endpoint)?;
    // The SDK reads endpoint, protocol, headers and timeout from the environment itself.
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
        .map_err(|e| format!("cannot build the OTLP exporter for {endpoint_var}={endpoint:?}: {e}"))?;
    let mut resource = Resource::builder();
    if std::env::var("OTEL_SERVICE_NAME").is_err() {
        resource = resource.with_service_name(DEFAULT_SERVICE_NAME);
    }
    let resource = resource.with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION"))).build();
    // The provider's default configuration reads OTEL_TRACES_SAMPLER(_ARG); the batch
    // processor runs on a thread of its own and reads OTEL_BSP_*.
    let provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build();
    let tracer = provider.tracer("course-forum");
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_tracked_inactivity(false)
        .with_filter(tracing_subscriber::filter::filter_fn(exported));
    ENABLED.store(true, Ordering::Relaxed);
    Ok(Some((TraceExport { provider }, layer)))
}

/// What is exported: our spans at any level (SQL statements and Redis commands are DEBUG so the
/// default log filter leaves them out), our events at INFO and above as span events, and
/// sea-orm's statement spans. Nothing from the exporter's own HTTP client, which would trace
/// its own exports.
fn exported(metadata: &tracing::Metadata<'_>) -> bool {
    let target = metadata.target();
    if target.starts_with("course_forum") {
        metadata.is_span() || *metadata.level() <= tracing::Level::INFO
    } else {
        target.starts_with("sea_orm") && metadata.is_span()
    }
}

/// A sampled span context in the few bytes a live count can carry (`live::hub`), `Copy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceRef {
    trace_id: TraceId,
    span_id: SpanId,
    flags: TraceFlags,
}

impl TraceRef {
    /// The current span's context, when traces are on and it is sampled.
    pub fn current() -> Option<TraceRef> {
        if !enabled() {
            return None;
        }
        Self::of(&tracing::Span::current())
    }

    /// `span`'s context, when traces are on and it is sampled.
    pub fn of(span: &tracing::Span) -> Option<TraceRef> {
        if !enabled() {
            return None;
        }
        let context = span.context();
        let span_ref = context.span();
        let sc = span_ref.span_context();
        (sc.is_valid() && sc.is_sampled()).then(|| TraceRef {
            trace_id: sc.trace_id(),
            span_id: sc.span_id(),
            flags: sc.trace_flags(),
        })
    }

    /// Reads a W3C `traceparent`; `None` for anything else (a version other than 00, bad hex,
    /// an all-zero id).
    pub fn parse(traceparent: &str) -> Option<TraceRef> {
        let mut parts = traceparent.trim().split('-');
        let (version, trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || version != "00" || trace.len() != 32 || span.len() != 16 || flags.len() != 2 {
            return None;
        }
        let trace_id = TraceId::from_hex(trace).ok()?;
        let span_id = SpanId::from_hex(span).ok()?;
        let flags = TraceFlags::new(u8::from_str_radix(flags, 16).ok()?);
        (trace_id != TraceId::INVALID && span_id != SpanId::INVALID).then_some(TraceRef { trace_id, span_id, flags })
    }

    /// As a W3C `traceparent`.
    pub fn traceparent(&self) -> String {
        format!("00-{}-{}-{:02x}", self.trace_id, self.span_id, self.flags.to_u8())
    }

    fn remote_context(&self) -> SpanContext {
        SpanContext::new(self.trace_id, self.span_id, self.flags, true, TraceState::NONE)
    }

    /// Makes `span` a child of this context (a hop of the same trace).
    pub fn adopt(&self, span: &tracing::Span) {
        let _ = span.set_parent(Context::new().with_remote_span_context(self.remote_context()));
    }

    /// Links `span` to this context (a batch that applied the work this context began).
    pub fn link_from(&self, span: &tracing::Span) {
        span.add_link(self.remote_context());
    }
}

/// The `traceparent` of the current span, when traces are on and it is sampled: what the
/// like-stream entry and the Pub/Sub payload carry.
pub(crate) fn current_traceparent() -> Option<String> {
    TraceRef::current().map(|trace| trace.traceparent())
}

/// A Pub/Sub payload with the publisher's trace context in front: `<traceparent> <json>`. JSON
/// starts with `{`, so a payload without a context is read as before.
pub(crate) fn frame_payload(json: String) -> String {
    match current_traceparent() {
        Some(traceparent) => format!("{traceparent} {json}"),
        None => json,
    }
}

/// Splits a Pub/Sub payload into its trace context (if any) and its JSON.
pub(crate) fn unframe_payload(payload: &str) -> (Option<TraceRef>, &str) {
    if payload.starts_with('{') {
        return (None, payload);
    }
    match payload.split_once(' ') {
        Some((traceparent, json)) => (TraceRef::parse(traceparent), json),
        None => (None, payload),
    }
}

/// The route a request path belongs to, for a span's name: one of the server's routes, or
/// `other`. A span name is a low-cardinality label; a caller without an account must not be
/// able to make it whatever it sends (or as long: up to the URI limit), since every name sits in
/// the exporter's queue until sent.
pub(crate) fn route_name(path: &str) -> &'static str {
    match path {
        "/" => "/",
        "/graphql" => "/graphql",
        "/graphql/ws" => "/graphql/ws",
        "/healthz" => "/healthz",
        "/readyz" => "/readyz",
        "/metrics" => "/metrics",
        _ if path.starts_with("/demo") => "/demo",
        _ if path.starts_with("/graphiql") => "/graphiql",
        _ => "other",
    }
}

/// At most `max` bytes of `text` (cut at a character boundary): what a span attribute copied
/// from a request may hold.
pub(crate) fn bounded(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// An HTTP request's `traceparent` header, when traces are on: the caller's trace that this
/// request continues.
pub(crate) fn from_headers(headers: &axum::http::HeaderMap) -> Option<TraceRef> {
    if !enabled() {
        return None;
    }
    headers.get("traceparent").and_then(|value| value.to_str().ok()).and_then(TraceRef::parse)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparents_round_trip_and_bad_ones_are_refused() {
        let text = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let parsed = TraceRef::parse(text).expect("a valid traceparent");
        assert_eq!(parsed.traceparent(), text);
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-zzf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceRef::parse(bad), None, "{bad:?} must be refused");
        }
    }

    #[test]
    fn payloads_without_a_context_read_as_before() {
        assert_eq!(unframe_payload(r#"{"type":"counts"}"#), (None, r#"{"type":"counts"}"#));
        let framed = r#"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 {"type":"counts"}"#;
        let (trace, json) = unframe_payload(framed);
        assert!(trace.is_some());
        assert_eq!(json, r#"{"type":"counts"}"#);
    }

    #[test]
    fn span_names_and_attributes_from_a_request_are_bounded() {
        assert_eq!(route_name("/graphql"), "/graphql");
        assert_eq!(route_name(&format!("/{}", "x".repeat(60_000))), "other");
        assert_eq!(bounded("héllo", 2), "h");
        assert_eq!(bounded(&"a".repeat(10_000), 256).len(), 256);
    }

    #[test]
    fn settings_this_build_cannot_honour_are_named() {
        assert!(check_settings("OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4318").is_err());
        assert!(check_settings("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318").is_ok());
    }
}
