//! `Notification`: something that happened to the viewer (a reply, a mention, a like
//! milestone, an announcement in their course). Read by `graphql::notifications`, which checks that only its recipient sees it.

use async_graphql::Enum;

use super::*;
use crate::notifications::NotificationRow;

/// Why a notification was sent.
#[derive(Enum, Clone, Copy, PartialEq, Eq)]
pub enum NotificationKind {
    /// Someone commented on your post, or replied to your comment or reply.
    Reply,
    /// Someone mentioned your `@handle` in a post, comment or reply.
    Mention,
    /// Your post, comment or reply reached 10, 100 or 1,000 likes (`milestone`).
    LikeMilestone,
    /// An instructor of your course posted an announcement (`post`); `actor` wrote it.
    Announcement,
}

pub(crate) struct Notification(pub NotificationRow);

impl Notification {
    /// Whom the writer of the cause (the comment or reply, else the post) hid from. A cause
    /// that is gone counts as hidden from everyone: nothing of it is shown.
    async fn cause_anonymous_to(&self, ctx: &Context<'_>) -> Result<Option<String>> {
        let hidden = || Some("everyone".to_owned());
        Ok(match self.0.comment_id {
            Some(id) => loaders(ctx)?.comments().load_one(id).await?.map_or_else(hidden, |c| c.anonymous_to),
            None => loaders(ctx)?.posts().load_one(self.0.post_id).await?.map_or_else(hidden, |p| p.anonymous_to),
        })
    }
}

/// Something that happened to you: a reply to what you wrote, a mention of your handle,
/// something of yours passing 10, 100 or 1,000 likes, or an announcement in your course.
#[Object]
impl Notification {
    /// Global id of this notification (also what `markNotificationsRead(upTo:)` takes).
    pub async fn id(&self) -> ID {
        encode(NodeKind::Notification, self.0.id)
    }
    /// Why it was sent.
    async fn kind(&self) -> NotificationKind {
        match self.0.kind.as_str() {
            "reply" => NotificationKind::Reply,
            "mention" => NotificationKind::Mention,
            "announcement" => NotificationKind::Announcement,
            _ => NotificationKind::LikeMilestone,
        }
    }
    /// The like count reached, for LIKE_MILESTONE; null for the other kinds.
    async fn milestone(&self) -> Option<i32> {
        (self.0.milestone > 0).then_some(self.0.milestone)
    }
    /// Whether you marked it read (`markNotificationsRead`).
    async fn read(&self) -> bool {
        self.0.read
    }
    /// When its cause was written.
    async fn created_at(&self) -> DateTime<Utc> {
        self.0.created_at
    }
    /// Who wrote the reply, the mention or the announcement; null for a like milestone.
    async fn actor(&self, ctx: &Context<'_>) -> Result<Option<User>> {
        let Some(actor_id) = self.0.actor_id else { return Ok(None) };
        let anonymous_to = self.cause_anonymous_to(ctx).await?;
        shown_author(ctx, self.0.course_id, actor_id, anonymous_to.as_deref()).await
    }
    /// The pseudonym of an actor who wrote the cause anonymously (then `actor` is null unless
    /// you may see them); null otherwise.
    async fn actor_pseudonym(&self, ctx: &Context<'_>) -> Result<Option<String>> {
        let Some(actor_id) = self.0.actor_id else { return Ok(None) };
        let anonymous_to = self.cause_anonymous_to(ctx).await?;
        pseudonym(ctx, self.0.post_id, actor_id, anonymous_to.as_deref()).await
    }
    /// The course it happened in.
    async fn course(&self) -> Course {
        Course::known(self.0.course_id)
    }
    /// The post it is about: the one mentioning you, the one the reply is under, or the
    /// announcement.
    async fn post(&self) -> Post {
        Post::by_id(self.0.post_id)
    }
    /// The comment or reply that caused it (or reached the milestone); null for a post's (or
    /// once deleted).
    async fn comment(&self, ctx: &Context<'_>) -> Result<Option<AnyComment>> {
        let Some(comment_id) = self.0.comment_id else { return Ok(None) };
        Ok(loaders(ctx)?.comments().load_one(comment_id).await?.map(AnyComment::from_row))
    }
}
