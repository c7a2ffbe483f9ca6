//! Applying a batch: collapse, ONE transaction fenced by the shard's epoch (`likes::apply`),
//! the after-commit step, then the retire script (`lua/like_batch_done.lua`: ack, pending
//! records, dropped sets). A batch that fails for good is retried entry by entry, and an entry
//! that keeps failing alone goes to the dead letters; an outage (`is_transient`) is only retried.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use sea_orm::{DbErr, FromQueryResult, TransactionTrait};

use super::read::Entry;
use super::run::{Carried, finish};
use super::{BatchReport, Fault, LikeWorker};
use crate::db::stmt;
use crate::error::{AppError, AppResult};
use crate::kv::keys::LIKE_GROUP;
use crate::like_event::LikeEvent;
use crate::likes::apply::{self, Applied};
use crate::telemetry::names;

/// How a batch's transaction ended.
enum Transaction {
    /// Committed; with the next batch if it was read ahead.
    Committed(Applied, Option<Vec<Entry>>),
    /// The fence refused: this worker no longer owns the shard; nothing committed.
    Fenced,
    /// The previous batch's retire failed, so this batch was rolled back (see `Carried`).
    PreviousRetireFailed(AppError),
}

/// What a transaction may overlap.
#[derive(Default)]
struct Overlap {
    /// The previous batch's retire, awaited before COMMIT.
    retiring: Option<tokio::task::JoinHandle<AppResult<()>>>,
    /// Read the next batch meanwhile.
    read_ahead: bool,
}

impl LikeWorker {
    /// Applies what one read returned, in ONE transaction, and acknowledges it after COMMIT.
    /// Its span carries a `batch_id` that every log line of the batch repeats.
    ///
    /// Pipelined (`process_pipelined`), a batch of well-formed entries leaves its retire running
    /// for the next step, and a full batch read fresh from the stream (not a replay: nothing
    /// older can be pending behind it) reads the next one during its transaction.
    // What `run::step`, its one caller, read and carried for this batch; a struct for one call
    // would only move the list.
    #[allow(clippy::too_many_arguments)]
    #[tracing::instrument(name = "like_batch", skip(self, stream, entries, read_time, retiring), fields(batch_id = %uuid::Uuid::now_v7(), entries = entries.len()))]
    pub(super) async fn apply_batch(
        &self,
        shard: u32,
        stream: &str,
        entries: Vec<Entry>,
        from_pending: bool,
        read_time: Duration,
        retiring: Option<tokio::task::JoinHandle<AppResult<()>>>,
        pipelined: bool,
    ) -> AppResult<BatchReport> {
        let stream = stream.to_owned();
        // The batch is a trace of its own, linked to every like in it (OpenTelemetry's shape for
        // a consumer that handles many messages at once).
        let batch_span = tracing::Span::current();
        for trace in entries.iter().filter_map(|entry| entry.trace) {
            trace.link_from(&batch_span);
        }
        let mut report = BatchReport { leader: true, read: entries.len(), ..Default::default() };
        report.timings.read = read_time;
        let started = Instant::now();
        let events: Vec<LikeEvent> = entries.iter().filter_map(|e| e.event.as_ref().ok().copied()).collect();
        let well_formed = events.len() == entries.len();
        let overlap = Overlap {
            retiring,
            read_ahead: pipelined && well_formed && !from_pending && entries.len() >= self.config.batch_size,
        };
        match self.apply_in_transaction(shard, &events, overlap).await {
            Ok(Transaction::Fenced) => return Ok(self.fenced(shard, report)),
            Ok(Transaction::PreviousRetireFailed(err)) => {
                self.stats.batch_failures.fetch_add(1, Ordering::Relaxed);
                metrics::counter!(names::LIKE_BATCHES, "result" => "failed").increment(1);
                return Err(err);
            }
            Ok(Transaction::Committed(applied, ahead)) if pipelined && well_formed => {
                report.timings.apply = started.elapsed();
                let worker = self.clone();
                let refused = applied.refused.clone();
                let xid = applied.xid.clone();
                let retiring = tokio::spawn(async move {
                    let entries: Vec<&Entry> = entries.iter().collect();
                    worker.retire(shard, &entries, &refused, &xid).await
                });
                let epoch = self.epoch(shard);
                self.carry(shard, Carried { retiring: Some(retiring), ahead: ahead.map(|entries| (entries, epoch)) });
                report.acked += report.read;
                report.refused = applied.refused.len();
                report.changed = applied.changed;
            }
            Ok(Transaction::Committed(applied, _)) => {
                report.timings.apply = started.elapsed();
                let retired: Vec<&Entry> = entries.iter().filter(|e| e.event.is_ok()).collect();
                self.retire(shard, &retired, &applied.refused, &applied.xid).await?;
                report.timings.ack = started.elapsed() - report.timings.apply;
                report.acked += retired.len();
                report.refused = applied.refused.len();
                report.changed = applied.changed;
                // Malformed entries can never apply: straight to the dead letters.
                for entry in entries.iter().filter(|e| e.event.is_err()) {
                    let why = entry.event.as_ref().err().cloned().unwrap_or_default();
                    self.dead_letter(shard, &stream, entry, &why).await?;
                    report.dead_lettered += 1;
                    report.acked += 1;
                }
            }
            Err(err) if is_transient(&err) => {
                self.stats.batch_failures.fetch_add(1, Ordering::Relaxed);
                metrics::counter!(names::LIKE_BATCHES, "result" => "failed").increment(1);
                return Err(err);
            }
            Err(err) => {
                self.stats.batch_failures.fetch_add(1, Ordering::Relaxed);
                metrics::counter!(names::LIKE_BATCHES, "result" => "failed").increment(1);
                tracing::warn!(shard, error = %err, entries = entries.len(), "batch failed; retrying entries one by one");
                self.one_by_one(shard, &stream, &entries, &mut report).await?;
            }
        }
        let elapsed = started.elapsed();
        self.stats.batches.fetch_add(1, Ordering::Relaxed);
        self.stats.events_applied.fetch_add(report.acked as u64, Ordering::Relaxed);
        self.stats.last_batch_size.store(report.read as u64, Ordering::Relaxed);
        self.stats.last_batch_micros.store(elapsed.as_micros() as u64, Ordering::Relaxed);
        metrics::counter!(names::LIKE_BATCHES, "result" => "committed").increment(1);
        metrics::counter!(names::LIKE_EVENTS_APPLIED).increment(report.acked as u64);
        metrics::histogram!(names::LIKE_BATCH_ENTRIES).record(report.read as f64);
        metrics::histogram!(names::LIKE_BATCH_DURATION).record(elapsed.as_secs_f64());
        tracing::debug!(
            acked = report.acked,
            dead_lettered = report.dead_lettered,
            replayed = from_pending,
            micros = elapsed.as_micros() as u64,
            "like batch applied"
        );
        Ok(report)
    }

    /// A transaction found the fence moved: another worker took the shard while this one was
    /// stalled. Nothing was committed or acknowledged; the new owner replays what we read.
    fn fenced(&self, shard: u32, mut report: BatchReport) -> BatchReport {
        self.set_epoch(shard, None);
        metrics::counter!(names::LIKE_BATCHES, "result" => "fenced").increment(1);
        tracing::warn!(shard, consumer = self.consumer(), "lost the shard to another worker; batch rolled back");
        report.leader = false;
        report
    }

    /// The poison path: each entry alone, in stream order. What fails alone stays pending until
    /// it has been delivered `max_deliveries` times, then goes to the dead letters.
    async fn one_by_one(&self, shard: u32, stream: &str, entries: &[Entry], report: &mut BatchReport) -> AppResult<()> {
        let deliveries = self.delivery_counts(stream, entries).await?;
        for entry in entries {
            let outcome = match &entry.event {
                Ok(event) => {
                    match self.apply_in_transaction(shard, std::slice::from_ref(event), Overlap::default()).await {
                        Ok(Transaction::Committed(applied, _)) => Ok(Some(applied)),
                        Ok(Transaction::Fenced) => Ok(None),
                        Ok(Transaction::PreviousRetireFailed(err)) | Err(err) => Err(err),
                    }
                }
                Err(why) => Err(AppError::Internal(why.clone())),
            };
            match outcome {
                Ok(None) => {
                    *report = self.fenced(shard, std::mem::take(report));
                    return Ok(());
                }
                Ok(Some(applied)) => {
                    self.retire(shard, &[entry], &applied.refused, &applied.xid).await?;
                    report.acked += 1;
                    report.refused += applied.refused.len();
                    report.changed.extend(applied.changed);
                }
                Err(err) if is_transient(&err) => return Err(err),
                Err(err) => {
                    let delivered = deliveries.get(&entry.id).copied().unwrap_or(u64::MAX);
                    if entry.event.is_err() || delivered >= self.config.max_deliveries {
                        self.dead_letter(shard, stream, entry, &err.to_string()).await?;
                        report.dead_lettered += 1;
                        report.acked += 1;
                    } else {
                        tracing::warn!(shard, id = %entry.id, delivered, error = %err, "entry failed alone; will retry");
                    }
                }
            }
        }
        Ok(())
    }

    /// Applies events in one transaction fenced by the shard's epoch; after COMMIT runs the
    /// after-commit step (post cache, live counts; idempotent: a replay after a crash repeats
    /// it).
    ///
    /// With an `overlap`, the statements run while the previous batch's retire finishes and
    /// the next batch is read; COMMIT waits for both, and a failed retire rolls this batch
    /// back (its entries, and the ones read ahead, stay pending and are read again in order).
    async fn apply_in_transaction(&self, shard: u32, events: &[LikeEvent], overlap: Overlap) -> AppResult<Transaction> {
        let collapsed = apply::collapse(events.iter().copied());
        self.hooks.before_apply.pass().await;
        let Some(epoch) = self.epoch(shard) else { return Ok(Transaction::Fenced) };
        let txn = self.db.begin().await?;
        // The fence: first statement, and its row lock lasts until COMMIT, so a taker's bump
        // waits for this batch instead of overtaking it.
        // It also names the transaction, for the load stamps of the retire.
        #[derive(FromQueryResult)]
        struct Fence {
            xid: String,
        }
        let fence = Fence::find_by_statement(stmt(
            "SELECT pg_current_xact_id()::text AS xid FROM like_shard_epochs WHERE shard = $1 AND epoch = $2 FOR SHARE",
            [(shard as i32).into(), epoch.into()],
        ))
        .one(&txn)
        .await?;
        let Some(Fence { xid }) = fence else {
            txn.rollback().await?;
            return Ok(Transaction::Fenced);
        };
        let (applied, retired_before, ahead) = tokio::join!(
            apply::apply(&txn, &collapsed),
            async {
                match overlap.retiring {
                    Some(retiring) => finish(retiring).await,
                    None => Ok(()),
                }
            },
            async { if overlap.read_ahead { self.read_ahead(shard).await } else { Ok(None) } },
        );
        if let Err(err) = retired_before {
            // The previous batch's ack failed: this one must not commit after it (see
            // `Carried`); the next step reads both again, oldest first.
            txn.rollback().await?;
            return Ok(Transaction::PreviousRetireFailed(err));
        }
        let mut applied = applied?;
        applied.xid = xid;
        let ahead = ahead.unwrap_or_else(|err| {
            tracing::warn!(shard, error = %err, "reading the next batch ahead failed; it is read again");
            None
        });
        self.hooks.before_commit.pass().await;
        if self.config.fault == Some(Fault::AbortBeforeCommit) {
            tracing::error!("fault injection: aborting before COMMIT");
            std::process::abort();
        }
        txn.commit().await?;
        if self.config.fault == Some(Fault::AbortAfterCommit) {
            tracing::error!("fault injection: aborting after COMMIT, before ACK");
            std::process::abort();
        }
        // Committed: now, and only now, the counts may be shown.
        self.after_commit.like_counts(&applied.changed).await;
        if !applied.refused.is_empty() {
            metrics::counter!(names::LIKE_EVENTS_REFUSED).increment(applied.refused.len() as u64);
        }
        Ok(Transaction::Committed(applied, ahead))
    }

    /// Acknowledges entries whose fate is sealed — committed, refused or dead-lettered — and
    /// takes them out of the stream; in the same script (`lua/like_batch_done.lua`), removes
    /// the pending record each event left beside its liked-set, unless a later toggle replaced
    /// it. Drops the liked-sets of `drop_sets`: they hold an op PostgreSQL did not take (a
    /// refused or dead-lettered event) and must reload the truth.
    ///
    /// `xid` is the transaction that committed the entries (`0` when none did): each bucket
    /// whose record is removed is stamped with it, for first-touch loads (`lua/load_stamp.lua`).
    async fn retire(&self, shard: u32, entries: &[&Entry], drop_sets: &[(i64, i64)], xid: &str) -> AppResult<()> {
        if entries.is_empty() && drop_sets.is_empty() {
            return Ok(());
        }
        self.hooks.before_retire.pass().await;
        if self.hooks.fail_next_retire.swap(false, Ordering::SeqCst) {
            return Err(AppError::Internal("injected retire failure (WorkerHooks::fail_next_retire)".into()));
        }
        let events: Vec<(&str, &LikeEvent)> =
            entries.iter().filter_map(|e| e.event.as_ref().ok().map(|event| (e.id.as_str(), event))).collect();
        let mut invocation = self.done.key(self.keys.like_stream(shard));
        invocation.key(self.keys.load_generations(shard));
        for (_, event) in &events {
            invocation.key(self.keys.liked_pending(event.user_id, event.course_id));
        }
        for (user, course) in drop_sets {
            invocation.key(self.keys.liked_set(*user, *course));
        }
        invocation.arg(LIKE_GROUP).arg(entries.len()).arg(events.len());
        for entry in entries {
            invocation.arg(&entry.id);
        }
        for (id, event) in &events {
            invocation
                .arg(event.target.member())
                .arg(event.pending_record(id))
                .arg(self.keys.load_generation_bucket(event.user_id, event.course_id));
        }
        invocation.arg(xid);
        // The script trims the stream below these instead of deleting each id (it falls back
        // to deleting each id when they are missing).
        if let Some((highest, after)) = highest_and_next(entries.iter().map(|e| e.id.as_str())) {
            invocation.arg(highest).arg(after);
        }
        let mut conn = self.redis.clone();
        let _removed: i64 = invocation.invoke_async(&mut conn).await?;
        if !drop_sets.is_empty() {
            tracing::info!(shard, sets = drop_sets.len(), "dropped liked-sets holding ops PostgreSQL did not take");
        }
        Ok(())
    }

    async fn delivery_counts(&self, stream: &str, entries: &[Entry]) -> AppResult<HashMap<String, u64>> {
        let (Some(first), Some(last)) = (entries.first(), entries.last()) else { return Ok(HashMap::new()) };
        let mut conn = self.redis.clone();
        let reply: redis::streams::StreamPendingCountReply = redis::cmd("XPENDING")
            .arg(stream)
            .arg(LIKE_GROUP)
            .arg(&first.id)
            .arg(&last.id)
            .arg(entries.len())
            .arg(self.consumer())
            .query_async(&mut conn)
            .await?;
        Ok(reply.ids.into_iter().map(|p| (p.id, p.times_delivered as u64)).collect())
    }

    /// Moves an entry that can never apply to the dead-letter stream, with the error, then
    /// retires it; its liked-set is dropped (it holds the op that never reached PostgreSQL).
    async fn dead_letter(&self, shard: u32, stream: &str, entry: &Entry, why: &str) -> AppResult<()> {
        let mut conn = self.redis.clone();
        let mut letter = redis::cmd("XADD");
        letter.arg(self.keys.dead_letters()).arg("*").arg("shard").arg(shard).arg("entry").arg(&entry.id);
        if let Ok(event) = &entry.event {
            letter.arg(event.labelled_fields());
        }
        let _: String = letter.arg("error").arg(why).query_async(&mut conn).await?;
        let drop_sets: Vec<(i64, i64)> = entry.event.iter().map(|e| (e.user_id, e.course_id)).collect();
        // Nothing committed: no load stamp.
        self.retire(shard, &[entry], &drop_sets, "0").await?;
        self.stats.dead_letters.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(names::LIKE_DEAD_LETTERS).increment(1);
        tracing::error!(shard, stream, id = %entry.id, error = why, "like event moved to the dead-letter stream");
        Ok(())
    }
}

/// The highest of stream entry ids (`<ms>-<seq>`) and the id right after it, as the retire
/// script's trim bounds; `None` when there is none or one does not parse.
fn highest_and_next<'a>(ids: impl Iterator<Item = &'a str>) -> Option<(String, String)> {
    let mut highest: Option<(u64, u64)> = None;
    for id in ids {
        highest = highest.max(Some(crate::kv::parse_stream_id(id)?));
    }
    let (ms, seq) = highest?;
    let after = match seq.checked_add(1) {
        Some(next) => (ms, next),
        None => (ms.checked_add(1)?, 0),
    };
    Some((format!("{ms}-{seq}"), format!("{}-{}", after.0, after.1)))
}

/// Errors that mean "PostgreSQL (or Redis) is not there right now", as opposed to "this batch
/// can never apply". Transient ones are retried with backoff and never dead-lettered.
pub fn is_transient(err: &AppError) -> bool {
    match err {
        AppError::Redis(_) => true,
        AppError::Database(db) => {
            if err.unreachable().is_some() {
                return true;
            }
            match err.sqlstate() {
                // shutdown, insufficient resources, serialization failure, deadlock
                Some(code) => code.starts_with("57") || code.starts_with("53") || code == "40001" || code == "40P01",
                // The driver's verdict rather than PostgreSQL's (I/O, protocol): retried.
                None => matches!(
                    db,
                    DbErr::Exec(sea_orm::RuntimeErr::SqlxError(_)) | DbErr::Query(sea_orm::RuntimeErr::SqlxError(_))
                ),
            }
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::highest_and_next;

    #[test]
    fn the_trim_bounds_are_the_highest_id_and_the_one_after_it() {
        let ids = ["1700000000000-3", "1700000000001-0", "999-99"];
        assert_eq!(
            highest_and_next(ids.into_iter()),
            Some(("1700000000001-0".to_owned(), "1700000000001-1".to_owned()))
        );
        let last_seq = format!("5-{}", u64::MAX);
        assert_eq!(highest_and_next([last_seq.as_str()].into_iter()), Some((last_seq.clone(), "6-0".to_owned())));
        assert_eq!(highest_and_next(["1-0", "not an id"].into_iter()), None);
        assert_eq!(highest_and_next(std::iter::empty()), None);
    }
}
