//! Level 1, synchronous likes: one statement per toggle. The insert (or delete) and the counter
//! update share a statement, and the counter moves only by the rows RETURNING says changed, so
//! a repeated like or unlike changes nothing and the count never goes negative.

use sea_orm::{ConnectionTrait, FromQueryResult};

use super::LikeTarget;
use crate::db::stmt;
use crate::error::AppResult;

#[derive(FromQueryResult)]
struct CountRow {
    like_count: Option<i32>,
    like_version: Option<i64>,
    xid: Option<i64>,
}

/// What one toggle did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncOutcome {
    pub like_count: i32,
    /// The target's `like_version` after a change (the order of live publications).
    pub version: i64,
    /// False for a repeat (or a race another request won).
    pub changed: bool,
    /// The id of the transaction that made the change (`pg_current_xact_id()`), for the
    /// liked-set's load stamp (`LikedSets::forget`).
    pub xid: Option<i64>,
}

/// Applies the like or unlike; `None` when the target is gone (deleted meanwhile). A like by a
/// user who is not (any more) a member of the target's course inserts nothing.
pub async fn set(
    db: &impl ConnectionTrait,
    user_id: i64,
    target: LikeTarget,
    liked: bool,
) -> AppResult<Option<SyncOutcome>> {
    let (t, id) = target.tables();
    let sql = if liked {
        format!(
            "WITH live AS ({live}), \
             changed AS (INSERT INTO {likes} ({key}, user_id, course_id) SELECT id, $2, course_id FROM live \
                         ON CONFLICT DO NOTHING RETURNING {key}) \
             UPDATE {target} SET like_count = like_count + 1, like_version = like_version + 1 \
             WHERE id IN (SELECT {key} FROM changed) \
             RETURNING like_count, like_version, pg_current_xact_id()::text::bigint AS xid",
            live = t.live_target_of_member_sql(),
            target = t.target,
            likes = t.likes,
            key = t.key
        )
    } else {
        format!(
            "WITH changed AS (DELETE FROM {likes} WHERE {key} = $1 AND user_id = $2 RETURNING {key}) \
             UPDATE {target} SET like_count = like_count - 1, like_version = like_version + 1 \
             WHERE id IN (SELECT {key} FROM changed) \
             RETURNING like_count, like_version, pg_current_xact_id()::text::bigint AS xid",
            target = t.target,
            likes = t.likes,
            key = t.key
        )
    };
    if let Some(row) = CountRow::find_by_statement(stmt(&sql, [id.into(), user_id.into()])).one(db).await? {
        return Ok(row.like_count.map(|like_count| SyncOutcome {
            like_count,
            version: row.like_version.unwrap_or_default(),
            changed: true,
            xid: row.xid,
        }));
    }
    // Nothing changed (a repeat, or another request won the race). Read the count in a new
    // statement: the one above ran on a snapshot that may predate the winner's commit.
    let current = CountRow::find_by_statement(stmt(
        &format!(
            "SELECT like_count, like_version, NULL::bigint AS xid FROM {} WHERE id = $1 AND deleted_at IS NULL",
            t.target
        ),
        [id.into()],
    ))
    .one(db)
    .await?;
    Ok(current.and_then(|row| {
        row.like_count.map(|like_count| SyncOutcome {
            like_count,
            version: row.like_version.unwrap_or_default(),
            changed: false,
            xid: None,
        })
    }))
}
