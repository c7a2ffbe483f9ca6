//! Posts: a course's threads. Soft-deleted rows are invisible to every read here. Creating a
//! post also writes its `feed_outbox` row in the same statement (the home feed's fan-out job
//! pushes it to timelines after COMMIT; see `crate::feed`).

use sea_orm::{ConnectionTrait, FromQueryResult};

use crate::db::stmt;
use crate::error::{AppError, AppResult};
use crate::forum::audience::PostKind;
use crate::forum::paging::{Order, Page, PageRequest, page_sql};

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

/// A course's posts, newest first (served by `posts_course_feed_idx`).
pub async fn page_in_course(db: &impl ConnectionTrait, course_id: i64, page: &PageRequest) -> AppResult<Page<PostRow>> {
    let sql =
        page_sql(&select_post(), "course_id = $1 AND deleted_at IS NULL AND NOT private", 1, page, Order::NewestFirst);
    let mut values = vec![course_id.into()];
    values.extend(page.values());
    let rows = PostRow::find_by_statement(stmt(&sql, values)).all(db).await?;
    Ok(page.finish(rows))
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

/// The `limit` best-ranked live posts of a course that are not in `shown`, and whether more
/// remain: one step of a ranked walk. The course's posts come through `posts_course_feed_idx`
/// and are ranked here, by a top-N sort: neither order is indexed, so that a like stays a
/// heap-only update of its post's row (migration 0009 says why).
pub async fn ranked_page(
    db: &impl ConnectionTrait,
    course_id: i64,
    ranking: Ranking,
    shown: &[i64],
    limit: i64,
) -> AppResult<(Vec<PostRow>, bool)> {
    let sql = ranked_page_sql(ranking);
    let mut rows =
        PostRow::find_by_statement(stmt(&sql, [course_id.into(), shown.to_vec().into(), (limit + 1).into()]))
            .all(db)
            .await?;
    let more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    Ok((rows, more))
}

/// The statement of `ranked_page`: `$1` the course, `$2` the shown ids, `$3` the LIMIT.
///
/// The shown posts are left out by an anti-join on `unnest($2)`, not by `id <> ALL($2)`: in a
/// generic plan (a statement prepared and run again) `<> ALL` compares each post of the course
/// with every shown id in turn (measured: 50,000 posts × 1,000 ids, 240 ms), while the
/// anti-join hashes the shown ids once, so a page late in a walk costs what the first one does
/// plus one hash of at most `MAX_RANKED_WALK` ids (18 ms on the same course).
pub fn ranked_page_sql(ranking: Ranking) -> String {
    format!(
        "{} WHERE course_id = $1 AND deleted_at IS NULL AND NOT private \
         AND NOT EXISTS (SELECT 1 FROM unnest($2::bigint[]) AS shown(id) WHERE shown.id = posts.id) \
         ORDER BY {} LIMIT $3",
        select_post(),
        ranking.order_by()
    )
}

/// The same page of several courses' posts in one statement: one course's query per row of
/// `unnest`, joined laterally, so each course still walks its own index range.
pub async fn pages_in_courses(
    db: &impl ConnectionTrait,
    course_ids: &[i64],
    page: &PageRequest,
) -> AppResult<std::collections::HashMap<i64, Page<PostRow>>> {
    if course_ids.is_empty() {
        return Ok(Default::default());
    }
    let inner = page_sql(
        &select_post(),
        "course_id = parent.id AND deleted_at IS NULL AND NOT private",
        1,
        page,
        Order::NewestFirst,
    );
    // The outer ORDER BY keeps each course's rows in page order: a join promises no order.
    let (_, order_by) = page.keyset_sql(Order::NewestFirst, 0);
    let sql = format!(
        "SELECT p.* FROM unnest($1::bigint[]) AS parent(id) CROSS JOIN LATERAL ({inner}) p ORDER BY p.course_id, p.{order_by}"
    );
    let mut values: Vec<sea_orm::Value> = vec![course_ids.to_vec().into()];
    values.extend(page.values());
    let rows = PostRow::find_by_statement(stmt(&sql, values)).all(db).await?;
    let mut by_course: std::collections::HashMap<i64, Vec<PostRow>> = Default::default();
    for row in rows {
        by_course.entry(row.course_id).or_default().push(row);
    }
    Ok(course_ids.iter().map(|id| (*id, page.finish(by_course.remove(id).unwrap_or_default()))).collect())
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
    let columns = POST_COLUMNS.split(", ").map(|c| format!("p.{c}")).collect::<Vec<_>>().join(", ");
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
