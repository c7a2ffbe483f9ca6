//! Draining the streams: every shard stepped until nothing is left, for tests and for a
//! switch out of buffered mode (`startup::settle_like_mode_switch`), which must not start
//! while like events wait in Redis.

use std::time::{Duration, Instant};

use super::LikeWorker;
use crate::error::{AppError, AppResult};
use crate::kv::Redis;
use crate::kv::keys::Keys;

/// What one step on every shard did.
#[derive(Default)]
struct ShardRound {
    read: usize,
    acked: usize,
    /// Each shard stepped, and whether this worker held its lease.
    leaders: Vec<(u32, bool)>,
}

impl LikeWorker {
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
}

/// Entries in every like stream not yet applied (XLEN: applied entries leave the stream).
pub async fn unapplied_events(redis: &Redis, keys: &Keys) -> AppResult<u64> {
    let mut pipe = redis::pipe();
    for shard in 0..keys.shards() {
        pipe.cmd("XLEN").arg(keys.like_stream(shard));
    }
    let mut conn = redis.clone();
    let lengths: Vec<u64> = pipe.query_async(&mut conn).await?;
    Ok(lengths.iter().sum())
}
