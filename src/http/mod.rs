//! HTTP transport: `POST /graphql`, subscriptions at `/graphql/ws` (`ws`), GraphiQL at `/` and
//! the demo forum at `/demo` (`playground`, from local files), `/healthz`, `/metrics`. Authentication
//! happens here, once per request; the schema only sees the resulting `Viewer`.

use async_graphql::{Response as GqlResponse, ServerError};
use async_graphql_axum::{GraphQLRequest, GraphQLResponse};
use axum::Router;
use axum::extract::{ConnectInfo, DefaultBodyLimit, State};
use axum::http::{HeaderMap, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::auth::Viewer;
use crate::error::AppError;
use crate::graphql::{AppSchema, errors::assign_code, loaders::Loaders};
use crate::state::AppState;

mod playground;
mod ws;

#[derive(Clone)]
struct HttpState {
    app: AppState,
    schema: AppSchema,
}

pub fn router(app: AppState, schema: AppSchema) -> Router {
    let body_limit = app.settings.max_body_bytes;
    let playground = playground::routes(&app.settings);
    Router::new()
        .route("/", get(graphiql))
        .route("/graphql", get(graphiql).post(graphql))
        .route("/graphql/ws", get(ws::upgrade))
        .route("/healthz", get(|| async { "ok" }))
        .route("/metrics", get(metrics))
        .merge(playground)
        .layer(DefaultBodyLimit::max(body_limit))
        // async-graphql-axum reads the body stream itself, past DefaultBodyLimit: limit the stream.
        .layer(tower_http::limit::RequestBodyLimitLayer::new(body_limit))
        .with_state(HttpState { app, schema })
}

/// Prometheus text exposition of every metric this process recorded.
async fn metrics() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], crate::telemetry::metrics().render())
}

async fn graphiql(State(state): State<HttpState>) -> impl IntoResponse {
    playground::graphiql_index(&state.app.settings.playground_dir).await
}

#[tracing::instrument(name = "graphql", skip_all, fields(request_id = %uuid::Uuid::now_v7()))]
async fn graphql(
    State(state): State<HttpState>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    headers: HeaderMap,
    request: GraphQLRequest,
) -> GraphQLResponse {
    let mut request = request.into_inner();
    let viewer = match headers.get(header::AUTHORIZATION) {
        None => None,
        Some(value) => {
            let verified = value
                .to_str()
                .map_err(|_| AppError::Unauthenticated("Authorization header is not text".into()))
                .and_then(|v| state.app.tokens.verify_header(v));
            match verified {
                Ok(user_id) => Some(user_id),
                Err(err) => return error_response(err).into(),
            }
        }
    };
    request = request.data(Loaders::new(&state.app.db, &state.app.likes, &state.app.views, viewer));
    let ip = crate::views::client_ip(peer, &headers, state.app.settings.trusted_proxy);
    request = request.data(crate::views::ClientIp(ip));
    if let Some(user_id) = viewer {
        request = request.data(Viewer::new(user_id));
    }
    state.schema.execute(request).await.into()
}

/// A GraphQL response carrying one error, for failures before execution.
fn error_response(err: AppError) -> GqlResponse {
    let mut server_error = ServerError::new(err.to_string(), None);
    server_error.source = Some(std::sync::Arc::new(err));
    assign_code(&mut server_error);
    GqlResponse::from_errors(vec![server_error])
}
