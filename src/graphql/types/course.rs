//! `Course`: a course, its members and its posts in each order.

use super::*;
use crate::cursor::PostsAt;
use crate::forum::paging::ABOVE_EVERY_POST;
use crate::forum::posts::{PostFilter, Reader};
use crate::graphql::ids::decode_as;
use crate::graphql::loaders::{PagesPending, unread_in_course};

/// A course: its id always; its row (code, title, createdAt) as read, or loaded on first ask
/// through the request's `CourseLoader`, so a page that shows only a course's posts never
/// reads it.
pub(crate) struct Course {
    pub course_id: i64,
    row: Option<CourseRow>,
    /// Reached through a list (one of many courses at its level): its posts are loaded with
    /// its siblings' in one statement. A course asked for by id reads its page directly,
    /// without the loader's batching delay.
    in_list: bool,
    /// Its pages of posts being read now (`Course.unreadPostCount` waits for them).
    pages: PagesPending,
}

impl Course {
    pub(crate) fn from_row(row: CourseRow) -> Self {
        Self { course_id: row.id, row: Some(row), in_list: false, pages: PagesPending::default() }
    }

    /// A course known to exist without reading it (the viewer is one of its members, and
    /// `course_members` references `courses`).
    pub(crate) fn known(course_id: i64) -> Self {
        Self { course_id, row: None, in_list: false, pages: PagesPending::default() }
    }

    /// Marks a course resolved as one item of a list (see `in_list`).
    pub(crate) fn in_list(self) -> Self {
        Self { in_list: true, ..self }
    }

    pub(super) async fn row(&self, ctx: &Context<'_>) -> Result<CourseRow> {
        if let Some(row) = &self.row {
            return Ok(row.clone());
        }
        loaders(ctx)?.courses().load_one(self.course_id).await?.ok_or_else(|| AppError::not_found("course").into())
    }
}

/// A course the signed-in user belongs to, with its posts. Reached through `myCourses`,
/// `course(id:)` or a post's `course`.
#[Object]
impl Course {
    /// Global id of this course.
    pub(super) async fn id(&self) -> ID {
        encode(NodeKind::Course, self.course_id)
    }
    /// How many posts here you have not read (`Post.isUnread`: posts you may read, not your
    /// own, not deleted). It saturates at 1,000: a client shows 1,000 as "999+".
    pub(super) async fn unread_post_count(&self, ctx: &Context<'_>) -> Result<i32> {
        let role = viewer(ctx)?.require_member(&state(ctx)?.db, self.course_id).await?;
        // Joins the batch of the posts this request shows of the course (one statement).
        self.pages.settled().await;
        Ok(unread_in_course(ctx, self.course_id, role == Role::Instructor).await? as i32)
    }
    /// Short code, e.g. `CS101`.
    pub(super) async fn code(&self, ctx: &Context<'_>) -> Result<String> {
        Ok(self.row(ctx).await?.code)
    }
    /// Full name, e.g. `Introduction to Programming`.
    pub(super) async fn title(&self, ctx: &Context<'_>) -> Result<String> {
        Ok(self.row(ctx).await?.title)
    }
    /// When the course was created.
    pub(super) async fn created_at(&self, ctx: &Context<'_>) -> Result<DateTime<Utc>> {
        Ok(self.row(ctx).await?.created_at)
    }
    /// How many members it has, students and instructors together.
    pub(super) async fn member_count(&self, ctx: &Context<'_>) -> Result<i64> {
        Ok(loaders(ctx)?.member_counts().load_one(self.course_id).await?.unwrap_or(0))
    }
    /// The signed-in user's role in this course.
    pub(super) async fn my_role(&self, ctx: &Context<'_>) -> Result<Role> {
        Ok(viewer(ctx)?.require_member(&state(ctx)?.db, self.course_id).await?)
    }
    /// Whom members may hide from when they write anonymously here (`createPost(anonymous:)`).
    pub(super) async fn anonymity(&self, ctx: &Context<'_>) -> Result<audience::Anonymity> {
        Ok(audience::course_anonymity(&state(ctx)?.db, self.course_id).await?)
    }
    /// The course's tags (folders), by name: staff define them, posts carry 0 to 3.
    pub(super) async fn tags(&self, ctx: &Context<'_>) -> Result<Vec<Tag>> {
        let rows = crate::forum::questions::tags_of_course(&state(ctx)?.db, self.course_id).await?;
        Ok(rows.into_iter().map(Tag).collect())
    }
    /// The course's posts in `orderBy` order (newest first by default), narrowed by `filter`;
    /// deleted posts are left out. 1 to 100 a page, 20 by default. NEW pages both ways with
    /// keyset cursors. HOT and TOP page forward only: their cursor holds the posts the walk has
    /// shown, and each page is the best ranked of the others as the ranking is now, so a walk
    /// never shows a post twice nor skips one while likes move them; a walk ends after 1,000
    /// posts.
    ///
    /// Pinned posts (at most 5, most recently pinned first) lead the page that opens the list in
    /// every order, AHEAD of the `first` (or `last`) others, so that page holds up to 5 more
    /// edges; the rest of the walk leaves them out. In NEW order a pinned post's cursor stands
    /// above every unpinned post: after it comes the newest unpinned post. Pins obey the filter
    /// and the reader's visibility like any post.
    ///
    /// Without a filter a student reads the course's public posts (their own private questions
    /// are in `filter: {private: true}` or `{mine: true}`); staff read every post. A cursor
    /// serves the filter it was issued for only: with another filter it is BAD_USER_INPUT.
    #[graphql(complexity = "page_cost(first, last, child_complexity)")]
    // Each argument after `ctx` is one of the field's GraphQL arguments (the schema's shape).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn posts(
        &self,
        ctx: &Context<'_>,
        #[graphql(
            desc = "How many items to return walking forward: 1 to 100 (20 when neither `first` nor `last` is given). Not with `last` or `before`. The first page also carries the pinned posts, ahead of these."
        )]
        first: Option<i32>,
        #[graphql(
            desc = "Return the items after this cursor (an edge's `cursor`, or `pageInfo.endCursor`); goes with `first`. A cursor this API did not issue (made up, altered, or signed with a retired key), or one of another order or another filter, is BAD_USER_INPUT."
        )]
        after: Option<String>,
        #[graphql(
            desc = "How many items to return walking backward, ending at `before`: 1 to 100 (20 when only `before` is given). Not with `first` or `after`. NEW order only."
        )]
        last: Option<i32>,
        #[graphql(
            desc = "Return the items before this cursor (an edge's `cursor`, or `pageInfo.startCursor`); goes with `last`. A cursor this API did not issue (made up, altered, or signed with a retired key), or one of another filter, is BAD_USER_INPUT. NEW order only."
        )]
        before: Option<String>,
        #[graphql(desc = "NEW (the default), HOT or TOP.", default)] order_by: PostOrder,
        #[graphql(desc = "Only the posts that match every field given (none: every post the reader may read).")]
        filter: Option<PostFilterInput>,
    ) -> Result<Connection<PostsCursor, Post>> {
        let _reading = self.pages.begin();
        let filter = filter.map(PostFilterInput::parse).transpose()?.unwrap_or_default();
        let ranking = match order_by {
            PostOrder::New => return self.newest_posts(ctx, first, after, last, before, &filter).await,
            PostOrder::Hot => Ranking::Hot,
            PostOrder::Top => Ranking::Top,
        };
        if last.is_some() || before.is_some() {
            return Err(AppError::bad_input("HOT and TOP page forward only: use `first` and `after`").into());
        }
        // The page size checks of every connection (`first` 1 to 100, 20 by default).
        let limit = PageRequest::new(first, None, None, None)?.limit;
        let state = state(ctx)?;
        let keys = state.cursor_keys.clone();
        let filter_key: std::sync::Arc<str> = filter.key().into();
        // Opened before any SQL: only a list of shown posts this server signed comes back.
        let shown: Vec<i64> = match after.as_deref().map(|raw| keys.posts(raw)).transpose()? {
            None => Vec::new(),
            Some(cursor) => match cursor.at {
                PostsAt::Ranked(ranked) if ranked.ranking == ranking => {
                    same_filter(&cursor.filter, &filter_key)?;
                    ranked.shown().to_vec()
                }
                _ => {
                    return Err(AppError::bad_input(
                        "this cursor belongs to another order: pass one this order returned",
                    )
                    .into());
                }
            },
        };
        let reader = self.reader(ctx, &filter).await?;
        // The walk's end: never more than MAX_RANKED_WALK posts, so cursors stay small.
        let room = MAX_RANKED_WALK.saturating_sub(shown.len()) as i64;
        let (rows, more) = if room == 0 {
            (Vec::new(), false)
        } else {
            let limit = limit.min(room);
            let (rows, more) = match reader {
                // The first shared page, the one every reader opens: from memory for up to half
                // a second.
                Reader::Shared if shown.is_empty() => {
                    let page = state.course_pages.ranked_first_page(&state.db, self.course_id, ranking, limit).await?;
                    (page.items.clone(), page.has_next)
                }
                reader => {
                    posts::ranked_page(&state.db, self.course_id, reader, &filter, ranking, &shown, limit).await?
                }
            };
            let walk_continues = shown.len() + rows.len() < MAX_RANKED_WALK;
            (rows, more && walk_continues)
        };
        prime_liked(ctx, rows.iter().map(|r| (r.course_id, LikeTarget::Post(r.id)))).await?;
        let before_page = shown.len();
        let walk = std::sync::Arc::new(shown.into_iter().chain(rows.iter().map(|r| r.id)).collect::<Vec<i64>>());
        let mut conn = Connection::new(before_page > 0, more);
        conn.edges.extend(rows.into_iter().enumerate().map(|(i, row)| {
            let at = PostsAt::Ranked(RankCursor::new(ranking, walk.clone(), before_page + i + 1));
            Edge::new(PostsCursor::new(&keys, filter_key.clone(), at), Post::from(row))
        }));
        Ok(conn)
    }
    /// Posts, comments and replies of this course whose text matches `query`, best first (see
    /// the API guide, "Search": query syntax, ranking, snippets). Only what you may read: live
    /// posts and comments, private questions only when yours or when you are staff. Pages
    /// forward with `first` and `after`. A blank query, or one longer than 200 characters, is
    /// BAD_USER_INPUT; a query of stop words only finds nothing.
    #[graphql(complexity = "page_cost(first, None, child_complexity)")]
    pub(super) async fn search(
        &self,
        ctx: &Context<'_>,
        #[graphql(
            desc = "What to look for: words, \"a phrase\", `-word` to leave out, `or` between alternatives. 1 to 200 characters."
        )]
        query: String,
        #[graphql(desc = "How many hits to return: 1 to 50, 10 when not given.")] first: Option<i32>,
        #[graphql(
            desc = "Return the hits after this cursor (an edge's `cursor`, or `pageInfo.endCursor`). A cursor this API did not issue, or one of another query or filter, is BAD_USER_INPUT."
        )]
        after: Option<String>,
        #[graphql(desc = "Only the hits that match every field given.")] filter: Option<
            super::search::SearchFilterInput,
        >,
    ) -> Result<Connection<super::search::SearchCursor, super::search::SearchHit>> {
        super::search::course_search(ctx, self.course_id, query, first, after, filter).await
    }
    /// Posts whose title is like `text` (a title being typed; typos are fine), so an asker
    /// finds an existing answer before posting: resolved questions first, then the most alike.
    /// Only posts you may read. `text` of 1 to 200 characters, else BAD_USER_INPUT.
    #[graphql(complexity = "1 + first.unwrap_or(5).clamp(1, 10) as usize * child_complexity")]
    pub(super) async fn similar_posts(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "The title being typed: 1 to 200 characters.")] text: String,
        #[graphql(desc = "How many posts to return: 1 to 10, 5 when not given.")] first: Option<i32>,
    ) -> Result<Vec<super::search::SimilarPost>> {
        super::search::similar_posts(ctx, self.course_id, text, first).await
    }
    /// How this course's text is split into searchable words (`setSearchLanguage` changes it).
    pub(super) async fn search_language(&self, ctx: &Context<'_>) -> Result<super::search::SearchLanguage> {
        super::search::course_language(ctx, self.course_id).await
    }
}

impl Course {
    /// Who reads this course's list: every member alike (the shared pages of `cache::pages`,
    /// public posts only) when a student asks without a filter; else the viewer with their own
    /// visibility, read by SQL and not kept.
    async fn reader(&self, ctx: &Context<'_>, filter: &PostFilter) -> Result<Reader> {
        let viewer = viewer(ctx)?;
        // The request's memberships (read already by whatever led to this course).
        let role = viewer.require_member(&state(ctx)?.db, self.course_id).await?;
        let staff = role == Role::Instructor;
        Ok(if filter.is_empty() && !staff { Reader::Shared } else { Reader::Member { user_id: viewer.user_id, staff } })
    }

    /// NEW order: keyset pages, from the instance's course pages (or the list's loader) when
    /// shared, else read for the viewer.
    pub(super) async fn newest_posts(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
        last: Option<i32>,
        before: Option<String>,
        filter: &PostFilter,
    ) -> Result<Connection<PostsCursor, Post>> {
        let state = state(ctx)?;
        let keys = &state.cursor_keys;
        let filter_key: std::sync::Arc<str> = filter.key().into();
        // Opened before any SQL, as every connection's cursors are.
        let open = |raw: Option<String>| -> Result<Option<i64>> {
            let Some(raw) = raw else { return Ok(None) };
            let cursor = keys.posts(&raw)?;
            let id = match cursor.at {
                PostsAt::Key(id) => id,
                PostsAt::AboveUnpinned => ABOVE_EVERY_POST,
                PostsAt::Ranked(_) => return Err(AppError::bad_input("this cursor belongs to another order").into()),
            };
            same_filter(&cursor.filter, &filter_key)?;
            Ok(Some(id))
        };
        let page = PageRequest::new(first, open(after)?, last, open(before)?)?;
        let rows = match self.reader(ctx, filter).await? {
            Reader::Shared if self.in_list => {
                let rows = loaders(ctx)?.course_pages().load_one((self.course_id, page)).await?;
                let rows = rows.ok_or_else(|| AppError::Internal("a course page was not loaded".into()))?;
                rows.as_ref().clone()
            }
            Reader::Shared => state.course_pages.get_or_read(&state.db, self.course_id, page).await?.as_ref().clone(),
            reader => posts::page_in_course(&state.db, self.course_id, reader, filter, &page).await?,
        };
        prime_liked(ctx, rows.items.iter().map(|r| (r.course_id, LikeTarget::Post(r.id)))).await?;
        let mut conn = Connection::new(rows.has_prev, rows.has_next);
        conn.edges.extend(rows.items.into_iter().map(|row| {
            // A pinned row on a NEW page is one of the pins that lead it (the others are
            // unpinned posts only).
            let at = if row.pinned_at.is_some() { PostsAt::AboveUnpinned } else { PostsAt::Key(row.id) };
            Edge::new(PostsCursor::new(keys, filter_key.clone(), at), Post::from(row))
        }));
        Ok(conn)
    }
}

/// Refuses a cursor issued for another filter than the one asked for.
fn same_filter(cursor: &str, asked: &str) -> Result<()> {
    if cursor == asked {
        Ok(())
    } else {
        Err(AppError::bad_input("this cursor belongs to another filter: pass one this filter returned").into())
    }
}

/// A keyset page of posts as a `PostConnection` (the type every list of posts shares), as
/// the home feed shows them (no pins, no filter).
pub(crate) fn post_connection(keys: &CursorKeys, page: Page<PostRow>) -> Connection<PostsCursor, Post> {
    let mut conn = Connection::new(page.has_prev, page.has_next);
    conn.edges.extend(
        page.items
            .into_iter()
            .map(|row| Edge::new(PostsCursor::new(keys, "".into(), PostsAt::Key(row.id)), Post::from(row))),
    );
    conn
}

/// What `Course.posts` lists: only the posts that match every field given (all optional). A
/// boolean asks for the posts that have the property (`true`) or that lack it (`false`).
#[derive(async_graphql::InputObject, Clone, Debug, Default)]
#[graphql(name = "PostFilter")]
pub(crate) struct PostFilterInput {
    /// Posts of this kind only.
    kind: Option<PostKind>,
    /// true: questions with no accepted answer that staff have not marked resolved; false:
    /// every other post (with `kind: QUESTION`, the resolved questions).
    unresolved: Option<bool>,
    /// true: posts nobody but their author has commented on or replied to (deleted comments
    /// not counted), as `Post.answered` is false; false: the others.
    unanswered: Option<bool>,
    /// true: posts staff endorsed; false: the others.
    endorsed: Option<bool>,
    /// true: pinned posts (they lead the first page, so the rest of the walk is empty); false:
    /// the others (and no pins lead the list).
    pinned: Option<bool>,
    /// Posts carrying this tag (`Tag.id`). A tag of another course, or one deleted, matches
    /// no post: the page is empty. Not the id of a tag: BAD_USER_INPUT.
    tag_id: Option<ID>,
    /// true: the signed-in user's own posts; false: everyone else's.
    mine: Option<bool>,
    /// true: private questions (a student has only their own); false: public posts.
    private: Option<bool>,
    /// true: the posts you have not read (`Post.isUnread`); false: the ones you have read
    /// (your own posts among them).
    unread: Option<bool>,
}

impl PostFilterInput {
    /// The filter, its tag id decoded (BAD_USER_INPUT when it is not a tag's).
    fn parse(self) -> Result<PostFilter> {
        let tag_id = self.tag_id.map(|id| decode_as(&id, &[NodeKind::Tag]).map(|(_, id)| id)).transpose()?;
        Ok(PostFilter {
            kind: self.kind,
            unresolved: self.unresolved,
            unanswered: self.unanswered,
            endorsed: self.endorsed,
            pinned: self.pinned,
            tag_id,
            mine: self.mine,
            private: self.private,
            unread: self.unread,
        })
    }
}

/// The order of a course's posts.
#[derive(async_graphql::Enum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PostOrder {
    /// Newest first.
    #[default]
    New,
    /// By `post_hot_score`: log10(max(1, likeCount + 2 × commentCount)) + (creation time in Unix
    /// seconds) / 45000. Each 12.5 hours of age weighs as much as ten times the engagement, so
    /// new posts rise and old ones sink without anything being recomputed. Follows a like
    /// within its commit.
    Hot,
    /// Most liked first (`likeCount`), newest first among equals.
    Top,
}
