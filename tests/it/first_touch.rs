//! A user's first request to an instance (their memberships not in its memory, their liked-set
//! not in Redis): what the first like and the first `startPostView` cost, in statements and
//! Redis commands, and that the short way of the first like keeps every promise (a
//! non-member changes nothing; an apply racing the load is not lost).

use std::time::Duration;

use course_forum::testing::config::LikeMode;
use serde_json::{Value as Json, json};

use crate::common::{TestApp, World, gid, send_alone};

const LIKE: &str = "mutation($p: ID!) { likePost(postId: $p) { likeCount } }";
const START: &str = "mutation($id: ID!) { startPostView(postId: $id) { ticket } }";
const READ: &str = "query($p: ID!) { post(id: $p) { title } }";
const LIKED: &str = "query($p: ID!) { post(id: $p) { likedByMe } }";

/// (SQL statements, Redis commands) that `request` cost this instance.
async fn cost<T>(app: &TestApp, request: impl AsyncFnOnce() -> T) -> (T, (u64, u64)) {
    let before = (app.state.sql_statements.get(), app.state.redis.commands_sent());
    let out = request().await;
    (out, (app.state.sql_statements.get() - before.0, app.state.redis.commands_sent() - before.1))
}

/// A course with a post in the instance's memory (a classmate read and liked it, which also
/// loaded the scripts), and a member who has not sent a request yet.
async fn hot_post_and_new_member(app: &TestApp) -> (World, i64, i64) {
    let world = World::create(app).await;
    let post = app.create_post_as(world.alice, world.course, "hot").await;
    let bob = app.token(world.bob);
    app.gql_ok(Some(&bob), READ, json!({ "p": gid("Post", post) })).await;
    app.gql_ok(Some(&bob), LIKE, json!({ "p": gid("Post", post) })).await;
    assert!(app.state.course_pages.post(post).is_some(), "the post is in memory");
    let carol = app.create_user("carol").await;
    app.enroll(world.course, carol, "student").await;
    (world, post, carol)
}

async fn liked_by_me(app: &TestApp, user: i64, post: i64) -> bool {
    app.gql_ok(Some(&app.token(user)), LIKED, json!({ "p": gid("Post", post) })).await["post"]["likedByMe"] == true
}

/// How many times this instance has read liked rows (the gate's passes).
fn rows_read(app: &TestApp) -> u64 {
    app.state.likes.liked_sets().rows_read.reached()
}

/// Sends `user`'s like of `post` alone and waits until it has read its liked rows, held there
/// until the returned guard is dropped; with the like's answer to come, and the count of reads
/// before it.
async fn like_held_after_reading_rows(
    app: &TestApp,
    user: i64,
    post: i64,
) -> (tokio::sync::OwnedRwLockWriteGuard<()>, tokio::task::JoinHandle<Json>, u64) {
    let base = rows_read(app);
    let held = app.state.likes.liked_sets().rows_read.hold().await;
    let like = tokio::spawn(send_alone(app.url("/graphql"), app.token(user), LIKE, json!({ "p": gid("Post", post) })));
    while rows_read(app) <= base {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    (held, like, base)
}

/// Buffered: the memberships and the liked rows in ONE statement, and ONE Redis command: the
/// toggle script, which loads the rows and likes. Before: two statements (memberships; the rows
/// after the toggle answered "not loaded") and two toggle calls.
#[tokio::test]
async fn a_cold_first_like_reads_memberships_and_the_liked_set_in_one_statement() {
    let app = TestApp::spawn_in(LikeMode::Buffered).await;
    let (world, post, carol) = hot_post_and_new_member(&app).await;
    // A like of Carol's that only PostgreSQL knows: the loaded set must hold it.
    let older = app.create_post_as(world.alice, world.course, "older").await;
    app.scalar_i64(
        "WITH l AS (INSERT INTO post_likes (post_id, user_id) VALUES ($1, $2) RETURNING 1) SELECT count(*) AS v FROM l",
        [older.into(), carol.into()],
    )
    .await;
    let token = app.token(carol);
    let (data, first) =
        cost(&app, async || app.gql_ok(Some(&token), LIKE, json!({ "p": gid("Post", post) })).await).await;
    assert_eq!(data["likePost"]["likeCount"], 1, "Bob's like is not applied yet");
    assert_eq!(first, (1, 1), "one statement, one script");

    // The set was loaded with the row and the like; the memberships were kept: no statement.
    let (liked, warm) = cost(&app, async || liked_by_me(&app, carol, post).await).await;
    assert!(liked);
    assert_eq!(warm, (0, 1), "one SMISMEMBER");
    assert!(liked_by_me(&app, carol, older).await, "the row only PostgreSQL had was loaded");
    let (_, again) = cost(&app, async || {
        app.gql_ok(
            Some(&token),
            "mutation($p: ID!) { unlikePost(postId: $p) { likeCount } }",
            json!({ "p": gid("Post", post) }),
        )
        .await
    })
    .await;
    assert_eq!(again, (0, 1), "a warm toggle: one script");

    let worker = app.worker().await;
    worker.drain().await.expect("drain");
    let rows = |p: i64| app.scalar_i64("SELECT count(*) AS v FROM post_likes WHERE post_id = $1", [p.into()]);
    assert_eq!(
        (rows(post).await, rows(older).await),
        (1, 1),
        "Bob's like stays, Carol's was undone; the older row stays"
    );
}

/// The other modes write to PostgreSQL at once: the first like costs the memberships and the
/// write (two statements), as before; Redis: the rate limit, and forgetting the liked-set (one
/// script, `lua/liked_set_forget.lua`; it was a MULTI of two commands), and sync also the
/// change's after-commit publish.
async fn first_like_in(mode: LikeMode) -> (u64, u64) {
    let app = TestApp::spawn_in(mode).await;
    let (_, post, carol) = hot_post_and_new_member(&app).await;
    let token = app.token(carol);
    let (_, first) = cost(&app, async || app.gql_ok(Some(&token), LIKE, json!({ "p": gid("Post", post) })).await).await;
    first
}

#[tokio::test]
async fn a_first_like_in_sync_mode_costs_two_statements() {
    assert_eq!(first_like_in(LikeMode::Sync).await, (2, 4));
}

#[tokio::test]
async fn a_first_like_in_recount_mode_costs_two_statements() {
    assert_eq!(first_like_in(LikeMode::Recount).await, (2, 3));
}

/// A non-member's first like: FORBIDDEN from the one statement, before anything reaches Redis
/// (no set, no event, no pending record, no rate count), and the refusal is remembered: a
/// second try costs nothing.
#[tokio::test]
async fn a_non_members_first_like_is_refused_and_changes_nothing() {
    let app = TestApp::spawn_in(LikeMode::Buffered).await;
    let (world, post, _) = hot_post_and_new_member(&app).await;
    let token = app.token(world.outsider);
    let keys = &app.state.keys;
    let touched = [
        keys.liked_set(world.outsider, world.course),
        keys.liked_pending(world.outsider, world.course),
        keys.like_rate(world.outsider),
    ];
    let stream = keys.like_stream(keys.shard_of(world.outsider));
    let mut conn = app.state.redis.clone();
    let before: i64 = redis::cmd("XLEN").arg(&stream).query_async(&mut conn).await.expect("xlen");
    for attempt in 0..2 {
        let (response, spent) =
            cost(&app, async || app.gql(Some(&token), LIKE, json!({ "p": gid("Post", post) })).await).await;
        assert_eq!(response["errors"][0]["extensions"]["code"], "FORBIDDEN", "{response}");
        assert_eq!(spent, if attempt == 0 { (1, 0) } else { (0, 0) }, "attempt {attempt}");
    }
    let existing: i64 = redis::cmd("EXISTS").arg(&touched[..]).query_async(&mut conn).await.expect("exists");
    assert_eq!(existing, 0, "no liked-set, pending record or rate count");
    let after: i64 = redis::cmd("XLEN").arg(&stream).query_async(&mut conn).await.expect("xlen");
    assert_eq!(after, before, "no event");
    let likes = app.scalar_i64("SELECT like_count::bigint AS v FROM posts WHERE id = $1", [post.into()]).await;
    assert_eq!(likes, 0, "Bob's like is not applied yet; nothing else is");
}

/// The rows the first like read with the memberships may predate an apply of the same set
/// (an event accepted on another instance): the apply's transaction, stamped on the set's
/// generation bucket when its record is retired, is not below the statement's xmin, so the
/// toggle reads the rows again, and the set holds the applied like.
#[tokio::test]
async fn a_first_like_whose_rows_predate_an_apply_reads_them_again() {
    let app = TestApp::spawn_in(LikeMode::Buffered).await;
    let peer = app.spawn_peer(|s| s.like_mode = LikeMode::Buffered).await;
    let (world, post, carol) = hot_post_and_new_member(&app).await;
    let other = app.create_post_as(world.alice, world.course, "other").await;
    let worker = app.worker().await;
    worker.drain().await.expect("drain Bob's like");
    // Carol likes `other` on the peer (pending), then her set is dropped: cold here.
    let liked = app.gql_at(peer.addr, Some(&app.token(carol)), LIKE, json!({ "p": gid("Post", other) })).await;
    assert!(liked.get("errors").is_none(), "{liked}");
    let mut conn = app.state.redis.clone();
    let () = redis::cmd("UNLINK")
        .arg(app.state.keys.liked_set(carol, world.course))
        .query_async(&mut conn)
        .await
        .expect("unlink");

    let (held, like, base) = like_held_after_reading_rows(&app, carol, post).await;
    // The rows are read (without `other`); the apply now commits and retires its record.
    worker.drain().await.expect("drain");
    drop(held);
    let response: Json = like.await.expect("like task");
    assert!(response.get("errors").is_none(), "{response}");
    assert!(rows_read(&app) >= base + 2, "the toggle read the rows again");
    assert!(liked_by_me(&app, carol, other).await, "the set has the applied like");
    assert!(liked_by_me(&app, carol, post).await);
}

/// The first start of a view on a post in memory: the memberships (one statement, not known
/// yet) and the admission and the ticket, pipelined (two commands, one round trip). Nothing
/// it already knows is read again: the second start costs no statement.
#[tokio::test]
async fn a_first_start_reads_only_the_memberships() {
    let app = TestApp::spawn().await;
    let (world, post, carol) = hot_post_and_new_member(&app).await;
    // Bob's start loads the scripts.
    app.gql_ok(Some(&app.token(world.bob)), START, json!({ "id": gid("Post", post) })).await;
    let token = app.token(carol);
    let start = async || app.gql_ok(Some(&token), START, json!({ "id": gid("Post", post) })).await;
    let (_, first) = cost(&app, start).await;
    assert_eq!(first, (1, 2));
    let (_, second) = cost(&app, start).await;
    assert_eq!(second, (0, 2));
}

/// With `MEMBERSHIP_CACHE=false` every request reads the memberships: there is no first touch
/// to recognise, and a like on a loaded set costs what it did (the memberships, the toggle),
/// without reading its liked rows again.
#[tokio::test]
async fn without_the_membership_cache_a_warm_like_reads_no_liked_rows() {
    let app = TestApp::spawn_with(|s| {
        s.like_mode = LikeMode::Buffered;
        s.membership_cache = false;
    })
    .await;
    let (_, post, carol) = hot_post_and_new_member(&app).await;
    let token = app.token(carol);
    let like = async |field: &str| {
        let query = format!("mutation($p: ID!) {{ {field}(postId: $p) {{ likeCount }} }}");
        cost(&app, async || app.gql_ok(Some(&token), &query, json!({ "p": gid("Post", post) })).await).await.1
    };
    assert_eq!(like("likePost").await, (2, 2), "cold: the memberships, -1, the rows, the toggle");
    assert_eq!(like("unlikePost").await, (1, 1), "warm: the memberships, the toggle");
}

/// The same race with a like written straight to PostgreSQL by an instance in sync mode (a
/// mode switch under way): its forget stamps the bucket with its transaction, so the first
/// touch's rows, read before that commit, are read again.
#[tokio::test]
async fn a_first_like_whose_rows_predate_a_sync_write_reads_them_again() {
    let app = TestApp::spawn_in(LikeMode::Buffered).await;
    let (world, post, carol) = hot_post_and_new_member(&app).await;
    let sync_peer = app.spawn_peer(|s| s.like_mode = LikeMode::Sync).await;
    let other = app.create_post_as(world.alice, world.course, "other").await;

    let (held, like, base) = like_held_after_reading_rows(&app, carol, post).await;
    let written = app.gql_at(sync_peer.addr, Some(&app.token(carol)), LIKE, json!({ "p": gid("Post", other) })).await;
    assert!(written.get("errors").is_none(), "{written}");
    drop(held);
    let response: Json = like.await.expect("like task");
    assert!(response.get("errors").is_none(), "{response}");
    assert!(rows_read(&app) >= base + 2, "the toggle read the rows again");
    assert!(liked_by_me(&app, carol, other).await, "the set has the like written in sync mode");
}

/// First likes of new members that arrive while first-touch statements are running share the
/// next one: held before their statements, two first likes take both slots, eleven more wait
/// (one a stranger), and all eleven are read in ONE statement. Each gets exactly its own
/// reading: its own earlier like in the course, none of its likes in another course, and the
/// stranger FORBIDDEN with nothing in Redis.
#[tokio::test]
async fn first_likes_arriving_together_share_one_statement_and_keep_their_own_sets() {
    let app = TestApp::spawn_in(LikeMode::Buffered).await;
    let (world, post, _) = hot_post_and_new_member(&app).await;
    let older = app.create_post_as(world.alice, world.course, "older").await;
    let elsewhere = app.create_post_as(world.outsider, world.other_course, "elsewhere").await;
    let mut members = Vec::new();
    for i in 0..12 {
        let user = app.create_user(&format!("new{i}")).await;
        app.enroll(world.course, user, "student").await;
        app.enroll(world.other_course, user, "student").await;
        // Every one liked a post of the other course; the even ones also an older post here.
        let liked = if i % 2 == 0 { vec![older, elsewhere] } else { vec![elsewhere] };
        for p in liked {
            app.scalar_i64(
                "WITH l AS (INSERT INTO post_likes (post_id, user_id) VALUES ($1, $2) RETURNING 1) \
                 SELECT count(*) AS v FROM l",
                [p.into(), user.into()],
            )
            .await;
        }
        members.push(user);
    }
    // A stranger to the course (a member of the other one) who has sent no request yet.
    let stranger = app.create_user("stranger").await;
    app.enroll(world.other_course, stranger, "student").await;
    let touches = app.state.likes.first_touches();
    // The gate counts statements: every batch passes it once, before its statement.
    let reached = touches.before_statement.reached();
    let held = touches.before_statement.hold().await;
    let like = |user: i64| {
        tokio::spawn(send_alone(app.url("/graphql"), app.token(user), LIKE, json!({ "p": gid("Post", post) })))
    };
    let within = Duration::from_secs(30);
    let mut likes: Vec<_> = members[..2].iter().map(|&u| like(u)).collect();
    let started = async {
        while touches.before_statement.reached() < reached + 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(within, started).await.expect("two first touches hold both slots");
    likes.extend(members[2..].iter().map(|&u| like(u)));
    let stranger_like = like(stranger);
    let queued = async {
        while touches.waiting() < 11 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(within, queued).await.expect("eleven first touches wait");
    drop(held);
    for (like, user) in likes.into_iter().zip(&members) {
        let body = like.await.expect("like");
        assert!(body.get("errors").is_none(), "user {user}: {body}");
    }
    let refused = stranger_like.await.expect("like");
    assert_eq!(crate::common::error_code(&refused).as_deref(), Some("FORBIDDEN"), "{refused}");
    assert_eq!(touches.before_statement.reached() - reached, 3, "two alone, then the eleven waiting in one");

    let mut redis = app.state.redis.clone();
    for (i, &user) in members.iter().enumerate() {
        let mut set: Vec<String> = redis::cmd("SMEMBERS")
            .arg(app.state.keys.liked_set(user, world.course))
            .query_async(&mut redis)
            .await
            .expect("SMEMBERS");
        set.sort();
        let mut expected = vec!["_".to_owned(), format!("p:{post}")];
        if i % 2 == 0 {
            expected.push(format!("p:{older}"));
        }
        expected.sort();
        assert_eq!(set, expected, "user {user}'s set in the course: its own rows, none of the other course");
    }
    let stranger_set: bool = redis::cmd("EXISTS")
        .arg(app.state.keys.liked_set(stranger, world.course))
        .query_async(&mut redis)
        .await
        .expect("EXISTS");
    assert!(!stranger_set, "nothing loaded for the stranger");
}

/// Like rows carry their course (migration 0021), so a liked-set loads from the like tables'
/// indexes alone. The course is the one every writer proved, in each mode; a writer that names
/// none (a server of an earlier version, an insert by hand) gets the target's; and a post moved
/// to another course by hand, or a comment moved to another post, takes its likes along, so
/// the first touch in the new course finds them.
async fn like_rows_carry_their_course_wherever_their_target_goes(mode: LikeMode) {
    const LIKE_COMMENT: &str = "mutation($c: ID!) { likeComment(commentId: $c) { likeCount } }";
    let app = TestApp::spawn_in(mode).await;
    let world = World::create(&app).await;
    let moved = app.create_post_as(world.alice, world.course, "moved later").await;
    let stays = app.create_post_as(world.alice, world.course, "stays").await;
    let comment = app.create_comment(&app.token(world.alice), moved, "on the moved post").await;
    let bob = app.token(world.bob);
    app.gql_ok(Some(&bob), LIKE, json!({ "p": gid("Post", moved) })).await;
    app.gql_ok(Some(&bob), LIKE_COMMENT, json!({ "c": gid("Comment", comment) })).await;
    if mode == LikeMode::Buffered {
        app.worker().await.drain().await.expect("drain");
    }
    // Alice's like, inserted as an earlier server would: without a course.
    app.scalar_i64(
        "WITH l AS (INSERT INTO comment_likes (comment_id, user_id) VALUES ($1, $2) RETURNING 1) SELECT count(*) AS v FROM l",
        [comment.into(), world.alice.into()],
    )
    .await;
    let courses_of_likes = async |course: i64| {
        app.scalar_i64(
            "SELECT ((SELECT count(*) FROM post_likes WHERE course_id = $1) * 10 \
                   + (SELECT count(*) FROM comment_likes WHERE course_id = $1)) AS v",
            [course.into()],
        )
        .await
    };
    assert_eq!(courses_of_likes(world.course).await, 12, "Bob's post like, both comment likes: in the course");

    // Moved by hand: the post (with its comment) to the other course, where Bob is enrolled too.
    app.enroll(world.other_course, world.bob, "student").await;
    app.scalar_i64(
        "WITH m AS (UPDATE posts SET course_id = $2 WHERE id = $1 RETURNING 1) SELECT count(*) AS v FROM m",
        [moved.into(), world.other_course.into()],
    )
    .await;
    assert_eq!(courses_of_likes(world.course).await, 0, "nothing left behind");
    assert_eq!(courses_of_likes(world.other_course).await, 12, "the likes moved with their post");

    // On an instance that never saw the post (so it reads its new course), Bob's first like in
    // the other course loads his set there: it holds the moved post's like and his comment like.
    let peer = app.spawn_peer(|_| {}).await;
    let there = app.create_post_as(world.outsider, world.other_course, "there").await;
    let ask = async |query: &str, variables: Json| {
        let body = app.gql_at(peer.addr, Some(&bob), query, variables).await;
        assert!(body.get("errors").is_none(), "{body}");
        body["data"].clone()
    };
    ask(LIKE, json!({ "p": gid("Post", there) })).await;
    let liked = ask(
        "query($p: ID!, $c: ID!) { post(id: $p) { likedByMe } node(id: $c) { ... on Comment { likedByMe } } }",
        json!({ "p": gid("Post", moved), "c": gid("Comment", comment) }),
    )
    .await;
    assert_eq!(
        (&liked["post"]["likedByMe"], &liked["node"]["likedByMe"]),
        (&json!(true), &json!(true)),
        "the moved post's likes are found in its new course: {liked}"
    );

    // The comment alone moved back, under a post of the first course: its likes follow it.
    app.scalar_i64(
        "WITH m AS (UPDATE comments SET post_id = $2 WHERE id = $1 RETURNING 1) SELECT count(*) AS v FROM m",
        [comment.into(), stays.into()],
    )
    .await;
    assert_eq!(courses_of_likes(world.course).await, 2, "both comment likes, back in the first course");
    assert_eq!(courses_of_likes(world.other_course).await, 20, "the two post likes stay");
}
in_each_like_mode!(like_rows_carry_their_course_wherever_their_target_goes);
