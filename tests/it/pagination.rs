//! Relay connections with keyset paging: `Course.posts` newest first, `Post.comments` and
//! `Comment.replies` oldest first; `first` defaults to 20 and is capped at 100; `hasNextPage`
//! is exact; pages neither skip nor repeat items while rows are added or deleted in between.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value as Json, json};

use crate::common::{TestApp, World, error_code, gid, raw_id};

const POSTS_PAGE: &str = "query($id: ID!, $first: Int, $after: String, $last: Int, $before: String) {
  course(id: $id) {
    posts(first: $first, after: $after, last: $last, before: $before) {
      pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
      edges { cursor node { id } }
      nodes { id }
    }
  }
}";

const COMMENTS_PAGE: &str = "query($id: ID!, $first: Int, $after: String, $last: Int, $before: String) {
  post(id: $id) {
    comments(first: $first, after: $after, last: $last, before: $before) {
      pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
      edges { cursor node { id } }
      nodes { id }
    }
  }
}";

const REPLIES_PAGE: &str = "query($id: ID!, $first: Int, $after: String, $last: Int, $before: String) {
  node(id: $id) {
    ... on Comment {
      replies(first: $first, after: $after, last: $last, before: $before) {
        pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
        edges { cursor node { id } }
        nodes { id }
      }
    }
  }
}";

/// One page of a connection, reduced to what the tests check.
#[derive(Debug)]
struct Page {
    ids: Vec<i64>,
    has_next: bool,
    has_prev: bool,
    start: Option<String>,
    end: Option<String>,
}

impl Page {
    fn from_connection(conn: &Json) -> Page {
        let edges = conn["edges"].as_array().expect("edges");
        let ids: Vec<i64> = edges.iter().map(|e| raw_id(e["node"]["id"].as_str().expect("node id"))).collect();
        let nodes: Vec<i64> = conn["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .map(|n| raw_id(n["id"].as_str().expect("node id")))
            .collect();
        assert_eq!(ids, nodes, "edges and nodes disagree: {conn}");
        let info = &conn["pageInfo"];
        let start = info["startCursor"].as_str().map(str::to_owned);
        let end = info["endCursor"].as_str().map(str::to_owned);
        // start/end cursors are the first and last edge's cursors.
        assert_eq!(start.as_deref(), edges.first().and_then(|e| e["cursor"].as_str()), "startCursor: {conn}");
        assert_eq!(end.as_deref(), edges.last().and_then(|e| e["cursor"].as_str()), "endCursor: {conn}");
        Page {
            ids,
            has_next: info["hasNextPage"].as_bool().expect("hasNextPage"),
            has_prev: info["hasPreviousPage"].as_bool().expect("hasPreviousPage"),
            start,
            end,
        }
    }
}

/// Relay arguments; `None` is sent as null.
#[derive(Clone, Copy, Default)]
struct Args<'a> {
    first: Option<i64>,
    after: Option<&'a str>,
    last: Option<i64>,
    before: Option<&'a str>,
}

fn first(n: i64, after: Option<&str>) -> Args<'_> {
    Args { first: Some(n), after, ..Args::default() }
}

fn last(n: i64, before: Option<&str>) -> Args<'_> {
    Args { last: Some(n), before, ..Args::default() }
}

fn variables(id: &str, args: Args<'_>) -> Json {
    json!({
        "id": id,
        "first": args.first,
        "after": args.after,
        "last": args.last,
        "before": args.before,
    })
}

async fn posts_raw(app: &TestApp, token: &str, course: i64, args: Args<'_>) -> Json {
    app.gql(Some(token), POSTS_PAGE, variables(&gid("Course", course), args)).await
}

async fn posts_page(app: &TestApp, token: &str, course: i64, args: Args<'_>) -> Page {
    let data = app.gql_ok(Some(token), POSTS_PAGE, variables(&gid("Course", course), args)).await;
    Page::from_connection(&data["course"]["posts"])
}

async fn comments_page(app: &TestApp, token: &str, post: i64, args: Args<'_>) -> Page {
    let data = app.gql_ok(Some(token), COMMENTS_PAGE, variables(&gid("Post", post), args)).await;
    Page::from_connection(&data["post"]["comments"])
}

async fn replies_page(app: &TestApp, token: &str, comment: i64, args: Args<'_>) -> Page {
    let data = app.gql_ok(Some(token), REPLIES_PAGE, variables(&gid("Comment", comment), args)).await;
    Page::from_connection(&data["node"]["replies"])
}

async fn create_posts(app: &TestApp, token: &str, course: i64, n: usize) -> Vec<i64> {
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        ids.push(app.create_post(token, course, &format!("post {i}")).await);
    }
    ids
}

/// Walks a connection forward with `first: size` until `hasNextPage` is false, checking
/// `hasNextPage`/`hasPreviousPage` against what the walk finds. Returns every page.
async fn walk_forward<F, Fut>(size: i64, mut fetch: F) -> Vec<Page>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: std::future::Future<Output = Page>,
{
    let mut pages: Vec<Page> = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = fetch(after.clone()).await;
        assert_eq!(page.has_prev, after.is_some(), "hasPreviousPage on forward page {}", pages.len());
        assert!(page.ids.len() as i64 <= size, "page larger than `first`: {page:?}");
        if page.has_next {
            assert_eq!(page.ids.len() as i64, size, "a page with more after it must be full");
        }
        let done = !page.has_next;
        after = page.end.clone();
        pages.push(page);
        if done {
            break;
        }
        assert!(pages.len() < 1000, "paging does not terminate");
    }
    pages
}

fn flatten(pages: &[Page]) -> Vec<i64> {
    pages.iter().flat_map(|p| p.ids.iter().copied()).collect()
}

fn assert_strictly(descending: bool, ids: &[i64]) {
    for pair in ids.windows(2) {
        if descending {
            assert!(pair[0] > pair[1], "not strictly descending: {ids:?}");
        } else {
            assert!(pair[0] < pair[1], "not strictly ascending: {ids:?}");
        }
    }
}

fn newest_first(mut ids: Vec<i64>) -> Vec<i64> {
    ids.sort_unstable_by(|a, b| b.cmp(a));
    ids
}

#[tokio::test]
async fn posts_page_forward_newest_first_with_exact_has_next_page() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let bob = app.token(world.bob);
    // Two authors, interleaved, and a post in another course that must never show up.
    let mut created = Vec::new();
    for i in 0..25 {
        let token = if i % 2 == 0 { &alice } else { &bob };
        created.push(app.create_post(token, world.course, &format!("post {i}")).await);
    }
    let outsider = app.token(world.outsider);
    let foreign = app.create_post(&outsider, world.other_course, "elsewhere").await;

    let pages = walk_forward(10, |after| {
        let (app, alice) = (&app, &alice);
        async move { posts_page(app, alice, world.course, first(10, after.as_deref())).await }
    })
    .await;

    let sizes: Vec<usize> = pages.iter().map(|p| p.ids.len()).collect();
    assert_eq!(sizes, vec![10, 10, 5]);
    let flags: Vec<bool> = pages.iter().map(|p| p.has_next).collect();
    assert_eq!(flags, vec![true, true, false]);

    let seen = flatten(&pages);
    assert_strictly(true, &seen);
    assert_eq!(seen, newest_first(created.clone()), "every post exactly once");
    assert!(!seen.contains(&foreign));
    // Newest first means the most recently created post opens the first page.
    assert_eq!(seen[0], *created.last().unwrap());

    // Past the end: an empty page that says so.
    let beyond = posts_page(&app, &alice, world.course, first(10, pages.last().unwrap().end.as_deref())).await;
    assert!(beyond.ids.is_empty());
    assert!(!beyond.has_next);
}

#[tokio::test]
async fn posts_has_next_page_is_exact_at_the_boundary() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let created = create_posts(&app, &alice, world.course, 6).await;
    let all = newest_first(created);

    // Exactly as many as exist: no next page.
    let page = posts_page(&app, &alice, world.course, first(6, None)).await;
    assert_eq!(page.ids, all);
    assert!(!page.has_next);
    // One fewer: a next page with exactly the oldest post.
    let page = posts_page(&app, &alice, world.course, first(5, None)).await;
    assert_eq!(page.ids, all[..5]);
    assert!(page.has_next);
    let rest = posts_page(&app, &alice, world.course, first(5, page.end.as_deref())).await;
    assert_eq!(rest.ids, all[5..]);
    assert!(!rest.has_next);
    assert!(rest.has_prev);
    // A page ending exactly on the last item.
    let page = posts_page(&app, &alice, world.course, first(3, None)).await;
    let rest = posts_page(&app, &alice, world.course, first(3, page.end.as_deref())).await;
    assert_eq!(rest.ids, all[3..]);
    assert!(!rest.has_next);
}

#[tokio::test]
async fn posts_default_page_size_is_20_and_first_is_capped_at_100() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    // 25 through the API, then enough through SQL to go past the cap.
    let mut created = create_posts(&app, &alice, world.course, 25).await;
    let page = posts_page(&app, &alice, world.course, Args::default()).await;
    assert_eq!(page.ids, newest_first(created.clone())[..20]);
    assert!(page.has_next);
    let rest = posts_page(&app, &alice, world.course, Args { after: page.end.as_deref(), ..Args::default() }).await;
    assert_eq!(rest.ids, newest_first(created.clone())[20..]);
    assert!(!rest.has_next);

    app.scalar_i64(
        "WITH ins AS (INSERT INTO posts (course_id, user_id, title, body) \
         SELECT $1, $2, 'bulk ' || g, 'body' FROM generate_series(1, 100) g RETURNING id) \
         SELECT count(*) AS v FROM ins",
        [world.course.into(), world.alice.into()],
    )
    .await;
    let total = app.scalar_i64("SELECT count(*) AS v FROM posts WHERE course_id = $1", [world.course.into()]).await;
    assert_eq!(total, 125);
    let page = posts_page(&app, &alice, world.course, first(100, None)).await;
    assert_eq!(page.ids.len(), 100);
    assert!(page.has_next);
    assert_strictly(true, &page.ids);
    let rest = posts_page(&app, &alice, world.course, first(100, page.end.as_deref())).await;
    assert_eq!(rest.ids.len(), 25);
    assert!(!rest.has_next);
    // The 25 API-created posts are the oldest, so they make up the last page.
    created.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(rest.ids, created);

    for bad in [first(101, None), first(0, None), first(-1, None), last(101, None), last(0, None)] {
        let response = posts_raw(&app, &alice, world.course, bad).await;
        assert_eq!(error_code(&response).as_deref(), Some("BAD_USER_INPUT"), "{response}");
    }
}

#[tokio::test]
async fn posts_reject_malformed_cursors_and_mixed_directions() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    create_posts(&app, &alice, world.course, 3).await;
    let page = posts_page(&app, &alice, world.course, first(1, None)).await;
    let cursor = page.end.clone().unwrap();

    let global_id = gid("Post", 1); // a global id is not a cursor
    let cases = [
        first(1, Some("not a cursor")),
        first(1, Some(&global_id)),
        Args { first: Some(1), last: Some(1), ..Args::default() },
        Args { first: Some(1), before: Some(&cursor), ..Args::default() },
        Args { last: Some(1), after: Some(&cursor), ..Args::default() },
        Args { after: Some(&cursor), before: Some(&cursor), ..Args::default() },
    ];
    for args in cases {
        let response = posts_raw(&app, &alice, world.course, args).await;
        assert_eq!(error_code(&response).as_deref(), Some("BAD_USER_INPUT"), "{response}");
    }
}

#[tokio::test]
async fn forward_paging_skips_and_repeats_nothing_while_new_posts_arrive() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let bob = app.token(world.bob);
    let original = newest_first(create_posts(&app, &alice, world.course, 17).await);

    let mut seen: Vec<i64> = Vec::new();
    let mut newcomers: Vec<i64> = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = posts_page(&app, &alice, world.course, first(5, after.as_deref())).await;
        seen.extend(&page.ids);
        if !page.has_next {
            break;
        }
        after = page.end.clone();
        // Between page requests, two newer posts arrive.
        for i in 0..2 {
            newcomers.push(app.create_post(&bob, world.course, &format!("late {i}")).await);
        }
    }
    assert_eq!(
        seen, original,
        "later pages carry on from the cursor: nothing old skipped, nothing repeated, nothing new"
    );
    assert_eq!(newcomers.len(), 6);

    // A fresh walk sees everything, newcomers first.
    let pages = walk_forward(5, |after| {
        let (app, alice) = (&app, &alice);
        async move { posts_page(app, alice, world.course, first(5, after.as_deref())).await }
    })
    .await;
    let mut everything = original.clone();
    everything.extend(&newcomers);
    assert_eq!(flatten(&pages), newest_first(everything));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forward_paging_is_stable_under_concurrent_writers() {
    let app = Arc::new(TestApp::spawn().await);
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let original = newest_first(create_posts(&app, &alice, world.course, 30).await);

    // Writers keep creating posts for as long as the reader pages.
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for who in [world.bob, world.instructor] {
        let (app, stop) = (app.clone(), stop.clone());
        let token = app.token(who);
        writers.push(tokio::spawn(async move {
            let mut made = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                made.push(app.create_post(&token, world.course, "racing").await);
            }
            made
        }));
    }
    // Let the writers get going before the first page.
    while app.scalar_i64("SELECT count(*) AS v FROM posts WHERE course_id = $1", [world.course.into()]).await < 32 {
        tokio::task::yield_now().await;
    }
    let first_page = posts_page(&app, &alice, world.course, first(4, None)).await;
    // The first page is the newest posts at that moment; from there on, only older ones.
    let boundary = *first_page.ids.last().unwrap();
    let mut seen = first_page.ids.clone();
    let mut after = first_page.end.clone();
    let mut has_next = first_page.has_next;
    while has_next {
        let page = posts_page(&app, &alice, world.course, first(4, after.as_deref())).await;
        seen.extend(&page.ids);
        has_next = page.has_next;
        after = page.end.clone();
        tokio::task::yield_now().await;
    }
    stop.store(true, Ordering::SeqCst);
    let mut racing = Vec::new();
    for w in writers {
        racing.extend(w.await.expect("writer task"));
    }

    assert_strictly(true, &seen);
    let unique: HashSet<i64> = seen.iter().copied().collect();
    assert_eq!(unique.len(), seen.len(), "a post repeated");
    // Every post that existed before paging began is seen exactly once.
    for id in &original {
        assert!(seen.contains(id), "post {id} skipped: {seen:?}");
    }
    // Whatever came after the first page is older than its last post: nothing newer leaked in.
    assert!(seen[first_page.ids.len()..].iter().all(|id| *id < boundary));
    assert!(!racing.is_empty(), "writers made no posts");
}

#[tokio::test]
async fn backward_paging_gives_the_same_posts_in_the_same_order() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let all = newest_first(create_posts(&app, &alice, world.course, 25).await);

    // From the end (oldest), with last/before, until there is nothing before.
    let mut pages: Vec<Page> = Vec::new();
    let mut before: Option<String> = None;
    loop {
        let page = posts_page(&app, &alice, world.course, last(10, before.as_deref())).await;
        assert_strictly(true, &page.ids);
        assert_eq!(page.has_next, before.is_some(), "hasNextPage backward");
        let done = !page.has_prev;
        before = page.start.clone();
        pages.push(page);
        if done {
            break;
        }
        assert!(pages.len() < 100, "paging does not terminate");
    }
    let sizes: Vec<usize> = pages.iter().map(|p| p.ids.len()).collect();
    assert_eq!(sizes, vec![10, 10, 5]);
    let flags: Vec<bool> = pages.iter().map(|p| p.has_prev).collect();
    assert_eq!(flags, vec![true, true, false]);
    pages.reverse();
    assert_eq!(flatten(&pages), all);

    // The same edges, and the same cursors, as walking forward.
    let forward = posts_page(&app, &alice, world.course, first(25, None)).await;
    let back = posts_page(&app, &alice, world.course, last(25, None)).await;
    assert_eq!(forward.ids, back.ids);
    assert_eq!(forward.start, back.start);
    assert_eq!(forward.end, back.end);
    assert!(!back.has_prev);

    // Backward from a cursor in the middle: the items just before it.
    let head = posts_page(&app, &alice, world.course, first(12, None)).await;
    let before_12th = posts_page(&app, &alice, world.course, last(3, head.end.as_deref())).await;
    assert_eq!(before_12th.ids, all[8..11]);
    assert!(before_12th.has_prev);
    assert!(before_12th.has_next);
    // Walking forward from a backward page's end cursor continues where it stopped.
    let onward = posts_page(&app, &alice, world.course, first(3, before_12th.end.as_deref())).await;
    assert_eq!(onward.ids, all[11..14]);
}

#[tokio::test]
async fn comments_and_replies_page_oldest_first() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let bob = app.token(world.bob);
    let post = app.create_post(&alice, world.course, "discussion").await;
    let other_post = app.create_post(&alice, world.course, "other").await;

    let mut comments = Vec::new();
    for i in 0..7 {
        let token = if i % 2 == 0 { &alice } else { &bob };
        comments.push(app.create_comment(token, post, &format!("comment {i}")).await);
    }
    app.create_comment(&bob, other_post, "not here").await;
    let root = comments[1];
    let mut replies = Vec::new();
    for i in 0..5 {
        // Alternate between answering the root and answering the latest reply.
        let target = match replies.last() {
            Some(last) if i % 2 == 0 => gid("Reply", *last),
            _ => gid("Comment", root),
        };
        replies.push(app.create_reply(&alice, &target, &format!("reply {i}")).await);
    }

    // Comments: first/after, oldest first, replies not among them.
    let pages = walk_forward(3, |after| {
        let (app, alice) = (&app, &alice);
        async move { comments_page(app, alice, post, first(3, after.as_deref())).await }
    })
    .await;
    let sizes: Vec<usize> = pages.iter().map(|p| p.ids.len()).collect();
    assert_eq!(sizes, vec![3, 3, 1]);
    let seen = flatten(&pages);
    assert_strictly(false, &seen);
    assert_eq!(seen, comments);
    // Default size covers them all.
    let all = comments_page(&app, &alice, post, Args::default()).await;
    assert_eq!(all.ids, comments);
    assert!(!all.has_next && !all.has_prev);
    // Backward: the newest three, still oldest first within the page.
    let tail = comments_page(&app, &alice, post, last(3, None)).await;
    assert_eq!(tail.ids, comments[4..]);
    assert!(tail.has_prev);
    assert!(!tail.has_next);
    let before = comments_page(&app, &alice, post, last(3, tail.start.as_deref())).await;
    assert_eq!(before.ids, comments[1..4]);
    assert!(before.has_prev && before.has_next);

    // Replies: all under the root (replies to replies included), oldest first.
    let pages = walk_forward(2, |after| {
        let (app, alice) = (&app, &alice);
        async move { replies_page(app, alice, root, first(2, after.as_deref())).await }
    })
    .await;
    let sizes: Vec<usize> = pages.iter().map(|p| p.ids.len()).collect();
    assert_eq!(sizes, vec![2, 2, 1]);
    let seen = flatten(&pages);
    assert_strictly(false, &seen);
    assert_eq!(seen, replies);
    // Exactly full: no next page.
    let page = replies_page(&app, &alice, root, first(5, None)).await;
    assert_eq!(page.ids, replies);
    assert!(!page.has_next);
    let tail = replies_page(&app, &alice, root, last(2, None)).await;
    assert_eq!(tail.ids, replies[3..]);
    assert!(tail.has_prev && !tail.has_next);
    // Other comments have no replies.
    let empty = replies_page(&app, &alice, comments[0], first(10, None)).await;
    assert!(empty.ids.is_empty());
    assert!(!empty.has_next && !empty.has_prev);
    assert!(empty.start.is_none() && empty.end.is_none());
}

#[tokio::test]
async fn deleted_posts_do_not_appear_in_pages() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let prof = app.token(world.instructor);
    let created = create_posts(&app, &alice, world.course, 12).await;
    // Oldest two (so deleted rows lie past the last live one), the newest, and one in the
    // middle; the instructor deletes one of them.
    let deleted = [created[0], created[1], created[6], created[11]];
    for (i, id) in deleted.iter().enumerate() {
        let token = if i == 2 { &prof } else { &alice };
        app.delete_post(token, *id).await;
    }
    let live: Vec<i64> = newest_first(created.iter().copied().filter(|id| !deleted.contains(id)).collect());
    assert_eq!(live.len(), 8);

    let pages = walk_forward(4, |after| {
        let (app, alice) = (&app, &alice);
        async move { posts_page(app, alice, world.course, first(4, after.as_deref())).await }
    })
    .await;
    let sizes: Vec<usize> = pages.iter().map(|p| p.ids.len()).collect();
    // 8 live posts in pages of 4: the deleted rows past the end must not make a third page.
    assert_eq!(sizes, vec![4, 4]);
    assert_eq!(flatten(&pages), live);

    let back = posts_page(&app, &alice, world.course, last(8, None)).await;
    assert_eq!(back.ids, live);
    assert!(!back.has_prev);

    // A cursor whose post is deleted after it was handed out still works.
    let page = posts_page(&app, &alice, world.course, first(3, None)).await;
    app.delete_post(&alice, *page.ids.last().unwrap()).await;
    let rest = posts_page(&app, &alice, world.course, first(10, page.end.as_deref())).await;
    assert_eq!(rest.ids, live[3..]);
    assert!(!rest.has_next);
}

// ---------------------------------------------------------------------------------------------
// Cursors are the server's words (docs/api.md, "Cursors"): signed, so a client hands back only
// what it was given.
// ---------------------------------------------------------------------------------------------

/// Cursors this server never issued, made from a genuine one: random bytes, the unsigned
/// format of 6b52d0b (`k:<id>`, a position that exists), the genuine one with a byte of its
/// position or of its tag flipped, and its tag cut short.
fn forgeries(genuine: &str, id: i64) -> Vec<(&'static str, String)> {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let bytes = b64.decode(genuine).expect("a cursor is base64url");
    let mut position_flipped = bytes.clone();
    // `k:<digits>`: the first digit changes, the position stays well formed (or becomes k:0).
    position_flipped[2] ^= 0x01;
    let mut tag_flipped = bytes.clone();
    *tag_flipped.last_mut().expect("not empty") ^= 0x80;
    vec![
        ("random base64", b64.encode([0x5au8; 24])),
        ("the unsigned cursor of 6b52d0b", b64.encode(format!("k:{id}"))),
        ("a byte of the position flipped", b64.encode(position_flipped)),
        ("a byte of the tag flipped", b64.encode(tag_flipped)),
        ("the tag cut short", b64.encode(&bytes[..bytes.len() - 4])),
    ]
}

/// A connection under test: its document (variables `$id` when it has one, `$first`, `$after`)
/// and where the connection sits in `data`.
struct Walk {
    name: &'static str,
    query: &'static str,
    id: Option<String>,
    path: &'static [&'static str],
}

impl Walk {
    fn variables(&self, after: Option<&str>) -> Json {
        let mut vars = json!({ "first": 1, "after": after });
        if let Some(id) = &self.id {
            vars["id"] = json!(id);
        }
        vars
    }

    fn connection<'a>(&self, data: &'a Json) -> &'a Json {
        self.path.iter().fold(data, |value, key| &value[*key])
    }
}

#[tokio::test]
async fn cursors_the_server_did_not_issue_are_bad_user_input_on_every_connection() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let (alice, bob) = (app.token(world.alice), app.token(world.bob));
    create_posts(&app, &alice, world.course, 3).await;
    let post = app.create_post(&alice, world.course, "discussion").await;
    let mut root = 0;
    for i in 0..3 {
        // bob's comments and replies notify alice: her notifications have pages too.
        root = app.create_comment(&bob, post, &format!("comment {i}")).await;
    }
    let root_gid = gid("Comment", root);
    for i in 0..3 {
        app.create_reply(&alice, &root_gid, &format!("reply {i}")).await;
        app.create_reply(&bob, &root_gid, &format!("reply to alice {i}")).await;
    }
    let walks = [
        Walk {
            name: "Course.posts (NEW)",
            query: "query($id: ID!, $first: Int, $after: String) { course(id: $id) { posts(first: $first, after: $after) { pageInfo { hasNextPage endCursor } edges { cursor node { id } } } } }",
            id: Some(gid("Course", world.course)),
            path: &["course", "posts"],
        },
        Walk {
            name: "Post.comments",
            query: "query($id: ID!, $first: Int, $after: String) { post(id: $id) { comments(first: $first, after: $after) { pageInfo { hasNextPage endCursor } edges { cursor node { id } } } } }",
            id: Some(gid("Post", post)),
            path: &["post", "comments"],
        },
        Walk {
            name: "Comment.replies",
            query: "query($id: ID!, $first: Int, $after: String) { node(id: $id) { ... on Comment { replies(first: $first, after: $after) { pageInfo { hasNextPage endCursor } edges { cursor node { id } } } } } }",
            id: Some(root_gid.clone()),
            path: &["node", "replies"],
        },
        Walk {
            name: "Query.notifications",
            query: "query($first: Int, $after: String) { notifications(first: $first, after: $after) { pageInfo { hasNextPage endCursor } edges { cursor node { id } } } }",
            id: None,
            path: &["notifications"],
        },
        Walk {
            name: "Query.homeFeed",
            query: "query($first: Int, $after: String) { homeFeed(first: $first, after: $after) { pageInfo { hasNextPage endCursor } edges { cursor node { id } } } }",
            id: None,
            path: &["homeFeed"],
        },
    ];
    let mut failures = Vec::new();
    for walk in &walks {
        let data = app.gql_ok(Some(&alice), walk.query, walk.variables(None)).await;
        let first = walk.connection(&data);
        assert_eq!(first["pageInfo"]["hasNextPage"], json!(true), "{}: {data}", walk.name);
        let genuine = first["pageInfo"]["endCursor"].as_str().expect("an end cursor").to_owned();
        let shown = raw_id(first["edges"][0]["node"]["id"].as_str().expect("node id"));
        // The control: the genuine cursor continues the walk past what it showed.
        let next = app.gql_ok(Some(&alice), walk.query, walk.variables(Some(&genuine))).await;
        let next_id = raw_id(walk.connection(&next)["edges"][0]["node"]["id"].as_str().expect("a next page"));
        assert_ne!(next_id, shown, "{}: {next}", walk.name);
        for (forgery, cursor) in forgeries(&genuine, next_id) {
            let response = app.gql(Some(&alice), walk.query, walk.variables(Some(&cursor))).await;
            if error_code(&response).as_deref() != Some("BAD_USER_INPUT") {
                failures.push(format!("{} with {forgery}: {response}", walk.name));
            }
        }
    }
    // Backward (NEW posts' `before`) too.
    let page = posts_page(&app, &alice, world.course, last(1, None)).await;
    let start = page.start.expect("a start cursor");
    assert_eq!(posts_page(&app, &alice, world.course, last(1, Some(&start))).await.ids.len(), 1);
    for (forgery, cursor) in forgeries(&start, page.ids[0]) {
        let response = posts_raw(&app, &alice, world.course, last(1, Some(&cursor))).await;
        if error_code(&response).as_deref() != Some("BAD_USER_INPUT") {
            failures.push(format!("posts(before:) with {forgery}: {response}"));
        }
    }
    assert!(failures.is_empty(), "accepted cursors the server did not issue:\n{}", failures.join("\n"));
}

#[tokio::test]
async fn a_forged_cursor_is_refused_before_any_sql_runs() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let (alice, bob) = (app.token(world.alice), app.token(world.bob));
    let post = app.create_post(&alice, world.course, "discussion").await;
    for i in 0..3 {
        app.create_comment(&bob, post, &format!("comment {i}")).await;
    }
    let query = "query($after: String) { notifications(first: 1, after: $after) { edges { cursor node { id } } } }";
    // Warm: the viewer's memberships and row are in memory after the first page.
    let data = app.gql_ok(Some(&alice), query, json!({ "after": null })).await;
    let genuine = data["notifications"]["edges"][0]["cursor"].as_str().expect("a cursor").to_owned();
    let statements = || app.state.sql_statements.get();

    let before = statements();
    let next = app.gql_ok(Some(&alice), query, json!({ "after": genuine })).await;
    assert_eq!(next["notifications"]["edges"].as_array().map(Vec::len), Some(1));
    let genuine_cost = statements() - before;
    assert!(genuine_cost > 0, "a page is read from PostgreSQL");

    let id = raw_id(next["notifications"]["edges"][0]["node"]["id"].as_str().expect("id"));
    for (forgery, cursor) in forgeries(&genuine, id) {
        let before = statements();
        let response = app.gql(Some(&alice), query, json!({ "after": cursor })).await;
        assert_eq!(error_code(&response).as_deref(), Some("BAD_USER_INPUT"), "{forgery}: {response}");
        assert_eq!(statements() - before, 0, "{forgery}: no statement runs for a forged cursor");
    }
}

const OLD_KEY: &str = "the key cursors were signed with until today";
const NEW_KEY: &str = "the key that signs cursors from today on";

#[tokio::test]
async fn a_rotated_key_verifies_while_listed_second_and_fails_once_removed() {
    let app = TestApp::spawn_with(|s| s.cursor_keys = vec![OLD_KEY.into()]).await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let ids = newest_first(create_posts(&app, &alice, world.course, 4).await);
    let old_cursor = posts_page(&app, &alice, world.course, first(1, None)).await.end.expect("a cursor");

    // Rotating: the new key first, the old one kept to verify.
    let rotating = app.spawn_peer(|s| s.cursor_keys = vec![NEW_KEY.into(), OLD_KEY.into()]).await;
    let vars = |after: &str| variables(&gid("Course", world.course), first(1, Some(after)));
    let data = app.gql_at(rotating.addr, Some(&alice), POSTS_PAGE, vars(&old_cursor)).await;
    assert!(data.get("errors").is_none(), "the old key still verifies: {data}");
    let page = Page::from_connection(&data["data"]["course"]["posts"]);
    assert_eq!(page.ids, vec![ids[1]], "the walk continues where the old cursor stood");
    let new_cursor = page.end.expect("a cursor");
    assert_ne!(new_cursor, old_cursor);

    // Rotated: the old key removed.
    let rotated = app.spawn_peer(|s| s.cursor_keys = vec![NEW_KEY.into()]).await;
    let refused = app.gql_at(rotated.addr, Some(&alice), POSTS_PAGE, vars(&old_cursor)).await;
    assert_eq!(error_code(&refused).as_deref(), Some("BAD_USER_INPUT"), "{refused}");
    let data = app.gql_at(rotated.addr, Some(&alice), POSTS_PAGE, vars(&new_cursor)).await;
    assert!(data.get("errors").is_none(), "the new key's cursors go on: {data}");
    assert_eq!(Page::from_connection(&data["data"]["course"]["posts"]).ids, vec![ids[2]]);
    // And the instance that knows only the old key refuses the new key's cursors.
    let response = posts_raw(&app, &alice, world.course, first(1, Some(&new_cursor))).await;
    assert_eq!(error_code(&response).as_deref(), Some("BAD_USER_INPUT"), "{response}");
}

#[tokio::test]
async fn without_cursor_keys_the_instances_of_a_deployment_share_one_random_key() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let ids = newest_first(create_posts(&app, &alice, world.course, 3).await);
    let cursor = posts_page(&app, &alice, world.course, first(1, None)).await.end.expect("a cursor");
    // Another instance of the same deployment (database and Redis prefix) takes it.
    let peer = app.spawn_peer(|_| {}).await;
    let vars = variables(&gid("Course", world.course), first(1, Some(&cursor)));
    let data = app.gql_at(peer.addr, Some(&alice), POSTS_PAGE, vars).await;
    assert!(data.get("errors").is_none(), "{data}");
    assert_eq!(Page::from_connection(&data["data"]["course"]["posts"]).ids, vec![ids[1]]);
    // Another deployment (its own prefix, so its own random key) does not.
    let other = TestApp::spawn().await;
    let other_world = World::create(&other).await;
    let other_alice = other.token(other_world.alice);
    create_posts(&other, &other_alice, other_world.course, 3).await;
    let response = posts_raw(&other, &other_alice, other_world.course, first(1, Some(&cursor))).await;
    assert_eq!(error_code(&response).as_deref(), Some("BAD_USER_INPUT"), "{response}");
}
