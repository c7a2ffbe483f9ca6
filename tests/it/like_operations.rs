//! Operator commands around likes: `reconcile` repairs drifted counters, `reset-like-cache`
//! drops the liked-sets (they reload), and buffered mode refuses a Redis that may evict keys.

use std::process::{Command, Output};

use course_forum::testing::config::LikeMode;
use sea_orm::ConnectionTrait;
use serde_json::json;

use crate::common::procs::PrivateRedis;
use crate::common::{self, TestApp, World, gid};

fn course_forum(app: &TestApp, args: &[&str], extra: &[(&str, &str)]) -> Output {
    let database_url =
        format!("{}/{}", common::admin_database_url().rsplit_once('/').expect("admin url").0, app.database);
    Command::new(env!("CARGO_BIN_EXE_course-forum"))
        .args(args)
        .env("DATABASE_URL", database_url)
        .env("REDIS_URL", common::redis_url())
        .env("REDIS_KEY_PREFIX", &app.redis_prefix)
        .env("JWT_SECRET", common::JWT_SECRET)
        .env("LIKE_MODE", "buffered")
        .env("LIKE_STREAM_SHARDS", app.state.keys.shards().to_string())
        .envs(extra.iter().copied())
        .output()
        .expect("run course-forum")
}

#[tokio::test]
async fn reconcile_fixes_exactly_the_counters_that_disagree() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let token = app.token(world.alice);
    let mut posts = Vec::new();
    for n in 0..3 {
        let id = app
            .gql_ok(
                Some(&token),
                "mutation($c: ID!, $t: String!) { createPost(courseId: $c, title: $t, body: \"b\") { id } }",
                json!({ "c": gid("Course", world.course), "t": format!("p{n}") }),
            )
            .await["createPost"]["id"]
            .as_str()
            .map(common::raw_id)
            .expect("id");
        app.gql_ok(Some(&token), "mutation($p: ID!) { likePost(postId: $p) { id } }", json!({ "p": gid("Post", id) }))
            .await;
        posts.push(id);
    }
    // Drift two counters behind the rows' back (as a lost recount mark or a bug would).
    app.db
        .execute_unprepared(&format!(
            "UPDATE posts SET like_count = 7 WHERE id = {}; UPDATE posts SET like_count = 0 WHERE id = {}",
            posts[0], posts[1]
        ))
        .await
        .expect("drift");
    let output = course_forum(&app, &["reconcile"], &[]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("2 counter(s) fixed"), "{stdout}");
    for post in &posts {
        let counter = app.scalar_i64("SELECT like_count::bigint AS v FROM posts WHERE id = $1", [(*post).into()]).await;
        assert_eq!(counter, 1);
    }
    let again = course_forum(&app, &["reconcile"], &[]);
    assert!(String::from_utf8_lossy(&again.stdout).contains("0 counter(s) fixed"));
}

#[tokio::test]
async fn reset_like_cache_drops_the_sets_and_they_reload() {
    let app = TestApp::spawn_with(|s| s.like_mode = LikeMode::Buffered).await;
    let world = World::create(&app).await;
    let token = app.token(world.alice);
    let post = app
        .gql_ok(
            Some(&token),
            "mutation($c: ID!) { createPost(courseId: $c, title: \"t\", body: \"b\") { id } }",
            json!({ "c": gid("Course", world.course) }),
        )
        .await["createPost"]["id"]
        .clone();
    app.gql_ok(Some(&token), "mutation($p: ID!) { likePost(postId: $p) { id } }", json!({ "p": post })).await;
    app.worker().await.drain().await.expect("drain");

    let output = course_forum(&app, &["reset-like-cache"], &[]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("dropped 1 liked-set"),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    let mut conn = app.state.redis.clone();
    let exists: i64 = redis::cmd("EXISTS")
        .arg(app.state.keys.liked_set(world.alice, world.course))
        .query_async(&mut conn)
        .await
        .expect("exists");
    assert_eq!(exists, 0);
    let data =
        app.gql_ok(Some(&token), "query($p: ID!) { post(id: $p) { likedByMe likeCount } }", json!({ "p": post })).await;
    assert_eq!(data["post"], json!({ "likedByMe": true, "likeCount": 1 }));
}

#[tokio::test]
async fn buffered_mode_refuses_a_redis_that_may_evict_the_stream() {
    let app = TestApp::spawn().await;
    let redis = PrivateRedis::start_with(false, &["--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"]);
    let url = format!("redis://127.0.0.1:{}", redis.port);
    let refused = course_forum(&app, &["reset-like-cache"], &[("REDIS_URL", &url)]);
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("maxmemory-policy is `allkeys-lru`") && err.contains("ALLOW_EVICTING_REDIS"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one sentence: {err}");

    let overridden =
        course_forum(&app, &["reset-like-cache"], &[("REDIS_URL", &url), ("ALLOW_EVICTING_REDIS", "true")]);
    assert!(overridden.status.success(), "{}", String::from_utf8_lossy(&overridden.stderr));
    let sync_mode = course_forum(&app, &["reset-like-cache"], &[("REDIS_URL", &url), ("LIKE_MODE", "sync")]);
    assert!(sync_mode.status.success(), "sync mode keeps nothing precious in Redis");
}
