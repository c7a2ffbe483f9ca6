//! `bench live`: a real `course-forum serve` process (buffered likes, in-process worker), S
//! websocket subscribers (graphql-transport-ws) watching one post's `likeCounts`, and a storm
//! of likes by distinct users through `POST /graphql`. Every update carries `likeCountCommittedAt`, the
//! time the worker's COMMIT returned; each subscriber compares its receive time with it (same
//! machine, same clock): commit→client latency, per delivered update. Also: messages per
//! subscriber (a burst is coalesced) and the server's resident memory.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use course_forum::testing::config::LikeMode;
use course_forum::testing::error::{AppError, AppResult};
use course_forum::testing::graphql::ids::{NodeKind, encode};
use futures_util::{SinkExt, StreamExt};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::{Semaphore, watch};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::Message;

use crate::fixture::Fixture;
use crate::load::{self, Request};
use crate::percentile;
use crate::server::{Server, internal, load_average};
use crate::storm::{LIKE_POST, tokens};

const LIKE_COUNTS: &str = "subscription($ids: [ID!]!) { likeCounts(ids: $ids) { likeCount likeCountCommittedAt } }";

#[derive(Debug, Serialize)]
pub struct LiveResult {
    pub subscribers: usize,
    pub likes_accepted: usize,
    pub likes_failed: usize,
    pub likes_per_s: f64,
    /// commit→client over every delivered update of every subscriber.
    pub commit_to_client_p50_ms: f64,
    pub commit_to_client_p99_ms: f64,
    pub commit_to_client_max_ms: f64,
    pub samples: usize,
    /// Subscribers that saw the final count.
    pub saw_final: usize,
    pub messages_per_subscriber_p50: f64,
    pub rss_idle_mib: u64,
    pub rss_subscribed_mib: u64,
    pub load_before: f64,
}

/// Subscribers on `post_id` during a storm of `likes` likes by users 2..=likes+1.
pub async fn run_on(
    cli: &crate::Cli,
    fixture: &Fixture,
    post_id: i64,
    subscribers: usize,
    likes: usize,
    connections: usize,
    open_rate: u32,
) -> AppResult<LiveResult> {
    let exe = cli.servers()?.remove(0);
    let server = Server::start(cli, &exe, &fixture.url, LikeMode::Buffered, &[]).await?;
    let outcome = measure(fixture, &server, post_id, subscribers, likes, connections, open_rate).await;
    server.stop().await;
    outcome
}

async fn measure(
    fixture: &Fixture,
    server: &Server,
    post_id: i64,
    subscribers: usize,
    likes: usize,
    connections: usize,
    open_rate: u32,
) -> AppResult<LiveResult> {
    let post = encode(NodeKind::Post, post_id).to_string();
    let rss_idle = rss_kib(server.pid);
    let like_tokens = tokens(2, likes)?;
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<()>(subscribers.max(1));
    let (final_tx, final_rx) = watch::channel(i64::MAX);
    // Subscribing checks access in PostgreSQL: open at a steady rate rather than all at once,
    // so the setup does not measure a thundering herd on the pool.
    let opening = Arc::new(Semaphore::new(100));
    let pace = Duration::from_secs_f64(1.0 / open_rate.max(1) as f64);
    let mut readers = Vec::with_capacity(subscribers);
    for n in 0..subscribers {
        tokio::time::sleep(pace).await;
        let token = like_tokens[n % likes.max(1)].clone();
        let permit = opening.clone().acquire_owned().await.map_err(|e| internal("semaphore")(e.to_string()))?;
        let (ready, final_count, url, post) = (ready_tx.clone(), final_rx.clone(), server.ws_url(), post.clone());
        readers.push(tokio::spawn(async move { subscriber(url, token, post, ready, final_count, permit).await }));
    }
    for _ in 0..subscribers {
        if tokio::time::timeout(Duration::from_secs(60), ready_rx.recv()).await.ok().flatten().is_none() {
            return Err(AppError::Internal("subscribers did not all connect within 60 s".into()));
        }
    }
    // Let the last subscriptions finish their access checks before the storm starts.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_subscribed = rss_kib(server.pid);

    let load_before = load_average();
    let body = load::graphql_body(LIKE_POST, json!({ "p": post }));
    let requests = like_tokens
        .into_iter()
        .map(|authorization| Request { authorization, body: body.clone(), forwarded_for: None })
        .collect();
    let check: load::Check = Arc::new(|_, data| {
        data["likePost"]["likeCount"].as_i64().map(|_| ()).ok_or_else(|| format!("unexpected answer: {data}"))
    });
    let report =
        load::run(&server.graphql_url(), requests, connections, Duration::from_secs(120), check, false).await?;
    // The last count every subscriber must reach: what the database holds once it has caught up.
    let accepted = report.ok as i64;
    let flushing = Instant::now();
    while fixture.post_likes(post_id).await?.0 < accepted && flushing.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let _ = final_tx.send(accepted);

    let mut latencies = Vec::new();
    let mut messages = Vec::new();
    let mut saw_final = 0;
    for reader in readers {
        let updates = reader.await.map_err(|e| internal("subscriber task")(e.to_string()))??;
        messages.push(updates.len() as f64);
        if updates.last().is_some_and(|u| u.count >= accepted) {
            saw_final += 1;
        }
        latencies.extend(updates.iter().map(|u| u.latency_ms));
    }
    latencies.sort_by(f64::total_cmp);
    messages.sort_by(f64::total_cmp);
    Ok(LiveResult {
        subscribers,
        likes_accepted: report.ok,
        likes_failed: report.failed,
        likes_per_s: report.rate(),
        commit_to_client_p50_ms: percentile(&latencies, 50.0),
        commit_to_client_p99_ms: percentile(&latencies, 99.0),
        commit_to_client_max_ms: latencies.last().copied().unwrap_or(f64::NAN),
        samples: latencies.len(),
        saw_final,
        messages_per_subscriber_p50: percentile(&messages, 50.0),
        rss_idle_mib: rss_idle / 1024,
        rss_subscribed_mib: rss_subscribed / 1024,
        load_before,
    })
}

struct Update {
    count: i64,
    latency_ms: f64,
}

/// One websocket subscriber: every update it received, until it has seen the final count
/// (or 10 s passed after the final count was known).
async fn subscriber(
    url: String,
    token: String,
    post: String,
    ready: tokio::sync::mpsc::Sender<()>,
    mut final_count: watch::Receiver<i64>,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> AppResult<Vec<Update>> {
    let mut ws = open_subscription(url, token, LIKE_COUNTS, json!({ "ids": [post] })).await?;
    drop(permit);
    let _ = ready.send(()).await;
    let mut updates: Vec<Update> = Vec::new();
    let mut deadline = tokio::time::Instant::now() + Duration::from_secs(600);
    loop {
        if updates.last().is_some_and(|u| u.count >= *final_count.borrow()) {
            break;
        }
        tokio::select! {
            message = ws.next() => {
                let Some(Ok(message)) = message else { break };
                let Message::Text(text) = message else { continue };
                let received = SystemTime::now();
                let value: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                if value["type"] == "ping" {
                    // The server drops a graphql-transport-ws peer that leaves its pings unanswered.
                    let _ = ws.send(Message::Text(json!({ "type": "pong" }).to_string().into())).await;
                    continue;
                }
                if value["payload"]["errors"].is_array() || value["type"] == "error" {
                    return Err(AppError::Internal(format!("a subscription was refused: {value}")));
                }
                let data = &value["payload"]["data"]["likeCounts"];
                let (Some(count), Some(committed)) = (data["likeCount"].as_i64(), data["likeCountCommittedAt"].as_str()) else {
                    continue;
                };
                let committed = chrono::DateTime::parse_from_rfc3339(committed)
                    .map_err(|e| AppError::Internal(format!("likeCountCommittedAt `{committed}`: {e}")))?;
                let received: chrono::DateTime<chrono::Utc> = received.into();
                let latency_ms = (received - committed.to_utc()).num_microseconds().unwrap_or(0) as f64 / 1000.0;
                updates.push(Update { count, latency_ms });
            }
            changed = final_count.changed() => {
                if changed.is_err() { break }
                deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            }
            _ = tokio::time::sleep_until(deadline) => break,
        }
    }
    let _ = ws.close(None).await;
    Ok(updates)
}

/// A websocket (graphql-transport-ws) that has sent `connection_init` with `authorization` and
/// subscribed (id `1`) to `query` with `variables`.
pub async fn open_subscription(
    url: String,
    authorization: String,
    query: &str,
    variables: Value,
) -> AppResult<tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>> {
    let ws_error = internal("websocket");
    let mut request = url.into_client_request().map_err(|e| ws_error(e.to_string()))?;
    request.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        "graphql-transport-ws".parse().map_err(|_| AppError::Internal("header".into()))?,
    );
    let (mut ws, _) = tokio_tungstenite::connect_async(request).await.map_err(|e| ws_error(e.to_string()))?;
    let send = |v: Value| Message::Text(v.to_string().into());
    ws.send(send(json!({ "type": "connection_init", "payload": { "authorization": authorization } })))
        .await
        .map_err(|e| ws_error(e.to_string()))?;
    ws.send(send(json!({ "id": "1", "type": "subscribe", "payload": { "query": query, "variables": variables } })))
        .await
        .map_err(|e| ws_error(e.to_string()))?;
    Ok(ws)
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

/// `bench live` on its own: a fresh database.
pub async fn run(
    cli: &crate::Cli,
    subscribers: usize,
    likes: usize,
    connections: usize,
    open_rate: u32,
) -> AppResult<LiveResult> {
    let fixture = Fixture::create(&cli.database_url, likes as i64).await?;
    let outcome = async {
        let post = fixture.add_posts(1, 1, "live").await?[0];
        run_on(cli, &fixture, post, subscribers, likes, connections, open_rate).await
    }
    .await;
    fixture.drop().await?;
    outcome
}
