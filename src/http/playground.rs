//! The web playground, served from local files (no CDN): GraphiQL at `/` (its assets under
//! `/graphiql/`), the demo forum at `/demo`, and in demo mode the seeded users with their tokens
//! at `/demo/users.json`. The files are built by `npm run build` in `web-playground/`
//! (script/server and script/test do it) into `PLAYGROUND_DIR`.

use std::path::{Path, PathBuf};

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use tower_http::services::ServeDir;

use crate::config::Settings;

const NOT_BUILT: &str = "<!doctype html><meta charset=utf-8><title>course-forum: playground not built</title>\
<h1>The web playground is not built</h1>\
<p>GraphiQL and the demo forum are bundled from npm packages into <code>web-playground/dist</code>. \
Build them with <code>script/server</code> (it builds before serving), or by hand: \
<code>cd web-playground &amp;&amp; npm ci &amp;&amp; npm run build</code> (needs Node.js 20+ and npm). \
Set <code>PLAYGROUND_DIR</code> if the build lives elsewhere.</p>\
<p>The API itself works without it: <code>POST /graphql</code>, subscriptions at <code>/graphql/ws</code>.</p>";

/// `/demo`, `/demo/users.json` and `/graphiql/*`; `/` is [`graphiql_index`], routed with the API.
pub(super) fn routes<S: Clone + Send + Sync + 'static>(settings: &Settings) -> Router<S> {
    let dir = settings.playground_dir.clone();
    let demo_users = settings.demo_users_file.clone();
    let not_built = get(|| async { (StatusCode::NOT_FOUND, Html(NOT_BUILT)) });
    Router::new()
        .route("/demo/users.json", get(move || demo_users_json(demo_users.clone())))
        .nest_service("/demo", ServeDir::new(dir.join("demo")).not_found_service(not_built.clone()))
        .nest_service("/graphiql", ServeDir::new(dir.join("graphiql")).not_found_service(not_built))
}

/// GraphiQL's page, or a short page saying how to build it.
pub(super) async fn graphiql_index(dir: &Path) -> Response {
    match tokio::fs::read_to_string(dir.join("graphiql").join("index.html")).await {
        Ok(html) => ([(header::CACHE_CONTROL, "no-cache")], Html(html)).into_response(),
        Err(_) => Html(NOT_BUILT).into_response(),
    }
}

async fn demo_users_json(file: Option<PathBuf>) -> Response {
    let Some(file) = file else {
        return (StatusCode::NOT_FOUND, "not in demo mode (DEMO_USERS_FILE is not set)\n").into_response();
    };
    match tokio::fs::read(&file).await {
        Ok(body) => {
            ([(header::CONTENT_TYPE, "application/json"), (header::CACHE_CONTROL, "no-store")], body).into_response()
        }
        Err(err) => {
            tracing::warn!(file = %file.display(), %err, "DEMO_USERS_FILE cannot be read");
            (StatusCode::NOT_FOUND, "the demo users file cannot be read\n").into_response()
        }
    }
}
