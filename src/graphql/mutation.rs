//! Mutation roots: writing posts, comments and replies, liking them, and counting post views. Each checks the
//! viewer and the target through `access` before it changes anything, and every write that
//! changes a post tells the post cache before it answers (like counts reach it through
//! `live::Publisher`, view counts through the aggregator).
//!
//! Every write is counted against the viewer's limit for its kind (`kv::ratelimit::WriteLimits`,
//! `views::Views::admit`) after authentication and the checks of its arguments that need no
//! I/O, and before anything reads the database: a refused write costs one Redis script.

use async_graphql::{Context, ID, Object, Result};

use super::access::{self, require_author, require_author_or_instructor};
use super::context::{state, viewer};
use super::errors::nullable;
use super::ids::{self, NodeKind, encode};
use super::loaders::record_liked;
use super::types::{AnyComment, Comment, DeletePayload, Post, Reply, ViewResult, ViewTicket};
use crate::error::{AppError, AppResult};
use crate::forum::audience::{self, PostKind};
use crate::forum::comments::{self, MAX_COMMENT_CHARS};
use crate::forum::courses::Role;
use crate::forum::posts::{self, MAX_BODY_CHARS, MAX_TITLE_CHARS, NewPost, PostRow, validate_text};
use crate::forum::questions;
use crate::kv::ratelimit::WriteKind;
use crate::likes::{LikeTarget, Membership, ShownCount};
use crate::live::{Activity, ActivityKind};
use crate::notifications::{self, Cause, Notified, announcements};
use crate::views::{ClientIp, ViewOutcome};
use sea_orm::{ConnectionTrait, TransactionTrait};

#[derive(Default)]
pub(crate) struct NotificationMutations;

#[Object]
impl NotificationMutations {
    /// Marks your notifications read, up to and including `upTo` (NOT_FOUND if it is not one of
    /// yours). Never marks anything unread again: an older `upTo` changes nothing.
    async fn mark_notifications_read(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "The global id of your newest notification to mark read (`Notification.id`).")] up_to: ID,
    ) -> Result<Option<super::notifications::NotificationsRead>> {
        nullable(async {
            viewer(ctx)?;
            let up_to = ids::decode_one(&up_to, NodeKind::Notification)?;
            super::notifications::mark_read(ctx, up_to).await
        })
        .await
    }
}

#[derive(Default)]
pub(crate) struct PostMutations;

#[Object]
impl PostMutations {
    /// Posts in a course the signed-in user belongs to; it shows in the course's `posts`, its
    /// members' `homeFeed` and `courseActivity` (POST_CREATED).
    // Each argument after `ctx` is one of the field's GraphQL arguments (the schema's shape).
    #[allow(clippy::too_many_arguments)]
    async fn create_post(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "The course's global id (`Course.id`).")] course_id: ID,
        #[graphql(desc = "1 to 200 characters after trimming; no control characters but newlines and tabs.")]
        title: String,
        #[graphql(desc = "1 to 20,000 characters after trimming; no control characters but newlines and tabs.")]
        body: String,
        #[graphql(
            desc = "QUESTION, DISCUSSION (the default) or ANNOUNCEMENT (staff only).",
            default_with = "PostKind::Discussion"
        )]
        kind: PostKind,
        #[graphql(
            desc = "Hide your name from classmates (and from staff too if the course says EVERYONE) behind a pseudonym; BAD_USER_INPUT where the course does not allow it (`Course.anonymity` OFF).",
            default
        )]
        anonymous: bool,
        #[graphql(desc = "A QUESTION only its author and staff can read (staff may make it public later).", default)]
        private: bool,
        #[graphql(desc = "0 to 3 of the course's tags (`Course.tags`), by global id.", default)] tag_ids: Vec<ID>,
    ) -> Result<Option<Post>> {
        nullable(async {
            let viewer = viewer(ctx)?;
            let course_id = ids::decode_one(&course_id, NodeKind::Course)?;
            let title = validate_text("title", &title, MAX_TITLE_CHARS)?;
            let body = validate_text("body", &body, MAX_BODY_CHARS)?;
            let tag_ids = decode_tag_list(&tag_ids)?;
            if private && kind != PostKind::Question {
                return Err(AppError::bad_input("only a QUESTION can be private").into());
            }
            // The limit before any reading of the text: a writer over it costs one script call.
            within_limit(ctx, viewer.user_id, WriteKind::Post).await?;
            let mentioned = notifications::checked_mentions(&[&title, &body])?;
            let (course, role) = access::course(ctx, course_id).await?;
            if kind == PostKind::Announcement {
                require_staff(role, "post an announcement")?;
            }
            let state = state(ctx)?;
            let anonymous_to = if anonymous {
                Some(audience::course_anonymity(&state.db, course.course_id).await?.anonymous_to()?)
            } else {
                None
            };
            let new = NewPost {
                course_id: course.course_id,
                user_id: viewer.user_id,
                title: &title,
                body: &body,
                kind,
                anonymous_to,
                private,
            };
            // One statement for the common post (no tags, no mentions, not an announcement);
            // else one transaction.
            let simple = tag_ids.is_empty() && mentioned.is_empty() && kind != PostKind::Announcement;
            let (row, notified, announced) = if simple {
                (posts::create(&state.db, &new).await?, Vec::new(), None)
            } else {
                let txn = state.db.begin().await?;
                let row = posts::create(&txn, &new).await?;
                questions::set_tags(&txn, row.id, row.course_id, &tag_ids).await?;
                let notified = record_notifications(ctx, &txn, Cause::post(&row), &mentioned).await?;
                // Every member hears of an announcement through ONE row, whatever the course's size.
                let announced = match kind {
                    PostKind::Announcement => {
                        Some(announcements::announce(&txn, row.course_id, row.id, viewer.user_id).await?)
                    }
                    PostKind::Question | PostKind::Discussion => None,
                };
                txn.commit().await?;
                (row, notified, announced)
            };
            // Its id may have been asked for before it existed: drop any "missing" marker.
            state.post_cache.invalidate(row.id).await;
            publish(ctx, &row, ActivityKind::PostCreated, row.id).await?;
            notify(ctx, &notified).await;
            if let Some(announced) = announced {
                announced.publish(&state.publisher).await;
            }
            Ok(Post::from(row))
        })
        .await
    }

    /// Changes the title and/or body of your own post (FORBIDDEN for anyone else's) and sets
    /// its `editedAt`; and/or its tags, which its author or staff may change (staff changing
    /// only the tags of someone's post leave `editedAt` alone).
    async fn edit_post(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "The post's global id (`Post.id`).")] post_id: ID,
        #[graphql(desc = "The new title (1 to 200 characters after trimming); omit to keep the old one.")]
        title: Option<String>,
        #[graphql(desc = "The new body (1 to 20,000 characters after trimming); omit to keep the old one.")]
        body: Option<String>,
        #[graphql(
            desc = "The post's tags from now on: 0 to 3 of the course's (`Course.tags`), by global id; omit to keep them. Give `title`, `body` or `tagIds`, else BAD_USER_INPUT."
        )]
        tag_ids: Option<Vec<ID>>,
    ) -> Result<Option<Post>> {
        nullable(async {
            let viewer = viewer(ctx)?;
            let post_id = ids::decode_one(&post_id, NodeKind::Post)?;
            if title.is_none() && body.is_none() && tag_ids.is_none() {
                return Err(AppError::bad_input("give a new `title`, `body` or `tagIds`").into());
            }
            let title = title.map(|t| validate_text("title", &t, MAX_TITLE_CHARS)).transpose()?;
            let body = body.map(|b| validate_text("body", &b, MAX_BODY_CHARS)).transpose()?;
            let tag_ids = tag_ids.map(|ids| ids::decode_all(&ids, NodeKind::Tag)).transpose()?;
            if let Some(tag_ids) = &tag_ids {
                questions::check_tag_list(tag_ids)?;
            }
            let text_edited = title.is_some() || body.is_some();
            within_limit(ctx, viewer.user_id, WriteKind::Edit).await?;
            let (post, role) = access::post(ctx, post_id).await?;
            if text_edited {
                require_author(viewer.user_id, post.user_id)?;
            } else {
                require_author_or_instructor(viewer.user_id, post.user_id, role)?;
            }
            let state = state(ctx)?;
            // Mentions are counted in the post as edited, and refused (the edit rolled back)
            // past the limit; people it already mentioned are not notified again.
            let txn = state.db.begin().await?;
            if let Some(tag_ids) = &tag_ids {
                questions::set_tags(&txn, post.id, post.course_id, tag_ids).await?;
            }
            let (row, notified) = if text_edited {
                let row = posts::edit(&txn, post.id, title.as_deref(), body.as_deref()).await?;
                let mentioned = notifications::checked_mentions(&[&row.title, &row.body])?;
                let notified = record_notifications(ctx, &txn, Cause::post(&row), &mentioned).await?;
                (row, notified)
            } else {
                (posts::find(&txn, post.id).await?.ok_or_else(|| AppError::not_found("post"))?, Vec::new())
            };
            txn.commit().await?;
            state.post_cache.invalidate(post.id).await;
            state.publisher.posts_changed(&[post.id]).await;
            if tag_ids.is_some() {
                publish(ctx, &row, ActivityKind::PostUpdated, row.id).await?;
            }
            notify(ctx, &notified).await;
            Ok(Post::from(row))
        })
        .await
    }

    /// Soft-deletes a post: yours, or any in a course you teach.
    async fn delete_post(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "The post's global id (`Post.id`).")] post_id: ID,
    ) -> Result<Option<DeletePayload>> {
        nullable(async {
            let viewer = viewer(ctx)?;
            let post_id = ids::decode_one(&post_id, NodeKind::Post)?;
            within_limit(ctx, viewer.user_id, WriteKind::Delete).await?;
            let (post, role) = access::post(ctx, post_id).await?;
            require_author_or_instructor(viewer.user_id, post.user_id, role)?;
            let deleted = posts::soft_delete(&state(ctx)?.db, post.id).await?;
            // Also when it was gone already: then the cached entry that let us get here was stale.
            state(ctx)?.post_cache.post_deleted(post.id).await;
            if !deleted {
                return Err(AppError::not_found("post").into());
            }
            publish(ctx, &post, ActivityKind::PostDeleted, post.id).await?;
            let withdrawn = notifications::withdraw_post(&state(ctx)?.db, post.id).await?;
            unread_moved(ctx, &withdrawn).await;
            if post.kind == PostKind::Announcement.as_str()
                && let Some(course_id) = announcements::withdraw(&state(ctx)?.db, post.id).await?
            {
                state(ctx)?.publisher.course_notifications(course_id, None).await;
            }
            Ok(DeletePayload { deleted_id: encode(NodeKind::Post, post.id), post: None, comment: None })
        })
        .await
    }
}

#[derive(Default)]
pub(crate) struct CommentMutations;

#[Object]
impl CommentMutations {
    /// A top-level comment on a post.
    async fn create_comment(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "The post's global id (`Post.id`).")] post_id: ID,
        #[graphql(desc = "1 to 5,000 characters after trimming; no control characters but newlines and tabs.")]
        body: String,
        #[graphql(desc = "Write under a pseudonym, as `createPost`'s `anonymous`.", default)] anonymous: bool,
    ) -> Result<Option<Comment>> {
        nullable(async {
            let viewer = viewer(ctx)?;
            let post_id = ids::decode_one(&post_id, NodeKind::Post)?;
            let body = validate_text("body", &body, MAX_COMMENT_CHARS)?;
            within_limit(ctx, viewer.user_id, WriteKind::Comment).await?;
            let mentioned = notifications::checked_mentions(&[&body])?;
            let (post, _) = access::post(ctx, post_id).await?;
            let anonymous_to = anonymous_to(ctx, anonymous, post.course_id).await?;
            let txn = state(ctx)?.db.begin().await?;
            let row =
                comments::create_comment(&txn, post.id, post.course_id, viewer.user_id, &body, anonymous_to).await?;
            let notified = record_notifications(ctx, &txn, Cause::comment(&row, post.user_id), &mentioned).await?;
            txn.commit().await?;
            state(ctx)?.post_cache.invalidate(row.post_id).await;
            publish(ctx, &post, ActivityKind::CommentCreated, row.id).await?;
            notify(ctx, &notified).await;
            Ok(Comment::from(row))
        })
        .await
    }

    /// A reply to a comment or to a reply. Replies are two levels deep: a reply to a reply is
    /// attached to the root comment, and `replyTo` names the author it answers.
    async fn create_reply(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "The global id of the Comment or Reply answered.")] comment_id: ID,
        #[graphql(desc = "1 to 5,000 characters after trimming; no control characters but newlines and tabs.")]
        body: String,
        #[graphql(desc = "Write under a pseudonym, as `createPost`'s `anonymous`.", default)] anonymous: bool,
    ) -> Result<Option<Reply>> {
        nullable(async {
            let viewer = viewer(ctx)?;
            let body = validate_text("body", &body, MAX_COMMENT_CHARS)?;
            let (kind, comment_id) = ids::decode_as(&comment_id, COMMENT_KINDS)?;
            within_limit(ctx, viewer.user_id, WriteKind::Comment).await?;
            let mentioned = notifications::checked_mentions(&[&body])?;
            let (target, post, _) = access::comment_in_post(ctx, kind, comment_id).await?;
            let anonymous_to = anonymous_to(ctx, anonymous, target.course_id).await?;
            let txn = state(ctx)?.db.begin().await?;
            let row = comments::create_reply(&txn, &target, viewer.user_id, &body, anonymous_to).await?;
            let notified = record_notifications(ctx, &txn, Cause::comment(&row, target.user_id), &mentioned).await?;
            txn.commit().await?;
            state(ctx)?.post_cache.invalidate(row.post_id).await;
            publish(ctx, &post, ActivityKind::ReplyCreated, row.id).await?;
            notify(ctx, &notified).await;
            Ok(Reply::from(row))
        })
        .await
    }

    /// Changes the body of your own comment or reply (FORBIDDEN for anyone else's) and sets its
    /// `editedAt`.
    async fn edit_comment(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "The global id of a Comment or a Reply.")] comment_id: ID,
        #[graphql(desc = "The new text: 1 to 5,000 characters after trimming.")] body: String,
    ) -> Result<Option<AnyComment>> {
        nullable(async {
            let viewer = viewer(ctx)?;
            let body = validate_text("body", &body, MAX_COMMENT_CHARS)?;
            let (kind, comment_id) = ids::decode_as(&comment_id, COMMENT_KINDS)?;
            within_limit(ctx, viewer.user_id, WriteKind::Edit).await?;
            let mentioned = notifications::checked_mentions(&[&body])?;
            let (comment, _) = access::comment(ctx, kind, comment_id).await?;
            require_author(viewer.user_id, comment.user_id)?;
            let txn = state(ctx)?.db.begin().await?;
            let row = comments::edit(&txn, &comment, &body).await?;
            // An edit notifies only the people it newly mentions; its reply was notified already.
            let cause = Cause { answers: None, ..Cause::comment(&row, row.user_id) };
            let notified = record_notifications(ctx, &txn, cause, &mentioned).await?;
            txn.commit().await?;
            notify(ctx, &notified).await;
            Ok(AnyComment::from_row(row))
        })
        .await
    }

    /// Soft-deletes a comment (with its replies) or a reply: yours, or any in a course you teach.
    async fn delete_comment(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "The global id of a Comment or a Reply.")] comment_id: ID,
    ) -> Result<Option<DeletePayload>> {
        nullable(async {
            let viewer = viewer(ctx)?;
            let (kind, comment_id) = ids::decode_as(&comment_id, COMMENT_KINDS)?;
            within_limit(ctx, viewer.user_id, WriteKind::Delete).await?;
            let (comment, post, role) = access::comment_in_post(ctx, kind, comment_id).await?;
            require_author_or_instructor(viewer.user_id, comment.user_id, role)?;
            if !comments::soft_delete(&state(ctx)?.db, &comment).await? {
                return Err(AppError::not_found("comment").into());
            }
            let withdrawn = notifications::withdraw_comment(&state(ctx)?.db, comment.id).await?;
            unread_moved(ctx, &withdrawn).await;
            state(ctx)?.post_cache.invalidate(comment.post_id).await;
            let (kind, activity) = if comment.parent_id.is_some() {
                (NodeKind::Reply, ActivityKind::ReplyDeleted)
            } else {
                (NodeKind::Comment, ActivityKind::CommentDeleted)
            };
            publish(ctx, &post, activity, comment.id).await?;
            // The parents as they are now, read from PostgreSQL (not the cache just invalidated).
            let db = &state(ctx)?.db;
            let post = posts::find(db, comment.post_id).await?.map(Post::from);
            let parent = match comment.parent_id {
                Some(root_id) => comments::find_many(db, &[root_id]).await?.into_iter().next().map(Comment::from),
                None => None,
            };
            Ok(DeletePayload { deleted_id: encode(kind, comment.id), post, comment: parent })
        })
        .await
    }
}

#[derive(Default)]
pub(crate) struct LikeMutations;

#[Object]
impl LikeMutations {
    /// Likes a post; liking it again changes nothing.
    async fn like_post(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "The post's global id (`Post.id`).")] post_id: ID,
    ) -> Result<Option<Post>> {
        nullable(async { set_post_like(ctx, &post_id, true).await }).await
    }

    /// Takes back a like; unliking again changes nothing.
    async fn unlike_post(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "The post's global id (`Post.id`).")] post_id: ID,
    ) -> Result<Option<Post>> {
        nullable(async { set_post_like(ctx, &post_id, false).await }).await
    }

    /// Likes a comment or a reply; idempotent.
    async fn like_comment(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "The global id of a Comment or a Reply.")] comment_id: ID,
    ) -> Result<Option<AnyComment>> {
        nullable(async { set_comment_like(ctx, &comment_id, true).await }).await
    }

    /// Takes back a like on a comment or reply; idempotent.
    async fn unlike_comment(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "The global id of a Comment or a Reply.")] comment_id: ID,
    ) -> Result<Option<AnyComment>> {
        nullable(async { set_comment_like(ctx, &comment_id, false).await }).await
    }
}

#[derive(Default)]
pub(crate) struct ViewMutations;

#[Object]
impl ViewMutations {
    /// Starts viewing a post: returns a ticket to complete after `minDwellMs` (server-measured).
    /// Limited per user: starts per minute, and tickets open at once. Views are counted over
    /// HTTP (`POST /graphql`) only; over the websocket this is BAD_USER_INPUT.
    async fn start_post_view(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "The post's global id (`Post.id`).")] post_id: ID,
    ) -> Result<Option<ViewTicket>> {
        nullable(async {
            let viewer = viewer(ctx)?;
            let post_id = ids::decode_one(&post_id, NodeKind::Post)?;
            let ip = client_ip(ctx)?;
            let views = &state(ctx)?.views;
            // A hot post is in memory: the access check costs no round trip, so the admission
            // and the ticket go to Redis together.
            if access::post_in_memory(ctx, post_id).await?.is_some() {
                let started = views.admit_and_open(viewer.user_id, post_id, ip).await?;
                return Ok(ViewTicket { ticket: started.ticket, min_dwell_ms: started.min_dwell.as_millis() as i64 });
            }
            let admission = views.admit(viewer.user_id, post_id).await?;
            let started = match access::post(ctx, post_id).await {
                Ok(_) => views.open(&admission, ip).await,
                Err(err) => Err(err),
            };
            let started = match started {
                Ok(started) => started,
                Err(err) => {
                    views.withdraw(&admission).await;
                    return Err(err.into());
                }
            };
            Ok(ViewTicket { ticket: started.ticket, min_dwell_ms: started.min_dwell.as_millis() as i64 })
        })
        .await
    }

    /// Completes a view. It counts if it lasted long enough, the ticket is unused and the
    /// caller under both caps; otherwise `reason` says why not. Another user's ticket, or one
    /// that does not exist, is NOT_FOUND. HTTP (`POST /graphql`) only, as `startPostView`.
    async fn complete_post_view(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "The `ticket` that `startPostView` returned.")] ticket: String,
    ) -> Result<Option<ViewResult>> {
        nullable(async {
            let viewer = viewer(ctx)?;
            let ip = client_ip(ctx)?;
            let outcome = state(ctx)?.views.complete(viewer.user_id, &ticket, ip).await?;
            Ok(match outcome {
                ViewOutcome::Counted => ViewResult { counted: true, reason: None },
                ViewOutcome::Refused(why) => ViewResult { counted: false, reason: Some(why) },
            })
        })
        .await
    }
}

/// The client address the HTTP layer put into the request (views are not counted over the
/// websocket, which has no per-operation address).
fn client_ip(ctx: &Context<'_>) -> Result<std::net::IpAddr> {
    ctx.data_opt::<ClientIp>()
        .map(|c| c.0)
        .ok_or_else(|| AppError::bad_input("post views are started and completed over POST /graphql").into())
}

/// What a comment id may name: a top-level comment or a reply.
const COMMENT_KINDS: &[NodeKind] = &[NodeKind::Comment, NodeKind::Reply];

/// Counts a write of `kind` against the viewer's limit, or refuses it with RATE_LIMITED.
pub(super) async fn within_limit(ctx: &Context<'_>, user_id: i64, kind: WriteKind) -> Result<()> {
    state(ctx)?.write_limits.check(user_id, kind).await?;
    Ok(())
}

/// Announces a committed content change to the course's live subscribers.
/// Publishes an event of `post` (the post itself, or the post of the comment or reply
/// `node_id`): a private post's events reach only its author and staff.
pub(super) async fn publish(ctx: &Context<'_>, post: &PostRow, kind: ActivityKind, node_id: i64) -> Result<()> {
    let private_to = post.private.then_some(post.user_id);
    let actor = Some(viewer(ctx)?.user_id);
    let activity = Activity { course_id: post.course_id, kind, node_id, post_id: post.id, private_to, actor };
    state(ctx)?.publisher.activity(activity).await;
    Ok(())
}

/// A post's tag ids: the count checked before any id is decoded (a list of thousands costs
/// one comparison), then each id, then repeats.
pub(super) fn decode_tag_list(raw: &[ID]) -> AppResult<Vec<i64>> {
    if raw.len() > questions::MAX_TAGS_PER_POST {
        return Err(AppError::bad_input(format!("a post carries at most {} tags", questions::MAX_TAGS_PER_POST)));
    }
    let tag_ids = ids::decode_all(raw, NodeKind::Tag)?;
    questions::check_tag_list(&tag_ids)?;
    Ok(tag_ids)
}

/// What an anonymous write records (`anonymous_to`), as the course allows it now; `None`
/// for a signed one (no statement).
async fn anonymous_to(ctx: &Context<'_>, anonymous: bool, course_id: i64) -> Result<Option<&'static str>> {
    if !anonymous {
        return Ok(None);
    }
    Ok(Some(audience::course_anonymity(&state(ctx)?.db, course_id).await?.anonymous_to()?))
}

/// Staff only: FORBIDDEN for a student, saying what they tried.
pub(super) fn require_staff(role: Role, what: &str) -> AppResult<()> {
    if role == Role::Instructor {
        Ok(())
    } else {
        Err(AppError::Forbidden(format!("only staff (the course's instructors) may {what}")))
    }
}

/// Writes the notifications of a cause inside its transaction.
async fn record_notifications(
    ctx: &Context<'_>,
    txn: &impl ConnectionTrait,
    cause: Cause,
    mentioned: &[String],
) -> Result<Vec<Notified>> {
    Ok(notifications::record(txn, cause, mentioned, state(ctx)?.settings.notifications_per_user).await?)
}

/// Tells the recipients of committed notifications, on every instance.
async fn notify(ctx: &Context<'_>, notified: &[Notified]) {
    if let Ok(state) = state(ctx) {
        state.publisher.notifications(notified.iter().map(|n| (n.recipient_id, Some(n.id))).collect()).await;
    }
}

/// Tells users that their unread count moved (notifications withdrawn or marked read).
pub(super) async fn unread_moved(ctx: &Context<'_>, users: &[i64]) {
    if let Ok(state) = state(ctx) {
        state.publisher.notifications(users.iter().map(|user| (*user, None)).collect()).await;
    }
}

async fn set_post_like(ctx: &Context<'_>, post_id: &ID, liked: bool) -> Result<Post> {
    let viewer = viewer(ctx)?;
    let post_id = ids::decode_one(post_id, NodeKind::Post)?;
    let (mut post, membership) = access::post_to_like(ctx, post_id).await?;
    let read = ShownCount { like_count: post.like_count, version: post.like_version };
    let shown = state(ctx)?
        .likes
        .set(viewer.user_id, post.course_id, LikeTarget::Post(post.id), liked, read, membership)
        .await?;
    (post.like_count, post.like_version) = (shown.like_count, shown.version);
    record_liked(ctx, post.course_id, LikeTarget::Post(post.id), liked).await?;
    Ok(Post::from(post))
}

async fn set_comment_like(ctx: &Context<'_>, comment_id: &ID, liked: bool) -> Result<AnyComment> {
    let viewer = viewer(ctx)?;
    let (mut comment, _) = access::any_comment(ctx, comment_id).await?;
    let read = ShownCount { like_count: comment.like_count, version: comment.like_version };
    let shown = state(ctx)?
        .likes
        .set(viewer.user_id, comment.course_id, LikeTarget::Comment(comment.id), liked, read, Membership::Verified)
        .await?;
    (comment.like_count, comment.like_version) = (shown.like_count, shown.version);
    record_liked(ctx, comment.course_id, LikeTarget::Comment(comment.id), liked).await?;
    Ok(AnyComment::from_row(comment))
}
