//! Filling the membership cache from `course_members` each time the listener starts vouching
//! for it (at start, and after every reconnect emptied it), so that an instance's first
//! request per member runs no membership statement: a restart or a lost connection does not
//! send every member's next request to PostgreSQL at once.
//!
//! Members are read in chunks of `CHUNK_USERS` users in user-id order
//! (`course_members_user_idx`). A chunk is one statement, so one snapshot, and it is kept only
//! if no change was heard while it was read: the generation rule of every reading
//! (`Memberships::keep_warmed`). A chunk that raced a change is read again, up to `ATTEMPTS`
//! times, then left to the requests.
//!
//! What it keeps is bounded in bytes: it reads no further chunk once the cache holds
//! `FILL_PER_MILLE` of its share of the budget. The last chunk may take it about a chunk
//! further (some 1.3 MB at 5,000 users of one or two courses), which the default share (7 % of
//! 256 MiB) has room for, so the warm leaves room for what requests keep; under a smaller
//! budget the cache's own bound evicts the excess. Users without a membership are not read:
//! their first request reads as before.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use sea_orm::{ConnectionTrait, FromQueryResult};

use super::Memberships;
use crate::db::stmt;
use crate::error::AppResult;
use crate::forum::courses::Role;
use crate::telemetry::names;

/// Users read by one statement.
pub const CHUNK_USERS: i64 = 5_000;
/// Reads of one chunk before it is left to the requests (each failed because a membership
/// change was heard meanwhile).
const ATTEMPTS: u32 = 3;
/// How full (per mille of its share of the budget) the warm leaves the cache at most.
const FILL_PER_MILLE: u64 = 750;

/// What one warm did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Warmed {
    /// Users whose roles were kept.
    pub users: u64,
    /// Chunks left to the requests: each raced a change `ATTEMPTS` times.
    pub chunks_skipped: u64,
    /// Whether it stopped because the cache was as full as the warm may make it.
    pub stopped_full: bool,
}

#[derive(FromQueryResult)]
struct MembersRow {
    user_id: i64,
    course_ids: Vec<i64>,
    roles: Vec<String>,
}

/// One chunk: every membership of the first `CHUNK_USERS` users above `after`.
async fn read_chunk(db: &impl ConnectionTrait, after: i64) -> AppResult<Vec<(i64, HashMap<i64, Role>)>> {
    let rows = MembersRow::find_by_statement(stmt(
        "SELECT user_id, array_agg(course_id ORDER BY course_id) AS course_ids, \
                array_agg(role::text ORDER BY course_id) AS roles \
         FROM course_members WHERE user_id > $1 GROUP BY user_id ORDER BY user_id LIMIT $2",
        [after.into(), CHUNK_USERS.into()],
    ))
    .all(db)
    .await?;
    rows.into_iter()
        .map(|row| {
            let roles =
                row.course_ids.into_iter().zip(row.roles.iter()).map(|(course, role)| Ok((course, Role::parse(role)?)));
            Ok((row.user_id, roles.collect::<AppResult<HashMap<i64, Role>>>()?))
        })
        .collect()
}

/// Fills `memberships` from `course_members` (see the module doc). Stops early, keeping what
/// it kept, when the listener stops vouching (a later connect warms again).
pub async fn warm(db: &impl ConnectionTrait, memberships: &Memberships) -> AppResult<Warmed> {
    let started = Instant::now();
    let hooks = memberships.listener_hooks();
    let mut warmed = Warmed::default();
    let mut after = 0_i64;
    'chunks: loop {
        if !memberships.keeps_readings() {
            break;
        }
        let (used, capacity) = memberships.fill();
        if used.saturating_mul(1000) >= capacity.saturating_mul(FILL_PER_MILLE) {
            warmed.stopped_full = true;
            break;
        }
        let mut chunk_end = after;
        for _ in 0..ATTEMPTS {
            let read_at = memberships.generation();
            let chunk = read_chunk(db, after).await?;
            let Some(&(last, _)) = chunk.last() else { break 'chunks };
            hooks.after_warm_read.pass().await;
            chunk_end = last;
            let users = chunk.len() as u64;
            if memberships.keep_warmed(chunk.into_iter().map(|(user, roles)| (user, Arc::new(roles))), read_at) {
                warmed.users += users;
                after = last;
                continue 'chunks;
            }
            if !memberships.keeps_readings() {
                break 'chunks;
            }
        }
        // Raced a change every time: step over the chunk (its users are read on their first
        // request, as without the warm).
        warmed.chunks_skipped += 1;
        after = chunk_end;
    }
    metrics::counter!(names::MEMBERSHIP_CACHE_WARMED).increment(warmed.users);
    tracing::info!(
        users = warmed.users,
        chunks_skipped = warmed.chunks_skipped,
        stopped_full = warmed.stopped_full,
        ms = started.elapsed().as_millis() as u64,
        "membership cache warmed"
    );
    Ok(warmed)
}
