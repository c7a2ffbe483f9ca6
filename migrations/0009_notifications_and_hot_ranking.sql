-- Notifications, and the HOT order of a course's posts.
--
-- `notifications`: one row per (recipient, cause). The cause is the post (a mention in it),
-- the comment or reply (a reply to the recipient, or a mention in it), or a like milestone of
-- the recipient's post or comment (10, 100, 1000 likes); the unique index makes a second write
-- of the same cause a no-op, so a replayed write, a re-saved edit or a replayed like batch
-- notifies once. Rows are written in the cause's own transaction, so they exist exactly when
-- the cause committed. Deleting the cause deletes them (and readers join the cause, so a
-- deleted one is never shown even before that).
--
-- `notification_reads`: how far each user has read (every notification with a higher id is
-- unread): marking read is one row, whatever the number of notifications.

CREATE TABLE notifications (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    recipient_id bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    course_id    bigint NOT NULL REFERENCES courses (id) ON DELETE CASCADE,
    kind         text NOT NULL CHECK (kind IN ('reply', 'mention', 'milestone')),
    -- Who wrote the reply or the mention; NULL for a milestone.
    actor_id     bigint REFERENCES users (id) ON DELETE CASCADE,
    post_id      bigint NOT NULL REFERENCES posts (id),
    -- The comment or reply that caused it; NULL for a mention in a post.
    comment_id   bigint REFERENCES comments (id),
    -- The like count a milestone is for (0 for the other kinds).
    milestone    integer NOT NULL DEFAULT 0,
    -- A milestone's: the `like_version` of the update that reached it, so the after-commit
    -- step of that update finds exactly the milestones it committed, to deliver them live.
    cause_version bigint,
    created_at   timestamptz NOT NULL DEFAULT now(),
    CHECK ((kind = 'milestone') = (milestone > 0)),
    CHECK ((kind = 'milestone') = (actor_id IS NULL))
);
-- Exactly once per (recipient, cause).
CREATE UNIQUE INDEX notifications_cause_idx ON notifications (recipient_id, post_id, COALESCE(comment_id, 0), milestone);
-- A user's notifications, newest first (the list, the unread count, the per-user cap).
CREATE INDEX notifications_recipient_idx ON notifications (recipient_id, id DESC);
-- Withdrawal when a cause is deleted, and finding a like update's milestones.
CREATE INDEX notifications_post_idx ON notifications (post_id);
CREATE INDEX notifications_comment_idx ON notifications (comment_id) WHERE comment_id IS NOT NULL;

CREATE TABLE notification_reads (
    user_id    bigint PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    read_up_to bigint NOT NULL CHECK (read_up_to >= 0)
);

-- Like milestones: when an update raises a post's or comment's like count to or past 10, 100
-- or 1000, its author (while a member of the course) is notified, once per threshold: a
-- trigger, so every path that moves a count (the like worker's batch, sync, recount,
-- reconcile) does it inside its own transaction, and the unique index ignores a repeat (a
-- count that falls back and rises again, a replayed batch).
CREATE FUNCTION post_like_milestones() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO notifications (recipient_id, course_id, kind, post_id, milestone, cause_version)
    SELECT NEW.user_id, NEW.course_id, 'milestone', NEW.id, t.threshold, NEW.like_version
    FROM unnest(ARRAY[10, 100, 1000]) AS t(threshold)
    WHERE OLD.like_count < t.threshold AND NEW.like_count >= t.threshold
      AND EXISTS (SELECT 1 FROM course_members m WHERE m.course_id = NEW.course_id AND m.user_id = NEW.user_id)
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;

CREATE FUNCTION comment_like_milestones() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO notifications (recipient_id, course_id, kind, post_id, comment_id, milestone, cause_version)
    SELECT NEW.user_id, p.course_id, 'milestone', NEW.post_id, NEW.id, t.threshold, NEW.like_version
    FROM unnest(ARRAY[10, 100, 1000]) AS t(threshold)
    JOIN posts p ON p.id = NEW.post_id
    WHERE OLD.like_count < t.threshold AND NEW.like_count >= t.threshold
      AND EXISTS (SELECT 1 FROM course_members m WHERE m.course_id = p.course_id AND m.user_id = NEW.user_id)
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;

-- The WHEN clause lets only an update that crosses a threshold call the function: a like on a
-- post far past 1000 costs a comparison, not a statement.
CREATE TRIGGER posts_like_milestones AFTER UPDATE OF like_count ON posts
    FOR EACH ROW WHEN ((OLD.like_count < 10 AND NEW.like_count >= 10)
                    OR (OLD.like_count < 100 AND NEW.like_count >= 100)
                    OR (OLD.like_count < 1000 AND NEW.like_count >= 1000))
    EXECUTE FUNCTION post_like_milestones();
CREATE TRIGGER comments_like_milestones AFTER UPDATE OF like_count ON comments
    FOR EACH ROW WHEN ((OLD.like_count < 10 AND NEW.like_count >= 10)
                    OR (OLD.like_count < 100 AND NEW.like_count >= 100)
                    OR (OLD.like_count < 1000 AND NEW.like_count >= 1000))
    EXECUTE FUNCTION comment_like_milestones();

-- HOT: log10(max(1, likes + 2 * comments)) + seconds since the Unix epoch / 45000.
-- The age term grows with the post's creation time instead of shrinking with its age, so the
-- order decays by itself: a post 12.5 hours newer than another ranks level with it at ten
-- times less engagement, and no row is ever rewritten as time passes. (The epoch seconds of a
-- timestamptz do not depend on the time zone, so the function is truly IMMUTABLE.)
CREATE FUNCTION post_hot_score(likes integer, comments integer, created timestamptz)
    RETURNS double precision LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT log(GREATEST(1, likes + 2 * comments)::double precision)
           + extract(epoch FROM created)::double precision / 45000
$$;

-- Kept by every statement that changes a count (the like worker's batch, sync and recount,
-- comment writes, reconcile) in the same row update: the ranking commits with the counts.
--
-- Deliberately not indexed, and neither is like_count: an index on a count makes every like
-- of a hot post a non-HOT update (a new index entry in every index of `posts`, and dead ones
-- piling up under the hot row until vacuum), which cost sync mode 40 % of its likes/s in
-- `bench storm`. HOT and TOP pages rank the course's posts at read time instead (found through
-- posts_course_feed_idx, then a top-N sort): see docs/architecture.md, "HOT and TOP".
ALTER TABLE posts ADD COLUMN hot_score double precision
    GENERATED ALWAYS AS (post_hot_score(like_count, comment_count, created_at)) STORED;
