//! Posts: a course's threads. Soft-deleted rows are invisible to every read here. Creating a
//! post also writes its `feed_outbox` row in the same statement (the home feed's fan-out job
//! pushes it to timelines after COMMIT; see `crate::feed`).
//!
//! **A course's list** (`Course.posts`) is read for a `Reader` (every member alike: public
//! posts only; or one member with their own visibility) and narrowed by a `PostFilter`, in NEW
//! order (keyset on `id`) or a ranked one (HOT, TOP). In every order the course's pinned posts
//! (at most `MAX_PINNED_PER_COURSE`, most recently pinned first, themselves read with the
//! reader's visibility and the filter) lead the page that opens the list, ahead of the page's
//! size of others, in the same statement; the rest of the walk leaves them out, so nothing
//! repeats.

use sea_orm::{ConnectionTrait, FromQueryResult, QueryResult};

use crate::db::stmt;
use crate::error::{AppError, AppResult};
use crate::forum::audience::{self, PostKind};
use crate::forum::paging::{Order, Page, PageRequest};

/// Serializable so the post cache (`crate::cache`) can keep it in Redis.
#[derive(Clone, Debug, FromQueryResult, serde::Serialize, serde::Deserialize)]
pub struct PostRow {
    pub id: i64,
    pub course_id: i64,
    pub user_id: i64,
    pub title: String,
    pub body: String,
    pub like_count: i32,
    /// Orders the post's like counts: moved by every committed change of `like_count`.
    /// (Absent from post-cache entries written before it was cached; the entry's own
    /// `like_v` field supplies it.)
    #[serde(default)]
    pub like_version: i64,
    pub comment_count: i32,
    pub view_count: i64,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub edited_at: Option<chrono::DateTime<chrono::Utc>>,
    /// `question`, `discussion` or `announcement` (`forum::audience::PostKind`). The fields
    /// from here on have no serde default: a post-cache entry written before they existed
    /// does not decode, and reads as a miss (reloaded), never as a public signed post.
    pub kind: String,
    /// NULL when signed; else whom the author is hidden from (`forum::audience`).
    pub anonymous_to: Option<String>,
    /// Only its author and staff read it.
    pub private: bool,
    pub pinned_at: Option<chrono::DateTime<chrono::Utc>>,
    /// The accepted answer: a top-level comment of this question.
    pub accepted_comment_id: Option<i64>,
    /// When staff marked it resolved (without an accepted answer, or besides one).
    pub resolved_at: Option<chrono::DateTime<chrono::Utc>>,
    pub endorsed_by: Option<i64>,
    pub endorsed_at: Option<chrono::DateTime<chrono::Utc>>,
}

impl PostRow {
    pub(crate) fn kind(&self) -> AppResult<PostKind> {
        PostKind::parse(&self.kind)
    }

    /// Resolved: it has an accepted answer, or staff marked it so.
    pub(crate) fn resolved(&self) -> bool {
        self.accepted_comment_id.is_some() || self.resolved_at.is_some()
    }
}

pub(crate) const POST_COLUMNS: &str = "id, course_id, user_id, title, body, like_count, like_version, comment_count, view_count, \
                            created_at, edited_at, kind, anonymous_to, private, pinned_at, accepted_comment_id, \
                            resolved_at, endorsed_by, endorsed_at";

/// `POST_COLUMNS`, each qualified by `alias` (`p.id, p.course_id, …`).
pub(crate) fn columns_of(alias: &str) -> String {
    POST_COLUMNS.split(", ").map(|c| format!("{alias}.{c}")).collect::<Vec<_>>().join(", ")
}

fn select_post() -> String {
    format!("SELECT {POST_COLUMNS} FROM posts")
}

/// Limits on what a post may hold.
pub const MAX_TITLE_CHARS: usize = 200;
pub const MAX_BODY_CHARS: usize = 20_000;

/// Trims and checks a title and body; empty or oversized text is BAD_USER_INPUT.
pub fn validate_text(field: &str, raw: &str, max_chars: usize) -> AppResult<String> {
    let text = raw.trim();
    if text.is_empty() {
        return Err(AppError::bad_input(format!("`{field}` must not be empty")));
    }
    // PostgreSQL text cannot hold NUL, and other control characters are never meant.
    if text.chars().any(|c| c.is_control() && !matches!(c, '\n' | '\t' | '\r')) {
        return Err(AppError::bad_input(format!("`{field}` contains a control character")));
    }
    let chars = text.chars().count();
    if chars > max_chars {
        return Err(AppError::bad_input(format!("`{field}` is {chars} characters; the limit is {max_chars}")));
    }
    Ok(text.to_owned())
}

/// A live (not deleted) post.
pub async fn find(db: &impl ConnectionTrait, id: i64) -> AppResult<Option<PostRow>> {
    Ok(PostRow::find_by_statement(stmt(
        &format!("{} WHERE id = $1 AND deleted_at IS NULL", select_post()),
        [id.into()],
    ))
    .one(db)
    .await?)
}

/// What a list of a course's posts is narrowed to (`Course.posts(filter:)`): every field is
/// optional and they are AND-ed. A boolean asks for the posts that have the property (`true`)
/// or for those that lack it (`false`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct PostFilter {
    pub kind: Option<PostKind>,
    /// Questions with no accepted answer that staff have not marked resolved.
    pub unresolved: Option<bool>,
    /// No live comment or reply by anyone but the post's author (`comments_post_author_idx`).
    pub unanswered: Option<bool>,
    pub endorsed: Option<bool>,
    pub pinned: Option<bool>,
    /// Carries this tag (`post_tags`); a tag of another course, or none, matches no post.
    pub tag_id: Option<i64>,
    /// Written by the reader.
    pub mine: Option<bool>,
    pub private: Option<bool>,
    /// Not yet read by the reader (`forum::unread`): never their own posts.
    pub unread: Option<bool>,
}

impl PostFilter {
    pub(crate) fn is_empty(&self) -> bool {
        self == &Self::default()
    }

    /// The filter as short canonical text, empty for none: the same filter always gives the
    /// same text, which a cursor of a filtered walk is bound to (`crate::cursor`). Only
    /// `[a-z0-9=,]`.
    pub(crate) fn key(&self) -> String {
        let mut parts = Vec::new();
        if let Some(kind) = self.kind {
            parts.push(format!("k={}", kind.as_str()));
        }
        let flags = [
            ("u", self.unresolved),
            ("a", self.unanswered),
            ("e", self.endorsed),
            ("p", self.pinned),
            ("m", self.mine),
            ("v", self.private),
            ("n", self.unread),
        ];
        for (name, value) in flags {
            if let Some(value) = value {
                parts.push(format!("{name}={}", u8::from(value)));
            }
        }
        if let Some(tag) = self.tag_id {
            parts.push(format!("t={tag}"));
        }
        parts.join(",")
    }
}

/// Who reads a list of a course's posts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reader {
    /// Every member alike: public posts only. The pages `cache::pages` shares.
    Shared,
    /// One member, with their own visibility (`audience::readable_sql`): staff read every
    /// post, a student the public ones and their own private ones.
    Member { user_id: i64, staff: bool },
}

/// The WHERE condition of one course's list and its parameters: `$1` the course, then the
/// reader and the tag when the condition needs them.
struct Scope {
    condition: String,
    values: Vec<sea_orm::Value>,
}

impl Scope {
    fn new(course_id: i64, reader: Reader, filter: &PostFilter) -> AppResult<Self> {
        let mut values: Vec<sea_orm::Value> = vec![course_id.into()];
        let mut parts = vec!["course_id = $1".to_owned(), "deleted_at IS NULL".to_owned()];
        let needs_viewer =
            filter.mine.is_some() || filter.unread.is_some() || matches!(reader, Reader::Member { staff: false, .. });
        let viewer = match reader {
            Reader::Member { user_id, .. } if needs_viewer => {
                values.push(user_id.into());
                Some(values.len())
            }
            Reader::Member { .. } => None,
            Reader::Shared if filter.mine.is_some() || filter.unread.is_some() => {
                return Err(AppError::Internal("a list of the reader's own posts read without a reader".into()));
            }
            Reader::Shared => {
                parts.push("NOT private".to_owned());
                None
            }
        };
        if let (Reader::Member { staff, .. }, Some(viewer)) = (reader, viewer) {
            parts.push(audience::readable_sql(viewer, staff));
        }
        let either = |wanted: bool, yes: &str, no: &str| if wanted { yes.to_owned() } else { no.to_owned() };
        if let Some(kind) = filter.kind {
            parts.push(format!("kind = '{}'", kind.as_str()));
        }
        if let Some(wanted) = filter.unresolved {
            let unresolved = "(kind = 'question' AND accepted_comment_id IS NULL AND resolved_at IS NULL)";
            parts.push(either(wanted, unresolved, &format!("NOT {unresolved}")));
        }
        if let Some(wanted) = filter.unanswered {
            let answered = "EXISTS (SELECT 1 FROM comments c WHERE c.post_id = posts.id \
                            AND c.user_id <> posts.user_id AND c.deleted_at IS NULL)";
            parts.push(either(wanted, &format!("NOT {answered}"), answered));
        }
        if let Some(wanted) = filter.endorsed {
            parts.push(either(wanted, "endorsed_by IS NOT NULL", "endorsed_by IS NULL"));
        }
        if let Some(wanted) = filter.pinned {
            parts.push(either(wanted, "pinned_at IS NOT NULL", "pinned_at IS NULL"));
        }
        if let (Some(wanted), Some(viewer)) = (filter.mine, viewer) {
            parts.push(if wanted { format!("user_id = ${viewer}") } else { format!("user_id <> ${viewer}") });
        }
        if let (Some(wanted), Some(viewer)) = (filter.unread, viewer) {
            let unread = crate::forum::unread::unread_sql(viewer);
            parts.push(if wanted { unread } else { format!("NOT {unread}") });
        }
        if let Some(wanted) = filter.private {
            parts.push(either(wanted, "private", "NOT private"));
        }
        if let Some(tag) = filter.tag_id {
            values.push(tag.into());
            parts.push(format!(
                "EXISTS (SELECT 1 FROM post_tags pt WHERE pt.post_id = posts.id AND pt.tag_id = ${})",
                values.len()
            ));
        }
        Ok(Self { condition: parts.join(" AND "), values })
    }
}

/// Most posts pinned in a course at once: they all lead the first page of every order, so
/// the pin mutation refuses one more (`questions::pin`).
pub(crate) const MAX_PINNED_PER_COURSE: i64 = 5;

/// The pinned posts of a scope, as they lead a list: at most `MAX_PINNED_PER_COURSE`, most recently
/// pinned first (`posts_pinned_idx`).
fn pins_sql(scope: &str, extra: &str) -> String {
    format!(
        "SELECT {POST_COLUMNS}{extra}, true AS lead FROM posts WHERE {scope} AND pinned_at IS NOT NULL \
         ORDER BY pinned_at DESC, id DESC LIMIT {MAX_PINNED_PER_COURSE}"
    )
}

/// Whether a NEW-order page may be the one that opens the list (and so carry the pins): a
/// first page, or any backward page (it does when it reaches the top).
fn may_open(page: &PageRequest) -> bool {
    page.backward || page.cursor.is_none()
}

/// A NEW-order page of a scope (`$1..$scope_params`), its rows marked `lead` (a pin) or not.
/// The unpinned posts walk `posts_course_feed_idx` by keyset; the pins ride along (one
/// statement) on a page that may open the list.
fn new_page_sql(scope: &str, scope_params: usize, page: &PageRequest) -> String {
    let (keyset, order_by) = page.keyset_sql(Order::NewestFirst, scope_params + 1);
    let rest = format!(
        "SELECT {POST_COLUMNS}, false AS lead FROM posts WHERE {scope} AND pinned_at IS NULL AND {keyset} \
         ORDER BY {order_by} LIMIT ${}",
        page.limit_param(scope_params)
    );
    if !may_open(page) {
        return rest;
    }
    format!("SELECT * FROM (({}) UNION ALL ({rest})) listed ORDER BY lead DESC, {order_by}", pins_sql(scope, ""))
}

/// The rows of a statement that marks each with `lead`.
fn lead_rows(rows: &[QueryResult]) -> AppResult<Vec<(PostRow, bool)>> {
    rows.iter().map(|row| Ok((PostRow::from_query_result(row, "")?, row.try_get::<bool>("", "lead")?))).collect()
}

/// Splits the pins from the rest: the pins most recently pinned first.
fn split_pins(rows: Vec<(PostRow, bool)>) -> (Vec<PostRow>, Vec<PostRow>) {
    let (pins, rest): (Vec<_>, Vec<_>) = rows.into_iter().partition(|(_, lead)| *lead);
    let mut pins: Vec<PostRow> = pins.into_iter().map(|(row, _)| row).collect();
    pins.sort_by(|a, b| b.pinned_at.cmp(&a.pinned_at).then(b.id.cmp(&a.id)));
    (pins, rest.into_iter().map(|(row, _)| row).collect())
}

/// The page of the unpinned rows, led by the pins when it opens the list: the first page
/// forward, or the backward page that reached the top (`hasPreviousPage` false).
fn finish_new_page(page: &PageRequest, rows: Vec<(PostRow, bool)>) -> Page<PostRow> {
    let (mut pins, rest) = split_pins(rows);
    let mut finished = page.finish(rest);
    let opens = if page.backward { !finished.has_prev } else { page.cursor.is_none() };
    if opens && !pins.is_empty() {
        pins.append(&mut finished.items);
        finished.items = pins;
    }
    finished
}

/// A page of a course's posts in NEW order (newest first, keyset on `id`) as `reader` sees
/// them, narrowed by `filter`. Pinned posts lead the page that opens the list, ahead of the
/// `limit` others, and are left out of every page's others, so a walk shows each once.
pub(crate) async fn page_in_course(
    db: &impl ConnectionTrait,
    course_id: i64,
    reader: Reader,
    filter: &PostFilter,
    page: &PageRequest,
) -> AppResult<Page<PostRow>> {
    let scope = Scope::new(course_id, reader, filter)?;
    let sql = new_page_sql(&scope.condition, scope.values.len(), page);
    let mut values = scope.values;
    values.extend(page.values());
    let rows = db.query_all_raw(stmt(&sql, values)).await?;
    Ok(finish_new_page(page, lead_rows(&rows)?))
}

/// The orders of a course's posts other than newest first. Both are kept by PostgreSQL
/// itself: `hot_score` is a generated column of the counts and the creation time
/// (`post_hot_score()` in migration 0009), so every statement that commits a count commits
/// the ranking with it, and a deleted post leaves both orders with its `deleted_at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ranking {
    /// Engagement with a decay by age: log10(max(1, likes + 2 * comments)) + created / 45000 s.
    Hot,
    /// Most liked first.
    Top,
}

impl Ranking {
    fn order_by(self) -> &'static str {
        match self {
            Ranking::Hot => "hot_score DESC, id DESC",
            Ranking::Top => "like_count DESC, id DESC",
        }
    }
}

/// One step of a ranked walk of a course's posts as `reader` sees them, narrowed by `filter`:
/// the `limit` best-ranked posts not in `shown`, and whether more remain. The first step
/// (`shown` empty) also carries the pinned posts, ahead of the `limit` others and left out of
/// them; later steps leave them out because the walk's `shown` holds them. The course's posts
/// come through `posts_course_feed_idx` and are ranked here, by a top-N sort: neither order is
/// indexed, so that a like stays a heap-only update of its post's row (migration 0009 says why).
// Each argument is one part of what the step is: whose posts, for whom, which, in what order, from where.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn ranked_page(
    db: &impl ConnectionTrait,
    course_id: i64,
    reader: Reader,
    filter: &PostFilter,
    ranking: Ranking,
    shown: &[i64],
    limit: i64,
) -> AppResult<(Vec<PostRow>, bool)> {
    let scope = Scope::new(course_id, reader, filter)?;
    let params = scope.values.len();
    let mut values = scope.values;
    let sql = if shown.is_empty() {
        values.push((limit + 1).into());
        ranked_first_sql(ranking, &scope.condition, params + 1)
    } else {
        values.push(shown.to_vec().into());
        values.push((limit + 1).into());
        ranked_rest_sql(ranking, &scope.condition, params + 1, params + 2)
    };
    let rows = db.query_all_raw(stmt(&sql, values)).await?;
    let (mut rows, mut rest) = split_pins(lead_rows(&rows)?);
    let more = rest.len() as i64 > limit;
    rest.truncate(limit as usize);
    rows.append(&mut rest);
    Ok((rows, more))
}

/// A ranked step after the first: the scope's best-ranked posts not among `$shown`.
///
/// The shown posts are left out by an anti-join on `unnest($shown)`, not by `id <> ALL(…)`:
/// in a generic plan (a statement prepared and run again) `<> ALL` compares each post of the
/// course with every shown id in turn (measured: 50,000 posts × 1,000 ids, 240 ms), while the
/// anti-join hashes the shown ids once, so a page late in a walk costs what the first one does
/// plus one hash of at most `MAX_RANKED_WALK` ids (18 ms on the same course).
fn ranked_rest_sql(ranking: Ranking, scope: &str, shown: usize, limit: usize) -> String {
    format!(
        "SELECT {POST_COLUMNS}, false AS lead FROM posts WHERE {scope} \
         AND NOT EXISTS (SELECT 1 FROM unnest(${shown}::bigint[]) AS shown(id) WHERE shown.id = posts.id) \
         ORDER BY {} LIMIT ${limit}",
        ranking.order_by()
    )
}

/// The first ranked step: the scope's pins, then its best-ranked other posts.
fn ranked_first_sql(ranking: Ranking, scope: &str, limit: usize) -> String {
    let order_by = ranking.order_by();
    format!(
        "WITH pins AS ({pins}) \
         SELECT * FROM (SELECT * FROM pins UNION ALL \
           (SELECT {POST_COLUMNS}, hot_score, false AS lead FROM posts WHERE {scope} \
            AND NOT EXISTS (SELECT 1 FROM pins WHERE pins.id = posts.id) ORDER BY {order_by} LIMIT ${limit})) listed \
         ORDER BY lead DESC, {order_by}",
        pins = pins_sql(scope, ", hot_score"),
    )
}

/// The statement of a later step of a ranked walk of the pages every member shares (public
/// posts, no filter): `$1` the course, `$2` the shown ids, `$3` the LIMIT.
pub fn ranked_page_sql(ranking: Ranking) -> String {
    ranked_rest_sql(ranking, SHARED_SCOPE, 2, 3)
}

/// The scope of the pages every member shares: a course's live public posts.
const SHARED_SCOPE: &str = "course_id = $1 AND deleted_at IS NULL AND NOT private";

/// The same NEW-order page of several courses' shared lists in one statement: one course's
/// query per row of `unnest`, joined laterally, so each course still walks its own index
/// range (and its pins lead its page as `page_in_course` has them).
pub(crate) async fn pages_in_courses(
    db: &impl ConnectionTrait,
    course_ids: &[i64],
    page: &PageRequest,
) -> AppResult<std::collections::HashMap<i64, Page<PostRow>>> {
    if course_ids.is_empty() {
        return Ok(Default::default());
    }
    let inner = new_page_sql(&SHARED_SCOPE.replace("$1", "parent.id"), 1, page);
    // The outer ORDER BY keeps each course's rows in page order: a join promises no order.
    let (_, order_by) = page.keyset_sql(Order::NewestFirst, 0);
    let sql = format!(
        "SELECT p.* FROM unnest($1::bigint[]) AS parent(id) CROSS JOIN LATERAL ({inner}) p \
         ORDER BY p.course_id, p.lead DESC, p.{order_by}"
    );
    let mut values: Vec<sea_orm::Value> = vec![course_ids.to_vec().into()];
    values.extend(page.values());
    let rows = db.query_all_raw(stmt(&sql, values)).await?;
    let mut by_course: std::collections::HashMap<i64, Vec<(PostRow, bool)>> = Default::default();
    for row in lead_rows(&rows)? {
        by_course.entry(row.0.course_id).or_default().push(row);
    }
    Ok(course_ids.iter().map(|id| (*id, finish_new_page(page, by_course.remove(id).unwrap_or_default()))).collect())
}

/// What a new post is: where, by whom, and how it is shown.
pub struct NewPost<'a> {
    pub course_id: i64,
    pub user_id: i64,
    pub title: &'a str,
    pub body: &'a str,
    pub kind: PostKind,
    /// `None`: signed; else whom the author is hidden from (`forum::audience`).
    pub anonymous_to: Option<&'a str>,
    pub private: bool,
}

impl<'a> NewPost<'a> {
    /// A signed, public discussion.
    pub fn discussion(course_id: i64, user_id: i64, title: &'a str, body: &'a str) -> Self {
        Self { course_id, user_id, title, body, kind: PostKind::Discussion, anonymous_to: None, private: false }
    }
}

/// Inserts a post and its `feed_outbox` row in ONE statement: either both commit or neither,
/// so a post can never miss its fan-out, even if the process dies right after COMMIT. A
/// private post gets no outbox row: it never enters a timeline (it does when it is made
/// public, `questions::make_public`).
pub async fn create(db: &impl ConnectionTrait, new: &NewPost<'_>) -> AppResult<PostRow> {
    let sql = format!(
        "WITH post AS (INSERT INTO posts (course_id, user_id, title, body, kind, anonymous_to, private) \
                       VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING {POST_COLUMNS}), \
              outbox AS (INSERT INTO feed_outbox (post_id, course_id) SELECT id, course_id FROM post WHERE NOT private) \
         SELECT {POST_COLUMNS} FROM post"
    );
    let values: [sea_orm::Value; 7] = [
        new.course_id.into(),
        new.user_id.into(),
        new.title.into(),
        new.body.into(),
        new.kind.as_str().into(),
        new.anonymous_to.map(str::to_owned).into(),
        new.private.into(),
    ];
    PostRow::find_by_statement(stmt(&sql, values))
        .one(db)
        .await?
        .ok_or_else(|| AppError::Internal("INSERT … RETURNING returned no row".into()))
}

/// Changes title and/or body of a live post; `None` keeps the old value.
pub async fn edit(db: &impl ConnectionTrait, id: i64, title: Option<&str>, body: Option<&str>) -> AppResult<PostRow> {
    let sql = format!(
        "UPDATE posts SET title = COALESCE($2, title), body = COALESCE($3, body), edited_at = now() \
         WHERE id = $1 AND deleted_at IS NULL RETURNING {}",
        POST_COLUMNS
    );
    PostRow::find_by_statement(stmt(&sql, [id.into(), title.map(str::to_owned).into(), body.map(str::to_owned).into()]))
        .one(db)
        .await?
        .ok_or_else(|| AppError::not_found("post"))
}

/// Soft-deletes a live post. Returns false when it was already gone. It writes one row, the
/// post's, which is first in the lock order of every multi-row write (`forum::comments`), so it
/// never deadlocks with them: a comment's delete after it finds the post gone (NOT_FOUND).
pub async fn soft_delete(db: &impl ConnectionTrait, id: i64) -> AppResult<bool> {
    let result = db
        .execute_raw(stmt("UPDATE posts SET deleted_at = now() WHERE id = $1 AND deleted_at IS NULL", [id.into()]))
        .await?;
    Ok(result.rows_affected() == 1)
}

/// The live posts among `ids`, in one statement (the post cache's loader).
pub async fn find_many(db: &impl ConnectionTrait, ids: &[i64]) -> AppResult<Vec<PostRow>> {
    Ok(PostRow::find_by_statement(stmt(
        &format!("SELECT {POST_COLUMNS} FROM posts WHERE id = ANY($1) AND deleted_at IS NULL"),
        [ids.to_vec().into()],
    ))
    .all(db)
    .await?)
}

/// The newest `limit` live post ids of some courses, newest first: each course's head comes from
/// `posts_course_feed_idx` (LATERAL), then the heads are merged. Rebuilds timelines and
/// celebrity lists.
pub async fn newest_ids_in_courses(db: &impl ConnectionTrait, courses: &[i64], limit: i64) -> AppResult<Vec<i64>> {
    #[derive(FromQueryResult)]
    struct Id {
        id: i64,
    }
    if courses.is_empty() {
        return Ok(Vec::new());
    }
    let rows = Id::find_by_statement(stmt(
        "SELECT p.id FROM unnest($1::bigint[]) AS c(id) CROSS JOIN LATERAL \
           (SELECT id FROM posts WHERE course_id = c.id AND deleted_at IS NULL AND NOT private \
              ORDER BY id DESC LIMIT $2) p \
         ORDER BY p.id DESC LIMIT $2",
        [courses.to_vec().into(), limit.into()],
    ))
    .all(db)
    .await?;
    Ok(rows.into_iter().map(|r| r.id).collect())
}

/// Up to `limit` live posts of some courses with ids below `below` (all when `None`), newest
/// first: the home feed's keyset over PostgreSQL, served by `posts_course_feed_idx` per course.
pub async fn newest_in_courses(
    db: &impl ConnectionTrait,
    courses: &[i64],
    below: Option<i64>,
    limit: i64,
) -> AppResult<Vec<PostRow>> {
    if courses.is_empty() {
        return Ok(Vec::new());
    }
    let columns = columns_of("p");
    let sql = format!(
        "SELECT {columns} FROM unnest($1::bigint[]) AS c(id) CROSS JOIN LATERAL \
           (SELECT {POST_COLUMNS} FROM posts WHERE course_id = c.id AND deleted_at IS NULL AND NOT private \
              AND id < $2 ORDER BY id DESC LIMIT $3) p \
         ORDER BY p.id DESC LIMIT $3"
    );
    // A bound always, so `id < $2` is an index condition in the generic plan too.
    let below = below.unwrap_or(i64::MAX);
    Ok(PostRow::find_by_statement(stmt(&sql, [courses.to_vec().into(), below.into(), limit.into()])).all(db).await?)
}
