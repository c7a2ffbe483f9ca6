//! The course pages each instance keeps in memory (`cache::pages`) and the users it keeps
//! (`cache::users`): a warm page costs no SQL statement, yet every published change reaches
//! it: at once on the instance that wrote, within the relay's delay on the others. Likes and
//! views are patched in (no reload); a load that raced a change never puts back what it
//! replaced; a change made behind the server's back shows after `COURSE_PAGE_CACHE_TTL`.

use std::time::{Duration, Instant};

use course_forum::testing::cache::pages::{CoursePages, RANKED_PAGE_TTL};
use course_forum::testing::config::LikeMode;
use course_forum::testing::forum::paging::{Page, PageRequest};
use course_forum::testing::forum::posts::PostRow;
use course_forum::testing::live::{Activity, ActivityKind, LiveMessage};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value as Json, json};

use crate::common::{self, TestApp, World, gid, raw_id};

const PAGE: &str = "query($c: ID!) { course(id: $c) { posts(first: 20) { edges { node { \
    id title likeCount commentCount viewCount author { handle } } } } } }";

/// The page as `(post id, title, likeCount, commentCount, viewCount)`, newest first.
type Shown = Vec<(i64, String, i64, i64, i64)>;

async fn page_at(app: &TestApp, addr: std::net::SocketAddr, user: i64, course: i64) -> Shown {
    let response = app.gql_at(addr, Some(&app.token(user)), PAGE, json!({ "c": gid("Course", course) })).await;
    assert!(response.get("errors").is_none(), "page failed: {response}");
    response["data"]["course"]["posts"]["edges"]
        .as_array()
        .expect("edges")
        .iter()
        .map(|edge| {
            let node = &edge["node"];
            assert!(node["author"]["handle"].as_str().is_some_and(|h| !h.is_empty()), "author shown: {node}");
            (
                raw_id(node["id"].as_str().expect("id")),
                node["title"].as_str().expect("title").to_owned(),
                node["likeCount"].as_i64().expect("likeCount"),
                node["commentCount"].as_i64().expect("commentCount"),
                node["viewCount"].as_i64().expect("viewCount"),
            )
        })
        .collect()
}

/// What the database says the page is (the same columns; views are all flushed here).
async fn page_in_database(app: &TestApp, course: i64) -> Shown {
    use sea_orm::{ConnectionTrait, Statement};
    let rows = app
        .db
        .query_all_raw(Statement::from_sql_and_values(
            sea_orm::DbBackend::Postgres,
            "SELECT id, title, like_count::bigint AS l, comment_count::bigint AS c, view_count AS v FROM posts \
             WHERE course_id = $1 AND deleted_at IS NULL ORDER BY id DESC LIMIT 20",
            [course.into()],
        ))
        .await
        .expect("page in the database");
    rows.iter()
        .map(|r| {
            (
                r.try_get("", "id").expect("id"),
                r.try_get("", "title").expect("title"),
                r.try_get("", "l").expect("l"),
                r.try_get("", "c").expect("c"),
                r.try_get("", "v").expect("v"),
            )
        })
        .collect()
}

/// Polls `read` until `wanted` holds (panics after 5 s, naming `what`).
async fn eventually<F: AsyncFn() -> Shown>(what: &str, read: F, wanted: impl Fn(&Shown) -> bool) -> Shown {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let shown = read().await;
        if wanted(&shown) {
            return shown;
        }
        assert!(Instant::now() < deadline, "{what}: still {shown:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn mutate(app: &TestApp, addr: std::net::SocketAddr, user: i64, query: &str, variables: Json) -> Json {
    let response = app.gql_at(addr, Some(&app.token(user)), query, variables).await;
    assert!(response.get("errors").is_none(), "mutation failed: {response}");
    response["data"].clone()
}

async fn edit(app: &TestApp, addr: std::net::SocketAddr, user: i64, post: i64, title: &str) {
    mutate(
        app,
        addr,
        user,
        "mutation($p: ID!, $t: String!) { editPost(postId: $p, title: $t) { id } }",
        json!({ "p": gid("Post", post), "t": title }),
    )
    .await;
}

async fn comment(app: &TestApp, addr: std::net::SocketAddr, user: i64, post: i64) -> String {
    let data = mutate(
        app,
        addr,
        user,
        "mutation($p: ID!) { createComment(postId: $p, body: \"c\") { id } }",
        json!({ "p": gid("Post", post) }),
    )
    .await;
    data["createComment"]["id"].as_str().expect("comment id").to_owned()
}

async fn delete_post(app: &TestApp, addr: std::net::SocketAddr, user: i64, post: i64) {
    mutate(
        app,
        addr,
        user,
        "mutation($p: ID!) { deletePost(postId: $p) { deletedId } }",
        json!({ "p": gid("Post", post) }),
    )
    .await;
}

#[tokio::test]
async fn a_warm_page_costs_no_statement_and_a_cold_one_costs_one() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    for i in 0..3 {
        app.create_post_at(app.addr, &app.token(world.alice), world.course, &format!("post {i}")).await;
    }
    app.own_echoes_heard().await;
    // The first read loads the page and its authors; memberships are in memory already.
    let statements = app.state.sql_statements.get();
    let first = page_at(&app, app.addr, world.bob, world.course).await;
    let cold = app.state.sql_statements.get() - statements;
    assert_eq!(first.len(), 3);
    assert!(cold >= 1, "a cold page is read from the database");
    assert_eq!(app.state.course_pages.len(), 1);

    let statements = app.state.sql_statements.get();
    for _ in 0..5 {
        assert_eq!(page_at(&app, app.addr, world.bob, world.course).await, first);
        assert_eq!(page_at(&app, app.addr, world.alice, world.course).await, first);
    }
    assert_eq!(app.state.sql_statements.get() - statements, 0, "ten warm pages, no statement");
}

#[tokio::test]
async fn with_the_cache_off_every_page_reads_the_database() {
    let app = TestApp::spawn_with(|s| s.course_page_cache_ttl = Duration::ZERO).await;
    let world = World::create(&app).await;
    app.create_post_at(app.addr, &app.token(world.alice), world.course, "post").await;
    page_at(&app, app.addr, world.bob, world.course).await;
    let statements = app.state.sql_statements.get();
    page_at(&app, app.addr, world.bob, world.course).await;
    assert_eq!(app.state.sql_statements.get() - statements, 1, "the page's own statement (authors stay in memory)");
    assert!(app.state.course_pages.is_empty());
}

/// Waits until both instances have heard every live message published on either since the
/// peer subscribed (`app_before_peer`: the app's count then). A message drops the cached pages
/// it touches when it arrives, so a page warmed before a late echo would be dropped under a
/// test that counts warm pages.
async fn both_heard(app: &TestApp, peer: &common::Peer, app_before_peer: u64) {
    use std::sync::atomic::Ordering::Relaxed;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (by_app, by_peer) = (app.state.publisher.published(), peer.state.publisher.published());
        let app_heard = app.state.live.stats.messages_received.load(Relaxed) >= by_app + by_peer;
        let peer_heard = peer.state.live.stats.messages_received.load(Relaxed) >= by_app - app_before_peer + by_peer;
        if app_heard && peer_heard {
            return;
        }
        assert!(Instant::now() < deadline, "the relays did not hear every message within 10 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Every kind of write, made on one instance, shows at once there and within the relay's delay
/// on the other, each while both hold the page warm.
#[tokio::test]
async fn every_write_reaches_warm_pages_on_the_writer_at_once_and_on_a_peer_soon() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let peer = app.spawn_peer(|_| {}).await;
    let app_before_peer = app.state.publisher.published();
    let (a, b) = (app.addr, peer.addr);
    let first = app.create_post_at(a, &app.token(world.alice), world.course, "first").await;
    let warm = async || {
        // The echoes of the last write first: one arriving after these reads would drop a page.
        both_heard(&app, &peer, app_before_peer).await;
        page_at(&app, a, world.bob, world.course).await;
        page_at(&app, b, world.bob, world.course).await;
        assert_eq!((app.state.course_pages.len(), peer.state.course_pages.len()), (1, 1), "both pages warm");
    };

    // A post created on the peer.
    warm().await;
    let second = app.create_post_at(b, &app.token(world.alice), world.course, "second").await;
    let shows_second = |shown: &Shown| shown.first().map(|p| p.0) == Some(second);
    assert!(shows_second(&page_at(&app, b, world.bob, world.course).await), "the writer reads its own post");
    eventually("a post created on the peer", async || page_at(&app, a, world.bob, world.course).await, shows_second)
        .await;

    // An edit on the first instance.
    warm().await;
    edit(&app, a, world.alice, first, "edited").await;
    let edited = |shown: &Shown| shown.iter().any(|p| p.0 == first && p.1 == "edited");
    assert!(edited(&page_at(&app, a, world.bob, world.course).await), "the writer reads its own edit");
    eventually("an edit on the other instance", async || page_at(&app, b, world.bob, world.course).await, edited).await;

    // A comment and a reply on the peer: the post's commentCount.
    warm().await;
    let comment_id = comment(&app, b, world.bob, first).await;
    mutate(
        &app,
        b,
        world.alice,
        "mutation($c: ID!) { createReply(commentId: $c, body: \"r\") { id } }",
        json!({ "c": comment_id }),
    )
    .await;
    let commented = |shown: &Shown| shown.iter().any(|p| p.0 == first && p.3 == 2);
    assert!(commented(&page_at(&app, b, world.bob, world.course).await));
    eventually("a comment on the peer", async || page_at(&app, a, world.bob, world.course).await, commented).await;

    // A comment deleted on the first instance.
    warm().await;
    mutate(
        &app,
        a,
        world.bob,
        "mutation($c: ID!) { deleteComment(commentId: $c) { deletedId } }",
        json!({ "c": comment_id }),
    )
    .await;
    let uncommented = |shown: &Shown| shown.iter().any(|p| p.0 == first && p.3 == 0);
    assert!(uncommented(&page_at(&app, a, world.bob, world.course).await), "comment and its reply gone");
    eventually("a comment deleted elsewhere", async || page_at(&app, b, world.bob, world.course).await, uncommented)
        .await;

    // A post deleted on the peer.
    warm().await;
    delete_post(&app, b, world.alice, second).await;
    let gone = |shown: &Shown| shown.iter().all(|p| p.0 != second);
    assert!(gone(&page_at(&app, b, world.bob, world.course).await));
    eventually("a post deleted on the peer", async || page_at(&app, a, world.bob, world.course).await, gone).await;
}

/// Committed like counts are patched into the warm pages of both instances: the count shows
/// with no statement read for it. Buffered (the worker commits) and sync (the mutation does).
async fn committed_likes_are_patched_in_without_a_read(mode: LikeMode) {
    let app = TestApp::spawn_with(|s| s.like_mode = mode).await;
    let world = World::create(&app).await;
    let peer = app.spawn_peer(|s| s.like_mode = mode).await;
    let post = app.create_post_at(app.addr, &app.token(world.alice), world.course, "liked").await;
    page_at(&app, app.addr, world.bob, world.course).await;
    page_at(&app, peer.addr, world.bob, world.course).await;

    for user in [world.bob, world.instructor] {
        mutate(
            &app,
            app.addr,
            user,
            "mutation($p: ID!) { likePost(postId: $p) { likeCount } }",
            json!({ "p": gid("Post", post) }),
        )
        .await;
    }
    if mode == LikeMode::Buffered {
        app.worker().await.drain().await.expect("drain");
    }
    let liked_twice = |shown: &Shown| shown.first().is_some_and(|p| p.2 == 2);
    for addr in [app.addr, peer.addr] {
        eventually(
            "committed likes on a warm page",
            async || page_at(&app, addr, world.bob, world.course).await,
            liked_twice,
        )
        .await;
    }
    // Patched, not dropped: both instances still read no statement for the page.
    let statements = (app.state.sql_statements.get(), peer.state.sql_statements.get());
    assert!(liked_twice(&page_at(&app, app.addr, world.bob, world.course).await));
    assert!(liked_twice(&page_at(&app, peer.addr, world.bob, world.course).await));
    assert_eq!((app.state.sql_statements.get() - statements.0, peer.state.sql_statements.get() - statements.1), (0, 0));
    assert_eq!(page_at(&app, app.addr, world.bob, world.course).await, page_in_database(&app, world.course).await);
}
in_each_like_mode!(committed_likes_are_patched_in_without_a_read);

/// The aggregator's flush publishes the committed view counts: a warm page on another instance
/// shows them (the flushed views left Redis, so without the patch the count would fall back).
#[tokio::test]
async fn flushed_views_reach_warm_pages() {
    let app = TestApp::spawn_with(|s| {
        s.view_min_dwell = Duration::ZERO;
        s.view_cap_per_user = 0;
    })
    .await;
    let world = World::create(&app).await;
    let peer = app.spawn_peer(|_| {}).await;
    let post = app.create_post_at(app.addr, &app.token(world.alice), world.course, "viewed").await;
    page_at(&app, peer.addr, world.bob, world.course).await;
    let ip = "192.0.2.1".parse().expect("ip");
    for _ in 0..3 {
        let ticket = app.state.views.start(world.bob, post, ip).await.expect("start").ticket;
        app.state.views.complete(world.bob, &ticket, ip).await.expect("complete");
    }
    assert_eq!(page_at(&app, peer.addr, world.bob, world.course).await[0].4, 3, "unflushed views counted");
    app.view_aggregator().flush_views_once().await.expect("flush");
    let three = |shown: &Shown| shown[0].4 == 3 && peer.state.course_pages.len() == 1;
    eventually("flushed views", async || page_at(&app, peer.addr, world.bob, world.course).await, three).await;
    assert_eq!(page_in_database(&app, world.course).await[0].4, 3);
}

/// A change made behind the server's back (SQL by hand) shows once the TTL has passed, not
/// before: the page really was served from memory meanwhile.
#[tokio::test]
async fn an_unpublished_change_shows_after_the_ttl() {
    // Long enough that the second read below comes well inside it on a loaded machine.
    let app = TestApp::spawn_with(|s| s.course_page_cache_ttl = Duration::from_millis(3000)).await;
    let world = World::create(&app).await;
    let post = app.create_post_at(app.addr, &app.token(world.alice), world.course, "before").await;
    app.own_echoes_heard().await;
    page_at(&app, app.addr, world.bob, world.course).await;
    let changed_at = Instant::now();
    app.scalar_i64("UPDATE posts SET title = 'by hand' WHERE id = $1 RETURNING id AS v", [post.into()]).await;
    assert_eq!(page_at(&app, app.addr, world.bob, world.course).await[0].1, "before", "served from memory");
    let shown = eventually(
        "a change by hand",
        async || page_at(&app, app.addr, world.bob, world.course).await,
        |s| s[0].1 == "by hand",
    )
    .await;
    assert_eq!(shown[0].0, post);
    assert!(changed_at.elapsed() >= Duration::from_millis(2000), "shown only once the TTL ran out");
}

fn row(id: i64, like_count: i32, like_version: i64) -> PostRow {
    PostRow {
        id,
        course_id: 1,
        user_id: 1,
        title: format!("post {id}"),
        body: String::new(),
        like_count,
        like_version,
        comment_count: 0,
        view_count: 0,
        created_at: chrono::Utc::now(),
        edited_at: None,
        kind: "discussion".into(),
        anonymous_to: None,
        private: false,
        pinned_at: None,
        accepted_comment_id: None,
        resolved_at: None,
        endorsed_by: None,
        endorsed_at: None,
    }
}

fn page_of(rows: Vec<PostRow>) -> Page<PostRow> {
    Page { items: rows, has_next: false, has_prev: false }
}

fn counts(post: i64, count: i32, version: i64) -> LiveMessage {
    LiveMessage::Counts { counts: vec![(format!("p:{post}"), count, version)], committed_at_us: None }
}

fn activity(course_id: i64, kind: ActivityKind, post_id: i64) -> LiveMessage {
    LiveMessage::Activity {
        activity: Activity { course_id, kind, node_id: post_id, post_id, private_to: None, actor: None },
    }
}

/// A load that started before a change and stores after it: dropped if the change may alter
/// which rows it holds; caught up if the change is a count.
#[test]
fn a_load_that_raced_a_change_stores_only_what_is_still_true() {
    let request = PageRequest::new(Some(20), None, None, None).expect("page");
    let pages = CoursePages::new(Duration::from_secs(30));

    // A post created in the course during the load: not kept.
    let start = pages.begin();
    pages.apply(&activity(1, ActivityKind::PostCreated, 9));
    pages.store(start, 1, request, page_of(vec![row(2, 0, 0), row(1, 0, 0)]));
    assert!(pages.get(1, &request).is_none(), "a page missing the new post was kept");

    // A post created in another course, a comment on a post not on the page: kept.
    let start = pages.begin();
    pages.apply(&activity(2, ActivityKind::PostCreated, 9));
    pages.apply(&activity(1, ActivityKind::CommentCreated, 7));
    pages.store(start, 1, request, page_of(vec![row(2, 0, 0), row(1, 0, 0)]));
    assert!(pages.get(1, &request).is_some());
    pages.clear();
    assert!(pages.get(1, &request).is_none(), "clear forgets every page");

    // A comment on a post of the page, an edit of one: not kept.
    for change in [activity(1, ActivityKind::CommentCreated, 2), LiveMessage::PostsChanged { posts: vec![1] }] {
        let start = pages.begin();
        pages.apply(&change);
        pages.store(start, 1, request, page_of(vec![row(2, 0, 0), row(1, 0, 0)]));
        assert!(pages.get(1, &request).is_none(), "kept across {change:?}");
    }

    // Like counts committed during the load: the newer one is patched in, the older ignored.
    let start = pages.begin();
    pages.apply(&counts(2, 5, 8));
    pages.apply(&counts(1, 1, 2));
    pages.apply(&LiveMessage::ViewCounts { counts: vec![(1, 40)] });
    let stored = pages.store(start, 1, request, page_of(vec![row(2, 4, 7), row(1, 3, 3)]));
    let cached = pages.get(1, &request).expect("kept");
    for page in [&stored, &cached] {
        assert_eq!((page.items[0].like_count, page.items[0].like_version), (5, 8));
        assert_eq!((page.items[1].like_count, page.items[1].like_version, page.items[1].view_count), (3, 3, 40));
    }

    // More changes than the log remembers: the load cannot tell what it missed, not kept.
    pages.clear();
    let start = pages.begin();
    for version in 0..5_000 {
        pages.apply(&counts(99, 1, version));
    }
    pages.store(start, 1, request, page_of(vec![row(2, 4, 7)]));
    assert!(pages.get(1, &request).is_none());
}

/// Random writes on two instances while both read the page concurrently (fixed seed): once the
/// writes stop and the relay has delivered, both instances show exactly what the database
/// holds. A load that put back a row older than a change it had heard would stay wrong here
/// until the TTL (30 s), long after the test ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn random_writes_on_two_instances_while_both_read_leave_both_pages_exact() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let peer = app.spawn_peer(|_| {}).await;
    let addrs = [app.addr, peer.addr];
    let users = [world.alice, world.bob, world.instructor];
    let mut posts = Vec::new();
    for i in 0..4 {
        posts.push(app.create_post_at(app.addr, &app.token(world.alice), world.course, &format!("seed {i}")).await);
    }

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = addrs
        .iter()
        .flat_map(|addr| std::iter::repeat_n(*addr, 3))
        .map(|addr| {
            let (stop, http, token) = (stop.clone(), app.http.clone(), app.token(world.bob));
            let body = json!({ "query": PAGE, "variables": { "c": gid("Course", world.course) } });
            tokio::spawn(async move {
                let mut reads = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let response = http
                        .post(format!("http://{addr}/graphql"))
                        .bearer_auth(&token)
                        .json(&body)
                        .send()
                        .await
                        .expect("read");
                    let json: Json = response.json().await.expect("json");
                    assert!(json.get("errors").is_none(), "{json}");
                    reads += 1;
                }
                reads
            })
        })
        .collect();

    let mut rng = StdRng::seed_from_u64(0x7061_6765);
    for step in 0..60 {
        let addr = addrs[rng.random_range(0..2)];
        let post = posts[rng.random_range(0..posts.len())];
        match rng.random_range(0..6) {
            0 => posts
                .push(app.create_post_at(addr, &app.token(world.alice), world.course, &format!("new {step}")).await),
            1 => edit(&app, addr, world.alice, post, &format!("edit {step}")).await,
            2 => {
                comment(&app, addr, users[rng.random_range(0..3)], post).await;
            }
            3 if posts.len() > 2 => {
                delete_post(&app, addr, world.alice, post).await;
                posts.retain(|p| *p != post);
            }
            _ => {
                let like = if rng.random_bool(0.5) { "likePost" } else { "unlikePost" };
                mutate(
                    &app,
                    addr,
                    users[rng.random_range(0..3)],
                    &format!("mutation($p: ID!) {{ {like}(postId: $p) {{ likeCount }} }}"),
                    json!({ "p": gid("Post", post) }),
                )
                .await;
            }
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut reads = 0;
    for reader in readers {
        reads += reader.await.expect("reader");
    }
    assert!(reads > 60, "the readers raced the writes ({reads} reads)");

    let truth = page_in_database(&app, world.course).await;
    for addr in addrs {
        eventually(
            "both instances settle on the database's page",
            async || page_at(&app, addr, world.bob, world.course).await,
            |shown| *shown == truth,
        )
        .await;
    }
    assert_eq!(
        (app.state.course_pages.len(), peer.state.course_pages.len()),
        (1, 1),
        "the pages are cached, not bypassed"
    );
}

const POST: &str = "query($p: ID!) { post(id: $p) { title likeCount commentCount } }";

async fn post_at(app: &TestApp, addr: std::net::SocketAddr, user: i64, post: i64) -> Json {
    app.gql_at(addr, Some(&app.token(user)), POST, json!({ "p": gid("Post", post) })).await
}

/// A post read by id (access checks, likes, `post(id)`) is kept in memory too: read again it
/// costs no Redis command and no statement, and it follows an edit, committed likes, a comment
/// and the delete made on another instance.
#[tokio::test]
async fn a_post_read_by_id_is_kept_in_memory_and_follows_changes_made_elsewhere() {
    let app = TestApp::spawn_with(|s| s.like_mode = LikeMode::Buffered).await;
    let world = World::create(&app).await;
    let peer = app.spawn_peer(|s| s.like_mode = LikeMode::Buffered).await;
    let post = app.create_post_at(peer.addr, &app.token(world.alice), world.course, "first").await;
    post_at(&app, app.addr, world.bob, post).await;
    let before = (app.state.sql_statements.get(), app.state.redis.commands_sent());
    let title = |response: &Json| response["data"]["post"]["title"].as_str().map(str::to_owned);
    assert_eq!(title(&post_at(&app, app.addr, world.bob, post).await).as_deref(), Some("first"));
    assert_eq!((app.state.sql_statements.get() - before.0, app.state.redis.commands_sent() - before.1), (0, 0));

    let read = async |wanted: &dyn Fn(&Json) -> bool, what: &str| {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let response = post_at(&app, app.addr, world.bob, post).await;
            if wanted(&response) {
                return;
            }
            assert!(Instant::now() < deadline, "{what}: still {response}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    edit(&app, peer.addr, world.alice, post, "edited").await;
    read(&|r| title(r).as_deref() == Some("edited"), "an edit on the peer").await;
    mutate(
        &app,
        peer.addr,
        world.bob,
        "mutation($p: ID!) { likePost(postId: $p) { likeCount } }",
        json!({ "p": gid("Post", post) }),
    )
    .await;
    app.worker().await.drain().await.expect("drain");
    read(&|r| r["data"]["post"]["likeCount"] == 1, "a like committed").await;
    comment(&app, peer.addr, world.bob, post).await;
    read(&|r| r["data"]["post"]["commentCount"] == 1, "a comment on the peer").await;
    delete_post(&app, peer.addr, world.alice, post).await;
    read(&|r| common::error_code(r).as_deref() == Some("NOT_FOUND"), "a delete on the peer").await;
}

/// A HOT or TOP first page, as `(post id, likeCount)` in order.
async fn ranked_at(app: &TestApp, addr: std::net::SocketAddr, user: i64, course: i64, order: &str) -> Vec<(i64, i64)> {
    let query = format!(
        "query($c: ID!) {{ course(id: $c) {{ posts(first: 20, orderBy: {order}) {{ edges {{ node {{ id likeCount }} }} }} }} }}"
    );
    let response = app.gql_at(addr, Some(&app.token(user)), &query, json!({ "c": gid("Course", course) })).await;
    assert!(response.get("errors").is_none(), "{order} page failed: {response}");
    response["data"]["course"]["posts"]["edges"]
        .as_array()
        .expect("edges")
        .iter()
        .map(|edge| {
            (raw_id(edge["node"]["id"].as_str().expect("id")), edge["node"]["likeCount"].as_i64().expect("count"))
        })
        .collect()
}

/// The first page of HOT and TOP is kept for half a second: read again at once it costs no
/// statement, yet a like taken on this instance reorders it at once, a deleted post leaves it
/// at once, and even a change nobody published shows within the second.
#[tokio::test]
async fn a_ranked_first_page_is_kept_briefly_and_follows_likes_and_deletes_at_once() {
    let app = TestApp::spawn_with(|s| s.like_mode = LikeMode::Sync).await;
    let world = World::create(&app).await;
    let mut posts = Vec::new();
    for i in 0..3 {
        posts.push(app.create_post_at(app.addr, &app.token(world.alice), world.course, &format!("post {i}")).await);
    }
    let (oldest, middle, newest) = (posts[0], posts[1], posts[2]);
    app.own_echoes_heard().await;
    for order in ["HOT", "TOP"] {
        let kept_at = Instant::now();
        let first = ranked_at(&app, app.addr, world.bob, world.course, order).await;
        assert_eq!(first, vec![(newest, 0), (middle, 0), (oldest, 0)], "{order}: equal engagement, newest first");
        let statements = app.state.sql_statements.get();
        assert_eq!(ranked_at(&app, app.addr, world.bob, world.course, order).await, first);
        // Only while the page can still be kept: a machine stalled past the TTL reads again.
        if kept_at.elapsed() < RANKED_PAGE_TTL {
            assert_eq!(app.state.sql_statements.get() - statements, 0, "{order}: the first page again, from memory");
        }
    }

    // Two likes: one would not move HOT (log10(max(1, 1)) is 0).
    for user in [world.bob, world.instructor] {
        let like = "mutation($p: ID!) { likePost(postId: $p) { id } }";
        mutate(&app, app.addr, user, like, json!({ "p": gid("Post", oldest) })).await;
    }
    for order in ["HOT", "TOP"] {
        let shown = ranked_at(&app, app.addr, world.bob, world.course, order).await;
        assert_eq!(shown[0], (oldest, 2), "{order}: the likes reorder the kept page at once");
    }

    mutate(
        &app,
        app.addr,
        world.alice,
        "mutation($p: ID!) { deletePost(postId: $p) { deletedId } }",
        json!({ "p": gid("Post", oldest) }),
    )
    .await;
    for order in ["HOT", "TOP"] {
        let shown = ranked_at(&app, app.addr, world.bob, world.course, order).await;
        assert_eq!(shown, vec![(newest, 0), (middle, 0)], "{order}: the deleted post left at once");
    }

    // Behind the server's back: no message tells the instance, the TTL bounds it.
    let changed_at = Instant::now();
    app.scalar_i64("UPDATE posts SET like_count = 50 WHERE id = $1 RETURNING id AS v", [middle.into()]).await;
    loop {
        if ranked_at(&app, app.addr, world.bob, world.course, "TOP").await[0] == (middle, 50) {
            break;
        }
        assert!(changed_at.elapsed() < Duration::from_secs(2), "an unpublished change still hidden after 2 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Memory a client cannot grow (issue 27): pages only under cursors the server handed out,
// posts only once access is proven, everything under CACHE_BUDGET_BYTES.
// ---------------------------------------------------------------------------------------------

/// A keyset cursor as the API of 6b52d0b encoded it, for any id a client cares to name.
fn forged_cursor(id: i64) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("k:{id}"))
}

/// `n` posts of `body_bytes` each in the course, written by SQL (the pages read them later).
async fn posts_by_sql(app: &TestApp, course: i64, author: i64, n: i64, body_bytes: i64) {
    let made = app
        .scalar_i64(
            "WITH c AS (INSERT INTO posts (course_id, user_id, title, body) \
             SELECT $1, $2, 'post ' || g, repeat('x', $4::int) FROM generate_series(1, $3::int) g RETURNING 1) \
             SELECT count(*) AS v FROM c",
            [course.into(), author.into(), n.into(), body_bytes.into()],
        )
        .await;
    assert_eq!(made, n);
}

/// The edges' cursors and `endCursor` of one NEW page.
async fn cursors_of(app: &TestApp, user: i64, course: i64, first: i64, after: Option<&str>) -> (Vec<String>, String) {
    let response = app
        .gql(
            Some(&app.token(user)),
            "query($c: ID!, $n: Int!, $a: String) { course(id: $c) { posts(first: $n, after: $a) { \
             edges { cursor } pageInfo { endCursor } } } }",
            json!({ "c": gid("Course", course), "n": first, "a": after }),
        )
        .await;
    assert!(response.get("errors").is_none(), "page failed: {response}");
    let posts = &response["data"]["course"]["posts"];
    let edges = posts["edges"].as_array().expect("edges");
    let cursors = edges.iter().map(|e| e["cursor"].as_str().expect("cursor").to_owned()).collect();
    (cursors, posts["pageInfo"]["endCursor"].as_str().unwrap_or_default().to_owned())
}

/// The finding: a member asked for pages after cursors past the newest post, each a new key
/// holding the same rows, and every one was kept. Now a page is kept only when it is a first
/// page or its cursor is a boundary of a page kept here; forged cursors, and cursors from the
/// middle of a page, are answered and forgotten. Following `endCursor` is still kept.
#[tokio::test]
async fn cursors_the_server_did_not_hand_out_as_page_boundaries_do_not_grow_the_page_cache() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    posts_by_sql(&app, world.course, world.alice, 30, 100).await;
    let (cursors, end) = cursors_of(&app, world.bob, world.course, 10, None).await;
    assert_eq!(cursors.len(), 10);
    // The next page after the end cursor the server handed out: kept, as paging should be.
    cursors_of(&app, world.bob, world.course, 10, Some(&end)).await;
    assert_eq!(app.state.course_pages.len(), 2, "the first page and the one after its endCursor");
    let (pages_before, _) = app.state.course_pages.figures();

    // 60 forged cursors past the newest post, 10 aliases a request (as the finding sent 30).
    let newest = app.scalar_i64("SELECT max(id) AS v FROM posts", []).await;
    for batch in 0..6 {
        let aliases: String = (0..10)
            .map(|i| {
                let cursor = forged_cursor(newest + 1_000 + batch * 10 + i);
                format!("a{i}: posts(first: 10, after: \"{cursor}\") {{ edges {{ node {{ id }} }} }} ")
            })
            .collect();
        let query = format!("query($c: ID!) {{ course(id: $c) {{ {aliases} }} }}");
        let response = app.gql(Some(&app.token(world.bob)), &query, json!({ "c": gid("Course", world.course) })).await;
        // Answered (the newest posts again) or, where cursors are authenticated, refused as
        // BAD_USER_INPUT: either way nothing may be kept for them.
        match common::error_code(&response) {
            None => assert_eq!(response["data"]["course"]["a0"]["edges"].as_array().map(Vec::len), Some(10)),
            Some(code) => assert_eq!(code, "BAD_USER_INPUT", "{response}"),
        }
    }
    // Cursors the server did hand out, from the middle of the first page: served, not kept.
    for (i, cursor) in cursors.iter().enumerate().take(9).skip(1) {
        let (shown, _) = cursors_of(&app, world.bob, world.course, 10, Some(cursor)).await;
        assert_eq!(shown.len(), 10, "the page after the {i}th post");
    }

    assert_eq!(app.state.course_pages.len(), 2, "no page kept for a cursor the server did not hand out as a boundary");
    let (pages_after, _) = app.state.course_pages.figures();
    assert_eq!(pages_after.entries, pages_before.entries);
    assert_eq!(pages_after.used_bytes, pages_before.used_bytes);
}

/// The finding: `post(id)` kept the post in memory before checking that the reader belongs to
/// its course, so anyone signed in could fill that memory with other courses' posts. Now a
/// post is kept only once the check passed: not for an outsider's read or like, but for a
/// member's.
#[tokio::test]
async fn a_non_member_reading_or_liking_a_post_does_not_make_the_instance_keep_it() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let post = app.create_post_at(app.addr, &app.token(world.alice), world.course, "members only").await;
    let variables = json!({ "p": gid("Post", post) });
    let read = app.gql(Some(&app.token(world.outsider)), POST, variables.clone()).await;
    assert_eq!(common::error_code(&read).as_deref(), Some("FORBIDDEN"), "{read}");
    let like = app
        .gql(
            Some(&app.token(world.outsider)),
            "mutation($p: ID!) { likePost(postId: $p) { likeCount } }",
            variables.clone(),
        )
        .await;
    assert_eq!(common::error_code(&like).as_deref(), Some("FORBIDDEN"), "{like}");
    assert!(app.state.course_pages.post(post).is_none(), "an outsider's read put the post in memory");

    let read = app.gql(Some(&app.token(world.bob)), POST, variables).await;
    assert_eq!(read["data"]["post"]["title"], "members only", "{read}");
    assert!(app.state.course_pages.post(post).is_some(), "a member's read keeps it");
}

/// The finding's shape with the budget small: 100 posts of 20 KB, and a member reading pages
/// of every size (each a distinct page the server may keep, 100 MB of rows together), walking
/// on by their end cursors; and 100 more read one by one by id. What every cache holds stays
/// within CACHE_BUDGET_BYTES, each within its share, and pages and posts are still kept.
#[tokio::test]
async fn a_flood_of_large_pages_and_posts_stays_within_the_cache_budget() {
    const BUDGET: u64 = 8 << 20;
    let app = TestApp::spawn_with(|s| s.cache_budget_bytes = BUDGET).await;
    let world = World::create(&app).await;
    posts_by_sql(&app, world.course, world.alice, 100, 20_000).await;
    for first in 1..=100 {
        let (_, end) = cursors_of(&app, world.bob, world.course, first, None).await;
        if first % 10 == 0 {
            // Walk on by the cursors the server hands out (these pages may be kept too).
            let mut after = end;
            for _ in 0..3 {
                if after.is_empty() {
                    break;
                }
                after = cursors_of(&app, world.bob, world.course, first, Some(&after)).await.1;
            }
        }
    }
    // And 100 posts of 20 KB read by id, in a course whose pages nobody read (so each is kept
    // alone, not found on a page).
    posts_by_sql(&app, world.other_course, world.outsider, 100, 20_000).await;
    let newest = app.scalar_i64("SELECT max(id) AS v FROM posts", []).await;
    let reader = app.token(world.outsider);
    for id in newest - 99..=newest {
        let response = app.gql(Some(&reader), POST, json!({ "p": gid("Post", id) })).await;
        assert!(response.get("errors").is_none(), "{response}");
    }

    let budget = &app.state.cache_budget;
    assert_eq!(budget.total_bytes(), BUDGET);
    let figures = budget.figures();
    for (name, f) in &figures {
        assert!(f.used_bytes <= f.capacity_bytes, "{name:?} over its share: {f:?}");
    }
    let used = budget.used_bytes();
    assert!(used <= BUDGET, "the caches hold {used} bytes, over the budget of {BUDGET}");
    let (pages, posts) = app.state.course_pages.figures();
    assert!(pages.entries >= 1 && pages.used_bytes > 1 << 20, "pages are still kept: {pages:?}");
    assert!(posts.entries >= 1, "posts are still kept: {posts:?}");
    assert!(posts.entries < 100, "100 posts of 20 KB do not fit the posts' share: {posts:?}");
}

/// Reads `/metrics` as `(name, cache label) → value` for the per-cache gauges.
async fn cache_gauges(app: &TestApp) -> std::collections::HashMap<(String, String), f64> {
    let text = app.http.get(app.url("/metrics")).send().await.expect("metrics").text().await.expect("text");
    text.lines()
        .filter(|line| {
            line.starts_with("cache_used_bytes{")
                || line.starts_with("cache_entries{")
                || line.starts_with("cache_capacity_bytes{")
        })
        .filter_map(|line| {
            let (name, rest) = line.split_once('{')?;
            let cache = rest.split("cache=\"").nth(1)?.split('"').next()?;
            let value = line.rsplit(' ').next()?.parse().ok()?;
            Some(((name.to_owned(), cache.to_owned()), value))
        })
        .collect()
}

/// Every in-process cache shows what it holds and its share in `/metrics`, labelled by cache,
/// and the shares add up to the budget.
#[tokio::test]
async fn per_cache_figures_appear_in_metrics() {
    // It reads /metrics, which counts for the whole process.
    if crate::common::ran_alone_elsewhere().await {
        return;
    }
    let app = TestApp::spawn_with(|s| s.cache_budget_bytes = 64 << 20).await;
    let world = World::create(&app).await;
    app.create_post_at(app.addr, &app.token(world.alice), world.course, "counted").await;
    // The post's echo drops the course's pages: a page read before it arrives is not kept.
    app.own_echoes_heard().await;
    page_at(&app, app.addr, world.bob, world.course).await;
    let gauges = cache_gauges(&app).await;
    let value = |name: &str, cache: &str| {
        *gauges.get(&(name.to_owned(), cache.to_owned())).unwrap_or_else(|| panic!("no {name}{{cache=\"{cache}\"}}"))
    };
    let caches =
        ["course_pages", "course_pages_index", "posts", "users", "memberships", "parsed_documents", "course_titles"];
    let mut shares = 0.0;
    for cache in caches {
        assert!(value("cache_used_bytes", cache) <= value("cache_capacity_bytes", cache), "{cache}");
        value("cache_entries", cache);
        shares += value("cache_capacity_bytes", cache);
    }
    assert!(shares <= (64u64 << 20) as f64);
    assert!(value("cache_entries", "course_pages") >= 1.0, "the page just read");
    assert!(value("cache_used_bytes", "course_pages") > 0.0);
    assert!(value("cache_entries", "users") >= 1.0, "its author");
    assert!(value("cache_entries", "memberships") >= 1.0, "the reader's roles");
}
