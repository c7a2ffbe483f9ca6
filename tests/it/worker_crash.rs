//! Real crashes: a `course-forum worker` process aborts (SIGABRT) in the middle of its first
//! batch, before or after COMMIT; a second consumer takes the lapsed lease, claims the dead
//! one's pending entries, and the totals come out exact: nothing lost, nothing counted twice.

use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use course_forum::testing::config::LikeMode;
use serde_json::json;

use crate::common::likes::{Target, pending_entries, rows_and_counter, run_crashing_worker};
use crate::common::{self, TestApp, World, gid};

const LIKERS: usize = 30;

async fn likes_waiting_in_the_stream(app: &TestApp) -> i64 {
    let world = World::create(app).await;
    let post = app
        .gql_ok(
            Some(&app.token(world.bob)),
            "mutation($c: ID!) { createPost(courseId: $c, title: \"hot\", body: \"b\") { id } }",
            json!({ "c": gid("Course", world.course) }),
        )
        .await["createPost"]["id"]
        .as_str()
        .map(common::raw_id)
        .expect("post");
    for n in 0..LIKERS {
        let user = app.create_user(&format!("liker{n}")).await;
        app.enroll(world.course, user, "student").await;
        app.gql_ok(
            Some(&app.token(user)),
            "mutation($p: ID!) { likePost(postId: $p) { id } }",
            json!({ "p": gid("Post", post) }),
        )
        .await;
    }
    post
}

/// A second consumer takes over once the dead one's lease lapses and drains everything.
async fn take_over_and_drain(app: &TestApp) -> course_forum::testing::worker::LikeWorker {
    let survivor = app.worker().await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        survivor.drain().await.expect("drain");
        if pending_entries(app).await == 0 && stream_is_empty(app).await {
            return survivor;
        }
        assert!(Instant::now() < deadline, "the survivor did not take over within 20 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every consumer of every shard's group, with its pending count.
async fn group_consumers(app: &TestApp) -> Vec<(String, i64)> {
    let mut conn = app.state.redis.clone();
    let mut all = Vec::new();
    for shard in 0..app.state.keys.shards() {
        let reply: redis::streams::StreamInfoConsumersReply = redis::cmd("XINFO")
            .arg("CONSUMERS")
            .arg(app.state.keys.like_stream(shard))
            .arg(course_forum::testing::kv::keys::LIKE_GROUP)
            .query_async(&mut conn)
            .await
            .expect("xinfo consumers");
        all.extend(reply.consumers.into_iter().map(|c| (c.name, c.pending as i64)));
    }
    all
}

async fn stream_is_empty(app: &TestApp) -> bool {
    let mut conn = app.state.redis.clone();
    for shard in 0..app.state.keys.shards() {
        let n: i64 =
            redis::cmd("XLEN").arg(app.state.keys.like_stream(shard)).query_async(&mut conn).await.expect("xlen");
        if n > 0 {
            return false;
        }
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_after_commit_before_ack_replays_without_counting_twice() {
    let app = TestApp::spawn_with(|s| s.like_mode = LikeMode::Buffered).await;
    let post = likes_waiting_in_the_stream(&app).await;

    let status = run_crashing_worker(&app, "abort-after-commit");
    assert_eq!(status.signal(), Some(6), "the worker died by SIGABRT: {status:?}");
    let (committed, _) = rows_and_counter(&app, Target::Post(post)).await;
    assert!(committed > 0, "its batch committed before the crash");
    assert!(pending_entries(&app).await > 0, "…but was never acked");

    let dead: Vec<(String, i64)> = group_consumers(&app).await;
    assert!(dead.iter().any(|(_, pending)| *pending > 0), "the dead consumer holds its batch: {dead:?}");
    let survivor = take_over_and_drain(&app).await;
    assert_eq!(rows_and_counter(&app, Target::Post(post)).await, (LIKERS as i64, LIKERS as i64));
    // Taking over forgot the dead consumer once its entries were claimed: the groups keep no
    // consumer per worker that ever held a shard.
    let left = group_consumers(&app).await;
    assert!(!left.is_empty() && left.iter().all(|(name, _)| name == survivor.consumer()), "{left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_dying_mid_batch_is_taken_over_and_totals_are_exact() {
    let app = TestApp::spawn_with(|s| s.like_mode = LikeMode::Buffered).await;
    let post = likes_waiting_in_the_stream(&app).await;

    let status = run_crashing_worker(&app, "abort-before-commit");
    assert_eq!(status.signal(), Some(6), "the worker died by SIGABRT: {status:?}");
    assert_eq!(rows_and_counter(&app, Target::Post(post)).await, (0, 0), "the aborted transaction left nothing");
    assert!(pending_entries(&app).await > 0, "the dead consumer's entries are pending");

    take_over_and_drain(&app).await;
    assert_eq!(rows_and_counter(&app, Target::Post(post)).await, (LIKERS as i64, LIKERS as i64));
}
