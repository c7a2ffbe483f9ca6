//! Start-up and shutdown: connect, assemble the state and schema, bind, serve (with the like
//! worker beside the API unless told otherwise) until the shutdown future resolves. Tests build
//! an `Application` on port 0 with their own shutdown.
//!
//! Shutdown is a value: one `watch` channel turns true, and everything long-running holds a
//! receiver of it — the HTTP server (stops accepting, lets in-flight requests finish), every
//! websocket (closed with 1001), and every background job in `BackgroundJobs` (the like
//! worker finishes or abandons its batch; nothing uncommitted is acknowledged). Whatever has
//! not finished by `SHUTDOWN_TIMEOUT` is dropped, so the process always exits in bounded time.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::auth::{Authenticator, TokenKeys};
use crate::cache::pages::CoursePages;
use crate::cache::{CacheConfig, PostCache};
use crate::config::{LikeMode, Settings};
use crate::error::{AppError, AppResult};
use crate::feed::fanout::FanoutJob;
use crate::feed::{Feed, FeedConfig};
use crate::graphql::{AppSchema, build_schema};
use crate::kv::keys::Keys;
use crate::kv::ratelimit::{RateLimiter, WRITE_WINDOW, WriteLimits};
use crate::likes::Likes;
use crate::likes::committed::AfterCommit;
use crate::live::Publisher;
use crate::live::hub::{Hub, run_relay};
use crate::live::runtime::LiveRuntime;
use crate::membership::{self, Memberships};
use crate::state::AppState;
use crate::views::aggregator::ViewAggregator;
use crate::views::{ViewConfig, Views};
use crate::worker::{LikeWorker, WorkerConfig};
use crate::{db, http, kv};

pub struct Application {
    listener: TcpListener,
    state: AppState,
    schema: AppSchema,
    /// The process's one Redis subscription for live updates.
    relay: tokio::task::JoinHandle<()>,
    /// The process's one LISTEN for membership changes.
    membership_listener: tokio::task::JoinHandle<()>,
    /// The websocket connections' runtime (`live::runtime`); dropping it ends every
    /// connection still open on it.
    live: LiveRuntime,
}

impl Application {
    /// Connects to PostgreSQL and Redis and binds the listener; nothing is served yet.
    pub async fn build(settings: Settings) -> AppResult<Self> {
        settings.validate_for_serve()?;
        crate::telemetry::metrics();
        // Before any connection is made: a server meant for many sockets takes the hard limit.
        let limit = crate::ops::descriptors::raise_limit()?;
        crate::ops::descriptors::check_reserve(settings.ws_descriptor_reserve, limit)?;
        let state = connect_state(settings).await?;
        settle_like_mode_switch(&state).await?;
        let bind = state.settings.bind;
        let listener = TcpListener::bind(bind)
            .await
            .map_err(|e| AppError::Config(format!("cannot listen on {bind} ({e}); set BIND to a free address")))?;
        let schema = build_schema(state.clone());
        let relay = start_relay(&state).await?;
        let membership_listener = start_membership_listener(&state).await;
        // Here, not when serving begins: its threads and descriptors are taken at start.
        let live = LiveRuntime::start(state.settings.live_threads, state.settings.live_nice)?;
        Ok(Self { listener, state, schema, relay, membership_listener, live })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().unwrap_or(self.state.settings.bind)
    }

    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serves until `shutdown` resolves; then stops accepting, closes websockets, lets
    /// in-flight requests and the background jobs finish, and returns within
    /// `SHUTDOWN_TIMEOUT` whatever is still running.
    pub async fn run_until_stopped(self, shutdown: impl Future<Output = ()> + Send + 'static) -> AppResult<()> {
        let settings = self.state.settings.clone();
        // Built before anything is spawned: failing here leaves no background task behind.
        let fanout_job = if settings.worker_in_serve { Some(build_feed_fanout(&self.state).await?) } else { None };
        let (stop, stopping) = watch::channel(false);
        let mut jobs = BackgroundJobs::new(stopping.clone());
        let mut worker_consumer = None;
        if settings.worker_in_serve && settings.like_mode != LikeMode::Sync {
            let worker = build_worker(&self.state).await?;
            worker_consumer = Some(worker.consumer().to_owned());
            jobs.spawn("like worker", worker.run(jobs.shutdown()));
        }
        if settings.worker_in_serve {
            jobs.spawn("view aggregator", build_view_aggregator(&self.state).run(jobs.shutdown()));
        }
        if let Some(fanout) = fanout_job {
            jobs.spawn("feed fan-out", fanout.run(jobs.shutdown()));
        }
        if let Some(trusted) = self.state.persisted_queries.trusted() {
            jobs.spawn("trusted documents reload", trusted.clone().reload_on_hangup(jobs.shutdown()));
        }
        tracing::info!(addr = %self.local_addr(), mode = ?settings.like_mode, "serving GraphQL");
        let lifecycle =
            http::Lifecycle { shutdown: stopping.clone(), worker: worker_consumer, connections: self.live.handle() };
        let router = http::router(self.state.clone(), self.schema, lifecycle);
        let mut server_stopping = stopping;
        // Peer addresses reach the handlers (client IPs for view caps).
        let serve = axum::serve(self.listener, router.into_make_service_with_connect_info::<SocketAddr>())
            .with_graceful_shutdown(async move {
                let _ = server_stopping.wait_for(|stopping| *stopping).await;
            });
        let mut server = tokio::spawn(async move { serve.await });
        let failed_early = tokio::select! {
            () = shutdown => None,
            ended = &mut server => Some(ended),
        };
        tracing::info!(timeout = ?settings.shutdown_timeout, "shutting down: no new connections; finishing requests and jobs");
        let _ = stop.send(true);
        let deadline = Instant::now() + settings.shutdown_timeout;
        let ended = match failed_early {
            Some(ended) => ended,
            None => match tokio::time::timeout_at(deadline, &mut server).await {
                Ok(ended) => ended,
                Err(_) => {
                    tracing::warn!("requests still running at SHUTDOWN_TIMEOUT; their connections are dropped");
                    server.abort();
                    Ok(Ok(()))
                }
            },
        };
        jobs.stop(deadline).await;
        self.live.drain(deadline).await;
        self.relay.abort();
        self.membership_listener.abort();
        tracing::info!("stopped");
        match ended {
            Ok(served) => served.map_err(|e| AppError::Internal(format!("server error: {e}"))),
            Err(e) => Err(AppError::Internal(format!("server task failed: {e}"))),
        }
    }
}

/// `course-forum worker`: the like worker, the view aggregator and the feed fan-out without the API, and the
/// operator endpoints on `WORKER_METRICS_BIND` when set; stops like `serve` does.
pub(crate) async fn run_worker_until_stopped(
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> AppResult<()> {
    let settings = state.settings.clone();
    crate::telemetry::metrics();
    crate::ops::descriptors::raise_limit()?;
    // Bind first: a bad address stops the process before any work starts.
    let listener = match settings.worker_metrics_bind {
        Some(addr) => Some(TcpListener::bind(addr).await.map_err(|e| {
            AppError::Config(format!("cannot listen on {addr} ({e}); set WORKER_METRICS_BIND to a free address"))
        })?),
        None => None,
    };
    settle_like_mode_switch(&state).await?;
    let worker = build_worker(&state).await?;
    let fanout = build_feed_fanout(&state).await?;
    let (stop, stopping) = watch::channel(false);
    let mut jobs = BackgroundJobs::new(stopping.clone());
    let consumer = worker.consumer().to_owned();
    jobs.spawn("like worker", worker.run(jobs.shutdown()));
    jobs.spawn("view aggregator", build_view_aggregator(&state).run(jobs.shutdown()));
    jobs.spawn("feed fan-out", fanout.run(jobs.shutdown()));
    if let Some(listener) = listener {
        tracing::info!(addr = ?listener.local_addr().ok(), "serving /healthz, /readyz and /metrics");
        let router = http::ops_router(
            state.clone(),
            http::Lifecycle { shutdown: stopping.clone(), worker: Some(consumer), connections: None },
        );
        let mut stopping = stopping;
        jobs.spawn("operator endpoints", async move {
            let served = axum::serve(listener, router)
                .with_graceful_shutdown(async move {
                    let _ = stopping.wait_for(|stopping| *stopping).await;
                })
                .await;
            if let Err(err) = served {
                tracing::error!(error = %err, "the operator endpoints failed");
            }
        });
    }
    shutdown.await;
    let _ = stop.send(true);
    jobs.stop(Instant::now() + settings.shutdown_timeout).await;
    tracing::info!("stopped");
    Ok(())
}

/// The long-running jobs beside the API (the like worker, the view aggregator, …), each a
/// future that runs until the shared shutdown value turns true. A new job is one `spawn`.
pub(crate) struct BackgroundJobs {
    shutdown: watch::Receiver<bool>,
    jobs: Vec<(&'static str, JoinHandle<()>)>,
}

impl BackgroundJobs {
    pub(crate) fn new(shutdown: watch::Receiver<bool>) -> Self {
        Self { shutdown, jobs: Vec::new() }
    }

    /// The shutdown value to hand to a job's `run`.
    pub(crate) fn shutdown(&self) -> watch::Receiver<bool> {
        self.shutdown.clone()
    }

    pub(crate) fn spawn(&mut self, name: &'static str, job: impl Future<Output = ()> + Send + 'static) {
        self.jobs.push((name, tokio::spawn(job)));
    }

    /// Waits for every job (they were told to stop) until `deadline`; a job still running then
    /// is aborted. For the like worker that drops its open transaction, which PostgreSQL rolls
    /// back: its entries stay pending and the next consumer replays them.
    pub(crate) async fn stop(self, deadline: Instant) {
        for (name, mut job) in self.jobs {
            if tokio::time::timeout_at(deadline, &mut job).await.is_err() {
                job.abort();
                tracing::warn!(
                    job = name,
                    "did not stop by SHUTDOWN_TIMEOUT; abandoned (nothing uncommitted was acknowledged)"
                );
            }
        }
    }
}

/// Starts the live relay and waits until it is subscribed, so nothing published after
/// start-up is missed.
async fn start_relay(state: &AppState) -> AppResult<tokio::task::JoinHandle<()>> {
    let (ready, subscribed) = tokio::sync::oneshot::channel();
    let relay = tokio::spawn(run_relay(
        state.settings.redis_target()?,
        state.keys.live_channel(),
        state.live.clone(),
        state.course_pages.clone(),
        state.db.clone(),
        Some(ready),
    ));
    match tokio::time::timeout(state.settings.connect_timeout, subscribed).await {
        Ok(Ok(())) => Ok(relay),
        _ => {
            relay.abort();
            Err(AppError::Config("cannot subscribe to Redis for live updates (timed out)".into()))
        }
    }
}

/// Starts the membership listener and waits (up to `CONNECT_TIMEOUT`) until it listens and has
/// warmed the cache (`membership::warm`), so the first requests find their members in memory.
/// If it cannot, the server starts anyway: memberships come from PostgreSQL until it can.
async fn start_membership_listener(state: &AppState) -> tokio::task::JoinHandle<()> {
    let listener =
        tokio::spawn(membership::listener::run(state.db.clone(), state.jobs_db.clone(), state.memberships.clone()));
    let deadline = Instant::now() + state.settings.connect_timeout;
    let warmed = |m: &membership::Memberships| m.listening() && m.warms_ended() > 0;
    while !warmed(&state.memberships) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    if !state.memberships.listening() {
        tracing::warn!("not listening for membership changes yet: memberships come from PostgreSQL until then");
    } else if state.memberships.warms_ended() == 0 {
        tracing::warn!(
            "still warming the membership cache: serving meanwhile, members not yet read come from PostgreSQL"
        );
    }
    listener
}

/// Makes a switch away from `buffered` safe before anything is served. Events left in the like
/// streams would otherwise wait forever (no worker reads them in `sync`) or apply late, after
/// newer direct writes; so they are applied first, and the process refuses to start if it
/// cannot within `WORKER_LEASE_TTL` + 2 s or `SHUTDOWN_TIMEOUT`, whichever is longer
/// (PostgreSQL down, another worker still holding a shard). Then every liked-set is
/// dropped: written straight to PostgreSQL, likes would make them stale, and a stale set could
/// swallow a toggle when `buffered` comes back (each direct write also drops its own set, for
/// instances still in `buffered` during a rolling switch). The mode marker in Redis makes the
/// drop happen once per switch, not on every start.
pub(crate) async fn settle_like_mode_switch(state: &AppState) -> AppResult<()> {
    let mode = crate::likes::mode_name(state.settings.like_mode);
    let marker = state.keys.like_mode_marker();
    let mut conn = state.redis.clone();
    let previous: Option<String> = redis::cmd("GET").arg(&marker).query_async(&mut conn).await?;
    if state.settings.like_mode != LikeMode::Buffered {
        apply_buffered_leftovers(state, mode).await?;
    }
    // Back in buffered mode after another, the sets are dropped too: one a buffered instance
    // loaded during a rolling switch may predate a direct write.
    let first_start_in_buffered = previous.is_none() && state.settings.like_mode == LikeMode::Buffered;
    if previous.as_deref() != Some(mode) && !first_start_in_buffered {
        let dropped = state.likes.liked_sets().drop_all().await?;
        tracing::info!(dropped, previous = ?previous, mode, "dropped the liked-sets of the previous like mode");
    }
    let () = redis::cmd("SET").arg(&marker).arg(mode).query_async(&mut conn).await?;
    Ok(())
}

/// Applies what buffered mode left in the like streams, or refuses to start. Waits at least a
/// lease's life (a crashed buffered worker's lease must lapse first), or `SHUTDOWN_TIMEOUT`
/// when that is longer.
async fn apply_buffered_leftovers(state: &AppState, mode: &str) -> AppResult<()> {
    let unapplied = crate::worker::unapplied_events(&state.redis, &state.keys).await?;
    if unapplied == 0 {
        return Ok(());
    }
    let worker = build_worker(state).await?;
    tracing::warn!(unapplied, mode, "like events left by buffered mode: applying them before serving");
    let limit = state.settings.shutdown_timeout.max(state.settings.worker_lease_ttl + Duration::from_secs(2));
    let drained = worker.drain_until_empty(std::time::Instant::now() + limit).await;
    worker.release_leases().await;
    let applied = drained.map_err(|why| {
        AppError::Config(format!(
            "LIKE_MODE={mode}: {unapplied} like event(s) left by buffered mode could not be applied within {} s \
             ({why}); nothing was served. Fix that and start again, or start in LIKE_MODE=buffered to let its \
             worker apply them",
            limit.as_secs()
        ))
    })?;
    tracing::info!(applied, "like events left by buffered mode applied");
    Ok(())
}

/// A like worker with a Redis connection of its own (its blocking reads must not hold up the
/// API's multiplexed connection).
pub async fn build_worker(state: &AppState) -> AppResult<LikeWorker> {
    let redis = kv::connect_to(&state.settings.redis_target()?, state.settings.connect_timeout, "worker").await?;
    let worker = LikeWorker::new(
        state.jobs_db.clone(),
        redis,
        state.keys.clone(),
        WorkerConfig::from_settings(&state.settings),
        state.after_commit(),
    );
    worker.ensure_groups().await?;
    Ok(worker)
}

/// The view aggregator on the state's database and Redis prefix (`flush_views_once` steps it).
pub fn build_view_aggregator(state: &AppState) -> ViewAggregator {
    ViewAggregator::new(
        state.jobs_db.clone(),
        state.redis.with_role("background"),
        state.keys.clone(),
        state.settings.view_shards,
        state.settings.view_flush_interval,
    )
    .with_caches(state.post_cache.clone(), state.publisher.clone())
}

/// The feed fan-out job (`process_one_batch` steps it) with a Redis connection of its own: its
/// pipelines of thousands of pushes must not hold up the API's multiplexed connection.
pub async fn build_feed_fanout(state: &AppState) -> AppResult<FanoutJob> {
    let redis = kv::connect_to(&state.settings.redis_target()?, state.settings.connect_timeout, "feed").await?;
    Ok(FanoutJob::new(state.jobs_db.clone(), redis, state.keys.clone(), FeedConfig::from_settings(&state.settings)))
}

/// Opens every client and assembles the shared state.
pub(crate) async fn connect_state(settings: Settings) -> AppResult<AppState> {
    let settings = Arc::new(settings);
    // Pools: requests (with STATEMENT_TIMEOUT), background jobs, searches and first touches,
    // so none can take another's connections.
    let mut db = db::connect_api(&settings).await?;
    let mut jobs_db = db::connect_jobs(&settings).await?;
    let mut search_db = db::connect_search(&settings).await?;
    let mut search_kept_db = db::connect_search_kept(&settings).await?;
    let mut first_touch_db =
        db::connect_first_touch(&settings, crate::likes::first_touch::MAX_IN_FLIGHT as u32).await?;
    let sql_statements = db::StatementCounter::attach(&mut db, "api");
    sql_statements.attach_also(&mut jobs_db, "background");
    sql_statements.attach_also(&mut search_db, "api");
    sql_statements.attach_also(&mut search_kept_db, "api");
    sql_statements.attach_also(&mut first_touch_db, "api");
    let redis = kv::connect_to(&settings.redis_target()?, settings.connect_timeout, "api").await?;
    if settings.like_mode == LikeMode::Buffered && !settings.allow_evicting_redis {
        kv::refuse_evicting_policy(&redis).await?;
    }
    let keys = Keys::new(settings.redis_key_prefix.clone(), settings.like_stream_shards);
    let tokens = TokenKeys::new(settings.jwt_secret()?)?;
    let auth = Authenticator::from_settings(&settings, db.clone()).await?;
    let limiter =
        RateLimiter::new(redis.clone(), settings.like_rate_per_minute, Duration::from_secs(60), "likes and unlikes");
    let write_limits = WriteLimits::new(redis.clone(), keys.clone(), &settings);
    let search_limit = RateLimiter::new(redis.clone(), settings.search_rate_per_minute, WRITE_WINDOW, "searches");
    let post_cache = PostCache::new(db.clone(), redis.clone(), keys.clone(), CacheConfig::from_settings(&settings));
    post_cache.load_scripts().await?;
    let feed =
        Feed::new(db.clone(), redis.clone(), keys.clone(), post_cache.clone(), FeedConfig::from_settings(&settings));
    feed.lists().load_scripts().await?;
    let cache_budget = crate::cache::budget::CacheBudget::new(settings.cache_budget_bytes);
    let course_pages = CoursePages::with_budget(settings.course_page_cache_ttl, &cache_budget);
    let search_candidates = crate::cache::search::SearchCandidates::with_budget(
        settings.search_cache_ttl,
        &cache_budget,
        crate::forum::search::OnePassLimits {
            posts: settings.search_one_pass_posts,
            comments: settings.search_one_pass_comments,
        },
    );
    let publisher = Publisher::new(redis.clone(), keys.live_channel()).with_local_pages(course_pages.clone());
    let likes = Likes::new(
        db.clone(),
        redis.clone(),
        settings.like_mode,
        limiter,
        keys.clone(),
        settings.liked_set_ttl,
        AfterCommit::new(post_cache.clone(), publisher.clone(), db.clone()),
    )
    .with_first_touch_pool(first_touch_db);
    let views = Views::new(redis.clone(), keys.clone(), ViewConfig::from_settings(&settings));
    let memberships = Memberships::with_budget(settings.membership_cache, &cache_budget);
    let trusted = match &settings.trusted_documents {
        Some(path) => Some(Arc::new(crate::documents::trusted::TrustedDocuments::load(path)?)),
        None => None,
    };
    let persisted_queries =
        Arc::new(crate::documents::persisted::PersistedQueries::new(redis.clone(), keys.clone(), &settings, trusted));
    let cursor_keys = crate::cursor::load_keys(&settings, &redis, &keys).await?;
    let users = crate::cache::users::UserRows::with_budget(&cache_budget);
    let read_handles = Arc::new(crate::state::ReadHandles {
        db: db.clone(),
        users: users.clone(),
        likes: likes.clone(),
        views: views.clone(),
        course_pages: course_pages.clone(),
        post_cache: post_cache.clone(),
    });
    Ok(AppState {
        settings,
        db,
        jobs_db,
        search_db,
        search_kept_db,
        sql_statements,
        redis,
        keys,
        tokens,
        auth,
        likes,
        write_limits,
        search_limit,
        publisher,
        live: Hub::new(),
        views,
        post_cache,
        course_pages,
        course_titles: crate::cache::titles::CourseTitles::with_budget(&cache_budget),
        search_candidates,
        users,
        feed,
        memberships,
        parsed_documents: Arc::new(crate::documents::persisted::ParsedDocuments::new(&cache_budget)),
        persisted_queries,
        cursor_keys,
        pseudonyms: crate::forum::audience::Pseudonyms::new(),
        cache_budget,
        read_handles,
    })
}

/// Resolves on SIGINT or SIGTERM.
pub(crate) async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
    }
    tracing::info!("shutdown signal received");
}
