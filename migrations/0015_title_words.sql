-- Similar titles through a per-course lexicon of title words.
--
-- A trigram walk over every title of a big course cannot prune: titles share the trigrams of
-- their common words, so the nearest fifty are found only after reading most of the index.
-- Instead, each course keeps the words of its live posts' titles (lowercased, `simple`
-- configuration) with the number of live posts whose title holds each one. A typed word is
-- corrected against that lexicon (an exact hit, or the nearest word by trigram distance), the
-- rarest corrected words pick the candidate titles (a GIN index on each title's words), and
-- only those candidates are compared with the typed text.
--
-- Triggers keep the counts: an insert adds its live posts' words (one upsert per statement);
-- an update of a title, of the course or of `deleted_at` moves one post's words; a delete
-- removes them. A word whose count reaches zero is removed. Updates of other columns (likes,
-- views, pins) do not fire them. Every change first takes its course's transaction-level
-- advisory lock (`title_words_lock`), so two writers of one course's lexicon never wait on
-- each other's word rows in a cycle (a frequent word's row serializes them anyway).

CREATE EXTENSION IF NOT EXISTS btree_gist;

CREATE TABLE title_words (
    course_id bigint NOT NULL,
    word text NOT NULL,
    posts integer NOT NULL CHECK (posts > 0),
    PRIMARY KEY (course_id, word)
) WITH (fillfactor = 50);
-- Every new post updates the counts of its words. Half-full pages leave room for those
-- updates to stay on their page (heap-only), so they add no index entries. From full pages,
-- the bench course's lexicon had a GiST index nine times its rebuilt size; three rounds of
-- updating every count were 98 % heap-only at fillfactor 50, under 1 % at 100.
-- Nearest word of a course to a typed one: KNN on trigram distance within the course.
CREATE INDEX title_words_trgm_idx ON title_words USING gist (course_id, word gist_trgm_ops);

-- The distinct words of a title, as the lexicon and the candidate index hold them.
CREATE FUNCTION title_words_of(title text) RETURNS text[] LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN tsvector_to_array(to_tsvector('simple'::regconfig, title));

-- Serializes the changes of one course's lexicon until the transaction ends. Two-key advisory
-- locks are a key space of their own (the project's single-key locks cannot meet them).
CREATE FUNCTION title_words_lock(course bigint) RETURNS void LANGUAGE sql
    RETURN pg_advisory_xact_lock(7415, (course % 2147483647)::integer);

-- Adds `delta` (+1 or -1) to each word's count in a course (removing words that reach zero).
-- The caller holds the course's lock.
CREATE FUNCTION title_words_add(course bigint, words text[], delta integer) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF delta > 0 THEN
        INSERT INTO title_words (course_id, word, posts)
        SELECT course, w, delta FROM unnest(words) w
        ON CONFLICT (course_id, word) DO UPDATE SET posts = title_words.posts + EXCLUDED.posts;
    ELSE
        DELETE FROM title_words WHERE course_id = course AND word = ANY(words) AND posts + delta <= 0;
        UPDATE title_words SET posts = posts + delta WHERE course_id = course AND word = ANY(words);
    END IF;
END
$$;

CREATE FUNCTION posts_title_words_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM title_words_lock(c) FROM (SELECT DISTINCT course_id AS c FROM new_posts WHERE deleted_at IS NULL ORDER BY 1) courses;
    INSERT INTO title_words (course_id, word, posts)
    SELECT n.course_id, w, count(*)::integer FROM new_posts n, unnest(title_words_of(n.title)) w
    WHERE n.deleted_at IS NULL
    GROUP BY n.course_id, w
    ON CONFLICT (course_id, word) DO UPDATE SET posts = title_words.posts + EXCLUDED.posts;
    RETURN NULL;
END
$$;
CREATE TRIGGER posts_title_words_insert AFTER INSERT ON posts
    REFERENCING NEW TABLE AS new_posts FOR EACH STATEMENT EXECUTE FUNCTION posts_title_words_inserted();

CREATE FUNCTION posts_title_words_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.course_id < OLD.course_id THEN
        PERFORM title_words_lock(NEW.course_id);
    END IF;
    PERFORM title_words_lock(OLD.course_id);
    IF TG_OP = 'UPDATE' AND NEW.course_id > OLD.course_id THEN
        PERFORM title_words_lock(NEW.course_id);
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.deleted_at IS NULL THEN
        PERFORM title_words_add(OLD.course_id, title_words_of(OLD.title), -1);
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.deleted_at IS NULL THEN
        PERFORM title_words_add(NEW.course_id, title_words_of(NEW.title), 1);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER posts_title_words_update AFTER UPDATE OF title, course_id, deleted_at ON posts
    FOR EACH ROW
    WHEN (OLD.title IS DISTINCT FROM NEW.title OR OLD.course_id IS DISTINCT FROM NEW.course_id
          OR OLD.deleted_at IS DISTINCT FROM NEW.deleted_at)
    EXECUTE FUNCTION posts_title_words_changed();
CREATE TRIGGER posts_title_words_delete AFTER DELETE ON posts
    FOR EACH ROW EXECUTE FUNCTION posts_title_words_changed();

-- The lexicon of what is already there.
INSERT INTO title_words (course_id, word, posts)
SELECT course_id, w, count(*)::integer FROM posts, unnest(title_words_of(title)) w
WHERE deleted_at IS NULL GROUP BY course_id, w;

-- Candidate titles: live posts holding any of the chosen words.
CREATE INDEX posts_title_words_idx ON posts USING gin (title_words_of(title)) WHERE deleted_at IS NULL;

-- The trigram walk over every title is no longer used.
DROP INDEX posts_title_trgm_idx;
