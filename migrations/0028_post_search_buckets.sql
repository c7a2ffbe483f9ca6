-- Search's recent windows of posts read only their own matches, one id bucket at a time
-- (`forum::search`, POST_BUCKET), as comments' windows do since 0025.
--
-- Planned per query, a window of the newest 2,500 post ids took the word's GIN bitmap (every
-- match of the word in the table, decoded) ANDed with the window's ids, or, misjudging the
-- word, the bitmap alone with the ids filtered on the heap: 1 to 6 ms for a word in a few per
-- cent of 100,000 posts, in every first sight of a search (`bench search`). Looked up in this
-- index by word AND bucket, newest bucket first and stopping at the bucket that completes the
-- candidates, the same windows take 0.3 to 0.9 ms.
--
-- 0025 left posts out because counters rewrite a post elsewhere in the table, so a bucket's
-- rows are scattered over its pages. Measured on such a table (the bench course's buckets of
-- 1,024 posts each spread over about 1,000 pages of 31,000), the per-bucket lookup still costs
-- about the bucket's matches. A scan for a word alone uses the first column as 0013's index
-- did, so this one replaces it.
CREATE INDEX posts_search_bucket_idx ON posts USING gin (search_doc, (id / 1024)) WHERE deleted_at IS NULL;

DROP INDEX posts_search_idx;
