//! The GraphQL object types: User, Course, Post, Comment, Reply, the `Node` and `AnyComment`
//! interfaces, and their connections. Objects wrap rows; a row reaches a client only after the
//! resolver that produced it checked the viewer's membership of its course.

use std::future::Future;

use async_graphql::connection::{Connection, Edge};
use async_graphql::{Context, ID, Interface, Object, Result, SimpleObject};
use chrono::{DateTime, Utc};

use super::context::{state, viewer};
use super::cursor::{CursorKeys, KeyCursor, MAX_RANKED_WALK, PostsCursor, RankCursor};
use super::ids::{NodeKind, encode};
use super::loaders::{liked_by_me, loaders, prime_liked, user};
use crate::error::AppError;
use crate::forum::comments::{CommentRow, Thread};
use crate::forum::courses::{CourseRow, Role};
use crate::forum::paging::{Page, PageRequest};
use crate::forum::posts::PostRow;
use crate::forum::posts::{self, Ranking};
use crate::forum::users::UserRow;
use crate::likes::LikeTarget;

/// Query cost of a connection field: its page size times what each node asks for.
pub fn page_cost(first: Option<i32>, last: Option<i32>, child_complexity: usize) -> usize {
    let n = first.or(last).unwrap_or(crate::forum::paging::DEFAULT_PAGE_SIZE).clamp(1, 100) as usize;
    1 + n * child_complexity
}

/// Turns Relay arguments into a validated page request. The cursors are opened (their tags
/// checked) here, before any SQL: a cursor this server did not issue is BAD_USER_INPUT.
fn page_request(
    ctx: &Context<'_>,
    first: Option<i32>,
    after: Option<String>,
    last: Option<i32>,
    before: Option<String>,
) -> Result<PageRequest> {
    let keys = &state(ctx)?.cursor_keys;
    let after = keys.key(after.as_deref())?;
    let before = keys.key(before.as_deref())?;
    Ok(PageRequest::new(first, after, last, before)?)
}

pub(crate) fn connection<R, N: async_graphql::OutputType>(
    keys: &CursorKeys,
    page: Page<R>,
    id_of: impl Fn(&R) -> i64,
    node: impl Fn(R) -> N,
) -> Connection<KeyCursor, N> {
    let mut conn = Connection::new(page.has_prev, page.has_next);
    conn.edges.extend(page.items.into_iter().map(|row| Edge::new(KeyCursor::new(keys, id_of(&row)), node(row))));
    conn
}

/// Anything with a global id (Relay's object identification): refetch any of them with
/// `node(id:)`.
#[derive(Interface)]
#[graphql(field(
    name = "id",
    ty = "ID",
    desc = "Opaque global id, unique across all types; pass it back as is (`node(id:)`, mutation arguments)."
))]
pub enum Node {
    User(User),
    Course(Course),
    Post(Post),
    Comment(Comment),
    Reply(Reply),
    Notification(super::notifications::Notification),
}

/// A top-level comment or a reply: what comment mutations return.
#[derive(Interface)]
#[graphql(
    field(name = "id", ty = "ID", desc = "Global id: a Comment's or a Reply's, as the concrete type says."),
    field(name = "body", ty = "&String", desc = "The text as written (trimmed), at most 5,000 characters."),
    field(name = "author", ty = "User", desc = "Who wrote it."),
    field(name = "like_count", ty = "i32", desc = "How many users like it."),
    field(name = "liked_by_me", ty = "bool", desc = "Whether the signed-in user likes it."),
    field(name = "created_at", ty = "DateTime<Utc>", desc = "When it was written."),
    field(name = "edited_at", ty = "Option<DateTime<Utc>>", desc = "When its author last edited it; null if never.")
)]
pub enum AnyComment {
    Comment(Comment),
    Reply(Reply),
}

impl AnyComment {
    pub fn from_row(row: CommentRow) -> Self {
        if row.parent_id.is_some() { AnyComment::Reply(row.into()) } else { AnyComment::Comment(row.into()) }
    }
}

/// What can be liked: what `likeCounts` delivers. Its concrete type and `id` are the object's
/// own, so a normalized client cache (keyed by `__typename` and `id`) writes a live count
/// straight into the `Post`, `Comment` or `Reply` it already holds.
#[derive(Interface)]
#[graphql(
    field(name = "id", ty = "ID", desc = "Global id of the post, comment or reply."),
    field(name = "like_count", ty = "i32", desc = "How many users like it."),
    field(
        name = "like_version",
        ty = "i64",
        desc = "Orders its like counts: it moves with every committed change of `likeCount`, so of two values the one with the higher `likeVersion` is the newer."
    ),
    field(
        name = "like_count_committed_at",
        ty = "Option<DateTime<Utc>>",
        desc = "When the transaction that set `likeCount` committed, by the publishing server's clock: on a `likeCounts` update; null when read by a query."
    )
)]
pub enum Likeable {
    Post(Post),
    Comment(Comment),
    Reply(Reply),
}

/// A committed like count, as a live update carries it.
#[derive(Clone, Copy, Debug)]
pub struct LiveLikes {
    pub like_count: i32,
    pub like_version: i64,
    pub committed_at: Option<DateTime<Utc>>,
}

/// What a `Post`, `Comment` or `Reply` knows of its row: all of it (read by the resolver that
/// checked access), or, for an object a `likeCounts` update built, only its id and committed
/// like count, with the row read through the request's loaders on first ask. So a subscriber
/// that selects `id`, `likeCount` and `likeVersion` costs no read per update; one that selects
/// more pays one read per object (access was checked when it subscribed, and is watched since).
pub struct Known<R> {
    id: i64,
    row: tokio::sync::OnceCell<R>,
    live: Option<LiveLikes>,
}

impl<R> Known<R> {
    fn row(id: i64, row: R) -> Self {
        Self { id, row: tokio::sync::OnceCell::new_with(Some(row)), live: None }
    }

    fn live(id: i64, likes: LiveLikes) -> Self {
        Self { id, row: tokio::sync::OnceCell::new(), live: Some(likes) }
    }

    /// The row, loading it with `load` the first time (NOT_FOUND, naming `what`, once deleted).
    async fn get(&self, load: impl Future<Output = Result<Option<R>>>, what: &'static str) -> Result<&R> {
        self.row.get_or_try_init(|| async { load.await?.ok_or_else(|| AppError::not_found(what).into()) }).await
    }

    /// A like field: from the live update when this object is one, else from the row.
    async fn like_field<'a, T>(
        &'a self,
        row: impl Future<Output = Result<&'a R>>,
        from_live: impl Fn(&LiveLikes) -> T,
        from_row: impl Fn(&R) -> T,
    ) -> Result<T> {
        match &self.live {
            Some(live) => Ok(from_live(live)),
            None => Ok(from_row(row.await?)),
        }
    }

    fn committed_at(&self) -> Option<DateTime<Utc>> {
        self.live.and_then(|live| live.committed_at)
    }
}

pub struct User(pub UserRow);

/// A person with an account. Anyone signed in may read any user (through `node(id:)`, or as an
/// author).
#[Object]
impl User {
    /// Global id of this user.
    async fn id(&self) -> ID {
        encode(NodeKind::User, self.0.id)
    }
    /// Unique, lowercase handle (`@handle`).
    async fn handle(&self) -> &String {
        &self.0.handle
    }
    /// The name to show; not unique.
    async fn display_name(&self) -> &String {
        &self.0.display_name
    }
    /// When the account was created.
    async fn created_at(&self) -> DateTime<Utc> {
        self.0.created_at
    }
}

/// A course: its id always; its row (code, title, createdAt) as read, or loaded on first ask
/// through the request's `CourseLoader`, so a page that shows only a course's posts never
/// reads it.
pub struct Course {
    pub course_id: i64,
    row: Option<CourseRow>,
    /// Reached through a list (one of many courses at its level): its posts are loaded with
    /// its siblings' in one statement. A course asked for by id reads its page directly,
    /// without the loader's batching delay.
    in_list: bool,
}

impl Course {
    pub fn from_row(row: CourseRow) -> Self {
        Self { course_id: row.id, row: Some(row), in_list: false }
    }

    /// A course known to exist without reading it (the viewer is one of its members, and
    /// `course_members` references `courses`).
    pub fn known(course_id: i64) -> Self {
        Self { course_id, row: None, in_list: false }
    }

    /// Marks a course resolved as one item of a list (see `in_list`).
    pub fn in_list(self) -> Self {
        Self { in_list: true, ..self }
    }

    async fn row(&self, ctx: &Context<'_>) -> Result<CourseRow> {
        if let Some(row) = &self.row {
            return Ok(row.clone());
        }
        loaders(ctx)?.courses.load_one(self.course_id).await?.ok_or_else(|| AppError::not_found("course").into())
    }
}

/// A course the signed-in user belongs to, with its posts. Reached through `myCourses`,
/// `course(id:)` or a post's `course`.
#[Object]
impl Course {
    /// Global id of this course.
    async fn id(&self) -> ID {
        encode(NodeKind::Course, self.course_id)
    }
    /// Short code, e.g. `CS101`.
    async fn code(&self, ctx: &Context<'_>) -> Result<String> {
        Ok(self.row(ctx).await?.code)
    }
    /// Full name, e.g. `Introduction to Programming`.
    async fn title(&self, ctx: &Context<'_>) -> Result<String> {
        Ok(self.row(ctx).await?.title)
    }
    /// When the course was created.
    async fn created_at(&self, ctx: &Context<'_>) -> Result<DateTime<Utc>> {
        Ok(self.row(ctx).await?.created_at)
    }
    /// How many members it has, students and instructors together.
    async fn member_count(&self, ctx: &Context<'_>) -> Result<i64> {
        Ok(loaders(ctx)?.member_counts.load_one(self.course_id).await?.unwrap_or(0))
    }
    /// The signed-in user's role in this course.
    async fn my_role(&self, ctx: &Context<'_>) -> Result<Role> {
        Ok(viewer(ctx)?.require_member(&state(ctx)?.db, self.course_id).await?)
    }
    /// The course's posts in `orderBy` order (newest first by default); deleted posts are left
    /// out. 1 to 100 a page, 20 by default. NEW pages both ways with keyset cursors. HOT and TOP
    /// page forward only: their cursor holds the posts the walk has shown, and each page is the
    /// best ranked of the others as the ranking is now, so a walk never shows a post twice nor
    /// skips one while likes move them; a walk ends after 1,000 posts.
    #[graphql(complexity = "page_cost(first, last, child_complexity)")]
    #[allow(clippy::too_many_arguments)]
    async fn posts(
        &self,
        ctx: &Context<'_>,
        #[graphql(
            desc = "How many items to return walking forward: 1 to 100 (20 when neither `first` nor `last` is given). Not with `last` or `before`."
        )]
        first: Option<i32>,
        #[graphql(
            desc = "Return the items after this cursor (an edge's `cursor`, or `pageInfo.endCursor`); goes with `first`. A cursor this API did not issue (made up, altered, or signed with a retired key), or one of another order, is BAD_USER_INPUT."
        )]
        after: Option<String>,
        #[graphql(
            desc = "How many items to return walking backward, ending at `before`: 1 to 100 (20 when only `before` is given). Not with `first` or `after`. NEW order only."
        )]
        last: Option<i32>,
        #[graphql(
            desc = "Return the items before this cursor (an edge's `cursor`, or `pageInfo.startCursor`); goes with `last`. A cursor this API did not issue (made up, altered, or signed with a retired key) is BAD_USER_INPUT. NEW order only."
        )]
        before: Option<String>,
        #[graphql(desc = "NEW (the default), HOT or TOP.", default)] order_by: PostOrder,
    ) -> Result<Connection<PostsCursor, Post>> {
        let ranking = match order_by {
            PostOrder::New => return self.newest_posts(ctx, first, after, last, before).await,
            PostOrder::Hot => Ranking::Hot,
            PostOrder::Top => Ranking::Top,
        };
        if last.is_some() || before.is_some() {
            return Err(AppError::bad_input("HOT and TOP page forward only: use `first` and `after`").into());
        }
        // The page size checks of every connection (`first` 1 to 100, 20 by default).
        let limit = PageRequest::new(first, None, None, None)?.limit;
        let keys = state(ctx)?.cursor_keys.clone();
        // Opened before any SQL: only a list of shown posts this server signed comes back.
        let shown: Vec<i64> = match after.as_deref().map(|raw| keys.posts(raw)).transpose()? {
            None => Vec::new(),
            Some(PostsCursor::Ranked(cursor)) if cursor.ranking == ranking => cursor.shown().to_vec(),
            Some(_) => {
                return Err(
                    AppError::bad_input("this cursor belongs to another order: pass one this order returned").into()
                );
            }
        };
        // The walk's end: never more than MAX_RANKED_WALK posts, so cursors stay small.
        let room = MAX_RANKED_WALK.saturating_sub(shown.len()) as i64;
        let (rows, more) = if room == 0 {
            (Vec::new(), false)
        } else {
            let limit = limit.min(room);
            let state = state(ctx)?;
            let (rows, more) = if shown.is_empty() {
                // The first page, the one every reader opens: from memory for up to half a second.
                let page = state.course_pages.ranked_first_page(&state.db, self.course_id, ranking, limit).await?;
                (page.items.clone(), page.has_next)
            } else {
                posts::ranked_page(&state.db, self.course_id, ranking, &shown, limit).await?
            };
            let walk_continues = shown.len() + rows.len() < MAX_RANKED_WALK;
            (rows, more && walk_continues)
        };
        prime_liked(ctx, rows.iter().map(|r| (r.course_id, LikeTarget::Post(r.id)))).await?;
        let before_page = shown.len();
        let walk = std::sync::Arc::new(shown.into_iter().chain(rows.iter().map(|r| r.id)).collect::<Vec<i64>>());
        let mut conn = Connection::new(before_page > 0, more);
        conn.edges.extend(rows.into_iter().enumerate().map(|(i, row)| {
            let cursor = RankCursor::new(&keys, ranking, walk.clone(), before_page + i + 1);
            Edge::new(PostsCursor::Ranked(cursor), Post::from(row))
        }));
        Ok(conn)
    }
}

impl Course {
    /// NEW order: keyset pages, from the instance's course pages (or the list's loader).
    async fn newest_posts(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
        last: Option<i32>,
        before: Option<String>,
    ) -> Result<Connection<PostsCursor, Post>> {
        let page = page_request(ctx, first, after, last, before)?;
        let rows = if self.in_list {
            let rows = loaders(ctx)?.course_pages.load_one((self.course_id, page)).await?;
            let rows = rows.ok_or_else(|| AppError::Internal("a course page was not loaded".into()))?;
            rows.as_ref().clone()
        } else {
            let state = state(ctx)?;
            state.course_pages.get_or_read(&state.db, self.course_id, page).await?.as_ref().clone()
        };
        prime_liked(ctx, rows.items.iter().map(|r| (r.course_id, LikeTarget::Post(r.id)))).await?;
        Ok(post_connection(&state(ctx)?.cursor_keys, rows))
    }
}

/// A keyset page of posts as a `PostConnection` (the type every list of posts shares).
pub(crate) fn post_connection(keys: &CursorKeys, page: Page<PostRow>) -> Connection<PostsCursor, Post> {
    let mut conn = Connection::new(page.has_prev, page.has_next);
    conn.edges.extend(
        page.items.into_iter().map(|row| Edge::new(PostsCursor::Key(KeyCursor::new(keys, row.id)), Post::from(row))),
    );
    conn
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

/// A post: its row as read, or (built from a live like update) its id and committed like
/// count, with the row read on first ask (see `Known`).
pub struct Post(Known<PostRow>);

impl From<PostRow> for Post {
    fn from(row: PostRow) -> Self {
        Post(Known::row(row.id, row))
    }
}

impl Post {
    /// A post known only by id (its access was checked another way), read on first ask.
    pub fn by_id(id: i64) -> Self {
        Post(Known { id, row: tokio::sync::OnceCell::new(), live: None })
    }

    /// A post as a `likeCounts` update delivers it.
    pub fn live(id: i64, likes: LiveLikes) -> Self {
        Post(Known::live(id, likes))
    }

    async fn row(&self, ctx: &Context<'_>) -> Result<&PostRow> {
        self.0.get(async { Ok(loaders(ctx)?.posts.load_one(self.0.id).await?) }, "post").await
    }
}

/// A post in a course: a title and a body, with comments under it. Only members of its course
/// can read it; a deleted post is NOT_FOUND.
#[Object]
impl Post {
    /// Global id of this post.
    async fn id(&self) -> ID {
        encode(NodeKind::Post, self.0.id)
    }
    /// The course it was posted in.
    async fn course(&self, ctx: &Context<'_>) -> Result<Course> {
        let course_id = self.row(ctx).await?.course_id;
        let row = loaders(ctx)?.courses.load_one(course_id).await?;
        let course = row.map(Course::from_row).ok_or_else(|| AppError::Internal("post without course".into()))?;
        Ok(course.in_list())
    }
    /// Who wrote it.
    async fn author(&self, ctx: &Context<'_>) -> Result<User> {
        Ok(User(user(ctx, self.row(ctx).await?.user_id).await?))
    }
    /// The title as written (trimmed), at most 200 characters.
    async fn title(&self, ctx: &Context<'_>) -> Result<&String> {
        Ok(&self.row(ctx).await?.title)
    }
    /// The text as written (trimmed), at most 20,000 characters.
    async fn body(&self, ctx: &Context<'_>) -> Result<&String> {
        Ok(&self.row(ctx).await?.body)
    }
    /// How many users like it.
    async fn like_count(&self, ctx: &Context<'_>) -> Result<i32> {
        self.0.like_field(self.row(ctx), |l| l.like_count, |r| r.like_count).await
    }
    /// Orders this post's like counts: it moves with every committed change of `likeCount`, so
    /// of two values the one with the higher `likeVersion` is the newer.
    async fn like_version(&self, ctx: &Context<'_>) -> Result<i64> {
        self.0.like_field(self.row(ctx), |l| l.like_version, |r| r.like_version).await
    }
    /// When the transaction that set `likeCount` committed, by the publishing server's clock: on
    /// a `likeCounts` update (lets a client measure commit→screen latency); null when read by a
    /// query.
    async fn like_count_committed_at(&self) -> Option<DateTime<Utc>> {
        self.0.committed_at()
    }
    /// How many comments and replies it has, together (deleted ones not counted).
    async fn comment_count(&self, ctx: &Context<'_>) -> Result<i32> {
        Ok(self.row(ctx).await?.comment_count)
    }
    /// Counted views: the database's flushed count plus the views not flushed yet.
    async fn view_count(&self, ctx: &Context<'_>) -> Result<i64> {
        let live = loaders(ctx)?.views.load_one(self.0.id).await?.unwrap_or_default();
        Ok(self.row(ctx).await?.view_count + live.unflushed)
    }
    /// Distinct users with a counted view (HyperLogLog: about 0.81 % standard error).
    async fn unique_viewers(&self, ctx: &Context<'_>) -> Result<i64> {
        Ok(loaders(ctx)?.views.load_one(self.0.id).await?.unwrap_or_default().unique_viewers)
    }
    /// Whether the signed-in user likes it.
    async fn liked_by_me(&self, ctx: &Context<'_>) -> Result<bool> {
        liked_by_me(ctx, self.row(ctx).await?.course_id, LikeTarget::Post(self.0.id)).await
    }
    /// When it was posted.
    async fn created_at(&self, ctx: &Context<'_>) -> Result<DateTime<Utc>> {
        Ok(self.row(ctx).await?.created_at)
    }
    /// When the author last edited it; null if never.
    async fn edited_at(&self, ctx: &Context<'_>) -> Result<Option<DateTime<Utc>>> {
        Ok(self.row(ctx).await?.edited_at)
    }
    /// Top-level comments, oldest first (replies are under each comment's `replies`); deleted
    /// ones are left out. 1 to 100 a page, 20 by default.
    #[graphql(complexity = "page_cost(first, last, child_complexity)")]
    async fn comments(
        &self,
        ctx: &Context<'_>,
        #[graphql(
            desc = "How many items to return walking forward: 1 to 100 (20 when neither `first` nor `last` is given). Not with `last` or `before`."
        )]
        first: Option<i32>,
        #[graphql(
            desc = "Return the items after this cursor (an edge's `cursor`, or `pageInfo.endCursor`); goes with `first`. A cursor this API did not issue (made up, altered, or signed with a retired key) is BAD_USER_INPUT."
        )]
        after: Option<String>,
        #[graphql(
            desc = "How many items to return walking backward, ending at `before`: 1 to 100 (20 when only `before` is given). Not with `first` or `after`."
        )]
        last: Option<i32>,
        #[graphql(
            desc = "Return the items before this cursor (an edge's `cursor`, or `pageInfo.startCursor`); goes with `last`. A cursor this API did not issue (made up, altered, or signed with a retired key) is BAD_USER_INPUT."
        )]
        before: Option<String>,
    ) -> Result<Connection<KeyCursor, Comment>> {
        let page = page_request(ctx, first, after, last, before)?;
        let thread = Thread::Post { post_id: self.0.id, course_id: self.row(ctx).await?.course_id };
        let rows = thread_page(ctx, thread, page).await?;
        prime_liked(ctx, rows.items.iter().map(|r| (r.course_id, LikeTarget::Comment(r.id)))).await?;
        Ok(connection(&state(ctx)?.cursor_keys, rows, |r| r.id, Comment::from))
    }
}

/// Resolves the live post a comment belongs to (through the post cache, batched per level).
async fn post_of(ctx: &Context<'_>, comment: &CommentRow) -> Result<Post> {
    let row = loaders(ctx)?.posts.load_one(comment.post_id).await?;
    row.map(Post::from).ok_or_else(|| AppError::not_found("post").into())
}

/// One thread's page, loaded with the same page of every other thread at its level.
async fn thread_page(ctx: &Context<'_>, thread: Thread, page: PageRequest) -> Result<Page<CommentRow>> {
    let rows = loaders(ctx)?.thread_pages.load_one((thread, page)).await?;
    let rows = rows.ok_or_else(|| AppError::Internal("a thread page was not loaded".into()))?;
    Ok(Page { items: rows.items.clone(), has_next: rows.has_next, has_prev: rows.has_prev })
}

/// A top-level comment: its row as read, or (from a live like update) its id and count.
pub struct Comment(Known<CommentRow>);

impl From<CommentRow> for Comment {
    fn from(row: CommentRow) -> Self {
        Comment(Known::row(row.id, row))
    }
}

impl Comment {
    /// A comment as a `likeCounts` update delivers it.
    pub fn live(id: i64, likes: LiveLikes) -> Self {
        Comment(Known::live(id, likes))
    }

    async fn row(&self, ctx: &Context<'_>) -> Result<&CommentRow> {
        self.0.get(comment_row(ctx, self.0.id), "comment").await
    }
}

/// A comment or reply row through the request's loader (None once it or its post is deleted).
async fn comment_row(ctx: &Context<'_>, id: i64) -> Result<Option<CommentRow>> {
    Ok(loaders(ctx)?.comments.load_one(id).await?)
}

/// A top-level comment on a post; replies hang under it (`replies`).
#[Object]
impl Comment {
    /// Global id of this comment.
    async fn id(&self) -> ID {
        encode(NodeKind::Comment, self.0.id)
    }
    /// The post it is on; NOT_FOUND once that post is deleted.
    async fn post(&self, ctx: &Context<'_>) -> Result<Post> {
        post_of(ctx, self.row(ctx).await?).await
    }
    /// Who wrote it.
    async fn author(&self, ctx: &Context<'_>) -> Result<User> {
        Ok(User(user(ctx, self.row(ctx).await?.user_id).await?))
    }
    /// The text as written (trimmed), at most 5,000 characters.
    async fn body(&self, ctx: &Context<'_>) -> Result<&String> {
        Ok(&self.row(ctx).await?.body)
    }
    /// How many users like it.
    async fn like_count(&self, ctx: &Context<'_>) -> Result<i32> {
        self.0.like_field(self.row(ctx), |l| l.like_count, |r| r.like_count).await
    }
    /// Orders this comment's like counts: it moves with every committed change of `likeCount`,
    /// so of two values the one with the higher `likeVersion` is the newer.
    async fn like_version(&self, ctx: &Context<'_>) -> Result<i64> {
        self.0.like_field(self.row(ctx), |l| l.like_version, |r| r.like_version).await
    }
    /// When the transaction that set `likeCount` committed, by the publishing server's clock: on
    /// a `likeCounts` update; null when read by a query.
    async fn like_count_committed_at(&self) -> Option<DateTime<Utc>> {
        self.0.committed_at()
    }
    /// How many replies it has (deleted ones not counted).
    async fn reply_count(&self, ctx: &Context<'_>) -> Result<i32> {
        Ok(self.row(ctx).await?.reply_count)
    }
    /// Whether the signed-in user likes it.
    async fn liked_by_me(&self, ctx: &Context<'_>) -> Result<bool> {
        liked_by_me(ctx, self.row(ctx).await?.course_id, LikeTarget::Comment(self.0.id)).await
    }
    /// When it was written.
    async fn created_at(&self, ctx: &Context<'_>) -> Result<DateTime<Utc>> {
        Ok(self.row(ctx).await?.created_at)
    }
    /// When its author last edited it; null if never.
    async fn edited_at(&self, ctx: &Context<'_>) -> Result<Option<DateTime<Utc>>> {
        Ok(self.row(ctx).await?.edited_at)
    }
    /// Replies under this comment, oldest first; deleted ones are left out. 1 to 100 a page,
    /// 20 by default.
    #[graphql(complexity = "page_cost(first, last, child_complexity)")]
    async fn replies(
        &self,
        ctx: &Context<'_>,
        #[graphql(
            desc = "How many items to return walking forward: 1 to 100 (20 when neither `first` nor `last` is given). Not with `last` or `before`."
        )]
        first: Option<i32>,
        #[graphql(
            desc = "Return the items after this cursor (an edge's `cursor`, or `pageInfo.endCursor`); goes with `first`. A cursor this API did not issue (made up, altered, or signed with a retired key) is BAD_USER_INPUT."
        )]
        after: Option<String>,
        #[graphql(
            desc = "How many items to return walking backward, ending at `before`: 1 to 100 (20 when only `before` is given). Not with `first` or `after`."
        )]
        last: Option<i32>,
        #[graphql(
            desc = "Return the items before this cursor (an edge's `cursor`, or `pageInfo.startCursor`); goes with `last`. A cursor this API did not issue (made up, altered, or signed with a retired key) is BAD_USER_INPUT."
        )]
        before: Option<String>,
    ) -> Result<Connection<KeyCursor, Reply>> {
        let page = page_request(ctx, first, after, last, before)?;
        let course_id = self.row(ctx).await?.course_id;
        let rows = thread_page(ctx, Thread::Replies { root_id: self.0.id, course_id }, page).await?;
        Ok(connection(&state(ctx)?.cursor_keys, rows, |r| r.id, Reply::from))
    }
}

/// A reply: its row as read, or (from a live like update) its id and count.
pub struct Reply(Known<CommentRow>);

impl From<CommentRow> for Reply {
    fn from(row: CommentRow) -> Self {
        Reply(Known::row(row.id, row))
    }
}

impl Reply {
    /// A reply as a `likeCounts` update delivers it.
    pub fn live(id: i64, likes: LiveLikes) -> Self {
        Reply(Known::live(id, likes))
    }

    async fn row(&self, ctx: &Context<'_>) -> Result<&CommentRow> {
        self.0.get(comment_row(ctx, self.0.id), "reply").await
    }
}

/// A reply under a top-level comment (`comment`), answering someone (`replyTo`). Threads are
/// two levels deep: a reply to a reply hangs under the same root comment.
#[Object]
impl Reply {
    /// Global id of this reply.
    async fn id(&self) -> ID {
        encode(NodeKind::Reply, self.0.id)
    }
    /// The post it is on; NOT_FOUND once that post is deleted.
    async fn post(&self, ctx: &Context<'_>) -> Result<Post> {
        post_of(ctx, self.row(ctx).await?).await
    }
    /// The root comment this reply hangs under; NOT_FOUND once that comment is deleted.
    async fn comment(&self, ctx: &Context<'_>) -> Result<Comment> {
        let root = self.row(ctx).await?.parent_id.ok_or_else(|| AppError::Internal("reply without parent".into()))?;
        let row = loaders(ctx)?.comments.load_one(root).await?;
        row.map(Comment::from).ok_or_else(|| AppError::not_found("comment").into())
    }
    /// The user this reply answers (the author of the comment or reply it was written to).
    async fn reply_to(&self, ctx: &Context<'_>) -> Result<User> {
        let row = self.row(ctx).await?;
        let id = row.reply_to_user_id.ok_or_else(|| AppError::Internal("reply without reply_to".into()))?;
        Ok(User(user(ctx, id).await?))
    }
    /// Who wrote it.
    async fn author(&self, ctx: &Context<'_>) -> Result<User> {
        Ok(User(user(ctx, self.row(ctx).await?.user_id).await?))
    }
    /// The text as written (trimmed), at most 5,000 characters.
    async fn body(&self, ctx: &Context<'_>) -> Result<&String> {
        Ok(&self.row(ctx).await?.body)
    }
    /// How many users like it.
    async fn like_count(&self, ctx: &Context<'_>) -> Result<i32> {
        self.0.like_field(self.row(ctx), |l| l.like_count, |r| r.like_count).await
    }
    /// Orders this reply's like counts: it moves with every committed change of `likeCount`, so
    /// of two values the one with the higher `likeVersion` is the newer.
    async fn like_version(&self, ctx: &Context<'_>) -> Result<i64> {
        self.0.like_field(self.row(ctx), |l| l.like_version, |r| r.like_version).await
    }
    /// When the transaction that set `likeCount` committed, by the publishing server's clock: on
    /// a `likeCounts` update; null when read by a query.
    async fn like_count_committed_at(&self) -> Option<DateTime<Utc>> {
        self.0.committed_at()
    }
    /// Whether the signed-in user likes it.
    async fn liked_by_me(&self, ctx: &Context<'_>) -> Result<bool> {
        liked_by_me(ctx, self.row(ctx).await?.course_id, LikeTarget::Comment(self.0.id)).await
    }
    /// When it was written.
    async fn created_at(&self, ctx: &Context<'_>) -> Result<DateTime<Utc>> {
        Ok(self.row(ctx).await?.created_at)
    }
    /// When its author last edited it; null if never.
    async fn edited_at(&self, ctx: &Context<'_>) -> Result<Option<DateTime<Utc>>> {
        Ok(self.row(ctx).await?.edited_at)
    }
}

/// A started view: complete it with `completePostView` after `minDwellMs`.
#[derive(SimpleObject)]
pub struct ViewTicket {
    /// Opaque; single use; valid for the caller only.
    pub ticket: String,
    /// How long, in milliseconds from the start as the server measured it, the view must last
    /// before completing it counts.
    pub min_dwell_ms: i64,
}

/// Whether a completed view counted.
#[derive(SimpleObject)]
pub struct ViewResult {
    /// True when this view was counted (it shows in `Post.viewCount` and `uniqueViewers`).
    pub counted: bool,
    /// Why not, when `counted` is false.
    pub reason: Option<crate::views::ViewRefusal>,
}

/// What a delete mutation returns.
#[derive(SimpleObject)]
pub struct DeletePayload {
    /// The global id of what was deleted (evict it from client caches).
    pub deleted_id: ID,
    /// The post a deleted comment or reply was on, read after the delete: its `commentCount` is
    /// the new one, so a normalized cache updates it without a refetch. Null when the deleted
    /// object was a post.
    pub post: Option<Post>,
    /// The comment a deleted reply was under, read after the delete, with its new
    /// `replyCount`. Null unless the deleted object was a reply.
    pub comment: Option<Comment>,
}
