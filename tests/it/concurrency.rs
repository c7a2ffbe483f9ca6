//! Likes under real races: many tasks released together, each on its own HTTP connection (and
//! so its own PostgreSQL transaction), against one server.

use std::sync::Arc;

use serde_json::json;
use tokio::sync::Barrier;

use crate::common::{self, TestApp, World, gid, send_alone};

const LIKE_POST: &str = "mutation($id: ID!) { likePost(postId: $id) { likeCount likedByMe } }";
const UNLIKE_POST: &str = "mutation($id: ID!) { unlikePost(postId: $id) { likeCount likedByMe } }";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_likes_by_one_user_make_one_row() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let token = app.token(world.alice);
    let post = gid("Post", app.create_post(&token, world.course, "race me").await);

    let barrier = Arc::new(Barrier::new(50));
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let (barrier, url, token, post) = (barrier.clone(), app.url("/graphql"), token.clone(), post.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                send_alone(url, token, LIKE_POST, json!({ "id": post })).await
            })
        })
        .collect();
    for task in tasks {
        let response = task.await.expect("task");
        assert!(response.get("errors").is_none(), "{response}");
        // Whoever won, every caller sees the one like.
        assert_eq!(response["data"]["likePost"], json!({ "likeCount": 1, "likedByMe": true }));
    }

    let post_id = common::raw_id(&post);
    let rows = app.scalar_i64("SELECT count(*) AS v FROM post_likes WHERE post_id = $1", [post_id.into()]).await;
    let counter = app.scalar_i64("SELECT like_count::bigint AS v FROM posts WHERE id = $1", [post_id.into()]).await;
    assert_eq!((rows, counter), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_concurrent_toggles_keep_every_counter_equal_to_its_rows() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let author = app.token(world.alice);
    let mut posts = Vec::new();
    for n in 0..3 {
        posts.push(gid("Post", app.create_post(&author, world.course, &format!("hot post {n}")).await));
    }
    let mut tokens = Vec::new();
    for n in 0..20 {
        let user = app.create_user(&format!("racer{n}")).await;
        app.enroll(world.course, user, "student").await;
        tokens.push(app.token(user));
    }

    let barrier = Arc::new(Barrier::new(200));
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let barrier = barrier.clone();
            let url = app.url("/graphql");
            let token = tokens[i % tokens.len()].clone();
            let post = posts[(i / 7) % posts.len()].clone();
            // A deterministic mix of likes and unlikes, with repeats of both.
            let query = if (i * 31) % 5 < 3 { LIKE_POST } else { UNLIKE_POST };
            tokio::spawn(async move {
                barrier.wait().await;
                send_alone(url, token, query, json!({ "id": post })).await
            })
        })
        .collect();
    for task in tasks {
        let response = task.await.expect("task");
        assert!(response.get("errors").is_none(), "{response}");
    }

    let mismatched = app
        .scalar_i64(
            "SELECT count(*) AS v FROM posts p \
             WHERE p.like_count <> (SELECT count(*) FROM post_likes l WHERE l.post_id = p.id)",
            [],
        )
        .await;
    assert_eq!(mismatched, 0, "every like_count equals its rows");
    let total = app.scalar_i64("SELECT count(*) AS v FROM post_likes", []).await;
    assert!(total > 0, "some likes survived the mix");
}
