-- Questions, answers and staff: kinds of posts, accepted answers, endorsements, pins, tags,
-- anonymous and private writing.
--
-- Staff are a course's instructors. Every column here is written only by a mutation that
-- checked the writer's role first; the CHECKs keep what no code path may produce out.

-- Whether members may write anonymously, and to whom: 'off' (never), 'classmates' (other
-- students see a pseudonym, staff see the author) or 'everyone' (staff see the pseudonym too).
ALTER TABLE courses ADD COLUMN anonymity text NOT NULL DEFAULT 'off'
    CHECK (anonymity IN ('off', 'classmates', 'everyone'));

-- Every existing post is a discussion.
ALTER TABLE posts ADD COLUMN kind text NOT NULL DEFAULT 'discussion'
    CHECK (kind IN ('question', 'discussion', 'announcement'));
-- NULL: signed. Otherwise whom the author is hidden from, as the course allowed at writing
-- time (a later change of the course setting does not unmask anything written before).
ALTER TABLE posts ADD COLUMN anonymous_to text CHECK (anonymous_to IN ('classmates', 'everyone'));
-- A private question: only its author and staff read it.
ALTER TABLE posts ADD COLUMN private boolean NOT NULL DEFAULT false;
ALTER TABLE posts ADD CONSTRAINT posts_private_is_a_question CHECK (NOT private OR kind = 'question');
ALTER TABLE posts ADD COLUMN pinned_at timestamptz;
-- The top-level comment the asker or staff accepted (questions only).
ALTER TABLE posts ADD COLUMN accepted_comment_id bigint REFERENCES comments (id);
ALTER TABLE posts ADD CONSTRAINT posts_answers_are_for_questions CHECK (accepted_comment_id IS NULL OR kind = 'question');
-- Staff marked the question resolved without accepting an answer.
ALTER TABLE posts ADD COLUMN resolved_at timestamptz;
ALTER TABLE posts ADD COLUMN endorsed_by bigint REFERENCES users (id);
ALTER TABLE posts ADD COLUMN endorsed_at timestamptz;
ALTER TABLE posts ADD CONSTRAINT posts_endorsement_whole CHECK ((endorsed_by IS NULL) = (endorsed_at IS NULL));

ALTER TABLE comments ADD COLUMN anonymous_to text CHECK (anonymous_to IN ('classmates', 'everyone'));
-- A reply's: the `anonymous_to` of what it answers, so `replyTo` hides whom the answered
-- writer hid.
ALTER TABLE comments ADD COLUMN reply_to_anonymous_to text CHECK (reply_to_anonymous_to IN ('classmates', 'everyone'));
ALTER TABLE comments ADD COLUMN endorsed_by bigint REFERENCES users (id);
ALTER TABLE comments ADD COLUMN endorsed_at timestamptz;
ALTER TABLE comments ADD CONSTRAINT comments_endorsement_whole CHECK ((endorsed_by IS NULL) = (endorsed_at IS NULL));

-- "Unanswered": no live comment or reply by anyone but the asker. Found per post through this
-- index (an anti-join), so no counter has to be kept right by every write and delete.
CREATE INDEX comments_post_author_idx ON comments (post_id, user_id) WHERE deleted_at IS NULL;
-- Pinned posts of a course, for the first page of every order.
CREATE INDEX posts_pinned_idx ON posts (course_id, pinned_at DESC) WHERE pinned_at IS NOT NULL AND deleted_at IS NULL;

-- A course's folders. Posts refer to tags by id, so a rename shows everywhere at once and a
-- delete removes the tag from every post (ON DELETE CASCADE) without touching a post row.
CREATE TABLE course_tags (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    course_id  bigint NOT NULL REFERENCES courses (id) ON DELETE CASCADE,
    name       text NOT NULL CHECK (length(name) BETWEEN 1 AND 40),
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX course_tags_name_idx ON course_tags (course_id, lower(name));

CREATE TABLE post_tags (
    post_id bigint NOT NULL REFERENCES posts (id),
    tag_id  bigint NOT NULL REFERENCES course_tags (id) ON DELETE CASCADE,
    PRIMARY KEY (post_id, tag_id)
);
-- A tag's posts (the tag filter).
CREATE INDEX post_tags_tag_idx ON post_tags (tag_id, post_id);

-- Secrets the server keeps in its database. 'pseudonyms' keys the names anonymous writers get
-- (HMAC of thread and author): without it nobody can compute whose a pseudonym is, and it
-- never changes, so a thread's names stay stable across restarts and instances.
-- gen_random_uuid() is built in (PostgreSQL 13+) and draws from a cryptographic source.
CREATE TABLE server_secrets (
    name   text PRIMARY KEY,
    secret text NOT NULL CHECK (length(secret) >= 32)
);
INSERT INTO server_secrets (name, secret)
VALUES ('pseudonyms', replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''));
