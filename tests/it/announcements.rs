//! Announcements against real PostgreSQL and Redis: one row per announcement, whatever the
//! size of the course, merged into every member's notifications when read. Who sees one (the
//! members as they are now, since they joined, never its author), the writer's cost in a
//! large course, unread counts and marking read across own notifications and announcements,
//! paging across both, withdrawal on delete, and live delivery on every instance.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::ws::GqlSocket;
use crate::common::{TestApp, World, error_code, gid, raw_id};

const LIST: &str = "query { notifications(first: 50) { unreadCount edges { node { \
    id kind read actor { handle } post { id title } comment { id } } } } }";

const LIVE: &str =
    "subscription { notifications { unreadCount notification { id kind actor { handle } post { id } } } }";

const MARK: &str = "mutation($n: ID!) { markNotificationsRead(upTo: $n) { unreadCount } }";

/// The user's notifications as the API lists them, newest first, and their unread count.
async fn notifications_of(app: &TestApp, user: i64) -> (Vec<Value>, i64) {
    let data = app.gql_ok(Some(&app.token(user)), LIST, json!({})).await;
    let list = &data["notifications"];
    let nodes = list["edges"].as_array().expect("edges").iter().map(|edge| edge["node"].clone()).collect();
    (nodes, list["unreadCount"].as_i64().expect("unreadCount"))
}

/// (kind, post id) of each notification, newest first.
async fn summary(app: &TestApp, user: i64) -> Vec<(String, i64)> {
    notifications_of(app, user)
        .await
        .0
        .iter()
        .map(|n| (n["kind"].as_str().unwrap_or_default().to_owned(), raw_id(n["post"]["id"].as_str().unwrap_or("x:0"))))
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

/// An announcement by `author` in `course` (`createPost(kind: ANNOUNCEMENT)`): its post and its
/// notification's global id.
async fn announce(app: &TestApp, author: i64, course: i64, title: &str) -> (i64, String) {
    let data = app
        .gql_ok(
            Some(&app.token(author)),
            "mutation($c: ID!, $t: String!) { createPost(courseId: $c, title: $t, body: \"to everyone\", \
               kind: ANNOUNCEMENT) { id kind } }",
            json!({ "c": gid("Course", course), "t": title }),
        )
        .await;
    assert_eq!(data["createPost"]["kind"], "ANNOUNCEMENT");
    let post = raw_id(data["createPost"]["id"].as_str().expect("post id"));
    let id = app.scalar_i64("SELECT id AS v FROM course_announcements WHERE post_id = $1", [post.into()]).await;
    (post, gid("Notification", id))
}

async fn comment_by(app: &TestApp, user: i64, post: i64, body: &str) {
    app.gql_ok(
        Some(&app.token(user)),
        "mutation($p: ID!, $b: String!) { createComment(postId: $p, body: $b) { id } }",
        json!({ "p": gid("Post", post), "b": body }),
    )
    .await;
}

async fn mark_read(app: &TestApp, user: i64, up_to: &str) -> Value {
    app.gql(Some(&app.token(user)), MARK, json!({ "n": up_to })).await
}

fn announcement(post: i64) -> (String, i64) {
    ("ANNOUNCEMENT".to_owned(), post)
}

async fn stored(app: &TestApp, table: &str) -> i64 {
    app.scalar_i64(&format!("SELECT count(*) AS v FROM {table}"), []).await
}

/// Adds `count` students to `course` in one statement; returns their ids.
async fn crowd(app: &TestApp, course: i64, count: i64) -> Vec<i64> {
    app.scalar_i64(
        "WITH u AS (INSERT INTO users (handle, display_name) \
           SELECT 'member' || n, 'member ' || n FROM generate_series(1, $2::bigint) n RETURNING id), \
         m AS (INSERT INTO course_members (course_id, user_id, role) SELECT $1, id, 'student' FROM u) \
         SELECT count(*) AS v FROM u",
        [course.into(), count.into()],
    )
    .await;
    app.memberships_settled().await;
    let first = app.scalar_i64("SELECT min(id) AS v FROM users WHERE handle LIKE 'member%'", []).await;
    (first..first + count).collect()
}

#[tokio::test]
async fn every_member_sees_an_announcement_but_its_author_and_outsiders_do_not() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    let (post, id) = announce(&app, w.instructor, w.course, "Exam moved").await;
    for member in [w.alice, w.bob] {
        let (listed, unread) = notifications_of(&app, member).await;
        assert_eq!(unread, 1);
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0]["id"], id.as_str());
        assert_eq!(listed[0]["kind"], "ANNOUNCEMENT");
        assert_eq!(listed[0]["actor"]["handle"], "prof");
        assert_eq!(listed[0]["post"], json!({ "id": gid("Post", post), "title": "Exam moved" }));
        assert_eq!(listed[0]["comment"], Value::Null);
        assert_eq!(listed[0]["read"], false);
        // The node is theirs to read by id.
        let node = app
            .gql_ok(
                Some(&app.token(member)),
                "query($id: ID!) { node(id: $id) { ... on Notification { kind } } }",
                json!({ "id": id }),
            )
            .await;
        assert_eq!(node["node"]["kind"], "ANNOUNCEMENT");
    }
    assert_eq!(notifications_of(&app, w.instructor).await, (vec![], 0), "not to its author");
    assert_eq!(notifications_of(&app, w.outsider).await, (vec![], 0), "not outside the course");
    let by_id =
        app.gql(Some(&app.token(w.outsider)), "query($id: ID!) { node(id: $id) { id } }", json!({ "id": id })).await;
    assert_eq!(error_code(&by_id).as_deref(), Some("NOT_FOUND"), "{by_id}");
    // One row for the course, none per member.
    assert_eq!(stored(&app, "course_announcements").await, 1);
    assert_eq!(stored(&app, "notifications").await, 0);
}

#[tokio::test]
async fn announcing_to_a_course_of_thousands_costs_the_writer_what_it_costs_in_a_course_of_three() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    let large = app.create_course("HUGE1").await;
    app.enroll(large, w.instructor, "instructor").await;
    let members = crowd(&app, large, 3_000).await;

    // Warm what either request reads (the instructor's memberships, the user row).
    announce(&app, w.instructor, w.course, "warm-up").await;
    let statements = |app: &TestApp| app.state.sql_statements.get();

    let before = statements(&app);
    announce(&app, w.instructor, w.course, "small course").await;
    let small = statements(&app) - before;
    let before = statements(&app);
    let (post, id) = announce(&app, w.instructor, large, "large course").await;
    let large_cost = statements(&app) - before;
    assert_eq!(large_cost, small, "statements of the writer: {large_cost} for 3,000 members, {small} for 3");
    assert_eq!(
        app.scalar_i64("SELECT count(*) AS v FROM course_announcements WHERE course_id = $1", [large.into()]).await,
        1
    );
    assert_eq!(stored(&app, "notifications").await, 0, "no row per member");

    // And every member has it, first and last alike.
    for member in [members[0], members[1_500], members[2_999]] {
        let (listed, unread) = notifications_of(&app, member).await;
        assert_eq!(unread, 1);
        assert_eq!(listed[0]["id"], id.as_str());
        assert_eq!(listed[0]["post"]["id"], gid("Post", post));
    }
}

#[tokio::test]
async fn unread_counts_and_marking_read_cover_own_notifications_and_announcements_in_one_order() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    let own_post = post_by(&app, w.alice, w.course, "question", "how?").await;
    comment_by(&app, w.bob, own_post, "like this").await; // a reply to alice
    let (first, first_id) = announce(&app, w.instructor, w.course, "first").await;
    let mention = post_by(&app, w.bob, w.course, "hey @alice", "look").await;
    let (second, second_id) = announce(&app, w.instructor, w.course, "second").await;

    let (listed, unread) = notifications_of(&app, w.alice).await;
    assert_eq!(unread, 4);
    let kinds: Vec<(String, i64)> = summary(&app, w.alice).await;
    assert_eq!(
        kinds,
        vec![
            announcement(second),
            ("MENTION".to_owned(), mention),
            announcement(first),
            ("REPLY".to_owned(), own_post)
        ]
    );
    assert_eq!(listed[2]["id"], first_id.as_str());

    // Up to the first announcement: it and the reply under it are read, the two above not.
    let marked = mark_read(&app, w.alice, &first_id).await;
    assert_eq!(marked["data"]["markNotificationsRead"]["unreadCount"], 2, "{marked}");
    let reads: Vec<bool> = notifications_of(&app, w.alice).await.0.iter().map(|n| n["read"] == true).collect();
    assert_eq!(reads, vec![false, false, true, true]);
    // Up to the mention (her own row): the second announcement above it stays unread.
    let marked = mark_read(&app, w.alice, listed[1]["id"].as_str().expect("id")).await;
    assert_eq!(marked["data"]["markNotificationsRead"]["unreadCount"], 1, "{marked}");
    // An older announcement moves nothing back.
    let marked = mark_read(&app, w.alice, &first_id).await;
    assert_eq!(marked["data"]["markNotificationsRead"]["unreadCount"], 1, "{marked}");
    let marked = mark_read(&app, w.alice, &second_id).await;
    assert_eq!(marked["data"]["markNotificationsRead"]["unreadCount"], 0, "{marked}");

    // Bob's watermark is his own: both announcements are still unread for him.
    assert_eq!(notifications_of(&app, w.bob).await.1, 2);
    // Its author and an outsider cannot mark by it.
    for user in [w.instructor, w.outsider] {
        let refused = mark_read(&app, user, &second_id).await;
        assert_eq!(error_code(&refused).as_deref(), Some("NOT_FOUND"), "{refused}");
    }
    // A newer own notification is unread above the announcements' mark.
    comment_by(&app, w.bob, own_post, "and more").await;
    assert_eq!(notifications_of(&app, w.alice).await.1, 1);
}

#[tokio::test]
async fn pages_walk_own_notifications_and_announcements_newest_first_without_duplicates_or_gaps() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    // A second course of alice's with its own instructor: announcements of two courses.
    app.enroll(w.other_course, w.alice, "student").await;
    let other_prof = app.create_user("other_prof").await;
    app.enroll(w.other_course, other_prof, "instructor").await;
    let own_post = post_by(&app, w.alice, w.course, "question", "how?").await;
    let mut expected = Vec::new();
    for round in 0..4 {
        comment_by(&app, w.bob, own_post, &format!("comment {round}")).await;
        expected.push(("REPLY".to_owned(), own_post));
        let (post, _) = announce(&app, w.instructor, w.course, &format!("course {round}")).await;
        expected.push(announcement(post));
        let (post, _) = announce(&app, other_prof, w.other_course, &format!("other {round}")).await;
        expected.push(announcement(post));
    }
    expected.reverse();

    let page = "query($after: String) { notifications(first: 3, after: $after) { \
        unreadCount pageInfo { hasNextPage endCursor } nodes { id kind post { id } } } }";
    let mut walked = Vec::new();
    let mut ids = Vec::new();
    let mut after = Value::Null;
    let mut pages = 0;
    loop {
        let data = app.gql_ok(Some(&app.token(w.alice)), page, json!({ "after": after })).await;
        let conn = &data["notifications"];
        assert_eq!(conn["unreadCount"], if pages < 2 { 12 } else { 13 }, "the late one counts, unlisted");
        for node in conn["nodes"].as_array().expect("nodes") {
            walked.push((
                node["kind"].as_str().unwrap_or_default().to_owned(),
                raw_id(node["post"]["id"].as_str().unwrap_or("x:0")),
            ));
            ids.push(raw_id(node["id"].as_str().expect("id")));
        }
        pages += 1;
        if pages == 2 {
            // Arriving mid-walk: newer than the cursor, so it neither shifts nor repeats an item.
            announce(&app, w.instructor, w.course, "late").await;
        }
        if conn["pageInfo"]["hasNextPage"] != true {
            break;
        }
        after = conn["pageInfo"]["endCursor"].clone();
    }
    assert_eq!(walked, expected);
    assert_eq!(pages, 4);
    assert!(ids.windows(2).all(|pair| pair[0] > pair[1]), "strictly newest first: {ids:?}");
}

#[tokio::test]
async fn members_see_announcements_from_while_they_belong_to_the_course() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    let (before_join, before_id) = announce(&app, w.instructor, w.course, "before carol").await;
    let carol = app.create_user("carol").await;
    app.enroll(w.course, carol, "student").await;
    let (after_join, _) = announce(&app, w.instructor, w.course, "after carol").await;
    // Carol joined after the first: she has the second only, and cannot mark by the first.
    assert_eq!(summary(&app, carol).await, vec![announcement(after_join)]);
    assert_eq!(notifications_of(&app, carol).await.1, 1);
    let refused = mark_read(&app, carol, &before_id).await;
    assert_eq!(error_code(&refused).as_deref(), Some("NOT_FOUND"), "{refused}");
    assert_eq!(summary(&app, w.alice).await, vec![announcement(after_join), announcement(before_join)]);

    // Alice leaves: neither listed, counted nor readable by id.
    app.unenroll(w.course, w.alice).await;
    assert_eq!(notifications_of(&app, w.alice).await, (vec![], 0));
    let by_id = app
        .gql(Some(&app.token(w.alice)), "query($id: ID!) { node(id: $id) { id } }", json!({ "id": before_id }))
        .await;
    assert_eq!(error_code(&by_id).as_deref(), Some("NOT_FOUND"), "{by_id}");
    announce(&app, w.instructor, w.course, "while alice is away").await;
    assert_eq!(notifications_of(&app, w.alice).await, (vec![], 0));
    // Rejoining starts afresh: what was announced before is not dumped on her as unread.
    app.enroll(w.course, w.alice, "student").await;
    assert_eq!(notifications_of(&app, w.alice).await, (vec![], 0));
    let (back, _) = announce(&app, w.instructor, w.course, "welcome back").await;
    assert_eq!(summary(&app, w.alice).await, vec![announcement(back)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_an_announcement_withdraws_it_and_the_unread_counts_drop_live() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    let (kept, _) = announce(&app, w.instructor, w.course, "kept").await;
    let (post, id) = announce(&app, w.instructor, w.course, "mistake").await;
    assert_eq!(notifications_of(&app, w.alice).await.1, 2);

    let mut socket = GqlSocket::connect(app.addr, Some(&app.token(w.alice))).await.expect("connect");
    socket.subscribe("1", LIVE, json!({})).await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    app.gql_ok(
        Some(&app.token(w.instructor)),
        "mutation($p: ID!) { deletePost(postId: $p) { deletedId } }",
        json!({ "p": gid("Post", post) }),
    )
    .await;
    for member in [w.alice, w.bob] {
        assert_eq!(summary(&app, member).await, vec![announcement(kept)]);
        assert_eq!(notifications_of(&app, member).await.1, 1);
    }
    assert_eq!(stored(&app, "course_announcements").await, 1, "its row is gone");
    let by_id =
        app.gql(Some(&app.token(w.alice)), "query($id: ID!) { node(id: $id) { id } }", json!({ "id": id })).await;
    assert_eq!(error_code(&by_id).as_deref(), Some("NOT_FOUND"), "{by_id}");
    let update = socket.next_data(Duration::from_secs(10)).await.expect("a live update");
    assert_eq!(update["notifications"], json!({ "unreadCount": 1, "notification": null }));
}

#[tokio::test]
async fn a_deleted_announcement_is_never_shown_even_before_its_row_is_withdrawn() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    let (post, _) = announce(&app, w.instructor, w.course, "soon gone").await;
    // The post deleted by SQL, as a crash between the delete and the withdrawal would leave it.
    app.scalar_i64("UPDATE posts SET deleted_at = now() WHERE id = $1 RETURNING id AS v", [post.into()]).await;
    assert_eq!(notifications_of(&app, w.alice).await, (vec![], 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_announcement_reaches_every_open_notifications_subscription_of_its_members_on_every_instance() {
    let a = TestApp::spawn().await;
    let b = a.spawn_peer(|_| {}).await;
    let w = World::create(&a).await;
    let carol = a.create_user("carol").await;
    let mut alice_on_a = GqlSocket::connect(a.addr, Some(&a.token(w.alice))).await.expect("connect to A");
    alice_on_a.subscribe("1", LIVE, json!({})).await;
    let mut bob_on_b = GqlSocket::connect(b.addr, Some(&a.token(w.bob))).await.expect("connect to B");
    bob_on_b.subscribe("1", LIVE, json!({})).await;
    let mut outsider = GqlSocket::connect(b.addr, Some(&a.token(w.outsider))).await.expect("connect outsider");
    outsider.subscribe("1", LIVE, json!({})).await;
    // Carol subscribes before she joins: her stream learns of the course when she does.
    let mut carol_on_b = GqlSocket::connect(b.addr, Some(&a.token(carol))).await.expect("connect carol");
    carol_on_b.subscribe("1", LIVE, json!({})).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    a.enroll(w.course, carol, "student").await;
    a.memberships_heard_by(&[&a.state, &b.state]).await;
    // Her courses changed: the stream says so with her count.
    let joined = carol_on_b.next_data(Duration::from_secs(10)).await.expect("carol's count after joining");
    assert_eq!(joined["notifications"], json!({ "unreadCount": 0, "notification": null }));

    let (post, id) = announce(&a, w.instructor, w.course, "Room change").await;
    for (who, socket) in [("alice", &mut alice_on_a), ("bob", &mut bob_on_b), ("carol", &mut carol_on_b)] {
        let data = socket.next_data(Duration::from_secs(10)).await.unwrap_or_else(|| panic!("{who}: no update"));
        let live = &data["notifications"];
        assert_eq!(live["unreadCount"], 1, "{who}: {live}");
        assert_eq!(live["notification"]["id"], id.as_str(), "{who}");
        assert_eq!(live["notification"]["kind"], "ANNOUNCEMENT", "{who}");
        assert_eq!(live["notification"]["actor"]["handle"], "prof", "{who}");
        assert_eq!(live["notification"]["post"]["id"], gid("Post", post), "{who}");
    }
    assert!(outsider.next_data(Duration::from_millis(500)).await.is_none(), "nothing for a non-member");

    // Alice leaves: her count drops with it, and the next announcement does not reach her.
    a.unenroll(w.course, w.alice).await;
    let data = alice_on_a.next_data(Duration::from_secs(10)).await.expect("the count after leaving");
    assert_eq!(data["notifications"], json!({ "unreadCount": 0, "notification": null }));
    announce(&a, w.instructor, w.course, "After alice").await;
    let data = bob_on_b.next_data(Duration::from_secs(10)).await.expect("bob's second");
    assert_eq!(data["notifications"]["unreadCount"], 2);
    assert!(alice_on_a.next_data(Duration::from_millis(500)).await.is_none(), "nothing after leaving");
}

#[tokio::test]
async fn only_staff_announce_and_a_refused_announcement_writes_nothing() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    let response = app
        .gql(
            Some(&app.token(w.alice)),
            "mutation($c: ID!) { createPost(courseId: $c, title: \"hear me\", body: \"all\", kind: ANNOUNCEMENT) { id } }",
            json!({ "c": gid("Course", w.course) }),
        )
        .await;
    assert_eq!(error_code(&response).as_deref(), Some("FORBIDDEN"), "{response}");
    assert_eq!(stored(&app, "course_announcements").await, 0);
    assert_eq!(stored(&app, "posts").await, 0);
    // An ordinary post notifies nobody but those it mentions.
    post_by(&app, w.instructor, w.course, "just a discussion", "nothing to hear").await;
    assert_eq!(notifications_of(&app, w.alice).await, (vec![], 0));
}
