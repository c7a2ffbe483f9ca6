-- `post_moves`: every post moved to another course (never an operation of the API: an
-- UPDATE by hand), with the id of the transaction that moved it.
--
-- Why: the kept search candidates of a course (`cache::search`) are checked against the
-- course's rows stamped since they were found (`search_xid`, migration 0022). A post moved
-- out of the course is stamped, but in its new course, so that read never meets it, and the
-- old course's kept candidates would go on showing it and its comments to the old course's
-- members. A search from kept candidates therefore also asks whether any post left the course
-- since their snapshot's xmin (one probe of `post_moves_from_idx`), and finds them again if
-- one did.
--
-- A row matters only while a cache entry older than it lives (`SEARCH_CACHE_TTL`, at most an
-- hour), so each move deletes the rows older than a day: the table holds a day of moves.
CREATE TABLE post_moves (
    moved_xid   xid8 NOT NULL DEFAULT pg_current_xact_id(),
    post_id     bigint NOT NULL,
    from_course bigint NOT NULL,
    to_course   bigint NOT NULL,
    moved_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX post_moves_from_idx ON post_moves (from_course, moved_xid);

CREATE FUNCTION posts_record_move() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM post_moves WHERE moved_at < now() - interval '1 day';
    INSERT INTO post_moves (post_id, from_course, to_course) VALUES (NEW.id, OLD.course_id, NEW.course_id);
    RETURN NULL;
END
$$;

CREATE TRIGGER posts_record_move AFTER UPDATE OF course_id ON posts
    FOR EACH ROW WHEN (OLD.course_id IS DISTINCT FROM NEW.course_id)
    EXECUTE FUNCTION posts_record_move();
