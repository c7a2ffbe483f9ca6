//! Every websocket has a bounded cost: a socket that never sends connection_init is closed
//! with 4408, acknowledged sockets are pinged (and a graphql-transport-ws peer that stops
//! answering is dropped), one user and one client address hold at most so many sockets on an
//! instance, a connection starts at most so many operations a minute (4429 for both), and a
//! connection at its subscription budget is refused before any SQL runs.

mod common;

use std::time::{Duration, Instant};

use common::ws::GqlSocket;
use common::{TestApp, World, error_code, gid};
use sea_orm::ConnectionTrait;
use serde_json::{Value, json};

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
