//! Short Redis locks that let exactly one request do an expensive thing — load a post into the
//! cache, rebuild a timeline — while the others wait briefly or serve what they already have.
//!
//! Taking one is `SET key token NX PX ttl` with a fresh owner token per acquisition (two
//! requests of one process never share ownership); giving it back is the compare-and-delete of
//! `lua/lease_release.lua`, so a holder whose lock expired can never delete its successor's.
//! The TTL bounds how long a crashed holder keeps the others waiting.

use std::sync::Arc;
use std::time::Duration;

use redis::{Pipeline, Script};

use super::Redis;
use crate::error::AppResult;

#[derive(Clone)]
pub(crate) struct Locks {
    redis: Redis,
    release: Arc<Script>,
}

impl Locks {
    pub(crate) fn new(redis: Redis) -> Self {
        Self { redis, release: Arc::new(Script::new(include_str!("../../lua/lease_release.lua"))) }
    }

    /// A fresh owner token.
    pub(crate) fn token() -> String {
        uuid::Uuid::new_v4().simple().to_string()
    }

    /// Adds the attempt to take `key` to a pipeline; its reply is `OK` when taken, nil when held.
    pub(crate) fn acquire_in(pipe: &mut Pipeline, key: &str, token: &str, ttl: Duration) {
        pipe.cmd("SET").arg(key).arg(token).arg("NX").arg("PX").arg(ttl.as_millis().max(1) as u64);
    }

    /// Adds the owner's release of `key` to a pipeline (reply 1 when released, 0 when it was no
    /// longer ours). Send the pipeline with `kv::query_scripts(…, &[locks.release_script()])`.
    pub(crate) fn release_in(&self, pipe: &mut Pipeline, key: &str, token: &str) {
        pipe.invoke_script(self.release.key(key).arg(token));
    }

    pub(crate) fn release_script(&self) -> &Script {
        &self.release
    }

    /// Releases `key` if `token` still owns it.
    pub(crate) async fn release(&self, key: &str, token: &str) -> AppResult<bool> {
        let released: i64 = self.release.key(key).arg(token).invoke_async(&mut self.redis.clone()).await?;
        Ok(released == 1)
    }
}
