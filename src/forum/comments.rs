//! Comments and replies, two levels deep (Facebook style). A reply always hangs under a root
//! comment; replying to a reply attaches to that root and records whom it answers. Creating and
//! deleting keep `posts.comment_count` and `comments.reply_count` right in the same transaction.
//!
//! Lock order. Every transaction here that writes more than one row takes the row locks in ONE
//! global order: the post's row first, then comment rows in ascending id. The like worker's batch
//! (`likes::apply`: posts by id, then comments by id) follows the same order, and a post's delete
//! writes only the post's row. With one order, racing writers queue; they never deadlock.
//! (Before, a reply's delete locked the reply, then its root for `reply_count`, while the root's
//! delete locked the root, then the reply: together they deadlocked, 40P01, shown as INTERNAL.)

use sea_orm::{ConnectionTrait, FromQueryResult, TransactionSession, TransactionTrait};

use crate::db::stmt;
use crate::error::{AppError, AppResult};
use crate::forum::paging::{Order, Page, PageRequest, page_sql};

#[derive(Clone, Debug, FromQueryResult)]
pub(crate) struct CommentRow {
    pub id: i64,
    pub post_id: i64,
    /// The course of the post, carried so access checks need no further query.
    pub course_id: i64,
    pub parent_id: Option<i64>,
    pub reply_to_user_id: Option<i64>,
    pub user_id: i64,
    pub body: String,
    pub like_count: i32,
    /// Orders its like counts: moved by every committed change of `like_count`.
    pub like_version: i64,
    pub reply_count: i32,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub edited_at: Option<chrono::DateTime<chrono::Utc>>,
    /// NULL when signed; else whom the author is hidden from (`forum::audience`).
    pub anonymous_to: Option<String>,
    /// A reply's: the `anonymous_to` of what it answers (`replyTo` hides as that did).
    pub reply_to_anonymous_to: Option<String>,
    pub endorsed_by: Option<i64>,
    pub endorsed_at: Option<chrono::DateTime<chrono::Utc>>,
}

pub(crate) const MAX_COMMENT_CHARS: usize = 5_000;

const COMMENT_COLUMNS: &str = "id, post_id, parent_id, reply_to_user_id, user_id, body, like_count, like_version, \
                               reply_count, created_at, edited_at, anonymous_to, reply_to_anonymous_to, endorsed_by, \
                               endorsed_at";

/// A live comment or reply on a live post.
pub(crate) async fn find(db: &impl ConnectionTrait, id: i64) -> AppResult<Option<CommentRow>> {
    let sql = "SELECT c.id, c.post_id, p.course_id, c.parent_id, c.reply_to_user_id, c.user_id, c.body, \
               c.like_count, c.like_version, c.reply_count, c.created_at, c.edited_at, \
               c.anonymous_to, c.reply_to_anonymous_to, c.endorsed_by, c.endorsed_at \
               FROM comments c JOIN posts p ON p.id = c.post_id \
               WHERE c.id = $1 AND c.deleted_at IS NULL AND p.deleted_at IS NULL";
    Ok(CommentRow::find_by_statement(stmt(sql, [id.into()])).one(db).await?)
}

/// Whose comments a page lists: a post's top-level comments, or a root comment's replies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Thread {
    Post { post_id: i64, course_id: i64 },
    Replies { root_id: i64, course_id: i64 },
}

/// The same page (`page`) of many threads of one kind in ONE statement: every parent's page
/// through a LATERAL join on the same index as `page_top_level` / `page_replies`, so a list of
/// posts with their comments costs one statement per level, not one per post.
pub(crate) async fn pages_of_threads(
    db: &impl ConnectionTrait,
    threads: &[Thread],
    page: &PageRequest,
) -> AppResult<std::collections::HashMap<Thread, Page<CommentRow>>> {
    let Some(first) = threads.first() else { return Ok(Default::default()) };
    let (parent_column, scope) = match first {
        Thread::Post { .. } => ("post_id", "post_id = parent.id AND parent_id IS NULL AND deleted_at IS NULL"),
        Thread::Replies { .. } => ("parent_id", "parent_id = parent.id AND deleted_at IS NULL"),
    };
    let (ids, courses): (Vec<i64>, Vec<i64>) = threads
        .iter()
        .map(|thread| match *thread {
            Thread::Post { post_id, course_id } => (post_id, course_id),
            Thread::Replies { root_id, course_id } => (root_id, course_id),
        })
        .unzip();
    let inner = page_sql(&format!("SELECT {COMMENT_COLUMNS} FROM comments"), scope, 2, page, Order::OldestFirst);
    // The outer ORDER BY keeps each thread's rows in page order: a join promises no order.
    let (_, order_by) = page.keyset_sql(Order::OldestFirst, 0);
    let sql = format!(
        "SELECT c.*, parent.course_id FROM unnest($1::bigint[], $2::bigint[]) AS parent(id, course_id) \
         CROSS JOIN LATERAL ({inner}) c ORDER BY parent.id, c.{order_by}"
    );
    let mut values: Vec<sea_orm::Value> = vec![ids.into(), courses.into()];
    values.extend(page.values());
    let rows = CommentRow::find_by_statement(stmt(&sql, values)).all(db).await?;
    let mut by_parent: std::collections::HashMap<i64, Vec<CommentRow>> = Default::default();
    for row in rows {
        let parent = if parent_column == "post_id" { row.post_id } else { row.parent_id.unwrap_or_default() };
        by_parent.entry(parent).or_default().push(row);
    }
    Ok(threads
        .iter()
        .map(|thread| {
            let parent = match *thread {
                Thread::Post { post_id, .. } => post_id,
                Thread::Replies { root_id, .. } => root_id,
            };
            (*thread, page.finish(by_parent.remove(&parent).unwrap_or_default()))
        })
        .collect())
}

/// Live comments (or replies) by id, with their post's course, in one statement.
pub(crate) async fn find_many(db: &impl ConnectionTrait, ids: &[i64]) -> AppResult<Vec<CommentRow>> {
    let sql = "SELECT c.id, c.post_id, p.course_id, c.parent_id, c.reply_to_user_id, c.user_id, c.body, \
               c.like_count, c.like_version, c.reply_count, c.created_at, c.edited_at, \
               c.anonymous_to, c.reply_to_anonymous_to, c.endorsed_by, c.endorsed_at \
               FROM comments c JOIN posts p ON p.id = c.post_id \
               WHERE c.id = ANY($1) AND c.deleted_at IS NULL AND p.deleted_at IS NULL";
    Ok(CommentRow::find_by_statement(stmt(sql, [ids.to_vec().into()])).all(db).await?)
}

/// A row whose presence is the answer (RETURNING id of an updated or locked row).
#[derive(FromQueryResult)]
struct IdRow {
    id: i64,
}

/// Adds a top-level comment. The post's row is updated first: that both bumps the counter and
/// locks out a concurrent delete, so a comment never lands on a post deleted meanwhile.
pub(crate) async fn create_comment<C: ConnectionTrait + TransactionTrait>(
    db: &C,
    post_id: i64,
    course_id: i64,
    user_id: i64,
    body: &str,
    anonymous_to: Option<&str>,
) -> AppResult<CommentRow> {
    let txn = db.begin().await?;
    bump_post_comments(&txn, post_id, 1).await?;
    let row = insert(&txn, post_id, course_id, (None, None, None), (user_id, anonymous_to), body).await?;
    txn.commit().await?;
    Ok(row)
}

/// Adds a reply to `target` (a root comment or a reply). It lands under the root; `reply_to`
/// is the author of `target`.
pub(crate) async fn create_reply<C: ConnectionTrait + TransactionTrait>(
    db: &C,
    target: &CommentRow,
    user_id: i64,
    body: &str,
    anonymous_to: Option<&str>,
) -> AppResult<CommentRow> {
    let root_id = target.parent_id.unwrap_or(target.id);
    let txn = db.begin().await?;
    // Lock order (module docs): the post, then the root. Holding the post also means a delete
    // of the root either committed before (the root is gone: NOT_FOUND) or waits for us.
    bump_post_comments(&txn, target.post_id, 1).await?;
    let bumped = IdRow::find_by_statement(stmt(
        "UPDATE comments SET reply_count = reply_count + 1 \
         WHERE id = $1 AND parent_id IS NULL AND deleted_at IS NULL RETURNING id",
        [root_id.into()],
    ))
    .one(&txn)
    .await?;
    if bumped.is_none() {
        return Err(AppError::not_found("comment"));
    }
    let parent = (Some(root_id), Some(target.user_id), target.anonymous_to.as_deref());
    let row = insert(&txn, target.post_id, target.course_id, parent, (user_id, anonymous_to), body).await?;
    txn.commit().await?;
    Ok(row)
}

async fn bump_post_comments(txn: &impl ConnectionTrait, post_id: i64, delta: i64) -> AppResult<()> {
    let bumped = IdRow::find_by_statement(stmt(
        "UPDATE posts SET comment_count = comment_count + $2 WHERE id = $1 AND deleted_at IS NULL RETURNING id",
        [post_id.into(), delta.into()],
    ))
    .one(txn)
    .await?;
    bumped.map(|_| ()).ok_or_else(|| AppError::not_found("post"))
}

/// `parent`: the root comment, whom the reply answers and whom that writer hid from (all
/// `None` for a top-level comment); `author`: the writer and whom they hide from (`None`:
/// signed).
async fn insert(
    txn: &impl ConnectionTrait,
    post_id: i64,
    course_id: i64,
    (parent_id, reply_to_user_id, reply_to_anonymous_to): (Option<i64>, Option<i64>, Option<&str>),
    (user_id, anonymous_to): (i64, Option<&str>),
    body: &str,
) -> AppResult<CommentRow> {
    let sql = format!(
        "INSERT INTO comments (post_id, parent_id, reply_to_user_id, user_id, body, anonymous_to, \
                               reply_to_anonymous_to) \
         VALUES ($1, $2, $3, $4, $5, $7, $8) RETURNING {COMMENT_COLUMNS}, $6::bigint AS course_id"
    );
    let anonymous_to = anonymous_to.map(str::to_owned);
    let reply_to_anonymous_to = reply_to_anonymous_to.map(str::to_owned);
    CommentRow::find_by_statement(stmt(
        &sql,
        [
            post_id.into(),
            parent_id.into(),
            reply_to_user_id.into(),
            user_id.into(),
            body.into(),
            course_id.into(),
            anonymous_to.into(),
            reply_to_anonymous_to.into(),
        ],
    ))
    .one(txn)
    .await?
    .ok_or_else(|| AppError::Internal("INSERT … RETURNING returned no row".into()))
}

pub(crate) async fn edit(db: &impl ConnectionTrait, comment: &CommentRow, body: &str) -> AppResult<CommentRow> {
    let sql = format!(
        "UPDATE comments SET body = $2, edited_at = now() WHERE id = $1 AND deleted_at IS NULL \
         RETURNING {COMMENT_COLUMNS}, $3::bigint AS course_id"
    );
    CommentRow::find_by_statement(stmt(&sql, [comment.id.into(), body.into(), comment.course_id.into()]))
        .one(db)
        .await?
        .ok_or_else(|| AppError::not_found("comment"))
}

/// Soft-deletes a comment and, for a root comment, its replies with it; counters follow the
/// rows that really changed, and a question whose accepted answer this was has none after.
/// Returns false when it was already gone, or its post is.
///
/// Locks, in the module's order: the post's row (its `comment_count`), then in ascending id
/// every comment row this writes (the comment, a root's live replies, a reply's root for its
/// `reply_count`), and only then writes.
pub(crate) async fn soft_delete<C: ConnectionTrait + TransactionTrait>(
    db: &C,
    comment: &CommentRow,
) -> AppResult<bool> {
    let txn = db.begin().await?;
    // The post first. Every writer of the thread holds it too (creating a comment or a reply
    // bumps its counter first), so no reply can land under the root between our reading the
    // replies and deleting them: it committed before (and is deleted with them) or it waits and
    // then finds the root deleted. A deleted post's comments are gone already (as `find` says).
    let post = IdRow::find_by_statement(stmt(
        "SELECT id FROM posts WHERE id = $1 AND deleted_at IS NULL FOR NO KEY UPDATE",
        [comment.post_id.into()],
    ))
    .one(&txn)
    .await?;
    if post.is_none() {
        return Ok(false);
    }
    // Then the comment rows, in id order (rows are sorted before they are locked: the plan's
    // LockRows sits above its Sort): the comment, its live replies if it is a root, its root if
    // it is a reply.
    let locked = IdRow::find_by_statement(stmt(
        "SELECT id FROM comments WHERE (id = $1 OR parent_id = $1 OR id = $2) AND deleted_at IS NULL \
         ORDER BY id FOR NO KEY UPDATE",
        [comment.id.into(), comment.parent_id.into()],
    ))
    .all(&txn)
    .await?;
    if !locked.iter().any(|row| row.id == comment.id) {
        return Ok(false);
    }
    let doomed: Vec<i64> = locked.iter().map(|row| row.id).filter(|id| Some(*id) != comment.parent_id).collect();
    let deleted = doomed.len() as i64;
    txn.execute_raw(stmt("UPDATE comments SET deleted_at = now() WHERE id = ANY($1)", [doomed.clone().into()])).await?;
    if let Some(root_id) = comment.parent_id {
        txn.execute_raw(stmt(
            "UPDATE comments SET reply_count = reply_count - 1 WHERE id = $1 AND reply_count > 0",
            [root_id.into()],
        ))
        .await?;
    }
    // A deleted accepted answer is no answer: the question is resolved again only if staff
    // marked it so.
    txn.execute_raw(stmt(
        "UPDATE posts SET comment_count = GREATEST(comment_count - $2, 0), \
                          accepted_comment_id = CASE WHEN accepted_comment_id = ANY($3) THEN NULL \
                                                     ELSE accepted_comment_id END \
         WHERE id = $1",
        [comment.post_id.into(), deleted.into(), doomed.into()],
    ))
    .await?;
    txn.commit().await?;
    Ok(true)
}

/// Recounts `posts.comment_count` (live comments and replies) of every post, in id-ordered
/// chunks, each its own short transaction; `hot_score` follows, so this also rebuilds the HOT
/// ranking (`reconcile`). Returns the posts it fixed with their counts.
///
/// Each chunk locks its posts first, as every comment writer does, and counts only then (a
/// statement of its own, so its snapshot is taken after the locks): a comment committing
/// meanwhile is either counted or waits for the chunk, never lost.
pub async fn recount_post_comments<C: ConnectionTrait + TransactionTrait>(
    db: &C,
    chunk: i64,
) -> AppResult<Vec<(i64, i32)>> {
    #[derive(FromQueryResult)]
    struct Fixed {
        id: i64,
        comment_count: i32,
    }
    let mut fixed = Vec::new();
    let mut after = 0i64;
    loop {
        let txn = db.begin().await?;
        let locked = IdRow::find_by_statement(stmt(
            "SELECT id FROM posts WHERE id > $1 ORDER BY id LIMIT $2 FOR NO KEY UPDATE",
            [after.into(), chunk.into()],
        ))
        .all(&txn)
        .await?;
        let Some(last) = locked.last().map(|row| row.id) else { break };
        let ids: Vec<i64> = locked.iter().map(|row| row.id).collect();
        let rows = Fixed::find_by_statement(stmt(
            "UPDATE posts p SET comment_count = s.actual \
             FROM (SELECT t.id, count(c.id)::int AS actual FROM posts t \
                   LEFT JOIN comments c ON c.post_id = t.id AND c.deleted_at IS NULL \
                   WHERE t.id = ANY($1) GROUP BY t.id) s \
             WHERE p.id = s.id AND p.comment_count <> s.actual RETURNING p.id, p.comment_count",
            [ids.into()],
        ))
        .all(&txn)
        .await?;
        txn.commit().await?;
        fixed.extend(rows.into_iter().map(|r| (r.id, r.comment_count)));
        after = last;
    }
    Ok(fixed)
}
