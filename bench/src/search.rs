//! `bench search`: finding and catching up on a big course. One course of `--posts` posts
//! (100,000) and `--comments` comments and replies (1,000,000), their words drawn from a
//! vocabulary with a skewed (Zipf-like) frequency, as real text has. On one buffered server,
//! over `--connections` keep-alive connections (32), each measured side by side in one run:
//! - `Course.search` with the query forms students type (a word, two words, a "phrase",
//!   `a -b`, `a or b`), built from the course's own titles so that they find something;
//! - `Course.similarPosts` with the start of a title as it is typed, one typo in it;
//! - the course page (20 posts, NEW) plain, and with `isUnread`, `unreadCommentCount` and
//!   `Course.unreadPostCount`, read by members who each opened some posts: the SQL statements
//!   per page of each.
//!
//! It prints p50/p99, the rates, and the size of every table and index that search and
//! unread tracking use.

use std::sync::Arc;
use std::time::{Duration, Instant};

use course_forum::testing::config::LikeMode;
use course_forum::testing::db::stmt;
use course_forum::testing::error::{AppError, AppResult};
use course_forum::testing::graphql::ids::{NodeKind, encode};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use sea_orm::{ConnectionTrait, FromQueryResult};
use serde::Serialize;
use serde_json::json;

use crate::fixture::Fixture;
use crate::load::{self, Request};
use crate::server::{CpuSplit, Server, label};
use crate::storm::tokens;

#[derive(clap::Args)]
pub struct SearchBench {
    /// Posts in the course.
    #[arg(long, default_value_t = 100_000)]
    posts: i64,
    /// Comments and replies in the course (a quarter of them replies).
    #[arg(long, default_value_t = 1_000_000)]
    comments: i64,
    /// Members who search and read (each one connection's worth of tokens).
    #[arg(long, default_value_t = 200)]
    readers: usize,
    /// Concurrent keep-alive HTTP connections.
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// Searches measured (after a tenth as many untimed).
    #[arg(long, default_value_t = 4_000)]
    searches: usize,
    /// Similar-post lookups measured.
    #[arg(long, default_value_t = 4_000)]
    similar: usize,
    /// Pages measured, of each kind (plain, with unread counts).
    #[arg(long, default_value_t = 10_000)]
    pages: usize,
    /// Longest one measurement may send requests, in seconds.
    #[arg(long, default_value_t = 60)]
    time_cap_secs: u64,
    /// Which requests to measure, of `search`, `similar`, `page`, `unread` (all by default).
    #[arg(long, value_delimiter = ',', default_value = "search,similar,page,unread")]
    kinds: Vec<Kind>,
    /// The order searches are sent in: `mixed` (a seeded shuffle: each query the untimed
    /// warm-up did not send recurs about 8 times, and the first of them comes early, so its
    /// first sights fall mostly in the first third of the run, among the other searches) or
    /// `in-turn` (the queries in turn, so the first sights come one after another at the start
    /// of the measured run).
    #[arg(long, value_enum, default_value_t = SearchOrder::Mixed)]
    search_order: SearchOrder,
    /// Leaves the generated database in place (its name is printed), for EXPLAIN.
    #[arg(long)]
    keep_database: bool,
    /// Measures on a database a run with `--keep-database` left (its name, `cf_bench_…`)
    /// instead of generating one; it is kept, and its schema left as it is (`course-forum
    /// migrate` with its URL brings it to a newer build's).
    #[arg(long, value_name = "NAME")]
    reuse_database: Option<String>,
}

/// The order `bench search` sends its searches in (`--search-order`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SearchOrder {
    Mixed,
    InTurn,
}

/// A kind of request `bench search` measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    Search,
    Similar,
    Page,
    Unread,
}

/// One measured kind of request.
#[derive(Debug, Serialize)]
pub struct Measured {
    pub server: String,
    pub what: String,
    pub requests: usize,
    pub failed: usize,
    pub first_failure: Option<String>,
    pub per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub sql_per_request: f64,
    pub cpu_ms_per_request: f64,
    /// Bytes the server keeps for it in memory (the title index, for similar posts).
    pub memory_bytes: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct SearchResult {
    pub servers: Vec<String>,
    pub posts: i64,
    pub comments: i64,
    /// How long generating the course took; `None` when a kept one was reused.
    pub generate_seconds: Option<f64>,
    pub connections: usize,
    pub measured: Vec<Measured>,
    /// Tables and indexes (name, bytes), largest first.
    pub sizes: Vec<(String, i64)>,
}

/// Words students write, then made-up ones, most frequent first: word k of the vocabulary
/// is drawn with a probability falling with k.
fn vocabulary() -> Vec<String> {
    const COMMON: &str = "the a to of and in is for it on how do with what this that my can why not \
        error question answer homework assignment exam midterm final lecture lab quiz grade deadline \
        python java recursion pointer array list loop function variable class object method string \
        integer float memory stack heap queue tree graph sort search hash table complexity runtime \
        compile compiler syntax bug debug test case input output file read write print return value \
        type null exception thread process lock database query index join network socket server \
        client request response cache proof induction lemma theorem matrix vector derivative integral \
        limit probability distribution sample variance mean median regression model training data \
        slides notes office hours extension submission rubric partial credit clarification example \
        solution hint problem part section chapter textbook reading project team partner office";
    let mut words: Vec<String> = COMMON.split_whitespace().map(str::to_owned).collect();
    let syllables = ["ka", "lo", "mi", "ren", "tu", "sa", "vo", "pel", "dri", "no", "qua", "zen", "fi", "ber", "ul"];
    'outer: for a in syllables {
        for b in syllables {
            for c in syllables {
                if words.len() >= 3_000 {
                    break 'outer;
                }
                words.push(format!("{a}{b}{c}"));
            }
        }
    }
    words
}

/// SQL that draws `count` words from `$1` (the vocabulary) for the row of `seed`, skewed to
/// the front of the list (a uniform draw to the power 2.2). `k - k` ties the aggregate to the
/// subquery: an aggregate of outer columns only would belong to the outer query.
fn words_sql(count: &str, seed: &str) -> String {
    format!(
        "(SELECT string_agg(w.v[1 + floor(power(random(), 2.2) * cardinality(w.v))::int + k - k], ' ') \
          FROM generate_series(1, {count}) k WHERE {seed} IS NOT NULL)"
    )
}

/// Fills course 1 with `posts` posts and `comments` comments and replies, in batches (each
/// its own statement, so progress shows and no transaction grows huge).
async fn generate(fixture: &Fixture, authors: usize, posts: i64, comments: i64) -> AppResult<()> {
    let words: Vec<String> = vocabulary();
    let started = Instant::now();
    let batch = 10_000i64;
    let mut made = 0;
    while made < posts {
        let n = batch.min(posts - made);
        let sql = format!(
            "WITH w AS (SELECT $1::text[] AS v) \
             INSERT INTO posts (course_id, user_id, title, body, kind, created_at) \
             SELECT 1, 2 + (g % $2), {title}, {body}, \
                    CASE WHEN g % 3 = 0 THEN 'question' ELSE 'discussion' END, \
                    now() - (($3 + $4 - g) * interval '20 seconds') \
             FROM generate_series($3 + 1, $3 + $4) g, w",
            title = words_sql("4 + g % 6", "g"),
            body = words_sql("20 + g % 40", "g"),
        );
        fixture
            .db
            .execute_raw(stmt(&sql, [words.clone().into(), (authors as i64).into(), made.into(), n.into()]))
            .await?;
        made += n;
        eprintln!("search: {made} posts ({:.0} s)", started.elapsed().as_secs_f64());
    }
    // Top-level comments on posts drawn at random (recent posts a little more often), then
    // replies to a third of them: together `comments`.
    let top_level = comments * 3 / 4;
    let batch = 50_000i64;
    let mut made = 0;
    while made < top_level {
        let n = batch.min(top_level - made);
        let sql = format!(
            "WITH w AS (SELECT $1::text[] AS v), span AS (SELECT min(id) AS lo, max(id) AS hi FROM posts) \
             INSERT INTO comments (post_id, user_id, body) \
             SELECT span.hi - floor(power(random(), 1.5) * (span.hi - span.lo))::bigint, 2 + (g % $2), {body} \
             FROM generate_series($3 + 1, $3 + $4) g, w, span",
            body = words_sql("8 + g % 25", "g"),
        );
        fixture
            .db
            .execute_raw(stmt(&sql, [words.clone().into(), (authors as i64).into(), made.into(), n.into()]))
            .await?;
        made += n;
        eprintln!("search: {made} comments ({:.0} s)", started.elapsed().as_secs_f64());
    }
    let replies = comments - top_level;
    let sql = format!(
        "WITH w AS (SELECT $1::text[] AS v), roots AS ( \
           SELECT id, post_id, user_id, row_number() OVER (ORDER BY id) AS g FROM comments \
           WHERE parent_id IS NULL AND id % 3 = 0 ORDER BY id LIMIT $2) \
         INSERT INTO comments (post_id, parent_id, reply_to_user_id, user_id, body) \
         SELECT roots.post_id, roots.id, roots.user_id, 2 + ((roots.g * 7) % $3), {body} FROM roots, w",
        body = words_sql("6 + roots.g % 20", "roots.g"),
    );
    fixture.db.execute_raw(stmt(&sql, [words.into(), replies.into(), (authors as i64).into()])).await?;
    fixture
        .db
        .execute_unprepared(
            "UPDATE comments SET reply_count = r.n FROM (SELECT parent_id, count(*) AS n FROM comments \
               WHERE parent_id IS NOT NULL GROUP BY parent_id) r WHERE comments.id = r.parent_id; \
             UPDATE posts SET comment_count = c.n FROM (SELECT post_id, count(*) AS n FROM comments GROUP BY post_id) c \
               WHERE posts.id = c.post_id; \
             UPDATE posts SET resolved_at = created_at + interval '1 hour' WHERE kind = 'question' AND id % 4 = 0;",
        )
        .await?;
    // One statement each: VACUUM cannot run in the implicit transaction of a multi-statement string.
    fixture.db.execute_unprepared("VACUUM ANALYZE posts").await?;
    fixture.db.execute_unprepared("VACUUM ANALYZE comments").await?;
    // The lexicon of title words took one upsert per word per batch: vacuumed as autovacuum
    // would within a minute of such a load, not left with ten dead rows per live one.
    fixture.db.execute_unprepared("VACUUM ANALYZE title_words").await?;
    eprintln!("search: {replies} replies, counts, VACUUM ANALYZE ({:.0} s)", started.elapsed().as_secs_f64());
    Ok(())
}

#[derive(FromQueryResult)]
struct Title {
    title: String,
}

/// The queries, from titles of the course: each form students type, in turn.
fn search_queries(titles: &[String], rng: &mut rand::rngs::StdRng) -> Vec<String> {
    let mut queries = Vec::new();
    for (n, title) in titles.iter().enumerate() {
        let words: Vec<&str> = title.split_whitespace().filter(|w| w.len() > 3).collect();
        if words.len() < 2 {
            continue;
        }
        let a = words[rng.random_range(0..words.len())];
        let b = words[rng.random_range(0..words.len())];
        queries.push(match n % 5 {
            0 => a.to_owned(),
            1 => format!("{a} {b}"),
            2 => {
                let all: Vec<&str> = title.split_whitespace().collect();
                let at = rng.random_range(0..all.len() - 1);
                format!("\"{} {}\"", all[at], all[at + 1])
            }
            3 => format!("{a} -{b}"),
            _ => format!("{a} or {b}"),
        });
    }
    queries
}

/// The start of a title as it is typed (three or four words), one letter pair swapped.
fn typed_titles(titles: &[String], rng: &mut rand::rngs::StdRng) -> Vec<String> {
    titles
        .iter()
        .filter_map(|title| {
            let mut words: Vec<String> =
                title.split_whitespace().take(3 + rng.random_range(0..2)).map(str::to_owned).collect();
            let long: Vec<usize> = (0..words.len()).filter(|&i| words[i].len() >= 5).collect();
            let &which = long.get(rng.random_range(0..long.len().max(1)))?;
            let mut letters: Vec<char> = words[which].chars().collect();
            let at = rng.random_range(1..letters.len() - 1);
            letters.swap(at, at + 1);
            words[which] = letters.into_iter().collect();
            Some(words.join(" "))
        })
        .collect()
}

const SEARCH: &str = "query($c: ID!, $q: String!) { course(id: $c) { search(query: $q, first: 10) { \
    edges { cursor node { matched score snippet post { id title } comment { id } reply { id } } } \
    pageInfo { hasNextPage endCursor } } } }";
const SIMILAR: &str = "query($c: ID!, $t: String!) { course(id: $c) { similarPosts(text: $t, first: 5) { \
    similarity post { id title resolved } } } }";
const PAGE: &str = "query($c: ID!) { course(id: $c) { posts(first: 20) { edges { node { \
    id title likeCount commentCount likedByMe author { id handle displayName } } } } } }";
const UNREAD_PAGE: &str = "query($c: ID!) { course(id: $c) { unreadPostCount posts(first: 20) { edges { node { \
    id title likeCount commentCount likedByMe author { id handle displayName } isUnread unreadCommentCount } } } } }";

/// Runs `bodies` round-robin over the readers' tokens, untimed then measured (the measured
/// requests shuffled when `order` is `Mixed`), and measures them.
// Each argument is one piece of the measurement, as its caller has it.
#[allow(clippy::too_many_arguments)]
async fn measure(
    what: &str,
    server: &Server,
    fixture: &Fixture,
    tokens: &[String],
    bodies: Vec<String>,
    requests: usize,
    connections: usize,
    time_cap: Duration,
    check: load::Check,
    order: SearchOrder,
) -> AppResult<Measured> {
    let make = |n: usize| Request {
        authorization: tokens[n % tokens.len()].clone(),
        body: bodies[n % bodies.len()].clone(),
        forwarded_for: None,
    };
    // Untimed, and its failures (a statement past STATEMENT_TIMEOUT) are not fatal: the
    // measured run counts and shows them.
    let warm: Vec<Request> = (0..(requests / 10).max(tokens.len())).map(make).collect();
    let warm_bodies: std::collections::HashSet<String> = warm.iter().map(|request| request.body.clone()).collect();
    load::run(&server.graphql_url(), warm, connections, time_cap, check.clone(), false).await?;
    let mut measured_requests: Vec<Request> = (0..requests).map(make).collect();
    if order == SearchOrder::Mixed {
        measured_requests.shuffle(&mut rand::rngs::StdRng::seed_from_u64(31));
    }
    let first_sights = first_sights(&measured_requests, &warm_bodies);
    let counters_before = server.counters().await?;
    let outcomes_before = candidate_outcomes(server).await?;
    let cpu_before = CpuSplit::now(server.pid, &fixture.db).await?;
    let report = load::run(&server.graphql_url(), measured_requests, connections, time_cap, check, false).await?;
    let cpu = CpuSplit::now(server.pid, &fixture.db).await?.since(&cpu_before);
    let counters = server.counters().await? - counters_before;
    let outcomes: Vec<String> = candidate_outcomes(server)
        .await?
        .into_iter()
        .map(|(outcome, n)| format!("{outcome} {}", n - outcomes_before.get(&outcome).copied().unwrap_or(0.0)))
        .collect();
    let measured = Measured {
        server: server.label.clone(),
        what: what.to_owned(),
        requests: report.ok,
        failed: report.failed,
        first_failure: report.first_failure.clone(),
        per_s: report.rate(),
        p50_ms: report.p(50.0),
        p99_ms: report.p(99.0),
        max_ms: report.max(),
        sql_per_request: counters.sql / report.ok.max(1) as f64,
        cpu_ms_per_request: cpu.ms_per(report.ok),
        memory_bytes: None,
    };
    eprintln!(
        "search: {} {:<22} {:>7.0}/s  p50 {:>6.1} ms  p99 {:>6.1} ms  failed {}  sql/request {:.2}",
        measured.server,
        measured.what,
        measured.per_s,
        measured.p50_ms,
        measured.p99_ms,
        measured.failed,
        measured.sql_per_request
    );
    let per_request = |seconds: f64| seconds * 1000.0 / report.ok.max(1) as f64;
    eprintln!(
        "search: {} {:<22} CPU ms per request: server {:.2}, PostgreSQL {:.2}, Redis {:.2} (the bench {:.2})",
        measured.server,
        measured.what,
        per_request(cpu.server),
        per_request(cpu.postgres),
        per_request(cpu.redis),
        per_request(cpu.bench),
    );
    if what == "search" {
        eprintln!("search: {} candidates: {}", measured.server, outcomes.join(", "));
        // Where the p99 comes from: the first sights apart from the others, and the others
        // sent in the first third of the run (where the first sights fall) apart from the rest.
        let third = requests / 3;
        let part_of = |index: usize| match (first_sights.contains(&index), index < third) {
            (true, _) => 0,
            (false, true) => 1,
            (false, false) => 2,
        };
        let names = ["first sights", "the others in the first third", "the others after it"];
        for (part, name) in names.iter().enumerate() {
            let mut ms: Vec<f64> = report
                .indexed_latencies_ms
                .iter()
                .filter(|(index, _)| part_of(*index) == part)
                .map(|(_, ms)| *ms)
                .collect();
            ms.sort_by(f64::total_cmp);
            eprintln!(
                "search: {} {name}: {}, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
                measured.server,
                ms.len(),
                crate::percentile(&ms, 50.0),
                crate::percentile(&ms, 99.0),
                ms.last().copied().unwrap_or(f64::NAN),
            );
        }
    }
    Ok(measured)
}

/// The indexes of the requests of a measured run that are first sights of their search: the
/// first of their body in the run, and a body the warm-up did not send (the server keeps no
/// candidates for it yet). Requests go out in index order, so the first by index is the first
/// sent (a concurrent one of the same search may still be waiting for it).
fn first_sights(measured: &[Request], warm: &std::collections::HashSet<String>) -> std::collections::HashSet<usize> {
    let mut seen = std::collections::HashSet::new();
    measured
        .iter()
        .enumerate()
        .filter(|(_, request)| !warm.contains(&request.body) && seen.insert(request.body.as_str()))
        .map(|(index, _)| index)
        .collect()
}

/// `search_candidates_total` by outcome (`cache::search`: kept, found, stale, uncached…).
async fn candidate_outcomes(server: &Server) -> AppResult<std::collections::BTreeMap<String, f64>> {
    Ok(server
        .metrics()
        .await?
        .into_iter()
        .filter_map(|(name, n)| {
            let outcome = name.strip_prefix("search_candidates_total{outcome=\"")?.strip_suffix("\"}")?;
            Some((outcome.to_owned(), n))
        })
        .collect())
}

/// Every kind of `bench.kinds` on one started server, in the order of the module doc.
async fn measure_server(
    server: &Server,
    fixture: &Fixture,
    tokens: &[String],
    bench: &SearchBench,
    searches: &[String],
    typed: &[String],
    time_cap: Duration,
) -> AppResult<Vec<Measured>> {
    let course = encode(NodeKind::Course, 1);
    let found_check: load::Check = Arc::new(|_, data| {
        let edges = data["course"]["search"]["edges"].as_array().ok_or("no edges")?;
        if edges.len() > 10 {
            return Err(format!("{} hits on a page of 10", edges.len()));
        }
        for edge in edges {
            let snippet = edge["node"]["snippet"].as_str().ok_or("no snippet")?;
            if snippet.contains("<script") {
                return Err(format!("unescaped snippet {snippet}"));
            }
        }
        Ok(())
    });
    let similar_check: load::Check = Arc::new(|_, data| {
        let similar = data["course"]["similarPosts"].as_array().ok_or("no similarPosts")?;
        if similar.len() > 5 { Err(format!("{} suggestions for 5", similar.len())) } else { Ok(()) }
    });
    let page_check: load::Check = Arc::new(|_, data| {
        let edges = data["course"]["posts"]["edges"].as_array().ok_or("no edges")?;
        if edges.len() == 20 { Ok(()) } else { Err(format!("{} posts on the page", edges.len())) }
    });
    let (c, s, wants) = (bench.connections, server, |kind| bench.kinds.contains(&kind));
    let mut measured = Vec::new();
    if wants(Kind::Search) {
        let searches = searches.to_vec();
        measured.push(
            measure(
                "search",
                s,
                fixture,
                tokens,
                searches,
                bench.searches,
                c,
                time_cap,
                found_check,
                bench.search_order,
            )
            .await?,
        );
    }
    if wants(Kind::Similar) {
        let typed = typed.to_vec();
        let mut similar = measure(
            "similarPosts",
            s,
            fixture,
            tokens,
            typed,
            bench.similar,
            c,
            time_cap,
            similar_check,
            SearchOrder::InTurn,
        )
        .await?;
        // What the course's title index holds in the server's memory (none when by SQL).
        let metrics = server.metrics().await?;
        similar.memory_bytes = metrics.get("cache_used_bytes{cache=\"course_titles\"}").copied();
        measured.push(similar);
    }
    if wants(Kind::Page) {
        let page = vec![load::graphql_body(PAGE, json!({ "c": course }))];
        measured.push(
            measure(
                "page",
                s,
                fixture,
                tokens,
                page,
                bench.pages,
                c,
                time_cap,
                page_check.clone(),
                SearchOrder::InTurn,
            )
            .await?,
        );
    }
    if wants(Kind::Unread) {
        let newest: Vec<i64> = (bench.posts - 199..=bench.posts + 1).collect();
        open_some_posts(server, tokens, &newest).await?;
        let unread = vec![load::graphql_body(UNREAD_PAGE, json!({ "c": course }))];
        measured.push(
            measure(
                "page + unread counts",
                s,
                fixture,
                tokens,
                unread,
                bench.pages,
                c,
                time_cap,
                page_check,
                SearchOrder::InTurn,
            )
            .await?,
        );
    }
    Ok(measured)
}

/// Each reader opens (marks read) 30 of the newest 200 posts, so pages mix read and unread.
async fn open_some_posts(server: &Server, tokens: &[String], newest: &[i64]) -> AppResult<()> {
    let http = reqwest::Client::new();
    for (n, token) in tokens.iter().enumerate() {
        for k in 0..30 {
            let post = newest[(n * 7 + k * 13) % newest.len()];
            let body = load::graphql_body(
                "mutation($p: ID!) { markPostRead(postId: $p) { id } }",
                json!({ "p": encode(NodeKind::Post, post) }),
            );
            let answer: serde_json::Value = http
                .post(server.graphql_url())
                .header("authorization", token)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .map_err(|e| AppError::Internal(format!("markPostRead: {e}")))?
                .json()
                .await
                .map_err(|e| AppError::Internal(format!("markPostRead: {e}")))?;
            if answer.get("errors").is_some() {
                return Err(AppError::Internal(format!("markPostRead failed: {answer}")));
            }
        }
    }
    Ok(())
}

pub async fn run(cli: &crate::Cli, bench: &SearchBench) -> AppResult<SearchResult> {
    let servers = cli.servers()?;
    let readers = bench.readers.max(21);
    let fixture = match &bench.reuse_database {
        Some(name) => Fixture::open(&cli.database_url, name).await?,
        None => Fixture::create(&cli.database_url, readers as i64).await?,
    };
    let outcome = async {
        let started = Instant::now();
        let generate_seconds = match bench.reuse_database {
            Some(_) => None,
            None => {
                generate(&fixture, readers, bench.posts, bench.comments).await?;
                Some(started.elapsed().as_secs_f64())
            }
        };
        let mut rng = rand::rngs::StdRng::seed_from_u64(30);
        let titles: Vec<String> = Title::find_by_statement(stmt(
            "SELECT title FROM posts WHERE course_id = 1 AND id % 97 = 0 ORDER BY id LIMIT 500",
            [],
        ))
        .all(&fixture.db)
        .await?
        .into_iter()
        .map(|t| t.title)
        .collect();
        let course = encode(NodeKind::Course, 1);
        let searches: Vec<String> = search_queries(&titles, &mut rng)
            .into_iter()
            .map(|q| load::graphql_body(SEARCH, json!({ "c": course, "q": q })))
            .collect();
        let typed: Vec<String> = typed_titles(&titles, &mut rng)
            .into_iter()
            .map(|t| load::graphql_body(SIMILAR, json!({ "c": course, "t": t })))
            .collect();
        let tokens = tokens(2, readers)?;
        let time_cap = Duration::from_secs(bench.time_cap_secs);
        let mut measured = Vec::new();
        for exe in &servers {
            let server = Server::start(cli, exe, &fixture.url, LikeMode::Buffered, &[]).await?;
            let of_server = measure_server(&server, &fixture, &tokens, bench, &searches, &typed, time_cap).await;
            server.stop().await;
            measured.extend(of_server?);
        }
        #[derive(FromQueryResult)]
        struct Size {
            name: String,
            bytes: i64,
        }
        let sizes = Size::find_by_statement(stmt(
            "SELECT c.relname::text AS name, pg_relation_size(c.oid) AS bytes FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = 'public' AND c.relkind IN ('r', 'i') \
               AND (c.relname LIKE 'posts%' OR c.relname LIKE 'comments%' OR c.relname LIKE '%read%') \
             ORDER BY bytes DESC",
            [],
        ))
        .all(&fixture.db)
        .await?
        .into_iter()
        .map(|s| (s.name, s.bytes))
        .collect();
        // What the course holds: a reused one was generated with its own counts.
        #[derive(FromQueryResult)]
        struct Counts {
            posts: i64,
            comments: i64,
        }
        let counts = Counts::find_by_statement(stmt(
            "SELECT (SELECT count(*) FROM posts) AS posts, (SELECT count(*) FROM comments) AS comments",
            [],
        ))
        .one(&fixture.db)
        .await?
        .ok_or_else(|| AppError::Internal("counting the course's rows returned no row".into()))?;
        Ok::<_, AppError>(SearchResult {
            servers: servers.iter().map(label).collect(),
            posts: counts.posts,
            comments: counts.comments,
            generate_seconds,
            connections: bench.connections,
            measured,
            sizes,
        })
    }
    .await;
    if bench.keep_database || bench.reuse_database.is_some() {
        eprintln!("search: the database is kept: {}", fixture.url);
    } else {
        fixture.drop().await?;
    }
    outcome
}

pub fn print(result: &SearchResult) {
    let origin = match result.generate_seconds {
        Some(seconds) => format!("generated in {seconds:.0} s"),
        None => "a kept course, reused".to_owned(),
    };
    println!(
        "bench search: {} posts, {} comments and replies ({origin}), {} connections, servers {}",
        result.posts,
        result.comments,
        result.connections,
        result.servers.join(", ")
    );
    println!(
        "| server | request | per s | p50 ms | p99 ms | max ms | SQL / request | CPU ms / request | failed | in memory |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for m in &result.measured {
        let memory = m.memory_bytes.map(|b| format!("{:.1} MiB", b / (1 << 20) as f64)).unwrap_or_default();
        println!(
            "| {} | {} | {:.0} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} | {} | {memory} |",
            m.server, m.what, m.per_s, m.p50_ms, m.p99_ms, m.max_ms, m.sql_per_request, m.cpu_ms_per_request, m.failed
        );
        if let Some(failure) = &m.first_failure {
            println!("|   first failure: {failure} |");
        }
    }
    println!();
    println!("| table or index | MiB |");
    println!("|---|---:|");
    for (name, bytes) in &result.sizes {
        println!("| {name} | {:.1} |", *bytes as f64 / (1 << 20) as f64);
    }
}
