//! `bench feed`: home feed read latency with one celebrity course of 10,000 members, through
//! `POST /graphql` with a real HTTP client (reqwest, keep-alive) against the application served
//! in this process on a loopback port; and the time the fan-out job takes to push one post into
//! 2,000 members' timelines.
//!
//! World: course 1 (the fixture's) has 10,000 members and is the celebrity (its posts live in
//! one list); 40 small courses of 25 members each; the readers are 200 members of the celebrity
//! course, each also in 5 small courses; one more course of 2,000 members is fanned out
//! (`FEED_FANOUT_MAX_MEMBERS` is 2,001 here, so that course is just below it). Every read asserts its page:
//! full, newest first, celebrity and small-course posts merged.

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use course_forum::testing::auth::TokenKeys;
use course_forum::testing::config::Settings;
use course_forum::testing::db::stmt;
use course_forum::testing::error::{AppError, AppResult};
use course_forum::testing::forum::paging::PageRequest;
use course_forum::testing::forum::posts;
use course_forum::testing::kv;
use course_forum::testing::startup::{Application, build_feed_fanout};
use course_forum::testing::state::AppState;
use sea_orm::ConnectionTrait;
use serde::Serialize;
use serde_json::{Value, json};

use crate::fixture::Fixture;
use crate::{Cli, percentile};

const SECRET: &str = "bench-secret-0123456789abcdef";
const SMALL_COURSES: i64 = 40;
const SMALL_MEMBERS: i64 = 25;
const COURSES_PER_READER: i64 = 5;
const FANOUT_MEMBERS: i64 = 2_000;
const PAGE: &str = "query($after: String) { homeFeed(first: 20, after: $after) { \
                    edges { node { id title likeCount commentCount author { handle } } } \
                    pageInfo { hasNextPage endCursor } } }";

/// What the command line chose (`bench feed --help`); the suite runs the defaults.
#[derive(Clone, Debug, Serialize, clap::Args)]
pub struct FeedBench {
    /// Members of the celebrity course.
    #[arg(long, default_value_t = 10_000)]
    pub celebrity_members: i64,
    /// Posts already in the celebrity course.
    #[arg(long, default_value_t = 500)]
    pub celebrity_posts: i64,
    /// Distinct readers (members of the celebrity course and of five small courses).
    #[arg(long, default_value_t = 200)]
    pub readers: i64,
    /// Timed reads of the warm first page (and as many of the second page).
    #[arg(long, default_value_t = 4_000)]
    pub reads: usize,
    /// Concurrent HTTP connections reading.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// Posts fanned out to the 2,000-member course (each timed).
    #[arg(long, default_value_t = 20)]
    pub fanout_runs: usize,
}

impl FeedBench {
    /// The command line's defaults.
    pub fn defaults() -> Self {
        #[derive(Parser)]
        struct Defaults {
            #[command(flatten)]
            bench: FeedBench,
        }
        Defaults::parse_from(["feed"]).bench
    }
}

/// One line of latencies: feed reads or fan-out steps.
#[derive(Debug, Serialize)]
pub struct Timings {
    pub name: String,
    pub samples: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    /// Requests per second of wall time, all connections together (reads only).
    pub per_s: Option<f64>,
}

impl Timings {
    fn of(name: &str, sorted_ms: &[f64], per_s: Option<f64>) -> Self {
        Self {
            name: name.to_owned(),
            samples: sorted_ms.len(),
            p50_ms: percentile(sorted_ms, 50.0),
            p99_ms: percentile(sorted_ms, 99.0),
            min_ms: sorted_ms.first().copied().unwrap_or(f64::NAN),
            max_ms: sorted_ms.last().copied().unwrap_or(f64::NAN),
            per_s,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct FeedResult {
    pub config: FeedBench,
    /// First reads (timelines rebuilt), warm first pages, second pages.
    pub reads: Vec<Timings>,
    pub timelines_rebuilt: u64,
    pub sql_per_warm_page: f64,
    /// One post fanned out to 2,000 timelines; one celebrity post pushed to its list.
    pub fanout: Vec<Timings>,
}

/// The application's settings, parsed like the server's own command line.
#[derive(Parser)]
struct ServerArgs {
    #[command(flatten)]
    settings: Settings,
}

pub async fn run(cli: &Cli, bench: &FeedBench) -> AppResult<FeedResult> {
    if bench.readers > bench.celebrity_members || bench.readers < SMALL_MEMBERS * SMALL_COURSES / COURSES_PER_READER {
        return Err(AppError::Config(format!(
            "--readers must be between {} and --celebrity-members",
            SMALL_MEMBERS * SMALL_COURSES / COURSES_PER_READER
        )));
    }
    if bench.celebrity_members < FANOUT_MEMBERS + 1 {
        return Err(AppError::Config(format!("--celebrity-members must be more than {FANOUT_MEMBERS}")));
    }
    eprintln!("bench feed: building the world ({} members) …", bench.celebrity_members);
    let fixture = Fixture::create(&cli.database_url, bench.celebrity_members).await?;
    let prefix = format!("bench{}", uuid::Uuid::new_v4().simple());
    let outcome = measure(cli, bench, &fixture, &prefix).await;
    if let Ok(redis) = kv::connect(&cli.redis_url, Duration::from_secs(5), "bench").await {
        let _ = kv::unlink_matching(&redis, &format!("{prefix}:*")).await;
    }
    fixture.drop().await?;
    outcome
}

/// Users 2..=readers+1 read; reader i is in the celebrity course and small courses
/// (i + 8k) mod 40; the fan-out course holds users 2..=2001.
async fn build_world(fixture: &Fixture, bench: &FeedBench) -> AppResult<i64> {
    let db = &fixture.db;
    db.execute_raw(stmt(
        "INSERT INTO courses (code, title) SELECT 'SMALL' || n, 'Small course ' || n FROM generate_series(0, $1 - 1) n",
        [SMALL_COURSES.into()],
    ))
    .await?;
    // Small course ids follow the fixture's course 1: 2..=41.
    db.execute_raw(stmt(
        "INSERT INTO course_members (course_id, user_id, role) \
         SELECT DISTINCT 2 + ((r + 8 * k) % $2), r + 2, 'student' \
         FROM generate_series(0, $1 - 1) r, generate_series(0, $3 - 1) k",
        [bench.readers.into(), SMALL_COURSES.into(), COURSES_PER_READER.into()],
    ))
    .await?;
    let fanout_course = 2 + SMALL_COURSES;
    db.execute_unprepared("INSERT INTO courses (code, title) VALUES ('FANOUT', 'Two thousand members')").await?;
    db.execute_raw(stmt(
        "INSERT INTO course_members (course_id, user_id, role) SELECT $1, u, 'student' FROM generate_series(2, $2 + 1) u",
        [fanout_course.into(), FANOUT_MEMBERS.into()],
    ))
    .await?;
    // History, oldest first, interleaved: celebrity posts by the author, 30 per small course.
    db.execute_raw(stmt(
        "INSERT INTO posts (course_id, user_id, title, body) \
         SELECT course, author, 'post ' || n, 'body' FROM ( \
            SELECT 1 AS course, 1 AS author, n, n * 100 AS at FROM generate_series(1, $1) n \
            UNION ALL \
            SELECT c, (SELECT min(user_id) FROM course_members m WHERE m.course_id = c), n, n * 100 + c \
            FROM generate_series(2, $2 + 1) c, generate_series(1, 30) n) h ORDER BY at",
        [bench.celebrity_posts.into(), SMALL_COURSES.into()],
    ))
    .await?;
    db.execute_unprepared("ANALYZE").await?;
    Ok(fanout_course)
}

async fn measure(cli: &Cli, bench: &FeedBench, fixture: &Fixture, prefix: &str) -> AppResult<FeedResult> {
    let fanout_course = build_world(fixture, bench).await?;
    // Just above the fan-out course: it is fanned out, the celebrity course is not.
    let threshold = (FANOUT_MEMBERS + 1).to_string();
    let args = ServerArgs::try_parse_from([
        "bench-feed",
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
        "--feed-fanout-max-members",
        &threshold,
        "--db-max-connections",
        "20",
    ])
    .map_err(|e| AppError::Config(format!("bench settings: {e}")))?;
    let app = Application::build(args.settings).await?;
    let base = format!("http://{}", app.local_addr());
    let state = app.state().clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(app.run_until_stopped(async move {
        let _ = stopped.await;
    }));
    let outcome = measure_with_server(bench, &state, &base, fanout_course).await;
    let _ = stop.send(());
    let _ = server.await;
    outcome
}

async fn measure_with_server(
    bench: &FeedBench,
    state: &AppState,
    base: &str,
    fanout_course: i64,
) -> AppResult<FeedResult> {
    let job = build_feed_fanout(state).await?;
    // The celebrity course gets its list when its first post is fanned out.
    posts::create(&state.db, &posts::NewPost::discussion(1, 1, "the celebrity list starts here", "body")).await?;
    let report = job.process_one_batch().await?;
    if report.celebrity_posts != 1 {
        return Err(AppError::Internal("course 1 should be a celebrity".into()));
    }
    let tokens = TokenKeys::new(SECRET)?;
    let readers: Vec<String> =
        (2..bench.readers + 2).map(|u| tokens.mint(u, Duration::from_secs(3600))).collect::<AppResult<_>>()?;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(bench.concurrency)
        .build()
        .map_err(|e| AppError::Internal(format!("http client: {e}")))?;
    let url = format!("{base}/graphql");

    // Every reader's first read: no timeline yet, so each one is rebuilt (and posts are loaded
    // into the cache).
    let rebuilds_before = state.feed.stats().rebuilds();
    let first_reads = timed_reads(&http, &url, &readers, readers.len(), bench.concurrency, false).await?;
    let rebuilt = state.feed.stats().rebuilds() - rebuilds_before;
    // Warm: first pages, then second pages (keyset after the first page's end cursor).
    let sql_before = state.sql_statements.get();
    let warm = timed_reads(&http, &url, &readers, bench.reads, bench.concurrency, false).await?;
    let sql_per_page = (state.sql_statements.get() - sql_before) as f64 / bench.reads as f64;
    let second = timed_reads(&http, &url, &readers, bench.reads, bench.concurrency, true).await?;

    // Fan-out: all 2,000 members of the fan-out course have a timeline; one post each run.
    for user in 2..FANOUT_MEMBERS + 2 {
        let courses: Vec<i64> =
            course_forum::testing::forum::courses::roles_of_user(&state.db, user).await?.into_keys().collect();
        state.feed.page(user, &courses, &PageRequest::new(Some(1), None, None, None)?).await?;
    }
    let mut fanout_ms = Vec::new();
    for run in 0..bench.fanout_runs {
        posts::create(&state.db, &posts::NewPost::discussion(fanout_course, 2, &format!("fan-out run {run}"), "body"))
            .await?;
        let started = Instant::now();
        let report = job.process_one_batch().await?;
        fanout_ms.push(started.elapsed().as_secs_f64() * 1000.0);
        if report.timelines_pushed != FANOUT_MEMBERS as usize {
            return Err(AppError::Internal(format!(
                "the post reached {} timelines, expected {FANOUT_MEMBERS}",
                report.timelines_pushed
            )));
        }
    }
    let mut celebrity_ms = Vec::new();
    for run in 0..bench.fanout_runs {
        posts::create(&state.db, &posts::NewPost::discussion(1, 1, &format!("celebrity run {run}"), "body")).await?;
        let started = Instant::now();
        let report = job.process_one_batch().await?;
        celebrity_ms.push(started.elapsed().as_secs_f64() * 1000.0);
        if report.celebrity_posts != 1 || report.timelines_pushed != 0 {
            return Err(AppError::Internal("a celebrity post was fanned out".into()));
        }
    }

    fanout_ms.sort_by(f64::total_cmp);
    celebrity_ms.sort_by(f64::total_cmp);
    // A second-page sample is two requests (the first page for its cursor, then the timed one).
    let reads = [
        ("first read of each reader (rebuilds)", &first_reads, 1.0),
        ("first page, warm", &warm, 1.0),
        ("second page (after the first's cursor)", &second, 2.0),
    ]
    .into_iter()
    .map(|(name, run, requests_per_sample)| {
        let per_s = requests_per_sample * run.latencies_ms.len() as f64 / run.wall.as_secs_f64();
        Timings::of(name, &run.latencies_ms, Some(per_s))
    })
    .collect();
    Ok(FeedResult {
        config: bench.clone(),
        reads,
        timelines_rebuilt: rebuilt,
        sql_per_warm_page: sql_per_page,
        fanout: vec![
            Timings::of("course of 2,000 members: 2,000 timelines", &fanout_ms, None),
            Timings::of("celebrity course: one list", &celebrity_ms, None),
        ],
    })
}

/// The standalone command's report.
pub fn print(result: &FeedResult) {
    let bench = &result.config;
    println!(
        "home feed: 1 celebrity course of {} members ({} posts), {SMALL_COURSES} small courses of \
         {SMALL_MEMBERS} (30 posts each);",
        bench.celebrity_members,
        bench.celebrity_posts + 1
    );
    println!(
        "{} readers, each in the celebrity course and {COURSES_PER_READER} small ones; pages of 20 through \
         POST /graphql (reqwest, {} connections) to the app served in this process",
        bench.readers, bench.concurrency
    );
    println!("{:<44} {:>6} {:>9} {:>9} {:>9} {:>8}", "feed read", "reads", "p50 ms", "p99 ms", "max ms", "reads/s");
    for t in &result.reads {
        println!(
            "{:<44} {:>6} {:>9.2} {:>9.2} {:>9.2} {:>8.0}",
            t.name,
            t.samples,
            t.p50_ms,
            t.p99_ms,
            t.max_ms,
            t.per_s.unwrap_or(f64::NAN)
        );
    }
    println!(
        "reads/s: requests per second of wall time, all connections together; timelines rebuilt by the first \
         reads: {}; SQL statements per warm first page: {:.2} (memberships, authors)",
        result.timelines_rebuilt, result.sql_per_warm_page
    );
    println!(
        "{:<44} {:>6} {:>9} {:>9} {:>9}",
        "fan-out of one post (one job step)", "runs", "p50 ms", "min ms", "max ms"
    );
    for t in &result.fanout {
        println!("{:<44} {:>6} {:>9.2} {:>9.2} {:>9.2}", t.name, t.samples, t.p50_ms, t.min_ms, t.max_ms);
    }
}

/// Latencies of a batch of reads (sorted, ms) and the wall time of the whole batch.
struct ReadRun {
    latencies_ms: Vec<f64>,
    wall: Duration,
}

/// `total` reads spread over `concurrency` connections, reader tokens in turn. `second_page`
/// reads the first page, then times the page after it (the wall time includes both).
async fn timed_reads(
    http: &reqwest::Client,
    url: &str,
    readers: &[String],
    total: usize,
    concurrency: usize,
    second_page: bool,
) -> AppResult<ReadRun> {
    let began = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..concurrency.max(1) {
        let (http, url, readers, next) = (http.clone(), url.to_owned(), readers.to_vec(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            loop {
                let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if n >= total {
                    return Ok::<_, AppError>(samples);
                }
                let token = &readers[n % readers.len()];
                let after = if second_page { page(&http, &url, token, None).await?.1 } else { None };
                let started = Instant::now();
                let (count, _) = page(&http, &url, token, after).await?;
                samples.push(started.elapsed().as_secs_f64() * 1000.0);
                if count != 20 {
                    return Err(AppError::Internal(format!("a feed page held {count} posts, expected 20")));
                }
            }
        }));
    }
    let mut samples = Vec::new();
    for task in tasks {
        samples.extend(task.await.map_err(|e| AppError::Internal(format!("reader task: {e}")))??);
    }
    samples.sort_by(f64::total_cmp);
    Ok(ReadRun { latencies_ms: samples, wall: began.elapsed() })
}

/// One feed page: how many posts, and its end cursor. Checks the page is newest first.
async fn page(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    after: Option<String>,
) -> AppResult<(usize, Option<String>)> {
    let response: Value = http
        .post(url)
        .bearer_auth(token)
        .json(&json!({ "query": PAGE, "variables": { "after": after } }))
        .send()
        .await
        .map_err(|e| AppError::Internal(format!("feed request: {e}")))?
        .json()
        .await
        .map_err(|e| AppError::Internal(format!("feed response: {e}")))?;
    if response.get("errors").is_some() {
        return Err(AppError::Internal(format!("feed errors: {response}")));
    }
    let feed = &response["data"]["homeFeed"];
    let ids: Vec<String> = feed["edges"]
        .as_array()
        .map(|edges| edges.iter().filter_map(|e| e["node"]["id"].as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    let numbers: Vec<i64> = ids.iter().filter_map(|id| decode_post_id(id)).collect();
    if numbers.len() != ids.len() || !numbers.windows(2).all(|p| p[0] > p[1]) {
        return Err(AppError::Internal(format!("a feed page is not newest first: {ids:?}")));
    }
    Ok((ids.len(), feed["pageInfo"]["endCursor"].as_str().map(str::to_owned)))
}

fn decode_post_id(global: &str) -> Option<i64> {
    let (kind, id) = course_forum::testing::graphql::ids::decode(global).ok()?;
    (kind == course_forum::testing::graphql::ids::NodeKind::Post).then_some(id)
}
