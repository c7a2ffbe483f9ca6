//! The websocket connections' own runtime (`live::runtime`): its threads run at the configured
//! lower priority, a socket on it gets its shared and per-viewer updates and the results of
//! the operations it sends (which run on the handlers' runtime), in every like mode; and with
//! `LIVE_THREADS=0` there is no such runtime and sockets work the same.

use std::time::{Duration, Instant};

use course_forum::testing::config::LikeMode;
use serde_json::{Value, json};

use crate::common::likes::{Target, toggle};
use crate::common::ws::GqlSocket;
use crate::common::{TestApp, World, gid, ran_alone_elsewhere};

const SHARED: &str = "subscription($ids: [ID!]!) { likeCounts(ids: $ids) { id likeCount } }";
const PER_VIEWER: &str =
    "subscription($ids: [ID!]!) { likeCounts(ids: $ids) { id likeCount ... on Post { likedByMe } } }";
const ME: &str = "query { me { handle } }";

/// The comm and nice value in a `/proc/…/stat` line: `pid (comm) state ppid …`, the comm may
/// hold spaces (the fields after it do not); nice is field 19, the 17th after the comm.
fn comm_and_nice(stat: &str) -> Option<(&str, i64)> {
    let (open, close) = (stat.find('(')?, stat.rfind(')')?);
    let nice = stat[close + 1..].split_whitespace().nth(16)?.parse().ok()?;
    Some((&stat[open + 1..close], nice))
}

/// The nice value of each thread of this process named `name`.
fn nice_of_threads(name: &str) -> Vec<i64> {
    let mut nice = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").expect("/proc/self/task").flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else { continue };
        if let Some((comm, value)) = comm_and_nice(&stat)
            && comm == name
        {
            nice.push(value);
        }
    }
    nice
}

/// The process's own nice value (the main thread's).
fn process_nice() -> i64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    comm_and_nice(&stat).expect("a stat line").1
}

async fn next_for(socket: &mut GqlSocket, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let message = socket.next_message(left).await.unwrap_or_else(|| panic!("nothing for {id}"));
        if message["id"] == id {
            return message;
        }
    }
}

/// A socket subscribed to a post's count twice (shared and per viewer) and asking a query:
/// the query's result, then one like's count on both subscriptions.
async fn a_socket_gets_its_results_and_updates(app: &TestApp) {
    let world = World::create(app).await;
    let post = app.create_post_as(world.bob, world.course, "watched").await;
    let mut socket = GqlSocket::connect(app.addr, Some(&app.token(world.alice))).await.expect("ws");
    socket.subscribe("me", ME, json!({})).await;
    let me = next_for(&mut socket, "me").await;
    assert_eq!(me["payload"]["data"]["me"]["handle"], "alice", "{me}");
    let ids = json!({ "ids": [gid("Post", post)] });
    socket.subscribe("shared", SHARED, ids.clone()).await;
    socket.subscribe("mine", PER_VIEWER, ids).await;
    // Both subscriptions are open before the like (their access checks ran).
    tokio::time::sleep(Duration::from_millis(300)).await;

    toggle(app, world.alice, Target::Post(post), true).await;
    let (mut shared, mut mine) = (None, None);
    while shared.is_none() || mine.is_none() {
        let message = socket.next_message(Duration::from_secs(10)).await.expect("the like's updates");
        let update = message["payload"]["data"]["likeCounts"].clone();
        if update["likeCount"] != 1 {
            continue;
        }
        match message["id"].as_str() {
            Some("shared") => shared = Some(update),
            Some("mine") => mine = Some(update),
            _ => {}
        }
    }
    assert_eq!(shared, Some(json!({ "id": gid("Post", post), "likeCount": 1 })));
    assert_eq!(mine, Some(json!({ "id": gid("Post", post), "likeCount": 1, "likedByMe": true })));
}

async fn connections_run_on_threads_of_their_own_at_a_lower_priority(mode: LikeMode) {
    if ran_alone_elsewhere().await {
        return;
    }
    let app = TestApp::spawn_with(|s| {
        s.like_mode = mode;
        s.worker_in_serve = true;
        s.live_threads = 2;
        s.live_nice = 5;
    })
    .await;
    let base = process_nice();
    // Its two workers (and any blocking thread it started, named alike) run 5 lower. A thread
    // names itself and lowers its priority once it runs: on a busy machine the second may not
    // have yet.
    let lowered = |nice: &[i64]| nice.len() >= 2 && nice.iter().all(|n| *n == (base + 5).min(19));
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut nice = nice_of_threads("live-ws");
    while !lowered(&nice) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
        nice = nice_of_threads("live-ws");
    }
    assert!(lowered(&nice), "{nice:?} (the process: {base})");
    a_socket_gets_its_results_and_updates(&app).await;
}

#[tokio::test]
async fn buffered_connections_run_on_threads_of_their_own_at_a_lower_priority() {
    connections_run_on_threads_of_their_own_at_a_lower_priority(LikeMode::Buffered).await;
}

#[tokio::test]
async fn sync_connections_run_on_threads_of_their_own_at_a_lower_priority() {
    connections_run_on_threads_of_their_own_at_a_lower_priority(LikeMode::Sync).await;
}

#[tokio::test]
async fn recount_connections_run_on_threads_of_their_own_at_a_lower_priority() {
    connections_run_on_threads_of_their_own_at_a_lower_priority(LikeMode::Recount).await;
}

#[tokio::test]
async fn with_no_threads_of_their_own_connections_run_on_the_handlers_runtime() {
    if ran_alone_elsewhere().await {
        return;
    }
    let app = TestApp::spawn_with(|s| {
        s.worker_in_serve = true;
        s.live_threads = 0;
    })
    .await;
    assert!(nice_of_threads("live-ws").is_empty());
    a_socket_gets_its_results_and_updates(&app).await;
}
