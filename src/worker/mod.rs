//! The like worker (level 3): the one active consumer of each like-stream shard.
//!
//! Each round, per shard: hold the shard's lease (taking over a lapsed one claims the previous
//! consumer's pending entries with XAUTOCLAIM); read our own pending entries first (id `0`),
//! then new ones (`>`), up to a batch; collapse; apply everything in ONE PostgreSQL
//! transaction (`likes::apply`); only after COMMIT, XACK + XDEL. A crash between COMMIT and
//! ACK replays the batch, and because counters follow RETURNING, nothing counts twice.
//!
//! A batch that fails for a reason other than an unavailable database is retried entry by
//! entry; an entry that still fails alone after `max_deliveries` deliveries moves to the
//! dead-letter stream with its error, and the stream goes on. PostgreSQL down: nothing is
//! acked, the worker backs off exponentially and drains when it returns.
//!
//! In `recount` mode the same loop runs the recount job instead. Tests step the worker by
//! hand with `process_one_batch`.

pub mod lease;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::kv::Redis;
use redis::Value;
use sea_orm::{DatabaseConnection, DbErr, TransactionTrait};
use tokio::sync::watch;

use crate::backoff::{Backoff, pause_unless_shutdown};
use crate::config::{LikeMode, Settings};
use crate::error::{AppError, AppResult};
use crate::hooks::Gate;
use crate::kv::keys::{Keys, LIKE_GROUP};
use crate::likes::apply::{self, Applied, LikeEvent};
use crate::likes::recount::DirtyMarks;
use crate::likes::{CountChange, LikeTarget};
use crate::live::Publisher;
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
    /// After the batch was read from the stream, before its transaction begins.
    pub before_apply: Gate,
    /// Inside the transaction, after every statement, before COMMIT (the target rows are locked).
    pub before_commit: Gate,
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
    /// XREADGROUP (own pending, then new) and parsing the entries.
    pub read: Duration,
    /// Collapse, the one transaction (BEGIN … COMMIT) and publishing the counts.
    pub apply: Duration,
    /// XACK + XDEL of the applied entries.
    pub ack: Duration,
}

/// One stream entry, parsed or not.
struct Entry {
    id: String,
    event: Result<LikeEvent, String>,
}

#[derive(Clone)]
pub struct LikeWorker {
    db: DatabaseConnection,
    redis: Redis,
    keys: Keys,
    config: WorkerConfig,
    lease: Lease,
    recount: DirtyMarks,
    publisher: Publisher,
    stats: Arc<WorkerStats>,
    hooks: Arc<WorkerHooks>,
}

impl LikeWorker {
    /// `redis` should be a connection of the worker's own: blocking reads hold it.
    pub fn new(db: DatabaseConnection, redis: Redis, keys: Keys, config: WorkerConfig, publisher: Publisher) -> Self {
        let consumer = format!("worker-{}", uuid::Uuid::new_v4().simple());
        Self {
            lease: Lease::new(redis.clone(), consumer, config.lease_ttl),
            recount: DirtyMarks::new(redis.clone(), keys.clone()),
            db,
            redis,
            keys,
            config,
            publisher,
            stats: Arc::new(WorkerStats::default()),
            hooks: Arc::new(WorkerHooks::default()),
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

    /// Holds the shard's lease; on taking it over, claims every entry pending elsewhere.
    pub async fn hold_lease(&self, shard: u32) -> AppResult<bool> {
        match self.lease.hold(&self.keys.worker_lease(shard)).await? {
            Holding::Renewed => Ok(true),
            Holding::Acquired => {
                self.claim_pending(shard).await?;
                tracing::info!(shard, consumer = self.consumer(), "took the shard lease");
                Ok(true)
            }
            Holding::Elsewhere => Ok(false),
        }
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
        self.step(shard, None).await
    }

    /// One run of the recount job (level 2): returns how many counters it changed.
    pub async fn recount_once(&self) -> AppResult<usize> {
        let changed = self.recount.recount_once(&self.db, self.config.batch_size).await?;
        self.publisher.counts(&changed).await;
        Ok(changed.len())
    }

    /// Steps every shard until a full round reads nothing. Returns entries acked.
    pub async fn drain(&self) -> AppResult<usize> {
        let mut acked = 0;
        loop {
            let mut read = 0;
            for shard in 0..self.keys.shards() {
                let report = self.process_one_batch(shard).await?;
                read += report.read;
                acked += report.acked;
            }
            if read == 0 {
                return Ok(acked);
            }
        }
    }

    async fn step(&self, shard: u32, block: Option<Duration>) -> AppResult<BatchReport> {
        if !self.hold_lease(shard).await? {
            return Ok(BatchReport::default());
        }
        let stream = self.keys.like_stream(shard);
        let reading = Instant::now();
        let mut entries = self.read(&stream, "0", None).await?;
        let from_pending = !entries.is_empty();
        if !from_pending {
            entries = self.read(&stream, ">", block).await?;
        }
        if entries.is_empty() {
            return Ok(BatchReport { leader: true, ..Default::default() });
        }
        // A blocking read of an idle stream is waiting, not reading: time non-blocking reads only.
        let read_time = if block.is_some() { Duration::ZERO } else { reading.elapsed() };
        self.apply_batch(shard, &stream, entries, from_pending, read_time).await
    }

    /// Applies what one read returned, in ONE transaction, and acknowledges it after COMMIT.
    /// Its span carries a `batch_id` that every log line of the batch repeats.
    #[tracing::instrument(name = "like_batch", skip(self, stream, entries, read_time), fields(batch_id = %uuid::Uuid::now_v7(), entries = entries.len()))]
    async fn apply_batch(
        &self,
        shard: u32,
        stream: &str,
        entries: Vec<Entry>,
        from_pending: bool,
        read_time: Duration,
    ) -> AppResult<BatchReport> {
        let stream = stream.to_owned();
        let mut report = BatchReport { leader: true, read: entries.len(), ..Default::default() };
        report.timings.read = read_time;
        let started = Instant::now();
        let events: Vec<LikeEvent> = entries.iter().filter_map(|e| e.event.as_ref().ok().copied()).collect();
        match self.apply_in_transaction(&events).await {
            Ok(applied) => {
                report.timings.apply = started.elapsed();
                let ids: Vec<&str> = entries.iter().filter(|e| e.event.is_ok()).map(|e| e.id.as_str()).collect();
                self.ack(&stream, &ids).await?;
                report.timings.ack = started.elapsed() - report.timings.apply;
                report.acked += ids.len();
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

    /// The poison path: each entry alone, in stream order. What fails alone stays pending until
    /// it has been delivered `max_deliveries` times, then goes to the dead letters.
    async fn one_by_one(&self, shard: u32, stream: &str, entries: &[Entry], report: &mut BatchReport) -> AppResult<()> {
        let deliveries = self.delivery_counts(stream, entries).await?;
        for entry in entries {
            let outcome = match &entry.event {
                Ok(event) => self.apply_in_transaction(std::slice::from_ref(event)).await,
                Err(why) => Err(AppError::Internal(why.clone())),
            };
            match outcome {
                Ok(applied) => {
                    self.ack(stream, &[entry.id.as_str()]).await?;
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

    /// Applies events in one transaction; after COMMIT publishes the new counts and drops the
    /// liked-sets of refused events (both idempotent: a replay after a crash repeats them).
    async fn apply_in_transaction(&self, events: &[LikeEvent]) -> AppResult<Applied> {
        let collapsed = apply::collapse(events.iter().copied());
        self.hooks.before_apply.pass().await;
        let txn = self.db.begin().await?;
        let applied = apply::apply(&txn, &collapsed).await?;
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
        self.publisher.counts(&applied.changed).await;
        self.drop_refused_sets(&applied.refused).await?;
        Ok(applied)
    }

    /// A refused event's liked-set holds a like or unlike PostgreSQL did not take (the target
    /// was deleted, or the user is no longer a member, e.g. a like accepted while PostgreSQL
    /// was unreachable): drop the set so it reloads the truth on next use.
    async fn drop_refused_sets(&self, refused: &[(i64, i64)]) -> AppResult<()> {
        if refused.is_empty() {
            return Ok(());
        }
        metrics::counter!(names::LIKE_EVENTS_REFUSED).increment(refused.len() as u64);
        // One UNLINK per set: the sets of one batch share the stream's slot, but a poison
        // replay may mix shards, and one command per key keeps Redis Cluster happy either way.
        let mut pipe = redis::pipe();
        for (user, course) in refused {
            pipe.cmd("UNLINK").arg(self.keys.liked_set(*user, *course)).ignore();
        }
        let mut conn = self.redis.clone();
        let () = pipe.query_async(&mut conn).await?;
        tracing::info!(sets = refused.len(), "dropped the liked-sets of refused like events");
        Ok(())
    }

    async fn read(&self, stream: &str, from: &str, block: Option<Duration>) -> AppResult<Vec<Entry>> {
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP").arg(LIKE_GROUP).arg(self.consumer()).arg("COUNT").arg(self.config.batch_size);
        if let Some(block) = block {
            cmd.arg("BLOCK").arg(block.as_millis() as u64);
        }
        cmd.arg("STREAMS").arg(stream).arg(from);
        let mut conn = self.redis.clone();
        let reply: Value = match cmd.query_async(&mut conn).await {
            Ok(reply) => reply,
            // The group vanished (Redis restarted empty or the stream was deleted): recreate it.
            Err(e) if e.code() == Some("NOGROUP") => {
                self.ensure_groups().await?;
                return Ok(Vec::new());
            }
            Err(e) => return Err(e.into()),
        };
        parse_read_reply(reply).map_err(|why| AppError::Internal(format!("unexpected XREADGROUP reply: {why}")))
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

    async fn ack(&self, stream: &str, ids: &[&str]) -> AppResult<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let mut conn = self.redis.clone();
        let _: (i64, i64) = redis::pipe()
            .atomic()
            .cmd("XACK")
            .arg(stream)
            .arg(LIKE_GROUP)
            .arg(ids)
            .cmd("XDEL")
            .arg(stream)
            .arg(ids)
            .query_async(&mut conn)
            .await?;
        Ok(())
    }

    async fn dead_letter(&self, shard: u32, stream: &str, entry: &Entry, why: &str) -> AppResult<()> {
        let mut conn = self.redis.clone();
        let (op, target, user, course) = match &entry.event {
            Ok(e) => (
                if e.liked { "like" } else { "unlike" }.to_owned(),
                e.target.member(),
                e.user_id.to_string(),
                e.course_id.to_string(),
            ),
            Err(_) => (String::new(), String::new(), String::new(), String::new()),
        };
        let _: String = redis::cmd("XADD")
            .arg(self.keys.dead_letters())
            .arg("*")
            .arg("shard")
            .arg(shard)
            .arg("entry")
            .arg(&entry.id)
            .arg("op")
            .arg(op)
            .arg("t")
            .arg(target)
            .arg("u")
            .arg(user)
            .arg("c")
            .arg(course)
            .arg("error")
            .arg(why)
            .query_async(&mut conn)
            .await?;
        self.ack(stream, &[entry.id.as_str()]).await?;
        self.stats.dead_letters.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(names::LIKE_DEAD_LETTERS).increment(1);
        tracing::error!(shard, id = %entry.id, error = why, "like event moved to the dead-letter stream");
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
            read += self.step(shard, block).await?.read;
        }
        Ok(read)
    }
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
            parsed.push(Entry { id, event: parse_event(&fields) });
        }
    }
    Ok(parsed)
}

/// One entry's fields (`op`, `t`, `u`, `c`, as `lua/like_toggle.lua` writes them) as an event;
/// anything else is the reason it cannot apply (it goes to the dead letters).
fn parse_event(fields: &Value) -> Result<LikeEvent, String> {
    let (mut op, mut target, mut user, mut course) = (None, None, None, None);
    // A trimmed-then-claimed entry has nil fields: nothing to apply.
    let Value::Array(fields) = fields else { return Err("the entry has no fields".into()) };
    for pair in fields.chunks(2) {
        let [Value::BulkString(name), Value::BulkString(value)] = pair else { continue };
        let value = std::str::from_utf8(value).map_err(|_| "a field is not text")?;
        match name.as_slice() {
            b"op" => op = Some(value),
            b"t" => target = Some(value),
            b"u" => user = Some(value),
            b"c" => course = Some(value),
            _ => {}
        }
    }
    let target = LikeTarget::parse_member(target.ok_or("missing field t")?).ok_or("bad target")?;
    let user_id = user.ok_or("missing field u")?.parse::<i64>().map_err(|_| "bad user id")?;
    let course_id = course.ok_or("missing field c")?.parse::<i64>().map_err(|_| "bad course id")?;
    let liked = match op.ok_or("missing field op")? {
        "like" => true,
        "unlike" => false,
        other => return Err(format!("bad op {other}")),
    };
    Ok(LikeEvent { target, user_id, course_id, liked })
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
