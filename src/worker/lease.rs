//! A lease in Redis: SET NX PX to take it, renewal and release only by its owner (Lua
//! compare-and-act, since Redis 7 has no DELEX). One lease per stream shard guarantees one
//! active consumer, so a like and its unlike never commit out of order.

use std::sync::Arc;
use std::time::Duration;

use crate::kv::Redis;
use redis::Script;

use crate::error::AppResult;

#[derive(Clone)]
pub(crate) struct Lease {
    redis: Redis,
    owner: String,
    ttl: Duration,
    renew: Arc<Script>,
    release: Arc<Script>,
}

/// What `hold` found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Holding {
    /// We held it already and extended it.
    Renewed,
    /// It was free and is ours now (the previous owner's pending entries must be claimed).
    Acquired,
    /// Someone else holds it.
    Elsewhere,
}

impl Lease {
    pub(crate) fn new(redis: Redis, owner: String, ttl: Duration) -> Self {
        Self {
            redis,
            owner,
            ttl,
            renew: Arc::new(Script::new(include_str!("../../lua/lease_renew.lua"))),
            release: Arc::new(Script::new(include_str!("../../lua/lease_release.lua"))),
        }
    }

    pub(crate) fn owner(&self) -> &str {
        &self.owner
    }

    /// Renews the lease at `key` if ours, else tries to take it.
    pub(crate) async fn hold(&self, key: &str) -> AppResult<Holding> {
        let mut conn = self.redis.clone();
        let ttl_ms = self.ttl.as_millis() as u64;
        let renewed: i64 = self.renew.key(key).arg(&self.owner).arg(ttl_ms).invoke_async(&mut conn).await?;
        if renewed == 1 {
            return Ok(Holding::Renewed);
        }
        let taken: Option<String> =
            redis::cmd("SET").arg(key).arg(&self.owner).arg("NX").arg("PX").arg(ttl_ms).query_async(&mut conn).await?;
        Ok(if taken.is_some() { Holding::Acquired } else { Holding::Elsewhere })
    }

    /// Gives the lease up, only if we own it.
    pub(crate) async fn release(&self, key: &str) -> AppResult<bool> {
        let mut conn = self.redis.clone();
        let released: i64 = self.release.key(key).arg(&self.owner).invoke_async(&mut conn).await?;
        Ok(released == 1)
    }
}
