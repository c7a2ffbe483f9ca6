//! Redis: connecting with bounded timeouts, the counted connection every module talks through
//! (`Redis`, to one node or to a Redis Cluster: `cluster`), Pub/Sub in either (`pubsub`), the
//! key layout (`keys`), and the Lua scripts of `lua/`, each loaded once and run by EVALSHA.

pub(crate) mod cluster;
pub(crate) mod keys;
pub(crate) mod lock;
pub(crate) mod pubsub;
pub(crate) mod ratelimit;

use std::time::Duration;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tracing::Instrument;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, FromRedisValue, Pipeline, RedisFuture, Script, Value};

use crate::config::RedisTarget;
use crate::error::{AppError, AppResult};

/// A multiplexed, self-reconnecting Redis connection that counts the commands it sends (a
/// pipeline counts each command in it; a script counts as its EVALSHA). Clones share the
/// connection and the count. `role` labels the `redis_commands_total` metric, so the API's
/// commands per request can be read apart from the background workers'.
///
/// It speaks to one node or to a Redis Cluster alike: on a cluster, a command goes to its key's
/// master, and a pipeline is sent as one sub-pipeline per hash slot (`cluster::send_split`),
/// its replies put back in order; a transaction is sent whole (its keys share a slot).
#[derive(Clone)]
pub struct Redis {
    inner: Connection,
    commands: Arc<AtomicU64>,
    role: &'static str,
}

#[derive(Clone)]
enum Connection {
    Node(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Redis {
    /// The same connection and count, its commands labelled `role` in the metric: work that
    /// shares the API's connection but is not a request's (a `/metrics` scrape, a job).
    pub fn with_role(&self, role: &'static str) -> Self {
        Self { role, ..self.clone() }
    }

    /// Commands sent through this connection (and its clones) so far.
    pub fn commands_sent(&self) -> u64 {
        self.commands.load(Ordering::Relaxed)
    }

    /// The cluster connection, when this speaks to a Redis Cluster.
    pub fn cluster(&self) -> Option<&ClusterConnection> {
        match &self.inner {
            Connection::Node(_) => None,
            Connection::Cluster(conn) => Some(conn),
        }
    }

    fn count(&self, n: usize) {
        self.commands.fetch_add(n as u64, Ordering::Relaxed);
        metrics::counter!(crate::telemetry::names::REDIS_COMMANDS, "role" => self.role).increment(n as u64);
    }
}

impl ConnectionLike for Redis {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.count(1);
        let span = command_span(cmd);
        let sent = match &mut self.inner {
            Connection::Node(conn) => conn.req_packed_command(cmd),
            Connection::Cluster(conn) => conn.req_packed_command(cmd),
        };
        if span.is_disabled() { sent } else { Box::pin(sent.instrument(span)) }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.count(pipeline.len());
        let span = tracing::debug_span!(
            "redis",
            otel.name = "redis PIPELINE",
            otel.kind = "client",
            db.system = "redis",
            db.operation = "PIPELINE",
            commands = pipeline.len(),
        );
        let sent = match &mut self.inner {
            Connection::Node(conn) => conn.req_packed_commands(pipeline, offset, count),
            Connection::Cluster(conn) => {
                if pipeline.is_transaction() {
                    conn.req_packed_commands(pipeline, offset, count)
                } else {
                    Box::pin(cluster::send_split(conn, pipeline))
                }
            }
        };
        if span.is_disabled() { sent } else { Box::pin(sent.instrument(span)) }
    }

    fn get_db(&self) -> i64 {
        match &self.inner {
            Connection::Node(conn) => conn.get_db(),
            Connection::Cluster(_) => 0,
        }
    }
}

/// The span of one Redis command, named by the command (`redis EVALSHA`); never its keys or
/// values. DEBUG, so it exists only for the trace export (`telemetry::otel`), not in logs.
fn command_span(cmd: &Cmd) -> tracing::Span {
    let span = tracing::debug_span!(
        "redis",
        otel.name = tracing::field::Empty,
        otel.kind = "client",
        db.system = "redis",
        db.operation = tracing::field::Empty,
    );
    if !span.is_disabled() {
        let name = match cmd.args_iter().next() {
            Some(redis::Arg::Simple(bytes)) => String::from_utf8_lossy(bytes).to_ascii_uppercase(),
            _ => String::from("?"),
        };
        span.record("otel.name", format!("redis {name}"));
        span.record("db.operation", name);
    }
    span
}

/// A stream entry id, `<ms>-<seq>`, as its two numbers; `None` when it is not one.
pub(crate) fn parse_stream_id(id: &str) -> Option<(u64, u64)> {
    let (ms, seq) = id.split_once('-')?;
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

/// A Lua script made of files of `lua/` in order: a prelude that defines shared functions
/// (`lua/fixed_window.lua`) and the script's own file. Loaded once, run by EVALSHA.
pub(crate) fn script(parts: &[&str]) -> redis::Script {
    redis::Script::new(&parts.concat())
}

/// Opens a self-reconnecting connection, failing within `timeout` with one sentence. `role`
/// names who uses it (`api`, `worker`, …) in the command metrics.
pub async fn connect(url: &str, timeout: Duration, role: &'static str) -> AppResult<Redis> {
    let client = redis::Client::open(url)
        .map_err(|e| AppError::Config(format!("REDIS_URL `{url}` is not a valid Redis URL ({e})")))?;
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(1);
    let connect = ConnectionManager::new_with_config(client, config);
    let mut conn = tokio::time::timeout(timeout + Duration::from_millis(500), connect)
        .await
        .map_err(|_| AppError::Config(format!("cannot reach Redis at {url} (timed out)")))?
        .map_err(|e| AppError::Config(format!("cannot reach Redis at {url} ({e})")))?;
    let _: String = redis::cmd("PING")
        .query_async(&mut conn)
        .await
        .map_err(|e| AppError::Config(format!("cannot reach Redis at {url} ({e})")))?;
    Ok(Redis { inner: Connection::Node(conn), commands: Arc::new(AtomicU64::new(0)), role })
}

/// Opens a connection to where the settings put Redis (`REDIS_CLUSTER_NODES`, else `REDIS_URL`).
pub async fn connect_to(target: &RedisTarget, timeout: Duration, role: &'static str) -> AppResult<Redis> {
    match target {
        RedisTarget::Node(url) => connect(url, timeout, role).await,
        RedisTarget::Cluster(nodes) => connect_cluster(nodes, timeout, role).await,
    }
}

/// Opens a connection to a Redis Cluster from its seed nodes (`redis://host:port` each),
/// failing within `timeout` with one sentence. `role` as in `connect`.
pub async fn connect_cluster(nodes: &[String], timeout: Duration, role: &'static str) -> AppResult<Redis> {
    let conn = cluster::connect(nodes, timeout).await?;
    Ok(Redis { inner: Connection::Cluster(conn), commands: Arc::new(AtomicU64::new(0)), role })
}

/// Buffered likes live in Redis until the worker commits them: a policy that may evict any
/// key (`allkeys-*`) could evict the stream and lose likes. Refuse to start on one.
pub(crate) async fn refuse_evicting_policy(redis: &Redis) -> AppResult<()> {
    let mut conn = redis.clone();
    let reply: redis::RedisResult<Vec<String>> =
        redis::cmd("CONFIG").arg("GET").arg("maxmemory-policy").query_async(&mut conn).await;
    // A managed Redis may forbid CONFIG; then the operator's documentation is the guard.
    let Ok(pair) = reply else { return Ok(()) };
    match pair.get(1) {
        Some(policy) if policy.starts_with("allkeys-") => Err(AppError::Config(format!(
            "Redis maxmemory-policy is `{policy}`, which can evict the like stream: set it to noeviction or \
             volatile-* (or set ALLOW_EVICTING_REDIS=true to accept losing likes)"
        ))),
        _ => Ok(()),
    }
}

/// Sends a pipeline that runs scripts by EVALSHA (`Pipeline::invoke_script` does not load them).
/// When Redis does not know one — it restarted, or its script cache was flushed — `scripts` are
/// loaded and the pipeline is sent once more. Commands that did run the first time run again, so
/// a pipeline sent through here must be safe to repeat (every caller's is: ZADDs, stores checked
/// against a generation, releases checked against an owner token).
pub async fn query_scripts<T: FromRedisValue>(redis: &Redis, pipe: &Pipeline, scripts: &[&Script]) -> AppResult<T> {
    let mut conn = redis.clone();
    match pipe.query_async(&mut conn).await {
        Err(err) if err.code() == Some("NOSCRIPT") => {
            load_scripts(redis, scripts).await?;
            Ok(pipe.query_async(&mut conn).await?)
        }
        other => Ok(other?),
    }
}

/// Loads scripts into Redis's script cache (at start-up, so the first pipelines find them).
pub(crate) async fn load_scripts(redis: &Redis, scripts: &[&Script]) -> AppResult<()> {
    let mut conn = redis.clone();
    for script in scripts {
        let _: String = script.load_async(&mut conn).await?;
    }
    Ok(())
}

/// The keys matching a SCAN pattern, a page (`COUNT 1000`) at a time, so Redis is never
/// blocked and the caller never holds more than it needs. On a cluster it scans every master
/// in turn.
pub struct KeyScan {
    redis: Redis,
    pattern: String,
    /// The masters still to scan (cluster only; listed on the first page). The front one is
    /// being scanned, at `cursor`.
    masters: Option<std::collections::VecDeque<cluster::NodeAddress>>,
    /// The next cursor; `None` once the scan is complete.
    cursor: Option<u64>,
}

impl KeyScan {
    pub fn new(redis: &Redis, pattern: &str) -> Self {
        Self { redis: redis.clone(), pattern: pattern.to_owned(), masters: None, cursor: Some(0) }
    }

    /// The next page of matching keys (possibly empty), or `None` when the scan is complete.
    pub async fn next_page(&mut self) -> AppResult<Option<Vec<String>>> {
        let Some(cursor) = self.cursor else { return Ok(None) };
        let mut scan = redis::cmd("SCAN");
        scan.arg(cursor).arg("MATCH").arg(&self.pattern).arg("COUNT").arg(1000);
        let Some(conn) = self.redis.cluster() else {
            let (next, keys): (u64, Vec<String>) = scan.query_async(&mut self.redis.clone()).await?;
            self.cursor = (next != 0).then_some(next);
            return Ok(Some(keys));
        };
        if self.masters.is_none() {
            self.masters = Some(cluster::masters(conn).await?.into());
        }
        let Some(masters) = self.masters.as_mut() else { return Ok(None) };
        let Some(node) = masters.front() else {
            self.cursor = None;
            return Ok(None);
        };
        self.redis.count(1);
        let reply = conn.clone().route_command(scan, node.route()).await?;
        let (next, keys): (u64, Vec<String>) = redis::from_redis_value(reply).map_err(redis::RedisError::from)?;
        if next == 0 {
            // This master is done; the next one starts from cursor 0.
            masters.pop_front();
            self.cursor = (!masters.is_empty()).then_some(0);
        } else {
            self.cursor = Some(next);
        }
        Ok(Some(keys))
    }
}

/// Drops every key matching a SCAN pattern (SCAN, then one UNLINK per key in a pipeline, which
/// a cluster splits per slot), a page at a time; returns how many were dropped.
pub async fn unlink_matching(redis: &Redis, pattern: &str) -> AppResult<u64> {
    let mut scan = KeyScan::new(redis, pattern);
    let mut conn = redis.clone();
    let mut dropped = 0;
    while let Some(keys) = scan.next_page().await? {
        if !keys.is_empty() {
            let mut pipe = redis::pipe();
            for key in &keys {
                pipe.cmd("UNLINK").arg(key);
            }
            let counts: Vec<u64> = pipe.query_async(&mut conn).await?;
            dropped += counts.iter().sum::<u64>();
        }
    }
    Ok(dropped)
}
