//! `bench worker-apply`: how many likes per second ONE worker applies to PostgreSQL at batch
//! sizes 500 and 5,000. N distinct users like one hot post; the events are pre-loaded into the
//! stream in the toggle script's format, then the worker drains it (read, collapse, one unnest
//! transaction per batch, XACK+trim), once step by step (`process_one_batch`: read, transaction,
//! ack one after another) and once pipelined as the running worker does (`process_pipelined`:
//! the next read and the last ack overlap the transaction), side by side. Each run asserts
//! that the final counter equals the events, then times one more batch of likes through the
//! SQL alone.

use std::time::{Duration, Instant};

use course_forum::testing::cache::{CacheConfig, PostCache};
use course_forum::testing::config::LikeMode;
use course_forum::testing::db::stmt;
use course_forum::testing::error::{AppError, AppResult};
use course_forum::testing::kv::{self, keys::Keys};
use course_forum::testing::like_event::{LikeEvent, LikeTarget};
use course_forum::testing::likes::apply;
use course_forum::testing::likes::committed::AfterCommit;
use course_forum::testing::live::Publisher;
use course_forum::testing::worker::{BatchTimings, LikeWorker, WorkerConfig};
use sea_orm::{FromQueryResult, TransactionTrait};
use serde::Serialize;

use crate::Cli;
use crate::fixture::Fixture;

#[derive(FromQueryResult)]
struct One {
    v: i64,
}

/// One batch size's run.
#[derive(Debug, Serialize)]
pub struct ApplyResult {
    pub batch: usize,
    /// Pipelined steps (the running worker) rather than one phase after another.
    pub pipelined: bool,
    pub likes: i64,
    pub seconds: f64,
    pub likes_per_s: f64,
    pub ms_per_batch: f64,
    /// One more batch of likes applied by `likes::apply` alone (no Redis): the database's share.
    pub sql_ms_per_batch: f64,
    /// The worker's phases per batch: stream read (XREADGROUP + parsing), apply (the
    /// transaction and the publish), ack (XACK + trim).
    pub read_ms_per_batch: f64,
    pub apply_ms_per_batch: f64,
    pub ack_ms_per_batch: f64,
}

pub async fn run(cli: &Cli, events: i64, batches: &[usize]) -> AppResult<Vec<ApplyResult>> {
    let mut results = Vec::new();
    for (&batch, pipelined) in batches.iter().flat_map(|b| [(b, false), (b, true)]) {
        let run = run_worker_apply(cli, events, batch, pipelined).await?;
        let secs = run.elapsed.as_secs_f64();
        let per_batch = |d: Duration| d.as_secs_f64() * 1000.0 / run.batches.max(1) as f64;
        results.push(ApplyResult {
            read_ms_per_batch: per_batch(run.phases.read),
            apply_ms_per_batch: per_batch(run.phases.apply),
            ack_ms_per_batch: per_batch(run.phases.ack),
            batch,
            pipelined,
            likes: events,
            seconds: secs,
            likes_per_s: events as f64 / secs,
            ms_per_batch: secs * 1000.0 / run.batches.max(1) as f64,
            sql_ms_per_batch: run.sql_only.as_secs_f64() * 1000.0,
        });
    }
    Ok(results)
}

pub fn print(results: &[ApplyResult]) {
    println!(
        "{:>7} {:>10} {:>8} {:>9} {:>10} {:>14} {:>9} {:>9} {:>9} {:>16}",
        "batch", "steps", "likes", "seconds", "likes/s", "ms per batch", "read ms", "apply ms", "ack ms", "SQL-only ms"
    );
    for r in results {
        println!(
            "{:>7} {:>10} {:>8} {:>9.3} {:>10.0} {:>14.2} {:>9.2} {:>9.2} {:>9.2} {:>16.2}",
            r.batch,
            if r.pipelined { "pipelined" } else { "one by one" },
            r.likes,
            r.seconds,
            r.likes_per_s,
            r.ms_per_batch,
            r.read_ms_per_batch,
            r.apply_ms_per_batch,
            r.ack_ms_per_batch,
            r.sql_ms_per_batch
        );
    }
}

struct ApplyRun {
    /// Wall time for the worker to drain the stream.
    elapsed: Duration,
    batches: u64,
    /// One more batch of the same size applied by `likes::apply` alone, in one transaction
    /// (no Redis): the database's share of a batch.
    sql_only: Duration,
    /// The worker's own account of its steps, summed.
    phases: BatchTimings,
}

async fn run_worker_apply(cli: &Cli, events: i64, batch: usize, pipelined: bool) -> AppResult<ApplyRun> {
    let fixture = Fixture::create(&cli.database_url, events).await?;
    let db = fixture.db.clone();
    let outcome = async {
        let prefix = format!("bench{}", uuid::Uuid::new_v4().simple());
        let keys = Keys::new(prefix.clone(), 1);
        let redis = kv::connect(&cli.redis_url, Duration::from_secs(5), "bench").await?;
        let config = WorkerConfig {
            mode: LikeMode::Buffered,
            batch_size: batch,
            lease_ttl: Duration::from_secs(30),
            max_deliveries: 5,
            idle_wait: Duration::from_millis(10),
            recount_interval: Duration::from_secs(1),
            fault: None,
        };
        let worker = LikeWorker::new(
            db.clone(),
            redis.clone(),
            keys.clone(),
            config,
            AfterCommit::new(
                PostCache::new(
                    db.clone(),
                    redis.clone(),
                    keys.clone(),
                    CacheConfig {
                        ttl: Duration::from_secs(30),
                        jitter: Duration::from_secs(10),
                        missing_ttl: Duration::from_secs(5),
                        lock_ttl: Duration::from_secs(5),
                    },
                ),
                Publisher::new(redis.clone(), keys.live_channel()),
                db.clone(),
            ),
        );
        worker.ensure_groups().await?;
        // Pre-load the stream with the entries the toggle script would append (the event codec's fields).
        let mut conn = redis.clone();
        let stream = keys.like_stream(0);
        for chunk_start in (0..events).step_by(1000) {
            let mut pipe = redis::pipe();
            for n in chunk_start..(chunk_start + 1000).min(events) {
                let event = LikeEvent { target: LikeTarget::Post(1), user_id: n + 2, course_id: 1, liked: true };
                pipe.cmd("XADD").arg(&stream).arg("*").arg(event.stream_fields()).ignore();
            }
            let _: () = pipe.query_async(&mut conn).await?;
        }
        let started = Instant::now();
        // drain(), by hand, adding up where each step's time went (pipelined, the ack runs
        // behind the next step and is not in `ack`).
        let mut phases = BatchTimings::default();
        loop {
            let report =
                if pipelined { worker.process_pipelined(0).await? } else { worker.process_one_batch(0).await? };
            if report.read == 0 {
                worker.settle().await?;
                break;
            }
            phases.read += report.timings.read;
            phases.apply += report.timings.apply;
            phases.ack += report.timings.ack;
        }
        let elapsed = started.elapsed();
        let batches_run = worker.stats().batches.load(std::sync::atomic::Ordering::Relaxed);
        let count = One::find_by_statement(stmt("SELECT like_count::bigint AS v FROM posts WHERE id = 1", []))
            .one(&db)
            .await?
            .map_or(0, |r| r.v);
        let _: () = redis::cmd("DEL").arg(&stream).arg(keys.worker_lease(0)).query_async(&mut conn).await?;
        if count != events {
            return Err(AppError::Internal(format!("counter is {count}, expected {events}")));
        }
        // The SQL alone, in one transaction each: unlike the first `batch` users, then like
        // again (timed: the insert path, what a storm's batches are).
        let events = |liked: bool| -> Vec<LikeEvent> {
            (0..batch as i64)
                .map(|n| LikeEvent { target: LikeTarget::Post(1), user_id: n + 2, course_id: 1, liked })
                .collect()
        };
        let mut sql_only = Duration::ZERO;
        for liked in [false, true] {
            let started = Instant::now();
            let txn = db.begin().await?;
            let changed = apply::apply(&txn, &events(liked)).await?.changed;
            txn.commit().await?;
            sql_only = started.elapsed();
            if changed.len() != 1 {
                return Err(AppError::Internal("the SQL-only batch changed nothing".into()));
            }
        }
        Ok(ApplyRun { elapsed, batches: batches_run, sql_only, phases })
    }
    .await;
    fixture.drop().await?;
    outcome
}
