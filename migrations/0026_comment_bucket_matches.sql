-- The matches of one query among some id buckets of comments (`forum::search`, a recent window
-- of buckets), newest first, on one generic plan: the word AND the buckets in
-- `comments_search_bucket_idx` (0025), whatever the words are.
--
-- Inline, each window was planned for its words. When the planner takes the words for rarer
-- than they are (the same word twice, `'w' & 'w'`, is estimated at its frequency squared; a
-- word outside the column's most common elements at a floor), looking the buckets up costs
-- more in its model than filtering the word's matches by bucket on the heap. It then read every
-- match of the word in the table: 8,741 heap rows for 100 candidates, 18 ms with the pages in
-- memory and 335 ms without (`auto_explain` of `bench search`). The generic plan knows nothing
-- of the words, so the buckets always narrow the scan: 1.0 ms for the same window.
--
-- STABLE, so it reads with the calling statement's snapshot. It returns the columns a window
-- scores and filters by (`WINDOW_COMMENT_COLUMNS`, in that order): the window reads their posts
-- newest first, by the function's ordinality, only until it has its candidates.
CREATE FUNCTION comment_matches_in_buckets(query tsquery, config regconfig, buckets bigint[])
RETURNS TABLE (id bigint, post_id bigint, parent_id bigint, search_doc tsvector, search_config regconfig,
               endorsed_by bigint, created_at timestamptz, user_id bigint, anonymous_to text)
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    RETURN QUERY
        SELECT c.id, c.post_id, c.parent_id, c.search_doc, c.search_config, c.endorsed_by, c.created_at,
               c.user_id, c.anonymous_to
        FROM comments c
        WHERE c.search_doc @@ query AND (c.id / 4096) = ANY(buckets) AND c.deleted_at IS NULL
          AND c.search_config = config
        ORDER BY c.id DESC;
END
$$;
