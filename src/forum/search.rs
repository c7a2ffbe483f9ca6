//! Full-text search of posts, comments and replies: the SQL and the rules of what a search
//! finds, ranks and shows (no GraphQL in here; `graphql::search` resolves); and the rules of
//! similar titles, with their SQL lookup (`similar_posts_by_sql`) for a course whose index in
//! memory (`cache::titles`) does not fit.
//!
//! **Matching.** Every post and comment carries a `search_doc` tsvector (migration 0013),
//! built with its course's text search configuration (`courses.search_config`). A query is
//! parsed by `websearch_to_tsquery` once per configuration of the courses searched, and each
//! row is matched against the query of its own configuration, so the GIN indexes
//! (`posts_search_idx`, `comments_search_bucket_idx`) serve every course.
//!
//! **Bounded work.** A frequent word can match most of a course. The ranking (reading every
//! match's vector for `ts_rank_cd`) is therefore run on CANDIDATES only: the newest
//! `CANDIDATES` matching posts and the newest `CANDIDATES` matching comments and replies the
//! viewer may read. They are looked for in windows of ids, newest first (`windows`): the
//! newest `POST_WINDOW` post ids (`COMMENT_WINDOW` comment ids), then windows each
//! `WINDOW_GROWTH` times as wide, then everything older, a window searched only while those
//! above it held fewer than the candidates (`WindowedSearch`). In a window, a frequent word is
//! found by a backward scan of its rows that stops at `CANDIDATES` matches, a rarer one by its
//! GIN matches ANDed with the window's ids (a range of the primary key for posts, of the BRIN
//! index for comments, migrations 0016 and 0018), so a word of middling frequency visits the
//! rows of its newest matches, not of all its matches, before the sort by id. The recent
//! windows of comments are whole id buckets instead (`COMMENT_BUCKET`, migration 0025), each
//! looked up with the words in the bucketed GIN index, which reads only that bucket's matches. Each statement
//! is planned for its own words (`db::connect_search`), so the planner sees how frequent they
//! are. A kind whose matches are expected to be few (`OnePass`, estimated from the words'
//! statistics by `forum::search_stats`) is one window of every id instead: one lookup of its
//! index reads them all, where windows would look the same short posting list up again each.
//! The first page fixes the walk's window: when a kind had more matches than candidates, the
//! cursor keeps the lowest candidate id (the floor), and later pages rank every match at or
//! above it (at most `CANDIDATES` plus what was written since, capped at `LATER_CANDIDATES`).
//! So a walk neither repeats nor skips when posts arrive meanwhile; older matches below the
//! floor are not searched (the newest ones are what a forum's reader is after).
//!
//! **Ranking** (`score`, descending), a pure function of the row and the query (no clock):
//! `ts_rank_cd` with weights title (A) 1.0, body and comments (B) 0.4, normalized to
//! `rank / (rank + 1)` (so below 1); plus `ENDORSED_BOOST` when staff endorsed it; plus
//! `RESOLVED_BOOST` for a resolved question or an accepted answer; plus recency: 0.1 per 30
//! days since 2020-01-01 (`created_at`). Likes do not enter it. Ties: posts before comments
//! before replies, then the newest first: the keyset is (score DESC, kind, id DESC).
//!
//! **Snippets** are computed by `ts_headline` for the returned page only (an outer query
//! after the LIMIT). Matches are wrapped in the control characters U+0001 / U+0002, which are
//! first removed from the text, so they mark matches and nothing else; `<` and `>` become
//! U+0003 / U+0004 before `ts_headline` (which would drop anything that looks like an HTML
//! tag). `snippet_html` escapes the rest and turns them back into `<mark>` / `</mark>`,
//! `&lt;` / `&gt;`.
//!
//! **Access** is that of reading posts (`forum::audience`): courses the viewer belongs to,
//! live posts and comments only (a deleted post hides its comments), private posts for their
//! author and the course's staff, and an author filter never matches a row whose author is
//! hidden from the viewer.

use std::sync::Arc;

use sea_orm::{ConnectionTrait, FromQueryResult, QueryResult, Value};

use crate::db::stmt;
use crate::error::{AppError, AppResult};
use crate::forum::audience::PostKind;
use crate::forum::comments::CommentRow;
use crate::forum::courses::Role;
use crate::forum::posts::{POST_COLUMNS, PostRow};
use crate::forum::search_stats::SearchStats;

/// Longest query or similar-title text accepted, in characters.
pub(crate) const MAX_QUERY_CHARS: usize = 200;
/// Candidates of each kind (posts; comments and replies) a first page ranks.
pub(crate) const CANDIDATES: i64 = 100;
/// Most candidates of each kind a later page ranks (the window of the first page plus what
/// was written since).
pub(crate) const LATER_CANDIDATES: i64 = 4 * CANDIDATES;
/// The first recent window of posts: the newest `POST_WINDOW` post ids (of every course) are
/// searched first; each next window, only while fewer than the candidates wanted were found,
/// is `WINDOW_GROWTH` times as wide, and the last reaches the first post.
pub(crate) const POST_WINDOW: i64 = 2_500;
/// The first recent window of comments and replies, as `POST_WINDOW`, but in whole id buckets
/// (`COMMENT_BUCKET`) reaching this far below the end of the newest id's bucket.
pub(crate) const COMMENT_WINDOW: i64 = 12_500;
/// How much wider each window is than the one before it.
pub(crate) const WINDOW_GROWTH: i64 = 4;
/// Windows tried before the last one, which takes everything older (besides, with buckets,
/// the ids past the newest one's bucket). Each window is one more CTE the statement plans for
/// its words: with four, a first sight planned ten windows in about 2.7 ms; with two, the
/// candidates' statement takes 12 % less, planning and execution together (docs/performance.md,
/// "Fewer windows").
const GROWN_WINDOWS: u32 = 2;
/// The id bucket width of `comments_search_bucket_idx` (`id / 4096`, migration 0025).
pub const COMMENT_BUCKET: i64 = 4096;
/// Most buckets a window is looked up by, one GIN scan each (about 0.1 ms for two frequent
/// words); a wider window is a range of ids (by then the words are rare: too few matches in the
/// newer windows).
const MAX_WINDOW_BUCKETS: i64 = 16;
/// Added to the score of what staff endorsed.
pub(crate) const ENDORSED_BOOST: f64 = 0.3;
/// Added to the score of a resolved question and of an accepted answer.
pub(crate) const RESOLVED_BOOST: f64 = 0.3;
/// Least trigram similarity between a typed word and the lexicon word it is corrected to.
pub(crate) const MIN_WORD_SIMILARITY: f64 = 0.25;
/// Titles the chosen rare words of a lookup may select, by their counts.
pub(crate) const CANDIDATE_BUDGET: u64 = 200;
/// Most candidate titles a lookup compares with the text (when even its rarest word is in
/// more titles than `CANDIDATE_BUDGET`): the newest.
pub(crate) const MAX_CANDIDATES: usize = 500;
/// Least trigram similarity a similar post has.
pub(crate) const MIN_SIMILARITY: f64 = 0.2;
/// A course's text search configuration (`courses.search_config`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Language {
    /// `english`: stems (`running` finds `run`) and drops stop words.
    English,
    /// `simple`: lowercases only; every word counts, none is stemmed.
    Simple,
}

impl Language {
    /// The regconfig's name, as stored.
    pub(crate) fn config(self) -> &'static str {
        match self {
            Language::English => "english",
            Language::Simple => "simple",
        }
    }

    fn parse(raw: &str) -> AppResult<Self> {
        match raw {
            "english" => Ok(Language::English),
            "simple" => Ok(Language::Simple),
            other => Err(AppError::Internal(format!("unknown search configuration `{other}`"))),
        }
    }
}

/// What a hit is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Matched {
    Post,
    Comment,
    Reply,
}

impl Matched {
    /// The kind's place in the keyset (posts first among equal scores).
    fn from_rank(rank: i16) -> AppResult<Self> {
        match rank {
            0 => Ok(Matched::Post),
            1 => Ok(Matched::Comment),
            2 => Ok(Matched::Reply),
            other => Err(AppError::Internal(format!("unknown hit kind {other}"))),
        }
    }
}

/// What a search is narrowed to (all optional, AND-ed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct SearchFilter {
    /// The post (of the hit) is of this kind.
    pub kind: Option<PostKind>,
    /// The post (of the hit) is an unresolved question (true) or not (false).
    pub unresolved: Option<bool>,
    /// The hit (the post, comment or reply itself) was written by this user, who is not
    /// hidden from the viewer.
    pub author_id: Option<i64>,
}

impl SearchFilter {
    /// Canonical text of the filter, which a cursor is bound to.
    pub(crate) fn key(&self) -> String {
        format!(
            "k={};u={};a={}",
            self.kind.map(PostKind::as_str).unwrap_or(""),
            self.unresolved.map(|u| u8::from(u).to_string()).unwrap_or_default(),
            self.author_id.map(|a| a.to_string()).unwrap_or_default()
        )
    }
}

/// Where a walk stands: after the hit with this key, in the window its first page fixed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Position {
    pub score: f64,
    pub kind: i16,
    pub id: i64,
    /// Lowest post id / comment id the walk ranks (0: no floor).
    pub post_floor: i64,
    pub comment_floor: i64,
}

/// One hit, with what the API shows of it.
#[derive(Clone, Debug)]
pub(crate) struct Hit {
    pub matched: Matched,
    pub score: f64,
    pub post: PostRow,
    pub comment: Option<CommentRow>,
    /// `ts_headline` output: matches between U+0001 and U+0002 (`snippet_html` renders it).
    pub headline: Arc<str>,
    /// Whether `headline` was computed by this search's statement (else it was known).
    pub headline_computed: bool,
    /// The hit's row's `search_xid` (as text): what its headline was made from.
    pub xid: String,
    /// The position after this hit.
    pub position: Position,
}

/// A page of hits and whether more follow.
pub(crate) struct HitPage {
    pub hits: Vec<Hit>,
    pub has_next: bool,
}

/// Headlines of this query a search already has (`cache::search`), each for its row as of
/// its `search_xid`: the page statement makes no headline for a hit whose row still carries
/// that stamp (its title, body and configuration are as they were), and the hit takes the
/// known one.
#[derive(Default)]
pub(crate) struct KnownHeadlines {
    /// (id, search_xid as text, headline) of posts.
    pub posts: Vec<(i64, String, Arc<str>)>,
    /// The same of comments and replies.
    pub comments: Vec<(i64, String, Arc<str>)>,
}

impl KnownHeadlines {
    fn get(&self, comment: bool, id: i64, xid: &str) -> Option<Arc<str>> {
        let list = if comment { &self.comments } else { &self.posts };
        list.iter().find(|(i, x, _)| *i == id && x == xid).map(|(_, _, headline)| headline.clone())
    }
}

/// The searcher and the courses searched, with their role in each.
pub(crate) struct Scope<'a> {
    pub viewer: i64,
    pub courses: &'a [(i64, Role)],
}

/// A query's text trimmed, or BAD_USER_INPUT when blank or longer than `MAX_QUERY_CHARS`.
pub(crate) fn validate_query(what: &str, raw: &str) -> AppResult<String> {
    let text = raw.trim();
    if text.is_empty() {
        return Err(AppError::bad_input(format!("`{what}` must not be blank")));
    }
    if text.chars().count() > MAX_QUERY_CHARS {
        return Err(AppError::bad_input(format!("`{what}` is longer than {MAX_QUERY_CHARS} characters")));
    }
    Ok(text.to_owned())
}

/// True when `query` (web search syntax) can match nothing because it excludes a word it
/// also requires: a conjunction without `or` in which a `-word` is also one of the words
/// searched for, alone, in a "phrase" or in a hyphenated word (`exam -exam`, `"final exam"
/// -Exam`). Such a query is answered without a statement: the planner, judging the required
/// word frequent, would test every row of the course for a match that cannot exist.
/// Conservative: only the same spelling (case aside) counts; `exams -exam` is left to the
/// database.
pub(crate) fn excludes_itself(query: &str) -> bool {
    let mut required: Vec<String> = Vec::new();
    let mut excluded: Vec<String> = Vec::new();
    let mut in_phrase = false;
    for token in query.split_whitespace() {
        let quotes = token.matches('"').count();
        let negated = !in_phrase && token.len() > 1 && token.starts_with('-');
        if !in_phrase && quotes == 0 && token.eq_ignore_ascii_case("or") {
            return false;
        }
        if negated {
            let word = &token[1..];
            if !word.chars().all(char::is_alphanumeric) {
                return false;
            }
            excluded.push(word.to_lowercase());
        } else {
            required
                .extend(token.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase));
        }
        if quotes % 2 == 1 {
            in_phrase = !in_phrase;
        }
    }
    excluded.iter().any(|word| required.contains(word))
}

/// What a search needs before its statement: the configurations in use among the courses
/// searched, the newest post and comment ids (where the recent windows start), and whether
/// each kind is looked up in one pass (`OnePass`).
struct SearchBounds {
    languages: Vec<Language>,
    post_hi: i64,
    comment_hi: i64,
    posts_in_one_pass: bool,
    comments_in_one_pass: bool,
}

/// How many matches of each kind a query may be expected to have and still be looked up in
/// one pass of the words' index (`SEARCH_ONE_PASS_POSTS`, `SEARCH_ONE_PASS_COMMENTS`); a query
/// expected to match more is looked for in windows of ids (`windows`). Neither way changes the
/// answer: both find the newest matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OnePassLimits {
    pub(crate) posts: u32,
    pub(crate) comments: u32,
}

/// `OnePassLimits` with the statistics a query's matches are estimated from
/// (`forum::search_stats`).
#[derive(Clone, Debug)]
pub(crate) struct OnePass {
    pub(crate) limits: OnePassLimits,
    pub(crate) stats: Arc<SearchStats>,
}

impl OnePass {
    /// Whether `expected` matches (`None`: no estimate that can be trusted) are few enough for
    /// one pass, at most `limit` (0: never).
    fn takes(expected: Option<f64>, limit: u32) -> bool {
        expected.is_some_and(|expected| limit > 0 && expected <= f64::from(limit))
    }
}

/// One primary-key read of the courses, the last entry of each primary key, and the query as
/// each configuration the courses use reads it, whose matches `one_pass` estimates.
async fn search_bounds(
    db: &impl ConnectionTrait,
    courses: &[i64],
    query: &str,
    one_pass: &OnePass,
) -> AppResult<SearchBounds> {
    #[derive(FromQueryResult)]
    struct Row {
        config: String,
        post_hi: i64,
        comment_hi: i64,
        tsquery: String,
    }
    let rows = Row::find_by_statement(stmt(
        "SELECT l.config::text AS config, \
                (SELECT coalesce(max(id), 0) FROM posts) AS post_hi, \
                (SELECT coalesce(max(id), 0) FROM comments) AS comment_hi, \
                websearch_to_tsquery(l.config, $2)::text AS tsquery \
         FROM (SELECT DISTINCT search_config AS config FROM courses WHERE id = ANY($1)) l",
        [courses.to_vec().into(), query.into()],
    ))
    .all(db)
    .await?;
    let mut languages = rows.iter().map(|row| Language::parse(&row.config)).collect::<AppResult<Vec<_>>>()?;
    languages.sort_by_key(|l| l.config());
    languages.dedup();
    let (post_hi, comment_hi) = rows.first().map(|row| (row.post_hi, row.comment_hi)).unwrap_or((0, 0));
    // Each configuration's matches are looked up together: their sum is what one pass reads.
    let expected: Vec<(Option<f64>, Option<f64>)> =
        rows.iter().map(|row| one_pass.stats.expected(&row.tsquery)).collect();
    let posts = expected.iter().map(|e| e.0).sum::<Option<f64>>();
    let comments = expected.iter().map(|e| e.1).sum::<Option<f64>>();
    Ok(SearchBounds {
        languages,
        post_hi,
        comment_hi,
        posts_in_one_pass: OnePass::takes(posts, one_pass.limits.posts),
        comments_in_one_pass: OnePass::takes(comments, one_pass.limits.comments),
    })
}

/// The configuration of each course given (missing ones are left out).
async fn languages(db: &impl ConnectionTrait, courses: &[i64]) -> AppResult<Vec<(i64, Language)>> {
    #[derive(FromQueryResult)]
    struct Row {
        id: i64,
        config: String,
    }
    let rows = Row::find_by_statement(stmt(
        "SELECT id, search_config::text AS config FROM courses WHERE id = ANY($1)",
        [courses.to_vec().into()],
    ))
    .all(db)
    .await?;
    rows.into_iter().map(|row| Ok((row.id, Language::parse(&row.config)?))).collect()
}

/// A course's configuration; NOT_FOUND for no such course.
pub(crate) async fn language(db: &impl ConnectionTrait, course_id: i64) -> AppResult<Language> {
    languages(db, &[course_id]).await?.first().map(|(_, l)| *l).ok_or_else(|| AppError::not_found("course"))
}

/// Sets a course's configuration and re-indexes its posts and comments (their generated
/// vectors follow their `search_config`), in one transaction. A no-op when unchanged.
pub(crate) async fn set_language(
    db: &sea_orm::DatabaseConnection,
    course_id: i64,
    language: Language,
) -> AppResult<()> {
    use sea_orm::TransactionTrait;
    let config = language.config();
    let txn = db.begin().await?;
    let changed = txn
        .execute_raw(stmt(
            "UPDATE courses SET search_config = $2::regconfig WHERE id = $1 AND search_config <> $2::regconfig",
            [course_id.into(), config.into()],
        ))
        .await?
        .rows_affected();
    if changed > 0 {
        txn.execute_raw(stmt(
            "UPDATE posts SET search_config = $2::regconfig WHERE course_id = $1 AND search_config <> $2::regconfig",
            [course_id.into(), config.into()],
        ))
        .await?;
        txn.execute_raw(stmt(
            "UPDATE comments c SET search_config = $2::regconfig FROM posts p \
             WHERE p.id = c.post_id AND p.course_id = $1 AND c.search_config <> $2::regconfig",
            [course_id.into(), config.into()],
        ))
        .await?;
    }
    txn.commit().await?;
    Ok(())
}

/// Builds a statement's parameters: `push` returns the `$n` of a value.
struct Params(Vec<Value>);

impl Params {
    fn push(&mut self, value: impl Into<Value>) -> String {
        self.0.push(value.into());
        format!("${}", self.0.len())
    }
}

/// `tsquery` of one configuration for the query text `$q`.
fn tsquery(language: Language, q: &str) -> String {
    format!("websearch_to_tsquery('{}'::regconfig, {q})", language.config())
}

/// A condition true when `alias.search_doc` matches the query in the row's configuration,
/// one disjunct per configuration in use (each served by the GIN index). With no
/// configurations named, the query is parsed in each row's own (for the few rows a search from
/// kept candidates reads, which no index serves).
fn match_sql(alias: &str, languages: &[Language], q: &str) -> String {
    if languages.is_empty() {
        return format!("({alias}.search_doc @@ websearch_to_tsquery({alias}.search_config, {q}))");
    }
    let parts: Vec<String> = languages
        .iter()
        .map(|l| {
            format!(
                "({alias}.search_config = '{}'::regconfig AND {alias}.search_doc @@ {})",
                l.config(),
                tsquery(*l, q)
            )
        })
        .collect();
    format!("({})", parts.join(" OR "))
}

/// The query of the row's own configuration: the one configuration in use, else a CASE on
/// `alias.search_config` with one arm per configuration (`otherwise` for none), or, with none
/// named, parsed in the row's configuration.
fn row_tsquery(alias: &str, languages: &[Language], q: &str) -> String {
    match languages {
        [] => format!("websearch_to_tsquery({alias}.search_config, {q})"),
        [only] => tsquery(*only, q),
        _ => {
            let arms: String = languages
                .iter()
                .map(|l| format!(" WHEN '{}'::regconfig THEN {}", l.config(), tsquery(*l, q)))
                .collect();
            format!("(CASE {alias}.search_config{arms} END)")
        }
    }
}

/// The normalized text rank of `alias.search_doc` under its own configuration's query (0 for
/// a row of no configuration in use).
fn rank_sql(alias: &str, languages: &[Language], q: &str) -> String {
    format!(
        "coalesce(ts_rank_cd('{{0.1, 0.2, 0.4, 1.0}}', {alias}.search_doc, {}, 32), 0)",
        row_tsquery(alias, languages, q)
    )
}

/// The query of the row's configuration, for `ts_headline`.
fn row_query_sql(alias: &str, languages: &[Language], q: &str) -> String {
    row_tsquery(alias, languages, q)
}

/// Recency: 0.1 per 30 days since 2020-01-01.
const RECENCY_SQL: &str = "((extract(epoch FROM {t}) - 1577836800) / (86400.0 * 300.0))::float8";

/// `ts_headline` options: control characters as marks (removed from the text beforehand).
const HEADLINE_OPTIONS: &str =
    "StartSel=\u{1}, StopSel=\u{2}, MaxFragments=2, MaxWords=30, MinWords=12, FragmentDelimiter=\" … \"";

/// Whose reading the candidates of a cached search are (`cache::search`): the course's
/// students together (every live post that is not private, and its comments), or its staff
/// (every live post). A student's own private posts are added to the students' candidates by
/// each of their searches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Readers {
    Students,
    Staff,
}

impl Readers {
    /// The readers a member with `role` searches with.
    pub(crate) fn of(role: Role) -> Self {
        if role == Role::Instructor { Readers::Staff } else { Readers::Students }
    }
}

/// What a search may find, as SQL on the post (aliased `p`).
enum Access {
    /// One viewer in the scope's courses: what they may read (private posts of their own, and
    /// all of a course they teach).
    Viewer,
    /// What `Readers` of one course read together.
    Readers(Readers),
}

/// The parts of one search's statement that every way of finding its candidates shares: the
/// parameters so far, the conditions a candidate of each kind satisfies, and their scores.
struct Conditions {
    p: Params,
    /// The `$n` of the query text, the searched courses and the viewer.
    q: String,
    courses: String,
    viewer: String,
    in_use: Vec<Language>,
    post_where: String,
    /// Every condition of a comment hit (aliased `c`, its post `p`): `comment_own_where` AND
    /// `comment_post_where`.
    comment_where: String,
    /// The comment's own conditions (live, the match): what the comments' windows read by.
    comment_own_where: String,
    /// The conditions on the comment's post (and the author filter, which asks the post's
    /// course): checked for a window's comments newest first, only until it has its candidates.
    comment_post_where: String,
}

impl Conditions {
    fn new(scope: &Scope<'_>, query: &str, filter: &SearchFilter, access: Access, in_use: Vec<Language>) -> Self {
        let course_ids: Vec<i64> = scope.courses.iter().map(|(id, _)| *id).collect();
        let staff: Vec<i64> = scope.courses.iter().filter(|(_, r)| *r == Role::Instructor).map(|(id, _)| *id).collect();
        let mut p = Params(Vec::new());
        let q = p.push(query);
        let courses = p.push(course_ids);
        let viewer = p.push(scope.viewer);
        let staff = p.push(staff);
        // The post's conditions (aliased `p`): course, live, readable, the filter's post part.
        let mut post_conditions = vec![format!("p.course_id = ANY({courses})"), "p.deleted_at IS NULL".to_owned()];
        match access {
            Access::Viewer => {
                post_conditions.push(format!("(NOT p.private OR p.user_id = {viewer} OR p.course_id = ANY({staff}))"))
            }
            Access::Readers(Readers::Students) => post_conditions.push("NOT p.private".to_owned()),
            Access::Readers(Readers::Staff) => {}
        }
        if let Some(kind) = filter.kind {
            post_conditions.push(format!("p.kind = {}", p.push(kind.as_str())));
        }
        if let Some(wanted) = filter.unresolved {
            let unresolved = "(p.kind = 'question' AND p.accepted_comment_id IS NULL AND p.resolved_at IS NULL)";
            post_conditions.push(if wanted { unresolved.to_owned() } else { format!("NOT {unresolved}") });
        }
        // The author filter: the row's author, when the viewer may see who it is.
        let author = |alias: &str, course: &str, p: &mut Params| -> Option<String> {
            filter.author_id.map(|author| {
                let author = p.push(author);
                format!(
                    "{alias}.user_id = {author} AND ({alias}.anonymous_to IS NULL OR {alias}.user_id = {viewer} \
                     OR ({alias}.anonymous_to = 'classmates' AND {course} = ANY({staff})))"
                )
            })
        };
        let mut post_where = post_conditions.clone();
        post_where.push(match_sql("p", &in_use, &q));
        if let Some(cond) = author("p", "p.course_id", &mut p) {
            post_where.push(cond);
        }
        let comment_own_where = ["c.deleted_at IS NULL".to_owned(), match_sql("c", &in_use, &q)].join(" AND ");
        let mut comment_post_where = post_conditions;
        if let Some(cond) = author("c", "p.course_id", &mut p) {
            comment_post_where.push(cond);
        }
        let comment_post_where = comment_post_where.join(" AND ");
        Conditions {
            p,
            q,
            courses,
            viewer,
            in_use,
            post_where: post_where.join(" AND "),
            comment_where: format!("{comment_own_where} AND {comment_post_where}"),
            comment_own_where,
            comment_post_where,
        }
    }

    /// The windowed searches of both kinds (`WindowedSearch`) over the bounds' windows down to
    /// the floors, scored: the CTEs up to `post_hits` and `comment_hits` (to follow `WITH`).
    fn windowed_hits(&mut self, bounds: &SearchBounds, floors: (i64, i64), candidates: &str) -> String {
        let post_search = WindowedSearch {
            name: "post",
            from: format!("SELECT {WINDOW_POST_COLUMNS} FROM posts p"),
            conditions: self.post_where.clone(),
            post_conditions: None,
            id: "p.id",
            bucket: None,
            bucket_matches: None,
            candidates,
        };
        let post_windows = match bounds.posts_in_one_pass {
            true => one_pass_window(floors.0),
            false => windows(bounds.post_hi, POST_WINDOW, floors.0, None),
        };
        let (post_ctes, post_candidates) = post_search.sql(&post_windows, &mut self.p);
        let comment_search = WindowedSearch {
            name: "comment",
            from: format!("SELECT {WINDOW_COMMENT_COLUMNS} FROM comments c"),
            conditions: self.comment_own_where.clone(),
            post_conditions: Some(self.comment_post_where.clone()),
            id: "c.id",
            bucket: Some(COMMENT_BUCKET),
            bucket_matches: match self.in_use.as_slice() {
                [only] => Some(format!("{}, '{}'::regconfig", tsquery(*only, &self.q), only.config())),
                _ => None,
            },
            candidates,
        };
        let comment_windows = match bounds.comments_in_one_pass {
            true => one_pass_window(floors.1),
            false => windows(bounds.comment_hi, COMMENT_WINDOW, floors.1, Some(COMMENT_BUCKET)),
        };
        let (comment_ctes, comment_candidates) = comment_search.sql(&comment_windows, &mut self.p);
        format!(
            "{post_ctes}, post_hits AS ({posts}), {comment_ctes}, comment_hits AS ({comments})",
            posts = self.scored_posts(&post_candidates),
            comments = self.scored_comments(&comment_candidates),
        )
    }

    /// The hits of the post rows `rows` selects (aliased `p` inside): id, post_id, comment_id,
    /// kind, score. The score, of the row and the query alone: the normalized text rank, the
    /// endorsement and resolution boosts, recency.
    fn scored_posts(&self, rows: &str) -> String {
        let recency = RECENCY_SQL.replace("{t}", "p.created_at");
        format!(
            "SELECT p.id, p.id AS post_id, NULL::bigint AS comment_id, 0::smallint AS kind,                (({rank})::float8 + CASE WHEN p.endorsed_by IS NOT NULL THEN {ENDORSED_BOOST} ELSE 0 END                 + CASE WHEN p.accepted_comment_id IS NOT NULL OR p.resolved_at IS NOT NULL THEN {RESOLVED_BOOST} ELSE 0 END                 + {recency})::float8 AS score              FROM ({rows}) p",
            rank = rank_sql("p", &self.in_use, &self.q),
        )
    }

    /// The hits of the comment rows `rows` selects (aliased `c` inside, with their post's
    /// `p_accepted`), as `scored_posts`.
    fn scored_comments(&self, rows: &str) -> String {
        let recency = RECENCY_SQL.replace("{t}", "c.created_at");
        format!(
            "SELECT c.id, c.post_id, c.id AS comment_id, (CASE WHEN c.parent_id IS NULL THEN 1 ELSE 2 END)::smallint AS kind,                (({rank})::float8 + CASE WHEN c.endorsed_by IS NOT NULL THEN {ENDORSED_BOOST} ELSE 0 END                 + CASE WHEN c.p_accepted = c.id THEN {RESOLVED_BOOST} ELSE 0 END + {recency})::float8 AS score              FROM ({rows}) c",
            rank = rank_sql("c", &self.in_use, &self.q),
        )
    }

    /// The statement of one page from `hits_ctes` (CTEs, to follow `WITH`, that end with
    /// `post_hits` and `comment_hits`, as `windowed_hits` builds): the keyset, the page, its
    /// rows and snippets, in the page's order. With `stale` (a condition), its value comes
    /// first in a column of its own (`hit_stale`) on a row that is there even when nothing was
    /// found (its hit columns NULL). No headline is made for a row `known` has at its stamp.
    // Each argument is one part of the page's statement, as its two callers have them.
    #[allow(clippy::too_many_arguments)]
    fn page_sql(
        &mut self,
        hits_ctes: &str,
        after: Option<Position>,
        floors: (i64, i64),
        candidates: &str,
        limit: i64,
        stale: Option<&str>,
        known: &KnownHeadlines,
    ) -> String {
        let (q, in_use) = (self.q.clone(), self.in_use.clone());
        let p = &mut self.p;
        // A row whose headline is known as of its stamp gets none made here.
        let mut known_sql = |alias: &str, rows: &[(i64, String, Arc<str>)]| {
            if rows.is_empty() {
                return "FALSE".to_owned();
            }
            let ids = p.push(rows.iter().map(|(id, _, _)| *id).collect::<Vec<i64>>());
            let xids = p.push(rows.iter().map(|(_, xid, _)| xid.clone()).collect::<Vec<String>>());
            format!("({alias}.id, {alias}.search_xid::text) IN (SELECT * FROM unnest({ids}::bigint[], {xids}::text[]))")
        };
        let post_known = known_sql("p", &known.posts);
        let comment_known = known_sql("c", &known.comments);
        let post_floor_p = p.push(floors.0);
        let comment_floor_p = p.push(floors.1);
        let keyset = match after {
            None => "TRUE".to_owned(),
            Some(at) => {
                let (s, k, i) = (p.push(at.score), p.push(at.kind), p.push(at.id));
                format!("(score < {s} OR (score = {s} AND (kind > {k} OR (kind = {k} AND id < {i}))))")
            }
        };
        let limit_p = p.push(limit + 1);
        let post_columns: String =
            POST_COLUMNS.split(", ").map(|c| format!("p.{c} AS p_{c}")).collect::<Vec<_>>().join(", ");
        let comment_columns: String = COMMENT_COLUMNS
            .split(", ")
            .map(|c| format!("c.{c} AS c_{c}"))
            .chain(std::iter::once("p.course_id AS c_course_id".to_owned()))
            .collect::<Vec<_>>()
            .join(", ");
        // The marks removed from the text; `<` and `>` hidden from the parser (which would drop
        // what looks like an HTML tag from the headline), given back by `snippet_html`.
        let strip = |text: &str| format!("translate({text}, E'<>\\x01\\x02\\x03\\x04', E'\\x03\\x04')");
        let options = p.push(HEADLINE_OPTIONS);
        // A row gone for good since its candidates were kept (deleted by hand) has no post or
        // comment to join: `hit_gone`.
        let hits = format!(
            "SELECT page.kind AS hit_kind, page.score AS hit_score, page.id AS hit_id, \
               (p.id IS NULL OR (page.comment_id IS NOT NULL AND c.id IS NULL)) AS hit_gone, \
               (SELECT CASE WHEN count(*) >= {candidates} THEN min(id) ELSE {post_floor_p} END FROM post_hits) AS hit_post_floor, \
               (SELECT CASE WHEN count(*) >= {candidates} THEN min(id) ELSE {comment_floor_p} END FROM comment_hits) AS hit_comment_floor, \
               {post_columns}, {comment_columns}, \
               (CASE WHEN page.comment_id IS NULL THEN p.search_xid ELSE c.search_xid END)::text AS hit_xid, \
               CASE WHEN page.comment_id IS NULL \
                 THEN CASE WHEN {post_known} THEN NULL ELSE ts_headline(p.search_config, {post_text}, {post_query}, {options}) END \
                 ELSE CASE WHEN {comment_known} THEN NULL ELSE ts_headline(c.search_config, {comment_text}, {comment_query}, {options}) END \
               END AS hit_headline \
             FROM page LEFT JOIN posts p ON p.id = page.post_id LEFT JOIN comments c ON c.id = page.comment_id",
            post_text = strip("p.title || E'\\n' || p.body"),
            comment_text = strip("c.body"),
            post_query = row_query_sql("p", &in_use, &q),
            comment_query = row_query_sql("c", &in_use, &q),
        );
        let order = "ORDER BY hit_score DESC, hit_kind, hit_id DESC";
        let select = match stale {
            None => format!("{hits} {order}"),
            Some(stale) => format!(
                "SELECT flags.hit_stale, h.* FROM (SELECT ({stale}) AS hit_stale) flags \
                 LEFT JOIN LATERAL ({hits}) h ON TRUE {order}"
            ),
        };
        format!(
            "WITH {hits_ctes}, page AS ( \
               SELECT * FROM (SELECT * FROM post_hits UNION ALL SELECT * FROM comment_hits) hits \
               WHERE {keyset} ORDER BY score DESC, kind, id DESC LIMIT {limit_p} \
             ) {select}"
        )
    }
}

/// A page of hits from the rows of a page statement (`Conditions::page_sql`): a row whose
/// `hit_kind` is NULL (the flags' row when nothing was found) is no hit; `None` when a hit's
/// row is gone (`hit_gone`).
fn hit_page(rows: &[QueryResult], limit: i64, known: &KnownHeadlines) -> AppResult<Option<HitPage>> {
    let mut hits = Vec::with_capacity(rows.len());
    for row in rows {
        if row.try_get::<Option<i16>>("", "hit_kind")?.is_some() {
            if row.try_get::<bool>("", "hit_gone")? {
                return Ok(None);
            }
            hits.push(hit(row, known)?);
        }
    }
    let has_next = hits.len() as i64 > limit;
    hits.truncate(limit.max(0) as usize);
    Ok(Some(HitPage { hits, has_next }))
}

/// One page of hits for `query` in `scope`, after `after`, at most `limit`: every candidate
/// looked for afresh, in windows (the way of later pages, of searches over several courses or
/// by author, and of every search when the candidate cache is off).
pub(crate) async fn search(
    db: &impl ConnectionTrait,
    scope: &Scope<'_>,
    query: &str,
    filter: &SearchFilter,
    after: Option<Position>,
    limit: i64,
    one_pass: &OnePass,
) -> AppResult<HitPage> {
    let nothing = || HitPage { hits: Vec::new(), has_next: false };
    if excludes_itself(query) {
        return Ok(nothing());
    }
    let course_ids: Vec<i64> = scope.courses.iter().map(|(id, _)| *id).collect();
    let bounds = search_bounds(db, &course_ids, query, one_pass).await?;
    if bounds.languages.is_empty() {
        return Ok(nothing());
    }
    let mut sql = Conditions::new(scope, query, filter, Access::Viewer, bounds.languages.clone());
    let (floors, candidates) = match after {
        None => ((0, 0), CANDIDATES),
        Some(at) => ((at.post_floor, at.comment_floor), LATER_CANDIDATES),
    };
    let candidates_p = sql.p.push(candidates);
    let hits = sql.windowed_hits(&bounds, floors, &candidates_p);
    let known = KnownHeadlines::default();
    let statement = sql.page_sql(&hits, after, floors, &candidates_p, limit, None, &known);
    let rows = db.query_all_raw(stmt(&statement, sql.p.0)).await?;
    // Every hit row was read in this statement: none can be gone.
    Ok(hit_page(&rows, limit, &known)?.unwrap_or_else(nothing))
}

/// The newest `CANDIDATES` matches of each kind that `readers` of one course may read, scored,
/// as of one snapshot, with that snapshot's xmin: what `cache::search` keeps, so that a first
/// page needs only the rows written since (`search_from_candidates`). Each kind's vectors are
/// in step, newest first.
#[derive(Clone, Debug, PartialEq, FromQueryResult)]
pub(crate) struct Candidates {
    /// `pg_snapshot_xmin` of the statement that found them (an xid8, as text): every row
    /// version written by an older transaction was seen.
    pub xmin: String,
    pub post_ids: Vec<i64>,
    pub post_scores: Vec<f64>,
    pub comment_ids: Vec<i64>,
    pub comment_posts: Vec<i64>,
    /// 1 for a comment, 2 for a reply (the keyset's kinds).
    pub comment_kinds: Vec<i16>,
    pub comment_scores: Vec<f64>,
}

impl Candidates {
    /// The heap bytes the vectors and the xmin own.
    pub(crate) fn heap_bytes(&self) -> u64 {
        (self.xmin.capacity()
            + 8 * (self.post_ids.capacity()
                + self.post_scores.capacity()
                + self.comment_ids.capacity()
                + self.comment_posts.capacity()
                + self.comment_scores.capacity())
            + 2 * self.comment_kinds.capacity()) as u64
    }
}

/// Most rows of each kind a search from kept candidates reads as written since their
/// snapshot: past it the candidates are found afresh (a course re-indexed, a storm of writes).
pub(crate) const MAX_CHANGED: i64 = 1_000;

/// The candidates of a first page of `query` in `course` for `readers` (`Candidates`), found
/// in windows as `search` finds them; `None` when nothing can match (a query that excludes
/// itself, an unknown course) or the filter names an author.
pub(crate) async fn candidates(
    db: &impl ConnectionTrait,
    course: i64,
    readers: Readers,
    query: &str,
    filter: &SearchFilter,
    one_pass: &OnePass,
) -> AppResult<Option<Candidates>> {
    if excludes_itself(query) || filter.author_id.is_some() {
        return Ok(None);
    }
    let bounds = search_bounds(db, &[course], query, one_pass).await?;
    if bounds.languages.is_empty() {
        return Ok(None);
    }
    let role = if readers == Readers::Staff { Role::Instructor } else { Role::Student };
    let scope = Scope { viewer: 0, courses: &[(course, role)] };
    let mut sql = Conditions::new(&scope, query, filter, Access::Readers(readers), bounds.languages.clone());
    let candidates_p = sql.p.push(CANDIDATES);
    let hits = sql.windowed_hits(&bounds, (0, 0), &candidates_p);
    let agg = |table: &str, column: &str, empty: &str| {
        format!("(SELECT coalesce(array_agg({column} ORDER BY id DESC), '{{}}'::{empty}[]) FROM {table})")
    };
    let statement = format!(
        "WITH snap AS MATERIALIZED (SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS xmin), {hits} \
         SELECT snap.xmin, {post_ids} AS post_ids, {post_scores} AS post_scores, {comment_ids} AS comment_ids, \
                {comment_posts} AS comment_posts, {comment_kinds} AS comment_kinds, {comment_scores} AS comment_scores \
         FROM snap",
        post_ids = agg("post_hits", "id", "bigint"),
        post_scores = agg("post_hits", "score", "float8"),
        comment_ids = agg("comment_hits", "id", "bigint"),
        comment_posts = agg("comment_hits", "post_id", "bigint"),
        comment_kinds = agg("comment_hits", "kind", "smallint"),
        comment_scores = agg("comment_hits", "score", "float8"),
    );
    let found = Candidates::find_by_statement(stmt(&statement, sql.p.0))
        .one(db)
        .await?
        .ok_or_else(|| AppError::Internal("the candidates' statement returned no row".into()))?;
    Ok(Some(found))
}

/// A first page of `query` in one course for a member with `role`, from `kept` candidates
/// (for `Readers::of(role)`) and the rows written since their snapshot, in one statement: the
/// course's posts stamped since its xmin (`search_xid`, migration 0022), every comment so
/// stamped, the comments of those posts, and a student's own private posts with their
/// comments. Those rows are checked and scored as they are now; a kept candidate among them
/// gives way to its row as it is now, and every other kept candidate is as it was (nothing a
/// search reads of it changed: it would carry a newer stamp). The answer is the one `search`
/// gives (`search_candidates::cached_searches_answer_as_fresh_ones`), or `None` when the kept
/// candidates can no longer give it: more than `MAX_CHANGED` rows of a kind written since, a
/// full set of candidates (`CANDIDATES`) one of which no longer matches (an older match would
/// take its place), or a post moved out of the course or a row of it deleted for good since
/// (`search_departures`). A hit whose row `known` has a headline for, at its stamp, takes it.
// Each argument is one part of the search, as `cache::search` has it.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn search_from_candidates(
    db: &impl ConnectionTrait,
    viewer: i64,
    (course, role): (i64, Role),
    query: &str,
    filter: &SearchFilter,
    limit: i64,
    kept: &Candidates,
    known: &KnownHeadlines,
) -> AppResult<Option<HitPage>> {
    let courses = [(course, role)];
    let scope = Scope { viewer, courses: &courses };
    // No configuration named: the few rows read are matched in their own.
    let mut sql = Conditions::new(&scope, query, filter, Access::Viewer, Vec::new());
    let p = &mut sql.p;
    let candidates_p = p.push(CANDIDATES);
    let since = p.push(kept.xmin.clone());
    let (post_ids, post_scores) = (p.push(kept.post_ids.clone()), p.push(kept.post_scores.clone()));
    let comment_ids = p.push(kept.comment_ids.clone());
    let comment_posts = p.push(kept.comment_posts.clone());
    let comment_kinds = p.push(kept.comment_kinds.clone());
    let comment_scores = p.push(kept.comment_scores.clone());
    let max = p.push(MAX_CHANGED);
    let (courses_p, viewer_p) = (sql.courses.clone(), sql.viewer.clone());
    // A student's own private posts: the students' candidates leave every private post out.
    let own = Readers::of(role) == Readers::Students;
    let own_cte = if own {
        format!(
            "own_posts AS MATERIALIZED (SELECT id FROM posts WHERE course_id = ANY({courses_p}) \
               AND user_id = {viewer_p} AND private AND deleted_at IS NULL), "
        )
    } else {
        String::new()
    };
    let own_posts = if own { " UNION ALL SELECT id FROM own_posts" } else { "" };
    let own_comments = if own {
        " UNION ALL SELECT c2.id FROM comments c2 WHERE c2.post_id IN (SELECT id FROM own_posts) AND c2.deleted_at IS NULL"
    } else {
        ""
    };
    let fresh_posts = sql.scored_posts(&format!(
        "SELECT p.* FROM posts p WHERE p.id IN (SELECT id FROM post_changed{own_posts}) AND {}",
        sql.post_where
    ));
    let fresh_comments = sql.scored_comments(&format!(
        "SELECT c.*, p.accepted_comment_id AS p_accepted FROM comments c JOIN posts p ON p.id = c.post_id \
         WHERE c.id IN (SELECT id FROM comment_changed UNION ALL SELECT id FROM comment_of_changed{own_comments}) \
           AND {}",
        sql.comment_where
    ));
    let hits = format!(
        "post_changed AS MATERIALIZED (SELECT id FROM posts WHERE course_id = ANY({courses_p}) \
           AND search_xid >= {since}::text::xid8 LIMIT {max} + 1), \
         comment_changed AS MATERIALIZED (SELECT id FROM comments WHERE search_xid >= {since}::text::xid8 LIMIT {max} + 1), \
         comment_of_changed AS MATERIALIZED (SELECT c1.id FROM comments c1 \
           WHERE c1.post_id IN (SELECT id FROM post_changed) AND c1.deleted_at IS NULL LIMIT {max} + 1), {own_cte}\
         post_fresh AS MATERIALIZED ({fresh_posts}), \
         comment_fresh AS MATERIALIZED ({fresh_comments}), \
         post_kept AS MATERIALIZED (SELECT k.id, k.id AS post_id, NULL::bigint AS comment_id, 0::smallint AS kind, k.score \
           FROM unnest({post_ids}::bigint[], {post_scores}::float8[]) k(id, score) \
           WHERE k.id NOT IN (SELECT id FROM post_changed)), \
         comment_kept AS MATERIALIZED (SELECT k.id, k.post_id, k.id AS comment_id, k.kind, k.score \
           FROM unnest({comment_ids}::bigint[], {comment_posts}::bigint[], {comment_kinds}::smallint[], \
                       {comment_scores}::float8[]) k(id, post_id, kind, score) \
           WHERE k.id NOT IN (SELECT id FROM comment_changed) AND k.id NOT IN (SELECT id FROM comment_of_changed)), \
         post_hits AS (SELECT * FROM (SELECT * FROM post_kept UNION ALL SELECT * FROM post_fresh) u \
           ORDER BY id DESC LIMIT {candidates_p}), \
         comment_hits AS (SELECT * FROM (SELECT * FROM comment_kept UNION ALL SELECT * FROM comment_fresh) u \
           ORDER BY id DESC LIMIT {candidates_p})"
    );
    // A kept candidate that no longer qualifies is neither kept (it changed) nor fresh.
    // A post moved out of the course since is stamped in its new course, where `post_changed`
    // does not look, and a row deleted for good is stamped nowhere: either finds the
    // candidates again (migration 0024).
    let stale = format!(
        "(SELECT count(*) FROM post_changed) > {max} OR (SELECT count(*) FROM comment_changed) > {max} \
         OR (SELECT count(*) FROM comment_of_changed) > {max} \
         OR EXISTS (SELECT 1 FROM search_departures WHERE course_id = ANY({courses_p}) AND departed_xid >= {since}::text::xid8) \
         OR (cardinality({post_ids}::bigint[]) >= {candidates_p} \
             AND (SELECT count(*) FROM post_kept) + (SELECT count(*) FROM post_fresh WHERE id = ANY({post_ids})) \
                 < cardinality({post_ids}::bigint[])) \
         OR (cardinality({comment_ids}::bigint[]) >= {candidates_p} \
             AND (SELECT count(*) FROM comment_kept) + (SELECT count(*) FROM comment_fresh WHERE id = ANY({comment_ids})) \
                 < cardinality({comment_ids}::bigint[]))"
    );
    let statement = sql.page_sql(&hits, None, (0, 0), &candidates_p, limit, Some(&stale), known);
    let rows = db.query_all_raw(stmt(&statement, sql.p.0)).await?;
    if rows.first().map(|row| row.try_get::<bool>("", "hit_stale")).transpose()?.unwrap_or(true) {
        return Ok(None);
    }
    hit_page(&rows, limit, known)
}

/// One window of ids a kind's candidates are looked for in: ids at least `lo` and below `top`
/// (`None`: no bound). `buckets`, for a window of whole id buckets of a bucketed kind: the
/// first and last bucket (`id / bucket width`), looked up with the words in its GIN index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Window {
    lo: i64,
    top: Option<i64>,
    buckets: Option<(i64, i64)>,
}

/// The one window of a kind looked up in one pass (`OnePass`): every id from `floor` up.
fn one_pass_window(floor: i64) -> Vec<Window> {
    vec![Window { lo: floor, top: None, buckets: None }]
}

/// The windows one kind's candidates are looked for in, newest first, each id from `floor` up
/// in exactly one (`floor`: the walk's floor, 0 on a first page). `newest` is the newest id
/// read, `first` the width of the first window; each next one reaches `WINDOW_GROWTH` times
/// as far back, and the last takes everything down to the floor.
/// With `bucket` (the kind's id bucket width, `COMMENT_BUCKET`), the windows are whole buckets
/// while they are at most `MAX_WINDOW_BUCKETS` of them: first the ids past the newest id's
/// bucket (rows written after `newest` was read, which no bucket list names: almost always
/// none, one primary-key probe), then the newest whole buckets reaching at least `first` ids
/// below the end of the newest id's bucket, and so on; the wider windows are ranges of ids, as
/// without buckets.
fn windows(newest: i64, first: i64, floor: i64, bucket: Option<i64>) -> Vec<Window> {
    let newest = newest.max(0);
    let mut windows = Vec::new();
    let mut top = None;
    // How far back from `start` the next window reaches.
    let (start, mut reach) = match bucket {
        Some(bucket) => {
            let past = (newest / bucket + 1) * bucket;
            if floor >= past {
                return vec![Window { lo: floor, top: None, buckets: None }];
            }
            windows.push(Window { lo: past, top: None, buckets: None });
            top = Some(past);
            (past, (first + bucket - 1) / bucket * bucket)
        }
        None => (newest, first),
    };
    for _ in 0..GROWN_WINDOWS {
        let lo = start.saturating_sub(reach);
        if lo <= floor {
            break;
        }
        let buckets = bucket.and_then(|bucket| {
            let (first, last) = (lo / bucket, top.unwrap_or(start) / bucket - 1);
            (last - first < MAX_WINDOW_BUCKETS).then_some((first, last))
        });
        windows.push(Window { lo, top, buckets });
        top = Some(lo);
        reach = reach.saturating_mul(WINDOW_GROWTH);
    }
    windows.push(Window { lo: floor, top, buckets: None });
    windows
}

/// The newest `candidates` matches of one kind, window by window (`windows`): a window is
/// searched only while the windows above it held fewer than the candidates (a one-time filter
/// on their counts, so its scan does not start otherwise). A window of buckets is the word's
/// matches in each of its buckets, from the bucketed GIN index (migration 0025): only the
/// window's matches are read. A wider one (reached only when the word is rare in the newer
/// ones) is a range of ids: the planner takes the word's GIN bitmap ANDed with the window's ids
/// (a range of the primary key for posts, the BRIN index for comments) or a backward scan.
struct WindowedSearch<'a> {
    /// Prefix of the CTE names (`<name>_w0`, `<name>_w1`…).
    name: &'static str,
    /// `SELECT … FROM …` of a candidate row: the columns its score reads.
    from: String,
    /// What a candidate's own row satisfies in every window (the match, access, the filter).
    conditions: String,
    /// For comments, the conditions on their post (aliased `p`, joined by `c.post_id`). A
    /// window's matches are sorted newest first before their posts are read, so the posts of
    /// only as many comments are read as it takes to find the candidates (a join before the
    /// sort read the post of every match: two thirds of a window of buckets' time).
    post_conditions: Option<String>,
    /// The candidate's id column (`p.id`, `c.id`).
    id: &'static str,
    /// The id bucket width of the kind's bucketed GIN index, if it has one.
    bucket: Option<i64>,
    /// For comments searched in one configuration: the query and the configuration, as the
    /// first arguments of `comment_matches_in_buckets` (migration 0026), which a window of
    /// buckets reads its matches from, on a plan that always looks the buckets up. `None`
    /// with several configurations in use (rare: a search across courses of different
    /// languages, or during a change of language), whose windows of buckets are planned inline.
    bucket_matches: Option<String>,
    /// The `$n` of the number of candidates.
    candidates: &'a str,
}

impl WindowedSearch<'_> {
    /// The materialized CTEs of the windows (to follow `WITH` or a comma), and a query of the
    /// candidates from them, newest first.
    fn sql(&self, windows: &[Window], p: &mut Params) -> (String, String) {
        let (id, n) = (self.id, self.candidates);
        let names: Vec<String> = (0..windows.len()).map(|k| format!("{}_w{k}", self.name)).collect();
        let mut ctes = Vec::new();
        for (k, window) in windows.iter().enumerate() {
            // Which ids the window holds, and (below the first) the one-time filter that runs
            // it only while the windows above found too few.
            let mut range = Vec::new();
            let mut bucket_list = None;
            match window.buckets.zip(self.bucket) {
                // Whole buckets: the bucket width is written as a literal, for the condition to
                // be the index's expression, which the planner matches.
                Some(((first, last), bucket)) => {
                    let buckets = p.push((first..=last).collect::<Vec<i64>>());
                    range.push(format!("({id} / {bucket}) = ANY({buckets})"));
                    bucket_list = Some(buckets);
                }
                None => {
                    range.push(format!("{id} >= {}", p.push(window.lo)));
                    if let Some(top) = window.top {
                        range.push(format!("{id} < {}", p.push(top)));
                    }
                }
            }
            let too_few = (k > 0).then(|| {
                let found: Vec<String> = names[..k].iter().map(|w| format!("(SELECT count(*) FROM {w})")).collect();
                format!(" AND {} < {n}", found.join(" + "))
            });
            let too_few = too_few.unwrap_or_default();
            let window = match (&self.post_conditions, self.bucket_matches.as_ref().zip(bucket_list)) {
                // The matches from the function, newest first (its ordinality is the order the
                // nested loop keeps), then their posts checked until the window has its
                // candidates. The one-time filter stays on the window, so the function is not
                // called when the windows above found enough.
                (Some(post), Some((matches, buckets))) => format!(
                    "SELECT {WINDOW_COMMENT_COLUMNS}, p.accepted_comment_id AS p_accepted \
                     FROM comment_matches_in_buckets({matches}, {buckets}) WITH ORDINALITY c({columns}, newest) \
                     JOIN posts p ON p.id = c.post_id WHERE {post}{too_few} ORDER BY c.newest LIMIT {n}",
                    columns = WINDOW_COMMENT_COLUMNS.replace("c.", ""),
                ),
                (post, _) => {
                    let rows = format!("{} WHERE {} AND {}{too_few}", self.from, self.conditions, range.join(" AND "));
                    match post {
                        None => format!("{rows} ORDER BY {id} DESC LIMIT {n}"),
                        // The ORDER BY keeps the matches a subquery of their own (not flattened
                        // into the join), sorted, whose order the nested loop over the posts
                        // keeps.
                        Some(post) => format!(
                            "SELECT c.*, p.accepted_comment_id AS p_accepted FROM ({rows} ORDER BY {id} DESC) c \
                             JOIN posts p ON p.id = c.post_id WHERE {post} ORDER BY c.id DESC LIMIT {n}"
                        ),
                    }
                }
            };
            ctes.push(format!("{name} AS MATERIALIZED ({window})", name = names[k]));
        }
        let union: Vec<String> = names.iter().map(|w| format!("SELECT * FROM {w}")).collect();
        (ctes.join(", "), format!("{} ORDER BY id DESC LIMIT {n}", union.join(" UNION ALL ")))
    }
}

/// The columns of a post its window reads: what `Conditions::scored_posts` scores.
const WINDOW_POST_COLUMNS: &str =
    "p.id, p.search_doc, p.search_config, p.endorsed_by, p.accepted_comment_id, p.resolved_at, p.created_at";

/// The columns of a comment its window reads: what `Conditions::scored_comments` scores (with
/// the post's `p_accepted`), and what the author filter asks of it. `comment_matches_in_buckets`
/// (migration 0026) returns these, in this order.
const WINDOW_COMMENT_COLUMNS: &str = "c.id, c.post_id, c.parent_id, c.search_doc, c.search_config, c.endorsed_by, \
                                      c.created_at, c.user_id, c.anonymous_to";

/// The columns of a comment a hit carries (`CommentRow`, but its course from the post).
const COMMENT_COLUMNS: &str = "id, post_id, parent_id, reply_to_user_id, user_id, body, like_count, like_version, \
                               reply_count, created_at, edited_at, anonymous_to, reply_to_anonymous_to, endorsed_by, \
                               endorsed_at";

fn hit(row: &QueryResult, known: &KnownHeadlines) -> AppResult<Hit> {
    let kind: i16 = row.try_get("", "hit_kind")?;
    let matched = Matched::from_rank(kind)?;
    let score: f64 = row.try_get("", "hit_score")?;
    let post = PostRow::from_query_result(row, "p_")?;
    let comment = if matched == Matched::Post { None } else { Some(CommentRow::from_query_result(row, "c_")?) };
    let id = comment.as_ref().map(|c| c.id).unwrap_or(post.id);
    let position = Position {
        score,
        kind,
        id,
        post_floor: row.try_get("", "hit_post_floor")?,
        comment_floor: row.try_get("", "hit_comment_floor")?,
    };
    let xid: String = row.try_get("", "hit_xid")?;
    let (headline, headline_computed) = match row.try_get::<Option<String>>("", "hit_headline")? {
        Some(made) => (Arc::from(made), true),
        // NULL only for a row whose headline was passed as known, at this very stamp.
        None => (
            known
                .get(comment.is_some(), id, &xid)
                .ok_or_else(|| AppError::Internal("a hit's headline is neither made nor known".into()))?,
            false,
        ),
    };
    Ok(Hit { matched, score, post, comment, headline, headline_computed, xid, position })
}

/// A `ts_headline` result as HTML: the text escaped, the marked matches in `<mark>`.
pub(crate) fn snippet_html(headline: &str) -> String {
    let mut html = String::with_capacity(headline.len() + 32);
    for ch in headline.chars() {
        match ch {
            '\u{1}' => html.push_str("<mark>"),
            '\u{2}' => html.push_str("</mark>"),
            '<' | '\u{3}' => html.push_str("&lt;"),
            '>' | '\u{4}' => html.push_str("&gt;"),
            '&' => html.push_str("&amp;"),
            '"' => html.push_str("&quot;"),
            '\'' => html.push_str("&#39;"),
            other => html.push(other),
        }
    }
    html
}

/// The SQL lookup, for a course whose index does not fit its share: the same rules over the
/// lexicon of migration 0015. Each typed word is taken as it is when the lexicon has it, else
/// corrected to the lexicon's nearest word by trigram distance (when at least
/// `MIN_WORD_SIMILARITY` alike). The rarest corrected words whose title counts add up to at
/// most `CANDIDATE_BUDGET` (always the rarest one) select the candidates through the title
/// words' GIN index (at most `MAX_CANDIDATES`), and only those are compared with the text.
pub(crate) async fn similar_posts_by_sql(
    db: &impl ConnectionTrait,
    course_id: i64,
    viewer: i64,
    role: Role,
    text: &str,
    limit: i64,
) -> AppResult<Vec<(PostRow, f64)>> {
    let readable = if role == Role::Instructor { "TRUE" } else { "(NOT p.private OR p.user_id = $3)" };
    let columns = crate::forum::posts::columns_of("p");
    let sql = format!(
        "WITH typed AS (SELECT DISTINCT w FROM unnest(title_words_of($2)) w), \
         known AS ( \
           SELECT best.word, best.posts FROM typed CROSS JOIN LATERAL ( \
             SELECT word, posts FROM ( \
               (SELECT t.word, t.posts FROM title_words t WHERE t.course_id = $1 AND t.word = typed.w) \
               UNION ALL \
               (SELECT t.word, t.posts FROM title_words t WHERE t.course_id = $1 ORDER BY t.word <-> typed.w LIMIT 1) \
             ) nearest WHERE similarity(word, typed.w) >= {MIN_WORD_SIMILARITY} LIMIT 1) best \
         ), chosen AS ( \
           SELECT array_agg(word) AS words FROM ( \
             SELECT word, sum(posts) OVER (ORDER BY posts, word) AS through, \
                    row_number() OVER (ORDER BY posts, word) AS n FROM known) ranked \
           WHERE n = 1 OR through <= {CANDIDATE_BUDGET} \
         ), candidates AS MATERIALIZED ( \
           SELECT {columns}, similarity(p.title, $2) AS similarity FROM posts p, chosen \
           WHERE p.course_id = $1 AND p.deleted_at IS NULL AND {readable} \
             AND title_words_of(p.title) && chosen.words \
           LIMIT {MAX_CANDIDATES} \
         ) \
         SELECT {POST_COLUMNS}, similarity::float8 AS similarity FROM candidates \
         WHERE similarity >= {MIN_SIMILARITY} \
         ORDER BY (kind = 'question' AND (accepted_comment_id IS NOT NULL OR resolved_at IS NOT NULL)) DESC, \
                  similarity DESC, id DESC \
         LIMIT $4"
    );
    let rows = db.query_all_raw(stmt(&sql, [course_id.into(), text.into(), viewer.into(), limit.into()])).await?;
    rows.iter().map(|row| Ok((PostRow::from_query_result(row, "")?, row.try_get::<f64>("", "similarity")?))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snippet_escapes_the_text_and_marks_only_the_matches() {
        assert_eq!(
            snippet_html("<script>alert('x')</script> & \u{1}run\u{2}s \"here\" \u{3}b\u{4}"),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; <mark>run</mark>s &quot;here&quot; &lt;b&gt;"
        );
    }

    #[test]
    fn windows_grow_from_the_newest_ids_and_cover_everything_down_to_the_floor_once() {
        let range = |lo: i64, top: Option<i64>| Window { lo, top, buckets: None };
        // A big table without buckets (posts): the first window and one 4 times as wide, then
        // the rest.
        assert_eq!(
            windows(1_000_000, 12_500, 0, None),
            vec![range(987_500, None), range(950_000, Some(987_500)), range(0, Some(950_000))]
        );
        // With buckets of 4096 (comments): the ids past the newest one's bucket, then windows of
        // whole buckets (4 of them, reaching at least 12,500 ids below the end of the newest
        // id's bucket; then 12, reaching 4 times as far), then the rest.
        let bucketed = |lo: i64, top: i64| Window { lo, top: Some(top), buckets: Some((lo / 4096, top / 4096 - 1)) };
        assert_eq!(
            windows(1_000_000, 12_500, 0, Some(4096)),
            vec![
                range(1_003_520, None),
                bucketed(987_136, 1_003_520),
                bucketed(937_984, 987_136),
                range(0, Some(937_984)),
            ]
        );
        // Whatever the sizes: every id from the floor up is in exactly one window (as the
        // statement's conditions select it), newest windows first, none of too many buckets.
        let selects = |w: &Window, id: i64, bucket: Option<i64>| match w.buckets.zip(bucket) {
            Some(((first, last), bucket)) => (first..=last).contains(&(id / bucket)),
            None => id >= w.lo && w.top.is_none_or(|top| id < top),
        };
        for (newest, first, floor, bucket) in [
            (1_000_000, 12_500, 0, Some(4096)),
            (1_000_000, 12_500, 960_000, Some(4096)),
            (1_000_000, 12_500, 999_999, Some(4096)),
            (1_000_000, 12_500, 0, None),
            (1_000_000, 12_500, 960_000, None),
            (100_001, 2_500, 51_234, None),
            (3_000, 12_500, 0, Some(4096)),
            (3_000, 12_500, 0, None),
            (0, 2_500, 0, Some(4096)),
            (4096, 12_500, 17, Some(4096)),
            (123_456, 12_500, 17, Some(4096)),
        ] {
            let w = windows(newest, first, floor, bucket);
            for pair in w.windows(2) {
                assert!(pair[1].lo < pair[0].lo, "{w:?}");
            }
            for window in &w {
                if let Some((a, b)) = window.buckets {
                    assert!(b - a < MAX_WINDOW_BUCKETS, "{window:?}");
                    assert!(bucket.is_some_and(|bucket| window.lo == a * bucket), "{window:?}");
                }
            }
            let step = (newest / 5_000).max(1);
            let ids = (floor..newest + 20_000).step_by(step as usize).chain([floor, newest, newest + 1]);
            for id in ids {
                let holding = w.iter().filter(|window| selects(window, id, bucket)).count();
                assert_eq!(holding, 1, "id {id} in {holding} windows of {w:?}");
            }
            if floor > 0 {
                assert!(w.iter().all(|window| !selects(window, floor - 1, bucket)), "{} below the floor", floor - 1);
            }
        }
        // A floor (a later page) ends the walk there; a small table is one window (and, with
        // buckets, the ids past it).
        assert_eq!(
            windows(1_000_000, 12_500, 960_000, None),
            vec![range(987_500, None), range(960_000, Some(987_500))]
        );
        assert_eq!(windows(3_000, 12_500, 0, None), vec![range(0, None)]);
        assert_eq!(windows(12_500, 12_500, 0, None), vec![range(0, None)]);
        assert_eq!(windows(3_000, 12_500, 0, Some(4096)), vec![range(4096, None), range(0, Some(4096))]);
    }

    #[test]
    fn one_pass_takes_only_a_trusted_estimate_within_its_limit() {
        assert!(OnePass::takes(Some(300.0), 300));
        assert!(OnePass::takes(Some(0.0), 300));
        assert!(!OnePass::takes(Some(300.5), 300));
        // No estimate (a lexeme twice, a table never analyzed): windows.
        assert!(!OnePass::takes(None, 300));
        // A limit of 0 turns one pass off.
        assert!(!OnePass::takes(Some(0.0), 0));
    }

    #[test]
    fn a_kind_in_one_pass_is_one_window_of_every_id_and_the_other_keeps_its_windows() {
        let courses = [(7, Role::Student)];
        let scope = Scope { viewer: 0, courses: &courses };
        let ctes = |posts_in_one_pass: bool, comments_in_one_pass: bool| {
            let bounds = SearchBounds {
                languages: vec![Language::English],
                post_hi: 100_000,
                comment_hi: 1_000_000,
                posts_in_one_pass,
                comments_in_one_pass,
            };
            let mut sql = Conditions::new(
                &scope,
                "quokka",
                &SearchFilter::default(),
                Access::Readers(Readers::Students),
                bounds.languages.clone(),
            );
            let candidates = sql.p.push(CANDIDATES);
            sql.windowed_hits(&bounds, (0, 0), &candidates)
        };
        let window_names = |sql: &str, kind: &str| (0..8).filter(|k| sql.contains(&format!("{kind}_w{k} AS"))).count();
        let both_windowed = ctes(false, false);
        assert_eq!(window_names(&both_windowed, "post"), 3, "{both_windowed}");
        assert_eq!(window_names(&both_windowed, "comment"), 4, "{both_windowed}");
        let posts_once = ctes(true, false);
        assert_eq!(window_names(&posts_once, "post"), 1, "{posts_once}");
        assert_eq!(window_names(&posts_once, "comment"), 4, "{posts_once}");
        // One window of every id: no range above the floor, no bucket list, no one-time filter.
        let post_cte = &posts_once[posts_once.find("post_w0 AS").expect("post_w0")..];
        let post_cte = &post_cte[..post_cte.find("post_hits AS").expect("post_hits")];
        assert!(!post_cte.contains("p.id <") && !post_cte.contains("count(*)"), "{post_cte}");
        let comments_once = ctes(false, true);
        assert_eq!(window_names(&comments_once, "post"), 3, "{comments_once}");
        assert_eq!(window_names(&comments_once, "comment"), 1, "{comments_once}");
        assert!(!comments_once.contains("comment_matches_in_buckets"), "{comments_once}");
    }

    #[test]
    fn bucketed_windows_name_the_index_expression_and_their_buckets() {
        let inline = WindowedSearch {
            name: "comment",
            from: "SELECT c.* FROM comments c".to_owned(),
            conditions: "TRUE".to_owned(),
            post_conditions: Some("TRUE".to_owned()),
            id: "c.id",
            bucket: Some(COMMENT_BUCKET),
            bucket_matches: None,
            candidates: "$1",
        };
        let buckets = [(241..=244).collect::<Vec<i64>>(), (229..=240).collect::<Vec<i64>>()];
        let mut p = Params(vec![Value::from(CANDIDATES)]);
        let (ctes, _) = inline.sql(&windows(1_000_000, COMMENT_WINDOW, 0, Some(COMMENT_BUCKET)), &mut p);
        // The expression of `comments_search_bucket_idx`, in the two windows of buckets only.
        let expression = format!("(c.id / {COMMENT_BUCKET}) = ANY(");
        assert_eq!(ctes.matches(&expression).count(), 2, "{ctes}");
        assert!(!ctes.contains("comment_matches_in_buckets"), "{ctes}");
        for list in &buckets {
            assert!(p.0.contains(&Value::from(list.clone())), "{:?}", p.0);
        }
        // In one configuration, the same buckets through `comment_matches_in_buckets`.
        let through_function = WindowedSearch { bucket_matches: Some("$2, 'english'::regconfig".to_owned()), ..inline };
        let mut p = Params(vec![Value::from(CANDIDATES), Value::from("exam")]);
        let (ctes, _) = through_function.sql(&windows(1_000_000, COMMENT_WINDOW, 0, Some(COMMENT_BUCKET)), &mut p);
        assert_eq!(ctes.matches("comment_matches_in_buckets($2, 'english'::regconfig, $").count(), 2, "{ctes}");
        assert!(!ctes.contains(&expression), "{ctes}");
        for list in &buckets {
            assert!(p.0.contains(&Value::from(list.clone())), "{:?}", p.0);
        }
        // Posts have no buckets: ranges only.
        let posts = WindowedSearch {
            name: "post",
            id: "p.id",
            bucket: None,
            bucket_matches: None,
            post_conditions: None,
            ..through_function
        };
        let (ctes, _) = posts.sql(&windows(1_000_000, POST_WINDOW, 0, None), &mut Params(Vec::new()));
        assert!(!ctes.contains(" / "), "{ctes}");
    }

    #[test]
    fn a_filter_key_names_every_field() {
        let a = SearchFilter { kind: Some(PostKind::Question), unresolved: Some(true), author_id: Some(7) };
        let b = SearchFilter { author_id: Some(8), ..a.clone() };
        assert_ne!(a.key(), b.key());
        assert_ne!(a.key(), SearchFilter::default().key());
        assert_eq!(a.key(), a.clone().key());
    }

    #[test]
    fn a_query_that_excludes_a_word_it_requires_is_known_to_find_nothing() {
        for nothing in ["exam -exam", "Exam -exam", "\"final exam\" -exam", "graph trees -graph", "well-known -known"] {
            assert!(excludes_itself(nothing), "{nothing}");
        }
        for something in
            ["exam -midterm", "exam or quiz -exam", "exams -exam", "\"a -exam\" exam", "exam", "-exam", "exam - exam"]
        {
            assert!(!excludes_itself(something), "{something}");
        }
    }

    #[test]
    fn a_query_is_trimmed_and_bounded() {
        assert_eq!(validate_query("query", "  x ").ok().as_deref(), Some("x"));
        assert!(validate_query("query", "   ").is_err());
        assert!(validate_query("query", &"é".repeat(MAX_QUERY_CHARS)).is_ok());
        assert!(validate_query("query", &"é".repeat(MAX_QUERY_CHARS + 1)).is_err());
    }
}
