-- How each user came to exist, so that a name is never taken as proof of who someone is.
--
-- `operator`: created by the people who run the forum (`roster import`, `seed --demo`, an
-- administrator, a direct insert). Its handle was chosen by them, so a roster line or
-- `admin grant` may find it by handle, and link an identity to it while it has none.
-- `sign_in`: provisioned by the first valid token of an identity provider's subject. Its
-- handle came from a claim the person chose (often their e-mail address), so it is found only
-- by that (issuer, subject), by its id, never by its handle (see `forum::roster::people`).

ALTER TABLE users
    ADD COLUMN provisioned_by text NOT NULL DEFAULT 'operator'
        CHECK (provisioned_by IN ('operator', 'sign_in'));

-- Users from before this column: a first sign-in wrote the user and its identity in one
-- transaction (one `now()`). A roster import that created a user with an identity did too, so
-- those are counted as signed in as well: they can still be named by issuer and subject.
UPDATE users u SET provisioned_by = 'sign_in'
WHERE EXISTS (SELECT 1 FROM user_identities i WHERE i.user_id = u.id AND i.created_at = u.created_at);
