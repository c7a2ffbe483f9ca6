//! The liked-set audit of `course-forum check`: every loaded liked-set whose (user, course)
//! has nothing pending must hold exactly the user's like rows in that course. A set with
//! pending records legitimately differs (it shows accepted events the worker has not applied)
//! and is skipped. A disagreement is read twice, so a toggle that lands between the Redis and
//! the PostgreSQL read is not reported. Pending records whose event is no longer in the stream
//! (trimmed or deleted by hand) are reported as orphans: nothing would ever retire them, and
//! `reset-like-cache` removes them (`pending_orphans`).

use std::collections::{BTreeMap, BTreeSet};

use sea_orm::{DatabaseConnection, FromQueryResult};

use crate::db::stmt;
use crate::error::{AppError, AppResult};
use crate::kv::keys::Keys;
use crate::kv::{KeyScan, Redis};
use crate::likes::buffered::SENTINEL;

/// Sets audited at most per run: the audit is a sample bounded in time, not a full scan of a
/// large deployment.
pub(crate) const AUDITED_AT_MOST: usize = 10_000;

/// What the audit found.
#[derive(Debug, Default)]
pub(crate) struct Audit {
    /// Loaded sets compared with PostgreSQL.
    pub compared: usize,
    /// Sets skipped because events of their (user, course) are pending.
    pub pending: usize,
    /// (user, course, what the set says, what PostgreSQL says) of each disagreeing set.
    pub wrong: Vec<(i64, i64, BTreeSet<String>, BTreeSet<String>)>,
    /// (user, course, member) of each pending record whose event is no longer in its stream.
    pub orphans: Vec<(i64, i64, String)>,
}

type Pair = (i64, i64);

/// Audits up to `AUDITED_AT_MOST` loaded liked-sets.
pub(crate) async fn audit(db: &DatabaseConnection, redis: &Redis, keys: &Keys) -> AppResult<Audit> {
    let pairs = loaded_sets(redis, keys).await?;
    let mut audit = Audit::default();
    let first = compare(db, redis, keys, &pairs, &mut audit).await?;
    // Read the disagreeing ones again: only what disagrees twice is reported.
    let suspects: Vec<Pair> = first.keys().copied().collect();
    let mut again = Audit::default();
    let second = compare(db, redis, keys, &suspects, &mut again).await?;
    audit.wrong = second.into_iter().map(|((user, course), (set, rows))| (user, course, set, rows)).collect();
    audit.orphans = pending_orphans(redis, keys, false).await?;
    Ok(audit)
}

/// Pending records whose event is no longer in its shard's stream (entries trimmed or deleted
/// by hand): found in up to `AUDITED_AT_MOST` pending hashes, and removed when `remove`.
pub async fn pending_orphans(redis: &Redis, keys: &Keys, remove: bool) -> AppResult<Vec<(i64, i64, String)>> {
    let script = redis::Script::new(include_str!("../../lua/pending_orphans.lua"));
    let mut orphans = Vec::new();
    for (user, course) in scan_pairs(redis, &keys.liked_pending_pattern(), ":pending:").await? {
        let mut conn = redis.clone();
        let members: Vec<String> = script
            .key(keys.liked_pending(user, course))
            .key(keys.like_stream(keys.shard_of(user)))
            .arg(if remove { 1 } else { 0 })
            .invoke_async(&mut conn)
            .await?;
        orphans.extend(members.into_iter().map(|member| (user, course, member)));
    }
    Ok(orphans)
}

/// (user, course) of the loaded liked-sets, from their key names.
async fn loaded_sets(redis: &Redis, keys: &Keys) -> AppResult<Vec<Pair>> {
    scan_pairs(redis, &keys.liked_set_pattern(), ":liked:").await
}

/// (user, course) of up to `AUDITED_AT_MOST` keys matching `pattern`, named `…<kind><user>:<course>`.
async fn scan_pairs(redis: &Redis, pattern: &str, kind: &str) -> AppResult<Vec<Pair>> {
    let mut scan = KeyScan::new(redis, pattern);
    let mut pairs = Vec::new();
    while let Some(names) = scan.next_page().await? {
        pairs.extend(names.iter().filter_map(|name| parse_pair(name, kind)));
        if pairs.len() >= AUDITED_AT_MOST {
            break;
        }
    }
    pairs.truncate(AUDITED_AT_MOST);
    Ok(pairs)
}

/// `…<kind><user>:<course>` → (user, course), `kind` being `:liked:` or `:pending:`.
fn parse_pair(name: &str, kind: &str) -> Option<Pair> {
    let (_, ids) = name.rsplit_once(kind)?;
    let (user, course) = ids.split_once(':')?;
    Some((user.parse().ok()?, course.parse().ok()?))
}

/// Compares each pair's set (when loaded and nothing is pending) with its rows; returns the
/// disagreements.
async fn compare(
    db: &DatabaseConnection,
    redis: &Redis,
    keys: &Keys,
    pairs: &[Pair],
    audit: &mut Audit,
) -> AppResult<BTreeMap<Pair, (BTreeSet<String>, BTreeSet<String>)>> {
    let mut wrong = BTreeMap::new();
    for chunk in pairs.chunks(500) {
        let mut pipe = redis::pipe();
        for (user, course) in chunk {
            pipe.cmd("SMEMBERS").arg(keys.liked_set(*user, *course));
            pipe.cmd("HLEN").arg(keys.liked_pending(*user, *course));
        }
        let mut conn = redis.clone();
        let replies: Vec<redis::Value> = pipe.query_async(&mut conn).await?;
        let mut settled: BTreeMap<Pair, BTreeSet<String>> = BTreeMap::new();
        for (pair, reply) in chunk.iter().zip(replies.chunks(2)) {
            let unexpected = |e: redis::ParsingError| AppError::Internal(format!("unexpected liked-set reply: {e}"));
            let members: Vec<String> = redis::from_redis_value(reply[0].clone()).map_err(unexpected)?;
            let pending: i64 = redis::from_redis_value(reply[1].clone()).map_err(unexpected)?;
            if !members.iter().any(|m| m == SENTINEL) {
                continue; // expired or dropped since the scan: nothing loaded to compare
            }
            if pending > 0 {
                audit.pending += 1;
                continue;
            }
            settled.insert(*pair, members.into_iter().filter(|m| m != SENTINEL).collect());
        }
        let mut rows = rows_of(db, &settled.keys().copied().collect::<Vec<_>>()).await?;
        for (pair, set) in settled {
            audit.compared += 1;
            let in_database = rows.remove(&pair).unwrap_or_default();
            if set != in_database {
                wrong.insert(pair, (set, in_database));
            }
        }
    }
    Ok(wrong)
}

/// The like rows (as set members) of each (user, course), in one statement.
async fn rows_of(db: &DatabaseConnection, pairs: &[Pair]) -> AppResult<BTreeMap<Pair, BTreeSet<String>>> {
    #[derive(FromQueryResult)]
    struct Row {
        user_id: i64,
        course_id: i64,
        member: String,
    }
    if pairs.is_empty() {
        return Ok(BTreeMap::new());
    }
    let users: Vec<i64> = pairs.iter().map(|p| p.0).collect();
    let courses: Vec<i64> = pairs.iter().map(|p| p.1).collect();
    let rows = Row::find_by_statement(stmt(
        "WITH pairs AS (SELECT * FROM unnest($1::bigint[], $2::bigint[]) AS x(user_id, course_id)) \
         SELECT x.user_id, x.course_id, 'p:' || l.post_id AS member FROM pairs x \
         JOIN post_likes l ON l.user_id = x.user_id AND l.course_id = x.course_id \
         UNION ALL \
         SELECT x.user_id, x.course_id, 'c:' || l.comment_id FROM pairs x \
         JOIN comment_likes l ON l.user_id = x.user_id AND l.course_id = x.course_id",
        [users.into(), courses.into()],
    ))
    .all(db)
    .await?;
    let mut by_pair: BTreeMap<Pair, BTreeSet<String>> = BTreeMap::new();
    for row in rows {
        by_pair.entry((row.user_id, row.course_id)).or_default().insert(row.member);
    }
    Ok(by_pair)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_key_names_its_user_and_course() {
        let keys = Keys::new("cf", 4);
        assert_eq!(parse_pair(&keys.liked_set(17, 3), ":liked:"), Some((17, 3)));
        assert_eq!(parse_pair(&keys.liked_pending(17, 3), ":pending:"), Some((17, 3)));
        assert_eq!(parse_pair(&keys.liked_pending(17, 3), ":liked:"), None);
    }
}
