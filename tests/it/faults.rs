//! The promise under faults: no like lost once acknowledged (beyond Redis's persistence
//! window), none ever counted twice — when processes die, servers restart and PostgreSQL goes
//! away. Real processes, real signals, a real Redis killed and restarted, a real proxy cut.
//!
//! - The server is SIGKILLed in the middle of a like storm (Redis lives): after a restart the
//!   worker drains, every acknowledged like is a row, every counter equals its rows.
//! - Server and Redis (AOF, `appendfsync everysec`) are SIGKILLed together while nothing has
//!   been applied yet (the test holds the worker's leases, the worst case: every acknowledged
//!   like lives only in Redis): what is lost is measured against the time before the kill.
//!   The same without AOF loses every one of them, which shows the measurement sees loss.
//! - Redis restarts empty: liked-sets rewarm, consumer groups are recreated, the live relay
//!   resubscribes, all by themselves; `check` passes after `reconcile`.
//! - PostgreSQL is unreachable for 30 s: reads fail with UNAVAILABLE and change nothing; likes
//!   keep being accepted from users whose liked-set is loaded (a cold set needs PostgreSQL:
//!   UNAVAILABLE); everything buffered waits in Redis and the worker drains it after, refusing
//!   the like of a user who had left the course before the outage (membership fence).
//!
//! The storms run in the `fault-storms` test group (one at a time, see .config/nextest.toml):
//! each wants the machine's cores to itself.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use course_forum::testing::config::LikeMode;
use course_forum::testing::kv::Redis;
use course_forum::testing::kv::keys::Keys;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use sea_orm::{DbBackend, FromQueryResult, Statement};
use serde_json::{Value, json};

use crate::common::likes::{Target, rows_and_counter};
use crate::common::procs::{PrivateRedis, ServeProcess};
use crate::common::proxy::TcpProxy;
use crate::common::ws::GqlSocket;
use crate::common::{self, TestApp, World, error_code, gid};

// ---------------------------------------------------------------------------------------------
// A crowd and its storm
// ---------------------------------------------------------------------------------------------

/// Many members of one course, many posts, and a token each.
struct Crowd {
    posts: Vec<i64>,
    users: Vec<(i64, String)>,
}

#[derive(FromQueryResult)]
struct Id {
    id: i64,
}

async fn ids(app: &TestApp, sql: &str, values: Vec<sea_orm::Value>) -> Vec<i64> {
    Id::find_by_statement(Statement::from_sql_and_values(DbBackend::Postgres, sql, values))
        .all(&app.db)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .into_iter()
        .map(|row| row.id)
        .collect()
}

async fn crowd(app: &TestApp, users: i64, posts: i64) -> Crowd {
    let world = World::create(app).await;
    let post_ids = ids(
        app,
        "INSERT INTO posts (course_id, user_id, title, body) \
         SELECT $1, $2, 'storm ' || g, 'b' FROM generate_series(1, $3) g RETURNING id",
        vec![world.course.into(), world.bob.into(), posts.into()],
    )
    .await;
    let user_ids = ids(
        app,
        "INSERT INTO users (handle, display_name) SELECT 'fan' || g, 'fan' || g FROM generate_series(1, $1) g RETURNING id",
        vec![users.into()],
    )
    .await;
    ids(
        app,
        "INSERT INTO course_members (course_id, user_id, role) SELECT $1, u, 'student' FROM unnest($2::bigint[]) u \
         RETURNING user_id AS id",
        vec![world.course.into(), user_ids.clone().into()],
    )
    .await;
    Crowd { posts: post_ids, users: user_ids.into_iter().map(|id| (id, app.token(id))).collect() }
}

/// A like the server acknowledged: HTTP 200, no errors, `likedByMe` true.
#[derive(Clone, Copy, Debug)]
struct Ack {
    user: i64,
    post: i64,
    at: Instant,
}

#[derive(Default)]
struct Tally {
    acks: Vec<Ack>,
    /// Every (user, post) a request was sent for, acknowledged or not.
    attempted: HashSet<(i64, i64)>,
}

struct Storm {
    tally: Arc<Mutex<Tally>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    started: Instant,
}

impl Storm {
    /// Every user likes every post, in a shuffled order, from `concurrency` clients; a client
    /// stops at its first failure (the server or Redis is gone).
    fn start(url: String, crowd: &Crowd, concurrency: usize) -> Storm {
        let mut pairs: Vec<(i64, String, i64)> = crowd
            .users
            .iter()
            .flat_map(|(user, token)| crowd.posts.iter().map(move |post| (*user, token.clone(), *post)))
            .collect();
        pairs.shuffle(&mut rand::rngs::StdRng::seed_from_u64(7));
        let tally = Arc::new(Mutex::new(Tally::default()));
        let client = reqwest::Client::new();
        let tasks = (0..concurrency)
            .map(|task| {
                let mine: Vec<(i64, String, i64)> = pairs.iter().skip(task).step_by(concurrency).cloned().collect();
                let (tally, client, url) = (tally.clone(), client.clone(), url.clone());
                tokio::spawn(async move {
                    for (user, token, post) in mine {
                        tally.lock().expect("tally").attempted.insert((user, post));
                        let sent = client
                            .post(&url)
                            .bearer_auth(&token)
                            .json(&json!({
                                "query": "mutation($p: ID!) { likePost(postId: $p) { likedByMe } }",
                                "variables": { "p": gid("Post", post) },
                            }))
                            .timeout(Duration::from_secs(10))
                            .send()
                            .await;
                        let Ok(response) = sent else { return };
                        if response.status() != 200 {
                            return;
                        }
                        let Ok(body) = response.json::<Value>().await else { return };
                        if body.get("errors").is_some() || body["data"]["likePost"]["likedByMe"] != true {
                            return;
                        }
                        tally.lock().expect("tally").acks.push(Ack { user, post, at: Instant::now() });
                    }
                })
            })
            .collect();
        Storm { tally, tasks, started: Instant::now() }
    }

    fn acked(&self) -> usize {
        self.tally.lock().expect("tally").acks.len()
    }

    /// Waits until the storm has run at least `elapsed` and acknowledged `acks` likes; panics
    /// if it ended before (it would not be "in the middle" any more).
    async fn rage_until(&self, elapsed: Duration, acks: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.started.elapsed() < elapsed || self.acked() < acks {
            assert!(self.tasks.iter().any(|t| !t.is_finished()), "the storm ended before the kill: make it bigger");
            assert!(Instant::now() < deadline, "the storm is too slow: {} acks in 60 s", self.acked());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Waits for every client to stop (they stop at their first failure) and returns the tally.
    async fn finish(self) -> Tally {
        for task in self.tasks {
            tokio::time::timeout(Duration::from_secs(30), task).await.expect("a storm client hung").expect("join");
        }
        Arc::try_unwrap(self.tally).ok().expect("sole owner").into_inner().expect("tally")
    }
}

// ---------------------------------------------------------------------------------------------
// Verdicts
// ---------------------------------------------------------------------------------------------

#[derive(FromQueryResult)]
struct LikeRow {
    post_id: i64,
    user_id: i64,
}

/// Compares PostgreSQL with what was sent and acknowledged. Asserts that no row appeared that
/// nobody asked for and that every counter equals its rows (nothing counted twice); returns the
/// acknowledged likes that are missing.
async fn lost_likes(app: &TestApp, crowd: &Crowd, tally: &Tally) -> Vec<Ack> {
    let rows: HashSet<(i64, i64)> = LikeRow::find_by_statement(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "SELECT post_id, user_id FROM post_likes WHERE post_id = ANY($1)",
        [crowd.posts.clone().into()],
    ))
    .all(&app.db)
    .await
    .expect("rows")
    .into_iter()
    .map(|r| (r.user_id, r.post_id))
    .collect();
    let phantom: Vec<_> = rows.difference(&tally.attempted).collect();
    assert!(phantom.is_empty(), "likes nobody sent: {phantom:?}");
    let wrong = ids(
        app,
        "SELECT id FROM posts p WHERE id = ANY($1) \
         AND like_count <> (SELECT count(*) FROM post_likes l WHERE l.post_id = p.id)",
        vec![crowd.posts.clone().into()],
    )
    .await;
    assert!(wrong.is_empty(), "counters that disagree with their rows (counted twice or lost): {wrong:?}");
    tally.acks.iter().filter(|a| !rows.contains(&(a.user, a.post))).copied().collect()
}

/// Waits until every shard's stream is empty (everything applied and acknowledged).
async fn drained(redis: &Redis, keys: &Keys, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(status) = course_forum::testing::ops::streams::status(redis, keys).await
            && status.shards.iter().all(|s| s.entries == 0)
        {
            return;
        }
        assert!(Instant::now() < deadline, "the worker did not drain the streams within {within:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn check_passes(app: &TestApp) {
    let report =
        course_forum::testing::ops::check::run(&app.db, &app.state.redis, &app.state.keys, Duration::from_secs(60))
            .await
            .expect("check");
    assert_eq!(report.failed(), 0, "{report}");
}

// ---------------------------------------------------------------------------------------------
// SIGKILL in a like storm
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storm_sigkill_of_the_server_counts_no_like_twice_and_loses_none() {
    let app = TestApp::spawn_with(|s| s.like_mode = LikeMode::Buffered).await;
    // 20,000 likes: still going at the kill on a fast server (6,000 could end within the 1.5 s
    // the storm runs before it).
    let crowd = crowd(&app, 1000, 20).await;
    // Small batches: many commits, so the kill is likely to fall between a COMMIT and its ACK.
    let env = [("WORKER_LEASE_TTL", "1s"), ("LIKE_BATCH_SIZE", "20")];
    let mut serve = ServeProcess::spawn(&app, &common::redis_url(), &env);
    serve.wait_healthy(Duration::from_secs(20)).await;

    let storm = Storm::start(serve.url("/graphql"), &crowd, 16);
    storm.rage_until(Duration::from_millis(1500), 400).await;
    serve.kill();
    let killed_after = storm.started.elapsed();
    let tally = storm.finish().await;
    let applied_before = app
        .scalar_i64("SELECT count(*) AS v FROM post_likes WHERE post_id = ANY($1)", [crowd.posts.clone().into()])
        .await;
    let status = course_forum::testing::ops::streams::status(&app.state.redis, &app.state.keys).await.expect("status");
    let in_flight: u64 = status.shards.iter().map(|s| s.pending).sum();

    let mut serve = ServeProcess::spawn(&app, &common::redis_url(), &env);
    serve.wait_healthy(Duration::from_secs(20)).await;
    drained(&app.state.redis, &app.state.keys, Duration::from_secs(30)).await;
    let lost = lost_likes(&app, &crowd, &tally).await;
    eprintln!(
        "storm: {} acknowledged in {killed_after:.1?} ({} sent); SIGKILL with {} applied and {in_flight} in a batch \
         not yet acknowledged; after restart: {} lost",
        tally.acks.len(),
        tally.attempted.len(),
        applied_before,
        lost.len()
    );
    assert!(lost.is_empty(), "Redis lived, so nothing acknowledged may be lost: {lost:?}");
    assert!((applied_before as usize) < tally.acks.len(), "some likes were still waiting in Redis at the kill");
    check_passes(&app).await;
}

/// Storms a server whose worker is kept from applying anything (the test holds every lease),
/// SIGKILLs Redis and the server, restarts both, and returns the tally, the lost likes, and
/// how long before the kill the oldest lost one was acknowledged.
async fn kill_redis_and_server_mid_storm(aof: bool) -> (Tally, Vec<Ack>, Duration) {
    let mut redis = PrivateRedis::start(aof);
    let app = TestApp::spawn_with(|s| {
        s.like_mode = LikeMode::Buffered;
        s.redis_url = redis.url();
        s.redis_cluster_nodes.clear(); // its own single Redis, in either pass
    })
    .await;
    // 40,000 likes: still going after the 2.5 s before the kill, however fast the server.
    let crowd = crowd(&app, 2000, 20).await;
    let keys = app.state.keys.clone();
    let hold_leases = |redis: Redis| {
        let keys = keys.clone();
        async move {
            let mut conn = redis;
            for shard in 0..keys.shards() {
                let _: () = redis::cmd("SET")
                    .arg(keys.worker_lease(shard))
                    .arg("held-by-the-test")
                    .arg("PX")
                    .arg(120_000)
                    .query_async(&mut conn)
                    .await
                    .expect("hold lease");
            }
        }
    };
    hold_leases(app.state.redis.clone()).await;
    let env = [("WORKER_LEASE_TTL", "1s")];
    let mut serve = ServeProcess::spawn(&app, &redis.url(), &env);
    serve.wait_healthy(Duration::from_secs(20)).await;

    let storm = Storm::start(serve.url("/graphql"), &crowd, 16);
    storm.rage_until(Duration::from_millis(2500), 400).await;
    let killed = Instant::now();
    redis.kill();
    serve.kill();
    let tally = storm.finish().await;
    let applied = app
        .scalar_i64("SELECT count(*) AS v FROM post_likes WHERE post_id = ANY($1)", [crowd.posts.clone().into()])
        .await;
    assert_eq!(applied, 0, "the held leases kept every like in Redis");

    redis.restart();
    // The leases come back from the AOF too; release them so the new server's worker runs.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let mut conn = app.state.redis.clone();
        let keys: Vec<String> = (0..app.state.keys.shards()).map(|s| app.state.keys.worker_lease(s)).collect();
        if redis::cmd("DEL").arg(keys).query_async::<i64>(&mut conn).await.is_ok() {
            break;
        }
        assert!(Instant::now() < deadline, "the restarted Redis did not answer");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut serve = ServeProcess::spawn(&app, &redis.url(), &env);
    serve.wait_healthy(Duration::from_secs(20)).await;
    drained(&app.state.redis, &app.state.keys, Duration::from_secs(30)).await;
    let lost = lost_likes(&app, &crowd, &tally).await;
    let window = lost.iter().map(|a| killed.saturating_duration_since(a.at)).max().unwrap_or_default();
    let oldest = tally.acks.iter().map(|a| killed.saturating_duration_since(a.at)).max().unwrap_or_default();
    eprintln!(
        "redis {}: {} acknowledged over {oldest:.1?} before SIGKILL of Redis and the server, none applied; \
         after restart {} lost; loss window {window:?}",
        if aof { "with AOF everysec" } else { "without persistence" },
        tally.acks.len(),
        lost.len()
    );
    assert!(oldest > Duration::from_secs(2), "the storm ran longer than the window it measures");
    (tally, lost, window)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storm_sigkill_of_server_and_redis_with_aof_loses_at_most_the_fsync_window() {
    let (tally, lost, window) = kill_redis_and_server_mid_storm(true).await;
    assert!(tally.acks.len() >= 400);
    // appendfsync everysec: at most one second of writes, two when a slow disk delays the
    // fsync (Redis documents both); a killed Redis process keeps what it wrote to the OS.
    assert!(
        window <= Duration::from_secs(2),
        "lost {} likes acknowledged up to {window:?} before the kill",
        lost.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storm_sigkill_of_redis_without_persistence_loses_everything_unapplied() {
    // The control: the same measurement sees the loss when there is nothing on disk.
    let (tally, lost, _) = kill_redis_and_server_mid_storm(false).await;
    assert_eq!(lost.len(), tally.acks.len(), "every acknowledged like lived only in Redis");
}

// ---------------------------------------------------------------------------------------------
// Redis restarted empty
// ---------------------------------------------------------------------------------------------

async fn like(app: &TestApp, user: i64, post: i64) -> Value {
    app.gql(
        Some(&app.token(user)),
        "mutation($p: ID!) { likePost(postId: $p) { likeCount likedByMe } }",
        json!({ "p": gid("Post", post) }),
    )
    .await
}

/// Retries `attempt` until it answers without errors; every error meanwhile must be
/// UNAVAILABLE (Redis coming back), never INTERNAL.
async fn until_answered(what: &str, mut attempt: impl AsyncFnMut() -> Value) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let response = attempt().await;
        if response.get("errors").is_none() {
            return response["data"].clone();
        }
        assert_eq!(error_code(&response).as_deref(), Some("UNAVAILABLE"), "{what}: {response}");
        assert!(Instant::now() < deadline, "{what}: not answered within 20 s: {response}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_empty_recovers_on_its_own() {
    let mut redis = PrivateRedis::start(false);
    let app = TestApp::spawn_with(|s| {
        s.like_mode = LikeMode::Buffered;
        s.redis_url = redis.url();
        s.redis_cluster_nodes.clear(); // its own single Redis, in either pass
        s.worker_in_serve = true;
        // Far longer than the test: only the relay's resubscription can refresh a kept page.
        s.course_page_cache_ttl = Duration::from_secs(600);
    })
    .await;
    let world = World::create(&app).await;
    let post = ids(
        &app,
        "INSERT INTO posts (course_id, user_id, title, body) VALUES ($1, $2, 'before', 'b') RETURNING id",
        vec![world.course.into(), world.bob.into()],
    )
    .await[0];
    // The course page is kept in memory; a title changed behind the server's back is not seen.
    let page_title = async || {
        let page = "query($c: ID!) { course(id: $c) { posts(first: 5) { nodes { title } } } }";
        let data = app.gql_ok(Some(&app.token(world.bob)), page, json!({ "c": gid("Course", world.course) })).await;
        data["course"]["posts"]["nodes"][0]["title"].as_str().map(str::to_owned)
    };
    assert_eq!(page_title().await.as_deref(), Some("before"));
    ids(&app, "UPDATE posts SET title = 'by hand' WHERE id = $1 RETURNING id", vec![post.into()]).await;
    assert_eq!(page_title().await.as_deref(), Some("before"), "the page is served from memory");
    assert_eq!(like(&app, world.alice, post).await["data"]["likePost"]["likeCount"], 1);
    let deadline = Instant::now() + Duration::from_secs(10);
    while rows_and_counter(&app, Target::Post(post)).await != (1, 1) {
        assert!(Instant::now() < deadline, "the worker did not apply the first like");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut socket = GqlSocket::connect(app.addr, Some(&app.token(world.alice))).await.expect("connect");
    socket
        .subscribe(
            "1",
            "subscription($ids: [ID!]!) { likeCounts(ids: $ids) { likeCount } }",
            json!({ "ids": [gid("Post", post)] }),
        )
        .await;

    // Redis dies: the service says so, clearly, and is not ready.
    redis.kill();
    let response = like(&app, world.bob, post).await;
    assert_eq!(error_code(&response).as_deref(), Some("UNAVAILABLE"), "{response}");
    let ready = app.http.get(app.url("/readyz")).send().await.expect("readyz");
    assert_eq!(ready.status(), 503);
    let ready: Value = ready.json().await.expect("json");
    assert_eq!((ready["redis"]["ok"].clone(), ready["postgres"]["ok"].clone()), (json!(false), json!(true)));

    // It comes back with nothing in it.
    redis.restart_empty();
    let post_id = json!({ "p": gid("Post", post) });
    let alice = app.token(world.alice);
    let data = until_answered("likedByMe after the restart", async || {
        app.gql(Some(&alice), "query($p: ID!) { post(id: $p) { likeCount likedByMe } }", post_id.clone()).await
    })
    .await;
    assert_eq!(data["post"], json!({ "likeCount": 1, "likedByMe": true }), "the liked-set rewarmed from PostgreSQL");
    // A repeated like is recognised as one (the set rewarmed before toggling): no second count.
    let data = until_answered("a repeated like", async || like(&app, world.alice, post).await).await;
    assert_eq!(data["likePost"], json!({ "likeCount": 1, "likedByMe": true }));
    // A new like goes through a stream whose group the worker recreated, and reaches the
    // subscriber through a relay that resubscribed.
    let data = until_answered("a new like", async || like(&app, world.bob, post).await).await;
    assert_eq!(data["likePost"]["likeCount"], 2);
    let deadline = Instant::now() + Duration::from_secs(20);
    while rows_and_counter(&app, Target::Post(post)).await != (2, 2) {
        assert!(Instant::now() < deadline, "the worker did not apply likes after the restart");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The relay, resubscribed, first re-reads the watched count (1, committed before the
    // restart) and then relays the new one.
    let mut heard = Vec::new();
    while heard.last() != Some(&2) {
        let update = socket.next_data(Duration::from_secs(15)).await.expect("a live update after the restart");
        heard.push(update["likeCounts"]["likeCount"].as_i64().expect("likeCount"));
    }
    assert!(heard.windows(2).all(|w| w[0] < w[1]) && heard.len() <= 2, "in order, nothing stale: {heard:?}");
    // Changes published during the gap are lost, so the resubscribed relay dropped every page
    // kept in memory: the page is read again.
    assert_eq!(page_title().await.as_deref(), Some("by hand"));
    let ready = app.http.get(app.url("/readyz")).send().await.expect("readyz");
    assert_eq!(ready.status(), 200);

    // The documented repair, then the check: both pass.
    let run = |command: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_course-forum"))
            .arg(command)
            .env("DATABASE_URL", common::database_url(&app.database))
            .env("REDIS_URL", redis.url())
            .env("REDIS_KEY_PREFIX", &app.redis_prefix)
            .env("RUST_LOG", "error")
            .output()
            .expect("run course-forum")
    };
    let reconciled = run("reconcile");
    assert!(reconciled.status.success(), "{}", String::from_utf8_lossy(&reconciled.stderr));
    let checked = run("check");
    assert!(checked.status.success(), "{}", String::from_utf8_lossy(&checked.stdout));
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL unreachable for 30 s
// ---------------------------------------------------------------------------------------------

const OUTAGE: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_unreachable_for_30_s_reads_fail_buffered_likes_go_on_and_nothing_is_lost() {
    let proxy = TcpProxy::start("127.0.0.1:5432".parse().expect("address")).await;
    let proxy_addr = proxy.addr;
    let app = TestApp::spawn_with(|s| {
        s.like_mode = LikeMode::Buffered;
        s.database_url = s.database_url.as_ref().map(|url| url.replace("127.0.0.1:5432", &proxy_addr.to_string()));
        s.connect_timeout = Duration::from_secs(2);
    })
    .await;
    let world = World::create(&app).await;
    let post = ids(
        &app,
        "INSERT INTO posts (course_id, user_id, title, body) VALUES ($1, $2, 'outage', 'b') RETURNING id",
        vec![world.course.into(), world.bob.into()],
    )
    .await[0];
    let fans = ids(
        &app,
        "INSERT INTO users (handle, display_name) SELECT 'fan' || g, 'fan' || g FROM generate_series(1, 13) g RETURNING id",
        vec![],
    )
    .await;
    for fan in &fans {
        app.enroll(world.course, *fan, "student").await;
    }
    // Ten likes acknowledged before the outage, waiting in Redis (no worker yet).
    for fan in &fans[..10] {
        assert_eq!(like(&app, *fan, post).await["data"]["likePost"]["likedByMe"], true);
    }
    // fans[10] and the leaver read the post (their liked-sets load); fans[11] never did (cold).
    let (reader, cold, leaver) = (fans[10], fans[11], fans[12]);
    let read_liked = "query($p: ID!) { post(id: $p) { likedByMe } }";
    let post_id = json!({ "p": gid("Post", post) });
    for user in [reader, leaver] {
        app.gql_ok(Some(&app.token(user)), read_liked, post_id.clone()).await;
    }
    // The leaver leaves the course before the outage; their loaded set stays in Redis.
    ids(
        &app,
        "DELETE FROM course_members WHERE course_id = $1 AND user_id = $2 RETURNING user_id AS id",
        vec![world.course.into(), leaver.into()],
    )
    .await;
    app.memberships_settled().await;
    let entries = async || {
        let status =
            course_forum::testing::ops::streams::status(&app.state.redis, &app.state.keys).await.expect("status");
        status.shards.iter().map(|s| s.entries).sum::<u64>()
    };
    assert_eq!(entries().await, 10);

    proxy.cut();
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let worker = tokio::spawn(app.worker().await.run(stopping));
    let outage_began = Instant::now();
    let alice = app.token(world.alice);
    let read = "query($p: ID!) { post(id: $p) { title likeCount } }";
    let mut slowest = Duration::ZERO;
    let mut probes = 0;
    while outage_began.elapsed() < OUTAGE {
        let asked = Instant::now();
        let response = app.gql(Some(&alice), read, post_id.clone()).await;
        slowest = slowest.max(asked.elapsed());
        assert_eq!(error_code(&response).as_deref(), Some("UNAVAILABLE"), "a read: {response}");
        let message = response["errors"][0]["message"].as_str().unwrap_or_default();
        assert!(message.contains("database is unreachable"), "{message}");
        assert!(response["data"].is_null(), "{response}");

        // A like on a loaded set is accepted (the membership check cannot run; the worker's
        // fence will); a like that needs its set loaded from PostgreSQL is UNAVAILABLE.
        let asked = Instant::now();
        let response = like(&app, reader, post).await;
        slowest = slowest.max(asked.elapsed());
        assert!(response.get("errors").is_none(), "a like on a loaded set during the outage: {response}");
        assert_eq!(response["data"]["likePost"]["likedByMe"], true, "{response}");
        let response = like(&app, cold, post).await;
        assert_eq!(error_code(&response).as_deref(), Some("UNAVAILABLE"), "a like on a cold set: {response}");
        let response = like(&app, leaver, post).await;
        assert!(response.get("errors").is_none(), "unverifiable, accepted for the fence to judge: {response}");

        let ready = app.http.get(app.url("/readyz")).send().await.expect("readyz");
        assert_eq!(ready.status(), 503);
        let ready: Value = ready.json().await.expect("json");
        assert_eq!((ready["postgres"]["ok"].clone(), ready["redis"]["ok"].clone()), (json!(false), json!(true)));
        assert_eq!(app.http.get(app.url("/healthz")).send().await.expect("healthz").status(), 200);
        // Two likes accepted during the outage (repeats change nothing), the refused one
        // added nothing, and nothing buffered was lost.
        assert_eq!(entries().await, 12, "ten before, two during the outage");
        probes += 1;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    assert_eq!(rows_and_counter(&app, Target::Post(post)).await, (0, 0), "nothing reached PostgreSQL");
    eprintln!("postgres outage: {probes} rounds of probes over {OUTAGE:?}; slowest answer {slowest:?}");
    assert!(slowest < Duration::from_secs(5), "answers are prompt (CONNECT_TIMEOUT is 2 s): {slowest:?}");

    proxy.restore();
    let restored = Instant::now();
    let deadline = restored + Duration::from_secs(20);
    // Ten from before the outage and the reader's from during it; the leaver's is refused.
    while rows_and_counter(&app, Target::Post(post)).await != (11, 11) || entries().await != 0 {
        assert!(Instant::now() < deadline, "the worker did not drain after PostgreSQL returned");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("postgres outage: drained {:?} after PostgreSQL returned", restored.elapsed());
    let leaver_rows = app.scalar_i64("SELECT count(*) AS v FROM post_likes WHERE user_id = $1", [leaver.into()]).await;
    assert_eq!(leaver_rows, 0, "the like of a user who had left was refused by the worker");
    let mut conn = app.state.redis.clone();
    let leaver_set: bool = redis::cmd("EXISTS")
        .arg(app.state.keys.liked_set(leaver, world.course))
        .query_async(&mut conn)
        .await
        .expect("exists");
    assert!(!leaver_set, "and their liked-set was dropped");
    // Everything works again: the refused fan likes now.
    let data = until_answered("a like after the outage", async || like(&app, cold, post).await).await;
    assert_eq!(data["likePost"]["likeCount"], 12);
    let deadline = Instant::now() + Duration::from_secs(20);
    while rows_and_counter(&app, Target::Post(post)).await != (12, 12) {
        assert!(Instant::now() < deadline, "the worker did not apply the like after the outage");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = stop.send(true);
    tokio::time::timeout(Duration::from_secs(10), worker).await.expect("the worker stopped").expect("join");
    check_passes(&app).await;
}
