//! The one error type. Every failure a user can cause maps to a stable, machine-readable code
//! (`extensions.code` on the wire); internal failures are logged with detail and shown opaque.

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
    #[error("too many requests: try again in {retry_after_ms} ms")]
    RateLimited { retry_after_ms: u64 },
    /// A setting is missing or malformed; the message is the sentence printed at start-up.
    #[error("{0}")]
    Config(String),
    #[error("database error: {0}")]
    Database(#[from] sea_orm::DbErr),
    #[error("redis error: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("internal error: {0}")]
    Internal(String),
}

impl AppError {
    /// The code clients switch on.
    pub fn code(&self) -> &'static str {
        match self {
            AppError::Unauthenticated(_) => "UNAUTHENTICATED",
            AppError::Forbidden(_) => "FORBIDDEN",
            AppError::NotFound(_) => "NOT_FOUND",
            AppError::BadUserInput(_) => "BAD_USER_INPUT",
            AppError::RateLimited { .. } => "RATE_LIMITED",
            AppError::Config(_) | AppError::Database(_) | AppError::Redis(_) | AppError::Internal(_) => "INTERNAL",
        }
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
