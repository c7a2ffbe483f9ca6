//! `bench`: measurements that prove the design, printed as tables. Each scenario makes its own
//! database (and drops it) and its own Redis key prefix, on the local servers.
//!
//! - `worker-apply`: likes/s ONE worker applies to PostgreSQL at batch sizes 500 and 5,000.
//! - `live`: a `course-forum serve` process with S websocket subscribers on one post while a
//!   like storm runs through `POST /graphql`: delivery latency and the server's memory.

mod feed;
mod fixture;
mod live;
mod worker_apply;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "bench", about = "course-forum benchmarks")]
pub struct Cli {
    /// An admin database to create the benchmark's own databases from.
    #[arg(long, env = "BENCH_DATABASE_URL", default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    pub database_url: String,
    #[arg(long, env = "BENCH_REDIS_URL", default_value = "redis://127.0.0.1:6379")]
    pub redis_url: String,
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
    /// Live delivery: subscribers on one post during a like storm.
    Live {
        /// Websocket subscribers held open on the post.
        #[arg(long, default_value_t = 1_000)]
        subscribers: usize,
        /// Likes in the storm (distinct users).
        #[arg(long, default_value_t = 2_000)]
        likes: i64,
        /// Concurrent HTTP connections sending likes.
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
        /// Websocket subscribers opened per second during setup.
        #[arg(long, default_value_t = 500)]
        open_rate: u32,
    },
    /// Home feed: read latency with a celebrity course, and fan-out of one post to 2,000 members.
    Feed {
        /// Members of the celebrity course.
        #[arg(long, default_value_t = 10_000)]
        celebrity_members: i64,
        /// Posts already in the celebrity course.
        #[arg(long, default_value_t = 500)]
        celebrity_posts: i64,
        /// Distinct readers (members of the celebrity course and of five small courses).
        #[arg(long, default_value_t = 200)]
        readers: i64,
        /// Timed reads of the warm first page (and as many of the second page).
        #[arg(long, default_value_t = 4_000)]
        reads: usize,
        /// Concurrent HTTP connections reading.
        #[arg(long, default_value_t = 8)]
        concurrency: usize,
        /// Posts fanned out to the 2,000-member course (each timed).
        #[arg(long, default_value_t = 20)]
        fanout_runs: usize,
    },
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Scenario::WorkerApply { events, ref batches } => worker_apply::run(&cli, events, batches).await,
        Scenario::Live { subscribers, likes, concurrency, open_rate } => {
            live::run(&cli, subscribers, likes, concurrency, open_rate).await
        }
        Scenario::Feed { celebrity_members, celebrity_posts, readers, reads, concurrency, fanout_runs } => {
            let bench =
                feed::FeedBench { celebrity_members, celebrity_posts, readers, reads, concurrency, fanout_runs };
            feed::run(&cli, &bench).await
        }
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("bench: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The p-th percentile (0–100) of sorted samples.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}
