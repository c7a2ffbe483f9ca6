//! The unread API: marking a post or a course read (`forum::unread` holds the storage and
//! its rules), and what one `unreadCounts` update is. The fields themselves (`Post.isUnread`,
//! `Post.unreadCommentCount`, `Course.unreadPostCount`) read through the request's unread
//! loader (`loaders::UnreadLoader`), one statement for a whole page.

use async_graphql::{Context, ID, Object, Result};

use super::access;
use super::context::{state, viewer};
use super::ids::{self, NodeKind};
use super::types::{Course, Post};
use crate::forum::audience;
use crate::forum::courses::Role;
use crate::forum::unread;
use crate::live::{Activity, ActivityKind};

#[derive(Default)]
pub(crate) struct UnreadMutations;

#[Object]
impl UnreadMutations {
    /// Opening a post: it and its comments and replies written so far are read (what a client
    /// calls when it shows a post). Idempotent; concurrent calls never move what is read
    /// backwards. Access as reading the post: NOT_FOUND for a deleted post or someone else's
    /// private one, FORBIDDEN outside its course. Your other tabs' `unreadCounts` hear it.
    async fn mark_post_read(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "The post's global id (`Post.id`).")] post_id: ID,
    ) -> Result<Post> {
        let viewer = viewer(ctx)?;
        let post_id = ids::decode_one(&post_id, NodeKind::Post)?;
        let (post, _) = access::post(ctx, post_id).await?;
        let state = state(ctx)?;
        let bound = state.settings.unread_exceptions_per_course;
        unread::mark_post_read(&state.db, viewer.user_id, post.course_id, post.id, bound).await?;
        // After COMMIT: the reader's own streams, in every tab.
        state.publisher.read_marks(viewer.user_id, post.course_id, Some(post.id)).await;
        Ok(Post::from(post))
    }

    /// Everything in the course read up to now: every post, comment and reply (what a client
    /// calls for "mark all read"). Access as reading the course: NOT_FOUND for no such course,
    /// FORBIDDEN when you are not a member. Your other tabs' `unreadCounts` hear it.
    async fn mark_course_read(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "The course's global id (`Course.id`).")] course_id: ID,
    ) -> Result<Course> {
        let viewer = viewer(ctx)?;
        let (course, _) = access::course(ctx, ids::decode_one(&course_id, NodeKind::Course)?).await?;
        let state = state(ctx)?;
        unread::mark_course_read(&state.db, viewer.user_id, course.course_id).await?;
        state.publisher.read_marks(viewer.user_id, course.course_id, None).await;
        Ok(course)
    }
}

/// One `unreadCounts` update: the course (ask for `unreadPostCount`) and the post whose state
/// changed.
pub(crate) struct UnreadUpdate {
    course_id: i64,
    post_id: Option<i64>,
}

impl UnreadUpdate {
    pub(crate) fn new(course_id: i64, post_id: Option<i64>) -> Self {
        Self { course_id, post_id }
    }

    /// What an event of the course's activity means for `reader`'s unread state: an update
    /// when something was created by someone else, deleted by anyone, or a post changed state
    /// (a private question made public becomes unread for its classmates); None for everything
    /// else. Whether the reader may see a private post's events is the caller's check.
    pub(crate) fn of_activity(activity: &Activity, reader: i64) -> Option<Self> {
        let created = matches!(
            activity.kind,
            ActivityKind::PostCreated | ActivityKind::CommentCreated | ActivityKind::ReplyCreated
        );
        let deleted = matches!(
            activity.kind,
            ActivityKind::PostDeleted | ActivityKind::CommentDeleted | ActivityKind::ReplyDeleted
        );
        // A post changed state: made public, it may have become readable (and so unread).
        let updated = activity.kind == ActivityKind::PostUpdated;
        // Your own writes change none of your counts; a deletion may (even your own of
        // another's comment).
        if !(deleted || updated || created && activity.actor != Some(reader)) {
            return None;
        }
        let post = (activity.kind != ActivityKind::PostDeleted).then_some(activity.post_id);
        Some(Self::new(activity.course_id, post))
    }
}

/// Your unread state of one course changed: someone else wrote or deleted something you may
/// read there, or you read something (in any tab).
#[Object]
impl UnreadUpdate {
    /// The course: ask for `unreadPostCount`, read as it is now.
    async fn course(&self) -> Course {
        Course::known(self.course_id)
    }

    /// The post whose state changed (ask for `isUnread` and `unreadCommentCount`); null after
    /// `markCourseRead`, for a deleted post, or when it is gone since.
    async fn post(&self, ctx: &Context<'_>) -> Result<Option<Post>> {
        let Some(post_id) = self.post_id else { return Ok(None) };
        let Some(row) = state(ctx)?.post_cache.get(post_id).await? else { return Ok(None) };
        // The stream checked the reader's access to the event; the role is read again here so
        // a post made private since is not shown.
        let viewer = viewer(ctx)?;
        let role = viewer.require_member(&state(ctx)?.db, row.course_id).await.unwrap_or(Role::Student);
        Ok(audience::may_read(viewer.user_id, role, row.user_id, row.private).then(|| Post::from(row)))
    }
}
