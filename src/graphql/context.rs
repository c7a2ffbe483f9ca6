//! What every resolver reads from the request: the shared state and the viewer.

use async_graphql::Context;

use crate::auth::Viewer;
use crate::error::{AppError, AppResult};
use crate::state::AppState;

pub(crate) fn state<'a>(ctx: &Context<'a>) -> AppResult<&'a AppState> {
    ctx.data::<AppState>().map_err(|_| AppError::Internal("AppState missing from schema data".into()))
}

/// The authenticated viewer, or UNAUTHENTICATED.
pub(crate) fn viewer<'a>(ctx: &Context<'a>) -> AppResult<&'a Viewer> {
    ctx.data_opt::<Viewer>()
        .ok_or_else(|| AppError::Unauthenticated("sign in: send `Authorization: Bearer <token>`".into()))
}
