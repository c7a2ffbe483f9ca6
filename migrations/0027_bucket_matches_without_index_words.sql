-- `comment_matches_in_buckets` (0026) for a query the index cannot look up: one whose
-- indexable part is `T` (`querytree`), that is only negations (`-word`, or stopwords and
-- `-word`: `that -filovo` in English is `!'filovo'`) or an OR with one (`word or -other`).
--
-- On its generic plan the function looked such a query up in `comments_search_bucket_idx`
-- anyway, and GIN answers a query without a word to look up by reading its whole index: one
-- window of 4 buckets took 2.2 s, and the search ran into `STATEMENT_TIMEOUT`
-- (`auto_explain` of `bench search`). Planned per query, the inline windows and the posts'
-- windows take the ids newest first instead, which such a query (matching most rows) fills at
-- once.
--
-- Here too: the buckets' ids are read newest first through the primary key, each row matched
-- on the heap. The match is written as its function, `ts_match_vq`, which no index serves, so
-- the generic plan cannot take the GIN index for it; the buckets are a range of ids, tested
-- exactly per row. The cost is at most the window's rows (4,096 per bucket, 16 buckets at
-- most: `MAX_WINDOW_BUCKETS`), where the whole index was read before.
CREATE OR REPLACE FUNCTION comment_matches_in_buckets(query tsquery, config regconfig, buckets bigint[])
RETURNS TABLE (id bigint, post_id bigint, parent_id bigint, search_doc tsvector, search_config regconfig,
               endorsed_by bigint, created_at timestamptz, user_id bigint, anonymous_to text)
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    IF querytree(query) = 'T' THEN
        RETURN QUERY
            SELECT c.id, c.post_id, c.parent_id, c.search_doc, c.search_config, c.endorsed_by, c.created_at,
                   c.user_id, c.anonymous_to
            FROM comments c
            WHERE c.id >= (SELECT min(b) * 4096 FROM unnest(buckets) b)
              AND c.id < (SELECT (max(b) + 1) * 4096 FROM unnest(buckets) b)
              AND (c.id + 0) / 4096 = ANY(buckets)
              AND ts_match_vq(c.search_doc, query) AND c.deleted_at IS NULL AND c.search_config = config
            ORDER BY c.id DESC;
    ELSE
        RETURN QUERY
            SELECT c.id, c.post_id, c.parent_id, c.search_doc, c.search_config, c.endorsed_by, c.created_at,
                   c.user_id, c.anonymous_to
            FROM comments c
            WHERE c.search_doc @@ query AND (c.id / 4096) = ANY(buckets) AND c.deleted_at IS NULL
              AND c.search_config = config
            ORDER BY c.id DESC;
    END IF;
END
$$;
