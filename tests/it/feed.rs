//! The home feed: newest first across a small (fanned-out) course and a celebrity course, keyset
//! pages that neither repeat nor skip when posts arrive between them, deleted posts and left
//! courses never shown, pages that stay full and reach the oldest post below the capped lists,
//! fan-out only into existing timelines, timelines rebuilt once under concurrent first reads,
//! and nothing lost when posts, fan-out jobs and rebuilds race.

use std::collections::HashSet;
use std::sync::Arc;

use course_forum::testing::feed::fanout::FanoutJob;
use course_forum::testing::feed::lists::Lists;
use sea_orm::{DbBackend, FromQueryResult, Statement};
use serde_json::{Value as Json, json};
use tokio::sync::Barrier;

use crate::common::procs::PrivateRedis;
use crate::common::{TestApp, error_code, gid, raw_id};

const FEED: &str = "query($first: Int, $after: String) { homeFeed(first: $first, after: $after) { \
                    edges { cursor node { id title } } pageInfo { hasNextPage endCursor } } }";

/// Small enough that a handful of members makes a celebrity, and that paging runs past the
/// capped lists into PostgreSQL.
const MAX_MEMBERS: usize = 5;
const CAP: usize = 6;

async fn spawn() -> TestApp {
    TestApp::spawn_with(|s| {
        s.feed_fanout_max_members = MAX_MEMBERS;
        s.feed_timeline_cap = CAP;
    })
    .await
}

/// Steps the fan-out job until the outbox is empty.
async fn fan_out(job: &FanoutJob) {
    while job.process_one_batch().await.expect("fan-out step").posts > 0 {}
}

struct FeedPage {
    ids: Vec<i64>,
    end_cursor: Option<String>,
    has_next: bool,
}

async fn feed_page(app: &TestApp, token: &str, first: i64, after: Option<&str>) -> FeedPage {
    let data = app.gql_ok(Some(token), FEED, json!({ "first": first, "after": after })).await;
    page_of(&data)
}

fn page_of(data: &Json) -> FeedPage {
    let feed = &data["homeFeed"];
    let ids = feed["edges"]
        .as_array()
        .expect("edges")
        .iter()
        .map(|e| raw_id(e["node"]["id"].as_str().expect("node id")))
        .collect();
    FeedPage {
        ids,
        end_cursor: feed["pageInfo"]["endCursor"].as_str().map(str::to_owned),
        has_next: feed["pageInfo"]["hasNextPage"].as_bool().expect("hasNextPage"),
    }
}

/// Every page from the first; returns the pages' ids.
async fn walk(app: &TestApp, token: &str, first: i64) -> Vec<Vec<i64>> {
    let mut pages = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = feed_page(app, token, first, after.as_deref()).await;
        pages.push(page.ids);
        if !page.has_next {
            return pages;
        }
        after = Some(page.end_cursor.expect("a next page has an end cursor"));
    }
}

/// Live post ids of some courses, newest first, from PostgreSQL.
async fn expected_feed(app: &TestApp, courses: &[i64]) -> Vec<i64> {
    #[derive(FromQueryResult)]
    struct Ids {
        ids: Option<Vec<i64>>,
    }
    Ids::find_by_statement(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "SELECT array_agg(id ORDER BY id DESC) AS ids FROM posts WHERE course_id = ANY($1) AND deleted_at IS NULL",
        [courses.to_vec().into()],
    ))
    .one(&app.db)
    .await
    .expect("expected feed")
    .and_then(|row| row.ids)
    .unwrap_or_default()
}

async fn zscore(app: &TestApp, key: &str, member: i64) -> Option<f64> {
    redis::cmd("ZSCORE").arg(key).arg(member).query_async(&mut app.state.redis.clone()).await.expect("ZSCORE")
}

async fn exists(app: &TestApp, key: &str) -> bool {
    let n: i64 = redis::cmd("EXISTS").arg(key).query_async(&mut app.state.redis.clone()).await.expect("EXISTS");
    n == 1
}

async fn delete_key(app: &TestApp, key: &str) {
    let _: i64 = redis::cmd("DEL").arg(key).query_async(&mut app.state.redis.clone()).await.expect("DEL");
}

/// Courses for the feed: `small` (alice, bob, prof: fanned out), `celebrity` (alice and
/// MAX_MEMBERS others), `leaving` (alice, bob: alice will leave it), `foreign` (not alice's).
struct FeedWorld {
    small: i64,
    celebrity: i64,
    leaving: i64,
    foreign: i64,
    alice: i64,
    bob: i64,
    prof: i64,
    celebrity_authors: Vec<i64>,
    outsider: i64,
}

impl FeedWorld {
    async fn create(app: &TestApp) -> FeedWorld {
        let small = app.create_course("SMALL1").await;
        let celebrity = app.create_course("MASS1").await;
        let leaving = app.create_course("LEAVE1").await;
        let foreign = app.create_course("OTHER1").await;
        let alice = app.create_user("alice").await;
        let bob = app.create_user("bob").await;
        let prof = app.create_user("prof").await;
        let outsider = app.create_user("outsider").await;
        app.enroll(small, alice, "student").await;
        app.enroll(small, bob, "student").await;
        app.enroll(small, prof, "instructor").await;
        app.enroll(leaving, alice, "student").await;
        app.enroll(leaving, bob, "student").await;
        app.enroll(foreign, outsider, "student").await;
        app.enroll(celebrity, alice, "student").await;
        let mut celebrity_authors = Vec::new();
        for n in 0..MAX_MEMBERS {
            let user = app.create_user(&format!("fan{n}")).await;
            app.enroll(celebrity, user, "student").await;
            celebrity_authors.push(user);
        }
        FeedWorld { small, celebrity, leaving, foreign, alice, bob, prof, celebrity_authors, outsider }
    }

    /// Alice opens her feed (so her timeline exists), then `n` posts go to the small course (by
    /// Bob) and `n` to the celebrity course (by a fan), and are fanned out.
    async fn alice_active_then_posts(&self, app: &TestApp, job: &FanoutJob, n: usize) {
        feed_page(app, &app.token(self.alice), 5, None).await;
        let (bob, fan) = (app.token(self.bob), app.token(self.celebrity_authors[0]));
        for i in 0..n {
            app.create_post(&bob, self.small, &format!("small {i}")).await;
            app.create_post(&fan, self.celebrity, &format!("mass {i}")).await;
        }
        fan_out(job).await;
    }
}

#[tokio::test]
async fn the_feed_merges_a_small_and_a_celebrity_course_newest_first_across_pages() {
    let app = spawn().await;
    let w = FeedWorld::create(&app).await;
    let job = app.feed_fanout().await;
    let alice = app.token(w.alice);
    let bob = app.token(w.bob);
    let fan = app.token(w.celebrity_authors[0]);
    let outsider = app.token(w.outsider);
    // Alice opens the feed before anything is posted: her (empty) timeline exists from now on.
    assert!(feed_page(&app, &alice, 5, None).await.ids.is_empty());

    let (mut small_posts, mut mass_posts) = (Vec::new(), Vec::new());
    for n in 0..8 {
        small_posts.push(app.create_post(&bob, w.small, &format!("small {n}")).await);
        mass_posts.push(app.create_post(&fan, w.celebrity, &format!("mass {n}")).await);
        app.create_post(&bob, w.leaving, &format!("leaving {n}")).await;
        app.create_post(&outsider, w.foreign, &format!("foreign {n}")).await;
        if n % 3 == 0 {
            fan_out(&job).await;
        }
    }
    fan_out(&job).await;
    let before = expected_feed(&app, &[w.small, w.celebrity, w.leaving]).await;
    assert_eq!(before.len(), 24);

    // Walk it 5 at a time; after each page, new posts arrive (and are fanned out).
    let reads_before = app.state.feed.stats().database_reads();
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    let mut arrived = Vec::new();
    loop {
        let page = feed_page(&app, &alice, 5, after.as_deref()).await;
        seen.extend(page.ids.iter().copied());
        if !page.has_next {
            break;
        }
        assert_eq!(page.ids.len(), 5, "only the last page may be short");
        after = page.end_cursor;
        arrived.push(app.create_post(&bob, w.small, "arrived between pages").await);
        arrived.push(app.create_post(&fan, w.celebrity, "arrived between pages").await);
        fan_out(&job).await;
    }
    assert_eq!(seen, before, "every post once, newest first; posts that arrived later are above the cursor");
    assert!(
        app.state.feed.stats().database_reads() > reads_before,
        "with lists capped at {CAP}, the oldest posts came from PostgreSQL"
    );
    // A new first page starts with what arrived, newest first.
    arrived.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(feed_page(&app, &alice, 4, None).await.ids, arrived[..4].to_vec());

    // Deleted posts (new and old, from both kinds of course) and a course Alice left (no API
    // call) vanish.
    let deleted = [small_posts[7], mass_posts[6], mass_posts[1], small_posts[0]];
    app.delete_post(&bob, small_posts[7]).await;
    app.delete_post(&fan, mass_posts[6]).await;
    app.delete_post(&fan, mass_posts[1]).await;
    app.delete_post(&bob, small_posts[0]).await;
    app.scalar_i64(
        "WITH gone AS (DELETE FROM course_members WHERE course_id = $1 AND user_id = $2 RETURNING 1) \
         SELECT count(*) AS v FROM gone",
        [w.leaving.into(), w.alice.into()],
    )
    .await;
    app.memberships_settled().await;
    let expected = expected_feed(&app, &[w.small, w.celebrity]).await;
    let pages = walk(&app, &alice, 5).await;
    for page in &pages[..pages.len() - 1] {
        assert_eq!(page.len(), 5, "deleted posts are skipped without short pages: {pages:?}");
    }
    let walked: Vec<i64> = pages.concat();
    assert_eq!(walked, expected);
    for gone in deleted {
        assert!(!walked.contains(&gone), "deleted post {gone} shown");
    }
    let leaving_posts = expected_feed(&app, &[w.leaving]).await;
    assert!(walked.iter().all(|id| !leaving_posts.contains(id)), "a left course's posts are never shown");
}

#[tokio::test]
async fn fan_out_pushes_only_into_existing_timelines_and_never_a_celebritys_posts() {
    let app = spawn().await;
    let w = FeedWorld::create(&app).await;
    let job = app.feed_fanout().await;
    let alice = app.token(w.alice);
    let bob = app.token(w.bob);
    let fan = app.token(w.celebrity_authors[0]);
    // Alice is active (she read her feed); prof never did.
    feed_page(&app, &alice, 5, None).await;
    let keys = &app.state.keys;
    assert!(exists(&app, &keys.timeline(w.alice)).await);
    assert!(!exists(&app, &keys.timeline(w.prof)).await);

    let small_post = app.create_post(&bob, w.small, "to three members").await;
    let mass_post = app.create_post(&fan, w.celebrity, "to many").await;
    let report = job.process_one_batch().await.expect("fan-out");
    assert_eq!((report.posts, report.celebrity_posts), (2, 1));
    // The small course has alice, bob, prof: only alice has a timeline.
    assert_eq!((report.timelines_pushed, report.timelines_skipped), (1, 2));
    assert_eq!(zscore(&app, &keys.timeline(w.alice), small_post).await, Some(small_post as f64));
    assert!(!exists(&app, &keys.timeline(w.prof)).await, "no timeline is created for an inactive user");
    assert_eq!(zscore(&app, &keys.timeline(w.alice), mass_post).await, None, "celebrity posts are not fanned out");
    assert_eq!(zscore(&app, &keys.celebrity_list(w.celebrity), mass_post).await, Some(mass_post as f64));
    let outbox = app.scalar_i64("SELECT count(*) AS v FROM feed_outbox", []).await;
    assert_eq!(outbox, 0, "fanned-out rows are deleted with the commit");

    // A replay (a crash after the pushes, before COMMIT, leaves the rows) changes nothing.
    let card = |key: String| {
        let mut conn = app.state.redis.clone();
        async move { redis::cmd("ZCARD").arg(key).query_async::<i64>(&mut conn).await.expect("ZCARD") }
    };
    let (timeline_before, list_before) =
        (card(keys.timeline(w.alice)).await, card(keys.celebrity_list(w.celebrity)).await);
    app.scalar_i64(
        "WITH r AS (INSERT INTO feed_outbox (post_id, course_id) VALUES ($1, $2), ($3, $4) RETURNING 1) \
         SELECT count(*) AS v FROM r",
        [small_post.into(), w.small.into(), mass_post.into(), w.celebrity.into()],
    )
    .await;
    let replay = job.process_one_batch().await.expect("replayed fan-out");
    assert_eq!(replay.posts, 2);
    assert_eq!(card(keys.timeline(w.alice)).await, timeline_before);
    assert_eq!(card(keys.celebrity_list(w.celebrity)).await, list_before);
    assert_eq!(app.scalar_i64("SELECT count(*) AS v FROM feed_outbox", []).await, 0);

    // Timelines stay capped at CAP post ids (plus their sentinel).
    for n in 0..CAP + 4 {
        app.create_post(&bob, w.small, &format!("more {n}")).await;
    }
    fan_out(&job).await;
    assert_eq!(card(keys.timeline(w.alice)).await, CAP as i64 + 1);
    let newest = app.scalar_i64("SELECT max(id) AS v FROM posts WHERE course_id = $1", [w.small.into()]).await;
    assert!(zscore(&app, &keys.timeline(w.alice), newest).await.is_some(), "trimming keeps the newest");
}

#[tokio::test]
async fn memberships_changed_without_any_api_call_change_the_feed_at_once() {
    let app = spawn().await;
    let w = FeedWorld::create(&app).await;
    let job = app.feed_fanout().await;
    let alice = app.token(w.alice);
    let outsider = app.token(w.outsider);
    let foreign_post = app.create_post(&outsider, w.foreign, "elsewhere").await;
    fan_out(&job).await;
    assert!(!feed_page(&app, &alice, 20, None).await.ids.contains(&foreign_post));

    let rebuilds = app.state.feed.stats().rebuilds();
    app.enroll(w.foreign, w.alice, "student").await;
    assert_eq!(feed_page(&app, &alice, 20, None).await.ids, vec![foreign_post], "a joined course shows at once");
    assert_eq!(app.state.feed.stats().rebuilds(), rebuilds + 1, "the timeline was rebuilt for the new course set");

    app.scalar_i64(
        "WITH gone AS (DELETE FROM course_members WHERE course_id = $1 AND user_id = $2 RETURNING 1) \
         SELECT count(*) AS v FROM gone",
        [w.foreign.into(), w.alice.into()],
    )
    .await;
    app.memberships_settled().await;
    assert!(feed_page(&app, &alice, 20, None).await.ids.is_empty(), "a left course is gone at once");
}

#[tokio::test]
async fn a_warm_first_page_is_no_sql_statement_and_no_rebuild() {
    let app = spawn().await;
    let w = FeedWorld::create(&app).await;
    let alice = app.token(w.alice);
    w.alice_active_then_posts(&app, &app.feed_fanout().await, 3).await;
    // First read hydrates the posts into the cache.
    let first = feed_page(&app, &alice, 5, None).await;
    let (sql, rebuilds, reads) =
        (app.state.sql_statements.get(), app.state.feed.stats().rebuilds(), app.state.feed.stats().database_reads());
    let again = feed_page(&app, &alice, 5, None).await;
    assert_eq!(again.ids, first.ids);
    assert_eq!(again.ids, expected_feed(&app, &[w.small, w.celebrity, w.leaving]).await[..5].to_vec());
    assert_eq!(app.state.sql_statements.get() - sql, 0, "memberships from memory, posts from the cache");
    // Without the memberships in memory, they are the one statement.
    app.state.memberships.everything_changed();
    let sql = app.state.sql_statements.get();
    assert_eq!(feed_page(&app, &alice, 5, None).await.ids, first.ids);
    assert_eq!(app.state.sql_statements.get() - sql, 1, "only the viewer's memberships come from PostgreSQL");
    assert_eq!(app.state.feed.stats().rebuilds(), rebuilds);
    assert_eq!(app.state.feed.stats().database_reads(), reads);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_timeline_is_rebuilt_once_under_a_hundred_concurrent_first_reads() {
    let app = Arc::new(spawn().await);
    let w = FeedWorld::create(&app).await;
    let alice = app.token(w.alice);
    w.alice_active_then_posts(&app, &app.feed_fanout().await, 4).await;
    let expected = expected_feed(&app, &[w.small, w.celebrity, w.leaving]).await;
    // Redis lost it (eviction, restart, expiry).
    delete_key(&app, &app.state.keys.timeline(w.alice)).await;

    let rebuilds = app.state.feed.stats().rebuilds();
    let barrier = Arc::new(Barrier::new(100));
    let readers: Vec<_> = (0..100)
        .map(|_| {
            let (app, barrier, alice) = (app.clone(), barrier.clone(), alice.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                app.gql(Some(&alice), FEED, json!({ "first": 10 })).await
            })
        })
        .collect();
    for reader in readers {
        let response = reader.await.expect("reader");
        assert!(response.get("errors").is_none(), "{response}");
        assert_eq!(page_of(&response["data"]).ids, expected, "every reader sees the whole feed");
    }
    assert_eq!(app.state.feed.stats().rebuilds() - rebuilds, 1, "rebuilt exactly once");
    assert!(exists(&app, &app.state.keys.timeline(w.alice)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn posts_fan_out_jobs_and_rebuilds_racing_lose_nothing() {
    // Lists long enough to hold everything: a post missing from them would be missing from the
    // feed, not found again in PostgreSQL.
    let app = Arc::new(TestApp::spawn_with(|s| s.feed_fanout_max_members = MAX_MEMBERS).await);
    let w = FeedWorld::create(&app).await;
    let alice = app.token(w.alice);
    let authors = [app.token(w.bob), app.token(w.prof), app.token(w.alice)];
    let fan = app.token(w.celebrity_authors[1]);
    const POSTS: usize = 200;

    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Three fan-out jobs stepping at once (SKIP LOCKED splits the outbox between them) …
    let mut jobs = Vec::new();
    for _ in 0..3 {
        let (job, done) = (app.feed_fanout().await, done.clone());
        jobs.push(tokio::spawn(async move {
            loop {
                let finished = done.load(std::sync::atomic::Ordering::SeqCst);
                let report = job.process_one_batch().await.expect("fan-out step");
                if finished && report.posts == 0 {
                    return;
                }
                if report.posts == 0 {
                    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                }
            }
        }));
    }
    // … while Alice's timeline is dropped and rebuilt again and again, until half the posts are
    // written: the timeline she keeps was rebuilt while posts were still being fanned out, and
    // must hold those pushed during its rebuild too …
    let written_so_far = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let rebuilder = {
        let (app, alice, written_so_far) = (app.clone(), alice.clone(), written_so_far.clone());
        tokio::spawn(async move {
            let mut rebuilds = 0;
            while written_so_far.load(std::sync::atomic::Ordering::SeqCst) < POSTS / 2 {
                delete_key(&app, &app.state.keys.timeline(w.alice)).await;
                let response = app.gql(Some(&alice), FEED, json!({ "first": 3 })).await;
                assert!(response.get("errors").is_none(), "{response}");
                rebuilds += 1;
            }
            rebuilds
        })
    };
    // … and 200 posts are written concurrently to a small and a celebrity course.
    let barrier = Arc::new(Barrier::new(POSTS));
    let writers: Vec<_> = (0..POSTS)
        .map(|i| {
            let (app, barrier, written_so_far) = (app.clone(), barrier.clone(), written_so_far.clone());
            let (token, course) =
                if i % 4 == 3 { (fan.clone(), w.celebrity) } else { (authors[i % 3].clone(), w.small) };
            tokio::spawn(async move {
                barrier.wait().await;
                let id = app.create_post(&token, course, &format!("race {i}")).await;
                written_so_far.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                id
            })
        })
        .collect();
    let mut written = HashSet::new();
    for writer in writers {
        written.insert(writer.await.expect("writer"));
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(rebuilder.await.expect("rebuilder") > 0, "the timeline was rebuilt during the writes");
    for job in jobs {
        job.await.expect("fan-out job");
    }
    assert_eq!(app.scalar_i64("SELECT count(*) AS v FROM feed_outbox", []).await, 0);

    // The timeline Alice has now was never dropped after the last push: it must hold every post.
    let reads = app.state.feed.stats().database_reads();
    let walked: Vec<i64> = walk(&app, &alice, 50).await.concat();
    assert_eq!(walked.len(), POSTS);
    assert_eq!(walked.iter().copied().collect::<HashSet<_>>(), written);
    assert!(walked.windows(2).all(|p| p[0] > p[1]), "newest first");
    assert_eq!(app.state.feed.stats().database_reads(), reads, "all from the lists, none from PostgreSQL");
}

#[tokio::test]
async fn bad_feed_arguments_are_bad_user_input_and_a_token_is_required() {
    let app = spawn().await;
    let w = FeedWorld::create(&app).await;
    let alice = app.token(w.alice);
    for (name, vars) in [
        ("first: 0", json!({ "first": 0 })),
        ("first: -1", json!({ "first": -1 })),
        ("first: 101", json!({ "first": 101 })),
        ("after: garbage", json!({ "after": "not-a-cursor" })),
        ("after: an id, not a cursor", json!({ "after": gid("Post", 1) })),
    ] {
        let response = app.gql(Some(&alice), FEED, vars).await;
        assert_eq!(error_code(&response).as_deref(), Some("BAD_USER_INPUT"), "{name}: {response}");
        assert!(response["data"].is_null() || response["data"]["homeFeed"].is_null(), "{name}: {response}");
    }
    let response = app.gql(None, FEED, json!({})).await;
    assert_eq!(error_code(&response).as_deref(), Some("UNAUTHENTICATED"), "{response}");
    // Somebody in no course gets an empty feed (and page sizes default to 20).
    let loner = app.create_user("loner").await;
    let page = feed_page(&app, &app.token(loner), 20, None).await;
    assert!(page.ids.is_empty() && !page.has_next);
    assert_eq!(app.scalar_i64("SELECT count(*) AS v FROM feed_outbox", []).await, 0, "nothing was written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_fanned_out_while_its_timeline_is_rebuilt_is_kept() {
    let app = Arc::new(spawn().await);
    let w = FeedWorld::create(&app).await;
    let job = app.feed_fanout().await;
    let alice = app.token(w.alice);
    let bob = app.token(w.bob);
    let older = app.create_post(&bob, w.small, "before the rebuild").await;
    fan_out(&job).await;

    // Alice's first read rebuilds her timeline; it parks after reading PostgreSQL.
    let gate = app.state.feed.hooks().rebuilds.hold().await;
    let reader = {
        let (app, alice) = (app.clone(), alice.clone());
        tokio::spawn(async move { app.gql(Some(&alice), FEED, json!({ "first": 10 })).await })
    };
    while app.state.feed.hooks().rebuilds.reached() == 0 {
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    // A post commits after that read and is fanned out before the rebuild fills the timeline.
    let newer = app.create_post(&bob, w.small, "during the rebuild").await;
    let report = job.process_one_batch().await.expect("fan-out");
    assert_eq!(report.timelines_pushed, 1, "the push landed in the timeline being rebuilt");
    drop(gate);

    let response = reader.await.expect("reader");
    assert!(response.get("errors").is_none(), "{response}");
    let reads = app.state.feed.stats().database_reads();
    assert_eq!(feed_page(&app, &alice, 10, None).await.ids, vec![newer, older]);
    assert_eq!(app.state.feed.stats().database_reads(), reads, "from the timeline itself");
}

#[tokio::test]
async fn pipelined_scripts_load_themselves_into_a_redis_that_forgot_them() {
    // A Redis of our own: its script cache may be flushed without disturbing other tests.
    let server = PrivateRedis::start(false);
    let redis = course_forum::testing::kv::connect(&server.url(), std::time::Duration::from_secs(5), "test")
        .await
        .expect("connect");
    let lists = Lists::new(redis.clone(), 10);
    assert!(lists.fill("t:{x}:list", "", "_", None, &[1, 2, 3]).await.expect("fill"));
    // Nothing but the fill script is known yet: the push pipeline meets NOSCRIPT first.
    let pushed = lists.push(&[("t:{x}:list".to_owned(), &[4][..]), ("t:{y}:none".to_owned(), &[4][..])]).await;
    assert_eq!(pushed.expect("push"), vec![true, false]);
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query_async(&mut redis.clone()).await.expect("SCRIPT FLUSH");
    let windows = lists.windows(&[("t:{x}:list".to_owned(), None)], None, 10).await.expect("windows after a flush");
    let window = windows.into_iter().next().flatten().expect("the list exists");
    assert_eq!((window.sentinel.as_str(), window.floor, window.ids), ("_", 0, vec![4, 3, 2, 1]));
}

#[tokio::test]
async fn serve_runs_the_fan_out_job_itself() {
    let app = TestApp::spawn_with(|s| {
        s.worker_in_serve = true;
        s.feed_fanout_interval = std::time::Duration::from_millis(20);
    })
    .await;
    let w = FeedWorld::create(&app).await;
    let alice = app.token(w.alice);
    assert!(feed_page(&app, &alice, 5, None).await.ids.is_empty());
    let post = app.create_post(&app.token(w.bob), w.small, "pushed by the server").await;
    // Nobody steps the job here: the server's own fan-out must push it (well within 10 s).
    let started = std::time::Instant::now();
    while app.scalar_i64("SELECT count(*) AS v FROM feed_outbox", []).await > 0 {
        assert!(started.elapsed() < std::time::Duration::from_secs(10), "the outbox was never emptied");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(zscore(&app, &app.state.keys.timeline(w.alice), post).await, Some(post as f64));
    assert_eq!(feed_page(&app, &alice, 5, None).await.ids, vec![post]);
}
