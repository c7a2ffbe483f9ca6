//! Safe like-mode switches: starting in `sync` or `recount` with events still in the like
//! streams applies them first, or refuses to start with a clear message; liked-sets left by
//! buffered mode never swallow a toggle when buffered mode comes back.

use course_forum::testing::config::LikeMode;
use course_forum::testing::startup::Application;
use serde_json::{Value as Json, json};

use crate::common::likes::{Target, has_row, liked_by_me, rows_and_counter, toggle, unapplied};
use crate::common::{TestApp, World, gid, test_settings};

/// `gql_ok` against another instance, as `user`.
async fn gql_ok_at(app: &TestApp, addr: std::net::SocketAddr, user: i64, query: &str, variables: Json) -> Json {
    let response = app.gql_at(addr, Some(&app.token(user)), query, variables).await;
    assert!(response.get("errors").is_none(), "unexpected errors: {response}");
    response["data"].clone()
}

#[tokio::test]
async fn starting_in_sync_or_recount_applies_what_buffered_mode_left_in_the_stream() {
    for mode in [LikeMode::Sync, LikeMode::Recount] {
        let app = TestApp::spawn_with(|s| s.like_mode = LikeMode::Buffered).await;
        let world = World::create(&app).await;
        let post = app.create_post(&app.token(world.instructor), world.course, "p").await;
        toggle(&app, world.alice, Target::Post(post), true).await;
        toggle(&app, world.bob, Target::Post(post), true).await;
        toggle(&app, world.bob, Target::Post(post), false).await;
        assert!(unapplied(&app).await > 0);

        let peer = app.spawn_peer(|s| s.like_mode = mode).await;
        assert_eq!(unapplied(&app).await, 0, "{mode:?}: nothing waits in the stream");
        assert!(has_row(&app, world.alice, Target::Post(post)).await);
        assert!(!has_row(&app, world.bob, Target::Post(post)).await, "{mode:?}: bob's last action was an unlike");
        assert_eq!(rows_and_counter(&app, Target::Post(post)).await, (1, 1));
        let seen = gql_ok_at(
            &app,
            peer.addr,
            world.alice,
            "query($p: ID!) { post(id: $p) { likedByMe } }",
            json!({ "p": gid("Post", post) }),
        )
        .await;
        assert_eq!(seen["post"]["likedByMe"], true);
    }
}

#[tokio::test]
async fn starting_in_sync_refuses_when_the_leftovers_cannot_be_applied() {
    let app = TestApp::spawn_with(|s| s.like_mode = LikeMode::Buffered).await;
    let world = World::create(&app).await;
    let post = app.create_post(&app.token(world.instructor), world.course, "p").await;
    toggle(&app, world.alice, Target::Post(post), true).await;
    // Another (buffered) worker still holds the shard and will not let go.
    let mut conn = app.state.redis.clone();
    let lease = app.state.keys.worker_lease(app.state.keys.shard_of(world.alice));
    let () = redis::cmd("SET")
        .arg(&lease)
        .arg("a-buffered-worker")
        .arg("PX")
        .arg(60_000)
        .query_async(&mut conn)
        .await
        .expect("set");

    let mut settings = test_settings(&app.database, &app.redis_prefix);
    settings.like_mode = LikeMode::Sync;
    settings.shutdown_timeout = std::time::Duration::from_millis(500);
    settings.worker_lease_ttl = std::time::Duration::from_millis(500);
    let refused = Application::build(settings).await.err().expect("a sync start with unapplied likes is refused");
    let message = refused.to_string();
    assert!(message.contains("LIKE_MODE=sync") && message.contains("left by buffered mode"), "{message}");
    assert!(message.contains("another worker holds shard"), "{message}");
    assert_eq!(unapplied(&app).await, 1, "the like still waits, untouched");
    assert!(!has_row(&app, world.alice, Target::Post(post)).await);
}

#[tokio::test]
async fn liked_sets_left_by_buffered_mode_never_swallow_a_toggle() {
    let app = TestApp::spawn_with(|s| s.like_mode = LikeMode::Buffered).await;
    let world = World::create(&app).await;
    let post = app.create_post(&app.token(world.instructor), world.course, "p").await;
    toggle(&app, world.alice, Target::Post(post), true).await;
    let worker = app.worker().await;
    worker.drain().await.expect("drain");
    assert!(liked_by_me(&app, world.alice, post).await, "alice's set is loaded and says liked");

    // The operator switches to sync; alice unlikes there.
    let sync = app.spawn_peer(|s| s.like_mode = LikeMode::Sync).await;
    gql_ok_at(
        &app,
        sync.addr,
        world.alice,
        "mutation($p: ID!) { unlikePost(postId: $p) { id } }",
        json!({ "p": gid("Post", post) }),
    )
    .await;
    assert!(!has_row(&app, world.alice, Target::Post(post)).await);
    drop(sync);

    // Back in buffered mode, alice likes again: the toggle must count.
    let buffered = app.spawn_peer(|s| s.like_mode = LikeMode::Buffered).await;
    gql_ok_at(
        &app,
        buffered.addr,
        world.alice,
        "mutation($p: ID!) { likePost(postId: $p) { id } }",
        json!({ "p": gid("Post", post) }),
    )
    .await;
    worker.drain().await.expect("drain");
    assert!(has_row(&app, world.alice, Target::Post(post)).await, "the like was not swallowed");
    assert!(liked_by_me(&app, world.alice, post).await);
    assert_eq!(rows_and_counter(&app, Target::Post(post)).await, (1, 1));
}
