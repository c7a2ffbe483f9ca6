//! What a refused request must leave alone (tests/it/authorization.rs, tests/it/bad_input.rs):
//! counts and fingerprints of every table a request could change, and the like events waiting
//! for the worker.

use super::TestApp;

/// Counts and fingerprints of every table a request could change.
pub const SNAPSHOT: &[&str] = &[
    "SELECT count(*) AS v FROM posts",
    "SELECT count(*) AS v FROM posts WHERE deleted_at IS NOT NULL",
    "SELECT count(*) AS v FROM posts WHERE edited_at IS NOT NULL",
    "SELECT coalesce(sum(like_count + comment_count), 0)::bigint AS v FROM posts",
    "SELECT coalesce(sum(hashtext(title || '|' || body)::bigint), 0)::bigint AS v FROM posts",
    "SELECT count(*) AS v FROM comments",
    "SELECT count(*) AS v FROM comments WHERE deleted_at IS NOT NULL",
    "SELECT count(*) AS v FROM comments WHERE edited_at IS NOT NULL",
    "SELECT coalesce(sum(like_count + reply_count), 0)::bigint AS v FROM comments",
    "SELECT coalesce(sum(hashtext(body)::bigint), 0)::bigint AS v FROM comments",
    "SELECT count(*) AS v FROM post_likes",
    "SELECT count(*) AS v FROM comment_likes",
    "SELECT count(*) AS v FROM course_members",
    "SELECT count(*) AS v FROM users",
    // The state staff and askers change: kinds, privacy, pins, answers, endorsements, tags and
    // each course's anonymity.
    "SELECT coalesce(sum(hashtext(concat_ws('|', id, kind, private, pinned_at, accepted_comment_id, resolved_at, \
     endorsed_by, endorsed_at))::bigint), 0)::bigint AS v FROM posts",
    "SELECT coalesce(sum(hashtext(concat_ws('|', id, endorsed_by, endorsed_at))::bigint), 0)::bigint AS v FROM comments",
    "SELECT coalesce(sum(hashtext(concat_ws('|', id, course_id, name))::bigint), 0)::bigint AS v FROM course_tags",
    "SELECT coalesce(sum(hashtext(concat_ws('|', post_id, tag_id))::bigint), 0)::bigint AS v FROM post_tags",
    "SELECT coalesce(sum(hashtext(concat_ws('|', id, anonymity))::bigint), 0)::bigint AS v FROM courses",
];

/// The `SNAPSHOT` counts, and the like events waiting in the streams for the worker (buffered
/// mode appends one per toggle that changed a liked-set; sync mode none).
pub async fn snapshot(app: &TestApp) -> Vec<(&'static str, i64)> {
    let mut out = Vec::new();
    for sql in SNAPSHOT {
        out.push((*sql, app.scalar_i64(sql, []).await));
    }
    out.push(("like events not yet applied", super::likes::unapplied(app).await as i64));
    out
}

/// A statement's one bigint `v` (`SELECT count(*) AS v …`), with no parameters.
pub async fn count(app: &TestApp, sql: &str) -> i64 {
    app.scalar_i64(sql, []).await
}

/// Fails with every problem a table-driven test collected, one a line.
pub fn assert_no_failures(failures: Vec<String>) {
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}
