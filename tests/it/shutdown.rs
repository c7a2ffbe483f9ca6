//! Graceful shutdown of the real binary: SIGTERM stops accepting connections, lets the request
//! in flight finish, closes websockets with 1001 (going away) and exits 0; a request or a
//! worker batch that cannot finish (PostgreSQL stalled behind a paused proxy) does not hold
//! the exit past SHUTDOWN_TIMEOUT, and the abandoned batch is never acknowledged: its likes
//! are replayed by the next worker, each counted once. Logs are JSON with a request id on
//! every request's lines and a batch id on every batch's.

use std::time::{Duration, Instant};

use course_forum::testing::config::LikeMode;
use serde_json::{Value, json};

use crate::common::procs::ServeProcess;
use crate::common::proxy::TcpProxy;
use crate::common::ws::GqlSocket;
use crate::common::{self, TestApp, World, gid};

const LIKE_COUNTS: &str = "subscription($ids: [ID!]!) { likeCounts(ids: $ids) { id likeCount } }";

/// The test's database, reached through a proxy the test can pause.
async fn database_behind_a_proxy(app: &TestApp) -> (TcpProxy, String) {
    let proxy = TcpProxy::start("127.0.0.1:5432".parse().expect("address")).await;
    let url = format!("postgres://postgres@{}/{}", proxy.addr, app.database);
    (proxy, url)
}

async fn post_graphql(url: String, token: String, query: &str, variables: Value) -> reqwest::Result<reqwest::Response> {
    reqwest::Client::new()
        .post(url)
        .bearer_auth(token)
        .json(&json!({ "query": query, "variables": variables }))
        .timeout(Duration::from_secs(30))
        .send()
        .await
}

/// A token of a member who joined after the server started, so the server has not read their
/// memberships (its warm at start did not find them): their first request reads PostgreSQL.
async fn newcomer(app: &TestApp, world: &World) -> String {
    let newcomer = app.create_user("newcomer").await;
    app.enroll(world.course, newcomer, "student").await;
    app.token(newcomer)
}

/// Starts a `post` query by a `newcomer` that waits on the paused PostgreSQL (for their
/// memberships), and checks that it does.
async fn request_waiting_for_postgres(
    serve: &ServeProcess,
    newcomer: String,
    post: i64,
) -> tokio::task::JoinHandle<reqwest::Result<reqwest::Response>> {
    let in_flight = tokio::spawn(post_graphql(
        serve.url("/graphql"),
        newcomer,
        "query($p: ID!) { post(id: $p) { title likeCount } }",
        json!({ "p": gid("Post", post) }),
    ));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!in_flight.is_finished(), "the request waits for PostgreSQL");
    in_flight
}

/// A test app with a post, and `course-forum serve` on its database through a proxy.
async fn server_behind_a_proxy(env: &[(&str, &str)]) -> (TestApp, World, i64, TcpProxy, ServeProcess) {
    let app = TestApp::spawn_with(|s| s.like_mode = LikeMode::Buffered).await;
    let world = World::create(&app).await;
    let post = app.create_post_as(world.bob, world.course, "last words").await;
    let (proxy, database_url) = database_behind_a_proxy(&app).await;
    let mut env = env.to_vec();
    env.push(("DATABASE_URL", database_url.as_str()));
    let mut serve = ServeProcess::spawn(&app, &common::redis_url(), &env);
    serve.wait_healthy(Duration::from_secs(20)).await;
    // Its worker owns every shard (lease and fencing epoch, which needs PostgreSQL) before a
    // test stalls the database under it.
    let deadline = Instant::now() + Duration::from_secs(20);
    while app.scalar_i64("SELECT count(*) AS v FROM like_shard_epochs", []).await < i64::from(app.state.keys.shards()) {
        assert!(Instant::now() < deadline, "the server's worker did not take its shards");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (app, world, post, proxy, serve)
}

/// Every log line is a JSON object; returns them.
fn json_lines(logs: &str) -> Vec<Value> {
    logs.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("a log line is not JSON ({e}): {line}")))
        .collect()
}

/// The value of `field` in the line's spans (the JSON formatter lists them in `spans`).
fn span_field<'a>(line: &'a Value, span: &str, field: &str) -> Option<&'a str> {
    line["spans"].as_array()?.iter().find(|s| s["name"] == span)?[field].as_str()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_closes_websockets_finishes_the_request_in_flight_and_exits() {
    let (app, world, post, proxy, mut serve) = server_behind_a_proxy(&[
        ("LOG_FORMAT", "json"),
        ("RUST_LOG", "info,course_forum=debug"),
        ("SHUTDOWN_TIMEOUT", "10s"),
    ])
    .await;

    // A live subscriber, proven live: a like through the server reaches it.
    let alice = app.token(world.alice);
    let mut socket = GqlSocket::connect(serve.addr, Some(&alice)).await.expect("connect");
    socket.subscribe("1", LIKE_COUNTS, json!({ "ids": [gid("Post", post)] })).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let like = "mutation($p: ID!) { likePost(postId: $p) { likeCount } }";
    let liked = post_graphql(serve.url("/graphql"), alice.clone(), like, json!({ "p": gid("Post", post) })).await;
    assert_eq!(liked.expect("like").status(), 200);
    let update = socket.next_data(Duration::from_secs(10)).await.expect("a live update before shutdown");
    assert_eq!(update["likeCounts"]["likeCount"], 1);

    // A request in flight: PostgreSQL answers nothing until the proxy resumes.
    let newcomer = newcomer(&app, &world).await;
    proxy.pause();
    let in_flight = request_waiting_for_postgres(&serve, newcomer, post).await;

    let signalled = Instant::now();
    serve.terminate();
    let (code, reason) = socket.close_frame(Duration::from_secs(5)).await.flatten().expect("a close frame");
    assert_eq!(code, 1001, "going away: {reason}");
    // No new connections once shutdown began.
    let deadline = Instant::now() + Duration::from_secs(5);
    while tokio::net::TcpStream::connect(serve.addr).await.is_ok() {
        assert!(Instant::now() < deadline, "still accepting connections 5 s after SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!in_flight.is_finished(), "the request is still in flight");

    // The request in flight finishes with its answer, then the process exits.
    proxy.resume();
    let response = in_flight.await.expect("join").expect("the in-flight request was answered");
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["data"]["post"], json!({ "title": "last words", "likeCount": 1 }), "{body}");
    let status = serve.wait_exit(Duration::from_secs(12)).await.expect("exited within SHUTDOWN_TIMEOUT");
    assert!(status.success(), "{status:?}\n{}", serve.logs());
    let took = signalled.elapsed();
    assert!(took < Duration::from_secs(12), "exit took {took:?}");

    // JSON logs: request lines carry their request id, the like's batch its batch id.
    let lines = json_lines(&serve.logs());
    let served: Vec<&Value> = lines.iter().filter(|l| l["fields"]["message"] == "request served").collect();
    assert!(served.len() >= 2, "request lines: {served:?}");
    for line in &served {
        let id = span_field(line, "http_request", "request_id").expect("request_id on a request line");
        assert!(uuid::Uuid::parse_str(id).is_ok(), "{line}");
    }
    let batch = lines.iter().find(|l| l["fields"]["message"] == "like batch applied").expect("a batch line");
    assert!(span_field(batch, "like_batch", "batch_id").is_some_and(|id| uuid::Uuid::parse_str(id).is_ok()), "{batch}");
    assert!(lines.iter().any(|l| l["fields"]["message"] == "like worker stopped"), "the worker stopped cleanly");
}

/// With nothing else in flight and no job to stop (sync likes, no worker), the process could
/// end as soon as it stopped accepting: every open socket must still get its 1001 first (they
/// run on the connections' own runtime, which the process waits for before it drops it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_nothing_in_flight_still_closes_every_websocket_with_1001() {
    const SOCKETS: usize = 400;
    let app = TestApp::spawn_with(|s| s.like_mode = LikeMode::Sync).await;
    let world = World::create(&app).await;
    let post = app.create_post_as(world.bob, world.course, "last words").await;
    let mut serve = ServeProcess::spawn(
        &app,
        &common::redis_url(),
        &[
            ("LIKE_MODE", "sync"),
            ("WORKER_IN_SERVE", "false"),
            ("SHUTDOWN_TIMEOUT", "10s"),
            ("WS_MAX_PER_USER", "1000"),
            ("WS_MAX_PER_ADDRESS", "1000"),
        ],
    );
    serve.wait_healthy(Duration::from_secs(20)).await;
    let alice = app.token(world.alice);
    let mut sockets = Vec::with_capacity(SOCKETS);
    for n in 0..SOCKETS {
        let mut socket = GqlSocket::connect(serve.addr, Some(&alice)).await.expect("connect");
        socket.subscribe(&n.to_string(), LIKE_COUNTS, json!({ "ids": [gid("Post", post)] })).await;
        sockets.push(socket);
    }
    // Every subscription started: one like reaches them all.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let like = "mutation($p: ID!) { likePost(postId: $p) { likeCount } }";
    let liked = post_graphql(serve.url("/graphql"), alice, like, json!({ "p": gid("Post", post) })).await;
    assert_eq!(liked.expect("like").status(), 200);
    for socket in &mut sockets {
        let update = socket.next_data(Duration::from_secs(10)).await.expect("a live update before shutdown");
        assert_eq!(update["likeCounts"]["likeCount"], 1);
    }

    serve.terminate();
    let closes =
        futures_util::future::join_all(sockets.iter_mut().map(|socket| socket.close_frame(Duration::from_secs(10))))
            .await;
    let going_away = closes.iter().filter(|close| matches!(close, Some(Some((1001, _))))).count();
    let others: Vec<_> = closes.iter().filter(|close| !matches!(close, Some(Some((1001, _))))).take(3).collect();
    assert_eq!(going_away, SOCKETS, "sockets closed otherwise, e.g. {others:?}");
    let status = serve.wait_exit(Duration::from_secs(12)).await.expect("exited within SHUTDOWN_TIMEOUT");
    assert!(status.success(), "{status:?}\n{}", serve.logs());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_cannot_finish_is_abandoned_at_the_shutdown_timeout_and_replayed_exactly() {
    let (app, world, post, proxy, mut serve) =
        server_behind_a_proxy(&[("SHUTDOWN_TIMEOUT", "2s"), ("WORKER_LEASE_TTL", "1s")]).await;

    // PostgreSQL stalls for the server; likes are acknowledged (by the in-process instance,
    // which reaches PostgreSQL directly) and the server's worker takes them into a batch it
    // cannot commit.
    let newcomer = newcomer(&app, &world).await;
    proxy.pause();
    let likers = 12;
    for n in 0..likers {
        let user = app.create_user(&format!("stalled{n}")).await;
        app.enroll(world.course, user, "student").await;
        app.gql_ok(
            Some(&app.token(user)),
            "mutation($p: ID!) { likePost(postId: $p) { id } }",
            json!({ "p": gid("Post", post) }),
        )
        .await;
    }
    // The worker holds a batch it cannot commit (the likes after it wait behind it).
    let deadline = Instant::now() + Duration::from_secs(10);
    while streams(&app).await.0 == 0 {
        assert!(Instant::now() < deadline, "the server's worker never took a batch");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stuck = request_waiting_for_postgres(&serve, newcomer, post).await;

    let signalled = Instant::now();
    serve.terminate();
    let status = serve.wait_exit(Duration::from_secs(6)).await.expect("exited soon after SHUTDOWN_TIMEOUT (2 s)");
    let took = signalled.elapsed();
    assert!(took >= Duration::from_millis(1900), "it waited for the stuck work first: {took:?}");
    assert!(took < Duration::from_secs(5), "exit took {took:?}");
    assert!(status.success(), "{status:?}\n{}", serve.logs());
    assert!(stuck.await.expect("join").is_err(), "the stuck request's connection was dropped");

    // The abandoned batch committed nothing and acknowledged nothing.
    proxy.resume();
    let rows = "SELECT count(*) AS v FROM post_likes WHERE post_id = $1";
    assert_eq!(app.scalar_i64(rows, [post.into()]).await, 0);
    let (pending, entries) = streams(&app).await;
    assert!(pending > 0, "the abandoned batch is still pending, for the next consumer");
    assert_eq!(entries, likers, "no like was acknowledged");

    // The next consumer takes the lapsed lease, replays the batch, and counts each like once.
    let worker = app.worker().await;
    let deadline = Instant::now() + Duration::from_secs(15);
    while app.scalar_i64(rows, [post.into()]).await < likers as i64 {
        assert!(Instant::now() < deadline, "the abandoned likes were not replayed");
        worker.drain().await.expect("drain");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let counter = app.scalar_i64("SELECT like_count::bigint AS v FROM posts WHERE id = $1", [post.into()]).await;
    assert_eq!((app.scalar_i64(rows, [post.into()]).await, counter), (likers as i64, likers as i64));
    assert_eq!(streams(&app).await, (0, 0));
}

/// Over every shard: entries delivered to a consumer and not acknowledged, and all entries
/// not yet applied.
async fn streams(app: &TestApp) -> (usize, usize) {
    let status = course_forum::testing::ops::streams::status(&app.state.redis, &app.state.keys).await.expect("status");
    (status.shards.iter().map(|s| s.pending as usize).sum(), status.shards.iter().map(|s| s.entries as usize).sum())
}
