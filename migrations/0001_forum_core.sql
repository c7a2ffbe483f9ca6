-- Forum core: people, courses, membership, posts, two-level comments, likes.
-- Every counter has a CHECK so that no code path can drive it below zero, and every like table
-- has its pair as PRIMARY KEY: the database is the last line against double likes.

CREATE TABLE users (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    handle       text NOT NULL UNIQUE CHECK (handle ~ '^[a-z0-9_]{2,32}$'),
    display_name text NOT NULL CHECK (length(display_name) BETWEEN 1 AND 100),
    created_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE courses (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    code       text NOT NULL UNIQUE CHECK (length(code) BETWEEN 1 AND 32),
    title      text NOT NULL CHECK (length(title) BETWEEN 1 AND 200),
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE course_members (
    course_id bigint NOT NULL REFERENCES courses (id) ON DELETE CASCADE,
    user_id   bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    role      text NOT NULL CHECK (role IN ('student', 'instructor')),
    joined_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (course_id, user_id)
);
-- "Which courses is this user in?" (myCourses, access checks, home feed).
CREATE INDEX course_members_user_idx ON course_members (user_id, course_id);

CREATE TABLE posts (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    course_id     bigint NOT NULL REFERENCES courses (id),
    user_id       bigint NOT NULL REFERENCES users (id),
    title         text NOT NULL,
    body          text NOT NULL,
    like_count    integer NOT NULL DEFAULT 0 CHECK (like_count >= 0),
    comment_count integer NOT NULL DEFAULT 0 CHECK (comment_count >= 0),
    view_count    bigint NOT NULL DEFAULT 0 CHECK (view_count >= 0),
    created_at    timestamptz NOT NULL DEFAULT now(),
    edited_at     timestamptz,
    deleted_at    timestamptz
);
-- A course's page of posts, newest first, keyset by id.
CREATE INDEX posts_course_feed_idx ON posts (course_id, id DESC) WHERE deleted_at IS NULL;

CREATE TABLE comments (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    post_id          bigint NOT NULL REFERENCES posts (id),
    -- NULL: a top-level comment. Otherwise the ROOT comment this reply hangs under (two levels,
    -- never deeper: a reply to a reply is attached to the root and remembers whom it answers).
    parent_id        bigint REFERENCES comments (id),
    -- Whom a reply answers (the author of the comment or reply it was written to).
    reply_to_user_id bigint REFERENCES users (id),
    user_id          bigint NOT NULL REFERENCES users (id),
    body             text NOT NULL,
    like_count       integer NOT NULL DEFAULT 0 CHECK (like_count >= 0),
    reply_count      integer NOT NULL DEFAULT 0 CHECK (reply_count >= 0),
    created_at       timestamptz NOT NULL DEFAULT now(),
    edited_at        timestamptz,
    deleted_at       timestamptz,
    CHECK ((parent_id IS NULL) = (reply_to_user_id IS NULL)),
    CHECK (parent_id IS NULL OR reply_count = 0)
);
-- Top-level comments of a post, oldest first.
CREATE INDEX comments_top_level_idx ON comments (post_id, id) WHERE parent_id IS NULL;
-- Replies of a root comment, oldest first.
CREATE INDEX comments_replies_idx ON comments (parent_id, id) WHERE parent_id IS NOT NULL;

CREATE TABLE post_likes (
    post_id    bigint NOT NULL REFERENCES posts (id),
    user_id    bigint NOT NULL REFERENCES users (id),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (post_id, user_id)
);
-- Everything one user liked (warming the per-user liked-set).
CREATE INDEX post_likes_user_idx ON post_likes (user_id, post_id);

CREATE TABLE comment_likes (
    comment_id bigint NOT NULL REFERENCES comments (id),
    user_id    bigint NOT NULL REFERENCES users (id),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (comment_id, user_id)
);
CREATE INDEX comment_likes_user_idx ON comment_likes (user_id, comment_id);
