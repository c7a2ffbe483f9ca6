-- What each process's in-memory index of a course's titles (`cache::titles`) needs to stay
-- exact: which transaction last wrote the fields it keeps of a post, and which write that was.
--
-- `title_xid` is the id of the transaction that inserted the post or last changed its title,
-- course, author, privacy, kind, resolution or deletion (a BEFORE UPDATE trigger restamps it;
-- likes, views and pins do not fire it). An index that read its course at a statement whose
-- snapshot's xmin was X has seen every row version written by a transaction older than X,
-- because every such transaction had ended before that snapshot. So it catches up by reading
-- the course's rows with `title_xid >= X`, and no commit order can slip a row past it: a row
-- stamped by a transaction that was still running then is read again next time.
--
-- `title_version` counts those writes (1 at insert). Transaction ids do not order the writes
-- of one row: a transaction that took its id early can update the row after a younger one
-- did. The row lock serializes the writes, so the counter does; an index replaces the version
-- it holds only with a higher count.
ALTER TABLE posts ADD COLUMN title_xid xid8 NOT NULL DEFAULT pg_current_xact_id();
ALTER TABLE posts ADD COLUMN title_version bigint NOT NULL DEFAULT 1;

CREATE FUNCTION posts_title_xid_stamp() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.title_xid := pg_current_xact_id();
    NEW.title_version := OLD.title_version + 1;
    RETURN NEW;
END
$$;
CREATE TRIGGER posts_title_xid BEFORE UPDATE OF title, course_id, user_id, private, kind, accepted_comment_id,
        resolved_at, deleted_at ON posts
    FOR EACH ROW
    WHEN (OLD.title IS DISTINCT FROM NEW.title OR OLD.course_id IS DISTINCT FROM NEW.course_id
          OR OLD.user_id IS DISTINCT FROM NEW.user_id OR OLD.private IS DISTINCT FROM NEW.private
          OR OLD.kind IS DISTINCT FROM NEW.kind OR OLD.accepted_comment_id IS DISTINCT FROM NEW.accepted_comment_id
          OR OLD.resolved_at IS DISTINCT FROM NEW.resolved_at OR OLD.deleted_at IS DISTINCT FROM NEW.deleted_at)
    EXECUTE FUNCTION posts_title_xid_stamp();

-- The catch-up read: one course's rows stamped since a snapshot's xmin (usually none).
CREATE INDEX posts_title_xid_idx ON posts (course_id, title_xid);
