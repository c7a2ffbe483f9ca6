//! `bench live`: a real `course-forum serve` process (buffered likes, in-process worker), S
//! websocket subscribers watching one post's `likeCounts`, and a storm of likes by distinct
//! users through `POST /graphql`. Reports how long a like takes from its accepted response to
//! being visible on every subscriber (an upper bound of commit→client: it includes the
//! worker's batching and the coalescing window), messages per subscriber, and the server's
//! resident memory before and after the subscribers connected.

use std::sync::Arc;
use std::time::{Duration, Instant};

use course_forum::auth::TokenKeys;
use course_forum::error::{AppError, AppResult};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::Message;

use crate::fixture::Fixture;
use crate::{Cli, percentile};

const SECRET: &str = "bench-secret-0123456789abcdef";
const POST_ID: &str = "UG9zdDox"; // global id of post 1

pub async fn run(cli: &Cli, subscribers: usize, likes: i64, concurrency: usize, open_rate: u32) -> AppResult<()> {
    let fixture = Fixture::create(&cli.database_url, likes).await?;
    let prefix = format!("bench{}", uuid::Uuid::new_v4().simple());
    let outcome = measure(cli, &fixture, &prefix, subscribers, likes, concurrency, open_rate).await;
    cleanup_redis(&cli.redis_url, &prefix).await;
    fixture.drop().await?;
    outcome
}

fn internal(what: &str) -> impl Fn(String) -> AppError + '_ {
    move |e| AppError::Internal(format!("{what}: {e}"))
}

async fn measure(
    cli: &Cli,
    fixture: &Fixture,
    prefix: &str,
    subscribers: usize,
    likes: i64,
    concurrency: usize,
    open_rate: u32,
) -> AppResult<()> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| internal("free port")(e.to_string()))?
        .port();
    let exe = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("course-forum")))
        .ok_or_else(|| AppError::Internal("cannot locate the course-forum binary next to bench".into()))?;
    let mut server = tokio::process::Command::new(&exe)
        .arg("serve")
        .env("DATABASE_URL", &fixture.url)
        .env("REDIS_URL", &cli.redis_url)
        .env("REDIS_KEY_PREFIX", prefix)
        .env("JWT_SECRET", SECRET)
        .env("BIND", format!("127.0.0.1:{port}"))
        .env("LIKE_MODE", "buffered")
        .env("LIKE_RATE_PER_MINUTE", "0")
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| internal("start the server (run `cargo build --release` first)")(e.to_string()))?;
    let pid = server.id().unwrap_or(0);
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency)
        .build()
        .map_err(|e| internal("client")(e.to_string()))?;
    wait_healthy(&http, &base).await?;
    let rss_idle = rss_kib(pid);

    let tokens = TokenKeys::new(SECRET)?;
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<()>(subscribers.max(1));
    // Subscribing checks access in PostgreSQL: open at a steady rate rather than all at once,
    // so the setup does not measure a thundering herd on the pool.
    let opening = Arc::new(Semaphore::new(100));
    let pace = Duration::from_secs_f64(1.0 / open_rate.max(1) as f64);
    let mut readers = Vec::with_capacity(subscribers);
    for n in 0..subscribers {
        tokio::time::sleep(pace).await;
        let token = tokens.mint(2 + (n as i64 % likes.max(1)), Duration::from_secs(3600))?;
        let permit = opening.clone().acquire_owned().await.map_err(|e| internal("semaphore")(e.to_string()))?;
        let ready = ready_tx.clone();
        let url = format!("ws://127.0.0.1:{port}/graphql/ws");
        readers.push(tokio::spawn(async move { subscriber(url, token, likes, ready, permit).await }));
    }
    for _ in 0..subscribers {
        if tokio::time::timeout(Duration::from_secs(60), ready_rx.recv()).await.ok().flatten().is_none() {
            return Err(AppError::Internal("subscribers did not all connect within 60 s".into()));
        }
    }
    // Let the last subscriptions finish their access checks before the storm starts.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_subscribed = rss_kib(pid);

    // The storm: every like by a distinct user, `concurrency` requests in flight.
    let storm_started = Instant::now();
    let sending = Arc::new(Semaphore::new(concurrency));
    let mut sends = Vec::with_capacity(likes as usize);
    for user in 2..likes + 2 {
        let permit = sending.clone().acquire_owned().await.map_err(|e| internal("semaphore")(e.to_string()))?;
        let (http, url, token) =
            (http.clone(), format!("{base}/graphql"), tokens.mint(user, Duration::from_secs(3600))?);
        sends.push(tokio::spawn(async move {
            let sent = Instant::now();
            let response = http
                .post(url)
                .bearer_auth(token)
                .json(&json!({ "query": "mutation($p: ID!) { likePost(postId: $p) { likeCount } }", "variables": { "p": POST_ID } }))
                .send()
                .await;
            drop(permit);
            let body: Value = match response {
                Ok(r) => r.json().await.unwrap_or(Value::Null),
                Err(_) => Value::Null,
            };
            let ok = body.get("errors").is_none() && body["data"]["likePost"].is_object();
            (ok, sent.elapsed(), Instant::now())
        }));
    }
    let mut accepted_at = Vec::with_capacity(likes as usize);
    let mut request_ms = Vec::with_capacity(likes as usize);
    let mut failures = 0;
    for send in sends {
        let (ok, took, at) = send.await.map_err(|e| internal("like task")(e.to_string()))?;
        if ok {
            accepted_at.push(at);
            request_ms.push(took.as_secs_f64() * 1000.0);
        } else {
            failures += 1;
        }
    }
    let storm_secs = storm_started.elapsed().as_secs_f64();
    accepted_at.sort();

    let mut latencies = Vec::new();
    let mut messages = Vec::new();
    for reader in readers {
        let updates = reader.await.map_err(|e| internal("subscriber task")(e.to_string()))??;
        messages.push(updates.len() as f64);
        let mut delivered = 0usize;
        for (received, count) in updates {
            let count = (count.max(0) as usize).min(accepted_at.len());
            for accepted in &accepted_at[delivered.min(count)..count] {
                latencies.push(received.saturating_duration_since(*accepted).as_secs_f64() * 1000.0);
            }
            delivered = delivered.max(count);
        }
    }
    let rss_end = rss_kib(pid);
    let _ = server.kill().await;

    latencies.sort_by(f64::total_cmp);
    request_ms.sort_by(f64::total_cmp);
    messages.sort_by(f64::total_cmp);
    println!(
        "live delivery: {subscribers} subscribers on one post, {likes} likes by distinct users, {concurrency} senders"
    );
    println!(
        "  likes accepted        {} ({failures} failed) in {storm_secs:.2} s = {:.0}/s",
        accepted_at.len(),
        accepted_at.len() as f64 / storm_secs
    );
    println!(
        "  likePost latency      p50 {:.1} ms  p99 {:.1} ms",
        percentile(&request_ms, 50.0),
        percentile(&request_ms, 99.0)
    );
    println!(
        "  accepted→subscriber   p50 {:.1} ms  p99 {:.1} ms  max {:.1} ms  ({} like×subscriber samples)",
        percentile(&latencies, 50.0),
        percentile(&latencies, 99.0),
        latencies.last().copied().unwrap_or(f64::NAN),
        latencies.len()
    );
    println!(
        "  messages/subscriber   p50 {:.0}  max {:.0}  (for {likes} likes: coalesced)",
        percentile(&messages, 50.0),
        messages.last().copied().unwrap_or(0.0)
    );
    println!(
        "  server RSS            idle {} MiB, with {subscribers} subscribers {} MiB, after the storm {} MiB",
        rss_idle / 1024,
        rss_subscribed / 1024,
        rss_end / 1024
    );
    if failures > 0 {
        return Err(AppError::Internal(format!("{failures} likes failed")));
    }
    Ok(())
}

/// One websocket subscriber: returns every (time, likeCount) it received until the final count.
async fn subscriber(
    url: String,
    token: String,
    final_count: i64,
    ready: tokio::sync::mpsc::Sender<()>,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> AppResult<Vec<(Instant, i64)>> {
    let ws_error = internal("websocket");
    let mut request = url.into_client_request().map_err(|e| ws_error(e.to_string()))?;
    request.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        "graphql-transport-ws".parse().map_err(|_| AppError::Internal("header".into()))?,
    );
    let (mut ws, _) = tokio_tungstenite::connect_async(request).await.map_err(|e| ws_error(e.to_string()))?;
    let send = |v: Value| Message::Text(v.to_string().into());
    ws.send(send(json!({ "type": "connection_init", "payload": { "authorization": format!("Bearer {token}") } })))
        .await
        .map_err(|e| ws_error(e.to_string()))?;
    ws.send(send(json!({ "id": "1", "type": "subscribe", "payload": {
        "query": "subscription($ids: [ID!]!) { likeCounts(ids: $ids) { likeCount } }", "variables": { "ids": [POST_ID] } } })))
        .await
        .map_err(|e| ws_error(e.to_string()))?;
    drop(permit);
    let _ = ready.send(()).await;
    let mut updates = Vec::new();
    while let Ok(Some(Ok(message))) = tokio::time::timeout(Duration::from_secs(120), ws.next()).await {
        let Message::Text(text) = message else { continue };
        let value: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if value["payload"]["errors"].is_array() || value["type"] == "error" {
            return Err(AppError::Internal(format!("a subscription was refused: {value}")));
        }
        if let Some(count) = value["payload"]["data"]["likeCounts"]["likeCount"].as_i64() {
            updates.push((Instant::now(), count));
            if count >= final_count {
                break;
            }
        }
    }
    let _ = ws.close(None).await;
    Ok(updates)
}

async fn wait_healthy(http: &reqwest::Client, base: &str) -> AppResult<()> {
    for _ in 0..200 {
        if http.get(format!("{base}/healthz")).send().await.is_ok_and(|r| r.status().is_success()) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(AppError::Internal("the server did not become healthy within 10 s".into()))
}

/// Resident memory of a process in KiB (Linux).
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

async fn cleanup_redis(url: &str, prefix: &str) {
    let Ok(client) = redis::Client::open(url) else { return };
    let Ok(mut conn) = client.get_multiplexed_async_connection().await else { return };
    let keys: Vec<String> =
        redis::cmd("KEYS").arg(format!("{prefix}:*")).query_async(&mut conn).await.unwrap_or_default();
    if !keys.is_empty() {
        let _: Result<(), _> = redis::cmd("DEL").arg(keys).query_async(&mut conn).await;
    }
}
