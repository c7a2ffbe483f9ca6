-- Like rows: the liked post or comment proven by every writer instead of a per-row foreign key.
--
-- Every statement of the server that inserts into post_likes or comment_likes (level 1's
-- toggle, level 2's insert, the worker's batch) takes the target's id from the target's own
-- table, live (`deleted_at IS NULL`), joined with the user's membership of its course
-- (migration 0005 dropped the keys to users for the same reason). That is stronger than the
-- foreign key, which only proved the row exists. The demo seed likes a post it created in the
-- same transaction.
--
-- The foreign key's check was a trigger per inserted row that also took a KEY SHARE lock on the
-- liked row: on the worker's batch of 5,000 likes of one hot post it cost about a third of the
-- statement (65 ms with it, 42 ms without, `bench worker-apply`'s statement alone).
--
-- Posts and comments are never deleted by the server (a delete sets `deleted_at`). The other
-- half of the keys, refusing to delete a row that likes still name, stays: a trigger per
-- deleted row, as the foreign key's NO ACTION did, so a delete by hand cannot orphan likes.
ALTER TABLE post_likes DROP CONSTRAINT post_likes_post_id_fkey;
ALTER TABLE comment_likes DROP CONSTRAINT comment_likes_comment_id_fkey;

CREATE FUNCTION likes_keep_their_target() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    liked boolean;
BEGIN
    IF TG_TABLE_NAME = 'posts' THEN
        liked := EXISTS (SELECT 1 FROM post_likes WHERE post_id = OLD.id);
    ELSE
        liked := EXISTS (SELECT 1 FROM comment_likes WHERE comment_id = OLD.id);
    END IF;
    IF liked THEN
        RAISE EXCEPTION 'delete on table "%" violates its likes: row % is still liked', TG_TABLE_NAME, OLD.id
            USING ERRCODE = 'foreign_key_violation',
                  HINT = 'posts and comments are deleted by setting deleted_at';
    END IF;
    RETURN OLD;
END;
$$;

CREATE TRIGGER posts_keep_their_likes BEFORE DELETE ON posts
    FOR EACH ROW EXECUTE FUNCTION likes_keep_their_target();
CREATE TRIGGER comments_keep_their_likes BEFORE DELETE ON comments
    FOR EACH ROW EXECUTE FUNCTION likes_keep_their_target();
