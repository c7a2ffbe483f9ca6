//! `bench revoke`: how soon a member who is removed loses a subscription they hold open. A real
//! `course-forum serve` process; N members each hold a websocket (graphql-transport-ws) with a
//! `courseActivity` subscription, proven live by one post every one of them receives. Then the
//! members are removed one at a time with a direct SQL `DELETE` from `course_members` (as an
//! LMS sync job would do it), and each removal is timed from just before the DELETE is sent to
//! the moment that member's socket receives its FORBIDDEN error.

use std::time::{Duration, Instant};

use course_forum::testing::config::LikeMode;
use course_forum::testing::db::stmt;
use course_forum::testing::error::{AppError, AppResult};
use course_forum::testing::graphql::ids::{NodeKind, encode};
use futures_util::{SinkExt, StreamExt};
use sea_orm::ConnectionTrait;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::protocol::Message;

use crate::fixture::Fixture;
use crate::live::open_subscription;
use crate::percentile;
use crate::server::{Server, internal, label};
use crate::storm::tokens;

const COURSE_ACTIVITY: &str = "subscription($c: ID!) { courseActivity(courseId: $c) { kind } }";
const CREATE_POST: &str = "mutation($c: ID!) { createPost(courseId: $c, title: \"ping\", body: \"b\") { id } }";

#[derive(Debug, Serialize)]
pub struct RevokeResult {
    pub server: String,
    pub removals: usize,
    /// SQL DELETE → FORBIDDEN on the removed member's open subscription.
    pub delete_to_end_p50_ms: f64,
    pub delete_to_end_p99_ms: f64,
    pub delete_to_end_max_ms: f64,
    /// Subscriptions that also completed after their error (the stream ended).
    pub completed: usize,
}

/// One subscriber's life: `ready` once it received the live-proof post; then the instant its
/// FORBIDDEN error arrived, and whether `complete` followed.
struct Subscriber {
    ended: oneshot::Receiver<AppResult<(Instant, bool)>>,
}

pub async fn run(cli: &crate::Cli, removals: usize) -> AppResult<RevokeResult> {
    let fixture = Fixture::create(&cli.database_url, removals as i64).await?;
    let outcome = async {
        let exe = cli.servers()?.remove(0);
        // The harness posts pings until every subscriber has seen one: not a user's posting,
        // so not under POST_RATE_PER_MINUTE.
        let env = [("POST_RATE_PER_MINUTE", "0".to_owned())];
        let server = Server::start(cli, &exe, &fixture.url, LikeMode::Buffered, &env).await?;
        let measured = measure(&fixture, &server, removals).await;
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

async fn measure(fixture: &Fixture, server: &Server, removals: usize) -> AppResult<RevokeResult> {
    let course = encode(NodeKind::Course, 1).to_string();
    let member_tokens = tokens(2, removals)?;
    let (ready_tx, mut ready_rx) = mpsc::channel::<()>(removals.max(1));
    let mut subscribers = Vec::with_capacity(removals);
    for token in member_tokens {
        let (ended_tx, ended) = oneshot::channel();
        let (url, course, ready) = (server.ws_url(), course.clone(), ready_tx.clone());
        tokio::spawn(async move {
            let _ = ended_tx.send(subscriber(url, token, course, ready).await);
        });
        subscribers.push(Subscriber { ended });
        // Paced: the setup is not what is measured.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // Subscribed when a post reaches them: post until every subscriber has seen one.
    let author = tokens(1, 1)?.remove(0);
    let http = reqwest::Client::new();
    let mut live = 0;
    let started = Instant::now();
    while live < removals {
        let body = json!({ "query": CREATE_POST, "variables": { "c": course } });
        http.post(server.graphql_url())
            .header("Authorization", &author)
            .json(&body)
            .send()
            .await
            .map_err(|e| internal("createPost")(e.to_string()))?;
        while let Ok(Some(())) = tokio::time::timeout(Duration::from_millis(500), ready_rx.recv()).await {
            live += 1;
            if live == removals {
                break;
            }
        }
        if started.elapsed() > Duration::from_secs(60) {
            return Err(AppError::Internal(format!("only {live} of {removals} subscriptions became live in 60 s")));
        }
    }

    let mut latencies = Vec::with_capacity(removals);
    let mut completed = 0;
    for (n, subscriber) in subscribers.into_iter().enumerate() {
        let user_id = 2 + n as i64;
        let sent = Instant::now();
        fixture
            .db
            .execute_raw(stmt("DELETE FROM course_members WHERE course_id = 1 AND user_id = $1", [user_id.into()]))
            .await?;
        let (ended_at, complete) = tokio::time::timeout(Duration::from_secs(10), subscriber.ended)
            .await
            .map_err(|_| AppError::Internal(format!("user {user_id}'s subscription did not end within 10 s")))?
            .map_err(|_| AppError::Internal("a subscriber task ended early".into()))??;
        latencies.push(ended_at.saturating_duration_since(sent).as_secs_f64() * 1000.0);
        completed += usize::from(complete);
    }
    latencies.sort_by(f64::total_cmp);
    Ok(RevokeResult {
        server: String::new(),
        removals,
        delete_to_end_p50_ms: percentile(&latencies, 50.0),
        delete_to_end_p99_ms: percentile(&latencies, 99.0),
        delete_to_end_max_ms: latencies.last().copied().unwrap_or(f64::NAN),
        completed,
    })
}

/// Subscribes; reports `ready` at the first activity; returns when its FORBIDDEN error arrived
/// and whether `complete` followed within a second.
async fn subscriber(url: String, token: String, course: String, ready: mpsc::Sender<()>) -> AppResult<(Instant, bool)> {
    let mut ws = open_subscription(url, token, COURSE_ACTIVITY, json!({ "c": course })).await?;
    let mut announced = false;
    let mut forbidden_at = None;
    loop {
        let wait = if forbidden_at.is_some() { Duration::from_secs(1) } else { Duration::from_secs(600) };
        let message = match tokio::time::timeout(wait, ws.next()).await {
            Ok(Some(Ok(Message::Text(text)))) => text,
            Ok(Some(Ok(_))) => continue,
            _ => break,
        };
        let received = Instant::now();
        let value: Value = serde_json::from_str(&message).unwrap_or(Value::Null);
        match value["type"].as_str() {
            // The server drops a graphql-transport-ws peer that leaves its pings unanswered.
            Some("ping") => {
                let _ = ws.send(Message::Text(json!({ "type": "pong" }).to_string().into())).await;
            }
            Some("next") if value["payload"]["errors"][0]["extensions"]["code"] == "FORBIDDEN" => {
                forbidden_at = Some(received);
            }
            Some("next") if value["payload"]["errors"].is_array() => {
                return Err(AppError::Internal(format!("unexpected error: {value}")));
            }
            Some("next") if !announced => {
                announced = true;
                let _ = ready.send(()).await;
            }
            Some("complete") => {
                let _ = ws.close(None).await;
                return forbidden_at
                    .map(|at| (at, true))
                    .ok_or_else(|| AppError::Internal("a subscription completed without a FORBIDDEN error".into()));
            }
            _ => {}
        }
    }
    forbidden_at
        .map(|at| (at, false))
        .ok_or_else(|| AppError::Internal("a subscription ended without a FORBIDDEN error".into()))
}

/// The result as a line of the table.
pub fn print(result: &RevokeResult) {
    println!(
        "revoke {:<28} {} removals  DELETE→FORBIDDEN p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms  completed {}",
        result.server,
        result.removals,
        result.delete_to_end_p50_ms,
        result.delete_to_end_p99_ms,
        result.delete_to_end_max_ms,
        result.completed
    );
}
