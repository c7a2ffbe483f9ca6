-- People brought in from outside: administrators, and identities from an external issuer.
--
-- `administrators`: users who may create courses and manage any course's roster (granted and
-- revoked with `course-forum admin`). Instructors manage only their own course's roster.
--
-- `user_identities`: which user an external issuer's subject is. The first valid token for a
-- new (issuer, subject) provisions a user and records it here; a roster import may record it
-- ahead of that first sign-in, so the person finds their courses waiting.

CREATE TABLE administrators (
    user_id    bigint PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    granted_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE user_identities (
    issuer     text NOT NULL CHECK (length(issuer) BETWEEN 1 AND 500),
    subject    text NOT NULL CHECK (length(subject) BETWEEN 1 AND 255),
    user_id    bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (issuer, subject)
);
CREATE INDEX user_identities_user_idx ON user_identities (user_id);
