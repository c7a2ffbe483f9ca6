//! Requests and background jobs do not starve each other, and nothing a request runs is
//! unbounded in time: the jobs have their own pool (a request flood that holds every request
//! connection leaves the like worker its pace, and the other way round), every request
//! statement runs under STATEMENT_TIMEOUT (PostgreSQL cancels it and rolls back), and every
//! HTTP query or mutation under REQUEST_TIMEOUT.

use std::time::{Duration, Instant};

use course_forum::testing::config::LikeMode;
use sea_orm::{ConnectionTrait, DatabaseTransaction, TransactionTrait};
use serde_json::json;

use crate::common::{self, TestApp, World, error_code, gid};

const LIKE_POST: &str = "mutation($p: ID!) { likePost(postId: $p) { likedByMe } }";

/// Takes `n` connections of a pool and keeps them, each in an open transaction.
async fn hold_connections(db: &sea_orm::DatabaseConnection, n: u32) -> Vec<DatabaseTransaction> {
    let mut held = Vec::new();
    for _ in 0..n {
        let txn = db.begin().await.expect("a connection of the pool");
        txn.execute_unprepared("SELECT 1").await.expect("hold it");
        held.push(txn);
    }
    held
}

#[tokio::test]
async fn the_like_worker_keeps_its_pace_when_requests_hold_every_request_connection() {
    let app = TestApp::spawn_with(|s| {
        s.like_mode = LikeMode::Buffered;
        s.db_max_connections = 3;
        s.jobs_db_max_connections = 2;
    })
    .await;
    let world = World::create(&app).await;
    let post = app.create_post(&app.token(world.bob), world.course, "liked").await;
    // Acknowledged by Redis: memberships from memory, the liked-set loaded.
    let liked = app.gql_ok(Some(&app.token(world.alice)), LIKE_POST, json!({ "p": gid("Post", post) })).await;
    assert_eq!(liked["likePost"]["likedByMe"], true);
    let worker = app.worker().await;

    // Every request connection is busy (the membership listener holds the third).
    let held = hold_connections(&app.state.db, 2).await;
    let started = Instant::now();
    let mut applied = 0;
    for shard in 0..app.state.keys.shards() {
        applied += tokio::time::timeout(Duration::from_secs(5), worker.process_one_batch(shard))
            .await
            .expect("the worker did not wait for a request connection")
            .expect("batch")
            .acked;
    }
    assert_eq!(applied, 1, "the like was applied while requests held their whole pool");
    assert!(started.elapsed() < Duration::from_secs(2), "took {:?}", started.elapsed());
    drop(held);
    assert_eq!(app.scalar_i64("SELECT like_count::bigint AS v FROM posts WHERE id = $1", [post.into()]).await, 1);
}

#[tokio::test]
async fn requests_are_served_while_the_jobs_hold_every_job_connection() {
    // Sized so that one shared pool would be exhausted by the jobs' two connections and the
    // membership listener's one.
    let app = TestApp::spawn_with(|s| {
        s.db_max_connections = 3;
        s.jobs_db_max_connections = 2;
    })
    .await;
    let world = World::create(&app).await;
    let held = hold_connections(&app.state.jobs_db, 2).await;
    let started = Instant::now();
    let post = app.create_post(&app.token(world.alice), world.course, "while the jobs are busy").await;
    let read = app
        .gql_ok(
            Some(&app.token(world.bob)),
            "query($p: ID!) { post(id: $p) { title } }",
            json!({ "p": gid("Post", post) }),
        )
        .await;
    assert_eq!(read["post"]["title"], "while the jobs are busy");
    assert!(started.elapsed() < Duration::from_secs(2), "took {:?}", started.elapsed());
    drop(held);
}

/// A statement that waits past STATEMENT_TIMEOUT (here behind a row lock another session
/// holds) is cancelled by PostgreSQL: TIMEOUT, and nothing changed once the lock is gone.
#[tokio::test]
async fn a_statement_past_its_timeout_is_cancelled_and_changes_nothing() {
    let app = TestApp::spawn_with(|s| {
        s.statement_timeout = Duration::from_millis(300);
        s.request_timeout = Duration::from_secs(10);
    })
    .await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let post = app.create_post(&alice, world.course, "original").await;
    let lock = app.db.begin().await.expect("begin");
    lock.execute_raw(sea_orm::Statement::from_sql_and_values(
        sea_orm::DbBackend::Postgres,
        "SELECT id FROM posts WHERE id = $1 FOR UPDATE",
        [post.into()],
    ))
    .await
    .expect("lock the post");

    let started = Instant::now();
    let edit = "mutation($p: ID!) { editPost(postId: $p, title: \"edited\", body: \"b\") { title } }";
    let response = app.gql(Some(&alice), edit, json!({ "p": gid("Post", post) })).await;
    assert_eq!(error_code(&response).as_deref(), Some("TIMEOUT"), "{response}");
    assert!(started.elapsed() < Duration::from_secs(5), "cancelled after {:?}", started.elapsed());
    lock.rollback().await.expect("release");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        app.scalar_i64("SELECT count(*) AS v FROM posts WHERE id = $1 AND title = 'original'", [post.into()]).await,
        1,
        "the cancelled edit left nothing behind"
    );
    // The connection it ran on serves the next request.
    let again = app.gql(Some(&alice), edit, json!({ "p": gid("Post", post) })).await;
    assert_eq!(again["data"]["editPost"]["title"], "edited", "{again}");
}

/// A request held past REQUEST_TIMEOUT (here a post cache load held at its store) is answered
/// with TIMEOUT at the deadline instead of whenever it would have finished.
#[tokio::test]
async fn a_request_past_its_deadline_is_answered_with_timeout() {
    let app = TestApp::spawn_with(|s| {
        s.statement_timeout = Duration::from_millis(200);
        s.request_timeout = Duration::from_millis(600);
    })
    .await;
    let world = World::create(&app).await;
    let post = app.create_post(&app.token(world.alice), world.course, "slow").await;
    let held = app.state.post_cache.hooks().stores.hold().await;
    let started = Instant::now();
    let response = app
        .gql(
            Some(&app.token(world.bob)),
            "query($p: ID!) { post(id: $p) { title } }",
            json!({ "p": gid("Post", post) }),
        )
        .await;
    let took = started.elapsed();
    assert_eq!(error_code(&response).as_deref(), Some("TIMEOUT"), "{response}");
    assert!(took >= Duration::from_millis(600) && took < Duration::from_secs(5), "answered after {took:?}");
    drop(held);
}

#[tokio::test]
async fn timeouts_that_could_leave_a_statement_behind_are_refused_at_start() {
    let mut settings = common::test_settings("unused", "unused");
    settings.statement_timeout = Duration::from_secs(5);
    settings.request_timeout = Duration::from_secs(5);
    let err = settings.validate_for_serve().expect_err("REQUEST_TIMEOUT must exceed STATEMENT_TIMEOUT");
    assert!(err.to_string().contains("REQUEST_TIMEOUT must be longer than STATEMENT_TIMEOUT"), "{err}");
}

/// The per-request statement budget is a fence: a query that would run more statements than
/// REQUEST_STATEMENT_BUDGET is abandoned with STATEMENT_BUDGET_EXCEEDED, and the next request
/// has a budget of its own.
#[tokio::test]
async fn a_request_over_its_statement_budget_is_stopped_with_its_own_code() {
    let app = TestApp::spawn_with(|s| s.request_statement_budget = 3).await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let post = app.create_post(&alice, world.course, "p").await;
    // Cold: the course with the memberships, the posts page, the authors, the member count,
    // the comments: more than 3 (4 or 5). The new post's background work fills caches a moment
    // after the mutation, and may do so after the drop below: then the query fits in 3
    // statements and is served. That work runs once, so a later try is cold for certain; a
    // budget that stops nothing is served every time and fails the test.
    let heavy = "query($c: ID!) { course(id: $c) { memberCount posts(first: 5) { nodes { author { handle } \
                 comments(first: 5) { nodes { id } } } } } }";
    let mut response = json!(null);
    for _ in 0..5 {
        app.state.memberships.everything_changed();
        app.state.course_pages.clear();
        response = app.gql(Some(&alice), heavy, json!({ "c": gid("Course", world.course) })).await;
        if error_code(&response).is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(error_code(&response).as_deref(), Some("STATEMENT_BUDGET_EXCEEDED"), "{response}");
    assert!(response["errors"][0]["message"].as_str().is_some_and(|m| m.contains("more than 3")), "{response}");
    let light =
        app.gql(Some(&alice), "query($p: ID!) { post(id: $p) { title } }", json!({ "p": gid("Post", post) })).await;
    assert_eq!(light["data"]["post"]["title"], "p", "{light}");
}

/// The worst query the cost model accepts, sent in a loop by 12 clients over a request pool of
/// 3 connections, does not slow the like worker down: it applies 150 queued likes in the same
/// few batches it needs when nothing else runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_like_worker_keeps_its_pace_while_the_api_is_flooded() {
    let app = std::sync::Arc::new(
        TestApp::spawn_with(|s| {
            s.like_mode = LikeMode::Buffered;
            s.db_max_connections = 3;
            s.jobs_db_max_connections = 2;
        })
        .await,
    );
    let world = World::create(&app).await;
    let post = app.create_post(&app.token(world.bob), world.course, "hot").await;
    let users = app
        .scalar_i64(
            "WITH u AS (INSERT INTO users (handle, display_name) SELECT 'fan' || n, 'Fan ' || n \
               FROM generate_series(1, 150) n RETURNING id), \
             m AS (INSERT INTO course_members (course_id, user_id, role) SELECT $1, id, 'student' FROM u) \
             SELECT min(id) AS v FROM u",
            [world.course.into()],
        )
        .await;
    for user in users..users + 150 {
        app.gql_ok(Some(&app.token(user)), LIKE_POST, json!({ "p": gid("Post", post) })).await;
    }
    // Close to MAX_COST (about 18,300): 50 posts × 90 comments with their authors.
    let worst = "query($c: ID!) { course(id: $c) { memberCount posts(first: 50) { nodes { title author { handle } \
                 comments(first: 90) { nodes { body author { handle } } } } } } }";
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flood: Vec<_> = (0..12)
        .map(|_| {
            let (app, stop, token) = (app.clone(), stop.clone(), app.token(world.alice));
            let course = json!({ "c": gid("Course", world.course) });
            tokio::spawn(async move {
                let mut served = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let response = app.gql(Some(&token), worst, course.clone()).await;
                    assert!(response.get("errors").is_none(), "the worst accepted query: {response}");
                    served += 1;
                }
                served
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;

    let worker = app.worker().await;
    let started = Instant::now();
    let mut applied = 0;
    while applied < 150 {
        assert!(started.elapsed() < Duration::from_secs(10), "the worker fell behind: {applied} of 150 applied");
        for shard in 0..app.state.keys.shards() {
            applied += worker.process_one_batch(shard).await.expect("batch").acked;
        }
    }
    let took = started.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut served = 0;
    for client in flood {
        served += client.await.expect("flood client");
    }
    assert!(served > 0, "the flood ran");
    assert_eq!(app.scalar_i64("SELECT like_count::bigint AS v FROM posts WHERE id = $1", [post.into()]).await, 150);
    assert!(took < Duration::from_secs(8), "150 likes took {took:?} under the flood");
}
