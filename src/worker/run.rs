//! The run loop: one step per shard in turn (hold the lease, read, apply), pipelined so a
//! batch's transaction overlaps the previous retire and the next read (`Carried`), or the
//! recount job in `recount` mode; stepping by hand for tests (`process_one_batch`).

use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::read::{Entry, Read};
use super::{BatchReport, LikeWorker};
use crate::backoff::{Backoff, pause_unless_shutdown};
use crate::config::LikeMode;
use crate::error::{AppError, AppResult};

/// What a shard's pipelined step leaves in flight for the next one (`step` with `pipelined`).
#[derive(Default)]
pub(super) struct Carried {
    /// The last committed batch's retire script (ack, pending records), still running. The next
    /// batch commits only once it returned: acks stay in batch order, so a crash never leaves
    /// an older batch to replay over a newer one.
    pub(super) retiring: Option<tokio::task::JoinHandle<AppResult<()>>>,
    /// The next batch, read ahead (new entries only, as the lease owner) while the last one's
    /// transaction ran, and the epoch it was read under: used only under the same epoch.
    pub(super) ahead: Option<(Vec<Entry>, Option<i64>)>,
}

impl LikeWorker {
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

    pub(super) fn carry(&self, shard: u32, carried: Carried) {
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

    /// One step on one shard. `pipelined`: see `process_pipelined`; otherwise everything the
    /// step does is done when it returns.
    pub(super) async fn step(&self, shard: u32, block: Option<Duration>, pipelined: bool) -> AppResult<BatchReport> {
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
pub(super) async fn finish(retiring: tokio::task::JoinHandle<AppResult<()>>) -> AppResult<()> {
    retiring.await.map_err(|e| AppError::Internal(format!("a batch's retire did not finish: {e}")))?
}
