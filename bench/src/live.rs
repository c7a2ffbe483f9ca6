//! `bench live`: a real `course-forum serve` process (buffered likes, in-process worker), S
//! websocket subscribers (graphql-transport-ws) watching one post's `likeCounts`, and a storm
//! of likes by distinct users through `POST /graphql`. Every update carries `likeCountCommittedAt`, the
//! time the worker's COMMIT returned; each subscriber compares its receive time with it (same
//! machine, same clock): commit→client latency, per delivered update. Also: messages per
//! subscriber (a burst is coalesced) and the server's resident memory.
//!
//! `--slow-share F` (0 to 1, default 0) makes that share of the subscribers, spread evenly
//! among them, slow readers: each has a small receive buffer (4 KiB asked of the kernel, and
//! a 4 KiB read buffer) and sleeps 1 s after every frame it reads, so its socket and the
//! server's queue for it fill during the storm. Once the final count is known, a slow
//! subscriber reads whatever is left at full speed for up to 10 s, to learn how the server
//! left it: the final count, or a close (its code counted, or "no close frame" when the socket
//! ended without one). Latency, the final count and closes are reported for the fast and the
//! slow subscribers apart; `commit_to_client_*`, `saw_final` and the messages per subscriber
//! are the fast ones'.
//!
//! A subscriber holds its socket until every subscriber is done reading, then closes it: a
//! page's watchers do not close it on a count, and thousands of close handshakes at once
//! would compete with the final count's delivery to the rest (with 15,000 subscribers that
//! closed as they saw it, the p99 was 540 to 790 ms, the tail all in the final count's
//! delivery; each update before it had a p99 of 120 to 160 ms). The latency is also given
//! apart for the updates before the final count and for the final count.
//!
//! `--baseline` first runs the same storm with no subscriber (its own fresh course, so its
//! liked-sets are cold too, on the same server binary) and reports the likes during the
//! fan-out as a share of it.
//!
//! Memory per subscriber: the server's RSS (`VmRSS`) before the first subscriber opens and
//! once all are subscribed and idle (2 s after the last one connected), the difference divided
//! by the subscribers, in KiB. The RSS is also sampled every 100 ms from then until every
//! subscriber is done: its peak, and its value at the end.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use course_forum::testing::config::LikeMode;
use course_forum::testing::error::{AppError, AppResult};
use course_forum::testing::graphql::ids::{NodeKind, encode};
use futures_util::{SinkExt, StreamExt};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::{Semaphore, watch};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::{Message, WebSocketConfig};

use crate::fixture::Fixture;
use crate::flood::{Flood, FloodHeld, FloodOpened};
use crate::load::{self, Request};
use crate::percentile;
use crate::server::{Server, cpu_seconds_of, internal, load_average};
use crate::storm::{LIKE_POST, tokens};

const LIKE_COUNTS: &str = "subscription($ids: [ID!]!) { likeCounts(ids: $ids) { likeCount likeCountCommittedAt } }";

/// The websocket read buffer of a subscriber that reads at full speed.
const FAST_READ_BUFFER: usize = 4096;
/// How long a slow subscriber sleeps after every frame it reads.
const SLOW_READ_INTERVAL: Duration = Duration::from_secs(1);
/// The receive buffer a slow subscriber asks of the kernel (Linux doubles it), and its
/// websocket read buffer.
const SLOW_RECEIVE_BUFFER: usize = 4096;
/// Longest a subscriber that is done reading waits for the others before it closes.
const DONE_WAIT: Duration = Duration::from_secs(15);

/// The sizes of one `bench live` run.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct LiveConfig {
    /// Websocket subscribers held open on the post.
    pub subscribers: usize,
    /// Likes in the storm (distinct users).
    pub likes: usize,
    /// Concurrent HTTP connections sending likes.
    pub connections: usize,
    /// Websocket subscribers opened per second during setup.
    pub open_rate: u32,
    /// The share of the subscribers (0 to 1) that read 1 frame per second.
    pub slow_share: f64,
    /// Websocket attempts from a second process once the subscribers are in, held through
    /// the storm (`flood`; 0: none).
    pub flood: usize,
    /// Longest the storm may send likes.
    pub time_cap: Duration,
}

/// What `--flood` found: how the attempts ended, and the server while it sat at its cap.
#[derive(Debug, Serialize)]
pub struct FloodReport {
    pub opened: FloodOpened,
    pub held: FloodHeld,
    /// The server's CPU (percent of one core) over `AT_CAP_WINDOW` with the flood held and
    /// nothing else going on: what a full server spends on refusing and accepting (an
    /// accept-error spin would show here).
    pub server_cpu_at_cap_percent: f64,
    /// `/metrics` at that point: websockets refused for descriptors, and the descriptor gauges.
    pub refused_for_descriptors: f64,
    pub open_fds: f64,
    pub max_fds: f64,
    pub reserved_fds: f64,
}

/// How long the server's CPU is measured while it holds its cap.
const AT_CAP_WINDOW: Duration = Duration::from_secs(3);

#[derive(Debug, Serialize)]
pub struct LiveResult {
    pub subscribers: usize,
    pub slow_share: f64,
    /// Subscribers reading at full speed, and slowly (1 frame/s, small receive buffer).
    pub fast_subscribers: usize,
    pub slow_subscribers: usize,
    pub likes_accepted: usize,
    pub likes_failed: usize,
    pub likes_per_s: f64,
    /// commit→client over every delivered update of every fast subscriber (every subscriber
    /// when none is slow).
    pub commit_to_client_p50_ms: f64,
    pub commit_to_client_p99_ms: f64,
    pub commit_to_client_max_ms: f64,
    pub samples: usize,
    /// The same, apart: the updates before the final count (a subscriber busy with older
    /// frames takes the newest when its turn comes, so these are fresh), and the final count,
    /// which every subscriber must get (after the coalescing interval, at its place in one
    /// round of writes to all of them).
    pub during_storm_p99_ms: f64,
    pub final_count_p50_ms: f64,
    pub final_count_p99_ms: f64,
    /// Fast subscribers that saw the final count.
    pub saw_final: usize,
    /// Fast subscribers closed by the server, by close code ("no close frame": the socket
    /// ended without one).
    pub fast_closed: BTreeMap<String, usize>,
    /// commit→client over every update the slow subscribers read (NaN when none).
    pub slow_commit_to_client_p50_ms: f64,
    pub slow_commit_to_client_p99_ms: f64,
    pub slow_samples: usize,
    /// Slow subscribers that saw the final count (reading at full speed once it was known).
    pub slow_saw_final: usize,
    /// Slow subscribers closed by the server, by close code.
    pub slow_closed: BTreeMap<String, usize>,
    /// Updates per fast subscriber, median (a burst is coalesced).
    pub messages_per_subscriber_p50: f64,
    pub rss_idle_mib: u64,
    pub rss_subscribed_mib: u64,
    /// (RSS subscribed − RSS idle) / subscribers, in KiB.
    pub memory_per_subscriber_kib: f64,
    /// The server's RSS sampled every 100 ms from the subscribed point until every subscriber
    /// was done: its peak, and its last value.
    pub rss_peak_mib: u64,
    pub rss_end_mib: u64,
    pub load_before: f64,
    /// With `--flood`: the attempts past the cap and the server meanwhile.
    pub flood: Option<FloodReport>,
    /// With `--baseline`: the same storm's likes/s with no subscriber, and `likes_per_s` as a
    /// share of it (the goal: at least 0.5).
    pub likes_per_s_without_subscribers: Option<f64>,
    pub likes_share_of_without: Option<f64>,
}

/// Subscribers on `post_id` during a storm of `likes` likes by users 2..=likes+1.
pub async fn run_on(cli: &crate::Cli, fixture: &Fixture, post_id: i64, config: &LiveConfig) -> AppResult<LiveResult> {
    let exe = cli.servers()?.remove(0);
    let server = Server::start(cli, &exe, &fixture.url, LikeMode::Buffered, &[]).await?;
    let outcome = measure(fixture, &server, post_id, config).await;
    server.stop().await;
    outcome
}

/// Whether subscriber `n` is one of the slow ones: `share` of them, spread evenly.
fn is_slow(n: usize, share: f64) -> bool {
    ((n + 1) as f64 * share).floor() > (n as f64 * share).floor()
}

async fn measure(fixture: &Fixture, server: &Server, post_id: i64, config: &LiveConfig) -> AppResult<LiveResult> {
    let LiveConfig { subscribers, likes, connections, open_rate, slow_share, flood, time_cap } = *config;
    let slow_share = slow_share.clamp(0.0, 1.0);
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
    let finished = Finished::new(subscribers);
    for n in 0..subscribers {
        tokio::time::sleep(pace).await;
        let token = like_tokens[n % likes.max(1)].clone();
        let permit = opening.clone().acquire_owned().await.map_err(|e| internal("semaphore")(e.to_string()))?;
        let crowd = Crowd { ready: ready_tx.clone(), final_count: final_rx.clone(), done: finished.ticket() };
        let (url, post, slow) = (server.ws_url(), post.clone(), is_slow(n, slow_share));
        readers.push(tokio::spawn(async move { subscriber(url, token, post, permit, slow, crowd).await }));
    }
    for _ in 0..subscribers {
        if tokio::time::timeout(Duration::from_secs(60), ready_rx.recv()).await.ok().flatten().is_none() {
            return Err(AppError::Internal("subscribers did not all connect within 60 s".into()));
        }
    }
    // Let the last subscriptions finish their access checks before the storm starts.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_subscribed = rss_kib(server.pid);
    let flooding = match flood {
        0 => None,
        attempts => Some(start_flood(server, &like_tokens[0], attempts, open_rate).await?),
    };
    // The RSS from here until every subscriber is done: bounded, or growing with the slow ones'
    // queues.
    let rss_peak = Arc::new(AtomicU64::new(rss_subscribed));
    let rss_last = Arc::new(AtomicU64::new(rss_subscribed));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (peak, last, sampling, pid) = (rss_peak.clone(), rss_last.clone(), sampling.clone(), server.pid);
        tokio::spawn(async move {
            while sampling.load(Ordering::Relaxed) {
                let rss = rss_kib(pid);
                peak.fetch_max(rss, Ordering::Relaxed);
                last.store(rss, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    let load_before = load_average();
    let body = load::graphql_body(LIKE_POST, json!({ "p": post }));
    let requests = like_tokens
        .into_iter()
        .map(|authorization| Request { authorization, body: body.clone(), forwarded_for: None })
        .collect();
    let check: load::Check = Arc::new(|_, data| {
        data["likePost"]["likeCount"].as_i64().map(|_| ()).ok_or_else(|| format!("unexpected answer: {data}"))
    });
    let report = load::run(&server.graphql_url(), requests, connections, time_cap, check, false).await?;
    // The last count every subscriber must reach: what the database holds once it has caught up.
    let accepted = report.ok as i64;
    let flushing = Instant::now();
    while fixture.post_likes(post_id).await?.0 < accepted && flushing.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let _ = final_tx.send(accepted);

    let mut fast = Tally::default();
    let mut slow = Tally::default();
    let mut messages = Vec::new();
    for reader in readers {
        let seen = reader.await.map_err(|e| internal("subscriber task")(e.to_string()))??;
        if !seen.slow {
            messages.push(seen.updates.len() as f64);
        }
        let tally = if seen.slow { &mut slow } else { &mut fast };
        tally.add(seen, accepted);
    }
    sampling.store(false, Ordering::Relaxed);
    let _ = sampler.await;
    let flood = match flooding {
        Some((flood, at_cap)) => Some(FloodReport { held: flood.finish().await?, ..at_cap }),
        None => None,
    };
    fast.latencies.sort_by(f64::total_cmp);
    fast.during_storm.sort_by(f64::total_cmp);
    fast.final_count.sort_by(f64::total_cmp);
    slow.latencies.sort_by(f64::total_cmp);
    messages.sort_by(f64::total_cmp);
    let rss_peak = rss_peak.load(Ordering::Relaxed).max(rss_kib(server.pid));
    Ok(LiveResult {
        subscribers,
        slow_share,
        fast_subscribers: fast.subscribers,
        slow_subscribers: slow.subscribers,
        likes_accepted: report.ok,
        likes_failed: report.failed,
        likes_per_s: report.rate(),
        commit_to_client_p50_ms: percentile(&fast.latencies, 50.0),
        commit_to_client_p99_ms: percentile(&fast.latencies, 99.0),
        commit_to_client_max_ms: fast.latencies.last().copied().unwrap_or(f64::NAN),
        samples: fast.latencies.len(),
        during_storm_p99_ms: percentile(&fast.during_storm, 99.0),
        final_count_p50_ms: percentile(&fast.final_count, 50.0),
        final_count_p99_ms: percentile(&fast.final_count, 99.0),
        saw_final: fast.saw_final,
        fast_closed: fast.closed,
        slow_commit_to_client_p50_ms: percentile(&slow.latencies, 50.0),
        slow_commit_to_client_p99_ms: percentile(&slow.latencies, 99.0),
        slow_samples: slow.latencies.len(),
        slow_saw_final: slow.saw_final,
        slow_closed: slow.closed,
        messages_per_subscriber_p50: percentile(&messages, 50.0),
        rss_idle_mib: rss_idle / 1024,
        rss_subscribed_mib: rss_subscribed / 1024,
        memory_per_subscriber_kib: rss_subscribed.saturating_sub(rss_idle) as f64 / subscribers.max(1) as f64,
        rss_peak_mib: rss_peak / 1024,
        rss_end_mib: rss_last.load(Ordering::Relaxed) / 1024,
        load_before,
        flood,
        likes_per_s_without_subscribers: None,
        likes_share_of_without: None,
    })
}

/// Starts the flood, waits until its attempts settled, then measures the server holding its
/// cap with nothing else going on.
async fn start_flood(server: &Server, token: &str, attempts: usize, open_rate: u32) -> AppResult<(Flood, FloodReport)> {
    let (flood, opened) = Flood::start(&server.ws_url(), token, attempts, open_rate).await?;
    let before = cpu_seconds_of(server.pid);
    tokio::time::sleep(AT_CAP_WINDOW).await;
    let cpu = cpu_seconds_of(server.pid) - before;
    let metrics = server.metrics().await?;
    let get = |name: &str| metrics.get(name).copied().unwrap_or(f64::NAN);
    let report = FloodReport {
        opened,
        held: FloodHeld::default(),
        server_cpu_at_cap_percent: 100.0 * cpu / AT_CAP_WINDOW.as_secs_f64(),
        refused_for_descriptors: get("websocket_refusals_total{reason=\"descriptors\"}"),
        open_fds: get("process_open_fds"),
        max_fds: get("process_max_fds"),
        reserved_fds: get("process_reserved_fds"),
    };
    Ok((flood, report))
}

/// What one class of subscribers (fast or slow) saw.
#[derive(Default)]
struct Tally {
    subscribers: usize,
    latencies: Vec<f64>,
    /// The latencies before the final count, and of the final count.
    during_storm: Vec<f64>,
    final_count: Vec<f64>,
    saw_final: usize,
    closed: BTreeMap<String, usize>,
}

impl Tally {
    fn add(&mut self, seen: Seen, accepted: i64) {
        self.subscribers += 1;
        if seen.updates.iter().any(|u| u.count >= accepted) {
            self.saw_final += 1;
        }
        self.latencies.extend(seen.updates.iter().map(|u| u.latency_ms));
        for update in &seen.updates {
            let apart = if update.count >= accepted { &mut self.final_count } else { &mut self.during_storm };
            apart.push(update.latency_ms);
        }
        if let Some(code) = seen.closed {
            *self.closed.entry(code).or_default() += 1;
        }
    }
}

struct Update {
    count: i64,
    latency_ms: f64,
}

/// What one subscriber saw: its updates, and how the server closed its socket if it did.
struct Seen {
    slow: bool,
    updates: Vec<Update>,
    /// The close code the server sent, or "no close frame" when the socket ended without one.
    closed: Option<String>,
}

/// A protocol message as a subscriber reads it: only what it looks at, borrowed from the text.
#[derive(Deserialize)]
struct Frame<'a> {
    #[serde(rename = "type", borrow)]
    kind: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    payload: Option<FramePayload<'a>>,
}

#[derive(Default, Deserialize)]
struct FramePayload<'a> {
    #[serde(borrow)]
    data: Option<FrameData<'a>>,
    errors: Option<serde::de::IgnoredAny>,
}

#[derive(Default, Deserialize)]
struct FrameData<'a> {
    #[serde(rename = "likeCounts", borrow)]
    like_counts: Option<LikeCountsData<'a>>,
}

#[derive(Default, Deserialize)]
struct LikeCountsData<'a> {
    #[serde(rename = "likeCount")]
    like_count: Option<i64>,
    #[serde(rename = "likeCountCommittedAt", borrow)]
    committed_at: Option<std::borrow::Cow<'a, str>>,
}

/// How many subscribers are done reading. Each holds a `Done` ticket and waits for all before
/// it closes its socket.
struct Finished {
    total: usize,
    count: AtomicUsize,
    all: watch::Sender<bool>,
}

impl Finished {
    fn new(total: usize) -> Arc<Self> {
        Arc::new(Self { total, count: AtomicUsize::new(0), all: watch::Sender::new(false) })
    }

    /// The ticket of one subscriber.
    fn ticket(self: &Arc<Self>) -> Done {
        Done(self.clone())
    }
}

/// One subscriber's place in `Finished`: counted done when dropped.
struct Done(Arc<Finished>);

impl Done {
    /// Counts this subscriber done, then waits until every one is, for at most `DONE_WAIT`.
    async fn wait_for_all(self) {
        let mut all = self.0.all.subscribe();
        drop(self);
        let _ = tokio::time::timeout(DONE_WAIT, all.wait_for(|all| *all)).await;
    }
}

impl Drop for Done {
    // Also when a subscriber ends in an error: the others do not wait for it.
    fn drop(&mut self) {
        if self.0.count.fetch_add(1, Ordering::SeqCst) + 1 == self.0.total {
            self.0.all.send_replace(true);
        }
    }
}

/// What a subscriber shares with the others: where it says it is subscribed, where it learns
/// the final count, and its place among those done reading.
struct Crowd {
    ready: tokio::sync::mpsc::Sender<()>,
    final_count: watch::Receiver<i64>,
    done: Done,
}

/// One websocket subscriber: every update it received, until it has seen the final count
/// (or 10 s passed after the final count was known), or the server closed its socket. A slow
/// one sleeps `SLOW_READ_INTERVAL` after every frame until the final count is known. It closes
/// its socket once every subscriber is done reading (`Done`).
async fn subscriber(
    url: String,
    token: String,
    post: String,
    permit: tokio::sync::OwnedSemaphorePermit,
    slow: bool,
    crowd: Crowd,
) -> AppResult<Seen> {
    let Crowd { ready, final_count, done } = crowd;
    let receive_buffer = slow.then_some(SLOW_RECEIVE_BUFFER);
    let mut ws = open_subscription_with(url, token, LIKE_COUNTS, json!({ "ids": [post] }), receive_buffer).await?;
    drop(permit);
    let _ = ready.send(()).await;
    let mut updates: Vec<Update> = Vec::new();
    let mut closed = None;
    // Made once, reset when the final count is known: the 15,000 readers must not register
    // a timer per frame they read (the load generator shares the server's two cores).
    let deadline = tokio::time::sleep(Duration::from_secs(600));
    // Also made once: a `changed()` made per frame would register each of the 15,000 readers
    // again on the one channel they share, for every frame.
    let mut final_watch = final_count.clone();
    let final_announced = async move { final_watch.changed().await };
    tokio::pin!(deadline, final_announced);
    let mut final_known = false;
    loop {
        if updates.last().is_some_and(|u| u.count >= *final_count.borrow()) {
            break;
        }
        tokio::select! {
            message = ws.next() => {
                let message = match message {
                    Some(Ok(message)) => message,
                    Some(Err(_)) | None => {
                        closed = Some("no close frame".to_owned());
                        break;
                    }
                };
                if slow && !final_known {
                    tokio::time::sleep(SLOW_READ_INTERVAL).await;
                }
                if let Message::Close(frame) = &message {
                    closed = Some(frame.as_ref().map_or_else(
                        || "no close frame".to_owned(),
                        |f| format!("{} {}", u16::from(f.code), f.reason),
                    ));
                    break;
                }
                let Message::Text(text) = message else { continue };
                let received = SystemTime::now();
                let frame: Frame<'_> = match serde_json::from_str(&text) {
                    Ok(frame) => frame,
                    Err(e) => return Err(AppError::Internal(format!("a frame that is not a protocol message ({e}): {text}"))),
                };
                if frame.kind == "ping" {
                    // The server drops a graphql-transport-ws peer that leaves its pings unanswered.
                    let _ = ws.send(pong()).await;
                    continue;
                }
                let payload = frame.payload.unwrap_or_default();
                if payload.errors.is_some() || frame.kind == "error" {
                    return Err(AppError::Internal(format!("a subscription was refused: {text}")));
                }
                let data = payload.data.and_then(|data| data.like_counts).unwrap_or_default();
                let (Some(count), Some(committed)) = (data.like_count, data.committed_at) else {
                    continue;
                };
                let committed = chrono::DateTime::parse_from_rfc3339(&committed)
                    .map_err(|e| AppError::Internal(format!("likeCountCommittedAt `{committed}`: {e}")))?;
                let received: chrono::DateTime<chrono::Utc> = received.into();
                let latency_ms = (received - committed.to_utc()).num_microseconds().unwrap_or(0) as f64 / 1000.0;
                updates.push(Update { count, latency_ms });
            }
            changed = &mut final_announced, if !final_known => {
                if changed.is_err() { break }
                final_known = true;
                deadline.as_mut().reset(tokio::time::Instant::now() + Duration::from_secs(10));
            }
            _ = &mut deadline => break,
        }
    }
    // Hold the socket until every subscriber is done reading: watchers of a page do not close
    // it on a count, and 15,000 close handshakes at once would compete with the final count's
    // delivery to the others.
    done.wait_for_all().await;
    let _ = ws.close(None).await;
    Ok(Seen { slow, updates, closed })
}

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A websocket (graphql-transport-ws) that has sent `connection_init` with `authorization` and
/// subscribed (id `1`) to `query` with `variables`.
pub async fn open_subscription(url: String, authorization: String, query: &str, variables: Value) -> AppResult<Socket> {
    open_subscription_with(url, authorization, query, variables, None).await
}

/// `open_subscription`, with `receive_buffer` bytes asked of the kernel for the socket's
/// receive buffer (`SO_RCVBUF`, before connecting) and as the websocket's read buffer.
async fn open_subscription_with(
    url: String,
    authorization: String,
    query: &str,
    variables: Value,
    receive_buffer: Option<usize>,
) -> AppResult<Socket> {
    let ws_error = internal("websocket");
    let request = graphql_ws_request(&url).map_err(&ws_error)?;
    let (mut ws, _) = match receive_buffer {
        // Frames here are small: a 4 KiB read buffer instead of tungstenite's 128 KiB (zeroed
        // for each of thousands of sockets, on the machine the server runs on).
        None => tokio_tungstenite::connect_async_with_config(
            request,
            Some(WebSocketConfig::default().read_buffer_size(FAST_READ_BUFFER)),
            false,
        )
        .await
        .map_err(|e| ws_error(e.to_string()))?,
        Some(bytes) => {
            let uri = request.uri();
            let host = uri.host().unwrap_or("127.0.0.1").to_owned();
            let port = uri.port_u16().unwrap_or(80);
            let address = tokio::net::lookup_host((host.as_str(), port))
                .await
                .map_err(|e| ws_error(e.to_string()))?
                .next()
                .ok_or_else(|| ws_error(format!("no address for {host}")))?;
            let socket =
                if address.is_ipv4() { tokio::net::TcpSocket::new_v4() } else { tokio::net::TcpSocket::new_v6() }
                    .map_err(|e| ws_error(e.to_string()))?;
            socket.set_recv_buffer_size(bytes as u32).map_err(|e| ws_error(e.to_string()))?;
            let stream = socket.connect(address).await.map_err(|e| ws_error(e.to_string()))?;
            let config = WebSocketConfig::default().read_buffer_size(bytes);
            tokio_tungstenite::client_async_with_config(
                request,
                tokio_tungstenite::MaybeTlsStream::Plain(stream),
                Some(config),
            )
            .await
            .map_err(|e| ws_error(e.to_string()))?
        }
    };
    let send = |v: Value| Message::Text(v.to_string().into());
    ws.send(connection_init(&authorization)).await.map_err(|e| ws_error(e.to_string()))?;
    ws.send(send(json!({ "id": "1", "type": "subscribe", "payload": { "query": query, "variables": variables } })))
        .await
        .map_err(|e| ws_error(e.to_string()))?;
    Ok(ws)
}

/// The upgrade request of a graphql-transport-ws client to `url`.
pub fn graphql_ws_request(url: &str) -> Result<tokio_tungstenite::tungstenite::handshake::client::Request, String> {
    let mut request = url.into_client_request().map_err(|e| e.to_string())?;
    let protocol = "graphql-transport-ws".parse().map_err(|_| "the protocol header".to_owned())?;
    request.headers_mut().insert("Sec-WebSocket-Protocol", protocol);
    Ok(request)
}

/// `connection_init` with `authorization` (a bearer token).
pub fn connection_init(authorization: &str) -> Message {
    Message::Text(
        json!({ "type": "connection_init", "payload": { "authorization": authorization } }).to_string().into(),
    )
}

/// The answer to a graphql-transport-ws `ping` (the server drops a peer that leaves its pings
/// unanswered).
pub fn pong() -> Message {
    Message::Text(json!({ "type": "pong" }).to_string().into())
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

/// `run`, after the same storm with no subscriber when `baseline` is set (its own fresh
/// course, so its liked-sets are cold too).
pub async fn run_with_baseline(cli: &crate::Cli, config: &LiveConfig, baseline: bool) -> AppResult<LiveResult> {
    let without = if baseline {
        let alone = LiveConfig { subscribers: 0, slow_share: 0.0, flood: 0, ..*config };
        Some(run(cli, &alone).await?.likes_per_s)
    } else {
        None
    };
    let mut result = run(cli, config).await?;
    result.likes_per_s_without_subscribers = without;
    result.likes_share_of_without = without.filter(|w| *w > 0.0).map(|w| result.likes_per_s / w);
    Ok(result)
}

/// `bench live` on its own: a fresh database.
pub async fn run(cli: &crate::Cli, config: &LiveConfig) -> AppResult<LiveResult> {
    let fixture = Fixture::create(&cli.database_url, config.likes as i64).await?;
    let outcome = async {
        let post = fixture.add_posts(1, 1, "live").await?[0];
        run_on(cli, &fixture, post, config).await
    }
    .await;
    fixture.drop().await?;
    outcome
}
