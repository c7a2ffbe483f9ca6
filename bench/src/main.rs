//! `bench`: measurements that prove the design, printed as tables. Each scenario makes its own
//! database (and drops it) and its own Redis key prefix per server (and deletes its keys), on
//! the local servers. The HTTP scenarios run real `course-forum serve` processes (build with
//! `cargo build --release --bins`) and a closed-loop load generator (`load`) that checks every
//! answer.
//!
//! - `suite`: everything below against one fresh database; a table and JSON in `target/bench/`,
//!   every rate also as a fraction of the ceiling measured first in the same run.
//! - `ceiling`: `{ __typename }`, the least a request through the HTTP and GraphQL stack costs.
//! - `--otlp-sink` (any server scenario): every server again with traces on, exported to a sink
//!   in the bench that drops them; traces off and on side by side.
//! - `storm`: N distinct users like ONE post, per `LIKE_MODE`; rate, latency, flush lag, and
//!   the assertion that the database holds exactly the accepted likes.
//! - `page`: a course page of 20 posts with `likedByMe`; pages/s and Redis/SQL per page.
//! - `live`: websocket subscribers on one post during a storm; commit→client latency, the
//!   server's memory per subscriber and its RSS peak.
//!   - `--slow-share F` (0): that share of the subscribers read 1 frame/s (small receive
//!     buffer); the fast and slow ones' latency, final count and server closes apart.
//!   - `--flood N` (0): N more websocket attempts from a second process once the subscribers
//!     are in, held through the storm: how many were accepted and refused (503 past the
//!     descriptor cap), the server's CPU while full, the subscribers' latency meanwhile.
//! - `worker-apply`: likes/s ONE worker applies to PostgreSQL at batch sizes 500 and 5,000.
//! - `views`: start + complete a post view per user; rate and the aggregator's flush lag.
//! - `worst`: the most expensive query the cost limit accepts, on a full course: its SQL
//!   statements and latency.
//! - `revoke`: members with an open subscription removed by SQL `DELETE`, one at a time; the
//!   time until each one's subscription ends with FORBIDDEN.
//! - `announce`: announcements to a course of 10,000 members: the writer's latency, SQL
//!   statements and rows beside an ordinary post's, then members' notification pages.
//! - `hostile`: 32 course-page readers alone, then beside 4 hostile clients (fragment chains,
//!   persisted-query floods, forged cursors, mention bombs, deep subscriptions), each bounded
//!   in requests and time; the readers' throughput kept, the server's RSS against its cache
//!   budget, Redis growth, and per hostile kind the answers and their times.
//!   - `--readers N` (32, at least 21): course-page readers, one connection each.
//!   - `--hostile-clients N` (4): hostile HTTP clients, each sending the kinds in turn.
//!   - `--kinds a,b,..` (all): `chain`, `pq`, `cursor`, `mention`, `subscription`.
//!   - `--seconds S` (10): length of each phase (alone, then beside the hostile clients).
//!   - `--request-timeout-secs S` (5): longest wait for one answer; slower ones count as timeouts.
//!   - `--hostile-requests N` (400): most requests one hostile client sends in its window.
//!   - `--cache-budget-mib M` (64): the server's `CACHE_BUDGET_BYTES`; RSS goal is M + 64 MiB.
//!   - `--flood-posts N` (100) and `--post-body-bytes B` (20,000): the course the forged cursors read.
//!   - `--subscriptions N` (40): deep `courseActivity` subscriptions held by the hostile members.
//!   - `--comment-interval-ms T` (500): an ordinary member's pace of comments, each an event.
//! - `search`: a course of 100,000 posts and 1,000,000 comments and replies: `Course.search`,
//!   `Course.similarPosts` and the course page with and without unread counts, p50/p99 at 32
//!   connections side by side (each `--server-bin` on the one generated course; `--kinds` picks
//!   some), the memory of the title index, and the sizes of the tables and indexes they use.

mod announce;
mod ceiling;
mod feed;
mod fixture;
mod flood;
mod hostile;
mod live;
mod load;
mod otlp_sink;
mod page;
mod revoke;
mod search;
mod server;
mod storm;
mod suite;
mod views;
mod worker_apply;
mod worst;

use std::time::Duration;

use clap::{Parser, Subcommand};
use course_forum::testing::config::LikeMode;
use course_forum::testing::error::AppResult;

#[derive(Parser)]
#[command(name = "bench", about = "course-forum benchmarks")]
pub struct Cli {
    /// An admin database to create the benchmark's own databases from.
    #[arg(long, env = "BENCH_DATABASE_URL", default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    pub database_url: String,
    #[arg(long, env = "BENCH_REDIS_URL", default_value = "redis://127.0.0.1:6379")]
    pub redis_url: String,
    /// The `course-forum` binary to serve with (default: the one next to `bench`). Give it
    /// twice or more to compare builds side by side: `storm` and `page` run every binary in
    /// turn on the same data (the suite uses the first).
    #[arg(long = "server-bin", global = true)]
    pub server_bins: Vec<std::path::PathBuf>,
    /// A server binary to run first, on the schema as it was before migration 0009 (without
    /// `posts.hot_score` and the like-milestone triggers), then the
    /// schema is put back for the others: the "before" of notifications and hot ranking, in the
    /// same run and on the same data (`storm`, `page`). Give the binary of a commit before 0009.
    #[arg(long = "pre-0009-server-bin", global = true)]
    pub pre_0009_server_bin: Option<std::path::PathBuf>,
    /// `sslmode` of the servers' DATABASE_URL. Unset: the app's default (no TLS to a loopback
    /// host, see `db::without_tls_on_loopback`); `prefer` measures the cost of TLS there.
    #[arg(long, global = true)]
    pub db_sslmode: Option<String>,
    /// Extra environment for the servers, `NAME=VALUE` (repeatable), e.g.
    /// `TOKIO_WORKER_THREADS=1` or `DB_MAX_CONNECTIONS=8`.
    #[arg(long = "server-env", global = true, value_parser = parse_env)]
    pub server_env: Vec<(String, String)>,
    /// Runs every server binary a second time with this environment added, `NAME=VALUE`
    /// (repeatable: all of them in that second run), for a side-by-side comparison of a
    /// setting, e.g. `MEMBERSHIP_CACHE=false` (`storm` and `page`).
    #[arg(long = "variant-env", global = true, value_parser = parse_env)]
    pub variant_env: Vec<(String, String)>,
    /// Runs every server binary a second time with OpenTelemetry traces on, exported to an
    /// OTLP/HTTP sink inside the bench that counts and drops them (always sampled, the SDK's
    /// default batching): what traces cost, side by side with traces off (`storm`, `page`).
    #[arg(long, global = true)]
    pub otlp_sink: bool,
    /// Adds a variant on the Redis Cluster at `--redis-cluster-nodes` (every server binary a
    /// second time with REDIS_CLUSTER_NODES set): single node and cluster side by side.
    #[arg(long, global = true)]
    pub redis_cluster: bool,
    /// The cluster's seed nodes for `--redis-cluster` (`REDIS_CLUSTER=1 script/services` starts
    /// this one).
    #[arg(
        long,
        env = "BENCH_REDIS_CLUSTER_NODES",
        global = true,
        default_value = "redis://127.0.0.1:7000,redis://127.0.0.1:7001,redis://127.0.0.1:7002"
    )]
    pub redis_cluster_nodes: String,
    #[command(subcommand)]
    command: Scenario,
}

#[derive(Subcommand)]
enum Scenario {
    /// Every scenario against one fresh database: a table, and JSON in target/bench/.
    Suite(suite::SuiteConfig),
    /// `{ __typename }` over the same load generator: the stack's ceiling on this machine.
    Ceiling {
        /// Requests measured (after a tenth as many untimed).
        #[arg(long, default_value_t = 100_000)]
        requests: usize,
        /// Concurrent keep-alive HTTP connections.
        #[arg(long, default_value_t = 32)]
        connections: usize,
        #[arg(long, default_value_t = 30)]
        time_cap_secs: u64,
        /// Runs of every server binary, interleaved.
        #[arg(long, default_value_t = 1)]
        rounds: usize,
    },
    /// The hot-post like storm, once per LIKE_MODE.
    Storm {
        /// Likes (distinct users on one post) per mode.
        #[arg(long, default_value_t = 20_000)]
        likes: usize,
        /// Concurrent keep-alive HTTP connections.
        #[arg(long, default_value_t = 32)]
        connections: usize,
        /// Modes to run, in order.
        #[arg(long, value_enum, value_delimiter = ',', default_value = "sync,recount,buffered")]
        modes: Vec<LikeMode>,
        /// Longest a storm may send requests, in seconds.
        #[arg(long, default_value_t = 30)]
        time_cap_secs: u64,
        /// Runs of every (mode, server binary), interleaved.
        #[arg(long, default_value_t = 1)]
        rounds: usize,
        /// Every user reads the post (`likedByMe`) before the clock starts, loading their
        /// liked-set: the hot-post case where likers saw the post first.
        #[arg(long)]
        warm_sets: bool,
    },
    /// The course page: 20 posts with likedByMe, likeCount, commentCount, author.
    Page {
        #[arg(long, default_value_t = 500)]
        readers: usize,
        #[arg(long, default_value_t = 20_000)]
        pages: usize,
        #[arg(long, default_value_t = 32)]
        connections: usize,
        #[arg(long, default_value_t = 30)]
        time_cap_secs: u64,
        /// Runs of every server binary, interleaved.
        #[arg(long, default_value_t = 1)]
        rounds: usize,
        /// The orders to read, side by side: NEW, HOT, TOP (comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "NEW", value_parser = clap::builder::PossibleValuesParser::new(page::ORDERS))]
        orders: Vec<String>,
        /// Posts added to the course beyond the page's 24, with counts of their own: HOT and TOP
        /// rank every live post of a course at read time, so their cost grows with it.
        #[arg(long, default_value_t = 0)]
        course_posts: usize,
        /// The lists to read, side by side: plain (the whole course, shared), unresolved
        /// (`filter: {kind: QUESTION, unresolved: true}`), tag (`filter: {tagId}`), comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "plain", value_parser = clap::builder::PossibleValuesParser::new(page::FILTERS))]
        filters: Vec<String>,
    },
    /// Likes/s one worker applies to PostgreSQL.
    WorkerApply {
        /// Likes per run (distinct users on one post).
        #[arg(long, default_value_t = 50_000)]
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
        #[arg(long, default_value_t = 10_000)]
        likes: usize,
        /// Concurrent HTTP connections sending likes.
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
        /// Websocket subscribers opened per second during setup.
        #[arg(long, default_value_t = 500)]
        open_rate: u32,
        /// The share of the subscribers (0 to 1) that read slowly: 1 frame per second, with a
        /// 4 KiB receive buffer. Their latency, final count and closes are reported apart.
        #[arg(long, default_value_t = 0.0, value_parser = parse_share)]
        slow_share: f64,
        /// Once the subscribers are in, this many more websocket attempts from a second
        /// process, held through the storm: past the server's descriptor cap they are refused
        /// with 503. Reports how each attempt ended, the server's CPU while it sits at its cap,
        /// and the subscribers' latency with the server full.
        #[arg(long, default_value_t = 0)]
        flood: usize,
        /// First run the same storm with no subscriber (a fresh course, cold liked-sets, the
        /// same server binary), and report the likes during the fan-out as a share of it.
        #[arg(long)]
        baseline: bool,
    },
    /// The second process of `live --flood` (not for direct use): `connections` websocket
    /// attempts on `url`, inited with the token in BENCH_FLOOD_TOKEN, held until stdin closes.
    #[command(hide = true)]
    Flood {
        #[arg(long)]
        url: String,
        #[arg(long)]
        connections: usize,
        #[arg(long, default_value_t = 1_000)]
        open_rate: u32,
        #[arg(long, env = "BENCH_FLOOD_TOKEN")]
        token: String,
    },
    /// Post views: start and complete, then the aggregator's flush.
    Views {
        #[arg(long, default_value_t = 10_000)]
        viewers: usize,
        #[arg(long, default_value_t = 32)]
        connections: usize,
    },
    /// The most expensive query the cost limit accepts: statements and latency.
    Worst {
        /// Sequential runs measured (after one warm-up).
        #[arg(long, default_value_t = 50)]
        runs: usize,
    },
    /// Membership revocation: SQL DELETE → the removed member's open subscription ends.
    Revoke {
        /// Members removed, one at a time, each holding a subscription open.
        #[arg(long, default_value_t = 200)]
        removals: usize,
    },
    /// Home feed: read latency with a celebrity course, and fan-out of one post to 2,000 members.
    Feed(feed::FeedBench),
    /// Announcements to a course of 10,000 members: the writer's latency and statements, and a
    /// member's notification page after them.
    Announce(announce::AnnounceBench),
    /// Ordinary readers alone, then beside hostile clients: what the hostile clients cost them.
    Hostile(hostile::HostileConfig),
    /// Search, similar posts and the page with unread counts on a course of 100,000 posts and
    /// 1,000,000 comments: p50/p99 at 32 connections, and the index sizes.
    Search(search::SearchBench),
}

fn show<T: serde::Serialize>(result: AppResult<T>) -> AppResult<bool> {
    let result = result?;
    let json = serde_json::to_string_pretty(&result).unwrap_or_default();
    println!("{json}");
    Ok(true)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let mut cli = Cli::parse();
    // Before any HTTP client is built (reqwest has no TLS provider of its own here).
    course_forum::testing::tls::install_crypto_provider();
    let sink = if cli.otlp_sink {
        match otlp_sink::start().await {
            Ok((url, counts)) => {
                cli.variant_env.push(("OTEL_EXPORTER_OTLP_ENDPOINT".to_owned(), url));
                Some(counts)
            }
            Err(err) => {
                eprintln!("bench: cannot start the OTLP sink: {err}");
                return std::process::ExitCode::FAILURE;
            }
        }
    } else {
        None
    };
    let secs = Duration::from_secs;
    let result = match &cli.command {
        Scenario::Suite(config) => suite::run(&cli, config).await,
        Scenario::Ceiling { requests, connections, time_cap_secs, rounds } => {
            show(ceiling::run(&cli, *requests, *connections, secs(*time_cap_secs), *rounds).await)
        }
        Scenario::Storm { likes, connections, modes, time_cap_secs, rounds, warm_sets } => {
            show(storm::run(&cli, modes, *likes, *connections, secs(*time_cap_secs), *rounds, *warm_sets).await)
        }
        Scenario::Page { readers, pages, connections, time_cap_secs, rounds, orders, course_posts, filters } => show(
            page::run(
                &cli,
                *readers,
                *pages,
                *connections,
                secs(*time_cap_secs),
                *rounds,
                orders,
                filters,
                *course_posts,
            )
            .await,
        ),
        Scenario::WorkerApply { events, batches } => worker_apply::run(&cli, *events, batches).await.map(|results| {
            worker_apply::print(&results);
            true
        }),
        Scenario::Live { subscribers, likes, concurrency, open_rate, slow_share, flood, baseline } => {
            let config = live::LiveConfig {
                subscribers: *subscribers,
                likes: *likes,
                connections: *concurrency,
                open_rate: *open_rate,
                slow_share: *slow_share,
                flood: *flood,
                time_cap: secs(120),
            };
            show(live::run_with_baseline(&cli, &config, *baseline).await)
        }
        Scenario::Flood { url, connections, open_rate, token } => {
            flood::run_child(url, token, *connections, *open_rate).await.map(|()| true)
        }
        Scenario::Views { viewers, connections } => show(views::run(&cli, *viewers, *connections).await),
        Scenario::Worst { runs } => worst::run(&cli, *runs).await.map(|result| {
            worst::print(&result);
            true
        }),
        Scenario::Revoke { removals } => revoke::run(&cli, *removals).await.map(|result| {
            revoke::print(&result);
            true
        }),
        Scenario::Feed(bench) => feed::run(&cli, bench).await.map(|result| {
            feed::print(&result);
            true
        }),
        Scenario::Announce(bench) => announce::run(&cli, bench).await.map(|result| {
            announce::print(&result);
            true
        }),
        // A missed goal is in the table; only a bench error fails the run.
        Scenario::Hostile(config) => hostile::run(&cli, config).await.map(|result| {
            hostile::print(&result);
            true
        }),
        Scenario::Search(bench) => search::run(&cli, bench).await.map(|result| {
            search::print(&result);
            true
        }),
    };
    if let Some(counts) = sink {
        eprintln!(
            "bench: the OTLP sink received {} exports, {} bytes of spans",
            counts.exports.load(std::sync::atomic::Ordering::Relaxed),
            counts.bytes.load(std::sync::atomic::Ordering::Relaxed)
        );
    }
    match result {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("bench: likes or views were lost or doubled, or requests failed (see the table)");
            std::process::ExitCode::FAILURE
        }
        Err(err) => {
            eprintln!("bench: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// A fraction from 0 to 1.
pub fn parse_share(raw: &str) -> Result<f64, String> {
    match raw.parse::<f64>() {
        Ok(share) if (0.0..=1.0).contains(&share) => Ok(share),
        _ => Err(format!("`{raw}` is not a fraction from 0 to 1")),
    }
}

fn parse_env(raw: &str) -> Result<(String, String), String> {
    raw.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())).ok_or_else(|| format!("`{raw}` is not NAME=VALUE"))
}

impl Cli {
    /// The servers to run, in order (at least one): every binary, then every binary again
    /// with `--variant-env` when it is given.
    pub fn servers(&self) -> AppResult<Vec<server::ServerBin>> {
        let exes = if self.server_bins.is_empty() {
            let next_to_bench = std::env::current_exe().ok().and_then(|p| p.parent().map(|d| d.join("course-forum")));
            vec![next_to_bench.ok_or_else(|| {
                course_forum::testing::error::AppError::Internal("cannot locate the course-forum binary".into())
            })?]
        } else {
            self.server_bins.clone()
        };
        let mut servers: Vec<server::ServerBin> =
            exes.iter().map(|exe| server::ServerBin { exe: exe.clone(), env: Vec::new(), pre_0009: false }).collect();
        if let Some(exe) = &self.pre_0009_server_bin {
            servers.insert(0, server::ServerBin { exe: exe.clone(), env: Vec::new(), pre_0009: true });
        }
        let mut variant = self.variant_env.clone();
        if self.redis_cluster {
            variant.push(("REDIS_CLUSTER_NODES".to_owned(), self.redis_cluster_nodes.clone()));
        }
        if !variant.is_empty() {
            servers.extend(exes.into_iter().map(|exe| server::ServerBin {
                exe,
                env: variant.clone(),
                pre_0009: false,
            }));
        }
        Ok(servers)
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
