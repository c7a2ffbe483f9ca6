-- What each process's cache of search candidates (`cache::search`) needs to stay exact: which
-- transaction last wrote anything a search reads of a post or a comment, and where a student's
-- own private posts are.
--
-- `search_xid` is the id of the transaction that inserted the row or last changed a field that
-- decides whether a search finds it or how it scores: for a post its title, body, course,
-- author, privacy, kind, resolution, endorsement, creation time or search configuration; for a
-- comment its body, post, parent, deletion, endorsement, creation time or search configuration
-- (an accepted answer's boost is its post's resolution). A BEFORE UPDATE trigger restamps it;
-- likes, views, comment counts and pins do not fire it, so those updates stay heap-only. A
-- cache entry built by a statement whose snapshot's xmin was X has seen every row version written by a transaction older than X (each
-- had ended before that snapshot), so a search that reads the course's rows stamped at or
-- after X, together with the entry's candidates, misses nothing, whatever order the
-- transactions committed in (the reasoning of migration 0017).
ALTER TABLE posts ADD COLUMN search_xid xid8 NOT NULL DEFAULT pg_current_xact_id();
ALTER TABLE comments ADD COLUMN search_xid xid8 NOT NULL DEFAULT pg_current_xact_id();

CREATE FUNCTION search_xid_stamp() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.search_xid := pg_current_xact_id();
    RETURN NEW;
END
$$;

CREATE TRIGGER posts_search_xid BEFORE UPDATE OF title, body, course_id, user_id, private, kind,
        accepted_comment_id, resolved_at, deleted_at, search_config, endorsed_by, created_at ON posts
    FOR EACH ROW
    WHEN (OLD.title IS DISTINCT FROM NEW.title OR OLD.body IS DISTINCT FROM NEW.body
          OR OLD.course_id IS DISTINCT FROM NEW.course_id OR OLD.user_id IS DISTINCT FROM NEW.user_id
          OR OLD.private IS DISTINCT FROM NEW.private OR OLD.kind IS DISTINCT FROM NEW.kind
          OR OLD.accepted_comment_id IS DISTINCT FROM NEW.accepted_comment_id
          OR OLD.resolved_at IS DISTINCT FROM NEW.resolved_at OR OLD.deleted_at IS DISTINCT FROM NEW.deleted_at
          OR OLD.search_config IS DISTINCT FROM NEW.search_config OR OLD.endorsed_by IS DISTINCT FROM NEW.endorsed_by
          OR OLD.created_at IS DISTINCT FROM NEW.created_at)
    EXECUTE FUNCTION search_xid_stamp();

CREATE TRIGGER comments_search_xid BEFORE UPDATE OF body, post_id, parent_id, deleted_at, search_config,
        endorsed_by, created_at ON comments
    FOR EACH ROW
    WHEN (OLD.body IS DISTINCT FROM NEW.body OR OLD.post_id IS DISTINCT FROM NEW.post_id
          OR OLD.parent_id IS DISTINCT FROM NEW.parent_id OR OLD.deleted_at IS DISTINCT FROM NEW.deleted_at
          OR OLD.search_config IS DISTINCT FROM NEW.search_config OR OLD.endorsed_by IS DISTINCT FROM NEW.endorsed_by
          OR OLD.created_at IS DISTINCT FROM NEW.created_at)
    EXECUTE FUNCTION search_xid_stamp();

-- The catch-up reads: one course's posts stamped since an xmin, and every comment stamped since
-- one (usually a handful: what was written since the entry was built).
CREATE INDEX posts_search_xid_idx ON posts (course_id, search_xid);
CREATE INDEX comments_search_xid_idx ON comments (search_xid);

-- A student's own private posts (and through them their comments), which a cache entry shared
-- by the course's students does not hold.
CREATE INDEX posts_private_author_idx ON posts (course_id, user_id) WHERE private AND deleted_at IS NULL;
