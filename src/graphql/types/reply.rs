//! `Reply`: a reply to a comment.

use super::comment::comment_row;
use super::post::post_of;
use super::*;

/// A reply: its row as read, or (from a live like update) its id and count.
pub(crate) struct Reply(Known<CommentRow>);

impl From<CommentRow> for Reply {
    fn from(row: CommentRow) -> Self {
        Reply(Known::row(row.id, row))
    }
}

impl Reply {
    /// A reply as a `likeCounts` update delivers it.
    pub(crate) fn live(id: i64, likes: LiveLikes) -> Self {
        Reply(Known::live(id, likes))
    }

    pub(super) async fn row(&self, ctx: &Context<'_>) -> Result<&CommentRow> {
        self.0.get(comment_row(ctx, self.0.id), "reply").await
    }
}

/// A reply under a top-level comment (`comment`), answering someone (`replyTo`). Threads are
/// two levels deep: a reply to a reply hangs under the same root comment.
#[Object]
impl Reply {
    /// Global id of this reply.
    pub(super) async fn id(&self) -> ID {
        encode(NodeKind::Reply, self.0.id)
    }
    /// The post it is on; NOT_FOUND once that post is deleted.
    pub(super) async fn post(&self, ctx: &Context<'_>) -> Result<Post> {
        post_of(ctx, self.row(ctx).await?).await
    }
    /// The root comment this reply hangs under; NOT_FOUND once that comment is deleted.
    pub(super) async fn comment(&self, ctx: &Context<'_>) -> Result<Comment> {
        let root = self.row(ctx).await?.parent_id.ok_or_else(|| AppError::Internal("reply without parent".into()))?;
        let row = loaders(ctx)?.comments().load_one(root).await?;
        row.map(Comment::from).ok_or_else(|| AppError::not_found("comment").into())
    }
    /// The user this reply answers (the author of the comment or reply it was written to);
    /// null when that was written anonymously and its writer is hidden from you
    /// (`replyToPseudonym` names them).
    pub(super) async fn reply_to(&self, ctx: &Context<'_>) -> Result<Option<User>> {
        let row = self.row(ctx).await?;
        let id = row.reply_to_user_id.ok_or_else(|| AppError::Internal("reply without reply_to".into()))?;
        shown_author(ctx, row.course_id, id, row.reply_to_anonymous_to.as_deref()).await
    }
    /// The pseudonym of whom this reply answers, when that was written anonymously.
    pub(super) async fn reply_to_pseudonym(&self, ctx: &Context<'_>) -> Result<Option<String>> {
        let row = self.row(ctx).await?;
        let id = row.reply_to_user_id.ok_or_else(|| AppError::Internal("reply without reply_to".into()))?;
        pseudonym(ctx, row.post_id, id, row.reply_to_anonymous_to.as_deref()).await
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
    /// The text as written (trimmed), at most 5,000 characters.
    pub(super) async fn body(&self, ctx: &Context<'_>) -> Result<&String> {
        Ok(&self.row(ctx).await?.body)
    }
    /// How many users like it.
    pub(super) async fn like_count(&self, ctx: &Context<'_>) -> Result<i32> {
        self.0.like_field(self.row(ctx), |l| l.like_count, |r| r.like_count).await
    }
    /// Orders this reply's like counts: it moves with every committed change of `likeCount`, so
    /// of two values the one with the higher `likeVersion` is the newer.
    pub(super) async fn like_version(&self, ctx: &Context<'_>) -> Result<i64> {
        self.0.like_field(self.row(ctx), |l| l.like_version, |r| r.like_version).await
    }
    /// When the transaction that set `likeCount` committed, by the publishing server's clock: on
    /// a `likeCounts` update; null when read by a query.
    pub(super) async fn like_count_committed_at(&self) -> Option<DateTime<Utc>> {
        self.0.committed_at()
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
}
