//! Test harness: every test owns its world. `TestApp::spawn()` creates a fresh PostgreSQL
//! database (named by a UUID) and a fresh Redis key prefix, runs the migrations, and serves the
//! real application on a free loopback port. Dropping the `TestApp` stops the server and drops
//! the database and the keys, even when the test panicked.
//!
//! The helpers the suites share, one copy each: `content` (posts, comments, replies and
//! deletes through the API, as `TestApp` methods), `likes` (toggles, like rows and counters,
//! a crashing worker), `snapshot` (what a refused request must leave alone), `ws` (a websocket
//! GraphQL client), `procs` (a private `redis-server`, `course-forum serve` as a process),
//! `proxy` (a TCP proxy to cut) and `cluster` (a private Redis Cluster). Look here before
//! writing a helper in a suite.
#![allow(dead_code)]

pub mod cluster;
pub mod content;
pub mod likes;
pub mod procs;
pub mod proxy;
pub mod snapshot;
pub mod ws;

use std::sync::Arc;
use std::time::Duration;

use course_forum::testing::auth::TokenKeys;
use course_forum::testing::config::{LikeMode, LogFormat, Settings};
use course_forum::testing::startup::Application;
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, FromQueryResult, Statement, Value};
use serde_json::{Value as Json, json};
use tokio::sync::oneshot;

/// Turns `async fn $name(mode: LikeMode)` into two tests, `$name::sync` and `$name::buffered`
/// (`#[macro_use] mod common;`, first in tests/it/main.rs, brings it into every suite).
macro_rules! in_each_like_mode {
    ($name:ident) => {
        mod $name {
            #[tokio::test]
            async fn sync() {
                super::$name(course_forum::testing::config::LikeMode::Sync).await
            }

            #[tokio::test]
            async fn buffered() {
                super::$name(course_forum::testing::config::LikeMode::Buffered).await
            }
        }
    };
}

pub const JWT_SECRET: &str = "test-secret-0123456789abcdef";

/// Where the tests find PostgreSQL (an admin database to create test databases from) and Redis.
pub fn admin_database_url() -> String {
    std::env::var("TEST_DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// The Redis Cluster's seed nodes when the suite runs on a cluster (`TEST_REDIS_CLUSTER=1`, as
/// `script/test`'s cluster pass sets it): every test app then speaks to the cluster.
pub fn redis_cluster_nodes() -> Vec<String> {
    if std::env::var("TEST_REDIS_CLUSTER").as_deref() != Ok("1") {
        return Vec::new();
    }
    local_cluster_nodes()
}

/// The shared local Redis Cluster's seed nodes (`TEST_REDIS_CLUSTER_NODES`, else the ports
/// `REDIS_CLUSTER=1 script/services` uses).
pub fn local_cluster_nodes() -> Vec<String> {
    std::env::var("TEST_REDIS_CLUSTER_NODES")
        .unwrap_or_else(|_| (7000..7006).map(|port| format!("redis://127.0.0.1:{port}")).collect::<Vec<_>>().join(","))
        .split(',')
        .map(str::to_owned)
        .collect()
}

pub fn redis_url() -> String {
    std::env::var("TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

pub fn database_url(name: &str) -> String {
    let admin = admin_database_url();
    match admin.rfind('/') {
        Some(slash) => format!("{}/{name}", &admin[..slash]),
        None => panic!("TEST_DATABASE_URL must end in /<database>"),
    }
}

/// Settings for a test instance: fresh prefix, port 0, the test secret.
pub fn test_settings(database: &str, redis_prefix: &str) -> Settings {
    Settings {
        database_url: Some(database_url(database)),
        redis_url: redis_url(),
        redis_cluster_nodes: redis_cluster_nodes(),
        redis_key_prefix: redis_prefix.to_owned(),
        jwt_secret: Some(JWT_SECRET.to_owned()),
        jwks: None,
        jwt_issuer: None,
        jwt_audience: None,
        jwt_handle_claim: "preferred_username".into(),
        jwt_name_claim: "name".into(),
        allow_dev_tokens_with_jwks: false,
        bind: "127.0.0.1:0".parse().expect("loopback address"),
        like_mode: LikeMode::Sync,
        like_stream_shards: 4,
        like_batch_size: 500,
        liked_set_ttl: Duration::from_secs(3600),
        worker_lease_ttl: Duration::from_secs(10),
        worker_max_deliveries: 5,
        recount_interval: Duration::from_millis(100),
        // Tests step the worker by hand (`TestApp::worker`) unless they ask otherwise.
        worker_in_serve: false,
        membership_cache: true,
        live_coalesce: Duration::from_millis(100),
        // As served: connections on their own lower-priority runtime.
        live_threads: 2,
        live_nice: 12,
        notifications_per_user: 500,
        unread_exceptions_per_course: 1000,
        live_max_subscriptions: 50,
        ws_init_timeout: Duration::from_secs(10),
        ws_send_timeout: Duration::from_secs(10),
        // Long enough that no existing test sees a ping or is taken for a dead peer.
        ws_keepalive: Duration::from_secs(60),
        // High: tests connect from one address, some with many sockets per user.
        ws_max_per_user: 1_000,
        ws_max_per_address: 10_000,
        ws_descriptor_reserve: 512,
        ws_operations_per_minute: 10_000,
        ws_messages_per_minute: 100_000,
        // The production defaults: every live test then shows an ordinary selection fits them.
        subscription_max_cost: 500,
        subscription_event_statement_budget: 20,
        cors_allowed_origins: Vec::new(),
        allow_evicting_redis: false,
        like_rate_per_minute: 10_000,
        // The write limits: far above what any test writes in a minute; tests/it/write_limits.rs
        // lowers the one it exercises.
        post_rate_per_minute: 10_000,
        comment_rate_per_minute: 10_000,
        edit_rate_per_minute: 10_000,
        delete_rate_per_minute: 10_000,
        connect_timeout: Duration::from_secs(5),
        db_max_connections: 30,
        jobs_db_max_connections: 4,
        search_db_max_connections: 2,
        search_cache_ttl: Duration::from_secs(60),
        // Far above what any test searches in a minute; search_candidates.rs lowers it.
        search_rate_per_minute: 10_000,
        search_one_pass_posts: 300,
        search_one_pass_comments: 1_000,
        statement_timeout: Duration::from_secs(10),
        request_timeout: Duration::from_secs(30),
        request_statement_budget: 200,
        max_body_bytes: 64 * 1024,
        log_format: LogFormat::Text,
        view_min_dwell: Duration::from_secs(30),
        view_ticket_ttl: Duration::from_secs(3600),
        view_cap_per_user: 5,
        view_cap_per_ip: 50,
        view_cap_window: Duration::from_secs(3600),
        view_shards: 10,
        view_start_rate_per_minute: 100_000,
        view_max_open_tickets: 100_000,
        view_flush_interval: Duration::from_secs(10),
        trusted_proxy: None,
        playground_dir: "web-playground/dist".into(),
        demo_users_file: None,
        feed_fanout_max_members: 2_000,
        feed_timeline_cap: 800,
        feed_timeline_ttl: Duration::from_secs(3600),
        feed_fanout_interval: Duration::from_millis(100),
        feed_fanout_batch: 100,
        post_cache_ttl: Duration::from_secs(30),
        post_cache_ttl_jitter: Duration::from_secs(10),
        post_cache_missing_ttl: Duration::from_secs(5),
        course_page_cache_ttl: Duration::from_secs(30),
        // Generous: on a busy 2-core machine a lock holder may take a while to be scheduled.
        cache_lock_ttl: Duration::from_secs(10),
        shutdown_timeout: Duration::from_secs(10),
        worker_metrics_bind: None,
        persisted_query_max_bytes: 4 * 1024,
        persisted_query_registrations_per_hour: 60,
        trusted_documents: None,
        // Unset: the prefix's own random key in Redis, shared by the instances of one test.
        cursor_keys: Vec::new(),
        cache_budget_bytes: course_forum::testing::cache::budget::DEFAULT_BUDGET_BYTES,
    }
}

pub struct TestApp {
    pub addr: std::net::SocketAddr,
    pub database: String,
    pub redis_prefix: String,
    pub db: DatabaseConnection,
    pub http: reqwest::Client,
    /// The running app's shared state (its counters, its clients).
    pub state: course_forum::testing::state::AppState,
    tokens: TokenKeys,
    shutdown: Option<oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<()>>,
}

impl TestApp {
    pub async fn spawn() -> TestApp {
        Self::spawn_with(|_| {}).await
    }

    /// Spawns in a like mode (sync, recount or buffered), every other setting the tests'.
    pub async fn spawn_in(mode: LikeMode) -> TestApp {
        Self::spawn_with(|s| s.like_mode = mode).await
    }

    /// Spawns with settings adjusted by `tweak` (e.g. a low rate limit).
    pub async fn spawn_with(tweak: impl FnOnce(&mut Settings)) -> TestApp {
        if std::env::var("TEST_LOG").is_ok() {
            course_forum::testing::telemetry::init(LogFormat::Text);
        }
        // Before the test builds any HTTP client (reqwest brings no TLS provider of its own).
        course_forum::testing::tls::install_crypto_provider();
        let id = uuid::Uuid::new_v4().simple().to_string();
        let database = format!("cf_test_{id}");
        let redis_prefix = format!("cft{id}");
        let admin = course_forum::testing::db::connect_url(&admin_database_url(), Duration::from_secs(5), 1)
            .await
            .expect("PostgreSQL must be running for the tests (script/services starts it)");
        admin.execute_unprepared(&format!("CREATE DATABASE \"{database}\"")).await.expect("create test database");
        let mut settings = test_settings(&database, &redis_prefix);
        tweak(&mut settings);
        let db = course_forum::testing::db::connect_url(&database_url(&database), Duration::from_secs(5), 10)
            .await
            .expect("connect to test database");
        course_forum::testing::db::migrate(&db).await.expect("migrate test database");
        let app = Application::build(settings).await.expect("build application");
        let (addr, state, tx, server) = serve_in_background(app);
        TestApp {
            addr,
            database,
            redis_prefix,
            db,
            http: reqwest::Client::new(),
            state,
            tokens: TokenKeys::new(JWT_SECRET).expect("test secret"),
            shutdown: Some(tx),
            server: Some(server),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// A second server instance on the same database and Redis prefix (another "machine").
    pub async fn spawn_peer(&self, tweak: impl FnOnce(&mut Settings)) -> Peer {
        let mut settings = test_settings(&self.database, &self.redis_prefix);
        tweak(&mut settings);
        let app = Application::build(settings).await.expect("build peer");
        let (addr, state, tx, server) = serve_in_background(app);
        Peer { addr, state, _shutdown: tx, server }
    }

    /// A like worker on this app's database and prefix, to step by hand.
    pub async fn worker(&self) -> course_forum::testing::worker::LikeWorker {
        course_forum::testing::startup::build_worker(&self.state).await.expect("build worker")
    }

    /// A view aggregator on this app's database and prefix, to step by hand.
    pub fn view_aggregator(&self) -> course_forum::testing::views::aggregator::ViewAggregator {
        course_forum::testing::startup::build_view_aggregator(&self.state)
    }

    /// The feed fan-out job on this app's database and prefix, to step by hand.
    pub async fn feed_fanout(&self) -> course_forum::testing::feed::fanout::FanoutJob {
        course_forum::testing::startup::build_feed_fanout(&self.state).await.expect("build feed fan-out")
    }

    /// A valid bearer token for a database user id.
    pub fn token(&self, user_id: i64) -> String {
        self.tokens.mint(user_id, Duration::from_secs(3600)).expect("mint token")
    }

    /// Posts a GraphQL request and returns the whole JSON response (`data` and `errors`).
    pub async fn gql(&self, token: Option<&str>, query: &str, variables: Json) -> Json {
        self.gql_at(self.addr, token, query, variables).await
    }

    /// `gql` against another instance (a `Peer`) on the same database and prefix.
    pub async fn gql_at(&self, addr: std::net::SocketAddr, token: Option<&str>, query: &str, variables: Json) -> Json {
        let mut request =
            self.http.post(format!("http://{addr}/graphql")).json(&json!({ "query": query, "variables": variables }));
        if let Some(token) = token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        let response = request.send().await.expect("send GraphQL request");
        response.json::<Json>().await.expect("GraphQL response is JSON")
    }

    /// Like `gql`, but panics on any error and returns `data`.
    pub async fn gql_ok(&self, token: Option<&str>, query: &str, variables: Json) -> Json {
        let response = self.gql(token, query, variables).await;
        assert!(response.get("errors").is_none(), "unexpected errors: {response}");
        response["data"].clone()
    }

    /// Inserts a user directly; returns the database id.
    pub async fn create_user(&self, handle: &str) -> i64 {
        self.scalar_i64("INSERT INTO users (handle, display_name) VALUES ($1, $1) RETURNING id AS v", [handle.into()])
            .await
    }

    /// Inserts a course directly; returns the database id.
    pub async fn create_course(&self, code: &str) -> i64 {
        self.scalar_i64(
            "INSERT INTO courses (code, title) VALUES ($1, $1 || ' title') RETURNING id AS v",
            [code.into()],
        )
        .await
    }

    /// Adds a member with role `student` or `instructor`.
    pub async fn enroll(&self, course_id: i64, user_id: i64, role: &str) {
        self.db
            .execute_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                "INSERT INTO course_members (course_id, user_id, role) VALUES ($1, $2, $3)",
                [course_id.into(), user_id.into(), role.into()],
            ))
            .await
            .expect("enroll");
        self.memberships_settled().await;
    }

    /// Removes a member with a direct SQL delete (as another system would), and waits until
    /// this instance has heard of it.
    pub async fn unenroll(&self, course_id: i64, user_id: i64) {
        let gone = self
            .scalar_i64(
                "WITH gone AS (DELETE FROM course_members WHERE course_id = $1 AND user_id = $2 RETURNING 1) \
             SELECT count(*) AS v FROM gone",
                [course_id.into(), user_id.into()],
            )
            .await;
        assert_eq!(gone, 1, "user {user_id} was not a member of course {course_id}");
        self.memberships_settled().await;
    }

    /// Waits until this instance's relay has heard back every live message the instance
    /// published so far. A message drops cached pages again when its echo arrives, so a test
    /// that counts a warm read's statements waits for the echoes first. Only for an instance
    /// alone on its channel (peers' messages would count as heard).
    pub async fn own_echoes_heard(&self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let published = self.state.publisher.published();
        while self.state.live.stats.messages_received.load(std::sync::atomic::Ordering::Relaxed) < published {
            assert!(
                std::time::Instant::now() < deadline,
                "the relay did not hear {published} own messages within 10 s"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits until this instance has heard every membership change committed so far (a
    /// direct SQL write reaches its in-memory memberships through a notification).
    pub async fn memberships_settled(&self) {
        self.memberships_heard_by(&[&self.state]).await;
    }

    /// Waits until every instance in `states` has heard every membership change committed so
    /// far: sends a barrier notification after them and waits for each to hear it
    /// (notifications arrive in commit order).
    pub async fn memberships_heard_by(&self, states: &[&course_forum::testing::state::AppState]) {
        let barrier = rand::random::<u64>() >> 1;
        self.db
            .execute_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                "SELECT pg_notify('course_members_changed', 'barrier:' || $1::bigint)",
                [(barrier as i64).into()],
            ))
            .await
            .expect("send a membership barrier");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        for state in states {
            while !state.memberships.barrier_passed(barrier) {
                assert!(tokio::time::Instant::now() < deadline, "an instance did not hear the membership barrier");
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    }

    /// Waits until some backend of the test database matches `condition` (a `pg_stat_activity`
    /// predicate, e.g. `wait_event_type = 'Lock'`): no sleeping and hoping. Panics after 10 s.
    pub async fn until_a_backend(&self, condition: &str) {
        let sql =
            format!("SELECT count(*) AS v FROM pg_stat_activity WHERE datname = current_database() AND {condition}");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while self.scalar_i64(&sql, []).await == 0 {
            assert!(std::time::Instant::now() < deadline, "no backend with {condition} within 10 s");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Runs a statement returning rows with a bigint column named `id`: their ids, in order.
    pub async fn ids<I: IntoIterator<Item = Value>>(&self, sql: &str, values: I) -> Vec<i64> {
        let rows = self
            .db
            .query_all_raw(Statement::from_sql_and_values(DbBackend::Postgres, sql, values))
            .await
            .unwrap_or_else(|e| panic!("query `{sql}` failed: {e}"));
        rows.iter().map(|row| row.try_get::<i64>("", "id").expect("an id column")).collect()
    }

    /// Runs a statement returning one row with a bigint column named `v`
    /// (`SELECT count(*) AS v …`, `INSERT … RETURNING id AS v`).
    pub async fn scalar_i64<I: IntoIterator<Item = Value>>(&self, sql: &str, values: I) -> i64 {
        #[derive(FromQueryResult)]
        struct One {
            v: i64,
        }
        One::find_by_statement(Statement::from_sql_and_values(DbBackend::Postgres, sql, values))
            .one(&self.db)
            .await
            .unwrap_or_else(|e| panic!("query `{sql}` failed: {e}"))
            .unwrap_or_else(|| panic!("query `{sql}` returned no row"))
            .v
    }
}

/// Runs a built application until the returned sender fires (or is dropped).
fn serve_in_background(
    app: Application,
) -> (std::net::SocketAddr, course_forum::testing::state::AppState, oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    let addr = app.local_addr();
    let state = app.state().clone();
    let (tx, rx) = oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        let _ = app
            .run_until_stopped(async move {
                let _ = rx.await;
            })
            .await;
    });
    (addr, state, tx, server)
}

/// A peer instance; stops when dropped (the database belongs to the `TestApp`).
pub struct Peer {
    pub addr: std::net::SocketAddr,
    pub state: course_forum::testing::state::AppState,
    _shutdown: oneshot::Sender<()>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(server) = self.server.take() {
            server.abort();
        }
        let database = self.database.clone();
        let prefix = self.redis_prefix.clone();
        // Cleanup runs on its own runtime: Drop cannot await, and the test's runtime may be
        // shutting down already.
        let cleanup = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
                return;
            };
            runtime.block_on(async move {
                if let Ok(admin) =
                    course_forum::testing::db::connect_url(&admin_database_url(), Duration::from_secs(5), 1).await
                {
                    let _ =
                        admin.execute_unprepared(&format!("DROP DATABASE IF EXISTS \"{database}\" WITH (FORCE)")).await;
                }
                let nodes = redis_cluster_nodes();
                let target = if nodes.is_empty() {
                    course_forum::testing::config::RedisTarget::Node(redis_url())
                } else {
                    course_forum::testing::config::RedisTarget::Cluster(nodes)
                };
                if let Ok(redis) = course_forum::testing::kv::connect_to(&target, Duration::from_secs(5), "test").await
                {
                    let _ = course_forum::testing::kv::unlink_matching(&redis, &format!("{prefix}:*")).await;
                }
            });
        });
        let _ = cleanup.join();
    }
}

/// A small world most tests start from: one course with an instructor and two students, and
/// a second course none of them is in (with its own member).
pub struct World {
    pub course: i64,
    pub other_course: i64,
    pub instructor: i64,
    pub alice: i64,
    pub bob: i64,
    pub outsider: i64,
}

impl World {
    pub async fn create(app: &TestApp) -> World {
        let course = app.create_course("CS101").await;
        let other_course = app.create_course("BIO200").await;
        let instructor = app.create_user("prof").await;
        let alice = app.create_user("alice").await;
        let bob = app.create_user("bob").await;
        let outsider = app.create_user("outsider").await;
        app.enroll(course, instructor, "instructor").await;
        app.enroll(course, alice, "student").await;
        app.enroll(course, bob, "student").await;
        app.enroll(other_course, outsider, "student").await;
        World { course, other_course, instructor, alice, bob, outsider }
    }
}

/// Global ids as the API encodes them.
pub fn gid(kind: &str, id: i64) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{kind}:{id}"))
}

/// The value of one Prometheus sample line (`name{labels} value`) of a `/metrics` text, 0 when
/// absent.
pub fn sample(text: &str, series: &str) -> f64 {
    text.lines().find_map(|line| line.strip_prefix(series)?.trim().parse().ok()).unwrap_or(0.0)
}

/// Decodes a global id back to its database id (panics on a malformed one).
pub fn raw_id(global: &str) -> i64 {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(global).expect("base64 id");
    let text = String::from_utf8(bytes).expect("utf8 id");
    text.split_once(':').expect("Kind:id").1.parse().expect("numeric id")
}

/// Sends one GraphQL request on an HTTP connection of its own (a new client has an empty pool),
/// so it gets its own server task and transaction: racing requests really race. `'static`
/// arguments, so it can be spawned.
pub async fn send_alone(url: String, token: String, query: &'static str, variables: Json) -> Json {
    let client = reqwest::Client::builder().pool_max_idle_per_host(0).build().expect("client");
    client
        .post(url)
        .header("Authorization", format!("Bearer {token}"))
        .json(&json!({ "query": query, "variables": variables }))
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json")
}

/// Seconds since the Unix epoch, for the `iat` and `exp` claims of hand-made tokens.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs()
}

/// The `extensions.code` of the first error, if any.
pub fn error_code(response: &Json) -> Option<String> {
    response["errors"][0]["extensions"]["code"].as_str().map(str::to_owned)
}

/// Shares one app across tasks.
pub type SharedApp = Arc<TestApp>;

/// For a test that reads figures of the whole process (the one metrics recorder that `/metrics`
/// renders): makes sure the test has its process to itself, and says whether it already ran.
///
/// Under cargo-nextest every test runs in a process of its own: false, the test goes on. Under
/// plain `cargo test` every test of the binary shares one process, and another test's requests
/// and jobs would move the same counters: this runs the test alone in a new process of this
/// binary (`<test> --exact`), fails if it failed there, and returns true; the caller returns.
///
/// ```ignore
/// if common::ran_alone_elsewhere().await {
///     return;
/// }
/// ```
pub async fn ran_alone_elsewhere() -> bool {
    const ALONE: &str = "COURSE_FORUM_TEST_ALONE";
    if std::env::var("NEXTEST_EXECUTION_MODE").as_deref() == Ok("process-per-test") || std::env::var_os(ALONE).is_some()
    {
        return false;
    }
    // libtest runs each test on a thread named after it.
    let name = std::thread::current().name().map(str::to_owned).expect("a test thread named after its test");
    let exe = std::env::current_exe().expect("the test binary");
    let output = tokio::process::Command::new(exe)
        .args([name.as_str(), "--exact", "--nocapture", "--test-threads=1"])
        .env(ALONE, "1")
        .output()
        .await
        .expect("run the test in a process of its own");
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    // Shown with `--nocapture`, or when the test fails.
    eprint!("{stderr}");
    print!("{stdout}");
    assert!(output.status.success(), "{name}, alone in a process of its own, failed ({})", output.status);
    assert!(stdout.contains("1 passed"), "{name} did not run alone in a process of its own");
    true
}

/// `posts` posts by alice in `world.course`, each with 3 comments (`p<n> c<m>`), each with 2
/// replies (`p<n> c<m> r<k>`); returns the post ids, oldest first.
pub async fn threads(app: &TestApp, world: &World, posts: usize) -> Vec<i64> {
    let alice = app.token(world.alice);
    let mut ids = Vec::new();
    for p in 0..posts {
        let post = app.create_post(&alice, world.course, &format!("post {p}")).await;
        for c in 0..3 {
            let comment = gid("Comment", app.create_comment(&alice, post, &format!("p{p} c{c}")).await);
            for r in 0..2 {
                app.create_reply(&alice, &comment, &format!("p{p} c{c} r{r}")).await;
            }
        }
        ids.push(post);
    }
    ids
}
