//! What operators see: `/readyz` (services and worker leases), `/metrics` (each metric of the
//! catalog moving when its event happens, labels bounded, every metric documented in docs/operations.md),
//! and `course-forum check` (passes on a healthy system, fails with a readable report naming
//! each broken invariant, passes again after the documented repairs).

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use course_forum::testing::config::LikeMode;
use serde_json::{Value, json};

use crate::common::ws::GqlSocket;
use crate::common::{self, TestApp, World, gid};

// ---------------------------------------------------------------------------------------------
// /readyz
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn readyz_reports_both_services_and_the_workers_leases() {
    let app = TestApp::spawn_with(|s| {
        s.like_mode = LikeMode::Buffered;
        s.worker_in_serve = true;
    })
    .await;
    // The worker takes every shard's lease within its first round.
    let deadline = Instant::now() + Duration::from_secs(10);
    let report = loop {
        let response = app.http.get(app.url("/readyz")).send().await.expect("GET /readyz");
        assert_eq!(response.status(), 200);
        let report: Value = response.json().await.expect("json");
        let shards = report["worker"]["shards"].as_array().cloned().unwrap_or_default();
        if shards.len() == 4 && shards.iter().all(|s| s["ours"] == true) {
            break report;
        }
        assert!(Instant::now() < deadline, "the worker did not hold every lease: {report}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(report["ready"], true);
    assert_eq!(report["postgres"]["ok"], true);
    assert_eq!(report["redis"]["ok"], true);
    assert_eq!(report["worker"]["mode"], "buffered");
    assert_eq!(report["worker"]["in_process"], true);
    assert_eq!(report["membership_listener"], true, "{report}");
    let consumer = report["worker"]["consumer"].as_str().expect("consumer name");
    for shard in report["worker"]["shards"].as_array().expect("shards") {
        assert_eq!(shard["holder"], consumer, "{report}");
        assert!(shard["ttl_ms"].as_i64().is_some_and(|ttl| ttl > 0), "{report}");
    }

    // A process without a worker is ready too, and says that nobody of its own holds a lease.
    let peer = app.spawn_peer(|s| s.like_mode = LikeMode::Buffered).await;
    let report: Value =
        app.http.get(format!("http://{}/readyz", peer.addr)).send().await.expect("peer").json().await.expect("json");
    assert_eq!(report["ready"], true);
    assert_eq!(report["worker"]["in_process"], false);
    assert!(report["worker"]["shards"].as_array().expect("shards").iter().all(|s| s["ours"] == false), "{report}");
}

// ---------------------------------------------------------------------------------------------
// /metrics
// ---------------------------------------------------------------------------------------------

/// One sample of the Prometheus text format: name, labels, value.
type Sample = (String, BTreeMap<String, String>, f64);

fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("not a sample: {line}"));
            let value: f64 = value.parse().unwrap_or_else(|_| panic!("not a number: {line}"));
            let (name, labels) = match series.split_once('{') {
                None => (series.to_owned(), BTreeMap::new()),
                Some((name, rest)) => {
                    let labels = rest
                        .trim_end_matches('}')
                        .split("\",")
                        .filter(|pair| !pair.is_empty())
                        .map(|pair| {
                            let (key, value) = pair.split_once('=').unwrap_or_else(|| panic!("bad label: {line}"));
                            (key.to_owned(), value.trim_matches('"').to_owned())
                        })
                        .collect();
                    (name.to_owned(), labels)
                }
            };
            (name, labels, value)
        })
        .collect()
}

struct Scrape(Vec<Sample>);

impl Scrape {
    async fn take(app: &TestApp) -> Scrape {
        let response = app.http.get(app.url("/metrics")).send().await.expect("GET /metrics");
        assert_eq!(response.status(), 200);
        assert!(
            response.headers()["content-type"].to_str().is_ok_and(|t| t.starts_with("text/plain")),
            "Prometheus text"
        );
        Scrape(parse(&response.text().await.expect("text")))
    }

    /// The sum of every sample of `name` whose labels include `labels`.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.0
            .iter()
            .filter(|(n, l, _)| n == name && labels.iter().all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v)))
            .map(|(_, _, v)| v)
            .sum()
    }
}

/// How much `name{labels}` grew between two scrapes.
fn grew(before: &Scrape, after: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    after.value(name, labels) - before.value(name, labels)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_moves_when_its_event_happens() {
    // It reads /metrics, which counts for the whole process.
    if crate::common::ran_alone_elsewhere().await {
        return;
    }
    // A long coalescing interval makes "superseded before delivery" deterministic.
    let app = TestApp::spawn_with(|s| {
        s.like_mode = LikeMode::Buffered;
        s.live_coalesce = Duration::from_secs(2);
    })
    .await;
    let world = World::create(&app).await;
    let post = app.create_post_as(world.bob, world.course, "measured").await;
    let worker = app.worker().await;
    let alice = app.token(world.alice);
    let post_query = "query($p: ID!) { post(id: $p) { title } }";
    let vars = json!({ "p": gid("Post", post) });
    let before = Scrape::take(&app).await;

    // Requests and errors per operation, labelled by root field, never by the client's name.
    app.gql_ok(Some(&alice), post_query, vars.clone()).await;
    app.gql_ok(Some(&alice), "query ClientChosenName { me { id } }", json!({})).await;
    app.gql_ok(Some(&alice), "{ me { id } myCourses { id } }", json!({})).await;
    let refused = app.gql(Some(&app.token(world.outsider)), post_query, vars.clone()).await;
    assert_eq!(common::error_code(&refused).as_deref(), Some("FORBIDDEN"));
    app.gql(Some(&alice), "{ noSuchField }", json!({})).await;
    app.gql(Some("not-a-token"), post_query, vars.clone()).await;
    let after = Scrape::take(&app).await;
    let requests = "graphql_requests_total";
    assert_eq!(grew(&before, &after, requests, &[("operation", "post")]), 2.0);
    assert_eq!(grew(&before, &after, requests, &[("operation", "me")]), 1.0);
    assert_eq!(grew(&before, &after, requests, &[("operation", "multiple")]), 1.0);
    assert_eq!(grew(&before, &after, requests, &[("operation", "invalid")]), 1.0);
    assert_eq!(grew(&before, &after, requests, &[("operation", "unparsed")]), 1.0);
    let errors = "graphql_errors_total";
    assert_eq!(grew(&before, &after, errors, &[("operation", "post"), ("code", "FORBIDDEN")]), 1.0);
    assert_eq!(grew(&before, &after, errors, &[("operation", "invalid"), ("code", "BAD_USER_INPUT")]), 1.0);
    assert_eq!(grew(&before, &after, errors, &[("operation", "unparsed"), ("code", "UNAUTHENTICATED")]), 1.0);
    assert_eq!(grew(&before, &after, "graphql_request_duration_seconds_count", &[("operation", "post")]), 2.0);
    assert!(after.0.iter().all(|(_, labels, _)| !labels.values().any(|v| v.contains("ClientChosenName"))));

    // Like toggles by result, and the liked-set cache: a miss warms it, then hits.
    let like = "mutation($p: ID!) { likePost(postId: $p) { likeCount } }";
    app.gql_ok(Some(&alice), like, vars.clone()).await;
    app.gql_ok(Some(&alice), like, vars.clone()).await;
    let queued = Scrape::take(&app).await;
    let toggles = "like_toggles_total";
    assert_eq!(grew(&after, &queued, toggles, &[("mode", "buffered"), ("result", "changed")]), 1.0);
    assert_eq!(grew(&after, &queued, toggles, &[("mode", "buffered"), ("result", "unchanged")]), 1.0);
    let cache = "cache_requests_total";
    assert_eq!(grew(&after, &queued, cache, &[("cache", "liked_set"), ("result", "miss")]), 1.0);
    assert_eq!(grew(&after, &queued, cache, &[("cache", "liked_set"), ("result", "hit")]), 1.0);
    // The stream gauges, read from Redis at scrape time: one unapplied like on alice's shard.
    let shard = app.state.keys.shard_of(world.alice).to_string();
    assert_eq!(queued.value("like_stream_entries", &[("shard", &shard)]), 1.0);
    assert_eq!(queued.value("like_stream_lag_entries", &[("shard", &shard)]), 1.0);
    assert_eq!(queued.value("like_stream_entries", &[]), 1.0, "one like in all shards");

    // The worker: a committed batch of one, applied; then a poison entry dead-lettered.
    assert_eq!(worker.drain().await.expect("drain"), 1);
    let mut conn = app.state.redis.clone();
    let _: String = redis::cmd("XADD")
        .arg(app.state.keys.like_stream(0))
        .arg("*")
        .arg("garbage")
        .arg("1")
        .query_async(&mut conn)
        .await
        .expect("xadd");
    worker.drain().await.expect("drain");
    let applied = Scrape::take(&app).await;
    assert_eq!(grew(&queued, &applied, "like_batches_total", &[("result", "committed")]), 2.0);
    assert_eq!(grew(&queued, &applied, "like_events_applied_total", &[]), 2.0, "the like and the dead letter");
    assert_eq!(grew(&queued, &applied, "like_batch_entries_count", &[]), 2.0);
    assert_eq!(grew(&queued, &applied, "like_batch_duration_seconds_count", &[]), 2.0);
    assert_eq!(grew(&queued, &applied, "like_dead_letters_total", &[]), 1.0);
    assert_eq!(applied.value("like_dead_letter_entries", &[]), 1.0);
    assert_eq!(applied.value("like_stream_entries", &[]), 0.0, "everything applied");
    assert_eq!(applied.value("like_stream_pending_entries", &[]), 0.0);

    // Live: a subscriber, three committed counts within one coalescing interval: the first is
    // delivered at once, the second superseded by the third.
    let mut socket = GqlSocket::connect(app.addr, Some(&alice)).await.expect("connect");
    socket
        .subscribe(
            "1",
            "subscription($ids: [ID!]!) { likeCounts(ids: $ids) { likeCount } }",
            json!({ "ids": [gid("Post", post)] }),
        )
        .await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while Scrape::take(&app).await.value("live_subscriptions_open", &[]) < 1.0 {
        assert!(Instant::now() < deadline, "the subscription never opened");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let subscribed = Scrape::take(&app).await;
    assert_eq!(subscribed.value("websocket_connections_open", &[]), 1.0);
    for handle in ["fan1", "fan2", "fan3"] {
        let user = app.create_user(handle).await;
        app.enroll(world.course, user, "student").await;
        app.gql_ok(Some(&app.token(user)), like, vars.clone()).await;
        worker.drain().await.expect("drain");
    }
    let first = socket.next_data(Duration::from_secs(5)).await.expect("first update");
    let last = socket.next_data(Duration::from_secs(5)).await.expect("last update");
    assert_eq!(
        (first["likeCounts"]["likeCount"].as_i64(), last["likeCounts"]["likeCount"].as_i64()),
        (Some(2), Some(4))
    );
    let live = Scrape::take(&app).await;
    assert_eq!(grew(&subscribed, &live, "live_messages_published_total", &[("kind", "counts")]), 3.0);
    assert_eq!(grew(&subscribed, &live, "live_messages_received_total", &[]), 3.0);
    assert_eq!(grew(&subscribed, &live, "live_updates_delivered_total", &[]), 2.0);
    assert_eq!(grew(&subscribed, &live, "live_updates_coalesced_total", &[]), 1.0);
    socket.close().await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while Scrape::take(&app).await.value("websocket_connections_open", &[]) != 0.0 {
        assert!(Instant::now() < deadline, "the closed connection is still counted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(Scrape::take(&app).await.value("live_subscriptions_open", &[]), 0.0);

    // A view flush.
    app.view_aggregator().flush_views_once().await.expect("flush");
    let flushed = Scrape::take(&app).await;
    assert_eq!(grew(&live, &flushed, "view_flushes_total", &[("result", "ok")]), 1.0);
    assert_eq!(grew(&live, &flushed, "view_flush_duration_seconds_count", &[]), 1.0);
    assert!(flushed.value("redis_used_memory_bytes", &[]) > 0.0);
    assert!(flushed.0.iter().any(|(name, _, _)| name == "redis_evicted_keys_total"));

    // Every exported metric is in the catalog, and the catalog is in docs/operations.md.
    let catalog: Vec<&str> = course_forum::testing::telemetry::CATALOG.iter().map(|(name, ..)| *name).collect();
    for (name, labels, _) in &flushed.0 {
        let base = ["_bucket", "_count", "_sum"].iter().find_map(|s| name.strip_suffix(s)).unwrap_or(name);
        assert!(catalog.contains(&base) || catalog.contains(&name.as_str()), "{name} is not in the catalog");
        // Labels stay low-cardinality: no id of anything.
        for value in labels.values() {
            assert!(value.len() < 40, "{name}: label value {value}");
        }
    }
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"))
        .expect("docs/operations.md");
    for name in catalog {
        assert!(readme.contains(&format!("`{name}`")), "docs/operations.md's metric catalog lacks `{name}`");
    }
}

// ---------------------------------------------------------------------------------------------
// course-forum check
// ---------------------------------------------------------------------------------------------

fn check(app: &TestApp, extra: &[&str]) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_course-forum"))
        .arg("check")
        .args(extra)
        .env("DATABASE_URL", common::database_url(&app.database))
        .env("REDIS_URL", common::redis_url())
        .env("REDIS_KEY_PREFIX", &app.redis_prefix)
        .env("LIKE_STREAM_SHARDS", app.state.keys.shards().to_string())
        .env("RUST_LOG", "error")
        .output()
        .expect("run course-forum check");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    (output.status.success(), format!("{stdout}{stderr}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_passes_when_healthy_names_every_broken_invariant_and_passes_after_the_repairs() {
    let app = TestApp::spawn_with(|s| s.like_mode = LikeMode::Buffered).await;
    let world = World::create(&app).await;
    let post = app.create_post_as(world.bob, world.course, "measured").await;
    let worker = app.worker().await;
    let data = app
        .gql_ok(
            Some(&app.token(world.alice)),
            "mutation($p: ID!) { likePost(postId: $p) { id } c: createComment(postId: $p, body: \"hi\") { id } }",
            json!({ "p": gid("Post", post) }),
        )
        .await;
    let comment = data["c"]["id"].as_str().expect("comment").to_owned();
    app.gql_ok(
        Some(&app.token(world.bob)),
        "mutation($c: ID!) { createReply(commentId: $c, body: \"re\") { id } likeComment(commentId: $c) { id } }",
        json!({ "c": comment }),
    )
    .await;
    worker.drain().await.expect("drain");

    let (ok, report) = check(&app, &[]);
    assert!(ok, "a healthy system passes:\n{report}");
    for line in ["ok    post like counters", "ok    comment like counters", "ok    post comment counters"] {
        assert!(report.contains(line), "{line}:\n{report}");
    }
    assert!(report.contains("ok    comment reply counters") && report.contains("ok    dead letters: none waiting"));
    assert!(report.contains("check: all 7 checks passed"), "{report}");

    // Break three invariants: a counter, a dead letter, and a like the worker has left for
    // two minutes (by the instructor, whose shard has seen no like yet: an old id is accepted).
    app.scalar_i64(
        "WITH bumped AS (UPDATE posts SET like_count = like_count + 3 WHERE id = $1 RETURNING 1) \
         SELECT count(*) AS v FROM bumped",
        [post.into()],
    )
    .await;
    let mut conn = app.state.redis.clone();
    let _: String = redis::cmd("XADD")
        .arg(app.state.keys.dead_letters())
        .arg("*")
        .arg("error")
        .arg("a test's poison")
        .query_async(&mut conn)
        .await
        .expect("xadd dead letter");
    let two_minutes_ago = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis()
        .saturating_sub(120_000);
    let shard = app.state.keys.shard_of(world.instructor);
    assert!(![world.alice, world.bob].iter().any(|u| app.state.keys.shard_of(*u) == shard));
    let _: String = redis::cmd("XADD")
        .arg(app.state.keys.like_stream(shard))
        .arg(format!("{two_minutes_ago}-0"))
        .arg("op")
        .arg("like")
        .arg("t")
        .arg(format!("p:{post}"))
        .arg("u")
        .arg(world.instructor)
        .arg("c")
        .arg(world.course)
        .query_async(&mut conn)
        .await
        .expect("xadd an old like");

    let (ok, report) = check(&app, &[]);
    assert!(!ok, "a broken system fails:\n{report}");
    assert!(
        report.contains(&format!(
            "FAIL  post like counters: 1 disagree with their like rows (id {post} counts 4 but has 1)"
        )),
        "{report}"
    );
    assert!(report.contains("ok    comment like counters"), "{report}");
    assert!(report.contains("FAIL  dead letters: 1 waiting in"), "{report}");
    assert!(
        report.contains(&format!("FAIL  like lag: over 60 s: shard {shard}: oldest unapplied like is 1")),
        "{report}"
    );
    assert!(report.contains("check: 3 of 7 checks FAILED"), "{report}");
    // The bound is the operator's: an hour of lag is within `--max-lag 1h`.
    let (_, report) = check(&app, &["--max-lag", "1h"]);
    assert!(report.contains("ok    like lag: 1 unapplied like(s)"), "{report}");

    // The documented repairs: reconcile, look at and drop the dead letter, let the worker run.
    let reconcile = Command::new(env!("CARGO_BIN_EXE_course-forum"))
        .arg("reconcile")
        .env("DATABASE_URL", common::database_url(&app.database))
        .env("RUST_LOG", "error")
        .output()
        .expect("reconcile");
    assert!(reconcile.status.success());
    assert!(String::from_utf8_lossy(&reconcile.stdout).contains(&format!("fixed post p:{post} -> like_count 1")));
    let _: i64 = redis::cmd("DEL").arg(app.state.keys.dead_letters()).query_async(&mut conn).await.expect("del");
    worker.drain().await.expect("drain");
    let (ok, report) = check(&app, &[]);
    assert!(ok, "repaired:\n{report}");
    let rows = app.scalar_i64("SELECT count(*) AS v FROM post_likes WHERE post_id = $1", [post.into()]).await;
    assert_eq!(rows, 2, "the instructor's late like was applied");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_skips_counters_awaiting_their_recount_and_nothing_else() {
    let app = TestApp::spawn_with(|s| s.like_mode = LikeMode::Recount).await;
    let world = World::create(&app).await;
    let (post, other) = (
        app.create_post_as(world.bob, world.course, "measured").await,
        app.create_post_as(world.bob, world.course, "measured").await,
    );
    // Level 2: the row now, the counter when the recount job runs (it does not, here).
    app.gql_ok(
        Some(&app.token(world.alice)),
        "mutation($p: ID!) { likePost(postId: $p) { id } }",
        json!({ "p": gid("Post", post) }),
    )
    .await;
    let counter = app.scalar_i64("SELECT like_count::bigint AS v FROM posts WHERE id = $1", [post.into()]).await;
    assert_eq!(counter, 0, "the counter waits for the recount");
    let (ok, report) = check(&app, &[]);
    assert!(ok, "{report}");
    assert!(report.contains("ok    recount: 1 target(s) await their recount and were skipped"), "{report}");
    // A counter that is wrong without a mark is still found.
    app.scalar_i64(
        "WITH bumped AS (UPDATE posts SET like_count = 5 WHERE id = $1 RETURNING 1) SELECT count(*) AS v FROM bumped",
        [other.into()],
    )
    .await;
    let (ok, report) = check(&app, &[]);
    assert!(!ok && report.contains(&format!("id {other} counts 5 but has 0")), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_running_apart_is_watched_like_a_server_and_stops_on_sigterm() {
    let app = TestApp::spawn_with(|s| s.like_mode = LikeMode::Buffered).await;
    let world = World::create(&app).await;
    let post = app.create_post_as(world.bob, world.course, "measured").await;
    let mut worker =
        common::procs::ServeProcess::spawn_worker(&app, &common::redis_url(), &[("WORKER_LEASE_TTL", "30s")]);
    worker.wait_healthy(Duration::from_secs(20)).await;
    app.gql_ok(
        Some(&app.token(world.alice)),
        "mutation($p: ID!) { likePost(postId: $p) { id } }",
        json!({ "p": gid("Post", post) }),
    )
    .await;
    let rows = "SELECT count(*) AS v FROM post_likes WHERE post_id = $1";
    let deadline = Instant::now() + Duration::from_secs(10);
    while app.scalar_i64(rows, [post.into()]).await != 1 {
        assert!(Instant::now() < deadline, "the worker process did not apply the like");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let text = app.http.get(worker.url("/metrics")).send().await.expect("metrics").text().await.expect("text");
    let scrape = Scrape(parse(&text));
    assert!(scrape.value("like_batches_total", &[("result", "committed")]) >= 1.0, "{text}");
    assert!(scrape.value("like_events_applied_total", &[]) >= 1.0, "{text}");
    let ready: Value = app.http.get(worker.url("/readyz")).send().await.expect("readyz").json().await.expect("json");
    assert_eq!(ready["ready"], true);
    assert!(ready["worker"]["shards"].as_array().expect("shards").iter().all(|s| s["ours"] == true), "{ready}");

    // SIGTERM: it stops at once and gives its leases up, so a successor need not wait 30 s.
    worker.terminate();
    let status = worker.wait_exit(Duration::from_secs(10)).await.expect("the worker exited");
    assert!(status.success(), "{status:?}\n{}", worker.logs());
    let status = course_forum::testing::ops::streams::status(&app.state.redis, &app.state.keys).await.expect("status");
    assert!(status.shards.iter().all(|s| s.lease_holder.is_none()), "leases released: {status:?}");
}

/// Every setting the process reads from the environment has a row in the configuration table
/// of docs/configuration.md, so the table cannot fall behind the code.
#[test]
fn every_setting_is_in_the_configuration_table() {
    let config = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/config.rs"));
    let readme = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/configuration.md"));
    let settings: Vec<&str> = config.split("env = \"").skip(1).filter_map(|rest| rest.split('"').next()).collect();
    assert!(settings.len() > 40, "settings found in src/config.rs: {settings:?}");
    let missing: Vec<&&str> = settings.iter().filter(|name| !readme.contains(&format!("| `{name}` |"))).collect();
    assert!(missing.is_empty(), "docs/configuration.md's table lacks {missing:?}");
}

/// Every Redis key in `src/kv/keys.rs`'s table is in the operators' key table in
/// docs/architecture.md.
#[test]
fn every_redis_key_is_in_the_documented_key_table() {
    let keys = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/kv/keys.rs"));
    let docs = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/architecture.md"));
    let patterns: Vec<&str> =
        keys.lines().filter_map(|line| line.strip_prefix("//! | `")).filter_map(|row| row.split('`').next()).collect();
    assert!(patterns.len() > 20, "keys found in src/kv/keys.rs: {patterns:?}");
    let missing: Vec<&&str> = patterns.iter().filter(|key| !docs.contains(&format!("`{key}`"))).collect();
    assert!(missing.is_empty(), "docs/architecture.md's Redis key table lacks {missing:?}");
}

/// The module map at the top of src/lib.rs names every module the crate has.
#[test]
fn the_module_map_names_every_module() {
    let lib = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/lib.rs"));
    let modules: Vec<&str> = lib
        .lines()
        .filter_map(|line| line.strip_prefix("pub mod ").or_else(|| line.strip_prefix("mod ")))
        .filter_map(|rest| rest.strip_suffix(';'))
        .collect();
    assert!(modules.len() > 15, "modules found in src/lib.rs: {modules:?}");
    let missing: Vec<&&str> = modules.iter().filter(|m| !lib.contains(&format!("//! - `{m}`"))).collect();
    assert!(missing.is_empty(), "src/lib.rs's module map lacks {missing:?}");
}
