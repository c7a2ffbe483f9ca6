//! `bench page`: the course page. R readers read the first 20 posts of a course (newest first,
//! or HOT or TOP with `--orders`; the whole list, or with `--filters` the unresolved questions
//! or one tag's posts, read for each reader from PostgreSQL where the plain list is shared) with
//! `likedByMe`, `likeCount`, `commentCount` and `author` over C keep-alive connections, on a
//! buffered server with no like traffic. Every answer is checked: 20 posts, each with the
//! `likedByMe` the database says for that reader. The app's counters over the measured window
//! give Redis commands and SQL statements per page. Each reader reads once before the window,
//! as a returning reader would have (their liked-set is then in Redis).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use course_forum::testing::config::LikeMode;
use course_forum::testing::db::stmt;
use course_forum::testing::error::AppResult;
use course_forum::testing::graphql::ids::{self, NodeKind, encode};
use sea_orm::ConnectionTrait;
use serde::Serialize;
use serde_json::json;

use crate::fixture::Fixture;
use crate::load::{self, Request};
use crate::server::{CpuSplit, Server, label, load_average};
use crate::storm::tokens;

/// The page in one of `Course.posts`' orders (`NEW`, `HOT`, `TOP`). NEW is the default order,
/// asked for without `orderBy` so that servers from before it existed answer too.
pub fn course_page(order: &str) -> String {
    let order_by = if order == "NEW" { String::new() } else { format!(", orderBy: {order}") };
    format!(
        "query($c: ID!) {{ course(id: $c) {{ posts(first: 20{order_by}) {{ edges {{ node {{ \
         id title likeCount commentCount likedByMe author {{ id handle displayName }} }} }} }} }} }}"
    )
}

/// The orders `bench page --orders` takes, as the API spells them.
pub const ORDERS: [&str; 3] = ["NEW", "HOT", "TOP"];

/// The lists `bench page --filters` takes: the whole course (`plain`), its unresolved
/// questions, the posts of one tag.
pub const FILTERS: [&str; 3] = ["plain", "unresolved", "tag"];

/// The page in `order` narrowed by one of `FILTERS` (the tag is the variable `$t`).
pub fn course_page_filtered(order: &str, filter: &str) -> String {
    let plain = course_page(order);
    match filter {
        "unresolved" => {
            plain.replacen("posts(first: 20", "posts(first: 20, filter: { kind: QUESTION, unresolved: true }", 1)
        }
        "tag" => plain.replacen("query($c: ID!)", "query($c: ID!, $t: ID!)", 1).replacen(
            "posts(first: 20",
            "posts(first: 20, filter: { tagId: $t }",
            1,
        ),
        _ => plain,
    }
}

/// The SQL condition of one of `FILTERS` on `posts`, as the server applies it (`$1`: the tag).
fn filter_sql(filter: &str) -> &'static str {
    match filter {
        "unresolved" => "AND kind = 'question' AND accepted_comment_id IS NULL AND resolved_at IS NULL",
        "tag" => "AND EXISTS (SELECT 1 FROM post_tags pt WHERE pt.post_id = posts.id AND pt.tag_id = $1)",
        _ => "",
    }
}

/// Makes two thirds of course 1's posts questions, a quarter of those resolved, and tags every
/// other post with the course's one tag (its id is returned): `--filters` has something to find
/// among posts of every age.
pub async fn prepare_filters(fixture: &Fixture) -> AppResult<i64> {
    fixture
        .db
        .execute_raw(stmt(
            "UPDATE posts SET kind = 'question', resolved_at = CASE WHEN id % 4 = 0 THEN now() END              WHERE course_id = 1 AND id % 3 <> 0",
            [],
        ))
        .await?;
    #[derive(sea_orm::FromQueryResult)]
    struct Id {
        id: i64,
    }
    let tag = <Id as sea_orm::FromQueryResult>::find_by_statement(stmt(
        "INSERT INTO course_tags (course_id, name) VALUES (1, 'week 1') RETURNING id",
        [],
    ))
    .one(&fixture.db)
    .await?
    .map_or(0, |row| row.id);
    fixture
        .db
        .execute_raw(stmt(
            "INSERT INTO post_tags (post_id, tag_id) SELECT id, $1 FROM posts WHERE course_id = 1 AND id % 2 = 0",
            [tag.into()],
        ))
        .await?;
    Ok(tag)
}

#[derive(Debug, Serialize)]
pub struct PageResult {
    /// The server binary.
    pub server: String,
    /// `NEW`, `HOT` or `TOP`.
    pub order: String,
    /// One of `FILTERS`.
    pub filter: String,
    pub readers: usize,
    pub pages: usize,
    pub failed: usize,
    pub first_failure: Option<String>,
    pub seconds: f64,
    pub pages_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub redis_per_page: f64,
    pub sql_per_page: f64,
    pub cpu: CpuSplit,
    pub cpu_ms_per_page: f64,
    pub load_before: f64,
}

/// Adds the page's posts (more than a page) and the readers' likes on them: reader u likes
/// post p when (p + u) is divisible by 4, so every page mixes liked and not liked.
pub async fn prepare(fixture: &Fixture, readers: usize) -> AppResult<Vec<i64>> {
    let posts = fixture.add_posts(24, 20, "page").await?;
    fixture
        .db
        .execute_raw(stmt(
            "INSERT INTO post_likes (post_id, user_id, course_id) \
             SELECT p.id, u, p.course_id FROM posts p, generate_series(2, $2 + 1) u \
             WHERE p.id = ANY($1::bigint[]) AND (p.id + u) % 4 = 0",
            [posts.clone().into(), (readers as i64).into()],
        ))
        .await?;
    fixture
        .db
        .execute_raw(stmt(
            "UPDATE posts SET like_count = (SELECT count(*) FROM post_likes WHERE post_id = posts.id), \
             comment_count = id % 7 WHERE id = ANY($1)",
            [posts.clone().into()],
        ))
        .await?;
    Ok(posts)
}

/// Reads `pages` pages (after one warm-up read per reader) on a buffered server of its own.
// A scenario's knobs, each one of `bench page`'s flags, passed as they are parsed.
#[allow(clippy::too_many_arguments)]
pub async fn run_on(
    cli: &crate::Cli,
    exe: &crate::server::ServerBin,
    fixture: &Fixture,
    posts: &[i64],
    readers: usize,
    pages: usize,
    connections: usize,
    time_cap: Duration,
    order: &str,
    filter: &PageFilter,
) -> AppResult<PageResult> {
    // No view flushes during the window: their Redis commands are not the page's.
    let env = [("VIEW_FLUSH_INTERVAL", "1h".to_owned())];
    let server = Server::start(cli, exe, &fixture.url, LikeMode::Buffered, &env).await?;
    let outcome = measure(fixture, &server, posts, readers, pages, connections, time_cap, order, filter).await.map(
        |mut result| {
            result.server = label(exe);
            result
        },
    );
    server.stop().await;
    outcome
}

// A scenario's knobs, each one of `bench page`'s flags, passed as they are parsed.
#[allow(clippy::too_many_arguments)]
async fn measure(
    fixture: &Fixture,
    server: &Server,
    posts: &[i64],
    readers: usize,
    pages: usize,
    connections: usize,
    time_cap: Duration,
    order: &str,
    filter: &PageFilter,
) -> AppResult<PageResult> {
    let variables = if filter.name == "tag" {
        json!({ "c": encode(NodeKind::Course, 1), "t": encode(NodeKind::Tag, filter.tag) })
    } else {
        json!({ "c": encode(NodeKind::Course, 1) })
    };
    let body = load::graphql_body(&course_page_filtered(order, &filter.name), variables);
    let reader_tokens = tokens(2, readers)?;
    let request = |n: usize| Request {
        authorization: reader_tokens[n % readers].clone(),
        body: body.clone(),
        forwarded_for: None,
    };
    let liked_posts: HashSet<i64> = posts.iter().copied().collect();
    let newest: HashSet<i64> = match (order, filter.name.as_str()) {
        ("NEW", "plain") => posts.iter().rev().take(20).copied().collect(),
        _ => first_twenty(fixture, order, filter).await?,
    };
    let expected_len = newest.len();
    let order_name = format!("{order} ({})", filter.name);
    let check: load::Check = Arc::new(move |index, data| {
        let order = &order_name;
        let user = 2 + (index % readers) as i64;
        let edges = data["course"]["posts"]["edges"].as_array().ok_or("no edges")?;
        if edges.len() != expected_len {
            return Err(format!("{} posts instead of {expected_len}", edges.len()));
        }
        for edge in edges {
            let node = &edge["node"];
            let (_, post) = ids::decode(node["id"].as_str().unwrap_or_default()).map_err(|e| e.to_string())?;
            if !newest.contains(&post) {
                return Err(format!("post {post} is not one of the first 20 in {order} order"));
            }
            let expected = liked_posts.contains(&post) && (post + user) % 4 == 0;
            if node["likedByMe"].as_bool() != Some(expected) {
                return Err(format!(
                    "post {post} for user {user}: likedByMe {} expected {expected}",
                    node["likedByMe"]
                ));
            }
            if node["author"]["handle"].as_str().is_none_or(str::is_empty) || node["likeCount"].as_i64().is_none() {
                return Err(format!("incomplete node {node}"));
            }
        }
        Ok(())
    });
    // Warm-up: one read per reader (loads their liked-sets; not measured).
    let warm = (0..readers).map(request).collect();
    load::warm_up("page", &server.graphql_url(), warm, connections, time_cap, check.clone()).await?;
    let load_before = load_average();
    let counters_before = server.counters().await?;
    let cpu_before = CpuSplit::now(server.pid, &fixture.db).await?;
    let report =
        load::run(&server.graphql_url(), (0..pages).map(request).collect(), connections, time_cap, check, false)
            .await?;
    let cpu = CpuSplit::now(server.pid, &fixture.db).await?.since(&cpu_before);
    let counters = server.counters().await? - counters_before;
    let per_page = |n: f64| n / (report.ok.max(1) as f64);
    Ok(PageResult {
        server: String::new(),
        order: order.to_owned(),
        filter: filter.name.clone(),
        readers,
        pages: report.ok,
        failed: report.failed,
        first_failure: report.first_failure.clone(),
        seconds: report.elapsed.as_secs_f64(),
        pages_per_s: report.rate(),
        p50_ms: report.p(50.0),
        p99_ms: report.p(99.0),
        max_ms: report.max(),
        redis_per_page: per_page(counters.redis_api),
        sql_per_page: per_page(counters.sql),
        cpu_ms_per_page: cpu.ms_per(report.ok),
        cpu,
        load_before,
    })
}

/// Which list a run reads: one of `FILTERS`, and the tag `tag` names.
#[derive(Clone, Debug)]
pub struct PageFilter {
    pub name: String,
    pub tag: i64,
}

impl PageFilter {
    /// The whole course, as the suite reads it.
    pub fn plain() -> Self {
        Self { name: "plain".to_owned(), tag: 0 }
    }
}

/// The first 20 posts of course 1's list in `order`, as PostgreSQL orders them (no post of
/// the fixture is pinned or private).
async fn first_twenty(fixture: &Fixture, order: &str, filter: &PageFilter) -> AppResult<HashSet<i64>> {
    #[derive(sea_orm::FromQueryResult)]
    struct Id {
        id: i64,
    }
    let order_by = match order {
        "HOT" => "hot_score DESC, id DESC",
        "TOP" => "like_count DESC, id DESC",
        _ => "id DESC",
    };
    let condition = filter_sql(&filter.name);
    let values: Vec<sea_orm::Value> = if filter.name == "tag" { vec![filter.tag.into()] } else { Vec::new() };
    let sql = format!(
        "SELECT id FROM posts WHERE course_id = 1 AND deleted_at IS NULL {condition} ORDER BY {order_by} LIMIT 20"
    );
    let rows = <Id as sea_orm::FromQueryResult>::find_by_statement(stmt(&sql, values)).all(&fixture.db).await?;
    Ok(rows.into_iter().map(|r| r.id).collect())
}

/// Adds `count` older posts to course 1 with counts of their own (likes 0 to 999, comments 0
/// to 12, creation times over the last 30 days, no like rows): a bigger course for HOT and TOP,
/// which rank every live post of the course at read time.
async fn add_ranked_posts(fixture: &Fixture, count: usize) -> AppResult<()> {
    if count == 0 {
        return Ok(());
    }
    let ids = fixture.add_posts(count as i64, 20, "ranked").await?;
    fixture
        .db
        .execute_raw(stmt(
            "UPDATE posts SET like_count = (id * 7919) % 1000, comment_count = id % 13, \
             created_at = now() - ((id * 104729) % 2592000) * interval '1 second' WHERE id = ANY($1)",
            [ids.into()],
        ))
        .await?;
    Ok(())
}

/// `bench page` on its own: a fresh database; every server binary in turn, in each of
/// `orders` (a binary from before migration 0009 reads NEW only) and each of `filters`
/// (side by side in the same run), `rounds` times.
// A scenario's knobs, each one of `bench page`'s flags, passed as they are parsed.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    cli: &crate::Cli,
    readers: usize,
    pages: usize,
    connections: usize,
    time_cap: Duration,
    rounds: usize,
    orders: &[String],
    filters: &[String],
    course_posts: usize,
) -> AppResult<Vec<PageResult>> {
    let servers = cli.servers()?;
    let fixture = Fixture::create(&cli.database_url, readers.max(21) as i64).await?;
    let outcome = async {
        // The ranked posts first: older than the page's, so NEW still shows the page's 20.
        add_ranked_posts(&fixture, course_posts).await?;
        let posts = prepare(&fixture, readers).await?;
        let tag = prepare_filters(&fixture).await?;
        let mut results = Vec::new();
        for _ in 0..rounds.max(1) {
            let runs = servers.iter().flat_map(|exe| {
                orders.iter().flat_map(move |order| filters.iter().map(move |filter| (exe, order, filter)))
            });
            for (exe, order, filter) in runs {
                if exe.pre_0009 && (order != "NEW" || filter != "plain") {
                    continue;
                }
                let filter = PageFilter { name: filter.clone(), tag };
                let r =
                    run_on(cli, exe, &fixture, &posts, readers, pages, connections, time_cap, order, &filter).await?;
                eprintln!(
                    "page {} {:<10} {:<28} {:>7.0} pages/s  p50 {:>6.1} ms  p99 {:>6.1} ms  failed {}  redis/page {:.3}  sql/page {:.3}  cpu server {:.1}s bench {:.1}s pg {:.1}s redis {:.1}s = {:.2} ms/page  load {:.2}",
                    r.order,
                    r.filter,
                    r.server,
                    r.pages_per_s,
                    r.p50_ms,
                    r.p99_ms,
                    r.failed,
                    r.redis_per_page,
                    r.sql_per_page,
                    r.cpu.server,
                    r.cpu.bench,
                    r.cpu.postgres,
                    r.cpu.redis,
                    r.cpu_ms_per_page,
                    r.load_before
                );
                results.push(r);
            }
        }
        Ok::<_, course_forum::testing::error::AppError>(results)
    }
    .await;
    fixture.drop().await?;
    outcome
}
