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
-- STABLE, so it reads with the calling statement's snapshot. The ids only: the window reads
-- the rows it keeps, by primary key, after checking their posts.
CREATE FUNCTION comment_matches_in_buckets(query tsquery, config regconfig, buckets bigint[]) RETURNS bigint[]
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    RETURN (
        SELECT coalesce(array_agg(id ORDER BY id DESC), '{}')
        FROM comments
        WHERE search_doc @@ query AND (id / 4096) = ANY(buckets) AND deleted_at IS NULL AND search_config = config
    );
END
$$;
