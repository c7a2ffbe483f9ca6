//! HTTP transport: `POST /graphql`, subscriptions at `/graphql/ws` (`ws`), GraphiQL at `/` and
//! the demo forum at `/demo` (`playground`, from local files), and for operators `/healthz`
//! (the process answers), `/readyz` (PostgreSQL and Redis answer; worker leases) and
//! `/metrics` (Prometheus text). Authentication happens here, once per request; the schema
//! only sees the resulting `Viewer`. Browsers from other origins reach `/graphql` and the
//! websocket only when `CORS_ALLOWED_ORIGINS` lists them (`cors`). Every request runs in an `http_request` span carrying a
//! `request_id`, which the response repeats in `x-request-id`.

use std::time::Instant;

use async_graphql::{Response as GqlResponse, ServerError};

use axum::Router;
use axum::extract::{ConnectInfo, DefaultBodyLimit, RawQuery, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::sync::watch;
use tracing::Instrument;

use crate::auth::Viewer;
use crate::db::budget::StatementBudget;
use crate::documents::persisted::Persisted;
use crate::error::AppError;
use crate::graphql::batch_gate::BatchGate;
use crate::graphql::{AppSchema, errors::assign_code, loaders::Loaders};
use crate::state::AppState;

mod cors;
mod graphql_http;
mod playground;
mod ws;
mod ws_limits;

/// What the HTTP layer knows of the process it serves in.
#[derive(Clone)]
pub(crate) struct Lifecycle {
    /// Turns true when the process begins to shut down: open websockets are then closed with
    /// 1001 (going away), so clients reconnect elsewhere.
    pub shutdown: watch::Receiver<bool>,
    /// The consumer name of the like worker this process runs, if it runs one (`/readyz`).
    pub worker: Option<String>,
    /// The runtime websocket connections run on (`live::runtime`); None: the handlers'.
    pub connections: Option<tokio::runtime::Handle>,
}

/// What every route of the API shares, behind one `Arc`: axum clones the state for each
/// request, and a clone of `AppState` itself is a few dozen reference counts.
#[derive(Clone)]
struct HttpState(std::sync::Arc<HttpShared>);

impl std::ops::Deref for HttpState {
    type Target = HttpShared;

    fn deref(&self) -> &HttpShared {
        &self.0
    }
}

struct HttpShared {
    app: AppState,
    schema: AppSchema,
    lifecycle: Lifecycle,
    /// Open websockets per user and per client address, on this instance.
    sockets: std::sync::Arc<ws_limits::SocketCaps>,
    origins: cors::AllowedOrigins,
    /// The request handlers' runtime: a socket's operations run there (`SocketExecutor`).
    home: tokio::runtime::Handle,
}

/// What the operator endpoints need.
#[derive(Clone)]
struct OpsState {
    app: AppState,
    lifecycle: Lifecycle,
}

pub(crate) fn router(app: AppState, schema: AppSchema, lifecycle: Lifecycle) -> Router {
    let body_limit = app.settings.max_body_bytes;
    let playground = playground::routes(&app.settings);
    let origins = cors::AllowedOrigins::new(&app.settings.cors_allowed_origins);
    let sockets =
        std::sync::Arc::new(ws_limits::SocketCaps::new(app.settings.ws_max_per_user, app.settings.ws_max_per_address));
    // The CORS layer answers the preflight of `/graphql` itself (OPTIONS has no handler).
    let api = Router::new().route("/graphql", get(graphql_get).post(graphql_post)).layer(origins.layer());
    Router::new()
        .route("/", get(graphiql))
        .merge(api)
        .route("/graphql/ws", get(ws::upgrade))
        .merge(playground)
        .with_state(HttpState(std::sync::Arc::new(HttpShared {
            app: app.clone(),
            schema,
            lifecycle: lifecycle.clone(),
            sockets,
            origins,
            home: tokio::runtime::Handle::current(),
        })))
        .merge(ops_routes(app, lifecycle))
        .layer(DefaultBodyLimit::max(body_limit))
        // async-graphql-axum reads the body stream itself, past DefaultBodyLimit: limit the stream.
        .layer(tower_http::limit::RequestBodyLimitLayer::new(body_limit))
        .layer(middleware::from_fn(request_span))
}

/// Only the operator endpoints (`/healthz`, `/readyz`, `/metrics`): what `course-forum worker`
/// serves on `WORKER_METRICS_BIND`, so a worker running apart is watched like a server.
pub(crate) fn ops_router(app: AppState, lifecycle: Lifecycle) -> Router {
    ops_routes(app, lifecycle).layer(middleware::from_fn(request_span))
}

fn ops_routes(app: AppState, lifecycle: Lifecycle) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(OpsState { app, lifecycle })
}

/// Runs the request in a span with a fresh id and returns the id in `x-request-id`, so a
/// client's report and the server's log lines meet. The id is ours, never the client's.
async fn request_span(request: Request, next: Next) -> Response {
    use crate::telemetry::otel;
    let id = uuid::Uuid::now_v7().to_string();
    // With traces on, the span carries OpenTelemetry's names and continues a caller's
    // `traceparent`; off, it is the log span alone (no fields nobody reads are formatted).
    let span = if otel::enabled() {
        let span = tracing::info_span!(
            "http_request",
            // The name is the route, and the path is cut: a stranger picks both (`otel::route_name`).
            otel.name = %format_args!("{} {}", request.method(), otel::route_name(request.uri().path())),
            otel.kind = "server",
            request_id = %id,
            method = %request.method(),
            path = %otel::bounded(request.uri().path(), 256),
            http.response.status_code = tracing::field::Empty,
        );
        if let Some(caller) = otel::from_headers(request.headers()) {
            caller.adopt(&span);
        }
        span
    } else {
        tracing::info_span!("http_request", request_id = %id, method = %request.method(), path = %request.uri().path())
    };
    let started = Instant::now();
    let mut response = next.run(request).instrument(span.clone()).await;
    span.record("http.response.status_code", response.status().as_u16());
    span.in_scope(|| {
        tracing::debug!(
            status = response.status().as_u16(),
            micros = started.elapsed().as_micros() as u64,
            "request served"
        )
    });
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert("x-request-id", value);
    }
    response
}

/// Prometheus text exposition of every metric this process recorded, after reading the
/// gauges that live in Redis (stream lag, dead letters).
async fn metrics(State(state): State<OpsState>) -> impl IntoResponse {
    // The scrape's own Redis reads are not a request's: they count as role="scrape".
    crate::ops::refresh_gauges(&state.app.redis.with_role("scrape"), &state.app.keys).await;
    state.app.cache_budget.publish_metrics();
    crate::ops::descriptors::publish_metrics(state.app.settings.ws_descriptor_reserve);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], crate::telemetry::metrics().render())
}

/// 200 when PostgreSQL and Redis answer, else 503; the JSON says what was found.
async fn readyz(State(state): State<OpsState>) -> impl IntoResponse {
    let report = crate::ops::ready::readiness(&state.app, state.lifecycle.worker.as_deref()).await;
    let status = if report.ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, axum::Json(report))
}

async fn graphiql(State(state): State<HttpState>) -> impl IntoResponse {
    playground::graphiql_index(&state.app.settings.playground_dir).await
}

/// `GET /graphql`: GraphiQL for a browser (no `query` parameter), else a query from the URL,
/// answered with the caching headers of `graphql_http::for_get`.
async fn graphql_get(
    State(state): State<HttpState>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    let raw = raw.unwrap_or_default();
    // A persisted query may come as its hash alone (`extensions`), with no `query`.
    let is_request =
        url::form_urlencoded::parse(raw.as_bytes()).any(|(name, _)| name == "query" || name == "extensions");
    if !is_request {
        return graphiql(State(state)).await.into_response();
    }
    let (answer, shareable) = get_answer(&state, peer, &headers, &raw).await;
    graphql_http::for_get(answer, shareable)
}

/// The answer to a GET request, and whether caches may share it: only an answer that no viewer
/// shaped, one to a caller without a token and without errors (a signed-in answer, or an
/// error, is the caller's alone).
async fn get_answer(state: &HttpState, peer: std::net::SocketAddr, headers: &HeaderMap, raw: &str) -> (Response, bool) {
    let media = match graphql_http::negotiate(headers) {
        Ok(media) => media,
        Err(refused) => return (refused.into_response(), false),
    };
    let mut request = match graphql_http::request_from_url(raw) {
        Ok(request) => request,
        Err(why) => return (not_a_request(media, why), false),
    };
    let persisted = match persisted(state, &mut request).await {
        Ok(persisted) => persisted,
        Err(refused) => return (graphql_http::respond(media, refused), false),
    };
    // On the resolved text: a persisted mutation is still POST-only.
    if let Err(refused) = graphql_http::require_query(&request.query, request.operation_name.as_deref()) {
        return (refused.into_response(), false);
    }
    let response = execute(state, peer, headers, request, persisted).await;
    let shareable = !headers.contains_key(header::AUTHORIZATION) && response.errors.is_empty();
    (graphql_http::respond(media, response), shareable)
}

/// Resolves a persisted query's text (nothing is registered yet: see `execute`); the request
/// error to answer otherwise.
async fn persisted(state: &HttpState, request: &mut async_graphql::Request) -> Result<Persisted, GqlResponse> {
    state.app.persisted_queries.resolve(request).await.map_err(|err| {
        let response = error_response(err);
        crate::graphql::metrics::record(crate::graphql::metrics::UNPARSED, None, &response.errors);
        response
    })
}

/// `POST /graphql` with a JSON body.
async fn graphql_post(
    State(state): State<HttpState>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let media = match graphql_http::negotiate(&headers) {
        Ok(media) => media,
        Err(refused) => return refused.into_response(),
    };
    if let Err(refused) = graphql_http::require_json(&headers) {
        return refused.into_response();
    }
    let mut request = match graphql_http::request_from_body(&body) {
        Ok(request) => request,
        Err(why) => return not_a_request(media, why),
    };
    let persisted = match persisted(&state, &mut request).await {
        Ok(persisted) => persisted,
        Err(refused) => return graphql_http::respond(media, refused),
    };
    graphql_http::respond(media, execute(&state, peer, &headers, request, persisted).await)
}

/// Not a well-formed GraphQL-over-HTTP request: 400 in either media type, with the reason.
fn not_a_request(media: graphql_http::MediaType, why: String) -> Response {
    let response = error_response(AppError::bad_input(why));
    crate::graphql::metrics::record(crate::graphql::metrics::UNPARSED, None, &response.errors);
    let mut answer = graphql_http::respond(media, response);
    *answer.status_mut() = StatusCode::BAD_REQUEST;
    answer
}

/// Authenticates and runs one GraphQL request under its deadline and statement budget; then
/// keeps a persisted query's text if the request offered one, validated, and came from a
/// signed-in caller (`documents::persisted`).
#[tracing::instrument(name = "graphql", skip_all)]
async fn execute(
    state: &HttpState,
    peer: std::net::SocketAddr,
    headers: &HeaderMap,
    request: async_graphql::Request,
    persisted: Persisted,
) -> GqlResponse {
    let offered = match (&persisted, headers.contains_key(header::AUTHORIZATION)) {
        (Persisted::Offered { hash }, true) => Some((hash.clone(), request.query.clone())),
        _ => None,
    };
    let (viewer, response) = run(state, peer, headers, request).await;
    if let (Some((hash, text)), Some(user_id)) = (offered, viewer)
        && !graphql_http::is_request_error(&response)
    {
        state.app.persisted_queries.register(user_id, &hash, &text).await;
    }
    response
}

/// `execute` without the persisted query: the viewer (when the token was good) and the answer.
async fn run(
    state: &HttpState,
    peer: std::net::SocketAddr,
    headers: &HeaderMap,
    mut request: async_graphql::Request,
) -> (Option<i64>, GqlResponse) {
    let started = Instant::now();
    let viewer = match headers.get(header::AUTHORIZATION) {
        None => None,
        Some(value) => {
            let verified = match value.to_str() {
                Ok(value) => state.app.auth.verify_bearer(value).await,
                Err(_) => Err(AppError::Unauthenticated("Authorization header is not text".into())),
            };
            match verified {
                Ok(token) => Some(token.user_id),
                Err(err) => {
                    let response = error_response(err);
                    crate::graphql::metrics::record(
                        crate::graphql::metrics::UNPARSED,
                        Some(started.elapsed()),
                        &response.errors,
                    );
                    return (None, response);
                }
            }
        }
    };
    let budget = StatementBudget::new(state.app.settings.request_statement_budget);
    let gate = BatchGate::new();
    let app = &state.app;
    request = request.data(Loaders::new(app, viewer, Some(&budget), Some(&gate)));
    let ip = crate::views::client_ip(peer, headers, state.app.settings.trusted_proxy);
    request = request.data(crate::views::ClientIp(ip));
    if let Some(user_id) = viewer {
        request = request.data(Viewer::new(user_id, state.app.memberships.clone()));
    }
    let deadline = state.app.settings.request_timeout;
    // Abandoned past its deadline or its statement budget: a statement still in flight is
    // cancelled by PostgreSQL at STATEMENT_TIMEOUT (shorter than the deadline), and a
    // transaction dropped unfinished rolls back.
    let stopped = tokio::select! {
        response = tokio::time::timeout(deadline, gate.run(budget.scope(state.schema.execute(request)))) => match response {
            Ok(response) => return (viewer, response),
            Err(_) => {
                tracing::warn!(?deadline, "a request ran past REQUEST_TIMEOUT and was abandoned");
                AppError::Timeout(format!("the request ran past its deadline of {deadline:?} and was stopped"))
            }
        },
        () = budget.exceeded() => {
            tracing::warn!(limit = budget.limit(), "a request ran past REQUEST_STATEMENT_BUDGET and was abandoned");
            AppError::StatementBudgetExceeded { limit: budget.limit() }
        }
    };
    let response = error_response(stopped);
    crate::graphql::metrics::record(crate::graphql::metrics::UNPARSED, Some(started.elapsed()), &response.errors);
    (viewer, response)
}

/// A GraphQL response carrying one error, for failures before execution.
fn error_response(err: AppError) -> GqlResponse {
    let mut server_error = ServerError::new(err.to_string(), None);
    server_error.source = Some(std::sync::Arc::new(err));
    assign_code(&mut server_error);
    GqlResponse::from_errors(vec![server_error])
}
