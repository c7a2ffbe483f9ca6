-- The rows a similar-titles lookup reads (`cache::titles::similar_posts`): the winners by
-- primary key, and the course's posts stamped at or after the index's xmin. As a plain
-- statement PostgreSQL planned it on every lookup: the generic plan of `title_xid >= $3`
-- assumes a third of the course matches (the default for an inequality on an unknown value),
-- so it is a sequential scan and always looks dearer than a custom plan, which is then made
-- anew each time. Planning was most of the lookup's work in PostgreSQL (`GetCachedPlan`
-- 19 % of the machine during `bench search --kinds similar`, execution 8 %).
--
-- Here the function's own statement keeps one generic plan per session: the primary key for
-- the winners, `posts_title_xid_idx` for the stamped rows (`enable_seqscan = off` only inside
-- it: the stamped rows are few in practice, a handful of recent writes). STABLE, so it reads
-- with the calling statement's snapshot, the one whose xmin the index moves on to.
CREATE FUNCTION title_rows(course bigint, winners bigint[], since xid8) RETURNS SETOF posts
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
BEGIN
    RETURN QUERY
        SELECT * FROM posts WHERE id = ANY(winners) AND course_id = course
        UNION ALL
        SELECT * FROM posts WHERE course_id = course AND title_xid >= since;
END
$$;
