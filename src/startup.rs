//! Start-up and shutdown: connect, assemble the state and schema, bind, serve (with the like
//! worker beside the API unless told otherwise) until the shutdown future resolves. Tests build
//! an `Application` on port 0 with their own shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::auth::TokenKeys;
use crate::cache::{CacheConfig, PostCache};
use crate::config::{LikeMode, Settings};
use crate::error::{AppError, AppResult};
use crate::feed::fanout::FanoutJob;
use crate::feed::{Feed, FeedConfig};
use crate::graphql::{AppSchema, build_schema};
use crate::kv::keys::Keys;
use crate::kv::ratelimit::RateLimiter;
use crate::likes::Likes;
use crate::live::Publisher;
use crate::live::hub::{Hub, run_relay};
use crate::state::AppState;
use crate::views::aggregator::ViewAggregator;
use crate::views::{ViewConfig, Views};
use crate::worker::{LikeWorker, WorkerConfig};
use crate::{db, http, kv};

/// How long shutdown waits for the worker's batch in flight.
const WORKER_STOP_GRACE: Duration = Duration::from_secs(10);

pub struct Application {
    listener: TcpListener,
    state: AppState,
    schema: AppSchema,
    /// The process's one Redis subscription for live updates.
    relay: tokio::task::JoinHandle<()>,
}

impl Application {
    /// Connects to PostgreSQL and Redis and binds the listener; nothing is served yet.
    pub async fn build(settings: Settings) -> AppResult<Self> {
        settings.validate_for_serve()?;
        crate::telemetry::metrics();
        let state = connect_state(settings).await?;
        let bind = state.settings.bind;
        let listener = TcpListener::bind(bind)
            .await
            .map_err(|e| AppError::Config(format!("cannot listen on {bind} ({e}); set BIND to a free address")))?;
        let schema = build_schema(state.clone());
        let relay = start_relay(&state).await?;
        Ok(Self { listener, state, schema, relay })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().unwrap_or(self.state.settings.bind)
    }

    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serves until `shutdown` resolves, then lets in-flight requests and the worker's batch
    /// finish.
    pub async fn run_until_stopped(self, shutdown: impl Future<Output = ()> + Send + 'static) -> AppResult<()> {
        // Built before anything is spawned: failing here leaves no background task behind.
        let fanout_job =
            if self.state.settings.worker_in_serve { Some(build_feed_fanout(&self.state).await?) } else { None };
        let (stop_worker, worker_stopped) = watch::channel(false);
        let worker = if self.state.settings.worker_in_serve && self.state.settings.like_mode != LikeMode::Sync {
            Some(tokio::spawn(build_worker(&self.state).await?.run(worker_stopped)))
        } else {
            None
        };
        let views = self
            .state
            .settings
            .worker_in_serve
            .then(|| tokio::spawn(build_view_aggregator(&self.state).run(stop_worker.subscribe())));
        let fanout = fanout_job.map(|job| tokio::spawn(job.run(stop_worker.subscribe())));
        tracing::info!(addr = %self.local_addr(), mode = ?self.state.settings.like_mode, "serving GraphQL");
        let router = http::router(self.state.clone(), self.schema);
        // Peer addresses reach the handlers (client IPs for view caps).
        let served = axum::serve(self.listener, router.into_make_service_with_connect_info::<SocketAddr>())
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(|e| AppError::Internal(format!("server error: {e}")));
        let _ = stop_worker.send(true);
        self.relay.abort();
        if let Some(worker) = worker
            && tokio::time::timeout(WORKER_STOP_GRACE, worker).await.is_err()
        {
            tracing::warn!("like worker did not stop in time; its batch stays pending and will be replayed");
        }
        if let Some(views) = views
            && tokio::time::timeout(WORKER_STOP_GRACE, views).await.is_err()
        {
            tracing::warn!("view aggregator did not stop in time; its records stay pending and will be replayed");
        }
        if let Some(fanout) = fanout
            && tokio::time::timeout(WORKER_STOP_GRACE, fanout).await.is_err()
        {
            tracing::warn!("feed fan-out did not stop in time; its posts stay in the outbox and will be pushed again");
        }
        served
    }
}

/// Starts the live relay and waits until it is subscribed, so nothing published after
/// start-up is missed.
async fn start_relay(state: &AppState) -> AppResult<tokio::task::JoinHandle<()>> {
    let (ready, subscribed) = tokio::sync::oneshot::channel();
    let relay = tokio::spawn(run_relay(
        state.settings.redis_url.clone(),
        state.keys.live_channel(),
        state.live.clone(),
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

/// A like worker with a Redis connection of its own (its blocking reads must not hold up the
/// API's multiplexed connection).
pub async fn build_worker(state: &AppState) -> AppResult<LikeWorker> {
    let redis = kv::connect(state.settings.redis_url()?, state.settings.connect_timeout, "worker").await?;
    let worker = LikeWorker::new(
        state.db.clone(),
        redis,
        state.keys.clone(),
        WorkerConfig::from_settings(&state.settings),
        state.publisher.clone(),
    );
    worker.ensure_groups().await?;
    Ok(worker)
}

/// The view aggregator on the state's database and Redis prefix (`flush_views_once` steps it).
pub fn build_view_aggregator(state: &AppState) -> ViewAggregator {
    ViewAggregator::new(
        state.db.clone(),
        state.redis.clone(),
        state.keys.clone(),
        state.settings.view_shards,
        state.settings.view_flush_interval,
    )
    .with_post_cache(state.post_cache.clone())
}

/// The feed fan-out job (`process_one_batch` steps it) with a Redis connection of its own: its
/// pipelines of thousands of pushes must not hold up the API's multiplexed connection.
pub async fn build_feed_fanout(state: &AppState) -> AppResult<FanoutJob> {
    let redis = kv::connect(state.settings.redis_url()?, state.settings.connect_timeout, "feed").await?;
    Ok(FanoutJob::new(state.db.clone(), redis, state.keys.clone(), FeedConfig::from_settings(&state.settings)))
}

/// Opens every client and assembles the shared state.
pub async fn connect_state(settings: Settings) -> AppResult<AppState> {
    let settings = Arc::new(settings);
    let mut db = db::connect(&settings).await?;
    let sql_statements = db::StatementCounter::attach(&mut db);
    let redis = kv::connect(settings.redis_url()?, settings.connect_timeout, "api").await?;
    if settings.like_mode == LikeMode::Buffered && !settings.allow_evicting_redis {
        kv::refuse_evicting_policy(&redis).await?;
    }
    let keys = Keys::new(settings.redis_key_prefix.clone(), settings.like_stream_shards);
    let tokens = TokenKeys::new(settings.jwt_secret()?)?;
    let limiter = RateLimiter::new(redis.clone(), settings.like_rate_per_minute, Duration::from_secs(60));
    let post_cache = PostCache::new(db.clone(), redis.clone(), keys.clone(), CacheConfig::from_settings(&settings));
    post_cache.load_scripts().await?;
    let feed =
        Feed::new(db.clone(), redis.clone(), keys.clone(), post_cache.clone(), FeedConfig::from_settings(&settings));
    feed.lists().load_scripts().await?;
    // Committed like counts reach cached posts through the one door every path publishes by.
    let publisher = Publisher::new(redis.clone(), keys.live_channel()).with_post_cache(post_cache.clone());
    let likes = Likes::new(
        db.clone(),
        redis.clone(),
        settings.like_mode,
        limiter,
        keys.clone(),
        settings.liked_set_ttl,
        publisher.clone(),
    );
    let views = Views::new(redis.clone(), keys.clone(), ViewConfig::from_settings(&settings));
    Ok(AppState {
        settings,
        db,
        sql_statements,
        redis,
        keys,
        tokens,
        likes,
        publisher,
        live: Hub::new(),
        views,
        post_cache,
        feed,
    })
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
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
