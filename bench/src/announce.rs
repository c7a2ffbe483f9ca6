//! `bench announce`: an announcement to a course of 10,000 members, through `POST /graphql`
//! (reqwest, keep-alive) against the application served in this process on a loopback port.
//!
//! - The writer: `createPost(kind: ANNOUNCEMENT)` by the course's instructor, one at a time;
//!   its latency, its SQL statements, and the rows it adds to `notifications` (none) and
//!   `course_announcements` (one), beside the same `createPost` as a DISCUSSION.
//! - A member's notification page after it: `notifications(first: 20)` with the unread count,
//!   read by members who also have notifications of their own, concurrently; every page is
//!   checked (20 items, the newest announcement first, the unread count).
//!
//! World: the fixture's course 1 with user 1 as instructor and `--members` students; before
//! the run, `--history` announcements and, for each reader, `--own` mentions of their own,
//! interleaved with the announcements by id.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use course_forum::testing::auth::TokenKeys;
use course_forum::testing::config::Settings;
use course_forum::testing::db::stmt;
use course_forum::testing::error::{AppError, AppResult};
use course_forum::testing::kv;
use course_forum::testing::startup::Application;
use course_forum::testing::state::AppState;
use sea_orm::{ConnectionTrait, FromQueryResult};
use serde::Serialize;
use serde_json::{Value, json};

use crate::fixture::Fixture;
use crate::{Cli, percentile};

const SECRET: &str = "bench-secret-0123456789abcdef";
const CREATE: &str = "mutation($k: PostKind!, $t: String!) { \
    createPost(courseId: \"Q291cnNlOjE\", title: $t, body: \"to every member\", kind: $k) { id kind } }";
const PAGE: &str = "query { notifications(first: 20) { unreadCount \
    edges { node { id kind read createdAt actor { handle } post { id title } } } } }";

/// What the command line chose (`bench announce --help`).
#[derive(Clone, Debug, Serialize, clap::Args)]
pub struct AnnounceBench {
    /// Students of the course (the instructor announces to them all).
    #[arg(long, default_value_t = 10_000)]
    pub members: i64,
    /// Announcements timed (and as many discussions beside them).
    #[arg(long, default_value_t = 30)]
    pub runs: usize,
    /// Announcements already in the course.
    #[arg(long, default_value_t = 40)]
    pub history: i64,
    /// Members who read their notifications.
    #[arg(long, default_value_t = 200)]
    pub readers: i64,
    /// Notifications of their own each reader has (mentions), among the announcements.
    #[arg(long, default_value_t = 20)]
    pub own: i64,
    /// Timed notification pages.
    #[arg(long, default_value_t = 2_000)]
    pub reads: usize,
    /// Concurrent HTTP connections reading.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
}

/// One line of latencies.
#[derive(Debug, Serialize)]
pub struct Timings {
    pub name: String,
    pub samples: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// SQL statements per request.
    pub sql_per_request: f64,
    /// Requests per second of wall time, all connections together (reads only).
    pub per_s: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct AnnounceResult {
    pub config: AnnounceBench,
    pub writes: Vec<Timings>,
    /// Rows the announcements added to `notifications` and to `course_announcements`.
    pub notification_rows_added: i64,
    pub announcement_rows_added: i64,
    pub page: Timings,
}

/// The application's settings, parsed like the server's own command line.
#[derive(Parser)]
struct ServerArgs {
    #[command(flatten)]
    settings: Settings,
}

pub async fn run(cli: &Cli, bench: &AnnounceBench) -> AppResult<AnnounceResult> {
    if bench.readers < 1 || bench.readers > bench.members || bench.runs == 0 {
        return Err(AppError::Config("--readers must be 1 to --members, and --runs at least 1".into()));
    }
    eprintln!("bench announce: building the world ({} members) …", bench.members);
    let fixture = Fixture::create(&cli.database_url, bench.members).await?;
    let prefix = format!("bench{}", uuid::Uuid::new_v4().simple());
    let outcome = measure(cli, bench, &fixture, &prefix).await;
    if let Ok(redis) = kv::connect(&cli.redis_url, Duration::from_secs(5), "bench").await {
        let _ = kv::unlink_matching(&redis, &format!("{prefix}:*")).await;
    }
    fixture.drop().await?;
    outcome
}

/// History: half the announcements, then every reader's own mentions, then the other half.
async fn build_world(fixture: &Fixture, bench: &AnnounceBench) -> AppResult<()> {
    let db = &fixture.db;
    let announcements = |count: i64| {
        stmt(
            "WITH p AS (INSERT INTO posts (course_id, user_id, title, body, kind) \
               SELECT 1, 1, 'announcement ' || n, 'to every member', 'announcement' \
               FROM generate_series(1, $1::bigint) n ORDER BY n RETURNING id) \
             INSERT INTO course_announcements (course_id, post_id, author_id) SELECT 1, id, 1 FROM p ORDER BY id",
            [count.into()],
        )
    };
    db.execute_raw(announcements(bench.history / 2)).await?;
    // Each reader is mentioned in `own` posts by user 1.
    db.execute_raw(stmt(
        "WITH p AS (INSERT INTO posts (course_id, user_id, title, body) \
           SELECT 1, 1, 'mention ' || n, 'you are mentioned' FROM generate_series(1, $1::bigint) n RETURNING id) \
         INSERT INTO notifications (recipient_id, course_id, kind, actor_id, post_id) \
         SELECT r, 1, 'mention', 1, p.id FROM p, generate_series(2, $2::bigint + 1) r ORDER BY p.id, r",
        [bench.own.into(), bench.readers.into()],
    ))
    .await?;
    db.execute_raw(announcements(bench.history - bench.history / 2)).await?;
    db.execute_unprepared("ANALYZE").await?;
    Ok(())
}

async fn measure(cli: &Cli, bench: &AnnounceBench, fixture: &Fixture, prefix: &str) -> AppResult<AnnounceResult> {
    build_world(fixture, bench).await?;
    let args = ServerArgs::try_parse_from([
        "bench-announce",
        "--database-url",
        &fixture.url,
        "--redis-url",
        &cli.redis_url,
        "--redis-key-prefix",
        prefix,
        "--jwt-secret",
        SECRET,
        "--bind",
        "127.0.0.1:0",
        "--like-mode",
        "sync",
        "--worker-in-serve",
        "false",
        // The writer's statements alone: the feed's fan-out job (background) runs once an hour.
        "--feed-fanout-interval",
        "1h",
        "--post-rate-per-minute",
        "100000",
        "--db-max-connections",
        "20",
    ])
    .map_err(|e| AppError::Config(format!("bench settings: {e}")))?;
    let app = Application::build(args.settings).await?;
    let base = format!("http://{}/graphql", app.local_addr());
    let state = app.state().clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(app.run_until_stopped(async move {
        let _ = stopped.await;
    }));
    let outcome = measure_with_server(bench, &state, &fixture.db, &base).await;
    let _ = stop.send(());
    let _ = server.await;
    outcome
}

#[derive(FromQueryResult)]
struct Count {
    v: i64,
}

async fn count(db: &impl ConnectionTrait, table: &str) -> AppResult<i64> {
    let row = Count::find_by_statement(stmt(&format!("SELECT count(*) AS v FROM {table}"), [])).one(db).await?;
    Ok(row.map_or(0, |r| r.v))
}

async fn post(http: &reqwest::Client, url: &str, token: &str, query: &str, variables: Value) -> AppResult<Value> {
    let response: Value = http
        .post(url)
        .bearer_auth(token)
        .json(&json!({ "query": query, "variables": variables }))
        .send()
        .await
        .map_err(|e| AppError::Internal(format!("request: {e}")))?
        .json()
        .await
        .map_err(|e| AppError::Internal(format!("response: {e}")))?;
    if response.get("errors").is_some() {
        return Err(AppError::Internal(format!("errors: {response}")));
    }
    Ok(response)
}

async fn measure_with_server(
    bench: &AnnounceBench,
    state: &AppState,
    db: &impl ConnectionTrait,
    url: &str,
) -> AppResult<AnnounceResult> {
    let tokens = TokenKeys::new(SECRET)?;
    let instructor = tokens.mint(1, Duration::from_secs(3600))?;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(bench.concurrency)
        .build()
        .map_err(|e| AppError::Internal(format!("http client: {e}")))?;

    // Warm-up: the instructor's memberships and row, the connections.
    for kind in ["DISCUSSION", "ANNOUNCEMENT"] {
        post(&http, url, &instructor, CREATE, json!({ "k": kind, "t": "warm-up" })).await?;
    }
    let (notifications_before, announcements_before) =
        (count(db, "notifications").await?, count(db, "course_announcements").await?);
    let mut writes = Vec::new();
    for kind in ["DISCUSSION", "ANNOUNCEMENT"] {
        let mut samples = Vec::new();
        let sql_before = state.sql_statements.get();
        for run in 0..bench.runs {
            let started = Instant::now();
            let response =
                post(&http, url, &instructor, CREATE, json!({ "k": kind, "t": format!("run {run}") })).await?;
            samples.push(started.elapsed().as_secs_f64() * 1000.0);
            if response["data"]["createPost"]["kind"] != kind {
                return Err(AppError::Internal(format!("createPost answered {response}")));
            }
        }
        let sql = (state.sql_statements.get() - sql_before) as f64 / bench.runs as f64;
        samples.sort_by(f64::total_cmp);
        let name = format!("createPost({kind}) to {} members", bench.members);
        writes.push(timings(&name, &samples, sql, None));
    }
    let notification_rows_added = count(db, "notifications").await? - notifications_before;
    let announcement_rows_added = count(db, "course_announcements").await? - announcements_before;

    // Every reader: the history, the warm-up's and the runs' announcements, and their own.
    let unread = bench.history + 1 + bench.runs as i64 + bench.own;
    let readers: Vec<String> =
        (2..bench.readers + 2).map(|u| tokens.mint(u, Duration::from_secs(3600))).collect::<AppResult<_>>()?;
    // One untimed read each: memberships and users in memory, as for a member who reads daily.
    for token in &readers {
        check_page(&post(&http, url, token, PAGE, json!({})).await?, unread)?;
    }
    let sql_before = state.sql_statements.get();
    let began = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..bench.concurrency.max(1) {
        let (http, url, readers, next, total) =
            (http.clone(), url.to_owned(), readers.clone(), next.clone(), bench.reads);
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= total {
                    return Ok::<_, AppError>(samples);
                }
                let started = Instant::now();
                let response = post(&http, &url, &readers[n % readers.len()], PAGE, json!({})).await?;
                samples.push(started.elapsed().as_secs_f64() * 1000.0);
                check_page(&response, unread)?;
            }
        }));
    }
    let mut samples = Vec::new();
    for task in tasks {
        samples.extend(task.await.map_err(|e| AppError::Internal(format!("reader task: {e}")))??);
    }
    let wall = began.elapsed();
    let sql = (state.sql_statements.get() - sql_before) as f64 / bench.reads as f64;
    samples.sort_by(f64::total_cmp);
    let per_s = samples.len() as f64 / wall.as_secs_f64();
    let page = timings("notifications(first: 20), warm", &samples, sql, Some(per_s));
    Ok(AnnounceResult { config: bench.clone(), writes, notification_rows_added, announcement_rows_added, page })
}

fn timings(name: &str, sorted_ms: &[f64], sql_per_request: f64, per_s: Option<f64>) -> Timings {
    Timings {
        name: name.to_owned(),
        samples: sorted_ms.len(),
        p50_ms: percentile(sorted_ms, 50.0),
        p99_ms: percentile(sorted_ms, 99.0),
        max_ms: sorted_ms.last().copied().unwrap_or(f64::NAN),
        sql_per_request,
        per_s,
    }
}

/// A full page, the newest announcement first, and the reader's unread count.
fn check_page(response: &Value, unread: i64) -> AppResult<()> {
    let list = &response["data"]["notifications"];
    let edges = list["edges"].as_array().map_or(0, Vec::len);
    let newest = &list["edges"][0]["node"];
    if edges != 20 || newest["kind"] != "ANNOUNCEMENT" {
        return Err(AppError::Internal(format!("a notification page held {edges} items: {list}")));
    }
    if list["unreadCount"].as_i64() != Some(unread) {
        return Err(AppError::Internal(format!("unread count {} where {unread} were expected", list["unreadCount"])));
    }
    Ok(())
}

/// The standalone command's report.
pub fn print(result: &AnnounceResult) {
    let bench = &result.config;
    println!(
        "announcements: a course of {} members ({} announcements before the run); through POST /graphql \
         (reqwest) to the app served in this process",
        bench.members, bench.history
    );
    println!(
        "{:<48} {:>6} {:>9} {:>9} {:>9} {:>8} {:>8}",
        "request", "n", "p50 ms", "p99 ms", "max ms", "SQL/req", "req/s"
    );
    for t in result.writes.iter().chain([&result.page]) {
        println!(
            "{:<48} {:>6} {:>9.2} {:>9.2} {:>9.2} {:>8.2} {:>8.0}",
            t.name,
            t.samples,
            t.p50_ms,
            t.p99_ms,
            t.max_ms,
            t.sql_per_request,
            t.per_s.unwrap_or(f64::NAN)
        );
    }
    println!(
        "rows the {} announcements added: notifications {}, course_announcements {}",
        bench.runs, result.notification_rows_added, result.announcement_rows_added
    );
    println!(
        "the page: {} readers, each with {} notifications of their own among the announcements, {} connections",
        bench.readers, bench.own, bench.concurrency
    );
}
