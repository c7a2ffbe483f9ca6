//! Every websocket has a bounded cost: a socket that never sends connection_init is closed
//! with 4408, acknowledged sockets are pinged (and a peer that stops answering is dropped, on
//! either protocol), one user and one client address hold at most so many sockets on an
//! instance, a connection starts at most so many operations and sends at most so many messages
//! a minute (4429 for all of these), and a connection at its subscription budget is refused
//! before any SQL runs. What runs on a socket is bounded as over HTTP: a query or mutation by
//! REQUEST_STATEMENT_BUDGET and REQUEST_TIMEOUT, a subscription's selection by
//! SUBSCRIPTION_MAX_COST at subscribe time and each of its events by
//! SUBSCRIPTION_EVENT_STATEMENT_BUDGET.

use std::time::{Duration, Instant};

use sea_orm::ConnectionTrait;
use serde_json::{Value, json};

use crate::common::ws::GqlSocket;
use crate::common::{TestApp, World, error_code, gid, threads};

const PROTOCOL: &str = "graphql-transport-ws";

fn bearer(token: &str) -> Value {
    json!({ "authorization": format!("Bearer {token}") })
}

/// `websocket_refusals_total{reason}` as `/metrics` shows it (0 before the first).
async fn refusals(app: &TestApp, reason: &str) -> u64 {
    let text = app.http.get(app.url("/metrics")).send().await.expect("GET /metrics").text().await.expect("text");
    let series = format!("websocket_refusals_total{{reason=\"{reason}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&series))
        .map_or(0, |value| value.trim().parse().expect("a counter value"))
}

#[tokio::test]
async fn a_socket_without_connection_init_is_closed_with_4408() {
    // It reads /metrics, which counts for the whole process.
    if crate::common::ran_alone_elsewhere().await {
        return;
    }
    let app = TestApp::spawn_with(|s| s.ws_init_timeout = Duration::from_millis(300)).await;
    for protocol in ["graphql-transport-ws", "graphql-ws"] {
        let opened = Instant::now();
        let mut socket = GqlSocket::open(app.addr, protocol, None).await.expect("upgraded");
        let (code, reason) =
            socket.close_frame(Duration::from_secs(5)).await.expect("closed").expect("with a close frame");
        assert_eq!(code, 4408, "{protocol}: {reason}");
        assert!(reason.contains("initialisation timeout"), "{protocol}: {reason}");
        assert!(opened.elapsed() >= Duration::from_millis(250), "{protocol}: not before the timeout");
    }
    assert_eq!(refusals(&app, "init_timeout").await, 2, "each closure is counted");
}

#[tokio::test]
async fn a_socket_that_inits_in_time_stays_open_past_the_timeout() {
    let app = TestApp::spawn_with(|s| s.ws_init_timeout = Duration::from_millis(300)).await;
    let world = World::create(&app).await;
    let socket = GqlSocket::open(app.addr, PROTOCOL, None).await.expect("upgraded");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut socket = socket.init(bearer(&app.token(world.alice))).await.expect("acknowledged");
    assert_eq!(socket.close_frame(Duration::from_secs(1)).await, None, "still open well past the init timeout");
}

#[tokio::test]
async fn acknowledged_sockets_are_pinged_and_a_peer_that_stops_answering_is_dropped() {
    let app = TestApp::spawn_with(|s| s.ws_keepalive = Duration::from_millis(200)).await;
    let world = World::create(&app).await;
    let mut socket = GqlSocket::connect(app.addr, Some(&app.token(world.alice))).await.expect("connected");
    for _ in 0..3 {
        let ping = socket.next_raw(Duration::from_secs(2)).await.expect("a ping arrives");
        assert_eq!(ping["type"], "ping", "{ping}");
        socket.send_json(json!({ "type": "pong" })).await;
    }
    // Stop answering: the next ping goes unanswered for a whole interval.
    let (code, reason) = socket.close_frame(Duration::from_secs(3)).await.expect("closed").expect("close frame");
    assert_eq!(code, 3008, "{reason}");
    assert!(reason.contains("keepalive"), "{reason}");
}

#[tokio::test]
async fn legacy_sockets_get_keep_alive_messages_and_need_not_answer() {
    let app = TestApp::spawn_with(|s| s.ws_keepalive = Duration::from_millis(200)).await;
    let world = World::create(&app).await;
    let mut socket =
        GqlSocket::connect_with(app.addr, Some(&app.token(world.alice)), "graphql-ws").await.expect("connected");
    for _ in 0..3 {
        let ka = socket.next_raw(Duration::from_secs(2)).await.expect("a keep-alive arrives");
        assert_eq!(ka["type"], "ka", "{ka}");
    }
    assert_eq!(socket.close_frame(Duration::from_millis(700)).await, None, "silent legacy clients stay connected");
}

#[tokio::test]
async fn a_user_holds_at_most_the_cap_and_a_closed_socket_frees_a_slot() {
    // It reads /metrics, which counts for the whole process.
    if crate::common::ran_alone_elsewhere().await {
        return;
    }
    let app = TestApp::spawn_with(|s| s.ws_max_per_user = 2).await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let first = GqlSocket::connect(app.addr, Some(&alice)).await.expect("first");
    let _second = GqlSocket::connect(app.addr, Some(&alice)).await.expect("second");
    let refused = GqlSocket::connect(app.addr, Some(&alice)).await.err().expect("the third is refused");
    assert_eq!(refused.code, 4429, "{refused:?}");
    assert!(refused.reason.contains("per user"), "{refused:?}");
    assert_eq!(refusals(&app, "user_cap").await, 1);
    let _bob = GqlSocket::connect(app.addr, Some(&app.token(world.bob))).await.expect("another user has own slots");

    first.close().await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match GqlSocket::connect(app.addr, Some(&alice)).await {
            Ok(_third) => break,
            Err(refused) if refused.code == 4429 && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(refused) => panic!("the closed socket's slot was not freed: {refused:?}"),
        }
    }
}

/// Opens a socket and waits briefly: None when it stays open, else its close frame.
async fn open_and_watch(app: &TestApp) -> (GqlSocket, Option<(u16, String)>) {
    let mut socket = GqlSocket::open(app.addr, PROTOCOL, None).await.expect("upgraded");
    let closed = socket.close_frame(Duration::from_millis(300)).await.map(|frame| frame.expect("close frame"));
    (socket, closed)
}

#[tokio::test]
async fn an_address_holds_at_most_the_cap_and_a_closed_socket_frees_a_slot() {
    // It reads /metrics, which counts for the whole process.
    if crate::common::ran_alone_elsewhere().await {
        return;
    }
    // Long enough that the sockets waiting without connection_init are not closed for that.
    let app = TestApp::spawn_with(|s| {
        s.ws_max_per_address = 2;
        s.ws_init_timeout = Duration::from_secs(60);
    })
    .await;
    let (first, closed) = open_and_watch(&app).await;
    assert_eq!(closed, None);
    let (_second, closed) = open_and_watch(&app).await;
    assert_eq!(closed, None);
    let (_third, closed) = open_and_watch(&app).await;
    let (code, reason) = closed.expect("the third is closed");
    assert_eq!(code, 4429, "{reason}");
    assert!(reason.contains("per client address"), "{reason}");
    assert_eq!(refusals(&app, "address_cap").await, 1);

    first.close().await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match open_and_watch(&app).await {
            (_socket, None) => break,
            (_, Some((4429, _))) if Instant::now() < deadline => continue,
            (_, other) => panic!("the closed socket's slot was not freed: {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_connection_over_its_operation_rate_is_closed_with_4429() {
    // It reads /metrics, which counts for the whole process.
    if crate::common::ran_alone_elsewhere().await {
        return;
    }
    let app = TestApp::spawn_with(|s| s.ws_operations_per_minute = 3).await;
    let world = World::create(&app).await;
    let mut socket = GqlSocket::connect(app.addr, Some(&app.token(world.alice))).await.expect("connected");
    let query = "subscription($c: ID!) { courseActivity(courseId: $c) { kind } }";
    for n in 0..3 {
        socket.subscribe(&format!("s{n}"), query, json!({ "c": gid("Course", world.course) })).await;
    }
    assert_eq!(socket.close_frame(Duration::from_millis(300)).await, None, "three a minute are allowed");
    socket.subscribe("s3", query, json!({ "c": gid("Course", world.course) })).await;
    let (code, reason) = socket.close_frame(Duration::from_secs(3)).await.expect("closed").expect("close frame");
    assert_eq!(code, 4429, "{reason}");
    assert!(reason.contains("too many operations"), "{reason}");
    assert_eq!(refusals(&app, "operation_rate").await, 1);
}

/// Statements the app ran so far, once the count has stopped moving.
async fn settled_statements(app: &TestApp) -> u64 {
    let mut last = app.state.sql_statements.get();
    loop {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let now = app.state.sql_statements.get();
        if now == last {
            return now;
        }
        last = now;
    }
}

#[tokio::test]
async fn a_subscribe_over_the_budget_is_refused_before_any_sql() {
    let app = TestApp::spawn_with(|s| s.live_max_subscriptions = 1).await;
    let world = World::create(&app).await;
    app.db
        .execute_unprepared(&format!(
            "INSERT INTO posts (course_id, user_id, title, body) \
             SELECT {}, {}, 'post ' || n, 'body' FROM generate_series(1, 100) AS n",
            world.course, world.alice
        ))
        .await
        .expect("100 posts");
    // A fresh database: the posts are 1 to 100.
    let ids: Vec<String> = (1..=100).map(|n| gid("Post", n)).collect();
    let mut socket = GqlSocket::connect(app.addr, Some(&app.token(world.alice))).await.expect("connected");
    socket
        .subscribe(
            "first",
            "subscription($c: ID!) { courseActivity(courseId: $c) { kind } }",
            json!({ "c": gid("Course", world.course) }),
        )
        .await;
    let before = settled_statements(&app).await;
    socket
        .subscribe(
            "over",
            "subscription($ids: [ID!]!) { likeCounts(ids: $ids) { id likeCount } }",
            json!({ "ids": ids }),
        )
        .await;
    let refused = socket.next_message(Duration::from_secs(5)).await.expect("an answer");
    assert_eq!(refused["id"], "over", "{refused}");
    assert_eq!(error_code(&refused["payload"]).as_deref(), Some("RATE_LIMITED"), "{refused}");
    assert_eq!(settled_statements(&app).await, before, "refused without a statement");
}

/// The query of tests/it/isolation.rs, with comments and replies by people of their own: on a cold
/// course, well over 3 statements (the last one over the budget must not be the query's last,
/// or the answer and the budget's alarm arrive together).
const HEAVY: &str = "query($c: ID!) { course(id: $c) { memberCount posts(first: 5) { nodes { author { handle } \
                     comments(first: 5) { nodes { id author { handle } replies(first: 5) { nodes { id author { handle } } \
                     } } } } } } }";

/// A query over either protocol is stopped at REQUEST_STATEMENT_BUDGET as over HTTP, with the
/// same code, and the next operation on the same socket has a budget of its own.
#[tokio::test]
async fn a_query_over_the_socket_past_its_statement_budget_is_stopped_with_its_own_code() {
    let app = TestApp::spawn_with(|s| s.request_statement_budget = 3).await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    for protocol in ["graphql-transport-ws", "graphql-ws"] {
        // A course and an author of its own per protocol: nothing of it is in memory yet.
        let course = app.create_course(&format!("C-{protocol}")).await;
        let author = app.create_user(&format!("author_{}", protocol.len())).await;
        app.enroll(course, author, "student").await;
        app.enroll(course, world.alice, "student").await;
        let post = app.create_post(&app.token(author), course, "p").await;
        let commenter = app.create_user(&format!("commenter_{}", protocol.len())).await;
        let replier = app.create_user(&format!("replier_{}", protocol.len())).await;
        app.enroll(course, commenter, "student").await;
        app.enroll(course, replier, "student").await;
        // Written directly: over HTTP the writes would meet the same low budget.
        let comment = app
            .scalar_i64(
                "INSERT INTO comments (post_id, user_id, body) VALUES ($1, $2, 'c') RETURNING id AS v",
                [post.into(), commenter.into()],
            )
            .await;
        app.scalar_i64(
            "INSERT INTO comments (post_id, parent_id, reply_to_user_id, user_id, body) \
             VALUES ($1, $2, $3, $4, 'r') RETURNING id AS v",
            [post.into(), comment.into(), commenter.into(), replier.into()],
        )
        .await;
        let mut socket = GqlSocket::connect_with(app.addr, Some(&alice), protocol).await.expect("connected");
        // Cold, as in tests/it/isolation.rs: the memberships, the page, the authors, the member
        // count, the comments, their authors, the replies, theirs.
        app.state.memberships.everything_changed();
        let answer = socket.run("heavy", HEAVY, json!({ "c": gid("Course", course) })).await;
        assert_eq!(error_code(&answer).as_deref(), Some("STATEMENT_BUDGET_EXCEEDED"), "{protocol}: {answer}");
        assert!(answer["errors"][0]["message"].as_str().is_some_and(|m| m.contains("more than 3")), "{answer}");
        let light =
            socket.run("light", "query($p: ID!) { post(id: $p) { title } }", json!({ "p": gid("Post", post) })).await;
        assert_eq!(light["data"]["post"]["title"], "p", "{protocol}: {light}");
        socket.close().await;
    }
}

/// A query over the socket held past REQUEST_TIMEOUT (a post cache load held at its store, as
/// in tests/it/isolation.rs) is answered with TIMEOUT at the deadline.
#[tokio::test]
async fn a_query_over_the_socket_past_its_deadline_is_answered_with_timeout() {
    let app = TestApp::spawn_with(|s| {
        s.statement_timeout = Duration::from_millis(200);
        s.request_timeout = Duration::from_millis(600);
    })
    .await;
    let world = World::create(&app).await;
    let post = app.create_post(&app.token(world.alice), world.course, "slow").await;
    let other = app.create_post(&app.token(world.alice), world.course, "other").await;
    let mut socket = GqlSocket::connect(app.addr, Some(&app.token(world.bob))).await.expect("connected");
    let held = app.state.post_cache.hooks().stores.hold().await;
    let started = Instant::now();
    let answer =
        socket.run("slow", "query($p: ID!) { post(id: $p) { title } }", json!({ "p": gid("Post", post) })).await;
    let took = started.elapsed();
    assert_eq!(error_code(&answer).as_deref(), Some("TIMEOUT"), "{answer}");
    assert!(took >= Duration::from_millis(600) && took < Duration::from_secs(5), "answered after {took:?}");
    drop(held);
    // Another post: the abandoned load's cache lock on the first is held until CACHE_LOCK_TTL,
    // over HTTP as well.
    let again =
        socket.run("again", "query($p: ID!) { post(id: $p) { title } }", json!({ "p": gid("Post", other) })).await;
    assert_eq!(again["data"]["post"]["title"], "other", "the socket serves the next one: {again}");
}

/// A selection a subscription would run again for every event: a post with 20 comments of 20
/// replies (cost about 1,240: under MAX_COST, over SUBSCRIPTION_MAX_COST).
const NESTED_20: &str = "subscription($c: ID!) { courseActivity(courseId: $c) { comment { post { \
                         comments(first: 20) { nodes { replies(first: 20) { nodes { id body } } } } } } } }";
/// The shape: 99 comments of 99 replies.
const NESTED_99: &str = "subscription($c: ID!) { courseActivity(courseId: $c) { comment { post { \
                         comments(first: 99) { nodes { replies(first: 99) { nodes { id body } } } } } } } }";

/// A subscription's selection is costed once, at subscribe time, against SUBSCRIPTION_MAX_COST
/// (far below the queries' MAX_COST): an expensive one is refused with COST_LIMIT_EXCEEDED and
/// both numbers before any SQL runs. The same selection as a query is not held to it.
#[tokio::test]
async fn an_expensive_subscription_is_refused_at_subscribe_time() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let course = json!({ "c": gid("Course", world.course) });
    for protocol in ["graphql-transport-ws", "graphql-ws"] {
        let mut socket =
            GqlSocket::connect_with(app.addr, Some(&app.token(world.alice)), protocol).await.expect("connected");
        let before = settled_statements(&app).await;
        for (id, query) in [("twenty", NESTED_20), ("ninety-nine", NESTED_99)] {
            let refused = socket.run(id, query, course.clone()).await;
            assert_eq!(error_code(&refused).as_deref(), Some("COST_LIMIT_EXCEEDED"), "{protocol} {id}: {refused}");
            let extensions = &refused["errors"][0]["extensions"];
            assert_eq!(extensions["limit"], 500, "{protocol} {id}: {refused}");
            assert!(extensions["cost"].as_u64().is_some_and(|cost| cost > 500), "{protocol} {id}: {refused}");
            assert!(refused.get("data").is_none_or(Value::is_null), "nothing ran: {refused}");
        }
        assert_eq!(settled_statements(&app).await, before, "{protocol}: refused without a statement");
        // A query as costly is held to MAX_COST only.
        let query = "query($c: ID!) { course(id: $c) { posts(first: 20) { nodes { comments(first: 20) { nodes { id \
                     body } } } } } }";
        let answer = socket.run("query", query, course.clone()).await;
        assert!(answer.get("errors").is_none(), "{protocol}: {answer}");
        // An ordinary subscription is accepted: nothing comes back until an event.
        socket
            .subscribe(
                "cheap",
                "subscription($c: ID!) { courseActivity(courseId: $c) { kind nodeId } }",
                course.clone(),
            )
            .await;
        assert_eq!(socket.next_message(Duration::from_millis(300)).await, None, "{protocol}: accepted and waiting");
        socket.close().await;
    }
}

/// Each event of a subscription resolves its selection under a statement budget of its own
/// (SUBSCRIPTION_EVENT_STATEMENT_BUDGET): over it, that event is answered with
/// STATEMENT_BUDGET_EXCEEDED instead of its reads, and the subscription goes on. A cheap
/// subscription on the same socket gets its events as before.
#[tokio::test]
async fn each_subscription_event_runs_under_a_statement_budget_of_its_own() {
    let app = TestApp::spawn_with(|s| s.subscription_event_statement_budget = 2).await;
    let world = World::create(&app).await;
    let posts = threads(&app, &world, 1).await;
    // The thread's own events must not reach the subscriptions opened next.
    app.own_echoes_heard().await;
    let course = json!({ "c": gid("Course", world.course) });
    let mut socket = GqlSocket::connect(app.addr, Some(&app.token(world.alice))).await.expect("connected");
    // Cost about 140: under SUBSCRIPTION_MAX_COST, yet a handful of statements per event.
    let heavy = "subscription($c: ID!) { courseActivity(courseId: $c) { kind comment { body author { handle } post { \
                 title author { handle } comments(first: 5) { nodes { body author { handle } replies(first: 5) { \
                 nodes { body author { handle } } } } } } } } }";
    socket.subscribe("heavy", heavy, course.clone()).await;
    socket.subscribe("cheap", "subscription($c: ID!) { courseActivity(courseId: $c) { kind nodeId } }", course).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    for n in 0..2 {
        app.gql_ok(
            Some(&app.token(world.bob)),
            "mutation($p: ID!, $b: String!) { createComment(postId: $p, body: $b) { id } }",
            json!({ "p": gid("Post", posts[0]), "b": format!("event {n}") }),
        )
        .await;
        let mut heard = std::collections::HashMap::new();
        while heard.len() < 2 {
            let message = socket.next_message(Duration::from_secs(5)).await.expect("both subscriptions hear it");
            assert_eq!(message["type"], "next", "{message}");
            heard.insert(message["id"].as_str().expect("id").to_owned(), message["payload"].clone());
        }
        let over = &heard["heavy"];
        assert_eq!(error_code(over).as_deref(), Some("STATEMENT_BUDGET_EXCEEDED"), "event {n}: {over}");
        assert!(over["errors"][0]["message"].as_str().is_some_and(|m| m.contains("more than 2")), "{over}");
        let cheap = &heard["cheap"];
        assert_eq!(cheap["data"]["courseActivity"]["kind"], "COMMENT_CREATED", "event {n}: {cheap}");
    }
}

/// The legacy graphql-ws protocol's keepalive notices a dead peer too: beside each `ka` goes a
/// websocket Ping frame, which every websocket peer answers by itself; a peer that answers
/// nothing for a whole interval is closed with 3008, as on graphql-transport-ws.
#[tokio::test]
async fn a_legacy_peer_that_stops_answering_is_dropped() {
    // It reads /metrics, which counts for the whole process.
    if crate::common::ran_alone_elsewhere().await {
        return;
    }
    let app = TestApp::spawn_with(|s| s.ws_keepalive = Duration::from_millis(200)).await;
    let world = World::create(&app).await;
    let mut socket =
        GqlSocket::connect_with(app.addr, Some(&app.token(world.alice)), "graphql-ws").await.expect("connected");
    // Not reading: the client's websocket library answers no Ping.
    let deadline = Instant::now() + Duration::from_secs(5);
    while refusals(&app, "keepalive").await == 0 {
        assert!(Instant::now() < deadline, "the silent legacy peer was never dropped");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The socket was closed (its close frame, 3008, when the connection still shows it).
    if let Some((code, reason)) = socket.close_frame(Duration::from_secs(3)).await.expect("closed") {
        assert_eq!(code, 3008, "{reason}");
    }
}

/// A connection that floods messages (protocol pings on the legacy protocol, websocket Ping
/// frames on graphql-transport-ws) is closed with 4429 once over WS_MESSAGES_PER_MINUTE.
#[tokio::test]
async fn a_connection_flooding_pings_is_closed_with_4429() {
    // It reads /metrics, which counts for the whole process.
    if crate::common::ran_alone_elsewhere().await {
        return;
    }
    let app = TestApp::spawn_with(|s| s.ws_messages_per_minute = 20).await;
    let world = World::create(&app).await;
    for protocol in ["graphql-ws", "graphql-transport-ws"] {
        let mut socket =
            GqlSocket::connect_with(app.addr, Some(&app.token(world.alice)), protocol).await.expect("connected");
        // connection_init was the first of 20; 19 more are allowed.
        for _ in 0..19 {
            if protocol == "graphql-ws" {
                socket.send_json(json!({ "type": "ping" })).await;
            } else {
                assert!(socket.send_ping_frame().await);
            }
        }
        assert_eq!(socket.close_frame(Duration::from_millis(300)).await, None, "{protocol}: 20 a minute are allowed");
        if protocol == "graphql-ws" {
            socket.send_json(json!({ "type": "ping" })).await;
        } else {
            assert!(socket.send_ping_frame().await);
        }
        let (code, reason) = socket.close_frame(Duration::from_secs(3)).await.expect("closed").expect("close frame");
        assert_eq!(code, 4429, "{protocol}: {reason}");
        assert!(reason.contains("too many messages"), "{protocol}: {reason}");
    }
    assert_eq!(refusals(&app, "message_rate").await, 2);
}

/// A subscriber that stops reading costs the others nothing: once one of its frames cannot
/// leave within WS_SEND_TIMEOUT (its buffers full), the server closes its socket (1008, or
/// drops it when even the close frame cannot be written) and counts a `slow_consumer`, while
/// a reading subscriber of the same course gets every event, before and after.
#[tokio::test]
async fn a_subscriber_that_stops_reading_is_closed_and_the_others_keep_receiving() {
    // It reads /metrics, which counts for the whole process.
    if crate::common::ran_alone_elsewhere().await {
        return;
    }
    let app = TestApp::spawn_with(|s| s.ws_send_timeout = Duration::from_millis(300)).await;
    let world = World::create(&app).await;
    let activity = "subscription($c: ID!) { courseActivity(courseId: $c) { kind post { id body } } }";
    let course = json!({ "c": gid("Course", world.course) });
    let mut slow = GqlSocket::open_with_receive_buffer(app.addr, PROTOCOL, 4096)
        .await
        .init(bearer(&app.token(world.bob)))
        .await
        .expect("acknowledged");
    slow.subscribe("1", activity, course.clone()).await;
    let mut reading = GqlSocket::connect(app.addr, Some(&app.token(world.instructor))).await.expect("connected");
    reading.subscribe("1", activity, course).await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    // 20 kB posts until the slow socket's buffers are full and a frame waits past the timeout.
    let body = "x".repeat(20_000);
    let create = "mutation($c: ID!, $b: String!) { createPost(courseId: $c, title: \"big\", body: $b) { id } }";
    let mut created = 0;
    while refusals(&app, "slow_consumer").await == 0 {
        assert!(created < 400, "no slow consumer was closed after {created} posts of 20 kB");
        let answer = app
            .gql_ok(Some(&app.token(world.alice)), create, json!({ "c": gid("Course", world.course), "b": body }))
            .await;
        let id = answer["createPost"]["id"].clone();
        let event = reading.next_data(Duration::from_secs(5)).await.expect("the reading subscriber gets each event");
        assert_eq!(event["courseActivity"]["post"]["id"], id, "{event}");
        created += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(refusals(&app, "slow_consumer").await, 1, "only the socket that stopped reading");

    // Reading now, the slow client finds its connection over: a 1008 close frame, or the end
    // of the stream when the server could not even write that.
    let ended = slow.close_frame(Duration::from_secs(10)).await.expect("the slow socket was closed");
    if let Some((code, reason)) = ended {
        assert_eq!(code, 1008, "{reason}");
        assert!(reason.contains("slow consumer"), "{reason}");
    }
    // The reading subscriber is still served.
    let id = app.create_post_as(world.alice, world.course, "after").await;
    let event = reading.next_data(Duration::from_secs(5)).await.expect("still receiving");
    assert_eq!(event["courseActivity"]["post"]["id"], json!(gid("Post", id)), "{event}");
}

/// A process-wide counter of `/metrics` without labels (0 before the first).
async fn counter(app: &TestApp, name: &str) -> u64 {
    let text = app.http.get(app.url("/metrics")).send().await.expect("GET /metrics").text().await.expect("text");
    let series = format!("{name} ");
    text.lines().find_map(|line| line.strip_prefix(&series)).map_or(0, |value| value.trim().parse().expect("a value"))
}

/// The frames a socket has ready together go out in one write: five likes applied in one batch
/// reach one `likeCounts` subscription as five `next` frames, written in fewer flushes than
/// frames. Whether the five are ready at the same instant depends on how the machine schedules
/// the subscription's tasks, so a round where they were not is followed by another (likes
/// taken back, then given again), up to `ROUNDS`; with writes that never join frames, every
/// round fails. The writer's own rule is tested without scheduling in `http::ws`'s unit tests.
#[tokio::test]
async fn frames_ready_together_leave_in_one_write() {
    use crate::common::likes::{Target, toggle};
    const ROUNDS: usize = 6;
    // It reads /metrics, which counts for the whole process.
    if crate::common::ran_alone_elsewhere().await {
        return;
    }
    // Buffered, the worker stepped by hand: the five likes are applied in one batch.
    let app = TestApp::spawn_in(course_forum::testing::config::LikeMode::Buffered).await;
    let world = World::create(&app).await;
    let mut posts = Vec::new();
    for n in 0..5 {
        posts.push(app.create_post_as(world.alice, world.course, &format!("post {n}")).await);
    }
    let ids: Vec<String> = posts.iter().map(|&p| gid("Post", p)).collect();
    let mut socket = GqlSocket::connect(app.addr, Some(&app.token(world.bob))).await.expect("connected");
    socket
        .subscribe("1", "subscription($ids: [ID!]!) { likeCounts(ids: $ids) { id likeCount } }", json!({ "ids": ids }))
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut rounds = Vec::new();
    for round in 0..ROUNDS {
        let liked = round % 2 == 0;
        let (frames_before, writes_before) =
            (counter(&app, "websocket_frames_sent_total").await, counter(&app, "websocket_writes_total").await);
        for &post in &posts {
            toggle(&app, world.bob, Target::Post(post), liked).await;
        }
        app.worker().await.drain().await.expect("one batch applies the five likes");
        let expected = i64::from(liked);
        let mut arrived = std::collections::HashSet::new();
        while arrived.len() < posts.len() {
            let data = socket.next_data(Duration::from_secs(10)).await.expect("every count arrives");
            if data["likeCounts"]["likeCount"] == expected {
                arrived.insert(data["likeCounts"]["id"].as_str().expect("id").to_owned());
            }
        }
        // The writer counts a write after its flush returns, so the client can hold the
        // frames before they are counted: wait for the count, with a deadline.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let (frames, writes) = loop {
            let sent = counter(&app, "websocket_frames_sent_total").await - frames_before;
            let written = counter(&app, "websocket_writes_total").await - writes_before;
            if sent >= 5 || tokio::time::Instant::now() >= deadline {
                break (sent, written);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(frames >= 5, "round {round}: {frames} frames");
        rounds.push((frames, writes));
        if writes < frames {
            return;
        }
    }
    panic!("no round shared a write: (frames, writes) per round {rounds:?}");
}
