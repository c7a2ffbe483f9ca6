-- Announcements: a staff post that notifies every member of its course, written once.
--
-- `course_announcements`: one row per announcement, in its post's transaction, whatever the
-- size of the course. A member's notifications are their own `notifications` rows merged with
-- the announcements of the courses they belong to, at read time (the home feed's celebrity
-- pattern), so announcing to 10,000 members costs one row, not 10,000.
--
-- The id is drawn from the notifications' own sequence: announcements and notifications share
-- one id order, so a member's merged list pages by one keyset (the id) and one watermark,
-- `notification_reads.read_up_to`, says what is read in both.
--
-- A member sees the announcements of a course written since they joined it (`joined_at`), not
-- their own. Deleting the announcement's post deletes the row (and readers join the post, so a
-- deleted one is never shown meanwhile).

DO $$
BEGIN
    EXECUTE format(
        'CREATE TABLE course_announcements (
            id         bigint PRIMARY KEY DEFAULT nextval(%L::regclass),
            course_id  bigint NOT NULL REFERENCES courses (id) ON DELETE CASCADE,
            post_id    bigint NOT NULL REFERENCES posts (id),
            author_id  bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
            created_at timestamptz NOT NULL DEFAULT now()
        )',
        pg_get_serial_sequence('notifications', 'id'));
END
$$;

-- One announcement per post: a retried write is a no-op, and withdrawal finds it by its post.
CREATE UNIQUE INDEX course_announcements_post_idx ON course_announcements (post_id);
-- A course's announcements, newest first: each member's page, unread count and live delivery.
CREATE INDEX course_announcements_course_idx ON course_announcements (course_id, id DESC);
