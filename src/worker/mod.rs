//! The like worker (level 3): the one active consumer of each like-stream shard.
//!
//! Each round, per shard: hold the shard's lease (taking over a lapsed one bumps the shard's
//! fencing epoch in PostgreSQL, then claims the previous consumer's pending entries with
//! XAUTOCLAIM); read, only while holding the lease (`lua/like_read.lua`), our own pending entries
//! first, then new ones, up to a batch; collapse; apply everything in ONE PostgreSQL transaction
//! (`likes::apply`) whose first statement checks the epoch is still ours; after COMMIT, the
//! after-commit step (post cache, live counts), then one script (`lua/like_batch_done.lua`) that
//! acknowledges the entries (XACK, then trimmed from the stream), retires their pending records beside the liked-sets
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
//!
//! The files, by concept (methods of `LikeWorker` live beside the concept they serve):
//!
//! - `lease`: a lease in Redis, taken and renewed only by its owner.
//! - `fencing`: holding a shard: its lease, the fencing epoch, claiming the previous owner's
//!   pending entries.
//! - `read`: reading as the lease owner (own pending first, then new), decoding entries.
//! - `apply`: one batch's fenced transaction, the retire script, the entry-by-entry retry and
//!   the dead letters; `is_transient`.
//! - `drain`: stepping every shard until the streams are empty (mode switches, tests).
//! - `run`: the step, its pipelining, the run loop and the recount job's turn.

mod apply;
mod drain;
mod fencing;
pub(crate) mod lease;
mod read;
mod run;

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::Script;
use sea_orm::DatabaseConnection;

use crate::config::{LikeMode, Settings};
use crate::hooks::Gate;
use crate::kv::Redis;
use crate::kv::keys::Keys;
use crate::like_event::CountChange;
use crate::likes::committed::AfterCommit;
use crate::likes::recount::DirtyMarks;
use lease::Lease;
use run::Carried;

pub use apply::is_transient;
pub use drain::unapplied_events;

/// A deliberate crash for fault tests: `COURSE_FORUM_FAULT=abort-before-commit` (or
/// `abort-after-commit`) makes the process abort at that point of its first batch, as a crash
/// would: no unwinding, no release of anything (docs/operations.md, "The crash hook").
///
/// A test hook on the production path, so it must cost nothing there: the variable is read
/// once, when the worker is configured (`WorkerConfig::from_settings`), and a batch compares
/// the field. It is an environment variable rather than a cargo feature because the tests run
/// the very binary `cargo test` builds (`CARGO_BIN_EXE_course-forum`): a feature would have to
/// be on in every test build, or the crash tests would not run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    AbortBeforeCommit,
    AbortAfterCommit,
}

impl Fault {
    /// Reads `COURSE_FORUM_FAULT`. Set, it is announced at once (a process that has it by
    /// mistake says so before it aborts); an unknown value is ignored, with a warning.
    pub fn from_env() -> Option<Self> {
        let value = std::env::var("COURSE_FORUM_FAULT").ok()?;
        let fault = match value.as_str() {
            "abort-before-commit" => Some(Fault::AbortBeforeCommit),
            "abort-after-commit" => Some(Fault::AbortAfterCommit),
            _ => None,
        };
        match fault {
            Some(fault) => tracing::warn!(
                ?fault,
                "COURSE_FORUM_FAULT is set: the like worker aborts the process in its first batch (a test hook)"
            ),
            None => tracing::warn!(
                value,
                "COURSE_FORUM_FAULT is ignored: it knows only abort-before-commit and abort-after-commit"
            ),
        }
        fault
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
    /// `lua/like_consumers_forget.lua`: forget the group's other, idle consumers on a takeover.
    forget_consumers: Arc<Script>,
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
            done: Arc::new(retire_script()),
            read: Arc::new(Script::new(include_str!("../../lua/like_read.lua"))),
            forget_consumers: Arc::new(Script::new(include_str!("../../lua/like_consumers_forget.lua"))),
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
}

/// The retire script (`lua/like_batch_done.lua` after its `load_stamp.lua` prelude), as the
/// worker runs it after a batch's COMMIT.
pub fn retire_script() -> Script {
    crate::kv::script(&[include_str!("../../lua/load_stamp.lua"), include_str!("../../lua/like_batch_done.lua")])
}
