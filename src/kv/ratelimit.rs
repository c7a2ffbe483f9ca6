//! Per-user rate limits in Redis (fixed window, one atomic script), shared by every instance.
//! The window logic is `lua/fixed_window.lua`, which the buffered like toggle also runs inside
//! its own script (one round trip for the limit and the toggle).

use std::time::Duration;

use crate::kv::Redis;
use redis::Script;

use crate::error::{AppError, AppResult};

/// Allows `limit` events per `window` per key; `limit == 0` disables the check.
#[derive(Clone)]
pub struct RateLimiter {
    redis: Redis,
    script: std::sync::Arc<Script>,
    limit: u32,
    window: Duration,
}

impl RateLimiter {
    pub fn new(redis: Redis, limit: u32, window: Duration) -> Self {
        let script = std::sync::Arc::new(crate::kv::script(&[
            include_str!("../../lua/fixed_window.lua"),
            include_str!("../../lua/rate_limit.lua"),
        ]));
        Self { redis, script, limit, window }
    }

    /// Events allowed per window (0: no limit).
    pub fn limit(&self) -> u32 {
        self.limit
    }

    pub fn window(&self) -> Duration {
        self.window
    }

    /// Counts one event against `key`, or fails with RATE_LIMITED (counting nothing else).
    pub async fn check(&self, key: &str) -> AppResult<()> {
        if self.limit == 0 {
            return Ok(());
        }
        let mut conn = self.redis.clone();
        let retry_after_ms: u64 =
            self.script.key(key).arg(self.limit).arg(self.window.as_millis() as u64).invoke_async(&mut conn).await?;
        if retry_after_ms > 0 {
            return Err(AppError::RateLimited { retry_after_ms });
        }
        Ok(())
    }
}
