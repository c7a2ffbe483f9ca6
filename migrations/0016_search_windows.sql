-- The recent windows of search (`forum::search`, POST_WINDOW and COMMENT_WINDOW): BRIN indexes
-- on the ids, so "matches of this word among the newest 100,000 comments" is the word's GIN
-- bitmap ANDed with the pages holding those ids, and only the recent matches' rows are
-- visited. Rows are appended in id order, so each range of pages covers a narrow range of
-- ids; an update that moves a row to another page (a like that does not fit its page) widens
-- that range's summary, which costs a recheck of its rows, never a wrong answer.
CREATE INDEX posts_id_brin ON posts USING brin (id) WITH (pages_per_range = 32);
CREATE INDEX comments_id_brin ON comments USING brin (id) WITH (pages_per_range = 32);
