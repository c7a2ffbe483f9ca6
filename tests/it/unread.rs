//! Unread tracking: `Post.isUnread`, `Post.unreadCommentCount`, `Course.unreadPostCount`,
//! `markPostRead`, `markCourseRead`, the `unread` filter and `unreadCounts`, against real
//! PostgreSQL and Redis.

use std::collections::BTreeSet;
use std::time::Duration;

use course_forum::testing::config::LikeMode;
use serde_json::{Value, json};

use crate::common::ws::GqlSocket;
use crate::common::{TestApp, World, error_code, gid, raw_id, send_alone};

const MARK_POST: &str = "mutation($p: ID!) { markPostRead(postId: $p) { id isUnread unreadCommentCount } }";
const MARK_COURSE: &str = "mutation($c: ID!) { markCourseRead(courseId: $c) { id unreadPostCount } }";
const UNREAD_COUNTS: &str = "subscription($c: ID!) { unreadCounts(courseId: $c) { \
                             course { unreadPostCount } post { id isUnread unreadCommentCount } } }";

async fn course_count(app: &TestApp, user: i64, course: i64) -> i64 {
    let data = app
        .gql_ok(
            Some(&app.token(user)),
            "query($c: ID!) { course(id: $c) { unreadPostCount } }",
            json!({ "c": gid("Course", course) }),
        )
        .await;
    data["course"]["unreadPostCount"].as_i64().expect("a count")
}

/// `(isUnread, unreadCommentCount)` of a post as `user` reads it.
async fn post_state(app: &TestApp, user: i64, post: i64) -> (bool, i64) {
    let data = app
        .gql_ok(
            Some(&app.token(user)),
            "query($p: ID!) { post(id: $p) { isUnread unreadCommentCount } }",
            json!({ "p": gid("Post", post) }),
        )
        .await;
    (data["post"]["isUnread"].as_bool().expect("isUnread"), data["post"]["unreadCommentCount"].as_i64().expect("count"))
}

async fn mark_post(app: &TestApp, user: i64, post: i64) -> Value {
    app.gql_ok(Some(&app.token(user)), MARK_POST, json!({ "p": gid("Post", post) })).await
}

async fn mark_course(app: &TestApp, user: i64, course: i64) -> Value {
    app.gql_ok(Some(&app.token(user)), MARK_COURSE, json!({ "c": gid("Course", course) })).await
}

async fn delete_comment(app: &TestApp, user: i64, global: &str) {
    app.gql_ok(
        Some(&app.token(user)),
        "mutation($c: ID!) { deleteComment(commentId: $c) { deletedId } }",
        json!({ "c": global }),
    )
    .await;
}

async fn private_question(app: &TestApp, user: i64, course: i64) -> i64 {
    let data = app
        .gql_ok(
            Some(&app.token(user)),
            "mutation($c: ID!) { createPost(courseId: $c, title: \"private\", body: \"b\", kind: QUESTION, \
             private: true) { id } }",
            json!({ "c": gid("Course", course) }),
        )
        .await;
    raw_id(data["createPost"]["id"].as_str().expect("post id"))
}

#[tokio::test]
async fn counts_follow_reads_others_writes_and_deletes() {
    for mode in [LikeMode::Sync, LikeMode::Buffered] {
        let app = TestApp::spawn_in(mode).await;
        let world = World::create(&app).await;
        let (alice, bob) = (app.token(world.alice), app.token(world.bob));
        let first = app.create_post(&bob, world.course, "first").await;
        let second = app.create_post(&bob, world.course, "second").await;
        let own = app.create_post(&alice, world.course, "mine").await;
        assert_eq!(course_count(&app, world.alice, world.course).await, 2, "{mode:?}: bob's two, not alice's own");
        assert_eq!(post_state(&app, world.alice, first).await, (true, 0), "{mode:?}");
        assert_eq!(post_state(&app, world.alice, own).await, (false, 0), "{mode:?}: never one's own");

        let comment = app.create_comment(&bob, first, "one").await;
        app.create_comment(&bob, first, "two").await;
        app.create_comment(&alice, first, "mine").await;
        assert_eq!(post_state(&app, world.alice, first).await, (true, 2), "{mode:?}: others' comments only");

        let marked = mark_post(&app, world.alice, first).await;
        assert_eq!(marked["markPostRead"]["isUnread"], false, "{mode:?}: the answer shows the read");
        assert_eq!(marked["markPostRead"]["unreadCommentCount"], 0, "{mode:?}");
        assert_eq!(course_count(&app, world.alice, world.course).await, 1, "{mode:?}");
        assert_eq!(course_count(&app, world.bob, world.course).await, 1, "{mode:?}: alice's post is unread for bob");
        // Idempotent.
        mark_post(&app, world.alice, first).await;
        assert_eq!(course_count(&app, world.alice, world.course).await, 1, "{mode:?}");

        // A reply after the read is unread; the post stays read.
        let reply = app.create_reply(&bob, &gid("Comment", comment), "a reply").await;
        assert_eq!(post_state(&app, world.alice, first).await, (false, 1), "{mode:?}");
        // Deleted ones leave the counts.
        delete_comment(&app, world.bob, &gid("Reply", reply)).await;
        assert_eq!(post_state(&app, world.alice, first).await, (false, 0), "{mode:?}");
        app.delete_post(&bob, second).await;
        assert_eq!(course_count(&app, world.alice, world.course).await, 0, "{mode:?}: a deleted post is not counted");
        // A comment deleted with the post's others read: its replies leave too.
        let root = app.create_comment(&bob, own, "on alice's post").await;
        app.create_reply(&bob, &gid("Comment", root), "under it").await;
        assert_eq!(post_state(&app, world.alice, own).await, (false, 2), "{mode:?}");
        delete_comment(&app, world.bob, &gid("Comment", root)).await;
        assert_eq!(post_state(&app, world.alice, own).await, (false, 0), "{mode:?}");
    }
}

#[tokio::test]
async fn private_posts_of_others_are_never_counted() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let private = private_question(&app, world.bob, world.course).await;
    assert_eq!(course_count(&app, world.alice, world.course).await, 0, "a classmate never counts it");
    assert_eq!(course_count(&app, world.instructor, world.course).await, 1, "staff read it, so it is unread");
    assert_eq!(course_count(&app, world.bob, world.course).await, 0, "its author's own");
    let listed = app
        .gql_ok(
            Some(&app.token(world.alice)),
            "query($c: ID!) { course(id: $c) { posts(filter: {unread: true}) { nodes { id } } } }",
            json!({ "c": gid("Course", world.course) }),
        )
        .await;
    assert_eq!(listed["course"]["posts"]["nodes"], json!([]), "nor listed");
    let refused = app.gql(Some(&app.token(world.alice)), MARK_POST, json!({ "p": gid("Post", private) })).await;
    assert_eq!(error_code(&refused).as_deref(), Some("NOT_FOUND"), "{refused}");
    mark_post(&app, world.instructor, private).await;
    assert_eq!(course_count(&app, world.instructor, world.course).await, 0);
}

#[tokio::test]
async fn mark_course_read_reads_everything_and_later_writes_are_unread() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let bob = app.token(world.bob);
    let mut posts = Vec::new();
    for n in 0..4 {
        let post = app.create_post(&bob, world.course, &format!("post {n}")).await;
        app.create_comment(&bob, post, "c").await;
        posts.push(post);
    }
    mark_post(&app, world.alice, posts[1]).await;
    assert_eq!(course_count(&app, world.alice, world.course).await, 3);
    let marked = mark_course(&app, world.alice, world.course).await;
    assert_eq!(marked["markCourseRead"]["unreadPostCount"], 0);
    for post in &posts {
        assert_eq!(post_state(&app, world.alice, *post).await, (false, 0));
    }
    let exceptions =
        app.scalar_i64("SELECT count(*) AS v FROM post_reads WHERE user_id = $1", [world.alice.into()]).await;
    assert_eq!(exceptions, 0, "markCourseRead deletes the exceptions it covers");
    // Later writes by others are unread again.
    app.create_comment(&bob, posts[0], "later").await;
    let later = app.create_post(&bob, world.course, "later").await;
    assert_eq!(post_state(&app, world.alice, posts[0]).await, (false, 1));
    assert_eq!(post_state(&app, world.alice, later).await, (true, 0));
    assert_eq!(course_count(&app, world.alice, world.course).await, 1);
    // Another course is untouched.
    app.enroll(world.other_course, world.alice, "student").await;
    app.create_post_as(world.outsider, world.other_course, "elsewhere").await;
    assert_eq!(course_count(&app, world.alice, world.other_course).await, 1);
}

#[tokio::test]
async fn read_state_survives_leaving_and_rejoining_and_outsiders_are_refused() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let bob = app.token(world.bob);
    let read = app.create_post(&bob, world.course, "read").await;
    let unread = app.create_post(&bob, world.course, "unread").await;
    mark_post(&app, world.alice, read).await;
    app.unenroll(world.course, world.alice).await;
    let alice = app.token(world.alice);
    for (query, variables) in [
        (MARK_POST, json!({ "p": gid("Post", unread) })),
        (MARK_COURSE, json!({ "c": gid("Course", world.course) })),
        ("query($c: ID!) { course(id: $c) { unreadPostCount } }", json!({ "c": gid("Course", world.course) })),
        ("query($p: ID!) { post(id: $p) { isUnread } }", json!({ "p": gid("Post", read) })),
    ] {
        let refused = app.gql(Some(&alice), query, variables).await;
        assert_eq!(error_code(&refused).as_deref(), Some("FORBIDDEN"), "{query}: {refused}");
    }
    app.enroll(world.course, world.alice, "student").await;
    assert_eq!(post_state(&app, world.alice, read).await, (false, 0), "kept across leave and rejoin");
    assert_eq!(post_state(&app, world.alice, unread).await, (true, 0));
    assert_eq!(course_count(&app, world.alice, world.course).await, 1);
}

#[tokio::test]
async fn exceptions_are_bounded_and_the_oldest_unread_posts_age_out() {
    let app = TestApp::spawn_with(|s| s.unread_exceptions_per_course = 3).await;
    let world = World::create(&app).await;
    let bob = app.token(world.bob);
    let mut posts = Vec::new();
    for n in 0..7 {
        posts.push(app.create_post(&bob, world.course, &format!("post {n}")).await);
    }
    for post in &posts[1..5] {
        mark_post(&app, world.alice, *post).await;
    }
    let exceptions =
        app.scalar_i64("SELECT count(*) AS v FROM post_reads WHERE user_id = $1", [world.alice.into()]).await;
    assert_eq!(exceptions, 3, "at most the bound");
    let mark = app
        .scalar_i64("SELECT posts_read_through AS v FROM unread_marks WHERE user_id = $1", [world.alice.into()])
        .await;
    assert_eq!(mark, posts[1], "the oldest exception was folded into the watermark");
    assert_eq!(post_state(&app, world.alice, posts[0]).await, (false, 0), "below it: aged out as read");
    for post in &posts[1..5] {
        assert_eq!(post_state(&app, world.alice, *post).await, (false, 0), "every opened post stays read");
    }
    assert_eq!(course_count(&app, world.alice, world.course).await, 2, "posts 5 and 6");
}

/// Every id of a walk of `order` with `filter`, 2 a page.
async fn walk(app: &TestApp, user: i64, course: i64, order: &str, filter: Value) -> Vec<i64> {
    let query = format!(
        "query($c: ID!, $a: String, $f: PostFilter) {{ course(id: $c) {{ \
           posts(first: 2, after: $a, orderBy: {order}, filter: $f) {{ \
             nodes {{ id isUnread }} pageInfo {{ hasNextPage endCursor }} }} }} }}"
    );
    let (mut ids, mut after) = (Vec::new(), Value::Null);
    loop {
        let data = app
            .gql_ok(
                Some(&app.token(user)),
                &query,
                json!({ "c": gid("Course", course), "a": after, "f": filter.clone() }),
            )
            .await;
        let page = &data["course"]["posts"];
        for node in page["nodes"].as_array().expect("nodes") {
            assert_eq!(node["isUnread"], filter["unread"], "{order}: {node}");
            ids.push(raw_id(node["id"].as_str().expect("id")));
        }
        if page["pageInfo"]["hasNextPage"] != true {
            return ids;
        }
        after = page["pageInfo"]["endCursor"].clone();
    }
}

#[tokio::test]
async fn the_unread_filter_pages_in_every_order() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let bob = app.token(world.bob);
    let mut unread = BTreeSet::new();
    let mut read = BTreeSet::new();
    for n in 0..7 {
        let post = app.create_post(&bob, world.course, &format!("post {n}")).await;
        if n % 3 == 0 {
            mark_post(&app, world.alice, post).await;
            read.insert(post);
        } else {
            unread.insert(post);
        }
    }
    read.insert(app.create_post(&app.token(world.alice), world.course, "mine").await);
    for order in ["NEW", "HOT", "TOP"] {
        let ids = walk(&app, world.alice, world.course, order, json!({ "unread": true })).await;
        assert_eq!(ids.len(), unread.len(), "{order}: each once");
        assert_eq!(ids.into_iter().collect::<BTreeSet<_>>(), unread, "{order}");
        let ids = walk(&app, world.alice, world.course, order, json!({ "unread": false })).await;
        assert_eq!(ids.into_iter().collect::<BTreeSet<_>>(), read, "{order}: read ones and one's own");
    }
    // Bob has read nothing of alice's: his list is his own.
    let ids = walk(&app, world.bob, world.course, "NEW", json!({ "unread": true })).await;
    assert_eq!(ids.len(), 1, "only alice's post is unread for bob");
}

async fn subscribed(app: &TestApp, user: i64, course: i64) -> GqlSocket {
    // What was written before has reached this instance's hub: its late echo cannot pass for
    // an update of the new subscription.
    app.own_echoes_heard().await;
    let mut socket = GqlSocket::connect(app.addr, Some(&app.token(user))).await.expect("connect");
    socket.subscribe("u", UNREAD_COUNTS, json!({ "c": gid("Course", course) })).await;
    socket
}

async fn next_update(socket: &mut GqlSocket) -> Value {
    socket.next_data(Duration::from_secs(10)).await.expect("an unreadCounts update")["unreadCounts"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_tabs_hear_reads_in_either_and_classmates_writes() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let bob = app.token(world.bob);
    let post = app.create_post(&bob, world.course, "first").await;
    let mut tab_a = subscribed(&app, world.alice, world.course).await;
    let mut tab_b = subscribed(&app, world.alice, world.course).await;
    let mut staff = subscribed(&app, world.instructor, world.course).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    // A read in one tab reaches both.
    mark_post(&app, world.alice, post).await;
    for tab in [&mut tab_a, &mut tab_b] {
        let update = next_update(tab).await;
        assert_eq!(update["course"]["unreadPostCount"], 0, "{update}");
        assert_eq!(update["post"], json!({ "id": gid("Post", post), "isUnread": false, "unreadCommentCount": 0 }));
    }
    // A classmate's private question: staff hear it, alice's tabs nothing at all.
    let private = private_question(&app, world.bob, world.course).await;
    let update = next_update(&mut staff).await;
    assert_eq!(update["course"]["unreadPostCount"], 2, "{update}");
    // Then a public comment: it is the next thing each tab hears.
    app.create_comment(&bob, post, "a comment").await;
    for tab in [&mut tab_a, &mut tab_b] {
        let update = next_update(tab).await;
        assert_eq!(update["post"]["unreadCommentCount"], 1, "the comment, not the private post: {update}");
        assert_eq!(update["course"]["unreadPostCount"], 0, "{update}");
    }
    // Made public, the question becomes unread for alice: her tabs hear it.
    app.gql_ok(
        Some(&app.token(world.instructor)),
        "mutation($p: ID!) { makePostPublic(postId: $p) { id } }",
        json!({ "p": gid("Post", private) }),
    )
    .await;
    for tab in [&mut tab_a, &mut tab_b] {
        let update = next_update(tab).await;
        assert_eq!(update["course"]["unreadPostCount"], 1, "{update}");
        assert_eq!(update["post"]["id"], gid("Post", private), "{update}");
    }
    mark_post(&app, world.alice, private).await;
    for tab in [&mut tab_a, &mut tab_b] {
        assert_eq!(next_update(tab).await["course"]["unreadPostCount"], 0);
    }
    // Alice's own write is nothing new to her; her markCourseRead is (post null).
    app.create_comment(&app.token(world.alice), post, "mine").await;
    mark_course(&app, world.alice, world.course).await;
    for tab in [&mut tab_a, &mut tab_b] {
        let update = next_update(tab).await;
        assert_eq!(update, json!({ "course": { "unreadPostCount": 0 }, "post": null }), "{update}");
    }
    // Leaving the course ends the stream.
    app.unenroll(world.course, world.alice).await;
    let ended = tab_a.next_message(Duration::from_secs(10)).await.expect("the end");
    assert!(ended.to_string().contains("FORBIDDEN"), "{ended}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_reads_only_move_marks_forward() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let bob = app.token(world.bob);
    let mut posts = Vec::new();
    for n in 0..8 {
        let post = app.create_post(&bob, world.course, &format!("post {n}")).await;
        app.create_comment(&bob, post, "c").await;
        posts.push(post);
    }
    let alice = app.token(world.alice);
    let url = app.url("/graphql");
    let mut racers = Vec::new();
    for round in 0..3 {
        for post in &posts {
            racers.push(tokio::spawn(send_alone(
                url.clone(),
                alice.clone(),
                MARK_POST,
                json!({ "p": gid("Post", *post) }),
            )));
        }
        if round < 2 {
            racers.push(tokio::spawn(send_alone(
                url.clone(),
                alice.clone(),
                MARK_COURSE,
                json!({ "c": gid("Course", world.course) }),
            )));
        }
    }
    for racer in racers {
        let response = racer.await.expect("racer");
        assert!(response.get("errors").is_none(), "{response}");
    }
    let posts_mark = app
        .scalar_i64("SELECT posts_read_through AS v FROM unread_marks WHERE user_id = $1", [world.alice.into()])
        .await;
    assert_eq!(posts_mark, *posts.last().expect("posts"), "markCourseRead's mark stands whatever ran after it");
    for post in &posts {
        assert_eq!(post_state(&app, world.alice, *post).await, (false, 0));
    }
    // One more markCourseRead, raced by opens: the marks never go below what they were.
    let comments_mark = app
        .scalar_i64("SELECT comments_read_through AS v FROM unread_marks WHERE user_id = $1", [world.alice.into()])
        .await;
    let (a, b) = tokio::join!(mark_course(&app, world.alice, world.course), mark_post(&app, world.alice, posts[0]));
    assert!(a.get("markCourseRead").is_some() && b.get("markPostRead").is_some());
    let after = app
        .scalar_i64("SELECT comments_read_through AS v FROM unread_marks WHERE user_id = $1", [world.alice.into()])
        .await;
    assert!(after >= comments_mark, "{after} < {comments_mark}");
    assert_eq!(course_count(&app, world.alice, world.course).await, 0);
}

// In buffered mode (the default users get) `likedByMe` is a Redis read, in sync mode a SQL
// batch: the unread state costs one statement more either way.
in_each_like_mode!(a_page_with_unread_state_costs_one_more_statement);
async fn a_page_with_unread_state_costs_one_more_statement(mode: LikeMode) {
    let app = TestApp::spawn_in(mode).await;
    let world = World::create(&app).await;
    let bob = app.token(world.bob);
    for n in 0..20 {
        let post = app.create_post(&bob, world.course, &format!("post {n}")).await;
        if n % 4 == 0 {
            app.create_comment(&bob, post, "c").await;
        }
        if n % 5 == 0 {
            mark_post(&app, world.alice, post).await;
        }
    }
    app.own_echoes_heard().await;
    let plain = "query($c: ID!) { course(id: $c) { posts(first: 20) { nodes { id title likedByMe } } } }";
    let with_unread = "query($c: ID!) { course(id: $c) { unreadPostCount \
                       posts(first: 20) { nodes { id title likedByMe isUnread unreadCommentCount } } } }";
    // The count after the page, as a client may write it.
    let count_last = "query($c: ID!) { course(id: $c) { \
                      posts(first: 20) { nodes { id title likedByMe isUnread unreadCommentCount } } unreadPostCount } }";
    let alice = app.token(world.alice);
    let cost = async |query: &str| {
        let before = app.state.sql_statements.get();
        let data = app.gql_ok(Some(&alice), query, json!({ "c": gid("Course", world.course) })).await;
        (app.state.sql_statements.get() - before, data)
    };
    // The reader's liked-set loaded first (buffered mode keeps it in Redis after one read):
    // it is neither page's cost.
    cost(plain).await;
    // Cold: the page itself is read by both.
    app.state.course_pages.clear();
    let (cold_plain, _) = cost(plain).await;
    app.state.course_pages.clear();
    let (cold_unread, data) = cost(with_unread).await;
    assert_eq!(cold_unread, cold_plain + 1, "cold: {cold_plain} plain, {cold_unread} with the unread state");
    let nodes = data["course"]["posts"]["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 20);
    let unread = nodes.iter().filter(|n| n["isUnread"] == true).count();
    assert_eq!(unread, 16, "four of the twenty were opened");
    assert_eq!(data["course"]["unreadPostCount"], 16);
    let with_comments = nodes.iter().filter(|n| n["unreadCommentCount"] == 1).count();
    assert_eq!(with_comments, 4, "the opened ones' comments are read: 5 commented, 1 of them opened");
    // Warm: the page from memory.
    let (warm_plain, _) = cost(plain).await;
    for query in [with_unread, count_last] {
        let (warm_unread, _) = cost(query).await;
        assert_eq!(warm_unread, warm_plain + 1, "warm: {warm_plain} plain, {warm_unread} with the unread state");
    }
    eprintln!("statements: cold {cold_plain} → {cold_unread}, warm {warm_plain} → {}", warm_plain + 1);
}

#[tokio::test]
async fn bad_ids_are_coded_errors() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let post = app.create_post_as(world.bob, world.course, "p").await;
    let alice = app.token(world.alice);
    for (query, variables, code) in [
        (MARK_POST, json!({ "p": "not an id" }), "BAD_USER_INPUT"),
        (MARK_POST, json!({ "p": gid("Course", world.course) }), "BAD_USER_INPUT"),
        (MARK_POST, json!({ "p": gid("Post", post + 1000) }), "NOT_FOUND"),
        (MARK_COURSE, json!({ "c": gid("Post", post) }), "BAD_USER_INPUT"),
        (MARK_COURSE, json!({ "c": gid("Course", world.course + 1000) }), "NOT_FOUND"),
        (MARK_COURSE, json!({ "c": gid("Course", world.other_course) }), "FORBIDDEN"),
    ] {
        let response = app.gql(Some(&alice), query, variables.clone()).await;
        assert_eq!(error_code(&response).as_deref(), Some(code), "{variables}: {response}");
    }
    let response = app.gql(None, MARK_POST, json!({ "p": gid("Post", post) })).await;
    assert_eq!(error_code(&response).as_deref(), Some("UNAUTHENTICATED"), "{response}");
    app.delete_post(&app.token(world.bob), post).await;
    let response = app.gql(Some(&alice), MARK_POST, json!({ "p": gid("Post", post) })).await;
    assert_eq!(error_code(&response).as_deref(), Some("NOT_FOUND"), "a deleted post: {response}");
    let mut socket = GqlSocket::connect(app.addr, Some(&alice)).await.expect("connect");
    socket.subscribe("u", UNREAD_COUNTS, json!({ "c": gid("Course", world.other_course) })).await;
    let refused = socket.next_message(Duration::from_secs(10)).await.expect("an answer");
    assert!(refused.to_string().contains("FORBIDDEN"), "{refused}");
}
