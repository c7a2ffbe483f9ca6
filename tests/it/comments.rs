//! Comments and replies (two levels), their counters, soft deletes, edits, who may do what,
//! and idempotent likes.

use std::sync::Arc;

use serde_json::{Value as Json, json};
use tokio::sync::Barrier;

use crate::common::{TestApp, World, error_code, gid, raw_id, send_alone};

const POST_FIELDS: &str = "id title body commentCount likeCount likedByMe editedAt createdAt";

/// Creates a top-level comment; returns the whole `Comment` JSON.
async fn create_comment(app: &TestApp, token: &str, post: i64, body: &str) -> Json {
    let data = app
        .gql_ok(
            Some(token),
            "mutation($p: ID!, $b: String!) { createComment(postId: $p, body: $b) {
               id body replyCount likeCount author { id } post { id commentCount } } }",
            json!({ "p": gid("Post", post), "b": body }),
        )
        .await;
    data["createComment"].clone()
}

/// Replies to the comment or reply with global id `target`; returns the whole `Reply` JSON.
async fn create_reply(app: &TestApp, token: &str, target: &str, body: &str) -> Json {
    let data = app
        .gql_ok(
            Some(token),
            "mutation($c: ID!, $b: String!) { createReply(commentId: $c, body: $b) {
               id body likeCount author { id } replyTo { id }
               comment { id replyCount } post { id commentCount } } }",
            json!({ "c": target, "b": body }),
        )
        .await;
    data["createReply"].clone()
}

fn id_of(node: &Json) -> i64 {
    raw_id(node["id"].as_str().expect("id"))
}

/// `post(id)` as the viewer sees it (panics on errors).
async fn post(app: &TestApp, token: &str, post: i64) -> Json {
    let data = app
        .gql_ok(
            Some(token),
            &format!("query($id: ID!) {{ post(id: $id) {{ {POST_FIELDS} }} }}"),
            json!({ "id": gid("Post", post) }),
        )
        .await;
    data["post"].clone()
}

async fn comment_count(app: &TestApp, token: &str, post_id: i64) -> i64 {
    post(app, token, post_id).await["commentCount"].as_i64().expect("commentCount")
}

/// A root comment through `node`, with its replies (ids only).
async fn comment(app: &TestApp, token: &str, id: i64) -> Json {
    let data = app
        .gql_ok(
            Some(token),
            "query($id: ID!) { node(id: $id) { ... on Comment {
               id body replyCount likeCount likedByMe editedAt createdAt
               replies(first: 100) { nodes { id } } } } }",
            json!({ "id": gid("Comment", id) }),
        )
        .await;
    data["node"].clone()
}

fn ids(list: &Json) -> Vec<i64> {
    list.as_array().expect("list").iter().map(|n| raw_id(n["id"].as_str().expect("id"))).collect()
}

async fn reply_ids(app: &TestApp, token: &str, root: i64) -> Vec<i64> {
    ids(&comment(app, token, root).await["replies"]["nodes"])
}

async fn top_level_ids(app: &TestApp, token: &str, post: i64) -> Vec<i64> {
    let data = app
        .gql_ok(
            Some(token),
            "query($id: ID!) { post(id: $id) { comments(first: 100) { nodes { id } } } }",
            json!({ "id": gid("Post", post) }),
        )
        .await;
    ids(&data["post"]["comments"]["nodes"])
}

async fn course_post_ids(app: &TestApp, token: &str, course: i64) -> Vec<i64> {
    let data = app
        .gql_ok(
            Some(token),
            "query($id: ID!) { course(id: $id) { posts(first: 100) { nodes { id } } } }",
            json!({ "id": gid("Course", course) }),
        )
        .await;
    ids(&data["course"]["posts"]["nodes"])
}

async fn sql_reply_count(app: &TestApp, comment: i64) -> i64 {
    app.scalar_i64("SELECT reply_count::bigint AS v FROM comments WHERE id = $1", [comment.into()]).await
}

async fn sql_comment_count(app: &TestApp, post: i64) -> i64 {
    app.scalar_i64("SELECT comment_count::bigint AS v FROM posts WHERE id = $1", [post.into()]).await
}

async fn delete_post(app: &TestApp, token: &str, post: i64) -> Json {
    app.gql(
        Some(token),
        "mutation($p: ID!) { deletePost(postId: $p) { deletedId } }",
        json!({ "p": gid("Post", post) }),
    )
    .await
}

/// Deletes a comment or reply by global id; returns the whole response.
async fn delete_comment(app: &TestApp, token: &str, target: &str) -> Json {
    app.gql(Some(token), "mutation($c: ID!) { deleteComment(commentId: $c) { deletedId } }", json!({ "c": target }))
        .await
}

fn assert_code(response: &Json, code: &str) {
    assert_eq!(error_code(response).as_deref(), Some(code), "expected {code}: {response}");
}

#[tokio::test]
async fn create_comment_bumps_the_post_comment_count() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let bob = app.token(world.bob);
    let post_id = app.create_post(&alice, world.course, "q").await;
    assert_eq!(comment_count(&app, &alice, post_id).await, 0);

    let first = create_comment(&app, &bob, post_id, "  first!  ").await;
    assert_eq!(first["body"], "first!", "body is trimmed");
    assert_eq!(first["author"]["id"], gid("User", world.bob));
    assert_eq!(first["replyCount"], 0);
    assert_eq!(first["post"]["id"], gid("Post", post_id));
    assert_eq!(first["post"]["commentCount"], 1);
    let second = create_comment(&app, &alice, post_id, "second").await;
    assert_eq!(second["post"]["commentCount"], 2);

    assert_eq!(comment_count(&app, &bob, post_id).await, 2);
    assert_eq!(sql_comment_count(&app, post_id).await, 2);
    assert_eq!(top_level_ids(&app, &bob, post_id).await, vec![id_of(&first), id_of(&second)]);
    // Empty bodies are refused and change nothing.
    let response = app
        .gql(
            Some(&bob),
            "mutation($p: ID!) { createComment(postId: $p, body: \"   \") { id } }",
            json!({ "p": gid("Post", post_id) }),
        )
        .await;
    assert_code(&response, "BAD_USER_INPUT");
    assert_eq!(sql_comment_count(&app, post_id).await, 2);
}

#[tokio::test]
async fn reply_to_a_comment_lands_under_it_and_answers_its_author() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let bob = app.token(world.bob);
    let post_id = app.create_post(&alice, world.course, "q").await;
    let root = create_comment(&app, &bob, post_id, "root").await;
    let root_id = id_of(&root);

    let reply = create_reply(&app, &alice, &gid("Comment", root_id), "answer").await;
    assert_eq!(reply["author"]["id"], gid("User", world.alice));
    assert_eq!(reply["replyTo"]["id"], gid("User", world.bob));
    assert_eq!(reply["comment"]["id"], gid("Comment", root_id));
    assert_eq!(reply["comment"]["replyCount"], 1);
    assert_eq!(reply["post"]["id"], gid("Post", post_id));
    assert_eq!(reply["post"]["commentCount"], 2);

    let root_now = comment(&app, &alice, root_id).await;
    assert_eq!(root_now["replyCount"], 1);
    assert_eq!(ids(&root_now["replies"]["nodes"]), vec![id_of(&reply)]);
    // A reply is not a top-level comment.
    assert_eq!(top_level_ids(&app, &alice, post_id).await, vec![root_id]);
    assert_eq!(comment_count(&app, &alice, post_id).await, 2);
    assert_eq!(sql_reply_count(&app, root_id).await, 1);
    assert_eq!(sql_comment_count(&app, post_id).await, 2);
}

#[tokio::test]
async fn reply_to_a_reply_attaches_to_the_root_and_answers_the_reply_author() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let bob = app.token(world.bob);
    let prof = app.token(world.instructor);
    let post_id = app.create_post(&alice, world.course, "q").await;
    let root_id = id_of(&create_comment(&app, &bob, post_id, "root").await);
    let first = create_reply(&app, &alice, &gid("Comment", root_id), "reply 1").await;
    let first_id = id_of(&first);

    // The instructor answers Alice's reply.
    let second = create_reply(&app, &prof, &gid("Reply", first_id), "reply 2").await;
    let second_id = id_of(&second);
    assert_eq!(second["comment"]["id"], gid("Comment", root_id), "root, not the reply");
    assert_eq!(second["replyTo"]["id"], gid("User", world.alice));
    assert_eq!(second["author"]["id"], gid("User", world.instructor));
    assert_eq!(second["comment"]["replyCount"], 2);
    assert_eq!(second["post"]["commentCount"], 3);

    // Bob answers the instructor's reply: still under the root, answering the instructor.
    let third = create_reply(&app, &bob, &gid("Reply", second_id), "reply 3").await;
    assert_eq!(third["comment"]["id"], gid("Comment", root_id));
    assert_eq!(third["replyTo"]["id"], gid("User", world.instructor));
    assert_eq!(third["comment"]["replyCount"], 3);
    assert_eq!(third["post"]["commentCount"], 4);

    assert_eq!(reply_ids(&app, &bob, root_id).await, vec![first_id, second_id, id_of(&third)]);
    assert_eq!(comment(&app, &bob, root_id).await["replyCount"], 3);
    assert_eq!(comment_count(&app, &bob, post_id).await, 4);
    assert_eq!(top_level_ids(&app, &bob, post_id).await, vec![root_id]);
    // In SQL: the root counts all three; replies count nothing and point at the root.
    assert_eq!(sql_reply_count(&app, root_id).await, 3);
    assert_eq!(sql_reply_count(&app, first_id).await, 0);
    assert_eq!(sql_reply_count(&app, second_id).await, 0);
    assert_eq!(sql_comment_count(&app, post_id).await, 4);
    let parent = app.scalar_i64("SELECT parent_id AS v FROM comments WHERE id = $1", [second_id.into()]).await;
    assert_eq!(parent, root_id);
    let reply_to = app.scalar_i64("SELECT reply_to_user_id AS v FROM comments WHERE id = $1", [second_id.into()]).await;
    assert_eq!(reply_to, world.alice);

    // A reply's id under the Comment kind (and vice versa) names nothing.
    let response = app
        .gql(
            Some(&bob),
            "mutation($c: ID!) { createReply(commentId: $c, body: \"x\") { id } }",
            json!({ "c": gid("Comment", first_id) }),
        )
        .await;
    assert_code(&response, "NOT_FOUND");
    assert_eq!(sql_reply_count(&app, root_id).await, 3);
    assert_eq!(sql_comment_count(&app, post_id).await, 4);
}

#[tokio::test]
async fn deleted_post_is_hidden_and_refuses_interaction() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let bob = app.token(world.bob);
    let post_id = app.create_post(&alice, world.course, "doomed").await;
    let kept = app.create_post(&alice, world.course, "kept").await;
    let comment_id = id_of(&create_comment(&app, &bob, post_id, "c").await);
    let reply_id = id_of(&create_reply(&app, &alice, &gid("Comment", comment_id), "r").await);
    app.gql_ok(
        Some(&bob),
        "mutation($p: ID!) { likePost(postId: $p) { likeCount } }",
        json!({ "p": gid("Post", post_id) }),
    )
    .await;

    let response = delete_post(&app, &alice, post_id).await;
    assert!(response.get("errors").is_none(), "{response}");
    assert_eq!(response["data"]["deletePost"]["deletedId"], gid("Post", post_id));

    assert_eq!(course_post_ids(&app, &bob, world.course).await, vec![kept]);
    let pid = json!({ "p": gid("Post", post_id) });
    for query in [
        "query($p: ID!) { post(id: $p) { id } }",
        "query($p: ID!) { node(id: $p) { id } }",
        "mutation($p: ID!) { likePost(postId: $p) { likeCount } }",
        "mutation($p: ID!) { unlikePost(postId: $p) { likeCount } }",
        "mutation($p: ID!) { createComment(postId: $p, body: \"late\") { id } }",
        "mutation($p: ID!) { editPost(postId: $p, title: \"new\") { id } }",
    ] {
        for token in [&alice, &bob] {
            let response = app.gql(Some(token), query, pid.clone()).await;
            assert_code(&response, "NOT_FOUND");
        }
    }
    // Its comments and replies went with it.
    for (query, id) in [
        ("mutation($c: ID!) { createReply(commentId: $c, body: \"late\") { id } }", gid("Comment", comment_id)),
        ("mutation($c: ID!) { createReply(commentId: $c, body: \"late\") { id } }", gid("Reply", reply_id)),
        ("mutation($c: ID!) { likeComment(commentId: $c) { likeCount } }", gid("Comment", comment_id)),
        ("query($c: ID!) { node(id: $c) { id } }", gid("Comment", comment_id)),
    ] {
        let response = app.gql(Some(&bob), query, json!({ "c": id })).await;
        assert_code(&response, "NOT_FOUND");
    }
    // Deleting again: NOT_FOUND.
    assert_code(&delete_post(&app, &alice, post_id).await, "NOT_FOUND");

    // Nothing about its likes or comments changed.
    let likes = app.scalar_i64("SELECT like_count::bigint AS v FROM posts WHERE id = $1", [post_id.into()]).await;
    assert_eq!(likes, 1);
    let rows = app.scalar_i64("SELECT count(*) AS v FROM post_likes WHERE post_id = $1", [post_id.into()]).await;
    assert_eq!(rows, 1);
    assert_eq!(sql_comment_count(&app, post_id).await, 2);
    let comment_rows = app.scalar_i64("SELECT count(*) AS v FROM comments WHERE post_id = $1", [post_id.into()]).await;
    assert_eq!(comment_rows, 2);
    assert_eq!(sql_reply_count(&app, comment_id).await, 1);
}

#[tokio::test]
async fn deleting_a_root_comment_hides_it_and_its_replies() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let bob = app.token(world.bob);
    let post_id = app.create_post(&alice, world.course, "q").await;
    let root_id = id_of(&create_comment(&app, &bob, post_id, "root").await);
    let other_id = id_of(&create_comment(&app, &alice, post_id, "other").await);
    let r1 = id_of(&create_reply(&app, &alice, &gid("Comment", root_id), "r1").await);
    let r2 = id_of(&create_reply(&app, &bob, &gid("Reply", r1), "r2").await);
    let r3 = id_of(&create_reply(&app, &alice, &gid("Comment", root_id), "r3").await);
    let other_reply = id_of(&create_reply(&app, &bob, &gid("Comment", other_id), "o").await);
    assert_eq!(comment_count(&app, &bob, post_id).await, 6);

    let response = delete_comment(&app, &bob, &gid("Comment", root_id)).await;
    assert!(response.get("errors").is_none(), "{response}");
    assert_eq!(response["data"]["deleteComment"]["deletedId"], gid("Comment", root_id));

    // 1 (the root) + 3 replies gone; the other thread untouched.
    assert_eq!(comment_count(&app, &bob, post_id).await, 2);
    assert_eq!(sql_comment_count(&app, post_id).await, 2);
    assert_eq!(top_level_ids(&app, &bob, post_id).await, vec![other_id]);
    assert_eq!(reply_ids(&app, &bob, other_id).await, vec![other_reply]);
    assert_eq!(sql_reply_count(&app, other_id).await, 1);
    let live_replies = app
        .scalar_i64("SELECT count(*) AS v FROM comments WHERE parent_id = $1 AND deleted_at IS NULL", [root_id.into()])
        .await;
    assert_eq!(live_replies, 0, "replies are soft-deleted with the root");

    let cases = [
        ("mutation($c: ID!) { createReply(commentId: $c, body: \"late\") { id } }", gid("Comment", root_id)),
        ("mutation($c: ID!) { createReply(commentId: $c, body: \"late\") { id } }", gid("Reply", r2)),
        ("mutation($c: ID!) { likeComment(commentId: $c) { likeCount } }", gid("Comment", root_id)),
        ("mutation($c: ID!) { likeComment(commentId: $c) { likeCount } }", gid("Reply", r3)),
        ("mutation($c: ID!) { editComment(commentId: $c, body: \"new\") { id } }", gid("Comment", root_id)),
        ("query($c: ID!) { node(id: $c) { id } }", gid("Comment", root_id)),
        ("query($c: ID!) { node(id: $c) { id } }", gid("Reply", r1)),
    ];
    for (query, id) in cases {
        let response = app.gql(Some(&bob), query, json!({ "c": id })).await;
        assert_code(&response, "NOT_FOUND");
    }

    // Twice: NOT_FOUND, and the counters stay put.
    assert_code(&delete_comment(&app, &bob, &gid("Comment", root_id)).await, "NOT_FOUND");
    assert_code(&delete_comment(&app, &alice, &gid("Reply", r1)).await, "NOT_FOUND");
    assert_eq!(comment_count(&app, &bob, post_id).await, 2);
    assert_eq!(sql_comment_count(&app, post_id).await, 2);
    let likes = app
        .scalar_i64(
            "SELECT count(*) AS v FROM comment_likes WHERE comment_id = ANY(ARRAY[$1, $2]::bigint[])",
            [root_id.into(), r3.into()],
        )
        .await;
    assert_eq!(likes, 0);
}

#[tokio::test]
async fn deleting_a_root_after_one_of_its_replies_counts_only_live_replies() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let bob = app.token(world.bob);
    let post_id = app.create_post(&alice, world.course, "q").await;
    let root_id = id_of(&create_comment(&app, &bob, post_id, "root").await);
    let r1 = id_of(&create_reply(&app, &alice, &gid("Comment", root_id), "r1").await);
    create_reply(&app, &alice, &gid("Reply", r1), "r2").await;
    assert_eq!(comment_count(&app, &bob, post_id).await, 3);

    let response = delete_comment(&app, &alice, &gid("Reply", r1)).await;
    assert!(response.get("errors").is_none(), "{response}");
    assert_eq!(comment_count(&app, &bob, post_id).await, 2);
    // The root goes with its one remaining reply: 2 fewer, not 3.
    let response = delete_comment(&app, &bob, &gid("Comment", root_id)).await;
    assert!(response.get("errors").is_none(), "{response}");
    assert_eq!(comment_count(&app, &bob, post_id).await, 0);
    assert_eq!(sql_comment_count(&app, post_id).await, 0);
    // And a new comment counts from there.
    create_comment(&app, &bob, post_id, "fresh").await;
    assert_eq!(sql_comment_count(&app, post_id).await, 1);
}

#[tokio::test]
async fn deleting_a_reply_decrements_the_root_and_the_post_by_one() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let bob = app.token(world.bob);
    let post_id = app.create_post(&alice, world.course, "q").await;
    let root_id = id_of(&create_comment(&app, &bob, post_id, "root").await);
    let r1 = id_of(&create_reply(&app, &alice, &gid("Comment", root_id), "r1").await);
    let r2 = id_of(&create_reply(&app, &bob, &gid("Reply", r1), "r2").await);
    assert_eq!(comment(&app, &bob, root_id).await["replyCount"], 2);
    assert_eq!(comment_count(&app, &bob, post_id).await, 3);

    let response = delete_comment(&app, &alice, &gid("Reply", r1)).await;
    assert!(response.get("errors").is_none(), "{response}");
    assert_eq!(response["data"]["deleteComment"]["deletedId"], gid("Reply", r1));
    let root = comment(&app, &bob, root_id).await;
    assert_eq!(root["replyCount"], 1);
    assert_eq!(ids(&root["replies"]["nodes"]), vec![r2]);
    assert_eq!(comment_count(&app, &bob, post_id).await, 2);
    assert_eq!(sql_reply_count(&app, root_id).await, 1);
    assert_eq!(sql_comment_count(&app, post_id).await, 2);
    // The reply that answered the deleted one stays, and can still be answered.
    let r3 = create_reply(&app, &alice, &gid("Reply", r2), "r3").await;
    assert_eq!(r3["comment"]["id"], gid("Comment", root_id));
    assert_eq!(r3["comment"]["replyCount"], 2);
    assert_eq!(r3["post"]["commentCount"], 3);
    // Answering the deleted reply is NOT_FOUND and changes no counter.
    let response = app
        .gql(
            Some(&bob),
            "mutation($c: ID!) { createReply(commentId: $c, body: \"x\") { id } }",
            json!({ "c": gid("Reply", r1) }),
        )
        .await;
    assert_code(&response, "NOT_FOUND");
    let response = app
        .gql(
            Some(&bob),
            "mutation($c: ID!) { likeComment(commentId: $c) { likeCount } }",
            json!({ "c": gid("Reply", r1) }),
        )
        .await;
    assert_code(&response, "NOT_FOUND");

    // Deleting it again: NOT_FOUND, counters unchanged.
    assert_code(&delete_comment(&app, &alice, &gid("Reply", r1)).await, "NOT_FOUND");
    assert_eq!(sql_reply_count(&app, root_id).await, 2);
    assert_eq!(sql_comment_count(&app, post_id).await, 3);
    assert_eq!(comment(&app, &bob, root_id).await["replyCount"], 2);
    assert_eq!(comment_count(&app, &bob, post_id).await, 3);
}

#[tokio::test]
async fn edit_post_is_for_its_author_only() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let bob = app.token(world.bob);
    let prof = app.token(world.instructor);
    let post_id = app.create_post(&alice, world.course, "original").await;
    let before = post(&app, &alice, post_id).await;
    assert!(before["editedAt"].is_null());

    let edit = "mutation($p: ID!, $t: String, $b: String) {
                  editPost(postId: $p, title: $t, body: $b) { id title body editedAt createdAt } }";
    for token in [&bob, &prof] {
        let response =
            app.gql(Some(token), edit, json!({ "p": gid("Post", post_id), "t": "hijacked", "b": "x" })).await;
        assert_code(&response, "FORBIDDEN");
    }
    let outsider = app.token(world.outsider);
    let response = app.gql(Some(&outsider), edit, json!({ "p": gid("Post", post_id), "t": "hijacked" })).await;
    assert_code(&response, "FORBIDDEN");
    assert_eq!(post(&app, &alice, post_id).await, before, "nothing changed");

    // The author changes only the title: the body stays.
    let data = app.gql_ok(Some(&alice), edit, json!({ "p": gid("Post", post_id), "t": "  better title " })).await;
    let edited = &data["editPost"];
    assert_eq!(edited["title"], "better title");
    assert_eq!(edited["body"], "body", "as create_post wrote it");
    let edited_at = edited["editedAt"].as_str().expect("editedAt set");
    assert!(edited_at >= edited["createdAt"].as_str().unwrap(), "{edited}");
    let data = app.gql_ok(Some(&alice), edit, json!({ "p": gid("Post", post_id), "b": "new body" })).await;
    assert_eq!(data["editPost"]["title"], "better title");
    assert_eq!(data["editPost"]["body"], "new body");
    let now = post(&app, &bob, post_id).await;
    assert_eq!(now["title"], "better title");
    assert_eq!(now["body"], "new body");
    assert!(now["editedAt"].as_str().expect("editedAt") >= edited_at);

    // Nothing to change is refused.
    let response = app.gql(Some(&alice), edit, json!({ "p": gid("Post", post_id) })).await;
    assert_code(&response, "BAD_USER_INPUT");
}

#[tokio::test]
async fn edit_comment_is_for_its_author_only() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let bob = app.token(world.bob);
    let prof = app.token(world.instructor);
    let post_id = app.create_post(&alice, world.course, "q").await;
    let root_id = id_of(&create_comment(&app, &bob, post_id, "root").await);
    let reply_id = id_of(&create_reply(&app, &alice, &gid("Comment", root_id), "reply").await);

    let edit = "mutation($c: ID!, $b: String!) { editComment(commentId: $c, body: $b) {
                  __typename id body editedAt createdAt
                  ... on Comment { replyCount }
                  ... on Reply { replyTo { id } comment { id } } } }";
    // 1 when the row still holds `body` and was never edited.
    let untouched = |id: i64, body: &'static str| {
        let app = &app;
        async move {
            app.scalar_i64(
                "SELECT (body = $2 AND edited_at IS NULL)::int::bigint AS v FROM comments WHERE id = $1",
                [id.into(), body.into()],
            )
            .await
        }
    };

    // Others, the instructor included, may not edit.
    for (token, target) in [
        (&alice, gid("Comment", root_id)),
        (&prof, gid("Comment", root_id)),
        (&bob, gid("Reply", reply_id)),
        (&prof, gid("Reply", reply_id)),
    ] {
        let response = app.gql(Some(token), edit, json!({ "c": target, "b": "hijacked" })).await;
        assert_code(&response, "FORBIDDEN");
    }
    assert_eq!(untouched(root_id, "root").await, 1, "root unchanged");
    assert_eq!(untouched(reply_id, "reply").await, 1, "reply unchanged");
    let root = comment(&app, &bob, root_id).await;
    assert_eq!(root["body"], "root");
    assert!(root["editedAt"].is_null());

    let data = app.gql_ok(Some(&bob), edit, json!({ "c": gid("Comment", root_id), "b": "root, edited" })).await;
    let edited = &data["editComment"];
    assert_eq!(edited["__typename"], "Comment");
    assert_eq!(edited["body"], "root, edited");
    assert_eq!(edited["replyCount"], 1);
    assert!(edited["editedAt"].as_str().unwrap() >= edited["createdAt"].as_str().unwrap());
    let root = comment(&app, &alice, root_id).await;
    assert_eq!(root["body"], "root, edited");
    assert_eq!(root["editedAt"], edited["editedAt"]);

    let data = app.gql_ok(Some(&alice), edit, json!({ "c": gid("Reply", reply_id), "b": "reply, edited" })).await;
    let edited = &data["editComment"];
    assert_eq!(edited["__typename"], "Reply");
    assert_eq!(edited["id"], gid("Reply", reply_id));
    assert_eq!(edited["body"], "reply, edited");
    assert!(!edited["editedAt"].is_null());
    assert_eq!(edited["replyTo"]["id"], gid("User", world.bob));
    assert_eq!(edited["comment"]["id"], gid("Comment", root_id));
    let body = app
        .scalar_i64(
            "SELECT (body = 'reply, edited' AND edited_at IS NOT NULL)::int::bigint AS v FROM comments WHERE id = $1",
            [reply_id.into()],
        )
        .await;
    assert_eq!(body, 1);
    // Editing changes no counter.
    assert_eq!(sql_reply_count(&app, root_id).await, 1);
    assert_eq!(sql_comment_count(&app, post_id).await, 2);
}

#[tokio::test]
async fn instructors_may_delete_student_content_other_students_may_not() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let bob = app.token(world.bob);
    let prof = app.token(world.instructor);
    let outsider = app.token(world.outsider);
    let post_id = app.create_post(&alice, world.course, "alice's").await;
    let second_post = app.create_post(&alice, world.course, "alice's too").await;
    let root_id = id_of(&create_comment(&app, &alice, post_id, "root").await);
    let reply_id = id_of(&create_reply(&app, &alice, &gid("Comment", root_id), "reply").await);

    // Bob (another student) and an outsider: FORBIDDEN, and everything stays.
    for token in [&bob, &outsider] {
        assert_code(&delete_post(&app, token, second_post).await, "FORBIDDEN");
        assert_code(&delete_comment(&app, token, &gid("Reply", reply_id)).await, "FORBIDDEN");
        assert_code(&delete_comment(&app, token, &gid("Comment", root_id)).await, "FORBIDDEN");
    }
    assert_eq!(course_post_ids(&app, &bob, world.course).await, vec![second_post, post_id]);
    assert_eq!(reply_ids(&app, &bob, root_id).await, vec![reply_id]);
    assert_eq!(sql_comment_count(&app, post_id).await, 2);
    assert_eq!(sql_reply_count(&app, root_id).await, 1);

    // The instructor may delete each of them.
    let response = delete_comment(&app, &prof, &gid("Reply", reply_id)).await;
    assert_eq!(response["data"]["deleteComment"]["deletedId"], gid("Reply", reply_id), "{response}");
    assert_eq!(sql_reply_count(&app, root_id).await, 0);
    assert_eq!(sql_comment_count(&app, post_id).await, 1);
    let response = delete_comment(&app, &prof, &gid("Comment", root_id)).await;
    assert_eq!(response["data"]["deleteComment"]["deletedId"], gid("Comment", root_id), "{response}");
    assert_eq!(sql_comment_count(&app, post_id).await, 0);
    assert!(top_level_ids(&app, &bob, post_id).await.is_empty());
    let response = delete_post(&app, &prof, second_post).await;
    assert_eq!(response["data"]["deletePost"]["deletedId"], gid("Post", second_post), "{response}");
    assert_eq!(course_post_ids(&app, &bob, world.course).await, vec![post_id]);

    // Authors may delete their own.
    let bobs = id_of(&create_comment(&app, &bob, post_id, "mine").await);
    let response = delete_comment(&app, &bob, &gid("Comment", bobs)).await;
    assert!(response.get("errors").is_none(), "{response}");
    let response = delete_post(&app, &alice, post_id).await;
    assert!(response.get("errors").is_none(), "{response}");
    assert!(course_post_ids(&app, &bob, world.course).await.is_empty());
}

#[tokio::test]
async fn post_likes_are_idempotent_and_never_negative() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let bob = app.token(world.bob);
    let prof = app.token(world.instructor);
    let post_id = app.create_post(&alice, world.course, "likeable").await;
    let vars = json!({ "p": gid("Post", post_id) });
    let like = "mutation($p: ID!) { likePost(postId: $p) { id likeCount likedByMe } }";
    let unlike = "mutation($p: ID!) { unlikePost(postId: $p) { id likeCount likedByMe } }";
    let sql_likes = || async {
        let counter = app.scalar_i64("SELECT like_count::bigint AS v FROM posts WHERE id = $1", [post_id.into()]).await;
        let rows = app.scalar_i64("SELECT count(*) AS v FROM post_likes WHERE post_id = $1", [post_id.into()]).await;
        assert_eq!(counter, rows, "counter agrees with the rows");
        counter
    };

    for _ in 0..2 {
        let data = app.gql_ok(Some(&bob), like, vars.clone()).await;
        assert_eq!(data["likePost"]["likeCount"], 1);
        assert_eq!(data["likePost"]["likedByMe"], true);
    }
    assert_eq!(sql_likes().await, 1);
    // Seen by others: counted, but not liked by them.
    let seen = post(&app, &alice, post_id).await;
    assert_eq!(seen["likeCount"], 1);
    assert_eq!(seen["likedByMe"], false);
    assert_eq!(post(&app, &bob, post_id).await["likedByMe"], true);

    let data = app.gql_ok(Some(&prof), like, vars.clone()).await;
    assert_eq!(data["likePost"]["likeCount"], 2);
    // Unliking what one never liked changes nothing.
    let data = app.gql_ok(Some(&alice), unlike, vars.clone()).await;
    assert_eq!(data["unlikePost"]["likeCount"], 2);
    assert_eq!(data["unlikePost"]["likedByMe"], false);

    for _ in 0..2 {
        let data = app.gql_ok(Some(&bob), unlike, vars.clone()).await;
        assert_eq!(data["unlikePost"]["likeCount"], 1);
        assert_eq!(data["unlikePost"]["likedByMe"], false);
    }
    for _ in 0..3 {
        let data = app.gql_ok(Some(&prof), unlike, vars.clone()).await;
        assert_eq!(data["unlikePost"]["likeCount"], 0);
        assert_eq!(data["unlikePost"]["likedByMe"], false);
    }
    assert_eq!(sql_likes().await, 0);
    let seen = post(&app, &bob, post_id).await;
    assert_eq!(seen["likeCount"], 0);
    assert_eq!(seen["likedByMe"], false);
    // And a like after all that counts from zero.
    let data = app.gql_ok(Some(&bob), like, vars.clone()).await;
    assert_eq!(data["likePost"]["likeCount"], 1);
    assert_eq!(sql_likes().await, 1);

    // Outsiders may not like.
    let outsider = app.token(world.outsider);
    assert_code(&app.gql(Some(&outsider), like, vars.clone()).await, "FORBIDDEN");
    assert_eq!(sql_likes().await, 1);
}

#[tokio::test]
async fn comment_likes_are_idempotent_on_comments_and_replies() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let bob = app.token(world.bob);
    let post_id = app.create_post(&alice, world.course, "q").await;
    let root_id = id_of(&create_comment(&app, &bob, post_id, "root").await);
    let reply_id = id_of(&create_reply(&app, &alice, &gid("Comment", root_id), "reply").await);

    let toggle = |like: bool| {
        let field = if like { "likeComment" } else { "unlikeComment" };
        format!(
            "mutation($c: ID!) {{ r: {field}(commentId: $c) {{
               __typename id likeCount likedByMe
               ... on Reply {{ comment {{ id likeCount }} }}
               ... on Comment {{ replyCount }} }} }}"
        )
    };
    let sql_likes = |id: i64| {
        let app = &app;
        async move {
            let counter =
                app.scalar_i64("SELECT like_count::bigint AS v FROM comments WHERE id = $1", [id.into()]).await;
            let rows =
                app.scalar_i64("SELECT count(*) AS v FROM comment_likes WHERE comment_id = $1", [id.into()]).await;
            assert_eq!(counter, rows, "counter agrees with the rows");
            counter
        }
    };
    let reply = json!({ "c": gid("Reply", reply_id) });
    let root = json!({ "c": gid("Comment", root_id) });

    // A reply: liked twice by Bob, once by Alice.
    for _ in 0..2 {
        let data = app.gql_ok(Some(&bob), &toggle(true), reply.clone()).await;
        assert_eq!(data["r"]["__typename"], "Reply");
        assert_eq!(data["r"]["id"], gid("Reply", reply_id));
        assert_eq!(data["r"]["likeCount"], 1);
        assert_eq!(data["r"]["likedByMe"], true);
        assert_eq!(data["r"]["comment"]["likeCount"], 0, "the root is not liked");
    }
    let data = app.gql_ok(Some(&alice), &toggle(true), reply.clone()).await;
    assert_eq!(data["r"]["likeCount"], 2);
    assert_eq!(sql_likes(reply_id).await, 2);
    assert_eq!(sql_likes(root_id).await, 0);
    // The replies list shows the count and the viewer's own flag.
    let data = app
        .gql_ok(
            Some(&bob),
            "query($id: ID!) { node(id: $id) { ... on Comment {
               replies { nodes { id likeCount likedByMe } } } } }",
            json!({ "id": gid("Comment", root_id) }),
        )
        .await;
    assert_eq!(
        data["node"]["replies"]["nodes"],
        json!([{ "id": gid("Reply", reply_id), "likeCount": 2, "likedByMe": true }])
    );

    // A root comment.
    for _ in 0..2 {
        let data = app.gql_ok(Some(&alice), &toggle(true), root.clone()).await;
        assert_eq!(data["r"]["__typename"], "Comment");
        assert_eq!(data["r"]["likeCount"], 1);
        assert_eq!(data["r"]["likedByMe"], true);
        assert_eq!(data["r"]["replyCount"], 1);
    }
    assert_eq!(sql_likes(root_id).await, 1);

    // Unlikes: repeated, and by someone who never liked, never go below zero.
    for _ in 0..2 {
        let data = app.gql_ok(Some(&bob), &toggle(false), root.clone()).await;
        assert_eq!(data["r"]["likeCount"], 1);
        assert_eq!(data["r"]["likedByMe"], false);
    }
    for _ in 0..3 {
        let data = app.gql_ok(Some(&alice), &toggle(false), root.clone()).await;
        assert_eq!(data["r"]["likeCount"], 0);
        assert_eq!(data["r"]["likedByMe"], false);
    }
    assert_eq!(sql_likes(root_id).await, 0);
    for token in [&bob, &bob, &alice, &alice, &alice] {
        app.gql_ok(Some(token), &toggle(false), reply.clone()).await;
    }
    assert_eq!(sql_likes(reply_id).await, 0);
    let data = app.gql_ok(Some(&bob), &toggle(false), reply.clone()).await;
    assert_eq!(data["r"]["likeCount"], 0);
    assert_eq!(data["r"]["likedByMe"], false);

    // The reply's id under the Comment kind is not the reply.
    let response = app.gql(Some(&bob), &toggle(true), json!({ "c": gid("Comment", reply_id) })).await;
    assert_code(&response, "NOT_FOUND");
    assert_eq!(sql_likes(reply_id).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_replies_and_deletes_keep_counters_equal_to_live_rows() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let bob = app.token(world.bob);
    let post_id = app.create_post(&alice, world.course, "q").await;
    let doomed = id_of(&create_comment(&app, &bob, post_id, "doomed").await);
    let kept = id_of(&create_comment(&app, &bob, post_id, "kept").await);
    let doomed_reply = id_of(&create_reply(&app, &alice, &gid("Comment", doomed), "r").await);
    let kept_reply = id_of(&create_reply(&app, &alice, &gid("Comment", kept), "r").await);

    const REPLY: &str = "mutation($c: ID!) { createReply(commentId: $c, body: \"racing\") { id } }";
    const DELETE: &str = "mutation($c: ID!) { deleteComment(commentId: $c) { deletedId } }";
    // Replies to both threads (to roots and to replies), the doomed root's delete in the middle,
    // and the kept thread's first reply deleted twice at once (by its author and the instructor).
    let mut jobs: Vec<(String, &'static str, String)> = Vec::new();
    for i in 0..24 {
        let target = match i % 4 {
            0 => gid("Comment", doomed),
            1 => gid("Reply", doomed_reply),
            _ => gid("Comment", kept),
        };
        jobs.push((bob.clone(), REPLY, target));
        if i == 12 {
            jobs.push((bob.clone(), DELETE, gid("Comment", doomed)));
            jobs.push((alice.clone(), DELETE, gid("Reply", kept_reply)));
            jobs.push((app.token(world.instructor), DELETE, gid("Reply", kept_reply)));
        }
    }
    let barrier = Arc::new(Barrier::new(jobs.len()));
    let tasks: Vec<_> = jobs
        .into_iter()
        .map(|(token, query, target)| {
            let (url, barrier) = (app.url("/graphql"), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                (query, send_alone(url, token, query, json!({ "c": target })).await)
            })
        })
        .collect();
    let mut kept_deletes = 0;
    for task in tasks {
        let (query, response) = task.await.expect("task");
        if response.get("errors").is_some() {
            // The only acceptable failure: the target is gone.
            assert_code(&response, "NOT_FOUND");
        } else if query == DELETE && response["data"]["deleteComment"]["deletedId"] == gid("Reply", kept_reply) {
            kept_deletes += 1;
        }
    }
    assert_eq!(kept_deletes, 1, "exactly one of two racing deletes wins");

    // Counters equal the live rows they count.
    let live = app
        .scalar_i64("SELECT count(*) AS v FROM comments WHERE post_id = $1 AND deleted_at IS NULL", [post_id.into()])
        .await;
    assert_eq!(sql_comment_count(&app, post_id).await, live);
    assert_eq!(comment_count(&app, &bob, post_id).await, live);
    let kept_live = app
        .scalar_i64("SELECT count(*) AS v FROM comments WHERE parent_id = $1 AND deleted_at IS NULL", [kept.into()])
        .await;
    assert_eq!(sql_reply_count(&app, kept).await, kept_live);
    // 12 racing replies to the kept root, its first reply gone.
    assert_eq!(kept_live, 12);
    assert_eq!(reply_ids(&app, &bob, kept).await.len() as i64, kept_live);
    // No reply outlived its root: every reply that landed under the doomed root was deleted with it.
    let orphans = app
        .scalar_i64(
            "SELECT count(*) AS v FROM comments c JOIN comments r ON r.id = c.parent_id \
             WHERE c.deleted_at IS NULL AND r.deleted_at IS NOT NULL",
            [],
        )
        .await;
    assert_eq!(orphans, 0);
    assert_eq!(top_level_ids(&app, &bob, post_id).await, vec![kept]);
    assert_eq!(live, 1 + kept_live);
}

/// A delete's payload carries the parents as they are after it, so a normalized client cache
/// updates `commentCount` and `replyCount` from the answer alone: the post for a comment or a
/// reply, and the root comment for a reply.
#[tokio::test]
async fn a_delete_returns_the_parents_with_their_new_counts() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let post = app.create_post(&alice, world.course, "thread").await;
    let first = create_comment(&app, &alice, post, "first").await;
    let second = create_comment(&app, &alice, post, "second").await;
    let reply = create_reply(&app, &alice, first["id"].as_str().expect("id"), "a reply").await;
    assert_eq!(reply["post"]["commentCount"], 3, "comments and replies together: {reply}");
    assert_eq!(reply["comment"]["replyCount"], 1);

    const DELETE: &str = "mutation($id: ID!) { deleteComment(commentId: $id) { deletedId \
        post { id commentCount } comment { id replyCount } } }";
    let deleted = app.gql_ok(Some(&alice), DELETE, json!({ "id": reply["id"] })).await["deleteComment"].clone();
    assert_eq!(deleted["deletedId"], reply["id"]);
    assert_eq!(deleted["post"], json!({ "id": gid("Post", post), "commentCount": 2 }), "{deleted}");
    assert_eq!(deleted["comment"], json!({ "id": first["id"], "replyCount": 0 }), "{deleted}");

    let deleted = app.gql_ok(Some(&alice), DELETE, json!({ "id": second["id"] })).await["deleteComment"].clone();
    assert_eq!(deleted["post"]["commentCount"], 1, "{deleted}");
    assert_eq!(deleted["comment"], Json::Null, "a comment has no parent comment");

    let deleted = app
        .gql_ok(
            Some(&alice),
            "mutation($id: ID!) { deletePost(postId: $id) { deletedId post { id } comment { id } } }",
            json!({ "id": gid("Post", post) }),
        )
        .await["deletePost"]
        .clone();
    assert_eq!(deleted, json!({ "deletedId": gid("Post", post), "post": null, "comment": null }));
}
