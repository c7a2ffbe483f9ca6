//! Live like counts and course activity over real websockets, across two server instances
//! sharing PostgreSQL and Redis: published only after commit, coalesced, access-checked.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use course_forum::testing::config::LikeMode;
use serde_json::{Value, json};

use crate::common::likes::{Target, toggle};
use crate::common::ws::GqlSocket;
use crate::common::{TestApp, World, gid};

const LIKE_COUNTS: &str = "subscription($ids: [ID!]!) { likeCounts(ids: $ids) { id likeCount } }";

async fn buffered_with_worker() -> TestApp {
    TestApp::spawn_with(|s| {
        s.like_mode = LikeMode::Buffered;
        s.worker_in_serve = true;
    })
    .await
}

async fn db_count(app: &TestApp, post: i64) -> i64 {
    app.scalar_i64("SELECT like_count::bigint AS v FROM posts WHERE id = $1", [post.into()]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_like_sent_to_one_instance_reaches_a_subscriber_on_another() {
    let a = buffered_with_worker().await;
    let b = a
        .spawn_peer(|s| {
            s.like_mode = LikeMode::Buffered;
            s.worker_in_serve = false;
        })
        .await;
    let world = World::create(&a).await;
    let post = a.create_post_as(world.bob, world.course, "live").await;

    let mut socket = GqlSocket::connect(b.addr, Some(&a.token(world.alice))).await.expect("connect to B");
    socket.subscribe("1", LIKE_COUNTS, json!({ "ids": [gid("Post", post)] })).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    toggle(&a, world.instructor, Target::Post(post), true).await;

    let data = socket.next_data(Duration::from_secs(10)).await.expect("an update on B");
    assert_eq!(data["likeCounts"], json!({ "id": gid("Post", post), "likeCount": 1 }));
    assert!(db_count(&a, post).await >= 1, "never ahead of the database");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_update_carries_the_time_its_transaction_committed() {
    let app = buffered_with_worker().await;
    let world = World::create(&app).await;
    let post = app.create_post_as(world.bob, world.course, "live").await;
    let mut socket = GqlSocket::connect(app.addr, Some(&app.token(world.alice))).await.expect("connect");
    socket
        .subscribe(
            "1",
            "subscription($ids: [ID!]!) { likeCounts(ids: $ids) { likeCount likeCountCommittedAt } }",
            json!({ "ids": [gid("Post", post)] }),
        )
        .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before_like = chrono::Utc::now();
    toggle(&app, world.instructor, Target::Post(post), true).await;
    let data = socket.next_data(Duration::from_secs(10)).await.expect("an update");
    let received = chrono::Utc::now();
    assert_eq!(data["likeCounts"]["likeCount"], 1);
    let committed = chrono::DateTime::parse_from_rfc3339(
        data["likeCounts"]["likeCountCommittedAt"].as_str().expect("likeCountCommittedAt"),
    )
    .expect("an RFC 3339 time")
    .to_utc();
    assert!(before_like <= committed && committed <= received, "{before_like} <= {committed} <= {received}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_of_a_thousand_likes_arrives_coalesced_and_ends_on_the_final_count() {
    const LIKERS: i64 = 1000;
    let a = buffered_with_worker().await;
    let b = a
        .spawn_peer(|s| {
            s.like_mode = LikeMode::Buffered;
            s.worker_in_serve = false;
        })
        .await;
    let world = World::create(&a).await;
    let post = a.create_post_as(world.bob, world.course, "live").await;
    let first_liker = a
        .scalar_i64(
            "WITH u AS (INSERT INTO users (handle, display_name) \
               SELECT 'fan' || n, 'Fan ' || n FROM generate_series(1, $1) n RETURNING id) \
             SELECT min(id) AS v FROM u",
            [LIKERS.into()],
        )
        .await;
    a.scalar_i64(
        "WITH m AS (INSERT INTO course_members (course_id, user_id, role) \
           SELECT $1, id, 'student' FROM users WHERE handle LIKE 'fan%' RETURNING 1) SELECT count(*) AS v FROM m",
        [world.course.into()],
    )
    .await;

    let mut socket = GqlSocket::connect(b.addr, Some(&a.token(world.alice))).await.expect("connect");
    socket.subscribe("1", LIKE_COUNTS, json!({ "ids": [gid("Post", post)] })).await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    let a = Arc::new(a);
    let storm = {
        let a = a.clone();
        tokio::spawn(async move {
            let semaphore = Arc::new(tokio::sync::Semaphore::new(32));
            let mut tasks = Vec::new();
            for user in first_liker..first_liker + LIKERS {
                let (a, permit) = (a.clone(), semaphore.clone().acquire_owned().await.expect("permit"));
                tasks.push(tokio::spawn(async move {
                    toggle(&a, user, Target::Post(post), true).await;
                    drop(permit);
                }));
            }
            for task in tasks {
                task.await.expect("like task");
            }
        })
    };

    let mut received = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let Some(data) = socket.next_data(remaining.max(Duration::from_millis(1))).await else {
            panic!("stopped receiving at {:?} after {} messages", received.last(), received.len());
        };
        let count = data["likeCounts"]["likeCount"].as_i64().expect("count");
        // Every value shown was committed: the database already has at least this many.
        assert!(db_count(&a, post).await >= count, "update {count} ran ahead of the database");
        received.push(count);
        if count == LIKERS {
            break;
        }
    }
    storm.await.expect("storm");
    println!("{LIKERS} likes reached the subscriber as {} messages", received.len());
    assert_eq!(db_count(&a, post).await, LIKERS);
    assert!(received.len() < 300, "{} messages for {LIKERS} likes: not coalesced", received.len());
    assert!(received.windows(2).all(|w| w[0] < w[1]), "counts only grow in a like-only storm: {received:?}");
}

/// The code of a refused subscription: an `error` message (validation) or a `next` carrying
/// errors and no data (a resolver refused it), as graphql-transport-ws has both.
/// The next message about subscription `id` that is not its `complete`.
async fn next_about(socket: &mut GqlSocket, id: &str) -> Value {
    loop {
        let message = socket.next_message(Duration::from_secs(5)).await.expect("an answer");
        if message["id"] == id && message["type"] != "complete" {
            return message;
        }
    }
}

fn error_code(message: &Value) -> Option<&str> {
    match message["type"].as_str()? {
        "error" => message["payload"][0]["extensions"]["code"].as_str(),
        "next" if message["payload"]["data"].is_null() => {
            message["payload"]["errors"][0]["extensions"]["code"].as_str()
        }
        _ => None,
    }
}

#[tokio::test]
async fn non_members_and_bad_tokens_are_refused() {
    let app = buffered_with_worker().await;
    let world = World::create(&app).await;
    let post = app.create_post_as(world.bob, world.course, "live").await;

    let mut outsider = GqlSocket::connect(app.addr, Some(&app.token(world.outsider))).await.expect("connect");
    outsider.subscribe("1", LIKE_COUNTS, json!({ "ids": [gid("Post", post)] })).await;
    let message = next_about(&mut outsider, "1").await;
    assert_eq!(error_code(&message), Some("FORBIDDEN"), "{message}");
    outsider
        .subscribe(
            "2",
            "subscription($c: ID!) { courseActivity(courseId: $c) { kind } }",
            json!({ "c": gid("Course", world.course) }),
        )
        .await;
    let message = next_about(&mut outsider, "2").await;
    assert_eq!(error_code(&message), Some("FORBIDDEN"), "{message}");

    for token in [None, Some("not-a-token")] {
        let refused = GqlSocket::connect(app.addr, token).await.err().expect("refused");
        assert_eq!(refused.code, 4403, "{refused:?}");
        assert!(refused.reason.contains("authentication failed"), "{refused:?}");
    }
    let mut alice = GqlSocket::connect(app.addr, Some(&app.token(world.alice))).await.expect("connect");
    alice.subscribe("3", LIKE_COUNTS, json!({ "ids": ["garbage"] })).await;
    let message = next_about(&mut alice, "3").await;
    assert_eq!(error_code(&message), Some("BAD_USER_INPUT"), "{message}");
}

#[tokio::test]
async fn a_subscriber_that_disconnects_is_cleaned_up() {
    let app = buffered_with_worker().await;
    let world = World::create(&app).await;
    let post = app.create_post_as(world.bob, world.course, "live").await;
    let hub = app.state.live.clone();

    let mut socket = GqlSocket::connect(app.addr, Some(&app.token(world.alice))).await.expect("connect");
    socket.subscribe("1", LIKE_COUNTS, json!({ "ids": [gid("Post", post)] })).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while hub.stats.subscriptions_open.load(Ordering::Relaxed) != 1 {
        assert!(Instant::now() < deadline, "subscription never opened");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(hub.watched_targets(), 1);
    socket.close().await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while hub.stats.subscriptions_open.load(Ordering::Relaxed) != 0 || hub.watched_targets() != 0 {
        assert!(Instant::now() < deadline, "the closed subscription was not released");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn course_activity_streams_new_content_as_it_commits() {
    let app = buffered_with_worker().await;
    let world = World::create(&app).await;
    let mut socket = GqlSocket::connect(app.addr, Some(&app.token(world.alice))).await.expect("connect");
    socket
        .subscribe(
            "1",
            "subscription($c: ID!) { courseActivity(courseId: $c) { kind nodeId post { title author { handle } } \
             comment { body } } }",
            json!({ "c": gid("Course", world.course) }),
        )
        .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let post = app.create_post_as(world.bob, world.course, "live").await;
    let event = socket.next_data(Duration::from_secs(5)).await.expect("post event");
    assert_eq!(event["courseActivity"]["kind"], "POST_CREATED");
    assert_eq!(event["courseActivity"]["nodeId"], gid("Post", post));
    assert_eq!(event["courseActivity"]["post"], json!({ "title": "live", "author": { "handle": "bob" } }));

    app.gql_ok(
        Some(&app.token(world.instructor)),
        "mutation($p: ID!) { createComment(postId: $p, body: \"welcome\") { id } }",
        json!({ "p": gid("Post", post) }),
    )
    .await;
    let event = socket.next_data(Duration::from_secs(5)).await.expect("comment event");
    assert_eq!(event["courseActivity"]["kind"], "COMMENT_CREATED");
    assert_eq!(event["courseActivity"]["comment"], json!({ "body": "welcome" }));

    app.gql_ok(
        Some(&app.token(world.bob)),
        "mutation($p: ID!) { deletePost(postId: $p) { deletedId } }",
        json!({ "p": gid("Post", post) }),
    )
    .await;
    let event: Value = socket.next_data(Duration::from_secs(5)).await.expect("delete event");
    assert_eq!(event["courseActivity"]["kind"], "POST_DELETED");
    assert_eq!(event["courseActivity"]["post"], Value::Null);
}

#[tokio::test]
async fn sync_mode_publishes_after_its_statement_and_legacy_protocol_works() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let post = app.create_post_as(world.bob, world.course, "live").await;
    let mut socket =
        GqlSocket::connect_with(app.addr, Some(&app.token(world.alice)), "graphql-ws").await.expect("legacy");
    socket.subscribe("1", LIKE_COUNTS, json!({ "ids": [gid("Post", post)] })).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    toggle(&app, world.instructor, Target::Post(post), true).await;
    let data = socket.next_data(Duration::from_secs(5)).await.expect("update");
    assert_eq!(data["likeCounts"]["likeCount"], 1);
}

/// A websocket connection serves many operations: `likedByMe` read over it must show a like
/// made after an earlier read on the same connection (nothing cached for its lifetime).
#[tokio::test]
async fn likes_read_over_one_websocket_follow_likes_made_meanwhile() {
    let app = buffered_with_worker().await;
    let world = World::create(&app).await;
    let post = app.create_post_as(world.bob, world.course, "live").await;
    let mut socket = GqlSocket::connect(app.addr, Some(&app.token(world.alice))).await.expect("connect");
    let read = "query($p: ID!) { post(id: $p) { likedByMe } }";
    socket.subscribe("before", read, json!({ "p": gid("Post", post) })).await;
    let before = next_about(&mut socket, "before").await;
    assert_eq!(before["payload"]["data"]["post"]["likedByMe"], false, "{before}");
    toggle(&app, world.alice, Target::Post(post), true).await;
    socket.subscribe("after", read, json!({ "p": gid("Post", post) })).await;
    let after = next_about(&mut socket, "after").await;
    assert_eq!(after["payload"]["data"]["post"]["likedByMe"], true, "a flag cached for the connection's life: {after}");
}
