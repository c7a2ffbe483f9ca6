//! Unread tracking: what each member has read of each course, and the SQL that reads and
//! moves it.
//!
//! **Storage** (migration 0014). Per (member, course) two watermarks in `unread_marks`: posts
//! with id <= `posts_read_through` are read, and comments and replies with id <=
//! `comments_read_through` are read. Per post the member opened above them, one exception in
//! `post_reads`: the post is read, and its comments up to the row's own comment mark. No row
//! is ever written per unread post. A member without a `unread_marks` row has read nothing.
//!
//! **Bounds.** A member keeps at most `UNREAD_EXCEPTIONS_PER_COURSE` exceptions per course:
//! past that the oldest posts' exceptions are folded into the watermarks (both move up past
//! them) and deleted, so the oldest unread posts age out as read. `markCourseRead` moves both
//! watermarks to the newest ids and deletes the exceptions they cover. Counts of unread posts
//! stop at `UNREAD_COUNT_CAP` (a `LIMIT` inside the count), so a course of 100,000 unread posts
//! costs what one of 1,000 does.
//!
//! **Marks never move backwards**: every write takes the (member, course) `unread_marks` row's
//! lock first and raises marks with GREATEST, so concurrent reads of one member serialize on
//! one row and the later one can only add.
//!
//! Ids are global sequences, so "read up to now" is the newest id of the table (one index
//! probe), which covers this course's newest as well. A post or comment whose transaction took
//! its id before a mark was taken and commits after it counts as read: a window of one
//! in-flight write.

use std::collections::HashMap;

use sea_orm::{ConnectionTrait, FromQueryResult, TransactionSession, TransactionTrait};

use crate::db::stmt;
use crate::error::{AppError, AppResult};

/// The most unread posts a course's count reports: the count saturates here (a client shows
/// "999+" at this value).
pub(crate) const UNREAD_COUNT_CAP: i64 = 1000;

/// The SQL condition a list of posts (the table `posts`, unaliased) adds for "unread by the
/// reader `$viewer`": not theirs, above their post mark, not opened.
pub(crate) fn unread_sql(viewer: usize) -> String {
    format!(
        "(posts.user_id <> ${viewer} AND posts.id > COALESCE((SELECT m.posts_read_through FROM unread_marks m \
           WHERE m.user_id = ${viewer} AND m.course_id = posts.course_id), 0) \
         AND NOT EXISTS (SELECT 1 FROM post_reads r WHERE r.user_id = ${viewer} AND r.post_id = posts.id))"
    )
}

/// One post's unread state for one reader.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PostUnread {
    /// Not the reader's, above their post mark and not opened.
    pub(crate) unread: bool,
    /// Live comments and replies by others above what the reader read of the post.
    pub(crate) comments: i64,
}

/// What one statement answers for one reader: the unread state of `posts`, and the unread
/// post count (saturating at `UNREAD_COUNT_CAP`) of `courses`, where the reader is staff in
/// `staff_in` (they count private posts too).
pub(crate) async fn load(
    db: &impl ConnectionTrait,
    user_id: i64,
    posts: &[i64],
    courses: &[i64],
    staff_in: &[i64],
) -> AppResult<(HashMap<i64, PostUnread>, HashMap<i64, i64>)> {
    #[derive(FromQueryResult)]
    struct Row {
        is_post: bool,
        id: i64,
        unread: bool,
        n: i64,
    }
    let rows = Row::find_by_statement(stmt(
        "WITH marks AS (SELECT course_id, posts_read_through AS pm, comments_read_through AS cm \
                        FROM unread_marks WHERE user_id = $1) \
         SELECT true AS is_post, p.id, \
                (p.user_id <> $1 AND p.id > COALESCE(m.pm, 0) AND r.post_id IS NULL) AS unread, \
                (SELECT count(*) FROM comments c WHERE c.post_id = p.id AND c.deleted_at IS NULL \
                   AND c.user_id <> $1 \
                   AND c.id > GREATEST(COALESCE(m.cm, 0), COALESCE(r.comments_read_through, 0))) AS n \
         FROM posts p LEFT JOIN marks m ON m.course_id = p.course_id \
              LEFT JOIN post_reads r ON r.user_id = $1 AND r.post_id = p.id \
         WHERE p.id = ANY($2) \
         UNION ALL \
         SELECT false, k.id, false, \
                (SELECT count(*) FROM (SELECT 1 FROM posts p WHERE p.course_id = k.id AND p.deleted_at IS NULL \
                   AND (NOT p.private OR k.id = ANY($4)) AND p.user_id <> $1 AND p.id > COALESCE(m.pm, 0) \
                   AND NOT EXISTS (SELECT 1 FROM post_reads r WHERE r.user_id = $1 AND r.post_id = p.id) \
                   LIMIT $5) capped) \
         FROM unnest($3::bigint[]) AS k(id) LEFT JOIN marks m ON m.course_id = k.id",
        [
            user_id.into(),
            posts.to_vec().into(),
            courses.to_vec().into(),
            staff_in.to_vec().into(),
            UNREAD_COUNT_CAP.into(),
        ],
    ))
    .all(db)
    .await?;
    let (mut by_post, mut by_course) = (HashMap::new(), HashMap::new());
    for row in rows {
        if row.is_post {
            by_post.insert(row.id, PostUnread { unread: row.unread, comments: row.n });
        } else {
            by_course.insert(row.id, row.n);
        }
    }
    Ok((by_post, by_course))
}

#[derive(FromQueryResult)]
struct Marks {
    posts_read_through: i64,
    comments_read_through: i64,
}

/// Takes the (member, course) marks row's lock (creating it: nothing read), and returns it.
/// Every write of a member's read state in a course starts here, so they serialize.
async fn lock_marks(txn: &impl ConnectionTrait, user_id: i64, course_id: i64) -> AppResult<Marks> {
    Marks::find_by_statement(stmt(
        "INSERT INTO unread_marks (user_id, course_id) VALUES ($1, $2) \
         ON CONFLICT (user_id, course_id) DO UPDATE SET posts_read_through = unread_marks.posts_read_through \
         RETURNING posts_read_through, comments_read_through",
        [user_id.into(), course_id.into()],
    ))
    .one(txn)
    .await?
    .ok_or_else(|| AppError::Internal("INSERT … RETURNING returned no row".into()))
}

/// "Opening a post": the post and every comment and reply written so far are read by
/// `user_id`. Writes nothing when the watermarks already cover it; else its exception (the
/// comment mark only ever rises), then keeps the member's exceptions of the course within
/// `max_exceptions`. One transaction.
pub(crate) async fn mark_post_read<C: ConnectionTrait + TransactionTrait>(
    db: &C,
    user_id: i64,
    course_id: i64,
    post_id: i64,
    max_exceptions: i64,
) -> AppResult<()> {
    #[derive(FromQueryResult)]
    struct Upserted {
        inserted: bool,
    }
    let txn = db.begin().await?;
    let marks = lock_marks(&txn, user_id, course_id).await?;
    let upserted = Upserted::find_by_statement(stmt(
        "INSERT INTO post_reads (user_id, post_id, course_id, comments_read_through) \
         SELECT $1, $2, $3, now_mark.id FROM (SELECT COALESCE(max(id), 0) AS id FROM comments) now_mark \
         WHERE NOT ($2 <= $4::bigint AND now_mark.id <= $5::bigint) \
         ON CONFLICT (user_id, post_id) DO UPDATE \
           SET comments_read_through = GREATEST(post_reads.comments_read_through, EXCLUDED.comments_read_through) \
         RETURNING (xmax = 0) AS inserted",
        [
            user_id.into(),
            post_id.into(),
            course_id.into(),
            marks.posts_read_through.into(),
            marks.comments_read_through.into(),
        ],
    ))
    .one(&txn)
    .await?;
    if upserted.is_some_and(|u| u.inserted) {
        // One more exception: fold the oldest into the watermarks when over the bound.
        txn.execute_raw(stmt(
            "WITH over AS ( \
               SELECT post_id FROM post_reads WHERE user_id = $1 AND course_id = $2 ORDER BY post_id \
               LIMIT GREATEST(0, (SELECT count(*) FROM post_reads WHERE user_id = $1 AND course_id = $2) - $3)), \
             dropped AS ( \
               DELETE FROM post_reads r USING over WHERE r.user_id = $1 AND r.post_id = over.post_id \
               RETURNING r.post_id, r.comments_read_through) \
             UPDATE unread_marks \
               SET posts_read_through = GREATEST(posts_read_through, (SELECT max(post_id) FROM dropped)), \
                   comments_read_through = GREATEST(comments_read_through, (SELECT max(comments_read_through) FROM dropped)) \
             WHERE user_id = $1 AND course_id = $2 AND EXISTS (SELECT 1 FROM dropped)",
            [user_id.into(), course_id.into(), max_exceptions.into()],
        ))
        .await?;
    }
    txn.commit().await?;
    Ok(())
}

/// Everything in the course read by `user_id` up to now: both watermarks raised to the newest
/// post and comment ids, then the exceptions they cover deleted (all of them, unless a
/// concurrent read recorded a comment newer than this mark). One transaction, costing the
/// member's exceptions in the course (at most the bound) and nothing per post.
pub(crate) async fn mark_course_read<C: ConnectionTrait + TransactionTrait>(
    db: &C,
    user_id: i64,
    course_id: i64,
) -> AppResult<()> {
    let txn = db.begin().await?;
    lock_marks(&txn, user_id, course_id).await?;
    let marks = Marks::find_by_statement(stmt(
        "UPDATE unread_marks SET \
           posts_read_through = GREATEST(posts_read_through, (SELECT COALESCE(max(id), 0) FROM posts)), \
           comments_read_through = GREATEST(comments_read_through, (SELECT COALESCE(max(id), 0) FROM comments)) \
         WHERE user_id = $1 AND course_id = $2 RETURNING posts_read_through, comments_read_through",
        [user_id.into(), course_id.into()],
    ))
    .one(&txn)
    .await?
    .ok_or_else(|| AppError::Internal("the locked marks row vanished".into()))?;
    txn.execute_raw(stmt(
        "DELETE FROM post_reads WHERE user_id = $1 AND course_id = $2 \
         AND post_id <= $3 AND comments_read_through <= $4",
        [user_id.into(), course_id.into(), marks.posts_read_through.into(), marks.comments_read_through.into()],
    ))
    .await?;
    txn.commit().await?;
    Ok(())
}
