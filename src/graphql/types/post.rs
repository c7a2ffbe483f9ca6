//! `Post`: a post, its likes, views and top-level comments.

use super::*;
use crate::graphql::loaders::unread_of_post;

/// A post: its row as read, or (built from a live like update) its id and committed like
/// count, with the row read on first ask (see `Known`).
pub(crate) struct Post(Known<PostRow>);

impl From<PostRow> for Post {
    fn from(row: PostRow) -> Self {
        Post(Known::row(row.id, row))
    }
}

impl Post {
    /// A post known only by id (its access was checked another way), read on first ask.
    pub(crate) fn by_id(id: i64) -> Self {
        Post(Known { id, row: tokio::sync::OnceCell::new(), live: None })
    }

    /// A post as a `likeCounts` update delivers it.
    pub(crate) fn live(id: i64, likes: LiveLikes) -> Self {
        Post(Known::live(id, likes))
    }

    pub(super) async fn row(&self, ctx: &Context<'_>) -> Result<&PostRow> {
        self.0.get(async { Ok(loaders(ctx)?.posts().load_one(self.0.id).await?) }, "post").await
    }
}

/// A post in a course: a title and a body, with comments under it. Only members of its course
/// can read it; a deleted post is NOT_FOUND.
#[Object]
impl Post {
    /// Global id of this post.
    pub(super) async fn id(&self) -> ID {
        encode(NodeKind::Post, self.0.id)
    }
    /// Whether you have not read it: written by someone else after what you have read of its
    /// course, and not opened since (`markPostRead`). Never true for your own post.
    pub(super) async fn is_unread(&self, ctx: &Context<'_>) -> Result<bool> {
        Ok(unread_of_post(ctx, self.0.id).await?.unread)
    }
    /// Its live comments and replies by others written after what you have read of it
    /// (deleted ones not counted; yours never).
    pub(super) async fn unread_comment_count(&self, ctx: &Context<'_>) -> Result<i32> {
        Ok(unread_of_post(ctx, self.0.id).await?.comments as i32)
    }
    /// The course it was posted in.
    pub(super) async fn course(&self, ctx: &Context<'_>) -> Result<Course> {
        let course_id = self.row(ctx).await?.course_id;
        let row = loaders(ctx)?.courses().load_one(course_id).await?;
        let course = row.map(Course::from_row).ok_or_else(|| AppError::Internal("post without course".into()))?;
        Ok(course.in_list())
    }
    /// QUESTION, DISCUSSION or ANNOUNCEMENT.
    pub(super) async fn kind(&self, ctx: &Context<'_>) -> Result<PostKind> {
        Ok(self.row(ctx).await?.kind()?)
    }
    /// Who wrote it; null when they wrote it anonymously and are hidden from you (classmates
    /// always; staff too when the course hides writers from everyone). `pseudonym` names them.
    pub(super) async fn author(&self, ctx: &Context<'_>) -> Result<Option<User>> {
        let row = self.row(ctx).await?;
        shown_author(ctx, row.course_id, row.user_id, row.anonymous_to.as_deref()).await
    }
    /// Whether it was written anonymously.
    pub(super) async fn anonymous(&self, ctx: &Context<'_>) -> Result<bool> {
        Ok(self.row(ctx).await?.anonymous_to.is_some())
    }
    /// The name an anonymous writer goes by in this thread: the same for every reader, stable
    /// within the thread, different in every other one. Null when signed.
    pub(super) async fn pseudonym(&self, ctx: &Context<'_>) -> Result<Option<String>> {
        let row = self.row(ctx).await?;
        pseudonym(ctx, row.id, row.user_id, row.anonymous_to.as_deref()).await
    }
    /// A private question: only its author and staff see it (staff may make it public).
    pub(super) async fn private(&self, ctx: &Context<'_>) -> Result<bool> {
        Ok(self.row(ctx).await?.private)
    }
    /// Pinned by staff: it leads the course's first page in every order.
    pub(super) async fn pinned(&self, ctx: &Context<'_>) -> Result<bool> {
        Ok(self.row(ctx).await?.pinned_at.is_some())
    }
    /// A question with an accepted answer, or that staff marked resolved. False for other kinds.
    pub(super) async fn resolved(&self, ctx: &Context<'_>) -> Result<bool> {
        Ok(self.row(ctx).await?.resolved())
    }
    /// Whether anyone but its author has commented or replied (deleted ones not counted).
    pub(super) async fn answered(&self, ctx: &Context<'_>) -> Result<bool> {
        Ok(loaders(ctx)?.answered().load_one(self.0.id).await?.unwrap_or(false))
    }
    /// The top-level comment the asker or staff accepted as the answer; null if none (or it
    /// was deleted since).
    pub(super) async fn accepted_answer(&self, ctx: &Context<'_>) -> Result<Option<Comment>> {
        let Some(id) = self.row(ctx).await?.accepted_comment_id else { return Ok(None) };
        Ok(loaders(ctx)?.comments().load_one(id).await?.map(Comment::from))
    }
    /// Staff's endorsement of the post; null if none.
    pub(super) async fn endorsement(&self, ctx: &Context<'_>) -> Result<Option<Endorsement>> {
        let row = self.row(ctx).await?;
        Ok(Endorsement::of(row.endorsed_by, row.endorsed_at))
    }
    /// Its tags (0 to 3 of the course's), by name.
    pub(super) async fn tags(&self, ctx: &Context<'_>) -> Result<Vec<Tag>> {
        let tags = loaders(ctx)?.post_tags().load_one(self.0.id).await?.unwrap_or_default();
        Ok(tags.into_iter().map(Tag).collect())
    }
    /// The title as written (trimmed), at most 200 characters.
    pub(super) async fn title(&self, ctx: &Context<'_>) -> Result<&String> {
        Ok(&self.row(ctx).await?.title)
    }
    /// The text as written (trimmed), at most 20,000 characters.
    pub(super) async fn body(&self, ctx: &Context<'_>) -> Result<&String> {
        Ok(&self.row(ctx).await?.body)
    }
    /// How many users like it.
    pub(super) async fn like_count(&self, ctx: &Context<'_>) -> Result<i32> {
        self.0.like_field(self.row(ctx), |l| l.like_count, |r| r.like_count).await
    }
    /// Orders this post's like counts: it moves with every committed change of `likeCount`, so
    /// of two values the one with the higher `likeVersion` is the newer.
    pub(super) async fn like_version(&self, ctx: &Context<'_>) -> Result<i64> {
        self.0.like_field(self.row(ctx), |l| l.like_version, |r| r.like_version).await
    }
    /// When the transaction that set `likeCount` committed, by the publishing server's clock: on
    /// a `likeCounts` update (lets a client measure commit→screen latency); null when read by a
    /// query.
    pub(super) async fn like_count_committed_at(&self) -> Option<DateTime<Utc>> {
        self.0.committed_at()
    }
    /// How many comments and replies it has, together (deleted ones not counted).
    pub(super) async fn comment_count(&self, ctx: &Context<'_>) -> Result<i32> {
        Ok(self.row(ctx).await?.comment_count)
    }
    /// Counted views: the database's flushed count plus the views not flushed yet.
    pub(super) async fn view_count(&self, ctx: &Context<'_>) -> Result<i64> {
        let live = loaders(ctx)?.views().load_one(self.0.id).await?.unwrap_or_default();
        Ok(self.row(ctx).await?.view_count + live.unflushed)
    }
    /// Distinct users with a counted view (HyperLogLog: about 0.81 % standard error).
    pub(super) async fn unique_viewers(&self, ctx: &Context<'_>) -> Result<i64> {
        Ok(loaders(ctx)?.views().load_one(self.0.id).await?.unwrap_or_default().unique_viewers)
    }
    /// Whether the signed-in user likes it.
    pub(super) async fn liked_by_me(&self, ctx: &Context<'_>) -> Result<bool> {
        liked_by_me(ctx, self.row(ctx).await?.course_id, LikeTarget::Post(self.0.id)).await
    }
    /// When it was posted.
    pub(super) async fn created_at(&self, ctx: &Context<'_>) -> Result<DateTime<Utc>> {
        Ok(self.row(ctx).await?.created_at)
    }
    /// When the author last edited it; null if never.
    pub(super) async fn edited_at(&self, ctx: &Context<'_>) -> Result<Option<DateTime<Utc>>> {
        Ok(self.row(ctx).await?.edited_at)
    }
    /// Top-level comments, oldest first (replies are under each comment's `replies`); deleted
    /// ones are left out. 1 to 100 a page, 20 by default.
    #[graphql(complexity = "page_cost(first, last, child_complexity)")]
    pub(super) async fn comments(
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
pub(super) async fn post_of(ctx: &Context<'_>, comment: &CommentRow) -> Result<Post> {
    let row = loaders(ctx)?.posts().load_one(comment.post_id).await?;
    row.map(Post::from).ok_or_else(|| AppError::not_found("post").into())
}

/// One thread's page, loaded with the same page of every other thread at its level.
pub(super) async fn thread_page(ctx: &Context<'_>, thread: Thread, page: PageRequest) -> Result<Page<CommentRow>> {
    let rows = loaders(ctx)?.thread_pages().load_one((thread, page)).await?;
    let rows = rows.ok_or_else(|| AppError::Internal("a thread page was not loaded".into()))?;
    Ok(Page { items: rows.items.clone(), has_next: rows.has_next, has_prev: rows.has_prev })
}
