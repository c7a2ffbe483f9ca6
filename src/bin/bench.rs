//! `bench`: measurements that prove the design, printed as a table.
//!
//! `cargo run --release --bin bench -- worker-apply` — how many likes per second ONE worker
//! applies to PostgreSQL at batch sizes 500 and 5,000: a fresh database, N distinct users
//! liking one hot post, the events pre-loaded into the stream in the toggle script's format,
//! then the worker drains it (read, collapse, one unnest transaction per batch, XACK+XDEL).
//! The run asserts that the final counter equals the events.

use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use course_forum::config::LikeMode;
use course_forum::db::{self, stmt};
use course_forum::error::{AppError, AppResult};
use course_forum::kv::{self, keys::Keys};
use course_forum::live::Publisher;
use course_forum::worker::{LikeWorker, WorkerConfig};
use sea_orm::{ConnectionTrait, FromQueryResult};

#[derive(Parser)]
#[command(name = "bench", about = "course-forum benchmarks")]
struct Cli {
    /// An admin database to create the benchmark's own databases from.
    #[arg(long, env = "BENCH_DATABASE_URL", default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    database_url: String,
    #[arg(long, env = "BENCH_REDIS_URL", default_value = "redis://127.0.0.1:6379")]
    redis_url: String,
    #[command(subcommand)]
    command: Scenario,
}

#[derive(Subcommand)]
enum Scenario {
    /// Likes/s one worker applies to PostgreSQL.
    WorkerApply {
        /// Likes per run (distinct users on one post).
        #[arg(long, default_value_t = 20_000)]
        events: i64,
        /// Batch sizes to compare in the same run.
        #[arg(long, value_delimiter = ',', default_value = "500,5000")]
        batches: Vec<usize>,
    },
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Scenario::WorkerApply { events, ref batches } => worker_apply(&cli, events, batches).await,
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("bench: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[derive(FromQueryResult)]
struct One {
    v: i64,
}

async fn worker_apply(cli: &Cli, events: i64, batches: &[usize]) -> AppResult<()> {
    println!("worker apply rate: {events} likes by distinct users on ONE post, one worker, one shard");
    println!("{:>7} {:>8} {:>9} {:>10} {:>14}", "batch", "likes", "seconds", "likes/s", "ms per batch");
    for &batch in batches {
        let (elapsed, batches_run) = run_worker_apply(cli, events, batch).await?;
        let secs = elapsed.as_secs_f64();
        println!(
            "{batch:>7} {events:>8} {secs:>9.3} {:>10.0} {:>14.2}",
            events as f64 / secs,
            secs * 1000.0 / batches_run.max(1) as f64
        );
    }
    Ok(())
}

async fn run_worker_apply(cli: &Cli, events: i64, batch: usize) -> AppResult<(Duration, u64)> {
    let admin = db::connect_url(&cli.database_url, Duration::from_secs(5), 1).await?;
    let name = format!("cf_bench_{}", uuid::Uuid::new_v4().simple());
    admin.execute_unprepared(&format!("CREATE DATABASE \"{name}\"")).await?;
    let url =
        format!("{}/{name}", cli.database_url.rsplit_once('/').map(|(base, _)| base).unwrap_or(&cli.database_url));
    let outcome = async {
        let db = db::connect_url(&url, Duration::from_secs(5), 4).await?;
        db::migrate(&db).await?;
        db.execute_unprepared(
            "INSERT INTO courses (code, title) VALUES ('BENCH', 'Benchmark course'); \
             INSERT INTO users (handle, display_name) SELECT 'u' || n, 'User ' || n FROM generate_series(1, 1) n; \
             INSERT INTO posts (course_id, user_id, title, body) VALUES (1, 1, 'hot post', 'everyone likes this')",
        )
        .await?;
        db.execute_raw(stmt(
            "INSERT INTO users (handle, display_name) SELECT 'v' || n, 'Voter ' || n FROM generate_series(1, $1) n",
            [events.into()],
        ))
        .await?;
        let prefix = format!("bench{}", uuid::Uuid::new_v4().simple());
        let keys = Keys::new(prefix.clone(), 1);
        let redis = kv::connect(&cli.redis_url, Duration::from_secs(5)).await?;
        let config = WorkerConfig {
            mode: LikeMode::Buffered,
            batch_size: batch,
            lease_ttl: Duration::from_secs(30),
            max_deliveries: 5,
            idle_wait: Duration::from_millis(10),
            recount_interval: Duration::from_secs(1),
            fault: None,
        };
        let worker = LikeWorker::new(
            db.clone(),
            redis.clone(),
            keys.clone(),
            config,
            Publisher::new(redis.clone(), keys.live_channel()),
        );
        worker.ensure_groups().await?;
        // Pre-load the stream exactly as lua/like_toggle.lua writes it.
        let mut conn = redis.clone();
        let stream = keys.like_stream(0);
        for chunk_start in (0..events).step_by(1000) {
            let mut pipe = redis::pipe();
            for n in chunk_start..(chunk_start + 1000).min(events) {
                let user = (n + 2).to_string();
                pipe.cmd("XADD").arg(&stream).arg("*").arg(&["op", "like", "t", "p:1", "u", &user, "c", "1"]).ignore();
            }
            let _: () = pipe.query_async(&mut conn).await?;
        }
        let started = Instant::now();
        worker.drain().await?;
        let elapsed = started.elapsed();
        let batches_run = worker.stats().batches.load(std::sync::atomic::Ordering::Relaxed);
        let count = One::find_by_statement(stmt("SELECT like_count::bigint AS v FROM posts WHERE id = 1", []))
            .one(&db)
            .await?
            .map_or(0, |r| r.v);
        let _: () = redis::cmd("DEL").arg(&stream).arg(keys.worker_lease(0)).query_async(&mut conn).await?;
        if count != events {
            return Err(AppError::Internal(format!("counter is {count}, expected {events}")));
        }
        Ok((elapsed, batches_run))
    }
    .await;
    admin.execute_unprepared(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)")).await?;
    outcome
}
