//! Notifications: what a user hears about (a reply to their post or comment, an `@handle`
//! mention of them, something of theirs passing 10, 100 or 1,000 likes), stored in
//! PostgreSQL and pushed live.
//!
//! - **Written with the cause.** `record` runs inside the transaction that writes the post,
//!   comment or reply (or the edit that adds a mention), so a notification exists exactly when
//!   its cause committed. The unique index on (recipient, cause) makes every second write of
//!   the same cause a no-op: a retried write, an edit saved twice with the same mention.
//! - **Like milestones** are written by a trigger (migration 0009) in whichever transaction
//!   raises the count (the worker's batch, sync, recount), once per threshold; the after-commit
//!   step of likes (`likes::committed`) finds them by the update's `like_version` and pushes them.
//! - **Delivered after commit.** The writer publishes the new ids on the live channel
//!   (`live::Publisher::notifications`); every instance's relay hands them to that user's
//!   `notifications` subscriptions.
//! - **Who.** A mention of someone who is not a member of the course, or of the writer, creates
//!   nothing; neither does a reply to yourself. One cause notifies a person once: a reply that
//!   also mentions its recipient is a reply.
//! - **Withdrawn.** Deleting a post or a comment deletes the notifications it caused
//!   (`withdraw_*`); readers also join the cause, so a deleted one is never shown meanwhile.
//! - **Access.** Readers pass the viewer's courses: a notification from a course the user has
//!   left is neither listed nor counted (and comes back if they rejoin).
//! - **Announcements** (`announcements`) reach every member of a course without a row per
//!   member: one row per announcement, merged into each member's list, count and live stream
//!   when read, in the same id order and under the same read watermark as their own rows.
//! - **Bounded.** Each user keeps their newest `NOTIFICATIONS_PER_USER` (older ones are deleted
//!   as new ones arrive), a text mentions at most `MAX_MENTIONS` people, and every write that
//!   can notify is under the per-user write limits.

pub(crate) mod announcements;

use sea_orm::{ConnectionTrait, FromQueryResult};

use crate::db::stmt;
use crate::error::{AppError, AppResult};

/// Most distinct people one post (title and body together), comment or reply may mention.
pub(crate) const MAX_MENTIONS: usize = 10;

/// The `@handle`s a text mentions, lowercased, distinct, in order of first appearance. A
/// mention is `@` not preceded by a handle character (so `a@b.org` is not one), then 2 to 32
/// handle characters not followed by another. One pass over the text, and a hash set for the
/// distinct ones: linear in the text.
pub(crate) fn mentions(text: &str) -> Vec<String> {
    let mut distinct = Distinct::default();
    for handle in MentionScan::new(text) {
        distinct.add(handle);
    }
    distinct.in_order
}

/// The mentions of `texts` taken together, refused with BAD_USER_INPUT past `MAX_MENTIONS`
/// (before anything is written). The scan stops at the first mention past the limit, so a
/// refusal costs the prefix of the text read up to it, and the whole check is linear.
pub(crate) fn checked_mentions(texts: &[&str]) -> AppResult<Vec<String>> {
    distinct_mentions(texts, MAX_MENTIONS).map_err(|_| {
        AppError::bad_input(format!("a text may mention at most {MAX_MENTIONS} people; this one mentions more"))
    })
}

/// The distinct mentions of `texts`, or `Err(bytes read)` as soon as more than `max` were found.
fn distinct_mentions(texts: &[&str], max: usize) -> Result<Vec<String>, usize> {
    let mut distinct = Distinct::default();
    let mut read = 0;
    for text in texts {
        let mut scan = MentionScan::new(text);
        while let Some(handle) = scan.next() {
            distinct.add(handle);
            if distinct.in_order.len() > max {
                return Err(read + scan.at);
            }
        }
        read += text.len();
    }
    Ok(distinct.in_order)
}

/// Lowercased handles, each kept once, in order of first appearance (O(1) per handle).
#[derive(Default)]
struct Distinct {
    seen: std::collections::HashSet<String>,
    in_order: Vec<String>,
}

impl Distinct {
    fn add(&mut self, handle: &str) {
        let handle = handle.to_ascii_lowercase();
        if !self.seen.contains(&handle) {
            self.seen.insert(handle.clone());
            self.in_order.push(handle);
        }
    }
}

/// Every mention of a text in order, repeats included. It reads bytes: `@` and the handle
/// characters are ASCII, and no byte of a multi-byte UTF-8 character is ASCII, so a byte
/// before or after a handle is a handle character exactly when the character there is. Each
/// byte is looked at a bounded number of times.
struct MentionScan<'a> {
    text: &'a str,
    /// The next byte to read.
    at: usize,
}

impl<'a> MentionScan<'a> {
    fn new(text: &'a str) -> Self {
        Self { text, at: 0 }
    }
}

fn is_handle_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

impl<'a> Iterator for MentionScan<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let bytes = self.text.as_bytes();
        while self.at < bytes.len() {
            let i = self.at;
            if bytes[i] == b'@' && (i == 0 || !is_handle_byte(bytes[i - 1])) {
                let start = i + 1;
                let mut end = start;
                while end < bytes.len() && is_handle_byte(bytes[end]) {
                    end += 1;
                }
                self.at = end.max(i + 1);
                if (2..=32).contains(&(end - start)) {
                    // ASCII bounds, so a char boundary.
                    return Some(&self.text[start..end]);
                }
            } else {
                self.at += 1;
            }
        }
        None
    }
}

/// What a notification is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cause {
    pub course_id: i64,
    pub post_id: i64,
    /// The comment or reply; None for a post.
    pub comment_id: Option<i64>,
    /// Who wrote it (never notified by it).
    pub actor_id: i64,
    /// Whom it answers: the post's author for a top-level comment, the answered author for a
    /// reply, None for a post.
    pub answers: Option<i64>,
}

impl Cause {
    /// A post: it can only mention.
    pub(crate) fn post(row: &crate::forum::posts::PostRow) -> Self {
        Self { course_id: row.course_id, post_id: row.id, comment_id: None, actor_id: row.user_id, answers: None }
    }

    /// A comment or reply, answering `answers` (the post's author, or the answered author).
    pub(crate) fn comment(row: &crate::forum::comments::CommentRow, answers: i64) -> Self {
        Self {
            course_id: row.course_id,
            post_id: row.post_id,
            comment_id: Some(row.id),
            actor_id: row.user_id,
            answers: Some(answers),
        }
    }
}

/// One notification just written: its id and recipient.
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromQueryResult)]
pub(crate) struct Notified {
    pub id: i64,
    pub recipient_id: i64,
}

/// Writes the notifications of `cause` (a reply to `answers`, a mention of each of `handles`
/// who is a member of the course and may read the post: of a private one, its author and
/// staff only) in ONE statement, inside the caller's transaction, and trims
/// each recipient to their newest `kept`. Returns the rows written (none for a cause already
/// notified).
pub(crate) async fn record(
    txn: &impl ConnectionTrait,
    cause: Cause,
    handles: &[String],
    kept: i64,
) -> AppResult<Vec<Notified>> {
    if cause.answers.is_none() && handles.is_empty() {
        return Ok(Vec::new());
    }
    // The trim cannot see the row inserted by its own statement; keeping `kept - 1` older rows
    // next to the new one keeps `kept`. Each recipient gets at most one row per statement.
    let sql = "WITH candidates AS ( \
                 SELECT $5::bigint AS recipient_id, 'reply' AS kind, 0 AS precedence WHERE $5::bigint IS NOT NULL \
                 UNION ALL \
                 SELECT u.id, 'mention', 1 FROM users u WHERE u.handle = ANY($6::text[])), \
               chosen AS ( \
                 SELECT DISTINCT ON (c.recipient_id) c.recipient_id, c.kind FROM candidates c \
                 JOIN course_members m ON m.course_id = $1 AND m.user_id = c.recipient_id \
                 JOIN posts p ON p.id = $2 \
                 WHERE c.recipient_id <> $4 \
                   AND (NOT p.private OR m.role = 'instructor' OR c.recipient_id = p.user_id) \
                 ORDER BY c.recipient_id, c.precedence), \
               inserted AS ( \
                 INSERT INTO notifications (recipient_id, course_id, kind, actor_id, post_id, comment_id) \
                 SELECT recipient_id, $1, kind, $4, $2, $3 FROM chosen \
                 ON CONFLICT DO NOTHING \
                 RETURNING id, recipient_id), \
               trimmed AS ( \
                 DELETE FROM notifications n USING inserted i \
                 WHERE n.recipient_id = i.recipient_id AND n.id <= ( \
                   SELECT x.id FROM notifications x WHERE x.recipient_id = i.recipient_id \
                   ORDER BY x.id DESC OFFSET $7 - 1 LIMIT 1)) \
               SELECT id, recipient_id FROM inserted ORDER BY id";
    Ok(Notified::find_by_statement(stmt(
        sql,
        [
            cause.course_id.into(),
            cause.post_id.into(),
            cause.comment_id.into(),
            cause.actor_id.into(),
            cause.answers.into(),
            handles.to_vec().into(),
            kept.into(),
        ],
    ))
    .all(txn)
    .await?)
}

#[derive(FromQueryResult)]
struct Recipient {
    recipient_id: i64,
}

/// Deletes every notification a post caused, its comments' and replies' included. Returns
/// their recipients (to tell them their unread count changed).
pub(crate) async fn withdraw_post(db: &impl ConnectionTrait, post_id: i64) -> AppResult<Vec<i64>> {
    let rows = Recipient::find_by_statement(stmt(
        "DELETE FROM notifications WHERE post_id = $1 RETURNING recipient_id",
        [post_id.into()],
    ))
    .all(db)
    .await?;
    Ok(distinct(rows))
}

/// Deletes every notification a comment or reply caused, and those of the replies under a
/// comment (deleted with it). Returns their recipients.
pub(crate) async fn withdraw_comment(db: &impl ConnectionTrait, comment_id: i64) -> AppResult<Vec<i64>> {
    let rows = Recipient::find_by_statement(stmt(
        "DELETE FROM notifications WHERE comment_id IN (SELECT id FROM comments WHERE id = $1 OR parent_id = $1) \
         RETURNING recipient_id",
        [comment_id.into()],
    ))
    .all(db)
    .await?;
    Ok(distinct(rows))
}

fn distinct(rows: Vec<Recipient>) -> Vec<i64> {
    let mut ids: Vec<i64> = rows.into_iter().map(|r| r.recipient_id).collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// A notification as its recipient sees it: one of their own rows, or an announcement of one of
/// their courses (`kind` "announcement", `actor_id` its author, no comment).
#[derive(Clone, Debug, FromQueryResult)]
pub(crate) struct NotificationRow {
    pub id: i64,
    pub kind: String,
    pub course_id: i64,
    pub actor_id: Option<i64>,
    pub post_id: i64,
    pub comment_id: Option<i64>,
    pub milestone: i32,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub read: bool,
}

/// The visible notifications of a user: theirs, from courses in `courses`, whose cause is not
/// deleted, on a post they may read now (a private one only as its author or as staff: someone
/// notified while staff and demoted since reads nothing of it). `$1` the user, `$2` the courses.
const VISIBLE: &str = "FROM notifications n \
     JOIN posts p ON p.id = n.post_id AND p.deleted_at IS NULL \
     LEFT JOIN comments c ON c.id = n.comment_id \
     WHERE n.recipient_id = $1 AND n.course_id = ANY($2) AND (n.comment_id IS NULL OR c.deleted_at IS NULL) \
       AND (NOT p.private OR p.user_id = $1 OR EXISTS (SELECT 1 FROM course_members s \
            WHERE s.course_id = p.course_id AND s.user_id = $1 AND s.role = 'instructor'))";

const OWN_COLUMNS: &str = "n.id, n.kind, n.course_id, n.actor_id, n.post_id, n.comment_id, n.milestone, n.created_at";

const READ_UP_TO: &str = "COALESCE((SELECT read_up_to FROM notification_reads WHERE user_id = $1), 0)";

/// Up to `limit` visible notifications older than `before` (an id), newest first, and whether
/// there are more: the user's own rows and their courses' announcements, merged by id (one
/// sequence numbers both). Each side reads at most `limit + 1` rows (the announcements at most
/// that many per course), so a page costs the same whatever the size of the course.
pub(crate) async fn page(
    db: &impl ConnectionTrait,
    user_id: i64,
    courses: &[i64],
    before: Option<i64>,
    limit: i64,
) -> AppResult<(Vec<NotificationRow>, bool)> {
    let announced = announcements::page_of_member("$1", "$2", "$3", "$4");
    let sql = format!(
        "SELECT x.*, x.id <= {READ_UP_TO} AS read FROM ( \
           (SELECT {OWN_COLUMNS} {VISIBLE} AND n.id < $3 ORDER BY n.id DESC LIMIT $4) \
           UNION ALL ({announced})) x \
         ORDER BY x.id DESC LIMIT $4"
    );
    let mut rows = NotificationRow::find_by_statement(stmt(
        &sql,
        [user_id.into(), courses.to_vec().into(), before.unwrap_or(i64::MAX).into(), (limit + 1).into()],
    ))
    .all(db)
    .await?;
    let more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    Ok((rows, more))
}

/// One visible notification of the user (their own, or an announcement they see), if it is one.
pub(crate) async fn find(
    db: &impl ConnectionTrait,
    user_id: i64,
    courses: &[i64],
    id: i64,
) -> AppResult<Option<NotificationRow>> {
    let announced = announcements::one_for_member("$1", "$2", "$3");
    let sql = format!(
        "SELECT x.*, x.id <= {READ_UP_TO} AS read FROM ( \
           SELECT {OWN_COLUMNS} {VISIBLE} AND n.id = $3 \
           UNION ALL {announced}) x"
    );
    Ok(NotificationRow::find_by_statement(stmt(&sql, [user_id.into(), courses.to_vec().into(), id.into()]))
        .one(db)
        .await?)
}

#[derive(FromQueryResult)]
struct Count {
    count: i64,
}

/// How many visible notifications the user has not read: their own above the watermark, and
/// their courses' announcements above it.
pub(crate) async fn unread_count(db: &impl ConnectionTrait, user_id: i64, courses: &[i64]) -> AppResult<i64> {
    let announced = announcements::unread_of_member("$1", "$2", READ_UP_TO);
    let sql = format!("SELECT (SELECT count(*) {VISIBLE} AND n.id > {READ_UP_TO}) + ({announced}) AS count");
    let row = Count::find_by_statement(stmt(&sql, [user_id.into(), courses.to_vec().into()])).one(db).await?;
    Ok(row.map_or(0, |r| r.count))
}

/// Marks every notification of the user up to `up_to` read: one of their own, or an
/// announcement of a course they are in that they see. Never moves the mark back. NOT_FOUND
/// when `up_to` is neither.
pub(crate) async fn mark_read(db: &impl ConnectionTrait, user_id: i64, up_to: i64) -> AppResult<()> {
    let announced = announcements::id_for_member("$1", "$2");
    let sql = format!(
        "INSERT INTO notification_reads (user_id, read_up_to) \
         SELECT $1, x.id FROM ( \
           SELECT n.id FROM notifications n WHERE n.id = $2 AND n.recipient_id = $1 \
           UNION ALL {announced}) x \
         ON CONFLICT (user_id) DO UPDATE \
         SET read_up_to = GREATEST(notification_reads.read_up_to, EXCLUDED.read_up_to)"
    );
    let marked = db.execute_raw(stmt(&sql, [user_id.into(), up_to.into()])).await?;
    if marked.rows_affected() == 0 {
        return Err(AppError::not_found("notification"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mentions_are_handles_after_an_at_sign_not_inside_words() {
        assert_eq!(mentions("hi @Alice and @bob_2, cc @alice"), vec!["alice", "bob_2"]);
        assert_eq!(mentions("mail a@b.org or @x or @"), Vec::<String>::new());
        assert_eq!(mentions("@carol: see @dave."), vec!["carol", "dave"]);
        assert_eq!(mentions(&format!("@{}", "a".repeat(33))), Vec::<String>::new());
        assert_eq!(mentions("(@eve)"), vec!["eve"]);
    }

    #[test]
    fn too_many_mentions_are_refused() {
        let text: String = (0..=MAX_MENTIONS).map(|i| format!("@user{i} ")).collect();
        assert!(checked_mentions(&[&text]).is_err());
        let text: String = (0..MAX_MENTIONS).map(|i| format!("@user{i} ")).collect();
        assert_eq!(checked_mentions(&[&text, "@user0"]).map(|m| m.len()).ok(), Some(MAX_MENTIONS));
    }

    /// `@aaa @aab …`: `count` distinct three-letter handles, five characters each.
    fn mention_bomb(count: usize) -> (String, Vec<String>) {
        let handles: Vec<String> = (0..count)
            .map(|i| [i / 676, (i / 26) % 26, i % 26].iter().map(|d| char::from(b'a' + *d as u8)).collect())
            .collect();
        (handles.iter().map(|h| format!("@{h} ")).collect(), handles)
    }

    #[test]
    fn a_body_of_4000_distinct_mentions_is_read_in_one_pass() {
        let (body, handles) = mention_bomb(4_000);
        assert_eq!(body.chars().count(), 20_000);
        // Every one found once, in order, repeats and case folded away.
        let found = mentions(&format!("{body} @AAA {body}"));
        assert_eq!(found, handles);
        // A refusal reads the text only up to the first mention past the limit: the eleventh
        // one ends at byte 11 * 5 - 1, not at the end of the 20,000.
        assert_eq!(distinct_mentions(&[&body], MAX_MENTIONS), Err((MAX_MENTIONS + 1) * 5 - 1));
        let refused = checked_mentions(&[&body]).expect_err("too many");
        assert!(refused.to_string().contains("at most 10"), "{refused}");
        // Across a post's title and body, the bytes of the title count too.
        assert_eq!(distinct_mentions(&["@abc @abd", &body], MAX_MENTIONS), Err(9 + (MAX_MENTIONS - 1) * 5 - 1));
    }

    #[test]
    fn mentions_next_to_non_ascii_text_are_found_as_by_characters() {
        assert_eq!(mentions("é@bob, @bobé, ü@carol_x1"), vec!["bob", "carol_x1"]);
        assert_eq!(mentions("名@dave"), vec!["dave"]);
    }
}
