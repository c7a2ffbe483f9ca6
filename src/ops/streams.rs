//! The state of the buffered like path, read from Redis: per stream shard, how many likes wait
//! (and how long the oldest has waited), how many the worker holds unacknowledged, who holds
//! the shard's lease; and how many dead letters wait.
//!
//! Because the worker removes every entry it acknowledges, every entry still in a stream is a
//! like not yet applied: `entries = pending + lag`, and the first entry's id (a Redis-clock
//! millisecond timestamp) dates the oldest unapplied like. That age is the lag that matters
//! to a student ("my like is not counted yet"), and the one `check` bounds.

use std::time::Duration;

use redis::{FromRedisValue, Value};

use crate::error::{AppError, AppResult};
use crate::kv::Redis;
use crate::kv::keys::{Keys, LIKE_GROUP};

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ShardStatus {
    pub shard: u32,
    /// The stream key exists (the worker creates it with its group on start).
    pub exists: bool,
    /// The consumer group exists.
    pub group: bool,
    /// Unapplied likes in the stream.
    pub entries: u64,
    /// Delivered to the worker, not yet acknowledged.
    pub pending: u64,
    /// Not yet delivered to the worker.
    pub lag: u64,
    /// Age of the oldest unapplied like, in milliseconds (None when there is none).
    pub oldest_age_ms: Option<u64>,
    /// The lease owner (a worker's consumer name), if any holds it.
    pub lease_holder: Option<String>,
    /// Milliseconds left on the lease.
    pub lease_ttl_ms: Option<i64>,
}

impl ShardStatus {
    pub fn oldest_age(&self) -> Duration {
        Duration::from_millis(self.oldest_age_ms.unwrap_or(0))
    }
}

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct StreamsStatus {
    pub shards: Vec<ShardStatus>,
    /// Entries in the dead-letter stream.
    pub dead_letters: u64,
}

/// Reads every shard's status in two pipelined round trips (never blocking, never writing).
pub async fn status(redis: &Redis, keys: &Keys) -> AppResult<StreamsStatus> {
    let mut conn = redis.clone();
    let mut pipe = redis::pipe();
    pipe.cmd("TIME").cmd("XLEN").arg(keys.dead_letters());
    for shard in 0..keys.shards() {
        let stream = keys.like_stream(shard);
        pipe.cmd("EXISTS").arg(&stream);
        pipe.cmd("XLEN").arg(&stream);
        pipe.cmd("XRANGE").arg(&stream).arg("-").arg("+").arg("COUNT").arg(1);
        pipe.cmd("GET").arg(keys.worker_lease(shard));
        pipe.cmd("PTTL").arg(keys.worker_lease(shard));
    }
    let replies: Vec<Value> = pipe.query_async(&mut conn).await?;
    let mut replies = replies.into_iter();
    let mut next = || replies.next().ok_or_else(|| AppError::Internal("short pipeline reply".into()));
    let (seconds, micros): (u64, u64) = decode(next()?)?;
    let now_ms = seconds * 1000 + micros / 1000;
    let dead_letters: u64 = decode(next()?)?;
    let mut shards = Vec::with_capacity(keys.shards() as usize);
    for shard in 0..keys.shards() {
        let exists: bool = decode(next()?)?;
        let entries: u64 = decode(next()?)?;
        let first: redis::streams::StreamRangeReply = decode(next()?)?;
        let lease_holder: Option<String> = decode(next()?)?;
        let lease_ttl: i64 = decode(next()?)?;
        let oldest_age_ms =
            first.ids.first().and_then(|entry| entry_millis(&entry.id)).map(|ms| now_ms.saturating_sub(ms));
        shards.push(ShardStatus {
            shard,
            exists,
            entries,
            oldest_age_ms,
            lease_ttl_ms: lease_holder.as_ref().map(|_| lease_ttl),
            lease_holder,
            ..Default::default()
        });
    }
    // XINFO GROUPS fails on a missing key: ask only about streams that exist.
    let existing: Vec<usize> = shards.iter().enumerate().filter(|(_, s)| s.exists).map(|(i, _)| i).collect();
    if !existing.is_empty() {
        let mut pipe = redis::pipe();
        for &i in &existing {
            pipe.cmd("XINFO").arg("GROUPS").arg(keys.like_stream(shards[i].shard));
        }
        let groups: Vec<redis::streams::StreamInfoGroupsReply> = pipe.query_async(&mut conn).await?;
        for (&i, reply) in existing.iter().zip(groups) {
            let shard = &mut shards[i];
            if let Some(group) = reply.groups.into_iter().find(|g| g.name == LIKE_GROUP) {
                shard.group = true;
                shard.pending = group.pending as u64;
            }
            shard.lag = shard.entries.saturating_sub(shard.pending);
        }
    }
    Ok(StreamsStatus { shards, dead_letters })
}

fn decode<T: FromRedisValue>(value: Value) -> AppResult<T> {
    T::from_redis_value(value).map_err(|e| AppError::Redis(e.into()))
}

/// The millisecond part of a stream entry id (`<ms>-<seq>`).
fn entry_millis(id: &str) -> Option<u64> {
    crate::kv::parse_stream_id(id).map(|(ms, _)| ms)
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_entry_id_dates_its_entry() {
        assert_eq!(super::entry_millis("1712345678901-3"), Some(1_712_345_678_901));
        assert_eq!(super::entry_millis("garbage"), None);
    }
}
