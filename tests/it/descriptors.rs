//! File descriptors as a resource (`ops::descriptors`): the soft `RLIMIT_NOFILE` is raised to
//! the hard one at start; a websocket upgrade past the limit less `WS_DESCRIPTOR_RESERVE` is
//! refused with 503 `UNAVAILABLE` while open subscriptions keep receiving and HTTP still
//! answers; `/readyz` and `/metrics` report the headroom; and a process out of descriptors
//! waits between failed accepts instead of spinning, and serves again once it has some.
//!
//! The server runs in the test's process, so the test moves the process's own limit (each
//! test runs in a process of its own: `common::ran_alone_elsewhere`).

use std::io::{Read, Write};
use std::time::Duration;

use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use course_forum::testing::startup::Application;

use crate::common::ws::GqlSocket;
use crate::common::{TestApp, World, gid};

const ACTIVITY: &str = "subscription($c: ID!) { courseActivity(courseId: $c) { kind nodeId } }";
/// Longer than the server's `SAMPLE_EVERY` (100 ms): the next admission counts again.
const RECOUNT: Duration = Duration::from_millis(300);

/// The process's (soft, hard) `RLIMIT_NOFILE`.
fn rlimit() -> (u64, u64) {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct it is given.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) }, 0, "getrlimit");
    (limit.rlim_cur, limit.rlim_max)
}

fn set_soft_limit(soft: u64) {
    let (_, hard) = rlimit();
    let limit = libc::rlimit { rlim_cur: soft, rlim_max: hard };
    // SAFETY: setrlimit reads the struct it is given.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) }, 0, "setrlimit({soft})");
}

/// Descriptors open in this process (the server's and the test's).
fn open_fds() -> u64 {
    std::fs::read_dir("/proc/self/fd").expect("/proc/self/fd").count() as u64 - 1
}

/// CPU time (user + system) this process has used.
fn cpu_time() -> Duration {
    // SAFETY: getrusage writes the struct it is given; all zeroes is a valid rusage.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) }, 0, "getrusage");
    let time = |t: libc::timeval| Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64);
    time(usage.ru_utime) + time(usage.ru_stime)
}

async fn readyz(app: &TestApp) -> Value {
    app.http.get(app.url("/readyz")).send().await.expect("GET /readyz").json().await.expect("JSON")
}

/// A gauge or a counter series as `/metrics` shows it.
async fn metric(app: &TestApp, series: &str) -> Option<f64> {
    let text = app.http.get(app.url("/metrics")).send().await.expect("GET /metrics").text().await.expect("text");
    text.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

/// A websocket handshake the server refuses: its status, `Retry-After` and JSON body.
async fn refused_upgrade(addr: std::net::SocketAddr) -> (u16, Option<String>, Value) {
    let mut request = format!("ws://{addr}/graphql/ws").into_client_request().expect("request");
    request.headers_mut().insert("Sec-WebSocket-Protocol", "graphql-transport-ws".parse().expect("header"));
    match tokio_tungstenite::connect_async(request).await {
        Ok(_) => panic!("the upgrade was accepted"),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            let retry_after = response.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_owned);
            let body = response.body().as_deref().map(|b| serde_json::from_slice(b).expect("a JSON body"));
            (response.status().as_u16(), retry_after, body.unwrap_or(Value::Null))
        }
        Err(other) => panic!("the handshake failed otherwise: {other}"),
    }
}

#[tokio::test]
async fn the_soft_limit_is_raised_to_the_hard_one_at_start() {
    if crate::common::ran_alone_elsewhere().await {
        return;
    }
    let (_, hard) = rlimit();
    assert!(hard >= 2048, "this test needs a hard limit of at least 2048 (it is {hard})");
    set_soft_limit(hard / 2);
    assert_eq!(rlimit().0, hard / 2, "lowered before start");
    let app = TestApp::spawn().await;
    assert_eq!(rlimit(), (hard, hard), "the soft limit is the hard one after start");
    let report = readyz(&app).await;
    assert_eq!(report["descriptors"]["limit"], hard, "{report}");
}

#[tokio::test]
async fn a_reserve_that_leaves_websockets_nothing_stops_start_up_with_a_sentence() {
    let (soft, hard) = rlimit();
    let mut settings = crate::common::test_settings("cf_never_created", "cftreserve");
    settings.ws_descriptor_reserve = hard.max(soft);
    // Refused before any connection is made: the database named above does not exist.
    let refused = match Application::build(settings).await {
        Ok(_) => panic!("started with a reserve of the whole limit"),
        Err(refused) => refused.to_string(),
    };
    assert!(refused.contains(&format!("WS_DESCRIPTOR_RESERVE={}", hard.max(soft))), "{refused}");
    assert!(refused.contains("leaves no descriptor for websockets"), "{refused}");
}

#[tokio::test]
async fn readyz_and_metrics_report_the_descriptor_headroom() {
    if crate::common::ran_alone_elsewhere().await {
        return;
    }
    let app = TestApp::spawn_with(|s| s.ws_descriptor_reserve = 300).await;
    let (soft, _) = rlimit();
    let report = readyz(&app).await;
    let descriptors = &report["descriptors"];
    let open = descriptors["open"].as_u64().expect("open counted");
    assert!(open > 10 && open < soft, "{report}");
    assert_eq!(descriptors["limit"], soft, "{report}");
    assert_eq!(descriptors["reserve"], 300, "{report}");
    assert_eq!(descriptors["headroom"], soft - 300 - open, "{report}");

    let before = metric(&app, "process_open_fds").await.expect("process_open_fds");
    assert_eq!(metric(&app, "process_max_fds").await, Some(soft as f64));
    assert_eq!(metric(&app, "process_reserved_fds").await, Some(300.0));
    // The gauge is counted at most every 100 ms, whoever scrapes: 20 more files open show at
    // the next count.
    let files: Vec<_> = (0..20).map(|_| std::fs::File::open("/dev/null").expect("a file")).collect();
    tokio::time::sleep(RECOUNT).await;
    let during = metric(&app, "process_open_fds").await.expect("process_open_fds");
    assert!(during >= before + 20.0, "{before} then {during} with 20 more files open");
    drop(files);
}

#[tokio::test]
async fn a_websocket_past_the_descriptor_capacity_is_refused_while_open_ones_keep_receiving() {
    if crate::common::ran_alone_elsewhere().await {
        return;
    }
    let reserve = 200;
    let app = TestApp::spawn_with(|s| s.ws_descriptor_reserve = reserve).await;
    let (_, hard) = rlimit();
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let mut socket = GqlSocket::connect(app.addr, Some(&alice)).await.expect("admitted below the capacity");
    socket.subscribe("1", ACTIVITY, json!({ "c": gid("Course", world.course) })).await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    // The capacity (limit less reserve) just above what is open now: one more socket (two
    // descriptors in this process, the client's and the server's) is over it.
    let open = open_fds();
    set_soft_limit(open + reserve + 1);
    tokio::time::sleep(RECOUNT).await;
    let (status, retry_after, body) = refused_upgrade(app.addr).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["errors"][0]["extensions"]["code"], "UNAVAILABLE", "{body}");
    assert!(body["errors"][0]["message"].as_str().is_some_and(|m| m.contains("capacity")), "{body}");
    assert_eq!(retry_after.as_deref(), Some("5"));

    // The subscription already open keeps receiving, and HTTP answers within the reserve.
    let post = app.create_post_as(world.bob, world.course, "still live").await;
    let event = socket.next_data(Duration::from_secs(10)).await.expect("an event on the open subscription");
    assert_eq!(event["courseActivity"], json!({ "kind": "POST_CREATED", "nodeId": gid("Post", post) }));
    let me = app.gql_ok(Some(&alice), "{ me { handle } }", json!({})).await;
    assert_eq!(me["me"]["handle"], "alice");
    let report = readyz(&app).await;
    assert_eq!(report["ready"], true, "a process at its websocket capacity still serves: {report}");
    assert_eq!(report["descriptors"]["headroom"], 0, "{report}");
    assert_eq!(metric(&app, "websocket_refusals_total{reason=\"descriptors\"}").await, Some(1.0));

    // With room again, sockets are admitted again.
    set_soft_limit(hard);
    tokio::time::sleep(RECOUNT).await;
    GqlSocket::connect(app.addr, Some(&alice)).await.expect("admitted once there is room");
}

#[tokio::test]
async fn a_process_out_of_descriptors_waits_between_accepts_and_serves_again_with_room() {
    if crate::common::ran_alone_elsewhere().await {
        return;
    }
    let app = TestApp::spawn().await;
    let (_, hard) = rlimit();
    // The client's socket first; then no descriptor is left for the server to accept it with.
    let client = tokio::net::TcpSocket::new_v4().expect("a socket");
    set_soft_limit(open_fds());
    // Fill any gap below the limit, so the next descriptor is refused with EMFILE.
    let mut fillers = Vec::new();
    while let Ok(file) = std::fs::File::open("/dev/null") {
        fillers.push(file);
        assert!(fillers.len() < 1_000, "the limit does not hold");
    }
    let stream = client.connect(app.addr).await.expect("the kernel completes the handshake");
    let spent_before = cpu_time();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let spent = cpu_time() - spent_before;
    // A loop retrying accept at once would burn about the whole 1.5 s of a core.
    assert!(spent < Duration::from_millis(500), "{spent:?} of CPU in 1.5 s while accept fails");

    set_soft_limit(hard);
    drop(fillers);
    let mut stream = stream.into_std().expect("a std stream");
    stream.set_nonblocking(false).expect("blocking");
    stream.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    let answer = tokio::task::spawn_blocking(move || {
        stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").expect("request");
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        answer
    })
    .await
    .expect("read");
    assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("ok"), "{answer}");
}
