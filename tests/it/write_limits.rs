//! Per-user write limits (docs/api.md, "Write limits"): for each kind of write, the one over the
//! limit is RATE_LIMITED with a positive `retryAfterMs` and writes nothing; other users and
//! other kinds are unaffected; the window resets; open view tickets are bounded and a
//! completion (or an expiry) frees a slot; with Redis unreachable, writes are refused whole.

use std::time::Duration;

use course_forum::testing::config::Settings;
use serde_json::{Value as Json, json};

use crate::common::procs::PrivateRedis;
use crate::common::{TestApp, World, error_code, gid, raw_id};

const LIMIT: u32 = 3;

const CREATE_POST: &str =
    "mutation($c: ID!, $t: String!) { createPost(courseId: $c, title: $t, body: \"body\") { id } }";
const CREATE_COMMENT: &str = "mutation($p: ID!) { createComment(postId: $p, body: \"a comment\") { id } }";
const CREATE_REPLY: &str = "mutation($c: ID!) { createReply(commentId: $c, body: \"a reply\") { id } }";
const EDIT_POST: &str = "mutation($p: ID!, $b: String!) { editPost(postId: $p, body: $b) { id } }";
const EDIT_COMMENT: &str = "mutation($c: ID!, $b: String!) { editComment(commentId: $c, body: $b) { __typename } }";
const DELETE_POST: &str = "mutation($p: ID!) { deletePost(postId: $p) { deletedId } }";
const DELETE_COMMENT: &str = "mutation($c: ID!) { deleteComment(commentId: $c) { deletedId } }";
const START: &str = "mutation($p: ID!) { startPostView(postId: $p) { ticket minDwellMs } }";
const COMPLETE: &str = "mutation($t: String!) { completePostView(ticket: $t) { counted reason } }";

/// Everything in PostgreSQL a write could change.
const TABLES: &[&str] = &[
    "SELECT count(*) AS v FROM posts",
    "SELECT count(*) AS v FROM posts WHERE deleted_at IS NOT NULL",
    "SELECT count(*) AS v FROM posts WHERE edited_at IS NOT NULL",
    "SELECT coalesce(sum(like_count + comment_count + view_count), 0)::bigint AS v FROM posts",
    "SELECT coalesce(sum(hashtext(title || '|' || body)::bigint), 0)::bigint AS v FROM posts",
    "SELECT count(*) AS v FROM comments",
    "SELECT count(*) AS v FROM comments WHERE deleted_at IS NOT NULL",
    "SELECT count(*) AS v FROM comments WHERE edited_at IS NOT NULL",
    "SELECT coalesce(sum(like_count + reply_count), 0)::bigint AS v FROM comments",
    "SELECT coalesce(sum(hashtext(body)::bigint), 0)::bigint AS v FROM comments",
    "SELECT count(*) AS v FROM feed_outbox",
];

/// The rows of `TABLES`, and every Redis key of the app with its serialized value (tickets, open
/// tickets, view counters, cached posts, generations), except the rate-limit windows: the
/// limiter's own bookkeeping counts every attempt.
#[derive(Debug, PartialEq)]
struct Snapshot {
    rows: Vec<(&'static str, i64)>,
    redis: Vec<(String, Vec<u8>)>,
}

async fn snapshot(app: &TestApp) -> Snapshot {
    let mut rows = Vec::new();
    for sql in TABLES {
        rows.push((*sql, app.scalar_i64(sql, []).await));
    }
    let mut conn = app.state.redis.clone();
    let mut keys: Vec<String> =
        redis::cmd("KEYS").arg(format!("{}:*", app.redis_prefix)).query_async(&mut conn).await.expect("KEYS");
    keys.retain(|key| !key.contains(":rl:"));
    keys.sort();
    let mut redis = Vec::new();
    for key in keys {
        let dumped: Option<Vec<u8>> = redis::cmd("DUMP").arg(&key).query_async(&mut conn).await.expect("DUMP");
        redis.push((key, dumped.unwrap_or_default()));
    }
    Snapshot { rows, redis }
}

/// Sends the write that must be refused and checks: RATE_LIMITED, a message naming the limit,
/// no data, `0 < retryAfterMs <= max_retry_ms`, and nothing changed. Returns `retryAfterMs`.
async fn refused(app: &TestApp, token: &str, query: &str, vars: Json, names: &str, max_retry_ms: u64) -> u64 {
    let before = snapshot(app).await;
    let response = app.gql(Some(token), query, vars).await;
    assert_eq!(error_code(&response).as_deref(), Some("RATE_LIMITED"), "{response}");
    let message = response["errors"][0]["message"].as_str().unwrap_or_default();
    assert!(message.contains(names), "the message names the limit ({names}): {response}");
    assert!(
        response["data"].is_null() || response["data"].as_object().is_some_and(|d| d.values().all(Json::is_null)),
        "{response}"
    );
    let retry = response["errors"][0]["extensions"]["retryAfterMs"].as_u64();
    assert!(matches!(retry, Some(ms) if ms > 0 && ms <= max_retry_ms), "retryAfterMs: {response}");
    assert_eq!(snapshot(app).await, before, "a refused write changed something");
    retry.unwrap_or_default()
}

async fn spawn(tweak: impl FnOnce(&mut Settings)) -> (TestApp, World) {
    let app = TestApp::spawn_with(tweak).await;
    let world = World::create(&app).await;
    (app, world)
}

async fn post(app: &TestApp, token: &str, course: i64, title: &str) -> String {
    let data = app.gql_ok(Some(token), CREATE_POST, json!({ "c": gid("Course", course), "t": title })).await;
    data["createPost"]["id"].as_str().expect("post id").to_owned()
}

async fn comment(app: &TestApp, token: &str, post: &str) -> String {
    let data = app.gql_ok(Some(token), CREATE_COMMENT, json!({ "p": post })).await;
    data["createComment"]["id"].as_str().expect("comment id").to_owned()
}

async fn start(app: &TestApp, token: &str, post: &str) -> String {
    let data = app.gql_ok(Some(token), START, json!({ "p": post })).await;
    data["startPostView"]["ticket"].as_str().expect("ticket").to_owned()
}

/// `(counted, reason)` of a completion.
async fn complete(app: &TestApp, token: &str, ticket: &str) -> (bool, Option<String>) {
    let data = app.gql_ok(Some(token), COMPLETE, json!({ "t": ticket })).await;
    let result = &data["completePostView"];
    (result["counted"].as_bool().expect("counted"), result["reason"].as_str().map(str::to_owned))
}

/// The user's open view tickets, as Redis holds them.
async fn open_tickets(app: &TestApp, user: i64) -> i64 {
    let mut conn = app.state.redis.clone();
    redis::cmd("ZCARD").arg(app.state.keys.open_views(user)).query_async(&mut conn).await.expect("ZCARD")
}

async fn refusals_in_metrics(app: &TestApp, kind: &str) -> bool {
    let text = app.http.get(app.url("/metrics")).send().await.expect("GET /metrics").text().await.expect("text");
    text.contains(&format!("write_limit_refusals_total{{kind=\"{kind}\"}}"))
}

#[tokio::test]
async fn the_post_over_the_limit_is_refused_and_writes_nothing() {
    // It reads /metrics, which counts for the whole process.
    if crate::common::ran_alone_elsewhere().await {
        return;
    }
    let (app, w) = spawn(|s| s.post_rate_per_minute = LIMIT).await;
    let (alice, bob) = (app.token(w.alice), app.token(w.bob));
    for i in 0..LIMIT {
        post(&app, &alice, w.course, &format!("post {i}")).await;
    }
    let vars = json!({ "c": gid("Course", w.course), "t": "one too many" });
    refused(&app, &alice, CREATE_POST, vars, "new posts", 60_000).await;
    assert_eq!(app.scalar_i64("SELECT count(*) AS v FROM posts WHERE title = 'one too many'", []).await, 0);
    assert!(refusals_in_metrics(&app, "post").await);

    // Another user, and alice's other kinds of writes, are not limited by it.
    post(&app, &bob, w.course, "bob's").await;
    let first = app.scalar_i64("SELECT min(id) AS v FROM posts", []).await;
    comment(&app, &alice, &gid("Post", first)).await;
}

#[tokio::test]
async fn comments_and_replies_share_one_limit_and_the_one_over_it_writes_nothing() {
    let (app, w) = spawn(|s| s.comment_rate_per_minute = LIMIT).await;
    let (alice, bob) = (app.token(w.alice), app.token(w.bob));
    let target = post(&app, &bob, w.course, "discuss").await;
    let first = comment(&app, &alice, &target).await;
    comment(&app, &alice, &target).await;
    app.gql_ok(Some(&alice), CREATE_REPLY, json!({ "c": first })).await;

    refused(&app, &alice, CREATE_REPLY, json!({ "c": first }), "new comments and replies", 60_000).await;
    refused(&app, &alice, CREATE_COMMENT, json!({ "p": target }), "new comments and replies", 60_000).await;
    let counts = "SELECT (comment_count * 1000 + (SELECT count(*) FROM comments))::bigint AS v FROM posts";
    assert_eq!(app.scalar_i64(counts, []).await, 3 * 1000 + 3, "three written, counted once each");

    comment(&app, &bob, &target).await;
    app.gql_ok(Some(&bob), CREATE_REPLY, json!({ "c": first })).await;
}

#[tokio::test]
async fn edits_of_posts_and_comments_share_one_limit_and_the_one_over_it_changes_nothing() {
    let (app, w) = spawn(|s| s.edit_rate_per_minute = LIMIT).await;
    let (alice, bob) = (app.token(w.alice), app.token(w.bob));
    let mine = post(&app, &alice, w.course, "mine").await;
    let my_comment = comment(&app, &alice, &mine).await;
    app.gql_ok(Some(&alice), EDIT_POST, json!({ "p": mine, "b": "edit 1" })).await;
    app.gql_ok(Some(&alice), EDIT_POST, json!({ "p": mine, "b": "edit 2" })).await;
    app.gql_ok(Some(&alice), EDIT_COMMENT, json!({ "c": my_comment, "b": "edit 3" })).await;

    refused(&app, &alice, EDIT_COMMENT, json!({ "c": my_comment, "b": "edit 4" }), "edits", 60_000).await;
    refused(&app, &alice, EDIT_POST, json!({ "p": mine, "b": "edit 5" }), "edits", 60_000).await;
    let body = "SELECT hashtext(body)::bigint AS v FROM posts";
    assert_eq!(app.scalar_i64(body, []).await, app.scalar_i64("SELECT hashtext('edit 2')::bigint AS v", []).await);

    let bobs = post(&app, &bob, w.course, "bob's").await;
    app.gql_ok(Some(&bob), EDIT_POST, json!({ "p": bobs, "b": "bob edits" })).await;
}

#[tokio::test]
async fn deletions_share_one_limit_and_the_one_over_it_deletes_nothing() {
    let (app, w) = spawn(|s| s.delete_rate_per_minute = LIMIT).await;
    let (alice, prof) = (app.token(w.alice), app.token(w.instructor));
    let mut posts = Vec::new();
    for i in 0..4 {
        posts.push(post(&app, &alice, w.course, &format!("doomed {i}")).await);
    }
    let doomed_comment = comment(&app, &alice, &posts[3]).await;
    let kept_comment = comment(&app, &alice, &posts[3]).await;
    app.gql_ok(Some(&alice), DELETE_POST, json!({ "p": posts[0] })).await;
    app.gql_ok(Some(&alice), DELETE_POST, json!({ "p": posts[1] })).await;
    app.gql_ok(Some(&alice), DELETE_COMMENT, json!({ "c": doomed_comment })).await;

    refused(&app, &alice, DELETE_POST, json!({ "p": posts[2] }), "deletions", 60_000).await;
    refused(&app, &alice, DELETE_COMMENT, json!({ "c": kept_comment }), "deletions", 60_000).await;
    assert_eq!(app.scalar_i64("SELECT count(*) AS v FROM posts WHERE deleted_at IS NULL", []).await, 2);
    let live_comments = "SELECT comment_count::bigint AS v FROM posts WHERE id = $1";
    assert_eq!(app.scalar_i64(live_comments, [raw_id(&posts[3]).into()]).await, 1);

    // The instructor's moderation counts against the instructor, not against alice.
    app.gql_ok(Some(&prof), DELETE_POST, json!({ "p": posts[2] })).await;
}

#[tokio::test]
async fn the_view_start_over_the_limit_stores_no_ticket() {
    // It reads /metrics, which counts for the whole process.
    if crate::common::ran_alone_elsewhere().await {
        return;
    }
    let (app, w) = spawn(|s| s.view_start_rate_per_minute = LIMIT).await;
    let (alice, bob) = (app.token(w.alice), app.token(w.bob));
    let target = post(&app, &bob, w.course, "watched").await;
    for _ in 0..LIMIT {
        start(&app, &alice, &target).await;
    }
    assert_eq!(open_tickets(&app, w.alice).await, LIMIT as i64);
    refused(&app, &alice, START, json!({ "p": target }), "view starts", 60_000).await;
    assert_eq!(open_tickets(&app, w.alice).await, LIMIT as i64, "the refused start took no slot");
    assert!(refusals_in_metrics(&app, "view_start").await);
    start(&app, &bob, &target).await;
}

#[tokio::test]
async fn open_view_tickets_are_bounded_and_a_completion_frees_a_slot() {
    // It reads /metrics, which counts for the whole process.
    if crate::common::ran_alone_elsewhere().await {
        return;
    }
    let (app, w) = spawn(|s| {
        s.view_max_open_tickets = 2;
        s.view_min_dwell = Duration::from_millis(300);
    })
    .await;
    let (alice, bob) = (app.token(w.alice), app.token(w.bob));
    let target = post(&app, &bob, w.course, "watched").await;
    let first = start(&app, &alice, &target).await;
    start(&app, &alice, &target).await;

    // The third waits for the oldest ticket: its lifetime (1 h here) at most.
    let ttl_ms = app.state.settings.view_ticket_ttl.as_millis() as u64;
    let retry = refused(&app, &alice, START, json!({ "p": target }), "open view tickets", ttl_ms).await;
    assert!(retry > ttl_ms - 60_000, "retryAfterMs is when the oldest ticket expires: {retry}");
    assert!(refusals_in_metrics(&app, "open_views").await);

    // Completed too soon, the ticket may still count: it keeps its slot.
    assert_eq!(complete(&app, &alice, &first).await, (false, Some("TOO_SHORT".into())));
    refused(&app, &alice, START, json!({ "p": target }), "open view tickets", ttl_ms).await;
    // Completed once it may count, it frees its slot.
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(complete(&app, &alice, &first).await, (true, None));
    assert_eq!(open_tickets(&app, w.alice).await, 1);
    start(&app, &alice, &target).await;
    assert_eq!(open_tickets(&app, w.alice).await, 2);

    // A start refused after its admission (a post alice may not read) gives its slot back.
    let foreign = post(&app, &app.token(w.outsider), w.other_course, "elsewhere").await;
    let denied = app.gql(Some(&bob), START, json!({ "p": foreign })).await;
    assert_eq!(error_code(&denied).as_deref(), Some("FORBIDDEN"), "{denied}");
    assert_eq!(open_tickets(&app, w.bob).await, 0, "bob's refused start holds no slot");
    start(&app, &bob, &target).await;
    start(&app, &bob, &target).await;
    assert_eq!(open_tickets(&app, w.bob).await, 2, "other users have slots of their own");
}

#[tokio::test]
async fn an_expired_ticket_frees_its_slot() {
    let (app, w) = spawn(|s| {
        s.view_max_open_tickets = 1;
        s.view_min_dwell = Duration::from_millis(50);
        s.view_ticket_ttl = Duration::from_millis(400);
    })
    .await;
    let alice = app.token(w.alice);
    let target = post(&app, &alice, w.course, "skimmed").await;
    start(&app, &alice, &target).await;
    refused(&app, &alice, START, json!({ "p": target }), "open view tickets", 400).await;
    tokio::time::sleep(Duration::from_millis(450)).await;
    start(&app, &alice, &target).await;
    assert_eq!(open_tickets(&app, w.alice).await, 1, "the expired ticket was trimmed");
}

/// The open-ticket set expires with its latest ticket, whichever order the tickets came in:
/// a ticket that expires sooner than one already held never shortens the set's life.
#[tokio::test]
async fn the_open_tickets_live_as_long_as_their_latest_ticket() {
    let (app, w) = spawn(|s| {
        s.view_max_open_tickets = 5;
        s.view_min_dwell = Duration::from_millis(50);
        s.view_ticket_ttl = Duration::from_secs(10);
    })
    .await;
    let alice = app.token(w.alice);
    let target = post(&app, &alice, w.course, "read twice").await;
    let ip: std::net::IpAddr = "127.0.0.1".parse().expect("ip");
    let set_ttl_ms = || async {
        let mut conn = app.state.redis.clone();
        let ms: i64 =
            redis::cmd("PTTL").arg(app.state.keys.open_views(w.alice)).query_async(&mut conn).await.expect("PTTL");
        ms
    };
    // Started 8 s ago: it expires in 2 s, and so does the set it opened.
    let views = &app.state.views;
    views.start_backdated(w.alice, raw_id(&target), ip, Duration::from_secs(8)).await.expect("backdated start");
    let first = set_ttl_ms().await;
    assert!((1..=2_000).contains(&first), "the set lives as long as its one ticket: {first} ms");
    // A fresh ticket lengthens it to its own 10 s.
    start(&app, &alice, &target).await;
    let second = set_ttl_ms().await;
    assert!(second > 8_000, "the fresh ticket lengthened the set: {second} ms");
    // One that expires in 1 s does not shorten it.
    views.start_backdated(w.alice, raw_id(&target), ip, Duration::from_secs(9)).await.expect("backdated start");
    let third = set_ttl_ms().await;
    assert!(third > 8_000, "a sooner ticket left the set's life alone: {third} ms");
    assert_eq!(open_tickets(&app, w.alice).await, 3);
}

#[tokio::test]
async fn each_window_resets_when_its_counter_expires() {
    let (app, w) = spawn(|s| {
        s.post_rate_per_minute = 3;
        s.comment_rate_per_minute = 1;
        s.edit_rate_per_minute = 1;
        s.delete_rate_per_minute = 1;
        s.view_start_rate_per_minute = 1;
    })
    .await;
    let (alice, bob) = (app.token(w.alice), app.token(w.bob));
    let target = post(&app, &bob, w.course, "shared").await;
    // Two of alice's three posts of this window; the post row below makes the third.
    let mine = post(&app, &alice, w.course, "mine").await;
    let spare = post(&app, &alice, w.course, "spare").await;
    let course = gid("Course", w.course);
    // (key kind, mutation, variables of the write that fills the window, of the later ones, limit)
    let writes = [
        ("post", CREATE_POST, json!({ "c": course, "t": "third" }), json!({ "c": course, "t": "next" }), 3),
        ("comment", CREATE_COMMENT, json!({ "p": target }), json!({ "p": target }), 1),
        ("edit", EDIT_POST, json!({ "p": mine, "b": "changed" }), json!({ "p": mine, "b": "again" }), 1),
        ("delete", DELETE_POST, json!({ "p": mine }), json!({ "p": spare }), 1),
        ("view", START, json!({ "p": target }), json!({ "p": target }), 1),
    ];
    let mut conn = app.state.redis.clone();
    for (kind, query, first, later, limit) in writes {
        let filled = app.gql(Some(&alice), query, first).await;
        assert!(filled.get("errors").is_none(), "{kind}: {filled}");
        let names = format!("at most {limit} per 1m");
        let retry = refused(&app, &alice, query, later.clone(), &names, 60_000).await;
        // The window is the counter's lifetime: retryAfterMs was its PTTL.
        let key = app.state.keys.write_rate(w.alice, kind);
        let pttl: i64 = redis::cmd("PTTL").arg(&key).query_async(&mut conn).await.expect("PTTL");
        assert!(pttl > 0 && pttl <= retry as i64 && retry as i64 - pttl < 5_000, "{kind}: PTTL {pttl}, retry {retry}");
        // The minute passes (the counter expires, as Redis would expire it): allowed again.
        let _: i64 = redis::cmd("PEXPIRE").arg(&key).arg(1).query_async(&mut conn).await.expect("PEXPIRE");
        tokio::time::sleep(Duration::from_millis(20)).await;
        let again = app.gql(Some(&alice), query, later).await;
        assert!(again.get("errors").is_none(), "{kind} after the window: {again}");
    }
}

#[tokio::test]
async fn bad_input_is_refused_before_the_limit_and_costs_no_budget() {
    let (app, w) = spawn(|s| s.post_rate_per_minute = 1).await;
    let alice = app.token(w.alice);
    for vars in [
        json!({ "c": gid("Course", w.course), "t": "   " }),
        json!({ "c": gid("Course", w.course), "t": "x".repeat(201) }),
        json!({ "c": "not an id", "t": "fine" }),
        json!({ "c": gid("Post", 1), "t": "fine" }),
    ] {
        let response = app.gql(Some(&alice), CREATE_POST, vars).await;
        assert_eq!(error_code(&response).as_deref(), Some("BAD_USER_INPUT"), "{response}");
    }
    post(&app, &alice, w.course, "the one allowed").await;
    let vars = json!({ "c": gid("Course", w.course), "t": "over" });
    refused(&app, &alice, CREATE_POST, vars, "new posts", 60_000).await;
}

#[tokio::test]
async fn with_redis_unreachable_a_write_is_unavailable_and_writes_nothing() {
    let redis = PrivateRedis::start(false);
    let (app, w) = spawn(|s| {
        s.redis_url = redis.url();
        s.redis_cluster_nodes.clear(); // its own single Redis, in either pass
    })
    .await;
    let alice = app.token(w.alice);
    let target = post(&app, &alice, w.course, "before").await;
    let before = app.scalar_i64("SELECT count(*) AS v FROM posts", []).await;
    drop(redis);
    for (query, vars) in [
        (CREATE_POST, json!({ "c": gid("Course", w.course), "t": "during" })),
        (CREATE_COMMENT, json!({ "p": target })),
        (DELETE_POST, json!({ "p": target })),
    ] {
        let response = app.gql(Some(&alice), query, vars).await;
        assert_eq!(error_code(&response).as_deref(), Some("UNAVAILABLE"), "{response}");
    }
    assert_eq!(app.scalar_i64("SELECT count(*) AS v FROM posts", []).await, before);
    assert_eq!(app.scalar_i64("SELECT count(*) AS v FROM posts WHERE deleted_at IS NOT NULL", []).await, 0);
    assert_eq!(app.scalar_i64("SELECT count(*) AS v FROM comments", []).await, 0);
}

/// `@aaa @aab …`: `count` distinct three-letter handles, five characters each (4,000 make the
/// 20,000 characters a post's body may hold).
fn mention_bomb(count: usize) -> String {
    (0..count)
        .map(|i| {
            let handle: String = [i / 676, (i / 26) % 26, i % 26].iter().map(|d| char::from(b'a' + *d as u8)).collect();
            format!("@{handle} ")
        })
        .collect()
}

#[tokio::test]
async fn a_mention_bomb_over_the_write_limit_is_rate_limited_before_its_text_is_read() {
    // One of each kind per minute: the first write of each kind is allowed, the next is over.
    let (app, w) = spawn(|s| {
        s.post_rate_per_minute = 1;
        s.comment_rate_per_minute = 1;
        s.edit_rate_per_minute = 1;
    })
    .await;
    let (alice, bob) = (app.token(w.alice), app.token(w.bob));
    let post_body = mention_bomb(4_000);
    let comment_body = mention_bomb(1_000);
    let create_post = "mutation($c: ID!, $b: String!) { createPost(courseId: $c, title: \"t\", body: $b) { id } }";
    let create_comment = "mutation($p: ID!, $b: String!) { createComment(postId: $p, body: $b) { id } }";
    let create_reply = "mutation($c: ID!, $b: String!) { createReply(commentId: $c, body: $b) { id } }";

    // The control: under the limit, the same texts are refused for their mentions.
    let response = app.gql(Some(&bob), create_post, json!({ "c": gid("Course", w.course), "b": post_body })).await;
    assert_eq!(error_code(&response).as_deref(), Some("BAD_USER_INPUT"), "{response}");
    assert!(response["errors"][0]["message"].as_str().unwrap_or_default().contains("mention"), "{response}");

    // alice uses her one write of each kind.
    let post = post(&app, &alice, w.course, "allowed").await;
    let comment = comment(&app, &alice, &post).await;
    app.gql_ok(Some(&alice), EDIT_COMMENT, json!({ "c": comment, "b": "edited" })).await;

    // Over the limit, the bomb meets the limit first: RATE_LIMITED, not a mention refusal, so
    // the limit was checked before the text was read.
    let vars = json!({ "c": gid("Course", w.course), "b": post_body });
    refused(&app, &alice, create_post, vars, "new posts", 60_000).await;
    let vars = json!({ "p": post, "b": comment_body });
    refused(&app, &alice, create_comment, vars, "new comments and replies", 60_000).await;
    let vars = json!({ "c": comment, "b": comment_body });
    refused(&app, &alice, create_reply, vars, "new comments and replies", 60_000).await;
    let vars = json!({ "c": comment, "b": comment_body });
    refused(&app, &alice, EDIT_COMMENT, vars, "edits", 60_000).await;
    let vars = json!({ "p": post, "b": post_body });
    refused(&app, &alice, EDIT_POST, vars, "edits", 60_000).await;
}
