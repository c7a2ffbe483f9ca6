//! A liked-set reloaded while events of its (user, course) are still in the stream shows the
//! rows PLUS the pending events, whatever dropped it: `reset-like-cache`, TTL expiry, a refused
//! event, a worker that crashed before acknowledging. The user's last action always wins.
//! Buffered mode, the default users get.

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use course_forum::testing::config::LikeMode;
use course_forum::testing::worker::LikeWorker;
use serde_json::json;

use crate::common::likes::{Target, drain_all, has_row, liked_by_me, rows_and_counter, run_crashing_worker, toggle};
use crate::common::{TestApp, World, gid};

async fn buffered(batch: usize) -> TestApp {
    TestApp::spawn_with(|s| {
        s.like_mode = LikeMode::Buffered;
        s.like_batch_size = batch;
    })
    .await
}

/// The user's set for the course is gone, as after any drop.
async fn drop_every_set(app: &TestApp) {
    app.state.likes.liked_sets().drop_all().await.expect("drop sets");
}

/// The sequence: like (applied), unlike (pending), the set dropped, like again.
async fn like_applied_then_unlike_pending(app: &TestApp) -> (World, i64, LikeWorker) {
    let world = World::create(app).await;
    let post = app.create_post(&app.token(world.bob), world.course, "p").await;
    let worker = app.worker().await;
    toggle(app, world.alice, Target::Post(post), true).await;
    worker.drain().await.expect("drain");
    assert!(has_row(app, world.alice, Target::Post(post)).await);
    toggle(app, world.alice, Target::Post(post), false).await;
    (world, post, worker)
}

#[tokio::test]
async fn a_second_like_after_reset_like_cache_beats_the_pending_unlike() {
    let app = buffered(500).await;
    let (world, post, worker) = like_applied_then_unlike_pending(&app).await;
    drop_every_set(&app).await;
    assert!(!liked_by_me(&app, world.alice, post).await, "the reload shows the pending unlike");
    toggle(&app, world.alice, Target::Post(post), true).await;
    assert!(liked_by_me(&app, world.alice, post).await);
    drain_all(&app, &worker).await;
    assert!(has_row(&app, world.alice, Target::Post(post)).await, "the last action, a like, won");
    assert!(liked_by_me(&app, world.alice, post).await);
    assert_eq!(rows_and_counter(&app, Target::Post(post)).await, (1, 1));
}

#[tokio::test]
async fn the_same_after_the_set_expired() {
    let app = buffered(500).await;
    let (world, post, worker) = like_applied_then_unlike_pending(&app).await;
    let mut conn = app.state.redis.clone();
    let set = app.state.keys.liked_set(world.alice, world.course);
    let _: i64 = redis::cmd("PEXPIRE").arg(&set).arg(1).query_async(&mut conn).await.expect("pexpire");
    tokio::time::sleep(Duration::from_millis(20)).await;
    toggle(&app, world.alice, Target::Post(post), true).await;
    drain_all(&app, &worker).await;
    assert!(has_row(&app, world.alice, Target::Post(post)).await);
    assert!(liked_by_me(&app, world.alice, post).await);
    assert_eq!(rows_and_counter(&app, Target::Post(post)).await, (1, 1));
}

#[tokio::test]
async fn a_pending_unlike_that_is_the_last_action_stays_an_unlike_after_a_reload() {
    let app = buffered(500).await;
    let (world, post, worker) = like_applied_then_unlike_pending(&app).await;
    drop_every_set(&app).await;
    // A repeat unlike is a no-op, and the reload must not revive the like to make it one.
    toggle(&app, world.alice, Target::Post(post), false).await;
    assert!(!liked_by_me(&app, world.alice, post).await);
    drain_all(&app, &worker).await;
    assert!(!has_row(&app, world.alice, Target::Post(post)).await);
    assert_eq!(rows_and_counter(&app, Target::Post(post)).await, (0, 0));
}

#[tokio::test]
async fn a_refused_event_drops_the_set_and_the_pending_unlike_still_counts() {
    // One event per batch, so the refused like applies (and drops the set) while the unlike
    // behind it still waits.
    let app = buffered(1).await;
    let world = World::create(&app).await;
    let token = app.token(world.bob);
    let kept = app.create_post(&token, world.course, "kept").await;
    let doomed = app.create_post(&token, world.course, "doomed").await;
    let worker = app.worker().await;
    toggle(&app, world.alice, Target::Post(kept), true).await;
    worker.drain().await.expect("drain");
    toggle(&app, world.alice, Target::Post(doomed), true).await;
    app.gql_ok(
        Some(&token),
        "mutation($p: ID!) { deletePost(postId: $p) { deletedId } }",
        json!({ "p": gid("Post", doomed) }),
    )
    .await;
    toggle(&app, world.alice, Target::Post(kept), false).await;
    let shard = app.state.keys.shard_of(world.alice);
    let report = worker.process_one_batch(shard).await.expect("step");
    assert_eq!(report.refused, 1, "the like of the deleted post is refused");
    let mut conn = app.state.redis.clone();
    let exists: i64 = redis::cmd("EXISTS")
        .arg(app.state.keys.liked_set(world.alice, world.course))
        .query_async(&mut conn)
        .await
        .expect("exists");
    assert_eq!(exists, 0, "the refused event's set was dropped");
    toggle(&app, world.alice, Target::Post(kept), true).await;
    drain_all(&app, &worker).await;
    assert!(has_row(&app, world.alice, Target::Post(kept)).await, "the last action, a like, won");
    assert!(liked_by_me(&app, world.alice, kept).await);
    assert_eq!(rows_and_counter(&app, Target::Post(kept)).await, (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_before_commit_leaves_the_unlike_pending_and_a_reload_sees_it() {
    let app = buffered(500).await;
    let (world, post, worker) = like_applied_then_unlike_pending(&app).await;
    worker.release_leases().await;
    let status = run_crashing_worker(&app, "abort-before-commit");
    assert_eq!(status.signal(), Some(6), "the worker died by SIGABRT: {status:?}");
    assert!(has_row(&app, world.alice, Target::Post(post)).await, "the unlike did not commit");
    drop_every_set(&app).await;
    toggle(&app, world.alice, Target::Post(post), true).await;
    // The replay applies the unlike, then the like: the like wins.
    drain_all(&app, &worker).await;
    assert!(has_row(&app, world.alice, Target::Post(post)).await);
    assert!(liked_by_me(&app, world.alice, post).await);
    assert_eq!(rows_and_counter(&app, Target::Post(post)).await, (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_after_commit_replays_and_a_reload_agrees() {
    let app = buffered(500).await;
    let (world, post, worker) = like_applied_then_unlike_pending(&app).await;
    worker.release_leases().await;
    let status = run_crashing_worker(&app, "abort-after-commit");
    assert_eq!(status.signal(), Some(6), "the worker died by SIGABRT: {status:?}");
    assert!(!has_row(&app, world.alice, Target::Post(post)).await, "the unlike committed, unacknowledged");
    drop_every_set(&app).await;
    assert!(!liked_by_me(&app, world.alice, post).await);
    toggle(&app, world.alice, Target::Post(post), true).await;
    drain_all(&app, &worker).await;
    assert!(has_row(&app, world.alice, Target::Post(post)).await);
    assert_eq!(rows_and_counter(&app, Target::Post(post)).await, (1, 1));
}

/// The load race: a reader loads the set from rows read BEFORE the worker applied (and
/// retired) a like, and stores them AFTER. Without the load generation the set would miss the
/// like, and the user's next unlike would change nothing and be lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_whose_rows_predate_an_apply_reads_them_again() {
    let app = buffered(500).await;
    let world = World::create(&app).await;
    let post = app.create_post(&app.token(world.bob), world.course, "p").await;
    let worker = app.worker().await;
    toggle(&app, world.alice, Target::Post(post), true).await;
    drop_every_set(&app).await;

    let gate = app.state.likes.liked_sets().rows_read.clone();
    let held = gate.hold().await;
    let reader = {
        let sets = app.state.likes.liked_sets().clone();
        let (user, course) = (world.alice, world.course);
        tokio::spawn(async move { sets.warm(user, course).await })
    };
    while gate.reached() < 1 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The reader holds rows without the like (and sees its pending record, which the apply
    // now retires).
    worker.drain().await.expect("drain");
    assert!(has_row(&app, world.alice, Target::Post(post)).await);
    drop(held);
    reader.await.expect("reader task").expect("warm");
    assert!(gate.reached() >= 2, "the load read the rows again");
    assert!(liked_by_me(&app, world.alice, post).await, "the set has the applied like");
    toggle(&app, world.alice, Target::Post(post), false).await;
    drain_all(&app, &worker).await;
    assert!(!has_row(&app, world.alice, Target::Post(post)).await, "the unlike was not swallowed");
    assert_eq!(rows_and_counter(&app, Target::Post(post)).await, (0, 0));
}

#[tokio::test]
async fn pending_records_are_retired_as_events_apply_or_die() {
    let app = buffered(500).await;
    let (world, post, worker) = like_applied_then_unlike_pending(&app).await;
    let mut conn = app.state.redis.clone();
    let pending = app.state.keys.liked_pending(world.alice, world.course);
    let record: Option<String> =
        redis::cmd("HGET").arg(&pending).arg(format!("p:{post}")).query_async(&mut conn).await.expect("hget");
    assert!(record.as_deref().is_some_and(|r| r.starts_with("- ")), "the unlike is recorded: {record:?}");
    drain_all(&app, &worker).await;
    let left: i64 = redis::cmd("EXISTS").arg(&pending).query_async(&mut conn).await.expect("exists");
    assert_eq!(left, 0, "applied: no record left behind");
}

/// `course-forum check` compares loaded sets with PostgreSQL once nothing is pending.
#[tokio::test]
async fn check_reports_a_liked_set_that_disagrees_with_nothing_pending() {
    let app = buffered(500).await;
    let world = World::create(&app).await;
    let post = app.create_post(&app.token(world.bob), world.course, "p").await;
    let worker = app.worker().await;
    let check = || async {
        course_forum::testing::ops::check::run(&app.db, &app.state.redis, &app.state.keys, Duration::from_secs(3600))
            .await
            .expect("check")
    };
    let liked_sets_finding = |report: &course_forum::testing::ops::check::Report| {
        report.findings.iter().find(|f| f.name == "liked-sets").cloned().expect("a liked-sets finding")
    };
    toggle(&app, world.alice, Target::Post(post), true).await;
    // Pending: the set shows the like before PostgreSQL does, and that is right.
    let pending = check().await;
    assert!(liked_sets_finding(&pending).ok, "{pending}");
    assert!(liked_sets_finding(&pending).detail.contains("1 with pending events skipped"), "{pending}");
    drain_all(&app, &worker).await;
    assert!(liked_sets_finding(&check().await).ok);

    // A row removed behind the service's back (a manual repair gone wrong): the set lies.
    app.scalar_i64(
        "WITH gone AS (DELETE FROM post_likes WHERE post_id = $1 RETURNING 1) SELECT count(*) AS v FROM gone",
        [post.into()],
    )
    .await;
    let report = check().await;
    let finding = liked_sets_finding(&report);
    assert!(!finding.ok, "{report}");
    assert!(finding.detail.contains(&format!("user {} course {}", world.alice, world.course)), "{report}");
    assert!(finding.detail.contains(&format!("p:{post}")), "{report}");
    drop_every_set(&app).await;
    assert!(liked_sets_finding(&check().await).ok, "after reset-like-cache the sets reload the truth");
}

/// An entry deleted from the stream by hand leaves its pending record an orphan: `check`
/// names it, and `reset-like-cache` removes it (and only it).
#[tokio::test]
async fn check_names_orphaned_pending_records_and_reset_removes_only_them() {
    let app = buffered(500).await;
    let world = World::create(&app).await;
    let token = app.token(world.bob);
    let orphaned = app.create_post(&token, world.course, "orphaned").await;
    let kept = app.create_post(&token, world.course, "kept").await;
    toggle(&app, world.alice, Target::Post(orphaned), true).await;
    toggle(&app, world.alice, Target::Post(kept), true).await;
    let mut conn = app.state.redis.clone();
    let pending = app.state.keys.liked_pending(world.alice, world.course);
    let record: String =
        redis::cmd("HGET").arg(&pending).arg(format!("p:{orphaned}")).query_async(&mut conn).await.expect("hget");
    let entry = record.split_once(' ').map(|(_, id)| id.to_owned()).expect("`+ <id>`");
    let stream = app.state.keys.like_stream(app.state.keys.shard_of(world.alice));
    let _: i64 = redis::cmd("XDEL").arg(&stream).arg(&entry).query_async(&mut conn).await.expect("xdel");

    let report =
        course_forum::testing::ops::check::run(&app.db, &app.state.redis, &app.state.keys, Duration::from_secs(3600))
            .await
            .expect("check");
    let finding = report.findings.iter().find(|f| f.name == "pending records").expect("an orphan finding");
    assert!(!finding.ok && finding.detail.contains(&format!("p:{orphaned}")), "{report}");
    assert!(!finding.detail.contains(&format!("p:{kept}")), "{report}");

    let removed = course_forum::testing::ops::liked_sets::pending_orphans(&app.state.redis, &app.state.keys, true)
        .await
        .expect("remove orphans");
    assert_eq!(removed, vec![(world.alice, world.course, format!("p:{orphaned}"))]);
    drop_every_set(&app).await;
    assert!(!liked_by_me(&app, world.alice, orphaned).await, "nothing will apply the orphaned like");
    assert!(liked_by_me(&app, world.alice, kept).await, "the live record still overlays");
    let worker = app.worker().await;
    drain_all(&app, &worker).await;
    assert!(has_row(&app, world.alice, Target::Post(kept)).await);
    let report =
        course_forum::testing::ops::check::run(&app.db, &app.state.redis, &app.state.keys, Duration::from_secs(3600))
            .await
            .expect("check");
    assert_eq!(report.failed(), 0, "{report}");
}
