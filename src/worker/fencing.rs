//! Holding a shard: its lease (`lease`), the fencing epoch taken in PostgreSQL on taking it
//! over, and the claim of the previous owner's pending entries. Every transaction of a batch
//! checks that epoch first (`apply`), so a worker that stalled past its lease commits nothing.

use sea_orm::{ConnectionTrait, FromQueryResult, TransactionTrait};

use super::LikeWorker;
use super::lease::Holding;
use crate::db::stmt;
use crate::error::{AppError, AppResult};
use crate::kv::keys::LIKE_GROUP;

impl LikeWorker {
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
                self.forget_other_consumers(shard).await;
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

    pub(super) fn epoch(&self, shard: u32) -> Option<i64> {
        self.epochs.lock().map(|epochs| epochs.get(&shard).copied()).unwrap_or(None)
    }

    pub(super) fn set_epoch(&self, shard: u32, epoch: Option<i64>) {
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

    /// Once every pending entry is ours, the group's other consumers hold nothing: forgets them
    /// (`lua/like_consumers_forget.lua`), so the group does not keep one consumer per worker
    /// that ever held the shard. Best effort: a consumer left behind costs a little memory.
    async fn forget_other_consumers(&self, shard: u32) {
        let mut conn = self.redis.clone();
        let forgotten: Result<i64, _> = self
            .forget_consumers
            .key(self.keys.worker_lease(shard))
            .key(self.keys.like_stream(shard))
            .arg(self.consumer())
            .arg(LIKE_GROUP)
            .invoke_async(&mut conn)
            .await;
        match forgotten {
            Ok(n) if n > 0 => tracing::info!(shard, forgotten = n, "forgot the shard's idle consumers"),
            Ok(_) => {}
            Err(err) => tracing::warn!(shard, error = %err, "forgetting the shard's idle consumers failed"),
        }
    }

    /// Gives up every lease this worker holds (on shutdown), so a successor starts at once.
    pub async fn release_leases(&self) {
        for shard in 0..self.keys.shards() {
            let _ = self.lease.release(&self.keys.worker_lease(shard)).await;
        }
    }
}
