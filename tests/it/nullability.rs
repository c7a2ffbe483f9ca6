//! Errors stay local: every query and mutation root field is nullable, so one field's
//! FORBIDDEN, NOT_FOUND or RATE_LIMITED nulls that field alone, with its error at its path,
//! and its siblings keep their data. Two aliased likes in one document: the first one's answer
//! survives the second one's refusal, and the first one happened.

use course_forum::testing::config::LikeMode;
use serde_json::{Value, json};

use crate::common::{TestApp, World, gid};

fn error_at<'a>(response: &'a Value, path: &[&str]) -> &'a Value {
    response["errors"]
        .as_array()
        .and_then(|errors| errors.iter().find(|e| e["path"] == json!(path)))
        .unwrap_or_else(|| panic!("no error at {path:?}: {response}"))
}

async fn a_forbidden_field_leaves_its_siblings(mode: LikeMode) {
    let app = TestApp::spawn_with(|s| s.like_mode = mode).await;
    let world = World::create(&app).await;
    let elsewhere = app.create_post(&app.token(world.outsider), world.other_course, "not yours").await;
    let response = app
        .gql(
            Some(&app.token(world.alice)),
            "query($p: ID!, $c: ID!) { me { handle } post(id: $p) { title } course(id: $c) { code } }",
            json!({ "p": gid("Post", elsewhere), "c": gid("Course", world.course) }),
        )
        .await;
    assert_eq!(response["data"]["me"]["handle"], "alice", "{response}");
    assert_eq!(response["data"]["course"]["code"], "CS101", "{response}");
    assert!(response["data"]["post"].is_null(), "{response}");
    assert_eq!(error_at(&response, &["post"])["extensions"]["code"], "FORBIDDEN");
}

in_each_like_mode!(a_forbidden_field_leaves_its_siblings);

async fn the_first_of_two_aliased_likes_keeps_its_answer(mode: LikeMode) {
    let app = TestApp::spawn_with(|s| {
        s.like_mode = mode;
        s.like_rate_per_minute = 1;
    })
    .await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let first = app.create_post(&alice, world.course, "first").await;
    let second = app.create_post(&alice, world.course, "second").await;
    let response = app
        .gql(
            Some(&app.token(world.bob)),
            "mutation($a: ID!, $b: ID!) { a: likePost(postId: $a) { id likeCount likedByMe } \
             b: likePost(postId: $b) { id likeCount likedByMe } }",
            json!({ "a": gid("Post", first), "b": gid("Post", second) }),
        )
        .await;
    assert_eq!(response["data"]["a"]["likedByMe"], true, "the first like's answer survives: {response}");
    assert_eq!(response["data"]["a"]["id"], gid("Post", first));
    assert!(response["data"]["b"].is_null(), "{response}");
    assert_eq!(error_at(&response, &["b"])["extensions"]["code"], "RATE_LIMITED");
    // And it happened: the post reads as liked by bob; the refused one does not.
    let read = app
        .gql_ok(
            Some(&app.token(world.bob)),
            "query($a: ID!, $b: ID!) { a: post(id: $a) { likedByMe } b: post(id: $b) { likedByMe } }",
            json!({ "a": gid("Post", first), "b": gid("Post", second) }),
        )
        .await;
    assert_eq!(read, json!({ "a": { "likedByMe": true }, "b": { "likedByMe": false } }));
}

in_each_like_mode!(the_first_of_two_aliased_likes_keeps_its_answer);
