//! The post cache does not stampede: a thousand reads of a hot post that just expired cost one
//! database load (logical expiration: the stale value is served and nobody waits for the reload;
//! a cold key: one lock holder loads, the others wait briefly), a thousand reads of an id that
//! does not exist cost one query, TTLs are spread by jitter, every write path reaches the cached
//! post before its mutation answers, a load that read the row before a write never stores it,
//! and counters changed behind the cache's back are no staler than POST_CACHE_TTL + jitter.
//!
//! Every app here runs without the posts each instance keeps in memory in front of the post
//! cache (`COURSE_PAGE_CACHE_TTL=0s`, see `cache::pages` and tests/it/course_pages.rs): these tests
//! are about the shared Redis layer.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use course_forum::testing::config::LikeMode;
use serde_json::{Value as Json, json};
use tokio::sync::Barrier;

use crate::common::{TestApp, World, error_code, gid};

const READ: &str = "query($id: ID!) { post(id: $id) { title likeCount commentCount viewCount } }";

/// The test settings' freshness window: POST_CACHE_TTL and POST_CACHE_TTL_JITTER.
const TTL: Duration = Duration::from_secs(30);
const JITTER: Duration = Duration::from_secs(10);

/// No posts kept in the instance's memory: every read goes to the post cache.
fn redis_layer_only(s: &mut course_forum::testing::config::Settings) {
    s.course_page_cache_ttl = Duration::ZERO;
}

async fn read(app: &TestApp, token: &str, post: i64) -> Json {
    app.gql_ok(Some(token), READ, json!({ "id": gid("Post", post) })).await["post"].clone()
}

/// `n` reads of one post released together, each its own request; returns the responses.
async fn concurrent_reads(app: &Arc<TestApp>, token: &str, post: i64, n: usize) -> Vec<Json> {
    let barrier = Arc::new(Barrier::new(n));
    let readers: Vec<_> = (0..n)
        .map(|_| {
            let (app, barrier, token) = (app.clone(), barrier.clone(), token.to_owned());
            tokio::spawn(async move {
                barrier.wait().await;
                app.gql(Some(&token), READ, json!({ "id": gid("Post", post) })).await
            })
        })
        .collect();
    let mut responses = Vec::with_capacity(n);
    for reader in readers {
        responses.push(reader.await.expect("reader"));
    }
    responses
}

/// Changes a post in PostgreSQL without any write path telling the cache.
async fn change_behind_the_caches_back(app: &TestApp, post: i64, set: &str) {
    app.scalar_i64(
        &format!("WITH c AS (UPDATE posts SET {set} WHERE id = $1 RETURNING 1) SELECT count(*) AS v FROM c"),
        [post.into()],
    )
    .await;
}

/// Reads until `done` holds for the post (a background reload is finishing), for at most 10 s.
async fn read_until(app: &TestApp, token: &str, post: i64, done: impl Fn(&Json) -> bool) -> Json {
    let started = Instant::now();
    loop {
        let post = read(app, token, post).await;
        if done(&post) {
            return post;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "the cached post never changed: {post}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn loads(app: &TestApp) -> u64 {
    app.state.post_cache.stats().loads()
}

async fn delete_entry(app: &TestApp, post: i64) {
    let _: i64 = redis::cmd("DEL")
        .arg(app.state.keys.post_cache_entry(post))
        .query_async(&mut app.state.redis.clone())
        .await
        .expect("DEL");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_reads_of_a_hot_post_just_expired_cost_one_load_and_none_waits_for_it() {
    let app = Arc::new(TestApp::spawn_with(redis_layer_only).await);
    let world = World::create(&app).await;
    let token = app.token(world.alice);
    let post = app.create_post(&token, world.course, "cached title").await;
    assert_eq!(read(&app, &token, post).await["title"], "cached title");
    change_behind_the_caches_back(&app, post, "title = 'reloaded title'").await;
    // The entry's freshness runs out: the cache's clock moves past POST_CACHE_TTL + jitter.
    app.state.post_cache.hooks().advance_clock(TTL + JITTER + Duration::from_secs(1));

    let before = loads(&app);
    // The reload may read PostgreSQL but cannot store until the gate opens.
    let gate = app.state.post_cache.hooks().stores.hold().await;
    let responses = concurrent_reads(&app, &token, post, 1000).await;
    for response in &responses {
        assert!(response.get("errors").is_none(), "{response}");
        assert_eq!(response["data"]["post"]["title"], "cached title", "the stale value, at once");
    }
    assert!(loads(&app) - before <= 1, "at most the one reload while the readers were served");
    drop(gate);

    read_until(&app, &token, post, |p| p["title"] == "reloaded title").await;
    assert_eq!(loads(&app) - before, 1, "exactly one database load for the whole burst");
    assert_eq!(app.state.post_cache.hooks().stores.reached(), 2, "the first load and the one reload");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_reads_of_a_hot_post_gone_cold_cost_one_load() {
    let app = Arc::new(TestApp::spawn_with(redis_layer_only).await);
    let world = World::create(&app).await;
    let token = app.token(world.alice);
    let post = app.create_post(&token, world.course, "cached title").await;
    read(&app, &token, post).await;
    change_behind_the_caches_back(&app, post, "title = 'reloaded title'").await;
    // Physically expired (or evicted): nothing to serve stale.
    delete_entry(&app, post).await;

    let before = loads(&app);
    let responses = concurrent_reads(&app, &token, post, 1000).await;
    for response in &responses {
        assert!(response.get("errors").is_none(), "{response}");
        assert_eq!(response["data"]["post"]["title"], "reloaded title");
    }
    assert_eq!(loads(&app) - before, 1, "one lock holder loaded; the others waited and read its result");
    assert_eq!(app.state.post_cache.stats().bypasses.load(std::sync::atomic::Ordering::Relaxed), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_reads_of_an_id_that_does_not_exist_cost_at_most_one_query() {
    let app = Arc::new(TestApp::spawn_with(redis_layer_only).await);
    let world = World::create(&app).await;
    let token = app.token(world.alice);
    let before = loads(&app);
    for response in concurrent_reads(&app, &token, 987_654_321, 1000).await {
        assert_eq!(error_code(&response).as_deref(), Some("NOT_FOUND"), "{response}");
    }
    assert!(loads(&app) - before <= 1, "{} loads", loads(&app) - before);

    // The next id is asked for before it exists, then created: it is found at once.
    let first = app.create_post(&token, world.course, "first").await;
    let probe = app.gql(Some(&token), READ, json!({ "id": gid("Post", first + 1) })).await;
    assert_eq!(error_code(&probe).as_deref(), Some("NOT_FOUND"));
    let second = app.create_post(&token, world.course, "second").await;
    assert_eq!(second, first + 1, "identity ids are consecutive here");
    assert_eq!(read(&app, &token, second).await["title"], "second");
}

#[tokio::test]
async fn every_write_path_reaches_the_cached_post_before_it_answers() {
    let app = TestApp::spawn_with(redis_layer_only).await; // like_mode: sync
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let bob = app.token(world.bob);
    let post = app.create_post(&alice, world.course, "before").await;
    let id = gid("Post", post);
    read(&app, &alice, post).await;

    app.gql_ok(Some(&alice), "mutation($p: ID!) { editPost(postId: $p, title: \"after\") { id } }", json!({ "p": id }))
        .await;
    assert_eq!(read(&app, &bob, post).await["title"], "after");

    let comment = app
        .gql_ok(Some(&bob), "mutation($p: ID!) { createComment(postId: $p, body: \"c\") { id } }", json!({ "p": id }))
        .await["createComment"]["id"]
        .clone();
    assert_eq!(read(&app, &alice, post).await["commentCount"], 1);
    let reply = app
        .gql_ok(
            Some(&alice),
            "mutation($c: ID!) { createReply(commentId: $c, body: \"r\") { id } }",
            json!({ "c": comment }),
        )
        .await["createReply"]["id"]
        .clone();
    assert_eq!(read(&app, &bob, post).await["commentCount"], 2);
    app.gql_ok(Some(&alice), "mutation($c: ID!) { deleteComment(commentId: $c) { deletedId } }", json!({ "c": reply }))
        .await;
    assert_eq!(read(&app, &bob, post).await["commentCount"], 1);

    // Counters are patched into the entry: no reload needed.
    let before = loads(&app);
    app.gql_ok(Some(&bob), "mutation($p: ID!) { likePost(postId: $p) { id } }", json!({ "p": id })).await;
    assert_eq!(read(&app, &alice, post).await["likeCount"], 1);
    let ip: std::net::IpAddr = "203.0.113.7".parse().expect("ip");
    let started = app.state.views.start_backdated(world.bob, post, ip, Duration::from_secs(60)).await.expect("start");
    app.state.views.complete(world.bob, &started.ticket, ip).await.expect("complete");
    let flushed = app.view_aggregator().flush_views_once().await.expect("flush");
    assert_eq!(flushed.views_applied, 1);
    assert_eq!(read(&app, &alice, post).await["viewCount"], 1, "the flushed count, patched into the entry");
    assert_eq!(loads(&app), before, "likes and views were patched in, not reloaded");

    app.gql_ok(Some(&alice), "mutation($p: ID!) { deletePost(postId: $p) { deletedId } }", json!({ "p": id })).await;
    let gone = app.gql(Some(&bob), READ, json!({ "id": id })).await;
    assert_eq!(error_code(&gone).as_deref(), Some("NOT_FOUND"), "{gone}");
    assert_eq!(loads(&app), before, "the delete left a missing marker: NOT_FOUND without a load");
}

#[tokio::test]
async fn buffered_and_recount_likes_reach_the_cached_post_when_they_commit() {
    for mode in [LikeMode::Buffered, LikeMode::Recount] {
        let app = TestApp::spawn_with(|s| {
            redis_layer_only(s);
            s.like_mode = mode;
        })
        .await;
        let world = World::create(&app).await;
        let alice = app.token(world.alice);
        let post = app.create_post(&alice, world.course, "liked").await;
        read(&app, &alice, post).await;
        app.gql_ok(
            Some(&alice),
            "mutation($p: ID!) { likePost(postId: $p) { id } }",
            json!({ "p": gid("Post", post) }),
        )
        .await;
        assert_eq!(read(&app, &alice, post).await["likeCount"], 0, "{mode:?}: not committed yet");
        let before = loads(&app);
        let worker = app.worker().await;
        match mode {
            LikeMode::Buffered => assert_eq!(worker.drain().await.expect("drain"), 1),
            _ => assert_eq!(worker.recount_once().await.expect("recount"), 1),
        }
        assert_eq!(read(&app, &alice, post).await["likeCount"], 1, "{mode:?}: committed, and in the cache at once");
        assert_eq!(loads(&app), before, "{mode:?}: patched in, not reloaded");
    }
}

#[tokio::test]
async fn counters_changed_behind_the_caches_back_are_no_staler_than_ttl_plus_jitter() {
    let app = TestApp::spawn_with(redis_layer_only).await;
    let world = World::create(&app).await;
    let token = app.token(world.alice);
    let post = app.create_post(&token, world.course, "counted").await;
    read(&app, &token, post).await;
    change_behind_the_caches_back(&app, post, "like_count = 42, comment_count = 7").await;
    let hooks = app.state.post_cache.hooks();

    // Within POST_CACHE_TTL the cached counts are shown (the cache is really in use) …
    hooks.advance_clock(TTL - Duration::from_secs(1));
    let cached = read(&app, &token, post).await;
    assert_eq!((cached["likeCount"].as_i64(), cached["commentCount"].as_i64()), (Some(0), Some(0)));
    // … and once POST_CACHE_TTL + jitter have passed, the next read reloads it (served stale
    // itself, in the background), and the reads after it show the database's values.
    let before = loads(&app);
    hooks.advance_clock(JITTER + Duration::from_secs(2));
    let fresh = read_until(&app, &token, post, |p| p["likeCount"] == 42).await;
    assert_eq!(fresh["commentCount"], 7);
    assert_eq!(loads(&app) - before, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_that_read_the_post_before_a_write_does_not_store_it() {
    let app = Arc::new(TestApp::spawn_with(redis_layer_only).await);
    let world = World::create(&app).await;
    let token = app.token(world.alice);
    let post = app.create_post(&token, world.course, "old title").await;
    let cache = &app.state.post_cache;

    // A cold read loads the old row and parks before storing it …
    let gate = cache.hooks().stores.hold().await;
    let parked = cache.hooks().stores.reached();
    let reader = {
        let (app, token) = (app.clone(), token.clone());
        tokio::spawn(async move { read(&app, &token, post).await })
    };
    while cache.hooks().stores.reached() == parked {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // … an edit commits meanwhile and invalidates, as editPost does …
    change_behind_the_caches_back(&app, post, "title = 'new title'").await;
    cache.invalidate(post).await;
    let refused = cache.stats().stores_refused.load(std::sync::atomic::Ordering::Relaxed);
    drop(gate);
    // … the parked reader answers what it read, but does not put the old row into the cache.
    assert_eq!(reader.await.expect("reader")["title"], "old title");
    assert_eq!(cache.stats().stores_refused.load(std::sync::atomic::Ordering::Relaxed), refused + 1);
    assert_eq!(read(&app, &token, post).await["title"], "new title");
}

#[tokio::test]
async fn entries_loaded_together_expire_apart() {
    let app = TestApp::spawn_with(redis_layer_only).await;
    let world = World::create(&app).await;
    let token = app.token(world.alice);
    let mut ids = Vec::new();
    for n in 0..40 {
        ids.push(app.create_post(&token, world.course, &format!("post {n}")).await);
    }
    let now_ms =
        || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_millis() as i64;
    let loaded_at = now_ms();
    assert_eq!(app.state.post_cache.get_many(&ids).await.expect("load").len(), 40);
    let done_at = now_ms();
    let mut fresh_until = Vec::new();
    for id in &ids {
        let fresh: i64 = redis::cmd("HGET")
            .arg(app.state.keys.post_cache_entry(*id))
            .arg("fresh")
            .query_async(&mut app.state.redis.clone())
            .await
            .expect("HGET fresh");
        assert!(fresh >= loaded_at + TTL.as_millis() as i64, "fresh for at least POST_CACHE_TTL");
        assert!(fresh <= done_at + (TTL + JITTER).as_millis() as i64, "and at most TTL + jitter");
        fresh_until.push(fresh);
    }
    let distinct: HashSet<i64> = fresh_until.iter().copied().collect();
    assert!(distinct.len() > 30, "expiries spread: {} distinct of 40", distinct.len());
    let spread = fresh_until.iter().max().expect("max") - fresh_until.iter().min().expect("min");
    assert!(spread > 2_000, "spread over the jitter window: {spread} ms");
}

#[tokio::test]
async fn metrics_show_cache_and_feed_activity() {
    // It reads /metrics, which counts for the whole process.
    if crate::common::ran_alone_elsewhere().await {
        return;
    }
    let app = TestApp::spawn_with(redis_layer_only).await;
    let world = World::create(&app).await;
    let token = app.token(world.alice);
    let post = app.create_post(&token, world.course, "measured").await;
    read(&app, &token, post).await;
    read(&app, &token, post).await;
    app.feed_fanout().await.process_one_batch().await.expect("fan-out");
    app.gql_ok(Some(&token), "{ homeFeed { edges { node { id } } } }", json!({})).await;
    let text = app.http.get(app.url("/metrics")).send().await.expect("GET /metrics").text().await.expect("text");
    for metric in [
        "cache_requests_total{cache=\"post\",result=\"miss\"}",
        "cache_requests_total{cache=\"post\",result=\"hit\"}",
        "cache_loads_total{cache=\"post\"}",
        "feed_fanout_posts_total{path=\"timelines\"}",
        "feed_timeline_rebuilds_total",
    ] {
        assert!(text.contains(metric), "{metric} missing from\n{text}");
    }
}

/// Issue 27: a post read by someone outside its course was loaded into the cache before the
/// access check refused them, so anyone signed in could fill Redis with every course's posts.
/// Now a load stores the post only for a reader the access check admits; a member's read
/// stores it as before.
#[tokio::test]
async fn a_non_members_read_does_not_put_the_post_in_the_cache() {
    let app = TestApp::spawn_with(redis_layer_only).await;
    let world = World::create(&app).await;
    let post = app.create_post(&app.token(world.alice), world.course, "members only").await;
    let cached = async || -> i64 {
        redis::cmd("EXISTS")
            .arg(app.state.keys.post_cache_entry(post))
            .query_async(&mut app.state.redis.clone())
            .await
            .expect("EXISTS")
    };
    assert_eq!(cached().await, 0, "not cached before anyone reads it");

    for _ in 0..3 {
        let refused = app.gql(Some(&app.token(world.outsider)), READ, json!({ "id": gid("Post", post) })).await;
        assert_eq!(error_code(&refused).as_deref(), Some("FORBIDDEN"), "{refused}");
    }
    assert_eq!(cached().await, 0, "an outsider's reads stored the post");

    assert_eq!(read(&app, &app.token(world.bob), post).await["title"], "members only");
    assert_eq!(cached().await, 1, "a member's read stores it");
}
