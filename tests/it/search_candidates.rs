//! The kept candidates of course searches (`cache::search`), against real PostgreSQL: a first
//! page served from kept candidates is the page a server without them gives (a peer with
//! `SEARCH_CACHE_TTL=0s` on the same database), whatever was written, edited, hidden, resolved,
//! endorsed or deleted since, and whatever order transactions commit in; concurrent first
//! pages find the candidates once; a stranger's search keeps nothing.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sea_orm::{ConnectionTrait, DbBackend, Statement, TransactionTrait};
use serde_json::{Value as Json, json};

use crate::common::{Peer, TestApp, World, error_code, gid, sample};

const SEARCH: &str = "query($c: ID!, $q: String!, $n: Int, $a: String, $f: SearchFilter) { course(id: $c) { \
    search(query: $q, first: $n, after: $a, filter: $f) { pageInfo { hasNextPage endCursor } \
    edges { node { matched score snippet post { id } comment { id } reply { id } } } } } }";

/// Words of the generated posts and comments: the first ones frequent enough to fill a full
/// set of candidates (100), the last ones rare.
const WORDS: [&str; 8] = ["apple", "banana", "cherry", "delta", "echo", "falcon", "granite", "harbor"];

/// The raw answer of a course search at `addr`.
async fn search_at(
    app: &TestApp,
    addr: std::net::SocketAddr,
    user: i64,
    course: i64,
    query: &str,
    filter: &Json,
    after: Option<&str>,
) -> Json {
    app.gql_at(
        addr,
        Some(&app.token(user)),
        SEARCH,
        json!({ "c": gid("Course", course), "q": query, "n": 10, "a": after, "f": filter }),
    )
    .await
}

/// What a reader sees of a page: every hit in order and whether more follow (cursors are
/// sealed per request, so they are compared by the pages they lead to).
fn seen(response: &Json) -> Json {
    assert!(response.get("errors").is_none(), "search failed: {response}");
    let search = &response["data"]["course"]["search"];
    json!({ "hits": search["edges"], "more": search["pageInfo"]["hasNextPage"] })
}

fn end_cursor(response: &Json) -> Option<String> {
    response["data"]["course"]["search"]["pageInfo"]["endCursor"].as_str().map(str::to_owned)
}

/// A text of `n` words drawn by `rng`, the first words more often.
fn text(rng: &mut StdRng, n: usize) -> String {
    (0..n)
        .map(|_| WORDS[rng.random_range(0..WORDS.len()).min(rng.random_range(0..WORDS.len()))])
        .collect::<Vec<_>>()
        .join(" ")
}

/// A caching server, a peer on the same database without the cache (`SEARCH_CACHE_TTL=0s`)
/// whose answers the caching one must give, and the small world.
async fn caching_and_fresh() -> (TestApp, Peer, World) {
    let app = TestApp::spawn().await;
    let fresh = app.spawn_peer(|s| s.search_cache_ttl = Duration::ZERO).await;
    let w = World::create(&app).await;
    (app, fresh, w)
}

async fn exec(app: &TestApp, sql: &str, values: Vec<sea_orm::Value>) {
    app.db
        .execute_raw(Statement::from_sql_and_values(DbBackend::Postgres, sql, values))
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

async fn metrics(app: &TestApp) -> String {
    app.http.get(app.url("/metrics")).send().await.expect("metrics").text().await.expect("metrics text")
}

/// Random writes of every kind a search reads, each followed by searches of random readers,
/// queries and filters, answered by the caching server and by the peer without the cache:
/// the same hits, scores, snippets and next pages, step by step (one fixed seed).
#[tokio::test]
async fn cached_searches_answer_as_fresh_ones() {
    let (app, fresh, w) = caching_and_fresh().await;
    let mut rng = StdRng::seed_from_u64(30);
    // 240 posts and 600 comments and replies: "apple" alone is in more than 100 of each.
    for n in 0..240 {
        let (title, body) = (text(&mut rng, 3), text(&mut rng, 8));
        let author = [w.alice, w.bob, w.instructor][n % 3];
        exec(
            &app,
            "INSERT INTO posts (course_id, user_id, title, body, kind, private) VALUES ($1, $2, $3, $4, $5, $6)",
            vec![
                w.course.into(),
                author.into(),
                title.into(),
                body.into(),
                (if n % 3 == 0 { "question" } else { "discussion" }).into(),
                (n % 9 == 0).into(),
            ],
        )
        .await;
    }
    let posts = app.ids("SELECT id FROM posts WHERE course_id = $1 ORDER BY id", vec![w.course.into()]).await;
    for n in 0..600 {
        let post = posts[rng.random_range(0..posts.len())];
        let author = [w.alice, w.bob, w.instructor][n % 3];
        exec(
            &app,
            "INSERT INTO comments (post_id, user_id, body) VALUES ($1, $2, $3)",
            vec![post.into(), author.into(), text(&mut rng, 6).into()],
        )
        .await;
    }
    exec(
        &app,
        "INSERT INTO comments (post_id, parent_id, reply_to_user_id, user_id, body) \
         SELECT post_id, id, user_id, $1, body || ' reply' FROM comments WHERE id % 4 = 0",
        vec![w.bob.into()],
    )
    .await;

    let queries = ["apple", "banana cherry", "\"apple banana\"", "apple -cherry", "delta or granite", "harbor"];
    let filters = [json!(null), json!({ "kind": "QUESTION" }), json!({ "unresolved": true })];
    let readers = [w.alice, w.bob, w.instructor];
    for step in 0..60 {
        let post_ids = app.ids("SELECT id FROM posts WHERE course_id = $1 ORDER BY id", vec![w.course.into()]).await;
        let comment_ids = app
            .ids(
                "SELECT c.id FROM comments c JOIN posts p ON p.id = c.post_id WHERE p.course_id = $1 ORDER BY c.id",
                vec![w.course.into()],
            )
            .await;
        let post = post_ids[rng.random_range(0..post_ids.len())];
        let comment = comment_ids[rng.random_range(0..comment_ids.len())];
        let author = readers[rng.random_range(0..readers.len())];
        let write = rng.random_range(0..9);
        match write {
            0 => {
                let (title, body, private) = (text(&mut rng, 3), text(&mut rng, 6), rng.random_bool(0.3));
                exec(
                    &app,
                    "INSERT INTO posts (course_id, user_id, title, body, kind, private) VALUES ($1, $2, $3, $4, 'question', $5)",
                    vec![w.course.into(), author.into(), title.into(), body.into(), private.into()],
                )
                .await;
            }
            1 => {
                let body = text(&mut rng, 5);
                exec(
                    &app,
                    "INSERT INTO comments (post_id, user_id, body) VALUES ($1, $2, $3)",
                    vec![post.into(), author.into(), body.into()],
                )
                .await;
            }
            2 => {
                let (title, body) = (text(&mut rng, 3), text(&mut rng, 6));
                exec(
                    &app,
                    "UPDATE posts SET title = $2, body = $3 WHERE id = $1",
                    vec![post.into(), title.into(), body.into()],
                )
                .await;
            }
            3 => exec(&app, "UPDATE posts SET deleted_at = now() WHERE id = $1", vec![post.into()]).await,
            4 => {
                exec(
                    &app,
                    "UPDATE posts SET private = NOT private WHERE id = $1 AND kind = 'question'",
                    vec![post.into()],
                )
                .await
            }
            5 => {
                exec(
                    &app,
                    "UPDATE posts SET resolved_at = CASE WHEN resolved_at IS NULL THEN now() END WHERE id = $1",
                    vec![post.into()],
                )
                .await
            }
            6 => exec(&app, "UPDATE comments SET deleted_at = now() WHERE id = $1", vec![comment.into()]).await,
            7 => {
                exec(
                    &app,
                    "UPDATE comments SET endorsed_by = $2, endorsed_at = now() WHERE id = $1",
                    vec![comment.into(), w.instructor.into()],
                )
                .await
            }
            _ => {
                let body = text(&mut rng, 4);
                exec(&app, "UPDATE comments SET body = $2 WHERE id = $1", vec![comment.into(), body.into()]).await
            }
        }
        // Every query after every write, so kept candidates meet each kind of change.
        for query in queries {
            let reader = readers[rng.random_range(0..readers.len())];
            let filter = &filters[rng.random_range(0..filters.len())];
            let cached = search_at(&app, app.addr, reader, w.course, query, filter, None).await;
            let expected = search_at(&app, fresh.addr, reader, w.course, query, filter, None).await;
            let context = format!("step {step} (write {write}): {query} {filter} for user {reader}");
            assert_eq!(seen(&cached), seen(&expected), "{context}");
            // The second pages, each after its own server's cursor.
            if let (Some(a), Some(b)) = (end_cursor(&cached), end_cursor(&expected)) {
                let next = search_at(&app, app.addr, reader, w.course, query, filter, Some(&a)).await;
                let expected_next = search_at(&app, fresh.addr, reader, w.course, query, filter, Some(&b)).await;
                assert_eq!(seen(&next), seen(&expected_next), "{context}, second page");
            }
        }
    }
    // The caching server answered from kept candidates, found some again after a removal, and
    // the peer kept none.
    let figures = metrics(&app).await;
    let hits = sample(&figures, "search_candidates_total{outcome=\"hit\"}");
    let misses = sample(&figures, "search_candidates_total{outcome=\"miss\"}");
    assert!(hits > 250.0, "kept candidates served {hits} first pages (misses {misses})");
    assert!(sample(&figures, "search_candidates_total{outcome=\"stale\"}") > 0.0, "{figures}");
    assert!(app.state.search_candidates.entry_count() > 0);
    assert_eq!(fresh.state.search_candidates.entry_count(), 0);
}

/// A comment whose transaction took its id before a newer comment's and commits after the
/// candidates were kept (with the newer one among them) is found by the next search, on the
/// caching server as on one without the cache. (Comments: posts of one course are written one
/// transaction at a time, under the lock of the course's title words.)
#[tokio::test]
async fn a_comment_committed_after_the_candidates_were_kept_is_found() {
    let (app, fresh, w) = caching_and_fresh().await;
    let no_filter = json!(null);
    exec(
        &app,
        "INSERT INTO posts (course_id, user_id, title, body) VALUES ($1, $2, 'Quasar lensing', 'first')",
        vec![w.course.into(), w.alice.into()],
    )
    .await;
    let post = app.ids("SELECT id FROM posts WHERE course_id = $1", vec![w.course.into()]).await[0];

    // The slow transaction inserts first (the lower id) and stays open.
    let slow = app.db.begin().await.expect("begin");
    slow.execute_raw(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "INSERT INTO comments (post_id, user_id, body) VALUES ($1, $2, 'quasar late')",
        [post.into(), w.alice.into()],
    ))
    .await
    .expect("insert in the slow transaction");
    exec(
        &app,
        "INSERT INTO comments (post_id, user_id, body) VALUES ($1, $2, 'quasar quick')",
        vec![post.into(), w.bob.into()],
    )
    .await;
    let kept = search_at(&app, app.addr, w.bob, w.course, "quasar", &no_filter, None).await;
    assert_eq!(seen(&kept)["hits"].as_array().map(Vec::len), Some(2), "{kept}");
    let again = search_at(&app, app.addr, w.bob, w.course, "quasar", &no_filter, None).await;
    assert_eq!(seen(&again), seen(&kept));
    let figures = metrics(&app).await;
    assert_eq!(sample(&figures, "search_candidates_total{outcome=\"miss\"}"), 1.0, "kept once");
    assert_eq!(sample(&figures, "search_candidates_total{outcome=\"hit\"}"), 1.0, "then served");

    slow.commit().await.expect("commit");
    let after = search_at(&app, app.addr, w.bob, w.course, "quasar", &no_filter, None).await;
    assert_eq!(seen(&after)["hits"].as_array().map(Vec::len), Some(3), "the late commit: {after}");
    let expected = search_at(&app, fresh.addr, w.bob, w.course, "quasar", &no_filter, None).await;
    assert_eq!(seen(&after), seen(&expected));
    let figures = metrics(&app).await;
    assert_eq!(sample(&figures, "search_candidates_total{outcome=\"hit\"}"), 2.0, "from the kept candidates");
}

/// A post moved by hand to another course leaves the old course's kept candidates with its
/// comments, though its stamp is in the new course, where a search of the old one does not
/// read: the old course's members never see it again, the new course's see it at once.
#[tokio::test]
async fn a_post_moved_to_another_course_leaves_the_kept_candidates_of_the_old_one() {
    let (app, fresh, w) = caching_and_fresh().await;
    let no_filter = json!(null);
    for title in ["Nebula spectra", "Nebula dust", "Pulsar timing"] {
        exec(
            &app,
            "INSERT INTO posts (course_id, user_id, title, body) VALUES ($1, $2, $3, 'observing notes')",
            vec![w.course.into(), w.alice.into(), title.into()],
        )
        .await;
    }
    let moved = app.ids("SELECT id FROM posts WHERE title = 'Nebula dust'", vec![]).await[0];
    exec(
        &app,
        "INSERT INTO comments (post_id, user_id, body) VALUES ($1, $2, 'nebula dust grains')",
        vec![moved.into(), w.bob.into()],
    )
    .await;
    let hit_posts = |response: &Json| -> Vec<String> {
        seen(response)["hits"]
            .as_array()
            .map(|hits| hits.iter().filter_map(|h| h["node"]["post"]["id"].as_str().map(str::to_owned)).collect())
            .unwrap_or_default()
    };
    let kept = search_at(&app, app.addr, w.bob, w.course, "nebula", &no_filter, None).await;
    assert_eq!(hit_posts(&kept).len(), 3, "two posts and the comment: {kept}");
    assert!(hit_posts(&kept).contains(&gid("Post", moved)));

    exec(&app, "UPDATE posts SET course_id = $1 WHERE id = $2", vec![w.other_course.into(), moved.into()]).await;
    let after = search_at(&app, app.addr, w.bob, w.course, "nebula", &no_filter, None).await;
    assert_eq!(hit_posts(&after), vec![gid("Post", moved - 1)], "neither the moved post nor its comment: {after}");
    let expected = search_at(&app, fresh.addr, w.bob, w.course, "nebula", &no_filter, None).await;
    assert_eq!(seen(&after), seen(&expected));
    // (Candidates found again while a transaction older than the move still runs anywhere in
    // the cluster count the move too, and are found once more: at least one stale.)
    let stale = sample(&metrics(&app).await, "search_candidates_total{outcome=\"stale\"}");
    assert!(stale >= 1.0, "the kept candidates were found again after the move ({stale})");
    let there = search_at(&app, app.addr, w.outsider, w.other_course, "nebula", &no_filter, None).await;
    assert_eq!(hit_posts(&there).len(), 2, "the moved post and its comment in the new course: {there}");
}

/// A candidate deleted for good (by hand: the API deletes softly) from a full set, off the
/// page, leaves no stamp; the kept set must still make room for the older match a fresh search
/// takes in its place, here an endorsed, resolved question that outranks every other.
#[tokio::test]
async fn a_candidate_deleted_for_good_makes_room_for_the_next_older_match() {
    let (app, fresh, w) = caching_and_fresh().await;
    let no_filter = json!(null);
    // The oldest match, endorsed and resolved: the 101st newest, so no candidate at first.
    exec(
        &app,
        "INSERT INTO posts (course_id, user_id, title, body, kind, resolved_at, endorsed_by, endorsed_at) \
         VALUES ($1, $2, 'Comet tails', 'why do comet tails point away', 'question', now(), $3, now())",
        vec![w.course.into(), w.alice.into(), w.instructor.into()],
    )
    .await;
    let oldest = app.ids("SELECT id FROM posts WHERE course_id = $1", vec![w.course.into()]).await[0];
    exec(
        &app,
        "INSERT INTO posts (course_id, user_id, title, body) \
         SELECT $1, $2, 'Comet sighting ' || n, 'notes' FROM generate_series(1, 100) n",
        vec![w.course.into(), w.bob.into()],
    )
    .await;
    let first_post = |response: &Json| seen(response)["hits"][0]["node"]["post"]["id"].clone();
    let kept = search_at(&app, app.addr, w.bob, w.course, "comet", &no_filter, None).await;
    assert_ne!(first_post(&kept), json!(gid("Post", oldest)), "the oldest match is past the candidates: {kept}");

    // The page holds the ten best of the hundred; the 51st newest is a candidate off it.
    exec(
        &app,
        "DELETE FROM posts WHERE id = (SELECT id FROM posts WHERE course_id = $1 ORDER BY id DESC OFFSET 50 LIMIT 1)",
        vec![w.course.into()],
    )
    .await;
    let after = search_at(&app, app.addr, w.bob, w.course, "comet", &no_filter, None).await;
    assert_eq!(first_post(&after), json!(gid("Post", oldest)), "the next older match ranks first: {after}");
    let expected = search_at(&app, fresh.addr, w.bob, w.course, "comet", &no_filter, None).await;
    assert_eq!(seen(&after), seen(&expected));
}

/// A transaction held open somewhere (a long report, a backup) keeps every snapshot's xmin
/// back, so once more than `MAX_CHANGED` comments are written, candidates are stale as soon as
/// they are found. Then a first page finds them once, not once per try, and for a few seconds
/// first pages are searched without them; once the transaction ends they serve again.
#[tokio::test]
async fn candidates_stale_as_soon_as_found_are_not_found_again_and_again() {
    let (app, fresh, w) = caching_and_fresh().await;
    let no_filter = json!(null);
    let held = app.db.begin().await.expect("begin");
    held.execute_raw(Statement::from_string(DbBackend::Postgres, "SELECT pg_current_xact_id()"))
        .await
        .expect("the held transaction takes an id");
    exec(
        &app,
        "INSERT INTO posts (course_id, user_id, title, body) VALUES ($1, $2, 'Nova remnants', 'shells')",
        vec![w.course.into(), w.alice.into()],
    )
    .await;
    exec(
        &app,
        "INSERT INTO comments (post_id, user_id, body) \
         SELECT (SELECT max(id) FROM posts), $1, 'nova chatter ' || n FROM generate_series(1, 1001) n",
        vec![w.bob.into()],
    )
    .await;
    let outcome =
        |figures: &str, name: &str| sample(figures, &format!("search_candidates_total{{outcome=\"{name}\"}}"));
    let same_as_fresh = |query: &'static str| {
        let (app, fresh, no_filter) = (&app, &fresh, &no_filter);
        async move {
            let cached = search_at(app, app.addr, w.bob, w.course, query, no_filter, None).await;
            let expected = search_at(app, fresh.addr, w.bob, w.course, query, no_filter, None).await;
            assert_eq!(seen(&cached), seen(&expected), "{query}");
        }
    };

    same_as_fresh("nova").await;
    let figures = metrics(&app).await;
    // (Then searched without them, as `uncached`, which the peer without the cache counts too.)
    assert_eq!(outcome(&figures, "stale"), 1.0, "found once, stale at once, not found again: {figures}");
    same_as_fresh("nova chatter").await;
    let figures = metrics(&app).await;
    assert_eq!(outcome(&figures, "bypassed"), 1.0, "the next first page does not try: {figures}");
    assert_eq!(outcome(&figures, "stale"), 1.0);

    held.rollback().await.expect("rollback");
    // Past the bypass, candidates serve again (unless another transaction of the cluster still
    // holds the xmin back: tests of other databases run beside this one).
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(5_500)).await;
        same_as_fresh("nova").await;
        if outcome(&metrics(&app).await, "miss") >= 1.0 {
            return;
        }
    }
    panic!("kept candidates never served again: {}", metrics(&app).await);
}

/// Eight first pages of one search at once find its candidates with one statement: the others
/// wait for it and use what it kept.
#[tokio::test]
async fn concurrent_first_pages_find_the_candidates_once() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    exec(
        &app,
        "INSERT INTO posts (course_id, user_id, title, body) \
         SELECT $1, $2, 'nebula ' || n, 'text' FROM generate_series(1, 300) n",
        vec![w.course.into(), w.alice.into()],
    )
    .await;
    let no_filter = json!(null);
    let pages = futures_util::future::join_all(
        (0..8).map(|_| search_at(&app, app.addr, w.bob, w.course, "nebula", &no_filter, None)),
    )
    .await;
    for page in &pages {
        assert_eq!(seen(page), seen(&pages[0]));
    }
    let figures = metrics(&app).await;
    assert_eq!(sample(&figures, "search_candidates_total{outcome=\"miss\"}"), 1.0, "{figures}");
    assert_eq!(sample(&figures, "search_candidates_total{outcome=\"hit\"}"), 7.0, "{figures}");
    assert_eq!(app.state.search_candidates.entry_count(), 1);
}

/// Nothing is kept for a search that is refused (no token, not a member) or cannot match
/// (a query that excludes itself); a student's and a teacher's candidates are kept apart, and
/// a private post is found by its author and the staff only, from kept candidates too.
#[tokio::test]
async fn only_members_searches_are_kept_and_each_kind_of_reader_apart() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    exec(
        &app,
        "INSERT INTO posts (course_id, user_id, title, body, kind, private) VALUES \
           ($1, $2, 'Walrus open', 'x', 'question', false), ($1, $2, 'Walrus private', 'x', 'question', true)",
        vec![w.course.into(), w.alice.into()],
    )
    .await;
    let no_filter = json!(null);
    let anonymous = app
        .gql(None, SEARCH, json!({ "c": gid("Course", w.course), "q": "walrus", "n": 10, "a": null, "f": null }))
        .await;
    assert!(anonymous.get("errors").is_some(), "{anonymous}");
    let outsider = search_at(&app, app.addr, w.outsider, w.course, "walrus", &no_filter, None).await;
    assert!(error_code(&outsider).is_some(), "{outsider}");
    let nothing = search_at(&app, app.addr, w.bob, w.course, "walrus -walrus", &no_filter, None).await;
    assert_eq!(seen(&nothing)["hits"], json!([]));
    app.state.search_candidates.settle();
    assert_eq!(app.state.search_candidates.entry_count(), 0, "nothing kept for them");

    let count = |r: &Json| seen(r)["hits"].as_array().map(Vec::len);
    for _ in 0..2 {
        assert_eq!(count(&search_at(&app, app.addr, w.bob, w.course, "walrus", &no_filter, None).await), Some(1));
        assert_eq!(count(&search_at(&app, app.addr, w.alice, w.course, "walrus", &no_filter, None).await), Some(2));
        assert_eq!(
            count(&search_at(&app, app.addr, w.instructor, w.course, "walrus", &no_filter, None).await),
            Some(2)
        );
    }
    app.state.search_candidates.settle();
    assert_eq!(app.state.search_candidates.entry_count(), 2, "the students' and the staff's");
    let figures = metrics(&app).await;
    assert_eq!(sample(&figures, "search_candidates_total{outcome=\"miss\"}"), 2.0, "{figures}");
    assert_eq!(sample(&figures, "search_candidates_total{outcome=\"hit\"}"), 4.0, "{figures}");
}

/// A first page makes the headline of each hit once: the same search again takes them as
/// kept, an edit of the row makes its headline again (with the new text), and a headline made
/// for the staff's page of a private post never reaches a student, whose page does not hold
/// the post. Every page is the one the peer without the cache gives.
#[tokio::test]
async fn headlines_are_made_once_per_row_and_again_after_an_edit() {
    let (app, fresh, w) = caching_and_fresh().await;
    let no_filter = json!(null);
    let post = |title: &str, body: &str, private: bool, author: i64| {
        let (title, body) = (title.to_owned(), body.to_owned());
        let app = &app;
        async move {
            app.ids(
                "INSERT INTO posts (course_id, user_id, title, body, kind, private) \
                 VALUES ($1, $2, $3, $4, 'question', $5) RETURNING id",
                vec![w.course.into(), author.into(), title.into(), body.into(), private.into()],
            )
            .await[0]
        }
    };
    let open = post("Zircon lattice", "is zircon cubic or tetragonal", false, w.alice).await;
    post("Zircon dating", "my zircon sample is secretly from the moon", true, w.alice).await;
    let made_and_kept = |figures: &str| {
        (
            sample(figures, "search_headlines_total{outcome=\"made\"}"),
            sample(figures, "search_headlines_total{outcome=\"kept\"}"),
        )
    };
    let same_as_fresh = |user: i64| {
        let (app, fresh, no_filter) = (&app, &fresh, &no_filter);
        async move {
            let page = search_at(app, app.addr, user, w.course, "zircon", no_filter, None).await;
            let expected = search_at(app, fresh.addr, user, w.course, "zircon", no_filter, None).await;
            assert_eq!(seen(&page), seen(&expected));
            page
        }
    };

    let first = same_as_fresh(w.bob).await;
    assert_eq!(seen(&first)["hits"].as_array().map(Vec::len), Some(1), "{first}");
    assert_eq!(made_and_kept(&metrics(&app).await), (1.0, 0.0), "made by the first page");
    same_as_fresh(w.bob).await;
    assert_eq!(made_and_kept(&metrics(&app).await), (1.0, 1.0), "kept for the second");

    exec(&app, "UPDATE posts SET body = 'zircon crystals grow slowly' WHERE id = $1", vec![open.into()]).await;
    let edited = same_as_fresh(w.bob).await;
    assert!(edited.to_string().contains("crystals"), "the edited text: {edited}");
    assert_eq!(made_and_kept(&metrics(&app).await), (2.0, 1.0), "made again after the edit");

    // The staff see the private post, and its headline is kept; the student's page is still
    // without it, and nothing of its text reaches them.
    let staff = same_as_fresh(w.instructor).await;
    assert!(staff.to_string().contains("moon"), "{staff}");
    let student = same_as_fresh(w.bob).await;
    assert!(!student.to_string().contains("moon"), "{student}");
    assert_eq!(seen(&student)["hits"].as_array().map(Vec::len), Some(1), "{student}");
}

/// `SEARCH_RATE_PER_MINUTE` counts each user's searches that look for matches afresh (a first
/// page without kept candidates, a later page, a search across courses) before they look: one
/// past the limit is RATE_LIMITED with `retryAfterMs` and keeps nothing, while a first page from
/// kept candidates is still answered and not counted, and other users keep their own budget.
#[tokio::test]
async fn searches_that_look_afresh_are_limited_per_user_and_kept_ones_are_not() {
    let app = TestApp::spawn_with(|s| s.search_rate_per_minute = 3).await;
    let w = World::create(&app).await;
    exec(
        &app,
        "INSERT INTO posts (course_id, user_id, title, body, kind) \
           SELECT $1, $2, 'Otter ' || n, 'otters and beavers', 'question' FROM generate_series(1, 3) n",
        vec![w.course.into(), w.alice.into()],
    )
    .await;
    let no_filter = json!(null);
    let hits = |r: &Json| seen(r)["hits"].as_array().map(Vec::len);
    // Three fresh first pages: the limit.
    for query in ["otter", "beaver", "otters beavers"] {
        let page = search_at(&app, app.addr, w.bob, w.course, query, &no_filter, None).await;
        assert_eq!(hits(&page), Some(3), "{query}: {page}");
    }
    app.state.search_candidates.settle();
    assert_eq!(app.state.search_candidates.entry_count(), 3);

    // A fourth query: refused before it looks, so nothing is kept for it.
    let refused = search_at(&app, app.addr, w.bob, w.course, "otter -beaver", &no_filter, None).await;
    assert_eq!(error_code(&refused).as_deref(), Some("RATE_LIMITED"), "{refused}");
    let retry = refused["errors"][0]["extensions"]["retryAfterMs"].as_u64().unwrap_or(0);
    assert!(retry > 0 && retry <= 60_000, "{refused}");
    app.state.search_candidates.settle();
    assert_eq!(app.state.search_candidates.entry_count(), 3, "nothing kept for a refused search");

    // Kept candidates still answer, uncounted, as often as asked.
    for _ in 0..5 {
        let page = search_at(&app, app.addr, w.bob, w.course, "otter", &no_filter, None).await;
        assert_eq!(hits(&page), Some(3), "{page}");
    }
    // A later page looks afresh: refused.
    let first = app
        .gql(
            Some(&app.token(w.bob)),
            SEARCH,
            json!({ "c": gid("Course", w.course), "q": "otter", "n": 1, "a": null, "f": null }),
        )
        .await;
    let after = end_cursor(&first).expect("a next page");
    let later = search_at(&app, app.addr, w.bob, w.course, "otter", &no_filter, Some(&after)).await;
    assert_eq!(error_code(&later).as_deref(), Some("RATE_LIMITED"), "{later}");
    // So does a search across the user's courses (of one course it is that course's search).
    app.enroll(w.other_course, w.bob, "student").await;
    // The new membership reaches the search within moments (the membership cache); until
    // then the search is the one course's, answered from kept candidates.
    let mut across = json!(null);
    for _ in 0..40 {
        across = app
            .gql(Some(&app.token(w.bob)), "query { search(query: \"otter\") { edges { node { score } } } }", json!({}))
            .await;
        if error_code(&across).is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(error_code(&across).as_deref(), Some("RATE_LIMITED"), "{across}");

    // Another user has a budget of their own.
    let other = search_at(&app, app.addr, w.alice, w.course, "otter -beaver", &no_filter, None).await;
    assert_eq!(hits(&other), Some(0), "{other}");
    let figures = metrics(&app).await;
    assert_eq!(sample(&figures, "search_candidates_total{outcome=\"limited\"}"), 3.0, "{figures}");
}
