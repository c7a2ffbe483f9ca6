//! Membership as a live fact: open subscriptions end with FORBIDDEN within a second of losing
//! access (a direct SQL delete, as an LMS sync job would do it, or a change another instance
//! made), each instance keeps memberships in memory and forgets them when it hears a change,
//! and a listener that lost its connection treats everything as changed when it is back; each
//! time it listens, an instance warms its memory from the database (`membership::warm`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use course_forum::testing::config::LikeMode;
use serde_json::{Value, json};

use crate::common::ws::GqlSocket;
use crate::common::{TestApp, World, error_code, gid};

const COURSE_ACTIVITY: &str = "subscription($c: ID!) { courseActivity(courseId: $c) { kind nodeId } }";
const LIKE_COUNTS: &str = "subscription($ids: [ID!]!) { likeCounts(ids: $ids) { id likeCount } }";
const CREATE_POST: &str = "mutation($c: ID!) { createPost(courseId: $c, title: \"t\", body: \"b\") { id } }";
const READ_COURSE: &str = "query($c: ID!) { course(id: $c) { id title } }";
const LIKE_POST: &str = "mutation($p: ID!) { likePost(postId: $p) { likeCount likedByMe } }";

/// How soon an open subscription must end after its user lost access.
const REVOCATION_BOUND: Duration = Duration::from_secs(1);

fn payload_code(message: &Value) -> Option<&str> {
    message["payload"]["errors"][0]["extensions"]["code"].as_str()
}

/// Reads messages until each of `ids` has received a FORBIDDEN error followed by `complete`;
/// returns how long that took. Panics on any other message for those ids, or at `timeout`.
async fn wait_revoked(socket: &mut GqlSocket, ids: &[&str], timeout: Duration) -> Duration {
    let started = Instant::now();
    let mut forbidden: HashMap<String, bool> = HashMap::new();
    let mut completed = 0;
    while completed < ids.len() {
        let left = timeout.saturating_sub(started.elapsed());
        let message = socket.next_message(left).await.unwrap_or_else(|| {
            panic!("subscriptions {ids:?} did not end within {timeout:?} (ended with FORBIDDEN: {forbidden:?})")
        });
        let id = message["id"].as_str().unwrap_or_default().to_owned();
        if !ids.contains(&id.as_str()) {
            continue;
        }
        match message["type"].as_str() {
            Some("next") | Some("data") => {
                assert_eq!(payload_code(&message), Some("FORBIDDEN"), "only a FORBIDDEN error may arrive: {message}");
                forbidden.insert(id, true);
            }
            Some("complete") => {
                assert!(forbidden.contains_key(&id), "{id} completed without its FORBIDDEN error");
                completed += 1;
            }
            _ => panic!("unexpected message {message}"),
        }
    }
    started.elapsed()
}

async fn operate(socket: &mut GqlSocket, id: &str, query: &str, variables: Value) -> Value {
    socket.subscribe(id, query, variables).await;
    loop {
        let message = socket.next_message(Duration::from_secs(10)).await.expect("a result");
        if message["id"] == id {
            return message["payload"].clone();
        }
    }
}

async fn removal_by_sql_ends_open_subscriptions(protocol: &str) {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let bob = app.token(world.bob);
    let post = app.create_post(&bob, world.course, "watched").await;
    let mut socket = GqlSocket::connect_with(app.addr, Some(&app.token(world.alice)), protocol).await.expect("ws");
    socket.subscribe("activity", COURSE_ACTIVITY, json!({ "c": gid("Course", world.course) })).await;
    socket.subscribe("likes", LIKE_COUNTS, json!({ "ids": [gid("Post", post)] })).await;
    // Both subscriptions are live: a new post reaches the first.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let seen_post = app.create_post(&bob, world.course, "seen").await;
    // Wait for this post's own event: the "watched" post's, published after its commit, may
    // reach the subscription late, and must not be taken for it (the "seen" event would then
    // land after the delete below).
    let seen_id = gid("Post", seen_post);
    loop {
        let data = socket.next_data(Duration::from_secs(5)).await.expect("activity while a member");
        assert_eq!(data["courseActivity"]["kind"], "POST_CREATED", "{protocol}: {data}");
        if data["courseActivity"]["nodeId"] == seen_id.as_str() {
            break;
        }
    }

    app.scalar_i64(
        "WITH gone AS (DELETE FROM course_members WHERE course_id = $1 AND user_id = $2 RETURNING 1) \
         SELECT count(*) AS v FROM gone",
        [world.course.into(), world.alice.into()],
    )
    .await;
    let took = wait_revoked(&mut socket, &["activity", "likes"], Duration::from_secs(5)).await;
    assert!(took < REVOCATION_BOUND, "{protocol}: subscriptions ended {took:?} after the delete");

    // The next operation on the same socket is refused, and writes nothing.
    let posts = app.scalar_i64("SELECT count(*) AS v FROM posts", []).await;
    let refused = operate(&mut socket, "post", CREATE_POST, json!({ "c": gid("Course", world.course) })).await;
    assert_eq!(refused["errors"][0]["extensions"]["code"], "FORBIDDEN", "{protocol}: {refused}");
    assert_eq!(app.scalar_i64("SELECT count(*) AS v FROM posts", []).await, posts, "{protocol}");
    // Subscribing again is refused too.
    let again = operate(&mut socket, "again", COURSE_ACTIVITY, json!({ "c": gid("Course", world.course) })).await;
    assert_eq!(again["errors"][0]["extensions"]["code"], "FORBIDDEN", "{protocol}: {again}");
    // Her posts stay.
    app.create_post(&bob, world.course, "after").await;
    assert_eq!(app.scalar_i64("SELECT count(*) AS v FROM posts WHERE user_id = $1", [world.bob.into()]).await, 3);
}

#[tokio::test]
async fn graphql_transport_ws_subscriptions_end_when_sql_removes_the_member() {
    removal_by_sql_ends_open_subscriptions("graphql-transport-ws").await;
}

#[tokio::test]
async fn legacy_graphql_ws_subscriptions_end_when_sql_removes_the_member() {
    removal_by_sql_ends_open_subscriptions("graphql-ws").await;
}

#[tokio::test]
async fn subscriptions_of_other_members_and_other_courses_go_on() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    // Alice is also in the other course; she leaves only the first.
    app.enroll(world.other_course, world.alice, "student").await;
    let mut alice = GqlSocket::connect(app.addr, Some(&app.token(world.alice))).await.expect("ws");
    alice.subscribe("first", COURSE_ACTIVITY, json!({ "c": gid("Course", world.course) })).await;
    alice.subscribe("other", COURSE_ACTIVITY, json!({ "c": gid("Course", world.other_course) })).await;
    let mut bob = GqlSocket::connect(app.addr, Some(&app.token(world.bob))).await.expect("ws");
    bob.subscribe("first", COURSE_ACTIVITY, json!({ "c": gid("Course", world.course) })).await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    app.unenroll(world.course, world.alice).await;
    wait_revoked(&mut alice, &["first"], Duration::from_secs(5)).await;
    // Bob's subscription and alice's other course are untouched.
    app.create_post(&app.token(world.instructor), world.course, "for bob").await;
    assert_eq!(
        bob.next_data(Duration::from_secs(5)).await.expect("bob still subscribed")["courseActivity"]["kind"],
        "POST_CREATED"
    );
    app.create_post(&app.token(world.outsider), world.other_course, "for alice").await;
    let other = alice.next_message(Duration::from_secs(5)).await.expect("alice's other course");
    assert_eq!(other["id"], "other");
    assert_eq!(other["payload"]["data"]["courseActivity"]["kind"], "POST_CREATED");
}

#[tokio::test]
async fn a_removal_seen_by_one_instance_is_enforced_by_the_other() {
    let app = TestApp::spawn().await;
    let peer = app.spawn_peer(|_| {}).await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let course = json!({ "c": gid("Course", world.course) });
    // The peer has alice's memberships in memory, and a subscription of hers open.
    let read = app.gql_at(peer.addr, Some(&alice), READ_COURSE, course.clone()).await;
    assert!(read.get("errors").is_none(), "{read}");
    assert!(peer.state.memberships.cached(world.alice).is_some(), "the peer keeps alice's memberships");
    let mut socket = GqlSocket::connect(peer.addr, Some(&alice)).await.expect("ws to the peer");
    socket.subscribe("activity", COURSE_ACTIVITY, course.clone()).await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    // Removed through the first instance's database session.
    let removed_at = Instant::now();
    app.scalar_i64(
        "WITH gone AS (DELETE FROM course_members WHERE course_id = $1 AND user_id = $2 RETURNING 1) \
         SELECT count(*) AS v FROM gone",
        [world.course.into(), world.alice.into()],
    )
    .await;
    wait_revoked(&mut socket, &["activity"], Duration::from_secs(5)).await;
    assert!(removed_at.elapsed() < REVOCATION_BOUND, "the peer ended it in {:?}", removed_at.elapsed());
    for addr in [app.addr, peer.addr] {
        let refused = app.gql_at(addr, Some(&alice), READ_COURSE, course.clone()).await;
        assert_eq!(error_code(&refused).as_deref(), Some("FORBIDDEN"), "{addr}: {refused}");
    }
    // Back in the course: both instances let her in again.
    app.enroll(world.course, world.alice, "student").await;
    app.memberships_heard_by(&[&app.state, &peer.state]).await;
    for addr in [app.addr, peer.addr] {
        let read = app.gql_at(addr, Some(&alice), READ_COURSE, course.clone()).await;
        assert!(read.get("errors").is_none(), "{addr}: {read}");
    }
}

/// A role changed by SQL takes effect: a student promoted to instructor may delete another
/// member's post, and demoted again may not.
#[tokio::test]
async fn a_role_change_by_sql_takes_effect() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let delete = "mutation($p: ID!) { deletePost(postId: $p) { deletedId } }";
    let first = app.create_post(&app.token(world.bob), world.course, "one").await;
    let refused = app.gql(Some(&alice), delete, json!({ "p": gid("Post", first) })).await;
    assert_eq!(error_code(&refused).as_deref(), Some("FORBIDDEN"), "{refused}");
    let set_role = async |role: &str| {
        app.scalar_i64(
            "WITH r AS (UPDATE course_members SET role = $3 WHERE course_id = $1 AND user_id = $2 RETURNING 1) \
             SELECT count(*) AS v FROM r",
            [world.course.into(), world.alice.into(), role.into()],
        )
        .await;
        app.memberships_settled().await;
    };
    set_role("instructor").await;
    app.gql_ok(Some(&alice), delete, json!({ "p": gid("Post", first) })).await;
    set_role("student").await;
    let second = app.create_post(&app.token(world.bob), world.course, "two").await;
    let refused = app.gql(Some(&alice), delete, json!({ "p": gid("Post", second) })).await;
    assert_eq!(error_code(&refused).as_deref(), Some("FORBIDDEN"), "{refused}");
}

/// Once an instance has a user's memberships in memory, their likes and course pages run no
/// membership statement; a change by SQL is still seen.
async fn memberships_come_from_memory(mode: LikeMode) {
    let app = TestApp::spawn_with(|s| s.like_mode = mode).await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let post = app.create_post(&app.token(world.bob), world.course, "liked").await;
    let course = json!({ "c": gid("Course", world.course) });
    app.gql_ok(Some(&alice), READ_COURSE, course.clone()).await; // memberships into memory
    assert!(app.state.memberships.cached(world.alice).is_some());

    let unlike = "mutation($p: ID!) { unlikePost(postId: $p) { likedByMe } }";
    let post_id = json!({ "p": gid("Post", post) });
    // Warm the post cache and the liked-set: later toggles measure only themselves.
    app.gql_ok(Some(&alice), LIKE_POST, post_id.clone()).await;
    app.gql_ok(Some(&alice), unlike, post_id.clone()).await;
    let statements = async |query: &str, variables: &Value| {
        let before = app.state.sql_statements.get();
        app.gql_ok(Some(&alice), query, variables.clone()).await;
        app.state.sql_statements.get() - before
    };
    let like_from_memory = statements(LIKE_POST, &post_id).await;
    let page_from_memory = statements(READ_COURSE, &course).await;
    app.state.memberships.everything_changed();
    let unlike_without_memory = statements(unlike, &post_id).await;
    app.state.memberships.everything_changed();
    let page_without_memory = statements(READ_COURSE, &course).await;
    let like_again_from_memory = statements(LIKE_POST, &post_id).await;
    // Buffered: a toggle is Redis only. Sync: the toggle's own statement. Without memory, one
    // statement more (the memberships). A course read: one statement either way (the course row,
    // joined with the memberships when they are not in memory).
    let toggle = if mode == LikeMode::Buffered { 0 } else { 1 };
    assert_eq!(like_from_memory, toggle, "{mode:?}: a like with memberships in memory");
    assert_eq!(like_again_from_memory, toggle, "{mode:?}: kept after a reading");
    assert_eq!(unlike_without_memory, toggle + 1, "{mode:?}: an unlike that had to read memberships");
    assert_eq!((page_from_memory, page_without_memory), (1, 1), "{mode:?}: course reads");

    // A change by SQL is heard and the next request reads it.
    app.unenroll(world.course, world.alice).await;
    assert!(app.state.memberships.cached(world.alice).is_none(), "{mode:?}: forgotten when heard");
    let refused = app.gql(Some(&alice), LIKE_POST, json!({ "p": gid("Post", post) })).await;
    assert_eq!(error_code(&refused).as_deref(), Some("FORBIDDEN"), "{mode:?}: {refused}");
}

in_each_like_mode!(memberships_come_from_memory);

/// While the listener is disconnected, memory is not trusted (every request reads PostgreSQL);
/// when it listens again, everything counts as changed: a removal it never heard of ends the
/// open subscription.
#[tokio::test]
async fn a_listener_that_reconnects_treats_everything_as_changed() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let course = json!({ "c": gid("Course", world.course) });
    app.gql_ok(Some(&alice), READ_COURSE, course.clone()).await;
    let mut socket = GqlSocket::connect(app.addr, Some(&alice)).await.expect("ws");
    socket.subscribe("activity", COURSE_ACTIVITY, course.clone()).await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    let hooks = app.state.memberships.listener_hooks();
    let held = hooks.before_reconnect.hold().await;
    let killed = app
        .scalar_i64(
            "SELECT count(*) AS v FROM pg_stat_activity \
             WHERE datname = current_database() AND query LIKE 'LISTEN %' AND pg_terminate_backend(pid, 5000)",
            [],
        )
        .await;
    assert_eq!(killed, 1, "the instance's one listening session");
    let deadline = Instant::now() + Duration::from_secs(5);
    while app.state.memberships.listening() {
        assert!(Instant::now() < deadline, "the listener noticed its connection was gone");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Nobody listens: this notification is lost.
    app.scalar_i64(
        "WITH gone AS (DELETE FROM course_members WHERE course_id = $1 AND user_id = $2 RETURNING 1) \
         SELECT count(*) AS v FROM gone",
        [world.course.into(), world.alice.into()],
    )
    .await;
    // Still ready (it serves from PostgreSQL), and says it does not hear changes.
    let ready: Value = app.http.get(app.url("/readyz")).send().await.expect("readyz").json().await.expect("json");
    assert_eq!((ready["ready"].clone(), ready["membership_listener"].clone()), (json!(true), json!(false)), "{ready}");
    // Memory is not trusted meanwhile: the removal is enforced from PostgreSQL.
    let refused = app.gql(Some(&alice), READ_COURSE, course.clone()).await;
    assert_eq!(error_code(&refused).as_deref(), Some("FORBIDDEN"), "{refused}");
    assert!(app.state.memberships.cached(world.alice).is_none());

    let warms = app.state.memberships.warms_ended();
    drop(held);
    let took = wait_revoked(&mut socket, &["activity"], Duration::from_secs(10)).await;
    assert!(app.state.memberships.listening(), "listening again");
    assert!(took < Duration::from_secs(5), "ended {took:?} after the listener was let go");
    // Back, it warmed again from what the database holds now: bob, who never made a request,
    // is in memory; alice, removed while nobody listened, is not.
    let deadline = Instant::now() + Duration::from_secs(5);
    while app.state.memberships.warms_ended() == warms {
        assert!(Instant::now() < deadline, "the warm after the reconnect ended");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(app.state.memberships.cached(world.bob).is_some(), "bob warmed");
    let alice_roles = app.state.memberships.cached(world.alice);
    assert!(alice_roles.is_none_or(|r| !r.contains_key(&world.course)), "alice's removal read, not remembered");
}

const REMOVE_MEMBER: &str =
    "mutation($c: ID!, $u: ID!) { removeCourseMember(courseId: $c, userId: $u) { role changed } }";

/// An instructor removes a member through the roster API: on this instance (which learns it
/// at commit) and on another (which hears the notification), the member's open subscriptions
/// end with FORBIDDEN within a second and their next operation on the open socket is refused.
#[tokio::test]
async fn a_removal_through_the_roster_api_reaches_open_sockets_on_every_instance() {
    let app = TestApp::spawn().await;
    let peer = app.spawn_peer(|_| {}).await;
    let world = World::create(&app).await;
    let course = json!({ "c": gid("Course", world.course) });
    let mut here = GqlSocket::connect(app.addr, Some(&app.token(world.alice))).await.expect("ws here");
    let mut there = GqlSocket::connect(peer.addr, Some(&app.token(world.alice))).await.expect("ws there");
    for socket in [&mut here, &mut there] {
        socket.subscribe("activity", COURSE_ACTIVITY, course.clone()).await;
        // Memberships into both instances' memory.
        let read = operate(socket, "read", READ_COURSE, course.clone()).await;
        assert!(read.get("errors").is_none(), "{read}");
    }
    assert!(peer.state.memberships.cached(world.alice).is_some());

    let removed_at = Instant::now();
    let removed = app
        .gql_ok(
            Some(&app.token(world.instructor)),
            REMOVE_MEMBER,
            json!({ "c": gid("Course", world.course), "u": gid("User", world.alice) }),
        )
        .await;
    assert_eq!(removed["removeCourseMember"]["changed"], true);
    for (name, socket) in [("this instance", &mut here), ("the other instance", &mut there)] {
        wait_revoked(socket, &["activity"], Duration::from_secs(5)).await;
        assert!(removed_at.elapsed() < REVOCATION_BOUND, "{name}: ended {:?} after the removal", removed_at.elapsed());
        let refused = operate(socket, "post", CREATE_POST, course.clone()).await;
        assert_eq!(refused["errors"][0]["extensions"]["code"], "FORBIDDEN", "{name}: {refused}");
    }
    // Her posts stay; she is simply no longer a member.
    assert_eq!(
        app.scalar_i64(
            "SELECT count(*) AS v FROM course_members WHERE course_id = $1 AND user_id = $2",
            [world.course.into(), world.alice.into()]
        )
        .await,
        0
    );
}

const START_VIEW: &str = "mutation($p: ID!) { startPostView(postId: $p) { ticket } }";
const READ_POST: &str = "query($p: ID!) { post(id: $p) { id title } }";

/// An instance that starts after its members joined has them in memory before it serves (the
/// warm, `membership::warm`): a member's first view start on a post in memory runs no
/// statement. A member who joined after the start is read on first use, as without the warm,
/// and a removal is heard as always.
async fn an_instance_knows_its_members_before_their_first_request(mode: LikeMode) {
    let app = TestApp::spawn_in(mode).await;
    let world = World::create(&app).await;
    let post = gid("Post", app.create_post(&app.token(world.bob), world.course, "hot").await);
    let loner = app.create_user("loner").await;
    let peer = app.spawn_peer(|s| s.like_mode = mode).await;
    assert!(peer.state.memberships.warms_ended() >= 1, "the peer served only after its warm ended");
    let alice_roles = peer.state.memberships.holds(world.alice).expect("alice is in memory before any request");
    assert!(alice_roles.contains_key(&world.course) && alice_roles.len() == 1, "alice's one course: {alice_roles:?}");
    assert!(peer.state.memberships.holds(loner).is_none(), "no membership: nothing to warm");

    // The post into the peer's memory, and the scripts into Redis: bob reads and likes it
    // there. Then alice's first request there.
    let bob = app.token(world.bob);
    app.gql_at(peer.addr, Some(&bob), READ_POST, json!({ "p": post })).await;
    let liked = app.gql_at(peer.addr, Some(&bob), LIKE_POST, json!({ "p": post })).await;
    assert_eq!(liked["data"]["likePost"]["likedByMe"], json!(true), "{liked}");
    let statements = async |token: &str| {
        let before = peer.state.sql_statements.get();
        let started = app.gql_at(peer.addr, Some(token), START_VIEW, json!({ "p": post })).await;
        assert!(started.get("errors").is_none(), "{started}");
        peer.state.sql_statements.get() - before
    };
    assert_eq!(statements(&app.token(world.alice)).await, 0, "alice's first request: memberships from the warm");
    // The instructor's first request there is a like: buffered, still a first touch (the warm
    // said nothing of their liked-set), so one statement reads their memberships and likes
    // together and one toggle loads and counts; sync, the like's own write alone.
    let (sql, redis) = (peer.state.sql_statements.get(), peer.state.redis.commands_sent());
    let liked = app.gql_at(peer.addr, Some(&app.token(world.instructor)), LIKE_POST, json!({ "p": post })).await;
    assert_eq!(liked["data"]["likePost"]["likedByMe"], json!(true), "{liked}");
    let (sql, redis) = (peer.state.sql_statements.get() - sql, peer.state.redis.commands_sent() - redis);
    assert_eq!(sql, 1, "{mode:?}: a warmed member's first request, a like: one statement");
    if mode == LikeMode::Buffered {
        assert_eq!(redis, 1, "one toggle");
    }

    // Joined after the peer started: read once, on first use.
    app.enroll(world.course, loner, "student").await;
    app.memberships_heard_by(&[&peer.state]).await;
    assert_eq!(statements(&app.token(loner)).await, 1, "a member the warm did not know");

    app.unenroll(world.course, world.alice).await;
    app.memberships_heard_by(&[&peer.state]).await;
    let refused = app.gql_at(peer.addr, Some(&app.token(world.alice)), START_VIEW, json!({ "p": post })).await;
    assert_eq!(error_code(&refused).as_deref(), Some("FORBIDDEN"), "{refused}");
}

in_each_like_mode!(an_instance_knows_its_members_before_their_first_request);

/// Over a websocket, whose viewer lives for the connection, only the first like of a warmed
/// member is a first touch: the next one finds the liked-set the first loaded.
#[tokio::test]
async fn a_warmed_members_socket_makes_one_first_touch() {
    let app = TestApp::spawn_in(LikeMode::Buffered).await;
    let world = World::create(&app).await;
    let post = gid("Post", app.create_post(&app.token(world.bob), world.course, "hot").await);
    let peer = app.spawn_peer(|s| s.like_mode = LikeMode::Buffered).await;
    assert!(peer.state.memberships.holds(world.alice).is_some(), "alice warmed");
    // The post into the peer's memory, and the scripts into Redis.
    let bob = app.token(world.bob);
    app.gql_at(peer.addr, Some(&bob), READ_POST, json!({ "p": post })).await;
    app.gql_at(peer.addr, Some(&bob), LIKE_POST, json!({ "p": post })).await;

    let mut socket = GqlSocket::connect(peer.addr, Some(&app.token(world.alice))).await.expect("ws");
    let unlike = "mutation($p: ID!) { unlikePost(postId: $p) { likedByMe } }";
    let mut statements = Vec::new();
    for (n, query) in [LIKE_POST, unlike, LIKE_POST].into_iter().enumerate() {
        let before = peer.state.sql_statements.get();
        let result = operate(&mut socket, &format!("op{n}"), query, json!({ "p": post })).await;
        assert!(result.get("errors").is_none(), "{result}");
        statements.push(peer.state.sql_statements.get() - before);
    }
    assert_eq!(statements, [1, 0, 0], "one first touch, then toggles on the loaded set");
}

/// Adds `n` users to `course` with one statement; their ids.
async fn many_members(app: &TestApp, course: i64, n: i64) -> (i64, i64) {
    let first = app
        .scalar_i64(
            "WITH u AS (INSERT INTO users (handle, display_name) \
                 SELECT 'warm_' || g, 'Warm ' || g FROM generate_series(1, $2) g RETURNING id), \
             m AS (INSERT INTO course_members (course_id, user_id, role) SELECT $1, id, 'student' FROM u RETURNING user_id) \
             SELECT min(user_id) AS v FROM m",
            [course.into(), n.into()],
        )
        .await;
    (first, first + n - 1)
}

/// The warm is bounded in bytes: under a small budget it stops when the cache is three
/// quarters full and never holds more than its share; under the default one it reads every
/// member, chunk by chunk.
#[tokio::test]
async fn the_warm_stops_at_its_share_of_the_budget() {
    use course_forum::testing::cache::budget::CacheBudget;
    use course_forum::testing::membership::Memberships;
    use course_forum::testing::membership::warm::{CHUNK_USERS, warm};
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let (first, last) = many_members(&app, world.course, 2 * CHUNK_USERS + 100).await;

    let everyone = Memberships::new(true);
    everyone.start_trusting();
    let warmed = warm(&app.db, &everyone).await.expect("warm");
    assert!(!warmed.stopped_full && warmed.chunks_skipped == 0, "{warmed:?}");
    let members = app.scalar_i64("SELECT count(DISTINCT user_id) AS v FROM course_members", []).await;
    assert_eq!(warmed.users as i64, members, "every member read, once: {warmed:?}");
    for user in [first, first + CHUNK_USERS, last, world.alice] {
        assert!(everyone.cached(user).is_some_and(|r| r.contains_key(&world.course)), "user {user}");
    }

    // 7 % of 30 MB: about 2 MB of memberships, under two chunks' worth.
    let small = Memberships::with_budget(true, &CacheBudget::new(30_000_000));
    small.start_trusting();
    let warmed = warm(&app.db, &small).await.expect("warm");
    let (used, capacity) = small.fill();
    assert!(warmed.stopped_full, "{warmed:?}");
    assert!(warmed.users > 0 && (warmed.users as i64) < last - first, "{warmed:?}");
    assert!(used <= capacity && used * 4 >= capacity * 3, "{used} of {capacity} bytes");
}

/// A chunk read while a membership change is heard is not kept: the warm reads it again, and
/// keeps what the database holds after the change.
#[tokio::test]
async fn a_chunk_read_while_a_change_was_heard_is_read_again() {
    use course_forum::testing::membership::Memberships;
    use course_forum::testing::membership::warm::warm;
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let memberships = Memberships::new(true);
    memberships.start_trusting();
    let hooks = memberships.listener_hooks();
    let held = hooks.after_warm_read.hold().await;
    let warming = tokio::spawn({
        let (db, memberships) = (app.db.clone(), memberships.clone());
        async move { warm(&db, &memberships).await }
    });
    while hooks.after_warm_read.reached() == 0 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // Alice leaves while the first reading, which still has her, waits to be kept.
    app.unenroll(world.course, world.alice).await;
    memberships.changed(world.alice); // what this memory's listener would do on hearing it
    drop(held);
    let warmed = warming.await.expect("join").expect("warm");
    assert_eq!(hooks.after_warm_read.reached(), 2, "the chunk was read again");
    assert_eq!((warmed.chunks_skipped, warmed.stopped_full), (0, false), "{warmed:?}");
    assert!(memberships.cached(world.bob).is_some_and(|r| r.contains_key(&world.course)), "bob kept");
    assert!(memberships.cached(world.alice).is_none(), "alice left: nothing of her kept");
}
