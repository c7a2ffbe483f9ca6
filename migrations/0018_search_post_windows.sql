-- Search's windows of posts use the primary key, not a BRIN index (`forum::search`, "Bounded
-- work"). A post's row is rewritten by every counter that lands on it (likes, comments, views,
-- hot score), and a rewritten row goes wherever there is room, so every range of pages soon
-- holds ids from the whole table: on `bench search`'s course the BRIN index answered "ids of
-- the newest 2,500 posts" with 128,960 rows' worth of pages, and the planner, trusting it,
-- read every match of the word. Without it, a narrow window is the word's GIN bitmap ANDed
-- with a range of the primary key. Comments are rarely rewritten; their BRIN index stays.
DROP INDEX IF EXISTS posts_id_brin;
