//! `bench suite`: every scenario in turn against one fresh database, then one table (printed,
//! and written as Markdown) and every number as JSON, both in `target/bench/` next to the
//! binaries: `suite-<UTC time>.md` and `suite-<UTC time>.json`. The goals of the issue are
//! checked at the end; the suite fails (exit 1) when likes were lost or doubled, or a request
//! failed, and reports the goals it missed without failing (they are measurements).
//!
//! Live delivery runs twice: at `--subscribers` (1,000) as before, then the hot post of issue
//! 31: `--hot-subscribers` (10,000) watchers, `--hot-slow-share` (10 %) of them slow readers,
//! during `--hot-likes` (3,000) likes. That run needs a descriptor per subscriber in the bench
//! process (and in the server, which inherits its limit): when `RLIMIT_NOFILE` is too low for
//! it the suite says so, in its table and JSON, instead of running it.
//!
//! A new scenario: a `run_on`-style function returning a `Serialize` result, one call below,
//! one field in `SuiteReport`, its rows in `table`.

use std::fmt::Write as _;
use std::time::Duration;

use course_forum::testing::config::LikeMode;
use course_forum::testing::error::{AppError, AppResult};
use serde::Serialize;

use crate::Cli;
use crate::ceiling::{self, CeilingResult};
use crate::feed::{self, FeedBench, FeedResult};
use crate::fixture::Fixture;
use crate::live::{self, LiveConfig, LiveResult};
use crate::page::{self, PageResult};
use crate::server::load_average;
use crate::storm::{self, StormResult};
use crate::views::{self, ViewsResult};
use crate::worker_apply::{self, ApplyResult};

/// The suite's knobs (`bench suite --help`).
#[derive(Clone, Debug, Serialize, clap::Args)]
pub struct SuiteConfig {
    /// Likes in each mode's storm (distinct users on one post).
    #[arg(long, default_value_t = 20_000)]
    pub likes: usize,
    /// Concurrent keep-alive HTTP connections of the load generator.
    #[arg(long, default_value_t = 32)]
    pub connections: usize,
    /// Longest a storm or a page run may send requests, in seconds.
    #[arg(long, default_value_t = 60)]
    pub time_cap_secs: u64,
    /// Distinct readers of the course page.
    #[arg(long, default_value_t = 500)]
    pub readers: usize,
    /// Course pages read in the measured window.
    #[arg(long, default_value_t = 20_000)]
    pub pages: usize,
    /// Websocket subscribers during the live storm.
    #[arg(long, default_value_t = 1_000)]
    pub subscribers: usize,
    /// Likes in the live storm.
    #[arg(long, default_value_t = 10_000)]
    pub live_likes: usize,
    /// Watchers of the hot post in the second live run (0: not run).
    #[arg(long, default_value_t = 10_000)]
    pub hot_subscribers: usize,
    /// Likes during the hot post's fan-out.
    #[arg(long, default_value_t = 3_000)]
    pub hot_likes: usize,
    /// The share of the hot post's watchers reading 1 frame per second (0 to 1).
    #[arg(long, default_value_t = 0.1, value_parser = crate::parse_share)]
    pub hot_slow_share: f64,
    /// Hot-post watchers opened per second during setup.
    #[arg(long, default_value_t = 2_000)]
    pub hot_open_rate: u32,
    /// Distinct viewers of the viewed post (as many as the storms' likers: the same course,
    /// and starts enough for a second and more of measurement).
    #[arg(long, default_value_t = 20_000)]
    pub viewers: usize,
    /// Likes the worker applies per batch-size run.
    #[arg(long, default_value_t = 50_000)]
    pub apply_likes: i64,
    /// Worker batch sizes.
    #[arg(long, value_delimiter = ',', default_value = "500,5000")]
    pub batches: Vec<usize>,
    /// `{ __typename }` requests measured for the ceiling.
    #[arg(long, default_value_t = 100_000)]
    pub ceiling_requests: usize,
}

#[derive(Debug, Serialize)]
pub struct Machine {
    pub cpus: usize,
    pub cpu_model: String,
    pub load_at_start: f64,
    pub load_at_end: f64,
}

#[derive(Debug, Serialize)]
pub struct Goal {
    pub goal: String,
    pub measured: String,
    pub met: bool,
}

#[derive(Debug, Serialize)]
pub struct SuiteReport {
    pub started_at: String,
    pub machine: Machine,
    pub config: SuiteConfig,
    /// `{ __typename }` on the same load generator and connections, measured first: every
    /// scenario's rate is also given as a fraction of it.
    pub ceiling: CeilingResult,
    pub storm: Vec<StormResult>,
    pub page: PageResult,
    pub live: LiveResult,
    /// The hot post: `hot_subscribers` watchers, some slow; None when it did not run.
    pub live_hot: Option<LiveResult>,
    /// Why the hot post's run did not run.
    pub live_hot_skipped: Option<String>,
    pub worker_apply: Vec<ApplyResult>,
    pub views: ViewsResult,
    pub feed: FeedResult,
    pub goals: Vec<Goal>,
}

pub async fn run(cli: &Cli, config: &SuiteConfig) -> AppResult<bool> {
    let started_at = chrono::Utc::now();
    let load_at_start = load_average();
    let cap = Duration::from_secs(config.time_cap_secs);
    eprintln!("bench suite: load {load_at_start:.2}; worker apply…");
    let apply = worker_apply::run(cli, config.apply_likes, &config.batches).await?;

    let exe = cli.servers()?.remove(0);
    let members =
        config.likes.max(config.live_likes).max(config.hot_likes).max(config.viewers).max(config.readers).max(21);
    let hot_skipped = hot_run_refused(config);
    let fixture = Fixture::create(&cli.database_url, members as i64).await?;
    let outcome = async {
        // The three modes with every liked-set cold (each user's first request), then buffered
        // again with the sets warm (each user read the post first).
        let modes = [
            (LikeMode::Sync, false),
            (LikeMode::Recount, false),
            (LikeMode::Buffered, false),
            (LikeMode::Buffered, true),
        ];
        eprintln!("bench suite: ceiling ({{ __typename }})…");
        let ceiling = ceiling::run_on(cli, &exe, &fixture, config.ceiling_requests, config.connections, cap).await?;
        let storm_posts = fixture.add_posts(modes.len() as i64, 1, "storm").await?;
        let live_post = fixture.add_posts(1, 1, "live").await?[0];
        let hot_post = fixture.add_posts(1, 1, "hot").await?[0];
        let views_post = fixture.add_posts(1, 1, "viewed").await?[0];
        // The page's posts last: they are the newest 20 the page shows.
        let page_posts = page::prepare(&fixture, config.readers).await?;
        let mut storms = Vec::new();
        for ((mode, warm_sets), post) in modes.into_iter().zip(storm_posts) {
            eprintln!(
                "bench suite: storm, {} mode{}…",
                storm::mode_name(mode),
                if warm_sets { ", warm sets" } else { "" }
            );
            storms.push(
                storm::run_mode(cli, &exe, &fixture, mode, warm_sets, post, config.likes, config.connections, cap)
                    .await?,
            );
        }
        eprintln!("bench suite: course page…");
        let page = page::run_on(
            cli,
            &exe,
            &fixture,
            &page_posts,
            config.readers,
            config.pages,
            config.connections,
            cap,
            "NEW",
            &page::PageFilter::plain(),
        )
        .await?;
        eprintln!("bench suite: live delivery…");
        let live_config = LiveConfig {
            subscribers: config.subscribers,
            likes: config.live_likes,
            connections: config.connections,
            open_rate: 500,
            slow_share: 0.0,
            flood: 0,
            time_cap: Duration::from_secs(120),
        };
        let live = live::run_on(cli, &fixture, live_post, &live_config).await?;
        let live_hot = match &hot_skipped {
            Some(reason) => {
                eprintln!("bench suite: hot post not run: {reason}");
                None
            }
            None => {
                eprintln!(
                    "bench suite: hot post, {} watchers, {:.0} % slow…",
                    config.hot_subscribers,
                    100.0 * config.hot_slow_share
                );
                let hot_config = LiveConfig {
                    subscribers: config.hot_subscribers,
                    likes: config.hot_likes,
                    connections: config.connections,
                    open_rate: config.hot_open_rate,
                    slow_share: config.hot_slow_share,
                    flood: 0,
                    time_cap: cap,
                };
                Some(live::run_on(cli, &fixture, hot_post, &hot_config).await?)
            }
        };
        eprintln!("bench suite: views…");
        let views = views::run_on(cli, &fixture, views_post, config.viewers, config.connections).await?;
        Ok::<_, AppError>((ceiling, storms, page, live, live_hot, views))
    }
    .await;
    fixture.drop().await?;
    let (ceiling, storm, page, live, live_hot, views) = outcome?;
    // The home feed builds its own world (a celebrity course of 10,000) in its own database.
    eprintln!("bench suite: home feed…");
    let feed = feed::run(cli, &FeedBench::defaults()).await?;

    let machine = Machine {
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model: cpu_model(),
        load_at_start,
        load_at_end: load_average(),
    };
    let mut goals = goals(&ceiling, &storm, &page, &live, &apply, &views);
    goals.extend(hot_goals(config, &storm, live_hot.as_ref(), hot_skipped.as_deref()));
    let report = SuiteReport {
        started_at: started_at.to_rfc3339(),
        machine,
        config: config.clone(),
        ceiling,
        storm,
        page,
        live,
        live_hot,
        live_hot_skipped: hot_skipped,
        worker_apply: apply,
        views,
        feed,
        goals,
    };
    let table = table(&report);
    println!("{table}");
    let stamp = started_at.format("%Y%m%dT%H%M%SZ");
    let dir = output_dir();
    std::fs::create_dir_all(&dir).map_err(|e| AppError::Internal(format!("create {}: {e}", dir.display())))?;
    let json = serde_json::to_string_pretty(&report).map_err(|e| AppError::Internal(e.to_string()))?;
    for (ext, text) in [("json", json), ("md", table)] {
        let path = dir.join(format!("suite-{stamp}.{ext}"));
        std::fs::write(&path, text).map_err(|e| AppError::Internal(format!("write {}: {e}", path.display())))?;
        println!("wrote {}", path.display());
    }
    let sound = report.ceiling.failed == 0
        && report.storm.iter().all(|s| s.consistent && s.failed == 0)
        && report.page.failed == 0
        && report.live.likes_failed == 0
        && report.live_hot.as_ref().is_none_or(|hot| hot.likes_failed == 0)
        && report.views.consistent
        && report.views.failed == 0;
    Ok(sound)
}

/// Descriptors the bench process keeps beyond its subscribers: the load generator's
/// connections, PostgreSQL, Redis, the server's pipes, the runtime.
const DESCRIPTOR_MARGIN: u64 = 1_024;

/// Why the hot post's run cannot run here, if it cannot: not asked for, or too few descriptors
/// for its subscribers (each is a socket in the bench and one in the server).
fn hot_run_refused(config: &SuiteConfig) -> Option<String> {
    if config.hot_subscribers == 0 {
        return Some("--hot-subscribers 0".into());
    }
    let needed = config.hot_subscribers as u64 + DESCRIPTOR_MARGIN;
    match open_files_limit() {
        Some(limit) if limit < needed => Some(format!(
            "{} watchers need about {needed} file descriptors in the bench process (and as many in the \
             server, which inherits its limit), but RLIMIT_NOFILE is {limit}: raise it (`ulimit -n {needed}`) \
             or lower --hot-subscribers",
            config.hot_subscribers
        )),
        _ => None,
    }
}

/// This process's soft RLIMIT_NOFILE, from /proc (Linux); None when unknown or unlimited.
fn open_files_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.trim_start_matches("Max open files").split_whitespace().next()?.parse().ok()
}

/// `target/bench/`: next to the profile directory the bench binary runs from.
fn output_dir() -> std::path::PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join("bench")))
        .unwrap_or_else(|| std::path::PathBuf::from("target/bench"))
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| Some(l.split_once(':')?.1.trim().to_owned()))
        })
        .unwrap_or_else(|| "unknown".into())
}

/// A rate as a fraction of the ceiling.
fn fraction(rate: f64, ceiling: &CeilingResult) -> f64 {
    rate / ceiling.requests_per_s.max(1e-9)
}

fn goals(
    ceiling: &CeilingResult,
    storm: &[StormResult],
    page: &PageResult,
    live: &LiveResult,
    apply: &[ApplyResult],
    views: &ViewsResult,
) -> Vec<Goal> {
    let mut goals = Vec::new();
    let share = |rate: f64| {
        format!("{:.0}/s = {:.1} % of {:.0}/s", rate, 100.0 * fraction(rate, ceiling), ceiling.requests_per_s)
    };
    let buffered = |warm: bool| storm.iter().find(|s| s.mode == "buffered" && s.warm_sets == warm);
    for (warm, at_least) in [(true, 0.40), (false, 0.25)] {
        if let Some(s) = buffered(warm) {
            goals.push(Goal {
                goal: format!(
                    "{} buffered like ≥ {:.0} % of the ceiling",
                    if warm { "warm-set" } else { "cold-set" },
                    100.0 * at_least
                ),
                measured: share(s.likes_per_s),
                met: fraction(s.likes_per_s, ceiling) >= at_least,
            });
        }
    }
    goals.push(Goal {
        goal: "zero lost or double likes (every mode)".into(),
        measured: storm
            .iter()
            .map(|s| {
                let warm = if s.warm_sets { " (warm sets)" } else { "" };
                format!("{}{warm}: {}={}={}", s.mode, s.accepted, s.db_like_count, s.db_like_rows)
            })
            .collect::<Vec<_>>()
            .join(", "),
        met: storm.iter().all(|s| s.consistent),
    });
    goals.push(Goal {
        goal: "course page ≥ 15 % of the ceiling".into(),
        measured: share(page.pages_per_s),
        met: fraction(page.pages_per_s, ceiling) >= 0.15,
    });
    goals.push(Goal {
        goal: "page: exactly 1 Redis command".into(),
        measured: format!("{:.3}", page.redis_per_page),
        met: (page.redis_per_page - 1.0).abs() < 0.005,
    });
    goals.push(Goal {
        goal: "page: 0 SQL statements on a warm server".into(),
        measured: format!("{:.3}", page.sql_per_page),
        // The requests' statements only (`role="api"`): the jobs polling in the same
        // process are counted apart.
        met: page.sql_per_page < 0.005,
    });
    goals.push(Goal {
        goal: "startPostView ≥ 40 % of the ceiling".into(),
        measured: share(views.starts_per_s),
        met: fraction(views.starts_per_s, ceiling) >= 0.40,
    });
    goals.push(Goal {
        goal: "zero lost or double views".into(),
        measured: format!("{} counted, {} in the database", views.counted, views.db_view_count),
        met: views.consistent,
    });
    goals.push(Goal {
        goal: "commit→subscriber p99 < 250 ms".into(),
        measured: format!("{:.1} ms", live.commit_to_client_p99_ms),
        met: live.commit_to_client_p99_ms < 250.0,
    });
    if let Some(big) = apply.iter().find(|a| a.batch == 5_000 && a.pipelined) {
        goals.push(Goal {
            goal: "worker ≥ 60,000 likes/s at batch 5,000".into(),
            measured: format!("{:.0}/s", big.likes_per_s),
            met: big.likes_per_s >= 60_000.0,
        });
    }
    goals
}

/// The hot post's goals (issue 31, "A hot post with 15,000 watchers"), at the suite's
/// `--hot-subscribers` and `--hot-slow-share`.
fn hot_goals(
    config: &SuiteConfig,
    storm: &[StormResult],
    hot: Option<&LiveResult>,
    skipped: Option<&str>,
) -> Vec<Goal> {
    let Some(hot) = hot else {
        return vec![Goal {
            goal: format!("hot post, {} watchers", config.hot_subscribers),
            measured: format!("not run: {}", skipped.unwrap_or("unknown")),
            met: false,
        }];
    };
    let who = format!("{} watchers, {:.0} % slow", hot.subscribers, 100.0 * hot.slow_share);
    let mut goals = vec![
        Goal {
            goal: format!("{who}: the fast ones' commit→client p99 < 250 ms"),
            measured: format!(
                "p50 {:.1} ms, p99 {:.1} ms (updates of the storm p99 {:.1} ms; the final count p50 {:.1}, p99 {:.1} ms)",
                hot.commit_to_client_p50_ms,
                hot.commit_to_client_p99_ms,
                hot.during_storm_p99_ms,
                hot.final_count_p50_ms,
                hot.final_count_p99_ms
            ),
            met: hot.commit_to_client_p99_ms < 250.0,
        },
        Goal {
            goal: format!("{who}: every fast subscriber sees the final count"),
            measured: format!("{}/{}", hot.saw_final, hot.fast_subscribers),
            met: hot.saw_final == hot.fast_subscribers,
        },
        Goal {
            goal: "memory per subscriber ≤ 10 KiB".into(),
            measured: format!(
                "{:.1} KiB ({} → {} MiB for {})",
                hot.memory_per_subscriber_kib, hot.rss_idle_mib, hot.rss_subscribed_mib, hot.subscribers
            ),
            met: hot.memory_per_subscriber_kib <= 10.0,
        },
    ];
    if let Some(cold) = storm.iter().find(|s| s.mode == "buffered" && !s.warm_sets) {
        goals.push(Goal {
            goal: format!("{who}: likes/s ≥ 50 % of the cold buffered storm"),
            measured: format!(
                "{:.0}/s = {:.1} % of {:.0}/s",
                hot.likes_per_s,
                100.0 * hot.likes_per_s / cold.likes_per_s.max(1e-9),
                cold.likes_per_s
            ),
            met: hot.likes_per_s >= 0.5 * cold.likes_per_s,
        });
    }
    goals
}

/// One live run's rows: likes, the fast subscribers, the slow ones when there were any, memory.
fn live_rows(t: &mut String, l: &LiveResult) {
    let _ = writeln!(
        t,
        "| likes/s | commit→client p50 ms | p99 ms | max ms | samples | saw final count | closed by the server | messages/subscriber | RSS idle → subscribed → peak → end MiB | KiB/subscriber | load |"
    );
    let _ = writeln!(t, "|---:|---:|---:|---:|---:|---:|---|---:|---|---:|---:|");
    let closed = |codes: &std::collections::BTreeMap<String, usize>| {
        if codes.is_empty() {
            "none".to_owned()
        } else {
            codes.iter().map(|(code, n)| format!("{n} × {code}")).collect::<Vec<_>>().join(", ")
        }
    };
    let _ = writeln!(
        t,
        "| {:.0} | {:.1} | {:.1} | {:.1} | {} | {}/{} | {} | {:.0} | {} → {} → {} → {} | {:.1} | {:.2} |",
        l.likes_per_s,
        l.commit_to_client_p50_ms,
        l.commit_to_client_p99_ms,
        l.commit_to_client_max_ms,
        l.samples,
        l.saw_final,
        l.fast_subscribers,
        closed(&l.fast_closed),
        l.messages_per_subscriber_p50,
        l.rss_idle_mib,
        l.rss_subscribed_mib,
        l.rss_peak_mib,
        l.rss_end_mib,
        l.memory_per_subscriber_kib,
        l.load_before
    );
    if l.slow_subscribers > 0 {
        let _ = writeln!(
            t,
            "\nThe {} slow subscribers (1 frame/s, 4 KiB receive buffer; the row above is the {} fast ones): \
             commit→client p50 {:.1} ms, p99 {:.1} ms over {} updates; {}/{} saw the final count; \
             closed by the server: {}.",
            l.slow_subscribers,
            l.fast_subscribers,
            l.slow_commit_to_client_p50_ms,
            l.slow_commit_to_client_p99_ms,
            l.slow_samples,
            l.slow_saw_final,
            l.slow_subscribers,
            closed(&l.slow_closed)
        );
    }
}

/// The Markdown table of a run.
pub fn table(r: &SuiteReport) -> String {
    let mut t = String::new();
    let m = &r.machine;
    let _ = writeln!(
        t,
        "course-forum bench suite, {} — {} × {}, load {:.2} at start, {:.2} at end\n",
        r.started_at, m.cpus, m.cpu_model, m.load_at_start, m.load_at_end
    );
    let c = &r.config;
    let ceiling = &r.ceiling;
    let _ = writeln!(
        t,
        "Ceiling: `{{ __typename }}` with a bearer token, {} keep-alive connections: {:.0} requests/s \
         (p50 {:.2} ms, p99 {:.2} ms, {} failed). Every rate below is also given as a fraction of it.\n",
        c.connections, ceiling.requests_per_s, ceiling.p50_ms, ceiling.p99_ms, ceiling.failed
    );
    let _ = writeln!(t, "| scenario | per s | of the ceiling |");
    let _ = writeln!(t, "|---|---:|---:|");
    let mut rates: Vec<(String, f64)> = r
        .storm
        .iter()
        .map(|s| (format!("like, {}{}", s.mode, if s.warm_sets { ", warm sets" } else { "" }), s.likes_per_s))
        .collect();
    rates.push(("course page".into(), r.page.pages_per_s));
    rates.push(("startPostView".into(), r.views.starts_per_s));
    rates.push(("completePostView".into(), r.views.completes_per_s));
    rates.push(("like during live fan-out".into(), r.live.likes_per_s));
    for (name, rate) in rates {
        let _ = writeln!(t, "| {name} | {rate:.0} | {:.1} % |", 100.0 * fraction(rate, ceiling));
    }
    let _ = writeln!(
        t,
        "\nLike storm: {} distinct users like ONE post, {} keep-alive connections, a fresh server per mode\n",
        c.likes, c.connections
    );
    let _ = writeln!(
        t,
        "| mode | accepted/s | p50 ms | p99 ms | max ms | accepted of offered | failed | flush lag ms | DB count = rows = accepted | Redis/like (api+worker) | SQL/like | CPU s server/bench/pg/redis | CPU ms/like | load |"
    );
    let _ = writeln!(t, "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|---:|---:|");
    for s in &r.storm {
        let _ = writeln!(
            t,
            "| {}{} | {:.0} | {:.1} | {:.1} | {:.1} | {} of {} | {} | {:.0} | {} = {} = {} {} | {:.2}+{:.2} | {:.2} | {:.1}/{:.1}/{:.1}/{:.1} | {:.2} | {:.2} |",
            s.mode,
            if s.warm_sets { ", warm sets" } else { "" },
            s.likes_per_s,
            s.p50_ms,
            s.p99_ms,
            s.max_ms,
            s.accepted,
            s.offered,
            s.failed,
            s.flush_lag_ms,
            s.db_like_count,
            s.db_like_rows,
            s.accepted,
            if s.consistent { "✓" } else { "✗" },
            s.redis_api_per_like,
            s.redis_worker_per_like,
            s.sql_per_like,
            s.cpu.server,
            s.cpu.bench,
            s.cpu.postgres,
            s.cpu.redis,
            s.cpu_ms_per_like,
            s.load_before
        );
    }
    let p = &r.page;
    let _ = writeln!(
        t,
        "\nCourse page (20 posts: likedByMe, likeCount, commentCount, author), {} readers, buffered mode\n",
        p.readers
    );
    let _ = writeln!(
        t,
        "| pages/s | p50 ms | p99 ms | max ms | failed | Redis/page | SQL/page | CPU s server/bench/pg/redis | CPU ms/page | load |"
    );
    let _ = writeln!(t, "|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|");
    let _ = writeln!(
        t,
        "| {:.0} | {:.1} | {:.1} | {:.1} | {} | {:.3} | {:.3} | {:.1}/{:.1}/{:.1}/{:.1} | {:.2} | {:.2} |",
        p.pages_per_s,
        p.p50_ms,
        p.p99_ms,
        p.max_ms,
        p.failed,
        p.redis_per_page,
        p.sql_per_page,
        p.cpu.server,
        p.cpu.bench,
        p.cpu.postgres,
        p.cpu.redis,
        p.cpu_ms_per_page,
        p.load_before
    );
    let l = &r.live;
    let _ = writeln!(
        t,
        "\nLive delivery: {} subscribers on one post during a storm of {} likes (buffered)\n",
        l.subscribers, c.live_likes
    );
    live_rows(&mut t, l);
    match (&r.live_hot, &r.live_hot_skipped) {
        (Some(hot), _) => {
            let _ = writeln!(
                t,
                "\nHot post: {} watchers, {:.0} % of them slow, during a storm of {} likes (buffered)\n",
                hot.subscribers,
                100.0 * hot.slow_share,
                c.hot_likes
            );
            live_rows(&mut t, hot);
        }
        (None, reason) => {
            let _ = writeln!(
                t,
                "\nHot post ({} watchers): not run: {}.",
                c.hot_subscribers,
                reason.as_deref().unwrap_or("unknown")
            );
        }
    }
    let _ = writeln!(t, "\nWorker apply rate: one worker, one shard, {} likes on one post\n", c.apply_likes);
    let _ = writeln!(
        t,
        "| batch | steps | likes/s | ms per batch | stream read ms | transaction ms | XACK+trim ms | SQL-only ms per batch |"
    );
    let _ = writeln!(t, "|---:|---|---:|---:|---:|---:|---:|---:|");
    for a in &r.worker_apply {
        let _ = writeln!(
            t,
            "| {} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
            a.batch,
            if a.pipelined { "pipelined" } else { "one by one" },
            a.likes_per_s,
            a.ms_per_batch,
            a.read_ms_per_batch,
            a.apply_ms_per_batch,
            a.ack_ms_per_batch,
            a.sql_ms_per_batch
        );
    }
    let v = &r.views;
    let _ = writeln!(t, "\nViews: {} distinct users view one post (start, dwell, complete; caps on)\n", v.viewers);
    let _ = writeln!(
        t,
        "| starts/s | p50 ms | p99 ms | SQL/start | Redis/start | completes/s | p50 ms | p99 ms | counted | failed | flush lag ms | DB = counted | load |"
    );
    let _ = writeln!(t, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|");
    let _ = writeln!(
        t,
        "| {:.0} | {:.1} | {:.1} | {:.2} | {:.2} | {:.0} | {:.1} | {:.1} | {} | {} | {:.0} | {} = {} {} | {:.2} |",
        v.starts_per_s,
        v.start_p50_ms,
        v.start_p99_ms,
        v.start_sql,
        v.start_redis,
        v.completes_per_s,
        v.complete_p50_ms,
        v.complete_p99_ms,
        v.counted,
        v.failed,
        v.flush_lag_ms,
        v.db_view_count,
        v.counted,
        if v.consistent { "✓" } else { "✗" },
        v.load_before
    );
    let f = &r.feed;
    let _ = writeln!(
        t,
        "\nHome feed: a celebrity course of {} members (not fanned out), {} readers each also in 5 small \
         courses, pages of 20, {} connections; fan-out of one post\n",
        f.config.celebrity_members, f.config.readers, f.config.concurrency
    );
    let _ = writeln!(t, "| step | samples | p50 ms | p99 ms | max ms | per s |");
    let _ = writeln!(t, "|---|---:|---:|---:|---:|---:|");
    for step in f.reads.iter().chain(&f.fanout) {
        let _ = writeln!(
            t,
            "| {} | {} | {:.1} | {:.1} | {:.1} | {} |",
            step.name,
            step.samples,
            step.p50_ms,
            step.p99_ms,
            step.max_ms,
            step.per_s.map_or_else(|| "–".to_owned(), |n| format!("{n:.0}"))
        );
    }
    let _ = writeln!(t, "\nGoals\n");
    let _ = writeln!(t, "| goal | measured | met |");
    let _ = writeln!(t, "|---|---|---|");
    for g in &r.goals {
        let _ = writeln!(t, "| {} | {} | {} |", g.goal, g.measured, if g.met { "yes" } else { "**no**" });
    }
    let failures: Vec<&str> = r
        .storm
        .iter()
        .filter_map(|s| s.first_failure.as_deref())
        .chain(r.page.first_failure.as_deref())
        .chain(r.views.first_failure.as_deref())
        .collect();
    for failure in failures {
        let _ = writeln!(t, "\nfirst failure: {failure}");
    }
    t
}
