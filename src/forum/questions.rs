//! Answers, endorsements, pins and tags: the writes staff and askers make on posts and
//! comments beyond their text, each one statement (or one short transaction) that checks in
//! SQL what it must not break (the comment is a live top-level comment of this question, the
//! tag is this course's). Who may make them is `graphql`'s check, made before.

use std::collections::HashMap;

use sea_orm::{ConnectionTrait, FromQueryResult, TransactionSession, TransactionTrait};

use crate::db::stmt;
use crate::error::{AppError, AppResult};
use crate::forum::audience::Anonymity;
use crate::forum::comments::CommentRow;
use crate::forum::posts::{self, PostRow};

/// Most tags a post carries.
pub(crate) const MAX_TAGS_PER_POST: usize = 3;
/// Most tags a course defines.
pub(crate) const MAX_TAGS_PER_COURSE: i64 = 50;
pub(crate) const MAX_TAG_CHARS: usize = 40;

#[derive(Clone, Debug, FromQueryResult)]
pub(crate) struct TagRow {
    pub id: i64,
    pub course_id: i64,
    pub name: String,
}

/// Checks a list of tag ids for a post: at most three, no repeats.
pub(crate) fn check_tag_list(tag_ids: &[i64]) -> AppResult<()> {
    if tag_ids.len() > MAX_TAGS_PER_POST {
        return Err(AppError::bad_input(format!("a post carries at most {MAX_TAGS_PER_POST} tags")));
    }
    let mut seen = tag_ids.to_vec();
    seen.sort_unstable();
    seen.dedup();
    if seen.len() != tag_ids.len() {
        return Err(AppError::bad_input("a tag is listed twice"));
    }
    Ok(())
}

/// Sets a post's tags to exactly `tag_ids` (replacing any), inside the caller's transaction.
/// A tag that is not the course's (or no longer exists) is NOT_FOUND, and nothing changes.
pub(crate) async fn set_tags(
    txn: &impl ConnectionTrait,
    post_id: i64,
    course_id: i64,
    tag_ids: &[i64],
) -> AppResult<()> {
    check_tag_list(tag_ids)?;
    #[derive(FromQueryResult)]
    struct Count {
        n: i64,
    }
    // FOR KEY SHARE: a tag deleted meanwhile waits for this transaction or is already gone.
    let found = Count::find_by_statement(stmt(
        "SELECT count(*) AS n FROM (SELECT id FROM course_tags WHERE id = ANY($1) AND course_id = $2 FOR KEY SHARE) t",
        [tag_ids.to_vec().into(), course_id.into()],
    ))
    .one(txn)
    .await?
    .map_or(0, |c| c.n);
    if found != tag_ids.len() as i64 {
        return Err(AppError::not_found("tag"));
    }
    txn.execute_raw(stmt(
        "WITH gone AS (DELETE FROM post_tags WHERE post_id = $1 AND tag_id <> ALL($2)) \
         INSERT INTO post_tags (post_id, tag_id) SELECT $1, unnest($2::bigint[]) ON CONFLICT DO NOTHING",
        [post_id.into(), tag_ids.to_vec().into()],
    ))
    .await?;
    Ok(())
}

/// The tags of each post, by name (a post without tags is absent).
pub(crate) async fn tags_of_posts(db: &impl ConnectionTrait, post_ids: &[i64]) -> AppResult<HashMap<i64, Vec<TagRow>>> {
    #[derive(FromQueryResult)]
    struct Tagged {
        post_id: i64,
        id: i64,
        course_id: i64,
        name: String,
    }
    let rows = Tagged::find_by_statement(stmt(
        "SELECT pt.post_id, t.id, t.course_id, t.name FROM post_tags pt JOIN course_tags t ON t.id = pt.tag_id \
         WHERE pt.post_id = ANY($1) ORDER BY lower(t.name), t.id",
        [post_ids.to_vec().into()],
    ))
    .all(db)
    .await?;
    let mut by_post: HashMap<i64, Vec<TagRow>> = HashMap::new();
    for row in rows {
        by_post.entry(row.post_id).or_default().push(TagRow { id: row.id, course_id: row.course_id, name: row.name });
    }
    Ok(by_post)
}

/// A course's tags, by name.
pub(crate) async fn tags_of_course(db: &impl ConnectionTrait, course_id: i64) -> AppResult<Vec<TagRow>> {
    Ok(TagRow::find_by_statement(stmt(
        "SELECT id, course_id, name FROM course_tags WHERE course_id = $1 ORDER BY lower(name), id",
        [course_id.into()],
    ))
    .all(db)
    .await?)
}

pub(crate) async fn find_tag(db: &impl ConnectionTrait, tag_id: i64) -> AppResult<Option<TagRow>> {
    Ok(TagRow::find_by_statement(stmt("SELECT id, course_id, name FROM course_tags WHERE id = $1", [tag_id.into()]))
        .one(db)
        .await?)
}

/// Creates a tag; CONFLICT when the course has one of that name (case aside), BAD_USER_INPUT
/// past `MAX_TAGS_PER_COURSE`.
pub(crate) async fn create_tag(db: &impl ConnectionTrait, course_id: i64, name: &str) -> AppResult<TagRow> {
    #[derive(FromQueryResult)]
    struct Outcome {
        id: Option<i64>,
        at_limit: bool,
    }
    let outcome = Outcome::find_by_statement(stmt(
        "WITH counted AS (SELECT count(*) >= $3 AS at_limit FROM course_tags WHERE course_id = $1), \
              made AS (INSERT INTO course_tags (course_id, name) SELECT $1, $2 FROM counted WHERE NOT at_limit \
                       ON CONFLICT (course_id, lower(name)) DO NOTHING RETURNING id) \
         SELECT (SELECT id FROM made) AS id, (SELECT at_limit FROM counted) AS at_limit",
        [course_id.into(), name.into(), MAX_TAGS_PER_COURSE.into()],
    ))
    .one(db)
    .await?
    .ok_or_else(|| AppError::Internal("a tag insert returned no row".into()))?;
    match outcome {
        Outcome { id: Some(id), .. } => Ok(TagRow { id, course_id, name: name.to_owned() }),
        Outcome { at_limit: true, .. } => {
            Err(AppError::bad_input(format!("a course has at most {MAX_TAGS_PER_COURSE} tags")))
        }
        Outcome { .. } => Err(AppError::Conflict("the course has a tag of that name already".into())),
    }
}

/// Renames a tag; every post shows the new name at once (posts refer to the tag by id).
pub(crate) async fn rename_tag(db: &impl ConnectionTrait, tag: &TagRow, name: &str) -> AppResult<TagRow> {
    let taken = TagRow::find_by_statement(stmt(
        "SELECT id, course_id, name FROM course_tags WHERE course_id = $1 AND lower(name) = lower($2) AND id <> $3",
        [tag.course_id.into(), name.into(), tag.id.into()],
    ))
    .one(db)
    .await?;
    if taken.is_some() {
        return Err(AppError::Conflict("the course has a tag of that name already".into()));
    }
    let renamed = TagRow::find_by_statement(stmt(
        "UPDATE course_tags SET name = $2 WHERE id = $1 RETURNING id, course_id, name",
        [tag.id.into(), name.into()],
    ))
    .one(db)
    .await
    .map_err(AppError::from);
    match renamed {
        Ok(row) => row.ok_or_else(|| AppError::not_found("tag")),
        // 23505: unique_violation, a tag of that name made meanwhile.
        Err(err) if err.sqlstate().as_deref() == Some("23505") => {
            Err(AppError::Conflict("the course has a tag of that name already".into()))
        }
        Err(err) => Err(err),
    }
}

/// Deletes a tag; the posts that carried it lose it (ON DELETE CASCADE). Returns the posts
/// that carried it, so their cached copies can be told.
pub(crate) async fn delete_tag(db: &impl ConnectionTrait, tag_id: i64) -> AppResult<Option<Vec<i64>>> {
    #[derive(FromQueryResult)]
    struct Deleted {
        posts: Option<Vec<i64>>,
    }
    let row = Deleted::find_by_statement(stmt(
        "WITH tagged AS (SELECT array_agg(post_id) AS posts FROM post_tags WHERE tag_id = $1), \
              gone AS (DELETE FROM course_tags WHERE id = $1 RETURNING id) \
         SELECT (SELECT posts FROM tagged) AS posts FROM gone",
        [tag_id.into()],
    ))
    .one(db)
    .await?;
    Ok(row.map(|r| r.posts.unwrap_or_default()))
}

/// Runs one `UPDATE posts … RETURNING` on a live post; NOT_FOUND when no row matched.
async fn update_post(
    db: &impl ConnectionTrait,
    set_and_where: &str,
    values: Vec<sea_orm::Value>,
) -> AppResult<PostRow> {
    let sql = format!("UPDATE posts SET {set_and_where} AND deleted_at IS NULL RETURNING {}", posts::POST_COLUMNS);
    PostRow::find_by_statement(stmt(&sql, values)).one(db).await?.ok_or_else(|| AppError::not_found("post"))
}

/// Accepts `comment_id` as the answer of question `post_id` (or clears it with `None`). The
/// comment must be a live top-level comment of this post, checked in the same statement;
/// otherwise NOT_FOUND and nothing changes.
pub(crate) async fn accept_answer(
    db: &impl ConnectionTrait,
    post_id: i64,
    comment_id: Option<i64>,
) -> AppResult<PostRow> {
    let Some(comment_id) = comment_id else {
        return update_post(db, "accepted_comment_id = NULL WHERE id = $1 AND kind = 'question'", vec![post_id.into()])
            .await;
    };
    update_post(
        db,
        "accepted_comment_id = $2 WHERE id = $1 AND kind = 'question' \
         AND EXISTS (SELECT 1 FROM comments c WHERE c.id = $2 AND c.post_id = $1 AND c.parent_id IS NULL \
                     AND c.deleted_at IS NULL)",
        vec![post_id.into(), comment_id.into()],
    )
    .await
    .map_err(|_| AppError::not_found("comment"))
}

/// Staff mark a question resolved (or not). Clearing leaves an accepted answer in place: the
/// question stays resolved while it has one.
pub(crate) async fn mark_resolved(db: &impl ConnectionTrait, post_id: i64, resolved: bool) -> AppResult<PostRow> {
    let set = if resolved { "resolved_at = COALESCE(resolved_at, now())" } else { "resolved_at = NULL" };
    update_post(db, &format!("{set} WHERE id = $1 AND kind = 'question'"), vec![post_id.into()]).await
}

/// Staff endorse (or withdraw their endorsement of) a post. Endorsing again keeps the first
/// endorsement (who and when).
pub(crate) async fn endorse_post(db: &impl ConnectionTrait, post_id: i64, by: Option<i64>) -> AppResult<PostRow> {
    match by {
        Some(by) => {
            update_post(
                db,
                "endorsed_by = COALESCE(endorsed_by, $2), endorsed_at = COALESCE(endorsed_at, now()) WHERE id = $1",
                vec![post_id.into(), by.into()],
            )
            .await
        }
        None => update_post(db, "endorsed_by = NULL, endorsed_at = NULL WHERE id = $1", vec![post_id.into()]).await,
    }
}

/// As `endorse_post`, for a comment or a reply (`comment` as read by the access check).
pub(crate) async fn endorse_comment(db: &impl ConnectionTrait, comment: &CommentRow, by: Option<i64>) -> AppResult<()> {
    let result = match by {
        Some(by) => {
            db.execute_raw(stmt(
                "UPDATE comments SET endorsed_by = COALESCE(endorsed_by, $2), endorsed_at = COALESCE(endorsed_at, now()) \
                 WHERE id = $1 AND deleted_at IS NULL",
                [comment.id.into(), by.into()],
            ))
            .await?
        }
        None => {
            db.execute_raw(stmt(
                "UPDATE comments SET endorsed_by = NULL, endorsed_at = NULL WHERE id = $1 AND deleted_at IS NULL",
                [comment.id.into()],
            ))
            .await?
        }
    };
    if result.rows_affected() == 1 { Ok(()) } else { Err(AppError::not_found("comment")) }
}

/// Pins or unpins a post; BAD_USER_INPUT past `posts::MAX_PINNED_PER_COURSE` pins in its course,
/// NOT_FOUND once the post is deleted. Pinning again keeps the first pin's time.
pub(crate) async fn pin<C: ConnectionTrait + TransactionTrait>(
    db: &C,
    post: &PostRow,
    pinned: bool,
) -> AppResult<PostRow> {
    if !pinned {
        return update_post(db, "pinned_at = NULL WHERE id = $1", vec![post.id.into()]).await;
    }
    let txn = db.begin().await?;
    // One pin at a time per course (its row is the lock): two pins racing for the last place
    // do not both count the same free one.
    txn.execute_raw(stmt("SELECT 1 FROM courses WHERE id = $1 FOR NO KEY UPDATE", [post.course_id.into()])).await?;
    let pinned = update_post(
        &txn,
        "pinned_at = COALESCE(pinned_at, now()) WHERE id = $1 \
         AND (pinned_at IS NOT NULL OR (SELECT count(*) FROM posts o WHERE o.course_id = posts.course_id \
              AND o.pinned_at IS NOT NULL AND o.deleted_at IS NULL) < $2)",
        vec![post.id.into(), posts::MAX_PINNED_PER_COURSE.into()],
    )
    .await;
    match pinned {
        Ok(row) => {
            txn.commit().await?;
            Ok(row)
        }
        Err(AppError::NotFound(_)) if posts::find(&txn, post.id).await?.is_some() => Err(AppError::bad_input(format!(
            "a course pins at most {} posts: unpin one first",
            posts::MAX_PINNED_PER_COURSE
        ))),
        Err(err) => Err(err),
    }
}

/// Makes a private question public, keeping its anonymity, and writes its `feed_outbox` row
/// (in the same statement) so it reaches timelines as a new post would.
pub(crate) async fn make_public(db: &impl ConnectionTrait, post_id: i64) -> AppResult<PostRow> {
    let sql = format!(
        "WITH post AS (UPDATE posts SET private = false WHERE id = $1 AND private AND deleted_at IS NULL \
                       RETURNING {cols}), \
              outbox AS (INSERT INTO feed_outbox (post_id, course_id) SELECT id, course_id FROM post) \
         SELECT {cols} FROM post",
        cols = posts::POST_COLUMNS
    );
    match PostRow::find_by_statement(stmt(&sql, [post_id.into()])).one(db).await? {
        Some(row) => Ok(row),
        // Public already (or gone): the post as it is, or NOT_FOUND.
        None => posts::find(db, post_id).await?.ok_or_else(|| AppError::not_found("post")),
    }
}

/// Which of `post_ids` have a live comment or reply by someone other than their author. The
/// author writing there under the other face (signed under their anonymous post, or
/// anonymously under their signed one) counts as someone else: readers who cannot tell it is
/// the author must not learn it from `answered`.
pub(crate) async fn answered(db: &impl ConnectionTrait, post_ids: &[i64]) -> AppResult<Vec<i64>> {
    #[derive(FromQueryResult)]
    struct Id {
        id: i64,
    }
    let rows = Id::find_by_statement(stmt(
        "SELECT p.id FROM posts p WHERE p.id = ANY($1) AND EXISTS \
           (SELECT 1 FROM comments c WHERE c.post_id = p.id AND c.deleted_at IS NULL \
              AND (c.user_id <> p.user_id OR (c.anonymous_to IS NULL) <> (p.anonymous_to IS NULL)))",
        [post_ids.to_vec().into()],
    ))
    .all(db)
    .await?;
    Ok(rows.into_iter().map(|r| r.id).collect())
}

/// Sets whom a course's members may hide from when they write anonymously from now on.
pub(crate) async fn set_anonymity(db: &impl ConnectionTrait, course_id: i64, anonymity: Anonymity) -> AppResult<()> {
    let result = db
        .execute_raw(stmt(
            "UPDATE courses SET anonymity = $2 WHERE id = $1",
            [course_id.into(), anonymity.as_str().into()],
        ))
        .await?;
    if result.rows_affected() == 1 { Ok(()) } else { Err(AppError::not_found("course")) }
}
