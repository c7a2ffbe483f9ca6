//! `likeCounts` delivers the liked `Post`, `Comment` or `Reply` itself (the `Likeable`
//! interface), so a normalized client cache keyed by `__typename` and `id` applies it in place:
//! the type and id are the object's own, `likeVersion` orders the values and equals what a
//! query reads afterwards, fields beyond the update are read on demand, and an update whose
//! subscribers select only the update's own fields reads no row at all.

use std::collections::HashMap;
use std::time::Duration;

use course_forum::testing::config::LikeMode;
use course_forum::testing::like_event::{CountChange, LikeTarget};
use serde_json::{Value, json};

use crate::common::ws::GqlSocket;
use crate::common::{TestApp, World, gid};

async fn app_in(mode: LikeMode) -> TestApp {
    TestApp::spawn_with(|s| {
        s.like_mode = mode;
        s.worker_in_serve = true;
    })
    .await
}

/// A post by bob with one comment and one reply under it: (post, comment, reply) raw ids.
async fn thread(app: &TestApp, world: &World) -> (i64, i64, i64) {
    let bob = app.token(world.bob);
    let post = app.create_post(&bob, world.course, "watched").await;
    let comment = app.create_comment(&bob, post, "c").await;
    let reply = app.create_reply(&bob, &gid("Comment", comment), "r").await;
    (post, comment, reply)
}

/// What a query reads of each object: `(likeCount, likeVersion, likeCountCommittedAt)` by id.
async fn read_likes(app: &TestApp, user: i64, ids: &[String]) -> HashMap<String, (i64, i64, Value)> {
    let data = app
        .gql_ok(
            Some(&app.token(user)),
            "query($ids: [ID!]!) { nodes(ids: $ids) { id ... on Likeable { likeCount likeVersion likeCountCommittedAt } } }",
            json!({ "ids": ids }),
        )
        .await;
    data["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| {
            let id = n["id"].as_str().expect("id").to_owned();
            let count = n["likeCount"].as_i64().expect("likeCount");
            let version = n["likeVersion"].as_i64().expect("likeVersion");
            (id, (count, version, n["likeCountCommittedAt"].clone()))
        })
        .collect()
}

async fn updates_are_the_liked_objects_with_versions_a_query_agrees_with(mode: LikeMode) {
    let app = app_in(mode).await;
    let world = World::create(&app).await;
    let (post, comment, reply) = thread(&app, &world).await;
    let ids = vec![gid("Post", post), gid("Comment", comment), gid("Reply", reply)];
    let before = read_likes(&app, world.alice, &ids).await;

    let mut socket = GqlSocket::connect(app.addr, Some(&app.token(world.alice))).await.expect("connect");
    socket
        .subscribe(
            "1",
            "subscription($ids: [ID!]!) { likeCounts(ids: $ids) { __typename id likeCount likeVersion \
             likeCountCommittedAt ... on Post { title } ... on Reply { comment { id } } } }",
            json!({ "ids": ids }),
        )
        .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let prof = app.token(world.instructor);
    for (mutation, id) in [
        ("mutation($id: ID!) { likePost(postId: $id) { id } }", &ids[0]),
        ("mutation($id: ID!) { likeComment(commentId: $id) { id } }", &ids[1]),
        ("mutation($id: ID!) { likeComment(commentId: $id) { id } }", &ids[2]),
    ] {
        app.gql_ok(Some(&prof), mutation, json!({ "id": id })).await;
    }

    let mut heard: HashMap<String, Value> = HashMap::new();
    while heard.len() < 3 {
        let data = socket.next_data(Duration::from_secs(10)).await.expect("an update per liked object");
        let update = data["likeCounts"].clone();
        heard.insert(update["id"].as_str().expect("id").to_owned(), update);
    }
    for (id, typename) in ids.iter().zip(["Post", "Comment", "Reply"]) {
        let update = &heard[id];
        assert_eq!(update["__typename"], typename, "{update}");
        assert_eq!(update["likeCount"], 1, "{update}");
        assert!(update["likeVersion"].as_i64() > Some(before[id].1), "the version moved: {update} vs {:?}", before[id]);
        assert!(update["likeCountCommittedAt"].is_string(), "an update says when it committed: {update}");
    }
    assert_eq!(heard[&ids[0]]["title"], "watched", "a field beyond the update is read on demand");
    assert_eq!(heard[&ids[2]]["comment"]["id"], ids[1]);

    let after = read_likes(&app, world.alice, &ids).await;
    for id in &ids {
        let (count, version, committed_at) = &after[id];
        assert_eq!(*count, 1);
        assert_eq!(Some(*version), heard[id]["likeVersion"].as_i64(), "a query reads the version the update carried");
        assert!(committed_at.is_null(), "a query does not know when the count committed");
    }
}

in_each_like_mode!(updates_are_the_liked_objects_with_versions_a_query_agrees_with);

/// A like's answer is exact with its new version in sync mode; in buffered mode it predicts the
/// count and keeps the version it predicted from, so the worker's committed value (a higher
/// version) supersedes it in a client that orders by version.
async fn a_like_answers_with_the_version_of_its_count(mode: LikeMode) {
    let app = app_in(mode).await;
    let world = World::create(&app).await;
    let post = app.create_post(&app.token(world.bob), world.course, "p").await;
    let ids = vec![gid("Post", post)];
    let (_, before, _) = read_likes(&app, world.alice, &ids).await[&ids[0]].clone();
    let answer = app
        .gql_ok(
            Some(&app.token(world.alice)),
            "mutation($id: ID!) { likePost(postId: $id) { likeCount likeVersion } }",
            json!({ "id": ids[0] }),
        )
        .await;
    assert_eq!(answer["likePost"]["likeCount"], 1);
    let answered = answer["likePost"]["likeVersion"].as_i64().expect("likeVersion");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let committed = loop {
        let (count, version, _) = read_likes(&app, world.alice, &ids).await[&ids[0]].clone();
        if count == 1 && version > before {
            break version;
        }
        assert!(tokio::time::Instant::now() < deadline, "the like never committed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    match mode {
        LikeMode::Buffered => assert_eq!(answered, before, "a prediction keeps the committed version it came from"),
        _ => assert_eq!(answered, committed, "a synchronous like answers with its committed version"),
    }
}

in_each_like_mode!(a_like_answers_with_the_version_of_its_count);

/// With the post's row gone from both PostgreSQL and the post cache, a published count still
/// reaches every subscriber that selects only the update's own fields (nothing was read for
/// them), while one that also selects `title` gets NOT_FOUND (that field is read per update).
#[tokio::test]
async fn an_update_reads_no_row_unless_a_subscriber_asks_for_more() {
    let app = app_in(LikeMode::Buffered).await;
    let world = World::create(&app).await;
    let post = app.create_post(&app.token(world.bob), world.course, "gone").await;
    let id = gid("Post", post);
    let mut lean = Vec::new();
    for _ in 0..5 {
        let mut socket = GqlSocket::connect(app.addr, Some(&app.token(world.alice))).await.expect("connect");
        socket
            .subscribe(
                "1",
                "subscription($ids: [ID!]!) { likeCounts(ids: $ids) { __typename id likeCount likeVersion } }",
                json!({ "ids": [id] }),
            )
            .await;
        lean.push(socket);
    }
    let mut curious = GqlSocket::connect(app.addr, Some(&app.token(world.alice))).await.expect("connect");
    curious
        .subscribe(
            "1",
            "subscription($ids: [ID!]!) { likeCounts(ids: $ids) { id likeCount ... on Post { title } } }",
            json!({ "ids": [id] }),
        )
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    // The row disappears behind the server's back (no delete event), then a count is published.
    app.scalar_i64(
        "WITH d AS (UPDATE posts SET deleted_at = now() WHERE id = $1 RETURNING 1) SELECT count(*) AS v FROM d",
        [post.into()],
    )
    .await;
    app.state.post_cache.invalidate(post).await;
    let change = CountChange { target: LikeTarget::Post(post), like_count: 41, version: 77 };
    app.state.publisher.counts(&[change], course_forum::testing::live::now_micros()).await;

    for socket in &mut lean {
        let data = socket.next_data(Duration::from_secs(10)).await.expect("the update");
        assert_eq!(data["likeCounts"], json!({ "__typename": "Post", "id": id, "likeCount": 41, "likeVersion": 77 }));
    }
    let message = curious.next_message(Duration::from_secs(10)).await.expect("the update");
    let errors = &message["payload"]["errors"];
    assert_eq!(errors[0]["extensions"]["code"], "NOT_FOUND", "title needed the row: {message}");
    assert_eq!(errors[0]["path"], json!(["likeCounts", "title"]), "{message}");
}
