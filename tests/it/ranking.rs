//! HOT and TOP orders of a course's posts (`Course.posts(orderBy:)`): TOP is most liked first,
//! HOT is `log10(max(1, likes + 2 × comments)) + created_at epoch / 45000`, both newest id first
//! among equals; NEW stays newest first. A ranked walk pages forward only, its cursor carrying
//! the posts it has shown, so while likes move posts across page boundaries it never repeats
//! nor skips one, and ends after 1,000 posts. A like moves the orders as soon as it commits (in
//! each like mode); deleted posts leave them at once; `reconcile` rebuilds them from the rows.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use course_forum::testing::config::LikeMode;
use course_forum::testing::like_event::LikeTarget;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use sea_orm::{ConnectionTrait, DbBackend, Statement, Value};
use serde_json::{Value as Json, json};

use crate::common::likes::{Target, toggle};
use crate::common::{TestApp, World, error_code, gid, raw_id};

const POSTS: &str = "query($id: ID!, $order: PostOrder!, $first: Int, $after: String, $last: Int, $before: String) {
  course(id: $id) {
    posts(orderBy: $order, first: $first, after: $after, last: $last, before: $before) {
      pageInfo { hasNextPage hasPreviousPage endCursor }
      edges { cursor node { id } }
    }
  }
}";

/// `Course.posts` without `orderBy`: the default order.
const POSTS_DEFAULT_ORDER: &str = "query($id: ID!) { course(id: $id) { posts(first: 100) { edges { node { id } } } } }";

/// A fixed "now" for the posts' `created_at`: HOT depends on creation times, and fixed ones
/// make every expected order (and the seeded fixtures' scores) the same on every run.
const BASE_EPOCH: i64 = 1_780_000_000;
const HOUR: i64 = 3600;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Order {
    New,
    Hot,
    Top,
}

impl Order {
    fn name(self) -> &'static str {
        match self {
            Order::New => "NEW",
            Order::Hot => "HOT",
            Order::Top => "TOP",
        }
    }
}

/// What ranks a post: its counts and creation time (Unix seconds).
#[derive(Clone, Copy, Debug)]
struct Standing {
    id: i64,
    likes: i32,
    comments: i32,
    created: i64,
}

impl Standing {
    /// `post_hot_score()` of migration 0009, in the same floating-point steps.
    fn hot_score(&self) -> f64 {
        f64::from((self.likes + 2 * self.comments).max(1)).log10() + self.created as f64 / 45000.0
    }
}

/// Whether `a` ranks before `b` (`Less`) in `order`.
fn rank_cmp(order: Order, a: &Standing, b: &Standing) -> Ordering {
    let newest_first = b.id.cmp(&a.id);
    match order {
        Order::New => newest_first,
        Order::Top => b.likes.cmp(&a.likes).then(newest_first),
        Order::Hot => b.hot_score().total_cmp(&a.hot_score()).then(newest_first),
    }
}

/// The ids of `posts` in `order`, as the server must rank them.
fn ranked<'a>(posts: impl IntoIterator<Item = &'a Standing>, order: Order) -> Vec<i64> {
    let mut posts: Vec<&Standing> = posts.into_iter().collect();
    posts.sort_by(|a, b| rank_cmp(order, a, b));
    if order == Order::Hot {
        // PostgreSQL and Rust compute the same IEEE steps, but a fixture whose scores differ in
        // the last bits would test rounding, not ranking: refuse one rather than flake.
        for pair in posts.windows(2) {
            let gap = pair[0].hot_score() - pair[1].hot_score();
            assert!(gap == 0.0 || gap > 1e-9, "fixture: posts {} and {} are too close in HOT", pair[0].id, pair[1].id);
        }
    }
    posts.iter().map(|p| p.id).collect()
}

/// Runs a statement that returns nothing the test needs.
async fn exec<I: IntoIterator<Item = Value>>(app: &TestApp, sql: &str, values: I) {
    app.db
        .execute_raw(Statement::from_sql_and_values(DbBackend::Postgres, sql, values))
        .await
        .unwrap_or_else(|e| panic!("`{sql}` failed: {e}"));
}

/// Writes a post's counts and creation time straight into PostgreSQL (`hot_score`, a
/// generated column, follows in the same statement).
async fn store(app: &TestApp, post: &Standing) {
    exec(
        app,
        "UPDATE posts SET like_count = $2, comment_count = $3, created_at = to_timestamp($4::double precision) \
         WHERE id = $1",
        [post.id.into(), post.likes.into(), post.comments.into(), (post.created as f64).into()],
    )
    .await;
}

async fn set_created(app: &TestApp, post: i64, epoch: i64) {
    exec(
        app,
        "UPDATE posts SET created_at = to_timestamp($2::double precision) WHERE id = $1",
        [post.into(), (epoch as f64).into()],
    )
    .await;
}

/// (like_count, comment_count) as committed.
async fn counts_in_db(app: &TestApp, post: i64) -> (i32, i32) {
    let likes = app.scalar_i64("SELECT like_count::bigint AS v FROM posts WHERE id = $1", [post.into()]).await;
    let comments = app.scalar_i64("SELECT comment_count::bigint AS v FROM posts WHERE id = $1", [post.into()]).await;
    (likes as i32, comments as i32)
}

/// One page of `Course.posts`, reduced to what the tests check.
#[derive(Debug)]
struct Page {
    ids: Vec<i64>,
    cursors: Vec<String>,
    has_next: bool,
    has_prev: bool,
    end: Option<String>,
}

/// `Course.posts` with `args` (`first`, `after`, `last`, `before`): the whole response.
async fn posts_raw(app: &TestApp, token: &str, course: i64, order: Order, args: Json) -> Json {
    let mut variables = json!({ "id": gid("Course", course), "order": order.name() });
    variables.as_object_mut().expect("object").extend(args.as_object().expect("args object").clone());
    app.gql(Some(token), POSTS, variables).await
}

async fn page(app: &TestApp, token: &str, course: i64, order: Order, first: i32, after: Option<&str>) -> Page {
    let response = posts_raw(app, token, course, order, json!({ "first": first, "after": after })).await;
    assert!(response.get("errors").is_none(), "unexpected errors: {response}");
    let conn = &response["data"]["course"]["posts"];
    let edges = conn["edges"].as_array().expect("edges");
    let info = &conn["pageInfo"];
    let end = info["endCursor"].as_str().map(str::to_owned);
    assert_eq!(end.as_deref(), edges.last().and_then(|e| e["cursor"].as_str()), "endCursor: {conn}");
    Page {
        ids: edges.iter().map(|e| raw_id(e["node"]["id"].as_str().expect("node id"))).collect(),
        cursors: edges.iter().map(|e| e["cursor"].as_str().expect("cursor").to_owned()).collect(),
        has_next: info["hasNextPage"].as_bool().expect("hasNextPage"),
        has_prev: info["hasPreviousPage"].as_bool().expect("hasPreviousPage"),
        end,
    }
}

/// Every live post of the course in `order` (a walk of pages of 100).
async fn whole_order(app: &TestApp, token: &str, course: i64, order: Order) -> Vec<i64> {
    let mut ids = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = page(app, token, course, order, 100, after.as_deref()).await;
        ids.extend(page.ids);
        if !page.has_next {
            return ids;
        }
        after = page.end;
    }
}

/// The first post of `order`.
async fn top_of(app: &TestApp, token: &str, course: i64, order: Order) -> Option<i64> {
    page(app, token, course, order, 1, None).await.ids.first().copied()
}

async fn comment(app: &TestApp, user: i64, post: i64) -> String {
    gid("Comment", app.create_comment(&app.token(user), post, "a comment").await)
}

async fn reply(app: &TestApp, user: i64, comment: &str) {
    app.create_reply(&app.token(user), comment, "a reply").await;
}

/// `n` more students of the course, to like posts.
async fn fans(app: &TestApp, course: i64, n: usize) -> Vec<i64> {
    let mut fans = Vec::new();
    for i in 0..n {
        let fan = app.create_user(&format!("fan{i}")).await;
        app.enroll(course, fan, "student").await;
        fans.push(fan);
    }
    fans
}

/// Gives `post` `likes` likes (from the first fans) and `comments` comments, the last of them a
/// reply (replies count as comments), all through the API.
async fn engage(app: &TestApp, world: &World, fans: &[i64], post: i64, likes: usize, comments: usize) {
    for &fan in &fans[..likes] {
        toggle(app, fan, Target::Post(post), true).await;
    }
    let top_level = if comments >= 2 { comments - 1 } else { comments };
    let mut last_comment = None;
    for _ in 0..top_level {
        last_comment = Some(comment(app, world.bob, post).await);
    }
    if let (true, Some(root)) = (comments >= 2, last_comment) {
        reply(app, world.bob, &root).await;
    }
}

#[tokio::test]
async fn top_and_hot_rank_by_likes_comments_and_age_while_new_stays_newest_first() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let fans = fans(&app, world.course, 6).await;
    // (likes, comments, age): the most liked post is 30 hours old, so HOT ranks it last.
    let plan = [(6, 0, 30 * HOUR), (3, 1, HOUR), (1, 2, 2 * HOUR), (0, 0, 0), (2, 0, 5 * HOUR)];
    let mut posts = Vec::new();
    for (n, &(likes, comments, age)) in plan.iter().enumerate() {
        let id = app.create_post(&alice, world.course, &format!("post {n}")).await;
        engage(&app, &world, &fans, id, likes, comments).await;
        assert_eq!(counts_in_db(&app, id).await, (likes as i32, comments as i32), "post {n}'s counts committed");
        set_created(&app, id, BASE_EPOCH - age).await;
        posts.push(Standing { id, likes: likes as i32, comments: comments as i32, created: BASE_EPOCH - age });
    }
    // Another course's post outranks them all, and must stay in its own course.
    let elsewhere = app.create_post(&app.token(world.outsider), world.other_course, "elsewhere").await;
    store(&app, &Standing { id: elsewhere, likes: 1000, comments: 10, created: BASE_EPOCH }).await;

    let top = whole_order(&app, &alice, world.course, Order::Top).await;
    let hot = whole_order(&app, &alice, world.course, Order::Hot).await;
    assert_eq!(top, ranked(&posts, Order::Top), "TOP: most liked first");
    assert_eq!(hot, ranked(&posts, Order::Hot), "HOT: by the formula");
    // The premise of HOT: the old post with 6 likes is first in TOP but below the hour-old one
    // with 3 likes and a comment in HOT.
    let (old, newer) = (posts[0].id, posts[1].id);
    assert_eq!(top[0], old);
    let at = |id: i64| hot.iter().position(|&p| p == id).expect("in HOT");
    assert!(at(old) > at(newer), "an old post with more likes ranks below a newer one with fewer: {hot:?}");

    let mut newest_first: Vec<i64> = posts.iter().map(|p| p.id).collect();
    newest_first.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(whole_order(&app, &alice, world.course, Order::New).await, newest_first, "NEW: newest first");
    let data = app.gql_ok(Some(&alice), POSTS_DEFAULT_ORDER, json!({ "id": gid("Course", world.course) })).await;
    let default: Vec<i64> = data["course"]["posts"]["edges"]
        .as_array()
        .expect("edges")
        .iter()
        .map(|e| raw_id(e["node"]["id"].as_str().expect("id")))
        .collect();
    assert_eq!(default, newest_first, "without orderBy the order is NEW");
}

#[tokio::test]
async fn a_deleted_post_leaves_hot_and_top_at_once() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let mut posts = Vec::new();
    for (n, likes) in [0, 9, 4, 2].into_iter().enumerate() {
        let id = app.create_post(&alice, world.course, &format!("post {n}")).await;
        let post = Standing { id, likes, comments: 1, created: BASE_EPOCH - n as i64 * HOUR };
        store(&app, &post).await;
        posts.push(post);
    }
    for order in [Order::Hot, Order::Top] {
        assert_eq!(whole_order(&app, &alice, world.course, order).await, ranked(&posts, order), "{order:?}");
    }
    // The best-ranked post in both orders.
    let doomed = posts[1].id;
    assert_eq!(top_of(&app, &alice, world.course, Order::Top).await, Some(doomed));
    app.delete_post(&app.token(world.alice), doomed).await;
    posts.retain(|p| p.id != doomed);
    for order in [Order::Hot, Order::Top] {
        assert_eq!(
            whole_order(&app, &alice, world.course, order).await,
            ranked(&posts, order),
            "{order:?} right after deletePost"
        );
    }
}

/// The like count that puts `riser` (its comments and age kept) above `target` in `order`,
/// with a clear margin; capped so the counts stay far from integer overflow.
fn likes_to_outrank(order: Order, riser: &Standing, target: &Standing, rng: &mut StdRng) -> i32 {
    match order {
        Order::Top => target.likes + rng.random_range(1..=20),
        Order::Hot => {
            // Engagement e with log10(e) + created / 45000 > target's score; twice that.
            let needed = 10f64.powf(target.hot_score() - riser.created as f64 / 45000.0);
            let likes = (2.0 * needed - 2.0 * f64::from(riser.comments)).max(0.0).ceil() + 1.0;
            likes.min(100_000_000.0) as i32
        }
        Order::New => unreachable!("NEW does not follow likes"),
    }
}

/// Walks `order` five posts a page over ~30 posts while, between pages, some posts not yet
/// shown rise above shown ones, shown ones fall, one post is deleted and one is created: every
/// page must be the best-ranked posts not yet shown as ranked at that moment, no post twice,
/// and the walk must end having shown every live post.
async fn walk_while_scores_move(order: Order) {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let mut rng = StdRng::seed_from_u64(0x2026_1204);
    let mut posts: BTreeMap<i64, Standing> = BTreeMap::new();
    for n in 0..30 {
        let id = app.create_post(&alice, world.course, &format!("post {n}")).await;
        let post = Standing {
            id,
            likes: rng.random_range(0..40),
            comments: rng.random_range(0..8),
            created: BASE_EPOCH - rng.random_range(HOUR..48 * HOUR),
        };
        store(&app, &post).await;
        posts.insert(id, post);
    }

    let mut shown: Vec<i64> = Vec::new();
    let mut after: Option<String> = None;
    let (mut overtakes, mut deleted, mut created) = (0, None, None);
    for step in 0.. {
        assert!(step < 12, "the walk did not end");
        let remaining = ranked(posts.values().filter(|p| !shown.contains(&p.id)), order);
        let page = page(&app, &alice, world.course, order, 5, after.as_deref()).await;
        for id in &page.ids {
            assert!(!shown.contains(id), "page {step}: post {id} was shown before");
        }
        assert_eq!(page.ids, remaining[..remaining.len().min(5)], "page {step}: the best not yet shown, as ranked now");
        assert_eq!(page.has_next, remaining.len() > 5, "page {step}: hasNextPage");
        assert_eq!(page.has_prev, step > 0, "page {step}: hasPreviousPage");
        shown.extend(&page.ids);
        if !page.has_next {
            break;
        }
        after = page.end;

        // Likes arrive: two posts not yet shown rise above a shown one each; two shown posts
        // and one not yet shown lose everything.
        let mut unshown = remaining[5..].to_vec();
        unshown.shuffle(&mut rng);
        let mut was_shown = shown.clone();
        was_shown.shuffle(&mut rng);
        for &riser in unshown.iter().take(2) {
            let target = posts[&shown[rng.random_range(0..shown.len())]];
            let post = posts.get_mut(&riser).expect("known post");
            post.likes = likes_to_outrank(order, post, &target, &mut rng);
            store(&app, post).await;
            if rank_cmp(order, post, &target) == Ordering::Less {
                overtakes += 1;
            }
        }
        for &faller in was_shown.iter().take(2).chain(unshown.get(2)) {
            let post = posts.get_mut(&faller).expect("known post");
            (post.likes, post.comments) = (0, 0);
            store(&app, post).await;
        }
        if step == 1
            && let Some(&doomed) = unshown.get(3)
        {
            app.delete_post(&app.token(world.alice), doomed).await;
            posts.remove(&doomed);
            deleted = Some(doomed);
        }
        if step == 2 {
            let id = app.create_post(&alice, world.course, "a latecomer").await;
            let post = Standing { id, likes: rng.random_range(0..40), comments: 2, created: BASE_EPOCH };
            store(&app, &post).await;
            posts.insert(id, post);
            created = Some(id);
        }
    }

    let walked: BTreeSet<i64> = shown.iter().copied().collect();
    assert_eq!(walked.len(), shown.len(), "no post twice");
    assert_eq!(walked, posts.keys().copied().collect::<BTreeSet<i64>>(), "the walk showed every live post");
    let (deleted, created) = (deleted.expect("a post was deleted"), created.expect("a post was created"));
    assert!(!walked.contains(&deleted) && walked.contains(&created));
    // The fixture's premise: posts did jump above already-shown ones.
    assert!(overtakes >= 3, "only {overtakes} post(s) rose above a shown one");
}

#[tokio::test]
async fn a_hot_walk_neither_repeats_nor_skips_while_likes_move_posts() {
    walk_while_scores_move(Order::Hot).await;
}

#[tokio::test]
async fn a_top_walk_neither_repeats_nor_skips_while_likes_move_posts() {
    walk_while_scores_move(Order::Top).await;
}

#[tokio::test]
async fn an_edge_cursor_resumes_right_after_its_edge() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let mut posts = Vec::new();
    for n in 0..8 {
        let id = app.create_post(&alice, world.course, &format!("post {n}")).await;
        let post = Standing { id, likes: (n * 5) % 8, comments: n % 3, created: BASE_EPOCH - n as i64 * 600 };
        store(&app, &post).await;
        posts.push(post);
    }
    for order in [Order::Hot, Order::Top] {
        let expected = ranked(&posts, order);
        let first = page(&app, &alice, world.course, order, 5, None).await;
        assert_eq!(first.ids, expected[..5]);
        // The second edge's cursor has shown only the first two: the third comes next.
        let resumed = page(&app, &alice, world.course, order, 3, Some(&first.cursors[1])).await;
        assert_eq!(resumed.ids, expected[2..5], "{order:?}");
        assert!(resumed.has_next && resumed.has_prev, "{order:?}: {resumed:?}");
    }
}

#[tokio::test]
async fn a_ranked_walk_ends_after_a_thousand_posts() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let inserted = app
        .scalar_i64(
            "WITH ins AS (INSERT INTO posts (course_id, user_id, title, body, like_count) \
             SELECT $1, $2, 'bulk ' || g, 'body', g FROM generate_series(1, 1001) g RETURNING id) \
             SELECT count(*) AS v FROM ins",
            [world.course.into(), world.alice.into()],
        )
        .await;
    assert_eq!(inserted, 1001);
    let least_liked = app.scalar_i64("SELECT id AS v FROM posts WHERE like_count = 1", []).await;

    let mut walked = BTreeSet::new();
    let mut after: Option<String> = None;
    for n in 1..=10 {
        let page = page(&app, &alice, world.course, Order::Top, 100, after.as_deref()).await;
        assert_eq!(page.ids.len(), 100, "page {n}");
        walked.extend(page.ids);
        assert_eq!(page.has_next, n < 10, "page {n}: the walk ends at 1,000 posts");
        after = page.end;
    }
    assert_eq!(walked.len(), 1000, "1,000 distinct posts");
    assert!(!walked.contains(&least_liked), "the 1,001st post is past the walk's end");
    // Asking past the end anyway: nothing more.
    let past = page(&app, &alice, world.course, Order::Top, 100, after.as_deref()).await;
    assert!(past.ids.is_empty() && !past.has_next, "{past:?}");
}

/// Polls PostgreSQL until `post`'s committed like count is `likes`; returns when it saw it.
async fn until_like_count(app: &TestApp, post: i64, likes: i32) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if counts_in_db(app, post).await.0 == likes {
            return Instant::now();
        }
        assert!(Instant::now() < deadline, "post {post} did not reach {likes} like(s) within 10 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn a_like_lifts_a_post_to_the_top_within_a_second_of_its_commit(mode: LikeMode) {
    let app = TestApp::spawn_with(|s| {
        s.like_mode = mode;
        // Buffered: the worker applies the streams inside the server, as in production.
        s.worker_in_serve = mode == LikeMode::Buffered;
    })
    .await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let low = app.create_post(&alice, world.course, "low").await;
    let liked = app.create_post(&alice, world.course, "liked").await;
    app.create_post(&alice, world.course, "newest").await;
    toggle(&app, world.bob, Target::Post(liked), true).await;
    until_like_count(&app, liked, 1).await;
    for order in [Order::Top, Order::Hot] {
        let before = whole_order(&app, &alice, world.course, order).await;
        assert_eq!(before.last(), Some(&low), "{order:?}: the oldest unliked post starts last");
    }

    // Two likes: above the one like in TOP, and log10(2) outweighs seconds of age in HOT.
    toggle(&app, world.instructor, Target::Post(low), true).await;
    toggle(&app, world.alice, Target::Post(low), true).await;
    let committed = until_like_count(&app, low, 2).await;
    for order in [Order::Top, Order::Hot] {
        loop {
            let first = top_of(&app, &alice, world.course, order).await;
            if first == Some(low) {
                break;
            }
            // Sync commits before likePost answers: the order must show it at once.
            assert!(mode == LikeMode::Buffered, "{order:?} right after the like: {first:?} first, not {low}");
            assert!(
                committed.elapsed() < Duration::from_secs(1),
                "{order:?} still had {first:?} first 1 s after the commit"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(committed.elapsed() < Duration::from_secs(1), "{order:?} showed the like only after 1 s");
    }
}

in_each_like_mode!(a_like_lifts_a_post_to_the_top_within_a_second_of_its_commit);

#[tokio::test]
async fn ranked_orders_refuse_backward_paging_foreign_cursors_and_bad_sizes() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    for n in 0..3 {
        app.create_post(&alice, world.course, &format!("post {n}")).await;
    }
    let new_cursor = page(&app, &alice, world.course, Order::New, 1, None).await.end.expect("a NEW cursor");
    let hot_cursor = page(&app, &alice, world.course, Order::Hot, 1, None).await.end.expect("a HOT cursor");
    let top_cursor = page(&app, &alice, world.course, Order::Top, 1, None).await.end.expect("a TOP cursor");
    // The control: each ranked cursor continues its own walk.
    assert!(page(&app, &alice, world.course, Order::Hot, 1, Some(&hot_cursor)).await.has_prev);
    assert!(page(&app, &alice, world.course, Order::Top, 1, Some(&top_cursor)).await.has_prev);

    let cases = [
        ("last with HOT", Order::Hot, json!({ "last": 1 })),
        ("last with TOP", Order::Top, json!({ "last": 2 })),
        ("before with HOT", Order::Hot, json!({ "first": 1, "before": hot_cursor })),
        ("last and before with HOT", Order::Hot, json!({ "last": 1, "before": hot_cursor })),
        ("a NEW cursor to HOT", Order::Hot, json!({ "first": 1, "after": new_cursor })),
        ("a NEW cursor to TOP", Order::Top, json!({ "first": 1, "after": new_cursor })),
        ("a HOT cursor to TOP", Order::Top, json!({ "first": 1, "after": hot_cursor })),
        ("a TOP cursor to HOT", Order::Hot, json!({ "first": 1, "after": top_cursor })),
        ("a HOT cursor to NEW", Order::New, json!({ "first": 1, "after": hot_cursor })),
        ("a garbage cursor", Order::Hot, json!({ "first": 1, "after": "not a cursor" })),
        ("a global id as cursor", Order::Top, json!({ "first": 1, "after": gid("Post", 1) })),
        ("first: 0 with HOT", Order::Hot, json!({ "first": 0 })),
        ("first: 101 with HOT", Order::Hot, json!({ "first": 101 })),
        ("first: 0 with TOP", Order::Top, json!({ "first": 0 })),
        ("first: 101 with TOP", Order::Top, json!({ "first": 101 })),
        ("first: -1 with TOP", Order::Top, json!({ "first": -1 })),
    ];
    for (case, order, args) in cases {
        let response = posts_raw(&app, &alice, world.course, order, args).await;
        assert_eq!(error_code(&response).as_deref(), Some("BAD_USER_INPUT"), "{case}: {response}");
    }
}

#[tokio::test]
async fn reconcile_rebuilds_hot_and_top_from_the_rows() {
    // `reconcile` writes behind the server's back, and a kept first page shows such a change
    // only after its TTL: read past the instance's memory here.
    let app = TestApp::spawn_with(|s| s.course_page_cache_ttl = Duration::ZERO).await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let fans = fans(&app, world.course, 4).await;
    let mut truth = Vec::new();
    for (n, (likes, comments)) in [(4, 0), (1, 0), (0, 3), (2, 1)].into_iter().enumerate() {
        let id = app.create_post(&alice, world.course, &format!("post {n}")).await;
        engage(&app, &world, &fans, id, likes, comments).await;
        let created = BASE_EPOCH - n as i64 * 600;
        set_created(&app, id, created).await;
        truth.push(Standing { id, likes: likes as i32, comments: comments as i32, created });
    }

    // Counters drift (a bug, a restore, a hand edit): the orders follow the wrong counts.
    let mut corrupt = truth.clone();
    (corrupt[0].likes, corrupt[0].comments) = (0, 12);
    (corrupt[1].likes, corrupt[1].comments) = (7, 0);
    (corrupt[2].likes, corrupt[2].comments) = (9, 0);
    for post in &corrupt {
        store(&app, post).await;
    }
    for order in [Order::Hot, Order::Top] {
        let now = whole_order(&app, &alice, world.course, order).await;
        assert_eq!(now, ranked(&corrupt, order), "{order:?} follows the corrupted counts");
        assert_ne!(now, ranked(&truth, order), "{order:?}: the corruption must change the order");
    }

    // A small chunk, so the recounts cross chunk boundaries.
    let likes_fixed = course_forum::testing::likes::recount::reconcile_all(&app.db, 2).await.expect("reconcile likes");
    let comments_fixed =
        course_forum::testing::forum::comments::recount_post_comments(&app.db, 2).await.expect("recount comments");
    let mut likes_fixed: Vec<(i64, i32)> = likes_fixed
        .iter()
        .filter_map(|c| match c.target {
            LikeTarget::Post(id) => Some((id, c.like_count)),
            LikeTarget::Comment(_) => None,
        })
        .collect();
    likes_fixed.sort_unstable();
    let mut comments_fixed = comments_fixed;
    comments_fixed.sort_unstable();
    assert_eq!(likes_fixed, [(truth[0].id, 4), (truth[1].id, 1), (truth[2].id, 0)], "like counts fixed");
    assert_eq!(comments_fixed, [(truth[0].id, 0), (truth[2].id, 3)], "comment counts fixed");
    for post in &truth {
        assert_eq!(counts_in_db(&app, post.id).await, (post.likes, post.comments), "post {}", post.id);
    }
    for order in [Order::Hot, Order::Top] {
        assert_eq!(whole_order(&app, &alice, world.course, order).await, ranked(&truth, order), "{order:?} rebuilt");
    }
}

/// A ranked cursor in the unsigned format of 6b52d0b: the order's prefix, then the shown ids
/// sorted, as LEB128 varints of their differences.
fn unsigned_ranked_cursor(order: &str, ids: impl IntoIterator<Item = i64>) -> Vec<u8> {
    let mut bytes = format!("r:{order}:").into_bytes();
    let mut previous = 0;
    for id in ids {
        let mut delta = (id - previous) as u64;
        previous = id;
        loop {
            let byte = (delta & 0x7f) as u8;
            delta >>= 7;
            if delta == 0 {
                bytes.push(byte);
                break;
            }
            bytes.push(byte | 0x80);
        }
    }
    bytes
}

#[tokio::test]
async fn hot_and_top_cursors_the_server_did_not_issue_are_refused_before_any_sql() {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let mut posts = Vec::new();
    for n in 0..4 {
        posts.push(app.create_post(&alice, world.course, &format!("post {n}")).await);
    }
    for order in [Order::Hot, Order::Top] {
        let name = order.name().to_ascii_lowercase();
        let first = page(&app, &alice, world.course, order, 2, None).await;
        let genuine = first.end.clone().expect("a cursor");
        // The control: the genuine cursor goes on to the other two, then the walk ends.
        let second = page(&app, &alice, world.course, order, 2, Some(&genuine)).await;
        let mut walked: Vec<i64> = first.ids.iter().chain(&second.ids).copied().collect();
        walked.sort_unstable();
        assert_eq!(walked, posts, "{name}: every post once");
        assert!(!second.has_next && second.has_prev, "{second:?}");

        let mut flipped = b64.decode(&genuine).expect("base64");
        let at = flipped.len() / 2;
        flipped[at] ^= 0x01;
        let forged_list = unsigned_ranked_cursor(&name, (1..=1000).map(|i| i * 7));
        let mut forged_list_with_a_tag = forged_list.clone();
        forged_list_with_a_tag.extend_from_slice(&[0xa5; 16]);
        let cases = [
            ("1,000 forged ids, unsigned (6b52d0b's format)", b64.encode(&forged_list)),
            ("1,000 forged ids and a made-up tag", b64.encode(&forged_list_with_a_tag)),
            (
                "the posts shown, unsigned",
                b64.encode(unsigned_ranked_cursor(
                    &name,
                    first.ids.iter().copied().min().into_iter().chain(first.ids.iter().copied().max()),
                )),
            ),
            ("a genuine cursor with a byte flipped", b64.encode(&flipped)),
            ("random base64", b64.encode([0x3cu8; 40])),
        ];
        for (case, cursor) in cases {
            let before = app.state.sql_statements.get();
            let response = posts_raw(&app, &alice, world.course, order, json!({ "first": 2, "after": cursor })).await;
            assert_eq!(error_code(&response).as_deref(), Some("BAD_USER_INPUT"), "{name}, {case}: {response}");
            // The course and its membership were read for the request (`course(id:)`), but the
            // page's statement never ran: compare with the genuine second page.
            let refused_cost = app.state.sql_statements.get() - before;
            let before = app.state.sql_statements.get();
            page(&app, &alice, world.course, order, 2, Some(&genuine)).await;
            let page_cost = app.state.sql_statements.get() - before;
            assert!(refused_cost < page_cost, "{name}, {case}: {refused_cost} statements, a page {page_cost}");
        }
    }
}

#[tokio::test]
async fn a_late_ranked_page_hashes_the_shown_posts_instead_of_testing_each_post_against_them() {
    use sea_orm::TransactionTrait;
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    app.scalar_i64(
        "WITH ins AS (INSERT INTO posts (course_id, user_id, title, body, like_count) \
         SELECT $1, $2, 'bulk ' || g, 'body', g % 50 FROM generate_series(1, 3000) g RETURNING id) \
         SELECT count(*) AS v FROM ins",
        [world.course.into(), world.alice.into()],
    )
    .await;
    exec(&app, "ANALYZE posts", []).await;
    let shown: Vec<String> = (0..1000).map(|i| (i * 3 + 1).to_string()).collect();
    for ranking in
        [course_forum::testing::forum::posts::Ranking::Hot, course_forum::testing::forum::posts::Ranking::Top]
    {
        let sql = course_forum::testing::forum::posts::ranked_page_sql(ranking);
        // The plan the server's prepared statement ends up with once PostgreSQL stops
        // planning it per call: the generic one, where the list is a parameter.
        let txn = app.db.begin().await.expect("begin");
        txn.execute_unprepared("SET LOCAL plan_cache_mode = force_generic_plan").await.expect("SET");
        txn.execute_unprepared(&format!("PREPARE ranked(bigint, bigint[], bigint) AS {sql}")).await.expect("PREPARE");
        let explain = format!("EXPLAIN EXECUTE ranked({}, '{{{}}}', 21)", world.course, shown.join(","));
        let rows = txn.query_all_raw(Statement::from_string(DbBackend::Postgres, explain)).await.expect("EXPLAIN");
        let plan: Vec<String> =
            rows.iter().map(|row| row.try_get::<String>("", "QUERY PLAN").expect("a plan line")).collect();
        txn.execute_unprepared("DEALLOCATE ranked").await.expect("DEALLOCATE");
        txn.rollback().await.expect("rollback");
        let plan = plan.join("\n");
        assert!(plan.contains("Hash Anti Join"), "{ranking:?}: the shown ids are hashed once:\n{plan}");
        assert!(!plan.contains("ALL"), "{ranking:?}: no post is compared with the whole list:\n{plan}");
    }
}
