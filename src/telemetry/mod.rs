//! Telemetry: logs (one tracing subscriber, human-readable or JSON, filtered by `RUST_LOG`),
//! traces (OpenTelemetry over OTLP when the OTEL_* variables ask for them: `otel`) and
//! metrics (the `metrics` facade with a Prometheus recorder, rendered at `GET /metrics`).
//!
//! Any module records a metric with `metrics::counter!`, `metrics::gauge!` or
//! `metrics::histogram!` and a name from `names`; nothing is plumbed through. Names are
//! snake_case with a unit suffix (`_total`, `_seconds`, `_bytes`, `_entries`) and
//! low-cardinality labels (never a user or post id). `CATALOG` is the list operators read (and
//! docs/operations.md repeats, which a test checks); gauges that describe Redis state
//! (stream lag, dead letters) are read at scrape time by `ops::refresh_gauges`.

use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::{EnvFilter, fmt, prelude::*};

use crate::config::LogFormat;

pub(crate) mod otel;

/// The log filter unless `RUST_LOG` gives one. sqlx logs every statement at INFO, and sea-orm's
/// statement spans are INFO too (they are for `otel`), so both are held to `warn`.
const DEFAULT_LOG_FILTER: &str = "info,sqlx=warn,sea_orm=warn,tower_http=warn";

/// Installs the global subscriber for logs only. Safe to call more than once (later calls are
/// ignored), which tests rely on.
pub fn init(format: LogFormat) {
    install::<tracing_subscriber::layer::Identity>(format, None);
}

/// Installs the global subscriber for a long-running process (`serve`, `worker`): logs, and
/// OpenTelemetry traces when the OTEL_* variables ask for them (`otel`). The returned export is
/// shut down after the process stops, which flushes the last spans.
pub(crate) fn init_service(format: LogFormat) -> Result<Option<otel::TraceExport>, crate::error::AppError> {
    match otel::from_env().map_err(crate::error::AppError::Config)? {
        Some((export, layer)) => {
            install(format, Some(layer));
            tracing::info!("exporting traces over OTLP/HTTP");
            Ok(Some(export))
        }
        None => {
            init(format);
            Ok(None)
        }
    }
}

fn install<L>(format: LogFormat, traces: Option<L>)
where
    L: tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync,
{
    let filter = || EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_LOG_FILTER));
    // Each layer has its own filter: the log filter must not hide the spans that are exported
    // but never logged (SQL statements, Redis commands).
    let registry = tracing_subscriber::registry().with(traces);
    let _ = match format {
        LogFormat::Text => registry.with(fmt::layer().with_writer(std::io::stderr).with_filter(filter())).try_init(),
        LogFormat::Json => {
            registry.with(fmt::layer().json().with_writer(std::io::stderr).with_filter(filter())).try_init()
        }
    };
}

/// Metric names, one constant each, so a call site cannot misspell one.
pub(crate) mod names {
    pub(crate) const GRAPHQL_REQUESTS: &str = "graphql_requests_total";
    pub(crate) const GRAPHQL_ERRORS: &str = "graphql_errors_total";
    pub(crate) const GRAPHQL_DURATION: &str = "graphql_request_duration_seconds";
    pub(crate) const GRAPHQL_PARSE_DURATION: &str = "graphql_parse_duration_seconds";
    pub(crate) const GRAPHQL_VALIDATION_DURATION: &str = "graphql_validation_duration_seconds";
    pub(crate) const DOCUMENT_REFUSALS: &str = "graphql_document_refusals_total";
    pub(crate) const PERSISTED_QUERY_REGISTRATIONS: &str = "persisted_query_registrations_total";
    pub(crate) const LIKE_TOGGLES: &str = "like_toggles_total";
    pub(crate) const LIKE_BATCHES: &str = "like_batches_total";
    pub(crate) const LIKE_BATCH_ENTRIES: &str = "like_batch_entries";
    pub(crate) const LIKE_BATCH_DURATION: &str = "like_batch_duration_seconds";
    pub(crate) const LIKE_EVENTS_APPLIED: &str = "like_events_applied_total";
    pub(crate) const LIKE_EVENTS_REFUSED: &str = "like_events_refused_total";
    pub(crate) const LIKE_DEAD_LETTERS: &str = "like_dead_letters_total";
    pub(crate) const LIKE_STREAM_ENTRIES: &str = "like_stream_entries";
    pub(crate) const LIKE_STREAM_PENDING: &str = "like_stream_pending_entries";
    pub(crate) const LIKE_STREAM_LAG: &str = "like_stream_lag_entries";
    pub(crate) const LIKE_STREAM_OLDEST_AGE: &str = "like_stream_oldest_age_seconds";
    pub(crate) const LIKE_DEAD_LETTER_ENTRIES: &str = "like_dead_letter_entries";
    pub(crate) const CACHE_REQUESTS: &str = "cache_requests_total";
    pub(crate) const CACHE_LOADS: &str = "cache_loads_total";
    pub(crate) const CACHE_STORES_REFUSED: &str = "cache_stores_refused_total";
    pub(crate) const CACHE_BYPASSES: &str = "cache_bypasses_total";
    pub(crate) const CACHE_INVALIDATION_FAILURES: &str = "cache_invalidation_failures_total";
    pub(crate) const FEED_TIMELINE_REBUILDS: &str = "feed_timeline_rebuilds_total";
    pub(crate) const FEED_DATABASE_READS: &str = "feed_database_reads_total";
    pub(crate) const FEED_FANOUT_POSTS: &str = "feed_fanout_posts_total";
    pub(crate) const FEED_FANOUT_PUSHES: &str = "feed_fanout_pushes_total";
    pub(crate) const FEED_FANOUT_BATCH_DURATION: &str = "feed_fanout_batch_seconds";
    pub(crate) const FEED_FANOUT_DELAY: &str = "feed_fanout_delay_seconds";
    pub(crate) const LIVE_SUBSCRIPTIONS_OPEN: &str = "live_subscriptions_open";
    pub(crate) const WEBSOCKET_CONNECTIONS_OPEN: &str = "websocket_connections_open";
    pub(crate) const WEBSOCKET_REFUSALS: &str = "websocket_refusals_total";
    pub(crate) const WEBSOCKET_FRAMES_SENT: &str = "websocket_frames_sent_total";
    pub(crate) const WEBSOCKET_WRITES: &str = "websocket_writes_total";
    pub(crate) const LIVE_MESSAGES_PUBLISHED: &str = "live_messages_published_total";
    pub(crate) const LIVE_PUBLISH_FAILURES: &str = "live_publish_failures_total";
    pub(crate) const LIVE_MESSAGES_RECEIVED: &str = "live_messages_received_total";
    pub(crate) const LIVE_UPDATES_DELIVERED: &str = "live_updates_delivered_total";
    pub(crate) const LIVE_UPDATES_COALESCED: &str = "live_updates_coalesced_total";
    pub(crate) const LIVE_PAYLOADS_RENDERED: &str = "live_payloads_rendered_total";
    pub(crate) const VIEW_FLUSHES: &str = "view_flushes_total";
    pub(crate) const VIEW_FLUSH_DURATION: &str = "view_flush_duration_seconds";
    pub(crate) const VIEWS_FLUSHED: &str = "views_flushed_total";
    pub(crate) const REDIS_COMMANDS: &str = "redis_commands_total";
    pub(crate) const SQL_STATEMENTS: &str = "sql_statements_total";
    pub(crate) const REDIS_EVICTED_KEYS: &str = "redis_evicted_keys_total";
    pub(crate) const REDIS_USED_MEMORY: &str = "redis_used_memory_bytes";
    pub(crate) const MEMBERSHIP_CACHE_LOOKUPS: &str = "membership_cache_lookups_total";
    pub(crate) const MEMBERSHIP_NOTIFICATIONS: &str = "membership_notifications_total";
    pub(crate) const MEMBERSHIP_CACHE_WARMED: &str = "membership_cache_warmed_total";
    pub(crate) const MEMBERSHIP_LISTENER_CONNECTED: &str = "membership_listener_connected";
    pub(crate) const SUBSCRIPTIONS_REVOKED: &str = "subscriptions_revoked_total";
    pub(crate) const WRITE_LIMIT_REFUSALS: &str = "write_limit_refusals_total";
    pub(crate) const CACHE_USED_BYTES: &str = "cache_used_bytes";
    pub(crate) const CACHE_ENTRIES: &str = "cache_entries";
    pub(crate) const CACHE_CAPACITY_BYTES: &str = "cache_capacity_bytes";
    pub(crate) const CACHE_EVICTIONS: &str = "cache_evictions_total";
    pub(crate) const SEARCH_CANDIDATES: &str = "search_candidates_total";
    pub(crate) const SEARCH_HEADLINES: &str = "search_headlines_total";
    pub(crate) const PROCESS_OPEN_FDS: &str = "process_open_fds";
    pub(crate) const PROCESS_MAX_FDS: &str = "process_max_fds";
    pub(crate) const PROCESS_RESERVED_FDS: &str = "process_reserved_fds";
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// Every metric this process exports: name, kind, labels, and what it tells an operator.
pub const CATALOG: &[(&str, Kind, &str, &str)] = {
    use Kind::*;
    use names::*;
    &[
        (GRAPHQL_REQUESTS, Counter, "operation", "GraphQL operations served (HTTP and subscriptions)"),
        (GRAPHQL_ERRORS, Counter, "operation, code", "errors in GraphQL responses, by extensions.code"),
        (GRAPHQL_DURATION, Histogram, "operation", "time to answer a query or mutation"),
        (GRAPHQL_PARSE_DURATION, Histogram, "", "time to parse a document not kept parsed (HTTP and websocket)"),
        (GRAPHQL_VALIDATION_DURATION, Histogram, "", "time to validate a document and cost its operation"),
        (
            DOCUMENT_REFUSALS,
            Counter,
            "limit",
            "documents refused by the pre-pass before validation: bytes, tokens, fragments, selections, directives",
        ),
        (
            PERSISTED_QUERY_REGISTRATIONS,
            Counter,
            "outcome",
            "texts offered with a persisted-query hash by signed-in callers: kept, too_large, rate_limited, failed",
        ),
        (
            LIKE_TOGGLES,
            Counter,
            "mode, result",
            "like/unlike toggles: changed, unchanged, rate_limited, unavailable, failed",
        ),
        (LIKE_BATCHES, Counter, "result", "worker batches: committed, or failed (retried)"),
        (LIKE_BATCH_ENTRIES, Histogram, "", "stream entries read per worker batch"),
        (LIKE_BATCH_DURATION, Histogram, "", "time to apply and acknowledge one worker batch"),
        (LIKE_EVENTS_APPLIED, Counter, "", "stream entries acknowledged after their batch committed"),
        (
            LIKE_EVENTS_REFUSED,
            Counter,
            "",
            "like events the worker's fences refused (deleted or foreign target, user not a member)",
        ),
        (LIKE_DEAD_LETTERS, Counter, "", "entries this process moved to the dead-letter stream"),
        (LIKE_STREAM_ENTRIES, Gauge, "shard", "entries in the like stream not yet applied (read at scrape)"),
        (LIKE_STREAM_PENDING, Gauge, "shard", "entries delivered to the worker and not yet acknowledged"),
        (LIKE_STREAM_LAG, Gauge, "shard", "entries not yet delivered to the worker"),
        (
            LIKE_STREAM_OLDEST_AGE,
            Gauge,
            "shard",
            "age of the oldest unapplied like (0 when none): the worker's lag in time",
        ),
        (LIKE_DEAD_LETTER_ENTRIES, Gauge, "", "dead letters waiting in <p>:likes:dead (should be 0)"),
        (
            CACHE_REQUESTS,
            Counter,
            "cache, result",
            "cache lookups: liked_set hit or miss; post hit, stale, miss or missing",
        ),
        (CACHE_LOADS, Counter, "cache", "post cache loads from PostgreSQL (one per key under a stampede)"),
        (CACHE_STORES_REFUSED, Counter, "cache", "loads not stored because a write moved the post meanwhile"),
        (CACHE_BYPASSES, Counter, "cache, reason", "reads that went to PostgreSQL without the cache"),
        (
            CACHE_INVALIDATION_FAILURES,
            Counter,
            "cache",
            "invalidations or patches lost to a Redis error (the entry is stale until its TTL)",
        ),
        (FEED_TIMELINE_REBUILDS, Counter, "", "home-feed timelines rebuilt from PostgreSQL"),
        (FEED_DATABASE_READS, Counter, "reason", "home-feed pages continued from PostgreSQL"),
        (FEED_FANOUT_POSTS, Counter, "path", "posts fanned out: to timelines, or to a celebrity list"),
        (FEED_FANOUT_PUSHES, Counter, "result", "timeline pushes: pushed, or skipped (no timeline)"),
        (FEED_FANOUT_BATCH_DURATION, Histogram, "", "time of one fan-out transaction"),
        (FEED_FANOUT_DELAY, Histogram, "", "time from a post's commit to its fan-out"),
        (LIVE_SUBSCRIPTIONS_OPEN, Gauge, "", "GraphQL subscriptions open in this process"),
        (WEBSOCKET_CONNECTIONS_OPEN, Gauge, "", "websocket connections open in this process"),
        (WEBSOCKET_FRAMES_SENT, Counter, "", "GraphQL protocol frames sent on websockets (next, complete, errors…)"),
        (
            WEBSOCKET_WRITES,
            Counter,
            "",
            "flushes of websocket frames to their sockets: the frames ready together go out in one",
        ),
        (
            WEBSOCKET_REFUSALS,
            Counter,
            "reason",
            "websockets refused or closed by a limit: origin, descriptors, address_cap, user_cap, init_timeout, operation_rate, message_rate, keepalive, slow_consumer, token",
        ),
        (LIVE_MESSAGES_PUBLISHED, Counter, "kind", "live messages published to Redis Pub/Sub (counts, activity)"),
        (LIVE_PUBLISH_FAILURES, Counter, "", "live messages that could not be published (a stale number on screens)"),
        (LIVE_MESSAGES_RECEIVED, Counter, "", "live messages this process received from Pub/Sub"),
        (LIVE_UPDATES_DELIVERED, Counter, "", "like-count updates sent to subscribers"),
        (LIVE_UPDATES_COALESCED, Counter, "", "like-count updates superseded before delivery (coalescing)"),
        (
            LIVE_PAYLOADS_RENDERED,
            Counter,
            "",
            "like-count payloads rendered for shared likeCounts subscriptions (once per value and selection)",
        ),
        (VIEW_FLUSHES, Counter, "result", "view aggregator flushes: ok or failed"),
        (VIEW_FLUSH_DURATION, Histogram, "", "time of one view flush"),
        (VIEWS_FLUSHED, Counter, "", "counted views written to posts.view_count"),
        (
            REDIS_COMMANDS,
            Counter,
            "role",
            "Redis commands sent (api: requests; worker, feed, background, scrape, probe, check)",
        ),
        (SQL_STATEMENTS, Counter, "role", "SQL statements run (api: requests; background: worker and jobs)"),
        (REDIS_EVICTED_KEYS, Counter, "", "keys Redis evicted since it started (INFO stats; must stay 0 for streams)"),
        (REDIS_USED_MEMORY, Gauge, "", "memory Redis uses (INFO memory)"),
        (
            MEMBERSHIP_CACHE_LOOKUPS,
            Counter,
            "result",
            "in-memory membership lookups: hit, or miss (read from PostgreSQL)",
        ),
        (MEMBERSHIP_NOTIFICATIONS, Counter, "", "course_members_changed notifications this process heard"),
        (
            MEMBERSHIP_CACHE_WARMED,
            Counter,
            "",
            "users whose memberships were read into memory when the listener connected",
        ),
        (
            MEMBERSHIP_LISTENER_CONNECTED,
            Gauge,
            "",
            "1 while this process LISTENs for membership changes (else memberships come from PostgreSQL)",
        ),
        (SUBSCRIPTIONS_REVOKED, Counter, "", "subscriptions ended with FORBIDDEN because their access was lost"),
        (
            WRITE_LIMIT_REFUSALS,
            Counter,
            "kind",
            "writes refused as RATE_LIMITED by a per-user write limit: post, comment, edit, delete, view_start, open_views",
        ),
        (
            CACHE_USED_BYTES,
            Gauge,
            "cache",
            "approximate bytes an in-process cache holds (course_pages, course_pages_index, posts, parsed_documents, users, memberships, course_titles, search_candidates; read at scrape)",
        ),
        (CACHE_ENTRIES, Gauge, "cache", "entries an in-process cache holds (read at scrape)"),
        (CACHE_CAPACITY_BYTES, Gauge, "cache", "an in-process cache's share of CACHE_BUDGET_BYTES"),
        (
            CACHE_EVICTIONS,
            Counter,
            "cache, cause",
            "entries an in-process cache dropped: size (over its share) or expired",
        ),
        (
            SEARCH_CANDIDATES,
            Counter,
            "outcome",
            "first pages of a course search by where their candidates came from: hit (kept, plus what changed since), miss (found afresh and kept), stale (kept ones that no longer serve, found again), uncached (a later page, several courses, an author filter, or the cache off), limited (refused as RATE_LIMITED by SEARCH_RATE_PER_MINUTE before looking)",
        ),
        (
            SEARCH_HEADLINES,
            Counter,
            "outcome",
            "headlines of the hits of first pages of a course search: made (by the page's statement, then kept) or kept (made by an earlier page of the query, for the row as it still is)",
        ),
        (
            PROCESS_OPEN_FDS,
            Gauge,
            "",
            "file descriptors this process holds open (its shared count, at most 100 ms old)",
        ),
        (PROCESS_MAX_FDS, Gauge, "", "the soft RLIMIT_NOFILE, raised to the hard limit at start"),
        (
            PROCESS_RESERVED_FDS,
            Gauge,
            "",
            "descriptors kept from websockets for PostgreSQL, Redis and HTTP (WS_DESCRIPTOR_RESERVE)",
        ),
    ]
};

/// Latency buckets (seconds) of every `_seconds` histogram.
const SECONDS_BUCKETS: &[f64] = &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];
/// Batch-size buckets of `like_batch_entries`.
const ENTRIES_BUCKETS: &[f64] = &[1.0, 5.0, 10.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 5000.0, 50_000.0];
/// How often histogram samples are folded into their buckets when nobody scrapes, so memory
/// stays bounded.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// The process's metrics recorder, installed on first use. One per process: several
/// applications in one process (tests with a peer instance) share it, as they share the process.
pub(crate) fn metrics() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let builder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
            .and_then(|b| b.set_buckets_for_metric(Matcher::Full(names::LIKE_BATCH_ENTRIES.into()), ENTRIES_BUCKETS));
        let recorder = match builder {
            Ok(builder) => builder.build_recorder(),
            Err(err) => {
                tracing::warn!(error = %err, "histogram buckets refused; histograms render as summaries");
                PrometheusBuilder::new().build_recorder()
            }
        };
        let handle = recorder.handle();
        // Fails only when another recorder was installed first; then ours renders empty, which
        // the /metrics test would show.
        if metrics::set_global_recorder(recorder).is_err() {
            tracing::warn!("a metrics recorder was already installed; /metrics will be empty");
        }
        for (name, kind, _, help) in CATALOG {
            match kind {
                Kind::Counter => metrics::describe_counter!(*name, *help),
                Kind::Gauge => metrics::describe_gauge!(*name, *help),
                Kind::Histogram => metrics::describe_histogram!(*name, *help),
            }
        }
        let upkeep = handle.clone();
        let _ = std::thread::Builder::new().name("metrics-upkeep".into()).spawn(move || {
            loop {
                std::thread::sleep(UPKEEP_EVERY);
                upkeep.run_upkeep();
            }
        });
        handle
    })
}
