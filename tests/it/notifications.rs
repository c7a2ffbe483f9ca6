//! Notifications against real PostgreSQL and Redis: who hears about replies and mentions,
//! exactly once per cause (a re-saved edit, a replayed like batch), withdrawal when the cause
//! is deleted, live delivery across two instances, access after leaving a course, marking
//! read, the per-user cap, and like milestones in every like mode.

use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use course_forum::testing::config::LikeMode;
use serde_json::{Value, json};

use crate::common::likes::{drain_all, pending_entries, run_crashing_worker};
use crate::common::ws::GqlSocket;
use crate::common::{TestApp, World, error_code, gid, raw_id};

const LIST: &str = "query { notifications(first: 50) { unreadCount edges { node { \
    id kind read milestone actor { handle } post { id } comment { id } } } } }";

const LIVE: &str =
    "subscription { notifications { unreadCount notification { id kind actor { handle } post { id } } } }";

/// The user's notifications as the API lists them, newest first, and their unread count.
async fn notifications_of(app: &TestApp, user: i64) -> (Vec<Value>, i64) {
    let data = app.gql_ok(Some(&app.token(user)), LIST, json!({})).await;
    let list = &data["notifications"];
    let nodes = list["edges"].as_array().expect("edges").iter().map(|edge| edge["node"].clone()).collect();
    (nodes, list["unreadCount"].as_i64().expect("unreadCount"))
}

/// (kind, actor handle) of each notification, newest first.
async fn summary(app: &TestApp, user: i64) -> Vec<(String, String)> {
    notifications_of(app, user)
        .await
        .0
        .iter()
        .map(|n| {
            (n["kind"].as_str().unwrap_or_default().to_owned(), n["actor"]["handle"].as_str().unwrap_or("").to_owned())
        })
        .collect()
}

async fn post_by(app: &TestApp, user: i64, course: i64, title: &str, body: &str) -> i64 {
    let data = app
        .gql_ok(
            Some(&app.token(user)),
            "mutation($c: ID!, $t: String!, $b: String!) { createPost(courseId: $c, title: $t, body: $b) { id } }",
            json!({ "c": gid("Course", course), "t": title, "b": body }),
        )
        .await;
    raw_id(data["createPost"]["id"].as_str().expect("post id"))
}

async fn comment_by(app: &TestApp, user: i64, post: i64, body: &str) -> i64 {
    let data = app
        .gql_ok(
            Some(&app.token(user)),
            "mutation($p: ID!, $b: String!) { createComment(postId: $p, body: $b) { id } }",
            json!({ "p": gid("Post", post), "b": body }),
        )
        .await;
    raw_id(data["createComment"]["id"].as_str().expect("comment id"))
}

async fn reply_by(app: &TestApp, user: i64, answered: &str, body: &str) -> i64 {
    let data = app
        .gql_ok(
            Some(&app.token(user)),
            "mutation($c: ID!, $b: String!) { createReply(commentId: $c, body: $b) { id } }",
            json!({ "c": answered, "b": body }),
        )
        .await;
    raw_id(data["createReply"]["id"].as_str().expect("reply id"))
}

async fn stored_notifications(app: &TestApp) -> i64 {
    app.scalar_i64("SELECT count(*) AS v FROM notifications", []).await
}

fn pair(kind: &str, actor: &str) -> (String, String) {
    (kind.to_owned(), actor.to_owned())
}

#[tokio::test]
async fn a_comment_notifies_the_post_s_author_and_a_reply_the_answered_author_but_never_yourself() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    let post = post_by(&app, w.alice, w.course, "question", "how?").await;
    let comment = comment_by(&app, w.bob, post, "like this").await;
    // Alice answers Bob's comment, then her own reply: only Bob hears, once.
    let reply = reply_by(&app, w.alice, &gid("Comment", comment), "thanks").await;
    reply_by(&app, w.alice, &gid("Reply", reply), "and more").await;
    // Alice comments on her own post: nobody hears.
    comment_by(&app, w.alice, post, "bump").await;

    let (alice, unread) = notifications_of(&app, w.alice).await;
    assert_eq!(unread, 1);
    assert_eq!(alice.len(), 1);
    assert_eq!(alice[0]["kind"], "REPLY");
    assert_eq!(alice[0]["actor"]["handle"], "bob");
    assert_eq!(alice[0]["post"]["id"], gid("Post", post));
    assert_eq!(alice[0]["comment"]["id"], gid("Comment", comment));
    assert_eq!(alice[0]["read"], false);
    assert_eq!(summary(&app, w.bob).await, vec![pair("REPLY", "alice")]);
    assert_eq!(summary(&app, w.instructor).await, vec![]);
}

#[tokio::test]
async fn mentions_notify_members_of_the_course_only_and_one_cause_notifies_a_person_once() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    // @outsider is not in the course, @nobody does not exist, @alice is the writer.
    let post = post_by(&app, w.alice, w.course, "hi @Bob", "cc @prof @outsider @nobody @alice a@bob.org").await;
    assert_eq!(summary(&app, w.bob).await, vec![pair("MENTION", "alice")]);
    assert_eq!(summary(&app, w.instructor).await, vec![pair("MENTION", "alice")]);
    assert_eq!(summary(&app, w.outsider).await, vec![]);
    assert_eq!(summary(&app, w.alice).await, vec![]);
    // A comment on Alice's post that also mentions her is one notification: a reply.
    comment_by(&app, w.bob, post, "@alice here you go, and @alice again").await;
    assert_eq!(summary(&app, w.alice).await, vec![pair("REPLY", "bob")]);
    assert_eq!(stored_notifications(&app).await, 3);
}

#[tokio::test]
async fn a_text_with_too_many_mentions_is_refused_and_writes_nothing() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    for n in 0..11 {
        let user = app.create_user(&format!("member{n}")).await;
        app.enroll(w.course, user, "student").await;
    }
    let crowd: String = (0..11).map(|n| format!("@member{n} ")).collect();
    let response = app
        .gql(
            Some(&app.token(w.alice)),
            "mutation($c: ID!, $b: String!) { createPost(courseId: $c, title: \"t\", body: $b) { id } }",
            json!({ "c": gid("Course", w.course), "b": crowd }),
        )
        .await;
    assert_eq!(error_code(&response).as_deref(), Some("BAD_USER_INPUT"), "{response}");
    assert_eq!(app.scalar_i64("SELECT count(*) AS v FROM posts", []).await, 0);
    assert_eq!(stored_notifications(&app).await, 0);

    // The same limit for an edit: the post stays as it was.
    let post = post_by(&app, w.alice, w.course, "fine", "no one").await;
    let response = app
        .gql(
            Some(&app.token(w.alice)),
            "mutation($p: ID!, $b: String!) { editPost(postId: $p, body: $b) { id } }",
            json!({ "p": gid("Post", post), "b": crowd }),
        )
        .await;
    assert_eq!(error_code(&response).as_deref(), Some("BAD_USER_INPUT"), "{response}");
    let body =
        app.scalar_i64("SELECT (body = 'no one')::int::bigint AS v FROM posts WHERE id = $1", [post.into()]).await;
    assert_eq!(body, 1, "the refused edit changed nothing");
    assert_eq!(stored_notifications(&app).await, 0);
}

#[tokio::test]
async fn an_edit_that_adds_a_mention_notifies_once_however_often_it_is_saved() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    let post = post_by(&app, w.alice, w.course, "draft", "nothing yet").await;
    let edit = "mutation($p: ID!, $b: String!) { editPost(postId: $p, body: $b) { id } }";
    for body in ["ping @bob", "ping @bob again", "ping @bob and @prof"] {
        app.gql_ok(Some(&app.token(w.alice)), edit, json!({ "p": gid("Post", post), "b": body })).await;
    }
    assert_eq!(summary(&app, w.bob).await, vec![pair("MENTION", "alice")]);
    assert_eq!(summary(&app, w.instructor).await, vec![pair("MENTION", "alice")]);

    // A comment's edit: its reply was notified already, a newly mentioned member hears once.
    let comment = comment_by(&app, w.bob, post, "first").await;
    let edit_comment = "mutation($c: ID!, $b: String!) { editComment(commentId: $c, body: $b) { id } }";
    for body in ["first, cc @prof", "first, cc @prof @alice"] {
        app.gql_ok(Some(&app.token(w.bob)), edit_comment, json!({ "c": gid("Comment", comment), "b": body })).await;
    }
    assert_eq!(summary(&app, w.instructor).await, vec![pair("MENTION", "bob"), pair("MENTION", "alice")]);
    assert_eq!(summary(&app, w.alice).await, vec![pair("REPLY", "bob")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_the_cause_withdraws_its_notifications_and_moves_the_live_unread_count() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    let post = post_by(&app, w.alice, w.course, "thread", "@prof have a look").await;
    let comment = comment_by(&app, w.bob, post, "root, cc @prof").await;
    let reply = reply_by(&app, w.alice, &gid("Comment", comment), "answer").await;
    let kept = comment_by(&app, w.bob, post, "another").await;
    assert_eq!(notifications_of(&app, w.alice).await.1, 2, "two comments on her post");
    assert_eq!(notifications_of(&app, w.bob).await.1, 1, "the reply");
    assert_eq!(notifications_of(&app, w.instructor).await.1, 2, "two mentions");

    let mut alice_socket = GqlSocket::connect(app.addr, Some(&app.token(w.alice))).await.expect("connect");
    alice_socket.subscribe("1", LIVE, json!({})).await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    // Deleting the root comment withdraws what it and its reply caused.
    app.gql_ok(
        Some(&app.token(w.bob)),
        "mutation($c: ID!) { deleteComment(commentId: $c) { deletedId } }",
        json!({ "c": gid("Comment", comment) }),
    )
    .await;
    assert_eq!(summary(&app, w.bob).await, vec![], "the reply under it is gone");
    assert_eq!(summary(&app, w.instructor).await, vec![pair("MENTION", "alice")]);
    let (alice, unread) = notifications_of(&app, w.alice).await;
    assert_eq!((alice.len(), unread), (1, 1));
    assert_eq!(alice[0]["comment"]["id"], gid("Comment", kept));
    let update = alice_socket.next_data(Duration::from_secs(10)).await.expect("a live update");
    assert_eq!(update["notifications"], json!({ "unreadCount": 1, "notification": null }));

    // Deleting the post withdraws everything under it.
    app.gql_ok(
        Some(&app.token(w.alice)),
        "mutation($p: ID!) { deletePost(postId: $p) { deletedId } }",
        json!({ "p": gid("Post", post) }),
    )
    .await;
    assert_eq!(stored_notifications(&app).await, 0);
    for user in [w.alice, w.bob, w.instructor] {
        assert_eq!(notifications_of(&app, user).await, (vec![], 0));
    }
    let update = alice_socket.next_data(Duration::from_secs(10)).await.expect("a live update");
    assert_eq!(update["notifications"]["unreadCount"], 0);
    let _ = reply;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_notification_written_on_one_instance_is_delivered_live_on_another() {
    let a = TestApp::spawn().await;
    let b = a.spawn_peer(|_| {}).await;
    let w = World::create(&a).await;
    let post = post_by(&a, w.alice, w.course, "live", "body").await;

    let mut socket = GqlSocket::connect(b.addr, Some(&a.token(w.alice))).await.expect("connect to B");
    socket.subscribe("1", LIVE, json!({})).await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    let comment = comment_by(&a, w.bob, post, "first").await;
    let data = socket.next_data(Duration::from_secs(10)).await.expect("an update on B");
    let live = &data["notifications"];
    assert_eq!(live["unreadCount"], 1);
    assert_eq!(live["notification"]["kind"], "REPLY");
    assert_eq!(live["notification"]["actor"]["handle"], "bob");
    assert_eq!(live["notification"]["post"]["id"], gid("Post", post));
    let listed = notifications_of(&a, w.alice).await.0;
    assert_eq!(live["notification"]["id"], listed[0]["id"], "the update is the listed notification");

    // A mention reaches the subscriber too, and marking read moves the count on every instance.
    post_by(&a, w.bob, w.course, "hey @alice", "body").await;
    let data = socket.next_data(Duration::from_secs(10)).await.expect("a second update on B");
    assert_eq!(data["notifications"]["notification"]["kind"], "MENTION");
    assert_eq!(data["notifications"]["unreadCount"], 2);
    let newest = notifications_of(&a, w.alice).await.0[0]["id"].clone();
    a.gql_ok(
        Some(&a.token(w.alice)),
        "mutation($n: ID!) { markNotificationsRead(upTo: $n) { unreadCount } }",
        json!({ "n": newest }),
    )
    .await;
    let data = socket.next_data(Duration::from_secs(10)).await.expect("the read update on B");
    assert_eq!(data["notifications"], json!({ "unreadCount": 0, "notification": null }));
    let _ = comment;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn notifications_from_a_course_the_user_left_are_not_shown_counted_or_delivered() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    app.enroll(w.other_course, w.alice, "student").await;
    let in_course = post_by(&app, w.bob, w.course, "hey @alice", "body").await;
    let in_other = post_by(&app, w.outsider, w.other_course, "hello @alice", "body").await;
    let (listed, unread) = notifications_of(&app, w.alice).await;
    assert_eq!((listed.len(), unread), (2, 2));
    let from_course = listed.iter().find(|n| n["post"]["id"] == gid("Post", in_course)).expect("listed")["id"].clone();

    let mut socket = GqlSocket::connect(app.addr, Some(&app.token(w.alice))).await.expect("connect");
    socket.subscribe("1", LIVE, json!({})).await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    app.unenroll(w.course, w.alice).await;
    app.memberships_settled().await;
    // The subscription hears her courses change: her count drops with the course she left.
    let data = socket.next_data(Duration::from_secs(10)).await.expect("the count after leaving");
    assert_eq!(data["notifications"], json!({ "unreadCount": 1, "notification": null }));
    let (listed, unread) = notifications_of(&app, w.alice).await;
    assert_eq!(unread, 1);
    assert_eq!(listed.iter().map(|n| n["post"]["id"].clone()).collect::<Vec<_>>(), vec![json!(gid("Post", in_other))]);
    let by_id = app
        .gql(Some(&app.token(w.alice)), "query($id: ID!) { node(id: $id) { id } }", json!({ "id": from_course }))
        .await;
    assert_eq!(error_code(&by_id).as_deref(), Some("NOT_FOUND"), "{by_id}");
    // A mention in the course she left creates nothing; the subscription hears nothing of it,
    // and the next update it delivers comes from the course she is still in.
    post_by(&app, w.bob, w.course, "still @alice?", "body").await;
    let again = post_by(&app, w.outsider, w.other_course, "again @alice", "body").await;
    let data = socket.next_data(Duration::from_secs(10)).await.expect("an update");
    assert_eq!(data["notifications"]["notification"]["post"]["id"], gid("Post", again));
    assert_eq!(data["notifications"]["unreadCount"], 2);

    // Rejoining shows them again: leaving hid them, it did not delete them.
    app.enroll(w.course, w.alice, "student").await;
    app.memberships_settled().await;
    assert_eq!(notifications_of(&app, w.alice).await.1, 3);
}

#[tokio::test]
async fn marking_read_is_monotonic_and_only_for_your_own_notifications() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    let post = post_by(&app, w.alice, w.course, "q", "b").await;
    for n in 0..3 {
        comment_by(&app, w.bob, post, &format!("comment {n}")).await;
    }
    let (listed, unread) = notifications_of(&app, w.alice).await;
    assert_eq!(unread, 3);
    let mark = "mutation($n: ID!) { markNotificationsRead(upTo: $n) { unreadCount } }";
    let middle = listed[1]["id"].clone();
    let data = app.gql_ok(Some(&app.token(w.alice)), mark, json!({ "n": middle })).await;
    assert_eq!(data["markNotificationsRead"]["unreadCount"], 1, "the newest is still unread");
    let reads: Vec<bool> = notifications_of(&app, w.alice).await.0.iter().map(|n| n["read"] == true).collect();
    assert_eq!(reads, vec![false, true, true]);
    // An older mark moves nothing back.
    let data = app.gql_ok(Some(&app.token(w.alice)), mark, json!({ "n": listed[2]["id"] })).await;
    assert_eq!(data["markNotificationsRead"]["unreadCount"], 1);
    // Someone else's notification, a wrong kind of id, garbage: refused, nothing changes.
    let response = app.gql(Some(&app.token(w.bob)), mark, json!({ "n": listed[0]["id"] })).await;
    assert_eq!(error_code(&response).as_deref(), Some("NOT_FOUND"), "{response}");
    let response = app.gql(Some(&app.token(w.alice)), mark, json!({ "n": gid("Post", post) })).await;
    assert_eq!(error_code(&response).as_deref(), Some("BAD_USER_INPUT"), "{response}");
    let response = app.gql(Some(&app.token(w.alice)), mark, json!({ "n": "%%%" })).await;
    assert_eq!(error_code(&response).as_deref(), Some("BAD_USER_INPUT"), "{response}");
    assert_eq!(notifications_of(&app, w.alice).await.1, 1);
    let response = app.gql(None, "query { notifications { unreadCount } }", json!({})).await;
    assert_eq!(error_code(&response).as_deref(), Some("UNAUTHENTICATED"), "{response}");
}

#[tokio::test]
async fn each_user_keeps_only_their_newest_notifications_and_pages_walk_them_all() {
    let app = TestApp::spawn_with(|s| s.notifications_per_user = 4).await;
    let w = World::create(&app).await;
    let post = post_by(&app, w.alice, w.course, "q", "b").await;
    let mut comments = Vec::new();
    for n in 0..7 {
        comments.push(comment_by(&app, w.bob, post, &format!("comment {n}")).await);
    }
    let kept =
        app.scalar_i64("SELECT count(*) AS v FROM notifications WHERE recipient_id = $1", [w.alice.into()]).await;
    assert_eq!(kept, 4);
    // Pages of 3, newest first, through the cursor.
    let page = "query($after: String) { notifications(first: 3, after: $after) { \
        pageInfo { hasNextPage endCursor } nodes { comment { id } } } }";
    let mut walked = Vec::new();
    let mut after = Value::Null;
    loop {
        let data = app.gql_ok(Some(&app.token(w.alice)), page, json!({ "after": after })).await;
        let conn = &data["notifications"];
        walked.extend(conn["nodes"].as_array().expect("nodes").iter().map(|n| n["comment"]["id"].clone()));
        if conn["pageInfo"]["hasNextPage"] != true {
            break;
        }
        after = conn["pageInfo"]["endCursor"].clone();
    }
    let newest: Vec<Value> = comments.iter().rev().take(4).map(|c| json!(gid("Comment", *c))).collect();
    assert_eq!(walked, newest);
}

/// Ten likes raise alice's post to the first milestone; an unlike and a like again cross it a
/// second time, which must not notify again.
async fn like_milestones_notify_once_per_threshold(mode: LikeMode) {
    let app = TestApp::spawn_with(|s| s.like_mode = mode).await;
    let w = World::create(&app).await;
    let post = post_by(&app, w.alice, w.course, "popular", "b").await;
    let mut likers = Vec::new();
    for n in 0..10 {
        let user = app.create_user(&format!("fan{n}")).await;
        app.enroll(w.course, user, "student").await;
        likers.push(user);
    }
    let set_like = |user: i64, liked: bool| {
        let app = &app;
        let mutation = if liked { "likePost" } else { "unlikePost" };
        async move {
            app.gql_ok(
                Some(&app.token(user)),
                &format!("mutation($p: ID!) {{ {mutation}(postId: $p) {{ id }} }}"),
                json!({ "p": gid("Post", post) }),
            )
            .await;
        }
    };
    let mut socket = GqlSocket::connect(app.addr, Some(&app.token(w.alice))).await.expect("connect");
    socket.subscribe("1", LIVE, json!({})).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let worker = app.worker().await;
    // Buffered likes reach PostgreSQL when the worker applies them; sync ones at once.
    let applied = || async {
        if mode == LikeMode::Buffered {
            drain_all(&app, &worker).await;
        }
    };
    for user in &likers {
        set_like(*user, true).await;
    }
    applied().await;
    let update = socket.next_data(Duration::from_secs(10)).await.expect("the milestone, live");
    assert_eq!(update["notifications"]["notification"]["kind"], "LIKE_MILESTONE");
    assert_eq!(update["notifications"]["unreadCount"], 1);

    set_like(likers[0], false).await;
    applied().await;
    set_like(likers[0], true).await;
    applied().await;
    let (listed, unread) = notifications_of(&app, w.alice).await;
    assert_eq!(unread, 1);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["milestone"], 10);
    assert_eq!(listed[0]["actor"], Value::Null);
    assert_eq!(listed[0]["post"]["id"], gid("Post", post));
    assert_eq!(app.scalar_i64("SELECT like_count::bigint AS v FROM posts WHERE id = $1", [post.into()]).await, 10);
}

in_each_like_mode!(like_milestones_notify_once_per_threshold);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_like_batch_replayed_after_a_crash_notifies_its_milestone_once() {
    // One shard: the crashing worker's first batch holds all twelve likes, so it is the batch
    // that reaches the milestone.
    let app = TestApp::spawn_with(|s| {
        s.like_mode = LikeMode::Buffered;
        s.like_stream_shards = 1;
    })
    .await;
    let w = World::create(&app).await;
    let post = post_by(&app, w.alice, w.course, "popular", "b").await;
    for n in 0..12 {
        let user = app.create_user(&format!("fan{n}")).await;
        app.enroll(w.course, user, "student").await;
        app.gql_ok(
            Some(&app.token(user)),
            "mutation($p: ID!) { likePost(postId: $p) { id } }",
            json!({ "p": gid("Post", post) }),
        )
        .await;
    }
    // The batch commits (writing the milestone) and the worker dies before its ack.
    let status = run_crashing_worker(&app, "abort-after-commit");
    assert_eq!(status.signal(), Some(6), "the worker died by SIGABRT: {status:?}");
    assert!(pending_entries(&app).await > 0, "the committed batch was never acked");
    assert_eq!(app.scalar_i64("SELECT count(*) AS v FROM notifications WHERE kind = 'milestone'", []).await, 1);

    // A survivor takes over once the lease lapses and replays the batch.
    let survivor = app.worker().await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while pending_entries(&app).await > 0 {
        survivor.drain().await.expect("drain");
        assert!(Instant::now() < deadline, "the survivor did not take over within 20 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(app.scalar_i64("SELECT like_count::bigint AS v FROM posts WHERE id = $1", [post.into()]).await, 12);
    let (listed, unread) = notifications_of(&app, w.alice).await;
    assert_eq!((listed.len(), unread), (1, 1), "{listed:?}");
    assert_eq!(listed[0]["kind"], "LIKE_MILESTONE");
}

#[tokio::test]
async fn a_burst_of_mentions_is_held_to_the_write_limit_and_refused_writes_notify_nobody() {
    let app = TestApp::spawn_with(|s| s.comment_rate_per_minute = 3).await;
    let w = World::create(&app).await;
    let post = post_by(&app, w.alice, w.course, "q", "b").await;
    let mut refused = 0;
    for n in 0..6 {
        let response = app
            .gql(
                Some(&app.token(w.bob)),
                "mutation($p: ID!, $b: String!) { createComment(postId: $p, body: $b) { id } }",
                json!({ "p": gid("Post", post), "b": format!("@prof look {n}") }),
            )
            .await;
        if response.get("errors").is_some() {
            assert_eq!(error_code(&response).as_deref(), Some("RATE_LIMITED"), "{response}");
            refused += 1;
        }
    }
    assert_eq!(refused, 3);
    assert_eq!(notifications_of(&app, w.instructor).await.1, 3, "one mention per accepted comment");
    assert_eq!(notifications_of(&app, w.alice).await.1, 3, "one reply per accepted comment");
}
