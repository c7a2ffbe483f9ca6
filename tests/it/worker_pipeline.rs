//! The pipelined worker (`LikeWorker::process_pipelined`, what the running worker does): a
//! batch's transaction overlaps the previous batch's retire and the read of the next batch, but
//! COMMITs only once that retire returned, so acknowledgements stay in batch order and a crash
//! can never leave an older batch to replay over a newer one. Buffered mode. (The model tests,
//! `like_model` and `like_interleavings`, mix pipelined and one-by-one steps with crashes,
//! stalls and takeovers.)

use course_forum::testing::config::LikeMode;
use course_forum::testing::like_event::LikeEvent;

use crate::common::likes::{Target, rows_and_counter, toggle, unapplied};
use crate::common::{self, TestApp, World};

/// Waits until a backend of the test database sits in an open transaction: a batch whose
/// statements ran and that has not committed.
async fn a_transaction_waits(app: &TestApp) {
    app.until_a_backend("state = 'idle in transaction'").await;
}

/// Buffered, one shard, batches of two, and a post by bob in the world's course.
async fn one_shard_of_batches_of_two() -> (TestApp, World, i64) {
    let app = TestApp::spawn_with(|s| {
        s.like_mode = LikeMode::Buffered;
        s.like_batch_size = 2;
        s.like_stream_shards = 1;
    })
    .await;
    let world = World::create(&app).await;
    let post = app.create_post(&app.token(world.bob), world.course, "p").await;
    (app, world, post)
}

/// As `one_shard_of_batches_of_two`, with a fourth member, carol, and four likes of the post
/// waiting in the stream: alice's and bob's (the first batch), the instructor's and carol's.
async fn four_likes_in_two_batches() -> (TestApp, World, i64, i64) {
    let (app, world, post) = one_shard_of_batches_of_two().await;
    let carol = app.create_user("carol").await;
    app.enroll(world.course, carol, "student").await;
    for user in [world.alice, world.bob, world.instructor, carol] {
        toggle(&app, user, Target::Post(post), true).await;
    }
    (app, world, post, carol)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_commits_only_after_the_batch_before_it_was_retired() {
    let (app, _, post, _) = four_likes_in_two_batches().await;
    let worker = app.worker().await;

    // Batch 1 (a full batch: alice, bob) commits; its retire is held; batch 2 was read ahead.
    let retire = worker.hooks().before_retire.hold().await;
    let first = worker.process_pipelined(0).await.expect("first batch");
    assert_eq!((first.read, first.acked), (2, 2));
    assert_eq!(rows_and_counter(&app, Target::Post(post)).await, (2, 2), "batch 1 committed");
    assert_eq!(unapplied(&app).await, 4, "nothing retired yet");

    // Batch 2 (instructor, carol: the read-ahead) runs its statements, then waits for batch 1's
    // retire before COMMIT.
    let second = tokio::spawn({
        let worker = worker.clone();
        async move { worker.process_pipelined(0).await }
    });
    a_transaction_waits(&app).await;
    assert_eq!(
        rows_and_counter(&app, Target::Post(post)).await,
        (2, 2),
        "batch 2 committed before batch 1 was retired"
    );
    assert_eq!(worker.hooks().before_commit.reached(), 1, "only batch 1 reached COMMIT");
    drop(retire);
    let second = second.await.expect("join").expect("second batch");
    assert_eq!(second.read, 2);
    assert_eq!(rows_and_counter(&app, Target::Post(post)).await, (4, 4));
    worker.settle().await.expect("settle");
    assert_eq!(unapplied(&app).await, 0, "both batches retired");
    assert_eq!(worker.process_pipelined(0).await.expect("idle").read, 0, "nothing read twice");
}

/// A retire that fails rolls the next batch back: nothing commits out of order, and both
/// batches apply once the stream is readable again, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_retire_rolls_the_next_batch_back_and_both_apply_later_in_order() {
    let (app, world, post) = one_shard_of_batches_of_two().await;
    // Batch 1: alice likes, bob likes. Batch 2: alice unlikes, instructor likes.
    toggle(&app, world.alice, Target::Post(post), true).await;
    toggle(&app, world.bob, Target::Post(post), true).await;
    toggle(&app, world.alice, Target::Post(post), false).await;
    toggle(&app, world.instructor, Target::Post(post), true).await;
    let worker = app.worker().await;

    let retire = worker.hooks().before_retire.hold().await;
    worker.process_pipelined(0).await.expect("first batch");
    assert_eq!(rows_and_counter(&app, Target::Post(post)).await, (2, 2));
    // Batch 1's retire fails, as a Redis error would make it.
    worker.hooks().fail_next_retire.store(true, std::sync::atomic::Ordering::SeqCst);
    drop(retire);
    let failed = worker.process_pipelined(0).await;
    assert!(failed.is_err(), "the step after a failed retire fails");
    assert_eq!(rows_and_counter(&app, Target::Post(post)).await, (2, 2), "batch 2 rolled back");

    assert_eq!(unapplied(&app).await, 4, "nothing was acknowledged");
    // Every entry is read again, oldest first (batch 1 replays and changes nothing), and the
    // end state is each user's last action.
    common::likes::drain_all(&app, &worker).await;
    assert_eq!(rows_and_counter(&app, Target::Post(post)).await, (2, 2), "bob and the instructor");
    assert!(!common::likes::has_row(&app, world.alice, Target::Post(post)).await, "alice's unlike is her last action");
}

/// A retire takes out of the stream exactly the entries it acknowledged (the script trims
/// below the oldest pending or unread entry): the entries after the batch stay, read next.
#[tokio::test]
async fn a_retire_leaves_the_entries_after_its_batch_in_the_stream() {
    let (app, world, post, carol) = four_likes_in_two_batches().await;
    let worker = app.worker().await;
    let users_in_stream = || async {
        let mut conn = app.state.redis.clone();
        let reply: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
            .arg(app.state.keys.like_stream(0))
            .arg("-")
            .arg("+")
            .query_async(&mut conn)
            .await
            .expect("xrange");
        reply
            .ids
            .iter()
            .map(|entry| {
                let fields: Vec<(String, String)> = entry
                    .map
                    .iter()
                    .map(|(name, value)| {
                        (name.clone(), redis::FromRedisValue::from_redis_value(value.clone()).expect("text"))
                    })
                    .collect();
                LikeEvent::decode(fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes()))).expect("an event").user_id
            })
            .collect::<Vec<i64>>()
    };

    let first = worker.process_one_batch(0).await.expect("first batch");
    assert_eq!((first.read, first.acked), (2, 2));
    assert_eq!(users_in_stream().await, [world.instructor, carol], "only the unread entries are left");
    let second = worker.process_one_batch(0).await.expect("second batch");
    assert_eq!((second.read, second.acked), (2, 2));
    assert_eq!(users_in_stream().await, Vec::<i64>::new());
    assert_eq!(rows_and_counter(&app, Target::Post(post)).await, (4, 4));
}

/// The retire trims the stream below a batch only when the group had delivered every entry it
/// names: when it acknowledges fewer (a retire sent again, or a group made anew that never
/// delivered some of them), it deletes the named entries alone, and an entry the group never
/// delivered, older than the batch, stays to be applied.
#[tokio::test]
async fn a_retire_that_acknowledges_fewer_than_it_names_deletes_only_those() {
    let app = TestApp::spawn().await;
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let (stream, generations) = (format!("test:{{retire-{tag}}}:stream"), format!("test:{{retire-{tag}}}:gens"));
    let mut conn = app.state.redis.clone();
    let mut ids = Vec::new();
    for n in 0..4 {
        let id: String =
            redis::cmd("XADD").arg(&stream).arg("*").arg("n").arg(n).query_async(&mut conn).await.expect("XADD");
        ids.push(id);
    }
    // A group made after the first two entries: it never delivers them.
    let _: String = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&stream)
        .arg("g")
        .arg(&ids[1])
        .query_async(&mut conn)
        .await
        .expect("XGROUP");
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("g")
        .arg("c")
        .arg("COUNT")
        .arg(1)
        .arg("STREAMS")
        .arg(&stream)
        .arg(">")
        .query_async(&mut conn)
        .await
        .expect("XREADGROUP");
    // Retire the delivered third entry and the undelivered fourth: one of the two is acknowledged.
    let (ms, seq) = ids[3].split_once('-').expect("stream id");
    let after = format!("{ms}-{}", seq.parse::<u64>().expect("sequence") + 1);
    let removed: i64 = course_forum::testing::worker::retire_script()
        .key(&stream)
        .key(&generations)
        .arg("g")
        .arg(2)
        .arg(0)
        .arg(&ids[2])
        .arg(&ids[3])
        .arg("0")
        .arg(&ids[3])
        .arg(&after)
        .invoke_async(&mut conn)
        .await
        .expect("retire");
    assert_eq!(removed, 0, "no pending record was named");
    let left: Vec<(String, Vec<(String, String)>)> =
        redis::cmd("XRANGE").arg(&stream).arg("-").arg("+").query_async(&mut conn).await.expect("XRANGE");
    let left: Vec<String> = left.into_iter().map(|(id, _)| id).collect();
    assert_eq!(left, ids[..2].to_vec(), "the two named entries went, and only they");
    let _: i64 = redis::cmd("DEL").arg(&stream).arg(&generations).query_async(&mut conn).await.expect("DEL");
}
