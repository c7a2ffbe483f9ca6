//! The recount and the reconciliation against the writers of the same counter, step by step:
//! a worker batch, a synchronous toggle, and another instance's recount job each hold (or wait
//! for) the target's row while a recount runs. The gates (`crate::hooks::Gate`) hold a step
//! inside its transaction; the test waits until PostgreSQL shows the other step blocked on the
//! row lock (`pg_stat_activity`), then opens the gate. No sleeps decide an order.
//!
//! Before the fix the recount was one `UPDATE … FROM (SELECT count(*) …)`: its count came from
//! the statement's snapshot, taken before it waited for the row, so it wrote a count that was
//! stale by the time it got the row (or skipped a row its snapshot called right).

use std::sync::Arc;
use std::time::{Duration, Instant};

use course_forum::testing::config::LikeMode;
use course_forum::testing::hooks::Gate;
use course_forum::testing::likes::LikeTarget;
use course_forum::testing::likes::recount::{self, DirtyMarks, RecountHooks};
use sea_orm::{ConnectionTrait, TransactionTrait};
use serde_json::json;
use tokio::task::JoinHandle;

use crate::common::likes::{Target, rows_and_counter};
use crate::common::{TestApp, World, gid};

/// How long any single wait may take before the test fails instead of hanging.
const PATIENCE: Duration = Duration::from_secs(30);

async fn set_post_like(app: &TestApp, user: i64, post: i64, liked: bool) {
    let field = if liked { "likePost" } else { "unlikePost" };
    let query = format!("mutation($p: ID!) {{ {field}(postId: $p) {{ likeCount }} }}");
    app.gql_ok(Some(&app.token(user)), &query, json!({ "p": gid("Post", post) })).await;
}

/// Drifts a counter behind the rows' back (as a lost recount mark or a bug would): what the
/// reconciliation exists to repair.
async fn drift(app: &TestApp, post: i64, like_count: i32) {
    app.db
        .execute_raw(sea_orm::Statement::from_sql_and_values(
            sea_orm::DbBackend::Postgres,
            "UPDATE posts SET like_count = $2 WHERE id = $1",
            [post.into(), like_count.into()],
        ))
        .await
        .expect("drift the counter");
}

async fn dirty_marks(app: &TestApp) -> i64 {
    let mut conn = app.state.redis.clone();
    redis::cmd("ZCARD").arg(app.state.keys.recount_dirty()).query_async(&mut conn).await.expect("zcard")
}

/// Another instance's recount job on this app's database and Redis prefix, with its own hooks.
fn recount_job(app: &TestApp) -> DirtyMarks {
    DirtyMarks::new(app.state.redis.clone(), app.state.keys.clone())
}

/// Backends of this test's database waiting for a lock.
async fn lock_waiters(app: &TestApp) -> i64 {
    app.scalar_i64(
        "SELECT count(*) AS v FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
        [],
    )
    .await
}

/// Waits until a step reached `gate` (and is held there, when the gate is closed).
async fn reached(gate: &Gate, times: u64) {
    let deadline = Instant::now() + PATIENCE;
    while gate.reached() < times {
        assert!(Instant::now() < deadline, "the step never reached its gate");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until `task` is blocked on a lock in PostgreSQL (true), or has finished without
/// needing one (false).
async fn blocked_or_done<T>(app: &TestApp, task: &JoinHandle<T>) -> bool {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if lock_waiters(app).await > 0 {
            return true;
        }
        if task.is_finished() {
            return false;
        }
        assert!(Instant::now() < deadline, "the step neither blocked on a lock nor finished");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Recounts until nothing is dirty; returns how many counters the rounds changed.
async fn recount_until_clean(app: &TestApp, job: &DirtyMarks) -> usize {
    let mut changed = 0;
    loop {
        let round = job.recount_once(&app.db, 100).await.expect("recount").len();
        if round == 0 && dirty_marks(app).await == 0 {
            return changed;
        }
        changed += round;
    }
}

/// A worker batch holds the post (row inserted, counter bumped, not committed) while the
/// reconciliation recounts it. The reconciliation must wait and count the batch's row.
#[tokio::test]
async fn reconcile_waits_for_a_worker_batch_and_counts_its_rows() {
    let app = TestApp::spawn_in(LikeMode::Buffered).await;
    let world = World::create(&app).await;
    let post = app.create_post(&app.token(world.instructor), world.course, "hot").await;
    drift(&app, post, 2).await;
    set_post_like(&app, world.alice, post, true).await;
    assert_eq!(rows_and_counter(&app, Target::Post(post)).await, (0, 2), "the like waits in the stream");

    let worker = app.worker().await;
    let held = worker.hooks().before_commit.hold().await;
    let batch = tokio::spawn({
        let worker = worker.clone();
        async move { worker.drain().await }
    });
    reached(&worker.hooks().before_commit, 1).await;

    let hooks = Arc::new(RecountHooks::default());
    let reconcile = tokio::spawn({
        let (db, hooks) = (app.db.clone(), hooks.clone());
        async move { recount::reconcile_all_with(&db, 1000, &hooks).await }
    });
    assert!(blocked_or_done(&app, &reconcile).await, "the reconciliation must wait for the batch's row");
    drop(held);
    batch.await.expect("batch task").expect("batch");
    reconcile.await.expect("reconcile task").expect("reconcile");

    let (rows, counter) = rows_and_counter(&app, Target::Post(post)).await;
    assert_eq!(counter, rows, "like_count must equal the like rows after the reconciliation (rows {rows})");

    // The last unlike must apply, not break `CHECK (like_count >= 0)` and be dead-lettered.
    set_post_like(&app, world.alice, post, false).await;
    worker.drain().await.expect("drain the unlike");
    assert_eq!(worker.stats().batch_failures.load(std::sync::atomic::Ordering::Relaxed), 0, "no failed batch");
    assert_eq!(worker.stats().dead_letters.load(std::sync::atomic::Ordering::Relaxed), 0, "no dead letter");
    assert_eq!(rows_and_counter(&app, Target::Post(post)).await, (0, 0));
}

/// A synchronous toggle has inserted its row and bumped the counter, not yet committed, while
/// the reconciliation recounts the post. The reconciliation must wait and count that row.
#[tokio::test]
async fn reconcile_waits_for_a_sync_toggle_and_counts_its_row() {
    let app = TestApp::spawn_in(LikeMode::Sync).await;
    let world = World::create(&app).await;
    let post = app.create_post(&app.token(world.instructor), world.course, "sync").await;
    drift(&app, post, 2).await;

    // The toggle's one statement, inside a transaction the test commits when it chooses: the
    // moment between the statement and its autocommit.
    let toggle = app.db.begin().await.expect("begin");
    let outcome = course_forum::testing::likes::sync::set(&toggle, world.alice, LikeTarget::Post(post), true)
        .await
        .expect("sync like")
        .expect("post exists");
    assert!(outcome.changed);

    let hooks = Arc::new(RecountHooks::default());
    let reconcile = tokio::spawn({
        let (db, hooks) = (app.db.clone(), hooks.clone());
        async move { recount::reconcile_all_with(&db, 1000, &hooks).await }
    });
    assert!(blocked_or_done(&app, &reconcile).await, "the reconciliation must wait for the toggle's row");
    toggle.commit().await.expect("commit the toggle");
    reconcile.await.expect("reconcile task").expect("reconcile");

    let (rows, counter) = rows_and_counter(&app, Target::Post(post)).await;
    assert_eq!((rows, counter), (1, 1), "like_count must equal the like rows after the reconciliation");
}

/// The other order: the reconciliation holds the post (count written, not committed) while a
/// synchronous like inserts its row and waits for the post. The like's `like_count + 1` lands
/// on the recounted value, which did not include its row.
#[tokio::test]
async fn a_sync_toggle_waits_for_the_reconcile_and_adds_its_row() {
    let app = TestApp::spawn_in(LikeMode::Sync).await;
    let world = World::create(&app).await;
    let post = app.create_post(&app.token(world.instructor), world.course, "sync").await;
    drift(&app, post, 2).await;

    let hooks = Arc::new(RecountHooks::default());
    let held = hooks.before_commit.hold().await;
    let reconcile = tokio::spawn({
        let (db, hooks) = (app.db.clone(), hooks.clone());
        async move { recount::reconcile_all_with(&db, 1000, &hooks).await }
    });
    reached(&hooks.before_commit, 1).await;
    let like = tokio::spawn({
        let app_url = app.url("/graphql");
        let (http, token) = (app.http.clone(), app.token(world.alice));
        async move {
            http.post(app_url)
                .bearer_auth(token)
                .json(&json!({ "query": "mutation($p: ID!) { likePost(postId: $p) { likeCount } }",
                               "variables": { "p": gid("Post", post) } }))
                .send()
                .await
                .expect("send like")
                .json::<serde_json::Value>()
                .await
                .expect("like response")
        }
    });
    assert!(blocked_or_done(&app, &like).await, "the like must wait for the recounted post");
    drop(held);
    reconcile.await.expect("reconcile task").expect("reconcile");
    let response = like.await.expect("like task");
    assert_eq!(response["data"]["likePost"]["likeCount"], 1, "{response}");
    assert_eq!(rows_and_counter(&app, Target::Post(post)).await, (1, 1));
}

/// Two instances' recount jobs (level 2). Job A has written its count and holds the post; bob
/// likes; job B reads the dirty set and reaches the post while A holds it; alice unlikes; A
/// commits, then B. B's count must be the rows as they are when it gets the post, not as they
/// were when it started.
#[tokio::test]
async fn a_recount_waiting_for_another_instance_counts_what_committed_meanwhile() {
    let app = TestApp::spawn_in(LikeMode::Recount).await;
    let world = World::create(&app).await;
    let post = app.create_post(&app.token(world.instructor), world.course, "dirty").await;
    set_post_like(&app, world.alice, post, true).await;
    assert_eq!(rows_and_counter(&app, Target::Post(post)).await, (1, 0), "the counter waits for the recount");

    let (a, b) = (recount_job(&app), recount_job(&app));
    let held = a.hooks().before_commit.hold().await;
    let job_a = tokio::spawn({
        let (a, db) = (a.clone(), app.db.clone());
        async move { a.recount_once(&db, 100).await }
    });
    reached(&a.hooks().before_commit, 1).await;

    set_post_like(&app, world.bob, post, true).await;
    let job_b = tokio::spawn({
        let (b, db) = (b.clone(), app.db.clone());
        async move { b.recount_once(&db, 100).await }
    });
    assert!(blocked_or_done(&app, &job_b).await, "job B must wait for the post job A holds");
    set_post_like(&app, world.alice, post, false).await;
    drop(held);
    job_a.await.expect("job A task").expect("job A");
    job_b.await.expect("job B task").expect("job B");

    let (rows, counter) = rows_and_counter(&app, Target::Post(post)).await;
    assert_eq!(counter, rows, "like_count after both jobs must equal the like rows (rows {rows})");
    assert_eq!(recount_until_clean(&app, &a).await, 0, "nothing left to fix");
    assert_eq!(rows_and_counter(&app, Target::Post(post)).await, (1, 1));
}

/// Two instances' recount jobs, the other way round: job A has written its count and holds the
/// post; alice unlikes (marking the post again); job B takes that mark and recounts while A
/// holds the post, then clears the mark. Whatever order they commit in, the counter must end
/// equal to the rows; an empty dirty set with a wrong counter is a lost unlike.
#[tokio::test]
async fn a_recount_that_clears_the_newest_mark_leaves_the_counter_right() {
    let app = TestApp::spawn_in(LikeMode::Recount).await;
    let world = World::create(&app).await;
    let post = app.create_post(&app.token(world.instructor), world.course, "dirty").await;
    set_post_like(&app, world.alice, post, true).await;

    let (a, b) = (recount_job(&app), recount_job(&app));
    let held = a.hooks().before_commit.hold().await;
    let job_a = tokio::spawn({
        let (a, db) = (a.clone(), app.db.clone());
        async move { a.recount_once(&db, 100).await }
    });
    reached(&a.hooks().before_commit, 1).await;

    set_post_like(&app, world.alice, post, false).await;
    let job_b = tokio::spawn({
        let (b, db) = (b.clone(), app.db.clone());
        async move { b.recount_once(&db, 100).await }
    });
    // Job B waits for the post now; the single-statement recount did not even wait (its
    // snapshot said count 0 = like_count 0), cleared the mark, and A's 1 stayed.
    blocked_or_done(&app, &job_b).await;
    drop(held);
    job_a.await.expect("job A task").expect("job A");
    job_b.await.expect("job B task").expect("job B");

    let (rows, counter) = rows_and_counter(&app, Target::Post(post)).await;
    let dirty = dirty_marks(&app).await;
    assert_eq!(
        counter, rows,
        "like_count after both jobs must equal the like rows (rows {rows}, {dirty} target(s) still dirty)"
    );
    assert_eq!(recount_until_clean(&app, &a).await, 0, "nothing left to fix");
}
