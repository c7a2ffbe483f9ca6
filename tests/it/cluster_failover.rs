//! The product on a Redis Cluster of its own (`common::cluster::PrivateCluster`: 3 masters,
//! 3 replicas, real redis-server processes) while processes die:
//!
//! - a master is SIGKILLed during a like storm, three times (once the live channel's): the API
//!   answers UNAVAILABLE (never INTERNAL) while the slot has no master, the client and the live
//!   relay follow the promoted replica, nothing is counted twice, acknowledged likes lost stay
//!   within the replication window, and a subscriber hears the final count;
//! - three API instances and two `course-forum worker` processes share the cluster, and the
//!   worker holding the shard leases is SIGKILLed mid-storm: the other takes every shard within
//!   the lease TTL and every count ends exact.
//!
//! Each prints what it measured (`--nocapture` shows it).

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use course_forum::testing::config::{LikeMode, Settings};
use serde_json::json;
use tokio::sync::Mutex;

use crate::common::cluster::{NODE_TIMEOUT, PrivateCluster};
use crate::common::likes::{Target, rows_and_counter};
use crate::common::procs::ServeProcess;
use crate::common::ws::GqlSocket;
use crate::common::{TestApp, World, error_code, gid};

const LIKE: &str = "mutation($p: ID!) { likePost(postId: $p) { id } }";

/// Settings of an instance on the cluster `nodes`: buffered likes, no like rate limit (a storm
/// is many users, each liking once), the worker in the server or not.
fn on_cluster(nodes: &[String], worker_in_serve: bool) -> impl FnOnce(&mut Settings) {
    let nodes = nodes.to_vec();
    move |s| {
        s.redis_cluster_nodes = nodes;
        s.like_mode = LikeMode::Buffered;
        s.worker_in_serve = worker_in_serve;
        s.like_rate_per_minute = 0;
    }
}

/// `count` new students of `course`, by SQL; returns their ids.
async fn students(app: &TestApp, course: i64, count: i64, tag: &str) -> Vec<i64> {
    let first = app
        .scalar_i64(
            "WITH u AS (INSERT INTO users (handle, display_name) \
                        SELECT $1 || g, $1 || g FROM generate_series(1, $2::bigint) g RETURNING id), \
                  m AS (INSERT INTO course_members (course_id, user_id, role) SELECT $3, id, 'student' FROM u) \
             SELECT min(id) AS v FROM u",
            [tag.into(), count.into(), course.into()],
        )
        .await;
    app.memberships_settled().await;
    (first..first + count).collect()
}

async fn likers_in_database(app: &TestApp, post: i64) -> HashSet<i64> {
    use sea_orm::{ConnectionTrait, DbBackend, Statement};
    let rows = app
        .db
        .query_all_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT user_id FROM post_likes WHERE post_id = $1",
            [post.into()],
        ))
        .await
        .expect("likers");
    rows.iter().map(|r| r.try_get::<i64>("", "user_id").expect("user_id")).collect()
}

/// What one like request came back with.
#[derive(Debug)]
struct Outcome {
    user: i64,
    /// The error code, or None when the like was acknowledged.
    code: Option<String>,
    finished: Instant,
}

/// Every user likes `post` once, through `addrs` in turn, from 8 concurrent tasks; `sent`
/// counts finished requests.
async fn storm(
    app: Arc<TestApp>,
    addrs: Vec<SocketAddr>,
    post: i64,
    users: Vec<i64>,
    sent: Arc<AtomicUsize>,
) -> Vec<Outcome> {
    let queue = Arc::new(Mutex::new(users));
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (app, addrs, queue, outcomes, sent) =
            (app.clone(), addrs.clone(), queue.clone(), outcomes.clone(), sent.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let Some(user) = queue.lock().await.pop() else { break };
                let addr = addrs[user as usize % addrs.len()];
                let response = app.gql_at(addr, Some(&app.token(user)), LIKE, json!({ "p": gid("Post", post) })).await;
                let outcome = Outcome { user, code: error_code(&response), finished: Instant::now() };
                outcomes.lock().await.push(outcome);
                sent.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    for task in tasks {
        task.await.expect("storm task");
    }
    std::mem::take(&mut *outcomes.lock().await)
}

/// Waits until the post's like rows stop changing (the worker drained what it can).
async fn settled_rows(app: &TestApp, post: i64, expected: usize) -> (i64, i64) {
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut last = (-1, -1);
    let mut stable_since = Instant::now();
    loop {
        let now = rows_and_counter(app, Target::Post(post)).await;
        if now != last {
            last = now;
            stable_since = Instant::now();
        }
        let done = now.0 as usize >= expected || stable_since.elapsed() > Duration::from_secs(4);
        if done || Instant::now() > deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_master_killed_during_a_like_storm_loses_only_the_replication_window_and_counts_nothing_twice() {
    const USERS: i64 = 600;
    const KILLS: usize = 3;
    let mut cluster = PrivateCluster::start();
    let nodes = cluster.urls();
    let app = Arc::new(TestApp::spawn_with(on_cluster(&nodes, true)).await);
    let world = World::create(&app).await;
    let users = students(&app, world.course, USERS, "storm").await;
    let mut report = Vec::new();
    for round in 0..KILLS {
        let post = app.create_post(&app.token(world.bob), world.course, &format!("hot {round}")).await;
        // Round 0 kills the master of the live channel's slot (the relay must follow the
        // promoted replica); the others, the master of a like-stream shard, which every like of
        // that shard's users goes through.
        let victim = match round {
            0 => app.state.keys.live_channel(),
            _ => app.state.keys.like_stream(round as u32 % app.state.keys.shards()),
        };
        let master = cluster.master_of(&victim).expect("a master for the key");
        let mut watcher = GqlSocket::connect(app.addr, Some(&app.token(world.alice))).await.expect("connect");
        watcher
            .subscribe(
                "1",
                "subscription($ids: [ID!]!) { likeCounts(ids: $ids) { likeCount } }",
                json!({ "ids": [gid("Post", post)] }),
            )
            .await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let sent = Arc::new(AtomicUsize::new(0));
        let storming = tokio::spawn(storm(app.clone(), vec![app.addr], post, users.clone(), sent.clone()));
        while sent.load(Ordering::SeqCst) < USERS as usize / 3 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        cluster.kill(master);
        let killed_at = Instant::now();
        let takeover =
            tokio::task::block_in_place(|| cluster.wait_for_new_master(&victim, master, Duration::from_secs(30)));
        let outcomes = storming.await.expect("storm");

        let acked: HashSet<i64> = outcomes.iter().filter(|o| o.code.is_none()).map(|o| o.user).collect();
        let codes: HashSet<&str> = outcomes.iter().filter_map(|o| o.code.as_deref()).collect();
        assert!(
            codes.iter().all(|c| *c == "UNAVAILABLE"),
            "round {round}: only UNAVAILABLE while the slot had no master: {codes:?}"
        );
        let (rows, counter) = settled_rows(&app, post, acked.len()).await;
        let in_db = likers_in_database(&app, post).await;
        assert_eq!(rows, counter, "round {round}: the counter equals the like rows (nothing counted twice)");
        assert!(in_db.iter().all(|u| users.contains(u)), "round {round}: no like from nowhere");
        let lost: Vec<i64> = acked.difference(&in_db).copied().collect();
        // Redis replicates asynchronously: what the master acknowledged and had not yet sent to
        // its replica when it died is gone. The window: acknowledgements in the last second.
        let window = outcomes
            .iter()
            .filter(|o| {
                o.code.is_none()
                    && o.finished + Duration::from_secs(1) >= killed_at
                    && o.finished <= killed_at + Duration::from_millis(100)
            })
            .count();
        assert!(
            lost.len() <= window,
            "round {round}: lost {} acknowledged likes, more than the {window} of the last second",
            lost.len()
        );
        // The subscriber hears the final count, through the relay that followed the failover.
        let mut heard = -1;
        let deadline = Instant::now() + Duration::from_secs(15);
        while heard != counter && Instant::now() < deadline {
            if let Some(data) = watcher.next_data(Duration::from_secs(3)).await {
                heard = data["likeCounts"]["likeCount"].as_i64().unwrap_or(-1);
            }
        }
        assert_eq!(heard, counter, "round {round}: the live count reached the subscriber after the failover");
        let unavailable = outcomes.iter().filter(|o| o.code.is_some()).count();
        report.push(format!(
            "round {round}: killed the master :{master} of `{victim}`; replica promoted in {takeover:?}; {} acknowledged, \
             {unavailable} UNAVAILABLE, {} lost (window {window}), {rows} rows = counter {counter} = live count",
            acked.len(),
            lost.len()
        ));
        assert!(takeover <= NODE_TIMEOUT * 8, "round {round}: promotion took {takeover:?}");
        // The dead node comes back as a replica of the promoted one, so the next round's kill
        // again has a replica to promote.
        tokio::task::block_in_place(|| cluster.restart(master));
    }
    eprintln!("failover:\n  {}", report.join("\n  "));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_instances_and_two_workers_on_a_cluster_survive_the_lease_holder_dying_mid_storm() {
    const USERS: i64 = 900;
    let cluster = PrivateCluster::start();
    let nodes = cluster.urls();
    let lease_ttl = Duration::from_secs(3);
    let app = Arc::new(TestApp::spawn_with(on_cluster(&nodes, false)).await);
    let peers = [app.spawn_peer(on_cluster(&nodes, false)).await, app.spawn_peer(on_cluster(&nodes, false)).await];
    let shards = app.state.keys.shards() as i64;
    let joined = nodes.join(",");
    let env = [("REDIS_CLUSTER_NODES", joined.as_str()), ("WORKER_LEASE_TTL", "3s")];
    let epochs = || app.scalar_i64("SELECT coalesce(sum(epoch), 0)::bigint AS v FROM like_shard_epochs", []);
    let held = || app.scalar_i64("SELECT count(*) AS v FROM like_shard_epochs", []);
    // Worker A takes every shard before B starts, so A is the one holding the leases.
    let mut first = ServeProcess::spawn_worker(&app, "redis://127.0.0.1:1", &env);
    let deadline = Instant::now() + Duration::from_secs(20);
    while held().await < shards {
        assert!(Instant::now() < deadline, "worker A never took every shard");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut second = ServeProcess::spawn_worker(&app, "redis://127.0.0.1:1", &env);
    second.wait_healthy(Duration::from_secs(20)).await;
    let epochs_of_a = epochs().await;

    let world = World::create(&app).await;
    let users = students(&app, world.course, USERS, "many").await;
    let post = app.create_post(&app.token(world.bob), world.course, "hot").await;
    let addrs = vec![app.addr, peers[0].addr, peers[1].addr];
    let sent = Arc::new(AtomicUsize::new(0));
    let storming = tokio::spawn(storm(app.clone(), addrs, post, users.clone(), sent.clone()));
    while sent.load(Ordering::SeqCst) < USERS as usize / 3 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    first.kill();
    let killed_at = Instant::now();
    // Every shard's epoch moves once B takes it.
    let deadline = Instant::now() + lease_ttl * 4;
    while epochs().await < epochs_of_a + shards {
        assert!(Instant::now() < deadline, "worker B did not take every shard");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let takeover = killed_at.elapsed();
    let outcomes = storming.await.expect("storm");
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| o.code.is_some()).collect();
    assert!(failed.is_empty(), "every like was acknowledged: {failed:?}");
    let (rows, counter) = settled_rows(&app, post, USERS as usize).await;
    eprintln!(
        "lease takeover: worker A SIGKILLed mid-storm, worker B held every shard {takeover:?} later \
         (WORKER_LEASE_TTL {lease_ttl:?}); {USERS} likes through 3 instances, {rows} rows, counter {counter}"
    );
    assert_eq!((rows, counter), (USERS, USERS), "every count exact: nothing lost, nothing twice");
    assert!(
        takeover <= lease_ttl + Duration::from_secs(5),
        "takeover within the lease TTL (and a busy machine): {takeover:?}"
    );
    drop(second);
}
