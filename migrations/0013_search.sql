-- Full-text search of posts, comments and replies, and similar titles (pg_trgm).
--
-- Each course has a text search configuration (`courses.search_config`: 'english' stems and
-- drops stop words, 'simple' only lowercases). Posts and comments carry a copy of their
-- course's configuration, so their tsvector can be a STORED generated column (a generated
-- column reads its own row only, and `to_tsvector(regconfig, text)` is immutable). The copy is
-- taken at insert by a BEFORE INSERT trigger, so every insert path (the API, the seed, the
-- bench generators) gets it right without naming it; `setSearchLanguage` rewrites the copies
-- of a course's posts and comments, which recomputes their vectors.
--
-- An UPDATE that changes none of title, body or search_config (likes, views, pins) does not
-- recompute the vectors (PostgreSQL skips generated columns whose inputs were not updated,
-- as long as the table has no BEFORE UPDATE row trigger), and the vector's value stays the
-- same, so such an update can still be heap-only.

ALTER TABLE courses ADD COLUMN search_config regconfig NOT NULL DEFAULT 'english'
    CHECK (search_config IN ('english'::regconfig, 'simple'::regconfig));

ALTER TABLE posts ADD COLUMN search_config regconfig NOT NULL DEFAULT 'english';
-- Title weighs A, body B: a match in the title ranks above one in the body.
ALTER TABLE posts ADD COLUMN search_doc tsvector GENERATED ALWAYS AS (
    setweight(to_tsvector(search_config, title), 'A') || setweight(to_tsvector(search_config, body), 'B')
) STORED;

ALTER TABLE comments ADD COLUMN search_config regconfig NOT NULL DEFAULT 'english';
-- Weight B like a post's body, so a comment ranks as the body of a post would.
ALTER TABLE comments ADD COLUMN search_doc tsvector GENERATED ALWAYS AS (setweight(to_tsvector(search_config, body), 'B')) STORED;

-- The copy of the course's configuration, taken at insert.
CREATE FUNCTION posts_take_search_config() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    SELECT search_config INTO NEW.search_config FROM courses WHERE id = NEW.course_id;
    NEW.search_config := coalesce(NEW.search_config, 'english'::regconfig);
    RETURN NEW;
END
$$;
CREATE TRIGGER posts_search_config BEFORE INSERT ON posts
    FOR EACH ROW EXECUTE FUNCTION posts_take_search_config();

CREATE FUNCTION comments_take_search_config() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    SELECT search_config INTO NEW.search_config FROM posts WHERE id = NEW.post_id;
    NEW.search_config := coalesce(NEW.search_config, 'english'::regconfig);
    RETURN NEW;
END
$$;
CREATE TRIGGER comments_search_config BEFORE INSERT ON comments
    FOR EACH ROW EXECUTE FUNCTION comments_take_search_config();

-- The matches of a query (bitmap scans; rare words). Live rows only: deleted ones are never
-- found.
CREATE INDEX posts_search_idx ON posts USING gin (search_doc) WHERE deleted_at IS NULL;
CREATE INDEX comments_search_idx ON comments USING gin (search_doc) WHERE deleted_at IS NULL;

-- Similar titles: trigram distance, nearest first (KNN on GiST: `ORDER BY title <-> $text`).
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE INDEX posts_title_trgm_idx ON posts USING gist (title gist_trgm_ops) WHERE deleted_at IS NULL;
