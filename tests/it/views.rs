//! Post views (issue 8): refusals with their reasons, caps under 12,000 racing completions,
//! unique viewers, and the aggregator's exactly-once flush under crashes at each step.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use course_forum::testing::views::{ViewOutcome, ViewRefusal};
use serde_json::{Value as Json, json};

use crate::common::{TestApp, World, error_code, gid, raw_id, sample};

const START: &str = "mutation($id: ID!) { startPostView(postId: $id) { ticket minDwellMs } }";
const COMPLETE: &str = "mutation($t: String!) { completePostView(ticket: $t) { counted reason } }";
const VIEWS: &str = "query($id: ID!) { post(id: $id) { viewCount uniqueViewers } }";

async fn start(app: &TestApp, token: &str, post: &str) -> String {
    let data = app.gql_ok(Some(token), START, json!({ "id": post })).await;
    data["startPostView"]["ticket"].as_str().expect("ticket").to_owned()
}

async fn complete(app: &TestApp, token: &str, ticket: &str) -> Json {
    app.gql(Some(token), COMPLETE, json!({ "t": ticket })).await
}

/// `(counted, reason)` of a completion that must not be an error.
async fn complete_ok(app: &TestApp, token: &str, ticket: &str) -> (bool, Option<String>) {
    let response = complete(app, token, ticket).await;
    assert!(response.get("errors").is_none(), "unexpected errors: {response}");
    let result = &response["data"]["completePostView"];
    (result["counted"].as_bool().expect("counted"), result["reason"].as_str().map(str::to_owned))
}

/// `(viewCount, uniqueViewers)` as a client sees them.
async fn views_of(app: &TestApp, token: &str, post: &str) -> (i64, i64) {
    let data = app.gql_ok(Some(token), VIEWS, json!({ "id": post })).await;
    (data["post"]["viewCount"].as_i64().expect("viewCount"), data["post"]["uniqueViewers"].as_i64().expect("uniques"))
}

async fn db_view_count(app: &TestApp, post: &str) -> i64 {
    app.scalar_i64("SELECT view_count AS v FROM posts WHERE id = $1", [raw_id(post).into()]).await
}

fn refused(reason: &str) -> (bool, Option<String>) {
    (false, Some(reason.to_owned()))
}

#[tokio::test]
async fn too_short_then_counted_once_then_already_used() {
    let app = TestApp::spawn_with(|s| s.view_min_dwell = Duration::from_millis(200)).await;
    let w = World::create(&app).await;
    let alice = app.token(w.alice);
    let post = gid("Post", app.create_post(&alice, w.course, "read me").await);

    let data = app.gql_ok(Some(&alice), START, json!({ "id": post })).await;
    assert_eq!(data["startPostView"]["minDwellMs"], 200);
    let ticket = data["startPostView"]["ticket"].as_str().expect("ticket").to_owned();
    assert_eq!(complete_ok(&app, &alice, &ticket).await, refused("TOO_SHORT"));
    assert_eq!(views_of(&app, &alice, &post).await, (0, 0), "a too-short view counts nothing");

    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(complete_ok(&app, &alice, &ticket).await, (true, None), "the same ticket counts once dwelt");
    assert_eq!(complete_ok(&app, &alice, &ticket).await, refused("ALREADY_USED"));
    assert_eq!(views_of(&app, &alice, &post).await, (1, 1), "unflushed views show at once");
    assert_eq!(db_view_count(&app, &post).await, 0);

    let report = app.view_aggregator().flush_views_once().await.expect("flush");
    assert_eq!(report.views_applied, 1);
    assert_eq!(db_view_count(&app, &post).await, 1);
    assert_eq!(views_of(&app, &alice, &post).await, (1, 1), "flushed, not counted twice");
}

#[tokio::test]
async fn foreign_unknown_and_malformed_tickets_are_not_found_and_count_nothing() {
    let app = TestApp::spawn_with(|s| s.view_min_dwell = Duration::from_millis(200)).await;
    let w = World::create(&app).await;
    let (alice, bob) = (app.token(w.alice), app.token(w.bob));
    let post = gid("Post", app.create_post(&alice, w.course, "mine").await);
    let ticket = start(&app, &alice, &post).await;
    tokio::time::sleep(Duration::from_millis(250)).await;

    assert_eq!(error_code(&complete(&app, &bob, &ticket).await).as_deref(), Some("NOT_FOUND"), "bob uses alice's");
    let (post_part, _) = ticket.split_once('.').expect("ticket shape");
    let unknown = format!("{post_part}.{}", uuid::Uuid::new_v4().simple());
    for bad in [unknown.as_str(), "", "nonsense", "1.2", &format!("{ticket}x")] {
        assert_eq!(error_code(&complete(&app, &alice, bad).await).as_deref(), Some("NOT_FOUND"), "{bad:?}");
    }
    assert_eq!(views_of(&app, &alice, &post).await, (0, 0));
    assert_eq!(complete_ok(&app, &alice, &ticket).await, (true, None), "the owner's ticket still works");
    assert_eq!(error_code(&complete(&app, &bob, &ticket).await).as_deref(), Some("NOT_FOUND"));
    assert_eq!(views_of(&app, &bob, &post).await, (1, 1));

    // Starting is access-checked like every post mutation.
    let outsider = app.token(w.outsider);
    let denied = app.gql(Some(&outsider), START, json!({ "id": post })).await;
    assert_eq!(error_code(&denied).as_deref(), Some("FORBIDDEN"), "{denied}");
    let anonymous = app.gql(None, START, json!({ "id": post })).await;
    assert_eq!(error_code(&anonymous).as_deref(), Some("UNAUTHENTICATED"));
    app.gql_ok(Some(&alice), "mutation($id: ID!) { deletePost(postId: $id) { deletedId } }", json!({ "id": post }))
        .await;
    let gone = app.gql(Some(&alice), START, json!({ "id": post })).await;
    assert_eq!(error_code(&gone).as_deref(), Some("NOT_FOUND"));
}

#[tokio::test]
async fn expired_tickets_are_refused() {
    let app = TestApp::spawn_with(|s| {
        s.view_min_dwell = Duration::from_millis(50);
        s.view_ticket_ttl = Duration::from_millis(300);
    })
    .await;
    let w = World::create(&app).await;
    let alice = app.token(w.alice);
    let post = gid("Post", app.create_post(&alice, w.course, "stale").await);
    let ticket = start(&app, &alice, &post).await;
    tokio::time::sleep(Duration::from_millis(450)).await;
    assert_eq!(complete_ok(&app, &alice, &ticket).await, refused("EXPIRED"));
    assert_eq!(complete_ok(&app, &alice, &ticket).await, refused("EXPIRED"), "still expired, never counted");
    app.view_aggregator().flush_views_once().await.expect("flush");
    assert_eq!(views_of(&app, &alice, &post).await, (0, 0));
}

#[tokio::test]
async fn caps_per_user_and_per_ip_refuse_as_capped() {
    let app = TestApp::spawn_with(|s| {
        s.view_min_dwell = Duration::ZERO;
        s.view_cap_per_user = 2;
        s.view_cap_per_ip = 3;
    })
    .await;
    let w = World::create(&app).await;
    let (alice, bob, prof) = (app.token(w.alice), app.token(w.bob), app.token(w.instructor));
    let post = gid("Post", app.create_post(&alice, w.course, "popular").await);
    let other = gid("Post", app.create_post(&alice, w.course, "another").await);

    for _ in 0..2 {
        let t = start(&app, &alice, &post).await;
        assert_eq!(complete_ok(&app, &alice, &t).await, (true, None));
    }
    let t = start(&app, &alice, &post).await;
    assert_eq!(complete_ok(&app, &alice, &t).await, refused("CAPPED"), "alice's third on the post");
    assert_eq!(complete_ok(&app, &alice, &t).await, refused("ALREADY_USED"), "a capped ticket is used up");
    // Caps are per post.
    let t = start(&app, &alice, &other).await;
    assert_eq!(complete_ok(&app, &alice, &t).await, (true, None));

    // Everyone comes from 127.0.0.1: the IP's third counted view on the post is the last.
    let t = start(&app, &bob, &post).await;
    assert_eq!(complete_ok(&app, &bob, &t).await, (true, None));
    let t = start(&app, &prof, &post).await;
    assert_eq!(complete_ok(&app, &prof, &t).await, refused("CAPPED"), "the IP cap of 3 is reached");

    app.view_aggregator().flush_views_once().await.expect("flush");
    assert_eq!(db_view_count(&app, &post).await, 3);
    assert_eq!(views_of(&app, &alice, &post).await, (3, 2));
    assert_eq!(views_of(&app, &alice, &other).await, (1, 1));
}

#[tokio::test]
async fn forwarded_for_names_the_client_only_behind_the_trusted_proxy() {
    let app = TestApp::spawn_with(|s| {
        s.view_min_dwell = Duration::ZERO;
        s.view_cap_per_ip = 1;
        s.trusted_proxy = Some("127.0.0.1".parse().expect("ip"));
    })
    .await;
    let w = World::create(&app).await;
    let (alice, bob) = (app.token(w.alice), app.token(w.bob));
    let post = gid("Post", app.create_post(&alice, w.course, "behind a proxy").await);
    let via = |token: &str, ticket: &str, client: &str| {
        app.http
            .post(app.url("/graphql"))
            .header("Authorization", format!("Bearer {token}"))
            .header("X-Forwarded-For", format!("6.6.6.6, {client}"))
            .json(&json!({ "query": COMPLETE, "variables": { "t": ticket } }))
            .send()
    };
    let reason = |r: Json| r["data"]["completePostView"]["reason"].as_str().map(str::to_owned);
    let t = start(&app, &alice, &post).await;
    let r: Json = via(&alice, &t, "203.0.113.1").await.expect("send").json().await.expect("json");
    assert_eq!(r["data"]["completePostView"]["counted"], true, "{r}");
    let t = start(&app, &bob, &post).await;
    let r: Json = via(&bob, &t, "203.0.113.2").await.expect("send").json().await.expect("json");
    assert_eq!(r["data"]["completePostView"]["counted"], true, "another client behind the proxy: {r}");
    let t = start(&app, &bob, &post).await;
    let r: Json = via(&bob, &t, "203.0.113.1").await.expect("send").json().await.expect("json");
    assert_eq!(reason(r).as_deref(), Some("CAPPED"), "203.0.113.1 used its one view");
    assert_eq!(views_of(&app, &alice, &post).await, (2, 2));
}

/// 2,000 members, 6 tickets each, 12,000 completions racing on one post with a per-user cap of
/// 5: exactly 10,000 count, each user's sixth is CAPPED. Completions go through the views
/// service (the same code the resolver calls), with the dwell at 0 so no one waits 30 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twelve_thousand_racing_completions_count_exactly_ten_thousand() {
    const USERS: i64 = 2_000;
    const PER_USER: usize = 6;
    let app = TestApp::spawn_with(|s| {
        s.view_min_dwell = Duration::ZERO;
        s.view_cap_per_user = 5;
        s.view_cap_per_ip = 0;
    })
    .await;
    let w = World::create(&app).await;
    let alice = app.token(w.alice);
    let post = gid("Post", app.create_post(&alice, w.course, "viral").await);
    let post_id = raw_id(&post);
    let first = app
        .scalar_i64(
            "WITH u AS (INSERT INTO users (handle, display_name) \
               SELECT 'viewer' || g, 'Viewer ' || g FROM generate_series(1, $1::bigint) g RETURNING id), \
             m AS (INSERT INTO course_members (course_id, user_id, role) SELECT $2, id, 'student' FROM u) \
             SELECT min(id) AS v FROM u",
            [USERS.into(), w.course.into()],
        )
        .await;
    let views = app.state.views.clone();
    let ip_of = |user: i64| -> IpAddr { IpAddr::from([10, 0, (user / 250) as u8, (user % 250) as u8]) };

    let mut tickets = Vec::with_capacity(USERS as usize * PER_USER);
    let mut starting = tokio::task::JoinSet::new();
    for user in first..first + USERS {
        let views = views.clone();
        starting.spawn(async move {
            let mut mine = Vec::with_capacity(PER_USER);
            for _ in 0..PER_USER {
                mine.push((user, views.start(user, post_id, ip_of(user)).await.expect("start").ticket));
            }
            mine
        });
    }
    while let Some(mine) = starting.join_next().await {
        tickets.extend(mine.expect("start task"));
    }

    let began = Instant::now();
    let barrier = Arc::new(tokio::sync::Barrier::new(tickets.len()));
    let mut completing = tokio::task::JoinSet::new();
    for (user, ticket) in tickets {
        let (views, barrier) = (views.clone(), barrier.clone());
        completing.spawn(async move {
            barrier.wait().await;
            (user, views.complete(user, &ticket, ip_of(user)).await.expect("complete"))
        });
    }
    let mut counted_by_user = std::collections::HashMap::<i64, usize>::new();
    let (mut counted, mut capped) = (0, 0);
    while let Some(done) = completing.join_next().await {
        let (user, outcome) = done.expect("complete task");
        match outcome {
            ViewOutcome::Counted => {
                counted += 1;
                *counted_by_user.entry(user).or_default() += 1;
            }
            ViewOutcome::Refused(ViewRefusal::Capped) => capped += 1,
            other => panic!("unexpected outcome {other:?}"),
        }
    }
    let took = began.elapsed();
    eprintln!(
        "12,000 concurrent completions: {counted} counted, {capped} capped in {took:?} ({:.0} completions/s)",
        12_000.0 / took.as_secs_f64()
    );
    assert_eq!((counted, capped), (10_000, 2_000));
    assert_eq!(counted_by_user.len(), USERS as usize);
    assert!(counted_by_user.values().all(|n| *n == 5), "every user counted exactly 5 times");

    let (before_flush, uniques) = views_of(&app, &alice, &post).await;
    assert_eq!(before_flush, 10_000, "unflushed shards add up");
    let flushed = Instant::now();
    let report = app.view_aggregator().flush_views_once().await.expect("flush");
    eprintln!("flush of {} shard record(s): {:?}", report.records, flushed.elapsed());
    assert_eq!(report.views_applied, 10_000);
    assert_eq!(report.statements, 1);
    assert_eq!(db_view_count(&app, &post).await, 10_000);
    assert_eq!(views_of(&app, &alice, &post).await.0, 10_000);
    let error = (uniques - USERS).abs() as f64 / USERS as f64;
    assert!(error <= 0.02, "unique viewers {uniques} not within 2 % of {USERS}");
}

/// `n` counted views by `user` on each post, through the service (dwell 0, no caps).
async fn count_views(app: &TestApp, user: i64, posts: &[i64], n: usize) {
    let ip: IpAddr = "192.0.2.1".parse().expect("ip");
    for post in posts {
        for _ in 0..n {
            let ticket = app.state.views.start(user, *post, ip).await.expect("start").ticket;
            assert_eq!(app.state.views.complete(user, &ticket, ip).await.expect("complete"), ViewOutcome::Counted);
        }
    }
}

fn uncapped(s: &mut course_forum::testing::config::Settings) {
    s.view_min_dwell = Duration::ZERO;
    s.view_cap_per_user = 0;
    s.view_cap_per_ip = 0;
}

async fn posts_of(app: &TestApp, w: &World, n: usize) -> Vec<i64> {
    let alice = app.token(w.alice);
    let mut out = Vec::new();
    for i in 0..n {
        out.push(app.create_post(&alice, w.course, &format!("post {i}")).await);
    }
    out
}

async fn db_total(app: &TestApp) -> i64 {
    app.scalar_i64("SELECT COALESCE(sum(view_count), 0)::bigint AS v FROM posts", []).await
}

#[tokio::test]
async fn a_crash_between_moving_the_shards_and_commit_replays_exactly() {
    let app = TestApp::spawn_with(uncapped).await;
    let w = World::create(&app).await;
    let posts = posts_of(&app, &w, 3).await;
    count_views(&app, w.alice, &posts, 10).await;

    // The aggregator moves the shards into pending records, then dies before applying.
    let doomed = app.view_aggregator();
    let moved = doomed.take_shards().await.expect("take");
    assert!((posts.len()..=30).contains(&moved), "(shard, post) counters moved: {moved}");
    drop(doomed);
    assert_eq!(db_total(&app).await, 0);
    // More views arrive meanwhile.
    count_views(&app, w.bob, &posts[..1], 5).await;

    let successor = app.view_aggregator();
    let report = successor.flush_views_once().await.expect("replay");
    assert_eq!(report.views_applied, 35);
    assert_eq!(db_total(&app).await, 35);
    assert_eq!(app.scalar_i64("SELECT view_count AS v FROM posts WHERE id = $1", [posts[0].into()]).await, 15);
    let again = successor.flush_views_once().await.expect("idle flush");
    assert_eq!((again.records, again.views_applied, again.statements), (0, 0, 0));
    assert_eq!(db_total(&app).await, 35);
}

#[tokio::test]
async fn a_crash_after_commit_before_cleanup_is_skipped_on_replay() {
    let app = TestApp::spawn_with(uncapped).await;
    let w = World::create(&app).await;
    let posts = posts_of(&app, &w, 4).await;
    count_views(&app, w.alice, &posts, 3).await;

    let doomed = app.view_aggregator();
    doomed.take_shards().await.expect("take");
    let records = doomed.pending().await.expect("pending");
    assert!(!records.is_empty());
    let (counts, fresh) = doomed.apply(&records).await.expect("apply and commit");
    assert_eq!(fresh.len(), records.len());
    assert_eq!(counts.iter().map(|(_, n)| n).sum::<i64>(), 12);
    drop(doomed); // dies before deleting the records
    assert_eq!(db_total(&app).await, 12);

    let report = app.view_aggregator().flush_views_once().await.expect("replay");
    assert_eq!(report.records_skipped, records.len(), "every leftover record was applied before");
    assert_eq!(report.views_applied, 0);
    assert_eq!(db_total(&app).await, 12, "nothing applied twice");
    let after = app.view_aggregator().flush_views_once().await.expect("idle flush");
    assert_eq!(after.records, 0, "the leftovers were deleted");
    let post = gid("Post", posts[0]);
    assert_eq!(views_of(&app, &app.token(w.alice), &post).await, (3, 1));
}

#[tokio::test]
async fn a_flush_of_many_posts_is_one_statement() {
    // It reads /metrics, which counts for the whole process.
    if crate::common::ran_alone_elsewhere().await {
        return;
    }
    let app = TestApp::spawn_with(uncapped).await;
    let w = World::create(&app).await;
    let posts = posts_of(&app, &w, 40).await;
    count_views(&app, w.alice, &posts, 2).await;
    let aggregator = app.view_aggregator();
    let background = async || {
        let metrics = app.http.get(app.url("/metrics")).send().await.expect("GET /metrics").text().await.expect("text");
        sample(&metrics, "sql_statements_total{role=\"background\"}")
    };
    // The membership warm at start ran as a job too.
    let jobs_before = background().await;
    let before = app.state.sql_statements.get();
    let report = aggregator.flush_views_once().await.expect("flush");
    let statements = app.state.sql_statements.get() - before;
    eprintln!("flush of {} posts: {statements} SQL statement(s) in {:?}", posts.len(), report.elapsed);
    assert_eq!(statements, 1, "one UPDATE … FROM unnest for every post of every shard");
    assert_eq!(background().await - jobs_before, 1.0, "the flush is a job's statement");
    assert_eq!(report.counts.len(), 40);
    assert_eq!(db_total(&app).await, 80);

    // A page of posts reads its views in one round trip and shows them all.
    let data = app
        .gql_ok(
            Some(&app.token(w.alice)),
            "query($c: ID!) { course(id: $c) { posts(first: 50) { edges { node { viewCount uniqueViewers } } } } }",
            json!({ "c": gid("Course", w.course) }),
        )
        .await;
    let edges = data["course"]["posts"]["edges"].as_array().expect("edges");
    assert_eq!(edges.len(), 40);
    assert!(edges.iter().all(|e| e["node"]["viewCount"] == 2 && e["node"]["uniqueViewers"] == 1));
}

/// Ticket keys of `post` in Redis (on either kind of Redis).
async fn tickets_stored(app: &TestApp, post: i64) -> usize {
    let pattern = app.state.keys.view_ticket(post, "*");
    let mut scan = course_forum::testing::kv::KeyScan::new(&app.state.redis, &pattern);
    let mut keys = 0;
    while let Some(page) = scan.next_page().await.expect("scan") {
        keys += page.len();
    }
    keys
}

/// A start on a post the instance holds in memory sends the admission and the ticket together
/// (one round trip, `Views::admit_and_open`): its tickets count like any other, the limits hold,
/// and a refused start leaves no ticket behind.
#[tokio::test]
async fn a_start_on_a_post_in_memory_admits_and_opens_together_and_a_refused_one_stores_nothing() {
    let app = TestApp::spawn_with(|s| {
        s.view_min_dwell = Duration::ZERO;
        s.view_max_open_tickets = 2;
    })
    .await;
    let w = World::create(&app).await;
    let bob = app.token(w.bob);
    let post = gid("Post", app.create_post(&app.token(w.alice), w.course, "hot").await);
    views_of(&app, &bob, &post).await;
    assert!(app.state.course_pages.post(raw_id(&post)).is_some(), "the post is in memory");

    let redis_before = app.state.redis.commands_sent();
    let first = start(&app, &bob, &post).await;
    assert_eq!(app.state.redis.commands_sent() - redis_before, 2, "the admission and the ticket, pipelined");
    let second = start(&app, &bob, &post).await;
    let refused = app.gql(Some(&bob), START, json!({ "id": post })).await;
    assert_eq!(error_code(&refused).as_deref(), Some("RATE_LIMITED"), "{refused}");
    assert_eq!(tickets_stored(&app, raw_id(&post)).await, 2, "the refused start's ticket was removed");

    for ticket in [&first, &second] {
        assert_eq!(complete_ok(&app, &bob, ticket).await, (true, None));
    }
    assert_eq!(views_of(&app, &bob, &post).await.0, 2);
    // Completed tickets freed their slots: a new start is admitted.
    start(&app, &bob, &post).await;
}
