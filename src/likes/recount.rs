//! Level 2, recount: the like row is inserted or deleted at once without touching the counter,
//! the target is marked dirty in Redis, and a job recomputes `like_count` from `count(*)` for
//! dirty targets in batches (`… WHERE like_count <> n`). The same recount, over every row, is
//! the reconciliation (`course-forum reconcile`) that repairs any level's drift.

use std::sync::Arc;

use crate::kv::Redis;
use redis::Script;
use sea_orm::{ConnectionTrait, DatabaseConnection, FromQueryResult, IsolationLevel, TransactionTrait};

use super::{CountChange, LikeTables, LikeTarget};
use crate::db::stmt;
use crate::error::AppResult;
use crate::hooks::Gate;
use crate::kv::keys::Keys;

/// Points where a test can hold a running recount (`crate::hooks::Gate`) to build a race step
/// by step.
#[derive(Default)]
pub struct RecountHooks {
    /// Inside the recount's transaction (one per kind of target), after its counts were
    /// written, before COMMIT (the targets' rows are locked).
    pub before_commit: Gate,
}

/// Inserts (only for a member of the target's course) or deletes the like row; returns whether
/// a row changed.
pub async fn set(db: &impl ConnectionTrait, user_id: i64, target: LikeTarget, liked: bool) -> AppResult<bool> {
    Ok(set_in_transaction(db, user_id, target, liked).await?.is_some())
}

/// As `set`; when the row changed, the id of the transaction that changed it
/// (`pg_current_xact_id()`), for the liked-set's load stamp (`LikedSets::forget`).
pub(crate) async fn set_in_transaction(
    db: &impl ConnectionTrait,
    user_id: i64,
    target: LikeTarget,
    liked: bool,
) -> AppResult<Option<i64>> {
    #[derive(FromQueryResult)]
    struct Changed {
        xid: i64,
    }
    let (t, id) = target.tables();
    let sql = if liked {
        format!(
            "INSERT INTO {likes} ({key}, user_id, course_id) SELECT id, $2, course_id FROM ({live}) live \
             ON CONFLICT DO NOTHING \
             RETURNING pg_current_xact_id()::text::bigint AS xid",
            live = t.live_target_of_member_sql(),
            likes = t.likes,
            key = t.key
        )
    } else {
        format!(
            "DELETE FROM {likes} WHERE {key} = $1 AND user_id = $2 RETURNING pg_current_xact_id()::text::bigint AS xid",
            likes = t.likes,
            key = t.key
        )
    };
    let changed = Changed::find_by_statement(stmt(&sql, [id.into(), user_id.into()])).one(db).await?;
    Ok(changed.map(|c| c.xid))
}

/// The dirty set of targets awaiting a recount.
#[derive(Clone)]
pub struct DirtyMarks {
    redis: Redis,
    keys: Keys,
    mark: Arc<Script>,
    clear: Arc<Script>,
    hooks: Arc<RecountHooks>,
}

impl DirtyMarks {
    pub fn new(redis: Redis, keys: Keys) -> Self {
        Self {
            redis,
            keys,
            mark: Arc::new(Script::new(include_str!("../../lua/recount_mark.lua"))),
            clear: Arc::new(Script::new(include_str!("../../lua/recount_clear.lua"))),
            hooks: Arc::new(RecountHooks::default()),
        }
    }

    /// This job's test hooks (shared by its clones; another `DirtyMarks` is another instance).
    pub fn hooks(&self) -> &RecountHooks {
        &self.hooks
    }

    pub async fn mark(&self, target: LikeTarget) -> AppResult<()> {
        let mut conn = self.redis.clone();
        let _: i64 = self
            .mark
            .key(self.keys.recount_dirty())
            .key(self.keys.recount_seq())
            .arg(target.member())
            .invoke_async(&mut conn)
            .await?;
        Ok(())
    }

    /// Recounts up to `batch` dirty targets; returns the targets whose counter changed, with
    /// the new count (committed when this returns).
    pub async fn recount_once(&self, db: &DatabaseConnection, batch: usize) -> AppResult<Vec<CountChange>> {
        let mut conn = self.redis.clone();
        let marked: Vec<(String, f64)> = redis::cmd("ZRANGE")
            .arg(self.keys.recount_dirty())
            .arg(0)
            .arg(batch.saturating_sub(1) as i64)
            .arg("WITHSCORES")
            .query_async(&mut conn)
            .await?;
        if marked.is_empty() {
            return Ok(Vec::new());
        }
        let targets: Vec<LikeTarget> = marked.iter().filter_map(|(m, _)| LikeTarget::parse_member(m)).collect();
        let changed = recount(db, &targets, &self.hooks).await?;
        // Clear only marks not renewed since we read them: a like that landed after our count
        // has a higher score and stays dirty for the next round.
        let mut clear = self.clear.key(self.keys.recount_dirty());
        for (member, score) in &marked {
            clear.arg(member).arg(*score as i64);
        }
        let _: i64 = clear.invoke_async(&mut conn).await?;
        Ok(changed)
    }
}

#[derive(FromQueryResult)]
struct Recounted {
    id: i64,
    like_count: i32,
    like_version: i64,
}

/// Sets `like_count` to the number of like rows for each target, touching only rows that
/// disagree. Returns the changed targets with their new counts (committed when this returns).
///
/// # Why the count it writes is never stale
///
/// Per kind of target, one READ COMMITTED transaction of two statements: first lock the targets'
/// rows (`FOR NO KEY UPDATE`, in id order), THEN count the like rows and write the counters. In
/// READ COMMITTED every statement takes a fresh snapshot when it starts, and the count statement
/// starts after every lock was granted: it sees every transaction that committed before then,
/// and no writer of these counters can commit until we do. (The single `UPDATE … FROM (SELECT
/// count(*) …)` this replaces took its count from a snapshot taken before it waited for a row;
/// when the holder committed, PostgreSQL re-checked the row but not the count, and it wrote the
/// holder's old count over its new one. A later last unlike then broke `like_count >= 0`.)
///
/// Against every writer of likes, in both orders:
///
/// - The like worker (level 3) locks its targets (`FOR UPDATE`, id order) before it writes any
///   like row of them, and moves counters by the rows it changed. Worker first: our lock waits
///   for its COMMIT, then we count its rows. Recount first: the worker's lock waits, it has
///   written nothing of these targets, so our count is exact; after our COMMIT its next
///   statement adds its delta to our count. No deadlock: both lock one kind in ascending id
///   order, and a recount never holds a post while it waits for a comment (one transaction per
///   kind), so neither can hold a row the other waits for while waiting for a row it holds.
/// - A synchronous toggle (level 1) is one statement: it inserts (or deletes) the like row, then
///   `like_count ± 1` locks the target. Toggle first: we wait for its commit and count its row.
///   Recount first: its row change is not committed when we count (it cannot commit before its
///   UPDATE, which waits for us), so our count leaves it out; after our COMMIT PostgreSQL
///   re-evaluates its UPDATE on our row, and its ±1 lands on a count that lacked it: exact.
/// - A recount-mode write (level 2) takes no lock on the target (its foreign-key check takes
///   `FOR KEY SHARE`, which `FOR NO KEY UPDATE` does not block: that is why the lock is not
///   `FOR UPDATE`, so such writes never queue behind a recount) and marks the target dirty after
///   it committed. Committed before our count statement: counted. Committed later: its mark
///   comes after our count, so after `recount_once` read the dirty set; it has a higher score,
///   `recount_clear.lua` keeps it, and the next round counts the row.
/// - Another recount (another instance's job, `reconcile`) queues on the same locks; whichever
///   commits last counted in a snapshot taken after the other committed.
///
/// Skipping rows whose counter already agrees is safe for the same reason: under the lock,
/// `like_count` is the latest committed value and stays so until we commit.
pub(crate) async fn recount(
    db: &DatabaseConnection,
    targets: &[LikeTarget],
    hooks: &RecountHooks,
) -> AppResult<Vec<CountChange>> {
    let mut changed = Vec::new();
    for tables in [LikeTables::POST, LikeTables::COMMENT] {
        let mut ids: Vec<i64> = targets
            .iter()
            .map(LikeTarget::tables)
            .filter(|(t, _)| t.target == tables.target)
            .map(|(_, id)| id)
            .collect();
        if ids.is_empty() {
            continue;
        }
        ids.sort_unstable();
        ids.dedup();
        // Explicit: in REPEATABLE READ the count would use the lock statement's snapshot, taken
        // before the lock waited.
        let txn = db.begin_with_config(Some(IsolationLevel::ReadCommitted), None).await?;
        let lock =
            format!("SELECT id FROM {target} WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE", target = tables.target);
        txn.execute_raw(stmt(&lock, [ids.clone().into()])).await?;
        let sql = format!(
            "UPDATE {target} x SET like_count = c.n, like_version = x.like_version + 1 \
             FROM (SELECT t.id, (SELECT count(*) FROM {likes} l WHERE l.{key} = t.id)::int AS n \
                   FROM unnest($1::bigint[]) AS t(id)) c \
             WHERE x.id = c.id AND x.like_count <> c.n RETURNING x.id, x.like_count, x.like_version",
            target = tables.target,
            likes = tables.likes,
            key = tables.key
        );
        let rows = Recounted::find_by_statement(stmt(&sql, [ids.into()])).all(&txn).await?;
        hooks.before_commit.pass().await;
        txn.commit().await?;
        changed.extend(rows.into_iter().map(|r| CountChange {
            target: (tables.make)(r.id),
            like_count: r.like_count,
            version: r.like_version,
        }));
    }
    Ok(changed)
}

/// Recounts every post and comment in id-ordered chunks (each chunk its own short transaction
/// of `recount`, so it is safe on a live system). Returns what it fixed.
pub async fn reconcile_all(db: &DatabaseConnection, chunk: i64) -> AppResult<Vec<CountChange>> {
    reconcile_all_with(db, chunk, &RecountHooks::default()).await
}

/// `reconcile_all` whose chunks pass `hooks` (tests).
pub async fn reconcile_all_with(
    db: &DatabaseConnection,
    chunk: i64,
    hooks: &RecountHooks,
) -> AppResult<Vec<CountChange>> {
    #[derive(FromQueryResult)]
    struct Ids {
        ids: Option<Vec<i64>>,
    }
    let mut fixed = Vec::new();
    for tables in [LikeTables::POST, LikeTables::COMMENT] {
        let table = tables.target;
        let mut after = 0i64;
        loop {
            let ids = Ids::find_by_statement(stmt(
                &format!("SELECT array_agg(id ORDER BY id) AS ids FROM (SELECT id FROM {table} WHERE id > $1 ORDER BY id LIMIT $2) s"),
                [after.into(), chunk.into()],
            ))
            .one(db)
            .await?
            .and_then(|row| row.ids)
            .unwrap_or_default();
            let Some(last) = ids.last().copied() else { break };
            let targets: Vec<LikeTarget> = ids.into_iter().map(tables.make).collect();
            fixed.extend(recount(db, &targets, hooks).await?);
            after = last;
        }
    }
    Ok(fixed)
}
