-- `search_departures`: every post or comment that left a course in a way that stamps nothing
-- in it: a post moved to another course, or a post or comment deleted for good (neither is an
-- operation of the API, which deletes softly: UPDATEs by hand), with the id of the
-- transaction that did it.
--
-- Why: the kept search candidates of a course (`cache::search`) are checked against the
-- course's rows stamped since they were found (`search_xid`, migration 0022). A post moved out
-- is stamped in its new course, and a deleted row carries no stamp at all, so that read never
-- meets either: the old course's kept candidates would go on showing a moved post and its
-- comments to the old course's members, and a full set that lost a row would not make room
-- for the older match a fresh search takes in its place. A search from kept candidates
-- therefore also asks whether anything left the course since their snapshot's xmin (one
-- probe of `search_departures_idx`), and finds them again if something did.
--
-- A row matters only while a cache entry older than it lives (`SEARCH_CACHE_TTL`, at most an
-- hour), so each departure deletes the rows older than a day: the table holds a day of them.
CREATE TABLE search_departures (
    departed_xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
    course_id    bigint NOT NULL,
    departed_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX search_departures_idx ON search_departures (course_id, departed_xid);

-- `course_id`: the course left (NULL: nothing to record, as for a comment whose post went
-- first in the same statement, whose own departure was recorded).
CREATE FUNCTION search_departure(course_id bigint) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF course_id IS NOT NULL THEN
        DELETE FROM search_departures WHERE departed_at < now() - interval '1 day';
        INSERT INTO search_departures (course_id) VALUES (course_id);
    END IF;
END
$$;

CREATE FUNCTION posts_record_departure() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM search_departure(OLD.course_id);
    RETURN NULL;
END
$$;

CREATE FUNCTION comments_record_departure() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM search_departure((SELECT p.course_id FROM posts p WHERE p.id = OLD.post_id));
    RETURN NULL;
END
$$;

CREATE TRIGGER posts_record_move AFTER UPDATE OF course_id ON posts
    FOR EACH ROW WHEN (OLD.course_id IS DISTINCT FROM NEW.course_id)
    EXECUTE FUNCTION posts_record_departure();
CREATE TRIGGER posts_record_delete AFTER DELETE ON posts
    FOR EACH ROW EXECUTE FUNCTION posts_record_departure();
CREATE TRIGGER comments_record_delete AFTER DELETE ON comments
    FOR EACH ROW EXECUTE FUNCTION comments_record_departure();
