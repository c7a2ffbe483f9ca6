-- Like rows: membership proven by every writer instead of a per-row foreign key to users.
--
-- Every statement that inserts into post_likes or comment_likes (level 1's toggle, level 2's
-- insert, the worker's batch) joins course_members: a row is written only for a user who is a
-- member of the target's course at that moment. That is stronger than the foreign key to users
-- (course_members.user_id references users, so a member exists; a user who left the course
-- cannot like), and it lets the API accept buffered likes while PostgreSQL is unreachable: the
-- worker refuses, at apply time, a like whose user is no longer a member.
--
-- The foreign key's check was a trigger per inserted row; on a 5,000-like batch it cost about
-- as much as the rest of the statement (about 110 ms of 170 ms here). The membership join is one
-- index probe per row. The foreign keys to the liked posts and comments stay.
ALTER TABLE post_likes DROP CONSTRAINT post_likes_user_id_fkey;
ALTER TABLE comment_likes DROP CONSTRAINT comment_likes_user_id_fkey;
