//! `bench ceiling`: `{ __typename }` with a bearer token, over the same load generator and
//! connections as every other scenario, on a server of its own: the least any request through
//! the HTTP and GraphQL stack costs on this machine. `bench suite` measures it first and reports
//! every scenario as a fraction of it, so the machine's noise cancels out of the ratios.

use std::sync::Arc;
use std::time::Duration;

use course_forum::testing::config::LikeMode;
use course_forum::testing::error::{AppError, AppResult};
use serde::Serialize;
use serde_json::json;

use crate::fixture::Fixture;
use crate::load::{self, Request};
use crate::server::{Server, label, load_average};
use crate::storm::tokens;

pub const TYPENAME: &str = "{ __typename }";

#[derive(Debug, Serialize)]
pub struct CeilingResult {
    /// The server binary.
    pub server: String,
    pub requests: usize,
    pub failed: usize,
    pub seconds: f64,
    pub requests_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub load_before: f64,
}

/// `requests` trivial requests (after a tenth as many untimed) on a buffered server of its own.
pub async fn run_on(
    cli: &crate::Cli,
    exe: &crate::server::ServerBin,
    fixture: &Fixture,
    requests: usize,
    connections: usize,
    time_cap: Duration,
) -> AppResult<CeilingResult> {
    let server = Server::start(cli, exe, &fixture.url, LikeMode::Buffered, &[]).await?;
    let outcome = measure(&server, requests, connections, time_cap).await.map(|mut result| {
        result.server = label(exe);
        result
    });
    server.stop().await;
    outcome
}

async fn measure(server: &Server, requests: usize, connections: usize, time_cap: Duration) -> AppResult<CeilingResult> {
    let body = load::graphql_body(TYPENAME, json!({}));
    let token = tokens(2, 1)?.remove(0);
    let request = Request { authorization: token, body, forwarded_for: None };
    let check: load::Check = Arc::new(|_, data| match data["__typename"].as_str() {
        Some("Query") => Ok(()),
        _ => Err(format!("unexpected answer {data}")),
    });
    let warm = vec![request.clone(); (requests / 10).max(100)];
    load::warm_up("ceiling", &server.graphql_url(), warm, connections, time_cap, check.clone()).await?;
    let load_before = load_average();
    let report = load::run(&server.graphql_url(), vec![request; requests], connections, time_cap, check, false).await?;
    Ok(CeilingResult {
        server: String::new(),
        requests: report.ok,
        failed: report.failed,
        seconds: report.elapsed.as_secs_f64(),
        requests_per_s: report.rate(),
        p50_ms: report.p(50.0),
        p99_ms: report.p(99.0),
        load_before,
    })
}

/// `bench ceiling` on its own: every server binary in turn, `rounds` times.
pub async fn run(
    cli: &crate::Cli,
    requests: usize,
    connections: usize,
    time_cap: Duration,
    rounds: usize,
) -> AppResult<Vec<CeilingResult>> {
    let servers = cli.servers()?;
    let fixture = Fixture::create(&cli.database_url, 2).await?;
    let outcome = async {
        let mut results = Vec::new();
        for _ in 0..rounds.max(1) {
            for exe in &servers {
                let r = run_on(cli, exe, &fixture, requests, connections, time_cap).await?;
                eprintln!(
                    "ceiling {:<28} {:>8.0} requests/s  p50 {:>5.2} ms  p99 {:>5.2} ms  failed {}  load {:.2}",
                    r.server, r.requests_per_s, r.p50_ms, r.p99_ms, r.failed, r.load_before
                );
                results.push(r);
            }
        }
        Ok::<_, AppError>(results)
    }
    .await;
    fixture.drop().await?;
    outcome
}
