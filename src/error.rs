//! The one error type. Every failure a user can cause maps to a stable, machine-readable code
//! (`extensions.code` on the wire); internal failures are logged with detail and shown opaque.
//! A backing service that cannot be reached (PostgreSQL or Redis down, a connection cut) is
//! `UNAVAILABLE`: the client did nothing wrong and may retry; nothing was changed.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum AppError {
    #[error("{0}")]
    Unauthenticated(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    BadUserInput(String),
    /// The request would make a second of something that must be unique (a course code).
    #[error("{0}")]
    Conflict(String),
    /// The request ran past `REQUEST_TIMEOUT`, or one of its statements past
    /// `STATEMENT_TIMEOUT` (then PostgreSQL cancelled it and rolled its transaction back).
    #[error("{0}")]
    Timeout(String),
    /// The request ran more SQL statements than `REQUEST_STATEMENT_BUDGET` and was abandoned.
    #[error("the request ran more than {limit} SQL statements and was stopped; ask for fewer objects at once")]
    StatementBudgetExceeded { limit: u64 },
    /// Over a limit. `what` says which one, for people (`too many new posts: at most 10 per
    /// 1m`); `retry_after_ms` (0 when waiting alone will not help) is sent as `retryAfterMs`.
    #[error("{what}{}", retry_hint(*retry_after_ms))]
    RateLimited { what: String, retry_after_ms: u64 },
    /// A persisted query's hash the server does not know (the client sends the text once).
    /// The message is the one Apollo clients look for.
    #[error("PersistedQueryNotFound")]
    PersistedQueryNotFound,
    /// This instance has no room for what was asked right now (a websocket over the descriptor
    /// capacity, `ops::descriptors`): nothing was done; the client may retry, or go elsewhere.
    #[error("{0}")]
    AtCapacity(String),
    /// A setting is missing or malformed; the message is the sentence printed at start-up.
    #[error("{0}")]
    Config(String),
    #[error("database error: {0}")]
    Database(#[from] sea_orm::DbErr),
    #[error("redis error: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("internal error: {0}")]
    Internal(String),
    /// `course-forum check` found invariants that do not hold (its report says which).
    #[error("{failed} check(s) failed")]
    CheckFailed { failed: usize },
}

/// A backing service the server depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Service {
    Postgres,
    Redis,
}

impl AppError {
    /// The code clients switch on.
    pub fn code(&self) -> &'static str {
        match self {
            AppError::Unauthenticated(_) => "UNAUTHENTICATED",
            AppError::Forbidden(_) => "FORBIDDEN",
            AppError::NotFound(_) => "NOT_FOUND",
            AppError::BadUserInput(_) => "BAD_USER_INPUT",
            AppError::Conflict(_) => "CONFLICT",
            AppError::RateLimited { .. } => "RATE_LIMITED",
            AppError::Timeout(_) => "TIMEOUT",
            AppError::StatementBudgetExceeded { .. } => "STATEMENT_BUDGET_EXCEEDED",
            AppError::PersistedQueryNotFound => "PERSISTED_QUERY_NOT_FOUND",
            AppError::AtCapacity(_) => "UNAVAILABLE",
            _ if self.unreachable().is_some() => "UNAVAILABLE",
            // 57014: query_canceled, what STATEMENT_TIMEOUT raises.
            AppError::Database(_) if self.sqlstate().as_deref() == Some("57014") => "TIMEOUT",
            AppError::Config(_)
            | AppError::Database(_)
            | AppError::Redis(_)
            | AppError::Internal(_)
            | AppError::CheckFailed { .. } => "INTERNAL",
        }
    }

    /// The service this error says cannot be reached right now, if it says so: a connection
    /// refused, cut or timed out, a pool that cannot hand out a connection, a server shutting
    /// down, still loading its data, or (Redis) full under `noeviction`. Such errors are retried (the worker) or shown as
    /// `UNAVAILABLE` (the API), never dead-lettered and never blamed on the client.
    pub fn unreachable(&self) -> Option<Service> {
        match self {
            AppError::Database(db) if database_unreachable(db) => Some(Service::Postgres),
            AppError::Redis(redis) if redis_unreachable(redis) => Some(Service::Redis),
            _ => None,
        }
    }

    /// What a client is told when a service is unreachable (the detail goes to the log).
    pub fn unreachable_message(service: Service) -> &'static str {
        match service {
            Service::Postgres => "the database is unreachable right now; nothing was changed, try again shortly",
            Service::Redis => "the cache (Redis) is unreachable right now; nothing was changed, try again shortly",
        }
    }

    /// The SQLSTATE of a database error PostgreSQL reported, if any.
    pub fn sqlstate(&self) -> Option<String> {
        let AppError::Database(db) = self else { return None };
        sqlx_error(db)?.as_database_error()?.code().map(|code| code.into_owned())
    }

    /// True when the detail must not reach a client.
    pub fn is_internal(&self) -> bool {
        self.code() == "INTERNAL"
    }

    pub fn bad_input(msg: impl Into<String>) -> Self {
        AppError::BadUserInput(msg.into())
    }

    pub fn not_found(what: &str) -> Self {
        AppError::NotFound(format!("{what} not found"))
    }
}

pub type AppResult<T> = Result<T, AppError>;

fn retry_hint(retry_after_ms: u64) -> String {
    if retry_after_ms == 0 { String::new() } else { format!("; try again in {retry_after_ms} ms") }
}

fn sqlx_error(db: &sea_orm::DbErr) -> Option<&sea_orm::sqlx::Error> {
    use sea_orm::{DbErr, RuntimeErr};
    match db {
        DbErr::Conn(RuntimeErr::SqlxError(e))
        | DbErr::Exec(RuntimeErr::SqlxError(e))
        | DbErr::Query(RuntimeErr::SqlxError(e)) => Some(e.as_ref()),
        _ => None,
    }
}

fn database_unreachable(db: &sea_orm::DbErr) -> bool {
    use sea_orm::sqlx::Error as Sqlx;
    match db {
        sea_orm::DbErr::Conn(_) | sea_orm::DbErr::ConnectionAcquire(_) => true,
        _ => match sqlx_error(db) {
            Some(Sqlx::Io(_) | Sqlx::Tls(_) | Sqlx::Protocol(_) | Sqlx::PoolTimedOut | Sqlx::PoolClosed) => true,
            Some(Sqlx::WorkerCrashed) => true,
            Some(e) => e.as_database_error().and_then(|d| d.code()).is_some_and(|code| {
                // 08: connection exception; 57P01-57P03: admin/crash shutdown, cannot connect now.
                code.starts_with("08") || matches!(code.as_ref(), "57P01" | "57P02" | "57P03")
            }),
            None => false,
        },
    }
}

fn redis_unreachable(err: &redis::RedisError) -> bool {
    err.is_io_error()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || err.is_timeout()
        || err.is_unrecoverable_error()
        // A cluster with no reachable node for the slot (its master killed, no replica
        // promoted yet).
        || err.kind() == redis::ErrorKind::ClusterConnectionNotFound
        // Up but unable to serve for now: loading its AOF after a restart, full under
        // `noeviction`, a replica being promoted, a failed snapshot blocking writes, a slot
        // whose master is down or that kept moving (`kv::cluster` follows a few redirects).
        || matches!(
            err.code(),
            Some(
                "LOADING" | "OOM" | "READONLY" | "MISCONF" | "TRYAGAIN" | "CLUSTERDOWN" | "MASTERDOWN" | "MOVED" | "ASK"
            )
        )
}
