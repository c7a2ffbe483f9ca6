//! Where the liked-sets land on a Redis Cluster (the shared local one). A liked-set lives in its
//! like-stream shard's slot (`{s<k>}`), because the toggle changes the set, the pending record,
//! the rate counter and the stream in one script, and a script cannot cross slots. So the
//! number of slots that hold liked-sets is `LIKE_STREAM_SHARDS`: with one shard every set is on
//! one master; with 16 they spread over every master of the cluster.

use std::collections::HashMap;
use std::time::Duration;

use course_forum::testing::config::LikeMode;
use course_forum::testing::kv;
use serde_json::json;

use crate::common::{self, TestApp, World, gid};

/// Liked-sets under the app's prefix, counted per master (by the slot table).
async fn liked_sets_per_master(app: &TestApp) -> HashMap<u16, usize> {
    let redis =
        kv::connect_cluster(&common::local_cluster_nodes(), Duration::from_secs(5), "test").await.expect("cluster");
    let mut scan = kv::KeyScan::new(&redis, &app.state.keys.liked_set_pattern());
    let mut keys = Vec::new();
    while let Some(page) = scan.next_page().await.expect("scan") {
        keys.extend(page);
    }
    let mut per_master = HashMap::new();
    for port in common::cluster::master_ports(&redis, &keys).await {
        *per_master.entry(port).or_default() += 1;
    }
    per_master
}

async fn sets_after_likes(shards: u32) -> HashMap<u16, usize> {
    let nodes = common::local_cluster_nodes();
    let app = TestApp::spawn_with(|s| {
        s.redis_cluster_nodes = nodes;
        s.like_mode = LikeMode::Buffered;
        s.like_stream_shards = shards;
        s.like_rate_per_minute = 0;
    })
    .await;
    let world = World::create(&app).await;
    let post = app.create_post(&app.token(world.bob), world.course, "p").await;
    for n in 0..48 {
        let user = app.create_user(&format!("u{n}")).await;
        app.enroll(world.course, user, "student").await;
        app.gql_ok(
            Some(&app.token(user)),
            "mutation($p: ID!) { likePost(postId: $p) { id } }",
            json!({ "p": gid("Post", post) }),
        )
        .await;
    }
    liked_sets_per_master(&app).await
}

#[tokio::test]
async fn liked_sets_spread_over_as_many_slots_as_there_are_stream_shards() {
    let one = sets_after_likes(1).await;
    assert_eq!(one.values().sum::<usize>(), 48, "one set per liker: {one:?}");
    assert_eq!(one.len(), 1, "one shard: every set on one master: {one:?}");
    let sixteen = sets_after_likes(16).await;
    assert_eq!(sixteen.values().sum::<usize>(), 48, "{sixteen:?}");
    assert_eq!(sixteen.len(), 3, "sixteen shards: sets on every master: {sixteen:?}");
}
