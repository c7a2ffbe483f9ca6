//! `bench worst`: the most expensive query the cost limit accepts, on a course full enough to
//! answer all of it (50 posts with 90 comments each), against a real `course-forum serve`. Prints
//! its cost class, its SQL statements (from the server's own `/metrics`) and its latency over
//! sequential runs, after one warm-up.

use std::time::{Duration, Instant};

use course_forum::testing::config::LikeMode;
use course_forum::testing::db::stmt;
use course_forum::testing::error::{AppError, AppResult};
use course_forum::testing::graphql::ids::{NodeKind, encode};
use sea_orm::ConnectionTrait;
use serde::Serialize;
use serde_json::json;

use crate::fixture::Fixture;
use crate::percentile;
use crate::server::{Server, internal, label};
use crate::storm::tokens;

/// 50 posts × 90 comments with their authors: about 18,300 of the 20,000 the limit accepts.
pub const WORST_ACCEPTED: &str = "query($c: ID!) { course(id: $c) { memberCount posts(first: 50) { nodes { title \
    author { handle } comments(first: 90) { nodes { body author { handle } } } } } } }";

#[derive(Debug, Serialize)]
pub struct WorstResult {
    pub server: String,
    pub runs: usize,
    pub rows_returned: usize,
    pub sql_per_request: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

pub async fn run(cli: &crate::Cli, runs: usize) -> AppResult<WorstResult> {
    // 50 members write the posts and comments; user 2 reads.
    let fixture = Fixture::create(&cli.database_url, 50).await?;
    let outcome = async {
        let posts = fixture.add_posts(50, 50, "worst").await?;
        fixture
            .db
            .execute_raw(stmt(
                "INSERT INTO comments (post_id, user_id, body) \
                 SELECT p, 2 + (n % 50), 'comment ' || n FROM unnest($1::bigint[]) p, generate_series(1, 90) n",
                [posts.clone().into()],
            ))
            .await?;
        fixture.db.execute_unprepared("UPDATE posts SET comment_count = 90 WHERE title LIKE 'worst%'; ANALYZE").await?;
        let exe = cli.servers()?.remove(0);
        let server = Server::start(cli, &exe, &fixture.url, LikeMode::Buffered, &[]).await?;
        let measured = measure(&server, runs).await;
        server.stop().await;
        measured.map(|mut result| {
            result.server = label(&exe);
            result
        })
    }
    .await;
    fixture.drop().await?;
    outcome
}

async fn measure(server: &Server, runs: usize) -> AppResult<WorstResult> {
    let token = tokens(2, 1)?.remove(0);
    let http = reqwest::Client::new();
    let body = json!({ "query": WORST_ACCEPTED, "variables": { "c": encode(NodeKind::Course, 1).to_string() } });
    let send = || async {
        let response = http
            .post(server.graphql_url())
            .header("Authorization", &token)
            .json(&body)
            .timeout(Duration::from_secs(60))
            .send()
            .await
            .map_err(|e| internal("worst query")(e.to_string()))?;
        let answer: serde_json::Value = response.json().await.map_err(|e| internal("worst query")(e.to_string()))?;
        if answer.get("errors").is_some() {
            return Err(AppError::Internal(format!("the worst accepted query failed: {answer}")));
        }
        let nodes = answer["data"]["course"]["posts"]["nodes"].as_array().cloned().unwrap_or_default();
        Ok(nodes.iter().map(|n| 1 + n["comments"]["nodes"].as_array().map_or(0, Vec::len)).sum::<usize>())
    };
    send().await?; // warm-up: memberships and post cache
    let before = server.counters().await?;
    let mut latencies = Vec::with_capacity(runs);
    let mut rows = 0;
    for _ in 0..runs {
        let started = Instant::now();
        rows = send().await?;
        latencies.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    let spent = server.counters().await? - before;
    latencies.sort_by(f64::total_cmp);
    Ok(WorstResult {
        server: String::new(),
        runs,
        rows_returned: rows,
        sql_per_request: spent.sql / runs.max(1) as f64,
        p50_ms: percentile(&latencies, 50.0),
        p99_ms: percentile(&latencies, 99.0),
        max_ms: latencies.last().copied().unwrap_or(f64::NAN),
    })
}

pub fn print(result: &WorstResult) {
    println!(
        "worst {:<28} {} runs  {} rows  SQL/request {:.2}  p50 {:.1} ms  p99 {:.1} ms  max {:.1} ms",
        result.server,
        result.runs,
        result.rows_returned,
        result.sql_per_request,
        result.p50_ms,
        result.p99_ms,
        result.max_ms
    );
}
