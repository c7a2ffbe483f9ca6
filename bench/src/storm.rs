//! `bench storm`: the hot-post like storm. N distinct users like ONE post through
//! `POST /graphql` over C keep-alive connections, once per `LIKE_MODE`, each mode on a fresh
//! server process and its own post of the same database. Measures accepted likes/s and
//! latency, then how long after the last answer the database agrees (flush lag), and asserts
//! it does: the counter equals the like rows equals the accepted likes (none lost, none twice).

use std::sync::Arc;
use std::time::{Duration, Instant};

use course_forum::testing::auth::TokenKeys;
use course_forum::testing::config::LikeMode;
use course_forum::testing::error::{AppError, AppResult};
use course_forum::testing::graphql::ids::{NodeKind, encode};
use serde::Serialize;
use serde_json::json;

use crate::fixture::Fixture;
use crate::load::{self, Request};
use crate::server::{CpuSplit, SECRET, Server, label, load_average};

pub const LIKE_POST: &str = "mutation($p: ID!) { likePost(postId: $p) { id likeCount } }";

/// One mode's storm.
#[derive(Debug, Serialize)]
pub struct StormResult {
    pub mode: String,
    /// Every user read the post (`likedByMe`) before the clock started, so their liked-sets
    /// were loaded: the common case on a hot post, where likers first saw it on a page.
    pub warm_sets: bool,
    /// The server binary.
    pub server: String,
    pub offered: usize,
    pub accepted: usize,
    pub failed: usize,
    pub first_failure: Option<String>,
    pub seconds: f64,
    pub likes_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// From the last answer until the database count equals the accepted likes.
    pub flush_lag_ms: f64,
    /// After the flush: the counter and the like rows (both must equal `accepted`).
    pub db_like_count: i64,
    pub db_like_rows: i64,
    pub consistent: bool,
    /// The app's counters over the storm and its flush, per accepted like.
    pub redis_api_per_like: f64,
    pub redis_worker_per_like: f64,
    pub sql_per_like: f64,
    /// CPU seconds over the storm, by process, and all of them per accepted like.
    pub cpu: CpuSplit,
    pub cpu_ms_per_like: f64,
    pub load_before: f64,
}

/// Mode names as `LIKE_MODE` spells them.
pub fn mode_name(mode: LikeMode) -> &'static str {
    match mode {
        LikeMode::Sync => "sync",
        LikeMode::Recount => "recount",
        LikeMode::Buffered => "buffered",
    }
}

/// Tokens for users `first..first+count` (minted before any timing).
pub fn tokens(first: i64, count: usize) -> AppResult<Vec<String>> {
    let keys = TokenKeys::new(SECRET)?;
    (0..count as i64).map(|n| Ok(format!("Bearer {}", keys.mint(first + n, Duration::from_secs(3600))?))).collect()
}

/// The storm on `post_id` by users 2..=likes+1 in `mode`, on a server of its own. With
/// `warm_sets`, every user reads the post first (untimed).
// A scenario's knobs, each one of `bench storm`'s flags, passed as they are parsed.
#[allow(clippy::too_many_arguments)]
pub async fn run_mode(
    cli: &crate::Cli,
    exe: &crate::server::ServerBin,
    fixture: &Fixture,
    mode: LikeMode,
    warm_sets: bool,
    post_id: i64,
    likes: usize,
    connections: usize,
    time_cap: Duration,
) -> AppResult<StormResult> {
    let server = Server::start(cli, exe, &fixture.url, mode, &[]).await?;
    if warm_sets {
        read_before_liking(&server, post_id, likes, connections).await?;
    }
    let outcome = storm(fixture, &server, mode, post_id, likes, connections, time_cap).await.map(|mut result| {
        result.warm_sets = warm_sets;
        result.server = label(exe);
        result
    });
    server.stop().await;
    outcome
}

/// Every storm user reads `likedByMe` of the post once, which loads their liked-set.
async fn read_before_liking(server: &Server, post_id: i64, users: usize, connections: usize) -> AppResult<()> {
    let post = encode(NodeKind::Post, post_id).to_string();
    let body = load::graphql_body("query($p: ID!) { post(id: $p) { likedByMe } }", json!({ "p": post }));
    let requests: Vec<Request> = tokens(2, users)?
        .into_iter()
        .map(|authorization| Request { authorization, body: body.clone(), forwarded_for: None })
        .collect();
    let check: load::Check = Arc::new(|_, data| match data["post"]["likedByMe"].as_bool() {
        Some(false) => Ok(()),
        _ => Err(format!("unexpected read before liking: {data}")),
    });
    let report =
        load::run(&server.graphql_url(), requests, connections, Duration::from_secs(120), check, false).await?;
    if report.failed > 0 || report.ok != users {
        return Err(AppError::Internal(format!(
            "warming the liked-sets: {} of {users} reads answered ({:?})",
            report.ok, report.first_failure
        )));
    }
    Ok(())
}

async fn storm(
    fixture: &Fixture,
    server: &Server,
    mode: LikeMode,
    post_id: i64,
    likes: usize,
    connections: usize,
    time_cap: Duration,
) -> AppResult<StormResult> {
    let post = encode(NodeKind::Post, post_id).to_string();
    let body = load::graphql_body(LIKE_POST, json!({ "p": post }));
    let requests: Vec<Request> = tokens(2, likes)?
        .into_iter()
        .map(|authorization| Request { authorization, body: body.clone(), forwarded_for: None })
        .collect();
    let expected_id = post.clone();
    let check: load::Check = Arc::new(move |_, data| {
        let liked = &data["likePost"];
        if liked["id"] != expected_id.as_str() || liked["likeCount"].as_i64().is_none_or(|c| c < 1) {
            return Err(format!("unexpected likePost answer: {data}"));
        }
        Ok(())
    });
    let load_before = load_average();
    let counters_before = server.counters().await?;
    let cpu_before = CpuSplit::now(server.pid, &fixture.db).await?;
    let report = load::run(&server.graphql_url(), requests, connections, time_cap, check, false).await?;
    let cpu = CpuSplit::now(server.pid, &fixture.db).await?.since(&cpu_before);

    // Flush lag: poll until the database holds exactly the accepted likes.
    let accepted = report.ok as i64;
    let done = Instant::now();
    let (mut counter, mut rows) = fixture.post_likes(post_id).await?;
    while (counter != accepted || rows != accepted) && done.elapsed() < Duration::from_secs(60) {
        if counter > accepted || rows > accepted {
            break; // more than accepted: double likes, no point waiting
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
        (counter, rows) = fixture.post_likes(post_id).await?;
    }
    let flush_lag = done.elapsed();
    // Let the worker's last publish and ack land before reading the counters.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let counters = server.counters().await? - counters_before;
    let per_like = |n: f64| n / (accepted.max(1) as f64);
    Ok(StormResult {
        mode: mode_name(mode).to_owned(),
        warm_sets: false,
        server: String::new(),
        offered: likes,
        accepted: report.ok,
        failed: report.failed,
        first_failure: report.first_failure.clone(),
        seconds: report.elapsed.as_secs_f64(),
        likes_per_s: report.rate(),
        p50_ms: report.p(50.0),
        p99_ms: report.p(99.0),
        max_ms: report.max(),
        flush_lag_ms: flush_lag.as_secs_f64() * 1000.0,
        db_like_count: counter,
        db_like_rows: rows,
        consistent: counter == accepted && rows == accepted,
        redis_api_per_like: per_like(counters.redis_api),
        redis_worker_per_like: per_like(counters.redis_worker),
        sql_per_like: per_like(counters.sql),
        cpu_ms_per_like: cpu.ms_per(report.ok),
        cpu,
        load_before,
    })
}

/// `bench storm` on its own: a fresh database, one post per (round, mode, server binary), the
/// binaries interleaved so that a busy moment of the machine does not favour one of them.
pub async fn run(
    cli: &crate::Cli,
    modes: &[LikeMode],
    likes: usize,
    connections: usize,
    time_cap: Duration,
    rounds: usize,
    warm_sets: bool,
) -> AppResult<Vec<StormResult>> {
    let servers = cli.servers()?;
    let fixture = Fixture::create(&cli.database_url, likes as i64).await?;
    let outcome = async {
        let runs = rounds.max(1) * modes.len() * servers.len();
        let mut posts = fixture.add_posts(runs as i64, 1, "storm").await?.into_iter();
        let mut results = Vec::new();
        for _ in 0..rounds.max(1) {
            for mode in modes {
                for exe in &servers {
                    let post = posts.next().ok_or_else(|| AppError::Internal("too few storm posts".into()))?;
                    let result = run_mode(cli, exe, &fixture, *mode, warm_sets, post, likes, connections, time_cap).await?;
                    eprintln!(
                        "{:>9} {:<28} {:>7.0} likes/s  p50 {:>6.1} ms  p99 {:>6.1} ms  failed {}  flush {:.0} ms  {}  redis {:.2}+{:.2}  sql {:.2}  cpu server {:.1}s bench {:.1}s pg {:.1}s redis {:.1}s = {:.2} ms/like  load {:.2}",
                        result.mode,
                        result.server,
                        result.likes_per_s,
                        result.p50_ms,
                        result.p99_ms,
                        result.failed,
                        result.flush_lag_ms,
                        if result.consistent { "consistent" } else { "INCONSISTENT" },
                        result.redis_api_per_like,
                        result.redis_worker_per_like,
                        result.sql_per_like,
                        result.cpu.server,
                        result.cpu.bench,
                        result.cpu.postgres,
                        result.cpu.redis,
                        result.cpu_ms_per_like,
                        result.load_before
                    );
                    results.push(result);
                }
            }
        }
        Ok::<_, AppError>(results)
    }
    .await;
    fixture.drop().await?;
    outcome
}
