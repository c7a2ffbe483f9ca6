//! The view aggregator: counted views from the Redis shards into `posts.view_count`,
//! exactly once, ONE SQL statement per flush.
//!
//! A flush has three steps, each safe to crash after:
//!
//! 1. `take_shards`: per counter shard, `lua/view_take.lua` moves every counter (GETDEL) into
//!    a pending flush record — a HASH post → views, named by a fresh batch uuid — atomically.
//!    A view is in its counter or in exactly one record.
//! 2. `apply`: every pending record (this round's and any a crashed aggregator left) in ONE
//!    statement that inserts the batch uuids into `view_flushes` ON CONFLICT DO NOTHING and
//!    adds only the views of the batches it inserted. A batch applied before is skipped.
//! 3. `cleanup`: after COMMIT, delete the records.
//!
//! Crash after 1: the records wait, the next flush applies them. Crash after 2 (COMMIT) but
//! before 3: the next flush finds the records again, their uuids are in `view_flushes`, they
//! add nothing and are deleted. Two aggregators at once: step 1 is atomic per shard, and the
//! second statement to insert a batch uuid waits for the first and then skips it.
//! A deadlock with a like batch on the same rows aborts the statement; it is retried next round.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::kv::Redis;
use redis::Script;
use sea_orm::{DatabaseConnection, FromQueryResult};
use tokio::sync::watch;

use crate::cache::PostCache;
use crate::db::stmt;
use crate::error::AppResult;
use crate::kv::keys::Keys;
use crate::live::Publisher;
use crate::telemetry::names;

/// Most posts one shard moves into one record (the rest wait for the next round).
const MAX_POSTS_PER_TAKE: usize = 10_000;

/// One pending flush record: the views moved out of one shard under one batch uuid.
#[derive(Clone, Debug)]
pub struct PendingRecord {
    pub shard: u32,
    pub batch_id: String,
    /// (post id, views)
    pub views: Vec<(i64, i64)>,
}

/// What one flush did.
#[derive(Clone, Debug, Default)]
pub struct FlushReport {
    /// Posts moved out of the shards this round.
    pub posts_taken: usize,
    /// Pending records found (this round's and leftovers).
    pub records: usize,
    /// Records skipped because their batch was already applied (a replay).
    pub records_skipped: usize,
    /// Views added to the database.
    pub views_applied: i64,
    /// Posts whose `view_count` changed, with the committed value.
    pub counts: Vec<(i64, i64)>,
    /// SQL statements run (0 when nothing was pending, else 1).
    pub statements: usize,
    pub elapsed: Duration,
}

/// $1 batch uuids (text), $2 post ids, $3 views — parallel arrays, one row per (record, post).
/// The RETURNING of the UPDATE gives the new counts; `fresh` says which batches were new.
const APPLY_SQL: &str = "\
WITH input AS ( \
   SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS i(batch_id, post_id, views)), \
 fresh AS ( \
   INSERT INTO view_flushes (batch_id) SELECT DISTINCT batch_id::uuid FROM input \
   ON CONFLICT DO NOTHING RETURNING batch_id), \
 delta AS ( \
   SELECT i.post_id, sum(i.views)::bigint AS views FROM input i \
   JOIN fresh f ON f.batch_id = i.batch_id::uuid GROUP BY i.post_id), \
 updated AS ( \
   UPDATE posts p SET view_count = p.view_count + delta.views FROM delta WHERE p.id = delta.post_id \
   RETURNING p.id, p.view_count) \
SELECT 'c' AS kind, id, view_count, NULL::text AS batch_id FROM updated \
UNION ALL SELECT 'b', NULL, NULL, batch_id::text FROM fresh";

#[derive(FromQueryResult)]
struct ApplyRow {
    kind: String,
    id: Option<i64>,
    view_count: Option<i64>,
    batch_id: Option<String>,
}

#[derive(Clone)]
pub struct ViewAggregator {
    db: DatabaseConnection,
    redis: Redis,
    keys: Keys,
    shards: u32,
    interval: Duration,
    take: std::sync::Arc<Script>,
    /// Cached posts learn their committed view counts after each flush: the post cache
    /// directly, every instance's course pages through the live channel.
    caches: Option<(PostCache, Publisher)>,
}

impl ViewAggregator {
    pub fn new(db: DatabaseConnection, redis: Redis, keys: Keys, shards: u32, interval: Duration) -> Self {
        let take = std::sync::Arc::new(Script::new(include_str!("../../lua/view_take.lua")));
        Self { db, redis, keys, shards: shards.max(1), interval, take, caches: None }
    }

    /// Also patches the committed view counts of each flush into the post cache, and publishes
    /// them for the instances' course pages.
    pub fn with_caches(mut self, cache: PostCache, publisher: Publisher) -> Self {
        self.caches = Some((cache, publisher));
        self
    }

    /// Step 1: moves every shard's counters into new pending records. Returns posts moved.
    /// Per shard: draw up to `MAX_POSTS_PER_TAKE` dirty posts, then move exactly their counters
    /// in one script that names every key it touches (so it runs on a Redis Cluster too).
    pub async fn take_shards(&self) -> AppResult<usize> {
        let mut conn = self.redis.clone();
        let mut moved = 0;
        for shard in 0..self.shards {
            let drawn: Vec<i64> = redis::cmd("SRANDMEMBER")
                .arg(self.keys.view_dirty(shard))
                .arg(MAX_POSTS_PER_TAKE)
                .query_async(&mut conn)
                .await?;
            if drawn.is_empty() {
                continue;
            }
            let batch = uuid::Uuid::now_v7().simple().to_string();
            let mut take = self.take.key(self.keys.view_dirty(shard));
            take.key(self.keys.view_flushes(shard)).key(self.keys.view_flush_record(shard, &batch)).arg(&batch);
            for post in &drawn {
                take.key(self.keys.view_counter(shard, *post)).arg(post);
            }
            let n: usize = take.invoke_async(&mut conn).await?;
            moved += n;
        }
        Ok(moved)
    }

    /// Every pending record of every shard (pipelined: one round trip for the indexes, one for
    /// the records). Malformed entries are logged and left alone.
    pub async fn pending(&self) -> AppResult<Vec<PendingRecord>> {
        let mut conn = self.redis.clone();
        let mut index = redis::pipe();
        for shard in 0..self.shards {
            index.cmd("SMEMBERS").arg(self.keys.view_flushes(shard));
        }
        let batches: Vec<Vec<String>> = index.query_async(&mut conn).await?;
        let named: Vec<(u32, String)> = batches
            .into_iter()
            .enumerate()
            .flat_map(|(shard, ids)| ids.into_iter().map(move |id| (shard as u32, id)))
            .collect();
        if named.is_empty() {
            return Ok(Vec::new());
        }
        let mut fetch = redis::pipe();
        for (shard, batch) in &named {
            fetch.cmd("HGETALL").arg(self.keys.view_flush_record(*shard, batch));
        }
        let records: Vec<HashMap<String, i64>> = fetch.query_async(&mut conn).await?;
        let mut out = Vec::with_capacity(named.len());
        for ((shard, batch_id), fields) in named.into_iter().zip(records) {
            if uuid::Uuid::try_parse(&batch_id).is_err() {
                tracing::error!(shard, batch_id, "pending view record with a malformed batch id; left alone");
                continue;
            }
            let mut views = Vec::with_capacity(fields.len());
            for (post, n) in fields {
                match post.parse::<i64>() {
                    Ok(post_id) if n > 0 => views.push((post_id, n)),
                    _ => tracing::error!(shard, batch_id, post, n, "malformed field in a view record; skipped"),
                }
            }
            out.push(PendingRecord { shard, batch_id, views });
        }
        Ok(out)
    }

    /// Step 2: applies records in ONE statement (its own transaction). Returns the new counts
    /// and the batch ids that were new (the others had been applied before).
    pub async fn apply(&self, records: &[PendingRecord]) -> AppResult<(Vec<(i64, i64)>, Vec<String>)> {
        let mut batch_ids = Vec::new();
        let mut post_ids = Vec::new();
        let mut views = Vec::new();
        for record in records {
            for (post_id, n) in &record.views {
                batch_ids.push(record.batch_id.clone());
                post_ids.push(*post_id);
                views.push(*n);
            }
        }
        if batch_ids.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        let rows = ApplyRow::find_by_statement(stmt(APPLY_SQL, [batch_ids.into(), post_ids.into(), views.into()]))
            .all(&self.db)
            .await?;
        let mut counts = Vec::new();
        let mut fresh = Vec::new();
        for row in rows {
            match (row.kind.as_str(), row.id, row.view_count, row.batch_id) {
                ("c", Some(id), Some(count), _) => counts.push((id, count)),
                ("b", _, _, Some(batch)) => fresh.push(batch.replace('-', "")),
                _ => {}
            }
        }
        Ok((counts, fresh))
    }

    /// Step 3: deletes applied (or empty) records; each record and its index entry together.
    pub async fn cleanup(&self, records: &[PendingRecord]) -> AppResult<()> {
        if records.is_empty() {
            return Ok(());
        }
        let mut conn = self.redis.clone();
        let mut pipe = redis::pipe();
        for record in records {
            // Same slot: MULTI keeps the record and its index entry together.
            pipe.cmd("MULTI").ignore();
            pipe.cmd("DEL").arg(self.keys.view_flush_record(record.shard, &record.batch_id)).ignore();
            pipe.cmd("SREM").arg(self.keys.view_flushes(record.shard)).arg(&record.batch_id).ignore();
            pipe.cmd("EXEC").ignore();
        }
        let () = pipe.query_async(&mut conn).await?;
        Ok(())
    }

    /// One whole flush: take the shards, apply every pending record (new and left over) in one
    /// statement, then delete the records. Tests and `run` call this.
    #[tracing::instrument(name = "view_flush", skip(self), fields(flush_id = %uuid::Uuid::now_v7()))]
    pub async fn flush_views_once(&self) -> AppResult<FlushReport> {
        let flushed = self.flush().await;
        match &flushed {
            Ok(report) => {
                metrics::counter!(names::VIEW_FLUSHES, "result" => "ok").increment(1);
                metrics::counter!(names::VIEWS_FLUSHED).increment(report.views_applied.max(0) as u64);
                metrics::histogram!(names::VIEW_FLUSH_DURATION).record(report.elapsed.as_secs_f64());
            }
            Err(_) => metrics::counter!(names::VIEW_FLUSHES, "result" => "failed").increment(1),
        }
        flushed
    }

    async fn flush(&self) -> AppResult<FlushReport> {
        let started = Instant::now();
        let posts_taken = self.take_shards().await?;
        let records = self.pending().await?;
        let statements = usize::from(records.iter().any(|r| !r.views.is_empty()));
        let (counts, fresh) = self.apply(&records).await?;
        // Committed: cached posts show the new totals (their shards were just emptied).
        if let Some((cache, publisher)) = &self.caches {
            cache.view_counts_committed(&counts).await;
            publisher.view_counts(&counts).await;
        }
        self.cleanup(&records).await?;
        let fresh_views: i64 =
            records.iter().filter(|r| fresh.contains(&r.batch_id)).flat_map(|r| r.views.iter().map(|(_, n)| *n)).sum();
        let report = FlushReport {
            posts_taken,
            records: records.len(),
            records_skipped: records.iter().filter(|r| !r.views.is_empty() && !fresh.contains(&r.batch_id)).count(),
            views_applied: fresh_views,
            counts,
            statements,
            elapsed: started.elapsed(),
        };
        if report.records > 0 {
            tracing::debug!(
                posts = report.counts.len(),
                views = report.views_applied,
                skipped = report.records_skipped,
                micros = report.elapsed.as_micros() as u64,
                "views flushed"
            );
        }
        Ok(report)
    }

    /// Flushes every interval until `shutdown` turns true (the first flush at once, which also
    /// replays what a crashed aggregator left), and once more on the way out.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while !*shutdown.borrow() {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.changed() => break,
            }
            if let Err(err) = self.flush_views_once().await {
                tracing::warn!(error = %err, "view flush failed; its records stay pending for the next round");
            }
        }
        if let Err(err) = self.flush_views_once().await {
            tracing::warn!(error = %err, "last view flush failed; the records stay pending");
        }
        tracing::info!("view aggregator stopped");
    }
}
