//! Questions and staff against real PostgreSQL and Redis: accepting, changing and clearing an
//! answer (the asker or staff), marking resolved, endorsing posts, comments and replies, pins
//! and their limit, a course's tags on posts (attached, renamed, deleted), making a private
//! question public, the course's anonymity, and what only staff may do: every refusal has its
//! code and changes nothing (read back). Live: `courseActivity` hears POST_UPDATED,
//! COMMENT_UPDATED and REPLY_UPDATED with the object's new state. Where a liked object is
//! accepted or endorsed, the test runs in each like mode: its `likeCount` and `likedByMe` stay
//! right.

use std::time::Duration;

use course_forum::testing::config::LikeMode;
use course_forum::testing::worker::LikeWorker;
use serde_json::{Value, json};

use crate::common::snapshot::{assert_no_failures, snapshot};
use crate::common::ws::GqlSocket;
use crate::common::{TestApp, World, error_code, gid, raw_id};

/// What a test reads of a question after each step.
const QUESTION: &str = "query($p: ID!) { post(id: $p) { id kind resolved pinned private \
    acceptedAnswer { id body likeCount likedByMe isAcceptedAnswer } endorsement { by { handle } at } \
    tags { id name } } }";

const ACCEPT: &str = "mutation($p: ID!, $c: ID) { acceptAnswer(postId: $p, commentId: $c) { id resolved \
    acceptedAnswer { id body likeCount likedByMe isAcceptedAnswer } } }";

const ENDORSE: &str = "mutation($id: ID!, $e: Boolean!) { endorse(id: $id, endorsed: $e) { __typename id \
    endorsement { by { handle } at } ... on Comment { likeCount likedByMe isAcceptedAnswer } \
    ... on Reply { likeCount likedByMe } ... on Post { likeCount likedByMe } } }";

const PIN: &str = "mutation($p: ID!, $on: Boolean!) { pinPost(postId: $p, pinned: $on) { id pinned } }";

/// A post of `kind` (QUESTION, DISCUSSION, ANNOUNCEMENT) by `user`; its database id.
async fn post_of_kind(app: &TestApp, user: i64, course: i64, kind: &str, title: &str) -> i64 {
    let data = app
        .gql_ok(
            Some(&app.token(user)),
            "mutation($c: ID!, $t: String!, $k: PostKind!) { createPost(courseId: $c, title: $t, body: \"b\", kind: $k) { id } }",
            json!({ "c": gid("Course", course), "t": title, "k": kind }),
        )
        .await;
    raw_id(data["createPost"]["id"].as_str().expect("post id"))
}

async fn ask(app: &TestApp, user: i64, course: i64, title: &str) -> i64 {
    post_of_kind(app, user, course, "QUESTION", title).await
}

/// The question as `user` reads it.
async fn question(app: &TestApp, user: i64, post: i64) -> Value {
    app.gql_ok(Some(&app.token(user)), QUESTION, json!({ "p": gid("Post", post) })).await["post"].clone()
}

/// Runs `query` as `user`, expecting a refusal with `code`, a null field and nothing changed
/// in the database; a problem is pushed to `failures`.
async fn refused(
    app: &TestApp,
    user: i64,
    name: &str,
    query: &str,
    vars: Value,
    code: &str,
    failures: &mut Vec<String>,
) {
    let before = snapshot(app).await;
    let response = app.gql(Some(&app.token(user)), query, vars).await;
    if error_code(&response).as_deref() != Some(code) {
        failures.push(format!("{name}: expected {code}, got {response}"));
    } else if response["errors"][0]["message"].as_str().is_none_or(str::is_empty) {
        failures.push(format!("{name}: no message: {response}"));
    } else if response["data"].as_object().is_some_and(|data| data.values().any(|v| !v.is_null())) {
        failures.push(format!("{name}: data with the refusal: {response}"));
    }
    let after = snapshot(app).await;
    if after != before {
        failures.push(format!("{name}: database changed\n  before {before:?}\n  after  {after:?}"));
    }
}

/// A buffered app's like worker, stepped by hand (`settle_likes`); none in sync mode. One per
/// test: a second would wait for the first one's lease.
async fn like_worker(app: &TestApp) -> Option<LikeWorker> {
    match app.state.settings.like_mode {
        LikeMode::Buffered => Some(app.worker().await),
        _ => None,
    }
}

/// Lets the worker write the likes waiting in the streams (sync mode wrote them already).
async fn settle_likes(worker: &Option<LikeWorker>) {
    if let Some(worker) = worker {
        worker.drain().await.expect("the like worker drains the streams");
    }
}

/// Likes a post, comment or reply (its global id) as `user`.
async fn like(app: &TestApp, user: i64, id: &str) {
    let query = if id == gid("Post", raw_id(id)) {
        "mutation($id: ID!) { likePost(postId: $id) { id } }"
    } else {
        "mutation($id: ID!) { likeComment(commentId: $id) { id } }"
    };
    app.gql_ok(Some(&app.token(user)), query, json!({ "id": id })).await;
}

async fn the_asker_and_staff_accept_change_and_clear_an_answer(mode: LikeMode) {
    let app = TestApp::spawn_in(mode).await;
    let w = World::create(&app).await;
    let post = ask(&app, w.alice, w.course, "how do closures capture?").await;
    let by_bob = app.create_comment(&app.token(w.bob), post, "by reference").await;
    let by_prof = app.create_comment(&app.token(w.instructor), post, "it depends").await;
    let worker = like_worker(&app).await;
    like(&app, w.bob, &gid("Comment", by_bob)).await;
    settle_likes(&worker).await;
    assert_eq!(question(&app, w.alice, post).await["resolved"], false);

    let alice = app.token(w.alice);
    let data = app.gql_ok(Some(&alice), ACCEPT, json!({ "p": gid("Post", post), "c": gid("Comment", by_bob) })).await;
    let accepted = &data["acceptAnswer"];
    assert_eq!(accepted["resolved"], true, "{data}");
    assert_eq!(
        accepted["acceptedAnswer"],
        json!({ "id": gid("Comment", by_bob), "body": "by reference", "likeCount": 1, "likedByMe": false,
                "isAcceptedAnswer": true })
    );
    // Bob's own like shows as his, on the accepted answer as on any comment.
    let seen_by_bob = question(&app, w.bob, post).await;
    assert_eq!(seen_by_bob["acceptedAnswer"]["likedByMe"], true, "{seen_by_bob}");
    assert_eq!(seen_by_bob["acceptedAnswer"]["likeCount"], 1, "{seen_by_bob}");

    // The asker changes their mind: the other comment is the answer, the first is not.
    let data = app.gql_ok(Some(&alice), ACCEPT, json!({ "p": gid("Post", post), "c": gid("Comment", by_prof) })).await;
    assert_eq!(data["acceptAnswer"]["acceptedAnswer"]["id"], gid("Comment", by_prof));
    let first = app
        .gql_ok(
            Some(&alice),
            "query($c: ID!) { node(id: $c) { ... on Comment { isAcceptedAnswer likeCount } } }",
            json!({ "c": gid("Comment", by_bob) }),
        )
        .await;
    assert_eq!(first["node"], json!({ "isAcceptedAnswer": false, "likeCount": 1 }));

    // Cleared: unresolved again.
    let data = app.gql_ok(Some(&alice), ACCEPT, json!({ "p": gid("Post", post), "c": null })).await;
    assert_eq!(data["acceptAnswer"], json!({ "id": gid("Post", post), "resolved": false, "acceptedAnswer": null }));

    // Staff accept on the asker's behalf, and clear it too.
    let prof = app.token(w.instructor);
    let data = app.gql_ok(Some(&prof), ACCEPT, json!({ "p": gid("Post", post), "c": gid("Comment", by_bob) })).await;
    assert_eq!(data["acceptAnswer"]["acceptedAnswer"]["id"], gid("Comment", by_bob));
    // Liking the accepted answer moves its count as any like does.
    like(&app, w.alice, &gid("Comment", by_bob)).await;
    settle_likes(&worker).await;
    let read = question(&app, w.alice, post).await;
    assert_eq!(read["acceptedAnswer"]["likeCount"], 2, "{read}");
    assert_eq!(read["acceptedAnswer"]["likedByMe"], true, "{read}");
    assert_eq!(read["resolved"], true);
    let data = app.gql_ok(Some(&prof), ACCEPT, json!({ "p": gid("Post", post), "c": null })).await;
    assert_eq!(data["acceptAnswer"]["resolved"], false);
    assert_eq!(question(&app, w.bob, post).await["acceptedAnswer"], Value::Null);
}

in_each_like_mode!(the_asker_and_staff_accept_change_and_clear_an_answer);

#[tokio::test]
async fn an_answer_that_cannot_be_accepted_is_refused_and_changes_nothing() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    let post = ask(&app, w.alice, w.course, "question").await;
    let other = ask(&app, w.alice, w.course, "another question").await;
    let discussion = post_of_kind(&app, w.alice, w.course, "DISCUSSION", "chat").await;
    let comment = app.create_comment(&app.token(w.bob), post, "answer").await;
    let elsewhere = app.create_comment(&app.token(w.bob), other, "answer elsewhere").await;
    let on_discussion = app.create_comment(&app.token(w.bob), discussion, "chat answer").await;
    let reply = app.create_reply(&app.token(w.bob), &gid("Comment", comment), "a reply").await;
    let deleted = app.create_comment(&app.token(w.bob), post, "deleted").await;
    app.gql_ok(
        Some(&app.token(w.bob)),
        "mutation($c: ID!) { deleteComment(commentId: $c) { deletedId } }",
        json!({ "c": gid("Comment", deleted) }),
    )
    .await;
    let p = gid("Post", post);
    let mut failures = Vec::new();
    let cases = [
        ("someone else's question", w.bob, json!({ "p": p, "c": gid("Comment", comment) }), "FORBIDDEN"),
        ("someone else's question, clearing", w.bob, json!({ "p": p, "c": null }), "FORBIDDEN"),
        ("a reply's id", w.alice, json!({ "p": p, "c": gid("Reply", reply) }), "BAD_USER_INPUT"),
        ("a reply named as a comment", w.alice, json!({ "p": p, "c": gid("Comment", reply) }), "NOT_FOUND"),
        ("a comment of another question", w.alice, json!({ "p": p, "c": gid("Comment", elsewhere) }), "NOT_FOUND"),
        ("a deleted comment", w.alice, json!({ "p": p, "c": gid("Comment", deleted) }), "NOT_FOUND"),
        ("a comment that never was", w.alice, json!({ "p": p, "c": gid("Comment", 999_999) }), "NOT_FOUND"),
        ("a post's id as the comment", w.alice, json!({ "p": p, "c": p }), "BAD_USER_INPUT"),
        ("a malformed id", w.alice, json!({ "p": "nope", "c": null }), "BAD_USER_INPUT"),
        (
            "a discussion",
            w.alice,
            json!({ "p": gid("Post", discussion), "c": gid("Comment", on_discussion) }),
            "BAD_USER_INPUT",
        ),
        ("a non-member", w.outsider, json!({ "p": p, "c": gid("Comment", comment) }), "FORBIDDEN"),
    ];
    for (name, user, vars, code) in cases {
        refused(&app, user, name, ACCEPT, vars, code, &mut failures).await;
    }
    assert_no_failures(failures);
    let read = question(&app, w.alice, post).await;
    assert_eq!((&read["resolved"], &read["acceptedAnswer"]), (&json!(false), &Value::Null));
}

#[tokio::test]
async fn deleting_the_accepted_answer_reopens_the_question_unless_staff_resolved_it() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    let bob = app.token(w.bob);
    let post = ask(&app, w.alice, w.course, "question").await;
    let answer = app.create_comment(&bob, post, "answer").await;
    let alice = app.token(w.alice);
    app.gql_ok(Some(&alice), ACCEPT, json!({ "p": gid("Post", post), "c": gid("Comment", answer) })).await;
    // Read once, so the post cache and the course's page hold the resolved question.
    assert_eq!(question(&app, w.alice, post).await["resolved"], true);
    let data = app
        .gql_ok(
            Some(&bob),
            "mutation($c: ID!) { deleteComment(commentId: $c) { deletedId post { resolved acceptedAnswer { id } } } }",
            json!({ "c": gid("Comment", answer) }),
        )
        .await;
    assert_eq!(data["deleteComment"]["post"], json!({ "resolved": false, "acceptedAnswer": null }));
    let read = question(&app, w.bob, post).await;
    assert_eq!((&read["resolved"], &read["acceptedAnswer"]), (&json!(false), &Value::Null), "{read}");

    // Resolved by staff as well: deleting the answer leaves the staff's mark.
    let answer = app.create_comment(&bob, post, "second answer").await;
    app.gql_ok(Some(&alice), ACCEPT, json!({ "p": gid("Post", post), "c": gid("Comment", answer) })).await;
    app.gql_ok(
        Some(&app.token(w.instructor)),
        "mutation($p: ID!) { markResolved(postId: $p, resolved: true) { resolved } }",
        json!({ "p": gid("Post", post) }),
    )
    .await;
    app.gql_ok(
        Some(&bob),
        "mutation($c: ID!) { deleteComment(commentId: $c) { deletedId } }",
        json!({ "c": gid("Comment", answer) }),
    )
    .await;
    let read = question(&app, w.alice, post).await;
    assert_eq!((&read["resolved"], &read["acceptedAnswer"]), (&json!(true), &Value::Null), "{read}");
}

#[tokio::test]
async fn staff_mark_a_question_resolved_and_take_the_mark_back() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    let post = ask(&app, w.alice, w.course, "question").await;
    let discussion = post_of_kind(&app, w.alice, w.course, "DISCUSSION", "chat").await;
    let mark = "mutation($p: ID!, $r: Boolean!) { markResolved(postId: $p, resolved: $r) { id resolved } }";
    let prof = app.token(w.instructor);
    let data = app.gql_ok(Some(&prof), mark, json!({ "p": gid("Post", post), "r": true })).await;
    assert_eq!(data["markResolved"]["resolved"], true);
    assert_eq!(question(&app, w.bob, post).await["resolved"], true);
    let data = app.gql_ok(Some(&prof), mark, json!({ "p": gid("Post", post), "r": false })).await;
    assert_eq!(data["markResolved"]["resolved"], false);
    assert_eq!(question(&app, w.bob, post).await["resolved"], false);

    let mut failures = Vec::new();
    let asker = json!({ "p": gid("Post", post), "r": true });
    refused(&app, w.alice, "the asker (a student)", mark, asker, "FORBIDDEN", &mut failures).await;
    let chat = json!({ "p": gid("Post", discussion), "r": true });
    refused(&app, w.instructor, "a discussion", mark, chat, "BAD_USER_INPUT", &mut failures).await;
    assert_no_failures(failures);
    assert_eq!(question(&app, w.alice, post).await["resolved"], false);
}

async fn staff_endorse_posts_comments_and_replies(mode: LikeMode) {
    let app = TestApp::spawn_in(mode).await;
    let w = World::create(&app).await;
    let post = ask(&app, w.alice, w.course, "question").await;
    let comment = app.create_comment(&app.token(w.bob), post, "answer").await;
    let reply = app.create_reply(&app.token(w.alice), &gid("Comment", comment), "thanks").await;
    let ids = [("Post", gid("Post", post)), ("Comment", gid("Comment", comment)), ("Reply", gid("Reply", reply))];
    let worker = like_worker(&app).await;
    for (_, id) in &ids {
        like(&app, w.bob, id).await;
    }
    settle_likes(&worker).await;
    let prof = app.token(w.instructor);
    let mut firsts = Vec::new();
    for (typename, id) in &ids {
        let data = app.gql_ok(Some(&prof), ENDORSE, json!({ "id": id, "e": true })).await;
        let endorsed = &data["endorse"];
        assert_eq!((&endorsed["__typename"], &endorsed["id"]), (&json!(typename), &json!(id)), "{data}");
        assert_eq!(endorsed["endorsement"]["by"]["handle"], "prof", "{data}");
        assert!(endorsed["endorsement"]["at"].is_string(), "{data}");
        // The endorsement leaves the likes alone: bob's like, counted, not the instructor's.
        assert_eq!((&endorsed["likeCount"], &endorsed["likedByMe"]), (&json!(1), &json!(false)), "{data}");
        firsts.push(endorsed["endorsement"]["at"].clone());
    }
    // Endorsing again keeps the first endorsement; everyone reads it, with bob's like his.
    app.gql_ok(Some(&prof), ENDORSE, json!({ "id": ids[1].1, "e": true })).await;
    let read = app
        .gql_ok(
            Some(&app.token(w.bob)),
            "query($ids: [ID!]!) { nodes(ids: $ids) { id ... on Likeable { likeCount } \
             ... on Post { likedByMe endorsement { by { handle } at } } \
             ... on Comment { likedByMe endorsement { by { handle } at } } \
             ... on Reply { likedByMe endorsement { by { handle } at } } } }",
            json!({ "ids": ids.iter().map(|(_, id)| id).collect::<Vec<_>>() }),
        )
        .await;
    for (node, at) in read["nodes"].as_array().expect("nodes").iter().zip(&firsts) {
        assert_eq!(node["endorsement"], json!({ "by": { "handle": "prof" }, "at": at }), "{node}");
        assert_eq!((&node["likeCount"], &node["likedByMe"]), (&json!(1), &json!(true)), "{node}");
    }

    // Students may not endorse, nor withdraw an endorsement.
    let mut failures = Vec::new();
    for (name, id) in &ids {
        for endorsed in [true, false] {
            let vars = json!({ "id": id, "e": endorsed });
            refused(&app, w.alice, &format!("alice endorses {name}"), ENDORSE, vars, "FORBIDDEN", &mut failures).await;
        }
    }
    let user = json!({ "id": gid("User", w.bob), "e": true });
    refused(&app, w.instructor, "a user's id", ENDORSE, user, "BAD_USER_INPUT", &mut failures).await;
    assert_no_failures(failures);

    // Withdrawn: null again, likes untouched.
    for (_, id) in &ids {
        let data = app.gql_ok(Some(&prof), ENDORSE, json!({ "id": id, "e": false })).await;
        assert_eq!(data["endorse"]["endorsement"], Value::Null, "{data}");
        assert_eq!(data["endorse"]["likeCount"], 1, "{data}");
    }
}

in_each_like_mode!(staff_endorse_posts_comments_and_replies);

#[tokio::test]
async fn staff_pin_at_most_five_posts_in_a_course() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    let mut posts = Vec::new();
    for n in 0..6 {
        posts.push(app.create_post_as(w.alice, w.course, &format!("post {n}")).await);
    }
    let prof = app.token(w.instructor);
    for post in &posts[..5] {
        let data = app.gql_ok(Some(&prof), PIN, json!({ "p": gid("Post", *post), "on": true })).await;
        assert_eq!(data["pinPost"]["pinned"], true);
    }
    // Pinning a pinned post again is no new pin.
    app.gql_ok(Some(&prof), PIN, json!({ "p": gid("Post", posts[0]), "on": true })).await;
    let mut failures = Vec::new();
    let sixth = json!({ "p": gid("Post", posts[5]), "on": true });
    refused(&app, w.instructor, "a sixth pin", PIN, sixth.clone(), "BAD_USER_INPUT", &mut failures).await;
    refused(&app, w.alice, "a student pins", PIN, sixth.clone(), "FORBIDDEN", &mut failures).await;
    let unpin = json!({ "p": gid("Post", posts[0]), "on": false });
    refused(&app, w.alice, "a student unpins", PIN, unpin.clone(), "FORBIDDEN", &mut failures).await;
    assert_no_failures(failures);
    assert_eq!(question(&app, w.bob, posts[5]).await["pinned"], false);

    let data = app.gql_ok(Some(&prof), PIN, unpin).await;
    assert_eq!(data["pinPost"]["pinned"], false);
    let data = app.gql_ok(Some(&prof), PIN, sixth).await;
    assert_eq!(data["pinPost"]["pinned"], true);
    let pinned = app.scalar_i64("SELECT count(*) AS v FROM posts WHERE pinned_at IS NOT NULL", []).await;
    assert_eq!(pinned, 5);
    assert_eq!(question(&app, w.bob, posts[0]).await["pinned"], false);
    assert_eq!(question(&app, w.bob, posts[5]).await["pinned"], true);
}

/// A tag of the other course, made directly (nobody in the world teaches it).
async fn foreign_tag(app: &TestApp, course: i64) -> String {
    let id = app
        .scalar_i64(
            "INSERT INTO course_tags (course_id, name) VALUES ($1, 'foreign') RETURNING id AS v",
            [course.into()],
        )
        .await;
    gid("Tag", id)
}

async fn create_tag(app: &TestApp, user: i64, course: i64, name: &str) -> String {
    let data = app
        .gql_ok(
            Some(&app.token(user)),
            "mutation($c: ID!, $n: String!) { createTag(courseId: $c, name: $n) { id name } }",
            json!({ "c": gid("Course", course), "n": name }),
        )
        .await;
    assert_eq!(data["createTag"]["name"], name.trim());
    data["createTag"]["id"].as_str().expect("tag id").to_owned()
}

/// The names of a post's tags as `user` reads them.
async fn tag_names(app: &TestApp, user: i64, post: i64) -> Vec<String> {
    let read = question(app, user, post).await;
    read["tags"].as_array().expect("tags").iter().map(|t| t["name"].as_str().expect("name").to_owned()).collect()
}

#[tokio::test]
async fn tags_are_made_by_staff_carried_by_posts_renamed_and_deleted() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    let course = gid("Course", w.course);
    let create = "mutation($c: ID!, $n: String!) { createTag(courseId: $c, name: $n) { id name } }";
    let tags = [
        create_tag(&app, w.instructor, w.course, "hw1").await,
        create_tag(&app, w.instructor, w.course, "  lecture  ").await,
        create_tag(&app, w.instructor, w.course, "exam").await,
        create_tag(&app, w.instructor, w.course, "logistics").await,
    ];
    let foreign = foreign_tag(&app, w.other_course).await;
    let read = app
        .gql_ok(Some(&app.token(w.bob)), "query($c: ID!) { course(id: $c) { tags { name } } }", json!({ "c": course }))
        .await;
    assert_eq!(
        read["course"]["tags"],
        json!([{ "name": "exam" }, { "name": "hw1" }, { "name": "lecture" }, { "name": "logistics" }])
    );

    let mut failures = Vec::new();
    for (name, user, tag, code) in [
        ("a duplicate name", w.instructor, "HW1", "CONFLICT"),
        ("an empty name", w.instructor, "   ", "BAD_USER_INPUT"),
        ("a name of 41 characters", w.instructor, &"x".repeat(41), "BAD_USER_INPUT"),
        ("a control character", w.instructor, "a\u{7}b", "BAD_USER_INPUT"),
        ("a student", w.alice, "mine", "FORBIDDEN"),
    ] {
        refused(&app, user, name, create, json!({ "c": course, "n": tag }), code, &mut failures).await;
    }

    // createPost with 0 to 3 tags; a fourth, a repeat, or another course's tag is refused.
    let new_post = "mutation($c: ID!, $tags: [ID!]!) { createPost(courseId: $c, title: \"t\", body: \"b\", tagIds: $tags) { id tags { name } } }";
    let alice = app.token(w.alice);
    let data = app.gql_ok(Some(&alice), new_post, json!({ "c": course, "tags": [] })).await;
    assert_eq!(data["createPost"]["tags"], json!([]));
    let data = app.gql_ok(Some(&alice), new_post, json!({ "c": course, "tags": &tags[..3] })).await;
    assert_eq!(data["createPost"]["tags"], json!([{ "name": "exam" }, { "name": "hw1" }, { "name": "lecture" }]));
    let tagged = raw_id(data["createPost"]["id"].as_str().expect("id"));
    for (name, list, code) in [
        ("four tags", json!(tags), "BAD_USER_INPUT"),
        ("a tag twice", json!([tags[0], tags[0]]), "BAD_USER_INPUT"),
        ("another course's tag", json!([foreign]), "NOT_FOUND"),
        ("a post's id as a tag", json!([gid("Post", tagged)]), "BAD_USER_INPUT"),
    ] {
        refused(&app, w.alice, name, new_post, json!({ "c": course, "tags": list }), code, &mut failures).await;
    }
    assert_no_failures(failures);

    // editPost: the author changes the tags (editedAt moves only with the text).
    let edit = "mutation($p: ID!, $tags: [ID!], $t: String) { editPost(postId: $p, tagIds: $tags, title: $t) { id title editedAt tags { name } } }";
    let p = gid("Post", tagged);
    let data = app.gql_ok(Some(&alice), edit, json!({ "p": p, "tags": [tags[3]] })).await;
    assert_eq!(data["editPost"]["tags"], json!([{ "name": "logistics" }]));
    assert_eq!(data["editPost"]["editedAt"], Value::Null, "{data}");
    // Staff may change only the tags of a student's post.
    let prof = app.token(w.instructor);
    let data = app.gql_ok(Some(&prof), edit, json!({ "p": p, "tags": [tags[0], tags[3]] })).await;
    assert_eq!(data["editPost"]["tags"], json!([{ "name": "hw1" }, { "name": "logistics" }]));
    let mut failures = Vec::new();
    let title = json!({ "p": p, "tags": [tags[0]], "t": "staff's title" });
    refused(&app, w.instructor, "staff edit a student's title", edit, title, "FORBIDDEN", &mut failures).await;
    let bobs = json!({ "p": p, "tags": [] });
    refused(&app, w.bob, "a classmate changes the tags", edit, bobs, "FORBIDDEN", &mut failures).await;
    let four = json!({ "p": p, "tags": tags });
    refused(&app, w.alice, "four tags on edit", edit, four, "BAD_USER_INPUT", &mut failures).await;
    let foreign_edit = json!({ "p": p, "tags": [foreign] });
    refused(&app, w.alice, "another course's tag on edit", edit, foreign_edit, "NOT_FOUND", &mut failures).await;
    let nothing = json!({ "p": p });
    refused(&app, w.alice, "nothing to edit", edit, nothing, "BAD_USER_INPUT", &mut failures).await;
    assert_no_failures(failures);
    assert_eq!(tag_names(&app, w.bob, tagged).await, ["hw1", "logistics"]);

    // A rename shows on the post at once; a taken name is CONFLICT; students may not.
    let rename = "mutation($t: ID!, $n: String!) { renameTag(tagId: $t, name: $n) { id name } }";
    let data = app.gql_ok(Some(&prof), rename, json!({ "t": tags[0], "n": "homework 1" })).await;
    assert_eq!(data["renameTag"], json!({ "id": tags[0], "name": "homework 1" }));
    assert_eq!(tag_names(&app, w.bob, tagged).await, ["homework 1", "logistics"]);
    // Renaming to its own name in other letters is no conflict.
    app.gql_ok(Some(&prof), rename, json!({ "t": tags[0], "n": "Homework 1" })).await;
    let mut failures = Vec::new();
    let taken = json!({ "t": tags[0], "n": "EXAM" });
    refused(&app, w.instructor, "a taken name", rename, taken, "CONFLICT", &mut failures).await;
    let student = json!({ "t": tags[0], "n": "mine" });
    refused(&app, w.alice, "a student renames", rename, student, "FORBIDDEN", &mut failures).await;
    let outsider = json!({ "t": foreign, "n": "mine" });
    refused(&app, w.instructor, "staff rename another course's tag", rename, outsider, "FORBIDDEN", &mut failures)
        .await;
    let delete = "mutation($t: ID!) { deleteTag(tagId: $t) { deletedId } }";
    refused(&app, w.alice, "a student deletes", delete, json!({ "t": tags[3] }), "FORBIDDEN", &mut failures).await;
    assert_no_failures(failures);

    // A delete takes the tag off every post.
    let data = app.gql_ok(Some(&prof), delete, json!({ "t": tags[3] })).await;
    assert_eq!(data["deleteTag"]["deletedId"], tags[3]);
    assert_eq!(tag_names(&app, w.bob, tagged).await, ["Homework 1"]);
    let response = app.gql(Some(&prof), delete, json!({ "t": tags[3] })).await;
    assert_eq!(error_code(&response).as_deref(), Some("NOT_FOUND"), "{response}");
}

#[tokio::test]
async fn only_staff_act_as_staff_and_a_refusal_changes_nothing() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    let course = gid("Course", w.course);
    let post = ask(&app, w.alice, w.course, "question").await;
    let comment = app.create_comment(&app.token(w.bob), post, "answer").await;
    let reply = app.create_reply(&app.token(w.alice), &gid("Comment", comment), "thanks").await;
    let private = app
        .gql_ok(
            Some(&app.token(w.alice)),
            "mutation($c: ID!) { createPost(courseId: $c, title: \"private\", body: \"b\", kind: QUESTION, private: true) { id } }",
            json!({ "c": course }),
        )
        .await["createPost"]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let tag = create_tag(&app, w.instructor, w.course, "hw1").await;
    let p = gid("Post", post);
    let cases: Vec<(&str, i64, &str, Value, &str)> = vec![
        ("pin", w.alice, PIN, json!({ "p": p, "on": true }), "FORBIDDEN"),
        ("endorse a post", w.alice, ENDORSE, json!({ "id": p, "e": true }), "FORBIDDEN"),
        ("endorse a comment", w.bob, ENDORSE, json!({ "id": gid("Comment", comment), "e": true }), "FORBIDDEN"),
        ("endorse a reply", w.alice, ENDORSE, json!({ "id": gid("Reply", reply), "e": true }), "FORBIDDEN"),
        (
            "resolve",
            w.alice,
            "mutation($p: ID!) { markResolved(postId: $p, resolved: true) { resolved } }",
            json!({ "p": p }),
            "FORBIDDEN",
        ),
        (
            "create a tag",
            w.bob,
            "mutation($c: ID!) { createTag(courseId: $c, name: \"mine\") { id } }",
            json!({ "c": course }),
            "FORBIDDEN",
        ),
        (
            "rename a tag",
            w.bob,
            "mutation($t: ID!) { renameTag(tagId: $t, name: \"mine\") { id } }",
            json!({ "t": tag }),
            "FORBIDDEN",
        ),
        (
            "delete a tag",
            w.bob,
            "mutation($t: ID!) { deleteTag(tagId: $t) { deletedId } }",
            json!({ "t": tag }),
            "FORBIDDEN",
        ),
        (
            "post an announcement",
            w.alice,
            "mutation($c: ID!) { createPost(courseId: $c, title: \"hear ye\", body: \"b\", kind: ANNOUNCEMENT) { id } }",
            json!({ "c": course }),
            "FORBIDDEN",
        ),
        (
            "set the course's anonymity",
            w.alice,
            "mutation($c: ID!) { setCourseAnonymity(courseId: $c, anonymity: EVERYONE) { anonymity } }",
            json!({ "c": course }),
            "FORBIDDEN",
        ),
        (
            "make one's own private question public",
            w.alice,
            "mutation($p: ID!) { makePostPublic(postId: $p) { private } }",
            json!({ "p": private }),
            "FORBIDDEN",
        ),
        (
            "make a classmate's private question public",
            w.bob,
            "mutation($p: ID!) { makePostPublic(postId: $p) { private } }",
            json!({ "p": private }),
            "NOT_FOUND",
        ),
        ("accept on a classmate's private question", w.bob, ACCEPT, json!({ "p": private, "c": null }), "NOT_FOUND"),
        (
            "accept on someone else's question",
            w.bob,
            ACCEPT,
            json!({ "p": p, "c": gid("Comment", comment) }),
            "FORBIDDEN",
        ),
    ];
    let mut failures = Vec::new();
    for (name, user, query, vars, code) in cases {
        refused(&app, user, name, query, vars, code, &mut failures).await;
    }
    assert_no_failures(failures);
    let read = question(&app, w.alice, post).await;
    assert_eq!(
        (&read["pinned"], &read["resolved"], &read["endorsement"], &read["acceptedAnswer"]),
        (&json!(false), &json!(false), &Value::Null, &Value::Null)
    );
    let read = app
        .gql_ok(
            Some(&app.token(w.bob)),
            "query($c: ID!) { course(id: $c) { anonymity tags { name } } }",
            json!({ "c": course }),
        )
        .await;
    assert_eq!(read["course"], json!({ "anonymity": "OFF", "tags": [{ "name": "hw1" }] }));
    // The instructor may do each: an announcement, for one.
    let data = app
        .gql_ok(
            Some(&app.token(w.instructor)),
            "mutation($c: ID!) { createPost(courseId: $c, title: \"hear ye\", body: \"b\", kind: ANNOUNCEMENT) { kind } }",
            json!({ "c": course }),
        )
        .await;
    assert_eq!(data["createPost"]["kind"], "ANNOUNCEMENT");
}

#[tokio::test]
async fn staff_make_a_private_question_public_and_it_stays_anonymous() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    let course = gid("Course", w.course);
    let prof = app.token(w.instructor);
    let data = app
        .gql_ok(
            Some(&prof),
            "mutation($c: ID!) { setCourseAnonymity(courseId: $c, anonymity: CLASSMATES) { id anonymity } }",
            json!({ "c": course }),
        )
        .await;
    assert_eq!(data["setCourseAnonymity"], json!({ "id": course, "anonymity": "CLASSMATES" }));
    let data = app
        .gql_ok(
            Some(&app.token(w.alice)),
            "mutation($c: ID!) { createPost(courseId: $c, title: \"shy\", body: \"b\", kind: QUESTION, private: true, anonymous: true) { id } }",
            json!({ "c": course }),
        )
        .await;
    let post = data["createPost"]["id"].as_str().expect("id").to_owned();
    let read = "query($p: ID!) { post(id: $p) { private anonymous pseudonym author { handle } } }";
    let response = app.gql(Some(&app.token(w.bob)), read, json!({ "p": post })).await;
    assert_eq!(error_code(&response).as_deref(), Some("NOT_FOUND"), "{response}");

    let data = app
        .gql_ok(
            Some(&prof),
            "mutation($p: ID!) { makePostPublic(postId: $p) { id private anonymous author { handle } } }",
            json!({ "p": post }),
        )
        .await;
    assert_eq!(
        data["makePostPublic"],
        json!({ "id": post, "private": false, "anonymous": true, "author": { "handle": "alice" } })
    );
    let seen = app.gql_ok(Some(&app.token(w.bob)), read, json!({ "p": post })).await;
    assert_eq!(seen["post"]["private"], false);
    assert_eq!(seen["post"]["author"], Value::Null, "a classmate still does not see who asked: {seen}");
    assert!(seen["post"]["pseudonym"].is_string(), "{seen}");
    // It joins the course's pages, for classmates too.
    let page = app
        .gql_ok(
            Some(&app.token(w.bob)),
            "query($c: ID!) { course(id: $c) { posts(first: 10) { nodes { id } } } }",
            json!({ "c": course }),
        )
        .await;
    assert_eq!(page["course"]["posts"]["nodes"], json!([{ "id": post }]));
    // Public already: the post as it is.
    let again = app
        .gql_ok(Some(&prof), "mutation($p: ID!) { makePostPublic(postId: $p) { private } }", json!({ "p": post }))
        .await;
    assert_eq!(again["makePostPublic"]["private"], false);
}

/// The next `courseActivity` event, skipping none.
async fn next_event(socket: &mut GqlSocket) -> Value {
    socket.next_data(Duration::from_secs(10)).await.expect("an event")["courseActivity"].clone()
}

#[tokio::test]
async fn course_activity_hears_updates_with_the_new_state() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    let post = ask(&app, w.alice, w.course, "question").await;
    let comment = app.create_comment(&app.token(w.bob), post, "answer").await;
    let reply = app.create_reply(&app.token(w.alice), &gid("Comment", comment), "thanks").await;
    let mut socket = GqlSocket::connect(app.addr, Some(&app.token(w.bob))).await.expect("connect");
    socket
        .subscribe(
            "1",
            "subscription($c: ID!) { courseActivity(courseId: $c) { kind nodeId postId \
             post { id pinned resolved acceptedAnswer { id } } \
             comment { id isAcceptedAnswer endorsement { by { handle } } } \
             reply { id endorsement { by { handle } } } } }",
            json!({ "c": gid("Course", w.course) }),
        )
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let prof = app.token(w.instructor);
    let p = gid("Post", post);

    app.gql_ok(Some(&prof), PIN, json!({ "p": p, "on": true })).await;
    let event = next_event(&mut socket).await;
    assert_eq!(
        event,
        json!({ "kind": "POST_UPDATED", "nodeId": p, "postId": p, "comment": null, "reply": null,
                "post": { "id": p, "pinned": true, "resolved": false, "acceptedAnswer": null } })
    );

    app.gql_ok(Some(&app.token(w.alice)), ACCEPT, json!({ "p": p, "c": gid("Comment", comment) })).await;
    let event = next_event(&mut socket).await;
    assert_eq!(event["kind"], "POST_UPDATED");
    assert_eq!(
        event["post"],
        json!({ "id": p, "pinned": true, "resolved": true, "acceptedAnswer": { "id": gid("Comment", comment) } })
    );

    app.gql_ok(Some(&prof), ENDORSE, json!({ "id": gid("Comment", comment), "e": true })).await;
    let event = next_event(&mut socket).await;
    assert_eq!(
        event,
        json!({ "kind": "COMMENT_UPDATED", "nodeId": gid("Comment", comment), "postId": p, "post": null, "reply": null,
                "comment": { "id": gid("Comment", comment), "isAcceptedAnswer": true, "endorsement": { "by": { "handle": "prof" } } } })
    );

    app.gql_ok(Some(&prof), ENDORSE, json!({ "id": gid("Reply", reply), "e": true })).await;
    let event = next_event(&mut socket).await;
    assert_eq!(
        event,
        json!({ "kind": "REPLY_UPDATED", "nodeId": gid("Reply", reply), "postId": p, "post": null, "comment": null,
                "reply": { "id": gid("Reply", reply), "endorsement": { "by": { "handle": "prof" } } } })
    );

    let tag = create_tag(&app, w.instructor, w.course, "hw1").await;
    app.gql_ok(
        Some(&prof),
        "mutation($p: ID!, $t: [ID!]) { editPost(postId: $p, tagIds: $t) { id } }",
        json!({ "p": p, "t": [tag] }),
    )
    .await;
    let event = next_event(&mut socket).await;
    assert_eq!((&event["kind"], &event["nodeId"]), (&json!("POST_UPDATED"), &json!(p)), "{event}");
    // A refused change publishes nothing.
    let response = app.gql(Some(&app.token(w.alice)), PIN, json!({ "p": p, "on": false })).await;
    assert_eq!(error_code(&response).as_deref(), Some("FORBIDDEN"));
    assert!(socket.next_data(Duration::from_millis(500)).await.is_none(), "no event for a refused change");
}

/// A course page read before an update shows the update afterwards (the page cache heard it).
#[tokio::test]
async fn a_cached_course_page_shows_a_post_updated_after_it_was_read() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    let post = ask(&app, w.alice, w.course, "question").await;
    let comment = app.create_comment(&app.token(w.bob), post, "answer").await;
    let page =
        "query($c: ID!) { course(id: $c) { posts(first: 10) { nodes { id pinned resolved endorsement { at } } } } }";
    let course = json!({ "c": gid("Course", w.course) });
    let bob = app.token(w.bob);
    let before = app.gql_ok(Some(&bob), page, course.clone()).await;
    assert_eq!(before["course"]["posts"]["nodes"][0]["resolved"], false);
    let prof = app.token(w.instructor);
    app.gql_ok(Some(&prof), PIN, json!({ "p": gid("Post", post), "on": true })).await;
    app.gql_ok(Some(&prof), ACCEPT, json!({ "p": gid("Post", post), "c": gid("Comment", comment) })).await;
    app.gql_ok(Some(&prof), ENDORSE, json!({ "id": gid("Post", post), "e": true })).await;
    let after = app.gql_ok(Some(&bob), page, course).await;
    let node = &after["course"]["posts"]["nodes"][0];
    assert_eq!((&node["pinned"], &node["resolved"]), (&json!(true), &json!(true)), "{after}");
    assert!(node["endorsement"]["at"].is_string(), "{after}");
}
