//! Model-based: random sequences of like/unlike by many users on a few targets, with random
//! batch boundaries and random consumer crashes, must end with exactly the rows and counters
//! a plain in-memory model predicts, in all three like modes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use course_forum::testing::config::LikeMode;
use course_forum::testing::kv::keys::LIKE_GROUP;
use course_forum::testing::worker::LikeWorker;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use crate::common::likes::{Target, toggle};
use crate::common::{TestApp, World, gid};

const USERS: usize = 8;
const OPS: usize = 160;

struct Forum {
    users: Vec<i64>,
    targets: Vec<Target>,
}

async fn build_forum(app: &TestApp) -> Forum {
    let world = World::create(app).await;
    let mut users = Vec::new();
    for n in 0..USERS {
        let user = app.create_user(&format!("member{n}")).await;
        app.enroll(world.course, user, "student").await;
        users.push(user);
    }
    let token = app.token(world.instructor);
    let mut targets = Vec::new();
    for n in 0..3 {
        let post = app.create_post(&token, world.course, &format!("post {n}")).await;
        targets.push(Target::Post(post));
        if n == 0 {
            targets.push(Target::Comment(app.create_comment(&token, post, "c").await));
        }
    }
    Forum { users, targets }
}

/// A consumer that reads part of a shard and dies without acking: its entries stay pending
/// until the real worker takes the lapsed lease and claims them.
async fn crash_a_consumer_mid_batch(app: &TestApp, worker: &LikeWorker, shard: u32, count: usize) {
    let mut conn = app.state.redis.clone();
    let lease = app.state.keys.worker_lease(shard);
    let victim = format!("victim-{}", uuid::Uuid::new_v4().simple());
    // The victim holds the lease while it reads…
    let _: () = redis::cmd("SET").arg(&lease).arg(&victim).query_async(&mut conn).await.expect("set lease");
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg(LIKE_GROUP)
        .arg(&victim)
        .arg("COUNT")
        .arg(count)
        .arg("STREAMS")
        .arg(app.state.keys.like_stream(shard))
        .arg(">")
        .query_async(&mut conn)
        .await
        .expect("victim read");
    // …then dies; its lease lapses.
    let _: () = redis::cmd("DEL").arg(&lease).query_async(&mut conn).await.expect("lapse lease");
    let _ = worker; // the real worker notices at its next step
}

async fn settle(mode: LikeMode, worker: &LikeWorker) {
    match mode {
        LikeMode::Sync => {}
        LikeMode::Buffered => {
            worker.drain().await.expect("drain");
        }
        LikeMode::Recount => while worker.recount_once().await.expect("recount") > 0 {},
    }
    if mode == LikeMode::Recount {
        // Marks cleared once their targets agree; a last run must find nothing to change.
        assert_eq!(worker.recount_once().await.expect("recount"), 0);
    }
}

async fn run_model(mode: LikeMode, seed: u64) {
    let app = TestApp::spawn_with(|s| {
        s.like_mode = mode;
        s.like_batch_size = 3;
        s.like_stream_shards = 2;
    })
    .await;
    let forum = build_forum(&app).await;
    let worker = app.worker().await;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut model: BTreeSet<(i64, Target)> = BTreeSet::new();

    for _ in 0..OPS {
        let user = forum.users[rng.random_range(0..forum.users.len())];
        let target = forum.targets[rng.random_range(0..forum.targets.len())];
        // Biased towards likes so counters climb and unlikes hit real rows.
        let liked = rng.random_bool(0.6);
        toggle(&app, user, target, liked).await;
        if liked {
            model.insert((user, target));
        } else {
            model.remove(&(user, target));
        }
        let dice = rng.random_range(0..100);
        match mode {
            LikeMode::Buffered if dice < 20 => {
                // Step by step, or pipelined as the running worker does (its retire left
                // running, the next batch read ahead), in any mix.
                let shard = rng.random_range(0..app.state.keys.shards());
                if rng.random_bool(0.5) {
                    worker.process_one_batch(shard).await.expect("step");
                } else {
                    worker.process_pipelined(shard).await.expect("pipelined step");
                }
            }
            LikeMode::Buffered if dice < 25 => {
                let shard = rng.random_range(0..app.state.keys.shards());
                crash_a_consumer_mid_batch(&app, &worker, shard, rng.random_range(1..5)).await;
            }
            LikeMode::Recount if dice < 20 => {
                worker.recount_once().await.expect("recount");
            }
            _ => {}
        }
    }
    settle(mode, &worker).await;

    let mut expected_counts: BTreeMap<Target, i64> = forum.targets.iter().map(|t| (*t, 0)).collect();
    for (_, target) in &model {
        *expected_counts.entry(*target).or_default() += 1;
    }
    for target in &forum.targets {
        let (rows_sql, counter_sql, id) = match target {
            Target::Post(id) => (
                "SELECT count(*) AS v FROM post_likes WHERE post_id = $1",
                "SELECT like_count::bigint AS v FROM posts WHERE id = $1",
                *id,
            ),
            Target::Comment(id) => (
                "SELECT count(*) AS v FROM comment_likes WHERE comment_id = $1",
                "SELECT like_count::bigint AS v FROM comments WHERE id = $1",
                *id,
            ),
        };
        let rows = app.scalar_i64(rows_sql, [id.into()]).await;
        let counter = app.scalar_i64(counter_sql, [id.into()]).await;
        let expected = expected_counts[target];
        assert_eq!((rows, counter), (expected, expected), "{mode:?} seed {seed}: {target:?}");
        for user in &forum.users {
            let table = if matches!(target, Target::Post(_)) {
                "post_likes WHERE post_id"
            } else {
                "comment_likes WHERE comment_id"
            };
            let has_row = app
                .scalar_i64(
                    &format!("SELECT count(*) AS v FROM {table} = $1 AND user_id = $2"),
                    [id.into(), (*user).into()],
                )
                .await;
            assert_eq!(
                has_row == 1,
                model.contains(&(*user, *target)),
                "{mode:?} seed {seed}: user {user} on {target:?}"
            );
        }
    }
    // What a viewer sees agrees with the model too.
    if let Some(Target::Post(post)) = forum.targets.first().copied() {
        let user = forum.users[0];
        let data = app
            .gql_ok(
                Some(&app.token(user)),
                "query($p: ID!) { post(id: $p) { likeCount likedByMe } }",
                json!({ "p": gid("Post", post) }),
            )
            .await;
        assert_eq!(data["post"]["likeCount"], expected_counts[&Target::Post(post)]);
        assert_eq!(data["post"]["likedByMe"], model.contains(&(user, Target::Post(post))));
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
}

#[tokio::test]
async fn sync_mode_matches_the_model() {
    for seed in [1, 2] {
        run_model(LikeMode::Sync, seed).await;
    }
}

#[tokio::test]
async fn recount_mode_matches_the_model() {
    for seed in [3, 4] {
        run_model(LikeMode::Recount, seed).await;
    }
}

#[tokio::test]
async fn buffered_mode_matches_the_model_across_batches_and_crashes() {
    for seed in [5, 6, 7] {
        run_model(LikeMode::Buffered, seed).await;
    }
}
