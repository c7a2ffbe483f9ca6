-- Unread tracking: what each member has read of each course, without a row per unread post.
--
-- `unread_marks`: one row per (member, course) once they first read something there (none
-- before: nothing read). Posts with id <= `posts_read_through` are read, and comments and
-- replies with id <= `comments_read_through` are read. `markCourseRead` moves both marks to
-- the newest ids and deletes the member's exceptions of the course. The row outlives the
-- membership: a member who leaves and rejoins finds their read state as they left it.
CREATE TABLE unread_marks (
    user_id               bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    course_id             bigint NOT NULL REFERENCES courses (id) ON DELETE CASCADE,
    posts_read_through    bigint NOT NULL DEFAULT 0 CHECK (posts_read_through >= 0),
    comments_read_through bigint NOT NULL DEFAULT 0 CHECK (comments_read_through >= 0),
    PRIMARY KEY (user_id, course_id)
);

-- The exceptions: one row per post the member opened (`markPostRead`) while it was above the
-- course's post mark, or whose comments they read beyond the course's comment mark. The post
-- is read, and its comments and replies up to `comments_read_through`. At most
-- UNREAD_EXCEPTIONS_PER_COURSE rows per (member, course): past that the oldest posts' rows
-- are folded into the course marks (the oldest unread posts age out as read).
CREATE TABLE post_reads (
    user_id               bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    post_id               bigint NOT NULL REFERENCES posts (id),
    course_id             bigint NOT NULL REFERENCES courses (id) ON DELETE CASCADE,
    comments_read_through bigint NOT NULL CHECK (comments_read_through >= 0),
    PRIMARY KEY (user_id, post_id)
);
-- One member's exceptions in one course, oldest post first: the bound and `markCourseRead`.
CREATE INDEX post_reads_course_idx ON post_reads (user_id, course_id, post_id);

-- A post's live comments and replies above a mark (`unreadCommentCount`): a range of this
-- index per post, read from the index alone (the author is in it: others' comments count),
-- without a visit to the comments' rows, which are wide (their text and its search vector).
CREATE INDEX comments_post_live_idx ON comments (post_id, id) INCLUDE (user_id) WHERE deleted_at IS NULL;

-- A course's unread posts (`unreadPostCount`, the `unread` filter): its live posts above a
-- mark, with what decides whether they count for a reader (author, private) in the index, so
-- that counting up to the cap reads the index alone.
CREATE INDEX posts_unread_idx ON posts (course_id, id) INCLUDE (user_id, private) WHERE deleted_at IS NULL;
