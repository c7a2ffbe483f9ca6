-- The home feed's transactional outbox. Creating a post inserts its row here in the
-- same statement, so a committed post always has one; the fan-out job claims rows with
-- FOR UPDATE SKIP LOCKED, pushes the post ids to timelines (or to a celebrity course's list),
-- and deletes the rows in the same transaction. A process that dies between COMMIT and the
-- pushes leaves the row for the next run; the pushes are idempotent, so a replay is harmless.
CREATE TABLE feed_outbox (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    post_id    bigint NOT NULL REFERENCES posts (id),
    course_id  bigint NOT NULL REFERENCES courses (id),
    created_at timestamptz NOT NULL DEFAULT now()
);
