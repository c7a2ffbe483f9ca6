//! Gives every GraphQL error an `extensions.code`. Resolver errors carry an `AppError` as their
//! source and take its code; internal ones are logged and replaced by an opaque message.
//! Errors raised by async-graphql itself (parse, validation, depth, complexity, argument
//! coercion) are the client's fault: BAD_USER_INPUT. A service that cannot be reached is
//! UNAVAILABLE, with a fixed message (the detail is logged).

use std::sync::Arc;

use async_graphql::{Response, ServerError};

use crate::error::AppError;

/// Gives every error of a response its code (`hooks::RequestHooks` calls it on every answer).
pub(crate) fn assign_codes(response: &mut Response) {
    response.errors.iter_mut().for_each(assign_code);
}

fn app_error(err: &ServerError) -> Option<&AppError> {
    err.source::<AppError>().or_else(|| err.source::<Arc<AppError>>().map(|arc| arc.as_ref()))
}

/// Sets the code of one error (keeping one a resolver set explicitly).
pub(crate) fn assign_code(err: &mut ServerError) {
    let code = match app_error(err) {
        Some(app) if let Some(service) = app.unreachable() => {
            tracing::warn!(error = %app, path = ?err.path, "a backing service is unreachable");
            err.message = AppError::unreachable_message(service).to_owned();
            "UNAVAILABLE"
        }
        Some(app @ AppError::Database(_)) if app.code() == "TIMEOUT" => {
            tracing::warn!(error = %app, path = ?err.path, "a statement ran past STATEMENT_TIMEOUT and was cancelled");
            err.message = "a statement ran too long and was cancelled; its transaction was rolled back".to_owned();
            "TIMEOUT"
        }
        Some(app) if app.is_internal() => {
            tracing::error!(error = %app, path = ?err.path, "internal error while resolving");
            err.message = "internal error".to_owned();
            "INTERNAL"
        }
        Some(app) => app.code(),
        None => {
            if err.extensions.as_ref().is_some_and(|ext| ext.get("code").is_some()) {
                return;
            }
            "BAD_USER_INPUT"
        }
    };
    err.extensions.get_or_insert_with(Default::default).set("code", code);
    if let Some(AppError::RateLimited { retry_after_ms, .. }) = app_error(err) {
        let retry = *retry_after_ms;
        err.extensions.get_or_insert_with(Default::default).set("retryAfterMs", retry);
    }
}

/// Runs a root field's resolver as a nullable field: every query and mutation root field is
/// nullable, so a failure (FORBIDDEN, RATE_LIMITED, NOT_FOUND…) nulls that field alone, with its
/// error at its path, and its siblings keep their data (docs/api.md, "Nullability").
pub(crate) async fn nullable<T>(
    resolver: impl std::future::Future<Output = async_graphql::Result<T>>,
) -> async_graphql::Result<Option<T>> {
    resolver.await.map(Some)
}
