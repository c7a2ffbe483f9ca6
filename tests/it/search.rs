//! Full-text search (`Course.search`, `Query.search`), similar titles (`Course.similarPosts`)
//! and the course's search language (`setSearchLanguage`), against real PostgreSQL and Redis:
//! ranking, query syntax, snippets, keyset paging while posts arrive, cursors bound to their
//! query, and access exactly as reading posts (private questions, anonymous authors, deleted
//! content, non-members) in every like mode.

use course_forum::testing::config::LikeMode;
use serde_json::{Value as Json, json};

use crate::common::{TestApp, World, error_code, gid, raw_id};

const SEARCH: &str = "query($c: ID!, $q: String!, $n: Int, $a: String, $f: SearchFilter) { course(id: $c) { \
    search(query: $q, first: $n, after: $a, filter: $f) { pageInfo { hasNextPage endCursor } \
    edges { cursor node { matched score snippet post { id title } comment { id body } reply { id body } } } } } }";

const SIMILAR: &str = "query($c: ID!, $t: String!, $n: Int) { course(id: $c) { \
    similarPosts(text: $t, first: $n) { similarity post { id title resolved } } } }";

/// Creates a post through the API; returns its database id.
async fn post(app: &TestApp, user: i64, course: i64, title: &str, body: &str, extra: Json) -> i64 {
    let mut vars =
        json!({ "c": gid("Course", course), "t": title, "b": body, "k": "DISCUSSION", "an": false, "pr": false });
    if let (Some(vars), Some(extra)) = (vars.as_object_mut(), extra.as_object()) {
        vars.extend(extra.clone());
    }
    let data = app
        .gql_ok(
            Some(&app.token(user)),
            "mutation($c: ID!, $t: String!, $b: String!, $k: PostKind!, $an: Boolean!, $pr: Boolean!) { \
             createPost(courseId: $c, title: $t, body: $b, kind: $k, anonymous: $an, private: $pr) { id } }",
            vars,
        )
        .await;
    raw_id(data["createPost"]["id"].as_str().expect("post id"))
}

/// The raw answer of a course search.
async fn search_raw(
    app: &TestApp,
    user: i64,
    course: i64,
    query: &str,
    first: Option<i64>,
    after: Option<&str>,
    filter: Json,
) -> Json {
    search_raw_at(app, app.addr, user, course, query, first, after, filter).await
}

/// The raw answer of a course search, asked of the server at `addr`.
#[allow(clippy::too_many_arguments)]
async fn search_raw_at(
    app: &TestApp,
    addr: std::net::SocketAddr,
    user: i64,
    course: i64,
    query: &str,
    first: Option<i64>,
    after: Option<&str>,
    filter: Json,
) -> Json {
    app.gql_at(
        addr,
        Some(&app.token(user)),
        SEARCH,
        json!({ "c": gid("Course", course), "q": query, "n": first, "a": after, "f": filter }),
    )
    .await
}

/// The connection of a course search that must succeed.
async fn search(app: &TestApp, user: i64, course: i64, query: &str, filter: Json) -> Json {
    let response = search_raw(app, user, course, query, Some(50), None, filter).await;
    assert!(response.get("errors").is_none(), "search {query}: {response}");
    response["data"]["course"]["search"].clone()
}

/// The ids of the posts of the hits, in order.
fn hit_posts(connection: &Json) -> Vec<i64> {
    edges(connection).iter().map(|e| raw_id(e["node"]["post"]["id"].as_str().expect("post id"))).collect()
}

fn edges(connection: &Json) -> Vec<Json> {
    connection["edges"].as_array().cloned().unwrap_or_default()
}

/// Every hit of a course search, page after page of 50 (at most `cap` hits, or the walk does
/// not end).
async fn walk(app: &TestApp, user: i64, course: i64, query: &str, cap: usize) -> Vec<Json> {
    walk_at(app, app.addr, user, course, query, cap).await
}

/// `walk`, asked of the server at `addr`.
async fn walk_at(
    app: &TestApp,
    addr: std::net::SocketAddr,
    user: i64,
    course: i64,
    query: &str,
    cap: usize,
) -> Vec<Json> {
    let mut hits: Vec<Json> = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let response = search_raw_at(app, addr, user, course, query, Some(50), after.as_deref(), json!(null)).await;
        assert!(response.get("errors").is_none(), "{response}");
        let connection = &response["data"]["course"]["search"];
        hits.extend(edges(connection));
        if connection["pageInfo"]["hasNextPage"] != true {
            return hits;
        }
        after = connection["pageInfo"]["endCursor"].as_str().map(str::to_owned);
        assert!(hits.len() <= cap, "the walk does not end");
    }
}

async fn set_created(app: &TestApp, table: &str, id: i64, days_ago: i64) {
    app.scalar_i64(
        &format!(
            "UPDATE {table} SET created_at = now() - make_interval(days => $2::int) WHERE id = $1 RETURNING id AS v"
        ),
        [id.into(), (days_ago as i32).into()],
    )
    .await;
}

#[tokio::test]
async fn title_beats_body_and_endorsement_resolution_and_recency_raise_a_hit() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    let in_body = post(&app, w.alice, w.course, "A question about loops", "my recursion never stops", json!({})).await;
    let in_title = post(&app, w.bob, w.course, "Recursion depth", "what is the limit here", json!({})).await;
    let found = search(&app, w.alice, w.course, "recursion", json!(null)).await;
    assert_eq!(hit_posts(&found), vec![in_title, in_body], "{found}");

    // Endorsement lifts the body match above the title match.
    app.gql_ok(
        Some(&app.token(w.instructor)),
        "mutation($id: ID!) { endorse(id: $id, endorsed: true) { __typename } }",
        json!({ "id": gid("Post", in_body) }),
    )
    .await;
    let found = search(&app, w.alice, w.course, "recursion", json!(null)).await;
    assert_eq!(hit_posts(&found), vec![in_body, in_title], "{found}");

    // A resolved question rises above an unresolved one of the same text.
    let open =
        post(&app, w.alice, w.course, "Sorting stability", "is merge sort stable", json!({ "k": "QUESTION" })).await;
    let resolved =
        post(&app, w.bob, w.course, "Sorting stability", "is merge sort stable", json!({ "k": "QUESTION" })).await;
    set_created(&app, "posts", resolved, 1).await;
    let found = search(&app, w.alice, w.course, "stability", json!(null)).await;
    assert_eq!(hit_posts(&found), vec![open, resolved], "newer first while neither is resolved: {found}");
    app.gql_ok(
        Some(&app.token(w.instructor)),
        "mutation($p: ID!) { markResolved(postId: $p, resolved: true) { resolved } }",
        json!({ "p": gid("Post", resolved) }),
    )
    .await;
    let found = search(&app, w.alice, w.course, "stability", json!(null)).await;
    assert_eq!(hit_posts(&found), vec![resolved, open], "{found}");

    // Recency: the same text, the newer first, with strictly decreasing scores.
    let old = post(&app, w.alice, w.course, "Heap property", "binary heaps", json!({})).await;
    let new = post(&app, w.alice, w.course, "Heap property", "binary heaps", json!({})).await;
    set_created(&app, "posts", old, 60).await;
    set_created(&app, "posts", new, 2).await;
    let found = search(&app, w.alice, w.course, "heap", json!(null)).await;
    assert_eq!(hit_posts(&found), vec![new, old], "{found}");
    let scores: Vec<f64> = edges(&found).iter().map(|e| e["node"]["score"].as_f64().expect("score")).collect();
    assert!(scores[0] > scores[1], "{scores:?}");

    // Likes do not move the ranking.
    app.gql_ok(
        Some(&app.token(w.bob)),
        "mutation($p: ID!) { likePost(postId: $p) { likeCount } }",
        json!({ "p": gid("Post", old) }),
    )
    .await;
    let again = search(&app, w.alice, w.course, "heap", json!(null)).await;
    assert_eq!(hit_posts(&again), vec![new, old], "{again}");
}

#[tokio::test]
async fn phrases_exclusions_and_alternatives_follow_web_search_syntax() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    let a = post(&app, w.alice, w.course, "Linked lists", "a doubly linked list in C", json!({})).await;
    let b = post(&app, w.alice, w.course, "Lists linked", "the list was never linked to C", json!({})).await;
    let c = post(&app, w.alice, w.course, "Hash tables", "open addressing", json!({})).await;
    let sorted = |mut v: Vec<i64>| {
        v.sort_unstable();
        v
    };
    assert_eq!(sorted(hit_posts(&search(&app, w.bob, w.course, "linked list", json!(null)).await)), sorted(vec![a, b]));
    assert_eq!(hit_posts(&search(&app, w.bob, w.course, "\"doubly linked list\"", json!(null)).await), vec![a]);
    assert_eq!(hit_posts(&search(&app, w.bob, w.course, "linked -doubly", json!(null)).await), vec![b]);
    assert_eq!(
        sorted(hit_posts(&search(&app, w.bob, w.course, "doubly or addressing", json!(null)).await)),
        sorted(vec![a, c])
    );
    // Stop words only: nothing, no error.
    let nothing = search(&app, w.bob, w.course, "the of and", json!(null)).await;
    assert!(edges(&nothing).is_empty(), "{nothing}");
}

#[tokio::test]
async fn snippets_mark_matches_and_escape_everything_else() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    let body = "Beware <script>alert('pwned')</script> & friends when running the tests";
    let id = post(&app, w.alice, w.course, "Unsafe input", body, json!({})).await;
    let comment = app.create_comment(&app.token(w.bob), id, "I am running it <b>twice</b>").await;
    let found = search(&app, w.bob, w.course, "run", json!(null)).await;
    let hits = edges(&found);
    assert_eq!(hits.len(), 2, "{found}");
    let post_hit = hits.iter().find(|e| e["node"]["matched"] == "POST").expect("the post");
    let snippet = post_hit["node"]["snippet"].as_str().expect("snippet");
    assert!(snippet.contains("<mark>running</mark>"), "{snippet}");
    assert!(snippet.contains("&lt;script&gt;"), "{snippet}");
    assert!(!snippet.contains("<script"), "{snippet}");
    assert!(snippet.contains("&amp;"), "{snippet}");
    // Only <mark> tags: every other '<' was escaped.
    let tags = snippet.matches('<').count();
    assert_eq!(tags, snippet.matches("<mark>").count() + snippet.matches("</mark>").count(), "{snippet}");
    let comment_hit = hits.iter().find(|e| e["node"]["matched"] == "COMMENT").expect("the comment");
    assert_eq!(comment_hit["node"]["comment"]["id"], gid("Comment", comment));
    assert!(comment_hit["node"]["reply"].is_null());
    let snippet = comment_hit["node"]["snippet"].as_str().expect("snippet");
    assert!(snippet.contains("<mark>running</mark>") && snippet.contains("&lt;b&gt;"), "{snippet}");
}

#[tokio::test]
async fn a_walk_neither_repeats_nor_skips_while_posts_arrive_and_its_cursor_serves_it_alone() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    let mut before = Vec::new();
    for i in 0..13 {
        // Varied text so the scores differ, and some equal ones (the keyset's tie-breaks).
        let body = if i % 3 == 0 { "graph graph traversal".to_owned() } else { format!("graph number {i}") };
        before.push(post(&app, w.alice, w.course, &format!("Topic {i}"), &body, json!({})).await);
    }
    let comment = app.create_comment(&app.token(w.bob), before[0], "graph coloring").await;
    let mut seen: Vec<String> = Vec::new();
    let mut after: Option<String> = None;
    let mut pages = 0;
    loop {
        let response = search_raw(&app, w.alice, w.course, "graph", Some(4), after.as_deref(), json!(null)).await;
        assert!(response.get("errors").is_none(), "{response}");
        let connection = &response["data"]["course"]["search"];
        for edge in edges(connection) {
            let node = &edge["node"];
            let key = if node["matched"] == "POST" {
                node["post"]["id"].as_str().expect("id").to_owned()
            } else {
                node["comment"]["id"].as_str().expect("id").to_owned()
            };
            assert!(!seen.contains(&key), "{key} repeated");
            seen.push(key);
        }
        pages += 1;
        // New matching posts arrive mid-walk (they score highest: newest, title match).
        if pages == 1 {
            post(&app, w.bob, w.course, "Graph theory", "graph graph graph", json!({})).await;
            post(&app, w.bob, w.course, "Graph basics", "graph", json!({})).await;
        }
        if connection["pageInfo"]["hasNextPage"] != true {
            break;
        }
        after = connection["pageInfo"]["endCursor"].as_str().map(str::to_owned);
        assert!(pages < 20, "the walk does not end");
    }
    for id in &before {
        assert!(seen.contains(&gid("Post", *id)), "post {id} skipped: {seen:?}");
    }
    assert!(seen.contains(&gid("Comment", comment)), "the comment was skipped");
    assert!(pages >= 4, "{pages} pages");

    // The cursor of this walk is refused by another query, another filter, another course.
    let first = search_raw(&app, w.alice, w.course, "graph", Some(2), None, json!(null)).await;
    let cursor = first["data"]["course"]["search"]["pageInfo"]["endCursor"].as_str().expect("cursor").to_owned();
    for (query, filter) in [("graphs traversal", json!(null)), ("graph", json!({ "kind": "QUESTION" }))] {
        let refused = search_raw(&app, w.alice, w.course, query, Some(2), Some(&cursor), filter).await;
        assert_eq!(error_code(&refused).as_deref(), Some("BAD_USER_INPUT"), "{refused}");
    }
    let everywhere = app
        .gql(
            Some(&app.token(w.alice)),
            "query($q: String!, $a: String) { search(query: $q, after: $a) { edges { cursor } } }",
            json!({ "q": "graph", "a": cursor }),
        )
        .await;
    assert_eq!(error_code(&everywhere).as_deref(), Some("BAD_USER_INPUT"), "{everywhere}");
    let forged = search_raw(&app, w.alice, w.course, "graph", Some(2), Some("czpmb28"), json!(null)).await;
    assert_eq!(error_code(&forged).as_deref(), Some("BAD_USER_INPUT"), "{forged}");
}

/// The candidates of a kind are its newest matches wherever they are: a first window of the
/// newest ids that holds too few sends the search to the wider windows below it, a walk finds
/// exactly the newest 100 (`forum::search::CANDIDATES`) matching posts, and a word only an old
/// post holds is found in the last window.
#[tokio::test]
async fn a_search_reaches_below_its_first_window_and_finds_exactly_the_newest_matches() {
    // Windows whatever the words are expected to match (a table this small would be looked up
    // in one pass: `a_query_expected_to_match_few_rows_is_looked_up_in_one_pass…`).
    let app = TestApp::spawn_with(windows_only).await;
    let w = World::create(&app).await;
    // 6,000 posts (the first window is the newest 2,500 ids), one in 40 about a quokka: 150
    // matches, about 62 of them in the first window; the first one about a platypus.
    let made = app
        .scalar_i64(
            "WITH made AS (INSERT INTO posts (course_id, user_id, title, body) \
               SELECT $1, $2, CASE WHEN n = 1 THEN 'platypus spotted' WHEN n % 40 = 0 THEN 'quokka sighting ' || n \
                                   ELSE 'filler ' || n END, 'text ' || n \
               FROM generate_series(1, 6000) n RETURNING id) SELECT count(*) AS v FROM made",
            [w.course.into(), w.alice.into()],
        )
        .await;
    assert_eq!(made, 6000);
    let matching = app
        .ids("SELECT id FROM posts WHERE course_id = $1 AND title LIKE 'quokka%' ORDER BY id DESC", [w.course.into()])
        .await;
    assert_eq!(matching.len(), 150);

    let seen: Vec<i64> = walk(&app, w.bob, w.course, "quokka", 150)
        .await
        .iter()
        .map(|e| raw_id(e["node"]["post"]["id"].as_str().expect("post id")))
        .collect();
    let mut found = seen.clone();
    found.sort_unstable_by(|a, b| b.cmp(a));
    found.dedup();
    assert_eq!(found.len(), seen.len(), "a hit repeated");
    assert_eq!(found, matching[..100].to_vec(), "the walk is the newest 100 matches");

    let oldest = search(&app, w.bob, w.course, "platypus", json!(null)).await;
    assert_eq!(hit_posts(&oldest).len(), 1, "{oldest}");
}

/// Settings under which every search looks in windows of ids, however few rows its words are
/// expected to match.
fn windows_only(settings: &mut course_forum::testing::config::Settings) {
    settings.search_one_pass_posts = 0;
    settings.search_one_pass_comments = 0;
}

/// A query expected to match few rows (estimated from the lexeme statistics of the search
/// vectors, `forum::search_stats`) is looked up in one pass of each kind's index, instead of
/// window by window; the answer is the same. 6,000 posts and 3,000 comments, one in 40 and one
/// in 20 about a quokka (150 of each): once the tables are analyzed the estimates are within
/// `SEARCH_ONE_PASS_POSTS` and `…_COMMENTS`, and a frequent word's and a query of exclusions
/// alone are not; a query naming a lexeme twice (which a product of frequencies would take for
/// rarer than it is) has none, so it takes the windows. A server looking up in one pass and one looking in windows only walk the
/// same hits, exactly the newest 100 matches of each kind.
#[tokio::test]
async fn a_query_expected_to_match_few_rows_is_looked_up_in_one_pass_and_finds_what_windows_find() {
    use sea_orm::{ConnectionTrait, DbBackend, Statement};
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    let host = post(&app, w.alice, w.course, "Sightings thread", "post yours below", json!({})).await;
    app.scalar_i64(
        "WITH made AS (INSERT INTO posts (course_id, user_id, title, body) \
           SELECT $1, $2, CASE WHEN n % 40 = 0 THEN 'quokka sighting ' || n ELSE 'filler ' || n END, 'text ' || n \
           FROM generate_series(1, 6000) n RETURNING id) SELECT count(*) AS v FROM made",
        [w.course.into(), w.alice.into()],
    )
    .await;
    app.scalar_i64(
        "WITH made AS (INSERT INTO comments (post_id, user_id, body) \
           SELECT $1, $2, CASE WHEN n % 20 = 0 THEN 'quokka seen ' || n ELSE 'filler ' || n END \
           FROM generate_series(1, 3000) n RETURNING id) SELECT count(*) AS v FROM made",
        [host.into(), w.bob.into()],
    )
    .await;
    app.db.execute_unprepared("ANALYZE posts; ANALYZE comments").await.expect("analyze");

    // The server's estimate, from the statistics ANALYZE just wrote.
    let stats = course_forum::testing::search::SearchStats::read(&app.db).await.expect("statistics");
    let estimates = |query: &'static str| {
        let (app, stats) = (&app, &stats);
        async move {
            let row = app
                .db
                .query_one_raw(Statement::from_sql_and_values(
                    DbBackend::Postgres,
                    "SELECT websearch_to_tsquery('english', $1)::text AS q",
                    [query.into()],
                ))
                .await
                .expect("tsquery")
                .expect("a row");
            stats.expected(&row.try_get::<String>("", "q").expect("q"))
        }
    };
    let (posts, comments) = estimates("quokka").await;
    let (posts, comments) = (posts.expect("an estimate"), comments.expect("an estimate"));
    assert!(posts > 0.0 && posts <= 300.0, "quokka in posts: {posts}");
    assert!(comments > 0.0 && comments <= 1_000.0, "quokka in comments: {comments}");
    let (posts, comments) = estimates("filler").await;
    assert!(posts.expect("an estimate") > 300.0 && comments.expect("an estimate") > 1_000.0);
    // Exclusions alone match most rows; a lexeme twice and only stop words have no estimate.
    let (posts, comments) = estimates("-quokka").await;
    assert!(posts.expect("an estimate") > 300.0 && comments.expect("an estimate") > 1_000.0);
    for untrusted in ["quokka quokka", "\"quokka quokka\"", "the"] {
        assert_eq!(estimates(untrusted).await, (None, None), "{untrusted}");
    }

    let ids = |edges: Vec<Json>| -> Vec<(String, i64)> {
        edges
            .iter()
            .map(|edge| {
                let node = &edge["node"];
                match node["comment"]["id"].as_str() {
                    Some(comment) => ("comment".to_owned(), raw_id(comment)),
                    None => ("post".to_owned(), raw_id(node["post"]["id"].as_str().expect("post id"))),
                }
            })
            .collect()
    };
    let windows = app.spawn_peer(windows_only).await;
    let in_one_pass = ids(walk(&app, w.bob, w.course, "quokka", 200).await);
    let in_windows = ids(walk_at(&app, windows.addr, w.bob, w.course, "quokka", 200).await);
    assert_eq!(in_one_pass, in_windows, "one pass and windows walk the same hits");
    let newest_posts = app
        .ids(
            "SELECT id FROM posts WHERE course_id = $1 AND title LIKE 'quokka%' ORDER BY id DESC LIMIT 100",
            [w.course.into()],
        )
        .await;
    let newest_comments = app
        .ids(
            "SELECT id FROM comments WHERE post_id = $1 AND body LIKE 'quokka%' ORDER BY id DESC LIMIT 100",
            [host.into()],
        )
        .await;
    let mut found_posts: Vec<i64> = in_one_pass.iter().filter(|(k, _)| k == "post").map(|(_, id)| *id).collect();
    let mut found_comments: Vec<i64> = in_one_pass.iter().filter(|(k, _)| k == "comment").map(|(_, id)| *id).collect();
    found_posts.sort_unstable_by(|a, b| b.cmp(a));
    found_comments.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(found_posts, newest_posts, "the newest 100 matching posts");
    assert_eq!(found_comments, newest_comments, "the newest 100 matching comments");
}

/// The same for comments, whose recent windows are whole id buckets looked up in the bucketed
/// GIN index (migration 0025). With the newest comment at 82,000 the windows are the ids from
/// 86,016 (past the newest bucket), buckets 17 to 20 (from 69,632), buckets 5 to 16 (from
/// 20,480) and the range below. Batches of comments straddle both lower edges, so a window that
/// leaves out or repeats a bucket changes the answer: the walk is exactly the newest 100
/// matching comments, a word in the two comments either side of 20,480 finds both, and a word
/// only the oldest comment holds is found in the last window. A window of buckets reads its
/// matches from `comment_matches_in_buckets` (migration 0026), on a plan that looks the buckets
/// up whatever the words: the same word twice finds the same, and the function gives the
/// buckets' matches newest first. Across courses of two search languages the windows are
/// planned inline, and the walk is the same. The index and the function serve the expression
/// the search names.
#[tokio::test]
async fn comment_windows_of_id_buckets_find_exactly_the_newest_matches() {
    use course_forum::testing::search::COMMENT_BUCKET;
    use sea_orm::{ConnectionTrait, DbBackend, Statement, TransactionTrait};
    let app = TestApp::spawn_with(windows_only).await;
    let w = World::create(&app).await;

    let host = post(&app, w.alice, w.course, "Sightings thread", "post yours below", json!({})).await;
    // Batches of 2,000 comments, one in 40 about a quokka, from ids 1, 19,481, 68,633 and
    // 80,001. The very first is about a platypus; the 20th and the 1,500th of the second batch
    // (ids 19,500 and 20,980) about a wombat.
    for (batch, from) in [(0_i64, 0_i64), (1, 19_480), (2, 68_632), (3, 80_000)] {
        if from > 0 {
            app.scalar_i64("SELECT setval('comments_id_seq', $1) AS v", [from.into()]).await;
        }
        let made = app
            .scalar_i64(
                "WITH made AS (INSERT INTO comments (post_id, user_id, body) \
                   SELECT $1, $2, CASE WHEN $3 = 0 AND n = 1 THEN 'platypus spotted' \
                                       WHEN $3 = 1 AND n IN (20, 1500) THEN 'wombat burrow ' || n \
                                       WHEN n % 40 = 0 THEN 'quokka sighting ' || n ELSE 'filler ' || n END \
                   FROM generate_series(1, 2000) n RETURNING id) SELECT count(*) AS v FROM made",
                [host.into(), w.bob.into(), batch.into()],
            )
            .await;
        assert_eq!(made, 2000);
    }
    let ids_of = |body: &'static str| {
        app.ids(
            "SELECT id FROM comments WHERE post_id = $1 AND body LIKE $2 ORDER BY id DESC",
            [host.into(), body.into()],
        )
    };
    let matching = ids_of("quokka%").await;
    assert_eq!(matching.len(), 200);
    // The newest 100: the last batch and the one across 69,632.
    assert!(matching[50..100].iter().any(|&id| id < 69_632) && matching[50..100].iter().any(|&id| id >= 69_632));
    assert!(matching[99] > 68_632 && matching[100] < 21_481);

    let mut seen: Vec<i64> = Vec::new();
    for edge in walk(&app, w.alice, w.course, "quokka", 200).await {
        assert_eq!(edge["node"]["matched"], "COMMENT", "{edge}");
        seen.push(raw_id(edge["node"]["comment"]["id"].as_str().expect("comment id")));
    }
    let mut found = seen.clone();
    found.sort_unstable_by(|a, b| b.cmp(a));
    found.dedup();
    assert_eq!(found.len(), seen.len(), "a hit repeated");
    assert_eq!(found, matching[..100].to_vec(), "the walk is the newest 100 matches");

    // The same word twice: the planner would take it for far rarer than it is (its frequency
    // squared) and read every match of it; `comment_matches_in_buckets` looks the buckets up
    // whatever the words, and the answer is the same.
    let twice: Vec<i64> = walk(&app, w.alice, w.course, "quokka quokka", 200)
        .await
        .iter()
        .map(|edge| raw_id(edge["node"]["comment"]["id"].as_str().expect("comment id")))
        .collect();
    assert_eq!(twice, seen, "the same word twice finds what it finds once");
    let in_buckets_17_to_20 = matching
        .iter()
        .copied()
        .filter(|&id| (17 * COMMENT_BUCKET..21 * COMMENT_BUCKET).contains(&id))
        .collect::<Vec<_>>();
    let row = app
        .db
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT array_agg(m.id ORDER BY m.n) AS ids FROM comment_matches_in_buckets(\
             websearch_to_tsquery('english', 'quokka'), 'english', '{17,18,19,20}') WITH ORDINALITY m(id, a, b, c, d, e, f, g, h, n)",
        ))
        .await
        .expect("bucket matches")
        .expect("a row");
    assert_eq!(
        row.try_get::<Vec<i64>>("", "ids").expect("ids"),
        in_buckets_17_to_20,
        "newest first, those buckets only"
    );

    // Across courses of two search languages the windows of buckets are planned inline: the
    // same newest 100 through `Query.search`, and the other course's post about a quokka.
    app.scalar_i64(
        "UPDATE courses SET search_config = 'simple' WHERE id = $1 RETURNING id AS v",
        [w.other_course.into()],
    )
    .await;
    let elsewhere =
        post(&app, w.outsider, w.other_course, "A quokka elsewhere", "seen in the other course", json!({})).await;
    app.enroll(w.other_course, w.alice, "student").await;
    let mut across: Vec<i64> = Vec::new();
    for attempt in 0.. {
        let (mut comments, mut posts) = (Vec::new(), Vec::new());
        let mut after: Option<String> = None;
        loop {
            let data = app
                .gql_ok(
                    Some(&app.token(w.alice)),
                    "query($q: String!, $a: String) { search(query: $q, first: 50, after: $a) { \
                     pageInfo { hasNextPage endCursor } edges { node { post { id } comment { id } } } } }",
                    json!({ "q": "quokka", "a": after }),
                )
                .await;
            let connection = &data["search"];
            for edge in edges(connection) {
                match edge["node"]["comment"]["id"].as_str() {
                    Some(comment) => comments.push(raw_id(comment)),
                    None => posts.push(raw_id(edge["node"]["post"]["id"].as_str().expect("post id"))),
                }
            }
            if connection["pageInfo"]["hasNextPage"] != true {
                break;
            }
            after = connection["pageInfo"]["endCursor"].as_str().map(str::to_owned);
            assert!(comments.len() <= 200, "the walk does not end");
        }
        // The new membership reaches the search within moments (the membership cache).
        if posts.is_empty() && attempt < 40 {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            continue;
        }
        assert_eq!(posts, vec![elsewhere], "the other course's post, once");
        across = comments;
        break;
    }
    across.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(across, matching[..100].to_vec(), "across courses of two languages");

    let comment_hits = |connection: &Json| -> Vec<i64> {
        edges(connection).iter().map(|e| raw_id(e["node"]["comment"]["id"].as_str().expect("comment id"))).collect()
    };
    let wombats = ids_of("wombat%").await;
    assert_eq!(wombats, vec![20_980, 19_500]);
    let mut found = comment_hits(&search(&app, w.alice, w.course, "wombat", json!(null)).await);
    found.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(found, wombats, "a wombat either side of the lowest bucket");
    let platypus = ids_of("platypus%").await;
    assert_eq!(comment_hits(&search(&app, w.alice, w.course, "platypus", json!(null)).await), platypus);

    // The index has the search's bucket width and serves its condition.
    let definition = app
        .db
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'comments_search_bucket_idx'",
        ))
        .await
        .expect("index definition")
        .expect("comments_search_bucket_idx exists");
    let definition: String = definition.try_get("", "indexdef").expect("indexdef");
    assert!(definition.contains(&format!("(id / {COMMENT_BUCKET})")), "{definition}");
    // So does the function the windows read, on its one generic plan.
    let function = app
        .db
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT pg_get_functiondef('comment_matches_in_buckets'::regproc) AS def",
        ))
        .await
        .expect("function definition")
        .expect("comment_matches_in_buckets exists");
    let function: String = function.try_get("", "def").expect("def");
    assert!(function.contains(&format!("(c.id / {COMMENT_BUCKET})")), "{function}");
    assert!(function.contains("plan_cache_mode TO 'force_generic_plan'"), "{function}");
    let txn = app.db.begin().await.expect("begin");
    txn.execute_unprepared("SET LOCAL enable_seqscan = off").await.expect("set");
    let plan = txn
        .query_all_raw(Statement::from_string(
            DbBackend::Postgres,
            format!(
                "EXPLAIN SELECT c.id FROM comments c WHERE c.deleted_at IS NULL \
                 AND c.search_doc @@ websearch_to_tsquery('english', 'quokka') \
                 AND (c.id / {COMMENT_BUCKET}) = ANY('{{17,18}}'::bigint[])"
            ),
        ))
        .await
        .expect("explain");
    let plan: Vec<String> = plan.iter().map(|r| r.try_get::<String>("", "QUERY PLAN").expect("plan line")).collect();
    let plan = plan.join("\n");
    assert!(
        plan.contains("comments_search_bucket_idx") && plan.contains(&format!("(id / {COMMENT_BUCKET})")),
        "{plan}"
    );
    txn.rollback().await.expect("rollback");
}

/// Who finds what: private questions, anonymous authors, deleted content, non-members.
async fn search_finds_only_what_the_searcher_may_read(mode: LikeMode) {
    let app = TestApp::spawn_in(mode).await;
    let w = World::create(&app).await;
    app.gql_ok(
        Some(&app.token(w.instructor)),
        "mutation($c: ID!) { setCourseAnonymity(courseId: $c, anonymity: CLASSMATES) { id } }",
        json!({ "c": gid("Course", w.course) }),
    )
    .await;
    let private =
        post(&app, w.alice, w.course, "Private zebra question", "zebra", json!({ "k": "QUESTION", "pr": true })).await;
    let anonymous = post(&app, w.alice, w.course, "Anonymous zebra", "zebra stripes", json!({ "an": true })).await;
    let signed = post(&app, w.alice, w.course, "Signed zebra", "zebra crossing", json!({})).await;
    let doomed = post(&app, w.bob, w.course, "Deleted zebra", "zebra", json!({})).await;
    let _on_doomed = app.create_comment(&app.token(w.alice), doomed, "zebra comment on a deleted post").await;
    let deleted_comment = app.create_comment(&app.token(w.bob), signed, "zebra comment deleted").await;
    let kept_comment = app.create_comment(&app.token(w.bob), signed, "zebra comment kept").await;
    let reply = app.create_reply(&app.token(w.alice), &gid("Comment", kept_comment), "zebra reply").await;
    app.delete_post(&app.token(w.bob), doomed).await;
    app.gql_ok(
        Some(&app.token(w.bob)),
        "mutation($c: ID!) { deleteComment(commentId: $c) { __typename } }",
        json!({ "c": gid("Comment", deleted_comment) }),
    )
    .await;
    // Something of another course that matches too.
    post(&app, w.outsider, w.other_course, "Zebra elsewhere", "zebra", json!({})).await;

    let found_by = |user: i64, filter: Json| {
        let app = &app;
        async move {
            let c = search(app, user, w.course, "zebra", filter).await;
            let mut keys: Vec<String> = edges(&c)
                .iter()
                .map(|e| {
                    let n = &e["node"];
                    match n["matched"].as_str() {
                        Some("COMMENT") => n["comment"]["id"].as_str().unwrap_or_default().to_owned(),
                        Some("REPLY") => n["reply"]["id"].as_str().unwrap_or_default().to_owned(),
                        _ => n["post"]["id"].as_str().unwrap_or_default().to_owned(),
                    }
                })
                .collect();
            keys.sort();
            keys
        }
    };
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    let public = vec![gid("Post", anonymous), gid("Post", signed), gid("Comment", kept_comment), gid("Reply", reply)];
    let with_private = sorted(public.iter().cloned().chain([gid("Post", private)]).collect());
    assert_eq!(found_by(w.alice, json!(null)).await, with_private, "the author finds her private question");
    assert_eq!(found_by(w.instructor, json!(null)).await, with_private, "staff find it");
    assert_eq!(found_by(w.bob, json!(null)).await, sorted(public.clone()), "a classmate does not");

    // The author filter: the classmate never finds Alice's anonymous post by her id; staff do
    // (anonymous to classmates only); Alice finds her own.
    let by_alice = json!({ "authorId": gid("User", w.alice) });
    let alice_public = sorted(vec![gid("Post", signed), gid("Reply", reply)]);
    assert_eq!(found_by(w.bob, by_alice.clone()).await, alice_public, "the classmate");
    let all_of_alice =
        sorted(vec![gid("Post", signed), gid("Reply", reply), gid("Post", anonymous), gid("Post", private)]);
    assert_eq!(found_by(w.instructor, by_alice.clone()).await, all_of_alice, "staff");
    assert_eq!(found_by(w.alice, by_alice).await, all_of_alice, "herself");

    // Query.search: every course of the viewer, nothing of others'.
    let everywhere = app
        .gql_ok(
            Some(&app.token(w.bob)),
            "query { search(query: \"zebra\", first: 50) { edges { node { post { id course { id } } } } } }",
            json!({}),
        )
        .await;
    let courses: Vec<Json> =
        edges(&everywhere["search"]).iter().map(|e| e["node"]["post"]["course"]["id"].clone()).collect();
    assert_eq!(courses.len(), public.len(), "{everywhere}");
    assert!(courses.iter().all(|c| *c == json!(gid("Course", w.course))), "{everywhere}");

    // A non-member: FORBIDDEN, as reading the course is.
    let refused = search_raw(&app, w.outsider, w.course, "zebra", None, None, json!(null)).await;
    assert_eq!(error_code(&refused).as_deref(), Some("FORBIDDEN"), "{refused}");
    let similar =
        app.gql(Some(&app.token(w.outsider)), SIMILAR, json!({ "c": gid("Course", w.course), "t": "zebra" })).await;
    assert_eq!(error_code(&similar).as_deref(), Some("FORBIDDEN"), "{similar}");
    // similarPosts obeys the same visibility: the classmate never sees the private question.
    let titles = |data: &Json| -> Vec<String> {
        data["course"]["similarPosts"]
            .as_array()
            .map(|a| a.iter().filter_map(|p| p["post"]["title"].as_str().map(str::to_owned)).collect())
            .unwrap_or_default()
    };
    let vars = json!({ "c": gid("Course", w.course), "t": "Private zebra question", "n": 10 });
    let bob_sees = titles(&app.gql_ok(Some(&app.token(w.bob)), SIMILAR, vars.clone()).await);
    let staff_sees = titles(&app.gql_ok(Some(&app.token(w.instructor)), SIMILAR, vars).await);
    assert!(!bob_sees.iter().any(|t| t == "Private zebra question"), "{bob_sees:?}");
    assert!(staff_sees.iter().any(|t| t == "Private zebra question"), "{staff_sees:?}");
    assert!(!staff_sees.iter().any(|t| t == "Deleted zebra"), "{staff_sees:?}");
}

mod search_finds_only_what_the_searcher_may_read {
    #[tokio::test]
    async fn sync() {
        super::search_finds_only_what_the_searcher_may_read(course_forum::testing::config::LikeMode::Sync).await
    }

    #[tokio::test]
    async fn recount() {
        super::search_finds_only_what_the_searcher_may_read(course_forum::testing::config::LikeMode::Recount).await
    }

    #[tokio::test]
    async fn buffered() {
        super::search_finds_only_what_the_searcher_may_read(course_forum::testing::config::LikeMode::Buffered).await
    }
}

/// A query with no word an index can look up (`that -quokka` in English is `!'quokka'`, the
/// stopword dropped) finds every row without the word. A window of buckets reads such a query's
/// matches through the primary key: looked up in the GIN index it read the whole index (2.2 s
/// for one window in `bench search`, past `STATEMENT_TIMEOUT`). Shown by the index's scans in
/// the transaction, and by the rows found.
#[tokio::test]
async fn a_query_without_words_to_look_up_reads_no_word_index_and_finds_every_row_without_the_word() {
    use sea_orm::{ConnectionTrait, DbBackend, Statement, TransactionTrait};
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    let host = post(&app, w.alice, w.course, "Sightings thread", "post yours below", json!({})).await;
    let made = app
        .scalar_i64(
            "WITH made AS (INSERT INTO comments (post_id, user_id, body) \
               SELECT $1, $2, CASE WHEN n % 10 = 0 THEN 'quokka sighting ' || n ELSE 'filler ' || n END \
               FROM generate_series(1, 600) n RETURNING id) SELECT count(*) AS v FROM made",
            [host.into(), w.bob.into()],
        )
        .await;
    assert_eq!(made, 600);
    let without = app
        .ids("SELECT id FROM comments WHERE post_id = $1 AND body NOT LIKE 'quokka%' ORDER BY id DESC", [host.into()])
        .await;
    assert_eq!(without.len(), 540);

    // Through the API: the first page holds only rows without the word.
    let response = search_raw(&app, w.alice, w.course, "that -quokka", Some(50), None, json!(null)).await;
    assert!(response.get("errors").is_none(), "{response}");
    let hits = edges(&response["data"]["course"]["search"]);
    assert_eq!(hits.len(), 50, "{response}");
    for hit in &hits {
        if let Some(comment) = hit["node"]["comment"]["id"].as_str() {
            assert!(without.contains(&raw_id(comment)), "{hit}");
        }
    }

    // The function itself, in one transaction whose index scans PostgreSQL counts.
    let txn = app.db.begin().await.expect("begin");
    // A table this small is best read whole, or in id order: with those paths closed (and its
    // statistics read), a word is looked up in its index, and a query without words still never is.
    txn.execute_unprepared("ANALYZE comments").await.expect("analyze");
    txn.execute_unprepared("SET LOCAL enable_seqscan = off").await.expect("set");
    txn.execute_unprepared("SET LOCAL enable_indexscan = off").await.expect("set");
    let scans = || async {
        let row = txn
            .query_one_raw(Statement::from_string(
                DbBackend::Postgres,
                "SELECT pg_stat_get_xact_numscans('comments_search_bucket_idx'::regclass) AS v",
            ))
            .await
            .expect("scans")
            .expect("a row");
        row.try_get::<i64>("", "v").expect("v")
    };
    let matches = |query: &'static str| {
        let txn = &txn;
        async move {
            let row = txn
                .query_one_raw(Statement::from_sql_and_values(
                    DbBackend::Postgres,
                    "SELECT coalesce(array_agg(m.id ORDER BY m.n), '{}') AS ids FROM comment_matches_in_buckets(\
                     websearch_to_tsquery('english', $1), 'english', '{0}') \
                     WITH ORDINALITY m(id, a, b, c, d, e, f, g, h, n) WHERE m.a = $2",
                    [query.into(), host.into()],
                ))
                .await
                .expect("bucket matches")
                .expect("a row");
            row.try_get::<Vec<i64>>("", "ids").expect("ids")
        }
    };
    let before = scans().await;
    assert_eq!(matches("that -quokka").await, without, "every row without the word, newest first");
    assert_eq!(matches("-quokka").await, without);
    assert_eq!(scans().await, before, "no scan of the words' index for a query without words to look up");
    assert_eq!(matches("quokka").await.len(), 60);
    assert_eq!(scans().await, before + 1, "a word is looked up in the index");
    txn.rollback().await.expect("rollback");
}

#[tokio::test]
async fn similar_posts_tolerate_typos_and_put_resolved_questions_first() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    let discussion = post(&app, w.alice, w.course, "Recursion in Python", "how deep", json!({})).await;
    let question =
        post(&app, w.bob, w.course, "Recursion in Python scripts", "stack overflow", json!({ "k": "QUESTION" })).await;
    post(&app, w.bob, w.course, "Matrix multiplication", "numpy", json!({})).await;
    let vars = json!({ "c": gid("Course", w.course), "t": "recusion in pyhton" });
    let data = app.gql_ok(Some(&app.token(w.alice)), SIMILAR, vars.clone()).await;
    let ids: Vec<i64> = data["course"]["similarPosts"]
        .as_array()
        .expect("list")
        .iter()
        .map(|p| raw_id(p["post"]["id"].as_str().expect("id")))
        .collect();
    assert_eq!(ids, vec![discussion, question], "the most alike first, nothing unlike: {data}");
    app.gql_ok(
        Some(&app.token(w.instructor)),
        "mutation($p: ID!) { markResolved(postId: $p, resolved: true) { resolved } }",
        json!({ "p": gid("Post", question) }),
    )
    .await;
    let data = app.gql_ok(Some(&app.token(w.alice)), SIMILAR, vars).await;
    let list = data["course"]["similarPosts"].as_array().expect("list");
    assert_eq!(raw_id(list[0]["post"]["id"].as_str().expect("id")), question, "{data}");
    assert_eq!(list[0]["post"]["resolved"], true);
    let similarity = list[1]["similarity"].as_f64().expect("similarity");
    assert!(similarity > 0.2 && similarity <= 1.0, "{similarity}");
}

#[tokio::test]
async fn staff_alone_set_the_search_language_and_it_reindexes_the_course() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    let id = post(&app, w.alice, w.course, "Morning routine", "I run every day", json!({})).await;
    app.create_comment(&app.token(w.bob), id, "she keeps running").await;
    let found = |q: &'static str| {
        let app = &app;
        async move { edges(&search(app, w.bob, w.course, q, json!(null)).await).len() }
    };
    assert_eq!(found("running").await, 2, "english stems: running finds run");
    let set =
        "mutation($c: ID!, $l: SearchLanguage!) { setSearchLanguage(courseId: $c, language: $l) { searchLanguage } }";
    let vars = json!({ "c": gid("Course", w.course), "l": "SIMPLE" });
    let refused = app.gql(Some(&app.token(w.alice)), set, vars.clone()).await;
    assert_eq!(error_code(&refused).as_deref(), Some("FORBIDDEN"), "{refused}");
    let language = "query($c: ID!) { course(id: $c) { searchLanguage } }";
    let data = app.gql_ok(Some(&app.token(w.alice)), language, json!({ "c": gid("Course", w.course) })).await;
    assert_eq!(data["course"]["searchLanguage"], "ENGLISH");

    let data = app.gql_ok(Some(&app.token(w.instructor)), set, vars).await;
    assert_eq!(data["setSearchLanguage"]["searchLanguage"], "SIMPLE");
    assert_eq!(found("running").await, 1, "simple: only the comment that says running");
    assert_eq!(found("run").await, 1, "only the post that says run");
    assert_eq!(found("the").await, 0, "no post says the");
    // A post written after the switch is indexed the simple way too.
    post(&app, w.bob, w.course, "The runs", "the running of the bulls", json!({})).await;
    assert_eq!(found("the").await, 1, "stop words are words in simple");
    // Back to English: stemming again, everything re-indexed.
    let vars = json!({ "c": gid("Course", w.course), "l": "ENGLISH" });
    app.gql_ok(Some(&app.token(w.instructor)), set, vars).await;
    assert_eq!(found("running").await, 3);
}

#[tokio::test]
async fn bad_inputs_are_refused_and_change_nothing() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    post(&app, w.alice, w.course, "Pointers", "pointer arithmetic", json!({})).await;
    let long = "x".repeat(201);
    for (query, first) in
        [("", None), ("   ", None), (long.as_str(), None), ("pointer", Some(0)), ("pointer", Some(51))]
    {
        let response = search_raw(&app, w.alice, w.course, query, first, None, json!(null)).await;
        assert_eq!(error_code(&response).as_deref(), Some("BAD_USER_INPUT"), "{query:?} {first:?}: {response}");
    }
    let bad_author =
        search_raw(&app, w.alice, w.course, "pointer", None, None, json!({ "authorId": gid("Course", 1) })).await;
    assert_eq!(error_code(&bad_author).as_deref(), Some("BAD_USER_INPUT"), "{bad_author}");
    for (text, first) in [("", None), (long.as_str(), None), ("pointer", Some(0)), ("pointer", Some(11))] {
        let response = app
            .gql(Some(&app.token(w.alice)), SIMILAR, json!({ "c": gid("Course", w.course), "t": text, "n": first }))
            .await;
        assert_eq!(error_code(&response).as_deref(), Some("BAD_USER_INPUT"), "{text:?} {first:?}: {response}");
    }
    let set = "mutation($c: ID!) { setSearchLanguage(courseId: $c, language: SIMPLE) { id } }";
    let response = app.gql(Some(&app.token(w.instructor)), set, json!({ "c": gid("Post", 1) })).await;
    assert_eq!(error_code(&response).as_deref(), Some("BAD_USER_INPUT"), "{response}");
    let language =
        app.scalar_i64("SELECT count(*) AS v FROM courses WHERE search_config <> 'english'::regconfig", []).await;
    assert_eq!(language, 0, "nothing changed");
    assert_eq!(edges(&search(&app, w.alice, w.course, "pointer", json!(null)).await).len(), 1);
}

/// `title_words` as (course, word, titles) rows, and what the live titles say it must be.
async fn lexicon_and_live_titles(app: &TestApp) -> (Vec<(i64, String, i64)>, Vec<(i64, String, i64)>) {
    use sea_orm::{ConnectionTrait, DbBackend, Statement};
    let read = |sql: &'static str| async move {
        app.db
            .query_all_raw(Statement::from_string(DbBackend::Postgres, sql))
            .await
            .expect("lexicon query")
            .iter()
            .map(|r| (r.try_get("", "c").expect("c"), r.try_get("", "w").expect("w"), r.try_get("", "n").expect("n")))
            .collect::<Vec<(i64, String, i64)>>()
    };
    let lexicon = read("SELECT course_id AS c, word AS w, posts::bigint AS n FROM title_words ORDER BY 1, 2").await;
    let live = read(
        "SELECT course_id AS c, w, count(*) AS n FROM posts, unnest(title_words_of(title)) w \
         WHERE deleted_at IS NULL GROUP BY 1, 2 ORDER BY 1, 2",
    )
    .await;
    (lexicon, live)
}

/// The lexicon similar posts read stays exactly what the live titles hold while posts,
/// title edits and deletions race on the same words (its triggers take row locks in key
/// order, so none of them deadlocks), and suggestions follow an edit at once.
#[tokio::test]
async fn the_title_lexicon_follows_racing_posts_edits_and_deletions() {
    use futures_util::future::join_all;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    let words = ["graph", "trees", "python", "exam", "recursion", "stack", "heap"];
    let mut rng = StdRng::seed_from_u64(0x7469_746c);
    let titles: Vec<String> = (0..24)
        .map(|_| (0..3).map(|_| words[rng.random_range(0..words.len())]).collect::<Vec<_>>().join(" "))
        .collect();
    let authors = [w.alice, w.bob];
    let ids: Vec<i64> =
        join_all(titles.iter().enumerate().map(|(n, t)| post(&app, authors[n % 2], w.course, t, "body", json!({}))))
            .await;
    let (lexicon, live) = lexicon_and_live_titles(&app).await;
    assert!(!lexicon.is_empty());
    assert_eq!(lexicon, live, "after racing inserts");

    // A third deleted, a third renamed (to words of their own and shared ones), all at once.
    let changes = ids.iter().enumerate().map(|(n, &id)| {
        let (app, token) = (&app, app.token(authors[n % 2]));
        async move {
            match n % 3 {
                0 => {
                    app.gql_ok(
                        Some(&token),
                        "mutation($p: ID!) { deletePost(postId: $p) { deletedId } }",
                        json!({ "p": gid("Post", id) }),
                    )
                    .await;
                }
                1 => {
                    app.gql_ok(
                        Some(&token),
                        "mutation($p: ID!, $t: String!) { editPost(postId: $p, title: $t) { id } }",
                        json!({ "p": gid("Post", id), "t": format!("stack zeppelin{n} heap") }),
                    )
                    .await;
                }
                _ => {}
            }
        }
    });
    join_all(changes).await;
    let (lexicon, live) = lexicon_and_live_titles(&app).await;
    assert_eq!(lexicon, live, "after racing edits and deletions");
    assert!(lexicon.iter().any(|(_, word, n)| word == "zeppelin1" && *n == 1), "an edit's new words: {lexicon:?}");

    // An edited title is suggested by its new word, typo included, at once.
    let data = app
        .gql_ok(Some(&app.token(w.alice)), SIMILAR, json!({ "c": gid("Course", w.course), "t": "zepelin4 stack" }))
        .await;
    let found: Vec<i64> = data["course"]["similarPosts"]
        .as_array()
        .expect("list")
        .iter()
        .map(|p| raw_id(p["post"]["id"].as_str().expect("id")))
        .collect();
    assert!(found.contains(&ids[4]), "{data}");
}

/// Searches run on a pool of their own whose connections plan every statement for its own
/// words (a cached generic plan of a search is blind to them) and start no parallel workers,
/// and their statements are counted like every request's; the other requests' pool keeps its
/// cached plans.
#[tokio::test]
async fn searches_run_on_their_own_pool_planned_for_their_words() {
    use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement};
    async fn setting(db: &DatabaseConnection, name: &str) -> String {
        db.query_one_raw(Statement::from_string(DbBackend::Postgres, format!("SHOW {name}")))
            .await
            .expect("SHOW")
            .expect("a row")
            .try_get("", name)
            .expect(name)
    }
    let app = TestApp::spawn().await;
    assert_eq!(setting(&app.state.search_db, "plan_cache_mode").await, "force_custom_plan");
    assert_eq!(setting(&app.state.db, "plan_cache_mode").await, "auto");
    assert_eq!(setting(&app.state.search_db, "max_parallel_workers_per_gather").await, "0");
    assert_eq!(setting(&app.state.search_db, "random_page_cost").await, "1.1");
    // First pages from kept candidates: the same pool settings, on one generic plan.
    assert_eq!(setting(&app.state.search_kept_db, "plan_cache_mode").await, "force_generic_plan");
    assert_eq!(setting(&app.state.search_kept_db, "max_parallel_workers_per_gather").await, "0");
    assert_eq!(setting(&app.state.search_kept_db, "random_page_cost").await, "1.1");

    let w = World::create(&app).await;
    post(&app, w.alice, w.course, "Zebra crossing", "stripes", json!({})).await;
    let before = app.state.sql_statements.get();
    assert_eq!(edges(&search(&app, w.bob, w.course, "zebra", json!(null)).await).len(), 1);
    assert!(app.state.sql_statements.get() > before, "a search's statements are counted");
    // A query that excludes what it asks for is answered without a statement.
    let before = app.state.sql_statements.get();
    assert!(edges(&search(&app, w.bob, w.course, "zebra -Zebra", json!(null)).await).is_empty());
    let membership_reads = app.state.sql_statements.get() - before;
    let before = app.state.sql_statements.get();
    search(&app, w.bob, w.course, "zebra", json!(null)).await;
    assert!(app.state.sql_statements.get() - before > membership_reads, "the plain search ran more statements");
}

/// The write stamps of posts and comments (`title_xid`, `title_version`, `search_xid`, which
/// the similar-titles index and the kept search candidates catch up by) move with every write
/// of what they cover and with nothing else, and no BEFORE UPDATE row trigger sets them: with
/// one, PostgreSQL recomputes the generated `search_doc` (a `to_tsvector` of the text) on every
/// like, comment and view count written to the row (migration 0023).
#[tokio::test]
async fn stamps_leave_counter_updates_alone() {
    let app = TestApp::spawn().await;
    let before_update_row_triggers = app
        .scalar_i64(
            "SELECT count(*) AS v FROM pg_trigger WHERE tgrelid IN ('posts'::regclass, 'comments'::regclass) \
             AND NOT tgisinternal AND tgtype & 1 = 1 AND tgtype & 2 = 2 AND tgtype & 16 = 16",
            [],
        )
        .await;
    assert_eq!(before_update_row_triggers, 0, "a BEFORE UPDATE row trigger on posts or comments");

    let w = World::create(&app).await;
    let post_id = post(&app, w.alice, w.course, "Stamped title", "stamped body", json!({})).await;
    let comment_id = app
        .scalar_i64(
            "INSERT INTO comments (post_id, user_id, body) VALUES ($1, $2, 'a stamped comment') RETURNING id AS v",
            [post_id.into(), w.bob.into()],
        )
        .await;
    // (title_xid, title_version, search_xid) of the post; search_xid of the comment.
    let stamps = || async {
        let post = |column: &str| format!("SELECT {column}::text::bigint AS v FROM posts WHERE id = $1");
        (
            app.scalar_i64(&post("title_xid"), [post_id.into()]).await,
            app.scalar_i64("SELECT title_version AS v FROM posts WHERE id = $1", [post_id.into()]).await,
            app.scalar_i64(&post("search_xid"), [post_id.into()]).await,
            app.scalar_i64("SELECT search_xid::text::bigint AS v FROM comments WHERE id = $1", [comment_id.into()])
                .await,
        )
    };
    // Each write in a transaction of its own, whose id it reports.
    let write = |sql: &'static str, id: i64| {
        let app = &app;
        async move {
            app.scalar_i64(
                &format!("WITH w AS ({sql} RETURNING 1) SELECT pg_current_xact_id()::text::bigint AS v FROM w"),
                [id.into()],
            )
            .await
        }
    };
    let start = stamps().await;

    write("UPDATE posts SET like_count = like_count + 1, comment_count = comment_count + 1, view_count = view_count + 5, pinned_at = now() WHERE id = $1", post_id).await;
    write("UPDATE comments SET like_count = like_count + 1 WHERE id = $1", comment_id).await;
    assert_eq!(stamps().await, start, "counters and pins move no stamp");

    let body_edit = write("UPDATE posts SET body = 'another body' WHERE id = $1", post_id).await;
    let after_body = stamps().await;
    assert_eq!((after_body.0, after_body.1, after_body.3), (start.0, start.1, start.3), "a body is not a title");
    assert_eq!(after_body.2, body_edit, "a body edit restamps the post for search");

    let title_edit = write("UPDATE posts SET title = 'Another title' WHERE id = $1", post_id).await;
    assert_eq!(stamps().await, (title_edit, start.1 + 1, title_edit, start.3), "one more title version");
    let resolved = write("UPDATE posts SET resolved_at = now() WHERE id = $1", post_id).await;
    assert_eq!(stamps().await, (resolved, start.1 + 2, resolved, start.3));

    write("UPDATE comments SET endorsed_by = endorsed_by, body = body WHERE id = $1", comment_id).await;
    assert_eq!(stamps().await.3, start.3, "a write that changes nothing it covers restamps nothing");
    let edited = write("UPDATE comments SET body = 'an edited comment' WHERE id = $1", comment_id).await;
    assert_eq!(stamps().await.3, edited, "a comment edit restamps the comment");
    let matching = app
        .scalar_i64(
            "SELECT count(*) AS v FROM comments WHERE id = $1 AND search_doc @@ to_tsquery('english', 'edited')",
            [comment_id.into()],
        )
        .await;
    assert_eq!(matching, 1, "the comment's vector holds the edited text");
}
