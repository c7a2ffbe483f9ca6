-- A per-target version that moves with every like_count change, in the same UPDATE. Live
-- subscribers receive (count, version) after commit and keep only the newest version, so two
-- commits published out of order can never leave a client showing the older count.
ALTER TABLE posts ADD COLUMN like_version bigint NOT NULL DEFAULT 0;
ALTER TABLE comments ADD COLUMN like_version bigint NOT NULL DEFAULT 0;
