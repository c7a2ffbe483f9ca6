//! Announcements: one row per announcement (`course_announcements`, migration 0012), merged
//! into every member's notifications when they are read, never copied per member: the home
//! feed's celebrity pattern, so announcing to a course of 10,000 costs the writer one row.
//!
//! - **Written with the post.** `announce` runs inside the transaction that creates the
//!   announcement's post; the row's id comes from the notifications' sequence, so announcements
//!   and a member's own notifications share one order (the page's keyset) and one read
//!   watermark (`notification_reads.read_up_to`).
//! - **Who sees it.** A member of the course, as they are now, who joined the course before it
//!   was written; never its author. Leaving the course hides it (rejoining starts afresh from
//!   the new `joined_at`).
//! - **Withdrawn.** Deleting the post deletes the row (`withdraw`); readers join the post, so a
//!   deleted one is never shown or counted meanwhile.
//! - **Delivered after commit.** One message per course on the live channel
//!   (`live::Publisher::course_notifications`); each instance hands it to the open
//!   `notifications` streams of that course's members, which read it back with their own
//!   access.
//!
//! The readers below are SQL fragments that `notifications` merges with the user's own rows;
//! each takes the placeholders of the statement it is spliced into.

use sea_orm::{ConnectionTrait, FromQueryResult};

use crate::db::stmt;
use crate::error::{AppError, AppResult};
use crate::live::Publisher;

/// An announcement just written, to publish once its transaction committed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromQueryResult)]
pub(crate) struct Announced {
    /// Its notification id (shared with the notifications' order).
    pub id: i64,
    pub course_id: i64,
}

impl Announced {
    /// Tells the open `notifications` streams of the course's members, on every instance.
    /// Call after the commit.
    pub(crate) async fn publish(self, publisher: &Publisher) {
        publisher.course_notifications(self.course_id, Some(self.id)).await;
    }
}

/// Writes the announcement of `post_id` to every member of `course_id` as ONE row, inside the
/// caller's transaction (the one that writes the post). The caller has checked that the author
/// may announce.
pub(crate) async fn announce(
    txn: &impl ConnectionTrait,
    course_id: i64,
    post_id: i64,
    author_id: i64,
) -> AppResult<Announced> {
    Announced::find_by_statement(stmt(
        "INSERT INTO course_announcements (course_id, post_id, author_id) VALUES ($1, $2, $3) \
         RETURNING id, course_id",
        [course_id.into(), post_id.into(), author_id.into()],
    ))
    .one(txn)
    .await?
    .ok_or_else(|| AppError::Internal("an announcement's insert returned no row".into()))
}

#[derive(FromQueryResult)]
struct Withdrawn {
    course_id: i64,
}

/// Deletes the announcement of a post, if it was one. Returns its course (whose members'
/// unread counts moved).
pub(crate) async fn withdraw(db: &impl ConnectionTrait, post_id: i64) -> AppResult<Option<i64>> {
    let row = Withdrawn::find_by_statement(stmt(
        "DELETE FROM course_announcements WHERE post_id = $1 RETURNING course_id",
        [post_id.into()],
    ))
    .one(db)
    .await?;
    Ok(row.map(|r| r.course_id))
}

/// Which announcements of a course (`a`) a member (`m`, their `course_members` row) sees: written
/// since they joined, not by them. `user` is the member's placeholder.
fn seen_by(user: &str) -> String {
    format!("a.created_at >= m.joined_at AND a.author_id <> {user}")
}

/// The columns of `NotificationRow` (but `read`) for an announcement `a`.
const COLUMNS: &str = "a.id, 'announcement'::text AS kind, a.course_id, a.author_id AS actor_id, a.post_id, \
     NULL::bigint AS comment_id, 0 AS milestone, a.created_at";

/// Per course of the member that is in `courses`, its newest `limit` visible announcements
/// older than `before`: one index range per course, whatever the course's size.
pub(crate) fn page_of_member(user: &str, courses: &str, before: &str, limit: &str) -> String {
    let seen = seen_by(user);
    format!(
        "SELECT l.* FROM course_members m CROSS JOIN LATERAL ( \
           SELECT {COLUMNS} FROM course_announcements a \
           JOIN posts p ON p.id = a.post_id AND p.deleted_at IS NULL \
           WHERE a.course_id = m.course_id AND a.id < {before} AND {seen} \
           ORDER BY a.id DESC LIMIT {limit}) l \
         WHERE m.user_id = {user} AND m.course_id = ANY({courses})"
    )
}

/// The announcement `id`, if the member sees it.
pub(crate) fn one_for_member(user: &str, courses: &str, id: &str) -> String {
    let seen = seen_by(user);
    format!(
        "SELECT {COLUMNS} FROM course_announcements a \
         JOIN course_members m ON m.course_id = a.course_id AND m.user_id = {user} \
         JOIN posts p ON p.id = a.post_id AND p.deleted_at IS NULL \
         WHERE a.id = {id} AND a.course_id = ANY({courses}) AND {seen}"
    )
}

/// How many announcements the member sees above `read_up_to` (an SQL expression).
pub(crate) fn unread_of_member(user: &str, courses: &str, read_up_to: &str) -> String {
    let seen = seen_by(user);
    format!(
        "SELECT count(*) FROM course_members m \
         JOIN course_announcements a ON a.course_id = m.course_id AND a.id > {read_up_to} AND {seen} \
         JOIN posts p ON p.id = a.post_id AND p.deleted_at IS NULL \
         WHERE m.user_id = {user} AND m.course_id = ANY({courses})"
    )
}

/// The announcement `id` as a one-column row, if the member may mark it read: one of a course
/// they are in, that they see (deleted or not, like their own notifications).
pub(crate) fn id_for_member(user: &str, id: &str) -> String {
    let seen = seen_by(user);
    format!(
        "SELECT a.id FROM course_announcements a \
         JOIN course_members m ON m.course_id = a.course_id AND m.user_id = {user} \
         WHERE a.id = {id} AND {seen}"
    )
}
