//! The load generator: a closed loop of C keep-alive HTTP connections (one client with one
//! pooled connection each), every connection sending its next request as soon as the previous
//! answer arrived, until the requests run out or the time cap passes. Every answer is read and
//! checked: a non-200 status, a body that is not JSON, a body with `errors`, or one the
//! scenario's own check refuses is a failure, counted and reported with its first example.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use course_forum::testing::error::{AppError, AppResult};
use serde_json::Value;

use crate::percentile;
use crate::server::internal;

/// One request: whose token and what GraphQL body.
#[derive(Clone)]
pub struct Request {
    pub authorization: String,
    pub body: String,
    /// `X-Forwarded-For`, for scenarios that play clients behind the trusted proxy.
    pub forwarded_for: Option<String>,
}

/// Checks one answer's `data` for request `index`.
pub type Check = Arc<dyn Fn(usize, &Value) -> Result<(), String> + Send + Sync>;

/// What a load run measured.
#[derive(Debug, Default)]
pub struct LoadReport {
    pub ok: usize,
    pub failed: usize,
    /// Wall time from the first request sent to the last answer read.
    pub elapsed: Duration,
    /// Latencies of accepted requests, in ms, sorted.
    pub latencies_ms: Vec<f64>,
    /// The same latencies with the index of their request, in no order.
    pub indexed_latencies_ms: Vec<(usize, f64)>,
    /// The first failure, to show what went wrong.
    pub first_failure: Option<String>,
    /// `data` of each request, when asked to keep it (None for failures and when not kept).
    pub data: Vec<Option<Value>>,
}

impl LoadReport {
    pub fn rate(&self) -> f64 {
        self.ok as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    pub fn p(&self, p: f64) -> f64 {
        percentile(&self.latencies_ms, p)
    }

    pub fn max(&self) -> f64 {
        self.latencies_ms.last().copied().unwrap_or(f64::NAN)
    }
}

/// Sends `requests` to `url` over `connections` keep-alive connections. Stops taking new
/// requests after `time_cap`. Keeps each answer's `data` when `keep_data`.
/// Sends `requests` untimed (a warm-up: connections, caches, liked-sets); any failure is an
/// error naming `what`.
pub async fn warm_up(
    what: &str,
    url: &str,
    requests: Vec<Request>,
    connections: usize,
    time_cap: Duration,
    check: Check,
) -> AppResult<()> {
    let warm = run(url, requests, connections, time_cap, check, false).await?;
    if warm.failed > 0 {
        return Err(AppError::Internal(format!("{what} warm-up failed: {}", warm.first_failure.unwrap_or_default())));
    }
    Ok(())
}

pub async fn run(
    url: &str,
    requests: Vec<Request>,
    connections: usize,
    time_cap: Duration,
    check: Check,
    keep_data: bool,
) -> AppResult<LoadReport> {
    let total = requests.len();
    let requests = Arc::new(requests);
    let make: MakeRequest = Arc::new(move |index| requests[index].clone());
    run_generated(url, total, make, connections, time_cap, check, keep_data, None).await
}

/// Request `index` of a run, built when it is sent (a long run need not hold them all).
pub type MakeRequest = Arc<dyn Fn(usize) -> Request + Send + Sync>;

/// `run`, with requests made on demand and, when `request_timeout` is given, every request
/// bounded in time (one that takes longer is a failure: `request failed: … timed out`), so
/// that a run ends by `time_cap` plus that timeout however the server behaves.
// The load generator's knobs, each a flag of the scenario that runs it; a struct for one caller
// would only move the list.
#[allow(clippy::too_many_arguments)]
pub async fn run_generated(
    url: &str,
    total: usize,
    make: MakeRequest,
    connections: usize,
    time_cap: Duration,
    check: Check,
    keep_data: bool,
    request_timeout: Option<Duration>,
) -> AppResult<LoadReport> {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(connections);
    for _ in 0..connections.max(1) {
        let mut builder = reqwest::Client::builder().pool_max_idle_per_host(1).tcp_nodelay(true);
        if let Some(timeout) = request_timeout {
            builder = builder.timeout(timeout);
        }
        let client = builder.build().map_err(|e| internal("HTTP client")(e.to_string()))?;
        let (make, next, check, url) = (make.clone(), next.clone(), check.clone(), url.to_owned());
        tasks.push(tokio::spawn(async move {
            let mut mine = Connection::default();
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= total || started.elapsed() > time_cap {
                    return mine;
                }
                let request = make(index);
                let sent = Instant::now();
                let outcome = send(&client, &url, request).await.and_then(|data| {
                    check(index, &data)?;
                    Ok(data)
                });
                let took = sent.elapsed();
                match outcome {
                    Ok(data) => {
                        mine.latencies_ms.push((index, took.as_secs_f64() * 1000.0));
                        if keep_data {
                            mine.data.push((index, data));
                        }
                    }
                    Err(why) => {
                        mine.failed += 1;
                        mine.first_failure.get_or_insert(why);
                    }
                }
            }
        }));
    }
    let mut report = LoadReport { data: if keep_data { vec![None; total] } else { Vec::new() }, ..Default::default() };
    for task in tasks {
        let mine = task.await.map_err(|e| internal("load task")(e.to_string()))?;
        report.ok += mine.latencies_ms.len();
        report.failed += mine.failed;
        report.latencies_ms.extend(mine.latencies_ms.iter().map(|(_, ms)| *ms));
        report.indexed_latencies_ms.extend(mine.latencies_ms);
        if report.first_failure.is_none() {
            report.first_failure = mine.first_failure;
        }
        for (index, data) in mine.data {
            report.data[index] = Some(data);
        }
    }
    report.elapsed = started.elapsed();
    report.latencies_ms.sort_by(f64::total_cmp);
    Ok(report)
}

#[derive(Default)]
struct Connection {
    /// (request index, latency in ms) of each accepted request.
    latencies_ms: Vec<(usize, f64)>,
    failed: usize,
    first_failure: Option<String>,
    data: Vec<(usize, Value)>,
}

/// One request; its `data` when the answer is a 200 with JSON, data and no errors.
async fn send(client: &reqwest::Client, url: &str, request: Request) -> Result<Value, String> {
    let mut builder = client
        .post(url)
        .header(reqwest::header::AUTHORIZATION, &request.authorization)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(request.body);
    if let Some(ip) = &request.forwarded_for {
        builder = builder.header("X-Forwarded-For", ip);
    }
    let response = builder
        .send()
        .await
        .map_err(|e| if e.is_timeout() { format!("request timed out: {e}") } else { format!("request failed: {e}") })?;
    let status = response.status();
    let bytes = response.bytes().await.map_err(|e| format!("reading the body failed: {e}"))?;
    if status != reqwest::StatusCode::OK {
        return Err(format!("HTTP {status}: {}", String::from_utf8_lossy(&bytes)));
    }
    let mut body: Value = serde_json::from_slice(&bytes)
        .map_err(|e| format!("body is not JSON ({e}): {}", String::from_utf8_lossy(&bytes)))?;
    if body.get("errors").is_some_and(|e| !e.is_null()) {
        return Err(format!("200 with errors: {}", body["errors"]));
    }
    match body.get_mut("data").map(Value::take) {
        Some(data) if data.is_object() => Ok(data),
        _ => Err(format!("200 without data: {body}")),
    }
}

/// A GraphQL request body.
pub fn graphql_body(query: &str, variables: Value) -> String {
    serde_json::json!({ "query": query, "variables": variables }).to_string()
}
