//! Like helpers shared by the like-path suites: toggles and reads through the API, the rows
//! and counters in PostgreSQL, and a real worker process that crashes at a chosen point.

use std::process::Command;
use std::time::{Duration, Instant};

use course_forum::testing::kv::keys::LIKE_GROUP;
use serde_json::json;

use super::{TestApp, gid};

/// What can be liked, as the tests name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Target {
    Post(i64),
    Comment(i64),
}

impl Target {
    pub fn domain(self) -> course_forum::testing::likes::LikeTarget {
        match self {
            Target::Post(id) => course_forum::testing::likes::LikeTarget::Post(id),
            Target::Comment(id) => course_forum::testing::likes::LikeTarget::Comment(id),
        }
    }
}

/// Likes (`liked`) or unlikes through the API; panics on any error.
pub async fn toggle(app: &TestApp, user: i64, target: Target, liked: bool) {
    let (query, id) = match (target, liked) {
        (Target::Post(id), true) => ("mutation($id: ID!) { likePost(postId: $id) { id } }", gid("Post", id)),
        (Target::Post(id), false) => ("mutation($id: ID!) { unlikePost(postId: $id) { id } }", gid("Post", id)),
        (Target::Comment(id), true) => {
            ("mutation($id: ID!) { likeComment(commentId: $id) { id } }", gid("Comment", id))
        }
        (Target::Comment(id), false) => {
            ("mutation($id: ID!) { unlikeComment(commentId: $id) { id } }", gid("Comment", id))
        }
    };
    app.gql_ok(Some(&app.token(user)), query, json!({ "id": id })).await;
}

/// `post(id) { likedByMe }` as the user sees it.
pub async fn liked_by_me(app: &TestApp, user: i64, post: i64) -> bool {
    let data = app
        .gql_ok(
            Some(&app.token(user)),
            "query($p: ID!) { post(id: $p) { likedByMe } }",
            json!({ "p": gid("Post", post) }),
        )
        .await;
    data["post"]["likedByMe"].as_bool().expect("likedByMe is a boolean")
}

/// Whether the user's like row of the target exists.
pub async fn has_row(app: &TestApp, user: i64, target: Target) -> bool {
    let (sql, id) = match target {
        Target::Post(id) => ("SELECT count(*) AS v FROM post_likes WHERE post_id = $1 AND user_id = $2", id),
        Target::Comment(id) => ("SELECT count(*) AS v FROM comment_likes WHERE comment_id = $1 AND user_id = $2", id),
    };
    app.scalar_i64(sql, [id.into(), user.into()]).await == 1
}

/// (like rows, like_count) of a target.
pub async fn rows_and_counter(app: &TestApp, target: Target) -> (i64, i64) {
    let (rows, counter, id) = match target {
        Target::Post(id) => (
            "SELECT count(*) AS v FROM post_likes WHERE post_id = $1",
            "SELECT like_count::bigint AS v FROM posts WHERE id = $1",
            id,
        ),
        Target::Comment(id) => (
            "SELECT count(*) AS v FROM comment_likes WHERE comment_id = $1",
            "SELECT like_count::bigint AS v FROM comments WHERE id = $1",
            id,
        ),
    };
    (app.scalar_i64(rows, [id.into()]).await, app.scalar_i64(counter, [id.into()]).await)
}

/// Runs `course-forum worker` on the app's database and prefix with `COURSE_FORUM_FAULT=fault`
/// (`abort-before-commit` or `abort-after-commit`) and a 1 s lease; it aborts in its first
/// batch. Returns its exit status.
pub fn run_crashing_worker(app: &TestApp, fault: &str) -> std::process::ExitStatus {
    let mut child = Command::new(env!("CARGO_BIN_EXE_course-forum"))
        .arg("worker")
        .env("DATABASE_URL", super::database_url(&app.database))
        .env("REDIS_URL", super::redis_url())
        .env("REDIS_CLUSTER_NODES", super::redis_cluster_nodes().join(","))
        .env("REDIS_KEY_PREFIX", &app.redis_prefix)
        .env("JWT_SECRET", super::JWT_SECRET)
        .env("LIKE_MODE", "buffered")
        .env("LIKE_STREAM_SHARDS", app.state.keys.shards().to_string())
        .env("LIKE_BATCH_SIZE", app.state.settings.like_batch_size.to_string())
        .env("WORKER_LEASE_TTL", "1s")
        .env("COURSE_FORUM_FAULT", fault)
        .env("RUST_LOG", "error")
        .spawn()
        .expect("spawn worker");
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if started.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("the faulty worker did not crash within 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Entries read by some consumer and not acknowledged, over every shard.
pub async fn pending_entries(app: &TestApp) -> i64 {
    let mut conn = app.state.redis.clone();
    let mut total = 0;
    for shard in 0..app.state.keys.shards() {
        let summary: (i64, redis::Value, redis::Value, redis::Value) = redis::cmd("XPENDING")
            .arg(app.state.keys.like_stream(shard))
            .arg(LIKE_GROUP)
            .query_async(&mut conn)
            .await
            .expect("xpending");
        total += summary.0;
    }
    total
}

/// Entries not yet applied, over every shard.
pub async fn unapplied(app: &TestApp) -> u64 {
    course_forum::testing::worker::unapplied_events(&app.state.redis, &app.state.keys).await.expect("xlen")
}

/// Steps `worker` until every stream is empty, waiting for leases of dead consumers to lapse.
pub async fn drain_all(app: &TestApp, worker: &course_forum::testing::worker::LikeWorker) {
    worker
        .drain_until_empty(std::time::Instant::now() + Duration::from_secs(20))
        .await
        .unwrap_or_else(|e| panic!("the streams did not drain within 20 s: {e}"));
    assert_eq!(unapplied(app).await, 0);
}
