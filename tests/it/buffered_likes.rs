//! Level 3 end to end against real PostgreSQL and Redis: the liked-sets answer, the stream
//! carries the events, and the worker (stepped by hand) turns them into exact rows and counters.

use std::time::Duration;

use course_forum::testing::config::LikeMode;
use course_forum::testing::error::AppError;
use course_forum::testing::kv::keys::LIKE_GROUP;
use course_forum::testing::like_event::LikeEvent;
use course_forum::testing::likes::apply::apply;
use course_forum::testing::likes::{LikeTarget, Membership, recount, sync};
use sea_orm::{ConnectionTrait, TransactionTrait};
use serde_json::{Value, json};

use crate::common::{self, TestApp, World, gid, raw_id};

async fn set_post_like(app: &TestApp, user: i64, post: i64, liked: bool) -> Value {
    let field = if liked { "likePost" } else { "unlikePost" };
    let query = format!("mutation($p: ID!) {{ {field}(postId: $p) {{ likeCount likedByMe }} }}");
    let data = app.gql_ok(Some(&app.token(user)), &query, json!({ "p": gid("Post", post) })).await;
    data[field].clone()
}

async fn post_rows_and_counter(app: &TestApp, post: i64) -> (i64, i64) {
    (
        app.scalar_i64("SELECT count(*) AS v FROM post_likes WHERE post_id = $1", [post.into()]).await,
        app.scalar_i64("SELECT like_count::bigint AS v FROM posts WHERE id = $1", [post.into()]).await,
    )
}

async fn stream_len(app: &TestApp) -> i64 {
    let mut conn = app.state.redis.clone();
    let mut total = 0;
    for shard in 0..app.state.keys.shards() {
        let n: i64 =
            redis::cmd("XLEN").arg(app.state.keys.like_stream(shard)).query_async(&mut conn).await.expect("xlen");
        total += n;
    }
    total
}

#[tokio::test]
async fn the_seed_story_end_to_end() {
    let app = TestApp::spawn_in(LikeMode::Buffered).await;
    let world = World::create(&app).await;
    let carol = app.create_user("carol").await;
    app.enroll(world.course, carol, "student").await;
    let worker = app.worker().await;
    let p1 = app.create_post_as(world.instructor, world.course, "announcement").await;
    let p2 = app.create_post_as(world.instructor, world.course, "second").await;
    let foreign = app.create_post_as(world.outsider, world.other_course, "not yours").await;

    // A like answers from Redis at once; the database sees it only after the worker.
    assert_eq!(set_post_like(&app, world.alice, p1, true).await, json!({ "likeCount": 1, "likedByMe": true }));
    assert_eq!(post_rows_and_counter(&app, p1).await, (0, 0), "nothing written before the worker runs");
    // A duplicate like appends no event.
    let before = stream_len(&app).await;
    assert_eq!(set_post_like(&app, world.alice, p1, true).await["likedByMe"], true);
    assert_eq!(stream_len(&app).await, before, "a repeated like appends nothing");

    // Bob's like exists only in PostgreSQL (his set is cold): likedByMe warms it, and his
    // unlike removes the database row.
    app.db
        .execute_unprepared(&format!(
            "INSERT INTO post_likes (post_id, user_id) VALUES ({p2}, {bob}); UPDATE posts SET like_count = 1 WHERE id = {p2}",
            bob = world.bob
        ))
        .await
        .expect("seed bob's like");
    let liked = app
        .gql_ok(
            Some(&app.token(world.bob)),
            "query($p: ID!) { post(id: $p) { likedByMe } }",
            json!({ "p": gid("Post", p2) }),
        )
        .await;
    assert_eq!(liked["post"]["likedByMe"], true, "the cold set was warmed from the database");
    assert_eq!(set_post_like(&app, world.bob, p2, false).await, json!({ "likeCount": 0, "likedByMe": false }));

    // Carol likes and unlikes p2 before the worker runs: one batch, no effect.
    set_post_like(&app, carol, p2, true).await;
    set_post_like(&app, carol, p2, false).await;

    // A like on another course's post pushed through this course's set (as a bug or a forged
    // call would) is dropped by the worker's JOIN.
    let likes = &app.state.likes;
    assert!(
        likes
            .liked_sets()
            .toggle(world.alice, world.course, LikeTarget::Post(foreign), true, Membership::Verified)
            .await
            .unwrap()
    );

    // A comment like.
    let comment = app
        .gql_ok(
            Some(&app.token(world.bob)),
            "mutation($p: ID!) { createComment(postId: $p, body: \"nice\") { id } }",
            json!({ "p": gid("Post", p1) }),
        )
        .await["createComment"]["id"]
        .as_str()
        .map(raw_id)
        .expect("comment id");
    app.gql_ok(
        Some(&app.token(world.alice)),
        "mutation($c: ID!) { likeComment(commentId: $c) { likeCount likedByMe } }",
        json!({ "c": gid("Comment", comment) }),
    )
    .await;

    let acked = worker.drain().await.expect("drain");
    assert!(acked >= 5, "the worker acked every event ({acked})");
    assert_eq!(stream_len(&app).await, 0, "acked entries are deleted from the stream");
    assert_eq!(post_rows_and_counter(&app, p1).await, (1, 1));
    assert_eq!(post_rows_and_counter(&app, p2).await, (0, 0));
    assert_eq!(post_rows_and_counter(&app, foreign).await, (0, 0), "foreign-course like filtered");
    let comment_rows =
        app.scalar_i64("SELECT count(*) AS v FROM comment_likes WHERE comment_id = $1", [comment.into()]).await;
    let comment_counter =
        app.scalar_i64("SELECT like_count::bigint AS v FROM comments WHERE id = $1", [comment.into()]).await;
    assert_eq!((comment_rows, comment_counter), (1, 1));
    // Replaying the same events again (as after a crash between COMMIT and ACK) changes nothing.
    assert_eq!(worker.drain().await.expect("drain again"), 0);
}

#[tokio::test]
async fn a_page_of_twenty_posts_costs_exactly_one_smismember() {
    let app = TestApp::spawn_in(LikeMode::Buffered).await;
    let world = World::create(&app).await;
    let mut posts = Vec::new();
    for n in 0..20 {
        posts.push(app.create_post_as(world.bob, world.course, &format!("p{n}")).await);
    }
    for post in posts.iter().step_by(3) {
        set_post_like(&app, world.alice, *post, true).await;
    }
    let page = "query($c: ID!) { course(id: $c) { posts(first: 20) { edges { node { id likedByMe } } } } }";
    let calls = || app.state.likes.stats().smismember_calls.load(std::sync::atomic::Ordering::Relaxed);
    let before = calls();
    let data = app.gql_ok(Some(&app.token(world.alice)), page, json!({ "c": gid("Course", world.course) })).await;
    assert_eq!(calls() - before, 1, "one SMISMEMBER for the whole page");
    let liked: Vec<i64> = data["course"]["posts"]["edges"]
        .as_array()
        .expect("edges")
        .iter()
        .filter(|e| e["node"]["likedByMe"] == true)
        .map(|e| raw_id(e["node"]["id"].as_str().expect("id")))
        .collect();
    let mut expected: Vec<i64> = posts.iter().step_by(3).copied().collect();
    expected.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(liked, expected);
}

#[tokio::test]
async fn liked_by_me_stays_right_after_every_liked_set_is_dropped() {
    let app = TestApp::spawn_in(LikeMode::Buffered).await;
    let world = World::create(&app).await;
    let worker = app.worker().await;
    let liked_post = app.create_post_as(world.bob, world.course, "liked").await;
    let other_post = app.create_post_as(world.bob, world.course, "not liked").await;
    set_post_like(&app, world.alice, liked_post, true).await;
    worker.drain().await.expect("drain");

    let dropped = app.state.likes.liked_sets().drop_all().await.expect("drop all");
    assert!(dropped >= 1);
    let warms_before = app.state.likes.stats().set_warms.load(std::sync::atomic::Ordering::Relaxed);
    let query = "query($a: ID!, $b: ID!) { a: post(id: $a) { likedByMe } b: post(id: $b) { likedByMe } }";
    let data = app
        .gql_ok(
            Some(&app.token(world.alice)),
            query,
            json!({ "a": gid("Post", liked_post), "b": gid("Post", other_post) }),
        )
        .await;
    assert_eq!((data["a"]["likedByMe"].clone(), data["b"]["likedByMe"].clone()), (json!(true), json!(false)));
    assert!(app.state.likes.stats().set_warms.load(std::sync::atomic::Ordering::Relaxed) > warms_before, "rewarmed");
    // And the rewarmed set still refuses a double like.
    set_post_like(&app, world.alice, liked_post, true).await;
    worker.drain().await.expect("drain");
    assert_eq!(post_rows_and_counter(&app, liked_post).await, (1, 1));
}

#[tokio::test]
async fn a_poison_event_is_dead_lettered_and_later_events_still_apply() {
    let app = TestApp::spawn_with(|s| {
        s.like_mode = LikeMode::Buffered;
        s.worker_max_deliveries = 2;
    })
    .await;
    let world = World::create(&app).await;
    let worker = app.worker().await;
    let post = app.create_post_as(world.bob, world.course, "target").await;
    // A member whose like PostgreSQL refuses on its own: a trigger the test installs raises for
    // that user's row, as a constraint or a bug in a later migration would. The fences cannot
    // drop it (the event is valid); only the poison path can get it out of the way.
    let poisoned = app.create_user("poisoned").await;
    app.enroll(world.course, poisoned, "student").await;
    app.db
        .execute_unprepared(&format!(
            "CREATE FUNCTION refuse_poisoned() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
               IF NEW.user_id = {poisoned} THEN RAISE EXCEPTION 'a test trigger refuses user %', NEW.user_id; END IF; \
               RETURN NEW; END $$; \
             CREATE TRIGGER refuse_poisoned BEFORE INSERT ON post_likes \
               FOR EACH ROW EXECUTE FUNCTION refuse_poisoned();"
        ))
        .await
        .expect("install the poison trigger");
    set_post_like(&app, poisoned, post, true).await;
    let mut conn = app.state.redis.clone();
    let stream = app.state.keys.like_stream(app.state.keys.shard_of(poisoned));
    // Good events on the poison's own shard, after it in the stream.
    let mut neighbours = Vec::new();
    for n in 0.. {
        let user = app.create_user(&format!("neighbour{n}")).await;
        if app.state.keys.shard_of(user) == app.state.keys.shard_of(poisoned) {
            app.enroll(world.course, user, "student").await;
            neighbours.push(user);
            if neighbours.len() == 2 {
                break;
            }
        }
    }
    for user in &neighbours {
        set_post_like(&app, *user, post, true).await;
    }

    // Step until the stream is empty; bounded so a stalled stream fails the test.
    for _ in 0..20 {
        worker.drain().await.expect("drain");
        // Acknowledged entries leave the stream even while an older one stays pending: at most
        // the poison entry is left.
        assert!(stream_len(&app).await <= 1, "an applied neighbour stayed in the stream");
        if stream_len(&app).await == 0 {
            break;
        }
    }
    assert_eq!(stream_len(&app).await, 0, "the poison entry did not stall the stream");
    assert_eq!(post_rows_and_counter(&app, post).await, (2, 2), "the good events applied");
    let dead: Vec<redis::streams::StreamId> = {
        let reply: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
            .arg(app.state.keys.dead_letters())
            .arg("-")
            .arg("+")
            .query_async(&mut conn)
            .await
            .expect("xrange");
        reply.ids
    };
    assert_eq!(dead.len(), 1, "exactly the poison entry is dead-lettered");
    let error: String = redis::FromRedisValue::from_redis_value(dead[0].map["error"].clone()).expect("error text");
    assert!(error.contains("a test trigger refuses user"), "{error}");
    let dead_user: String = redis::FromRedisValue::from_redis_value(dead[0].map["u"].clone()).expect("user");
    assert_eq!(dead_user, poisoned.to_string());
    let pending: (i64, Value2, Value2, Value2) =
        redis::cmd("XPENDING").arg(&stream).arg(LIKE_GROUP).query_async(&mut conn).await.expect("xpending");
    assert_eq!(pending.0, 0, "nothing left pending");
}

type Value2 = redis::Value;

#[tokio::test]
async fn postgres_unreachable_during_a_batch_loses_nothing() {
    let app = TestApp::spawn_in(LikeMode::Buffered).await;
    let world = World::create(&app).await;
    let post = app.create_post_as(world.bob, world.course, "hot").await;
    let proxy = common::proxy::TcpProxy::start("127.0.0.1:5432".parse().unwrap()).await;
    let url = format!("postgres://postgres@{}/{}", proxy.addr, app.database);
    let db = course_forum::testing::db::connect_url(&url, Duration::from_secs(2), 2).await.expect("db via proxy");
    let config = course_forum::testing::worker::WorkerConfig::from_settings(&app.state.settings);
    let worker = course_forum::testing::worker::LikeWorker::new(
        db,
        app.state.redis.clone(),
        app.state.keys.clone(),
        config,
        app.state.after_commit(),
    );
    worker.ensure_groups().await.expect("groups");

    let mut users = Vec::new();
    for n in 0..10 {
        let user = app.create_user(&format!("fan{n}")).await;
        app.enroll(world.course, user, "student").await;
        users.push(user);
    }
    for user in &users[..5] {
        set_post_like(&app, *user, post, true).await;
    }
    proxy.cut();
    let mut failures = 0;
    for shard in 0..app.state.keys.shards() {
        if let Err(err) = worker.process_one_batch(shard).await {
            assert!(course_forum::testing::worker::is_transient(&err), "an outage is transient: {err}");
            failures += 1;
        }
    }
    assert!(failures > 0, "the worker saw the outage");
    // Likes keep being accepted meanwhile (the API reaches PostgreSQL directly here).
    for user in &users[5..] {
        set_post_like(&app, *user, post, true).await;
    }
    assert_eq!(post_rows_and_counter(&app, post).await, (0, 0));
    proxy.restore();
    let mut drained = false;
    for _ in 0..50 {
        if worker.drain().await.is_ok() && stream_len(&app).await == 0 {
            drained = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(drained, "the worker drained after PostgreSQL returned");
    assert_eq!(post_rows_and_counter(&app, post).await, (10, 10), "nothing lost, nothing doubled");
}

#[tokio::test]
async fn the_server_runs_its_own_worker_by_default() {
    let app = TestApp::spawn_with(|s| {
        s.like_mode = LikeMode::Buffered;
        s.worker_in_serve = true;
    })
    .await;
    let world = World::create(&app).await;
    let post = app.create_post_as(world.bob, world.course, "served").await;
    set_post_like(&app, world.alice, post, true).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while post_rows_and_counter(&app, post).await != (1, 1) {
        assert!(std::time::Instant::now() < deadline, "the in-process worker did not apply the like");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The applied count reaches readers: the worker patches the cached post right after its
    // COMMIT (`likes::committed`), so a read in between may still see the cached 0.
    loop {
        let data = app
            .gql_ok(
                Some(&app.token(world.bob)),
                "query($p: ID!) { post(id: $p) { likeCount } }",
                json!({ "p": gid("Post", post) }),
            )
            .await;
        if data["post"]["likeCount"] == 1 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "readers never saw the applied like: {data}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Buffered mode checks the rate limit inside the toggle script: the same budget as the other
/// modes, a refused toggle changes neither the set nor the stream, and a cold set (warmed by
/// the same call) counts the toggle once.
#[tokio::test]
async fn the_toggle_script_enforces_the_rate_limit_and_a_refused_toggle_changes_nothing() {
    let app = TestApp::spawn_with(|s| {
        s.like_mode = LikeMode::Buffered;
        s.like_rate_per_minute = 3;
    })
    .await;
    let world = World::create(&app).await;
    let post = app.create_post_as(world.bob, world.course, "limited").await;
    // Three toggles on a cold liked-set (the first loads it): like, unlike, like.
    for liked in [true, false, true] {
        set_post_like(&app, world.alice, post, liked).await;
    }
    assert_eq!(stream_len(&app).await, 3);
    let response = app
        .gql(
            Some(&app.token(world.alice)),
            "mutation($p: ID!) { unlikePost(postId: $p) { likeCount } }",
            json!({ "p": gid("Post", post) }),
        )
        .await;
    assert_eq!(response["errors"][0]["extensions"]["code"], "RATE_LIMITED", "{response}");
    let retry = response["errors"][0]["extensions"]["retryAfterMs"].as_u64();
    assert!(matches!(retry, Some(ms) if ms > 0 && ms <= 60_000), "retryAfterMs: {response}");
    assert_eq!(stream_len(&app).await, 3, "a refused toggle appends nothing");
    let liked = app.state.likes.liked_by(world.alice, &[(world.course, LikeTarget::Post(post))]).await.expect("liked");
    assert!(liked.contains(&LikeTarget::Post(post)), "the refused unlike left the like in place");
    // Another user is not limited.
    assert_eq!(set_post_like(&app, world.bob, post, true).await["likedByMe"], true);
}

#[tokio::test]
async fn a_like_by_a_user_who_left_before_it_applied_is_refused_and_the_set_reloads() {
    let app = TestApp::spawn_in(LikeMode::Buffered).await;
    let world = World::create(&app).await;
    let worker = app.worker().await;
    let post = app.create_post_as(world.bob, world.course, "target").await;
    // Acknowledged while alice was a member; she leaves before the worker applies it.
    assert_eq!(set_post_like(&app, world.alice, post, true).await["likedByMe"], true);
    set_post_like(&app, world.bob, post, true).await;
    app.db
        .execute_unprepared(&format!(
            "DELETE FROM course_members WHERE course_id = {} AND user_id = {}",
            world.course, world.alice
        ))
        .await
        .expect("alice leaves");
    app.memberships_settled().await;
    let set = app.state.keys.liked_set(world.alice, world.course);
    let mut conn = app.state.redis.clone();
    let exists: bool = redis::cmd("EXISTS").arg(&set).query_async(&mut conn).await.expect("exists");
    assert!(exists, "alice's set holds her acknowledged like");

    let mut refused = 0;
    for shard in 0..app.state.keys.shards() {
        refused += worker.process_one_batch(shard).await.expect("step").refused;
    }
    assert_eq!(refused, 1, "the worker's membership fence refused alice's like");
    assert_eq!(post_rows_and_counter(&app, post).await, (1, 1), "only bob's like was written");
    let exists: bool = redis::cmd("EXISTS").arg(&set).query_async(&mut conn).await.expect("exists");
    assert!(!exists, "the set that said `liked` was dropped, to reload the truth");
    assert_eq!(stream_len(&app).await, 0, "the refused event was acknowledged, not left pending");

    // Back in the course, her set reloads from PostgreSQL: not liked; a new like applies.
    app.enroll(world.course, world.alice, "student").await;
    let data = app
        .gql_ok(
            Some(&app.token(world.alice)),
            "query($p: ID!) { post(id: $p) { likedByMe } }",
            json!({ "p": gid("Post", post) }),
        )
        .await;
    assert_eq!(data["post"]["likedByMe"], false);
    set_post_like(&app, world.alice, post, true).await;
    worker.drain().await.expect("drain");
    assert_eq!(post_rows_and_counter(&app, post).await, (2, 2));
}

#[tokio::test]
async fn the_synchronous_writes_insert_a_like_only_for_a_member() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let post = app.create_post_as(world.bob, world.course, "target").await;
    // The outsider belongs to another course: whatever reaches the SQL, no row is written.
    let target = LikeTarget::Post(post);
    let outcome = course_forum::testing::likes::sync::set(&app.db, world.outsider, target, true).await.expect("sync");
    assert_eq!(outcome.map(|o| o.changed), Some(false));
    assert!(!course_forum::testing::likes::recount::set(&app.db, world.outsider, target, true).await.expect("recount"));
    assert_eq!(post_rows_and_counter(&app, post).await, (0, 0));
    // A member's like is written by both.
    let outcome = course_forum::testing::likes::sync::set(&app.db, world.alice, target, true).await.expect("sync");
    assert_eq!(outcome.map(|o| (o.changed, o.like_count)), Some((true, 1)));
    assert!(course_forum::testing::likes::recount::set(&app.db, world.bob, target, true).await.expect("recount"));
    assert_eq!(app.scalar_i64("SELECT count(*) AS v FROM post_likes WHERE post_id = $1", [post.into()]).await, 2);
}

/// The like tables keep no foreign keys to the liked rows (migration 0020): each writer takes a
/// live target from the target's own table. So no writer (level 1, level 2, the worker's batch)
/// leaves a like on a post or comment that is deleted or never existed, or on a comment whose
/// post is deleted, and a row that likes
/// still name cannot be deleted by hand, as the keys' NO ACTION refused.
#[tokio::test]
async fn likes_land_only_on_live_targets_and_a_liked_row_cannot_be_deleted_by_hand() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let post = app.create_post(&alice, world.course, "live").await;
    let comment = app.create_comment(&alice, post, "live comment").await;
    let deleted_post = app.create_post(&alice, world.course, "deleted").await;
    let deleted_comment = app.create_comment(&alice, post, "deleted comment").await;
    app.gql_ok(
        Some(&alice),
        "mutation($c: ID!) { deleteComment(commentId: $c) { deletedId } }",
        json!({ "c": gid("Comment", deleted_comment) }),
    )
    .await;
    // A live comment under a post deleted after it was written.
    let orphaned_comment = app.create_comment(&alice, deleted_post, "under a deleted post").await;
    app.delete_post(&alice, deleted_post).await;
    let missing = 1_i64 << 40;
    let dead = [
        LikeTarget::Post(deleted_post),
        LikeTarget::Post(missing),
        LikeTarget::Comment(deleted_comment),
        LikeTarget::Comment(orphaned_comment),
        LikeTarget::Comment(missing),
    ];
    let likes_of_bob = "SELECT (SELECT count(*) FROM post_likes WHERE user_id = $1) \
                        + (SELECT count(*) FROM comment_likes WHERE user_id = $1) AS v";

    for target in dead {
        let outcome = sync::set(&app.db, world.bob, target, true).await.expect("sync");
        assert!(!outcome.is_some_and(|o| o.changed), "level 1 liked {target:?}");
        assert!(!recount::set(&app.db, world.bob, target, true).await.expect("recount"), "level 2 liked {target:?}");
    }
    assert_eq!(app.scalar_i64(likes_of_bob, [world.bob.into()]).await, 0);

    // The worker's batch: the dead targets refused, the live ones applied.
    let like = |target, user_id| LikeEvent { target, user_id, course_id: world.course, liked: true };
    let mut events: Vec<LikeEvent> = dead.iter().map(|&target| like(target, world.bob)).collect();
    events.extend([like(LikeTarget::Post(post), world.alice), like(LikeTarget::Comment(comment), world.alice)]);
    let txn = app.db.begin().await.expect("begin");
    let applied = apply(&txn, &events).await.expect("apply");
    txn.commit().await.expect("commit");
    assert_eq!(applied.refused, vec![(world.bob, world.course)], "every dead target's like was refused");
    let mut changed: Vec<(LikeTarget, i32)> = applied.changed.iter().map(|c| (c.target, c.like_count)).collect();
    changed.sort_by_key(|(target, _)| format!("{target:?}"));
    assert_eq!(changed, vec![(LikeTarget::Comment(comment), 1), (LikeTarget::Post(post), 1)]);
    assert_eq!(app.scalar_i64(likes_of_bob, [world.bob.into()]).await, 0);
    assert_eq!(post_rows_and_counter(&app, post).await, (1, 1));

    // By hand: a liked post or comment cannot be deleted; once unliked, it can. (Rows of their
    // own, made by SQL, so that no other table names them.)
    let bare_post = app
        .scalar_i64(
            "INSERT INTO posts (course_id, user_id, title, body) VALUES ($1, $2, 'bare', 'bare') RETURNING id AS v",
            [world.course.into(), world.alice.into()],
        )
        .await;
    let bare_comment = app
        .scalar_i64(
            "INSERT INTO comments (post_id, user_id, body) VALUES ($1, $2, 'bare') RETURNING id AS v",
            [bare_post.into(), world.alice.into()],
        )
        .await;
    let deletes = [
        (LikeTarget::Comment(bare_comment), format!("DELETE FROM comments WHERE id = {bare_comment}")),
        (LikeTarget::Post(bare_post), format!("DELETE FROM posts WHERE id = {bare_post}")),
    ];
    for (target, delete) in deletes {
        assert!(sync::set(&app.db, world.bob, target, true).await.expect("like").is_some_and(|o| o.changed));
        let refused =
            app.db.execute_unprepared(&delete).await.map_err(AppError::from).expect_err("a liked row deleted");
        assert_eq!(refused.sqlstate().as_deref(), Some("23503"), "{target:?}: {refused}");
        assert!(refused.to_string().contains("still liked"), "{target:?}: {refused}");
        assert!(sync::set(&app.db, world.bob, target, false).await.expect("unlike").is_some_and(|o| o.changed));
        let deleted = app.db.execute_unprepared(&delete).await.expect("an unliked row is deleted");
        assert_eq!(deleted.rows_affected(), 1, "{target:?}");
    }
}
