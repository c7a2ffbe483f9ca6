-- Fencing tokens for the like worker.
--
-- The Redis lease of a like-stream shard says who SHOULD apply its events; it cannot stop a
-- worker that stalled past its lease (a GC pause, a starved pool, a stalled PostgreSQL) from
-- committing the batch it read earlier, after another worker took the shard over and applied
-- newer events: an unlike could come back as a like. So every worker that takes a shard bumps
-- the shard's epoch here, and every batch transaction first locks this row FOR SHARE where the
-- epoch is still its own. No row: the worker lost the shard, and the batch rolls back. A taker's
-- bump waits for a batch in flight to commit, so batches of two workers never interleave.
CREATE TABLE like_shard_epochs (
    shard integer PRIMARY KEY CHECK (shard >= 0),
    epoch bigint NOT NULL CHECK (epoch > 0),
    -- The consumer that took it last, and when (for operators).
    owner text NOT NULL,
    taken_at timestamptz NOT NULL DEFAULT now()
);
