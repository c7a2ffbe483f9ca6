//! The like worker (level 3): the one active consumer of each like-stream shard.
//!
//! Each round, per shard: hold the shard's lease (taking over a lapsed one bumps the shard's
//! fencing epoch in PostgreSQL, then claims the previous consumer's pending entries with
//! XAUTOCLAIM); read, only while holding the lease (`lua/like_read.lua`), our own pending entries
//! first, then new ones, up to a batch; collapse; apply everything in ONE PostgreSQL transaction
//! (`likes::apply`) whose first statement checks the epoch is still ours; after COMMIT, the
//! after-commit step (post cache, live counts), then one script (`lua/like_batch_done.lua`) that
//! acknowledges the entries (XACK + XDEL), retires their pending records beside the liked-sets
//! and drops the sets of refused events. A crash between COMMIT and that script replays the
//! batch, and because counters follow RETURNING, nothing counts twice. A worker that stalled past
//! its lease reads nothing more and commits nothing.
//!
//! A batch that fails for a reason other than an unavailable database is retried entry by
//! entry; an entry that still fails alone after `max_deliveries` deliveries moves to the
//! dead-letter stream with its error (its set dropped, its record retired), and the stream goes
//! on. PostgreSQL down: nothing is acked, the worker backs off exponentially and drains when it
//! returns.
//!
//! In `recount` mode the same loop runs the recount job instead. Tests step the worker by
//! hand with `process_one_batch`, and hold it at chosen points with `WorkerHooks`.

pub mod lease;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::kv::Redis;
use redis::{Script, Value};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr, FromQueryResult, TransactionTrait};
use tokio::sync::watch;

use crate::backoff::{Backoff, pause_unless_shutdown};
use crate::config::{LikeMode, Settings};
use crate::db::stmt;
use crate::error::{AppError, AppResult};
use crate::hooks::Gate;
use crate::kv::keys::{Keys, LIKE_GROUP};
use crate::like_event::{CountChange, LikeEvent};
use crate::telemetry::otel::TraceRef;
use crate::likes::apply::{self, Applied};
use crate::likes::committed::AfterCommit;
use crate::likes::recount::DirtyMarks;
use crate::telemetry::names;
use lease::{Holding, Lease};

/// A deliberate crash for fault tests: `COURSE_FORUM_FAULT=abort-after-commit` (or
/// `abort-before-commit`) makes the process abort at that point of its first batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    AbortBeforeCommit,
    AbortAfterCommit,
}

impl Fault {
    pub fn from_env() -> Option<Self> {
        match std::env::var("COURSE_FORUM_FAULT").ok()?.as_str() {
            "abort-before-commit" => Some(Fault::AbortBeforeCommit),
            "abort-after-commit" => Some(Fault::AbortAfterCommit),
            _ => None,
        }
    }
}

#[derive(Clone, Debug)]
pub struct WorkerConfig {
    pub mode: LikeMode,
    pub batch_size: usize,
    pub lease_ttl: Duration,
    pub max_deliveries: u64,
    /// How long a read waits for new entries when the stream is idle.
    pub idle_wait: Duration,
    pub recount_interval: Duration,
    pub fault: Option<Fault>,
}

impl WorkerConfig {
    pub fn from_settings(settings: &Settings) -> Self {
        Self {
            mode: settings.like_mode,
            batch_size: settings.like_batch_size,
            lease_ttl: settings.worker_lease_ttl,
            max_deliveries: settings.worker_max_deliveries,
            idle_wait: Duration::from_millis(200),
            recount_interval: settings.recount_interval,
            fault: Fault::from_env(),
        }
    }
}

/// Counters for benchmarks and tests; operators read the same through `/metrics`
/// (`telemetry::names`), and the stream gauges from Redis (`ops::streams`).
#[derive(Debug, Default)]
pub struct WorkerStats {
    pub batches: AtomicU64,
    pub events_applied: AtomicU64,
    pub dead_letters: AtomicU64,
    pub batch_failures: AtomicU64,
    pub last_batch_size: AtomicU64,
    pub last_batch_micros: AtomicU64,
}

/// Points where a test can hold a running step (`crate::hooks::Gate`) to build a race step by
/// step: a worker that stalls after reading its batch, or inside its transaction.
#[derive(Default)]
pub struct WorkerHooks {
    /// After the lease was held (renewed or taken), before the batch is read.
    pub before_read: Gate,
    /// After the batch was read from the stream, before its transaction begins.
    pub before_apply: Gate,
    /// Inside the transaction, after every statement, before COMMIT (the target rows are locked).
    pub before_commit: Gate,
    /// After COMMIT, before the batch's entries are acknowledged and retired.
    pub before_retire: Gate,
    /// Makes the next retire fail as a Redis error would, after `before_retire` (fault tests).
    pub fail_next_retire: std::sync::atomic::AtomicBool,
}

/// What one step did.
#[derive(Debug, Default, Clone)]
pub struct BatchReport {
    /// Entries read from the stream.
    pub read: usize,
    /// Entries acknowledged after their batch committed (or after dead-lettering).
    pub acked: usize,
    pub dead_lettered: usize,
    /// Events the fences refused (deleted or foreign target, user not a member); acknowledged.
    pub refused: usize,
    /// Targets whose counter changed, with the committed count.
    pub changed: Vec<CountChange>,
    /// False when another consumer holds the shard's lease.
    pub leader: bool,
    /// Where the step's time went (benchmarks and slow-batch diagnosis).
    pub timings: BatchTimings,
}

/// The phases of one step.
#[derive(Debug, Default, Clone, Copy)]
pub struct BatchTimings {
    /// The guarded read (own pending, then new) and parsing the entries.
    pub read: Duration,
    /// Collapse, the one transaction (BEGIN … COMMIT) and publishing the counts.
    pub apply: Duration,
    /// Acknowledging the applied entries and retiring their pending records (one script).
    pub ack: Duration,
}

/// What one step on every shard did.
#[derive(Default)]
struct ShardRound {
    read: usize,
    acked: usize,
    /// Each shard stepped, and whether this worker held its lease.
    leaders: Vec<(u32, bool)>,
}

/// What a read as the lease owner found.
enum Read {
    /// The lease is someone else's now: nothing was read.
    NotOwner,
    Entries {
        entries: Vec<Entry>,
        /// Own entries delivered before and not acknowledged (a replay).
        from_pending: bool,
    },
    /// Nothing to read; `last_id` is the stream's newest entry id.
    Idle { last_id: String },
}

/// One stream entry, parsed or not.
#[derive(Clone)]
struct Entry {
    id: String,
    event: Result<LikeEvent, String>,
    /// The trace context of the mutation that appended it, when traces are on.
    trace: Option<TraceRef>,
}

/// What a shard's pipelined step leaves in flight for the next one (`step` with `pipelined`).
#[derive(Default)]
struct Carried {
    /// The last committed batch's retire script (ack, pending records), still running. The next
    /// batch commits only once it returned: acks stay in batch order, so a crash never leaves
    /// an older batch to replay over a newer one.
    retiring: Option<tokio::task::JoinHandle<AppResult<()>>>,
    /// The next batch, read ahead (new entries only, as the lease owner) while the last one's
    /// transaction ran, and the epoch it was read under: used only under the same epoch.
    ahead: Option<(Vec<Entry>, Option<i64>)>,
}

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

#[derive(Clone)]
pub struct LikeWorker {
    db: DatabaseConnection,
    redis: Redis,
    keys: Keys,
    config: WorkerConfig,
    lease: Lease,
    recount: DirtyMarks,
    after_commit: AfterCommit,
    stats: Arc<WorkerStats>,
    hooks: Arc<WorkerHooks>,
    /// The fencing token (`like_shard_epochs.epoch`) of every shard this worker holds.
    epochs: Arc<Mutex<HashMap<u32, i64>>>,
    /// `lua/like_batch_done.lua`: ack + retire pending records + drop sets, atomically.
    done: Arc<Script>,
    /// `lua/like_read.lua`: read a batch only while holding the lease.
    read: Arc<Script>,
    /// Per shard, what the last pipelined step left in flight.
    carried: Arc<Mutex<HashMap<u32, Carried>>>,
}

impl LikeWorker {
    /// `redis` should be a connection of the worker's own: blocking reads hold it.
    pub fn new(
        db: DatabaseConnection,
        redis: Redis,
        keys: Keys,
        config: WorkerConfig,
        after_commit: AfterCommit,
    ) -> Self {
        let consumer = format!("worker-{}", uuid::Uuid::new_v4().simple());
        Self {
            lease: Lease::new(redis.clone(), consumer, config.lease_ttl),
            recount: DirtyMarks::new(redis.clone(), keys.clone()),
            db,
            redis,
            keys,
            config,
            after_commit,
            stats: Arc::new(WorkerStats::default()),
            hooks: Arc::new(WorkerHooks::default()),
            epochs: Arc::new(Mutex::new(HashMap::new())),
            done: Arc::new(Script::new(include_str!("../../lua/like_batch_done.lua"))),
            read: Arc::new(Script::new(include_str!("../../lua/like_read.lua"))),
            carried: Arc::default(),
        }
    }

    pub fn consumer(&self) -> &str {
        self.lease.owner()
    }

    pub fn stats(&self) -> &WorkerStats {
        &self.stats
    }

    pub fn hooks(&self) -> &WorkerHooks {
        &self.hooks
    }

    /// Creates the consumer group of every shard (idempotent; MKSTREAM creates the stream).
    /// The group starts at `0` so entries written before it existed are applied too.
    pub async fn ensure_groups(&self) -> AppResult<()> {
        let mut conn = self.redis.clone();
        for shard in 0..self.keys.shards() {
            let created: redis::RedisResult<String> = redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(self.keys.like_stream(shard))
                .arg(LIKE_GROUP)
                .arg("0")
                .arg("MKSTREAM")
                .query_async(&mut conn)
                .await;
            match created {
                Ok(_) => {}
                Err(e) if e.code() == Some("BUSYGROUP") => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Holds the shard's lease; on taking it over, bumps the shard's fencing epoch in
    /// PostgreSQL (which waits for a batch of the previous owner still in flight) and claims
    /// every entry pending elsewhere.
    pub async fn hold_lease(&self, shard: u32) -> AppResult<bool> {
        match self.lease.hold(&self.keys.worker_lease(shard)).await? {
            Holding::Renewed if self.epoch(shard).is_some() => Ok(true),
            // Acquired, or renewed after an earlier attempt to take the epoch failed.
            Holding::Renewed | Holding::Acquired => {
                let epoch = self.take_epoch(shard).await?;
                // Claim before recording the epoch: if the claim fails, the next step takes a
                // new epoch and claims again, so no entry of the previous owner is left behind.
                self.claim_pending(shard).await?;
                self.set_epoch(shard, Some(epoch));
                tracing::info!(shard, epoch, consumer = self.consumer(), "took the shard lease");
                Ok(true)
            }
            Holding::Elsewhere => {
                self.set_epoch(shard, None);
                Ok(false)
            }
        }
    }

    fn epoch(&self, shard: u32) -> Option<i64> {
        self.epochs.lock().map(|epochs| epochs.get(&shard).copied()).unwrap_or(None)
    }

    fn set_epoch(&self, shard: u32, epoch: Option<i64>) {
        if let Ok(mut epochs) = self.epochs.lock() {
            match epoch {
                Some(epoch) => epochs.insert(shard, epoch),
                None => epochs.remove(&shard),
            };
        }
    }

    /// Bumps the shard's epoch and returns it: from now on only this worker's transactions
    /// pass the fence. Waits (up to the lock timeout) for the previous owner's batch in flight.
    async fn take_epoch(&self, shard: u32) -> AppResult<i64> {
        #[derive(FromQueryResult)]
        struct Epoch {
            epoch: i64,
        }
        let txn = self.db.begin().await?;
        txn.execute_unprepared("SET LOCAL lock_timeout = '5s'").await?;
        let epoch = Epoch::find_by_statement(stmt(
            "INSERT INTO like_shard_epochs (shard, epoch, owner) VALUES ($1, 1, $2) \
             ON CONFLICT (shard) DO UPDATE SET epoch = like_shard_epochs.epoch + 1, owner = EXCLUDED.owner, \
             taken_at = now() RETURNING epoch",
            [(shard as i32).into(), self.consumer().into()],
        ))
        .one(&txn)
        .await?
        .ok_or_else(|| AppError::Internal("taking a shard epoch returned no row".into()))?;
        txn.commit().await?;
        Ok(epoch.epoch)
    }

    async fn claim_pending(&self, shard: u32) -> AppResult<()> {
        let mut conn = self.redis.clone();
        let stream = self.keys.like_stream(shard);
        let mut start = "0-0".to_owned();
        loop {
            let reply: redis::streams::StreamAutoClaimReply = redis::cmd("XAUTOCLAIM")
                .arg(&stream)
                .arg(LIKE_GROUP)
                .arg(self.consumer())
                .arg(0)
                .arg(&start)
                .arg("COUNT")
                .arg(1000)
                .arg("JUSTID")
                .query_async(&mut conn)
                .await?;
            if reply.next_stream_id == "0-0" {
                return Ok(());
            }
            start = reply.next_stream_id;
        }
    }

    /// Gives up every lease this worker holds (on shutdown), so a successor starts at once.
    pub async fn release_leases(&self) {
        for shard in 0..self.keys.shards() {
            let _ = self.lease.release(&self.keys.worker_lease(shard)).await;
        }
    }

    /// One step on one shard: read up to a batch (own pending first), apply, ack. Does not
    /// block waiting for entries.
    pub async fn process_one_batch(&self, shard: u32) -> AppResult<BatchReport> {
        self.step(shard, None, false).await
    }

    /// One pipelined step on one shard (what the running worker does): the batch's
    /// transaction overlaps the previous batch's retire and, when the batch was full, the read
    /// of the next one; its own retire is left running (`settle` waits for it). Does not block
    /// waiting for entries.
    pub async fn process_pipelined(&self, shard: u32) -> AppResult<BatchReport> {
        self.step(shard, None, true).await
    }

    /// Waits for every retire a pipelined step left running, and forgets read-ahead batches
    /// (their entries stay pending, and are read again, oldest first).
    pub async fn settle(&self) -> AppResult<()> {
        let carried: Vec<Carried> =
            self.carried.lock().map(|mut map| map.drain().map(|(_, c)| c).collect()).unwrap_or_default();
        for carried in carried {
            if let Some(retiring) = carried.retiring {
                finish(retiring).await?;
            }
        }
        Ok(())
    }

    fn take_carried(&self, shard: u32) -> Carried {
        self.carried.lock().ok().and_then(|mut map| map.remove(&shard)).unwrap_or_default()
    }

    fn carry(&self, shard: u32, carried: Carried) {
        if let Ok(mut map) = self.carried.lock() {
            map.insert(shard, carried);
        }
    }

    /// One run of the recount job (level 2): returns how many counters it changed.
    pub async fn recount_once(&self) -> AppResult<usize> {
        let changed = self.recount.recount_once(&self.db, self.config.batch_size).await?;
        self.after_commit.like_counts(&changed).await;
        Ok(changed.len())
    }

    /// Steps every shard until a full round reads nothing. Returns entries acked.
    pub async fn drain(&self) -> AppResult<usize> {
        let mut acked = 0;
        loop {
            let round = self.step_every_shard(None).await?;
            acked += round.acked;
            if round.read == 0 {
                self.settle().await?;
                return Ok(acked);
            }
        }
    }

    /// Entries in every shard's stream not yet applied.
    pub async fn unapplied(&self) -> AppResult<u64> {
        unapplied_events(&self.redis, &self.keys).await
    }

    /// Applies everything in the streams, waiting for shards whose lease another worker holds,
    /// until they are empty or `deadline` passes (then an error that says what is left).
    pub async fn drain_until_empty(&self, deadline: Instant) -> AppResult<usize> {
        let mut acked = 0;
        // Shards whose last step found their lease held by another worker.
        let mut held_elsewhere = std::collections::BTreeSet::new();
        loop {
            // The deadline is checked between steps: a stream that keeps growing (buffered
            // instances still running) must not hold this up forever.
            let round = self.step_every_shard(Some(deadline)).await?;
            acked += round.acked;
            for (shard, leader) in &round.leaders {
                if *leader {
                    held_elsewhere.remove(shard);
                } else {
                    held_elsewhere.insert(*shard);
                }
            }
            let left = self.unapplied().await?;
            if left == 0 {
                self.settle().await?;
                return Ok(acked);
            }
            if Instant::now() >= deadline {
                let why = if held_elsewhere.is_empty() {
                    "they kept arriving faster than they were applied: are buffered-mode instances still running?"
                        .to_owned()
                } else {
                    format!(
                        "another worker holds shard(s) {held_elsewhere:?}: stop the buffered-mode workers, or let them finish"
                    )
                };
                return Err(AppError::Config(format!("{left} like event(s) are still in the like streams; {why}")));
            }
            if round.read == 0 {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }

    /// One step on every shard in turn, stopping early once `deadline` has passed.
    async fn step_every_shard(&self, deadline: Option<Instant>) -> AppResult<ShardRound> {
        let mut round = ShardRound::default();
        for shard in 0..self.keys.shards() {
            let report = self.process_pipelined(shard).await?;
            round.read += report.read;
            round.acked += report.acked;
            round.leaders.push((shard, report.leader));
            if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                break;
            }
        }
        Ok(round)
    }

    /// One step on one shard. `pipelined`: see `process_pipelined`; otherwise everything the
    /// step does is done when it returns.
    async fn step(&self, shard: u32, block: Option<Duration>, pipelined: bool) -> AppResult<BatchReport> {
        // Taken out first: whatever happens below, a read-ahead batch is used at most once.
        let Carried { retiring, ahead } = self.take_carried(shard);
        if !self.hold_lease(shard).await? {
            // The retire runs on (it acks committed entries); the read-ahead entries are in the
            // pending list the next owner claims.
            return Ok(BatchReport::default());
        }
        // A batch read ahead under another epoch (the lease was lost and taken again, and the
        // pending entries claimed meanwhile) is dropped: the read below starts from them.
        let ahead = ahead.filter(|(_, epoch)| pipelined && *epoch == self.epoch(shard)).map(|(entries, _)| entries);
        self.hooks.before_read.pass().await;
        let stream = self.keys.like_stream(shard);
        let reading = Instant::now();
        let (entries, from_pending, retiring) = match ahead {
            Some(entries) => (entries, false, retiring),
            None => {
                // Until the last batch's retire returns, its entries are still pending, and a
                // read (own pending first) would return them again.
                if let Some(retiring) = retiring {
                    finish(retiring).await?;
                }
                match self.read_as_owner(shard, false).await? {
                    Read::NotOwner => {
                        self.set_epoch(shard, None);
                        return Ok(BatchReport::default());
                    }
                    Read::Entries { entries, from_pending } => (entries, from_pending, None),
                    Read::Idle { last_id } => {
                        if let Some(block) = block {
                            self.wait_for_entries_after(&stream, &last_id, block).await?;
                        }
                        return Ok(BatchReport { leader: true, ..Default::default() });
                    }
                }
            }
        };
        let read_time = reading.elapsed();
        self.apply_batch(shard, &stream, entries, from_pending, read_time, retiring, pipelined).await
    }

    /// Applies what one read returned, in ONE transaction, and acknowledges it after COMMIT.
    /// Its span carries a `batch_id` that every log line of the batch repeats.
    ///
    /// Pipelined (`process_pipelined`), a batch of well-formed entries leaves its retire running
    /// for the next step, and a full batch read fresh from the stream (not a replay: nothing
    /// older can be pending behind it) reads the next one during its transaction.
    #[allow(clippy::too_many_arguments)]
    #[tracing::instrument(name = "like_batch", skip(self, stream, entries, read_time, retiring), fields(batch_id = %uuid::Uuid::now_v7(), entries = entries.len()))]
    async fn apply_batch(
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
                let retiring = tokio::spawn(async move {
                    let entries: Vec<&Entry> = entries.iter().collect();
                    worker.retire(shard, &entries, &refused).await
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
                self.retire(shard, &retired, &applied.refused).await?;
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
                    self.retire(shard, &[entry], &applied.refused).await?;
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
        let fence = txn
            .execute_raw(stmt(
                "SELECT 1 FROM like_shard_epochs WHERE shard = $1 AND epoch = $2 FOR SHARE",
                [(shard as i32).into(), epoch.into()],
            ))
            .await?;
        if fence.rows_affected() == 0 {
            txn.rollback().await?;
            return Ok(Transaction::Fenced);
        }
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
        let applied = applied?;
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

    /// Acknowledges (XACK + XDEL) entries whose fate is sealed — committed, refused or
    /// dead-lettered — and, in the same script (`lua/like_batch_done.lua`), removes the pending
    /// record each event left beside its liked-set, unless a later toggle replaced it. Drops
    /// the liked-sets of `drop_sets`: they hold an op PostgreSQL did not take (a refused or
    /// dead-lettered event) and must reload the truth.
    async fn retire(&self, shard: u32, entries: &[&Entry], drop_sets: &[(i64, i64)]) -> AppResult<()> {
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
        let mut conn = self.redis.clone();
        let _removed: i64 = invocation.invoke_async(&mut conn).await?;
        if !drop_sets.is_empty() {
            tracing::info!(shard, sets = drop_sets.len(), "dropped liked-sets holding ops PostgreSQL did not take");
        }
        Ok(())
    }

    /// Reads a batch only while holding the shard's lease (`lua/like_read.lua`): own pending
    /// entries first, then new ones. A worker that lost the lease reads nothing, so what it
    /// read before is exactly what the new owner claimed when it took over.
    ///
    /// `new_only` skips the own pending entries: for reading ahead while the batch before is
    /// in its transaction (still pending, it must not be read again).
    async fn read_as_owner(&self, shard: u32, new_only: bool) -> AppResult<Read> {
        let mut conn = self.redis.clone();
        let mut invocation = self.read.key(self.keys.worker_lease(shard));
        invocation.key(self.keys.like_stream(shard)).arg(self.consumer()).arg(LIKE_GROUP).arg(self.config.batch_size);
        if new_only {
            invocation.arg("new");
        }
        let reply: Vec<Value> = invocation.invoke_async(&mut conn).await?;
        let unexpected = |why: String| AppError::Internal(format!("unexpected like_read.lua reply: {why}"));
        let mut reply = reply.into_iter();
        let status = match reply.next() {
            Some(Value::Int(status)) => status,
            other => return Err(unexpected(format!("status {other:?}"))),
        };
        match status {
            0 => Ok(Read::NotOwner),
            3 => {
                // The group vanished (Redis restarted empty or the stream was deleted).
                self.ensure_groups().await?;
                Ok(Read::Idle { last_id: "0-0".into() })
            }
            1 | 2 => {
                let entries = parse_read_reply(reply.next().unwrap_or(Value::Nil)).map_err(unexpected)?;
                if !entries.is_empty() {
                    return Ok(Read::Entries { entries, from_pending: status == 1 });
                }
                let last_id = match reply.next() {
                    Some(Value::BulkString(id)) => String::from_utf8(id).map_err(|_| unexpected("last id".into()))?,
                    Some(Value::SimpleString(id)) => id,
                    _ => "0-0".into(),
                };
                Ok(Read::Idle { last_id })
            }
            other => Err(unexpected(format!("status {other}"))),
        }
    }

    /// The next batch of new entries, read as the lease owner while the current batch is in
    /// its transaction. Nothing when there is none, or the lease is gone.
    async fn read_ahead(&self, shard: u32) -> AppResult<Option<Vec<Entry>>> {
        Ok(match self.read_as_owner(shard, true).await? {
            Read::Entries { entries, .. } if !entries.is_empty() => Some(entries),
            _ => None,
        })
    }

    /// Waits up to `block` for an entry newer than `last_id` (plain XREAD: it takes no
    /// ownership; the next step reads it as the owner). An idle worker sleeps here instead of
    /// spinning, and wakes as soon as a like arrives.
    async fn wait_for_entries_after(&self, stream: &str, last_id: &str, block: Duration) -> AppResult<()> {
        let mut conn = self.redis.clone();
        let _: Value = redis::cmd("XREAD")
            .arg("COUNT")
            .arg(1)
            .arg("BLOCK")
            .arg(block.as_millis() as u64)
            .arg("STREAMS")
            .arg(stream)
            .arg(last_id)
            .query_async(&mut conn)
            .await?;
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
            letter.arg(event.flat_fields());
        }
        let _: String = letter.arg("error").arg(why).query_async(&mut conn).await?;
        let drop_sets: Vec<(i64, i64)> = entry.event.iter().map(|e| (e.user_id, e.course_id)).collect();
        self.retire(shard, &[entry], &drop_sets).await?;
        self.stats.dead_letters.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(names::LIKE_DEAD_LETTERS).increment(1);
        tracing::error!(shard, stream, id = %entry.id, error = why, "like event moved to the dead-letter stream");
        Ok(())
    }

    /// Runs until `shutdown` turns true: every shard in turn (buffered), or the recount job.
    /// A batch in flight at shutdown finishes (it is one transaction; an abandoned one is
    /// rolled back and stays pending, never acked).
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        if let Err(err) = self.ensure_groups().await {
            tracing::error!(error = %err, "cannot create consumer groups; will retry");
        }
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(10));
        while !*shutdown.borrow() {
            let round = match self.config.mode {
                LikeMode::Buffered => self.round(&shutdown).await,
                LikeMode::Recount => self.recount_once().await,
                LikeMode::Sync => Ok(0),
            };
            let pause = match round {
                Ok(0) if self.config.mode == LikeMode::Buffered => Duration::ZERO,
                Ok(0) => self.config.recount_interval,
                Ok(_) => {
                    backoff.reset();
                    Duration::ZERO
                }
                Err(err) => {
                    let pause = backoff.failed();
                    tracing::warn!(error = %err, retry_in = ?pause, "like worker round failed");
                    pause
                }
            };
            pause_unless_shutdown(pause, &mut shutdown).await;
        }
        if let Err(err) = self.settle().await {
            tracing::warn!(error = %err, "a batch's retire failed at shutdown; its entries are replayed");
        }
        self.release_leases().await;
        tracing::info!("like worker stopped");
    }

    /// One pass over all shards. When every shard was idle, the last read blocked briefly, so
    /// an idle worker does not spin. Stops between shards once shutdown is asked for.
    async fn round(&self, shutdown: &watch::Receiver<bool>) -> AppResult<usize> {
        let mut read = 0;
        let shards = self.keys.shards();
        for shard in 0..shards {
            if *shutdown.borrow() {
                break;
            }
            let block = (read == 0 && shard + 1 == shards).then_some(self.config.idle_wait);
            read += self.step(shard, block, true).await?.read;
        }
        Ok(read)
    }
}

/// Waits for a retire a pipelined step left running.
async fn finish(retiring: tokio::task::JoinHandle<AppResult<()>>) -> AppResult<()> {
    retiring.await.map_err(|e| AppError::Internal(format!("a batch's retire did not finish: {e}")))?
}

/// Entries in every like stream not yet applied (XLEN: applied entries are XDEL'd).
pub async fn unapplied_events(redis: &Redis, keys: &Keys) -> AppResult<u64> {
    let mut pipe = redis::pipe();
    for shard in 0..keys.shards() {
        pipe.cmd("XLEN").arg(keys.like_stream(shard));
    }
    let mut conn = redis.clone();
    let lengths: Vec<u64> = pipe.query_async(&mut conn).await?;
    Ok(lengths.iter().sum())
}

/// Walks an XREADGROUP reply (`[[stream, [[id, [field, value, …]], …]], …]`, or a map of
/// streams under RESP3; nil when nothing came) straight into entries. A batch is thousands of
/// entries: parsing each into a map of owned values first cost more than the read itself.
fn parse_read_reply(reply: Value) -> Result<Vec<Entry>, String> {
    let streams = match reply {
        Value::Nil => return Ok(Vec::new()),
        Value::Array(streams) => streams
            .into_iter()
            .map(|stream| match stream {
                Value::Array(mut pair) if pair.len() == 2 => Ok(pair.swap_remove(1)),
                other => Err(format!("a stream is not [name, entries]: {other:?}")),
            })
            .collect::<Result<Vec<_>, _>>()?,
        Value::Map(streams) => {
            streams.into_iter().map(|(_, entries)| Ok(entries)).collect::<Result<Vec<_>, String>>()?
        }
        other => return Err(format!("not an array of streams: {other:?}")),
    };
    let mut parsed = Vec::new();
    for entries in streams {
        let Value::Array(entries) = entries else { return Err("a stream's entries are not an array".into()) };
        parsed.reserve(entries.len());
        for entry in entries {
            let Value::Array(mut parts) = entry else { return Err("an entry is not [id, fields]".into()) };
            if parts.len() != 2 {
                return Err("an entry is not [id, fields]".into());
            }
            let fields = parts.pop().unwrap_or(Value::Nil);
            let id = match parts.pop() {
                Some(Value::BulkString(id)) => String::from_utf8(id).map_err(|_| "an entry id is not text")?,
                Some(Value::SimpleString(id)) => id,
                other => return Err(format!("an entry id is not a string: {other:?}")),
            };
            parsed.push(Entry { id, trace: trace_of(&fields), event: parse_event(&fields) });
        }
    }
    Ok(parsed)
}

/// One entry's fields as an event (`LikeEvent::decode`, the codec the toggle script's
/// arguments came from); anything else is the reason it cannot apply (it goes to the dead
/// letters).
fn parse_event(fields: &Value) -> Result<LikeEvent, String> {
    // A trimmed-then-claimed entry has nil fields: nothing to apply.
    let Value::Array(fields) = fields else { return Err("the entry has no fields".into()) };
    LikeEvent::decode(fields.chunks(2).filter_map(|pair| match pair {
        [Value::BulkString(name), Value::BulkString(value)] => Some((name.as_slice(), value.as_slice())),
        _ => None,
    }))
}

/// The trace context an entry carries (`LikeEvent::trace_of`), read only when traces are on.
fn trace_of(fields: &Value) -> Option<TraceRef> {
    if !crate::telemetry::otel::enabled() {
        return None;
    }
    let Value::Array(fields) = fields else { return None };
    LikeEvent::trace_of(fields.chunks(2).filter_map(|pair| match pair {
        [Value::BulkString(name), Value::BulkString(value)] => Some((name.as_slice(), value.as_slice())),
        _ => None,
    }))
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
    use super::*;
    use crate::like_event::LikeTarget;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    fn entry(id: &str, fields: &[&str]) -> Value {
        Value::Array(vec![bulk(id), Value::Array(fields.iter().map(|f| bulk(f)).collect())])
    }

    #[test]
    fn a_read_reply_parses_into_events_and_reasons() {
        let reply = Value::Array(vec![Value::Array(vec![
            bulk("cf:{s0}:likes"),
            Value::Array(vec![
                entry("1-0", &["op", "like", "t", "p:7", "u", "3", "c", "2"]),
                entry("2-0", &["op", "unlike", "t", "c:9", "u", "3", "c", "2"]),
                entry("3-0", &["op", "like", "t", "x:1", "u", "3", "c", "2"]),
                entry("4-0", &["op", "like", "u", "3", "c", "2"]),
                // An entry deleted from the stream while pending is read back with nil fields.
                Value::Array(vec![bulk("5-0"), Value::Nil]),
            ]),
        ])]);
        let entries = parse_read_reply(reply).expect("parses");
        let ids: Vec<&str> = entries.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["1-0", "2-0", "3-0", "4-0", "5-0"]);
        assert_eq!(
            entries[0].event,
            Ok(LikeEvent { target: LikeTarget::Post(7), user_id: 3, course_id: 2, liked: true })
        );
        assert_eq!(
            entries[1].event,
            Ok(LikeEvent { target: LikeTarget::Comment(9), user_id: 3, course_id: 2, liked: false })
        );
        assert_eq!(entries[2].event, Err("bad target".to_owned()));
        assert_eq!(entries[3].event, Err("missing field t".to_owned()));
        assert!(entries[4].event.is_err());
    }

    #[test]
    fn nil_is_no_entries_and_garbage_is_an_error() {
        assert!(parse_read_reply(Value::Nil).expect("nil").is_empty());
        assert!(parse_read_reply(Value::Int(3)).is_err());
        assert!(parse_read_reply(Value::Array(vec![Value::Int(3)])).is_err());
    }
}
