//! `Comment`: a top-level comment, its likes and its replies.

use super::post::{post_of, thread_page};
use super::*;

/// A top-level comment: its row as read, or (from a live like update) its id and count.
pub(crate) struct Comment(Known<CommentRow>);

impl From<CommentRow> for Comment {
    fn from(row: CommentRow) -> Self {
        Comment(Known::row(row.id, row))
    }
}

impl Comment {
    /// A comment as a `likeCounts` update delivers it.
    pub(crate) fn live(id: i64, likes: LiveLikes) -> Self {
        Comment(Known::live(id, likes))
    }

    pub(super) async fn row(&self, ctx: &Context<'_>) -> Result<&CommentRow> {
        self.0.get(comment_row(ctx, self.0.id), "comment").await
    }
}

/// A comment or reply row through the request's loader (None once it or its post is deleted).
pub(super) async fn comment_row(ctx: &Context<'_>, id: i64) -> Result<Option<CommentRow>> {
    Ok(loaders(ctx)?.comments().load_one(id).await?)
}

/// A top-level comment on a post; replies hang under it (`replies`).
#[Object]
impl Comment {
    /// Global id of this comment.
    pub(super) async fn id(&self) -> ID {
        encode(NodeKind::Comment, self.0.id)
    }
    /// The post it is on; NOT_FOUND once that post is deleted.
    pub(super) async fn post(&self, ctx: &Context<'_>) -> Result<Post> {
        post_of(ctx, self.row(ctx).await?).await
    }
    /// Who wrote it; null when they wrote it anonymously and are hidden from you (`pseudonym`
    /// names them).
    pub(super) async fn author(&self, ctx: &Context<'_>) -> Result<Option<User>> {
        let row = self.row(ctx).await?;
        shown_author(ctx, row.course_id, row.user_id, row.anonymous_to.as_deref()).await
    }
    /// Whether it was written anonymously.
    pub(super) async fn anonymous(&self, ctx: &Context<'_>) -> Result<bool> {
        Ok(self.row(ctx).await?.anonymous_to.is_some())
    }
    /// The name an anonymous writer goes by in this thread (the same for every reader); null
    /// when signed.
    pub(super) async fn pseudonym(&self, ctx: &Context<'_>) -> Result<Option<String>> {
        let row = self.row(ctx).await?;
        pseudonym(ctx, row.post_id, row.user_id, row.anonymous_to.as_deref()).await
    }
    /// Staff's endorsement; null if none.
    pub(super) async fn endorsement(&self, ctx: &Context<'_>) -> Result<Option<Endorsement>> {
        let row = self.row(ctx).await?;
        Ok(Endorsement::of(row.endorsed_by, row.endorsed_at))
    }
    /// Whether it is its question's accepted answer.
    pub(super) async fn is_accepted_answer(&self, ctx: &Context<'_>) -> Result<bool> {
        let row = self.row(ctx).await?;
        let post = loaders(ctx)?.posts().load_one(row.post_id).await?;
        Ok(post.is_some_and(|post| post.accepted_comment_id == Some(row.id)))
    }
    /// The text as written (trimmed), at most 5,000 characters.
    pub(super) async fn body(&self, ctx: &Context<'_>) -> Result<&String> {
        Ok(&self.row(ctx).await?.body)
    }
    /// How many users like it.
    pub(super) async fn like_count(&self, ctx: &Context<'_>) -> Result<i32> {
        self.0.like_field(self.row(ctx), |l| l.like_count, |r| r.like_count).await
    }
    /// Orders this comment's like counts: it moves with every committed change of `likeCount`,
    /// so of two values the one with the higher `likeVersion` is the newer.
    pub(super) async fn like_version(&self, ctx: &Context<'_>) -> Result<i64> {
        self.0.like_field(self.row(ctx), |l| l.like_version, |r| r.like_version).await
    }
    /// When the transaction that set `likeCount` committed, by the publishing server's clock: on
    /// a `likeCounts` update; null when read by a query.
    pub(super) async fn like_count_committed_at(&self) -> Option<DateTime<Utc>> {
        self.0.committed_at()
    }
    /// How many replies it has (deleted ones not counted).
    pub(super) async fn reply_count(&self, ctx: &Context<'_>) -> Result<i32> {
        Ok(self.row(ctx).await?.reply_count)
    }
    /// Whether the signed-in user likes it.
    pub(super) async fn liked_by_me(&self, ctx: &Context<'_>) -> Result<bool> {
        liked_by_me(ctx, self.row(ctx).await?.course_id, LikeTarget::Comment(self.0.id)).await
    }
    /// When it was written.
    pub(super) async fn created_at(&self, ctx: &Context<'_>) -> Result<DateTime<Utc>> {
        Ok(self.row(ctx).await?.created_at)
    }
    /// When its author last edited it; null if never.
    pub(super) async fn edited_at(&self, ctx: &Context<'_>) -> Result<Option<DateTime<Utc>>> {
        Ok(self.row(ctx).await?.edited_at)
    }
    /// Replies under this comment, oldest first; deleted ones are left out. 1 to 100 a page,
    /// 20 by default.
    #[graphql(complexity = "page_cost(first, last, child_complexity)")]
    pub(super) async fn replies(
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
