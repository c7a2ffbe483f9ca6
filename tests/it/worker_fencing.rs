//! Fenced workers: a worker that stalled past its lease cannot commit. Taking a shard bumps its
//! epoch in PostgreSQL, and every batch transaction checks (and locks) that epoch first, so the
//! check and the commit are atomic. Buffered mode.

use std::time::Duration;

use course_forum::testing::config::LikeMode;

use crate::common::likes::{Target, drain_all, has_row, liked_by_me, rows_and_counter, toggle, unapplied};
use crate::common::{self, TestApp, World};

/// The lease key vanishes, as when its TTL runs out while its owner is stalled.
async fn lease_lapses(app: &TestApp, shard: u32) {
    let mut conn = app.state.redis.clone();
    let _: i64 = redis::cmd("DEL").arg(app.state.keys.worker_lease(shard)).query_async(&mut conn).await.expect("del");
}

async fn wait_for(gate: &course_forum::testing::hooks::Gate, passes: u64) {
    while gate.reached() < passes {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until some backend of the test database waits for a lock.
async fn someone_waits_for_a_lock(app: &TestApp) {
    app.until_a_backend("wait_event_type = 'Lock'").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stalled_past_its_lease_cannot_bring_an_unlike_back() {
    let app = TestApp::spawn_in(LikeMode::Buffered).await;
    let world = World::create(&app).await;
    let post = app.create_post(&app.token(world.bob), world.course, "p").await;
    let shard = app.state.keys.shard_of(world.alice);
    let stalled = app.worker().await;
    let successor = app.worker().await;

    toggle(&app, world.alice, Target::Post(post), true).await;
    // Worker A reads the like, then stalls (a GC pause, a starved pool) before its transaction.
    let held = stalled.hooks().before_apply.hold().await;
    let a = {
        let stalled = stalled.clone();
        tokio::spawn(async move { stalled.process_one_batch(shard).await })
    };
    wait_for(&stalled.hooks().before_apply, 1).await;
    lease_lapses(&app, shard).await;

    // B takes the shard, replays A's unacknowledged like, then applies the user's unlike.
    let took = successor.process_one_batch(shard).await.expect("B's first step");
    assert!(took.leader && took.read == 1, "B took the shard and claimed the like: {took:?}");
    assert!(has_row(&app, world.alice, Target::Post(post)).await);
    toggle(&app, world.alice, Target::Post(post), false).await;
    successor.process_one_batch(shard).await.expect("B applies the unlike");
    assert!(!has_row(&app, world.alice, Target::Post(post)).await);

    // A wakes up and tries to commit the like it read long ago.
    drop(held);
    let report = a.await.expect("A's task").expect("A's step");
    assert!(!report.leader, "A learned it lost the shard: {report:?}");
    assert_eq!(report.acked, 0);
    assert!(!has_row(&app, world.alice, Target::Post(post)).await, "no zombie like");
    assert_eq!(rows_and_counter(&app, Target::Post(post)).await, (0, 0));
    assert!(!liked_by_me(&app, world.alice, post).await);
    // A's next step finds the shard elsewhere; B has nothing left.
    assert!(!stalled.process_one_batch(shard).await.expect("A again").leader);
    drain_all(&app, &successor).await;
    assert_eq!(unapplied(&app).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taker_waits_for_the_batch_in_flight_instead_of_overtaking_it() {
    let app = TestApp::spawn_in(LikeMode::Buffered).await;
    let world = World::create(&app).await;
    let post = app.create_post(&app.token(world.bob), world.course, "p").await;
    let shard = app.state.keys.shard_of(world.alice);
    let slow = app.worker().await;
    let taker = app.worker().await;

    toggle(&app, world.alice, Target::Post(post), true).await;
    // A stalls inside its transaction, the epoch row locked, after writing the like.
    let held = slow.hooks().before_commit.hold().await;
    let a = {
        let slow = slow.clone();
        tokio::spawn(async move { slow.process_one_batch(shard).await })
    };
    wait_for(&slow.hooks().before_commit, 1).await;
    lease_lapses(&app, shard).await;
    toggle(&app, world.alice, Target::Post(post), false).await;
    // B takes the lease in Redis, and its epoch bump waits for A's transaction.
    let b = {
        let taker = taker.clone();
        tokio::spawn(async move { taker.drain().await })
    };
    someone_waits_for_a_lock(&app).await;
    assert!(!b.is_finished(), "B cannot apply anything while A's batch is in flight");
    drop(held);
    let a_report = a.await.expect("A's task").expect("A's step");
    assert!(a_report.leader && a_report.acked == 1, "A's batch was still its own and committed: {a_report:?}");
    b.await.expect("B's task").expect("B's drain");
    // Like then unlike, in that order: the unlike is the last action.
    assert!(!has_row(&app, world.alice, Target::Post(post)).await);
    assert_eq!(rows_and_counter(&app, Target::Post(post)).await, (0, 0));
    drain_all(&app, &taker).await;
}

/// A worker that renewed its lease and then stalled before reading must not take new entries
/// into its pending list after another worker took the shard over (they would wait there, and
/// apply at the next takeover, after newer events).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_lost_its_lease_before_reading_reads_nothing() {
    let app = TestApp::spawn_in(LikeMode::Buffered).await;
    let world = World::create(&app).await;
    let post = app.create_post(&app.token(world.bob), world.course, "p").await;
    let shard = app.state.keys.shard_of(world.alice);
    let stalled = app.worker().await;
    let successor = app.worker().await;

    // A holds the shard, then stalls between renewing its lease and reading.
    assert!(stalled.process_one_batch(shard).await.expect("A's first step").leader);
    let held = stalled.hooks().before_read.hold().await;
    let a = {
        let stalled = stalled.clone();
        tokio::spawn(async move { stalled.process_one_batch(shard).await })
    };
    wait_for(&stalled.hooks().before_read, 2).await;
    lease_lapses(&app, shard).await;
    assert!(successor.process_one_batch(shard).await.expect("B takes the shard").leader);

    toggle(&app, world.alice, Target::Post(post), true).await;
    drop(held);
    let report = a.await.expect("A's task").expect("A's step");
    assert!(!report.leader && report.read == 0, "A read nothing: {report:?}");

    toggle(&app, world.alice, Target::Post(post), false).await;
    drain_all(&app, &successor).await;
    assert_eq!(common::likes::pending_entries(&app).await, 0, "no entry is stranded in A's pending list");
    assert!(!has_row(&app, world.alice, Target::Post(post)).await, "the unlike, the last action, won");
    assert_eq!(rows_and_counter(&app, Target::Post(post)).await, (0, 0));
}
