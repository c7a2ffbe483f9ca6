//! Redis: connecting with bounded timeouts, the key layout (`keys`), and the Lua scripts of
//! `lua/`, each loaded once and run by EVALSHA.

pub mod keys;
pub mod ratelimit;

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::error::{AppError, AppResult};

/// Opens a self-reconnecting connection, failing within `timeout` with one sentence.
pub async fn connect(url: &str, timeout: Duration) -> AppResult<ConnectionManager> {
    let client = redis::Client::open(url).map_err(|e| {
        AppError::Config(format!("REDIS_URL `{url}` is not a valid Redis URL ({e})"))
    })?;
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
