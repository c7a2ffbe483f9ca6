//! `bench views`: N distinct users view ONE post through `POST /graphql`: `startPostView`,
//! then, once the minimum dwell has passed, `completePostView`, with the caps on. The clients
//! play users behind the trusted proxy (`TRUSTED_PROXY=127.0.0.1`), each with an address of
//! the benchmarking range 198.18.0.0/15 in `X-Forwarded-For` (a header only: nothing is sent
//! there), so the per-IP cap applies as in production. Measures both mutations, then how
//! long until the aggregator has put every counted view into `posts.view_count`, and asserts
//! it is exactly the counted views.

use std::sync::Arc;
use std::time::{Duration, Instant};

use course_forum::testing::config::LikeMode;
use course_forum::testing::db::stmt;
use course_forum::testing::error::{AppError, AppResult};
use course_forum::testing::graphql::ids::{NodeKind, encode};
use sea_orm::FromQueryResult;
use serde::Serialize;
use serde_json::json;

use crate::fixture::Fixture;
use crate::load::{self, Request};
use crate::server::{Server, load_average};
use crate::storm::tokens;

const START: &str = "mutation($p: ID!) { startPostView(postId: $p) { ticket minDwellMs } }";
const COMPLETE: &str = "mutation($t: String!) { completePostView(ticket: $t) { counted reason } }";
/// The dwell the benchmark's server requires (production: 30 s).
const MIN_DWELL: Duration = Duration::from_secs(1);

#[derive(Debug, Serialize)]
pub struct ViewsResult {
    pub viewers: usize,
    pub starts_per_s: f64,
    pub start_p50_ms: f64,
    pub start_p99_ms: f64,
    /// The requests' SQL statements and Redis commands per start (`/metrics`, role `api`).
    pub start_sql: f64,
    pub start_redis: f64,
    pub completes_per_s: f64,
    pub complete_p50_ms: f64,
    pub complete_p99_ms: f64,
    pub counted: usize,
    pub failed: usize,
    pub first_failure: Option<String>,
    /// From the last completion until `posts.view_count` holds every counted view.
    pub flush_lag_ms: f64,
    pub db_view_count: i64,
    pub consistent: bool,
    pub load_before: f64,
}

pub async fn run_on(
    cli: &crate::Cli,
    fixture: &Fixture,
    post_id: i64,
    viewers: usize,
    connections: usize,
) -> AppResult<ViewsResult> {
    let env = [
        ("VIEW_MIN_DWELL", format!("{}ms", MIN_DWELL.as_millis())),
        ("VIEW_FLUSH_INTERVAL", "1s".to_owned()),
        ("TRUSTED_PROXY", "127.0.0.1".to_owned()),
    ];
    let exe = cli.servers()?.remove(0);
    let server = Server::start(cli, &exe, &fixture.url, LikeMode::Buffered, &env).await?;
    let outcome = measure(fixture, &server, post_id, viewers, connections).await;
    server.stop().await;
    outcome
}

async fn measure(
    fixture: &Fixture,
    server: &Server,
    post_id: i64,
    viewers: usize,
    connections: usize,
) -> AppResult<ViewsResult> {
    let cap = Duration::from_secs(120);
    let viewer_tokens = tokens(2, viewers)?;
    let address = |n: usize| format!("198.18.{}.{}", (n / 250) % 250, n % 250 + 1);
    let start_body = load::graphql_body(START, json!({ "p": encode(NodeKind::Post, post_id) }));
    let starts: Vec<Request> = (0..viewers)
        .map(|n| Request {
            authorization: viewer_tokens[n].clone(),
            body: start_body.clone(),
            forwarded_for: Some(address(n)),
        })
        .collect();
    let check_start: load::Check = Arc::new(|_, data| {
        data["startPostView"]["ticket"].as_str().map(|_| ()).ok_or_else(|| format!("no ticket: {data}"))
    });
    let load_before = load_average();
    let counters_before = server.counters().await?;
    let started = load::run(&server.graphql_url(), starts, connections, cap, check_start, true).await?;
    let start_counters = server.counters().await? - counters_before;
    let per_start = |n: f64| n / started.ok.max(1) as f64;
    tokio::time::sleep(MIN_DWELL + Duration::from_millis(100)).await;

    let completes: Vec<Request> = started
        .data
        .iter()
        .enumerate()
        .filter_map(|(n, data)| {
            let ticket = data.as_ref()?["startPostView"]["ticket"].as_str()?.to_owned();
            Some(Request {
                authorization: viewer_tokens[n].clone(),
                body: load::graphql_body(COMPLETE, json!({ "t": ticket })),
                forwarded_for: Some(address(n)),
            })
        })
        .collect();
    let check_complete: load::Check = Arc::new(|_, data| {
        let result = &data["completePostView"];
        if result["counted"] == true { Ok(()) } else { Err(format!("view not counted: {result}")) }
    });
    let completed = load::run(&server.graphql_url(), completes, connections, cap, check_complete, false).await?;

    let counted = completed.ok as i64;
    let done = Instant::now();
    let mut in_db = view_count(fixture, post_id).await?;
    while in_db < counted && done.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(5)).await;
        in_db = view_count(fixture, post_id).await?;
    }
    let flush_lag = done.elapsed();
    Ok(ViewsResult {
        viewers,
        starts_per_s: started.rate(),
        start_p50_ms: started.p(50.0),
        start_p99_ms: started.p(99.0),
        start_sql: per_start(start_counters.sql),
        start_redis: per_start(start_counters.redis_api),
        completes_per_s: completed.rate(),
        complete_p50_ms: completed.p(50.0),
        complete_p99_ms: completed.p(99.0),
        counted: completed.ok,
        failed: started.failed + completed.failed,
        first_failure: started.first_failure.or(completed.first_failure),
        flush_lag_ms: flush_lag.as_secs_f64() * 1000.0,
        db_view_count: in_db,
        consistent: in_db == counted,
        load_before,
    })
}

async fn view_count(fixture: &Fixture, post_id: i64) -> AppResult<i64> {
    #[derive(FromQueryResult)]
    struct Views {
        n: i64,
    }
    Ok(Views::find_by_statement(stmt("SELECT view_count::bigint AS n FROM posts WHERE id = $1", [post_id.into()]))
        .one(&fixture.db)
        .await?
        .ok_or_else(|| AppError::Internal("the viewed post vanished".into()))?
        .n)
}

/// `bench views` on its own: a fresh database.
pub async fn run(cli: &crate::Cli, viewers: usize, connections: usize) -> AppResult<ViewsResult> {
    let fixture = Fixture::create(&cli.database_url, viewers as i64).await?;
    let outcome = async {
        let post = fixture.add_posts(1, 1, "viewed").await?[0];
        run_on(cli, &fixture, post, viewers, connections).await
    }
    .await;
    fixture.drop().await?;
    outcome
}
