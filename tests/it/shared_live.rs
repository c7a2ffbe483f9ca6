//! Shared live payloads (`graphql::shared_live`): a `likeCounts` selection every reader sees
//! alike is rendered once per update for all its subscribers, with each socket's own
//! subscription id in its frame, on both websocket protocols; viewer-dependent selections stay
//! per viewer; revocation still ends a shared subscription within a second, with the error the
//! schema would give, and nothing of it follows its `complete`; a started shared subscription
//! keeps no execution of the schema, and ends when its id is completed, reused or its socket
//! closes.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use course_forum::testing::config::LikeMode;
use serde_json::{Value, json};

use crate::common::likes::{Target, toggle};
use crate::common::ws::GqlSocket;
use crate::common::{TestApp, World, gid};

const SHARED: &str = "subscription($ids: [ID!]!) { likeCounts(ids: $ids) { __typename id likeCount likeVersion } }";
/// The same fields under another alias: another shape, so another rendering.
const SHARED_ALIASED: &str =
    "subscription($ids: [ID!]!) { likeCounts(ids: $ids) { __typename id count: likeCount likeVersion } }";
const PER_VIEWER: &str =
    "subscription($ids: [ID!]!) { likeCounts(ids: $ids) { id likeCount ... on Post { likedByMe } } }";

async fn app_in(mode: LikeMode) -> TestApp {
    TestApp::spawn_with(|s| {
        s.like_mode = mode;
        s.worker_in_serve = true;
    })
    .await
}

fn rendered(app: &TestApp) -> u64 {
    app.state.live.stats.payloads_rendered.load(Ordering::SeqCst)
}

/// Waits until this instance holds `open` live subscriptions (so an update cannot race them).
async fn wait_subscribed(app: &TestApp, open: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while app.state.live.stats.subscriptions_open.load(Ordering::SeqCst) < open {
        assert!(Instant::now() < deadline, "subscriptions did not open");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The next message for subscription `id` on `socket` (others skipped).
async fn next_for(socket: &mut GqlSocket, id: &str, timeout: Duration) -> Option<Value> {
    let deadline = Instant::now() + timeout;
    loop {
        let message = socket.next_message(deadline.saturating_duration_since(Instant::now())).await?;
        if message["id"] == id {
            return Some(message);
        }
    }
}

async fn one_update_is_rendered_once_for_all_its_subscribers(mode: LikeMode) {
    let app = app_in(mode).await;
    let world = World::create(&app).await;
    let post = app.create_post_as(world.bob, world.course, "hot").await;
    let ids = json!({ "ids": [gid("Post", post)] });
    let mut sockets = Vec::new();
    for (n, user) in [world.alice, world.bob, world.instructor].into_iter().cycle().take(12).enumerate() {
        let mut socket = GqlSocket::connect(app.addr, Some(&app.token(user))).await.expect("ws");
        let query = if n % 6 == 5 { SHARED_ALIASED } else { SHARED };
        socket.subscribe(&format!("s{n}"), query, ids.clone()).await;
        sockets.push((n, socket));
    }
    wait_subscribed(&app, 12).await;
    let before = rendered(&app);

    toggle(&app, world.instructor, Target::Post(post), true).await;
    for (n, socket) in &mut sockets {
        let message = next_for(socket, &format!("s{n}"), Duration::from_secs(10)).await.expect("an update");
        assert_eq!(message["type"], "next", "{message}");
        let key = if *n % 6 == 5 { "count" } else { "likeCount" };
        let update = &message["payload"]["data"]["likeCounts"];
        assert_eq!(
            (&update["__typename"], &update["id"], &update[key]),
            (&json!("Post"), &json!(gid("Post", post)), &json!(1)),
            "{mode:?}: {message}"
        );
    }
    // Twelve subscribers, two selections: two renderings, not twelve executions.
    assert_eq!(rendered(&app) - before, 2, "{mode:?}");

    // And again for the next value.
    toggle(&app, world.alice, Target::Post(post), true).await;
    for (n, socket) in &mut sockets {
        let message = next_for(socket, &format!("s{n}"), Duration::from_secs(10)).await.expect("an update");
        let key = if *n % 6 == 5 { "count" } else { "likeCount" };
        assert_eq!(message["payload"]["data"]["likeCounts"][key], 2, "{mode:?}: {message}");
    }
    assert_eq!(rendered(&app) - before, 4, "{mode:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn buffered_one_update_is_rendered_once_for_all_its_subscribers() {
    one_update_is_rendered_once_for_all_its_subscribers(LikeMode::Buffered).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sync_one_update_is_rendered_once_for_all_its_subscribers() {
    one_update_is_rendered_once_for_all_its_subscribers(LikeMode::Sync).await;
}

async fn viewer_dependent_fields_stay_per_viewer(mode: LikeMode) {
    let app = app_in(mode).await;
    let world = World::create(&app).await;
    let post = app.create_post_as(world.bob, world.course, "mine or not").await;
    let ids = json!({ "ids": [gid("Post", post)] });
    let mut alice = GqlSocket::connect(app.addr, Some(&app.token(world.alice))).await.expect("ws");
    let mut bob = GqlSocket::connect(app.addr, Some(&app.token(world.bob))).await.expect("ws");
    alice.subscribe("mine", PER_VIEWER, ids.clone()).await;
    bob.subscribe("mine", PER_VIEWER, ids.clone()).await;
    wait_subscribed(&app, 2).await;
    let before = rendered(&app);

    toggle(&app, world.alice, Target::Post(post), true).await;
    let to_alice = alice.next_data(Duration::from_secs(10)).await.expect("alice's update");
    let to_bob = bob.next_data(Duration::from_secs(10)).await.expect("bob's update");
    assert_eq!(
        to_alice["likeCounts"],
        json!({ "id": gid("Post", post), "likeCount": 1, "likedByMe": true }),
        "{mode:?}"
    );
    assert_eq!(
        to_bob["likeCounts"],
        json!({ "id": gid("Post", post), "likeCount": 1, "likedByMe": false }),
        "{mode:?}"
    );
    assert_eq!(rendered(&app), before, "{mode:?}: a selection with likedByMe is not shared");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn buffered_viewer_dependent_fields_stay_per_viewer() {
    viewer_dependent_fields_stay_per_viewer(LikeMode::Buffered).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sync_viewer_dependent_fields_stay_per_viewer() {
    viewer_dependent_fields_stay_per_viewer(LikeMode::Sync).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn revocation_ends_a_shared_subscription_within_a_second_and_nothing_of_it_follows() {
    let app = app_in(LikeMode::Buffered).await;
    let world = World::create(&app).await;
    let post = app.create_post_as(world.bob, world.course, "watched").await;
    let ids = json!({ "ids": [gid("Post", post)] });
    let mut alice = GqlSocket::connect(app.addr, Some(&app.token(world.alice))).await.expect("ws");
    let mut bob = GqlSocket::connect(app.addr, Some(&app.token(world.bob))).await.expect("ws");
    alice.subscribe("likes", SHARED, ids.clone()).await;
    bob.subscribe("likes", SHARED, ids.clone()).await;
    // The same selection with a directive that changes nothing runs through the schema: its
    // error is the one the shared subscription must give.
    let executed = SHARED.replace("likeVersion", "likeVersion @include(if: true)");
    alice.subscribe("executed", &executed, ids.clone()).await;
    wait_subscribed(&app, 3).await;
    let before = rendered(&app);
    toggle(&app, world.instructor, Target::Post(post), true).await;
    let to_alice = updates(&mut alice, 2).await;
    for id in ["likes", "executed"] {
        assert_eq!(to_alice[id]["payload"]["data"]["likeCounts"]["likeCount"], 1, "{to_alice:?}");
    }
    assert_eq!(bob.next_data(Duration::from_secs(10)).await.expect("shared update")["likeCounts"]["likeCount"], 1);
    assert_eq!(rendered(&app) - before, 1, "the subscription is a shared one");

    app.unenroll(world.course, world.alice).await;
    let removed = Instant::now();
    let mut ended = std::collections::HashMap::new();
    while ended.len() < 4 {
        let message = alice.next_message(Duration::from_secs(5)).await.expect("an error and a complete for each");
        let key =
            (message["id"].as_str().expect("an id").to_owned(), message["type"].as_str().expect("a type").to_owned());
        assert!(ended.insert(key, message.clone()).is_none(), "twice: {message}");
    }
    assert!(removed.elapsed() < Duration::from_secs(1), "ended {:?} after the removal", removed.elapsed());
    let error = &ended[&("likes".to_owned(), "next".to_owned())];
    assert_eq!(error["payload"]["errors"][0]["extensions"]["code"], "FORBIDDEN", "{error}");
    // Word for word the schema's error: message, locations, path, extensions, no data.
    assert_eq!(error["payload"], ended[&("executed".to_owned(), "next".to_owned())]["payload"], "{error}");
    for id in ["likes", "executed"] {
        assert!(ended.contains_key(&(id.to_owned(), "complete".to_owned())), "{id}: {ended:?}");
    }

    // The group goes on for bob; alice receives nothing more of it.
    toggle(&app, world.instructor, Target::Post(post), false).await;
    assert_eq!(bob.next_data(Duration::from_secs(10)).await.expect("bob's update")["likeCounts"]["likeCount"], 0);
    assert!(alice.next_message(Duration::from_millis(500)).await.is_none(), "nothing after complete");
}

fn executions(app: &TestApp) -> u64 {
    app.state.live.stats.socket_executions.load(Ordering::SeqCst)
}

/// Waits until `read` gives `expected` (what a socket does next happens on the server's tasks).
async fn wait_for(app: &TestApp, what: &str, read: fn(&TestApp) -> u64, expected: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while read(app) != expected {
        assert!(Instant::now() < deadline, "{what}: {} instead of {expected}", read(app));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn open_subscriptions(app: &TestApp) -> u64 {
    app.state.live.stats.subscriptions_open.load(Ordering::SeqCst)
}

/// The next message of each of `count` subscriptions on `socket`; a second one for any of them
/// before all have one fails.
async fn updates(socket: &mut GqlSocket, count: usize) -> std::collections::HashMap<String, Value> {
    let mut by_id = std::collections::HashMap::new();
    while by_id.len() < count {
        let message = socket.next_message(Duration::from_secs(10)).await.expect("an update of each");
        let id = message["id"].as_str().expect("an id").to_owned();
        assert!(by_id.insert(id, message.clone()).is_none(), "twice: {message}");
    }
    by_id
}

/// A started shared subscription holds no execution of the schema (its request, document,
/// variables and streams are let go); one with a viewer's field holds its own for its life. A
/// shared one still ends when its id is reused for another subscribe, when the client completes
/// it, and when its socket closes: nothing of it is delivered after, and it leaves its group.
async fn a_started_shared_subscription_keeps_no_execution(mode: LikeMode) {
    let app = app_in(mode).await;
    let world = World::create(&app).await;
    let post = app.create_post_as(world.bob, world.course, "watched by many").await;
    let ids = json!({ "ids": [gid("Post", post)] });
    let mut alice = GqlSocket::connect(app.addr, Some(&app.token(world.alice))).await.expect("ws");
    let mut bob = GqlSocket::connect(app.addr, Some(&app.token(world.bob))).await.expect("ws");
    alice.subscribe("a", SHARED, ids.clone()).await;
    alice.subscribe("b", SHARED_ALIASED, ids.clone()).await;
    bob.subscribe("a", SHARED, ids.clone()).await;
    bob.subscribe("mine", PER_VIEWER, ids.clone()).await;
    wait_subscribed(&app, 4).await;
    wait_for(&app, "executions held", executions, 1).await;

    toggle(&app, world.instructor, Target::Post(post), true).await;
    let to_alice = updates(&mut alice, 2).await;
    assert_eq!(to_alice["a"]["payload"]["data"]["likeCounts"]["likeCount"], 1, "{mode:?}: {to_alice:?}");
    assert_eq!(to_alice["b"]["payload"]["data"]["likeCounts"]["count"], 1, "{mode:?}: {to_alice:?}");
    let to_bob = updates(&mut bob, 2).await;
    assert_eq!(to_bob["a"]["payload"]["data"]["likeCounts"]["likeCount"], 1, "{mode:?}: {to_bob:?}");
    assert_eq!(to_bob["mine"]["payload"]["data"]["likeCounts"]["likedByMe"], false, "{mode:?}: {to_bob:?}");
    assert_eq!(executions(&app), 1, "{mode:?}: updates run no execution for the shared ones");

    // The id "a" reused for a selection with a viewer's field: the shared one ends, unseen.
    alice.subscribe("a", PER_VIEWER, ids.clone()).await;
    wait_for(&app, "executions held", executions, 2).await;
    wait_for(&app, "subscriptions open", open_subscriptions, 4).await;
    toggle(&app, world.alice, Target::Post(post), true).await;
    let to_alice = updates(&mut alice, 2).await;
    assert_eq!(
        to_alice["a"]["payload"]["data"]["likeCounts"],
        json!({ "id": gid("Post", post), "likeCount": 2, "likedByMe": true }),
        "{mode:?}: the id now runs the new selection only"
    );
    assert_eq!(to_alice["b"]["payload"]["data"]["likeCounts"]["count"], 2, "{mode:?}");
    assert!(next_for(&mut alice, "a", Duration::from_millis(500)).await.is_none(), "{mode:?}: one frame for a");
    let to_bob = updates(&mut bob, 2).await;
    assert_eq!(to_bob["a"]["payload"]["data"]["likeCounts"]["likeCount"], 2, "{mode:?}: {to_bob:?}");

    // bob completes his shared one: its `complete`, then nothing of it.
    bob.send_json(json!({ "id": "a", "type": "complete" })).await;
    let complete = next_for(&mut bob, "a", Duration::from_secs(5)).await.expect("complete");
    assert_eq!(complete["type"], "complete", "{mode:?}: {complete}");
    wait_for(&app, "subscriptions open", open_subscriptions, 3).await;

    // alice's socket closes: both of hers end, the shared one leaving its group too.
    alice.close().await;
    wait_for(&app, "subscriptions open", open_subscriptions, 1).await;
    wait_for(&app, "executions held", executions, 1).await;
    let groups_before = rendered(&app);
    toggle(&app, world.instructor, Target::Post(post), false).await;
    let mine = next_for(&mut bob, "mine", Duration::from_secs(10)).await.expect("bob's own update");
    assert_eq!(mine["payload"]["data"]["likeCounts"]["likeCount"], 1, "{mode:?}: {mine}");
    assert!(next_for(&mut bob, "a", Duration::from_millis(500)).await.is_none(), "{mode:?}: bob's a is over");
    assert_eq!(rendered(&app), groups_before, "{mode:?}: no shared subscriber is left to render for");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn buffered_a_started_shared_subscription_keeps_no_execution() {
    a_started_shared_subscription_keeps_no_execution(LikeMode::Buffered).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sync_a_started_shared_subscription_keeps_no_execution() {
    a_started_shared_subscription_keeps_no_execution(LikeMode::Sync).await;
}

/// The frame of a shared subscription is the schema's frame: same message type, its own id,
/// same payload as the same selection run per subscriber (a directive that changes nothing
/// keeps it off the shared path), for a post and a reply; and `complete` (or legacy `stop`)
/// ends it.
async fn shared_frames_are_the_schemas_frames(protocol: &str) {
    let app = app_in(LikeMode::Buffered).await;
    let world = World::create(&app).await;
    let post = app.create_post_as(world.bob, world.course, "framed").await;
    let comment = app.create_comment(&app.token(world.bob), post, "a comment").await;
    let reply = app.create_reply(&app.token(world.bob), &gid("Comment", comment), "a reply").await;
    let ids = json!({ "ids": [gid("Post", post), gid("Reply", reply)] });
    let selection = "__typename n: likeCount ... on Reply { id likeVersion } ...Times";
    let fragment = "fragment Times on Likeable { likeCountCommittedAt }";
    let shared = format!("subscription($ids: [ID!]!) {{ live: likeCounts(ids: $ids) {{ {selection} }} }} {fragment}");
    let unshared = format!(
        "subscription($ids: [ID!]!) {{ live: likeCounts(ids: $ids) {{ {selection} id @include(if: true) }} }} {fragment}"
    )
    .replace("{ id likeVersion }", "{ likeVersion }");
    let mut socket = GqlSocket::connect_with(app.addr, Some(&app.token(world.alice)), protocol).await.expect("ws");
    socket.subscribe("shared \"1\"", &shared, ids.clone()).await;
    socket.subscribe("unshared", &unshared, ids.clone()).await;
    wait_subscribed(&app, 2).await;
    let before = rendered(&app);
    let result_type = if protocol == "graphql-ws" { "data" } else { "next" };

    for (target, liked) in [(gid("Post", post), "Post"), (gid("Reply", reply), "Reply")] {
        let mutation = if liked == "Post" {
            "mutation($id: ID!) { likePost(postId: $id) { id } }"
        } else {
            "mutation($id: ID!) { likeComment(commentId: $id) { id } }"
        };
        app.gql_ok(Some(&app.token(world.instructor)), mutation, json!({ "id": target })).await;
        let mut frames = std::collections::HashMap::new();
        while frames.len() < 2 {
            let text = socket.next_text(Duration::from_secs(10)).await.expect("both frames");
            let message: Value = serde_json::from_str(&text).expect("json");
            if message["type"] == "ka" || message["type"] == "ping" {
                continue;
            }
            assert_eq!(message["type"], result_type, "{protocol}: {text}");
            frames.insert(message["id"].as_str().expect("an id").to_owned(), message);
        }
        let (shared, unshared) = (&frames["shared \"1\""], &frames["unshared"]);
        let mut expected = unshared["payload"].clone();
        // The unshared selection asks `id` of every type; the shared one of replies only.
        if liked == "Post" {
            expected["data"]["live"].as_object_mut().expect("object").remove("id");
        }
        assert_eq!(shared["payload"], expected, "{protocol}: {liked}");
        assert_eq!(shared["payload"]["data"]["live"]["__typename"], liked, "{protocol}");
        assert_eq!(shared["payload"]["data"]["live"]["n"], 1, "{protocol}");
        assert!(shared["payload"]["data"]["live"]["likeCountCommittedAt"].is_string(), "{protocol}: {shared}");
    }
    assert_eq!(rendered(&app) - before, 2, "{protocol}: one rendering per update");

    // Completing the shared subscription: its `complete`, then nothing more of it.
    let stop = if protocol == "graphql-ws" { "stop" } else { "complete" };
    socket.send_json(json!({ "id": "shared \"1\"", "type": stop })).await;
    let complete = next_for(&mut socket, "shared \"1\"", Duration::from_secs(5)).await.expect("complete");
    assert_eq!(complete["type"], "complete", "{protocol}: {complete}");
    toggle(&app, world.alice, Target::Post(post), true).await;
    let next = socket.next_message(Duration::from_secs(10)).await.expect("the unshared one goes on");
    assert_eq!(
        (&next["id"], &next["payload"]["data"]["live"]["n"]),
        (&json!("unshared"), &json!(2)),
        "{protocol}: {next}"
    );
    assert!(next_for(&mut socket, "shared \"1\"", Duration::from_millis(500)).await.is_none(), "{protocol}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn graphql_transport_ws_shared_frames_are_the_schemas_frames() {
    shared_frames_are_the_schemas_frames("graphql-transport-ws").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn legacy_graphql_ws_shared_frames_are_the_schemas_frames() {
    shared_frames_are_the_schemas_frames("graphql-ws").await;
}
