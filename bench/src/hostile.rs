//! `bench hostile`: what hostile clients cost the people who are not. On one real `course-forum
//! serve` process, R ordinary readers (the course page of `bench page`, checked) read alone for
//! a fixed window, then for the same window beside H hostile clients, each bounded in requests
//! and in time (every request has a timeout, every phase a deadline), so the bench ends however
//! the server behaves. It prints the readers' throughput beside the hostile clients as a
//! fraction of their throughput alone, the server's resident memory at the end against the
//! cache budget it was given (`CACHE_BUDGET_BYTES`), the growth of Redis during the hostile
//! window, and for each hostile kind what was sent, how it was answered (error codes counted,
//! timeouts as such) and how long the answers took.
//!
//! The hostile kinds, each HTTP client sending them in turn (a different one first):
//! - `chain`: anonymous, a chain of 20 to 31 fragments each spreading the next twice;
//! - `pq`: anonymous persisted-query floods: distinct 60 KB documents that are only a comment,
//!   the same with `{ __typename }` after the comment (parseable), 60 KB of fields (a large
//!   parsed tree), and unknown hashes alone;
//! - `cursor`: a member reads a course of large posts through 30 aliases of `posts(first: 100)`,
//!   each after a forged cursor (past the newest post, in the `k:<id>` format of 6b52d0b, or
//!   random base64);
//! - `mention`: a member creates posts whose 20,000-character body mentions 4,000 handles;
//! - `subscription`: the hostile members hold websockets subscribed to `courseActivity` with a
//!   selection reading a thread of 99 comments of 99 replies per event, while an ordinary
//!   member comments on that thread at a steady pace.
//!
//! Missing a goal is reported in the table, not as a failure: the exit status is non-zero
//! only when the bench itself could not run. The Redis figures are read on `--redis-url` (a
//! single node). The fraction compares two windows on the same machine: run it on a quiet one.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use course_forum::testing::config::LikeMode;
use course_forum::testing::error::{AppError, AppResult};
use course_forum::testing::graphql::ids::{NodeKind, encode};
use futures_util::{SinkExt, StreamExt};
use rand::Rng;
use serde_json::{Value, json};
use sha2::Digest;
use tokio_tungstenite::tungstenite::protocol::Message;

use crate::fixture::Fixture;
use crate::load::{self, Request};
use crate::percentile;
use crate::server::{Server, internal, label, rss_bytes};
use crate::storm::tokens;

/// One kind of hostile traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Kind {
    Chain,
    Pq,
    Cursor,
    Mention,
    Subscription,
}

impl Kind {
    fn describe(self) -> &'static str {
        match self {
            Kind::Chain => "fragment chain 20..31 (anon)",
            Kind::Pq => "persisted-query flood (anon)",
            Kind::Cursor => "forged cursors x30 (member)",
            Kind::Mention => "mention bomb 4,000 (member)",
            Kind::Subscription => "deep courseActivity (member)",
        }
    }
}

/// What the command line chose (`bench hostile --help`).
#[derive(Clone, Debug, clap::Args)]
pub struct HostileConfig {
    /// Ordinary readers, each on a keep-alive connection of its own, reading the course page
    /// (at least 21: the page's posts have 20 authors among them).
    #[arg(long, default_value_t = 32)]
    pub readers: usize,
    /// Hostile clients (HTTP loops, each sending the HTTP kinds in turn; the subscriptions are
    /// spread over their members).
    #[arg(long, default_value_t = 4)]
    pub hostile_clients: usize,
    /// The hostile kinds to send (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "chain,pq,cursor,mention,subscription")]
    pub kinds: Vec<Kind>,
    /// Length of each phase (readers alone, then readers beside the hostile clients), in seconds.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Longest the bench waits for any one answer, in seconds (a longer one counts as a timeout).
    #[arg(long, default_value_t = 5)]
    pub request_timeout_secs: u64,
    /// Most HTTP requests one hostile client sends in its window.
    #[arg(long, default_value_t = 400)]
    pub hostile_requests: usize,
    /// `CACHE_BUDGET_BYTES` given to the server, in MiB: the RSS goal is this plus 64 MiB.
    #[arg(long, default_value_t = 64)]
    pub cache_budget_mib: u64,
    /// Posts in the course the forged cursors read.
    #[arg(long, default_value_t = 100)]
    pub flood_posts: i64,
    /// Body size of those posts, in bytes.
    #[arg(long, default_value_t = 20_000)]
    pub post_body_bytes: usize,
    /// Websocket subscriptions held by the hostile members (kind `subscription`).
    #[arg(long, default_value_t = 40)]
    pub subscriptions: usize,
    /// Pause between the ordinary member's comments on the deep thread, in ms.
    #[arg(long, default_value_t = 500)]
    pub comment_interval_ms: u64,
}

/// Counts of one kind over the hostile window.
#[derive(Debug, Default)]
pub struct KindStats {
    pub sent: usize,
    /// How each was answered: `ok`, an error code (or codes, `+`-joined), `timeout`, ...
    pub outcomes: BTreeMap<String, usize>,
    /// Answer times in ms (for subscriptions: comment sent → event received), sorted at the end.
    pub latencies_ms: Vec<f64>,
}

impl KindStats {
    fn record(&mut self, outcome: String, took: Duration) {
        self.sent += 1;
        *self.outcomes.entry(outcome).or_default() += 1;
        self.latencies_ms.push(took.as_secs_f64() * 1000.0);
    }

    fn count(&mut self, outcome: String, n: usize) {
        *self.outcomes.entry(outcome).or_default() += n;
    }
}

/// One phase of the readers.
#[derive(Debug)]
pub struct ReaderPhase {
    pub pages: usize,
    pub failed: usize,
    pub first_failure: Option<String>,
    pub seconds: f64,
    pub pages_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

#[derive(Debug)]
pub struct HostileResult {
    pub server: String,
    pub config: HostileConfig,
    pub alone: ReaderPhase,
    pub beside: ReaderPhase,
    pub rss_before: u64,
    pub rss_end: u64,
    pub redis_used_before: u64,
    pub redis_used_after: u64,
    pub prefix_before: (usize, u64),
    pub prefix_after: (usize, u64),
    pub kinds: BTreeMap<String, KindStats>,
    pub healthz_after: String,
    pub cache_metrics: Vec<String>,
}

/// Users: readers 2..=R+1 (members of course 1); the hostile members next, then the ordinary
/// commenter; those are the members of course 2, where the hostile traffic goes.
pub async fn run(cli: &crate::Cli, config: &HostileConfig) -> AppResult<HostileResult> {
    let exe = cli.servers()?.remove(0);
    let readers = config.readers.max(21);
    let hostile = config.hostile_clients.max(1);
    let first_hostile = readers as i64 + 2;
    let commenter = first_hostile + hostile as i64;
    let fixture = Fixture::create(&cli.database_url, commenter - 1).await?;
    let outcome = async {
        crate::page::prepare(&fixture, readers).await?;
        let course = fixture.add_course("HOSTILE", first_hostile, commenter).await?;
        let flood = fixture.add_posts_sized(course, config.flood_posts, commenter, config.post_body_bytes).await?;
        let thread = fixture.add_posts_sized(course, 1, commenter, 200).await?[0];
        fixture.add_thread(thread, 99, 99, commenter).await?;
        let newest = flood.last().copied().unwrap_or(thread).max(thread);
        let budget = config.cache_budget_mib * 1024 * 1024;
        // RUST_LOG=error: the server's warnings under attack (slow pool acquisitions) would bury
        // the table (`--server-env RUST_LOG=warn` brings them back).
        let env = [
            ("VIEW_FLUSH_INTERVAL", "1h".to_owned()),
            ("CACHE_BUDGET_BYTES", budget.to_string()),
            ("RUST_LOG", "error".to_owned()),
        ];
        let server = Server::start(cli, &exe, &fixture.url, LikeMode::Buffered, &env).await?;
        let setup = Setup { readers, hostile, first_hostile, commenter, course, thread, newest };
        let result = measure(cli, config, &server, &setup).await.map(|mut r| {
            r.server = label(&exe);
            r
        });
        server.stop().await;
        result
    }
    .await;
    fixture.drop().await?;
    outcome
}

struct Setup {
    readers: usize,
    hostile: usize,
    first_hostile: i64,
    commenter: i64,
    course: i64,
    thread: i64,
    newest: i64,
}

async fn measure(cli: &crate::Cli, config: &HostileConfig, server: &Server, setup: &Setup) -> AppResult<HostileResult> {
    let window = Duration::from_secs(config.seconds.max(1));
    let timeout = Duration::from_secs(config.request_timeout_secs.max(1));
    let readers = setup.readers;
    let reader_tokens = Arc::new(tokens(2, readers)?);
    let page_body: Arc<str> =
        load::graphql_body(&crate::page::course_page("NEW"), json!({ "c": encode(NodeKind::Course, 1) })).into();
    let make: load::MakeRequest = {
        let (reader_tokens, page_body) = (reader_tokens.clone(), page_body.clone());
        Arc::new(move |n| Request {
            authorization: reader_tokens[n % readers].clone(),
            body: page_body.to_string(),
            forwarded_for: None,
        })
    };
    let check: load::Check = Arc::new(|_, data| {
        let edges = data["course"]["posts"]["edges"].as_array().ok_or("no edges")?;
        if edges.len() != 20 {
            return Err(format!("{} posts instead of 20", edges.len()));
        }
        Ok(())
    });
    let url = server.graphql_url();
    let read = |window: Duration| {
        let (url, make, check) = (url.clone(), make.clone(), check.clone());
        async move {
            let report =
                load::run_generated(&url, 100_000_000, make, readers, window, check, false, Some(timeout)).await?;
            Ok::<_, AppError>(ReaderPhase {
                pages: report.ok,
                failed: report.failed,
                first_failure: report.first_failure.clone(),
                seconds: report.elapsed.as_secs_f64(),
                pages_per_s: report.rate(),
                p50_ms: report.p(50.0),
                p99_ms: report.p(99.0),
            })
        }
    };
    // One untimed read per reader (connections, liked-sets), then the readers alone.
    let warm = (0..readers).map(|n| make(n)).collect();
    load::warm_up("hostile readers", &url, warm, readers, Duration::from_secs(60), check.clone()).await?;
    eprintln!("hostile: readers alone for {} s", window.as_secs());
    let alone = read(window).await?;

    let mut redis = redis::Client::open(cli.redis_url.as_str())?.get_multiplexed_async_connection().await?;
    let redis_used_before = used_memory(&mut redis).await?;
    let prefix_before = prefix_usage(&mut redis, &server.prefix).await?;
    let rss_before = rss_bytes(server.pid);

    eprintln!("hostile: readers beside {} hostile clients for {} s", setup.hostile, window.as_secs());
    let stats: Arc<Mutex<BTreeMap<String, KindStats>>> = Arc::default();
    let deadline = Instant::now() + window;
    let member_tokens = Arc::new(tokens(setup.first_hostile, setup.hostile)?);
    let mut hostile_tasks = Vec::new();
    let http_kinds: Vec<Kind> = config.kinds.iter().copied().filter(|k| *k != Kind::Subscription).collect();
    if !http_kinds.is_empty() {
        for client in 0..setup.hostile {
            let targets = Targets {
                url: url.clone(),
                course: encode(NodeKind::Course, setup.course).to_string(),
                newest: setup.newest,
                token: member_tokens[client].clone(),
            };
            let (kinds, stats, limit) = (http_kinds.clone(), stats.clone(), config.hostile_requests);
            hostile_tasks.push(tokio::spawn(async move {
                http_client(client, kinds, targets, stats, deadline, timeout, limit).await
            }));
        }
    }
    let mut subscriptions = Vec::new();
    let sent_at: SentComments = Arc::default();
    if config.kinds.contains(&Kind::Subscription) {
        // As deep as the cost limit of 6b52d0b accepts (99 comments of 99 replies: 9,801 rows
        // per event per subscription).
        let query = "subscription($c: ID!) { courseActivity(courseId: $c) { comment { body post { \
                     comments(first: 99) { nodes { replies(first: 99) { nodes { id } } } } } } } }";
        let course = encode(NodeKind::Course, setup.course).to_string();
        for n in 0..config.subscriptions {
            let (url, token) = (server.ws_url(), member_tokens[n % setup.hostile].clone());
            let (stats, sent_at, course) = (stats.clone(), sent_at.clone(), course.clone());
            subscriptions.push(tokio::spawn(async move {
                subscriber(url, token, query, course, stats, sent_at, deadline).await
            }));
        }
        let comment_token = tokens(setup.commenter, 1)?.remove(0);
        let thread = encode(NodeKind::Post, setup.thread).to_string();
        let (url, stats, pause) = (url.clone(), stats.clone(), Duration::from_millis(config.comment_interval_ms));
        let sent_at = sent_at.clone();
        hostile_tasks.push(tokio::spawn(async move {
            commenter(url, comment_token, thread, stats, sent_at, deadline, timeout, pause).await
        }));
    }
    let beside = read(window).await?;
    for task in hostile_tasks {
        task.await.map_err(|e| internal("hostile task")(e.to_string()))??;
    }
    // Once the commenter is done: the comments accepted after a subscription opened that it
    // had not been told of by the deadline.
    for task in subscriptions {
        let Some(held) = task.await.map_err(|e| internal("subscription task")(e.to_string()))?? else { continue };
        let missing = sent_at
            .lock()
            .map(|sent| {
                sent.iter()
                    .filter(|(body, c)| c.accepted && c.at >= held.opened && !held.received.contains(*body))
                    .count()
            })
            .unwrap_or(0);
        with_row(&stats, SUBSCRIPTION_ROW, |row| {
            row.count("held to the end".into(), 1);
            if missing > 0 {
                row.count("event not there by the end".into(), missing);
            }
        });
    }
    let rss_end = rss_bytes(server.pid);
    let redis_used_after = used_memory(&mut redis).await?;
    let prefix_after = prefix_usage(&mut redis, &server.prefix).await?;
    let (healthz_after, cache_metrics) = after_look(server).await;
    let mut kinds = std::mem::take(&mut *stats.lock().map_err(|_| AppError::Internal("stats lock".into()))?);
    for stats in kinds.values_mut() {
        stats.latencies_ms.sort_by(f64::total_cmp);
    }
    Ok(HostileResult {
        server: String::new(),
        config: config.clone(),
        alone,
        beside,
        rss_before,
        rss_end,
        redis_used_before,
        redis_used_after,
        prefix_before,
        prefix_after,
        kinds,
        healthz_after,
        cache_metrics,
    })
}

/// Where a hostile HTTP client aims.
struct Targets {
    url: String,
    /// Course 2's global id.
    course: String,
    /// The newest post id of the course: forged cursors lie past it.
    newest: i64,
    /// The client's member token, `Bearer …`.
    token: String,
}

/// One hostile HTTP client: the kinds in turn (starting at its own), until the deadline or
/// `limit` requests.
async fn http_client(
    client: usize,
    kinds: Vec<Kind>,
    targets: Targets,
    stats: Arc<Mutex<BTreeMap<String, KindStats>>>,
    deadline: Instant,
    timeout: Duration,
    limit: usize,
) -> AppResult<()> {
    let http = reqwest::Client::builder()
        .timeout(timeout)
        .pool_max_idle_per_host(1)
        .build()
        .map_err(|e| internal("HTTP client")(e.to_string()))?;
    for n in 0..limit {
        if Instant::now() >= deadline {
            break;
        }
        let kind = kinds[(client + n) % kinds.len()];
        let (row, member, body) = hostile_request(kind, n / kinds.len(), &targets);
        let authorization = member.then_some(targets.token.as_str());
        let sent = Instant::now();
        let outcome = send(&http, &targets.url, authorization, body).await;
        let took = sent.elapsed();
        with_row(&stats, &row, |row| row.record(outcome, took));
    }
    Ok(())
}

/// The table row, whether it is sent as the member, and the JSON body of the `n`-th request of
/// `kind` from one client.
fn hostile_request(kind: Kind, n: usize, targets: &Targets) -> (String, bool, String) {
    let mut rng = rand::rng();
    let row = |what: &str| format!("{:<30} {what}", kind.describe());
    match kind {
        Kind::Chain => {
            let levels: usize = rng.random_range(20..=31);
            let mut doc = String::from("query { ...F0 }");
            for i in 0..levels - 1 {
                doc.push_str(&format!(" fragment F{i} on Query {{ ...F{j} ...F{j} }}", j = i + 1));
            }
            doc.push_str(&format!(" fragment F{} on Query {{ __typename }}", levels - 1));
            (row(""), false, json!({ "query": doc }).to_string())
        }
        Kind::Pq => {
            let comment: String =
                (&mut rng).sample_iter(rand::distr::Alphanumeric).take(60_000).map(char::from).collect();
            let (what, text) = match n % 4 {
                0 => ("comment only", Some(format!("# {comment}"))),
                1 => ("comment + {__typename}", Some(format!("# {comment}\n{{ __typename }}"))),
                // 60 KB that parse into a large tree (made distinct by a short comment): what a
                // parsed-document cache counted by entries rather than bytes holds.
                2 => ("60 KB of fields", Some(format!("# {}\n{{{} }}", &comment[..16], " __typename".repeat(5_450)))),
                _ => ("unknown hash only", None),
            };
            let hash = match &text {
                Some(text) => hex(&sha2::Sha256::digest(text.as_bytes())),
                None => hex(&sha2::Sha256::digest(rng.random::<u64>().to_le_bytes())),
            };
            let extensions = json!({ "persistedQuery": { "version": 1, "sha256Hash": hash } });
            let body = match text {
                Some(text) => json!({ "query": text, "extensions": extensions }),
                None => json!({ "extensions": extensions }),
            };
            (row(what), false, body.to_string())
        }
        Kind::Cursor => {
            // Three requests in four forge cursors the way 6b52d0b wrote them (`k:<id>`, past
            // the newest post: every one a new page key holding the same 100 posts); the
            // fourth sends random base64.
            let random = n % 4 == 3;
            let mut variables = serde_json::Map::new();
            let mut params = String::from("$c: ID!");
            let mut fields = String::new();
            for a in 0..30 {
                let cursor = if random {
                    STANDARD.encode((0..24).map(|_| rng.random::<u8>()).collect::<Vec<u8>>())
                } else {
                    URL_SAFE_NO_PAD.encode(format!("k:{}", targets.newest + rng.random_range(1..1_000_000_000_000i64)))
                };
                variables.insert(format!("a{a}"), Value::String(cursor));
                params.push_str(&format!(", $a{a}: String"));
                fields.push_str(&format!(" p{a}: posts(first: 100, after: $a{a}) {{ edges {{ node {{ id }} }} }}"));
            }
            variables.insert("c".into(), Value::String(targets.course.clone()));
            let query = format!("query({params}) {{ course(id: $c) {{{fields} }} }}");
            let what = if random { "random base64" } else { "k:<id> past newest" };
            (row(what), true, json!({ "query": query, "variables": variables }).to_string())
        }
        Kind::Mention => {
            // 4,000 distinct three-character handles: "@abc " five characters each.
            let start: usize = rng.random_range(0..36 * 36 * 36);
            let digit = |d: usize| char::from_digit((d % 36) as u32, 36).unwrap_or('a');
            let body: String = (0..4000)
                .map(|i| {
                    let h = (start + i) % (36 * 36 * 36);
                    format!("@{}{}{} ", digit(h / 1296 + 10), digit(h / 36), digit(h))
                })
                .collect();
            let query =
                "mutation($c: ID!, $b: String!) { createPost(courseId: $c, title: \"mentions\", body: $b) { id } }";
            (row(""), true, json!({ "query": query, "variables": { "c": targets.course, "b": body } }).to_string())
        }
        Kind::Subscription => (row(""), true, String::new()),
    }
}

/// Sends one request; how it was answered: `ok`, the error codes (`+`-joined, after the status
/// when it is not 200), `timeout`, or what went wrong on the way.
async fn send(http: &reqwest::Client, url: &str, authorization: Option<&str>, body: String) -> String {
    let mut request = http.post(url).header(reqwest::header::CONTENT_TYPE, "application/json").body(body);
    if let Some(authorization) = authorization {
        request = request.header(reqwest::header::AUTHORIZATION, authorization);
    }
    let failed = |e: reqwest::Error| if e.is_timeout() { "timeout".to_owned() } else { format!("transport: {e}") };
    let response = match request.send().await {
        Ok(response) => response,
        Err(e) => return failed(e),
    };
    let status = response.status();
    let bytes = match response.bytes().await {
        Ok(bytes) => bytes,
        Err(e) => return failed(e),
    };
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let mut codes: Vec<String> = body["errors"]
        .as_array()
        .map(|errors| errors.iter().map(|e| e["extensions"]["code"].as_str().unwrap_or("no code").to_owned()).collect())
        .unwrap_or_default();
    codes.sort();
    codes.dedup();
    let answer = if codes.is_empty() {
        if body["data"].is_object() { "ok".to_owned() } else { "no data".to_owned() }
    } else {
        codes.join("+")
    };
    if status == reqwest::StatusCode::OK { answer } else { format!("HTTP {} {answer}", status.as_u16()) }
}

const SUBSCRIPTION_ROW: &str = "deep courseActivity (member)";
const COMMENT_ROW: &str = "  trigger: comments (ordinary member)";

/// A comment the ordinary member sent: when, and whether it was accepted (then every open
/// subscription should deliver it).
struct Sent {
    at: Instant,
    accepted: bool,
}

type SentComments = Arc<Mutex<BTreeMap<String, Sent>>>;

fn with_row(stats: &Mutex<BTreeMap<String, KindStats>>, row: &str, update: impl FnOnce(&mut KindStats)) {
    if let Ok(mut stats) = stats.lock() {
        update(stats.entry(row.to_owned()).or_default());
    }
}

/// One expensive subscription, held until the deadline. Its row counts subscriptions as sent;
/// its answers are the events (timed from their comment's sending), refusals, closes, and the
/// accepted comments whose event had not arrived by the deadline.
async fn subscriber(
    url: String,
    token: String,
    query: &'static str,
    course: String,
    stats: Arc<Mutex<BTreeMap<String, KindStats>>>,
    sent_comments: SentComments,
    deadline: Instant,
) -> AppResult<Option<Held>> {
    let answer = |outcome: String| with_row(&stats, SUBSCRIPTION_ROW, |row| row.count(outcome, 1));
    with_row(&stats, SUBSCRIPTION_ROW, |row| row.sent += 1);
    let opened = Instant::now();
    let connecting = tokio::time::timeout_at(
        deadline.into(),
        crate::live::open_subscription(url, token, query, json!({ "c": course })),
    )
    .await;
    let mut ws = match connecting {
        Ok(Ok(ws)) => ws,
        Ok(Err(e)) => {
            answer(format!("connect failed: {e}"));
            return Ok(None);
        }
        Err(_) => {
            answer("timeout (connecting)".into());
            return Ok(None);
        }
    };
    let mut received = std::collections::HashSet::new();
    loop {
        let message = match tokio::time::timeout_at(deadline.into(), ws.next()).await {
            Err(_) => break,
            Ok(None) | Ok(Some(Err(_))) => {
                answer("closed by the server".into());
                return Ok(None);
            }
            Ok(Some(Ok(message))) => message,
        };
        let text = match message {
            Message::Text(text) => text,
            Message::Close(_) => {
                answer("closed by the server".into());
                return Ok(None);
            }
            _ => continue,
        };
        let value: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        match value["type"].as_str() {
            Some("ping") => {
                let _ = ws.send(Message::Text(json!({ "type": "pong" }).to_string().into())).await;
            }
            Some("next") => {
                if let Some(first) = value["payload"]["errors"].as_array().and_then(|e| e.first()) {
                    answer(format!("event with {}", first["extensions"]["code"].as_str().unwrap_or("no code")));
                    continue;
                }
                let body = value["payload"]["data"]["courseActivity"]["comment"]["body"].as_str().unwrap_or_default();
                let sent = sent_comments.lock().ok().and_then(|s| s.get(body).map(|c| c.at));
                received.insert(body.to_owned());
                with_row(&stats, SUBSCRIPTION_ROW, |row| {
                    row.count("event".into(), 1);
                    if let Some(sent) = sent {
                        row.latencies_ms.push(sent.elapsed().as_secs_f64() * 1000.0);
                    }
                });
            }
            Some("error") => {
                let code = value["payload"][0]["extensions"]["code"].as_str().unwrap_or("no code").to_owned();
                answer(format!("refused {code}"));
                return Ok(None);
            }
            Some("complete") => {
                answer("completed by the server".into());
                return Ok(None);
            }
            _ => {}
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), ws.close(None)).await;
    Ok(Some(Held { opened, received }))
}

/// A subscription held to the end: when it opened and the comments it was told of.
struct Held {
    opened: Instant,
    received: std::collections::HashSet<String>,
}

/// The ordinary member who comments on the deep thread every `pause` until the deadline: each
/// comment is an event for every subscription.
// A scenario's knobs, each one of `bench hostile`'s flags, passed as they are parsed.
#[allow(clippy::too_many_arguments)]
async fn commenter(
    url: String,
    token: String,
    thread: String,
    stats: Arc<Mutex<BTreeMap<String, KindStats>>>,
    sent_comments: SentComments,
    deadline: Instant,
    timeout: Duration,
    pause: Duration,
) -> AppResult<()> {
    let http =
        reqwest::Client::builder().timeout(timeout).build().map_err(|e| internal("HTTP client")(e.to_string()))?;
    // Let the subscriptions open first.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let query = "mutation($p: ID!, $b: String!) { createComment(postId: $p, body: $b) { id } }";
    let mut n = 0;
    while Instant::now() < deadline {
        n += 1;
        let body = format!("bench comment {n} {}", uuid::Uuid::new_v4().simple());
        let at = Instant::now();
        if let Ok(mut sent) = sent_comments.lock() {
            sent.insert(body.clone(), Sent { at, accepted: false });
        }
        let request = json!({ "query": query, "variables": { "p": thread, "b": body } }).to_string();
        let outcome = send(&http, &url, Some(&token), request).await;
        if outcome == "ok"
            && let Ok(mut sent) = sent_comments.lock()
            && let Some(comment) = sent.get_mut(&body)
        {
            comment.accepted = true;
        }
        with_row(&stats, COMMENT_ROW, |row| row.record(outcome, at.elapsed()));
        tokio::time::sleep(pause).await;
    }
    Ok(())
}

/// `used_memory` of the whole Redis (shared: other users' keys move it too).
async fn used_memory(redis: &mut redis::aio::MultiplexedConnection) -> AppResult<u64> {
    let info: String = redis::cmd("INFO").arg("memory").query_async(redis).await?;
    Ok(info.lines().find_map(|l| l.strip_prefix("used_memory:")?.trim().parse().ok()).unwrap_or(0))
}

/// The keys under the server's prefix: how many, and their `MEMORY USAGE` summed (bytes).
async fn prefix_usage(redis: &mut redis::aio::MultiplexedConnection, prefix: &str) -> AppResult<(usize, u64)> {
    let pattern = format!("{prefix}:*");
    let mut cursor: u64 = 0;
    let (mut keys, mut bytes) = (0usize, 0u64);
    loop {
        let (next, batch): (u64, Vec<String>) =
            redis::cmd("SCAN").arg(cursor).arg("MATCH").arg(&pattern).arg("COUNT").arg(1000).query_async(redis).await?;
        if !batch.is_empty() {
            let mut pipe = redis::pipe();
            for key in &batch {
                pipe.cmd("MEMORY").arg("USAGE").arg(key);
            }
            let sizes: Vec<Option<u64>> = pipe.query_async(redis).await?;
            keys += batch.len();
            bytes += sizes.into_iter().flatten().sum::<u64>();
        }
        cursor = next;
        if cursor == 0 {
            return Ok((keys, bytes));
        }
    }
}

/// Whether `/healthz` answers within 2 s after the hostile window, and the `/metrics` lines
/// about caches (per-cache figures, when the server has them).
async fn after_look(server: &Server) -> (String, Vec<String>) {
    let Ok(http) = reqwest::Client::builder().timeout(Duration::from_secs(2)).build() else {
        return ("no HTTP client".into(), Vec::new());
    };
    let started = Instant::now();
    let healthz = match http.get(format!("{}/healthz", server.base)).send().await {
        Ok(r) if r.status().is_success() => format!("ok in {:.0} ms", started.elapsed().as_secs_f64() * 1000.0),
        Ok(r) => format!("HTTP {}", r.status().as_u16()),
        Err(e) if e.is_timeout() => "no answer within 2 s".into(),
        Err(e) => format!("failed: {e}"),
    };
    let metrics = match http.get(format!("{}/metrics", server.base)).send().await {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    };
    let lines =
        metrics.lines().filter(|l| !l.starts_with('#') && l.contains("cache")).take(30).map(str::to_owned).collect();
    (healthz, lines)
}

/// Lowercase hex, as `extensions.persistedQuery.sha256Hash` carries a digest.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "MISSED" }
}

pub fn print(r: &HostileResult) {
    let c = &r.config;
    println!(
        "bench hostile: {}, {} readers, {} hostile clients, kinds {:?}, {} s per phase, request timeout {} s, CACHE_BUDGET_BYTES={} ({} MiB)",
        r.server,
        r.alone_readers(),
        c.hostile_clients,
        c.kinds,
        c.seconds,
        c.request_timeout_secs,
        c.cache_budget_mib * 1024 * 1024,
        c.cache_budget_mib
    );
    println!();
    println!(
        "{:<38} {:>8} {:>7} {:>6} {:>9} {:>9} {:>9}",
        "readers (course page)", "pages", "failed", "s", "pages/s", "p50 ms", "p99 ms"
    );
    for (name, phase) in [("alone", &r.alone), ("beside the hostile clients", &r.beside)] {
        println!(
            "  {:<36} {:>8} {:>7} {:>6.1} {:>9.0} {:>9.1} {:>9.1}",
            name, phase.pages, phase.failed, phase.seconds, phase.pages_per_s, phase.p50_ms, phase.p99_ms
        );
        if let Some(why) = &phase.first_failure {
            println!("    first failure: {}", truncate(why, 160));
        }
    }
    let fraction = r.beside.pages_per_s / r.alone.pages_per_s.max(1e-9) * 100.0;
    let rss_goal = (c.cache_budget_mib + 64) * 1024 * 1024;
    let prefix_growth = r.prefix_after.1 as i64 - r.prefix_before.1 as i64;
    let used_growth = r.redis_used_after as i64 - r.redis_used_before as i64;
    println!();
    println!("{:<38} {:>24}   {:<28}", "measure", "value", "goal");
    println!(
        "{:<38} {:>22.1} %   {:<28} {}",
        "readers' throughput beside / alone",
        fraction,
        ">= 80 %",
        verdict(fraction >= 80.0)
    );
    println!(
        "{:<38} {:>20.1} MiB   {:<28} {}",
        "server RSS at the end",
        mib(r.rss_end),
        format!("< {} MiB (budget + 64)", rss_goal / (1024 * 1024)),
        verdict(r.rss_end > 0 && r.rss_end < rss_goal)
    );
    println!("{:<38} {:>20.1} MiB", "  (before the hostile window)", mib(r.rss_before));
    println!(
        "{:<38} {:>21.3} MB   {:<28} {}",
        "Redis growth, keys under the prefix",
        prefix_growth as f64 / 1e6,
        "< 1 MB",
        verdict(prefix_growth < 1_000_000)
    );
    println!("{:<38} {:>24}", "  (keys before -> after)", format!("{} -> {}", r.prefix_before.0, r.prefix_after.0));
    println!(
        "{:<38} {:>21.3} MB   {:<28}",
        "Redis used_memory growth (whole,",
        used_growth as f64 / 1e6,
        "shared with other users)"
    );
    println!("{:<38} {:>24}", "/healthz right after", r.healthz_after);
    println!();
    println!("{:<56} {:>6} {:>9} {:>9}   answers", "hostile kind", "sent", "p50 ms", "p99 ms");
    for (row, stats) in &r.kinds {
        let answers: Vec<String> = stats.outcomes.iter().map(|(o, n)| format!("{} {n}", truncate(o, 60))).collect();
        println!(
            "  {:<54} {:>6} {:>9.1} {:>9.1}   {}",
            row,
            stats.sent,
            percentile(&stats.latencies_ms, 50.0),
            percentile(&stats.latencies_ms, 99.0),
            answers.join(", ")
        );
    }
    if r.kinds.contains_key(SUBSCRIPTION_ROW) {
        println!(
            "  (subscriptions: sent = subscriptions, answers = their events (timed from the comment's \
             sending) and refusals; timeout = no answer within {} s)",
            c.request_timeout_secs
        );
    }
    if !r.cache_metrics.is_empty() {
        println!();
        println!("cache figures from /metrics at the end:");
        for line in &r.cache_metrics {
            println!("  {line}");
        }
    }
}

impl HostileResult {
    fn alone_readers(&self) -> usize {
        self.config.readers.max(21)
    }
}

fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        format!("{}…", text.chars().take(max).collect::<String>())
    }
}
