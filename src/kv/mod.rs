//! Redis: connecting with bounded timeouts, the key layout (`keys`), and the Lua scripts of
//! `lua/`, each loaded once and run by EVALSHA.

pub mod keys;
pub mod ratelimit;

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::error::{AppError, AppResult};

/// Opens a self-reconnecting connection, failing within `timeout` with one sentence.
pub async fn connect(url: &str, timeout: Duration) -> AppResult<ConnectionManager> {
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
    Ok(conn)
}

/// Buffered likes live in Redis until the worker commits them: a policy that may evict any
/// key (`allkeys-*`) could evict the stream and lose likes. Refuse to start on one.
pub async fn refuse_evicting_policy(redis: &ConnectionManager) -> AppResult<()> {
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
