//! Operations: what operators and orchestrators ask of a running system.
//!
//! - `streams` — the like streams' state read from Redis: unapplied, pending and undelivered
//!   likes per shard, the age of the oldest, lease holders, dead letters.
//! - `ready`   — the readiness report of `GET /readyz` (PostgreSQL, Redis, worker leases,
//!   descriptor headroom).
//! - `descriptors` — file descriptors as a resource: the soft limit raised at start, the
//!   websocket admission below the limit less `WS_DESCRIPTOR_RESERVE`, the headroom reported.
//! - `check`   — the invariants `course-forum check` verifies (counters equal rows, no dead
//!   letters, lag under a bound, liked-sets that agree with PostgreSQL once nothing is
//!   pending — `liked_sets`).
//! - `refresh_gauges` — the gauges `/metrics` reads from Redis at scrape time.
//!
//! Counters and histograms of the request, like, live and view paths are recorded where they
//! happen (`telemetry::names` lists them); this module only reads state that lives in Redis,
//! so any process can report it, including a `serve` that runs no worker.

pub(crate) mod check;
pub(crate) mod descriptors;
pub(crate) mod liked_sets;
pub(crate) mod ready;
pub(crate) mod streams;

use std::time::Duration;

use crate::kv::Redis;
use crate::kv::keys::Keys;
use crate::telemetry::names;

/// How long a scrape waits for Redis before rendering without the Redis gauges.
const SCRAPE_REDIS_TIMEOUT: Duration = Duration::from_secs(2);

/// Sets the gauges that describe Redis state: per-shard stream entries, pending, lag and
/// oldest age; dead letters waiting; Redis evictions and memory. Failures are logged and
/// leave the previous values (a scrape never fails because Redis is slow).
pub(crate) async fn refresh_gauges(redis: &Redis, keys: &Keys) {
    let refreshed = tokio::time::timeout(SCRAPE_REDIS_TIMEOUT, async {
        let status = streams::status(redis, keys).await?;
        for shard in &status.shards {
            let label = shard.shard.to_string();
            metrics::gauge!(names::LIKE_STREAM_ENTRIES, "shard" => label.clone()).set(shard.entries as f64);
            metrics::gauge!(names::LIKE_STREAM_PENDING, "shard" => label.clone()).set(shard.pending as f64);
            metrics::gauge!(names::LIKE_STREAM_LAG, "shard" => label.clone()).set(shard.lag as f64);
            metrics::gauge!(names::LIKE_STREAM_OLDEST_AGE, "shard" => label).set(shard.oldest_age().as_secs_f64());
        }
        metrics::gauge!(names::LIKE_DEAD_LETTER_ENTRIES).set(status.dead_letters as f64);
        let mut conn = redis.clone();
        // A managed Redis may refuse INFO; the stream gauges above still count.
        if let Ok(info) = redis::cmd("INFO").query_async::<String>(&mut conn).await {
            if let Some(evicted) = info_field(&info, "evicted_keys") {
                metrics::counter!(names::REDIS_EVICTED_KEYS).absolute(evicted);
            }
            if let Some(used) = info_field(&info, "used_memory") {
                metrics::gauge!(names::REDIS_USED_MEMORY).set(used as f64);
            }
        }
        Ok::<(), crate::error::AppError>(())
    })
    .await;
    match refreshed {
        Ok(Ok(())) => {}
        Ok(Err(err)) => tracing::warn!(error = %err, "cannot read the like streams for /metrics"),
        Err(_) => tracing::warn!("Redis did not answer within {SCRAPE_REDIS_TIMEOUT:?}; /metrics shows older gauges"),
    }
}

/// A numeric field of an INFO reply (`name:value` lines).
fn info_field(info: &str, name: &str) -> Option<u64> {
    info.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(':')?.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    #[test]
    fn info_fields_are_read_by_exact_name() {
        let info = "# Memory\r\nused_memory:1024\r\nused_memory_rss:4096\r\n# Stats\r\nevicted_keys:7\r\n";
        assert_eq!(super::info_field(info, "used_memory"), Some(1024));
        assert_eq!(super::info_field(info, "evicted_keys"), Some(7));
        assert_eq!(super::info_field(info, "expired_keys"), None);
    }
}
