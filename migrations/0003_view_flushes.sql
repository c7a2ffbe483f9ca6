-- Post views: the aggregator moves counted views from Redis into posts.view_count
-- in batches. Each batch has a uuid, recorded here by the same statement that applies it, so
-- a batch replayed after a crash (its Redis record not yet deleted) is recognised and skipped.
CREATE TABLE view_flushes (
    batch_id   uuid PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);
