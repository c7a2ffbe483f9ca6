//! Telemetry: logs (one tracing subscriber, human-readable or JSON, filtered by `RUST_LOG`) and
//! metrics (the `metrics` facade with a Prometheus recorder, rendered at `GET /metrics`).
//!
//! Any module records a metric with `metrics::counter!`, `metrics::gauge!` or
//! `metrics::histogram!`; nothing is plumbed through. Names are snake_case with a unit suffix
//! (`_total`, `_seconds`, `_bytes`) and low-cardinality labels (never a user or post id).

use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::{EnvFilter, fmt, prelude::*};

use crate::config::LogFormat;

/// Installs the global subscriber. Safe to call more than once (later calls are ignored), which
/// tests rely on. sqlx logs every statement at INFO, so it is held to `warn` by default.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,sea_orm=warn,tower_http=warn"));
    let registry = tracing_subscriber::registry().with(filter);
    let _ = match format {
        LogFormat::Text => registry.with(fmt::layer().with_writer(std::io::stderr)).try_init(),
        LogFormat::Json => registry.with(fmt::layer().json().with_writer(std::io::stderr)).try_init(),
    };
}

/// The process's metrics recorder, installed on first use. One per process: several
/// applications in one process (tests with a peer instance) share it, as they share the process.
pub fn metrics() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        // Fails only when another recorder was installed first; then ours renders empty, which
        // the /metrics test would show.
        if metrics::set_global_recorder(recorder).is_err() {
            tracing::warn!("a metrics recorder was already installed; /metrics will be empty");
        }
        handle
    })
}
