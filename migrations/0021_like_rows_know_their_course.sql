-- Like rows carry their course: a user's likes in one course are read from one index, without
-- visiting a post or comment row.
--
-- A liked-set is per (user, course), so every load (a first touch, `likes::buffered`'s reload,
-- the audit of `ops::liked_sets`) asks for "the likes of user U in course C". Without the
-- course on the like row, that joined posts (and comments) to learn each liked row's course.
-- Those are the hottest rows of the database: every like, comment and view rewrites a post's
-- counters, so the rows of a popular post are chains of versions, and each visit walked one.
-- With a generic plan (the first-touch pool keeps one) PostgreSQL also chose to read every post
-- of the course per user. On the like storm that runs after two earlier storms (each user with
-- two likes on hot posts), that was 0.3 ms of PostgreSQL per first touch.
--
-- Every writer of the server names the course it already proved (the target joined with its
-- course and the liker's membership, migrations 0005 and 0020). A writer that does not (a
-- server of an earlier version during a rolling upgrade, an insert by hand) gets it from the
-- target by a BEFORE INSERT trigger that runs only for such rows (its WHEN clause).
-- Moving a post to another course, or a comment to another post, is never done by the server;
-- done by hand, triggers move the likes' course along.

ALTER TABLE post_likes ADD COLUMN course_id bigint;
UPDATE post_likes l SET course_id = p.course_id FROM posts p WHERE p.id = l.post_id;
ALTER TABLE post_likes ALTER COLUMN course_id SET NOT NULL;

ALTER TABLE comment_likes ADD COLUMN course_id bigint;
UPDATE comment_likes l SET course_id = p.course_id
    FROM comments c JOIN posts p ON p.id = c.post_id WHERE c.id = l.comment_id;
ALTER TABLE comment_likes ALTER COLUMN course_id SET NOT NULL;

-- A user's likes in a course, in the order of their targets: read from the index alone.
DROP INDEX post_likes_user_idx;
CREATE INDEX post_likes_user_course_idx ON post_likes (user_id, course_id, post_id);
DROP INDEX comment_likes_user_idx;
CREATE INDEX comment_likes_user_course_idx ON comment_likes (user_id, course_id, comment_id);

CREATE FUNCTION like_row_takes_its_course() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'post_likes' THEN
        SELECT p.course_id INTO NEW.course_id FROM posts p WHERE p.id = NEW.post_id;
    ELSE
        SELECT p.course_id INTO NEW.course_id
            FROM comments c JOIN posts p ON p.id = c.post_id WHERE c.id = NEW.comment_id;
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER post_likes_take_their_course BEFORE INSERT ON post_likes
    FOR EACH ROW WHEN (NEW.course_id IS NULL) EXECUTE FUNCTION like_row_takes_its_course();
CREATE TRIGGER comment_likes_take_their_course BEFORE INSERT ON comment_likes
    FOR EACH ROW WHEN (NEW.course_id IS NULL) EXECUTE FUNCTION like_row_takes_its_course();

CREATE FUNCTION likes_follow_their_course() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'posts' THEN
        UPDATE post_likes SET course_id = NEW.course_id WHERE post_id = NEW.id;
        UPDATE comment_likes l SET course_id = NEW.course_id
            FROM comments c WHERE c.post_id = NEW.id AND l.comment_id = c.id;
    ELSE
        UPDATE comment_likes SET course_id = (SELECT course_id FROM posts WHERE id = NEW.post_id)
            WHERE comment_id = NEW.id;
    END IF;
    RETURN NULL;
END;
$$;

-- `UPDATE OF` fires only for statements that name the column: counters never do.
CREATE TRIGGER post_likes_follow_their_post AFTER UPDATE OF course_id ON posts
    FOR EACH ROW WHEN (OLD.course_id IS DISTINCT FROM NEW.course_id)
    EXECUTE FUNCTION likes_follow_their_course();
CREATE TRIGGER comment_likes_follow_their_comment AFTER UPDATE OF post_id ON comments
    FOR EACH ROW WHEN (OLD.post_id IS DISTINCT FROM NEW.post_id)
    EXECUTE FUNCTION likes_follow_their_course();
